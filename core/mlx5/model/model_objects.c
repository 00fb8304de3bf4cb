/* model_objects.c - the device model's objects: UARs, PDs, MKEYs (PA and
 * MTT), the RoCE address table, EQs, CQs and QPs with the QP state machine.
 *
 * QP states (qpc.state, MLX5_QP_STATE_*) and the commands that move them;
 * any other command/state pair gets BAD_QP_STATE (0x10), syndrome
 * SYND_BAD_STATE, and leaves the QP as it was:
 *
 *   CREATE_QP    -> RST
 *   RST2INIT_QP  RST  -> INIT     (port 1, pkey index, remote access bits)
 *   INIT2RTR_QP  INIT -> RTR      (remote QPN, MTU, receive PSN, GID of a
 *                                  valid RoCE address table entry)
 *   RTR2RTS_QP   RTR  -> RTS      (send PSN, retry counts, ack timeout)
 *   2ERR_QP      any  -> ERR      (outstanding work completes flushed)
 *   2RST_QP      any  -> RST
 *   DESTROY_QP   any  -> gone
 *
 * Buffers (queues, CQ and EQ rings) must be one run of consecutive 4 KiB
 * pages on the bus: the model reads them through one DMA region. */
#include <errno.h>
#include <string.h>

#include "mlx5/cmdif.h"
#include "mlx5/model/model_int.h"
#include "util/util.h"

enum {
    PAGE = 4096,
    EQE_SIZE = 64,
    CQE_SIZE = 64,
    SQ_WQEBB = 64,               /* MLX5_SEND_WQE_BB */
    RQ_STRIDE_UNIT = 16,         /* log_rq_stride counts 16-byte units */
    MTT_FLAGS_MASK = 0x3,        /* mtt entry: rd_en bit 0, wr_en bit 1 */
    /* mkeys the wire does not back (PA mode, no soft device) take indexes
     * from here, apart from the soft device's MR indexes (small numbers) */
    MKEY_LOCAL_INDEX = 0x800000,
    MODEL_PORTS = 1,
    MAX_LOG_QUEUE = 16,
};

static int fail(struct model_cmd *c, uint32_t status, uint32_t synd)
{
    model_status(c, status, synd);
    return 1;
}
#define BAD_PARAM(c, s) fail((c), MLX5C_CMD_STAT_BAD_PARAM_ERR, (s))
#define BAD_RES(c) fail((c), MLX5C_CMD_STAT_BAD_RES_ERR, SYND_BAD_RESOURCE)
#define NO_RES(c) fail((c), MLX5C_CMD_STAT_NO_RES_ERR, SYND_NO_RESOURCE)

static int lengths(struct model_cmd *c, uint32_t in, uint32_t out)
{
    if (c->inlen < in)
        return fail(c, MLX5C_CMD_STAT_BAD_INP_LEN_ERR, SYND_INLEN);
    if (c->outlen < out)
        return fail(c, MLX5C_CMD_STAT_BAD_OUTP_LEN_ERR, SYND_OUTLEN);
    return 0;
}
#define LENGTHS(c, s) lengths((c), MLX5S_##s##_in, MLX5S_##s##_out)

/* A buffer given as a PAS list of npages consecutive pages: its virtual
 * address, or NULL. */
static uint8_t *pas_buffer(struct model *m, const uint8_t *pas, uint32_t npages)
{
    uint64_t first = ld_be64(pas);
    if (first & (PAGE - 1))
        return NULL;
    for (uint32_t i = 1; i < npages; i++)
        if (ld_be64(pas + 8 * i) != first + (uint64_t)i * PAGE)
            return NULL;
    return model_dma(m, first, (size_t)npages * PAGE);
}

static int pas_fits(struct model_cmd *c, uint32_t fixed, uint64_t npages)
{
    return npages <= UINT32_MAX / 8 && c->inlen >= fixed + 8ull * npages;
}

static uint32_t pages_for(uint64_t bytes) { return (uint32_t)((bytes + PAGE - 1) / PAGE); }

/* Pages of an MTT mkey, in 64 bits: a 2^44-byte length needs 2^32 of them,
 * which a uint32_t would wrap to 0 (an mkey of any length on one page). */
static uint64_t pages_for64(uint64_t bytes) { return bytes / PAGE + (bytes % PAGE != 0); }

static int uar_ok(struct model *m, uint32_t uar)
{
    uint32_t i = uar - MODEL_UAR_BASE;
    return i < MODEL_MAX_UARS && m->uar_used[i];
}

static int pd_ok(struct model *m, uint32_t pd) { return pd > 0 && pd < MODEL_MAX_PDS && m->pd_used[pd]; }

/* ---- MKEY ------------------------------------------------------------------- */
static int create_mkey(struct model *m, struct model_cmd *c)
{
    if (LENGTHS(c, create_mkey))
        return 1;
    const uint8_t *mkc = c->in + IBYTE(create_mkey_in, memory_key_mkey_entry);
    struct model_mkey k = {0};
    k.pd = IGET(mkc, mkc, pd);
    k.access_mode = (int)(IGET(mkc, mkc, access_mode_4_2) << 2 | IGET(mkc, mkc, access_mode_1_0));
    k.lr = (int)IGET(mkc, mkc, lr);
    k.lw = (int)IGET(mkc, mkc, lw);
    k.rr = (int)IGET(mkc, mkc, rr);
    k.rw = (int)IGET(mkc, mkc, rw);
    k.length64 = (int)IGET(mkc, mkc, length64);
    k.start = IGET64(mkc, mkc, start_addr);
    k.len = IGET64(mkc, mkc, len);
    if (!pd_ok(m, k.pd))
        return BAD_RES(c);
    if (k.access_mode == MLX5C_MKC_ACCESS_MODE_MTT) {
        uint32_t log_pg = IGET(mkc, mkc, log_page_size);
        uint64_t n = (uint64_t)IGET(c->in, create_mkey_in, translations_octword_actual_size) * 2;
        if (log_pg != 12 || k.len == 0 || k.length64 || k.len > UINT64_MAX - k.start)
            return BAD_PARAM(c, SYND_BAD_PARAM);
        uint64_t first = k.start & ~(uint64_t)(PAGE - 1);
        uint64_t need = pages_for64(k.start + k.len - first);
        /* every page of the length in the table, the table in the input */
        if (n < need || !pas_fits(c, MLX5S_create_mkey_in, need))
            return fail(c, MLX5C_CMD_STAT_BAD_INP_LEN_ERR, SYND_INLEN);
        const uint8_t *mtt = c->in + MLX5S_create_mkey_in;
        uint8_t *base = model_dma(m, ld_be64(mtt) & ~(uint64_t)MTT_FLAGS_MASK, PAGE);
        for (uint64_t i = 0; base && i < need; i++)
            if (model_dma(m, ld_be64(mtt + 8 * i) & ~(uint64_t)MTT_FLAGS_MASK, PAGE) !=
                base + i * PAGE)
                base = NULL; /* the model wants virtually consecutive pages */
        if (!base)
            return BAD_PARAM(c, SYND_BAD_ADDRESS);
        k.virt = base + (k.start - first);
        k.mapped = need * PAGE - (k.start - first);
    } else if (k.access_mode == MLX5C_MKC_ACCESS_MODE_PA) {
        k.virt = NULL; /* bus addresses, translated per access */
    } else {
        return BAD_PARAM(c, SYND_UNSUPPORTED);
    }
    int slot = -1;
    for (int i = 0; i < MODEL_MAX_MKEYS && slot < 0; i++)
        if (!m->mkeys[i].used)
            slot = i;
    if (slot < 0)
        return NO_RES(c);
    k.index = (uint32_t)slot + MKEY_LOCAL_INDEX;
    k.key = k.index << 8 | IGET(mkc, mkc, mkey_7_0);
    k.used = 1;
    if (k.virt && model_data_mkey_create(m, &k) < 0)
        return fail(c, MLX5C_CMD_STAT_NO_RES_ERR, SYND_SOFT);
    m->mkeys[slot] = k;
    ISET(c->out, create_mkey_out, mkey_index, m->mkeys[slot].key >> 8);
    return 1;
}

static int destroy_mkey(struct model *m, struct model_cmd *c)
{
    if (LENGTHS(c, destroy_mkey))
        return 1;
    uint32_t idx = IGET(c->in, destroy_mkey_in, mkey_index);
    for (int i = 0; i < MODEL_MAX_MKEYS; i++)
        if (m->mkeys[i].used && m->mkeys[i].key >> 8 == idx) {
            model_data_mkey_destroy(m, &m->mkeys[i]);
            memset(&m->mkeys[i], 0, sizeof m->mkeys[i]);
            return 1;
        }
    return BAD_RES(c);
}

static int query_mkey(struct model *m, struct model_cmd *c)
{
    if (LENGTHS(c, query_mkey))
        return 1;
    uint32_t idx = IGET(c->in, query_mkey_in, mkey_index);
    for (int i = 0; i < MODEL_MAX_MKEYS; i++) {
        struct model_mkey *k = &m->mkeys[i];
        if (!k->used || k->key >> 8 != idx)
            continue;
        uint8_t *mkc = c->out + IBYTE(query_mkey_out, memory_key_mkey_entry);
        ISET(mkc, mkc, mkey_7_0, k->key & 0xff);
        ISET(mkc, mkc, pd, k->pd);
        ISET(mkc, mkc, access_mode_1_0, (uint32_t)k->access_mode & 3);
        ISET(mkc, mkc, lr, (uint32_t)k->lr);
        ISET(mkc, mkc, lw, (uint32_t)k->lw);
        ISET(mkc, mkc, rr, (uint32_t)k->rr);
        ISET(mkc, mkc, rw, (uint32_t)k->rw);
        ISET(mkc, mkc, length64, (uint32_t)k->length64);
        ISET64(mkc, mkc, start_addr, k->start);
        ISET64(mkc, mkc, len, k->len);
        return 1;
    }
    return BAD_RES(c);
}

/* ---- EQ / CQ ---------------------------------------------------------------- */
static int create_eq(struct model *m, struct model_cmd *c)
{
    if (LENGTHS(c, create_eq))
        return 1;
    const uint8_t *eqc = c->in + IBYTE(create_eq_in, eq_context_entry);
    uint32_t log = IGET(eqc, eqc, log_eq_size), uar = IGET(eqc, eqc, uar_page);
    uint32_t intr = IGET(eqc, eqc, intr), np = pages_for((uint64_t)EQE_SIZE << log);
    if (log > MAX_LOG_QUEUE || intr >= MODEL_IRQ_VECTORS || IGET(eqc, eqc, log_page_size))
        return BAD_PARAM(c, SYND_BAD_PARAM);
    if (!uar_ok(m, uar))
        return BAD_RES(c);
    if (!pas_fits(c, MLX5S_create_eq_in, np))
        return fail(c, MLX5C_CMD_STAT_BAD_INP_LEN_ERR, SYND_INLEN);
    uint8_t *buf = pas_buffer(m, c->in + MLX5S_create_eq_in, np);
    if (!buf)
        return BAD_PARAM(c, SYND_BAD_ADDRESS);
    for (int i = 0; i < MODEL_MAX_EQS; i++)
        if (!m->eqs[i].used) {
            m->eqs[i] = (struct model_eq){.used = 1, .eqn = MODEL_EQN_BASE + (uint32_t)i,
                                          .log_size = log, .uar = uar, .intr = intr, .buf = buf};
            ISET(c->out, create_eq_out, eq_number, m->eqs[i].eqn);
            return 1;
        }
    return NO_RES(c);
}

static int create_cq(struct model *m, struct model_cmd *c)
{
    if (LENGTHS(c, create_cq))
        return 1;
    const uint8_t *cqc = c->in + IBYTE(create_cq_in, cq_context);
    uint32_t log = IGET(cqc, cqc, log_cq_size), np = pages_for((uint64_t)CQE_SIZE << log);
    if (log > MAX_LOG_QUEUE || IGET(cqc, cqc, cqe_sz) != 0 || IGET(cqc, cqc, log_page_size))
        return BAD_PARAM(c, SYND_BAD_PARAM);
    struct model_eq *eq = model_eq_find(m, IGET(cqc, cqc, c_eqn_or_apu_element));
    if (!eq || !uar_ok(m, IGET(cqc, cqc, uar_page)))
        return BAD_RES(c);
    if (!pas_fits(c, MLX5S_create_cq_in, np))
        return fail(c, MLX5C_CMD_STAT_BAD_INP_LEN_ERR, SYND_INLEN);
    uint8_t *buf = pas_buffer(m, c->in + MLX5S_create_cq_in, np);
    uint8_t *dbr = model_dma(m, IGET64(cqc, cqc, dbr_addr), 8);
    if (!buf || !dbr)
        return BAD_PARAM(c, SYND_BAD_ADDRESS);
    for (int i = 0; i < MODEL_MAX_CQS; i++)
        if (!m->cqs[i].used) {
            m->cqs[i] = (struct model_cq){.used = 1, .cqn = MODEL_CQN_BASE + (uint32_t)i,
                                          .log_size = log, .uar = IGET(cqc, cqc, uar_page),
                                          .eqn = eq->eqn, .buf = buf, .dbr = dbr};
            ISET(c->out, create_cq_out, cqn, m->cqs[i].cqn);
            return 1;
        }
    return NO_RES(c);
}

/* ---- QP ----------------------------------------------------------------------- */
static int create_qp(struct model *m, struct model_cmd *c)
{
    if (LENGTHS(c, create_qp))
        return 1;
    const uint8_t *in = c->in;
#define Q(f) IGET(in, create_qp_in, qpc_##f)
    struct model_qp q = {.used = 1, .state = MLX5C_QP_STATE_RST, .st = Q(st), .pd = Q(pd),
                         .uar = Q(uar_page), .cqn_snd = Q(cqn_snd), .cqn_rcv = Q(cqn_rcv),
                         .log_rq_size = Q(log_rq_size), .log_rq_stride = Q(log_rq_stride),
                         .log_sq_size = Q(log_sq_size)};
    if (q.st != MLX5C_QP_ST_RC && q.st != MLX5C_QP_ST_UC)
        return BAD_PARAM(c, SYND_UNSUPPORTED);
    if (Q(log_page_size) || Q(page_offset) || q.log_sq_size > MAX_LOG_QUEUE ||
        q.log_rq_size > MAX_LOG_QUEUE || Q(rq_type) != 0)
        return BAD_PARAM(c, SYND_BAD_PARAM);
    if (!pd_ok(m, q.pd) || !uar_ok(m, q.uar))
        return BAD_RES(c);
    struct model_cq *scq = model_cq_find(m, q.cqn_snd), *rcq = model_cq_find(m, q.cqn_rcv);
    if (!scq || !rcq)
        return BAD_RES(c);
    uint64_t rq_bytes = (uint64_t)RQ_STRIDE_UNIT << q.log_rq_stride << q.log_rq_size;
    uint64_t sq_bytes = (uint64_t)SQ_WQEBB << q.log_sq_size;
    uint32_t np = pages_for(rq_bytes + sq_bytes);
    if (!pas_fits(c, MLX5S_create_qp_in, np))
        return fail(c, MLX5C_CMD_STAT_BAD_INP_LEN_ERR, SYND_INLEN);
    q.rq = pas_buffer(m, in + MLX5S_create_qp_in, np);
    q.dbr = model_dma(m, IGET64(in, create_qp_in, qpc_dbr_addr), 8);
#undef Q
    if (!q.rq || !q.dbr)
        return BAD_PARAM(c, SYND_BAD_ADDRESS);
    q.sq = q.rq + rq_bytes;
    int slot = -1;
    for (int i = 0; i < MODEL_MAX_QPS && slot < 0; i++)
        if (!m->qps[i].used)
            slot = i;
    if (slot < 0)
        return NO_RES(c);
    m->qps[slot] = q;
    if (model_data_qp_create(m, &m->qps[slot]) < 0) {
        memset(&m->qps[slot], 0, sizeof m->qps[slot]);
        return fail(c, MLX5C_CMD_STAT_NO_RES_ERR, SYND_SOFT);
    }
    scq->refs++;
    rcq->refs++;
    ISET(c->out, create_qp_out, qpn, m->qps[slot].qpn);
    return 1;
}

static int modify_qp(struct model *m, struct model_cmd *c, int from, int to)
{
    /* The five modify commands share the rst2init layout up to the qpc. */
    uint32_t in_size = (to == MLX5C_QP_STATE_ERR || to == MLX5C_QP_STATE_RST) ? MLX5S_qp_2rst_in
                                                                              : MLX5S_rst2init_qp_in;
    if (lengths(c, in_size, MLX5S_rst2init_qp_out))
        return 1;
    struct model_qp *q = model_qp_find(m, IGET(c->in, qp_2rst_in, qpn));
    if (!q)
        return BAD_RES(c);
    if (from >= 0 && q->state != from)
        return fail(c, MLX5C_CMD_STAT_BAD_QP_STATE_ERR, SYND_BAD_STATE);
    const uint8_t *qpc = c->in + IBYTE(rst2init_qp_in, qpc);
    if (to == MLX5C_QP_STATE_INIT && IGET(qpc, qpc, primary_address_path_vhca_port_num) != MODEL_PORTS)
        return BAD_PARAM(c, SYND_BAD_PARAM);
    if (to == MLX5C_QP_STATE_RTR) {
        uint32_t sgid = IGET(qpc, qpc, primary_address_path_src_addr_index);
        if (sgid >= MODEL_ROCE_ENTRIES || !m->roce[sgid].valid || !IGET(qpc, qpc, mtu))
            return BAD_PARAM(c, SYND_BAD_PARAM);
        q->remote_qpn = IGET(qpc, qpc, remote_qpn);
    }
    uint32_t synd = 0;
    if (model_data_qp_modify(m, q, to, qpc, &synd) < 0)
        return fail(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, synd ? synd : SYND_SOFT);
    q->state = to;
    return 1;
}

static int destroy_qp(struct model *m, struct model_cmd *c)
{
    if (LENGTHS(c, destroy_qp))
        return 1;
    struct model_qp *q = model_qp_find(m, IGET(c->in, destroy_qp_in, qpn));
    if (!q)
        return BAD_RES(c);
    model_data_qp_destroy(m, q);
    struct model_cq *scq = model_cq_find(m, q->cqn_snd), *rcq = model_cq_find(m, q->cqn_rcv);
    if (scq)
        scq->refs--;
    if (rcq)
        rcq->refs--;
    memset(q, 0, sizeof *q);
    return 1;
}

/* ---- small objects ------------------------------------------------------------- */
static int alloc_index(struct model_cmd *c, int *used, int n, uint32_t base, uint32_t *out)
{
    for (int i = 0; i < n; i++)
        if (!used[i]) {
            used[i] = 1;
            *out = base + (uint32_t)i;
            return 0;
        }
    return NO_RES(c);
}

static int roce_address(struct model *m, struct model_cmd *c, int set)
{
    if (set ? LENGTHS(c, set_roce_address) : LENGTHS(c, query_roce_address))
        return 1;
    uint32_t idx = IGET(c->in, set_roce_address_in, roce_address_index);
    uint32_t port = IGET(c->in, set_roce_address_in, vhca_port_num);
    if (idx >= MODEL_ROCE_ENTRIES || port > MODEL_PORTS)
        return BAD_PARAM(c, SYND_BAD_PARAM);
    struct model_roce *r = &m->roce[idx];
    if (set) {
        const uint8_t *a = c->in + IBYTE(set_roce_address_in, roce_address);
        static const uint8_t zero[16];
        memset(r, 0, sizeof *r);
        memcpy(r->gid, a, 16);
        r->version = (int)IGET(a, roce_addr_layout, roce_version);
        r->l3_type = (int)IGET(a, roce_addr_layout, roce_l3_type);
        st_be32(r->mac + 2, IGET(a, roce_addr_layout, source_mac_31_0));
        uint32_t hi = IGET(a, roce_addr_layout, source_mac_47_32);
        r->mac[0] = (uint8_t)(hi >> 8);
        r->mac[1] = (uint8_t)hi;
        r->valid = memcmp(r->gid, zero, 16) != 0;
        return 1;
    }
    uint8_t *a = c->out + IBYTE(query_roce_address_out, roce_address);
    if (r->valid) {
        memcpy(a, r->gid, 16);
        ISET(a, roce_addr_layout, roce_version, (uint32_t)r->version);
        ISET(a, roce_addr_layout, roce_l3_type, (uint32_t)r->l3_type);
        ISET(a, roce_addr_layout, source_mac_47_32, (uint32_t)r->mac[0] << 8 | r->mac[1]);
        ISET(a, roce_addr_layout, source_mac_31_0, ld_be32(r->mac + 2));
    }
    return 1;
}

static int free_index(struct model_cmd *c, int *used, int n, uint32_t base, uint32_t v)
{
    uint32_t i = v - base;
    if (i >= (uint32_t)n || !used[i])
        return BAD_RES(c);
    used[i] = 0;
    return 1;
}

int model_objects_cmd(struct model *m, struct model_cmd *c)
{
    switch (c->opcode) {
    case MLX5OP_ALLOC_UAR: case MLX5OP_DEALLOC_UAR: case MLX5OP_ALLOC_PD: case MLX5OP_DEALLOC_PD:
    case MLX5OP_CREATE_MKEY: case MLX5OP_DESTROY_MKEY: case MLX5OP_QUERY_SPECIAL_CONTEXTS:
    case MLX5OP_QUERY_MKEY:
    case MLX5OP_SET_ROCE_ADDRESS: case MLX5OP_QUERY_ROCE_ADDRESS: case MLX5OP_CREATE_EQ:
    case MLX5OP_DESTROY_EQ: case MLX5OP_CREATE_CQ: case MLX5OP_DESTROY_CQ: case MLX5OP_CREATE_QP:
    case MLX5OP_DESTROY_QP: case MLX5OP_RST2INIT_QP: case MLX5OP_INIT2RTR_QP:
    case MLX5OP_RTR2RTS_QP: case MLX5OP_2ERR_QP: case MLX5OP_2RST_QP: case MLX5OP_QUERY_QP:
        break;
    default:
        return 0;
    }
    if (!m->initialized)
        return fail(c, MLX5C_CMD_STAT_BAD_SYS_STATE_ERR, SYND_NOT_INIT);
    uint32_t v;
    switch (c->opcode) {
    case MLX5OP_ALLOC_UAR:
        if (!LENGTHS(c, alloc_uar) && !alloc_index(c, m->uar_used, MODEL_MAX_UARS, MODEL_UAR_BASE, &v))
            ISET(c->out, alloc_uar_out, uar, v);
        return 1;
    case MLX5OP_DEALLOC_UAR:
        return LENGTHS(c, dealloc_uar) ||
               free_index(c, m->uar_used, MODEL_MAX_UARS, MODEL_UAR_BASE, IGET(c->in, dealloc_uar_in, uar));
    case MLX5OP_ALLOC_PD:
        /* PD 0 is never handed out. */
        if (!LENGTHS(c, alloc_pd) && !alloc_index(c, m->pd_used + 1, MODEL_MAX_PDS - 1, 1, &v))
            ISET(c->out, alloc_pd_out, pd, v);
        return 1;
    case MLX5OP_DEALLOC_PD: {
        if (LENGTHS(c, dealloc_pd))
            return 1;
        uint32_t pd = IGET(c->in, dealloc_pd_in, pd);
        if (pd == 0 || !pd_ok(m, pd))
            return BAD_RES(c);
        m->pd_used[pd] = 0;
        return 1;
    }
    case MLX5OP_CREATE_MKEY: return create_mkey(m, c);
    case MLX5OP_DESTROY_MKEY: return destroy_mkey(m, c);
    case MLX5OP_QUERY_MKEY: return query_mkey(m, c);
    case MLX5OP_QUERY_SPECIAL_CONTEXTS:
        if (!LENGTHS(c, query_special_contexts))
            ISET(c->out, query_special_contexts_out, terminate_scatter_list_mkey, MLX5C_INVALID_LKEY);
        return 1;
    case MLX5OP_SET_ROCE_ADDRESS: return roce_address(m, c, 1);
    case MLX5OP_QUERY_ROCE_ADDRESS: return roce_address(m, c, 0);
    case MLX5OP_CREATE_EQ: return create_eq(m, c);
    case MLX5OP_DESTROY_EQ: {
        if (LENGTHS(c, destroy_eq))
            return 1;
        struct model_eq *eq = model_eq_find(m, IGET(c->in, destroy_eq_in, eq_number));
        if (!eq)
            return BAD_RES(c);
        for (int i = 0; i < MODEL_MAX_CQS; i++)
            if (m->cqs[i].used && m->cqs[i].eqn == eq->eqn)
                return fail(c, MLX5C_CMD_STAT_RES_BUSY, SYND_IN_USE);
        memset(eq, 0, sizeof *eq);
        return 1;
    }
    case MLX5OP_CREATE_CQ: return create_cq(m, c);
    case MLX5OP_DESTROY_CQ: {
        if (LENGTHS(c, destroy_cq))
            return 1;
        struct model_cq *cq = model_cq_find(m, IGET(c->in, destroy_cq_in, cqn));
        if (!cq)
            return BAD_RES(c);
        if (cq->refs)
            return fail(c, MLX5C_CMD_STAT_RES_BUSY, SYND_IN_USE);
        memset(cq, 0, sizeof *cq);
        return 1;
    }
    case MLX5OP_CREATE_QP: return create_qp(m, c);
    case MLX5OP_DESTROY_QP: return destroy_qp(m, c);
    case MLX5OP_RST2INIT_QP: return modify_qp(m, c, MLX5C_QP_STATE_RST, MLX5C_QP_STATE_INIT);
    case MLX5OP_INIT2RTR_QP: return modify_qp(m, c, MLX5C_QP_STATE_INIT, MLX5C_QP_STATE_RTR);
    case MLX5OP_RTR2RTS_QP: return modify_qp(m, c, MLX5C_QP_STATE_RTR, MLX5C_QP_STATE_RTS);
    case MLX5OP_2ERR_QP: return modify_qp(m, c, -1, MLX5C_QP_STATE_ERR);
    case MLX5OP_2RST_QP: return modify_qp(m, c, -1, MLX5C_QP_STATE_RST);
    case MLX5OP_QUERY_QP: {
        if (LENGTHS(c, query_qp))
            return 1;
        struct model_qp *q = model_qp_find(m, IGET(c->in, query_qp_in, qpn));
        if (!q)
            return BAD_RES(c);
        ISET(c->out, query_qp_out, qpc_state, (uint32_t)q->state);
        ISET(c->out, query_qp_out, qpc_st, q->st);
        ISET(c->out, query_qp_out, qpc_pd, q->pd);
        ISET(c->out, query_qp_out, qpc_remote_qpn, q->remote_qpn);
        ISET(c->out, query_qp_out, qpc_cqn_snd, q->cqn_snd);
        ISET(c->out, query_qp_out, qpc_cqn_rcv, q->cqn_rcv);
        ISET(c->out, query_qp_out, qpc_hw_sq_wqebb_counter, q->sq_head & 0xffff);
        return 1;
    }
    }
    return 0;
}

/* Drop everything (model destruction): soft objects first, QPs before MRs. */
void model_objects_reset(struct model *m)
{
    for (int i = 0; i < MODEL_MAX_QPS; i++)
        if (m->qps[i].used)
            model_data_qp_destroy(m, &m->qps[i]);
    for (int i = 0; i < MODEL_MAX_MKEYS; i++)
        if (m->mkeys[i].used)
            model_data_mkey_destroy(m, &m->mkeys[i]);
    memset(m->qps, 0, sizeof m->qps);
    memset(m->mkeys, 0, sizeof m->mkeys);
}
