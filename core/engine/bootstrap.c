/* bootstrap.c - what each framing does on the bootstrap socket and at
 * setup, so link.c and liveness.c ask one place:
 *
 *                      tbrt (auto/fixed/variable)  llama-apple       llama-linux
 *   caps layout        the device's                Apple             Linux
 *   readiness byte     always (TCP fallback too)   only over RDMA    never
 *   goodbye byte       on an orderly close         never             never
 *   a byte once up     0x2B goodbye, else death    death             death
 *   EOF once up        death (no goodbye)          the end           the end
 *
 * llama.cpp sends nothing on the socket once a link is up and closes it to
 * end one, so for the llama framings EOF is the peer's orderly end and any
 * byte means the peer is gone (or is tbrt in its own framing: see below).
 *
 * A peer in another framing: a transport that meets the peer's header, or
 * a byte here that only tbrt sends, breaks the link with a message naming
 * both framings (framing.c), and sends the peer one notice byte naming our
 * own, so a tbrt peer fails as clearly within its liveness bound. llama.cpp
 * never sends a notice; to it the byte is just the end of the link. */
#include <errno.h>
#include <string.h>

#include "engine/link.h"
#include "engine/transport/framing.h"
#include "util/util.h"

static int mine(const tbrt_link *l) { return wire_of_framing(l->opts.framing); }

int link_caps_flavor(const tbrt_link *l)
{
    switch (l->opts.framing) {
    case TBRT_FRAMING_LLAMA_APPLE: return TBRT_FLAVOR_APPLE;
    case TBRT_FRAMING_LLAMA_LINUX: return TBRT_FLAVOR_LINUX;
    default: return l->x.flavor;
    }
}

bool link_has_readiness(const tbrt_link *l, bool rdma)
{
    switch (mine(l)) {
    case WIRE_LLAMA_APPLE: return rdma;
    case WIRE_LLAMA_LINUX: return false;
    default: return true;
    }
}

bool link_has_goodbye(const tbrt_link *l) { return mine(l) == WIRE_TBRT; }

/* llama.cpp fixes its geometry, queue pair type and (Linux) port: options
 * that say otherwise are an error, not silently ignored. nbuf and stride at
 * tbrt's defaults (16 x 128 KiB) count as not given. */
int link_framing_opts(tbrt_link *l, char *err, size_t errlen)
{
    tbrt_link_opts *o = &l->opts;
    bool defaults = o->nbuf == 16 && o->stride == 128 * 1024;
    if (o->framing == TBRT_FRAMING_LLAMA_APPLE) {
        if (!defaults)
            return err_set(err, errlen, EINVAL, "link %d: llama-apple framing has llama.cpp's "
                           "ring of 16 strides of 128 KiB: nbuf %u and stride %u cannot change it",
                           l->id, o->nbuf, o->stride);
    } else if (o->framing == TBRT_FRAMING_LLAMA_LINUX) {
        if (!defaults && !(o->nbuf == 24 && o->stride == TBRT_LLAMA_LINUX_CHUNK))
            return err_set(err, errlen, EINVAL, "link %d: llama-linux framing has llama.cpp's "
                           "24 receives of 256 KiB: nbuf %u and stride %u cannot change it",
                           l->id, o->nbuf, o->stride);
        if (o->qp_type && o->qp_type != IBV_QPT_RC)
            return err_set(err, errlen, EINVAL, "link %d: llama-linux framing uses RC queue "
                           "pairs, as llama.cpp's Linux transport does", l->id);
        if (o->port && o->port != 1)
            return err_set(err, errlen, EINVAL, "link %d: llama-linux framing uses port 1 "
                           "(llama.cpp's Linux transport hard-codes it), not port %d", l->id,
                           o->port);
        o->port = 1;
    }
    return 0;
}

void link_tell_peer(tbrt_link *l)
{
    /* best effort: the link is broken already, and a closed socket is news
     * the peer has */
    link_send_byte(l, wire_notice_byte(mine(l)));
}

void link_took_wire(tbrt_link *l)
{
    if (l->x.peer_wire) {
        l->x.peer_wire = WIRE_NONE;
        link_tell_peer(l);
    }
}

static int wrong_wire(tbrt_link *l, int peer, const char *what, bool tell)
{
    char m[TBRT_WHY_MAX];
    wire_mismatch(m, sizeof m, what, mine(l), peer);
    int rc = link_fail(l, EPROTO, "%s", m);
    if (tell)
        link_tell_peer(l);
    return rc;
}

int link_ready_byte(tbrt_link *l, uint8_t b)
{
    int peer = wire_of_notice(b);
    if (peer == WIRE_NONE || peer == mine(l))
        return 0;
    return wrong_wire(l, peer, "readiness: the peer's notice byte instead of 0x2A", false);
}

bool link_socket_byte(tbrt_link *l, int rc, uint8_t b, int *out)
{
    int me = mine(l), notice = rc == 1 ? wire_of_notice(b) : WIRE_NONE;
    if (me == WIRE_TBRT) {
        if (rc == -ECONNRESET && l->x.dev && l->x.flavor == TBRT_FLAVOR_APPLE &&
            l->x.stats.frames_sent && !l->x.stats.frames_recv) {
            /* llama.cpp's Apple transport closes on tbrt's first frame */
            l->x.peer_dead = true;
            *out = link_fail(l, ECONNRESET, "peer closed the bootstrap socket without saying "
                             "goodbye (peer process died?) after our first frames and before "
                             "any of its own; llama.cpp's Apple transport does that on tbrt's "
                             "frames: if the peer is llama.cpp, it speaks llama-apple framing "
                             "(8-byte RSEG header); open the link with framing = 'llama-apple'");
            return true;
        }
        if (notice == WIRE_NONE || notice == WIRE_TBRT)
            return false;       /* liveness.c knows the rest */
        l->x.peer_dead = true;
        *out = wrong_wire(l, notice, "bootstrap socket: the peer's notice byte", false);
        return true;
    }
    if (rc == -ECONNRESET) {
        /* EOF: how llama.cpp ends a link; what arrived before stays readable */
        l->bye = true;
        *out = 0;
        return true;
    }
    if (rc < 0)
        return false;
    l->x.peer_dead = true;
    if (notice != WIRE_NONE && notice != me) {
        *out = wrong_wire(l, notice, "bootstrap socket: the peer's notice byte", false);
        return true;
    }
    if (b == TBRT_BYE_BYTE || (b == TBRT_READY_BYTE && me == WIRE_LLAMA_LINUX)) {
        *out = wrong_wire(l, WIRE_TBRT, b == TBRT_BYE_BYTE
                          ? "bootstrap socket: byte 0x2b, tbrt's goodbye"
                          : "bootstrap socket: byte 0x2a, a readiness byte llama-linux never sends",
                          true);
        return true;
    }
    *out = link_fail(l, EPROTO, "bootstrap socket: byte 0x%02x after setup (a llama.cpp peer "
                     "sends nothing on it once the link is up: peer gone?)", b);
    return true;
}
