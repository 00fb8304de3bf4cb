/* shm_copy.c - a large send's (or RDMA READ's) copy, shared with the
 * target's process.
 *
 * On hardware the NIC's DMA moves the bytes while both CPUs go on. Here
 * the "DMA" is a memcpy by whoever runs the send queue, nearly always the
 * sender (shm_exec.c). A stream then has the sender copy twice (into its
 * ring, then into the receive) while the receiver, which only reads what
 * arrived, waits for it. So a copy of SHM_COPY_MIN bytes or more is cut
 * into SHM_COPY_PIECE pieces and published in the receiving QP's block
 * (after its send queue);
 * the target's process, whose turns of progress look at that block while
 * it waits for this very message, copies pieces too. The executor copies
 * until none is left, waits for the pieces the target took, and only then
 * writes the receive's result: the receive completes once, with all its
 * bytes in. An RDMA READ of SHM_COPY_READ_MIN bytes or more is shared the
 * same way with the process whose memory it reads (a sender of a direct
 * transfer, waiting for the reader to finish: engine/transport/direct.c).
 *
 * The job is a peer's word to the helper. The helper resolves both ranges
 * through the MR tables (shm_peer_mem: the sender's MR, and its own with
 * LOCAL_WRITE; for a READ its own with REMOTE_READ, and the reader's with
 * LOCAL_WRITE) before it takes a piece, uses its own piece size, and takes
 * a piece only by a CAS on the word that names the job (generation and
 * count): a piece it copies belongs to the job it checked, as that job
 * cannot close before the piece is done. The executor's wait is bounded:
 * if the target's process died its pieces are copied again (no one else
 * writes there now); a target that holds a piece for SHM_COPY_STALL_NS
 * breaks the connection. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"

#define SHM_COPY_PIECE (16u << 10)
#define SHM_COPY_MIN (2u * SHM_COPY_PIECE)
/* A READ is shared from this size only: below it the reader's own copy
 * leaves the bytes in its cache for the reader's next look at them, which a
 * helper's copy takes away (64 KiB reads: 12.8 GB/s alone, 9.0 shared;
 * 4 MiB, past the cache anyway: 5.3 alone, 6.7 shared) */
#define SHM_COPY_READ_MIN (512u << 10)
#define SHM_COPY_MAX_PIECES 0x7fffu     /* the claim word's 16-bit fields never carry */
#define SHM_COPY_STALL_NS 1000000000ull

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline uint64_t claim_word(uint32_t gen, uint32_t pieces, uint32_t next)
{
    return (uint64_t)gen << 32 | (uint64_t)pieces << 16 | next;
}

/* The pieces: SHM_COPY_PIECE bytes each, but the last SHM_COPY_PIECE bytes
 * go in quarters, so that whoever finishes first waits for at most a
 * quarter piece the other end is still copying. */
#define SHM_COPY_SMALL (SHM_COPY_PIECE / 4)

struct piece_plan {
    uint64_t head;              /* bytes in whole pieces */
    uint64_t nhead;             /* and how many (a peer's len may be any size) */
};

static inline struct piece_plan plan_of(uint64_t len)
{
    uint64_t head = len - TBRT_MIN(len, (uint64_t)SHM_COPY_PIECE);
    return (struct piece_plan){.head = head, .nhead = (head + SHM_COPY_PIECE - 1) / SHM_COPY_PIECE};
}

static inline uint64_t pieces_of(uint64_t len)
{
    struct piece_plan p = plan_of(len);
    return p.nhead + (len - p.head + SHM_COPY_SMALL - 1) / SHM_COPY_SMALL;
}

/* Copy piece i (< pieces_of(len)); its size. */
static uint64_t copy_piece(void *dst, const void *src, uint64_t len, uint32_t i)
{
    struct piece_plan p = plan_of(len);
    uint64_t off, end;
    if (i < p.nhead) {
        off = (uint64_t)i * SHM_COPY_PIECE;
        end = TBRT_MIN(off + SHM_COPY_PIECE, p.head);
    } else {
        off = p.head + (uint64_t)(i - p.nhead) * SHM_COPY_SMALL;
        end = TBRT_MIN(off + SHM_COPY_SMALL, len);
    }
    memcpy((char *)dst + off, (const char *)src + off, end - off);
    return end - off;
}

/* Wait until others finished `theirs` pieces of the job in t's block.
 * 0, or -EBADMSG (with e->why) when the target stalls holding one. */
static int wait_theirs(struct shm_exec *e, struct shm_copy_job *j, uint32_t theirs,
                       const struct shm_copy_span *c)
{
    uint64_t start = 0;
    for (unsigned spins = 0;; spins++) {
        if (atomic_load_explicit(&j->done, memory_order_acquire) >= theirs)
            return 0;
        if (spins < 256) {
            cpu_relax();
            continue;
        }
        /* a helper is copying a piece (microseconds) or was preempted
         * holding one: let it run, and look at the clock and at it */
        sched_yield();
        uint64_t now = now_ns();
        if (!start)
            start = now;
        if (!shm_peer_alive(e->tv->peer)) {
            memcpy(c->dst, c->src, c->len);     /* its pieces, and everything */
            return 0;
        }
        if (now - start > SHM_COPY_STALL_NS) {
            snprintf(e->why, sizeof e->why, "peer QP 0x%x (pid %d) took pieces of a shared "
                     "copy and did not finish them in %llu ms", e->tv->qpn, (int)e->tv->pid,
                     (unsigned long long)(SHM_COPY_STALL_NS / 1000000));
            return -EBADMSG;
        }
    }
}

int shm_copy_run(struct shm_exec *e, const struct shm_copy_span *c)
{
    struct soft_wire_qp *q = e->local;
    uint64_t n = pieces_of(c->len);
    /* only the owner publishes (one executor per target: the connected
     * QP's), and only to another context */
    if (!q || q->qp_type == IBV_QPT_UD || c->len < (c->read ? SHM_COPY_READ_MIN : SHM_COPY_MIN) ||
        n > SHM_COPY_MAX_PIECES ||
        shm_peer_is_self(e->tv->peer)) {
        memcpy(c->dst, c->src, c->len);
        return 0;
    }
    struct shm_copy_job *j = e->tv->copy;
    if (++q->copy_gen == 0)
        q->copy_gen = 1;
    uint32_t gen = q->copy_gen;
    j->src_key = c->src_key;
    j->dst_key = c->dst_key;
    j->src_addr = c->src_addr;
    j->dst_addr = c->dst_addr;
    j->len = c->len;
    j->read = c->read;
    atomic_store_explicit(&j->done, 0, memory_order_relaxed);
    atomic_store_explicit(&j->claim, claim_word(gen, (uint32_t)n, 0), memory_order_release);
    /* the target's next turn looks (shm_progress: the word it polls) */
    atomic_store_explicit(&e->tv->sh->help_wanted, 1, memory_order_release);
    uint32_t mine = 0;
    /* at most n pieces of ours: a target that winds the word back (it is
     * in its memory) gets copies again, never a loop without end */
    while (mine < n) {
        uint64_t w = atomic_fetch_add_explicit(&j->claim, 1, memory_order_acq_rel);
        uint32_t i = (uint32_t)(w & 0xffff);
        if (i >= n)
            break;
        copy_piece(c->dst, c->src, c->len, i);
        mine++;
    }
    int rc = mine >= n ? 0 : wait_theirs(e, j, (uint32_t)n - mine, c);
    /* closed: a helper's CAS on the old word fails from here on */
    atomic_store_explicit(&j->claim, 0, memory_order_release);
    if (mine < n)
        q->copies.copies_shared++;
    return rc;
}

void shm_copy_help(struct soft_wire_qp *q)
{
    struct shm_copy_job *j = q->self.copy;
    uint64_t w = atomic_load_explicit(&j->claim, memory_order_acquire);
    uint32_t gen = (uint32_t)(w >> 32), n = (uint32_t)(w >> 16) & 0xffff;
    if (!gen || (w & 0xffff) >= n || !q->peer.peer || q->stopped)
        return;
    /* the job's words, read once, as the job the claim word named (a job
     * that closed meanwhile makes the CAS below fail) */
    uint32_t src_key = j->src_key, dst_key = j->dst_key;
    uint64_t src_addr = j->src_addr, dst_addr = j->dst_addr, len = j->len;
    bool read = j->read != 0;
    if (!len || pieces_of(len) != n)
        return;
    void *src, *dst;
    char why[TBRT_WHY_MAX];
    /* a READ of ours: from our memory only where our MR lets a peer read,
     * into the reader's only where its MR lets it write (its own memory);
     * a SEND: from the sender's MR into ours */
    struct shm_peer *from = read ? q->w->self : q->peer.peer, *to = read ? q->peer.peer : q->w->self;
    if (shm_peer_mem(q->w, from, src_key, src_addr, len, read ? IBV_ACCESS_REMOTE_READ : 0, &src,
                     why, sizeof why) ||
        shm_peer_mem(q->w, to, dst_key, dst_addr, len, IBV_ACCESS_LOCAL_WRITE, &dst, why,
                     sizeof why))
        return;                 /* not for us to copy: the executor does it all */
    for (;;) {
        if ((uint32_t)(w >> 32) != gen || ((uint32_t)(w >> 16) & 0xffff) != n ||
            (w & 0xffff) >= n)
            return;
        if (!atomic_compare_exchange_weak_explicit(&j->claim, &w, w + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        uint64_t got = copy_piece(dst, src, len, (uint32_t)(w & 0xffff));
        atomic_fetch_add_explicit(&j->done, 1, memory_order_release);
        q->copies.pieces_helped++;
        q->copies.bytes_helped += got;
        w++;
    }
}
