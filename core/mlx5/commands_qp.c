/* commands_qp.c - the firmware commands of the queues, one function each:
 * CREATE/DESTROY_EQ, CREATE/DESTROY_CQ, CREATE/DESTROY_QP, RST2INIT_QP,
 * INIT2RTR_QP, RTR2RTS_QP, 2ERR_QP, 2RST_QP, QUERY_QP; with the buffers
 * (rings, doorbell records) they need. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

#include "mlx5/cmdif.h"
#include "mlx5/queues.h"
#include "util/util.h"

static uint32_t log2_up(uint32_t v)
{
    uint32_t l = 0;
    while ((1u << l) < v)
        l++;
    return l;
}

static uint32_t npages(size_t bytes) { return (uint32_t)((bytes + HCA_PAGE - 1) / HCA_PAGE); }

static void put_pas(uint8_t *dst, const struct mlx5_dma *d, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        st_be64(dst + 8 * i, d->bus + (uint64_t)i * HCA_PAGE);
}

static int alloc(struct mlx5_hca *h, struct mlx5_dma *d, size_t bytes, const char *what)
{
    int rc = h->pci->ops->dma_alloc(h->pci, bytes, HCA_PAGE, d);
    return rc < 0 ? hca_fail(h, -rc, "mlx5 %s: cannot allocate %zu bytes of DMA memory", what, bytes) : 0;
}

static void release(struct mlx5_hca *h, struct mlx5_dma *d)
{
    if (d->virt)
        h->pci->ops->dma_free(h->pci, d);
}

/* ---- EQ ------------------------------------------------------------------------ */
int mlx5_create_eq(struct mlx5_hca *h, struct hw_eq *eq)
{
    eq->log_size = EQ_LOG_SIZE;
    size_t bytes = (size_t)EQE_BYTES << eq->log_size;
    uint32_t np = npages(bytes);
    int rc = alloc(h, &eq->buf, bytes, "CREATE_EQ");
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < 1u << eq->log_size; i++) /* MLX5_EQE_OWNER_INIT_VAL */
        ((uint8_t *)eq->buf.virt)[i * EQE_BYTES + EQE_BYTES - 1] = MLX5C_EQE_OWNER_INIT_VAL;
    eq->vector = (int)(h->next_vector++ % 64);
    eq->fd = h->pci->ops->irq_fd(h->pci, eq->vector);
    if (eq->fd < 0) {
        release(h, &eq->buf);
        return hca_fail(h, -eq->fd, "mlx5 CREATE_EQ: no interrupt vector %d", eq->vector);
    }
    uint32_t inlen = MLX5S_create_eq_in + 8 * np;
    uint8_t *in = calloc(1, inlen), out[MLX5S_create_eq_out] = {0};
    if (!in) {
        release(h, &eq->buf);
        return hca_fail(h, ENOMEM, "mlx5 CREATE_EQ: out of memory");
    }
    ISET(in, create_eq_in, opcode, MLX5OP_CREATE_EQ);
    uint8_t *eqc = in + IBYTE(create_eq_in, eq_context_entry);
    ISET(eqc, eqc, log_eq_size, eq->log_size);
    ISET(eqc, eqc, uar_page, h->uar);
    ISET(eqc, eqc, intr, (uint32_t)eq->vector);
    /* event_bitmask[0] (a big-endian 64-bit mask): completion events only */
    ifc_set(in, IOFF(create_eq_in, event_bitmask) + 63 - MLX5C_EVENT_TYPE_COMP, 1, 1);
    put_pas(in + MLX5S_create_eq_in, &eq->buf, np);
    rc = cmd_exec(h, in, inlen, out, sizeof out);
    free(in);
    if (rc < 0) {
        release(h, &eq->buf);
        return rc;
    }
    eq->eqn = IGET(out, create_eq_out, eq_number);
    eq->ci = 0;
    return 0;
}

int mlx5_destroy_eq(struct mlx5_hca *h, struct hw_eq *eq)
{
    uint8_t in[MLX5S_destroy_eq_in] = {0}, out[MLX5S_destroy_eq_out] = {0};
    ISET(in, destroy_eq_in, opcode, MLX5OP_DESTROY_EQ);
    ISET(in, destroy_eq_in, eq_number, eq->eqn);
    int rc = cmd_exec(h, in, sizeof in, out, sizeof out);
    if (rc == 0)
        release(h, &eq->buf);
    return rc;
}

/* ---- CQ ------------------------------------------------------------------------ */
/* A queue-size limit from the capabilities (device output) as a log2, at
 * most 24: sizes are counted in 24-bit fields. */
static uint32_t cap_log(uint32_t log) { return log > 24 ? 24 : log; }

int mlx5_create_cq(struct mlx5_hca *h, struct hw_cq *cq, int cqe)
{
    uint32_t max_log = cap_log(IGET(h->cap_gen, cmd_hca_cap, log_max_cq_sz));
    if (cqe < 1 || (uint32_t)cqe >= 1u << max_log)
        return hca_fail(h, EINVAL, "mlx5 CREATE_CQ: %d entries; the device allows up to %u "
                        "(log_max_cq_sz %u)", cqe, (1u << max_log) - 1, max_log);
    cq->log_size = log2_up((uint32_t)cqe + 1);
    size_t bytes = (size_t)CQE_BYTES << cq->log_size;
    uint32_t np = npages(bytes);
    int rc;
    if ((rc = alloc(h, &cq->buf, bytes, "CREATE_CQ")) < 0)
        return rc;
    if ((rc = alloc(h, &cq->dbr, HCA_PAGE, "CREATE_CQ")) < 0) {
        release(h, &cq->buf);
        return rc;
    }
    for (uint32_t i = 0; i < 1u << cq->log_size; i++) {
        struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)((uint8_t *)cq->buf.virt + (size_t)i * CQE_BYTES);
        c->op_own = MLX5_CQE_INVALID << 4;
    }
    uint32_t inlen = MLX5S_create_cq_in + 8 * np;
    uint8_t *in = calloc(1, inlen), out[MLX5S_create_cq_out] = {0};
    if (!in) {
        hw_cq_free(h, cq);
        return hca_fail(h, ENOMEM, "mlx5 CREATE_CQ: out of memory");
    }
    ISET(in, create_cq_in, opcode, MLX5OP_CREATE_CQ);
    uint8_t *cqc = in + IBYTE(create_cq_in, cq_context);
    ISET(cqc, cqc, log_cq_size, cq->log_size);
    ISET(cqc, cqc, uar_page, h->uar);
    ISET(cqc, cqc, c_eqn_or_apu_element, cq->eq.eqn);
    ISET64(cqc, cqc, dbr_addr, cq->dbr.bus);
    put_pas(in + MLX5S_create_cq_in, &cq->buf, np);
    rc = cmd_exec(h, in, inlen, out, sizeof out);
    free(in);
    if (rc < 0) {
        hw_cq_free(h, cq);
        return rc;
    }
    cq->cqn = IGET(out, create_cq_out, cqn);
    cq->ci = 0;
    return 0;
}

int mlx5_destroy_cq(struct mlx5_hca *h, struct hw_cq *cq)
{
    uint8_t in[MLX5S_destroy_cq_in] = {0}, out[MLX5S_destroy_cq_out] = {0};
    ISET(in, destroy_cq_in, opcode, MLX5OP_DESTROY_CQ);
    ISET(in, destroy_cq_in, cqn, cq->cqn);
    int rc = cmd_exec(h, in, sizeof in, out, sizeof out);
    if (rc == 0)
        hw_cq_free(h, cq);
    return rc;
}

void hw_cq_free(struct mlx5_hca *h, struct hw_cq *cq)
{
    release(h, &cq->buf);
    release(h, &cq->dbr);
}

/* ---- QP ------------------------------------------------------------------------ */
int mlx5_create_qp(struct mlx5_hca *h, struct hw_qp *qp, uint32_t pd, int qp_type,
                   struct ibv_qp_cap *cap, uint32_t cqn_snd, uint32_t cqn_rcv)
{
    uint32_t ssge = TBRT_MAX(1u, cap->max_send_sge), rsge = TBRT_MAX(1u, cap->max_recv_sge);
    if (ssge > QP_MAX_SGE || rsge > QP_MAX_SGE)
        return hca_fail(h, EINVAL, "mlx5 CREATE_QP: at most %d scatter/gather entries", QP_MAX_SGE);
    /* ctrl + raddr + data segments, in 64-byte basic blocks */
    uint32_t nbb = ((2 + ssge) * WQE_DS_BYTES + WQEBB_BYTES - 1) / WQEBB_BYTES;
    uint32_t max_log = cap_log(IGET(h->cap_gen, cmd_hca_cap, log_max_qp_sz));
    if ((uint64_t)TBRT_MAX(1u, cap->max_send_wr) * nbb > 1u << max_log ||
        cap->max_recv_wr > 1u << max_log)
        return hca_fail(h, EINVAL, "mlx5 CREATE_QP: %u send / %u receive work requests; the "
                        "device allows %u basic blocks (%u sends of %u blocks) and %u receives "
                        "(log_max_qp_sz %u)", cap->max_send_wr, cap->max_recv_wr, 1u << max_log,
                        (1u << max_log) / nbb, nbb, 1u << max_log, max_log);
    qp->st = qp_type == IBV_QPT_UC ? MLX5C_QP_ST_UC : MLX5C_QP_ST_RC;
    qp->log_sq_size = log2_up(TBRT_MAX(1u, cap->max_send_wr) * nbb);
    qp->log_rq_size = log2_up(TBRT_MAX(1u, cap->max_recv_wr));
    qp->log_rq_stride = log2_up(rsge); /* stride = 16 << log, one data segment per 16 bytes */
    size_t rq_bytes = (size_t)WQE_DS_BYTES << qp->log_rq_stride << qp->log_rq_size;
    size_t sq_bytes = (size_t)WQEBB_BYTES << qp->log_sq_size;
    uint32_t np = npages(rq_bytes + sq_bytes);
    int rc;
    qp->sq_slots = calloc(1u << qp->log_sq_size, sizeof *qp->sq_slots);
    qp->rq_wrid = calloc(1u << qp->log_rq_size, sizeof *qp->rq_wrid);
    qp->rq_len = calloc(1u << qp->log_rq_size, sizeof *qp->rq_len);
    if (!qp->sq_slots || !qp->rq_wrid || !qp->rq_len) {
        hw_qp_free(h, qp);
        return hca_fail(h, ENOMEM, "mlx5 CREATE_QP: out of memory");
    }
    if ((rc = alloc(h, &qp->buf, (size_t)np * HCA_PAGE, "CREATE_QP")) < 0 ||
        (rc = alloc(h, &qp->dbr, HCA_PAGE, "CREATE_QP")) < 0) {
        hw_qp_free(h, qp);
        return rc;
    }
    qp->rq = qp->buf.virt;
    qp->sq = qp->rq + rq_bytes;
    uint32_t inlen = MLX5S_create_qp_in + 8 * np;
    uint8_t *in = calloc(1, inlen), out[MLX5S_create_qp_out] = {0};
    if (!in) {
        hw_qp_free(h, qp);
        return hca_fail(h, ENOMEM, "mlx5 CREATE_QP: out of memory");
    }
    ISET(in, create_qp_in, opcode, MLX5OP_CREATE_QP);
    uint8_t *qpc = in + IBYTE(create_qp_in, qpc);
    ISET(qpc, qpc, st, qp->st);
    ISET(qpc, qpc, pm_state, MLX5C_QP_PM_MIGRATED);
    ISET(qpc, qpc, pd, pd);
    ISET(qpc, qpc, uar_page, h->uar);
    ISET(qpc, qpc, log_rq_stride, qp->log_rq_stride);
    ISET(qpc, qpc, log_rq_size, qp->log_rq_size);
    ISET(qpc, qpc, log_sq_size, qp->log_sq_size);
    ISET(qpc, qpc, cqn_snd, cqn_snd);
    ISET(qpc, qpc, cqn_rcv, cqn_rcv);
    ISET64(qpc, qpc, dbr_addr, qp->dbr.bus);
    put_pas(in + MLX5S_create_qp_in, &qp->buf, np);
    rc = cmd_exec(h, in, inlen, out, sizeof out);
    free(in);
    if (rc < 0) {
        hw_qp_free(h, qp);
        return rc;
    }
    qp->qpn = IGET(out, create_qp_out, qpn);
    qp->max_send_sge = ssge;
    qp->max_recv_sge = rsge;
    cap->max_send_wr = (1u << qp->log_sq_size) / nbb;
    cap->max_recv_wr = 1u << qp->log_rq_size;
    cap->max_send_sge = ssge;
    cap->max_recv_sge = rsge;
    cap->max_inline_data = 0;
    return 0;
}

void hw_qp_free(struct mlx5_hca *h, struct hw_qp *qp)
{
    release(h, &qp->buf);
    release(h, &qp->dbr);
    free(qp->sq_slots);
    free(qp->rq_wrid);
    free(qp->rq_len);
    qp->sq_slots = NULL;
    qp->rq_wrid = NULL;
    qp->rq_len = NULL;
}

int mlx5_destroy_qp(struct mlx5_hca *h, struct hw_qp *qp)
{
    uint8_t in[MLX5S_destroy_qp_in] = {0}, out[MLX5S_destroy_qp_out] = {0};
    ISET(in, destroy_qp_in, opcode, MLX5OP_DESTROY_QP);
    ISET(in, destroy_qp_in, qpn, qp->qpn);
    int rc = cmd_exec(h, in, sizeof in, out, sizeof out);
    if (rc == 0)
        hw_qp_free(h, qp);
    return rc;
}

/* Linux rdma_calc_flow_label + rdma_flow_label_to_udp_sport: the RoCE v2
 * UDP source port from the two QP numbers, as the seed does. */
uint16_t mlx5_udp_sport(uint32_t lqpn, uint32_t rqpn)
{
    uint64_t v = (uint64_t)lqpn * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    uint32_t fl = (uint32_t)v & IB_FLOW_LABEL_MASK;
    uint32_t low = fl & 0x3fff, high = fl & 0xfc000;
    low ^= high >> 14;
    return (uint16_t)(low | IB_ROCE_UDP_SPORT_MIN);
}

static uint32_t log2_of(uint32_t v) { return v ? log2_up(v) : 0; }

/* The modify commands share one layout (rst2init_qp_in). */
static int modify(struct mlx5_hca *h, uint32_t opcode, struct hw_qp *qp, const struct ibv_qp_attr *a)
{
    uint8_t in[MLX5S_rst2init_qp_in] = {0}, out[MLX5S_rst2init_qp_out] = {0};
    ISET(in, rst2init_qp_in, opcode, opcode);
    ISET(in, rst2init_qp_in, qpn, qp->qpn);
    uint8_t *qpc = in + IBYTE(rst2init_qp_in, qpc);
    ISET(qpc, qpc, pm_state, MLX5C_QP_PM_MIGRATED);
    switch (opcode) {
    case MLX5OP_RST2INIT_QP:
        ISET(qpc, qpc, primary_address_path_vhca_port_num, a->port_num ? a->port_num : 1);
        ISET(qpc, qpc, primary_address_path_pkey_index, a->pkey_index);
        ISET(qpc, qpc, rwe, (a->qp_access_flags & IBV_ACCESS_REMOTE_WRITE) ? 1 : 0);
        ISET(qpc, qpc, rre, (a->qp_access_flags & IBV_ACCESS_REMOTE_READ) ? 1 : 0);
        ISET(qpc, qpc, rae, (a->qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC) ? 1 : 0);
        break;
    case MLX5OP_INIT2RTR_QP:
        ISET(qpc, qpc, mtu, a->path_mtu);
        ISET(qpc, qpc, log_msg_max, IGET(h->cap_gen, cmd_hca_cap, log_max_msg));
        ISET(qpc, qpc, remote_qpn, a->dest_qp_num);
        ISET(qpc, qpc, next_rcv_psn, a->rq_psn);
        ISET(qpc, qpc, log_rra_max, log2_of(a->max_dest_rd_atomic));
        ISET(qpc, qpc, min_rnr_nak, a->min_rnr_timer);
        ISET(qpc, qpc, primary_address_path_grh, 1);
        ISET(qpc, qpc, primary_address_path_src_addr_index, a->ah_attr.grh.sgid_index);
        ISET(qpc, qpc, primary_address_path_hop_limit, a->ah_attr.grh.hop_limit ? a->ah_attr.grh.hop_limit : 64);
        ISET(qpc, qpc, primary_address_path_vhca_port_num, a->ah_attr.port_num ? a->ah_attr.port_num : 1);
        ISET(qpc, qpc, primary_address_path_udp_sport, mlx5_udp_sport(qp->qpn, a->dest_qp_num));
        ifc_set_bytes(qpc, MLX5F_qpc__primary_address_path_rgid_rip, a->ah_attr.grh.dgid.raw);
        break;
    case MLX5OP_RTR2RTS_QP:
        ISET(qpc, qpc, next_send_psn, a->sq_psn);
        ISET(qpc, qpc, retry_count, a->retry_cnt);
        ISET(qpc, qpc, rnr_retry, a->rnr_retry);
        ISET(qpc, qpc, primary_address_path_ack_timeout, a->timeout);
        ISET(qpc, qpc, log_sra_max, log2_of(a->max_rd_atomic));
        break;
    }
    return cmd_exec(h, in, sizeof in, out, sizeof out);
}

int mlx5_rst2init_qp(struct mlx5_hca *h, struct hw_qp *qp, const struct ibv_qp_attr *a)
{
    return modify(h, MLX5OP_RST2INIT_QP, qp, a);
}

int mlx5_init2rtr_qp(struct mlx5_hca *h, struct hw_qp *qp, const struct ibv_qp_attr *a)
{
    return modify(h, MLX5OP_INIT2RTR_QP, qp, a);
}

int mlx5_rtr2rts_qp(struct mlx5_hca *h, struct hw_qp *qp, const struct ibv_qp_attr *a)
{
    return modify(h, MLX5OP_RTR2RTS_QP, qp, a);
}

int mlx5_2err_qp(struct mlx5_hca *h, struct hw_qp *qp)
{
    uint8_t in[MLX5S_qp_2err_in] = {0}, out[MLX5S_qp_2err_out] = {0};
    ISET(in, qp_2err_in, opcode, MLX5OP_2ERR_QP);
    ISET(in, qp_2err_in, qpn, qp->qpn);
    return cmd_exec(h, in, sizeof in, out, sizeof out);
}

int mlx5_2rst_qp(struct mlx5_hca *h, struct hw_qp *qp)
{
    uint8_t in[MLX5S_qp_2rst_in] = {0}, out[MLX5S_qp_2rst_out] = {0};
    ISET(in, qp_2rst_in, opcode, MLX5OP_2RST_QP);
    ISET(in, qp_2rst_in, qpn, qp->qpn);
    int rc = cmd_exec(h, in, sizeof in, out, sizeof out);
    if (rc == 0) {
        qp->sq_pi = qp->sq_ci = qp->rq_pi = qp->rq_ci = 0;
        memset(qp->dbr.virt, 0, 8);
    }
    return rc;
}

int mlx5_query_qp_state(struct mlx5_hca *h, uint32_t qpn, int *state)
{
    uint8_t in[MLX5S_query_qp_in] = {0}, out[MLX5S_query_qp_out] = {0};
    ISET(in, query_qp_in, opcode, MLX5OP_QUERY_QP);
    ISET(in, query_qp_in, qpn, qpn);
    int rc = cmd_exec(h, in, sizeof in, out, sizeof out);
    *state = (int)IGET(out, query_qp_out, qpc_state);
    return rc;
}
