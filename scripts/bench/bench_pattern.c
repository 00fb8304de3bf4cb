/* bench_pattern.c - a benchmark message's bytes and their check
 * (bench_pattern.h). */
#include <endian.h>
#include <string.h>

#include "bench_pattern.h"

#define PATTERN_BASE 0x6a09e667f3bcc909ull
#define PATTERN_STEP 0x9e3779b97f4a7c15ull

static uint8_t pattern_byte(size_t off)
{
    return (uint8_t)((PATTERN_BASE + (uint64_t)(off / 8) * PATTERN_STEP) >> (off % 8 * 8));
}

void bench_fill(uint8_t *b, size_t n)
{
    for (size_t off = 0; off < n; off++)
        b[off] = pattern_byte(off);
}

void bench_stamp(uint8_t *b, size_t n, uint64_t idx)
{
    if (n >= 8)
        memcpy(b, &idx, 8);
}

uint8_t bench_pattern_byte(size_t at, uint64_t idx)
{
    uint8_t stamp[8];
    memcpy(stamp, &idx, 8);
    return at < 8 ? stamp[at] : pattern_byte(at);
}

/* The whole words with an or of their differences and no early exit, which
 * the compiler makes a vector loop (AVX2 where the CPU has it): ~15% less
 * than a memcmp with the reference, ~0.37 of the kernel's copy of the same
 * bytes (perf, tcp 4 MiB), and it reads the message alone. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECTOR_LOOP __attribute__((optimize("tree-vectorize", "unroll-loops"), \
                                   target_clones("avx2", "default")))
#else
#define VECTOR_LOOP
#endif
/* Message bytes [off, off + n), at p: the pattern's? */
VECTOR_LOOP
static bool pattern_holds_at(const uint8_t *p, size_t off, size_t n)
{
    size_t i = 0;
    for (; i < n && (off + i) % 8; i++)
        if (p[i] != pattern_byte(off + i))
            return false;
    uint64_t diff = 0;
    size_t k0 = (off + i) / 8, words = (n - i) / 8;
    for (size_t k = 0; k < words; k++) {
        uint64_t v;
        memcpy(&v, p + i + 8 * k, 8);
        diff |= le64toh(v) ^ (PATTERN_BASE + (k0 + k) * PATTERN_STEP);
    }
    for (i += 8 * words; i < n; i++)
        if (p[i] != pattern_byte(off + i))
            return false;
    return diff == 0;
}

bool bench_pattern_holds(const uint8_t *b, size_t a, size_t e)
{
    return a >= e || pattern_holds_at(b + a, a, e - a);
}

bool bench_pattern_ok(const uint8_t *p, size_t off, size_t n, uint64_t idx)
{
    size_t head = off >= 8 ? 0 : 8 - off < n ? 8 - off : n;
    for (size_t i = 0; i < head; i++)
        if (p[i] != bench_pattern_byte(off + i, idx))
            return false;
    return pattern_holds_at(p + head, off + head, n - head);
}

long bench_pattern_bad(const uint8_t *p, size_t off, size_t n, uint64_t idx)
{
    if (bench_pattern_ok(p, off, n, idx))
        return -1;
    /* where: byte by byte, only on the way out of a failed run */
    for (size_t i = 0; i < n; i++)
        if (p[i] != bench_pattern_byte(off + i, idx))
            return (long)(off + i);
    return -1;
}
