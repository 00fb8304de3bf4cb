/* ibverbs_dev.c - the ibverbs device as a device kind: opening a libibverbs
 * device by name, queries (ports through the extended context as verbs.h's
 * inline ibv_query_port does; GIDs with their type where the library has
 * _ibv_query_gid_ex), protection domains, memory regions, address handles,
 * close, and the table of operations. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibverbs/ibverbs.h"
#include "util/util.h"

/* ---- open and close --------------------------------------------------------- */

static void ib_close(tbrt_dev *dev);

static int ib_open(const char *name, const tbrt_dev_opts *opts, tbrt_dev **out, char *err,
                   size_t errlen)
{
    (void)opts;                 /* personality, ports, pci: not ours to choose */
    struct ibv_context *ctx;
    int rc = ib_open_context(name, &ctx, err, errlen);
    if (rc)
        return rc;
    struct ib_dev *d = calloc(1, sizeof *d);
    if (!d) {
        ib_lib()->close_device(ctx);
        return err_set(err, errlen, ENOMEM, "%s: out of memory", name);
    }
    d->lib = ib_lib();
    d->ctx = ctx;
    dev_init(&d->dev, &tbrt_ibverbs_ops, name, "", d->lib->flavor);
    *out = &d->dev;
    return 0;
}

static int ib_dealloc_pd(tbrt_pd *pd);
static int ib_dereg_mr(tbrt_mr *mr);
static int ib_destroy_ah(tbrt_ah *ah);

static void ib_close(tbrt_dev *dev)
{
    struct ib_dev *d = ib_of(dev);
    /* whatever the caller left behind, children first; a destroy that
     * fails leaves the object to the context close below */
    while (d->qps) {
        struct ib_qp *q = d->qps;
        if (ib_destroy_qp(&q->qp) && d->qps == q) {
            d->qps = q->next;
            free(q);
        }
    }
    while (d->ahs) {
        struct ib_ah *a = d->ahs;
        if (ib_destroy_ah(&a->ah) && d->ahs == a) {
            d->ahs = a->next;
            free(a);
        }
    }
    while (d->mrs) {
        struct ib_mr *m = d->mrs;
        if (ib_dereg_mr(&m->mr) && d->mrs == m) {
            d->mrs = m->next;
            free(m);
        }
    }
    while (d->cqs) {
        struct ib_cq *c = d->cqs;
        if (ib_destroy_cq(&c->cq) && d->cqs == c) {
            d->cqs = c->next;
            free(c);
        }
    }
    while (d->pds) {
        struct ib_pd *p = d->pds;
        if (ib_dealloc_pd(&p->pd) && d->pds == p) {
            d->pds = p->next;
            free(p);
        }
    }
    d->lib->close_device(d->ctx);
    free(d);
}

/* ---- queries ------------------------------------------------------------------- */

static int ib_query_device(tbrt_dev *dev, struct ibv_device_attr *attr)
{
    struct ib_dev *d = ib_of(dev);
    int rc = d->lib->query_device(d->ctx, attr);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(dev, e, "query_device: %s", strerror(e));
    }
    return 0;
}

/* The extended context's query_port when the provider has one (it fills
 * the whole struct ibv_port_attr), else the exported compat call, which
 * fills its leading part; this is verbs.h's inline ibv_query_port. */
static int port_query(struct ib_dev *d, uint8_t port, struct ibv_port_attr *attr)
{
    struct ibv_context *c = d->ctx;
    if (c->abi_compat == __VERBS_ABI_IS_EXTENDED) {
        struct verbs_context *v =
            (struct verbs_context *)((char *)c - offsetof(struct verbs_context, context));
        if (v->sz >= sizeof *v - offsetof(struct verbs_context, query_port) && v->query_port)
            return v->query_port(c, port, attr, sizeof *attr);
    }
    memset(attr, 0, sizeof *attr);
    return d->lib->query_port(c, port, (struct _compat_ibv_port_attr *)attr);
}

static int ib_query_port(tbrt_dev *dev, uint8_t port, struct ibv_port_attr *attr)
{
    int rc = port_query(ib_of(dev), port, attr);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(dev, e, "query_port %u: %s", port, strerror(e));
    }
    return 0;
}

static bool gid_is_zero(const union ibv_gid *g)
{
    static const uint8_t zero[16];
    return memcmp(g->raw, zero, sizeof zero) == 0;
}

static int ib_query_gid(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *e)
{
    struct ib_dev *d = ib_of(dev);
    memset(e, 0, sizeof *e);
    if (index < 0)
        return dev_fail(dev, EINVAL, "query_gid: index %d < 0", index);
    if (d->lib->query_gid_ex && !d->gid_ex_unsupported) {
        int rc = d->lib->query_gid_ex(d->ctx, port, (uint32_t)index, e, 0, sizeof *e);
        if (rc == 0)
            return gid_is_zero(&e->gid) ? -ENODATA : 0;
        int err = ib_errno(rc);
        if (err == ENODATA)
            return -ENODATA;    /* an empty entry */
        if (err != EOPNOTSUPP && err != ENOSYS)
            return dev_fail(dev, err, "query_gid port %u index %d: %s", port, index,
                            strerror(err));
        d->gid_ex_unsupported = true;   /* a provider without GID types */
        memset(e, 0, sizeof *e);
    }
    /* no types (Apple's provider has none): the raw GID, reported as IB */
    union ibv_gid g;
    int rc = d->lib->query_gid(d->ctx, port, index, &g);
    if (rc) {
        int err = ib_errno(rc);
        return dev_fail(dev, err, "query_gid port %u index %d: %s", port, index, strerror(err));
    }
    e->gid = g;
    e->gid_index = (uint32_t)index;
    e->port_num = port;
    e->gid_type = IBV_GID_TYPE_IB;
    return gid_is_zero(&g) ? -ENODATA : 1;
}

/* ---- protection domains ----------------------------------------------------------- */

static int ib_alloc_pd(tbrt_dev *dev, tbrt_pd **out)
{
    struct ib_dev *d = ib_of(dev);
    struct ib_pd *p = calloc(1, sizeof *p);
    if (!p)
        return dev_fail(dev, ENOMEM, "alloc_pd: out of memory");
    errno = 0;
    p->ibv = d->lib->alloc_pd(d->ctx);
    if (!p->ibv) {
        int e = ib_errno(0);
        free(p);
        return dev_fail(dev, e, "alloc_pd: %s", strerror(e));
    }
    p->pd = (tbrt_pd){.dev = dev, .handle = p->ibv->handle};
    p->next = d->pds;
    d->pds = p;
    *out = &p->pd;
    return 0;
}

static int ib_dealloc_pd(tbrt_pd *pd)
{
    struct ib_dev *d = ib_of(pd->dev);
    struct ib_pd *p = (struct ib_pd *)pd;
    int rc = d->lib->dealloc_pd(p->ibv);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(pd->dev, e, "dealloc_pd: %s%s", strerror(e),
                        e == EBUSY ? " (a QP, MR or AH still uses it)" : "");
    }
    IB_UNLINK(d->pds, p);
    free(p);
    return 0;
}

/* ---- memory regions --------------------------------------------------------------- */

static int ib_reg_mr(tbrt_pd *pd, void *addr, size_t len, int access, tbrt_mr **out)
{
    struct ib_dev *d = ib_of(pd->dev);
    struct ib_mr *m = calloc(1, sizeof *m);
    if (!m)
        return dev_fail(pd->dev, ENOMEM, "reg_mr: out of memory");
    errno = 0;
    m->ibv = d->lib->reg_mr(((struct ib_pd *)pd)->ibv, addr, len, access);
    if (!m->ibv) {
        int e = ib_errno(0);
        free(m);
        return dev_fail(pd->dev, e, "reg_mr: %s (%zu bytes at %p, access 0x%x)%s", strerror(e),
                        len, addr, (unsigned)access,
                        e == ENOMEM || e == EPERM ? "; is the locked-memory limit (ulimit -l) "
                                                    "too small?" : "");
    }
    m->mr = (tbrt_mr){.dev = pd->dev, .pd = pd, .addr = addr, .length = len,
                      .lkey = m->ibv->lkey, .rkey = m->ibv->rkey, .access = access};
    m->next = d->mrs;
    d->mrs = m;
    *out = &m->mr;
    return 0;
}

static int ib_dereg_mr(tbrt_mr *mr)
{
    struct ib_dev *d = ib_of(mr->dev);
    struct ib_mr *m = (struct ib_mr *)mr;
    int rc = d->lib->dereg_mr(m->ibv);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(mr->dev, e, "dereg_mr (lkey 0x%x): %s", mr->lkey, strerror(e));
    }
    IB_UNLINK(d->mrs, m);
    free(m);
    return 0;
}

/* ---- address handles --------------------------------------------------------------- */

static int ib_create_ah(tbrt_pd *pd, struct ibv_ah_attr *attr, tbrt_ah **out)
{
    struct ib_dev *d = ib_of(pd->dev);
    struct ib_ah *a = calloc(1, sizeof *a);
    if (!a)
        return dev_fail(pd->dev, ENOMEM, "create_ah: out of memory");
    errno = 0;
    a->ibv = d->lib->create_ah(((struct ib_pd *)pd)->ibv, attr);
    if (!a->ibv) {
        int e = ib_errno(0);
        free(a);
        return dev_fail(pd->dev, e, "create_ah (port %u, sgid_index %u): %s", attr->port_num,
                        attr->grh.sgid_index, strerror(e));
    }
    a->ah = (tbrt_ah){.dev = pd->dev, .pd = pd, .attr = *attr};
    a->next = d->ahs;
    d->ahs = a;
    *out = &a->ah;
    return 0;
}

static int ib_destroy_ah(tbrt_ah *ah)
{
    struct ib_dev *d = ib_of(ah->dev);
    struct ib_ah *a = (struct ib_ah *)ah;
    int rc = d->lib->destroy_ah(a->ibv);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(ah->dev, e, "destroy_ah: %s", strerror(e));
    }
    IB_UNLINK(d->ahs, a);
    free(a);
    return 0;
}

/* libibverbs has no text for a provider's vendor_err: show the code. */
static const char *ib_vendor_err(tbrt_dev *dev, uint32_t code)
{
    if (!code)
        return "";
    struct ib_dev *d = ib_of(dev);
    snprintf(d->vendor_err, sizeof d->vendor_err, "provider vendor_err 0x%x", code);
    return d->vendor_err;
}

const struct tbrt_dev_ops tbrt_ibverbs_ops = {
    .kind = "ibverbs",
    .list = ib_list_devices,
    .open = ib_open,
    .close = ib_close,
    .query_device = ib_query_device,
    .query_port = ib_query_port,
    .query_gid = ib_query_gid,
    .alloc_pd = ib_alloc_pd,
    .dealloc_pd = ib_dealloc_pd,
    .create_cq = ib_create_cq,
    .destroy_cq = ib_destroy_cq,
    .poll_cq = ib_poll_cq,
    .req_notify_cq = ib_req_notify_cq,
    .ack_cq_events = ib_ack_cq_events,
    .create_qp = ib_create_qp,
    .modify_qp = ib_modify_qp,
    .destroy_qp = ib_destroy_qp,
    .reg_mr = ib_reg_mr,
    .dereg_mr = ib_dereg_mr,
    .create_ah = ib_create_ah,
    .destroy_ah = ib_destroy_ah,
    .post_send = ib_post_send,
    .post_recv = ib_post_recv,
    .vendor_err = ib_vendor_err,
};
