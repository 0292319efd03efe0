#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CLI items of the second hardening round (docs/hardening.md): each command below was
# reproduced failing first (a device node replaced, open() blocking on a FIFO, an empty
# --cache meaning the real user cache, values clamped or accepted with spaces, a zero-batch
# input reading an uninitialized rank, a reference run of minutes with no word) and must now
# be refused with the exit status and message given. Commands run under `timeout`, which
# only matters if one hangs.
# usage: tests/test_cli_hardening.sh FUSEGEN_BINARY SOURCE_DIR
set -u
fusegen=$1
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/fusegen-cli-hardening-XXXXXX")
trap 'rm -rf "$work"' EXIT
export FUSEGEN_CACHE_DIR=$work/user-cache XDG_CACHE_HOME=$work/unused-xdg FUSEGEN_CACHE_PATH= TMPDIR=$work
passed=0
failed=0
fg() { timeout 120 "$fusegen" "$@"; }
# expect STATUS FRAGMENT -- COMMAND...: the command exits STATUS and says FRAGMENT
expect() {
  local want=$1 fragment=$2
  shift 3
  local out rc
  out=$(fg "$@" 2>&1)
  rc=$?
  if [ $rc -eq "$want" ] && grep -qF -- "$fragment" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: fusegen $* exited $rc (expected $want) and said:" >&2
    sed 's/^/    /' <<<"$out" | head -8 >&2
    echo "  expected to find: $fragment" >&2
  fi
}
spec=$src/specs/kb79.lua
small=$work/small.lua
cat >"$small" <<'LUA'
return layer "small" {
  input = { "N", 2, 6, 6 },
  conv2d { name = "conv", out_channels = 3, kernel = 3 },
}
LUA

# --out onto a FIFO (and, as root, a character device): refused, the node left alone
mkfifo "$work/fifo"
expect 1 "is not a regular file; refusing to replace it" -- run "$small" --device cpu --out "$work/fifo"
[ -p "$work/fifo" ] || { failed=$((failed + 1)); echo "FAIL: --out replaced the FIFO" >&2; }
if [ "$(id -u)" -eq 0 ]; then
  mknod "$work/null" c 1 3
  expect 1 "is not a regular file; refusing to replace it" -- run "$small" --device cpu --out "$work/null"
  [ -c "$work/null" ] || { failed=$((failed + 1)); echo "FAIL: --out replaced the device node" >&2; }
  mkdir "$work/out" && mknod "$work/out/small.cu" c 1 3
  expect 1 "is not a regular file; refusing to replace it" -- gen "$small" -o "$work/out"
  [ -c "$work/out/small.cu" ] || { failed=$((failed + 1)); echo "FAIL: gen replaced the device node" >&2; }
fi
# FIFOs given as a spec, weights or input: refused, not blocking
expect 1 "not a regular file" -- plan "$work/fifo"
expect 1 "not a regular file" -- run "$small" --device cpu --weights "$work/fifo"
expect 1 "not a regular file" -- run "$small" --device cpu --input "$work/fifo"
# an empty --cache is not the default user cache
for cmd in "cache clear" "cache ls" "build"; do
  # shellcheck disable=SC2086
  expect 2 "--cache expects a directory, got an empty string" -- $cmd --cache "" $([ "$cmd" = build ] && echo "$small")
done
expect 2 "--cache expects a directory" -- run "$small" --device cpu --cache ""
expect 2 "--cache expects a directory" -- bench "$small" --cache ""
# values: strict digits, in range
expect 2 "-j expects an integer from 1 to 64, got '1000000000'" -- build -j 1000000000 "$small"
expect 2 "--random expects an integer from 0 to" -- run "$small" --device cpu --random 99999999999999999999999
expect 2 "--batch expects an integer from 1 to" -- run "$small" --device cpu --batch " 5"
expect 2 "--batch expects an integer from 1 to" -- run "$small" --device cpu --batch +5
expect 2 "--iters expects an integer from 1 to" -- bench "$small" --iters 0x10
# an input tensor with a batch of 0 (valgrind: an uninitialized rank was read)
python3 - "$work/zero.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"input": {"dtype": "F32", "shape": [0, 2, 6, 6], "data_offsets": [0, 0]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h)
PY
expect 1 "has a batch of 0" -- run "$small" --device cpu --input "$work/zero.safetensors"
# the CPU reference's budget: refused before anything is allocated, unless --force
big=$work/big.lua
cat >"$big" <<'LUA'
return layer "big" {
  input = { "N", 1024, 16, 16 },
  conv2d { out_channels = 65536, kernel = 3 },
}
LUA
expect 1 "pass --force to run it anyway" -- run "$big" --device cpu
# architectures: validated against the NVRTC in use, before NVRTC sees them (no source left in TMPDIR)
expect 2 "is not supported by NVRTC" -- build --arch sm_101 --cache "$work/c" "$small"
expect 2 "is not supported by NVRTC" -- build --arch sm_999 --cache "$work/c" "$small"
if ls "$work"/fusegen-failed-* >/dev/null 2>&1; then
  failed=$((failed + 1))
  echo "FAIL: an unsupported architecture left a source in TMPDIR" >&2
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
