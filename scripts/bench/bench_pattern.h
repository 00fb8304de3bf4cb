/* bench_pattern.h - the bytes of a benchmark message and their check, in C
 * for the C-driven benchmarks and, as build/libtbrt-bench-pattern.so, for
 * the Lua twins (scripts/bench/stream.lua): both check alike, at the same
 * cost, so a Lua/C ratio measures the paths through tbrt, not the check.
 *
 * A message of n bytes: its index in bytes 0..7 (bench_stamp: as the host
 * stores a uint64_t), then 8-byte words that all differ (word k = BASE +
 * k * STEP mod 2^64, little endian, STEP odd), so a piece that lands at a
 * wrong offset shows (a pattern of period p hides a shift by a multiple
 * of p; tbrt's strides are 128 KiB). scripts/bench/pattern.lua makes the
 * same bytes. */
#ifndef TBRT_BENCH_PATTERN_H
#define TBRT_BENCH_PATTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The pattern's first n bytes (bytes 0..7 too: a message's index goes
 * there, bench_stamp). */
void bench_fill(uint8_t *b, size_t n);
void bench_stamp(uint8_t *b, size_t n, uint64_t idx);
/* Do bytes [a, e) of a message in b hold the pattern (bytes 0..7, the
 * index, are the caller's)? Computed, not compared with a reference: a
 * receiver checking a piece as it arrives reads only the piece. */
bool bench_pattern_holds(const uint8_t *b, size_t a, size_t e);
/* Byte `at` of message idx. */
uint8_t bench_pattern_byte(size_t at, uint64_t idx);
/* Do bytes [off, off + n) of message idx, at p (a piece where it lies: a
 * view, or a buffer it was copied to), hold their index and pattern? Read
 * once. (A bool: LuaJIT boxes a 64-bit result, an allocation a call.) */
bool bench_pattern_ok(const uint8_t *p, size_t off, size_t n, uint64_t idx);
/* The same, saying where: -1 when all hold, else the message offset of the
 * first byte that does not. */
long bench_pattern_bad(const uint8_t *p, size_t off, size_t n, uint64_t idx);

#endif
