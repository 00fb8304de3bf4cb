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
 * The wire gets the attributes after every change (soft_wire_qp_attr).
 * A QP that met a bad value (from a peer, through the wire) breaks
 * (soft_qp_break): the text is the device's SOFT_VERR_CORRUPT, the QP goes
 * to ERR, and its first flushed work request completes with
 * IBV_WC_LOC_QP_OP_ERR saying why. */
#include <errno.h>
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
    struct soft_srq *srq = (struct soft_srq *)init->srq;
    if (srq) {
        /* receives are the SRQ's: the QP's own are ignored, as verbs say */
        cap->max_recv_wr = 0;
        cap->max_recv_sge = 0;
    } else if (cap->max_recv_wr > p->max_qp_wr) {
        return dev_fail(dev, EINVAL, "create_qp: max_recv_wr %u out of range 0..%u%s%s",
                        cap->max_recv_wr, p->max_qp_wr, unit,
                        p->depth_in_frames ? " (TN3205 counts queue depth in frames)" : "");
    }
    if (cap->max_send_sge > SOFT_MAX_SGE || cap->max_recv_sge > SOFT_MAX_SGE)
        return dev_fail(dev, EINVAL, "create_qp: max_send_sge %u / max_recv_sge %u: at most %d "
                        "scatter/gather entries", cap->max_send_sge, cap->max_recv_sge,
                        SOFT_MAX_SGE);
    if (cap->max_inline_data > 256)
        return dev_fail(dev, EINVAL, "create_qp: max_inline_data %u > 256", cap->max_inline_data);
    struct soft_qp *q = calloc(1, sizeof *q);
    /* a QP that never receives (max_recv_wr 0, or an SRQ) keeps one unused slot */
    uint32_t sq_cap = cap->max_send_wr, rq_cap = cap->max_recv_wr ? cap->max_recv_wr : 1;
    uint32_t rq_ring = soft_ring_size(rq_cap), sq_ring = soft_ring_size(sq_cap);
    if (q) {
        q->rq_wr = calloc(rq_ring, sizeof *q->rq_wr);
        q->sq_wr = calloc(sq_ring, sizeof *q->sq_wr);
    }
    if (!q || !q->rq_wr || !q->sq_wr) {
        if (q) {
            free(q->rq_wr);
            free(q->sq_wr);
        }
        free(q);
        return dev_fail(dev, ENOMEM, "create_qp: out of memory");
    }
    struct soft_wire_qp_init wi = {.qp_type = (uint32_t)t, .rq_cap = rq_cap, .sq_cap = sq_cap,
                                   .recv_cq = ((struct soft_cq *)init->recv_cq)->wcq,
                                   .send_cq = ((struct soft_cq *)init->send_cq)->wcq,
                                   .srq = srq ? srq->ws : NULL, .cookie = q};
    char why[TBRT_WHY_MAX];
    uint32_t qpn = 0;
    int rc = sd->wops->qp_create(sd->wire, &wi, &q->wq, &qpn, why, sizeof why);
    if (rc) {
        free(q->rq_wr);
        free(q->sq_wr);
        free(q);
        return dev_fail(dev, -rc, "create_qp: %s", why);
    }
    q->rq_cap = rq_cap;
    q->sq_cap = sq_cap;
    q->rq_mask = rq_ring - 1;
    q->sq_mask = sq_ring - 1;
    q->sd = sd;
    q->a = (struct soft_wire_qp_attr){.state = IBV_QPS_RESET, .mtu = (uint8_t)p->mtu};
    q->sq_sig_all = init->sq_sig_all != 0;
    if (cap->max_send_sge == 0)
        cap->max_send_sge = 1;
    if (cap->max_recv_sge == 0 && !srq)
        cap->max_recv_sge = 1;
    q->qp = (tbrt_qp){.dev = dev, .pd = pd, .qp_num = qpn, .qp_type = t, .state = IBV_QPS_RESET,
                      .send_cq = init->send_cq, .recv_cq = init->recv_cq, .cap = *cap,
                      .srq = init->srq};
    q->srq = srq;
    if (srq)
        srq->nqp++;
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

void soft_qp_to_err(struct soft_qp *q)
{
    /* an SRQ's QP takes nothing more from it: its last WQE is reached */
    if (q->srq && q->qp.state != IBV_QPS_ERR)
        soft_event_push(q->sd, IBV_EVENT_QP_LAST_WQE_REACHED, q, 0);
    q->qp.state = IBV_QPS_ERR;
    q->a.state = IBV_QPS_ERR;
    q->sd->wops->qp_modify(q->wq, &q->a);
    /* what had finished, as it finished; the rest flushed, and a waiter
     * hears of the flushes as of any completion */
    soft_reap_send(q);
    soft_reap_recv(q);
    soft_cq_wake((struct soft_cq *)q->qp.send_cq);
    if (q->qp.recv_cq != q->qp.send_cq)
        soft_cq_wake((struct soft_cq *)q->qp.recv_cq);
}

void soft_qp_break(struct soft_qp *q, bool reported)
{
    if (q->qp.state == IBV_QPS_ERR || q->qp.state == IBV_QPS_RESET)
        return;
    q->broken = true;
    q->broken_told = reported;
    soft_qp_to_err(q);
}

/* Nothing outstanding survives RESET, and no completions. The indices go on
 * counting, in the wire too. */
static void to_reset(struct soft_qp *q)
{
    q->qp.state = IBV_QPS_RESET;
    q->a.state = IBV_QPS_RESET;
    q->sd->wops->qp_modify(q->wq, &q->a);
    q->rq_done = q->rq_prod;
    q->sq_done = q->sq_tail;
    q->rq_frames = q->sq_frames = 0;
    q->have_rres = q->have_sres = false;
    q->broken = q->broken_told = false;
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
        q->a.mtu = (uint8_t)a->path_mtu;
    }
    if (!(mask & IBV_QP_AV))
        return 0;
    uint8_t port = a->ah_attr.port_num ? a->ah_attr.port_num : q->a.port;
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
    char why[TBRT_WHY_MAX];
    if (!sd->wops->reaches(sd->wire, a->ah_attr.grh.dgid.raw,
                           soft_gid_is_local(sd, a->ah_attr.grh.dgid.raw), why, sizeof why)) {
        char g[64];
        dev_gid_str(a->ah_attr.grh.dgid.raw, g, sizeof g);
        return dev_fail(dev, EHOSTUNREACH, "modify_qp RTR: destination GID %s is not on this "
                        "host; %s", g, why);
    }
    q->sgid_index = a->ah_attr.grh.sgid_index;
    memcpy(q->a.dgid, a->ah_attr.grh.dgid.raw, 16);
    memcpy(q->a.sgid, e.gid.raw, 16);
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
        q->a.port = a->port_num;
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
        q->a.qkey = a->qkey;
    if (mask & IBV_QP_DEST_QPN) {
        if (a->dest_qp_num < 2 || a->dest_qp_num > 0xffffff)
            return dev_fail(dev, EINVAL, "modify_qp: dest_qp_num 0x%x is not a connectable QP",
                            a->dest_qp_num);
        q->a.dest_qpn = a->dest_qp_num;
    }
    if (mask & IBV_QP_RQ_PSN)
        q->a.rq_psn = q->rq_psn = a->rq_psn & 0xffffff;
    if (mask & IBV_QP_SQ_PSN)
        q->a.sq_psn = q->sq_psn = a->sq_psn & 0xffffff;
    if (mask & IBV_QP_MIN_RNR_TIMER)
        q->a.min_rnr_timer = a->min_rnr_timer & 31;
    if (mask & IBV_QP_TIMEOUT)
        q->a.timeout = a->timeout & 31;
    if (mask & IBV_QP_RETRY_CNT)
        q->a.retry_cnt = a->retry_cnt & 7;
    if (mask & IBV_QP_RNR_RETRY)
        q->a.rnr_retry = a->rnr_retry & 7;
    qp->state = to;
    q->a.state = (uint32_t)to;
    sd->wops->qp_modify(q->wq, &q->a);
    return 0;
}

int soft_destroy_qp(tbrt_qp *qp)
{
    struct soft_qp *q = (struct soft_qp *)qp;
    struct soft_dev *sd = q->sd;
    sd->wops->qp_destroy(q->wq);
    for (struct soft_qp **pp = &sd->qps; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    sd->nqp--;
    if (q->srq)
        q->srq->nqp--;
    soft_event_forget(sd, q);
    free(q->rq_wr);
    free(q->sq_wr);
    free(q);
    return 0;
}

int soft_qp_peer(tbrt_qp *qp, int cpu)
{
    struct soft_qp *q = (struct soft_qp *)qp;
    _Static_assert((int)SOFT_PEER_HERE == (int)DEV_PEER_HERE &&
                   (int)SOFT_PEER_AWAKE == (int)DEV_PEER_AWAKE &&
                   (int)SOFT_PEER_ASLEEP == (int)DEV_PEER_ASLEEP, "one meaning of a peer's place");
    if (!q->sd->wops->qp_peer || qp->state != IBV_QPS_RTS)
        return SOFT_PEER_UNKNOWN;
    return q->sd->wops->qp_peer(q->wq, cpu);
}
