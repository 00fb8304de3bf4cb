/* shm_wire.c - the shared-memory wire as a soft wire (wire.h): opening it,
 * completion doorbells, queue pairs (their blocks, posting into them, their
 * results, ERR and RESET) and the wire's progress.
 *
 * A queue pair's block in our context holds its receive and send queues;
 * posting writes a slot there (the objects keep wr_id and lengths). Results
 * are read back from the slots when the objects ask for them, copied once;
 * a receive is finished when its slot says done, a send when the queue's
 * head has passed it. In ERR nothing more executes, and what had not
 * finished is reported flushed: untaken receives are taken back from the
 * senders (a CAS on the slot), sends from the point where the queue stopped
 * (taken under its lock). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"

void shm_corrupt(struct soft_wire *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->cfg.corrupt_why, w->cfg.corrupt_len, fmt, ap);
    va_end(ap);
}

/* ---- the wire ------------------------------------------------------------------ */

static void shm_close(struct soft_wire *w)
{
    shm_mem_detach(w);
    shm_fabric_close(w);
    free(w);
}

static int shm_open(const struct soft_wire_cfg *cfg, struct soft_wire **out, char *why,
                    size_t len)
{
    struct soft_wire *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(why, len, ENOMEM, "out of memory");
    w->cfg = *cfg;
    str_copy(w->fabric, sizeof w->fabric, cfg->fabric);
    w->cfg.fabric = w->fabric;
    int rc = shm_fabric_open(w, why, len);
    if (rc) {
        shm_close(w);
        return rc;
    }
    shm_mem_attach(w);
    *out = w;
    return 0;
}

static bool shm_reaches(struct soft_wire *w, const uint8_t gid[16], bool local, char *why,
                        size_t len)
{
    (void)w;
    (void)gid;
    if (!local)
        err_set(why, len, EHOSTUNREACH, "the soft device's shared-memory wire reaches this "
                "host only");
    return local;
}

/* ---- completion queues: doorbells and their wake-up sockets -------------------- */

static int bind_wake(struct soft_wire *w, uint32_t db)
{
    struct sockaddr_un a;
    socklen_t len;
    int rc = shm_wake_addr(w, w->pid, w->ctx_id, db, &a, &len);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    unlink(a.sun_path);         /* ours by name (pid and context): a leftover */
    if (bind(fd, (struct sockaddr *)&a, len)) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

static int shm_cq_create(struct soft_wire *w, struct soft_wire_cq **out, int *fd, char *why,
                         size_t len)
{
    uint32_t db = 0;
    while (db < SHM_MAX_CQ && w->db_used[db])
        db++;
    if (db == SHM_MAX_CQ)
        return err_set(why, len, ENOMEM, "at most %d completion queues per device", SHM_MAX_CQ);
    struct soft_wire_cq *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(why, len, ENOMEM, "out of memory");
    int s = bind_wake(w, db);
    if (s < 0) {
        free(c);
        return err_set(why, len, -s, "completion socket in %s: %s", w->shm_dir,
                       s == -ENAMETOOLONG ? "the directory's path is too long for a socket (a "
                                            "shorter TBRT_SHM_DIR)" : strerror(-s));
    }
    w->db_used[db] = 1;
    *c = (struct soft_wire_cq){.w = w, .db = db, .fd = s,
                               .dbp = (struct shm_doorbell *)((char *)w->ctx + SHM_CTX_DB_OFF) + db};
    atomic_store(&c->dbp->armed, 0);
    *fd = s;
    *out = c;
    return 0;
}

static void shm_cq_destroy(struct soft_wire_cq *c)
{
    struct sockaddr_un a;
    socklen_t len;
    close(c->fd);
    if (shm_wake_addr(c->w, c->w->pid, c->w->ctx_id, c->db, &a, &len) == 0)
        unlink(a.sun_path);
    c->w->db_used[c->db] = 0;
    free(c);
}

static void shm_cq_arm(struct soft_wire_cq *c)
{
    atomic_store(&c->dbp->armed, 1);
    /* pairs with the fence in shm_ring */
    atomic_thread_fence(memory_order_seq_cst);
}

static int shm_cq_ack(struct soft_wire_cq *c)
{
    char buf[64];
    int n = 0;
    while (recv(c->fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        n++;
    return n;
}

/* ---- queue pairs ------------------------------------------------------------------ */

static int shm_qp_create(struct soft_wire *w, const struct soft_wire_qp_init *init,
                         struct soft_wire_qp **out, uint32_t *qpn, char *why, size_t len)
{
    if (init->rq_cap < 1 || init->rq_cap > SOFT_MAX_QP_WR || init->sq_cap < 1 ||
        init->sq_cap > SOFT_MAX_QP_WR)
        return err_set(why, len, EINVAL, "queue sizes %u / %u out of 1..%d", init->rq_cap,
                       init->sq_cap, SOFT_MAX_QP_WR);
    struct soft_wire_qp *q = calloc(1, sizeof *q);
    if (!q)
        return err_set(why, len, ENOMEM, "out of memory");
    q->sh_bytes = shm_qp_bytes(init->rq_cap, init->sq_cap);
    q->sh = shm_ctx_alloc(w, q->sh_bytes, &q->sh_off);
    int rc = q->sh ? shm_slot_alloc(w, q->sh_off, init->qp_type, &q->qpn, why, len)
                   : err_set(why, len, ENOMEM, "device context full");
    if (rc) {
        if (q->sh)
            shm_ctx_release(w, q->sh_off, q->sh_bytes);
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
    q->a.state = IBV_QPS_RESET;
    struct shm_qp_block *sh = q->sh;
    sh->qp_type = init->qp_type;
    sh->rq_cap = init->rq_cap;
    sh->sq_cap = init->sq_cap;
    sh->recv_db = init->recv_cq->db;
    sh->send_db = init->send_cq->db;
    sh->dev_index = (uint8_t)w->cfg.dev_index;
    atomic_store(&sh->state, IBV_QPS_RESET);
    sh->qpn = q->qpn;
    q->self = (struct shm_view){
        .peer = w->self, .sh = sh, .rq = sh->rq,
        .sq = (struct shm_swr *)((char *)sh + shm_sq_offset(init->rq_cap)),
        .recv_db = init->recv_cq->dbp, .send_db = init->send_cq->dbp, .qpn = q->qpn,
        .qp_type = init->qp_type, .rq_cap = init->rq_cap, .sq_cap = init->sq_cap,
        .recv_dbi = init->recv_cq->db, .send_dbi = init->send_cq->db, .pid = w->pid,
    };
    q->next = w->qps;
    w->qps = q;
    *qpn = q->qpn;
    *out = q;
    return 0;
}

static void shm_qp_destroy(struct soft_wire_qp *q)
{
    struct soft_wire *w = q->w;
    shm_slot_free(w, q->qpn);
    atomic_store(&q->sh->state, IBV_QPS_RESET);
    q->sh->qpn = 0;             /* peers holding a pointer see it gone */
    shm_ctx_release(w, q->sh_off, q->sh_bytes);
    for (struct soft_wire_qp **pp = &w->qps; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    free(q);
}

/* Take the send queue's lock even from a peer that is running it right now
 * (it lets go within one send), bounded. */
static bool sq_lock_wait(struct soft_wire_qp *q)
{
    uint64_t until = now_ns() + 100000000ull;
    while (!shm_sq_lock(q->w, q->sh, true))
        if (now_ns() > until)
            return false;
    return true;
}

/* A sender is writing the result of receive c (a few stores): wait for it,
 * bounded (it may have died in between). */
static bool writing_ends(struct shm_rqe *e, uint64_t c)
{
    uint64_t until = now_ns() + 1000000ull;
    while (atomic_load_explicit(&e->seq, memory_order_acquire) == ((c + 1) | SHM_RQE_WRITING))
        if (now_ns() > until)
            return false;
    return true;
}

void shm_qp_stop(struct soft_wire_qp *q)
{
    if (q->stopped)
        return;
    q->stopped = true;
    atomic_store(&q->sh->state, IBV_QPS_ERR);
    bool locked = sq_lock_wait(q);
    uint64_t h = atomic_load(&q->sh->sq_head);
    /* what ran is reported as it ran; the rest flushes (a head outside
     * what may be is a bad value: flush all the objects have not taken) */
    q->sq_stop = h - q->sq_reaped <= q->sq_tail - q->sq_reaped ? h : q->sq_reaped;
    if (locked)
        shm_sq_unlock(q->sh);
}

void shm_qp_broken(struct soft_wire_qp *q, const char *fmt, ...)
{
    char why[TBRT_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    shm_corrupt(q->w, "QP 0x%x broke: %s", q->qpn, why);
    shm_qp_stop(q);
    q->events |= SHM_EV_BROKEN;
}

/* Nothing outstanding survives RESET, and no results. The indices go on
 * counting (a late peer's write for an old slot cannot match a new one). */
static void qp_reset(struct soft_wire_qp *q)
{
    bool locked = sq_lock_wait(q);
    atomic_store(&q->sh->sq_head, q->sq_tail);
    atomic_store(&q->sh->sq_tail, q->sq_tail);
    if (locked)
        shm_sq_unlock(q->sh);
    q->sq_reaped = q->sq_stop = q->sq_tail;
    for (uint64_t c = q->rq_prod - TBRT_MIN(q->rq_prod, q->rq_cap); c < q->rq_prod; c++)
        writing_ends(&q->sh->rq[c % q->rq_cap], c);
    for (uint32_t i = 0; i < q->rq_cap; i++)
        atomic_store(&q->sh->rq[i].seq, 0);    /* old entries must not look posted */
    atomic_store(&q->sh->rq_cons, q->rq_prod);
    atomic_store(&q->sh->remote_err, 0);
    q->stopped = false;
    q->events = 0;
    q->peer.peer = NULL;
}

static void shm_qp_modify(struct soft_wire_qp *q, const struct soft_wire_qp_attr *a)
{
    struct shm_qp_block *sh = q->sh;
    if (a->dest_qpn != q->a.dest_qpn) {
        q->peer.peer = NULL;    /* look the new one up */
        q->peer_checked_ns = 0;
    }
    q->a = *a;
    /* the copies peers read */
    sh->port = a->port;
    sh->qkey = a->qkey;
    sh->dest_qpn = a->dest_qpn;
    sh->mtu = a->mtu;
    sh->timeout = a->timeout;
    sh->retry_cnt = a->retry_cnt;
    sh->rnr_retry = a->rnr_retry;
    sh->min_rnr_timer = a->min_rnr_timer;
    if (a->state == IBV_QPS_ERR) {
        shm_qp_stop(q);
        return;
    }
    if (a->state == IBV_QPS_RESET)
        qp_reset(q);
    atomic_store(&sh->state, a->state);
}

static void shm_post_recv(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_recv *r)
{
    struct shm_rqe *e = &q->sh->rq[index % q->rq_cap];
    e->num_sge = r->num_sge;
    e->total = r->total;
    memcpy(e->sge, r->sge, (size_t)r->num_sge * sizeof e->sge[0]);
    atomic_store_explicit(&e->seq, index + 1, memory_order_release);
    q->rq_prod = index + 1;
    /* a sender may be waiting for exactly this (pairs with the fence after
     * its help_wanted store in shm_deliver.c) */
    atomic_thread_fence(memory_order_seq_cst);
}

static void shm_post_send(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_send *s)
{
    struct shm_swr *w = &q->self.sq[index % q->sq_cap];
    w->opcode = s->opcode;
    w->send_flags = s->send_flags;
    w->imm_data = s->imm_data;
    w->num_sge = s->num_sge;
    w->total = s->total;
    w->remote_addr = s->remote_addr;
    w->rkey = s->rkey;
    w->flags = s->flags;
    w->rnr_count = 0;
    w->first_try_ns = w->next_try_ns = 0;
    if (s->send_flags & IBV_SEND_INLINE) {
        /* the data goes now: the caller may reuse its buffer on return */
        uint64_t off = 0;
        for (uint32_t i = 0; i < s->num_sge; i++) {
            memcpy(w->inl + off, (void *)(uintptr_t)s->sge[i].addr, s->sge[i].length);
            off += s->sge[i].length;
        }
    } else {
        memcpy(w->sge, s->sge, (size_t)s->num_sge * sizeof w->sge[0]);
    }
    if (q->qp_type == IBV_QPT_UD) {
        w->remote_qpn = s->remote_qpn;
        w->remote_qkey = s->remote_qkey;
        memcpy(w->dgid, s->dgid, 16);
        memcpy(w->sgid, s->sgid, 16);
    }
    q->sq_tail = index + 1;
    atomic_store_explicit(&q->sh->sq_tail, q->sq_tail, memory_order_release);
}

/* ---- results ----------------------------------------------------------------------- */

static void flushed(struct soft_result *r, uint8_t opcode)
{
    *r = (struct soft_result){.stamp = soft_stamp(), .status = IBV_WC_WR_FLUSH_ERR,
                              .opcode = opcode, .vendor_err = SOFT_VERR_FLUSH};
}

/* Senders take receives in order (rq_cons) and only posted ones, so
 * rq_cons can never pass what we posted; a peer that moved it there broke
 * the queue. Looked at now and then, off the fast path (its line is the
 * senders'). */
static bool rq_cons_sane(struct soft_wire_qp *q, uint64_t oldest)
{
    uint64_t cons = atomic_load_explicit(&q->sh->rq_cons, memory_order_relaxed);
    if (cons - oldest <= q->rq_prod - oldest)
        return true;
    shm_corrupt(q->w, "QP 0x%x: rq_cons %llu is outside the %llu..%llu it may be (our shared "
                "block is corrupt)", q->qpn, (unsigned long long)cons,
                (unsigned long long)oldest, (unsigned long long)q->rq_prod);
    return false;
}

/* UD: several senders fill one queue, so a receive taken by a sender that
 * died never finishes and would stop the reaping for good. Once a later
 * receive has finished and this one stayed unfinished for a while, it is
 * taken back and reported lost. */
#define UD_STALL_NS 100000000ull

static bool ud_stalled(struct soft_wire_qp *q, uint64_t c)
{
    if (q->qp_type != IBV_QPT_UD || c + 1 >= q->rq_prod)
        return false;
    struct shm_rqe *next = &q->sh->rq[(c + 1) % q->rq_cap];
    if (atomic_load_explicit(&next->seq, memory_order_relaxed) != ((c + 2) | SHM_RQE_DONE)) {
        q->rq_stall_ns = 0;
        return false;
    }
    uint64_t now = now_ns();
    if (!q->rq_stall_ns)
        q->rq_stall_ns = now;
    if (now - q->rq_stall_ns < UD_STALL_NS)
        return false;
    q->rq_stall_ns = 0;
    /* take it back from the vanished sender (a CAS: a live one may win) */
    uint64_t want = c + 1;
    return atomic_compare_exchange_strong(&q->sh->rq[c % q->rq_cap].seq, &want, 0);
}

static int shm_recv_done(struct soft_wire_qp *q, uint64_t c, struct soft_result *r)
{
    struct shm_rqe *e = &q->sh->rq[c % q->rq_cap];
    uint64_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);
    bool posted = seq == c + 1, writing = seq == ((c + 1) | SHM_RQE_WRITING);
    if (writing && q->stopped && writing_ends(e, c))
        seq = atomic_load_explicit(&e->seq, memory_order_acquire);
    if (seq == ((c + 1) | SHM_RQE_DONE)) {
        struct shm_cqe x;       /* the one copy of what the executor wrote */
        memcpy(&x, &e->res, sizeof x);
        *r = (struct soft_result){.stamp = x.stamp, .byte_len = x.byte_len, .imm = x.imm,
                                  .src_qp = x.src_qp, .status = x.status, .opcode = x.opcode,
                                  .wc_flags = x.wc_flags, .data_len = x.data_len,
                                  .vendor_err = x.status ? x.vendor_err : 0};
        /* a data_len beyond the line is a bad value the objects refuse */
        if (x.data_len)
            memcpy(r->data, x.data, SHM_CQE_DATA);
        return 1;
    }
    if (q->stopped) {
        /* ERR: take it back from the senders; a bad value flushes too */
        uint64_t want = seq;
        atomic_compare_exchange_strong(&e->seq, &want, 0);
        flushed(r, IBV_WC_RECV);
        return 1;
    }
    if (!posted && !writing) {
        shm_corrupt(q->w, "QP 0x%x: receive slot %u (receive %llu): seq 0x%llx is neither "
                    "posted nor done (our shared block is corrupt)", q->qpn,
                    (unsigned)(c % q->rq_cap), (unsigned long long)c, (unsigned long long)seq);
        return -1;
    }
    if ((++q->rq_idle & 255) == 0 && !rq_cons_sane(q, c))
        return -1;
    if (!ud_stalled(q, c))
        return 0;
    *r = (struct soft_result){.stamp = soft_stamp(), .status = IBV_WC_GENERAL_ERR,
                              .opcode = IBV_WC_RECV, .vendor_err = SOFT_VERR_PEER_GONE};
    return 1;
}

static int shm_send_done(struct soft_wire_qp *q, uint64_t h, struct soft_result *r)
{
    if (q->stopped && h >= q->sq_stop) {
        flushed(r, 0);
        q->sq_reaped = h + 1;
        return 1;
    }
    uint64_t head = atomic_load_explicit(&q->sh->sq_head, memory_order_acquire);
    if (head - h > q->sq_tail - h) {
        shm_corrupt(q->w, "QP 0x%x: sq_head %llu is outside the %llu..%llu it may be (our "
                    "shared block is corrupt)", q->qpn, (unsigned long long)head,
                    (unsigned long long)h, (unsigned long long)q->sq_tail);
        return -1;
    }
    if (head == h)
        return 0;
    struct shm_sres x;
    memcpy(&x, &q->self.sq[h % q->sq_cap].res, sizeof x);
    *r = (struct soft_result){.stamp = x.stamp, .status = x.status, .vendor_err = x.vendor_err};
    q->sq_reaped = h + 1;
    return 1;
}

/* ---- where the peer is ------------------------------------------------------------ */

/* Ours goes in our block (a store only when it changed, so a waiting peer
 * reading it keeps its copy of the line); the peer's comes from its block
 * and its receive CQ's doorbell (armed: it sleeps, or is about to). Read
 * through the view checked at lookup; a peer writing nonsense there only
 * makes us spin or yield when we should not. */
static int shm_qp_peer(struct soft_wire_qp *q, int cpu)
{
    int32_t mine = cpu >= 0 ? cpu + 1 : 0;
    if (atomic_load_explicit(&q->sh->owner_cpu, memory_order_relaxed) != mine)
        atomic_store_explicit(&q->sh->owner_cpu, mine, memory_order_relaxed);
    struct shm_view *v = &q->peer;
    if (!v->peer || q->stopped || v->sh->qpn != q->a.dest_qpn)
        return SOFT_PEER_UNKNOWN;
    if (atomic_load_explicit(&v->recv_db->armed, memory_order_relaxed))
        return SOFT_PEER_ASLEEP;
    int32_t theirs = atomic_load_explicit(&v->sh->owner_cpu, memory_order_relaxed);
    return theirs && theirs == mine ? SOFT_PEER_HERE : SOFT_PEER_AWAKE;
}

/* ---- progress ------------------------------------------------------------------------ */

/* QPs that a peer moved to ERR (it bumps our context's attention). */
static void check_attention(struct soft_wire *w)
{
    uint64_t a = atomic_load_explicit(&w->ctx->attention, memory_order_acquire);
    if (TBRT_LIKELY(a == w->attention_seen))
        return;
    w->attention_seen = a;
    for (struct soft_wire_qp *q = w->qps; q; q = q->next)
        if (atomic_load(&q->sh->remote_err) && !q->stopped && q->a.state != IBV_QPS_RESET) {
            shm_qp_stop(q);
            q->events |= SHM_EV_ERR;
        }
}

static int shm_progress(struct soft_wire *w, struct soft_wire_event *ev, int max)
{
    check_attention(w);
    for (struct soft_wire_qp *q = w->qps; q; q = q->next) {
        struct shm_qp_block *s = q->sh;
        if (q->stopped || (q->a.state != IBV_QPS_RTS && q->a.state != IBV_QPS_RTR))
            continue;
        shm_sq_run_own(q);
        /* a connected peer stopped for want of a receive here: run its sends
         * from this side (it asked; we never poll its queue for nothing,
         * which would steal its cache lines while it posts) */
        if (q->qp_type == IBV_QPT_UD || !q->a.dest_qpn ||
            !atomic_load_explicit(&s->help_wanted, memory_order_relaxed) ||
            !atomic_exchange(&s->help_wanted, 0))
            continue;
        if (!q->peer.peer) {
            char why[TBRT_WHY_MAX];
            int rc = shm_view_lookup(w, q->a.dest_qpn, &q->peer, why, sizeof why);
            if (rc) {
                q->peer.peer = NULL;
                if (rc == -EBADMSG)
                    shm_qp_broken(q, "%s", why);
                continue;
            }
        }
        struct shm_qp_block *pqp = q->peer.sh;
        if (pqp->dest_qpn == q->qpn && pqp->qpn == q->a.dest_qpn)
            shm_sq_run_peer(q);
    }
    /* a peer's run of our queue may have failed just now: ERR comes with
     * the result that says so, as on hardware */
    check_attention(w);
    int n = 0;
    for (struct soft_wire_qp *q = w->qps; q && n < max; q = q->next)
        if (q->events) {
            ev[n++] = (struct soft_wire_event){
                .cookie = q->cookie,
                .kind = (q->events & SHM_EV_BROKEN) ? SOFT_WIRE_BROKEN : SOFT_WIRE_ERR};
            q->events = 0;
        }
    return n;
}

const struct soft_wire_ops soft_wire_shm = {
    .name = "shm",
    .open = shm_open,
    .close = shm_close,
    .reaches = shm_reaches,
    .mr_reg = shm_mr_reg,
    .mr_dereg = shm_mr_dereg,
    .mr_local = shm_mr_local,
    .cq_create = shm_cq_create,
    .cq_destroy = shm_cq_destroy,
    .cq_arm = shm_cq_arm,
    .cq_ack = shm_cq_ack,
    .qp_create = shm_qp_create,
    .qp_destroy = shm_qp_destroy,
    .qp_modify = shm_qp_modify,
    .post_recv = shm_post_recv,
    .post_send = shm_post_send,
    .progress = shm_progress,
    .recv_done = shm_recv_done,
    .send_done = shm_send_done,
    .qp_peer = shm_qp_peer,
};
