/* views.c - zero-copy views of a link's rings: send_view/commit and
 * recv_view/release (tbrt.h states the contract; this is the engine's part:
 * the state checks, the misuse messages, waiting, and close).
 *
 * The transport gives the spans (link_transport.send_view ...): rdma.c a
 * span of the stride being filled / of the oldest completed stride,
 * llama_linux.c its one SEND buffer, tcp.c its coalescing buffer and a
 * read buffer (the kernel copies there anyway). The engine keeps which
 * views are open (struct link_views) and refuses what would move the ring
 * under an open view: a second send view, send or flush while a send view
 * is open (either could post the stride the view points into), recv while
 * a recv view is open (it would repost the stride under it).
 *
 * Views and breakage: a link that breaks leaves the ring mapped, so an open
 * view stays valid; commit then fails with the link's error (the bytes are
 * dropped) and release just closes the view. What arrived before the peer
 * died can still be viewed, as it can be recv()'d. At close, a ring under a
 * view still open is mapped again as fresh zero pages after the teardown
 * unmapped it (views_after_teardown): a late write through the view lands
 * in memory nobody else uses, never in what the allocator hands out next.
 * Those addresses stay reserved for the life of the process (a ring's size,
 * once per such close). */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/link.h"
#include "util/util.h"

int views_refuse_send(tbrt_link *l, const char *op)
{
    if (!l->views.send_open)
        return 0;
    return link_note(l, EINVAL, "%s: a send view of %zu bytes is open (commit it first)", op,
                     l->views.send_len);
}

int views_refuse_recv(tbrt_link *l, const char *op)
{
    if (!l->views.recv_open)
        return 0;
    return link_note(l, EINVAL, "%s: a recv view of %zu bytes is open (release it first)", op,
                     l->views.recv_len);
}

/* A dead peer must be noticed by a sender that never waits (as send does). */
static int views_tick(tbrt_link *l)
{
    if (!l->x.dev || (++l->views.tick & 63) != 0)
        return 0;
    return link_check_liveness(l, false);
}

/* ---- sending -------------------------------------------------------------------- */

intptr_t tbrt_link_send_view(tbrt_link *l, size_t want, uint8_t **out)
{
    if (!l || !out)
        return -EINVAL;
    int rc = views_busy_send(l, "send_view");
    if (rc)
        return rc;
    if ((rc = link_usable(l, "send_view")) != 0)
        return rc;
    if (l->bye)
        return link_note(l, EPIPE, "send_view: the peer closed the link");
    uint8_t *p = NULL;
    intptr_t n = link_took(l, l->t->send_view(&l->x, want, &p));
    if (n == -EAGAIN)
        l->x.stats.eagain++;
    if (n <= 0)
        return n;
    l->views.send_open = true;
    l->views.send_len = (size_t)n;
    *out = p;
    return n;
}

int tbrt_link_commit(tbrt_link *l, size_t n)
{
    if (!l)
        return -EINVAL;
    if (!l->views.send_open)
        return link_note(l, EINVAL, "commit: no send view is open (send_view first)");
    if (n > l->views.send_len)
        return link_note(l, EINVAL, "commit: %zu bytes, but the send view holds %zu (the view "
                         "stays open)", n, l->views.send_len);
    l->views.send_open = false;
    l->views.send_len = 0;
    int rc = link_usable(l, "commit");
    if (rc)
        return rc;              /* broken under the view: its bytes are dropped */
    if (n == 0)
        return 0;
    if ((rc = (int)link_took(l, l->t->commit(&l->x, n))) != 0)
        return rc;
    return views_tick(l);
}

/* ---- receiving ------------------------------------------------------------------ */

int tbrt_link_release(tbrt_link *l, size_t n)
{
    if (!l)
        return -EINVAL;
    if (!l->views.recv_open)
        return link_note(l, EINVAL, "release: no recv view is open (recv_view first)");
    if (n > l->views.recv_len)
        return link_note(l, EINVAL, "release: %zu bytes, but the recv view holds %zu (the view "
                         "stays open)", n, l->views.recv_len);
    l->views.recv_open = false;
    l->views.recv_len = 0;
    if (l->state == TBRT_LINK_CLOSED || n == 0)
        return 0;
    bool broken = l->state == TBRT_LINK_BROKEN;
    int rc = (int)link_took(l, l->t->release(&l->x, n));
    return broken ? 0 : rc;     /* a broken link keeps its error for the next call */
}

intptr_t tbrt_link_recv_view(tbrt_link *l, const uint8_t **out)
{
    if (!l || !out)
        return -EINVAL;
    int rc;
    if (l->views.recv_open && (rc = tbrt_link_release(l, l->views.recv_len)) != 0)
        return rc;
    const uint8_t *p = NULL;
    intptr_t n;
    if (l->state == TBRT_LINK_BROKEN && l->x.peer_dead && l->t->readable(&l->x)) {
        n = link_took(l, l->t->recv_view(&l->x, &p)); /* what arrived before the peer died */
        goto got;
    }
    if ((rc = link_usable(l, "recv_view")) != 0)
        return rc;
    /* turnaround, as recv does: unless a send view sits in that stride */
    if (!l->views.send_open && (rc = (int)link_took(l, l->t->flush(&l->x))) != 0 &&
        rc != -EAGAIN)
        return rc;
    if (l->x.dev) {
        if (!l->t->readable(&l->x)) {
            int pr = link_progress(l);
            if (pr < 0 && !l->t->readable(&l->x))
                return pr;
        }
        if (!l->t->readable(&l->x)) {
            if (l->bye || l->x.eof)
                return 0;       /* EOF */
            l->x.stats.eagain++;
            return -EAGAIN;
        }
    }
    n = link_took(l, l->t->recv_view(&l->x, &p));
got:
    if (n == -EAGAIN)
        l->x.stats.eagain++;
    if (n <= 0)
        return n;
    l->views.recv_open = true;
    l->views.recv_len = (size_t)n;
    *out = p;
    return n;
}

/* ---- waiting -------------------------------------------------------------------- */

struct view_arg {
    size_t want;
    uint8_t *sp;
    const uint8_t *rp;
    intptr_t rc;
};

static bool cond_send_view(tbrt_link *l, void *arg)
{
    struct view_arg *a = arg;
    a->rc = tbrt_link_send_view(l, a->want, &a->sp);
    return a->rc != -EAGAIN;
}

static bool cond_recv_view(tbrt_link *l, void *arg)
{
    struct view_arg *a = arg;
    a->rc = tbrt_link_recv_view(l, &a->rp);
    return a->rc != -EAGAIN;
}

static double view_timeout(tbrt_link *l, double t) { return t < 0 ? l->opts.timeout : t; }

intptr_t tbrt_link_send_view_wait(tbrt_link *l, size_t want, uint8_t **out, double timeout)
{
    if (!l || !out)
        return -EINVAL;
    struct view_arg a = {.want = want};
    if (!cond_send_view(l, &a)) {
        double t = view_timeout(l, timeout);
        int rc = link_wait(l, cond_send_view, &a, t, true);
        if (rc == -ETIMEDOUT)
            return link_note(l, ETIMEDOUT, "send_view: no room within %.3g s (the call's "
                             "timeout): every stride is in flight and the peer, alive, is not "
                             "taking them (not reading?)", t);
        if (rc)
            return rc;
    }
    if (a.rc > 0)
        *out = a.sp;
    return a.rc;
}

intptr_t tbrt_link_recv_view_wait(tbrt_link *l, const uint8_t **out, double timeout)
{
    if (!l || !out)
        return -EINVAL;
    struct view_arg a = {0};
    if (!cond_recv_view(l, &a)) {
        double t = view_timeout(l, timeout);
        int rc = link_wait(l, cond_recv_view, &a, t, false);
        if (rc == -ETIMEDOUT)
            return link_note(l, ETIMEDOUT, "recv_view: nothing arrived within %.3g s (the "
                             "call's timeout); the peer is alive but sent nothing more: check "
                             "that it sends, and flushes after its last send", t);
        if (rc)
            return rc;
    }
    if (a.rc > 0)
        *out = a.rp;
    return a.rc;
}

/* ---- close ---------------------------------------------------------------------- */

static void keep(tbrt_link *l, int i, void *at, size_t len)
{
    l->views.keep_at[i] = at;
    l->views.keep_len[i] = len;
}

void views_before_teardown(tbrt_link *l)
{
    struct xport *x = &l->x;
    keep(l, 0, NULL, 0);
    keep(l, 1, NULL, 0);
    if (l->views.send_open)
        keep(l, 0, x->dev ? (void *)x->send_mem : (void *)x->tcp_buf,
             x->dev ? x->send_ring_bytes : x->tcp_cap);
    if (l->views.recv_open)
        keep(l, 1, x->dev ? (void *)x->recv_mem : (void *)x->tcp_rbuf,
             x->dev ? x->ring_bytes : x->tcp_rcap);
    l->views.send_open = l->views.recv_open = false;
    l->views.send_len = l->views.recv_len = 0;
}

void views_after_teardown(tbrt_link *l)
{
    for (int i = 0; i < 2; i++) {
        if (!l->views.keep_at[i])
            continue;
        /* NOREPLACE: should anything have taken the range meanwhile, leave
         * it alone rather than clobber it */
        void *p = mmap(l->views.keep_at[i], l->views.keep_len[i], PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && p != l->views.keep_at[i])
            munmap(p, l->views.keep_len[i]);  /* an old kernel placed it elsewhere */
        l->views.keep_at[i] = NULL;
    }
}
