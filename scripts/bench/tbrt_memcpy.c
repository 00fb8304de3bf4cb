/* tbrt_memcpy.c - the memcpy ceilings `make bench` compares streaming with,
 * measured in the same run on the same machine (one thread, gcc's memcpy):
 *
 *   memcpy_4m_hot       a 4 MiB message copied between the same two
 *                       buffers again and again: both stay in cache. The
 *                       in-cache ceiling of moving a 4 MiB message once;
 *                       the views target is a fraction of it.
 *   memcpy_128k_ring16  128 KiB blocks from one source into 16 rotating
 *                       128 KiB slots (2 MiB): tbrt's default ring shape.
 *   memcpy_64k_skew16   64 KiB copied by the C library's memcpy to 16 bytes
 *                       past the source's offset in its page: where glibc's
 *                       REP MOVSB runs at a twentieth of its speed on some
 *                       CPUs (util/copy.h)
 *   memcpy_64k_aligned  the same with both at the same offset
 *   bulk_copy_64k_skew16  the first through bulk_copy, the core's bulk copy
 *
 * Each figure ("name X GB/s", 1 GB = 1e9 B) is the median of 5 timed runs
 * of about 0.1 s each, after an untimed one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "util/copy.h"

#define RUNS 5
#define RUN_S 0.1

static volatile uint8_t sink;

typedef void *(*copy_fn)(void *, const void *, size_t);
/* through a pointer: the compiler neither inlines nor folds the copies */
static void *(*volatile use_copy)(void *, const void *, size_t) = memcpy;

/* GB/s copying block bytes from src into nslots rotating slots of dst. */
static double copy_rate(uint8_t *dst, const uint8_t *src, size_t block, int nslots, double secs)
{
    long copies = 0;
    int slot = 0;
    copy_fn copy = use_copy;
    double t0 = bench_now(), dt;
    do {
        for (int k = 0; k < 16; k++) {
            copy(dst + (size_t)slot * block, src, block);
            slot = (slot + 1) % nslots;
        }
        copies += 16;
        dt = bench_now() - t0;
    } while (dt < secs);
    sink = dst[block - 1];
    return (double)copies * (double)block / dt / 1e9;
}

/* skew: the destination's offset in its page less the source's */
static void figure_with(const char *name, size_t block, int nslots, copy_fn copy, size_t skew)
{
    uint8_t *src0 = aligned_alloc(4096, block + 4096);
    uint8_t *dst0 = aligned_alloc(4096, block * (size_t)nslots + 4096);
    if (!src0 || !dst0)
        bench_die("malloc", NULL);
    uint8_t *src = src0 + 64, *dst = dst0 + 64 + skew;
    bench_fill(src, block);
    memset(dst, 0, block * (size_t)nslots);
    use_copy = copy;
    double r[RUNS];
    copy_rate(dst, src, block, nslots, RUN_S / 2);
    for (int i = 0; i < RUNS; i++)
        r[i] = copy_rate(dst, src, block, nslots, RUN_S);
    if (memcmp(dst, src, block) != 0)
        bench_die(name, NULL);
    printf("%s %.2f GB/s\n", name, bench_median(r, RUNS));
    fflush(stdout);
    free(src0);
    free(dst0);
}

static void figure(const char *name, size_t block, int nslots)
{
    figure_with(name, block, nslots, memcpy, 0);
}

int main(void)
{
    figure("memcpy_4m_hot", 4u << 20, 1);
    figure("memcpy_128k_ring16", 128u << 10, 16);
    figure_with("memcpy_64k_skew16", 64u << 10, 1, memcpy, 16);
    figure_with("memcpy_64k_aligned", 64u << 10, 1, memcpy, 0);
    figure_with("bulk_copy_64k_skew16", 64u << 10, 1, bulk_copy, 16);
    return 0;
}
