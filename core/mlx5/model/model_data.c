/* model_data.c - the device model's data path, on the model thread. The
 * wire is the software RDMA device (personality linux-rc): every mlx5 QP is
 * backed by a soft QP whose number is the mlx5 QPN, every MTT mkey by a soft
 * MR over the same memory. A send doorbell parses the driver's WQEs (ctrl,
 * raddr, data segments) and posts soft WRs; receive WQEs are picked up from
 * the doorbell record; soft completions become mlx5 CQEs (owner bit, byte
 * count, WQE counter, error syndrome), and an armed CQ raises an EQE and the
 * EQ's interrupt. Local checks (lkey, bounds, length) happen here first, so
 * bad work requests give the error CQEs a ConnectX gives. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

#include "mlx5/cmdif.h"
#include "mlx5/model/model_int.h"
#include "util/util.h"

enum {
    SOFT_CQ_DEPTH = 4096,
    WQE_DS = 16,                  /* MLX5_SEND_WQE_DS */
    WQEBB = 64,                   /* MLX5_SEND_WQE_BB */
    MAX_SGE = 4,
    MAX_MSG = 1 << 30,            /* 1 << log_max_msg (30 on the CX-4 trace) */
    POLL_BATCH = 32,
    EQE_SIZE = 64,
    EQE_OWNER_BYTE = 63,
    VERR_MODEL_LKEY = 0x4d,       /* vendor_err_synd of model-detected lkey errors ("M") */
};

/* wr_id of soft WRs: qpn << 40 | signaled << 33 | recv << 32 | wqe index */
static uint64_t wrid(uint32_t qpn, int recv, int signaled, uint32_t idx)
{
    return (uint64_t)qpn << 40 | (uint64_t)signaled << 33 | (uint64_t)recv << 32 | idx;
}

int model_soft_open(struct model *m)
{
    if (m->soft)
        return 0;
    char err[256];
    tbrt_dev_opts o = {.personality = "linux-rc"};
    int rc = tbrt_dev_open("soft", &o, &m->soft, err, sizeof err);
    if (rc == 0 && (rc = tbrt_pd_alloc(m->soft, &m->soft_pd)) == 0 &&
        (rc = tbrt_cq_create(m->soft, SOFT_CQ_DEPTH, &m->soft_cq)) == 0)
        return 0;
    snprintf(m->soft_why, sizeof m->soft_why, "soft device: %s", m->soft ? tbrt_dev_why(m->soft) : err);
    model_soft_close(m);
    return rc < 0 ? rc : -ENODEV;
}

void model_soft_close(struct model *m)
{
    if (m->soft_cq)
        tbrt_cq_destroy(m->soft_cq);
    if (m->soft_pd)
        tbrt_pd_free(m->soft_pd);
    if (m->soft)
        tbrt_dev_close(m->soft);
    m->soft_cq = NULL;
    m->soft_pd = NULL;
    m->soft = NULL;
}

int model_data_mkey_create(struct model *m, struct model_mkey *k)
{
    if (model_soft_open(m) < 0)
        return 0; /* no wire: the mkey still works for local checks */
    int access = (k->lw ? IBV_ACCESS_LOCAL_WRITE : 0) | (k->rw ? IBV_ACCESS_REMOTE_WRITE : 0) |
                 (k->rr ? IBV_ACCESS_REMOTE_READ : 0);
    if (k->len > k->mapped) /* create_mkey refuses this; never register what is not there */
        return -EINVAL;
    int rc = tbrt_mr_reg(m->soft_pd, k->virt, k->len, access, &k->soft);
    if (rc < 0) {
        snprintf(m->soft_why, sizeof m->soft_why, "%s", tbrt_dev_why(m->soft));
        return rc;
    }
    /* The wire checks the soft key: the mkey must be that key, index and
     * variant, so a peer's rkey works unchanged (QUERY_MKEY tells it). */
    k->index = k->soft->rkey >> 8;
    k->key = k->soft->rkey;
    return 0;
}

void model_data_mkey_destroy(struct model *m, struct model_mkey *k)
{
    (void)m;
    if (k->soft)
        tbrt_mr_dereg(k->soft);
    k->soft = NULL;
}

int model_data_qp_create(struct model *m, struct model_qp *q)
{
    static uint32_t unwired_qpn = 0x100;
    if (model_soft_open(m) < 0) {
        q->qpn = unwired_qpn++ & 0xffffff; /* no wire: commands work, WQEs fail */
        return 0;
    }
    tbrt_qp_init init = {.send_cq = m->soft_cq, .recv_cq = m->soft_cq,
                         .qp_type = q->st == MLX5C_QP_ST_UC ? IBV_QPT_UC : IBV_QPT_RC};
    init.cap.max_send_wr = TBRT_MIN(1u << q->log_sq_size, (uint32_t)MODEL_MAX_WR);
    init.cap.max_recv_wr = TBRT_MIN(1u << q->log_rq_size, (uint32_t)MODEL_MAX_WR);
    init.cap.max_send_sge = MAX_SGE;
    init.cap.max_recv_sge = MAX_SGE;
    int rc = tbrt_qp_create(m->soft_pd, &init, &q->soft);
    if (rc < 0) {
        snprintf(m->soft_why, sizeof m->soft_why, "%s", tbrt_dev_why(m->soft));
        return rc;
    }
    q->qpn = q->soft->qp_num;
    return 0;
}

void model_data_qp_destroy(struct model *m, struct model_qp *q)
{
    (void)m;
    if (q->soft)
        tbrt_qp_destroy(q->soft);
    q->soft = NULL;
}

static int soft_gid_index(struct model *m, const uint8_t gid[16])
{
    for (int i = 0; i < 256; i++) {
        struct ibv_gid_entry e;
        int rc = tbrt_gid_query(m->soft, 1, i, &e);
        if (rc == -EINVAL)
            break;
        if (rc >= 0 && memcmp(e.gid.raw, gid, 16) == 0)
            return i;
    }
    return -1;
}

int model_data_qp_modify(struct model *m, struct model_qp *q, int to, const uint8_t *qpc,
                         uint32_t *synd)
{
    if (to == MLX5C_QP_STATE_RST) {
        q->sq_head = q->rq_head = 0;
        q->sq_inflight = q->rq_inflight = 0;
        q->sq_error = q->err_pending = 0;
    }
    if (!q->soft)
        return 0;
    struct ibv_qp_attr a = {0};
    int mask = IBV_QP_STATE, rc_qp = q->st == MLX5C_QP_ST_RC;
#define C(f) IGET(qpc, qpc, f)
    switch (to) {
    case MLX5C_QP_STATE_INIT:
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = (uint16_t)C(primary_address_path_pkey_index);
        a.port_num = 1;
        a.qp_access_flags = (C(rwe) ? IBV_ACCESS_REMOTE_WRITE : 0) |
                            (C(rre) ? IBV_ACCESS_REMOTE_READ : 0) |
                            (C(rae) ? IBV_ACCESS_REMOTE_ATOMIC : 0);
        mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        break;
    case MLX5C_QP_STATE_RTR: {
        const struct model_roce *src = &m->roce[C(primary_address_path_src_addr_index)];
        int sgid = soft_gid_index(m, src->gid);
        if (sgid < 0) {
            *synd = SYND_BAD_ADDRESS;
            return -EINVAL;
        }
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = (enum ibv_mtu)C(mtu);
        a.dest_qp_num = C(remote_qpn);
        a.rq_psn = C(next_rcv_psn);
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.sgid_index = (uint8_t)sgid;
        a.ah_attr.grh.hop_limit = (uint8_t)C(primary_address_path_hop_limit);
        ifc_get_bytes(qpc, MLX5F_qpc__primary_address_path_rgid_rip, a.ah_attr.grh.dgid.raw);
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (rc_qp) {
            a.max_dest_rd_atomic = (uint8_t)(1u << C(log_rra_max));
            a.min_rnr_timer = (uint8_t)C(min_rnr_nak);
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        break;
    }
    case MLX5C_QP_STATE_RTS:
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = C(next_send_psn);
        mask |= IBV_QP_SQ_PSN;
        if (rc_qp) {
            a.timeout = (uint8_t)C(primary_address_path_ack_timeout);
            a.retry_cnt = (uint8_t)C(retry_count);
            a.rnr_retry = (uint8_t)C(rnr_retry);
            a.max_rd_atomic = (uint8_t)(1u << C(log_sra_max));
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        }
        break;
    case MLX5C_QP_STATE_ERR: a.qp_state = IBV_QPS_ERR; break;
    default: a.qp_state = IBV_QPS_RESET; break;
    }
#undef C
    int rc = tbrt_qp_modify(q->soft, &a, mask);
    if (rc < 0)
        snprintf(m->soft_why, sizeof m->soft_why, "%s", tbrt_dev_why(m->soft));
    return rc;
}

/* ---- completions ------------------------------------------------------------ */

static void raise_eqe(struct model *m, struct model_cq *cq)
{
    struct model_eq *eq = model_eq_find(m, cq->eqn);
    if (!eq)
        return;
    if (((eq->pi - eq->ci) & 0xffffff) >= 1u << eq->log_size)
        return; /* EQ overrun: events nobody consumed; the event is lost */
    uint8_t *e = eq->buf + (size_t)(eq->pi & ((1u << eq->log_size) - 1)) * EQE_SIZE;
    uint8_t owner = (uint8_t)(eq->pi >> eq->log_size & 1);
    memset(e, 0, EQE_SIZE - 1);
    ISET(e, eqe, event_type, MLX5C_EVENT_TYPE_COMP);
    ifc_set(e, IOFF(eqe, event_data) + IOFF(comp_event, cq_number), 24, cq->cqn);
    __atomic_store_n(&e[EQE_OWNER_BYTE], owner, __ATOMIC_RELEASE);
    eq->pi++;
    m->eqes++;
    if (eq->armed) {
        eq->armed = 0;
        model_irq(m, (int)eq->intr);
    }
}

static uint32_t cq_ci(struct model_cq *cq) { return __atomic_load_n((uint32_t *)cq->dbr, __ATOMIC_ACQUIRE); }

/* A fault injected for specs (model_fault): corrupt this CQE if it fits. */
static void inject_fault(struct model *m, struct mlx5_cqe64 *c, uint8_t *opcode)
{
    int f = atomic_load(&m->fault);
    bool recv = *opcode != MLX5_CQE_REQ && *opcode != MLX5_CQE_REQ_ERR;
    if (f == MODEL_FAULT_CQE_WQE_COUNTER && !recv)
        c->wqe_counter = htobe16((uint16_t)(be16toh(c->wqe_counter) + 0x100));
    else if (f == MODEL_FAULT_CQE_BYTE_COUNT && recv && *opcode != MLX5_CQE_RESP_ERR)
        c->byte_cnt = htobe32(0x7fffffff);
    else if (f == MODEL_FAULT_CQE_OPCODE)
        *opcode = 0xb;           /* no CQE has it (mlx5dv.h: 0..6, 12..15) */
    else
        return;
    atomic_store(&m->fault, MODEL_FAULT_NONE);
}

/* Write one CQE; op_own goes last so the driver never sees half a CQE. */
static void write_cqe(struct model *m, struct model_cq *cq, struct mlx5_cqe64 *src, uint8_t opcode)
{
    if (TBRT_UNLIKELY(atomic_load_explicit(&m->fault, memory_order_relaxed)))
        inject_fault(m, src, &opcode);
    uint32_t size = 1u << cq->log_size, ci = be32toh(cq_ci(cq)) & 0xffffff;
    if (((cq->pi - ci) & 0xffffff) >= size)
        return; /* overrun: a real CQ would raise a CQ error event */
    struct mlx5_cqe64 *dst = (struct mlx5_cqe64 *)(cq->buf + (size_t)(cq->pi & (size - 1)) * 64);
    memcpy(dst, src, sizeof *dst - 1);
    uint8_t owner = (uint8_t)(cq->pi >> cq->log_size & 1), op_own = (uint8_t)(opcode << 4 | owner);
    int nlies = atomic_load_explicit(&m->nlies, memory_order_acquire);
    for (int i = 0; TBRT_UNLIKELY(i < nlies); i++)
        if (m->lies[i].n == m->cqes_written) {
            if (m->lies[i].off == 63)
                op_own ^= m->lies[i].bits;
            else
                ((uint8_t *)dst)[m->lies[i].off] ^= m->lies[i].bits;
        }
    m->cqes_written++;
    __atomic_store_n(&dst->op_own, op_own, __ATOMIC_RELEASE);
    cq->pi++;
    m->cqes++;
    if (cq->armed) {
        cq->armed = 0;
        raise_eqe(m, cq);
    }
}

static uint8_t syndrome_of(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_LOC_LEN_ERR: return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
    case IBV_WC_LOC_QP_OP_ERR: return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    case IBV_WC_LOC_PROT_ERR: return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    case IBV_WC_WR_FLUSH_ERR: return MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
    case IBV_WC_MW_BIND_ERR: return MLX5_CQE_SYNDROME_MW_BIND_ERR;
    case IBV_WC_BAD_RESP_ERR: return MLX5_CQE_SYNDROME_BAD_RESP_ERR;
    case IBV_WC_LOC_ACCESS_ERR: return MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR;
    case IBV_WC_REM_INV_REQ_ERR: return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
    case IBV_WC_REM_ACCESS_ERR: return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    case IBV_WC_RETRY_EXC_ERR: return MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;
    case IBV_WC_RNR_RETRY_EXC_ERR: return MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR;
    case IBV_WC_REM_ABORT_ERR: return MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR;
    default: return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
    }
}

static void error_cqe(struct model *m, struct model_qp *q, int recv, uint32_t idx, uint8_t synd,
                      uint8_t vendor, uint8_t wqe_opcode)
{
    struct model_cq *cq = model_cq_find(m, recv ? q->cqn_rcv : q->cqn_snd);
    if (!cq)
        return;
    struct mlx5_cqe64 c = {0};
    struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)&c;
    e->syndrome = synd;
    e->vendor_err_synd = vendor;
    e->s_wqe_opcode_qpn = htobe32((uint32_t)wqe_opcode << 24 | q->qpn);
    e->wqe_counter = htobe16((uint16_t)idx);
    write_cqe(m, cq, &c, recv ? MLX5_CQE_RESP_ERR : MLX5_CQE_REQ_ERR);
    if (synd != MLX5_CQE_SYNDROME_WR_FLUSH_ERR && q->state != MLX5C_QP_STATE_RST) {
        q->state = MLX5C_QP_STATE_ERR;
        if (q->soft) {
            struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
            tbrt_qp_modify(q->soft, &a, IBV_QP_STATE);
        }
    }
}

static void soft_completion(struct model *m, const struct ibv_wc *wc)
{
    uint32_t qpn = (uint32_t)(wc->wr_id >> 40), idx = (uint32_t)wc->wr_id;
    int recv = (int)(wc->wr_id >> 32 & 1), signaled = (int)(wc->wr_id >> 33 & 1);
    struct model_qp *q = model_qp_find(m, qpn);
    if (!q)
        return; /* the QP went away meanwhile */
    if (recv && q->rq_inflight)
        q->rq_inflight--;
    if (!recv && q->sq_inflight)
        q->sq_inflight--;
    if (wc->status != IBV_WC_SUCCESS) {
        uint8_t op = recv ? 0 : (uint8_t)(wc->opcode == IBV_WC_RDMA_WRITE ? MLX5_OPCODE_RDMA_WRITE
                                                                           : MLX5_OPCODE_SEND);
        error_cqe(m, q, recv, idx, syndrome_of(wc->status), (uint8_t)wc->vendor_err, op);
    } else if (recv || signaled) {
        struct model_cq *cq = model_cq_find(m, recv ? q->cqn_rcv : q->cqn_snd);
        if (!cq)
            return;
        struct mlx5_cqe64 c = {0};
        uint8_t opcode = MLX5_CQE_REQ;
        if (recv) {
            opcode = wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM ? MLX5_CQE_RESP_WR_IMM
                     : (wc->wc_flags & IBV_WC_WITH_IMM)      ? MLX5_CQE_RESP_SEND_IMM
                                                             : MLX5_CQE_RESP_SEND;
            c.imm_inval_pkey = wc->imm_data;
        }
        c.byte_cnt = htobe32(wc->byte_len);
        c.sop_drop_qpn = htobe32(q->qpn);
        c.wqe_counter = htobe16((uint16_t)idx);
        write_cqe(m, cq, &c, opcode);
    }
    if (q->err_pending && !q->sq_inflight) {
        q->err_pending = 0;
        error_cqe(m, q, 0, q->err_wqe, (uint8_t)q->err_synd, VERR_MODEL_LKEY, q->err_opcode);
    }
}

/* ---- work requests ------------------------------------------------------------ */

/* Translate a data segment through the mkey table; 0 or an err_cqe syndrome. */
static int translate(struct model *m, const struct mlx5_wqe_data_seg *d, int write,
                     struct ibv_sge *sge)
{
    uint32_t len = be32toh(d->byte_count), key = be32toh(d->lkey);
    uint64_t addr = be64toh(d->addr);
    struct model_mkey *k = model_mkey_find(m, key);
    if (!k || !k->virt || !k->soft || (write && !k->lw))
        return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    uint64_t span = TBRT_MIN(k->len, k->mapped); /* what the mkey says and really maps */
    if (addr < k->start || addr - k->start > span || len > span - (addr - k->start))
        return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    sge->addr = (uintptr_t)(k->virt + (addr - k->start));
    sge->length = len;
    sge->lkey = k->soft->lkey;
    return 0;
}

/* The 16-byte unit u of the WQE starting at WQEBB idx (units wrap with the queue). */
static void *sq_unit(struct model_qp *q, uint32_t idx, uint32_t u)
{
    size_t bytes = (size_t)WQEBB << q->log_sq_size;
    return q->sq + (((size_t)idx * WQEBB + (size_t)u * WQE_DS) % bytes);
}

static int post_one(struct model *m, struct model_qp *q, uint32_t idx, uint32_t *nbb)
{
    const struct mlx5_wqe_ctrl_seg *ctrl = sq_unit(q, idx, 0);
    uint32_t op = be32toh(ctrl->opmod_idx_opcode) & 0xff, ds = be32toh(ctrl->qpn_ds) & 0x3f;
    *nbb = (ds * WQE_DS + WQEBB - 1) / WQEBB;
    if (!*nbb)
        *nbb = 1;
    int signaled = (ctrl->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0;
    struct ibv_sge sge[MAX_SGE];
    struct ibv_send_wr wr = {.wr_id = wrid(q->qpn, 0, signaled, idx & 0xffff), .sg_list = sge,
                             .send_flags = IBV_SEND_SIGNALED};
    uint32_t u = 1;
    switch (op) {
    case MLX5_OPCODE_SEND: wr.opcode = IBV_WR_SEND; break;
    case MLX5_OPCODE_SEND_IMM: wr.opcode = IBV_WR_SEND_WITH_IMM; break;
    case MLX5_OPCODE_RDMA_WRITE: wr.opcode = IBV_WR_RDMA_WRITE; break;
    case MLX5_OPCODE_RDMA_WRITE_IMM: wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; break;
    case MLX5_OPCODE_NOP:
        return signaled ? MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR : 0;
    default: return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    }
    wr.imm_data = ctrl->imm;
    if (wr.opcode == IBV_WR_RDMA_WRITE || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        const struct mlx5_wqe_raddr_seg *r = sq_unit(q, idx, u++);
        wr.wr.rdma.remote_addr = be64toh(r->raddr);
        wr.wr.rdma.rkey = be32toh(r->rkey);
    }
    uint64_t total = 0;
    for (; u < ds; u++) {
        if (wr.num_sge == MAX_SGE)
            return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
        int s = translate(m, sq_unit(q, idx, u), 0, &sge[wr.num_sge]);
        if (s)
            return s;
        total += sge[wr.num_sge++].length;
    }
    if (total > MAX_MSG)
        return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
    if (!q->soft)
        return MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR; /* no wire */
    struct ibv_send_wr *bad;
    int rc = tbrt_post_send(q->soft, &wr, &bad);
    if (rc == -ENOMEM || rc == -EAGAIN)
        return -EAGAIN; /* the soft queue is full: retry on the next pass */
    if (rc < 0)
        return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    q->sq_inflight++;
    return 0;
}

static void run_sq(struct model *m, struct model_qp *q)
{
    if (q->state == MLX5C_QP_STATE_RST || q->state == MLX5C_QP_STATE_INIT ||
        q->state == MLX5C_QP_STATE_RTR)
        return; /* WQEs wait until RTS */
    uint32_t pi = be32toh(__atomic_load_n((uint32_t *)(q->dbr + 4), __ATOMIC_ACQUIRE)) & 0xffff;
    while ((q->sq_head & 0xffff) != pi && !q->err_pending) {
        uint32_t idx = q->sq_head & 0xffff, nbb = 1;
        const struct mlx5_wqe_ctrl_seg *ctrl = sq_unit(q, idx, 0);
        uint8_t op = (uint8_t)(be32toh(ctrl->opmod_idx_opcode) & 0xff);
        int s = q->state == MLX5C_QP_STATE_RTS ? post_one(m, q, idx, &nbb) : MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
        if (s == -EAGAIN)
            return;
        if (q->state != MLX5C_QP_STATE_RTS) {
            uint32_t ds = be32toh(ctrl->qpn_ds) & 0x3f;
            nbb = ds ? (ds * WQE_DS + WQEBB - 1) / WQEBB : 1;
        }
        q->sq_head += nbb;
        m->wqes++;
        if (s == MLX5_CQE_SYNDROME_WR_FLUSH_ERR) {
            error_cqe(m, q, 0, idx, (uint8_t)s, 0, op);
        } else if (s) {
            /* A local error completes after the work already handed out. */
            q->err_pending = 1;
            q->err_wqe = idx;
            q->err_synd = (uint32_t)s;
            q->err_opcode = op;
            if (!q->sq_inflight) {
                q->err_pending = 0;
                error_cqe(m, q, 0, idx, (uint8_t)s, VERR_MODEL_LKEY, op);
            }
        }
    }
}

void model_data_sq_doorbell(struct model *m, uint32_t qpn)
{
    struct model_qp *q = model_qp_find(m, qpn);
    if (q)
        run_sq(m, q);
}

static void run_rq(struct model *m, struct model_qp *q)
{
    if (q->state == MLX5C_QP_STATE_RST)
        return;
    uint32_t pi = be32toh(__atomic_load_n((uint32_t *)q->dbr, __ATOMIC_ACQUIRE)) & 0xffff;
    uint32_t stride = 16u << q->log_rq_stride, nseg = TBRT_MIN(stride / WQE_DS, (uint32_t)MAX_SGE);
    while ((q->rq_head & 0xffff) != pi) {
        uint32_t idx = q->rq_head & 0xffff;
        const struct mlx5_wqe_data_seg *d =
            (const void *)(q->rq + (size_t)(idx & ((1u << q->log_rq_size) - 1)) * stride);
        struct ibv_sge sge[MAX_SGE];
        struct ibv_recv_wr wr = {.wr_id = wrid(q->qpn, 1, 1, idx), .sg_list = sge};
        int s = 0;
        for (uint32_t i = 0; i < nseg && !s; i++) {
            if (be32toh(d[i].lkey) == MLX5_INVALID_LKEY || !d[i].byte_count)
                break;
            s = translate(m, &d[i], 1, &sge[wr.num_sge]);
            if (!s)
                wr.num_sge++;
        }
        if (q->state == MLX5C_QP_STATE_ERR) {
            s = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
        } else if (!s && q->soft) {
            struct ibv_recv_wr *bad;
            int rc = tbrt_post_recv(q->soft, &wr, &bad);
            if (rc == -ENOMEM || rc == -EAGAIN)
                return;
            if (rc < 0)
                s = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            else
                q->rq_inflight++;
        }
        q->rq_head++;
        if (s)
            error_cqe(m, q, 1, idx, (uint8_t)s, VERR_MODEL_LKEY, 0);
    }
}

void model_data_rq_posted(struct model *m, uint32_t qpn)
{
    struct model_qp *q = model_qp_find(m, qpn);
    if (q)
        run_rq(m, q);
}

void model_data_poll(struct model *m)
{
    for (int i = 0; i < MODEL_MAX_QPS; i++)
        if (m->qps[i].used) {
            run_rq(m, &m->qps[i]);
            run_sq(m, &m->qps[i]);
        }
    if (!m->soft_cq)
        return;
    tbrt_cq_ack(m->soft_cq);
    struct ibv_wc wc[POLL_BATCH];
    for (int round = 0; round < 2; round++) {
        int n;
        while ((n = tbrt_cq_poll(m->soft_cq, POLL_BATCH, wc)) > 0)
            for (int i = 0; i < n; i++)
                soft_completion(m, &wc[i]);
        if (round == 0)
            tbrt_cq_arm(m->soft_cq); /* then poll once more: nothing slips between */
    }
}

void model_data_cq_arm(struct model *m, uint32_t cqn, uint32_t sn, uint32_t ci)
{
    struct model_cq *cq = model_cq_find(m, cqn);
    if (!cq)
        return;
    cq->arm_sn = sn;
    if ((cq->pi & 0xffffff) != ci)
        raise_eqe(m, cq); /* completions already wait: the event fires at once */
    else
        cq->armed = 1;
}

void model_data_eq_doorbell(struct model *m, uint32_t eqn, uint32_t ci, int arm)
{
    struct model_eq *eq = model_eq_find(m, eqn);
    if (!eq)
        return;
    eq->ci = ci;
    if (!arm)
        return;
    if ((eq->pi & 0xffffff) != ci)
        model_irq(m, (int)eq->intr);
    else
        eq->armed = 1;
}

int model_data_busy(struct model *m)
{
    for (int i = 0; i < MODEL_MAX_QPS; i++)
        if (m->qps[i].used && m->qps[i].soft && m->qps[i].state != MLX5C_QP_STATE_RST)
            return 1;
    return 0;
}

int model_data_fd(struct model *m) { return m->soft_cq ? m->soft_cq->fd : -1; }
