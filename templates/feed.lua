-- SPDX-License-Identifier: Apache-2.0
-- Feeding accumulators: adding a pass's domain values into the statistics a later op needs.
--
-- Two ways, chosen per accumulator:
--  * per-slot: the caller knows that all elements of one slot (e.g. one output channel of
--    the conv thread tile) share a statistic; each slot keeps a register partial and the
--    warp adds them up once at the end (fg_feed*, warp-aggregated atomics).
--  * running: one register partial for the current key; when an element's key differs the
--    partial is flushed with plain atomics (rare: neighbouring elements share statistics),
--    and the last partial goes through the warp-aggregated path at the end.
-- Partials over a thread's few elements are float; everything beyond is fp64. But float sums
-- of x and x^2 lose the variance E[x^2] - mean^2 where the mean is far above the spread (each
-- square is rounded at 2^-24 of mean^2: at mean/spread ~1000 the variance was off by percents,
-- bench/NOTES.md v38), so a `shifted` accumulator's (the registry's: the moments) are kept
-- otherwise: per-slot partials add up x - o and (x - o)^2, the shift o the slot's first
-- element, and count the elements n, and become fp64 sums of x and x^2 before any merge;
-- running partials, whose key may change at every element (a flush each), are fp64 sums of x
-- and x^2 from the start (x^2 of a float is exact in fp64).
--
-- Every piece of code that depends on the accumulator's kind comes from its monoid in the
-- registry (gen/op_registry.c, fg_accum_defs; plan.accum_defs here).
local lib = import("lib")

local M = {}

local function def_of(plan, a) return plan.accum_defs[plan.accums[a].kind] end

-- Whether accumulator a's partials are shifted (see above).
function M.shifted(plan, a) return def_of(plan, a).shifted end

-- The fp64 sums of x and x^2 of a shifted partial (sums s of x - o and q of (x - o)^2 over n
-- elements): declares them and returns their names.
function M.unshift(code, ev, s, q, o, n)
  local us, uq = ev:fresh("us"), ev:fresh("uq")
  code:line("const double %s = (double)%s + (double)%s * (double)%s;", us, s, n, o)
  code:line("const double %s = (double)%s + (double)%s * (2.0 * (double)%s + (double)%s * (double)%s);", uq, q, o, s,
    n, o)
  return us, uq
end

-- Declarations before the element loop. `slots` > 0 selects per-slot partials; a shifted
-- accumulator's also keep each slot's shift fo and count fn, its running partials are fp64.
function M.declare(code, plan, feeds, slots)
  for i = 0, feeds.n - 1 do
    local a = feeds[i]
    local init = def_of(plan, a).identity
    local shifted = M.shifted(plan, a)
    if slots > 0 then
      -- no keys kept: a slot's key is known from its channel (see finish)
      code:line("float fs%d[%d], fq%d[%d];", a, slots, a, slots)
      if shifted then code:line("float fo%d[%d], fn%d[%d];", a, slots, a, slots) end
      code:line("#pragma unroll") -- constant indices keep the partials in registers
      code:open("for (int q = 0; q < %d; ++q) {", slots)
      code:line("fs%d[q] = %s; fq%d[q] = 0.0f;%s", a, init, a,
        shifted and string.format(" fo%d[q] = 0.0f; fn%d[q] = 0.0f;", a, a) or "")
      code:close()
    else
      code:line("long long fk%d = -1; %s fs%d = %s, fq%d = 0.0f;", a, shifted and "double" or "float", a, init, a)
    end
  end
end

-- The value element `v` adds (a sum of exp reads the max an earlier pass found).
local function contribution(code, ev, plan, a, v, key)
  local def = def_of(plan, a)
  if not def.contribution then return v end
  local x = ev:fresh("e")
  local max = def.needs_max and ev.names.accum[plan.accums[a].max_accum] or nil
  code:line("const float %s = %s;", x, lib.fill(def.contribution, nil, { v = v, key = key, max = max }))
  return x
end

-- Adds x into partials s (and q); a shifted accumulator's per-slot partials relative to shift
-- o, counted in n, its running partials (o nil) in fp64.
local function combine(code, ev, def, s, q, x, o, n)
  if def.shifted and not o then
    x = "(double)" .. x
  elseif def.shifted then
    local d = ev:fresh("d")
    code:line("const float %s = %s - %s;", d, x, o)
    code:line("%s += 1.0f;", n)
    x = d
  end
  lib.emit(code, lib.fill(def.combine, nil, { s = s, q = q, x = x }))
end

local function flush_plain(code, ev, def, a, k, s, q)
  lib.emit(code, lib.fill(def.flush, nil, { acc = ev.names.accum[a], k = k, s = s, q = q }))
end

-- Inside the element loop, for a valid element with value `v` at `coords`; `slot` is the
-- per-slot index expression (nil for running partials).
function M.element(code, ev, plan, feeds, v, coords, slot)
  for i = 0, feeds.n - 1 do
    local a = feeds[i]
    local def = def_of(plan, a)
    -- The statistics of a half layer's output that the next layer of a block normalizes are
    -- those of the values it reads: rounded to the dtype as they are stored, then widened
    -- (exact). The fp32 values would differ where a group's spread is below the dtype's step.
    -- So are those of a value the pass stores in the layer's dtype for its map pass to read
    -- (planner.h, fg_io_buffer_value: the one statistic's value).
    local fed = v
    local io_buffer = lib.stores_io_buffer(plan, ev.pass)
    if (plan.accums[a].exported or io_buffer) and lib.io_half(ev.layer) then
      fed = ev:fresh("r")
      code:line("const float %s = fg_io_widen(%s);", fed, lib.io_store(ev.layer, v))
    end
    -- per-slot partials know their key from the slot; a contribution may read it per element
    local key
    if not slot or def.contribution then
      key = ev:fresh("key")
      code:line("const long long %s = %s;", key, ev:accum_key(a, coords))
    end
    local x = contribution(code, ev, plan, a, fed, key)
    if slot then
      local o, n = string.format("fo%d[%s]", a, slot), string.format("fn%d[%s]", a, slot)
      -- the slot's first element is its shift (known at compile time where every element of
      -- the unrolled loop exists)
      if def.shifted then code:line("if (%s == 0.0f) %s = %s;", n, o, x) end
      combine(code, ev, def, string.format("fs%d[%s]", a, slot), string.format("fq%d[%s]", a, slot), x, o, n)
    else
      code:open("if (%s != fk%d) {", key, a)
      code:open("if (fk%d >= 0) {", a)
      flush_plain(code, ev, def, a, "fk" .. a, "fs" .. a, "fq" .. a)
      code:close()
      code:line("fk%d = %s; fs%d = %s; fq%d = 0.0f;", a, key, a, def.identity, a)
      code:close()
      combine(code, ev, def, "fs" .. a, "fq" .. a, x)
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
    local def = def_of(plan, a)
    local acc = ev.names.accum[a]
    local function call(k, s, q, o, n)
      if def.shifted and o then s, q = M.unshift(code, ev, s, q, o, n) end
      if merge_lanes then
        code:open("{")
        code:line("long long mk = %s;", k)
        lib.emit(code, lib.fill(def.merge, nil, { s = s, q = q }))
        k, s, q = "mk", "ms", "mq"
      end
      lib.emit(code, lib.fill(def.feed, nil, { acc = acc, k = k, s = s, q = q }))
      if merge_lanes then code:close("}") end
    end
    if slots > 0 then
      code:line("#pragma unroll")
      code:open("for (int q = 0; q < %d; ++q) {", slots)
      call(string.format("(%s)", slot_key(a, "q")), string.format("fs%d[q]", a), string.format("fq%d[q]", a),
        string.format("fo%d[q]", a), string.format("fn%d[q]", a))
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

-- Whether every accumulator fed keeps one key per output pixel at most (a statistic over all
-- channels: layer_norm { dim = 1 }, a reduction over dim 1): every channel of a pixel then
-- shares its key. False without feeds and for the channel-sums rule's per-channel sums.
function M.per_pixel(layer, plan, feeds)
  if feeds.n == 0 then return false end
  for i = 0, feeds.n - 1 do
    local acc = plan.accums[feeds[i]]
    if acc.per_channel then return false end
    local op = lib.accum_op(layer, acc)
    local shape = op.in_shape
    local across
    if op.class == "norm" then
      across = op.stat.channel_group == shape.dim[1]
    else
      across = (op.reduce_mask >> 1) & 1 == 1 or shape.dim[1] == 1
    end
    if not across then return false end
  end
  return true
end

-- Whether all elements of one conv output channel (of one sample) share accumulator a's key.
function M.uniform_per_channel(layer, plan, a)
  local acc = plan.accums[a]
  if acc.per_channel then return true end -- keyed (sample, channel) by construction
  local op = lib.accum_op(layer, acc)
  local shape = op.in_shape
  local norm = op.class == "norm"
  local mask = norm and op.stat.mask or op.reduce_mask
  if norm and op.stat.channel_group == 0 then return false end
  for d = 2, shape.rank - 1 do
    if (mask >> d) & 1 == 0 and shape.dim[d] ~= 1 then return false end
  end
  return true
end

return M
