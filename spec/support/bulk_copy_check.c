/* bulk_copy_check.c - build/test/bulk-copy: the core's bulk copy
 * (core/util/copy.h) through its piecewise path and through bulk_copy
 * itself, for spec/copy_spec.lua (both are internal: libtbrt.a, not the
 * shared library's API).
 *
 * For each size and each destination skew (1..63 meet the cliff and go in
 * pieces; 0 and 64 go to memcpy) it checks that exactly the n bytes were
 * copied and nothing around them written, and bulk_move with overlapping
 * ranges both ways. Prints "checked N" and exits 0, or names the first
 * failure and exits 1. */
#include <stdio.h>
#include <string.h>

#include "util/copy.h"

#define SPAN 70000
#define GUARD 128

static unsigned char src[SPAN + 64], dst[SPAN + 2 * GUARD + 64];

static int check(const char *how, size_t n, size_t skew)
{
    for (size_t i = 0; i < GUARD + skew; i++)
        if (dst[i] != 0xee) {
            printf("%s: n %zu skew %zu: wrote before the destination\n", how, n, skew);
            return 1;
        }
    if (memcmp(dst + GUARD + skew, src + 5, n) != 0) {
        printf("%s: n %zu skew %zu: bytes differ\n", how, n, skew);
        return 1;
    }
    for (size_t i = GUARD + skew + n; i < GUARD + skew + n + GUARD; i++)
        if (dst[i] != 0xee) {
            printf("%s: n %zu skew %zu: wrote past the end\n", how, n, skew);
            return 1;
        }
    return 0;
}

int main(void)
{
    static const size_t sizes[] = {0, 1, 63, 1023, 1024, 1025, 2047, 2048, 4096 + 7, 65536,
                                   65536 + 13};
    static const size_t skews[] = {0, 1, 8, 16, 31, 63, 64};
    unsigned checked = 0;
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(i * 131 + 3);
    for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
        for (size_t b = 0; b < sizeof skews / sizeof *skews; b++) {
            size_t n = sizes[a], skew = skews[b];
            memset(dst, 0xee, sizeof dst);
            bulk_copy_pieces(dst + GUARD + skew, src + 5, n);
            if (check("pieces", n, skew))
                return 1;
            memset(dst, 0xee, sizeof dst);
            bulk_copy(dst + GUARD + skew, src + 5, n);
            if (check("bulk_copy", n, skew))
                return 1;
            checked += 2;
        }
    /* overlapping moves go to memmove, both ways */
    for (int way = 0; way < 2; way++) {
        unsigned char buf[8192], want[8192];
        for (size_t i = 0; i < sizeof buf; i++)
            buf[i] = want[i] = (unsigned char)(i * 7);
        size_t from = way ? 100 : 116, to = way ? 116 : 100, n = 6000;
        memmove(want + to, want + from, n);
        bulk_move(buf + to, buf + from, n);
        if (memcmp(buf, want, sizeof buf) != 0) {
            printf("bulk_move: overlapping %s: bytes differ\n", way ? "forwards" : "backwards");
            return 1;
        }
        checked++;
    }
    printf("checked %u\n", checked);
    return 0;
}
