/* soft_exec.c - executing a soft send queue: the "DMA engine".
 *
 * A send queue is run by whichever process gets its lock: its owner (the
 * sender) or, for a connected queue pair, the process of the receiving QP.
 * Running a send takes the target's oldest posted receive (CAS on its
 * rq_cons), copies the message straight into the receive's buffers (the one
 * copy of a transfer), then writes the receive completion into the
 * receiver's CQ and the send completion into the sender's CQ.
 *
 * When the target cannot take the message, the personality decides:
 *   apple-uc   credit flow control: the send waits for a posted receive.
 *              A peer that vanished is never reported (the frame just goes).
 *   linux-rc   RC: no receive -> RNR NAK, retried after the responder's
 *              min_rnr_timer, rnr_retry times (7 = forever), then
 *              IBV_WC_RNR_RETRY_EXC_ERR. No answer at all (peer gone, not in
 *              RTR/RTS) -> IBV_WC_RETRY_EXC_ERR after timeout x (retry_cnt+1).
 *              UC/UD: dropped when there is nowhere to put it.
 * Only the owner handles what needs the sender's view (UD, a vanished peer,
 * memory the receiver cannot map); the receiver leaves those alone. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/util.h"

enum { DONE, WAIT, FAILED, SKIP };

/* IB spec table 45: RNR NAK timer field -> microseconds. */
static const uint32_t rnr_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520,
};

/* How often a sender re-checks that its peer's process is alive. */
#define PEER_CHECK_NS 1000000ull

struct exec {
    struct soft_dev *sd;            /* the executing process's device */
    struct soft_peer *owner;        /* whose send queue (sd->self when ours) */
    struct soft_qp_shared *sqp;
    struct soft_qp *local;          /* the owner's QP when the owner runs it */
    struct soft_peer *target;       /* connected: where the sends go */
    struct soft_qp_shared *tqp;
    uint64_t now;                   /* 0 until needed: the clock is not free */
};

static uint64_t exec_now(struct exec *e)
{
    if (!e->now)
        e->now = now_ns();
    return e->now;
}

static enum ibv_wc_opcode wc_opcode(uint32_t op)
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

static void complete_send(struct exec *e, struct soft_swr *w, enum ibv_wc_status st, uint32_t verr)
{
    if (w->signaled || st != IBV_WC_SUCCESS) {
        struct ibv_wc wc = {.wr_id = w->wr_id, .status = st, .opcode = wc_opcode(w->opcode),
                            .vendor_err = verr, .byte_len = (uint32_t)w->total,
                            .qp_num = e->sqp->qpn};
        soft_cq_push(e->sd, soft_peer_at(e->owner, e->sqp->send_cq_off), &wc);
    }
}

static int fail_send(struct exec *e, struct soft_swr *w, enum ibv_wc_status st, uint32_t verr)
{
    complete_send(e, w, st, verr);
    return FAILED;
}

/* Tell a QP's owner it went to ERR; the owner flushes it on its next call. */
static void mark_err(struct soft_peer *owner, struct soft_qp_shared *q)
{
    atomic_store(&q->remote_err, 1);
    struct soft_ctx_hdr *h = soft_peer_at(owner, 0);
    atomic_fetch_add_explicit(&h->attention, 1, memory_order_release);
}

static void push_recv_err(struct exec *e, const struct soft_rqe *r, enum ibv_wc_status st,
                          uint32_t verr)
{
    struct ibv_wc wc = {.wr_id = r->wr_id, .status = st, .opcode = IBV_WC_RECV,
                        .vendor_err = verr, .qp_num = e->tqp->qpn, .src_qp = e->sqp->qpn};
    soft_cq_push(e->sd, soft_peer_at(e->target, e->tqp->recv_cq_off), &wc);
}

/* Pointers to the sender's data, one per SGE (inline data is one piece). */
static int gather(struct exec *e, struct soft_swr *w, void **ptr, uint32_t need)
{
    if (w->send_flags & IBV_SEND_INLINE) {
        ptr[0] = w->inl;
        return 0;
    }
    for (uint32_t i = 0; i < w->num_sge; i++) {
        const struct ibv_sge *g = &w->sge[i];
        int rc = soft_peer_mem(e->owner, g->lkey, g->addr, g->length, need, &ptr[i]);
        if (rc)
            return rc;
    }
    return 0;
}

/* Copy the message of w into the receive r of the target. */
static int scatter(struct soft_swr *w, void **src, struct soft_peer *target,
                   const struct soft_rqe *r, uint64_t skip, uint32_t *verr)
{
    uint32_t si = 0;
    uint64_t soff = 0, left = w->total;
    bool inl = w->send_flags & IBV_SEND_INLINE;
    for (uint32_t k = 0; k < r->num_sge && left; k++) {
        const struct ibv_sge *d = &r->sge[k];
        uint64_t daddr = d->addr, dlen = d->length;
        if (skip >= dlen) {
            skip -= dlen;
            continue;
        }
        daddr += skip;
        dlen -= skip;
        skip = 0;
        uint64_t take = TBRT_MIN(dlen, left);
        void *dst;
        int rc = soft_peer_mem(target, d->lkey, daddr, take, IBV_ACCESS_LOCAL_WRITE, &dst);
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

/* Owner side: the connected peer, if reachable and ready to receive. */
static struct soft_qp_shared *connected_peer(struct soft_qp *q, struct exec *e)
{
    if (!q->peer_qp) {
        uint64_t now = exec_now(e);
        if (q->peer_checked_ns && now - q->peer_checked_ns < PEER_CHECK_NS)
            return NULL;        /* looked a moment ago */
        q->peer_checked_ns = now;
        if (soft_peer_lookup(q->sd, q->dest_qpn, &q->peer, &q->peer_qp))
            return NULL;
    }
    struct soft_qp_shared *pqp = q->peer_qp;
    uint32_t st = atomic_load_explicit(&pqp->state, memory_order_acquire);
    if (pqp->qpn != q->dest_qpn || (st != IBV_QPS_RTR && st != IBV_QPS_RTS) ||
        atomic_load_explicit(&pqp->remote_err, memory_order_relaxed)) {
        q->peer_qp = NULL;      /* look it up again later */
        return NULL;
    }
    /* is its process still there? a look at the clock every 64 sends, at
     * the process every millisecond */
    if ((++q->alive_tick & 63) == 0 && exec_now(e) - q->peer_checked_ns > PEER_CHECK_NS) {
        q->peer_checked_ns = exec_now(e);
        if (!soft_peer_alive(q->peer)) {
            q->peer_qp = NULL;
            return NULL;
        }
    }
    return pqp;
}

/* Both ends' ports up? A pulled cable loses frames like a dead peer. */
static bool path_up(struct exec *e)
{
    return soft_port_state_of(e->sd, e->sqp->dev_index, e->sqp->port ? e->sqp->port : 1) ==
               IBV_PORT_ACTIVE &&
           soft_port_state_of(e->sd, e->tqp->dev_index, e->tqp->port ? e->tqp->port : 1) ==
               IBV_PORT_ACTIVE;
}

/* Nobody answers. UC drops; RC waits for an ACK until the retry budget is
 * spent (IB spec: local ACK timeout = 4.096 us x 2^timeout per try). */
static int no_peer(struct exec *e, struct soft_swr *w)
{
    if (e->sqp->qp_type != IBV_QPT_RC)
        return DONE;
    if (!w->first_try_ns)
        w->first_try_ns = exec_now(e);
    if (e->sqp->timeout == 0)
        return WAIT;            /* timeout 0: wait forever */
    uint64_t limit = 4096ull * (1ull << e->sqp->timeout) * (e->sqp->retry_cnt + 1u);
    if (exec_now(e) - w->first_try_ns >= limit)
        return fail_send(e, w, IBV_WC_RETRY_EXC_ERR,
                         e->tqp && !path_up(e) ? SOFT_VERR_PORT_DOWN : SOFT_VERR_PEER_GONE);
    return WAIT;
}

/* The target has no receive posted. */
static int no_receive(struct exec *e, struct soft_swr *w)
{
    const struct soft_personality *p = e->sd->p;
    if (p->credit_flow)
        return WAIT;            /* the target's next post_recv runs it */
    if (e->sqp->qp_type != IBV_QPT_RC)
        return DONE;            /* UC without a receive: the message is dropped */
    if (w->next_try_ns) {
        w->rnr_count++;
        if (e->sqp->rnr_retry != 7 && w->rnr_count > e->sqp->rnr_retry)
            return fail_send(e, w, IBV_WC_RNR_RETRY_EXC_ERR, SOFT_VERR_RNR);
    }
    w->next_try_ns = exec_now(e) + rnr_us[e->tqp->min_rnr_timer & 31] * 1000ull;
    return WAIT;
}

static int deliver_connected(struct exec *e, struct soft_swr *w)
{
    uint32_t op = w->opcode;
    void *src[SOFT_MAX_SGE];
    uint32_t need = op == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
    if (gather(e, w, src, need)) {
        if (!e->local)
            return SKIP;        /* the owner reports it */
        return fail_send(e, w, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
    }
    if (e->local) {
        e->tqp = connected_peer(e->local, e);
        if (!e->tqp)
            return no_peer(e, w);
        e->target = e->local->peer;
    }
    if (!path_up(e))
        return e->local ? no_peer(e, w) : SKIP;
    if (w->next_try_ns && exec_now(e) < w->next_try_ns) {
        /* an RNR NAK's timer is running: the target's next turn may retry */
        atomic_store(&e->tqp->help_wanted, 1);
        return WAIT;
    }
    bool rc = e->sqp->qp_type == IBV_QPT_RC;

    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ) {
        uint32_t acc = op == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        void *remote = NULL;
        if (w->total && soft_peer_mem(e->target, w->rkey, w->remote_addr, w->total, acc, &remote)) {
            if (!rc)
                return DONE;    /* UC: a bad rkey drops the message */
            mark_err(e->target, e->tqp);
            return fail_send(e, w, IBV_WC_REM_ACCESS_ERR, SOFT_VERR_RKEY);
        }
        uint64_t off = 0;
        bool inl = w->send_flags & IBV_SEND_INLINE;
        for (uint32_t i = 0; i < (inl ? 1 : w->num_sge); i++) {
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

    /* SEND, SEND_WITH_IMM, WRITE_WITH_IMM: consume the target's oldest receive */
    struct soft_qp_shared *t = e->tqp;
    struct soft_rqe r;
    bool asked = false;
    uint64_t c;
    for (;;) {
        c = atomic_load_explicit(&t->rq_cons, memory_order_acquire);
        if (!soft_rq_posted(t->rq, t->rq_cap, c)) {
            if (asked)
                return no_receive(e, w);
            /* ask the target to run us when it posts (also when the target
             * itself is running us: its next post must try again); then
             * look once more, as its post may have come just before it
             * could see the ask (pairs with the fence in soft_post_recv) */
            atomic_store(&t->help_wanted, 1);
            atomic_thread_fence(memory_order_seq_cst);
            asked = true;
            continue;
        }
        soft_rqe_copy(&r, &t->rq[c % t->rq_cap]);
        if (atomic_compare_exchange_weak_explicit(&t->rq_cons, &c, c + 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            break;
    }
    /* the next message will want the next receive: start fetching its line
     * (the owner wrote it) now, off the next message's path */
    __builtin_prefetch(&t->rq[(c + 1) % t->rq_cap], 0, 3);
    if (op != IBV_WR_RDMA_WRITE_WITH_IMM) {
        if (e->sd->p->frames_must_match && r.frames != w->frames) {
            /* TN3205: a SEND and its RECV must cover the same frames; the
             * receive fails, the sender (UC) never knows */
            push_recv_err(e, &r, IBV_WC_LOC_LEN_ERR, SOFT_VERR_FRAMES);
            return DONE;
        }
        if (r.total < w->total) {
            push_recv_err(e, &r, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT);
            if (!rc)
                return DONE;
            mark_err(e->target, t);
            return fail_send(e, w, IBV_WC_REM_INV_REQ_ERR, SOFT_VERR_REMOTE);
        }
        uint32_t verr = 0;
        if (scatter(w, src, e->target, &r, 0, &verr)) {
            push_recv_err(e, &r, IBV_WC_LOC_PROT_ERR, verr);
            if (!rc)
                return DONE;
            mark_err(e->target, t);
            return fail_send(e, w, IBV_WC_REM_OP_ERR, SOFT_VERR_REMOTE);
        }
    }
    bool imm = op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
    struct ibv_wc wc = {
        .wr_id = r.wr_id, .status = IBV_WC_SUCCESS,
        .opcode = op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
        .byte_len = (uint32_t)w->total, .qp_num = t->qpn, .src_qp = e->sqp->qpn,
        .wc_flags = imm ? IBV_WC_WITH_IMM : 0,
    };
    if (imm)
        wc.imm_data = w->imm_data;
    soft_cq_push(e->sd, soft_peer_at(e->target, t->recv_cq_off), &wc);
    return DONE;
}

/* UD: unreliable datagrams, one MTU at most, a 40-byte GRH in front. Run by
 * the owner only (the target is a different QP per send). */
static int deliver_ud(struct exec *e, struct soft_swr *w)
{
    struct soft_dev *sd = e->sd;
    if (!e->local)
        return SKIP;
    void *src[SOFT_MAX_SGE];
    if (gather(e, w, src, 0))
        return fail_send(e, w, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
    if (w->total > (128u << e->sqp->mtu))
        return fail_send(e, w, IBV_WC_LOC_LEN_ERR, SOFT_VERR_MSG_SIZE);
    if (!soft_gid_is_local(sd, w->dgid))
        return DONE;            /* not reachable over this wire: lost */
    struct soft_peer *peer;
    struct soft_qp_shared *pqp;
    if (soft_peer_lookup(sd, w->remote_qpn, &peer, &pqp))
        return DONE;
    uint32_t st = atomic_load(&pqp->state);
    if (pqp->qp_type != IBV_QPT_UD || (st != IBV_QPS_RTR && st != IBV_QPS_RTS))
        return DONE;
    uint32_t qkey = (w->remote_qkey & 0x80000000u) ? e->sqp->qkey : w->remote_qkey;
    if (qkey != pqp->qkey)
        return DONE;            /* qkey violation: dropped, as on the wire */
    e->target = peer;
    e->tqp = pqp;
    struct soft_rqe r;
    for (;;) {
        uint64_t c = atomic_load(&pqp->rq_cons);
        if (!soft_rq_posted(pqp->rq, pqp->rq_cap, c))
            return DONE;        /* no receive: dropped */
        soft_rqe_copy(&r, &pqp->rq[c % pqp->rq_cap]);
        if (atomic_compare_exchange_weak(&pqp->rq_cons, &c, c + 1))
            break;
    }
    enum { GRH = 40 };
    if (r.total < GRH + w->total) {
        push_recv_err(e, &r, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT);
        return DONE;
    }
    /* the GRH: version 6, payload length, next header, hop limit, GIDs */
    struct soft_swr hdr = {.total = GRH, .send_flags = IBV_SEND_INLINE, .num_sge = 1};
    hdr.inl[0] = 0x60;
    hdr.inl[4] = (uint8_t)(w->total >> 8);
    hdr.inl[5] = (uint8_t)w->total;
    hdr.inl[6] = 0x1b;
    hdr.inl[7] = 64;
    struct ibv_gid_entry sg;
    uint8_t port = e->local->port ? e->local->port : 1;
    if (soft_query_gid(&sd->dev, port, w->sgid_index, &sg) >= 0)
        memcpy(hdr.inl + 8, sg.gid.raw, 16);
    memcpy(hdr.inl + 24, w->dgid, 16);
    void *hp[1] = {hdr.inl};
    uint32_t verr = 0;
    if (scatter(&hdr, hp, peer, &r, 0, &verr) == 0 &&
        (w->total == 0 || scatter(w, src, peer, &r, GRH, &verr) == 0)) {
        struct ibv_wc wc = {.wr_id = r.wr_id, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
                            .byte_len = (uint32_t)(GRH + w->total), .qp_num = pqp->qpn,
                            .src_qp = e->sqp->qpn, .wc_flags = IBV_WC_GRH};
        if (w->opcode == IBV_WR_SEND_WITH_IMM) {
            wc.wc_flags |= IBV_WC_WITH_IMM;
            wc.imm_data = w->imm_data;
        }
        soft_cq_push(sd, soft_peer_at(peer, pqp->recv_cq_off), &wc);
        return DONE;
    }
    push_recv_err(e, &r, IBV_WC_LOC_PROT_ERR, verr);
    return DONE;
}

bool soft_sq_lock(struct soft_dev *sd, struct soft_qp_shared *s, bool steal)
{
    int32_t cur = 0;
    if (atomic_compare_exchange_strong(&s->sq_lock, &cur, sd->pid))
        return true;
    /* a holder that died keeps it forever: take it back (a syscall, so only
     * where the caller can afford one) */
    if (steal && cur != sd->pid && kill(cur, 0) != 0 && errno == ESRCH)
        return atomic_compare_exchange_strong(&s->sq_lock, &cur, sd->pid);
    return false;
}

void soft_sq_unlock(struct soft_qp_shared *s)
{
    atomic_store_explicit(&s->sq_lock, 0, memory_order_release);
}

void soft_sq_run(struct soft_dev *sd, struct soft_peer *owner, struct soft_qp_shared *sqp,
                 struct soft_qp *local)
{
    if (atomic_load_explicit(&sqp->sq_head, memory_order_relaxed) ==
        atomic_load_explicit(&sqp->sq_tail, memory_order_acquire))
        return;
    if (!soft_sq_lock(sd, sqp, false)) {
        /* the other end is running it; or it died holding the lock, which
         * the owner takes back (checked once a millisecond) */
        if (!local)
            return;
        uint64_t now = now_ns();
        if (now - local->lock_checked_ns < 1000000ull)
            return;
        local->lock_checked_ns = now;
        if (!soft_sq_lock(sd, sqp, true))
            return;
    }
    if (!local && soft_peer_is_self(owner))
        for (struct soft_qp *q = sd->qps; q; q = q->next)
            if (q->sh == sqp)
                local = q;      /* ours after all: run it as the owner */
    struct exec e = {.sd = sd, .owner = owner, .sqp = sqp, .local = local};
    if (!local) {
        /* the receiver runs it: the target is our QP that it is connected to */
        e.target = sd->self;
        for (struct soft_qp *q = sd->qps; q; q = q->next)
            if (q->qp.qp_num == sqp->dest_qpn)
                e.tqp = q->sh;
    }
    struct soft_swr *sq = soft_sq(sqp);
    int r = DONE;
    uint64_t h = atomic_load_explicit(&sqp->sq_head, memory_order_relaxed);
    while (h < atomic_load_explicit(&sqp->sq_tail, memory_order_acquire) &&
           atomic_load_explicit(&sqp->state, memory_order_relaxed) == IBV_QPS_RTS &&
           (local || e.tqp)) {
        struct soft_swr *w = &sq[h % sqp->sq_cap];
        r = sqp->qp_type == IBV_QPT_UD ? deliver_ud(&e, w) : deliver_connected(&e, w);
        if (r == WAIT || r == SKIP)
            break;
        /* free the slot before the completion says so: the owner may post
         * again the moment it sees the completion (so keep what we need) */
        struct soft_swr done = {.wr_id = w->wr_id, .opcode = w->opcode, .total = w->total,
                                .signaled = w->signaled};
        atomic_store_explicit(&sqp->sq_head, ++h, memory_order_release);
        if (r == DONE)
            complete_send(&e, &done, IBV_WC_SUCCESS, 0);
        if (r == FAILED)
            break;
    }
    soft_sq_unlock(sqp);
    if (r == FAILED) {
        if (local)
            soft_qp_to_err(local);
        else
            mark_err(owner, sqp);
    }
}
