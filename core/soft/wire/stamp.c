/* stamp.c - soft_stamp() values as CLOCK_MONOTONIC nanoseconds, for
 * completion timestamps (wire.h). A stamp is the TSC where there is one: its
 * rate is measured once per process, against clock_gettime over a short
 * spin (50 us: the rate to better than 0.1%, which is nanoseconds on the
 * microseconds between a completion being made and polled); a stamp is
 * then placed relative to a fresh (TSC, clock) pair, so the rate's error
 * only scales that distance. Elsewhere stamps are nanoseconds already. */
#include <pthread.h>

#include "soft/wire/wire.h"
#include "util/util.h"

#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
static double ns_per_tick;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void measure(void)
{
    uint64_t t0 = soft_stamp(), n0 = now_ns(), n1;
    while ((n1 = now_ns()) - n0 < 50000)
        ;
    uint64_t t1 = soft_stamp();
    ns_per_tick = t1 > t0 ? (double)(n1 - n0) / (double)(t1 - t0) : 1.0;
}

uint64_t soft_stamp_ns(uint64_t stamp)
{
    pthread_once(&once, measure);
    uint64_t t = soft_stamp(), n = now_ns();
    if (stamp >= t)
        return n;
    uint64_t back = (uint64_t)((double)(t - stamp) * ns_per_tick);
    return back < n ? n - back : 0;
}
#else
uint64_t soft_stamp_ns(uint64_t stamp) { return stamp; }
#endif
