/* queues.h - the driver's hardware queues (event, completion, send/receive
 * work queues) and the firmware commands that create and move them
 * (commands_qp.c); the data path over them is datapath.c. */
#ifndef MLX5_QUEUES_H
#define MLX5_QUEUES_H

#include <infiniband/verbs.h>
#include "mlx5/hca.h"

enum {
    EQE_BYTES = 64,
    CQE_BYTES = 64,
    WQEBB_BYTES = 64,            /* MLX5_SEND_WQE_BB */
    WQE_DS_BYTES = 16,           /* MLX5_SEND_WQE_DS */
    EQ_LOG_SIZE = 6,             /* one EQ per CQ: events, not completions */
    QP_MAX_SGE = 4,
    IB_ROCE_UDP_SPORT_MIN = 0xc000, /* rdma_flow_label_to_udp_sport (Linux ib_verbs.h) */
    IB_FLOW_LABEL_MASK = 0xfffff,
};

struct hw_eq {
    uint32_t eqn, log_size, ci;
    int vector, fd;
    struct mlx5_dma buf;
};

struct hw_cq {
    uint32_t cqn, log_size, ci, arm_sn;
    struct mlx5_dma buf, dbr;
    struct hw_eq eq;
};

struct hw_sq_slot {
    uint64_t wr_id;
    uint8_t opcode;              /* enum ibv_wc_opcode */
    uint8_t nbb;
};

struct hw_qp {
    uint32_t qpn, st;
    uint32_t log_rq_size, log_rq_stride, log_sq_size;
    struct mlx5_dma buf, dbr;
    uint8_t *rq, *sq;
    uint32_t sq_pi, sq_ci, rq_pi, rq_ci;
    struct hw_sq_slot *sq_slots;
    uint64_t *rq_wrid;
    uint32_t *rq_len;            /* bytes each posted receive can take */
    uint32_t max_send_sge, max_recv_sge;
};

/* commands_qp.c */
int mlx5_create_eq(struct mlx5_hca *h, struct hw_eq *eq);
int mlx5_destroy_eq(struct mlx5_hca *h, struct hw_eq *eq);
int mlx5_create_cq(struct mlx5_hca *h, struct hw_cq *cq, int cqe);
int mlx5_destroy_cq(struct mlx5_hca *h, struct hw_cq *cq);
/* attr sizes in, granted sizes out */
int mlx5_create_qp(struct mlx5_hca *h, struct hw_qp *qp, uint32_t pd, int qp_type,
                   struct ibv_qp_cap *cap, uint32_t cqn_snd, uint32_t cqn_rcv);
int mlx5_destroy_qp(struct mlx5_hca *h, struct hw_qp *qp);
int mlx5_rst2init_qp(struct mlx5_hca *h, struct hw_qp *qp, const struct ibv_qp_attr *a);
int mlx5_init2rtr_qp(struct mlx5_hca *h, struct hw_qp *qp, const struct ibv_qp_attr *a);
int mlx5_rtr2rts_qp(struct mlx5_hca *h, struct hw_qp *qp, const struct ibv_qp_attr *a);
int mlx5_2err_qp(struct mlx5_hca *h, struct hw_qp *qp);
int mlx5_2rst_qp(struct mlx5_hca *h, struct hw_qp *qp);
int mlx5_query_qp_state(struct mlx5_hca *h, uint32_t qpn, int *state);
uint16_t mlx5_udp_sport(uint32_t lqpn, uint32_t rqpn);
void hw_qp_free(struct mlx5_hca *h, struct hw_qp *qp);
void hw_cq_free(struct mlx5_hca *h, struct hw_cq *cq);

/* datapath.c */
int dp_post_send(struct mlx5_hca *h, struct hw_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad,
                 int sig_all, char *why, size_t whylen);
int dp_post_recv(struct hw_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad, char *why,
                 size_t whylen);
/* Poll one CQE: 1 with the raw CQE copied (once: it is checked and used
 * from the copy), 0 when empty. */
int dp_cq_next(struct hw_cq *cq, uint8_t cqe[CQE_BYTES]);
void dp_cq_update_ci(struct hw_cq *cq);
/* Turn a CQE of qp into a work completion. A CQE is device output, so it is
 * checked against what was posted: an opcode no CQE of ours has, a send
 * completion naming no WQE in flight, a receive completion with no receive
 * posted or more bytes than it holds give an error completion and -EPROTO,
 * with the reason in why; the queue's counters stay as they were. */
int dp_cqe_to_wc(struct hw_qp *qp, const uint8_t *cqe, struct ibv_wc *wc, char *why,
                 size_t whylen);
void dp_cq_arm(struct mlx5_hca *h, struct hw_cq *cq);
int dp_cq_ack(struct mlx5_hca *h, struct hw_cq *cq);

#endif
