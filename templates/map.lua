-- SPDX-License-Identifier: Apache-2.0
-- A map pass: each thread evaluates the pass's chain at a few elements of its domain,
-- starting from a workspace buffer (or from accumulated statistics), writes the result
-- and feeds the statistics the next pass needs.
local lib = import("lib")
local expr = import("expr")
local feed = import("feed")
local chan_sums = import("chan_sums")

local M = {}

-- The buffers the pass reads: its source, then values an earlier pass stored for this one
-- to read back (named operands), but not those it stores itself.
local function read_buffers(pass)
  local list = {}
  if pass.source_buffer >= 0 then list[1] = pass.source_buffer end
  for a = 0, pass.args.n - 1 do
    local arg = pass.args[a]
    if arg.kind == "buffer" and arg.index ~= pass.store_buffer and arg.index ~= pass.source_buffer then
      local is_store = false
      for i = 0, pass.extra_stores.n - 1 do is_store = is_store or pass.extra_stores[i] == arg.index end
      if not is_store then list[#list + 1] = arg.index end
    end
  end
  return list
end

-- What the pass writes at each element: { pointer, value }, the output or a buffer.
local function stores(plan, pass, names)
  local list = {}
  if pass.store_output then list[#list + 1] = { names.output, pass.last } end
  if pass.store_buffer >= 0 then list[#list + 1] = { names.buffer[pass.store_buffer], pass.last } end
  for i = 0, pass.extra_stores.n - 1 do
    local b = pass.extra_stores[i]
    list[#list + 1] = { names.buffer[b], plan.buffers[b].value }
  end
  return list
end

function M.render(layer, plan, pass, names, signature)
  local c = lib.code()
  local dshape = layer.ops[pass.domain].out_shape
  local block = pass.launch.block
  local per_thread = pass.launch.elems
  if pass.store_output and lib.io_cl(layer) then
    -- the output index is taken from the domain's coordinates: they must be the output's
    local oshape = layer.ops[pass.last].out_shape
    local same = oshape.rank == dshape.rank
    for d = 1, dshape.rank - 1 do same = same and oshape.dim[d] == dshape.dim[d] end
    if not same then error("layout \"channels_last\": a map pass whose domain is not the layer output's shape") end
  end
  c:line("/* pass %d: v%d..v%d at each of the %d elements of v%d per sample */", pass.index, pass.first, pass.last,
    dshape.sample, pass.domain)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", block, pass.kernel, signature)
  c:open("{")
  c:line("const int n = batch_base + (int)blockIdx.z;")
  local ev = expr.new(layer, plan, pass, c, names)
  if pass.chan_sums >= 0 then chan_sums.install(c, ev, layer, plan, pass) end
  for _, b in ipairs(read_buffers(pass)) do ev:load_from_buffer(plan.buffers[b].value, b) end
  feed.declare(c, plan, pass.feeds, 0)
  if pass.launch.tile_c > 0 then -- it feeds no statistic (planner.c, map_cl_tile)
    M.render_cl_tiled(c, ev, layer, plan, pass, names)
    c:close()
    return c
  end
  if pass.launch.cl_vec > 0 then -- a source held channels last (planner.c, map_launch)
    M.render_cl_vec(c, ev, layer, plan, pass, names)
    c:close()
    return c
  end
  if M.vectorizable(layer, plan, pass) then
    M.render_vectorized(c, ev, layer, plan, pass, names)
    feed.finish(c, ev, plan, pass.feeds, 0)
    c:close()
    return c
  end
  c:open("for (int e = 0; e < %d; ++e) {", per_thread)
  c:line("const long long li = ((long long)blockIdx.x * %d + e) * %d + (int)threadIdx.x;", per_thread, block)
  c:open("if (li < %d) {", dshape.sample)
  c:line("const int i = (int)li;")
  ev:push_scope()
  local coords
  if pass.source_buffer >= 0 and plan.buffers[pass.source_buffer].io then
    -- a source held channels last (planner.h, fg_io_buffer_value): elements in that order, so
    -- that its loads and the output's stores are contiguous
    coords = lib.unravel_cl(c, dshape, "i", "o")
  else
    coords = lib.unravel(c, dshape, "i", "o")
  end
  local v = ev:eval(pass.last, coords)
  for _, st in ipairs(stores(plan, pass, names)) do
    local v = ev:eval(st[2], coords)
    local at = "i"
    if st[1] == names.output and lib.io_cl(layer) then at = lib.lin_cl(dshape, coords) end
    c:line("%s[(fg_u64)n * %d + %s] = %s;", st[1], dshape.sample, at, st[1] == names.output and lib.io_store(layer, v) or v)
  end
  feed.element(c, ev, plan, pass.feeds, v, coords, nil)
  ev:pop_scope()
  c:close()
  c:close()
  feed.finish(c, ev, plan, pass.feeds, 0)
  c:close()
  return c
end

-- A source held channels last in the layer's dtype (planner.h, fg_buffer.io; the planner's
-- launch.cl_*): thread t of a block takes vectors t, t + S, ... (S = cl_stride vectors, a multiple
-- of C / 8) of 8 consecutive elements of that order, the same 8 channels of cl_vectors pixels:
-- its per-channel loads (statistics, affine parameters) are hoisted above its vectors, all its
-- 16-byte loads of the source issued before any arithmetic, each vector's outputs one store
-- where the output is aligned. The pass reads no other buffer, stores only the output and
-- feeds nothing (planner.c, map_launch).
function M.render_cl_vec(c, ev, layer, plan, pass, names)
  local dshape = layer.ops[pass.domain].out_shape
  local L, b = pass.launch, pass.source_buffer
  local V, U, S, C = L.cl_vec, L.cl_vectors, L.cl_stride, dshape.dim[1]
  if V ~= 8 or U < 1 or S < 1 or S % (C // V) ~= 0 or not lib.io_half(layer) then
    error("map pass: cl_vec is 8 halves, cl_stride a multiple of C / 8")
  end
  local v = plan.buffers[b].value
  local vectors = dshape.sample // V
  c:open("if ((int)threadIdx.x < %d) {", S)
  c:line("const long long v0 = (long long)blockIdx.x * %d + (int)threadIdx.x;", S * U)
  c:line("const int cb = (int)(v0 %% %d) * 8; /* the channels of all the thread's vectors */", C // V)
  local channels = {}
  for j = 0, V - 1 do
    c:line("const int c%d = cb + %d;", j, j)
    channels["c" .. j] = true
  end
  -- the per-channel loads, hoisted here (Eval:hoisted) as the elements below ask for them
  ev:set_hoist({ at = #c.lines + 1, depth = c.depth, channels = channels, guard = "true" })
  c:line("const fg_io *src = %s + (fg_u64)n * %d;", names.buffer[b], dshape.sample)
  c:line("uint4 q[%d];", U)
  for k = 0, U - 1 do
    c:line("q[%d] = v0 + %d < %d ? *(const uint4 *)(src + (v0 + %d) * 8) : make_uint4(0, 0, 0, 0);", k, k * S,
      vectors, k * S)
  end
  local loader = ev.loaders[v]
  local lane -- the element being evaluated: its value is a half of q[k]
  ev.loaders[v] = function(coords)
    if lane then return string.format("fg_io_widen((unsigned short)(%s >> %d))", lane.word, lane.shift) end
    return loader(coords)
  end
  local words = { "x", "y", "z", "w" }
  for k = 0, U - 1 do
    c:open("if (v0 + %d < %d) {", k * S, vectors)
    c:line("const int i%d = (int)(v0 + %d) * 8;", k, k * S)
    local base = lib.unravel_cl(c, dshape, "i" .. k, "o" .. k .. "_")
    c:line("unsigned h[4];")
    for j = 0, V - 1 do
      c:open("{")
      ev:push_scope()
      local coords = {}
      for d, name in pairs(base) do coords[d] = name end
      coords[1] = "c" .. j
      lane = { word = string.format("q[%d].%s", k, words[j // 2 + 1]), shift = j % 2 * 16 }
      local r = ev:eval(pass.last, coords)
      lane = nil
      if j % 2 == 0 then
        c:line("h[%d] = (unsigned)%s;", j // 2, lib.io_store(layer, r))
      else
        c:line("h[%d] |= (unsigned)%s << 16;", j // 2, lib.io_store(layer, r))
      end
      ev:pop_scope()
      c:close()
    end
    c:line("fg_io *y = %s + (fg_u64)n * %d + i%d;", names.output, dshape.sample, k)
    c:line("if (((fg_u64)y & 15) == 0) *(uint4 *)y = make_uint4(h[0], h[1], h[2], h[3]);")
    c:line("else for (int j = 0; j < 8; ++j) y[j] = (fg_io)(h[j >> 1] >> (j & 1) * 16);")
    c:close()
  end
  c:close()
  ev:set_hoist(nil)
  ev.loaders[v] = loader
end

-- A channels-last output through a shared-memory tile (the planner's choice: gen/planner.c,
-- map_cl_tile, which says why). A block takes tile_c channels x tile_p pixels of one sample:
-- it copies each buffer it reads (NC(D)HW) into shared memory with consecutive threads along
-- pixels, then evaluates the chain with consecutive threads along channels -- the order of
-- the output (N(D)HWC) and of the block tensors it reads (channels last too) -- so every
-- global load and store of the element loop is coalesced. A thread keeps one channel in
-- every row it writes (tile_c divides the block): loads that depend on the channel alone
-- (a per-channel parameter, a statistic over whole channels) are hoisted out of the loop.
function M.render_cl_tiled(c, ev, layer, plan, pass, names)
  local dshape = layer.ops[pass.domain].out_shape
  local L = pass.launch
  local TC, TP, pitch, block, rows = L.tile_c, L.tile_p, L.tile_pitch, L.block, L.elems
  local C = dshape.dim[1]
  local P = dshape.sample // C
  local ctiles = (C + TC - 1) // TC
  local bufs = read_buffers(pass)
  -- buffer i's tile in fg_smem
  local function tile_at(i) return i == 1 and "" or string.format("%d + ", (i - 1) * TC * pitch) end
  if #bufs * TC * pitch * 4 ~= L.smem_bytes or TC * TP ~= block * rows or block % TC ~= 0 then
    error(string.format("pass %d: the planner's channels-last tile (%d x %d, %d B shared) does not fit its %d buffers",
      pass.index, TC, TP, L.smem_bytes, #bufs))
  end
  c:line("/* channels last: a tile of %d channels x %d pixels of the sample, staged along pixels, written along channels */",
    TC, TP)
  c:line("extern __shared__ __align__(16) float fg_smem[];")
  -- the channel tiles of one pixel range are consecutive blocks (one contiguous span of the output)
  if ctiles == 1 then
    c:line("const int c0 = 0, p0 = (int)blockIdx.x * %d;", TP)
  else
    c:line("const int c0 = (int)(blockIdx.x %% %d) * %d, p0 = (int)(blockIdx.x / %d) * %d;", ctiles, TC, ctiles, TP)
  end
  c:line("#pragma unroll")
  c:open("for (int e = 0; e < %d; ++e) {", rows)
  c:line("const int q = e * %d + (int)threadIdx.x, tc = q / %d, tp = q %% %d;", block, TP, TP)
  c:open("if (c0 + tc < %d && p0 + tp < %d) {", C, P)
  for i, b in ipairs(bufs) do
    c:line("fg_smem[%stc * %d + tp] = %s[(fg_u64)n * %d + (c0 + tc) * %d + p0 + tp];", tile_at(i), pitch,
      names.buffer[b], dshape.sample, P)
  end
  c:close()
  c:close()
  c:line("__syncthreads();")
  -- each staged value at the element's own coordinates comes from its tile (elsewhere, an
  -- elementwise chain never reads one: its own loader then)
  local global_loader, current = {}, {}
  for i, b in ipairs(bufs) do
    local v = plan.buffers[b].value
    global_loader[v] = ev.loaders[v]
    ev.loaders[v] = function(coords)
      if #coords == #current.coords then
        local same = true
        for d = 1, #coords do same = same and coords[d] == current.coords[d] end
        if same then
          return ev:declare("v" .. v .. "_", string.format("fg_smem[%stc * %d + tp]", tile_at(i), pitch))
        end
      end
      return global_loader[v](coords)
    end
  end
  c:line("const int tc = (int)threadIdx.x %% %d, c = c0 + tc;", TC)
  ev:set_hoist({ at = #c.lines + 1, depth = c.depth, channel = "c", guard = string.format("c < %d", C) })
  c:line("#pragma unroll")
  c:open("for (int e = 0; e < %d; ++e) {", rows)
  c:line("const int tp = e * %d + (int)threadIdx.x / %d, p = p0 + tp;", block // TC, TC)
  c:open("if (c < %d && p < %d) {", C, P)
  ev:push_scope()
  local pixel = { rank = dshape.rank, dim = { [0] = 1, [1] = 1 } }
  for d = 2, dshape.rank - 1 do pixel.dim[d] = dshape.dim[d] end
  local coords = lib.unravel(c, pixel, "p", "o")
  coords[1] = "c"
  current.coords = coords
  local v = ev:eval(pass.last, coords)
  c:line("%s[(fg_u64)n * %d + p * %d + c] = %s;", names.output, dshape.sample, C, lib.io_store(layer, v))
  ev:pop_scope()
  c:close()
  c:close()
  ev:set_hoist(nil)
  for v, f in pairs(global_loader) do ev.loaders[v] = f end
end

-- Four consecutive elements a thread (16-byte loads and stores) when every op of the pass is
-- elementwise over the domain's shape, the sample is a multiple of 4 and a thread's share
-- is whole groups of four: then each load is at the element's own coordinates. (Pooling,
-- reductions and softmax read other elements; they keep one element at a time.)
function M.vectorizable(layer, plan, pass)
  local dshape = layer.ops[pass.domain].out_shape
  if dshape.sample % 4 ~= 0 or pass.launch.elems % 4 ~= 0 then return false end
  -- a channels-last output: four consecutive elements of the domain are not consecutive there
  if pass.store_output and lib.io_cl(layer) then return false end
  for _, b in ipairs(read_buffers(pass)) do
    if plan.buffers[b].io then return false end
  end
  for k = pass.first, pass.last do
    local op = layer.ops[k]
    local cls = op.class
    if not (cls == "unary" or cls == "binary" or cls == "norm" or cls == "shape") then return false end
    if op.out_shape.sample ~= dshape.sample or op.out_shape.rank ~= dshape.rank then return false end
  end
  return true
end

function M.render_vectorized(c, ev, layer, plan, pass, names)
  local dshape = layer.ops[pass.domain].out_shape
  local block, groups = pass.launch.block, pass.launch.elems // 4
  -- the buffers with the domain's shape: at an element's own coordinates their values are
  -- four consecutive floats of four consecutive elements
  local vec = {}
  for _, b in ipairs(read_buffers(pass)) do
    local shape = layer.ops[plan.buffers[b].value].out_shape
    if shape.sample == dshape.sample and shape.rank == dshape.rank then vec[#vec + 1] = b end
  end
  c:open("for (int e = 0; e < %d; ++e) {", groups)
  c:line("const long long gi = ((long long)blockIdx.x * %d + e) * %d + (int)threadIdx.x;", groups, block)
  c:open("if (gi < %d) {", dshape.sample // 4)
  c:line("const int i0 = (int)gi * 4;")
  -- a buffer's four values, loaded once; its loader hands out a component where the
  -- coordinates are the element's own, and loads one float anywhere else
  local scalar_loader, current = {}, {}
  for _, b in ipairs(vec) do
    local v = plan.buffers[b].value
    c:line("const float4 q%d = *(const float4 *)(%s + (fg_u64)n * %d + i0);", b, names.buffer[b], dshape.sample)
    scalar_loader[v] = ev.loaders[v]
    ev.loaders[v] = function(coords)
      if current.coords and #coords == #current.coords then
        local same = true
        for d = 1, #coords do same = same and coords[d] == current.coords[d] end
        if same then return string.format("q%d.%s", b, current.lane) end
      end
      return scalar_loader[v](coords)
    end
  end
  local writes = stores(plan, pass, names)
  for si = 1, #writes do c:line("float4 r%d;", si) end
  local lanes = { "x", "y", "z", "w" }
  for j = 1, 4 do
    c:open("{")
    c:line("const int i = i0 + %d;", j - 1)
    ev:push_scope()
    local coords = lib.unravel(c, dshape, "i", "o")
    current.coords, current.lane = coords, lanes[j]
    local v = ev:eval(pass.last, coords)
    for si, st in ipairs(writes) do c:line("r%d.%s = %s;", si, lanes[j], ev:eval(st[2], coords)) end
    feed.element(c, ev, plan, pass.feeds, v, coords, nil)
    ev:pop_scope()
    current.coords = nil
    c:close()
  end
  for si, st in ipairs(writes) do
    if st[1] == names.output and lib.io_half(layer) then
      -- a bf16/fp16 output: four rounded halves, one 8-byte store when aligned
      c:line("fg_io *y%d = %s + (fg_u64)n * %d + i0;", si, st[1], dshape.sample)
      c:line("const fg_io h%d[4] = {fg_io_round(r%d.x), fg_io_round(r%d.y), fg_io_round(r%d.z), fg_io_round(r%d.w)};",
        si, si, si, si, si)
      c:open("if (((fg_u64)y%d & 7) == 0) {", si)
      c:line("*(uint2 *)y%d = make_uint2((unsigned)h%d[0] | ((unsigned)h%d[1] << 16), (unsigned)h%d[2] | ((unsigned)h%d[3] << 16));",
        si, si, si, si, si)
      c:close("} else {")
      c.depth = c.depth + 1
      c:line("y%d[0] = h%d[0]; y%d[1] = h%d[1]; y%d[2] = h%d[2]; y%d[3] = h%d[3];", si, si, si, si, si, si, si, si)
      c:close()
    elseif st[1] == names.output then
      -- the caller's output may sit at any float (a view); the workspace is 256-byte aligned
      c:line("float *y%d = %s + (fg_u64)n * %d + i0;", si, st[1], dshape.sample)
      c:line("if (((fg_u64)y%d & 15) == 0) *(float4 *)y%d = r%d;", si, si, si)
      c:line("else { y%d[0] = r%d.x; y%d[1] = r%d.y; y%d[2] = r%d.z; y%d[3] = r%d.w; }", si, si, si, si, si, si, si, si)
    else
      c:line("*(float4 *)(%s + (fg_u64)n * %d + i0) = r%d;", st[1], dshape.sample, si)
    end
  end
  c:close()
  c:close()
  for v, f in pairs(scalar_loader) do ev.loaders[v] = f end
end

return M
