-- SPDX-License-Identifier: Apache-2.0
-- The conv pass: a direct convolution specialized to the layer's shapes, with the pass's
-- chain of ops fused into its epilogue. This file holds the FMA engine (below), the
-- geometry and input staging both engines use, and the epilogue they share (M.epilogue);
-- conv_mma.lua is the tensor-core engine.
--
-- FMA engine: a block computes a tile of outputs (tile D x H x W) for every channel of one group (or a
-- part, when the input is staged in chunks), one channel tile of thread_co channels at a
-- time. All threads work on the same channels at the same time, so the weights they read
-- are warp-uniform: float4 broadcast loads from shared memory, laid out [ci][tap][co]. Each
-- thread keeps thread_h rows x thread_w outputs x thread_co channels in registers; for each
-- input channel and kernel row it loads the input row segment it needs once and reuses it
-- across the kernel's columns. Tap loops and the register tile are unrolled here; the
-- input-channel loop is unrolled by the planner's ci_unroll only, because unrolling
-- everything falls off the instruction-cache cliff (DESIGN.md).
local lib = import("lib")
local expr = import("expr")
local feed = import("feed")
local prologue = import("prologue")

local M = {}

-- Geometry in D, H, W order (2D convs have depth 1).
function M.geometry(layer)
  local conv = layer.ops[0]
  local sp = conv.spatial
  local function dhw(v, fill)
    if sp == 3 then return { v[0], v[1], v[2] } end
    return { fill, v[0], v[1] }
  end
  local ins, outs = conv.in_shape, conv.out_shape
  local g = {
    sp = sp,
    I = sp == 3 and { ins.dim[2], ins.dim[3], ins.dim[4] } or { 1, ins.dim[2], ins.dim[3] },
    O = sp == 3 and { outs.dim[2], outs.dim[3], outs.dim[4] } or { 1, outs.dim[2], outs.dim[3] },
    K = dhw(conv.kernel, 1), S = dhw(conv.stride, 1), P = dhw(conv.padding, 0), Dl = dhw(conv.dilation, 1),
    cin_g = ins.dim[1] // conv.groups,
    cout_g = conv.out_channels // conv.groups,
    groups = conv.groups,
    in_sample = ins.sample,
    conv = conv,
    half = lib.io_half(layer), -- the input and output are bf16/fp16 (lib.io_prelude)
    io = lib.io_ctype(layer),
    cl = lib.io_cl(layer), -- the input and output are channels last (N(D)HWC)
    cin = ins.dim[1],
  }
  g.taps = g.K[1] * g.K[2] * g.K[3]
  g.in_plane = g.I[1] * g.I[2] * g.I[3]
  -- from one group's first input channel to the next's
  g.group_in_stride = g.cl and g.cin_g or g.cin_g * g.in_plane
  return g
end

-- A conv pass applies the layer's prologue where it stages the input: g.prologue(c, x,
-- coords) prints it and returns the value (nil without a prologue).
function M.set_prologue(g, layer, plan, pass, names)
  if not prologue.active(layer) then return end
  g.prologue = function(c, x, coords)
    return prologue.apply(c, layer, plan, pass, names, x, coords, layer.n_pro)
  end
end

-- The thread tile and shared-memory layout of a pass, from the planner's tiling.
function M.tiling(g, t)
  local T = {
    RC = t.thread_co, RH = t.thread_h, RW = t.thread_w,
    TZ = t.threads[0], TY = t.threads[1], TX = t.threads[2],
    TD = t.tile[0], TH = t.tile[1], TW = t.tile[2],
    CIC = t.ci_chunk, COT = t.co_tile, unroll = t.ci_unroll,
    IT = { t.in_tile[0], t.in_tile[1], t.in_tile[2] },
  }
  T.ITILE = T.IT[1] * T.IT[2] * T.IT[3]
  T.NCT = T.RC > 0 and T.COT // T.RC or 0 -- FMA engine only
  T.BLOCK = T.TX * T.TY * T.TZ
  -- shared memory as the planner laid it out (fg_smem_layout): never recomputed here
  local L = t.smem
  T.COT4 = L.weights_co_pitch -- FMA: floats per (channel, tap) row of weights
  T.CP = L.channel_pitch -- floats between staged channels
  T.W_OFFSET = L.weights_offset - L.input_offset -- from the input tile to the weights
  return T
end

-- Appends to `checks` the conditions for input coordinates id, ih, iw to lie inside the
-- input (those that padding can break; a 2D conv's id is always 0).
local function inside_checks(g, checks)
  local vars = { "id", "ih", "iw" }
  for i = 1, 3 do
    if not (g.sp == 2 and i == 1) then
      if g.P[i] > 0 then checks[#checks + 1] = vars[i] .. " >= 0" end
      checks[#checks + 1] = string.format("%s < %d", vars[i], g.I[i])
    end
  end
  return checks
end

-- Issues the copies of input channels ci0 .. ci0+CIC-1 of the tile into s_in (zero outside
-- the input and past the last channel), channel planes T.CP floats apart. `how` (optional,
-- the channels-last mapping) replaces the channel check (ci_check), the shared-memory index
-- (dst), the channel's offset within a pixel (src_ci) and its number (channel).
function M.stage_input(c, g, T, how)
  how = how or {}
  c:open("for (int e = t; e < %d; e += %d) {", T.CIC * T.ITILE, T.BLOCK)
  if g.cl then
    -- a channels-last input: consecutive threads read consecutive channels of one pixel
    c:line("const int r = e / %d, ci = e %% %d;", T.CIC, T.CIC)
  else
    c:line("const int ci = e / %d, r = e %% %d;", T.ITILE, T.ITILE)
  end
  c:line("const int a = r / %d, b = (r / %d) %% %d, cw = r %% %d;", T.IT[2] * T.IT[3], T.IT[3], T.IT[2], T.IT[3])
  c:line("const int id = id0 + a, ih = ih0 + b, iw = iw0 + cw;")
  local checks = {}
  if how.ci_check ~= nil then
    if how.ci_check then checks[#checks + 1] = how.ci_check end -- false: every staged channel exists
  elseif g.cin_g % T.CIC ~= 0 then
    checks[#checks + 1] = string.format("ci0 + ci < %d", g.cin_g)
  end
  inside_checks(g, checks)
  -- cp.async: every copy of the tile is in flight at once (a plain load-then-store loop
  -- waits for each load's latency in turn); outside the input it zero-fills
  c:line("const bool in = %s;", table.concat(checks, " && "))
  local dst = how.dst or ((T.CP == T.ITILE and not g.cl) and "e" or string.format("ci * %d + r", T.CP))
  local src = string.format("xg + (fg_u64)(ci0 + ci) * %d + (id * %d + ih) * %d + iw", g.in_plane, g.I[2], g.I[3])
  if g.cl then
    src = string.format("xg + (fg_u64)((id * %d + ih) * %d + iw) * %d + (%s)", g.I[2], g.I[3], g.cin,
      how.src_ci or "ci0 + ci")
  end
  if g.prologue then
    -- a prologue (prologue.lua): each element inside the input is loaded (widened), goes
    -- through the ops before the conv and is stored; the padding stays 0 (the conv pads the
    -- normalized tensor). A plain load-then-store, as for a half input.
    local sp = g.sp == 3 and { "id", "ih", "iw" } or { "ih", "iw" }
    local coords = { [1] = how.channel or string.format("g * %d + ci0 + ci", g.cin_g) }
    for i, v in ipairs(sp) do coords[i + 1] = v end
    c:line("float xs = 0.0f;")
    c:open("if (in) {")
    c:line("const float xv = %s;", g.half and "fg_io_load(" .. src .. ")" or "*(" .. src .. ")")
    c:line("xs = %s;", g.prologue(c, "xv", coords))
    c:close()
    c:line("s_in[%s] = xs;", dst)
  elseif g.half then
    -- a bf16/fp16 input: a converting load (cp.async copies bytes, it cannot widen); the
    -- barrier that ends the staging orders these stores as it orders the copies
    c:line("s_in[%s] = in ? fg_io_load(%s) : 0.0f;", dst, src)
  else
    -- (each element its own 4-byte copy: any float's address will do, in either layout)
    c:line("fg_cp_async4(s_in + %s, in ? %s : xg, in);", dst, src)
  end
  c:close()
end

-- The device helpers of the channels-last staging in 16-byte vectors (M.stage_input_vec),
-- for a layer one of whose passes uses it ("" otherwise: other sources stay as they were).
function M.prelude(layer, plan)
  local used = false
  for i = 0, plan.n_passes - 1 do
    local pass = plan.passes[i]
    used = used or (pass.kind == "conv" and pass.conv.in_vec > 0)
  end
  if not used then return "" end
  if lib.io_half(layer) then
    -- each element widened as the dtype's loads widen it (lib.io_prelude, fg_io_widen)
    return [[
/* 8 elements (a 16-byte vector, element 0 in the low bits of x) widened into s[0..7]
 * (16-byte aligned) */
__device__ __forceinline__ void fg_io_widen8(float *s, uint4 v)
{
    *(float4 *)s = make_float4(fg_io_widen((unsigned short)v.x), fg_io_widen((unsigned short)(v.x >> 16)),
                               fg_io_widen((unsigned short)v.y), fg_io_widen((unsigned short)(v.y >> 16)));
    *(float4 *)(s + 4) = make_float4(fg_io_widen((unsigned short)v.z), fg_io_widen((unsigned short)(v.z >> 16)),
                                     fg_io_widen((unsigned short)v.w), fg_io_widen((unsigned short)(v.w >> 16)));
}
]]
  end
  return [[
/* cp.async of 16 bytes (both addresses 16-byte aligned); with `valid` false it writes
 * zeros and reads nothing */
__device__ __forceinline__ void fg_cp_async16(float *dst, const float *src, bool valid)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
]]
end

-- The channels-last mapping's staging in 16-byte vectors (fg_conv_tiling.in_vec: the planner
-- checked that every vector is 16-byte aligned in memory and in s_in, given an aligned xg).
-- A work item is V consecutive channels of one pixel of the tile: its indices are computed
-- once for V elements, and it is one 16-byte load where the scalar loop (M.stage_input) does
-- V loads, each waited for before its store. A half input is loaded into registers and
-- widened (cp.async copies bytes): up to 8 items' loads are issued before their stores, so
-- their latencies overlap; a float input is copied by cp.async, whose copies are all in
-- flight at once anyway. Where xg is not 16-byte aligned (a view: the check is block
-- uniform), `scalar()` prints the scalar loop. `vec_check`: the vector's channel check of a
-- ragged channel block (vectors are wholly inside or outside the input's channels), or nil.
function M.stage_input_vec(c, g, T, V, vec_check, scalar)
  -- consecutive pixels in s_in are consecutive runs of CIC channels, item e's at e * V
  if T.PP ~= T.CIC then error("the vector staging needs the pixel pitch to be the staged channels") end
  local NV = T.CIC // V -- vectors a pixel
  local N = NV * T.ITILE
  local function item(e)
    c:line("const int r = %s / %d, cv = %s %% %d * %d;", e, NV, e, NV, V)
    c:line("const int a = r / %d, b = (r / %d) %% %d, cw = r %% %d;", T.IT[2] * T.IT[3], T.IT[3], T.IT[2], T.IT[3])
    c:line("const int id = id0 + a, ih = ih0 + b, iw = iw0 + cw;")
  end
  local src = string.format("xg + (fg_u64)((id * %d + ih) * %d + iw) * %d + cv", g.I[2], g.I[3], g.cin)
  c:open("if (((fg_u64)xg & 15) == 0) { /* the input in 16-byte vectors of %d channels of a pixel */", V)
  if g.half then
    local U = math.min((N + T.BLOCK - 1) // T.BLOCK, 8)
    local tail = N % (U * T.BLOCK) ~= 0 -- the last round's items past the tile
    c:open("for (int e0 = t; e0 < %d; e0 += %d) {", N, U * T.BLOCK)
    c:line("uint4 v[%d];", U)
    c:line("#pragma unroll")
    c:open("for (int u = 0; u < %d; ++u) {", U)
    c:line("const int e = e0 + u * %d;", T.BLOCK)
    item("e")
    local checks = {}
    if tail then checks[1] = string.format("e < %d", N) end
    if vec_check then checks[#checks + 1] = vec_check end
    c:line("const bool in = %s;", table.concat(inside_checks(g, checks), " && "))
    c:line("v[u] = in ? *(const uint4 *)(%s) : make_uint4(0u, 0u, 0u, 0u);", src)
    c:close()
    c:line("#pragma unroll")
    c:open("for (int u = 0; u < %d; ++u)", U)
    if tail then
      c:line("if (e0 + u * %d < %d) fg_io_widen8(s_in + (e0 + u * %d) * %d, v[u]);", T.BLOCK, N, T.BLOCK, V)
    else
      c:line("fg_io_widen8(s_in + (e0 + u * %d) * %d, v[u]);", T.BLOCK, V)
    end
    c.depth = c.depth - 1
    c:close()
  else
    c:open("for (int e = t; e < %d; e += %d) {", N, T.BLOCK)
    item("e")
    local checks = {}
    if vec_check then checks[1] = vec_check end
    c:line("const bool in = %s;", table.concat(inside_checks(g, checks), " && "))
    c:line("fg_cp_async16(s_in + e * %d, in ? %s : xg, in);", V, src)
    c:close()
  end
  c:close("} else {")
  c.depth = c.depth + 1
  scalar()
  c:close()
end

-- Stages input channels ci0 .. ci0+CIC-1 of the tile and their weights for the block's
-- channels, laid out [ci][tap][co].
function M.stage(c, g, T, names)
  M.stage_input(c, g, T)
  c:open("for (int e = t; e < %d; e += %d) {", T.CIC * g.taps * T.COT4, T.BLOCK)
  c:line("const int ci = e / %d, tap = (e / %d) %% %d, co = e %% %d;", g.taps * T.COT4, T.COT4, g.taps, T.COT4)
  local wchecks = { string.format("co0 + co < %d", g.cout_g) }
  if g.cin_g % T.CIC ~= 0 then wchecks[#wchecks + 1] = string.format("ci0 + ci < %d", g.cin_g) end
  c:line("s_w[e] = (%s) ? wg[(fg_u64)co * %d + (ci0 + ci) * %d + tap] : 0.0f;", table.concat(wchecks, " && "),
    g.cin_g * g.taps, g.taps)
  c:close()
  c:line("fg_cp_async_wait_all();")
end

-- Loads `n` consecutive floats from shared memory at `base` + off into variables named
-- prefix0.., using the widest aligned vector loads (the planner pads rows to 4 floats and
-- `aligned` tells whether the thread's offset is a multiple of 4).
local function load_row(c, prefix, base, off, n, aligned)
  local j = 0
  while j < n do
    local left = n - j
    local a = (off + j) % 4
    if aligned and a == 0 and left >= 4 then
      c:line("const float4 %sv%d = *(const float4 *)(%s + %d);", prefix, j, base, off + j)
      c:line("const float %s%d = %sv%d.x, %s%d = %sv%d.y, %s%d = %sv%d.z, %s%d = %sv%d.w;", prefix, j, prefix, j, prefix,
        j + 1, prefix, j, prefix, j + 2, prefix, j, prefix, j + 3, prefix, j)
      j = j + 4
    elseif aligned and a % 2 == 0 and left >= 2 then
      c:line("const float2 %sv%d = *(const float2 *)(%s + %d);", prefix, j, base, off + j)
      c:line("const float %s%d = %sv%d.x, %s%d = %sv%d.y;", prefix, j, prefix, j, prefix, j + 1, prefix, j)
      j = j + 2
    else
      c:line("const float %s%d = %s[%d];", prefix, j, base, off + j)
      j = j + 1
    end
  end
end

-- acc[RC][RH][RW] += the staged channels' contribution, for channel tile `ct`.
function M.accumulate(c, g, T)
  local S, K, Dl = g.S, g.K, g.Dl
  local row_len = (T.RW - 1) * S[3] + (K[3] - 1) * Dl[3] + 1
  local aligned = (T.RW * S[3]) % 4 == 0
  local plane = T.IT[2] * T.IT[3]
  c:line(T.unroll > 1 and string.format("#pragma unroll %d", T.unroll) or "#pragma unroll 1")
  c:open("for (int ci = 0; ci < %d; ++ci) {", T.CIC)
  c:line("const float *si = s_in + ci * %d + tz * %d + ty * %d + tx * %d;", T.CP, S[1] * plane, T.RH * S[2] * T.IT[3],
    T.RW * S[3])
  c:line("const float4 *sw = (const float4 *)(s_w + ci * %d + ct * %d);", g.taps * T.COT4, T.RC)
  for kd = 0, K[1] - 1 do
    for kh = 0, K[2] - 1 do
      if g.sp == 3 then c:open("{ /* taps %d,%d,* */", kd, kh) else c:open("{ /* taps %d,* */", kh) end
      for r = 0, T.RH - 1 do
        load_row(c, "x" .. r .. "_", "si", kd * Dl[1] * plane + (r * S[2] + kh * Dl[2]) * T.IT[3], row_len, aligned)
      end
      for kw = 0, K[3] - 1 do
        local tap = (kd * K[2] + kh) * K[3] + kw
        if g.sp == 3 then c:open("{ /* tap %d,%d,%d */", kd, kh, kw) else c:open("{ /* tap %d,%d */", kh, kw) end
        for q = 0, T.RC // 4 - 1 do
          c:line("const float4 w%d = sw[%d];", q, (tap * T.COT4) // 4 + q)
        end
        local comps = { "x", "y", "z", "w" }
        for j = 0, T.RC - 1 do
          local wv = string.format("w%d.%s", j // 4, comps[j % 4 + 1])
          local fmas = {}
          for r = 0, T.RH - 1 do
            for px = 0, T.RW - 1 do
              local xi = px * S[3] + kw * Dl[3]
              fmas[#fmas + 1] = string.format("acc[%d][%d][%d] = fmaf(x%d_%d, %s, acc[%d][%d][%d]);", j, r, px, r, xi, wv,
                j, r, px)
            end
          end
          c:line(table.concat(fmas, " "))
        end
        c:close()
      end
      c:close()
    end
  end
  c:close()
end

-- The key expression of statistics slot q (per-slot partials: one channel each).
local function slot_key_fn(g, ev, th)
  return function(a, q)
    local co = th.slot_co(q)
    local cc = { string.format("(g * %d + %s)", g.cout_g, co) }
    for d = 2, g.conv.out_shape.rank - 1 do cc[d] = "0" end
    return string.format("%s < %d ? %s : -1LL", co, g.cout_g, ev:accum_key(a, cc))
  end
end

-- The statistics partials of an epilogue are declared before it (feed.declare) and fed after
-- it (this): callers that run several epilogues into the same slots (one per tile) do both
-- themselves and pass th.feeds_outside.
function M.feeds_finish(c, g, plan, pass, ev, slots, th)
  feed.finish(c, ev, plan, pass.feeds, slots, th.slot_key or slot_key_fn(g, ev, th), th.merge_lanes)
end

-- The epilogue of a conv pass: the chain of ops after the conv at every output a thread
-- holds, the stores, and the statistics fed. `th` describes how the thread's values are
-- laid out: `loops` ({variable, extent}, unrolled, the last th.rows_unroll iterations at a time
-- where that is set, a prefetched chunk (below) at a time where there are chunks; the first
-- picks the channel), `value`
-- (the accumulator), `co` (the channel within the group), `od`/`oh`/`ow` (output
-- coordinates), `slot` (the loop variable naming a statistics slot when `slots` > 0),
-- slot_co(q) (the channel of slot q) or slot_key(a, q) (the key of slot q of accumulator a,
-- where slots are not channels), `merge_lanes` (slots of neighbouring lanes may share a
-- statistic: add them up across the warp before the atomics), `pair` (the last loop runs
-- over two consecutive outputs along W; a number: over that many, 2 or 4, stored as one
-- vector where aligned) and `full` (a condition under which every output
-- the thread holds exists: that case runs without per-output checks, so the compiler can
-- interleave the outputs' work instead of branching around each); `valid` (a condition that
-- also holds a lane's outputs in, checked in both cases: lanes past a tile's channels in a
-- mapping of whole warps); `pixel`, when outputs are
-- numbered within the sample (od/oh/ow then derive from `px`, which the check bounds);
-- `slot_end(c)`, code at the end of each iteration of the first loop (where a slot's outputs
-- are all fed, every lane of the warp reaches it: a caller's per-tile partials go there; not
-- with `pair` and a single loop, which no caller has). `pair_channels`: the pair (a number)
-- runs over a lane's neighbouring channels of one pixel instead of along W, stored as one
-- vector in a channels-last target, with `co_lane` (the lane's first channel within the group:
-- the first loop declares each element's, so that per-channel loads hoist there),
-- `pair_value(e)` (element e's accumulator, in place of `value`), `pair_head(c)` (code before
-- the elements: their loads) and `pair_each(e)` (called before element e); no statistics.
-- The conv's value at an output, v0 = the accumulator + the bias (hoisted where the evaluator
-- hoists per-channel loads), opened as a scope of the evaluator in which op 0 at `coords` is
-- v0: the epilogue's ops are evaluated from it (the caller pops the scope).
function M.open_conv_value(c, conv, names, ev, acc, coords)
  if conv.bias then
    local bias = string.format("%s[%s]", names.param[conv.bias_param], coords[1])
    c:line("const float v0 = %s + %s;", acc, ev:hoisted("float", bias, { coords[1] }) or bias)
  else
    c:line("const float v0 = %s;", acc)
  end
  ev:push_scope()
  ev:remember(0, coords, "v0")
end

-- The coordinates of a conv pass's output in its epilogue (od, oh, ow: the variables it
-- declares); where outputs are numbered within the sample (`numbered`: the variable px), that
-- number too, so that indices into tensors of the output's extents need no divisions
-- (lib.lua, lin_with)
function M.output_coords(g, numbered)
  local coords = g.sp == 3 and { "c", "od", "oh", "ow" } or { "c", "oh", "ow" }
  if numbered then
    coords.px = "px"
    coords.px_dims = g.sp == 3 and { [2] = g.O[1], [3] = g.O[2], [4] = g.O[3] } or { [2] = g.O[2], [3] = g.O[3] }
  end
  return coords
end

-- Declares those variables for one output of a thread mapping `th` (its pixel, od, oh, ow
-- expressions); with outputs numbered (th.pixel) the indices use px, so od/oh/ow may go unread.
function M.declare_output_coords(c, g, th)
  if th.flat and th.predicated and th.linear then
    -- ... where nothing needs the row's own sample or pixel (fg_wgmma_tiling.flat_rows_linear):
    -- row pr of the tile is pixel pr of the batch's pixels from sample n0 on, channels last
    -- (one element index either way), so no division; px indexes only the stores, which `ok`
    -- predicates (the chain reads nothing by pixel: planner.c, chain_reads_by_channel)
    c:line("const int pr = %s;", th.pixel)
    c:line("const bool ok = pr < (long long)(batch - n0) * %d; /* the row is one of the batch's outputs */", th.flat)
    c:line("const int n = n0, px = pr;")
  elseif th.flat and th.predicated then
    -- flat tiles whose only check is the sample (planner.h, fg_wgmma_tiling.flat_predicated):
    -- a row past the batch computes its chain on the tile's first sample n0 (in bounds) and
    -- `ok` predicates its stores, so that no branch keeps the rows apart
    c:line("const int pr = %s;", th.pixel)
    c:line("const int nr = n0 + pr / %d, px = pr - (nr - n0) * %d;", th.flat, th.flat)
    c:line("const bool ok = nr < batch; /* the row is one of the batch's outputs */")
    c:line("const int n = ok ? nr : n0;")
  elseif th.flat then
    -- flat tiles (planner.h, fg_wgmma_tiling.flat): th.pixel counts from the tile's first
    -- sample n0 on; the output's sample n and its pixel px there
    -- (the empty asm keeps ptxas from computing every row's n and px once for all channel
    -- chunks of the staged epilogue and holding 32 of them live: ResNet-50's last 1x1 conv
    -- spilled at 168 registers)
    c:line("int pr = %s;", th.pixel)
    c:line("asm volatile(\"\" : \"+r\"(pr));")
    c:line("const int n = n0 + pr / %d, px = pr - (n - n0) * %d;", th.flat, th.flat)
  elseif th.pixel then
    c:line("const int px = %s;", th.pixel)
  end
  if g.sp == 3 then c:line("const int od = %s;", th.od) end
  c:line("const int oh = %s, ow = %s;", th.oh, th.ow)
  if th.pixel then c:line("(void)oh; (void)ow;%s", g.sp == 3 and " (void)od;" or "") end
end

function M.epilogue(c, g, layer, plan, pass, names, ev, slots, th)
  local conv, O = g.conv, g.O
  if not th.feeds_outside then feed.declare(c, plan, pass.feeds, slots) end
  -- with W even a pair's outputs are 8-byte aligned: one float2 store per target
  -- (a channels-last output: neighbours along W are not adjacent in memory; no pairs)
  -- a buffer held as the output is (planner.h, fg_io_buffer_value): rounded, channels last
  local io_buffer = lib.stores_io_buffer(plan, pass)
  local pair = th.pair and O[3] % 2 == 0 and not (g.cl and (pass.store_output or io_buffer))
  -- th.pair_channels: the pair runs over a lane's neighbouring channels of one pixel instead,
  -- contiguous in a channels-last target; each is its own slot of statistics, which no caller
  -- has (planner.c, fg_wgmma_epi_vec)
  if th.pair_channels then
    pair = true
    if pass.feeds.n > 0 then error("conv epilogue: channel vectors with feeds") end
  end
  -- predicated stores (th.predicated) leave every other use of an output unchecked; a vector
  -- of channels shares its row's predicate
  if th.predicated and ((pair and not th.pair_channels) or pass.feeds.n > 0) then
    error("conv epilogue: predicated stores with pairs or feeds")
  end
  local width = pair and (th.pair == true and 2 or th.pair) or 1
  local loops = th.loops
  local inner = pair and #loops - 1 or #loops -- the innermost loop that is a loop (a pair's is unrolled by hand)
  -- a vector's element e: its channel, declared where the channel is picked (the first loop),
  -- names its coordinates, so that each one's per-channel loads are hoisted there
  local function vec_channel(e) return "cvec" .. e end
  -- slot_end closes the first loop's iteration, which a pair over a single loop does not have
  if th.slot_end and pair and #loops == 1 then error("conv epilogue: slot_end with a pair over a single loop") end
  local dshape = layer.ops[pass.last].out_shape
  local targets = {} -- { array, value index (nil: the pass's domain value) }
  if pass.store_output then targets[#targets + 1] = { names.output, nil, g.half, g.cl } end
  if pass.store_buffer >= 0 then targets[#targets + 1] = { names.buffer[pass.store_buffer], nil, io_buffer, io_buffer } end
  for i = 0, pass.extra_stores.n - 1 do
    local b = pass.extra_stores[i]
    targets[#targets + 1] = { names.buffer[b], plan.buffers[b].value }
  end
  local coords = M.output_coords(g, th.pixel)
  -- whether an output exists (nil: every one does); checked: a tile that may run past the
  -- outputs, else a full tile, where some lanes may still hold none (th.valid)
  local function exists(checked)
    if not checked then return th.valid end
    -- flat tiles checked by predicated stores: every channel exists and n is in bounds
    if th.flat and th.predicated then return nil end
    local valid = { string.format("co < %d", g.cout_g) }
    if th.flat then
      -- flat tiles: every sample's pixels are there, up to the batch's end
      valid[2] = "n < batch"
    elseif th.pixel then
      -- outputs numbered within the sample (`px`, the wgmma engine): that number is the check
      valid[2] = string.format("px < %d", O[1] * O[2] * O[3])
    else
      if g.sp == 3 then valid[#valid + 1] = string.format("od < %d", O[1]) end
      valid[#valid + 1] = string.format("oh < %d", O[2])
      valid[#valid + 1] = string.format("ow < %d", O[3])
    end
    if th.valid then valid[#valid + 1] = th.valid end
    return table.concat(valid, " && ")
  end
  -- an output's channel and coordinates in the innermost loop
  local function declare_output(code)
    code:line("const int co = %s;", th.co)
    code:line("const int c = g * %d + co;", g.cout_g)
    M.declare_output_coords(code, g, th)
  end
  -- one output: the chain of ops, then store(k, index, value) for each target; e: element e of
  -- a lane's channel vector (th.pair_channels), its value th.pair_value(e)
  local function element(store, checked, e)
    declare_output(c)
    local cond = exists(checked)
    c:open(cond and string.format("if (%s) {", cond) or "{")
    local at_coords, value = coords, th.value
    if e and th.pair_channels then
      at_coords = {}
      for key, x in pairs(coords) do at_coords[key] = x end
      at_coords[1] = vec_channel(e)
      value = th.pair_value(e)
    end
    M.open_conv_value(c, conv, names, ev, value, at_coords)
    local v = ev:eval(pass.last, at_coords)
    local idx = string.format("(fg_u64)n * %d + %s", dshape.sample, lib.lin(dshape, at_coords))
    for k, tg in ipairs(targets) do
      local at = idx
      if tg[4] then at = string.format("(fg_u64)n * %d + %s", dshape.sample, lib.lin_cl(dshape, at_coords)) end
      store(k, at, tg[2] and ev:eval(tg[2], at_coords) or v)
    end
    feed.element(c, ev, plan, pass.feeds, v, at_coords, slots > 0 and th.slot or nil)
    ev:pop_scope()
    c:close()
  end
  -- A staged epilogue's tensor loads at the outputs' indices (expr.lua, prefetch), a chunk of
  -- rows' at once before any of them is stored: loaded in the row loop, each waited before its
  -- row's store, ResNet-50's last 1x1 conv (+ the residual) took 70 us at 2048 channels, 7x7,
  -- batch 32, against 22 for its first (bench/NOTES.md v41). In chunks of th.prefetch_rows
  -- rows (nil: none), `rh`; the loads go where the marker line at the chunk's head is. A
  -- block tensor has the output's shape or one value a channel ([N, C]; never prefetched:
  -- expr.lua), so the chunks exist exactly where a load is collected (not of a tensor whose
  -- tile is in shared memory: expr.lua, in_smem).
  local PREFETCH = "\1prefetch\1"
  local chunk -- rows a chunk where the pass reads a block tensor of the output's shape, else nil
  if th.prefetch_rows and not pair and loops[#loops][2] % th.prefetch_rows == 0 then
    for i = 0, pass.args.n - 1 do
      local a = pass.args[i]
      if a.kind == "param" and lib.per_pixel_tensor(layer.params[a.index]) and not ev:in_smem(a.index) then
        -- no more rows at a time than th.rows_unroll asks for (a divisor of the loop's)
        chunk = math.min(th.prefetch_rows, th.rows_unroll or th.prefetch_rows)
      end
    end
  end
  local function prefetch(checked)
    local p = ev.prefetch
    ev:set_prefetch(nil)
    local at
    for j = #c.lines, 1, -1 do
      if c.lines[j]:find(PREFETCH, 1, true) then
        at = j
        break
      end
    end
    local code = lib.code()
    code.depth = p.depth
    if #p.loads > 0 then
      code:line("/* the tensor values of these rows, loaded together before any of them is stored */")
      for k = 1, #p.loads do code:line("float pre%d[%d];", k - 1, p.rows) end
      code:line("#pragma unroll")
      code:open("for (int %s = 0; %s < %d; ++%s) {", p.var, p.var, p.rows, p.var)
      code:line("const int %s = rh + %s;", loops[#loops][1], p.var)
      declare_output(code)
      local cond = exists(checked)
      for k, load in ipairs(p.loads) do
        if cond then
          code:line("pre%d[%s] = (%s) ? %s : 0.0f;", k - 1, p.var, cond, load)
        else
          code:line("pre%d[%s] = %s;", k - 1, p.var, load)
        end
      end
      code:close()
    end
    table.remove(c.lines, at)
    for j, l in ipairs(code.lines) do table.insert(c.lines, at + j - 1, l) end
  end
  local function body(checked)
    for i = 1, inner do
      -- a thread mapping that is not the accumulators' (th.stage): the values reach the
      -- innermost loop's threads through shared memory, written here
      if i == inner and th.stage then th.stage(c) end
      -- the innermost loop th.rows_unroll iterations at a time where that is fewer than all
      -- (nil: all), or its prefetched chunks one at a time: every output of a tile unrolled,
      -- twice (full and checked), outgrows the instruction cache with a heavy chain
      local partial = i == inner and th.rows_unroll and th.rows_unroll < loops[i][2]
      c:line(partial and string.format("#pragma unroll %d", chunk and 1 or th.rows_unroll) or "#pragma unroll")
      if i == inner and chunk then
        -- the rows in chunks (prefetch above): rr = rh + rc
        local var = loops[i][1]
        c:open("for (int rh = 0; rh < %d; rh += %d) {", loops[i][2], chunk)
        c:line(PREFETCH)
        ev:set_prefetch({ var = "rc", rows = chunk, depth = c.depth })
        c:line("#pragma unroll")
        c:open("for (int rc = 0; rc < %d; ++rc) {", chunk)
        c:line("const int %s = rh + rc;", var)
      else
        c:open("for (int %s = 0; %s < %d; ++%s) {", loops[i][1], loops[i][1], loops[i][2], loops[i][1])
      end
      if i == 1 and th.pair_channels then
        -- the first loop picks the lane's channels, th.co_lane and the width's next ones
        local channels, guards = {}, {}
        for e = 0, width - 1 do
          local cv = vec_channel(e)
          c:line("const int %s = g * %d + (%s) + %d; /* the channel of element %d of the vectors below */", cv,
            g.cout_g, th.co_lane, e, e)
          channels[cv], guards[cv] = true, string.format("%s < %d", cv, g.cout_g * g.groups)
        end
        ev:set_hoist({ at = #c.lines + 1, depth = c.depth, channels = channels, guards = guards })
      elseif i == 1 then
        -- the first loop picks the channel: per-channel loads are hoisted here
        c:line("const int c = g * %d + (%s); /* the channel of the outputs below */", g.cout_g, th.co)
        ev:set_hoist({ at = #c.lines + 1, depth = c.depth, channel = "c",
          guard = string.format("c < %d", g.cout_g * g.groups) }) -- in bounds; read by valid outputs only
      end
    end
    if pair then
      local var = loops[#loops][1]
      -- per output e of the vector: its index si<e>, whether it is stored sk<e>, its values
      local function each(f, sep)
        local parts = {}
        for e = 0, width - 1 do parts[#parts + 1] = f(e) end
        return table.concat(parts, sep or ", ")
      end
      -- a lane's channel vector: every element's flag set where it exists (th.valid holds it
      -- out of the full tiles' body too: lanes past the tile's channels store nothing)
      local flagged = checked or th.pair_channels -- each element sets its own flag
      local init = flagged and "false" or "true"
      c:line("fg_u64 %s;", each(function(e) return "si" .. e .. " = 0" end))
      c:line("bool %s;", each(function(e) return "sk" .. e .. " = " .. init end))
      for k = 1, #targets do c:line("float %s;", each(function(e) return string.format("sv%d_%d = 0.0f", k, e) end)) end
      -- th.pair_head: code before the pair's elements (a vector's loads, conv_wgmma.lua);
      -- th.pair_each(e): before element e
      if th.pair_head then th.pair_head(c) end
      -- a row's predicate (th.predicated, declare_output_coords: `ok`) holds its stores
      local stored = th.predicated and "ok" or "true"
      for e = 0, width - 1 do
        c:open("{")
        c:line("const int %s = %d;", var, e)
        if th.pair_each then th.pair_each(e) end
        element(function(k, idx, v)
          if k == 1 then
            c:line("si%d = %s;%s", e, idx, flagged and string.format(" sk%d = %s;", e, stored) or "")
          end
          c:line("sv%d_%d = %s;", k, e, v)
        end, checked, e)
        c:close()
      end
      for k, tg in ipairs(targets) do
        -- the pair as one store where it is aligned: a float2, or (a bf16/fp16 output) two
        -- rounded halves as 4 bytes; four outputs: a float4, or two such words; eight: two
        -- float4s, or four words
        local function out(v) return tg[3] and "fg_io_round(" .. v .. ")" or v end
        local sv = {}
        for e = 0, width - 1 do sv[e] = string.format("sv%d_%d", k, e) end
        local function halves(e) return string.format("(unsigned)%s | ((unsigned)%s << 16)", out(sv[e]), out(sv[e + 1])) end
        -- a vector store of type ty at element off of the pair, its parts' values (a float's or
        -- a word's each); a lane's channel vectors by st.global.v4 in asm, which NVRTC keeps one
        -- 16-byte store: a plain assignment came out as four 4-byte ones beside the scalar
        -- fallback's, __stwb as a strong one (NVRTC 13.0)
        local function store(ty, off, parts)
          local at = string.format("%s + si0%s", tg[1], off > 0 and " + " .. off or "")
          if th.pair_channels and #parts == 4 then
            local f = ty == "float4" and "f" or "r"
            local ops = {}
            for i, v in ipairs(parts) do ops[i] = string.format('"%s"(%s)', f, v) end
            return string.format('asm volatile("st.global.v4.%s [%%0], {%%1, %%2, %%3, %%4};" :: "l"(%s), %s);',
              f == "f" and "f32" or "b32", at, table.concat(ops, ", "))
          end
          return string.format("*(%s *)(%s) = make_%s(%s);", ty, at, ty, table.concat(parts, ", "))
        end
        local function float4_at(e) return store("float4", e, { sv[e], sv[e + 1], sv[e + 2], sv[e + 3] }) end
        local bytes, pair = 8, store("float2", 0, { sv[0], sv[1] })
        if tg[3] then bytes, pair = 4, string.format("*(unsigned *)(%s + si0) = %s;", tg[1], halves(0)) end
        if width == 4 then
          bytes, pair = 16, float4_at(0)
          if tg[3] then bytes, pair = 8, store("uint2", 0, { halves(0), halves(2) }) end
        elseif width == 8 then
          bytes, pair = 16, float4_at(0) .. " " .. float4_at(4)
          if tg[3] then pair = store("uint4", 0, { halves(0), halves(2), halves(4), halves(6) }) end
        end
        -- a vector of channels is one store only in a channels-last target (tg[4])
        if th.pair_channels and not tg[4] then
          for e = 0, width - 1 do c:line("if (sk%d) %s[si%d] = %s;", e, tg[1], e, out(sv[e])) end
        else
          c:open("if (%s && (((fg_u64)(%s + si0) & %d) == 0)) {", each(function(e) return "sk" .. e end, " && "), tg[1], bytes - 1)
          c:line("%s", pair)
          c:close("} else {")
          c.depth = c.depth + 1
          for e = 0, width - 1 do c:line("if (sk%d) %s[si%d] = %s;", e, tg[1], e, out(sv[e])) end
          c:close()
        end
      end
    else
      -- flat tiles checked by predicated stores (declare_output_coords): only the stores
      local only = checked and th.flat and th.predicated and "if (ok) " or ""
      element(function(k, idx, v)
        c:line("%s%s[%s] = %s;", only, targets[k][1], idx, targets[k][3] and "fg_io_round(" .. v .. ")" or v)
      end, checked)
    end
    for i = inner, 1, -1 do
      -- the end of a slot's outputs (the first loop's iteration): th.slot_end takes its partials
      if i == 1 and th.slot_end then th.slot_end(c) end
      c:close()
      if i == inner and chunk then
        c:close()
        prefetch(checked)
      end
      if i == inner and th.unstage then th.unstage(c) end
    end
    ev:set_hoist(nil)
  end
  if th.full then
    c:open("if (%s) { /* every output of this thread exists */", th.full)
    body(false)
    c:close("} else {")
    c.depth = c.depth + 1
    body(true)
    c:close()
  else
    body(true)
  end
  if not th.feeds_outside then M.feeds_finish(c, g, plan, pass, ev, slots, th) end
end

-- The channels-last mapping (fg_conv_tiling.chan_lanes, planner.c conv_tiling_cl): each
-- thread one output channel (lane) and RH x RW outputs; the staged input is [pixel][channel]
-- (T.PP floats a pixel) and the weights [ci][tap][lane] (T.COT4 floats a row). A thread
-- keeps one (input channel, depth) slab of weights in registers and loads each staged input
-- row it needs once, for every output row and kernel row that read it: consecutive lanes
-- read consecutive channels of one pixel, so these loads are free of bank conflicts.
function M.accumulate_cl(c, g, T)
  local S, K, Dl = g.S, g.K, g.Dl
  local plane = T.IT[2] * T.IT[3]
  c:line("#pragma unroll 1")
  c:open("for (int ci = 0; ci < %d; ++ci) {", g.cin_g)
  c:line("const float *si = s_in + (tz * %d + ty * %d + tx * %d) * %d + cb + ci;", S[1] * plane, T.RH * S[2] * T.IT[3],
    T.RW * S[3], T.PP)
  c:line("const float *sw = s_w + ci * %d + lane;", g.taps * T.COT4)
  -- the output rows and kernel rows reading each input row of the thread's window
  local readers, rows = {}, {}
  for r = 0, T.RH - 1 do
    for kh = 0, K[2] - 1 do
      local y = r * S[2] + kh * Dl[2]
      if not readers[y] then readers[y] = {}; rows[#rows + 1] = y end
      table.insert(readers[y], { r, kh })
    end
  end
  table.sort(rows)
  for kd = 0, K[1] - 1 do
    if g.sp == 3 then c:open("{ /* taps %d,*,* */", kd) end
    for kh = 0, K[2] - 1 do
      local ws = {}
      for kw = 0, K[3] - 1 do
        ws[#ws + 1] = string.format("w%d_%d = sw[%d]", kh, kw, ((kd * K[2] + kh) * K[3] + kw) * T.COT4)
      end
      c:line("const float %s;", table.concat(ws, ", "))
    end
    for _, y in ipairs(rows) do
      c:open("{ /* input row %d */", y)
      local used = {}
      for _, rk in ipairs(readers[y]) do
        for kw = 0, K[3] - 1 do
          for px = 0, T.RW - 1 do used[px * S[3] + kw * Dl[3]] = true end
        end
      end
      local xs = {}
      for k = 0, (T.RW - 1) * S[3] + (K[3] - 1) * Dl[3] do
        if used[k] then xs[#xs + 1] = string.format("x%d = si[%d]", k, ((kd * Dl[1] * T.IT[2] + y) * T.IT[3] + k) * T.PP) end
      end
      c:line("const float %s;", table.concat(xs, ", "))
      for _, rk in ipairs(readers[y]) do
        local r, kh = rk[1], rk[2]
        for kw = 0, K[3] - 1 do
          local fmas = {}
          for px = 0, T.RW - 1 do
            fmas[#fmas + 1] = string.format("acc[%d][%d] = fmaf(x%d, w%d_%d, acc[%d][%d]);", r, px, px * S[3] + kw * Dl[3],
              kh, kw, r, px)
          end
          c:line(table.concat(fmas, " "))
        end
      end
      c:close()
    end
    if g.sp == 3 then c:close() end
  end
  c:close()
end

-- The key of pixel slot q (r * RW + p) of accumulator a, whose key is the same for every
-- channel of a pixel (feed.uniform_per_pixel): -1 past the output's edge.
-- `base`: the thread tile's first output along D, H, W.
local function pixel_key_fn(g, ev, base, T)
  return function(a, q)
    local cc = { "0" }
    local valid = {}
    local sp = { { base[1], "0" }, { base[2], string.format("(%s) / %d", q, T.RW) },
      { base[3], string.format("(%s) %% %d", q, T.RW) } }
    for i = g.sp == 3 and 1 or 2, 3 do
      local v = string.format("(%s + %s)", sp[i][1], sp[i][2])
      cc[#cc + 1] = v
      valid[#valid + 1] = string.format("%s < %d", v, g.O[i])
    end
    return string.format("(%s) ? %s : -1LL", table.concat(valid, " && "), ev:accum_key(a, cc))
  end
end

-- The conv pass on the channels-last mapping (see accumulate_cl): the block's output channels
-- c0 .. c0+lanes-1 are whole groups, whose input channels cin0 .. are contiguous in a pixel;
-- both tiles are staged once, coalesced along C.
function M.render_cl(layer, plan, pass, names, signature)
  local g = M.geometry(layer)
  M.set_prologue(g, layer, plan, pass, names)
  local t = pass.conv
  local T = M.tiling(g, t)
  T.PP = t.smem.pixel_pitch
  local conv, O = g.conv, g.O
  local L = T.COT -- lanes: output channels per block
  local cout = conv.out_channels
  local ragged = cout % L ~= 0 -- the last block's lanes past the last channel
  local c = lib.code()
  local NTH, NTW = (O[2] + T.TH - 1) // T.TH, (O[3] + T.TW - 1) // T.TW
  c:line("/* pass %d: direct conv%dd %d->%d (groups %d), kernel %dx%dx%d, stride %dx%dx%d, padding %dx%dx%d,",
    pass.index, g.sp, g.cin, cout, g.groups, g.K[1], g.K[2], g.K[3], g.S[1], g.S[2], g.S[3], g.P[1], g.P[2], g.P[3])
  c:line(" * dilation %dx%dx%d; channels innermost: block tile %dx%dx%d outputs x %d channels, a thread one channel",
    g.Dl[1], g.Dl[2], g.Dl[3], T.TD, T.TH, T.TW, L)
  c:line(" * (consecutive threads, consecutive channels) x %dx%d outputs; ops v0..v%d fused */", T.RH, T.RW, pass.last)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d, 2) %s(%s)", T.BLOCK * L, pass.kernel, signature)
  c:open("{")
  c:line("extern __shared__ __align__(16) float fg_smem[];")
  c:line("float *s_in = fg_smem;               /* [%d][%d][%d][%d] input tile with halo, channels innermost */", T.IT[1],
    T.IT[2], T.IT[3], T.PP)
  c:line("float *s_w = fg_smem + %d;           /* [%d ci][%d taps][%d lanes + 1] weights */", T.W_OFFSET, g.cin_g,
    g.taps, L)
  c:line("const int n = batch_base + (int)blockIdx.z;")
  c:line("const int t = (int)threadIdx.x;")
  c:line("const int lane = t %% %d, s = t / %d; /* the thread's channel in the block, its thread tile */", L, L)
  c:line("const int tx = s %% %d, ty = (s / %d) %% %d, tz = s / %d;", T.TX, T.TX, T.TY, T.TX * T.TY)
  c:line("const int tile = (int)blockIdx.x;")
  c:line("const int od0 = (tile / %d) * %d, oh0 = ((tile / %d) %% %d) * %d, ow0 = (tile %% %d) * %d;", NTH * NTW, T.TD,
    NTW, NTH, T.TH, NTW, T.TW)
  c:line("const int c0 = (int)blockIdx.y * %d, oc = c0 + lane; /* the block's first channel, the thread's */", L)
  c:line("const int g = oc / %d, cg = %s; /* its group, its channel there (%d: none) */", g.cout_g,
    ragged and string.format("oc < %d ? oc - g * %d : %d", cout, g.cout_g, g.cout_g) or
    string.format("oc - g * %d", g.cout_g), g.cout_g)
  c:line("const int cin0 = c0 / %d * %d, cb = lane / %d * %d; /* the block's first input channel, the thread's */",
    g.cout_g, g.cin_g, g.cout_g, g.cin_g)
  c:line("const %s *xg = %s + (fg_u64)n * %d + cin0;", g.io, names.input, g.in_sample)
  c:line("const float *wg = %s + (fg_u64)c0 * %d;", names.param[conv.weight_param], g.cin_g * g.taps)
  c:line("const int id0 = od0 * %d - %d, ih0 = oh0 * %d - %d, iw0 = ow0 * %d - %d;", g.S[1], g.P[1], g.S[2], g.P[2],
    g.S[3], g.P[3])
  c:line("(void)id0;")
  local TB = { CIC = T.CIC, ITILE = T.ITILE, IT = T.IT, BLOCK = T.BLOCK * L, CP = T.CP, PP = T.PP }
  local function scalar()
    M.stage_input(c, g, TB, {
      ci_check = ragged and string.format("cin0 + ci < %d", g.cin),
      dst = "e", src_ci = "ci", channel = "cin0 + ci",
    })
  end
  if t.in_vec > 0 then
    M.stage_input_vec(c, g, TB, t.in_vec, ragged and string.format("cin0 + cv < %d", g.cin), scalar)
  else
    scalar()
  end
  -- the weights (float32) by cp.async, each 4 bytes, transposed: all in flight at once, as
  -- the input's, where a load-then-store loop would wait for each load in turn
  local kk = g.cin_g * g.taps
  c:open("for (int e = t; e < %d; e += %d) {", L * kk, T.BLOCK * L)
  c:line("const int co = e / %d, k = e %% %d;", kk, kk)
  if ragged then
    c:line("const bool in = c0 + co < %d;", cout)
    c:line("fg_cp_async4(s_w + k * %d + co, in ? wg + e : wg, in);", T.COT4)
  else
    c:line("fg_cp_async4(s_w + k * %d + co, wg + e, true);", T.COT4)
  end
  c:close()
  c:line("fg_cp_async_wait_all();")
  c:line("__syncthreads();")
  c:line("float acc[%d][%d];", T.RH, T.RW)
  c:line("#pragma unroll")
  c:open("for (int r = 0; r < %d; ++r)", T.RH)
  c:line("#pragma unroll")
  c:line("for (int p = 0; p < %d; ++p) acc[r][p] = 0.0f;", T.RW)
  c.depth = c.depth - 1
  M.accumulate_cl(c, g, T)

  local ev = expr.new(layer, plan, pass, c, names)
  local base = { "od0 + tz", string.format("oh0 + ty * %d", T.RH), string.format("ow0 + tx * %d", T.RW) }
  local th = {
    loops = { { "j", 1 }, { "r", T.RH }, { "p", T.RW } },
    value = "acc[r][p]",
    co = "cg",
    od = base[1],
    oh = base[2] .. " + r",
    ow = base[3] .. " + p",
    -- the thread's outputs along W as one vector store into an NCHW buffer (the channels-last
    -- output needs none: there the lanes' stores are adjacent)
    pair = T.RW > 1 and T.RW or nil,
  }
  -- statistics: one slot (the thread's channel) where each accumulator's key is per channel
  -- (lanes of one group merge across the warp); a slot per output pixel where it is per
  -- pixel (layer_norm over channels: a warp's lanes share the pixel, so the warp adds up
  -- before one atomic); else running partials
  local slots = feed.conv_slots(layer, plan, pass.feeds, 1)
  -- (fg_merge_lanes shuffles across the whole warp: only where the block is whole warps)
  local whole = (T.BLOCK * L) % 32 == 0
  if slots == 1 then
    th.slot, th.slot_co, th.merge_lanes = "j", function() return "cg" end, whole
  elseif feed.per_pixel(layer, plan, pass.feeds) then
    slots = T.RH * T.RW
    th.slot = string.format("r * %d + p", T.RW)
    th.slot_key = pixel_key_fn(g, ev, base, T)
    th.merge_lanes = whole and L % 32 ~= 0 -- a warp holds several thread tiles' pixels
  end
  local full = { string.format("oh0 + ty * %d + %d <= %d", T.RH, T.RH, O[2]),
    string.format("ow0 + tx * %d + %d <= %d", T.RW, T.RW, O[3]) }
  if g.sp == 3 then table.insert(full, 1, string.format("od0 + tz < %d", O[1])) end
  if ragged then full[#full + 1] = string.format("oc < %d", cout) end
  th.full = table.concat(full, " && ")
  M.epilogue(c, g, layer, plan, pass, names, ev, slots, th)
  c:close()
  return c
end

function M.render(layer, plan, pass, names, signature)
  if pass.conv.chan_lanes > 0 then return M.render_cl(layer, plan, pass, names, signature) end
  local g = M.geometry(layer)
  M.set_prologue(g, layer, plan, pass, names)
  local T = M.tiling(g, pass.conv)
  local conv = g.conv
  local O = g.O
  local c = lib.code()
  local NTD, NTH, NTW = (O[1] + T.TD - 1) // T.TD, (O[2] + T.TH - 1) // T.TH, (O[3] + T.TW - 1) // T.TW
  local NCOB = (g.cout_g + T.COT - 1) // T.COT
  local single_chunk = T.CIC == g.cin_g

  c:line("/* pass %d: direct conv%dd %d->%d (groups %d), kernel %dx%dx%d, stride %dx%dx%d, padding %dx%dx%d,",
    pass.index, g.sp, conv.in_shape.dim[1], conv.out_channels, g.groups, g.K[1], g.K[2], g.K[3], g.S[1], g.S[2], g.S[3],
    g.P[1], g.P[2], g.P[3])
  c:line(" * dilation %dx%dx%d; block tile %dx%dx%d outputs x %d channels, thread tile %dx%d outputs x %d channels;",
    g.Dl[1], g.Dl[2], g.Dl[3], T.TD, T.TH, T.TW, T.COT, T.RH, T.RW, T.RC)
  c:line(" * ops v0..v%d fused */", pass.last)
  -- two resident blocks per SM at least: ptxas may then use up to 128 registers (its own
  -- occupancy heuristic otherwise settles on 64 and spills)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d, 2) %s(%s)", T.BLOCK, pass.kernel, signature)
  c:open("{")
  c:line("extern __shared__ __align__(16) float fg_smem[];")
  c:line("float *s_in = fg_smem;               /* [%d][%d][%d][%d] input tile with halo */", T.CIC, T.IT[1], T.IT[2], T.IT[3])
  c:line("float *s_w = fg_smem + %d;           /* [%d ci][%d taps][%d co] weights */", T.W_OFFSET, T.CIC, g.taps, T.COT4)
  c:line("const int n = batch_base + (int)blockIdx.z;")
  c:line("const int t = (int)threadIdx.x;")
  c:line("const int tx = t %% %d, ty = (t / %d) %% %d, tz = t / %d;", T.TX, T.TX, T.TY, T.TX * T.TY)
  c:line("const int tile = (int)blockIdx.x;")
  c:line("const int od0 = (tile / %d) * %d, oh0 = ((tile / %d) %% %d) * %d, ow0 = (tile %% %d) * %d;", NTH * NTW, T.TD,
    NTW, NTH, T.TH, NTW, T.TW)
  c:line("const int g = (int)blockIdx.y / %d, co0 = ((int)blockIdx.y %% %d) * %d;", NCOB, NCOB, T.COT)
  c:line("const %s *xg = %s + (fg_u64)n * %d + (fg_u64)g * %d;", g.io, names.input, g.in_sample, g.group_in_stride)
  c:line("const float *wg = %s + (fg_u64)(g * %d + co0) * %d;", names.param[conv.weight_param], g.cout_g, g.cin_g * g.taps)
  c:line("const int id0 = od0 * %d - %d, ih0 = oh0 * %d - %d, iw0 = ow0 * %d - %d;", g.S[1], g.P[1], g.S[2], g.P[2],
    g.S[3], g.P[3])
  c:line("(void)id0;")
  c:line("float acc[%d][%d][%d];", T.RC, T.RH, T.RW)

  -- the epilogue's evaluator and statistics
  local ev = expr.new(layer, plan, pass, c, names)
  local slots = feed.conv_slots(layer, plan, pass.feeds, T.RC)

  if single_chunk then
    c:line("const int ci0 = 0;")
    M.stage(c, g, T, names)
    c:line("__syncthreads();")
  end
  c:line("#pragma unroll 1")
  c:open("for (int ct = 0; ct < %d; ++ct) {", T.NCT)
  c:line("if (co0 + ct * %d >= %d) break; /* a block-uniform condition */", T.RC, g.cout_g)
  c:line("#pragma unroll")
  c:open("for (int j = 0; j < %d; ++j)", T.RC)
  c:line("#pragma unroll")
  c:open("for (int r = 0; r < %d; ++r)", T.RH)
  c:line("#pragma unroll")
  c:line("for (int p = 0; p < %d; ++p) acc[j][r][p] = 0.0f;", T.RW)
  c.depth = c.depth - 2
  if not single_chunk then
    c:line("#pragma unroll 1")
    c:open("for (int ci0 = 0; ci0 < %d; ci0 += %d) {", g.cin_g, T.CIC)
    c:line("__syncthreads();")
    M.stage(c, g, T, names)
    c:line("__syncthreads();")
  end
  M.accumulate(c, g, T)
  if not single_chunk then c:close() end

  local full = { string.format("oh0 + ty * %d + %d <= %d", T.RH, T.RH, O[2]),
    string.format("ow0 + tx * %d + %d <= %d", T.RW, T.RW, O[3]),
    string.format("co0 + ct * %d + %d <= %d", T.RC, T.RC, g.cout_g) }
  if g.sp == 3 then table.insert(full, 1, string.format("od0 + tz < %d", O[1])) end
  M.epilogue(c, g, layer, plan, pass, names, ev, slots, {
    loops = { { "j", T.RC }, { "r", T.RH }, { "p", T.RW } },
    value = "acc[j][r][p]",
    co = string.format("co0 + ct * %d + j", T.RC),
    od = "od0 + tz",
    oh = string.format("oh0 + ty * %d + r", T.RH),
    ow = string.format("ow0 + tx * %d + p", T.RW),
    slot = "j",
    slot_co = function(q) return string.format("co0 + ct * %d + %s", T.RC, q) end,
    full = table.concat(full, " && "),
  })
  if not single_chunk then c:line("__syncthreads(); /* the next channel tile restages */") end
  c:close()
  c:close()
  return c
end

return M
