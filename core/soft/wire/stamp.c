/* stamp.c - soft_stamp() values as CLOCK_MONOTONIC nanoseconds, for
 * completion timestamps (wire.h). A stamp is the TSC where there is one: its
 * rate is measured once per process, against clock_gettime over a short
 * spin (3 x 200 us: the rate to better than 0.1%, which is nanoseconds on the
 * microseconds between a completion being made and polled; three tight
 * measures, the median, so one preemption cannot skew it); a stamp is
 * then placed relative to a fresh (TSC, clock) pair, so the rate's error
 * only scales that distance. Elsewhere stamps are nanoseconds already. */
#include <pthread.h>

#include "soft/wire/wire.h"
#include "util/util.h"

#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
static double ns_per_tick;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* A (stamp, ns) pair read close together: retried until the two stamps
 * around the clock read are within 2000 ticks (a preemption in between
 * would skew the rate). */
static void tight_pair(uint64_t *tick, uint64_t *ns)
{
    for (int i = 0; i < 100; i++) {
        uint64_t a = soft_stamp(), n = now_ns(), b = soft_stamp();
        *tick = a + (b - a) / 2;
        *ns = n;
        if (b - a < 2000)
            return;
    }
}

/* Three measures of 200 us, the median kept. */
static void measure(void)
{
    double r[3];
    for (int k = 0; k < 3; k++) {
        uint64_t t0, n0, t1, n1;
        tight_pair(&t0, &n0);
        while (now_ns() - n0 < 200000)
            ;
        tight_pair(&t1, &n1);
        r[k] = t1 > t0 ? (double)(n1 - n0) / (double)(t1 - t0) : 1.0;
    }
    double lo = r[0] < r[1] ? r[0] : r[1], hi = r[0] < r[1] ? r[1] : r[0];
    ns_per_tick = r[2] < lo ? lo : r[2] > hi ? hi : r[2];
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
