/* soft_srq.c - shared receive queues of the soft device.
 *
 * An SRQ is a receive queue that QPs made with it take their receives from,
 * oldest first, whichever of them a message arrives at. Its records (wr_id,
 * lengths) and indices are the objects', as for a QP's receive queue; the
 * wire holds the posted receives where senders find them and reports each
 * finished one by index, naming the QP that received it. That name comes
 * from outside the process: it must be a QP made with this SRQ, or the SRQ
 * breaks (IBV_EVENT_SRQ_ERR; nothing more is reaped from it).
 *
 * The limit (ibv_modify_srq IBV_SRQ_LIMIT) is armed in the wire, which
 * notices when the receives waiting drop below it (senders take them) and
 * reports it at progress: IBV_EVENT_SRQ_LIMIT_REACHED, and the limit is
 * disarmed, as verbs say. A QP made with an SRQ that goes to ERR reports
 * IBV_EVENT_QP_LAST_WQE_REACHED (soft_qp.c). Growing an SRQ (IBV_SRQ_MAX_WR)
 * works within the slots it was made with: twice what was asked, rounded
 * up to a power of two. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

static struct soft_srq *srq_of(tbrt_srq *s) { return (struct soft_srq *)s; }

int soft_create_srq(tbrt_pd *pd, struct ibv_srq_attr *attr, tbrt_srq **out)
{
    struct soft_dev *sd = soft_of(pd->dev);
    tbrt_dev *dev = pd->dev;
    if (sd->nsrq >= SOFT_MAX_SRQ)
        return dev_fail(dev, ENOMEM, "create_srq: at most %d shared receive queues per device",
                        SOFT_MAX_SRQ);
    if (attr->max_wr < 1 || attr->max_wr > sd->p->max_qp_wr)
        return dev_fail(dev, EINVAL, "create_srq: max_wr %u out of range 1..%u", attr->max_wr,
                        sd->p->max_qp_wr);
    if (attr->max_sge > SOFT_MAX_SGE)
        return dev_fail(dev, EINVAL, "create_srq: max_sge %u > %d", attr->max_sge, SOFT_MAX_SGE);
    uint32_t cap = 1;
    while (cap < 2 * attr->max_wr && cap < SOFT_MAX_QP_WR)
        cap <<= 1;
    struct soft_srq *s = calloc(1, sizeof *s);
    struct soft_rwr *wr = calloc(cap, sizeof *wr);
    if (!s || !wr) {
        free(s);
        free(wr);
        return dev_fail(dev, ENOMEM, "create_srq: out of memory");
    }
    char why[TBRT_WHY_MAX];
    uint32_t srqn = 0;
    struct soft_wire_srq_init wi = {.cap = cap, .cookie = s};
    int rc = sd->wops->srq_create ? sd->wops->srq_create(sd->wire, &wi, &s->ws, &srqn, why,
                                                         sizeof why)
                                  : err_set(why, sizeof why, EOPNOTSUPP, "the %s wire has no "
                                            "shared receive queues", sd->wops->name);
    if (rc) {
        free(s);
        free(wr);
        return dev_fail(dev, -rc, "create_srq: %s", why);
    }
    s->sd = sd;
    s->cap = cap;
    s->wr = wr;
    s->max_wr = attr->max_wr;
    s->max_sge = attr->max_sge ? attr->max_sge : 1;
    s->srq = (tbrt_srq){.dev = dev, .pd = pd, .srq_num = srqn};
    s->next = sd->srqs;
    sd->srqs = s;
    sd->nsrq++;
    attr->max_sge = s->max_sge;
    attr->srq_limit = 0;        /* ibv_create_srq ignores it: ibv_modify_srq arms */
    *out = &s->srq;
    return 0;
}

int soft_modify_srq(tbrt_srq *srq, struct ibv_srq_attr *attr, int mask)
{
    struct soft_srq *s = srq_of(srq);
    tbrt_dev *dev = srq->dev;
    if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
        return dev_fail(dev, EINVAL, "modify_srq: mask 0x%x has bits other than IBV_SRQ_MAX_WR "
                        "and IBV_SRQ_LIMIT", mask);
    uint32_t max_wr = (mask & IBV_SRQ_MAX_WR) ? attr->max_wr : s->max_wr;
    if (mask & IBV_SRQ_MAX_WR) {
        if (max_wr < 1 || max_wr > s->cap)
            return dev_fail(dev, EINVAL, "modify_srq: max_wr %u out of range 1..%u (the slots "
                            "SRQ 0x%x was made with)", max_wr, s->cap, srq->srq_num);
        if (max_wr < s->prod - s->done)
            return dev_fail(dev, EINVAL, "modify_srq: max_wr %u < the %llu receives posted",
                            max_wr, (unsigned long long)(s->prod - s->done));
    }
    if ((mask & IBV_SRQ_LIMIT) && attr->srq_limit > max_wr)
        return dev_fail(dev, EINVAL, "modify_srq: srq_limit %u > max_wr %u", attr->srq_limit,
                        max_wr);
    s->max_wr = max_wr;
    if (mask & IBV_SRQ_LIMIT) {
        s->limit = attr->srq_limit;
        s->sd->wops->srq_arm(s->ws, s->limit);
    }
    return 0;
}

int soft_query_srq(tbrt_srq *srq, struct ibv_srq_attr *attr)
{
    struct soft_srq *s = srq_of(srq);
    soft_progress(s->sd);       /* a limit reached meanwhile reads as disarmed */
    attr->max_wr = s->max_wr;
    attr->max_sge = s->max_sge;
    attr->srq_limit = s->limit;
    return 0;
}

int soft_destroy_srq(tbrt_srq *srq)
{
    struct soft_srq *s = srq_of(srq);
    struct soft_dev *sd = s->sd;
    if (s->nqp)
        return dev_fail(srq->dev, EBUSY, "destroy_srq: %d queue pair%s still use%s SRQ 0x%x",
                        s->nqp, s->nqp == 1 ? "" : "s", s->nqp == 1 ? "s" : "", srq->srq_num);
    sd->wops->srq_destroy(s->ws);
    soft_event_forget(sd, s);
    for (struct soft_srq **pp = &sd->srqs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    sd->nsrq--;
    free(s->wr);
    free(s);
    return 0;
}

int soft_post_srq_recv(tbrt_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct soft_srq *s = srq_of(srq);
    struct soft_dev *sd = s->sd;
    tbrt_dev *dev = srq->dev;
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (s->broken)
            return dev_fail(dev, EIO, "post_srq_recv: SRQ 0x%x broke on a bad value (%s)",
                            srq->srq_num, sd->corrupt_why);
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > s->max_sge)
            return dev_fail(dev, EINVAL, "post_srq_recv: %d scatter entries, max_sge %u",
                            wr->num_sge, s->max_sge);
        uint64_t total = 0;
        for (int i = 0; i < wr->num_sge; i++)
            total += wr->sg_list[i].length;
        if (s->prod - s->done >= s->max_wr)
            soft_reap_srq(s);
        if (s->prod - s->done >= s->max_wr)
            return dev_fail(dev, ENOMEM, "post_srq_recv: SRQ 0x%x full (%u work requests)",
                            srq->srq_num, s->max_wr);
        struct soft_rwr *rw = &s->wr[s->prod & (s->cap - 1)];   /* a power of two */
        rw->wr = (struct soft_wr){.wr_id = wr->wr_id, .total = total};
        rw->num_sge = (uint32_t)wr->num_sge;
        memcpy(rw->sge, wr->sg_list, (size_t)wr->num_sge * sizeof rw->sge[0]);
        struct soft_wire_recv r = {.num_sge = (uint32_t)wr->num_sge, .total = total,
                                   .sge = wr->sg_list};
        sd->wops->srq_post(s->ws, s->prod, &r);
        s->prod++;
    }
    *bad = NULL;
    soft_progress(sd);
    return 0;
}

void soft_srq_limit_reached(struct soft_srq *s)
{
    if (!s->limit)
        return;                 /* disarmed meanwhile */
    s->limit = 0;
    soft_event_push(s->sd, IBV_EVENT_SRQ_LIMIT_REACHED, s, 0);
}

/* ---- reaping ---------------------------------------------------------------------- */

/* fmt takes the SRQ number, the receive's index and what was wrong. */
static void srq_break(struct soft_srq *s, const char *fmt, const char *what)
{
    char copy[TBRT_WHY_MAX];
    str_copy(copy, sizeof copy, what);      /* it may be corrupt_why itself */
    snprintf(s->sd->corrupt_why, sizeof s->sd->corrupt_why, fmt, s->srq.srq_num,
             (unsigned long long)s->done, copy);
    s->broken = true;
    soft_event_push(s->sd, IBV_EVENT_SRQ_ERR, s, 0);
}

int soft_srq_next(struct soft_srq *s)
{
    if (s->have_res)
        return 1;
    if (s->broken || s->done == s->prod)
        return 0;
    int r = s->sd->wops->srq_done(s->ws, s->done, &s->res);
    if (r < 0) {
        srq_break(s, "SRQ 0x%x broke at receive %llu: %s", s->sd->corrupt_why);
        return -1;
    }
    s->have_res = r > 0;
    return r;
}

/* The QP of ours made with s that has this number. */
static struct soft_qp *receiver(struct soft_srq *s, uint32_t qpn)
{
    for (struct soft_qp *q = s->sd->qps; q; q = q->next)
        if (q->srq == s && q->qp.qp_num == qpn)
            return q;
    return NULL;
}

bool soft_srq_take(struct soft_srq *s)
{
    const struct soft_rwr *rw = &s->wr[s->done & (s->cap - 1)];
    const struct soft_wr *w = &rw->wr;
    const struct soft_result *r = &s->res;
    char buf[192];
    const char *bad = soft_recv_result_bad(r, w, buf, sizeof buf);
    struct soft_qp *q = bad ? NULL : receiver(s, r->qp_num);
    if (!q) {
        char what[200];
        if (!bad)
            snprintf(what, sizeof what, "its result names QP 0x%x, not one made with it",
                     r->qp_num);
        else
            snprintf(what, sizeof what, "its result's %s", bad);
        srq_break(s, "SRQ 0x%x broke at receive %llu: %s (written by a peer: corrupt)", what);
        s->have_res = false;
        return false;
    }
    struct ibv_wc wc = {.wr_id = w->wr_id, .status = r->status, .opcode = r->opcode,
                        .vendor_err = r->vendor_err, .byte_len = r->byte_len, .imm_data = r->imm,
                        .qp_num = q->qp.qp_num, .src_qp = r->src_qp};
    soft_wc_grh(&wc, r->wc_flags);
    if (r->data_len) {
        uint32_t verr = soft_place_data(s->sd, rw, r);
        if (verr)
            wc = (struct ibv_wc){.wr_id = w->wr_id, .status = IBV_WC_LOC_PROT_ERR,
                                 .opcode = IBV_WC_RECV, .vendor_err = verr,
                                 .qp_num = q->qp.qp_num, .src_qp = r->src_qp};
    }
    if (!soft_cq_add((struct soft_cq *)q->qp.recv_cq, &wc, r->stamp))
        return false;           /* overrun: poll_cq says so */
    s->done++;
    s->have_res = false;
    if (wc.status == IBV_WC_SUCCESS)
        soft_recv_seen(q);
    return true;
}

void soft_reap_srq(struct soft_srq *s)
{
    while (soft_srq_next(s) > 0 && soft_srq_take(s))
        ;
}
