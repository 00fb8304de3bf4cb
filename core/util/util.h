/* util.h - small helpers shared by the core: clocks, error text, formatting. */
#ifndef TBRT_UTIL_H
#define TBRT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

#define TBRT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TBRT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TBRT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TBRT_LIKELY(x) __builtin_expect(!!(x), 1)
#define TBRT_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* A scan of n entries that looks at entry `at` first (where the last one
 * was found: lookups that come in runs find it at once), then the rest in
 * order: the index of look k (0 <= k < n, 0 <= at < n). */
static inline int scan_from_hint(int k, int at) { return k == 0 ? at : k <= at ? k - 1 : k; }

/* Monotonic time in seconds / nanoseconds. */
double now_s(void);
uint64_t now_ns(void);

/* snprintf into err (if non-NULL) and return -code. */
int err_set(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int err_vset(char *err, size_t errlen, int code, const char *fmt, va_list ap);

/* Append to a NUL-terminated buffer without overflowing it. */
void str_append(char *buf, size_t buflen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copy with truncation, always NUL-terminated. */
void str_copy(char *dst, size_t dstlen, const char *src);

/* "1.5 MiB" style size text. */
void size_str(uint64_t bytes, char *out, size_t outlen);

/* Read an environment variable as a number / string with a default. */
long env_long(const char *name, long dflt);
double env_double(const char *name, double dflt);
const char *env_str(const char *name, const char *dflt);

#endif
