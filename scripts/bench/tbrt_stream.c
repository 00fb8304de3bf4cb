/* tbrt_stream.c - streaming through a link two ways, for `make bench`: the
 * copying calls (send_all / recv_all into the caller's buffer) against the
 * zero-copy views (send_view + commit, recv_view + release), the same
 * program, the same messages, every byte checked either way.
 *
 *   tbrt-stream DEVICE PERSONALITY copy|view SIZE ITERS   -> "stream_<mode>_<size> X GB/s"
 *
 * The parent sends ITERS messages of SIZE bytes (no flush between them, so
 * they coalesce into strides as a stream does) and measures until the
 * child's 1-byte ack; the child receives and checks each message against
 * the pattern stamped with its index (bench_pattern.h). The sender's work
 * is the same in both modes (the message is copied from the same source,
 * into the ring either by send or through the view); the receiver checks
 * in place with views, after a copy out without. A short untimed warm-up
 * goes first.
 *
 * The check computes the pattern rather than comparing with a reference
 * copy: it reads the message alone, as a consumer of the stream would. A
 * memcmp with a reference read 8 MiB per 4 MiB message, and on the copying
 * path, whose receiver also copies out, that made the receiver the slower
 * end: the figure was the check's (tcp 4 MiB +13%, soft copies 4 MiB +43%
 * without it, interleaved runs). The Lua twin (stream.lua) calls the same
 * check.
 *
 * The sender makes its source after the fork, as a program of its own
 * would: a pattern made before it stays one set of physical pages
 * (copy-on-write), one copy in the shared cache for both ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define WARM 8

static void send_msg(tbrt_link *l, const uint8_t *want, size_t n, int view)
{
    if (!view) {
        if (tbrt_link_send_all(l, want, n, BENCH_TIMEOUT) != (intptr_t)n)
            bench_die("send", l);
        return;
    }
    for (size_t off = 0; off < n;) {
        uint8_t *p;
        intptr_t got = tbrt_link_send_view_wait(l, n - off, &p, BENCH_TIMEOUT);
        if (got <= 0)
            bench_die("send_view", l);
        memcpy(p, want + off, (size_t)got);
        if (tbrt_link_commit(l, (size_t)got))
            bench_die("commit", l);
        off += (size_t)got;
    }
}

static void recv_msg(tbrt_link *l, uint8_t *buf, size_t n, uint64_t idx, int view)
{
    if (!view) {
        if (tbrt_link_recv_all(l, buf, n, BENCH_TIMEOUT) != (intptr_t)n)
            bench_die("recv", l);
        bench_check_span(buf, 0, n, idx);
        return;
    }
    for (size_t off = 0; off < n;) {
        const uint8_t *p;
        intptr_t got = tbrt_link_recv_view_wait(l, &p, BENCH_TIMEOUT);
        if (got <= 0)
            bench_die("recv_view", l);
        size_t take = (size_t)got < n - off ? (size_t)got : n - off;
        bench_check_span(p, off, take, idx);
        if (tbrt_link_release(l, take))
            bench_die("release", l);
        off += take;
    }
}

static void ack(tbrt_link *l)
{
    uint8_t b = 1;
    if (tbrt_link_send_all(l, &b, 1, BENCH_TIMEOUT) != 1)
        bench_die("ack", l);
    bench_flush(l);
}

static void wait_ack(tbrt_link *l)
{
    uint8_t b;
    bench_flush(l);
    if (tbrt_link_recv_all(l, &b, 1, BENCH_TIMEOUT) != 1)
        bench_die("wait for the ack", l);
}

int main(int argc, char **argv)
{
    if (argc != 6 || (strcmp(argv[3], "copy") && strcmp(argv[3], "view"))) {
        fprintf(stderr, "usage: tbrt-stream DEVICE PERSONALITY copy|view SIZE ITERS\n");
        return 2;
    }
    const char *dev = argv[1], *pers = argv[2];
    int view = strcmp(argv[3], "view") == 0;
    size_t n = strtoull(argv[4], NULL, 0);
    long iters = strtol(argv[5], NULL, 0);
    if (n == 0 || iters <= 0) {
        fprintf(stderr, "tbrt-stream: SIZE and ITERS must be > 0\n");
        return 2;
    }
    int port = 0, ls = bench_listen(&port);
    pid_t child = fork();
    if (child < 0)
        bench_die("fork", NULL);
    /* the sender's source; the receiver's buffer (copies) */
    uint8_t *want = child ? malloc(n) : NULL, *buf = child == 0 ? malloc(n) : NULL;
    if (child ? !want : !buf)
        bench_die("malloc", NULL);
    if (child == 0) {
        memset(buf, 0, n);
        tbrt_link *l = bench_link(bench_accept(ls), dev, pers);
        close(ls);
        for (long i = 0; i < WARM; i++) {
            recv_msg(l, buf, n, (uint64_t)i, view);
        }
        ack(l);
        for (long i = 0; i < iters; i++) {
            recv_msg(l, buf, n, (uint64_t)i, view);
        }
        ack(l);
        if (getenv("TBRT_BENCH_STATS")) {
            tbrt_link_stats st;
            tbrt_link_stats_get(l, &st);
            fprintf(stderr, "# receiver: %llu frames, %llu completions, %llu spins, %llu "
                    "sleeps, %llu eagain\n", (unsigned long long)st.frames_recv,
                    (unsigned long long)st.completions, (unsigned long long)st.spins,
                    (unsigned long long)st.sleeps, (unsigned long long)st.eagain);
        }
        tbrt_link_close(l);
        tbrt_link_free(l);
        _exit(0);
    }
    close(ls);
    bench_fill(want, n);
    tbrt_link *l = bench_link(bench_connect(port), dev, pers);
    for (long i = 0; i < WARM; i++) {
        bench_stamp(want, n, (uint64_t)i);
        send_msg(l, want, n, view);
    }
    wait_ack(l);
    double t0 = bench_now();
    for (long i = 0; i < iters; i++) {
        bench_stamp(want, n, (uint64_t)i);
        send_msg(l, want, n, view);
    }
    wait_ack(l);
    double dt = bench_now() - t0;
    printf("stream_%s_%zu %.3f GB/s\n", argv[3], n, (double)n * (double)iters / dt / 1e9);
    if (getenv("TBRT_BENCH_STATS")) {
        tbrt_link_stats st;
        tbrt_link_stats_get(l, &st);
        fprintf(stderr, "# sender: %llu frames, %llu completions, %llu spins, %llu sleeps, "
                "%llu eagain\n", (unsigned long long)st.frames_sent,
                (unsigned long long)st.completions, (unsigned long long)st.spins,
                (unsigned long long)st.sleeps, (unsigned long long)st.eagain);
    }
    tbrt_link_close(l);
    tbrt_link_free(l);
    int st;
    waitpid(child, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
