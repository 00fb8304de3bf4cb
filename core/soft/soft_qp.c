/* soft_qp.c - queue pairs of the soft device: creation limits, the state
 * machine with its required attributes, ERR flushing and destruction.
 *
 * Queue pair states and the transitions modify_qp allows (IB spec 10.3,
 * as the kernel's ib_modify_qp_is_ok enforces them):
 *
 *   RESET -> INIT    needs PKEY_INDEX, PORT, and ACCESS_FLAGS (RC/UC) or QKEY (UD)
 *   INIT  -> INIT    optional: PKEY_INDEX, PORT, ACCESS_FLAGS, QKEY
 *   INIT  -> RTR     RC: AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC,
 *                        MIN_RNR_TIMER;  UC: AV, PATH_MTU, DEST_QPN, RQ_PSN;
 *                    UD: nothing more
 *   RTR   -> RTS     RC: SQ_PSN, TIMEOUT, RETRY_CNT, RNR_RETRY, MAX_QP_RD_ATOMIC;
 *                    UC/UD: SQ_PSN
 *   RTS   -> RTS     optional attributes only
 *   any   -> RESET   discards all outstanding work, no completions
 *   any   -> ERR     flushes all outstanding work with IBV_WC_WR_FLUSH_ERR
 *
 * Everything else (RESET -> RTR, INIT -> RTS, RTR -> INIT, ...) is EINVAL,
 * and so is a missing required attribute. On top of the spec, the soft
 * device refuses RTR on a DOWN port (ENETDOWN) and towards a GID its wire
 * cannot reach (EHOSTUNREACH), with a message saying so, because on real
 * hardware those cases fail silently later. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

/* The shared block: header, receive queue, then the send queue. */
static size_t sq_offset(uint32_t rq_cap)
{
    size_t off = sizeof(struct soft_qp_shared) + (size_t)rq_cap * sizeof(struct soft_rqe);
    return (off + 63) & ~(size_t)63;
}

static size_t qp_bytes(uint32_t rq_cap, uint32_t sq_cap)
{
    return sq_offset(rq_cap) + (size_t)sq_cap * sizeof(struct soft_swr);
}

int soft_create_qp(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out)
{
    struct soft_dev *sd = soft_of(pd->dev);
    const struct soft_personality *p = sd->p;
    tbrt_dev *dev = pd->dev;
    int t = init->qp_type;
    if (t < 0 || t > 31 || !(p->qp_types & (1u << t))) {
        if (p->flavor == TBRT_FLAVOR_APPLE)
            return dev_fail(dev, EOPNOTSUPP,
                            "create_qp: %s queue pairs are not supported; Apple's provider "
                            "only has UC (TN3205)", dev_qp_type_name(t));
        return dev_fail(dev, EOPNOTSUPP, "create_qp: %s queue pairs are not supported",
                        dev_qp_type_name(t));
    }
    if (sd->nqp >= p->max_qp)
        return dev_fail(dev, ENOMEM, "create_qp: at most %d queue pairs per device%s", p->max_qp,
                        p->flavor == TBRT_FLAVOR_APPLE ? " (TN3205)" : "");
    struct ibv_qp_cap *cap = &init->cap;
    const char *unit = p->depth_in_frames ? " 4 KiB frames" : " work requests";
    if (cap->max_send_wr < 1 || cap->max_send_wr > p->max_qp_wr)
        return dev_fail(dev, EINVAL, "create_qp: max_send_wr %u out of range 1..%u%s%s",
                        cap->max_send_wr, p->max_qp_wr, unit,
                        p->depth_in_frames ? " (TN3205 counts queue depth in frames)" : "");
    if (cap->max_recv_wr < 1 || cap->max_recv_wr > p->max_qp_wr)
        return dev_fail(dev, EINVAL, "create_qp: max_recv_wr %u out of range 1..%u%s%s",
                        cap->max_recv_wr, p->max_qp_wr, unit,
                        p->depth_in_frames ? " (TN3205 counts queue depth in frames)" : "");
    if (cap->max_send_sge > SOFT_MAX_SGE || cap->max_recv_sge > SOFT_MAX_SGE)
        return dev_fail(dev, EINVAL, "create_qp: at most %d scatter/gather entries", SOFT_MAX_SGE);
    if (cap->max_inline_data > 256)
        return dev_fail(dev, EINVAL, "create_qp: max_inline_data %u > 256", cap->max_inline_data);
    struct soft_qp *q = calloc(1, sizeof *q);
    if (!q)
        return dev_fail(dev, ENOMEM, "create_qp: out of memory");
    uint32_t sq_cap = cap->max_send_wr, rq_cap = cap->max_recv_wr;
    q->sh = soft_ctx_alloc(sd, qp_bytes(rq_cap, sq_cap), &q->sh_off);
    if (!q->sh) {
        free(q);
        return dev_fail(dev, ENOMEM, "create_qp: device context full");
    }
    uint32_t qpn;
    int rc = soft_slot_alloc(sd, q->sh_off, (uint32_t)t, &qpn);
    if (rc) {
        soft_ctx_release(sd, q->sh_off, qp_bytes(rq_cap, sq_cap));
        free(q);
        return rc;
    }
    q->sh->qp_type = (uint32_t)t;
    q->sh->rq_cap = rq_cap;
    q->sh->sq_cap = sq_cap;
    q->sh->sq_off = sq_offset(rq_cap);
    q->sh->recv_cq_off = ((struct soft_cq *)init->recv_cq)->sh_off;
    q->sh->send_cq_off = ((struct soft_cq *)init->send_cq)->sh_off;
    q->sh->mtu = (uint8_t)p->mtu;
    q->sh->dev_index = (uint8_t)sd->index;
    q->sh->pd = pd->handle;
    atomic_store(&q->sh->state, IBV_QPS_RESET);
    q->sh->qpn = qpn;
    q->sd = sd;
    q->mtu = p->mtu;
    q->sq_sig_all = init->sq_sig_all != 0;
    if (cap->max_send_sge == 0)
        cap->max_send_sge = 1;
    if (cap->max_recv_sge == 0)
        cap->max_recv_sge = 1;
    q->qp = (tbrt_qp){.dev = dev, .pd = pd, .qp_num = qpn, .qp_type = t, .state = IBV_QPS_RESET,
                      .send_cq = init->send_cq, .recv_cq = init->recv_cq, .cap = *cap};
    q->next = sd->qps;
    sd->qps = q;
    sd->nqp++;
    *out = &q->qp;
    return 0;
}

/* Required and allowed attributes per transition, by QP type. */
struct transition {
    int from, to;
    int rc_req, uc_req, ud_req;
    int opt;
};

static const struct transition transitions[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, 0, 0,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, 0,
     IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY | IBV_QP_ALT_PATH},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
         IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_SQ_PSN, IBV_QP_SQ_PSN,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_QKEY |
         IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
    {IBV_QPS_RTS, IBV_QPS_RTS, 0, 0, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_QKEY |
         IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
};

static const char *mask_names(int mask, char *buf, size_t len)
{
    static const struct { int bit; const char *name; } names[] = {
        {IBV_QP_STATE, "STATE"}, {IBV_QP_CUR_STATE, "CUR_STATE"},
        {IBV_QP_EN_SQD_ASYNC_NOTIFY, "EN_SQD_ASYNC_NOTIFY"}, {IBV_QP_ACCESS_FLAGS, "ACCESS_FLAGS"},
        {IBV_QP_PKEY_INDEX, "PKEY_INDEX"}, {IBV_QP_PORT, "PORT"}, {IBV_QP_QKEY, "QKEY"},
        {IBV_QP_AV, "AV"}, {IBV_QP_PATH_MTU, "PATH_MTU"}, {IBV_QP_TIMEOUT, "TIMEOUT"},
        {IBV_QP_RETRY_CNT, "RETRY_CNT"}, {IBV_QP_RNR_RETRY, "RNR_RETRY"},
        {IBV_QP_RQ_PSN, "RQ_PSN"}, {IBV_QP_MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"},
        {IBV_QP_ALT_PATH, "ALT_PATH"}, {IBV_QP_MIN_RNR_TIMER, "MIN_RNR_TIMER"},
        {IBV_QP_SQ_PSN, "SQ_PSN"}, {IBV_QP_MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"},
        {IBV_QP_PATH_MIG_STATE, "PATH_MIG_STATE"}, {IBV_QP_CAP, "CAP"},
        {IBV_QP_DEST_QPN, "DEST_QPN"},
    };
    buf[0] = 0;
    for (size_t i = 0; i < TBRT_ARRAY_LEN(names); i++)
        if (mask & names[i].bit)
            str_append(buf, len, "%s%s", buf[0] ? "|" : "", names[i].name);
    return buf;
}

static void flush_rq(struct soft_qp *q)
{
    struct soft_qp_shared *s = q->sh;
    struct soft_cq_shared *rcq = ((struct soft_cq *)q->qp.recv_cq)->sh;
    for (;;) {
        uint64_t c = atomic_load(&s->rq_cons);
        if (c >= atomic_load(&s->rq_prod))
            break;
        struct soft_rqe r;
        soft_rqe_copy(&r, &s->rq[c % s->rq_cap]);
        if (!atomic_compare_exchange_strong(&s->rq_cons, &c, c + 1))
            continue;
        q->rq_frames_done += r.frames;
        struct ibv_wc wc = {.wr_id = r.wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                            .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_FLUSH,
                            .qp_num = q->qp.qp_num};
        soft_cq_push(q->sd, rcq, &wc);
    }
}

/* Take the send queue's lock even from a peer that is running it right now
 * (it lets go within one send), bounded. */
static bool sq_lock_wait(struct soft_dev *sd, struct soft_qp_shared *s)
{
    uint64_t until = now_ns() + 100000000ull;
    while (!soft_sq_lock(sd, s, true))
        if (now_ns() > until)
            return false;
    return true;
}

static void flush_sq(struct soft_qp *q)
{
    struct soft_qp_shared *s = q->sh;
    struct soft_cq_shared *scq = ((struct soft_cq *)q->qp.send_cq)->sh;
    bool locked = sq_lock_wait(q->sd, s);
    uint64_t h = atomic_load(&s->sq_head), t = atomic_load(&s->sq_tail);
    for (; h < t; h++) {
        struct soft_swr *w = &soft_sq(s)[h % s->sq_cap];
        struct ibv_wc wc = {.wr_id = w->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                            .opcode = IBV_WC_SEND, .vendor_err = SOFT_VERR_FLUSH,
                            .qp_num = q->qp.qp_num};
        soft_cq_push(q->sd, scq, &wc);
    }
    atomic_store(&s->sq_head, t);
    if (locked)
        soft_sq_unlock(s);
}

void soft_qp_to_err(struct soft_qp *q)
{
    q->qp.state = IBV_QPS_ERR;
    atomic_store(&q->sh->state, IBV_QPS_ERR);
    flush_sq(q);
    flush_rq(q);
}

void soft_check_attention(struct soft_dev *sd)
{
    uint64_t a = atomic_load_explicit(&sd->ctx->attention, memory_order_acquire);
    if (TBRT_LIKELY(a == sd->attention_seen))
        return;
    sd->attention_seen = a;
    for (struct soft_qp *q = sd->qps; q; q = q->next)
        if (atomic_load(&q->sh->remote_err) && q->qp.state != IBV_QPS_ERR &&
            q->qp.state != IBV_QPS_RESET)
            soft_qp_to_err(q);
}

static void to_reset(struct soft_qp *q)
{
    bool locked = sq_lock_wait(q->sd, q->sh);
    atomic_store(&q->sh->sq_head, 0);
    atomic_store(&q->sh->sq_tail, 0);
    if (locked)
        soft_sq_unlock(q->sh);
    q->sq_seen = 0;
    q->sq_frames = 0;
    atomic_store(&q->sh->rq_prod, 0);
    for (uint32_t i = 0; i < q->sh->rq_cap; i++)
        atomic_store(&q->sh->rq[i].seq, 0);    /* old entries must not look posted */
    atomic_store(&q->sh->rq_cons, 0);
    atomic_store(&q->sh->remote_err, 0);
    q->rq_frames = 0;
    q->rq_frames_done = 0;
    q->peer = NULL;
    q->peer_qp = NULL;
}

static int check_rtr_path(struct soft_qp *q, struct ibv_qp_attr *a, int mask)
{
    struct soft_dev *sd = q->sd;
    tbrt_dev *dev = &sd->dev;
    if (q->qp.qp_type == IBV_QPT_UD)
        return 0;
    if (mask & IBV_QP_PATH_MTU) {
        if (a->path_mtu < IBV_MTU_256 || a->path_mtu > sd->p->mtu)
            return dev_fail(dev, EINVAL, "modify_qp RTR: path_mtu %d above the port's MTU %d",
                            128 << a->path_mtu, 128 << sd->p->mtu);
        q->mtu = a->path_mtu;
        q->sh->mtu = (uint8_t)a->path_mtu;
    }
    if (!(mask & IBV_QP_AV))
        return 0;
    uint8_t port = a->ah_attr.port_num ? a->ah_attr.port_num : q->port;
    if (port < 1 || port > sd->p->nports)
        return dev_fail(dev, EINVAL, "modify_qp RTR: port %u does not exist (1..%d)", port,
                        sd->p->nports);
    if (soft_port_state(sd, port) != IBV_PORT_ACTIVE)
        return dev_fail(dev, ENETDOWN,
                        "modify_qp RTR: port %u is %s; use the first ACTIVE port "
                        "(on Thunderbolt it is not always port 1)",
                        port, dev_port_state_name(soft_port_state(sd, port)));
    if (!a->ah_attr.is_global)
        return dev_fail(dev, EINVAL, "modify_qp RTR: RoCE needs a GRH (ah_attr.is_global = 1 "
                        "and the peer's GID)");
    struct ibv_gid_entry e;
    if (soft_query_gid(dev, port, a->ah_attr.grh.sgid_index, &e) < 0)
        return dev_fail(dev, EINVAL, "modify_qp RTR: sgid_index %u is not a GID of port %u",
                        a->ah_attr.grh.sgid_index, port);
    if (!soft_gid_is_local(sd, a->ah_attr.grh.dgid.raw)) {
        char g[64];
        dev_gid_str(a->ah_attr.grh.dgid.raw, g, sizeof g);
        return dev_fail(dev, EHOSTUNREACH,
                        "modify_qp RTR: destination GID %s is not on this host; the soft "
                        "device's shared-memory wire reaches this host only", g);
    }
    q->sgid_index = a->ah_attr.grh.sgid_index;
    q->dgid = a->ah_attr.grh.dgid;
    return 0;
}

int soft_modify_qp(tbrt_qp *qp, struct ibv_qp_attr *a, int mask)
{
    struct soft_qp *q = (struct soft_qp *)qp;
    struct soft_dev *sd = q->sd;
    tbrt_dev *dev = qp->dev;
    int cur = (mask & IBV_QP_CUR_STATE) ? (int)a->cur_qp_state : qp->state;
    int to = (mask & IBV_QP_STATE) ? (int)a->qp_state : cur;
    if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != (enum ibv_qp_state)qp->state)
        return dev_fail(dev, EINVAL, "modify_qp: cur_qp_state %s but the QP is in %s",
                        dev_qp_state_name(a->cur_qp_state), dev_qp_state_name(qp->state));
    if (to == IBV_QPS_RESET) {
        to_reset(q);
        qp->state = IBV_QPS_RESET;
        atomic_store(&q->sh->state, IBV_QPS_RESET);
        return 0;
    }
    if (to == IBV_QPS_ERR) {
        if (sd->p->err_breaks_dereg)
            sd->qp_erred = true;
        soft_qp_to_err(q);
        return 0;
    }
    const struct transition *tr = NULL;
    for (size_t i = 0; i < TBRT_ARRAY_LEN(transitions); i++)
        if (transitions[i].from == cur && transitions[i].to == to)
            tr = &transitions[i];
    if (!tr)
        return dev_fail(dev, EINVAL, "modify_qp: %s -> %s is not a valid transition",
                        dev_qp_state_name(cur), dev_qp_state_name(to));
    int req = qp->qp_type == IBV_QPT_RC ? tr->rc_req : qp->qp_type == IBV_QPT_UC ? tr->uc_req
                                                                                 : tr->ud_req;
    int allowed = req | tr->opt | IBV_QP_STATE | IBV_QP_CUR_STATE;
    char names[256];
    if ((mask & req) != req)
        return dev_fail(dev, EINVAL, "modify_qp %s -> %s (%s): missing required attributes %s",
                        dev_qp_state_name(cur), dev_qp_state_name(to),
                        dev_qp_type_name(qp->qp_type), mask_names(req & ~mask, names, sizeof names));
    if (mask & ~allowed)
        return dev_fail(dev, EINVAL, "modify_qp %s -> %s (%s): attributes %s not allowed here",
                        dev_qp_state_name(cur), dev_qp_state_name(to),
                        dev_qp_type_name(qp->qp_type),
                        mask_names(mask & ~allowed, names, sizeof names));
    if (mask & IBV_QP_PORT) {
        if (a->port_num < 1 || a->port_num > sd->p->nports)
            return dev_fail(dev, EINVAL, "modify_qp: port %u does not exist (1..%d)", a->port_num,
                            sd->p->nports);
        q->port = a->port_num;
        q->sh->port = a->port_num;
    }
    if (mask & IBV_QP_PKEY_INDEX && a->pkey_index != 0)
        return dev_fail(dev, EINVAL, "modify_qp: pkey_index %u (the P_Key table has 1 entry)",
                        a->pkey_index);
    if (to == IBV_QPS_RTR && cur == IBV_QPS_INIT) {
        int rc = check_rtr_path(q, a, mask);
        if (rc)
            return rc;
    }
    if (mask & IBV_QP_ACCESS_FLAGS)
        q->access = (int)a->qp_access_flags;
    if (mask & IBV_QP_QKEY)
        q->sh->qkey = a->qkey;
    if (mask & IBV_QP_DEST_QPN) {
        if (a->dest_qp_num < 2 || a->dest_qp_num > 0xffffff)
            return dev_fail(dev, EINVAL, "modify_qp: dest_qp_num 0x%x is not a connectable QP",
                            a->dest_qp_num);
        q->dest_qpn = a->dest_qp_num;
        q->sh->dest_qpn = a->dest_qp_num;
        q->peer = NULL;
        q->peer_qp = NULL;
        q->peer_checked_ns = 0;
    }
    if (mask & IBV_QP_RQ_PSN)
        q->rq_psn = a->rq_psn & 0xffffff;
    if (mask & IBV_QP_SQ_PSN)
        q->sq_psn = a->sq_psn & 0xffffff;
    if (mask & IBV_QP_MIN_RNR_TIMER) {
        q->min_rnr_timer = a->min_rnr_timer & 31;
        q->sh->min_rnr_timer = q->min_rnr_timer;
    }
    if (mask & IBV_QP_TIMEOUT)
        q->sh->timeout = a->timeout & 31;
    if (mask & IBV_QP_RETRY_CNT)
        q->sh->retry_cnt = a->retry_cnt & 7;
    if (mask & IBV_QP_RNR_RETRY)
        q->sh->rnr_retry = a->rnr_retry & 7;
    qp->state = to;
    atomic_store(&q->sh->state, (uint32_t)to);
    return 0;
}

int soft_destroy_qp(tbrt_qp *qp)
{
    struct soft_qp *q = (struct soft_qp *)qp;
    struct soft_dev *sd = q->sd;
    soft_slot_free(sd, qp->qp_num);
    atomic_store(&q->sh->state, IBV_QPS_RESET);
    q->sh->qpn = 0;             /* peers holding a pointer see it gone */
    soft_ctx_release(sd, q->sh_off, qp_bytes(q->sh->rq_cap, q->sh->sq_cap));
    for (struct soft_qp **pp = &sd->qps; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    sd->nqp--;
    free(q);
    return 0;
}
