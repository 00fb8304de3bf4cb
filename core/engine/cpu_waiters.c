/* cpu_waiters.c - which CPUs this user's tbrt waiters spin on.
 *
 * A waiter spins while its peer is awake (link.h: LINK_SPIN_AWAKE): right
 * when each process has a CPU, wrong when more tbrt processes wait than
 * there are CPUs (8 ranks of a ring on 2 cores, two test pairs at once on
 * a CI runner): a spinner then holds the CPU that the process holding the
 * message needs until the scheduler preempts it, a slice later (measured:
 * 1 ms a hop in a ring of 4 processes on 2 CPUs). A spinner that knows
 * another tbrt waiter shares its CPU yields it instead, and the hop costs a
 * few context switches. Against a process that is not a waiter (a build
 * beside the test, a busy loop) it keeps spinning: yielding to those gives
 * them the CPU for their whole slice.
 *
 * The table: a file in the user's private directory (0700, files 0600:
 * no other user can write it), one cache line per CPU of 8 marks, each a
 * thread id and the ms it last waited there. A thread writes its mark only
 * when it changes (about once a ms while it waits), and only threads on
 * that CPU write its line, so a look reads a line that stays in the CPU's
 * cache. A waiter that goes to sleep leaves its mark to age out: woken, it
 * has the message and needs the CPU before it would mark it again (taking
 * marks away at sleep measured worse: ring of 4 hops 21-94 us against
 * 25-33). The table is a hint: a mark another process of ours wrote wrong
 * only makes a waiter yield when it need not, or spin; marks of a process
 * that died age out. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine/cpu_waiters.h"
#include "util/debug.h"
#include "util/private_dir.h"

struct cpu_line {
    _Atomic uint64_t mark[CPU_WAITERS_WAYS];   /* tid << 32 | ms; 0: none */
};
_Static_assert(sizeof(struct cpu_line) == 64, "one cache line per CPU");

#define TABLE_BYTES ((size_t)CPU_WAITERS_CPUS * sizeof(struct cpu_line))

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct cpu_line *table;          /* NULL: no table, no hint */
static _Thread_local uint32_t my_tid;   /* 0: not known yet */

/* A forked child's thread is not its parent's: ask again. */
static void forget_tid(void) { my_tid = 0; }

static void open_table(void)
{
    pthread_atfork(NULL, NULL, forget_tid);
    char dir[256], err[256];
    int dfd = private_dir_open(dir, sizeof dir, err, sizeof err);
    if (dfd < 0) {
        if (DBG_ON(DBG_EVENT))
            dbg_line(0, "cpu waiters: no table (%s): waiters will not yield to each other", err);
        return;
    }
    bool created;
    int fd = private_file_open(dfd, dir, CPU_WAITERS_FILE, &created, err, sizeof err);
    close(dfd);
    if (fd < 0) {
        if (DBG_ON(DBG_EVENT))
            dbg_line(0, "cpu waiters: no table (%s): waiters will not yield to each other", err);
        return;
    }
    /* whoever opens it first sizes it; a size that is neither 0 nor ours
     * is another version's file: no hint rather than a wrong one */
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_size == 0 || (size_t)st.st_size == TABLE_BYTES) &&
        (st.st_size != 0 || ftruncate(fd, (off_t)TABLE_BYTES) == 0)) {
        void *p = mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED)
            table = p;
    } else {
        if (DBG_ON(DBG_EVENT))
            dbg_line(0, "cpu waiters: %s/%s is not a table of %zu bytes (another version's?): "
                     "waiters will not yield to each other", dir, CPU_WAITERS_FILE, TABLE_BYTES);
    }
    close(fd);
}

uint32_t cpu_waiters_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

bool cpu_waiters_others(int cpu, uint32_t now_ms)
{
    pthread_once(&once, open_table);
    if (!table || cpu < 0 || cpu >= CPU_WAITERS_CPUS)
        return false;
    if (!my_tid)
        my_tid = (uint32_t)syscall(SYS_gettid);
    struct cpu_line *line = &table[cpu];
    bool others = false;
    int own = -1, free_way = -1;
    for (int i = 0; i < CPU_WAITERS_WAYS; i++) {
        uint64_t m = atomic_load_explicit(&line->mark[i], memory_order_relaxed);
        uint32_t tid = (uint32_t)(m >> 32), ms = (uint32_t)m;
        bool fresh = m && now_ms - ms < CPU_WAITERS_FRESH_MS;
        if (tid == my_tid)
            own = i;
        else if (fresh)
            others = true;
        else if (free_way < 0)
            free_way = i;
    }
    /* ours: the way we had, else one no fresh mark holds (two waiters on
     * one way would overwrite each other's mark, and one that looks twice
     * while the other does not would find only its own), else a shared one */
    int way = own >= 0 ? own : free_way >= 0 ? free_way : (int)(my_tid % CPU_WAITERS_WAYS);
    _Atomic uint64_t *mine = &line->mark[way];
    uint64_t want = (uint64_t)my_tid << 32 | now_ms;
    if (atomic_load_explicit(mine, memory_order_relaxed) != want)
        atomic_store_explicit(mine, want, memory_order_relaxed);
    return others;
}
