/* shm.h - the shared-memory wire of the soft device: its layouts in shared
 * memory and the parts of it that its files share.
 *
 *   fabric    one registry file per fabric name and personality (in the
 *             private directory /dev/shm/tbrt-<uid>/) mapping queue pair
 *             numbers to the process and memory that hold them; QPNs are
 *             fabric-wide, like a subnet (shm_fabric.c).
 *   context   each opened device owns a memfd "context segment" holding the
 *             parts of its objects that peers must touch: queue pair blocks
 *             (state, receive and send queues), completion doorbells, the MR
 *             table. Peers map it through /proc/<pid>/fd/<fd> (shm_peer.c).
 *   memory    registering memory swaps its pages for a memfd mapping with the
 *             same contents at the same address, so a peer can map the
 *             registered range and copy straight into it (shm_mem.c).
 *   SRQs      a shared receive queue is a block of its own in the context;
 *             a QP made with one names it in its block, and senders take
 *             receives from it as from a QP's own queue (shm_srq.c).
 *   events    a peer that moved one of our QPs to ERR, or crossed an SRQ's
 *             limit, rings the context's event doorbell (and the QP's CQs):
 *             a sleeping owner wakes and takes its turn (shm_event.c). The
 *             wire's timers ring the send CQ's doorbell (soft_alarm).
 *
 * A transfer is one memcpy from the sender's registered buffer into the
 * receiver's posted buffer (the "DMA"), then a result in each end's queue
 * slot (shm_exec.c). Either end may execute a connected send queue (one at
 * a time, under a lock in the queue): the sender when it posts or polls, the
 * receiver when it posts a receive the sender was waiting for, so a posted
 * send moves without its sender calling in again, as on hardware. The ops
 * of wire.h are in shm_wire.c. */
#ifndef TBRT_SOFT_SHM_H
#define TBRT_SOFT_SHM_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <infiniband/verbs.h>

#include "soft/wire/faults.h"
#include "soft/wire/wire.h"
#include "util/util.h"

/* ---- shared memory layouts -------------------------------------------------- */

/* Everything below is mapped by other processes, which may write any of it:
 * a peer's bug, a peer of another build, or a hostile process of the same
 * user. So the rules (shm_fabric.c, shm_peer.c, shm_exec.c, shm_wire.c):
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
 * A bad value fails the one send (its result says so) or breaks the queue
 * pair that met it (an event, or -1 from recv_done / send_done; the text
 * names the field in cfg->corrupt_why); it never crashes, hangs or makes a
 * process allocate. */

#include "soft/wire/alarm.h"

#define SHM_CTX_MAGIC 0x54464f5354524254ull /* "TBRTSOFT" */
#define SHM_CTX_VERSION 8         /* 3: one-line receive results, WQE-shaped sends; 4: SRQs,
                                     atomics, 30 SGEs, iova, the event doorbell; 5: the
                                     shared copy's job in each QP block; 6: shared READs;
                                     7: receive results apart from the posted receives;
                                     8: the owner's wait mark with its time */
#define SHM_WAIT_EVERY 64         /* looks between two marks of a waiting owner */
#define SHM_WAIT_FRESH_MS 10u     /* a mark older than this is of a wait that ended (the
                                     coarse clock ticks every 1-10 ms) */
#define SHM_CTX_SIZE (256ull << 20)         /* sparse: pages appear on use */
#define SHM_MR_MAX (SOFT_MAX_MR + 1) /* entry 0 is never used: keys are never 0 */
#define SHM_MAX_CQ 1024                     /* CQ doorbells per context */
#define SHM_EVENT_DB SHM_MAX_CQ             /* the doorbell after them: device events */
#define SHM_PAGE 4096u

/* Fields written by different processes sit on separate cache lines, so a
 * write by one end does not steal the line the other end is polling. */
#define SHM_LINE 64
#define SHM_OWN_LINE _Alignas(SHM_LINE)

/* A registered region, in the owner's MR table; peers read it to resolve
 * keys. Written by the owner only, under a sequence lock: epoch is odd
 * while the entry changes, and a reader that saw it change retries. */
struct shm_mr_entry {
    _Atomic uint32_t epoch;     /* also bumped when the memfd behind it changes */
    uint32_t key;               /* 0: free */
    int32_t memfd;              /* fd in the owner's table; -1: not shareable */
    uint32_t access;
    uint64_t addr;              /* virtual address in the owner */
    uint64_t length;
    uint64_t fd_off;            /* where addr sits inside the memfd */
    uint64_t iova;              /* what SGEs and remote addresses call addr */
};

struct shm_ctx_hdr {
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
struct shm_doorbell {
    SHM_OWN_LINE _Atomic uint32_t armed;
};

/* A context segment: the header page, the doorbells (the CQs', then the
 * event doorbell), the MR table, then queue pair and SRQ blocks (page
 * aligned, from SHM_CTX_DATA_OFF). */
#define SHM_CTX_DB_OFF SHM_PAGE
#define SHM_CTX_MR_OFF (SHM_CTX_DB_OFF + (SHM_MAX_CQ + 1) * sizeof(struct shm_doorbell))
#define SHM_CTX_DATA_OFF                                                                \
    ((SHM_CTX_MR_OFF + SHM_MR_MAX * sizeof(struct shm_mr_entry) + SHM_PAGE - 1) &   \
     ~(uint64_t)(SHM_PAGE - 1))

/* A finished receive's result: the status, and a message of up to
 * SHM_CQE_DATA bytes itself (scatter-to-CQE, wire.h: the owner places it),
 * so a small message crosses from the sender to the receiver in the one
 * line the receiver polls (struct shm_rres). */
#define SHM_CQE_DATA 32
_Static_assert(SHM_CQE_DATA <= SOFT_RESULT_DATA && SHM_CQE_DATA <= SOFT_MAX_INLINE,
               "a result's message fits the objects' result and a send's inline area");
struct shm_cqe {
    uint64_t stamp;
    uint32_t byte_len;
    uint32_t imm;
    uint32_t src_qp;
    uint8_t status, opcode, wc_flags;
    uint8_t data_len;           /* bytes of data[] (0: the message is in the buffers) */
    union {
        uint8_t data[SHM_CQE_DATA];
        uint32_t vendor_err;    /* a failed receive's (it carries no message) */
    };
};

/* A posted receive: the owner writes it, the sender that takes it (a CAS on
 * the queue's rq_cons) copies it. With one or two scatter entries it is one
 * cache line: copy it with shm_rqe_copy, which touches the second only when
 * needed. To report, the taker claims it (a CAS of seq from posted to
 * writing, which fails when the owner flushed or reused it meanwhile), then
 * writes the result into the receive's result line and never touches the
 * posted receive again (the owner reuses it as soon as it sees the result).
 * The result is a line of its own, apart from the posted receives, as a
 * NIC's CQEs are apart from its receive WQEs: the sender that reads the
 * next posted receive ahead (a read that moves the line to its cache) never
 * takes away the line the owner polls. */
#define SHM_RQE_WRITING (1ull << 62)
struct shm_rqe {
    /* index + 1 while posted, | WRITING once a taker claimed it (its result
     * is being written, or is there) */
    SHM_OWN_LINE _Atomic uint64_t seq;
    uint32_t num_sge;
    /* an SRQ's receive: the QP it arrived at, written by its taker with the
     * result (only an SRQ's owner reads it) */
    uint32_t res_qpn;
    uint64_t total;
    struct ibv_sge sge[SOFT_MAX_SGE];
};

/* Receive c's result, in the line its owner polls in place: seq is c + 1
 * once the result is there (written last, by the taker only; the owner
 * never writes it back, so a lap needs no clearing). */
struct shm_rres {
    SHM_OWN_LINE _Atomic uint64_t seq;
    struct shm_cqe res;
};
_Static_assert(sizeof(struct shm_rres) == SHM_LINE, "a finished receive is one cache line");

/* Ask for a line for writing ahead of the write (PREFETCHW: AMD's since
 * the K6, Intel's since Broadwell; older Intel CPUs run it as a NOP). GCC's
 * __builtin_prefetch(p, 1) is a plain read prefetch without -mprfchw. */
static inline void shm_prefetch_write(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("prefetchw %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 1, 3);
#endif
}

/* Copy a posted receive's scatter list into a local, touching a second
 * line only when needed. Returns false (nothing copied beyond num_sge) when
 * num_sge is impossible; the caller reports it. */
static inline bool shm_rqe_copy(struct shm_rqe *to, const struct shm_rqe *from)
{
    memcpy(&to->num_sge, &from->num_sge,
           offsetof(struct shm_rqe, sge) - offsetof(struct shm_rqe, num_sge));
    if (to->num_sge > SOFT_MAX_SGE)
        return false;
    memcpy(to->sge, from->sge, to->num_sge * sizeof from->sge[0]);
    return true;
}

/* Claim receive c of a ring (posted, claimed by no one: a CAS of its seq,
 * which fails once its owner flushed or reused it) and write its result r
 * into its result line, the message itself when data_len > 0 (at most
 * SHM_CQE_DATA bytes: scatter-to-CQE), seq last; an SRQ's also names the
 * QP it arrived at (qpn). False when it could not be claimed. The taker
 * that ran the send does it (shm_deliver.c), or the owner that made a
 * shared copy whole (shm_rq.c: shm_rq_finish). */
static inline bool shm_rq_result_put(struct shm_rqe *rq, struct shm_rres *rres, uint32_t cap,
                                     uint64_t c, const struct soft_result *r,
                                     const uint8_t *data, uint32_t data_len, bool srq,
                                     uint32_t qpn)
{
    uint32_t i = (uint32_t)(c & (cap - 1));
    uint64_t want = c + 1;
    if (!atomic_compare_exchange_strong_explicit(&rq[i].seq, &want, (c + 1) | SHM_RQE_WRITING,
                                                 memory_order_acquire, memory_order_relaxed))
        return false;
    struct shm_cqe *x = &rres[i].res;
    x->stamp = soft_stamp();
    x->byte_len = r->byte_len;
    x->imm = r->imm;
    x->src_qp = r->src_qp;
    x->status = r->status;
    x->opcode = r->opcode;
    x->wc_flags = (uint8_t)r->wc_flags;
    x->data_len = (uint8_t)data_len;
    if (data_len)
        memcpy(x->data, data, SHM_CQE_DATA); /* all of it: one fixed-size copy */
    else
        x->vendor_err = r->vendor_err;
    if (srq)
        rq[i].res_qpn = qpn;    /* an SRQ's owner must know which QP */
    atomic_store_explicit(&rres[i].seq, c + 1, memory_order_release);
    return true;
}

/* Is receive number c of this queue posted (and not yet taken)? */
static inline bool shm_rq_posted(struct shm_rqe *rq, uint32_t cap, uint64_t c)
{
    return atomic_load_explicit(&rq[c & (cap - 1)].seq, memory_order_acquire) == c + 1;
}

/* How a send finished, written by its executor before sq_head passes it. */
struct shm_sres {
    uint64_t stamp;
    uint32_t vendor_err;
    uint8_t status;
    uint8_t pad[3];
};

/* A posted send, in shared memory so either end can execute it. No
 * pointers and no wr_id (the owner keeps that): the address handle of a UD
 * send is copied in. Laid out as a WQE: one line every send needs (which
 * the executor copies once), then its gather list or, with
 * IBV_SEND_INLINE, its bytes (copied at post), then what only UD (or an
 * atomic) needs,
 * then the result. */
struct shm_swr {
    SHM_OWN_LINE uint32_t opcode; /* enum ibv_wr_opcode */
    uint32_t send_flags;
    uint32_t imm_data;          /* as given (network order) */
    uint32_t num_sge;
    uint64_t total;
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t flags;             /* SOFT_SEND_* */
    /* the executor's state across tries */
    int32_t rnr_count;
    /* delivered but for the pieces of its copy that the target's process
     * took (shm_copy.c): that job's generation; 0: none. Whoever runs the
     * queue next completes it once the job is whole. */
    uint32_t copy_gen;
    uint64_t first_try_ns;      /* RC: first try without an answer */
    uint64_t next_try_ns;       /* RC: after an RNR NAK */
    union {
        struct ibv_sge sge[SOFT_MAX_SGE];
        uint8_t inl[SOFT_MAX_INLINE]; /* IBV_SEND_INLINE data, copied at post */
    };
    /* UD */
    uint32_t remote_qpn;
    uint32_t remote_qkey;
    uint8_t dgid[16];           /* from the address handle */
    uint8_t sgid[16];           /* our GID it names, for the GRH */
    /* atomics (RC only: UD's fields are unused there) */
    uint64_t compare_add, swap;
    struct shm_sres res;
};
#define SHM_SWR_HEAD offsetof(struct shm_swr, sge)
_Static_assert(SHM_SWR_HEAD == SHM_LINE, "what every send needs is one cache line");

/* A send's copy cut into pieces that the target's process may take too
 * (shm_copy.c). `claim` names the job and hands out its pieces from both
 * ends: gen << 32 | back << 16 | front (0: no job); the executor takes
 * them one at a time from the front, a helper a run of them from the back.
 * `done` counts the pieces finished, by anyone: whoever's count makes it
 * whole finishes the job. The rest says where the bytes are, as MR keys
 * and addresses (a peer's words: the helper resolves them through the MR
 * tables), and, for a SEND, which of the helper's receives they are for. */
struct shm_copy_job {
    SHM_OWN_LINE _Atomic uint64_t claim;
    uint32_t src_key, dst_key;
    uint64_t src_addr, dst_addr, len;
    /* 0: a SEND into the helper's receive (src the executor's, dst the
     * helper's); 1: an RDMA READ of the helper's memory (src the helper's,
     * under REMOTE_READ; dst the executor's, under LOCAL_WRITE) */
    uint32_t read;
    /* a SEND: the receive it fills, and its immediate data */
    uint32_t imm;
    uint64_t recv_index;
    uint32_t with_imm;
    /* its own line: a helper's count does not take the claim line away
     * from the executor's next claim */
    SHM_OWN_LINE _Atomic uint32_t done;
};

/* The owner's record of the last job it left for its helper to make
 * whole (shm_copy.c), in process memory: to bound the wait, and to copy
 * the helper's pieces again if it dies. */
struct shm_copy_pend {
    uint32_t gen, n;
    uint64_t since_ns;          /* when it was first found not whole (0: not yet) */
    unsigned looks;
    /* the span and the helper's end of it (pieces [back, n)) */
    void *dst;
    const void *src;
    uint64_t len;
    uint32_t back;
};

/* The shared half of a queue pair: state, receive queue, send queue. */
struct shm_qp_block {
    /* read mostly; the owner's copies are the truth */
    _Atomic uint32_t state;     /* enum ibv_qp_state */
    _Atomic uint32_t remote_err; /* set by whoever moved it to ERR remotely: the
                                    soft_wire_cause (why), 0 when not */
    uint32_t qpn;               /* 0 once destroyed */
    uint32_t qp_type;
    uint32_t rq_cap;            /* slots in rq[]; shm_swr[sq_cap] follow */
    uint32_t sq_cap;
    uint32_t recv_db, send_db;  /* doorbells of its CQs */
    uint32_t qkey;
    uint32_t dest_qpn;          /* RC/UC: the connected peer, from RTR */
    uint8_t min_rnr_timer;      /* responder's RNR NAK timer code */
    uint8_t timeout, retry_cnt, rnr_retry, mtu;
    uint8_t port;               /* its port and device (soft<dev>), for link state */
    uint8_t dev_index;
    uint64_t srq_off;           /* its SRQ's block in the context; 0: the rq below */
    /* receive queue: senders take the slot at rq_cons once its seq says
     * it is posted */
    SHM_OWN_LINE _Atomic uint64_t rq_cons;     /* senders: next slot to take (CAS) */
    /* a sender found no receive here and stopped: run its queue when we post
     * one (written by the sender only then, so it costs nothing otherwise) */
    SHM_OWN_LINE _Atomic uint32_t help_wanted;
    /* send queue: slots [sq_head, sq_tail) wait to be executed */
    SHM_OWN_LINE _Atomic uint64_t sq_tail;     /* owner: next free slot */
    SHM_OWN_LINE _Atomic int32_t sq_lock;      /* pid of the executor, 0 when free */
    _Atomic uint64_t sq_head;   /* executor: next to run */
    /* owner: where it waits on this QP, for a waiting peer choosing to
     * spin or yield: the CPU + 1 and, << 32, the coarse clock's ms when it
     * last said so (0: never). Said again every SHM_WAIT_EVERY looks while
     * it waits (a store only when it changed): a mark older than
     * SHM_WAIT_FRESH_MS is of a wait that ended, the owner now waiting on
     * another link or working (shm_wire.c: shm_qp_peer). */
    SHM_OWN_LINE _Atomic uint64_t owner_wait;
    struct shm_rqe rq[];
};

/* The results of a ring of cap posted receives: right after them (the
 * posted receives and the results of a QP block or of an SRQ's block). */
static inline struct shm_rres *shm_rres_of(struct shm_rqe *rq, uint32_t cap)
{
    return (struct shm_rres *)(rq + cap);
}

/* The shared block: header, receive queue and its results, the send queue,
 * then the job of a large send's copy into our receive that the connected
 * sender's executor shares with us (shm_copy.c; last, so the lines the 8 B
 * path polls keep their places). */
static inline size_t shm_sq_offset(uint32_t rq_cap)
{
    size_t off = sizeof(struct shm_qp_block) +
                 (size_t)rq_cap * (sizeof(struct shm_rqe) + sizeof(struct shm_rres));
    return (off + SHM_LINE - 1) & ~(size_t)(SHM_LINE - 1);
}

static inline size_t shm_copy_offset(uint32_t rq_cap, uint32_t sq_cap)
{
    size_t off = shm_sq_offset(rq_cap) + (size_t)sq_cap * sizeof(struct shm_swr);
    return (off + SHM_LINE - 1) & ~(size_t)(SHM_LINE - 1);
}

static inline size_t shm_qp_bytes(uint32_t rq_cap, uint32_t sq_cap)
{
    return shm_copy_offset(rq_cap, sq_cap) + sizeof(struct shm_copy_job);
}

/* A shared receive queue's block: senders to any QP made with it take its
 * receives (a CAS on rq_cons) and, after taking one, look whether fewer
 * than the armed limit wait: then they disarm it (a CAS to 0) and ring the
 * owner's event doorbell. */
#define SHM_SRQ_MAGIC 0x51525354u  /* "TSRQ" */
struct shm_srq_block {
    uint32_t magic;             /* 0 once destroyed */
    uint32_t srqn;
    uint32_t cap;               /* slots in rq[] */
    uint32_t pad;
    SHM_OWN_LINE _Atomic uint64_t prod;     /* owner: receives posted so far */
    _Atomic uint32_t limit;                 /* owner arms, a sender disarms; 0: none */
    SHM_OWN_LINE _Atomic uint64_t rq_cons;  /* senders: next slot to take (CAS) */
    struct shm_rqe rq[];
};

static inline size_t shm_srq_bytes(uint32_t cap)
{
    return sizeof(struct shm_srq_block) +
           (size_t)cap * (sizeof(struct shm_rqe) + sizeof(struct shm_rres));
}

/* ---- the fabric registry ------------------------------------------------ */

#define SHM_REGISTRY_MAGIC 0x4342414654524254ull /* "TBRTFABC" */
#define SHM_REGISTRY_VERSION 2
#define SHM_MAX_DEVS 16
#define SHM_MAX_PORTS 2
#define SHM_SLOTS 1024               /* QPN = gen << 10 | slot */
#define SHM_SLOT_BITS 10

struct shm_slot {
    uint32_t qpn;               /* 0: free */
    int32_t pid;
    int32_t ctx_fd;
    uint32_t qp_type;
    uint64_t ctx_id;
    uint64_t qp_off;            /* the QP's shared block in the ctx */
    uint32_t gen;
    uint32_t pad;
};

struct shm_registry {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    uint32_t next_gen;
    uint32_t pad;
    uint8_t unused_ports[SHM_MAX_DEVS * SHM_MAX_PORTS * 8]; /* port states were here (v2) */
    struct shm_slot slots[SHM_SLOTS];
};

/* A peer's memfd mapped by us: its size is what fstat said, not the peer. */
struct shm_map {
    uint32_t key;
    uint32_t epoch;
    void *base;
    size_t len;
    /* the entry as checked when mapped (epoch even): while the entry's epoch
     * stays the same, a lookup uses these instead of copying it again */
    bool checked;
    uint32_t access;
    uint64_t iova, length, fd_off;
};

struct shm_peer {
    struct shm_peer *next;
    pid_t pid;
    uint64_t ctx_id;
    bool same_process;
    bool self;
    void *base;                 /* the peer's context segment */
    int pidfd;
    struct shm_map *maps;      /* by MR index */
    uint32_t nmaps;
};

/* A queue pair as an executor sees it, in any context (ours too): where its
 * block and queues are, and the sizes they were checked with. Made once per
 * lookup (shm_view_lookup checks the registry slot and the block) or from
 * the owner's own records, and only then used. */
struct shm_view {
    struct shm_peer *peer;     /* NULL: no view */
    struct shm_qp_block *sh;
    struct shm_rqe *rq;         /* the QP's receive queue, or its SRQ's */
    struct shm_rres *rres;      /* and their results */
    _Atomic uint64_t *rq_cons;
    struct shm_srq_block *srq;  /* NULL: its own queue */
    struct shm_swr *sq;
    struct shm_copy_job *copy;  /* its shared copy's job (shm_copy.c) */
    struct shm_doorbell *recv_db, *send_db, *event_db;
    uint32_t qpn, qp_type, rq_cap, sq_cap;
    uint32_t recv_dbi, send_dbi;
    int32_t pid;
};

/* ---- the wire's objects (process memory) ------------------------------------ */

/* The wire's counters of a QP: shared copies (shm_copy.c), ours that a
 * peer helped with and the pieces and bytes we copied for peers' sends;
 * sends run at post (shm_direct.c). */
struct shm_counts {
    uint64_t copies_shared, pieces_helped, bytes_helped;
    uint64_t direct_writes;
};

static inline void shm_counts_add(struct shm_counts *to, const struct shm_counts *c)
{
    to->copies_shared += c->copies_shared;
    to->pieces_helped += c->pieces_helped;
    to->bytes_helped += c->bytes_helped;
    to->direct_writes += c->direct_writes;
}

struct shm_ctx_free;            /* free context memory (shm_fabric.c) */
struct shm_mr;                  /* one of our registrations (shm_mem.c) */

struct soft_wire {
    struct soft_wire_cfg cfg;
    char fabric[96];
    char shm_dir[256];          /* our private directory (util/private_dir.h) */
    int32_t pid;                /* ours, for lock words (getpid is a syscall) */
    /* the registry */
    int fabric_fd;
    struct shm_registry *fabric_map;
    /* our context segment */
    int ctx_fd;
    struct shm_ctx_hdr *ctx;
    uint64_t ctx_id;            /* ours (the header's copy is for peers) */
    uint64_t ctx_used;          /* bump allocator of the segment */
    struct shm_ctx_free *ctx_free;
    uint64_t attention_seen;
    int wake_fd;                /* unbound datagram socket for wake-ups */
    int event_fd;               /* our event doorbell's socket (shm_event.c) */
    struct shm_doorbell *event_db;
    struct soft_wire_srq *srqs;
    struct shm_peer *self;      /* this context as a peer (executing own queues) */
    struct shm_peer *peers;
    /* objects */
    struct soft_wire_qp *qps;
    struct shm_mr *mrs[SHM_MR_MAX]; /* by MR index: the truth of our keys */
    uint32_t mr_gen;
    uint8_t db_used[SHM_MAX_CQ];
    struct soft_wire *next_wire; /* the process's shm wires (shm_mem.c) */
    bool mem_attached;
    bool alarm_user;            /* holds a use of the alarm thread (alarm.h) */
    struct shm_counts counts_retired; /* of QPs destroyed (the device's count) */
};

struct soft_wire_cq {
    struct soft_wire *w;
    uint32_t db;                /* doorbell index in our context */
    struct shm_doorbell *dbp;
    int fd;
    struct soft_alarm alarm;    /* a timer of one of its send queues rings it */
    /* the earliest timer due while the CQ was not armed: handed to the alarm
     * thread when it is (the owner's own polls run the retry until then) */
    uint64_t due_ns;
};

/* Our receives of a queue (a QP's own or an SRQ's) as the owner reaps them:
 * what it posted and the state of its checks (shm_wire.c). */
struct shm_rq_own {
    struct shm_rqe *rq;
    struct shm_rres *rres;
    _Atomic uint64_t *cons;
    uint32_t cap;
    uint64_t prod;              /* posted */
    bool many_senders;          /* UD, SRQ: a dead sender's taken receive is taken back */
    bool srq;                   /* an SRQ's: results name the QP they arrived at */
    unsigned idle;              /* empty reaps since cons was last checked */
    uint64_t stall_ns;
};

struct soft_wire_srq {
    struct soft_wire *w;
    struct soft_wire_srq *next;
    void *cookie;
    struct shm_srq_block *sh;
    uint64_t sh_off;
    size_t sh_bytes;
    uint32_t srqn, cap;
    struct shm_rq_own own;
    uint32_t limit;             /* armed (ours is the truth), 0: none */
    bool limit_hit;             /* for the next progress */
};

/* What events a queue pair has for the objects (progress reports them). */
enum { SHM_EV_ERR = 1, SHM_EV_BROKEN = 2 };

struct soft_wire_qp {
    struct soft_wire *w;
    struct soft_wire_qp *next;
    void *cookie;
    struct shm_qp_block *sh;
    uint64_t sh_off;
    size_t sh_bytes;
    uint32_t qpn, qp_type, rq_cap, sq_cap;
    struct soft_wire_qp_attr a; /* the truth (the block has copies for peers) */
    struct soft_wire_cq *recv_cq, *send_cq;
    struct soft_wire_srq *srq;  /* receives come from it */
    struct shm_rq_own rq_own;   /* our own receive queue (unused with an SRQ) */
    uint64_t sq_tail;           /* what the objects posted */
    uint64_t sq_reaped;         /* the sends the objects took */
    uint64_t sq_stop;           /* in ERR: sends from here on are flushed */
    bool stopped;               /* in ERR: nothing more executes */
    uint8_t events;             /* SHM_EV_*, for the next progress */
    uint8_t err_cause;          /* SHM_EV_ERR: the soft_wire_cause a peer gave */
    struct shm_view self;       /* this QP as an executor sees it */
    /* connected peer (RC/UC) */
    struct shm_view peer;
    uint64_t peer_checked_ns;
    uint64_t lock_checked_ns;   /* last look for a dead holder of our SQ lock */
    unsigned alive_tick;        /* look at the clock every 64th send */
    unsigned wait_looks;        /* shm_qp_peer's, to mark our wait every SHM_WAIT_EVERY */
    /* UD: the last send's target, kept while its block names it (a lookup
     * is three syscalls: the registry's lock twice, the process alive) */
    struct shm_view ud_dest;
    uint64_t ud_checked_ns;
    unsigned ud_tick;
    struct soft_path_memo path; /* its ports last found up (shm_deliver.c: path_up) */
    uint32_t copy_gen;          /* the last shared copy's job we published (shm_copy.c) */
    struct shm_copy_pend pend;  /* and the last one it left to its helper */
    struct shm_counts counts;
};

/* ---- functions across the files ---------------------------------------------- */

/* Record what bad value was met (the text of a SOFT_VERR_CORRUPT). */
void shm_corrupt(struct soft_wire *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A bad value broke this QP: say so (shm_corrupt), stop it, and report it
 * to the objects at the next progress. */
void shm_qp_broken(struct soft_wire_qp *q, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Stop a QP (ERR): nothing more executes; results from sq_stop on flush. */
void shm_qp_stop(struct soft_wire_qp *q);

/* shm_fabric.c */
int shm_fabric_open(struct soft_wire *w, char *why, size_t len);
void shm_fabric_close(struct soft_wire *w);
void *shm_ctx_alloc(struct soft_wire *w, size_t size, uint64_t *off);
void shm_ctx_release(struct soft_wire *w, uint64_t off, size_t size);
/* The registry's flock (LOCK_EX or LOCK_SH), bounded (util/private_dir.h):
 * 0, or -errno with why naming the registry's file. */
int shm_fabric_lock(struct soft_wire *w, int op, char *why, size_t len);
int shm_slot_alloc(struct soft_wire *w, uint64_t qp_off, uint32_t qp_type, uint32_t *qpn,
                   char *why, size_t len);
void shm_slot_free(struct soft_wire *w, uint32_t qpn);

/* shm_peer.c */
int shm_peer_self(struct soft_wire *w);
void shm_peers_close(struct soft_wire *w);
/* Find the QP with this number anywhere on the fabric, map its context and
 * check what a view rests on. 0; -ENOENT / -ESRCH when there is no such QP
 * (now); -EBADMSG with the reason in why when its shared memory is corrupt. */
int shm_view_lookup(struct soft_wire *w, uint32_t qpn, struct shm_view *v, char *why,
                    size_t whylen);
bool shm_peer_alive(struct shm_peer *peer);
/* Is the peer's process stopped (SIGSTOP, a debugger)? A look at /proc:
 * for the slow path only. */
bool shm_peer_stopped(struct shm_peer *peer);
bool shm_peer_is_self(struct shm_peer *peer);
/* Pointer to `off` inside the peer context (off < SHM_CTX_SIZE, checked by
 * the caller). */
void *shm_peer_at(struct shm_peer *peer, uint64_t off);
/* Resolve [addr, addr+len) of the peer's MR `key` to a local pointer: 0,
 * -EINVAL/-ENOENT/-ERANGE/-EACCES (a bad key or range), -EPERM (not
 * shareable), -EBADMSG with why (the peer's table is corrupt). A region
 * looked up before and unchanged since is found inline; the rest in
 * shm_peer.c. */
int shm_peer_mem_slow(struct soft_wire *w, struct shm_peer *peer, uint32_t key, uint64_t addr,
                      uint64_t len, uint32_t need_access, void **out, char *why, size_t whylen);
static inline int shm_peer_mem(struct soft_wire *w, struct shm_peer *peer, uint32_t key,
                               uint64_t addr, uint64_t len, uint32_t need_access, void **out,
                               char *why, size_t whylen)
{
    uint32_t idx = key >> 8;
    if (TBRT_LIKELY(!peer->self && idx < peer->nmaps && peer->maps[idx].checked &&
                    peer->maps[idx].key == key)) {
        /* the region we mapped and checked, unchanged since (its epoch):
         * one load instead of the entry's copy under its sequence lock
         * (inline: every send's path resolves a key or two) */
        struct shm_map *m = &peer->maps[idx];
        struct shm_mr_entry *pe =
            (struct shm_mr_entry *)((char *)peer->base + SHM_CTX_MR_OFF) + idx;
        if (atomic_load_explicit(&pe->epoch, memory_order_acquire) == m->epoch) {
            if (addr < m->iova || len > m->length || addr - m->iova > m->length - len)
                return -ERANGE;
            if ((m->access & need_access) != need_access)
                return -EACCES;
            uint64_t at = m->fd_off + (addr - m->iova);
            if (at > m->len || len > m->len - at)
                return -ERANGE;     /* (checked when mapped: cannot happen) */
            *out = (char *)m->base + at;
            return 0;
        }
    }
    return shm_peer_mem_slow(w, peer, key, addr, len, need_access, out, why, whylen);
}
/* Wake the owner of doorbell dbi of the peer's context, if it is armed. */
void shm_ring(struct soft_wire *w, struct shm_peer *peer, struct shm_doorbell *db, uint32_t dbi);
/* The wake-up socket of doorbell dbi of context ctx_id of process pid, in
 * our private directory (only this user can reach it): its address, or
 * -ENAMETOOLONG when the directory's path leaves no room. */
int shm_wake_addr(struct soft_wire *w, int32_t pid, uint64_t ctx_id, uint32_t dbi,
                  struct sockaddr_un *a, socklen_t *len);

/* shm_rq.c: our receive queues (a QP's or an SRQ's) */
void shm_rq_post(struct shm_rq_own *o, uint64_t index, const struct soft_wire_recv *r);
/* recv_done for one of them (kind "QP" / "SRQ" and its number, for
 * messages: put together only when one is written, never per poll;
 * stopped: the QP is in ERR, flush what has not finished). */
int shm_rq_done(struct soft_wire *w, struct shm_rq_own *o, const char *kind, uint32_t num,
                bool stopped, uint64_t c, struct soft_result *r);
/* RESET: nothing posted looks posted any more; cons catches up. */
void shm_rq_reset(struct shm_rq_own *o);
/* Finish receive c of ours with result r, as a taker does (shm_copy.c: a
 * copy we helped with and made whole): only if it is posted, taken by its
 * sender (below cons) and claimed by no one yet. qpn: an SRQ's QP. */
bool shm_rq_finish(struct shm_rq_own *o, uint64_t c, const struct soft_result *r, uint32_t qpn);
/* A sender claimed receive c and writes its result (a few stores): wait
 * for the result, bounded (it may have died in between). True when it is
 * there. */
bool shm_rq_result_waits(struct shm_rq_own *o, uint64_t c);

/* shm_srq.c: wire.h's srq_* ops */
int shm_srq_create(struct soft_wire *w, const struct soft_wire_srq_init *init,
                   struct soft_wire_srq **out, uint32_t *srqn, char *why, size_t len);
void shm_srq_destroy(struct soft_wire_srq *s);
void shm_srq_post(struct soft_wire_srq *s, uint64_t index, const struct soft_wire_recv *r);
void shm_srq_arm(struct soft_wire_srq *s, uint32_t limit);
int shm_srq_done(struct soft_wire_srq *s, uint64_t index, struct soft_result *r);
/* Progress: the SRQs whose limit was crossed, as events (up to max). */
int shm_srq_events(struct soft_wire *w, struct soft_wire_event *ev, int max);
/* A sender took receive k of the SRQ behind view t: the limit's check. */
void shm_srq_taken(struct soft_wire *w, struct shm_view *t, uint64_t k);

/* shm_event.c: the event doorbell, port changes, CQ alarms, wake sockets */
int shm_wake_bind(struct soft_wire *w, uint32_t db);
void shm_wake_unbind(struct soft_wire *w, int fd, uint32_t db);
int shm_event_open(struct soft_wire *w, char *why, size_t len);
void shm_event_close(struct soft_wire *w);
int shm_event_fd(struct soft_wire *w);
void shm_event_arm(struct soft_wire *w);
void shm_event_ack(struct soft_wire *w);
void shm_ports_changed(struct soft_wire *w);
void shm_cq_alarm_init(struct soft_wire_cq *c);
/* Ring the CQ's doorbell at due_ns (or sooner if already set so), once the
 * CQ is armed; shm_cq_alarm_armed hands a time kept till then over. */
void shm_cq_alarm_at(struct soft_wire_cq *c, uint64_t due_ns);
void shm_cq_alarm_armed(struct soft_wire_cq *c);

/* shm_mem.c */
int shm_mr_reg(struct soft_wire *w, void *addr, size_t len, uint64_t iova, uint32_t access,
               uint32_t *key, char *why, size_t whylen);
void shm_mr_dereg(struct soft_wire *w, uint32_t key);
/* Resolve an SGE of our own keys (iova) against our records: the process
 * address in *out. */
int shm_local_mem(struct soft_wire *w, uint32_t lkey, uint64_t addr, uint64_t len,
                  uint32_t need_access, void **out);
/* wire.h's mr_local: the same, and -EPERM for writing into a region peers
 * cannot reach (as the executor would fail it). */
int shm_mr_local(struct soft_wire *w, uint32_t lkey, uint64_t addr, uint64_t len,
                 uint32_t need_access, void **out);
/* Seal a memfd that peers map so it can never shrink under them. */
int shm_memfd_seal(int fd);
void shm_mem_attach(struct soft_wire *w);
void shm_mem_detach(struct soft_wire *w);

/* shm_pages.c: the process's memory. What [s, e) (page aligned) is:
 * swappable (all private writable anonymous pages, but for parts ours()
 * says are backings already), writable but not all of that kind (local
 * only), or not all mapped writable. */
enum { SHM_PAGES_SWAPPABLE, SHM_PAGES_LOCAL, SHM_PAGES_READONLY };
int shm_pages_kind(uintptr_t s, uintptr_t e, bool (*ours)(uintptr_t, uintptr_t));
/* Write the pages of [s, e) that hold anything into fd at p - base (parts
 * ours() names: all their pages); 0 or -errno. */
int shm_pages_copy_in(int fd, uintptr_t base, uintptr_t s, uintptr_t e,
                      bool (*ours)(uintptr_t, uintptr_t));
/* Put private pages back under [s, e) with fd's data (fd offset 0 = s),
 * where fd is still what is mapped there: the bytes that are not (the owner
 * unmapped the memory while it was registered, and something else may live
 * there now) are left alone, and counted in the result. */
size_t shm_pages_copy_out(int fd, uintptr_t s, uintptr_t e);
/* How many bytes of [s, e) are not mapped from fd (offset 0 = s) any more. */
size_t shm_pages_foreign(int fd, uintptr_t s, uintptr_t e);

/* One send queue being run (shm_exec.c), and the message being delivered
 * (shm_deliver.c). */
struct shm_exec {
    struct soft_wire *w;            /* the executing process's wire */
    struct shm_view *sv;            /* whose send queue (local->self when ours) */
    struct soft_wire_qp *local;     /* the owner's QP when the owner runs it */
    struct soft_wire_qp *served;    /* our QP whose peer's queue we run */
    struct shm_view *tv;            /* connected: where the sends go */
    /* the sender's attributes, read once (the owner's records when local) */
    uint8_t rnr_retry, port, dev_index;
    uint64_t now;                   /* 0 until needed: the clock is not free */
    uint64_t wake_ns;               /* SHM_WAIT on a timer: when to try again (0: none) */
    uint64_t index;                 /* the send being run */
    uint64_t tail;                  /* and where the sends posted end */
    struct soft_result res;         /* and how it finished */
    bool peer_bad;                  /* the connected peer's lookup found a bad value */
    char why[TBRT_WHY_MAX];         /* last: not cleared per send (exec_init) */
};

/* No RNR timer is longer than this (IB spec table 45): a later retry time
 * in a send slot is a bad value. */
#define SHM_RNR_MAX_NS (655360ull * 1000)

/* How delivering a send ended. DONE: finished (e->res says how; the queue
 * goes on). FAILED: finished with an error that moves the QP to ERR. WAIT:
 * try again later. SKIP: the owner must run it. BROKEN: the queue run for a
 * peer is corrupt: stop. */
enum { SHM_DONE, SHM_WAIT, SHM_FAILED, SHM_SKIP, SHM_BROKEN, SHM_PENDING };

/* shm_deliver.c: one send (slot is its place in shared memory, w its
 * checked copy). */
int shm_deliver_connected(struct shm_exec *e, struct shm_swr *slot, struct shm_swr *w);
int shm_deliver_ud(struct shm_exec *e, struct shm_swr *slot, struct shm_swr *w);

/* shm_copy.c: the copy of a send into its receive, n bytes from src
 * (the sender's MR src_key at src_addr) to dst (the target's dst_key at
 * dst_addr). Large ones the owner's executor shares with the target's
 * process. 0: copied (the caller finishes the send as any); SHM_COPY_LEFT:
 * the target's process copies the rest and finishes the receive (a SEND's
 * recv_index, with res); the send stays at the head of its queue, marked
 * with the job's generation (e->local->pend.gen), for shm_copy_pending. */
struct shm_copy_span {
    void *dst;
    const void *src;
    uint64_t len, src_addr, dst_addr;
    uint32_t src_key, dst_key;
    bool read;                  /* an RDMA READ: src is the target's memory */
    bool with_imm;              /* a SEND: its immediate data, */
    uint32_t imm;
    uint64_t recv_index;        /* the receive it fills */
    struct soft_result res;     /* and that receive's result */
};
#define SHM_COPY_LEFT 1
int shm_copy_run(struct shm_exec *e, const struct shm_copy_span *c);
/* The send at the head of the queue being run waits for its copy's job
 * gen (in e->tv's block) to be whole: SHM_DONE (it is: the send is
 * complete), SHM_WAIT, or SHM_FAILED (its owner's bound: e->res, e->why). */
int shm_copy_pending(struct shm_exec *e, uint32_t gen);
/* The QP stops or resets: no helper takes pieces of its job any more. */
void shm_copy_abandon(struct soft_wire_qp *q);
/* Our receiving QP q's turn: take pieces of a copy its peer shares. */
void shm_copy_help(struct soft_wire_qp *q);
/* A bad value met while running a send (shm_exec.c). `in_target`: it was in
 * the target's memory (the send fails; the target goes to ERR), else in the
 * queue being run (the QP it belongs to, or we run it for, breaks). */
int shm_exec_broken(struct shm_exec *e, bool in_target, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int shm_exec_fail(struct shm_exec *e, enum ibv_wc_status st, uint32_t verr);
uint64_t shm_exec_now(struct shm_exec *e);
/* Tell a QP's owner it went to ERR (cause: enum soft_wire_cause, why); the
 * owner stops it on its next turn, which the doorbells rung here wake it
 * for. */
void shm_mark_err(struct soft_wire *w, struct shm_view *v, int cause);

/* shm_exec.c: executing one send queue, as its owner or as the receiver
 * the sender is connected to (on behalf of our QP `target`). */
void shm_sq_run_own(struct soft_wire_qp *q);
void shm_sq_run_peer(struct soft_wire_qp *target);
/* Take a send queue's executor lock (stealing it from a dead holder). */
bool shm_sq_lock(struct soft_wire *w, struct shm_qp_block *s, bool steal);
void shm_sq_unlock(struct shm_qp_block *s);
/* The connected peer's block as a send needs it: still the QP we are
 * connected to, in RTR or RTS, not moved to ERR by anyone (shm_deliver.c's
 * lookup and shm_direct.c both ask). */
static inline bool shm_peer_takes(const struct shm_view *v, uint32_t dest_qpn)
{
    uint32_t st = atomic_load_explicit(&v->sh->state, memory_order_acquire);
    return v->sh->qpn == dest_qpn && (st == IBV_QPS_RTR || st == IBV_QPS_RTS) &&
           !atomic_load_explicit(&v->sh->remote_err, memory_order_relaxed);
}

/* Both ends' ports up: soft<dev_index> port `port` (0: 1) and the target's,
 * read once from its block (bounded by port_state_of); m keeps the answer
 * until some process sets a port state. */
static inline bool shm_path_up(struct soft_wire *w, struct soft_path_memo *m, uint8_t dev_index,
                               uint8_t port, const struct shm_view *t)
{
    uint8_t tport = t->sh->port, tdev = t->sh->dev_index;
    return soft_faults_path_up(w->cfg.faults, m, dev_index, port ? port : 1, tdev,
                               tport ? tport : 1);
}

/* shm_direct.c: run send `index` (a small inline WRITE of len bytes from
 * data) from the poster's own memory at once, when the queue is empty and
 * nothing can go other than well (wire.h: write_inline); true when it ran
 * (posted and finished), false: post it as any. */
bool shm_direct_write(struct soft_wire_qp *q, uint64_t index, const void *data, uint32_t len,
                      uint64_t remote_addr, uint32_t rkey);

#endif
