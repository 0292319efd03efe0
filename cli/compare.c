/* SPDX-License-Identifier: Apache-2.0 */
#include "compare.h"

#include <math.h>

#include "../common/half.h"

void fg_compare(const float *out, const float *ref, size_t n, double atol, double rtol, fg_comparison *c)
{
    fg_compare_dtype(out, ref, n, atol, rtol, 0, 0, c);
}

void fg_compare_dtype(const float *out, const float *ref, size_t n, double atol, double rtol, double ulps, int dtype,
                      fg_comparison *c)
{
    double num = 0, den = 0;
    c->max_abs = 0;
    c->bad = 0;
    c->nan = false;
    c->count = (long long)n;
    for (size_t i = 0; i < n; i++) {
        double o = out[i], r = ref[i], d = fabs(o - r);
        if (isnan(o) || isnan(r)) {
            c->nan = true;
            c->bad++;
            continue;
        }
        if (d > c->max_abs)
            c->max_abs = d;
        if (d > atol + rtol * fabs(r) + (ulps > 0 ? ulps * fg_dtype_ulp(r, dtype) : 0.0))
            c->bad++;
        num += d * d;
        den += r * r;
    }
    c->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    c->pass = c->bad == 0 && n > 0;
}
