/* shm_deliver.c - delivering one send over the shared-memory wire: the
 * message semantics of the transport at both ends (wire.h says why they
 * are the wire's).
 *
 * Running a send takes the target's oldest posted receive (CAS on its
 * rq_cons), copies the message straight into the receive's buffers (the one
 * copy of a transfer), then leaves a result in the receive's slot; the
 * send's own result is written by shm_exec.c. A SEND of at most
 * SHM_CQE_DATA bytes goes into the result itself instead (scatter-to-CQE,
 * wire.h): one cache line from sender to receiver, and the receive's
 * buffers, placed by their owner, need no key lookup in a peer's table.
 *
 * When the target cannot take the message, the personality decides:
 *   apple-uc   credit flow control: the send waits for a posted receive.
 *              A peer that vanished is never reported (the frame just goes).
 *   linux-rc   RC: no receive -> RNR NAK, retried after the responder's
 *              min_rnr_timer, rnr_retry times (7 = forever), then
 *              IBV_WC_RNR_RETRY_EXC_ERR. No answer at all (peer gone, not in
 *              RTR/RTS) -> IBV_WC_RETRY_EXC_ERR after timeout x (retry_cnt+1).
 *              UC/UD: dropped when there is nowhere to put it.
 * Only the owner handles what needs the sender's view (UD, a vanished peer,
 * memory the receiver cannot map); the receiver leaves those alone.
 *
 * Faults: a UC or UD message the faults say to drop vanishes here, before
 * it reaches a receive (its send completes as sent). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"
#include "util/copy.h"

/* IB spec table 45: RNR NAK timer field -> microseconds. */
static const uint32_t rnr_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520,
};

/* How often a sender re-checks that its peer's process is alive. */
#define PEER_CHECK_NS 1000000ull
/* How often a send with nobody to take it looks again, asleep (the peer
 * may come up; the ACK timeout may be further away). */
#define NO_PEER_RETRY_NS 10000000ull

/* Who owns the memory a text is about. */
static void owner_text(const struct shm_view *v, char *out, size_t len)
{
    if (shm_peer_is_self(v->peer))
        snprintf(out, len, "QP 0x%x (ours)", v->qpn);
    else
        snprintf(out, len, "peer QP 0x%x (pid %d)", v->qpn, (int)v->pid);
}

/* Pointers to the sender's data, one per SGE (inline data is one piece). */
static int gather(struct shm_exec *e, struct shm_swr *slot, const struct shm_swr *w, void **ptr,
                  uint32_t need)
{
    if (w->send_flags & IBV_SEND_INLINE) {
        ptr[0] = slot->inl;     /* the bytes, not a length: fine to read in place */
        return 0;
    }
    for (uint32_t i = 0; i < w->num_sge; i++) {
        const struct ibv_sge *g = &w->sge[i];
        int rc = shm_peer_mem(e->w, e->sv->peer, g->lkey, g->addr, g->length, need, &ptr[i],
                               e->why, sizeof e->why);
        if (rc)
            return rc;
    }
    return 0;
}

/* Copy the message of w into the receive r (number c) of the target: 0,
 * SHM_COPY_LEFT (a large one the target finishes: shm_copy.c; res is the
 * receive's result then), or -errno with *verr. */
static int scatter(struct shm_exec *e, const struct shm_swr *w, void **src, const struct shm_rqe *r,
                   uint64_t c, const struct soft_result *res, uint64_t skip, uint32_t *verr)
{
    uint32_t si = 0;
    uint64_t soff = 0, left = w->total;
    bool inl = w->send_flags & IBV_SEND_INLINE;
    for (uint32_t k = 0; k < r->num_sge && left; k++) {
        const struct ibv_sge *d = &r->sge[k];
        uint64_t daddr = d->addr, dlen = d->length;
        if (skip >= dlen) {
            skip -= dlen;
            continue;
        }
        daddr += skip;
        dlen -= skip;
        skip = 0;
        uint64_t take = TBRT_MIN(dlen, left);
        void *dst;
        int rc = shm_peer_mem(e->w, e->tv->peer, d->lkey, daddr, take, IBV_ACCESS_LOCAL_WRITE,
                               &dst, e->why, sizeof e->why);
        if (rc) {
            *verr = rc == -EBADMSG ? SOFT_VERR_CORRUPT
                    : rc == -EPERM ? SOFT_VERR_NOT_SHARED
                                   : SOFT_VERR_LKEY;
            return rc;
        }
        if (!inl && w->num_sge == 1 && r->num_sge == 1 && take == w->total && res) {
            /* one piece to one place: the copy a target may share */
            struct shm_copy_span s = {.dst = dst, .src = src[0], .len = take,
                                      .src_addr = w->sge[0].addr, .dst_addr = daddr,
                                      .src_key = w->sge[0].lkey, .dst_key = d->lkey,
                                      .with_imm = res->wc_flags & IBV_WC_WITH_IMM,
                                      .imm = res->imm, .recv_index = c, .res = *res};
            return shm_copy_run(e, &s);
        }
        uint64_t doff = 0;
        while (doff < take) {
            /* sums were checked: si stays inside the gather list */
            uint64_t avail = inl ? w->total - soff : w->sge[si].length - soff;
            uint64_t n = TBRT_MIN(avail, take - doff);
            bulk_copy((char *)dst + doff, (char *)src[inl ? 0 : si] + soff, n);
            doff += n;
            soff += n;
            if (!inl && soff == w->sge[si].length) {
                si++;
                soff = 0;
            }
        }
        left -= take;
    }
    return 0;
}

/* Owner side: the connected peer, if reachable and ready to receive. */
static struct shm_view *connected_peer(struct soft_wire_qp *q, struct shm_exec *e)
{
    if (!q->peer.peer) {
        uint64_t now = shm_exec_now(e);
        if (q->peer_checked_ns && now - q->peer_checked_ns < PEER_CHECK_NS)
            return NULL;        /* looked a moment ago */
        q->peer_checked_ns = now;
        int rc = shm_view_lookup(q->w, q->a.dest_qpn, &q->peer, e->why, sizeof e->why);
        if (rc) {
            q->peer.peer = NULL;
            e->peer_bad = rc == -EBADMSG;
            return NULL;
        }
    }
    struct shm_view *v = &q->peer;
    if (!shm_peer_takes(v, q->a.dest_qpn)) {
        q->peer.peer = NULL;    /* look it up again later */
        return NULL;
    }
    /* is its process still there? a look at the clock every 64 sends, at
     * the process every millisecond */
    if ((++q->alive_tick & 63) == 0 && shm_exec_now(e) - q->peer_checked_ns > PEER_CHECK_NS) {
        q->peer_checked_ns = shm_exec_now(e);
        if (!shm_peer_alive(v->peer)) {
            q->peer.peer = NULL;
            return NULL;
        }
    }
    return v;
}

/* Both ends' ports up? A pulled cable loses frames like a dead peer. */
static bool path_up(struct shm_exec *e)
{
    /* the owner keeps the answer in its QP until a port state is set */
    struct soft_path_memo none = {0}, *m = e->local ? &e->local->path : &none;
    return shm_path_up(e->w, m, e->dev_index, e->port, e->tv);
}

/* Nobody answers. UC drops; RC waits for an ACK until the retry budget is
 * spent (IB spec: local ACK timeout = 4.096 us x 2^timeout per try). Owner
 * only: its own records give timeout and retry_cnt. */
static int no_peer(struct shm_exec *e, struct shm_swr *slot, struct shm_swr *w)
{
    struct soft_wire_qp *q = e->local;
    if (q->qp_type != IBV_QPT_RC)
        return SHM_DONE;
    if (!w->first_try_ns)
        slot->first_try_ns = w->first_try_ns = shm_exec_now(e);
    uint64_t again = shm_exec_now(e) + NO_PEER_RETRY_NS;
    if (q->a.timeout == 0) {
        e->wake_ns = again;
        return SHM_WAIT;            /* timeout 0: wait forever */
    }
    uint64_t limit = 4096ull * (1ull << q->a.timeout) * (q->a.retry_cnt + 1u);
    if (shm_exec_now(e) - w->first_try_ns >= limit)
        return shm_exec_fail(e, IBV_WC_RETRY_EXC_ERR,
                         e->tv && !path_up(e) ? SOFT_VERR_PORT_DOWN : SOFT_VERR_PEER_GONE);
    e->wake_ns = TBRT_MIN(w->first_try_ns + limit, again);
    return SHM_WAIT;
}

/* The target has no receive posted. */
static int no_receive(struct shm_exec *e, struct shm_swr *slot, struct shm_swr *w)
{
    if (e->w->cfg.credit_flow)
        return SHM_WAIT;            /* the target's next post_recv runs it */
    if (e->sv->qp_type != IBV_QPT_RC)
        return SHM_DONE;            /* UC without a receive: the message is dropped */
    if (w->next_try_ns) {
        slot->rnr_count = ++w->rnr_count;
        if (e->rnr_retry != 7 && w->rnr_count > e->rnr_retry)
            return shm_exec_fail(e, IBV_WC_RNR_RETRY_EXC_ERR, SOFT_VERR_RNR);
    }
    uint8_t timer = e->tv->sh->min_rnr_timer;
    slot->next_try_ns = w->next_try_ns = shm_exec_now(e) + rnr_us[timer & 31] * 1000ull;
    e->wake_ns = w->next_try_ns;
    return SHM_WAIT;
}

/* Leave a result in receive c of the target (if the target did not take
 * it back meanwhile), with the message itself when data_len > 0, and wake
 * the target's CQ if it waits. The claim is on the posted receive's line,
 * which this sender holds already (it fetched it ahead); the result goes in
 * the line the target polls. */
static void recv_done(struct shm_exec *e, uint64_t c, const struct soft_result *r,
                      const uint8_t *data, uint32_t data_len)
{
    struct shm_view *t = e->tv;
    if (shm_rq_result_put(t->rq, t->rres, t->rq_cap, c, r, data, data_len, t->srq != NULL,
                          t->qpn))
        shm_ring(e->w, t->peer, t->recv_db, t->recv_dbi);
}

static void recv_err(struct shm_exec *e, uint64_t c, enum ibv_wc_status st, uint32_t verr)
{
    struct soft_result r = {.status = (uint8_t)st, .opcode = IBV_WC_RECV, .vendor_err = verr,
                            .src_qp = e->sv->qpn};
    recv_done(e, c, &r, NULL, 0);
}

/* The bytes of a small message, from its gather list (or inline data), in
 * one piece of SHM_CQE_DATA bytes (what follows the message is left as
 * it was: data_len says how much counts). */
static void gather_bytes(const struct shm_swr *w, void *const *src, uint8_t *out)
{
    if (w->send_flags & IBV_SEND_INLINE) {
        /* within the slot's inline area whatever the total */
        memcpy(out, src[0], SHM_CQE_DATA);
        return;
    }
    uint64_t off = 0;
    for (uint32_t i = 0; i < w->num_sge; i++) {
        bulk_copy(out + off, src[i], w->sge[i].length);
        off += w->sge[i].length;
    }
}

/* Is a receive posted at the target? If not, ask the target to run us
 * when it posts one (then look once more: its post may have come just
 * before it could see the ask; pairs with the fence in post_recv). */
static bool receive_waiting(struct shm_exec *e)
{
    struct shm_view *t = e->tv;
    for (int asked = 0; asked < 2; asked++) {
        uint64_t k = atomic_load_explicit(t->rq_cons, memory_order_acquire);
        if (shm_rq_posted(t->rq, t->rq_cap, k))
            return true;
        atomic_store(&t->sh->help_wanted, 1);
        atomic_thread_fence(memory_order_seq_cst);
    }
    return false;
}

/* Take the target's oldest posted receive: its index in *c, its copy in
 * *r. Returns SHM_DONE, SHM_WAIT/SHM_DONE (none: the caller's policy) via *none, or a
 * bad value. */
static int take_receive(struct shm_exec *e, struct shm_rqe *r, uint64_t *c, bool ask, bool *none)
{
    struct shm_view *t = e->tv;
    bool asked = false;
    *none = false;
    for (;;) {
        uint64_t k = atomic_load_explicit(t->rq_cons, memory_order_acquire);
        if (!shm_rq_posted(t->rq, t->rq_cap, k)) {
            if (asked || !ask) {
                *none = true;
                return SHM_DONE;
            }
            /* ask the target to run us when it posts (also when the target
             * itself is running us: its next post must try again); then
             * look once more, as its post may have come just before it
             * could see the ask (pairs with the fence in shm_wire.c's post_recv) */
            atomic_store(&t->sh->help_wanted, 1);
            atomic_thread_fence(memory_order_seq_cst);
            asked = true;
            continue;
        }
        bool sane = shm_rqe_copy(r, &t->rq[k & (t->rq_cap - 1)]);
        if (!atomic_compare_exchange_weak_explicit(t->rq_cons, &k, k + 1,
                                                   memory_order_acq_rel, memory_order_relaxed))
            continue;
        *c = k;
        if (t->srq)
            shm_srq_taken(e->w, t, k);
        /* the next message will want the next receive: start fetching its
         * line (the owner wrote it) now, off the next message's path, for
         * writing (its claim is a CAS there: fetched for reading, the line
         * stays shared with the owner and the claim waits for the owner's
         * copy to go, 180 ns on ib_send_lat's path) */
        shm_prefetch_write(&t->rq[(k + 1) & (t->rq_cap - 1)]);
        uint64_t sum = 0;
        for (uint32_t i = 0; sane && i < r->num_sge; i++)
            sum += r->sge[i].length;
        if (TBRT_UNLIKELY(!sane || sum != r->total)) {
            char who[64], what[96];
            owner_text(t, who, sizeof who);
            if (!sane)
                snprintf(what, sizeof what, "num_sge %u > %d", r->num_sge, SOFT_MAX_SGE);
            else
                snprintf(what, sizeof what, "total %llu != the %llu bytes of its scatter list",
                         (unsigned long long)r->total, (unsigned long long)sum);
            recv_err(e, k, IBV_WC_LOC_QP_OP_ERR, SOFT_VERR_CORRUPT);
            return shm_exec_broken(e, true, "%s: receive slot %u: %s (its shared memory is "
                                   "corrupt)", who, (unsigned)(k & (t->rq_cap - 1)), what);
        }
        return SHM_DONE;
    }
}

/* An atomic at the responder (IB spec 9.4.5): 8 aligned bytes of an MR
 * with REMOTE_ATOMIC, changed with a CPU atomic on the shared mapping, so
 * it is atomic against every other executor of any process (and the
 * CPU's own); the original value goes into the requester's SGE (orig). */
static int atomic_op(struct shm_exec *e, const struct shm_swr *w, void *orig)
{
    if (w->remote_addr % SOFT_ATOMIC_SIZE) {
        shm_mark_err(e->w, e->tv, SOFT_WIRE_CAUSE_REQ);
        return shm_exec_fail(e, IBV_WC_REM_INV_REQ_ERR, SOFT_VERR_ALIGN);
    }
    void *remote = NULL;
    int mrc = shm_peer_mem(e->w, e->tv->peer, w->rkey, w->remote_addr, SOFT_ATOMIC_SIZE,
                           IBV_ACCESS_REMOTE_ATOMIC, &remote, e->why, sizeof e->why);
    if (mrc == -EBADMSG)
        return shm_exec_broken(e, true, "%s", e->why);
    if (mrc) {
        shm_mark_err(e->w, e->tv, SOFT_WIRE_CAUSE_ACCESS);
        return shm_exec_fail(e, IBV_WC_REM_ACCESS_ERR, SOFT_VERR_ATOMIC_ACCESS);
    }
    if ((uintptr_t)remote % SOFT_ATOMIC_SIZE) {
        /* an iova aligned where the memory is not: no atomic can act there */
        shm_mark_err(e->w, e->tv, SOFT_WIRE_CAUSE_REQ);
        return shm_exec_fail(e, IBV_WC_REM_INV_REQ_ERR, SOFT_VERR_ALIGN);
    }
    uint64_t *p = remote, old;
    if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
        old = w->compare_add;
        __atomic_compare_exchange_n(p, &old, w->swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    } else {
        old = __atomic_fetch_add(p, w->compare_add, __ATOMIC_SEQ_CST);
    }
    memcpy(orig, &old, sizeof old);
    return SHM_DONE;
}

int shm_deliver_connected(struct shm_exec *e, struct shm_swr *slot, struct shm_swr *w)
{
    uint32_t op = w->opcode;
    void *src[SOFT_MAX_SGE];
    bool into_local = op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP ||
                      op == IBV_WR_ATOMIC_FETCH_AND_ADD;
    uint32_t need = into_local ? IBV_ACCESS_LOCAL_WRITE : 0;
    int grc = gather(e, slot, w, src, need);
    if (grc == -EBADMSG)
        return shm_exec_broken(e, false, "%s", e->why);
    if (grc) {
        if (!e->local)
            return SHM_SKIP;        /* the owner reports it */
        return shm_exec_fail(e, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
    }
    if (e->local) {
        e->tv = connected_peer(e->local, e);
        if (!e->tv) {
            if (e->peer_bad)
                return shm_exec_broken(e, true, "%s", e->why);
            return no_peer(e, slot, w);
        }
    }
    if (TBRT_UNLIKELY(w->copy_gen))
        return shm_copy_pending(e, w->copy_gen);    /* delivered: its copy's job */
    if (!path_up(e))
        return e->local ? no_peer(e, slot, w) : SHM_SKIP;
    if (w->next_try_ns && shm_exec_now(e) < w->next_try_ns) {
        /* an RNR NAK's timer is running: the target's next turn may retry */
        atomic_store(&e->tv->sh->help_wanted, 1);
        /* the owner armed its alarm when the timer started (a peer that
         * started it rang the owner then): no second ring per try */
        if (e->local)
            e->wake_ns = w->next_try_ns;
        return SHM_WAIT;
    }
    bool rc = e->sv->qp_type == IBV_QPT_RC;
    struct soft_fault_unit unit = {.qp_type = e->sv->qp_type, .qpn = e->sv->qpn,
                                   .index = e->index};
    if (soft_faults_drop(e->w->cfg.faults, &unit)) {
        /* lost on the way; with credit flow only once a receive waits for
         * it (the frame used a credit) */
        if (e->w->cfg.credit_flow && !receive_waiting(e))
            return SHM_WAIT;
        return SHM_DONE;
    }

    if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD)
        return atomic_op(e, w, src[0]);

    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ) {
        uint32_t acc = op == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        void *remote = NULL;
        int mrc = w->total ? shm_peer_mem(e->w, e->tv->peer, w->rkey, w->remote_addr, w->total,
                                           acc, &remote, e->why, sizeof e->why)
                           : 0;
        if (mrc == -EBADMSG)
            return shm_exec_broken(e, true, "%s", e->why);
        if (mrc) {
            if (!rc)
                return SHM_DONE;    /* UC: a bad rkey drops the message */
            shm_mark_err(e->w, e->tv, SOFT_WIRE_CAUSE_ACCESS);
            return shm_exec_fail(e, IBV_WC_REM_ACCESS_ERR, SOFT_VERR_RKEY);
        }
        uint64_t off = 0;
        bool inl = w->send_flags & IBV_SEND_INLINE;
        if (op == IBV_WR_RDMA_READ && w->num_sge == 1) {
            /* one piece from one place: the copy the target may share */
            struct shm_copy_span c = {.dst = src[0], .src = remote, .len = w->total,
                                      .src_addr = w->remote_addr, .dst_addr = w->sge[0].addr,
                                      .src_key = w->rkey, .dst_key = w->sge[0].lkey,
                                      .read = true};
            if (shm_copy_run(e, &c) != SHM_COPY_LEFT)
                return SHM_DONE;
            slot->copy_gen = e->local->pend.gen;   /* complete once the job is whole */
            return SHM_PENDING;
        }
        /* (a 0-byte WRITE or READ moves nothing and names no memory) */
        for (uint32_t i = 0; w->total && i < (inl ? 1 : w->num_sge); i++) {
            uint64_t n = inl ? w->total : w->sge[i].length;
            if (n == 0)
                continue;
            if (op == IBV_WR_RDMA_READ)
                bulk_copy(src[i], (char *)remote + off, n);
            else        /* its last word last, as a NIC's DMA (tbrt_dev.ordered_writes) */
                placed_copy((char *)remote + off, src[i], n);
            off += n;
        }
        if (op != IBV_WR_RDMA_WRITE_WITH_IMM)
            return SHM_DONE;
    }

    /* SEND, SEND_WITH_IMM, WRITE_WITH_IMM: consume the target's oldest receive */
    struct shm_rqe r;
    uint64_t c;
    bool none;
    int trc = take_receive(e, &r, &c, true, &none);
    if (trc != SHM_DONE)
        return trc;
    if (none)
        return no_receive(e, slot, w);
    if (op != IBV_WR_RDMA_WRITE_WITH_IMM) {
        if (e->w->cfg.frames_must_match && soft_frames(r.total) != soft_frames(w->total)) {
            /* TN3205: a SEND and its RECV must cover the same frames; the
             * receive fails, the sender (UC) never knows */
            recv_err(e, c, IBV_WC_LOC_LEN_ERR, SOFT_VERR_FRAMES);
            return SHM_DONE;
        }
        if (r.total < w->total) {
            recv_err(e, c, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT);
            if (!rc)
                return SHM_DONE;
            shm_mark_err(e->w, e->tv, SOFT_WIRE_CAUSE_NONE);  /* its completion says so */
            return shm_exec_fail(e, IBV_WC_REM_INV_REQ_ERR, SOFT_VERR_REMOTE);
        }
        bool imm = op == IBV_WR_SEND_WITH_IMM;
        if (w->total <= SHM_CQE_DATA) {
            /* scatter-to-CQE: the message goes in the result's line; the
             * owner places it (and checks its own keys then, as mlx5's
             * provider copies a CQE's data into the receive's buffers) */
            uint8_t data[SHM_CQE_DATA] = {0};
            gather_bytes(w, src, data);
            struct soft_result res = {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
                                      .byte_len = (uint32_t)w->total, .src_qp = e->sv->qpn,
                                      .wc_flags = imm ? IBV_WC_WITH_IMM : 0,
                                      .imm = imm ? w->imm_data : 0};
            recv_done(e, c, &res, data, (uint32_t)w->total);
            return SHM_DONE;
        }
        struct soft_result sres = {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
                                   .byte_len = (uint32_t)w->total, .src_qp = e->sv->qpn,
                                   .wc_flags = imm ? IBV_WC_WITH_IMM : 0,
                                   .imm = imm ? w->imm_data : 0};
        uint32_t verr = 0;
        int src_rc = scatter(e, w, src, &r, c, &sres, 0, &verr);
        if (src_rc == SHM_COPY_LEFT) {
            /* the target finishes its receive; the send, once the job is whole */
            slot->copy_gen = e->local->pend.gen;
            return SHM_PENDING;
        }
        if (src_rc == -EBADMSG) {
            recv_err(e, c, IBV_WC_LOC_QP_OP_ERR, SOFT_VERR_CORRUPT);
            return shm_exec_broken(e, true, "%s", e->why);
        }
        if (src_rc) {
            recv_err(e, c, IBV_WC_LOC_PROT_ERR, verr);
            if (!rc)
                return SHM_DONE;
            shm_mark_err(e->w, e->tv, SOFT_WIRE_CAUSE_NONE);  /* its completion says so */
            return shm_exec_fail(e, IBV_WC_REM_OP_ERR, SOFT_VERR_REMOTE);
        }
    }
    bool imm = op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
    struct soft_result res = {
        .status = IBV_WC_SUCCESS,
        .opcode = op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
        .byte_len = (uint32_t)w->total, .src_qp = e->sv->qpn,
        .wc_flags = imm ? IBV_WC_WITH_IMM : 0, .imm = imm ? w->imm_data : 0,
    };
    recv_done(e, c, &res, NULL, 0);
    return SHM_DONE;
}

/* UD: the view of the target `qpn`: the last send's while its block still
 * names it and (looked at every 64th send, once a ms at most) its process
 * lives, else a fresh lookup. 0, or the lookup's error. */
static int ud_target(struct shm_exec *e, struct soft_wire_qp *q, uint32_t qpn)
{
    struct shm_view *v = &q->ud_dest;
    if (v->peer && v->qpn == qpn && v->sh->qpn == qpn) {
        if ((++q->ud_tick & 63) != 0 || shm_exec_now(e) - q->ud_checked_ns < PEER_CHECK_NS)
            return 0;
        q->ud_checked_ns = shm_exec_now(e);
        if (shm_peer_alive(v->peer))
            return 0;
    }
    v->peer = NULL;
    int rc = shm_view_lookup(e->w, qpn, v, e->why, sizeof e->why);
    if (rc)
        v->peer = NULL;
    else
        q->ud_checked_ns = shm_exec_now(e);
    return rc;
}

/* UD: unreliable datagrams, one MTU at most, a 40-byte GRH in front. Run by
 * the owner only (the target is a different QP per send). */
int shm_deliver_ud(struct shm_exec *e, struct shm_swr *slot, struct shm_swr *w)
{
    struct soft_wire *sw = e->w;
    struct soft_wire_qp *q = e->local;
    if (!q)
        return SHM_SKIP;
    void *src[SOFT_MAX_SGE];
    if (gather(e, slot, w, src, 0))
        return shm_exec_fail(e, IBV_WC_LOC_PROT_ERR, SOFT_VERR_LKEY);
    if (w->total > (128u << q->a.mtu))
        return shm_exec_fail(e, IBV_WC_LOC_LEN_ERR, SOFT_VERR_MSG_SIZE);
    struct soft_fault_unit unit = {.qp_type = IBV_QPT_UD, .qpn = q->qpn, .index = e->index};
    if (soft_faults_drop(sw->cfg.faults, &unit))
        return SHM_DONE;        /* lost on the way */
    if (!(w->flags & SOFT_SEND_DGID_LOCAL))
        return SHM_DONE;            /* not reachable over this wire: lost */
    int lrc = ud_target(e, q, w->remote_qpn);
    if (lrc == -EBADMSG) {
        /* one bad target does not break a datagram QP: this send fails */
        shm_corrupt(sw, "QP 0x%x: %s", q->qpn, e->why);
        e->res.status = IBV_WC_REM_OP_ERR;
        e->res.vendor_err = SOFT_VERR_CORRUPT;
        return SHM_DONE;
    }
    if (lrc)
        return SHM_DONE;
    struct shm_view *v = &q->ud_dest;
    uint32_t st = atomic_load(&v->sh->state);
    if (v->qp_type != IBV_QPT_UD || (st != IBV_QPS_RTR && st != IBV_QPS_RTS))
        return SHM_DONE;
    uint32_t qkey = (w->remote_qkey & 0x80000000u) ? q->a.qkey : w->remote_qkey;
    if (qkey != v->sh->qkey)
        return SHM_DONE;            /* qkey violation: dropped, as on the wire */
    e->tv = v;
    struct shm_rqe r;
    uint64_t c;
    bool none;
    int trc = take_receive(e, &r, &c, false, &none);
    if (trc == SHM_FAILED) {        /* its receive was bad: this send fails, the QP lives */
        e->tv = NULL;
        return SHM_DONE;
    }
    if (none) {
        e->tv = NULL;
        return SHM_DONE;            /* no receive: dropped */
    }
    enum { GRH = SOFT_GRH_BYTES };
    if (r.total < GRH + w->total) {
        recv_err(e, c, IBV_WC_LOC_LEN_ERR, SOFT_VERR_RECV_SHORT);
        e->tv = NULL;
        return SHM_DONE;
    }
    /* the GRH as every wire writes it (IPv6, or IPv4 between IPv4 GIDs) */
    struct shm_swr hdr = {.total = GRH, .send_flags = IBV_SEND_INLINE, .num_sge = 1};
    uint8_t grh[GRH];
    soft_grh_build(grh, w->sgid, w->dgid, (uint32_t)w->total);
    void *hp[1] = {grh};
    uint32_t verr = 0;
    int src_rc = scatter(e, &hdr, hp, &r, c, NULL, 0, &verr);
    if (src_rc == 0 && w->total)
        src_rc = scatter(e, w, src, &r, c, NULL, GRH, &verr);
    if (src_rc == 0) {
        bool imm = w->opcode == IBV_WR_SEND_WITH_IMM;
        bool v4 = soft_gid_ipv4(w->sgid) && soft_gid_ipv4(w->dgid);
        struct soft_result res = {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
                                  .byte_len = (uint32_t)(GRH + w->total), .src_qp = q->qpn,
                                  .wc_flags = IBV_WC_GRH | (imm ? IBV_WC_WITH_IMM : 0) |
                                              (v4 ? SOFT_WC_GRH_IPV4 : 0),
                                  .imm = imm ? w->imm_data : 0};
        recv_done(e, c, &res, NULL, 0);
    } else {
        recv_err(e, c, src_rc == -EBADMSG ? IBV_WC_LOC_QP_OP_ERR : IBV_WC_LOC_PROT_ERR, verr);
        if (src_rc == -EBADMSG) {
            shm_corrupt(sw, "QP 0x%x: %s", q->qpn, e->why);
            e->res.status = IBV_WC_REM_OP_ERR;
            e->res.vendor_err = SOFT_VERR_CORRUPT;
        }
    }
    e->tv = NULL;
    return SHM_DONE;
}

