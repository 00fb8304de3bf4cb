/* udp_tx.c - the UDP wire's endpoint, sending: each packet an iovec of
 * its headers, the payload where it lies (registered memory: no copy) and
 * the ICRC, gathered into batches for one sendmmsg, runs of equal packets
 * to one peer as one UDP GSO message, with IP_PKTINFO naming the source
 * address the ICRC was computed with. Faults (faults.h) act here on what
 * leaves: what they delay, reorder or pace is copied into a held packet
 * that goes out when due (udp_rx.c's turn sends it). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft/wire/udp/udp_ep.h"

void udp_gid_to_sa(const uint8_t gid[16], uint16_t port, struct sockaddr_in6 *sa)
{
    memset(sa, 0, sizeof *sa);
    if (udp_gid_v4(gid)) {
        struct sockaddr_in *a = (struct sockaddr_in *)sa;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        memcpy(&a->sin_addr, gid + 12, 4);
    } else {
        sa->sin6_family = AF_INET6;
        sa->sin6_port = htons(port);
        memcpy(&sa->sin6_addr, gid, 16);
    }
}

/* The control data of a message: the source address the ICRC was
 * computed with, and the segment size of a GSO run. */
static void msg_control(struct tx_batch *b, struct tx_msg *t, struct msghdr *m, bool gso)
{
    memset(t->ctl, 0, sizeof t->ctl);
    m->msg_control = t->ctl;
    struct cmsghdr *c = (struct cmsghdr *)t->ctl;
    if (b->v4) {
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
        struct in_pktinfo *pi = (struct in_pktinfo *)CMSG_DATA(c);
        memcpy(&pi->ipi_spec_dst, t->sgid + 12, 4);
        m->msg_controllen = CMSG_SPACE(sizeof(struct in_pktinfo));
    } else {
        c->cmsg_level = IPPROTO_IPV6;
        c->cmsg_type = IPV6_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
        struct in6_pktinfo *pi = (struct in6_pktinfo *)CMSG_DATA(c);
        memcpy(&pi->ipi6_addr, t->sgid, 16);
        m->msg_controllen = CMSG_SPACE(sizeof(struct in6_pktinfo));
    }
    if (gso) {
        c = (struct cmsghdr *)(t->ctl + m->msg_controllen);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = (uint16_t)t->seg;
        memcpy(CMSG_DATA(c), &seg, sizeof seg);
        m->msg_controllen += CMSG_SPACE(sizeof(uint16_t));
    }
}

static void msg_build(struct tx_batch *b, unsigned i)
{
    struct tx_msg *t = &b->m[i];
    struct msghdr *m = &b->msg[i].msg_hdr;
    memset(m, 0, sizeof *m);
    m->msg_name = &t->to;
    m->msg_namelen = b->v4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    struct tx_slot *first = &b->slot[t->pkt0], *last = &b->slot[t->pkt0 + t->npkt - 1];
    m->msg_iov = &b->iov[first->iov0];
    m->msg_iovlen = last->iov0 + last->niov - first->iov0;
    msg_control(b, t, m, t->npkt > 1);
}

/* What a kernel answers a GSO run it cannot send as one: no UDP_SEGMENT
 * (ENOPROTOOPT, EOPNOTSUPP), a segment over the device's MTU (EMSGSIZE),
 * no checksum offload on the device (EIO), a run it does not take
 * (EINVAL). Anything else befell the packets, not the run: a filter's
 * drop (EPERM) turned into "no GSO from now on" left a link with 1% drop
 * at a third of its rate (0.4 GB/s against 1.2 at 4 MiB). */
static bool gso_refusal(int e)
{
    return e == ENOPROTOOPT || e == EOPNOTSUPP || e == EMSGSIZE || e == EIO || e == EINVAL;
}

/* A GSO run the kernel refused (no UDP_SEGMENT, a segment over the
 * device's MTU, no checksum offload): its packets one by one, and runs of
 * that size no more. */
static void gso_refused(struct tx_batch *b, unsigned i, int err)
{
    struct tx_msg *t = &b->m[i];
    if (udp_debug)
        fprintf(stderr, "tbrt udp: UDP GSO of %u x %u B: %s: those go one by one\n", t->npkt,
                t->seg, strerror(err));
    if (t->seg < b->gso_below)
        b->gso_below = t->seg;
    b->slot[t->pkt0].st->gso_refused++;
    for (uint32_t k = 0; k < t->npkt; k++) {
        struct tx_slot *s = &b->slot[t->pkt0 + k];
        struct msghdr m = {.msg_name = &t->to, .msg_namelen = b->msg[i].msg_hdr.msg_namelen,
                           .msg_iov = &b->iov[s->iov0], .msg_iovlen = s->niov};
        msg_control(b, t, &m, false);
        ssize_t r;
        while ((r = sendmsg(b->fd, &m, MSG_DONTWAIT)) < 0 && errno == EINTR)
            ;
        if (r < 0)
            s->st->sends_refused++;
    }
}

/* Message i of the batch did not go: its packets are lost. */
static void refused(struct tx_batch *b, unsigned i)
{
    struct tx_msg *t = &b->m[i];
    for (uint32_t k = 0; k < t->npkt; k++)
        b->slot[t->pkt0 + k].st->sends_refused++;
}

static void flush_one(struct udp_ep *ep, struct tx_batch *b)
{
    for (unsigned i = 0; i < b->n; i++)
        msg_build(b, i);
    unsigned done = 0;
    while (done < b->n) {
        int r = sendmmsg(b->fd, b->msg + done, b->n - done, MSG_DONTWAIT);
        if (r > 0) {
            done += (unsigned)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        int e = errno;
        if (b->m[done].npkt > 1 && gso_refusal(e)) {
            gso_refused(b, done, e);
            done++;
            continue;
        }
        /* a full socket buffer, an unreachable peer, a firewall's drop
         * (EPERM: nftables or iptables on the way out): the packets are
         * lost, as on a congested wire; RC retransmits */
        if (udp_debug)
            fprintf(stderr, "tbrt udp: sendmmsg: %s (%u of %u sent)\n", strerror(e), done, b->n);
        refused(b, done);
        done++;
    }
    (void)ep;
    b->n = b->npkt = b->niov = 0;
}

void udp_ep_flush(struct udp_ep *ep)
{
    for (int i = 0; i < 2; i++)
        if (ep->tx[i].n)
            flush_one(ep, &ep->tx[i]);
}

/* Put one packet on the socket (batched). */
static void put_packet(struct soft_wire *w, struct soft_wire_stats *st,
                       const struct udp_path *path, const uint8_t *hdr,
                       uint32_t hlen, const struct udp_piece *pieces, int npieces,
                       const uint8_t *tail, uint32_t tlen)
{
    struct udp_ep *ep = w->ep;
    bool v4 = udp_gid_v4(path->dgid);
    struct tx_batch *b = &ep->tx[v4 ? 0 : 1];
    if (b->fd < 0)
        return;
    if (hlen > UDP_HDR_MAX || tlen > sizeof b->slot[0].tail ||
        udp_gid_v4(path->sgid) != v4) {
        st->bad_packets++;
        return;
    }
    if (b->npkt == TX_PKTS || b->niov + TX_IOV > TX_PKTS * TX_IOV)
        flush_one(ep, b);
    struct tx_slot *s = &b->slot[b->npkt];
    if (hlen)
        memcpy(s->hdr, hdr, hlen);
    if (tlen)
        memcpy(s->tail, tail, tlen);
    struct iovec *iov = &b->iov[b->niov];
    int k = 0;
    uint32_t total = hlen + tlen;
    if (hlen)
        iov[k++] = (struct iovec){.iov_base = s->hdr, .iov_len = hlen};
    uint32_t plen = 0;
    for (int i = 0; i < npieces; i++)
        plen += pieces[i].len;
    if (plen && plen <= sizeof s->small && npieces <= SOFT_MAX_SGE) {
        uint32_t o = 0;
        for (int i = 0; i < npieces; i++) {
            memcpy(s->small + o, pieces[i].p, pieces[i].len);
            o += pieces[i].len;
        }
        iov[k++] = (struct iovec){.iov_base = s->small, .iov_len = plen};
        total += plen;
    } else {
        for (int i = 0; i < npieces && i < SOFT_MAX_SGE + 1; i++)
            if (pieces[i].len) {
                iov[k++] = (struct iovec){.iov_base = (void *)pieces[i].p,
                                          .iov_len = pieces[i].len};
                total += pieces[i].len;
            }
    }
    if (tlen)
        iov[k++] = (struct iovec){.iov_base = s->tail, .iov_len = tlen};
    s->iov0 = b->niov;
    s->niov = (uint32_t)k;
    s->len = total;
    s->st = st;
    b->niov += (uint32_t)k;
    struct sockaddr_in6 to;
    udp_gid_to_sa(path->dgid, path->dport, &to);
    /* the run goes on: same peer and source, not longer than its
     * segments (a shorter one is its last), room left */
    struct tx_msg *t = b->n ? &b->m[b->n - 1] : NULL;
    if (t && !t->closed && total <= t->seg && t->seg < b->gso_below && t->npkt < GSO_SEGS &&
        t->bytes + total <= GSO_BYTES && memcmp(&t->to, &to, sizeof to) == 0 &&
        memcmp(t->sgid, path->sgid, 16) == 0) {
        t->npkt++;
        t->bytes += total;
        t->closed = total < t->seg;
    } else {
        t = &b->m[b->n++];
        t->to = to;
        memcpy(t->sgid, path->sgid, 16);
        t->seg = t->bytes = total;
        t->pkt0 = b->npkt;
        t->npkt = 1;
        t->closed = false;
    }
    b->npkt++;
    st->pkts_sent++;
    st->bytes_sent += total;
    if (ep->pcap) {
        uint8_t flat[UDP_PKT_MAX];
        uint32_t off = 0;
        for (int i = 0; i < k && off + iov[i].iov_len <= sizeof flat; i++) {
            memcpy(flat + off, iov[i].iov_base, iov[i].iov_len);
            off += (uint32_t)iov[i].iov_len;
        }
        udp_pcap_packet(ep->pcap, path, flat, off, true);
    }
}

void udp_held_insert(struct udp_ep *ep, struct udp_held *h)
{
    struct udp_held **pp = &ep->held;
    while (*pp && (*pp)->due_ns <= h->due_ns)
        pp = &(*pp)->next;
    h->next = *pp;
    *pp = h;
    ep->nheld++;
}

/* A copy of a whole packet, for faults that hold or change it. */
static struct udp_held *flatten(const uint8_t *hdr, uint32_t hlen, const struct udp_piece *pieces,
                                int npieces, const uint8_t *tail, uint32_t tlen)
{
    uint32_t total = hlen + tlen;
    for (int i = 0; i < npieces; i++)
        total += pieces[i].len;
    struct udp_held *h = calloc(1, sizeof *h + total);
    if (!h)
        return NULL;
    memcpy(h->data, hdr, hlen);
    uint32_t off = hlen;
    for (int i = 0; i < npieces; i++) {
        memcpy(h->data + off, pieces[i].p, pieces[i].len);
        off += pieces[i].len;
    }
    memcpy(h->data + off, tail, tlen);
    h->len = total;
    return h;
}

void udp_held_send(struct soft_wire *w, struct udp_held *h)
{
    struct udp_path path;
    memset(&path, 0, sizeof path);
    memcpy(path.sgid, h->src, 16);
    /* the destination is in h->peer; the path is only for the socket and the capture */
    if (h->peer.sin6_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&h->peer;
        path.dgid[10] = path.dgid[11] = 0xff;
        memcpy(path.dgid + 12, &a->sin_addr, 4);
        path.dport = ntohs(a->sin_port);
    } else {
        memcpy(path.dgid, &h->peer.sin6_addr, 16);
        path.dport = ntohs(h->peer.sin6_port);
    }
    path.sport = w->ep->port;
    struct udp_piece whole = {h->data, h->len};
    put_packet(w, &w->st, &path, NULL, 0, &whole, 1, NULL, 0);
    /* the caller frees h: it must be on the socket first */
    flush_one(w->ep, &w->ep->tx[path.dgid[10] == 0xff && udp_gid_v4(path.dgid) ? 0 : 1]);
}

/* Reordered packets waiting for `after` more to pass. */
static void reorder_tick(struct soft_wire *w)
{
    struct udp_ep *ep = w->ep;
    for (struct udp_held **pp = &ep->held; *pp;) {
        struct udp_held *h = *pp;
        if (h->after && !h->rx && --h->after == 0) {
            *pp = h->next;
            ep->nheld--;
            udp_held_send(w, h);
            free(h);
            continue;
        }
        pp = &h->next;
    }
}

void udp_send(struct soft_wire *w, struct soft_wire_qp *q, const struct udp_path *path,
              const uint8_t *hdr, uint32_t hlen, const struct udp_piece *pieces, int npieces,
              uint8_t pad)
{
    struct soft_wire_stats *st = q ? &q->st : &w->st;
    uint32_t qpn = q ? q->qpn : 0;
    uint8_t tail[8] = {0};
    uint32_t icrc = udp_icrc(path, hdr, hlen, pieces, npieces, pad);
    for (int i = 0; i < 4; i++)
        tail[pad + i] = (uint8_t)(icrc >> (8 * i)); /* least significant byte first */
    uint32_t tlen = pad + UDP_ICRC;
    struct soft_faults *f = w->cfg.faults;
    struct soft_fault_verdict v;
    if (TBRT_LIKELY(!f->active) ||
        !soft_faults_packet(f, qpn, SOFT_FAULT_TX, w->now ? w->now : now_ns(), &v) ||
        (!v.drop && !v.corrupt && !v.duplicate && !v.reorder && !v.delay_ns && !v.rate_Bps)) {
        put_packet(w, st, path, hdr, hlen, pieces, npieces, tail, tlen);
        if (TBRT_UNLIKELY(w->ep->nheld))
            reorder_tick(w);
        return;
    }
    if (v.drop) {
        st->drops_injected++;
        return;
    }
    struct udp_held *h = flatten(hdr, hlen, pieces, npieces, tail, tlen);
    if (!h || w->ep->nheld >= HELD_MAX) {
        free(h);
        st->drops_injected++;
        return;
    }
    if (v.corrupt) {
        uint64_t bit = v.corrupt_bit % ((uint64_t)h->len * 8);
        h->data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        st->corrupt_injected++;
    }
    udp_gid_to_sa(path->dgid, path->dport, &h->peer);
    memcpy(h->src, path->sgid, 16);
    uint64_t now = w->now ? w->now : now_ns(), due = now + v.delay_ns;
    if (v.rate_Bps) {
        uint64_t start = w->rate_next_ns > due ? w->rate_next_ns : due;
        w->rate_next_ns = start + (uint64_t)h->len * 1000000000ull / v.rate_Bps;
        due = start;
    }
    if (v.duplicate) {
        struct udp_held *d = malloc(sizeof *d + h->len);
        if (d) {
            memcpy(d, h, sizeof *d + h->len);
            d->next = NULL;
            d->due_ns = due;
            udp_held_insert(w->ep, d);
            st->dups_injected++;
        }
    }
    if (v.reorder) {
        h->after = v.window;
        h->due_ns = due + 50000000ull; /* and at the latest after 50 ms */
        st->reordered_injected++;
    } else {
        h->due_ns = due;
    }
    if (v.delay_ns)
        st->delayed_injected++;
    if (!v.reorder && due <= now && !v.duplicate) {
        udp_held_send(w, h);        /* corrupted only */
        free(h);
        return;
    }
    udp_held_insert(w->ep, h);
}

uint64_t udp_ep_next_due(struct udp_ep *ep)
{
    return ep->held ? ep->held->due_ns : 0;
}
