#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CLI on block specs (docs/spec.md, "Blocks"): `fusegen plan` prints the wiring, each
# layer's plan, the block's kernels in run order and its workspace; `fusegen gen -o` writes
# one source per layer; `fusegen run --device cpu` runs the block's reference and writes its
# output; `fusegen build` precompiles every layer of a block with no GPU, and `build --check`
# finds them as the runtime would; a bad block exits 1 with file:line and the field; a plain
# layer spec is unchanged.
# usage: tests/test_cli_blocks.sh FUSEGEN_BINARY SOURCE_DIR
set -u
fusegen=$1
src=$2
CLI_TEST=cli-blocks
. "$(dirname "$0")/cli_check.sh"
# layers listed out of order: c reads b and the block input, b reads a
cat >"$work/blk.lua" <<'LUA'
return block "blk" {
  input = { "N", 8, 6, 6 },
  output = "c",
  layer "c" { from = "b",
    conv2d { name = "conv3", out_channels = 8, kernel = 1, bias = false },
    batch_norm { name = "bn3", stats = "running" }, add { tensor = "input" }, relu {} },
  layer "a" { from = "input",
    conv2d { name = "conv1", out_channels = 4, kernel = 1, bias = false },
    batch_norm { name = "bn1", stats = "running" }, relu {} },
  layer "b" { from = "a",
    conv2d { name = "conv2", out_channels = 4, kernel = 3, padding = 1, bias = false }, relu {} },
}
LUA
out=$("$fusegen" plan --arch sm_80 "$work/blk.lua" 2>&1)
check "plan: wiring" "block blk ($work/blk.lua): 3 layers, run in this order" "$out"
check "plan: c reads b and the input" "layer  c            [N, 8, 6, 6] <- b + tensor input   (line 4)" "$out"
check "plan: the tensor operand" "add tensor input" "$out"
check "plan: kernel order" "$(printf '   0  a            fg_pass0_conv\n   1  b            fg_pass0_conv\n   2  c            fg_pass0_conv')" "$out"
check "plan: workspace" "in all N x 288 floats + the scratch" "$out"
out=$("$fusegen" gen --arch sm_80 -o "$work/gen" "$work/blk.lua" 2>&1)
check "gen: a" "wrote $work/gen/blk.a.cu" "$out"
check "gen: c" "wrote $work/gen/blk.c.cu" "$out"
check "gen: the residual read per sample" "[(fg_u64)n * 288 + " "$(cat "$work/gen/blk.c.cu" 2>&1)"
out=$("$fusegen" run --device cpu --batch 2 --out "$work/y.safetensors" "$work/blk.lua" 2>&1)
check "run: cpu" "block of 3 layers: output [2, 8, 6, 6] on the CPU (reference)" "$out"
check "run: wrote" "wrote $work/y.safetensors" "$out"
# the shipped block specs plan
for s in resnet50_bottleneck sd_resnet_block nnunet_stage; do
  out=$("$fusegen" plan "$src/specs/blocks/$s.lua" 2>&1)
  check "plan $s" "block kernels, in order on one stream:" "$out"
done
# errors: an unknown tensor; a cycle; exit status 1
cat >"$work/bad.lua" <<'LUA'
return block "bad" {
  input = { "N", 4, 6, 6 },
  layer "a" { conv2d { out_channels = 4, kernel = 1 }, mul { tensor = "inptu" } },
}
LUA
out=$("$fusegen" plan "$work/bad.lua" 2>&1)
rc=$?
check "bad: status" "rc=1" "rc=$rc"
check "bad: message" "$work/bad.lua:3: mul: field 'tensor' names no tensor of the block: 'inptu' (did you mean 'input'?)" "$out"
out=$("$fusegen" run --device cpu "$work/bad.lua" 2>&1)
check "bad run: message" "$work/bad.lua:3: mul: field 'tensor' names no tensor of the block" "$out"
# a layer after the first that the runtime refuses: its message survives freeing the layers
# made before it
cat >"$work/res.lua" <<'LUA'
return block "res" {
  input = { "N", 8, 6, 6 },
  layer "a" { conv2d { name = "c1", out_channels = 8, kernel = 1 } },
  layer "b" { strategy = "resident", conv2d { name = "c2", out_channels = 8, kernel = 3, padding = 1 } },
}
LUA
out=$("$fusegen" run --device cpu "$work/res.lua" 2>&1)
check "second layer refused: message" 'strategy "resident" is not possible for this layer' "$out"
# a plain layer spec prints as before (no block lines)
out=$("$fusegen" plan "$src/specs/kb92.lua" 2>&1)
check "layer: unchanged" "layer kb92_conv2d_groupnorm_tanh_hardswish_residual_logsumexp" "$out"
if grep -q "^block " <<<"$out"; then failed=$((failed + 1)); echo "FAIL a layer spec printed as a block" >&2; fi
# build: every layer of every shipped block for both architectures, no GPU; then --check
# loads each block as the runtime does (a CPU-only context per architecture) and looks each
# layer's kernels up as its first prepare would: all there, none compiled a second time
blocks=("$src"/specs/blocks/*.lua)
n_layers=0
for s in "${blocks[@]}"; do
  n_layers=$((n_layers + $("$fusegen" plan --arch sm_80 "$s" 2>&1 | grep -c '^  layer  ')))
done
out=$("$fusegen" build --arch sm_90a,sm_80 --cache "$work/ship" "${blocks[@]}" 2>&1)
rc=$?
check "build blocks: status" "rc=0" "rc=$rc"
check "build blocks: counted" "(${#blocks[@]} specs of $n_layers layers x 2 archs" "$out"
check "build blocks: a block's layer" "resnet50_bottleneck.b sm_80: compiled" "$out"
check "build blocks: none failed" " 0 failed" "$out"
out=$("$fusegen" build --check --arch sm_90a,sm_80 --cache "$work/ship" "${blocks[@]}" 2>&1)
rc=$?
check "check blocks: status" "rc=0" "rc=$rc"
check "check blocks: a layer" "cached   sm_90a  sd_resnet_block.out: entry " "$out"
if grep -q MISSING <<<"$out"; then failed=$((failed + 1)); echo "FAIL check: a layer is missing: $out" >&2; fi
cached=$(grep -c '^cached ' <<<"$out")
check "check blocks: every layer of every block" "cached=$((2 * n_layers))" "cached=$cached"
out=$("$fusegen" build --arch sm_90a,sm_80 --cache "$work/ship" "${blocks[@]}" 2>&1)
check "build blocks again: nothing to compile" "0 compiled, " "$out"
# the cache export of a block names every layer's entry and plan alias
out=$("$fusegen" cache export --arch sm_90a --cache "$work/ship" -o "$work/ship.tar" "$src/specs/blocks/resnet50_bottleneck.lua" 2>&1)
check "export block" "(1 specs of 3 layers x 1 archs" "$out"
# --check on an empty cache: each layer missing, exit 1; a layer spec checks as before
out=$("$fusegen" build --check --arch sm_80 --cache "$work/empty" "$work/blk.lua" 2>&1)
rc=$?
check "check empty: status" "rc=1" "rc=$rc"
check "check empty: a layer" "MISSING  sm_80   blk.b: no entry for the plan alias " "$out"
check "check empty: summary" "0 of the 3 kernel sets the runtime would load are in $work/empty" "$out"
# a bad block: file, line and field, exit 1, nothing built
out=$("$fusegen" build --arch sm_80 --cache "$work/bad" "$work/bad.lua" 2>&1)
rc=$?
check "build bad: status" "rc=1" "rc=$rc"
check "build bad: message" "$work/bad.lua:3: mul: field 'tensor' names no tensor of the block" "$out"
[ -e "$work/bad" ] && { failed=$((failed + 1)); echo "FAIL build bad: created $work/bad" >&2; }
# bench on a block: a bad spec is an error before any GPU work (file, line, field; exit 1);
# the timing itself needs a GPU: its line where there is one, else the driver's error (exit 1)
out=$("$fusegen" bench --batch 2 "$work/bad.lua" 2>&1)
rc=$?
check "bench bad: status" "rc=1" "rc=$rc"
check "bench bad: message" "$work/bad.lua:3: mul: field 'tensor' names no tensor of the block" "$out"
out=$("$fusegen" bench --batch 2 --iters 3 --warmup 1 --cache "$work/ship" "$src/specs/blocks/resnet50_bottleneck.lua" 2>&1)
rc=$?
skipped=0
if grep -qF "median" <<<"$out"; then
  check "bench block: status" "rc=0" "rc=$rc"
  check "bench block: the layer bench's line" "resnet50_bottleneck on " "$out"
  check "bench block: batch and median" ", batch 2: median " "$out"
  check "bench block: prepared" "kernels of 3 layers in " "$out"
else
  check "bench block, no GPU: status" "rc=1" "rc=$rc"
  check "bench block, no GPU: says why" "fusegen: " "$out"
  skipped=$((skipped + 1))
  echo "skipped: fusegen bench's timing of a block (no GPU: $(head -1 <<<"$out"))" >&2
fi
echo "cli_blocks: $passed passed, $failed failed, $skipped skipped (GPU only)"
[ "$failed" -eq 0 ]
