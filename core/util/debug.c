/* debug.c - TBRT_DEBUG lines on stderr (debug.h) and their public face:
 * tbrt_debug_level, tbrt_debug_set, tbrt_debug_log (tbrt.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tbrt.h"
#include "util/debug.h"

atomic_int dbg_level;

/* Read TBRT_DEBUG once, when the library is loaded: "0".."3"; anything
 * else that is set ("yes") means events, as GGML_RPC_DEBUG's "set" does. */
__attribute__((constructor)) static void dbg_init(void)
{
    const char *s = getenv("TBRT_DEBUG");
    if (!s || !*s)
        return;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s)
        v = DBG_EVENT;
    atomic_store(&dbg_level, (int)(v < 0 ? 0 : v > DBG_MAX ? DBG_MAX : v));
}

static void dbg_vline(int link_id, const char *fmt, va_list ap)
{
    char line[1024];
    int n = link_id > 0 ? snprintf(line, sizeof line, "tbrt: link %d: ", link_id)
                        : snprintf(line, sizeof line, "tbrt: ");
    if (n < 0)
        return;
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;      /* cut, but keep the newline */
    line[len++] = '\n';
    /* one write: a line never interleaves with another process's */
    int saved = errno;
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
    errno = saved;
}

void dbg_line(int link_id, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dbg_vline(link_id, fmt, ap);
    va_end(ap);
}

int tbrt_debug_level(void) { return atomic_load_explicit(&dbg_level, memory_order_relaxed); }

int tbrt_debug_set(int level)
{
    if (level < 0)
        level = 0;
    if (level > DBG_MAX)
        level = DBG_MAX;
    return atomic_exchange(&dbg_level, level);
}

void tbrt_debug_log(int level, int link_id, const char *msg)
{
    if (level < 1 || !DBG_ON(level))
        return;
    /* a multi-line message becomes several prefixed lines */
    const char *p = msg ? msg : "";
    do {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        dbg_line(link_id, "%.*s", len, p);
        p = nl ? nl + 1 : NULL;
    } while (p && *p);
}
