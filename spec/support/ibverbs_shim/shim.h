/* shim.h - libibverbs-soft: a test-only stand-in for libibverbs, built on
 * tbrt's public verbs tier over soft devices, so the ibverbs device
 * (core/ibverbs) runs all its code in CI without RDMA hardware:
 *
 *   tbrt link -> ibverbs device -> dlopen(this shim) -> tbrt_qp_create... ->
 *   soft device -> shared-memory wire
 *
 * Two builds of the same sources (core/ibverbs/part.mk):
 *   build/test/libibverbs-soft.so.1  Linux-like: symbol versions as in
 *       rdma-core 44, _ibv_query_gid_ex, an extended verbs_context;
 *       soft personality linux-rc
 *   build/test/librdma-soft.so      Apple-like (SHIM_APPLE): no symbol
 *       versions, no _ibv_query_gid_ex (GIDs have no type); soft
 *       personality apple-uc. Its name starts with "librdma", which gives
 *       its devices the Apple flavor.
 *
 * Environment (read on every call that needs it):
 *   TBRT_SHIM_DEVICES      how many devices: softib0..softib<N-1> (1); each
 *                          is the soft device of the same number
 *   TBRT_SHIM_PERSONALITY  the soft personality under them
 *   TBRT_SHIM_COMPAT_CONTEXT=1  a plain ibv_context (no verbs_context), so
 *                          ports are queried through the exported call
 *   TBRT_SHIM_FAIL         "ibv_create_cq:ENOMEM,ibv_modify_qp:-EINVAL": make
 *                          those calls fail with that errno (negative: as
 *                          -errno); data path ops are named post_send,
 *                          post_recv, poll_cq, req_notify_cq; comp_channel_fd
 *                          gives a channel with a bad fd
 *   TBRT_SHIM_DEBUG=1      print tbrt's reason for every failure to stderr
 *
 * For the specs it also exports shim_trace() (the object lifecycle calls in
 * order, "ibv_open_device,ibv_alloc_pd,...") and shim_counts() (how often
 * the data path calls ran). Single-threaded, like the soft device. */
#ifndef TBRT_SHIM_H
#define TBRT_SHIM_H

#include <errno.h>
#include <stdbool.h>

#include "tbrt.h"

#ifdef SHIM_APPLE
#define SHIM_DEFAULT_PERSONALITY "apple-uc"
#else
#define SHIM_DEFAULT_PERSONALITY "linux-rc"
#endif

#define SHIM_MAX_DEVICES 8

struct shim_ctx {
    tbrt_dev *dev;
    /* must be last: the ibv_context is the verbs_context's last member */
    struct verbs_context v;
};

struct shim_pd {
    struct ibv_pd pd;
    tbrt_pd *t;
};

struct shim_cq {
    struct ibv_cq cq;
    tbrt_cq *t;
};

struct shim_qp {
    struct ibv_qp qp;
    tbrt_qp *t;
};

struct shim_mr {
    struct ibv_mr mr;
    tbrt_mr *t;
};

struct shim_ah {
    struct ibv_ah ah;
    tbrt_ah *t;
};

static inline struct shim_ctx *shim_ctx_of(struct ibv_context *c)
{
    return (struct shim_ctx *)((char *)c - offsetof(struct shim_ctx, v.context));
}

/* shim_device.c */
/* Record a lifecycle call for shim_trace(). */
void shim_log(const char *call);
/* Count a data path call for shim_counts(). */
enum shim_counter { SC_POST_SEND, SC_POST_RECV, SC_POLL_CQ, SC_REQ_NOTIFY, SC_GET_EVENT,
                    SC_ACK_EVENTS, SC_COUNT };
void shim_count(enum shim_counter c);
/* The errno TBRT_SHIM_FAIL asks this call to fail with, or 0; negative
 * for "call:-EINVAL" (a provider that returns -errno). */
int shim_should_fail(const char *call);
/* Fail the call when TBRT_SHIM_FAIL names it: a creator returns NULL with
 * errno, a call that returns an errno value returns it. */
#define SHIM_FAIL_NULL(call)                                                   \
    do {                                                                       \
        int e_ = shim_should_fail(call);                                       \
        if (e_) {                                                              \
            errno = e_ < 0 ? -e_ : e_;                                         \
            return NULL;                                                       \
        }                                                                      \
    } while (0)
#define SHIM_FAIL_INT(call)                                                    \
    do {                                                                       \
        int e_ = shim_should_fail(call);                                       \
        if (e_) {                                                              \
            errno = e_ < 0 ? -e_ : e_;                                         \
            return e_;                                                         \
        }                                                                      \
    } while (0)
/* A tbrt call failed with rc (-errno): report (TBRT_SHIM_DEBUG) and
 * return the errno. */
int shim_failed(const char *call, int rc, tbrt_dev *dev);

/* shim_objects.c: the context's data path operations */
int shim_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int shim_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int shim_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int shim_req_notify_cq(struct ibv_cq *cq, int solicited_only);

#endif
