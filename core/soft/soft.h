/* soft.h - the software RDMA device: internal structures shared by its files.
 *
 * The soft device runs in user space with no kernel module. Its wire, for
 * now, is shared memory between processes on one host:
 *
 *   fabric    one registry file per fabric name and personality (in the
 *             private directory /dev/shm/tbrt-<uid>/) mapping queue pair
 *             numbers to the process and memory that hold them; QPNs are
 *             fabric-wide, like a subnet.
 *   context   each opened device owns a memfd "context segment" holding the
 *             parts of its objects that peers must touch: queue pair blocks
 *             (state, receive and send queues), completion doorbells, the MR
 *             table. Peers map it through /proc/<pid>/fd/<fd>.
 *   memory    registering memory swaps its pages for a memfd mapping with the
 *             same contents at the same address, so a peer can map the
 *             registered range and copy straight into it.
 *
 * A transfer is therefore one memcpy from the sender's registered buffer
 * into the receiver's posted buffer (the "DMA"), then a result written into
 * each end's queue slot. Each owner turns its results into completions in
 * its own completion queues (process memory). Nothing is staged in between.
 *
 * Who does the copy: the send queue lives in shared memory too, and either
 * end may execute it (one at a time, under a lock in the queue): the sender
 * when it posts or polls, the receiver when it posts a receive the sender
 * was waiting for. So a posted send moves without its sender calling in
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
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

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
    SOFT_VERR_CORRUPT,             /* a peer's shared memory held a bad value */
};

/* ---- shared memory layouts ---------------------------------------------- */

/* Everything below is mapped by other processes, which may write any of it:
 * a peer's bug, a peer of another build, or a hostile process of the same
 * user. So the rules (soft_fabric.c, soft_exec.c, soft_post.c):
 *   - an owner keeps the truth of its objects in process memory (caps,
 *     indices, work request ids, lengths) and never reads it back from here;
 *   - a field a reader must use is copied once into a local, checked there
 *     (bounds, enums, sums), and only the copy is used;
 *   - what a process derives from another's fields (an offset, a socket
 *     name, a mapping's size) is bounded by what it checked itself (fstat
 *     of a sealed memfd, the context size), never by the other's word;
 *   - completions are made by the owner alone, from its own records and a
 *     checked result: a peer can report a wrong status, never a wrong wr_id
 *     or a length longer than what was posted.
 * A bad value breaks the queue pair that met it (soft_qp_break: an error
 * completion whose vendor_err text names the field, then ERR), or fails the
 * one send; it never crashes, hangs or makes a process allocate. */

#define SOFT_CTX_MAGIC 0x54464f5354524254ull /* "TBRTSOFT" */
#define SOFT_CTX_VERSION 2
#define SOFT_CTX_SIZE (256ull << 20)         /* sparse: pages appear on use */
#define SOFT_MR_MAX 4096
#define SOFT_MAX_CQ 1024                     /* doorbells per context */
#define SOFT_MAX_CQE 65536
#define SOFT_MAX_QP_WR 32768                 /* the largest queue of any personality */
#define SOFT_MAX_INLINE 256
#define SOFT_PAGE 4096u

/* Fields written by different processes sit on separate cache lines, so a
 * write by one end does not steal the line the other end is polling. */
#define SOFT_LINE 64
#define SOFT_OWN_LINE _Alignas(SOFT_LINE)

/* A registered region, in the owner's MR table; peers read it to resolve
 * keys. Written by the owner only, under a sequence lock: epoch is odd
 * while the entry changes, and a reader that saw it change retries. */
struct soft_mr_entry {
    _Atomic uint32_t epoch;     /* also bumped when the memfd behind it changes */
    uint32_t key;               /* 0: free */
    int32_t memfd;              /* fd in the owner's table; -1: not shareable */
    uint32_t access;
    uint64_t addr;              /* virtual address in the owner */
    uint64_t length;
    uint64_t fd_off;            /* where addr sits inside the memfd */
};

struct soft_ctx_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t pid;
    uint64_t ctx_id;
    /* bumped by a peer that changed one of our QPs (moved it to ERR) */
    _Atomic uint64_t attention;
};

/* What makes a completion queue's owner look: a peer that finished work of
 * one of its queues and finds the doorbell armed disarms it and wakes the
 * owner's completion socket (named from the context and doorbell number). */
struct soft_doorbell {
    SOFT_OWN_LINE _Atomic uint32_t armed;
};

/* A context segment: the header page, the doorbells, the MR table, then
 * queue pair blocks (page aligned, from SOFT_CTX_DATA_OFF). */
#define SOFT_CTX_DB_OFF SOFT_PAGE
#define SOFT_CTX_MR_OFF (SOFT_CTX_DB_OFF + SOFT_MAX_CQ * sizeof(struct soft_doorbell))
#define SOFT_CTX_DATA_OFF                                                                \
    ((SOFT_CTX_MR_OFF + SOFT_MR_MAX * sizeof(struct soft_mr_entry) + SOFT_PAGE - 1) &   \
     ~(uint64_t)(SOFT_PAGE - 1))

/* What finished work reports to its owner: written by whoever executed it,
 * checked by the owner, who makes the completion from it. The stamp (the
 * executor's clock when it finished) keeps a CQ in the order the work
 * finished in, across the queues that feed it, as a NIC writes CQEs. */
struct soft_result {
    uint64_t stamp;             /* soft_stamp(); used for ordering only */
    uint32_t byte_len;
    uint32_t vendor_err;
    uint32_t imm;               /* network order, as posted */
    uint32_t src_qp;
    uint8_t status;             /* enum ibv_wc_status */
    uint8_t opcode;             /* enum ibv_wc_opcode (receives) */
    uint16_t wc_flags;
};

/* A cheap clock shared by the processes of a host (the TSC where there is
 * one: about 10 ns, against 25 for clock_gettime here). */
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

/* A posted receive. With one or two scatter entries it is one cache line:
 * copy it with soft_rqe_copy, which touches the second only when needed.
 * Whoever takes it (a CAS on the queue's rq_cons) copies it; to report, it
 * claims the slot (a CAS of seq from posted to writing, which fails when the
 * owner flushed or reused it meanwhile), writes the result over the scatter
 * list, then marks it done. */
#define SOFT_RQE_DONE (1ull << 63)
#define SOFT_RQE_WRITING (1ull << 62)
struct soft_rqe {
    /* index + 1 while posted, | WRITING while its result is being written,
     * | DONE once the result is there */
    SOFT_OWN_LINE _Atomic uint64_t seq;
    uint32_t num_sge;
    uint32_t pad;
    uint64_t total;
    union {
        struct ibv_sge sge[SOFT_MAX_SGE];
        struct soft_result res;
    };
};

/* Copy a posted receive's scatter list into a local, touching a second
 * line only when needed. Returns false (nothing copied beyond num_sge) when
 * num_sge is impossible; the caller reports it. */
static inline bool soft_rqe_copy(struct soft_rqe *to, const struct soft_rqe *from)
{
    memcpy(&to->num_sge, &from->num_sge,
           offsetof(struct soft_rqe, sge) - offsetof(struct soft_rqe, num_sge));
    if (to->num_sge > SOFT_MAX_SGE)
        return false;
    memcpy(to->sge, from->sge, to->num_sge * sizeof from->sge[0]);
    return true;
}

/* Is receive number c of this queue posted (and not yet taken)? */
static inline bool soft_rq_posted(struct soft_rqe *rq, uint32_t cap, uint64_t c)
{
    return atomic_load_explicit(&rq[c % cap].seq, memory_order_acquire) == c + 1;
}

/* A posted send, in shared memory so either end can execute it. No
 * pointers and no wr_id (the owner keeps that): the address handle of a UD
 * send is copied in. */
struct soft_swr {
    uint32_t opcode;            /* enum ibv_wr_opcode */
    uint32_t send_flags;
    uint32_t imm_data;          /* as given (network order) */
    uint32_t num_sge;
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t remote_qpn;        /* UD */
    uint32_t remote_qkey;       /* UD */
    uint32_t pad;
    uint64_t total;
    /* the executor's state across tries */
    int32_t rnr_count;
    uint32_t pad2;
    uint64_t first_try_ns;      /* RC: first try without an answer */
    uint64_t next_try_ns;       /* RC: after an RNR NAK */
    struct soft_result res;     /* written before sq_head passes it */
    uint8_t dgid[16];           /* UD: from the address handle */
    uint8_t sgid_index;
    uint8_t pad3[3];
    struct ibv_sge sge[SOFT_MAX_SGE];
    uint8_t inl[SOFT_MAX_INLINE]; /* IBV_SEND_INLINE data, copied at post */
};

/* The shared half of a queue pair: state, receive queue, send queue. */
struct soft_qp_shared {
    /* read mostly; the owner's copies are the truth */
    _Atomic uint32_t state;     /* enum ibv_qp_state */
    _Atomic uint32_t remote_err; /* set by whoever moved it to ERR remotely */
    uint32_t qpn;               /* 0 once destroyed */
    uint32_t qp_type;
    uint32_t rq_cap;            /* slots in rq[]; soft_swr[sq_cap] follow */
    uint32_t sq_cap;
    uint32_t recv_db, send_db;  /* doorbells of its CQs */
    uint32_t qkey;
    uint32_t dest_qpn;          /* RC/UC: the connected peer, from RTR */
    uint8_t min_rnr_timer;      /* responder's RNR NAK timer code */
    uint8_t timeout, retry_cnt, rnr_retry, mtu;
    uint8_t port;               /* its port and device (soft<dev>), for link state */
    uint8_t dev_index;
    /* receive queue: senders take the slot at rq_cons once its seq says
     * it is posted */
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

/* The shared block: header, receive queue, then the send queue. */
static inline size_t soft_sq_offset(uint32_t rq_cap)
{
    size_t off = sizeof(struct soft_qp_shared) + (size_t)rq_cap * sizeof(struct soft_rqe);
    return (off + SOFT_LINE - 1) & ~(size_t)(SOFT_LINE - 1);
}

static inline size_t soft_qp_bytes(uint32_t rq_cap, uint32_t sq_cap)
{
    return soft_sq_offset(rq_cap) + (size_t)sq_cap * sizeof(struct soft_swr);
}

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

struct soft_peer;               /* a mapped context (soft_fabric.c) */
/* One GID table entry of a port. */
struct soft_gid {
    uint8_t raw[16];
    int type;                   /* enum ibv_gid_type */
};
#define SOFT_GIDS 64

struct soft_ctx_free;           /* free context memory (soft_fabric.c) */

/* A queue pair as an executor sees it, in any context (ours too): where its
 * block and queues are, and the sizes they were checked with. Made once per
 * lookup (soft_view_lookup checks the registry slot and the block) or from
 * the owner's own records, and only then used. */
struct soft_qp_view {
    struct soft_peer *peer;     /* NULL: no view */
    struct soft_qp_shared *sh;
    struct soft_rqe *rq;
    struct soft_swr *sq;
    struct soft_doorbell *recv_db, *send_db;
    uint32_t qpn, qp_type, rq_cap, sq_cap;
    uint32_t recv_dbi, send_dbi;
    int32_t pid;
};

struct soft_dev {
    tbrt_dev dev;
    const struct soft_personality *p;
    int index;                  /* soft<index> */
    uint8_t port_state[SOFT_MAX_PORTS]; /* enum ibv_port_state */
    /* fabric */
    int fabric_fd;
    struct soft_fabric_hdr *fabric;
    char shm_dir[256];          /* our private directory (util/private_dir.h) */
    /* context segment */
    int ctx_fd;
    struct soft_ctx_hdr *ctx;
    uint64_t ctx_id;            /* ours (the header's copy is for peers) */
    uint64_t ctx_used;          /* bump allocator of the segment */
    struct soft_ctx_free *ctx_free;
    uint64_t attention_seen;
    int wake_fd;                /* unbound datagram socket for wakeups */
    struct soft_peer *self;     /* this context as a peer (executing own queues) */
    int32_t pid;                /* ours, for lock words (getpid is a syscall) */
    /* objects */
    int nqp;
    struct soft_qp *qps;        /* list, for progress and flushes */
    struct soft_cq *cqs;
    struct soft_peer *peers;
    struct soft_mr *mrs[SOFT_MR_MAX]; /* by MR index: the truth of our keys */
    struct soft_dev *next_dev;  /* the process's open soft devices (soft_mem.c) */
    bool attached;
    uint8_t db_used[SOFT_MAX_CQ];
    uint32_t next_handle;
    uint32_t mr_gen;
    bool qp_erred;              /* apple quirk: a QP was moved to ERR */
    struct soft_gid gids[SOFT_MAX_PORTS][SOFT_GIDS];
    int ngids[SOFT_MAX_PORTS];
    /* the latest bad value met in shared memory, for soft_vendor_err */
    char corrupt_why[TBRT_WHY_MAX];
};

struct soft_pd {
    tbrt_pd pd;
};

/* A completion queue: a ring in process memory, filled by its owner from
 * the results of its queue pairs (soft_post.c reaps them). */
struct soft_cq {
    tbrt_cq cq;
    uint32_t cap;               /* power of two */
    uint64_t head, tail;        /* ring[head..tail) are waiting */
    struct ibv_wc *ring;
    bool overrun;
    uint32_t db;                /* doorbell index in our context */
    struct soft_doorbell *dbp;
    struct soft_cq *next;
};

/* What only the owner knows of a posted work request. */
struct soft_wr {
    uint64_t wr_id;
    uint64_t total;
    uint32_t frames;
    uint8_t opcode;             /* enum ibv_wc_opcode of a send's completion */
    uint8_t signaled;
};

struct soft_qp {
    tbrt_qp qp;
    struct soft_qp_shared *sh;
    uint64_t sh_off;
    size_t sh_bytes;
    struct soft_dev *sd;
    struct soft_qp *next;
    /* attributes (the truth; the shared block has copies for peers) */
    uint8_t port;
    uint8_t sgid_index;
    uint32_t dest_qpn;
    union ibv_gid dgid;
    uint32_t sq_psn, rq_psn;
    uint8_t min_rnr_timer, timeout, retry_cnt, rnr_retry;
    enum ibv_mtu mtu;
    uint32_t qkey;
    int access;
    bool sq_sig_all;
    /* queues: the records by slot and the indices (never read back from
     * the shared block) */
    uint32_t rq_cap, sq_cap;
    struct soft_wr *rq_wr, *sq_wr;
    uint64_t rq_prod, rq_done;  /* posted; reaped into the CQ */
    uint64_t sq_tail, sq_done;
    uint32_t rq_frames, sq_frames; /* outstanding (apple depth accounting) */
    unsigned rq_idle;           /* empty reaps since rq_cons was last checked */
    uint64_t rq_stall_ns;       /* UD: when a taken receive stopped the reaping */
    bool rq_lost;               /* UD: the next receive's sender vanished (taken back) */
    struct soft_qp_view self;   /* this QP as an executor sees it */
    /* connected peer (RC/UC) */
    struct soft_qp_view peer;
    uint64_t peer_checked_ns;
    uint64_t lock_checked_ns;   /* last look for a dead holder of our SQ lock */
    unsigned alive_tick;        /* look at the clock every 64th send */
    /* a peer's bad value broke it: the first flushed work request says so */
    bool broken, broken_told;
};

struct soft_mr {
    tbrt_mr mr;
    int index;
    bool shared;                /* holds a reference on the backing of its pages */
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
/* Find the QP with this number anywhere on the fabric, map its context and
 * check what a view rests on. 0; -ENOENT / -ESRCH when there is no such QP
 * (now); -EBADMSG with the reason in why when its shared memory is corrupt. */
int soft_view_lookup(struct soft_dev *sd, uint32_t qpn, struct soft_qp_view *v, char *why,
                     size_t whylen);
bool soft_peer_alive(struct soft_peer *peer);
/* Pointer to `off` inside the peer context (off < SOFT_CTX_SIZE, checked by
 * the caller). */
void *soft_peer_at(struct soft_peer *peer, uint64_t off);
/* Resolve [addr, addr+len) of the peer's MR `key` to a local pointer: 0,
 * -EINVAL/-ENOENT/-ERANGE/-EACCES (a bad key or range), -EPERM (not
 * shareable), -EBADMSG with why (the peer's table is corrupt). */
int soft_peer_mem(struct soft_dev *sd, struct soft_peer *peer, uint32_t key, uint64_t addr,
                  uint64_t len, uint32_t need_access, void **out, char *why, size_t whylen);
bool soft_peer_is_self(struct soft_peer *peer);
int soft_peer_self(struct soft_dev *sd);
void soft_peers_close(struct soft_dev *sd);
/* Wake the owner of doorbell dbi of the peer's context, if it is armed. */
void soft_ring(struct soft_dev *sd, struct soft_peer *peer, struct soft_doorbell *db,
               uint32_t dbi);
/* The wake-up socket of doorbell dbi of context ctx_id of process pid, in
 * our private directory (only this user can reach it): its address, or
 * -ENAMETOOLONG when the directory's path leaves no room. */
int soft_wake_addr(struct soft_dev *sd, int32_t pid, uint64_t ctx_id, uint32_t dbi,
                   struct sockaddr_un *a, socklen_t *len);

/* soft_mem.c */
/* A device joins / leaves the process's registrations (open / close; close
 * releases the regions it still holds). */
void soft_mem_attach(struct soft_dev *sd);
void soft_mem_detach(struct soft_dev *sd);
int soft_reg_mr(tbrt_pd *pd, void *addr, size_t len, int access, tbrt_mr **out);
int soft_dereg_mr(tbrt_mr *mr);
/* Resolve a local SGE against our own records: bounds and key checked;
 * returns the address. */
int soft_local_mem(struct soft_dev *sd, uint32_t lkey, uint64_t addr, uint64_t len,
                   uint32_t need_access, void **out);
/* Seal a memfd that peers map so it can never shrink under them. */
int soft_memfd_seal(int fd);

/* soft_cq.c */
int soft_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out);
int soft_destroy_cq(tbrt_cq *cq);
int soft_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc);
int soft_req_notify_cq(tbrt_cq *cq);
int soft_ack_cq_events(tbrt_cq *cq);
/* Add a completion to our CQ; false (and the CQ overruns) when it is full. */
bool soft_cq_add(struct soft_cq *c, const struct ibv_wc *wc);

/* soft_qp.c */
int soft_create_qp(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out);
int soft_modify_qp(tbrt_qp *qp, struct ibv_qp_attr *attr, int mask);
int soft_destroy_qp(tbrt_qp *qp);
/* Move to ERR and flush outstanding work with IBV_WC_WR_FLUSH_ERR. */
void soft_qp_to_err(struct soft_qp *q);
/* A bad value from shared memory: say what it was (the vendor_err text of
 * SOFT_VERR_CORRUPT), then move the QP to ERR; unless `reported` (the
 * caller completed a work request with it already), its first flushed work
 * request completes with IBV_WC_LOC_QP_OP_ERR carrying the text. */
void soft_qp_break(struct soft_qp *q, bool reported, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record the text of a SOFT_VERR_CORRUPT completion (no QP broken). */
void soft_corrupt(struct soft_dev *sd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flush QPs that a peer moved to ERR. */
void soft_check_attention(struct soft_dev *sd);

/* soft_post.c */
int soft_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int soft_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* The "hardware": run our own pending sends, and our peers' sends that are
 * waiting for us. */
void soft_progress(struct soft_dev *sd);
uint32_t soft_frames(uint64_t bytes);
/* Is the next receive / send of q finished? 1 (*stamp says when), 0 not
 * yet, -1 it needs handling now (a bad value or a lost result). */
int soft_recv_ready(struct soft_qp *q, uint64_t *stamp);
int soft_send_ready(struct soft_qp *q, uint64_t *stamp);
/* Turn that one into a completion in the QP's CQ; false when nothing was
 * taken (the CQ is full, or the QP broke). */
bool soft_recv_take(struct soft_qp *q);
bool soft_send_take(struct soft_qp *q);
/* All of this QP's finished receives / sends, queue by queue. */
void soft_reap_recv(struct soft_qp *q);
void soft_reap_send(struct soft_qp *q);
/* Take a send queue's executor lock (stealing it from a dead holder). */
bool soft_sq_lock(struct soft_dev *sd, struct soft_qp_shared *s, bool steal);
void soft_sq_unlock(struct soft_qp_shared *s);

/* soft_exec.c: executing one send queue, as its owner (local) or as the
 * receiver the sender is connected to (sender is then the peer's view). */
void soft_sq_run_own(struct soft_dev *sd, struct soft_qp *q);
void soft_sq_run_peer(struct soft_dev *sd, struct soft_qp *target);

/* soft_gid.c */
void soft_gid_build(struct soft_dev *sd);
int soft_query_gid(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *e);
/* Is this GID one of ours (any port, any index)? */
bool soft_gid_is_local(struct soft_dev *sd, const uint8_t gid[16]);

#endif
