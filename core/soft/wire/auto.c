/* auto.c - the soft device's "auto" wire: each connected queue pair rides
 * shared memory when its peer's GID is an address of this host (and
 * namespace), else RoCEv2 over UDP, decided at RTR from the destination
 * GID. wire.h's operations over the two wires beneath it.
 *
 * Queue pair numbers and memory keys come from the shm wire (peers on this
 * host find a QP through its registry); the UDP wire takes the same ones.
 * The UDP wire opens (binds its port) only when a first queue pair needs
 * it, so the many processes of one host that never leave it do not compete
 * for the port; memory registered before then is registered with it then,
 * and completion queues get its wake-up too. Receives posted before RTR
 * wait here and go to the wire chosen. UD queue pairs stay on shared memory
 * (a datagram QP has no one peer to choose by): use wire = "udp" for UD
 * between hosts. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "soft/wire/faults.h"
#include "soft/wire/wire.h"
#include "util/util.h"

/* the UDP wire's entry points for a key and a QPN made elsewhere (udp.h) */
int udp_mr_reg_key(struct soft_wire *w, void *addr, size_t len, uint32_t access, uint32_t *key,
                   char *why, size_t whylen);
int udp_qp_create_qpn(struct soft_wire *w, const struct soft_wire_qp_init *init,
                      struct soft_wire_qp **out, uint32_t *qpn, char *why, size_t len);

#define SHM (&soft_wire_shm)
#define UDP (&soft_wire_udp)

struct auto_mr {
    struct auto_mr *next;
    void *addr;
    size_t len;
    uint32_t access, key;
};

struct soft_wire {
    struct soft_wire_cfg cfg;
    char fabric[96], pcap[256];
    struct soft_wire *shm, *udp;
    char udp_why[TBRT_WHY_MAX];
    bool udp_failed;
    struct auto_mr *mrs;
    struct soft_wire_cq *cqs;
    struct soft_wire_qp *qps;
};

struct soft_wire_cq {
    struct soft_wire *w;
    struct soft_wire_cq *next;
    struct soft_wire_cq *shm, *udp;
    int fd;                     /* epoll over both wakeups */
};

struct pending_recv {
    uint64_t index;
    uint32_t num_sge;
    uint64_t total;
    struct ibv_sge sge[SOFT_MAX_SGE];
};

enum { NONE, ON_SHM, ON_UDP };

struct soft_wire_qp {
    struct soft_wire *w;
    struct soft_wire_qp *next;
    struct soft_wire_qp_init init;
    struct soft_wire_cq *recv_cq, *send_cq;
    struct soft_wire_qp *shm, *udp;
    uint32_t qpn;
    int on;
    bool stopped;
    struct soft_wire_qp_attr a;
    struct pending_recv *pend;  /* rq_cap of them, before the choice */
    uint64_t pend_first, pend_end;
};

static void auto_close(struct soft_wire *w)
{
    if (w->udp)
        UDP->close(w->udp);
    if (w->shm)
        SHM->close(w->shm);
    while (w->mrs) {
        struct auto_mr *m = w->mrs;
        w->mrs = m->next;
        free(m);
    }
    free(w);
}

static int auto_open(const struct soft_wire_cfg *cfg, struct soft_wire **out, char *why,
                     size_t len)
{
    struct soft_wire *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(why, len, ENOMEM, "out of memory");
    w->cfg = *cfg;
    str_copy(w->fabric, sizeof w->fabric, cfg->fabric);
    w->cfg.fabric = w->fabric;
    str_copy(w->pcap, sizeof w->pcap, cfg->pcap ? cfg->pcap : "");
    w->cfg.pcap = w->pcap[0] ? w->pcap : NULL;
    int rc = SHM->open(&w->cfg, &w->shm, why, len);
    if (rc) {
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

/* Open the UDP wire now, with what exists already. */
static bool udp_up(struct soft_wire *w)
{
    if (w->udp)
        return true;
    if (w->udp_failed)
        return false;
    int rc = UDP->open(&w->cfg, &w->udp, w->udp_why, sizeof w->udp_why);
    if (rc) {
        w->udp_failed = true;
        w->udp = NULL;
        return false;
    }
    for (struct auto_mr *m = w->mrs; m; m = m->next) {
        uint32_t key = m->key;
        char why[TBRT_WHY_MAX];
        udp_mr_reg_key(w->udp, m->addr, m->len, m->access, &key, why, sizeof why);
    }
    for (struct soft_wire_cq *c = w->cqs; c; c = c->next) {
        int fd;
        char why[TBRT_WHY_MAX];
        if (UDP->cq_create(w->udp, &c->udp, &fd, why, sizeof why) == 0) {
            struct epoll_event e = {.events = EPOLLIN, .data.fd = fd};
            epoll_ctl(c->fd, EPOLL_CTL_ADD, fd, &e);
        }
    }
    return true;
}

/* Is this GID an address of this host (and network namespace)? A bind
 * says so exactly; the soft devices' own link-local GIDs are. */
static bool gid_here(const uint8_t gid[16])
{
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (gid[0] == 0xfe && gid[1] == 0x80 && gid[9] == 0x54 && gid[10] == 0x42)
        return true;
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    int fam;
    if (memcmp(gid, v4, 12) == 0) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, gid + 12, 4);
        sl = sizeof *a;
        fam = AF_INET;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, gid, 16);
        sl = sizeof *a;
        fam = AF_INET6;
    }
    int fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool here = bind(fd, (struct sockaddr *)&ss, sl) == 0;
    close(fd);
    return here;
}

static bool auto_reaches(struct soft_wire *w, const uint8_t gid[16], bool local, char *why,
                         size_t len)
{
    if (gid_here(gid))
        return SHM->reaches(w->shm, gid, true, why, len);
    (void)local;
    if (!udp_up(w)) {
        err_set(why, len, EHOSTUNREACH, "the peer is on another host or namespace, and the UDP "
                "wire cannot open here: %s", w->udp_why);
        return false;
    }
    return UDP->reaches(w->udp, gid, false, why, len);
}

/* ---- memory ------------------------------------------------------------------------ */

static int auto_mr_reg(struct soft_wire *w, void *addr, size_t len, uint64_t iova,
                       uint32_t access, uint32_t *key, char *why, size_t whylen)
{
    struct auto_mr *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(why, whylen, ENOMEM, "out of memory");
    if (w->udp && iova != (uint64_t)(uintptr_t)addr)
        return err_set(why, whylen, EOPNOTSUPP, "the udp wire takes no iova other than the "
                       "address yet");
    int rc = SHM->mr_reg(w->shm, addr, len, iova, access, key, why, whylen);
    if (rc) {
        free(m);
        return rc;
    }
    if (w->udp && (rc = udp_mr_reg_key(w->udp, addr, len, access, key, why, whylen))) {
        SHM->mr_dereg(w->shm, *key);
        free(m);
        return rc;
    }
    *m = (struct auto_mr){.next = w->mrs, .addr = addr, .len = len, .access = access, .key = *key};
    w->mrs = m;
    return 0;
}

static void auto_mr_dereg(struct soft_wire *w, uint32_t key)
{
    for (struct auto_mr **pp = &w->mrs; *pp; pp = &(*pp)->next)
        if ((*pp)->key == key) {
            struct auto_mr *m = *pp;
            *pp = m->next;
            free(m);
            break;
        }
    if (w->udp)
        UDP->mr_dereg(w->udp, key);
    SHM->mr_dereg(w->shm, key);
}

/* ---- completion queues ------------------------------------------------------------------ */

static int auto_cq_create(struct soft_wire *w, struct soft_wire_cq **out, int *fd, char *why,
                          size_t len)
{
    struct soft_wire_cq *c = calloc(1, sizeof *c);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!c || ep < 0) {
        free(c);
        if (ep >= 0)
            close(ep);
        return err_set(why, len, ENOMEM, "completion queue: out of memory");
    }
    int sfd, ufd;
    int rc = SHM->cq_create(w->shm, &c->shm, &sfd, why, len);
    if (rc == 0 && w->udp && (rc = UDP->cq_create(w->udp, &c->udp, &ufd, why, len)))
        SHM->cq_destroy(c->shm);
    if (rc) {
        close(ep);
        free(c);
        return rc;
    }
    struct epoll_event e = {.events = EPOLLIN, .data.fd = sfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &e);
    if (c->udp) {
        e.data.fd = ufd;
        epoll_ctl(ep, EPOLL_CTL_ADD, ufd, &e);
    }
    c->w = w;
    c->fd = ep;
    c->next = w->cqs;
    w->cqs = c;
    *fd = ep;
    *out = c;
    return 0;
}

static void auto_cq_destroy(struct soft_wire_cq *c)
{
    struct soft_wire *w = c->w;
    for (struct soft_wire_cq **pp = &w->cqs; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (c->udp)
        UDP->cq_destroy(c->udp);
    SHM->cq_destroy(c->shm);
    close(c->fd);
    free(c);
}

static void auto_cq_arm(struct soft_wire_cq *c)
{
    SHM->cq_arm(c->shm);
    if (c->udp)
        UDP->cq_arm(c->udp);
}

/* (merged from verbs2: completions the objects made wake the CQ through
 * whichever wire beneath has the op) */
static void auto_cq_wake(struct soft_wire_cq *c)
{
    SHM->cq_wake(c->shm);
    if (c->udp && UDP->cq_wake)
        UDP->cq_wake(c->udp);
}

static int auto_cq_ack(struct soft_wire_cq *c)
{
    int n = SHM->cq_ack(c->shm);
    if (c->udp)
        n += UDP->cq_ack(c->udp);
    return n;
}

/* ---- queue pairs ------------------------------------------------------------------------ */

static int auto_qp_create(struct soft_wire *w, const struct soft_wire_qp_init *init,
                          struct soft_wire_qp **out, uint32_t *qpn, char *why, size_t len)
{
    struct soft_wire_qp *q = calloc(1, sizeof *q);
    if (q)
        q->pend = calloc(init->rq_cap, sizeof *q->pend);
    if (!q || !q->pend) {
        if (q)
            free(q->pend);
        free(q);
        return err_set(why, len, ENOMEM, "out of memory");
    }
    struct soft_wire_qp_init si = *init;
    si.recv_cq = init->recv_cq->shm;
    si.send_cq = init->send_cq->shm;
    int rc = SHM->qp_create(w->shm, &si, &q->shm, qpn, why, len);
    if (rc) {
        free(q->pend);
        free(q);
        return rc;
    }
    q->w = w;
    q->init = *init;
    q->recv_cq = init->recv_cq;
    q->send_cq = init->send_cq;
    q->qpn = *qpn;
    q->on = init->qp_type == IBV_QPT_UD ? ON_SHM : NONE;
    q->next = w->qps;
    w->qps = q;
    *out = q;
    return 0;
}

static void auto_qp_destroy(struct soft_wire_qp *q)
{
    struct soft_wire *w = q->w;
    for (struct soft_wire_qp **pp = &w->qps; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    if (q->udp)
        UDP->qp_destroy(q->udp);
    SHM->qp_destroy(q->shm);
    free(q->pend);
    free(q);
}

static void replay(struct soft_wire_qp *q)
{
    for (uint64_t i = q->pend_first; i < q->pend_end; i++) {
        struct pending_recv *p = &q->pend[i % q->init.rq_cap];
        struct soft_wire_recv r = {.num_sge = p->num_sge, .total = p->total, .sge = p->sge};
        if (q->on == ON_UDP)
            UDP->post_recv(q->udp, p->index, &r);
        else
            SHM->post_recv(q->shm, p->index, &r);
    }
    q->pend_first = q->pend_end;
}

/* RTR: choose the wire by where the peer is. */
static void choose(struct soft_wire_qp *q, const struct soft_wire_qp_attr *a)
{
    struct soft_wire *w = q->w;
    q->on = ON_SHM;
    /* a QP of an SRQ stays on shm: the auto wire's SRQs are shm's */
    if (!gid_here(a->dgid) && !q->init.srq && udp_up(w)) {
        struct soft_wire_qp_init ui = q->init;
        ui.recv_cq = q->recv_cq->udp;
        ui.send_cq = q->send_cq->udp;
        uint32_t qpn = q->qpn;
        char why[TBRT_WHY_MAX];
        if (ui.recv_cq && ui.send_cq &&
            udp_qp_create_qpn(w->udp, &ui, &q->udp, &qpn, why, sizeof why) == 0) {
            q->on = ON_UDP;
            struct soft_wire_qp_attr init = *a;
            init.state = IBV_QPS_INIT;
            UDP->qp_modify(q->udp, &init);
        }
    }
}

static void auto_qp_modify(struct soft_wire_qp *q, const struct soft_wire_qp_attr *a)
{
    q->a = *a;
    if (a->state == IBV_QPS_RESET) {
        if (q->udp) {
            UDP->qp_destroy(q->udp);
            q->udp = NULL;
        }
        SHM->qp_modify(q->shm, a);
        q->on = q->init.qp_type == IBV_QPT_UD ? ON_SHM : NONE;
        q->pend_first = q->pend_end;
        q->stopped = false;
        return;
    }
    if (q->on == NONE && a->state == IBV_QPS_RTR)
        choose(q, a);
    if (q->on == NONE) {
        if (a->state == IBV_QPS_ERR)
            q->stopped = true;
        SHM->qp_modify(q->shm, a);
        return;
    }
    if (q->on == ON_UDP)
        UDP->qp_modify(q->udp, a);
    else
        SHM->qp_modify(q->shm, a);
    if (q->pend_first != q->pend_end)
        replay(q);
}

static void auto_post_recv(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_recv *r)
{
    if (q->on == ON_UDP)
        UDP->post_recv(q->udp, index, r);
    else if (q->on == ON_SHM)
        SHM->post_recv(q->shm, index, r);
    else {
        struct pending_recv *p = &q->pend[index % q->init.rq_cap];
        p->index = index;
        p->num_sge = r->num_sge;
        p->total = r->total;
        memcpy(p->sge, r->sge, (size_t)r->num_sge * sizeof p->sge[0]);
        if (q->pend_first == q->pend_end)
            q->pend_first = index;
        q->pend_end = index + 1;
    }
}

static void auto_post_send(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_send *s)
{
    if (q->on == ON_UDP)
        UDP->post_send(q->udp, index, s);
    else
        SHM->post_send(q->shm, index, s);
}

static bool auto_write_inline(struct soft_wire_qp *q, uint64_t index, const void *data,
                              uint32_t len, uint64_t remote_addr, uint32_t rkey)
{
    return q->on == ON_SHM && SHM->write_inline(q->shm, index, data, len, remote_addr, rkey);
}

/* Only shared memory runs a queue by itself; UDP's sends go out in its turn. */
static bool auto_doorbell(struct soft_wire_qp *q)
{
    return q->on == ON_SHM && SHM->doorbell(q->shm);
}

static int auto_progress(struct soft_wire *w, struct soft_wire_event *ev, int max)
{
    int n = SHM->progress(w->shm, ev, max);
    if (w->udp && n < max)
        n += UDP->progress(w->udp, ev + n, max - n);
    return n;
}

/* Quiet when shared memory is: the UDP wire, once open, takes every turn
 * (packets arrive whatever the queues say). */
static bool auto_quiet(struct soft_wire *w)
{
    return !w->udp && SHM->quiet(w->shm);
}

/* Keys are the shm wire's on either wire (see the top): its table resolves
 * them, for the objects placing a result that carries its data. */
static int auto_mr_local(struct soft_wire *w, uint32_t key, uint64_t addr, uint64_t len,
                         uint32_t access, void **out)
{
    return SHM->mr_local(w->shm, key, addr, len, access, out);
}

/* Where the peer is: known on shared memory, not across UDP. */
static int auto_qp_peer(struct soft_wire_qp *q, int cpu)
{
    if (q->on == ON_SHM && SHM->qp_peer)
        return SHM->qp_peer(q->shm, cpu);
    if (q->on == ON_UDP && UDP->qp_peer)
        return UDP->qp_peer(q->udp, cpu);
    return SOFT_PEER_UNKNOWN;
}

static int auto_recv_done(struct soft_wire_qp *q, uint64_t index, struct soft_result *r)
{
    if (q->on == ON_UDP)
        return UDP->recv_done(q->udp, index, r);
    if (q->on == ON_SHM)
        return SHM->recv_done(q->shm, index, r);
    if (!q->stopped)
        return 0;
    *r = (struct soft_result){.stamp = soft_stamp(), .status = IBV_WC_WR_FLUSH_ERR,
                              .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_FLUSH};
    if (q->pend_first <= index)
        q->pend_first = index + 1;
    return 1;
}

static int auto_send_done(struct soft_wire_qp *q, uint64_t index, struct soft_result *r)
{
    if (q->on == ON_UDP)
        return UDP->send_done(q->udp, index, r);
    return SHM->send_done(q->shm, index, r);
}

/* ---- SRQs and events (merged from verbs2) -------------------------------------------------
 * Shared receive queues live on the shm wire (the auto wire's SRQ handle is
 * the shm wire's), and a QP made with one stays on it (the UDP wire has no
 * SRQs yet). The device's events come from the shm wire's event fd, and
 * from the UDP wire's when it has one. */

static int auto_srq_create(struct soft_wire *w, const struct soft_wire_srq_init *init,
                           struct soft_wire_srq **out, uint32_t *srqn, char *why, size_t len)
{
    return SHM->srq_create(w->shm, init, out, srqn, why, len);
}

static void auto_srq_destroy(struct soft_wire_srq *s) { SHM->srq_destroy(s); }

static void auto_srq_post(struct soft_wire_srq *s, uint64_t index, const struct soft_wire_recv *r)
{
    SHM->srq_post(s, index, r);
}

static void auto_srq_arm(struct soft_wire_srq *s, uint32_t limit) { SHM->srq_arm(s, limit); }

static int auto_srq_done(struct soft_wire_srq *s, uint64_t index, struct soft_result *r)
{
    return SHM->srq_done(s, index, r);
}

static int auto_event_fd(struct soft_wire *w) { return SHM->event_fd(w->shm); }

static void auto_event_arm(struct soft_wire *w)
{
    SHM->event_arm(w->shm);
    if (w->udp && UDP->event_arm)
        UDP->event_arm(w->udp);
}

static void auto_event_ack(struct soft_wire *w)
{
    SHM->event_ack(w->shm);
    if (w->udp && UDP->event_ack)
        UDP->event_ack(w->udp);
}

static void auto_ports_changed(struct soft_wire *w)
{
    SHM->ports_changed(w->shm);
    if (w->udp && UDP->ports_changed)
        UDP->ports_changed(w->udp);
}

static void auto_stats(struct soft_wire *w, uint32_t qpn, struct soft_wire_stats *s)
{
    if (w->udp)
        UDP->stats(w->udp, qpn, s);
    if (w->shm)
        SHM->stats(w->shm, qpn, s);
}

const struct soft_wire_ops soft_wire_auto = {
    .name = "auto",
    .open = auto_open,
    .close = auto_close,
    .reaches = auto_reaches,
    .mr_reg = auto_mr_reg,
    .mr_dereg = auto_mr_dereg,
    .mr_local = auto_mr_local,
    .cq_create = auto_cq_create,
    .cq_destroy = auto_cq_destroy,
    .cq_arm = auto_cq_arm,
    .cq_ack = auto_cq_ack,
    .cq_wake = auto_cq_wake,
    .srq_create = auto_srq_create,
    .srq_destroy = auto_srq_destroy,
    .srq_post = auto_srq_post,
    .srq_arm = auto_srq_arm,
    .srq_done = auto_srq_done,
    .qp_create = auto_qp_create,
    .qp_destroy = auto_qp_destroy,
    .qp_modify = auto_qp_modify,
    .post_recv = auto_post_recv,
    .post_send = auto_post_send,
    .write_inline = auto_write_inline,
    .doorbell = auto_doorbell,
    .progress = auto_progress,
    .quiet = auto_quiet,
    .event_fd = auto_event_fd,
    .event_arm = auto_event_arm,
    .event_ack = auto_event_ack,
    .ports_changed = auto_ports_changed,
    .recv_done = auto_recv_done,
    .send_done = auto_send_done,
    .stats = auto_stats,
    .qp_peer = auto_qp_peer,
};
