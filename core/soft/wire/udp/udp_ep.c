/* udp_ep.c - the UDP wire's endpoint: the sockets of one port in this
 * process (IPv4 and IPv6, bound to every address or to one interface),
 * shared by every device of the process that uses that port, as one RoCE
 * NIC per host answers on 4791 whatever its queue pairs; the queue pairs
 * it carries, by number; and its helper thread, the NIC's own turns.
 * Sending is udp_tx.c's, receiving udp_rx.c's (udp_ep.h).
 *
 * A second process on the same host (or namespace) cannot have the port:
 * it is told so, and that TBRT_SOFT_UDP_PORT gives its fabric another. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "soft/wire/udp/udp_ep.h"

/* An owner that took a turn this recently is polling: the helper waits. */
#define HELPER_QUIET_NS 200000ull
#define HELPER_NAP_MS 10

static pthread_mutex_t eps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct udp_ep *eps;

void udp_ep_lock(struct udp_ep *ep) { pthread_mutex_lock(&ep->lock); }
void udp_ep_turned(struct udp_ep *ep, uint64_t now)
{
    atomic_store_explicit(&ep->last_turn, now, memory_order_relaxed);
}

void udp_ep_sleepers(struct udp_ep *ep, int delta)
{
    atomic_fetch_add(&ep->sleepers, delta);
    if (delta > 0) {
        uint64_t one = 1;       /* the helper looks again at once (its deadlines too) */
        ssize_t r = write(ep->kick_fd, &one, sizeof one);
        (void)r;
    }
}

/* What a NIC does on its own: answer packets (ACKs, READ responses), send
 * what was posted, run the retransmit timers, while the owning threads are
 * busy elsewhere (checking bytes, computing): without it a busy receiver
 * sends no ACK and its peer retransmits for nothing. It steps aside while
 * an owner takes turns itself (the fast path stays the owner's): it then
 * sleeps until the owner may have stopped, its sockets not watched, so
 * that a packet for a polling owner does not wake it as well (on two CPUs
 * that woken thread took the CPU of the very process the packet was for:
 * a context switch per packet in a ping-pong). An owner that goes to sleep
 * kicks it (udp_ep_sleepers). */
static void *helper_main(void *arg)
{
    struct udp_ep *ep = arg;
    uint64_t next = 0;
    for (;;) {
        uint64_t now = now_ns();
        uint64_t last = atomic_load_explicit(&ep->last_turn, memory_order_relaxed);
        bool asleep = atomic_load(&ep->sleepers) > 0;
        bool owner = !asleep && now - last < HELPER_QUIET_NS;
        struct pollfd p[4];
        int n = 0;
        p[n++] = (struct pollfd){.fd = ep->stop_fd, .events = POLLIN};
        p[n++] = (struct pollfd){.fd = ep->kick_fd, .events = POLLIN};
        uint64_t wait_ns = (uint64_t)HELPER_NAP_MS * 1000000ull;
        if (owner) {
            wait_ns = last + HELPER_QUIET_NS - now;
        } else {
            p[n++] = (struct pollfd){.fd = ep->fd4, .events = POLLIN};
            if (ep->fd6 >= 0)
                p[n++] = (struct pollfd){.fd = ep->fd6, .events = POLLIN};
            if (next == 1)
                wait_ns = 0;
            else if (next)
                wait_ns = next <= now ? 0 : TBRT_MIN(next - now, wait_ns);
        }
        struct timespec ts = {.tv_sec = (time_t)(wait_ns / 1000000000ull),
                              .tv_nsec = (long)(wait_ns % 1000000000ull)};
        ppoll(p, (nfds_t)n, &ts, NULL);
        if (p[0].revents)
            return NULL;
        if (p[1].revents) {
            uint64_t v;
            ssize_t r = read(ep->kick_fd, &v, sizeof v);
            (void)r;
        }
        if (owner)
            continue;           /* look again: the owner may still be at it */
        now = now_ns();
        last = atomic_load_explicit(&ep->last_turn, memory_order_relaxed);
        if (atomic_load(&ep->sleepers) <= 0 && now - last < HELPER_QUIET_NS)
            continue;           /* an owner took a turn meanwhile */
        if (pthread_mutex_trylock(&ep->lock) != 0) {
            usleep(200);
            continue;
        }
        next = 0;
        for (struct soft_wire *w = ep->wires; w; w = w->ep_next) {
            uint64_t d = udp_wire_turn(w);
            if (d && (!next || d < next))
                next = d;
        }
        pthread_mutex_unlock(&ep->lock);
    }
}
void udp_ep_unlock(struct udp_ep *ep) { pthread_mutex_unlock(&ep->lock); }
uint16_t udp_ep_port(struct udp_ep *ep) { return ep->port; }

static int sock_open(int family, uint16_t port, const char *netdev, char *why, size_t len)
{
    int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1, buf = SOCK_BUF, dont = IP_PMTUDISC_DONT;
    if (family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    /* root may pass the system's limits (a 4 MiB message is 1024 packets) */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf))
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf))
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    if (family == AF_INET) {
        setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
        /* path MTU 4096 over a 1500-byte link: let IP fragment */
        setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof dont);
    } else {
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one);
        dont = IPV6_PMTUDISC_DONT;
        setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &dont, sizeof dont);
    }
    /* runs of packets come in whole, as GSO sent them (where the kernel
     * can: without it, one packet a datagram as before) */
    setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
    if (netdev && *netdev &&
        setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, netdev, (socklen_t)strlen(netdev) + 1)) {
        int e = errno;
        close(fd);
        return err_set(why, len, e, "bind to interface %s: %s", netdev, strerror(e));
    }
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        sl = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        sl = sizeof *a;
    }
    if (bind(fd, (struct sockaddr *)&ss, sl)) {
        int e = errno;
        close(fd);
        if (e == EADDRINUSE)
            return err_set(why, len, e, "UDP port %u (%s) is taken on this host or namespace: "
                           "another process's soft device has it (one RoCEv2 port per host, "
                           "as one NIC); give this fabric another with TBRT_SOFT_UDP_PORT",
                           port, family == AF_INET ? "IPv4" : "IPv6");
        return err_set(why, len, e, "bind UDP port %u: %s", port, strerror(e));
    }
    return fd;
}

/* At exit no turn comes after the last: the ACKs held for one go now (a
 * NIC acknowledges what it received whatever its process does next). An
 * endpoint some thread holds at that moment is left alone. */
static void send_held_at_exit(void)
{
    pthread_mutex_lock(&eps_lock);
    for (struct udp_ep *ep = eps; ep; ep = ep->next) {
        if (pthread_mutex_trylock(&ep->lock) != 0)
            continue;
        for (struct soft_wire *w = ep->wires; w; w = w->ep_next)
            udp_wire_send_held(w);
        pthread_mutex_unlock(&ep->lock);
    }
    pthread_mutex_unlock(&eps_lock);
}

static struct udp_ep *ep_new(uint16_t port, const char *netdev, char *why, size_t len)
{
    static bool at_exit;
    if (!at_exit && atexit(send_held_at_exit) == 0)
        at_exit = true;
    struct udp_ep *ep = calloc(1, sizeof *ep);
    if (!ep) {
        err_set(why, len, ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&ep->lock, NULL);
    ep->port = port;
    str_copy(ep->netdev, sizeof ep->netdev, netdev ? netdev : "");
    ep->fd4 = sock_open(AF_INET, port, netdev, why, len);
    if (ep->fd4 < 0) {
        if (ep->fd4 != -EADDRINUSE && !why[0])
            err_set(why, len, -ep->fd4, "UDP socket: %s", strerror(-ep->fd4));
        free(ep);
        return NULL;
    }
    char w6[TBRT_WHY_MAX];
    ep->fd6 = sock_open(AF_INET6, port, netdev, w6, sizeof w6); /* no IPv6: IPv4 only */
    ep->tx[0].fd = ep->fd4;
    ep->tx[1].fd = ep->fd6;
    ep->tx[0].v4 = true;
    ep->tx[0].gso_below = ep->tx[1].gso_below = UINT32_MAX;
    ep->next_qpn = 0x100 + (uint32_t)(now_ns() % 0x8000) * 16;
    ep->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ep->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ep->stop_fd < 0 || ep->kick_fd < 0 ||
        pthread_create(&ep->helper, NULL, helper_main, ep) != 0) {
        /* without it nothing answers while the owners sleep */
        err_set(why, len, errno ? errno : EAGAIN, "UDP wire: the endpoint's helper thread: %s",
                strerror(errno ? errno : EAGAIN));
        if (ep->stop_fd >= 0)
            close(ep->stop_fd);
        if (ep->kick_fd >= 0)
            close(ep->kick_fd);
        close(ep->fd4);
        if (ep->fd6 >= 0)
            close(ep->fd6);
        free(ep);
        return NULL;
    }
    ep->helper_on = true;
    for (int i = 0; i < BATCH; i++) {
        ep->riov[i] = (struct iovec){.iov_base = ep->rbuf[i], .iov_len = sizeof ep->rbuf[i]};
    }
    return ep;
}

int udp_ep_attach(struct soft_wire *w, char *why, size_t len)
{
    why[0] = 0;
    pthread_mutex_lock(&eps_lock);
    struct udp_ep *ep = eps;
    while (ep && !(ep->port == w->cfg.udp_port && strcmp(ep->netdev, w->netdev) == 0))
        ep = ep->next;
    if (!ep) {
        ep = ep_new(w->cfg.udp_port, w->netdev, why, len);
        if (!ep) {
            pthread_mutex_unlock(&eps_lock);
            return -EADDRINUSE;
        }
        ep->next = eps;
        eps = ep;
    }
    ep->refs++;
    pthread_mutex_unlock(&eps_lock);
    udp_ep_lock(ep);
    if (!ep->pcap && w->pcap_path[0]) {
        ep->pcap = udp_pcap_open(w->pcap_path, why, len);
        if (!ep->pcap) {
            udp_ep_unlock(ep);
            w->ep = ep;
            udp_ep_detach(w);
            return -EIO;
        }
    }
    w->ep = ep;
    w->ep_next = ep->wires;
    ep->wires = w;
    udp_ep_unlock(ep);
    return 0;
}

void udp_ep_detach(struct soft_wire *w)
{
    struct udp_ep *ep = w->ep;
    if (!ep)
        return;
    udp_ep_lock(ep);
    for (struct soft_wire **pp = &ep->wires; *pp; pp = &(*pp)->ep_next)
        if (*pp == w) {
            *pp = w->ep_next;
            break;
        }
    udp_ep_flush(ep);
    udp_ep_unlock(ep);
    w->ep = NULL;
    pthread_mutex_lock(&eps_lock);
    if (--ep->refs == 0) {
        for (struct udp_ep **pp = &eps; *pp; pp = &(*pp)->next)
            if (*pp == ep) {
                *pp = ep->next;
                break;
            }
        if (ep->helper_on) {
            uint64_t one = 1;
            ssize_t r = write(ep->stop_fd, &one, sizeof one);
            (void)r;
            pthread_join(ep->helper, NULL);
        }
        close(ep->stop_fd);
        close(ep->kick_fd);
        while (ep->held) {
            struct udp_held *h = ep->held;
            ep->held = h->next;
            free(h);
        }
        if (ep->pcap)
            udp_pcap_close(ep->pcap);
        close(ep->fd4);
        if (ep->fd6 >= 0)
            close(ep->fd6);
        pthread_mutex_destroy(&ep->lock);
        free(ep);
    }
    pthread_mutex_unlock(&eps_lock);
}

int udp_ep_fds(struct udp_ep *ep, int *fds, int max)
{
    int n = 0;
    if (n < max)
        fds[n++] = ep->fd4;
    if (ep->fd6 >= 0 && n < max)
        fds[n++] = ep->fd6;
    return n;
}

bool udp_ep_can(struct udp_ep *ep, const uint8_t gid[16])
{
    return udp_gid_v4(gid) ? ep->fd4 >= 0 : ep->fd6 >= 0;
}

/* ---- queue pairs by number ---------------------------------------------------- */

int udp_ep_qp_add(struct udp_ep *ep, struct soft_wire_qp *q, uint32_t want, char *why,
                  size_t len)
{
    uint32_t qpn = want;
    if (!qpn) {
        for (int tries = 0; tries < 1 << 20; tries++) {
            qpn = ep->next_qpn++ & UDP_PSN_MASK;
            if (qpn >= 2 && !udp_ep_qp_find(ep, qpn))
                break;
            qpn = 0;
        }
        if (!qpn)
            return err_set(why, len, ENOMEM, "no free queue pair number");
    } else if (udp_ep_qp_find(ep, qpn)) {
        return err_set(why, len, EEXIST, "QPN 0x%x is in use on UDP port %u of this process",
                       qpn, ep->port);
    }
    q->qpn = qpn;
    q->ep_next = ep->qps[qpn % QP_BUCKETS];
    ep->qps[qpn % QP_BUCKETS] = q;
    return 0;
}

void udp_ep_qp_del(struct udp_ep *ep, struct soft_wire_qp *q)
{
    for (struct soft_wire_qp **pp = &ep->qps[q->qpn % QP_BUCKETS]; *pp; pp = &(*pp)->ep_next)
        if (*pp == q) {
            *pp = q->ep_next;
            return;
        }
}
