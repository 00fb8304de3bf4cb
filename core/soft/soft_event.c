/* soft_event.c - asynchronous events of the soft device (libibverbs'
 * ibv_get_async_event): a bounded queue in process memory, filled
 *   - from the wire's progress: a QP a peer moved to ERR (QP_FATAL,
 *     QP_REQ_ERR, QP_ACCESS_ERR by the cause the wire gives), a QP that met
 *     a bad value (QP_FATAL), an SRQ's limit (SRQ_LIMIT_REACHED);
 *   - by the objects: COMM_EST (a receive completed in RTR), the last WQE
 *     of an SRQ's QP that went to ERR (QP_LAST_WQE_REACHED), a CQ overrun
 *     (CQ_ERR), an SRQ that met a bad value (SRQ_ERR);
 *   - from the ports: each look compares every port's state with the one
 *     last reported (PORT_ACTIVE, PORT_ERR); a port set by any process of
 *     the host wakes the fd (the wire's ports_changed).
 * The fd callers wait on is an epoll set over the wire's event fd and an
 * eventfd the objects write when they queue one; it is quiet again once
 * soft_get_event found nothing (drained, re-armed, looked once more). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/util.h"

int soft_events_open(struct soft_dev *sd)
{
    struct soft_events *e = &sd->ev;
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->epfd < 0 || e->efd < 0)
        return dev_fail(&sd->dev, errno, "event fd: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN};
    if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->efd, &ev) != 0)
        return dev_fail(&sd->dev, errno, "event fd: %s", strerror(errno));
    if (sd->wops->event_fd) {
        int wfd = sd->wops->event_fd(sd->wire);
        if (wfd >= 0 && epoll_ctl(e->epfd, EPOLL_CTL_ADD, wfd, &ev) != 0)
            return dev_fail(&sd->dev, errno, "event fd: %s", strerror(errno));
        sd->wops->event_arm(sd->wire);
    }
    for (int p = 0; p < sd->p->nports && p < SOFT_MAX_PORTS; p++)
        e->port_seen[p] = (uint8_t)soft_port_state(sd, p + 1);
    return 0;
}

void soft_events_close(struct soft_dev *sd)
{
    struct soft_events *e = &sd->ev;
    if (e->epfd > 0)
        close(e->epfd);
    if (e->efd > 0)
        close(e->efd);
    e->epfd = e->efd = -1;
}

void soft_event_push(struct soft_dev *sd, int type, void *obj, int port)
{
    struct soft_events *e = &sd->ev;
    if (e->tail - e->head >= SOFT_EVENTS) {
        e->head++;              /* the oldest makes room: bounded, and counted */
        e->lost++;
    }
    e->q[e->tail++ % SOFT_EVENTS] = (struct soft_event){.type = type, .obj = obj, .port = port};
    if (!e->efd_set && e->efd >= 0) {
        uint64_t one = 1;
        if (write(e->efd, &one, sizeof one) == (ssize_t)sizeof one)
            e->efd_set = true;
    }
}

void soft_event_forget(struct soft_dev *sd, void *obj)
{
    struct soft_events *e = &sd->ev;
    for (uint64_t i = e->head; i != e->tail; i++)
        if (e->q[i % SOFT_EVENTS].obj == obj)
            e->q[i % SOFT_EVENTS].type = -1;  /* skipped when taken */
}

int soft_event_fd(tbrt_dev *dev)
{
    return soft_of(dev)->ev.epfd;
}

/* Ports whose state changed since last reported. */
static void look_at_ports(struct soft_dev *sd)
{
    struct soft_events *e = &sd->ev;
    for (int p = 0; p < sd->p->nports && p < SOFT_MAX_PORTS; p++) {
        uint8_t now = (uint8_t)soft_port_state(sd, p + 1);
        if (now == e->port_seen[p])
            continue;
        bool was_up = e->port_seen[p] == IBV_PORT_ACTIVE;
        e->port_seen[p] = now;
        if (now == IBV_PORT_ACTIVE)
            soft_event_push(sd, IBV_EVENT_PORT_ACTIVE, NULL, p + 1);
        else if (was_up)
            soft_event_push(sd, IBV_EVENT_PORT_ERR, NULL, p + 1);
    }
}

static bool pop(struct soft_dev *sd, tbrt_event *out)
{
    struct soft_events *e = &sd->ev;
    while (e->head != e->tail) {
        struct soft_event ev = e->q[e->head++ % SOFT_EVENTS];
        if (ev.type < 0)
            continue;           /* its object went */
        memset(out, 0, sizeof *out);
        out->type = ev.type;
        out->port = ev.port;
        switch (ev.type) {
        case IBV_EVENT_CQ_ERR:
            out->cq = &((struct soft_cq *)ev.obj)->cq;
            break;
        case IBV_EVENT_SRQ_ERR:
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            out->srq = &((struct soft_srq *)ev.obj)->srq;
            out->num = out->srq->srq_num;
            break;
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
            break;
        default:
            out->qp = &((struct soft_qp *)ev.obj)->qp;
            out->num = out->qp->qp_num;
            break;
        }
        return true;
    }
    return false;
}

int soft_get_event(tbrt_dev *dev, tbrt_event *ev)
{
    struct soft_dev *sd = soft_of(dev);
    struct soft_events *e = &sd->ev;
    soft_progress(sd);
    look_at_ports(sd);
    if (pop(sd, ev))
        return 1;
    /* none: quiet the fd, arm the wire's, and look once more (an event may
     * have come between the look and the arm) */
    uint64_t v;
    if (e->efd_set && read(e->efd, &v, sizeof v) >= 0)
        e->efd_set = false;
    if (sd->wops->event_fd) {
        sd->wops->event_ack(sd->wire);
        sd->wops->event_arm(sd->wire);
    }
    soft_progress(sd);
    look_at_ports(sd);
    return pop(sd, ev) ? 1 : 0;
}
