/* soft_exec.c - executing a soft send queue: the "DMA engine".
 *
 * A send queue is run by whichever process gets its lock: its owner (the
 * sender) or, for a connected queue pair, the process of the receiving QP.
 * Running a send takes the target's oldest posted receive (CAS on its
 * rq_cons), copies the message straight into the receive's buffers (the one
 * copy of a transfer), then leaves a result in the receive's slot and one in
 * the send's slot; each owner makes its completions from those.
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
 * memory the receiver cannot map); the receiver leaves those alone.
 *
 * Every slot is copied once and checked before use (soft.h says why): a bad
 * value in the target's memory fails the send (IBV_WC_REM_OP_ERR) and the
 * target's receive; a bad value in the queue being run breaks the queue pair
 * it was met for. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/util.h"

/* DONE: finished (e->res says how; the queue goes on). FAILED: finished
 * with an error that moves the QP to ERR. WAIT: try again later. SKIP: the
 * owner must run it. BROKEN: the queue run for a peer is corrupt: stop. */
enum { DONE, WAIT, FAILED, SKIP, BROKEN };

/* IB spec table 45: RNR NAK timer field -> microseconds. */
static const uint32_t rnr_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520,
};
/* No RNR timer is longer than this: a later retry time is a bad value. */
#define RNR_MAX_NS (655360ull * 1000)

/* How often a sender re-checks that its peer's process is alive. */
#define PEER_CHECK_NS 1000000ull

struct exec {
    struct soft_dev *sd;            /* the executing process's device */
    struct soft_qp_view *sv;        /* whose send queue (local->self when ours) */
    struct soft_qp *local;          /* the owner's QP when the owner runs it */
    struct soft_qp *served;         /* our QP whose peer's queue we run */
    struct soft_qp_view *tv;        /* connected: where the sends go */
    /* the sender's attributes, read once (the owner's records when local) */
    uint8_t rnr_retry, port, dev_index;
    uint64_t now;                   /* 0 until needed: the clock is not free */
    uint32_t slot;                  /* the send being run */
    struct soft_result res;         /* and how it finished */
    bool peer_bad;                  /* connected_peer: the lookup found corruption */
    char why[TBRT_WHY_MAX];
};

static uint64_t exec_now(struct exec *e)
{
    if (!e->now)
        e->now = now_ns();
    return e->now;
}

static int fail_send(struct exec *e, enum ibv_wc_status st, uint32_t verr)
{
    e->res.status = (uint8_t)st;
    e->res.vendor_err = verr;
    return FAILED;
}

/* Tell a QP's owner it went to ERR; the owner flushes it on its next call. */
static void mark_err(struct soft_qp_view *v)
{
    atomic_store(&v->sh->remote_err, 1);
    struct soft_ctx_hdr *h = soft_peer_at(v->peer, 0);
    atomic_fetch_add_explicit(&h->attention, 1, memory_order_release);
}

/* A bad value met while running a send. `in_target`: it was in the
 * target's memory (the send fails; the target goes to ERR), else in the
 * queue being run (the QP it belongs to, or we run it for, breaks). */
static int broken(struct exec *e, bool in_target, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int broken(struct exec *e, bool in_target, const char *fmt, ...)
{
    char why[TBRT_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (e->local) {
        soft_corrupt(e->sd, "QP 0x%x: %s", e->sv->qpn, why);
        if (in_target && e->tv)
            mark_err(e->tv);
        return fail_send(e, in_target ? IBV_WC_REM_OP_ERR : IBV_WC_LOC_QP_OP_ERR,
                         SOFT_VERR_CORRUPT);
    }
    /* we run a peer's queue for e->served: whichever side is bad, that
     * connection is over */
    soft_qp_break(e->served, false, "running the sends of peer QP 0x%x (pid %d): %s",
                  e->sv->qpn, (int)e->sv->pid, why);
    mark_err(e->sv);
    return BROKEN;
}

/* Who owns the memory a text is about. */
static void owner_text(const struct soft_qp_view *v, char *out, size_t len)
{
    if (soft_peer_is_self(v->peer))
        snprintf(out, len, "QP 0x%x (ours)", v->qpn);
    else
        snprintf(out, len, "peer QP 0x%x (pid %d)", v->qpn, (int)v->pid);
}

/* Copy a send slot and check it: fills *w, or returns why it is bad (in t). */
static const char *swr_fetch(struct exec *e, const struct soft_swr *slot, struct soft_swr *w,
                             char *t, size_t tlen)
{
    memcpy(w, slot, offsetof(struct soft_swr, inl));
    uint32_t op = w->opcode, type = e->sv->qp_type;
    bool ok_op = op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
                 ((op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM) &&
                  type != IBV_QPT_UD) ||
                 (op == IBV_WR_RDMA_READ && type == IBV_QPT_RC);
    if (!ok_op) {
        snprintf(t, tlen, "opcode %u is not a send of a %s QP", op, dev_qp_type_name((int)type));
        return t;
    }
    if (w->send_flags & IBV_SEND_INLINE) {
        if (w->total > SOFT_MAX_INLINE) {
            snprintf(t, tlen, "inline total %llu > %d", (unsigned long long)w->total,
                     SOFT_MAX_INLINE);
            return t;
        }
    } else {
        if (w->num_sge > SOFT_MAX_SGE) {
            snprintf(t, tlen, "num_sge %u > %d", w->num_sge, SOFT_MAX_SGE);
            return t;
        }
        uint64_t sum = 0;
        for (uint32_t i = 0; i < w->num_sge; i++)
            sum += w->sge[i].length;
        if (sum != w->total) {
            snprintf(t, tlen, "total %llu != the %llu bytes of its gather list",
                     (unsigned long long)w->total, (unsigned long long)sum);
            return t;
        }
    }
    if ((w->next_try_ns && w->next_try_ns > exec_now(e) + RNR_MAX_NS) ||
        (w->first_try_ns && w->first_try_ns > exec_now(e))) {
        snprintf(t, tlen, "next_try_ns %llu / first_try_ns %llu lie beyond any timer (now %llu)",
                 (unsigned long long)w->next_try_ns, (unsigned long long)w->first_try_ns,
                 (unsigned long long)exec_now(e));
        return t;
    }
    return NULL;
}

/* Pointers to the sender's data, one per SGE (inline data is one piece). */
static int gather(struct exec *e, struct soft_swr *slot, const struct soft_swr *w, void **ptr,
                  uint32_t need)
{
    if (w->send_flags & IBV_SEND_INLINE) {
        ptr[0] = slot->inl;     /* the bytes, not a length: fine to read in place */
        return 0;
    }
    for (uint32_t i = 0; i < w->num_sge; i++) {
        const struct ibv_sge *g = &w->sge[i];
        int rc = soft_peer_mem(e->sd, e->sv->peer, g->lkey, g->addr, g->length, need, &ptr[i],
                               e->why, sizeof e->why);
        if (rc)
            return rc;
    }
    return 0;
}

/* Copy the message of w into the receive r of the target. */
static int scatter(struct exec *e, const struct soft_swr *w, void **src, const struct soft_rqe *r,
                   uint64_t skip, uint32_t *verr)
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
        int rc = soft_peer_mem(e->sd, e->tv->peer, d->lkey, daddr, take, IBV_ACCESS_LOCAL_WRITE,
                               &dst, e->why, sizeof e->why);
        if (rc) {
            *verr = rc == -EBADMSG ? SOFT_VERR_CORRUPT
                    : rc == -EPERM ? SOFT_VERR_NOT_SHARED
                                   : SOFT_VERR_LKEY;
            return rc;
        }
        uint64_t doff = 0;
        while (doff < take) {
            /* sums were checked: si stays inside the gather list */
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
static struct soft_qp_view *connected_peer(struct soft_qp *q, struct exec *e)
{
    if (!q->peer.peer) {
        uint64_t now = exec_now(e);
        if (q->peer_checked_ns && now - q->peer_checked_ns < PEER_CHECK_NS)
            return NULL;        /* looked a moment ago */
        q->peer_checked_ns = now;
        int rc = soft_view_lookup(q->sd, q->dest_qpn, &q->peer, e->why, sizeof e->why);
        if (rc) {
            q->peer.peer = NULL;
            e->peer_bad = rc == -EBADMSG;
            return NULL;
        }
    }
    struct soft_qp_view *v = &q->peer;
    uint32_t st = atomic_load_explicit(&v->sh->state, memory_order_acquire);
    if (v->sh->qpn != q->dest_qpn || (st != IBV_QPS_RTR && st != IBV_QPS_RTS) ||
        atomic_load_explicit(&v->sh->remote_err, memory_order_relaxed)) {
        q->peer.peer = NULL;    /* look it up again later */
        return NULL;
    }
    /* is its process still there? a look at the clock every 64 sends, at
     * the process every millisecond */
    if ((++q->alive_tick & 63) == 0 && exec_now(e) - q->peer_checked_ns > PEER_CHECK_NS) {
        q->peer_checked_ns = exec_now(e);
        if (!soft_peer_alive(v->peer)) {
            q->peer.peer = NULL;
            return NULL;
        }
    }
    return v;
}

/* Both ends' ports up? A pulled cable loses frames like a dead peer. */
static bool path_up(struct exec *e)
{
    /* the target's port and device, read once (bounded by port_state_of) */
    uint8_t tport = e->tv->sh->port, tdev = e->tv->sh->dev_index;
    return soft_port_state_of(e->sd, e->dev_index, e->port ? e->port : 1) == IBV_PORT_ACTIVE &&
           soft_port_state_of(e->sd, tdev, tport ? tport : 1) == IBV_PORT_ACTIVE;
}

/* Nobody answers. UC drops; RC waits for an ACK until the retry budget is
 * spent (IB spec: local ACK timeout = 4.096 us x 2^timeout per try). Owner
 * only: its own records give timeout and retry_cnt. */
static int no_peer(struct exec *e, struct soft_swr *slot, struct soft_swr *w)
{
    struct soft_qp *q = e->local;
    if (q->qp.qp_type != IBV_QPT_RC)
        return DONE;
    if (!w->first_try_ns)
        slot->first_try_ns = w->first_try_ns = exec_now(e);
    if (q->timeout == 0)
        return WAIT;            /* timeout 0: wait forever */
    uint64_t limit = 4096ull * (1ull << q->timeout) * (q->retry_cnt + 1u);
    if (exec_now(e) - w->first_try_ns >= limit)
        return fail_send(e, IBV_WC_RETRY_EXC_ERR,
                         e->tv && !path_up(e) ? SOFT_VERR_PORT_DOWN : SOFT_VERR_PEER_GONE);
    return WAIT;
}

/* The target has no receive posted. */
static int no_receive(struct exec *e, struct soft_swr *slot, struct soft_swr *w)
{
    const struct soft_personality *p = e->sd->p;
    if (p->credit_flow)
        return WAIT;            /* the target's next post_recv runs it */
    if (e->sv->qp_type != IBV_QPT_RC)
        return DONE;            /* UC without a receive: the message is dropped */
    if (w->next_try_ns) {
        slot->rnr_count = ++w->rnr_count;
        if (e->rnr_retry != 7 && w->rnr_count > e->rnr_retry)
            return fail_send(e, IBV_WC_RNR_RETRY_EXC_ERR, SOFT_VERR_RNR);
    }
    uint8_t timer = e->tv->sh->min_rnr_timer;
    slot->next_try_ns = w->next_try_ns = exec_now(e) + rnr_us[timer & 31] * 1000ull;
    return WAIT;
}

/* Leave a result in receive c of the target (if the target did not take
 * it back meanwhile) and wake the target's CQ if it waits. */
static void recv_done(struct exec *e, uint64_t c, const struct soft_result *r)
{
    struct soft_rqe *slot = &e->tv->rq[c % e->tv->rq_cap];
    uint64_t want = c + 1;
    if (!atomic_compare_exchange_strong_explicit(&slot->seq, &want, (c + 1) | SOFT_RQE_WRITING,
                                                 memory_order_acquire, memory_order_relaxed))
        return;                 /* flushed or reset: the result has no one to go to */
    memcpy(&slot->res, r, sizeof *r);
    slot->res.stamp = soft_stamp();
    atomic_store_explicit(&slot->seq, (c + 1) | SOFT_RQE_DONE, memory_order_release);
    soft_ring(e->sd, e->tv->peer, e->tv->recv_db, e->tv->recv_dbi);
}

static void recv_err(struct exec *e, uint64_t c, enum ibv_wc_status st, uint32_t verr)
{
    struct soft_result r = {.status = (uint8_t)st, .opcode = IBV_WC_RECV, .vendor_err = verr,
                            .src_qp = e->sv->qpn};
    recv_done(e, c, &r);
}

/* Take the target's oldest posted receive: its index in *c, its copy in
 * *r. Returns DONE, WAIT/DONE (none: the caller's policy) via *none, or a
 * bad value. */
static int take_receive(struct exec *e, struct soft_rqe *r, uint64_t *c, bool ask, bool *none)
{
    struct soft_qp_view *t = e->tv;
    bool asked = false;
    *none = false;
    for (;;) {
        uint64_t k = atomic_load_explicit(&t->sh->rq_cons, memory_order_acquire);
        if (!soft_rq_posted(t->rq, t->rq_cap, k)) {
            if (asked || !ask) {
                *none = true;
                return DONE;
            }
            /* ask the target to run us when it posts (also when the target
             * itself is running us: its next post must try again); then
             * look once more, as its post may have come just before it
             * could see the ask (pairs with the fence in soft_post_recv) */
            atomic_store(&t->sh->help_wanted, 1);
            atomic_thread_fence(memory_order_seq_cst);
            asked = true;
            continue;
        }
        bool sane = soft_rqe_copy(r, &t->rq[k % t->rq_cap]);
        if (!atomic_compare_exchange_weak_explicit(&t->sh->rq_cons, &k, k + 1,
                                                   memory_order_acq_rel, memory_order_relaxed))
            continue;
        *c = k;
        /* the next message will want the next receive: start fetching its
         * line (the owner wrote it) now, off the next message's path */
        __builtin_prefetch(&t->rq[(k + 1) % t->rq_cap], 0, 3);
        char who[64];
        owner_text(t, who, sizeof who);
        if (!sane) {
            recv_err(e, k, IBV_WC_LOC_QP_OP_ERR, SOFT_VERR_CORRUPT);
            return broken(e, true, "%s: receive slot %u: num_sge %u > %d (its shared memory is "
                          "corrupt)", who, (unsigned)(k % t->rq_cap), r->num_sge, SOFT_MAX_SGE);
        }
        uint64_t sum = 0;
        for (uint32_t i = 0; i < r->num_sge; i++)
            sum += r->sge[i].length;
        if (sum != r->total) {
            recv_err(e, k, IBV_WC_LOC_QP_OP_ERR, SOFT_VERR_CORRUPT);
            return broken(e, true, "%s: receive slot %u: total %llu != the %llu bytes of its "
                          "scatter list (its shared memory is corrupt)", who,
                          (unsigned)(k % t->rq_cap), (unsigned long long)r->total,
                          (unsigned long long)sum);
        }
        return DONE;
    }
}

static int deliver_connected(struct exec *e, struct soft_swr *slot, struct soft_swr *w)
{
    uint32_t op = w->opcode;
    void *src[SOFT_MAX_SGE];
    uint32_t need = op == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
    int grc = gather(e, slot, w, src, need);
    if (grc == -EBADMSG)
        return broken(e, false, "%s", e->why);
    if (grc) {
        if (!e->local)
            return SKIP;        /* the owner reports it */
        return fail_send(e, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
    }
    if (e->local) {
        e->tv = connected_peer(e->local, e);
        if (!e->tv) {
            if (e->peer_bad)
                return broken(e, true, "%s", e->why);
            return no_peer(e, slot, w);
        }
    }
    if (!path_up(e))
        return e->local ? no_peer(e, slot, w) : SKIP;
    if (w->next_try_ns && exec_now(e) < w->next_try_ns) {
        /* an RNR NAK's timer is running: the target's next turn may retry */
        atomic_store(&e->tv->sh->help_wanted, 1);
        return WAIT;
    }
    bool rc = e->sv->qp_type == IBV_QPT_RC;

    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ) {
        uint32_t acc = op == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        void *remote = NULL;
        int mrc = w->total ? soft_peer_mem(e->sd, e->tv->peer, w->rkey, w->remote_addr, w->total,
                                           acc, &remote, e->why, sizeof e->why)
                           : 0;
        if (mrc == -EBADMSG)
            return broken(e, true, "%s", e->why);
        if (mrc) {
            if (!rc)
                return DONE;    /* UC: a bad rkey drops the message */
            mark_err(e->tv);
            return fail_send(e, IBV_WC_REM_ACCESS_ERR, SOFT_VERR_RKEY);
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
    struct soft_rqe r;
    uint64_t c;
    bool none;
    int trc = take_receive(e, &r, &c, true, &none);
    if (trc != DONE)
        return trc;
    if (none)
        return no_receive(e, slot, w);
    if (op != IBV_WR_RDMA_WRITE_WITH_IMM) {
        if (e->sd->p->frames_must_match && soft_frames(r.total) != soft_frames(w->total)) {
            /* TN3205: a SEND and its RECV must cover the same frames; the
             * receive fails, the sender (UC) never knows */
            recv_err(e, c, IBV_WC_LOC_LEN_ERR, SOFT_VERR_FRAMES);
            return DONE;
        }
        if (r.total < w->total) {
            recv_err(e, c, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT);
            if (!rc)
                return DONE;
            mark_err(e->tv);
            return fail_send(e, IBV_WC_REM_INV_REQ_ERR, SOFT_VERR_REMOTE);
        }
        uint32_t verr = 0;
        int src_rc = scatter(e, w, src, &r, 0, &verr);
        if (src_rc == -EBADMSG) {
            recv_err(e, c, IBV_WC_LOC_QP_OP_ERR, SOFT_VERR_CORRUPT);
            return broken(e, true, "%s", e->why);
        }
        if (src_rc) {
            recv_err(e, c, IBV_WC_LOC_PROT_ERR, verr);
            if (!rc)
                return DONE;
            mark_err(e->tv);
            return fail_send(e, IBV_WC_REM_OP_ERR, SOFT_VERR_REMOTE);
        }
    }
    bool imm = op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
    struct soft_result res = {
        .status = IBV_WC_SUCCESS,
        .opcode = op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
        .byte_len = (uint32_t)w->total, .src_qp = e->sv->qpn,
        .wc_flags = imm ? IBV_WC_WITH_IMM : 0, .imm = imm ? w->imm_data : 0,
    };
    recv_done(e, c, &res);
    return DONE;
}

/* UD: unreliable datagrams, one MTU at most, a 40-byte GRH in front. Run by
 * the owner only (the target is a different QP per send). */
static int deliver_ud(struct exec *e, struct soft_swr *slot, struct soft_swr *w)
{
    struct soft_dev *sd = e->sd;
    struct soft_qp *q = e->local;
    if (!q)
        return SKIP;
    void *src[SOFT_MAX_SGE];
    if (gather(e, slot, w, src, 0))
        return fail_send(e, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
    if (w->total > (128u << q->mtu))
        return fail_send(e, IBV_WC_LOC_LEN_ERR, SOFT_VERR_MSG_SIZE);
    if (!soft_gid_is_local(sd, w->dgid))
        return DONE;            /* not reachable over this wire: lost */
    struct soft_qp_view v;
    int lrc = soft_view_lookup(sd, w->remote_qpn, &v, e->why, sizeof e->why);
    if (lrc == -EBADMSG) {
        /* one bad target does not break a datagram QP: this send fails */
        soft_corrupt(sd, "QP 0x%x: %s", q->qp.qp_num, e->why);
        e->res.status = IBV_WC_REM_OP_ERR;
        e->res.vendor_err = SOFT_VERR_CORRUPT;
        return DONE;
    }
    if (lrc)
        return DONE;
    uint32_t st = atomic_load(&v.sh->state);
    if (v.qp_type != IBV_QPT_UD || (st != IBV_QPS_RTR && st != IBV_QPS_RTS))
        return DONE;
    uint32_t qkey = (w->remote_qkey & 0x80000000u) ? q->qkey : w->remote_qkey;
    if (qkey != v.sh->qkey)
        return DONE;            /* qkey violation: dropped, as on the wire */
    e->tv = &v;
    struct soft_rqe r;
    uint64_t c;
    bool none;
    int trc = take_receive(e, &r, &c, false, &none);
    if (trc == FAILED) {        /* its receive was bad: this send fails, the QP lives */
        e->tv = NULL;
        return DONE;
    }
    if (none) {
        e->tv = NULL;
        return DONE;            /* no receive: dropped */
    }
    enum { GRH = 40 };
    if (r.total < GRH + w->total) {
        recv_err(e, c, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT);
        e->tv = NULL;
        return DONE;
    }
    /* the GRH: version 6, payload length, next header, hop limit, GIDs */
    struct soft_swr hdr = {.total = GRH, .send_flags = IBV_SEND_INLINE, .num_sge = 1};
    uint8_t grh[GRH] = {0x60};
    grh[4] = (uint8_t)(w->total >> 8);
    grh[5] = (uint8_t)w->total;
    grh[6] = 0x1b;
    grh[7] = 64;
    struct ibv_gid_entry sg;
    uint8_t port = q->port ? q->port : 1;
    if (soft_query_gid(&sd->dev, port, w->sgid_index, &sg) >= 0)
        memcpy(grh + 8, sg.gid.raw, 16);
    memcpy(grh + 24, w->dgid, 16);
    void *hp[1] = {grh};
    uint32_t verr = 0;
    int src_rc = scatter(e, &hdr, hp, &r, 0, &verr);
    if (src_rc == 0 && w->total)
        src_rc = scatter(e, w, src, &r, GRH, &verr);
    if (src_rc == 0) {
        bool imm = w->opcode == IBV_WR_SEND_WITH_IMM;
        struct soft_result res = {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
                                  .byte_len = (uint32_t)(GRH + w->total), .src_qp = q->qp.qp_num,
                                  .wc_flags = IBV_WC_GRH | (imm ? IBV_WC_WITH_IMM : 0),
                                  .imm = imm ? w->imm_data : 0};
        recv_done(e, c, &res);
    } else {
        recv_err(e, c, src_rc == -EBADMSG ? IBV_WC_LOC_QP_OP_ERR : IBV_WC_LOC_PROT_ERR, verr);
        if (src_rc == -EBADMSG) {
            soft_corrupt(sd, "QP 0x%x: %s", q->qp.qp_num, e->why);
            e->res.status = IBV_WC_REM_OP_ERR;
            e->res.vendor_err = SOFT_VERR_CORRUPT;
        }
    }
    e->tv = NULL;
    return DONE;
}

bool soft_sq_lock(struct soft_dev *sd, struct soft_qp_shared *s, bool steal)
{
    int32_t cur = 0;
    if (atomic_compare_exchange_strong(&s->sq_lock, &cur, sd->pid))
        return true;
    /* a holder that died keeps it forever: take it back (a syscall, so only
     * where the caller can afford one) */
    if (steal && cur != sd->pid && (cur <= 0 || (kill(cur, 0) != 0 && errno == ESRCH)))
        return atomic_compare_exchange_strong(&s->sq_lock, &cur, sd->pid);
    return false;
}

void soft_sq_unlock(struct soft_qp_shared *s)
{
    atomic_store_explicit(&s->sq_lock, 0, memory_order_release);
}

/* The owner takes its own queue's lock back from a holder that cannot hold
 * it: a dead process, or one that is neither us nor our connected peer
 * (a bad value: no one else may run our queue). Checked once a millisecond. */
static bool own_lock(struct soft_dev *sd, struct soft_qp *q)
{
    if (soft_sq_lock(sd, q->sh, false))
        return true;
    uint64_t now = now_ns();
    if (now - q->lock_checked_ns < 1000000ull)
        return false;
    q->lock_checked_ns = now;
    if (soft_sq_lock(sd, q->sh, true))
        return true;
    /* alive: it must be the process of the QP we are connected to */
    char why[TBRT_WHY_MAX];
    if (!q->peer.peer && q->dest_qpn && q->qp.qp_type != IBV_QPT_UD &&
        soft_view_lookup(sd, q->dest_qpn, &q->peer, why, sizeof why))
        q->peer.peer = NULL;
    int32_t cur = atomic_load(&q->sh->sq_lock);
    if (cur == sd->pid || (q->peer.peer && cur == q->peer.pid))
        return false;           /* a legitimate executor, busy */
    return atomic_compare_exchange_strong(&q->sh->sq_lock, &cur, sd->pid);
}

/* Run slots [head, tail) of the queue e->sv, at most one lap. */
static void run(struct exec *e, uint64_t tail)
{
    struct soft_qp_view *sv = e->sv;
    struct soft_qp_shared *sh = sv->sh;
    int r = DONE;
    uint64_t h = atomic_load_explicit(&sh->sq_head, memory_order_relaxed);
    if (tail - h > sv->sq_cap) {
        soft_sq_unlock(sh);
        if (e->local)
            soft_qp_break(e->local, false, "sq_head %llu is outside the %llu..%llu it may be "
                          "(our shared block is corrupt)", (unsigned long long)h,
                          (unsigned long long)(tail - sv->sq_cap), (unsigned long long)tail);
        else
            broken(e, false, "sq_tail %llu is more than sq_cap %u past sq_head %llu (its "
                   "shared memory is corrupt)", (unsigned long long)tail, sv->sq_cap,
                   (unsigned long long)h);
        return;
    }
    while (h != tail && (e->local ? e->local->qp.state == IBV_QPS_RTS
                                  : atomic_load_explicit(&sh->state, memory_order_relaxed) ==
                                        IBV_QPS_RTS)) {
        e->slot = (uint32_t)(h % sv->sq_cap);
        struct soft_swr *slot = &sv->sq[e->slot];
        struct soft_swr w;
        e->res = (struct soft_result){.status = IBV_WC_SUCCESS};
        char t[160];
        const char *bad = swr_fetch(e, slot, &w, t, sizeof t);
        if (bad) {
            r = broken(e, false, "send slot %u: %s (%s)", e->slot, bad,
                       e->local ? "our shared block is corrupt" : "its shared memory is corrupt");
        } else {
            r = sv->qp_type == IBV_QPT_UD ? deliver_ud(e, slot, &w)
                                          : deliver_connected(e, slot, &w);
        }
        if (r == WAIT || r == SKIP || r == BROKEN)
            break;
        /* the result, then the head: the owner reaps what the head passed */
        e->res.stamp = soft_stamp();
        memcpy(&slot->res, &e->res, sizeof e->res);
        atomic_store_explicit(&sh->sq_head, ++h, memory_order_release);
        if (!e->local)
            soft_ring(e->sd, sv->peer, sv->send_db, sv->send_dbi);
        if (r == FAILED)
            break;
    }
    soft_sq_unlock(sh);
    if (r == FAILED) {
        if (e->local)
            soft_qp_to_err(e->local);
        else
            mark_err(sv);
    }
}

void soft_sq_run_own(struct soft_dev *sd, struct soft_qp *q)
{
    if (atomic_load_explicit(&q->sh->sq_head, memory_order_relaxed) == q->sq_tail)
        return;
    if (!own_lock(sd, q))
        return;                 /* the other end is running it */
    struct exec e = {.sd = sd, .sv = &q->self, .local = q, .rnr_retry = q->rnr_retry,
                     .port = q->port, .dev_index = (uint8_t)sd->index};
    run(&e, q->sq_tail);
    /* our own results: a waiting CQ hears of them as of a peer's */
    soft_ring(sd, sd->self, q->self.send_db, q->self.send_dbi);
}

void soft_sq_run_peer(struct soft_dev *sd, struct soft_qp *target)
{
    struct soft_qp_view *sv = &target->peer;
    struct soft_qp_shared *sh = sv->sh;
    uint64_t tail = atomic_load_explicit(&sh->sq_tail, memory_order_acquire);
    if (atomic_load_explicit(&sh->sq_head, memory_order_relaxed) == tail ||
        !soft_sq_lock(sd, sh, false))
        return;
    struct exec e = {.sd = sd, .sv = sv, .served = target, .tv = &target->self,
                     .rnr_retry = sh->rnr_retry & 7, .port = sh->port, .dev_index = sh->dev_index};
    run(&e, tail);
}
