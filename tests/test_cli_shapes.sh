#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The output shape the CLI reports for layers that end in shape ops (flatten, squeeze,
# unsqueeze, view/reshape): `fusegen plan` shows each value's shape, `fusegen run` on the CPU
# prints the output's and writes it to safetensors with it; a refused shape op exits 1 with
# the spec's file:line and field.
# usage: tests/test_cli_shapes.sh FUSEGEN_BINARY
set -u
fusegen=$1
CLI_TEST=cli-shapes
. "$(dirname "$0")/cli_check.sh"
cat >"$work/pooled.lua" <<'LUA'
return layer "pooled" {
  input = { "N", 3, 8, 8 },
  conv2d { out_channels = 8, kernel = 3, padding = 1 },
  relu {},
  global_avg_pool {},
  squeeze { dim = -1 },
  squeeze { dim = -1 },
}
LUA
cat >"$work/flat.lua" <<'LUA'
return layer "flat" {
  input = { "N", 2, 6, 5, 4 },
  conv3d { out_channels = 4, kernel = 1 },
  flatten { start_dim = 2 },
  reshape { shape = { -1, 2, 2, 5, 24 } },
}
LUA
plan=$("$fusegen" plan "$work/pooled.lua" 2>&1)
check plan "v3  = squeeze dims={3}                     -> [N, 8, 1]" "$plan"
check plan "v4  = squeeze dims={2}                     -> [N, 8]" "$plan"
out=$("$fusegen" run "$work/pooled.lua" --device cpu --batch 3 --out "$work/y.safetensors" 2>&1)
check run "pooled: output [3, 8] on the CPU (reference)" "$out"
check safetensors '"shape":[3,8]' "$(head -c 200 "$work/y.safetensors" | tr -d ' \000')"
out=$("$fusegen" run "$work/flat.lua" --device cpu --batch 2 2>&1)
check run "flat: output [2, 2, 2, 5, 24]" "$out"
plan=$("$fusegen" plan "$work/flat.lua" 2>&1)
check plan "flatten start_dim=2 end_dim=4" "$plan"
check plan '-> [N, 4, 120]' "$plan"
check plan '-> [N, 2, 2, 5, 24]' "$plan"
# the same value with and without its shape ops: the same floats (2 x 480 of them)
"$fusegen" run "$work/flat.lua" --device cpu --batch 2 --out "$work/a.safetensors" >/dev/null 2>&1
sed '/flatten\|reshape/d' "$work/flat.lua" >"$work/plain.lua"
"$fusegen" run "$work/plain.lua" --device cpu --batch 2 --out "$work/b.safetensors" >/dev/null 2>&1
if [ -s "$work/a.safetensors" ] && cmp -s <(tail -c 3840 "$work/a.safetensors") <(tail -c 3840 "$work/b.safetensors"); then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: the reshaped output's floats differ from the plain layer's" >&2
fi
sed 's/squeeze { dim = -1 },$/squeeze { dim = 0 },/' "$work/pooled.lua" >"$work/bad.lua"
out=$("$fusegen" plan "$work/bad.lua" 2>&1)
rc=$?
check "refused (exit $rc)" "bad.lua:6: squeeze: field 'dim' names the batch dim 0" "$out"
[ $rc -eq 1 ] && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: exit $rc, expected 1" >&2; }
# half dtypes: run --device cpu writes the output in the layer's dtype (BF16, F16), and an
# --input of another dtype is refused naming the spec's field
sed 's/^  input = .*$/&\n  dtype = "bf16",/; s/"pooled"/"pooled_bf16"/' "$work/pooled.lua" >"$work/p16.lua"
out=$("$fusegen" run "$work/p16.lua" --device cpu --batch 2 --out "$work/p16.safetensors" 2>&1)
check "bf16 run" "pooled_bf16: output [2, 8] on the CPU" "$out"
check "bf16 output file" '"dtype":"BF16","shape":[2,8]' "$(head -c 200 "$work/p16.safetensors" | tr -d '\0')"
sed 's/"bf16"/"fp16"/; s/pooled_bf16/pooled_fp16/' "$work/p16.lua" >"$work/p16b.lua"
"$fusegen" run "$work/p16.lua" --device cpu --batch 2 --out "$work/in16.safetensors" >/dev/null 2>&1
out=$("$fusegen" run "$work/p16b.lua" --device cpu --input "$work/in16.safetensors" 2>&1)
check "fp16 layer refuses a BF16 input" "is BF16, but the layer's input is F16 (its spec's dtype = \"fp16\")" "$out"
# layout channels_last: run's safetensors files hold the tensors in memory order [N, H, W, C]
cat >"$work/cl.lua" <<'EOS'
return layer "cl" {
  input = { "N", 3, 6, 8 },
  layout = "channels_last",
  conv2d { out_channels = 5, kernel = 3 },
  relu {},
}
EOS
out=$("$fusegen" run "$work/cl.lua" --device cpu --batch 2 --out "$work/cl.safetensors" 2>&1)
check "channels_last run" "cl: output [2, 5, 4, 6] (channels last) on the CPU" "$out"
check "channels_last output file" '"dtype":"F32","shape":[2,4,6,5]' "$(head -c 200 "$work/cl.safetensors" | tr -d '\0')"
cat >"$work/cl2.lua" <<'EOS'
return layer "cl2" {
  input = { "N", 5, 4, 6 },
  layout = "channels_last",
  conv2d { out_channels = 2, kernel = 1 },
}
EOS
out=$("$fusegen" run "$work/cl2.lua" --device cpu --input "$work/cl.safetensors" 2>&1)
check "channels_last input file in memory order" "cl2: output [2, 2, 4, 6] (channels last) on the CPU" "$out"
sed 's/  layout = "channels_last",//; s/"cl2"/"nchw2"/' "$work/cl2.lua" >"$work/nchw2.lua"
out=$("$fusegen" run "$work/nchw2.lua" --device cpu --input "$work/cl.safetensors" 2>&1)
check "an NCHW layer refuses the NHWC file" "does not have the layer's input shape" "$out"
# --check's bar follows the precision (common/accuracy.h): 1e-4 for exact fp32, 5e-3 for
# precision tf32, 4e-2 for tf32 with bf16 (plus an ulp of the dtype); on the CPU the check
# compares the reference with itself, so only the bar it names is checked here
out=$("$fusegen" run "$work/nchw2.lua" --device cpu --batch 2 --check 2>&1)
check "--check at the exact bar" "elements outside atol=rtol=1e-4: PASS" "$out"
sed 's/^  input = .*$/&\n  precision = "tf32",/' "$work/nchw2.lua" >"$work/t32.lua"
out=$("$fusegen" run "$work/t32.lua" --device cpu --batch 2 --check 2>&1)
check "--check at the tf32 bar" "elements outside atol=rtol=5e-3 (precision tf32): PASS" "$out"
sed 's/^  input = .*$/&\n  dtype = "bf16",/' "$work/t32.lua" >"$work/t32b.lua"
out=$("$fusegen" run "$work/t32b.lua" --device cpu --batch 2 --check 2>&1)
check "--check at the bf16 tf32 bar" "elements outside atol=rtol=4e-2 + 1 ulp of bf16 (precision tf32): PASS" "$out"
echo "cli shapes: $passed passed, $failed failed"
[ $failed -eq 0 ]
