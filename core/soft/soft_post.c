/* soft_post.c - posting to the soft device, and its progress.
 *
 * post_recv and post_send check a work request against the API's and the
 * personality's rules, keep what only the owner may know of it (wr_id,
 * length, frames, signaled) in its records by slot, and hand the wire the
 * rest by index. A slot comes back once its result was taken (soft_reap.c):
 * a queue that seems full is reaped first. Both then give the "hardware" a
 * turn (soft_progress): the wire moves what it can (its own sends, a peer's
 * sends that wait for the receive just posted) and reports queue pairs that
 * went to ERR or broke, which are flushed here. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

static struct soft_cq *cq_of(tbrt_cq *cq) { return (struct soft_cq *)cq; }

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return IBV_WC_FETCH_ADD;
    default:
        return IBV_WC_SEND;
    }
}

/* A work request posted to a QP in ERR completes at once, flushed. */
static void flushed(struct soft_qp *q, tbrt_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op)
{
    struct ibv_wc wc = {.wr_id = wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = op,
                        .vendor_err = SOFT_VERR_FLUSH, .qp_num = q->qp.qp_num};
    if (q->broken && !q->broken_told) {
        wc.status = IBV_WC_LOC_QP_OP_ERR;
        wc.vendor_err = SOFT_VERR_CORRUPT;
        q->broken_told = true;
    }
    soft_cq_add(cq_of(cq), &wc, soft_stamp());
    soft_cq_wake(cq_of(cq));
}

/* ---- receives --------------------------------------------------------------- */

int soft_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct soft_qp *q = (struct soft_qp *)qp;
    struct soft_dev *sd = q->sd;
    const struct soft_personality *p = sd->p;
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (q->srq)
            return dev_fail(qp->dev, EINVAL, "post_recv: QP 0x%x takes its receives from SRQ "
                            "0x%x: post them there (ibv_post_srq_recv)", qp->qp_num,
                            q->srq->srq.srq_num);
        if (qp->state == IBV_QPS_RESET)
            return dev_fail(qp->dev, EINVAL, "post_recv: QP 0x%x is in RESET", qp->qp_num);
        if (p->recv_needs_rts && qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
            return dev_fail(qp->dev, EINVAL,
                            "post_recv: QP 0x%x is in %s; Apple's provider accepts receives "
                            "only once the QP is RTS (post them after the RTS transition)",
                            qp->qp_num, dev_qp_state_name(qp->state));
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_recv_sge)
            return dev_fail(qp->dev, EINVAL, "post_recv: %d scatter entries, max_recv_sge %u",
                            wr->num_sge, qp->cap.max_recv_sge);
        uint64_t total = 0;
        for (int i = 0; i < wr->num_sge; i++)
            total += wr->sg_list[i].length;
        uint32_t frames = p->depth_in_frames ? soft_frames(total) : 1;
        if (qp->state == IBV_QPS_ERR) {
            flushed(q, qp->recv_cq, wr->wr_id, IBV_WC_RECV);
            continue;
        }
        /* slots come back once reaped: reap only when we seem to be full */
        if (q->rq_prod - q->rq_done >= q->rq_cap || q->rq_frames + frames > qp->cap.max_recv_wr)
            soft_reap_recv(q);
        if (q->rq_prod - q->rq_done >= q->rq_cap ||
            q->rq_frames + frames > qp->cap.max_recv_wr)
            return dev_fail(qp->dev, ENOMEM, "post_recv: receive queue full (%u of %u%s)",
                            p->depth_in_frames ? q->rq_frames : (uint32_t)(q->rq_prod - q->rq_done),
                            qp->cap.max_recv_wr,
                            p->depth_in_frames ? " frames; TN3205 counts depth in 4 KiB frames"
                                               : " work requests");
        uint32_t slot = (uint32_t)(q->rq_prod & q->rq_mask);
        struct soft_rwr *rw = &q->rq_wr[slot];
        rw->wr = (struct soft_wr){.wr_id = wr->wr_id, .total = total, .frames = frames};
        rw->num_sge = (uint32_t)wr->num_sge;
        memcpy(rw->sge, wr->sg_list, (size_t)wr->num_sge * sizeof rw->sge[0]);
        struct soft_wire_recv r = {.num_sge = (uint32_t)wr->num_sge, .total = total,
                                   .sge = wr->sg_list};
        sd->wops->post_recv(q->wq, q->rq_prod, &r);
        q->rq_frames += frames;
        q->rq_prod++;
    }
    *bad = NULL;
    soft_progress_if_needed(sd);       /* a peer's send may wait for these receives */
    return 0;
}

/* ---- sends ---------------------------------------------------------------- */

static bool opcode_ok(int qp_type, enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return qp_type == IBV_QPT_RC || qp_type == IBV_QPT_UC;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return qp_type == IBV_QPT_RC;
    default:
        return false;
    }
}

static bool is_atomic(enum ibv_wr_opcode op)
{
    return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

static const char *opcode_name(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE: return "RDMA_WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM: return "RDMA_WRITE_WITH_IMM";
    case IBV_WR_SEND: return "SEND";
    case IBV_WR_SEND_WITH_IMM: return "SEND_WITH_IMM";
    case IBV_WR_RDMA_READ: return "RDMA_READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP: return "ATOMIC_CMP_AND_SWP";
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return "ATOMIC_FETCH_AND_ADD";
    case IBV_WR_LOCAL_INV: return "LOCAL_INV";
    case IBV_WR_BIND_MW: return "BIND_MW";
    case IBV_WR_SEND_WITH_INV: return "SEND_WITH_INV";
    case IBV_WR_TSO: return "TSO";
    case IBV_WR_DRIVER1: return "DRIVER1";
    default: return NULL;
    }
}

/* Why an opcode cannot be posted here (opcode_ok said no). */
static int bad_opcode(tbrt_qp *qp, enum ibv_wr_opcode op)
{
    const char *name = opcode_name(op);
    if (!name)
        return dev_fail(qp->dev, EINVAL, "post_send: opcode %d is not a work request opcode",
                        op);
    if (op == IBV_WR_RDMA_READ || is_atomic(op) || op == IBV_WR_RDMA_WRITE ||
        op == IBV_WR_RDMA_WRITE_WITH_IMM)
        return dev_fail(qp->dev, EINVAL, "post_send: IBV_WR_%s needs %s (this QP is %s)", name,
                        op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM
                            ? "an RC or UC QP" : "an RC QP",
                        dev_qp_type_name(qp->qp_type));
    return dev_fail(qp->dev, EOPNOTSUPP, "post_send: IBV_WR_%s: the soft device has no memory "
                    "windows, invalidation or TSO", name);
}

/* The doorbell: this queue's sends run now; a wire without one (or that
 * cannot here) gets a whole turn. */
static void ring_doorbell(struct soft_dev *sd, struct soft_qp *q)
{
    if (!sd->wops->doorbell || !sd->wops->doorbell(q->wq))
        soft_progress(sd);
}

int soft_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct soft_qp *q = (struct soft_qp *)qp;
    struct soft_dev *sd = q->sd;
    const struct soft_personality *p = sd->p;
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
            return dev_fail(qp->dev, EINVAL, "post_send: QP 0x%x is in %s; sends need RTS",
                            qp->qp_num, dev_qp_state_name(qp->state));
        if (!opcode_ok(qp->qp_type, wr->opcode))
            return bad_opcode(qp, wr->opcode);
        /* an atomic's one SGE is where the original 8 bytes go */
        if (TBRT_UNLIKELY(is_atomic(wr->opcode)) &&
            (wr->num_sge != 1 || wr->sg_list[0].length != SOFT_ATOMIC_SIZE ||
             (wr->send_flags & IBV_SEND_INLINE)))
            return dev_fail(qp->dev, EINVAL, "post_send: an atomic takes one SGE of %d bytes "
                            "for the original value, not inline (num_sge %d%s)",
                            SOFT_ATOMIC_SIZE, wr->num_sge,
                            (wr->send_flags & IBV_SEND_INLINE) ? ", IBV_SEND_INLINE" : "");
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
            return dev_fail(qp->dev, EINVAL, "post_send: %d gather entries, max_send_sge %u",
                            wr->num_sge, qp->cap.max_send_sge);
        uint64_t total = 0;
        for (int i = 0; i < wr->num_sge; i++)
            total += wr->sg_list[i].length;
        if ((wr->send_flags & IBV_SEND_INLINE) && total > qp->cap.max_inline_data)
            return dev_fail(qp->dev, EINVAL, "post_send: %llu inline bytes, max_inline_data %u",
                            (unsigned long long)total, qp->cap.max_inline_data);
        if (total > p->max_msg && p->flavor == TBRT_FLAVOR_APPLE)
            return dev_fail(qp->dev, EINVAL,
                            "post_send: a %llu-byte message exceeds the %llu-byte maximum "
                            "(4095 frames of 4 KiB, TN3205)",
                            (unsigned long long)total, (unsigned long long)p->max_msg);
        if (qp->qp_type == IBV_QPT_UD && !wr->wr.ud.ah)
            return dev_fail(qp->dev, EINVAL, "post_send: UD send without an address handle");
        uint32_t frames = p->depth_in_frames ? soft_frames(total) : 1;
        if (q->sq_tail - q->sq_done >= q->sq_cap || q->sq_frames + frames > qp->cap.max_send_wr)
            soft_reap_send(q);
        if (q->sq_tail - q->sq_done >= q->sq_cap || q->sq_frames + frames > qp->cap.max_send_wr)
            return dev_fail(qp->dev, ENOMEM, "post_send: send queue full (%u of %u%s)",
                            p->depth_in_frames ? q->sq_frames : (uint32_t)(q->sq_tail - q->sq_done),
                            qp->cap.max_send_wr,
                            p->depth_in_frames ? " frames; TN3205 counts depth in 4 KiB frames"
                                               : " work requests");
        bool signaled = (wr->send_flags & IBV_SEND_SIGNALED) || q->sq_sig_all;
        if (qp->state == IBV_QPS_ERR) {
            flushed(q, qp->send_cq, wr->wr_id, wc_opcode(wr->opcode));
            continue;
        }
        uint32_t slot = (uint32_t)(q->sq_tail & q->sq_mask);
        q->sq_wr[slot] = (struct soft_wr){.wr_id = wr->wr_id, .total = total, .frames = frames,
                                          .opcode = (uint8_t)wc_opcode(wr->opcode),
                                          .signaled = signaled};
        /* one small inline RDMA WRITE alone (a latency-bound sender's, the
         * engine's eager frames), its rules checked above: the wire may run
         * it now from the work request's words, with no soft_wire_send made
         * and no doorbell after (its queue is empty again) */
        if (wr->opcode == IBV_WR_RDMA_WRITE && !wr->next && wr->num_sge == 1 &&
            (wr->send_flags & IBV_SEND_INLINE) && total && sd->wops->write_inline &&
            sd->wops->write_inline(q->wq, q->sq_tail, (const void *)(uintptr_t)wr->sg_list[0].addr,
                                   (uint32_t)total, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey)) {
            q->sq_frames += frames;
            q->sq_tail++;
            *bad = NULL;
            return 0;
        }
        struct soft_wire_send ws = {.opcode = wr->opcode, .send_flags = wr->send_flags,
                                    .imm_data = wr->imm_data, .num_sge = (uint32_t)wr->num_sge,
                                    .sge = wr->sg_list, .total = total};
        if (qp->qp_type == IBV_QPT_UD) {
            struct soft_ah *ah = (struct soft_ah *)wr->wr.ud.ah;
            const struct ibv_ah_attr *at = &ah->ah.attr;
            memcpy(ws.dgid, at->grh.dgid.raw, 16);
            /* the GRH's source: the GID of the QP's port the handle names, now */
            struct ibv_gid_entry g;
            if (soft_query_gid(qp->dev, q->a.port ? q->a.port : 1, at->grh.sgid_index, &g) >= 0)
                memcpy(ws.sgid, g.gid.raw, 16);
            if (soft_gid_is_local(sd, ws.dgid))
                ws.flags |= SOFT_SEND_DGID_LOCAL;
            ws.remote_qpn = wr->wr.ud.remote_qpn;
            ws.remote_qkey = wr->wr.ud.remote_qkey;
        } else if (is_atomic(wr->opcode)) {
            ws.remote_addr = wr->wr.atomic.remote_addr;
            ws.rkey = wr->wr.atomic.rkey;
            ws.compare_add = wr->wr.atomic.compare_add;
            ws.swap = wr->wr.atomic.swap;
        } else {
            ws.remote_addr = wr->wr.rdma.remote_addr;
            ws.rkey = wr->wr.rdma.rkey;
        }
        sd->wops->post_send(q->wq, q->sq_tail, &ws);
        q->sq_frames += frames;
        q->sq_tail++;
    }
    *bad = NULL;
    ring_doorbell(sd, q);
    return 0;
}

/* ---- progress -------------------------------------------------------------- */

void soft_progress_if_needed(struct soft_dev *sd)
{
    if (!sd->wops->quiet || !sd->wops->quiet(sd->wire))
        soft_progress(sd);
}

void soft_progress(struct soft_dev *sd)
{
    struct soft_wire_event ev[8];
    int n;
    do {
        n = sd->wops->progress(sd->wire, ev, (int)TBRT_ARRAY_LEN(ev));
        for (int i = 0; i < n; i++) {
            if (ev[i].kind == SOFT_WIRE_SRQ_LIMIT) {
                soft_srq_limit_reached(ev[i].cookie);
                continue;
            }
            struct soft_qp *q = ev[i].cookie;
            bool live = q->qp.state != IBV_QPS_ERR && q->qp.state != IBV_QPS_RESET;
            if (ev[i].kind == SOFT_WIRE_BROKEN) {
                if (live)
                    soft_event_push(sd, IBV_EVENT_QP_FATAL, q, 0);
                soft_qp_break(q, false);
                continue;
            }
            if (!live)
                continue;
            static const int of_cause[] = {
                [SOFT_WIRE_CAUSE_FATAL] = IBV_EVENT_QP_FATAL,
                [SOFT_WIRE_CAUSE_REQ] = IBV_EVENT_QP_REQ_ERR,
                [SOFT_WIRE_CAUSE_ACCESS] = IBV_EVENT_QP_ACCESS_ERR,
            };
            int c = ev[i].cause;
            if (c > 0 && c < (int)TBRT_ARRAY_LEN(of_cause))
                soft_event_push(sd, of_cause[c], q, 0);
            soft_qp_to_err(q);
        }
    } while (n == (int)TBRT_ARRAY_LEN(ev));
}
