/* link.c - the link API: options, probe, activation and readiness, the data
 * path entry points (non-blocking; the blocking ones are in wait.c), close.
 *
 * Link states: PROBED (resources made, caps known) -> ACTIVATING (queue pair
 * up, readiness byte sent) -> READY (the peer's 0x2A arrived) -> CLOSED; any
 * failure -> BROKEN, which keeps the first error and its message. A timeout
 * of a blocking call is reported but does not break the link. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/link.h"
#include "util/util.h"

static atomic_int next_link_id = 1;

static void set_why(tbrt_link *l, const char *fmt, va_list ap)
{
    char msg[TBRT_WHY_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    snprintf(l->why, sizeof l->why, "link %d: %s", l->id, msg);
}

int link_fail(tbrt_link *l, int err, const char *fmt, ...)
{
    if (l->state == TBRT_LINK_BROKEN)
        return -l->err;
    va_list ap;
    va_start(ap, fmt);
    set_why(l, fmt, ap);
    va_end(ap);
    l->err = err;
    l->state = TBRT_LINK_BROKEN;
    return -err;
}

int link_note(tbrt_link *l, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_why(l, fmt, ap);
    va_end(ap);
    return -err;
}

intptr_t link_took(tbrt_link *l, intptr_t rc)
{
    if (rc < 0 && l->x.err && l->state != TBRT_LINK_BROKEN) {
        link_fail(l, l->x.err, "%s", l->x.why);
        link_took_wire(l);
    }
    return rc < 0 && rc != -EAGAIN && l->state == TBRT_LINK_BROKEN ? -l->err : rc;
}

/* An RDMA link's socket carries nothing but the goodbye byte once the link
 * is up, so it is looked at every millisecond or so, busy or idle (a UC
 * send to a dead peer completes like any other); the clock is read every
 * 64th call only. A tcp link's socket is its data: recv tells. */
static int live_tick(tbrt_link *l)
{
    if (!l->x.dev || (++l->live_tick & 63) != 0)
        return 0;
    return link_check_liveness(l, false);
}

int link_progress(tbrt_link *l)
{
    int n = (int)link_took(l, l->t->progress(&l->x));
    if (n < 0)
        return n;
    int rc = live_tick(l);
    return rc ? rc : n;
}

/* Make the transport named by t, after select.c filled in the device. */
static int transport_setup(tbrt_link *l, const struct link_transport *t, char *err, size_t errlen)
{
    int rc = t == &link_rdma          ? link_rdma_setup(&l->x, err, errlen)
             : t == &link_llama_linux ? link_llama_linux_setup(&l->x, err, errlen)
                                      : link_tcp_setup(&l->x, err, errlen);
    if (rc == 0)
        l->t = t;
    return rc;
}

/* ---- options ------------------------------------------------------------------ */

void tbrt_link_opts_init(tbrt_link_opts *o)
{
    memset(o, 0, sizeof *o);
    o->gid_index = -1;
    o->nbuf = 16;
    o->stride = 128 * 1024;     /* measured best of 32/64/128/256 KiB on TB5 */
    o->timeout = 30.0;
    o->liveness = 2.0;
    o->spin = -1;               /* by transport: link_spin() */
}

static int normalize(tbrt_link *l, const tbrt_link_opts *in, char *err, size_t errlen)
{
    tbrt_link_opts d;
    tbrt_link_opts_init(&d);
    tbrt_link_opts *o = &l->opts;
    *o = in ? *in : d;
    str_copy(l->device_opt, sizeof l->device_opt,
             o->device && *o->device ? o->device : env_str("TBRT_DEVICE", "soft"));
    o->device = l->device_opt;
    str_copy(l->personality_opt, sizeof l->personality_opt, o->personality);
    o->personality = l->personality_opt[0] ? l->personality_opt : NULL;
    str_copy(l->ports_opt, sizeof l->ports_opt, o->ports);
    o->ports = l->ports_opt[0] ? l->ports_opt : NULL;
    str_copy(l->pci_opt, sizeof l->pci_opt, o->pci);
    o->pci = l->pci_opt[0] ? l->pci_opt : NULL;
    if (o->gid_index < 0)
        o->gid_index = (int)env_long("TBRT_GID_INDEX", -1);
    if (o->nbuf == 0)
        o->nbuf = d.nbuf;
    if (o->stride == 0)
        o->stride = d.stride;
    if (!(o->timeout > 0))
        o->timeout = d.timeout;
    if (!(o->liveness > 0))
        o->liveness = d.liveness;
    if (!(o->spin >= 0))
        o->spin = -1;           /* NaN too */
    if (o->nbuf < 2 || o->nbuf > 4096)
        return err_set(err, errlen, EINVAL, "link %d: nbuf %u out of range 2..4096", l->id, o->nbuf);
    if (o->stride < 4096 || o->stride % 4096 || o->stride > (64u << 20))
        return err_set(err, errlen, EINVAL, "link %d: stride %u must be a multiple of 4 KiB "
                       "(a Thunderbolt frame) from 4 KiB to 64 MiB", l->id, o->stride);
    if (o->framing < TBRT_FRAMING_AUTO || o->framing > TBRT_FRAMING_LLAMA_LINUX)
        return err_set(err, errlen, EINVAL, "link %d: framing %d is not auto/fixed/variable/"
                       "llama-apple/llama-linux", l->id, o->framing);
    if (o->qp_type && o->qp_type != IBV_QPT_RC && o->qp_type != IBV_QPT_UC)
        return err_set(err, errlen, EINVAL, "link %d: qp_type %d: links use RC or UC", l->id,
                       o->qp_type);
    if (o->port < 0 || o->port > 255)
        return err_set(err, errlen, EINVAL, "link %d: port %d out of range", l->id, o->port);
    return link_framing_opts(l, err, errlen);
}

/* ---- probe and activation -------------------------------------------------------- */

static void fill_info(tbrt_link *l)
{
    tbrt_link_info *i = &l->info;
    i->id = l->id;
    i->flavor = l->x.flavor;
    i->framing = l->x.framing ? l->x.framing : l->opts.framing;
    i->qp_type = l->x.qp_type;
    i->port = l->x.port;
    i->gid_index = l->x.gid_index;
    i->nbuf = l->x.nbuf;
    i->stride = l->x.stride;
    if (l->x.dev) {
        str_copy(i->device, sizeof i->device, tbrt_dev_name(l->x.dev));
        str_copy(i->kind, sizeof i->kind, tbrt_dev_kind(l->x.dev));
        str_copy(i->personality, sizeof i->personality, tbrt_dev_personality(l->x.dev));
        i->qpn = l->x.qp ? l->x.qp->qp_num : 0;
    } else {
        str_copy(i->device, sizeof i->device, "tcp");
        str_copy(i->kind, sizeof i->kind, "tcp");
        i->personality[0] = 0;
        i->qpn = 0;
    }
}

int tbrt_link_probe(int fd, const tbrt_link_opts *opts, tbrt_link **out, uint8_t *caps_out,
                    char *err, size_t errlen)
{
    if (!out)
        return err_set(err, errlen, EINVAL, "probe: no out pointer");
    *out = NULL;
    tbrt_link *l = calloc(1, sizeof *l);
    if (!l)
        return err_set(err, errlen, ENOMEM, "probe: out of memory");
    l->id = atomic_fetch_add(&next_link_id, 1);
    l->x.link_id = l->id;
    l->x.fd = fd;
    l->x.opts = &l->opts;
    l->x.pend_buf = -1;
    l->x.gid_index = -1;
    int rc = normalize(l, opts, err, errlen);
    if (rc == 0)
        rc = link_socket_setup(l, err, errlen);
    if (rc == 0) {
        if (strcmp(l->opts.device, "tcp") == 0) {
            rc = transport_setup(l, &link_tcp, err, errlen);
            str_copy(l->info.why_device, sizeof l->info.why_device, "tcp: asked for");
        } else {
            rc = link_select_device(l, err, errlen);
            if (rc == 0)
                rc = transport_setup(l, l->opts.framing == TBRT_FRAMING_LLAMA_LINUX
                                            ? &link_llama_linux : &link_rdma, err, errlen);
        }
    }
    if (rc) {
        l->x.fd = -1;             /* the caller keeps its socket on failure */
        if (l->t)
            l->t->teardown(&l->x);
        else if (l->x.dev)
            link_rdma.teardown(&l->x);
        free(l);
        return rc;
    }
    l->state = TBRT_LINK_PROBED;
    fill_info(l);
    if (caps_out) {
        tbrt_caps c = {.flavor = l->x.dev ? link_caps_flavor(l) : 0, .qpn = l->info.qpn,
                       .psn = l->x.psn, .lid = l->x.lid};
        memcpy(c.gid, l->x.gid, 16);
        tbrt_caps_encode(&c, caps_out, TBRT_CAPS_SIZE);
    }
    *out = l;
    return 0;
}

int tbrt_link_activate(tbrt_link *l, const uint8_t *peer_caps, size_t len)
{
    if (!l)
        return -EINVAL;
    if (l->state != TBRT_LINK_PROBED)
        return link_note(l, EINVAL, "activate: the link is not freshly probed (state %d)", l->state);
    tbrt_caps peer;
    char why[TBRT_WHY_MAX];
    int rc = tbrt_caps_decode(peer_caps, len, l->x.dev ? link_caps_flavor(l) : TBRT_FLAVOR_LINUX,
                              &peer, why, sizeof why);
    if (rc < 0) {
        if (link_has_readiness(l, l->x.dev != NULL))
            link_send_byte(l, 0);   /* the peer fails with us */
        return link_fail(l, -rc, "activate: %s", why);
    }
    if (rc == 1 || !l->x.dev) {
        /* either side without RDMA: both stay on TCP */
        if (l->x.dev) {
            l->t->teardown(&l->x);
            l->x.teardown_log[0] = 0;
            l->fallback = true;
            transport_setup(l, &link_tcp, why, sizeof why);
            fill_info(l);
            str_copy(l->info.why_device, sizeof l->info.why_device,
                     "tcp: the peer sent all-zero caps (no RDMA), so both sides stay on TCP");
        }
        rc = 0;
    } else {
        rc = (int)link_took(l, l->t->activate(&l->x, &peer));
        if (rc == 0)
            l->info.peer_qpn = peer.qpn;
    }
    if (rc == 0 && l->state == TBRT_LINK_BROKEN)
        rc = -l->err;
    if (!link_has_readiness(l, l->x.dev != NULL)) {
        /* llama-linux (and llama-apple over TCP): up as soon as this side is */
        if (rc)
            return rc;
        l->state = TBRT_LINK_READY;
        return 0;
    }
    /* every device, success or not, so a one-sided failure fails both sides */
    int src = link_send_byte(l, rc == 0 ? TBRT_READY_BYTE : 0);
    l->ready_sent = true;
    if (rc)
        return rc;
    if (src)
        return link_fail(l, -src, "activate: sending the readiness byte: %s", strerror(-src));
    l->state = TBRT_LINK_ACTIVATING;
    return 0;
}

int tbrt_link_ready(tbrt_link *l)
{
    if (!l)
        return -EINVAL;
    if (l->state == TBRT_LINK_READY)
        return 0;
    if (l->state == TBRT_LINK_BROKEN)
        return -l->err;
    if (l->state != TBRT_LINK_ACTIVATING)
        return link_note(l, EINVAL, "ready: activate first");
    uint8_t b;
    int rc = link_recv_byte(l, &b);
    if (rc == 0)
        return -EAGAIN;
    if (rc < 0)
        return link_fail(l, rc == -ECONNRESET ? ECONNRESET : -rc,
                         "readiness: the peer closed the bootstrap socket before it was ready");
    if (b == 0)
        return link_fail(l, ECONNREFUSED, "readiness: the peer failed to activate its side "
                         "(it sent 0x00, not 0x2A); see the peer's error");
    if (b != TBRT_READY_BYTE && (rc = link_ready_byte(l, b)) != 0)
        return rc;
    if (b != TBRT_READY_BYTE)
        return link_fail(l, EPROTO, "readiness: byte 0x%02x, expected 0x2A", b);
    l->state = TBRT_LINK_READY;
    return 0;
}

/* ---- data path -------------------------------------------------------------------- */

int link_usable(tbrt_link *l, const char *op)
{
    if (l->state == TBRT_LINK_READY)
        return 0;
    if (l->state == TBRT_LINK_BROKEN)
        return -l->err;
    if (l->state == TBRT_LINK_CLOSED)
        return link_note(l, EBADF, "%s: the link is closed", op);
    return link_note(l, ENOTCONN, "%s: the link is not ready (activate it first)", op);
}

intptr_t tbrt_link_send(tbrt_link *l, const void *buf, size_t len)
{
    if (!l || (!buf && len))
        return -EINVAL;
    int rc = link_usable(l, "send");
    if (rc || (rc = views_busy_send(l, "send")) != 0)
        return rc;
    if (l->bye)
        return link_note(l, EPIPE, "send: the peer closed the link");
    if (len == 0)
        return 0;
    intptr_t n = link_took(l, l->t->send(&l->x, buf, len));
    if (n == -EAGAIN)
        l->x.stats.eagain++;
    /* a send that never has to wait must still notice a dead peer */
    if (n >= 0 && (rc = live_tick(l)) != 0)
        return rc;
    return n;
}

intptr_t tbrt_link_recv(tbrt_link *l, void *buf, size_t len)
{
    if (!l || (!buf && len))
        return -EINVAL;
    if (l->state == TBRT_LINK_BROKEN && l->x.peer_dead && l->t->readable(&l->x) && len)
        return link_took(l, l->t->recv(&l->x, buf, len)); /* what arrived before the peer died */
    int rc = link_usable(l, "recv");
    if (rc || (rc = views_busy_recv(l, "recv")) != 0)
        return rc;
    if (len == 0)
        return 0;
    /* turnaround: a request still coalescing would never reach the peer
     * (unless a send view is open in that stride: it goes at its flush) */
    if (!l->views.send_open && (rc = (int)link_took(l, l->t->flush(&l->x))) != 0 &&
        rc != -EAGAIN)
        return rc;
    if (!l->x.dev) {
        /* tcp: the socket itself knows; one recv, no poll first */
        intptr_t n = link_took(l, l->t->recv(&l->x, buf, len));
        if (n == -EAGAIN)
            l->x.stats.eagain++;
        return n;
    }
    if (!l->t->readable(&l->x)) {
        int n = link_progress(l);
        if (n < 0)
            return l->t->readable(&l->x) ? link_took(l, l->t->recv(&l->x, buf, len)) : n;
    }
    if (!l->t->readable(&l->x)) {
        if (l->bye || l->x.eof)
            return 0;           /* EOF */
        l->x.stats.eagain++;
        return -EAGAIN;
    }
    return link_took(l, l->t->recv(&l->x, buf, len));
}

int tbrt_link_flush(tbrt_link *l)
{
    if (!l)
        return -EINVAL;
    int rc = link_usable(l, "flush");
    if (rc || (rc = views_busy_send(l, "flush")) != 0)
        return rc;
    return (int)link_took(l, l->t->flush(&l->x));
}

int tbrt_link_progress(tbrt_link *l)
{
    if (!l)
        return -EINVAL;
    if (l->state == TBRT_LINK_BROKEN)
        return -l->err;
    if (l->state != TBRT_LINK_READY)
        return 0;
    return link_progress(l);
}

int tbrt_link_fds(tbrt_link *l, int *fds, int max)
{
    if (!l || !fds || !l->t)
        return 0;
    return l->t->fds(&l->x, fds, max);
}

int tbrt_link_arm(tbrt_link *l)
{
    if (!l)
        return -EINVAL;
    if (l->state == TBRT_LINK_BROKEN)
        return -l->err;
    int rc = (int)link_took(l, l->t->arm(&l->x));
    if (rc == 0)
        l->x.stats.sleeps++;      /* armed: the caller sleeps on the fds now */
    return rc;
}

double tbrt_link_sleep_max(tbrt_link *l)
{
    /* sends in flight on a software device move only when we call in */
    if (l && l->x.dev && strcmp(tbrt_dev_kind(l->x.dev), "soft") == 0 && !l->t->idle(&l->x))
        return 0.001;
    return -1;
}

int tbrt_link_ready_for(tbrt_link *l, int what)
{
    if (!l || l->state != TBRT_LINK_READY)
        return 1;               /* a call would return (an error) at once */
    switch (what) {
    case TBRT_WAIT_RECV:
        if (!l->x.dev)
            return 0;           /* tcp: only a recv knows; the caller polls the fd */
        return l->t->readable(&l->x) > 0 || l->bye;
    case TBRT_WAIT_SEND:
        return l->t->writable(&l->x) || l->bye;
    case TBRT_WAIT_IDLE:
        return l->t->idle(&l->x);
    default:
        return 1;
    }
}

int tbrt_link_inflight(tbrt_link *l)
{
    if (!l || !l->t || l->state == TBRT_LINK_CLOSED)
        return 0;
    return l->t->inflight(&l->x);
}

int tbrt_link_writable(tbrt_link *l)
{
    return l && l->state == TBRT_LINK_READY && l->t->writable(&l->x);
}

size_t tbrt_link_readable(tbrt_link *l)
{
    return l && l->t ? l->t->readable(&l->x) : 0;
}

/* ---- information ---------------------------------------------------------------- */

void tbrt_link_set_timeouts(tbrt_link *l, double timeout, double liveness, double spin)
{
    if (!l)
        return;
    if (timeout > 0)
        l->opts.timeout = timeout;
    if (liveness > 0)
        l->opts.liveness = liveness;
    if (spin >= 0)
        l->opts.spin = spin;
}

void tbrt_link_stats_get(tbrt_link *l, tbrt_link_stats *s)
{
    if (l && s)
        *s = l->x.stats;
}

void tbrt_link_info_get(tbrt_link *l, tbrt_link_info *i)
{
    if (!l || !i)
        return;
    l->info.state = l->state;
    *i = l->info;
}

const char *tbrt_link_why(tbrt_link *l) { return l ? l->why : "no link"; }
int tbrt_link_errno(tbrt_link *l) { return l ? l->err : EINVAL; }
tbrt_dev *tbrt_link_dev(tbrt_link *l) { return l ? l->x.dev : NULL; }
tbrt_qp *tbrt_link_qp(tbrt_link *l) { return l ? l->x.qp : NULL; }
tbrt_cq *tbrt_link_cq(tbrt_link *l) { return l ? l->x.cq : NULL; }
const char *tbrt_link_teardown(tbrt_link *l) { return l ? l->x.teardown_log : ""; }

int tbrt_link_inject(tbrt_link *l, int what)
{
    if (!l || what < 1 || what > 4 || !l->x.dev)
        return -EINVAL;
    if (l->x.framing == TBRT_FRAMING_LLAMA_LINUX ||
        (l->x.framing == TBRT_FRAMING_LLAMA_APPLE && what > 2))
        return -EINVAL;         /* no header / no sequence number to break */
    l->x.inject = what;
    return 0;
}

/* ---- close ------------------------------------------------------------------------ */

static int link_close(tbrt_link *l, bool drain)
{
    if (!l)
        return -EINVAL;
    if (l->state == TBRT_LINK_CLOSED)
        return 0;
    views_before_teardown(l);   /* an open send view's bytes are not sent */
    if (l->state == TBRT_LINK_READY && !l->x.peer_dead) {
        /* let what was sent land before saying goodbye, bounded */
        link_took(l, l->t->flush(&l->x));
        if (drain)
            link_wait_idle(l, TBRT_MIN(l->opts.timeout, 2.0));
        /* an RDMA link's socket carries only this byte now; a tcp link's
         * EOF (below) says the same */
        if (!l->bye && l->x.dev && link_has_goodbye(l))
            link_send_byte(l, TBRT_BYE_BYTE);
    }
    if (l->t)
        l->t->teardown(&l->x);
    views_after_teardown(l);
    if (l->x.fd >= 0) {
        shutdown(l->x.fd, SHUT_WR);
        close(l->x.fd);
        l->x.fd = -1;
    }
    l->state = TBRT_LINK_CLOSED;
    if (l->x.close_err)
        return link_note(l, l->x.close_err, "close: %s", l->x.close_why);
    return 0;
}

int tbrt_link_close(tbrt_link *l) { return link_close(l, true); }

void tbrt_link_free(tbrt_link *l)
{
    if (!l)
        return;
    link_close(l, false);
    free(l);
}
