-- A finalize pass: one thread per statistic turns fp64 partial sums into what the consumer
-- reads: mean and 1/sqrt(var + eps) for a norm (the variance from fp64 sums, biased as
-- PyTorch normalizes), max and 1/sum for a softmax.
local lib = import("lib")

local M = {}

function M.render(layer, plan, pass, names, signature)
  local c = lib.code()
  local a = pass.finalize_accum
  local acc = plan.accums[a]
  local op = layer.ops[acc.op]
  local keys = acc.keys_per_sample
  c:line("/* pass %d: finalize statistics s%d of v%d for op %d (%s) */", pass.index, a, acc.value, acc.op, op.spec_name)
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
  if acc.kind == "moments" then
    if acc.over_batch then
      c:line("const double cnt = %s * (double)batch;", lib.dlit(acc.count_per_sample))
    else
      c:line("const double cnt = %s;", lib.dlit(acc.count_per_sample))
      c:line("(void)batch;")
    end
    c:line("const double mean = %s[2 * key] / cnt;", names.accum[a])
    c:line("double var = %s[2 * key + 1] / cnt - mean * mean;", names.accum[a])
    c:line("if (var < 0.0) var = 0.0;")
    c:line("%s[key].a = (float)mean;", names.stats[a])
    c:line("%s[key].b = (float)(1.0 / sqrt(var + %s));", names.stats[a], lib.dlit(op.eps))
  elseif acc.kind == "sumexp" then
    c:line("(void)batch;")
    c:line("%s[key].a = fg_unordered(%s[key]);", names.stats[a], names.accum[acc.max_accum])
    c:line("%s[key].b = (float)(1.0 / %s[key]);", names.stats[a], names.accum[a])
  else
    error("finalize of " .. acc.kind)
  end
  c:close()
  return c
end

return M
