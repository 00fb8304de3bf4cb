/* mpi_ring.c - the anchor of the bench's ring of processes: the same two
 * figures as `tbrt-scale ... ring` (scripts/bench/tbrt_scale.c), measured
 * through Open MPI's shared-memory transport instead of tbrt links, so that
 * a ring of more processes than CPUs has a figure beside it from an engine
 * clusters already run (its own waiting: spin, or yield when
 * oversubscribed).
 *
 *   mpicc -O2 -o build/mpi-ring scripts/bench/mpi_ring.c
 *   mpirun -np 8 [--oversubscribe] build/mpi-ring SIZE ITERS
 *       -> rank 0 prints "procs=8 bw=X lat_us=Y" (tbrt-scale's line)
 *
 * bw: every rank streams ITERS messages of SIZE bytes to the next while it
 * takes as many from the one before (nonblocking, a window of them in
 * flight, as tbrt-scale's stream does), all ranks' bytes over the slowest
 * rank's time. lat: an 8 B token once around the ring LAT_ROUNDS times,
 * after LAT_WARM untimed rounds, the time of one hop. Every message carries
 * its index and is compared with the pattern; a wrong one ends the run,
 * named. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAT_ROUNDS 200
#define LAT_WARM 20             /* untimed rounds first, as tbrt-scale's */
#define WINDOW 8

static void die(const char *what)
{
    fprintf(stderr, "mpi-ring: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* 8-byte words BASE + k * STEP (bench_common.c's bench_fill), word 0 the
 * message's index */
static void fill(uint8_t *b, size_t n, uint64_t idx)
{
    for (size_t k = 0; k * 8 < n; k++) {
        uint64_t w = k ? 0x6a09e667f3bcc909ull + k * 0x9e3779b97f4a7c15ull : idx;
        memcpy(b + k * 8, &w, n - k * 8 < 8 ? n - k * 8 : 8);
    }
}

static void check(const uint8_t *got, const uint8_t *want, size_t n, uint64_t idx)
{
    if (memcmp(got, &idx, n < 8 ? n : 8) != 0 || (n > 8 && memcmp(got + 8, want + 8, n - 8))) {
        char m[96];
        snprintf(m, sizeof m, "message %llu differs from the pattern", (unsigned long long)idx);
        die(m);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc != 3 || np < 2)
        die("usage: mpirun -np P mpi-ring SIZE ITERS (P >= 2)");
    size_t n = strtoull(argv[1], NULL, 0);
    long iters = strtol(argv[2], NULL, 0);
    if (n < 8 || n > (64u << 20) || iters <= 0)      /* WINDOW of them each way */
        die("SIZE must be 8 B .. 64 MiB and ITERS > 0");
    int next = (me + 1) % np, prev = (me + np - 1) % np;
    uint8_t *want = malloc(n), *out = malloc(n * WINDOW), *in = malloc(n * WINDOW);
    if (!want || !out || !in)
        die("out of memory");
    fill(want, n, 0);
    for (int w = 0; w < WINDOW; w++)
        memcpy(out + (size_t)w * n, want, n);

    /* bw: a warm-up of a window, then the timed stream */
    double slowest = 0;
    for (int round = 0; round < 2; round++) {
        long total = round == 0 ? WINDOW : iters;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long base = 0; base < total; base += WINDOW) {
            MPI_Request rq[2 * WINDOW];
            int k = 0;
            long m = total - base < WINDOW ? total - base : WINDOW;
            for (long i = 0; i < m; i++) {
                uint64_t idx = (uint64_t)(base + i);
                memcpy(out + (size_t)i * n, &idx, 8);
                MPI_Irecv(in + (size_t)i * n, (int)n, MPI_BYTE, prev, 1, MPI_COMM_WORLD, &rq[k++]);
                MPI_Isend(out + (size_t)i * n, (int)n, MPI_BYTE, next, 1, MPI_COMM_WORLD, &rq[k++]);
            }
            MPI_Waitall(k, rq, MPI_STATUSES_IGNORE);
            for (long i = 0; i < m; i++)
                check(in + (size_t)i * n, want, n, (uint64_t)(base + i));
        }
        double mine = MPI_Wtime() - t0;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    }

    /* lat: an 8 B token around the ring, timed after LAT_WARM rounds; the
     * barrier after keeps every rank in the loop until rank 0's clock
     * stopped (tbrt-scale passes the token once more) */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = 0;
    for (uint64_t r = 0; r < LAT_WARM + LAT_ROUNDS; r++) {
        if (r == LAT_WARM)
            t0 = MPI_Wtime();
        uint64_t tok = r, got;
        if (me == 0)
            MPI_Send(&tok, 8, MPI_BYTE, next, 2, MPI_COMM_WORLD);
        MPI_Recv(&got, 8, MPI_BYTE, prev, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (got != r)
            die("the token came back with a wrong value");
        if (me != 0)
            MPI_Send(&got, 8, MPI_BYTE, next, 2, MPI_COMM_WORLD);
    }
    double hop_us = (MPI_Wtime() - t0) / LAT_ROUNDS / np * 1e6;
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0)
        printf("procs=%d bw=%.3f lat_us=%.3f\n", np,
               (double)n * (double)iters * np / slowest / 1e9, hop_us);
    free(want);
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
