#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A cache that trusts only what it should (docs/hardening.md, the second hardening round),
# through the CLI: files another local user could plant or a killed store leaves behind.
#   - a store killed half-way leaves .KEY.tmp.XXXXXX: `cache verify` reports it, `cache
#     clear` removes it;
#   - a subdirectory that is a symbolic link is refused: never read, written or emptied
#     through (`cache clear` used to delete the files it points to);
#   - a FIFO planted as an entry or a plan alias hung build, ls, verify and the runtime's
#     lookup in open(); now each is refused as "not a regular file" and nothing blocks (every
#     command runs under `timeout`, which only matters if it hangs);
#   - a cache directory writable by every user, or owned by another user, is refused.
# usage: tests/test_hostile_cache.sh FUSEGEN_BINARY
set -u
fusegen=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/fusegen-hostile-XXXXXX")
trap 'chmod -R u+rwx "$work" 2>/dev/null; rm -rf "$work"' EXIT
export FUSEGEN_CACHE_DIR=$work/unused-user-cache XDG_CACHE_HOME=$work/unused-xdg FUSEGEN_CACHE_PATH= TMPDIR=$work
fail=0
cases=0
die() { echo "FAIL: $*" >&2; fail=1; }
check() { cases=$((cases + 1)); }
fg() { timeout 120 "$fusegen" "$@"; }

spec=$work/small.lua
cat >"$spec" <<'LUA'
return layer "hostile_small" {
  input = { "N", 2, 8, 8 },
  conv2d { out_channels = 4, kernel = 3 },
  relu {},
}
LUA
cache=$work/cache
fg build --arch sm_90 --cache "$cache" "$spec" >/dev/null 2>&1 || die "the first build failed"
entry=$(find "$cache" -name '*.fgc' | head -1)
alias=$(find "$cache" -name '*.fgp' | head -1)
[ -n "$entry" ] && [ -n "$alias" ] || die "the build stored no entry or alias"
sub=$(dirname "$entry")

# 1. an unfinished store's temporary file
check
tmp="$sub/.$(basename "$entry" .fgc).tmp.AbC123"
printf 'partial' >"$tmp"
out=$(fg cache verify --cache "$cache" 2>&1); rc=$?
[ $rc -eq 0 ] || die "verify with a temporary file exited $rc: $out"
grep -q "TEMP $tmp: a store that never finished" <<<"$out" || die "verify did not report $tmp: $out"
grep -q "1 unfinished temporary files" <<<"$out" || die "verify's summary does not count it: $out"
out=$(fg cache clear --cache "$cache" 2>&1) || die "clear failed: $out"
[ ! -e "$tmp" ] || die "clear left $tmp"
grep -q "1 temporary files" <<<"$out" || die "clear did not count the temporary file: $out"

# 2. a subdirectory that is a symbolic link: refused, nothing deleted through it
check
fg build --arch sm_90 --cache "$cache" "$spec" >/dev/null 2>&1 || die "the rebuild failed"
mkdir -p "$work/elsewhere"
mv "$sub" "$work/elsewhere/"
ln -s "$work/elsewhere/$(basename "$sub")" "$sub"
victims=$(ls "$work/elsewhere/$(basename "$sub")" | wc -l)
out=$(fg cache clear --cache "$cache" 2>&1)
[ "$(ls "$work/elsewhere/$(basename "$sub")" | wc -l)" -eq "$victims" ] || die "clear deleted files through a symlinked subdirectory: $out"
grep -q "REFUSED .*is a symbolic link" <<<"$out" || die "clear did not report the symlinked subdirectory: $out"
out=$(fg cache verify --cache "$cache" 2>&1); rc=$?
[ $rc -eq 1 ] || die "verify with a symlinked subdirectory exited $rc (expected 1): $out"
out=$(fg build --arch sm_90 --cache "$cache" "$spec" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "NOT stored: .*is a symbolic link" <<<"$out" || die "build wrote through a symlinked subdirectory (exit $rc): $out"
rm "$sub"

# 3. a FIFO planted as the entry, then as the plan alias: nothing blocks
check
rm -rf "$cache"
fg build --arch sm_90 --cache "$cache" "$spec" >/dev/null 2>&1 || die "the build before the FIFO failed"
rm -f "$alias"
rm "$entry"
mkfifo "$entry"
out=$(fg cache ls --cache "$cache" 2>&1); rc=$?
[ $rc -ne 124 ] || die "cache ls hung on a FIFO entry"
grep -q "not a regular file" <<<"$out" || die "cache ls did not report the FIFO entry: $out"
out=$(fg cache verify --cache "$cache" 2>&1); rc=$?
[ $rc -eq 1 ] || die "cache verify on a FIFO entry exited $rc (expected 1; 124: hung): $out"
out=$(fg build --arch sm_90 --cache "$cache" "$spec" 2>&1); rc=$?
[ $rc -eq 0 ] || die "build with a FIFO entry exited $rc (124: hung): $out"
grep -q "not a regular file" <<<"$out" || die "build did not report the FIFO entry: $out"
[ -f "$entry" ] && [ ! -p "$entry" ] || die "the rebuilt entry did not replace the FIFO"
rm -f "$alias"
mkfifo "$alias"
out=$(fg cache verify --cache "$cache" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "not a regular file" <<<"$out" || die "verify on a FIFO alias exited $rc: $out"
rm -f "$alias"

# 4. a cache directory every user can write, or another user owns: refused
check
chmod 0777 "$cache"
out=$(fg cache ls --cache "$cache" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "writable by every user (mode 0777)" <<<"$out" || die "ls used a world-writable cache (exit $rc): $out"
out=$(fg build --arch sm_90 --cache "$cache" "$spec" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "NOT stored: .*writable by every user" <<<"$out" || die "build stored into a world-writable cache (exit $rc): $out"
chmod 0700 "$cache"
chmod 0775 "$sub"
out=$(fg cache verify --cache "$cache" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "REFUSED .*writable by its group" <<<"$out" || die "verify entered a group-writable subdirectory (exit $rc): $out"
chmod 0755 "$sub"
if [ "$(id -u)" -eq 0 ]; then
  check
  chown 65534 "$cache"
  out=$(fg cache ls --cache "$cache" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "owned by uid 65534" <<<"$out" || die "ls used a cache owned by uid 65534 (exit $rc): $out"
  chown 0 "$cache"
else
  echo "# not root: the foreign-owner case needs chown and is skipped"
fi

if [ $fail -eq 0 ]; then
  echo "$cases passed, 0 failed"
else
  echo "$((cases - 1)) passed, 1 failed"
fi
exit $fail
