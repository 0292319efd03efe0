/* SPDX-License-Identifier: Apache-2.0 */
#include "fold.h"

#include <math.h>
#include <string.h>

void fg_bn_fold_find(const fg_layer_ir *ir, fg_bn_fold *out)
{
    memset(out, 0, sizeof *out);
    out->op = -1;
    if (ir->n_ops < 2)
        return;
    const fg_op *conv = &ir->ops[0], *bn = &ir->ops[1];
    if (bn->kind != FG_OP_BATCH_NORM || !bn->running_stats)
        return;
    /* a later op that reads the conv's own value (a residual) needs it unfolded */
    for (int j = 2; j < ir->n_ops; j++)
        if (ir->ops[j].operand == FG_OPERAND_VALUE && ir->ops[j].operand_value == 0)
            return;
    out->op = 1;
    out->conv_weight = conv->weight_param;
    out->conv_bias = conv->bias ? conv->bias_param : -1;
    out->norm_weight = bn->affine ? bn->weight_param : -1;
    out->norm_bias = bn->affine ? bn->bias_param : -1;
    out->mean = bn->mean_param;
    out->var = bn->var_param;
    out->eps = bn->eps;
    out->channels = conv->out_channels;
    out->per_channel = ir->params[conv->weight_param].count / conv->out_channels;
    out->folded_weight = ir->n_params;
    out->folded_bias = ir->n_params + 1;
}

int fg_bn_fold_param_count(const fg_layer_ir *ir, const fg_bn_fold *fold)
{
    return ir->n_params + (fold->op >= 0 ? 2 : 0);
}

bool fg_bn_fold_reads(const fg_bn_fold *fold, int p)
{
    return fold->op >= 0 && p >= 0 &&
           (p == fold->conv_weight || p == fold->conv_bias || p == fold->norm_weight || p == fold->norm_bias ||
            p == fold->mean || p == fold->var);
}

void fg_bn_fold_compute(const fg_bn_fold *fold, const float *const *params, float *weight, float *bias)
{
    const float *w = params[fold->conv_weight];
    const float *b = fold->conv_bias >= 0 ? params[fold->conv_bias] : NULL;
    const float *gamma = fold->norm_weight >= 0 ? params[fold->norm_weight] : NULL;
    const float *beta = fold->norm_bias >= 0 ? params[fold->norm_bias] : NULL;
    const float *mean = params[fold->mean], *var = params[fold->var];
    for (int64_t c = 0; c < fold->channels; c++) {
        double scale = (gamma ? (double)gamma[c] : 1.0) / sqrt((double)var[c] + fold->eps);
        for (int64_t i = 0; i < fold->per_channel; i++)
            weight[c * fold->per_channel + i] = (float)((double)w[c * fold->per_channel + i] * scale);
        bias[c] = (float)(((b ? (double)b[c] : 0.0) - (double)mean[c]) * scale + (beta ? (double)beta[c] : 0.0));
    }
}
