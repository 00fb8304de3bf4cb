/* soft.h - the software RDMA device: internal structures shared by its files.
 *
 * The soft device runs in user space with no kernel module. Its wire, for
 * now, is shared memory between processes on one host:
 *
 *   fabric    one registry file per personality (/dev/shm/tbrt-<uid>-soft-
 *             <personality>) mapping queue pair numbers to the process and
 *             memory that hold them; QPNs are fabric-wide, like a subnet.
 *   context   each opened device owns a memfd "context segment" holding the
 *             parts of its objects that peers must touch: queue pair blocks
 *             (state, receive queue), completion queue rings, the MR table.
 *             Peers map it through /proc/<pid>/fd/<fd>.
 *   memory    registering memory swaps its pages for a memfd mapping with the
 *             same contents at the same address, so a peer can map the
 *             registered range and copy straight into it.
 *
 * A transfer is therefore one memcpy from the sender's registered buffer
 * into the receiver's posted buffer (the "DMA"), followed by completions
 * written into both completion queues. Nothing is staged in between.
 *
 * Who does the copy: the send queue lives in shared memory too, and either
 * end may execute it (one at a time, under a lock in the queue): the sender
 * when it posts or polls, the receiver when it posts a receive or polls with
 * nothing to do. So a posted send moves without its sender calling in
 * again, as on hardware, and the copying spreads over both processes.
 *
 * Threading: one device context is used by one thread at a time. The shared
 * structures are safe against the peer processes (atomics), not against two
 * local threads. */
#ifndef TBRT_SOFT_H
#define TBRT_SOFT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "dev/dev.h"

/* ---- personalities ------------------------------------------------------ */

/* TN3205: Thunderbolt RDMA moves 4 KiB frames; queue depths count frames. */
#define SOFT_FRAME 4096u
/* TN3205: at most 4095 frames per queue, so 4095 x 4 KiB per message. */
#define SOFT_APPLE_MAX_FRAMES 4095u
#define SOFT_APPLE_MAX_MSG (SOFT_APPLE_MAX_FRAMES * SOFT_FRAME) /* 16,773,120 */
#define SOFT_APPLE_MAX_QP 10
#define SOFT_APPLE_MAX_MR (4ull << 30)
#define SOFT_MAX_SGE 4
#define SOFT_MAX_PORTS 2

struct soft_personality {
    const char *name;
    int flavor;
    unsigned qp_types;          /* bit (1 << IBV_QPT_x) per allowed type */
    int max_qp;                 /* per device context */
    bool depth_in_frames;       /* max_send_wr/max_recv_wr count 4 KiB frames */
    uint32_t max_qp_wr;
    uint64_t max_msg;
    uint64_t max_mr;
    bool mr_needs_remote_access; /* LOCAL_WRITE alone fails */
    bool recv_needs_rts;        /* post_recv before RTS fails */
    bool frames_must_match;     /* SEND and RECV must cover the same frames */
    bool credit_flow;           /* a SEND waits for a posted RECV (no RNR) */
    bool err_breaks_dereg;      /* QP moved to ERR => MR dereg fails */
    bool gid_types;             /* the provider reports GID types */
    int gid_tbl_len;
    int nports;
    const char *ports;          /* default port states */
    enum ibv_mtu mtu;
};

const struct soft_personality *soft_personality_find(const char *name);
const char *soft_personality_names(void);

/* vendor_err codes on error completions, with text in soft_vendor_err() */
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
};

/* ---- shared memory layouts ---------------------------------------------- */

#define SOFT_CTX_MAGIC 0x54464f5354524254ull /* "TBRTSOFT" */
#define SOFT_CTX_VERSION 1
#define SOFT_CTX_SIZE (256ull << 20)         /* sparse: pages appear on use */
#define SOFT_MR_MAX 4096
#define SOFT_SOCK_NAME 48

/* A registered region, in the owner's MR table; peers read it to resolve
 * keys. key == 0 marks a free entry. Written by the owner only. */
struct soft_mr_entry {
    _Atomic uint32_t key;
    int32_t memfd;              /* fd in the owner's table; -1: not shareable */
    uint32_t access;
    _Atomic uint32_t epoch;     /* bumped when the memfd behind it changes */
    uint64_t addr;              /* virtual address in the owner */
    uint64_t length;
    uint64_t fd_off;            /* where addr sits inside the memfd */
    uint64_t fd_len;            /* size of the memfd */
};

struct soft_ctx_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t pid;
    uint64_t ctx_id;
    uint64_t mr_off;            /* offset of the MR table */
    uint64_t used;              /* bump allocator (owner only) */
    /* bumped by a peer that changed one of our QPs (moved it to ERR) */
    _Atomic uint64_t attention;
};

/* Fields written by different processes sit on separate cache lines, so a
 * write by one end does not steal the line the other end is polling. */
#define SOFT_LINE 64
#define SOFT_OWN_LINE _Alignas(SOFT_LINE)

/* A posted receive. With one or two scatter entries it is one cache line:
 * copy it with soft_rqe_copy, which touches the second only when needed. */
struct soft_rqe {
    /* index + 1 once the entry is posted: a sender reads this line alone
     * to know, not the owner's producer index as well */
    SOFT_OWN_LINE _Atomic uint64_t seq;
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t frames;
    uint64_t total;
    struct ibv_sge sge[SOFT_MAX_SGE];
};

/* Copy the contents (not seq), touching a second line only when needed. */
static inline void soft_rqe_copy(struct soft_rqe *to, const struct soft_rqe *from)
{
    size_t n = from->num_sge <= SOFT_MAX_SGE ? from->num_sge : SOFT_MAX_SGE;
    memcpy(&to->wr_id, &from->wr_id,
           offsetof(struct soft_rqe, sge) - offsetof(struct soft_rqe, wr_id) +
               n * sizeof from->sge[0]);
    to->num_sge = (uint32_t)n;
}

/* Is receive number c of this queue posted (and not yet taken)? */
static inline bool soft_rq_posted(struct soft_rqe *rq, uint32_t cap, uint64_t c)
{
    return atomic_load_explicit(&rq[c % cap].seq, memory_order_acquire) == c + 1;
}

/* A posted send, in shared memory so either end can execute it. No
 * pointers: the address handle of a UD send is copied in. */
struct soft_swr {
    uint64_t wr_id;
    uint32_t opcode;            /* enum ibv_wr_opcode */
    uint32_t send_flags;
    uint32_t imm_data;          /* as given (network order) */
    uint32_t num_sge;
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t remote_qpn;        /* UD */
    uint32_t remote_qkey;       /* UD */
    uint8_t dgid[16];           /* UD: from the address handle */
    uint8_t sgid_index;
    uint8_t signaled;
    uint16_t pad;
    uint32_t frames;
    uint64_t total;
    int32_t rnr_count;
    uint32_t pad2;
    uint64_t first_try_ns;      /* RC: first try without an answer */
    uint64_t next_try_ns;       /* RC: after an RNR NAK */
    struct ibv_sge sge[SOFT_MAX_SGE];
    uint8_t inl[256];           /* IBV_SEND_INLINE data, copied at post */
};

/* The shared half of a queue pair: state, receive queue, send queue. */
struct soft_qp_shared {
    /* read mostly */
    _Atomic uint32_t state;     /* enum ibv_qp_state */
    _Atomic uint32_t remote_err; /* set by whoever moved it to ERR remotely */
    uint32_t qp_type;
    uint32_t qpn;
    uint32_t pd;
    uint32_t qkey;
    uint32_t min_rnr_timer;     /* responder's RNR NAK timer code */
    uint32_t rq_cap;            /* slots in rq[] */
    uint64_t recv_cq_off;       /* CQ blocks in the owner ctx */
    uint64_t send_cq_off;
    uint32_t sq_cap;
    uint32_t dest_qpn;          /* RC/UC: the connected peer, from RTR */
    uint64_t sq_off;            /* soft_swr[sq_cap] at this offset in the block */
    uint8_t timeout, retry_cnt, rnr_retry, mtu;
    uint8_t port;               /* its port and device (soft<dev>), for link state */
    uint8_t dev_index;
    /* receive queue: slots [rq_cons, rq_prod) are posted (senders look at
     * the slots' seq, not at rq_prod) */
    SOFT_OWN_LINE _Atomic uint64_t rq_prod;     /* owner: next slot to fill */
    SOFT_OWN_LINE _Atomic uint64_t rq_cons;     /* senders: next slot to take (CAS) */
    /* a sender found no receive here and stopped: run its queue when we post
     * one (written by the sender only then, so it costs nothing otherwise) */
    SOFT_OWN_LINE _Atomic uint32_t help_wanted;
    /* send queue: slots [sq_head, sq_tail) wait to be executed */
    SOFT_OWN_LINE _Atomic uint64_t sq_tail;     /* owner: next free slot */
    SOFT_OWN_LINE _Atomic int32_t sq_lock;      /* pid of the executor, 0 when free */
    _Atomic uint64_t sq_head;   /* executor: next to run */
    struct soft_rqe rq[];
};

static inline struct soft_swr *soft_sq(struct soft_qp_shared *s)
{
    return (struct soft_swr *)((char *)s + s->sq_off);
}

struct soft_cqe {
    SOFT_OWN_LINE _Atomic uint64_t seq; /* ticket + 1 once the entry is written */
    struct ibv_wc wc;
};

/* The shared half of a completion queue: a multi-producer ring (the owner
 * for send completions, peers for receive completions), one consumer. */
struct soft_cq_shared {
    uint32_t cap;               /* power of two */
    char sock[SOFT_SOCK_NAME];  /* abstract socket that wakes the owner */
    SOFT_OWN_LINE _Atomic uint64_t prod;        /* producers (CAS) */
    SOFT_OWN_LINE _Atomic uint64_t cons;        /* the owner */
    SOFT_OWN_LINE _Atomic uint32_t armed;       /* owner sets, a producer clears */
    _Atomic uint32_t overrun;
    struct soft_cqe ring[];
};

/* ---- the fabric registry ------------------------------------------------ */

#define SOFT_FABRIC_MAGIC 0x4342414654524254ull /* "TBRTFABC" */
#define SOFT_FABRIC_VERSION 2
#define SOFT_MAX_DEVS 16
#define SOFT_SLOTS 1024               /* QPN = gen << 10 | slot */
#define SOFT_SLOT_BITS 10

struct soft_slot {
    uint32_t qpn;               /* 0: free */
    int32_t pid;
    int32_t ctx_fd;
    uint32_t qp_type;
    uint64_t ctx_id;
    uint64_t qp_off;            /* the QP's shared block in the ctx */
    uint32_t gen;
    uint32_t pad;
};

/* A port state set at run time (a cable pulled), by any process: it holds
 * while that process lives, so a crashed fault injector cannot leave a port
 * down for good. */
struct soft_port_override {
    _Atomic uint32_t state;     /* enum ibv_port_state; 0 = none */
    int32_t pid;
};

struct soft_fabric_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    uint32_t next_gen;
    uint32_t pad;
    struct soft_port_override ports[SOFT_MAX_DEVS][SOFT_MAX_PORTS];
    struct soft_slot slots[SOFT_SLOTS];
};

/* ---- process-local objects ---------------------------------------------- */

struct soft_peer;               /* a mapped peer context (soft_fabric.c) */
/* One GID table entry of a port. */
struct soft_gid {
    uint8_t raw[16];
    int type;                   /* enum ibv_gid_type */
};
#define SOFT_GIDS 64

struct soft_backing;            /* a memfd swapped under registered pages */

struct soft_dev {
    tbrt_dev dev;
    const struct soft_personality *p;
    int index;                  /* soft<index> */
    uint8_t port_state[SOFT_MAX_PORTS]; /* enum ibv_port_state */
    /* fabric */
    int fabric_fd;
    struct soft_fabric_hdr *fabric;
    /* context segment */
    int ctx_fd;
    struct soft_ctx_hdr *ctx;
    uint64_t attention_seen;
    int wake_fd;                /* unbound datagram socket for wakeups */
    struct soft_peer *self;     /* this context as a peer (executing own queues) */
    int32_t pid;                /* ours, for lock words (getpid is a syscall) */
    /* objects */
    int nqp;
    struct soft_qp *qps;        /* list, for progress and flushes */
    struct soft_cq *cqs;
    struct soft_peer *peers;
    struct soft_backing *backings;
    uint32_t next_handle;
    uint32_t mr_gen;
    bool qp_erred;              /* apple quirk: a QP was moved to ERR */
    struct soft_gid gids[SOFT_MAX_PORTS][SOFT_GIDS];
    int ngids[SOFT_MAX_PORTS];
};

struct soft_pd {
    tbrt_pd pd;
};

struct soft_cq {
    tbrt_cq cq;
    struct soft_cq_shared *sh;
    uint64_t sh_off;
    struct soft_cq *next;
};

struct soft_qp {
    tbrt_qp qp;
    struct soft_qp_shared *sh;
    uint64_t sh_off;
    struct soft_dev *sd;
    struct soft_qp *next;
    int slot;
    /* attributes */
    uint8_t port;
    uint8_t sgid_index;
    uint32_t dest_qpn;
    union ibv_gid dgid;
    uint32_t sq_psn, rq_psn;
    uint8_t min_rnr_timer;
    enum ibv_mtu mtu;
    int access;
    bool sq_sig_all;
    /* send queue accounting (the queue itself is shared) */
    uint64_t sq_seen;           /* executed slots already accounted for */
    uint32_t sq_frames;         /* outstanding (apple depth accounting) */
    uint32_t rq_frames;         /* outstanding posted receive frames */
    uint64_t rq_frames_done;    /* frames of receives taken by peers */
    /* connected peer (RC/UC) */
    struct soft_peer *peer;
    struct soft_qp_shared *peer_qp;
    uint64_t peer_checked_ns;
    uint64_t lock_checked_ns;   /* last look for a dead holder of our SQ lock */
    unsigned alive_tick;        /* look at the clock every 64th send */
};

struct soft_mr {
    tbrt_mr mr;
    int index;
    struct soft_backing *backing;
};

struct soft_ah {
    tbrt_ah ah;
};


/* ---- functions across the files ----------------------------------------- */

static inline struct soft_dev *soft_of(tbrt_dev *d) { return (struct soft_dev *)d; }

/* soft_fabric.c */
int soft_fabric_open(struct soft_dev *sd);
/* The state of a port of soft<dev> right now (run-time override first). */
int soft_port_state_of(struct soft_dev *sd, int dev, int port);
int soft_port_state(struct soft_dev *sd, int port);
int soft_set_port_state(tbrt_dev *dev, uint8_t port, int state);
void soft_fabric_close(struct soft_dev *sd);
void *soft_ctx_alloc(struct soft_dev *sd, size_t size, uint64_t *off);
void soft_ctx_release(struct soft_dev *sd, uint64_t off, size_t size);
int soft_slot_alloc(struct soft_dev *sd, uint64_t qp_off, uint32_t qp_type, uint32_t *qpn);
void soft_slot_free(struct soft_dev *sd, uint32_t qpn);
/* Find the QP with this number anywhere on the fabric and map its context. */
int soft_peer_lookup(struct soft_dev *sd, uint32_t qpn, struct soft_peer **peer,
                     struct soft_qp_shared **qp);
bool soft_peer_alive(struct soft_peer *peer);
/* Pointer to `off` inside the peer context. */
void *soft_peer_at(struct soft_peer *peer, uint64_t off);
struct soft_mr_entry *soft_peer_mr_table(struct soft_peer *peer);
/* Resolve [addr, addr+len) of the peer's MR `key` to a local pointer. */
int soft_peer_mem(struct soft_peer *peer, uint32_t key, uint64_t addr, uint64_t len,
                  uint32_t need_access, void **out);
bool soft_peer_is_self(struct soft_peer *peer);
void soft_wake(struct soft_dev *sd, const char *sock);

/* soft_mem.c */
int soft_backing_get(struct soft_dev *sd, void *addr, size_t len, bool want_shared,
                     struct soft_backing **out, int *memfd, uint64_t *fd_off,
                     uint64_t *fd_len);
int soft_backing_put(struct soft_dev *sd, struct soft_backing *b);
int soft_reg_mr(tbrt_pd *pd, void *addr, size_t len, int access, tbrt_mr **out);
int soft_dereg_mr(tbrt_mr *mr);
/* Resolve a local SGE: bounds and key checked; returns the address. */
int soft_local_mem(struct soft_dev *sd, uint32_t lkey, uint64_t addr, uint64_t len,
                   uint32_t need_access, void **out);

/* soft_cq.c */
int soft_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out);
int soft_destroy_cq(tbrt_cq *cq);
int soft_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc);
int soft_req_notify_cq(tbrt_cq *cq);
int soft_ack_cq_events(tbrt_cq *cq);
/* Produce a completion into any CQ (local or a peer's); wakes it if armed.
 * Returns -EOVERFLOW when the ring is full (CQ overrun). */
int soft_cq_push(struct soft_dev *sd, struct soft_cq_shared *cq, const struct ibv_wc *wc);

/* soft_qp.c */
int soft_create_qp(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out);
int soft_modify_qp(tbrt_qp *qp, struct ibv_qp_attr *attr, int mask);
int soft_destroy_qp(tbrt_qp *qp);
/* Move to ERR and flush outstanding work with IBV_WC_WR_FLUSH_ERR. */
void soft_qp_to_err(struct soft_qp *q);
/* Flush QPs that a peer moved to ERR. */
void soft_check_attention(struct soft_dev *sd);

/* soft_post.c */
int soft_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int soft_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* The "hardware": run our own pending sends, and our peers' sends that are
 * waiting for us. */
void soft_progress(struct soft_dev *sd);
uint32_t soft_frames(uint64_t bytes);
/* Take a send queue's executor lock (stealing it from a dead holder). */
bool soft_sq_lock(struct soft_dev *sd, struct soft_qp_shared *s, bool steal);
void soft_sq_unlock(struct soft_qp_shared *s);

/* soft_exec.c: executing one send queue */
void soft_sq_run(struct soft_dev *sd, struct soft_peer *owner, struct soft_qp_shared *sqp,
                 struct soft_qp *local);

/* soft_gid.c */
void soft_gid_build(struct soft_dev *sd);
int soft_query_gid(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *e);
/* Is this GID one of ours (any port, any index)? */
bool soft_gid_is_local(struct soft_dev *sd, const uint8_t gid[16]);

#endif
