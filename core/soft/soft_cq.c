/* soft_cq.c - completion queues of the soft device.
 *
 * A CQ is a ring in process memory that only its owner writes: finished
 * work is reported by the wire as results, and the owner turns them into
 * completions when it polls (soft_reap.c). A ring that fills up before the
 * user polls overruns, as on hardware. Completions the owner makes itself
 * (flushes) wake an armed CQ as a wire's results do (soft_cq_wake). The
 * completion fd and its arming are the wire's (for shm a socket in the user's private directory that a peer
 * leaving a result for an armed CQ writes one byte to). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

int soft_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out)
{
    struct soft_dev *sd = soft_of(dev);
    if (cqe > SOFT_MAX_CQE)
        return dev_fail(dev, EINVAL, "create_cq: %d entries exceeds max_cqe %d", cqe, SOFT_MAX_CQE);
    uint32_t cap = 1;
    while (cap < (uint32_t)cqe)
        cap <<= 1;
    struct soft_cq *c = calloc(1, sizeof *c);
    struct ibv_wc *ring = calloc(cap, sizeof *ring);
    uint64_t *stamps = calloc(cap, sizeof *stamps);
    if (!c || !ring || !stamps) {
        free(c);
        free(ring);
        free(stamps);
        return dev_fail(dev, ENOMEM, "create_cq: out of memory");
    }
    char why[TBRT_WHY_MAX];
    int fd = -1;
    int rc = sd->wops->cq_create(sd->wire, &c->wcq, &fd, why, sizeof why);
    if (rc) {
        free(c);
        free(ring);
        free(stamps);
        return dev_fail(dev, -rc, "create_cq: %s", why);
    }
    c->cap = cap;
    c->ring = ring;
    c->stamps = stamps;
    c->cq = (tbrt_cq){.dev = dev, .cqe = (int)cap, .fd = fd};
    c->next = sd->cqs;
    sd->cqs = c;
    *out = &c->cq;
    return 0;
}

int soft_destroy_cq(tbrt_cq *cq)
{
    struct soft_cq *c = (struct soft_cq *)cq;
    struct soft_dev *sd = soft_of(cq->dev);
    for (struct soft_qp *q = sd->qps; q; q = q->next)
        if (q->qp.send_cq == cq || q->qp.recv_cq == cq)
            return dev_fail(cq->dev, EBUSY, "destroy_cq: QP 0x%x still uses it", q->qp.qp_num);
    for (struct soft_cq **pp = &sd->cqs; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    sd->wops->cq_destroy(c->wcq);
    soft_event_forget(sd, c);
    free(c->ring);
    free(c->stamps);
    free(c);
    return 0;
}

bool soft_cq_add(struct soft_cq *c, const struct ibv_wc *wc, uint64_t stamp)
{
    if (TBRT_UNLIKELY(c->tail - c->head >= c->cap)) {
        if (!c->overrun)
            soft_event_push(soft_of(c->cq.dev), IBV_EVENT_CQ_ERR, c, 0);
        c->overrun = true;
        return false;
    }
    c->stamps[c->tail & (c->cap - 1)] = stamp;
    c->ring[c->tail++ & (c->cap - 1)] = *wc;
    return true;
}

static int poll(tbrt_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts_ns)
{
    struct soft_cq *c = (struct soft_cq *)cq;
    struct soft_dev *sd = soft_of(cq->dev);
    soft_progress_if_needed(sd);
    soft_reap_cq(sd, c);
    if (TBRT_UNLIKELY(c->overrun))
        return dev_fail(cq->dev, EOVERFLOW,
                        "poll_cq: completion queue overrun (more than %u completions outstanding)",
                        c->cap);
    int i = 0;
    for (; i < n && c->head != c->tail; i++) {
        if (ts_ns) {
            /* the CQ's stamps come in order; each is placed against a
             * fresh read of the clock, which an interrupt between its two
             * reads can put tens of ns late: as on a NIC, a CQ's
             * timestamps never go back */
            uint64_t t = soft_stamp_ns(c->stamps[c->head & (c->cap - 1)]);
            ts_ns[i] = c->last_ns = t > c->last_ns ? t : c->last_ns;
        }
        wc[i] = c->ring[c->head++ & (c->cap - 1)];
    }
    return i;
}

int soft_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc) { return poll(cq, n, wc, NULL); }

int soft_poll_cq_ts(tbrt_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts_ns)
{
    return poll(cq, n, wc, ts_ns);
}

int soft_req_notify_cq(tbrt_cq *cq)
{
    struct soft_dev *sd = soft_of(cq->dev);
    sd->wops->cq_arm(((struct soft_cq *)cq)->wcq);
    return 0;
}

void soft_cq_wake(struct soft_cq *c)
{
    const struct soft_wire_ops *o = soft_of(c->cq.dev)->wops;
    if (o->cq_wake)
        o->cq_wake(c->wcq);
}

int soft_ack_cq_events(tbrt_cq *cq)
{
    struct soft_dev *sd = soft_of(cq->dev);
    return sd->wops->cq_ack(((struct soft_cq *)cq)->wcq);
}
