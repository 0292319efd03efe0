-- SPDX-License-Identifier: Apache-2.0
-- The CUDA side of every op's semantics: one snippet per op, as float expressions. The CPU
-- reference (reference/cpu_reference.c) is the other side; the tests hold them together.
local lib = import("lib")
local flit = lib.flit

local ops = {}

-- Elementwise unary ops: the registry's snippet steps (gen/op_registry.c) applied to `x` (a
-- variable name) in turn; a step with a guard applies only when it holds ("field?": an
-- optional field was given; "field=choice").
local function guard_holds(op, guard)
  if not guard then return true end
  local given = guard:match("^([%w_]+)%?$")
  if given then return op.f.given[given] end
  local field, choice = guard:match("^([%w_]+)=([%w_]+)$")
  if field then return op.f[field] == choice end
  error(string.format("op %s: unknown snippet guard '%s'", op.spec_name, guard))
end

-- `fast`: the plan allows a step's faster form where it has one (plan.fast_gelu)
function ops.unary(op, x, fast)
  local e = x
  for _, step in ipairs(op.cuda) do
    if guard_holds(op, step.guard) then e = lib.fill(fast and step.fast or step.text, op, { x = e }) end
  end
  if #op.cuda == 0 then error("no CUDA snippet for unary op " .. op.spec_name) end
  return e
end

-- Elementwise binary ops: an expression of `a` (the chain) and `b` (the operand).
function ops.binary(op, a, b)
  if #op.cuda ~= 1 then error("no CUDA snippet for binary op " .. op.spec_name) end
  return lib.fill(op.cuda[1].text, op, { a = a, b = b })
end

-- GELU (approximate "none") where the plan allows it (plan.fast_gelu: precision "tf32" and
-- FUSEGEN_FAST_GELU=2; only those sources carry it). erff evaluates two polynomials and keeps
-- one (~24 SASS instructions an element, 9 of them FSEL); ConvNeXt's 1x1 + GELU epilogues
-- issue at their instruction limit (bench/NOTES.md v47). Here erfc(z) = t P(t) e^-z^2 with
-- t = 1 / (1 + p z), Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7), so that x Phi(x) is
-- x - h for x >= 0 and h below, h = x/2 t P(t) e^(-x^2/2): ~16 instructions, one rcp.approx
-- and one ex2.approx. Against float64 on [-14, 14] (fp32 emulated): |error| <= 5.3e-7, at most
-- 2e-7 |x|; 1.7e-4 relative where |GELU| > 1e-3 (the negative tail; erff's form 4.5e-5 there),
-- far under bf16's rounding (2^-9) and precision tf32's conv (~1e-3; and the 1e-4 bar where a
-- tf32 layer's conv stays exact). The clamp keeps h finite at x = +-inf (+inf gives +inf; -inf
-- gives -0, erff's form NaN); NaN stays NaN (fminf/fmaxf drop it, the last step keeps x's).
ops.fast_gelu_prelude = [[
__device__ __forceinline__ float fg_gelu_fast(float x)
{
    const float c = fminf(fmaxf(x, -16.0f), 16.0f);
    float t, e;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(fabsf(c), 0.231641889f, 1.0f)));
    const float p = t * fmaf(fmaf(fmaf(fmaf(1.061405429f, t, -1.453152027f), t, 1.421413741f), t, -0.284496736f), t,
                             0.254829592f);
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(c * (c * -0.721347520f)));
    const float h = (0.5f * c) * (p * e);
    return x < 0.0f ? h : x - h; /* NaN: x - h (the clamp took it to -16, h is -0) */
}
]]

-- Device helpers every generated source carries (no CUDA headers at JIT time).
ops.prelude = [[
typedef unsigned long long fg_u64;
struct fg_stat { float a, b; }; /* a norm: mean, 1/sqrt(var+eps); softmax: max, 1/sum */

__device__ __forceinline__ float fg_maximum(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float fg_minimum(float a, float b) { return (a < b || a != a) ? a : b; }

/* cp.async (sm_80+): a 4-byte global -> shared copy that does not occupy a register;
 * with `valid` false it writes zero (src-size 0) and reads nothing. */
__device__ __forceinline__ void fg_cp_async4(float *dst, const float *src, bool valid)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(d), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ void fg_cp_async_wait_all(void)
{
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
}
/* double buffering: close a group of copies; wait for all but the newest group */
__device__ __forceinline__ void fg_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void fg_cp_async_wait_but1(void) { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void fg_cp_async_wait0(void) { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

/* 3xTF32 (mma.sync with TF32 operands, sm_80+): x = hi + lo, hi rounded to TF32's 10-bit
 * mantissa (round half away from zero, in the bits), lo = x - hi exactly; the tensor core
 * reads TF32's bits of lo (the weights' lo is rounded the same way when staged, for free).
 * a_hi*b_hi + a_hi*b_lo + a_lo*b_hi then misses only a_lo*b_lo and lo's low bits, about
 * 2^-21 of each product, of either sign: fp32 accuracy, provided the sum is not left to
 * the tensor core's truncating accumulation (conv_mma.lua's block accumulation). (Within
 * 2^-12 of FLT_MAX, or infinite, x rounds hi to infinity and the product becomes NaN.) */
__device__ __forceinline__ float fg_tf32_hi(float x)
{
    return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}
/* d += a * b for one m16n8k8 tile: a is 16x8 (row major, 4 registers a lane), b 8x8 (2
 * registers), d 16x8 fp32 (4). */
__device__ __forceinline__ void fg_mma_tf32(float *d, float4 a, float b0, float b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(__float_as_uint(a.x)), "r"(__float_as_uint(a.y)), "r"(__float_as_uint(a.z)), "r"(__float_as_uint(a.w)),
          "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}
/* d = a * b: the same product into a fresh accumulator (a zero C operand) */
__device__ __forceinline__ void fg_mma_tf32_fresh(float *d, float4 a, float b0, float b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(__float_as_uint(a.x)), "r"(__float_as_uint(a.y)), "r"(__float_as_uint(a.z)), "r"(__float_as_uint(a.w)),
          "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)), "f"(0.0f));
}

/* 1 / (1 + e^-x) in four instructions: ex2.approx of -x log2(e) (2 ulp; the product's
 * rounding adds |x| 2^-24 relative) and rcp.approx (1 ulp) of 1 + that: within ~1e-6
 * relative for |x| < 20 (~5e-6 near x = -80, below 2^-126 flushed to 0, as before), and
 * exact at the ends (e^-x = inf gives 0, e^-x = 0 gives 1; NaN stays NaN). expf and a
 * division cost ~14 instructions an element in the conv epilogue. */
__device__ __forceinline__ float fg_sigmoid(float x)
{
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.44269504f));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
    return r;
}
/* floats as order-preserving ints, so that atomicMax/atomicMin on int compare them */
__device__ __forceinline__ int fg_ordered(float f) { int i = __float_as_int(f); return i >= 0 ? i : i ^ 0x7fffffff; }
__device__ __forceinline__ float fg_unordered(int i) { return __int_as_float(i >= 0 ? i : i ^ 0x7fffffff); }

/* Warp-aggregated accumulation. Every lane of the warp must call these together; a lane
 * with nothing to add passes key < 0. When all contributing lanes share one key (the usual
 * case: neighbouring elements belong to one statistic) the warp adds up first and one lane
 * does the atomics; otherwise each lane does its own. A warp with fewer than 32 threads (a
 * block that is not a multiple of 32) does its own atomics too: shuffles would read lanes
 * that do not exist. */
__device__ __forceinline__ bool fg_whole_warp(void) { return __activemask() == 0xffffffffu; }
__device__ __forceinline__ void fg_feed2(double *acc, long long key, double a, double b)
{
    if (!fg_whole_warp()) {
        if (key >= 0) { atomicAdd(acc + 2 * key, a); atomicAdd(acc + 2 * key + 1, b); }
        return;
    }
    const unsigned full = 0xffffffffu;
    unsigned valid = __ballot_sync(full, key >= 0);
    if (valid == 0) return;
    int leader = __ffs(valid) - 1;
    long long lk = __shfl_sync(full, key, leader);
    if (__all_sync(full, key < 0 || key == lk)) {
        if (key < 0) { a = 0.0; b = 0.0; }
        for (int o = 16; o > 0; o >>= 1) {
            a += __shfl_xor_sync(full, a, o);
            b += __shfl_xor_sync(full, b, o);
        }
        if ((int)(threadIdx.x & 31) == leader) { atomicAdd(acc + 2 * lk, a); atomicAdd(acc + 2 * lk + 1, b); }
    } else if (key >= 0) {
        atomicAdd(acc + 2 * key, a);
        atomicAdd(acc + 2 * key + 1, b);
    }
}

__device__ __forceinline__ void fg_feed1(double *acc, long long key, double a)
{
    if (!fg_whole_warp()) {
        if (key >= 0) atomicAdd(acc + key, a);
        return;
    }
    const unsigned full = 0xffffffffu;
    unsigned valid = __ballot_sync(full, key >= 0);
    if (valid == 0) return;
    int leader = __ffs(valid) - 1;
    long long lk = __shfl_sync(full, key, leader);
    if (__all_sync(full, key < 0 || key == lk)) {
        if (key < 0) a = 0.0;
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(full, a, o);
        if ((int)(threadIdx.x & 31) == leader) atomicAdd(acc + lk, a);
    } else if (key >= 0) {
        atomicAdd(acc + key, a);
    }
}

__device__ __forceinline__ void fg_feed_max(int *acc, long long key, float v)
{
    if (!fg_whole_warp()) {
        if (key >= 0) atomicMax(acc + key, fg_ordered(v));
        return;
    }
    const unsigned full = 0xffffffffu;
    unsigned valid = __ballot_sync(full, key >= 0);
    if (valid == 0) return;
    int leader = __ffs(valid) - 1;
    long long lk = __shfl_sync(full, key, leader);
    int e = key >= 0 ? fg_ordered(v) : (int)0x80000000;
    if (__all_sync(full, key < 0 || key == lk)) {
        e = __reduce_max_sync(full, e);
        if ((int)(threadIdx.x & 31) == leader) atomicMax(acc + lk, e);
    } else if (key >= 0) {
        atomicMax(acc + key, e);
    }
}

/* Before a feed: lanes holding the same key add up their partials, lane pairs 1, 2, 4, 8 and
 * 16 apart in turn, wherever every pair of the warp agrees (or one side holds nothing, key
 * < 0). One lane of each merged set keeps the sum, the others are left with nothing. Only
 * the tensor-core engine merges; its blocks are whole warps. */
__device__ __forceinline__ bool fg_lanes_agree(long long key, long long other)
{
    return __all_sync(0xffffffffu, other == key || other < 0 || key < 0);
}
__device__ __forceinline__ void fg_merge_lanes(long long &key, double &a, double &b)
{
    const unsigned full = 0xffffffffu, lane = threadIdx.x & 31;
    for (unsigned d = 1; d < 32; d <<= 1) {
        long long o = __shfl_xor_sync(full, key, d);
        if (!fg_lanes_agree(key, o)) continue;
        double pa = __shfl_xor_sync(full, a, d), pb = __shfl_xor_sync(full, b, d);
        if (lane & d) { key = -1; a = 0.0; b = 0.0; }
        else { key = key > o ? key : o; a += pa; b += pb; }
    }
}
/* the same for a max (take_max) or min partial */
__device__ __forceinline__ void fg_merge_lanes_extreme(long long &key, float &v, bool take_max)
{
    const unsigned full = 0xffffffffu, lane = threadIdx.x & 31;
    for (unsigned d = 1; d < 32; d <<= 1) {
        long long o = __shfl_xor_sync(full, key, d);
        if (!fg_lanes_agree(key, o)) continue;
        float p = __shfl_xor_sync(full, v, d);
        if (lane & d) { key = -1; }
        else { key = key > o ? key : o; v = take_max ? fg_maximum(v, p) : fg_minimum(v, p); }
    }
}

__device__ __forceinline__ void fg_feed_min(int *acc, long long key, float v)
{
    if (!fg_whole_warp()) {
        if (key >= 0) atomicMin(acc + key, fg_ordered(v));
        return;
    }
    const unsigned full = 0xffffffffu;
    unsigned valid = __ballot_sync(full, key >= 0);
    if (valid == 0) return;
    int leader = __ffs(valid) - 1;
    long long lk = __shfl_sync(full, key, leader);
    int e = key >= 0 ? fg_ordered(v) : 0x7fffffff;
    if (__all_sync(full, key < 0 || key == lk)) {
        e = __reduce_min_sync(full, e);
        if ((int)(threadIdx.x & 31) == leader) atomicMin(acc + lk, e);
    } else if (key >= 0) {
        atomicMin(acc + key, e);
    }
}
]]

return ops
