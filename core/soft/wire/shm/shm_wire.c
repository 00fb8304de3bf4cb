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
#include <time.h>
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
    shm_event_close(w);
    shm_fabric_close(w);
    if (w->alarm_user)
        soft_alarm_unuse();
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
    w->event_fd = -1;
    int rc = shm_fabric_open(w, why, len);
    if (rc == 0)
        rc = shm_event_open(w, why, len);
    if (rc) {
        shm_close(w);
        return rc;
    }
    shm_mem_attach(w);
    soft_alarm_use();
    w->alarm_user = true;
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
    int s = shm_wake_bind(w, db);
    if (s < 0) {
        free(c);
        return err_set(why, len, -s, "completion socket in %s: %s", w->shm_dir,
                       s == -ENAMETOOLONG ? "the directory's path is too long for a socket (a "
                                            "shorter TBRT_SHM_DIR)" : strerror(-s));
    }
    w->db_used[db] = 1;
    *c = (struct soft_wire_cq){.w = w, .db = db, .fd = s,
                               .dbp = (struct shm_doorbell *)((char *)w->ctx + SHM_CTX_DB_OFF) + db};
    shm_cq_alarm_init(c);
    atomic_store(&c->dbp->armed, 0);
    *fd = s;
    *out = c;
    return 0;
}

static void shm_cq_destroy(struct soft_wire_cq *c)
{
    soft_alarm_cancel(&c->alarm);   /* the alarm thread rings it no more */
    shm_wake_unbind(c->w, c->fd, c->db);
    c->w->db_used[c->db] = 0;
    free(c);
}

static void shm_cq_arm(struct soft_wire_cq *c)
{
    atomic_store(&c->dbp->armed, 1);
    /* pairs with the fence in shm_ring */
    atomic_thread_fence(memory_order_seq_cst);
    shm_cq_alarm_armed(c);
}

/* Completions we made ourselves ring our own doorbell, as a peer's result
 * does: the same disarm and the same datagram. */
static void shm_cq_wake(struct soft_wire_cq *c)
{
    shm_ring(c->w, c->w->self, c->dbp, c->db);
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
    /* the rings, as peers find them in the block: powers of two (the
     * objects keep to the queue's own limit) */
    uint32_t rq_cap = soft_ring_size(init->rq_cap), sq_cap = soft_ring_size(init->sq_cap);
    struct soft_wire_qp *q = calloc(1, sizeof *q);
    if (!q)
        return err_set(why, len, ENOMEM, "out of memory");
    q->sh_bytes = shm_qp_bytes(rq_cap, sq_cap);
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
    q->rq_cap = rq_cap;
    q->sq_cap = sq_cap;
    q->recv_cq = init->recv_cq;
    q->send_cq = init->send_cq;
    q->srq = init->srq;
    q->a.state = IBV_QPS_RESET;
    struct shm_qp_block *sh = q->sh;
    sh->qp_type = init->qp_type;
    sh->rq_cap = rq_cap;
    sh->sq_cap = sq_cap;
    sh->recv_db = init->recv_cq->db;
    sh->send_db = init->send_cq->db;
    sh->dev_index = (uint8_t)w->cfg.dev_index;
    sh->srq_off = init->srq ? init->srq->sh_off : 0;
    atomic_store(&sh->state, IBV_QPS_RESET);
    sh->qpn = q->qpn;
    q->self = (struct shm_view){
        .peer = w->self, .sh = sh, .rq = sh->rq, .rres = shm_rres_of(sh->rq, rq_cap),
        .rq_cons = &sh->rq_cons,
        .sq = (struct shm_swr *)((char *)sh + shm_sq_offset(rq_cap)),
        .copy = (struct shm_copy_job *)((char *)sh + shm_copy_offset(rq_cap, sq_cap)),
        .recv_db = init->recv_cq->dbp, .send_db = init->send_cq->dbp, .event_db = w->event_db,
        .qpn = q->qpn, .qp_type = init->qp_type, .rq_cap = rq_cap,
        .sq_cap = sq_cap, .recv_dbi = init->recv_cq->db, .send_dbi = init->send_cq->db,
        .pid = w->pid,
    };
    if (init->srq) {
        q->self.srq = init->srq->sh;
        q->self.rq = init->srq->sh->rq;
        q->self.rres = init->srq->own.rres;
        q->self.rq_cons = &init->srq->sh->rq_cons;
        q->self.rq_cap = init->srq->cap;
    }
    q->rq_own = (struct shm_rq_own){.rq = sh->rq, .rres = q->self.rres, .cons = &sh->rq_cons,
                                    .cap = rq_cap,
                                    .many_senders = init->qp_type == IBV_QPT_UD};
    q->next = w->qps;
    w->qps = q;
    *qpn = q->qpn;
    *out = q;
    return 0;
}

static void shm_qp_destroy(struct soft_wire_qp *q)
{
    struct soft_wire *w = q->w;
    shm_copy_abandon(q);
    shm_counts_add(&w->counts_retired, &q->counts);
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
 * (it lets go within one send), bounded. A copy of ours its helper was to
 * finish is over: no piece of it is taken any more. */
static bool sq_lock_wait(struct soft_wire_qp *q)
{
    shm_copy_abandon(q);
    uint64_t until = now_ns() + 100000000ull;
    while (!shm_sq_lock(q->w, q->sh, true))
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
    shm_rq_reset(&q->rq_own);   /* an SRQ's receives are not the QP's to forget */
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
    shm_rq_post(&q->rq_own, index, r);
}

static void shm_post_send(struct soft_wire_qp *q, uint64_t index, const struct soft_wire_send *s)
{
    /* (the objects' own write_inline comes first; a list of work requests,
     * say, brings one here) */
    if (s->opcode == IBV_WR_RDMA_WRITE && (s->send_flags & IBV_SEND_INLINE) && s->num_sge == 1 &&
        shm_direct_write(q, index, (const void *)(uintptr_t)s->sge[0].addr,
                         s->sge[0].length, s->remote_addr, s->rkey))
        return;
    struct shm_swr *w = &q->self.sq[index & (q->sq_cap - 1)];
    w->opcode = s->opcode;
    w->send_flags = s->send_flags;
    w->imm_data = s->imm_data;
    w->num_sge = s->num_sge;
    w->total = s->total;
    w->remote_addr = s->remote_addr;
    w->rkey = s->rkey;
    if (TBRT_UNLIKELY(s->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                      s->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)) {
        w->compare_add = s->compare_add;
        w->swap = s->swap;
    }
    w->flags = s->flags;
    w->rnr_count = 0;
    w->copy_gen = 0;
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

static void flushed(struct soft_result *r)
{
    *r = (struct soft_result){.stamp = soft_stamp(), .status = IBV_WC_WR_FLUSH_ERR,
                              .vendor_err = SOFT_VERR_FLUSH};
}

static int shm_recv_done(struct soft_wire_qp *q, uint64_t c, struct soft_result *r)
{
    return shm_rq_done(q->w, &q->rq_own, "QP", q->qpn, q->stopped, c, r);
}

static int shm_send_done(struct soft_wire_qp *q, uint64_t h, struct soft_result *r)
{
    if (q->stopped && h >= q->sq_stop) {
        flushed(r);
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
    memcpy(&x, &q->self.sq[h & (q->sq_cap - 1)].res, sizeof x);
    *r = (struct soft_result){.stamp = x.stamp, .status = x.status, .vendor_err = x.vendor_err};
    q->sq_reaped = h + 1;
    return 1;
}

/* ---- where the peer is ------------------------------------------------------------ */

static uint32_t coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

/* Ours goes in our block: the CPU we wait on and when we said so, said
 * again when the CPU changes and every SHM_WAIT_EVERY looks (a store only
 * when it changed, so a waiting peer reading it keeps its copy of the
 * line). The peer's comes from its block and its receive CQ's doorbell
 * (armed: it sleeps, or is about to). A process waits on one link at a
 * time: the mark of a link it stopped waiting on (it waits on another one
 * now, as a ring's member waits on its incoming link after it waited for
 * room on its outgoing one) is stale, and taken for here it made its peer
 * spin on a CPU it shared with other waiters instead of yielding it
 * (measured: a ring of 4 processes on 2 CPUs, 0.8 ms a hop against 8-10
 * us): only a fresh mark says here (a reader looks at the clock only for a
 * mark of its own CPU). Read through the view checked at lookup; a peer
 * writing nonsense there only makes us spin or yield when we should not. */
static int shm_qp_peer(struct soft_wire_qp *q, int cpu)
{
    int32_t mine = cpu >= 0 ? cpu + 1 : 0;
    uint64_t said = atomic_load_explicit(&q->sh->owner_wait, memory_order_relaxed);
    if ((int32_t)(uint32_t)said != mine || q->wait_looks++ % SHM_WAIT_EVERY == 0) {
        uint64_t mark = mine ? (uint64_t)coarse_ms() << 32 | (uint32_t)mine : 0;
        if (said != mark)
            atomic_store_explicit(&q->sh->owner_wait, mark, memory_order_relaxed);
    }
    struct shm_view *v = &q->peer;
    if (!v->peer || q->stopped || v->sh->qpn != q->a.dest_qpn)
        return SOFT_PEER_UNKNOWN;
    if (atomic_load_explicit(&v->recv_db->armed, memory_order_relaxed))
        return SOFT_PEER_ASLEEP;
    uint64_t theirs = atomic_load_explicit(&v->sh->owner_wait, memory_order_relaxed);
    if (!mine || (int32_t)(uint32_t)theirs != mine)
        return SOFT_PEER_AWAKE;
    return coarse_ms() - (uint32_t)(theirs >> 32) < SHM_WAIT_FRESH_MS ? SOFT_PEER_HERE
                                                                       : SOFT_PEER_AWAKE;
}

/* ---- progress ------------------------------------------------------------------------ */

/* QPs that a peer moved to ERR (it bumps our context's attention). */
static void check_attention(struct soft_wire *w)
{
    uint64_t a = atomic_load_explicit(&w->ctx->attention, memory_order_acquire);
    if (TBRT_LIKELY(a == w->attention_seen))
        return;
    w->attention_seen = a;
    for (struct soft_wire_qp *q = w->qps; q; q = q->next) {
        uint32_t mark = atomic_load(&q->sh->remote_err);
        if (mark && !q->stopped && q->a.state != IBV_QPS_RESET) {
            shm_qp_stop(q);
            q->events |= SHM_EV_ERR;
            /* the cause a peer gave (+1); one it could not give is FATAL */
            q->err_cause = mark - 1 <= SOFT_WIRE_CAUSE_ACCESS ? (uint8_t)(mark - 1)
                                                               : SOFT_WIRE_CAUSE_FATAL;
        }
    }
}

/* Our own sends just posted: run them (shm_progress runs every queue's,
 * and a peer's that asked, then collects the events). */
static bool shm_doorbell(struct soft_wire_qp *q)
{
    if (q->a.state == IBV_QPS_RTS || q->a.state == IBV_QPS_RTR)
        shm_sq_run_own(q);
    return true;
}

/* Nothing for shm_progress to do: the words it would act on, looked at
 * (our context's attention; per QP its events, its own sends waiting, a
 * peer's ask for help; SRQs always take the turn). */
static bool shm_quiet(struct soft_wire *w)
{
    if (atomic_load_explicit(&w->ctx->attention, memory_order_relaxed) != w->attention_seen ||
        w->srqs)
        return false;
    for (struct soft_wire_qp *q = w->qps; q; q = q->next) {
        if (q->events)
            return false;
        if (q->stopped || (q->a.state != IBV_QPS_RTS && q->a.state != IBV_QPS_RTR))
            continue;
        if (atomic_load_explicit(&q->sh->sq_head, memory_order_relaxed) != q->sq_tail ||
            atomic_load_explicit(&q->sh->help_wanted, memory_order_relaxed))
            return false;
    }
    return true;
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
        if (pqp->dest_qpn != q->qpn || pqp->qpn != q->a.dest_qpn)
            continue;
        /* a copy into our receive it shares first: it holds its queue's
         * lock meanwhile, so running its queue must wait anyway */
        shm_copy_help(q);
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
                .kind = (q->events & SHM_EV_BROKEN) ? SOFT_WIRE_BROKEN : SOFT_WIRE_ERR,
                .cause = q->err_cause};
            q->events = 0;
            q->err_cause = 0;
        }
    if (TBRT_UNLIKELY(w->srqs != NULL) && n < max)
        n += shm_srq_events(w, ev + n, max - n);
    return n;
}

/* The wire's counters (shm_counts): one QP's, or the device's (QPN 0:
 * those of destroyed QPs too). */
static void shm_stats(struct soft_wire *w, uint32_t qpn, struct soft_wire_stats *s)
{
    struct shm_counts c = qpn ? (struct shm_counts){0} : w->counts_retired;
    for (struct soft_wire_qp *q = w->qps; q; q = q->next)
        if (!qpn || q->qpn == qpn)
            shm_counts_add(&c, &q->counts);
    s->copies_shared += c.copies_shared;
    s->pieces_helped += c.pieces_helped;
    s->bytes_helped += c.bytes_helped;
    s->direct_writes += c.direct_writes;
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
    .cq_wake = shm_cq_wake,
    .srq_create = shm_srq_create,
    .srq_destroy = shm_srq_destroy,
    .srq_post = shm_srq_post,
    .srq_arm = shm_srq_arm,
    .srq_done = shm_srq_done,
    .qp_create = shm_qp_create,
    .qp_destroy = shm_qp_destroy,
    .qp_modify = shm_qp_modify,
    .post_recv = shm_post_recv,
    .post_send = shm_post_send,
    .write_inline = shm_direct_write,
    .doorbell = shm_doorbell,
    .progress = shm_progress,
    .quiet = shm_quiet,
    .event_fd = shm_event_fd,
    .event_arm = shm_event_arm,
    .event_ack = shm_event_ack,
    .ports_changed = shm_ports_changed,
    .recv_done = shm_recv_done,
    .send_done = shm_send_done,
    .qp_peer = shm_qp_peer,
    .stats = shm_stats,
};
