/* udp_ep.c - the UDP wire's endpoint: the sockets of one port in this
 * process (IPv4 and IPv6, bound to every address or to one interface),
 * shared by every device of the process that uses that port, as one RoCE
 * NIC per host answers on 4791 whatever its queue pairs.
 *
 * Receiving: recvmmsg in batches, the destination address from IP_PKTINFO,
 * the ICRC checked (a bad one is counted and dropped, as hardware does),
 * then the packet goes to the queue pair its BTH names, whichever device of
 * this process owns it. Sending: sendmmsg in batches, each packet an iovec
 * of its headers, the payload where it lies (registered memory: no copy)
 * and the ICRC, with IP_PKTINFO naming the source address the ICRC was
 * computed with. Faults (faults.h) act here, per packet and direction:
 * what they delay, reorder or pace is copied into a held packet and goes
 * out (or in) when due.
 *
 * A second process on the same host (or namespace) cannot have the port:
 * it is told so, and that TBRT_SOFT_UDP_PORT gives its fabric another. */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <stdatomic.h>
#include <netinet/udp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "soft/wire/udp/udp.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103         /* linux/udp.h: older C libraries lack them */
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define BATCH 32
/* A receive buffer holds a GRO run (UDP_GRO: packets of one size from one
 * peer, handed over whole, as GSO sent them): up to 64 KiB. */
#define RX_BUF 65536
#define RX_BATCHES 8            /* at most this many batches per turn */
#define QP_BUCKETS 1024
#define HELD_MAX 65536          /* packets faults may hold at once */
#define SOCK_BUF (8 << 20)

/* Sending: packets are gathered into messages for one sendmmsg. Where the
 * kernel has UDP GSO (Linux 4.18+), a run of packets of one size to one
 * peer from one address goes as one message with UDP_SEGMENT: one trip
 * through the stack for up to GSO_SEGS packets, split into datagrams on
 * the wire (or never, between namespaces: veth carries the run whole to a
 * socket with UDP_GRO). Each packet keeps its own iovecs (headers, its
 * data where it lies, pad + ICRC) so nothing is copied for this. */
#define TX_PKTS 64              /* packets per flush */
#define TX_IOV (SOFT_MAX_SGE + 3)
#define GSO_SEGS 64             /* the kernel's UDP_MAX_SEGMENTS */
#define GSO_BYTES 65000         /* a UDP datagram's payload, with room to spare */

struct tx_slot {                /* a packet */
    uint8_t hdr[UDP_HDR_MAX];
    uint8_t tail[8];            /* pad + ICRC */
    uint8_t small[64];          /* a short payload, copied (it may live on a caller's stack) */
    uint32_t iov0, niov, len;   /* its iovecs in the batch's */
};

struct tx_msg {                 /* a message: one packet, or a GSO run of them */
    struct sockaddr_in6 to;
    uint8_t sgid[16];
    uint32_t seg, bytes, pkt0, npkt;
    bool closed;                /* a shorter last segment ended the run */
    _Alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(uint16_t))];
};

struct tx_batch {
    int fd;
    bool v4;
    unsigned n, npkt, niov;     /* messages, packets, iovecs in use */
    uint32_t gso_below;         /* packets this long or longer go alone (a kernel refused) */
    struct mmsghdr msg[TX_PKTS];
    struct tx_msg m[TX_PKTS];
    struct tx_slot slot[TX_PKTS];
    struct iovec iov[TX_PKTS * TX_IOV];
};

struct udp_ep {
    struct udp_ep *next;        /* the process's endpoints */
    pthread_mutex_t lock;
    int refs;
    uint16_t port;
    char netdev[IF_NAMESIZE];
    int fd4, fd6;
    struct soft_wire *wires;
    struct soft_wire_qp *qps[QP_BUCKETS];
    uint32_t next_qpn;
    struct udp_pcap *pcap;
    struct tx_batch tx[2];      /* IPv4, IPv6 */
    struct udp_held *held;      /* by due time */
    uint32_t nheld;
    /* the helper thread: the NIC's turn while no owner takes one */
    pthread_t helper;
    bool helper_on;
    int stop_fd, kick_fd;
    _Atomic uint64_t last_turn;
    _Atomic int sleepers;       /* armed CQs: owners asleep on them */
    /* receiving */
    struct mmsghdr rmsg[BATCH];
    struct iovec riov[BATCH];
    struct sockaddr_in6 rname[BATCH];
    /* pktinfo (either family) and the GRO segment size; CMSG_SPACE keeps
     * every row aligned */
    _Alignas(struct cmsghdr) char rctl[BATCH][CMSG_SPACE(sizeof(struct in6_pktinfo)) +
                                             CMSG_SPACE(sizeof(struct in_pktinfo)) +
                                             CMSG_SPACE(sizeof(int))];
    uint8_t rbuf[BATCH][RX_BUF];
};

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
 * an owner takes turns itself (the fast path stays the owner's). */
static void *helper_main(void *arg)
{
    struct udp_ep *ep = arg;
    uint64_t next = 0;
    for (;;) {
        struct pollfd p[4];
        int n = 0;
        p[n++] = (struct pollfd){.fd = ep->stop_fd, .events = POLLIN};
        p[n++] = (struct pollfd){.fd = ep->kick_fd, .events = POLLIN};
        p[n++] = (struct pollfd){.fd = ep->fd4, .events = POLLIN};
        if (ep->fd6 >= 0)
            p[n++] = (struct pollfd){.fd = ep->fd6, .events = POLLIN};
        int ms = HELPER_NAP_MS;
        if (next == 1) {
            ms = 0;
        } else if (next) {
            uint64_t now = now_ns();
            ms = next <= now ? 0 : (int)TBRT_MIN((next - now) / 1000000ull + 1, HELPER_NAP_MS);
        }
        poll(p, (nfds_t)n, ms);
        if (p[0].revents)
            return NULL;
        if (p[1].revents) {
            uint64_t v;
            ssize_t r = read(ep->kick_fd, &v, sizeof v);
            (void)r;
        }
        uint64_t now = now_ns();
        uint64_t last = atomic_load_explicit(&ep->last_turn, memory_order_relaxed);
        bool asleep = atomic_load(&ep->sleepers) > 0;
        if (!asleep && now - last < HELPER_QUIET_NS) {
            /* an owner is at it: look again when it may have stopped */
            usleep((useconds_t)((last + HELPER_QUIET_NS - now) / 1000 + 1));
            continue;
        }
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

static struct udp_ep *ep_new(uint16_t port, const char *netdev, char *why, size_t len)
{
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

static struct soft_wire_qp *qp_find(struct udp_ep *ep, uint32_t qpn)
{
    for (struct soft_wire_qp *q = ep->qps[qpn % QP_BUCKETS]; q; q = q->ep_next)
        if (q->qpn == qpn)
            return q;
    return NULL;
}

int udp_ep_qp_add(struct udp_ep *ep, struct soft_wire_qp *q, uint32_t want, char *why,
                  size_t len)
{
    uint32_t qpn = want;
    if (!qpn) {
        for (int tries = 0; tries < 1 << 20; tries++) {
            qpn = ep->next_qpn++ & UDP_PSN_MASK;
            if (qpn >= 2 && !qp_find(ep, qpn))
                break;
            qpn = 0;
        }
        if (!qpn)
            return err_set(why, len, ENOMEM, "no free queue pair number");
    } else if (qp_find(ep, qpn)) {
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

/* ---- sending -------------------------------------------------------------------- */

static void gid_to_sa(const uint8_t gid[16], uint16_t port, struct sockaddr_in6 *sa)
{
    memset(sa, 0, sizeof *sa);
    if (udp_gid_v4(gid)) {
        struct sockaddr_in *a = (struct sockaddr_in *)sa;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        memcpy(&a->sin_addr, gid + 12, 4);
    } else {
        sa->sin6_family = AF_INET6;
        sa->sin6_port = htons(port);
        memcpy(&sa->sin6_addr, gid, 16);
    }
}

/* The control data of a message: the source address the ICRC was
 * computed with, and the segment size of a GSO run. */
static void msg_control(struct tx_batch *b, struct tx_msg *t, struct msghdr *m, bool gso)
{
    memset(t->ctl, 0, sizeof t->ctl);
    m->msg_control = t->ctl;
    struct cmsghdr *c = (struct cmsghdr *)t->ctl;
    if (b->v4) {
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
        struct in_pktinfo *pi = (struct in_pktinfo *)CMSG_DATA(c);
        memcpy(&pi->ipi_spec_dst, t->sgid + 12, 4);
        m->msg_controllen = CMSG_SPACE(sizeof(struct in_pktinfo));
    } else {
        c->cmsg_level = IPPROTO_IPV6;
        c->cmsg_type = IPV6_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
        struct in6_pktinfo *pi = (struct in6_pktinfo *)CMSG_DATA(c);
        memcpy(&pi->ipi6_addr, t->sgid, 16);
        m->msg_controllen = CMSG_SPACE(sizeof(struct in6_pktinfo));
    }
    if (gso) {
        c = (struct cmsghdr *)(t->ctl + m->msg_controllen);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = (uint16_t)t->seg;
        memcpy(CMSG_DATA(c), &seg, sizeof seg);
        m->msg_controllen += CMSG_SPACE(sizeof(uint16_t));
    }
}

static void msg_build(struct tx_batch *b, unsigned i)
{
    struct tx_msg *t = &b->m[i];
    struct msghdr *m = &b->msg[i].msg_hdr;
    memset(m, 0, sizeof *m);
    m->msg_name = &t->to;
    m->msg_namelen = b->v4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    struct tx_slot *first = &b->slot[t->pkt0], *last = &b->slot[t->pkt0 + t->npkt - 1];
    m->msg_iov = &b->iov[first->iov0];
    m->msg_iovlen = last->iov0 + last->niov - first->iov0;
    msg_control(b, t, m, t->npkt > 1);
}

/* A GSO run the kernel refused (no UDP_SEGMENT, a segment over the
 * device's MTU, no checksum offload): its packets one by one, and runs of
 * that size no more. */
static void gso_refused(struct tx_batch *b, unsigned i, int err)
{
    struct tx_msg *t = &b->m[i];
    if (udp_debug)
        fprintf(stderr, "tbrt udp: UDP GSO of %u x %u B: %s: those go one by one\n", t->npkt,
                t->seg, strerror(err));
    if (t->seg < b->gso_below)
        b->gso_below = t->seg;
    for (uint32_t k = 0; k < t->npkt; k++) {
        struct tx_slot *s = &b->slot[t->pkt0 + k];
        struct msghdr m = {.msg_name = &t->to, .msg_namelen = b->msg[i].msg_hdr.msg_namelen,
                           .msg_iov = &b->iov[s->iov0], .msg_iovlen = s->niov};
        msg_control(b, t, &m, false);
        while (sendmsg(b->fd, &m, MSG_DONTWAIT) < 0 && errno == EINTR)
            ;
    }
}

static void flush_one(struct udp_ep *ep, struct tx_batch *b)
{
    for (unsigned i = 0; i < b->n; i++)
        msg_build(b, i);
    unsigned done = 0;
    while (done < b->n) {
        int r = sendmmsg(b->fd, b->msg + done, b->n - done, MSG_DONTWAIT);
        if (r > 0) {
            done += (unsigned)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        int e = errno;
        if (b->m[done].npkt > 1 && e != EAGAIN && e != EWOULDBLOCK && e != ENOBUFS &&
            e != ECONNREFUSED && e != EHOSTUNREACH && e != ENETUNREACH) {
            gso_refused(b, done, e);
            done++;
            continue;
        }
        /* a full socket buffer or an unreachable peer: the packets are
         * lost, as on a congested wire; RC retransmits */
        if (udp_debug)
            fprintf(stderr, "tbrt udp: sendmmsg: %s (%u of %u sent)\n", strerror(e), done, b->n);
        done++;
    }
    (void)ep;
    b->n = b->npkt = b->niov = 0;
}

void udp_ep_flush(struct udp_ep *ep)
{
    for (int i = 0; i < 2; i++)
        if (ep->tx[i].n)
            flush_one(ep, &ep->tx[i]);
}

/* Put one packet on the socket (batched). */
static void put_packet(struct soft_wire *w, struct soft_wire_stats *st,
                       const struct udp_path *path, const uint8_t *hdr,
                       uint32_t hlen, const struct udp_piece *pieces, int npieces,
                       const uint8_t *tail, uint32_t tlen)
{
    struct udp_ep *ep = w->ep;
    bool v4 = udp_gid_v4(path->dgid);
    struct tx_batch *b = &ep->tx[v4 ? 0 : 1];
    if (b->fd < 0)
        return;
    if (hlen > UDP_HDR_MAX || tlen > sizeof b->slot[0].tail ||
        udp_gid_v4(path->sgid) != v4) {
        st->bad_packets++;
        return;
    }
    if (b->npkt == TX_PKTS || b->niov + TX_IOV > TX_PKTS * TX_IOV)
        flush_one(ep, b);
    struct tx_slot *s = &b->slot[b->npkt];
    if (hlen)
        memcpy(s->hdr, hdr, hlen);
    if (tlen)
        memcpy(s->tail, tail, tlen);
    struct iovec *iov = &b->iov[b->niov];
    int k = 0;
    uint32_t total = hlen + tlen;
    if (hlen)
        iov[k++] = (struct iovec){.iov_base = s->hdr, .iov_len = hlen};
    uint32_t plen = 0;
    for (int i = 0; i < npieces; i++)
        plen += pieces[i].len;
    if (plen && plen <= sizeof s->small && npieces <= SOFT_MAX_SGE) {
        uint32_t o = 0;
        for (int i = 0; i < npieces; i++) {
            memcpy(s->small + o, pieces[i].p, pieces[i].len);
            o += pieces[i].len;
        }
        iov[k++] = (struct iovec){.iov_base = s->small, .iov_len = plen};
        total += plen;
    } else {
        for (int i = 0; i < npieces && i < SOFT_MAX_SGE + 1; i++)
            if (pieces[i].len) {
                iov[k++] = (struct iovec){.iov_base = (void *)pieces[i].p,
                                          .iov_len = pieces[i].len};
                total += pieces[i].len;
            }
    }
    if (tlen)
        iov[k++] = (struct iovec){.iov_base = s->tail, .iov_len = tlen};
    s->iov0 = b->niov;
    s->niov = (uint32_t)k;
    s->len = total;
    b->niov += (uint32_t)k;
    struct sockaddr_in6 to;
    gid_to_sa(path->dgid, path->dport, &to);
    /* the run goes on: same peer and source, not longer than its
     * segments (a shorter one is its last), room left */
    struct tx_msg *t = b->n ? &b->m[b->n - 1] : NULL;
    if (t && !t->closed && total <= t->seg && t->seg < b->gso_below && t->npkt < GSO_SEGS &&
        t->bytes + total <= GSO_BYTES && memcmp(&t->to, &to, sizeof to) == 0 &&
        memcmp(t->sgid, path->sgid, 16) == 0) {
        t->npkt++;
        t->bytes += total;
        t->closed = total < t->seg;
    } else {
        t = &b->m[b->n++];
        t->to = to;
        memcpy(t->sgid, path->sgid, 16);
        t->seg = t->bytes = total;
        t->pkt0 = b->npkt;
        t->npkt = 1;
        t->closed = false;
    }
    b->npkt++;
    st->pkts_sent++;
    st->bytes_sent += total;
    if (ep->pcap) {
        uint8_t flat[UDP_PKT_MAX];
        uint32_t off = 0;
        for (int i = 0; i < k && off + iov[i].iov_len <= sizeof flat; i++) {
            memcpy(flat + off, iov[i].iov_base, iov[i].iov_len);
            off += (uint32_t)iov[i].iov_len;
        }
        udp_pcap_packet(ep->pcap, path, flat, off, true);
    }
}

static void held_insert(struct udp_ep *ep, struct udp_held *h)
{
    struct udp_held **pp = &ep->held;
    while (*pp && (*pp)->due_ns <= h->due_ns)
        pp = &(*pp)->next;
    h->next = *pp;
    *pp = h;
    ep->nheld++;
}

/* A copy of a whole packet, for faults that hold or change it. */
static struct udp_held *flatten(const uint8_t *hdr, uint32_t hlen, const struct udp_piece *pieces,
                                int npieces, const uint8_t *tail, uint32_t tlen)
{
    uint32_t total = hlen + tlen;
    for (int i = 0; i < npieces; i++)
        total += pieces[i].len;
    struct udp_held *h = calloc(1, sizeof *h + total);
    if (!h)
        return NULL;
    memcpy(h->data, hdr, hlen);
    uint32_t off = hlen;
    for (int i = 0; i < npieces; i++) {
        memcpy(h->data + off, pieces[i].p, pieces[i].len);
        off += pieces[i].len;
    }
    memcpy(h->data + off, tail, tlen);
    h->len = total;
    return h;
}

static void held_send(struct soft_wire *w, struct udp_held *h)
{
    struct udp_path path;
    memset(&path, 0, sizeof path);
    memcpy(path.sgid, h->src, 16);
    /* the destination is in h->peer; the path is only for the socket and the capture */
    if (h->peer.sin6_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&h->peer;
        path.dgid[10] = path.dgid[11] = 0xff;
        memcpy(path.dgid + 12, &a->sin_addr, 4);
        path.dport = ntohs(a->sin_port);
    } else {
        memcpy(path.dgid, &h->peer.sin6_addr, 16);
        path.dport = ntohs(h->peer.sin6_port);
    }
    path.sport = w->ep->port;
    struct udp_piece whole = {h->data, h->len};
    put_packet(w, &w->st, &path, NULL, 0, &whole, 1, NULL, 0);
    /* the caller frees h: it must be on the socket first */
    flush_one(w->ep, &w->ep->tx[path.dgid[10] == 0xff && udp_gid_v4(path.dgid) ? 0 : 1]);
}

/* Reordered packets waiting for `after` more to pass. */
static void reorder_tick(struct soft_wire *w)
{
    struct udp_ep *ep = w->ep;
    for (struct udp_held **pp = &ep->held; *pp;) {
        struct udp_held *h = *pp;
        if (h->after && !h->rx && --h->after == 0) {
            *pp = h->next;
            ep->nheld--;
            held_send(w, h);
            free(h);
            continue;
        }
        pp = &h->next;
    }
}

void udp_send(struct soft_wire *w, struct soft_wire_qp *q, const struct udp_path *path,
              const uint8_t *hdr, uint32_t hlen, const struct udp_piece *pieces, int npieces,
              uint8_t pad)
{
    struct soft_wire_stats *st = q ? &q->st : &w->st;
    uint32_t qpn = q ? q->qpn : 0;
    uint8_t tail[8] = {0};
    uint32_t icrc = udp_icrc(path, hdr, hlen, pieces, npieces, pad);
    for (int i = 0; i < 4; i++)
        tail[pad + i] = (uint8_t)(icrc >> (8 * i)); /* least significant byte first */
    uint32_t tlen = pad + UDP_ICRC;
    struct soft_faults *f = w->cfg.faults;
    struct soft_fault_verdict v;
    if (TBRT_LIKELY(!f->active) ||
        !soft_faults_packet(f, qpn, SOFT_FAULT_TX, w->now ? w->now : now_ns(), &v) ||
        (!v.drop && !v.corrupt && !v.duplicate && !v.reorder && !v.delay_ns && !v.rate_Bps)) {
        put_packet(w, st, path, hdr, hlen, pieces, npieces, tail, tlen);
        if (TBRT_UNLIKELY(w->ep->nheld))
            reorder_tick(w);
        return;
    }
    if (v.drop) {
        st->drops_injected++;
        return;
    }
    struct udp_held *h = flatten(hdr, hlen, pieces, npieces, tail, tlen);
    if (!h || w->ep->nheld >= HELD_MAX) {
        free(h);
        st->drops_injected++;
        return;
    }
    if (v.corrupt) {
        uint64_t bit = v.corrupt_bit % ((uint64_t)h->len * 8);
        h->data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        st->corrupt_injected++;
    }
    gid_to_sa(path->dgid, path->dport, &h->peer);
    memcpy(h->src, path->sgid, 16);
    uint64_t now = w->now ? w->now : now_ns(), due = now + v.delay_ns;
    if (v.rate_Bps) {
        uint64_t start = w->rate_next_ns > due ? w->rate_next_ns : due;
        w->rate_next_ns = start + (uint64_t)h->len * 1000000000ull / v.rate_Bps;
        due = start;
    }
    if (v.duplicate) {
        struct udp_held *d = malloc(sizeof *d + h->len);
        if (d) {
            memcpy(d, h, sizeof *d + h->len);
            d->next = NULL;
            d->due_ns = due;
            held_insert(w->ep, d);
            st->dups_injected++;
        }
    }
    if (v.reorder) {
        h->after = v.window;
        h->due_ns = due + 50000000ull; /* and at the latest after 50 ms */
        st->reordered_injected++;
    } else {
        h->due_ns = due;
    }
    if (v.delay_ns)
        st->delayed_injected++;
    if (!v.reorder && due <= now && !v.duplicate) {
        held_send(w, h);        /* corrupted only */
        free(h);
        return;
    }
    held_insert(w->ep, h);
}

uint64_t udp_ep_next_due(struct udp_ep *ep)
{
    return ep->held ? ep->held->due_ns : 0;
}

/* ---- receiving ------------------------------------------------------------------- */

static void sa_to_gid(const struct sockaddr_in6 *sa, uint8_t gid[16], uint16_t *port)
{
    memset(gid, 0, 16);
    if (sa->sin6_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        gid[10] = gid[11] = 0xff;
        memcpy(gid + 12, &a->sin_addr, 4);
        *port = ntohs(a->sin_port);
    } else {
        memcpy(gid, &sa->sin6_addr, 16);
        *port = ntohs(sa->sin6_port);
    }
}

/* One packet that arrived (after the receive side's faults). */
static void dispatch(struct soft_wire *w, uint8_t *buf, uint32_t len, const struct udp_path *path)
{
    struct udp_ep *ep = w->ep;
    if (len < UDP_BTH + UDP_ICRC) {
        w->st.bad_packets++;
        return;
    }
    struct udp_piece body = {buf + UDP_BTH, len - UDP_BTH - UDP_ICRC};
    uint32_t got = (uint32_t)buf[len - 4] | (uint32_t)buf[len - 3] << 8 |
                   (uint32_t)buf[len - 2] << 16 | (uint32_t)buf[len - 1] << 24;
    uint32_t dqpn = (uint32_t)buf[5] << 16 | (uint32_t)buf[6] << 8 | buf[7];
    struct soft_wire_qp *q = qp_find(ep, dqpn);
    struct soft_wire_stats *st = q ? &q->st : &w->st;
    if (udp_icrc(path, buf, UDP_BTH, &body, 1, 0) != got) {
        st->icrc_failures++;
        if (udp_debug)
            fprintf(stderr, "icrc fail: op 0x%x len %u dqpn 0x%x sport %u dport %u v4 %d %d.%d.%d.%d -> %d.%d.%d.%d\n", buf[0], len, dqpn, path->sport, path->dport, udp_gid_v4(path->sgid), path->sgid[12], path->sgid[13], path->sgid[14], path->sgid[15], path->dgid[12], path->dgid[13], path->dgid[14], path->dgid[15]);
        return;                 /* as hardware: silently dropped */
    }
    struct udp_pkt p;
    const char *why = NULL;
    if (!q || udp_pkt_parse(buf, len, &p, &why)) {
        st->bad_packets++;
        return;
    }
    q->st.pkts_recv++;
    q->st.bytes_recv += len;
    if (q->w != w)
        q->w->now = w->now;
    unsigned f = udp_op_flags(p.opcode);
    if (p.opcode == UDP_OP_TBRT_CREDIT || (f & UDP_F_RESP))
        udp_req_recv(q, &p);
    else
        udp_resp_recv(q, &p, path);
}

static void rx_one(struct soft_wire *w, uint8_t *buf, uint32_t len, const struct udp_path *path)
{
    struct soft_faults *f = w->cfg.faults;
    struct soft_fault_verdict v;
    if (TBRT_UNLIKELY(f->active) && len >= UDP_BTH) {
        uint32_t dqpn = (uint32_t)buf[5] << 16 | (uint32_t)buf[6] << 8 | buf[7];
        if (soft_faults_packet(f, dqpn, SOFT_FAULT_RX, w->now, &v)) {
            if (v.drop) {
                w->st.drops_injected++;
                return;
            }
            if (v.corrupt) {
                uint64_t bit = v.corrupt_bit % ((uint64_t)len * 8);
                buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                w->st.corrupt_injected++;
            }
            if (v.delay_ns || v.reorder) {
                struct udp_held *h = calloc(1, sizeof *h + len);
                if (h && w->ep->nheld < HELD_MAX) {
                    memcpy(h->data, buf, len);
                    h->len = len;
                    h->rx = true;
                    memcpy(h->src, path->dgid, 16);
                    gid_to_sa(path->sgid, path->sport, &h->peer);
                    h->due_ns = w->now + v.delay_ns + (v.reorder ? 1000000ull : 0);
                    held_insert(w->ep, h);
                    w->st.delayed_injected++;
                } else {
                    free(h);
                    w->st.drops_injected++;
                }
                return;
            }
            if (v.duplicate) {
                w->st.dups_injected++;
                uint8_t copy[UDP_PKT_MAX + 64];
                memcpy(copy, buf, len);
                dispatch(w, copy, len, path);
            }
        }
    }
    dispatch(w, buf, len, path);
}

/* Held packets whose time came. */
static void held_due(struct soft_wire *w)
{
    struct udp_ep *ep = w->ep;
    while (ep->held && ep->held->due_ns <= w->now) {
        struct udp_held *h = ep->held;
        ep->held = h->next;
        ep->nheld--;
        if (h->rx) {
            struct udp_path path = {.dport = ep->port};
            memcpy(path.dgid, h->src, 16);
            sa_to_gid(&h->peer, path.sgid, &path.sport);
            dispatch(w, h->data, h->len, &path);
        } else {
            held_send(w, h);
        }
        free(h);
    }
}

static int rx_batch(struct soft_wire *w, int fd)
{
    struct udp_ep *ep = w->ep;
    for (int i = 0; i < BATCH; i++) {
        struct msghdr *m = &ep->rmsg[i].msg_hdr;
        memset(m, 0, sizeof *m);
        m->msg_name = &ep->rname[i];
        m->msg_namelen = sizeof ep->rname[i];
        m->msg_iov = &ep->riov[i];
        m->msg_iovlen = 1;
        m->msg_control = ep->rctl[i];
        m->msg_controllen = sizeof ep->rctl[i];
    }
    int n = recvmmsg(fd, ep->rmsg, BATCH, MSG_DONTWAIT, NULL);
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++) {
        struct msghdr *m = &ep->rmsg[i].msg_hdr;
        uint32_t len = ep->rmsg[i].msg_len;
        if (m->msg_flags & MSG_TRUNC) {
            w->st.bad_packets++;
            continue;
        }
        uint32_t seg = len;     /* a GRO run: packets of seg bytes, the last maybe shorter */
        struct udp_path path = {.dport = ep->port};
        sa_to_gid(&ep->rname[i], path.sgid, &path.sport);
        for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
            if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
                struct in_pktinfo pi;
                memcpy(&pi, CMSG_DATA(c), sizeof pi);
                path.dgid[10] = path.dgid[11] = 0xff;
                memcpy(path.dgid + 12, &pi.ipi_addr, 4);
            } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
                struct in6_pktinfo pi;
                memcpy(&pi, CMSG_DATA(c), sizeof pi);
                memcpy(path.dgid, &pi.ipi6_addr, 16);
            } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                int g;
                memcpy(&g, CMSG_DATA(c), sizeof g);
                if (g > 0 && (uint32_t)g < seg)
                    seg = (uint32_t)g;
            }
        }
        for (uint32_t off = 0; off < len; off += seg) {
            uint32_t plen = TBRT_MIN(seg, len - off);
            if (plen > UDP_PKT_MAX) {
                w->st.bad_packets++;
                continue;
            }
            if (ep->pcap)
                udp_pcap_packet(ep->pcap, &path, ep->rbuf[i] + off, plen, false);
            rx_one(w, ep->rbuf[i] + off, plen, &path);
        }
    }
    return n;
}

void udp_ep_poll(struct soft_wire *w)
{
    struct udp_ep *ep = w->ep;
    for (int i = 0; i < RX_BATCHES; i++) {
        int n = rx_batch(w, ep->fd4);
        if (ep->fd6 >= 0)
            n += rx_batch(w, ep->fd6);
        if (n < BATCH)
            break;
    }
    if (ep->held)
        held_due(w);
}
