/* tbrt_memcpy.c - the memcpy ceilings `make bench` compares streaming with,
 * measured in the same run on the same machine (one thread, gcc's memcpy):
 *
 *   memcpy_4m_hot       a 4 MiB message copied between the same two
 *                       buffers again and again: both stay in cache. The
 *                       in-cache ceiling of moving a 4 MiB message once;
 *                       the views target is a fraction of it.
 *   memcpy_128k_ring16  128 KiB blocks from one source into 16 rotating
 *                       128 KiB slots (2 MiB): tbrt's default ring shape.
 *
 * Each figure ("name X GB/s", 1 GB = 1e9 B) is the median of 5 timed runs
 * of about 0.1 s each, after an untimed one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#define RUNS 5
#define RUN_S 0.1

static volatile uint8_t sink;

/* GB/s copying block bytes from src into nslots rotating slots of dst. */
static double copy_rate(uint8_t *dst, const uint8_t *src, size_t block, int nslots, double secs)
{
    long copies = 0;
    int slot = 0;
    double t0 = bench_now(), dt;
    do {
        for (int k = 0; k < 16; k++) {
            memcpy(dst + (size_t)slot * block, src, block);
            slot = (slot + 1) % nslots;
        }
        copies += 16;
        dt = bench_now() - t0;
    } while (dt < secs);
    sink = dst[block - 1];
    return (double)copies * (double)block / dt / 1e9;
}

static void figure(const char *name, size_t block, int nslots)
{
    uint8_t *src = malloc(block), *dst = malloc(block * (size_t)nslots);
    if (!src || !dst)
        bench_die("malloc", NULL);
    bench_fill(src, block);
    memset(dst, 0, block * (size_t)nslots);
    double r[RUNS];
    copy_rate(dst, src, block, nslots, RUN_S / 2);
    for (int i = 0; i < RUNS; i++)
        r[i] = copy_rate(dst, src, block, nslots, RUN_S);
    printf("%s %.2f GB/s\n", name, bench_median(r, RUNS));
    fflush(stdout);
    free(src);
    free(dst);
}

int main(void)
{
    figure("memcpy_4m_hot", 4u << 20, 1);
    figure("memcpy_128k_ring16", 128u << 10, 16);
    return 0;
}
