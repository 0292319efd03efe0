/* SPDX-License-Identifier: Apache-2.0 */
/* The bars a layer's output is held to against the float64 CPU reference: allclose with
 * atol = rtol = the bar, for a bf16/fp16 output plus 1 ulp of the dtype (the reference is
 * rounded to it too). By the layer's precision and dtype:
 *   - exact fp32 precision (3xTF32 or fp32 FMA, the default), any dtype: 1e-4 (the
 *     KernelBench bar);
 *   - precision "tf32" (one TF32 product, or half operands rounded once): 5e-3, the TF32
 *     cases' bar; with bf16 operands 4e-2 (the weights rounded to bf16's 8 significand bits,
 *     2^3 coarser than TF32's 11: a product's error grows with it).
 * `fusegen run --check` and the GPU tests' cases read them here. */
#ifndef FG_ACCURACY_H
#define FG_ACCURACY_H

#include <stdbool.h>

#define FG_BAR_EXACT 1e-4
#define FG_BAR_TF32 5e-3
#define FG_BAR_TF32_BF16 4e-2

/* dtype: fg_dtype's code (common/half.h): 0 fp32, 1 bf16, 2 fp16 */
static inline double fg_accuracy_bar(bool tf32, int dtype)
{
    return !tf32 ? FG_BAR_EXACT : dtype == 1 ? FG_BAR_TF32_BF16 : FG_BAR_TF32;
}

#endif
