#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A cache that manages itself (docs/cli.md): statistics of hits and misses, a size cap with
# least-recently-used eviction after each store (a hit refreshes its entry), `cache prune`
# (unused entries, entries of another fusegen version, leftovers), stale entries reported by
# `verify` without failing it, and `cache export` / `import` of exactly what a set of layers
# needs (a hostile archive refused). Ages are made by setting file times, never by waiting.
# usage: tests/test_cache_management.sh FUSEGEN_BINARY
set -u
fusegen=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/fusegen-cache-mgmt-XXXXXX")
trap 'rm -rf "$work"' EXIT
export FUSEGEN_CACHE_DIR=$work/user XDG_CACHE_HOME=$work/unused-xdg FUSEGEN_CACHE_PATH= TMPDIR=$work
unset FUSEGEN_CACHE_MAX_SIZE
passed=0
failed=0
fg() { timeout 300 "$fusegen" "$@"; }
ok() { if eval "$1"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $2" >&2; fi; }
spec() { # spec NAME SIZE: a small layer
  cat >"$work/$1.lua" <<LUA
return layer "$1" {
  input = { "N", 2, $2, $2 },
  conv2d { out_channels = 4, kernel = 3 },
  relu {},
}
LUA
}
spec a 8
spec b 9
spec c 10
entries() { fg cache ls 2>/dev/null | awk '{print $3 "/" $2}' | sort | tr '\n' ' '; }

# statistics: two compiles, then a hit
fg build --arch sm_80,sm_90 "$work/a.lua" >/dev/null 2>&1
fg build --arch sm_90 "$work/a.lua" >/dev/null 2>&1
out=$(fg cache stats)
ok 'grep -q "lookups 3: 1 hits, 2 misses" <<<"$out"' "cache stats after 2 compiles and a hit: $out"
ok 'grep -qE "saved by the hits [0-9]*\.[0-9] s" <<<"$out"' "cache stats says what the hits saved: $out"

# the size cap: one entry is ~50 KB; a cap of 120k keeps two. a sm_80, a sm_90 stored; a
# hit on a sm_80 makes a sm_90 the least recently used, so b sm_90 evicts it
fg build --arch sm_80 "$work/a.lua" >/dev/null 2>&1
FUSEGEN_CACHE_MAX_SIZE=120k fg build --arch sm_90 "$work/b.lua" >/dev/null 2>&1
got=$(entries)
ok '[ "$got" = "a/sm_80 b/sm_90 " ]' "after the size cap evicted the least recently used: '$got'"
ok '[ $(find "$work/user" -name "*.fgp" | wc -l) -eq 2 ]' "the evicted entry's plan alias went with it"

# prune --older-than: an entry not used for 40 days goes
touch -d '40 days ago' "$(find "$work/user" -name '*.fgc' | head -1)"
out=$(fg cache prune --older-than 30d 2>&1)
ok 'grep -q "1 unused" <<<"$out"' "prune --older-than 30d: $out"
ok '[ $(find "$work/user" -name "*.fgc" | wc -l) -eq 1 ]' "one entry left after prune --older-than"

# an entry another fusegen version wrote: verify says STALE and passes; prune removes it
fg build --arch sm_90 "$work/c.lua" >/dev/null 2>&1
stale=$(find "$work/user" -name '*.fgc' -newer "$work/c.lua" | head -1)
python3 - "$stale" <<'PY'
import hashlib, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[92:108] = b"0.0.9".ljust(16, b"\0")          # the generator version field of the header
data[-32:] = hashlib.blake2b(bytes(data[:-32]), digest_size=32).digest()
open(path, "wb").write(bytes(data))
PY
out=$(fg cache verify 2>&1); rc=$?
ok '[ $rc -eq 0 ] && grep -q "STALE .*written by fusegen 0.0.9" <<<"$out"' "verify with a stale entry (exit $rc): $out"
mkdir -p "$work/user/ab" && printf x >"$work/user/ab/.abc.tmp.Q1w2e3" && touch -d '2 hours ago' "$work/user/ab/.abc.tmp.Q1w2e3"
out=$(fg cache prune 2>&1)
ok 'grep -q "removed 1 entries of other fusegen versions" <<<"$out" && grep -q "1 unfinished temporary files" <<<"$out"' "prune of a stale entry and an old temporary: $out"
ok '[ ! -e "$stale" ]' "the stale entry is gone"

# export exactly what a layer needs (the default architectures, sm_80 and sm_90a), import it into an empty cache
fg build --arch sm_80,sm_90a "$work/a.lua" "$work/b.lua" >/dev/null 2>&1
out=$(fg cache export -o "$work/a.tar" "$work/a.lua" 2>&1); rc=$?
ok '[ $rc -eq 0 ] && [ $(tar -tf "$work/a.tar" | grep -c "\.fgc$") -eq 2 ] && [ $(tar -tf "$work/a.tar" | grep -c "\.fgp$") -eq 2 ]' "export of a.lua for 2 archs: $out"
out=$(fg cache import --cache "$work/shipped" "$work/a.tar" 2>&1); rc=$?
ok '[ $rc -eq 0 ] && grep -q "imported 2 entries and 2 plan aliases" <<<"$out"' "import: $out"
got=$(FUSEGEN_CACHE_DIR=$work/shipped entries)
ok '[ "$got" = "a/sm_80 a/sm_90a " ]' "the imported cache holds a.lua's two entries only: '$got'"
out=$(fg cache verify --cache "$work/shipped" 2>&1); rc=$?
ok '[ $rc -eq 0 ] && grep -q "2 entries, 0 bad" <<<"$out"' "the imported cache verifies: $out"
# a hostile archive: a symbolic link member is refused before anything is extracted
mkdir -p "$work/evil/ab" && ln -s /etc "$work/evil/ab/link" && tar -cf "$work/evil.tar" -C "$work/evil" .
out=$(fg cache import --cache "$work/victim" "$work/evil.tar" 2>&1); rc=$?
ok '[ $rc -eq 1 ] && grep -q "refusing the archive" <<<"$out" && [ ! -e "$work/victim/ab/link" ]' "a symlink member (exit $rc): $out"
# a layer whose conv engine the runtime times at the first run (8 -> 64 channels, 3x3, fp32 on
# sm_90a: runtime/tuning.h): build stores both plans' kernels and export ships both
cat >"$work/t.lua" <<LUA
return layer "t" {
  input = { "N", 8, 12, 12 },
  conv2d { out_channels = 64, kernel = 3 },
  relu {},
}
LUA
out=$(fg build --arch sm_90a --cache "$work/tuned" "$work/t.lua" 2>&1); rc=$?
ok '[ $rc -eq 0 ] && grep -q "timed against another at the first run" <<<"$out" && [ $(find "$work/tuned" -name "*.fgc" | wc -l) -eq 2 ]' "build of a timed layer stores two kernel sets: $out"
out=$(fg cache export --arch sm_90a --cache "$work/tuned" -o "$work/t.tar" "$work/t.lua" 2>&1); rc=$?
ok '[ $rc -eq 0 ] && [ $(tar -tf "$work/t.tar" | grep -c "\.fgc$") -eq 2 ] && [ $(tar -tf "$work/t.tar" | grep -c "\.fgp$") -eq 2 ]' "export of a timed layer ships both plans: $out"
out=$(FUSEGEN_TUNE=0 fg build --arch sm_90a --cache "$work/untuned" "$work/t.lua" 2>&1); rc=$?
ok '[ $rc -eq 0 ] && [ $(find "$work/untuned" -name "*.fgc" | wc -l) -eq 2 ]' "FUSEGEN_TUNE=0 on the builder's machine: a cache to ship still holds both plans: $out"
out=$(FUSEGEN_TUNE=off fg plan --arch sm_90a "$work/t.lua" 2>&1); rc=$?
ok '[ $rc -eq 0 ] && ! grep -q "^engine:" <<<"$out"' "FUSEGEN_TUNE=off: plan says no timing: $out"
out=$(fg plan --arch sm_90a "$work/t.lua" 2>&1); rc=$?
ok '[ $rc -eq 0 ] && grep -q "^engine: the FMA engine or wgmma" <<<"$out"' "plan says the engine is timed: $out"

# usage
out=$(fg cache export "$work/a.lua" 2>&1); rc=$?
ok '[ $rc -eq 2 ]' "export without -o: exit $rc"
out=$(fg cache prune --max-size lots 2>&1); rc=$?
ok '[ $rc -eq 2 ] && grep -q "expects a size" <<<"$out"' "prune --max-size lots: $out"

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
