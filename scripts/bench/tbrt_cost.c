/* tbrt_cost.c - what one operation costs, in instructions, measured without
 * noise: everything runs in one process and one thread, so under
 * `valgrind --tool=callgrind --toggle-collect=cost_*` the count is the same
 * from run to run on any machine, loaded or not (scripts/bench/cost.sh runs
 * it that way and divides). Used to decide between designs; the timed
 * figures are make bench's.
 *
 *   tbrt-cost DEVICE PERSONALITY pingpong SIZE ITERS [LINKS]
 *       two ends of a link in this process; ITERS round trips of SIZE
 *       bytes (send + flush on one end, recv on the other, and back), every
 *       byte checked. With LINKS > 1, LINKS - 1 more links stay open (idle)
 *       beside it: a round trip must cost the same.
 *   tbrt-cost DEVICE PERSONALITY paths SIZE ITERS [LINKS]
 *       the same round trips, each message's path in two halves: the
 *       sender's send + flush (cost_send), and the receiver's recv that
 *       finds it (cost_recv), after the sender has taken its own send's
 *       completion and the receiver has looked once before it was sent
 *       (work that is off the message's path, as it is when the two ends
 *       are two processes: each does it while it waits).
 *   tbrt-cost DEVICE PERSONALITY idle 0 ITERS [LINKS]
 *       ITERS looks at a link with nothing for it (a progress call and a
 *       recv that finds nothing), what a waiting receiver repeats: the
 *       shorter, the sooner it sees a message that comes.
 *   tbrt-cost DEVICE PERSONALITY setup 0 0 [LINKS]
 *       LINKS links set up in turn, both ends: cost_setup is what the last
 *       one cost (probe, registration, activation) with LINKS - 1 open.
 *
 * Prints "name value" lines (round trips, links); the instruction counts
 * come from callgrind, per function named cost_*. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

#define MAX_LINKS 256

struct pair {
    tbrt_link *a, *b;
};

/* The bootstrap connection goes to the listener made in main. */
static int listen_port;

/* Probe both ends, swap caps in memory, activate both, wait until ready. */
static struct pair pair_make(int ls, const char *dev, const char *pers)
{
    int fa = bench_connect(listen_port), fb = bench_accept(ls);
    tbrt_link_opts o;
    tbrt_link_opts_init(&o);
    o.device = dev;
    o.personality = pers && *pers && strcmp(pers, "-") ? pers : NULL;
    o.timeout = BENCH_TIMEOUT;
    o.no_fallback = 1;
    uint8_t ca[TBRT_CAPS_SIZE], cb[TBRT_CAPS_SIZE];
    char err[TBRT_WHY_MAX];
    struct pair p;
    if (tbrt_link_probe(fa, &o, &p.a, ca, err, sizeof err) ||
        tbrt_link_probe(fb, &o, &p.b, cb, err, sizeof err)) {
        fprintf(stderr, "tbrt-cost: probe: %s\n", err);
        exit(1);
    }
    if (tbrt_link_activate(p.a, cb, sizeof cb))
        bench_die("activate", p.a);
    if (tbrt_link_activate(p.b, ca, sizeof ca))
        bench_die("activate", p.b);
    double deadline = bench_now() + BENCH_TIMEOUT;
    int ra, rb;
    while ((ra = tbrt_link_ready(p.a)) == -EAGAIN || (rb = tbrt_link_ready(p.b)) == -EAGAIN) {
        if (bench_now() > deadline)
            bench_die("readiness", p.a);
        poll(NULL, 0, 1);
    }
    if (ra || tbrt_link_ready(p.b))
        bench_die("ready", ra ? p.a : p.b);
    return p;
}

static void pass(tbrt_link *from, tbrt_link *to, const uint8_t *msg, uint8_t *buf, size_t n,
                 uint64_t idx)
{
    if (tbrt_link_send(from, msg, n) != (intptr_t)n || tbrt_link_flush(from))
        bench_die("send", from);
    size_t got = 0;
    for (int tries = 0; got < n; tries++) {
        intptr_t r = tbrt_link_recv(to, buf + got, n - got);
        if (r > 0)
            got += (size_t)r;
        else if (r != -EAGAIN && r != 0)
            bench_die("recv", to);
        else if (tbrt_link_progress(from) < 0 || tries > 1000000)
            bench_die("recv: nothing came", to);
    }
    bench_check(buf, msg, 0, n, idx);
}

__attribute__((noinline)) void cost_send(tbrt_link *from, const uint8_t *msg, size_t n)
{
    if (tbrt_link_send(from, msg, n) != (intptr_t)n || tbrt_link_flush(from))
        bench_die("send", from);
}

__attribute__((noinline)) intptr_t cost_recv(tbrt_link *to, uint8_t *buf, size_t n)
{
    return tbrt_link_recv(to, buf, n);
}

/* pass() in halves: a message's path alone (see the top) */
static void pass_paths(tbrt_link *from, tbrt_link *to, const uint8_t *msg, uint8_t *buf,
                       size_t n, uint64_t idx)
{
    /* the receiver's look while it waited: drained strides go back to the
     * device there, off the path (a two-process receiver looks many times) */
    for (int k = 0; k < 100 && tbrt_link_progress(to) > 0; k++)
        ;
    if (tbrt_link_readable(to))
        bench_die("recv: something came before it was sent", to);
    cost_send(from, msg, n);
    while (tbrt_link_inflight(from) > 0)
        if (tbrt_link_progress(from) < 0)
            bench_die("send completion", from);
    if (cost_recv(to, buf, n) != (intptr_t)n)
        bench_die("recv: not all of it at once", to);
    bench_check(buf, msg, 0, n, idx);
}

static void pingpong(struct pair *p, uint8_t *msg, uint8_t *buf, size_t n, long iters)
{
    for (long i = 0; i < iters; i++) {
        bench_stamp(msg, n, (uint64_t)i);
        pass(p->a, p->b, msg, buf, n, (uint64_t)i);
        pass(p->b, p->a, msg, buf, n, (uint64_t)i);
    }
}

__attribute__((noinline)) void cost_pingpong(struct pair *p, uint8_t *msg, uint8_t *buf,
                                             size_t n, long iters)
{
    pingpong(p, msg, buf, n, iters);
}

__attribute__((noinline)) void cost_idle(struct pair *p, uint8_t *buf, long iters)
{
    for (long i = 0; i < iters; i++)
        if (tbrt_link_progress(p->b) != 0 || tbrt_link_recv(p->b, buf, 1) != -EAGAIN)
            bench_die("idle: the link was not idle", p->b);
}

__attribute__((noinline)) struct pair cost_setup(int ls, const char *dev, const char *pers)
{
    return pair_make(ls, dev, pers);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr,
                "usage: tbrt-cost DEVICE PERSONALITY pingpong|paths|idle|setup SIZE ITERS "
                "[LINKS]\n");
        return 2;
    }
    const char *dev = argv[1], *pers = argv[2], *mode = argv[3];
    size_t n = strtoull(argv[4], NULL, 0);
    long iters = strtol(argv[5], NULL, 0);
    int links = argc > 6 ? atoi(argv[6]) : 1;
    if (links < 1 || links > MAX_LINKS) {
        fprintf(stderr, "tbrt-cost: LINKS 1..%d\n", MAX_LINKS);
        return 2;
    }
    int ls = bench_listen(&listen_port);
    static struct pair ps[MAX_LINKS];
    for (int i = 0; i < links - 1; i++)
        ps[i] = pair_make(ls, dev, pers);
    if (strcmp(mode, "setup") == 0) {
        ps[links - 1] = cost_setup(ls, dev, pers);
        printf("links %d\n", links);
    } else {
        ps[links - 1] = pair_make(ls, dev, pers);
        uint8_t *msg = malloc(n + 8), *buf = malloc(n + 8);
        bench_fill(msg, n);
        /* untimed warm-up: first touches of the rings are set-up */
        pingpong(&ps[links - 1], msg, buf, n, 64);
        if (strcmp(mode, "idle") == 0) {
            /* the warm-up's last completions are not part of a look (a look
             * may leave the CQ for a later one while eager frames come:
             * 8 empty looks in a row on both ends) */
            for (int k = 0, quiet = 0; k < 1000 && quiet < 8; k++) {
                int na = tbrt_link_progress(ps[links - 1].a);
                int nb = tbrt_link_progress(ps[links - 1].b);
                quiet = na == 0 && nb == 0 ? quiet + 1 : 0;
            }
            cost_idle(&ps[links - 1], buf, iters);
            printf("looks %ld\nlinks %d\n", iters, links);
        } else if (strcmp(mode, "paths") == 0) {
            for (long i = 0; i < iters; i++) {
                bench_stamp(msg, n, (uint64_t)i);
                pass_paths(ps[links - 1].a, ps[links - 1].b, msg, buf, n, (uint64_t)i);
                pass_paths(ps[links - 1].b, ps[links - 1].a, msg, buf, n, (uint64_t)i);
            }
            printf("round_trips %ld\nlinks %d\n", iters, links);
        } else {
            cost_pingpong(&ps[links - 1], msg, buf, n, iters);
            printf("round_trips %ld\nlinks %d\n", iters, links);
        }
        free(msg);
        free(buf);
    }
    for (int i = 0; i < links; i++) {
        tbrt_link_close(ps[i].a);
        tbrt_link_close(ps[i].b);
        tbrt_link_free(ps[i].a);
        tbrt_link_free(ps[i].b);
    }
    close(ls);
    return 0;
}
