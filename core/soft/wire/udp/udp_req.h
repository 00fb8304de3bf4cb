/* udp_req.h - what the two halves of the UDP wire's requester share:
 * udp_req.c (sends become packets) and udp_ack.c (what comes back, the
 * timers). */
#ifndef TBRT_SOFT_UDP_REQ_H
#define TBRT_SOFT_UDP_REQ_H

#include "soft/wire/udp/udp.h"

static inline uint32_t npkts_of(const struct udp_swqe *w, uint32_t mtu)
{
    if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
        return 1;
    return w->total ? (uint32_t)((w->total + mtu - 1) / mtu) : 1;
}

static inline bool is_read(const struct udp_swqe *w) { return w->opcode == IBV_WR_RDMA_READ; }
static inline bool is_atomic(const struct udp_swqe *w)
{
    return w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}
/* Finished by a response of the responder's (READ data, an atomic's value),
 * not by an ACK alone. */
static inline bool answered_by_response(const struct udp_swqe *w)
{
    return is_read(w) || is_atomic(w);
}
static inline bool is_send(const struct udp_swqe *w)
{
    return w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM;
}

/* Takes a receive at the peer: what end-to-end credits count. */
static inline bool takes_receive(const struct udp_swqe *w)
{
    return is_send(w) || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

static inline uint64_t rto_ns(const struct soft_wire_qp *q)
{
    return 4096ull << (q->a.timeout > 31 ? 31 : q->a.timeout);
}

#define UDP_TLP_NS 1000000ull
static inline uint64_t tlp_ns(const struct soft_wire_qp *q)
{
    uint64_t t = 4096ull << (q->a.timeout > 31 ? 31 : q->a.timeout);
    return TBRT_MIN(UDP_TLP_NS, t / 4);
}

/* The last packet sent goes once more asking for an ACK (udp_req.c). */
void udp_req_tail_probe(struct soft_wire_qp *q);

/* The WQE among those sent from the oldest unacknowledged one up to (not
 * including) `end` whose packets hold PSN psn: its index in *at and psn's
 * packet within it in *pkt, or NULL (none holds it, or a WQE not yet
 * started comes first). */
static inline struct udp_swqe *udp_sent_wqe(struct soft_wire_qp *q, uint32_t psn, uint64_t end,
                                            uint64_t *at, int32_t *pkt)
{
    for (uint64_t i = q->una_wqe; i < end; i++) {
        struct udp_swqe *w = &q->sq[i % q->sq_cap];
        if (!w->started)
            return NULL;
        int32_t d = udp_psn_diff(psn, w->first_psn);
        if (d < 0 || d >= (int32_t)w->npkts)
            continue;
        *at = i;
        *pkt = d;
        return w;
    }
    return NULL;
}

#endif
