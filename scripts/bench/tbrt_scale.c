/* tbrt_scale.c - many links, for `make bench`: what one more link costs.
 *
 *   tbrt-scale DEVICE PERSONALITY links N SIZE ITERS
 *       N links between two processes (fork). Prints one line of key=value:
 *       setup_ms (per link: bootstrap TCP, probe, caps, activate, both ends),
 *       rss_kib / vsz_kib (per link, this process, after traffic touched the
 *       rings), bw (GB/s, all N links streaming SIZE-byte messages at once,
 *       ITERS in all, one thread per process driving every link without
 *       blocking), lat_us / lat_max_us (8 B one-way ping-pong on each link
 *       in turn while the others stay open, its median round trip: the
 *       median link and the worst one).
 *   tbrt-scale DEVICE PERSONALITY ring P SIZE ITERS
 *       P processes (P even) in a ring, each with a link to the next: bw
 *       (GB/s, all of them streaming ITERS messages to the next at once,
 *       summed) and lat_us (an 8 B token passed around, per hop). With
 *       TBRT_BENCH_STATS set, each member also says (stderr) how long its
 *       timed stream took and what its waits did there, and what its waits
 *       for the token did in the timed rounds: sleeps, yields to fellow
 *       waiters, CPU moves, looks, and the wake-ups its passes cost.
 *
 * Every message is checked byte for byte; every wait is bounded. A loop
 * that drives many links does look at each link in turn (its own O(n), as
 * any program serving n sockets from one thread): what must stay flat is
 * the cost inside one call on one link, which lat_us shows. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define LAT_ROUNDS 200
#define LAT_WARM 20             /* the ring's untimed rounds first */
#define MAX_LINKS 256

/* One direction of a message stream on one link, driven without blocking. */
struct flow {
    tbrt_link *l;
    uint8_t *buf;               /* receiving: where the message goes */
    size_t off;                 /* bytes of the current message done */
    long done, total;           /* messages */
    bool unflushed;             /* sending: the last message's stride not yet posted */
};

/* Nothing moved on any link for the links' spin window: arm them all and
 * sleep on their fds, as long as the links allow (tbrt_link_sleep_max:
 * sends in flight on the soft device move only when called) and 1 ms at
 * most (the caller's deadline is looked at in between). */
static void wait_links(tbrt_link **ls, int n)
{
    struct pollfd p[2 * MAX_LINKS];
    int np = 0;
    double nap = 1e-3;
    for (int i = 0; i < n; i++) {
        int rc = tbrt_link_arm(ls[i]);
        if (rc < 0)
            bench_die("arm", ls[i]);
        if (rc > 0)
            return;
        double cap = tbrt_link_sleep_max(ls[i]);
        if (cap >= 0 && cap < nap)
            nap = cap;
        int fds[2], k = tbrt_link_fds(ls[i], fds, 2);
        for (int j = 0; j < k; j++)
            p[np++] = (struct pollfd){.fd = fds[j], .events = POLLIN};
    }
    poll(p, (nfds_t)np, (int)(nap * 1e3));
}

/* One turn of sending on f: true when it moved bytes. */
static bool send_turn(struct flow *f, const uint8_t *want, size_t n)
{
    if (f->done == f->total) {
        /* the last stride must go (the peer waits for it; in a ring, for
         * it before it sends us the rest of ours): its flush again, until
         * the ring has room */
        if (!f->unflushed)
            return false;
        int rc = tbrt_link_flush(f->l);
        if (rc && rc != -EAGAIN)
            bench_die("flush", f->l);
        f->unflushed = rc != 0;
        return rc == 0 || tbrt_link_progress(f->l) > 0;
    }
    if (f->off == 0)
        bench_stamp((uint8_t *)want, n, (uint64_t)f->done);
    intptr_t r = tbrt_link_send(f->l, want + f->off, n - f->off);
    if (r == -EAGAIN)
        return tbrt_link_progress(f->l) > 0;
    if (r < 0)
        bench_die("send", f->l);
    f->off += (size_t)r;
    if (f->off == n) {
        f->off = 0;
        /* the last one: post the stride it ends in (a peer may wait for it;
         * no room now: the next turns try again) */
        int rc = ++f->done == f->total ? tbrt_link_flush(f->l) : 0;
        if (rc && rc != -EAGAIN)
            bench_die("flush", f->l);
        f->unflushed = rc == -EAGAIN;
    }
    return true;
}

/* One turn of receiving on f, checking each whole message. */
static bool recv_turn(struct flow *f, uint8_t *want, size_t n)
{
    if (f->done == f->total)
        return false;
    intptr_t r = tbrt_link_recv(f->l, f->buf + f->off, n - f->off);
    if (r == -EAGAIN)
        return false;
    if (r <= 0)
        bench_die("recv", f->l);
    f->off += (size_t)r;
    if (f->off == n) {
        bench_stamp(want, n, (uint64_t)f->done);
        bench_check(f->buf, want, 0, n, (uint64_t)f->done);
        f->off = 0;
        f->done++;
    }
    return true;
}

/* Drive sends on s[0..ns) and receives on r[0..nr) until all are done. */
static void stream(struct flow *s, int ns, struct flow *r, int nr, uint8_t *want_s,
                   uint8_t *want_r, size_t n, tbrt_link **all, int nall)
{
    double deadline = bench_now() + BENCH_TIMEOUT, since = 0;
    unsigned idle = 0, turn = 0;
    for (;;) {
        bool moved = false, left = false;
        for (int i = 0; i < ns; i++) {
            moved |= send_turn(&s[i], want_s, n);
            left |= s[i].done < s[i].total;
        }
        for (int i = 0; i < nr; i++) {
            moved |= recv_turn(&r[i], want_r, n);
            left |= r[i].done < r[i].total;
        }
        if (!left)
            break;
        if (moved) {
            idle = 0;
            since = 0;
            continue;
        }
        /* as the library's own waits: the clock every 16th idle turn, and
         * a link's word on how to pause (tbrt_link_idle: it yields the CPU
         * to a peer or another tbrt waiter sharing it) and how long to keep
         * looking before sleeping; one link a turn, in turn */
        if ((++idle & 15) != 0)
            continue;
        double t = bench_now();
        if (t > deadline)
            bench_die("stream: no progress within the bound", all[0]);
        if (!since)
            since = t;
        if (t - since < tbrt_link_idle(all[turn++ % (unsigned)nall]))
            continue;
        wait_links(all, nall);
        since = 0;
    }
    for (int i = 0; i < ns; i++)   /* what a send accepted last must leave */
        bench_flush(s[i].l);
}

static void ack_send(tbrt_link *l)
{
    uint8_t b = 1;
    if (tbrt_link_send_all(l, &b, 1, BENCH_TIMEOUT) != 1)
        bench_die("ack", l);
    bench_flush(l);
}

static void ack_wait(tbrt_link *l)
{
    uint8_t b;
    if (tbrt_link_recv_all(l, &b, 1, BENCH_TIMEOUT) != 1)
        bench_die("wait for the ack", l);
}

/* 8 B round trips on l; one-way us, the median round trip (a busy machine
 * preempts some; the median is what the link costs). The answering side
 * echoes. */
static double pingpong(tbrt_link *l, int rounds, bool answer)
{
    uint8_t m[8] = {0}, back[8];
    double rtt[LAT_ROUNDS];
    for (int i = 0; i < rounds; i++) {
        double t0 = bench_now();
        if (!answer) {
            memcpy(m, &i, sizeof i);
            if (tbrt_link_send_all(l, m, 8, BENCH_TIMEOUT) != 8)
                bench_die("ping", l);
            bench_flush(l);
        }
        if (tbrt_link_recv_all(l, back, 8, BENCH_TIMEOUT) != 8)
            bench_die("pong", l);
        if (answer) {
            if (tbrt_link_send_all(l, back, 8, BENCH_TIMEOUT) != 8)
                bench_die("pong", l);
            bench_flush(l);
        } else if (memcmp(m, back, 8)) {
            fprintf(stderr, "tbrt-scale: round %d came back wrong\n", i);
            exit(1);
        }
        rtt[i] = bench_now() - t0;
    }
    return bench_median(rtt, rounds) / 2 * 1e6;
}

/* ---- N links between two processes ------------------------------------------- */

static int run_links(const char *dev, const char *pers, int nl, size_t n, long iters)
{
    int port = 0, ls = bench_listen(&port);
    long per = iters / nl > 2 ? iters / nl : 2;
    uint8_t *want = malloc(n);
    bench_fill(want, n);
    tbrt_link *links[MAX_LINKS];
    struct flow f[MAX_LINKS];
    pid_t child = fork();
    bool parent = child != 0;
    if (!parent)
        close(ls);
    long rss0, vsz0, rss1, vsz1;
    bench_mem_kib(&rss0, &vsz0);
    double t0 = bench_now();
    for (int i = 0; i < nl; i++)
        links[i] = bench_link(parent ? bench_accept(ls) : bench_connect(port), dev, pers);
    double setup = bench_now() - t0, stream_s = 0;
    if (parent)
        close(ls);
    for (int i = 0; i < nl; i++) {
        f[i] = (struct flow){.l = links[i], .total = per};
        if (!parent && !(f[i].buf = malloc(n)))
            bench_die("malloc", NULL);
    }
    /* warm-up: twice the ring's worth a link (the first touches of the
     * rings' pages, both ends', are set-up), then the timed run */
    tbrt_link_info info;
    tbrt_link_info_get(links[0], &info);
    long warm = 2 * ((long)info.nbuf * info.stride / (long)n + 1);
    for (int round = 0; round < 2; round++) {
        long total = round == 0 ? warm : per;
        for (int i = 0; i < nl; i++)
            f[i].done = 0, f[i].off = 0, f[i].total = total;
        double ts = bench_now();
        if (parent) {
            stream(f, nl, NULL, 0, want, NULL, n, links, nl);
            ack_wait(links[0]);
        } else {
            uint8_t *w = malloc(n);
            bench_fill(w, n);
            stream(NULL, 0, f, nl, NULL, w, n, links, nl);
            free(w);
            ack_send(links[0]);
        }
        if (round == 0)
            bench_mem_kib(&rss1, &vsz1);
        else
            stream_s = bench_now() - ts;
    }
    double lat[MAX_LINKS];
    for (int i = 0; i < nl; i++)
        lat[i] = pingpong(links[i], LAT_ROUNDS, !parent);
    for (int i = 0; i < nl; i++) {
        tbrt_link_close(links[i]);
        tbrt_link_free(links[i]);
    }
    if (!parent)
        _exit(0);
    double worst = 0;
    for (int i = 0; i < nl; i++)
        worst = lat[i] > worst ? lat[i] : worst;
    printf("links=%d setup_ms=%.3f rss_kib=%.0f vsz_kib=%.0f bw=%.3f lat_us=%.3f "
           "lat_max_us=%.3f\n", nl, setup / nl * 1e3, (double)(rss1 - rss0) / nl,
           (double)(vsz1 - vsz0) / nl, (double)n * (double)per * nl / stream_s / 1e9,
           bench_median(lat, nl), worst);
    int st;
    waitpid(child, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* ---- P processes in a ring ------------------------------------------------------- */

/* A token of n bytes (n <= 8) once around the ring: process 0 starts it,
 * each other one passes it on when it comes; it carries idx (its first n
 * bytes, little-endian), which every process checks. */
static void pass_token(tbrt_link *out, tbrt_link *in, int me, size_t n, uint64_t idx)
{
    uint8_t m[8], want[8];
    for (int k = 0; k < 8; k++)
        want[k] = (uint8_t)(idx >> (8 * k));
    if (me == 0) {
        if (tbrt_link_send_all(out, want, n, BENCH_TIMEOUT) != (intptr_t)n)
            bench_die("token", out);
        bench_flush(out);
    }
    if (tbrt_link_recv_all(in, m, n, BENCH_TIMEOUT) != (intptr_t)n)
        bench_die("token", in);
    bench_check(m, want, 0, n, idx);
    if (me != 0) {
        if (tbrt_link_send_all(out, m, n, BENCH_TIMEOUT) != (intptr_t)n)
            bench_die("token", out);
        bench_flush(out);
    }
}

/* TBRT_BENCH_STATS: what one member's timed stream did (stderr): its time,
 * and how its waits went, both links together */
static void stream_stats(int me, double secs, const tbrt_link_stats *i0, tbrt_link *in,
                         const tbrt_link_stats *o0, tbrt_link *out)
{
    tbrt_link_stats i1, o1;
    tbrt_link_stats_get(in, &i1);
    tbrt_link_stats_get(out, &o1);
#define D(f) (unsigned long long)((i1.f - i0->f) + (o1.f - o0->f))
    fprintf(stderr, "# ring member %d, stream: %.1f ms, %llu sleeps, %llu fellow yields, "
            "%llu cpu moves, %llu spins, %llu completions\n", me, secs * 1e3, D(sleeps),
            D(fellow_yields), D(cpu_moves), D(spins), D(completions));
#undef D
}

static int run_ring(const char *dev, const char *pers, int np, size_t n, long iters)
{
    if (np < 2 || np % 2 || np > 64) {
        fprintf(stderr, "tbrt-scale: ring needs an even number of processes, 2..64\n");
        return 2;
    }
    int ports[64], lss[64], res[2];
    for (int i = 0; i < np; i++) {
        ports[i] = 0;
        lss[i] = bench_listen(&ports[i]);
    }
    if (pipe(res))
        bench_die("pipe", NULL);
    int me = 0;
    pid_t kids[64];
    for (int i = 1; i < np; i++)
        if ((kids[i] = fork()) == 0) {
            me = i;
            break;
        }
    int next = (me + 1) % np;
    /* even ones make their outgoing link first, odd ones their incoming one,
     * so every caps exchange has both ends at it */
    tbrt_link *out = NULL, *in = NULL;
    for (int step = 0; step < 2; step++) {
        if ((step == 0) == (me % 2 == 0))
            out = bench_link(bench_connect(ports[next]), dev, pers);
        else
            in = bench_link(bench_accept(lss[me]), dev, pers);
    }
    for (int i = 0; i < np; i++)
        close(lss[i]);
    tbrt_link *both[2] = {out, in};
    uint8_t *want_s = malloc(n), *want_r = malloc(n);
    bench_fill(want_s, n);
    bench_fill(want_r, n);
    struct flow s = {.l = out}, r = {.l = in, .buf = malloc(n)};
    double stream_s = 0, hop_us = 0;
    for (int round = 0; round < 2; round++) {
        /* a token around the ring first: everyone set up, start together */
        pass_token(out, in, me, 1, (uint64_t)round);
        s.done = r.done = 0;
        s.off = r.off = 0;
        s.total = r.total = round == 0 ? 2 : iters;
        tbrt_link_stats i0, o0;
        tbrt_link_stats_get(in, &i0);
        tbrt_link_stats_get(out, &o0);
        double ts = bench_now();
        stream(&s, 1, &r, 1, want_s, want_r, n, both, 2);
        stream_s = bench_now() - ts;
        if (round == 1 && getenv("TBRT_BENCH_STATS"))
            stream_stats(me, stream_s, &i0, in, &o0, out);
    }
    /* latency: an 8 B token around the ring LAT_ROUNDS times, after
     * LAT_WARM untimed rounds (the first hops pay for cold paths) and
     * before one more: a process that left the loop would close its links
     * and exit on the CPUs the timed hops still need (measured: the last
     * round's hops 3-5 ms each, the whole figure up to 3x the median hop) */
    for (int i = 0; i < LAT_WARM; i++)
        pass_token(out, in, me, 8, (uint64_t)i);
    tbrt_link_stats in0, out0;
    tbrt_link_stats_get(in, &in0);
    tbrt_link_stats_get(out, &out0);
    double ts = bench_now();
    for (int i = 0; i < LAT_ROUNDS; i++)
        pass_token(out, in, me, 8, (uint64_t)(LAT_WARM + i));
    hop_us = (bench_now() - ts) / LAT_ROUNDS / np * 1e6;
    pass_token(out, in, me, 8, (uint64_t)(LAT_WARM + LAT_ROUNDS));
    if (getenv("TBRT_BENCH_STATS")) {
        /* what the timed rounds' waits did, per process (stderr) */
        tbrt_link_stats i1, o1;
        tbrt_link_stats_get(in, &i1);
        tbrt_link_stats_get(out, &o1);
        fprintf(stderr, "# ring member %d, %d timed rounds: waiting for the token %llu sleeps, "
                "%llu fellow yields, %llu cpu moves, %llu spins; passing it %llu eager sends, "
                "%llu wakes\n", me, LAT_ROUNDS,
                (unsigned long long)(i1.sleeps - in0.sleeps),
                (unsigned long long)(i1.fellow_yields - in0.fellow_yields),
                (unsigned long long)(i1.cpu_moves - in0.cpu_moves),
                (unsigned long long)(i1.spins - in0.spins),
                (unsigned long long)(o1.eager_sends - out0.eager_sends),
                (unsigned long long)(o1.eager_wakes - out0.eager_wakes));
    }
    double mine[2] = {stream_s, hop_us};
    tbrt_link_close(out);
    tbrt_link_close(in);
    tbrt_link_free(out);
    tbrt_link_free(in);
    if (me != 0) {
        if (write(res[1], mine, sizeof mine) != (ssize_t)sizeof mine)
            bench_die("result pipe", NULL);
        _exit(0);
    }
    double slowest = stream_s;
    int bad = 0;
    for (int i = 1; i < np; i++) {
        double theirs[2];
        if (read(res[0], theirs, sizeof theirs) != (ssize_t)sizeof theirs)
            bad = 1;
        else if (theirs[0] > slowest)
            slowest = theirs[0];
    }
    for (int i = 1; i < np; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    printf("procs=%d bw=%.3f lat_us=%.3f\n", np, (double)n * (double)iters * np / slowest / 1e9,
           hop_us);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 7 || (strcmp(argv[3], "links") && strcmp(argv[3], "ring"))) {
        fprintf(stderr, "usage: tbrt-scale DEVICE PERSONALITY links|ring N SIZE ITERS\n");
        return 2;
    }
    int count = atoi(argv[4]);
    size_t n = strtoull(argv[5], NULL, 0);
    long iters = strtol(argv[6], NULL, 0);
    if (count < 1 || count > MAX_LINKS || n == 0 || iters < 1) {
        fprintf(stderr, "tbrt-scale: N must be 1..%d, SIZE and ITERS > 0\n", MAX_LINKS);
        return 2;
    }
    if (strcmp(argv[3], "links") == 0)
        return run_links(argv[1], argv[2], count, n, iters);
    return run_ring(argv[1], argv[2], count, n, iters);
}
