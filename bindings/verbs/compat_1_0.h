/* compat_1_0.h - the objects of libibverbs's first ABI (symbol version
 * IBVERBS_1.0, 2006), as programs built against it see them. Each 1.0
 * object is a small struct of its own that points at today's object
 * (real_*); 1.0 contexts carry their own table of data-path operations,
 * whose work requests have `next` first and 1.0 address handles in them.
 * compat.c serves these; the spec's ABI check (spec/support/verbs_abi)
 * drives them through dlvsym. */
#ifndef TBRT_COMPAT_1_0_H
#define TBRT_COMPAT_1_0_H

#include <pthread.h>
#include <stdint.h>

#include <infiniband/verbs.h>

struct ibv_context_1_0;

struct ibv_pd_1_0 {
    struct ibv_context_1_0 *context;
    uint32_t handle;
    struct ibv_pd *real_pd;
};

struct ibv_mr_1_0 {
    struct ibv_context_1_0 *context;
    struct ibv_pd_1_0 *pd;
    uint32_t handle;
    uint32_t lkey;
    uint32_t rkey;
    struct ibv_mr *real_mr;
};

struct ibv_srq_1_0 {
    struct ibv_context_1_0 *context;
    void *srq_context;
    struct ibv_pd_1_0 *pd;
    uint32_t handle;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t events_completed;
    struct ibv_srq *real_srq;
};

struct ibv_cq_1_0 {
    struct ibv_context_1_0 *context;
    void *cq_context;
    uint32_t handle;
    int cqe;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t comp_events_completed;
    uint32_t async_events_completed;
    struct ibv_cq *real_cq;
};

struct ibv_qp_init_attr_1_0 {
    void *qp_context;
    struct ibv_cq_1_0 *send_cq;
    struct ibv_cq_1_0 *recv_cq;
    struct ibv_srq_1_0 *srq;
    struct ibv_qp_cap cap;
    enum ibv_qp_type qp_type;
    int sq_sig_all;
};

struct ibv_ah_1_0 {
    struct ibv_context_1_0 *context;
    struct ibv_pd_1_0 *pd;
    uint32_t handle;
    struct ibv_ah *real_ah;
};

struct ibv_send_wr_1_0 {
    struct ibv_send_wr_1_0 *next;
    uint64_t wr_id;
    struct ibv_sge *sg_list;
    int num_sge;
    enum ibv_wr_opcode opcode;
    int send_flags;
    __be32 imm_data;
    union {
        struct {
            uint64_t remote_addr;
            uint32_t rkey;
        } rdma;
        struct {
            uint64_t remote_addr;
            uint64_t compare_add;
            uint64_t swap;
            uint32_t rkey;
        } atomic;
        struct {
            struct ibv_ah_1_0 *ah;
            uint32_t remote_qpn;
            uint32_t remote_qkey;
        } ud;
    } wr;
};

struct ibv_recv_wr_1_0 {
    struct ibv_recv_wr_1_0 *next;
    uint64_t wr_id;
    struct ibv_sge *sg_list;
    int num_sge;
};

struct ibv_qp_1_0 {
    struct ibv_context_1_0 *context;
    void *qp_context;
    struct ibv_pd_1_0 *pd;
    struct ibv_cq_1_0 *send_cq;
    struct ibv_cq_1_0 *recv_cq;
    struct ibv_srq_1_0 *srq;
    uint32_t handle;
    uint32_t qp_num;
    enum ibv_qp_state state;
    enum ibv_qp_type qp_type;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t events_completed;
    struct ibv_qp *real_qp;
};

struct ibv_device_1_0 {
    void *obsolete_sysfs_dev;
    void *obsolete_sysfs_ibdev;
    struct ibv_device *real_device;
    struct _ibv_device_ops _ops;
};

/* The 1.0 table: programs of that time inlined the data path through it. */
struct ibv_context_ops_1_0 {
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*poll_cq)(struct ibv_cq_1_0 *cq, int num_entries, struct ibv_wc *wc);
    int (*req_notify_cq)(struct ibv_cq_1_0 *cq, int solicited_only);
    void (*cq_event)(struct ibv_cq *cq);
    int (*resize_cq)(struct ibv_cq *cq, int cqe);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_srq *(*create_srq)(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
    int (*modify_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
    int (*query_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr);
    int (*destroy_srq)(struct ibv_srq *srq);
    int (*post_srq_recv)(struct ibv_srq_1_0 *srq, struct ibv_recv_wr_1_0 *wr,
                         struct ibv_recv_wr_1_0 **bad);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                    struct ibv_qp_init_attr *init_attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*post_send)(struct ibv_qp_1_0 *qp, struct ibv_send_wr_1_0 *wr,
                     struct ibv_send_wr_1_0 **bad);
    int (*post_recv)(struct ibv_qp_1_0 *qp, struct ibv_recv_wr_1_0 *wr,
                     struct ibv_recv_wr_1_0 **bad);
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*destroy_ah)(struct ibv_ah *ah);
    int (*attach_mcast)(struct ibv_qp *qp, union ibv_gid *gid, uint16_t lid);
    int (*detach_mcast)(struct ibv_qp *qp, union ibv_gid *gid, uint16_t lid);
};

struct ibv_context_1_0 {
    struct ibv_device_1_0 *device;
    struct ibv_context_ops_1_0 ops;
    int cmd_fd;
    int async_fd;
    int num_comp_vectors;
    struct ibv_context *real_context;
};

#endif
