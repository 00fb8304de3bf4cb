/* debug.h - TBRT_DEBUG: lines on stderr for people finding out what a link
 * does, in the spirit of llama.cpp's GGML_RPC_DEBUG.
 *
 *   0  nothing (the default)
 *   1  events: a link probed, ready, fallen back to TCP, broken, timed out, closed
 *   2  every operation: each send/recv/flush that moved bytes, each blocking
 *      call with its result and how long it took
 *   3  every frame: each stride posted, arrived or completed (each socket
 *      write and read on tcp links), with byte counts and times
 *
 * Each line is "tbrt: link N: ..." (or "tbrt: ..." when it is about no
 * link), written with one write(2) so lines of several processes do not
 * mix. The level is read once, when the library loads; on the hot paths a
 * disabled level costs one branch on that cached value (DBG_ON). */
#ifndef TBRT_DEBUG_H
#define TBRT_DEBUG_H

#include <stdatomic.h>

#include "util/util.h"

enum {
    DBG_EVENT = 1,
    DBG_OP = 2,
    DBG_FRAME = 3,
    DBG_MAX = 3,
};

/* hidden: the library's own, read without a GOT load on the hot paths */
extern atomic_int dbg_level __attribute__((visibility("hidden")));

#define DBG_ON(level) \
    TBRT_UNLIKELY(atomic_load_explicit(&dbg_level, memory_order_relaxed) >= (level))

/* One line "tbrt: link N: <fmt>" (link_id 0: "tbrt: <fmt>"); the caller
 * checks DBG_ON first. */
void dbg_line(int link_id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
