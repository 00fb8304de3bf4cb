/* srq.c - shared receive queues: ibv_create_srq and its extended form (the
 * basic type; XRC and tag matching need what the device has not),
 * ibv_modify_srq (IBV_SRQ_MAX_WR within what it was made with,
 * IBV_SRQ_LIMIT arming IBV_EVENT_SRQ_LIMIT_REACHED), ibv_query_srq,
 * ibv_destroy_srq (after the caller acked its async events) and the
 * post_srq_recv entry verbs.h inlines ibv_post_srq_recv into. Each is the
 * device's call with the context locked. */
#include <stdlib.h>
#include <string.h>

#include "verbs_lib.h"

static struct vb_srq *srq_new(struct ibv_context *context, struct ibv_pd *pd,
                              struct ibv_srq_attr *attr, void *srq_context, const char *call)
{
    struct vb_ctx *c = vb_ctx_of(context);
    struct vb_srq *s = calloc(1, sizeof *s);
    if (!s) {
        errno = ENOMEM;
        return NULL;
    }
    struct ibv_srq_attr a = *attr;
    vb_lock(c);
    int rc = tbrt_srq_create(((struct vb_pd *)pd)->t, &a, &s->t);
    int err = rc ? vb_failed(call, rc, c->dev) : 0;
    if (!err)
        s->t->user = s;
    vb_unlock(c);
    if (err) {
        free(s);
        errno = err;
        return NULL;
    }
    attr->max_wr = a.max_wr;
    attr->max_sge = a.max_sge;
    struct ibv_srq *x = &s->ibv;
    x->context = context;
    x->srq_context = srq_context;
    x->pd = pd;
    x->handle = s->t->srq_num;
    pthread_mutex_init(&x->mutex, NULL);
    pthread_cond_init(&x->cond, NULL);
    return s;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
    VB_INJECT_NULL("ibv_create_srq");
    struct vb_srq *s = srq_new(pd->context, pd, &attr->attr, attr->srq_context, "ibv_create_srq");
    if (!s)
        return NULL;
    vb_trace("ibv_create_srq");
    return &s->ibv;
}

/* verbs_context.create_srq_ex: what verbs.h's ibv_create_srq_ex calls */
static struct ibv_srq *create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *ax)
{
    VB_INJECT_NULL("ibv_create_srq_ex");
    const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    if (ax->comp_mask & ~known) {
        vb_unsupported("ibv_create_srq_ex", "comp_mask 0x%x: XRC domains, completion queues for "
                       "XRC and tag matching need device support", ax->comp_mask & ~known);
        return NULL;
    }
    if ((ax->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && ax->srq_type != IBV_SRQT_BASIC) {
        vb_unsupported("ibv_create_srq_ex", "srq_type %d: only IBV_SRQT_BASIC (XRC and tag "
                       "matching need device support)", ax->srq_type);
        return NULL;
    }
    if (!(ax->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !ax->pd) {
        vb_say("ibv_create_srq_ex", EINVAL, "a protection domain is required "
               "(IBV_SRQ_INIT_ATTR_PD)");
        errno = EINVAL;
        return NULL;
    }
    struct vb_srq *s = srq_new(context, ax->pd, &ax->attr, ax->srq_context, "ibv_create_srq_ex");
    if (!s)
        return NULL;
    vb_trace("ibv_create_srq_ex");
    return &s->ibv;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
    VB_INJECT_INT("ibv_modify_srq");
    struct vb_ctx *c = vb_ctx_of(srq->context);
    vb_lock(c);
    int rc = tbrt_srq_modify(vb_srq_of(srq)->t, attr, mask);
    int err = rc ? vb_failed("ibv_modify_srq", rc, c->dev) : 0;
    vb_unlock(c);
    return err;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
    VB_INJECT_INT("ibv_query_srq");
    struct vb_ctx *c = vb_ctx_of(srq->context);
    vb_lock(c);
    int rc = tbrt_srq_query(vb_srq_of(srq)->t, attr);
    int err = rc ? vb_failed("ibv_query_srq", rc, c->dev) : 0;
    vb_unlock(c);
    return err;
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
    VB_INJECT_INT("ibv_destroy_srq");
    struct vb_srq *s = vb_srq_of(srq);
    struct vb_ctx *c = vb_ctx_of(srq->context);
    int err = vb_wait_event_acks(&srq->mutex, &srq->cond, &srq->events_completed, &s->events_got,
                                 "ibv_destroy_srq");
    if (err)
        return err;
    vb_lock(c);
    int rc = tbrt_srq_destroy(s->t);
    err = rc ? vb_failed("ibv_destroy_srq", rc, c->dev) : 0;
    vb_unlock(c);
    if (err)
        return err;
    pthread_mutex_destroy(&srq->mutex);
    pthread_cond_destroy(&srq->cond);
    vb_trace("ibv_destroy_srq");
    free(s);
    return 0;
}

/* ops.post_srq_recv: what verbs.h's inline ibv_post_srq_recv calls */
static int post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    int inj = VB_DATA_INJECT("post_srq_recv");
    if (inj) {
        *bad = wr;
        return inj;
    }
    vb_count(VC_POST_RECV);
    struct vb_ctx *c = vb_ctx_of(srq->context);
    vb_lock(c);
    int rc = tbrt_post_srq_recv(vb_srq_of(srq)->t, wr, bad);
    int err = rc ? vb_failed("ibv_post_srq_recv", rc, c->dev) : 0;
    vb_unlock(c);
    return err;
}

/* verbs_context.get_srq_num: an SRQ's number (XRC senders name it) */
static int get_srq_num(struct ibv_srq *srq, uint32_t *num)
{
    *num = vb_srq_of(srq)->t->srq_num;
    return 0;
}

void vb_srq_init_ops(struct vb_ctx *c)
{
    c->v.context.ops.post_srq_recv = post_srq_recv;
    c->v.create_srq_ex = create_srq_ex;
    c->v.get_srq_num = get_srq_num;
}
