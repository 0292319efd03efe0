/* SPDX-License-Identifier: Apache-2.0 */
/* Folding an eval-mode batch_norm into the convolution before it.
 *
 * A batch_norm with running statistics directly after the conv is an affine map per output
 * channel, so it can live in the conv's weights and bias instead of in the kernels:
 *     s[c] = weight[c] / sqrt(running_var[c] + eps)           (weight = 1 without affine)
 *     w'[c, ...] = conv.weight[c, ...] * s[c]
 *     b'[c] = (conv.bias[c] - running_mean[c]) * s[c] + bias[c]  (conv.bias, bias = 0 when absent)
 * The planner decides the fold (fg_bn_fold_find, kept in fg_plan.fold): the kernels read w'
 * and b' as two kernel parameters after the spec's own (the conv gets a bias even when the
 * spec's conv has none) and evaluate the batch_norm as the identity. The runtime computes w'
 * and b' with fg_bn_fold_compute, in float64 on the host, whenever one of the parameters they
 * come from is bound (runtime/api_layer.c): the spec's parameters stay as bound, so a
 * state_dict round trip gives the module's tensors back, and the float64 CPU reference
 * still evaluates the unfolded layer (the independent oracle of the fold). */
#ifndef FG_FOLD_H
#define FG_FOLD_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

typedef struct fg_bn_fold {
    int op;                 /* the folded batch_norm (always op 1), -1: nothing is folded */
    /* the spec's parameters the folded tensors are computed from (indices into ir->params;
     * -1: absent -- a conv without bias, a batch_norm without affine) */
    int conv_weight, conv_bias, norm_weight, norm_bias, mean, var;
    double eps;
    int64_t channels;       /* the conv's output channels */
    int64_t per_channel;    /* conv weights per output channel: (C_in / groups) x taps */
    /* the kernel parameters holding w' and b': ir->n_params and ir->n_params + 1 */
    int folded_weight, folded_bias;
} fg_bn_fold;

/* Most kernel parameters a plan can have: the spec's and the fold's two. */
#define FG_MAX_KERNEL_PARAMS (FG_MAX_PARAMS + 2)

/* Whether the layer's op 1 can be folded, and how: a batch_norm with running statistics
 * whose input (the conv's value) no later op reads. Sets out->op = -1 when it cannot. */
void fg_bn_fold_find(const fg_layer_ir *ir, fg_bn_fold *out);

/* The kernel parameters of a layer planned with `fold`: the spec's, and the fold's two. */
int fg_bn_fold_param_count(const fg_layer_ir *ir, const fg_bn_fold *fold);

/* Whether spec parameter p is one the folded tensors are computed from. */
bool fg_bn_fold_reads(const fg_bn_fold *fold, int p);

/* w' (channels x per_channel floats) and b' (channels floats) from the spec's parameters
 * (params[i] holds ir->params[i]; only those the fold reads are used), computed in float64
 * and rounded once to float. */
void fg_bn_fold_compute(const fg_bn_fold *fold, const float *const *params, float *weight, float *bias);

#endif
