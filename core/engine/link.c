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
#include "util/debug.h"
#include "util/util.h"

static atomic_int next_link_id = 1;

/* Bytes of the "link N: " that starts s (a message of this link). */
size_t link_prefix_len(const tbrt_link *l, const char *s)
{
    char p[32];
    int n = snprintf(p, sizeof p, "link %d: ", l->id);
    return n > 0 && strncmp(s, p, (size_t)n) == 0 ? (size_t)n : 0;
}

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
    if (DBG_ON(DBG_EVENT))
        dbg_line(l->id, "broken (%s): %s", tbrt_errname(err),
                 l->why + link_prefix_len(l, l->why));
    return -err;
}

int link_note(tbrt_link *l, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_why(l, fmt, ap);
    va_end(ap);
    if (DBG_ON(DBG_EVENT))
        dbg_line(l->id, "call failed (%s): %s", tbrt_errname(err),
                 l->why + link_prefix_len(l, l->why));
    return -err;
}

/* A completion that failed at the peer or on the way to it (xport.err_at_peer)
 * is also how a peer process that died looks from here, and the device can
 * see it first: a dying process closes its files one by one, its memory's
 * before or after its end of the bootstrap socket. So the socket is asked,
 * for up to PEER_GONE_WAIT_MS: a peer that died is the cause to report, the
 * completion its symptom (kept in the message); a live peer's failure is
 * reported as the completion said. */
#define PEER_GONE_WAIT_MS 20

static bool peer_died_first(tbrt_link *l)
{
    if (!l->x.dev || !l->x.err_at_peer || l->bye || l->x.peer_dead)
        return false;
    struct pollfd p = {.fd = l->x.fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, PEER_GONE_WAIT_MS) <= 0)
        return false;
    link_check_liveness(l, true);
    if (l->state != TBRT_LINK_BROKEN)
        return false;
    size_t n = strlen(l->why);
    snprintf(l->why + n, sizeof l->why - n, "; the device had reported: %s", l->x.why);
    return true;
}

intptr_t link_took_failed(tbrt_link *l, intptr_t rc)
{
    if (l->x.err && l->state != TBRT_LINK_BROKEN) {
        if (!peer_died_first(l))
            link_fail(l, l->x.err, "%s", l->x.why);
        link_took_wire(l);
    }
    return rc != -EAGAIN && l->state == TBRT_LINK_BROKEN ? -l->err : rc;
}

/* An RDMA link's socket carries nothing but the goodbye byte once the link
 * is up, so it is looked at every millisecond or so, busy or idle (a UC
 * send to a dead peer completes like any other); the clock is read every
 * 64th call only. A tcp link's socket is its data: recv tells of a process
 * gone (EOF) and keepalive of an idle host gone; a waiting caller (progress)
 * also looks whether our bytes go unacknowledged. */
static inline int live_tick(tbrt_link *l, bool waiting)
{
    if (!l->x.dev)
        return waiting ? link_check_tcp_acks(l, now_s()) : 0;
    if ((++l->live_tick & 63) != 0)
        return 0;
    return link_check_liveness(l, false);
}

int link_progress(tbrt_link *l)
{
    int n = (int)link_took(l, l->t->progress(&l->x));
    if (n < 0)
        return n;
    int rc = live_tick(l, true);
    if (TBRT_UNLIKELY((l->bye || l->x.peer_dead) && !l->x.full_looks)) {
        /* the peer said goodbye or is gone: what it sent before must all be
         * seen before EOF or the error (an eager link's look polls its CQ
         * only every 4th time): every look is whole from now on, this one
         * too */
        l->x.full_looks = true;
        int m = l->t->progress(&l->x);
        if (m > 0)
            n += m;
    }
    return rc ? rc : n;
}

/* A send or flush found no room: the peer is slow, stopped or gone. Gone is
 * told within the liveness bound (tcp: our bytes unacknowledged; RDMA: the
 * bootstrap socket, in progress); alive but not progressing within
 * opts.stall when it is set (the link stays usable), else the caller's
 * timeout bounds it. RDMA rings fill and drain without syscalls, so there
 * the clock is read only when a stall bound asks for it. */
static int send_blocked(tbrt_link *l, const char *op)
{
    bool tcp = !l->x.dev;
    if (!tcp && (l->opts.stall <= 0 || ((++l->blocked_tick & 15) != 0 && l->stall_since > 0)))
        return -EAGAIN;
    double now = now_s();
    if (l->stall_since <= 0) {
        l->stall_since = now;
        return -EAGAIN;
    }
    if (tcp) {
        int rc = link_check_tcp_acks(l, now);
        if (rc)
            return rc;
    }
    if (l->opts.stall > 0 && now - l->stall_since >= l->opts.stall) {
        double s = now - l->stall_since;
        l->stall_since = 0;     /* the next call waits a whole bound again */
        return link_note(l, ETIMEDOUT, "%s: peer alive but not progressing: nothing could be "
                         "sent for %.3g s (the stall bound, opts.stall %.3g s); its host "
                         "still answers, so it is stopped, busy or not reading", op, s,
                         l->opts.stall);
    }
    return -EAGAIN;
}

/* Make the transport named by t, after select.c filled in the device. */
static int transport_setup(tbrt_link *l, const struct link_transport *t, char *err, size_t errlen)
{
    int rc;
    if (t == &link_tcp && l->x.inject == LINK_INJECT_FALLBACK_SETUP) {
        l->x.inject = 0;        /* test hook: as if the buffer could not be had */
        rc = err_set(err, errlen, ENOMEM, "link %d: tcp setup: out of memory (injected)", l->id);
    } else {
        rc = t == &link_rdma          ? link_rdma_setup(&l->x, err, errlen)
             : t == &link_llama_linux ? link_llama_linux_setup(&l->x, err, errlen)
                                      : link_tcp_setup(&l->x, err, errlen);
    }
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
    str_copy(l->wire_opt, sizeof l->wire_opt, o->wire);
    o->wire = l->wire_opt[0] ? l->wire_opt : NULL;
    str_copy(l->faults_opt, sizeof l->faults_opt, o->faults);
    o->faults = l->faults_opt[0] ? l->faults_opt : NULL;
    str_copy(l->pcap_opt, sizeof l->pcap_opt, o->pcap);
    o->pcap = l->pcap_opt[0] ? l->pcap_opt : NULL;
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
    if (!(o->stall > 0))
        o->stall = 0;
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
    l->x.t0 = now_s();
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
    if (DBG_ON(DBG_EVENT))
        dbg_line(l->id, "probed: %s%s", l->info.why_device,
                 l->x.qp ? "" : " (no queue pair: the tcp link)");
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
            l->t = NULL;        /* nothing carries the link until tcp is set up */
            l->fallback = true;
            if ((rc = transport_setup(l, &link_tcp, why, sizeof why)) != 0) {
                link_send_byte(l, 0);   /* the peer fails with us */
                return link_fail(l, -rc, "activate: the peer has no RDMA, and the tcp link "
                                 "to stay on cannot be set up: %s", why + link_prefix_len(l, why));
            }
            fill_info(l);
            str_copy(l->info.why_device, sizeof l->info.why_device,
                     "tcp: the peer sent all-zero caps (no RDMA), so both sides stay on TCP");
            str_copy(l->info.fallback, sizeof l->info.fallback, LINK_PEER_NO_RDMA);
            if (DBG_ON(DBG_EVENT))
                dbg_line(l->id, "%s", LINK_PEER_NO_RDMA);
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
        if (l->t->ready && (rc = (int)link_took(l, l->t->ready(&l->x))) != 0)
            return rc;
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
    /* the peer's queue pair is up: what the transport sends first (rdma:
     * its eager offer) may go now */
    if (l->t->ready && (rc = (int)link_took(l, l->t->ready(&l->x))) != 0)
        return rc;
    if (DBG_ON(DBG_EVENT)) {
        if (l->x.dev)
            dbg_line(l->id, "ready: %s qpn %u <-> peer qpn %u, %s, %s framing, %u x %u-byte "
                     "strides each way (%.3f ms after probe)", l->info.device, l->info.qpn,
                     l->info.peer_qpn, dev_qp_type_name(l->x.qp_type),
                     l->x.framing == TBRT_FRAMING_FIXED ? "fixed" : "variable", l->x.nbuf,
                     l->x.stride, (now_s() - l->x.t0) * 1e3);
        else
            dbg_line(l->id, "ready: tcp%s (%.3f ms after probe)",
                     l->fallback ? " (fallback)" : "", (now_s() - l->x.t0) * 1e3);
    }
    return 0;
}

/* ---- data path -------------------------------------------------------------------- */

int link_not_usable(tbrt_link *l, const char *op)
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
    if (l->x.dsend.active && (buf != l->x.dsend.buf || len < l->x.dsend.len))
        return link_note(l, EBUSY, "send: %u bytes at %p are lent to the peer (a direct send it "
                         "has not read yet): send them again to wait for it, before any other",
                         l->x.dsend.len, (const void *)l->x.dsend.buf);
    intptr_t n = link_took(l, l->t->send(&l->x, buf, len));
    if (n == -EAGAIN) {
        l->x.stats.eagain++;
        return send_blocked(l, "send");
    }
    if (n > 0) {
        l->stall_since = 0;
        if (DBG_ON(DBG_OP))
            dbg_line(l->id, "send: %zd of %zu bytes accepted", n, len);
    }
    /* a send that never has to wait must still notice a dead peer */
    if (n >= 0 && (rc = live_tick(l, false)) != 0)
        return rc;
    return n;
}

int tbrt_link_mem_reg(tbrt_link *l, void *addr, size_t len)
{
    if (!l || !addr || !len)
        return -EINVAL;
    if (l->state == TBRT_LINK_CLOSED)
        return link_note(l, EBADF, "mem_reg: the link is closed");
    if (l->t != &link_rdma)
        return 0;               /* tcp, llama-linux: nothing reads it directly */
    int rc = direct_mem_reg(&l->x, addr, len);
    if (rc == -EEXIST)
        return link_note(l, EEXIST, "mem_reg: %p is registered with this link already", addr);
    if (rc == -ENOSPC)
        return link_note(l, ENOSPC, "mem_reg: this link has %d regions registered, the most it "
                         "takes", XPORT_UMR_MAX);
    if (rc)
        return link_note(l, -rc, "mem_reg: %zu bytes at %p: %s", len, addr,
                         tbrt_dev_why(l->x.dev));
    return 0;
}

int tbrt_link_mem_dereg(tbrt_link *l, void *addr)
{
    if (!l || !addr)
        return -EINVAL;
    if (l->t != &link_rdma)
        return 0;
    int rc = direct_mem_dereg(&l->x, addr);
    if (rc == -ENOENT)
        return link_note(l, ENOENT, "mem_dereg: %p is not the start of a region registered "
                         "with this link", addr);
    if (rc == -EBUSY)
        return link_note(l, EBUSY, "mem_dereg: %p holds a send lent to the peer (not read "
                         "yet), or a READ of the peer's offer that a recv has not taken", addr);
    if (rc)
        return link_note(l, -rc, "mem_dereg: %p: %s", addr, tbrt_dev_why(l->x.dev));
    return 0;
}

/* A recv's result, logged at TBRT_DEBUG=2 when bytes moved. */
static intptr_t recv_done(tbrt_link *l, intptr_t n, size_t len)
{
    if (n > 0 && DBG_ON(DBG_OP))
        dbg_line(l->id, "recv: %zd bytes (asked up to %zu)", n, len);
    return n;
}

intptr_t tbrt_link_recv(tbrt_link *l, void *buf, size_t len)
{
    if (!l || (!buf && len))
        return -EINVAL;
    if (l->state == TBRT_LINK_BROKEN && l->t && l->t->readable(&l->x) && len)
        /* what arrived before the failure (the peer died, a bad frame came)
         * is read first, however the failure was found: by this call's own
         * progress or by a wait's */
        return recv_done(l, link_took(l, l->t->recv(&l->x, buf, len)), len);
    int rc = link_usable(l, "recv");
    if (rc || (rc = views_busy_recv(l, "recv")) != 0)
        return rc;
    if (len == 0)
        return 0;
    /* turnaround: a request still coalescing would never reach the peer
     * (unless a send view is open in that stride: it goes at its flush) */
    bool pending = l->x.dev ? l->x.pend_buf >= 0 : l->x.tcp_len > 0;
    if (pending && !l->views.send_open && (rc = (int)link_took(l, l->t->flush(&l->x))) != 0 &&
        rc != -EAGAIN)
        return rc;
    if (!l->x.dev) {
        /* tcp: the socket itself knows; one recv, no poll first */
        intptr_t n = link_took(l, l->t->recv(&l->x, buf, len));
        if (n == -EAGAIN)
            l->x.stats.eagain++;
        return recv_done(l, n, len);
    }
    if (!l->t->readable(&l->x)) {
        int n = link_progress(l);
        if (n < 0)
            return l->t->readable(&l->x)
                       ? recv_done(l, link_took(l, l->t->recv(&l->x, buf, len)), len)
                       : n;
    }
    if (!l->t->readable(&l->x)) {
        if (l->bye || l->x.eof)
            return 0;           /* EOF */
        l->x.stats.eagain++;
        return -EAGAIN;
    }
    return recv_done(l, link_took(l, l->t->recv(&l->x, buf, len)), len);
}

int tbrt_link_flush(tbrt_link *l)
{
    if (!l)
        return -EINVAL;
    int rc = link_usable(l, "flush");
    if (rc || (rc = views_busy_send(l, "flush")) != 0)
        return rc;
    size_t pending = link_unflushed(l);
    rc = (int)link_took(l, l->t->flush(&l->x));
    if (pending && DBG_ON(DBG_OP))
        dbg_line(l->id, "flush: %zu bytes %s", pending,
                 rc == 0 ? (l->x.dev ? "posted" : "written") : rc == -EAGAIN ? "waiting for room"
                                                                           : "failed");
    if (rc == -EAGAIN) {
        if (!l->x.dev && l->x.tcp_len < pending)
            l->stall_since = 0;     /* part went out: moving, only slowly */
        return send_blocked(l, "flush");
    }
    if (rc == 0 && pending)
        l->stall_since = 0;
    return rc;
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
    if (liveness > 0 && liveness != l->opts.liveness) {
        l->opts.liveness = liveness;
        link_keepalive_apply(l);    /* the socket's probes follow the bound */
    }
    if (spin >= 0)
        l->opts.spin = spin;
}

void tbrt_link_stats_get(tbrt_link *l, tbrt_link_stats *s)
{
    if (l && s) {
        *s = l->x.stats;
        s->recv_posted = l->x.recv_posted;
    }
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
    if (!l || what < 1 || what > LINK_INJECT_EAGER_CREDIT || !l->x.dev)
        return -EINVAL;
    if (what >= LINK_INJECT_EAGER_LEN) {
        if (!l->x.eager.out_slots || l->state != TBRT_LINK_READY)
            return -EINVAL;     /* this link writes no eager frames */
    } else if (what > LINK_INJECT_FALLBACK_SETUP) {
        if (!l->x.direct_ok || l->state != TBRT_LINK_READY)
            return -EINVAL;     /* no direct transfers on this link */
        if (what == LINK_INJECT_STRAY_DONE)
            return (int)link_took(l, direct_stray_done(&l->x));
    }
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
    if (DBG_ON(DBG_EVENT))
        dbg_line(l->id, "closed: %llu bytes sent in %llu frames, %llu received in %llu; "
                 "teardown %s%s%s", (unsigned long long)l->x.stats.bytes_sent,
                 (unsigned long long)l->x.stats.frames_sent,
                 (unsigned long long)l->x.stats.bytes_recv,
                 (unsigned long long)l->x.stats.frames_recv, l->x.teardown_log,
                 l->x.close_err ? "; " : "", l->x.close_err ? l->x.close_why : "");
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
