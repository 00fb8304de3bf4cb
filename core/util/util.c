/* util.c - clocks, error text and formatting helpers for the core. */
#include "util/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int err_vset(char *err, size_t errlen, int code, const char *fmt, va_list ap)
{
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    return -code;
}

int err_set(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, errlen, code, fmt, ap);
    va_end(ap);
    return -code;
}

void str_append(char *buf, size_t buflen, const char *fmt, ...)
{
    size_t used = strnlen(buf, buflen);
    if (used + 1 >= buflen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, buflen - used, fmt, ap);
    va_end(ap);
}

void str_copy(char *dst, size_t dstlen, const char *src)
{
    if (!dstlen)
        return;
    snprintf(dst, dstlen, "%s", src ? src : "");
}

void size_str(uint64_t bytes, char *out, size_t outlen)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024.0 && u + 1 < TBRT_ARRAY_LEN(unit)) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(out, outlen, "%lluB", (unsigned long long)bytes);
    else
        snprintf(out, outlen, "%.1f%s", v, unit[u]);
}

long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || *end)
        return dflt;
    return v;
}

double env_double(const char *name, double dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    double v = strtod(s, &end);
    return *end ? dflt : v;
}

const char *env_str(const char *name, const char *dflt)
{
    const char *s = getenv(name);
    return (s && *s) ? s : dflt;
}
