/* shm_rq.c - our receive queues as their owner sees them: a QP's own or an
 * SRQ's (struct shm_rq_own). Posting writes a slot; senders take slots in
 * order (a CAS on cons) and leave results in them; the owner reads a result
 * back once, when the objects ask for it by index (shm.h says why every
 * field is copied once and checked).
 *
 * The owner polls a receive's result line (struct shm_rres), and looks at
 * the posted receive's own line only now and then, or to flush it: that
 * line goes to the sender that reads it ahead.
 *
 * A queue that several senders fill (UD, an SRQ) can be stopped for good by
 * one that took a receive and died: once a later receive has finished and
 * that one stayed unfinished for a while, it is taken back and reported
 * lost. In ERR (QPs only) what was not finished is taken back from the
 * senders (a CAS on the slot) and flushed. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"

/* How long a later receive may have finished before a taken one counts as
 * lost (its sender died). */
#define STALL_NS 100000000ull

void shm_rq_post(struct shm_rq_own *o, uint64_t index, const struct soft_wire_recv *r)
{
    struct shm_rqe *e = &o->rq[index & (o->cap - 1)];
    e->num_sge = r->num_sge;
    e->total = r->total;
    memcpy(e->sge, r->sge, (size_t)r->num_sge * sizeof e->sge[0]);
    atomic_store_explicit(&e->seq, index + 1, memory_order_release);
    o->prod = index + 1;
    /* a sender may be waiting for exactly this (pairs with the fence after
     * its help_wanted store in shm_deliver.c) */
    atomic_thread_fence(memory_order_seq_cst);
}

bool shm_rq_finish(struct shm_rq_own *o, uint64_t c, const struct soft_result *r, uint32_t qpn)
{
    return c < o->prod && c < atomic_load_explicit(o->cons, memory_order_acquire) &&
           shm_rq_result_put(o->rq, o->rres, o->cap, c, r, NULL, 0, o->srq, qpn);
}

bool shm_rq_result_waits(struct shm_rq_own *o, uint64_t c)
{
    uint32_t i = (uint32_t)(c & (o->cap - 1));
    uint64_t until = now_ns() + 1000000ull;
    while (atomic_load_explicit(&o->rq[i].seq, memory_order_acquire) ==
           ((c + 1) | SHM_RQE_WRITING)) {
        if (atomic_load_explicit(&o->rres[i].seq, memory_order_acquire) == c + 1)
            return true;
        if (now_ns() > until)
            return false;
    }
    return false;
}

void shm_rq_reset(struct shm_rq_own *o)
{
    for (uint64_t c = o->prod - TBRT_MIN(o->prod, o->cap); c < o->prod; c++)
        shm_rq_result_waits(o, c);
    for (uint32_t i = 0; i < o->cap; i++) {
        atomic_store(&o->rq[i].seq, 0);    /* old entries must not look posted */
        atomic_store(&o->rres[i].seq, 0);  /* nor done */
    }
    atomic_store(o->cons, o->prod);
    o->stall_ns = 0;
}

static void flushed(struct soft_result *r)
{
    *r = (struct soft_result){.stamp = soft_stamp(), .status = IBV_WC_WR_FLUSH_ERR,
                              .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_FLUSH};
}

/* Senders take receives in order and only posted ones, so cons can never
 * pass what we posted; a peer that moved it there broke the queue. Looked
 * at now and then, off the fast path (its line is the senders'). */
static bool cons_sane(struct soft_wire *w, struct shm_rq_own *o, const char *kind,
                      uint32_t num, uint64_t oldest)
{
    uint64_t cons = atomic_load_explicit(o->cons, memory_order_relaxed);
    if (cons - oldest <= o->prod - oldest)
        return true;
    shm_corrupt(w, "%s 0x%x: rq_cons %llu is outside the %llu..%llu it may be (our shared "
                "block is corrupt)", kind, num, (unsigned long long)cons, (unsigned long long)oldest,
                (unsigned long long)o->prod);
    return false;
}

static bool stalled(struct shm_rq_own *o, uint64_t c)
{
    if (!o->many_senders || c + 1 >= o->prod)
        return false;
    struct shm_rres *next = &o->rres[(c + 1) & (o->cap - 1)];
    if (atomic_load_explicit(&next->seq, memory_order_relaxed) != c + 2) {
        o->stall_ns = 0;
        return false;
    }
    uint64_t now = now_ns();
    if (!o->stall_ns)
        o->stall_ns = now;
    if (now - o->stall_ns < STALL_NS)
        return false;
    o->stall_ns = 0;
    /* take it back from the vanished sender (a CAS: a live one may win) */
    uint64_t want = c + 1;
    return atomic_compare_exchange_strong(&o->rq[c & (o->cap - 1)].seq, &want, 0);
}

/* The result of receive c, if it is there: copied once into r. */
static bool result_of(struct shm_rq_own *o, uint64_t c, struct soft_result *r)
{
    uint32_t i = (uint32_t)(c & (o->cap - 1));
    struct shm_rres *e = &o->rres[i];
    if (atomic_load_explicit(&e->seq, memory_order_acquire) != c + 1)
        return false;
    /* the posted receive's line comes back to us now, for writing, while
     * the completion's work goes on: a program that posts a receive at once
     * after each completion (a verbs program's loop) otherwise waited for
     * the taker's copy of it then, at the post's fence (150 ns of
     * ib_send_lat's one-way, traced) */
    shm_prefetch_write(&o->rq[i]);
    struct shm_cqe x;           /* the one copy of what the executor wrote */
    memcpy(&x, &e->res, sizeof x);
    *r = (struct soft_result){.stamp = x.stamp, .byte_len = x.byte_len, .imm = x.imm,
                              .src_qp = x.src_qp, .status = x.status, .opcode = x.opcode,
                              .wc_flags = x.wc_flags, .data_len = x.data_len,
                              .vendor_err = x.status ? x.vendor_err : 0};
    /* a data_len beyond the line is a bad value the objects refuse */
    if (x.data_len)
        memcpy(r->data, x.data, SHM_CQE_DATA);
    if (o->srq)                 /* checked by the objects against the SRQ's QPs */
        r->qp_num = o->rq[i].res_qpn;
    return true;
}

int shm_rq_done(struct soft_wire *w, struct shm_rq_own *o, const char *kind, uint32_t num,
                bool stopped, uint64_t c, struct soft_result *r)
{
    /* the result line first: the one the taker writes, and all a waiting
     * owner reads while it waits (the posted receive's line is the sender's
     * to read ahead) */
    if (result_of(o, c, r))
        return 1;
    struct shm_rqe *e = &o->rq[c & (o->cap - 1)];
    if (stopped) {
        /* ERR: take it back from the senders (a taker writing it finishes
         * first, bounded); a bad value flushes too */
        uint64_t want = c + 1;
        if (!atomic_compare_exchange_strong(&e->seq, &want, 0) &&
            want == ((c + 1) | SHM_RQE_WRITING) && shm_rq_result_waits(o, c) &&
            result_of(o, c, r))
            return 1;
        atomic_store(&e->seq, 0);       /* flushed: no taker may write it any more */
        flushed(r);
        return 1;
    }
    if ((++o->idle & 255) == 0) {
        /* now and then, off the fast path: the posted receive's state and
         * the senders' index (their lines are the senders' to hold) */
        uint64_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);
        if (seq != c + 1 && seq != ((c + 1) | SHM_RQE_WRITING)) {
            shm_corrupt(w, "%s 0x%x: receive slot %u (receive %llu): seq 0x%llx is neither "
                        "posted nor taken (our shared block is corrupt)", kind, num,
                        (unsigned)(c & (o->cap - 1)), (unsigned long long)c,
                        (unsigned long long)seq);
            return -1;
        }
        if (!cons_sane(w, o, kind, num, c))
            return -1;
    }
    if (!stalled(o, c))
        return 0;
    *r = (struct soft_result){.stamp = soft_stamp(), .status = IBV_WC_GENERAL_ERR,
                              .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_PEER_GONE};
    return 1;
}
