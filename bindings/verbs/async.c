/* async.c - asynchronous events: ibv_get_async_event and its ack.
 *
 * A context's async_fd is the device's event fd (tbrt_dev_event_fd): it
 * turns readable when the device may have an event (a port changed state,
 * from any process of the host; a peer moved a QP to ERR; an SRQ's limit;
 * a CQ overrun; COMM_EST; the last WQE of an SRQ's QP), so callers can poll
 * or epoll it as the kernel's. ibv_get_async_event takes the device's next
 * event with the context locked and maps its object to ours (the tbrt
 * objects carry a pointer back); blocking, it sleeps on the fd in bounded
 * slices (a port that comes back when its setter exits wakes no one), and
 * on an O_NONBLOCK fd it gives EAGAIN, as libibverbs does.
 *
 * Acks count the events back; ibv_destroy_qp / _cq / _srq wait (bounded)
 * until every event handed out for the object was acked, as libibverbs
 * requires of its callers. */
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "verbs_lib.h"

/* How long a destroy waits for the caller's acks. */
#define VB_EVENT_ACK_WAIT_S 2
/* The longest a blocking ibv_get_async_event sleeps before looking again. */
#define VB_ASYNC_SLICE_MS 100

int vb_wait_event_acks(pthread_mutex_t *m, pthread_cond_t *cond, const uint32_t *acked,
                       const uint32_t *got, const char *call)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += VB_EVENT_ACK_WAIT_S;
    int rc = 0;
    pthread_mutex_lock(m);
    while (*acked != *got && rc == 0)
        rc = pthread_cond_timedwait(cond, m, &until);
    uint32_t missing = *got - *acked;
    pthread_mutex_unlock(m);
    if (missing) {
        vb_say(call, EBUSY, "%u asynchronous event%s from ibv_get_async_event never acked "
               "(ibv_ack_async_event) within %d s", missing, missing == 1 ? "" : "s",
               VB_EVENT_ACK_WAIT_S);
        return EBUSY;
    }
    return 0;
}

static void count(pthread_mutex_t *m, uint32_t *got)
{
    pthread_mutex_lock(m);
    (*got)++;
    pthread_mutex_unlock(m);
}

/* The device's event as libibverbs' (the context locked: the objects it
 * names cannot go meanwhile); false when its object is not one of ours. */
static bool map(const tbrt_event *ev, struct ibv_async_event *out)
{
    out->event_type = ev->type;
    if (ev->qp) {
        struct vb_qp *q = ev->qp->user;
        if (!q)
            return false;
        out->element.qp = &q->ibv.qp_base;
        count(&q->ibv.qp_base.mutex, &q->events_got);
    } else if (ev->cq) {
        struct vb_cq *q = ev->cq->user;
        if (!q)
            return false;
        out->element.cq = ibv_cq_ex_to_cq(&q->ibv);
        count(&q->ibv.mutex, &q->async_got);
    } else if (ev->srq) {
        struct vb_srq *s = ev->srq->user;
        if (!s)
            return false;
        out->element.srq = &s->ibv;
        count(&s->ibv.mutex, &s->events_got);
    } else {
        out->element.port_num = ev->port;
    }
    return true;
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
    struct vb_ctx *c = vb_ctx_of(context);
    for (;;) {
        tbrt_event ev;
        vb_lock(c);
        int rc = tbrt_dev_event(c->dev, &ev);
        bool ours = rc == 1 && map(&ev, event);
        vb_unlock(c);
        if (rc < 0) {
            errno = vb_failed("ibv_get_async_event", rc, c->dev);
            return -1;
        }
        if (ours)
            return 0;
        if (rc == 1)
            continue;           /* an object made past the binding: not the caller's */
        int fl = fcntl(context->async_fd, F_GETFL);
        if (fl < 0)
            return -1;
        if (fl & O_NONBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        struct pollfd p = {.fd = context->async_fd, .events = POLLIN};
        if (poll(&p, 1, VB_ASYNC_SLICE_MS) < 0 && errno != EINTR)
            return -1;
    }
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
        struct ibv_cq *cq = event->element.cq;
        pthread_mutex_lock(&cq->mutex);
        cq->async_events_completed++;
        pthread_cond_broadcast(&cq->cond);
        pthread_mutex_unlock(&cq->mutex);
        break;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
        struct ibv_qp *qp = event->element.qp;
        pthread_mutex_lock(&qp->mutex);
        qp->events_completed++;
        pthread_cond_broadcast(&qp->cond);
        pthread_mutex_unlock(&qp->mutex);
        break;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
        struct ibv_srq *srq = event->element.srq;
        pthread_mutex_lock(&srq->mutex);
        srq->events_completed++;
        pthread_cond_broadcast(&srq->cond);
        pthread_mutex_unlock(&srq->mutex);
        break;
    }
    default:
        break;                  /* device and port events: nothing to count */
    }
}
