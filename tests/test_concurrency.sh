#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Eight `fusegen build` processes fill one empty cache with the same two specs at the same
# time. Every one must succeed (each compiles and stores, or finds the other's entry), and
# afterwards `fusegen cache verify` must find exactly one valid entry per spec, no bad one,
# and no temporary file (.KEY.tmp.XXXXXX) left behind by any writer.
#
# usage: tests/test_concurrency.sh FUSEGEN_BINARY SOURCE_DIR [PROCESSES]
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 FUSEGEN_BINARY SOURCE_DIR [PROCESSES]" >&2
  exit 2
fi
fusegen=$1
src=$2
n=${3:-8}
specs=("$src/specs/kb79.lua" "$src/specs/kb21.lua")
expected=${#specs[@]} # one architecture: one entry per spec

work=$(mktemp -d "${TMPDIR:-/tmp}/fusegen-concurrency-XXXXXX")
trap 'rm -rf "$work"' EXIT
cache=$work/cache
# nothing below may touch a user's cache, and NVRTC failures save their source in $TMPDIR
export FUSEGEN_CACHE_DIR=$work/unused-user-cache XDG_CACHE_HOME=$work/unused-xdg FUSEGEN_CACHE_PATH= TMPDIR=$work
fail=0
die() { echo "FAIL: $*" >&2; fail=1; }

start=$(date +%s.%N)
pids=()
for i in $(seq 1 "$n"); do
  "$fusegen" build --arch sm_90 --cache "$cache" "${specs[@]}" >"$work/out.$i" 2>"$work/err.$i" &
  pids+=($!)
done
compiled=0
for i in $(seq 1 "$n"); do
  if wait "${pids[$((i - 1))]}"; then
    :
  else
    rc=$?
    die "builder $i exited with $rc:"
    sed 's/^/    /' "$work/err.$i" >&2
  fi
  if grep -q "NOT stored" "$work/err.$i"; then
    die "builder $i could not store an entry:"
    sed 's/^/    /' "$work/err.$i" >&2
  fi
  c=$(grep -c "compiled in" "$work/err.$i")
  compiled=$((compiled + c))
done
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "$n builders finished in ${elapsed} s; $compiled kernel sets compiled in all (the rest found in the cache)"

verify_out=$("$fusegen" cache verify --cache "$cache" 2>&1)
verify_rc=$?
echo "cache verify: $verify_out"
[ $verify_rc -eq 0 ] || die "fusegen cache verify exited with $verify_rc"
echo "$verify_out" | grep -q ": $expected entries, 0 bad," ||
  die "cache verify should report $expected entries and 0 bad"
echo "$verify_out" | grep -q "^BAD" && die "cache verify found a bad entry"

entries=$(find "$cache" -type f -name '*.fgc' | wc -l)
[ "$entries" -eq "$expected" ] || die "$entries entry files on disk, expected $expected"
leftovers=$(find "$cache" -name '.*.tmp.*')
[ -z "$leftovers" ] || die "temporary files left in the cache: $leftovers"
aliases=$(find "$cache" -type f -name '*.fgp' | wc -l)
[ "$aliases" -eq "$expected" ] || die "$aliases plan aliases on disk, expected $expected (one per entry)"
echo "$verify_out" | grep -q "bytes of cubins, $expected plan aliases" ||
  die "cache verify should count $expected plan aliases"
others=$(find "$cache" -type f ! -name '*.fgc' ! -name '*.fgp')
[ -z "$others" ] || die "unexpected files in the cache: $others"

# a ninth build finds everything and compiles nothing
again=$("$fusegen" build --arch sm_90 --cache "$cache" "${specs[@]}" 2>&1) || die "the rebuild failed: $again"
echo "$again" | grep -q "0 compiled, $expected already in the cache" || die "the rebuild compiled again: $again"

if [ $fail -ne 0 ]; then
  echo "test_concurrency: FAILED" >&2
  exit 1
fi
echo "test_concurrency: OK ($n concurrent builders, $expected entries, 0 bad, no temporary files)"
