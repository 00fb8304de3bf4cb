/* udp_ack.c - the requester of the UDP wire, what comes back: ACKs (with
 * their end-to-end credits), NAKs and RNR NAKs, READ responses and atomic
 * ACKs finish or resend the sends udp_req.c put on the wire; and the
 * requester's timers (retransmit, RNR wait, tail probe). udp_req.c's header
 * comment says what each answer does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft/wire/udp/udp_req.h"

/* IB spec table 45: RNR NAK timer field -> microseconds. */
static const uint32_t rnr_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520,
};

/* The credits of an ACK of PSN psn (IBA 9.7.7.2.4): the peer may take
 * `count` receives beyond those of the messages that began by psn. Only
 * from the ACK of everything acknowledged so far (an older one counts
 * messages finished since among those still to come). */
static void credits_from_ack(struct soft_wire_qp *q, uint32_t psn, uint8_t code)
{
    if (code == 31 || ((psn + 1) & UDP_PSN_MASK) != q->una_psn)
        return;
    uint32_t base = q->rsn_next;
    for (uint64_t i = q->una_wqe; i < q->sq_tail; i++) {
        const struct udp_swqe *w = &q->sq[i % q->sq_cap];
        if (!w->started)
            break;
        if (takes_receive(w) && udp_psn_diff(w->first_psn, psn) > 0) {
            base = w->rsn;
            break;
        }
    }
    uint32_t lsn = base + udp_credit_count(code);
    if (!q->lsn_valid || (int32_t)(lsn - q->lsn) > 0) {
        q->lsn = lsn;
        q->lsn_valid = true;
        q->wake = true;
    }
}

/* Send again from PSN psn (a NAK, a timeout, a missing READ response;
 * rnr: an RNR NAK, whose re-sends are no loss). */
static void go_back_for(struct soft_wire_qp *q, uint32_t psn, bool rnr)
{
    q->resend_rnr = rnr;
    uint64_t i;
    int32_t d;
    struct udp_swqe *w = udp_sent_wqe(q, psn, q->sq_tail, &i, &d);
    if (!w)
        return;
    q->tx_wqe = i;
    if (is_atomic(w)) {
        q->tx_off = 0;
        q->tx_psn = w->first_psn;
    } else if (is_read(w)) {
        q->tx_off = 0;
        if ((uint32_t)d < w->read_pkts)
            w->read_pkts = (uint32_t)d;
        q->tx_psn = (w->first_psn + w->read_pkts) & UDP_PSN_MASK;
    } else {
        q->tx_off = (uint64_t)d * udp_mtu_bytes(q->a.mtu);
        q->tx_psn = psn;
    }
    q->since_ackreq = 0;
    q->rto_ns = 0;              /* armed again by the first packet sent */
}

static void go_back(struct soft_wire_qp *q, uint32_t psn) { go_back_for(q, psn, false); }

/* Everything up to PSN psn arrived. */
static void ack_upto(struct soft_wire_qp *q, uint32_t psn)
{
    if (udp_psn_diff(psn, q->max_psn) >= 0)
        return;                 /* acknowledges what was never sent: ignore */
    bool moved = false;
    while (q->una_wqe < q->sq_tail && !q->stopped) {
        struct udp_swqe *w = &q->sq[q->una_wqe % q->sq_cap];
        if (!w->started)
            break;
        uint32_t last = (w->first_psn + w->npkts - 1) & UDP_PSN_MASK;
        if (udp_psn_diff(psn, last) < 0)
            break;
        if (answered_by_response(w)) {
            if (w->read_pkts < w->npkts) {
                /* acknowledged past a READ (atomic) whose responses were lost */
                if (!q->read_gap) {
                    q->read_gap = true;
                    go_back(q, (w->first_psn + w->read_pkts) & UDP_PSN_MASK);
                }
                break;
            }
        }
        udp_send_finish(q, q->una_wqe, IBV_WC_SUCCESS, 0);
        q->una_wqe++;
        moved = true;
    }
    if (udp_psn_diff((psn + 1) & UDP_PSN_MASK, q->una_psn) > 0) {
        q->una_psn = (psn + 1) & UDP_PSN_MASK;
        moved = true;
    }
    if (moved) {
        q->rnr_probe = false;
        q->retries = q->a.retry_cnt;
        q->rto_ns = q->una_psn != q->tx_psn && q->a.timeout ? q->w->now + rto_ns(q) : 0;
        q->tlp_ns = q->rto_ns ? q->w->now + tlp_ns(q) : 0;
        q->tlp_shift = 0;
    }
}

static bool una_atomic(const struct soft_wire_qp *q)
{
    return q->una_wqe < q->sq_tail && is_atomic(&q->sq[q->una_wqe % q->sq_cap]);
}

static void fail_una(struct soft_wire_qp *q, uint8_t status, uint32_t verr)
{
    if (q->una_wqe < q->sq_tail)
        udp_send_finish(q, q->una_wqe, status, verr);
    else
        udp_qp_fail(q);
}

static void read_response(struct soft_wire_qp *q, const struct udp_pkt *p)
{
    uint32_t mtu = udp_mtu_bytes(q->a.mtu);
    for (uint64_t i = q->una_wqe; i < q->sq_tail; i++) {
        struct udp_swqe *w = &q->sq[i % q->sq_cap];
        if (!w->started)
            return;
        if (!is_read(w))
            continue;
        int32_t d = udp_psn_diff(p->psn, w->first_psn);
        if (d < 0 || d >= (int32_t)w->npkts)
            continue;
        /* responses come in order: everything before this READ arrived */
        ack_upto(q, (w->first_psn - 1) & UDP_PSN_MASK);
        if ((uint32_t)d != w->read_pkts) {
            if ((uint32_t)d > w->read_pkts && !q->read_gap) {
                q->read_gap = true;   /* one went missing: ask again from it */
                q->st.out_of_order++;
                go_back(q, (w->first_psn + w->read_pkts) & UDP_PSN_MASK);
            } else if ((uint32_t)d < w->read_pkts) {
                q->st.duplicates++;
            }
            return;
        }
        uint64_t off = (uint64_t)d * mtu;
        bool last = (uint32_t)d + 1 == w->npkts;
        uint64_t want = last ? w->total - off : mtu;
        if (p->paylen != want) {
            q->st.bad_packets++;
            return;
        }
        if (want && udp_sge_copy(q->w, w->sge, w->num_sge, off, (void *)p->payload, want, true)) {
            udp_send_finish(q, i, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
            return;
        }
        w->read_pkts++;
        q->read_gap = false;
        q->retries = q->a.retry_cnt;
        if (q->a.timeout)
            q->rto_ns = q->w->now + rto_ns(q);
        if (last && i == q->una_wqe) {
            udp_send_finish(q, i, IBV_WC_SUCCESS, 0);
            q->una_wqe++;
            q->una_psn = (w->first_psn + w->npkts) & UDP_PSN_MASK;
            ack_upto(q, (q->una_psn - 1) & UDP_PSN_MASK); /* and what finished after it */
        }
        return;
    }
}

/* The original value of an atomic: into its SGE, and it is finished. */
static void atomic_ack(struct soft_wire_qp *q, const struct udp_pkt *p)
{
    for (uint64_t i = q->una_wqe; i < q->sq_tail; i++) {
        struct udp_swqe *w = &q->sq[i % q->sq_cap];
        if (!w->started)
            return;
        if (!is_atomic(w) || w->first_psn != p->psn)
            continue;
        if (w->read_pkts) {
            q->st.duplicates++;
            return;
        }
        ack_upto(q, (w->first_psn - 1) & UDP_PSN_MASK);
        if (p->syndrome >= 0x20) {  /* an atomic NAKed in its ACK: the responder refused */
            fail_una(q, IBV_WC_REM_INV_REQ_ERR, SOFT_VERR_REMOTE);
            return;
        }
        uint64_t orig = p->orig;
        if (udp_sge_copy(q->w, w->sge, w->num_sge, 0, &orig, sizeof orig, true)) {
            udp_send_finish(q, i, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
            return;
        }
        w->read_pkts = 1;
        if (i == q->una_wqe)
            ack_upto(q, p->psn);
        return;
    }
}

void udp_req_recv(struct soft_wire_qp *q, const struct udp_pkt *p)
{
    if (p->opcode == UDP_OP_TBRT_CREDIT) {
        if (p->paylen != 8 || !q->credit_flow)
            return;
        const uint8_t *b = p->payload;
        uint32_t magic = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        uint32_t n = (uint32_t)b[4] << 24 | (uint32_t)b[5] << 16 | (uint32_t)b[6] << 8 | b[7];
        q->st.credits_recv++;
        q->credit_heard_ns = q->w->now;
        if (magic == UDP_CREDIT_MAGIC && (int32_t)(n - q->peer_posted) > 0) {
            q->peer_posted = n;
            q->wake = true;     /* a waiting SEND may go */
        }
        return;
    }
    if (q->qp_type != IBV_QPT_RC || q->stopped ||
        (q->a.state != IBV_QPS_RTS && q->a.state != IBV_QPS_RTR))
        return;
    uint8_t op = p->opcode & 0x1f;
    if (op >= UDP_OP_READ_RESP_FIRST && op <= UDP_OP_READ_RESP_ONLY) {
        read_response(q, p);
        return;
    }
    if (op == UDP_OP_ATOMIC_ACK) {
        atomic_ack(q, p);
        return;
    }
    if (op != UDP_OP_ACK)
        return;
    uint8_t syn = p->syndrome;
    uint32_t psn = p->psn;
    q->st.acks_recv++;
    if (syn < 0x20) {           /* ACK */
        ack_upto(q, psn);
        credits_from_ack(q, psn, syn & 0x1f);
        q->rnr_retries = q->a.rnr_retry;
        return;
    }
    if (udp_psn_diff(psn, q->max_psn) > 0)
        return;                 /* names a PSN never sent */
    ack_upto(q, (psn - 1) & UDP_PSN_MASK);
    if ((syn & 0xe0) == UDP_AETH_RNR) {
        q->st.rnr_naks_recv++;
        if (udp_debug)
            fprintf(stderr, "tbrt udp: QP 0x%x: RNR NAK psn %u: credits %s, sent %u of %u\n",
                    q->qpn, psn, q->lsn_valid ? "known" : "unknown", q->rsn_next, q->lsn);
        if (q->a.rnr_retry != 7 && q->rnr_retries-- <= 0) {
            fail_una(q, IBV_WC_RNR_RETRY_EXC_ERR, SOFT_VERR_RNR);
            return;
        }
        q->rnr_until = q->w->now + rnr_us[syn & 31] * 1000ull;
        go_back_for(q, psn, true);
        /* one packet asks whether a receive is there now; the window opens
         * again with the ACK that says so (a slow receiver is not flooded) */
        q->rnr_probe = true;
        return;
    }
    q->st.naks_recv++;
    switch (syn) {
    case UDP_AETH_NAK_SEQ:
        go_back(q, psn);
        return;
    case UDP_AETH_NAK_INV:
        /* an atomic's only invalid request is its address's alignment */
        fail_una(q, IBV_WC_REM_INV_REQ_ERR, una_atomic(q) ? SOFT_VERR_ALIGN : SOFT_VERR_REMOTE);
        return;
    case UDP_AETH_NAK_ACCESS:
        fail_una(q, IBV_WC_REM_ACCESS_ERR, una_atomic(q) ? SOFT_VERR_ATOMIC_ACCESS : SOFT_VERR_RKEY);
        return;
    default: fail_una(q, IBV_WC_REM_OP_ERR, SOFT_VERR_REMOTE); return;
    }
}

void udp_req_timers(struct soft_wire_qp *q)
{
    if (q->tlp_ns && !q->stopped && q->w->now >= q->tlp_ns)
        udp_req_tail_probe(q);
    if (!q->rto_ns || q->stopped || q->w->now < q->rto_ns)
        return;
    if (q->una_psn == q->tx_psn) {
        q->rto_ns = 0;          /* nothing in flight */
        return;
    }
    q->st.timeouts++;
    if (udp_debug)
        fprintf(stderr, "tbrt udp: QP 0x%x: retransmit timeout: una psn %u wqe %llu, tx psn %u "
                "wqe %llu, tail %llu, retries %d\n", q->qpn, q->una_psn,
                (unsigned long long)q->una_wqe, q->tx_psn, (unsigned long long)q->tx_wqe,
                (unsigned long long)q->sq_tail, q->retries);
    if (q->una_psn == q->tx_psn && q->una_wqe == q->tx_wqe) {
        q->rto_ns = 0;
        return;
    }
    if (q->retries-- <= 0) {
        struct soft_faults *f = q->w->cfg.faults;
        bool down = soft_faults_port_state(f, q->w->cfg.dev_index, q->a.port ? q->a.port : 1) !=
                    IBV_PORT_ACTIVE;
        fail_una(q, IBV_WC_RETRY_EXC_ERR, down ? SOFT_VERR_PORT_DOWN : SOFT_VERR_PEER_GONE);
        return;
    }
    go_back(q, q->una_psn);
    q->rto_ns = q->w->now + rto_ns(q);
}

uint64_t udp_req_deadline(const struct soft_wire_qp *q)
{
    uint64_t d = q->rto_ns;
    if (q->rnr_until && (!d || q->rnr_until < d))
        d = q->rnr_until;
    if (q->credit_wait_ns && (!d || q->credit_wait_ns < d))
        d = q->credit_wait_ns;
    if (q->tlp_ns && (!d || q->tlp_ns < d))
        d = q->tlp_ns;
    if (q->credit_flow && q->tx_wqe < q->sq_tail) {
        uint64_t silent = q->credit_heard_ns + UDP_PEER_SILENT_NS;
        if (!d || silent < d)
            d = silent;
    }
    return d;
}
