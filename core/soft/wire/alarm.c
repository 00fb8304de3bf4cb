/* alarm.c - the soft device's alarm thread (alarm.h): one per process, a
 * list of alarms sorted by due time under one lock, a condition variable on
 * CLOCK_MONOTONIC to sleep until the first is due or a sooner one comes.
 * It ends by itself once no wire uses it and nothing is set, and the next
 * alarm set starts another. The last wire to go waits for it to end when
 * nothing is set (it ends at once then), and the library's destructor
 * stops it in any case: a thread still inside the library while it is
 * unloaded (LuaJIT unloads it at exit) would run unmapped code. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "soft/wire/alarm.h"
#include "util/util.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static bool cond_ready, running, fork_hooked;
static bool quit;                     /* the library is going: end now */
static bool joinable;                 /* `thread` was started and not joined */
static pthread_t thread;
/* A thread whose generation is not the current one ends at its next look:
 * one that a joiner took (claim_locked) is as good as gone, and the next
 * alarm set starts another rather than leave it to the one going. */
static unsigned gen;
static int users;                     /* wires open (soft_alarm_use) */
static struct soft_alarm *list;       /* by due time, soonest first */

static void unlink_alarm(struct soft_alarm *a)
{
    for (struct soft_alarm **pp = &list; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    a->next = NULL;
    a->due_ns = 0;
}

static void *alarm_thread(void *arg)
{
    unsigned mine = (unsigned)(uintptr_t)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        uint64_t now = now_ns();
        while (list && list->due_ns <= now) {
            struct soft_alarm *a = list;
            unlink_alarm(a);
            a->ring(a);         /* under the lock: cancel waits for it */
        }
        if (quit || mine != gen || (!list && users == 0))
            break;              /* no wire left to serve, or taken to be joined */
        if (!list) {
            pthread_cond_wait(&cond, &lock);
            continue;
        }
        struct timespec ts = {.tv_sec = (time_t)(list->due_ns / 1000000000ull),
                              .tv_nsec = (long)(list->due_ns % 1000000000ull)};
        pthread_cond_timedwait(&cond, &lock, &ts);
    }
    if (mine == gen)
        running = false;        /* under the lock: the next set starts another */
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* A forked child has the parent's list but not its thread: start over
 * (alarms of the parent's wires are the parent's). */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    list = NULL;
    running = false;
    joinable = false;           /* the parent's thread is not ours to join */
    cond_ready = false;
    users = 0;                  /* the parent's wires are the parent's */
}

static int start_locked(void)
{
    if (!cond_ready) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&cond, &ca);
        pthread_condattr_destroy(&ca);
        cond_ready = true;
    }
    if (!fork_hooked) {
        pthread_atfork(NULL, NULL, after_fork_child);
        fork_hooked = true;
    }
    if (joinable) {
        /* the last one ended by itself (running is false): gone by now,
         * or about to return (it needs the lock no more) */
        pthread_join(thread, NULL);
        joinable = false;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the program's signals are not ours */
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 64 * 1024);
    int rc = pthread_create(&thread, &at, alarm_thread, (void *)(uintptr_t)gen);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc)
        return -rc;
    running = joinable = true;
    return 0;
}

/* Take the thread to join, under the lock: one joiner only. It ends at
 * its next look whatever is set meanwhile (a new generation), so the join
 * never waits on another thread's alarms; those start a thread of their own. */
static bool claim_locked(pthread_t *t)
{
    if (!joinable)
        return false;
    *t = thread;
    joinable = false;
    gen++;
    running = false;
    pthread_cond_broadcast(&cond);
    return true;
}

int soft_alarm_set(struct soft_alarm *a, uint64_t due_ns)
{
    if (!due_ns)
        due_ns = 1;
    pthread_mutex_lock(&lock);
    int rc = running ? 0 : start_locked();
    if (rc == 0 && (!a->due_ns || due_ns < a->due_ns)) {
        if (a->due_ns)
            unlink_alarm(a);
        a->due_ns = due_ns;
        struct soft_alarm **pp = &list;
        while (*pp && (*pp)->due_ns <= due_ns)
            pp = &(*pp)->next;
        a->next = *pp;
        *pp = a;
        if (list == a)
            pthread_cond_signal(&cond);   /* sooner than what the thread sleeps for */
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void soft_alarm_cancel(struct soft_alarm *a)
{
    pthread_mutex_lock(&lock);
    if (a->due_ns)
        unlink_alarm(a);
    pthread_mutex_unlock(&lock);
}

void soft_alarm_use(void)
{
    pthread_mutex_lock(&lock);
    users++;
    pthread_mutex_unlock(&lock);
}

void soft_alarm_unuse(void)
{
    pthread_t t;
    bool join = false;
    pthread_mutex_lock(&lock);
    if (users > 0 && --users == 0) {
        /* nothing set: it ends at once, so waiting for it costs nothing;
         * with alarms still set it serves them first, then ends by itself
         * (the destructor stops it if the library goes meanwhile) */
        if (!list)
            join = claim_locked(&t);
        else if (running)
            pthread_cond_signal(&cond);
    }
    pthread_mutex_unlock(&lock);
    if (join)
        pthread_join(t, NULL);
}

__attribute__((destructor)) static void alarm_stop(void)
{
    pthread_t t;
    pthread_mutex_lock(&lock);
    quit = true;
    bool join = claim_locked(&t);
    pthread_mutex_unlock(&lock);
    if (join)
        pthread_join(t, NULL);
}
