/* soft.h - the software RDMA device's objects: internal structures shared
 * by its files (core/soft/soft_*.c).
 *
 * The soft device runs in user space with no kernel module. These files
 * are the device as verbs see it: the personalities and their rules, PDs,
 * CQs, QPs (the state machine), MRs, AHs, GIDs and ports. Moving messages
 * is a wire's job (wire/wire.h says who owns what; wire/shm/ is the
 * shared-memory wire between processes of one host), and fault injection
 * sits between the two (wire/faults.h).
 *
 * The objects keep the truth of their work in process memory: the records
 * of what was posted (wr_id, length, frames) and the queue indices. A wire
 * reports finished work as results by index; the objects check a result
 * against the record and make the completion, in a CQ ring that only they
 * write. So a completion names only work that was posted, with a length no
 * longer than what was posted, whatever the wire (or a peer behind it) says.
 *
 * Shared receive queues (soft_srq.c) keep their records the same way; a
 * result of theirs names the QP that received it, checked against the QPs
 * made with that SRQ. Asynchronous events (soft_event.c) are queued here
 * from what the wire's progress reports and what the objects see
 * themselves (ports, overruns, COMM_EST, the last WQE of an SRQ's QP).
 *
 * Threading: one device context is used by one thread at a time (the
 * binding locks per context). Across contexts the objects share nothing; a
 * wire's process-wide parts have their own locks (shm_mem.c's backings, the
 * alarm thread's list). */
#ifndef TBRT_SOFT_H
#define TBRT_SOFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dev/dev.h"
#include "soft/wire/faults.h"
#include "soft/wire/wire.h"

/* ---- personalities ------------------------------------------------------ */

/* TN3205: at most 4095 frames (SOFT_FRAME, wire.h) per queue, so 4095 x 4 KiB
 * per message. */
#define SOFT_APPLE_MAX_FRAMES 4095u
#define SOFT_APPLE_MAX_MSG (SOFT_APPLE_MAX_FRAMES * SOFT_FRAME) /* 16,773,120 */
#define SOFT_APPLE_MAX_QP 10
#define SOFT_APPLE_MAX_MR (4ull << 30)
#define SOFT_MAX_PORTS 2
#define SOFT_MAX_CQ 1024
#define SOFT_MAX_CQE 65536
#define SOFT_MAX_QP 1022            /* QPNs of the fabric less the two special ones */

struct soft_personality {
    const char *name;
    int flavor;
    unsigned qp_types;          /* bit (1 << IBV_QPT_x) per allowed type */
    int max_qp;                 /* per device context */
    bool depth_in_frames;       /* max_send_wr/max_recv_wr count 4 KiB frames */
    uint32_t max_qp_wr;
    uint64_t max_msg;
    uint64_t max_mr;
    bool mr_needs_remote_access; /* LOCAL_WRITE alone fails */
    bool recv_needs_rts;        /* post_recv before RTS fails */
    bool frames_must_match;     /* SEND and RECV must cover the same frames */
    bool credit_flow;           /* a SEND waits for a posted RECV (no RNR) */
    bool err_breaks_dereg;      /* QP moved to ERR => MR dereg fails */
    bool gid_types;             /* the provider reports GID types */
    int gid_tbl_len;
    int nports;
    const char *ports;          /* default port states */
    enum ibv_mtu mtu;
};

/* soft_personality.c */
const struct soft_personality *soft_personality_find(const char *name);
const char *soft_personality_names(void);

/* ---- objects -------------------------------------------------------------- */

/* One GID table entry of a port. */
struct soft_gid {
    uint8_t raw[16];
    int type;                   /* enum ibv_gid_type */
};
#define SOFT_GIDS 64

/* The asynchronous events not yet taken: a bounded queue (the oldest goes
 * when it is full), an eventfd for those the objects queue, and an epoll fd
 * over it and the wire's event fd: the one fd callers wait on. */
#define SOFT_EVENTS 256
struct soft_event {
    int type;                   /* enum ibv_event_type */
    void *obj;                  /* struct soft_qp / soft_cq / soft_srq, or NULL */
    int port;
};
struct soft_events {
    struct soft_event q[SOFT_EVENTS];
    uint32_t head, tail;
    uint64_t lost;
    int epfd, efd;
    bool efd_set;
    uint8_t port_seen[SOFT_MAX_PORTS]; /* the states last reported */
};

/* A region of ours a scatter-to-CQE message was placed into (soft_reap.c):
 * kept while mr_gen is gen. */
struct soft_placed {
    uint64_t gen;
    uint32_t lkey;
    uint64_t iova, len;
    char *base;                 /* where iova is in this process; NULL: nothing kept */
};

struct soft_dev {
    tbrt_dev dev;
    const struct soft_personality *p;
    int index;                  /* soft<index> */
    uint8_t port_state[SOFT_MAX_PORTS]; /* enum ibv_port_state, as configured */
    struct soft_faults faults;
    bool faults_open;
    const struct soft_wire_ops *wops;
    struct soft_wire *wire;
    /* objects */
    int nqp;
    struct soft_qp *qps;        /* list, for progress and flushes */
    struct soft_cq *cqs;
    struct soft_mr *mrs;
    uint64_t mr_gen;            /* bumped by every registration and deregistration */
    struct soft_placed placed;
    struct soft_srq *srqs;
    int nsrq;
    struct soft_events ev;
    uint32_t next_handle;
    bool qp_erred;              /* apple quirk: a QP was moved to ERR */
    struct soft_gid gids[SOFT_MAX_PORTS][SOFT_GIDS];
    int ngids[SOFT_MAX_PORTS];
    /* the latest bad value met, for soft_vendor_err (written by the wire) */
    char corrupt_why[TBRT_WHY_MAX];
    char describe[256];         /* tbrt_dev_describe: the wire and its settings */
    /* bound to a network interface (TBRT_SOFT_NETDEVS, soft_netdev.c) */
    char netdev[16];
    uint8_t link_state;
    uint64_t link_checked;
};

struct soft_pd {
    tbrt_pd pd;
};

/* A completion queue: a ring in process memory, filled by its owner from
 * the results of its queue pairs (soft_reap.c). */
struct soft_cq {
    tbrt_cq cq;
    uint32_t cap;               /* power of two */
    uint64_t head, tail;        /* ring[head..tail) are waiting */
    struct ibv_wc *ring;
    uint64_t *stamps;           /* soft_stamp() of each when it was made (finished) */
    uint64_t last_ns;           /* the last timestamp polled (they never go back) */
    bool overrun;
    struct soft_wire_cq *wcq;
    struct soft_cq *next;
};

/* What only the owner knows of a posted work request. */
struct soft_wr {
    uint64_t wr_id;
    uint64_t total;
    uint32_t frames;
    uint8_t opcode;             /* enum ibv_wc_opcode of a send's completion */
    uint8_t signaled;
};

/* A posted receive's record: the work request and its scatter list, where
 * the bytes of a scatter-to-CQE result go (soft_reap.c). */
struct soft_rwr {
    struct soft_wr wr;
    uint32_t num_sge;
    struct ibv_sge sge[SOFT_MAX_SGE];
};

struct soft_qp {
    tbrt_qp qp;
    struct soft_dev *sd;
    struct soft_qp *next;
    struct soft_wire_qp *wq;
    /* attributes (the wire gets a copy after each change) */
    struct soft_wire_qp_attr a;
    uint8_t sgid_index;
    uint32_t sq_psn, rq_psn;
    int access;
    bool sq_sig_all;
    /* queues: the records by slot (rings of soft_ring_size(cap), hence the
     * masks) and the indices; at most cap outstanding */
    uint32_t rq_cap, sq_cap;
    uint32_t rq_mask, sq_mask;
    struct soft_rwr *rq_wr;
    struct soft_wr *sq_wr;
    uint64_t rq_prod, rq_done;  /* posted; made into completions */
    uint64_t sq_tail, sq_done;
    uint32_t rq_frames, sq_frames; /* outstanding (apple depth accounting) */
    /* the next result of each queue, once the wire gave it */
    struct soft_result rres, sres;
    bool have_rres, have_sres;
    /* a bad value broke it: the first flushed work request says so */
    bool broken, broken_told;
    struct soft_srq *srq;       /* receives come from it (NULL: rq_*) */
    bool comm_est_told;         /* IBV_EVENT_COMM_EST reported */
};

/* A shared receive queue: the records of what was posted, by slot, and the
 * indices, as a QP's receive queue (soft_srq.c). */
struct soft_srq {
    tbrt_srq srq;
    struct soft_dev *sd;
    struct soft_srq *next;
    struct soft_wire_srq *ws;
    uint32_t cap;               /* slots (a power of two, >= max_wr) */
    uint32_t max_wr, max_sge;
    uint32_t limit;             /* armed limit, 0: none */
    struct soft_rwr *wr;        /* with the scatter lists (scatter-to-CQE places into them) */
    uint64_t prod, done;
    struct soft_result res;
    bool have_res;
    int nqp;                    /* QPs made with it */
    bool broken;                /* a bad result: nothing more is reaped */
};

struct soft_mr {
    tbrt_mr mr;
    struct soft_mr *next;
};

struct soft_ah {
    tbrt_ah ah;
};

/* ---- functions across the files ----------------------------------------- */

static inline struct soft_dev *soft_of(tbrt_dev *d) { return (struct soft_dev *)d; }

/* soft_dev.c */
int soft_port_state(struct soft_dev *sd, int port);
int soft_set_port_state(tbrt_dev *dev, uint8_t port, int state);

/* soft_event.c: asynchronous events */
int soft_events_open(struct soft_dev *sd);
void soft_events_close(struct soft_dev *sd);
/* Queue one (obj: the QP, CQ or SRQ it is about). */
void soft_event_push(struct soft_dev *sd, int type, void *obj, int port);
/* An object goes: its events not yet taken go with it. */
void soft_event_forget(struct soft_dev *sd, void *obj);
int soft_event_fd(tbrt_dev *dev);
int soft_get_event(tbrt_dev *dev, tbrt_event *ev);

/* soft_srq.c */
int soft_create_srq(tbrt_pd *pd, struct ibv_srq_attr *attr, tbrt_srq **out);
int soft_modify_srq(tbrt_srq *srq, struct ibv_srq_attr *attr, int mask);
int soft_query_srq(tbrt_srq *srq, struct ibv_srq_attr *attr);
int soft_destroy_srq(tbrt_srq *srq);
int soft_post_srq_recv(tbrt_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* The SRQ's finished receives into their QPs' CQs, oldest first. */
void soft_reap_srq(struct soft_srq *s);
/* Its next result, asked of the wire once: 1 there is one (in s->res), 0
 * not yet, -1 it broke. Taking it: soft_srq_take. */
int soft_srq_next(struct soft_srq *s);
bool soft_srq_take(struct soft_srq *s);
/* The wire's SRQ_LIMIT event for s. */
void soft_srq_limit_reached(struct soft_srq *s);

/* soft_mr.c */
int soft_reg_mr(tbrt_pd *pd, void *addr, size_t len, int access, tbrt_mr **out);
int soft_reg_mr_iova(tbrt_pd *pd, void *addr, size_t len, uint64_t iova, int access,
                     tbrt_mr **out);
int soft_dereg_mr(tbrt_mr *mr);

/* soft_cq.c */
int soft_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out);
int soft_destroy_cq(tbrt_cq *cq);
int soft_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc);
int soft_poll_cq_ts(tbrt_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts_ns);
int soft_req_notify_cq(tbrt_cq *cq);
int soft_ack_cq_events(tbrt_cq *cq);
/* Add a completion to our CQ, made at `stamp` (soft_stamp()); false (and
 * the CQ overruns: IBV_EVENT_CQ_ERR) when it is full. */
bool soft_cq_add(struct soft_cq *c, const struct ibv_wc *wc, uint64_t stamp);
/* We made completions of this CQ ourselves (not from a wire's result): an
 * armed CQ's fd turns readable, as for the wire's. */
void soft_cq_wake(struct soft_cq *c);

/* soft_qp.c */
int soft_create_qp(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out);
int soft_modify_qp(tbrt_qp *qp, struct ibv_qp_attr *attr, int mask);
int soft_destroy_qp(tbrt_qp *qp);
/* Move to ERR: the wire stops it, and what was outstanding completes,
 * flushed (IBV_WC_WR_FLUSH_ERR) unless it had finished. */
void soft_qp_to_err(struct soft_qp *q);
/* A bad value (the text is in sd->corrupt_why, prefixed with the QP by
 * fmt): move the QP to ERR; unless `reported` (the caller completed a work
 * request with SOFT_VERR_CORRUPT already), its first flushed work request
 * completes with IBV_WC_LOC_QP_OP_ERR carrying the text. */
void soft_qp_break(struct soft_qp *q, bool reported);
/* dev.h's qp_peer: the wire's word on the connected peer (SOFT_PEER_* are
 * DEV_PEER_*). */
int soft_qp_peer(tbrt_qp *qp, int cpu);

/* soft_post.c */
int soft_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int soft_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* The "hardware": the wire's turn, then what it reported (QPs to ERR). */
void soft_progress(struct soft_dev *sd);
/* The same, unless the wire says it is quiet (nothing for the turn). */
void soft_progress_if_needed(struct soft_dev *sd);

/* soft_reap.c: finished work into completions */
/* Why a receive's result cannot be, or NULL (also for SRQ results). */
const char *soft_recv_result_bad(const struct soft_result *r, const struct soft_wr *w, char *buf,
                                 size_t len);
/* Place a scatter-to-CQE result's message into the receive's recorded
 * scatter list: 0, or the vendor_err of a key that does not cover it. */
uint32_t soft_place_data(struct soft_dev *sd, const struct soft_rwr *rw,
                         const struct soft_result *r);
/* A receive's wc_flags from its result's, and wc.sl the RoCE packet type
 * of a UD receive with a GRH (SOFT_WC_GRH_IPV4), as mlx5 reports it. */
void soft_wc_grh(struct ibv_wc *wc, uint16_t result_flags);
/* A receive completion of q was made: COMM_EST if it came in RTR. */
void soft_recv_seen(struct soft_qp *q);
/* The finished work of the queues that feed this CQ, oldest first. */
void soft_reap_cq(struct soft_dev *sd, struct soft_cq *c);
/* All of a QP's finished receives / sends (its own queue order). */
void soft_reap_recv(struct soft_qp *q);
void soft_reap_send(struct soft_qp *q);

/* soft_netdev.c */
bool soft_netdev_name(int index, char *out, size_t len);
int soft_netdev_count(void);
const char *soft_netdev_why(const char *name, char *buf, size_t len);
int soft_netdev_port_state(struct soft_dev *sd, int port);

/* soft_query.c: the device's queries (tbrt_soft_ops) */
int soft_query_device(tbrt_dev *dev, struct ibv_device_attr *a);
int soft_query_port(tbrt_dev *dev, uint8_t port, struct ibv_port_attr *a);
int soft_counters(tbrt_dev *dev, uint32_t qpn, const char **names, uint64_t *values, int max);
const char *soft_describe(tbrt_dev *dev);
const char *soft_vendor_err(tbrt_dev *dev, uint32_t code);

/* soft_gid.c */
void soft_gid_build(struct soft_dev *sd);
int soft_query_gid(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *e);
/* Is this GID one of ours (any port, any index)? */
bool soft_gid_is_local(struct soft_dev *sd, const uint8_t gid[16]);

#endif
