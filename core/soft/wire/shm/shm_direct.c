/* shm_direct.c - a small inline RDMA WRITE posted to an empty send queue,
 * executed by its poster at once: the shared-memory wire's BlueFlame.
 *
 * A send posted the ordinary way is written into its slot in shared memory,
 * then the queue is run: the slot copied back out and checked (a peer may
 * have written it), the delivery's general path, the run loop. For the
 * small inline WRITE that a latency-bound sender posts (the engine's eager
 * frames) that is about 300 instructions before the first byte lands, all
 * on the message's path. mlx5's BlueFlame exists for the same reason: a
 * small WQE that would be the only one in its queue is written straight
 * into the NIC with the doorbell, and the NIC skips fetching it.
 *
 * Here such a send runs from the poster's own words (the objects' fast
 * path, wire.h: write_inline, or the ordinary post's copy of the work
 * request), which no peer can touch, under the queue's executor lock as
 * any run: the outcome (the bytes placed last word last, the result in the
 * slot, the head past it, the send CQ's doorbell) is the run's. It is taken
 * only when nothing can go other than well: the queue empty, the connected
 * peer looked up and not due for its liveness look, its ports up as last
 * found, no faults set, the remote key in the cache of mapped regions.
 * Anything else is left to the ordinary path, which decides and reports
 * it; nothing was changed before the copy. */
#include <string.h>

#include "soft/wire/shm/shm.h"
#include "util/copy.h"
#include "util/util.h"

bool shm_direct_write(struct soft_wire_qp *q, uint64_t index, const void *data, uint32_t len,
                      uint64_t remote_addr, uint32_t rkey)
{
    if (len == 0 || q->stopped || q->a.state != IBV_QPS_RTS)
        return false;
    struct soft_wire *w = q->w;
    struct shm_view *v = &q->peer;
    /* sends before it still to run (or a copy's job at the head): in order */
    if (TBRT_UNLIKELY(w->cfg.faults->active) || !v->peer ||
        atomic_load_explicit(&q->sh->sq_head, memory_order_relaxed) != index)
        return false;
    /* the connected peer as the run would find it (shm_deliver.c:
     * connected_peer), without its lookups: the 64th send looks at the
     * clock, so that one goes the ordinary way */
    if (!shm_peer_takes(v, q->a.dest_qpn) || ((q->alive_tick + 1) & 63) == 0 ||
        !shm_path_up(w, &q->path, (uint8_t)w->cfg.dev_index, q->a.port, v))
        return false;
    void *remote;
    char why[TBRT_WHY_MAX];
    if (shm_peer_mem(w, v->peer, rkey, remote_addr, len, IBV_ACCESS_REMOTE_WRITE, &remote, why,
                     sizeof why))
        return false;
    if (!shm_sq_lock(w, q->sh, false))
        return false;           /* the peer looks at our queue: the ordinary way */
    q->alive_tick++;
    q->counts.direct_writes++;
    placed_copy(remote, data, len);
    /* as run() finishes a send: the result, then the head (with the tail:
     * the queue holds nothing between them) */
    q->self.sq[index & (q->sq_cap - 1)].res =
        (struct shm_sres){.stamp = soft_stamp(), .status = IBV_WC_SUCCESS};
    q->sq_tail = index + 1;
    atomic_store_explicit(&q->sh->sq_tail, q->sq_tail, memory_order_release);
    atomic_store_explicit(&q->sh->sq_head, q->sq_tail, memory_order_release);
    shm_sq_unlock(q->sh);
    shm_ring(w, w->self, q->self.send_db, q->self.send_dbi);
    return true;
}
