/* cq.c - completion channels and completion queues (basic and extended),
 * and the completion events between them.
 *
 * A channel's fd is an epoll set over the soft completion fds of its CQs:
 * a soft CQ's fd turns readable after an armed completion, so the channel
 * turns readable when any CQ of it has an event, and a caller may poll()
 * or epoll the channel fd as it would a kernel one. ibv_get_cq_event takes
 * one event (draining that CQ's fd); ibv_ack_cq_events counts them back,
 * and ibv_destroy_cq waits, bounded, until every event it got was acked,
 * as libibverbs requires. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "verbs_lib.h"

/* How long ibv_destroy_cq waits for the caller to ack its events. */
#define VB_ACK_WAIT_S 2

struct vb_channel {
    struct ibv_comp_channel ibv;
    pthread_mutex_t lock;
    struct vb_cq *any;          /* a CQ of the channel, to give the device turns */
};

/* ---- channels ------------------------------------------------------------------ */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    VB_INJECT_NULL("ibv_create_comp_channel");
    struct vb_channel *ch = calloc(1, sizeof *ch);
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ibv.context = context;
    if (vb_inject("comp_channel_fd")) {
        ch->ibv.fd = -1;        /* a broken channel, for callers' error checks */
        pthread_mutex_init(&ch->lock, NULL);
        return &ch->ibv;
    }
    ch->ibv.fd = epoll_create1(EPOLL_CLOEXEC);
    if (ch->ibv.fd < 0) {
        int e = errno;
        free(ch);
        errno = e;
        return NULL;
    }
    pthread_mutex_init(&ch->lock, NULL);
    vb_trace("ibv_create_comp_channel");
    return &ch->ibv;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    VB_INJECT_INT("ibv_destroy_comp_channel");
    struct vb_channel *ch = (struct vb_channel *)channel;
    pthread_mutex_lock(&ch->lock);
    int busy = channel->refcnt;
    pthread_mutex_unlock(&ch->lock);
    if (busy) {
        vb_say("ibv_destroy_comp_channel", EBUSY, "%d completion queue%s still use it", busy,
               busy == 1 ? "" : "s");
        return EBUSY;
    }
    vb_trace("ibv_destroy_comp_channel");
    if (channel->fd >= 0)
        close(channel->fd);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
    return 0;
}

/* ---- completion queues ---------------------------------------------------------- */

static struct vb_cq *cq_new(struct ibv_context *context, int cqe, void *cq_context,
                            struct ibv_comp_channel *channel, int comp_vector, const char *call)
{
    struct vb_ctx *c = vb_ctx_of(context);
    if (comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
        vb_say(call, EINVAL, "comp_vector %d: the device has %d", comp_vector,
               context->num_comp_vectors);
        errno = EINVAL;
        return NULL;
    }
    if (cqe < 1 || cqe > c->attr.max_cqe) {
        vb_say(call, EINVAL, "%d entries: 1..%d", cqe, c->attr.max_cqe);
        errno = EINVAL;
        return NULL;
    }
    struct vb_cq *q = calloc(1, sizeof *q);
    if (!q) {
        errno = ENOMEM;
        return NULL;
    }
    vb_lock(c);
    int rc = tbrt_cq_create(c->dev, cqe, &q->t);
    int err = rc ? vb_failed(call, rc, c->dev) : 0;
    if (!err)
        q->t->user = q;
    vb_unlock(c);
    if (err) {
        free(q);
        errno = err;
        return NULL;
    }
    if (channel) {
        struct vb_channel *ch = (struct vb_channel *)channel;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = q};
        if (epoll_ctl(channel->fd, EPOLL_CTL_ADD, q->t->fd, &ev) != 0) {
            err = errno;
            vb_say(call, err, "completion channel fd %d: %s", channel->fd, strerror(err));
            vb_lock(c);
            tbrt_cq_destroy(q->t);
            vb_unlock(c);
            free(q);
            errno = err;
            return NULL;
        }
        pthread_mutex_lock(&ch->lock);
        channel->refcnt++;
        ch->any = q;
        pthread_mutex_unlock(&ch->lock);
    }
    struct ibv_cq_ex *x = &q->ibv;
    x->context = context;
    x->channel = channel;
    x->cq_context = cq_context;
    x->cqe = q->t->cqe;
    x->handle = (uint32_t)q->t->fd;
    pthread_mutex_init(&x->mutex, NULL);
    pthread_cond_init(&x->cond, NULL);
    return q;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
    VB_INJECT_NULL("ibv_create_cq");
    struct vb_cq *q = cq_new(context, cqe, cq_context, channel, comp_vector, "ibv_create_cq");
    if (!q)
        return NULL;
    vb_trace("ibv_create_cq");
    return ibv_cq_ex_to_cq(&q->ibv);
}

/* What ibv_create_cq_ex may ask for: the standard fields, and the
 * timestamps of when the device made each completion (cq_ex.c). */
#define VB_CQ_EX_FLAGS                                                                         \
    (IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |                             \
     IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)

struct ibv_cq_ex *vb_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
    VB_INJECT_NULL("ibv_create_cq_ex");
    if (attr->wc_flags & ~(uint64_t)VB_CQ_EX_FLAGS) {
        vb_unsupported("ibv_create_cq_ex", "wc_flags 0x%llx: the soft device's completions have "
                       "no CVLAN, flow tag or tag matching fields",
                       (unsigned long long)(attr->wc_flags & ~(uint64_t)VB_CQ_EX_FLAGS));
        return NULL;
    }
    if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
        vb_say("ibv_create_cq_ex", EINVAL, "comp_mask 0x%x has unknown bits", attr->comp_mask);
        errno = EINVAL;
        return NULL;
    }
    if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
        vb_unsupported("ibv_create_cq_ex", "a parent domain (IBV_CQ_INIT_ATTR_MASK_PD): the "
                       "binding has no thread or parent domains");
        return NULL;
    }
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
        (attr->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)) {
        vb_unsupported("ibv_create_cq_ex", "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: the soft device "
                       "always reports an overrun");
        return NULL;
    }
    if (attr->cqe > INT32_MAX) {
        errno = EINVAL;
        return NULL;
    }
    struct vb_cq *q = cq_new(context, (int)attr->cqe, attr->cq_context, attr->channel,
                             (int)attr->comp_vector, "ibv_create_cq_ex");
    if (!q)
        return NULL;
    vb_cq_ex_init(q, attr->wc_flags);
    vb_trace("ibv_create_cq_ex");
    return &q->ibv;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    (void)cqe;
    (void)cq;
    return vb_unsupported("ibv_resize_cq", "the soft device's completion rings are fixed at "
                          "creation (its capacity is ibv_cq.cqe)");
}

/* Every event ibv_get_cq_event gave must be acked first (bounded wait). */
static int wait_acked(struct ibv_cq *cq)
{
    struct vb_cq *q = vb_cq_of(cq);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += VB_ACK_WAIT_S;
    int rc = 0;
    pthread_mutex_lock(&cq->mutex);
    while (cq->comp_events_completed != q->events_got && rc == 0)
        rc = pthread_cond_timedwait(&cq->cond, &cq->mutex, &until);
    uint32_t missing = q->events_got - cq->comp_events_completed;
    pthread_mutex_unlock(&cq->mutex);
    if (missing) {
        vb_say("ibv_destroy_cq", EBUSY, "%u completion event%s from ibv_get_cq_event never "
               "acked (ibv_ack_cq_events) within %d s", missing, missing == 1 ? "" : "s",
               VB_ACK_WAIT_S);
        return EBUSY;
    }
    return 0;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
    VB_INJECT_INT("ibv_destroy_cq");
    struct vb_cq *q = vb_cq_of(cq);
    struct vb_ctx *c = vb_ctx_of(cq->context);
    int err = wait_acked(cq);
    if (!err)
        err = vb_wait_event_acks(&cq->mutex, &cq->cond, &cq->async_events_completed,
                                 &q->async_got, "ibv_destroy_cq");
    if (err)
        return err;
    int fd = q->t->fd;
    struct vb_channel *ch = (struct vb_channel *)cq->channel;
    if (ch) {
        /* no waiter may nudge the device through it from here on */
        pthread_mutex_lock(&ch->lock);
        if (ch->any == q)
            ch->any = NULL;
        pthread_mutex_unlock(&ch->lock);
        epoll_ctl(ch->ibv.fd, EPOLL_CTL_DEL, fd, NULL);
    }
    vb_lock(c);
    int rc = tbrt_cq_destroy(q->t);
    err = rc ? vb_failed("ibv_destroy_cq", rc, c->dev) : 0;
    vb_unlock(c);
    if (err) {
        if (ch) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = q};
            epoll_ctl(ch->ibv.fd, EPOLL_CTL_ADD, fd, &ev);
        }
        return err;
    }
    if (ch) {
        pthread_mutex_lock(&ch->lock);
        ch->ibv.refcnt--;
        pthread_mutex_unlock(&ch->lock);
    }
    pthread_mutex_destroy(&cq->mutex);
    pthread_cond_destroy(&cq->cond);
    vb_trace("ibv_destroy_cq");
    free(q);
    return 0;
}

/* Give the device a turn through a CQ of the channel (a poll for nothing):
 * a process that only waits on the channel must still run its timers, such
 * as an RNR retry, which the soft device runs when its process calls in.
 * Skipped when another thread is in the device anyway. */
static void nudge(struct vb_channel *ch)
{
    struct ibv_wc none;
    pthread_mutex_lock(&ch->lock);
    struct vb_cq *q = ch->any;
    if (q) {
        struct vb_ctx *c = vb_ctx_of(q->ibv.context);
        if (pthread_mutex_trylock(&c->lock) == 0) {
            tbrt_cq_poll(q->t, 0, &none);
            vb_unlock(c);
        }
    }
    pthread_mutex_unlock(&ch->lock);
}

/* The slices a blocking wait sleeps in between the device's turns: short
 * at first (a retry timer is often close), longer while nothing happens. */
#define VB_SLICE_MIN_MS 1
#define VB_SLICE_MAX_MS 16

/* One event: the first CQ of the channel whose soft fd is readable, its
 * wake-up consumed. Blocks unless the channel fd is O_NONBLOCK. */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
    vb_count(VC_GET_EVENT);
    struct vb_channel *ch = (struct vb_channel *)channel;
    int fl = fcntl(channel->fd, F_GETFL);
    if (fl < 0)
        return -1;
    struct epoll_event ev;
    int slice = 0;
    for (;;) {
        int n = epoll_wait(channel->fd, &ev, 1, slice);
        if (n == 1)
            break;
        if (n < 0 && errno != EINTR)
            return -1;
        if (n == 0 && (fl & O_NONBLOCK)) {
            errno = EAGAIN;
            return -1;
        }
        nudge(ch);
        slice = slice ? (slice * 2 > VB_SLICE_MAX_MS ? VB_SLICE_MAX_MS : slice * 2)
                      : VB_SLICE_MIN_MS;
    }
    struct vb_cq *q = ev.data.ptr;
    tbrt_cq_ack(q->t);          /* drains its fd: no device state, no lock needed */
    pthread_mutex_lock(&q->ibv.mutex);
    q->events_got++;
    pthread_mutex_unlock(&q->ibv.mutex);
    *cq = ibv_cq_ex_to_cq(&q->ibv);
    *cq_context = q->ibv.cq_context;
    return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    vb_count(VC_ACK_EVENTS);
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_broadcast(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}
