/* liveness.c - the bootstrap socket as the link's liveness anchor.
 *
 * UC never reports a dead peer, and even RC only notices when it has
 * something to send. Once a link is up nothing else crosses the bootstrap
 * socket, so anything that makes it readable means the end of the peer:
 * the goodbye byte (an orderly close), EOF (the process died: the kernel
 * closes its sockets), or an error.
 *
 * Two things are told apart, each with its own bound (tbrt.h):
 *   - peer gone (opts.liveness): its process died (EOF, at once), or its
 *     host stopped answering TCP: keepalive probes on an idle socket (set
 *     from the bound), and, while our bytes wait for an acknowledgement, no
 *     acknowledgement for the bound (TCP_INFO). The link breaks.
 *   - peer alive but not progressing (a stopped or busy process: its kernel
 *     still acknowledges and answers window probes): never "gone"; a send
 *     that moves nothing fails after opts.stall, or the call's timeout. The
 *     link stays usable.
 * TCP_USER_TIMEOUT is not set: it would also abort a connection whose
 * reader merely stopped reading (zero window probes answered) once the
 * bound passes, declaring a live but slow peer dead. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/link.h"
#include "util/util.h"

/* While spinning, look at the socket at most this often (seconds), and at
 * the port's state. */
#define LIVENESS_CHECK_EVERY 0.001
#define PORT_CHECK_EVERY 0.02
/* A tcp link's acknowledgements (TCP_INFO) are looked at this often. */
#define ACK_CHECK_EVERY 0.01

/* How long an idle socket's keepalive takes to give up (link_socket_setup). */
static int keepalive_secs(const tbrt_link *l)
{
    int secs = (int)ceil(l->opts.liveness);
    return secs < 3 ? 3 : secs;
}

int link_socket_setup(tbrt_link *l, char *err, size_t errlen)
{
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(l->x.fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
        return err_set(err, errlen, ENOTSOCK, "link %d: probe: fd %d is not a stream socket",
                       l->id, l->x.fd);
    struct sockaddr_storage peer;
    len = sizeof peer;
    if (getpeername(l->x.fd, (struct sockaddr *)&peer, &len) != 0)
        return err_set(err, errlen, ENOTCONN, "link %d: probe: the bootstrap socket is not "
                       "connected: %s", l->id, strerror(errno));
    int fl = fcntl(l->x.fd, F_GETFL);
    if (fl < 0 || fcntl(l->x.fd, F_SETFL, fl | O_NONBLOCK) != 0)
        return err_set(err, errlen, errno, "link %d: probe: O_NONBLOCK: %s", l->id, strerror(errno));
    int one = 1;
    setsockopt(l->x.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    link_keepalive_apply(l);
    /* a socket handed over with a user timeout of its own keeps none */
    unsigned ut = 0;
    setsockopt(l->x.fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut);
    return 0;
}

/* Keepalive probes every second from the first idle one, giving up at the
 * liveness bound, but never on one unanswered probe: a probe or its answer
 * lost on the way broke live links (pair.lua across a 1%-drop namespace
 * pair: "peer did not answer TCP keepalive within 2.0 s"; an idle link
 * sends 2 packets a second, for hours). So the bound is 3 s at least:
 * whole seconds are all TCP_KEEPIDLE and TCP_KEEPINTVL take. Again when
 * the bound changes (tbrt_link_set_timeouts). */
void link_keepalive_apply(tbrt_link *l)
{
    if (l->x.fd < 0)
        return;
    int one = 1, idle = 1, intvl = 1, cnt = keepalive_secs(l) - 1;
    setsockopt(l->x.fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(l->x.fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(l->x.fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(l->x.fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

int link_check_tcp_acks(tbrt_link *l, double now)
{
    if (l->x.peer_dead || now - l->last_ack_check < ACK_CHECK_EVERY)
        return 0;
    l->last_ack_check = now;
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(l->x.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || len < sizeof ti)
        return 0;
    /* unacknowledged segments and no acknowledgement for the bound: a live
     * host acknowledges within round trips (even with a zero window), so
     * this is the host gone or the path to it cut */
    if (ti.tcpi_unacked == 0 || ti.tcpi_last_ack_recv < (uint32_t)(l->opts.liveness * 1000.0))
        return 0;
    l->x.peer_dead = true;
    return link_fail(l, ETIMEDOUT, "peer host acknowledged nothing for %.1f s while %u segments "
                     "of ours waited (peer host dead or unreachable; liveness bound %.3g s)",
                     ti.tcpi_last_ack_recv / 1000.0, ti.tcpi_unacked, l->opts.liveness);
}

int link_send_byte(tbrt_link *l, uint8_t b)
{
    for (;;) {
        ssize_t n = send(l->x.fd, &b, 1, MSG_NOSIGNAL);
        if (n == 1)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* one byte on an idle socket: only a full buffer (tcp link) stops it */
            struct pollfd p = {.fd = l->x.fd, .events = POLLOUT};
            if (poll(&p, 1, (int)(l->opts.timeout * 1000)) > 0)
                continue;
            return -ETIMEDOUT;
        }
        return n < 0 ? -errno : -EIO;
    }
}

int link_recv_byte(tbrt_link *l, uint8_t *b)
{
    for (;;) {
        ssize_t n = recv(l->x.fd, b, 1, MSG_DONTWAIT);
        if (n == 1)
            return 1;
        if (n == 0)
            return -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return -errno;
    }
}

/* The link's port, looked at with the socket: a port that leaves ACTIVE
 * (cable pulled) loses frames silently on UC, so say so at once. */
static int check_port(tbrt_link *l, double now)
{
    if (!l->x.dev || now - l->last_port_check < PORT_CHECK_EVERY)
        return 0;
    l->last_port_check = now;
    struct ibv_port_attr pa;
    if (tbrt_port_query(l->x.dev, l->x.port, &pa) != 0 || pa.state == IBV_PORT_ACTIVE)
        return 0;
    return link_fail(l, ENETDOWN, "port %u of %s went %s (link lost: cable, switch or peer "
                     "port down)", l->x.port, tbrt_dev_name(l->x.dev), dev_port_state_name(pa.state));
}

int link_check_liveness(tbrt_link *l, bool force)
{
    if (l->bye || l->x.peer_dead)
        return 0;
    double now = now_s();
    if (!force) {
        if (now - l->last_live_check < LIVENESS_CHECK_EVERY)
            return 0;
        l->last_live_check = now;
    }
    int prc = check_port(l, now);
    if (prc)
        return prc;
    uint8_t b;
    int rc = link_recv_byte(l, &b);
    if (rc == 0)
        return 0;
    int decided;
    if (link_socket_byte(l, rc, b, &decided))   /* bootstrap.c: the framing's rules */
        return decided;
    if (rc == 1 && b == TBRT_BYE_BYTE) {
        l->bye = true;
        return 0;
    }
    l->x.peer_dead = true;
    if (rc == 1)
        return link_fail(l, EPROTO, "bootstrap socket: unexpected byte 0x%02x after setup "
                         "(nothing else may cross it once the link is up)", b);
    if (rc == -ECONNRESET)
        return link_fail(l, ECONNRESET, "peer closed the bootstrap socket without saying "
                         "goodbye (peer process died?)");
    if (rc == -ETIMEDOUT)
        return link_fail(l, ETIMEDOUT, "peer did not answer TCP keepalive within %d s "
                         "(peer host dead or unreachable)", keepalive_secs(l));
    return link_fail(l, -rc, "bootstrap socket: %s (peer gone)", strerror(-rc));
}
