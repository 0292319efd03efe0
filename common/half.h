/* SPDX-License-Identifier: Apache-2.0 */
/* bfloat16 and IEEE half on the host: the dtypes a layer's input and output may have (the
 * spec's `dtype`). Rounding is to nearest, ties to even, as the kernels' cvt.rn does; every
 * value of either format is a float (and a TF32) exactly. The dtype codes are fg_dtype's
 * (gen/ir.h): 0 fp32, 1 bf16, 2 fp16. */
#ifndef FG_HALF_H
#define FG_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* significand bits (with the implicit one), the smallest normal exponent, the largest finite value */
static inline void fg_half_format(int dtype, int *digits, int *emin, double *max)
{
    if (dtype == 1) {
        *digits = 8, *emin = -126, *max = ldexp(255.0, 120); /* (2 - 2^-7) * 2^127 */
    } else {
        *digits = 11, *emin = -14, *max = 65504.0;
    }
}

/* x rounded to the dtype (to nearest, ties to even; past the largest finite value to
 * infinity); fp32 (dtype 0) rounds to float. */
static inline double fg_round_to_dtype(double x, int dtype)
{
    if (dtype == 0)
        return (double)(float)x;
    if (!isfinite(x) || x == 0.0)
        return x;
    int digits, emin;
    double max;
    fg_half_format(dtype, &digits, &emin, &max);
    int e = ilogb(x);
    if (e < emin)
        e = emin; /* subnormal: the quantum stays that of the smallest normals */
    double q = ldexp(1.0, e - (digits - 1));
    double r = nearbyint(x / q) * q; /* the default rounding mode: ties to even */
    if (fabs(r) > max)
        return copysign(INFINITY, x);
    return r;
}

/* The distance from |x| (a value of the dtype) to the next larger one: the dtype's ulp. */
static inline double fg_dtype_ulp(double x, int dtype)
{
    int digits, emin;
    double max;
    if (dtype == 0) {
        digits = 24, emin = -126;
    } else {
        fg_half_format(dtype, &digits, &emin, &max);
    }
    int e = (x == 0.0 || !isfinite(x)) ? emin : ilogb(x);
    if (e < emin)
        e = emin;
    return ldexp(1.0, e - (digits - 1));
}

/* A float's bits as the dtype's 16 bits, rounded (NaN stays a quiet NaN of its sign). */
static inline uint16_t fg_float_to_half_bits(float f, int dtype)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (isnan(f))
        return (uint16_t)(sign | (dtype == 1 ? 0x7fc0 : 0x7e00));
    double r = fg_round_to_dtype((double)f, dtype);
    if (dtype == 1) {
        float rf = (float)r; /* exact */
        memcpy(&u, &rf, 4);
        return (uint16_t)(u >> 16);
    }
    double a = fabs(r);
    if (isinf(a))
        return (uint16_t)(sign | 0x7c00);
    if (a < ldexp(1.0, -14)) /* subnormal (or zero): multiples of 2^-24 */
        return (uint16_t)(sign | (uint16_t)ldexp(a, 24));
    int e = ilogb(a);
    uint16_t mant = (uint16_t)(ldexp(a, 10 - e) - 1024.0);
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | mant);
}

/* The dtype's 16 bits as a float, exactly. */
static inline float fg_half_bits_to_float(uint16_t h, int dtype)
{
    if (dtype == 1) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v = exp == 0 ? ldexpf((float)man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexpf((float)(man | 0x400), exp - 25);
    return (h & 0x8000) ? -v : v;
}

#endif
