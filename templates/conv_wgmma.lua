-- SPDX-License-Identifier: Apache-2.0
-- The conv on Hopper's tensor cores (sm_90a): an implicit GEMM on wgmma.mma_async with a
-- producer warpgroup feeding a ring of shared-memory stages through cp.async (the input) and
-- one bulk copy a stage (the weights), under mbarriers,
-- two consumer warpgroups, persistent blocks, and the fused epilogue of conv.lua on the
-- accumulator registers.
--
-- GEMM view: M = a sample's output pixels (od, oh, ow) in tiles of BM; N = the output channels
-- of a group in tiles of BN; K = (tap, input channel) with the channels innermost, padded to
-- chunks of 32 floats: one chunk is one 128-byte row per M row and per N row, K-major, stored
-- with the 128-byte swizzle (16-byte unit u of row r lands at u ^ (r % 8)); a chunk is 4
-- wgmma k-steps of 8 (the descriptor's start + 32 bytes each). TF32 wgmma has no transpose,
-- so both operands are K-major: two passes before the conv pack them (M.render_pack_input:
-- the input channels-innermost, split into hi = tf32(x) and, for fp32 accuracy, lo =
-- tf32(x - hi); M.render_pack_weights: the B tiles' shared-memory images, swizzle applied).
--
-- fp32 precision is 3xTF32: lo·hi + hi·lo + hi·hi, each K chunk into a fresh accumulator
-- (scale-d 0) that is then added to the running one with ordinary fp32 adds. The tensor
-- core's own fp32 accumulation truncates; over a long K that error grew to 19x cuDNN's, and
-- chunked accumulation keeps it at cuDNN's level (bench/NOTES.md, v6). tf32 precision is
-- one product with one accumulator.
--
-- A bf16/fp16 layer multiplies in its dtype (wgmma m64nNk16, fg_wgmma_tiling.operand): a chunk
-- is 64 two-byte elements (the same 128-byte rows, swizzle and +32 bytes a k-step), the input
-- packed as it is (exact), the weights split into hi + lo in the dtype (fp32 precision: x.w_lo
-- + x.w_hi) or rounded once (tf32). An fp16 weight of magnitude 65520 or more rounds to inf.
-- With a prologue the packed input is the normalized one, an fp32 value: split into hi + lo in
-- the dtype too for fp32 precision (a_parts 2: x_lo.w_hi + x_hi.w_lo + x_hi.w_hi, 3xTF32's
-- products), rounded once for tf32; the same holds there for an fp16 input past 65520.
--
-- Every number of the layout (tile, stages, bytes, registers) is the planner's (fg_plan's
-- wgmma); this file prints them.
local lib = import("lib")
local conv_t = import("conv")
local expr = import("expr")
local feed = import("feed")
local prologue = import("prologue")

local M = {}

-- The wgmma tiling of the layer (fg_plan.wgmma): every conv pass of a layer runs on it.
function M.tiling_of(plan)
  return plan.wgmma
end

-- Whether the operands are half (a bf16/fp16 layer: fg_wgmma_operand BF16 or F16) rather than
-- TF32, and their PTX type.
function M.half(w) return w.operand ~= 0 end
function M.operand_ptx(w) return w.operand == 1 and "bf16" or "f16" end

-- PTX helpers the engine uses (printed once per source).
M.helpers = [[
typedef unsigned int fgw_u32;
__device__ __forceinline__ fgw_u32 fgw_smem_addr(const void *p) { return (fgw_u32)__cvta_generic_to_shared(p); }
/* TF32, rounded to nearest (the packed operands; lo is the rounded remainder) */
__device__ __forceinline__ float fgw_tf32(float x)
{
    fgw_u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}
__device__ __forceinline__ void fgw_mbar_init(fgw_u32 bar, fgw_u32 count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
/* waits until the phase of parity `parity` has completed */
__device__ __forceinline__ void fgw_mbar_wait(fgw_u32 bar, fgw_u32 parity)
{
    fgw_u32 ok = 0;
    while (!ok)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void fgw_mbar_arrive(fgw_u32 bar)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
/* a 16-byte global -> shared copy; src_bytes 0 writes zeros and reads nothing */
__device__ __forceinline__ void fgw_cp16(fgw_u32 dst, const void *src, fgw_u32 src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
/* the barrier gets one arrival once every cp.async this thread issued so far has landed */
__device__ __forceinline__ void fgw_cp_arrive(fgw_u32 bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void fgw_cp_wait_all(void) { asm volatile("cp.async.wait_all;" ::: "memory"); }
/* the barrier's current phase also waits for `bytes` bytes of bulk copies (fgw_bulk_copy) */
__device__ __forceinline__ void fgw_mbar_expect_tx(fgw_u32 bar, fgw_u32 bytes)
{
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
/* one contiguous global -> shared copy by the TMA unit (no tensor map: a plain byte range,
 * 16-byte aligned, a multiple of 16 bytes), its bytes counted on the barrier as they land */
__device__ __forceinline__ void fgw_bulk_copy(fgw_u32 dst, const void *src, fgw_u32 bytes, fgw_u32 bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
/* cp.async writes through the generic proxy, wgmma reads through the async proxy */
__device__ __forceinline__ void fgw_fence_proxy_async(void) { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void fgw_wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void fgw_wgmma_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void fgw_wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* keeps the compiler from moving accumulator reads and writes across wgmma fences and waits */
template <int R> __device__ __forceinline__ void fgw_fence_regs(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
/* shared-memory matrix descriptor, K-major with the 128-byte swizzle: start >> 4, leading
 * byte offset 1 (unused), stride byte offset 1024 B (8 rows), swizzle mode 1 */
__device__ __forceinline__ unsigned long long fgw_desc(fgw_u32 saddr)
{
    return (unsigned long long)((saddr & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}
]]

-- The consumers' cp.async groups (printed after M.helpers where the residual's tile is in shared
-- memory: fg_wgmma_tiling.res_bytes; other sources stay as they were).
M.res_helpers = [[
/* a consumer thread's cp.async groups: its copies of the residual (res_copy), its only ones */
__device__ __forceinline__ void fgw_cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void fgw_cp_wait0(void) { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
]]

-- A consumer warp's copy of its rows of the residual's tile into shared memory (inside namespace
-- fgw, after the engine's Tile), with flat tiles' rows (fg_wgmma_tiling.flat) or a sample's.
function M.res_copy(flat)
  local rows
  if flat then
    rows = [[
        /* flat tiles: the row's sample after the tile's first, and its pixel there */
        const int sq = q / OPIX, n = tl.n + sq, px = q - sq * OPIX;
        const bool ok = n < batch && tl.nb * BN + 8 * u < COUT_G;
]]
  else
    rows = [[
        const int n = tl.n, px = q;
        const bool ok = q < OPIX && tl.nb * BN + 8 * u < COUT_G;
]]
  end
  return [[
/* The residual's tile in shared memory (fg_wgmma_tiling.res_bytes; bench/NOTES.md v42): a consumer
 * warp copies the rows its staged epilogue reads -- row 16 mt + rr of dst is the tile's row
 * rows + 64 mt + rr (rows: its warpgroup's first + 16 warp) -- x the tile's BN channels of the
 * block tensor at src ([N][OPIX][GROUPS * COUT_G] of the dtype) into dst ([WGMT * 16][BN]),
 * 16 bytes (8 channels) a cp.async, consecutive lanes along a row, as one cp.async group (a
 * consumer thread's only copies: the producer's are its own threads'). Rows past the sample
 * (flat tiles: past the batch) and channels past the group's are zeros. Where src is not
 * 16-byte aligned (a view), the same pieces element by element (plain stores: the wait's
 * __syncwarp orders them too). */
__device__ __forceinline__ void res_copy(fg_io *dst, const fg_io *src, const Tile &tl, int rows, int batch, bool vec)
{
    constexpr int U = BN / 8; /* 16-byte pieces a row */
    const int lane = (int)threadIdx.x & 31, c0 = tl.g * COUT_G + tl.nb * BN;
    (void)batch;
    for (int i = lane; i < WGMT * 16 * U; i += 32) {
        const int r = i / U, u = i - r * U;
        const int q = tl.m0 + rows + 64 * (r >> 4) + (r & 15);
]] .. rows .. [[
        const fg_io *s = src + ((unsigned long long)n * OPIX + px) * (GROUPS * COUT_G) + c0 + 8 * u;
        fg_io *d = dst + r * BN + 8 * u;
        if (vec) {
            fgw_cp16(fgw_smem_addr(d), ok ? s : src, ok ? 16u : 0u);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) d[e] = ok ? s[e] : (fg_io)0;
        }
    }
    fgw_cp_commit();
}
]]
end

-- wgmma.mma_async m64nNk8 f32 += tf32 * tf32 (half operands: m64nNk16 f32 += bf16 * bf16 or
-- f16 * f16, both K-major: transpose flags 0) with both operands in shared memory: d is this
-- thread's N/2 accumulators; sd = 0 overwrites them.
local function wgmma_wrapper(n, w)
  local r = n // 2
  local regs, cons = {}, {}
  for i = 0, r - 1 do
    regs[#regs + 1] = "%" .. i
    cons[#cons + 1] = string.format('"+f"(d[%d])', i)
  end
  local c = lib.code()
  c:line("__device__ __forceinline__ void fgw_mma(float (&d)[%d], unsigned long long a, unsigned long long b, int sd)", r)
  c:open("{")
  c:line('asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"', r + 2)
  if M.half(w) then
    local t = M.operand_ptx(w)
    c:line('    "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, %%%d, %%%d, p, 1, 1, 0, 0;\\n}\\n"', n, t, t,
      table.concat(regs, ", "), r, r + 1)
  else
    c:line('    "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32 {%s}, %%%d, %%%d, p, 1, 1;\\n}\\n"', n,
      table.concat(regs, ", "), r, r + 1)
  end
  c:line("    : %s", table.concat(cons, ", "))
  c:line('    : "l"(a), "l"(b), "r"(sd));')
  c:close()
  return c
end

-- The engine's constants, producer and main loop, in namespace fgw (once per source).
function M.prelude(layer, plan)
  local g = conv_t.geometry(layer)
  local w = M.tiling_of(plan)
  local c = lib.code()
  for l in M.helpers:gmatch("([^\n]*)\n") do c:line(l) end
  if w.a_tma == 2 then
    for l in M.tma_helpers:gmatch("([^\n]*)\n") do c:line(l) end
  end
  if w.res_bytes > 0 then
    for l in M.res_helpers:gmatch("([^\n]*)\n") do c:line(l) end
  end
  c:append(wgmma_wrapper(w.bn, w))
  c:line("namespace fgw {")
  c:line("/* the conv (D, H, W order; 2D convs have depth 1) */")
  c:line("constexpr int GROUPS = %d, CIN_G = %d, COUT_G = %d, TAPS = %d;", g.groups, g.cin_g, g.cout_g, g.taps)
  c:line("constexpr int ID = %d, IH = %d, IW = %d, OD = %d, OH = %d, OW = %d;", g.I[1], g.I[2], g.I[3], g.O[1], g.O[2],
    g.O[3])
  c:line("constexpr int KD = %d, KH = %d, KW = %d, SD = %d, SH = %d, SW = %d;", g.K[1], g.K[2], g.K[3], g.S[1], g.S[2],
    g.S[3])
  c:line("constexpr int PD = %d, PH = %d, PW = %d, DD = %d, DH = %d, DW = %d;", g.P[1], g.P[2], g.P[3], g.Dl[1], g.Dl[2],
    g.Dl[3])
  c:line("constexpr int OPIX = OD * OH * OW, IPIX = ID * IH * IW;")
  c:line("/* the planner's tiling (fg_plan wgmma) */")
  local half = M.half(w)
  if half and w.a_parts == 2 then
    c:line("/* %s operands: the prologue's fp32 result PA parts, the weights PB parts (hi, lo: fp32 precision) */",
      M.operand_ptx(w))
    c:line("constexpr int PA = %d, PB = %d, BLOCK_ACC = %d; /* parts of A and B; chunks accumulated apart */",
      w.a_parts, w.parts, w.block_acc)
    c:line("constexpr int CP = %d, XC = %d, KCH = %d; /* packed channels per group, per pixel; K chunks of %d */", w.cp,
      w.xc, w.kch, w.kc_elems)
  elseif half then
    c:line("/* %s operands: the input one part (exact in its dtype), the weights PB parts (hi, lo: fp32 precision) */",
      M.operand_ptx(w))
    c:line("constexpr int PA = %d, PB = %d, BLOCK_ACC = %d; /* parts of A and B; chunks accumulated apart */",
      w.a_parts, w.parts, w.block_acc)
    c:line("constexpr int CP = %d, XC = %d, KCH = %d; /* packed channels per group, per pixel; K chunks of %d */", w.cp,
      w.xc, w.kch, w.kc_elems)
  else
    c:line("constexpr int P = %d, BLOCK_ACC = %d; /* operand parts (hi, lo); chunks accumulated apart */", w.parts,
      w.block_acc)
    c:line("constexpr int CP = %d, XC = %d, KCH = %d; /* packed channels per group, per pixel; K chunks of 32 */", w.cp,
      w.xc, w.kch)
  end
  c:line("constexpr int BN = %d, NBLK = %d, WGMT = %d, BM = %d, M_TILES = %d;", w.bn, w.nblk, w.wgmt, w.bm, w.m_tiles)
  c:line("constexpr int STAGES = %d, A_BYTES = %d, B_BYTES = %d, STAGE_BYTES = %d, BAR_OFFSET = %d;", w.stages,
    w.a_bytes, w.b_bytes, w.stage_bytes, w.bar_offset)
  -- BASEREG: what each thread has before setmaxnreg (the launch bounds', planner.h)
  c:line("constexpr int CONSREG = %d, PRODREG = %d, BASEREG = %d;", w.consumer_regs, w.producer_regs, w.base_regs)
  c:line("constexpr int RPT = BM / 16; /* A rows each producer thread copies per chunk */")
  if w.coord_bits == 16 then
    c:line("constexpr int CB = 32;       /* bias of the producer's packed row coordinates (h, w: 16 bits each) */")
  else
    c:line("constexpr int CB = 32;       /* bias of the producer's packed row coordinates (10 bits each) */")
  end
  if half then
    c:line("static_assert(STAGE_BYTES == PA * A_BYTES + PB * B_BYTES && A_BYTES == BM * 128 && B_BYTES == BN * 128, \"layout\");")
    c:line("static_assert(CP % 8 == 0, \"a 16-byte copy holds 8 channels of one tap\");")
    c:line("constexpr int B_CHUNK_BYTES = PB * B_BYTES; /* a stage's B parts: one bulk copy */")
  else
    c:line("static_assert(STAGE_BYTES == P * (A_BYTES + B_BYTES) && A_BYTES == BM * 128 && B_BYTES == BN * 128, \"layout\");")
    c:line("constexpr int B_CHUNK_BYTES = P * B_BYTES; /* a stage's B parts: one bulk copy */")
  end
  if w.coord_bits == 16 then
    c:line("static_assert(ID == 1 && KD == 1 && OD == 1 && PD == 0 && IH + CB < 65536 && IW + CB < 65536, \"packed coordinates\");")
  else
    c:line("static_assert(ID + CB < 1024 && IH + CB < 1024 && IW + CB < 1024, \"packed coordinates\");")
  end
  local split = w.split_k > 1
  if split then
    -- the launch's splits by one of the planner's two rules (fg_wgmma_tiling.split_waves)
    local waves = w.split_waves == 1
    if waves then
      c:line("/* split K counted in waves: at most SPLIT_K CTAs share a tile's K chunks, while tiles x splits <= SPLIT_FILL")
      c:line(" * (the partial tiles the workspace holds); a partial tile is SLOT floats (the consumers' accumulators);")
      c:line(" * the last-arrival flag at FLAG_OFFSET; the splits' estimated costs (splits_for) */")
    else
      c:line("/* split K: at most SPLIT_K CTAs share a tile's K chunks, while tiles x splits <= SPLIT_FILL; a partial")
      c:line(" * tile is SLOT floats (the consumers' accumulators); the last-arrival flag at FLAG_OFFSET */")
    end
    c:line("constexpr int SPLIT_K = %d, SPLIT_FILL = %d, SLOT = %d, FLAG_OFFSET = %d;", w.split_k, w.split_fill,
      w.split_slot, w.flag_offset)
    if waves then
      c:line("constexpr int SPLIT_SMS = %d, SPLIT_CHUNK_COST = %d, SPLIT_PARTIAL_COST = %d;", w.split_sms,
        w.split_chunk_cost, w.split_partial_cost)
    end
    if w.alternate == 1 then
      c:line("static_assert(SLOT == WGMT * (BN / 2) * 128, \"a partial is the accumulators of the warpgroup whose tile it is\");")
    else
      c:line("static_assert(SLOT == WGMT * (BN / 2) * 256, \"a partial is every consumer thread's accumulators\");")
    end
    for l in (waves and M.split_waves or M.split_one_wave):gmatch("([^\n]*)\n") do c:line(l) end
    for l in M.fill_fixup(M.split_engine, w.alternate == 1):gmatch("([^\n]*)\n") do c:line(l) end
  end
  if w.multicast == 2 then
    for l in M.multicast_engine:gmatch("([^\n]*)\n") do c:line(l) end
  end
  local engine = M.fill_engine(M.engine, split, half, w.a_parts, w.coord_bits, w.multicast, w.a_tma, w.a_tma_rank,
    w.ping_pong)
  if w.flat then engine = M.flatten(engine, w.a_tma ~= 2) end
  for l in engine:gmatch("([^\n]*)\n") do
    c:line(l)
  end
  if w.res_bytes > 0 then
    for l in M.res_copy(w.flat):gmatch("([^\n]*)\n") do c:line(l) end
  end
  c:line("} // namespace fgw")
  return c
end

-- The engine's text with its split-K markers filled: the unsplit kernel (the text as it always
-- was) or the split one, whose units are (tile, split) and whose K loops run kc0..kc1.
local unsplit_marks = {
  UNITS = "    tile_range(ntiles, &begin, &end);\n    for (int tile = begin; tile < end; ++tile) {",
  KC0 = "0",
  KC1 = "KCH",
  SEQ = "int seq",
  IT0 = "    const int it0 = seq * KCH; /* the ring's chunk counter, as the producer counts */",
}
local split_marks = {
  UNITS = table.concat({
    "    const int nsplit = splits_for(ntiles);",
    "    tile_range(ntiles * nsplit, &begin, &end);",
    "    for (int unit = begin; unit < end; ++unit) {",
    "        const int tile = unit % ntiles, split = unit / ntiles;",
    "        const int kc0 = chunk_begin(split, nsplit), kc1 = chunk_begin(split + 1, nsplit);",
  }, "\n"),
  KC0 = "kc0",
  KC1 = "kc1",
  SEQ = "int it0, int kc0, int kc1",
  IT0 = "    /* it0 + kc: the ring's chunk counter, as the producer counts (the caller's it0 is the chunks\n" ..
        "     * before this unit's, less kc0) */",
}
-- The operand marks: TF32 operands (the text as it always was) or half ones (one input part of
-- 2-byte elements, 64 to a chunk).
local tf32_marks = {
  XPTR = "        const float *xh = xhi + (unsigned long long)tl.n * ((unsigned long long)IPIX * XC);\n" ..
         "        const float *xl = P == 2 ? xlo + (unsigned long long)tl.n * ((unsigned long long)IPIX * XC) : xlo;",
  XLO = "                if (P == 2) fgw_cp16(dst + A_BYTES, xl + off, ok ? 16u : 0u);",
  PA = "P",
  KE = "32",
  UE = "4",
}
local half_marks = {
  XPTR = "        const fg_io *xh = (const fg_io *)xhi + (unsigned long long)tl.n * ((unsigned long long)IPIX * XC);\n" ..
         "        (void)xlo; /* the input is one part: exact in its dtype */",
  XLO = "                /* (one part of A) */",
  PA = "PA",
  KE = "64",
  UE = "8",
}
-- Half operands of an input in two parts (a prologue's result split: a_parts 2): the lo part
-- A_BYTES after hi in the stage, as TF32's.
local half_split_marks = {
  XPTR = "        const fg_io *xh = (const fg_io *)xhi + (unsigned long long)tl.n * ((unsigned long long)IPIX * XC);\n" ..
         "        const fg_io *xl = (const fg_io *)xlo + (unsigned long long)tl.n * ((unsigned long long)IPIX * XC);",
  XLO = "                fgw_cp16(dst + A_BYTES, xl + off, ok ? 16u : 0u);",
  PA = "PA",
  KE = "64",
  UE = "8",
}
-- The producer's packed row origins (fg_wgmma_tiling.coord_bits): (d, h, w) in 10 bits each (the
-- text as it always was), or a 2D conv's (h, w) in 16 bits each.
local coord10_marks = {
  CPACK = "((fgw_u32)(z0 + CB) << 20) | ((fgw_u32)(y0 + CB) << 10) | (fgw_u32)(x0 + CB)",
  CNONE = "0x3FFFFFFFu",
  CX = "(crd & 1023u)",
  CY = "((crd >> 10) & 1023u)",
}
local coord16_marks = {
  CPACK = "((fgw_u32)(y0 + CB) << 16) | (fgw_u32)(x0 + CB); (void)z0",
  CNONE = "0xFFFFFFFFu",
  CX = "(crd & 0xFFFFu)",
  CY = "(crd >> 16)",
}
-- The B chunk's copy and the release of a stage: one CTA's (the text as it always was), or
-- a pair's (fg_wgmma_tiling.multicast 2: M.multicast_engine's helpers).
local solo_marks = {
  BCOPY = table.concat({
    "            if (t == 0) {",
    "                /* before this thread's arrival below, so the phase cannot complete without B */",
    "                fgw_mbar_expect_tx(bar_full + 8 * s, B_CHUNK_BYTES);",
    "                fgw_bulk_copy(sA + @PA@ * A_BYTES, wtile + (unsigned long long)kc * (B_CHUNK_BYTES / 4), B_CHUNK_BYTES,",
    "                              bar_full + 8 * s);",
    "            }",
  }, "\n"),
  PTAIL = false, -- (no line)
  RELEASE = "fgw_mbar_arrive",
}
local pair_marks = {
  BCOPY = "            if (t == 0) pair_copy_b(sA + @PA@ * A_BYTES, wtile, kc, bar_full + 8 * s);",
  PTAIL = "    producer_pair_tail(it, wimg, ntiles, sbase, bar_full, bar_empty);",
  RELEASE = "pair_release",
}
-- Replaces the one occurrence of `old` in text by `new` (plain text, no patterns).
local function splice(text, old, new)
  local i, j = text:find(old, 1, true)
  if not i then error("conv_wgmma.lua: the engine text lacks what the TMA producer replaces") end
  return text:sub(1, i - 1) .. new .. text:sub(j + 1)
end

function M.fill_engine(text, split, half, a_parts, coord_bits, multicast, a_tma, a_tma_rank, ping_pong)
  if ping_pong == 1 and a_tma ~= 2 then error("conv_wgmma.lua: ping-pong accumulation without the TMA producer") end
  text = text:gsub("@PINGPONG@\n", function() return ping_pong == 1 and M.ping_pong_loop or "" end)
  text = text:gsub("@PPISSUE@\n", function() return ping_pong == 1 and M.ping_pong_issue or "" end)
  if a_tma == 2 then
    -- A by TMA (fg_wgmma_tiling.a_tma 2): its producer instead of the cp.async one; TMA and the
    -- bulk copy write through the async proxy, as wgmma reads: no fence after the full wait
    text = splice(text, M.producer_cp_async, M.producer_tma)
    text = splice(text, M.consumer_fence, "")
    text = text:gsub("@TMACOPY@", function() return a_tma_rank == 5 and M.tma_copy5 or M.tma_copy4 end)
  end
  local marks = {}
  for k, v in pairs(multicast == 2 and pair_marks or solo_marks) do marks[k] = v end
  -- the copy's text holds a mark of its own
  text = text:gsub("@BCOPY@", function() return marks.BCOPY end)
  text = text:gsub("@PTAIL@\n", function() return marks.PTAIL and marks.PTAIL .. "\n" or "" end)
  for k, v in pairs(coord_bits == 16 and coord16_marks or coord10_marks) do marks[k] = v end
  local split_a = half and a_parts == 2
  for k, v in pairs(split and split_marks or unsplit_marks) do marks[k] = v end
  for k, v in pairs(split_a and half_split_marks or half and half_marks or tf32_marks) do marks[k] = v end
  local issue = split_a and M.issue_half_split or half and M.issue_half or M.issue_tf32
  marks.ISSUE = issue:sub(1, -2) -- its last newline is the mark's line's
  return (text:gsub("@([%u%d]+)@", function(name)
    local v = marks[name]
    if not v then error("conv_wgmma.lua: unknown engine mark @" .. name .. "@") end
    return v
  end))
end

-- A pair's helpers (fg_wgmma_tiling.multicast 2; inside namespace fgw, before the engine).
-- pair_steps restates the engine's tile_range split (contiguous ranges of ceil(tiles / grid),
-- the even CTA's the longer): change both together, or a pair's CTAs disagree on their ring
-- steps and wait for each other forever.
M.multicast_engine = [[
/* The two CTAs of a cluster share every B chunk: each has the TMA unit copy one half of it
 * into the same stage of both (multicast), so the pair reads B from L2 once; a stage is free
 * again when the consumers of both CTAs have released it. Every tile reads the same sequence
 * of B chunks (one channel block, one group, no split K), so the pair's ring steps match one
 * to one; the CTA with fewer tiles runs the difference as empty steps (its half of B, no A). */
/* the ring steps of the pair: the larger of its CTAs' tiles (tile_range's split) x KCH */
__device__ __forceinline__ int pair_steps(int ntiles)
{
    const int per = (ntiles + (int)gridDim.x - 1) / (int)gridDim.x;
    const int first = ((int)blockIdx.x & ~1) * per; /* the pair's first tile; the even CTA's range is full */
    const int tiles = ntiles - first < per ? ntiles - first : per;
    return tiles > 0 ? tiles * KCH : 0;
}
/* this CTA's half of B chunk kc (of the image at wtile) into both CTAs' stage at dst, counted
 * on the barrier at `bar` in each; this CTA's barrier waits for both halves */
__device__ __forceinline__ void pair_copy_b(fgw_u32 dst, const float *wtile, int kc, fgw_u32 bar)
{
    constexpr int HALF = B_CHUNK_BYTES / 2;
    static_assert(HALF % 16 == 0, "a bulk copy moves 16-byte units");
    const fgw_u32 rank = fg_cluster_rank(); /* (lib.cluster_prelude) */
    fgw_mbar_expect_tx(bar, B_CHUNK_BYTES);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
                 ::"r"(dst + rank * HALF), "l"(wtile + (unsigned long long)kc * (B_CHUNK_BYTES / 4) + rank * (HALF / 4)),
                 "r"(HALF), "r"(bar), "h"((unsigned short)3) : "memory");
}
/* a consumer warp's release of a stage: to this CTA's producer and to the peer's */
__device__ __forceinline__ void pair_release(fgw_u32 bar)
{
    fgw_mbar_arrive(bar);
    fgw_u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(fg_cluster_rank() ^ 1u));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
/* the producer's empty steps from `it` to the pair's count: its half of each B chunk */
__device__ __forceinline__ void producer_pair_tail(int it, const float *wimg, int ntiles, fgw_u32 sbase,
                                                   fgw_u32 bar_full, fgw_u32 bar_empty)
{
    for (const int total = pair_steps(ntiles); it < total; ++it) {
        const int s = it % STAGES;
        fgw_mbar_wait(bar_empty + 8 * s, ((it / STAGES) & 1) ^ 1);
        if (threadIdx.x == 0)
            pair_copy_b(sbase + s * STAGE_BYTES + (STAGE_BYTES - B_CHUNK_BYTES), wimg, it % KCH, bar_full + 8 * s);
        fgw_mbar_arrive(bar_full + 8 * s);
    }
}
/* the consumers' empty steps from `it` to the pair's count: wait for each stage, release it */
__device__ __forceinline__ void consumer_pair_tail(int it, int ntiles, fgw_u32 bar_full, fgw_u32 bar_empty)
{
    for (const int total = pair_steps(ntiles); it < total; ++it) {
        const int s = it % STAGES;
        fgw_mbar_wait(bar_full + 8 * s, (it / STAGES) & 1);
        if ((threadIdx.x & 31) == 0) pair_release(bar_empty + 8 * s);
    }
}
]]

-- Split K's helpers (inside namespace fgw, before the engine): the launch's splits by one of
-- the planner's two rules (fg_wgmma_tiling.split_waves), then the rest.
M.split_one_wave = [[
/* the K splits of a launch of ntiles tiles: as many as keep tiles x splits <= SPLIT_FILL, at
 * most SPLIT_K, none below 2 (the planner's fg_wgmma_splits, which the launcher sizes the grid
 * with) */
__device__ __forceinline__ int splits_for(int ntiles)
{
    const int s = SPLIT_FILL / ntiles;
    return s < 2 ? 1 : s < SPLIT_K ? s : SPLIT_K;
}
]]
M.split_waves = [[
/* the K splits of a launch of ntiles tiles: the S in 1..SPLIT_K (tiles x S <= SPLIT_FILL past
 * 1) of the least estimated time, SPLIT_CHUNK_COST x waves of SPLIT_SMS units x ceil(KCH / S)
 * + SPLIT_PARTIAL_COST x S past 1, the fewer splits on a tie (the planner's fg_wgmma_splits,
 * which the launcher sizes the grid with: the two must agree) */
__device__ __forceinline__ long long split_cost(int ntiles, int s)
{
    const long long waves = ((long long)ntiles * s + SPLIT_SMS - 1) / SPLIT_SMS;
    return SPLIT_CHUNK_COST * waves * ((KCH + s - 1) / s) + (s > 1 ? (long long)SPLIT_PARTIAL_COST * s : 0);
}
__device__ __forceinline__ int splits_for(int ntiles)
{
    int best = 1;
    long long best_cost = split_cost(ntiles, 1);
    for (int s = 2; s <= SPLIT_K && (long long)ntiles * s <= SPLIT_FILL; ++s) {
        const long long cost = split_cost(ntiles, s);
        if (cost < best_cost) best = s, best_cost = cost;
    }
    return best;
}
]]
M.split_engine = [[
/* the first K chunk of split s of n */
__device__ __forceinline__ int chunk_begin(int s, int n) { return s * KCH / n; }
/* 16-byte copies that bypass L1 (a partial is read once, by another CTA): a partial's four
 * consecutive registers of a thread at once; float copies (bench/NOTES.md v43) put 4x as many
 * stores and loads on the load-store unit's queue, whose throttle stalled the fixup */
__device__ __forceinline__ void fgw_st_cg4(float *p, float a, float b, float c, float d)
{
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ float4 fgw_ld_cg4(const float *p)
{
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
    return v;
}
/* A consumer thread's part in one split of a tile: its accumulators (this split's fp32 partial)
 * to the tile's slot [tile][split] in the workspace, registers 4 q .. 4 q + 3 of m-tile mt as
 * one float4 at float4 (mt BN/8 + q) x 256 + the thread (coalesced); then one arrival per CTA
 * on the tile's counter: the barrier orders every consumer thread's stores before thread 0's
 * acquire-release atomic add, whose acquire the barrier after it passes on to every thread
 * (the pattern of CUTLASS's split-K semaphore; a fence in every thread waited for each
 * thread's stores, bench/NOTES.md v43).
 * The CTA that arrives last resets the counter (every split has arrived: the next launch, or
 * a graph's replay, finds it zero) and replaces acc with the sum of every split's partial in
 * split order 0..nsplit-1, its own included: the same result whatever order the splits
 * arrived in. Returns whether this CTA was last (uniform over the consumers: it then runs the
 * epilogue). */
__device__ __forceinline__ bool split_fixup(float (&acc)[WGMT][BN / 2], float *part, unsigned *counters, int tile,
                                            int split, int nsplit, volatile int *flag)
{
@FIXTID@
    float *mine = part + (unsigned long long)(tile * nsplit + split) * SLOT + 4 * tid;
#pragma unroll
    for (int mt = 0; mt < WGMT; ++mt)
#pragma unroll
        for (int q = 0; q < BN / 8; ++q)
            fgw_st_cg4(mine + (mt * (BN / 8) + q) * @FIXSTRIDE@, acc[mt][4 * q], acc[mt][4 * q + 1], acc[mt][4 * q + 2],
                       acc[mt][4 * q + 3]);
@FIXBAR@
    if (tid == 0) {
        /* the arrival, one acquire-release atomic at GPU scope: release (every consumer
         * thread's stores, ordered before it by the barrier), acquire (the other splits'
         * stores, for every thread after the barrier). Two __threadfence() around a relaxed
         * add put two MEMBAR.SC.GPU on the path every consumer thread waits at the barrier
         * for; this is one MEMBAR.ALL.GPU before the add and an L1 invalidate after (SASS,
         * NVRTC 13.0), CUTLASS's fence.acq_rel + relaxed add as one instruction */
        unsigned arrived;
        asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(arrived) : "l"(counters + tile) : "memory");
        const bool last = arrived == (unsigned)(nsplit - 1);
        *flag = last;
        if (last) *(volatile unsigned *)(counters + tile) = 0u;
    }
@FIXBAR@
    if (!*flag) return false;
    const float *base = part + (unsigned long long)tile * nsplit * SLOT + 4 * tid;
#pragma unroll
    for (int mt = 0; mt < WGMT; ++mt)
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
            const float4 v = fgw_ld_cg4(base + (mt * (BN / 8) + q) * @FIXSTRIDE@);
            acc[mt][4 * q] = v.x, acc[mt][4 * q + 1] = v.y, acc[mt][4 * q + 2] = v.z, acc[mt][4 * q + 3] = v.w;
        }
#pragma unroll 1
    for (int s = 1; s < nsplit; ++s) {
        const float *p = base + (unsigned long long)s * SLOT;
#pragma unroll
        for (int mt = 0; mt < WGMT; ++mt)
#pragma unroll
            for (int q = 0; q < BN / 8; ++q) {
                const float4 v = fgw_ld_cg4(p + (mt * (BN / 8) + q) * @FIXSTRIDE@);
                acc[mt][4 * q] += v.x, acc[mt][4 * q + 1] += v.y, acc[mt][4 * q + 2] += v.z, acc[mt][4 * q + 3] += v.w;
            }
    }
    return true;
}
]]

-- The fixup's marks: both consumer warpgroups hold a tile (the text as it always was), or,
-- where they take tiles in turn (fg_wgmma_tiling.alternate), the warpgroup whose tile it is
-- alone: its 128 threads' accumulators, its own named barrier (2 + cw; 1 is both
-- warpgroups'), and its own flag (the caller passes it), so that neither waits for the other.
local fixup_shared = {
  FIXTID = "    const int tid = (int)threadIdx.x - 128;",
  FIXSTRIDE = "1024",
  FIXBAR = '    asm volatile("bar.sync 1, 256;" ::: "memory");',
}
local fixup_turns = {
  FIXTID = "    /* tiles in turn: the warpgroup whose tile it is alone (its 128 threads' float4s, x 128 + the\n" ..
           "     * thread; one arrival per warpgroup, its own barrier and flag) */\n" ..
           "    const int tid = ((int)threadIdx.x - 128) & 127;",
  FIXSTRIDE = "512",
  FIXBAR = '    asm volatile("bar.sync %0, 128;" ::"r"(((int)threadIdx.x >> 7) + 1) : "memory"); /* this warpgroup\'s */',
}
function M.fill_fixup(text, turns)
  local marks = turns and fixup_turns or fixup_shared
  return (text:gsub("@(FIX%u+)@", function(name) return marks[name] end))
end

-- One K chunk's wgmmas (the engine's @ISSUE@): TF32 operands (3xTF32 or one product; the same
-- text, its parts constant and k-step filled, serves half operands in two parts below) ...
local issue_3parts = [[
/* One K chunk's wgmmas into d: per k-step of @KSTEP@ the small products first (lo.hi, hi.lo) and
 * hi.hi last; `first` starts d over (scale-d 0). */
template <int R> __device__ __forceinline__ void issue_chunk(float (&d)[WGMT][R], fgw_u32 sA, fgw_u32 sB, int first)
{
    const unsigned long long bh = fgw_desc(sB), bl = fgw_desc(sB + B_BYTES);
#pragma unroll
    for (int mt = 0; mt < WGMT; ++mt) {
        const unsigned long long ah = fgw_desc(sA + mt * 64 * 128), al = fgw_desc(sA + mt * 64 * 128 + A_BYTES);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const int sd = ks == 0 ? !first : 1;
            if (@P@ == 2) {
                fgw_mma(d[mt], al + 2 * ks, bh + 2 * ks, sd);
                fgw_mma(d[mt], ah + 2 * ks, bl + 2 * ks, 1);
                fgw_mma(d[mt], ah + 2 * ks, bh + 2 * ks, 1);
            } else {
                fgw_mma(d[mt], ah + 2 * ks, bh + 2 * ks, sd);
            }
        }
    }
}
]]

M.issue_tf32 = issue_3parts:gsub("@KSTEP@", "8"):gsub("@P@", "P")

-- ... or half ones: the input one part (exact), the weights hi and lo (fp32 precision) or one
-- rounded part. A k-step of 16 half elements is 32 bytes, as a TF32 k-step of 8: the
-- descriptors advance the same. The lo product first, into the same accumulator as hi (for
-- fp16 lo is often subnormal: render_pack_weights says why that is kept).
M.issue_half = [[
/* One K chunk's wgmmas into d: per k-step of 16 the weights' lo product first (x.w_lo), then
 * x.w_hi; `first` starts d over (scale-d 0). */
template <int R> __device__ __forceinline__ void issue_chunk(float (&d)[WGMT][R], fgw_u32 sA, fgw_u32 sB, int first)
{
    const unsigned long long bh = fgw_desc(sB), bl = fgw_desc(sB + B_BYTES);
    (void)bl;
#pragma unroll
    for (int mt = 0; mt < WGMT; ++mt) {
        const unsigned long long a = fgw_desc(sA + mt * 64 * 128);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const int sd = ks == 0 ? !first : 1;
            if (PB == 2) {
                fgw_mma(d[mt], a + 2 * ks, bl + 2 * ks, sd);
                fgw_mma(d[mt], a + 2 * ks, bh + 2 * ks, 1);
            } else {
                fgw_mma(d[mt], a + 2 * ks, bh + 2 * ks, sd);
            }
        }
    }
}
]]

-- ... or half ones with the input in two parts (a prologue's fp32 result: hi + lo in the
-- dtype) and the weights in two: 3xTF32's three products on the dtype's k16 (the same
-- descriptors: a k-step is 32 bytes either way), lo.lo dropped (at most u^2 |x w|, u the
-- dtype's unit roundoff: tests/test_half_split.c models the sum).
M.issue_half_split = issue_3parts:gsub("@KSTEP@", "16"):gsub("@P@", "PA")

-- The producer and the consumers' main loop (inside namespace fgw), with the split-K marks
-- fill_engine fills.
local engine_tiles = [[
/* tile t -> (sample, group, channel block, first output pixel), the pixels fastest. A block
 * takes a contiguous range of tiles (tile_range): consecutive tiles of one sample and channel
 * block, whose neighbouring rows share input in L2 and whose statistics the epilogue keeps
 * in registers across tiles. A tile never spans two samples. */
struct Tile {
    int n, g, nb, m0;
};
__device__ __forceinline__ Tile decode_tile(int t)
{
    Tile r;
    r.m0 = (t % M_TILES) * BM;
    t /= M_TILES;
    r.nb = t % NBLK;
    t /= NBLK;
    r.g = t % GROUPS;
    r.n = t / GROUPS;
    return r;
}
/* this block's tiles: [*begin, *end) */
__device__ __forceinline__ void tile_range(int ntiles, int *begin, int *end)
{
    const int per = (ntiles + (int)gridDim.x - 1) / (int)gridDim.x;
    *begin = (int)blockIdx.x * per;
    *end = *begin + per < ntiles ? *begin + per : ntiles;
}

]]

-- Flat tiles (planner.h, fg_wgmma_tiling.flat): a tile's BM rows run over the batch's output
-- pixels flattened, so that a small image's tile is not mostly empty. The engine's text (filled)
-- with (1) decode_tile walking the channel blocks and groups fastest and the flattened rows
-- slowest (the tile's sample and first pixel from its first row: the TMA producer's box starts
-- there and runs on into the next samples, zero-filled past the batch), (2) the cp.async
-- producer's rows in the sample they fall in (an offset of whole samples; rows past the batch
-- zero-filled), which needs the batch.
local flat_decode_old = [[
    r.m0 = (t % M_TILES) * BM;
    t /= M_TILES;
    r.nb = t % NBLK;
    t /= NBLK;
    r.g = t % GROUPS;
    r.n = t / GROUPS;
    return r;]]
local flat_decode_new = [[
    r.nb = t % NBLK;
    t /= NBLK;
    r.g = t % GROUPS;
    t /= GROUPS;
    /* flat tiles: the tile's first row among the batch's pixels, its sample and pixel */
    const long long f = (long long)t * BM;
    r.n = (int)(f / OPIX);
    r.m0 = (int)(f - (long long)r.n * OPIX);
    return r;]]
local flat_rows_old = [[
            const int q = tl.m0 + r0 + 16 * j;
            if (q < OPIX) {
                const int od = q / (OH * OW), rem = q - od * (OH * OW);]]
local flat_rows_new = [[
            const int q = tl.m0 + r0 + 16 * j;
            /* flat tiles: the row's sample after the tile's first, and its pixel there */
            const int sq = q / OPIX, pq = q - sq * OPIX;
            if (tl.n + sq < batch) {
                const int od = pq / (OH * OW), rem = pq - od * (OH * OW);]]
local flat_roff_old = "                roff[j] = ((z0 * IH + y0) * IW + x0) * XC + tl.g * CP;"
local flat_roff_new = "                roff[j] = sq * (IPIX * XC) + ((z0 * IH + y0) * IW + x0) * XC + tl.g * CP;"
local flat_sig_old = "const float *__restrict__ wimg, int ntiles, fgw_u32 sbase, fgw_u32 bar_full,"
local flat_sig_new = "const float *__restrict__ wimg, int ntiles, int batch, fgw_u32 sbase, fgw_u32 bar_full,"

local function replace_once(text, old, new, what)
  local i, j = text:find(old, 1, true)
  if not i then error("conv_wgmma.flatten: " .. what .. " not found") end
  if text:find(old, j + 1, true) then error("conv_wgmma.flatten: " .. what .. " found twice") end
  return text:sub(1, i - 1) .. new .. text:sub(j + 1)
end

-- `cp_async`: the producer is the cp.async one (its rows must be rewritten: a flat decode with
-- the per-sample producer would load the wrong rows without any compile error)
function M.flatten(text, cp_async)
  text = replace_once(text, flat_decode_old, flat_decode_new, "decode_tile")
  text = replace_once(text, " * in registers across tiles. A tile never spans two samples. */",
    " * in registers across tiles. Flat tiles: a tile's rows run over consecutive samples. */", "decode_tile's comment")
  if cp_async then
    text = replace_once(text, flat_rows_old, flat_rows_new, "the producer's rows")
    text = replace_once(text, flat_roff_old, flat_roff_new, "the producer's row offsets")
    text = replace_once(text, flat_sig_old, flat_sig_new, "the producer's signature")
  else
    text = replace_once(text, " * sample's pixels (zeros past the batch), which every epilogue path masks (q < OPIX). */",
      " * sample's pixels (zeros past the batch): with flat tiles those rows are the tile's outputs. */",
      "the TMA producer's comment")
  end
  return text
end

-- The producer by cp.async (the text as it always was; fg_wgmma_tiling.a_tma 1).
M.producer_cp_async = [[
/* The producer warpgroup: thread t copies 16-byte unit (t & 7) of rows (t >> 3) + 16 j of every
 * A chunk (the im2col rows, zero-filled outside the input) into the swizzled stage; one noinc
 * arrival per thread on the stage's full barrier when its copies have landed. The B chunk is a
 * ready-made image, contiguous in the packed weights: thread 0 has the TMA unit copy it in one
 * bulk copy, whose bytes the full barrier waits for too (bench/NOTES.md v20: 128 threads' 16-byte
 * copies took issue slots from the consumers). */
__device__ __forceinline__ void producer(const float *__restrict__ xhi, const float *__restrict__ xlo,
                                         const float *__restrict__ wimg, int ntiles, fgw_u32 sbase, fgw_u32 bar_full,
                                         fgw_u32 bar_empty)
{
    const int t = (int)threadIdx.x; /* 0..127 */
    const int seg = t & 7, r0 = t >> 3;
    int it = 0, begin, end;
@UNITS@
        const Tile tl = decode_tile(tile);
        /* the tile's sample, offset in 64 bits (a batch's packed input passes 2^31 floats);
         * within a sample int offsets suffice (the planner checks) */
@XPTR@
        /* per row: the element offset of its input origin within the sample, and the packed origin */
        int roff[RPT];
        fgw_u32 rcrd[RPT];
#pragma unroll
        for (int j = 0; j < RPT; ++j) {
            const int q = tl.m0 + r0 + 16 * j;
            if (q < OPIX) {
                const int od = q / (OH * OW), rem = q - od * (OH * OW);
                const int oh = rem / OW, ow = rem - oh * OW;
                const int z0 = od * SD - PD, y0 = oh * SH - PH, x0 = ow * SW - PW;
                roff[j] = ((z0 * IH + y0) * IW + x0) * XC + tl.g * CP;
                rcrd[j] = @CPACK@;
            } else {
                roff[j] = 0;
                rcrd[j] = @CNONE@; /* every field out of range */
            }
        }
        const float *wtile = wimg + (unsigned long long)((tl.g * NBLK + tl.nb) * KCH) * (B_CHUNK_BYTES / 4);
#pragma unroll 1
        for (int kc = @KC0@; kc < @KC1@; ++kc, ++it) {
            const int s = it % STAGES;
            fgw_mbar_wait(bar_empty + 8 * s, ((it / STAGES) & 1) ^ 1);
            const fgw_u32 sA = sbase + s * STAGE_BYTES;
@BCOPY@
            const int k = kc * @KE@ + seg * @UE@;
            const int tap = k / CP, ch = k - tap * CP;
            const int kd = tap / (KH * KW), kh = (tap / KW) % KH, kw = tap % KW;
            const int dz = kd * DD, dy = kh * DH, dx = kw * DW;
            const int tapoff = ((dz * IH + dy) * IW + dx) * XC + ch;
            const bool kval = tap < TAPS;
#pragma unroll
            for (int j = 0; j < RPT; ++j) {
                const int r = r0 + 16 * j;
                const fgw_u32 crd = rcrd[j];
                bool ok = kval && (fgw_u32)((int)@CX@ - CB + dx) < (fgw_u32)IW &&
                          (fgw_u32)((int)@CY@ - CB + dy) < (fgw_u32)IH;
                if (ID > 1 || KD > 1 || PD > 0) ok = ok && (fgw_u32)((int)(crd >> 20) - CB + dz) < (fgw_u32)ID;
                const int off = ok ? roff[j] + tapoff : 0;
                const fgw_u32 dst = sA + r * 128 + ((seg ^ (r & 7)) << 4);
                fgw_cp16(dst, xh + off, ok ? 16u : 0u);
@XLO@
            }
            fgw_cp_arrive(bar_full + 8 * s);
        }
    }
@PTAIL@
    fgw_cp_wait_all();
}
]]

-- The consumers' fence after the full wait (cp.async writes; fill_engine drops it with TMA).
M.consumer_fence = "        fgw_fence_proxy_async(); /* cp.async wrote through the generic proxy */\n"

local engine_consumers = [[

@ISSUE@
template <int R> __device__ __forceinline__ void fence_all(float (&d)[WGMT][R])
{
#pragma unroll
    for (int mt = 0; mt < WGMT; ++mt) fgw_fence_regs(d[mt]);
}

@PPISSUE@
/* A consumer warpgroup's K loop over one tile (the block's `seq`-th): its rows
 * row0 .. row0 + 64 WGMT of every stage, the sums in acc (tmp: the block accumulator). */
__device__ __forceinline__ void mainloop(float (&acc)[WGMT][BN / 2], float (&tmp)[WGMT][BN / 2], @SEQ@, int row0,
                                         fgw_u32 sbase, fgw_u32 bar_full, fgw_u32 bar_empty)
{
    const int lane = (int)threadIdx.x & 31;
@IT0@
@PINGPONG@
#pragma unroll 1
    for (int kc = @KC0@; kc < @KC1@; ++kc) {
        const int it = it0 + kc, s = it % STAGES;
        fgw_mbar_wait(bar_full + 8 * s, (it / STAGES) & 1);
        fgw_fence_proxy_async(); /* cp.async wrote through the generic proxy */
        const fgw_u32 sA = sbase + s * STAGE_BYTES + row0 * 128, sB = sbase + s * STAGE_BYTES + @PA@ * A_BYTES;
        if (BLOCK_ACC) {
            /* a fresh accumulator per chunk, drained and added in fp32 */
            fence_all(tmp);
            fgw_wgmma_fence();
            issue_chunk(tmp, sA, sB, 1);
            fgw_wgmma_commit();
            fgw_wgmma_wait<0>();
            fence_all(tmp);
#pragma unroll
            for (int mt = 0; mt < WGMT; ++mt)
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) acc[mt][i] = kc == @KC0@ ? tmp[mt][i] : acc[mt][i] + tmp[mt][i];
            fence_all(acc);
            if (lane == 0) @RELEASE@(bar_empty + 8 * s);
        } else {
            /* one accumulator; one chunk's wgmma group kept in flight */
            fence_all(acc);
            fgw_wgmma_fence();
            issue_chunk(acc, sA, sB, kc == @KC0@);
            fgw_wgmma_commit();
            fence_all(acc);
            fgw_wgmma_wait<1>();
            if (kc > @KC0@ && lane == 0) @RELEASE@(bar_empty + 8 * ((it - 1) % STAGES));
        }
    }
    if (!BLOCK_ACC) {
        fgw_wgmma_wait<0>();
        fence_all(acc);
        if (lane == 0) @RELEASE@(bar_empty + 8 * ((it0 + @KC1@ - 1) % STAGES));
    }
}
]]

M.engine = engine_tiles .. M.producer_cp_async .. engine_consumers

-- Block accumulation in ping-pong (fg_wgmma_tiling.ping_pong; TMA producers only, so no
-- proxy fence after the full wait): spliced at @PINGPONG@, before the one-accumulator loop,
-- which it returns ahead of.
M.ping_pong_loop = [[
    if constexpr (BLOCK_ACC) {
        /* Two chunk accumulators in turn (tmp, tmp2): chunk kc + 1's wgmmas are issued before
         * chunk kc's sum is added to acc, so the tensor cores work while the consumers wait
         * for a chunk and add it (with one, they idled: the wait for the whole group took 37 %
         * of the consumers' stall samples on KB17, bench/NOTES.md v27). The same additions in
         * the same order: the sums are bit for bit those of the one-accumulator loop. At the
         * loop's head exactly one group (chunk kc's, in tmp) is in flight, and every wait is
         * on a path of its own: ptxas serializes the wgmmas where a merge leaves it unsure. */
        float tmp2[WGMT][BN / 2];
        if (@KC1@ <= @KC0@) return;
        int kc = @KC0@;
        issue_at(tmp, it0 + kc, row0, sbase, bar_full);
#pragma unroll 1
        for (; kc + 2 < @KC1@; kc += 2) {
            issue_at(tmp2, it0 + kc + 1, row0, sbase, bar_full);
            fgw_wgmma_wait<1>();
            drain(acc, tmp, kc == @KC0@);
            if (lane == 0) @RELEASE@(bar_empty + 8 * ((it0 + kc) % STAGES));
            issue_at(tmp, it0 + kc + 2, row0, sbase, bar_full);
            fgw_wgmma_wait<1>();
            drain(acc, tmp2, false);
            if (lane == 0) @RELEASE@(bar_empty + 8 * ((it0 + kc + 1) % STAGES));
        }
        if (kc + 1 < @KC1@) {
            issue_at(tmp2, it0 + kc + 1, row0, sbase, bar_full);
            fgw_wgmma_wait<1>();
            drain(acc, tmp, kc == @KC0@);
            if (lane == 0) @RELEASE@(bar_empty + 8 * ((it0 + kc) % STAGES));
            fgw_wgmma_wait<0>();
            drain(acc, tmp2, false);
            if (lane == 0) @RELEASE@(bar_empty + 8 * ((it0 + kc + 1) % STAGES));
        } else {
            fgw_wgmma_wait<0>();
            drain(acc, tmp, kc == @KC0@);
            if (lane == 0) @RELEASE@(bar_empty + 8 * ((it0 + kc) % STAGES));
        }
        return;
    }
]]
-- ... its issue of one chunk (the ring's it-th) into a fresh accumulator, after the full wait,
-- and its drain of a chunk's sum into acc; spliced before mainloop.
M.ping_pong_issue = [[
__device__ __forceinline__ void issue_at(float (&d)[WGMT][BN / 2], int it, int row0, fgw_u32 sbase, fgw_u32 bar_full)
{
    const int s = it % STAGES;
    fgw_mbar_wait(bar_full + 8 * s, (it / STAGES) & 1);
    const fgw_u32 sA = sbase + s * STAGE_BYTES + row0 * 128, sB = sbase + s * STAGE_BYTES + @PA@ * A_BYTES;
    fence_all(d);
    fgw_wgmma_fence();
    issue_chunk(d, sA, sB, 1);
    fgw_wgmma_commit();
}
__device__ __forceinline__ void drain(float (&acc)[WGMT][BN / 2], float (&d)[WGMT][BN / 2], bool first)
{
    fence_all(d);
#pragma unroll
    for (int mt = 0; mt < WGMT; ++mt)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[mt][i] = first ? d[mt][i] : acc[mt][i] + d[mt][i];
    fence_all(acc);
}

]]

-- A by TMA in im2col mode (fg_wgmma_tiling.a_tma 2; bench/hopper-tma.md): the tensor map type
-- and the copies (printed after M.helpers, at file scope: the kernel's parameters are maps).
M.tma_helpers = [[
/* a TMA tensor map (the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned), a kernel
 * parameter by value (const __grid_constant__: the copy's operand is the parameter's address) */
struct __align__(64) fgw_tmap {
    unsigned long long w[16];
};
/* one im2col tensor copy by the TMA unit into the stage at dst (the map's 128-byte swizzle): the
 * map's BM pixels x 128 bytes from the filter base (c, w, h[, d], n) on, each pixel's window
 * shifted by the im2col offsets (a tap's position times the dilation), zero fill outside the
 * input; its bytes (fill included) counted on the barrier at bar */
__device__ __forceinline__ void fgw_tma_im2col4(fgw_u32 dst, const fgw_tmap *map, int c, int w, int h, int n,
                                                unsigned short ow, unsigned short oh, fgw_u32 bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};"
                 ::"r"(dst), "l"((unsigned long long)map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar), "h"(ow), "h"(oh)
                 : "memory");
}
__device__ __forceinline__ void fgw_tma_im2col5(fgw_u32 dst, const fgw_tmap *map, int c, int w, int h, int d, int n,
                                                unsigned short ow, unsigned short oh, unsigned short od, fgw_u32 bar)
{
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5, %6}], [%7], {%8, %9, %10};"
                 ::"r"(dst), "l"((unsigned long long)map), "r"(c), "r"(w), "r"(h), "r"(d), "r"(n), "r"(bar), "h"(ow),
                   "h"(oh), "h"(od)
                 : "memory");
}
/* the map into the TMA unit's descriptor cache ahead of the first copy */
__device__ __forceinline__ void fgw_prefetch_tmap(const fgw_tmap *map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)map) : "memory");
}
]]

-- The copies of a stage's A parts (the producer's @TMACOPY@): a 2D conv's rank-4 map (W, H) or
-- a 3D conv's rank-5 one (W, H, D).
M.tma_copy4 = table.concat({
  "            fgw_tma_im2col4(sA, ta_hi, c0, bw, bh, tl.n, (unsigned short)(kw * DW), (unsigned short)(kh * DH), bar);",
  "            if (@PA@ == 2)",
  "                fgw_tma_im2col4(sA + A_BYTES, ta_lo, c0, bw, bh, tl.n, (unsigned short)(kw * DW), (unsigned short)(kh * DH),",
  "                                bar);",
}, "\n")
M.tma_copy5 = table.concat({
  "            fgw_tma_im2col5(sA, ta_hi, c0, bw, bh, bd, tl.n, (unsigned short)(kw * DW), (unsigned short)(kh * DH),",
  "                            (unsigned short)(kd * DD), bar);",
  "            if (@PA@ == 2)",
  "                fgw_tma_im2col5(sA + A_BYTES, ta_lo, c0, bw, bh, bd, tl.n, (unsigned short)(kw * DW),",
  "                                (unsigned short)(kh * DH), (unsigned short)(kd * DD), bar);",
}, "\n")

-- The producer with A by TMA (fg_wgmma_tiling.a_tma 2), in place of M.producer_cp_async.
M.producer_tma = [[
/* The producer warpgroup with A by TMA in im2col mode (FUSEGEN_WGMMA_A_TMA=2): thread 0 alone
 * fills the ring. Per stage it arms the full barrier with the A parts' bytes, has the TMA unit
 * load each part's chunk with one im2col tensor copy -- BM pixels from the tile's first output
 * pixel on, 128 bytes of one tap's channel block each (CP is a multiple of a chunk, or the conv
 * has one tap and the channels past CP are zero fill: the planner's rule), zero-filled outside
 * the input, in the swizzled layout the cp.async producer stores -- copies the B chunk as ever
 * and arrives once (the barrier counts one arrival). The map walks the output pixels across
 * rows and on into the next sample: a sample's last tile's rows past OPIX hold the next
 * sample's pixels (zeros past the batch), which every epilogue path masks (q < OPIX). */
__device__ __forceinline__ void producer_issue(const fgw_tmap *ta_hi, const fgw_tmap *ta_lo,
                                               const float *__restrict__ wimg, int ntiles, fgw_u32 sbase,
                                               fgw_u32 bar_full, fgw_u32 bar_empty)
{
    const int t = 0; /* the issuing thread */
    fgw_prefetch_tmap(ta_hi);
    if (@PA@ == 2) fgw_prefetch_tmap(ta_lo);
    int it = 0, begin, end;
@UNITS@
        const Tile tl = decode_tile(tile);
        /* the filter base of the tile's first output pixel: (w, h, d) of its window's corner */
        const int od0 = tl.m0 / (OH * OW), rem0 = tl.m0 - od0 * (OH * OW);
        const int oh0 = rem0 / OW, ow0 = rem0 - oh0 * OW;
        const int bw = ow0 * SW - PW, bh = oh0 * SH - PH, bd = od0 * SD - PD;
        (void)bd;
        const float *wtile = wimg + (unsigned long long)((tl.g * NBLK + tl.nb) * KCH) * (B_CHUNK_BYTES / 4);
#pragma unroll 1
        for (int kc = @KC0@; kc < @KC1@; ++kc, ++it) {
            const int s = it % STAGES;
            fgw_mbar_wait(bar_empty + 8 * s, ((it / STAGES) & 1) ^ 1);
            const fgw_u32 sA = sbase + s * STAGE_BYTES, bar = bar_full + 8 * s;
            /* the chunk's tap and the first channel of its block */
            const int tap = kc * @KE@ / CP, c0 = tl.g * CP + (kc * @KE@ - tap * CP);
            const int kd = tap / (KH * KW), kh = (tap / KW) % KH, kw = tap % KW;
            (void)kd;
            /* the A parts' bytes, zero fill included, before the copies and the arrival */
            fgw_mbar_expect_tx(bar, @PA@ * A_BYTES);
@TMACOPY@
@BCOPY@
            fgw_mbar_arrive(bar); /* the stage's one arrival */
        }
    }
@PTAIL@
}
__device__ __forceinline__ void producer(const fgw_tmap *ta_hi, const fgw_tmap *ta_lo, const float *__restrict__ wimg,
                                         int ntiles, fgw_u32 sbase, fgw_u32 bar_full, fgw_u32 bar_empty)
{
    if (threadIdx.x == 0) producer_issue(ta_hi, ta_lo, wimg, ntiles, sbase, bar_full, bar_empty);
    __syncwarp(); /* warp 0 converged again (a pair's cluster barrier is .aligned) */
}
]]

-- In a packing pass's loop over the input elements of 32 pixels (i), the element's pixel pp,
-- channel ch (group gr, channel cg within it); returns its index in the sample. A
-- channels-last input is channels-innermost already: consecutive threads read consecutive
-- channels of a pixel (nearly a copy; the groups' padding is added by the pass).
local function pack_read_index(c, g)
  if g.cl then
    c:line("const int pp = i / (GROUPS * CIN_G), ch = i % (GROUPS * CIN_G), gr = ch / CIN_G, cg = ch % CIN_G;")
    return "(unsigned long long)(pix0 + pp) * (GROUPS * CIN_G) + ch"
  end
  c:line("const int ch = i / 32, pp = i % 32, gr = ch / CIN_G, cg = ch % CIN_G;")
  return "(unsigned long long)ch * IPIX + pix0 + pp"
end

-- The prologue (prologue.lua) on the input element `load` of pixel pix0 + pp, into v: the
-- packed hi/lo hold the normalized input (the conv's padding is the producer's zero fill, after it);
-- `into` names the float that receives it (v when nil)
local function pack_apply_prologue(c, layer, plan, pass, names, g, load, into)
  c:line("const int p = pix0 + pp;")
  c:line("(void)p; /* the ops' spatial coordinates, when one reads them */")
  local coords = { [1] = "ch" }
  if g.sp == 3 then
    coords[2], coords[3], coords[4] = "p / " .. g.I[2] * g.I[3], "(p / " .. g.I[3] .. ") % " .. g.I[2], "p % " .. g.I[3]
  else
    coords[2], coords[3] = "p / " .. g.I[3], "p % " .. g.I[3]
  end
  c:line("const float xv = %s;", load)
  c:line("%s = %s;", into or "v", prologue.apply(c, layer, plan, pass, names, "xv", coords, layer.n_pro))
end

-- The store of a packed fp32 value (the tile's element `value`) at element `at` of the packed
-- operands hi (and lo): TF32 hi = tf32(v), lo = tf32(v - hi); half ones (a prologue's result in
-- the dtype) hi rounded to nearest even, lo the rounded remainder (v - hi is exact in fp32), as
-- the weights' split
local function pack_store_split(c, half, hi, lo, value, at)
  if half then
    c:line("const float v = %s;", value)
    c:line("const fg_io h = fg_io_round(v);")
    c:line("((fg_io *)%s)[%s] = h;", hi, at)
    if lo then c:line("((fg_io *)%s)[%s] = fg_io_round(v - fg_io_load(&h));", lo, at) end
  else
    c:line("const float v = %s, h = fgw_tf32(v);", value)
    c:line("%s[%s] = h;", hi, at)
    if lo then c:line("%s[%s] = fgw_tf32(v - h);", lo, at) end
  end
end

-- The packed input's parts as a pack kernel's comment names them: the dtype's hi and lo or one
-- rounded part (half operands), TF32 hi (and lo).
local function packed_parts(w, half, lo)
  if half then return M.operand_ptx(w) .. (lo and " hi and lo (v - hi)" or " rounded to nearest") end
  return "TF32 hi" .. (lo and " and lo" or "")
end

-- The input of an fp32 layer, channels-innermost: [N][D][H][W][groups][CP] hi (and lo), the
-- channels of a group padded with zeros; 32 pixels a block through shared memory. (A half
-- layer's operands are its dtype: render_pack_input_half.)
function M.render_pack_input(layer, plan, pass, names, signature)
  local w = M.tiling_of(plan)
  local g = conv_t.geometry(layer)
  local half = M.half(w)
  -- by rows first: the planner's launch (planner.c pack_input_launch) is the rows kernel's
  -- wherever it set pack_vec, channel blocks included (blockIdx.y; no shared tile to fit)
  if w.pack_vec > 0 then return M.render_pack_input_rows(layer, plan, pass, names, signature) end
  if w.pack_xb < w.xc then return M.render_pack_input_blocked(layer, plan, pass, names, signature) end
  if half and not prologue.active(layer) then return M.render_pack_input_half(layer, plan, pass, names, signature) end
  local c = lib.code()
  local hi, lo = names.buffer[w.packed_hi], w.packed_lo >= 0 and names.buffer[w.packed_lo] or nil
  if half then
    c:line("/* pass %d: the input through the prologue, channels-innermost [N][%d][%d][%d][%d groups][%d], %s %s */",
      pass.index, g.I[1], g.I[2], g.I[3], g.groups, w.cp, M.operand_ptx(w),
      lo and "hi and lo (v - hi)" or "rounded to nearest")
  else
    c:line("/* pass %d: the input channels-innermost [N][%d][%d][%d][%d groups][%d], TF32 hi%s */", pass.index, g.I[1],
      g.I[2], g.I[3], g.groups, w.cp, lo and " and lo" or "")
  end
  c:line("extern \"C\" __global__ void __launch_bounds__(256) %s(%s)", pass.kernel, signature)
  c:open("{")
  c:line("using namespace fgw;")
  c:line("__shared__ float tile[32 * (XC + 1)];")
  c:line("const int n = batch_base + (int)blockIdx.z, pix0 = (int)blockIdx.x * 32, t = (int)threadIdx.x;")
  c:line("(void)batch;")
  c:line("const %s *xs = %s + (unsigned long long)n * %d;", g.io, names.input, g.in_sample)
  c:open("for (int i = t; i < GROUPS * CIN_G * 32; i += 256) {")
  local at = pack_read_index(c, g)
  -- a bf16/fp16 input comes here only with a prologue, widened exactly where loaded
  local load = g.half and "fg_io_load(xs + " .. at .. ")" or "xs[" .. at .. "]"
  if prologue.active(layer) then
    -- the prologue (prologue.lua) applied to every input element: the packed hi/lo hold the
    -- normalized input; the conv's padding is the producer's zero fill, after it
    c:line("float v = 0.0f;")
    c:open("if (pix0 + pp < IPIX) {")
    pack_apply_prologue(c, layer, plan, pass, names, g, load)
    c:close()
    c:line("tile[pp * (XC + 1) + gr * CP + cg] = v;")
  else
    c:line("tile[pp * (XC + 1) + gr * CP + cg] = pix0 + pp < IPIX ? %s : 0.0f;", load)
  end
  c:close()
  if w.cp ~= g.cin_g then
    c:line("/* the padding channels are zeros */")
    c:open("for (int i = t; i < 32 * GROUPS * (CP - CIN_G); i += 256) {")
    c:line("const int pp = i / (GROUPS * (CP - CIN_G)), r = i % (GROUPS * (CP - CIN_G));")
    c:line("tile[pp * (XC + 1) + (r / (CP - CIN_G)) * CP + CIN_G + r % (CP - CIN_G)] = 0.0f;")
    c:close()
  end
  c:line("__syncthreads();")
  c:line("const int npix = IPIX - pix0 < 32 ? IPIX - pix0 : 32;")
  c:line("const unsigned long long base = ((unsigned long long)n * IPIX + pix0) * XC;")
  c:open("for (int i = t; i < npix * XC; i += 256) {")
  pack_store_split(c, half, hi, lo, "tile[(i / XC) * (XC + 1) + i % XC]", "base + i")
  c:close()
  c:close()
  return c
end

-- The input pack by pixel rows (the planner's fg_wgmma_tiling.pack_vec: a channels-last input in
-- its packed layout already, the groups unpadded): thread t keeps the V consecutive channels
-- (16 bytes) (t % U) * V.. of the block's XB and reads them from every (T / U)-th of the block's
-- ROWS pixels (planner.c pack_input_launch), applies the prologue to each, splits them (TF32 hi
-- and lo, or the dtype's hi and lo, or one part) and stores them as 16-byte vectors at the same
-- place of the packed row. A thread's channels never change, so what the prologue reads per
-- channel is loop-invariant (loaded once). An input not 16-byte aligned (a view) is read an
-- element at a time.
function M.render_pack_input_rows(layer, plan, pass, names, signature)
  local w = M.tiling_of(plan)
  local g = conv_t.geometry(layer)
  local half = M.half(w)
  local V = w.pack_vec
  local L = pass.launch
  local U = w.pack_xb // V
  local hi, lo = names.buffer[w.packed_hi], w.packed_lo >= 0 and names.buffer[w.packed_lo] or nil
  local part = half and "fg_io" or "float"
  local c = lib.code()
  c:line("/* pass %d: the input%s channels-innermost [N][%d][%d][%d][%d], the input's own layout (channels last, no padding channels), %s, %d channels (16 bytes) a thread at a time, %d pixels a block */",
    pass.index, prologue.active(layer) and " through the prologue," or "", g.I[1], g.I[2], g.I[3], w.xc,
    packed_parts(w, half, lo), V, L.row_pixels)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", L.block, pass.kernel, signature)
  c:open("{")
  c:line("using namespace fgw;")
  c:line("constexpr int XB = %d, V = %d, U = %d, SLOTS = %d; /* packed channels a block, a thread's vector, vectors and pixels at a time */",
    w.pack_xb, V, U, L.block // U)
  c:line("const int n = batch_base + (int)blockIdx.z, pix0 = (int)blockIdx.x * %d, t = (int)threadIdx.x;", L.row_pixels)
  c:line("const int ch0 = (int)blockIdx.y * XB + (t % U) * V, slot = t / U; /* this thread's first channel, its pixel in each step */")
  c:line("(void)batch;")
  c:line("const %s *xs = %s + (unsigned long long)n * %d;", g.io, names.input, g.in_sample)
  c:line("const bool aligned = ((unsigned long long)xs & 15) == 0;")
  -- every pixel's load first (clamped to a valid pixel and channel), then the prologue and
  -- the stores of those inside: loads behind a guard each, between the stores, went out one
  -- at a time (bench/NOTES.md v33); the statistics finalized in the block (if so) while the
  -- loads are in flight
  c:line("const int chl = ch0 < XC ? ch0 : XC - V; /* a thread past the last channel block's channels loads its last vector */")
  c:line("__align__(16) %s raw[%d][V];", g.io, L.elems)
  c:line("#pragma unroll")
  c:open("for (int it = 0; it < %d; ++it) {", L.elems)
  c:line("const int pl = min(pix0 + it * SLOTS + slot, IPIX - 1);")
  c:line("const unsigned long long at = (unsigned long long)pl * XC + chl;")
  c:open("if (aligned) {")
  c:line("*(uint4 *)raw[it] = *(const uint4 *)(xs + at);")
  c:close("} else {")
  c.depth = c.depth + 1
  c:line("#pragma unroll")
  c:line("for (int e = 0; e < V; ++e) raw[it][e] = xs[at + e];")
  c:close()
  c:close()
  if prologue.block_finalizes(plan, pass) then prologue.finalize_in_block(c, layer, plan, names, L.block) end
  -- element e (a C expression) of the thread's vector of step it, widened
  local function raw_at(e) return g.half and string.format("fg_io_widen(raw[it][%s])", e) or string.format("raw[it][%s]", e) end
  if prologue.pixel_stats(plan, pass) then prologue.pixel_statistics(c, layer, plan, L.elems, L.block // U, U, V, raw_at) end
  c:line("if (ch0 >= XC) return; /* past the last channel block's channels */")
  c:line("#pragma unroll")
  c:open("for (int it = 0; it < %d; ++it) {", L.elems)
  c:line("const int pp = it * SLOTS + slot;")
  c:line("if (pix0 + pp >= IPIX) break;")
  c:line("const unsigned long long at = (unsigned long long)(pix0 + pp) * XC + ch0;")
  c:line("__align__(16) %s hv[V];", part)
  if lo then c:line("__align__(16) %s lv[V];", part) end
  c:line("#pragma unroll")
  c:open("for (int e = 0; e < V; ++e) {")
  local load = raw_at("e")
  if prologue.active(layer) then
    c:line("const int ch = ch0 + e;")
    c:line("(void)ch; /* the ops' channel, when one reads it */")
    c:line("float y;")
    pack_apply_prologue(c, layer, plan, pass, names, g, load, "y")
  else
    c:line("const float y = %s;", load)
  end
  pack_store_split(c, half, "hv", lo and "lv", "y", "e")
  c:close()
  -- indexed as uint4s: through a pointer to the part's type plus an offset, NVCC stores the
  -- vector 4 bytes at a time (it infers that pointer's alignment, not the cast's)
  c:line("const unsigned long long to = ((unsigned long long)n * IPIX * XC + at) / V; /* the same place of the packed row, in vectors */")
  c:line("((uint4 *)%s)[to] = *(const uint4 *)hv;", hi)
  if lo then c:line("((uint4 *)%s)[to] = *(const uint4 *)lv;", lo) end
  c:close()
  c:close()
  return c
end

-- A half input channels-innermost as it is (its 16 bits: wgmma reads them), [N][D][H][W][groups]
-- [CP], the channels of a group padded with zeros; 32 pixels a block through shared memory.
function M.render_pack_input_half(layer, plan, pass, names, signature)
  local w = M.tiling_of(plan)
  local g = conv_t.geometry(layer)
  local c = lib.code()
  c:line("/* pass %d: the input channels-innermost [N][%d][%d][%d][%d groups][%d], as it is (%s) */", pass.index, g.I[1],
    g.I[2], g.I[3], g.groups, w.cp, M.operand_ptx(w))
  c:line("extern \"C\" __global__ void __launch_bounds__(256) %s(%s)", pass.kernel, signature)
  c:open("{")
  c:line("using namespace fgw;")
  c:line("__shared__ fg_io tile[32 * (XC + 1)];")
  c:line("const int n = batch_base + (int)blockIdx.z, pix0 = (int)blockIdx.x * 32, t = (int)threadIdx.x;")
  c:line("(void)batch;")
  c:line("const fg_io *xs = %s + (unsigned long long)n * %d;", names.input, g.in_sample)
  c:line("/* zeros first: the padding channels and the pixels past the input */")
  c:line("for (int i = t; i < 32 * (XC + 1); i += 256) tile[i] = 0;")
  c:line("__syncthreads();")
  c:open("for (int i = t; i < GROUPS * CIN_G * 32; i += 256) {")
  c:line("if (pix0 + pp < IPIX) tile[pp * (XC + 1) + gr * CP + cg] = xs[%s];", pack_read_index(c, g))
  c:close()
  c:line("__syncthreads();")
  c:line("const int npix = IPIX - pix0 < 32 ? IPIX - pix0 : 32;")
  c:line("const unsigned long long base = ((unsigned long long)n * IPIX + pix0) * XC;")
  c:line("fg_io *out = (fg_io *)%s;", names.buffer[w.packed_hi])
  c:line("for (int i = t; i < npix * XC; i += 256) out[base + i] = tile[(i / XC) * (XC + 1) + i % XC];")
  c:close()
  return c
end

-- The packing of an input too wide for one block's tile (fg_wgmma_tiling.pack_xb < xc: 384 TF32
-- channels a pixel and up): each block transposes XB of the XC packed channels (blockIdx.y
-- picks which) of its 32 pixels, the zero padding channels of a group included, then writes
-- them into their place of the pixel's row: the same packed operands as the whole-row kernels
-- (render_pack_input, render_pack_input_half) write, in pieces of XB channels.
function M.render_pack_input_blocked(layer, plan, pass, names, signature)
  local w = M.tiling_of(plan)
  local g = conv_t.geometry(layer)
  local half = M.half(w)
  local pro = prologue.active(layer)
  local raw = half and not pro -- a half input packed as it is
  local hi, lo = names.buffer[w.packed_hi], w.packed_lo >= 0 and names.buffer[w.packed_lo] or nil
  local c = lib.code()
  c:line("/* pass %d: the input channels-innermost [N][%d][%d][%d][%d groups][%d], %s, %d of the %d channels of a pixel a block */",
    pass.index, g.I[1], g.I[2], g.I[3], g.groups, w.cp,
    raw and "as it is (" .. M.operand_ptx(w) .. ")" or packed_parts(w, half, lo), w.pack_xb, w.xc)
  c:line("extern \"C\" __global__ void __launch_bounds__(256) %s(%s)", pass.kernel, signature)
  c:open("{")
  c:line("using namespace fgw;")
  c:line("constexpr int XB = %d; /* packed channels a block */", w.pack_xb)
  c:line("__shared__ %s tile[32 * (XB + 1)];", raw and "fg_io" or "float")
  c:line("const int n = batch_base + (int)blockIdx.z, pix0 = (int)blockIdx.x * 32, t = (int)threadIdx.x;")
  c:line("const int x0 = (int)blockIdx.y * XB, nx = XC - x0 < XB ? XC - x0 : XB; /* this block's packed channels */")
  c:line("(void)batch;")
  c:line("const %s *xs = %s + (unsigned long long)n * %d;", g.io, names.input, g.in_sample)
  c:open("for (int i = t; i < nx * 32; i += 256) {")
  -- the packed channel x = group * CP + channel in the group; a padding channel (>= CIN_G) is 0
  if g.cl then
    c:line("const int pp = i / nx, x = x0 + i % nx, gr = x / CP, cg = x % CP, ch = gr * CIN_G + cg;")
  else
    c:line("const int x = x0 + i / 32, pp = i % 32, gr = x / CP, cg = x % CP, ch = gr * CIN_G + cg;")
  end
  local at = g.cl and "(unsigned long long)(pix0 + pp) * (GROUPS * CIN_G) + ch" or "(unsigned long long)ch * IPIX + pix0 + pp"
  c:line("%s v = 0;", raw and "fg_io" or "float")
  c:open("if (cg < CIN_G && pix0 + pp < IPIX) {")
  if pro then
    pack_apply_prologue(c, layer, plan, pass, names, g, g.half and "fg_io_load(xs + " .. at .. ")" or "xs[" .. at .. "]")
  else
    c:line("v = xs[%s];", at)
  end
  c:close()
  c:line("tile[pp * (XB + 1) + x - x0] = v;")
  c:close()
  c:line("__syncthreads();")
  c:line("const int npix = IPIX - pix0 < 32 ? IPIX - pix0 : 32;")
  c:line("const unsigned long long base = ((unsigned long long)n * IPIX + pix0) * XC + x0;")
  c:open("for (int i = t; i < npix * nx; i += 256) {")
  c:line("const int pp = i / nx, xx = i % nx;")
  c:line("const unsigned long long at = base + (unsigned long long)pp * XC + xx;")
  if raw then
    c:line("((fg_io *)%s)[at] = tile[pp * (XB + 1) + xx];", hi)
  else
    pack_store_split(c, half, hi, lo, "tile[pp * (XB + 1) + xx]", "at")
  end
  c:close()
  c:close()
  return c
end

-- The weights as the B tiles' shared-memory images [groups][NBLK][KCH][hi, lo][BN][128 bytes],
-- the 128-byte swizzle applied (16-byte unit u of row r at u ^ (r % 8)), K = (tap, channel) as
-- the A rows have it. TF32 operands: 32 floats a row, w split into tf32 hi and lo (3xTF32) or
-- rounded once. Half operands (a bf16/fp16 layer): 64 elements of the dtype a row; fp32
-- precision splits each fp32 weight w into hi = dtype(w) and lo = dtype(w - hi), both rounded
-- to nearest (w - hi is exact in fp32), and the conv's products x.w_lo + x.w_hi carry w to
-- within |w - hi - lo| <= half an ulp of lo: for bf16 2^-16 |w| (measured 7.6e-6), for fp16
-- 2^-22 |w| while lo is normal (|w| >= ~2^-3) and 2^-25 absolute below (lo subnormal),
-- asserted against float64 on the CPU (tests/test_half_split.c; docs/design.md has the
-- numbers). Why fp16's lo is not rescaled (the subnormal concern): an fp16 lo scaled by 2^11
-- into its own accumulator would keep 2^-22 |w| down to |w| ~ 2^-13, at the price of a third
-- accumulator array (64 more registers at 128 channels: the tiling would halve its channels);
-- an absolute 2^-25 (3e-8) per weight is already below what the fp32 bar (1e-4) and the
-- output's rounding (2^-11) can see, so the lo products share hi's accumulator. tf32
-- precision: one part, w rounded to the dtype.
function M.render_pack_weights(layer, plan, pass, names, signature)
  local w = M.tiling_of(plan)
  local g = conv_t.geometry(layer)
  local half = M.half(w)
  local c = lib.code()
  local ue = half and 8 or 4 -- elements a 16-byte unit
  local total = w.w_elems -- the planner's, which sizes the launch: a thread an element
  if half then
    c:line("/* pass %d: the weights as the wgmma B tiles' shared-memory images (%d %s elements%s) */", pass.index, total,
      M.operand_ptx(w), w.parts == 2 and ": hi and lo" or "")
  else
    c:line("/* pass %d: the weights as the wgmma B tiles' shared-memory images (%d floats) */", pass.index, total)
  end
  c:line("extern \"C\" __global__ void __launch_bounds__(256) %s(%s)", pass.kernel, signature)
  c:open("{")
  c:line("using namespace fgw;")
  c:line("(void)batch; (void)batch_base;")
  c:line("const int idx = (int)(blockIdx.x * blockDim.x + threadIdx.x);")
  c:line("if (idx >= %d) return;", total)
  c:line("const int e = idx & %d, pu = (idx >> %d) & 7; /* the element, the physical 16-byte unit */", ue - 1,
    half and 3 or 2)
  c:line("int r = idx >> %d;", half and 6 or 5)
  c:line("const int row = r % BN; r /= BN;")
  c:line("const int part = r %% %s; r /= %s;", half and "PB" or "P", half and "PB" or "P")
  c:line("const int kc = r % KCH; r /= KCH;")
  c:line("const int nb = r % NBLK, gr = r / NBLK;")
  c:line("const int k = kc * %d + (pu ^ (row & 7)) * %d + e; /* the logical K index */", 8 * ue, ue)
  c:line("const int tap = k / CP, ci = k % CP, co = nb * BN + row;")
  c:line("float v = 0.0f;")
  c:line("if (tap < TAPS && ci < CIN_G && co < COUT_G) v = %s[((unsigned long long)(gr * COUT_G + co) * CIN_G + ci) * TAPS + tap];",
    names.param[g.conv.weight_param])
  if not half then
    c:line("const float h = fgw_tf32(v);")
    c:line("%s[idx] = part == 0 ? h : fgw_tf32(v - h);", names.buffer[w.packed_w])
  elseif w.parts == 2 then
    c:line("const fg_io h = fg_io_round(v); /* w's hi; lo is the rounded remainder */")
    c:line("((fg_io *)%s)[idx] = part == 0 ? h : fg_io_round(v - fg_io_load(&h));", names.buffer[w.packed_w])
  else
    c:line("(void)part;")
    c:line("((fg_io *)%s)[idx] = fg_io_round(v); /* one part: w rounded to nearest */", names.buffer[w.packed_w])
  end
  c:close()
  return c
end

-- A tile's statistics partials of slot q (the end of the epilogue's iteration over q, th.slot_end)
-- into s_stat, in fp64, where the next flush finds them. Staged: a lane holds its channel of
-- chunk q alone. The fragments' mapping: the 8 lanes holding one channel (lanes l, l ^ 4, ...)
-- add up first, their shifted partials moved to one shift (lane l % 4's: the warp's first row,
-- the lowest pixel, which exists wherever any of the warp's do) so that their float sums
-- stay small against the spread; their count is the warp's valid rows (wrows, once a tile:
-- shuffling each slot's count cost SD's fp32 block 2 %). The sums are read, added and written
-- back as volatile: left
-- free, ptxas hoisted every slot's loads and fp64 arithmetic together (kb85: 135 -> 168
-- registers and spills; 128 as volatile). Measured: layers feeding statistics in the
-- fragments' mapping run 5-8 % slower than with float sums of x and x^2, the staged mapping
-- as fast (bench/NOTES.md v38, with the two alternatives tried).
local function tile_partials(c, plan, pass, ev, w, q, staged)
  if not staged then c:line("const unsigned full = 0xffffffffu;") end
  for i = 0, pass.feeds.n - 1 do
    local a = pass.feeds[i]
    local shifted = feed.shifted(plan, a)
    local function at(name) return string.format("%s%d[%s]", name, a, q) end
    if staged then
      c:open("if (%d * %s + lane < BN) {", w.epi_cols, q)
      c:line("volatile double *d = s_stat + ((%d * 8 + swarp) * BN + %d * %s + lane) * 2;", i, w.epi_cols, q)
      local s, t = "(double)" .. at("fs"), "(double)" .. at("fq")
      if shifted then s, t = feed.unshift(c, ev, at("fs"), at("fq"), at("fo"), at("fn")) end
      c:line("d[0] += %s;", s)
      c:line("d[1] += %s;", t)
      c:close()
    else
      c:open("{")
      c:line("float s = %s, t = %s;", at("fs"), at("fq"))
      local lanes = { "s", "t" }
      if shifted then
        c:line("const float m = %s;", at("fn"))
        c:line("const float o = __shfl_sync(full, %s, lane & 3), dd = %s - o;", at("fo"), at("fo"))
        c:line("t += dd * (2.0f * s + m * dd);")
        c:line("s += m * dd;")
      end
      for _, o in ipairs({ 4, 8, 16 }) do
        local parts = {}
        for _, v in ipairs(lanes) do parts[#parts + 1] = string.format("%s += __shfl_xor_sync(full, %s, %d);", v, v, o) end
        c:line("%s", table.concat(parts, " "))
      end
      c:open("if ((lane >> 2) == 0) {")
      c:line("volatile double *d = s_stat + ((%d * 8 + swarp) * BN + 8 * (%s >> 1) + 2 * lane + (%s & 1)) * 2;", i, q, q)
      local s, t = "(double)s", "(double)t"
      if shifted then s, t = feed.unshift(c, ev, "s", "t", "o", "wrows") end
      c:line("d[0] += %s;", s)
      c:line("d[1] += %s;", t)
      c:close()
      c:close()
    end
  end
end

-- The epilogue of a conv pass that reduces over the channels (pass.chan_reduce: planner.c's
-- wgmma_channel_reduction). The tile holds every channel of its pixels: pixel (mt, h) of a
-- thread is in slots q = 0..BN/4-1 of its registers (th.value) and of the 3 other lanes of its
-- quad (lane & 3 picks channels 2 (lane & 3) + 8 j + e). Each element's chain value (bias,
-- parameters, elementwise ops: the evaluator, as conv.lua's epilogue) is reduced in the thread,
-- then over the quad with __shfl_xor (lanes 1 and 2 apart); the two consumer warpgroups hold
-- different pixels, so nothing crosses them. Max, min, sum and mean use the registry's step
-- (and final); logsumexp takes the max first, then the sum of exp(x - max), the chain values
-- kept in place of the accumulators they came from. One lane of the quad per pixel applies the
-- ops after the reduction and stores the output.
local function reduce_epilogue(c, g, layer, plan, pass, names, ev, w, th)
  local r = pass.chan_reduce
  local red = layer.ops[r]
  local lse = red.kind == "LOGSUMEXP"
  local conv, O = g.conv, g.O
  local opix = O[1] * O[2] * O[3]
  local ninf = lib.flit(-math.huge)
  local coords = conv_t.output_coords(g, true)
  local pixels = {} -- the thread's pixels (mt, h) and the names of their reductions
  for mt = 0, w.wgmt - 1 do
    for h = 0, 1 do pixels[#pixels + 1] = { mt = mt, h = h, acc = string.format("rd%d_%d", mt, h) } end
  end
  local function pixel_coords(p)
    c:line("const int mt = %d, h = %d;", p.mt, p.h)
    conv_t.declare_output_coords(c, g, th)
  end
  c:line("/* v%d: %s over the %d channels, in the epilogue */", r, red.spec_name, g.cout_g)
  for _, p in ipairs(pixels) do
    if lse then
      c:line("float %s_m = %s, %s_s = 0.0f;", p.acc, ninf, p.acc)
    else
      lib.emit(c, lib.fill(red.reduce.init, red, { acc = p.acc }))
    end
  end
  -- each element's chain value, reduced in the thread (logsumexp: its max, the value kept)
  local function body(checked)
    c:line("#pragma unroll")
    c:open("for (int q = 0; q < %d; ++q) {", w.bn // 4)
    c:line("const int c = g * %d + (%s); /* the channel of the outputs below */", g.cout_g, th.co)
    ev:set_hoist({ at = #c.lines + 1, depth = c.depth, channel = "c",
      guard = string.format("c < %d", g.cout_g * g.groups) })
    for _, p in ipairs(pixels) do
      c:open("{")
      c:line("const int co = %s;", th.co)
      pixel_coords(p)
      local valid = {}
      if w.bn ~= g.cout_g then valid[#valid + 1] = string.format("co < %d", g.cout_g) end
      if checked then valid[#valid + 1] = string.format("px < %d", opix) end
      c:open(#valid > 0 and string.format("if (%s) {", table.concat(valid, " && ")) or "{")
      conv_t.open_conv_value(c, conv, names, ev, th.value, coords)
      local v = ev:eval(r - 1, coords)
      if lse then
        c:line("%s = %s;", th.value, v)
        c:line("if (%s > %s_m) %s_m = %s;", v, p.acc, p.acc, v)
      else
        lib.emit(c, lib.fill(red.reduce.step, red, { acc = p.acc, x = v }))
      end
      ev:pop_scope()
      if lse and #valid > 0 then
        c:close("} else {")
        c.depth = c.depth + 1
        c:line("%s = %s; /* no element: adds nothing */", th.value, ninf)
      end
      c:close()
      c:close()
    end
    c:close()
    ev:set_hoist(nil)
  end
  c:open("if (pm0 + %d <= %d) { /* every pixel of this thread exists */", 64 * w.wgmt, opix)
  body(false)
  c:close("} else {")
  c.depth = c.depth + 1
  body(true)
  c:close()
  -- over the quad: the lanes 1 and 2 apart hold the pixel's other channels
  local function quad(combine)
    for _, p in ipairs(pixels) do
      for _, d in ipairs({ 1, 2 }) do combine(p, d) end
    end
  end
  if lse then
    quad(function(p, d)
      c:line("{ const float o = __shfl_xor_sync(0xffffffffu, %s_m, %d); if (o > %s_m) %s_m = o; }", p.acc, d, p.acc, p.acc)
    end)
    c:line("#pragma unroll")
    c:open("for (int q = 0; q < %d; ++q) {", w.bn // 4)
    for _, p in ipairs(pixels) do
      c:open("{")
      c:line("const int mt = %d, h = %d;", p.mt, p.h)
      c:line("const float x = %s;", th.value)
      c:line("if (x > %s) %s_s += x == %s_m ? 1.0f : expf(x - %s_m);", ninf, p.acc, p.acc, p.acc)
      c:close()
    end
    c:close()
    quad(function(p, d)
      c:line("%s_s += __shfl_xor_sync(0xffffffffu, %s_s, %d);", p.acc, p.acc, d)
    end)
  else
    quad(function(p, d)
      c:open("{")
      c:line("const float o = __shfl_xor_sync(0xffffffffu, %s, %d);", p.acc, d)
      lib.emit(c, lib.fill(red.reduce.step, red, { acc = p.acc, x = "o" }))
      c:close()
    end)
  end
  -- the reduced value and the ops after it: pixel i by lane i % 4 of the quad
  local oc = {}
  if red.keepdim then oc[1] = "0" end
  for i = 2, #coords do oc[#oc + 1] = coords[i] end
  local dshape = layer.ops[pass.last].out_shape
  for i, p in ipairs(pixels) do
    c:open("{")
    pixel_coords(p)
    c:open("if ((lane & 3) == %d && px < %d) {", (i - 1) % 4, opix)
    local vr = ev:fresh("v" .. r .. "_")
    c:line("const float %s = %s;", vr, lib.fill(red.reduce.final, red, { acc = p.acc, count = lib.flit(g.cout_g) }))
    ev:push_scope()
    ev:remember(r, oc, vr)
    local v = ev:eval(pass.last, oc)
    c:line("%s[(fg_u64)n * %d + %s] = %s;", names.output, dshape.sample, lib.lin(dshape, oc), lib.io_store(layer, v))
    ev:pop_scope()
    c:close()
    c:close()
  end
end

-- The conv pass: a persistent block of a producer and two consumer warpgroups; the consumers
-- run the fused epilogue (conv.lua's) on their accumulators tile by tile.
function M.render(layer, plan, pass, names, signature)
  local g = conv_t.geometry(layer)
  local w = M.tiling_of(plan)
  local c = lib.code()
  local conv = g.conv
  c:line("/* pass %d: conv%dd %d->%d (groups %d) on Hopper tensor cores (%s wgmma), kernel %dx%dx%d, stride %dx%dx%d,",
    pass.index, g.sp, conv.in_shape.dim[1], conv.out_channels, g.groups,
    M.half(w) and (M.operand_ptx(w) .. (w.a_parts == 2 and " x_lo.w_hi + x_hi.w_lo + x_hi.w_hi" or
      w.parts == 2 and " x.w_lo + x.w_hi" or "")) or w.parts == 2 and "3xTF32" or "TF32",
    g.K[1],
    g.K[2], g.K[3], g.S[1], g.S[2], g.S[3])
  c:line(" * padding %dx%dx%d, dilation %dx%dx%d; tiles of %d pixels x %d channels, a ring of %d stages; ops v0..v%d fused */",
    g.P[1], g.P[2], g.P[3], g.Dl[1], g.Dl[2], g.Dl[3], w.bm, w.bn, w.stages, pass.last)
  local pair = w.multicast == 2
  c:line("extern \"C\" __global__ void __launch_bounds__(384, %d) %s%s(%s)", w.ctas_per_sm,
    pair and "__cluster_dims__(2, 1, 1) " or "", pass.kernel, signature)
  c:open("{")
  c:line("using namespace fgw;")
  c:line("extern __shared__ __align__(1024) unsigned char fgw_smem[];")
  c:line("const fgw_u32 sbase = (fgw_smem_addr(fgw_smem) + 1023u) & ~1023u; /* the swizzle's alignment */")
  c:line("const fgw_u32 bar_full = sbase + BAR_OFFSET, bar_empty = bar_full + 8 * STAGES;")
  if w.alternate == 1 then -- after the ring's barriers and their slack (planner.c conv_tiling's smem_bytes)
    c:line("const fgw_u32 bar_turn = bar_empty + 8 * STAGES + 16; /* [cw]: warpgroup cw's main loops ended */")
  end
  if w.flat then -- the batch's pixels flattened (planner.h, fg_wgmma_tiles)
    c:line("const int ntiles = (int)(((long long)batch * OPIX + BM - 1) / BM) * (NBLK * GROUPS);")
  else
    c:line("const int ntiles = batch * (M_TILES * NBLK * GROUPS);")
  end
  c:line("(void)batch_base;")
  c:open("if (threadIdx.x == 0) {")
  c:open("for (int s = 0; s < STAGES; ++s) {")
  if w.a_tma == 2 then
    c:line("fgw_mbar_init(bar_full + 8 * s, 1); /* the TMA producer thread's arrival */")
  else
    c:line("fgw_mbar_init(bar_full + 8 * s, 128); /* one arrival per producer thread */")
  end
  if pair then
    c:line("fgw_mbar_init(bar_empty + 8 * s, 16); /* one per consumer warp of either CTA */")
  elseif w.alternate == 1 then
    c:line("fgw_mbar_init(bar_empty + 8 * s, 4);  /* one per warp of the consumer warpgroup whose tile it holds */")
  else
    c:line("fgw_mbar_init(bar_empty + 8 * s, 8);  /* one per consumer warp */")
  end
  c:close()
  if w.alternate == 1 then
    c:line("/* the turn barriers: warpgroup cw's arrives when its main loop of a tile has ended, one per warp */")
    c:line("fgw_mbar_init(bar_turn, 4);")
    c:line("fgw_mbar_init(bar_turn + 8, 4);")
  end
  c:line("asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");")
  c:close()
  c:line(pair and "fg_cluster_sync(); /* both CTAs' barriers initialized before either uses the other's */" or
    "__syncthreads();")
  c:line("const int wgi = (int)threadIdx.x >> 7;")
  c:open("if (wgi == 0) {")
  c:line("if constexpr (PRODREG < BASEREG) asm volatile(\"setmaxnreg.dec.sync.aligned.u32 %0;\" ::\"n\"(PRODREG));")
  local lo = w.packed_lo >= 0 and names.buffer[w.packed_lo] or "nullptr"
  if w.a_tma == 2 then
    -- the maps over the packed input parts (kernel parameters: their addresses)
    local mlo = w.packed_lo >= 0 and "&" .. names.tmap[w.packed_lo] or "nullptr"
    c:line("producer(&%s, %s, %s, ntiles, sbase, bar_full, bar_empty);", names.tmap[w.packed_hi], mlo,
      names.buffer[w.packed_w])
  else
    c:line("producer(%s, %s, %s, ntiles, %ssbase, bar_full, bar_empty);", names.buffer[w.packed_hi], lo,
      names.buffer[w.packed_w], w.flat and "batch, " or "")
  end
  if pair then c:line("fg_cluster_sync(); /* no CTA leaves while the other may still write its stages */") end
  c:line("return;")
  c:close()
  c:line("if constexpr (CONSREG > BASEREG) asm volatile(\"setmaxnreg.inc.sync.aligned.u32 %0;\" ::\"n\"(CONSREG));")
  c:line("const int cw = wgi - 1, lane = (int)threadIdx.x & 31, warp = ((int)threadIdx.x >> 5) & 3;")
  if w.alternate == 1 then
    c:line("const int row0 = 0; /* each warpgroup's tiles are its own (fg_wgmma_tiling.alternate) */")
  else
    c:line("const int row0 = 64 * WGMT * cw; /* this warpgroup's rows of every tile */")
  end
  c:line("float acc[WGMT][BN / 2], tmp[WGMT][BN / 2];")
  c:line("(void)tmp; (void)lane;")
  -- the residual's tile in shared memory (planner.h, fg_wgmma_tiling.res_bytes): this warp's
  -- rows of it, copied before each tile's main loop (res_copy), read by the staged epilogue
  local res = pass.staged_epilogue and w.res_bytes > 0 and names.param[w.res_param] or nil
  if res then
    c:line("fg_io *const res_s = (fg_io *)(fgw_smem + (sbase - fgw_smem_addr(fgw_smem)) + %d) + (4 * cw + warp) * (WGMT * 16 * BN);",
      w.res_offset)
    c:line("const bool res_vec = ((unsigned long long)%s & 15) == 0; /* its 16-byte pieces by cp.async */", res)
  end
  c:line("int begin, end;")
  local split = w.split_k > 1
  -- after a unit's decode_tile: its residual rows on their way while the K chunks run; after its
  -- main loop: landed. Every split of a tile copies them, as which one arrives last and runs the
  -- epilogue is known only then: the copies no epilogue reads are L2 hits on the tile the
  -- first brought in (half the bytes of the fp32 partial each split writes anyway), and each
  -- unit waits for its own before the next unit's overwrite them.
  local function res_issue()
    if res then c:line("res_copy(res_s, %s, tl, row0 + 16 * warp, batch, res_vec);", res) end
  end
  local function res_wait()
    if res then c:line("fgw_cp_wait0(); __syncwarp(); /* this warp's residual rows have landed, every lane's */") end
  end
  if split then
    c:line("const int nsplit = splits_for(ntiles);")
    c:line("tile_range(ntiles * nsplit, &begin, &end);")
    c:line("int it0 = 0; /* the ring's chunks before this unit's */")
    c:line("volatile int *split_flag = (volatile int *)(fgw_smem + (sbase - fgw_smem_addr(fgw_smem)) + FLAG_OFFSET);")
  else
    c:line("tile_range(ntiles, &begin, &end);")
  end
  -- Statistics: each tile's partials (per channel slot, in registers) are added up over the
  -- warp's lanes holding the channel and kept in fp64 in shared memory across the tiles of
  -- one sample and channel block; they are fed to the accumulators when those change and at
  -- the end. Feeding every tile from registers (warp merges and atomics per slot) cost as
  -- much as the wgmmas on KB17 (bench/NOTES.md v6). Additive monoids (moments, sums) only;
  -- others feed per tile.
  local ev = expr.new(layer, plan, pass, c, names)
  -- a statistics slot per channel a thread holds: bn / 4 in the fragments' mapping, one in each
  -- 32-channel chunk of the slabs' (a lane a channel; th below)
  local chunks = (w.bn + w.epi_cols - 1) // w.epi_cols
  local slots = feed.conv_slots(layer, plan, pass.feeds, pass.staged_epilogue and chunks or w.bn // 4)
  local additive = pass.feeds.n > 0 and pass.feeds.n <= 2 and w.stat_bytes > 0
  for i = 0, pass.feeds.n - 1 do
    local kind = plan.accums[pass.feeds[i]].kind
    additive = additive and (kind == "moments" or kind == "sum")
  end
  local across = slots > 0 and additive
  if across then
    c:line("double *s_stat = (double *)(fgw_smem + (sbase - fgw_smem_addr(fgw_smem)) + %d); /* [acc][8 warps][BN][2] */",
      w.stat_offset)
    c:line("const int tid = (int)threadIdx.x - 128, swarp = tid >> 5;")
    c:line("for (int i = tid; i < %d; i += 256) s_stat[i] = 0.0;", pass.feeds.n * 8 * w.bn * 2)
    -- a warp's partials are cleared by other warps' threads: all clears land before any adds
    c:line("asm volatile(\"bar.sync 1, 256;\" ::: \"memory\");")
    c:line("int fed_n = -1, fed_g = 0, fed_co0 = 0; /* whose partials s_stat holds */")
  end
  c:line("#pragma unroll 1")
  -- the tiles in turn (planner.h, fg_wgmma_tiling.alternate): the block's j-th tile (or unit)
  -- is warpgroup j % 2's. Its main loop waits for the other warpgroup's main loop of tile j - 1
  -- (their arrival count: (j - 1) / 2 phases of that barrier before), so the two main loops
  -- run one after the other while each epilogue overlaps the other's main loop; and a
  -- warpgroup waits on a stage's full barrier only when every earlier fill of the ring has
  -- been waited for, so its parity never lags two phases behind
  local turns = w.alternate == 1
  local function turn_wait(j)
    if turns then c:line("if (%s > begin) fgw_mbar_wait(bar_turn + 8 * (1 - cw), ((%s - begin - 1) >> 1) & 1);", j, j) end
  end
  local function turn_arrive()
    if turns then c:line("if (lane == 0) fgw_mbar_arrive(bar_turn + 8 * cw);") end
  end
  if split then
    -- (tile, split) units; in turn each warpgroup counts every unit's chunks (the ring's
    -- position, as the producer counts) and runs its own, its fixup syncing and flagging it
    -- alone (fill_fixup)
    local part, count = names.buffer[w.split_partials], names.buffer[w.split_counters]
    c:open("for (int unit = begin; unit < end; ++unit) {")
    c:line("const int tile = unit % ntiles, split = unit / ntiles;")
    c:line("const int kc0 = chunk_begin(split, nsplit), kc1 = chunk_begin(split + 1, nsplit);")
    if turns then
      c:line("const int mine = ((unit - begin) & 1) == cw, chunks = kc1 - kc0;")
      c:line("it0 += chunks;")
      c:line("if (!mine) continue;")
    end
    c:line("const Tile tl = decode_tile(tile);")
    res_issue()
    turn_wait("unit")
    c:line("mainloop(acc, tmp, %s, kc0, kc1, row0, sbase, bar_full, bar_empty);", turns and "it0 - chunks - kc0" or "it0 - kc0")
    turn_arrive()
    res_wait()
    if not turns then c:line("it0 += kc1 - kc0;") end
    c:line("/* split K: the last split of the tile to arrive sums the partials and runs the epilogue */")
    c:line("if (nsplit > 1 && !split_fixup(acc, %s, (unsigned *)%s, tile, split, nsplit, %s)) continue;", part, count,
      turns and "split_flag + cw" or "split_flag")
  elseif turns then
    c:open("for (int tile = begin + cw; tile < end; tile += 2) {")
    c:line("const Tile tl = decode_tile(tile);")
    res_issue()
    turn_wait("tile")
    c:line("mainloop(acc, tmp, tile - begin, row0, sbase, bar_full, bar_empty);")
    turn_arrive()
    res_wait()
  else
    c:open("for (int tile = begin; tile < end; ++tile) {")
    c:line("const Tile tl = decode_tile(tile);")
    res_issue()
    c:line("mainloop(acc, tmp, tile - begin, row0, sbase, bar_full, bar_empty);")
    res_wait()
  end
  if w.flat then
    -- each output's sample is its row's (conv.lua declare_output_coords, th.flat): no tile-wide n
    c:line("const int n0 = tl.n, g = tl.g, co0 = tl.nb * BN, pm0 = tl.m0 + row0;")
  else
    c:line("const int n = tl.n, g = tl.g, co0 = tl.nb * BN, pm0 = tl.m0 + row0;")
  end
  c:line("(void)warp;")

  -- the fused epilogue on the fragments: register 4 j + 2 h + e of m-tile mt holds output pixel
  -- pm0 + 64 mt + 16 warp + lane / 4 + 8 h and channel co0 + 8 j + 2 (lane % 4) + e; a slot q
  -- = 2 j + e is one channel (lanes holding it merge their statistics before the atomics)
  -- both mappings number a thread's outputs within the sample (`px`)
  local O = g.O
  local od, oh, ow = string.format("px / %d", O[2] * O[3]), string.format("(px / %d) %% %d", O[3], O[2]),
    string.format("px %% %d", O[3])
  local full = string.format("pm0 + %d <= %d && co0 + %d <= %d", 64 * w.wgmt, O[1] * O[2] * O[3], w.bn, g.cout_g)
  -- flat tiles: each output checks its row's sample against the batch (cheap next to the
  -- epilogue); a second, unchecked copy of the epilogue for full tiles put ResNet-50's last
  -- 1x1 conv past 168 registers (spills)
  if w.flat then full = nil end
  local flat_opix = w.flat and O[1] * O[2] * O[3] or nil -- a sample's pixels (conv.lua, th.flat)
  local th
  if pass.staged_epilogue then
    -- A channels-last output (planner.h, fg_wgmma_staged_epilogue): the fragments' own mapping
    -- puts a quad's 4 lanes on neighbouring channels and the 8 quads on 8 pixels C elements
    -- apart, so every load of a tensor at the output's index and every store would be 2 to 8
    -- contiguous bytes. Instead each warp writes its 16 rows x 32 channels (of m64 tile mt,
    -- channels co0 + 32 kk ..) to its slab and reads them back a row (pixel) at a time, lane
    -- = channel: 32 channels' contiguous bytes per access.
    local S, J = w.epi_stride, w.epi_cols // 8 -- the slab's row pitch; 8-channel fragment blocks a chunk
    -- rows epi_cols floats apart where the residual's tile takes shared memory too (planner.h):
    -- row r's column c is then at c ^ 8 (r % 4), so that a float2 write's 8 rows (lane / 4)
    -- still fall on 4 groups of 8 banks (2 wavefronts, as rows 40 floats apart) and a row's
    -- read (lane = column) on 32 banks; the XOR keeps a float2's two columns together
    local swizzled = S == w.epi_cols
    local wcol = swizzled and "((8 * jj + 2 * (lane & 3)) ^ ((lane & 12) << 1))" or "8 * jj + 2 * (lane & 3)"
    -- 16-byte vectors (planner.c, fg_wgmma_epi_vec): a lane reads V neighbouring channels of a
    -- row back and stores them as one vector. Two rows' lanes share a quarter warp's 16-byte
    -- loads, whose rows start 8 banks apart (or 0, swizzled): where a lane's V = 8 floats are
    -- two loads, odd rows hold their two halves swapped (column c at c ^ 4), so that the first
    -- load of an even row's lanes (banks 0-3 of each 8) and an odd row's (4-7) do not collide.
    -- The fragments' float2 writes stay within their 8-float group: the same wavefronts.
    local V = pass.epi_vec
    if V > 1 then
      if w.epi_offset % 16 ~= 0 or (S * 4) % 16 ~= 0 then error("conv_wgmma: a staged slab not 16-byte aligned") end
      if res and V * 2 ~= 16 then error("conv_wgmma: the residual's tile read in vectors of other than 16 bytes") end
      if V == 8 then wcol = "((" .. wcol .. ") ^ (lane & 4))" end -- row (lane >> 2) + 8 h is odd: halves swapped
    end
    th = {
      loops = { { "kk", chunks }, { "mt", w.wgmt }, { "rr", w.epi_rows } },
      rows_unroll = w.epi_unroll,
      value = string.format("slab[rr * %d + %s]", S, swizzled and "(lane ^ ((rr & 3) << 3))" or "lane"),
      co = string.format("co0 + %d * kk + lane", w.epi_cols),
      pixel = "(pm0 + 64 * mt + 16 * warp + rr)",
      od = od, oh = oh, ow = ow,
      flat = flat_opix,
      predicated = w.flat_predicated == 1, -- the sample checked by predicated stores (planner.h)
      linear = w.flat_rows_linear == 1, -- ... and the rows indexed as one run of the batch's pixels
      -- the lanes of a chunk past the tile's channels (BN not a multiple of 32) hold nothing;
      -- a full tile checks only that (v26 checked every output there: SD's 112-channel tiles
      -- lost 13 %)
      valid = w.bn % w.epi_cols ~= 0 and string.format("%d * kk + lane < BN", w.epi_cols) or nil,
      full = full,
      -- statistics (the output's, for the next layer of a block): slot kk is the lane's channel
      -- of chunk kk, no other lane holds it
      slot = "kk",
      slot_co = function(q) return string.format("co0 + %d * (%s) + lane", w.epi_cols, q) end,
      feeds_outside = across,
      stage = function(c)
        c:line("/* this warp's accumulators of tile mt, channels 32 kk .. 32 kk + 31 of the tile, into its slab */")
        c:line("#pragma unroll")
        c:open("for (int jj = 0; jj < %d; ++jj) {", J)
        c:open("if (%d * kk + jj < BN / 8) {", J)
        c:line("#pragma unroll")
        c:line("for (int h = 0; h < 2; ++h)")
        c:line("    *(float2 *)&slab[((lane >> 2) + 8 * h) * %d + %s] =", S, wcol)
        c:line("        make_float2(acc[mt][4 * (%d * kk + jj) + 2 * h], acc[mt][4 * (%d * kk + jj) + 2 * h + 1]);", J, J)
        c:close()
        c:close()
        c:line("__syncwarp();")
      end,
      unstage = function(c) c:line("__syncwarp(); /* read before the next chunk overwrites it */") end,
      -- a block tensor's rows loaded 8 at a time (conv.lua, prefetch; all 16 spilled 256-channel
      -- tiles), where a thread holds 64 accumulators: SD's 1280-channel conv + the residual in
      -- 256-channel tiles took 57 % longer with it (52 -> 82 us, no spills; v41), and its
      -- 320-channel one in 160-channel tiles 2.6 %; nor in flat tiles fed by cp.async, whose
      -- consumers spilled even with 4 (ConvNeXt's 768-channel 1x1 conv, under NVRTC). Not the
      -- residual whose tile is in shared memory (res below): an fp32 layer's, or a half one's
      -- where the ring would lose its third stage to the tile
      prefetch_rows = w.wgmt * w.bn <= 128 and not (w.flat and w.a_tma ~= 2) and 8 or nil,
    }
    if V > 1 then
      -- the vectors' mapping: lane % L holds channels V (lane % L) .. of chunk kk, lane / L the
      -- row of each V rows (iteration rv) -- the slab's row vrow
      local L = w.epi_cols // V
      local R = 32 // L
      local vrow = string.format("(%d * rv + (lane >> %d))", R, math.floor(math.log(L, 2) + 0.5))
      local col = string.format("%d * (lane & %d)", V, L - 1)
      -- the physical column of the row's logical column col + 4 j (swizzled: its 8-float group
      -- XOR the row's 4; V = 8: its halves XOR the row's parity, above)
      local function phys(j)
        local x = string.format("(%s + %d)", col, 4 * j)
        if swizzled then x = string.format("(%s ^ ((%s & 3) << 3))", x, vrow) end
        if V == 8 then x = string.format("(%s ^ ((%s & 1) << 2))", x, vrow) end
        return x
      end
      local comp = { "x", "y", "z", "w" }
      th.loops = { { "kk", chunks }, { "mt", w.wgmt }, { "rv", w.epi_rows // R }, { "e", V } }
      th.pair, th.pair_channels = V, true
      -- the rows a lane's iteration covers: V elements of one row each, as many as epi_unroll
      -- rows of a lane a channel
      th.rows_unroll = math.max(1, w.epi_unroll // V)
      th.value = nil
      th.pair_value = function(e) return string.format("sl%d.%s", e // 4, comp[e % 4 + 1]) end
      th.co = string.format("co0 + %d * kk + %s + e", w.epi_cols, col)
      th.co_lane = string.format("co0 + %d * kk + %s", w.epi_cols, col)
      th.pixel = string.format("(pm0 + 64 * mt + 16 * warp + %s)", vrow)
      th.valid = w.bn % w.epi_cols ~= 0 and string.format("%d * kk + %s + e < BN", w.epi_cols, col) or nil
      th.prefetch_rows = nil
      th.pair_head = function(c)
        c:line("/* this lane's %d channels of its row, from the slab%s */", V, res and " and the residual's tile" or "")
        for j = 0, V // 4 - 1 do
          c:line("const float4 sl%d = *(const float4 *)&slab[%s * %d + %s];", j, vrow, S, phys(j))
        end
        -- (a lane past the tile's channels, BN not a multiple of 32, reads past its row: still
        -- inside the shared memory, and its elements are never evaluated, th.valid)
        if res then
          c:line("const uint4 rq = *(const uint4 *)&res_s[(16 * mt + %s) * BN + %d * kk + %s];", vrow, w.epi_cols, col)
        end
      end
      if res then
        th.pair_each = function(e)
          ev:set_smem_tensor({ param = w.res_param,
            value = string.format("fg_io_widen((unsigned short)(rq.%s%s))", comp[e // 2 + 1], e % 2 == 1 and " >> 16" or "") })
        end
      end
    end
    c:line("float *const slab = (float *)(fgw_smem + (sbase - fgw_smem_addr(fgw_smem)) + %d) + (4 * cw + warp) * %d;",
      w.epi_offset, w.epi_rows * S)
    -- the residual's element of the output: row 16 mt + rr of this warp's rows, the lane's
    -- channel of chunk kk (expr.lua, param_at)
    if res and V == 1 then
      ev:set_smem_tensor({ param = w.res_param,
        value = string.format("fg_io_widen(res_s[(16 * mt + rr) * BN + %d * kk + lane])", w.epi_cols) })
    end
  else
    th = {
      loops = { { "q", w.bn // 4 }, { "mt", w.wgmt }, { "h", 2 } },
      value = "acc[mt][4 * (q >> 1) + 2 * h + (q & 1)]",
      co = "co0 + 8 * (q >> 1) + 2 * (lane & 3) + (q & 1)",
      pixel = "(pm0 + 64 * mt + 16 * warp + (lane >> 2) + 8 * h)",
      od = od, oh = oh, ow = ow,
      flat = flat_opix,
      slot = "q",
      slot_co = function(q) return string.format("co0 + 8 * ((%s) >> 1) + 2 * (lane & 3) + ((%s) & 1)", q, q) end,
      merge_lanes = true,
      full = full,
      feeds_outside = across,
    }
  end
  -- feeds what s_stat holds (for sample fed_n, group fed_g, channels fed_co0..), then clears it;
  -- every consumer thread takes the tile-uniform condition (the barriers)
  local cc = { string.format("(g * %d + co)", g.cout_g) }
  for d = 2, g.conv.out_shape.rank - 1 do cc[d] = "0" end
  -- a statistic of several consecutive channels (a group norm's): the lanes holding one key add
  -- up their sums first (a segmented sum over the warp, from the last lane of each key to its
  -- first), and only the first lane of each key feeds it. Every tile's channels feeding every
  -- key apart put hundreds of fp64 atomics on each address at once: SD's 320-channel layer (32
  -- groups of 10, 32 tiles of 128 pixels a sample) took ~10 us more per launch, at any batch
  -- (bench/NOTES.md v35).
  local grouped = false
  for i = 0, pass.feeds.n - 1 do
    local acc = plan.accums[pass.feeds[i]]
    local op = not acc.per_channel and lib.accum_op(layer, acc)
    grouped = grouped or (op and op.class == "norm" and op.stat.channel_group > 1)
  end
  local function flush(cond)
    c:open("if (%s) {", cond)
    c:line("asm volatile(\"bar.sync 1, 256;\" ::: \"memory\"); /* every warp's partials are in */")
    if grouped then
      c:open("for (int ch0 = 0; ch0 < BN; ch0 += 256) { /* every thread: the warps' shuffles */")
      c:line("const int ch = ch0 + tid, n = fed_n, g = fed_g, co = fed_co0 + ch;")
      c:line("const bool valid = ch < BN && co < %d;", g.cout_g)
    else
      c:open("for (int ch = tid; ch < BN; ch += 256) {")
      c:line("const int n = fed_n, g = fed_g, co = fed_co0 + ch;")
      c:open("if (co < %d) {", g.cout_g)
    end
    for i = 0, pass.feeds.n - 1 do
      local a = pass.feeds[i]
      local def = plan.accum_defs[plan.accums[a].kind]
      c:line("double ss%d = 0.0, sq%d = 0.0;", a, a)
      if grouped then
        c:line("long long sk%d = -1;", a)
        c:open("if (valid) {")
      end
      c:line("for (int wi = 0; wi < 8; ++wi) { ss%d += s_stat[((%d * 8 + wi) * BN + ch) * 2]; sq%d += s_stat[((%d * 8 + wi) * BN + ch) * 2 + 1]; }",
        a, i, a, i)
      if grouped then
        c:line("sk%d = %s;", a, ev:accum_key(a, cc))
        c:close()
        c:open("for (int o = 1; o < 32; o <<= 1) {")
        c:line("const double s2 = __shfl_down_sync(0xffffffffu, ss%d, o), q2 = __shfl_down_sync(0xffffffffu, sq%d, o);", a, a)
        c:line("const long long k2 = __shfl_down_sync(0xffffffffu, sk%d, o);", a)
        c:open("if (lane + o < 32 && k2 == sk%d) {", a)
        c:line("ss%d += s2;", a)
        c:line("sq%d += q2;", a)
        c:close()
        c:close()
        c:line("const long long kp%d = __shfl_up_sync(0xffffffffu, sk%d, 1);", a, a)
        c:open("if (sk%d >= 0 && (lane == 0 || kp%d != sk%d)) {", a, a, a)
      else
        c:line("const long long sk%d = %s;", a, ev:accum_key(a, cc))
      end
      lib.emit(c, lib.fill(def.flush, nil, { acc = names.accum[a], k = "sk" .. a, s = "ss" .. a, q = "sq" .. a }))
      if grouped then c:close() end
    end
    if not grouped then c:close() end
    c:close()
    c:line("asm volatile(\"bar.sync 1, 256;\" ::: \"memory\"); /* read before cleared */")
    c:line("for (int i = tid; i < %d; i += 256) s_stat[i] = 0.0;", pass.feeds.n * 8 * w.bn * 2)
    c:line("asm volatile(\"bar.sync 1, 256;\" ::: \"memory\");")
    c:close()
  end
  if across then
    -- a new sample or channel block: feed the old one's partials first
    flush("fed_n >= 0 && (fed_n != n || fed_g != g || fed_co0 != co0)")
    feed.declare(c, plan, pass.feeds, slots)
    local shifted = false
    for i = 0, pass.feeds.n - 1 do shifted = shifted or feed.shifted(plan, pass.feeds[i]) end
    if shifted and not pass.staged_epilogue then
      -- the warp's rows of this tile: the count of each of its channels' elements
      local rows = {}
      for mt = 0, w.wgmt - 1 do
        rows[#rows + 1] = string.format("min(max(%d - (pm0 + %d + 16 * warp), 0), 16)", O[1] * O[2] * O[3], 64 * mt)
      end
      c:line("const float wrows = (float)(%s);", table.concat(rows, " + "))
    end
    th.slot_end = function(c) tile_partials(c, plan, pass, ev, w, th.slot, pass.staged_epilogue) end
  end
  if pass.chan_reduce >= 0 then
    reduce_epilogue(c, g, layer, plan, pass, names, ev, w, th)
  else
    conv_t.epilogue(c, g, layer, plan, pass, names, ev, slots, th)
  end
  if across then c:line("fed_n = n; fed_g = g; fed_co0 = co0;") end
  c:close()
  if across then flush("fed_n >= 0") end
  if pair then
    c:line("consumer_pair_tail(end > begin ? (end - begin) * KCH : 0, ntiles, bar_full, bar_empty);")
    c:line("fg_cluster_sync(); /* no CTA leaves while the other may still arrive on its barriers */")
  end
  c:close()
  return c
end

return M
