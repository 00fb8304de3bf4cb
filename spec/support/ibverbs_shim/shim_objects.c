/* shim_objects.c - the shim's verbs objects (PDs, completion channels, CQs,
 * QPs, MRs, AHs) and the data path its contexts point at (post_send,
 * post_recv, poll_cq, req_notify_cq), each a thin layer over tbrt's verbs
 * tier on a soft device. Errors follow rdma-core: creators return NULL with
 * errno, the rest return an errno value. See shim.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "shim.h"

#undef ibv_reg_mr

static tbrt_dev *dev_of(struct ibv_context *c) { return shim_ctx_of(c)->dev; }

/* Creators: NULL with errno from a tbrt return code. */
static void *fail_null(const char *call, int rc, tbrt_dev *dev, void *obj)
{
    free(obj);
    errno = shim_failed(call, rc, dev);
    return NULL;
}

/* ---- protection domains ------------------------------------------------------------- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    SHIM_FAIL_NULL("ibv_alloc_pd");
    struct shim_pd *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    int rc = tbrt_pd_alloc(dev_of(context), &p->t);
    if (rc)
        return fail_null("ibv_alloc_pd", rc, dev_of(context), p);
    p->pd.context = context;
    p->pd.handle = p->t->handle;
    shim_log("ibv_alloc_pd");
    return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    SHIM_FAIL_INT("ibv_dealloc_pd");
    struct shim_pd *p = (struct shim_pd *)pd;
    int rc = tbrt_pd_free(p->t);
    if (rc)
        return shim_failed("ibv_dealloc_pd", rc, dev_of(pd->context));
    shim_log("ibv_dealloc_pd");
    free(p);
    return 0;
}

/* ---- completion channels and queues --------------------------------------------------- */

/* A channel is an epoll set over the soft CQs bound to it: its fd is
 * readable when any of them has an event. */
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    SHIM_FAIL_NULL("ibv_create_comp_channel");
    struct ibv_comp_channel *ch = calloc(1, sizeof *ch);
    if (!ch)
        return NULL;
    ch->context = context;
    if (shim_should_fail("comp_channel_fd")) {
        ch->fd = -1;            /* a broken channel, for the caller's checks */
        return ch;
    }
    ch->fd = epoll_create1(EPOLL_CLOEXEC);
    if (ch->fd < 0) {
        int e = errno;
        free(ch);
        errno = e;
        return NULL;
    }
    shim_log("ibv_create_comp_channel");
    return ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    SHIM_FAIL_INT("ibv_destroy_comp_channel");
    if (channel->refcnt)
        return EBUSY;
    shim_log("ibv_destroy_comp_channel");
    if (channel->fd >= 0)
        close(channel->fd);
    free(channel);
    return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
    SHIM_FAIL_NULL("ibv_create_cq");
    if (comp_vector != 0) {
        errno = EINVAL;
        return NULL;
    }
    struct shim_cq *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    int rc = tbrt_cq_create(dev_of(context), cqe, &c->t);
    if (rc)
        return fail_null("ibv_create_cq", rc, dev_of(context), c);
    if (channel) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(channel->fd, EPOLL_CTL_ADD, c->t->fd, &ev) != 0) {
            int e = errno;
            tbrt_cq_destroy(c->t);
            free(c);
            errno = e;
            return NULL;
        }
        channel->refcnt++;
    }
    c->cq.context = context;
    c->cq.channel = channel;
    c->cq.cq_context = cq_context;
    c->cq.cqe = c->t->cqe;
    pthread_mutex_init(&c->cq.mutex, NULL);
    pthread_cond_init(&c->cq.cond, NULL);
    shim_log("ibv_create_cq");
    return &c->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
    SHIM_FAIL_INT("ibv_destroy_cq");
    struct shim_cq *c = (struct shim_cq *)cq;
    int fd = c->t->fd;
    if (cq->channel)
        epoll_ctl(cq->channel->fd, EPOLL_CTL_DEL, fd, NULL);
    int rc = tbrt_cq_destroy(c->t);
    if (rc) {
        if (cq->channel) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
            epoll_ctl(cq->channel->fd, EPOLL_CTL_ADD, fd, &ev);
        }
        return shim_failed("ibv_destroy_cq", rc, dev_of(cq->context));
    }
    if (cq->channel)
        cq->channel->refcnt--;
    pthread_mutex_destroy(&cq->mutex);
    pthread_cond_destroy(&cq->cond);
    shim_log("ibv_destroy_cq");
    free(c);
    return 0;
}

/* One event: the first CQ of the channel whose soft fd is readable; its
 * wakeup is consumed. Blocks unless the channel fd is O_NONBLOCK. */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
    shim_count(SC_GET_EVENT);
    int fl = fcntl(channel->fd, F_GETFL);
    int wait_ms = fl >= 0 && (fl & O_NONBLOCK) ? 0 : -1;
    struct epoll_event ev;
    int n;
    do
        n = epoll_wait(channel->fd, &ev, 1, wait_ms);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        if (n == 0)
            errno = EAGAIN;
        return -1;
    }
    struct shim_cq *c = ev.data.ptr;
    tbrt_cq_ack(c->t);
    *cq = &c->cq;
    *cq_context = c->cq.cq_context;
    return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    shim_count(SC_ACK_EVENTS);
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_mutex_unlock(&cq->mutex);
}

int shim_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    int e = shim_should_fail("poll_cq");
    if (e)
        return e < 0 ? e : -e;  /* providers return a negative value */
    shim_count(SC_POLL_CQ);
    int got = tbrt_cq_poll(((struct shim_cq *)cq)->t, n, wc);
    if (got < 0)
        shim_failed("poll_cq", got, dev_of(cq->context));
    return got;
}

int shim_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    SHIM_FAIL_INT("req_notify_cq");
    (void)solicited_only;       /* every completion is an event here */
    shim_count(SC_REQ_NOTIFY);
    int rc = tbrt_cq_arm(((struct shim_cq *)cq)->t);
    return rc ? shim_failed("req_notify_cq", rc, dev_of(cq->context)) : 0;
}

/* ---- queue pairs ----------------------------------------------------------------------- */

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    SHIM_FAIL_NULL("ibv_create_qp");
    if (attr->srq) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    struct shim_qp *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    tbrt_qp_init init = {.send_cq = ((struct shim_cq *)attr->send_cq)->t,
                         .recv_cq = ((struct shim_cq *)attr->recv_cq)->t,
                         .cap = attr->cap, .qp_type = attr->qp_type,
                         .sq_sig_all = attr->sq_sig_all};
    int rc = tbrt_qp_create(((struct shim_pd *)pd)->t, &init, &q->t);
    if (rc)
        return fail_null("ibv_create_qp", rc, dev_of(pd->context), q);
    attr->cap = init.cap;
    struct ibv_qp *qp = &q->qp;
    qp->context = pd->context;
    qp->qp_context = attr->qp_context;
    qp->pd = pd;
    qp->send_cq = attr->send_cq;
    qp->recv_cq = attr->recv_cq;
    qp->qp_num = q->t->qp_num;
    qp->handle = q->t->qp_num;
    qp->state = IBV_QPS_RESET;
    qp->qp_type = attr->qp_type;
    pthread_mutex_init(&qp->mutex, NULL);
    pthread_cond_init(&qp->cond, NULL);
    shim_log("ibv_create_qp");
    return qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    SHIM_FAIL_INT("ibv_modify_qp");
    int rc = tbrt_qp_modify(((struct shim_qp *)qp)->t, attr, mask);
    if (rc)
        return shim_failed("ibv_modify_qp", rc, dev_of(qp->context));
    if (mask & IBV_QP_STATE)
        qp->state = attr->qp_state;
    return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    SHIM_FAIL_INT("ibv_destroy_qp");
    struct shim_qp *q = (struct shim_qp *)qp;
    int rc = tbrt_qp_destroy(q->t);
    if (rc)
        return shim_failed("ibv_destroy_qp", rc, dev_of(qp->context));
    pthread_mutex_destroy(&qp->mutex);
    pthread_cond_destroy(&qp->cond);
    shim_log("ibv_destroy_qp");
    free(q);
    return 0;
}

/* The caller's UD address handles are the shim's: swap in tbrt's. */
int shim_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    int e = shim_should_fail("post_send");
    if (e) {
        *bad = wr;
        return e;
    }
    shim_count(SC_POST_SEND);
    tbrt_qp *t = ((struct shim_qp *)qp)->t;
    int rc;
    if (qp->qp_type != IBV_QPT_UD) {
        rc = tbrt_post_send(t, wr, bad);
        return rc ? shim_failed("post_send", rc, t->dev) : 0;
    }
    for (struct ibv_send_wr *w = wr; w; w = w->next) {
        struct ibv_send_wr one = *w;
        one.next = NULL;
        one.wr.ud.ah = w->wr.ud.ah ? tbrt_ah_handle(((struct shim_ah *)w->wr.ud.ah)->t) : NULL;
        struct ibv_send_wr *b;
        rc = tbrt_post_send(t, &one, &b);
        if (rc) {
            *bad = w;
            return shim_failed("post_send", rc, t->dev);
        }
    }
    return 0;
}

int shim_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    int e = shim_should_fail("post_recv");
    if (e) {
        *bad = wr;
        return e;
    }
    shim_count(SC_POST_RECV);
    tbrt_qp *t = ((struct shim_qp *)qp)->t;
    int rc = tbrt_post_recv(t, wr, bad);
    return rc ? shim_failed("post_recv", rc, t->dev) : 0;
}

/* ---- memory regions and address handles ------------------------------------------------- */

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    SHIM_FAIL_NULL("ibv_reg_mr");
    struct shim_mr *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    int rc = tbrt_mr_reg(((struct shim_pd *)pd)->t, addr, length, access, &m->t);
    if (rc)
        return fail_null("ibv_reg_mr", rc, dev_of(pd->context), m);
    m->mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = length,
                            .handle = m->t->lkey, .lkey = m->t->lkey, .rkey = m->t->rkey};
    shim_log("ibv_reg_mr");
    return &m->mr;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    SHIM_FAIL_INT("ibv_dereg_mr");
    struct shim_mr *m = (struct shim_mr *)mr;
    int rc = tbrt_mr_dereg(m->t);
    if (rc)
        return shim_failed("ibv_dereg_mr", rc, dev_of(mr->context));
    shim_log("ibv_dereg_mr");
    free(m);
    return 0;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    SHIM_FAIL_NULL("ibv_create_ah");
    struct shim_ah *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    int rc = tbrt_ah_create(((struct shim_pd *)pd)->t, attr, &a->t);
    if (rc)
        return fail_null("ibv_create_ah", rc, dev_of(pd->context), a);
    a->ah = (struct ibv_ah){.context = pd->context, .pd = pd};
    shim_log("ibv_create_ah");
    return &a->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
    SHIM_FAIL_INT("ibv_destroy_ah");
    struct shim_ah *a = (struct shim_ah *)ah;
    int rc = tbrt_ah_destroy(a->t);
    if (rc)
        return shim_failed("ibv_destroy_ah", rc, dev_of(ah->context));
    shim_log("ibv_destroy_ah");
    free(a);
    return 0;
}
