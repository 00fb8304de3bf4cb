/* tbrt_line.c - the floor under every small-message latency of `make
 * bench`: what a cache line takes to go from one CPU to the other here, and
 * back, measured in the same run as the transports.
 *
 *   tbrt-line ITERS    -> "line_oneway X us"
 *
 * Two processes (fork) share two cache lines. Each writes its own line and
 * spins reading the other's, as a shared-memory FIFO's writer and reader
 * do (ucx_perftest's sm transport, tbrt's eager slots): a one-way is the
 * writer taking the line from the reader that holds it, then the reader
 * taking it back to see the new value. The figure is the median of the mean
 * one-ways of batches of 1000 round trips (ITERS of them in all, after an
 * untimed tenth), so a batch the host interrupted counts as one batch.
 * On a VM it moves with where the host puts the two vCPUs (0.08-0.3 us
 * here): the transports' latencies divided by it compare runs taken at
 * different times. A peer that stops answering ends the run after 10 s. */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define BATCH 1000
#define STALL_S 10.0

struct lines {
    _Alignas(64) _Atomic uint64_t ping;     /* written by the parent */
    _Alignas(64) _Atomic uint64_t pong;     /* written by the child */
};

/* Spin until *w == v; false after STALL_S (the clock read every 2^16 looks). */
static int wait_for(_Atomic uint64_t *w, uint64_t v)
{
    double t0 = 0;
    for (uint32_t n = 1;; n++) {
        if (atomic_load_explicit(w, memory_order_acquire) == v)
            return 1;
        if ((n & 0xffff) == 0) {
            double t = bench_now();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > STALL_S)
                return 0;
        }
    }
}

int main(int argc, char **argv)
{
    long iters = argc == 2 ? strtol(argv[1], NULL, 0) : 0;
    if (iters < BATCH) {
        fprintf(stderr, "usage: tbrt-line ITERS (>= %d)\n", BATCH);
        return 2;
    }
    struct lines *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (l == MAP_FAILED)
        bench_die("mmap", NULL);
    long warm = iters / 10, total = warm + iters;
    pid_t child = fork();
    if (child < 0)
        bench_die("fork", NULL);
    if (child == 0) {
        for (uint64_t i = 1; i <= (uint64_t)total; i++) {
            if (!wait_for(&l->ping, i))
                _exit(1);
            atomic_store_explicit(&l->pong, i, memory_order_release);
        }
        _exit(0);
    }
    int nb = (int)(iters / BATCH), b = 0;
    double *batch = malloc((size_t)nb * sizeof *batch), t0 = 0;
    if (!batch)
        bench_die("malloc", NULL);
    for (uint64_t i = 1; i <= (uint64_t)total; i++) {
        if (i == (uint64_t)warm + 1)
            t0 = bench_now();
        atomic_store_explicit(&l->ping, i, memory_order_release);
        if (!wait_for(&l->pong, i)) {
            kill(child, SIGKILL);
            fprintf(stderr, "tbrt-line: the other process stopped answering (round trip %llu)\n",
                    (unsigned long long)i);
            return 1;
        }
        if (i > (uint64_t)warm && (i - (uint64_t)warm) % BATCH == 0 && b < nb) {
            double t = bench_now();
            batch[b++] = (t - t0) / (2.0 * BATCH);
            t0 = t;
        }
    }
    int st = 0;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "tbrt-line: the other process failed\n");
        return 1;
    }
    printf("line_oneway %.4f us\n", bench_median(batch, b) * 1e6);
    free(batch);
    return 0;
}
