/* bench_common.h - what the C-driven benchmarks of `make bench` share
 * (tbrt_bench.c, tbrt_stream.c, tbrt_scale.c, ...): links between
 * processes made with the plain C API (bootstrap TCP, probe, the default
 * caps exchange, activate), the message pattern and its check, the clock,
 * the process's memory.
 * Every wait is bounded; any failure ends the program with a message. */
#ifndef TBRT_BENCH_COMMON_H
#define TBRT_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tbrt.h"
#include "bench_pattern.h"

/* Bound of every blocking call and of the caps exchange, seconds. */
#define BENCH_TIMEOUT 60.0

double bench_now(void);
void bench_die(const char *what, tbrt_link *l) __attribute__((noreturn));

/* A TCP listener on 127.0.0.1 (port 0: any); its port in *port. */
int bench_listen(int *port);
/* One bootstrap connection, either side. */
int bench_accept(int ls);
int bench_connect(int port);
/* Probe on a connected socket, exchange caps (each side writes its own,
 * then reads the peer's), activate; the ready link. pers "-" or NULL: the
 * device's default personality. $TBRT_BENCH_SPIN (seconds) sets opts.spin. */
tbrt_link *bench_link(int fd, const char *dev, const char *pers);

/* flush, waiting (bounded) while it returns -EAGAIN: a tcp link's socket
 * may be full, and the C API has no blocking flush. */
void bench_flush(tbrt_link *l);

/* memcmp of n bytes at offset off of message idx against want (stamped
 * with idx); exits naming the message on a difference. */
void bench_check(const uint8_t *got, const uint8_t *want, size_t off, size_t n, uint64_t idx);
/* The same against the pattern computed, without a reference: bytes
 * [off, off + n) of message idx, at p (a piece as it arrived, where it
 * lies), read once. */
void bench_check_span(const uint8_t *p, size_t off, size_t n, uint64_t idx);

/* Resident and virtual size of this process, KiB (/proc/self/statm). */
void bench_mem_kib(long *rss, long *vsz);

/* Median of n doubles (sorts them). */
double bench_median(double *v, int n);

#endif
