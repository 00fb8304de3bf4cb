/* tbrt_bench.c - the C-driven side of `make bench`: one link between two
 * processes (this program again, fork + exec), driven by the blocking C API
 * alone, no Lua anywhere.
 *
 *   tbrt-bench DEVICE PERSONALITY lat SIZE ITERS    one-way latency, us: the median
 *                                                   (typical) half round trip, as
 *                                                   ucx_perftest's tag_lat figure, then
 *                                                   the mean (lat_mean_SIZE)
 *   tbrt-bench DEVICE PERSONALITY split SIZE ITERS  where a round trip's time goes (SIZE
 *                                                   >= 16; medians, us): the sender's send
 *                                                   + flush (split_send), its send's start
 *                                                   to the peer's recv returning
 *                                                   (split_there: the bytes' flight and the
 *                                                   reader's part), the peer's recv
 *                                                   returning to ours (split_back: its
 *                                                   turn, a whole one-way), the round trip
 *                                                   (split_rtt). CLOCK_MONOTONIC stamps
 *                                                   carried in the messages, one clock for
 *                                                   both processes; each stamp costs ~20 ns
 *                                                   of its segment
 *   tbrt-bench DEVICE PERSONALITY bw SIZE ITERS     streaming bandwidth, GB/s
 *   ... bw-reg / lat-reg                            the same from and into buffers
 *                                                   registered with the link
 *                                                   (tbrt_link_mem_reg: large sends
 *                                                   go direct, read by the peer)
 *   ... bw-fresh / bw-reg-fresh                     bw / bw-reg with every cache line
 *                                                   of the message written before its
 *                                                   send (the same bytes again): data a
 *                                                   sender just made, which the
 *                                                   reader's cache does not hold. The
 *                                                   other modes send one buffer again
 *                                                   and again, as ucx_perftest does,
 *                                                   and a reader that reads it in place
 *                                                   (bw-reg's direct READs) finds most
 *                                                   of it in its own cache already
 *
 * Prints "name value unit" lines. The child (tbrt-bench --peer ... PORT)
 * connects and answers (echo for lat; reads everything and acks for bw); the
 * parent accepts and measures. Both
 * ends are set up by tbrt_link_listen/accept/connect, as any C program's. Both
 * check the data: bytes are a pattern whose every word differs (a piece at
 * the wrong offset shows), each message stamped with its index (bw: each
 * piece as recv_some hands it over, while it is in the cache).
 * A short untimed warm-up goes first (page faults and first touches of the
 * rings are set-up, not transfer). */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "tbrt.h"

/* Messages of the untimed warm-up stream. */
#define WARM 8

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void opts_for(tbrt_link_opts *o, const char *dev, const char *pers)
{
    tbrt_link_opts_init(o);
    o->device = dev;
    o->personality = pers && *pers && strcmp(pers, "-") ? pers : NULL;
    o->no_fallback = 1;          /* measure the device asked for, or fail */
}

static tbrt_link *ready_or_die(tbrt_link *l, const char *what, const tbrt_error *err)
{
    if (!l) {
        fprintf(stderr, "tbrt bench: %s: %s: %s\n", what, tbrt_errname(err->code), err->msg);
        exit(1);
    }
    return l;
}

/* -reg modes: both buffers registered with the link */
static void register_or_die(tbrt_link *l, const char *mode, uint8_t *want, uint8_t *buf,
                            size_t n)
{
    if (strstr(mode, "-reg") &&
        (tbrt_link_mem_reg(l, want, n + 8) || tbrt_link_mem_reg(l, buf, n + 8)))
        bench_die("mem_reg", l);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* (split: bytes 8..15 are a stamp, checked by the caller) */
static void check(const uint8_t *b, const uint8_t *want, size_t n, uint64_t idx, bool stamped)
{
    /* want carries idx in bytes 0..7; bench_check names the byte */
    size_t head = n < 8 ? n : 8, off = stamped ? 16 : head;
    bench_check(b, want, 0, head, idx);
    if (n > off)
        bench_check(b + off, want, off, n - off, idx);
}

/* bw: receive message idx and check each piece as it arrives, while it is
 * still in this CPU's cache, against the pattern computed (a consumer of a
 * stream reads what came; a second pass over a whole 4 MiB message after
 * its last byte came, and beside it 4 MiB of reference bytes, are two
 * streams from memory, which cost tcp's 4 MiB figure up to a third). Every
 * byte is checked. */
static void recv_checked(tbrt_link *l, uint8_t *buf, size_t n, uint64_t idx)
{
    size_t from = n >= 8 ? 8 : 0;       /* bytes 0..7: the index */
    for (size_t off = 0; off < n;) {
        intptr_t got = tbrt_link_recv_some(l, buf + off, n - off, 60);
        if (got <= 0)
            bench_die("peer recv", l);
        size_t a = off < from ? from : off, e = off + (size_t)got;
        if (e > a && !bench_pattern_holds(buf, a, e)) {
            fprintf(stderr, "tbrt bench: message %llu differs from the pattern in bytes "
                    "[%zu, %zu)\n", (unsigned long long)idx, a, e);
            exit(1);
        }
        off = e;
    }
    if (n >= 8 && memcmp(buf, &idx, 8) != 0) {
        fprintf(stderr, "tbrt bench: message %llu carries a wrong index\n", (unsigned long long)idx);
        exit(1);
    }
}

/* The answering end: echo (lat), or read everything and ack (bw). */
static void serve(tbrt_link *l, const char *mode, size_t n, long iters, uint8_t *want,
                  uint8_t *buf)
{
    bool is_bw = strncmp(mode, "bw", 2) == 0, split = strcmp(mode, "split") == 0;
    register_or_die(l, mode, want, buf, n);
    if (is_bw) {
        for (long i = 0; i < WARM; i++)
            if (tbrt_link_recv_all(l, buf, n, 60) != (intptr_t)n)
                bench_die("peer warm-up", l);
        uint8_t ack = 1;
        if (tbrt_link_send_all(l, &ack, 1, 60) != 1 || tbrt_link_flush_all(l, 60))
            bench_die("peer warm-up ack", l);
    }
    for (long i = 0; i < iters; i++) {
        uint64_t idx = (uint64_t)i;
        if (is_bw) {
            recv_checked(l, buf, n, idx);
            continue;
        }
        if (tbrt_link_recv_all(l, buf, n, 60) != (intptr_t)n)
            bench_die("peer recv", l);
        if (n >= 8)
            memcpy(want, &idx, 8);
        check(buf, want, n, idx, split);
        if (split) {            /* when our recv returned, for the sender's split */
            uint64_t t = now_ns();
            memcpy(buf + 8, &t, 8);
        }
        if (tbrt_link_send_all(l, buf, n, 60) != (intptr_t)n || tbrt_link_flush_all(l, 60))
            bench_die("peer send", l);
    }
    if (is_bw) {
        uint8_t ack = 1;
        if (tbrt_link_send_all(l, &ack, 1, 60) != 1 || tbrt_link_flush_all(l, 60))
            bench_die("peer ack", l);
    }
    tbrt_link_close(l);
    tbrt_link_free(l);
}

static double median_us(double *v, long m)
{
    qsort(v, (size_t)m, sizeof *v, cmp_double);
    return (m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2) / 1e3;
}

/* split: each round trip cut where the stamps fall (the first is untimed) */
static void split(tbrt_link *l, uint8_t *want, uint8_t *buf, size_t n, long iters)
{
    long m = iters - 1;
    double *seg = calloc((size_t)(4 * (m > 0 ? m : 1)), sizeof *seg);
    if (!seg)
        bench_die("split: the figures' memory", NULL);
    double *snd = seg, *there = seg + m, *back = seg + 2 * m, *rtt = seg + 3 * m;
    for (long i = 0; i < iters; i++) {
        uint64_t idx = (uint64_t)i, s0 = now_ns();
        memcpy(want, &idx, 8);
        memcpy(want + 8, &s0, 8);
        if (tbrt_link_send_all(l, want, n, 60) != (intptr_t)n || tbrt_link_flush_all(l, 60))
            bench_die("send", l);
        uint64_t s1 = now_ns();
        if (tbrt_link_recv_all(l, buf, n, 60) != (intptr_t)n)
            bench_die("recv", l);
        uint64_t s2 = now_ns(), p0;
        check(buf, want, n, idx, true);
        memcpy(&p0, buf + 8, 8);
        if (p0 < s0 || p0 > s2) {
            fprintf(stderr, "tbrt bench: message %llu: the peer's stamp %llu lies outside the "
                    "round trip [%llu, %llu]\n", (unsigned long long)idx, (unsigned long long)p0,
                    (unsigned long long)s0, (unsigned long long)s2);
            exit(1);
        }
        if (i == 0)
            continue;
        snd[i - 1] = (double)(s1 - s0);
        there[i - 1] = (double)(p0 - s0);
        back[i - 1] = (double)(s2 - p0);
        rtt[i - 1] = (double)(s2 - s0);
    }
    if (m > 0) {
        printf("split_send_%zu %.3f us\n", n, median_us(snd, m));
        printf("split_there_%zu %.3f us\n", n, median_us(there, m));
        printf("split_back_%zu %.3f us\n", n, median_us(back, m));
        printf("split_rtt_%zu %.3f us\n", n, median_us(rtt, m));
    }
    free(seg);
}

int main(int argc, char **argv)
{
    /* the answering end is this program again, started with exec as any
     * second process is (ucx_perftest's server is too): fork alone would
     * leave both ends on one CPU for the scheduler to part */
    bool peer = argc == 8 && strcmp(argv[1], "--peer") == 0;
    if (peer) {
        argv++;
        argc--;
    }
    if ((argc != 6 && !peer) ||
        (strcmp(argv[3], "split") == 0 && strtoull(argv[4], NULL, 0) < 16)) {
        fprintf(stderr, "usage: tbrt-bench DEVICE PERSONALITY lat|bw|lat-reg|bw-reg|bw-fresh|"
                        "bw-reg-fresh SIZE ITERS\n"
                        "       tbrt-bench DEVICE PERSONALITY split SIZE >= 16 ITERS\n");
        return 2;
    }
    const char *dev = argv[1], *pers = argv[2], *mode = argv[3];
    size_t n = strtoull(argv[4], NULL, 0);
    long iters = strtol(argv[5], NULL, 0);
    /* the helpers of tbrt.h set the link up: TCP, probe, caps exchange,
     * activation, each step bounded */
    tbrt_link_opts o;
    opts_for(&o, dev, pers);
    tbrt_error err;
    uint8_t *want = malloc(n + 8), *buf = malloc(n + 8);
    bench_fill(want, n);
    if (peer) {
        int port = atoi(argv[6]);
        serve(ready_or_die(tbrt_link_connect("127.0.0.1", port, &o, &err), "connect", &err),
              mode, n, iters, want, buf);
        return 0;
    }
    tbrt_listener *srv = tbrt_link_listen("127.0.0.1", 0, &o, &err);
    if (!srv)
        ready_or_die(NULL, "listen", &err);
    char portarg[16];
    snprintf(portarg, sizeof portarg, "%d", tbrt_listener_port(srv));
    pid_t child = fork();
    if (child == 0) {
        char *args[] = {argv[0], "--peer", argv[1], argv[2], argv[3], argv[4], argv[5], portarg,
                        NULL};
        execv("/proc/self/exe", args);
        perror("tbrt bench: exec");
        _exit(1);
    }
    tbrt_link *l = ready_or_die(tbrt_link_accept(srv, 60, &err), "accept", &err);
    tbrt_listener_close(srv);
    bool is_bw = strncmp(mode, "bw", 2) == 0;
    register_or_die(l, mode, want, buf, n);
    double t0 = 0, dt;
    if (strcmp(mode, "split") == 0) {
        split(l, want, buf, n, iters);
    } else if (!is_bw) {
        double *rtt = calloc((size_t)iters, sizeof *rtt), t1 = 0;
        for (long i = 0; i < iters; i++) {
            double ti = bench_now();
            if (i == 1)
                t0 = ti;
            if (i > 0)
                rtt[i - 1] = ti - t1;
            t1 = ti;
            uint64_t idx = (uint64_t)i;
            if (n >= 8)
                memcpy(want, &idx, 8);
            if (tbrt_link_send_all(l, want, n, 60) != (intptr_t)n || tbrt_link_flush_all(l, 60))
                bench_die("send", l);
            if (tbrt_link_recv_all(l, buf, n, 60) != (intptr_t)n)
                bench_die("recv", l);
            check(buf, want, n, idx, false);
        }
        double tn = bench_now();
        rtt[iters - 1] = tn - t1;
        dt = tn - t0;
        /* round trip i ends where i + 1 starts: the first (rtt[0]) is the untimed one */
        qsort(rtt + 1, (size_t)(iters - 1), sizeof *rtt, cmp_double);
        long m = iters - 1;
        double med = m % 2 ? rtt[1 + m / 2] : (rtt[m / 2] + rtt[1 + m / 2]) / 2;
        printf("lat_%zu %.3f us\n", n, med / 2 * 1e6);
        printf("lat_mean_%zu %.3f us\n", n, dt / (double)(iters - 1) / 2 * 1e6);
        free(rtt);
    } else {
        for (long i = 0; i < WARM; i++)
            if (tbrt_link_send_all(l, want, n, 60) != (intptr_t)n)
                bench_die("warm-up", l);
        uint8_t wack;
        if (tbrt_link_flush_all(l, 60) || tbrt_link_recv_all(l, &wack, 1, 60) != 1)
            bench_die("warm-up ack", l);
        t0 = bench_now();
        bool fresh = strstr(mode, "-fresh") != NULL;
        for (long i = 0; i < iters; i++) {
            uint64_t idx = (uint64_t)i;
            if (n >= 8)
                memcpy(want, &idx, 8);
            if (fresh) {        /* a store to each line: ours alone again */
                for (size_t off = 64; off < n; off += 64)
                    ((volatile uint8_t *)want)[off] = want[off];
                ((volatile uint8_t *)want)[n - 1] = want[n - 1];    /* the last, partial one */
            }
            if (tbrt_link_send_all(l, want, n, 60) != (intptr_t)n)
                bench_die("send", l);
        }
        if (tbrt_link_flush_all(l, 60))
            bench_die("flush", l);
        uint8_t ack;
        if (tbrt_link_recv_all(l, &ack, 1, 60) != 1)
            bench_die("ack", l);
        dt = bench_now() - t0;
        printf("bw_%zu %.3f GB/s\n", n, (double)n * (double)iters / dt / 1e9);
    }
    tbrt_link_close(l);
    tbrt_link_free(l);
    int st;
    waitpid(child, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
