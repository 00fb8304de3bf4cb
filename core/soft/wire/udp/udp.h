/* udp.h - the soft device's UDP wire: RoCEv2 packets over UDP between
 * hosts or network namespaces, in user space (Linux's rxe does the same in
 * the kernel). The parts its files share.
 *
 *   udp_pkt.c    the packets: BTH and its extension headers, the ICRC
 *   udp_ep.c     the endpoint: one pair of sockets (IPv4, IPv6) per process
 *                and port, shared by every device of the process that uses
 *                it, its queue pairs by number, its helper thread
 *   udp_tx.c     ... sending: sendmmsg batches, GSO runs, the send side's
 *                faults and the packets they hold
 *   udp_rx.c     ... receiving: recvmmsg batches, GRO runs, the receive
 *                side's faults, held packets that are due (udp_ep.h: the
 *                three files' shared insides)
 *   udp_pcap.c   the capture file (pcapng: Ethernet/IP/UDP framed)
 *   udp_req.c    the requester: segmentation by path MTU, PSNs, the window,
 *                end-to-end credits, the tail probe
 *   udp_ack.c    ... what comes back: ACKs, NAKs, go-back-N, RNR NAKs, READ
 *                responses, and its timers (udp_req.h: the two's helpers)
 *   udp_resp.c   the responder: PSN checks, duplicates, placing data into
 *                posted receives and registered memory, ACK/NAK/RNR NAK,
 *                READ responses, the UD GRH, apple-uc's receive credits
 *   udp_wire.c   the wire's operations (wire.h)
 *   udp_srq.c    shared receive queues: the receives several QPs take from
 *
 * Packets are RoCEv2's: UDP destination port 4791 (cfg->udp_port), then
 * BTH, the opcode's extension headers (RETH, AETH, DETH, ImmDt, AtomicETH),
 * the payload padded to 4 bytes, and the ICRC (udp_pkt.c). tbrt's own
 * control packet (apple-uc's receive credits) is a BTH with the
 * manufacturer-specific opcode UDP_OP_TBRT_CREDIT and an 8-byte payload
 * {"TBCR", receives posted}, documented in the README and named in the
 * capture's comments.
 *
 * Everything that arrives is hostile input: lengths and opcodes are checked
 * before use, a packet is read once from the buffer it was received into,
 * a peer never chooses how much is allocated (the queues are the QP's, the
 * READ jobs a fixed ring), and addresses it names are checked against our
 * own registrations.
 *
 * Locking: the endpoint's mutex is held by every operation of every wire on
 * it, so the device that reads a packet for another device's queue pair
 * (both in this process) can act on it; a result wakes its CQ if armed,
 * whichever thread made it. The endpoint's helper thread takes the turns
 * while the owners sleep on their CQs or are busy elsewhere (udp_ep.c). */
#ifndef TBRT_SOFT_UDP_H
#define TBRT_SOFT_UDP_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#include "soft/wire/faults.h"
#include "soft/wire/wire.h"
#include "util/util.h"

#define UDP_ROCE_PORT 4791      /* IANA's RoCEv2 port */
#define UDP_BTH 12
#define UDP_RETH 16
#define UDP_AETH 4
#define UDP_DETH 8
#define UDP_IMM 4
#define UDP_ATOMIC_ETH 28
#define UDP_ATOMIC_ACK 8
#define UDP_ICRC 4
#define UDP_HDR_MAX (UDP_BTH + UDP_RETH + UDP_IMM + UDP_ATOMIC_ETH)
#define UDP_PKT_MAX (UDP_HDR_MAX + 4096 + 4 + UDP_ICRC)
#define UDP_PKEY 0xffff         /* the default partition */
#define UDP_PSN_MASK 0xffffffu

/* Opcodes: the transport in the top 3 bits, the operation below (IBA 9.2). */
enum {
    UDP_TR_RC = 0x00, UDP_TR_UC = 0x20, UDP_TR_UD = 0x60,
    UDP_OP_SEND_FIRST = 0, UDP_OP_SEND_MIDDLE = 1, UDP_OP_SEND_LAST = 2,
    UDP_OP_SEND_LAST_IMM = 3, UDP_OP_SEND_ONLY = 4, UDP_OP_SEND_ONLY_IMM = 5,
    UDP_OP_WRITE_FIRST = 6, UDP_OP_WRITE_MIDDLE = 7, UDP_OP_WRITE_LAST = 8,
    UDP_OP_WRITE_LAST_IMM = 9, UDP_OP_WRITE_ONLY = 10, UDP_OP_WRITE_ONLY_IMM = 11,
    UDP_OP_READ_REQ = 12, UDP_OP_READ_RESP_FIRST = 13, UDP_OP_READ_RESP_MIDDLE = 14,
    UDP_OP_READ_RESP_LAST = 15, UDP_OP_READ_RESP_ONLY = 16, UDP_OP_ACK = 17,
    UDP_OP_ATOMIC_ACK = 18, UDP_OP_CMP_SWAP = 19, UDP_OP_FETCH_ADD = 20,
    /* IBA reserves 0xC0..0xFF for manufacturers: tbrt's receive credits */
    UDP_OP_TBRT_CREDIT = 0xC0,
};
#define UDP_CREDIT_MAGIC 0x54424352u /* "TBCR" */

/* AETH syndromes (IBA 9.7.5.1) */
#define UDP_AETH_ACK 0x1f       /* ACK, credit count "invalid" (no end-to-end credits) */
#define UDP_AETH_RNR 0x20       /* | the RNR timer code */
#define UDP_AETH_NAK_SEQ 0x60
#define UDP_AETH_NAK_INV 0x61
#define UDP_AETH_NAK_ACCESS 0x62
#define UDP_AETH_NAK_OP 0x63

/* What an opcode's packet carries. */
enum {
    UDP_F_RETH = 1, UDP_F_IMM = 2, UDP_F_AETH = 4, UDP_F_DETH = 8, UDP_F_ATOMIC = 16,
    UDP_F_ATOMIC_ACK = 32, UDP_F_PAYLOAD = 64, UDP_F_FIRST = 128, UDP_F_LAST = 256,
    UDP_F_REQ = 512, UDP_F_RESP = 1024, UDP_F_SEND = 2048, UDP_F_WRITE = 4096,
    UDP_F_VALID = 8192,
};
/* The flags of an opcode (0: not one this wire takes). */
unsigned udp_op_flags(uint8_t opcode);
const char *udp_op_name(uint8_t opcode);

/* A packet, parsed (udp_pkt_parse) or to build (udp_pkt_build). */
struct udp_pkt {
    uint8_t opcode;
    bool se, ackreq;
    uint32_t dqpn, psn;
    uint64_t va;                /* RETH / AtomicETH */
    uint32_t rkey, dmalen;
    uint8_t syndrome;           /* AETH */
    uint32_t msn;
    uint32_t qkey, sqpn;        /* DETH */
    uint32_t imm;               /* network order, as posted */
    uint64_t swap_add, compare, orig; /* AtomicETH, AtomicAckETH */
    const uint8_t *payload;     /* parse: inside the received buffer */
    uint32_t paylen;
};

/* The addresses of a packet on the wire: what the ICRC covers besides
 * the packet itself. GIDs (IPv4-mapped for IPv4). */
struct udp_path {
    uint8_t sgid[16], dgid[16];
    uint16_t sport, dport;
};
static inline bool udp_gid_v4(const uint8_t g[16])
{
    static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g, pfx, 12) == 0;
}
/* RoCEv2 UDP source port of a flow between two QPs (the kernel's and
 * mlx5's formula: a 20-bit flow label from the QPNs, folded to 14 bits,
 * in 0xC000..0xFFFF). */
uint16_t udp_flow_sport(uint32_t lqpn, uint32_t rqpn);

/* Write the headers of p into out (at most UDP_HDR_MAX); returns their
 * length. The payload and the ICRC go after them. */
uint32_t udp_pkt_headers(const struct udp_pkt *p, uint8_t pad, uint8_t *out);
/* Parse a received packet of len bytes (ICRC included, already checked);
 * 0, or -1 with the reason in why. */
int udp_pkt_parse(const uint8_t *buf, uint32_t len, struct udp_pkt *p, const char **why);
/* The ICRC of a packet: the headers hdr[0..hlen), then the payload pieces,
 * then pad zero bytes, over the path (RoCEv2 annex A17.3.3: the IP and UDP
 * header fields that routers change masked to ones, BTH resv8a too). */
struct udp_piece {
    const void *p;
    uint32_t len;
};
/* CRC-32 of IEEE 802.3, the register before the final inversion
 * (udp_crc.c): the fastest way the CPU has, checked at first use. */
uint32_t udp_crc32(uint32_t c, const void *buf, size_t n);
enum { UDP_CRC_TABLE, UDP_CRC_PCLMUL, UDP_CRC_VPCLMUL, UDP_CRC_WAYS };
const char *udp_crc_way(void);  /* which: "table", "pclmul", "vpclmul" */
/* One way (UDP_CRC_*), for tests: -1 if this CPU has not got it. */
int udp_crc32_by(int way, uint32_t c, const void *buf, size_t n, uint32_t *out);
uint32_t udp_icrc(const struct udp_path *path, const uint8_t *hdr, uint32_t hlen,
                  const struct udp_piece *pieces, int npieces, uint8_t pad);
/* Modelled IPv4/IPv6 + UDP headers of a packet of `len` UDP payload
 * bytes (for the ICRC with masked=true, for the capture with false):
 * returns their length (28 or 48). */
uint32_t udp_ip_headers(const struct udp_path *path, uint32_t len, bool masked, uint8_t *out);

/* ---- the endpoint ----------------------------------------------------------- */

struct udp_ep;
struct udp_pcap;
struct soft_wire_qp;

/* A packet held by faults (delay, rate, reorder), or waiting for the
 * batch: its own copy. */
struct udp_held {
    struct udp_held *next;
    uint64_t due_ns;
    uint32_t after;             /* reorder: packets still to pass first */
    bool rx;                    /* arrived (delay on the receive side) */
    struct sockaddr_in6 peer;   /* tx: where to; rx: from where */
    uint8_t src[16];            /* tx: our source address; rx: the packet's destination */
    uint32_t len;
    uint8_t data[];
};

/* Send one packet from wire w: headers, payload pieces (pointing into
 * registered memory: no copy unless faults hold it), ICRC. The path gives
 * the addresses; q the QP it belongs to (fault scope, counters; NULL:
 * the wire's). */
void udp_send(struct soft_wire *w, struct soft_wire_qp *q, const struct udp_path *path,
              const uint8_t *hdr, uint32_t hlen, const struct udp_piece *pieces, int npieces,
              uint8_t pad);
/* Flush what the endpoint batched (sendmmsg). */
void udp_ep_flush(struct udp_ep *ep);

/* ---- the wire's objects --------------------------------------------------------- */

#define UDP_READ_JOBS 16        /* READ requests a responder answers at once */
#define UDP_WINDOW 512          /* RC packets in flight at most */
#define UDP_ACK_EVERY 64        /* ask for an ACK at least this often */
#define UDP_NAK_AGAIN_NS 1000000ull /* RC: a NAK sequence error again after this (lost) */
#define UDP_CREDIT_PROBE_NS 4000000ull /* RC: out of credits this long: send one anyway
                                          (a lost credit update; RNR NAK otherwise) */
#define UDP_CREDIT_REFRESH_NS 5000000ull /* apple-uc: say the credits again (receives wait) */
#define UDP_CREDIT_IDLE_NS 20000000ull   /* ... (none wait): the peer hears we are here */
#define UDP_PEER_SILENT_NS 200000000ull  /* no credits heard that long: no peer (TN3205:
                                            frames to a dead peer just go, unreported) */

struct udp_mr {
    uint32_t key;
    uint32_t access;
    uint64_t addr, len;
};

/* A CQ's wake-up: an eventfd written once when a result lands for one of
 * its queues while it is armed (verbs' req_notify: readable only then). */
struct soft_wire_cq {
    struct soft_wire *w;
    int fd;
    _Atomic bool armed;
};

struct udp_swqe {               /* a posted send and how far it got */
    uint32_t opcode, send_flags, imm, num_sge;
    struct ibv_sge sge[SOFT_MAX_SGE];
    uint64_t total, raddr;
    uint64_t compare_add, swap; /* atomics */
    uint32_t rkey, remote_qpn, remote_qkey, flags;
    uint8_t dgid[16], sgid[16];
    uint8_t inl[SOFT_MAX_INLINE];
    uint32_t first_psn, npkts;  /* RC/UC: the PSNs it took */
    uint32_t rsn;               /* RC: SEND / WRITE with immediate: which receive of the
                                   peer's it takes (counted from 0 at RTS) */
    bool started, done;
    uint32_t read_pkts;         /* READ: responses placed; atomics: 1 once answered */
    struct soft_result res;
};

struct udp_rwqe {               /* a posted receive */
    uint32_t num_sge;
    struct ibv_sge sge[SOFT_MAX_SGE];
    uint64_t total;
    bool done;
    struct soft_result res;
};

#define UDP_ATOMIC_SAVED 16     /* atomics answered, kept for duplicates */
struct udp_atomic_done {        /* responder: an atomic carried out, for its duplicates */
    uint32_t psn;
    bool valid;
    uint64_t orig;
};

struct udp_read_job {           /* responder: a READ being answered */
    uint32_t psn, len, sent;    /* sent: bytes answered so far */
    uint32_t rkey;              /* checked again for every response */
    uint64_t va;
};

/* A shared receive queue: a ring of posted receives, taken oldest first
 * by whichever of its QPs a message arrives at (udp_srq.c). */
struct soft_wire_srq {
    struct soft_wire *w;
    struct soft_wire_srq *next; /* the wire's */
    void *cookie;
    uint32_t cap, srqn;
    struct udp_rwqe *rq;
    uint64_t prod;              /* posted so far (one past the newest index) */
    uint64_t taken;             /* claimed by a QP so far (the next to claim) */
    uint32_t limit;             /* armed limit; 0: disarmed */
    bool limit_hit;             /* crossed: an event at the next progress */
};

struct soft_wire_qp {
    struct soft_wire *w;
    struct soft_wire_qp *next;  /* the wire's */
    struct soft_wire_qp *ep_next; /* the endpoint's, for demultiplexing */
    void *cookie;
    uint32_t qpn, qp_type, rq_cap, sq_cap;
    struct soft_wire_qp_attr a;
    uint8_t mtu;                /* the route's limit on a.mtu, from RTR (0: none) */
    struct soft_wire_cq *recv_cq, *send_cq;
    struct udp_swqe *sq;
    struct udp_rwqe *rq;
    uint64_t sq_tail, sq_reaped, rq_prod, rq_reaped;
    bool stopped;
    uint64_t sq_fail;           /* stopped: sends from here on flush */
    bool event;                 /* went to ERR here: tell the objects */
    int cause;                  /* enum soft_wire_cause of that */
    bool wake;                  /* results for the objects: wake the CQs */
    struct udp_path path;       /* RC/UC: the connected peer */
    /* requester */
    uint64_t tx_wqe, tx_off;    /* next to send: WQE index and byte offset */
    uint32_t tx_psn;            /* next PSN to send */
    uint32_t max_psn;           /* one past the highest PSN ever sent (retransmit count) */
    uint64_t una_wqe;           /* oldest WQE not finished */
    uint32_t una_psn;           /* oldest PSN not acknowledged */
    uint64_t rto_ns;            /* retransmit deadline; 0: none armed */
    int retries, rnr_retries;   /* left */
    uint64_t rnr_until;         /* paused by an RNR NAK until then */
    bool rnr_probe;             /* after an RNR NAK: one packet in flight until an ACK */
    bool resend_rnr;            /* what is sent again now was RNR NAKed (not lost) */
    uint32_t since_ackreq;
    bool read_gap;              /* a READ response went missing: asked again */
    /* RC end-to-end credits (IBA 9.7.7.2): messages that take a receive
     * start while rsn_next < lsn, the limit the peer's ACKs give */
    uint32_t rsn_next, lsn;
    bool lsn_valid;             /* an ACK carried credits (else: no limit) */
    uint64_t credit_wait_ns;    /* out of credits since; past UDP_CREDIT_PROBE_NS one goes */
    uint64_t tlp_ns;            /* the tail loss probe's deadline (udp_req.c); 0: none */
    uint8_t tlp_shift;          /* probes since the last send or ACK: the next one waits 2^this */
    /* apple-uc credits: what the peer posted (its count), our SENDs */
    uint32_t peer_posted, sent_msgs;
    bool credit_flow;
    uint64_t credit_heard_ns;   /* when the peer's last credit packet came */
    /* responder */
    uint32_t epsn, msn;
    bool nak_sent, ack_due;
    bool ack_fresh;             /* ack_due came with a packet of this very turn */
    bool ack_held;              /* and was left for this turn by the last one */
    bool in_send;               /* the message being received is a SEND (it holds a receive) */
    uint64_t nak_ns;            /* when the last NAK went */
    uint64_t adv_limit;         /* RC credits: the receive index our last ACK let the peer reach */
    uint8_t ack_syndrome;
    uint32_t ack_psn;
    uint64_t rq_next;           /* the receive the next SEND takes */
    struct soft_wire_srq *srq;  /* receives come from it (NULL: rq) */
    bool srq_held;              /* an SRQ receive is this QP's (a message in it) */
    uint64_t srq_idx;           /* which */
    bool in_msg;                /* a SEND/WRITE message is being received */
    bool recv_bad;              /* its receive failed: drop the rest */
    uint64_t recv_off;          /* bytes of the message placed */
    uint64_t wr_va;             /* RDMA WRITE being received */
    uint32_t wr_left, wr_total, wr_rkey;
    struct udp_read_job rj[UDP_READ_JOBS];
    uint32_t rj_head, rj_tail;
    struct udp_atomic_done atomics[UDP_ATOMIC_SAVED];
    uint32_t atomic_next;
    uint32_t rq_base;           /* apple-uc: rq_prod when the QP was reset */
    uint32_t credit_told;       /* our count as we last sent it */
    uint64_t credit_ns;         /* when */
    struct soft_wire_stats st;
};

struct soft_wire {
    struct soft_wire_cfg cfg;
    char fabric[96], netdev[32], pcap_path[256];
    struct udp_ep *ep;
    struct soft_wire *ep_next;
    struct soft_wire_qp *qps;
    struct soft_wire_srq *srqs;
    uint32_t srq_gen;           /* SRQ numbers given so far */
    int evfd;                   /* the event fd (wire.h's event_fd): an eventfd */
    _Atomic bool ev_armed;      /* written once when an event comes while armed */
    struct udp_mr *mrs[SOFT_MAX_MR + 1]; /* by key >> 8 */
    uint32_t mr_gen;
    uint64_t rate_next_ns;      /* faults' rate cap: when the next packet may leave */
    struct soft_wire_stats st;  /* of QPs destroyed, and of the wire */
    uint64_t now;               /* of the current turn */
};

/* udp_ep.c, udp_tx.c, udp_rx.c */
int udp_ep_attach(struct soft_wire *w, char *why, size_t len);
void udp_ep_detach(struct soft_wire *w);
void udp_ep_lock(struct udp_ep *ep);
void udp_ep_unlock(struct udp_ep *ep);
/* Read and dispatch what arrived (on any wire of the endpoint); held
 * packets that are due go out or in. */
void udp_ep_poll(struct soft_wire *w);
/* An owner took a turn (its thread is polling: the helper need not). */
void udp_ep_turned(struct udp_ep *ep, uint64_t now);
/* A CQ was armed (its owner goes to sleep: the helper takes the turns) or
 * disarmed. */
void udp_ep_sleepers(struct udp_ep *ep, int delta);
/* The helper's turn for a wire (ep locked): the next deadline, 1 when more
 * is to be sent at once, 0 none (udp_wire.c). */
uint64_t udp_wire_turn(struct soft_wire *w);
/* Every ACK its QPs hold, sent now (ep locked). */
void udp_wire_send_held(struct soft_wire *w);
/* The earliest due time of held packets (0: none). */
uint64_t udp_ep_next_due(struct udp_ep *ep);
int udp_ep_fds(struct udp_ep *ep, int *fds, int max);
int udp_ep_qp_add(struct udp_ep *ep, struct soft_wire_qp *q, uint32_t want, char *why,
                  size_t len);
void udp_ep_qp_del(struct udp_ep *ep, struct soft_wire_qp *q);
uint16_t udp_ep_port(struct udp_ep *ep);
/* Our address for a source GID the QP names (its first GID of the family
 * otherwise); false if the endpoint has no socket of that family. */
bool udp_ep_can(struct udp_ep *ep, const uint8_t gid[16]);

/* udp_pcap.c */
struct udp_pcap *udp_pcap_open(const char *path, char *why, size_t len);
void udp_pcap_close(struct udp_pcap *pc);
/* One packet as it left (tx) or arrived; a comment names tbrt's own. */
void udp_pcap_packet(struct udp_pcap *pc, const struct udp_path *path, const uint8_t *pkt,
                     uint32_t len, bool tx);

/* udp_req.c: the requester's side of a QP */
void udp_req_transmit(struct soft_wire_qp *q);
void udp_req_timers(struct soft_wire_qp *q);
uint64_t udp_req_deadline(const struct soft_wire_qp *q);
/* An ACK/NAK, READ response or credit packet for this QP. */
void udp_req_recv(struct soft_wire_qp *q, const struct udp_pkt *p);
void udp_req_reset(struct soft_wire_qp *q);
/* Something can be sent now (window, RNR pause, credits of either kind). */
bool udp_req_ready(const struct soft_wire_qp *q);
/* AETH credit count field (IBA 9.7.7.2.4): the code for at most n, and
 * the count of a code (31: none given). */
uint8_t udp_credit_code(uint64_t n);
uint32_t udp_credit_count(uint8_t code);

/* udp_resp.c: the responder's side */
void udp_resp_recv(struct soft_wire_qp *q, const struct udp_pkt *p, const struct udp_path *from);
/* ACKs due, READ responses, credits: what the responder has to send. */
/* The responder's packets (READ responses, the ACK, credits). hold: an ACK
 * that a packet of this turn asked for may wait for the next turn of this
 * thread, which sends it in one batch with whatever that turn sends (the
 * answer a ping-pong's reply posts): one system call fewer per message. */
void udp_resp_transmit(struct soft_wire_qp *q, bool hold);
/* An ACK held for the next turn goes now (the QP changes or goes, the
 * process exits: no next turn may come). */
void udp_resp_send_held(struct soft_wire_qp *q);
uint64_t udp_resp_deadline(const struct soft_wire_qp *q);
void udp_resp_reset(struct soft_wire_qp *q);

/* udp_srq.c: the responder's receives, from the QP's queue or its SRQ */
bool udp_recv_ready(const struct soft_wire_qp *q);
/* The receive the message being received goes to (an SRQ's is claimed
 * now); NULL if none is posted. */
struct udp_rwqe *udp_recv_cur(struct soft_wire_qp *q);
/* Finish that receive with its result (the CQ is woken). */
void udp_recv_end(struct soft_wire_qp *q, const struct soft_result *res);
/* A QP that stops (ERR, RESET, destroyed) gives back or flushes the SRQ
 * receive it held. */
void udp_srq_release(struct soft_wire_qp *q, bool destroyed);
int udp_srq_events(struct soft_wire *w, struct soft_wire_event *ev, int max);
/* wire.h's srq_* operations */
int udp_srq_create(struct soft_wire *w, const struct soft_wire_srq_init *init,
                   struct soft_wire_srq **out, uint32_t *srqn, char *why, size_t len);
void udp_srq_destroy(struct soft_wire_srq *s);
void udp_srq_post(struct soft_wire_srq *s, uint64_t index, const struct soft_wire_recv *r);
void udp_srq_arm(struct soft_wire_srq *s, uint32_t limit);
int udp_srq_done(struct soft_wire_srq *s, uint64_t index, struct soft_result *r);

/* udp_wire.c */
/* Finish a send: its result (status, verr); fail = the QP goes to ERR. */
void udp_send_finish(struct soft_wire_qp *q, uint64_t index, uint8_t status, uint32_t verr);
/* Stop the QP (ERR), telling the objects at the next progress. */
void udp_qp_fail(struct soft_wire_qp *q);
/* Our MR of this key covering [va, va+len) with access; NULL if none. */
const struct udp_mr *udp_mr_find(struct soft_wire *w, uint32_t key, uint64_t va, uint64_t len,
                                 uint32_t access);
/* Copy len bytes at byte offset off of a scatter/gather list (lkeys of w)
 * from / to buf: 0, or -1 when an entry is not ours or out of its region. */
int udp_sge_copy(struct soft_wire *w, const struct ibv_sge *sge, uint32_t n, uint64_t off,
                 void *buf, uint64_t len, bool to_sge);
/* An event for the objects (a QP to ERR, an SRQ's limit): wake the event
 * fd if armed (and disarm), whichever thread found it. */
void udp_event_signal(struct soft_wire *w);
/* A result for this CQ's queues: wake it if armed (and disarm). */
void udp_cq_signal(struct soft_wire_cq *c);
extern int udp_debug;           /* TBRT_UDP_DEBUG: 1 timeouts, 2 QP states every 20 ms */
/* For the auto wire, which gives the key and the QPN shm made. */
int udp_mr_reg_key(struct soft_wire *w, void *addr, size_t len, uint32_t access, uint32_t *key,
                   char *why, size_t whylen);
int udp_qp_create_qpn(struct soft_wire *w, const struct soft_wire_qp_init *init,
                      struct soft_wire_qp **out, uint32_t *qpn, char *why, size_t len);
static inline int32_t udp_psn_diff(uint32_t a, uint32_t b)
{
    /* a - b in the 24-bit circle */
    return (int32_t)((a - b) << 8) >> 8;
}
static inline uint32_t udp_mtu_bytes(uint8_t mtu) { return 128u << mtu; }

#endif
