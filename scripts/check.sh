#!/bin/sh
# check.sh - the README's test command: install what is missing, build the
# normal and the sanitizer (ASan+UBSan) builds, run every spec under both,
# and end with one line "N passed, N failed, N skipped" over the two runs,
# after one line per run naming it (which count is the sanitizer's).
# Exit status 0 only when nothing failed. (Not a make target, so that make's
# own "*** Error" line can never come after the summary.)
set -u
cd "$(dirname "$0")/.."
./scripts/deps.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
rm -f build/spec-summary build-asan/spec-summary
if ! make -s --no-print-directory all || ! make -s --no-print-directory asan; then
  echo "check.sh: the build failed"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
# each run says which it is, at its start and on its last line (output.lua)
TBRT_SPEC_LABEL="sanitizer run (ASan+UBSan, build-asan)" make -s --no-print-directory test-asan || true
TBRT_SPEC_LABEL="normal run (build)" make -s --no-print-directory test || true
exec luajit spec/support/summary.lua build-asan/spec-summary build/spec-summary
