/* post.c - the data path a context's ops table points at (verbs.h inlines
 * ibv_post_send, ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq into
 * calls through it): each is the device's call with the context locked.
 *
 * Errors as providers give them: post_* return an errno and point *bad at
 * the first request not posted; poll returns a negative value. The only
 * translation is UD's address handle: the caller's wr.ud.ah is ours, the
 * device wants its own, so UD chains are posted through copies in batches. */
#include <string.h>

#include "verbs_lib.h"

/* UD requests copied per device call */
#define VB_UD_BATCH 16

int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    int inj = VB_DATA_INJECT("post_send");
    if (inj) {
        *bad = wr;
        return inj;
    }
    vb_count(VC_POST_SEND);
    struct vb_qp *q = vb_qp_of(qp);
    struct vb_ctx *c = vb_ctx_of(qp->context);
    int rc = 0;
    if (qp->qp_type != IBV_QPT_UD) {
        vb_lock(c);
        rc = tbrt_post_send(q->t, wr, bad);
        int err = rc ? vb_failed("ibv_post_send", rc, c->dev) : 0;
        vb_unlock(c);
        return err;
    }
    struct ibv_send_wr copy[VB_UD_BATCH];
    while (wr) {
        int n = 0;
        struct ibv_send_wr *w = wr;
        for (; w && n < VB_UD_BATCH; w = w->next, n++) {
            copy[n] = *w;
            copy[n].next = NULL;
            if (n > 0)
                copy[n - 1].next = &copy[n];
            if (w->wr.ud.ah) {
                struct vb_ah *ah = (struct vb_ah *)w->wr.ud.ah;
                if (ah->ibv.context != qp->context) {
                    vb_say("ibv_post_send", EINVAL, "UD work request %d (wr_id %llu) has an "
                           "address handle of another context", n,
                           (unsigned long long)w->wr_id);
                    rc = -EINVAL;
                    break;
                }
                copy[n].wr.ud.ah = tbrt_ah_handle(ah->t);
            }
        }
        struct ibv_send_wr *cbad = NULL;
        if (rc == 0 && n > 0) {
            vb_lock(c);
            rc = tbrt_post_send(q->t, copy, &cbad);
            if (rc)
                vb_failed("ibv_post_send", rc, c->dev);
            vb_unlock(c);
        } else if (rc) {
            cbad = &copy[n];
        }
        if (rc) {
            /* the caller's request at the same position as the copy's */
            struct ibv_send_wr *orig = wr;
            for (long i = cbad ? cbad - copy : 0; i > 0 && orig; i--)
                orig = orig->next;
            *bad = orig;
            return -rc;
        }
        wr = w;
    }
    return 0;
}

int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    int inj = VB_DATA_INJECT("post_recv");
    if (inj) {
        *bad = wr;
        return inj;
    }
    vb_count(VC_POST_RECV);
    struct vb_ctx *c = vb_ctx_of(qp->context);
    vb_lock(c);
    int rc = tbrt_post_recv(vb_qp_of(qp)->t, wr, bad);
    int err = rc ? vb_failed("ibv_post_recv", rc, c->dev) : 0;
    vb_unlock(c);
    return err;
}

int vb_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    int inj = VB_DATA_INJECT("poll_cq");
    if (inj)
        return inj < 0 ? inj : -inj;  /* providers return a negative value */
    vb_count(VC_POLL_CQ);
    struct vb_ctx *c = vb_ctx_of(cq->context);
    vb_lock(c);
    int got = tbrt_cq_poll(vb_cq_of(cq)->t, n, wc);
    if (got < 0)
        vb_failed("ibv_poll_cq", got, c->dev);
    vb_unlock(c);
    return got;
}

int vb_poll_one(struct vb_cq *q, struct ibv_wc *wc, uint64_t *ts_ns)
{
    if (!ts_ns)
        return vb_poll_cq(ibv_cq_ex_to_cq(&q->ibv), 1, wc);
    int inj = VB_DATA_INJECT("poll_cq");
    if (inj)
        return inj < 0 ? inj : -inj;
    vb_count(VC_POLL_CQ);
    struct vb_ctx *c = vb_ctx_of(q->ibv.context);
    vb_lock(c);
    int got = tbrt_cq_poll_ts(q->t, 1, wc, ts_ns);
    if (got < 0)
        vb_failed("ibv_poll_cq", got, c->dev);
    vb_unlock(c);
    return got;
}

/* Every completion is an event here: solicited_only arms for all of them,
 * which a caller cannot tell from a device that ignores the flag. */
int vb_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    (void)solicited_only;
    int inj = VB_DATA_INJECT("req_notify_cq");
    if (inj)
        return inj;
    vb_count(VC_REQ_NOTIFY);
    struct vb_ctx *c = vb_ctx_of(cq->context);
    vb_lock(c);
    int rc = tbrt_cq_arm(vb_cq_of(cq)->t);
    int err = rc ? vb_failed("ibv_req_notify_cq", rc, c->dev) : 0;
    vb_unlock(c);
    return err;
}
