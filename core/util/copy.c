/* copy.c - the slow half of bulk_copy (copy.h): a copy whose ends meet
 * REP MOVSB's cliff goes as pieces small enough that glibc copies each
 * with vector loads and stores. */
#include "util/copy.h"

/* below every glibc REP MOVSB threshold (2048 with SSE2, 4096 AVX2, 8192
 * AVX-512); 1 KiB pieces: ~30 GB/s here, 2 KiB ones already take REP MOVSB
 * where the vectors are SSE2 */
#define PIECE 1024

/* Called through a pointer the compiler cannot see through: a memcpy of a
 * constant 1 KiB it would inline as REP MOVSQ, which has the same cliff,
 * and a loop of them it would make one memcpy of the whole. */
static void *(*volatile piece_copy)(void *, const void *, size_t) = memcpy;

void bulk_copy_pieces(void *dst, const void *src, size_t n)
{
    void *(*copy)(void *, const void *, size_t) = piece_copy;
    char *d = dst;
    const char *s = src;
    while (n >= PIECE) {
        copy(d, s, PIECE);
        d += PIECE;
        s += PIECE;
        n -= PIECE;
    }
    if (n)
        copy(d, s, n);
}
