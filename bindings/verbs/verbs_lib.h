/* verbs_lib.h - tbrt's own libibverbs: the C ABI of rdma-core 44's
 * libibverbs.so.1 (and, built with -DTBRT_VERBS_APPLE, of Apple's librdma)
 * on top of tbrt's public verbs tier (tbrt.h) over the soft device, so
 * unmodified verbs programs (ibv_*_pingpong, perftest, UCX, the user's own)
 * run without RDMA hardware or a kernel module:
 *
 *   program -> libibverbs.so.1 (this) -> tbrt_qp_create... -> soft device
 *           -> shared-memory wire
 *
 * Layout follows rdma-core's public headers exactly (Debian's verbs.h is
 * compiled in): every context is a struct verbs_context, so the inline
 * functions of verbs.h (ibv_query_port, ibv_create_cq_ex, ibv_create_qp_ex,
 * ibv_query_device_ex, ibv_post_send, ibv_poll_cq, the ibv_wr_* and
 * ibv_start_poll families) reach our code through the tables they expect.
 * What the device cannot do fails as libibverbs does for a provider without
 * the feature (NULL with errno EOPNOTSUPP, or EOPNOTSUPP returned), and says
 * why on stderr when TBRT_DEBUG is set.
 *
 * Devices: softib0..softib<N-1> ($TBRT_VERBS_DEVICES, 1), each the soft
 * device of the same number, in personality $TBRT_VERBS_PERSONALITY
 * (linux-rc; apple-uc for the Apple flavor).
 *
 * Threads: libibverbs lets any thread call on any object. The soft device
 * serves one thread per context at a time, so every call that reaches it
 * holds the context's lock (vb_ctx.lock); calls that block (ibv_get_cq_event,
 * ibv_get_async_event, destroy waiting for event acks) never hold it while
 * they wait. */
#ifndef TBRT_VERBS_LIB_H
#define TBRT_VERBS_LIB_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "tbrt.h"

/* verbs.h turns these names into inline wrappers; we define the symbols */
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_get_device_list

#ifdef TBRT_VERBS_APPLE
#define VB_FLAVOR_NAME "librdma (tbrt, Apple flavor)"
#define VB_DEFAULT_PERSONALITY "apple-uc"
#else
#define VB_FLAVOR_NAME "libibverbs (tbrt)"
#define VB_DEFAULT_PERSONALITY "linux-rc"
#endif

#define VB_MAX_DEVICES 16

/* ---- devices and contexts ------------------------------------------------ */

struct vb_device {
    struct ibv_device ibv;      /* what ibv_get_device_list hands out */
    int index;                  /* the soft device soft<index> */
    _Atomic int guid_known;
    __be64 guid;                /* node GUID, queried once */
};

struct vb_ctx {
    pthread_mutex_t lock;       /* held by every call into the device */
    tbrt_dev *dev;
    struct vb_device *vdev;
    struct ibv_device_attr attr; /* queried at open: limits checked here */
    int events_fd;              /* the device's event fd: the context's async_fd */
    /* must be last: the ibv_context is the verbs_context's last member */
    struct verbs_context v;
};

static inline struct vb_ctx *vb_ctx_of(struct ibv_context *c)
{
    return (struct vb_ctx *)((char *)c - offsetof(struct vb_ctx, v.context));
}

static inline void vb_lock(struct vb_ctx *c) { pthread_mutex_lock(&c->lock); }
static inline void vb_unlock(struct vb_ctx *c) { pthread_mutex_unlock(&c->lock); }

/* ---- objects: each wraps the libibverbs struct (first) and tbrt's ---------- */

struct vb_pd {
    struct ibv_pd ibv;
    tbrt_pd *t;
};

struct vb_mr {
    struct ibv_mr ibv;
    tbrt_mr *t;
    bool dontfork;              /* ibv_fork_init: the range was MADV_DONTFORK'd */
};

struct vb_ah {
    struct ibv_ah ibv;
    tbrt_ah *t;
};

/* A completion queue is always an ibv_cq_ex (an ibv_cq is its prefix), so
 * ibv_cq_ex_to_cq and the basic calls work on both kinds. */
struct vb_cq {
    struct ibv_cq_ex ibv;
    tbrt_cq *t;
    bool is_ex;
    uint64_t wc_flags;          /* ex: the fields the caller asked to read */
    struct ibv_wc cur;          /* ex: the completion start/next_poll took */
    uint64_t cur_ts;            /* ex: when the binding took it (CLOCK_MONOTONIC ns) */
    uint64_t cur_wall_ns;       /* ex: the same moment in CLOCK_REALTIME */
    uint32_t events_got;        /* ibv_get_cq_event deliveries (under ibv.mutex) */
    uint32_t async_got;         /* ibv_get_async_event CQ_ERR deliveries (under ibv.mutex) */
};

static inline struct vb_cq *vb_cq_of(struct ibv_cq *cq) { return (struct vb_cq *)cq; }

/* The ibv_wr_* API builds a chain of ordinary work requests between
 * wr_start and wr_complete, then posts it in one call. */
struct vb_wr_batch {
    struct ibv_send_wr *wr;     /* [cap] */
    struct ibv_sge *sge;        /* [cap * VB_WR_SGE] */
    unsigned char *inl;         /* inline data of the batch, copied at set time */
    size_t *inl_off;            /* [cap]: where each WR's inline data starts */
    size_t inl_used, inl_cap;
    unsigned n, cap;
    int err;                    /* first misuse in the batch (EINVAL, ENOMEM...) */
};
#define VB_WR_SGE 30            /* the soft device's max_sge */

struct vb_qp {
    struct ibv_qp_ex ibv;       /* an ibv_qp is its prefix */
    tbrt_qp *t;
    bool is_ex;                 /* made by create_qp_ex with send_ops_flags */
    uint64_t send_ops;          /* ex: the allowed ibv_wr_* operations */
    pthread_mutex_t wr_lock;    /* held from wr_start to wr_complete/abort */
    struct vb_wr_batch batch;
    /* ibv_query_qp answers from what modify_qp set (the device has no query) */
    struct ibv_qp_attr attr;
    int attr_mask;
    struct ibv_qp_init_attr init;
    uint32_t events_got;        /* ibv_get_async_event deliveries (under ibv.qp_base.mutex) */
};

static inline struct vb_qp *vb_qp_of(struct ibv_qp *qp) { return (struct vb_qp *)qp; }

/* A shared receive queue (srq.c). */
struct vb_srq {
    struct ibv_srq ibv;
    tbrt_srq *t;
    uint32_t events_got;        /* ibv_get_async_event deliveries (under ibv.mutex) */
};

static inline struct vb_srq *vb_srq_of(struct ibv_srq *s) { return (struct vb_srq *)s; }

/* ---- diag.c: TBRT_DEBUG, failure injection, the lifecycle trace ------------- */

extern bool vb_debug;           /* $TBRT_DEBUG set at load */
extern bool vb_fail_armed;      /* $TBRT_VERBS_FAIL set at load: data path checks it */

/* Print "tbrt verbs: call: EWHAT: why" to stderr when TBRT_DEBUG is set. */
void vb_say(const char *call, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A tbrt call of the binding failed with rc (-errno): say why (the
 * device's message) and return the errno. */
int vb_failed(const char *call, int rc, tbrt_dev *dev);
/* The feature is not there: say why, set errno EOPNOTSUPP, return it. */
int vb_unsupported(const char *call, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The errno $TBRT_VERBS_FAIL ("ibv_create_cq:ENOMEM,post_send:EIO") asks
 * this call to fail with (negative for "call:-EINVAL"), or 0. */
int vb_inject(const char *call);
#define VB_INJECT_NULL(call)                                                   \
    do {                                                                       \
        int e_ = vb_inject(call);                                              \
        if (e_) {                                                              \
            errno = e_ < 0 ? -e_ : e_;                                         \
            return NULL;                                                       \
        }                                                                      \
    } while (0)
#define VB_INJECT_INT(call)                                                    \
    do {                                                                       \
        int e_ = vb_inject(call);                                              \
        if (e_) {                                                              \
            errno = e_ < 0 ? -e_ : e_;                                         \
            return e_;                                                         \
        }                                                                      \
    } while (0)
/* vb_inject for the data path: nothing unless armed at load */
#define VB_DATA_INJECT(call) (__builtin_expect(vb_fail_armed, 0) ? vb_inject(call) : 0)
/* Record a lifecycle call ("ibv_create_qp") for tbrt_verbs_trace(). */
void vb_trace(const char *call);
enum vb_counter { VC_POST_SEND, VC_POST_RECV, VC_POLL_CQ, VC_REQ_NOTIFY, VC_GET_EVENT,
                  VC_ACK_EVENTS, VC_COUNT };
extern _Atomic unsigned long vb_counts[VC_COUNT];
static inline void vb_count(enum vb_counter c)
{
    atomic_fetch_add_explicit(&vb_counts[c], 1, memory_order_relaxed);
}

/* ---- across the files ------------------------------------------------------ */

/* device.c */
struct vb_device *vb_device_of(struct ibv_device *d);
/* query.c */
int vb_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr, size_t len);
int vb_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
                       struct ibv_device_attr_ex *attr, size_t attr_size);
int vb_query_rt_values(struct ibv_context *c, struct ibv_values_ex *values);
/* cq.c */
struct ibv_cq_ex *vb_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *attr);
/* cq_ex.c: the start_poll/next_poll table of an extended CQ */
void vb_cq_ex_init(struct vb_cq *cq, uint64_t wc_flags);
/* qp.c */
struct ibv_qp *vb_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr);
/* srq.c: the context's SRQ entries */
void vb_srq_init_ops(struct vb_ctx *c);
/* async.c: wait (bounded) until every async event of an object that
 * ibv_get_async_event handed out was acked (libibverbs' rule for destroy):
 * 0, or EBUSY said. */
int vb_wait_event_acks(pthread_mutex_t *m, pthread_cond_t *cond, const uint32_t *acked,
                       const uint32_t *got, const char *call);
/* post.c: the context's data path (ctx->ops) */
int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int vb_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int vb_req_notify_cq(struct ibv_cq *cq, int solicited_only);
/* Poll one completion with the context locked (cq_ex.c uses it); with
 * ts_ns, also when it was made (CLOCK_MONOTONIC ns). */
int vb_poll_one(struct vb_cq *cq, struct ibv_wc *wc, uint64_t *ts_ns);
/* wr.c: the ibv_wr_* table of an extended QP */
void vb_qp_ex_init(struct vb_qp *qp, uint64_t send_ops);
void vb_wr_batch_free(struct vb_wr_batch *b);
/* unsupported.c: fill the context's tables with what fails */
void vb_set_unsupported_ops(struct vb_ctx *c);

#endif
