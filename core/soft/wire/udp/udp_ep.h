/* udp_ep.h - the inside of the UDP wire's endpoint, shared by its files:
 *
 *   udp_ep.c   the endpoint itself: its sockets, the queue pairs by number,
 *              the helper thread
 *   udp_tx.c   sending: batches for sendmmsg, GSO runs, the send side's
 *              faults and the packets they hold
 *   udp_rx.c   receiving: recvmmsg batches, GRO runs, the receive side's
 *              faults, held packets whose time came
 *
 * The rest of the wire sees only udp.h. */
#ifndef TBRT_SOFT_UDP_EP_H
#define TBRT_SOFT_UDP_EP_H

#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

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
    struct soft_wire_stats *st; /* its QP's counters (or its wire's): a QP or wire that
                                   goes flushes the batch first */
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

/* The queue pair numbered qpn on this endpoint, or NULL (every packet that
 * arrives asks: inline). */
static inline struct soft_wire_qp *udp_ep_qp_find(struct udp_ep *ep, uint32_t qpn)
{
    for (struct soft_wire_qp *q = ep->qps[qpn % QP_BUCKETS]; q; q = q->ep_next)
        if (q->qpn == qpn)
            return q;
    return NULL;
}

/* udp_tx.c */
void udp_gid_to_sa(const uint8_t gid[16], uint16_t port, struct sockaddr_in6 *sa);
/* Queue a held packet by its due time. */
void udp_held_insert(struct udp_ep *ep, struct udp_held *h);
/* A held packet onto the socket now (the caller frees it). */
void udp_held_send(struct soft_wire *w, struct udp_held *h);

#endif
