/* wr.c - the extended QP's post API (ibv_wr_start, ibv_wr_send,
 * ibv_wr_set_sge, ..., ibv_wr_complete): each ibv_wr_<op> starts an
 * ordinary work request in the QP's batch, the ibv_wr_set_* calls fill the
 * last one, and ibv_wr_complete posts the whole chain through the same
 * path as ibv_post_send. Inline data is copied when it is set, so the
 * caller may reuse its buffer at once, as with a real provider.
 *
 * From wr_start to wr_complete/wr_abort the QP's wr_lock is held (a
 * provider holds its send queue lock), so two threads building on one QP
 * take turns. A misuse inside the batch (an operation the QP was not
 * created for, too many SGEs) is remembered and returned by wr_complete,
 * which then posts nothing. */
#include <stdlib.h>
#include <string.h>

#include "verbs_lib.h"

static struct vb_qp *qp_of(struct ibv_qp_ex *x) { return (struct vb_qp *)x; }

static bool grow(struct vb_wr_batch *b)
{
    unsigned cap = b->cap ? b->cap * 2 : 16;
    struct ibv_send_wr *wr = realloc(b->wr, cap * sizeof *wr);
    if (wr)
        b->wr = wr;
    struct ibv_sge *sge = realloc(b->sge, (size_t)cap * VB_WR_SGE * sizeof *sge);
    if (sge)
        b->sge = sge;
    size_t *off = realloc(b->inl_off, cap * sizeof *off);
    if (off)
        b->inl_off = off;
    if (!wr || !sge || !off)
        return false;
    b->cap = cap;
    return true;
}

static void misuse(struct vb_qp *q, int err, const char *fmt, const char *what)
{
    if (!q->batch.err) {
        q->batch.err = err;
        vb_say("ibv_wr_complete", err, fmt, what);
    }
}

/* A new request of the batch with the QP's wr_id and wr_flags, or NULL. */
static struct ibv_send_wr *add(struct vb_qp *q, enum ibv_wr_opcode op, uint64_t need,
                               const char *call)
{
    struct vb_wr_batch *b = &q->batch;
    if (!(q->send_ops & need)) {
        misuse(q, EINVAL, "%s: the QP was not created for it (send_ops_flags)", call);
        return NULL;
    }
    if (b->n == b->cap && !grow(b)) {
        misuse(q, ENOMEM, "%s", "out of memory for the batch");
        return NULL;
    }
    struct ibv_send_wr *w = &b->wr[b->n];
    memset(w, 0, sizeof *w);
    w->wr_id = q->ibv.wr_id;
    w->send_flags = q->ibv.wr_flags;
    w->opcode = op;
    b->inl_off[b->n] = SIZE_MAX;
    b->n++;
    return w;
}

/* The request the set_* calls fill, or NULL (misuse recorded). */
static struct ibv_send_wr *last(struct vb_qp *q, const char *call)
{
    if (!q->batch.n) {
        misuse(q, EINVAL, "%s before any ibv_wr_<operation>", call);
        return NULL;
    }
    return &q->batch.wr[q->batch.n - 1];
}

static void wr_start(struct ibv_qp_ex *x)
{
    struct vb_qp *q = qp_of(x);
    pthread_mutex_lock(&q->wr_lock);
    q->batch.n = 0;
    q->batch.inl_used = 0;
    q->batch.err = 0;
}

static void wr_send(struct ibv_qp_ex *x)
{
    add(qp_of(x), IBV_WR_SEND, IBV_QP_EX_WITH_SEND, "ibv_wr_send");
}

static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
    struct ibv_send_wr *w = add(qp_of(x), IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM,
                                 "ibv_wr_send_imm");
    if (w)
        w->imm_data = imm;
}

static void rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint64_t need, uint32_t rkey,
                 uint64_t addr, __be32 imm, const char *call)
{
    struct ibv_send_wr *w = add(qp_of(x), op, need, call);
    if (!w)
        return;
    w->wr.rdma.rkey = rkey;
    w->wr.rdma.remote_addr = addr;
    w->imm_data = imm;
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
    rdma(x, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE, rkey, addr, 0, "ibv_wr_rdma_write");
}

static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
    rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, rkey, addr, imm,
         "ibv_wr_rdma_write_imm");
}

static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
    rdma(x, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ, rkey, addr, 0, "ibv_wr_rdma_read");
}

static void atomic(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint64_t need, uint32_t rkey,
                   uint64_t addr, uint64_t compare_add, uint64_t swap, const char *call)
{
    struct ibv_send_wr *w = add(qp_of(x), op, need, call);
    if (!w)
        return;
    w->wr.atomic.rkey = rkey;
    w->wr.atomic.remote_addr = addr;
    w->wr.atomic.compare_add = compare_add;
    w->wr.atomic.swap = swap;
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t cmp,
                              uint64_t swap)
{
    atomic(x, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, rkey, addr, cmp, swap,
           "ibv_wr_atomic_cmp_swp");
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
    atomic(x, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, rkey, addr, add,
           0, "ibv_wr_atomic_fetch_add");
}

/* Refused at creation; if called anyway, the batch fails. */
static void not_here(struct ibv_qp_ex *x, const char *what)
{
    misuse(qp_of(x), EOPNOTSUPP, "%s: the soft device has no 8-byte atomic writes, memory "
           "windows, invalidation or TSO", what);
}
static void wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *wr)
{
    (void)rkey, (void)addr, (void)wr;
    not_here(x, "ibv_wr_atomic_write");
}
static void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey,
                       const struct ibv_mw_bind_info *info)
{
    (void)mw, (void)rkey, (void)info;
    not_here(x, "ibv_wr_bind_mw");
}
static void wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
    (void)rkey;
    not_here(x, "ibv_wr_local_inv");
}
static void wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
    (void)rkey;
    not_here(x, "ibv_wr_send_inv");
}
static void wr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
    (void)hdr, (void)hdr_sz, (void)mss;
    not_here(x, "ibv_wr_send_tso");
}
static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
    (void)srqn;
    not_here(x, "ibv_wr_set_xrc_srqn (XRC)");
}

static void wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
    struct ibv_send_wr *w = last(qp_of(x), "ibv_wr_set_ud_addr");
    if (!w)
        return;
    w->wr.ud.ah = ah;
    w->wr.ud.remote_qpn = qpn;
    w->wr.ud.remote_qkey = qkey;
}

static void wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *list)
{
    struct vb_qp *q = qp_of(x);
    struct ibv_send_wr *w = last(q, "ibv_wr_set_sge");
    if (!w)
        return;
    if (n > VB_WR_SGE) {
        misuse(q, EINVAL, "%s: more scatter/gather entries than the device's max_sge",
               "ibv_wr_set_sge_list");
        return;
    }
    memcpy(&q->batch.sge[(size_t)(q->batch.n - 1) * VB_WR_SGE], list, n * sizeof *list);
    w->num_sge = (int)n;
    w->send_flags &= ~(unsigned)IBV_SEND_INLINE;
    q->batch.inl_off[q->batch.n - 1] = SIZE_MAX;
}

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
    struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};
    wr_set_sge_list(x, 1, &s);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *bufs)
{
    struct vb_qp *q = qp_of(x);
    struct vb_wr_batch *b = &q->batch;
    struct ibv_send_wr *w = last(q, "ibv_wr_set_inline_data");
    if (!w)
        return;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += bufs[i].length;
    if (b->inl_used + total > b->inl_cap) {
        size_t cap = b->inl_cap ? b->inl_cap : 4096;
        while (cap < b->inl_used + total)
            cap *= 2;
        unsigned char *p = realloc(b->inl, cap);
        if (!p) {
            misuse(q, ENOMEM, "%s", "out of memory for inline data");
            return;
        }
        b->inl = p;
        b->inl_cap = cap;
    }
    b->inl_off[b->n - 1] = b->inl_used;
    for (size_t i = 0; i < n; i++) {
        memcpy(b->inl + b->inl_used, bufs[i].addr, bufs[i].length);
        b->inl_used += bufs[i].length;
    }
    w->send_flags |= IBV_SEND_INLINE;
    /* the one SGE is set at complete, when the inline buffer stops moving */
    w->num_sge = 1;
    w->sg_list = NULL;
    q->batch.sge[(size_t)(b->n - 1) * VB_WR_SGE].length = (uint32_t)total;
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
    struct ibv_data_buf one = {.addr = addr, .length = length};
    wr_set_inline_data_list(x, 1, &one);
}

static int wr_complete(struct ibv_qp_ex *x)
{
    struct vb_qp *q = qp_of(x);
    struct vb_wr_batch *b = &q->batch;
    int err = b->err;
    if (!err && b->n) {
        for (unsigned i = 0; i < b->n; i++) {
            struct ibv_send_wr *w = &b->wr[i];
            struct ibv_sge *s = &b->sge[(size_t)i * VB_WR_SGE];
            if (b->inl_off[i] != SIZE_MAX) {
                s->addr = (uintptr_t)(b->inl + b->inl_off[i]);
                s->lkey = 0;
            }
            w->sg_list = s;
            w->next = i + 1 < b->n ? &b->wr[i + 1] : NULL;
        }
        struct ibv_send_wr *bad;
        err = vb_post_send(&x->qp_base, b->wr, &bad);
    }
    b->n = 0;
    pthread_mutex_unlock(&q->wr_lock);
    return err;
}

static void wr_abort(struct ibv_qp_ex *x)
{
    struct vb_qp *q = qp_of(x);
    q->batch.n = 0;
    pthread_mutex_unlock(&q->wr_lock);
}

void vb_qp_ex_init(struct vb_qp *q, uint64_t send_ops)
{
    struct ibv_qp_ex *x = &q->ibv;
    q->is_ex = true;
    q->send_ops = send_ops;
    x->comp_mask = 0;
    x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x->wr_atomic_fetch_add = wr_atomic_fetch_add;
    x->wr_bind_mw = wr_bind_mw;
    x->wr_local_inv = wr_local_inv;
    x->wr_rdma_read = wr_rdma_read;
    x->wr_rdma_write = wr_rdma_write;
    x->wr_rdma_write_imm = wr_rdma_write_imm;
    x->wr_send = wr_send;
    x->wr_send_imm = wr_send_imm;
    x->wr_send_inv = wr_send_inv;
    x->wr_send_tso = wr_send_tso;
    x->wr_set_ud_addr = wr_set_ud_addr;
    x->wr_set_xrc_srqn = wr_set_xrc_srqn;
    x->wr_set_inline_data = wr_set_inline_data;
    x->wr_set_inline_data_list = wr_set_inline_data_list;
    x->wr_set_sge = wr_set_sge;
    x->wr_set_sge_list = wr_set_sge_list;
    x->wr_start = wr_start;
    x->wr_complete = wr_complete;
    x->wr_abort = wr_abort;
    x->wr_atomic_write = wr_atomic_write;
}

void vb_wr_batch_free(struct vb_wr_batch *b)
{
    free(b->wr);
    free(b->sge);
    free(b->inl);
    free(b->inl_off);
    memset(b, 0, sizeof *b);
}
