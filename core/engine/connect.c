/* connect.c - the quick start: tbrt_link_connect, tbrt_link_listen and
 * tbrt_link_accept, so a first C program needs nothing but tbrt.h.
 *
 * Each runs the setup steps a Lua script runs through tbrt.connect /
 * tbrt.listen (lua/tbrt/init.lua), each bounded by opts.timeout:
 *   bootstrap TCP -> probe (the tcp link when no RDMA device can be used
 *   here, unless opts.no_fallback) -> the default caps exchange (each side
 *   writes its 24 bytes, then reads the peer's, as lua/tbrt/caps.lua does,
 *   so a C end and a Lua end meet) -> activation and the readiness byte.
 * A failed step leaves nothing open and says which step and what to check. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/link.h"
#include "util/debug.h"
#include "util/util.h"

enum { LISTEN_BACKLOG = 16 };

struct tbrt_listener {
    int fd;
    int port;
    char where[160];            /* "accept on 0.0.0.0:7000" */
    tbrt_link_opts opts;
    char device[TBRT_NAME_MAX], personality[16], ports[32], pci[32];
    char wire[16], faults[512], pcap[256];
};

static void *fail_null(tbrt_error *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void *fail_null(tbrt_error *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        e->code = code;
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

static void ok(tbrt_error *e)
{
    if (e) {
        e->code = 0;
        e->msg[0] = 0;
    }
}

static double opts_timeout(const tbrt_link_opts *o)
{
    return o && o->timeout > 0 ? o->timeout : 30.0;
}

/* Milliseconds left until deadline, for poll (at least 0). */
static int ms_left(double deadline)
{
    double left = deadline - now_s();
    return left <= 0 ? 0 : (int)ceil(left * 1000.0);
}

/* ---- the caps exchange ---------------------------------------------------------- */

/* Write our caps, read the peer's; 0 or -errno with the link's message. */
static int exchange_caps(tbrt_link *l, const uint8_t mine[TBRT_CAPS_SIZE],
                         uint8_t peer[TBRT_CAPS_SIZE])
{
    double t = l->opts.timeout, deadline = now_s() + t;
    size_t off = 0;
    while (off < TBRT_CAPS_SIZE) {
        ssize_t n = send(l->x.fd, mine + off, TBRT_CAPS_SIZE - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return link_fail(l, errno, "caps exchange: sending our caps: %s", strerror(errno));
        struct pollfd p = {.fd = l->x.fd, .events = POLLOUT};
        if (poll(&p, 1, ms_left(deadline)) == 0)
            return link_fail(l, ETIMEDOUT, "caps exchange: could not send our caps within %.3g s",
                             t);
    }
    off = 0;
    while (off < TBRT_CAPS_SIZE) {
        ssize_t n = recv(l->x.fd, peer + off, TBRT_CAPS_SIZE - off, 0);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0)
            return link_fail(l, ECONNRESET, "caps exchange: the peer closed the connection after "
                             "%zu of %d bytes (did its probe fail? see its error)", off,
                             TBRT_CAPS_SIZE);
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return link_fail(l, errno, "caps exchange: reading the peer's caps: %s",
                             strerror(errno));
        struct pollfd p = {.fd = l->x.fd, .events = POLLIN};
        if (poll(&p, 1, ms_left(deadline)) > 0)
            continue;
        if (off == 0)
            return link_fail(l, ETIMEDOUT, "caps exchange: 0 of %d bytes from the peer within "
                             "%.3g s: is the other end accepting (tbrt_link_accept, or "
                             "tbrt.listen + accept in Lua) and using the default exchange?",
                             TBRT_CAPS_SIZE, t);
        return link_fail(l, ETIMEDOUT, "caps exchange: %zu of %d bytes from the peer within "
                         "%.3g s: does the other end speak another setup protocol?", off,
                         TBRT_CAPS_SIZE, t);
    }
    return 0;
}

/* ---- one end's setup on a connected socket ------------------------------------ */

static void link_err(tbrt_error *e, tbrt_link *l, int rc)
{
    fail_null(e, -rc, "%s", tbrt_link_why(l));
}

/* Probe, exchange, activate on fd (taken over: closed on failure). */
static tbrt_link *setup(int fd, const tbrt_link_opts *opts, tbrt_error *e)
{
    uint8_t mine[TBRT_CAPS_SIZE], peer[TBRT_CAPS_SIZE];
    char why[TBRT_WHY_MAX];
    tbrt_link *l = NULL;
    int rc = tbrt_link_probe(fd, opts, &l, mine, why, sizeof why);
    bool asked_tcp = opts && opts->device && strcmp(opts->device, "tcp") == 0;
    if (rc && !asked_tcp && !(opts && opts->no_fallback)) {
        /* no RDMA here: the tcp link, and the peer sees all-zero caps */
        tbrt_link_opts t;
        if (opts)
            t = *opts;
        else
            tbrt_link_opts_init(&t);
        t.device = "tcp";
        char why_tcp[TBRT_WHY_MAX];
        int trc = tbrt_link_probe(fd, &t, &l, mine, why_tcp, sizeof why_tcp);
        if (trc == 0) {
            l->fallback = true;
            snprintf(l->info.fallback, sizeof l->info.fallback,
                     "no usable RDMA device here: staying on TCP (%s)", why);
            snprintf(l->info.why_device, sizeof l->info.why_device, "tcp: %s", l->info.fallback);
            if (DBG_ON(DBG_EVENT))
                dbg_line(l->id, "%s", l->info.fallback);
            rc = 0;
        }
    }
    if (rc) {
        close(fd);
        return fail_null(e, -rc, "%s", why);
    }
    if ((rc = exchange_caps(l, mine, peer)) != 0 ||
        (rc = tbrt_link_activate_wait(l, peer, sizeof peer)) != 0) {
        link_err(e, l, rc);
        tbrt_link_free(l);
        return NULL;
    }
    ok(e);
    return l;
}

/* ---- connect ------------------------------------------------------------------- */

static int resolve(const char *host, int port, bool passive, struct addrinfo **out,
                   const char *what, tbrt_error *e)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : AI_ADDRCONFIG};
    const char *h = host && *host ? host : NULL;
    int g = getaddrinfo(h, service, &hints, out);
    if (g != 0) {
        fail_null(e, g == EAI_SYSTEM ? errno : ENOENT, "%s: cannot resolve \"%s\": %s", what,
                  h ? h : "", gai_strerror(g));
        return -1;
    }
    return 0;
}

/* A non-blocking connect to one address, bounded by deadline; the fd or -errno. */
static int connect_one(const struct addrinfo *a, double deadline)
{
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0)
        return -errno;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
        return fd;
    int err = errno;
    if (err == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r;
        while ((r = poll(&p, 1, ms_left(deadline))) < 0 && errno == EINTR) {
        }
        socklen_t len = sizeof err;
        if (r == 0)
            err = ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err == 0)
            return fd;
    }
    close(fd);
    return -err;
}

tbrt_link *tbrt_link_connect(const char *host, int port, const tbrt_link_opts *opts, tbrt_error *e)
{
    char what[160];
    snprintf(what, sizeof what, "connect %s:%d", host && *host ? host : "?", port);
    if (!host || !*host)
        return fail_null(e, EINVAL, "%s: no host given", what);
    if (port <= 0 || port > 65535)
        return fail_null(e, EINVAL, "%s: port %d out of range 1..65535", what, port);
    struct addrinfo *ai;
    if (resolve(host, port, false, &ai, what, e) < 0)
        return NULL;
    double t = opts_timeout(opts), deadline = now_s() + t;
    int fd = -ENOENT;
    for (struct addrinfo *a = ai; a && fd < 0 && now_s() < deadline; a = a->ai_next)
        fd = connect_one(a, deadline);
    freeaddrinfo(ai);
    if (fd == -ETIMEDOUT || fd == -EINPROGRESS)
        return fail_null(e, ETIMEDOUT, "%s: no answer within %.3g s", what, t);
    if (fd < 0)
        return fail_null(e, -fd, "%s: %s%s", what, strerror(-fd),
                         fd == -ECONNREFUSED ? " (is the other end listening?)" : "");
    return setup(fd, opts, e);
}

/* ---- listen / accept ----------------------------------------------------------- */

tbrt_listener *tbrt_link_listen(const char *host, int port, const tbrt_link_opts *opts,
                                tbrt_error *e)
{
    char what[160];
    const char *h = host && *host ? host : NULL;
    snprintf(what, sizeof what, "listen %s:%d", h ? h : "*", port);
    if (port < 0 || port > 65535)
        return fail_null(e, EINVAL, "%s: port %d out of range 0..65535", what, port);
    struct addrinfo *ai;
    if (resolve(h, port, true, &ai, what, e) < 0)
        return NULL;
    int fd = -1, err = EADDRNOTAVAIL;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        /* non-blocking: accept waits in poll, bounded */
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return fail_null(e, err, "%s: %s", what, strerror(err));
    struct tbrt_listener *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return fail_null(e, ENOMEM, "%s: out of memory", what);
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    s->fd = fd;
    s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    snprintf(s->where, sizeof s->where, "accept on %s:%d", h ? h : "*", s->port);
    if (opts)
        s->opts = *opts;
    else
        tbrt_link_opts_init(&s->opts);
    /* the caller's strings may not outlive this call */
    str_copy(s->device, sizeof s->device, s->opts.device);
    str_copy(s->personality, sizeof s->personality, s->opts.personality);
    str_copy(s->ports, sizeof s->ports, s->opts.ports);
    str_copy(s->pci, sizeof s->pci, s->opts.pci);
    s->opts.device = s->device[0] ? s->device : NULL;
    s->opts.personality = s->personality[0] ? s->personality : NULL;
    s->opts.ports = s->ports[0] ? s->ports : NULL;
    s->opts.pci = s->pci[0] ? s->pci : NULL;
    str_copy(s->wire, sizeof s->wire, s->opts.wire);
    str_copy(s->faults, sizeof s->faults, s->opts.faults);
    str_copy(s->pcap, sizeof s->pcap, s->opts.pcap);
    s->opts.wire = s->wire[0] ? s->wire : NULL;
    s->opts.faults = s->faults[0] ? s->faults : NULL;
    s->opts.pcap = s->pcap[0] ? s->pcap : NULL;
    if (DBG_ON(DBG_EVENT))
        dbg_line(0, "listening on %s:%d", h ? h : "*", s->port);
    ok(e);
    return s;
}

tbrt_link *tbrt_link_accept(tbrt_listener *s, double timeout, tbrt_error *e)
{
    if (!s || s->fd < 0)
        return fail_null(e, EINVAL, "accept: no listener (closed?)");
    double t = timeout < 0 ? opts_timeout(&s->opts) : timeout, deadline = now_s() + t;
    for (;;) {
        int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            return setup(fd, &s->opts, e);
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fail_null(e, errno, "%s: %s", s->where, strerror(errno));
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, ms_left(deadline)) == 0)
            return fail_null(e, ETIMEDOUT, "%s: nobody connected within %.3g s", s->where, t);
    }
}

int tbrt_listener_port(tbrt_listener *s) { return s ? s->port : -1; }
int tbrt_listener_fd(tbrt_listener *s) { return s ? s->fd : -1; }

void tbrt_listener_close(tbrt_listener *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    free(s);
}
