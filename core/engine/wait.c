/* wait.c - how a link waits: spin while the device makes progress, then arm
 * the completion queue and sleep on its fd and the bootstrap socket, never
 * past the deadline; and the blocking calls for plain C callers built on it
 * (activate_wait, send_all, recv_all, recv_some, the drain before close). */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "engine/link.h"
#include "util/util.h"

/* Spin while there is progress, then sleep on the completion fd and the
 * bootstrap socket; never past the deadline. writing: the tcp link waits
 * for room in the socket rather than for bytes. */
int link_wait(tbrt_link *l, link_cond cond, void *arg, double timeout, const char *what,
                     bool writing)
{
    bool tcp_out = writing && !l->x.dev;
    double spin = link_spin(l);
    double now = now_s(), deadline = now + timeout, spin_until = now + spin;
    /* the clock costs as much as a poll of the queue (more in a VM): read
     * it every few idle turns, and after progress only to restart the spin */
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
        if ((++idle & 15) != 0 && spin > 0)
            continue;
        now = now_s();
        if (restart) {
            spin_until = now + spin;
            restart = false;
        }
        if (now >= deadline)
            return link_note(l, ETIMEDOUT, "%s: not done within %.3g s", what, timeout);
        if (now < spin_until)
            continue;
        /* a socket needs no arming: poll() is level-triggered */
        int a = l->x.dev ? tbrt_link_arm(l) : 0;
        if (a < 0)
            return a;
        if (a > 0) {
            spin_until = now_s() + spin;
            continue;
        }
        struct pollfd p[2];
        int fds[2], nf = l->t->fds(&l->x, fds, 2);
        for (int i = 0; i < nf; i++)
            p[i] = (struct pollfd){.fd = fds[i], .events = tcp_out ? POLLOUT : POLLIN};
        double nap = deadline - now, cap = tbrt_link_sleep_max(l);
        if (cap >= 0 && cap < nap)
            nap = cap;
        int r = poll(p, (nfds_t)nf, (int)ceil(nap * 1000.0));
        if (r > 0 && nf == 2 && p[1].revents) {
            int rc = link_check_liveness(l, true);
            if (rc)
                return rc;
        }
        spin_until = now_s() + spin;
    }
}

int tbrt_link_activate_wait(tbrt_link *l, const uint8_t *peer_caps, size_t len)
{
    int rc = tbrt_link_activate(l, peer_caps, len);
    if (rc)
        return rc;
    /* the peer's byte comes over the socket: sleep on it alone */
    double deadline = now_s() + l->opts.timeout;
    for (;;) {
        rc = tbrt_link_ready(l);
        if (rc != -EAGAIN)
            return rc;
        double left = deadline - now_s();
        if (left <= 0)
            return link_fail(l, ETIMEDOUT, "readiness: no byte from the peer within %.3g s",
                             l->opts.timeout);
        struct pollfd p = {.fd = l->x.fd, .events = POLLIN};
        poll(&p, 1, (int)ceil(left * 1000.0));
    }
}

static double pick_timeout(tbrt_link *l, double t) { return t < 0 ? l->opts.timeout : t; }

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
    int rc = link_usable(l, "send");
    if (rc)
        return rc;
    struct io_arg a = {.cbuf = buf, .len = len};
    rc = link_wait(l, cond_send, &a, pick_timeout(l, timeout), "send", true);
    if (rc == -ETIMEDOUT)
        snprintf(l->why, sizeof l->why, "link %d: send: %zu of %zu bytes accepted within %.3g s "
                 "(the peer is not reading)", l->id, a.done, len, pick_timeout(l, timeout));
    if (rc)
        return rc;
    return a.rc ? a.rc : (intptr_t)a.done;
}

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
    struct io_arg a = {.buf = buf, .len = len, .some = some};
    if (cond_recv(l, &a))
        return a.rc && !a.done ? a.rc : (intptr_t)a.done;
    int rc = link_wait(l, cond_recv, &a, pick_timeout(l, timeout), "recv", false);
    if (rc == -ETIMEDOUT)
        snprintf(l->why, sizeof l->why, "link %d: recv: %zu of %zu bytes arrived within %.3g s "
                 "(peer alive but silent)", l->id, a.done, len, pick_timeout(l, timeout));
    if (rc && !a.done)
        return rc;
    if (a.rc && !a.done)
        return a.rc;
    return (intptr_t)a.done;
}

intptr_t tbrt_link_recv_all(tbrt_link *l, void *buf, size_t len, double timeout)
{
    return recv_wait(l, buf, len, timeout, false);
}

intptr_t tbrt_link_recv_some(tbrt_link *l, void *buf, size_t len, double timeout)
{
    return recv_wait(l, buf, len, timeout, true);
}

static bool cond_idle(tbrt_link *l, void *arg)
{
    (void)arg;
    return l->t->idle(&l->x) || l->state == TBRT_LINK_BROKEN;
}

int link_wait_idle(tbrt_link *l, double timeout)
{
    return link_wait(l, cond_idle, NULL, timeout, "close", true);
}
