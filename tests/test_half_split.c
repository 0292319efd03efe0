/* SPDX-License-Identifier: Apache-2.0 */
/* The wgmma engine's weights on a half layer (templates/conv_wgmma.lua,
 * render_pack_weights_half), measured against float64 on the CPU: precision "fp32" splits
 * each fp32 weight w into hi = dtype(w) and lo = dtype(w - hi) (both rounded to nearest, as
 * cvt.rn does; w - hi is exact in fp32), and the conv computes x.hi + x.lo; "tf32" rounds w
 * once. The bounds asserted here are the ones docs/design.md states:
 *   bf16 split  |w - hi - lo| <= 2^-16 |w|           (8 significant bits twice)
 *   fp16 split  |w - hi - lo| <= max(2^-22 |w|, 2^-25) (11 bits twice; lo is subnormal below
 *               |w| ~ 2^-3 and then keeps an absolute 2^-25)
 *   one part    |w - dtype(w)| <= 2^-8 |w| (bf16), max(2^-11 |w|, 2^-25) (fp16)
 * and, on conv-like dot products of a half input with such weights, the error of the split
 * stays far under the fp32 bar (1e-4 of the sum of |x w|). The numbers are printed
 * (bench/NOTES.md v12 quotes them). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/half.h"
#include "test_util.h"

/* a reproducible uniform double in [0, 1) */
static double uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * 0x1.0p-53;
}

typedef struct split {
    double hi, lo;
} split;

/* as the pack pass computes it, in fp32: hi rounded, the exact remainder rounded */
static split split_weight(float w, int dtype, int parts)
{
    split r;
    r.hi = fg_round_to_dtype((double)w, dtype);
    float rem = w - (float)r.hi; /* exact in fp32 (the remainder of a rounding to fewer bits) */
    r.lo = parts == 2 ? fg_round_to_dtype((double)rem, dtype) : 0.0;
    return r;
}

/* the bound of |w - hi - lo| stated above */
static double bound(double w, int dtype, int parts)
{
    double a = fabs(w);
    if (dtype == 1)
        return parts == 2 ? ldexp(a, -16) : ldexp(a, -8);
    return parts == 2 ? fmax(ldexp(a, -22), ldexp(1.0, -25)) : fmax(ldexp(a, -11), ldexp(1.0, -25));
}

static void weight_split_bounds(void **state)
{
    (void)state;
    uint64_t seed = 14;
    for (int dtype = 1; dtype <= 2; dtype++) {
        for (int parts = 1; parts <= 2; parts++) {
            /* |w| from 2^-30 to 2^10 (log-uniform), both signs; worst relative error per octave band */
            double worst_rel[5] = {0}, worst_abs = 0.0;
            static const int band_lo[5] = {-30, -14, -8, -3, 0};
            for (int i = 0; i < 400000; i++) {
                double e = -30.0 + 40.0 * uniform(&seed);
                float w = (float)(ldexp(1.0 + uniform(&seed), (int)floor(e)) * (uniform(&seed) < 0.5 ? -1 : 1));
                split s = split_weight(w, dtype, parts);
                double err = fabs((double)w - s.hi - s.lo);
                if (err > bound(w, dtype, parts))
                    fail_msg("dtype %d, %d parts: w = %a: |w - hi - lo| = %a above the bound %a", dtype, parts,
                             (double)w, err, bound(w, dtype, parts));
                int b = 0;
                while (b < 4 && floor(e) >= band_lo[b + 1])
                    b++;
                worst_rel[b] = fmax(worst_rel[b], err / fabs((double)w));
                worst_abs = fmax(worst_abs, fabs((double)w) < 1.0 ? err : 0.0);
            }
            printf("weights %s, %s: worst |w - hi - lo| / |w| for |w| in [2^-30, 2^-14) %.2e, [2^-14, 2^-8) %.2e, "
                   "[2^-8, 2^-3) %.2e, [2^-3, 1) %.2e, [1, 2^10) %.2e; worst absolute below 1: %.2e\n",
                   dtype == 1 ? "bf16" : "fp16", parts == 2 ? "hi + lo" : "one part", worst_rel[0], worst_rel[1],
                   worst_rel[2], worst_rel[3], worst_rel[4], worst_abs);
        }
    }
    /* the weights hi + lo carry stay within half an ulp of lo: a bf16 split keeps 16 bits at
     * least (the 3xTF32 path's weights keep 22), an fp16 split 22 while lo is normal */
    split s = split_weight(0.1f, 1, 2);
    assert_true(fabs(0.1f - s.hi - s.lo) <= ldexp(0.1, -16));
    s = split_weight(0.1f, 2, 2);
    assert_true(fabs(0.1f - s.hi - s.lo) <= ldexp(1.0, -25));
}

/* Conv-like dot products: K products of an input in the dtype (uniform in [-1, 1], rounded)
 * with weights uniform in +-1/sqrt(K) (PyTorch's default init bound for fan-in K), exactly
 * summed in float64; the error of the weights' representation relative to sum |x w|. */
static void dot_products(void **state)
{
    (void)state;
    uint64_t seed = 79;
    static const int ks[] = {27, 576, 4608};
    for (int dtype = 1; dtype <= 2; dtype++) {
        for (int parts = 1; parts <= 2; parts++) {
            for (size_t k = 0; k < sizeof ks / sizeof *ks; k++) {
                int K = ks[k];
                double worst = 0.0;
                for (int trial = 0; trial < 200; trial++) {
                    double exact = 0.0, got = 0.0, mag = 0.0;
                    for (int i = 0; i < K; i++) {
                        double x = fg_round_to_dtype(2.0 * uniform(&seed) - 1.0, dtype);
                        float w = (float)((2.0 * uniform(&seed) - 1.0) / sqrt((double)K));
                        split s = split_weight(w, dtype, parts);
                        exact += x * (double)w;
                        got += x * s.hi + x * s.lo;
                        mag += fabs(x * (double)w);
                    }
                    worst = fmax(worst, fabs(got - exact) / mag);
                }
                printf("dot products, K %4d, %s %s: worst |error| / sum |x w| %.2e\n", K, dtype == 1 ? "bf16" : "fp16",
                       parts == 2 ? "hi + lo" : "one part", worst);
                if (parts == 2)
                    assert_true(worst < 1e-5); /* an order under the fp32 bar's 1e-4 */
                else
                    assert_true(worst < (dtype == 1 ? 4e-3 : 5e-4)); /* the dtype's half ulp, at most */
            }
        }
    }
}

/* The input of a half layer with a prologue (GroupNorm -> SiLU -> conv), packed for wgmma in the
 * layer's dtype (templates/conv_wgmma.lua, the pack pass): the normalized value v is an fp32
 * that is no longer a value of the dtype, so precision "fp32" splits it as the weights are,
 * hi = dtype(v), lo = dtype(v - hi), and the conv computes hi.w_hi + hi.w_lo + lo.w_hi (the
 * three products of 3xTF32, lo.w_lo dropped); "tf32" rounds v once. Analytically, with u the
 * dtype's unit roundoff (2^-8 bf16, 2^-11 fp16, while lo is normal): v and w each carried to
 * u^2 of themselves, and the dropped lo.w_lo at most u^2 |v w|: 3 u^2 |v w| a term at worst
 * (bf16 4.6e-5, fp16 7.2e-7), random in sign, so a K-term sum sees ~u^2 sqrt(K) |v w|. fp16
 * leaves the normal range below: lo subnormal for |v| under ~2^-3, v carried to 2^-25
 * absolute; and above: |v| >= 65520 rounds hi to infinity (as PyTorch's fp16 intermediate
 * would; the TF32 operands had fp32's range). Modelled here: the products exact, summed in
 * fp32 per K chunk of 64 (a fresh accumulator, as BLOCK_ACC), the chunks added in fp32; the
 * output rounded to the dtype, as the kernel's store and the reference do; the harness's bar
 * (tests/gpu/gpu_harness.c): |out - ref| <= 1e-4 + 1e-4 |ref| + 1 ulp, rel L2 <= 1e-3. */
typedef struct conv_model {
    double err;     /* worst |computed - exact| / sum |v w| before the output's rounding */
    double rel_l2;  /* of the rounded outputs against the rounded float64 */
    int bad;        /* outputs outside the per-element bar */
    int nonfinite;  /* outputs that overflowed */
} conv_model;

/* v split (or rounded) as the pack pass does, in fp32 */
static split split_input(float v, int dtype, int parts)
{
    return split_weight(v, dtype, parts);
}

static conv_model model_conv(int dtype, int parts, int K, double vscale, uint64_t seed, int outputs)
{
    conv_model m = {0};
    double num = 0, den = 0;
    double *v = malloc(sizeof(double) * (size_t)K);
    for (int o = 0; o < outputs; o++) {
        /* the normalized input: z ~ N(0, 1)-like (a sum of uniforms), an affine of gamma ~ 1,
         * beta ~ 0.1, then SiLU; scaled by vscale to probe the dtype's range */
        for (int i = 0; i < K; i++) {
            double z = (uniform(&seed) + uniform(&seed) + uniform(&seed) - 1.5) * 2.0;
            z = z * (0.5 + uniform(&seed)) + 0.2 * (uniform(&seed) - 0.5);
            v[i] = (double)(float)(z / (1.0 + exp(-z)) * vscale); /* the fp32 value the pack pass holds */
        }
        double exact = 0.0, mag = 0.0;
        float acc = 0.0f, chunk = 0.0f;
        for (int i = 0; i < K; i++) {
            float w = (float)((2.0 * uniform(&seed) - 1.0) / sqrt((double)K));
            split a = split_input((float)v[i], dtype, parts), b = split_weight(w, dtype, parts);
            exact += v[i] * (double)w;
            mag += fabs(v[i] * (double)w);
            /* the products exact (the tensor core's fp32 products of 2-byte operands), the sum fp32 */
            chunk += (float)(a.hi * b.lo);
            chunk += (float)(a.lo * b.hi);
            chunk += (float)(a.hi * b.hi);
            if (i % 64 == 63 || i == K - 1) {
                acc += chunk;
                chunk = 0.0f;
            }
        }
        if (!isfinite(acc)) {
            m.nonfinite++;
            continue;
        }
        m.err = fmax(m.err, fabs((double)acc - exact) / mag);
        double out = fg_round_to_dtype((double)acc, dtype), ref = fg_round_to_dtype(exact, dtype);
        double d = fabs(out - ref);
        if (d > 1e-4 + 1e-4 * fabs(ref) + fg_dtype_ulp(ref, dtype))
            m.bad++;
        num += d * d;
        den += ref * ref;
    }
    free(v);
    m.rel_l2 = den > 0 ? sqrt(num / den) : 0.0;
    return m;
}

static void normalized_input_split(void **state)
{
    (void)state;
    static const int ks[] = {27, 576, 2880, 4608}; /* 2880: SD's 320-channel 3x3 */
    for (int dtype = 1; dtype <= 2; dtype++) {
        for (int parts = 2; parts >= 1; parts--) {
            for (size_t k = 0; k < sizeof ks / sizeof *ks; k++) {
                conv_model m = model_conv(dtype, parts, ks[k], 1.0, 1000 + k, 400);
                printf("normalized input, K %4d, %s %s: worst |error| / sum |v w| %.2e; after rounding to %s: rel L2 "
                       "%.2e, %d/400 outside the bar\n",
                       ks[k], dtype == 1 ? "bf16" : "fp16", parts == 2 ? "hi + lo (3 products)" : "one part",
                       m.err, dtype == 1 ? "bf16" : "fp16", m.rel_l2, m.bad);
                assert_int_equal(m.nonfinite, 0);
                if (parts == 2) {
                    /* 3 u^2 a term at worst (bf16 4.6e-5); the sum averages it down */
                    assert_true(m.err < (dtype == 1 ? 2e-5 : 1e-6));
                    assert_int_equal(m.bad, 0);
                    assert_true(m.rel_l2 < 1e-3);
                } else {
                    assert_true(m.err < (dtype == 1 ? 4e-3 : 5e-4)); /* the dtype's half ulp, at most */
                }
            }
        }
    }
    /* fp16's range: the split keeps 2^-22 relative while lo is normal, 2^-25 absolute below;
     * past 65504 the operand overflows. bf16 has fp32's exponent range. */
    static const double scales[] = {1e-6, 1e-3, 1.0, 1e2, 1e4, 3e4};
    for (int dtype = 1; dtype <= 2; dtype++) {
        for (size_t s = 0; s < sizeof scales / sizeof *scales; s++) {
            conv_model m = model_conv(dtype, 2, 2880, scales[s], 77 + s, 200);
            printf("normalized input x %.0e, K 2880, %s hi + lo: worst |error| / sum |v w| %.2e, rel L2 %.2e, %d/200 "
                   "outside the bar, %d not finite\n",
                   scales[s], dtype == 1 ? "bf16" : "fp16", m.err, m.rel_l2, m.bad, m.nonfinite);
            assert_int_equal(m.bad, 0);
            if (dtype == 1 || scales[s] <= 1e4)
                assert_int_equal(m.nonfinite, 0);
        }
    }
    /* an fp16 operand of 65520 or more is infinite: the limit docs/spec.md states */
    assert_true(isinf(split_input(65520.0f, 2, 2).hi));
    assert_true(isfinite(split_input(65519.0f, 2, 2).hi));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(weight_split_bounds),
        cmocka_unit_test(dot_products),
        cmocka_unit_test(normalized_input_split),
    };
    return cmocka_run_group_tests_name("half_split", tests, NULL, NULL);
}
