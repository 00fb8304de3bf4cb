/* soft_reap.c - finished work into completions.
 *
 * The wire says, by index, when a receive or a send has finished and how
 * (struct soft_result); the result may come from a peer process, so it is
 * checked against our record of the work request before it becomes a
 * completion with our wr_id: a status that is one, a receive's length no
 * longer than what was posted. A CQ fed by several queues takes their
 * results in the order of their stamps (when the work finished), as a NIC
 * writes CQEs; each queue's own order is its index order. A slot is free
 * for a new post only once its result was taken. A result that carries the
 * message itself (scatter-to-CQE, wire.h) is placed here into the
 * receive's buffers, through our own keys, as mlx5's provider does. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"
#include "util/copy.h"

static struct soft_cq *cq_of(tbrt_cq *cq) { return (struct soft_cq *)cq; }

/* The next result of a QP's receive (recv) or send queue, asked of the
 * wire once. 1 there is one (in rres / sres), 0 not yet, -1 the QP broke. */
static int next_result(struct soft_qp *q, bool recv)
{
    bool *have = recv ? &q->have_rres : &q->have_sres;
    if (*have)
        return 1;
    uint64_t done = recv ? q->rq_done : q->sq_done, end = recv ? q->rq_prod : q->sq_tail;
    if (done == end)
        return 0;
    const struct soft_wire_ops *o = q->sd->wops;
    int r = recv ? o->recv_done(q->wq, done, &q->rres) : o->send_done(q->wq, done, &q->sres);
    if (r < 0) {
        soft_qp_break(q, false);
        return -1;
    }
    *have = r > 0;
    return r;
}

/* A flushed completion of a broken QP says why it broke, once. */
static void flush_says_why(struct soft_qp *q, struct ibv_wc *wc)
{
    if (wc->status == IBV_WC_WR_FLUSH_ERR && q->broken && !q->broken_told) {
        wc->status = IBV_WC_LOC_QP_OP_ERR;
        wc->vendor_err = SOFT_VERR_CORRUPT;
        q->broken_told = true;
    }
}

const char *soft_recv_result_bad(const struct soft_result *r, const struct soft_wr *w,
                                 char *buf, size_t len)
{
    if (TBRT_UNLIKELY(r->data_len) &&
        (r->data_len > SOFT_RESULT_DATA || r->data_len != r->byte_len ||
         r->status != IBV_WC_SUCCESS || r->opcode != IBV_WC_RECV))
        snprintf(buf, len, "data_len %u with byte_len %u, status %u, opcode %u (a message "
                 "in the result is a successful receive's, all of it, at most %d bytes)",
                 r->data_len, r->byte_len, r->status, r->opcode, SOFT_RESULT_DATA);
    else if (r->status > IBV_WC_GENERAL_ERR)
        snprintf(buf, len, "status %u is not a completion status", r->status);
    else if (r->opcode != IBV_WC_RECV && r->opcode != IBV_WC_RECV_RDMA_WITH_IMM)
        snprintf(buf, len, "opcode %u is not a receive's", r->opcode);
    else if (r->opcode == IBV_WC_RECV && r->byte_len > w->total)
        snprintf(buf, len, "byte_len %u > the %llu bytes posted", r->byte_len,
                 (unsigned long long)w->total);
    else if (r->wc_flags & ~(IBV_WC_GRH | IBV_WC_WITH_IMM | SOFT_WC_GRH_IPV4))
        snprintf(buf, len, "wc_flags 0x%x", r->wc_flags);
    else if (r->src_qp > 0xffffff)
        snprintf(buf, len, "src_qp 0x%x", r->src_qp);
    else
        return NULL;
    return buf;
}

/* Our own region behind [addr, addr+len) of lkey, writable: the wire's
 * table when it has one, else our list of regions. */
static int local_mem(struct soft_dev *sd, uint32_t lkey, uint64_t addr, uint64_t len, void **out)
{
    if (sd->wops->mr_local)
        return sd->wops->mr_local(sd->wire, lkey, addr, len, IBV_ACCESS_LOCAL_WRITE, out);
    for (struct soft_mr *m = sd->mrs; m; m = m->next) {
        if (m->mr.lkey != lkey)
            continue;
        uint64_t base = m->mr.iova;     /* SGEs name the iova */
        if (addr < base || len > m->mr.length || addr - base > m->mr.length - len)
            return -ERANGE;
        if (!(m->mr.access & IBV_ACCESS_LOCAL_WRITE))
            return -EACCES;
        *out = (char *)m->mr.addr + (addr - base);
        return 0;
    }
    return -ENOENT;
}

/* The region a message was last placed into, found whole: [addr, addr+len)
 * of lkey inside it, while no region was registered or deregistered since
 * (every small message of a link goes into its one receive ring). */
static void *placed_before(const struct soft_dev *sd, uint32_t lkey, uint64_t addr, uint64_t len)
{
    const struct soft_placed *p = &sd->placed;
    if (p->base && p->gen == sd->mr_gen && p->lkey == lkey && addr >= p->iova &&
        len <= p->len && addr - p->iova <= p->len - len)
        return p->base + (addr - p->iova);
    return NULL;
}

/* Remember lkey's region, when it is ours and writable whole, for the next
 * placement (placed_before). */
static void remember_region(struct soft_dev *sd, uint32_t lkey)
{
    for (struct soft_mr *m = sd->mrs; m; m = m->next) {
        void *base;
        if (m->mr.lkey != lkey || local_mem(sd, lkey, m->mr.iova, m->mr.length, &base))
            continue;
        sd->placed = (struct soft_placed){.gen = sd->mr_gen, .lkey = lkey, .iova = m->mr.iova,
                                          .len = m->mr.length, .base = base};
        return;
    }
}

/* Place the message a scatter-to-CQE result carries into the receive's
 * scatter list (our record), as the wire would have placed it: 0, or the
 * vendor_err of a key that does not cover its piece. */
uint32_t soft_place_data(struct soft_dev *sd, const struct soft_rwr *rw,
                         const struct soft_result *r)
{
    uint32_t off = 0;
    for (uint32_t i = 0; i < rw->num_sge && off < r->data_len; i++) {
        const struct ibv_sge *g = &rw->sge[i];
        uint32_t n = TBRT_MIN(g->length, (uint32_t)r->data_len - off);
        void *dst = placed_before(sd, g->lkey, g->addr, n);
        if (!dst) {
            int rc = local_mem(sd, g->lkey, g->addr, n, &dst);
            if (rc)
                return rc == -EPERM ? SOFT_VERR_NOT_SHARED : SOFT_VERR_LKEY;
            remember_region(sd, g->lkey);
        }
        bulk_copy(dst, r->data + off, n);
        off += n;
    }
    return 0;
}

/* Make the completion of the next receive (next_result said 1); false when
 * nothing was taken (the CQ is full, or the QP broke). */
static bool recv_take(struct soft_qp *q)
{
    uint64_t c = q->rq_done;
    uint32_t slot = (uint32_t)(c & q->rq_mask);
    const struct soft_rwr *rw = &q->rq_wr[slot];
    const struct soft_wr *w = &rw->wr;
    const struct soft_result *r = &q->rres;
    char buf[192];
    const char *bad = soft_recv_result_bad(r, w, buf, sizeof buf);
    struct ibv_wc wc = {.wr_id = w->wr_id, .status = r->status, .opcode = r->opcode,
                        .vendor_err = r->vendor_err, .byte_len = r->byte_len, .imm_data = r->imm,
                        .qp_num = q->qp.qp_num, .src_qp = r->src_qp};
    soft_wc_grh(&wc, r->wc_flags);
    if (!bad && r->data_len) {
        uint32_t verr = soft_place_data(q->sd, rw, r);
        if (verr)
            wc = (struct ibv_wc){.wr_id = w->wr_id, .status = IBV_WC_LOC_PROT_ERR,
                                 .opcode = IBV_WC_RECV, .vendor_err = verr,
                                 .qp_num = q->qp.qp_num, .src_qp = r->src_qp};
    }
    if (bad)
        wc = (struct ibv_wc){.wr_id = w->wr_id, .status = IBV_WC_LOC_QP_OP_ERR,
                             .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_CORRUPT,
                             .qp_num = q->qp.qp_num};
    flush_says_why(q, &wc);
    if (!soft_cq_add(cq_of(q->qp.recv_cq), &wc, r->stamp))
        return false;           /* overrun: poll_cq says so */
    q->rq_frames -= w->frames;
    q->rq_done++;
    q->have_rres = false;
    if (wc.status == IBV_WC_SUCCESS)
        soft_recv_seen(q);
    if (bad) {
        snprintf(q->sd->corrupt_why, sizeof q->sd->corrupt_why, "QP 0x%x broke: receive %llu: "
                 "its result's %s (written by a peer: corrupt)", q->qp.qp_num,
                 (unsigned long long)c, bad);
        soft_qp_break(q, true);
        return false;
    }
    return true;
}

static bool send_take(struct soft_qp *q)
{
    const struct soft_wr *w = &q->sq_wr[q->sq_done & q->sq_mask];
    const struct soft_result *r = &q->sres;
    bool bad = r->status > IBV_WC_GENERAL_ERR;
    if (w->signaled || r->status != IBV_WC_SUCCESS) {
        struct ibv_wc wc = {.wr_id = w->wr_id, .status = r->status, .opcode = w->opcode,
                            .vendor_err = r->vendor_err, .byte_len = (uint32_t)w->total,
                            .qp_num = q->qp.qp_num};
        if (bad) {
            wc.status = IBV_WC_LOC_QP_OP_ERR;
            wc.vendor_err = SOFT_VERR_CORRUPT;
        }
        if (w->opcode == IBV_WC_COMP_SWAP || w->opcode == IBV_WC_FETCH_ADD)
            wc.byte_len = SOFT_ATOMIC_SIZE;
        flush_says_why(q, &wc);
        if (!soft_cq_add(cq_of(q->qp.send_cq), &wc, r->stamp))
            return false;
    }
    q->sq_frames -= w->frames;
    q->sq_done++;
    q->have_sres = false;
    if (bad) {
        snprintf(q->sd->corrupt_why, sizeof q->sd->corrupt_why, "QP 0x%x broke: send %llu: its "
                 "result's status %u is not a completion status (written by a peer: corrupt)",
                 q->qp.qp_num, (unsigned long long)(q->sq_done - 1), r->status);
        soft_qp_break(q, true);
        return false;
    }
    return true;
}

void soft_wc_grh(struct ibv_wc *wc, uint16_t result_flags)
{
    wc->wc_flags = result_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM);
    /* mlx5's CQE: bit 3 a UDP header, bits 2..0 the L3 type (1 IPv6, 2 IPv4) */
    if (result_flags & IBV_WC_GRH)
        wc->sl = (result_flags & SOFT_WC_GRH_IPV4) ? 0xa : 0x9;
}

/* A receive arriving at a QP in RTR is what establishes it (IB spec
 * 11.6.3: the responder's first packet): IBV_EVENT_COMM_EST, once. */
void soft_recv_seen(struct soft_qp *q)
{
    if (TBRT_UNLIKELY(q->qp.state == IBV_QPS_RTR) && !q->comm_est_told) {
        q->comm_est_told = true;
        soft_event_push(q->sd, IBV_EVENT_COMM_EST, q, 0);
    }
}

void soft_reap_recv(struct soft_qp *q)
{
    while (next_result(q, true) > 0 && recv_take(q))
        ;
}

void soft_reap_send(struct soft_qp *q)
{
    while (next_result(q, false) > 0 && send_take(q))
        ;
}

/* The SRQs' results go to the CQ of the QP that received each: an SRQ is
 * a candidate for any CQ (its next result may be for another CQ; taking it
 * there is as right as taking it later). */
void soft_reap_cq(struct soft_dev *sd, struct soft_cq *c)
{
    for (;;) {
        struct soft_qp *best = NULL;
        struct soft_srq *best_srq = NULL;
        bool best_recv = false;
        uint64_t best_stamp = UINT64_MAX;
        for (struct soft_qp *q = sd->qps; q; q = q->next) {
            if (&c->cq == q->qp.recv_cq && !q->srq && next_result(q, true) > 0 &&
                (!best || q->rres.stamp < best_stamp))
                best = q, best_recv = true, best_stamp = q->rres.stamp;
            if (&c->cq == q->qp.send_cq && next_result(q, false) > 0 &&
                (!best || q->sres.stamp < best_stamp))
                best = q, best_recv = false, best_stamp = q->sres.stamp;
        }
        for (struct soft_srq *s = sd->srqs; s; s = s->next)
            if (s->nqp && soft_srq_next(s) > 0 && (!(best || best_srq) ||
                                                  s->res.stamp < best_stamp))
                best_srq = s, best = NULL, best_stamp = s->res.stamp;
        if (best_srq) {
            if (!soft_srq_take(best_srq))
                return;
            continue;
        }
        if (!best || !(best_recv ? recv_take(best) : send_take(best)))
            return;
    }
}
