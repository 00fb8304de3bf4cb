/* shm_copy.c - a large send's (or RDMA READ's) copy, shared with the
 * target's process.
 *
 * On hardware the NIC's DMA moves the bytes while both CPUs go on. Here
 * the "DMA" is a memcpy by whoever runs the send queue, nearly always the
 * sender (shm_exec.c). A stream then has the sender copy twice (into its
 * ring, then into the receive) while the receiver, which only reads what
 * arrived, waits for it. So a copy of SHM_COPY_MIN bytes or more is cut
 * into pieces and published in the receiving QP's block (after its send
 * queue); the target's process, whose turns of progress look at that block
 * while it waits for this very message, copies pieces too. An RDMA READ of
 * SHM_COPY_READ_MIN bytes or more is shared the same way with the process
 * whose memory it reads (a sender of a direct transfer, waiting for the
 * reader to finish: engine/transport/direct.c).
 *
 * Who copies what: the executor takes pieces one at a time from the front
 * of the job, the helper a run of half of what is left (SHM_COPY_RUN at
 * most) from its back, with one CAS on the word that names the job (so the
 * word moves between the two CPUs once a run, not once a piece: on a
 * machine where a line takes a few hundred ns to cross, a claim per piece
 * took a quarter of the sender's time). Whoever's count of finished
 * pieces makes the job whole finishes it: the executor as any send (it
 * writes the receive's result and its own), the helper by writing its own
 * receive's result. In the second case the send stays at the head of its
 * queue, marked with the job's generation, and whoever runs the queue next
 * (the sender at its next post or poll, or the receiver's turn) completes
 * it once it finds the job whole. So neither end waits for the other's
 * pieces: the sender goes on filling its next stride while the receiver
 * copies its run of the last.
 *
 * The job is a peer's word to the helper. The helper resolves both ranges
 * through the MR tables (shm_peer_mem: the sender's MR, and its own with
 * LOCAL_WRITE; for a READ its own with REMOTE_READ, and the reader's with
 * LOCAL_WRITE) before it takes a piece, uses its own piece size, and takes
 * pieces only by a CAS on the word that names the job (generation and
 * ends): pieces it copies belong to the job it checked, as that job cannot
 * close before they are done. The receive it finishes must be one of its
 * own, posted and not yet taken by anyone else (a CAS on its slot), and
 * its length is the job's, the bytes it copied. The wait for a helper's
 * pieces is bounded: if the target's process died they are copied again
 * (no one else writes there now); a target that runs but holds pieces for
 * SHM_COPY_STALL_NS fails the send and breaks the connection; one that is
 * stopped holds the send until it runs again (its pieces cannot be copied
 * again meanwhile: it would write them over whatever the receive holds by
 * then), as a receiver that does not post holds a SEND. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"
#include "util/copy.h"

#define SHM_COPY_PIECE (16u << 10)
#define SHM_COPY_MIN (2u * SHM_COPY_PIECE)
/* A READ is shared from this size only: below it the reader's own copy
 * leaves the bytes in its cache for the reader's next look at them, which a
 * helper's copy takes away. Decided on data the lender had just written
 * (tbrt-bench bw-reg-fresh: lines in the lender's cache, not the reader's,
 * as a real sender's are): 64 KiB READs shared ran 1.15-1.45x the reader
 * alone (10 of 10 interleaved pairs, median 1.3), 256 KiB higher in 7 of 8,
 * 40 KB also (6 of 8, ~1.15x). One buffer sent again and again (bw-reg),
 * whose lines the reader's cache keeps between READs, moves nothing across:
 * there sharing was even at 64 KiB (median 1.0) and lost ~8% at 40 KB, so
 * not below 64 KiB. (This was 512 KiB, chosen on that repeated buffer.) */
#define SHM_COPY_READ_MIN (64u << 10)
#define SHM_COPY_MAX_PIECES 0x7fffu     /* the claim word's 16-bit fields never carry */
/* A helper's run: at most this many pieces a claim. Half of what is left
 * alone let a helper that arrived early take 2 MiB of a 4 MiB READ, and its
 * executor then waited for it (direct transfers at 0.58 of before); a piece
 * a claim moved the word between the CPUs once a piece. */
#define SHM_COPY_RUN 8u
#define SHM_COPY_STALL_NS 1000000000ull

static inline uint64_t claim_word(uint32_t gen, uint32_t back, uint32_t front)
{
    return (uint64_t)gen << 32 | (uint64_t)back << 16 | front;
}

/* The pieces: SHM_COPY_PIECE bytes each, but the last SHM_COPY_PIECE bytes
 * go in quarters, so that the runs the two ends take meet finely. */
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

/* Where piece i (<= pieces_of(len)) starts; len for the one past the last. */
static uint64_t piece_off(uint64_t len, uint32_t i)
{
    struct piece_plan p = plan_of(len);
    if (i < p.nhead)
        return (uint64_t)i * SHM_COPY_PIECE;
    return TBRT_MIN(p.head + (uint64_t)(i - p.nhead) * SHM_COPY_SMALL, len);
}

/* Copy pieces [i, k) (k <= pieces_of(len)), one run; their bytes. */
static uint64_t copy_pieces(void *dst, const void *src, uint64_t len, uint32_t i, uint32_t k)
{
    uint64_t off = piece_off(len, i), end = piece_off(len, k);
    bulk_copy((char *)dst + off, (const char *)src + off, end - off);
    return end - off;
}

int shm_copy_run(struct shm_exec *e, const struct shm_copy_span *c)
{
    struct soft_wire_qp *q = e->local;
    uint64_t n = pieces_of(c->len);
    /* only the owner publishes (one executor per target: the connected
     * QP's), and only to another context */
    if (!q || q->qp_type == IBV_QPT_UD || c->len < (c->read ? SHM_COPY_READ_MIN : SHM_COPY_MIN) ||
        n > SHM_COPY_MAX_PIECES || shm_peer_is_self(e->tv->peer)) {
        bulk_copy(c->dst, c->src, c->len);
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
    j->recv_index = c->recv_index;
    j->imm = c->imm;
    j->with_imm = c->with_imm;
    atomic_store_explicit(&j->done, 0, memory_order_relaxed);
    atomic_store_explicit(&j->claim, claim_word(gen, (uint32_t)n, 0), memory_order_release);
    /* the target's next turn looks (shm_progress: the word it polls) */
    atomic_store_explicit(&e->tv->sh->help_wanted, 1, memory_order_release);
    uint32_t mine = 0, back = (uint32_t)n;
    /* at most n pieces of ours: a target that winds the word back (it is
     * in its memory) gets copies again, never a loop without end */
    while (mine < n) {
        uint64_t w = atomic_fetch_add_explicit(&j->claim, 1, memory_order_acq_rel);
        uint32_t i = (uint32_t)(w & 0xffff);
        back = (uint32_t)(w >> 16) & 0xffff;
        if (i >= back || i >= n)
            break;
        copy_pieces(c->dst, c->src, c->len, i, i + 1);
        mine++;
    }
    if (mine < n)
        q->counts.copies_shared++;
    uint32_t before = atomic_fetch_add_explicit(&j->done, mine, memory_order_acq_rel);
    if (before + mine >= n) {
        /* whole with our count: ours to finish, as any send */
        atomic_store_explicit(&j->claim, 0, memory_order_release);
        return 0;
    }
    /* the helper's count will make it whole: it finishes the receive, and
     * whoever runs the queue next finds the job whole and completes the
     * send (shm_copy_pending) */
    q->pend = (struct shm_copy_pend){.gen = gen, .n = (uint32_t)n, .dst = c->dst, .src = c->src,
                                     .len = c->len, .back = back < n ? back : (uint32_t)n};
    return SHM_COPY_LEFT;
}

/* Sends queue behind a send whose copy its helper is finishing: how long
 * the owner waits for the helper's last run (at most SHM_COPY_RUN pieces,
 * being copied) before it leaves them to the target's next turn. So the
 * next send, posted while the helper copies, still shares its copy. */
#define SHM_COPY_CATCH_NS 200000ull

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int shm_copy_pending(struct shm_exec *e, uint32_t gen)
{
    struct shm_copy_job *j = e->tv->copy;
    uint64_t w = atomic_load_explicit(&j->claim, memory_order_acquire);
    if ((uint32_t)(w >> 32) != gen)
        return SHM_DONE;        /* no such job open (abandoned): nothing to wait for */
    struct soft_wire_qp *q = e->local;
    struct shm_copy_pend *p = q && q->pend.gen == gen ? &q->pend : NULL;
    /* whole by the owner's count; a peer running the queue goes by the
     * job's words in its own block (a sender that lies there only ends its
     * own send early) */
    uint64_t len = j->len, n = p ? p->n : (len ? pieces_of(len) : 0);
    uint32_t done = atomic_load_explicit(&j->done, memory_order_acquire);
    bool more = e->tail > e->index + 1;
    if (done < n && p && more) {
        /* the owner with sends to run: its helper's run ends in microseconds */
        uint64_t until = now_ns() + SHM_COPY_CATCH_NS;
        for (unsigned spins = 1; done < n; spins++) {
            cpu_relax();
            done = atomic_load_explicit(&j->done, memory_order_acquire);
            if ((spins & 63) == 0 && now_ns() > until)
                break;
        }
    }
    if (done >= n) {
        atomic_store_explicit(&j->claim, 0, memory_order_release);
        return SHM_DONE;
    }
    /* sends wait behind it: the target's next turn runs the queue once it
     * has finished its pieces, whether or not the owner calls in again */
    if (p && more)
        atomic_store_explicit(&e->tv->sh->help_wanted, 1, memory_order_release);
    if (!p || (++p->looks & 63) != 0)
        return SHM_WAIT;        /* the clock and the helper every 64th look */
    uint64_t now = shm_exec_now(e);
    if (!p->since_ns)
        p->since_ns = now;
    if (!shm_peer_alive(e->tv->peer)) {
        /* its pieces, copied again (no one else writes there now); the
         * receive is for no one */
        uint64_t off = piece_off(p->len, p->back);
        bulk_copy((char *)p->dst + off, (const char *)p->src + off, p->len - off);
        atomic_store_explicit(&j->claim, 0, memory_order_release);
        return SHM_DONE;
    }
    if (now - p->since_ns <= SHM_COPY_STALL_NS)
        return SHM_WAIT;
    if (shm_peer_stopped(e->tv->peer)) {
        /* stopped holding pieces: alive, not progressing; it finishes them
         * when it runs again (the send waits, as for a receive it has not
         * posted; a caller's wait ends at its own bound) */
        p->since_ns = now;
        return SHM_WAIT;
    }
    atomic_store_explicit(&j->claim, 0, memory_order_release);
    return shm_exec_broken(e, true, "peer QP 0x%x (pid %d) took pieces of a shared copy and "
                           "did not finish them in %llu ms", e->tv->qpn, (int)e->tv->pid,
                           (unsigned long long)(SHM_COPY_STALL_NS / 1000000));
}

/* A job we started is over whatever became of it (the QP stops or
 * resets): no helper takes a piece of it any more. */
void shm_copy_abandon(struct soft_wire_qp *q)
{
    if (q->peer.peer)
        atomic_store_explicit(&q->peer.copy->claim, 0, memory_order_release);
}

/* The helper made the job whole: a SEND's receive is ours to finish, if it
 * is one of ours that was posted and taken by nobody else (the CAS in
 * shm_rq_finish); its length is the bytes we were asked to copy. Then the
 * executor, which may sleep on its send CQ, hears of it. */
static void helper_finishes(struct soft_wire_qp *q, uint64_t recv_index, uint64_t len, bool imm,
                            uint32_t imm_data, bool read)
{
    if (!read && !q->stopped && len <= UINT32_MAX) {
        struct soft_result r = {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
                                .byte_len = (uint32_t)len, .src_qp = q->a.dest_qpn,
                                .wc_flags = imm ? IBV_WC_WITH_IMM : 0, .imm = imm ? imm_data : 0};
        shm_rq_finish(q->srq ? &q->srq->own : &q->rq_own, recv_index, &r, q->qpn);
    }
    shm_ring(q->w, q->peer.peer, q->peer.send_db, q->peer.send_dbi);
}

void shm_copy_help(struct soft_wire_qp *q)
{
    struct shm_copy_job *j = q->self.copy;
    uint64_t w = atomic_load_explicit(&j->claim, memory_order_acquire);
    uint32_t gen = (uint32_t)(w >> 32);
    if (!gen || (w & 0xffff) >= ((w >> 16) & 0xffff) || !q->peer.peer || q->stopped)
        return;
    /* the job's words, read once, as the job the claim word named (a job
     * that closed meanwhile makes the CAS below fail) */
    uint32_t src_key = j->src_key, dst_key = j->dst_key, imm = j->imm;
    uint64_t src_addr = j->src_addr, dst_addr = j->dst_addr, len = j->len;
    uint64_t recv_index = j->recv_index;
    bool read = j->read != 0, with_imm = j->with_imm != 0;
    uint64_t n = len ? pieces_of(len) : 0;
    if (!n || n > SHM_COPY_MAX_PIECES)
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
        uint32_t front = (uint32_t)(w & 0xffff), back = (uint32_t)(w >> 16) & 0xffff;
        if ((uint32_t)(w >> 32) != gen || back > n || front >= back)
            return;
        /* half of what is left, from the back (the executor takes the
         * front), at most SHM_COPY_RUN pieces */
        uint32_t k = TBRT_MIN((back - front + 1) / 2, SHM_COPY_RUN);
        if (!atomic_compare_exchange_weak_explicit(&j->claim, &w, claim_word(gen, back - k, front),
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        uint64_t got = copy_pieces(dst, src, len, back - k, back);
        q->counts.pieces_helped += k;
        q->counts.bytes_helped += got;
        uint32_t before = atomic_fetch_add_explicit(&j->done, k, memory_order_acq_rel);
        if (before < n && before + k >= n) {
            helper_finishes(q, recv_index, len, with_imm, imm, read);
            return;
        }
        w = atomic_load_explicit(&j->claim, memory_order_acquire);
    }
}
