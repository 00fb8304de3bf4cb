/* udp_req.c - the requester of the UDP wire: a queue pair's sends become
 * packets, and what comes back (ACKs, NAKs, READ responses, credits:
 * udp_ack.c) finishes them.
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

#include "soft/wire/udp/udp_req.h"

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
void udp_req_tail_probe(struct soft_wire_qp *q)
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
    uint64_t i;
    int32_t d;
    struct udp_swqe *w = udp_sent_wqe(q, psn, TBRT_MIN(q->sq_tail, q->tx_wqe + 1), &i, &d);
    if (!w || answered_by_response(w))
        return;                 /* a READ or atomic: its request is no data packet */
    data_pkt(q, w, (uint64_t)d * udp_mtu_bytes(q->a.mtu), true);
    q->st.tail_probes++;        /* not a retransmit: nothing is known lost */
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
