-- SPDX-License-Identifier: Apache-2.0
-- A finalize pass: one thread per statistic turns fp64 partial sums into what the consumer
-- reads: mean and 1/sqrt(var + eps) for a norm (the variance from fp64 sums, biased as
-- PyTorch normalizes), max and 1/sum for a softmax.
local lib = import("lib")

local M = {}

-- The registry's finalize of accumulator `a` for the key in the C variable `key`: reads
-- acc_expr[..key..] (the sums), writes stats_expr[key]. Batch-wide keys read `batch` (their
-- count); with `void_batch`, a kernel whose finalize does not says "(void)batch;".
function M.emit(c, layer, plan, names, a, acc_expr, stats_expr, void_batch)
  local acc = plan.accums[a]
  local op = lib.accum_op(layer, acc)
  local def = plan.accum_defs[acc.kind]
  if not def.finalize then error(string.format("accumulator %s has no finalize", acc.kind)) end
  -- the monoid's finalize reads `cnt` (elements per key) where it needs it
  local reads_batch = def.finalize:find("cnt", 1, true) and acc.over_batch
  if def.finalize:find("cnt", 1, true) then
    if acc.over_batch then
      c:line("const double cnt = %s * (double)batch;", lib.dlit(acc.count_per_sample))
    else
      c:line("const double cnt = %s;", lib.dlit(acc.count_per_sample))
    end
  end
  if void_batch and not reads_batch then c:line("(void)batch;") end
  local max = acc.max_accum >= 0 and names.accum[acc.max_accum] or nil
  lib.emit(c, lib.fill(def.finalize, nil, { acc = acc_expr, max = max, stats = stats_expr, eps = lib.dlit(op.eps) }))
end

function M.render(layer, plan, pass, names, signature)
  local c = lib.code()
  local a = pass.finalize_accum
  local acc = plan.accums[a]
  local op = lib.accum_op(layer, acc)
  local keys = acc.keys_per_sample
  if acc.prologue then
    c:line("/* pass %d: finalize statistics s%d of the input for the prologue's %s (pro%d) */", pass.index, a,
      op.spec_name, acc.op)
  else
    c:line("/* pass %d: finalize statistics s%d of v%d for op %d (%s) */", pass.index, a, acc.value, acc.op, op.spec_name)
  end
  c:line("extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", pass.launch.block, pass.kernel, signature)
  c:open("{")
  c:line("const int q = (int)blockIdx.x * %d + (int)threadIdx.x;", pass.launch.block)
  c:line("if (q >= %d) return;", keys)
  if acc.over_batch then
    c:line("const long long key = q;")
    c:line("(void)batch_base;")
  else
    c:line("const long long key = (long long)(batch_base + (int)blockIdx.z) * %d + q;", keys)
  end
  M.emit(c, layer, plan, names, a, names.accum[a], names.stats[a], true)
  c:close()
  return c
end

return M
