/* udp_resp.c - the responder of the UDP wire: request packets that arrive
 * for one of our queue pairs, checked and placed, and what the responder
 * sends back.
 *
 * RC (IBA 9.7): the expected PSN decides.
 *   - the expected one: carried out, the expected PSN moves on (a READ
 *     request by as many as its responses);
 *   - an earlier one: a duplicate (the requester went back): counted, ACKed
 *     again, a READ answered again; nothing is placed twice;
 *   - a later one: packets were lost: one NAK sequence error naming the
 *     expected PSN (not one per packet), the packet dropped;
 *   - a SEND (or WRITE with immediate) with no receive posted: RNR NAK with
 *     our min_rnr_timer, nothing consumed;
 *   - a message longer than its receive: the receive fails with
 *     IBV_WC_LOC_LEN_ERR, NAK invalid request, the QP goes to ERR; a bad
 *     rkey, range or access: NAK remote access error, the QP goes to ERR.
 *   ACKs are coalesced: one per batch of packets received, for the latest
 *   that asked (UDP_ACK_EVERY packets at most apart, and every last packet).
 * UC: no ACK. A PSN that is not the expected one means packets were lost:
 *   the message being received is given up (its receive stays posted for
 *   the next one) and packets are dropped until the next FIRST or ONLY, so
 *   a lost packet loses the rest of its message and never completes.
 * UD: the Q_Key must match; a receive gets the 40-byte GRH first (RoCEv2:
 *   for IPv4, 20 bytes of zeros then the IPv4 header) then the payload.
 * apple-uc (credit flow): the responder tells its peer how many receives it
 *   posted (TBRT_CREDIT packets) whenever that grows, and again every
 *   UDP_CREDIT_REFRESH_NS while receives wait, so a lost one heals. */
#include <stdio.h>
#include <string.h>

#include "soft/wire/udp/udp.h"
#include "util/copy.h"

void udp_resp_reset(struct soft_wire_qp *q)
{
    q->epsn = q->a.rq_psn & UDP_PSN_MASK;
    q->msn = 0;
    q->nak_sent = q->ack_due = q->ack_fresh = q->ack_held = false;
    q->in_msg = q->recv_bad = q->in_send = false;
    q->adv_limit = 0;
    q->rq_next = q->rq_prod;
    q->rj_head = q->rj_tail = 0;
    memset(q->atomics, 0, sizeof q->atomics);
    q->rq_base = (uint32_t)q->rq_prod;
    q->credit_told = 0;
    q->credit_ns = 0;
}

/* Receives of ours a SEND may take (IBA 9.7.7.2 end-to-end credits): those
 * posted, less those taken, the one a SEND being received holds too. A QP
 * without receives of its own (a shared receive queue: wire.h gives it
 * rq_cap 1, unused) gives none, as IBA says: the code says "invalid" and
 * the peer sends unlimited, RNR NAKs its bound (so does a QP of one
 * receive, which loses nothing by it). */
static bool gives_credits(const struct soft_wire_qp *q)
{
    return q->qp_type == IBV_QPT_RC && q->rq_cap > 1;
}
static uint64_t recvs_taken(const struct soft_wire_qp *q)
{
    return q->rq_next + (q->in_msg && q->in_send ? 1 : 0);
}

static void send_aeth(struct soft_wire_qp *q, uint32_t psn, uint8_t syndrome)
{
    if (syndrome == UDP_AETH_ACK && gives_credits(q)) {
        /* every ACK says how many more the peer may send: it never sends a
         * window of packets that RNR NAKs would throw away */
        uint64_t taken = recvs_taken(q);
        uint8_t code = udp_credit_code(q->rq_prod > taken ? q->rq_prod - taken : 0);
        syndrome = code;
        q->adv_limit = taken + udp_credit_count(code);
    }
    struct udp_pkt p = {.opcode = UDP_TR_RC | UDP_OP_ACK, .dqpn = q->a.dest_qpn, .psn = psn,
                        .syndrome = syndrome, .msn = q->msn & UDP_PSN_MASK};
    uint8_t hdr[UDP_HDR_MAX];
    uint32_t hl = udp_pkt_headers(&p, 0, hdr);
    udp_send(q->w, q, &q->path, hdr, hl, NULL, 0, 0);
    if ((syndrome & 0xe0) == 0)
        q->st.acks_sent++;
    else if ((syndrome & 0xe0) == UDP_AETH_RNR)
        q->st.rnr_naks_sent++;
    else
        q->st.naks_sent++;
}

/* A NAK that ends the connection at this end too. */
static void nak_fatal(struct soft_wire_qp *q, uint32_t psn, uint8_t syndrome)
{
    send_aeth(q, psn, syndrome);
    /* the asynchronous event the objects report for this end */
    q->cause = syndrome == UDP_AETH_NAK_ACCESS ? SOFT_WIRE_CAUSE_ACCESS
               : syndrome == UDP_AETH_NAK_INV  ? SOFT_WIRE_CAUSE_REQ
                                               : SOFT_WIRE_CAUSE_FATAL;
    udp_qp_fail(q);
}

/* Finish the receive the message goes to (udp_srq.c: the QP's own or its
 * SRQ's, claimed now if not yet). */
static void recv_finish(struct soft_wire_qp *q, uint8_t status, uint32_t verr,
                        uint32_t byte_len, uint8_t opcode, uint16_t flags, uint32_t imm,
                        uint32_t src_qp)
{
    if (!udp_recv_cur(q))
        return;
    struct soft_result res = {.stamp = soft_stamp(), .status = status, .vendor_err = verr,
                              .byte_len = byte_len, .opcode = opcode, .wc_flags = flags,
                              .imm = imm, .src_qp = src_qp};
    udp_recv_end(q, &res);
}

/* What an RC / UC request does; false when an RNR NAK is due (nothing
 * consumed). */
static bool has_receive(const struct soft_wire_qp *q) { return udp_recv_ready(q); }

/* A SEND packet of the message being received. */
static void send_pkt(struct soft_wire_qp *q, const struct udp_pkt *p, unsigned f, bool rc)
{
    if (f & UDP_F_FIRST) {
        q->in_msg = true;
        q->in_send = true;
        q->recv_bad = false;
        q->recv_off = 0;
    } else if (!q->in_msg) {
        return;                 /* the rest of a message given up */
    }
    /* (a receive that failed is finished: the rest of its message takes none) */
    struct udp_rwqe *r = q->recv_bad ? NULL : udp_recv_cur(q);
    if (!r && !q->recv_bad) {
        q->in_msg = false;      /* checked at the first packet: cannot happen */
        return;
    }
    if (!q->recv_bad) {
        if (q->recv_off + p->paylen > r->total) {
            /* TN3205's rule first, as the shm wire: more frames than the receive */
            bool frames = q->w->cfg.frames_must_match &&
                          soft_frames(q->recv_off + p->paylen) != soft_frames(r->total);
            recv_finish(q, IBV_WC_LOC_LEN_ERR,
                        frames ? SOFT_VERR_FRAMES : SOFT_VERR_RECV_SHORT, 0, IBV_WC_RECV, 0, 0,
                        q->a.dest_qpn);
            q->recv_bad = true;
            if (rc)
                nak_fatal(q, p->psn, UDP_AETH_NAK_INV);
        } else if (p->paylen && udp_sge_copy(q->w, r->sge, r->num_sge, q->recv_off,
                                              (void *)p->payload, p->paylen, true)) {
            recv_finish(q, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY, 0, IBV_WC_RECV, 0,
                        0, q->a.dest_qpn);
            q->recv_bad = true;
            if (rc)
                nak_fatal(q, p->psn, UDP_AETH_NAK_OP);
        }
    }
    q->recv_off += p->paylen;
    if (!(f & UDP_F_LAST))
        return;
    q->in_msg = false;
    q->msn++;
    if (q->recv_bad)
        return;
    if (q->w->cfg.frames_must_match && soft_frames(r->total) != soft_frames(q->recv_off)) {
        /* TN3205: a SEND and its RECV must cover the same frames */
        recv_finish(q, IBV_WC_LOC_LEN_ERR, SOFT_VERR_FRAMES, 0, IBV_WC_RECV, 0, 0,
                    q->a.dest_qpn);
        return;
    }
    bool imm = f & UDP_F_IMM;
    recv_finish(q, IBV_WC_SUCCESS, 0, (uint32_t)q->recv_off, IBV_WC_RECV,
                imm ? IBV_WC_WITH_IMM : 0, imm ? p->imm : 0, q->a.dest_qpn);
}

/* A WRITE packet. */
static void write_pkt(struct soft_wire_qp *q, const struct udp_pkt *p, unsigned f, bool rc)
{
    if (f & UDP_F_FIRST) {
        q->in_msg = false;
        if (p->dmalen && !udp_mr_find(q->w, p->rkey, p->va, p->dmalen, IBV_ACCESS_REMOTE_WRITE)) {
            if (rc)
                nak_fatal(q, p->psn, UDP_AETH_NAK_ACCESS);
            return;             /* UC: a bad rkey drops the message */
        }
        q->in_msg = true;
        q->in_send = false;
        q->recv_bad = false;
        q->wr_va = p->va;
        q->wr_rkey = p->rkey;
        q->wr_left = q->wr_total = p->dmalen;
    } else if (!q->in_msg) {
        return;
    }
    if (p->paylen > q->wr_left || ((f & UDP_F_LAST) && p->paylen != q->wr_left)) {
        q->in_msg = false;
        if (rc)
            nak_fatal(q, p->psn, UDP_AETH_NAK_INV);
        return;
    }
    if (p->paylen) {
        /* checked again: the region may have gone since the first packet */
        if (!udp_mr_find(q->w, q->wr_rkey, q->wr_va, p->paylen, IBV_ACCESS_REMOTE_WRITE)) {
            q->in_msg = false;
            if (rc)
                nak_fatal(q, p->psn, UDP_AETH_NAK_ACCESS);
            return;
        }
        /* in address order, its last word last (tbrt_dev.ordered_writes):
         * packets come in PSN order, so the message's last word is too */
        placed_copy((void *)(uintptr_t)q->wr_va, p->payload, p->paylen);
    }
    q->wr_va += p->paylen;
    q->wr_left -= p->paylen;
    if (!(f & UDP_F_LAST))
        return;
    q->in_msg = false;
    q->msn++;
    if (f & UDP_F_IMM)
        recv_finish(q, IBV_WC_SUCCESS, 0, q->wr_total, IBV_WC_RECV_RDMA_WITH_IMM,
                    IBV_WC_WITH_IMM, p->imm, q->a.dest_qpn);
}

static void read_req(struct soft_wire_qp *q, const struct udp_pkt *p, bool dup)
{
    if (p->dmalen && !udp_mr_find(q->w, p->rkey, p->va, p->dmalen, IBV_ACCESS_REMOTE_READ)) {
        if (!dup)
            nak_fatal(q, p->psn, UDP_AETH_NAK_ACCESS);
        return;
    }
    for (uint32_t i = q->rj_head; i != q->rj_tail; i++)
        if (q->rj[i % UDP_READ_JOBS].psn == p->psn)
            return;             /* being answered already */
    if (q->rj_tail - q->rj_head >= UDP_READ_JOBS)
        return;                 /* more than max_dest_rd_atomic: the requester tries again */
    q->rj[q->rj_tail++ % UDP_READ_JOBS] =
        (struct udp_read_job){.psn = p->psn, .len = p->dmalen, .va = p->va, .rkey = p->rkey};
    q->wake = true;
}

static void send_atomic_ack(struct soft_wire_qp *q, uint32_t psn, uint64_t orig)
{
    struct udp_pkt p = {.opcode = UDP_TR_RC | UDP_OP_ATOMIC_ACK, .dqpn = q->a.dest_qpn,
                        .psn = psn, .syndrome = UDP_AETH_ACK, .msn = q->msn & UDP_PSN_MASK,
                        .orig = orig};
    uint8_t hdr[UDP_HDR_MAX];
    uint32_t hl = udp_pkt_headers(&p, 0, hdr);
    udp_send(q->w, q, &q->path, hdr, hl, NULL, 0, 0);
    q->st.acks_sent++;
}

/* CMP_SWAP / FETCH_ADD on 8 aligned bytes of ours with REMOTE_ATOMIC
 * (IB spec 9.4.5), atomic against every other thread of this process. */
static void atomic_req(struct soft_wire_qp *q, const struct udp_pkt *p)
{
    if (p->va & (SOFT_ATOMIC_SIZE - 1)) {
        nak_fatal(q, p->psn, UDP_AETH_NAK_INV);
        return;
    }
    if (!udp_mr_find(q->w, p->rkey, p->va, SOFT_ATOMIC_SIZE, IBV_ACCESS_REMOTE_ATOMIC)) {
        nak_fatal(q, p->psn, UDP_AETH_NAK_ACCESS);
        return;
    }
    uint64_t *m = (uint64_t *)(uintptr_t)p->va, orig;
    if ((p->opcode & 0x1f) == UDP_OP_CMP_SWAP) {
        orig = p->compare;
        __atomic_compare_exchange_n(m, &orig, p->swap_add, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
    } else {
        orig = __atomic_fetch_add(m, p->swap_add, __ATOMIC_SEQ_CST);
    }
    q->atomics[q->atomic_next++ % UDP_ATOMIC_SAVED] =
        (struct udp_atomic_done){.psn = p->psn, .valid = true, .orig = orig};
    q->msn++;
    send_atomic_ack(q, p->psn, orig);
}

static void rc_recv(struct soft_wire_qp *q, const struct udp_pkt *p, unsigned f)
{
    int32_t d = udp_psn_diff(p->psn, q->epsn);
    uint8_t op = p->opcode & 0x1f;
    if (d < 0) {
        q->st.duplicates++;
        if (op == UDP_OP_READ_REQ) {
            read_req(q, p, true);
        } else if (op == UDP_OP_CMP_SWAP || op == UDP_OP_FETCH_ADD) {
            /* done already: the same answer again, never a second time */
            for (int i = 0; i < UDP_ATOMIC_SAVED; i++)
                if (q->atomics[i].valid && q->atomics[i].psn == p->psn)
                    send_atomic_ack(q, p->psn, q->atomics[i].orig);
        } else {
            q->ack_due = true;
            q->ack_psn = (q->epsn - 1) & UDP_PSN_MASK;
        }
        return;
    }
    if (d > 0) {
        q->st.out_of_order++;
        /* one NAK for the gap; again only to a packet that asks for an ACK
         * a while later (the NAK was lost: the requester goes on sending
         * and only its retransmit timer would find out) */
        if (!q->nak_sent || (p->ackreq && q->w->now - q->nak_ns >= UDP_NAK_AGAIN_NS)) {
            send_aeth(q, q->epsn, UDP_AETH_NAK_SEQ);
            q->nak_sent = true;
            q->nak_ns = q->w->now;
        }
        return;
    }
    q->nak_sent = false;
    uint32_t mtu = udp_mtu_bytes(q->a.mtu);
    if (op == UDP_OP_READ_REQ) {
        read_req(q, p, false);
        uint32_t n = p->dmalen ? (p->dmalen + mtu - 1) / mtu : 1;
        q->epsn = (q->epsn + n) & UDP_PSN_MASK;
        return;
    }
    if (op == UDP_OP_CMP_SWAP || op == UDP_OP_FETCH_ADD) {
        atomic_req(q, p);
        if (!q->stopped)
            q->epsn = (q->epsn + 1) & UDP_PSN_MASK;
        return;
    }
    bool needs_recv = ((f & UDP_F_SEND) && (f & UDP_F_FIRST)) ||
                      ((f & UDP_F_WRITE) && (f & UDP_F_IMM));
    if (needs_recv && !has_receive(q)) {
        send_aeth(q, p->psn, (uint8_t)(UDP_AETH_RNR | (q->a.min_rnr_timer & 31)));
        q->nak_ns = q->w->now;
        /* the packets behind it are dropped silently: the RNR NAK already
         * names the PSN to go back to (a NAK sequence error as well would
         * send the requester back a second time) */
        q->nak_sent = true;
        return;
    }
    if (f & UDP_F_SEND)
        send_pkt(q, p, f, true);
    else
        write_pkt(q, p, f, true);
    if (q->stopped)
        return;
    q->epsn = (q->epsn + 1) & UDP_PSN_MASK;
    if (p->ackreq) {
        q->ack_due = true;
        q->ack_fresh = true;
        q->ack_psn = p->psn;
    }
}

static void uc_recv(struct soft_wire_qp *q, const struct udp_pkt *p, unsigned f)
{
    if (p->psn != q->epsn) {
        /* lost packets: the message being received is given up */
        q->st.out_of_order++;
        q->in_msg = false;
    }
    q->epsn = (p->psn + 1) & UDP_PSN_MASK;
    if (f & UDP_F_FIRST) {
        bool needs_recv = (f & UDP_F_SEND) || ((f & UDP_F_WRITE) && (f & UDP_F_IMM) &&
                                               (f & UDP_F_LAST));
        if (needs_recv && !has_receive(q)) {
            q->in_msg = false;  /* nowhere to put it: dropped */
            return;
        }
    } else if ((f & UDP_F_WRITE) && (f & UDP_F_IMM) && q->in_msg && !has_receive(q)) {
        q->in_msg = false;
        return;
    }
    if (f & UDP_F_SEND)
        send_pkt(q, p, f, false);
    else
        write_pkt(q, p, f, false);
}

static void ud_recv(struct soft_wire_qp *q, const struct udp_pkt *p, const struct udp_path *from)
{
    if (p->qkey != q->a.qkey) {
        q->st.bad_packets++;    /* Q_Key violation: dropped, as on the wire */
        return;
    }
    if (!has_receive(q))
        return;                 /* dropped */
    struct udp_rwqe *r = udp_recv_cur(q);
    enum { GRH = 40 };
    if (r->total < GRH + (uint64_t)p->paylen) {
        recv_finish(q, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT, 0, IBV_WC_RECV, 0, 0,
                    p->sqpn);
        return;
    }
    uint8_t grh[GRH + 8] = {0}, ip[48];
    uint32_t n = udp_ip_headers(from, p->paylen + UDP_BTH + UDP_DETH + UDP_ICRC, false, ip);
    if (n == 28)
        memcpy(grh + 20, ip, 20);   /* IPv4: the header in the last 20 bytes */
    else
        memcpy(grh, ip, 40);
    if (udp_sge_copy(q->w, r->sge, r->num_sge, 0, grh, GRH, true) ||
        (p->paylen && udp_sge_copy(q->w, r->sge, r->num_sge, GRH, (void *)p->payload,
                                   p->paylen, true))) {
        recv_finish(q, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY, 0, IBV_WC_RECV, 0, 0, p->sqpn);
        return;
    }
    bool imm = udp_op_flags(p->opcode) & UDP_F_IMM;
    recv_finish(q, IBV_WC_SUCCESS, 0, GRH + p->paylen, IBV_WC_RECV,
                (uint16_t)(IBV_WC_GRH | (imm ? IBV_WC_WITH_IMM : 0)), imm ? p->imm : 0, p->sqpn);
}

void udp_resp_recv(struct soft_wire_qp *q, const struct udp_pkt *p, const struct udp_path *from)
{
    if (q->stopped || (q->a.state != IBV_QPS_RTR && q->a.state != IBV_QPS_RTS))
        return;
    unsigned f = udp_op_flags(p->opcode);
    uint8_t tr = p->opcode & 0xe0;
    if (q->qp_type == IBV_QPT_UD) {
        if (tr == UDP_TR_UD)
            ud_recv(q, p, from);
        return;
    }
    /* a connected QP hears only its peer */
    if ((q->qp_type == IBV_QPT_RC) != (tr == UDP_TR_RC) || memcmp(from->sgid, q->a.dgid, 16)) {
        q->st.bad_packets++;
        return;
    }
    if (q->qp_type == IBV_QPT_RC)
        rc_recv(q, p, f);
    else
        uc_recv(q, p, f);
}

/* An ACK just for credits is due: the peer used more than half of what it
 * may send by our last word, and we have more to give now. Nothing is due
 * before the first request (the requester's first message goes unasked). */
static bool credits_due(const struct soft_wire_qp *q)
{
    if (!gives_credits(q) || q->rj_head != q->rj_tail ||
        q->epsn == (q->a.rq_psn & UDP_PSN_MASK))
        return false;
    uint64_t taken = recvs_taken(q);
    if (q->rq_prod <= taken)
        return false;
    uint64_t limit = taken + udp_credit_count(udp_credit_code(q->rq_prod - taken));
    return limit > q->adv_limit && q->adv_limit <= taken + (limit - taken) / 2;
}

/* READ responses of the oldest job, then the coalesced ACK, then credits. */
void udp_resp_send_held(struct soft_wire_qp *q)
{
    if (q->ack_due && !q->stopped && (q->a.state == IBV_QPS_RTR || q->a.state == IBV_QPS_RTS)) {
        q->ack_due = q->ack_fresh = q->ack_held = false;
        send_aeth(q, q->ack_psn, UDP_AETH_ACK);
    }
}

void udp_resp_transmit(struct soft_wire_qp *q, bool hold)
{
    if (q->stopped || (q->a.state != IBV_QPS_RTR && q->a.state != IBV_QPS_RTS))
        return;
    uint32_t mtu = udp_mtu_bytes(q->a.mtu);
    int budget = 256;
    while (q->rj_head != q->rj_tail && budget > 0) {
        struct udp_read_job *j = &q->rj[q->rj_head % UDP_READ_JOBS];
        while (budget-- > 0) {
            uint32_t n = TBRT_MIN(mtu, j->len - j->sent);
            if (n && !udp_mr_find(q->w, j->rkey, j->va + j->sent, n, IBV_ACCESS_REMOTE_READ)) {
                q->rj_head = q->rj_tail;    /* the region went away meanwhile */
                nak_fatal(q, (j->psn + j->sent / mtu) & UDP_PSN_MASK, UDP_AETH_NAK_ACCESS);
                return;
            }
            bool first = j->sent == 0, last = j->sent + n >= j->len;
            uint8_t op = first && last ? UDP_OP_READ_RESP_ONLY
                         : first       ? UDP_OP_READ_RESP_FIRST
                         : last        ? UDP_OP_READ_RESP_LAST
                                       : UDP_OP_READ_RESP_MIDDLE;
            struct udp_pkt p = {.opcode = UDP_TR_RC | op, .dqpn = q->a.dest_qpn,
                                .psn = (j->psn + j->sent / mtu) & UDP_PSN_MASK,
                                .syndrome = UDP_AETH_ACK, .msn = q->msn & UDP_PSN_MASK};
            struct udp_piece pc = {(const void *)(uintptr_t)(j->va + j->sent), n};
            uint8_t pad = (uint8_t)((4 - (n & 3)) & 3);
            uint8_t hdr[UDP_HDR_MAX];
            uint32_t hl = udp_pkt_headers(&p, pad, hdr);
            udp_send(q->w, q, &q->path, hdr, hl, &pc, 1, pad);
            j->sent += n;
            if (last) {
                q->rj_head++;
                q->msn++;
                break;
            }
        }
    }
    if (!q->ack_due && credits_due(q)) {
        /* receives were posted while the peer may be waiting for them: an
         * ACK of what arrived so far says so (READ jobs wait: an ACK past a
         * READ request not answered yet would tell the peer it was lost) */
        q->ack_due = true;
        q->ack_psn = (q->epsn - 1) & UDP_PSN_MASK;
    }
    if (q->ack_due && hold && q->ack_fresh && !q->ack_held && !credits_due(q)) {
        /* held once at most: the next turn sends it, whatever arrived
         * meanwhile (a stream asks every turn); never one whose credits a
         * requester short of receives may be waiting for */
        q->ack_held = true;
    } else if (q->ack_due) {
        q->ack_due = q->ack_held = false;
        send_aeth(q, q->ack_psn, UDP_AETH_ACK);
    }
    q->ack_fresh = false;
    if (q->credit_flow && q->a.state == IBV_QPS_RTS) {
        uint32_t posted = (uint32_t)q->rq_prod - q->rq_base;
        uint64_t now = q->w->now;
        uint64_t every = has_receive(q) ? UDP_CREDIT_REFRESH_NS : UDP_CREDIT_IDLE_NS;
        if (posted != q->credit_told || now - q->credit_ns >= every) {
            uint8_t pay[8] = {'T', 'B', 'C', 'R', (uint8_t)(posted >> 24), (uint8_t)(posted >> 16),
                              (uint8_t)(posted >> 8), (uint8_t)posted};
            struct udp_pkt p = {.opcode = UDP_OP_TBRT_CREDIT, .dqpn = q->a.dest_qpn};
            uint8_t hdr[UDP_HDR_MAX];
            uint32_t hl = udp_pkt_headers(&p, 0, hdr);
            struct udp_piece pc = {pay, 8};
            udp_send(q->w, q, &q->path, hdr, hl, &pc, 1, 0);
            q->credit_told = posted;
            q->credit_ns = now;
            q->st.credits_sent++;
        }
    }
}

uint64_t udp_resp_deadline(const struct soft_wire_qp *q)
{
    if (q->rj_head != q->rj_tail || q->ack_due || credits_due(q))
        return 1;               /* now */
    if (q->credit_flow && q->a.state == IBV_QPS_RTS)
        return q->credit_ns + (has_receive(q) ? UDP_CREDIT_REFRESH_NS : UDP_CREDIT_IDLE_NS);
    return 0;
}
