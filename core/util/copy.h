/* copy.h - the core's bulk copy: memcpy, except where the C library's
 * memcpy falls off a cliff.
 *
 * glibc copies blocks from 2-8 KiB up to its non-temporal threshold with
 * REP MOVSB. On CPUs with fast short REP MOVSB (here a 2-vCPU AMD EPYC VM,
 * Debian 12's glibc 2.36) that instruction runs at a twentieth of its
 * speed when the destination lies 1..63 bytes past the source modulo
 * 4 KiB (1..31 here; 63 covers wider vectors): 64 KiB moved at 1.5 GB/s
 * instead of 40 (`make bench` measures it: tbrt-memcpy's skew16 figures).
 * Which addresses meet is chance, a user's buffer against a
 * ring stride past its header, so one run of a program streamed at full
 * speed and the next, with one buffer 16 bytes over, at a tenth. Those
 * copies go in pieces below the REP MOVSB threshold instead (vector
 * loops, ~30 GB/s here), the rest straight to memcpy. */
#ifndef TBRT_UTIL_COPY_H
#define TBRT_UTIL_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The copy in pieces (copy.c). */
void bulk_copy_pieces(void *dst, const void *src, size_t n);

#define BULK_COPY_CLIFF_MIN 2048 /* glibc's smallest REP MOVSB threshold (SSE2) */
#define BULK_COPY_CLIFF_SPAN 64  /* destinations this close past the source, mod 4 KiB */

static inline void *bulk_copy(void *dst, const void *src, size_t n)
{
    uintptr_t d = ((uintptr_t)dst - (uintptr_t)src) & 4095;
    if (__builtin_expect(n >= BULK_COPY_CLIFF_MIN && d - 1 < BULK_COPY_CLIFF_SPAN - 1, 0)) {
        bulk_copy_pieces(dst, src, n);
        return dst;
    }
    return memcpy(dst, src, n);
}

/* A copy whose last 8 bytes become visible after all the others: how a
 * device places an RDMA WRITE (tbrt_dev.ordered_writes). memcpy stores in
 * no promised order: glibc's 65-128 byte copy stores its last 32 bytes
 * before the 32 ahead of them. n >= 8, dst + n 8-byte aligned for a reader
 * that loads that word atomically. */
static inline void placed_copy(void *dst, const void *src, size_t n)
{
    if (n < 8) {
        memcpy(dst, src, n);
        return;
    }
    bulk_copy(dst, src, n - 8);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    uint64_t last;
    memcpy(&last, (const char *)src + n - 8, 8);
    if (((uintptr_t)dst + n) % 8 == 0)
        __atomic_store_n((uint64_t *)(void *)((char *)dst + n - 8), last, __ATOMIC_RELEASE);
    else
        memcpy((char *)dst + n - 8, &last, 8);
}

/* The same where the two may overlap (memmove's contract). */
static inline void *bulk_move(void *dst, const void *src, size_t n)
{
    if ((const char *)dst + n <= (const char *)src || (const char *)src + n <= (const char *)dst)
        return bulk_copy(dst, src, n);
    return memmove(dst, src, n);
}

#endif
