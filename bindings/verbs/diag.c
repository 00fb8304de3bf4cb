/* diag.c - what the binding says and records about itself:
 *
 *   TBRT_DEBUG=1         every failure and every unsupported feature is
 *                        explained on stderr ("tbrt verbs: ibv_create_srq:
 *                        EOPNOTSUPP: ..."): libibverbs can only return an
 *                        errno, the device knows why
 *   TBRT_VERBS_FAIL      "ibv_create_cq:ENOMEM,post_send:-EIO": make those
 *                        calls fail with that errno (negative: returned as
 *                        -errno, as some providers do), for testing callers'
 *                        error paths. Lifecycle calls read it on every call;
 *                        the data path (post_send, post_recv, poll_cq,
 *                        req_notify_cq) only when it was set at load time,
 *                        so an ordinary run pays nothing for it.
 *   tbrt_verbs_trace()   the lifecycle calls in order ("ibv_open_device,
 *                        ibv_alloc_pd,..."), tbrt_verbs_counts() how often the
 *                        data path ran: exported diagnostics (version
 *                        TBRT_VERBS_DIAG) that specs read to check the order
 *                        in which a caller tore things down. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_lib.h"

bool vb_debug;
bool vb_fail_armed;
_Atomic unsigned long vb_counts[VC_COUNT];

__attribute__((constructor)) static void diag_init(void)
{
    const char *d = getenv("TBRT_DEBUG");
    vb_debug = d && *d && strcmp(d, "0") != 0;
    vb_fail_armed = getenv("TBRT_VERBS_FAIL") != NULL;
}

void vb_say(const char *call, int err, const char *fmt, ...)
{
    if (!vb_debug)
        return;
    char msg[TBRT_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tbrt verbs: %s: %s: %s\n", call, tbrt_errname(-err), msg);
}

int vb_failed(const char *call, int rc, tbrt_dev *dev)
{
    int err = rc < 0 ? -rc : EIO;
    vb_say(call, err, "%s", dev ? tbrt_dev_why(dev) : "");
    return err;
}

int vb_unsupported(const char *call, const char *fmt, ...)
{
    if (vb_debug) {
        char why[TBRT_WHY_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        vb_say(call, EOPNOTSUPP, "not supported: %s", why);
    }
    errno = EOPNOTSUPP;
    return EOPNOTSUPP;
}

static const struct { const char *name; int err; } errnames[] = {
    {"ENOMEM", ENOMEM}, {"EPERM", EPERM}, {"EACCES", EACCES}, {"EMFILE", EMFILE},
    {"ENOSYS", ENOSYS}, {"EINVAL", EINVAL}, {"EBUSY", EBUSY}, {"EIO", EIO},
    {"ENODEV", ENODEV}, {"EOPNOTSUPP", EOPNOTSUPP}, {"ENODATA", ENODATA},
    {"EAGAIN", EAGAIN}, {"EBADF", EBADF},
};

int vb_inject(const char *call)
{
    const char *spec = getenv("TBRT_VERBS_FAIL");
    if (!spec || !*spec)
        return 0;
    size_t n = strlen(call);
    for (const char *p = spec; (p = strstr(p, call)) != NULL; p += n) {
        if ((p != spec && p[-1] != ',') || p[n] != ':')
            continue;
        const char *e = p + n + 1;
        int sign = 1;
        if (*e == '-') {
            sign = -1;
            e++;
        }
        size_t len = strcspn(e, ",");
        for (size_t i = 0; i < sizeof errnames / sizeof errnames[0]; i++)
            if (strlen(errnames[i].name) == len && strncmp(errnames[i].name, e, len) == 0)
                return sign * errnames[i].err;
        return sign * EIO;
    }
    return 0;
}

/* ---- the lifecycle trace and the counters ---------------------------------- */

#define TRACE_MAX 8192
static char trace[TRACE_MAX];
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;

void vb_trace(const char *call)
{
    pthread_mutex_lock(&trace_lock);
    size_t used = strlen(trace);
    if (used + strlen(call) + 2 < sizeof trace)
        snprintf(trace + used, sizeof trace - used, "%s%s", used ? "," : "", call);
    pthread_mutex_unlock(&trace_lock);
}

/* Exported (TBRT_VERBS_DIAG): valid until the next trace call. */
const char *tbrt_verbs_trace(void) { return trace; }

void tbrt_verbs_trace_reset(void)
{
    pthread_mutex_lock(&trace_lock);
    trace[0] = 0;
    pthread_mutex_unlock(&trace_lock);
    for (int i = 0; i < VC_COUNT; i++)
        atomic_store(&vb_counts[i], 0);
}

const char *tbrt_verbs_counts(void)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "post_send=%lu post_recv=%lu poll_cq=%lu req_notify_cq=%lu "
             "get_cq_event=%lu ack_cq_events=%lu", atomic_load(&vb_counts[VC_POST_SEND]),
             atomic_load(&vb_counts[VC_POST_RECV]), atomic_load(&vb_counts[VC_POLL_CQ]),
             atomic_load(&vb_counts[VC_REQ_NOTIFY]), atomic_load(&vb_counts[VC_GET_EVENT]),
             atomic_load(&vb_counts[VC_ACK_EVENTS]));
    return buf;
}

/* Which library this is, for tools that want to know they run on tbrt. */
const char *tbrt_verbs_flavor(void) { return VB_FLAVOR_NAME; }
