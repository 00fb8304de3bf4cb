/* ibverbs_queue.c - completion queues, queue pairs and the data path of the
 * ibverbs device.
 *
 * Completion events: every CQ gets its own completion channel whose fd is
 * made non-blocking and becomes tbrt_cq.fd, so a caller can sleep on it in
 * poll() or on a libuv loop. Arming is ibv_req_notify_cq(cq, 0); the events
 * that made the fd readable are drained with ibv_get_cq_event (which then
 * returns EAGAIN instead of blocking) and acknowledged at once, so
 * ibv_destroy_cq never waits for an unacknowledged event.
 *
 * The data path calls the provider's table in the context, as verbs.h's
 * inline ibv_post_send/ibv_post_recv/ibv_poll_cq/ibv_req_notify_cq do:
 * there are no library symbols for them. A UD send names its destination
 * with wr.ud.ah = tbrt_ah_handle(ah), a tbrt object; the chain is copied
 * with the library's ibv_ah put in its place (other QP types pass through
 * untouched). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "ibverbs/ibverbs.h"
#include "util/util.h"

/* UD chains up to this long are translated on the stack. */
#define UD_CHAIN_ON_STACK 16

/* ---- completion queues ------------------------------------------------------------- */

int ib_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out)
{
    struct ib_dev *d = ib_of(dev);
    const struct ib_lib *L = d->lib;
    struct ib_cq *c = calloc(1, sizeof *c);
    if (!c)
        return dev_fail(dev, ENOMEM, "create_cq: out of memory");
    int e;
    errno = 0;
    c->channel = L->create_comp_channel(d->ctx);
    if (!c->channel) {
        e = ib_errno(0);
        free(c);
        return dev_fail(dev, e, "create_cq: ibv_create_comp_channel: %s", strerror(e));
    }
    int fd = c->channel->fd;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        e = errno;
        L->destroy_comp_channel(c->channel);
        free(c);
        return dev_fail(dev, e, "create_cq: completion channel fd %d: O_NONBLOCK: %s", fd,
                        strerror(e));
    }
    errno = 0;
    c->ibv = L->create_cq(d->ctx, cqe, c, c->channel, 0);
    if (!c->ibv) {
        e = ib_errno(0);
        L->destroy_comp_channel(c->channel);
        free(c);
        return dev_fail(dev, e, "create_cq (%d entries): %s", cqe, strerror(e));
    }
    c->cq = (tbrt_cq){.dev = dev, .cqe = c->ibv->cqe, .fd = c->channel->fd};
    c->next = d->cqs;
    d->cqs = c;
    *out = &c->cq;
    return 0;
}

int ib_destroy_cq(tbrt_cq *cq)
{
    struct ib_dev *d = ib_of(cq->dev);
    struct ib_cq *c = (struct ib_cq *)cq;
    ib_ack_cq_events(cq);       /* destroy waits for every event to be acked */
    int rc = d->lib->destroy_cq(c->ibv);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(cq->dev, e, "destroy_cq: %s%s", strerror(e),
                        e == EBUSY ? " (a QP still uses it)" : "");
    }
    rc = d->lib->destroy_comp_channel(c->channel);
    IB_UNLINK(d->cqs, c);
    free(c);
    if (rc) {
        /* the CQ is gone either way; only the channel leaked */
        int e = ib_errno(rc);
        return dev_fail(&d->dev, e, "destroy_cq: ibv_destroy_comp_channel: %s", strerror(e));
    }
    return 0;
}

int ib_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc)
{
    struct ibv_cq *c = ((struct ib_cq *)cq)->ibv;
    int got = c->context->ops.poll_cq(c, n, wc);
    if (TBRT_UNLIKELY(got < 0))
        return dev_fail(cq->dev, EIO, "poll_cq: the provider returned %d (CQ overrun or a "
                        "device error)", got);
    return got;
}

int ib_req_notify_cq(tbrt_cq *cq)
{
    struct ibv_cq *c = ((struct ib_cq *)cq)->ibv;
    int rc = c->context->ops.req_notify_cq(c, 0);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(cq->dev, e, "req_notify_cq: %s", strerror(e));
    }
    return 0;
}

int ib_ack_cq_events(tbrt_cq *cq)
{
    struct ib_dev *d = ib_of(cq->dev);
    struct ib_cq *c = (struct ib_cq *)cq;
    unsigned n = 0;
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    /* the fd is non-blocking: EAGAIN once the channel is empty; one CQ per
     * channel, so every event is this CQ's */
    while (d->lib->get_cq_event(c->channel, &ev_cq, &ev_ctx) == 0)
        n++;
    if (n)
        d->lib->ack_cq_events(c->ibv, n);
    return (int)n;
}

/* ---- queue pairs ---------------------------------------------------------------------- */

int ib_create_qp(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out)
{
    struct ib_dev *d = ib_of(pd->dev);
    struct ib_qp *q = calloc(1, sizeof *q);
    if (!q)
        return dev_fail(pd->dev, ENOMEM, "create_qp: out of memory");
    struct ibv_qp_init_attr a = {
        .qp_context = q,
        .send_cq = ((struct ib_cq *)init->send_cq)->ibv,
        .recv_cq = ((struct ib_cq *)init->recv_cq)->ibv,
        .cap = init->cap,
        .qp_type = (enum ibv_qp_type)init->qp_type,
        .sq_sig_all = init->sq_sig_all,
    };
    errno = 0;
    q->ibv = d->lib->create_qp(((struct ib_pd *)pd)->ibv, &a);
    if (!q->ibv) {
        int e = ib_errno(0);
        free(q);
        return dev_fail(pd->dev, e, "create_qp %s (send %u x %u sge, recv %u x %u sge): %s",
                        dev_qp_type_name(init->qp_type), init->cap.max_send_wr,
                        init->cap.max_send_sge, init->cap.max_recv_wr, init->cap.max_recv_sge,
                        strerror(e));
    }
    init->cap = a.cap;          /* what the provider granted */
    q->qp = (tbrt_qp){.dev = pd->dev, .pd = pd, .qp_num = q->ibv->qp_num,
                      .qp_type = init->qp_type, .state = IBV_QPS_RESET,
                      .send_cq = init->send_cq, .recv_cq = init->recv_cq, .cap = a.cap};
    q->next = d->qps;
    d->qps = q;
    *out = &q->qp;
    return 0;
}

int ib_modify_qp(tbrt_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    struct ib_dev *d = ib_of(qp->dev);
    int rc = d->lib->modify_qp(((struct ib_qp *)qp)->ibv, attr, mask);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(qp->dev, e, "modify_qp QP 0x%x %s -> %s (mask 0x%x): %s", qp->qp_num,
                        dev_qp_state_name(qp->state),
                        dev_qp_state_name((mask & IBV_QP_STATE) ? (int)attr->qp_state
                                                                : qp->state),
                        (unsigned)mask, strerror(e));
    }
    if (mask & IBV_QP_STATE)
        qp->state = (int)attr->qp_state;
    return 0;
}

int ib_destroy_qp(tbrt_qp *qp)
{
    struct ib_dev *d = ib_of(qp->dev);
    struct ib_qp *q = (struct ib_qp *)qp;
    int rc = d->lib->destroy_qp(q->ibv);
    if (rc) {
        int e = ib_errno(rc);
        return dev_fail(qp->dev, e, "destroy_qp QP 0x%x: %s", qp->qp_num, strerror(e));
    }
    IB_UNLINK(d->qps, q);
    free(q);
    return 0;
}

/* ---- the data path ----------------------------------------------------------------------- */

/* Post a UD chain with each tbrt address handle replaced by its ibv_ah. */
static int post_send_ud(tbrt_qp *qp, struct ibv_qp *iq, struct ibv_send_wr *wr,
                        struct ibv_send_wr **bad)
{
    size_t n = 0;
    for (struct ibv_send_wr *w = wr; w; w = w->next)
        n++;
    struct ibv_send_wr stack[UD_CHAIN_ON_STACK];
    struct ibv_send_wr *copy = n <= UD_CHAIN_ON_STACK ? stack : calloc(n, sizeof *copy);
    if (!copy) {
        *bad = wr;
        return dev_fail(qp->dev, ENOMEM, "post_send: out of memory for a %zu-WR UD chain", n);
    }
    size_t i = 0;
    int rc = 0;
    for (struct ibv_send_wr *w = wr; w; w = w->next, i++) {
        tbrt_ah *ah = (tbrt_ah *)w->wr.ud.ah;
        if (!ah || ah->dev != qp->dev) {
            *bad = w;
            rc = dev_fail(qp->dev, EINVAL, "post_send: UD work request %zu (wr_id %llu) has %s",
                          i, (unsigned long long)w->wr_id,
                          ah ? "an address handle of another device"
                             : "no address handle (wr.ud.ah = tbrt_ah_handle(ah))");
            goto out;
        }
        copy[i] = *w;
        copy[i].wr.ud.ah = ((struct ib_ah *)ah)->ibv;
        copy[i].next = i + 1 < n ? &copy[i + 1] : NULL;
    }
    struct ibv_send_wr *cbad = NULL;
    rc = iq->context->ops.post_send(iq, copy, &cbad);
    if (rc) {
        /* point at the caller's request, not our copy */
        struct ibv_send_wr *w = wr;
        for (struct ibv_send_wr *c = copy; c && c != cbad; c = c->next)
            w = w->next;
        *bad = w ? w : wr;
        int e = ib_errno(rc);
        rc = dev_fail(qp->dev, e, "post_send QP 0x%x (UD): %s", qp->qp_num, strerror(e));
    }
out:
    if (copy != stack)
        free(copy);
    return rc;
}

int ib_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct ibv_qp *iq = ((struct ib_qp *)qp)->ibv;
    if (qp->qp_type == IBV_QPT_UD)
        return post_send_ud(qp, iq, wr, bad);
    int rc = iq->context->ops.post_send(iq, wr, bad);
    if (TBRT_UNLIKELY(rc)) {
        int e = ib_errno(rc);
        return dev_fail(qp->dev, e, "post_send QP 0x%x in %s: %s", qp->qp_num,
                        dev_qp_state_name(qp->state), strerror(e));
    }
    return 0;
}

int ib_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct ibv_qp *iq = ((struct ib_qp *)qp)->ibv;
    int rc = iq->context->ops.post_recv(iq, wr, bad);
    if (TBRT_UNLIKELY(rc)) {
        int e = ib_errno(rc);
        return dev_fail(qp->dev, e, "post_recv QP 0x%x in %s: %s", qp->qp_num,
                        dev_qp_state_name(qp->state), strerror(e));
    }
    return 0;
}
