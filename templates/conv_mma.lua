-- SPDX-License-Identifier: Apache-2.0
-- The conv pass on tensor cores: an implicit GEMM per warp with mma.sync m16n8k8 (TF32
-- operands, fp32 accumulators), each product split in three (fg_tf32_hi, ops.lua) so that
-- the result keeps fp32 accuracy.
--
-- The GEMM: rows = output channels (A: the weights), columns = outputs along W (B: the
-- staged input tile, read in place: column n of tap k is the input under output n shifted
-- by the tap), reduction = (input channel, tap). A warp owns warp_mt x 16 channels of
-- warp_rows rows x warp_ntw x 8 consecutive outputs; its accumulators stay in registers
-- through the whole reduction and feed the same epilogue as the FMA engine (conv.lua).
--
-- The weights are staged once per block as ready-made A fragments, hi and lo halves, so a
-- lane loads each with one 16-byte shared load; the input's halves are split as loaded
-- (two integer ops and a subtraction), each B value serving every m-tile of the warp.
--
-- Block accumulation (fp32 accuracy at any input scale): each reduction step's three
-- products go into a fresh accumulator that is then added to the running sum with
-- ordinary fp32 adds. The tensor core's own accumulation truncates, so one chain through
-- the whole reduction drifted to 2-3.5x cuDNN fp32's error at inputs x100 and +10 (bench/
-- NOTES.md v8); per step it stays at or below cuDNN's, for 13-17 % of the time of the
-- layers that use this engine.
--
-- Reduction order: with ci_chunk % 8 == 0 a step is (8 channels, one tap): lane tig reads
-- channels tig and tig+4 at a compile-time tap offset, the channel pitch padded so the 32
-- lanes hit 32 banks (with unit stride along W; strides > 1 conflict). Otherwise (few channels, e.g. 3) the flattened (channel, tap) index
-- is padded to a multiple of 8 and each lane keeps its two offsets per step in registers.
local lib = import("lib")
local conv = import("conv")
local expr = import("expr")
local feed = import("feed")

local M = {}

function M.render(layer, plan, pass, names, signature)
  local g = conv.geometry(layer)
  conv.set_prologue(g, layer, plan, pass, names)
  local t = pass.conv
  local T = conv.tiling(g, t)
  local MT, RH, NTW = t.warp_mt, t.warp_rows, t.warp_ntw
  local NT = RH * NTW
  local WZ, WY, WX = t.warps[0], t.warps[1], t.warps[2]
  T.BLOCK = 32 * WZ * WY * WX
  local MTB = T.COT // 16 -- m-tiles of the block
  local NCT = MTB // MT   -- channel tiles each warp works through
  local blocked = t.k_blocked == 1
  local KS = t.ksteps
  local conv_op = g.conv
  local O, S, K, Dl = g.O, g.S, g.K, g.Dl
  local plane = T.IT[2] * T.IT[3]
  local NTD, NTH, NTWB = (O[1] + T.TD - 1) // T.TD, (O[2] + T.TH - 1) // T.TH, (O[3] + T.TW - 1) // T.TW
  local NCOB = (g.cout_g + T.COT - 1) // T.COT
  local single_chunk = T.CIC == g.cin_g
  local c = lib.code()

  -- shared-memory offset of tap (kd, kh, kw) within a channel plane
  local function tap_offset(tap)
    local kw = tap % K[3]
    local kh = (tap // K[3]) % K[2]
    local kd = tap // (K[3] * K[2])
    return kd * Dl[1] * plane + kh * Dl[2] * T.IT[3] + kw * Dl[3]
  end

  c:line("/* pass %d: conv%dd %d->%d (groups %d) on tensor cores (3xTF32), kernel %dx%dx%d, stride %dx%dx%d,",
    pass.index, g.sp, conv_op.in_shape.dim[1], conv_op.out_channels, g.groups, K[1], K[2], K[3], S[1], S[2], S[3])
  c:line(" * padding %dx%dx%d, dilation %dx%dx%d; block tile %dx%dx%d outputs x %d channels, warp tile %dx%d outputs",
    g.P[1], g.P[2], g.P[3], Dl[1], Dl[2], Dl[3], T.TD, T.TH, T.TW, T.COT, RH, NTW * 8)
  c:line(" * x %d channels; %d reduction steps per staged chunk of %d channels; ops v0..v%d fused */", MT * 16, KS,
    T.CIC, pass.last)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d, 2) %s(%s)", T.BLOCK, pass.kernel, signature)
  c:open("{")
  c:line("extern __shared__ __align__(16) float fg_smem[];")
  -- several tiles per block: two input buffers (the next tile's copies land while this one
  -- computes)
  local R = single_chunk and t.tiles_per_block or 1
  local buffers = t.smem.input_buffers
  c:line("/* [%d buffer(s)][%d channels][%d floats: %dx%dx%d] input tiles with halo, then */", buffers, T.CIC, T.CP,
    T.IT[1], T.IT[2], T.IT[3])
  c:line("/* [%d steps][%d m-tiles][hi, lo][32 lanes][4] weights as A fragments */", KS, MTB)
  c:line("float *s_w = fg_smem + %d;", t.smem.weights_offset)
  c:line("const int n = batch_base + (int)blockIdx.z;")
  c:line("const int t = (int)threadIdx.x, lane = t & 31, warp = t >> 5;")
  c:line("const int gid = lane >> 2, tig = lane & 3; /* the MMA fragments' row group and column pair */")
  c:line("const int wx = warp %% %d, wy = (warp / %d) %% %d, wz = warp / %d;", WX, WX, WY, WX * WY)
  c:line("const int g = (int)blockIdx.y / %d, co0 = ((int)blockIdx.y %% %d) * %d;", NCOB, NCOB, T.COT)
  c:line("const %s *xg = %s + (fg_u64)n * %d + (fg_u64)g * %d;", g.io, names.input, g.in_sample, g.group_in_stride)
  c:line("const float *wg = %s + (fg_u64)(g * %d + co0) * %d;", names.param[conv_op.weight_param], g.cout_g,
    g.cin_g * g.taps)
  c:line("(void)wz; (void)gid; (void)tig;")
  -- weights of channels co0 .. co0+COT-1, input channels ci0 .. ci0+CIC-1, as A fragments
  local function stage_weights()
    c:open("for (int e = t; e < %d; e += %d) {", KS * MTB * 128, T.BLOCK)
    c:line("const int i = e & 3, l = (e >> 2) & 31, mt = (e >> 7) %% %d, s = (e >> 7) / %d;", MTB, MTB)
    c:line("const int m = mt * 16 + (l >> 2) + 8 * (i & 1), kk = (l & 3) + 4 * (i >> 1);")
    local checks = { string.format("co0 + m < %d", g.cout_g) }
    if blocked then
      c:line("const int ci = (s / %d) * 8 + kk, tap = s %% %d;", g.taps, g.taps)
    else
      c:line("const int k = s * 8 + kk, ci = k / %d, tap = k %% %d;", g.taps, g.taps)
      checks[#checks + 1] = string.format("k < %d", T.CIC * g.taps)
    end
    if g.cin_g % T.CIC ~= 0 then checks[#checks + 1] = string.format("ci0 + ci < %d", g.cin_g) end
    c:line("const float w = (%s) ? wg[(fg_u64)m * %d + (ci0 + ci) * %d + tap] : 0.0f;", table.concat(checks, " && "),
      g.cin_g * g.taps, g.taps)
    c:line("const float hi = fg_tf32_hi(w);")
    c:line("float *dst = s_w + (s * %d + mt) * 256 + l * 4 + i;", MTB)
    c:line("dst[0] = hi; dst[128] = fg_tf32_hi(w - hi);")
    c:close()
  end

  local function stage()
    conv.stage_input(c, g, T)
    stage_weights()
    c:line("fg_cp_async_wait_all();")
  end

  -- one reduction step: A fragments at float4 index `frag` (+ m-tile) of `wbase`, B at
  -- offsets o0/o1 from `bbase`, one n-tile at a time (its B values split, then its MMAs:
  -- loading every n-tile's B first holds 6 registers per n-tile at once and spilled).
  -- Block accumulation: the step's products go to `part`, which the first product of a
  -- block of ACC steps starts over (`fresh`) and the block's last step adds into `acc` with
  -- ordinary fp32 adds (`flush`); with ACC = 1 `part` is a per-n-tile scratch.
  local ACC = t.acc_steps
  local function step(wbase, frag, bbase, o0, o1, fresh, flush)
    for mt = 0, MT - 1 do
      c:line("const float4 ah%d = %s[%s + %d], al%d = %s[%s + %d];", mt, wbase, frag, mt * 64, mt, wbase, frag,
        mt * 64 + 32)
    end
    for nt = 0, NT - 1 do
      local off = (nt // NTW) * S[2] * T.IT[3] + (nt % NTW) * 8 * S[3]
      c:open("{")
      c:line("const float b0 = %s[%s + %d], b1 = %s[%s + %d];", bbase, o0, off, bbase, o1, off)
      -- lo goes in unrounded (the MMA truncates it): hi is rounded to nearest, so lo's sign
      -- and its truncation are unbiased; rounding it cost 1-2 % and gained nothing (v8)
      c:line("const float h0 = fg_tf32_hi(b0), h1 = fg_tf32_hi(b1), l0 = b0 - h0, l1 = b1 - h1;")
      local function part(mt)
        return ACC == 1 and string.format("p%d", mt) or string.format("part[%d][%d]", mt, nt)
      end
      if ACC == 1 then
        local decl = {}
        for mt = 0, MT - 1 do decl[#decl + 1] = string.format("p%d[4]", mt) end
        c:line("float %s;", table.concat(decl, ", "))
      end
      -- the small products first; consecutive MMAs go to different m-tiles where there are two
      for k, pr in ipairs({ { "al", "h" }, { "ah", "l" }, { "ah", "h" } }) do
        local calls = {}
        for mt = 0, MT - 1 do
          calls[#calls + 1] = string.format("%s(%s, %s%d, %s0, %s1);", (k == 1 and fresh) and "fg_mma_tf32_fresh" or
            "fg_mma_tf32", part(mt), pr[1], mt, pr[2], pr[2])
        end
        c:line(table.concat(calls, " "))
      end
      if flush then
        for mt = 0, MT - 1 do
          c:line("acc[%d][%d][0] += %s[0]; acc[%d][%d][1] += %s[1]; acc[%d][%d][2] += %s[2]; acc[%d][%d][3] += %s[3];",
            mt, nt, part(mt), mt, nt, part(mt), mt, nt, part(mt), mt, nt, part(mt))
        end
      end
      c:close()
    end
  end
  -- step i of n (0-based) within a run of steps: whether it starts / ends a block
  local function block_edges(i, n)
    return i % ACC == 0, i % ACC == ACC - 1 or i == n - 1
  end

  local function accumulate()
    -- float4 index of (step s, this channel tile's first m-tile, hi) for this lane
    c:line("const float4 *wf = (const float4 *)s_w + ct * %d + lane;", MT * 64)
    if blocked then
      c:line("#pragma unroll 1")
      c:open("for (int c8 = 0; c8 < %d; ++c8) {", T.CIC // 8)
      c:line("const float4 *wc = wf + c8 * %d;", g.taps * MTB * 64)
      c:line("const float *sc = sb + c8 * %d;", 8 * T.CP)
      for tap = 0, g.taps - 1 do
        c:open("{ /* tap %d */", tap)
        step("wc", tostring(tap * MTB * 64), "sc", tostring(tap_offset(tap)), tostring(tap_offset(tap) + 4 * T.CP),
          block_edges(tap, g.taps))
        c:close()
      end
      c:close()
    else
      if ACC == 1 then
        c:line("#pragma unroll 1")
        c:open("for (int s = 0; s < %d; ++s) {", KS)
        c:line("const int k0 = s_ko[s * 8 + tig], k1 = s_ko[s * 8 + 4 + tig];")
        step("wf", string.format("s * %d", MTB * 64), "sb", "k0", "k1", true, true)
        c:close()
      else
      for s = 0, KS - 1 do
        c:open("{ /* step %d */", s)
        c:line("const int k0 = s_ko[%d + tig], k1 = s_ko[%d + tig];", s * 8, s * 8 + 4)
        step("wf", tostring(s * MTB * 64), "sb", "k0", "k1", block_edges(s, KS))
        c:close()
      end
      end
    end
  end

  -- the origin of tile `tile` (a variable) in outputs and in the input
  local NTILES = NTD * NTH * NTWB
  local function decode_tile()
    c:line("const int od0 = (tile / %d) * %d, oh0 = ((tile / %d) %% %d) * %d, ow0 = (tile %% %d) * %d;", NTH * NTWB,
      T.TD, NTWB, NTH, T.TH, NTWB, T.TW)
    c:line("const int id0 = od0 * %d - %d, ih0 = oh0 * %d - %d, iw0 = ow0 * %d - %d;", S[1], g.P[1], S[2], g.P[2],
      S[3], g.P[3])
    c:line("(void)id0; (void)od0;")
  end

  local ev = expr.new(layer, plan, pass, c, names)
  local slots = feed.conv_slots(layer, plan, pass.feeds, 2 * MT)

  if not blocked then
    -- the offsets of reduction index k = step * 8 + j over (channel, tap), in shared memory
    -- after the weights (a register table spilled): lane tig reads j = tig and tig + 4
    c:line("int *s_ko = (int *)(s_w + %d);", t.smem.table_offset - t.smem.weights_offset)
    c:open("for (int k = t; k < %d; k += %d) {", KS * 8, T.BLOCK)
    c:line("const int ci = k / %d, tap = k %% %d;", g.taps, g.taps)
    c:line("const int kw = tap %% %d, kh = (tap / %d) %% %d, kd = tap / %d;", K[3], K[3], K[2], K[3] * K[2])
    c:line("s_ko[k] = k < %d ? ci * %d + kd * %d + kh * %d + kw * %d : 0; /* padding steps: weight 0 */",
      T.CIC * g.taps, T.CP, Dl[1] * plane, Dl[2] * T.IT[3], Dl[3])
    c:close()
  end
  c:line("float acc[%d][%d][4];", MT, NT)
  if ACC > 1 then c:line("float part[%d][%d][4]; /* the products of the current block of steps */", MT, NT) end

  -- accumulator (mt, nt, i): channel mt*16 + gid + 8*(i>>1), output 2*tig + (i&1) of n-tile
  -- nt; a statistics slot q is one (mt, i>>1) channel. With one channel tile per warp and R
  -- tiles per block, the slots run through all R tiles and feed once at the end.
  local feeds_outside = NCT == 1 and R > 1
  local ctv = feeds_outside and "0" or "ct"
  local full = { string.format("oh0 + wy * %d + %d <= %d", RH, RH, O[2]),
    string.format("ow0 + wx * %d + %d <= %d", NTW * 8, NTW * 8, O[3]),
    string.format("co0 + ct * %d + %d <= %d", MT * 16, MT * 16, g.cout_g) }
  if g.sp == 3 then table.insert(full, 1, string.format("od0 + wz < %d", O[1])) end
  local th = {
    loops = { { "q", 2 * MT }, { "nt", NT }, { "e", 2 } },
    value = "acc[q >> 1][nt][(q & 1) * 2 + e]",
    co = string.format("co0 + ct * %d + (q >> 1) * 16 + (q & 1) * 8 + gid", MT * 16),
    od = "od0 + wz",
    oh = string.format("oh0 + wy * %d + nt / %d", RH, NTW),
    ow = string.format("ow0 + wx * %d + (nt %% %d) * 8 + 2 * tig + e", NTW * 8, NTW),
    slot = "q",
    slot_co = function(q)
      return string.format("co0 + %s * %d + ((%s) >> 1) * 16 + ((%s) & 1) * 8 + gid", ctv, MT * 16, q, q)
    end,
    merge_lanes = true,
    pair = true,
    full = table.concat(full, " && "),
    feeds_outside = feeds_outside,
  }

  -- the work on one staged tile: every channel tile of the block, then its epilogue
  local function compute_tile(s_in)
    -- the lane's B column (output gid of each n-tile) in the staged tile
    c:line("const float *sb = %s + wz * %d + wy * %d + (wx * %d + gid) * %d%s;", s_in, S[1] * plane,
      RH * S[2] * T.IT[3], NTW * 8, S[3], blocked and string.format(" + tig * %d", T.CP) or "")
    c:line("#pragma unroll 1")
    c:open("for (int ct = 0; ct < %d; ++ct) {", NCT)
    c:line("if (co0 + ct * %d >= %d) break; /* a block-uniform condition */", MT * 16, g.cout_g)
    c:line("#pragma unroll")
    c:open("for (int mt = 0; mt < %d; ++mt)", MT)
    c:line("#pragma unroll")
    c:open("for (int nt = 0; nt < %d; ++nt)", NT)
    c:line("acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;")
    c.depth = c.depth - 2
    if not single_chunk then
      c:line("#pragma unroll 1")
      c:open("for (int ci0 = 0; ci0 < %d; ci0 += %d) {", g.cin_g, T.CIC)
      c:line("__syncthreads();")
      c:line("float *s_in = fg_smem;")
      stage()
      c:line("__syncthreads();")
    end
    accumulate()
    if not single_chunk then c:close() end
  conv.epilogue(c, g, layer, plan, pass, names, ev, slots, th)
    if not single_chunk then c:line("__syncthreads(); /* the next channel tile restages */") end
    c:close()
  end

  if R > 1 then
    -- R tiles in turn, double-buffered: tile r+1's copies are in flight while r computes
    c:line("float *s_in0 = fg_smem, *s_in1 = fg_smem + %d;", t.smem.buffer_floats)
    if feeds_outside then feed.declare(c, plan, pass.feeds, slots) end
    c:line("const int ci0 = 0;")
    stage_weights()
    c:line("const int tile0 = (int)blockIdx.x * %d;", R)
    c:open("{")
    c:line("const int tile = tile0;")
    decode_tile()
    c:line("float *s_in = s_in0;")
    conv.stage_input(c, g, T)
    c:close()
    c:line("fg_cp_async_commit();")
    c:line("#pragma unroll 1")
    c:open("for (int rt = 0; rt < %d; ++rt) {", R)
    c:line("const int tile = tile0 + rt;")
    c:line("if (tile >= %d) break; /* block-uniform */", NTILES)
    c:open("if (rt + 1 < %d && tile + 1 < %d) {", R, NTILES)
    c:open("{")
    c:line("const int tile = tile0 + rt + 1;")
    decode_tile()
    c:line("float *s_in = (rt & 1) ? s_in0 : s_in1;")
    conv.stage_input(c, g, T)
    c:close()
    c:line("fg_cp_async_commit();")
    c:line("fg_cp_async_wait_but1();")
    c:close("} else {")
    c.depth = c.depth + 1
    c:line("fg_cp_async_wait0();")
    c:close()
    c:line("__syncthreads();")
    decode_tile()
    compute_tile("((rt & 1) ? s_in1 : s_in0)")
    c:line("__syncthreads(); /* before the next prefetch overwrites this buffer */")
    c:close()
    if feeds_outside then conv.feeds_finish(c, g, plan, pass, ev, slots, th) end
  else
    c:line("const int tile = (int)blockIdx.x;")
    decode_tile()
    if single_chunk then
      c:line("const int ci0 = 0;")
      c:line("float *s_in = fg_smem;")
      stage()
      c:line("__syncthreads();")
    end
    compute_tile("fg_smem")
  end
  c:close()
  return c
end

return M
