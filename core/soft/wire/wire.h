/* wire.h - what the soft device's objects need from a wire: the one
 * interface every wire of the soft device implements (shm/ today, udp/
 * next), and the data that crosses it.
 *
 * ---- Who owns what --------------------------------------------------------
 *
 * The objects layer (core/soft/soft_*.c) is the device as verbs see it. It owns
 *   - every rule of the API and of the personalities that can be checked
 *     where a call is made: limits, the QP state machine and its required
 *     attributes, queue depth (in frames on Apple), MR access rules, what
 *     may be posted in which state;
 *   - the records of posted work (wr_id, length, frames, signaled) and the
 *     queue indices, in process memory: a wire sees slot numbers, never a
 *     wr_id, so whatever a wire (or a peer behind it) reports, a completion
 *     names only work that was posted, with a length no longer than posted;
 *   - completion queues: a ring in process memory that only the objects
 *     write. Completions are made from wire results (struct soft_result),
 *     checked against the records, and taken across a CQ's queues in the
 *     order their results were stamped (the order the work finished in);
 *   - error state: moving a QP to ERR, flushing, breaking a QP on a bad
 *     value (with the text the wire or the check gave);
 *   - GIDs (the host's addresses) and port configuration.
 * A wire (core/soft/wire/<name>/) moves messages between queue pairs. It owns
 *   - addressing: queue pair numbers and how to find a QPN's owner (shm: a
 *     registry in /dev/shm; udp: the GID is an IP address, the QPN in BTH,
 *     the PSNs and the source GID of qp_attr);
 *   - where posted work waits and who executes it (shm: in shared memory,
 *     run by either end; udp: in the wire's own queues, run by the sender);
 *   - message semantics on the way: matching a SEND to the oldest posted
 *     receive (of the QP, or of its shared receive queue), its rules at the
 *     receiving end (credit flow, frames must match, receive too short),
 *     RNR and retry timers, RDMA access checks against the responder's
 *     keys, atomics (the responder's check of key, access and alignment, the
 *     operation itself, atomic against every other executor, and the
 *     original value placed in the requester's buffer), the UD GRH
 *     (soft_grh_build below, so both wires write the same bytes), the SRQ
 *     limit (noticed where receives are taken). These are the responder's
 *     and requester's behaviour of the transport, and on a packet wire they
 *     happen on either side of the network (the responder checks lengths
 *     and keys, the requester counts retries), so they cannot live above
 *     the wire. Each wire implements them; shared tables (RNR timer
 *     values, the ACK timeout formula) are in soft.h's personality data or
 *     here.
 *   - making memory reachable (shm: memfd backings peers map; udp: nothing
 *     beyond its own key table), the keys of its memory and their address
 *     space (an MR's iova: SGEs and remote addresses name iova, the wire
 *     turns them into process addresses);
 *   - wake-ups: a CQ's fd, armed through the wire, readable when the wire
 *     left a result for one of the CQ's queues, or when the objects made a
 *     completion themselves (cq_wake); the device's event fd (event_fd),
 *     readable when progress has an event to report or a port changed state;
 *   - its timers, which run without the owner calling in: when an RNR retry
 *     or an ACK timeout is due (or whatever the wire waits for expires), the
 *     wire makes the fd of the send queue's CQ readable if it is armed, so
 *     a program asleep on it polls, and the poll's turn (progress) runs the
 *     retry (an owner that polls runs it at its own turn: the wire need
 *     not wake anyone for a CQ not armed). One thread per process for every
 *     wire and device at most
 *     (soft_alarm, alarm.h): nothing runs the device from it, it only rings;
 *     a wire that finds a peer's work waiting on a timer it cannot arm
 *     itself (shm: running a peer's queue that got an RNR NAK) wakes the
 *     owner's send CQ instead, so the owner arms it;
 *   - its own checks of whatever reaches it from outside the process (a
 *     peer's shared memory, a packet): a bad value fails that send (a
 *     result saying so) or breaks the queue pair (an event), with a
 *     sentence naming the field in cfg->corrupt_why.
 *
 * Why message semantics are the wire's and not the objects': the shared
 * memory wire copies a message straight into the peer's posted receive in
 * one step, so matching, length checks and the copy are one act of the
 * executor; the UDP wire will segment by path MTU, number packets (PSN),
 * ACK, NAK and retransmit, and the receiving side matches and checks when
 * the first packet of a message arrives. Neither can report "delivered"
 * before its transport says so, and the objects cannot see a message in
 * flight. What both wires produce is the same: a result per finished work
 * request, and the objects do the rest. The rules a personality imposes on
 * delivery reach the wire as data (struct soft_wire_cfg), not as calls up.
 *
 * Nothing below calls up: a wire knows nothing of struct soft_dev or of the
 * verbs objects. It reports through return values, results it is asked for
 * (recv_done / send_done / srq_done), events from progress, and the
 * corrupt_why text.
 *
 * What stays the objects': the SRQ's records (wr_id, lengths) and which QP a
 * result belongs to (checked: it must be attached to that SRQ), the
 * asynchronous event queue the binding reads (made from the wire's events,
 * port state changes, CQ overruns, COMM_EST, the last WQE of an SRQ's QP in
 * ERR), completion timestamps (from the result's stamp), and every check
 * of a work request that needs no peer (atomic opcodes on RC only, one
 * 8-byte SGE for the result, SGE counts).
 *
 * ---- Faults ----------------------------------------------------------------
 *
 * Fault injection is one module between the objects and any wire
 * (faults.h): the objects open it with the device and hand it to the wire
 * (cfg->faults); the wire asks it once per unit it moves and does what it
 * answers. The unit is the wire's own: a message on shm (which has no
 * packets), a packet on udp. Today:
 *   - port state (a pulled cable), host-wide per device and port: both the
 *     objects (query_port, RTR) and the wires (a path is up when both ends'
 *     ports are ACTIVE) read it from faults;
 *   - drop, for UC and UD on shm: the message vanishes before it reaches a
 *     receive, its send completes as sent (UC never reports loss), and the
 *     receiver's engine finds the gap by its sequence number. RC over shm
 *     ignores drops: a reliable transport would retransmit until the
 *     message arrives, and a copy has no packets to lose; the UDP wire
 *     loses RC packets for real and recovers (go-back-N, timers).
 * The decision is a pure function of the configuration and the unit (the
 * message's index in its send queue), so either end of a shm queue pair
 * that executes a send decides the same, and a run replays exactly.
 * corrupt, duplicate, reorder, delay, bandwidth and partition are packet
 * faults: the UDP wire's (issue 10).
 *
 * ---- Threads ---------------------------------------------------------------
 *
 * A wire is used by one thread at a time per device (the objects take any
 * lock). What it shares with other processes it makes safe against them. */
#ifndef TBRT_SOFT_WIRE_H
#define TBRT_SOFT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tbrt.h"

/* Limits every wire supports (the objects check them at post). SGEs: what
 * a ConnectX-5 (mlx5) reports as max_sge, so programs sized for one fit
 * (UCX's ud_verbs asks 6, MPIs ask what the device has). */
#define SOFT_MAX_SGE 30
#define SOFT_MAX_INLINE 256
#define SOFT_MAX_QP_WR 32768    /* the largest queue of any personality */
#define SOFT_MAX_MR 4095        /* regions per device */
#define SOFT_MAX_SRQ 1024       /* shared receive queues per device */
#define SOFT_ATOMIC_SIZE 8      /* atomics act on 8 aligned bytes (IB spec 9.4.5) */

/* Rings are a power of two long (at least n, 1 <= n <= SOFT_MAX_QP_WR): a
 * slot is then index & (size - 1), not a division (a dozen cycles or more,
 * and a message meets several on its way). The queue's own limit stays n. */
static inline uint32_t soft_ring_size(uint32_t n)
{
    uint32_t size = 1;
    while (size < n)
        size <<= 1;
    return size;
}

/* TN3205: Thunderbolt RDMA moves 4 KiB frames; queue depths count frames,
 * and a SEND and its RECV must cover the same number. */
#define SOFT_FRAME 4096u
static inline uint32_t soft_frames(uint64_t bytes)
{
    uint64_t f = (bytes + SOFT_FRAME - 1) / SOFT_FRAME;
    return f ? (uint32_t)f : 1;
}

/* vendor_err codes of results and completions; their text is the device's
 * (soft_dev.c: soft_vendor_err). */
enum soft_verr {
    SOFT_VERR_NONE = 0,
    SOFT_VERR_FRAMES = 0x5101,     /* apple: SEND/RECV frame counts differ */
    SOFT_VERR_RECV_SHORT,          /* receive buffer smaller than the message */
    SOFT_VERR_RNR,                 /* no receive posted, retries exhausted */
    SOFT_VERR_PEER_GONE,           /* no ACK: peer QP gone or not ready */
    SOFT_VERR_LKEY,                /* bad lkey or out of its bounds */
    SOFT_VERR_RKEY,                /* bad rkey, bounds or access */
    SOFT_VERR_NOT_SHARED,          /* receive buffer memory cannot be shared */
    SOFT_VERR_FLUSH,               /* flushed: the QP is in ERR */
    SOFT_VERR_MSG_SIZE,            /* message larger than max_msg_sz */
    SOFT_VERR_REMOTE,              /* the responder reported an error */
    SOFT_VERR_OPCODE,              /* opcode not valid for this QP type */
    SOFT_VERR_QKEY,                /* UD: qkey mismatch (dropped) */
    SOFT_VERR_PORT_DOWN,           /* a port on the path is not ACTIVE */
    SOFT_VERR_CORRUPT,             /* a bad value from outside the process */
    SOFT_VERR_ALIGN,               /* atomic: remote_addr not 8-byte aligned */
    SOFT_VERR_ATOMIC_ACCESS,       /* atomic: the region lacks REMOTE_ATOMIC */
};

struct soft_faults;
struct soft_wire;               /* a wire opened for one device */
struct soft_wire_qp;            /* the wire's half of a queue pair */
struct soft_wire_cq;            /* the wire's half of a completion queue (its wake-up) */
struct soft_wire_srq;           /* the wire's half of a shared receive queue */

/* What finished work reports: the wire fills it; the objects check it
 * against their records and make the completion.
 *
 * Scatter-to-CQE (as mlx5 writes a received message of up to 32 bytes
 * into the CQE itself, and the provider copies it into the receive's
 * buffers when it polls): a wire may hand a small received message over
 * in the result instead of placing it in the receive's buffers. Then
 * data_len == byte_len bytes are in data[], the buffers are untouched, and
 * the objects place the bytes into the scatter list they recorded at
 * post_recv (each lkey checked with mr_local, as the wire would have), so
 * the message crosses from the executor to the owner in the result's cache
 * lines alone. A wire that places every message leaves data_len 0. */
#define SOFT_RESULT_DATA 32
struct soft_result {
    uint64_t stamp;             /* soft_stamp() when it finished: the order of a CQ's
                                   completions, and their timestamps (soft_stamp_ns) */
    uint32_t byte_len;          /* receives: bytes placed (sends: ignored) */
    uint32_t vendor_err;        /* SOFT_VERR_* (soft.h) */
    uint32_t imm;               /* network order, as posted */
    uint32_t src_qp;
    uint8_t status;             /* enum ibv_wc_status */
    uint8_t opcode;             /* receives: IBV_WC_RECV or IBV_WC_RECV_RDMA_WITH_IMM */
    uint16_t wc_flags;          /* IBV_WC_GRH | IBV_WC_WITH_IMM | SOFT_WC_GRH_IPV4 */
    uint32_t qp_num;            /* SRQ receives: the QP that received it (the objects
                                   check it is one of the SRQ's); otherwise 0 */
    uint8_t data_len;           /* receives: bytes of the message in data[] (scatter-to-CQE) */
    uint8_t data[SOFT_RESULT_DATA];
};

/* A cheap clock shared by the processes of a host, for stamps (the TSC
 * where there is one: about 10 ns, against 25 for clock_gettime here). */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t soft_stamp(void) { return __rdtsc(); }
#elif defined(__aarch64__)
static inline uint64_t soft_stamp(void)
{
    uint64_t v;
    __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
}
#else
#include <time.h>
static inline uint64_t soft_stamp(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
#endif

/* A stamp as CLOCK_MONOTONIC nanoseconds (completion timestamps): the
 * objects convert with a rate measured once per process (wire/stamp.c). */
uint64_t soft_stamp_ns(uint64_t stamp);

/* The 40 bytes in front of a UD receive (IB spec 8.3, RoCE v2): an IPv6
 * header between IPv6 GIDs; between IPv4-mapped GIDs (::ffff:a.b.c.d) the
 * first 20 bytes are zero and an IPv4 header fills the last 20, as RoCE v2
 * NICs deliver it. Both wires write exactly this (wire/grh.c). */
#define SOFT_GRH_BYTES 40
void soft_grh_build(uint8_t grh[SOFT_GRH_BYTES], const uint8_t sgid[16], const uint8_t dgid[16],
                    uint32_t payload_len);

/* In a result's wc_flags: the GRH in front of this UD receive is the IPv4
 * form. The objects report the RoCE packet type in wc.sl as mlx5 does
 * (0xa: IPv4 over UDP, 0x9: IPv6 over UDP), which UCX's ud_verbs reads to
 * know where the destination address sits in the GRH; it never reaches
 * wc.wc_flags. soft_gid_ipv4 says which form soft_grh_build writes. */
#define SOFT_WC_GRH_IPV4 0x80
static inline bool soft_gid_ipv4(const uint8_t g[16])
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g, prefix, sizeof prefix) == 0;
}

/* How a device's personality shapes delivery, and what the wire needs to
 * know of the device. */
struct soft_wire_cfg {
    const char *fabric;         /* "<TBRT_SOFT_FABRIC>-<personality>": who may meet */
    int dev_index;              /* soft<dev_index> */
    bool credit_flow;           /* a SEND waits for a posted receive (no RNR) */
    bool frames_must_match;     /* SEND and RECV must cover the same 4 KiB frames */
    struct soft_faults *faults; /* asked per unit moved; port states */
    char *corrupt_why;          /* where the wire says what bad value it met */
    size_t corrupt_len;
    /* packet wires (udp) */
    uint16_t udp_port;          /* RoCEv2 destination port (4791, TBRT_SOFT_UDP_PORT) */
    const char *netdev;         /* bound to this interface, or NULL: every address */
    const char *pcap;           /* write every packet here (TBRT_PCAP), or NULL */
};

/* What a wire counts (dev:stats(), link:stats()): per device, or per QP
 * where asked by QPN. A wire without packets counts messages as packets. */
struct soft_wire_stats {
    uint64_t pkts_sent, pkts_recv;
    uint64_t bytes_sent, bytes_recv;  /* UDP payload bytes */
    uint64_t retransmits;             /* packets sent again for loss (timeout, NAK seq) */
    uint64_t timeouts;                /* retransmit timer expiries */
    uint64_t naks_sent, naks_recv;    /* NAK sequence error / other NAKs */
    uint64_t rnr_naks_sent, rnr_naks_recv;
    uint64_t duplicates;              /* duplicate requests met by a responder */
    uint64_t out_of_order;            /* packets beyond the expected PSN */
    uint64_t drops_injected;          /* by faults: dropped, partitioned */
    uint64_t corrupt_injected, dups_injected, reordered_injected, delayed_injected;
    uint64_t icrc_failures;           /* packets the ICRC check discarded */
    uint64_t acks_sent, acks_recv;
    uint64_t credits_sent, credits_recv; /* apple-uc credit packets (tbrt's own) */
    uint64_t bad_packets;             /* malformed, unknown QP, wrong state */
    uint64_t rnr_resends;             /* packets sent again after an RNR NAK (not loss) */
    uint64_t tail_probes;             /* RC: last packets sent again for want of an ACK
                                         (before the retransmit timer; not counted above) */
    uint64_t copies_shared;           /* shm: our sends whose copy the target's process
                                         helped with (shm_copy.c) */
    uint64_t pieces_helped, bytes_helped; /* shm: what we copied for peers' sends */
    uint64_t sends_refused;           /* udp: packets this host's kernel would not send (a
                                         full socket buffer, a firewall's drop, no route):
                                         lost before the wire */
    uint64_t gso_refused;             /* udp: GSO runs the kernel refused (sent one by one,
                                         and runs of that size no more) */
    uint64_t direct_writes;           /* shm: small inline WRITEs run at post, the queue
                                         empty (shm_direct.c) */
};

/* A queue pair, as created. */
struct soft_wire_qp_init {
    uint32_t qp_type;           /* IBV_QPT_RC, UC, UD */
    uint32_t rq_cap, sq_cap;    /* slots (the objects enforce the depths); rq_cap is
                                   1 and unused with an SRQ */
    struct soft_wire_cq *recv_cq, *send_cq;
    struct soft_wire_srq *srq;  /* receives come from this SRQ (NULL: its own queue) */
    void *cookie;               /* given back in events */
};

/* A shared receive queue, as created: several QPs of the device take their
 * receives from it, oldest first, whichever QP a message arrives at. */
struct soft_wire_srq_init {
    uint32_t cap;               /* slots (the objects enforce max_wr) */
    void *cookie;               /* given back in events */
};

/* Its attributes after each change of state or attributes. */
struct soft_wire_qp_attr {
    uint32_t state;             /* enum ibv_qp_state */
    uint32_t qkey;
    uint32_t dest_qpn;          /* RC/UC: the connected peer */
    uint8_t port;
    uint8_t mtu;                /* enum ibv_mtu (path MTU) */
    uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
    uint8_t dgid[16];           /* RC/UC: the peer's GID */
    /* what a packet wire needs besides (shm ignores them) */
    uint32_t sq_psn, rq_psn;    /* first PSN sent / expected (24 bits) */
    uint8_t sgid[16];           /* RC/UC: our GID the path leaves from (sgid_index) */
};

/* A posted receive: its scatter list (lkeys of this device). */
struct soft_wire_recv {
    uint32_t num_sge;
    uint64_t total;
    const struct ibv_sge *sge;
};

/* A posted send, checked by the objects: opcode valid for the QP type,
 * total the sum of the gather list (or the inline bytes), within limits. */
#define SOFT_SEND_DGID_LOCAL 1u /* UD: the destination GID is on this host */
struct soft_wire_send {
    uint32_t opcode;            /* enum ibv_wr_opcode */
    uint32_t send_flags;
    uint32_t imm_data;
    uint32_t num_sge;
    const struct ibv_sge *sge;  /* atomics: one SGE of 8 bytes, the original value's place */
    uint64_t total;
    uint64_t remote_addr;       /* RDMA and atomics (in the responder MR's iova) */
    uint32_t rkey;
    uint64_t compare_add;       /* atomics: CMP_AND_SWP's compare, FETCH_AND_ADD's add */
    uint64_t swap;              /* atomics: CMP_AND_SWP's new value */
    uint32_t remote_qpn, remote_qkey; /* UD */
    uint8_t dgid[16], sgid[16]; /* UD: from the address handle, the source GID resolved */
    uint32_t flags;             /* SOFT_SEND_* */
};

/* Where a connected QP's peer is (qp_peer): not known; asleep (waiting
 * for a wake-up: its completion queue is armed); awake on another CPU (it
 * may answer any moment); awake on the caller's own CPU (it cannot answer
 * while the caller spins). */
enum { SOFT_PEER_UNKNOWN, SOFT_PEER_ASLEEP, SOFT_PEER_AWAKE, SOFT_PEER_HERE };

/* What progress found for the objects to act on. */
enum soft_wire_event_kind {
    SOFT_WIRE_ERR = 1,          /* the QP went to ERR (a peer said so, or a send failed) */
    SOFT_WIRE_BROKEN,           /* a bad value from outside: corrupt_why says which */
    SOFT_WIRE_SRQ_LIMIT,        /* an SRQ's armed limit was crossed (cookie: the SRQ's);
                                   the limit is disarmed */
};
/* Why a QP went to ERR (SOFT_WIRE_ERR), for the asynchronous event the
 * objects report: a failed send of ours says so in its completion (NONE);
 * as a responder, a peer's request broke the rules (REQ: too long for the
 * receive, an opcode it may not send; ACCESS: a bad rkey, range or access
 * right); anything else the peer or the wire could not say (FATAL). */
enum soft_wire_cause {
    SOFT_WIRE_CAUSE_NONE = 0,
    SOFT_WIRE_CAUSE_FATAL,      /* IBV_EVENT_QP_FATAL */
    SOFT_WIRE_CAUSE_REQ,        /* IBV_EVENT_QP_REQ_ERR */
    SOFT_WIRE_CAUSE_ACCESS,     /* IBV_EVENT_QP_ACCESS_ERR */
};
struct soft_wire_event {
    void *cookie;               /* the QP's (or SRQ's), from its init */
    int kind;
    int cause;                  /* SOFT_WIRE_ERR: enum soft_wire_cause */
};

struct soft_wire_ops {
    const char *name;
    /* Open for one device; 0 or -errno with the reason in why. */
    int (*open)(const struct soft_wire_cfg *cfg, struct soft_wire **out, char *why, size_t len);
    void (*close)(struct soft_wire *w);
    /* Can a connected QP reach this GID (local: one of this host's)? If not,
     * why says what this wire reaches. */
    bool (*reaches)(struct soft_wire *w, const uint8_t gid[16], bool local, char *why,
                    size_t len);

    /* Memory: make [addr, addr+len) reachable with these IBV_ACCESS_* bits,
     * named by SGEs and remote addresses as [iova, iova+len) (iova = addr
     * for ibv_reg_mr); the key (lkey = rkey) in *key. */
    int (*mr_reg)(struct soft_wire *w, void *addr, size_t len, uint64_t iova, uint32_t access,
                  uint32_t *key, char *why, size_t whylen);
    void (*mr_dereg)(struct soft_wire *w, uint32_t key);
    /* Optional (NULL: the objects find the region in their own list):
     * resolve [addr, addr+len) of one of this device's keys, needing these
     * IBV_ACCESS_* bits, to a pointer in this process. 0, or -EINVAL /
     * -ENOENT (no such key), -ERANGE (out of its bounds), -EACCES, -EPERM
     * (a receive the wire could not have placed there: SOFT_VERR_NOT_SHARED).
     * For the objects placing a scatter-to-CQE result (soft_result.data). */
    int (*mr_local)(struct soft_wire *w, uint32_t key, uint64_t addr, uint64_t len,
                    uint32_t access, void **out);

    /* Completion queues: the wake-up (its fd in *fd), arming it, draining it. */
    int (*cq_create)(struct soft_wire *w, struct soft_wire_cq **out, int *fd, char *why,
                     size_t len);
    void (*cq_destroy)(struct soft_wire_cq *c);
    void (*cq_arm)(struct soft_wire_cq *c);
    int (*cq_ack)(struct soft_wire_cq *c);
    /* The objects made completions of this CQ themselves, not from a
     * result the wire left (the flushes of a QP moved to ERR, a work
     * request posted to a QP in ERR): make the fd readable if the CQ is
     * armed, and disarm it, exactly as the wire does when it leaves a
     * result. Called by the owner, in its own thread. */
    void (*cq_wake)(struct soft_wire_cq *c);

    /* Shared receive queues; the SRQ number in *srqn. */
    int (*srq_create)(struct soft_wire *w, const struct soft_wire_srq_init *init,
                      struct soft_wire_srq **out, uint32_t *srqn, char *why, size_t len);
    void (*srq_destroy)(struct soft_wire_srq *s);
    /* Receive `index` of the SRQ (as post_recv, same slot rule). */
    void (*srq_post)(struct soft_wire_srq *s, uint64_t index, const struct soft_wire_recv *r);
    /* Arm the limit: once fewer than `limit` posted receives wait (counted
     * as `posted` - taken, posted being what the objects posted so far), a
     * SOFT_WIRE_SRQ_LIMIT event comes from progress, and the event fd wakes;
     * 0 disarms. Armed when already below: the event comes at once. */
    void (*srq_arm)(struct soft_wire_srq *s, uint32_t limit);
    /* As recv_done, for the SRQ's receive `index`: r->qp_num says which QP. */
    int (*srq_done)(struct soft_wire_srq *s, uint64_t index, struct soft_result *r);

    /* Queue pairs; the QPN in *qpn. */
    int (*qp_create)(struct soft_wire *w, const struct soft_wire_qp_init *init,
                     struct soft_wire_qp **out, uint32_t *qpn, char *why, size_t len);
    void (*qp_destroy)(struct soft_wire_qp *q);
    /* After every change. To ERR: nothing more executes; from then on the
     * results of what had not finished are flushed (IBV_WC_WR_FLUSH_ERR).
     * To RESET: everything posted is forgotten, no results. */
    void (*qp_modify)(struct soft_wire_qp *q, const struct soft_wire_qp_attr *a);

    /* Work, by index (0, 1, 2... per queue; the slot is index % cap). The
     * objects post an index only once the previous one in that slot was
     * taken (recv_done / send_done said 1). */
    void (*post_recv)(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_recv *r);
    void (*post_send)(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_send *s);
    /* Optional: send `index` is one small inline RDMA WRITE, len (> 0)
     * bytes from data to remote_addr under rkey, checked by the objects
     * against the API's rules: run it now if nothing can go other than well,
     * as mlx5's BlueFlame writes a small WQE straight into the NIC. true: it
     * ran (posted and finished; its result comes from send_done as any; the
     * queue is empty again, no doorbell needed). false: nothing was done or
     * changed; the objects post it with post_send, which decides and
     * reports. */
    bool (*write_inline)(struct soft_wire_qp *q, uint64_t index, const void *data, uint32_t len,
                         uint64_t remote_addr, uint32_t rkey);
    /* Optional: sends were just posted to this queue; run them now, as a
     * NIC starts on its doorbell, without a whole turn of the wire (all its
     * queues, then its events). false: not done here; the objects then give
     * the wire its turn. What went wrong comes out of the next progress, as
     * a QP's move to ERR comes after the post on hardware. */
    bool (*doorbell)(struct soft_wire_qp *q);
    /* The hardware's turn: move what can move. Up to max events in ev;
     * returns how many. */
    int (*progress)(struct soft_wire *w, struct soft_wire_event *ev, int max);
    /* Optional (NULL: always take the turn): is there nothing for a turn
     * of progress to do now? No event to report, no queue with sends
     * waiting, nothing a peer asked of us. A poll that finds the wire quiet
     * skips the turn (as a NIC with nothing queued idles): the turn is most
     * of what an idle poll costs a software device. No syscall, no clock. */
    bool (*quiet)(struct soft_wire *w);
    /* The device's event fd: readable when progress may have an event (a
     * peer moved one of our QPs to ERR, an SRQ limit was crossed) or some
     * process of the host changed a port state (ports_changed). Armed by
     * event_arm; reading it is event_ack's. */
    int (*event_fd)(struct soft_wire *w);
    void (*event_arm)(struct soft_wire *w);
    void (*event_ack)(struct soft_wire *w);
    /* This process changed a port state (soft_faults_set_port): wake the
     * event fd of every device of the host that may see it. */
    void (*ports_changed)(struct soft_wire *w);
    /* Has work `index` of this queue finished? 1 with its result in *r (then
     * it is the objects': the wire forgets it), 0 not yet, -1 a bad value
     * (corrupt_why says which; the objects break the QP). Asked in order:
     * index is the oldest the objects have not taken. */
    int (*recv_done)(struct soft_wire_qp *q, uint64_t index, struct soft_result *r);
    int (*send_done)(struct soft_wire_qp *q, uint64_t index, struct soft_result *r);

    /* Optional (NULL: nothing known). For a waiter choosing to spin, yield
     * or sleep: say that this QP's owner is waiting on CPU `cpu` now (what
     * the peer's call sees), and return where the connected peer's owner
     * is: SOFT_PEER_*. No syscall: it is called between polls. */
    int (*qp_peer)(struct soft_wire_qp *q, int cpu);

    /* Optional (NULL: no counters): add this wire's counters, of one QP when
     * qpn != 0, to *s. */
    void (*stats)(struct soft_wire *w, uint32_t qpn, struct soft_wire_stats *s);
};

/* The wires there are: shm (this host), udp (RoCEv2 over UDP), and auto
 * (per queue pair at RTR: shm when the peer's GID is this host's, else udp). */
extern const struct soft_wire_ops soft_wire_shm;
extern const struct soft_wire_ops soft_wire_udp;
extern const struct soft_wire_ops soft_wire_auto;

#endif
