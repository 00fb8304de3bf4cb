/* compat.c - libibverbs's first ABI (IBVERBS_1.0): the 33 functions whose
 * 1.0 versions libibverbs still exports beside the current ones, for
 * programs linked in 2006. Each takes and gives the 1.0 objects of
 * compat_1_0.h, which wrap today's objects; each 1.0 context has its own
 * data-path table, whose work requests are translated (their `next` comes
 * first, UD requests carry 1.0 address handles). Today's objects point back
 * at their 1.0 wrappers through their user context fields (cq_context,
 * qp_context, srq_context), so events and completions find them.
 *
 * Bound to name@IBVERBS_1.0 with .symver; the Apple flavor has no 1.0 ABI. */
#ifndef TBRT_VERBS_APPLE
#include <stdlib.h>
#include <string.h>

#include "compat_1_0.h"
#include "verbs_lib.h"

#define V1_0(fn) __asm__(".symver " #fn "_1_0, " #fn "@IBVERBS_1.0")

/* ---- devices and contexts ---------------------------------------------------------- */

V1_0(ibv_get_device_list);
struct ibv_device_1_0 **ibv_get_device_list_1_0(int *num)
{
    int n = 0;
    struct ibv_device **real = ibv_get_device_list(&n);
    if (!real)
        return NULL;
    /* [0] keeps today's list, for the free */
    struct ibv_device_1_0 **l = calloc((size_t)n + 2, sizeof *l);
    if (!l)
        goto fail;
    l[0] = (void *)real;
    for (int i = 0; i < n; i++) {
        l[i + 1] = calloc(1, sizeof **l);
        if (!l[i + 1])
            goto fail;
        l[i + 1]->real_device = real[i];
    }
    if (num)
        *num = n;
    return l + 1;
fail:
    for (int i = 0; l && i < n; i++)
        free(l[i + 1]);
    free(l);
    ibv_free_device_list(real);
    errno = ENOMEM;
    return NULL;
}

V1_0(ibv_free_device_list);
void ibv_free_device_list_1_0(struct ibv_device_1_0 **list)
{
    if (!list)
        return;
    for (struct ibv_device_1_0 **d = list; *d; d++)
        free(*d);
    ibv_free_device_list((struct ibv_device **)list[-1]);
    free(list - 1);
}

V1_0(ibv_get_device_name);
const char *ibv_get_device_name_1_0(struct ibv_device_1_0 *device)
{
    return ibv_get_device_name(device->real_device);
}

V1_0(ibv_get_device_guid);
__be64 ibv_get_device_guid_1_0(struct ibv_device_1_0 *device)
{
    return ibv_get_device_guid(device->real_device);
}

static int poll_cq_1_0(struct ibv_cq_1_0 *cq, int n, struct ibv_wc *wc);
static int req_notify_cq_1_0(struct ibv_cq_1_0 *cq, int solicited_only);
static int post_send_1_0(struct ibv_qp_1_0 *qp, struct ibv_send_wr_1_0 *wr,
                         struct ibv_send_wr_1_0 **bad);
static int post_recv_1_0(struct ibv_qp_1_0 *qp, struct ibv_recv_wr_1_0 *wr,
                         struct ibv_recv_wr_1_0 **bad);
static int post_srq_recv_1_0(struct ibv_srq_1_0 *srq, struct ibv_recv_wr_1_0 *wr,
                             struct ibv_recv_wr_1_0 **bad);

V1_0(ibv_open_device);
struct ibv_context_1_0 *ibv_open_device_1_0(struct ibv_device_1_0 *device)
{
    struct ibv_context_1_0 *c = calloc(1, sizeof *c);
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    struct ibv_context *real = ibv_open_device(device->real_device);
    if (!real) {
        free(c);
        return NULL;
    }
    c->device = device;
    c->real_context = real;
    c->cmd_fd = real->cmd_fd;
    c->async_fd = real->async_fd;
    c->num_comp_vectors = real->num_comp_vectors;
    c->ops.poll_cq = poll_cq_1_0;
    c->ops.req_notify_cq = req_notify_cq_1_0;
    c->ops.post_send = post_send_1_0;
    c->ops.post_recv = post_recv_1_0;
    c->ops.post_srq_recv = post_srq_recv_1_0;
    return c;
}

V1_0(ibv_close_device);
int ibv_close_device_1_0(struct ibv_context_1_0 *context)
{
    int rc = ibv_close_device(context->real_context);
    if (rc == 0)
        free(context);
    return rc;
}

V1_0(ibv_query_device);
int ibv_query_device_1_0(struct ibv_context_1_0 *context, struct ibv_device_attr *attr)
{
    return ibv_query_device(context->real_context, attr);
}

V1_0(ibv_query_port);
int ibv_query_port_1_0(struct ibv_context_1_0 *context, uint8_t port,
                       struct _compat_ibv_port_attr *attr)
{
    return ibv_query_port(context->real_context, port, attr);
}

V1_0(ibv_query_gid);
int ibv_query_gid_1_0(struct ibv_context_1_0 *context, uint8_t port, int index, union ibv_gid *gid)
{
    return ibv_query_gid(context->real_context, port, index, gid);
}

V1_0(ibv_query_pkey);
int ibv_query_pkey_1_0(struct ibv_context_1_0 *context, uint8_t port, int index, __be16 *pkey)
{
    return ibv_query_pkey(context->real_context, port, index, pkey);
}

/* ---- async events: today's objects point back at their wrappers ------------------------ */

V1_0(ibv_get_async_event);
int ibv_get_async_event_1_0(struct ibv_context_1_0 *context, struct ibv_async_event *event)
{
    if (ibv_get_async_event(context->real_context, event))
        return -1;
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
        event->element.cq = event->element.cq->cq_context;
        break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        event->element.srq = event->element.srq->srq_context;
        break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        event->element.qp = event->element.qp->qp_context;
        break;
    default:
        break;
    }
    return 0;
}

V1_0(ibv_ack_async_event);
void ibv_ack_async_event_1_0(struct ibv_async_event *event)
{
    struct ibv_async_event real = *event;
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
        struct ibv_cq_1_0 *cq = (struct ibv_cq_1_0 *)event->element.cq;
        real.element.cq = cq->real_cq;
        pthread_mutex_lock(&cq->mutex);
        cq->async_events_completed++;
        pthread_cond_broadcast(&cq->cond);
        pthread_mutex_unlock(&cq->mutex);
        break;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        real.element.srq = ((struct ibv_srq_1_0 *)event->element.srq)->real_srq;
        break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
        struct ibv_qp_1_0 *qp = (struct ibv_qp_1_0 *)event->element.qp;
        real.element.qp = qp->real_qp;
        pthread_mutex_lock(&qp->mutex);
        qp->events_completed++;
        pthread_cond_broadcast(&qp->cond);
        pthread_mutex_unlock(&qp->mutex);
        break;
    }
    default:
        break;
    }
    ibv_ack_async_event(&real);
}

/* ---- protection domains, memory, address handles ---------------------------------------- */

V1_0(ibv_alloc_pd);
struct ibv_pd_1_0 *ibv_alloc_pd_1_0(struct ibv_context_1_0 *context)
{
    struct ibv_pd_1_0 *p = calloc(1, sizeof *p);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    p->real_pd = ibv_alloc_pd(context->real_context);
    if (!p->real_pd) {
        free(p);
        return NULL;
    }
    p->context = context;
    p->handle = p->real_pd->handle;
    return p;
}

V1_0(ibv_dealloc_pd);
int ibv_dealloc_pd_1_0(struct ibv_pd_1_0 *pd)
{
    int rc = ibv_dealloc_pd(pd->real_pd);
    if (rc == 0)
        free(pd);
    return rc;
}

V1_0(ibv_reg_mr);
struct ibv_mr_1_0 *ibv_reg_mr_1_0(struct ibv_pd_1_0 *pd, void *addr, size_t length, int access)
{
    struct ibv_mr_1_0 *m = calloc(1, sizeof *m);
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    m->real_mr = ibv_reg_mr(pd->real_pd, addr, length, access);
    if (!m->real_mr) {
        free(m);
        return NULL;
    }
    m->context = pd->context;
    m->pd = pd;
    m->handle = m->real_mr->handle;
    m->lkey = m->real_mr->lkey;
    m->rkey = m->real_mr->rkey;
    return m;
}

V1_0(ibv_dereg_mr);
int ibv_dereg_mr_1_0(struct ibv_mr_1_0 *mr)
{
    int rc = ibv_dereg_mr(mr->real_mr);
    if (rc == 0)
        free(mr);
    return rc;
}

V1_0(ibv_create_ah);
struct ibv_ah_1_0 *ibv_create_ah_1_0(struct ibv_pd_1_0 *pd, struct ibv_ah_attr *attr)
{
    struct ibv_ah_1_0 *a = calloc(1, sizeof *a);
    if (!a) {
        errno = ENOMEM;
        return NULL;
    }
    a->real_ah = ibv_create_ah(pd->real_pd, attr);
    if (!a->real_ah) {
        free(a);
        return NULL;
    }
    a->context = pd->context;
    a->pd = pd;
    a->handle = a->real_ah->handle;
    return a;
}

V1_0(ibv_destroy_ah);
int ibv_destroy_ah_1_0(struct ibv_ah_1_0 *ah)
{
    int rc = ibv_destroy_ah(ah->real_ah);
    if (rc == 0)
        free(ah);
    return rc;
}

/* ---- completion queues ------------------------------------------------------------------- */

V1_0(ibv_create_cq);
struct ibv_cq_1_0 *ibv_create_cq_1_0(struct ibv_context_1_0 *context, int cqe, void *cq_context,
                                     struct ibv_comp_channel *channel, int comp_vector)
{
    struct ibv_cq_1_0 *c = calloc(1, sizeof *c);
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    c->real_cq = ibv_create_cq(context->real_context, cqe, c, channel, comp_vector);
    if (!c->real_cq) {
        free(c);
        return NULL;
    }
    c->context = context;
    c->cq_context = cq_context;
    c->cqe = c->real_cq->cqe;
    c->handle = c->real_cq->handle;
    pthread_mutex_init(&c->mutex, NULL);
    pthread_cond_init(&c->cond, NULL);
    return c;
}

V1_0(ibv_resize_cq);
int ibv_resize_cq_1_0(struct ibv_cq_1_0 *cq, int cqe)
{
    int rc = ibv_resize_cq(cq->real_cq, cqe);
    if (rc == 0)
        cq->cqe = cq->real_cq->cqe;
    return rc;
}

V1_0(ibv_destroy_cq);
int ibv_destroy_cq_1_0(struct ibv_cq_1_0 *cq)
{
    int rc = ibv_destroy_cq(cq->real_cq);
    if (rc == 0) {
        pthread_mutex_destroy(&cq->mutex);
        pthread_cond_destroy(&cq->cond);
        free(cq);
    }
    return rc;
}

V1_0(ibv_get_cq_event);
int ibv_get_cq_event_1_0(struct ibv_comp_channel *channel, struct ibv_cq_1_0 **cq,
                         void **cq_context)
{
    struct ibv_cq *real;
    void *wrapper;
    if (ibv_get_cq_event(channel, &real, &wrapper))
        return -1;
    *cq = wrapper;
    *cq_context = (*cq)->cq_context;
    return 0;
}

V1_0(ibv_ack_cq_events);
void ibv_ack_cq_events_1_0(struct ibv_cq_1_0 *cq, unsigned int nevents)
{
    ibv_ack_cq_events(cq->real_cq, nevents);
}

static int poll_cq_1_0(struct ibv_cq_1_0 *cq, int n, struct ibv_wc *wc)
{
    return cq->real_cq->context->ops.poll_cq(cq->real_cq, n, wc);
}

static int req_notify_cq_1_0(struct ibv_cq_1_0 *cq, int solicited_only)
{
    return cq->real_cq->context->ops.req_notify_cq(cq->real_cq, solicited_only);
}

/* ---- shared receive queues: the device has none ------------------------------------------- */

V1_0(ibv_create_srq);
struct ibv_srq_1_0 *ibv_create_srq_1_0(struct ibv_pd_1_0 *pd, struct ibv_srq_init_attr *attr)
{
    struct ibv_srq *real = ibv_create_srq(pd->real_pd, attr);
    if (!real)
        return NULL;            /* always: see qp.c */
    ibv_destroy_srq(real);
    errno = EOPNOTSUPP;
    return NULL;
}

V1_0(ibv_modify_srq);
int ibv_modify_srq_1_0(struct ibv_srq_1_0 *srq, struct ibv_srq_attr *attr, int mask)
{
    return ibv_modify_srq(srq->real_srq, attr, mask);
}

V1_0(ibv_query_srq);
int ibv_query_srq_1_0(struct ibv_srq_1_0 *srq, struct ibv_srq_attr *attr)
{
    return ibv_query_srq(srq->real_srq, attr);
}

V1_0(ibv_destroy_srq);
int ibv_destroy_srq_1_0(struct ibv_srq_1_0 *srq)
{
    return ibv_destroy_srq(srq->real_srq);
}

static int post_srq_recv_1_0(struct ibv_srq_1_0 *srq, struct ibv_recv_wr_1_0 *wr,
                             struct ibv_recv_wr_1_0 **bad)
{
    (void)srq;
    *bad = wr;
    return vb_unsupported("ibv_post_srq_recv", "the device has no shared receive queues");
}

/* ---- queue pairs ------------------------------------------------------------------------- */

V1_0(ibv_create_qp);
struct ibv_qp_1_0 *ibv_create_qp_1_0(struct ibv_pd_1_0 *pd, struct ibv_qp_init_attr_1_0 *attr)
{
    struct ibv_qp_1_0 *q = calloc(1, sizeof *q);
    if (!q) {
        errno = ENOMEM;
        return NULL;
    }
    struct ibv_qp_init_attr a = {.qp_context = q,
                                 .send_cq = attr->send_cq ? attr->send_cq->real_cq : NULL,
                                 .recv_cq = attr->recv_cq ? attr->recv_cq->real_cq : NULL,
                                 .srq = attr->srq ? attr->srq->real_srq : NULL,
                                 .cap = attr->cap, .qp_type = attr->qp_type,
                                 .sq_sig_all = attr->sq_sig_all};
    q->real_qp = ibv_create_qp(pd->real_pd, &a);
    if (!q->real_qp) {
        free(q);
        return NULL;
    }
    attr->cap = a.cap;
    q->context = pd->context;
    q->qp_context = attr->qp_context;
    q->pd = pd;
    q->send_cq = attr->send_cq;
    q->recv_cq = attr->recv_cq;
    q->srq = attr->srq;
    q->handle = q->real_qp->handle;
    q->qp_num = q->real_qp->qp_num;
    q->state = q->real_qp->state;
    q->qp_type = q->real_qp->qp_type;
    pthread_mutex_init(&q->mutex, NULL);
    pthread_cond_init(&q->cond, NULL);
    return q;
}

V1_0(ibv_query_qp);
int ibv_query_qp_1_0(struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr, int mask,
                     struct ibv_qp_init_attr_1_0 *init)
{
    struct ibv_qp_init_attr real;
    int rc = ibv_query_qp(qp->real_qp, attr, mask, &real);
    if (rc)
        return rc;
    qp->state = qp->real_qp->state;
    if (init) {
        init->qp_context = qp->qp_context;
        init->send_cq = qp->send_cq;
        init->recv_cq = qp->recv_cq;
        init->srq = qp->srq;
        init->cap = real.cap;
        init->qp_type = real.qp_type;
        init->sq_sig_all = real.sq_sig_all;
    }
    return 0;
}

V1_0(ibv_modify_qp);
int ibv_modify_qp_1_0(struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr, int mask)
{
    int rc = ibv_modify_qp(qp->real_qp, attr, mask);
    if (rc == 0)
        qp->state = qp->real_qp->state;
    return rc;
}

V1_0(ibv_destroy_qp);
int ibv_destroy_qp_1_0(struct ibv_qp_1_0 *qp)
{
    int rc = ibv_destroy_qp(qp->real_qp);
    if (rc == 0) {
        pthread_mutex_destroy(&qp->mutex);
        pthread_cond_destroy(&qp->cond);
        free(qp);
    }
    return rc;
}

V1_0(ibv_attach_mcast);
int ibv_attach_mcast_1_0(struct ibv_qp_1_0 *qp, union ibv_gid *gid, uint16_t lid)
{
    return ibv_attach_mcast(qp->real_qp, gid, lid);
}

V1_0(ibv_detach_mcast);
int ibv_detach_mcast_1_0(struct ibv_qp_1_0 *qp, union ibv_gid *gid, uint16_t lid)
{
    return ibv_detach_mcast(qp->real_qp, gid, lid);
}

/* 1.0 work requests translated in batches of this many */
#define V1_BATCH 16

static int post_send_1_0(struct ibv_qp_1_0 *qp, struct ibv_send_wr_1_0 *wr,
                         struct ibv_send_wr_1_0 **bad)
{
    struct ibv_send_wr copy[V1_BATCH];
    while (wr) {
        int n = 0;
        struct ibv_send_wr_1_0 *w = wr;
        for (; w && n < V1_BATCH; w = w->next, n++) {
            struct ibv_send_wr *c = &copy[n];
            memset(c, 0, sizeof *c);
            c->wr_id = w->wr_id;
            c->sg_list = w->sg_list;
            c->num_sge = w->num_sge;
            c->opcode = w->opcode;
            c->send_flags = (unsigned)w->send_flags;
            c->imm_data = w->imm_data;
            if (qp->qp_type == IBV_QPT_UD) {
                c->wr.ud.ah = w->wr.ud.ah ? w->wr.ud.ah->real_ah : NULL;
                c->wr.ud.remote_qpn = w->wr.ud.remote_qpn;
                c->wr.ud.remote_qkey = w->wr.ud.remote_qkey;
            } else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                       w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
                c->wr.atomic.remote_addr = w->wr.atomic.remote_addr;
                c->wr.atomic.compare_add = w->wr.atomic.compare_add;
                c->wr.atomic.swap = w->wr.atomic.swap;
                c->wr.atomic.rkey = w->wr.atomic.rkey;
            } else {
                c->wr.rdma.remote_addr = w->wr.rdma.remote_addr;
                c->wr.rdma.rkey = w->wr.rdma.rkey;
            }
            if (n > 0)
                copy[n - 1].next = c;
        }
        struct ibv_send_wr *cbad = NULL;
        int rc = vb_post_send(qp->real_qp, copy, &cbad);
        if (rc) {
            struct ibv_send_wr_1_0 *orig = wr;
            for (long i = cbad ? cbad - copy : 0; i > 0 && orig; i--)
                orig = orig->next;
            *bad = orig;
            return rc;
        }
        wr = w;
    }
    return 0;
}

static int post_recv_1_0(struct ibv_qp_1_0 *qp, struct ibv_recv_wr_1_0 *wr,
                         struct ibv_recv_wr_1_0 **bad)
{
    struct ibv_recv_wr copy[V1_BATCH];
    while (wr) {
        int n = 0;
        struct ibv_recv_wr_1_0 *w = wr;
        for (; w && n < V1_BATCH; w = w->next, n++) {
            copy[n] = (struct ibv_recv_wr){.wr_id = w->wr_id, .sg_list = w->sg_list,
                                           .num_sge = w->num_sge};
            if (n > 0)
                copy[n - 1].next = &copy[n];
        }
        struct ibv_recv_wr *cbad = NULL;
        int rc = vb_post_recv(qp->real_qp, copy, &cbad);
        if (rc) {
            struct ibv_recv_wr_1_0 *orig = wr;
            for (long i = cbad ? cbad - copy : 0; i > 0 && orig; i--)
                orig = orig->next;
            *bad = orig;
            return rc;
        }
        wr = w;
    }
    return 0;
}
#endif
