/* fuzz_common.h - what the libFuzzer targets (spec/support/fuzz_*.c) share:
 * the loopback GID their queue pairs use. */
#ifndef TBRT_FUZZ_COMMON_H
#define TBRT_FUZZ_COMMON_H

#include <string.h>

#include <infiniband/verbs.h>

#include "tbrt.h"

/* ::ffff:127.0.0.1 */
static const uint8_t fuzz_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};

/* The index of ::ffff:127.0.0.1 on port 1 (RoCE v2 where typed), or -1. */
static inline int fuzz_loopback_gid(tbrt_dev *dev)
{
    int best = -1;
    for (int i = 0; i < 64; i++) {
        struct ibv_gid_entry g;
        if (tbrt_gid_query(dev, 1, i, &g))
            break;
        if (memcmp(g.gid.raw, fuzz_loopback, 16) == 0 &&
            (best < 0 || g.gid_type == IBV_GID_TYPE_ROCE_V2))
            best = i;
    }
    return best;
}

#endif
