/* tbrt_memcpy.c - the memcpy ceilings `make bench` compares streaming with,
 * measured in the same run on the same machine (glibc's memcpy; one thread,
 * but for the two rings across the CPUs at the end):
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
 *   xring_4m            across the CPUs: two processes, 4 MiB messages in
 *                       128 KiB pieces through 16 shared slots (tbrt's
 *                       default ring); one copies each piece in from its
 *                       own pattern, the other compares it in place with
 *                       its own. A view stream's work without tbrt: one
 *                       copy and one compare, every byte crossing once:
 *                       what a NIC-backed view stream could reach.
 *   xring_dma_4m        the same, and the comparing end first copies each
 *                       piece into a ring of its own, frees the shared slot
 *                       and compares its copy: the copy between the two
 *                       rings that tbrt's soft device makes for every SEND
 *                       (a NIC's DMA, done by a CPU), as a bare program.
 *
 * Each figure ("name X GB/s", 1 GB = 1e9 B) is the median of 5 timed runs
 * of about 0.1 s each, after an untimed one. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* ---- xring_4m: the ring between two processes ------------------------------ */

#define XR_MSG (4u << 20)
#define XR_SLOT (128u << 10)
#define XR_SLOTS 16u
#define XR_PIECES (XR_MSG / XR_SLOT)
#define XR_WAIT_S 10.0          /* no progress for this long: the other end is gone */

struct xr_ctl {                 /* each word on a line of its own */
    _Alignas(64) _Atomic uint64_t made;     /* pieces copied in */
    _Alignas(64) _Atomic uint64_t seen;     /* pieces compared */
    _Alignas(64) _Atomic int stop;          /* the copying end: no more pieces */
    _Atomic int failed;                     /* the comparing end: it gave up */
};

/* Spin until *w passes `than` or *stop is set: false after XR_WAIT_S
 * without either. */
static bool xr_wait(_Atomic uint64_t *w, uint64_t than, _Atomic int *stop)
{
    double t0 = 0;
    for (unsigned spins = 0;; spins++) {
        if (atomic_load_explicit(w, memory_order_acquire) > than ||
            atomic_load_explicit(stop, memory_order_acquire))
            return true;
        if ((spins & 4095) == 4095) {
            double t = bench_now();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > XR_WAIT_S)
                return false;
        }
    }
}

static void xr_give_up(struct xr_ctl *c, int code)
{
    atomic_store_explicit(&c->failed, 1, memory_order_release);
    _exit(code);
}

/* The comparing end: every piece against its own pattern, until stopped;
 * dma: copied into a ring of its own first (the slot freed at once). */
static void xr_reader(struct xr_ctl *c, const uint8_t *ring, bool dma)
{
    uint8_t *pat = malloc(XR_MSG), *own = dma ? aligned_alloc(4096, (size_t)XR_SLOTS * XR_SLOT)
                                              : NULL;
    if (!pat || (dma && !own))
        xr_give_up(c, 3);
    bench_fill(pat, XR_MSG);
    if (own)
        memset(own, 0, (size_t)XR_SLOTS * XR_SLOT);
    for (uint64_t k = 0;; k++) {
        if (!xr_wait(&c->made, k, &c->stop))
            xr_give_up(c, 2);
        if (atomic_load_explicit(&c->made, memory_order_acquire) <= k)
            _exit(0);           /* stopped, all taken */
        const uint8_t *piece = ring + (k % XR_SLOTS) * XR_SLOT;
        if (dma) {
            /* same page offsets: memcpy's fast case */
            piece = memcpy(own + (k % XR_SLOTS) * XR_SLOT, piece, XR_SLOT);
            atomic_store_explicit(&c->seen, k + 1, memory_order_release);
        }
        if (memcmp(piece, pat + (k % XR_PIECES) * XR_SLOT, XR_SLOT))
            xr_give_up(c, 1);
        if (!dma)
            atomic_store_explicit(&c->seen, k + 1, memory_order_release);
    }
}

/* Copy msgs messages in, piece by piece, and wait until all were compared:
 * seconds, or -1 when the comparing end gave up or stopped answering. */
static double xr_run(struct xr_ctl *c, uint8_t *ring, const uint8_t *pat, uint64_t *k,
                     long msgs)
{
    double t0 = bench_now();
    for (uint64_t end = *k + (uint64_t)msgs * XR_PIECES; *k < end; (*k)++) {
        if (*k >= XR_SLOTS && (!xr_wait(&c->seen, *k - XR_SLOTS, &c->failed) ||
                               atomic_load_explicit(&c->failed, memory_order_acquire)))
            return -1;
        memcpy(ring + (*k % XR_SLOTS) * XR_SLOT, pat + (*k % XR_PIECES) * XR_SLOT, XR_SLOT);
        atomic_store_explicit(&c->made, *k + 1, memory_order_release);
    }
    if (!xr_wait(&c->seen, *k - 1, &c->failed) ||
        atomic_load_explicit(&c->failed, memory_order_acquire))
        return -1;
    return bench_now() - t0;
}

static void figure_xring(const char *name, bool dma)
{
    /* anonymous shared memory: no name anyone else could open */
    size_t ctl = (sizeof(struct xr_ctl) + 4095) & ~(size_t)4095;
    uint8_t *m = mmap(NULL, ctl + (size_t)XR_SLOTS * XR_SLOT, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        bench_die("mmap", NULL);
    struct xr_ctl *c = (struct xr_ctl *)(void *)m;
    uint8_t *ring = m + ctl;
    memset(ring, 0, (size_t)XR_SLOTS * XR_SLOT);
    pid_t child = fork();
    if (child < 0)
        bench_die("fork", NULL);
    if (child == 0)
        xr_reader(c, ring, dma);
    /* each end's pattern is its own, made after the fork (tbrt_stream.c) */
    uint8_t *pat = malloc(XR_MSG);
    if (!pat)
        bench_die("malloc", NULL);
    bench_fill(pat, XR_MSG);
    uint64_t k = 0;
    double warm = xr_run(c, ring, pat, &k, 4), r[RUNS];
    long msgs = warm > 0 ? (long)(RUN_S / (warm / 4)) + 1 : 0;
    for (int i = 0; i < RUNS && warm > 0; i++)
        if ((r[i] = xr_run(c, ring, pat, &k, msgs)) < 0)
            warm = -1;
    atomic_store_explicit(&c->stop, 1, memory_order_release);
    int st = 0;
    waitpid(child, &st, 0);
    if (warm < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "tbrt-memcpy: %s: the comparing process %s\n", name,
                !WIFEXITED(st)            ? "died"
                : WEXITSTATUS(st) == 1    ? "found a piece that differs"
                : WEXITSTATUS(st) == 3    ? "had no memory for its pattern or ring"
                                          : "stopped answering (or the copying one did)");
        exit(1);
    }
    for (int i = 0; i < RUNS; i++)
        r[i] = (double)msgs * XR_MSG / r[i] / 1e9;
    printf("%s %.2f GB/s\n", name, bench_median(r, RUNS));
    fflush(stdout);
    free(pat);
    munmap(m, ctl + (size_t)XR_SLOTS * XR_SLOT);
}

int main(void)
{
    figure("memcpy_4m_hot", 4u << 20, 1);
    figure("memcpy_128k_ring16", 128u << 10, 16);
    figure_with("memcpy_64k_skew16", 64u << 10, 1, memcpy, 16);
    figure_with("memcpy_64k_aligned", 64u << 10, 1, memcpy, 0);
    figure_with("bulk_copy_64k_skew16", 64u << 10, 1, bulk_copy, 16);
    figure_xring("xring_4m", false);
    figure_xring("xring_dma_4m", true);
    return 0;
}
