-- SPDX-License-Identifier: Apache-2.0
-- The prologue: ops a spec puts before the convolution (layer.pro, docs/spec.md "Prologue"),
-- applied to each input element where a pass stages it -- the conv's shared-memory staging
-- (FMA and mma.sync engines, conv.lua's stage_input) or the wgmma engine's input pack --
-- so that no tensor holds the normalized input. A norm that needs statistics of the input
-- reads them finalized (the pass below gathers them, finalize.lua finishes them); the
-- conv's zero padding stays zero because only elements inside the input go through here.
local lib = import("lib")
local ops = import("ops")
local expr = import("expr")
local finalize = import("finalize")
local flit = lib.flit

local M = {}

-- The shared-memory statistics of a pass that finalizes them itself (M.finalize_in_block)
local BLOCK_STATS = "pro_stats_sh"
-- A thread's pixels' statistics in the input pack that computes them (M.pixel_statistics)
local PIXEL_STATS = "px_stat"

-- Prints the prologue's ops 0..upto-1 applied to `x` (a float variable) at `coords` of the
-- input (coords[1] the channel, coords[2..] the spatial coordinates, as C expressions; `n`
-- the sample in scope) and returns the result's variable. Every op's snippet is the
-- registry's (ops.lua), the norm's arithmetic expr.lua's.
function M.apply(c, layer, plan, pass, names, x, coords, upto)
  local ev = expr.new(layer, plan, pass, c, names)
  local v = x
  for j = 0, upto - 1 do
    local op = layer.pro[j]
    local e
    if op.class == "unary" then
      e = ops.unary(op, v, plan.fast_gelu)
    elseif op.class == "binary" then
      local b = op.operand == "scalar" and flit(op.scalar) or ev:param_at(op.operand_param, op.in_shape, coords)
      e = ops.binary(op, v, b)
    elseif op.class == "norm" then
      local src
      if op.has_stats then
        if j ~= plan.pro_norm then error("prologue: a norm with statistics the plan does not gather") end
        if M.pixel_stats(plan, pass) then
          src = PIXEL_STATS .. "[it]" -- the rows pack's step (M.pixel_statistics)
        elseif M.block_finalizes(plan, pass) then
          src = string.format("%s[%s]", BLOCK_STATS, ev:norm_key(op, coords, true))
        else
          src = string.format("%s[%s]", names.stats[plan.pro_accum], ev:norm_key(op, coords))
        end
      end
      e = ev:normalize(op, v, coords, src, false)
    else
      error("prologue: op " .. op.spec_name .. " cannot come before the conv")
    end
    local var = string.format("pro%d_%s", j, x)
    c:line("const float %s = %s;", var, e)
    v = var
  end
  return v
end

-- Whether `pass` finalizes the prologue's statistics itself (the planner's pack_finalizes: the
-- wgmma input pack by rows, their only reader), into BLOCK_STATS (M.finalize_in_block).
function M.block_finalizes(plan, pass) return plan.pack_finalizes and pass.kind == "pack_input" end

-- Whether `pass` computes the prologue norm's statistics itself, each pixel's from its channels
-- (the planner's pack_pixel_stats: the wgmma input pack by rows, M.pixel_statistics).
function M.pixel_stats(plan, pass) return plan.pack_pixel_stats and pass.kind == "pack_input" end

-- The statistics of a norm over each pixel's channels, in the wgmma input pack by pixel rows
-- whose block holds every channel of its pixels (planner.c, pack_pixel_statistics): in each
-- of the `steps` steps `it`, the `units` threads t = slot * units + u of one pixel hold `vec`
-- of its channels each, widened from raw[it] (`value(e)`: element e of the thread's vector).
-- They add up the sum through shared memory, then the squares of the differences from the
-- mean (two passes over registers, in fp32: no cancellation of E[x^2] - mean^2, and the same
-- order every run), into px_stat[it] = mean, 1/sqrt(var + eps) (biased, as PyTorch). Every
-- thread of the block must reach it (barriers).
function M.pixel_statistics(c, layer, plan, steps, slots, units, vec, value)
  local op = layer.pro[plan.pro_norm]
  local channels = op.in_shape.dim[1]
  c:line("/* the prologue norm's statistics, each pixel's over its %d channels (no statistics pass) */", channels)
  c:line("__shared__ __align__(16) float px_part[%d][%d][%d]; /* [step][pixel][its threads' partials] */", steps, slots,
    units)
  c:line("fg_stat %s[%d];", PIXEL_STATS, steps)
  local function partials(what)
    c:line("#pragma unroll")
    c:open("for (int it = 0; it < %d; ++it) {", steps)
    c:line("float s = 0.0f;")
    c:line("#pragma unroll")
    c:open("for (int e = 0; e < %d; ++e) {", vec)
    c:line("const float x = %s;", value("e"))
    c:line("s += %s;", what)
    c:close()
    c:line("px_part[it][t / %d][t %% %d] = s;", units, units)
    c:close()
    c:line("__syncthreads();")
  end
  local function total(into)
    c:line("#pragma unroll")
    c:open("for (int it = 0; it < %d; ++it) {", steps)
    c:line("float s = 0.0f;")
    c:line("#pragma unroll")
    if units % 4 == 0 then
      -- 16 bytes a load (one address for a pixel's threads: a broadcast): a pixel of 768 bf16
      -- channels has 96 threads, each of which reads every partial
      c:open("for (int u = 0; u < %d; u += 4) {", units)
      c:line("const float4 q = *(const float4 *)&px_part[it][t / %d][u];", units)
      c:line("s += (q.x + q.y) + (q.z + q.w);")
      c:close()
    else
      c:line("for (int u = 0; u < %d; ++u) s += px_part[it][t / %d][u];", units, units)
    end
    c:line(into)
    c:close()
  end
  partials("x")
  total(string.format("%s[it].a = s / %s;", PIXEL_STATS, lib.flit(channels)))
  c:line("__syncthreads(); /* every sum read before the squares overwrite them */")
  partials(string.format("(x - %s[it].a) * (x - %s[it].a)", PIXEL_STATS, PIXEL_STATS))
  total(string.format("%s[it].b = 1.0f / sqrtf(s / %s + %s);", PIXEL_STATS, lib.flit(channels), lib.flit(op.eps)))
end

-- Turns the prologue's sums of sample `n` (every key of it, or the batch-wide ones) into the
-- statistics the norm reads, in shared memory, with the registry's finalize (finalize.lua):
-- the finalize pass's work, done by every block of the pass that reads them instead of by a
-- pass of its own. Every thread of the block must reach it (a barrier ends it).
function M.finalize_in_block(c, layer, plan, names, threads)
  local a = plan.pro_accum
  local acc = plan.accums[a]
  local def = plan.accum_defs[acc.kind]
  local keys = acc.keys_per_sample
  c:line("/* the prologue's statistics, finalized from their sums here (no finalize pass): %s keys */",
    acc.over_batch and string.format("the batch's %d", keys) or string.format("this sample's %d", keys))
  c:line("__shared__ fg_stat %s[%d];", BLOCK_STATS, keys)
  c:open("for (int kq = (int)threadIdx.x; kq < %d; kq += %d) {", keys, threads)
  c:line("const long long key = kq;")
  -- the sample's sums from key 0 on: the accumulator's bytes_per_key a key
  local sums = acc.over_batch and names.accum[a] or
      string.format("((const %s *)((const char *)%s + (long long)n * %d))", def.ctype, names.accum[a],
        keys * def.bytes_per_key)
  finalize.emit(c, layer, plan, names, a, sums, BLOCK_STATS, false)
  c:close()
  c:line("__syncthreads();")
end

-- Whether a pass applies a prologue (then it reads each input element with a plain load and
-- stores the transformed value; without one the staging stays as it was).
function M.active(layer) return layer.n_pro > 0 end

-- Declares <prefix><d> for the dims `dims` (in order, the last fastest) of `shape` from the
-- linear index `idx` over them, and records them in coords[d].
local function unravel_dims(c, shape, dims, idx, prefix, coords)
  local rest = idx
  for i = #dims, 1, -1 do
    local d = dims[i]
    coords[d] = prefix .. d
    -- (void): an index skips a dim of extent 1, and an op may read no coordinate
    c:line("const int %s%d = %s %% %d; (void)%s%d;", prefix, d, rest, shape.dim[d], prefix, d)
    rest = string.format("(%s / %d)", rest, shape.dim[d])
  end
end

-- What both statistics kernels below gather: the accumulator's index, the accumulator, the
-- norm and the registry's monoid of its statistic.
local function stats_of(layer, plan)
  local acc = plan.accums[plan.pro_accum]
  return plan.pro_accum, acc, layer.pro[plan.pro_norm], plan.accum_defs[acc.kind]
end

-- Adds a block's sums s and s2 of key q (of sample n, or over the batch) into the accumulator
-- with the registry's flush.
local function flush_key(c, plan, names, s, s2)
  local acc = plan.accums[plan.pro_accum]
  local key = acc.over_batch and "q" or string.format("(long long)n * %d + q", acc.keys_per_sample)
  lib.emit(c, lib.fill(plan.accum_defs[acc.kind].flush, nil,
    { acc = names.accum[plan.pro_accum], k = "(" .. key .. ")", s = s, q = s2 }))
end

-- The statistics pass (FG_PASS_PRO_STATS): a block sums a span of one statistic's elements
-- of one sample through the prologue's ops before the norm, in fp64, and adds its partial
-- into the norm's accumulator with the registry's flush.
function M.render(layer, plan, pass, names, signature)
  if pass.launch.row_vec > 0 then return M.render_rows(layer, plan, pass, names, signature) end
  local c = lib.code()
  local a, acc, op, def = stats_of(layer, plan)
  local shape = layer.input
  local st = op.stat
  local count, keys = acc.count_per_sample, acc.keys_per_sample
  local block, per = pass.launch.block, pass.launch.elems
  local span = block * per
  local spans = (count + span - 1) // span
  c:line("/* pass %d: statistics s%d of the input for the prologue's %s (pro%d): %d keys of %d elements per sample */",
    pass.index, a, op.spec_name, plan.pro_norm, keys, count)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", block, pass.kernel, signature)
  c:open("{")
  c:line("(void)batch;")
  c:line("const int n = batch_base + (int)blockIdx.z;")
  c:line("const int q = (int)blockIdx.x / %d, span = (int)blockIdx.x %% %d;", spans, spans)
  c:line("(void)span;")
  -- the key's channel group and kept spatial coordinates; an element's channel within the
  -- group and reduced coordinates (the channel outermost: consecutive elements of a group
  -- or instance norm are consecutive in NC(D)HW)
  local kept, reduced, kept_n, red_n = {}, {}, 1, 1
  for d = 2, shape.rank - 1 do
    if (st.mask >> d) & 1 == 1 then
      reduced[#reduced + 1] = d
      red_n = red_n * shape.dim[d]
    else
      kept[#kept + 1] = d
      kept_n = kept_n * shape.dim[d]
    end
  end
  c:line("const int cg0 = (q / %d) * %d;", kept_n, st.channel_group)
  local coords = {}
  unravel_dims(c, shape, kept, string.format("(q %% %d)", kept_n), "k", coords)
  c:line("double s = %s, s2 = %s;", def.identity, def.identity)
  c:open("for (int e = 0; e < %d; ++e) {", per)
  c:line("const int j = span * %d + e * %d + (int)threadIdx.x;", span, block)
  c:open("if (j < %d) {", count)
  c:line("const int ch = cg0 + j / %d;", red_n)
  coords[1] = "ch"
  unravel_dims(c, shape, reduced, string.format("(j %% %d)", red_n), "r", coords)
  local at = lib.io_cl(layer) and lib.lin_cl(shape, coords) or lib.lin(shape, coords)
  local load = string.format("%s + (fg_u64)n * %d + %s", names.input, shape.sample, at)
  c:line("const float x0 = %s;", lib.io_half(layer) and "fg_io_load(" .. load .. ")" or "*(" .. load .. ")")
  local v = M.apply(c, layer, plan, pass, names, "x0", coords, plan.pro_norm)
  lib.emit(c, lib.fill(def.combine, nil, { s = "s", q = "s2", x = "(double)" .. v }))
  c:close()
  c:close()
  -- the block's sums: a warp's lanes, then the warps through shared memory
  c:open("for (int o = 16; o > 0; o >>= 1) {")
  c:line("s += __shfl_xor_sync(0xffffffffu, s, o);")
  c:line("s2 += __shfl_xor_sync(0xffffffffu, s2, o);")
  c:close()
  if block > 32 then
    c:line("__shared__ double sh[%d][2];", block // 32)
    c:line("const int w = (int)threadIdx.x >> 5;")
    c:open("if (((int)threadIdx.x & 31) == 0) {")
    c:line("sh[w][0] = s;")
    c:line("sh[w][1] = s2;")
    c:close()
    c:line("__syncthreads();")
    c:open("if (threadIdx.x == 0) {")
    c:open("for (int i = 1; i < %d; ++i) {", block // 32)
    c:line("s += sh[i][0];")
    c:line("s2 += sh[i][1];")
    c:close()
    c:close()
  end
  c:open("if (threadIdx.x == 0) {")
  flush_key(c, plan, names, "s", "s2")
  c:close()
  c:close()
  return c
end

-- The 16-byte load of a thread's V channels at `at` (a pointer in scope) into the vector `dst`,
-- or element by element where the input is not 16-byte aligned (`aligned` in scope: a view).
local function load_vector(c, dst, V)
  c:open("if (aligned) {")
  c:line("*(uint4 *)%s = *(const uint4 *)at;", dst)
  c:close("} else {")
  c.depth = c.depth + 1
  c:line("#pragma unroll")
  c:line("for (int e = 0; e < %d; ++e) %s[e] = at[e];", V, dst)
  c:close()
end

-- coords[2..] of pixel `p` (a C expression) of `shape`, declared as r<d> (coords[1] the channel)
local function pixel_coords(c, shape, p)
  local coords = { [1] = "ch" }
  local spatial = {}
  for d = 2, shape.rank - 1 do spatial[#spatial + 1] = d end
  unravel_dims(c, shape, spatial, p, "r", coords)
  return coords
end

-- The head of a statistics pass by pixel rows: the sample, thread t's first channel ch0 (its
-- U-th of a pixel's V-channel vectors) and pixel slot, the sample's input, its alignment.
local function rows_head(c, layer, names, U, V)
  c:line("(void)batch;")
  c:line("const int n = batch_base + (int)blockIdx.z, t = (int)threadIdx.x;")
  c:line("const int ch0 = (t %% %d) * %d, slot = t / %d; /* this thread's first channel, its pixel in each step */", U, V, U)
  c:line("const %s *xs = %s + (unsigned long long)n * %d;", lib.io_ctype(layer), names.input, layer.input.sample)
  c:line("const bool aligned = ((unsigned long long)xs & 15) == 0;")
end

-- Adds the V elements of the thread's vector `xv` (at the pixel of `coords`) through the
-- prologue's ops before the norm into the fp64 sums s[e] / s2[e] (`per_element`) or s / s2.
local function sum_vector(c, layer, plan, pass, names, def, coords, xv, V, per_element)
  c:line("#pragma unroll")
  c:open("for (int e = 0; e < %d; ++e) {", V)
  c:line("const int ch = ch0 + e;")
  c:line("(void)ch; /* the ops' channel, when one reads it */")
  c:line("const float x0 = %s;", lib.io_half(layer) and "fg_io_widen(" .. xv .. "[e])" or xv .. "[e]")
  local v = M.apply(c, layer, plan, pass, names, "x0", coords, plan.pro_norm)
  local s, s2 = "s", "s2"
  if per_element then s, s2 = "s[e]", "s2[e]" end
  lib.emit(c, lib.fill(def.combine, nil, { s = s, q = s2, x = "(double)" .. v }))
  c:close()
end

-- The statistics pass by pixel rows for a statistic over each pixel's channels (a key a pixel:
-- layer_norm { dim = 1 }, planner.c pro_stats_rows): thread t reads the V channels (t % U) * V..
-- of each of its pixels (every (T / U)-th of the block's ROWS), all loads first, sums them
-- through the prologue's ops before the norm in fp64, and the U threads of a pixel add up their
-- sums through shared memory; one thread a pixel flushes its key (no key shared by two blocks).
-- Where the conv's input pack computes these statistics itself there is no such pass
-- (pixel_statistics above); this one serves the other engines.
function M.render_pixel_rows(layer, plan, pass, names, signature)
  local c = lib.code()
  local a, acc, op, def = stats_of(layer, plan)
  local shape = layer.input
  local L = pass.launch
  local V, T, ch = L.row_vec, L.block, shape.dim[1]
  local U = ch // V
  local slots = T // U
  local pixels = shape.sample // ch
  local io = lib.io_ctype(layer)
  c:line("/* pass %d: statistics s%d of the input for the prologue's %s (pro%d): a key a pixel over its %d channels, by pixel rows (channels last): %d pixels a block, %d channels a thread at a time */",
    pass.index, a, op.spec_name, plan.pro_norm, ch, L.row_pixels, V)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", T, pass.kernel, signature)
  c:open("{")
  rows_head(c, layer, names, U, V)
  c:line("__align__(16) %s xv[%d][%d];", io, L.elems, V)
  c:line("#pragma unroll")
  c:open("for (int it = 0; it < %d; ++it) {", L.elems)
  c:line("const int pl = min((int)blockIdx.x * %d + it * %d + slot, %d); /* clamped: a valid address, its key not flushed */",
    L.row_pixels, slots, pixels - 1)
  c:line("const %s *at = xs + (unsigned long long)pl * %d + ch0;", io, ch)
  load_vector(c, "xv[it]", V)
  c:close()
  c:line("__shared__ double sh[2][%d][%d]; /* [sums, squares][the block's pixel][its threads] */", L.row_pixels, U)
  c:line("#pragma unroll")
  c:open("for (int it = 0; it < %d; ++it) {", L.elems)
  c:line("const int p = min((int)blockIdx.x * %d + it * %d + slot, %d);", L.row_pixels, slots, pixels - 1)
  local coords = pixel_coords(c, shape, "p")
  c:line("double s = %s, s2 = %s;", def.identity, def.identity)
  sum_vector(c, layer, plan, pass, names, def, coords, "xv[it]", V, false)
  c:line("sh[0][it * %d + slot][t %% %d] = s;", slots, U)
  c:line("sh[1][it * %d + slot][t %% %d] = s2;", slots, U)
  c:close()
  c:line("__syncthreads();")
  c:open("for (int i = t; i < %d; i += %d) {", L.row_pixels, T)
  c:line("const int q = (int)blockIdx.x * %d + i;", L.row_pixels)
  c:line("if (q >= %d) break;", pixels)
  c:line("double sq = %s, sq2 = %s;", def.identity, def.identity)
  c:line("#pragma unroll")
  c:open("for (int u = 0; u < %d; ++u) {", U)
  c:line("sq += sh[0][i][u];")
  c:line("sq2 += sh[1][i][u];")
  c:close()
  flush_key(c, plan, names, "sq", "sq2")
  c:close()
  c:close()
  return c
end

-- The most pixels a thread of the statistics pass by pixel rows loads before it uses the
-- first: their 16-byte loads in flight together, at most 8 x 16 bytes of registers a thread
-- (the input pack by rows loads all of its FG_PACK_ROWS_ITERS pixels at once)
local ROWS_IN_FLIGHT = 8

-- The statistics pass by pixel rows (planner.c pro_stats_rows: a channels-last input, a
-- statistic over every spatial dim, so a key is a group of channels): thread t reads the
-- V channels (16 bytes) (t % U) * V.. of every (T / U)-th pixel of the block's ROWS pixels,
-- through the prologue's ops before the norm, into per-channel fp64 sums; the block then
-- sums them per channel through shared memory and flushes one partial a key. An input not
-- 16-byte aligned (a view) is read an element at a time, into the same sums.
function M.render_rows(layer, plan, pass, names, signature)
  if layer.pro[plan.pro_norm].stat.per_position then return M.render_pixel_rows(layer, plan, pass, names, signature) end
  local c = lib.code()
  local a, acc, op, def = stats_of(layer, plan)
  local shape = layer.input
  local keys = acc.keys_per_sample
  local L = pass.launch
  local V, T, ch = L.row_vec, L.block, shape.dim[1]
  local U = ch // V
  local slots = T // U
  local pixels = shape.sample // ch
  local io = lib.io_ctype(layer)
  c:line("/* pass %d: statistics s%d of the input for the prologue's %s (pro%d): %d keys of %d elements per sample, by pixel rows (channels last): %d pixels a block, %d channels a thread at a time */",
    pass.index, a, op.spec_name, plan.pro_norm, keys, acc.count_per_sample, L.row_pixels, V)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", T, pass.kernel, signature)
  c:open("{")
  rows_head(c, layer, names, U, V)
  c:line("double s[%d], s2[%d];", V, V)
  c:line("#pragma unroll")
  c:line("for (int e = 0; e < %d; ++e) s[e] = s2[e] = %s;", V, def.identity)
  -- ROWS_IN_FLIGHT pixels' loads first, then their sums: loads each behind its own guard,
  -- interleaved with the sums, went out one at a time (bench/NOTES.md v33)
  local bursts = (L.elems + ROWS_IN_FLIGHT - 1) // ROWS_IN_FLIGHT
  local burst = (L.elems + bursts - 1) // bursts -- as even as they go (11 pixels: 6 + 5, not 8 + 3)
  c:open("for (int it0 = 0; it0 < %d; it0 += %d) {", L.elems, burst)
  c:line("__align__(16) %s xv[%d][%d];", io, burst, V)
  c:line("#pragma unroll")
  c:open("for (int u = 0; u < %d; ++u) {", burst)
  c:line("const int pl = min((int)blockIdx.x * %d + min(it0 + u, %d) * %d + slot, %d); /* clamped: a valid address, its sums skipped below */",
    L.row_pixels, L.elems - 1, slots, pixels - 1)
  c:line("const %s *at = xs + (unsigned long long)pl * %d + ch0;", io, ch)
  load_vector(c, "xv[u]", V)
  c:close()
  c:line("#pragma unroll")
  c:open("for (int u = 0; u < %d; ++u) {", burst)
  c:line("const int p = (int)blockIdx.x * %d + (it0 + u) * %d + slot;", L.row_pixels, slots)
  c:open("if (it0 + u < %d && p < %d) {", L.elems, pixels)
  -- the pixel's spatial coordinates, once a pixel (the ops before the norm may read them)
  local coords = pixel_coords(c, shape, "p")
  sum_vector(c, layer, plan, pass, names, def, coords, "xv[u]", V, true)
  c:close()
  c:close()
  c:close()
  -- a slot's sums in shared memory at e * U + (t % U) for channel ch0 + e, so that a warp's
  -- stores of one e are consecutive doubles (no bank conflicts)
  c:line("/* the block's sums a channel: each slot's, then the slots' together, then a key's channels; channel c at (c %% %d) * %d + c / %d */",
    V, U, V)
  c:line("__shared__ double sh[2][%d][%d];", slots, ch)
  c:line("#pragma unroll")
  c:open("for (int e = 0; e < %d; ++e) {", V)
  c:line("sh[0][slot][e * %d + ch0 / %d] = s[e];", U, V)
  c:line("sh[1][slot][e * %d + ch0 / %d] = s2[e];", U, V)
  c:close()
  c:line("__syncthreads();")
  c:open("for (int i = t; i < %d; i += %d) {", ch, T)
  c:open("for (int j = 1; j < %d; ++j) {", slots)
  c:line("sh[0][0][i] += sh[0][j][i];")
  c:line("sh[1][0][i] += sh[1][j][i];")
  c:close()
  c:close()
  c:line("__syncthreads();")
  c:open("for (int q = t; q < %d; q += %d) {", keys, T)
  c:line("double sq = %s, sq2 = %s;", def.identity, def.identity)
  c:open("for (int c = q * %d; c < (q + 1) * %d; ++c) {", ch // keys, ch // keys)
  c:line("sq += sh[0][0][(c %% %d) * %d + c / %d];", V, U, V)
  c:line("sq2 += sh[1][0][(c %% %d) * %d + c / %d];", V, U, V)
  c:close()
  flush_key(c, plan, names, "sq", "sq2")
  c:close()
  c:close()
  return c
end

return M
