#!/bin/sh
# deps.sh - install the Debian 12 packages tbrt needs, only those missing
# (idempotent). Both README commands run it first. Needs root (or sudo).
#
#   scripts/deps.sh           build, run and test
#   scripts/deps.sh bench     also the anchor tools of `make bench`
set -eu

# ibverbs-utils, perftest, rdmacm-utils: Debian's verbs programs, run
# unmodified on tbrt's libibverbs by spec/verbs_programs_spec.lua; librdmacm-dev:
# rdma/rdma_cma.h, the API tbrt's own librdmacm (bindings/verbs/rdmacm) implements;
# ucx-utils: ucx_perftest on tbrt's libibverbs (spec/verbs_ucx_spec.lua)
PKGS="build-essential pkg-config luajit libluajit-5.1-dev libuv1-dev lua-luv lua-luv-dev
libibverbs-dev lua-busted lua-cjson lua-argparse iproute2 procps"
# tbrt exec: the Debian verbs programs its specs run unmodified
PKGS="$PKGS ibverbs-utils perftest rdmacm-utils librdmacm-dev ucx-utils util-linux"
# tbrt matrix: its plots, and the launchers its specs start for real
# (OpenSSH's sshd, Open MPI's mpirun, a one-node Slurm with munge)
PKGS="$PKGS gnuplot-nox openssh-client openssh-server openmpi-bin mpich slurmctld slurmd slurm-client munge"
# the bench's anchor for a ring of processes, Open MPI's (scripts/bench/mpi_ring.c):
# mpicc's headers, so spec/bench_tools_spec.lua builds and runs it as bench does
PKGS="$PKGS libopenmpi-dev"
# the soft device's UDP wire: tshark decodes its captures (spec/soft_pcap_spec.lua),
# nft drops its packets on the way out (spec/soft_udp_netns_spec.lua, bench's 1% loss)
PKGS="$PKGS tshark nftables"
# make fuzz: clang and its libFuzzer runtime (spec/fuzz_udp_wire_spec.lua,
# spec/fuzz_shm_wire_spec.lua, spec/fuzz_link_frames_spec.lua)
PKGS="$PKGS clang libclang-rt-14-dev"
if [ "${1:-}" = bench ]; then
  PKGS="$PKGS qperf ucx-utils libucx0"
fi

missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "deps.sh: need root to install:$missing" >&2
    exit 1
  fi
else
  SUDO=
fi
echo "deps.sh: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
