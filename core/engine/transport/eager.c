/* eager.c - eager frames: small frames RDMA-written into the peer's memory
 * and found there by its reader, without a receive or a completion.
 *
 * A small message sent as a SEND costs the receiver a receive completion
 * (the device's CQ, the receive's result, the stride's placement): about
 * 1,100 instructions and several cache lines from the sender to the reader
 * on the soft device, and a waiting reader looks at its CQ for ~380 more
 * each time. A frame written into a slot the reader polls costs it one line
 * and a few loads. Real transports do this (MVAPICH's RDMA fast path, the
 * eager RDMA of UCX's rc transports); here the engine does it over the
 * device interface, so any device whose WRITEs land in address order
 * (tbrt_dev.ordered_writes: the soft device, whose "DMA" writes a WRITE's
 * last word last, as a NIC's posted PCIe writes land) can take it.
 *
 * Each end's region: a control block the peer writes {consumed u64, asleep
 * u64}, then EAGER_SLOTS slots of EAGER_SLOT bytes the peer writes frames
 * into, in turn (transport.h has the slot's layout). Once the link is ready
 * each end offers its region in a control frame (TBRE: addr, rkey, slots),
 * outside the sequence; an end whose device does not place writes in order
 * (or that is told not to) has no region, offers none and writes none. Both
 * kinds of frame share one sequence: the reader takes an eager frame when
 * its seq is the next one, and a SEND frame that comes with a later seq
 * first takes the eager frames before it (RC places a WRITE before a later
 * SEND completes).
 *
 * Credits: the writer writes a slot only when the reader has consumed the
 * frame written there a lap before; the reader says how many it consumed in
 * its own eager frames (credit) or, every half ring, in a control write.
 *
 * Sleep: a reader that sleeps is woken by a completion, and an eager frame
 * makes none. So before it sleeps it writes asleep = 1 into the writer's
 * control block and sleeps only after that write completed; a writer reads
 * the flag after each eager write (at once, and again when the write's
 * completion shows it placed) and, when it is set, sends an empty SEND frame
 * that wakes the reader. Either the writer sees the flag or the reader,
 * woken by its control write's completion, sees the frame. The reader
 * clears the flag when it finds work again.
 *
 * The peer's words are hostile: a slot is taken only when its header checks,
 * its length fits and its trailer repeats its seq, and never more than a
 * ring of them unread; a consumed count beyond what we wrote, an offer that
 * does not fit, a second offer, or a SEND frame whose earlier eager frame
 * never came fail the link with a reason. */
#include <endian.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/transport/framing.h"
#include "engine/transport/transport.h"
#include "util/debug.h"
#include "util/util.h"

#define WR_FRAME 0u
#define WR_CTL 1u
/* test hooks (engine/link.h: LINK_INJECT_EAGER_*) */
#define INJECT_EAGER_LEN 11
#define INJECT_EAGER_CREDIT 12

static size_t region_bytes(uint32_t slots) { return EAGER_CTL + (size_t)slots * EAGER_SLOT; }

/* A frame's trailer: seq, and its complement, so that no slot of zeros
 * (nor a stale trailer of another seq) looks written. */
static uint64_t trailer_of(uint32_t seq) { return (uint64_t)seq | (uint64_t)~seq << 32; }

static uint32_t eager_check(uint32_t seq, uint32_t len, uint32_t credit)
{
    return ~(FRAME_EAGER_MAGIC ^ seq ^ len ^ credit);
}

static uint32_t pad8(uint32_t n) { return (n + 7u) & ~7u; }

static uint64_t load64(const uint8_t *at)
{
    return le64toh(atomic_load_explicit((_Atomic uint64_t *)(uintptr_t)at, memory_order_acquire));
}

bool eager_possible(const struct xport *x)
{
    const char *e = getenv("TBRT_EAGER");
    return x->framing == TBRT_FRAMING_VARIABLE && x->qp_type == IBV_QPT_RC &&
           x->dev->ordered_writes && !x->opts->no_eager && !(e && strcmp(e, "0") == 0);
}

/* ---- setup and the offer -------------------------------------------------------- */

int eager_setup(struct xport *x)
{
    /* RC in tbrt's variable framing only: fixed framing moves whole strides
     * (TN3205), UC could lose a WRITE and the order with it */
    if (!eager_possible(x))
        return 0;
    size_t bytes = region_bytes(EAGER_SLOTS);
    x->eager.mem = rdma_ring_alloc(bytes);
    if (!x->eager.mem)
        return -ENOMEM;
    int rc = tbrt_mr_reg(x->pd, x->eager.mem, bytes,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &x->eager.mr);
    if (rc) {
        munmap(x->eager.mem, bytes);
        x->eager.mem = NULL;
        return 0;               /* no eager frames: the SEND path still works */
    }
    x->eager.slots = EAGER_SLOTS;
    return 0;
}

/* A control frame of ours (the offer, a wake-up) as an inline SEND: header
 * {magic, len, seq} and len payload bytes from our stack. The region needs
 * inline data anyway (eager frames are inline writes). */
static int post_inline(struct xport *x, uint32_t magic, uint32_t seq, const uint8_t *payload,
                       uint32_t len, const char *what)
{
    uint8_t f[TBRT_STRIDE_HDR + FRAME_EAGER_LEN];
    frame_hdr_write(f, magic, len, seq);
    if (len)
        memcpy(f + TBRT_STRIDE_HDR, payload, len);
    struct ibv_sge sge = {.addr = (uintptr_t)f, .length = TBRT_STRIDE_HDR + len,
                          .lkey = x->send_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = RDMA_INLINE_TAG, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
    int rc = tbrt_post_send(x->qp, &wr, NULL);
    if (rc)
        return xport_fail(x, -rc, "post_send eager %s: %s", what, tbrt_dev_why(x->dev));
    x->inline_count++;
    return 0;
}

/* The link is ready: offer our region (its control block and slots). */
int eager_ready(struct xport *x)
{
    if (!x->eager.mr || x->eager.offered || TBRT_STRIDE_HDR + FRAME_EAGER_LEN > x->max_inline)
        return 0;
    uint8_t o[FRAME_EAGER_LEN];
    frame_region_write(o, (uintptr_t)x->eager.mem, x->eager.mr->rkey, x->eager.slots);
    /* seq 0: the offer is no frame of the stream (it goes before any) */
    int rc = post_inline(x, FRAME_EAGER_MAGIC, 0, o, sizeof o, "offer");
    x->eager.offered = rc == 0;
    return rc;
}

int eager_offer_in(struct xport *x, const uint8_t *payload, uint32_t len)
{
    if (len != FRAME_EAGER_LEN)
        return xport_fail(x, EPROTO, "recv: an eager offer of %u bytes, expected %u", len,
                          FRAME_EAGER_LEN);
    if (x->eager.peer_rkey || x->eager.peer_addr)
        return xport_fail(x, EPROTO, "recv: a second eager offer (a link offers once)");
    /* (one in another framing never gets here: rdma.c names the mismatch) */
    if (x->qp_type != IBV_QPT_RC)
        return xport_fail(x, EPROTO, "recv: an eager offer on a link over %s (eager frames "
                          "need RC)", dev_qp_type_name(x->qp_type));
    uint64_t addr;
    uint32_t rkey, slots;
    frame_region_read(payload, &addr, &rkey, &slots);
    if (slots > EAGER_SLOTS_MAX || (slots & (slots - 1)) || addr > UINT64_MAX - region_bytes(slots))
        return xport_fail(x, EPROTO, "recv: an eager offer of %u slots at 0x%llx (a power of "
                          "2, at most %u, inside the address space)", slots,
                          (unsigned long long)addr, EAGER_SLOTS_MAX);
    x->eager.peer_addr = addr;
    x->eager.peer_rkey = rkey;
    x->eager.wr = (struct ibv_send_wr){.wr_id = RDMA_EAGER_TAG | WR_FRAME, .num_sge = 1,
                                       .opcode = IBV_WR_RDMA_WRITE,
                                       .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
    x->eager.wr.wr.rdma.rkey = rkey;
    /* we write frames only if we can read the peer's control block (credits,
     * asleep): our own region must exist */
    x->eager.out_slots = x->eager.mr ? slots : 0;
    return 0;
}

/* ---- the writer ----------------------------------------------------------------- */

/* The peer's consumed count, checked: it never passes what we wrote. One
 * behind what we saw is old news (the control block lags the counts that
 * came in frames), not a lie. */
static int peer_consumed(struct xport *x, uint32_t c, const char *where)
{
    if ((int32_t)(c - x->eager.seen) <= 0)
        return 0;
    if (c - x->eager.seen > x->eager.sent - x->eager.seen)
        return xport_fail(x, EPROTO, "eager: the peer says (%s) it consumed %u of our eager "
                          "frames; we wrote %u and it had consumed %u", where, c, x->eager.sent,
                          x->eager.seen);
    x->eager.seen = c;
    return 0;
}

bool eager_fits(struct xport *x, uint32_t len)
{
    /* the frame hooks (magic, skip, ...) break SEND frames: none eager then */
    bool hook = x->inject && x->inject != INJECT_EAGER_LEN && x->inject != INJECT_EAGER_CREDIT;
    if (!x->eager.out_slots || len > EAGER_MAX || hook ||
        EAGER_HDR + pad8(len) + 8 > x->max_inline)
        return false;
    /* the send queue holds EAGER_SLOTS writes: a writer that never looks
     * at its completions (it only sends) reaps them here */
    uint32_t room = TBRT_MIN(x->eager.out_slots, (uint32_t)EAGER_SLOTS);
    if (x->eager.wr_inflight >= room && (rdma_poll(x) < 0 || x->eager.wr_inflight >= room))
        return false;
    if (x->eager.sent - x->eager.seen < x->eager.out_slots)
        return true;
    /* no credit as last seen: look at what the peer wrote since */
    uint32_t c = (uint32_t)load64(x->eager.mem);
    if (c == x->eager.seen || peer_consumed(x, c, "control block"))
        return false;
    return x->eager.sent - x->eager.seen < x->eager.out_slots;
}

/* An empty SEND frame: a completion that wakes a sleeping reader. Without
 * room in the send queue, not now: the SENDs in flight were posted before
 * the write and may wake the reader before it lands; they complete before
 * the write does, and its completion looks again (woke_at not moved). */
static int wake(struct xport *x)
{
    if (x->send_count + x->inline_count >= x->nbuf)
        return 0;
    x->eager.woke_at = x->eager.sent;
    if (post_inline(x, TBRT_SEG_MAGIC, x->send_seq, NULL, 0, "wake-up"))
        return -x->err;
    x->send_seq++;
    x->stats.frames_sent++;
    x->stats.eager_wakes++;
    if (DBG_ON(DBG_FRAME))
        dbg_line(x->link_id, "eager wake-up: the peer sleeps; an empty SEND, seq %u",
                 x->send_seq - 1);
    return 0;
}

/* After an eager write was placed (or may have been): is the reader asleep? */
static int wake_if_asleep(struct xport *x)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (x->eager.woke_at != x->eager.sent && load64(x->eager.mem + 8))
        return wake(x);
    return 0;
}

/* The frame [at, at + EAGER_HDR + len) of the pending stride, header not yet
 * written, as an eager frame (eager_fits said it may). */
int eager_post(struct xport *x, const uint8_t *at_const, uint32_t len)
{
    uint8_t *at = (uint8_t *)(uintptr_t)at_const;
    uint32_t seq = x->send_seq;
    uint32_t credit = x->eager.consumed;
    uint32_t hlen = len;        /* what the header says: len, unless a test hook lies */
    if (x->inject == INJECT_EAGER_LEN)
        hlen = EAGER_MAX + 1;
    else if (x->inject == INJECT_EAGER_CREDIT)
        credit += 1000;
    if (x->inject == INJECT_EAGER_LEN || x->inject == INJECT_EAGER_CREDIT)
        x->inject = 0;
    uint32_t h[4] = {htole32(seq), htole32(hlen), htole32(credit),
                     htole32(eager_check(seq, hlen, credit))};
    memcpy(at, h, sizeof h);
    uint32_t end = EAGER_HDR + pad8(len);
    if (end != EAGER_HDR + len)     /* (a call for nothing on every 8-byte message) */
        memset(at + EAGER_HDR + len, 0, end - EAGER_HDR - len);
    uint64_t t = htole64(trailer_of(seq));
    memcpy(at + end, &t, 8);
    uint32_t slot = x->eager.sent & (x->eager.out_slots - 1);   /* a power of 2 */
    /* the write made at the offer (eager_offer_in), this frame's parts in it */
    x->eager.sge = (struct ibv_sge){.addr = (uintptr_t)at, .length = end + 8,
                                    .lkey = x->send_mr->lkey};
    struct ibv_send_wr *wr = &x->eager.wr;
    wr->sg_list = &x->eager.sge;
    wr->wr.rdma.remote_addr = x->eager.peer_addr + EAGER_CTL + (uint64_t)slot * EAGER_SLOT;
    int rc = tbrt_post_send(x->qp, wr, NULL);
    if (rc)
        return xport_fail(x, -rc, "post_send eager frame %u (%u bytes): %s", seq, end + 8,
                          tbrt_dev_why(x->dev));
    if (DBG_ON(DBG_FRAME))
        dbg_line(x->link_id, "frame out eager: slot %u seq %u, %u payload bytes, %u on the wire "
                 "(t=%.6f s)", slot, seq, len, end + 8, now_s() - x->t0);
    x->send_seq++;
    x->eager.sent++;
    x->eager.wr_inflight++;
    x->eager.told = x->eager.consumed;  /* the frame told the peer */
    x->stats.eager_sends++;
    x->stats.frames_sent++;
    /* sending, we are awake: a flag we left set would only cost the peer
     * wake-ups */
    if (x->eager.asleep_told && (rc = eager_awake(x)) != 0)
        return rc;
    return wake_if_asleep(x);
}

const char *eager_wr_what(uint64_t wr_id)
{
    return (wr_id & 1u) == WR_CTL ? "eager control write" : "eager write";
}

int eager_completion(struct xport *x, const struct ibv_wc *wc)
{
    if ((wc->wr_id & 1u) == WR_CTL) {
        if (!x->eager.ctl_inflight)
            return xport_fail(x, EPROTO, "eager control write completion, none in flight");
        x->eager.ctl_inflight--;
        x->eager.ctl_done++;
        return 0;
    }
    if (!x->eager.wr_inflight)
        return xport_fail(x, EPROTO, "eager write completion, none in flight");
    x->eager.wr_inflight--;
    /* placed now: the reader cannot have gone to sleep unseen */
    return wake_if_asleep(x);
}

/* ---- the reader ----------------------------------------------------------------- */

/* Tell the peer what we consumed, and whether we sleep. */
static int write_ctl(struct xport *x, bool asleep)
{
    if (x->eager.ctl_inflight >= EAGER_CTL_MAX)
        return 1;
    uint64_t c[2] = {htole64(x->eager.consumed), htole64(asleep ? 1 : 0)};
    struct ibv_sge sge = {.addr = (uintptr_t)c, .length = sizeof c, .lkey = x->send_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = RDMA_EAGER_TAG | WR_CTL, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
    wr.wr.rdma.remote_addr = x->eager.peer_addr;
    wr.wr.rdma.rkey = x->eager.peer_rkey;
    int rc = tbrt_post_send(x->qp, &wr, NULL);
    if (rc)
        return xport_fail(x, -rc, "post_send eager control write: %s", tbrt_dev_why(x->dev));
    x->eager.ctl_inflight++;
    x->eager.told = x->eager.consumed;
    x->eager.asleep_told = asleep;
    return 0;
}

/* Take the frames whose turn it is from our slots into the reader's queue. */
int eager_poll(struct xport *x)
{
    int n = 0;
    /* at most a slot's worth unread: a writer that ignores our credits
     * rewrites a slot whose frame we hold (its own bytes change), but never
     * grows the reader's queue past its strides and slots */
    while (x->eager.slots && x->eager.taken - x->eager.consumed < x->eager.slots) {
        uint32_t slot = x->eager.taken & (EAGER_SLOTS - 1);
        const uint8_t *at = x->eager.mem + EAGER_CTL + (size_t)slot * EAGER_SLOT;
        uint32_t h[4];
        uint64_t again[2];
        /* a waiting reader's look: one word, not yet its turn */
        if (le32toh(atomic_load_explicit((_Atomic uint32_t *)(uintptr_t)at,
                                         memory_order_relaxed)) != x->recv_seq)
            break;
        memcpy(h, at, sizeof h);
        uint32_t seq = le32toh(h[0]), len = le32toh(h[1]), credit = le32toh(h[2]);
        /* not yet written (an old frame's seq), or not our turn yet, or torn */
        if (seq != x->recv_seq || le32toh(h[3]) != eager_check(seq, len, credit))
            break;
        if (len == 0 || len > EAGER_MAX)
            return xport_fail(x, EPROTO, "recv: eager frame %u in slot %u says %u bytes; a "
                              "slot holds 1 to %u", seq, slot, len, (unsigned)EAGER_MAX);
        if (load64(at + EAGER_HDR + pad8(len)) != trailer_of(seq))
            break;              /* still being placed */
        /* the header read before the trailer was: the same now (not torn) */
        uint64_t first[2];
        memcpy(first, h, sizeof first);
        memcpy(again, at, sizeof again);
        if (first[0] != again[0] || first[1] != again[1])
            break;
        if (peer_consumed(x, credit, "eager frame"))
            return -x->err;
        if (DBG_ON(DBG_FRAME))
            dbg_line(x->link_id, "frame in eager: slot %u seq %u, %u payload bytes (t=%.6f s)",
                     slot, seq, len, now_s() - x->t0);
        x->recv_seq++;
        x->eager.taken++;
        x->eager.recent = true;
        x->stats.frames_recv++;
        x->stats.eager_recvs++;
        n++;
        x->inq[ring_at(x->inq_head, x->inq_count, x->inq_cap)] =
            (struct link_inq){.buf = EAGER_BUF | slot, .len = len};
        x->inq_count++;
        x->inq_bytes += len;
    }
    return n;
}

const uint8_t *eager_data(const struct xport *x, const struct link_inq *q)
{
    return x->eager.mem + EAGER_CTL + (size_t)(q->buf & ~EAGER_BUF) * EAGER_SLOT + EAGER_HDR;
}

/* The oldest eager frame was read: its slot is free; every half ring the
 * writer hears of it (sooner in our own eager frames, when we write some). */
int eager_consumed(struct xport *x)
{
    x->eager.consumed++;
    if (x->eager.consumed - x->eager.told >= x->eager.slots / 2 &&
        write_ctl(x, x->eager.asleep_told) < 0)
        return -x->err;
    return 0;
}

/* Before sleeping: tell the writer. The caller arms the CQ and looks once
 * more before it sleeps: the write's completion, when it comes after that,
 * wakes it, and a writer that missed the flag wrote its frame before it. */
int eager_arm(struct xport *x)
{
    if (!x->eager.slots || !x->eager.peer_rkey || x->eager.asleep_told)
        return 0;
    int rc = write_ctl(x, true);
    return rc < 0 ? rc : 0;
}

/* We are awake again: clear the flag. */
int eager_awake(struct xport *x)
{
    int rc = write_ctl(x, false);
    return rc < 0 ? rc : 0;
}

/* The region's registration goes with the rings' (after the QP), its memory
 * with theirs (after the device, when the QP could not be destroyed). */
int eager_dereg(struct xport *x)
{
    int rc = x->eager.mr ? tbrt_mr_dereg(x->eager.mr) : 0;
    x->eager.mr = NULL;
    return rc;
}

void eager_unmap(struct xport *x)
{
    if (x->eager.mem)
        munmap(x->eager.mem, region_bytes(x->eager.slots));
    x->eager.mem = NULL;
}
