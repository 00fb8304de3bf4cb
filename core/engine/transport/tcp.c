/* tcp.c - the plain TCP transport (transport.h): the same send/recv/flush
 * API over the bootstrap socket itself. It is the fallback when either side has no RDMA
 * (all-zero caps), and an anchor to compare the RDMA links against.
 *
 * Small sends coalesce in a buffer that flush() (or a full buffer) writes
 * out; a large send with an empty buffer goes straight to the socket. The
 * peer closing (or dying: the kernel closes its socket) reads as EOF. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/transport/transport.h"
#include "util/debug.h"
#include "util/util.h"
#include "util/copy.h"

/* Sends of at least TCP_DIRECT bytes go straight to the socket when nothing
 * is coalescing; smaller ones (and send views) fill a TCP_COALESCE buffer,
 * written out when full or at flush. The buffer is larger than the
 * threshold so a stream of views writes in big pieces (pages are touched
 * only as far as it fills). */
#define TCP_DIRECT (64 * 1024)
#define TCP_COALESCE (256 * 1024)
/* A recv view's read buffer: one recv() of up to this much (the pages are
 * touched only as far as a read fills them). */
#define TCP_VIEW_READ (256 * 1024)

/* TBRT_DEBUG=3: one line per socket write or read that moved bytes. */
static void dbg_io(struct xport *x, const char *what, size_t n, size_t of, double *last)
{
    double t = now_s();
    dbg_line(x->link_id, "%s: %zu of %zu bytes (t=%.6f s, +%.1f us)", what, n, of, t - x->t0,
             *last > 0 ? (t - *last) * 1e6 : 0.0);
    *last = t;
}

static int tcp_write_out(struct xport *x)
{
    size_t off = 0;
    while (off < x->tcp_len) {
        ssize_t n = send(x->fd, x->tcp_buf + off, x->tcp_len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            if (DBG_ON(DBG_FRAME))
                dbg_io(x, "tcp write", (size_t)n, x->tcp_len - off, &x->dbg_last_out);
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        int e = n < 0 ? errno : EIO;
        if (e == EPIPE || e == ECONNRESET)
            x->peer_dead = true;
        return xport_fail(x, e == EPIPE ? ECONNRESET : e, "send: %s%s", strerror(e),
                         e == EPIPE || e == ECONNRESET ? " (peer closed the connection)" : "");
    }
    memmove(x->tcp_buf, x->tcp_buf + off, x->tcp_len - off);
    x->tcp_len -= off;
    return x->tcp_len ? -EAGAIN : 0;
}

static intptr_t tcp_send(struct xport *x, const void *buf, size_t len)
{
    if (x->tcp_len) {
        int rc = tcp_write_out(x);
        if (rc && rc != -EAGAIN)
            return rc;
    }
    if (x->tcp_len == 0 && len >= TCP_DIRECT) {
        ssize_t n = send(x->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            if (DBG_ON(DBG_FRAME))
                dbg_io(x, "tcp write (direct)", (size_t)n, len, &x->dbg_last_out);
            x->stats.bytes_sent += (size_t)n;
            x->stats.frames_sent++;
            return n;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            int e = errno;
            x->peer_dead = e == EPIPE || e == ECONNRESET;
            return xport_fail(x, x->peer_dead ? ECONNRESET : e, "send: %s%s", strerror(e),
                             x->peer_dead ? " (peer closed the connection)" : "");
        }
        return -EAGAIN;
    }
    size_t room = x->tcp_cap - x->tcp_len;
    size_t n = TBRT_MIN(room, len);
    if (n == 0)
        return -EAGAIN;
    bulk_copy(x->tcp_buf + x->tcp_len, buf, n);
    x->tcp_len += n;
    x->stats.bytes_sent += n;
    if (x->tcp_len == x->tcp_cap) {
        int rc = tcp_write_out(x);
        if (rc && rc != -EAGAIN)
            return rc;
    }
    return (intptr_t)n;
}

static int tcp_flush(struct xport *x)
{
    if (!x->tcp_len)
        return 0;
    x->stats.frames_sent++;
    return tcp_write_out(x);
}

static intptr_t tcp_recv(struct xport *x, void *buf, size_t len)
{
    if (x->tcp_roff < x->tcp_rlen) {
        /* bytes a recv view read and left: they come first */
        size_t n = TBRT_MIN(len, x->tcp_rlen - x->tcp_roff);
        bulk_copy(buf, x->tcp_rbuf + x->tcp_roff, n);
        x->tcp_roff += n;
        x->stats.bytes_recv += n;
        return (intptr_t)n;
    }
    for (;;) {
        ssize_t n = recv(x->fd, buf, len, MSG_DONTWAIT);
        if (n > 0) {
            if (DBG_ON(DBG_FRAME))
                dbg_io(x, "tcp read", (size_t)n, len, &x->dbg_last_in);
            x->stats.bytes_recv += (size_t)n;
            x->stats.frames_recv++;
            return n;
        }
        if (n == 0) {
            x->eof = true;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -EAGAIN;
        int e = errno;
        x->peer_dead = true;
        return xport_fail(x, e, "recv: %s (peer gone)", strerror(e));
    }
}

static int tcp_progress(struct xport *x)
{
    if (x->tcp_len) {
        int rc = tcp_write_out(x);
        if (rc && rc != -EAGAIN)
            return rc;
    }
    return 0;
}

/* Bytes readable right now; EOF and errors show as "readable" so recv runs
 * and reports them. */
static size_t tcp_readable(struct xport *x)
{
    if (x->tcp_roff < x->tcp_rlen)
        return x->tcp_rlen - x->tcp_roff;
    if (x->eof)
        return 0;
    struct pollfd p = {.fd = x->fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 ? 1 : 0;
}

static int tcp_arm(struct xport *x)
{
    return tcp_readable(x) ? 1 : 0;
}

static int tcp_fds(struct xport *x, int *fds, int max)
{
    if (max < 1)
        return 0;
    fds[0] = x->fd;
    return 1;
}

static bool tcp_writable(struct xport *x)
{
    if (x->tcp_len < x->tcp_cap)
        return true;
    struct pollfd p = {.fd = x->fd, .events = POLLOUT};
    return poll(&p, 1, 0) > 0;
}

static bool tcp_idle(struct xport *x) { return x->tcp_len == 0; }

static int tcp_inflight(struct xport *x) { return x->tcp_len ? 1 : 0; }

static int tcp_activate(struct xport *x, const tbrt_caps *peer)
{
    (void)x;
    (void)peer;
    return 0;
}

/* ---- views (engine/views.c) ------------------------------------------------------ */

/* The free end of the coalescing buffer; a full one is written out first. */
static intptr_t tcp_send_view(struct xport *x, size_t want, uint8_t **out)
{
    if (x->tcp_len == x->tcp_cap) {
        int rc = tcp_write_out(x);
        if (rc && rc != -EAGAIN)
            return rc;
        if (x->tcp_len == x->tcp_cap)
            return -EAGAIN;
    }
    size_t room = x->tcp_cap - x->tcp_len;
    *out = x->tcp_buf + x->tcp_len;
    return (intptr_t)(want && want < room ? want : room);
}

static int tcp_commit(struct xport *x, size_t n)
{
    x->tcp_len += n;
    x->stats.bytes_sent += n;
    if (x->tcp_len == x->tcp_cap) {
        int rc = tcp_write_out(x);
        if (rc && rc != -EAGAIN)
            return rc;
    }
    return 0;
}

/* What the read buffer holds, or one recv() into it: >0, 0 at EOF, -EAGAIN. */
static intptr_t tcp_recv_view(struct xport *x, const uint8_t **out)
{
    if (x->tcp_roff == x->tcp_rlen) {
        x->tcp_roff = x->tcp_rlen = 0;
        uint8_t *keep = x->tcp_rbuf;
        intptr_t n = tcp_recv(x, keep, x->tcp_rcap);
        if (n <= 0)
            return n;
        x->stats.bytes_recv -= (size_t)n;   /* counted when released */
        x->tcp_rlen = (size_t)n;
    }
    *out = x->tcp_rbuf + x->tcp_roff;
    return (intptr_t)(x->tcp_rlen - x->tcp_roff);
}

static int tcp_release(struct xport *x, size_t n)
{
    x->tcp_roff += TBRT_MIN(n, x->tcp_rlen - x->tcp_roff);
    x->stats.bytes_recv += n;
    return 0;
}

static void tcp_teardown(struct xport *x)
{
    /* mapped, not malloc'd: a view left open at close is mapped again at
     * the same place (engine/views.c) */
    if (x->tcp_buf)
        munmap(x->tcp_buf, x->tcp_cap);
    if (x->tcp_rbuf)
        munmap(x->tcp_rbuf, x->tcp_rcap);
    x->tcp_buf = x->tcp_rbuf = NULL;
    x->tcp_len = x->tcp_cap = 0;
    x->tcp_roff = x->tcp_rlen = x->tcp_rcap = 0;
    xport_log_teardown(x, "tcp");
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
    .inflight = tcp_inflight,
    .teardown = tcp_teardown,
    .send_view = tcp_send_view,
    .commit = tcp_commit,
    .recv_view = tcp_recv_view,
    .release = tcp_release,
};

int link_tcp_setup(struct xport *x, char *err, size_t errlen)
{
    x->tcp_buf = mmap(NULL, TCP_COALESCE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    x->tcp_rbuf = mmap(NULL, TCP_VIEW_READ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    x->tcp_cap = TCP_COALESCE;
    x->tcp_rcap = TCP_VIEW_READ;
    if (x->tcp_buf == MAP_FAILED || x->tcp_rbuf == MAP_FAILED) {
        x->tcp_buf = x->tcp_buf == MAP_FAILED ? NULL : x->tcp_buf;
        x->tcp_rbuf = x->tcp_rbuf == MAP_FAILED ? NULL : x->tcp_rbuf;
        tcp_teardown(x);
        return err_set(err, errlen, ENOMEM, "link %d: probe: out of memory", x->link_id);
    }
    x->tcp_len = x->tcp_roff = x->tcp_rlen = 0;
    x->flavor = 0;
    return 0;
}
