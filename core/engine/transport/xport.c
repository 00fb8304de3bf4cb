/* xport.c - what every transport shares: the failure record the engine
 * adopts as the link's error, and the teardown log. */
#include <stdarg.h>
#include <stdio.h>

#include "engine/transport/transport.h"
#include "util/util.h"

int xport_fail(struct xport *x, int err, const char *fmt, ...)
{
    if (x->err)
        return -x->err;         /* the first failure is the one that counts */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->why, sizeof x->why, fmt, ap);
    va_end(ap);
    x->err = err;
    return -err;
}

void xport_log_teardown(struct xport *x, const char *what)
{
    str_append(x->teardown_log, sizeof x->teardown_log, "%s%s", x->teardown_log[0] ? "," : "",
               what);
}
