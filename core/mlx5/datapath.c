/* datapath.c - the mlx5 data path with <infiniband/mlx5dv.h> structures:
 * SEND / RDMA WRITE WQEs (ctrl, raddr, data segments) in 64-byte basic
 * blocks, the doorbell record, the UAR BlueFlame write alternating
 * 0x800/0x900, receive WQEs, CQE polling by owner bit, error CQEs with their
 * syndrome, the CQ doorbell record and arming, and EQ events. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/mlx5dv.h>

#include "mlx5/cmdif.h"
#include "mlx5/queues.h"
#include "util/util.h"

enum { CQ_DBR_SET_CI = 0, CQ_DBR_ARM = 1 }; /* CQ doorbell record dwords (uar.tsv) */

static void *sq_unit(struct hw_qp *qp, uint32_t idx, uint32_t u)
{
    size_t bytes = (size_t)WQEBB_BYTES << qp->log_sq_size;
    return qp->sq + (((size_t)idx * WQEBB_BYTES + (size_t)u * WQE_DS_BYTES) % bytes);
}

static void set_dseg(struct mlx5_wqe_data_seg *d, const struct ibv_sge *s)
{
    d->byte_count = htobe32(s->length);
    d->lkey = htobe32(s->lkey);
    d->addr = htobe64(s->addr);
}

int dp_post_send(struct mlx5_hca *h, struct hw_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad,
                 int sig_all, char *why, size_t whylen)
{
    uint32_t size = 1u << qp->log_sq_size;
    const struct mlx5_wqe_ctrl_seg *last = NULL;
    for (; wr; wr = wr->next) {
        uint8_t op;
        uint8_t wc_op;
        switch (wr->opcode) {
        case IBV_WR_SEND: op = MLX5_OPCODE_SEND; wc_op = IBV_WC_SEND; break;
        case IBV_WR_SEND_WITH_IMM: op = MLX5_OPCODE_SEND_IMM; wc_op = IBV_WC_SEND; break;
        case IBV_WR_RDMA_WRITE: op = MLX5_OPCODE_RDMA_WRITE; wc_op = IBV_WC_RDMA_WRITE; break;
        case IBV_WR_RDMA_WRITE_WITH_IMM: op = MLX5_OPCODE_RDMA_WRITE_IMM; wc_op = IBV_WC_RDMA_WRITE; break;
        default:
            *bad = wr;
            snprintf(why, whylen, "post_send: opcode %d not supported", wr->opcode);
            return -EINVAL;
        }
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge) {
            *bad = wr;
            snprintf(why, whylen, "post_send: %d sges > max_send_sge %u", wr->num_sge, qp->max_send_sge);
            return -EINVAL;
        }
        if (wr->send_flags & IBV_SEND_INLINE) {
            *bad = wr;
            snprintf(why, whylen, "post_send: inline data not supported (max_inline_data 0)");
            return -EINVAL;
        }
        int rdma = op == MLX5_OPCODE_RDMA_WRITE || op == MLX5_OPCODE_RDMA_WRITE_IMM;
        uint32_t ds = 1 + (uint32_t)rdma + (uint32_t)wr->num_sge;
        uint32_t nbb = (ds * WQE_DS_BYTES + WQEBB_BYTES - 1) / WQEBB_BYTES;
        if (qp->sq_pi - qp->sq_ci + nbb > size) {
            *bad = wr;
            snprintf(why, whylen, "post_send: send queue full (%u of %u blocks in flight)",
                     qp->sq_pi - qp->sq_ci, size);
            return -ENOMEM;
        }
        uint32_t idx = qp->sq_pi;
        for (uint32_t u = 0; u < nbb * (WQEBB_BYTES / WQE_DS_BYTES); u++)
            memset(sq_unit(qp, idx, u), 0, WQE_DS_BYTES);
        struct mlx5_wqe_ctrl_seg *ctrl = sq_unit(qp, idx, 0);
        ctrl->opmod_idx_opcode = htobe32((idx & 0xffff) << 8 | op);
        ctrl->qpn_ds = htobe32(qp->qpn << 8 | ds);
        ctrl->fm_ce_se = (uint8_t)(((wr->send_flags & IBV_SEND_SIGNALED) || sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                                   ((wr->send_flags & IBV_SEND_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0));
        ctrl->imm = wr->imm_data;
        uint32_t u = 1;
        if (rdma) {
            struct mlx5_wqe_raddr_seg *r = sq_unit(qp, idx, u++);
            r->raddr = htobe64(wr->wr.rdma.remote_addr);
            r->rkey = htobe32(wr->wr.rdma.rkey);
        }
        for (int i = 0; i < wr->num_sge; i++)
            set_dseg(sq_unit(qp, idx, u++), &wr->sg_list[i]);
        struct hw_sq_slot *slot = &qp->sq_slots[idx & (size - 1)];
        slot->wr_id = wr->wr_id;
        slot->opcode = wc_op;
        slot->nbb = (uint8_t)nbb;
        qp->sq_pi += nbb;
        last = ctrl;
    }
    if (!last)
        return 0;
    /* Doorbell record first, then the BlueFlame register (uar.tsv). */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    ((volatile uint32_t *)qp->dbr.virt)[MLX5_SND_DBR] = htobe32(qp->sq_pi & 0xffff);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint32_t bf = h->bf_toggle ? UAR_BF1 : UAR_BF0;
    h->bf_toggle ^= 1;
    h->pci->ops->write64(h->pci, h->uar * UAR_PAGE + bf, last);
    return 0;
}

int dp_post_recv(struct hw_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad, char *why, size_t whylen)
{
    uint32_t size = 1u << qp->log_rq_size, nseg = 1u << qp->log_rq_stride;
    int posted = 0;
    for (; wr; wr = wr->next) {
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_recv_sge) {
            *bad = wr;
            snprintf(why, whylen, "post_recv: %d sges > max_recv_sge %u", wr->num_sge, qp->max_recv_sge);
            return -EINVAL;
        }
        if (qp->rq_pi - qp->rq_ci >= size) {
            *bad = wr;
            snprintf(why, whylen, "post_recv: receive queue full (%u)", size);
            return -ENOMEM;
        }
        struct mlx5_wqe_data_seg *d =
            (void *)(qp->rq + (size_t)(qp->rq_pi & (size - 1)) * WQE_DS_BYTES * nseg);
        uint64_t bytes = 0;
        for (uint32_t i = 0; i < nseg; i++) {
            if (i < (uint32_t)wr->num_sge) {
                set_dseg(&d[i], &wr->sg_list[i]);
                bytes += wr->sg_list[i].length;
            } else {
                d[i].byte_count = 0;
                d[i].lkey = htobe32(MLX5_INVALID_LKEY);
                d[i].addr = 0;
            }
        }
        qp->rq_wrid[qp->rq_pi & (size - 1)] = wr->wr_id;
        qp->rq_len[qp->rq_pi & (size - 1)] = (uint32_t)TBRT_MIN(bytes, (uint64_t)UINT32_MAX);
        qp->rq_pi++;
        posted = 1;
    }
    if (posted) {
        __atomic_thread_fence(__ATOMIC_RELEASE);
        ((volatile uint32_t *)qp->dbr.virt)[MLX5_RCV_DBR] = htobe32(qp->rq_pi & 0xffff);
    }
    return 0;
}

int dp_cq_next(struct hw_cq *cq, uint8_t out[CQE_BYTES])
{
    uint32_t size = 1u << cq->log_size;
    struct mlx5_cqe64 *c = (void *)((uint8_t *)cq->buf.virt + (size_t)(cq->ci & (size - 1)) * CQE_BYTES);
    uint8_t op_own = __atomic_load_n(&c->op_own, __ATOMIC_ACQUIRE);
    uint8_t owner = (cq->ci >> cq->log_size) & 1;
    if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & MLX5_CQE_OWNER_MASK) != owner)
        return 0;
    memcpy(out, c, CQE_BYTES);
    /* checked again on the copy, which is all that is used from here on:
     * the device may have written the entry between the two reads */
    op_own = ((const struct mlx5_cqe64 *)(const void *)out)->op_own;
    if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & MLX5_CQE_OWNER_MASK) != owner)
        return 0;
    cq->ci++;
    return 1;
}

void dp_cq_update_ci(struct hw_cq *cq)
{
    __atomic_thread_fence(__ATOMIC_RELEASE);
    ((volatile uint32_t *)cq->dbr.virt)[CQ_DBR_SET_CI] = htobe32(cq->ci & 0xffffff);
}

static enum ibv_wc_status status_of(uint8_t synd)
{
    switch (synd) {
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return IBV_WC_LOC_LEN_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return IBV_WC_LOC_QP_OP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return IBV_WC_LOC_PROT_ERR;
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return IBV_WC_WR_FLUSH_ERR;
    case MLX5_CQE_SYNDROME_MW_BIND_ERR: return IBV_WC_MW_BIND_ERR;
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return IBV_WC_BAD_RESP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return IBV_WC_LOC_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return IBV_WC_REM_INV_REQ_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return IBV_WC_REM_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return IBV_WC_REM_OP_ERR;
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return IBV_WC_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return IBV_WC_RNR_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return IBV_WC_REM_ABORT_ERR;
    default: return IBV_WC_GENERAL_ERR;
    }
}

/* An error completion for a CQE that cannot be true; counters untouched. */
static int hostile(struct ibv_wc *wc, enum ibv_wc_status st, char *why, size_t whylen,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int hostile(struct ibv_wc *wc, enum ibv_wc_status st, char *why, size_t whylen,
                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    wc->status = st;
    wc->byte_len = 0;
    return -EPROTO;
}

int dp_cqe_to_wc(struct hw_qp *qp, const uint8_t *raw, struct ibv_wc *wc, char *why, size_t whylen)
{
    const struct mlx5_cqe64 *c = (const void *)raw;
    uint8_t opcode = c->op_own >> 4;
    uint16_t counter = be16toh(c->wqe_counter);
    memset(wc, 0, sizeof *wc);
    wc->qp_num = qp->qpn;
    int req = opcode == MLX5_CQE_REQ || opcode == MLX5_CQE_REQ_ERR;
    int resp = opcode == MLX5_CQE_RESP_SEND || opcode == MLX5_CQE_RESP_SEND_IMM ||
               opcode == MLX5_CQE_RESP_WR_IMM || opcode == MLX5_CQE_RESP_ERR;
    if (!req && !resp)
        return hostile(wc, IBV_WC_GENERAL_ERR, why, whylen, "CQE opcode 0x%x is none a completion "
                       "of this queue pair can have (a corrupted CQE)", opcode);
    if (req) {
        /* WQE basic blocks [sq_ci, sq_pi) are in flight (16-bit counters) */
        uint16_t in_flight = (uint16_t)(qp->sq_pi - qp->sq_ci);
        uint16_t at = (uint16_t)(counter - (uint16_t)qp->sq_ci);
        if (at >= in_flight)
            return hostile(wc, IBV_WC_GENERAL_ERR, why, whylen, "send CQE names WQE %u, but "
                           "%u..%u are in flight (a corrupted CQE)", counter,
                           qp->sq_ci & 0xffff, (qp->sq_pi - 1) & 0xffff);
        struct hw_sq_slot *s = &qp->sq_slots[counter & ((1u << qp->log_sq_size) - 1)];
        if ((uint32_t)at + s->nbb > in_flight)
            return hostile(wc, IBV_WC_GENERAL_ERR, why, whylen, "send CQE names WQE %u, which "
                           "does not start a WQE in flight (a corrupted CQE)", counter);
        wc->wr_id = s->wr_id;
        wc->opcode = (enum ibv_wc_opcode)s->opcode;
        /* everything up to this WQE is done (unsignaled ones included) */
        qp->sq_ci += (uint32_t)at + s->nbb;
    } else {
        /* receives complete in order: the oldest posted one (as Linux
         * takes its own tail for a plain RQ); the device must agree */
        uint32_t slot = qp->rq_ci & ((1u << qp->log_rq_size) - 1);
        if (qp->rq_ci == qp->rq_pi || counter != (uint16_t)qp->rq_ci)
            return hostile(wc, IBV_WC_GENERAL_ERR, why, whylen, "receive CQE names WQE %u, but "
                           "%u receives are posted from %u (a corrupted CQE)", counter,
                           qp->rq_pi - qp->rq_ci, qp->rq_ci & 0xffff);
        if (opcode != MLX5_CQE_RESP_ERR && be32toh(c->byte_cnt) > qp->rq_len[slot]) {
            wc->wr_id = qp->rq_wrid[slot];
            qp->rq_ci++;        /* that receive is spent, whatever the device says */
            return hostile(wc, IBV_WC_LOC_LEN_ERR, why, whylen, "receive CQE says %u bytes "
                           "arrived in a %u-byte receive (a corrupted CQE)", be32toh(c->byte_cnt),
                           qp->rq_len[slot]);
        }
        wc->wr_id = qp->rq_wrid[slot];
        qp->rq_ci++;
        wc->opcode = opcode == MLX5_CQE_RESP_WR_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    }
    if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) {
        const struct mlx5_err_cqe *e = (const void *)raw;
        wc->status = status_of(e->syndrome);
        wc->vendor_err = (uint32_t)e->syndrome << 8 | e->vendor_err_synd;
        return 0;
    }
    wc->status = IBV_WC_SUCCESS;
    wc->byte_len = be32toh(c->byte_cnt);
    if (opcode == MLX5_CQE_RESP_SEND_IMM || opcode == MLX5_CQE_RESP_WR_IMM) {
        wc->wc_flags |= IBV_WC_WITH_IMM;
        wc->imm_data = c->imm_inval_pkey;
    }
    return 0;
}

/* Arm: CQ doorbell record, then the 64-bit UAR write; and arm the EQ. */
void dp_cq_arm(struct mlx5_hca *h, struct hw_cq *cq)
{
    uint32_t dw0 = (cq->arm_sn & 3) << 28 | MLX5_CQ_DB_REQ_NOT | (cq->ci & 0xffffff);
    ((volatile uint32_t *)cq->dbr.virt)[CQ_DBR_ARM] = htobe32(dw0);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint8_t db[8];
    st_be32(db, dw0);
    st_be32(db + 4, cq->cqn);
    h->pci->ops->write64(h->pci, h->uar * UAR_PAGE + UAR_CQ_DOORBELL, db);
    h->pci->ops->write32(h->pci, h->uar * UAR_PAGE + UAR_EQ_ARM, (cq->eq.ci & 0xffffff) | cq->eq.eqn << 24);
}

/* Consume the events behind a readable completion fd: EQEs and the eventfd. */
int dp_cq_ack(struct mlx5_hca *h, struct hw_cq *cq)
{
    uint64_t n;
    if (read(cq->eq.fd, &n, sizeof n) < 0) {
        /* nothing signalled: count the EQEs anyway */
    }
    struct hw_eq *eq = &cq->eq;
    uint32_t size = 1u << eq->log_size;
    int events = 0;
    /* at most one pass over the queue: a device that keeps rewriting owner
     * bits cannot hold the caller here */
    for (uint32_t seen = 0; seen < size; seen++) {
        uint8_t *e = (uint8_t *)eq->buf.virt + (size_t)(eq->ci & (size - 1)) * EQE_BYTES;
        uint8_t owner = __atomic_load_n(&e[EQE_BYTES - 1], __ATOMIC_ACQUIRE) & 1;
        if (owner != ((eq->ci >> eq->log_size) & 1))
            break;
        eq->ci++;
        events++;
        cq->arm_sn++;
    }
    if (events)
        h->pci->ops->write32(h->pci, h->uar * UAR_PAGE + UAR_EQ_NOARM, (eq->ci & 0xffffff) | eq->eqn << 24);
    return events;
}
