/* async.c - asynchronous events: ibv_get_async_event and its ack.
 *
 * A context's async_fd is an eventfd, so callers can poll or epoll it like
 * the kernel's: it is never written today, because the events libibverbs
 * delivers (port state changes, a QP or CQ in error, an SRQ limit, the
 * last WQE reached) are noticed by the device, and the soft device has no
 * way yet to tell the binding of them. ibv_get_async_event therefore
 * blocks, as on a device where nothing happens, or gives EAGAIN on a
 * non-blocking fd. Acks count the events back, as libibverbs does, so the
 * destroy calls' waits stay right when events arrive. */
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "verbs_lib.h"

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
    (void)event;
    uint64_t v;
    ssize_t n;
    do
        n = read(context->async_fd, &v, sizeof v);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    /* nothing writes it yet (see above): a wake-up without an event */
    errno = EAGAIN;
    return -1;
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
    default:
        break;                  /* device, port and SRQ events: nothing to count here */
    }
}
