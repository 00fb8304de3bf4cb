/* cpu_waiters.h - which CPUs this user's tbrt waiters spin on, so that a
 * waiter sharing its CPU with another one yields it instead of spinning
 * (cpu_waiters.c says why and how). */
#ifndef TBRT_CPU_WAITERS_H
#define TBRT_CPU_WAITERS_H

#include <stdbool.h>
#include <stdint.h>

/* How long (ms) a waiter's mark says it waits on its CPU: longer than a
 * scheduler slice, so a waiter sees one that the scheduler took off the
 * CPU to run it. */
#define CPU_WAITERS_FRESH_MS 10u
/* CPUs the table has a line for (the CPU numbers above have none: no hint) */
#define CPU_WAITERS_CPUS 1024
#define CPU_WAITERS_WAYS 8      /* marks in one CPU's cache line */

/* The marks' clock: ms of CLOCK_MONOTONIC_COARSE (a few ns to read; its
 * ticks of a few ms are fine against CPU_WAITERS_FRESH_MS). */
uint32_t cpu_waiters_now_ms(void);

/* Mark the calling thread as waiting on `cpu` at `now_ms`
 * (cpu_waiters_now_ms), and say whether another thread (of any of this user's
 * processes) marked itself waiting on the same CPU within
 * CPU_WAITERS_FRESH_MS. False when there is no table (the private directory
 * could not be used: the hint is off, nothing fails). */
bool cpu_waiters_others(int cpu, uint32_t now_ms);

/* The table's file name in the private directory (util/private_dir.h). */
#define CPU_WAITERS_FILE "cpu-waiters-v1"

#endif
