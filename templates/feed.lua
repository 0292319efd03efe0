-- Feeding accumulators: adding a pass's domain values into the statistics a later op needs.
--
-- Two ways, chosen per accumulator:
--  * per-slot: the caller knows that all elements of one slot (e.g. one output channel of
--    the conv thread tile) share a statistic; each slot keeps a register partial and the
--    warp adds them up once at the end (fg_feed*, warp-aggregated atomics).
--  * running: one register partial for the current key; when an element's key differs the
--    partial is flushed with plain atomics (rare: neighbouring elements share statistics),
--    and the last partial goes through the warp-aggregated path at the end.
-- Partials over a thread's few elements are float; everything beyond is fp64.
local M = {}

local function is_max(kind) return kind == "max" or kind == "min" end

-- What a partial of this kind starts from (-inf for a max, +inf for a min, else 0).
local function partial_init(kind)
  return kind == "max" and "__int_as_float(0xff800000)" or kind == "min" and "__int_as_float(0x7f800000)" or "0.0f"
end

-- Declarations before the element loop. `slots` > 0 selects per-slot partials.
function M.declare(code, plan, feeds, slots)
  for i = 0, feeds.n - 1 do
    local a = feeds[i]
    local kind = plan.accums[a].kind
    local init = partial_init(kind)
    if slots > 0 then
      -- no keys kept: a slot's key is known from its channel (see finish)
      code:line("float fs%d[%d], fq%d[%d];", a, slots, a, slots)
      code:line("#pragma unroll") -- constant indices keep the partials in registers
      code:open("for (int q = 0; q < %d; ++q) {", slots)
      code:line("fs%d[q] = %s; fq%d[q] = 0.0f;", a, init, a)
      code:close()
    else
      code:line("long long fk%d = -1; float fs%d = %s, fq%d = 0.0f;", a, a, init, a)
    end
  end
end

-- The value to add for element `v` (sum of exp needs the max found by an earlier pass).
local function contribution(code, ev, plan, a, v, key)
  local acc = plan.accums[a]
  if acc.kind == "sumexp" then
    local m = ev.names.accum[acc.max_accum]
    local x = ev:fresh("e")
    code:line("const float %s = expf(%s - fg_unordered(%s[%s]));", x, v, m, key)
    return x
  end
  return v
end

local function combine(code, kind, s, q, x)
  if kind == "max" then
    code:line("%s = fg_maximum(%s, %s);", s, s, x)
  elseif kind == "min" then
    code:line("%s = fg_minimum(%s, %s);", s, s, x)
  else
    code:line("%s += %s;", s, x)
    if kind == "moments" then code:line("%s += %s * %s;", q, x, x) end
  end
end

local function flush_plain(code, ev, kind, a, k, s, q)
  local acc = ev.names.accum[a]
  if kind == "moments" then
    code:line("atomicAdd(%s + 2 * %s, (double)%s); atomicAdd(%s + 2 * %s + 1, (double)%s);", acc, k, s, acc, k, q)
  elseif kind == "max" then
    code:line("atomicMax(%s + %s, fg_ordered(%s));", acc, k, s)
  elseif kind == "min" then
    code:line("atomicMin(%s + %s, fg_ordered(%s));", acc, k, s)
  else
    code:line("atomicAdd(%s + %s, (double)%s);", acc, k, s)
  end
end

-- Inside the element loop, for a valid element with value `v` at `coords`; `slot` is the
-- per-slot index expression (nil for running partials).
function M.element(code, ev, plan, feeds, v, coords, slot)
  for i = 0, feeds.n - 1 do
    local a = feeds[i]
    local kind = plan.accums[a].kind
    -- per-slot partials know their key from the slot; only sumexp reads it per element
    local key
    if not slot or kind == "sumexp" then
      key = ev:fresh("key")
      code:line("const long long %s = %s;", key, ev:accum_key(a, coords))
    end
    local x = contribution(code, ev, plan, a, v, key)
    if slot then
      combine(code, kind, string.format("fs%d[%s]", a, slot), string.format("fq%d[%s]", a, slot), x)
    else
      code:open("if (%s != fk%d) {", key, a)
      code:open("if (fk%d >= 0) {", a)
      flush_plain(code, ev, kind, a, "fk" .. a, "fs" .. a, "fq" .. a)
      code:close()
      local init = partial_init(kind)
      code:line("fk%d = %s; fs%d = %s; fq%d = 0.0f;", a, key, a, init, a)
      code:close()
      combine(code, kind, "fs" .. a, "fq" .. a, x)
    end
  end
end

-- After the element loop, reached by every thread of the block (warp-collective). With
-- per-slot partials, slot_key(q) gives the C expression of slot q's key (or -1). With
-- `merge_lanes`, lanes holding the same key add up across the warp first (fg_merge_lanes,
-- fg_merge_lanes_extreme): the MMA engine spreads one channel over four lanes and
-- neighbouring channels over others.
function M.finish(code, ev, plan, feeds, slots, slot_key, merge_lanes)
  for i = 0, feeds.n - 1 do
    local a = feeds[i]
    local kind = plan.accums[a].kind
    local acc = ev.names.accum[a]
    local function call(k, s, q)
      if merge_lanes then
        code:open("{")
        code:line("long long mk = %s;", k)
        if is_max(kind) then
          code:line("float ms = %s;", s)
          code:line("fg_merge_lanes_extreme(mk, ms, %s);", kind == "max" and "true" or "false")
        else
          code:line("double ms = (double)%s, mq = (double)%s;", s, q)
          code:line("fg_merge_lanes(mk, ms, mq);")
        end
        k, s, q = "mk", "ms", "mq"
      end
      if kind == "moments" then
        code:line("fg_feed2(%s, %s, (double)%s, (double)%s);", acc, k, s, q)
      elseif is_max(kind) then
        code:line("fg_feed_%s((int *)%s, %s, %s);", kind, acc, k, s)
      else
        code:line("fg_feed1(%s, %s, (double)%s);", acc, k, s)
      end
      if merge_lanes then code:close("}") end
    end
    if slots > 0 then
      code:line("#pragma unroll")
      code:open("for (int q = 0; q < %d; ++q) {", slots)
      call(string.format("(%s)", slot_key(a, "q")), string.format("fs%d[q]", a), string.format("fq%d[q]", a))
      code:close()
    else
      call("fk" .. a, "fs" .. a, "fq" .. a)
    end
  end
end

-- Statistics slots of a conv epilogue: `per_thread` (the channels a thread holds) when every
-- accumulator fed has one key per channel, else 0 (running partials).
function M.conv_slots(layer, plan, feeds, per_thread)
  if feeds.n == 0 then return 0 end
  for i = 0, feeds.n - 1 do
    if not M.uniform_per_channel(layer, plan, feeds[i]) then return 0 end
  end
  return per_thread
end

-- Whether all elements of one conv output channel (of one sample) share accumulator a's key.
function M.uniform_per_channel(layer, plan, a)
  local acc = plan.accums[a]
  local op = layer.ops[acc.op]
  local shape = op.in_shape
  local mask = acc.kind == "moments" and op.stat.mask or op.reduce_mask
  if acc.kind == "moments" and op.stat.channel_group == 0 then return false end
  for d = 2, shape.rank - 1 do
    if (mask >> d) & 1 == 0 and shape.dim[d] ~= 1 then return false end
  end
  return true
end

return M
