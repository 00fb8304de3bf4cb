/* shm_exec.c - executing a send queue of the shared-memory wire: the "DMA
 * engine".
 *
 * A send queue is run by whichever process gets its lock: its owner (the
 * sender) or, for a connected queue pair, the process of the receiving QP
 * (when a send waits for the receive it just posted). Each send is copied
 * out of its slot once and checked (shm.h says why), delivered
 * (shm_deliver.c), and its result written into the slot before the queue's
 * head passes it: the owner reaps what the head passed. A bad value in the
 * target's memory fails the send (IBV_WC_REM_OP_ERR) and the target's
 * receive; a bad value in the queue being run breaks the queue pair it was
 * met for. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"

uint64_t shm_exec_now(struct shm_exec *e)
{
    if (!e->now)
        e->now = now_ns();
    return e->now;
}

int shm_exec_fail(struct shm_exec *e, enum ibv_wc_status st, uint32_t verr)
{
    e->res.status = (uint8_t)st;
    e->res.vendor_err = verr;
    return SHM_FAILED;
}

void shm_mark_err(struct soft_wire *w, struct shm_view *v, int cause)
{
    /* the first cause stays (cause + 1: 0 means not marked) */
    uint32_t none = 0;
    atomic_compare_exchange_strong(&v->sh->remote_err, &none, (uint32_t)cause + 1);
    struct shm_ctx_hdr *h = shm_peer_at(v->peer, 0);
    atomic_fetch_add_explicit(&h->attention, 1, memory_order_release);
    /* an owner asleep on its CQs or its events must take a turn to see it:
     * its flushes are made then */
    shm_ring(w, v->peer, v->event_db, SHM_EVENT_DB);
    shm_ring(w, v->peer, v->recv_db, v->recv_dbi);
    if (v->send_dbi != v->recv_dbi)
        shm_ring(w, v->peer, v->send_db, v->send_dbi);
}

int shm_exec_broken(struct shm_exec *e, bool in_target, const char *fmt, ...)
{
    char why[TBRT_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (e->local) {
        shm_corrupt(e->w, "QP 0x%x: %s", e->sv->qpn, why);
        if (in_target && e->tv)
            shm_mark_err(e->w, e->tv, SOFT_WIRE_CAUSE_FATAL);
        return shm_exec_fail(e, in_target ? IBV_WC_REM_OP_ERR : IBV_WC_LOC_QP_OP_ERR,
                             SOFT_VERR_CORRUPT);
    }
    /* we run a peer's queue for e->served: whichever side is bad, that
     * connection is over */
    shm_qp_broken(e->served, "running the sends of peer QP 0x%x (pid %d): %s", e->sv->qpn,
                  (int)e->sv->pid, why);
    shm_mark_err(e->w, e->sv, SOFT_WIRE_CAUSE_FATAL);
    return SHM_BROKEN;
}

/* Copy a send slot and check it: fills *w, or returns why it is bad (in t). */
static const char *swr_fetch(struct shm_exec *e, const struct shm_swr *slot, struct shm_swr *w,
                             char *t, size_t tlen)
{
    memcpy(w, slot, SHM_SWR_HEAD);
    uint32_t op = w->opcode, type = e->sv->qp_type;
    bool atomic = op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
    bool ok_op = op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
                 ((op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM) &&
                  type != IBV_QPT_UD) ||
                 ((op == IBV_WR_RDMA_READ || atomic) && type == IBV_QPT_RC);
    if (!ok_op) {
        snprintf(t, tlen, "opcode %u is not a send of a %s QP", op,
                 type == IBV_QPT_RC ? "RC" : type == IBV_QPT_UC ? "UC" : "UD");
        return t;
    }
    if (atomic && (w->num_sge != 1 || w->total != SOFT_ATOMIC_SIZE ||
                   (w->send_flags & IBV_SEND_INLINE))) {
        snprintf(t, tlen, "an atomic with num_sge %u, total %llu%s", w->num_sge,
                 (unsigned long long)w->total,
                 (w->send_flags & IBV_SEND_INLINE) ? ", inline" : "");
        return t;
    }
    if (atomic) {
        /* an atomic's operands live past the gather list, with UD's fields */
        w->compare_add = slot->compare_add;
        w->swap = slot->swap;
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
        memcpy(w->sge, slot->sge, w->num_sge * sizeof w->sge[0]);
        uint64_t sum = 0;
        for (uint32_t i = 0; i < w->num_sge; i++)
            sum += w->sge[i].length;
        if (sum != w->total) {
            snprintf(t, tlen, "total %llu != the %llu bytes of its gather list",
                     (unsigned long long)w->total, (unsigned long long)sum);
            return t;
        }
    }
    if (type == IBV_QPT_UD)
        memcpy(&w->remote_qpn, &slot->remote_qpn, offsetof(struct shm_swr, res) -
               offsetof(struct shm_swr, remote_qpn));
    if ((w->next_try_ns && w->next_try_ns > shm_exec_now(e) + SHM_RNR_MAX_NS) ||
        (w->first_try_ns && w->first_try_ns > shm_exec_now(e))) {
        snprintf(t, tlen, "next_try_ns %llu / first_try_ns %llu lie beyond any timer (now %llu)",
                 (unsigned long long)w->next_try_ns, (unsigned long long)w->first_try_ns,
                 (unsigned long long)shm_exec_now(e));
        return t;
    }
    return NULL;
}

bool shm_sq_lock(struct soft_wire *w, struct shm_qp_block *s, bool steal)
{
    /* a look first: a CAS that fails still takes the line from the holder,
     * which needs it back to unlock (the target looks on every ask) */
    int32_t cur = atomic_load_explicit(&s->sq_lock, memory_order_relaxed);
    if (cur == 0 && atomic_compare_exchange_strong(&s->sq_lock, &cur, w->pid))
        return true;
    /* a holder that died keeps it forever: take it back (a syscall, so only
     * where the caller can afford one) */
    if (steal && cur != w->pid && (cur <= 0 || (kill(cur, 0) != 0 && errno == ESRCH)))
        return atomic_compare_exchange_strong(&s->sq_lock, &cur, w->pid);
    return false;
}

void shm_sq_unlock(struct shm_qp_block *s)
{
    atomic_store_explicit(&s->sq_lock, 0, memory_order_release);
}

/* The owner takes its own queue's lock back from a holder that cannot hold
 * it: a dead process, or one that is neither us nor our connected peer
 * (a bad value: no one else may run our queue). Checked once a millisecond. */
static bool own_lock(struct soft_wire_qp *q)
{
    struct soft_wire *w = q->w;
    if (shm_sq_lock(w, q->sh, false))
        return true;
    uint64_t now = now_ns();
    if (now - q->lock_checked_ns < 1000000ull)
        return false;
    q->lock_checked_ns = now;
    if (shm_sq_lock(w, q->sh, true))
        return true;
    /* alive: it must be the process of the QP we are connected to */
    char why[TBRT_WHY_MAX];
    if (!q->peer.peer && q->a.dest_qpn && q->qp_type != IBV_QPT_UD &&
        shm_view_lookup(w, q->a.dest_qpn, &q->peer, why, sizeof why))
        q->peer.peer = NULL;
    int32_t cur = atomic_load(&q->sh->sq_lock);
    if (cur == w->pid || (q->peer.peer && cur == q->peer.pid))
        return false;           /* a legitimate executor, busy */
    return atomic_compare_exchange_strong(&q->sh->sq_lock, &cur, w->pid);
}

/* Run slots [head, tail) of the queue e->sv, at most one lap. Returns how
 * many finished. */
static uint64_t run(struct shm_exec *e, uint64_t tail)
{
    struct shm_view *sv = e->sv;
    struct shm_qp_block *sh = sv->sh;
    int r = SHM_DONE;
    uint64_t h = atomic_load_explicit(&sh->sq_head, memory_order_relaxed), h0 = h;
    if (tail - h > sv->sq_cap) {
        shm_sq_unlock(sh);
        if (e->local)
            shm_qp_broken(e->local, "sq_head %llu is outside the %llu..%llu it may be (our "
                          "shared block is corrupt)", (unsigned long long)h,
                          (unsigned long long)(tail > sv->sq_cap ? tail - sv->sq_cap : 0),
                          (unsigned long long)tail);
        else
            shm_exec_broken(e, false, "sq_tail %llu is more than sq_cap %u past sq_head %llu "
                            "(its shared memory is corrupt)", (unsigned long long)tail,
                            sv->sq_cap, (unsigned long long)h);
        return 0;
    }
    while (h != tail && (e->local ? !e->local->stopped && e->local->a.state == IBV_QPS_RTS
                                  : atomic_load_explicit(&sh->state, memory_order_relaxed) ==
                                        IBV_QPS_RTS)) {
        e->index = h;
        e->tail = tail;
        uint32_t si = (uint32_t)(h & (sv->sq_cap - 1));
        struct shm_swr *slot = &sv->sq[si];
        struct shm_swr w;
        e->res = (struct soft_result){.status = IBV_WC_SUCCESS};
        char t[160];
        const char *bad = swr_fetch(e, slot, &w, t, sizeof t);
        if (bad)
            r = shm_exec_broken(e, false, "send slot %u: %s (%s)", si, bad,
                                e->local ? "our shared block is corrupt"
                                         : "its shared memory is corrupt");
        else
            r = sv->qp_type == IBV_QPT_UD ? shm_deliver_ud(e, slot, &w)
                                          : shm_deliver_connected(e, slot, &w);
        if (r == SHM_WAIT || r == SHM_SKIP || r == SHM_BROKEN || r == SHM_PENDING)
            break;              /* PENDING: delivered but for its copy's helper's pieces */
        /* the result, then the head: the owner reaps what the head passed */
        slot->res = (struct shm_sres){.stamp = soft_stamp(), .status = e->res.status,
                                      .vendor_err = e->res.vendor_err};
        atomic_store_explicit(&sh->sq_head, ++h, memory_order_release);
        if (!e->local)
            shm_ring(e->w, sv->peer, sv->send_db, sv->send_dbi);
        if (r == SHM_FAILED)
            break;
    }
    shm_sq_unlock(sh);
    if (r == SHM_FAILED) {
        if (e->local) {
            shm_qp_stop(e->local);
            e->local->events |= SHM_EV_ERR;
        } else {
            shm_mark_err(e->w, sv, SOFT_WIRE_CAUSE_NONE);  /* its completion says why */
        }
    }
    if (r == SHM_WAIT && e->wake_ns) {
        /* a timer: ours fires without us calling in; a peer's queue waiting
         * on one needs its owner to arm it, so its owner takes a turn */
        if (e->local)
            shm_cq_alarm_at(e->local->send_cq, e->wake_ns);
        else
            shm_ring(e->w, sv->peer, sv->send_db, sv->send_dbi);
    }
    return h - h0;
}

/* Everything zero but the text of a bad value (written before it is read;
 * clearing its 512 bytes for every send would cost more than the send). */
static void exec_init(struct shm_exec *e, struct soft_wire *w, struct shm_view *sv)
{
    memset(e, 0, offsetof(struct shm_exec, why));
    e->w = w;
    e->sv = sv;
}

void shm_sq_run_own(struct soft_wire_qp *q)
{
    if (atomic_load_explicit(&q->sh->sq_head, memory_order_relaxed) == q->sq_tail || q->stopped)
        return;
    if (!own_lock(q)) {
        /* the other end is running it, and looks at our tail again after
         * unlocking (shm_sq_run_peer); or it unlocked just now: ours */
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&q->sh->sq_lock, memory_order_relaxed) != 0 || !own_lock(q))
            return;
    }
    struct shm_exec e;
    exec_init(&e, q->w, &q->self);
    e.local = q;
    e.rnr_retry = q->a.rnr_retry;
    e.port = q->a.port;
    e.dev_index = (uint8_t)q->w->cfg.dev_index;
    /* our own results: a waiting CQ hears of them as of a peer's (only of
     * results: a ring for nothing would wake a sleeper into a busy loop) */
    if (run(&e, q->sq_tail))
        shm_ring(q->w, q->w->self, q->self.send_db, q->self.send_dbi);
}

/* Rounds of a peer's queue per turn: its owner may post more while we run
 * it, and the peer's memory is not ours to loop on for ever. */
#define PEER_ROUNDS 8

void shm_sq_run_peer(struct soft_wire_qp *target)
{
    struct shm_view *sv = &target->peer;
    struct shm_qp_block *sh = sv->sh;
    for (int round = 0; round < PEER_ROUNDS; round++) {
        uint64_t tail = atomic_load_explicit(&sh->sq_tail, memory_order_acquire);
        if (atomic_load_explicit(&sh->sq_head, memory_order_relaxed) == tail ||
            !shm_sq_lock(target->w, sh, false))
            return;
        /* the tail again, under the lock: the owner may have posted and run
         * past the one we read before we got it */
        tail = atomic_load_explicit(&sh->sq_tail, memory_order_acquire);
        struct shm_exec e;
        exec_init(&e, target->w, sv);
        e.served = target;
        e.tv = &target->self;
        e.rnr_retry = sh->rnr_retry & 7;
        e.port = sh->port;
        e.dev_index = sh->dev_index;
        run(&e, tail);
        /* Its owner found the lock ours for what it posted meanwhile and
         * left those sends to us (shm_sq_run_own): the owner posts (the
         * tail), then tries the lock; we unlocked, and look at the tail
         * after a full fence, so one of us sees the other. A send that
         * stopped the run early has its own way back (an ask, a timer). */
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&sh->sq_head, memory_order_relaxed) != tail ||
            atomic_load_explicit(&sh->sq_tail, memory_order_acquire) == tail)
            return;
    }
    atomic_store(&target->sh->help_wanted, 1);      /* more: our next turn */
}
