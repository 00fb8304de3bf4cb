/* udp_srq.c - shared receive queues of the UDP wire (wire.h's srq_* ops),
 * and the responder's one way to a receive, whether the QP has its own
 * queue or takes from an SRQ.
 *
 * An SRQ here is a ring of posted receives in this process (the responder
 * runs in the owner's process, under the endpoint's lock). A message that
 * arrives at a QP made with it claims the oldest unclaimed receive when its
 * first packet comes and holds it until its last packet: a message of many
 * packets cannot share its receive with another QP's message, as one
 * copy can on the shared-memory wire. The result names the QP, as the
 * objects check.
 *
 * The objects reap an SRQ in the order receives were posted, so a receive
 * claimed by a message still arriving keeps the later ones' completions
 * waiting until it finishes (RC finishes or breaks the QP; a UC message
 * that lost a packet keeps its receive for its QP's next message, as
 * IBA's UC rules say).
 *
 * A QP that goes to ERR or RESET while holding one finishes it flushed
 * (IBV_WC_WR_FLUSH_ERR, on that QP's CQ). A QP destroyed while holding one
 * gives it back if nothing was claimed after it; otherwise it is flushed
 * naming a QP that is gone, which the objects treat as a bad value.
 *
 * The limit (srq_arm): checked when a receive is claimed; crossing it
 * disarms it, wakes the event fd and reports SOFT_WIRE_SRQ_LIMIT at the next
 * progress. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "soft/wire/udp/udp.h"

int udp_srq_create(struct soft_wire *w, const struct soft_wire_srq_init *init,
                   struct soft_wire_srq **out, uint32_t *srqn, char *why, size_t len)
{
    if (init->cap < 1 || init->cap > SOFT_MAX_QP_WR)
        return err_set(why, len, EINVAL, "SRQ size %u out of 1..%d", init->cap, SOFT_MAX_QP_WR);
    struct soft_wire_srq *s = calloc(1, sizeof *s);
    if (s)
        s->rq = calloc(init->cap, sizeof *s->rq);
    if (!s || !s->rq) {
        free(s);
        return err_set(why, len, ENOMEM, "out of memory");
    }
    s->w = w;
    s->cookie = init->cookie;
    s->cap = init->cap;
    udp_ep_lock(w->ep);
    s->srqn = ++w->srq_gen & 0xffffff;
    s->next = w->srqs;
    w->srqs = s;
    udp_ep_unlock(w->ep);
    *srqn = s->srqn;
    *out = s;
    return 0;
}

void udp_srq_destroy(struct soft_wire_srq *s)
{
    struct soft_wire *w = s->w;
    udp_ep_lock(w->ep);
    for (struct soft_wire_srq **pp = &w->srqs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    udp_ep_unlock(w->ep);
    free(s->rq);
    free(s);
}

void udp_srq_post(struct soft_wire_srq *s, uint64_t index, const struct soft_wire_recv *r)
{
    udp_ep_lock(s->w->ep);
    struct udp_rwqe *e = &s->rq[index % s->cap];
    e->num_sge = r->num_sge;
    e->total = r->total;
    memcpy(e->sge, r->sge, (size_t)r->num_sge * sizeof e->sge[0]);
    e->done = false;
    s->prod = index + 1;
    udp_ep_unlock(s->w->ep);
}

/* Fewer than the limit waiting: disarmed, an event due. */
static void check_limit(struct soft_wire_srq *s)
{
    if (s->limit && s->prod - s->taken < s->limit) {
        s->limit = 0;
        s->limit_hit = true;
        udp_event_signal(s->w);
    }
}

void udp_srq_arm(struct soft_wire_srq *s, uint32_t limit)
{
    udp_ep_lock(s->w->ep);
    s->limit = limit;
    s->limit_hit = false;
    check_limit(s);             /* armed when already below: at once */
    udp_ep_unlock(s->w->ep);
}

int udp_srq_done(struct soft_wire_srq *s, uint64_t index, struct soft_result *r)
{
    udp_ep_lock(s->w->ep);
    struct udp_rwqe *e = &s->rq[index % s->cap];
    int got = 0;
    if (index < s->prod && e->done) {
        *r = e->res;
        e->done = false;
        got = 1;
    }
    udp_ep_unlock(s->w->ep);
    return got;
}

int udp_srq_events(struct soft_wire *w, struct soft_wire_event *ev, int max)
{
    int n = 0;
    for (struct soft_wire_srq *s = w->srqs; s && n < max; s = s->next)
        if (s->limit_hit) {
            s->limit_hit = false;
            ev[n++] = (struct soft_wire_event){.cookie = s->cookie, .kind = SOFT_WIRE_SRQ_LIMIT};
        }
    return n;
}

/* ---- the responder's receives ------------------------------------------------------- */

bool udp_recv_ready(const struct soft_wire_qp *q)
{
    if (q->srq)
        return q->srq_held || q->srq->taken < q->srq->prod;
    return q->rq_next < q->rq_prod;
}

struct udp_rwqe *udp_recv_cur(struct soft_wire_qp *q)
{
    struct soft_wire_srq *s = q->srq;
    if (!s)
        return q->rq_next < q->rq_prod ? &q->rq[q->rq_next % q->rq_cap] : NULL;
    if (!q->srq_held) {
        if (s->taken >= s->prod)
            return NULL;
        q->srq_idx = s->taken++;
        q->srq_held = true;
        check_limit(s);
    }
    return &s->rq[q->srq_idx % s->cap];
}

void udp_recv_end(struct soft_wire_qp *q, const struct soft_result *res)
{
    struct udp_rwqe *r;
    if (q->srq) {
        if (!q->srq_held)
            return;
        r = &q->srq->rq[q->srq_idx % q->srq->cap];
        q->srq_held = false;
    } else {
        r = &q->rq[q->rq_next++ % q->rq_cap];
    }
    r->res = *res;
    if (q->srq)
        r->res.qp_num = q->qpn;
    r->done = true;
    q->wake = true;
    udp_cq_signal(q->recv_cq);
}

void udp_srq_release(struct soft_wire_qp *q, bool destroyed)
{
    if (!q->srq || !q->srq_held)
        return;
    if (destroyed && q->srq_idx + 1 == q->srq->taken) {
        q->srq->taken--;        /* nothing claimed after it: back in the ring */
        q->srq_held = false;
        return;
    }
    struct soft_result res = {.stamp = soft_stamp(), .status = IBV_WC_WR_FLUSH_ERR,
                              .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_FLUSH};
    udp_recv_end(q, &res);
}
