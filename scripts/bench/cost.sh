#!/usr/bin/env bash
# cost.sh - instructions per operation, from callgrind (deterministic: the
# same on a loaded machine as on an idle one), for deciding between designs.
#
#   scripts/bench/cost.sh [BUILD]       (default build/; needs valgrind)
#
# Prints one line per figure: 'name instructions': an 8 B and a 64 B round
# trip (both ends in one process, so both ends' work) with 1 and 64 links
# open, an 8 B message's path in its two halves (the sender's send + flush,
# the receiver's recv that finds it), one idle look (what a waiting
# receiver repeats), one link's setup (both ends) as the 1st, 2nd and
# 64th link, and the 8 B round trip driven from Lua (scripts/bench/cost_lua.lua:
# the same as the C one but through the Lua API; JIT code has no names for
# callgrind, so it is the difference between a run of N and one of 2N).
set -eu
B=${1:-build}
own_fabric=${TBRT_SOFT_FABRIC:+no}
export TBRT_SOFT_FABRIC=${TBRT_SOFT_FABRIC:-cost-$$}
command -v valgrind >/dev/null || { echo "cost.sh: valgrind is not installed" >&2; exit 1; }
T=$(mktemp -d /tmp/tbrt-cost.XXXXXX)
# a fabric of our own goes with us (its registry stays in the private
# directory after the programs exit)
cleanup() {
  rm -rf "$T"
  if [ -z "$own_fabric" ]; then rm -f "/dev/shm/tbrt-$(id -u)/$TBRT_SOFT_FABRIC"-*; fi
}
trap cleanup EXIT
ir() {   # ir FUNCTION ARGS... -> instructions inside FUNCTION
  local fn=$1; shift
  valgrind --tool=callgrind --toggle-collect="$fn" --callgrind-out-file="$T/out" \
    "$B/tbrt-cost" "$@" >"$T/stdout" 2>"$T/stderr" || { cat "$T/stderr" >&2; return 1; }
  awk '/^summary:/{print $2}' "$T/out"
}
PERS=${TBRT_COST_PERSONALITY:-linux-rc}
N=2000
for size in 8 64; do
  for links in 1 64; do
    v=$(ir cost_pingpong soft "$PERS" pingpong "$size" "$N" "$links")
    echo "round_trip_${size}b_${links}links $(( v / N ))"
  done
done
# one message's path, each half (2 messages a round trip)
for half in send recv; do
  v=$(ir cost_$half soft "$PERS" paths 8 "$N" 1)
  echo "${half}_path_8b $(( v / (2 * N) ))"
done
for links in 1 64; do
  v=$(ir cost_idle soft "$PERS" idle 8 "$N" "$links")
  echo "idle_look_${links}links $(( v / N ))"
done
# the first link of a process pays once for what all share (the private
# directory's sweep, ...): compare the 2nd with the 64th
for links in 1 2 64; do
  echo "setup_${links}links $(ir cost_setup soft "$PERS" setup 0 0 "$links")"
done
# Lua: whole runs of N and 2 N round trips (JIT code runs under callgrind
# with --smc-check: LuaJIT patches its traces when it links them)
total() {
  valgrind --tool=callgrind --smc-check=all-non-file --callgrind-out-file="$T/out" \
    "$B/tbrt" "$(dirname "$0")/cost_lua.lua" soft "$PERS" "$@" >"$T/stdout" 2>"$T/stderr" ||
    { cat "$T/stderr" >&2; return 1; }
  awk '/^summary:/{print $2}' "$T/out"
}
LN=10000
v1=$(total 8 "$LN")
v2=$(total 8 $((2 * LN)))
echo "lua_round_trip_8b_1links $(( (v2 - v1) / LN ))"
