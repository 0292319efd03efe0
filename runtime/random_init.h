/* SPDX-License-Identifier: Apache-2.0 */
/* Reproducible random inputs and parameters for `fusegen run --random SEED`, the tests and
 * the benchmarks: x ~ U[0, 1), conv weights and biases as PyTorch initializes them
 * (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), running variances ~ U(0.5, 1.5), every other
 * parameter ~ N(0, 1). The bits come from libsodium's deterministic generator (ChaCha20),
 * keyed by the seed and a stream number, so every tensor is independent and repeatable. */
#ifndef FG_RANDOM_INIT_H
#define FG_RANDOM_INIT_H

#include <stddef.h>
#include <stdint.h>

#include "../gen/ir.h"

void fg_random_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, float lo, float hi);
void fg_random_normal(float *out, size_t n, uint64_t seed, uint64_t stream);

/* Fills params[i] (ir->params[i].count floats each, caller-allocated) for every parameter. */
void fg_random_params(const fg_layer_ir *ir, uint64_t seed, float *const *params);

#endif
