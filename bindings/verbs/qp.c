/* qp.c - queue pairs: creation (basic and extended, with or without a
 * shared receive queue), the state machine (the device enforces it),
 * ibv_query_qp, destruction (after the caller acked the QP's async events);
 * and the ECE calls, which the device does not have.
 *
 * ibv_query_qp: the device interface has no query, so the binding keeps
 * every attribute a successful ibv_modify_qp set and answers from them,
 * with the state and capacities the device reports now (an error
 * completion moves a QP to ERR behind the caller's back). */
#include <stdlib.h>
#include <string.h>

#include "verbs_lib.h"

/* ---- creation ------------------------------------------------------------------ */

static struct ibv_qp *qp_new(struct ibv_context *context, struct ibv_pd *pd,
                             struct ibv_qp_init_attr *attr, const char *call)
{
    struct vb_ctx *c = vb_ctx_of(context);
    if (attr->srq && attr->srq->context != context) {
        vb_say(call, EINVAL, "the shared receive queue is of another context");
        errno = EINVAL;
        return NULL;
    }
    if (!attr->send_cq || !attr->recv_cq) {
        vb_say(call, EINVAL, "send_cq and recv_cq are required");
        errno = EINVAL;
        return NULL;
    }
    struct vb_qp *q = calloc(1, sizeof *q);
    if (!q) {
        errno = ENOMEM;
        return NULL;
    }
    /* a QP that never sends or never receives may ask for 0; the device
     * needs 1, and granting more than asked is what the verbs allow */
    tbrt_qp_init init = {.send_cq = vb_cq_of(attr->send_cq)->t,
                         .recv_cq = vb_cq_of(attr->recv_cq)->t,
                         .cap = attr->cap, .qp_type = attr->qp_type,
                         .sq_sig_all = attr->sq_sig_all,
                         .srq = attr->srq ? vb_srq_of(attr->srq)->t : NULL};
    if (init.cap.max_send_wr == 0)
        init.cap.max_send_wr = 1;
    vb_lock(c);
    int rc = tbrt_qp_create(((struct vb_pd *)pd)->t, &init, &q->t);
    int err = rc ? vb_failed(call, rc, c->dev) : 0;
    vb_unlock(c);
    if (err) {
        free(q);
        errno = err;
        return NULL;
    }
    attr->cap = init.cap;
    q->t->user = q;
    struct ibv_qp *qp = &q->ibv.qp_base;
    qp->context = context;
    qp->qp_context = attr->qp_context;
    qp->pd = pd;
    qp->send_cq = attr->send_cq;
    qp->recv_cq = attr->recv_cq;
    qp->srq = attr->srq;
    qp->qp_num = q->t->qp_num;
    qp->handle = q->t->qp_num;
    qp->state = IBV_QPS_RESET;
    qp->qp_type = attr->qp_type;
    pthread_mutex_init(&qp->mutex, NULL);
    pthread_cond_init(&qp->cond, NULL);
    pthread_mutex_init(&q->wr_lock, NULL);
    q->init = *attr;
    q->attr.qp_state = IBV_QPS_RESET;
    return qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    VB_INJECT_NULL("ibv_create_qp");
    struct ibv_qp *qp = qp_new(pd->context, pd, attr, "ibv_create_qp");
    if (qp)
        vb_trace("ibv_create_qp");
    return qp;
}

/* What ibv_wr_* can post, by QP type (as ibv_post_send can) */
static uint64_t send_ops_of(enum ibv_qp_type t)
{
    uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    if (t == IBV_QPT_RC || t == IBV_QPT_UC)
        ops |= IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    if (t == IBV_QPT_RC)
        ops |= IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
               IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    return ops;
}

struct ibv_qp *vb_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *ax)
{
    VB_INJECT_NULL("ibv_create_qp_ex");
    const char *call = "ibv_create_qp_ex";
    uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if (ax->comp_mask & ~known) {
        vb_unsupported(call, "comp_mask 0x%x: XRC domains, TSO headers, RSS indirection and "
                       "hashing need device support", ax->comp_mask & ~known);
        return NULL;
    }
    if (!(ax->comp_mask & IBV_QP_INIT_ATTR_PD) || !ax->pd) {
        vb_say(call, EINVAL, "a protection domain is required (IBV_QP_INIT_ATTR_PD)");
        errno = EINVAL;
        return NULL;
    }
    if ((ax->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && ax->create_flags) {
        vb_unsupported(call, "create_flags 0x%x (multicast loopback blocking, FCS scatter, "
                       "VLAN stripping, source QPN, PCI padding)", ax->create_flags);
        return NULL;
    }
    uint64_t ops = 0;
    if (ax->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
        uint64_t can = send_ops_of(ax->qp_type);
        if (ax->send_ops_flags & ~can) {
            vb_unsupported(call, "send_ops_flags 0x%llx on a %s QP: memory windows, "
                           "invalidation, atomic writes and TSO need device support (RDMA READ "
                           "and atomics need RC)",
                           (unsigned long long)(ax->send_ops_flags & ~can),
                           ax->qp_type == IBV_QPT_RC ? "RC" : ax->qp_type == IBV_QPT_UC ? "UC"
                                                                                        : "UD");
            return NULL;
        }
        ops = ax->send_ops_flags;
    }
    struct ibv_qp_init_attr a = {.qp_context = ax->qp_context, .send_cq = ax->send_cq,
                                 .recv_cq = ax->recv_cq, .srq = ax->srq, .cap = ax->cap,
                                 .qp_type = ax->qp_type, .sq_sig_all = ax->sq_sig_all};
    struct ibv_qp *qp = qp_new(context, ax->pd, &a, call);
    if (!qp)
        return NULL;
    ax->cap = a.cap;
    if (ax->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
        vb_qp_ex_init(vb_qp_of(qp), ops);
    vb_trace("ibv_create_qp_ex");
    return qp;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    struct vb_qp *q = vb_qp_of(qp);
    return q->is_ex ? &q->ibv : NULL;
}

/* ---- modify and query --------------------------------------------------------------- */

/* Keep what a successful modify set, field by field of the mask. */
static void remember(struct vb_qp *q, const struct ibv_qp_attr *a, int mask)
{
    struct ibv_qp_attr *k = &q->attr;
#define KEEP(bit, field)                                                       \
    if (mask & (bit))                                                          \
    k->field = a->field
    KEEP(IBV_QP_STATE, qp_state);
    KEEP(IBV_QP_CUR_STATE, cur_qp_state);
    KEEP(IBV_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
    KEEP(IBV_QP_ACCESS_FLAGS, qp_access_flags);
    KEEP(IBV_QP_PKEY_INDEX, pkey_index);
    KEEP(IBV_QP_PORT, port_num);
    KEEP(IBV_QP_QKEY, qkey);
    KEEP(IBV_QP_AV, ah_attr);
    KEEP(IBV_QP_PATH_MTU, path_mtu);
    KEEP(IBV_QP_TIMEOUT, timeout);
    KEEP(IBV_QP_RETRY_CNT, retry_cnt);
    KEEP(IBV_QP_RNR_RETRY, rnr_retry);
    KEEP(IBV_QP_RQ_PSN, rq_psn);
    KEEP(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
    KEEP(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
    KEEP(IBV_QP_SQ_PSN, sq_psn);
    KEEP(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
    KEEP(IBV_QP_PATH_MIG_STATE, path_mig_state);
    KEEP(IBV_QP_DEST_QPN, dest_qp_num);
    KEEP(IBV_QP_RATE_LIMIT, rate_limit);
    if (mask & IBV_QP_ALT_PATH) {
        k->alt_ah_attr = a->alt_ah_attr;
        k->alt_pkey_index = a->alt_pkey_index;
        k->alt_port_num = a->alt_port_num;
        k->alt_timeout = a->alt_timeout;
    }
#undef KEEP
    q->attr_mask |= mask;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    VB_INJECT_INT("ibv_modify_qp");
    struct vb_qp *q = vb_qp_of(qp);
    struct vb_ctx *c = vb_ctx_of(qp->context);
    vb_lock(c);
    int rc = tbrt_qp_modify(q->t, attr, mask);
    int err = rc ? vb_failed("ibv_modify_qp", rc, c->dev) : 0;
    if (!err)
        remember(q, attr, mask);
    vb_unlock(c);
    if (err)
        return err;
    if (mask & IBV_QP_STATE)
        qp->state = attr->qp_state;
    return 0;
}

/* Every attribute, whatever the mask asks (as the kernel answers). */
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                 struct ibv_qp_init_attr *init_attr)
{
    VB_INJECT_INT("ibv_query_qp");
    struct vb_qp *q = vb_qp_of(qp);
    struct vb_ctx *c = vb_ctx_of(qp->context);
    vb_lock(c);
    *attr = q->attr;
    attr->qp_state = (enum ibv_qp_state)q->t->state;
    attr->cur_qp_state = attr->qp_state;
    attr->cap = q->t->cap;
    attr->sq_draining = 0;
    if (init_attr) {
        *init_attr = q->init;
        init_attr->cap = q->t->cap;
    }
    vb_unlock(c);
    if (mask & IBV_QP_STATE)
        qp->state = attr->qp_state;
    return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    VB_INJECT_INT("ibv_destroy_qp");
    struct vb_qp *q = vb_qp_of(qp);
    struct vb_ctx *c = vb_ctx_of(qp->context);
    int err = vb_wait_event_acks(&qp->mutex, &qp->cond, &qp->events_completed, &q->events_got,
                                 "ibv_destroy_qp");
    if (err)
        return err;
    vb_lock(c);
    int rc = tbrt_qp_destroy(q->t);
    err = rc ? vb_failed("ibv_destroy_qp", rc, c->dev) : 0;
    vb_unlock(c);
    if (err)
        return err;
    pthread_mutex_destroy(&qp->mutex);
    pthread_cond_destroy(&qp->cond);
    pthread_mutex_destroy(&q->wr_lock);
    vb_wr_batch_free(&q->batch);
    vb_trace("ibv_destroy_qp");
    free(q);
    return 0;
}

/* The soft device writes a message with memcpy and completes it after: the
 * order in which its bytes land is not promised. */
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
    (void)qp, (void)op, (void)flags;
    return 0;
}

/* ---- what the device does not have --------------------------------------------------- */

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    (void)qp, (void)ece;
    return vb_unsupported("ibv_set_ece", "enhanced connection establishment is vendor "
                          "specific; the soft device has no vendor options");
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    (void)qp, (void)ece;
    return vb_unsupported("ibv_query_ece", "enhanced connection establishment is vendor "
                          "specific; the soft device has no vendor options");
}
