/* wait.c - how a link waits: spin while the device makes progress (yield
 * the CPU instead while the peer process runs on ours), then arm the
 * completion queue and sleep on its fd and the bootstrap socket, never past
 * the deadline; the blocking calls for plain C callers built on it
 * (activate_wait, send_all, flush_all, recv_all, recv_some, the drain
 * before close),
 * and recv_looking, a bounded spin for callers with a wait loop of their own;
 * and what a wait that ran out says to check (tbrt_link_timed_out). */
#include <errno.h>
#include <linux/sockios.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <string.h>

#include "engine/cpu_waiters.h"
#include "engine/link.h"
#include "util/debug.h"
#include "util/util.h"

/* The peer waits on CPU `cpu`, ours: move this thread to another CPU of
 * its mask, then give the mask back (link.h says why). False when there is
 * none to move to. */
static bool move_off_cpu(int cpu)
{
    cpu_set_t mask, other;
    if (cpu < 0 || sched_getaffinity(0, sizeof mask, &mask) != 0)
        return false;
    other = mask;
    CPU_CLR(cpu, &other);
    if (CPU_COUNT(&other) == 0 || sched_setaffinity(0, sizeof other, &other) != 0)
        return false;
    /* the move is done when the call returns; the mask as it was again */
    sched_setaffinity(0, sizeof mask, &mask);
    return true;
}

/* A look that found nothing: pause as fits where the peer is, and say how
 * long since its last progress a waiter may keep looking before it sleeps
 * (link.h: link_spin, LINK_SPIN_AWAKE, LINK_CPU_SHARED). */
double tbrt_link_idle(tbrt_link *l)
{
    if (!l)
        return 0;
    int where = DEV_PEER_UNKNOWN, cpu = l->x.dev ? sched_getcpu() : -1;
    if (l->x.dev && l->x.qp && l->x.dev->ops->qp_peer)
        where = l->x.dev->ops->qp_peer(l->x.qp, cpu);
    if (where != DEV_PEER_HERE) {
        l->shared_cpu_since = 0;
        l->shared_moves = 0;
        l->shared_round = 0;
        /* another waiter on our CPU (not our peer: below) may hold what
         * our peer waits for (cpu_waiters.c): once our spin found nothing
         * for LINK_YIELD_AFTER, it gets the CPU (before that, the peer's
         * next message comes sooner than the CPU would come back). The
         * table every 16th look: it changes once a ms. A completion since
         * the last look starts the count afresh. */
        if (l->idle_completions != l->x.stats.completions) {
            l->idle_completions = l->x.stats.completions;
            l->idle_since_ns = 0;
            l->fellow_here = false;
        }
        if (cpu >= 0 && (l->idle_calls++ & 15) == 0) {
            /* the table with the coarse clock (ms marks), the precise one
             * only when there is a fellow: a waiter alone pays no more */
            l->fellow_here = false;
            if (cpu_waiters_others(cpu, cpu_waiters_now_ms())) {
                uint64_t t = now_ns();
                if (!l->idle_since_ns)
                    l->idle_since_ns = t;
                l->fellow_here = t - l->idle_since_ns > (uint64_t)(LINK_YIELD_AFTER * 1e9);
            }
        }
        if (l->fellow_here) {
            sched_yield();
            l->x.stats.fellow_yields++;
        }
    } else {
        double now = now_s();
        if (!l->shared_cpu_since)
            l->shared_cpu_since = now;
        double in = now - l->shared_cpu_since, period = LINK_CPU_SHARED + LINK_CPU_TURNS;
        uint32_t round = (uint32_t)(in / period);
        double phase = in - round * period;
        if (round != l->shared_round) {
            l->shared_round = round;
            l->shared_moves = 0;
        }
        /* each round, the end with the lower QPN tries to move at its start,
         * the other once LINK_CPU_SHARED of it has passed (both at once
         * could swap CPUs and share again); a mask may have grown meanwhile */
        uint8_t turn = l->x.qp->qp_num < l->x.peer.qpn ? 1 : phase > LINK_CPU_SHARED ? 2 : 0;
        bool moved = false;
        if (turn > l->shared_moves) {
            l->shared_moves = turn;
            moved = move_off_cpu(cpu);
            l->x.stats.cpu_moves += moved;
        }
        if (!moved && phase > LINK_CPU_SHARED)
            sched_yield();      /* the peer cannot answer while we spin */
    }
    if (l->opts.spin >= 0 || !l->x.dev)
        return link_spin(l);
    return where == DEV_PEER_AWAKE || where == DEV_PEER_HERE ? LINK_SPIN_AWAKE
                                                             : LINK_SPIN_RDMA;
}

/* Spin while there is progress, then sleep on the completion fd and the
 * bootstrap socket; never past the deadline. writing: the tcp link waits
 * for room in the socket rather than for bytes. Returns 0, an error, or
 * -ETIMEDOUT without a message: the caller knows what to say. */
int link_wait(tbrt_link *l, link_cond cond, void *arg, double timeout, bool writing)
{
    bool tcp = !l->x.dev, tcp_out = writing && tcp;
    /* the clock costs as much as a poll of the queue (28 ns in a VM here):
     * read it every few idle turns, and after progress only to restart the
     * spin; the deadline is set at the first read (a wait that ends within
     * a few turns never reads it) */
    double now, deadline = 0, since = 0; /* since: the last progress */
    bool started = false;
    unsigned idle = 0;
    bool restart = false;
    for (;;) {
        if (cond(l, arg))
            return 0;
        int n = link_progress(l);
        if (n < 0)
            return n;
        if (cond(l, arg))
            return 0;
        if (n > 0) {
            restart = true;
            continue;
        }
        double spin = tbrt_link_idle(l);
        if ((++idle & 15) != 0 && spin > 0)
            continue;
        now = now_s();
        if (!started) {
            started = true;
            deadline = now + timeout;
            since = now;
        }
        if (restart) {
            since = now;
            restart = false;
        }
        if (now >= deadline)
            return -ETIMEDOUT;
        if (now - since < spin)
            continue;
        /* a socket needs no arming: poll() is level-triggered */
        int a = tcp ? 0 : tbrt_link_arm(l);
        if (a < 0)
            return a;
        if (a > 0) {
            since = now_s();
            continue;
        }
        struct pollfd p[2];
        int fds[2], nf = l->t->fds(&l->x, fds, 2);
        for (int i = 0; i < nf; i++)
            p[i] = (struct pollfd){.fd = fds[i], .events = tcp_out ? POLLOUT : POLLIN};
        double nap = deadline - now, cap = tbrt_link_sleep_max(l);
        /* a tcp link wakes to look at its acknowledgements: a host gone
         * while our bytes wait makes the socket neither readable nor writable */
        if (tcp && (cap < 0 || cap > l->opts.liveness / 4))
            cap = l->opts.liveness / 4;
        if (cap >= 0 && cap < nap)
            nap = cap;
        int r = poll(p, (nfds_t)nf, (int)ceil(nap * 1000.0));
        if (r > 0 && nf == 2 && p[1].revents) {
            int rc = link_check_liveness(l, true);
            if (rc)
                return rc;
        }
        since = now_s();
    }
}

/* ---- what a wait that ran out says ------------------------------------------ */

/* What is still ours and not taken by the peer, as text ("" when nothing):
 * bytes not yet flushed or written, frames posted but not completed. */
static void ours_waiting(tbrt_link *l, char *out, size_t outlen)
{
    int queued = 0;
    out[0] = 0;
    size_t unsent = l->x.dev ? (l->x.pend_buf >= 0 ? l->x.pend_len : 0) : l->x.tcp_len;
    if (unsent)
        snprintf(out, outlen, "%zu bytes this link was given to send are not %s yet", unsent,
                 l->x.dev ? "flushed (flush at each message boundary)"
                          : "written (the socket is full: the peer is not reading)");
    else if (l->x.dev && l->x.send_count + l->x.inline_count)
        snprintf(out, outlen, "%u frames this link sent are not taken by the peer yet (its "
                 "receives are not posted: it is not reading)",
                 l->x.send_count + l->x.inline_count);
    else if (!l->x.dev && ioctl(l->x.fd, SIOCOUTQ, &queued) == 0 && queued > 0)
        snprintf(out, outlen, "%d bytes this link sent still wait in its socket, not taken by "
                 "the peer (it is not reading)", queued);
}

int tbrt_link_timed_out(tbrt_link *l, int what, size_t done, size_t len, double timeout)
{
    if (!l)
        return -ETIMEDOUT;
    char ours[160];
    ours_waiting(l, ours, sizeof ours);
    switch (what) {
    case TBRT_WAIT_RECV:
        if (ours[0])
            return link_note(l, ETIMEDOUT, "recv: %zu of %zu bytes arrived within %.3g s (the "
                             "call's timeout), and %s: if the peer waits for those before it "
                             "answers, both ends wait", done, len, timeout, ours);
        return link_note(l, ETIMEDOUT, "recv: %zu of %zu bytes arrived within %.3g s (the call's "
                         "timeout); the peer is alive (it was not reported gone within the "
                         "liveness bound) but sent nothing more: check that it sends, and "
                         "flushes after its last send (bytes it did not flush stay on its "
                         "side, where this end cannot see them)", done, len, timeout);
    case TBRT_WAIT_IDLE:
        return link_note(l, ETIMEDOUT, "close: %d sends still in flight after %.3g s: the peer "
                         "is alive but not reading", tbrt_link_inflight(l), timeout);
    default:
        if (l->x.dsend.active && !l->x.dsend.done)
            /* a rendezvous: the peer's reader has to come (direct.c) */
            return link_note(l, ETIMEDOUT, "send: %u bytes lent to the peer (a direct send from "
                             "registered memory) not read within %.3g s (the call's timeout): "
                             "a direct send returns only once the peer's recv has taken it; if "
                             "the peer waits in a send of its own that the rings cannot hold, or "
                             "sent this end more frames than its ring holds (the peer's READ "
                             "then queues behind them), both ends wait: read before sending, or "
                             "send from unregistered memory",
                             l->x.dsend.len, timeout);
        return link_note(l, ETIMEDOUT, "send: %zu of %zu bytes accepted within %.3g s (the call's "
                         "timeout): the peer is alive (it was not reported gone within the "
                         "liveness bound) but not reading: stopped, busy, or waiting for this "
                         "end to read first?%s%s", done, len, timeout, ours[0] ? " " : "", ours);
    }
}

/* ---- the blocking calls -------------------------------------------------------- */

int tbrt_link_activate_wait(tbrt_link *l, const uint8_t *peer_caps, size_t len)
{
    double t0 = now_s();
    int rc = tbrt_link_activate(l, peer_caps, len);
    if (rc)
        return rc;
    /* the peer's byte comes over the socket: sleep on it alone */
    double deadline = now_s() + l->opts.timeout;
    for (;;) {
        rc = tbrt_link_ready(l);
        if (rc != -EAGAIN)
            break;
        double left = deadline - now_s();
        if (left <= 0) {
            rc = link_fail(l, ETIMEDOUT, "readiness: no byte from the peer within %.3g s: is the "
                           "other end activating its side (activate after the caps exchange)?",
                           l->opts.timeout);
            break;
        }
        struct pollfd p = {.fd = l->x.fd, .events = POLLIN};
        poll(&p, 1, (int)ceil(left * 1000.0));
    }
    if (DBG_ON(DBG_OP))
        dbg_line(l->id, "activate_wait: %s after %.1f us", rc ? tbrt_errname(-rc) : "ready",
                 (now_s() - t0) * 1e6);
    return rc;
}

static double pick_timeout(tbrt_link *l, double t) { return t < 0 ? l->opts.timeout : t; }

/* TBRT_DEBUG=2: a blocking call's result and how long it took. */
static intptr_t op_done(tbrt_link *l, const char *op, size_t len, intptr_t rc, double t0)
{
    if (DBG_ON(DBG_OP)) {
        if (rc >= 0)
            dbg_line(l->id, "%s: %zd of %zu bytes in %.1f us", op, rc, len, (now_s() - t0) * 1e6);
        else
            dbg_line(l->id, "%s: %s after %.1f us", op, tbrt_errname((int)-rc),
                     (now_s() - t0) * 1e6);
    }
    return rc;
}

struct io_arg {
    const uint8_t *cbuf;
    uint8_t *buf;
    size_t len, done;
    int rc;
    bool some;
};

static bool cond_send(tbrt_link *l, void *arg)
{
    struct io_arg *a = arg;
    while (a->done < a->len) {
        intptr_t n = tbrt_link_send(l, a->cbuf + a->done, a->len - a->done);
        if (n == -EAGAIN)
            return false;
        if (n < 0) {
            a->rc = (int)n;
            return true;
        }
        a->done += (size_t)n;
    }
    return true;
}

intptr_t tbrt_link_send_all(tbrt_link *l, const void *buf, size_t len, double timeout)
{
    if (!l || (!buf && len))
        return -EINVAL;
    /* a message that fits at once, no TBRT_DEBUG=2 line asked for: the one
     * send, nothing around it (on an 8 B ping-pong's path, the wrapper's
     * calls and words were 3-4% of the one-way, tbrt-bench: 14 of 16
     * interleaved runs lower without them) */
    size_t first = 0;
    if (!DBG_ON(DBG_OP)) {
        intptr_t n = tbrt_link_send(l, buf, len);   /* (it checks the link) */
        if (n == (intptr_t)len || (n < 0 && n != -EAGAIN))
            return n;
        first = n > 0 ? (size_t)n : 0;
    }
    int rc = link_usable(l, "send");
    if (rc)
        return rc;
    /* the clock only for TBRT_DEBUG=2 */
    double t0 = DBG_ON(DBG_OP) ? now_s() : 0, t = pick_timeout(l, timeout);
    struct io_arg a = {.cbuf = buf, .len = len, .done = first};
    if (cond_send(l, &a))
        return op_done(l, "send_all", len, a.rc ? a.rc : (intptr_t)a.done, t0);
    rc = link_wait(l, cond_send, &a, t, true);
    if (rc == -ETIMEDOUT)
        rc = tbrt_link_timed_out(l, TBRT_WAIT_SEND, a.done, len, t);
    return op_done(l, "send_all", len, rc ? rc : a.rc ? a.rc : (intptr_t)a.done, t0);
}

static bool cond_flush(tbrt_link *l, void *arg)
{
    int *rc = arg;
    *rc = tbrt_link_flush(l);
    return *rc != -EAGAIN;
}

/* TBRT_DEBUG=2's line (the bytes moved, or the error); 0 or the error. */
static int flush_done(tbrt_link *l, size_t pending, int rc, double t0)
{
    op_done(l, "flush_all", pending, rc ? rc : (intptr_t)pending, t0);
    return rc;
}

int tbrt_link_flush_all(tbrt_link *l, double timeout)
{
    if (!l)
        return -EINVAL;
    /* a message's end, on the path of every message: the flush alone when
     * it goes at once (the debug line's figures only when asked for) */
    bool dbg = DBG_ON(DBG_OP);
    int rc;
    if (!dbg && (rc = tbrt_link_flush(l)) != -EAGAIN)
        return rc;
    double t0 = dbg ? now_s() : 0;
    size_t pending = dbg ? link_unflushed(l) : 0;
    if (dbg && cond_flush(l, &rc))
        return flush_done(l, pending, rc, t0);
    double t = pick_timeout(l, timeout);
    int w = link_wait(l, cond_flush, &rc, t, true);
    if (w == -ETIMEDOUT) {
        char ours[160];
        ours_waiting(l, ours, sizeof ours);
        w = link_note(l, ETIMEDOUT, "flush: %zu bytes not %s within %.3g s (the call's "
                      "timeout): the peer is alive (it was not reported gone within the "
                      "liveness bound) but not reading: stopped, busy, or waiting for this end "
                      "to read first?%s%s", link_unflushed(l), l->x.dev ? "posted" : "written", t,
                      ours[0] ? " " : "", ours);
    }
    return flush_done(l, pending, w ? w : rc, t0);
}

/* Looks a blocking recv takes before link_wait: as many as link_wait's
 * turns between its looks at the clock, and as the Lua binding's recv_into
 * takes through tbrt_link_recv_looking. */
#define RECV_FIRST_LOOKS 16

static bool cond_recv(tbrt_link *l, void *arg)
{
    struct io_arg *a = arg;
    while (a->done < a->len) {
        intptr_t n = tbrt_link_recv(l, a->buf + a->done, a->len - a->done);
        if (n == -EAGAIN)
            return a->some && a->done > 0;
        if (n == 0)
            return true;        /* EOF */
        if (n < 0) {
            a->rc = (int)n;
            return true;
        }
        a->done += (size_t)n;
    }
    return true;
}

static intptr_t recv_wait(tbrt_link *l, void *buf, size_t len, double timeout, bool some)
{
    if (!l || (!buf && len))
        return -EINVAL;
    const char *op = some ? "recv_some" : "recv_all";
    double t0 = DBG_ON(DBG_OP) ? now_s() : 0, t = pick_timeout(l, timeout);
    struct io_arg a = {.buf = buf, .len = len, .some = some};
    /* looks alone first (a recv that finds nothing takes a turn of progress
     * itself): link_wait's turn is three looks and a look at where the peer
     * runs, so a reply that comes within a few looks (a ping-pong's) was
     * found later than it could be (8 B one-way: ~4% less, tbrt-bench).
     * Not on tcp, where a look is a system call. */
    bool done = cond_recv(l, &a);
    unsigned looks = l->x.dev ? RECV_FIRST_LOOKS : 0;
    for (unsigned i = 0; !done && i < looks; i++)
        done = cond_recv(l, &a);
    if (done)
        return op_done(l, op, len, a.rc && !a.done ? a.rc : (intptr_t)a.done, t0);
    int rc = link_wait(l, cond_recv, &a, t, false);
    if (rc == -ETIMEDOUT)
        rc = tbrt_link_timed_out(l, TBRT_WAIT_RECV, a.done, len, t);
    if (rc && !a.done)
        return op_done(l, op, len, rc, t0);
    if (a.rc && !a.done)
        return op_done(l, op, len, a.rc, t0);
    return op_done(l, op, len, (intptr_t)a.done, t0);
}

intptr_t tbrt_link_recv_all(tbrt_link *l, void *buf, size_t len, double timeout)
{
    return recv_wait(l, buf, len, timeout, false);
}

intptr_t tbrt_link_recv_some(tbrt_link *l, void *buf, size_t len, double timeout)
{
    return recv_wait(l, buf, len, timeout, true);
}

intptr_t tbrt_link_recv_looking(tbrt_link *l, void *buf, size_t len, unsigned looks)
{
    if (!l)
        return -EINVAL;
    uint64_t eagain = l->x.stats.eagain;
    intptr_t r = tbrt_link_recv(l, buf, len);
    if (!l->x.dev)
        looks = 0;              /* tcp: a look is a system call */
    for (unsigned i = 0; r == -EAGAIN && i < looks; i++)
        r = tbrt_link_recv(l, buf, len);
    if (l->x.stats.eagain > eagain)
        l->x.stats.eagain = eagain + 1;     /* one call, however many looks */
    return r;
}

static bool cond_idle(tbrt_link *l, void *arg)
{
    (void)arg;
    return l->t->idle(&l->x) || l->state == TBRT_LINK_BROKEN;
}

int link_wait_idle(tbrt_link *l, double timeout)
{
    int rc = link_wait(l, cond_idle, NULL, timeout, true);
    return rc == -ETIMEDOUT ? tbrt_link_timed_out(l, TBRT_WAIT_IDLE, 0, 0, timeout) : rc;
}
