/* verbs_api.c - the public verbs tier: tbrt_dev_open, tbrt_qp_create, ...
 * Each call checks its arguments (misuse is an error, never a crash) and goes
 * to the device through its table of operations. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dev/dev.h"
#include "util/util.h"

#define NEED(ptr, what)                                                        \
    do {                                                                       \
        if (!(ptr))                                                            \
            return -EINVAL;                                                    \
    } while (0)

int tbrt_dev_open(const char *name, const tbrt_dev_opts *opts, tbrt_dev **out,
                  char *err, size_t errlen)
{
    if (!out)
        return err_set(err, errlen, EINVAL, "dev_open: no out pointer");
    *out = NULL;
    if (!name || !*name)
        name = "soft";
    tbrt_dev_opts none = {0};
    if (!opts)
        opts = &none;
    const struct tbrt_dev_ops *kind = dev_kind(name);
    if (kind) {
        /* A kind name opens the first usable device of that kind. */
        tbrt_devinfo info[32];
        int n = kind->list(info, (int)TBRT_ARRAY_LEN(info));
        char why[TBRT_WHY_MAX] = "";
        for (int i = 0; i < n && i < (int)TBRT_ARRAY_LEN(info); i++) {
            if (!info[i].usable) {
                str_append(why, sizeof why, "%s%s: %s", why[0] ? "; " : "", info[i].name,
                           info[i].why);
                continue;
            }
            int rc = kind->open(info[i].name, opts, out, err, errlen);
            if (rc == 0)
                return 0;
            str_append(why, sizeof why, "%s%s: %s", why[0] ? "; " : "", info[i].name,
                       err ? err : "open failed");
        }
        return err_set(err, errlen, ENODEV, "dev_open %s: no usable %s device%s%s", name,
                       name, why[0] ? ": " : "", why);
    }
    return dev_kind_of(name)->open(name, opts, out, err, errlen);
}

int tbrt_dev_close(tbrt_dev *dev)
{
    NEED(dev, "dev");
    dev->ops->close(dev);
    return 0;
}

const char *tbrt_dev_name(tbrt_dev *dev) { return dev ? dev->name : ""; }
const char *tbrt_dev_kind(tbrt_dev *dev) { return dev ? dev->kind : ""; }
const char *tbrt_dev_personality(tbrt_dev *dev) { return dev ? dev->personality : ""; }
int tbrt_dev_flavor(tbrt_dev *dev) { return dev ? dev->flavor : 0; }
const char *tbrt_dev_why(tbrt_dev *dev) { return dev ? dev->why : "no device"; }

const char *tbrt_dev_vendor_err(tbrt_dev *dev, uint32_t code)
{
    if (!dev || !dev->ops->vendor_err)
        return "";
    const char *s = dev->ops->vendor_err(dev, code);
    return s ? s : "";
}

int tbrt_dev_query(tbrt_dev *dev, struct ibv_device_attr *attr)
{
    NEED(dev && attr, "dev/attr");
    memset(attr, 0, sizeof *attr);
    return dev->ops->query_device(dev, attr);
}

int tbrt_port_query(tbrt_dev *dev, uint8_t port, struct ibv_port_attr *attr)
{
    NEED(dev && attr, "dev/attr");
    memset(attr, 0, sizeof *attr);
    return dev->ops->query_port(dev, port, attr);
}

int tbrt_port_set_state(tbrt_dev *dev, uint8_t port, int state)
{
    NEED(dev, "dev");
    if (!dev->ops->set_port_state)
        return dev_fail(dev, EOPNOTSUPP, "set_port_state: a %s device's ports cannot be "
                        "changed from here", dev->kind);
    return dev->ops->set_port_state(dev, port, state);
}

int tbrt_dev_faults(tbrt_dev *dev, const char *spec)
{
    NEED(dev && spec, "dev/spec");
    if (!dev->ops->set_faults)
        return dev_fail(dev, EOPNOTSUPP, "faults: a %s device has no fault injection (the soft "
                        "device has)", dev->kind);
    return dev->ops->set_faults(dev, spec);
}

int tbrt_dev_counters(tbrt_dev *dev, uint32_t qpn, const char **names, uint64_t *values,
                      int max)
{
    if (!dev || !dev->ops->counters || max <= 0)
        return 0;
    return dev->ops->counters(dev, qpn, names, values, max);
}

const char *tbrt_dev_describe(tbrt_dev *dev)
{
    if (!dev || !dev->ops->describe)
        return "";
    const char *s = dev->ops->describe(dev);
    return s ? s : "";
}

int tbrt_gid_query(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *entry)
{
    NEED(dev && entry, "dev/entry");
    memset(entry, 0, sizeof *entry);
    return dev->ops->query_gid(dev, port, index, entry);
}

int tbrt_pd_alloc(tbrt_dev *dev, tbrt_pd **out)
{
    NEED(dev && out, "dev/out");
    *out = NULL;
    return dev->ops->alloc_pd(dev, out);
}

int tbrt_pd_free(tbrt_pd *pd)
{
    NEED(pd, "pd");
    return pd->dev->ops->dealloc_pd(pd);
}

int tbrt_cq_create(tbrt_dev *dev, int cqe, tbrt_cq **out)
{
    NEED(dev && out, "dev/out");
    *out = NULL;
    if (cqe < 1)
        return dev_fail(dev, EINVAL, "create_cq: cqe %d < 1", cqe);
    return dev->ops->create_cq(dev, cqe, out);
}

int tbrt_cq_destroy(tbrt_cq *cq)
{
    NEED(cq, "cq");
    return cq->dev->ops->destroy_cq(cq);
}

int tbrt_cq_poll(tbrt_cq *cq, int n, struct ibv_wc *wc)
{
    NEED(cq && wc, "cq/wc");
    if (n < 0)
        return dev_fail(cq->dev, EINVAL, "poll_cq: n %d < 0", n);
    return cq->dev->ops->poll_cq(cq, n, wc);
}

int tbrt_cq_poll_ts(tbrt_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts_ns)
{
    NEED(cq && wc && ts_ns, "cq/wc/ts");
    if (n < 0)
        return dev_fail(cq->dev, EINVAL, "poll_cq: n %d < 0", n);
    if (cq->dev->ops->poll_cq_ts)
        return cq->dev->ops->poll_cq_ts(cq, n, wc, ts_ns);
    int got = cq->dev->ops->poll_cq(cq, n, wc);
    uint64_t now = got > 0 ? now_ns() : 0;
    for (int i = 0; i < got; i++)
        ts_ns[i] = now;
    return got;
}

int tbrt_cq_arm(tbrt_cq *cq)
{
    NEED(cq, "cq");
    return cq->dev->ops->req_notify_cq(cq);
}

int tbrt_cq_ack(tbrt_cq *cq)
{
    NEED(cq, "cq");
    return cq->dev->ops->ack_cq_events(cq);
}

int tbrt_qp_create(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out)
{
    NEED(pd && init && out, "pd/init/out");
    *out = NULL;
    if (!init->send_cq || !init->recv_cq)
        return dev_fail(pd->dev, EINVAL, "create_qp: send_cq and recv_cq are required");
    if (init->send_cq->dev != pd->dev || init->recv_cq->dev != pd->dev)
        return dev_fail(pd->dev, EINVAL, "create_qp: completion queue of another device");
    if (init->srq && init->srq->dev != pd->dev)
        return dev_fail(pd->dev, EINVAL, "create_qp: shared receive queue of another device");
    if (init->srq && !pd->dev->ops->create_srq)
        return dev_fail(pd->dev, EOPNOTSUPP, "create_qp: a %s device has no shared receive "
                        "queues", pd->dev->kind);
    return pd->dev->ops->create_qp(pd, init, out);
}

int tbrt_qp_modify(tbrt_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    NEED(qp && attr, "qp/attr");
    return qp->dev->ops->modify_qp(qp, attr, mask);
}

int tbrt_qp_destroy(tbrt_qp *qp)
{
    NEED(qp, "qp");
    return qp->dev->ops->destroy_qp(qp);
}

int tbrt_mr_reg(tbrt_pd *pd, void *addr, size_t length, int access, tbrt_mr **out)
{
    NEED(pd && out, "pd/out");
    *out = NULL;
    if (!addr || !length)
        return dev_fail(pd->dev, EINVAL, "reg_mr: empty region (addr %p, length %zu)", addr,
                        length);
    int rc = pd->dev->ops->reg_mr(pd, addr, length, access, out);
    if (rc == 0)
        (*out)->iova = (uint64_t)(uintptr_t)addr;
    return rc;
}

int tbrt_mr_reg_iova(tbrt_pd *pd, void *addr, size_t length, uint64_t iova, int access,
                     tbrt_mr **out)
{
    NEED(pd && out, "pd/out");
    *out = NULL;
    if (!addr || !length)
        return dev_fail(pd->dev, EINVAL, "reg_mr: empty region (addr %p, length %zu)", addr,
                        length);
    if (iova > UINT64_MAX - length)
        return dev_fail(pd->dev, EINVAL, "reg_mr: iova 0x%llx + %zu bytes wraps around",
                        (unsigned long long)iova, length);
    if (pd->dev->ops->reg_mr_iova)
        return pd->dev->ops->reg_mr_iova(pd, addr, length, iova, access, out);
    if (iova != (uint64_t)(uintptr_t)addr)
        return dev_fail(pd->dev, EOPNOTSUPP, "reg_mr: a %s device takes no iova other than "
                        "the address", pd->dev->kind);
    return tbrt_mr_reg(pd, addr, length, access, out);
}

int tbrt_mr_dereg(tbrt_mr *mr)
{
    NEED(mr, "mr");
    return mr->dev->ops->dereg_mr(mr);
}

int tbrt_ah_create(tbrt_pd *pd, struct ibv_ah_attr *attr, tbrt_ah **out)
{
    NEED(pd && attr && out, "pd/attr/out");
    *out = NULL;
    if (!pd->dev->ops->create_ah)
        return dev_fail(pd->dev, EOPNOTSUPP, "create_ah: not supported");
    return pd->dev->ops->create_ah(pd, attr, out);
}

int tbrt_ah_destroy(tbrt_ah *ah)
{
    NEED(ah, "ah");
    return ah->dev->ops->destroy_ah(ah);
}

struct ibv_ah *tbrt_ah_handle(tbrt_ah *ah)
{
    return (struct ibv_ah *)ah;
}

int tbrt_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    NEED(qp && wr, "qp/wr");
    struct ibv_send_wr *dummy;
    return qp->dev->ops->post_send(qp, wr, bad ? bad : &dummy);
}

int tbrt_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    NEED(qp && wr, "qp/wr");
    struct ibv_recv_wr *dummy;
    return qp->dev->ops->post_recv(qp, wr, bad ? bad : &dummy);
}

/* ---- shared receive queues and events: optional operations ---------------------- */

#define OPTIONAL(dev, op, what)                                                \
    do {                                                                       \
        if (!(dev)->ops->op)                                                   \
            return dev_fail(dev, EOPNOTSUPP, "%s: a %s device has none", what, \
                            (dev)->kind);                                      \
    } while (0)

int tbrt_srq_create(tbrt_pd *pd, struct ibv_srq_attr *attr, tbrt_srq **out)
{
    NEED(pd && attr && out, "pd/attr/out");
    *out = NULL;
    OPTIONAL(pd->dev, create_srq, "create_srq: shared receive queues");
    return pd->dev->ops->create_srq(pd, attr, out);
}

int tbrt_srq_modify(tbrt_srq *srq, struct ibv_srq_attr *attr, int mask)
{
    NEED(srq && attr, "srq/attr");
    return srq->dev->ops->modify_srq(srq, attr, mask);
}

int tbrt_srq_query(tbrt_srq *srq, struct ibv_srq_attr *attr)
{
    NEED(srq && attr, "srq/attr");
    memset(attr, 0, sizeof *attr);
    return srq->dev->ops->query_srq(srq, attr);
}

int tbrt_srq_destroy(tbrt_srq *srq)
{
    NEED(srq, "srq");
    return srq->dev->ops->destroy_srq(srq);
}

int tbrt_post_srq_recv(tbrt_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    NEED(srq && wr, "srq/wr");
    struct ibv_recv_wr *dummy;
    return srq->dev->ops->post_srq_recv(srq, wr, bad ? bad : &dummy);
}

int tbrt_dev_event_fd(tbrt_dev *dev)
{
    NEED(dev, "dev");
    OPTIONAL(dev, event_fd, "event_fd: asynchronous events");
    return dev->ops->event_fd(dev);
}

int tbrt_dev_event(tbrt_dev *dev, tbrt_event *ev)
{
    NEED(dev && ev, "dev/ev");
    memset(ev, 0, sizeof *ev);
    OPTIONAL(dev, get_event, "get_event: asynchronous events");
    return dev->ops->get_event(dev, ev);
}
