/* cm_events.c - event channels and their events: the queue, the eventfd
 * that counts it (so a channel fd polls like the kernel's), getting and
 * acking events, moving an id to another channel, the event names, and
 * the waits of synchronous ids (an id made without a channel). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cm.h"

pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cm_cond = PTHREAD_COND_INITIALIZER;

static bool debug_on(void)
{
    const char *d = getenv("TBRT_DEBUG");
    return d && *d && !(d[0] == '0' && !d[1]);
}

static void vsay(const char *call, int err, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "tbrt rdmacm: %s: %s: %s\n", call, strerror(err), msg);
}

void cm_say(const char *call, int err, const char *fmt, ...)
{
    if (!debug_on())
        return;
    va_list ap;
    va_start(ap, fmt);
    vsay(call, err, fmt, ap);
    va_end(ap);
}

int cm_fail(const char *call, int err, const char *fmt, ...)
{
    if (debug_on()) {
        va_list ap;
        va_start(ap, fmt);
        vsay(call, err, fmt, ap);
        va_end(ap);
    }
    errno = err;
    return -1;
}

/* ---- channels ------------------------------------------------------------------ */

struct cm_chan *cm_chan_new(bool sync)
{
    struct cm_chan *ch = calloc(1, sizeof *ch);
    if (!ch)
        return NULL;
    ch->pub.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (ch->pub.fd < 0) {
        free(ch);
        return NULL;
    }
    ch->sync = sync;
    return ch;
}

void cm_chan_free(struct cm_chan *ch)
{
    for (struct cm_event *e = ch->head, *n; e; e = n) {
        n = e->next;
        if (e->owner)
            e->owner->events_out--;
        free(e);
    }
    close(ch->pub.fd);
    free(ch);
}

/* Forget the events of id still queued on ch (never handed out by
 * rdma_get_cm_event), as librdmacm's destroy does with the kernel's: only
 * events the program was given wait for its ack. cm_lock held. */
void cm_chan_drop(struct cm_chan *ch, struct cm_id *id)
{
    struct cm_event **pp = &ch->head, *last = NULL;
    while (*pp) {
        struct cm_event *e = *pp;
        if (e->owner != id) {
            last = e;
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        /* its count on the fd (a reader that took the count meanwhile finds
         * no event and reads again) */
        uint64_t v;
        int fl = fcntl(ch->pub.fd, F_GETFL);
        fcntl(ch->pub.fd, F_SETFL, fl | O_NONBLOCK);
        if (read(ch->pub.fd, &v, sizeof v) < 0 && errno != EAGAIN)
            cm_say("rdma_destroy_id", errno, "event count of the channel");
        fcntl(ch->pub.fd, F_SETFL, fl);
        id->events_out--;
        free(e);
    }
    ch->tail = last;
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
    struct cm_chan *ch = cm_chan_new(false);
    if (!ch) {
        cm_fail("rdma_create_event_channel", errno ? errno : ENOMEM, "no eventfd");
        return NULL;
    }
    return &ch->pub;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    if (!channel)
        return;
    pthread_mutex_lock(&cm_lock);
    cm_chan_free((struct cm_chan *)channel);
    pthread_mutex_unlock(&cm_lock);
}

/* ---- events -------------------------------------------------------------------- */

struct cm_event *cm_event_new(struct cm_id *id, enum rdma_cm_event_type type, int status)
{
    struct cm_event *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->pub.id = &id->pub;
    e->pub.event = type;
    e->pub.status = status;
    e->owner = id;
    return e;
}

void cm_queue(struct cm_chan *ch, struct cm_event *e)
{
    if (!e)
        return;
    e->owner->events_out++;
    e->next = NULL;
    if (ch->tail)
        ch->tail->next = e;
    else
        ch->head = e;
    ch->tail = e;
    uint64_t one = 1;
    if (write(ch->pub.fd, &one, sizeof one) != sizeof one)
        cm_say("rdma_get_cm_event", errno, "cannot count an event on the channel");
}

/* Take the head event of ch; cm_lock held, its count already consumed. */
static struct cm_event *dequeue(struct cm_chan *ch)
{
    struct cm_event *e = ch->head;
    if (e) {
        ch->head = e->next;
        if (!ch->head)
            ch->tail = NULL;
        e->next = NULL;
    }
    return e;
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
    if (!channel || !event)
        return cm_fail("rdma_get_cm_event", EINVAL, "no channel or event pointer");
    struct cm_chan *ch = (struct cm_chan *)channel;
    for (;;) {
        uint64_t v;
        ssize_t n = read(channel->fd, &v, sizeof v);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;          /* EAGAIN on a non-blocking channel */
        pthread_mutex_lock(&cm_lock);
        struct cm_event *e = dequeue(ch);
        if (e && e->pub.event == RDMA_CM_EVENT_CONNECT_RESPONSE)
            cm_process_reply(e);  /* may turn it into ESTABLISHED */
        pthread_mutex_unlock(&cm_lock);
        if (!e)
            continue;           /* moved to another channel meanwhile */
        *event = &e->pub;
        return 0;
    }
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    if (!event)
        return cm_fail("rdma_ack_cm_event", EINVAL, "no event");
    struct cm_event *e = (struct cm_event *)event;
    pthread_mutex_lock(&cm_lock);
    if (e->owner)
        e->owner->events_out--;
    pthread_cond_broadcast(&cm_cond);
    pthread_mutex_unlock(&cm_lock);
    free(e);
    return 0;
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
    struct cm_id *c = cm_id_of(id);
    struct cm_chan *to = (struct cm_chan *)channel;
    if (!to)
        return cm_fail("rdma_migrate_id", EINVAL, "moving an id to no channel (synchronous "
                       "mode) is not supported");
    pthread_mutex_lock(&cm_lock);
    struct cm_chan *from = c->chan;
    if (from != to) {
        /* its queued events go along */
        struct cm_event **pp = &from->head, *last = NULL;
        while (*pp) {
            struct cm_event *e = *pp;
            if (e->owner == c) {
                *pp = e->next;
                uint64_t v;
                int fl = fcntl(from->pub.fd, F_GETFL);
                fcntl(from->pub.fd, F_SETFL, fl | O_NONBLOCK);
                if (read(from->pub.fd, &v, sizeof v) < 0)
                    cm_say("rdma_migrate_id", errno, "event count of the old channel");
                fcntl(from->pub.fd, F_SETFL, fl);
                c->events_out--;
                cm_queue(to, e);
            } else {
                last = e;
                pp = &e->next;
            }
        }
        from->tail = last;
        if (from->sync)
            cm_chan_free(from);
        c->chan = to;
        c->pub.channel = &to->pub;
    }
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

/* cm_lock held on entry and return. */
int cm_sync_wait(struct cm_id *id, enum rdma_cm_event_type want, int timeout_ms)
{
    struct cm_chan *ch = id->chan;
    pthread_mutex_unlock(&cm_lock);
    struct pollfd p = {.fd = ch->pub.fd, .events = POLLIN};
    int r;
    do
        r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    struct rdma_cm_event *ev = NULL;
    int got = -1, status = 0;
    if (r == 1 && rdma_get_cm_event(&ch->pub, &ev) == 0) {
        got = ev->event;
        status = ev->status;
        if (got == RDMA_CM_EVENT_CONNECT_REQUEST) {
            /* kept for rdma_get_request */
            pthread_mutex_lock(&cm_lock);
            id->pub.event = ev;
            return got;
        }
        rdma_ack_cm_event(ev);
    }
    pthread_mutex_lock(&cm_lock);
    if (r == 0) {
        errno = ETIMEDOUT;
        return -1;
    }
    if (got < 0)
        return -1;
    if (got != (int)want) {
        errno = status < 0 ? -status : ECONNREFUSED;
        return -1;
    }
    return got;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
    static const char *const names[] = {
        [RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
        [RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
        [RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
        [RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
        [RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
        [RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
        [RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
        [RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
        [RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
        [RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
        [RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
        [RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
        [RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
        [RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
        [RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
        [RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    };
    if ((unsigned)event < sizeof names / sizeof names[0] && names[event])
        return names[event];
    return "UNKNOWN EVENT";
}
