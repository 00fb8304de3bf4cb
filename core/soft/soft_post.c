/* soft_post.c - posting to the soft device, its progress, and reaping.
 *
 * post_recv writes a receive into the QP's shared receive queue; post_send
 * writes a send into its shared send queue. The owner keeps what only it
 * may know of each (wr_id, length, frames) in its own records, by slot. Both
 * then give the "hardware" a turn (soft_progress): this process runs its own
 * send queues, and the send queues of connected peers that are waiting for
 * this side (for example for the receive just posted). soft_exec.c does the
 * running.
 *
 * Reaping turns finished work into completions: a receive whose slot says
 * done, a send the queue's head has passed. The result in the slot was
 * written by whoever ran the work (maybe a peer), so it is copied once and
 * checked against our records; a slot is free again only once reaped. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

uint32_t soft_frames(uint64_t bytes)
{
    uint64_t f = (bytes + SOFT_FRAME - 1) / SOFT_FRAME;
    return f ? (uint32_t)f : 1;
}

static struct soft_cq *cq_of(tbrt_cq *cq) { return (struct soft_cq *)cq; }

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
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
    soft_cq_add(cq_of(cq), &wc);
}

/* ---- reaping ---------------------------------------------------------------- */

/* Senders take receives in order (rq_cons) and only posted ones, so
 * rq_cons can never pass what we posted; a peer that moved it there broke
 * the queue. Looked at now and then, off the fast path (its line is the
 * senders'). */
static bool rq_cons_sane(struct soft_qp *q)
{
    uint64_t cons = atomic_load_explicit(&q->sh->rq_cons, memory_order_relaxed);
    if (cons - q->rq_done <= q->rq_prod - q->rq_done)
        return true;
    soft_qp_break(q, false, "rq_cons %llu is outside the %llu..%llu it may be (our shared block "
                  "is corrupt)", (unsigned long long)cons, (unsigned long long)q->rq_done,
                  (unsigned long long)q->rq_prod);
    return false;
}

/* UD: several senders fill one queue, so a receive taken by a sender that
 * died never finishes and would stop the reaping for good. Once a later
 * receive has finished and this one stayed unfinished for a while, it is
 * reported as lost. */
#define UD_STALL_NS 100000000ull

static bool ud_stalled(struct soft_qp *q, uint64_t c)
{
    if (q->qp.qp_type != IBV_QPT_UD || c + 1 >= q->rq_prod)
        return false;
    struct soft_rqe *next = &q->sh->rq[(c + 1) % q->rq_cap];
    if (atomic_load_explicit(&next->seq, memory_order_relaxed) != ((c + 2) | SOFT_RQE_DONE)) {
        q->rq_stall_ns = 0;
        return false;
    }
    uint64_t now = now_ns();
    if (!q->rq_stall_ns)
        q->rq_stall_ns = now;
    if (now - q->rq_stall_ns < UD_STALL_NS)
        return false;
    q->rq_stall_ns = 0;
    /* take it back from the vanished sender (a CAS: a live one may win) */
    uint64_t want = c + 1;
    return atomic_compare_exchange_strong(&q->sh->rq[c % q->rq_cap].seq, &want, 0);
}

/* Why a receive's result cannot be, or NULL. */
static const char *recv_result_bad(const struct soft_result *r, const struct soft_wr *w,
                                   char *buf, size_t len)
{
    if (r->status > IBV_WC_GENERAL_ERR)
        snprintf(buf, len, "status %u is not a completion status", r->status);
    else if (r->opcode != IBV_WC_RECV && r->opcode != IBV_WC_RECV_RDMA_WITH_IMM)
        snprintf(buf, len, "opcode %u is not a receive's", r->opcode);
    else if (r->opcode == IBV_WC_RECV && r->byte_len > w->total)
        snprintf(buf, len, "byte_len %u > the %llu bytes posted", r->byte_len,
                 (unsigned long long)w->total);
    else if (r->wc_flags & ~(IBV_WC_GRH | IBV_WC_WITH_IMM))
        snprintf(buf, len, "wc_flags 0x%x", r->wc_flags);
    else if (r->src_qp > 0xffffff)
        snprintf(buf, len, "src_qp 0x%x", r->src_qp);
    else
        return NULL;
    return buf;
}

int soft_recv_ready(struct soft_qp *q, uint64_t *stamp)
{
    if (q->rq_done == q->rq_prod)
        return 0;
    uint64_t c = q->rq_done;
    struct soft_rqe *e = &q->sh->rq[c % q->rq_cap];
    uint64_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);
    *stamp = 0;
    if (seq == ((c + 1) | SOFT_RQE_DONE)) {
        *stamp = e->res.stamp;
        return 1;
    }
    if (seq != c + 1 && seq != ((c + 1) | SOFT_RQE_WRITING))
        return -1;              /* a bad value: take says so */
    /* not finished */
    if ((++q->rq_idle & 255) == 0 && !rq_cons_sane(q))
        return 0;
    if (!ud_stalled(q, c))
        return 0;
    q->rq_lost = true;
    return -1;
}

bool soft_recv_take(struct soft_qp *q)
{
    if (q->rq_done == q->rq_prod)
        return false;
    uint64_t c = q->rq_done;
    uint32_t slot = (uint32_t)(c % q->rq_cap);
    struct soft_rqe *e = &q->sh->rq[slot];
    struct soft_wr *w = &q->rq_wr[slot];
    uint64_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);
    struct soft_result r;
    if (q->rq_lost) {
        r = (struct soft_result){.status = IBV_WC_GENERAL_ERR, .opcode = IBV_WC_RECV,
                                 .vendor_err = SOFT_VERR_PEER_GONE};
    } else if (seq == ((c + 1) | SOFT_RQE_DONE)) {
        memcpy(&r, &e->res, sizeof r);
    } else {
        if (seq != c + 1 && seq != ((c + 1) | SOFT_RQE_WRITING))
            soft_qp_break(q, false, "receive slot %u (receive %llu): seq 0x%llx is neither posted "
                          "nor done (our shared block is corrupt)", slot, (unsigned long long)c,
                          (unsigned long long)seq);
        return false;
    }
    char buf[160];
    const char *bad = recv_result_bad(&r, w, buf, sizeof buf);
    struct ibv_wc wc = {.wr_id = w->wr_id, .status = r.status, .opcode = r.opcode,
                        .vendor_err = r.vendor_err, .byte_len = r.byte_len, .imm_data = r.imm,
                        .qp_num = q->qp.qp_num, .src_qp = r.src_qp, .wc_flags = r.wc_flags};
    if (bad)
        wc = (struct ibv_wc){.wr_id = w->wr_id, .status = IBV_WC_LOC_QP_OP_ERR,
                             .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_CORRUPT,
                             .qp_num = q->qp.qp_num};
    if (!soft_cq_add(cq_of(q->qp.recv_cq), &wc))
        return false;           /* overrun: poll_cq says so */
    q->rq_frames -= w->frames;
    q->rq_done++;
    q->rq_idle = 0;
    q->rq_lost = false;
    if (bad) {
        soft_qp_break(q, true, "receive slot %u (receive %llu): its result's %s (a peer wrote a "
                      "corrupt result)", slot, (unsigned long long)c, bad);
        return false;
    }
    return true;
}

/* Where sq_head may be: from what we reaped to what we posted. */
static bool sq_head_sane(struct soft_qp *q, uint64_t h)
{
    if (h - q->sq_done <= q->sq_tail - q->sq_done)
        return true;
    soft_qp_break(q, false, "sq_head %llu is outside the %llu..%llu it may be (our shared block "
                  "is corrupt)", (unsigned long long)h, (unsigned long long)q->sq_done,
                  (unsigned long long)q->sq_tail);
    return false;
}

int soft_send_ready(struct soft_qp *q, uint64_t *stamp)
{
    *stamp = 0;
    if (q->sq_done == q->sq_tail)
        return 0;
    uint64_t h = atomic_load_explicit(&q->sh->sq_head, memory_order_acquire);
    if (h == q->sq_done)
        return 0;
    if (h - q->sq_done > q->sq_tail - q->sq_done)
        return -1;              /* take says so */
    *stamp = q->self.sq[q->sq_done % q->sq_cap].res.stamp;
    return 1;
}

bool soft_send_take(struct soft_qp *q)
{
    uint64_t h = atomic_load_explicit(&q->sh->sq_head, memory_order_acquire);
    if (q->sq_done == h || !sq_head_sane(q, h))
        return false;
    uint32_t slot = (uint32_t)(q->sq_done % q->sq_cap);
    struct soft_wr *w = &q->sq_wr[slot];
    struct soft_result r;
    memcpy(&r, &q->self.sq[slot].res, sizeof r);
    bool bad = r.status > IBV_WC_GENERAL_ERR;
    if (w->signaled || r.status != IBV_WC_SUCCESS) {
        struct ibv_wc wc = {.wr_id = w->wr_id, .status = r.status, .opcode = w->opcode,
                            .vendor_err = r.vendor_err, .byte_len = (uint32_t)w->total,
                            .qp_num = q->qp.qp_num};
        if (bad) {
            wc.status = IBV_WC_LOC_QP_OP_ERR;
            wc.vendor_err = SOFT_VERR_CORRUPT;
        }
        if (!soft_cq_add(cq_of(q->qp.send_cq), &wc))
            return false;
    }
    q->sq_frames -= w->frames;
    q->sq_done++;
    if (bad) {
        soft_qp_break(q, true, "send slot %u (send %llu): its result's status %u is not a "
                      "completion status (a peer wrote a corrupt result)", slot,
                      (unsigned long long)(q->sq_done - 1), r.status);
        return false;
    }
    return true;
}

void soft_reap_recv(struct soft_qp *q)
{
    uint64_t stamp;
    while (soft_recv_ready(q, &stamp) && soft_recv_take(q))
        ;
}

void soft_reap_send(struct soft_qp *q)
{
    uint64_t stamp;
    while (soft_send_ready(q, &stamp) && soft_send_take(q))
        ;
}

/* ---- receives --------------------------------------------------------------- */

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
        uint32_t slot = (uint32_t)(q->rq_prod % q->rq_cap);
        q->rq_wr[slot] = (struct soft_wr){.wr_id = wr->wr_id, .total = total, .frames = frames};
        struct soft_rqe *e = &s->rq[slot];
        e->num_sge = (uint32_t)wr->num_sge;
        e->total = total;
        memcpy(e->sge, wr->sg_list, (size_t)wr->num_sge * sizeof e->sge[0]);
        q->rq_frames += frames;
        atomic_store_explicit(&e->seq, q->rq_prod + 1, memory_order_release);
        q->rq_prod++;
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
        uint32_t slot = (uint32_t)(q->sq_tail % q->sq_cap);
        q->sq_wr[slot] = (struct soft_wr){.wr_id = wr->wr_id, .total = total, .frames = frames,
                                          .opcode = (uint8_t)wc_opcode(wr->opcode),
                                          .signaled = signaled};
        struct soft_swr *w = &q->self.sq[slot];
        memset(w, 0, offsetof(struct soft_swr, inl));
        w->opcode = wr->opcode;
        w->send_flags = wr->send_flags;
        w->imm_data = wr->imm_data;
        w->num_sge = (uint32_t)wr->num_sge;
        memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof w->sge[0]);
        w->total = total;
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
        q->sq_tail++;
        atomic_store_explicit(&s->sq_tail, q->sq_tail, memory_order_release);
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
        soft_sq_run_own(sd, q);
        /* a connected peer stopped for want of a receive here: run its sends
         * from this side (it asked; we never poll its queue for nothing,
         * which would steal its cache lines while it posts) */
        if (q->qp.qp_type == IBV_QPT_UD || !q->dest_qpn ||
            !atomic_load_explicit(&s->help_wanted, memory_order_relaxed) ||
            !atomic_exchange(&s->help_wanted, 0))
            continue;
        if (!q->peer.peer) {
            char why[TBRT_WHY_MAX];
            int rc = soft_view_lookup(sd, q->dest_qpn, &q->peer, why, sizeof why);
            if (rc) {
                q->peer.peer = NULL;
                if (rc == -EBADMSG)
                    soft_qp_break(q, false, "%s", why);
                continue;
            }
        }
        struct soft_qp_shared *pqp = q->peer.sh;
        if (pqp->dest_qpn == q->qp.qp_num && pqp->qpn == q->dest_qpn)
            soft_sq_run_peer(sd, q);
    }
}
