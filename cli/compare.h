/* SPDX-License-Identifier: Apache-2.0 */
/* Comparing an output with a reference the way the tests and `run --check` do:
 * allclose(out, ref, atol, rtol) as PyTorch defines it, plus the max abs and relative L2
 * errors. NaN anywhere fails. */
#ifndef FG_COMPARE_H
#define FG_COMPARE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct fg_comparison {
    double max_abs, rel_l2;
    long long bad, count;
    bool nan, pass;
} fg_comparison;

void fg_compare(const float *out, const float *ref, size_t n, double atol, double rtol, fg_comparison *c);
/* The same with `ulps` units in the last place of `dtype` (common/half.h: 1 bf16, 2 fp16) at
 * each reference value added to the bound: a bf16/fp16 output and the reference rounded to
 * that dtype (fg_layer_run_cpu) may land on neighbouring values when the exact result lies
 * near the middle between two (the kernel rounds an fp32 result, the reference a float64 one). */
void fg_compare_dtype(const float *out, const float *ref, size_t n, double atol, double rtol, double ulps, int dtype,
                      fg_comparison *c);

#endif
