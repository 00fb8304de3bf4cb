/* cm_service.c - the thread that does what the kernel's CM does for
 * librdmacm: it watches every CM socket (listeners, connections being made,
 * connections) with epoll, accepts, reads the peers' messages and hands
 * them to cm_conn.c, and gives up on connects that take too long.
 *
 * It starts with the first socket to watch and lives as long as the
 * process. Sockets are registered by the id's serial number, not its
 * address: an id destroyed while an event for it is in flight is simply
 * not found. Everything it does to ids is under cm_lock. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cm.h"

#define CM_TICK_MS 100          /* how often connect deadlines are looked at */

static int epfd = -1;
static pthread_t thread;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static struct cm_id *find(uint64_t serial)
{
    for (struct cm_id *id = cm_first_id(); id; id = id->next_all)
        if (id->serial == serial)
            return id;
    return NULL;
}

static void on_listener(struct cm_id *l)
{
    for (;;) {
        int s = accept4(l->sock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s < 0)
            return;             /* EAGAIN: no more for now */
        cm_incoming(l, s);
    }
}

/* Read what there is, handle each complete message. The id may change
 * state (or lose its socket) in between: look again each time. */
static void on_readable(struct cm_id *id)
{
    char why[160];
    while (id->sock >= 0) {
        size_t room = sizeof id->rx.buf - id->rx.have;
        ssize_t n = room ? recv(id->sock, id->rx.buf + id->rx.have, room, 0) : 0;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 && room) {
            cm_conn_lost(id, n == 0 ? ECONNRESET : errno, n == 0 ? "the peer closed it"
                                                                 : "read error");
            return;
        }
        id->rx.have += (size_t)n;
        for (;;) {
            long len = cm_complete(&id->rx, why, sizeof why);
            if (len < 0) {
                cm_conn_lost(id, EPROTO, why);
                return;
            }
            if (len == 0)
                break;
            enum cm_type type;
            struct cm_conn_info info;
            uint8_t reason;
            uint8_t msg[CM_MSG_MAX];
            memcpy(msg, id->rx.buf, (size_t)len);
            memmove(id->rx.buf, id->rx.buf + len, id->rx.have - (size_t)len);
            id->rx.have -= (size_t)len;
            if (cm_decode(msg, (size_t)len, &type, &info, &reason, why, sizeof why) != 0) {
                cm_conn_lost(id, EPROTO, why);
                return;
            }
            cm_handle(id, type, &info, reason);
            if (id->sock < 0)
                return;
        }
    }
}

/* Connects that take too long fail; connections that never send their
 * REQ are closed (nobody holds them). */
static void expire(void)
{
    uint64_t now = now_ns();
    for (struct cm_id *id = cm_first_id(), *next; id; id = next) {
        next = id->next_all;
        if (id->state == CS_CONNECTING && now > id->connect_deadline_ns)
            cm_conn_lost(id, ETIMEDOUT, "the TCP connect took too long");
        else if (id->listener && !id->reported && id->state == CS_IDLE &&
                 now > id->connect_deadline_ns) {
            cm_say("rdma_listen", ETIMEDOUT, "a connection sent no request within %d ms",
                   CM_CONNECT_TIMEOUT_MS);
            cm_free_id(id);
        }
    }
}

static void *service(void *arg)
{
    (void)arg;
    struct epoll_event ev[16];
    for (;;) {
        int n = epoll_wait(epfd, ev, 16, CM_TICK_MS);
        pthread_mutex_lock(&cm_lock);
        for (int i = 0; i < n; i++) {
            struct cm_id *id = find(ev[i].data.u64);
            if (!id || id->sock < 0)
                continue;
            if (id->state == CS_LISTEN) {
                on_listener(id);
            } else if (id->state == CS_CONNECTING) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(id->sock, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err || (ev[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
                    cm_connected(id, err);
            } else {
                on_readable(id);
                /* a connection that failed before its request: nobody knows it */
                if (id->listener && !id->reported && id->state == CS_ERROR)
                    cm_free_id(id);
            }
        }
        expire();
        pthread_mutex_unlock(&cm_lock);
    }
    return NULL;
}

/* cm_lock held */
int cm_service_watch(struct cm_id *id, bool writable)
{
    if (epfd < 0) {
        epfd = epoll_create1(EPOLL_CLOEXEC);
        if (epfd < 0)
            return -errno;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);   /* signals stay the program's */
        int rc = pthread_create(&thread, NULL, service, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc) {
            close(epfd);
            epfd = -1;
            return -rc;
        }
        pthread_detach(thread);
    }
    struct epoll_event ev = {.events = writable ? EPOLLOUT : EPOLLIN, .data.u64 = id->serial};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, id->sock, &ev) == 0)
        return 0;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, id->sock, &ev) == 0 ? 0 : -errno;
}

void cm_service_forget(struct cm_id *id)
{
    if (epfd >= 0 && id->sock >= 0)
        epoll_ctl(epfd, EPOLL_CTL_DEL, id->sock, NULL);
}
