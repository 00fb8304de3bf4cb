/* verbs_ops.c - the mlx5 driver as a tbrt device (kind "mlx5"): names
 * "mlx5:model0" (a device model brought up in this process; every open gets
 * its own model NIC) and "mlx5:<PCI address>" (real hardware). Each verbs
 * object maps to firmware objects: PD -> ALLOC_PD, CQ -> CREATE_EQ (its own
 * interrupt vector, the completion fd) + CREATE_CQ, QP -> CREATE_QP and the
 * RST2INIT/INIT2RTR/RTR2RTS/2ERR/2RST commands, MR -> CREATE_MKEY (MTT). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/mlx5dv.h>

#include "dev/dev.h"
#include "mlx5/cmdif.h"
#include "mlx5/mlx5_dev.h"
#include "mlx5/queues.h"
#include "util/debug.h"
#include "util/util.h"

enum {
    MAX_QPS_PER_DEV = 256,
    PORT_GID_TABLE = HCA_MAX_GIDS,
    VENDOR_MELLANOX_OUI = 0x02c9,   /* ibv_device_attr.vendor_id of mlx5 devices */
    VPORT_STATE_UP = 1,             /* query_vport_state_out.state */
};

/* The device owns its objects: each is on its list until destroyed, so a
 * close destroys what the caller left (or failed to destroy), children
 * first, before the HCA is torn down. */
struct mdev {
    tbrt_dev dev;
    struct tbrt_mlx5 *h;
    struct mqp *qps[MAX_QPS_PER_DEV];
    struct mpd *pds;
    struct mcq *cqs;
    struct mmr *mrs;
    char verr[160];
};
struct mpd { tbrt_pd pd; struct mpd *next; };
struct mcq { tbrt_cq cq; struct hw_cq hw; struct mcq *next; };
struct mqp { tbrt_qp qp; struct hw_qp hw; int sig_all; };
struct mmr { tbrt_mr mr; struct mlx5_dma map; uint32_t mkey; struct mmr *next; };

/* Unlink x from a singly linked list whose nodes have a next field. */
#define UNLINK(head, x)                                                        \
    do {                                                                       \
        for (__typeof__(head) *pp_ = &(head); *pp_; pp_ = &(*pp_)->next)     \
            if (*pp_ == (x)) {                                                 \
                *pp_ = (x)->next;                                              \
                break;                                                         \
            }                                                                  \
    } while (0)

static struct mdev *D(tbrt_dev *d) { return (struct mdev *)d; }

/* 2^log for an int attribute from a capability (device output): a log the
 * field can hold but an int cannot saturates instead of overflowing. */
static int pow2_int(uint32_t log) { return log >= 31 ? INT32_MAX : 1 << log; }
static struct mlx5_hca *H(tbrt_dev *d) { return D(d)->h->hca; }
static int failh(tbrt_dev *d, int rc, const char *op)
{
    return dev_fail(d, -rc, "%s: %s", op, H(d)->why);
}

/* ---- list / open / close ------------------------------------------------------- */
static void info(tbrt_devinfo *o, const char *name, int usable, const char *why)
{
    memset(o, 0, sizeof *o);
    str_copy(o->name, sizeof o->name, name);
    str_copy(o->kind, sizeof o->kind, "mlx5");
    str_copy(o->personality, sizeof o->personality, "model");
    o->flavor = TBRT_FLAVOR_LINUX;
    o->usable = usable;
    str_copy(o->why, sizeof o->why, why);
}

static int m_list(tbrt_devinfo *out, int max)
{
    int n = 0;
    if (n < max)
        info(&out[n], "mlx5:model0", 1, "");
    n++;
    DIR *dir = opendir("/sys/bus/pci/devices");
    int found = 0;
    for (struct dirent *e; dir && (e = readdir(dir));) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], buf[16] = "";
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/vendor", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (!fgets(buf, sizeof buf, f))
            buf[0] = 0;
        fclose(f);
        if (strtol(buf, NULL, 16) != PCI_VENDOR_MELLANOX)
            continue;
        found++;
        char name[64], why[256] = "";
        snprintf(name, sizeof name, "mlx5:%s", e->d_name);
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/iommu_group", e->d_name);
        int usable = access("/dev/vfio/vfio", R_OK | W_OK) == 0 && access(path, F_OK) == 0;
        if (!usable)
            snprintf(why, sizeof why, "no VFIO (/dev/vfio/vfio or an IOMMU group missing); bind it to vfio-pci");
        if (n < max)
            info(&out[n], name, usable, why);
        if (n < max)
            out[n].personality[0] = 0;
        n++;
    }
    if (dir)
        closedir(dir);
    if (!found) {
        if (n < max) {
            info(&out[n], "mlx5:pci", 0, "no Mellanox (vendor 0x15b3) PCI device in /sys/bus/pci/devices");
            out[n].personality[0] = 0;
        }
        n++;
    }
    return n;
}

static int m_open(const char *name, const tbrt_dev_opts *opts, tbrt_dev **out, char *err, size_t errlen)
{
    const char *addr = strncmp(name, "mlx5:", 5) == 0 ? name + 5 : name;
    int model = strcmp(addr, "model0") == 0 || strcmp(addr, "model") == 0;
    if (opts && opts->pci && opts->pci[0]) {
        addr = opts->pci;
        model = 0;
    }
    if (!model && strcmp(addr, "pci") == 0)
        return err_set(err, errlen, ENODEV, "%s: no Mellanox PCI device here", name);
    struct mdev *d = calloc(1, sizeof *d);
    if (!d)
        return err_set(err, errlen, ENOMEM, "%s: out of memory", name);
    tbrt_mlx5_opts o = {.pci = model ? NULL : addr, .trace = opts ? opts->trace : 0};
    int rc;
    d->h = mlx5_handle_open(&o, err, errlen, &rc);
    if (!d->h) {
        free(d);
        return rc;
    }
    char full[TBRT_NAME_MAX];
    snprintf(full, sizeof full, "mlx5:%s", model ? "model0" : addr);
    dev_init(&d->dev, &tbrt_mlx5_ops, full, model ? "model" : "", TBRT_FLAVOR_LINUX);
    *out = &d->dev;
    return 0;
}

static int m_destroy_qp(tbrt_qp *qp);
static int m_dereg_mr(tbrt_mr *mr);
static int m_destroy_cq(tbrt_cq *cq);
static int m_dealloc_pd(tbrt_pd *pd);

/* Objects the device may still hold: a closed device's whose destroy failed
 * twice, a create's whose undoing failed (the firmware said no, or said
 * nothing), so their memory stays as it is, where the device may still write. They are kept here, reachable, for the life
 * of the process: held on purpose, not lost (a leak checker sees them as
 * held; TBRT_DEBUG=1 names each). */
struct kept {
    void *obj;
    struct kept *next;
};
static struct kept *kept_objects;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static void keep(struct mdev *d, const char *what, uint32_t num, void *obj)
{
    if (DBG_ON(DBG_EVENT))
        dbg_line(0, "%s: %s 0x%x could not be destroyed (%s); its memory stays with the "
                 "device", d->dev.name, what, num, d->h->hca->why);
    struct kept *k = malloc(sizeof *k);
    if (!k)
        return;                 /* held all the same, only not on the list */
    pthread_mutex_lock(&kept_lock);
    *k = (struct kept){.obj = obj, .next = kept_objects};
    kept_objects = k;
    pthread_mutex_unlock(&kept_lock);
}

/* What the caller left behind, in the order hardware needs (QPs, MRs, CQs,
 * PDs), then the HCA. An object whose destroy fails again stays with the
 * firmware, and so does its memory: the device may still write into it
 * (as with firmware pages it never gave back, bringup.c): kept above. */
static void m_close(tbrt_dev *dev)
{
    struct mdev *d = D(dev);
    for (int i = 0; i < MAX_QPS_PER_DEV; i++)
        if (d->qps[i] && m_destroy_qp(&d->qps[i]->qp) < 0)
            keep(d, "QP", d->qps[i]->hw.qpn, d->qps[i]);
    for (struct mmr *m = d->mrs, *next; m; m = next) {
        next = m->next;
        if (m_dereg_mr(&m->mr) < 0)
            keep(d, "MR (mkey)", m->mkey, m);
    }
    for (struct mcq *c = d->cqs, *next; c; c = next) {
        next = c->next;
        if (m_destroy_cq(&c->cq) < 0)
            keep(d, "CQ", c->hw.cqn, c);
    }
    for (struct mpd *p = d->pds, *next; p; p = next) {
        next = p->next;
        if (m_dealloc_pd(&p->pd) < 0)
            keep(d, "PD", p->pd.handle, p);
    }
    tbrt_mlx5_close(d->h);
    free(d);
}

tbrt_mlx5 *tbrt_mlx5_of_dev(tbrt_dev *dev)
{
    return dev && dev->ops == &tbrt_mlx5_ops ? D(dev)->h : NULL;
}

/* ---- queries -------------------------------------------------------------------- */
static int m_query_device(tbrt_dev *dev, struct ibv_device_attr *a)
{
    struct mlx5_hca *h = H(dev);
    const uint8_t *c = h->cap_gen;
    uint32_t fw = h->pci->ops->read32(h->pci, INIT_FW_REV), sub = h->pci->ops->read32(h->pci, INIT_CMDIF_REV_FW_SUB);
    snprintf(a->fw_ver, sizeof a->fw_ver, "%u.%u.%u", fw & 0xffff, fw >> 16, sub & 0xffff);
    memcpy((uint8_t *)&a->node_guid + 2, h->mac, 6);
    a->vendor_id = VENDOR_MELLANOX_OUI;
    a->max_mr_size = 1ull << IGET(c, cmd_hca_cap, log_max_msg);
    a->page_size_cap = HCA_PAGE;
    a->max_qp = pow2_int(IGET(c, cmd_hca_cap, log_max_qp));
    a->max_qp_wr = pow2_int(IGET(c, cmd_hca_cap, log_max_qp_sz));
    a->max_sge = QP_MAX_SGE;
    a->max_cq = pow2_int(IGET(c, cmd_hca_cap, log_max_cq));
    a->max_cqe = pow2_int(IGET(c, cmd_hca_cap, log_max_cq_sz)) - 1;
    a->max_mr = pow2_int(IGET(c, cmd_hca_cap, log_max_mkey));
    a->max_pd = pow2_int(IGET(c, cmd_hca_cap, log_max_pd));
    a->max_qp_rd_atom = pow2_int(IGET(c, cmd_hca_cap, log_max_ra_req_qp));
    a->max_qp_init_rd_atom = pow2_int(IGET(c, cmd_hca_cap, log_max_ra_res_qp));
    a->phys_port_cnt = (uint8_t)IGET(c, cmd_hca_cap, num_ports);
    return 0;
}

static int m_query_port(tbrt_dev *dev, uint8_t port, struct ibv_port_attr *a)
{
    if (port != 1)
        return dev_fail(dev, EINVAL, "query_port: port %u does not exist (1..1)", port);
    uint32_t state;
    int rc = mlx5_query_vport_state(H(dev), &state);
    if (rc < 0)
        return failh(dev, rc, "query_port");
    a->state = state == VPORT_STATE_UP ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = IBV_MTU_1024; /* 1500-byte Ethernet */
    a->gid_tbl_len = PORT_GID_TABLE;
    a->max_msg_sz = 1u << IGET(H(dev)->cap_gen, cmd_hca_cap, log_max_msg);
    a->pkey_tbl_len = 1;
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    a->phys_state = a->state == IBV_PORT_ACTIVE ? 5 : 3; /* LinkUp / Disabled (IBTA) */
    return 0;
}

static int m_query_gid(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *e)
{
    if (port != 1)
        return dev_fail(dev, EINVAL, "query_gid: port %u does not exist (1..1)", port);
    if (index < 0 || index >= PORT_GID_TABLE)
        return dev_fail(dev, EINVAL, "query_gid: index %d outside the table (0..%d)", index, PORT_GID_TABLE - 1);
    struct mlx5_hca *h = H(dev);
    if (index >= h->ngids)
        return -ENODATA;
    memcpy(e->gid.raw, h->gids[index], 16);
    e->gid_index = (uint32_t)index;
    e->port_num = 1;
    e->gid_type = IBV_GID_TYPE_ROCE_V2;
    return 0;
}

/* ---- PD / CQ -------------------------------------------------------------------- */
static int m_alloc_pd(tbrt_dev *dev, tbrt_pd **out)
{
    struct mpd *p = calloc(1, sizeof *p);
    if (!p)
        return dev_fail(dev, ENOMEM, "alloc_pd: out of memory");
    int rc = mlx5_alloc_pd(H(dev), &p->pd.handle);
    if (rc < 0) {
        free(p);
        return failh(dev, rc, "alloc_pd");
    }
    p->pd.dev = dev;
    p->next = D(dev)->pds;
    D(dev)->pds = p;
    *out = &p->pd;
    return 0;
}

static int m_dealloc_pd(tbrt_pd *pd)
{
    struct mpd *p = (struct mpd *)pd;
    int rc = mlx5_dealloc_pd(H(pd->dev), pd->handle);
    if (rc < 0)
        return failh(pd->dev, rc, "dealloc_pd");
    UNLINK(D(pd->dev)->pds, p);
    free(p);
    return 0;
}

static int m_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out)
{
    struct mcq *c = calloc(1, sizeof *c);
    if (!c)
        return dev_fail(dev, ENOMEM, "create_cq: out of memory");
    int rc = mlx5_create_eq(H(dev), &c->hw.eq);
    if (rc < 0) {
        free(c);
        return failh(dev, rc, "create_cq");
    }
    if ((rc = mlx5_create_cq(H(dev), &c->hw, cqe)) < 0) {
        /* the reason is the CQ's: the EQ's undoing must not replace it */
        char why[sizeof H(dev)->why];
        str_copy(why, sizeof why, H(dev)->why);
        if (mlx5_destroy_eq(H(dev), &c->hw.eq) == 0) {
            free(c);
            return dev_fail(dev, -rc, "create_cq: %s", why);
        }
        /* a device that made the CQ after all holds the EQ by it */
        keep(D(dev), "EQ", c->hw.eq.eqn, c);
        return dev_fail(dev, -rc, "create_cq: %s; its EQ 0x%x could not be destroyed after "
                        "(%s): it stays with the device", why, c->hw.eq.eqn, H(dev)->why);
    }
    c->cq = (tbrt_cq){.dev = dev, .cqe = (1 << c->hw.log_size) - 1, .fd = c->hw.eq.fd};
    c->next = D(dev)->cqs;
    D(dev)->cqs = c;
    *out = &c->cq;
    return 0;
}

static int m_destroy_cq(tbrt_cq *cq)
{
    struct mcq *c = (struct mcq *)cq;
    int rc = mlx5_destroy_cq(H(cq->dev), &c->hw);
    if (rc == 0)
        rc = mlx5_destroy_eq(H(cq->dev), &c->hw.eq);
    if (rc < 0)
        return failh(cq->dev, rc, "destroy_cq");
    UNLINK(D(cq->dev)->cqs, c);
    free(c);
    return 0;
}

static struct mqp *qp_of(struct mdev *d, uint32_t qpn)
{
    for (int i = 0; i < MAX_QPS_PER_DEV; i++)
        if (d->qps[i] && d->qps[i]->hw.qpn == qpn)
            return d->qps[i];
    return NULL;
}

static const char *wc_status_name(int s)
{
    switch (s) {
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "work request flushed";
    case IBV_WC_BAD_RESP_ERR: return "bad response";
    case IBV_WC_LOC_ACCESS_ERR: return "local access error";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    case IBV_WC_REM_ABORT_ERR: return "remote aborted";
    default: return "general error";
    }
}

static int m_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc)
{
    struct mcq *c = (struct mcq *)cq;
    struct mdev *d = D(cq->dev);
    int got = 0, taken = 0, size = 1 << c->hw.log_size;
    uint8_t raw[CQE_BYTES];
    char why[200];
    /* at most a queue's worth per call, skipped ones included */
    while (got < n && taken < size && dp_cq_next(&c->hw, raw)) {
        taken++;
        const struct mlx5_cqe64 *cqe = (const void *)raw;
        uint8_t op = cqe->op_own >> 4;
        uint32_t qpn = be32toh(op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR
                                   ? ((const struct mlx5_err_cqe *)raw)->s_wqe_opcode_qpn
                                   : cqe->sop_drop_qpn) & 0xffffff;
        struct mqp *q = qp_of(d, qpn);
        if (!q)
            continue; /* a completion of a QP destroyed meanwhile */
        if (dp_cqe_to_wc(&q->hw, raw, &wc[got], why, sizeof why) < 0)
            dev_fail(cq->dev, EPROTO, "completion: qp 0x%x: %s", qpn, why);
        else if (wc[got].status != IBV_WC_SUCCESS)
            dev_fail(cq->dev, EIO, "completion error: qp 0x%x wr_id %llu: %s (%s)", qpn,
                     (unsigned long long)wc[got].wr_id, wc_status_name(wc[got].status),
                     tbrt_mlx5_ops.vendor_err(cq->dev, wc[got].vendor_err));
        got++;
    }
    if (taken)
        dp_cq_update_ci(&c->hw);
    return got;
}

static int m_req_notify(tbrt_cq *cq)
{
    dp_cq_arm(H(cq->dev), &((struct mcq *)cq)->hw);
    return 0;
}

static int m_ack(tbrt_cq *cq) { return dp_cq_ack(H(cq->dev), &((struct mcq *)cq)->hw); }

/* ---- QP ------------------------------------------------------------------------- */
static int m_create_qp(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out)
{
    tbrt_dev *dev = pd->dev;
    struct mdev *d = D(dev);
    if (init->qp_type != IBV_QPT_RC && init->qp_type != IBV_QPT_UC)
        return dev_fail(dev, EOPNOTSUPP, "create_qp: %s queue pairs not supported (RC, UC)",
                        dev_qp_type_name(init->qp_type));
    int slot = -1;
    for (int i = 0; i < MAX_QPS_PER_DEV && slot < 0; i++)
        if (!d->qps[i])
            slot = i;
    if (slot < 0)
        return dev_fail(dev, ENOMEM, "create_qp: %d queue pairs already", MAX_QPS_PER_DEV);
    struct mqp *q = calloc(1, sizeof *q);
    if (!q)
        return dev_fail(dev, ENOMEM, "create_qp: out of memory");
    int rc = mlx5_create_qp(H(dev), &q->hw, pd->handle, init->qp_type, &init->cap,
                            ((struct mcq *)init->send_cq)->hw.cqn, ((struct mcq *)init->recv_cq)->hw.cqn);
    if (rc < 0) {
        free(q);
        return failh(dev, rc, "create_qp");
    }
    q->sig_all = init->sq_sig_all;
    q->qp = (tbrt_qp){.dev = dev, .pd = pd, .qp_num = q->hw.qpn, .qp_type = init->qp_type,
                      .state = IBV_QPS_RESET, .send_cq = init->send_cq, .recv_cq = init->recv_cq,
                      .cap = init->cap};
    d->qps[slot] = q;
    *out = &q->qp;
    return 0;
}

static int m_modify_qp(tbrt_qp *qp, struct ibv_qp_attr *a, int mask)
{
    struct mqp *q = (struct mqp *)qp;
    struct mlx5_hca *h = H(qp->dev);
    int to = (mask & IBV_QP_STATE) ? (int)a->qp_state : qp->state, rc;
    if (to == IBV_QPS_ERR)
        rc = mlx5_2err_qp(h, &q->hw);
    else if (to == IBV_QPS_RESET)
        rc = mlx5_2rst_qp(h, &q->hw);
    else if (qp->state == IBV_QPS_RESET && to == IBV_QPS_INIT)
        rc = mlx5_rst2init_qp(h, &q->hw, a);
    else if (qp->state == IBV_QPS_INIT && to == IBV_QPS_RTR)
        rc = mlx5_init2rtr_qp(h, &q->hw, a);
    else if (qp->state == IBV_QPS_RTR && to == IBV_QPS_RTS)
        rc = mlx5_rtr2rts_qp(h, &q->hw, a);
    else
        return dev_fail(qp->dev, EINVAL, "modify_qp: qp 0x%x: %s -> %s not supported", qp->qp_num,
                        dev_qp_state_name(qp->state), dev_qp_state_name(to));
    if (rc < 0)
        return dev_fail(qp->dev, -rc, "modify_qp: qp 0x%x %s -> %s: %s", qp->qp_num,
                        dev_qp_state_name(qp->state), dev_qp_state_name(to), h->why);
    qp->state = to;
    return 0;
}

static int m_destroy_qp(tbrt_qp *qp)
{
    struct mqp *q = (struct mqp *)qp;
    struct mdev *d = D(qp->dev);
    int rc = mlx5_destroy_qp(H(qp->dev), &q->hw);
    if (rc < 0)
        return failh(qp->dev, rc, "destroy_qp");
    for (int i = 0; i < MAX_QPS_PER_DEV; i++)
        if (d->qps[i] == q)
            d->qps[i] = NULL;
    free(q);
    return 0;
}

/* ---- MR ------------------------------------------------------------------------- */
static int m_reg_mr(tbrt_pd *pd, void *addr, size_t len, int access, tbrt_mr **out)
{
    tbrt_dev *dev = pd->dev;
    struct mlx5_hca *h = H(dev);
    struct mmr *m = calloc(1, sizeof *m);
    if (!m)
        return dev_fail(dev, ENOMEM, "reg_mr: out of memory");
    int rc = h->pci->ops->dma_map(h->pci, addr, len, &m->map);
    if (rc < 0) {
        free(m);
        return dev_fail(dev, -rc, "reg_mr: cannot map %zu bytes at %p for DMA (%s)", len, addr, strerror(-rc));
    }
    uint32_t np = (uint32_t)(m->map.size / HCA_PAGE);
    uint64_t *mtt = malloc(sizeof *mtt * np);
    rc = mtt ? 0 : -ENOMEM;
    for (uint32_t i = 0; mtt && i < np; i++)
        mtt[i] = m->map.bus + (uint64_t)i * HCA_PAGE;
    if (rc == 0)
        rc = mlx5_create_mkey_mtt(h, pd->handle, (uintptr_t)addr, len, access, mtt, np, &m->mkey);
    free(mtt);
    if (rc < 0) {
        h->pci->ops->dma_unmap(h->pci, &m->map);
        free(m);
        return failh(dev, rc, "reg_mr");
    }
    m->mr = (tbrt_mr){.dev = dev, .pd = pd, .addr = addr, .length = len, .lkey = m->mkey,
                      .rkey = m->mkey, .access = access};
    m->next = D(dev)->mrs;
    D(dev)->mrs = m;
    *out = &m->mr;
    return 0;
}

static int m_dereg_mr(tbrt_mr *mr)
{
    struct mmr *m = (struct mmr *)mr;
    struct mlx5_hca *h = H(mr->dev);
    int rc = mlx5_destroy_mkey(h, m->mkey);
    if (rc < 0)
        return failh(mr->dev, rc, "dereg_mr");
    h->pci->ops->dma_unmap(h->pci, &m->map);
    UNLINK(D(mr->dev)->mrs, m);
    free(m);
    return 0;
}

/* ---- post ------------------------------------------------------------------------ */
static int m_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct mqp *q = (struct mqp *)qp;
    if (qp->state != IBV_QPS_RTS) {
        *bad = wr;
        return dev_fail(qp->dev, EINVAL, "post_send: qp 0x%x is %s, not RTS", qp->qp_num,
                        dev_qp_state_name(qp->state));
    }
    char why[200];
    int rc = dp_post_send(H(qp->dev), &q->hw, wr, bad, q->sig_all, why, sizeof why);
    return rc < 0 ? dev_fail(qp->dev, -rc, "qp 0x%x: %s", qp->qp_num, why) : 0;
}

static int m_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct mqp *q = (struct mqp *)qp;
    *bad = NULL;
    if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_ERR) {
        *bad = wr;
        return dev_fail(qp->dev, EINVAL, "post_recv: qp 0x%x is %s", qp->qp_num, dev_qp_state_name(qp->state));
    }
    char why[200];
    int rc = dp_post_recv(&q->hw, wr, bad, why, sizeof why);
    struct mlx5_pci *p = H(qp->dev)->pci;
    if (p->ops->rq_posted && *bad != wr)
        p->ops->rq_posted(p, q->hw.qpn);
    return rc < 0 ? dev_fail(qp->dev, -rc, "qp 0x%x: %s", qp->qp_num, why) : 0;
}

/* vendor_err = CQE syndrome << 8 | vendor syndrome byte */
static const char *m_vendor_err(tbrt_dev *dev, uint32_t code)
{
    if (!code)
        return "";
    const char *name = ifc_const_name_prefixed("cq", "MLX5_CQE_SYNDROME_", code >> 8);
    if (!name)
        name = "unknown syndrome";
    snprintf(D(dev)->verr, sizeof D(dev)->verr, "mlx5 CQE syndrome 0x%x %s, vendor syndrome 0x%x",
             code >> 8, name, code & 0xff);
    return D(dev)->verr;
}

const struct tbrt_dev_ops tbrt_mlx5_ops = {
    .kind = "mlx5",
    .list = m_list,
    .open = m_open,
    .close = m_close,
    .query_device = m_query_device,
    .query_port = m_query_port,
    .query_gid = m_query_gid,
    .alloc_pd = m_alloc_pd,
    .dealloc_pd = m_dealloc_pd,
    .create_cq = m_create_cq,
    .destroy_cq = m_destroy_cq,
    .poll_cq = m_poll_cq,
    .req_notify_cq = m_req_notify,
    .ack_cq_events = m_ack,
    .create_qp = m_create_qp,
    .modify_qp = m_modify_qp,
    .destroy_qp = m_destroy_qp,
    .reg_mr = m_reg_mr,
    .dereg_mr = m_dereg_mr,
    .post_send = m_post_send,
    .post_recv = m_post_recv,
    .vendor_err = m_vendor_err,
};
