/* shm_srq.c - shared receive queues of the shared-memory wire (wire.h's
 * srq_* ops). An SRQ is a block in our context (struct shm_srq_block): its
 * receive ring, the count posted (for the limit) and the armed limit. A QP
 * made with it names the block (srq_off); a sender's view of that QP
 * points at the SRQ's ring (shm_peer.c), so taking a receive is the same
 * CAS as for a QP's own queue, and the result names the QP it arrived at.
 *
 * The limit: the owner arms it (shm_srq_block.limit); a sender that took a
 * receive and finds fewer than the limit waiting disarms it (a CAS, so
 * exactly one does) and rings the owner's event doorbell; the owner's next
 * progress reports SOFT_WIRE_SRQ_LIMIT. The owner's own records decide
 * whether it was armed (a peer that zeroes the field only makes an event
 * come early, which is all it could do). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"

int shm_srq_create(struct soft_wire *w, const struct soft_wire_srq_init *init,
                   struct soft_wire_srq **out, uint32_t *srqn, char *why, size_t len)
{
    if (init->cap < 1 || init->cap > SOFT_MAX_QP_WR)
        return err_set(why, len, EINVAL, "SRQ size %u out of 1..%d", init->cap, SOFT_MAX_QP_WR);
    struct soft_wire_srq *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(why, len, ENOMEM, "out of memory");
    s->sh_bytes = shm_srq_bytes(soft_ring_size(init->cap));
    s->sh = shm_ctx_alloc(w, s->sh_bytes, &s->sh_off);
    if (!s->sh) {
        free(s);
        return err_set(why, len, ENOMEM, "device context full");
    }
    /* numbers of our own, unique in the context (never 0) */
    static _Atomic uint32_t next_srqn = 1;
    s->srqn = atomic_fetch_add(&next_srqn, 1) & 0xffffff;
    if (!s->srqn)
        s->srqn = atomic_fetch_add(&next_srqn, 1) & 0xffffff;
    s->w = w;
    s->cookie = init->cookie;
    s->cap = soft_ring_size(init->cap);     /* slots are index & (cap - 1) */
    s->sh->srqn = s->srqn;
    s->sh->cap = s->cap;
    s->sh->magic = SHM_SRQ_MAGIC;
    s->own = (struct shm_rq_own){.rq = s->sh->rq, .rres = shm_rres_of(s->sh->rq, s->cap),
                                 .cons = &s->sh->rq_cons, .cap = s->cap,
                                 .many_senders = true, .srq = true};
    s->next = w->srqs;
    w->srqs = s;
    *srqn = s->srqn;
    *out = s;
    return 0;
}

void shm_srq_destroy(struct soft_wire_srq *s)
{
    struct soft_wire *w = s->w;
    s->sh->magic = 0;           /* peers holding a view see it gone */
    shm_ctx_release(w, s->sh_off, s->sh_bytes);
    for (struct soft_wire_srq **pp = &w->srqs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    free(s);
}

void shm_srq_post(struct soft_wire_srq *s, uint64_t index, const struct soft_wire_recv *r)
{
    shm_rq_post(&s->own, index, r);
    atomic_store_explicit(&s->sh->prod, s->own.prod, memory_order_release);
}

/* Fewer than the limit waiting? (posted, by our own count, less taken; a
 * cons outside what may be counts as none waiting: an early event is all a
 * bad value can make of it) */
static bool below_limit(struct soft_wire_srq *s)
{
    uint64_t cons = atomic_load_explicit(&s->sh->rq_cons, memory_order_acquire);
    uint64_t prod = s->own.prod;
    uint64_t waiting = cons <= prod && prod - cons <= s->cap ? prod - cons : 0;
    return waiting < s->limit;
}

void shm_srq_arm(struct soft_wire_srq *s, uint32_t limit)
{
    s->limit = limit;
    s->limit_hit = false;
    atomic_store(&s->sh->limit, limit);
    atomic_thread_fence(memory_order_seq_cst);  /* pairs with the sender's take */
    if (limit && below_limit(s)) {
        atomic_store(&s->sh->limit, 0);
        s->limit_hit = true;    /* armed when already below: at once */
        shm_ring(s->w, s->w->self, s->w->event_db, SHM_EVENT_DB);
    }
}

int shm_srq_done(struct soft_wire_srq *s, uint64_t index, struct soft_result *r)
{
    return shm_rq_done(s->w, &s->own, "SRQ", s->srqn, false, index, r);
}

int shm_srq_events(struct soft_wire *w, struct soft_wire_event *ev, int max)
{
    int n = 0;
    for (struct soft_wire_srq *s = w->srqs; s && n < max; s = s->next) {
        if (s->limit && !s->limit_hit &&
            atomic_load_explicit(&s->sh->limit, memory_order_relaxed) == 0)
            s->limit_hit = true;    /* a sender crossed it and disarmed it */
        if (s->limit && !s->limit_hit && below_limit(s)) {
            /* crossed with no sender to say so (the field was cleared under us) */
            atomic_store(&s->sh->limit, 0);
            s->limit_hit = true;
        }
        if (!s->limit_hit)
            continue;
        s->limit_hit = false;
        s->limit = 0;
        ev[n++] = (struct soft_wire_event){.cookie = s->cookie, .kind = SOFT_WIRE_SRQ_LIMIT};
    }
    return n;
}

void shm_srq_taken(struct soft_wire *w, struct shm_view *t, uint64_t k)
{
    struct shm_srq_block *b = t->srq;
    uint32_t limit = atomic_load_explicit(&b->limit, memory_order_acquire);
    if (!limit)
        return;
    uint64_t prod = atomic_load_explicit(&b->prod, memory_order_acquire);
    /* prod is the owner's word: a value beyond what could be only makes the
     * count wrong, and the owner checks its own */
    if (prod - (k + 1) >= limit || prod < k + 1)
        return;
    if (!atomic_compare_exchange_strong(&b->limit, &limit, 0))
        return;                 /* someone else said so, or it was re-armed */
    shm_ring(w, t->peer, t->event_db, SHM_EVENT_DB);
}
