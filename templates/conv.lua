-- The conv pass: a direct convolution specialized to the layer's shapes, with the pass's
-- chain of ops fused into its epilogue.
--
-- Each block computes a tile of outputs (tile[0] x tile[1] x tile[2] along D, H, W) for
-- co_tile output channels of one group and one sample. The input tile with its halo and
-- the block's weights are staged in shared memory ci_chunk input channels at a time; each
-- thread keeps thread_co channels x thread_w consecutive outputs in registers. The tap
-- loops and the register tile are unrolled here, in the template; the input-channel loop
-- is unrolled by ci_unroll (the planner's choice: full unrolling falls off the
-- instruction-cache cliff).
local lib = import("lib")
local expr = import("expr")
local feed = import("feed")

local M = {}

-- 2D convolutions run as 3D with depth 1: returns {D, H, W}-ordered copies.
local function dhw(conv, field, fill)
  local v = conv[field]
  if conv.spatial == 3 then return { v[0], v[1], v[2] } end
  return { fill, v[0], v[1] }
end

function M.render(layer, plan, pass, names, signature)
  local conv = layer.ops[0]
  local c = lib.code()
  local t = pass.conv
  local sp = conv.spatial
  local inshape, outshape = conv.in_shape, conv.out_shape
  local I = sp == 3 and { inshape.dim[2], inshape.dim[3], inshape.dim[4] } or { 1, inshape.dim[2], inshape.dim[3] }
  local O = sp == 3 and { outshape.dim[2], outshape.dim[3], outshape.dim[4] } or { 1, outshape.dim[2], outshape.dim[3] }
  local K, S, P, Dl = dhw(conv, "kernel", 1), dhw(conv, "stride", 1), dhw(conv, "padding", 0), dhw(conv, "dilation", 1)
  local cin_g = inshape.dim[1] // conv.groups
  local cout_g = conv.out_channels // conv.groups
  local RW, RC, COT, CIC = t.thread_w, t.thread_co, t.co_tile, t.ci_chunk
  local TD, TH, TW = t.tile[0], t.tile[1], t.tile[2]
  local thd, thh, txs = t.threads[0], t.threads[1], TW // RW
  local SPT = thd * thh * txs
  local BLOCK = pass.launch.block
  local NTD, NTH, NTW = (O[1] + TD - 1) // TD, (O[2] + TH - 1) // TH, (O[3] + TW - 1) // TW
  local NCOT = (cout_g + COT - 1) // COT
  local IT = {}
  for i = 1, 3 do IT[i] = (({ TD, TH, TW })[i] - 1) * S[i] + (K[i] - 1) * Dl[i] + 1 end
  local ITILE = IT[1] * IT[2] * IT[3]
  local TAPS = K[1] * K[2] * K[3]
  local in_plane = I[1] * I[2] * I[3]

  c:line("/* pass %d: direct conv%dd %d->%d (groups %d), kernel %dx%dx%d, stride %dx%dx%d, padding %dx%dx%d, dilation %dx%dx%d;",
    pass.index, sp, inshape.dim[1], conv.out_channels, conv.groups, K[1], K[2], K[3], S[1], S[2], S[3], P[1], P[2], P[3],
    Dl[1], Dl[2], Dl[3])
  c:line(" * tile %dx%dx%d outputs x %d channels per block, %d outputs x %d channels per thread, ops v0..v%d fused */",
    TD, TH, TW, COT, RW, RC, pass.last)
  -- two resident blocks per SM at least: lets ptxas use up to 128 registers (its own
  -- occupancy heuristic otherwise settles on 64 and spills)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d, 2) %s(%s)", BLOCK, pass.kernel, signature)
  c:open("{")
  c:line("extern __shared__ float fg_smem[];")
  c:line("float *s_in = fg_smem;              /* [%d channels][%d][%d][%d] input tile with halo */", CIC, IT[1], IT[2], IT[3])
  c:line("float *s_w = fg_smem + %d;           /* [%d out channels][%d in channels][%d taps] */", CIC * ITILE, COT, CIC, TAPS)
  c:line("const int n = batch_base + (int)blockIdx.z;")
  c:line("const int t = (int)threadIdx.x;")
  c:line("const int cog = t / %d;", SPT)
  c:line("const int tz = (t %% %d) / %d;", SPT, thh * txs)
  c:line("const int ty = (t %% %d) / %d;", thh * txs, txs)
  c:line("const int tx = t %% %d;", txs)
  c:line("const int tile = (int)blockIdx.x;")
  c:line("const int od0 = (tile / %d) * %d;", NTH * NTW, TD)
  c:line("const int oh0 = ((tile / %d) %% %d) * %d;", NTW, NTH, TH)
  c:line("const int ow0 = (tile %% %d) * %d;", NTW, TW)
  c:line("const int g = (int)blockIdx.y / %d;", NCOT)
  c:line("const int co0 = ((int)blockIdx.y %% %d) * %d;", NCOT, COT)
  c:line("const float *xg = %s + (fg_u64)n * %d + (fg_u64)g * %d;", names.input, inshape.sample, cin_g * in_plane)
  c:line("const float *wg = %s + (fg_u64)(g * %d + co0) * %d;", names.param[conv.weight_param], cout_g, cin_g * TAPS)
  c:line("const int id0 = od0 * %d - %d, ih0 = oh0 * %d - %d, iw0 = ow0 * %d - %d;", S[1], P[1], S[2], P[2], S[3], P[3])
  c:line("float acc[%d][%d];", RC, RW)
  c:line("for (int j = 0; j < %d; ++j)", RC)
  c:line("    for (int p = 0; p < %d; ++p) acc[j][p] = 0.0f;", RW)

  c:open("for (int ci0 = 0; ci0 < %d; ci0 += %d) {", cin_g, CIC)
  c:line("__syncthreads();")
  c:open("for (int e = t; e < %d; e += %d) {", CIC * ITILE, BLOCK)
  c:line("const int ci = e / %d, r = e %% %d;", ITILE, ITILE)
  c:line("const int id = id0 + r / %d, ih = ih0 + (r / %d) %% %d, iw = iw0 + r %% %d;", IT[2] * IT[3], IT[3], IT[2], IT[3])
  local checks = {}
  if cin_g % CIC ~= 0 then checks[#checks + 1] = string.format("ci0 + ci < %d", cin_g) end
  local names3 = { "id", "ih", "iw" }
  for i = 1, 3 do
    if not (sp == 2 and i == 1) then
      if P[i] > 0 then checks[#checks + 1] = names3[i] .. " >= 0" end
      checks[#checks + 1] = string.format("%s < %d", names3[i], I[i])
    end
  end
  c:line("float v = 0.0f;")
  c:line("if (%s) v = xg[(fg_u64)(ci0 + ci) * %d + (id * %d + ih) * %d + iw];", table.concat(checks, " && "), in_plane, I[2], I[3])
  c:line("s_in[e] = v;")
  c:close()
  c:open("for (int e = t; e < %d; e += %d) {", COT * CIC * TAPS, BLOCK)
  c:line("const int co = e / %d, ci = (e / %d) %% %d, tap = e %% %d;", CIC * TAPS, TAPS, CIC, TAPS)
  local wchecks = { string.format("co0 + co < %d", cout_g) }
  if cin_g % CIC ~= 0 then wchecks[#wchecks + 1] = string.format("ci0 + ci < %d", cin_g) end
  c:line("s_w[e] = (%s) ? wg[co * %d + (ci0 + ci) * %d + tap] : 0.0f;", table.concat(wchecks, " && "), cin_g * TAPS, TAPS)
  c:close()
  c:line("__syncthreads();")
  if t.ci_unroll > 1 then c:line("#pragma unroll %d", t.ci_unroll) else c:line("#pragma unroll 1") end
  c:open("for (int ci = 0; ci < %d; ++ci) {", CIC)
  c:line("const float *si = s_in + ci * %d + tz * %d + ty * %d + tx * %d;", ITILE, S[1] * IT[2] * IT[3], S[2] * IT[3], RW * S[3])
  c:line("const float *sw = s_w + cog * %d + ci * %d;", RC * CIC * TAPS, TAPS)
  local tap = 0
  for kd = 0, K[1] - 1 do
    for kh = 0, K[2] - 1 do
      for kw = 0, K[3] - 1 do
        local off = kd * Dl[1] * IT[2] * IT[3] + kh * Dl[2] * IT[3] + kw * Dl[3]
        if sp == 3 then c:open("{ /* tap %d,%d,%d */", kd, kh, kw) else c:open("{ /* tap %d,%d */", kh, kw) end
        for p = 0, RW - 1 do c:line("const float x%d = si[%d];", p, off + p * S[3]) end
        for j = 0, RC - 1 do c:line("const float w%d = sw[%d];", j, j * CIC * TAPS + tap) end
        for j = 0, RC - 1 do
          local fmas = {}
          for p = 0, RW - 1 do fmas[#fmas + 1] = string.format("acc[%d][%d] = fmaf(x%d, w%d, acc[%d][%d]);", j, p, p, j, j, p) end
          c:line(table.concat(fmas, " "))
        end
        c:close()
        tap = tap + 1
      end
    end
  end
  c:close()
  c:close()

  -- epilogue: the fused chain, the stores, the statistics
  local ev = expr.new(layer, plan, pass, c, names)
  local slots = 0
  local uniform = true
  for i = 0, pass.feeds.n - 1 do
    uniform = uniform and feed.uniform_per_channel(layer, plan, pass.feeds[i])
  end
  if pass.feeds.n > 0 and uniform then slots = RC end
  feed.declare(c, plan, pass.feeds, slots)
  c:line("#pragma unroll")
  c:open("for (int j = 0; j < %d; ++j) {", RC)
  c:line("#pragma unroll")
  c:open("for (int p = 0; p < %d; ++p) {", RW)
  c:line("const int co = co0 + cog * %d + j;", RC)
  c:line("const int c = g * %d + co;", cout_g)
  if sp == 3 then c:line("const int od = od0 + tz;") end
  c:line("const int oh = oh0 + ty, ow = ow0 + tx * %d + p;", RW)
  local valid = { string.format("co < %d", cout_g), string.format("oh < %d", O[2]), string.format("ow < %d", O[3]) }
  if sp == 3 then table.insert(valid, 2, string.format("od < %d", O[1])) end
  c:open("if (%s) {", table.concat(valid, " && "))
  local coords = sp == 3 and { "c", "od", "oh", "ow" } or { "c", "oh", "ow" }
  if conv.bias then
    c:line("const float v0 = acc[j][p] + %s[c];", names.param[conv.bias_param])
  else
    c:line("const float v0 = acc[j][p];")
  end
  ev:remember(0, coords, "v0")
  local v = ev:eval(pass.last, coords)
  local dshape = layer.ops[pass.last].out_shape
  local idx = lib.lin(dshape, coords)
  if pass.store_output then
    c:line("%s[(fg_u64)n * %d + %s] = %s;", names.output, dshape.sample, idx, v)
  end
  if pass.store_buffer >= 0 then
    c:line("%s[(fg_u64)n * %d + %s] = %s;", names.buffer[pass.store_buffer], dshape.sample, idx, v)
  end
  for i = 0, pass.extra_stores.n - 1 do
    local b = pass.extra_stores[i]
    local u = plan.buffers[b].value
    c:line("%s[(fg_u64)n * %d + %s] = %s;", names.buffer[b], dshape.sample, idx, ev:eval(u, coords))
  end
  feed.element(c, ev, plan, pass.feeds, v, coords, slots > 0 and "j" or nil)
  c:close()
  c:close()
  c:close()
  feed.finish(c, ev, plan, pass.feeds, slots)
  c:close()
  return c
end

return M
