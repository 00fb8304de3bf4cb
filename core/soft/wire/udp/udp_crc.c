/* udp_crc.c - CRC-32 of IEEE 802.3 (reflected, polynomial 0xEDB88320) for
 * the UDP wire's ICRC (udp_pkt.c): both ends compute it over every byte of
 * every packet, where a NIC has it in hardware, so it is a large part of
 * the wire's cost per byte.
 *
 * Three ways, the fastest the CPU has, each checked against the first at
 * first use (a mismatch keeps the slower one):
 *   - tables, eight bytes a step ("slicing by 8"): any CPU, no library
 *     beyond glibc (tbrt's libibverbs.so links this);
 *   - carry-less multiplication (x86-64 PCLMULQDQ), 16 bytes a step in
 *     four 128-bit accumulators folded 64 bytes ahead (x^512 and x^576 mod
 *     P), then into one (x^128, x^192), whose remainder the table takes: a
 *     register that starts at 0 and meets the folded 16 bytes gives the CRC
 *     of everything before them (the constants are those of the
 *     polynomial, reflected, as Intel's paper on CRC folding derives them);
 *     4 KiB in ~0.45 us instead of ~2;
 *   - the same with 256-bit VPCLMULQDQ: four registers of two accumulators
 *     each, folded 128 bytes ahead (x^1024, x^1088), then the eight lanes
 *     into one as above; twice the 128-bit rate here (17 GB/s against 9).
 * udp_crc32 takes and gives the register before the final inversion. */
#include <pthread.h>
#include <string.h>

#include "soft/wire/udp/udp.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "crc32_table reads words little endian"
#endif

static uint32_t crc_tab[8][256];

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0xedb88320u : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
}

static uint32_t crc32_table(uint32_t c, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n && ((uintptr_t)p & 7)) {
        c = crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;                /* little endian: the first byte is the lowest */
        c = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^ crc_tab[5][(lo >> 16) & 0xff] ^
            crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^ crc_tab[2][(hi >> 8) & 0xff] ^
            crc_tab[1][(hi >> 16) & 0xff] ^ crc_tab[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

/* A fold: takes n >= its minimum bytes, gives the register for the first
 * *used of them (the rest is the table's). */
typedef uint32_t (*crc_fold_fn)(uint32_t c, const uint8_t *p, size_t n, size_t *used);

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CRC_FOLD 1

/* x^(D+32) and x^(D-32) mod P, bit-reflected and shifted, for a fold D
 * bits ahead: lo, hi of each 128-bit constant */
#define K128_LO 0x1751997d0ll
#define K128_HI 0x0ccaa009ell
#define K512_LO 0x154442bd4ll
#define K512_HI 0x1c6e41596ll
#define K1024_LO 0x1e88ef372ll
#define K1024_HI 0x14a7fe880ll

#define FOLD(x, k, next)                                                                    \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),                            \
                                _mm_clmulepi64_si128(x, k, 0x11)),                           \
                  next)
#define LOAD(p) _mm_loadu_si128((const __m128i *)(p))

/* Lanes folded into one, the 16-byte steps after them, the remainder. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t fold_finish(__m128i x, const uint8_t *p,
                                                                       size_t n, size_t off,
                                                                       size_t *used)
{
    const __m128i k1 = _mm_set_epi64x(K128_HI, K128_LO);
    while (n - off >= 16) {
        x = FOLD(x, k1, LOAD(p + off));
        off += 16;
    }
    uint8_t rest[16];
    _mm_storeu_si128((__m128i *)rest, x);
    *used = off;
    return crc32_table(0, rest, 16);
}

__attribute__((target("pclmul,sse4.1"))) static uint32_t fold128(uint32_t c, const uint8_t *p,
                                                                   size_t n, size_t *used)
{
    /* n >= 64 */
    const __m128i k4 = _mm_set_epi64x(K512_HI, K512_LO), k1 = _mm_set_epi64x(K128_HI, K128_LO);
    __m128i x0 = LOAD(p), x1 = LOAD(p + 16), x2 = LOAD(p + 32), x3 = LOAD(p + 48);
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)c));
    size_t off = 64;
    while (n - off >= 64) {
        x0 = FOLD(x0, k4, LOAD(p + off));
        x1 = FOLD(x1, k4, LOAD(p + off + 16));
        x2 = FOLD(x2, k4, LOAD(p + off + 32));
        x3 = FOLD(x3, k4, LOAD(p + off + 48));
        off += 64;
    }
    x0 = FOLD(x0, k1, x1);
    x0 = FOLD(x0, k1, x2);
    x0 = FOLD(x0, k1, x3);
    return fold_finish(x0, p, n, off, used);
}

#define VFOLD(x, k, next)                                                                   \
    _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),                 \
                                      _mm256_clmulepi64_epi128(x, k, 0x11)),                 \
                     next)
#define VLOAD(p) _mm256_loadu_si256((const __m256i *)(p))

__attribute__((target("pclmul,sse4.1,avx2,vpclmulqdq"))) static uint32_t
fold256(uint32_t c, const uint8_t *p, size_t n, size_t *used)
{
    if (n < 256)                /* the eight lanes' set-up and folding would not pay */
        return fold128(c, p, n, used);
    const __m256i k8 = _mm256_set_epi64x(K1024_HI, K1024_LO, K1024_HI, K1024_LO);
    const __m128i k1 = _mm_set_epi64x(K128_HI, K128_LO);
    __m256i y0 = VLOAD(p), y1 = VLOAD(p + 32), y2 = VLOAD(p + 64), y3 = VLOAD(p + 96);
    y0 = _mm256_xor_si256(y0, _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)c)));
    size_t off = 128;
    while (n - off >= 128) {
        y0 = VFOLD(y0, k8, VLOAD(p + off));
        y1 = VFOLD(y1, k8, VLOAD(p + off + 32));
        y2 = VFOLD(y2, k8, VLOAD(p + off + 64));
        y3 = VFOLD(y3, k8, VLOAD(p + off + 96));
        off += 128;
    }
    /* the lanes in the order of their bytes, folded into the first */
    __m128i lane[8] = {_mm256_castsi256_si128(y0), _mm256_extracti128_si256(y0, 1),
                       _mm256_castsi256_si128(y1), _mm256_extracti128_si256(y1, 1),
                       _mm256_castsi256_si128(y2), _mm256_extracti128_si256(y2, 1),
                       _mm256_castsi256_si128(y3), _mm256_extracti128_si256(y3, 1)};
    __m128i x = lane[0];
    for (int i = 1; i < 8; i++)
        x = FOLD(x, k1, lane[i]);
    return fold_finish(x, p, n, off, used);
}
#undef FOLD
#undef LOAD
#undef VFOLD
#undef VLOAD
#endif

static const crc_fold_fn folds[UDP_CRC_WAYS] = {
    [UDP_CRC_TABLE] = NULL,
#ifdef CRC_FOLD
    [UDP_CRC_PCLMUL] = fold128,
    [UDP_CRC_VPCLMUL] = fold256,
#endif
};
static const char *const way_names[UDP_CRC_WAYS] = {"table", "pclmul", "vpclmul"};

static bool way_has(int way)
{
#ifdef CRC_FOLD
    if (way == UDP_CRC_PCLMUL)
        return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    if (way == UDP_CRC_VPCLMUL)
        return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq");
#endif
    return way == UDP_CRC_TABLE;
}

static uint32_t crc_with(crc_fold_fn fold, uint32_t c, const void *buf, size_t n)
{
    if (!fold || n < 64)
        return crc32_table(c, buf, n);
    size_t used;
    c = fold(c, buf, n, &used);
    return crc32_table(c, (const uint8_t *)buf + used, n - used);
}

/* The fold agrees with the table on every length 64..1200 (the lane
 * set-ups and their tails) from several offsets and registers. */
static bool way_checks(int way)
{
    static uint8_t buf[1216];
    uint32_t x = 0x12345678u;
    for (size_t i = 0; i < sizeof buf; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 16);
    }
    for (size_t n = 64; n <= 1200; n++) {
        uint32_t start = n & 1 ? 0xffffffffu : (uint32_t)(n * 2654435761u);
        const uint8_t *p = buf + (n & 15);
        if (crc_with(folds[way], start, p, n) != crc32_table(start, p, n))
            return false;
    }
    return true;
}

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static crc_fold_fn best;
static int best_way;

static void crc_setup(void)
{
    table_init();
    for (int way = UDP_CRC_WAYS - 1; way > UDP_CRC_TABLE; way--)
        if (way_has(way) && way_checks(way)) {
            best = folds[way];
            best_way = way;
            return;
        }
}

uint32_t udp_crc32(uint32_t c, const void *buf, size_t n)
{
    pthread_once(&crc_once, crc_setup);
    return crc_with(best, c, buf, n);
}

const char *udp_crc_way(void)
{
    pthread_once(&crc_once, crc_setup);
    return way_names[best_way];
}

int udp_crc32_by(int way, uint32_t c, const void *buf, size_t n, uint32_t *out)
{
    pthread_once(&crc_once, crc_setup);
    if (way < 0 || way >= UDP_CRC_WAYS || !way_has(way))
        return -1;
    *out = crc_with(folds[way], c, buf, n);
    return 0;
}
