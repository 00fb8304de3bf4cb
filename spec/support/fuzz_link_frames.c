/* fuzz_link_frames.c - libFuzzer target: a hostile peer's frames against the
 * engine's receive side. Two links of the soft device in one process, set
 * up as any pair is (bootstrap socket on loopback, caps, readiness); then the
 * peer end (b) is taken over: its engine is never called again, and the
 * input's SENDs go from b's queue pair straight into the receive ring of the
 * link under test (a), whose calls (progress, recv or recv views, send) the
 * input interleaves with them. Whatever comes, a must not crash, read or
 * write outside what it may (ASan), hand out a byte that is not in the
 * stream, or fail without saying why; and while every frame the input sent
 * was a well-formed one (DATA, or an offer of b's memory that a may read),
 * what a hands out must be exactly the stream those frames carry, all of it
 * by the end, with the link still up.
 *
 *   make fuzz                          build-fuzz/fuzz-link-frames
 *   build-fuzz/fuzz-link-frames -runs=N -seed=S [CORPUS_DIR]
 *   FUZZ_VERBOSE=1 ...                 each step, and how the input ended
 *
 * Input: the first byte sets up the pair: bits 0-1 the mode (0 linux-rc in
 * variable framing, 1 linux-rc fixed, 2 apple-uc (UC, fixed), 3 llama.cpp's
 * Apple framing (RSEG headers, whole 128 KiB strides); bit 5 instead
 * llama.cpp's Linux framing: no header, a SEND is its payload), bit 2 a
 * reads through views instead of recv, bit 3 a registers its receive
 * buffer (an offer is then READ straight into it), bit 4 b keeps what a
 * sends it (its receives are not given back: a's
 * SENDs beyond them wait, and a READ of an offer waits behind them, RC's
 * order; otherwise b's turns drop a's frames and post their receives
 * again, as a reader that keeps up).
 * Then ops, the low 3 bits of a byte, each with its operands:
 *   0 RAW [len:2][bytes]      a SEND of exactly these bytes (any header)
 *   1 DATA [len:2][bytes]     a well-formed frame carrying the bytes (up to
 *                             a stride's payload); unless bits of the op
 *                             make it not: 0x08 it skips a sequence number,
 *                             0x10 it repeats the last one, 0x20 its header
 *                             says a byte more than a payload (the check
 *                             still right), 0x40 the SEND carries 8 bytes
 *                             more than the header says
 *   2 OFFER [off:4][len:4]    a direct offer of b's region: the address is
 *                             off (mod its size + 4 KiB) from 2 KiB before
 *                             it, the key b's (bit 3 of the op: a wrong one)
 *   3 DONE [len:4]            a direct done frame (bits 3-4 of the op: 1 an
 *                             ask-back instead, 2 a back)
 *   4 A [n:1]                 a's turn: progress, then recv (or a view) of
 *                             up to (n % 64 + 1) KiB
 *   5 A_SENDS [n:1]           a sends n + 1 bytes and flushes (bit 3 of the
 *                             op: 40 KiB from its registered buffer, which
 *                             a offers to b, which never reads it)
 *   6 B                       b's turn: its completions polled and dropped
 *                             (what a sent it: see bit 4 above)
 *   7 CORRUPT [len:2][pos:2][val:1][bytes]  a DATA frame with one byte of
 *                             it (pos, mod its size) set to val
 * Bit 7 of RAW, DATA and CORRUPT, in mode 0 (where a offers eager slots:
 * engine/transport/eager.c): the bytes go by RDMA WRITE into a's next eager
 * slot instead, RAW as they are, DATA and CORRUPT as an eager frame (slot
 * header, payload of up to 232 bytes, trailer); well-formed while the frame
 * is and a has a slot free (b reads a's consumed count where a writes it). 
 * All integers little endian. The pair is made fresh for every input, so an
 * input replays the same way. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tbrt.h"
#include "engine/link.h"
#include "engine/transport/framing.h"
#include "util/util.h"

#define STRIDE 4096u
#define NBUF 8u
#define LLAMA_STRIDE (128u * 1024u) /* llama-apple's, fixed */
#define SEND_MAX (LLAMA_STRIDE + 64u) /* a SEND may overrun the receive */
#define REGION 65536u              /* b's memory that offers name */
#define ABUF (64u * 1024u)         /* a's receive buffer */
#define WANT_MAX (1u << 20)        /* the well-formed stream's bytes, at most */
#define WR_TAG 0xf0f0000000000000ull

static bool verbose;
static int lsock = -1;
static struct sockaddr_in laddr;
static uint8_t *stage;              /* b's: what its SENDs send from */
static uint8_t *bregion;            /* b's: what offers name */
static uint8_t *abuf;               /* a's receive buffer */
static uint8_t *want;               /* the stream the well-formed frames carry */

static struct run {
    int mode;                       /* 0..3, 4 llama-linux */
    bool views, reg, hold;
    tbrt_link *a, *b;
    tbrt_mr *smr, *bmr;             /* b's regions: stage, bregion */
    uint32_t seq;                   /* the next frame's sequence number */
    bool exact;                     /* every frame so far well-formed */
    size_t want_len, got;
    uint64_t posted, reaped;        /* b's SENDs */
    uint64_t frames;                /* SENDs that reached a's ring (see room) */
    size_t offer_end;               /* where the last well-formed offer ends in the stream */
    uint32_t eager;                 /* b's eager frames written into a's slots */
    bool failed;                    /* a call of a's failed (the link broke) */
} r;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz-link-frames: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static int get16(const uint8_t *p) { return p[0] | p[1] << 8; }
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- the pair --------------------------------------------------------------------- */

/* libFuzzer's timer (SIGALRM, for -timeout) may cut a connect's wait short
 * (EINTR, seen once in ~55,000 inputs): the connection goes on by itself,
 * so wait for it (bounded) rather than call the input a crash. */
static void connect_or_die(int fd)
{
    if (connect(fd, (struct sockaddr *)&laddr, sizeof laddr) == 0)
        return;
    if (errno != EINTR)
        die("connect: %s", strerror(errno));
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n;
    while ((n = poll(&p, 1, 5000)) < 0 && errno == EINTR)
        ;
    int err = 0;
    socklen_t len = sizeof err;
    if (n <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err)
        die("connect: %s", n == 0 ? "no connection in 5 s" : strerror(n < 0 ? errno : err));
}

static int connected(int *peer)
{
    int fa = socket(AF_INET, SOCK_STREAM, 0);
    if (fa < 0)
        die("socket: %s", strerror(errno));
    connect_or_die(fa);
    int fb;
    while ((fb = accept(lsock, NULL, NULL)) < 0 && errno == EINTR)
        ;
    if (fb < 0)
        die("accept: %s", strerror(errno));
    /* closed with a reset: thousands of inputs leave no TIME_WAIT behind */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fa, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    setsockopt(fb, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    *peer = fb;
    return fa;
}

static void pair_make(void)
{
    int fb, fa = connected(&fb);
    tbrt_link_opts o;
    tbrt_link_opts_init(&o);
    o.device = "soft";
    static const int framing[] = {TBRT_FRAMING_AUTO, TBRT_FRAMING_FIXED, TBRT_FRAMING_AUTO,
                                  TBRT_FRAMING_LLAMA_APPLE, TBRT_FRAMING_LLAMA_LINUX};
    o.personality = r.mode == 2 || r.mode == 3 ? "apple-uc" : "linux-rc";
    o.framing = framing[r.mode];
    if (r.mode < 3) {               /* llama.cpp's framings fix their rings */
        o.nbuf = NBUF;
        o.stride = STRIDE;
    }
    o.timeout = 2;
    o.liveness = 2;
    o.no_fallback = 1;
    uint8_t ca[TBRT_CAPS_SIZE], cb[TBRT_CAPS_SIZE];
    char err[TBRT_WHY_MAX];
    if (tbrt_link_probe(fa, &o, &r.a, ca, err, sizeof err) ||
        tbrt_link_probe(fb, &o, &r.b, cb, err, sizeof err))
        die("probe: %s", err);
    if (tbrt_link_activate(r.a, cb, sizeof cb) || tbrt_link_activate(r.b, ca, sizeof ca))
        die("activate: %s", tbrt_link_why(r.a));
    double until = now_s() + 10;
    int ra, rb;
    for (int i = 0; (ra = tbrt_link_ready(r.a)) == -EAGAIN ||
                    (rb = tbrt_link_ready(r.b)) == -EAGAIN; i++) {
        if (now_s() > until)
            die("readiness: not within 10 s");
        if (i > 1000)
            poll(NULL, 0, 1);       /* loopback's bytes come at once, nearly always */
    }
    if (ra || tbrt_link_ready(r.b))
        die("ready: %s", tbrt_link_why(ra ? r.a : r.b));
    /* two regions, so an offer's READ beyond bregion meets no memory of b's
     * that its key covers (Apple's provider wants all three rights) */
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (tbrt_mr_reg(r.b->x.pd, stage, SEND_MAX, acc, &r.smr) ||
        tbrt_mr_reg(r.b->x.pd, bregion, REGION, acc, &r.bmr))
        die("mr_reg: %s", tbrt_dev_why(r.b->x.dev));
    if (r.reg && tbrt_link_mem_reg(r.a, abuf, ABUF))
        die("mem_reg: %s", tbrt_link_why(r.a));
    r.seq = r.a->x.recv_seq;
}

/* b's completions: ours are counted, a's SENDs to b dropped, their
 * receives posted again unless b holds them (b's engine is out of the game) */
static void b_turn(void)
{
    struct ibv_wc wc[16];
    int n = tbrt_cq_poll(r.b->x.cq, 16, wc);
    if (n < 0)
        die("b: poll_cq: %s", tbrt_dev_why(r.b->x.dev));
    for (int i = 0; i < n; i++) {
        if ((wc[i].wr_id & WR_TAG) != WR_TAG) {
            if ((wc[i].wr_id & RDMA_RECV_TAG) && wc[i].status == IBV_WC_SUCCESS && !r.hold &&
                rdma_post_recv(&r.b->x, (uint32_t)(wc[i].wr_id & 0xffff)))
                die("b: post_recv: %s", r.b->x.why);
            continue;
        }
        r.reaped++;
        if (wc[i].status != IBV_WC_SUCCESS)
            r.exact = false;        /* the frame never reached a: it may not show */
        if (verbose && wc[i].status != IBV_WC_SUCCESS)
            fprintf(stderr, "b's SEND failed: status %d\n", wc[i].status);
    }
}

static void pair_free(void)
{
    /* a first (no waiting for what b will never read); then b's SENDs still
     * waiting are done before b's regions go: a UC one (Apple's credits: it
     * waits for a receive) finds no QP and is dropped, an RC one is flushed
     * by ERR at once (its retries would take seconds). Apple's provider
     * refuses every dereg once a QP was in ERR, but UC needs none. */
    tbrt_link_free(r.a);
    if (r.b->x.qp_type == IBV_QPT_RC) {
        struct ibv_qp_attr e = {.qp_state = IBV_QPS_ERR};
        if (tbrt_qp_modify(r.b->x.qp, &e, IBV_QP_STATE))
            die("b: modify_qp ERR: %s", tbrt_dev_why(r.b->x.dev));
    }
    for (int i = 0; i < 1000 && r.reaped < r.posted; i++) {
        b_turn();
        if (i > 100 && r.reaped < r.posted)
            poll(NULL, 0, 1);
    }
    if (r.reaped < r.posted)
        die("b's SENDs were not done or flushed within 1 s");
    if (tbrt_mr_dereg(r.smr) || tbrt_mr_dereg(r.bmr))
        die("mr_dereg: %s", tbrt_dev_why(r.b->x.dev));
    tbrt_link_free(r.b);
}

/* ---- a's side --------------------------------------------------------------------- */

/* A call of a's returned rc: an error must be the link's, and say why. */
static void a_result(const char *call, intptr_t rc)
{
    if (rc >= 0 || rc == -EAGAIN)
        return;
    const char *why = tbrt_link_why(r.a);
    if (!why || strncmp(why, "link ", 5) != 0)
        die("a's failed %s says no reason", call);
    if (r.a->state != TBRT_LINK_BROKEN)
        return;                     /* a refusal that leaves the link up (a send's EBUSY) */
    if (r.exact) {
        fprintf(stderr, "fuzz-link-frames: %s: %s\n", call, why);
        die("a well-formed stream broke the link (%s)", call);
    }
    if (verbose && !r.failed)
        fprintf(stderr, "a failed: %s\n", why);
    r.failed = true;
}

/* n bytes a handed out at p: the stream's next ones, while it is known */
static void a_took(const uint8_t *p, size_t n, size_t asked)
{
    if (n > asked)
        die("a handed out %zu bytes, asked for %zu", n, asked);
    if (r.exact) {
        if (n > r.want_len - r.got)
            die("a handed out bytes beyond the well-formed frames sent");
        if (memcmp(p, want + r.got, n) != 0)
            die("a handed out bytes that differ from the stream (at %zu)", r.got);
    }
    r.got += n;
}

static void a_turn(size_t asked)
{
    a_result("progress", tbrt_link_progress(r.a));
    if (!r.views) {
        intptr_t n = tbrt_link_recv(r.a, abuf, asked);
        a_result("recv", n);
        if (n > 0)
            a_took(abuf, (size_t)n, asked);
        return;
    }
    while (asked) {
        const uint8_t *p;
        intptr_t n = tbrt_link_recv_view(r.a, &p);
        a_result("recv_view", n);
        if (n <= 0)
            return;
        size_t take = (size_t)n < asked ? (size_t)n : asked;
        a_took(p, take, take);
        a_result("release", tbrt_link_release(r.a, take));
        asked -= take;
    }
}

/* ---- b's frames ------------------------------------------------------------------- */

/* Whether a UC frame would find a receive posted (else it is dropped, and a
 * sees a gap: what it should): a's receives held by the device now */
static bool a_has_room(void)
{
    return (int64_t)r.a->x.recv_posted - (int64_t)(r.frames - r.a->x.stats.frames_recv) > 0;
}

static void b_send(const uint8_t *bytes, uint32_t len)
{
    if (len > SEND_MAX)
        len = SEND_MAX;
    if (r.a->x.qp_type == IBV_QPT_UC && r.exact && !a_has_room()) {
        tbrt_link_progress(r.a);    /* a gives drained strides back when idle */
        if (!a_has_room())
            r.exact = false;        /* this one is lost */
    }
    /* b's send queue's depth (llama-linux's is 4) */
    uint64_t depth = r.b->x.qp->cap.max_send_wr < NBUF ? r.b->x.qp->cap.max_send_wr : NBUF;
    for (int i = 0; i < 100 && r.posted - r.reaped >= depth; i++) {
        b_turn();
        a_result("progress", tbrt_link_progress(r.a));
    }
    if (r.posted - r.reaped >= depth) {
        r.exact = false;            /* b's queue stays full (a stopped reading) */
        return;
    }
    memcpy(stage, bytes, len);
    struct ibv_sge sge = {.addr = (uintptr_t)stage, .length = len, .lkey = r.smr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_TAG | r.posted, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    /* Apple counts the queue's depth in 4 KiB frames: a full one is no fault */
    int rc;
    for (int i = 0; (rc = tbrt_post_send(r.b->x.qp, &wr, NULL)) == -ENOMEM && i < 100; i++) {
        b_turn();
        a_result("progress", tbrt_link_progress(r.a));
    }
    if (rc == -ENOMEM) {
        r.exact = false;            /* b's queue stays full (a stopped reading) */
        return;
    }
    if (rc)
        die("b: post_send: %s", tbrt_dev_why(r.b->x.dev));
    r.posted++;
    r.frames++;
    if (verbose)
        fprintf(stderr, "b sent %u bytes\n", len);
}

/* How a frame is wrong in a way its check does not catch (all zero: not) */
struct odd {
    int seq_skew;               /* +1 skips a sequence number, -1 repeats one */
    bool long_len;              /* its header says a byte more than a payload */
    uint32_t extra;             /* the SEND carries this much more */
    bool corrupt;               /* byte pos (mod its size) set to val */
    uint32_t pos;
    uint8_t val;
};
static const struct odd well_formed;

/* A frame of a's framing with a payload of len bytes (a whole stride in
 * the fixed framings). magic: tbrt's (llama-apple: its RSEG for
 * TBRT_SEG_MAGIC; llama-linux: no header) */
static void b_frame(uint32_t magic, const uint8_t *payload, uint32_t len, const struct odd *o)
{
    static uint8_t f[SEND_MAX];
    int framing = r.a->x.framing;
    uint32_t hdr = r.a->x.hdr, hlen = o->long_len ? r.a->x.payload + 1 : len;
    uint32_t seq = r.seq + (uint32_t)o->seq_skew;
    r.seq = seq + 1;
    uint32_t bytes = (framing == TBRT_FRAMING_VARIABLE ? hdr + len
                      : framing == TBRT_FRAMING_LLAMA_LINUX ? len
                                                           : r.a->x.stride) + o->extra;
    memset(f, 0, bytes);
    if (framing == TBRT_FRAMING_LLAMA_APPLE)
        rseg_hdr_write(f, magic == TBRT_SEG_MAGIC ? TBRT_LLAMA_SEG_MAGIC : magic, hlen);
    else if (framing != TBRT_FRAMING_LLAMA_LINUX)
        frame_hdr_write(f, magic, hlen, seq);
    memcpy(f + hdr, payload, len);
    if (o->corrupt && bytes)
        f[o->pos % bytes] = o->val;
    b_send(f, bytes);
}

static void want_add(const uint8_t *p, size_t n)
{
    if (r.want_len + n > WANT_MAX) {
        r.exact = false;
        return;
    }
    memcpy(want + r.want_len, p, n);
    r.want_len += n;
}

static void b_data(uint8_t op, const uint8_t *p, uint32_t len)
{
    uint32_t payload = r.a->x.payload;
    if (len > payload)
        len = payload;
    struct odd o = {.seq_skew = (op & 0x08 ? 1 : 0) - (op & 0x10 ? 1 : 0),
                    .long_len = op & 0x20, .extra = op & 0x40 ? 8u : 0u};
    b_frame(TBRT_SEG_MAGIC, p, len, &o);
    if (op & 0x78)
        r.exact = false;
    else if (len)
        want_add(p, len);
}

static void b_offer(uint32_t off, uint32_t len, bool bad_key)
{
    uint64_t addr = (uintptr_t)bregion - 2048 + off % (REGION + 4096);
    uint32_t key = bad_key ? r.bmr->rkey ^ (off | 1) : r.bmr->rkey;
    uint8_t o[FRAME_OFFER_LEN];
    uint64_t a64 = htole64(addr);
    uint32_t k = htole32(key), l = htole32(len);
    memcpy(o, &a64, 8);
    memcpy(o + 8, &k, 4);
    memcpy(o + 12, &l, 4);
    /* well-formed: inside b's region, on a link that reads offers, the last
     * one read (a second one before the first is read breaks the link) */
    bool ok = !bad_key && !r.hold && len > 0 && addr >= (uintptr_t)bregion &&
              addr + len <= (uintptr_t)bregion + REGION && r.a->x.direct_ok &&
              r.got >= r.offer_end;
    b_frame(FRAME_OFFER_MAGIC, o, FRAME_OFFER_LEN, &well_formed);
    if (ok) {
        want_add((const uint8_t *)(uintptr_t)addr, len);
        r.offer_end = r.want_len;
    } else
        r.exact = false;
}

/* ---- b's eager writes ------------------------------------------------------------- */

/* Does a take eager frames here (mode 0: RC, variable framing, soft)? */
static bool a_eager(void) { return r.mode == 0 && r.a->x.eager.slots && r.b->x.eager.mem; }

/* An RDMA WRITE of bytes into a's eager region at off. */
static void b_write(uint32_t off, const uint8_t *bytes, uint32_t len)
{
    uint64_t depth = NBUF;
    for (int i = 0; i < 100 && r.posted - r.reaped >= depth; i++) {
        b_turn();
        a_result("progress", tbrt_link_progress(r.a));
    }
    if (r.posted - r.reaped >= depth) {
        r.exact = false;
        return;
    }
    memcpy(stage, bytes, len);
    struct ibv_sge sge = {.addr = (uintptr_t)stage, .length = len, .lkey = r.smr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_TAG | r.posted, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = (uintptr_t)r.a->x.eager.mem + off;
    wr.wr.rdma.rkey = r.a->x.eager.mr->rkey;
    int rc = tbrt_post_send(r.b->x.qp, &wr, NULL);
    if (rc)
        die("b: post_send WRITE: %s", tbrt_dev_why(r.b->x.dev));
    r.posted++;
    if (verbose)
        fprintf(stderr, "b wrote %u bytes at %u of a's eager region\n", len, off);
}

/* An eager frame of len payload bytes into a's next slot. */
static void b_eager(const uint8_t *payload, uint32_t len, const struct odd *o)
{
    if (len > EAGER_MAX)
        len = EAGER_MAX;
    uint32_t seq = r.seq + (uint32_t)o->seq_skew;
    r.seq = seq + 1;
    uint32_t hlen = o->long_len ? EAGER_MAX + 1 : len, credit = 0;
    uint32_t check = ~(FRAME_EAGER_MAGIC ^ seq ^ hlen ^ credit);
    uint8_t f[EAGER_SLOT];
    uint32_t end = EAGER_HDR + ((len + 7) & ~7u), h[4] = {htole32(seq), htole32(hlen),
                                                        htole32(credit), htole32(check)};
    memset(f, 0, sizeof f);
    memcpy(f, h, sizeof h);
    memcpy(f + EAGER_HDR, payload, len);
    uint64_t t = htole64((uint64_t)seq | (uint64_t)~seq << 32);
    memcpy(f + end, &t, 8);
    if (o->corrupt)
        f[o->pos % (end + 8)] = o->val;
    /* a slot a has not read yet: a well-formed writer would wait for it */
    uint32_t consumed = (uint32_t)le64toh(*(volatile uint64_t *)r.b->x.eager.mem);
    if (r.eager - consumed >= EAGER_SLOTS)
        r.exact = false;
    b_write(EAGER_CTL + (r.eager % EAGER_SLOTS) * EAGER_SLOT, f, end + 8);
    r.eager++;
}

/* ---- the input -------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    setenv("TBRT_SOFT_FABRIC", "fuzz-link", 0);
    stage = malloc(SEND_MAX);
    bregion = malloc(REGION);
    abuf = malloc(ABUF);
    want = malloc(WANT_MAX);
    if (!stage || !bregion || !abuf || !want)
        die("malloc: %s", strerror(errno));
    for (uint32_t i = 0; i < REGION; i++)
        bregion[i] = (uint8_t)(i * 7 + i / 251);
    lsock = socket(AF_INET, SOCK_STREAM, 0);
    laddr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof laddr;
    if (lsock < 0 || bind(lsock, (struct sockaddr *)&laddr, sizeof laddr) != 0 ||
        listen(lsock, 4) != 0 || getsockname(lsock, (struct sockaddr *)&laddr, &len) != 0)
        die("listen: %s", strerror(errno));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    r = (struct run){.mode = data[0] & 32 ? 4 : data[0] & 3, .views = data[0] & 4,
                     .reg = data[0] & 8, .hold = data[0] & 16, .exact = true};
    pair_make();
    static const uint8_t filler[40 * 1024];
    for (size_t off = 1; off < size;) {
        uint8_t op = data[off++];
        size_t left = size - off;
        if (verbose)
            fprintf(stderr, "op 0x%02x (%s) at %zu, %zu bytes left\n", op,
                    (const char *[]){"raw", "data", "offer", "done", "a", "a sends", "b",
                                     "corrupt"}[op & 7], off - 1, left);
        switch (op & 7) {
        case 0:
        case 1: {
            if (left < 2)
                break;
            uint32_t len = (uint32_t)get16(data + off);
            off += 2;
            if (len > size - off)
                len = (uint32_t)(size - off);
            if ((op & 0x80) && a_eager()) {
                if ((op & 7) == 0) {
                    /* raw bytes into the next slot (not taken as a frame) */
                    b_write(EAGER_CTL + (r.eager % EAGER_SLOTS) * EAGER_SLOT, data + off,
                            len > EAGER_SLOT ? EAGER_SLOT : len);
                    r.exact = false;
                } else {
                    struct odd o = {.seq_skew = (op & 0x08 ? 1 : 0) - (op & 0x10 ? 1 : 0),
                                    .long_len = op & 0x20};
                    uint32_t n = len > EAGER_MAX ? EAGER_MAX : len;
                    b_eager(data + off, n, &o);
                    if ((op & 0x38) || n == 0)
                        r.exact = false;
                    else
                        want_add(data + off, n);
                }
            } else if ((op & 7) == 0) {
                b_send(data + off, len);
                r.exact = false;
            } else {
                b_data(op, data + off, len);
            }
            off += len;
            break;
        }
        case 2:
            if (left < 8)
                break;
            b_offer(get32(data + off), get32(data + off + 4), op & 8);
            off += 8;
            break;
        case 3: {
            if (left < 4)
                break;
            static const uint32_t magic[4] = {FRAME_DONE_MAGIC, FRAME_ASK_BACK_MAGIC,
                                              FRAME_BACK_MAGIC, FRAME_DONE_MAGIC};
            uint8_t d[FRAME_DONE_LEN];
            memcpy(d, data + off, 4);
            off += 4;
            b_frame(magic[(op >> 3) & 3], d, FRAME_DONE_LEN, &well_formed);
            /* done, back: nothing of a's is lent to b (but a_sends can lend
             * it); ask-back: a gives an offer back when it has not begun on
             * it, which the stream here does not follow */
            r.exact = false;
            break;
        }
        case 4:
            if (left < 1)
                break;
            a_turn(((size_t)data[off++] % 64 + 1) * 1024);
            break;
        case 5: {
            if (left < 1)
                break;
            size_t n = (size_t)data[off++] + 1;
            intptr_t s = (op & 8) && r.reg ? tbrt_link_send(r.a, abuf, sizeof filler)
                                           : tbrt_link_send(r.a, filler, n);
            a_result("send", s);
            a_result("flush", tbrt_link_flush(r.a));
            break;
        }
        case 6: b_turn(); break;
        default: {
            if (left < 5)
                break;
            uint32_t len = (uint32_t)get16(data + off);
            int pos = get16(data + off + 2), val = data[off + 4];
            off += 5;
            if (len > size - off)
                len = (uint32_t)(size - off);
            uint32_t payload = r.a->x.payload;
            struct odd o = {.corrupt = true, .pos = (uint32_t)pos, .val = (uint8_t)val};
            if ((op & 0x80) && a_eager())
                b_eager(data + off, len, &o);
            else
                b_frame(TBRT_SEG_MAGIC, data + off, len > payload ? payload : len, &o);
            r.exact = false;
            off += len;
            break;
        }
        }
    }
    /* the end: a takes what came, b answers its READs, until nothing moves
     * (a well-formed stream: until all of it came, within 2 s) */
    double until = now_s() + 2;
    for (int still = 0; !r.failed && still < 20 && !(r.exact && r.got == r.want_len);) {
        size_t before = r.got;
        b_turn();
        a_turn(ABUF);
        still = r.got == before ? still + 1 : 0;
        if (r.exact && still == 20 && now_s() < until) {
            still = 0;              /* an RNR retry's timer, say */
            poll(NULL, 0, 1);
        }
    }
    if (r.exact && (r.got != r.want_len || r.a->state == TBRT_LINK_BROKEN)) {
        fprintf(stderr, "fuzz-link-frames: got %zu of %zu bytes; a: %s\n", r.got, r.want_len,
                tbrt_link_why(r.a));
        die("a well-formed stream did not all arrive");
    }
    if (verbose)
        fprintf(stderr, "end: mode %d exact %d got %zu want %zu link %s why: %s\n", r.mode,
                r.exact, r.got, r.want_len, r.a->state == TBRT_LINK_BROKEN ? "broken" : "up",
                r.failed ? tbrt_link_why(r.a) : "");
    pair_free();
    return 0;
}
