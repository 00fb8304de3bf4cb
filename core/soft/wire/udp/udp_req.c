/* udp_req.c - the requester of the UDP wire: a queue pair's sends become
 * packets, and what comes back (ACKs, NAKs, READ responses, credits)
 * finishes them.
 *
 * Each message is cut by the path MTU into FIRST / MIDDLE / LAST packets
 * (ONLY when it fits one), with immediate data on the last; each packet
 * takes the next PSN, a READ request as many as its responses will. RC:
 *   - an ACK for PSN p finishes every message whose last PSN is <= p (the
 *     responder coalesces them: the requester asks on each LAST/ONLY and
 *     every UDP_ACK_EVERY packets);
 *   - NAK sequence error (the responder expected p): go back to p and send
 *     everything from there again (go-back-N);
 *   - no ACK within 4.096 us x 2^timeout: go back to the oldest unacked PSN,
 *     at most retry_cnt times, then IBV_WC_RETRY_EXC_ERR (timeout 0: no
 *     timer, as the spec says);
 *   - RNR NAK: wait the timer it names (the responder's min_rnr_timer), at
 *     most rnr_retry times (7: for ever), then IBV_WC_RNR_RETRY_EXC_ERR;
 *   - NAK invalid request / remote access / remote operational error: the
 *     message fails with IBV_WC_REM_INV_REQ_ERR / REM_ACCESS_ERR /
 *     REM_OP_ERR, and the QP goes to ERR;
 *   - a READ finishes when its last response is placed; a response that
 *     skips one asks again from the missing one.
 * UC and UD: a message is finished once its packets are on the wire, and a
 * lost one is never known. apple-uc's credit flow control: a SEND goes only
 * while this end has sent fewer SENDs than the peer has posted receives
 * (its TBRT_CREDIT packets say how many). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft/wire/udp/udp.h"

/* IB spec table 45: RNR NAK timer field -> microseconds. */
static const uint32_t rnr_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520,
};

static uint32_t npkts_of(const struct udp_swqe *w, uint32_t mtu)
{
    if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
        return 1;
    return w->total ? (uint32_t)((w->total + mtu - 1) / mtu) : 1;
}

static bool is_read(const struct udp_swqe *w) { return w->opcode == IBV_WR_RDMA_READ; }
static bool is_atomic(const struct udp_swqe *w)
{
    return w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}
/* Finished by a response of the responder's (READ data, an atomic's value),
 * not by an ACK alone. */
static bool answered_by_response(const struct udp_swqe *w) { return is_read(w) || is_atomic(w); }
static bool is_send(const struct udp_swqe *w)
{
    return w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM;
}

/* Takes a receive at the peer: what end-to-end credits count. */
static bool takes_receive(const struct udp_swqe *w)
{
    return is_send(w) || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

static uint64_t rto_ns(const struct soft_wire_qp *q)
{
    return 4096ull << (q->a.timeout > 31 ? 31 : q->a.timeout);
}

void udp_req_reset(struct soft_wire_qp *q)
{
    q->tx_wqe = q->una_wqe = q->sq_tail;
    q->tx_off = 0;
    q->tx_psn = q->una_psn = q->max_psn = q->a.sq_psn & UDP_PSN_MASK;
    q->rto_ns = 0;
    q->retries = q->a.retry_cnt;
    q->rnr_retries = q->a.rnr_retry;
    q->rnr_until = 0;
    q->rnr_probe = false;
    q->since_ackreq = 0;
    q->read_gap = false;
    q->peer_posted = q->sent_msgs = 0;
    q->rsn_next = q->lsn = 0;
    q->lsn_valid = false;
    q->credit_wait_ns = 0;
    q->tlp_ns = 0;
    q->tlp_shift = 0;
    q->credit_heard_ns = now_ns();  /* a new connection: the peer has its grace */
}

/* Pieces of [off, off + n) of a send's data (our memory, checked at its
 * start). */
static int gather(struct soft_wire_qp *q, struct udp_swqe *w, uint64_t off, uint32_t n,
                  struct udp_piece *pc)
{
    if (!n)
        return 0;
    if (w->send_flags & IBV_SEND_INLINE) {
        pc[0] = (struct udp_piece){w->inl + off, n};
        return 1;
    }
    (void)q;
    int k = 0;
    for (uint32_t i = 0; i < w->num_sge && n; i++) {
        uint64_t l = w->sge[i].length;
        if (off >= l) {
            off -= l;
            continue;
        }
        uint32_t take = (uint32_t)TBRT_MIN(l - off, n);
        pc[k++] = (struct udp_piece){(const uint8_t *)(uintptr_t)w->sge[i].addr + off, take};
        n -= take;
        off = 0;
    }
    return k;
}

static bool sges_ours(struct soft_wire_qp *q, const struct udp_swqe *w, uint32_t access)
{
    if (w->send_flags & IBV_SEND_INLINE)
        return true;
    for (uint32_t i = 0; i < w->num_sge; i++)
        if (w->sge[i].length &&
            !udp_mr_find(q->w, w->sge[i].lkey, w->sge[i].addr, w->sge[i].length, access))
            return false;
    return true;
}

static uint8_t opcode_of(const struct soft_wire_qp *q, const struct udp_swqe *w, bool first,
                         bool last)
{
    uint8_t tr = q->qp_type == IBV_QPT_RC ? UDP_TR_RC : UDP_TR_UC;
    bool imm = w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    uint8_t op;
    if (is_send(w))
        op = first && last ? (imm ? UDP_OP_SEND_ONLY_IMM : UDP_OP_SEND_ONLY)
             : first       ? UDP_OP_SEND_FIRST
             : last        ? (imm ? UDP_OP_SEND_LAST_IMM : UDP_OP_SEND_LAST)
                           : UDP_OP_SEND_MIDDLE;
    else
        op = first && last ? (imm ? UDP_OP_WRITE_ONLY_IMM : UDP_OP_WRITE_ONLY)
             : first       ? UDP_OP_WRITE_FIRST
             : last        ? (imm ? UDP_OP_WRITE_LAST_IMM : UDP_OP_WRITE_LAST)
                           : UDP_OP_WRITE_MIDDLE;
    return (uint8_t)(tr | op);
}

static void count_sent(struct soft_wire_qp *q, uint32_t psn)
{
    if (udp_psn_diff(psn, q->max_psn) < 0) {
        if (q->resend_rnr)
            q->st.rnr_resends++;
        else
            q->st.retransmits++;
    } else
        q->max_psn = (psn + 1) & UDP_PSN_MASK;
}

/* A READ request for what of w is still unanswered. */
static void send_read(struct soft_wire_qp *q, struct udp_swqe *w, uint32_t mtu)
{
    uint64_t off = (uint64_t)w->read_pkts * mtu;
    struct udp_pkt p = {.opcode = UDP_TR_RC | UDP_OP_READ_REQ, .dqpn = q->a.dest_qpn,
                        .psn = (w->first_psn + w->read_pkts) & UDP_PSN_MASK, .ackreq = true,
                        .va = w->raddr + off, .rkey = w->rkey,
                        .dmalen = (uint32_t)(w->total - off)};
    uint8_t hdr[UDP_HDR_MAX];
    uint32_t hl = udp_pkt_headers(&p, 0, hdr);
    udp_send(q->w, q, &q->path, hdr, hl, NULL, 0, 0);
    /* a request counts once for all the PSNs of its responses */
    if (udp_psn_diff(p.psn, q->max_psn) < 0)
        q->st.retransmits++;
    q->resend_rnr = false;
    uint32_t end = (w->first_psn + w->npkts) & UDP_PSN_MASK;
    if (udp_psn_diff(end, q->max_psn) > 0)
        q->max_psn = end;
}

/* CMP_SWAP / FETCH_ADD: one request with AtomicETH; the ATOMIC_ACK brings
 * the original value. */
static void send_atomic(struct soft_wire_qp *q, struct udp_swqe *w)
{
    bool cas = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    struct udp_pkt p = {.opcode = UDP_TR_RC | (cas ? UDP_OP_CMP_SWAP : UDP_OP_FETCH_ADD),
                        .dqpn = q->a.dest_qpn, .psn = w->first_psn, .ackreq = true,
                        .va = w->raddr, .rkey = w->rkey,
                        .swap_add = cas ? w->swap : w->compare_add,
                        .compare = cas ? w->compare_add : 0};
    uint8_t hdr[UDP_HDR_MAX];
    uint32_t hl = udp_pkt_headers(&p, 0, hdr);
    udp_send(q->w, q, &q->path, hdr, hl, NULL, 0, 0);
    count_sent(q, w->first_psn);
}

static void send_ud(struct soft_wire_qp *q, uint64_t idx, struct udp_swqe *w)
{
    uint32_t mtu = udp_mtu_bytes(q->a.mtu);
    if (w->total > mtu) {
        udp_send_finish(q, idx, IBV_WC_LOC_LEN_ERR, SOFT_VERR_MSG_SIZE);
        return;
    }
    if (!sges_ours(q, w, 0)) {
        udp_send_finish(q, idx, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
        return;
    }
    bool imm = w->opcode == IBV_WR_SEND_WITH_IMM;
    struct udp_pkt p = {.opcode = UDP_TR_UD | (imm ? UDP_OP_SEND_ONLY_IMM : UDP_OP_SEND_ONLY),
                        .dqpn = w->remote_qpn, .psn = q->tx_psn, .imm = w->imm,
                        .qkey = (w->remote_qkey & 0x80000000u) ? q->a.qkey : w->remote_qkey,
                        .sqpn = q->qpn, .se = w->send_flags & IBV_SEND_SOLICITED};
    q->tx_psn = (q->tx_psn + 1) & UDP_PSN_MASK;
    struct udp_path path = {.sport = udp_ep_port(q->w->ep), .dport = udp_ep_port(q->w->ep)};
    memcpy(path.sgid, w->sgid, 16);
    memcpy(path.dgid, w->dgid, 16);
    if (udp_gid_v4(path.sgid) == udp_gid_v4(path.dgid) && udp_ep_can(q->w->ep, path.dgid)) {
        struct udp_piece pc[SOFT_MAX_SGE];
        int k = gather(q, w, 0, (uint32_t)w->total, pc);
        uint8_t pad = (uint8_t)((4 - (w->total & 3)) & 3);
        uint8_t hdr[UDP_HDR_MAX];
        uint32_t hl = udp_pkt_headers(&p, pad, hdr);
        udp_send(q->w, q, &path, hdr, hl, pc, k, pad);
    }
    udp_send_finish(q, idx, IBV_WC_SUCCESS, 0);
}

static bool out_of_credits(const struct soft_wire_qp *q)
{
    return q->lsn_valid && (int32_t)(q->rsn_next - q->lsn) >= 0;
}

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

bool udp_req_ready(const struct soft_wire_qp *q)
{
    if (q->tx_wqe >= q->sq_tail || q->stopped || q->rnr_until)
        return false;
    if (q->qp_type == IBV_QPT_RC &&
        udp_psn_diff(q->tx_psn, q->una_psn) >= (q->rnr_probe ? 1 : UDP_WINDOW))
        return false;
    const struct udp_swqe *w = &q->sq[q->tx_wqe % q->sq_cap];
    if (q->credit_flow && udp_psn_diff(q->sent_msgs, q->peer_posted) >= 0)
        return false;
    if (q->qp_type == IBV_QPT_RC && !w->started && takes_receive(w) && out_of_credits(q))
        return false;           /* the deadline (credit_wait_ns) brings it back */
    return true;
}

/* The packet of send w at byte offset off: built and sent. */
static void data_pkt(struct soft_wire_qp *q, struct udp_swqe *w, uint64_t off, bool ackreq)
{
    uint32_t mtu = udp_mtu_bytes(q->a.mtu);
    uint32_t n = (uint32_t)TBRT_MIN((uint64_t)mtu, w->total - off);
    bool first = off == 0, last = off + n >= w->total;
    uint32_t psn = (w->first_psn + (uint32_t)(off / mtu)) & UDP_PSN_MASK;
    struct udp_pkt p = {.opcode = opcode_of(q, w, first, last), .dqpn = q->a.dest_qpn,
                        .psn = psn, .imm = w->imm, .ackreq = ackreq,
                        .se = last && (w->send_flags & IBV_SEND_SOLICITED)};
    if (first && !is_send(w)) {
        p.va = w->raddr;
        p.rkey = w->rkey;
        p.dmalen = (uint32_t)w->total;
    }
    struct udp_piece pc[SOFT_MAX_SGE];
    int k = gather(q, w, off, n, pc);
    uint8_t pad = (uint8_t)((4 - (n & 3)) & 3);
    uint8_t hdr[UDP_HDR_MAX];
    uint32_t hl = udp_pkt_headers(&p, pad, hdr);
    udp_send(q->w, q, &q->path, hdr, hl, pc, k, pad);
}

/* The tail loss probe: no ACK this long after the last packet went, that
 * packet goes once more, asking for one. A lost last packet (or its ACK)
 * has no later packet to make the responder NAK, and the retransmit timer
 * (67 ms at timeout 14) would stall the QP: the probe either fills the gap
 * (an ACK) or shows an earlier one (a NAK sequence error), or is a
 * duplicate the responder ACKs again. Still no ACK: again, twice as late
 * each time (1, 2, 4 .. ms) while the timer runs. It is no retry:
 * retry_cnt and the timer are the QP's, as before. At most a quarter of
 * the timer. */
#define UDP_TLP_NS 1000000ull
static uint64_t tlp_ns(const struct soft_wire_qp *q)
{
    uint64_t t = 4096ull << (q->a.timeout > 31 ? 31 : q->a.timeout);
    return TBRT_MIN(UDP_TLP_NS, t / 4);
}

static void tail_probe(struct soft_wire_qp *q)
{
    q->tlp_ns = 0;
    if (q->tlp_shift < 16) {
        uint64_t next = q->w->now + (tlp_ns(q) << ++q->tlp_shift);
        if (q->rto_ns && next < q->rto_ns)
            q->tlp_ns = next;
    }
    uint32_t psn = (q->tx_psn - 1) & UDP_PSN_MASK;
    if (q->una_psn == q->tx_psn || q->rnr_until || q->rnr_probe)
        return;
    uint32_t mtu = udp_mtu_bytes(q->a.mtu);
    for (uint64_t i = q->una_wqe; i < q->sq_tail && i <= q->tx_wqe; i++) {
        struct udp_swqe *w = &q->sq[i % q->sq_cap];
        if (!w->started)
            return;
        int32_t d = udp_psn_diff(psn, w->first_psn);
        if (d < 0 || d >= (int32_t)w->npkts)
            continue;
        if (answered_by_response(w))
            return;             /* a READ or atomic: its request is no data packet */
        data_pkt(q, w, (uint64_t)d * mtu, true);
        q->st.tail_probes++;    /* not a retransmit: nothing is known lost */
        return;
    }
}

void udp_req_transmit(struct soft_wire_qp *q)
{
    if (q->stopped || q->a.state != IBV_QPS_RTS || q->tx_wqe == q->sq_tail)
        return;
    uint64_t now = q->w->now;
    if (q->rnr_until) {
        if (now < q->rnr_until)
            return;
        q->rnr_until = 0;
    }
    struct soft_faults *f = q->w->cfg.faults;
    if (soft_faults_port_state(f, q->w->cfg.dev_index, q->a.port ? q->a.port : 1) !=
        IBV_PORT_ACTIVE)
        return;                 /* a pulled cable: nothing leaves (RC times out) */
    uint32_t mtu = udp_mtu_bytes(q->a.mtu);
    bool rc = q->qp_type == IBV_QPT_RC;
    int budget = 256;
    while (budget-- > 0 && q->tx_wqe < q->sq_tail && !q->stopped) {
        uint64_t idx = q->tx_wqe;
        struct udp_swqe *w = &q->sq[idx % q->sq_cap];
        if (q->qp_type == IBV_QPT_UD) {
            send_ud(q, idx, w);
            q->tx_wqe++;
            continue;
        }
        if (rc && udp_psn_diff(q->tx_psn, q->una_psn) >= (q->rnr_probe ? 1 : UDP_WINDOW))
            break;
        if (!w->started) {
            if (!sges_ours(q, w, answered_by_response(w) ? IBV_ACCESS_LOCAL_WRITE : 0)) {
                udp_send_finish(q, idx, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
                return;
            }
            if (q->credit_flow && is_send(w) && udp_psn_diff(q->sent_msgs, q->peer_posted) >= 0 &&
                now - q->credit_heard_ns < UDP_PEER_SILENT_NS)
                break;          /* TN3205: wait for a receive at the peer (while there is one) */
            if (rc && takes_receive(w) && out_of_credits(q)) {
                /* the peer has no receive for it: wait for the ACK that
                 * says it has, or (that ACK lost) send it after a while and
                 * let an RNR NAK answer */
                if (!q->credit_wait_ns)
                    q->credit_wait_ns = now + UDP_CREDIT_PROBE_NS;
                if (now < q->credit_wait_ns)
                    break;
            }
            q->credit_wait_ns = 0;
            if (rc && takes_receive(w))
                w->rsn = q->rsn_next++;
            w->first_psn = q->tx_psn;
            w->npkts = npkts_of(w, mtu);
            w->started = true;
            if (q->credit_flow && is_send(w))
                q->sent_msgs++;
        }
        if (is_atomic(w)) {
            send_atomic(q, w);
            q->tx_psn = (w->first_psn + 1) & UDP_PSN_MASK;
            q->tx_wqe++;
            q->tx_off = 0;
            if (!q->rto_ns && q->a.timeout)
                q->rto_ns = now + rto_ns(q);
            continue;
        }
        if (is_read(w)) {
            send_read(q, w, mtu);
            q->tx_psn = (w->first_psn + w->npkts) & UDP_PSN_MASK;
            q->tx_wqe++;
            q->tx_off = 0;
            if (!q->rto_ns && q->a.timeout)
                q->rto_ns = now + rto_ns(q);
            continue;
        }
        uint64_t off = q->tx_off;
        uint32_t n = (uint32_t)TBRT_MIN((uint64_t)mtu, w->total - off);
        bool last = off + n >= w->total;
        uint32_t psn = (w->first_psn + (uint32_t)(off / mtu)) & UDP_PSN_MASK;
        /* the probe after an RNR NAK asks too: the window stays shut until
         * its ACK, and without one only the retransmit timer would open it */
        bool ackreq = false;
        if (rc && (last || q->rnr_probe || ++q->since_ackreq >= UDP_ACK_EVERY)) {
            ackreq = true;
            q->since_ackreq = 0;
        }
        data_pkt(q, w, off, ackreq);
        count_sent(q, psn);
        if (rc && q->a.timeout) {
            q->tlp_ns = now + tlp_ns(q);
            q->tlp_shift = 0;
        }
        q->tx_psn = (psn + 1) & UDP_PSN_MASK;
        q->tx_off = off + n;
        if (last) {
            q->tx_wqe++;
            q->tx_off = 0;
            if (!rc && idx == q->una_wqe) {
                udp_send_finish(q, idx, IBV_WC_SUCCESS, 0);
                q->una_wqe = idx + 1;
            }
        }
        if (rc && !q->rto_ns && q->a.timeout)
            q->rto_ns = now + rto_ns(q);
    }
}

/* Send again from PSN psn (a NAK, a timeout, a missing READ response;
 * rnr: an RNR NAK, whose re-sends are no loss). */
static void go_back_for(struct soft_wire_qp *q, uint32_t psn, bool rnr)
{
    q->resend_rnr = rnr;
    uint32_t mtu = udp_mtu_bytes(q->a.mtu);
    for (uint64_t i = q->una_wqe; i < q->sq_tail; i++) {
        struct udp_swqe *w = &q->sq[i % q->sq_cap];
        if (!w->started)
            break;
        int32_t d = udp_psn_diff(psn, w->first_psn);
        if (d < 0 || d >= (int32_t)w->npkts)
            continue;
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
            q->tx_off = (uint64_t)d * mtu;
            q->tx_psn = psn;
        }
        q->since_ackreq = 0;
        q->rto_ns = 0;          /* armed again by the first packet sent */
        return;
    }
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
        tail_probe(q);
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
