-- SPDX-License-Identifier: Apache-2.0
-- The resident pass: the whole layer in one kernel, with no intermediate in device memory.
--
-- A cluster of CTAs owns a block of whole norm groups of one sample; CTA `rank` owns a
-- contiguous range of output rows (D x H) of every channel of the block. Phase 1: the CTA
-- computes the conv tile by tile (the same staging and register tiles as the conv pass),
-- applies the ops before the norm, keeps the results in its shared memory and adds up the
-- norm's partial sums (fp64). Phase 2: the partial sums of the whole cluster are read over
-- distributed shared memory and turned into mean and 1/sqrt(var + eps). Phase 3: the rest
-- of the chain (and a reduction over the channels, when the block holds them all) is
-- applied to the kept values and the output is written, coalesced, once.
local lib = import("lib")
local feed = import("feed")
local expr = import("expr")
local conv_t = import("conv")

local M = {}

-- A load from another CTA's shared memory (after lib.cluster_prelude's rank and barrier).
M.prelude = [[
__device__ __forceinline__ double fg_dsmem_load(const double *local, unsigned rank)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(local), remote;
    double v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(remote) : "memory");
    return v;
}
]]

function M.render(layer, plan, pass, names, signature)
  local g = conv_t.geometry(layer)
  local T = conv_t.tiling(g, pass.conv)
  local R = pass.res
  local conv = g.conv
  local O = g.O
  local c = lib.code()
  local S = R.cluster
  local B = R.channel_block
  local CG = R.channel_group
  local NG = B // CG
  local SLICE = R.slice -- a multiple of 4: the staging area after it stays 16-byte aligned
  local norm = layer.ops[R.norm_op]
  local kept = R.norm_op - 1
  local OUT = layer.ops[pass.last].out_shape
  local ROWS = R.rows

  c:line("/* pass %d: resident. A cluster of %d CTAs owns %d channels (%d norm groups of %d) of one sample;",
    pass.index, S, B, NG, CG)
  c:line(" * each CTA keeps v%d for its rows (at most %d floats per channel) in shared memory, the", kept, R.slice)
  c:line(" * statistics of op %d (%s) are reduced over the cluster, then v%d..v%d are applied and written. */",
    R.norm_op, norm.spec_name, R.norm_op, pass.last)
  local dims = S > 1 and string.format("__cluster_dims__(%d, 1, 1) ", S) or ""
  c:line("extern \"C\" __global__ void %s__launch_bounds__(%d, 1) %s(%s)", dims, T.BLOCK, pass.kernel, signature)
  c:open("{")
  c:line("extern __shared__ __align__(16) float fg_smem[];")
  c:line("float *s_keep = fg_smem;                 /* [%d channels][%d] kept v%d */", B, SLICE, kept)
  c:line("float *s_in = fg_smem + %d;             /* [%d][%d][%d][%d] input tile with halo */", pass.conv.smem.input_offset, T.CIC, T.IT[1],
    T.IT[2], T.IT[3])
  c:line("float *s_w = s_in + %d;                  /* [%d ci][%d taps][%d co] weights */", T.W_OFFSET, T.CIC, g.taps, T.COT4)
  c:line("__shared__ double s_part[%d][2];         /* this CTA's sums and sums of squares per statistic */", NG)
  c:line("__shared__ fg_stat s_stat[%d];", NG)
  c:line("const int t = (int)threadIdx.x, tx = t %% %d, ty = t / %d, tz = 0;", T.TX, T.TX)
  c:line("(void)tz;")
  c:line("const int rank = %s;", S > 1 and "(int)fg_cluster_rank()" or "0")
  c:line("const int n = batch_base + (int)blockIdx.z;")
  c:line("const int cbase = (int)blockIdx.y * %d;", B)
  c:line("const int g = cbase / %d, co0 = cbase %% %d;", g.cout_g, g.cout_g)
  c:line("const %s *xg = %s + (fg_u64)n * %d + (fg_u64)g * %d;", g.io, names.input, g.in_sample, g.group_in_stride)
  c:line("const float *wg = %s + (fg_u64)(g * %d + co0) * %d;", names.param[conv.weight_param], g.cout_g, g.cin_g * g.taps)
  c:line("const int r0 = rank * %d / %d, r1 = (rank + 1) * %d / %d;", ROWS, S, ROWS, S)
  c:line("for (int i = t; i < %d; i += %d) (&s_part[0][0])[i] = 0.0;", NG * 2, T.BLOCK)
  c:line("float acc[%d][%d][%d];", T.RC, T.RH, T.RW)

  -- phase 1: conv tiles, the ops before the norm, kept in shared memory
  local ev = expr.new(layer, plan, pass, c, names)
  c:line("#pragma unroll 1")
  c:open("for (int q = r0; q < r1;) {")
  c:line("const int od = q / %d, oh0 = q %% %d;", O[2], O[2])
  c:line("const int th = min(%d, min(r1 - q, %d - oh0));", T.TH, O[2])
  c:line("#pragma unroll 1")
  c:open("for (int ow0 = 0; ow0 < %d; ow0 += %d) {", O[3], T.TW)
  c:line("const int id0 = od * %d - %d, ih0 = oh0 * %d - %d, iw0 = ow0 * %d - %d;", g.S[1], g.P[1], g.S[2], g.P[2],
    g.S[3], g.P[3])
  c:line("(void)id0;")
  c:line("#pragma unroll 1")
  c:open("for (int ct = 0; ct < %d; ++ct) {", T.NCT)
  c:line("#pragma unroll")
  c:line("for (int j = 0; j < %d; ++j)", T.RC)
  c:line("    for (int r = 0; r < %d; ++r)", T.RH)
  c:line("        for (int p = 0; p < %d; ++p) acc[j][r][p] = 0.0f;", T.RW)
  c:line("#pragma unroll 1")
  c:open("for (int ci0 = 0; ci0 < %d; ci0 += %d) {", g.cin_g, T.CIC)
  c:line("__syncthreads();")
  conv_t.stage(c, g, T, names)
  c:line("__syncthreads();")
  conv_t.accumulate(c, g, T)
  c:close()
  -- shifted partials (as feed.lua's): sums of v - po and (v - po)^2 over pn values, po the
  -- channel's first value; float sums of v and v^2 lose the variance where the mean is far
  -- above the spread
  c:line("float ps[%d], pq[%d], po[%d], pn[%d];", T.RC, T.RC, T.RC, T.RC)
  c:line("#pragma unroll")
  c:open("for (int j = 0; j < %d; ++j) {", T.RC)
  c:line("ps[j] = 0.0f;")
  c:line("pq[j] = 0.0f;")
  c:line("po[j] = 0.0f;")
  c:line("pn[j] = 0.0f;")
  c:line("#pragma unroll")
  c:open("for (int r = 0; r < %d; ++r) {", T.RH)
  c:line("#pragma unroll")
  c:open("for (int p = 0; p < %d; ++p) {", T.RW)
  c:line("const int cl = ct * %d + j, c = cbase + cl;", T.RC)
  c:line("const int oh = oh0 + ty * %d + r, ow = ow0 + tx * %d + p;", T.RH, T.RW)
  c:open("if (cl < %d && ty * %d + r < th && ow < %d) {", B, T.RH, O[3])
  if conv.bias then
    c:line("const float v0 = acc[j][r][p] + %s[c];", names.param[conv.bias_param])
  else
    c:line("const float v0 = acc[j][r][p];")
  end
  local coords = g.sp == 3 and { "c", "od", "oh", "ow" } or { "c", "oh", "ow" }
  ev:push_scope()
  ev:remember(0, coords, "v0")
  local v = ev:eval(kept, coords)
  c:line("s_keep[cl * %d + (q - r0 + ty * %d + r) * %d + ow] = %s;", SLICE, T.RH, O[3], v)
  c:line("if (pn[j] == 0.0f) po[j] = %s;", v)
  c:line("const float pd = %s - po[j];", v)
  c:line("pn[j] += 1.0f;")
  c:line("ps[j] += pd;")
  c:line("pq[j] += pd * pd;")
  ev:pop_scope()
  c:close()
  c:close()
  c:close()
  c:close()
  -- this tile's partial sums: per channel over the warp (fp64), then into the CTA's sums
  c:line("#pragma unroll")
  c:open("for (int j = 0; j < %d; ++j) {", T.RC)
  c:line("if (ct * %d + j >= %d) break; /* uniform: padding channels */", T.RC, B)
  local us, uq = feed.unshift(c, ev, "ps[j]", "pq[j]", "po[j]", "pn[j]")
  c:line("double a = %s, b = %s;", us, uq)
  c:open("for (int o = 16; o > 0; o >>= 1) {")
  c:line("a += __shfl_xor_sync(0xffffffffu, a, o);")
  c:line("b += __shfl_xor_sync(0xffffffffu, b, o);")
  c:close()
  c:open("if ((t & 31) == 0) {")
  c:line("atomicAdd(&s_part[(ct * %d + j) / %d][0], a);", T.RC, CG)
  c:line("atomicAdd(&s_part[(ct * %d + j) / %d][1], b);", T.RC, CG)
  c:close()
  c:close()
  c:close() -- ct
  c:close() -- ow0
  c:line("q += th;")
  c:close() -- q

  -- phase 2: the cluster's statistics
  c:line("__syncthreads();")
  if S > 1 then c:line("fg_cluster_sync(); /* every CTA's partial sums are complete */") end
  c:open("if (t < %d) {", NG)
  c:line("double sum = 0.0, sq = 0.0;")
  if S > 1 then
    c:open("for (int rr = 0; rr < %d; ++rr) {", S)
    c:line("sum += fg_dsmem_load(&s_part[t][0], (unsigned)rr);")
    c:line("sq += fg_dsmem_load(&s_part[t][1], (unsigned)rr);")
    c:close()
  else
    c:line("sum = s_part[t][0];")
    c:line("sq = s_part[t][1];")
  end
  c:line("const double cnt = %s;", lib.dlit(CG * ROWS * O[3]))
  c:line("const double mean = sum / cnt;")
  c:line("double var = sq / cnt - mean * mean;")
  c:line("if (var < 0.0) var = 0.0;")
  c:line("s_stat[t].a = (float)mean;")
  c:line("s_stat[t].b = (float)(1.0 / sqrt(var + %s));", lib.dlit(norm.eps))
  c:close()
  if S > 1 then c:line("fg_cluster_sync(); /* no CTA leaves while another still reads its sums */") end
  c:line("__syncthreads();")

  -- phase 3: the rest of the chain on the kept values, and the output
  c:line("const int npos = (r1 - r0) * %d;", O[3])
  ev.norm_stats = function(k, op, cc)
    return string.format("s_stat[((%s) - cbase) / %d]", cc[1], CG)
  end
  ev.loaders[kept] = function(cc)
    local var = ev:fresh("v" .. kept .. "_")
    c:line("const float %s = s_keep[((%s) - cbase) * %d + pl];", var, cc[1], SLICE)
    return var
  end
  -- spatial coordinates of position pl of this CTA
  local function spatial(code)
    code:line("const int sp = r0 * %d + pl;", O[3])
    local sc = {}
    if g.sp == 3 then
      code:line("const int od = sp / %d, oh = (sp / %d) %% %d, ow = sp %% %d;", O[2] * O[3], O[3], O[2], O[3])
      sc = { "od", "oh", "ow" }
    else
      code:line("const int oh = sp / %d, ow = sp %% %d;", O[3], O[3])
      sc = { "oh", "ow" }
    end
    return sc
  end
  local function write_output(oc)
    ev:push_scope()
    local out = ev:eval(pass.last, oc)
    c:line("%s[(fg_u64)n * %d + %s] = %s;", names.output, OUT.sample, g.cl and lib.lin_cl(OUT, oc) or lib.lin(OUT, oc),
      lib.io_store(layer, out))
    ev:pop_scope()
  end
  if R.reduce_op >= 0 then
    -- the block holds every channel: reduce over them at each position
    c:line("#pragma unroll 1")
    c:open("for (int pl = t; pl < npos; pl += %d) {", T.BLOCK)
    local sc = spatial(c)
    local red = layer.ops[R.reduce_op]
    -- coordinates of the output: the channel dim is gone (or 1 with keepdim)
    local oc = {}
    local after = red.keepdim and { "0" } or {}
    for _, x in ipairs(after) do oc[#oc + 1] = x end
    for _, x in ipairs(sc) do oc[#oc + 1] = x end
    write_output(oc)
    c:close()
  else
    c:line("#pragma unroll 1")
    c:open("for (int e = t; e < %d * npos; e += %d) {", B, T.BLOCK)
    c:line("const int cl = e / npos, pl = e % npos, c = cbase + cl;")
    local sc = spatial(c)
    local oc = { "c" }
    for _, x in ipairs(sc) do oc[#oc + 1] = x end
    write_output(oc)
    c:close()
  end
  c:close()
  return c
end

return M
