/* soft_post.c - posting to the soft device, and its progress.
 *
 * post_recv writes a receive into the QP's shared receive queue; post_send
 * writes a send into its shared send queue. Both then give the "hardware"
 * a turn (soft_progress): this process runs its own send queues, and the
 * send queues of connected peers that are waiting for this side (for
 * example for the receive just posted). soft_exec.c does the running. */
#include <errno.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

uint32_t soft_frames(uint64_t bytes)
{
    uint64_t f = (bytes + SOFT_FRAME - 1) / SOFT_FRAME;
    return f ? (uint32_t)f : 1;
}

static struct soft_cq_shared *cq_sh(tbrt_cq *cq) { return ((struct soft_cq *)cq)->sh; }

/* ---- receives --------------------------------------------------------------- */

/* Frames of receives that peers have taken since we last looked. */
static void rq_reclaim(struct soft_qp *q)
{
    struct soft_qp_shared *s = q->sh;
    uint64_t c = atomic_load_explicit(&s->rq_cons, memory_order_acquire);
    while (q->rq_frames_done < c) {
        q->rq_frames -= s->rq[q->rq_frames_done % s->rq_cap].frames;
        q->rq_frames_done++;
    }
}

int soft_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct soft_qp *q = (struct soft_qp *)qp;
    struct soft_dev *sd = q->sd;
    const struct soft_personality *p = sd->p;
    struct soft_qp_shared *s = q->sh;
    for (; wr; wr = wr->next) {
        *bad = wr;
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
        struct soft_rqe r = {.wr_id = wr->wr_id, .num_sge = (uint32_t)wr->num_sge};
        for (int i = 0; i < wr->num_sge; i++) {
            r.sge[i] = wr->sg_list[i];
            r.total += wr->sg_list[i].length;
        }
        r.frames = p->depth_in_frames ? soft_frames(r.total) : 1;
        if (qp->state == IBV_QPS_ERR) {
            struct ibv_wc wc = {.wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                                .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_FLUSH,
                                .qp_num = qp->qp_num};
            soft_cq_push(sd, cq_sh(qp->recv_cq), &wc);
            continue;
        }
        uint64_t prod = atomic_load_explicit(&s->rq_prod, memory_order_relaxed);
        /* what senders took: read their line only when we seem to be full */
        if (prod - q->rq_frames_done >= s->rq_cap || q->rq_frames + r.frames > qp->cap.max_recv_wr)
            rq_reclaim(q);
        if (prod - q->rq_frames_done >= s->rq_cap ||
            q->rq_frames + r.frames > qp->cap.max_recv_wr)
            return dev_fail(qp->dev, ENOMEM, "post_recv: receive queue full (%u of %u%s)",
                            q->rq_frames, qp->cap.max_recv_wr,
                            p->depth_in_frames ? " frames; TN3205 counts depth in 4 KiB frames"
                                               : " work requests");
        struct soft_rqe *slot = &s->rq[prod % s->rq_cap];
        soft_rqe_copy(slot, &r);
        q->rq_frames += r.frames;
        atomic_store_explicit(&slot->seq, prod + 1, memory_order_release);
        atomic_store_explicit(&s->rq_prod, prod + 1, memory_order_relaxed);
    }
    *bad = NULL;
    /* a sender may be waiting for exactly this (pairs with the fence after
     * its help_wanted store in soft_exec.c) */
    atomic_thread_fence(memory_order_seq_cst);
    soft_progress(sd);
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
        return qp_type == IBV_QPT_RC;
    default:
        return false;
    }
}

/* Frames of sends executed since we last looked. */
static void sq_reclaim(struct soft_qp *q)
{
    struct soft_qp_shared *s = q->sh;
    uint64_t h = atomic_load_explicit(&s->sq_head, memory_order_acquire);
    struct soft_swr *sq = soft_sq(s);
    while (q->sq_seen < h) {
        q->sq_frames -= sq[q->sq_seen % s->sq_cap].frames;
        q->sq_seen++;
    }
}

int soft_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct soft_qp *q = (struct soft_qp *)qp;
    struct soft_dev *sd = q->sd;
    const struct soft_personality *p = sd->p;
    struct soft_qp_shared *s = q->sh;
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
            return dev_fail(qp->dev, EINVAL, "post_send: QP 0x%x is in %s; sends need RTS",
                            qp->qp_num, dev_qp_state_name(qp->state));
        if (!opcode_ok(qp->qp_type, wr->opcode))
            return dev_fail(qp->dev, EINVAL, "post_send: opcode %d is not valid on a %s QP",
                            wr->opcode, dev_qp_type_name(qp->qp_type));
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
        sq_reclaim(q);
        uint64_t tail = atomic_load_explicit(&s->sq_tail, memory_order_relaxed);
        if (tail - q->sq_seen >= s->sq_cap || q->sq_frames + frames > qp->cap.max_send_wr)
            return dev_fail(qp->dev, ENOMEM, "post_send: send queue full (%u of %u%s)",
                            p->depth_in_frames ? q->sq_frames : (uint32_t)(tail - q->sq_seen),
                            qp->cap.max_send_wr,
                            p->depth_in_frames ? " frames; TN3205 counts depth in 4 KiB frames"
                                               : " work requests");
        bool signaled = (wr->send_flags & IBV_SEND_SIGNALED) || q->sq_sig_all;
        if (qp->state == IBV_QPS_ERR) {
            struct ibv_wc wc = {.wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                                .opcode = wr->opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ
                                          : wr->opcode == IBV_WR_SEND ||
                                                  wr->opcode == IBV_WR_SEND_WITH_IMM
                                              ? IBV_WC_SEND
                                              : IBV_WC_RDMA_WRITE,
                                .vendor_err = SOFT_VERR_FLUSH, .qp_num = qp->qp_num};
            soft_cq_push(sd, cq_sh(qp->send_cq), &wc);
            continue;
        }
        struct soft_swr *w = &soft_sq(s)[tail % s->sq_cap];
        memset(w, 0, offsetof(struct soft_swr, inl));
        w->wr_id = wr->wr_id;
        w->opcode = wr->opcode;
        w->send_flags = wr->send_flags;
        w->imm_data = wr->imm_data;
        w->num_sge = (uint32_t)wr->num_sge;
        memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof w->sge[0]);
        w->total = total;
        w->frames = frames;
        w->signaled = signaled;
        if (qp->qp_type == IBV_QPT_UD) {
            struct soft_ah *ah = (struct soft_ah *)wr->wr.ud.ah;
            memcpy(w->dgid, ah->ah.attr.grh.dgid.raw, 16);
            w->sgid_index = ah->ah.attr.grh.sgid_index;
            w->remote_qpn = wr->wr.ud.remote_qpn;
            w->remote_qkey = wr->wr.ud.remote_qkey;
        } else {
            w->remote_addr = wr->wr.rdma.remote_addr;
            w->rkey = wr->wr.rdma.rkey;
        }
        if (wr->send_flags & IBV_SEND_INLINE) {
            /* the data goes now: the caller may reuse its buffer on return */
            uint64_t off = 0;
            for (int i = 0; i < wr->num_sge; i++) {
                memcpy(w->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr,
                       wr->sg_list[i].length);
                off += wr->sg_list[i].length;
            }
        }
        q->sq_frames += frames;
        atomic_store_explicit(&s->sq_tail, tail + 1, memory_order_release);
    }
    *bad = NULL;
    soft_progress(sd);
    return 0;
}

/* ---- progress -------------------------------------------------------------- */

void soft_progress(struct soft_dev *sd)
{
    for (struct soft_qp *q = sd->qps; q; q = q->next) {
        struct soft_qp_shared *s = q->sh;
        if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_RTR)
            continue;
        if (atomic_load_explicit(&s->sq_head, memory_order_relaxed) !=
            atomic_load_explicit(&s->sq_tail, memory_order_relaxed))
            soft_sq_run(sd, sd->self, s, q);
        /* a connected peer stopped for want of a receive here: run its sends
         * from this side (it asked; we never poll its queue for nothing,
         * which would steal its cache lines while it posts) */
        if (q->qp.qp_type == IBV_QPT_UD || !q->dest_qpn ||
            !atomic_load_explicit(&s->help_wanted, memory_order_relaxed) ||
            !atomic_exchange(&s->help_wanted, 0))
            continue;
        struct soft_qp_shared *pqp = q->peer_qp;
        if (!pqp) {
            if (soft_peer_lookup(sd, q->dest_qpn, &q->peer, &q->peer_qp))
                continue;
            pqp = q->peer_qp;
        }
        if (pqp->dest_qpn == q->qp.qp_num && pqp->qpn == q->dest_qpn)
            soft_sq_run(sd, q->peer, pqp, NULL);
    }
}
