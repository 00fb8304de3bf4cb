/* soft_post.c - the soft device's data path: posting receives and sends, and
 * the "hardware" that delivers pending sends to their peers.
 *
 * A send is delivered by the sending process: it takes the peer's oldest
 * posted receive (CAS on the peer's rq_cons), copies the message straight
 * into the receive's buffers (the one copy of a transfer), then writes the
 * receive completion into the peer's CQ and its own send completion. When
 * the peer is not ready the send waits in the private send queue, and what
 * happens next is the personality's rule:
 *
 *   apple-uc   credit flow control: the send waits for a posted receive and
 *              asks the peer to poke its completion socket when one comes.
 *              A peer that vanished is never reported (the frame just goes).
 *   linux-rc   RC: receiver not ready -> RNR NAK; retried after the peer's
 *              min_rnr_timer, rnr_retry times (7 = forever), then
 *              IBV_WC_RNR_RETRY_EXC_ERR. No ACK at all (peer gone, not in
 *              RTR/RTS) -> IBV_WC_RETRY_EXC_ERR after timeout x (retry_cnt+1).
 *              UC/UD: dropped when there is nowhere to put it.
 *
 * Pending sends move only when this process calls into the device (post_send,
 * poll_cq), which the engine does while it waits. */
#include <errno.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

enum { DONE, WAIT, FAILED };

uint32_t soft_frames(uint64_t bytes)
{
    uint64_t f = (bytes + SOFT_FRAME - 1) / SOFT_FRAME;
    return f ? (uint32_t)f : 1;
}

/* IB spec table 45: RNR NAK timer field -> microseconds. */
static const uint32_t rnr_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520,
};

/* How often a sender re-checks that its peer's process is alive. */
#define PEER_CHECK_NS 1000000ull

static struct soft_cq_shared *cq_sh(tbrt_cq *cq) { return ((struct soft_cq *)cq)->sh; }

/* ---- receives ------------------------------------------------------------ */

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
    int posted = 0;
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
        rq_reclaim(q);
        uint64_t prod = atomic_load_explicit(&s->rq_prod, memory_order_relaxed);
        if (prod - atomic_load(&s->rq_cons) >= s->rq_cap ||
            q->rq_frames + r.frames > qp->cap.max_recv_wr)
            return dev_fail(qp->dev, ENOMEM, "post_recv: receive queue full (%u of %u%s)",
                            q->rq_frames, qp->cap.max_recv_wr,
                            p->depth_in_frames ? " frames; TN3205 counts depth in 4 KiB frames"
                                               : " work requests");
        s->rq[prod % s->rq_cap] = r;
        q->rq_frames += r.frames;
        atomic_store_explicit(&s->rq_prod, prod + 1, memory_order_release);
        posted++;
    }
    *bad = NULL;
    /* credit: a sender waits on us; pairs with the fence in wait_credit */
    atomic_thread_fence(memory_order_seq_cst);
    if (posted && atomic_load_explicit(&s->credit_wait, memory_order_relaxed) &&
        atomic_exchange(&s->credit_wait, 0))
        soft_wake(sd, s->credit_sock);
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
        if (q->sq_count >= q->sq_cap || q->sq_frames + frames > qp->cap.max_send_wr)
            return dev_fail(qp->dev, ENOMEM, "post_send: send queue full (%u of %u%s)",
                            p->depth_in_frames ? q->sq_frames : q->sq_count, qp->cap.max_send_wr,
                            p->depth_in_frames ? " frames; TN3205 counts depth in 4 KiB frames"
                                               : " work requests");
        bool signaled = (wr->send_flags & IBV_SEND_SIGNALED) || q->sq_sig_all;
        if (qp->state == IBV_QPS_ERR) {
            struct ibv_wc wc = {.wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                                .opcode = wc_opcode(wr->opcode), .vendor_err = SOFT_VERR_FLUSH,
                                .qp_num = qp->qp_num};
            soft_cq_push(sd, cq_sh(qp->send_cq), &wc);
            continue;
        }
        struct soft_swr *w = &q->sq[(q->sq_head + q->sq_count) % q->sq_cap];
        w->wr = *wr;
        w->wr.next = NULL;
        memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof w->sge[0]);
        w->wr.sg_list = w->sge;
        w->total = total;
        w->frames = frames;
        w->signaled = signaled;
        w->rnr_count = 0;
        w->first_try_ns = w->next_try_ns = 0;
        if (wr->send_flags & IBV_SEND_INLINE) {
            /* the data goes now: the caller may reuse its buffer on return */
            uint64_t off = 0;
            for (int i = 0; i < wr->num_sge; i++) {
                memcpy(w->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
                off += wr->sg_list[i].length;
            }
        }
        q->sq_count++;
        q->sq_frames += frames;
    }
    *bad = NULL;
    soft_progress(sd);
    return 0;
}

/* ---- delivery ------------------------------------------------------------- */

static void complete_send(struct soft_qp *q, struct soft_swr *w, enum ibv_wc_status st,
                          uint32_t verr)
{
    if (w->signaled || st != IBV_WC_SUCCESS) {
        struct ibv_wc wc = {.wr_id = w->wr.wr_id, .status = st, .opcode = wc_opcode(w->wr.opcode),
                            .vendor_err = verr, .byte_len = (uint32_t)w->total,
                            .qp_num = q->qp.qp_num};
        soft_cq_push(q->sd, cq_sh(q->qp.send_cq), &wc);
    }
}

/* Tell the peer's owner its QP went to ERR (an RC responder error). */
static void peer_to_err(struct soft_peer *peer, struct soft_qp_shared *pqp)
{
    atomic_store(&pqp->remote_err, 1);
    struct soft_ctx_hdr *h = soft_peer_at(peer, 0);
    atomic_fetch_add_explicit(&h->attention, 1, memory_order_release);
}

static void push_recv_err(struct soft_dev *sd, struct soft_peer *peer, struct soft_qp_shared *pqp,
                          const struct soft_rqe *r, enum ibv_wc_status st, uint32_t verr,
                          uint32_t src_qp)
{
    struct ibv_wc wc = {.wr_id = r->wr_id, .status = st, .opcode = IBV_WC_RECV,
                        .vendor_err = verr, .qp_num = pqp->qpn, .src_qp = src_qp};
    soft_cq_push(sd, soft_peer_at(peer, pqp->recv_cq_off), &wc);
}

/* Gather the local data of w: a pointer per SGE (inline data is one piece). */
static int gather(struct soft_qp *q, struct soft_swr *w, void **ptr, uint32_t need)
{
    if (w->wr.send_flags & IBV_SEND_INLINE) {
        ptr[0] = w->inl;
        return 0;
    }
    for (int i = 0; i < w->wr.num_sge; i++) {
        const struct ibv_sge *g = &w->sge[i];
        if (soft_local_mem(q->sd, g->lkey, g->addr, g->length, need, &ptr[i]))
            return -1;
    }
    return 0;
}

/* Copy the message of w into the receive r of the peer. */
static int scatter(struct soft_swr *w, void **src, struct soft_peer *peer, const struct soft_rqe *r,
                   uint32_t *verr)
{
    int si = 0;
    uint64_t soff = 0, left = w->total;
    bool inl = w->wr.send_flags & IBV_SEND_INLINE;
    for (uint32_t k = 0; k < r->num_sge && left; k++) {
        const struct ibv_sge *d = &r->sge[k];
        uint64_t take = TBRT_MIN((uint64_t)d->length, left);
        void *dst;
        int rc = soft_peer_mem(peer, d->lkey, d->addr, take, IBV_ACCESS_LOCAL_WRITE, &dst);
        if (rc) {
            *verr = rc == -EPERM ? SOFT_VERR_NOT_SHARED : SOFT_VERR_LKEY;
            return -1;
        }
        uint64_t doff = 0;
        while (doff < take) {
            uint64_t avail = inl ? w->total - soff : w->sge[si].length - soff;
            uint64_t n = TBRT_MIN(avail, take - doff);
            memcpy((char *)dst + doff, (char *)src[inl ? 0 : si] + soff, n);
            doff += n;
            soff += n;
            if (!inl && soff == w->sge[si].length) {
                si++;
                soff = 0;
            }
        }
        left -= take;
    }
    return 0;
}

/* The peer of a connected QP, if reachable and ready to receive. */
static struct soft_qp_shared *connected_peer(struct soft_qp *q, uint64_t now)
{
    if (!q->peer_qp) {
        if (soft_peer_lookup(q->sd, q->dest_qpn, &q->peer, &q->peer_qp))
            return NULL;
        q->peer_checked_ns = now;
    }
    struct soft_qp_shared *pqp = q->peer_qp;
    uint32_t st = atomic_load_explicit(&pqp->state, memory_order_acquire);
    if (pqp->qpn != q->dest_qpn || (st != IBV_QPS_RTR && st != IBV_QPS_RTS) ||
        atomic_load_explicit(&pqp->remote_err, memory_order_relaxed)) {
        q->peer_qp = NULL;      /* look it up again next time */
        return NULL;
    }
    if (now - q->peer_checked_ns > PEER_CHECK_NS) {
        q->peer_checked_ns = now;
        if (!soft_peer_alive(q->peer)) {
            q->peer_qp = NULL;
            return NULL;
        }
    }
    return pqp;
}

static int fail_send(struct soft_qp *q, struct soft_swr *w, enum ibv_wc_status st, uint32_t verr)
{
    complete_send(q, w, st, verr);
    return FAILED;
}

/* No peer answered. UC drops; RC waits for an ACK until the retry budget is
 * spent. */
static int no_peer(struct soft_qp *q, struct soft_swr *w, uint64_t now)
{
    if (q->qp.qp_type != IBV_QPT_RC)
        return DONE;
    if (!w->first_try_ns)
        w->first_try_ns = now;
    if (q->timeout == 0)
        return WAIT;            /* timeout 0: wait forever */
    /* IB spec: local ACK timeout = 4.096 us x 2^timeout, per try */
    uint64_t limit = 4096ull * (1ull << q->timeout) * (q->retry_cnt + 1u);
    if (now - w->first_try_ns >= limit)
        return fail_send(q, w, IBV_WC_RETRY_EXC_ERR, SOFT_VERR_PEER_GONE);
    return WAIT;
}

/* The peer has no receive posted. */
static int no_receive(struct soft_qp *q, struct soft_swr *w, struct soft_qp_shared *pqp,
                      uint64_t now)
{
    const struct soft_personality *p = q->sd->p;
    if (p->credit_flow || q->qp.qp_type == IBV_QPT_RC) {
        /* ask the peer to poke our send CQ's socket when it posts */
        const char *sock = cq_sh(q->qp.send_cq)->sock;
        if (strncmp(pqp->credit_sock, sock, SOFT_SOCK_NAME) != 0)
            memcpy(pqp->credit_sock, sock, SOFT_SOCK_NAME);
        atomic_store(&pqp->credit_wait, 1);
        atomic_thread_fence(memory_order_seq_cst);
    }
    if (p->credit_flow)
        return WAIT;
    if (q->qp.qp_type != IBV_QPT_RC)
        return DONE;            /* UC without a receive: the message is dropped */
    if (w->next_try_ns && now < w->next_try_ns)
        return WAIT;
    if (w->next_try_ns) {
        w->rnr_count++;
        if (q->rnr_retry != 7 && w->rnr_count > q->rnr_retry)
            return fail_send(q, w, IBV_WC_RNR_RETRY_EXC_ERR, SOFT_VERR_RNR);
    }
    w->next_try_ns = now + rnr_us[pqp->min_rnr_timer & 31] * 1000ull;
    return WAIT;
}

static int deliver_connected(struct soft_qp *q, struct soft_swr *w, uint64_t now)
{
    struct soft_dev *sd = q->sd;
    int op = w->wr.opcode;
    void *src[SOFT_MAX_SGE];
    uint32_t need = op == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
    if (gather(q, w, src, need))
        return fail_send(q, w, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
    struct soft_qp_shared *pqp = connected_peer(q, now);
    if (!pqp)
        return no_peer(q, w, now);
    struct soft_peer *peer = q->peer;
    bool rc = q->qp.qp_type == IBV_QPT_RC;

    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ) {
        uint32_t acc = op == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        void *remote = NULL;
        if (w->total && soft_peer_mem(peer, w->wr.wr.rdma.rkey, w->wr.wr.rdma.remote_addr,
                                      w->total, acc, &remote)) {
            if (!rc)
                return DONE;    /* UC: a bad rkey drops the message */
            peer_to_err(peer, pqp);
            return fail_send(q, w, IBV_WC_REM_ACCESS_ERR, SOFT_VERR_RKEY);
        }
        /* copy piece by piece between the local SGEs and the remote range */
        uint64_t off = 0;
        bool inl = w->wr.send_flags & IBV_SEND_INLINE;
        for (int i = 0; i < (inl ? 1 : w->wr.num_sge); i++) {
            uint64_t n = inl ? w->total : w->sge[i].length;
            if (op == IBV_WR_RDMA_READ)
                memcpy(src[i], (char *)remote + off, n);
            else
                memcpy((char *)remote + off, src[i], n);
            off += n;
        }
        if (op != IBV_WR_RDMA_WRITE_WITH_IMM)
            return DONE;
    }

    /* SEND, SEND_WITH_IMM, WRITE_WITH_IMM: consume the peer's oldest receive */
    struct soft_rqe r;
    for (;;) {
        uint64_t c = atomic_load_explicit(&pqp->rq_cons, memory_order_acquire);
        if (c == atomic_load_explicit(&pqp->rq_prod, memory_order_acquire))
            return no_receive(q, w, pqp, now);
        r = pqp->rq[c % pqp->rq_cap];
        if (atomic_compare_exchange_weak_explicit(&pqp->rq_cons, &c, c + 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            break;
    }
    if (op != IBV_WR_RDMA_WRITE_WITH_IMM) {
        if (sd->p->frames_must_match && r.frames != w->frames) {
            /* TN3205: a SEND and its RECV must cover the same frames; the
             * receive fails, the sender (UC) never knows */
            push_recv_err(sd, peer, pqp, &r, IBV_WC_LOC_LEN_ERR, SOFT_VERR_FRAMES, q->qp.qp_num);
            return DONE;
        }
        if (r.total < w->total) {
            push_recv_err(sd, peer, pqp, &r, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT,
                          q->qp.qp_num);
            if (!rc)
                return DONE;
            peer_to_err(peer, pqp);
            return fail_send(q, w, IBV_WC_REM_INV_REQ_ERR, SOFT_VERR_REMOTE);
        }
        uint32_t verr = 0;
        if (scatter(w, src, peer, &r, &verr)) {
            push_recv_err(sd, peer, pqp, &r, IBV_WC_LOC_PROT_ERR, verr, q->qp.qp_num);
            if (!rc)
                return DONE;
            peer_to_err(peer, pqp);
            return fail_send(q, w, IBV_WC_REM_OP_ERR, SOFT_VERR_REMOTE);
        }
    }
    bool imm = op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
    struct ibv_wc wc = {
        .wr_id = r.wr_id, .status = IBV_WC_SUCCESS,
        .opcode = op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
        .byte_len = (uint32_t)w->total, .qp_num = pqp->qpn, .src_qp = q->qp.qp_num,
        .wc_flags = imm ? IBV_WC_WITH_IMM : 0,
    };
    if (imm)
        wc.imm_data = w->wr.imm_data;
    soft_cq_push(sd, soft_peer_at(peer, pqp->recv_cq_off), &wc);
    return DONE;
}

/* UD: unreliable datagrams, one MTU at most, a 40-byte GRH in front. */
static int deliver_ud(struct soft_qp *q, struct soft_swr *w)
{
    struct soft_dev *sd = q->sd;
    void *src[SOFT_MAX_SGE];
    if (gather(q, w, src, 0))
        return fail_send(q, w, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
    if (w->total > (128u << q->mtu))
        return fail_send(q, w, IBV_WC_LOC_LEN_ERR, SOFT_VERR_MSG_SIZE);
    struct soft_ah *ah = (struct soft_ah *)w->wr.wr.ud.ah;
    if (!soft_gid_is_local(sd, ah->ah.attr.grh.dgid.raw))
        return DONE;            /* not reachable over this wire: lost */
    struct soft_peer *peer;
    struct soft_qp_shared *pqp;
    if (soft_peer_lookup(sd, w->wr.wr.ud.remote_qpn, &peer, &pqp))
        return DONE;
    uint32_t st = atomic_load(&pqp->state);
    if (pqp->qp_type != IBV_QPT_UD || (st != IBV_QPS_RTR && st != IBV_QPS_RTS))
        return DONE;
    uint32_t qkey = (w->wr.wr.ud.remote_qkey & 0x80000000u) ? q->sh->qkey : w->wr.wr.ud.remote_qkey;
    if (qkey != pqp->qkey)
        return DONE;            /* qkey violation: dropped, as on the wire */
    struct soft_rqe r;
    for (;;) {
        uint64_t c = atomic_load(&pqp->rq_cons);
        if (c == atomic_load(&pqp->rq_prod))
            return DONE;        /* no receive: dropped */
        r = pqp->rq[c % pqp->rq_cap];
        if (atomic_compare_exchange_weak(&pqp->rq_cons, &c, c + 1))
            break;
    }
    enum { GRH = 40 };
    if (r.total < GRH + w->total) {
        push_recv_err(sd, peer, pqp, &r, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT, q->qp.qp_num);
        return DONE;
    }
    /* the GRH: version 6, payload length, next header, hop limit, GIDs */
    uint8_t grh[GRH] = {0x60};
    uint16_t plen = (uint16_t)w->total;
    grh[4] = (uint8_t)(plen >> 8);
    grh[5] = (uint8_t)plen;
    grh[6] = 0x1b;
    grh[7] = 64;
    struct ibv_gid_entry sg;
    if (soft_query_gid(&sd->dev, q->port ? q->port : 1, ah->ah.attr.grh.sgid_index, &sg) >= 0)
        memcpy(grh + 8, sg.gid.raw, 16);
    memcpy(grh + 24, ah->ah.attr.grh.dgid.raw, 16);
    struct soft_swr hdr = {.total = GRH, .wr = {.num_sge = 1, .send_flags = IBV_SEND_INLINE}};
    memcpy(hdr.inl, grh, GRH);
    void *hp[1] = {hdr.inl};
    uint32_t verr = 0;
    /* the GRH into the first 40 bytes, then the payload after it */
    struct soft_rqe rest = r;
    if (scatter(&hdr, hp, peer, &r, &verr) == 0) {
        uint64_t skip = GRH;
        uint32_t k = 0;
        while (k < rest.num_sge && skip >= rest.sge[k].length)
            skip -= rest.sge[k++].length;
        struct soft_rqe tail = {.num_sge = rest.num_sge - k};
        for (uint32_t i = 0; i < tail.num_sge; i++)
            tail.sge[i] = rest.sge[k + i];
        if (tail.num_sge) {
            tail.sge[0].addr += skip;
            tail.sge[0].length -= (uint32_t)skip;
        }
        if (w->total == 0 || scatter(w, src, peer, &tail, &verr) == 0) {
            struct ibv_wc wc = {.wr_id = r.wr_id, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
                                .byte_len = (uint32_t)(GRH + w->total), .qp_num = pqp->qpn,
                                .src_qp = q->qp.qp_num, .wc_flags = IBV_WC_GRH};
            if (w->wr.opcode == IBV_WR_SEND_WITH_IMM) {
                wc.wc_flags |= IBV_WC_WITH_IMM;
                wc.imm_data = w->wr.imm_data;
            }
            soft_cq_push(sd, soft_peer_at(peer, pqp->recv_cq_off), &wc);
            return DONE;
        }
    }
    push_recv_err(sd, peer, pqp, &r, IBV_WC_LOC_PROT_ERR, verr, q->qp.qp_num);
    return DONE;
}

static void progress_qp(struct soft_qp *q, uint64_t now)
{
    while (q->sq_count && q->qp.state == IBV_QPS_RTS) {
        struct soft_swr *w = &q->sq[q->sq_head];
        int r = q->qp.qp_type == IBV_QPT_UD ? deliver_ud(q, w) : deliver_connected(q, w, now);
        if (r == WAIT)
            return;
        q->sq_frames -= w->frames;
        q->sq_head = (q->sq_head + 1) % q->sq_cap;
        q->sq_count--;
        if (r == FAILED) {
            soft_qp_to_err(q);
            return;
        }
        complete_send(q, w, IBV_WC_SUCCESS, 0);
    }
}

void soft_progress(struct soft_dev *sd)
{
    uint64_t now = 0;
    for (struct soft_qp *q = sd->qps; q; q = q->next)
        if (q->sq_count) {
            if (!now)
                now = now_ns();
            progress_qp(q, now);
        }
}
