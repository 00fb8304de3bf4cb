/* cm_qp.c - the QPs rdma-cm makes on an id (rdma_create_qp[_ex], with the
 * CQs it makes when the caller gives none; rdma_destroy_qp) and the
 * attributes it moves them through (rdma_init_qp_attr), from what the two
 * sides agreed in their REQ and REP. */
#include <errno.h>
#include <string.h>

#include "cm.h"

/* ---- QPs on ids --------------------------------------------------------------------------- */

static struct ibv_pd *default_pd(struct cm_id *id)
{
    if (!id->dev->pd)
        id->dev->pd = ibv_alloc_pd(id->dev->ctx);
    return id->dev->pd;
}

/* rdma-cm makes the CQs (each with its channel) when the caller gives none. */
static int make_cqs(struct cm_id *id, struct ibv_cq **send_cq, struct ibv_cq **recv_cq,
                    uint32_t send_wr, uint32_t recv_wr)
{
    if (*send_cq && *recv_cq)
        return 0;
    struct ibv_context *ctx = id->pub.verbs;
    if (!*recv_cq) {
        id->pub.recv_cq_channel = ibv_create_comp_channel(ctx);
        id->pub.recv_cq = id->pub.recv_cq_channel
                              ? ibv_create_cq(ctx, recv_wr ? (int)recv_wr : 1, &id->pub,
                                              id->pub.recv_cq_channel, 0) : NULL;
        if (!id->pub.recv_cq)
            return -errno;
        *recv_cq = id->pub.recv_cq;
    }
    if (!*send_cq) {
        id->pub.send_cq_channel = ibv_create_comp_channel(ctx);
        id->pub.send_cq = id->pub.send_cq_channel
                              ? ibv_create_cq(ctx, send_wr ? (int)send_wr : 1, &id->pub,
                                              id->pub.send_cq_channel, 0) : NULL;
        if (!id->pub.send_cq)
            return -errno;
        *send_cq = id->pub.send_cq;
    }
    id->own_cqs = true;
    return 0;
}

static void free_cqs(struct cm_id *id)
{
    if (!id->own_cqs)
        return;
    if (id->pub.send_cq)
        ibv_destroy_cq(id->pub.send_cq);
    if (id->pub.recv_cq)
        ibv_destroy_cq(id->pub.recv_cq);
    if (id->pub.send_cq_channel)
        ibv_destroy_comp_channel(id->pub.send_cq_channel);
    if (id->pub.recv_cq_channel)
        ibv_destroy_comp_channel(id->pub.recv_cq_channel);
    id->pub.send_cq = id->pub.recv_cq = NULL;
    id->pub.send_cq_channel = id->pub.recv_cq_channel = NULL;
    id->own_cqs = false;
}

/* A new QP goes to INIT at once (RC, UC), or all the way to RTS (UD), as
 * rdma-cm does. cm_lock held. */
static int init_new_qp(struct cm_id *id)
{
    struct ibv_qp_attr a;
    int mask;
    a.qp_state = IBV_QPS_INIT;
    if (rdma_init_qp_attr(&id->pub, &a, &mask) || ibv_modify_qp(id->pub.qp, &a, mask))
        return -(errno ? errno : EINVAL);
    if (id->pub.qp->qp_type != IBV_QPT_UD)
        return 0;
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE))
        return -errno;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = id->psn;
    return ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) ? -errno : 0;
}

static int create_qp(struct cm_id *id, struct ibv_qp_init_attr_ex *ax, const char *call)
{
    if (!id->pub.verbs || !id->dev)
        return cm_fail(call, EINVAL, "the id has no device yet (resolve or bind an address, "
                       "or use the id of a connect request)");
    if (!ax->pd && !(ax->pd = default_pd(id)))
        return cm_fail(call, errno, "no protection domain");
    int rc = make_cqs(id, &ax->send_cq, &ax->recv_cq, ax->cap.max_send_wr, ax->cap.max_recv_wr);
    if (rc) {
        free_cqs(id);
        return cm_fail(call, -rc, "cannot make the completion queues");
    }
    ax->comp_mask |= IBV_QP_INIT_ATTR_PD;
    struct ibv_qp *qp = ibv_create_qp_ex(id->pub.verbs, ax);
    if (!qp) {
        int e = errno;
        free_cqs(id);
        return cm_fail(call, e, "ibv_create_qp failed");
    }
    id->pub.qp = qp;
    id->pub.pd = ax->pd;
    id->pub.qp_type = qp->qp_type;
    rc = init_new_qp(id);
    if (rc) {
        ibv_destroy_qp(qp);
        id->pub.qp = NULL;
        free_cqs(id);
        return cm_fail(call, -rc, "the new QP would not go to INIT");
    }
    return 0;
}

int rdma_create_qp_ex(struct rdma_cm_id *rid, struct ibv_qp_init_attr_ex *attr)
{
    pthread_mutex_lock(&cm_lock);
    int rc = create_qp(cm_id_of(rid), attr, "rdma_create_qp_ex");
    pthread_mutex_unlock(&cm_lock);
    return rc;
}

int rdma_create_qp(struct rdma_cm_id *rid, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct ibv_qp_init_attr_ex ax = {.qp_context = attr->qp_context, .send_cq = attr->send_cq,
                                     .recv_cq = attr->recv_cq, .srq = attr->srq,
                                     .cap = attr->cap, .qp_type = attr->qp_type,
                                     .sq_sig_all = attr->sq_sig_all,
                                     .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
    pthread_mutex_lock(&cm_lock);
    int rc = create_qp(cm_id_of(rid), &ax, "rdma_create_qp");
    pthread_mutex_unlock(&cm_lock);
    if (rc == 0) {
        attr->cap = ax.cap;
        attr->send_cq = ax.send_cq;
        attr->recv_cq = ax.recv_cq;
    }
    return rc;
}

void rdma_destroy_qp(struct rdma_cm_id *rid)
{
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    if (id->pub.qp)
        ibv_destroy_qp(id->pub.qp);
    id->pub.qp = NULL;
    free_cqs(id);
    pthread_mutex_unlock(&cm_lock);
}

/* The attributes for the QP's next state, from what the two sides agreed
 * (the peer's REQ or REP). */
int rdma_init_qp_attr(struct rdma_cm_id *rid, struct ibv_qp_attr *a, int *mask)
{
    struct cm_id *id = cm_id_of(rid);
    enum ibv_qp_state want = a->qp_state;
    bool ud = id->pub.qp_type == IBV_QPT_UD;
    bool rc = id->pub.qp_type == IBV_QPT_RC;
    memset(a, 0, sizeof *a);
    a->qp_state = want;
    switch (want) {
    case IBV_QPS_INIT:
        a->pkey_index = 0;
        a->port_num = id->pub.port_num;
        *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if (ud) {
            a->qkey = RDMA_UDP_QKEY;
            *mask |= IBV_QP_QKEY;
        } else {
            a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
            *mask |= IBV_QP_ACCESS_FLAGS;
        }
        return 0;
    case IBV_QPS_RTR:
        if (ud) {
            *mask = IBV_QP_STATE;
            return 0;
        }
        if (!id->peer_known)
            return cm_fail("rdma_init_qp_attr", EINVAL, "RTR needs the peer's QP: connect "
                           "first (or answer a request)");
        struct ibv_port_attr pa;
        if (ibv_query_port(id->pub.verbs, id->pub.port_num, &pa))
            return cm_fail("rdma_init_qp_attr", errno, "port %u", id->pub.port_num);
        a->path_mtu = pa.active_mtu;
        a->dest_qp_num = id->peer.qpn;
        a->rq_psn = id->peer.psn;
        a->ah_attr.is_global = 1;
        memcpy(a->ah_attr.grh.dgid.raw, id->peer.gid, 16);
        a->ah_attr.grh.sgid_index = (uint8_t)id->gid_index;
        a->ah_attr.grh.hop_limit = CM_HOP_LIMIT;
        a->ah_attr.port_num = id->pub.port_num;
        *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (rc) {
            a->max_dest_rd_atomic = id->out_resp_res;
            a->min_rnr_timer = CM_MIN_RNR_TIMER;
            *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        return 0;
    case IBV_QPS_RTS:
        a->sq_psn = id->psn;
        *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        if (rc) {
            a->timeout = CM_ACK_TIMEOUT;
            /* the REQ's retry count serves both sides; each side's RNR
             * retries are what the other asked for (REQ, REP) */
            a->retry_cnt = id->active ? id->conn.retry_count : id->peer.retry_count;
            a->rnr_retry = id->peer.rnr_retry_count;
            a->max_rd_atomic = id->out_init_depth;
            *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_MAX_QP_RD_ATOMIC;
        }
        return 0;
    default:
        return cm_fail("rdma_init_qp_attr", EINVAL, "state %d: only INIT, RTR and RTS", want);
    }
}
