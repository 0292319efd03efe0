-- SPDX-License-Identifier: Apache-2.0
-- The channel-sums strategy's map pass (gen/planner.c, channel_sums_reduction): a sum or mean
-- over every spatial dim of a norm's output, through ops affine per (sample, channel), from
-- the fp64 moments (sum, sum of squares) per (sample, channel) of the norm's input that the
-- conv pass fed. An affine map commutes with a mean, so for each channel c
--   mean over the positions of f_c(norm(y)) = f_c(norm(m_c)),  m_c = the mean of y over them;
-- the norm's mean and variance (over a group of channels, or a channel over the batch) are
-- assembled from the same sums and computed as the registry's finalize of the moments does
-- (biased variance from fp64 sums), but kept in fp64. The reduction then averages (or sums)
-- the channels it reduces, or keeps one value a channel. The values between the norm's input
-- and the reduction are never computed per element.
local lib = import("lib")
local expr = import("expr")

local M = {}

local binary = { ADD = "+", SUB = "-", MUL = "*", DIV = "/" }

-- Makes the evaluator read value pass.chan_sums (the reduction) through this computation; the
-- ops after it (elementwise) are evaluated as in any map pass.
function M.install(c, ev, layer, plan, pass)
  local k, r = pass.first, pass.chan_sums
  local norm, red = layer.ops[k], layer.ops[r]
  local a = plan.op[r].accum
  local acc = ev.names.accum[a]
  local C, S = plan.accums[a].keys_per_sample, plan.accums[a].count_per_sample
  local over_channels = (red.reduce_mask >> 1) & 1 == 1
  local st = norm.stat
  c:line("/* v%d from the moments per channel of v%d (a%d), in fp64 */", r, k - 1, a)
  ev.loaders[r] = function(coords)
    local t = ev:fresh("cs")
    c:line("double %s = 0.0;", t)
    local ch = coords[1]
    if over_channels then
      ch = ev:fresh("ch")
      c:open("for (int %s = 0; %s < %d; ++%s) {", ch, ch, C, ch)
    else
      c:open("{")
    end
    -- the coordinates of channel ch (any position: every value here is per channel)
    local cc = { ch }
    for d = 2, red.in_shape.rank - 1 do cc[d] = "0" end
    local x, s1, s2 = ev:fresh("m"), ev:fresh("s"), ev:fresh("q")
    -- the moments' layout (the registry's FG_ACCUM_MOMENTS): the sum at 2 key, the sum of squares
    -- at 2 key + 1
    c:line("double %s = %s[2 * (%s)] / %s;", x, acc, expr.sample_key("n", C, ch), lib.dlit(S))
    -- the norm's statistic of channel ch: the sums of its group's channels (of this sample), or
    -- of the channel in every sample of the batch
    c:line("double %s = 0.0, %s = 0.0;", s1, s2)
    local cnt
    if st.over_batch then
      local nb = ev:fresh("nb")
      c:open("for (int %s = 0; %s < batch; ++%s) {", nb, nb, nb)
      local key = expr.sample_key(nb, C, ch)
      c:line("%s += %s[2 * (%s)]; %s += %s[2 * (%s) + 1];", s1, acc, key, s2, acc, key)
      c:close()
      cnt = string.format("(%s * (double)batch)", lib.dlit(S))
    else
      local G = st.channel_group
      local gc = ev:fresh("gc")
      local first = G == 1 and ch or string.format("(%s) / %d * %d", ch, G, G)
      c:open("for (int %s = 0; %s < %d; ++%s) {", gc, gc, G, gc)
      c:line("const long long kk = %s;", expr.sample_key("n", C, first .. " + " .. gc))
      c:line("%s += %s[2 * kk]; %s += %s[2 * kk + 1];", s1, acc, s2, acc)
      c:close()
      cnt = lib.dlit(S * G)
    end
    local mu, var = ev:fresh("mu"), ev:fresh("var")
    c:line("const double %s = %s / %s;", mu, s1, cnt)
    c:line("double %s = %s / %s - %s * %s;", var, s2, cnt, mu, mu)
    c:line("if (%s < 0.0) %s = 0.0;", var, var)
    c:line("%s = (%s - %s) / sqrt(%s + %s);", x, x, mu, var, lib.dlit(norm.eps))
    if norm.affine then
      c:line("%s = %s * (double)%s[%s] + (double)%s[%s];", x, x, ev.names.param[norm.weight_param], ch,
        ev.names.param[norm.bias_param], ch)
    end
    for j = k + 1, r - 1 do
      local op = layer.ops[j]
      local b
      if op.operand == "scalar" then
        b = lib.dlit(op.scalar)
      else
        b = "(double)" .. ev:param_at(op.operand_param, op.in_shape, cc)
      end
      c:line("%s = %s %s %s;", x, x, assert(binary[op.kind], op.kind), b)
    end
    c:line("%s += %s;", t, x)
    c:close()
    -- a mean over the channels divides by them; a sum adds every position of each channel
    local scaled = t
    if red.kind == "REDUCE_SUM" then
      scaled = string.format("%s * %s", t, lib.dlit(S))
    elseif over_channels then
      scaled = string.format("%s / %s", t, lib.dlit(C))
    end
    return ev:declare("v" .. r .. "_", string.format("(float)(%s)", scaled))
  end
end

return M
