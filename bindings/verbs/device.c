/* device.c - the binding's devices and contexts: the device list, names,
 * GUIDs and indexes, opening a context (a verbs_context whose tables point
 * at this library) and closing it.
 *
 * The devices are softib0..softib<N-1>, N = $TBRT_VERBS_DEVICES (1, at most
 * VB_MAX_DEVICES), each the soft device soft<i> opened in the personality
 * $TBRT_VERBS_PERSONALITY. They are made once and never freed, as
 * libibverbs keeps its devices for the life of the process: a context may
 * outlive the list it was opened from. The soft device reports vendor 0 and
 * its own part ids, never a Mellanox one, so programs that switch on the
 * vendor (perftest, UCX) take their generic verbs paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs_lib.h"

static struct vb_device devices[VB_MAX_DEVICES];
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

static int device_count(void)
{
    const char *v = getenv("TBRT_VERBS_DEVICES");
    int n = v && *v ? atoi(v) : 1;
    return n < 0 ? 0 : n > VB_MAX_DEVICES ? VB_MAX_DEVICES : n;
}

static void devices_init(void)
{
    for (int i = 0; i < VB_MAX_DEVICES; i++) {
        struct vb_device *d = &devices[i];
        d->index = i;
        d->ibv.node_type = IBV_NODE_CA;
        d->ibv.transport_type = IBV_TRANSPORT_IB;
        snprintf(d->ibv.name, sizeof d->ibv.name, "softib%d", i);
        snprintf(d->ibv.dev_name, sizeof d->ibv.dev_name, "uverbs%d", i);
        /* no sysfs behind them: paths that read nothing */
        snprintf(d->ibv.dev_path, sizeof d->ibv.dev_path, "/sys/class/infiniband_verbs/uverbs%d", i);
        snprintf(d->ibv.ibdev_path, sizeof d->ibv.ibdev_path, "/sys/class/infiniband/softib%d", i);
    }
}

struct vb_device *vb_device_of(struct ibv_device *d)
{
    struct vb_device *v = (struct vb_device *)d;
    if (!d || v < devices || v >= devices + VB_MAX_DEVICES)
        return NULL;
    return v;
}

static const char *personality(void)
{
    const char *p = getenv("TBRT_VERBS_PERSONALITY");
    return p && *p ? p : VB_DEFAULT_PERSONALITY;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
    VB_INJECT_NULL("ibv_get_device_list");
    pthread_once(&devices_once, devices_init);
    int n = device_count();
    struct ibv_device **list = calloc((size_t)n + 1, sizeof *list);
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    for (int i = 0; i < n; i++)
        list[i] = &devices[i].ibv;
    if (num_devices)
        *num_devices = n;
    return list;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *ibv_get_device_name(struct ibv_device *device)
{
    VB_INJECT_NULL("ibv_get_device_name");
    return device ? device->name : NULL;
}

int ibv_get_device_index(struct ibv_device *device)
{
    struct vb_device *d = vb_device_of(device);
    return d ? d->index : -1;
}

static int open_soft(struct vb_device *d, tbrt_dev **dev)
{
    char soft[16], err[TBRT_WHY_MAX] = "";
    snprintf(soft, sizeof soft, "soft%d", d->index);
    tbrt_dev_opts opts = {.personality = personality()};
    int rc = tbrt_dev_open(soft, &opts, dev, err, sizeof err);
    if (rc)
        vb_say("ibv_open_device", -rc, "%s over %s: %s", d->ibv.name, soft, err);
    return rc;
}

/* The node GUID without a context: the device is opened once to ask. */
__be64 ibv_get_device_guid(struct ibv_device *device)
{
    struct vb_device *d = vb_device_of(device);
    if (!d)
        return 0;
    if (!atomic_load(&d->guid_known)) {
        tbrt_dev *dev;
        struct ibv_device_attr a;
        if (open_soft(d, &dev))
            return 0;
        if (tbrt_dev_query(dev, &a) == 0) {
            d->guid = a.node_guid;
            atomic_store(&d->guid_known, 1);
        }
        tbrt_dev_close(dev);
    }
    return d->guid;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    VB_INJECT_NULL("ibv_open_device");
    struct vb_device *d = vb_device_of(device);
    if (!d) {
        vb_say("ibv_open_device", ENODEV, "not a device of this library's list");
        errno = ENODEV;
        return NULL;
    }
    struct vb_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    int rc = open_soft(d, &c->dev);
    if (rc == 0 && (rc = tbrt_dev_query(c->dev, &c->attr)) != 0)
        vb_failed("ibv_open_device", rc, c->dev);
    if (rc == 0 && (c->events_fd = tbrt_dev_event_fd(c->dev)) < 0)
        rc = vb_failed("ibv_open_device", c->events_fd, c->dev) ? c->events_fd : -EIO;
    if (rc) {
        if (c->dev)
            tbrt_dev_close(c->dev);
        free(c);
        errno = -rc;
        return NULL;
    }
    c->vdev = d;
    d->guid = c->attr.node_guid;
    atomic_store(&d->guid_known, 1);
    pthread_mutex_init(&c->lock, NULL);

    struct ibv_context *ctx = &c->v.context;
    ctx->device = device;
    ctx->cmd_fd = -1;           /* no kernel: nothing to ioctl */
    ctx->async_fd = c->events_fd;     /* the device's: it closes it */
    ctx->num_comp_vectors = 1;
    pthread_mutex_init(&ctx->mutex, NULL);
    ctx->ops.post_send = vb_post_send;
    ctx->ops.post_recv = vb_post_recv;
    ctx->ops.poll_cq = vb_poll_cq;
    ctx->ops.req_notify_cq = vb_req_notify_cq;
    vb_srq_init_ops(c);
    const char *compat = getenv("TBRT_VERBS_COMPAT_CONTEXT");
    if (!(compat && *compat == '1')) {
        /* an extended context, as every rdma-core provider makes; the
         * compat setting gives a plain one, so callers' fallbacks (the
         * exported ibv_query_port) can be tested */
        ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
        c->v.sz = sizeof c->v;
        c->v.query_port = vb_query_port;
        c->v.query_device_ex = vb_query_device_ex;
        c->v.query_rt_values = vb_query_rt_values;
        c->v.create_cq_ex = vb_create_cq_ex;
        c->v.create_qp_ex = vb_create_qp_ex;
        vb_set_unsupported_ops(c);
    }
    vb_trace("ibv_open_device");
    return ctx;
}

int ibv_close_device(struct ibv_context *context)
{
    struct vb_ctx *c = vb_ctx_of(context);
    vb_trace("ibv_close_device");
    /* the device destroys whatever the caller left behind, in order */
    tbrt_dev_close(c->dev);         /* with its event fd, the async_fd */
    pthread_mutex_destroy(&context->mutex);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return 0;
}

/* Contexts come from ibv_open_device only: there is no kernel command fd
 * to import one from. */
struct ibv_context *ibv_import_device(int cmd_fd)
{
    (void)cmd_fd;
    vb_unsupported("ibv_import_device", "there is no kernel device (uverbs command fd) to "
                   "import a context from; open the device");
    return NULL;
}
