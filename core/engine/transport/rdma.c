/* rdma.c - the RDMA transport of a link (transport.h): stride rings over a
 * verbs device, in tbrt's framing or llama.cpp's Apple one (llama-apple).
 *
 * Per direction a ring of nbuf registered strides. A stride starts with the
 * frame header (framing.h: tbrt's 16 bytes, or llama-apple's 8); send()
 * coalesces bytes into the current stride and posts it when full, flush()
 * posts a partly filled one at a message boundary. In fixed framing (and
 * llama-apple) every SEND carries the whole stride (TN3205: a SEND and its
 * RECV must cover the same number of 4 KiB frames); in variable framing
 * only the filled bytes. recv() hands out bytes of completed strides in
 * order, partial reads included, and reposts a stride once it is drained.
 * Send strides are freed by their completions, in order.
 *
 * Receives are posted at INIT on Linux (so nothing meets an empty queue) and
 * after RTS on Apple and in llama-apple framing (Apple's provider refuses
 * them earlier). llama-apple also takes llama.cpp's PSN 0 and hop limit 1,
 * and its UC on Apple devices (RC on others: see link_rdma_setup). */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "engine/transport/framing.h"
#include "engine/transport/transport.h"
#include "util/debug.h"
#include "util/util.h"
#include "util/copy.h"

#define RECV_TAG RDMA_RECV_TAG
#define WC_BATCH 32
/* llama.cpp's Apple transport: 16 strides of 128 KiB, hop limit 1 */
#define LLAMA_APPLE_NBUF 16
#define LLAMA_APPLE_STRIDE (128u * 1024)
#define LLAMA_HOP_LIMIT 1
/* Inline bytes asked of the QP: a frame up to this size goes in the WQE. */
#define RDMA_INLINE 256
/* Drained strides given back in one post_recv, at most: the peer is never
 * short of more than this many receives while the reader is busy. */
#define RDMA_REPOST_BATCH 8

static const char *wc_status_text(int st) { return dev_wc_status_name(st); }

/* TBRT_DEBUG=3: one line per frame, with the time since the link was made
 * and since the previous frame the same way. */
static void dbg_frame(struct xport *x, const char *what, uint32_t stride, uint32_t seq,
                      uint32_t len, uint32_t wire, double *last)
{
    double t = now_s();
    dbg_line(x->link_id, "%s: stride %u seq %u, %u payload bytes, %u on the wire "
             "(t=%.6f s, +%.1f us)", what, stride, seq, len, wire, t - x->t0,
             *last > 0 ? (t - *last) * 1e6 : 0.0);
    *last = t;
}

/* ---- setup ------------------------------------------------------------------ */

void *rdma_ring_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int link_rdma_setup(struct xport *x, char *err, size_t errlen)
{
    tbrt_dev *dev = x->dev;
    struct ibv_port_attr pa;
    tbrt_port_query(dev, x->port, &pa);
    bool llama = x->opts->framing == TBRT_FRAMING_LLAMA_APPLE;
    x->nbuf = llama ? LLAMA_APPLE_NBUF : x->opts->nbuf;
    x->stride = llama ? LLAMA_APPLE_STRIDE : x->opts->stride;
    x->hdr = llama ? TBRT_LLAMA_APPLE_HDR : TBRT_STRIDE_HDR;
    x->payload = x->stride - x->hdr;
    x->framing = x->opts->framing ? x->opts->framing
                                 : (x->flavor == TBRT_FLAVOR_APPLE ? TBRT_FRAMING_FIXED
                                                                   : TBRT_FRAMING_VARIABLE);
    /* llama-apple too: UC where the device has TN3205's credit flow control,
     * RC elsewhere, where UC would drop every frame that finds no receive
     * posted (llama.cpp's Apple transport counts on the credits, and its
     * header has no sequence number that could tell a loss) */
    x->qp_type = x->opts->qp_type ? x->opts->qp_type
                                 : (x->flavor == TBRT_FLAVOR_APPLE ? IBV_QPT_UC : IBV_QPT_RC);
    if (pa.max_msg_sz && x->stride > pa.max_msg_sz)
        return err_set(err, errlen, EINVAL, "link %d: probe: stride %u exceeds %s's max "
                       "message size %u", x->link_id, x->stride, tbrt_dev_name(dev), pa.max_msg_sz);
    /* queue depth: work requests, or 4 KiB frames on Apple (TN3205) */
    uint64_t depth = x->nbuf;
    /* direct transfers' reads and control frames go beyond the strides */
    uint32_t extra = x->framing == TBRT_FRAMING_VARIABLE && x->qp_type == IBV_QPT_RC
                         ? DIRECT_CTL_MAX : 0;
    if (x->flavor == TBRT_FLAVOR_APPLE || llama) {
        depth = (uint64_t)x->nbuf * (x->stride / 4096);
        struct ibv_device_attr da;
        tbrt_dev_query(dev, &da);
        if (depth > (uint64_t)da.max_qp_wr)
            return err_set(err, errlen, EINVAL, "link %d: probe: a ring of %u x %u bytes is %llu "
                           "frames per queue; %s allows %d (TN3205 counts depth in 4 KiB frames)",
                           x->link_id, x->nbuf, x->stride, (unsigned long long)depth,
                           tbrt_dev_name(dev), da.max_qp_wr);
    }
    int rc;
#define STEP(call, what)                                                                 \
    do {                                                                                 \
        if ((rc = (call)) != 0)                                                          \
            return err_set(err, errlen, -rc, "link %d: probe: %s: %s", x->link_id, what,       \
                           tbrt_dev_why(dev));                                          \
    } while (0)
    /* eager frames and their control writes (eager.c) take room in the send
     * queue and the CQ */
    uint32_t eager = eager_possible(x) ? EAGER_SLOTS + EAGER_CTL_MAX : 0;
    STEP(tbrt_pd_alloc(dev, &x->pd), "alloc_pd");
    STEP(tbrt_cq_create(dev, (int)(2 * x->nbuf + 8 + eager), &x->cq), "create_cq");
    /* inline data for small frames (a flush of a few bytes is one SEND with
     * its bytes in the WQE), where the device grants it */
    tbrt_qp_init qi = {.send_cq = x->cq, .recv_cq = x->cq, .qp_type = x->qp_type,
                       .cap = {.max_send_wr = (uint32_t)depth + extra + eager,
                               .max_recv_wr = (uint32_t)depth,
                               .max_send_sge = 1, .max_recv_sge = 1,
                               .max_inline_data = RDMA_INLINE}};
    rc = tbrt_qp_create(x->pd, &qi, &x->qp);
    if (rc == -EINVAL) {
        /* a provider that refuses inline data outright: go without it */
        qi.cap.max_inline_data = 0;
        rc = tbrt_qp_create(x->pd, &qi, &x->qp);
    }
    if (rc)
        return err_set(err, errlen, -rc, "link %d: probe: create_qp: %s", x->link_id,
                       tbrt_dev_why(dev));
    x->max_inline = TBRT_MIN(qi.cap.max_inline_data, (uint32_t)RDMA_INLINE);
    x->max_msg = pa.max_msg_sz;
    x->direct_ok = extra && direct_setup(x);
    x->ring_bytes = (size_t)x->nbuf * x->stride;
    x->send_ring_bytes = x->ring_bytes;
    x->send_mem = rdma_ring_alloc(x->ring_bytes);
    x->recv_mem = rdma_ring_alloc(x->ring_bytes);
    if (!x->send_mem || !x->recv_mem)
        return err_set(err, errlen, ENOMEM, "link %d: probe: cannot map 2 x %zu bytes of rings",
                       x->link_id, x->ring_bytes);
    /* Apple rejects LOCAL_WRITE-only regions, even for SEND/RECV */
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    STEP(tbrt_mr_reg(x->pd, x->send_mem, x->ring_bytes, access, &x->send_mr), "reg_mr send ring");
    STEP(tbrt_mr_reg(x->pd, x->recv_mem, x->ring_bytes, access, &x->recv_mr), "reg_mr recv ring");
#undef STEP
    if (eager_setup(x))
        return err_set(err, errlen, ENOMEM, "link %d: probe: cannot map the eager slots",
                       x->link_id);
    x->inq_cap = x->nbuf + x->eager.slots;
    x->inq = calloc(x->inq_cap, sizeof *x->inq);
    x->repost = calloc(x->nbuf, sizeof *x->repost);
    if (!x->inq || !x->repost)
        return err_set(err, errlen, ENOMEM, "link %d: probe: out of memory", x->link_id);
    x->pend_buf = -1;
    x->send_seq = x->recv_seq = 1;
    if (x->flavor == TBRT_FLAVOR_LINUX && !llama) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
            r = (uint32_t)now_ns();
        x->psn = r & 0xffffff;
        /* llama.cpp's Linux transport sends psn = qpn & 0xffffff; tbrt never
         * does, so a peer whose caps do is known for one (rdma_activate) */
        if (x->psn == (x->qp->qp_num & 0xffffff))
            x->psn ^= 1;
    }
    return 0;
}

/* ---- activation ------------------------------------------------------------- */

/* The receive of stride i: all of it, tagged with its index. */
static void stride_recv(struct xport *x, uint32_t i, struct ibv_sge *sge, struct ibv_recv_wr *wr)
{
    *sge = (struct ibv_sge){.addr = (uintptr_t)(x->recv_mem + (size_t)i * x->stride),
                            .length = x->stride, .lkey = x->recv_mr->lkey};
    *wr = (struct ibv_recv_wr){.wr_id = RECV_TAG | i, .sg_list = sge, .num_sge = 1};
}

int rdma_post_recv(struct xport *x, uint32_t i)
{
    struct ibv_sge sge;
    struct ibv_recv_wr wr;
    stride_recv(x, i, &sge, &wr);
    int rc = tbrt_post_recv(x->qp, &wr, NULL);
    if (rc)
        return xport_fail(x, -rc, "post_recv stride %u: %s", i, tbrt_dev_why(x->dev));
    return 0;
}

/* Give the drained strides back to the device, up to RDMA_REPOST_BATCH in
 * one post (a chain of receives). */
int rdma_repost(struct xport *x)
{
    while (x->repost_n) {
        struct ibv_sge sge[RDMA_REPOST_BATCH];
        struct ibv_recv_wr wr[RDMA_REPOST_BATCH];
        uint32_t n = TBRT_MIN(x->repost_n, (uint32_t)RDMA_REPOST_BATCH);
        for (uint32_t k = 0; k < n; k++) {
            stride_recv(x, x->repost[ring_at(x->repost_head, k, x->nbuf)], &sge[k], &wr[k]);
            wr[k].next = k + 1 < n ? &wr[k + 1] : NULL;
        }
        struct ibv_recv_wr *bad = NULL;
        int rc = tbrt_post_recv(x->qp, wr, &bad);
        if (rc)
            return xport_fail(x, -rc, "post_recv stride %u: %s",
                              (uint32_t)((bad ? bad->wr_id : wr[0].wr_id) & 0xffff),
                              tbrt_dev_why(x->dev));
        x->repost_head = ring_at(x->repost_head, n, x->nbuf);
        x->repost_n -= n;
        x->recv_posted += n;
    }
    return 0;
}

/* A stride the reader is done with (or a frame with nothing to read):
 * back to the device later (rdma_repost), not between the completion and
 * the reader, so a reader that answers at once answers sooner; a reader
 * that always finds more gives them back a batch at a time. */
int rdma_give_back(struct xport *x, uint32_t buf)
{
    x->repost[ring_at(x->repost_head, x->repost_n, x->nbuf)] = buf;
    if (++x->repost_n >= TBRT_MIN((uint32_t)RDMA_REPOST_BATCH, x->nbuf / 4 + 1))
        return rdma_repost(x);
    return 0;
}

static int post_all_recvs(struct xport *x)
{
    for (uint32_t i = 0; i < x->nbuf; i++) {
        int rc = rdma_post_recv(x, i);
        if (rc)
            return rc;
    }
    x->recv_posted = x->nbuf;
    return 0;
}

int rdma_modify(struct xport *x, struct ibv_qp_attr *a, int mask, const char *what)
{
    int rc = tbrt_qp_modify(x->qp, a, mask);
    if (rc)
        return xport_fail(x, -rc, "activate: %s: %s", what, tbrt_dev_why(x->dev));
    return 0;
}

/* Receives after RTS: Apple's rule, and llama-apple's on any device. */
static bool recv_after_rts(struct xport *x)
{
    return x->flavor == TBRT_FLAVOR_APPLE || x->framing == TBRT_FRAMING_LLAMA_APPLE;
}

static int rdma_activate(struct xport *x, const tbrt_caps *peer)
{
    bool rc_qp = x->qp_type == IBV_QPT_RC;
    bool llama = x->framing == TBRT_FRAMING_LLAMA_APPLE;
    if (!llama && peer->flavor == TBRT_FLAVOR_LINUX && peer->psn == (peer->qpn & 0xffffff)) {
        char m[TBRT_WHY_MAX];
        wire_mismatch(m, sizeof m, "activate: the peer's caps carry psn = qpn & 0xffffff, as "
                      "llama.cpp's Linux transport sends them", WIRE_TBRT, WIRE_LLAMA_LINUX);
        x->peer_wire = WIRE_LLAMA_LINUX;
        return xport_fail(x, EPROTO, "%s", m);
    }
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = x->port,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_REMOTE_WRITE};
    int rc = rdma_modify(x, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                         IBV_QP_ACCESS_FLAGS, "RESET->INIT");
    if (rc)
        return rc;
    if (!recv_after_rts(x) && (rc = post_all_recvs(x)) != 0)
        return rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = x->mtu;
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = x->port;
    a.ah_attr.dlid = peer->lid;
    a.ah_attr.grh.hop_limit = llama ? LLAMA_HOP_LIMIT : 64;
    a.ah_attr.grh.sgid_index = (uint8_t)x->gid_index;
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc_qp) {
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 1;    /* 0.01 ms: the receiver reposts as it reads */
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if ((rc = rdma_modify(x, &a, mask, "INIT->RTR")) != 0)
        return rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = x->psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc_qp) {
        a.timeout = 14;         /* 4.096 us x 2^14 = 67 ms per try */
        a.retry_cnt = 7;
        a.rnr_retry = 7;        /* forever: the receiver reposts when it reads */
        a.max_rd_atomic = 1;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if ((rc = rdma_modify(x, &a, mask, "RTR->RTS")) != 0)
        return rc;
    if (recv_after_rts(x) && (rc = post_all_recvs(x)) != 0)
        return rc;
    x->peer = *peer;
    return 0;
}

/* ---- completions -------------------------------------------------------------- */

/* A peer speaking another framing: say which, and remember it for the
 * engine, which tells the peer over the bootstrap socket. */
static int wrong_wire(struct xport *x, int peer, const char *what)
{
    char m[TBRT_WHY_MAX];
    wire_mismatch(m, sizeof m, what, wire_of_framing(x->framing), peer);
    x->peer_wire = peer;
    return xport_fail(x, EPROTO, "%s", m);
}

/* tbrt's header: the payload length, or -1 after recording why not. */
static int64_t tbrt_frame(struct xport *x, const uint8_t *at, const struct ibv_wc *wc,
                          uint32_t *kind)
{
    uint32_t magic, len, seq, check;
    frame_hdr_read(at, &magic, &len, &seq, &check);
    *kind = magic;
    /* a direct transfer's offer or done: direct.c says whether this link
     * takes them and checks the rest */
    bool ctl = frame_is_direct(magic) && check == (uint32_t) ~(magic ^ len ^ seq);
    if (magic == FRAME_EAGER_MAGIC && check == (uint32_t) ~(magic ^ len ^ seq)) {
        /* an eager offer: before any frame, outside the sequence (eager.c) */
        if (x->framing != TBRT_FRAMING_VARIABLE)
            return xport_fail(x, EPROTO, "recv: an eager offer, which only variable framing "
                              "sends, on a link in %s framing (do both sides use the same "
                              "framing?)", framing_name(x->framing)), -1;
        if (seq != 0 || wc->byte_len != TBRT_STRIDE_HDR + len)
            return xport_fail(x, EPROTO, "recv: an eager offer with seq %u in a SEND of %u "
                              "bytes (an offer has seq 0 and is its header and %u bytes)",
                              seq, wc->byte_len, FRAME_EAGER_LEN), -1;
        return len;
    }
    if (ctl) {
        /* a link that takes no direct transfers (fixed framing, UC) says
         * so, whatever the frame's size (direct.c) */
        if (x->direct_ok && wc->byte_len != TBRT_STRIDE_HDR + len)
            return xport_fail(x, EPROTO, "recv: a direct %s frame of length %u but the SEND "
                              "carried %u bytes", direct_frame_name(magic), len, wc->byte_len),
                   -1;
    } else {
        if (magic == TBRT_LLAMA_SEG_MAGIC)
            return wrong_wire(x, WIRE_LLAMA_APPLE, "recv: a frame with llama.cpp's RSEG magic"),
                   -1;
        if (magic != TBRT_SEG_MAGIC) {
            if (x->flavor == TBRT_FLAVOR_LINUX)
                return xport_fail(x, EPROTO, "recv: frame magic 0x%x != TBRT (stream desynced; "
                                  "or a peer in llama-linux framing, which sends no header: "
                                  "open the link with framing = 'llama-linux' if so)", magic),
                       -1;
            return xport_fail(x, EPROTO, "recv: frame magic 0x%x != TBRT (stream desynced)",
                              magic), -1;
        }
        if (check != (uint32_t) ~(magic ^ len ^ seq))
            return xport_fail(x, EPROTO, "recv: frame header check 0x%x != 0x%x (corrupted "
                              "header)", check, (uint32_t) ~(magic ^ len ^ seq)), -1;
        if (len > x->payload)
            return xport_fail(x, EPROTO, "recv: frame length %u exceeds the stride payload %u",
                              len, x->payload), -1;
        if (x->framing == TBRT_FRAMING_FIXED ? wc->byte_len != x->stride
                                             : wc->byte_len != TBRT_STRIDE_HDR + len)
            return xport_fail(x, EPROTO, "recv: frame length %u but the SEND carried %u bytes "
                              "(%s framing expects %u; do both sides use the same framing?)",
                              len, wc->byte_len, framing_name(x->framing),
                              x->framing == TBRT_FRAMING_FIXED ? x->stride
                                                               : TBRT_STRIDE_HDR + len), -1;
    }
    /* a later seq: the eager frames before it are in our slots already
     * (eager.c); what is not there is named as a gap below */
    if (seq != x->recv_seq && x->eager.slots && (int32_t)(seq - x->recv_seq) > 0 &&
        eager_poll(x) < 0)
        return -1;
    if (seq != x->recv_seq)
        return xport_fail(x, EPROTO, "recv: frame seq %u != expected %u (a frame was %s on the "
                         "wire)", seq, x->recv_seq, seq > x->recv_seq ? "dropped" : "repeated"),
               -1;
    x->recv_seq++;
    return len;
}

/* llama.cpp's Apple header: magic and len <= payload are all llama.cpp
 * checks; the whole stride must have come, as llama.cpp always posts it. */
static int64_t rseg_frame(struct xport *x, const uint8_t *at, const struct ibv_wc *wc)
{
    uint32_t magic, len;
    rseg_hdr_read(at, &magic, &len);
    if (magic == TBRT_SEG_MAGIC && frame_is_tbrt(at, wc->byte_len))
        return wrong_wire(x, WIRE_TBRT, "recv: a frame with tbrt's TBRT header"), -1;
    if (magic != TBRT_LLAMA_SEG_MAGIC)
        return xport_fail(x, EPROTO, "recv: frame magic 0x%x != RSEG (stream desynced)", magic),
               -1;
    if (len > x->payload)
        return xport_fail(x, EPROTO, "recv: frame length %u exceeds the stride payload %u",
                         len, x->payload), -1;
    if (wc->byte_len != x->stride)
        return xport_fail(x, EPROTO, "recv: a SEND of %u bytes; llama-apple framing posts whole "
                         "%u-byte strides", wc->byte_len, x->stride), -1;
    return len;
}

static int frame_arrived(struct xport *x, const struct ibv_wc *wc)
{
    uint32_t buf = (uint32_t)(wc->wr_id & 0xffff);
    if (buf >= x->nbuf)
        return xport_fail(x, EPROTO, "recv completion for stride %u of %u", buf, x->nbuf);
    const uint8_t *at = x->recv_mem + (size_t)buf * x->stride;
    /* the header's bytes must be this SEND's, not what an earlier frame
     * left in the stride */
    if (wc->byte_len < x->hdr)
        return xport_fail(x, EPROTO, "recv: a SEND of %u bytes, shorter than the %u-byte frame "
                          "header%s", wc->byte_len, x->hdr,
                          x->flavor == TBRT_FLAVOR_LINUX && x->framing != TBRT_FRAMING_LLAMA_APPLE
                              ? " (a peer in llama-linux framing, which sends no header? open "
                                "the link with framing = 'llama-linux' if so)"
                              : "");
    uint32_t kind = TBRT_SEG_MAGIC;
    int64_t got = x->framing == TBRT_FRAMING_LLAMA_APPLE ? rseg_frame(x, at, wc)
                                                         : tbrt_frame(x, at, wc, &kind);
    if (got < 0)
        return -x->err;
    uint32_t len = (uint32_t)got;
    x->recv_posted--;
    if (kind == FRAME_EAGER_MAGIC) {
        int rc = eager_offer_in(x, at + TBRT_STRIDE_HDR, len);
        return rc ? rc : rdma_give_back(x, buf) ? -x->err : 0;
    }
    x->stats.frames_recv++;
    x->eager.recent = false;    /* SEND frames come: look at the CQ each time */
    if (kind != TBRT_SEG_MAGIC)
        return direct_frame(x, kind, buf, at + TBRT_STRIDE_HDR, len);
    if (DBG_ON(DBG_FRAME))
        dbg_frame(x, "frame in", buf, x->framing == TBRT_FRAMING_LLAMA_APPLE ? 0 : x->recv_seq - 1,
                  len, wc->byte_len, &x->dbg_last_in);
    if (len == 0)               /* nothing to read: back to the device */
        return rdma_give_back(x, buf) ? -x->err : 0;
    if (x->inq_count >= x->inq_cap)   /* cannot be: a receive per stride, a slot per frame */
        return xport_fail(x, EPROTO, "recv: a frame beyond the %u the reader can hold",
                          x->inq_cap);
    struct link_inq *q = &x->inq[ring_at(x->inq_head, x->inq_count, x->inq_cap)];
    q->buf = buf;
    q->off = 0;
    q->len = len;
    q->direct = false;
    x->inq_count++;
    x->inq_bytes += len;
    return 0;
}

/* A completion that failed at the responder or on the way to it: what a
 * peer whose process died (its QP and memory gone with it) or whose host
 * went away gives too (link.c asks the bootstrap socket which it was). */
static bool status_at_peer(enum ibv_wc_status st)
{
    return st == IBV_WC_REM_ACCESS_ERR || st == IBV_WC_REM_OP_ERR ||
           st == IBV_WC_REM_INV_REQ_ERR || st == IBV_WC_REM_ABORT_ERR ||
           st == IBV_WC_RETRY_EXC_ERR || st == IBV_WC_RNR_RETRY_EXC_ERR;
}

/* The CQ, all of it or WC_BATCH completions. */
static int poll_cq(struct xport *x)
{
    struct ibv_wc wc[WC_BATCH];
    int n = tbrt_cq_poll(x->cq, WC_BATCH, wc);
    if (n < 0)
        return xport_fail(x, -n, "poll_cq: %s", tbrt_dev_why(x->dev));
    for (int i = 0; i < n; i++) {
        bool is_recv = wc[i].wr_id & RECV_TAG;
        if (wc[i].status != IBV_WC_SUCCESS) {
            /* the vendor's text, else what the device said while polling
             * (a completion it could not believe, say) */
            const char *v = tbrt_dev_vendor_err(x->dev, wc[i].vendor_err);
            if (!v[0] && wc[i].vendor_err == 0)
                v = tbrt_dev_why(x->dev);
            if (!x->err)
                x->err_at_peer = status_at_peer(wc[i].status);
            return xport_fail(x, wc[i].status == IBV_WC_RETRY_EXC_ERR ? ECONNRESET : EIO,
                             "%s completion: %s%s%s",
                             is_recv                            ? "recv"
                             : wc[i].wr_id & RDMA_DIRECT_TAG ? direct_wr_what(wc[i].wr_id)
                             : wc[i].wr_id & RDMA_EAGER_TAG  ? eager_wr_what(wc[i].wr_id)
                                                             : "send",
                             wc_status_text(wc[i].status), v[0] ? ": " : "", v);
        }
        if (is_recv) {
            int rc = frame_arrived(x, &wc[i]);
            if (rc)
                return rc;
        } else if (wc[i].wr_id & RDMA_DIRECT_TAG) {
            int rc = direct_completion(x, &wc[i]);
            if (rc)
                return rc;
        } else if (wc[i].wr_id & RDMA_EAGER_TAG) {
            int rc = eager_completion(x, &wc[i]);
            if (rc)
                return rc;
        } else if (wc[i].wr_id & RDMA_INLINE_TAG) {
            if (!x->inline_count)
                return xport_fail(x, EPROTO, "inline send completion, none in flight");
            x->inline_count--;
        } else {
            uint32_t buf = (uint32_t)(wc[i].wr_id & 0xffff);
            if (!x->send_count || buf != x->send_head)
                return xport_fail(x, EPROTO, "send completion for stride %u, expected %u", buf,
                                 x->send_head);
            if (DBG_ON(DBG_FRAME))
                dbg_line(x->link_id, "frame sent: stride %u completed, %u still in flight "
                         "(t=%.6f s)", buf, x->send_count - 1, now_s() - x->t0);
            x->send_head = ring_at(x->send_head, 1, x->nbuf);
            x->send_count--;
        }
    }
    x->stats.completions += (uint64_t)n;
    return n;
}

/* Eager frames first (a look at one slot), then the CQ; while eager frames
 * come (the last frame was one), a look polls the CQ only every 4th time
 * (force: every time): SEND frames and our own completions wait a few looks
 * of a few instructions more, an eager frame is found ~4x sooner. A stream
 * of SEND frames is looked for at every look. */
static int poll_all(struct xport *x, bool force)
{
    int e = 0, n = 0;
    uint64_t frames = x->stats.frames_recv;
    if (x->eager.slots) {
        if ((e = eager_poll(x)) < 0)
            return e;
        /* a look that found frames has what its reader waits for: the CQ
         * (our own WRITEs' completions, mostly) waits for a look that
         * finds none, or every 16th; an empty one polls it every 4th */
        if (!force && !x->full_looks && x->eager.recent && (x->eager.look++ & (e ? 15 : 3)) != 0)
            goto done;
    }
    if ((n = poll_cq(x)) < 0)
        return n;
    /* a SEND frame may have been the turn before an eager one; and the
     * device's progress in the poll may have placed WRITEs (a packet wire
     * places them as it reads them): a full look takes those too */
    if ((n > 0 || force) && x->eager.slots) {
        int more = eager_poll(x);
        if (more < 0)
            return more;
        e += more;
    }
done:
    n += e;
    if (n == 0) {
        x->stats.spins++;
        /* nothing came: the time to give drained strides back */
        if (x->repost_n && rdma_repost(x))
            return -x->err;
    } else if (x->eager.asleep_told && x->stats.frames_recv != frames && eager_awake(x)) {
        return -x->err;
    }
    return n;
}

/* Inside the transport (a full ring, a READ awaited): the CQ every time. */
int rdma_poll(struct xport *x) { return poll_all(x, true); }

/* The engine's look (progress): eager frames first, the CQ every 4th. */
static int rdma_progress(struct xport *x) { return poll_all(x, false); }

/* ---- sending -------------------------------------------------------------------- */

int rdma_post_pending(struct xport *x)
{
    if (x->pend_buf < 0)
        return 0;
    uint32_t i = (uint32_t)x->pend_buf;
    uint8_t *at = x->send_mem + (size_t)i * x->stride;
    if (x->pend_len <= EAGER_MAX && x->eager.out_slots) {
        if (eager_fits(x, x->pend_len)) {
            /* a small frame: written into the peer's slot; the stride is free */
            int rc = eager_post(x, at, x->pend_len);
            x->pend_buf = -1;
            x->pend_len = 0;
            return rc;
        }
        if (x->err)
            return -x->err;     /* reaping for room found a failure */
    }
    bool llama = x->framing == TBRT_FRAMING_LLAMA_APPLE;
    uint32_t magic = llama ? TBRT_LLAMA_SEG_MAGIC : TBRT_SEG_MAGIC, len = x->pend_len;
    uint32_t seq = x->send_seq++;
    switch (x->inject) {        /* test hook: break the next frame on purpose */
    case 1: magic = 0x0badf00d; break;
    case 2: len = x->payload + 1; break;
    case 3: seq++; x->send_seq++; break;
    case 4: seq = seq - 1; x->send_seq--; break;
    }
    x->inject = 0;
    if (llama)
        rseg_hdr_write(at, magic, len);
    else
        frame_hdr_write(at, magic, len, seq);
    uint32_t bytes = x->framing == TBRT_FRAMING_VARIABLE ? TBRT_STRIDE_HDR + x->pend_len
                                                         : x->stride;
    /* inline: the device copies the frame at post, so the stride is free
     * again at once (the next frame is written where this one was) */
    bool inl = bytes <= x->max_inline;
    struct ibv_sge sge = {.addr = (uintptr_t)at, .length = bytes, .lkey = x->send_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = inl ? RDMA_INLINE_TAG : i, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0)};
    int rc = tbrt_post_send(x->qp, &wr, NULL);
    if (rc)
        return xport_fail(x, -rc, "post_send stride %u (%u bytes%s): %s", i, bytes,
                         inl ? ", inline" : "", tbrt_dev_why(x->dev));
    if (DBG_ON(DBG_FRAME))
        dbg_frame(x, inl ? "frame out inline" : "frame out", i, seq, len, bytes,
                  &x->dbg_last_out);
    if (inl) {
        x->inline_count++;
        x->stats.inline_sends++;
    } else {
        x->send_count++;
    }
    x->stats.frames_sent++;
    x->pend_buf = -1;
    x->pend_len = 0;
    return 0;
}

static bool acquire(struct xport *x)
{
    if (x->pend_buf >= 0)
        return true;
    /* its SEND will need a place in the send queue (nbuf deep) */
    if (x->send_count + x->inline_count == x->nbuf) {
        if (rdma_poll(x) < 0 || x->send_count + x->inline_count == x->nbuf)
            return false;
    }
    x->pend_buf = (int)ring_at(x->send_head, x->send_count, x->nbuf);
    x->pend_len = 0;
    return true;
}

static intptr_t rdma_send(struct xport *x, const void *buf, size_t len)
{
    /* (a send given back is one of registered memory: direct_send sees it
     * when it is 32 KiB or more; less goes through the ring anyway) */
    if (x->dsend.active || (len >= DIRECT_MIN && x->umr_n && x->direct_ok)) {
        intptr_t d = direct_send(x, buf, len);
        if (d)
            return d;           /* 0: not from registered memory, copied below */
    }
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        if (!acquire(x))
            break;
        uint8_t *at = x->send_mem + (size_t)x->pend_buf * x->stride + x->hdr + x->pend_len;
        size_t n = TBRT_MIN(len - done, (size_t)(x->payload - x->pend_len));
        bulk_copy(at, p + done, n);
        x->pend_len += (uint32_t)n;
        done += n;
        if (x->pend_len == x->payload && rdma_post_pending(x))
            return -x->err;
    }
    if (x->err)
        return -x->err;
    if (x->dsend.back)
        direct_sent_through(x, p + done);
    x->stats.bytes_sent += done;
    return done ? (intptr_t)done : -EAGAIN;
}

static int rdma_flush(struct xport *x)
{
    if (x->pend_buf >= 0 && x->pend_len == 0) {
        x->pend_buf = -1;       /* nothing written: give the stride back */
        return 0;
    }
    return rdma_post_pending(x);
}

/* ---- receiving ------------------------------------------------------------------ */

/* Where a received frame's payload lies: its stride, or its eager slot. */
static inline const uint8_t *inq_data(const struct xport *x, const struct link_inq *q)
{
    if (TBRT_UNLIKELY(q->buf & EAGER_BUF))
        return eager_data(x, q);
    return x->recv_mem + (size_t)q->buf * x->stride + x->hdr;
}

/* n bytes of the oldest completed stride read: a drained stride goes back
 * to the device. */
int rdma_consume(struct xport *x, struct link_inq *q, size_t n)
{
    q->off += (uint32_t)n;
    x->inq_bytes -= n;
    x->stats.bytes_recv += n;
    if (q->off < q->len)
        return 0;
    x->inq_head = ring_at(x->inq_head, 1, x->inq_cap);
    x->inq_count--;
    if (q->buf & EAGER_BUF)
        return eager_consumed(x);
    return rdma_give_back(x, q->buf) ? -x->err : 0;
}

intptr_t rdma_recv(struct xport *x, void *buf, size_t len)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < len && x->inq_count) {
        struct link_inq *q = &x->inq[x->inq_head];
        if (q->direct) {
            intptr_t r = direct_recv(x, q, p + done, len - done);
            if (r == -EAGAIN && done)
                break;          /* a READ in flight: what came before it now */
            if (r < 0)
                return r;
            done += (size_t)r;
            continue;
        }
        size_t n = TBRT_MIN(len - done, (size_t)(q->len - q->off));
        bulk_copy(p + done, inq_data(x, q) + q->off, n);
        done += n;
        if (rdma_consume(x, q, n))
            return -x->err;
    }
    return (intptr_t)done;
}

/* ---- views (engine/views.c) ------------------------------------------------------ */

/* The rest of the stride being filled (acquired if none is). */
static intptr_t rdma_send_view(struct xport *x, size_t want, uint8_t **out)
{
    if (!acquire(x))
        return x->err ? -x->err : -EAGAIN;
    size_t room = x->payload - x->pend_len;
    *out = x->send_mem + (size_t)x->pend_buf * x->stride + x->hdr + x->pend_len;
    return (intptr_t)(want && want < room ? want : room);
}

static int rdma_commit(struct xport *x, size_t n)
{
    x->pend_len += (uint32_t)n;
    x->stats.bytes_sent += n;
    return x->pend_len == x->payload ? rdma_post_pending(x) : 0;
}

/* The unread bytes of the oldest completed stride (shared with llama-linux). */
intptr_t rdma_recv_view(struct xport *x, const uint8_t **out)
{
    if (!x->inq_count)
        return 0;
    struct link_inq *q = &x->inq[x->inq_head];
    if (q->direct)
        return direct_view(x, q, out);
    *out = inq_data(x, q) + q->off;
    return (intptr_t)(q->len - q->off);
}

int rdma_release(struct xport *x, size_t n)
{
    struct link_inq *q = x->inq_count ? &x->inq[x->inq_head] : NULL;
    if (!q || n > (q->direct ? direct_here(x, q) : q->len - q->off))
        return xport_fail(x, EPROTO, "release: %zu bytes beyond the oldest stride", n);
    return q->direct ? direct_consume(x, q, n) : rdma_consume(x, q, n);
}

/* ---- waiting -------------------------------------------------------------------- */

static int rdma_arm(struct xport *x)
{
    /* eager frames raise no event: the writer must know we sleep (eager.c) */
    int rc = eager_arm(x);
    if (rc)
        return rc;
    tbrt_cq_ack(x->cq);         /* drain the events that woke us */
    rc = tbrt_cq_arm(x->cq);
    if (rc)
        return xport_fail(x, -rc, "req_notify_cq: %s", tbrt_dev_why(x->dev));
    /* a completion that arrived before arming raises no event: look again
     * (our own control writes' completions are no news) */
    uint32_t ctl = x->eager.ctl_done;
    rc = poll_all(x, true);
    if (rc > 0)
        rc -= (int)(x->eager.ctl_done - ctl);
    return rc < 0 ? rc : rc > 0 ? 1 : 0;
}

int rdma_fds(struct xport *x, int *fds, int max)
{
    int n = 0;
    if (max > n)
        fds[n++] = x->cq->fd;
    if (max > n)
        fds[n++] = x->fd;
    return n;
}

static bool rdma_writable(struct xport *x)
{
    if (x->dsend.active)
        return x->dsend.done;   /* a send lent to the peer: writable once it is read */
    return x->pend_buf >= 0 || x->send_count + x->inline_count < x->nbuf;
}

/* 0 while a direct offer's READ is in flight (direct.c): nothing to take yet */
size_t rdma_readable(struct xport *x) { return x->dwait ? 0 : x->inq_bytes; }

static bool rdma_idle(struct xport *x)
{
    return x->send_count + x->inline_count + x->eager.wr_inflight + x->eager.ctl_inflight == 0;
}

static int rdma_inflight(struct xport *x)
{
    return (int)(x->send_count + x->inline_count + x->eager.wr_inflight + x->eager.ctl_inflight);
}

/* A teardown step's result: the first failure is kept for close to report,
 * and the step shows as "qp(failed)" in the log. */
static bool step(struct xport *x, int rc, const char *what)
{
    if (rc && !x->close_err) {
        x->close_err = -rc;
        /* the device's message names the operation and the object */
        snprintf(x->close_why, sizeof x->close_why, "%s", tbrt_dev_why(x->dev));
    }
    char name[16];
    snprintf(name, sizeof name, "%.4s%s", what, rc ? "(failed)" : "");
    xport_log_teardown(x, rc ? name : what);
    return rc == 0;
}

/* Destroy in the order hardware needs: the QP first (it can write into the
 * rings until it is gone), then the regions, the rings, the CQ, the PD, the
 * device. Never move the QP to ERR first: Apple's provider then fails every
 * region unmap. A destroy that fails is reported (close_err) and the rest
 * goes on: closing the device destroys what is left (each device owns its
 * objects). A QP that is not gone may still write into the receive ring,
 * so then the rings are released only after the device. */
void rdma_teardown(struct xport *x)
{
    bool qp_gone = true;
    if (x->qp) {
        qp_gone = step(x, tbrt_qp_destroy(x->qp), "qp");
        x->qp = NULL;
    }
    direct_teardown(x);         /* the caller's regions, after the QP that reads them */
    if (x->send_mr)
        step(x, tbrt_mr_dereg(x->send_mr), "mr");
    if (x->recv_mr)
        step(x, tbrt_mr_dereg(x->recv_mr), "mr");
    if (x->eager.mr)
        step(x, eager_dereg(x), "mr");
    x->send_mr = x->recv_mr = NULL;
    uint8_t *mems[2] = {x->send_mem, x->recv_mem};
    size_t sizes[2] = {x->send_ring_bytes, x->ring_bytes};
    for (int i = 0; i < 2 && qp_gone; i++)
        if (mems[i]) {
            munmap(mems[i], sizes[i]);
            xport_log_teardown(x, "buf");
        }
    if (qp_gone && x->eager.mem) {
        eager_unmap(x);
        xport_log_teardown(x, "buf");
    }
    if (x->cq) {
        step(x, tbrt_cq_destroy(x->cq), "cq");
        x->cq = NULL;
    }
    if (x->pd) {
        step(x, tbrt_pd_free(x->pd), "pd");
        x->pd = NULL;
    }
    if (x->dev) {
        tbrt_dev_close(x->dev);
        xport_log_teardown(x, "dev");
        x->dev = NULL;
    }
    for (int i = 0; i < 2 && !qp_gone; i++)
        if (mems[i]) {
            munmap(mems[i], sizes[i]);
            xport_log_teardown(x, "buf");
        }
    if (x->eager.mem) {
        eager_unmap(x);
        xport_log_teardown(x, "buf");
    }
    x->send_mem = x->recv_mem = NULL;
    free(x->inq);
    free(x->repost);
    x->inq = NULL;
    x->repost = NULL;
}

const struct link_transport link_rdma = {
    .name = "rdma",
    .send = rdma_send,
    .recv = rdma_recv,
    .flush = rdma_flush,
    .progress = rdma_progress,
    .activate = rdma_activate,
    .arm = rdma_arm,
    .fds = rdma_fds,
    .writable = rdma_writable,
    .readable = rdma_readable,
    .idle = rdma_idle,
    .inflight = rdma_inflight,
    .ready = eager_ready,
    .teardown = rdma_teardown,
    .send_view = rdma_send_view,
    .commit = rdma_commit,
    .recv_view = rdma_recv_view,
    .release = rdma_release,
};
