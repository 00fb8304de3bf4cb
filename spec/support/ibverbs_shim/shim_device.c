/* shim_device.c - the shim's devices and contexts: the device list, opening
 * and closing, device/port/GID queries, plus the trace, counters and
 * failure injection the specs use. See shim.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* verbs.h turns these names into inline wrappers; we define the symbols. */
#undef ibv_query_port

/* ---- trace, counters, failure injection ------------------------------------------- */

#define TRACE_MAX 8192
static char trace[TRACE_MAX];
static unsigned long counts[SC_COUNT];

void shim_log(const char *call)
{
    size_t used = strlen(trace);
    if (used + strlen(call) + 2 < sizeof trace)
        snprintf(trace + used, sizeof trace - used, "%s%s", used ? "," : "", call);
}

void shim_count(enum shim_counter c) { counts[c]++; }

const char *shim_trace(void) { return trace; }

void shim_trace_reset(void)
{
    trace[0] = 0;
    memset(counts, 0, sizeof counts);
}

const char *shim_counts(void)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "post_send=%lu post_recv=%lu poll_cq=%lu req_notify_cq=%lu "
             "get_cq_event=%lu ack_cq_events=%lu", counts[SC_POST_SEND], counts[SC_POST_RECV],
             counts[SC_POLL_CQ], counts[SC_REQ_NOTIFY], counts[SC_GET_EVENT],
             counts[SC_ACK_EVENTS]);
    return buf;
}

static const struct { const char *name; int err; } errnames[] = {
    {"ENOMEM", ENOMEM}, {"EPERM", EPERM}, {"EACCES", EACCES}, {"EMFILE", EMFILE},
    {"ENOSYS", ENOSYS}, {"EINVAL", EINVAL}, {"EBUSY", EBUSY}, {"EIO", EIO},
    {"ENODEV", ENODEV}, {"EOPNOTSUPP", EOPNOTSUPP}, {"ENODATA", ENODATA},
};

int shim_should_fail(const char *call)
{
    const char *spec = getenv("TBRT_SHIM_FAIL");
    if (!spec || !*spec)
        return 0;
    size_t n = strlen(call);
    for (const char *p = spec; (p = strstr(p, call)) != NULL; p += n) {
        bool starts = p == spec || p[-1] == ',';
        if (!starts || p[n] != ':')
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

int shim_failed(const char *call, int rc, tbrt_dev *dev)
{
    if (getenv("TBRT_SHIM_DEBUG"))
        fprintf(stderr, "libibverbs-soft: %s: %s: %s\n", call, tbrt_errname(rc),
                dev ? tbrt_dev_why(dev) : "");
    return rc < 0 ? -rc : EIO;
}

/* ---- devices ------------------------------------------------------------------------ */

static struct ibv_device devices[SHIM_MAX_DEVICES];

static int vctx_query_port(struct ibv_context *context, uint8_t port,
                           struct ibv_port_attr *attr, size_t len);

static int device_count(void)
{
    const char *v = getenv("TBRT_SHIM_DEVICES");
    int n = v && *v ? atoi(v) : 1;
    return n < 0 ? 0 : n > SHIM_MAX_DEVICES ? SHIM_MAX_DEVICES : n;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
    SHIM_FAIL_NULL("ibv_get_device_list");
    int n = device_count();
    struct ibv_device **list = calloc((size_t)n + 1, sizeof *list);
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        struct ibv_device *d = &devices[i];
        memset(d, 0, sizeof *d);
        d->node_type = IBV_NODE_CA;
        d->transport_type = IBV_TRANSPORT_IB;
        snprintf(d->name, sizeof d->name, "softib%d", i);
        snprintf(d->dev_name, sizeof d->dev_name, "uverbs%d", i);
        list[i] = d;
    }
    if (num_devices)
        *num_devices = n;
    return list;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *ibv_get_device_name(struct ibv_device *device)
{
    SHIM_FAIL_NULL("ibv_get_device_name");
    return device->name;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    SHIM_FAIL_NULL("ibv_open_device");
    int index = (int)(device - devices);
    if (index < 0 || index >= SHIM_MAX_DEVICES) {
        errno = ENODEV;
        return NULL;
    }
    const char *p = getenv("TBRT_SHIM_PERSONALITY");
    tbrt_dev_opts opts = {.personality = p && *p ? p : SHIM_DEFAULT_PERSONALITY};
    char soft[16], err[TBRT_WHY_MAX];
    snprintf(soft, sizeof soft, "soft%d", index);
    struct shim_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    int rc = tbrt_dev_open(soft, &opts, &c->dev, err, sizeof err);
    if (rc) {
        if (getenv("TBRT_SHIM_DEBUG"))
            fprintf(stderr, "libibverbs-soft: ibv_open_device %s: %s\n", device->name, err);
        free(c);
        errno = -rc;
        return NULL;
    }
    struct ibv_context *ctx = &c->v.context;
    ctx->device = device;
    ctx->cmd_fd = -1;
    ctx->async_fd = -1;
    ctx->num_comp_vectors = 1;
    pthread_mutex_init(&ctx->mutex, NULL);
    ctx->ops.post_send = shim_post_send;
    ctx->ops.post_recv = shim_post_recv;
    ctx->ops.poll_cq = shim_poll_cq;
    ctx->ops.req_notify_cq = shim_req_notify_cq;
    const char *compat = getenv("TBRT_SHIM_COMPAT_CONTEXT");
    if (!(compat && *compat == '1')) {
        /* an extended context, as rdma-core's providers make: verbs.h's
         * inline ibv_query_port uses v.query_port */
        ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
        c->v.sz = sizeof c->v;
        c->v.query_port = vctx_query_port;
    }
    shim_log("ibv_open_device");
    return ctx;
}

int ibv_close_device(struct ibv_context *context)
{
    struct shim_ctx *c = shim_ctx_of(context);
    shim_log("ibv_close_device");
    tbrt_dev_close(c->dev);
    pthread_mutex_destroy(&context->mutex);
    free(c);
    return 0;
}

/* ---- queries ------------------------------------------------------------------------- */

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
    SHIM_FAIL_INT("ibv_query_device");
    tbrt_dev *dev = shim_ctx_of(context)->dev;
    int rc = tbrt_dev_query(dev, attr);
    return rc ? shim_failed("ibv_query_device", rc, dev) : 0;
}

static int port_attr(struct ibv_context *context, uint8_t port, struct ibv_port_attr *a)
{
    tbrt_dev *dev = shim_ctx_of(context)->dev;
    int rc = tbrt_port_query(dev, port, a);
    return rc ? shim_failed("ibv_query_port", rc, dev) : 0;
}

static int vctx_query_port(struct ibv_context *context, uint8_t port,
                           struct ibv_port_attr *attr, size_t len)
{
    SHIM_FAIL_INT("ibv_query_port");
    shim_log("verbs_context.query_port");
    struct ibv_port_attr a;
    int rc = port_attr(context, port, &a);
    if (!rc)
        memcpy(attr, &a, len < sizeof a ? len : sizeof a);
    return rc;
}

/* The exported call fills only the pre-extension part of the struct (up to
 * `flags`), as rdma-core's compat entry point does. */
int ibv_query_port(struct ibv_context *context, uint8_t port,
                   struct _compat_ibv_port_attr *attr)
{
    SHIM_FAIL_INT("ibv_query_port");
    shim_log("ibv_query_port");
    struct ibv_port_attr a;
    int rc = port_attr(context, port, &a);
    if (!rc)
        memcpy(attr, &a, offsetof(struct ibv_port_attr, flags));
    return rc;
}

/* As rdma-core: 0, or -1 with errno; an empty entry reads as a zero GID. */
int ibv_query_gid(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid)
{
    if (shim_should_fail("ibv_query_gid")) {
        errno = abs(shim_should_fail("ibv_query_gid"));
        return -1;
    }
    tbrt_dev *dev = shim_ctx_of(context)->dev;
    struct ibv_gid_entry e;
    int rc = tbrt_gid_query(dev, port, index, &e);
    if (rc == -ENODATA) {
        memset(gid, 0, sizeof *gid);
        return 0;
    }
    if (rc < 0) {
        errno = shim_failed("ibv_query_gid", rc, dev);
        return -1;
    }
    *gid = e.gid;
    return 0;
}

#ifndef SHIM_APPLE
/* As rdma-core: 0 or an errno; ENODATA for an empty entry. */
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port, uint32_t index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
    SHIM_FAIL_INT("_ibv_query_gid_ex");
    if (flags || entry_size < sizeof *entry || port > 255 || index > 0x7fffffff)
        return EINVAL;
    tbrt_dev *dev = shim_ctx_of(context)->dev;
    int rc = tbrt_gid_query(dev, (uint8_t)port, (int)index, entry);
    if (rc == -ENODATA)
        return ENODATA;
    if (rc < 0)
        return shim_failed("_ibv_query_gid_ex", rc, dev);
    /* rc 1: a personality without GID types; rdma-core then says IB */
    return 0;
}
#endif
