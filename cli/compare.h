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

#endif
