/* udp_wire.c - the UDP wire as a soft wire (wire.h): opening it on its
 * endpoint, memory keys, completion queues' wake-ups, queue pairs (their
 * queues in process memory, posting, their results, ERR and RESET) and the
 * wire's turn (progress).
 *
 * Posted work waits in the wire's own queues and is run by this process:
 * sends by the requester (udp_req.c) on the wire's turn, receives by the
 * responder (udp_resp.c) when packets for them arrive. A completion queue's
 * fd is an eventfd written when a result lands for it while it is armed;
 * while its owner sleeps the endpoint's helper thread takes the wire's
 * turns (packets, timers, sends), so the result comes without the owner.
 * The event fd is the same for what progress reports (a peer broke a QP,
 * an SRQ's limit was crossed), so an owner asleep in ibv_get_async_event
 * wakes for them too. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "soft/wire/udp/udp.h"
#include "util/copy.h"

int udp_debug = -1;

void udp_cq_signal(struct soft_wire_cq *c)
{
    if (!c || !atomic_load_explicit(&c->armed, memory_order_relaxed) ||
        !atomic_exchange(&c->armed, false))
        return;
    udp_ep_sleepers(c->w->ep, -1);
    uint64_t one = 1;
    ssize_t r = write(c->fd, &one, sizeof one);
    (void)r;
}

void udp_event_signal(struct soft_wire *w)
{
    if (!atomic_load_explicit(&w->ev_armed, memory_order_relaxed) ||
        !atomic_exchange(&w->ev_armed, false))
        return;
    uint64_t one = 1;
    ssize_t r = write(w->evfd, &one, sizeof one);
    (void)r;
}

/* ---- the wire ------------------------------------------------------------------ */

static void udp_close(struct soft_wire *w)
{
    udp_ep_detach(w);
    if (w->evfd >= 0)
        close(w->evfd);
    for (int i = 0; i <= SOFT_MAX_MR; i++)
        free(w->mrs[i]);
    free(w);
}

static int udp_open(const struct soft_wire_cfg *cfg, struct soft_wire **out, char *why,
                    size_t len)
{
    struct soft_wire *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(why, len, ENOMEM, "out of memory");
    if (udp_debug < 0)
        udp_debug = (int)env_long("TBRT_UDP_DEBUG", 0);
    w->cfg = *cfg;
    w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->evfd < 0) {
        int e = errno;
        free(w);
        return err_set(why, len, e, "UDP wire: event fd: %s", strerror(e));
    }
    str_copy(w->fabric, sizeof w->fabric, cfg->fabric);
    w->cfg.fabric = w->fabric;
    str_copy(w->netdev, sizeof w->netdev, cfg->netdev ? cfg->netdev : "");
    str_copy(w->pcap_path, sizeof w->pcap_path, cfg->pcap ? cfg->pcap : "");
    if (!w->cfg.udp_port)
        w->cfg.udp_port = UDP_ROCE_PORT;
    int rc = udp_ep_attach(w, why, len);
    if (rc) {
        udp_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

static bool udp_reaches(struct soft_wire *w, const uint8_t gid[16], bool local, char *why,
                        size_t len)
{
    (void)local;
    if (gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80) {
        err_set(why, len, EHOSTUNREACH, "a link-local GID is no address the UDP wire can "
                "reach (use the GID of the peer's IPv4 or IPv6 address)");
        return false;
    }
    if (!udp_ep_can(w->ep, gid)) {
        err_set(why, len, EHOSTUNREACH, "the UDP wire has no %s socket here",
                udp_gid_v4(gid) ? "IPv4" : "IPv6");
        return false;
    }
    return true;
}

/* ---- memory ------------------------------------------------------------------------- */

const struct udp_mr *udp_mr_find(struct soft_wire *w, uint32_t key, uint64_t va, uint64_t len,
                                 uint32_t access)
{
    uint32_t idx = key >> 8;
    if (idx == 0 || idx > SOFT_MAX_MR)
        return NULL;
    const struct udp_mr *m = w->mrs[idx];
    if (!m || m->key != key || (m->access & access) != access)
        return NULL;
    if (va < m->addr || len > m->len || va - m->addr > m->len - len)
        return NULL;
    return m;
}

int udp_sge_copy(struct soft_wire *w, const struct ibv_sge *sge, uint32_t n, uint64_t off,
                 void *buf, uint64_t len, bool to_sge)
{
    uint8_t *b = buf;
    for (uint32_t i = 0; i < n && len; i++) {
        uint64_t l = sge[i].length;
        if (off >= l) {
            off -= l;
            continue;
        }
        uint64_t take = TBRT_MIN(l - off, len);
        uint64_t addr = sge[i].addr + off;
        if (!udp_mr_find(w, sge[i].lkey, addr, take, to_sge ? IBV_ACCESS_LOCAL_WRITE : 0))
            return -1;
        if (to_sge)
            bulk_copy((void *)(uintptr_t)addr, b, take);
        else
            bulk_copy(b, (void *)(uintptr_t)addr, take);
        b += take;
        len -= take;
        off = 0;
    }
    return len ? -1 : 0;
}

/* Register with a key given (the auto wire: shm made it) or a new one. */
int udp_mr_reg_key(struct soft_wire *w, void *addr, size_t len, uint32_t access, uint32_t *key,
                   char *why, size_t whylen)
{
    udp_ep_lock(w->ep);
    uint32_t idx = *key ? *key >> 8 : 0;
    if (!idx)
        for (idx = 1; idx <= SOFT_MAX_MR && w->mrs[idx]; idx++)
            ;
    if (idx == 0 || idx > SOFT_MAX_MR || w->mrs[idx]) {
        udp_ep_unlock(w->ep);
        return err_set(why, whylen, ENOMEM, "at most %d memory regions per device", SOFT_MAX_MR);
    }
    struct udp_mr *m = calloc(1, sizeof *m);
    if (!m) {
        udp_ep_unlock(w->ep);
        return err_set(why, whylen, ENOMEM, "out of memory");
    }
    if (!*key) {
        w->mr_gen = (w->mr_gen + 1) & 0xff;
        if (!w->mr_gen)
            w->mr_gen = 1;
        *key = idx << 8 | w->mr_gen;
    }
    *m = (struct udp_mr){.key = *key, .access = access, .addr = (uint64_t)(uintptr_t)addr,
                         .len = len};
    w->mrs[idx] = m;
    udp_ep_unlock(w->ep);
    return 0;
}

static int udp_mr_reg(struct soft_wire *w, void *addr, size_t len, uint64_t iova, uint32_t access,
                      uint32_t *key, char *why, size_t whylen)
{
    /* (merge of verbs2's wire.h: an iova is the udp wire's to implement) */
    if (iova != (uint64_t)(uintptr_t)addr)
        return err_set(why, whylen, EOPNOTSUPP, "the udp wire takes no iova other than the "
                       "address yet");
    *key = 0;
    return udp_mr_reg_key(w, addr, len, access, key, why, whylen);
}

static void udp_mr_dereg(struct soft_wire *w, uint32_t key)
{
    uint32_t idx = key >> 8;
    if (idx == 0 || idx > SOFT_MAX_MR)
        return;
    udp_ep_lock(w->ep);
    if (w->mrs[idx] && w->mrs[idx]->key == key) {
        free(w->mrs[idx]);
        w->mrs[idx] = NULL;
    }
    udp_ep_unlock(w->ep);
}

/* ---- completion queues ---------------------------------------------------------------- */

static int udp_cq_create(struct soft_wire *w, struct soft_wire_cq **out, int *fd, char *why,
                         size_t len)
{
    struct soft_wire_cq *c = calloc(1, sizeof *c);
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!c || efd < 0) {
        free(c);
        if (efd >= 0)
            close(efd);
        return err_set(why, len, ENOMEM, "completion queue: %s", strerror(errno));
    }
    c->w = w;
    c->fd = efd;
    *fd = efd;
    *out = c;
    return 0;
}

static void udp_cq_destroy(struct soft_wire_cq *c)
{
    if (atomic_exchange(&c->armed, false))
        udp_ep_sleepers(c->w->ep, -1);
    close(c->fd);
    free(c);
}

/* Armed: the next result for one of its queues makes the fd readable; the
 * owner sleeps now, so the endpoint's helper takes the turns meanwhile. */
static void udp_cq_arm(struct soft_wire_cq *c)
{
    if (!atomic_exchange(&c->armed, true))
        udp_ep_sleepers(c->w->ep, +1);
}

/* Completions the objects made themselves (flushes): as a result does. */
static void udp_cq_wake(struct soft_wire_cq *c) { udp_cq_signal(c); }

static int udp_cq_ack(struct soft_wire_cq *c)
{
    uint64_t v = 0;
    return read(c->fd, &v, sizeof v) == (ssize_t)sizeof v ? (int)v : 0;
}

/* ---- queue pairs ---------------------------------------------------------------------- */

int udp_qp_create_qpn(struct soft_wire *w, const struct soft_wire_qp_init *init,
                      struct soft_wire_qp **out, uint32_t *qpn, char *why, size_t len)
{
    if (init->rq_cap < 1 || init->rq_cap > SOFT_MAX_QP_WR || init->sq_cap < 1 ||
        init->sq_cap > SOFT_MAX_QP_WR)
        return err_set(why, len, EINVAL, "queue sizes %u / %u out of 1..%d", init->rq_cap,
                       init->sq_cap, SOFT_MAX_QP_WR);
    struct soft_wire_qp *q = calloc(1, sizeof *q);
    if (q) {
        q->sq = calloc(init->sq_cap, sizeof *q->sq);
        q->rq = calloc(init->rq_cap, sizeof *q->rq);
    }
    if (!q || !q->sq || !q->rq) {
        if (q) {
            free(q->sq);
            free(q->rq);
        }
        free(q);
        return err_set(why, len, ENOMEM, "out of memory");
    }
    udp_ep_lock(w->ep);
    int rc = udp_ep_qp_add(w->ep, q, *qpn, why, len);
    if (rc) {
        udp_ep_unlock(w->ep);
        free(q->sq);
        free(q->rq);
        free(q);
        return rc;
    }
    q->w = w;
    q->cookie = init->cookie;
    q->qp_type = init->qp_type;
    q->rq_cap = init->rq_cap;
    q->sq_cap = init->sq_cap;
    q->recv_cq = init->recv_cq;
    q->send_cq = init->send_cq;
    q->srq = init->srq;
    q->a.state = IBV_QPS_RESET;
    q->credit_flow = w->cfg.credit_flow && init->qp_type != IBV_QPT_UD;
    udp_req_reset(q);
    udp_resp_reset(q);
    q->next = w->qps;
    w->qps = q;
    udp_ep_unlock(w->ep);
    *qpn = q->qpn;
    *out = q;
    return 0;
}

static int udp_qp_create(struct soft_wire *w, const struct soft_wire_qp_init *init,
                         struct soft_wire_qp **out, uint32_t *qpn, char *why, size_t len)
{
    *qpn = 0;
    return udp_qp_create_qpn(w, init, out, qpn, why, len);
}

static void stats_add(struct soft_wire_stats *to, const struct soft_wire_stats *from)
{
    uint64_t *t = (uint64_t *)to;
    const uint64_t *f = (const uint64_t *)from;
    for (size_t i = 0; i < sizeof *to / sizeof(uint64_t); i++)
        t[i] += f[i];
}

static void udp_qp_destroy(struct soft_wire_qp *q)
{
    struct soft_wire *w = q->w;
    udp_ep_lock(w->ep);
    udp_resp_send_held(q);
    udp_ep_flush(w->ep);
    udp_srq_release(q, true);
    udp_ep_qp_del(w->ep, q);
    for (struct soft_wire_qp **pp = &w->qps; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    stats_add(&w->st, &q->st);
    udp_ep_unlock(w->ep);
    free(q->sq);
    free(q->rq);
    free(q);
}

void udp_qp_fail(struct soft_wire_qp *q)
{
    if (q->stopped)
        return;
    q->stopped = true;
    q->event = true;
    q->wake = true;
    udp_event_signal(q->w);
    udp_srq_release(q, false);
    /* the owner must look: its flushes and the event come from its turn */
    udp_cq_signal(q->send_cq);
    udp_cq_signal(q->recv_cq);
}

void udp_send_finish(struct soft_wire_qp *q, uint64_t index, uint8_t status, uint32_t verr)
{
    struct udp_swqe *w = &q->sq[index % q->sq_cap];
    w->res = (struct soft_result){.stamp = soft_stamp(), .status = status, .vendor_err = verr};
    w->done = true;
    q->wake = true;
    udp_cq_signal(q->send_cq);
    if (status != IBV_WC_SUCCESS)
        udp_qp_fail(q);
}

/* The largest IB MTU whose packets fit the route to the peer unfragmented
 * (as a RoCE NIC's active MTU follows its interface's: 1500 -> 1024): the
 * QP's path MTU, lowered if need be. Both ends of a cable compute the
 * same. */
static uint8_t route_mtu(const uint8_t dgid[16], uint8_t mtu)
{
    bool v4 = udp_gid_v4(dgid);
    int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return mtu;
    struct sockaddr_in6 sa = {0};
    socklen_t sl;
    if (v4) {
        struct sockaddr_in *a = (struct sockaddr_in *)&sa;
        a->sin_family = AF_INET;
        a->sin_port = htons(UDP_ROCE_PORT);
        memcpy(&a->sin_addr, dgid + 12, 4);
        sl = sizeof *a;
    } else {
        sa.sin6_family = AF_INET6;
        sa.sin6_port = htons(UDP_ROCE_PORT);
        memcpy(&sa.sin6_addr, dgid, 16);
        sl = sizeof sa;
    }
    int route = 0;
    socklen_t rl = sizeof route;
    if (connect(fd, (struct sockaddr *)&sa, sl) == 0)
        getsockopt(fd, v4 ? IPPROTO_IP : IPPROTO_IPV6, v4 ? IP_MTU : IPV6_MTU, &route, &rl);
    close(fd);
    if (route <= 0)
        return mtu;
    int room = route - (v4 ? 20 : 40) - 8 - UDP_HDR_MAX - UDP_ICRC;
    while (mtu > IBV_MTU_256 && (int)udp_mtu_bytes(mtu) > room)
        mtu--;
    return mtu;
}

static void udp_qp_modify(struct soft_wire_qp *q, const struct soft_wire_qp_attr *a)
{
    struct soft_wire *w = q->w;
    udp_ep_lock(w->ep);
    udp_resp_send_held(q);      /* for what arrived in its old state */
    udp_ep_flush(w->ep);
    uint32_t old = q->a.state;
    q->a = *a;
    if (q->mtu && q->mtu < a->mtu && a->state != IBV_QPS_RESET)
        q->a.mtu = q->mtu;      /* what the route allows, from RTR on */
    uint16_t port = udp_ep_port(w->ep);
    memcpy(q->path.sgid, a->sgid, 16);
    memcpy(q->path.dgid, a->dgid, 16);
    q->path.sport = port;
    q->path.dport = port;
    if (a->state == IBV_QPS_ERR) {
        q->stopped = true;
        udp_srq_release(q, false);
    } else if (a->state == IBV_QPS_RESET) {
        udp_srq_release(q, false);
        q->sq_reaped = q->sq_tail;
        q->rq_reaped = q->rq_prod;
        q->stopped = q->event = false;
        q->cause = 0;
        q->mtu = 0;
        udp_req_reset(q);
        udp_resp_reset(q);
    } else if (a->state == IBV_QPS_RTR && old == IBV_QPS_INIT) {
        if (q->qp_type != IBV_QPT_UD) {
            q->mtu = route_mtu(a->dgid, a->mtu);
            q->a.mtu = q->mtu;
        }
        q->epsn = a->rq_psn & UDP_PSN_MASK;
        q->nak_sent = q->in_msg = false;
    } else if (a->state == IBV_QPS_RTS && old == IBV_QPS_RTR) {
        udp_req_reset(q);
    }
    udp_ep_unlock(w->ep);
}

static void udp_post_recv(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_recv *r)
{
    udp_ep_lock(q->w->ep);
    struct udp_rwqe *e = &q->rq[index % q->rq_cap];
    e->num_sge = r->num_sge;
    e->total = r->total;
    memcpy(e->sge, r->sge, (size_t)r->num_sge * sizeof e->sge[0]);
    e->done = false;
    q->rq_prod = index + 1;
    udp_ep_unlock(q->w->ep);
}

static void udp_post_send(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_send *s)
{
    udp_ep_lock(q->w->ep);
    struct udp_swqe *w = &q->sq[index % q->sq_cap];
    memset(w, 0, offsetof(struct udp_swqe, inl));
    w->opcode = s->opcode;
    w->send_flags = s->send_flags;
    w->imm = s->imm_data;
    w->num_sge = s->num_sge;
    memcpy(w->sge, s->sge, (size_t)s->num_sge * sizeof w->sge[0]);
    w->total = s->total;
    w->raddr = s->remote_addr;
    w->rkey = s->rkey;
    w->compare_add = s->compare_add;
    w->swap = s->swap;
    w->remote_qpn = s->remote_qpn;
    w->remote_qkey = s->remote_qkey;
    w->flags = s->flags;
    memcpy(w->dgid, s->dgid, 16);
    memcpy(w->sgid, s->sgid, 16);
    memset(&w->started, 0, sizeof *w - offsetof(struct udp_swqe, started));
    if (s->send_flags & IBV_SEND_INLINE) {
        uint64_t off = 0;
        for (uint32_t i = 0; i < s->num_sge; i++) {
            memcpy(w->inl + off, (void *)(uintptr_t)s->sge[i].addr, s->sge[i].length);
            off += s->sge[i].length;
        }
    }
    q->sq_tail = index + 1;
    udp_ep_unlock(q->w->ep);
}

/* ---- results ------------------------------------------------------------------------- */

static void flushed(struct soft_result *r, uint8_t opcode)
{
    *r = (struct soft_result){.stamp = soft_stamp(), .status = IBV_WC_WR_FLUSH_ERR,
                              .opcode = opcode, .vendor_err = SOFT_VERR_FLUSH};
}

static int udp_recv_done(struct soft_wire_qp *q, uint64_t index, struct soft_result *r)
{
    udp_ep_lock(q->w->ep);
    struct udp_rwqe *e = &q->rq[index % q->rq_cap];
    int got = 0;
    if (index < q->rq_prod && e->done) {
        *r = e->res;
        e->done = false;
        got = 1;
    } else if (q->stopped) {
        flushed(r, IBV_WC_RECV);
        got = 1;
    }
    if (got) {
        q->rq_reaped = index + 1;
        if (q->rq_next < q->rq_reaped)
            q->rq_next = q->rq_reaped;   /* flushed: never taken now */
    }
    udp_ep_unlock(q->w->ep);
    return got;
}

static int udp_send_done(struct soft_wire_qp *q, uint64_t index, struct soft_result *r)
{
    udp_ep_lock(q->w->ep);
    struct udp_swqe *w = &q->sq[index % q->sq_cap];
    int got = 0;
    if (index < q->sq_tail && w->done) {
        *r = w->res;
        w->done = false;
        got = 1;
    } else if (q->stopped) {
        flushed(r, 0);
        got = 1;
    }
    if (got) {
        q->sq_reaped = index + 1;
        if (q->stopped) {
            /* nothing more runs: the requester must not come back to it */
            if (q->tx_wqe < q->sq_reaped)
                q->tx_wqe = q->sq_reaped;
            if (q->una_wqe < q->sq_reaped)
                q->una_wqe = q->sq_reaped;
        }
    }
    udp_ep_unlock(q->w->ep);
    return got;
}

/* ---- the wire's turn ------------------------------------------------------------------- */

/* One turn of the wire (ep locked): what arrived, timers, what to send.
 * Returns whether more waits to be sent than a turn sends; *next is the
 * earliest deadline (0: none). hold: an owner's turn, which may leave an
 * ACK asked for in it to its next (udp_resp_transmit); the helper's turns
 * never do (the owner has stopped taking turns). */
static bool turn(struct soft_wire *w, uint64_t *next, bool hold)
{
    w->now = now_ns();
    udp_ep_poll(w);
    *next = udp_ep_next_due(w->ep);
    bool again = false;
    for (struct soft_wire_qp *q = w->qps; q; q = q->next) {
        if (q->a.state != IBV_QPS_RTS && q->a.state != IBV_QPS_RTR)
            continue;
        udp_req_timers(q);
        udp_req_transmit(q);
        udp_resp_transmit(q, hold);
        uint64_t d = udp_req_deadline(q), e = udp_resp_deadline(q);
        if (e == 1 || udp_req_ready(q)) {
            again = true;       /* more to send than one turn sends */
            e = 0;
        }
        if (d && (!*next || d < *next))
            *next = d;
        if (e && (!*next || e < *next))
            *next = e;
    }
    udp_ep_flush(w->ep);
    return again;
}

static void debug_dump(struct soft_wire *w)
{
    static uint64_t last, prev;
    if (prev && w->now - prev > 10000000ull)
        fprintf(stderr, "tbrt udp %d: no turn for %.1f ms\n", (int)getpid(),
                (double)(w->now - prev) / 1e6);
    prev = w->now;
    if (w->now - last <= 20000000ull)
        return;
    last = w->now;
    for (struct soft_wire_qp *q = w->qps; q; q = q->next)
        fprintf(stderr, "tbrt udp %d: QP 0x%x st %u epsn %u recv free %llu ack_due %d | "
                "tx %u una %u rto %lld ms sq %llu/%llu/%llu rx %llu tx %llu\n",
                (int)getpid(), q->qpn, q->a.state, q->epsn,
                (unsigned long long)(q->rq_prod - q->rq_next), q->ack_due, q->tx_psn,
                q->una_psn, q->rto_ns ? (long long)(q->rto_ns - w->now) / 1000000 : -1,
                (unsigned long long)q->una_wqe, (unsigned long long)q->tx_wqe,
                (unsigned long long)q->sq_tail, (unsigned long long)q->st.pkts_recv,
                (unsigned long long)q->st.pkts_sent);
}

void udp_wire_send_held(struct soft_wire *w)
{
    for (struct soft_wire_qp *q = w->qps; q; q = q->next)
        udp_resp_send_held(q);
    udp_ep_flush(w->ep);
}

/* The endpoint's helper thread takes a turn for a wire whose owner has
 * not (udp_ep.c): results wake the owner's CQs. */
uint64_t udp_wire_turn(struct soft_wire *w)
{
    uint64_t next;
    bool again = turn(w, &next, false);
    return again ? 1 : next;
}

static int udp_progress(struct soft_wire *w, struct soft_wire_event *ev, int max)
{
    udp_ep_lock(w->ep);
    uint64_t next;
    turn(w, &next, true);   /* what is left, and the deadlines: the helper's */
    udp_ep_turned(w->ep, w->now);
    if (TBRT_UNLIKELY(udp_debug >= 2))
        debug_dump(w);
    int n = 0;
    for (struct soft_wire_qp *q = w->qps; q && n < max; q = q->next) {
        q->wake = false;
        if (q->event) {
            q->event = false;
            ev[n++] = (struct soft_wire_event){.cookie = q->cookie, .kind = SOFT_WIRE_ERR,
                                               .cause = q->cause};
        }
    }
    n += udp_srq_events(w, ev + n, max - n);
    udp_ep_unlock(w->ep);
    return n;
}

static int udp_event_fd(struct soft_wire *w) { return w->evfd; }

static void udp_event_arm(struct soft_wire *w)
{
    udp_ep_lock(w->ep);
    atomic_store(&w->ev_armed, true);
    /* an event already waiting for progress: at once */
    bool due = false;
    for (struct soft_wire_qp *q = w->qps; q && !due; q = q->next)
        due = q->event;
    for (struct soft_wire_srq *s = w->srqs; s && !due; s = s->next)
        due = s->limit_hit;
    if (due)
        udp_event_signal(w);
    udp_ep_unlock(w->ep);
}

static void udp_event_ack(struct soft_wire *w)
{
    uint64_t v;
    ssize_t r = read(w->evfd, &v, sizeof v);
    (void)r;
}

static void udp_stats(struct soft_wire *w, uint32_t qpn, struct soft_wire_stats *s)
{
    udp_ep_lock(w->ep);
    if (!qpn)
        stats_add(s, &w->st);
    for (struct soft_wire_qp *q = w->qps; q; q = q->next)
        if (!qpn || q->qpn == qpn)
            stats_add(s, &q->st);
    udp_ep_unlock(w->ep);
}

const struct soft_wire_ops soft_wire_udp = {
    .name = "udp",
    .open = udp_open,
    .close = udp_close,
    .reaches = udp_reaches,
    .mr_reg = udp_mr_reg,
    .mr_dereg = udp_mr_dereg,
    .cq_create = udp_cq_create,
    .cq_destroy = udp_cq_destroy,
    .cq_arm = udp_cq_arm,
    .cq_ack = udp_cq_ack,
    .cq_wake = udp_cq_wake,
    .srq_create = udp_srq_create,
    .srq_destroy = udp_srq_destroy,
    .srq_post = udp_srq_post,
    .srq_arm = udp_srq_arm,
    .srq_done = udp_srq_done,
    .qp_create = udp_qp_create,
    .qp_destroy = udp_qp_destroy,
    .qp_modify = udp_qp_modify,
    .post_recv = udp_post_recv,
    .post_send = udp_post_send,
    .progress = udp_progress,
    .event_fd = udp_event_fd,
    .event_arm = udp_event_arm,
    .event_ack = udp_event_ack,
    .recv_done = udp_recv_done,
    .send_done = udp_send_done,
    .stats = udp_stats,
};
