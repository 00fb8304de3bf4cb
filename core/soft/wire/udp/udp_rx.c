/* udp_rx.c - the UDP wire's endpoint, receiving: recvmmsg in batches, a
 * GRO run split by its segment size, the destination address from
 * IP_PKTINFO, the ICRC checked (a bad one is counted and dropped, as
 * hardware does), then the packet goes to the queue pair its BTH names,
 * whichever device of this process owns it. Faults act here on what
 * arrives, and held packets whose time came go out or in. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft/wire/udp/udp_ep.h"

static void sa_to_gid(const struct sockaddr_in6 *sa, uint8_t gid[16], uint16_t *port)
{
    memset(gid, 0, 16);
    if (sa->sin6_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        gid[10] = gid[11] = 0xff;
        memcpy(gid + 12, &a->sin_addr, 4);
        *port = ntohs(a->sin_port);
    } else {
        memcpy(gid, &sa->sin6_addr, 16);
        *port = ntohs(sa->sin6_port);
    }
}

/* TBRT_UDP_DEBUG: a packet whose ICRC did not match, and where it came from. */
static void icrc_failed(uint8_t opcode, uint32_t len, uint32_t dqpn, const struct udp_path *path)
{
    char from[INET6_ADDRSTRLEN], to[INET6_ADDRSTRLEN];
    bool v4s = udp_gid_v4(path->sgid), v4d = udp_gid_v4(path->dgid);
    inet_ntop(v4s ? AF_INET : AF_INET6, path->sgid + (v4s ? 12 : 0), from, sizeof from);
    inet_ntop(v4d ? AF_INET : AF_INET6, path->dgid + (v4d ? 12 : 0), to, sizeof to);
    fprintf(stderr, "tbrt udp: ICRC mismatch, dropped: opcode 0x%x, %u bytes, for QP 0x%x, "
            "from %s port %u to %s port %u\n", opcode, len, dqpn, from, path->sport, to,
            path->dport);
}

/* One packet that arrived (after the receive side's faults). */
static void dispatch(struct soft_wire *w, uint8_t *buf, uint32_t len, const struct udp_path *path)
{
    struct udp_ep *ep = w->ep;
    if (len < UDP_BTH + UDP_ICRC) {
        w->st.bad_packets++;
        return;
    }
    struct udp_piece body = {buf + UDP_BTH, len - UDP_BTH - UDP_ICRC};
    uint32_t got = (uint32_t)buf[len - 4] | (uint32_t)buf[len - 3] << 8 |
                   (uint32_t)buf[len - 2] << 16 | (uint32_t)buf[len - 1] << 24;
    uint32_t dqpn = (uint32_t)buf[5] << 16 | (uint32_t)buf[6] << 8 | buf[7];
    struct soft_wire_qp *q = udp_ep_qp_find(ep, dqpn);
    struct soft_wire_stats *st = q ? &q->st : &w->st;
    if (udp_icrc(path, buf, UDP_BTH, &body, 1, 0) != got) {
        st->icrc_failures++;
        if (udp_debug)
            icrc_failed(buf[0], len, dqpn, path);
        return;                 /* as hardware: silently dropped */
    }
    struct udp_pkt p;
    const char *why = NULL;
    if (!q || udp_pkt_parse(buf, len, &p, &why)) {
        st->bad_packets++;
        return;
    }
    q->st.pkts_recv++;
    q->st.bytes_recv += len;
    if (q->w != w)
        q->w->now = w->now;
    unsigned f = udp_op_flags(p.opcode);
    if (p.opcode == UDP_OP_TBRT_CREDIT || (f & UDP_F_RESP))
        udp_req_recv(q, &p);
    else
        udp_resp_recv(q, &p, path);
}

static void rx_one(struct soft_wire *w, uint8_t *buf, uint32_t len, const struct udp_path *path)
{
    struct soft_faults *f = w->cfg.faults;
    struct soft_fault_verdict v;
    if (TBRT_UNLIKELY(f->active) && len >= UDP_BTH) {
        uint32_t dqpn = (uint32_t)buf[5] << 16 | (uint32_t)buf[6] << 8 | buf[7];
        if (soft_faults_packet(f, dqpn, SOFT_FAULT_RX, w->now, &v)) {
            if (v.drop) {
                w->st.drops_injected++;
                return;
            }
            if (v.corrupt) {
                uint64_t bit = v.corrupt_bit % ((uint64_t)len * 8);
                buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                w->st.corrupt_injected++;
            }
            if (v.delay_ns || v.reorder) {
                struct udp_held *h = calloc(1, sizeof *h + len);
                if (h && w->ep->nheld < HELD_MAX) {
                    memcpy(h->data, buf, len);
                    h->len = len;
                    h->rx = true;
                    memcpy(h->src, path->dgid, 16);
                    udp_gid_to_sa(path->sgid, path->sport, &h->peer);
                    h->due_ns = w->now + v.delay_ns + (v.reorder ? 1000000ull : 0);
                    udp_held_insert(w->ep, h);
                    w->st.delayed_injected++;
                } else {
                    free(h);
                    w->st.drops_injected++;
                }
                return;
            }
            if (v.duplicate) {
                w->st.dups_injected++;
                uint8_t copy[UDP_PKT_MAX + 64];
                memcpy(copy, buf, len);
                dispatch(w, copy, len, path);
            }
        }
    }
    dispatch(w, buf, len, path);
}

/* Held packets whose time came. */
static void held_due(struct soft_wire *w)
{
    struct udp_ep *ep = w->ep;
    while (ep->held && ep->held->due_ns <= w->now) {
        struct udp_held *h = ep->held;
        ep->held = h->next;
        ep->nheld--;
        if (h->rx) {
            struct udp_path path = {.dport = ep->port};
            memcpy(path.dgid, h->src, 16);
            sa_to_gid(&h->peer, path.sgid, &path.sport);
            dispatch(w, h->data, h->len, &path);
        } else {
            udp_held_send(w, h);
        }
        free(h);
    }
}

static int rx_batch(struct soft_wire *w, int fd)
{
    struct udp_ep *ep = w->ep;
    for (int i = 0; i < BATCH; i++) {
        struct msghdr *m = &ep->rmsg[i].msg_hdr;
        memset(m, 0, sizeof *m);
        m->msg_name = &ep->rname[i];
        m->msg_namelen = sizeof ep->rname[i];
        m->msg_iov = &ep->riov[i];
        m->msg_iovlen = 1;
        m->msg_control = ep->rctl[i];
        m->msg_controllen = sizeof ep->rctl[i];
    }
    int n = recvmmsg(fd, ep->rmsg, BATCH, MSG_DONTWAIT, NULL);
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++) {
        struct msghdr *m = &ep->rmsg[i].msg_hdr;
        uint32_t len = ep->rmsg[i].msg_len;
        if (m->msg_flags & MSG_TRUNC) {
            w->st.bad_packets++;
            continue;
        }
        uint32_t seg = len;     /* a GRO run: packets of seg bytes, the last maybe shorter */
        struct udp_path path = {.dport = ep->port};
        sa_to_gid(&ep->rname[i], path.sgid, &path.sport);
        for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
            if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
                struct in_pktinfo pi;
                memcpy(&pi, CMSG_DATA(c), sizeof pi);
                path.dgid[10] = path.dgid[11] = 0xff;
                memcpy(path.dgid + 12, &pi.ipi_addr, 4);
            } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
                struct in6_pktinfo pi;
                memcpy(&pi, CMSG_DATA(c), sizeof pi);
                memcpy(path.dgid, &pi.ipi6_addr, 16);
            } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                int g;
                memcpy(&g, CMSG_DATA(c), sizeof g);
                if (g > 0 && (uint32_t)g < seg)
                    seg = (uint32_t)g;
            }
        }
        for (uint32_t off = 0; off < len; off += seg) {
            uint32_t plen = TBRT_MIN(seg, len - off);
            if (plen > UDP_PKT_MAX) {
                w->st.bad_packets++;
                continue;
            }
            if (ep->pcap)
                udp_pcap_packet(ep->pcap, &path, ep->rbuf[i] + off, plen, false);
            rx_one(w, ep->rbuf[i] + off, plen, &path);
        }
    }
    return n;
}

void udp_ep_poll(struct soft_wire *w)
{
    struct udp_ep *ep = w->ep;
    for (int i = 0; i < RX_BATCHES; i++) {
        int n = rx_batch(w, ep->fd4);
        if (ep->fd6 >= 0)
            n += rx_batch(w, ep->fd6);
        if (n < BATCH)
            break;
    }
    if (ep->held)
        held_due(w);
}
