/* tcp_link.c - the plain TCP link: the same send/recv/flush API over the
 * bootstrap socket itself. It is the fallback when either side has no RDMA
 * (all-zero caps), and an anchor to compare the RDMA links against.
 *
 * Small sends coalesce in a buffer that flush() (or a full buffer) writes
 * out; a large send with an empty buffer goes straight to the socket. The
 * peer closing (or dying: the kernel closes its socket) reads as EOF. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/link.h"
#include "util/util.h"

#define TCP_COALESCE (64 * 1024)

static int tcp_write_out(tbrt_link *l)
{
    size_t off = 0;
    while (off < l->tcp_len) {
        ssize_t n = send(l->fd, l->tcp_buf + off, l->tcp_len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        int e = n < 0 ? errno : EIO;
        if (e == EPIPE || e == ECONNRESET)
            l->peer_dead = true;
        return link_fail(l, e == EPIPE ? ECONNRESET : e, "send: %s%s", strerror(e),
                         e == EPIPE || e == ECONNRESET ? " (peer closed the connection)" : "");
    }
    memmove(l->tcp_buf, l->tcp_buf + off, l->tcp_len - off);
    l->tcp_len -= off;
    return l->tcp_len ? -EAGAIN : 0;
}

static intptr_t tcp_send(tbrt_link *l, const void *buf, size_t len)
{
    if (l->tcp_len) {
        int rc = tcp_write_out(l);
        if (rc && rc != -EAGAIN)
            return rc;
    }
    if (l->tcp_len == 0 && len >= TCP_COALESCE) {
        ssize_t n = send(l->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            l->stats.bytes_sent += (size_t)n;
            l->stats.frames_sent++;
            return n;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            int e = errno;
            l->peer_dead = e == EPIPE || e == ECONNRESET;
            return link_fail(l, l->peer_dead ? ECONNRESET : e, "send: %s%s", strerror(e),
                             l->peer_dead ? " (peer closed the connection)" : "");
        }
        return -EAGAIN;
    }
    size_t room = l->tcp_cap - l->tcp_len;
    size_t n = TBRT_MIN(room, len);
    if (n == 0)
        return -EAGAIN;
    memcpy(l->tcp_buf + l->tcp_len, buf, n);
    l->tcp_len += n;
    l->stats.bytes_sent += n;
    if (l->tcp_len == l->tcp_cap) {
        int rc = tcp_write_out(l);
        if (rc && rc != -EAGAIN)
            return rc;
    }
    return (intptr_t)n;
}

static int tcp_flush(tbrt_link *l)
{
    if (!l->tcp_len)
        return 0;
    l->stats.frames_sent++;
    return tcp_write_out(l);
}

static intptr_t tcp_recv(tbrt_link *l, void *buf, size_t len)
{
    for (;;) {
        ssize_t n = recv(l->fd, buf, len, MSG_DONTWAIT);
        if (n > 0) {
            l->stats.bytes_recv += (size_t)n;
            l->stats.frames_recv++;
            return n;
        }
        if (n == 0) {
            l->tcp_eof = true;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -EAGAIN;
        int e = errno;
        l->peer_dead = true;
        return link_fail(l, e, "recv: %s (peer gone)", strerror(e));
    }
}

static int tcp_progress(tbrt_link *l)
{
    if (l->tcp_len) {
        int rc = tcp_write_out(l);
        if (rc && rc != -EAGAIN)
            return rc;
    }
    return 0;
}

/* Bytes readable right now; EOF and errors show as "readable" so recv runs
 * and reports them. */
static size_t tcp_readable(tbrt_link *l)
{
    if (l->tcp_eof)
        return 0;
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 ? 1 : 0;
}

static int tcp_arm(tbrt_link *l)
{
    return tcp_readable(l) ? 1 : 0;
}

static int tcp_fds(tbrt_link *l, int *fds, int max)
{
    if (max < 1)
        return 0;
    fds[0] = l->fd;
    return 1;
}

static bool tcp_writable(tbrt_link *l)
{
    if (l->tcp_len < l->tcp_cap)
        return true;
    struct pollfd p = {.fd = l->fd, .events = POLLOUT};
    return poll(&p, 1, 0) > 0;
}

static bool tcp_idle(tbrt_link *l) { return l->tcp_len == 0; }

static int tcp_activate(tbrt_link *l, const tbrt_caps *peer)
{
    (void)l;
    (void)peer;
    return 0;
}

static void tcp_teardown(tbrt_link *l)
{
    free(l->tcp_buf);
    l->tcp_buf = NULL;
    l->tcp_len = l->tcp_cap = 0;
    link_log_teardown(l, "tcp");
}

const struct link_transport link_tcp = {
    .name = "tcp",
    .send = tcp_send,
    .recv = tcp_recv,
    .flush = tcp_flush,
    .progress = tcp_progress,
    .activate = tcp_activate,
    .arm = tcp_arm,
    .fds = tcp_fds,
    .writable = tcp_writable,
    .readable = tcp_readable,
    .idle = tcp_idle,
    .teardown = tcp_teardown,
};

int link_tcp_setup(tbrt_link *l, char *err, size_t errlen)
{
    l->tcp_buf = malloc(TCP_COALESCE);
    if (!l->tcp_buf)
        return err_set(err, errlen, ENOMEM, "link %d: probe: out of memory", l->id);
    l->tcp_cap = TCP_COALESCE;
    l->tcp_len = 0;
    l->t = &link_tcp;
    l->flavor = 0;
    return 0;
}
