/* ibverbs.h - the ibverbs device: libibverbs (or Apple's librdma) loaded at run
 * time, shared between the loader (ibverbs_lib.c) and the device
 * (ibverbs_dev.c).
 *
 * tbrt never links -libverbs: the library is dlopen'ed at first use, so tbrt
 * runs where rdma-core is absent (the device then lists one unusable entry
 * saying why). Every entry point is looked up by name. The calls verbs.h
 * defines static inline (ibv_post_send, ibv_post_recv, ibv_poll_cq,
 * ibv_req_notify_cq, the ibv_query_port wrapper) have no symbol: they go
 * through the provider's table in the context (ctx->ops.post_send, ...) or
 * the extended verbs_context, exactly as the inline versions do. */
#ifndef TBRT_IBVERBS_H
#define TBRT_IBVERBS_H

#include <stdbool.h>

#include "dev/dev.h"

/* The library, once loaded: its entry points, typed as in verbs.h
 * (rdma-core 44). `query_gid_ex` is optional (Apple's librdma lacks it). */
struct ib_lib {
    void *handle;               /* NULL: not loaded; why says so */
    char path[256];             /* what was dlopen'ed */
    int flavor;                 /* enum tbrt_flavor */
    char why[TBRT_WHY_MAX];

    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    /* the exported, pre-extension query: verbs.h's _compat_ibv_port_attr is
     * the leading part of struct ibv_port_attr */
    int (*query_port)(struct ibv_context *context, uint8_t port,
                      struct _compat_ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
    int (*query_gid_ex)(struct ibv_context *context, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*destroy_ah)(struct ibv_ah *ah);
};

/* The library, loaded on the first call (thread safe); never unloaded,
 * because providers it loaded may still be referenced. */
const struct ib_lib *ib_lib(void);

/* Why the library found no devices, for the unusable entry and for open:
 * "libibverbs found no RDMA devices: <cause>; <hint>". err is the errno
 * ibv_get_device_list left (0 when it returned an empty list). */
void ib_no_devices_why(const struct ib_lib *L, int err, char *out, size_t outlen);

/* The device kind's list(): one entry per device, or one unusable entry
 * named "ibverbs" with the reason there are none. */
int ib_list_devices(tbrt_devinfo *out, int max);
/* Open the device with this ibv_get_device_name(); ENODEV with a message
 * listing what exists when there is no such device. */
int ib_open_context(const char *name, struct ibv_context **ctx, char *err, size_t errlen);

/* ---- the device and its objects ------------------------------------------ */

/* Each tbrt object wraps one libibverbs object and sits on its device's
 * list, so close() can destroy what the caller left behind in the order
 * the hardware needs: QPs, AHs, MRs, CQs, PDs, then the context. */
struct ib_pd {
    tbrt_pd pd;
    struct ibv_pd *ibv;
    struct ib_pd *next;
};

struct ib_cq {
    tbrt_cq cq;                 /* cq.fd is the completion channel's fd */
    struct ibv_cq *ibv;
    struct ibv_comp_channel *channel; /* one per CQ, non-blocking */
    struct ib_cq *next;
};

struct ib_qp {
    tbrt_qp qp;
    struct ibv_qp *ibv;
    struct ib_qp *next;
};

struct ib_mr {
    tbrt_mr mr;
    struct ibv_mr *ibv;
    struct ib_mr *next;
};

struct ib_ah {
    tbrt_ah ah;
    struct ibv_ah *ibv;
    struct ib_ah *next;
};

struct ib_dev {
    tbrt_dev dev;
    struct ibv_context *ctx;
    const struct ib_lib *lib;
    bool gid_ex_unsupported;    /* _ibv_query_gid_ex said EOPNOTSUPP once */
    struct ib_pd *pds;
    struct ib_cq *cqs;
    struct ib_qp *qps;
    struct ib_mr *mrs;
    struct ib_ah *ahs;
    char vendor_err[64];
};

static inline struct ib_dev *ib_of(tbrt_dev *d) { return (struct ib_dev *)d; }

/* Unlink item from a singly linked list of its type. */
#define IB_UNLINK(head, item)                                                  \
    do {                                                                       \
        for (__typeof__(item) *pp_ = &(head); *pp_; pp_ = &(*pp_)->next)       \
            if (*pp_ == (item)) {                                              \
                *pp_ = (item)->next;                                           \
                break;                                                         \
            }                                                                  \
    } while (0)

/* ibverbs_queue.c: completion queues, queue pairs, the data path */
int ib_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out);
int ib_destroy_cq(tbrt_cq *cq);
int ib_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc);
int ib_req_notify_cq(tbrt_cq *cq);
int ib_ack_cq_events(tbrt_cq *cq);
int ib_create_qp(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out);
int ib_modify_qp(tbrt_qp *qp, struct ibv_qp_attr *attr, int mask);
int ib_destroy_qp(tbrt_qp *qp);
int ib_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int ib_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* errno of a failed libibverbs call that returned rc (the verbs return a
 * positive errno, -1 with errno, or a negative errno, depending on the call
 * and the provider). */
int ib_errno(int rc);

#endif
