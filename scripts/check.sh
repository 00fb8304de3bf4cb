#!/bin/sh
# check.sh - the README's test command: install what is missing, build the
# normal and the sanitizer (ASan+UBSan) builds, run every spec under both,
# and end with one line "N passed, N failed, N skipped" over the two runs.
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
make -s --no-print-directory test-asan || true
make -s --no-print-directory test || true
exec luajit spec/support/summary.lua build-asan/spec-summary build/spec-summary
