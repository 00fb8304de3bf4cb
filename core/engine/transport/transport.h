/* transport.h - the transports of the engine: what carries a link's bytes.
 *
 *   rdma         (rdma.c)         stride rings over a device of the device
 *                                  interface: tbrt's framing and llama-apple
 *   llama_linux  (llama_linux.c)  llama.cpp's Linux transport: plain SENDs of
 *                                  up to 256 KiB, stop-and-wait
 *   tcp          (tcp.c)          the plain byte stream of the bootstrap socket
 *
 * The engine (link.c) owns a transport: it fills struct xport (the socket,
 * the options, for rdma the device chosen by select.c), calls the setup
 * function and then the operations, and never the other way round. A
 * transport includes nothing of the engine. It reports a failure by its
 * return value (-errno) and by recording the message once, with xport_fail,
 * in its own struct xport; the engine adopts that record as the link's error
 * in one place (link_took in link.c). EAGAIN is not a failure. */
#ifndef TBRT_TRANSPORT_H
#define TBRT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dev/dev.h"

struct xport;

struct link_transport {
    const char *name;
    intptr_t (*send)(struct xport *x, const void *buf, size_t len);
    intptr_t (*recv)(struct xport *x, void *buf, size_t len);
    int (*flush)(struct xport *x);
    /* completions handled (>= 0) or -errno */
    int (*progress)(struct xport *x);
    int (*activate)(struct xport *x, const tbrt_caps *peer);
    /* 1: something happened, do not sleep; 0: armed, sleep on fds */
    int (*arm)(struct xport *x);
    int (*fds)(struct xport *x, int *fds, int max);
    bool (*writable)(struct xport *x);
    size_t (*readable)(struct xport *x);
    bool (*idle)(struct xport *x);          /* nothing of ours in flight */
    /* optional: the peer is ready too (both ends' queue pairs are up) */
    int (*ready)(struct xport *x);
    int (*inflight)(struct xport *x);       /* sends in flight */
    void (*teardown)(struct xport *x);
    /* zero-copy views (engine/views.c): a span of at most want bytes (0:
     * all there is room for) where the next bytes sent go: > 0, -EAGAIN,
     * -errno; send n bytes of it. A span of the oldest received bytes: > 0
     * (rdma: called only when readable), tcp also 0 at EOF or -EAGAIN; give
     * the first n of it back. */
    intptr_t (*send_view)(struct xport *x, size_t want, uint8_t **out);
    int (*commit)(struct xport *x, size_t n);
    intptr_t (*recv_view)(struct xport *x, const uint8_t **out);
    int (*release)(struct xport *x, size_t n);
};

extern const struct link_transport link_rdma;
extern const struct link_transport link_llama_linux;
extern const struct link_transport link_tcp;

/* (a + b) % n for a < n and b <= n: the index b places after a in a ring
 * of n, without a division (a dozen cycles or more each, and a message
 * meets several on its way). */
static inline uint32_t ring_at(uint32_t a, uint32_t b, uint32_t n)
{
    uint32_t i = a + b;
    return i >= n ? i - n : i;
}

struct link_inq {
    uint32_t buf;
    uint32_t off;
    uint32_t len;
    /* a direct offer (direct.c): len is the offer's; the stride holds
     * [wbeg, wend) of it, read there for a reader without registered memory */
    bool direct;
    uint32_t wbeg, wend;
};

/* A caller's memory registered with a link (tbrt_link_mem_reg): sends from
 * it and receives into it may go direct (direct.c). */
struct xport_umr {
    uint8_t *addr;
    size_t len;
    tbrt_mr *mr;
};
#define XPORT_UMR_MAX 8

/* A link's transport state. The engine sets the fields marked (engine)
 * before setup; the transport owns the rest. */
struct xport {
    int link_id;                /* (engine) for "link N: probe: ..." messages */
    double t0;                  /* (engine) when the link was made: debug times */
    double dbg_last_out, dbg_last_in; /* last frame each way (TBRT_DEBUG=3) */
    int fd;                     /* (engine) the bootstrap socket */
    const tbrt_link_opts *opts; /* (engine) the link's options */
    tbrt_link_stats stats;
    /* the first failure, recorded by xport_fail; the engine adopts it */
    int err;
    char why[TBRT_WHY_MAX];
    bool err_at_peer;           /* that failure is a completion that failed at the
                                   peer or on the way (its memory or QP gone, no
                                   answer): also how a peer that died looks */
    bool peer_dead;             /* the bootstrap socket failed */
    bool full_looks;            /* (engine) the peer said goodbye or died: every look
                                   polls everything (rdma: the CQ too) */
    bool eof;                   /* tcp: the peer closed its end */
    char teardown_log[128];     /* "qp,mr,mr,buf,buf,cq,pd,dev" */
    int close_err;              /* a teardown step that failed */
    char close_why[TBRT_WHY_MAX];
    int inject;                 /* test hook: corrupt the next frame */
    int flavor;                 /* (engine, select.c) TBRT_FLAVOR_*, 0 on tcp */
    int peer_wire;              /* WIRE_* (framing.h) of a peer found speaking
                                   another framing; the engine tells the peer */

    /* rdma: the device, port and GID facing the peer (engine, select.c) */
    tbrt_dev *dev;
    uint8_t port;
    int gid_index;
    uint8_t gid[16];
    uint16_t lid;
    enum ibv_mtu mtu;
    /* rdma: resources and rings */
    tbrt_pd *pd;
    tbrt_cq *cq;
    tbrt_qp *qp;
    tbrt_mr *send_mr, *recv_mr;
    uint8_t *send_mem, *recv_mem;
    size_t ring_bytes;          /* the receive ring; the send ring: */
    size_t send_ring_bytes;
    uint32_t nbuf, stride, payload;
    uint32_t hdr;               /* header bytes at the start of a stride */
    uint32_t max_inline;        /* IBV_SEND_INLINE bytes the QP grants */
    int framing, qp_type;
    uint32_t psn;
    tbrt_caps peer;
    /* send ring: strides [send_head, send_head+send_count) are in flight;
     * inline_count inline SENDs too (their strides were free at post) */
    uint32_t send_head, send_count;
    uint32_t inline_count;
    int pend_buf;               /* stride being filled, -1 when none */
    uint32_t pend_len;
    uint32_t send_seq;
    /* receive ring: completed strides waiting for the reader, in order */
    struct link_inq *inq;
    uint32_t inq_head, inq_count, inq_cap;  /* a ring of inq_cap: strides + eager slots */
    size_t inq_bytes;
    uint32_t recv_seq;
    uint32_t recv_posted;
    /* drained strides not yet given back to the device, oldest first (a
     * ring of nbuf): they go back when the link finds nothing to do, or
     * RDMA_REPOST_BATCH at a time, so a receive costs no post on the way
     * from its completion to the reader (rdma.c) */
    uint32_t *repost;
    uint32_t repost_head, repost_n;

    /* direct transfers (direct.c): the caller's registered memory; the one
     * send lent to the peer (offered, not yet done); the peer's one offer;
     * the reads and control frames in flight (the QP has room for them
     * beyond the nbuf strides) */
    struct xport_umr umr[XPORT_UMR_MAX];
    uint32_t umr_n;
    bool direct_ok;             /* this link may offer: RC, tbrt's variable framing */
    uint32_t max_msg;           /* the port's largest message: one READ at most */
    struct {
        const uint8_t *buf;
        uint32_t len;
        bool active, done;
        bool asked_back;        /* we asked for it back (both ends lend) */
        bool back;              /* the peer gave it back: [buf, buf+len) goes
                                   through the ring, this send's rest too */
    } dsend;
    struct {
        uint64_t addr;
        uint32_t rkey;
        bool pending;
    } doffer;
    /* the reader's one READ: in flight (busy), or done into the caller's
     * memory and not yet all taken (done: dst/n are what is left), or into
     * the offer's stride (window) */
    struct {
        uint8_t *dst;
        uint32_t off, n;
        bool busy, done, window;
    } dread;
    bool dwait;                 /* the reader waits for a READ or a slot: not readable */
    uint32_t dctl_inflight;

    /* eager frames (eager.c): small frames RDMA-written into the peer's
     * slots, found by the reader polling memory. Our region (eager_mem):
     * the control block the peer writes, then our slots. */
    struct {
        uint8_t *mem;           /* our region, eager_bytes(slots) */
        tbrt_mr *mr;
        uint32_t slots;         /* our slots the peer may write; 0: none */
        bool offered;           /* our offer went */
        /* the peer's region, from its offer: out_slots 0 until then */
        uint64_t peer_addr;
        uint32_t peer_rkey, out_slots;
        /* the writer's side: frames written, the peer's consumed count as
         * last seen (its control block or a frame's credit field), writes
         * in flight, and the eager frame count when we last woke it */
        uint32_t sent, seen, wr_inflight, woke_at;
        /* the reader's side: frames taken, consumed, consumed as told to
         * the peer; our control writes in flight; we told it we sleep */
        uint32_t taken, consumed, told;
        uint32_t ctl_inflight, ctl_done;
        bool asleep_told;
        uint32_t look;          /* looks: the CQ is polled every 4th... */
        bool recent;            /* ...while the last frame taken was eager */
        /* the eager write, made once the peer's region is known: a post
         * fills in only the frame's place, length and slot */
        struct ibv_sge sge;
        struct ibv_send_wr wr;
    } eager;

    /* tcp */
    uint8_t *tcp_buf;
    size_t tcp_len, tcp_cap;
    /* tcp: bytes read for a recv view, [tcp_roff, tcp_rlen) not yet taken */
    uint8_t *tcp_rbuf;
    size_t tcp_roff, tcp_rlen, tcp_rcap;
};

/* Record the transport's first failure ("<op>: ..."); returns -err. */
int xport_fail(struct xport *x, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Note a step of the teardown ("qp", "mr", ...). */
void xport_log_teardown(struct xport *x, const char *what);

/* Make the transport's resources; 0 or -errno with the reason in err. */
int link_rdma_setup(struct xport *x, char *err, size_t errlen);
int link_llama_linux_setup(struct xport *x, char *err, size_t errlen);
int link_tcp_setup(struct xport *x, char *err, size_t errlen);

/* rdma.c, shared by the two RDMA transports: a receive of stride bytes into
 * stride i of the receive ring; a queue pair transition; the byte stream
 * out of completed receives (x->hdr bytes skipped in each); the fds; the
 * teardown; an anonymous mapping for a ring. */
int rdma_post_recv(struct xport *x, uint32_t i);
int rdma_repost(struct xport *x);
int rdma_give_back(struct xport *x, uint32_t buf);
int rdma_modify(struct xport *x, struct ibv_qp_attr *a, int mask, const char *what);
intptr_t rdma_recv(struct xport *x, void *buf, size_t len);
intptr_t rdma_recv_view(struct xport *x, const uint8_t **out);
int rdma_release(struct xport *x, size_t n);
int rdma_fds(struct xport *x, int *fds, int max);
size_t rdma_readable(struct xport *x);
void rdma_teardown(struct xport *x);
void *rdma_ring_alloc(size_t bytes);
int rdma_poll(struct xport *x);
int rdma_post_pending(struct xport *x);
int rdma_consume(struct xport *x, struct link_inq *q, size_t n);
#define RDMA_RECV_TAG (1ull << 20)   /* wr_id bit of receive completions */
#define RDMA_INLINE_TAG (1ull << 21) /* wr_id bit of inline sends' completions */
#define RDMA_DIRECT_TAG (1ull << 22) /* wr_id bit of direct reads and control frames */
#define RDMA_EAGER_TAG (1ull << 23)  /* wr_id bit of eager writes (eager.c) */

/* eager.c: a frame of up to EAGER_MAX payload bytes goes as one RDMA WRITE
 * into the peer's next slot, which the peer's reader polls, instead of a
 * SEND that the peer's CQ reports. The header says what it is:
 *   0 seq u32, 4 len u32, 8 credit u32 (the writer's consumed count of the
 *   other direction's eager frames), 12 check u32 = ~(TBRE ^ seq ^ len ^
 *   credit), then len payload bytes, padding to 8, and a trailer u64 that
 *   repeats seq: the WRITE's last word, which a device that places a WRITE's
 *   bytes in address order (tbrt_dev.ordered_writes) places last. */
enum {
    EAGER_SLOT = 256,           /* bytes of a slot */
    EAGER_HDR = 16,
    EAGER_MAX = EAGER_SLOT - EAGER_HDR - 8,     /* payload bytes, at most */
    EAGER_SLOTS = 64,           /* slots offered (a power of 2) */
    EAGER_SLOTS_MAX = 1024,     /* slots a peer may offer (a power of 2) */
    EAGER_CTL = 64,             /* the control block: consumed u64, asleep u64 */
    EAGER_CTL_MAX = 4,          /* control writes in flight, at most */
    EAGER_BUF = 1u << 31,       /* link_inq.buf of an eager frame: | slot index */
};
#define FRAME_EAGER_MAGIC 0x45524254u /* "TBRE": an eager offer (a SEND) and the slots' check */
#define FRAME_EAGER_LEN 16u         /* offer: addr u64, rkey u32, slots u32 */
bool eager_possible(const struct xport *x);
int eager_setup(struct xport *x);
int eager_ready(struct xport *x);
int eager_offer_in(struct xport *x, const uint8_t *payload, uint32_t len);
bool eager_fits(struct xport *x, uint32_t len);
int eager_post(struct xport *x, const uint8_t *at, uint32_t len);
int eager_poll(struct xport *x);
const uint8_t *eager_data(const struct xport *x, const struct link_inq *q);
int eager_consumed(struct xport *x);
int eager_completion(struct xport *x, const struct ibv_wc *wc);
const char *eager_wr_what(uint64_t wr_id);  /* "eager write", ... (error messages) */
int eager_arm(struct xport *x);
int eager_awake(struct xport *x);
int eager_dereg(struct xport *x);
void eager_unmap(struct xport *x);

/* direct.c: large sends from registered memory go as an offer (address,
 * key, length) that the reader takes with RDMA READs, straight into its own
 * registered memory, or through the offer's stride when it has none. */
enum {
    DIRECT_MIN = 32 * 1024,     /* a send this large from registered memory is offered */
    DIRECT_MAX = 1u << 30,      /* bytes in one offer: a larger send is taken in parts */
    DIRECT_CTL_MAX = 8,         /* reads and control frames in flight, at most */
};
bool direct_setup(struct xport *x);
int direct_mem_reg(struct xport *x, void *addr, size_t len);
int direct_mem_dereg(struct xport *x, void *addr);
intptr_t direct_send(struct xport *x, const void *buf, size_t len);
int direct_frame(struct xport *x, uint32_t magic, uint32_t buf, const uint8_t *payload,
                 uint32_t len);
int direct_completion(struct xport *x, const struct ibv_wc *wc);
const char *direct_wr_what(uint64_t wr_id);    /* "direct read", ... (error messages) */
const char *direct_frame_name(uint32_t magic); /* "offer", "done", ... */
/* rdma_send copied up to end: a send given back is all gone when it passed
 * its end (later sends of that buffer may go direct again) */
void direct_sent_through(struct xport *x, const void *end);
intptr_t direct_recv(struct xport *x, struct link_inq *q, uint8_t *dst, size_t want);
intptr_t direct_view(struct xport *x, struct link_inq *q, const uint8_t **out);
int direct_consume(struct xport *x, struct link_inq *q, size_t n);
uint32_t direct_here(const struct xport *x, const struct link_inq *q);
void direct_teardown(struct xport *x);
int direct_stray_done(struct xport *x);   /* test hook (tbrt_link_inject) */

#endif
