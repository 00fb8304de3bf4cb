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
 * hardware those cases fail silently later.
 *
 * A QP that met a bad value in shared memory breaks (soft_qp_break): the
 * text goes to the device's SOFT_VERR_CORRUPT, the QP to ERR, and its first
 * flushed work request completes with IBV_WC_LOC_QP_OP_ERR saying why. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

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
    uint32_t sq_cap = cap->max_send_wr, rq_cap = cap->max_recv_wr;
    if (q) {
        q->rq_wr = calloc(rq_cap, sizeof *q->rq_wr);
        q->sq_wr = calloc(sq_cap, sizeof *q->sq_wr);
    }
    if (!q || !q->rq_wr || !q->sq_wr) {
        if (q) {
            free(q->rq_wr);
            free(q->sq_wr);
        }
        free(q);
        return dev_fail(dev, ENOMEM, "create_qp: out of memory");
    }
    q->sh_bytes = soft_qp_bytes(rq_cap, sq_cap);
    q->sh = soft_ctx_alloc(sd, q->sh_bytes, &q->sh_off);
    uint32_t qpn = 0;
    int rc = q->sh ? soft_slot_alloc(sd, q->sh_off, (uint32_t)t, &qpn)
                   : dev_fail(dev, ENOMEM, "create_qp: device context full");
    if (rc) {
        if (q->sh)
            soft_ctx_release(sd, q->sh_off, q->sh_bytes);
        free(q->rq_wr);
        free(q->sq_wr);
        free(q);
        return rc;
    }
    struct soft_cq *rcq = (struct soft_cq *)init->recv_cq, *scq = (struct soft_cq *)init->send_cq;
    q->rq_cap = rq_cap;
    q->sq_cap = sq_cap;
    q->sh->qp_type = (uint32_t)t;
    q->sh->rq_cap = rq_cap;
    q->sh->sq_cap = sq_cap;
    q->sh->recv_db = rcq->db;
    q->sh->send_db = scq->db;
    q->sh->mtu = (uint8_t)p->mtu;
    q->sh->dev_index = (uint8_t)sd->index;
    atomic_store(&q->sh->state, IBV_QPS_RESET);
    q->sh->qpn = qpn;
    q->self = (struct soft_qp_view){
        .peer = sd->self, .sh = q->sh, .rq = q->sh->rq,
        .sq = (struct soft_swr *)((char *)q->sh + soft_sq_offset(rq_cap)),
        .recv_db = rcq->dbp, .send_db = scq->dbp, .qpn = qpn, .qp_type = (uint32_t)t,
        .rq_cap = rq_cap, .sq_cap = sq_cap, .recv_dbi = rcq->db, .send_dbi = scq->db,
        .pid = sd->pid,
    };
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

static void flush_wc(struct soft_qp *q, struct soft_cq *cq, const struct soft_wr *w,
                     enum ibv_wc_opcode op)
{
    struct ibv_wc wc = {.wr_id = w->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = op,
                        .vendor_err = SOFT_VERR_FLUSH, .qp_num = q->qp.qp_num};
    if (q->broken && !q->broken_told) {
        /* the first one says why the queue pair broke */
        wc.status = IBV_WC_LOC_QP_OP_ERR;
        wc.vendor_err = SOFT_VERR_CORRUPT;
        q->broken_told = true;
    }
    soft_cq_add(cq, &wc);
}

/* What finished is reported; the receives not yet finished are taken back
 * (a CAS on each slot's seq: a sender that is copying into one now loses
 * its result, as a NIC's DMA in flight at an error). */
/* A sender is writing the result of receive c (a few stores): wait for it,
 * bounded (it may have died in between). */
static bool writing_ends(struct soft_rqe *e, uint64_t c)
{
    uint64_t until = now_ns() + 1000000ull;
    while (atomic_load_explicit(&e->seq, memory_order_acquire) == ((c + 1) | SOFT_RQE_WRITING))
        if (now_ns() > until)
            return false;
    return true;
}

static void flush_rq(struct soft_qp *q)
{
    struct soft_cq *rcq = (struct soft_cq *)q->qp.recv_cq;
    for (;;) {
        soft_reap_recv(q);      /* what finished, in order */
        if (q->rq_done >= q->rq_prod)
            break;
        uint64_t c = q->rq_done, want = c + 1;
        struct soft_rqe *e = &q->sh->rq[c % q->rq_cap];
        if (!atomic_compare_exchange_strong(&e->seq, &want, 0)) {
            if (want == ((c + 1) | SOFT_RQE_WRITING) && writing_ends(e, c))
                continue;       /* its result is there now */
            if (want == ((c + 1) | SOFT_RQE_DONE) && !rcq->overrun)
                continue;       /* it finished just now: reap it */
            /* a bad value (the reaping said so), or no room to report it */
            atomic_store(&e->seq, 0);
        }
        struct soft_wr *w = &q->rq_wr[c % q->rq_cap];
        q->rq_frames -= w->frames;
        q->rq_done++;
        flush_wc(q, rcq, w, IBV_WC_RECV);
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
    struct soft_cq *scq = (struct soft_cq *)q->qp.send_cq;
    bool locked = sq_lock_wait(q->sd, q->sh);
    soft_reap_send(q);
    for (; q->sq_done < q->sq_tail; q->sq_done++) {
        struct soft_wr *w = &q->sq_wr[q->sq_done % q->sq_cap];
        q->sq_frames -= w->frames;
        flush_wc(q, scq, w, w->opcode);
    }
    atomic_store(&q->sh->sq_head, q->sq_tail);
    if (locked)
        soft_sq_unlock(q->sh);
}

void soft_qp_to_err(struct soft_qp *q)
{
    q->qp.state = IBV_QPS_ERR;
    atomic_store(&q->sh->state, IBV_QPS_ERR);
    flush_sq(q);
    flush_rq(q);
}

void soft_corrupt(struct soft_dev *sd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sd->corrupt_why, sizeof sd->corrupt_why, fmt, ap);
    va_end(ap);
}

void soft_qp_break(struct soft_qp *q, bool reported, const char *fmt, ...)
{
    char why[TBRT_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    soft_corrupt(q->sd, "QP 0x%x broke: %s", q->qp.qp_num, why);
    if (q->qp.state == IBV_QPS_ERR || q->qp.state == IBV_QPS_RESET)
        return;
    q->broken = true;
    q->broken_told = reported;
    soft_qp_to_err(q);
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

/* Nothing outstanding survives RESET, and no completions. The indices go on
 * counting (a late peer's write for an old slot cannot match a new one). */
static void to_reset(struct soft_qp *q)
{
    bool locked = sq_lock_wait(q->sd, q->sh);
    atomic_store(&q->sh->sq_head, q->sq_tail);
    atomic_store(&q->sh->sq_tail, q->sq_tail);
    if (locked)
        soft_sq_unlock(q->sh);
    q->sq_done = q->sq_tail;
    q->sq_frames = 0;
    for (uint64_t c = q->rq_done; c < q->rq_prod; c++)
        writing_ends(&q->sh->rq[c % q->rq_cap], c);
    for (uint32_t i = 0; i < q->rq_cap; i++)
        atomic_store(&q->sh->rq[i].seq, 0);    /* old entries must not look posted */
    atomic_store(&q->sh->rq_cons, q->rq_prod);
    q->rq_done = q->rq_prod;
    atomic_store(&q->sh->remote_err, 0);
    q->rq_frames = 0;
    q->broken = q->broken_told = false;
    q->peer.peer = NULL;
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
    if (mask & IBV_QP_QKEY) {
        q->qkey = a->qkey;
        q->sh->qkey = a->qkey;
    }
    if (mask & IBV_QP_DEST_QPN) {
        if (a->dest_qp_num < 2 || a->dest_qp_num > 0xffffff)
            return dev_fail(dev, EINVAL, "modify_qp: dest_qp_num 0x%x is not a connectable QP",
                            a->dest_qp_num);
        q->dest_qpn = a->dest_qp_num;
        q->sh->dest_qpn = a->dest_qp_num;
        q->peer.peer = NULL;
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
        q->sh->timeout = q->timeout = a->timeout & 31;
    if (mask & IBV_QP_RETRY_CNT)
        q->sh->retry_cnt = q->retry_cnt = a->retry_cnt & 7;
    if (mask & IBV_QP_RNR_RETRY)
        q->sh->rnr_retry = q->rnr_retry = a->rnr_retry & 7;
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
    soft_ctx_release(sd, q->sh_off, q->sh_bytes);
    for (struct soft_qp **pp = &sd->qps; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    sd->nqp--;
    free(q->rq_wr);
    free(q->sq_wr);
    free(q);
    return 0;
}
