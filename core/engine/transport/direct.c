/* direct.c - direct transfers on an RDMA link: a large send from memory the
 * caller registered with the link (tbrt_link_mem_reg) is not copied into
 * the send ring. The sender offers it instead, in one small frame (address,
 * key, length: framing.h), and lends it until the reader says it is done;
 * the reader takes the bytes with RDMA READs, straight into its caller's
 * buffer when that is registered memory too (one copy in all, where the
 * ring costs three), else through the offer's own stride (a window of one
 * stride payload, also what a recv view of an offer shows).
 *
 * In the byte stream an offer is just its length of bytes, in order: the
 * sender posts what it coalesced before offering, and takes no more bytes
 * until the done frame comes back, so the reader meets them where they
 * were sent. The done frame is taken by progress, as completions are, not
 * by the sender's reader (who may be sending, not reading).
 *
 * The peer's offer is its word: the device checks the key and bounds on
 * every READ (a bad one fails the link with the device's reason); here its
 * length is bounded (DIRECT_MAX), one offer at a time, and a done must name
 * the length that was lent. Control frames go inline from the stack; the QP
 * has DIRECT_CTL_MAX send slots for them and the reads beyond its strides.
 *
 * A direct send returns only once the peer's reader has taken it (a
 * rendezvous). Two ends that both lend before they read would wait for
 * each other for good, where the rings would have buffered both sends; so
 * a lender still waiting that finds the peer's own offer unread here asks
 * for its offer back, when it is the end with the lower QPN (GID on a tie:
 * one end of the two, always). The peer's progress gives it back if its
 * reader has not begun on it (no byte read, no READ posted): the offer
 * leaves its stream as if never sent; else the peer's done answers as
 * usual. What was given back goes through the rings, the rest of that send
 * too, so the exchange completes as one from plain memory would (and, as
 * that one, waits when the sends exceed what the rings hold).
 *
 * Nothing here waits for the peer: a READ in flight makes recv return
 * -EAGAIN (and readable() 0), so the caller waits as for any arrival, other
 * tasks of its thread run meanwhile (the lender among them, whose software
 * device answers the READ), and the next recv goes on where it was. Only a
 * control frame that finds every slot taken polls for one, bounded by the
 * link's timeout. */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/transport/framing.h"
#include "engine/transport/transport.h"
#include "util/copy.h"
#include "util/debug.h"
#include "util/util.h"

enum { WR_READ = 1, WR_CTL = 2 };
/* a receive smaller than this reads through the window even into registered
 * memory: a READ of its own would cost more than the copy */
#define DIRECT_READ_MIN 4096

bool direct_setup(struct xport *x)
{
    /* its control frames go inline, from the stack; and the reader READs,
     * which tbrt's mlx5 data path does not post yet (SEND and WRITE only) */
    return x->max_inline >= TBRT_STRIDE_HDR + FRAME_OFFER_LEN &&
           strcmp(tbrt_dev_kind(x->dev), "mlx5") != 0;
}

static struct xport_umr *umr_find(struct xport *x, const void *p, size_t n)
{
    const uint8_t *a = p;
    for (uint32_t i = 0; i < x->umr_n; i++) {
        struct xport_umr *u = &x->umr[i];
        if (a >= u->addr && n <= u->len && (size_t)(a - u->addr) <= u->len - n)
            return u;
    }
    return NULL;
}

int direct_mem_reg(struct xport *x, void *addr, size_t len)
{
    for (uint32_t i = 0; i < x->umr_n; i++)
        if (x->umr[i].addr == addr)
            return -EEXIST;
    if (x->umr_n == XPORT_UMR_MAX)
        return -ENOSPC;
    tbrt_mr *mr;
    /* Apple rejects LOCAL_WRITE-only regions; the peer reads with REMOTE_READ */
    int rc = tbrt_mr_reg(x->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_WRITE, &mr);
    if (rc)
        return rc;
    x->umr[x->umr_n++] = (struct xport_umr){.addr = addr, .len = len, .mr = mr};
    return 0;
}

/* A send of ours lent to the peer lies in this range. */
static bool direct_lent(const struct xport *x, const void *addr, size_t len)
{
    const uint8_t *a = addr, *b = x->dsend.buf;
    return x->dsend.active && b < a + len && a < b + x->dsend.len;
}

/* A READ of the peer's offer lands (or landed, not yet taken) in this range. */
static bool direct_reading(const struct xport *x, const void *addr, size_t len)
{
    const uint8_t *a = addr, *d = x->dread.dst;
    return (x->dread.busy || x->dread.done) && !x->dread.window && d < a + len &&
           a < d + x->dread.n;
}

int direct_mem_dereg(struct xport *x, void *addr)
{
    for (uint32_t i = 0; i < x->umr_n; i++) {
        struct xport_umr *u = &x->umr[i];
        if (u->addr != addr)
            continue;
        if (direct_lent(x, u->addr, u->len) || direct_reading(x, u->addr, u->len))
            return -EBUSY;
        int rc = tbrt_mr_dereg(u->mr);
        if (rc)
            return rc;
        *u = x->umr[--x->umr_n];
        return 0;
    }
    return -ENOENT;
}

void direct_teardown(struct xport *x)
{
    for (uint32_t i = 0; i < x->umr_n; i++) {
        int rc = tbrt_mr_dereg(x->umr[i].mr);
        if (rc && !x->close_err) {
            x->close_err = -rc;
            snprintf(x->close_why, sizeof x->close_why, "%s", tbrt_dev_why(x->dev));
        }
        xport_log_teardown(x, rc ? "mr(failed)" : "mr");
    }
    x->umr_n = 0;
}

/* Poll until a control frame has a slot (fewer than DIRECT_CTL_MAX reads
 * and control frames in flight), within the link's timeout. */
static int ctl_room(struct xport *x, const char *what)
{
    double deadline = 0;
    for (uint32_t spins = 0; x->dctl_inflight >= DIRECT_CTL_MAX; spins++) {
        int rc = rdma_poll(x);
        if (rc < 0)
            return rc;
        if (rc == 0 && (spins & 63) == 63) {
            double t = now_s();
            if (deadline == 0)
                deadline = t + x->opts->timeout;
            else if (t > deadline)
                return xport_fail(x, ETIMEDOUT, "no room for a direct %s frame within %.3g s: "
                                  "%u reads and control frames still in flight", what,
                                  x->opts->timeout, x->dctl_inflight);
        }
    }
    return 0;
}

const char *direct_frame_name(uint32_t magic)
{
    switch (magic) {
    case FRAME_OFFER_MAGIC: return "offer";
    case FRAME_DONE_MAGIC: return "done";
    case FRAME_ASK_BACK_MAGIC: return "ask-back";
    default: return "back";
    }
}

/* A control frame: one inline SEND of header and payload. */
static int post_ctl(struct xport *x, uint32_t magic, const void *payload, uint32_t len)
{
    int rc = ctl_room(x, direct_frame_name(magic));
    if (rc)
        return rc;
    uint8_t f[TBRT_STRIDE_HDR + FRAME_OFFER_LEN];
    uint32_t seq = x->send_seq++;
    frame_hdr_write(f, magic, len, seq);
    bulk_copy(f + TBRT_STRIDE_HDR, payload, len);
    struct ibv_sge sge = {.addr = (uintptr_t)f, .length = TBRT_STRIDE_HDR + len,
                          .lkey = x->send_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = RDMA_DIRECT_TAG | WR_CTL, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
    rc = tbrt_post_send(x->qp, &wr, NULL);
    if (rc)
        return xport_fail(x, -rc, "post_send direct %s frame: %s", direct_frame_name(magic),
                          tbrt_dev_why(x->dev));
    x->dctl_inflight++;
    x->stats.frames_sent++;
    return 0;
}

/* Of two ends that both lend, the one that asks for its offer back. */
static bool we_ask_back(const struct xport *x)
{
    if (x->qp->qp_num != x->peer.qpn)
        return x->qp->qp_num < x->peer.qpn;
    return memcmp(x->gid, x->peer.gid, sizeof x->gid) < 0;
}

intptr_t direct_send(struct xport *x, const void *buf, size_t len)
{
    if (x->dsend.active) {
        /* the engine refused any other buffer: this is the lent one again */
        if (!x->dsend.done) {
            if (!x->dsend.asked_back && x->doffer.pending && we_ask_back(x)) {
                uint32_t v = htole32(x->dsend.len);
                if (post_ctl(x, FRAME_ASK_BACK_MAGIC, &v, sizeof v))
                    return -x->err;
                x->dsend.asked_back = true;
            }
            return -EAGAIN;
        }
        uint32_t n = x->dsend.len;
        x->dsend.active = x->dsend.done = x->dsend.asked_back = false;
        x->stats.bytes_sent += n;
        x->stats.direct_sends++;
        return n;
    }
    if (x->dsend.back) {
        const uint8_t *p = buf;
        if (p >= x->dsend.buf && p < x->dsend.buf + x->dsend.len)
            return 0;           /* given back: through the ring, with the rest */
        x->dsend.back = false;
    }
    struct xport_umr *u = umr_find(x, buf, len);
    if (!u)
        return 0;
    uint32_t n = len > DIRECT_MAX ? DIRECT_MAX : (uint32_t)len;
    int inject = x->inject;
    if (inject >= 6 && inject <= 9)
        x->inject = 0;          /* test hooks (link.h): a hostile offer, below */
    else
        inject = 0;
    /* what was coalesced before goes first: the stream keeps its order */
    if (x->pend_buf >= 0 && x->pend_len && rdma_post_pending(x))
        return -x->err;
    uint8_t p[FRAME_OFFER_LEN];
    uint64_t a = (uintptr_t)buf;
    uint32_t k = u->mr->rkey, ln = n;
    if (inject) {
        k = inject == 6 ? k ^ 0x5a5a5a00u : k;
        ln = inject == 7 ? DIRECT_MAX + 1u : ln;
        a = inject == 8 ? UINT64_MAX - 4095 : a;
    }
    frame_region_write(p, a, k, ln);
    if (post_ctl(x, FRAME_OFFER_MAGIC, p, sizeof p) ||
        (inject == 9 && post_ctl(x, FRAME_OFFER_MAGIC, p, sizeof p)))
        return -x->err;
    x->dsend.buf = buf;
    x->dsend.len = n;
    x->dsend.active = true;
    x->dsend.done = false;
    return -EAGAIN;             /* taken when the done comes back */
}

int direct_stray_done(struct xport *x)
{
    uint32_t v = htole32(4096);
    return post_ctl(x, FRAME_DONE_MAGIC, &v, sizeof v) ? -x->err : 0;
}

void direct_sent_through(struct xport *x, const void *end)
{
    if (x->dsend.back && (const uint8_t *)end >= x->dsend.buf + x->dsend.len)
        x->dsend.back = false;  /* all of what was given back went */
}

/* The lender asks for its offer back (we ask_back): given back when the
 * reader has not begun on it, which is then the newest entry of the stream
 * (its lender sends nothing after an offer); else ignored, the done of the
 * read answers it. */
static int give_back_offer(struct xport *x, uint32_t v)
{
    if (!x->doffer.pending || !x->inq_count)
        return 0;
    struct link_inq *q = &x->inq[ring_at(x->inq_head, x->inq_count - 1, x->inq_cap)];
    bool head = x->inq_count == 1;
    if (!q->direct || q->len != v || q->off || q->wend ||
        (head && (x->dread.busy || x->dread.done)))
        return 0;
    uint32_t stride = q->buf;
    x->inq_count--;
    x->inq_bytes -= q->len;
    x->doffer.pending = false;
    uint32_t le = htole32(v);
    if (rdma_give_back(x, stride) || post_ctl(x, FRAME_BACK_MAGIC, &le, sizeof le))
        return -x->err;
    if (DBG_ON(DBG_FRAME))
        dbg_line(x->link_id, "direct: gave the peer's offer of %u bytes back (both ends lent)", v);
    return 0;
}

int direct_frame(struct xport *x, uint32_t magic, uint32_t buf, const uint8_t *payload,
                 uint32_t len)
{
    /* before anything of the frame is read: its size was not checked (a
     * peer in variable framing on a fixed-framing link sends these) */
    if (!x->direct_ok)
        return xport_fail(x, EPROTO, "recv: a direct %s frame on a link that takes no direct "
                          "transfers (%s, %s framing)", direct_frame_name(magic),
                          x->qp_type == IBV_QPT_RC ? "RC" : "UC", framing_name(x->framing));
    if (magic != FRAME_OFFER_MAGIC) {
        uint32_t v;
        if (len != FRAME_DONE_LEN)
            return xport_fail(x, EPROTO, "recv: a direct %s frame of %u bytes, expected %u",
                              direct_frame_name(magic), len, FRAME_DONE_LEN);
        memcpy(&v, payload, 4);
        v = le32toh(v);
        if (magic == FRAME_ASK_BACK_MAGIC)
            return give_back_offer(x, v) || rdma_give_back(x, buf) ? -x->err : 0;
        if (!x->dsend.active || x->dsend.done ||
            (magic == FRAME_BACK_MAGIC && !x->dsend.asked_back))
            return xport_fail(x, EPROTO, "recv: a direct %s frame (%u bytes), but no send of "
                              "ours is %s", direct_frame_name(magic), v,
                              magic == FRAME_DONE_MAGIC ? "lent to the peer"
                                                        : "asked back from the peer");
        if (v != x->dsend.len)
            return xport_fail(x, EPROTO, "recv: the peer says it %s %u bytes of our direct "
                              "send of %u", magic == FRAME_DONE_MAGIC ? "read" : "gives back", v,
                              x->dsend.len);
        if (magic == FRAME_DONE_MAGIC) {
            x->dsend.done = true;
        } else {
            x->dsend.active = x->dsend.asked_back = false;
            x->dsend.back = true;
        }
        return rdma_give_back(x, buf) ? -x->err : 0;
    }
    if (len != FRAME_OFFER_LEN)
        return xport_fail(x, EPROTO, "recv: a direct offer frame of %u bytes, expected %u", len,
                          FRAME_OFFER_LEN);
    if (x->doffer.pending)
        return xport_fail(x, EPROTO, "recv: a second direct offer before the first was read");
    uint64_t addr;
    uint32_t key, olen;
    frame_region_read(payload, &addr, &key, &olen);
    if (olen == 0 || olen > DIRECT_MAX)
        return xport_fail(x, EPROTO, "recv: a direct offer of %u bytes (1 to %u)", olen,
                          (uint32_t)DIRECT_MAX);
    if (addr + olen < addr)
        return xport_fail(x, EPROTO, "recv: a direct offer of %u bytes at 0x%llx wraps the "
                          "address space", olen, (unsigned long long)addr);
    x->doffer.addr = addr;
    x->doffer.rkey = key;
    x->doffer.pending = true;
    struct link_inq *q = &x->inq[ring_at(x->inq_head, x->inq_count, x->inq_cap)];
    *q = (struct link_inq){.buf = buf, .len = olen, .direct = true};
    x->inq_count++;
    x->inq_bytes += olen;
    return 0;
}

const char *direct_wr_what(uint64_t wr_id)
{
    return (wr_id & 3) == WR_READ ? "direct read" : "direct control send";
}

int direct_completion(struct xport *x, const struct ibv_wc *wc)
{
    if (!x->dctl_inflight)
        return xport_fail(x, EPROTO, "a direct completion (wr_id 0x%llx), none in flight",
                          (unsigned long long)wc->wr_id);
    x->dctl_inflight--;
    if ((wc->wr_id & 3) == WR_READ) {
        if (!x->dread.busy || !x->inq_count || !x->inq[x->inq_head].direct)
            return xport_fail(x, EPROTO, "a direct read completion, no read in flight");
        x->dread.busy = false;
        if (x->dread.window) {
            struct link_inq *q = &x->inq[x->inq_head];
            q->wbeg = x->dread.off;
            q->wend = x->dread.off + x->dread.n;
        } else {
            x->dread.done = true;   /* in the caller's memory, from dread.off on */
            x->stats.direct_bytes += x->dread.n;
        }
    }
    x->dwait = x->dread.busy;       /* a slot came free too */
    return 0;
}

static uint8_t *window_of(struct xport *x, const struct link_inq *q)
{
    return x->recv_mem + (size_t)q->buf * x->stride + TBRT_STRIDE_HDR;
}

/* Post a READ of n bytes at off of the peer's offer into dst, and poll once
 * (a software device may have done it at post): 0 when it is done, -EAGAIN
 * while it is in flight (the reader waits as for any arrival: readable()
 * says 0 meanwhile), or the error. */
static int post_read(struct xport *x, uint8_t *dst, uint32_t lkey, uint32_t off, uint32_t n,
                     bool window)
{
    if (x->dctl_inflight >= DIRECT_CTL_MAX) {
        x->dwait = true;        /* until a completion frees a slot */
        return -EAGAIN;
    }
    struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = n, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = RDMA_DIRECT_TAG | WR_READ, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = x->doffer.addr + off;
    wr.wr.rdma.rkey = x->doffer.rkey;
    int rc = tbrt_post_send(x->qp, &wr, NULL);
    if (rc)
        return xport_fail(x, -rc, "post_send direct read of %u bytes at offset %u of the peer's "
                          "offer: %s", n, off, tbrt_dev_why(x->dev));
    x->dctl_inflight++;
    x->dread.dst = dst;
    x->dread.off = off;
    x->dread.n = n;
    x->dread.busy = true;
    x->dread.done = false;
    x->dread.window = window;
    x->dwait = true;
    rc = rdma_poll(x);
    if (rc < 0)
        return rc;
    return x->dread.busy ? -EAGAIN : 0;
}

/* Unread bytes of the offer that are here now: read into the caller's
 * memory (a recv that came back), or in the window. */
static uint32_t here(const struct xport *x, const struct link_inq *q)
{
    if (x->dread.done)
        return x->dread.n;
    return q->off < q->wend ? q->wend - q->off : 0;
}

static const uint8_t *here_at(struct xport *x, const struct link_inq *q)
{
    return x->dread.done ? x->dread.dst : window_of(x, q) + (q->off - q->wbeg);
}

int direct_consume(struct xport *x, struct link_inq *q, size_t n)
{
    if (x->dread.done) {
        x->dread.dst += n;
        x->dread.n -= (uint32_t)n;
        x->dread.done = x->dread.n > 0;
    }
    if (q->off + n == q->len) {
        uint32_t v = htole32(q->len);
        if (post_ctl(x, FRAME_DONE_MAGIC, &v, sizeof v))
            return -x->err;
        x->doffer.pending = false;
        x->stats.direct_recvs++;
    }
    return rdma_consume(x, q, n);
}

/* Bytes of the offer at the head of the stream for a recv into dst:
 * straight into dst when it is registered memory, else through the window.
 * A READ in flight keeps its place across calls; should the caller come
 * back with another buffer, what landed in the first (registered memory,
 * still ours to read) is copied over. */
intptr_t direct_recv(struct xport *x, struct link_inq *q, uint8_t *dst, size_t want)
{
    for (;;) {
        if (x->dread.busy)
            return -EAGAIN;
        uint32_t h = here(x, q);
        if (h) {
            size_t n = TBRT_MIN(want, (size_t)h);
            const uint8_t *from = here_at(x, q);
            if (from != dst)
                bulk_move(dst, from, n);
            return direct_consume(x, q, n) ? -x->err : (intptr_t)n;
        }
        size_t n = TBRT_MIN(want, (size_t)(q->len - q->off));
        uint32_t m = (uint32_t)(x->max_msg && n > x->max_msg ? x->max_msg : n);
        struct xport_umr *u;
        int rc = m >= DIRECT_READ_MIN && (u = umr_find(x, dst, m)) != NULL
                     ? post_read(x, dst, u->mr->lkey, q->off, m, false)
                     : post_read(x, window_of(x, q), x->recv_mr->lkey, q->off,
                                 TBRT_MIN(q->len - q->off, x->payload), true);
        if (rc)
            return rc;
    }
}

intptr_t direct_view(struct xport *x, struct link_inq *q, const uint8_t **out)
{
    for (;;) {
        if (x->dread.busy)
            return -EAGAIN;
        uint32_t h = here(x, q);
        if (h) {
            *out = here_at(x, q);
            return (intptr_t)h;
        }
        int rc = post_read(x, window_of(x, q), x->recv_mr->lkey, q->off,
                           TBRT_MIN(q->len - q->off, x->payload), true);
        if (rc)
            return rc;
    }
}

uint32_t direct_here(const struct xport *x, const struct link_inq *q) { return here(x, q); }
