/* dev.h - the device interface: one verbs-shaped table of operations.
 *
 * Every device (soft, ibverbs, mlx5) fills a struct tbrt_dev_ops; the engine
 * and the public verbs tier (verbs_api.c) call devices only through it. A
 * device knows nothing of the engine. Objects are the public structs of
 * tbrt.h, which a device embeds as the first member of its own.
 *
 * Errors: an operation returns 0 or a negative errno, and leaves the detail in
 * dev->why (through dev_fail) naming the device, the operation and the cause,
 * e.g. "soft0 (apple-uc): create_qp: only UC queue pairs (TN3205)". */
#ifndef TBRT_DEV_H
#define TBRT_DEV_H

#include <stdarg.h>
#include <stdbool.h>
#include "tbrt.h"

struct tbrt_dev_ops;

struct tbrt_dev {
    const struct tbrt_dev_ops *ops;
    char name[TBRT_NAME_MAX];
    char kind[16];
    char personality[16];
    int flavor;                  /* enum tbrt_flavor */
    /* an RDMA WRITE's bytes land in address order, its last 8-byte word
     * last (as a NIC's posted PCIe writes do): a reader that polls the end
     * of written data may trust the rest (engine/transport/eager.c) */
    bool ordered_writes;
    char why[TBRT_WHY_MAX];
};

struct tbrt_dev_ops {
    const char *kind;
    /* Append this kind's devices to out (at most max); return how many exist.
     * A kind that cannot work here lists one unusable entry with the reason. */
    int (*list)(tbrt_devinfo *out, int max);
    int (*open)(const char *name, const tbrt_dev_opts *opts, tbrt_dev **out,
                char *err, size_t errlen);
    void (*close)(tbrt_dev *dev);

    int (*query_device)(tbrt_dev *dev, struct ibv_device_attr *attr);
    int (*query_port)(tbrt_dev *dev, uint8_t port, struct ibv_port_attr *attr);
    /* 0 with the type, 1 when the provider has no GID types, -ENODATA when
     * the entry is empty. */
    int (*query_gid)(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *e);

    int (*alloc_pd)(tbrt_dev *dev, tbrt_pd **out);
    int (*dealloc_pd)(tbrt_pd *pd);

    int (*create_cq)(tbrt_dev *dev, int cqe, tbrt_cq **out);
    int (*destroy_cq)(tbrt_cq *cq);
    int (*poll_cq)(tbrt_cq *cq, int n, struct ibv_wc *wc);
    /* Optional: poll with the times the completions were made (ns). */
    int (*poll_cq_ts)(tbrt_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts_ns);
    int (*req_notify_cq)(tbrt_cq *cq);
    int (*ack_cq_events)(tbrt_cq *cq);

    int (*create_qp)(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out);
    int (*modify_qp)(tbrt_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(tbrt_qp *qp);

    int (*reg_mr)(tbrt_pd *pd, void *addr, size_t len, int access, tbrt_mr **out);
    /* Optional: a region with an iova other than its address. */
    int (*reg_mr_iova)(tbrt_pd *pd, void *addr, size_t len, uint64_t iova, int access,
                       tbrt_mr **out);
    int (*dereg_mr)(tbrt_mr *mr);

    int (*create_ah)(tbrt_pd *pd, struct ibv_ah_attr *attr, tbrt_ah **out);
    int (*destroy_ah)(tbrt_ah *ah);

    int (*post_send)(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
    int (*post_recv)(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

    /* Optional: shared receive queues. */
    int (*create_srq)(tbrt_pd *pd, struct ibv_srq_attr *attr, tbrt_srq **out);
    int (*modify_srq)(tbrt_srq *srq, struct ibv_srq_attr *attr, int mask);
    int (*query_srq)(tbrt_srq *srq, struct ibv_srq_attr *attr);
    int (*destroy_srq)(tbrt_srq *srq);
    int (*post_srq_recv)(tbrt_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

    /* Optional: asynchronous events (tbrt_dev_event_fd / tbrt_dev_event). */
    int (*event_fd)(tbrt_dev *dev);
    int (*get_event)(tbrt_dev *dev, tbrt_event *ev);

    /* Text for a completion's vendor_err; NULL or "" when none. */
    const char *(*vendor_err)(tbrt_dev *dev, uint32_t code);

    /* Optional: change a port's state at run time (a pulled cable), for
     * fault injection. NULL when the device cannot. */
    int (*set_port_state)(tbrt_dev *dev, uint8_t port, int state);
    /* Optional: fault injection, counters, a line on how it moves data. */
    int (*set_faults)(tbrt_dev *dev, const char *spec);
    int (*counters)(tbrt_dev *dev, uint32_t qpn, const char **names, uint64_t *values, int max);
    const char *(*describe)(tbrt_dev *dev);

    /* Optional (NULL: nothing known): a waiter on this QP runs on CPU cpu;
     * where is the connected peer's process? DEV_PEER_*. No syscall. */
    int (*qp_peer)(tbrt_qp *qp, int cpu);
};

/* qp_peer: not known; asleep on its completion queue; awake on another CPU;
 * awake on the caller's CPU (it cannot answer while the caller spins). */
enum { DEV_PEER_UNKNOWN, DEV_PEER_ASLEEP, DEV_PEER_AWAKE, DEV_PEER_HERE };

/* The device kinds, in selection order (dev/devices.c). */
extern const struct tbrt_dev_ops tbrt_soft_ops;
extern const struct tbrt_dev_ops tbrt_ibverbs_ops;
extern const struct tbrt_dev_ops tbrt_mlx5_ops;

/* Set dev->why from a format, prefixed by the device name; return -err. */
int dev_fail(tbrt_dev *dev, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Initialise the common part of a device. */
void dev_init(tbrt_dev *dev, const struct tbrt_dev_ops *ops, const char *name,
              const char *personality, int flavor);

/* Find a device kind by name ("soft", "ibverbs", "mlx5"); NULL if none. */
const struct tbrt_dev_ops *dev_kind(const char *kind);
/* The kind a device name belongs to ("soft0" -> soft, "mlx5:model0" -> mlx5,
 * anything else -> ibverbs). */
const struct tbrt_dev_ops *dev_kind_of(const char *name);

/* Names for verbs enums, for messages. */
const char *dev_qp_state_name(int state);
const char *dev_qp_type_name(int type);
const char *dev_port_state_name(int state);
const char *dev_gid_type_name(int type);
/* "IBV_WC_LOC_LEN_ERR (local length error)" style text of a completion
 * status (libibverbs is only loaded at run time, so its table is not ours). */
const char *dev_wc_status_name(int status);
/* "::ffff:127.0.0.1" style text of a GID. */
void dev_gid_str(const uint8_t gid[16], char *out, size_t outlen);

#endif
