/* SPDX-License-Identifier: Apache-2.0 */
/* Good specs: shape inference for every op kind, exact output shapes, and the parameters
 * each op registers (state_dict names and shapes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_registry.h"
#include "spec_loader.h"
#include "test_util.h"

/* ---- convolutions ------------------------------------------------------------------------ */

static void conv2d_defaults(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"c\" {\n"
                                      "  input = { \"N\", 3, 32, 20 },\n"
                                      "  conv2d { out_channels = 16, kernel = 5 },\n"
                                      "}\n");
    assert_string_equal(ir->name, "c");
    assert_int_equal(ir->n_ops, 1);
    FGT_ASSERT_SHAPE(&ir->input, 1, 3, 32, 20);
    const fg_op *op = &ir->ops[0];
    assert_int_equal(op->kind, FG_OP_CONV2D);
    assert_int_equal(op->line, 3);
    assert_int_equal(op->spatial, 2);
    assert_string_equal(op->name, "conv");
    assert_true(op->bias);
    assert_int_equal(op->groups, 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(op->kernel[i], 5);
        assert_int_equal(op->stride[i], 1);
        assert_int_equal(op->padding[i], 0);
        assert_int_equal(op->dilation[i], 1);
    }
    FGT_ASSERT_SHAPE(&op->in, 1, 3, 32, 20);
    FGT_ASSERT_SHAPE(&op->out, 1, 16, 28, 16);
    assert_int_equal(ir->n_params, 2);
    assert_int_equal(FGT_ASSERT_PARAM(ir, "conv.weight", 16, 3, 5, 5), op->weight_param);
    assert_int_equal(FGT_ASSERT_PARAM(ir, "conv.bias", 16), op->bias_param);
    assert_int_equal(ir->params[op->weight_param].count, 16 * 3 * 25);
    assert_int_equal(ir->precision, FG_PRECISION_FP32);
    assert_int_equal(fg_shape_sample_count(&op->out), 16 * 28 * 16);
    free(ir);
}

static void conv2d_stride_padding_dilation_groups(void **state)
{
    (void)state;
    /* H: (17 + 2*2 - (2*(3-1)+1)) / 2 + 1 = 16/2 + 1 = 9
     * W: (12 + 2*1 - (1*(5-1)+1)) / 3 + 1 = 9/3 + 1 = 4 */
    fg_layer_ir *ir = fgt_load_string("return layer \"c\" {\n"
                                      "  input = { \"N\", 6, 17, 12 },\n"
                                      "  conv2d { name = \"stem\", out_channels = 9, kernel = { 3, 5 }, stride = { 2, 3 },\n"
                                      "           padding = { 2, 1 }, dilation = { 2, 1 }, groups = 3, bias = false },\n"
                                      "}\n");
    const fg_op *op = &ir->ops[0];
    FGT_ASSERT_SHAPE(&op->out, 1, 9, 9, 4);
    assert_int_equal(op->kernel[0], 3);
    assert_int_equal(op->kernel[1], 5);
    assert_int_equal(op->stride[1], 3);
    assert_int_equal(op->padding[0], 2);
    assert_int_equal(op->dilation[0], 2);
    assert_int_equal(op->dilation[1], 1);
    assert_false(op->bias);
    assert_int_equal(op->bias_param, -1);
    assert_int_equal(ir->n_params, 1);
    FGT_ASSERT_PARAM(ir, "stem.weight", 9, 2, 3, 5);
    assert_int_equal(fgt_find_param(ir, "stem.bias"), -1);
    assert_int_equal(fgt_find_param(ir, "conv.weight"), -1);
    free(ir);
}

static void conv2d_depthwise_and_scalar_fields(void **state)
{
    (void)state;
    /* one value for all dims: stride 2, padding 1 on 7x7 -> (7+2-3)/2+1 = 4 */
    fg_layer_ir *ir = fgt_load_string("return layer \"dw\" {\n"
                                      "  input = { \"N\", 8, 7, 7 },\n"
                                      "  conv2d { out_channels = 8, kernel = 3, stride = 2, padding = 1, groups = 8 },\n"
                                      "}\n");
    FGT_ASSERT_SHAPE(&ir->ops[0].out, 1, 8, 4, 4);
    FGT_ASSERT_PARAM(ir, "conv.weight", 8, 1, 3, 3);
    FGT_ASSERT_PARAM(ir, "conv.bias", 8);
    free(ir);
}

static void conv3d_everything(void **state)
{
    (void)state;
    /* D: (9 + 2 - 3)/2 + 1 = 5; H: (10 - (2*1+1))/1 + 1 = 8; W: (11 + 4 - 1)/3 + 1 = 5 */
    fg_layer_ir *ir = fgt_load_string("return layer \"c3\" {\n"
                                      "  input = { \"N\", 4, 9, 10, 11 },\n"
                                      "  conv3d { name = \"c3\", out_channels = 8, kernel = { 3, 2, 1 }, stride = { 2, 1, 3 },\n"
                                      "           padding = { 1, 0, 2 }, dilation = { 1, 2, 1 }, groups = 2, bias = false },\n"
                                      "}\n");
    const fg_op *op = &ir->ops[0];
    assert_int_equal(op->kind, FG_OP_CONV3D);
    assert_int_equal(op->spatial, 3);
    FGT_ASSERT_SHAPE(&op->out, 1, 8, 5, 8, 5);
    FGT_ASSERT_PARAM(ir, "c3.weight", 8, 2, 3, 2, 1);
    assert_int_equal(ir->n_params, 1);
    free(ir);

    ir = fgt_load_string("return layer \"c3\" {\n"
                         "  input = { \"N\", 3, 16, 32, 32 },\n"
                         "  conv3d { out_channels = 16, kernel = 3, padding = 1 },\n"
                         "}\n");
    FGT_ASSERT_SHAPE(&ir->ops[0].out, 1, 16, 16, 32, 32);
    FGT_ASSERT_PARAM(ir, "conv.weight", 16, 3, 3, 3, 3);
    FGT_ASSERT_PARAM(ir, "conv.bias", 16);
    free(ir);
}

/* ---- elementwise ----------------------------------------------------------------------------- */

static void every_unary(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string(
        "return layer \"u\" {\n"
        "  input = { \"N\", 2, 6, 5 },\n"
        "  conv2d { out_channels = 3, kernel = 3 },\n"                             /* 3 -> [3, 4, 3] */
        "  relu {}, leaky_relu { negative_slope = 0.2 }, leaky_relu,\n"            /* 4: 1, 2, 3 */
        "  gelu {}, gelu { approximate = \"tanh\" }, sigmoid, tanh {},\n"          /* 5: 4..7 */
        "  softplus { beta = 2, threshold = 7 }, softplus {}, mish {}, silu {}, swish {},\n" /* 6: 8..12 */
        "  hardswish {}, hardsigmoid {}, hardtanh {}, hardtanh { min = -2, max = 3 },\n"   /* 7: 13..16 */
        "  clamp { min = -0.5 }, clamp { max = 4 }, clamp { min = 0, max = 1 },\n"       /* 8: 17..19 */
        "  exp {}, log {}, abs {}, neg {},\n"                                          /* 9: 20..23 */
        "}\n");
    static const fg_op_kind kinds[] = {
        FG_OP_CONV2D,   FG_OP_RELU,      FG_OP_LEAKY_RELU, FG_OP_LEAKY_RELU, FG_OP_GELU,        FG_OP_GELU,
        FG_OP_SIGMOID,  FG_OP_TANH,      FG_OP_SOFTPLUS,   FG_OP_SOFTPLUS,   FG_OP_MISH,        FG_OP_SILU,
        FG_OP_SILU,     FG_OP_HARDSWISH, FG_OP_HARDSIGMOID, FG_OP_HARDTANH,  FG_OP_HARDTANH,    FG_OP_CLAMP,
        FG_OP_CLAMP,    FG_OP_CLAMP,     FG_OP_EXP,        FG_OP_LOG,        FG_OP_ABS,         FG_OP_NEG,
    };
    assert_int_equal(ir->n_ops, (int)(sizeof kinds / sizeof kinds[0]));
    for (int k = 0; k < ir->n_ops; k++) {
        assert_int_equal(ir->ops[k].kind, kinds[k]);
        FGT_ASSERT_SHAPE(&ir->ops[k].out, 1, 3, 4, 3);
        if (k > 0)
            assert_int_equal(fg_op_kind_class(ir->ops[k].kind), FG_CLASS_UNARY);
    }
    assert_int_equal(ir->ops[1].line, 4);
    /* a bare constructor (`leaky_relu` without braces) is never called, so it has no line of
     * its own: it takes the layer's */
    assert_int_equal(ir->ops[3].line, 1);
    assert_int_equal(ir->ops[6].line, 1);
    assert_int_equal(ir->ops[7].line, 5);
    assert_int_equal(ir->ops[23].line, 9);
    assert_true(ir->ops[2].alpha == 0.2);
    assert_true(ir->ops[3].alpha == 0.01); /* PyTorch's default negative_slope */
    assert_false(ir->ops[4].gelu_tanh);
    assert_true(ir->ops[5].gelu_tanh);
    assert_true(ir->ops[8].beta == 2.0 && ir->ops[8].threshold == 7.0);
    assert_true(ir->ops[9].beta == 1.0 && ir->ops[9].threshold == 20.0);
    assert_true(ir->ops[15].has_lo && ir->ops[15].has_hi && ir->ops[15].lo == -1.0 && ir->ops[15].hi == 1.0);
    assert_true(ir->ops[16].lo == -2.0 && ir->ops[16].hi == 3.0);
    assert_true(ir->ops[17].has_lo && !ir->ops[17].has_hi && ir->ops[17].lo == -0.5);
    assert_true(!ir->ops[18].has_lo && ir->ops[18].has_hi && ir->ops[18].hi == 4.0);
    assert_true(ir->ops[19].has_lo && ir->ops[19].has_hi && ir->ops[19].lo == 0.0 && ir->ops[19].hi == 1.0);
    assert_int_equal(ir->n_params, 2); /* only the conv's */
    free(ir);
}

static void binary_operands(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string(
        "return layer \"b\" {\n"
        "  input = { \"N\", 2, 6, 7 },\n"
        "  conv2d { out_channels = 4, kernel = 3, as = \"c\" },\n" /* [4, 4, 5] */
        "  add { scalar = 1.5 },\n"
        "  sub { param = \"per_channel\" },\n"                         /* default [C, 1, 1] */
        "  mul { param = \"per_width\", shape = { 5 } },\n"
        "  div { param = \"per_row\", shape = { 1, 4, 1 } },\n"
        "  min { param = \"full\", shape = { 4, 4, 5 } },\n"
        "  max { value = \"c\" },\n"
        "  min { scalar = -2 },\n"
        "  mul { param = \"per_channel\" },\n" /* reused: keeps its shape */
        "  add { value = \"c\", as = \"sum\" },\n"
        "  sub { value = \"sum\" },\n"
        "}\n");
    static const fg_op_kind kinds[] = {FG_OP_CONV2D, FG_OP_ADD,     FG_OP_SUB,     FG_OP_MUL,
                                       FG_OP_DIV,    FG_OP_MINIMUM, FG_OP_MAXIMUM, FG_OP_MINIMUM,
                                       FG_OP_MUL,    FG_OP_ADD,     FG_OP_SUB};
    assert_int_equal(ir->n_ops, 11);
    for (int k = 0; k < ir->n_ops; k++) {
        assert_int_equal(ir->ops[k].kind, kinds[k]);
        FGT_ASSERT_SHAPE(&ir->ops[k].out, 1, 4, 4, 5);
    }
    assert_int_equal(ir->ops[1].operand, FG_OPERAND_SCALAR);
    assert_true(ir->ops[1].scalar == 1.5);
    assert_int_equal(ir->ops[2].operand, FG_OPERAND_PARAM);
    int pc = FGT_ASSERT_PARAM(ir, "per_channel", 4, 1, 1);
    assert_int_equal(ir->ops[2].operand_param, pc);
    assert_int_equal(ir->ops[3].operand_param, FGT_ASSERT_PARAM(ir, "per_width", 5));
    assert_int_equal(ir->ops[4].operand_param, FGT_ASSERT_PARAM(ir, "per_row", 1, 4, 1));
    assert_int_equal(ir->ops[5].operand_param, FGT_ASSERT_PARAM(ir, "full", 4, 4, 5));
    assert_int_equal(ir->ops[6].operand, FG_OPERAND_VALUE);
    assert_int_equal(ir->ops[6].operand_value, 0);
    assert_int_equal(ir->ops[7].operand, FG_OPERAND_SCALAR);
    assert_true(ir->ops[7].scalar == -2.0);
    assert_int_equal(ir->ops[8].operand_param, pc);
    assert_int_equal(ir->ops[9].operand_value, 0);
    assert_string_equal(ir->ops[9].as, "sum");
    assert_int_equal(ir->ops[10].operand_value, 9);
    assert_string_equal(ir->ops[0].as, "c");
    assert_int_equal(ir->n_params, 6); /* conv.weight, conv.bias and four operands */
    assert_int_equal(ir->params[pc].first_line, 5);
    free(ir);
}

/* ---- normalizations -------------------------------------------------------------------------- */

static void norms(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string(
        "return layer \"n\" {\n"
        "  input = { \"N\", 3, 10, 9 },\n"
        "  conv2d { out_channels = 12, kernel = 3 },\n" /* [12, 8, 7] */
        "  group_norm { groups = 4, eps = 1e-3 },\n"
        "  instance_norm {},\n"
        "  instance_norm { name = \"inorm\", affine = true },\n"
        "  batch_norm { name = \"bn\", momentum = 0 },\n"
        "  batch_norm { name = \"bn_run\", stats = \"running\", affine = false, momentum = 1 },\n"
        "  layer_norm { normalized_shape = { 8, 7 } },\n"
        "  layer_norm { name = \"ln_all\", normalized_shape = { 12, 8, 7 } },\n"
        "  group_norm { name = \"gn2\", groups = 12, affine = false },\n"
        "}\n");
    assert_int_equal(ir->n_ops, 9);
    static const fg_op_kind kinds[] = {FG_OP_CONV2D,     FG_OP_GROUP_NORM, FG_OP_INSTANCE_NORM,
                                       FG_OP_INSTANCE_NORM, FG_OP_BATCH_NORM, FG_OP_BATCH_NORM,
                                       FG_OP_LAYER_NORM,  FG_OP_LAYER_NORM, FG_OP_GROUP_NORM};
    for (int k = 0; k < ir->n_ops; k++) {
        assert_int_equal(ir->ops[k].kind, kinds[k]);
        FGT_ASSERT_SHAPE(&ir->ops[k].out, 1, 12, 8, 7);
    }
    const fg_op *gn = &ir->ops[1];
    assert_string_equal(gn->name, "group_norm");
    assert_int_equal(gn->groups, 4);
    assert_true(gn->eps == 1e-3);
    assert_true(gn->affine);
    assert_int_equal(gn->weight_param, FGT_ASSERT_PARAM(ir, "group_norm.weight", 12));
    assert_int_equal(gn->bias_param, FGT_ASSERT_PARAM(ir, "group_norm.bias", 12));
    assert_true(ir->ops[2].eps == 1e-5);
    assert_false(ir->ops[2].affine); /* InstanceNorm: affine off by default, as in PyTorch */
    assert_int_equal(ir->ops[2].weight_param, -1);
    assert_int_equal(fgt_find_param(ir, "instance_norm.weight"), -1);
    assert_int_equal(ir->ops[3].weight_param, FGT_ASSERT_PARAM(ir, "inorm.weight", 12));
    FGT_ASSERT_PARAM(ir, "inorm.bias", 12);
    assert_false(ir->ops[4].running_stats);
    assert_true(ir->ops[4].has_momentum && ir->ops[4].momentum == 0); /* both ends of 0..1 */
    assert_true(ir->ops[5].has_momentum && ir->ops[5].momentum == 1);
    FGT_ASSERT_PARAM(ir, "bn.weight", 12);
    FGT_ASSERT_PARAM(ir, "bn.bias", 12);
    assert_int_equal(fgt_find_param(ir, "bn.running_mean"), -1);
    const fg_op *run = &ir->ops[5];
    assert_true(run->running_stats);
    assert_false(run->affine);
    assert_int_equal(run->mean_param, FGT_ASSERT_PARAM(ir, "bn_run.running_mean", 12));
    assert_int_equal(run->var_param, FGT_ASSERT_PARAM(ir, "bn_run.running_var", 12));
    assert_int_equal(fgt_find_param(ir, "bn_run.weight"), -1);
    assert_int_equal(ir->ops[6].normalized_rank, 2);
    FGT_ASSERT_PARAM(ir, "layer_norm.weight", 8, 7);
    FGT_ASSERT_PARAM(ir, "layer_norm.bias", 8, 7);
    assert_int_equal(ir->ops[7].normalized_rank, 3);
    FGT_ASSERT_PARAM(ir, "ln_all.weight", 12, 8, 7);
    assert_int_equal(fgt_find_param(ir, "gn2.weight"), -1);
    /* conv (2) + group_norm (2) + inorm (2) + bn (2) + bn_run (2) + two layer norms (4) */
    assert_int_equal(ir->n_params, 14);
    /* what the layer accepts from a BatchNorm's state_dict without reading it: the running
     * statistics of the one with batch statistics, both step counters */
    fg_ignored_state ignored[FG_MAX_IGNORED_STATE];
    assert_int_equal(fg_ir_ignored_state(ir, ignored), 4);
    static const char *const ignored_names[] = {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
                                                "bn_run.num_batches_tracked"};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(ignored[i].name, ignored_names[i]);
        assert_int_equal(ignored[i].rank, i < 2 ? 1 : 0);
        assert_int_equal(ignored[i].int64, i >= 2);
        if (i < 2)
            assert_int_equal(ignored[i].dim, 12);
    }
    {
        /* one module on both statistics: its running statistics are parameters, its
         * counter is listed once; no momentum given: PyTorch's None */
        fg_layer_ir *two = fgt_load_string("return layer \"two\" {\n  input = { \"N\", 3, 10, 9 },\n"
                                           "  conv2d { out_channels = 4, kernel = 3 },\n"
                                           "  batch_norm { name = \"bn\" },\n"
                                           "  batch_norm { name = \"bn\", stats = \"running\" },\n}\n");
        assert_false(two->ops[1].has_momentum);
        assert_int_equal(fg_ir_ignored_state(two, ignored), 1);
        assert_string_equal(ignored[0].name, "bn.num_batches_tracked");
        free(two);
    }

    /* which elements share a statistic */
    fg_stat_layout L;
    fg_norm_stat_layout(&ir->ops[1], &L);
    assert_int_equal(L.channel_group, 3);
    assert_int_equal(L.keys_per_sample, 4);
    assert_int_equal(L.count_per_sample, 3 * 8 * 7);
    assert_int_equal(L.mask, (1u << 2) | (1u << 3));
    assert_false(L.over_batch);
    fg_norm_stat_layout(&ir->ops[2], &L);
    assert_int_equal(L.channel_group, 1);
    assert_int_equal(L.keys_per_sample, 12);
    assert_int_equal(L.count_per_sample, 56);
    fg_norm_stat_layout(&ir->ops[4], &L);
    assert_true(L.over_batch);
    assert_int_equal(L.keys_per_sample, 12);
    assert_int_equal(L.count_per_sample, 56);
    fg_norm_stat_layout(&ir->ops[6], &L); /* over H, W: one statistic per channel */
    assert_int_equal(L.channel_group, 1);
    assert_int_equal(L.keys_per_sample, 12);
    assert_int_equal(L.count_per_sample, 56);
    fg_norm_stat_layout(&ir->ops[7], &L); /* over C, H, W: one per sample */
    assert_int_equal(L.channel_group, 12);
    assert_int_equal(L.keys_per_sample, 1);
    assert_int_equal(L.count_per_sample, 12 * 56);
    fg_norm_stat_layout(&ir->ops[8], &L); /* groups == channels: instance norm */
    assert_int_equal(L.keys_per_sample, 12);
    assert_int_equal(L.count_per_sample, 56);
    free(ir);
}

static void layer_norm_last_dim_only(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"ln\" {\n"
                                      "  input = { \"N\", 2, 5, 6 },\n"
                                      "  conv2d { out_channels = 4, kernel = 1 },\n"
                                      "  layer_norm { normalized_shape = 6, eps = 1e-6 },\n"
                                      "}\n");
    const fg_op *op = &ir->ops[1];
    assert_int_equal(op->normalized_rank, 1);
    assert_true(op->eps == 1e-6);
    FGT_ASSERT_PARAM(ir, "layer_norm.weight", 6);
    fg_stat_layout L;
    fg_norm_stat_layout(op, &L);
    assert_int_equal(L.mask, 1u << 3);
    assert_int_equal(L.channel_group, 1);
    assert_int_equal(L.keys_per_sample, 4 * 5); /* one per (c, h) */
    assert_int_equal(L.count_per_sample, 6);
    free(ir);
}

/* ---- reductions and softmax ------------------------------------------------------------------- */

typedef struct reduce_case {
    const char *op;        /* the spec text of the op */
    fg_op_kind kind;
    unsigned mask;
    bool keepdim;
    int rank;
    int64_t dim[FG_MAX_RANK];
} reduce_case;

/* `ops` after a conv3d whose value is [N, 6, 5, 4, 3] (2 -> 6 channels, kernel 1). */
static fg_layer_ir *after_conv3d(const char *ops)
{
    char src[512];
    snprintf(src, sizeof src,
             "return layer \"r\" {\n  input = { \"N\", 2, 5, 4, 3 },\n  conv3d { out_channels = 6, kernel = 1 },\n"
             "  %s,\n}\n",
             ops);
    return fgt_load_string(src);
}

static void reductions(void **state)
{
    (void)state;
    /* the value reduced: [N, 6, 5, 4, 3] (conv3d 2->6, kernel 1) */
    static const reduce_case cases[] = {
        {"max { dim = 1 }", FG_OP_REDUCE_MAX, 1u << 1, false, 4, {1, 5, 4, 3}},
        {"max { dim = 1, keepdim = true }", FG_OP_REDUCE_MAX, 1u << 1, true, 5, {1, 1, 5, 4, 3}},
        {"min { dim = -1 }", FG_OP_REDUCE_MIN, 1u << 4, false, 4, {1, 6, 5, 4}},
        {"min { dims = { 2, -1 }, keepdim = true }", FG_OP_REDUCE_MIN, (1u << 2) | (1u << 4), true, 5, {1, 6, 1, 4, 1}},
        {"sum { dims = { 1, 2, 3, 4 } }", FG_OP_REDUCE_SUM, 0x1e, false, 1, {1}},
        {"sum { dims = { 4, 3 }, keepdim = true }", FG_OP_REDUCE_SUM, 0x18, true, 5, {1, 6, 5, 1, 1}},
        {"mean { dim = 2 }", FG_OP_REDUCE_MEAN, 1u << 2, false, 4, {1, 6, 4, 3}},
        {"mean { dims = { -4, -3 } }", FG_OP_REDUCE_MEAN, 0x6, false, 3, {1, 4, 3}},
        {"logsumexp { dim = 1, keepdim = true }", FG_OP_LOGSUMEXP, 1u << 1, true, 5, {1, 1, 5, 4, 3}},
        {"logsumexp { dims = { 3 } }", FG_OP_LOGSUMEXP, 1u << 3, false, 4, {1, 6, 5, 3}},
        {"softmax { dim = 1 }", FG_OP_SOFTMAX, 1u << 1, false, 5, {1, 6, 5, 4, 3}},
        {"softmax { dim = -2 }", FG_OP_SOFTMAX, 1u << 3, false, 5, {1, 6, 5, 4, 3}},
        {"global_avg_pool {}", FG_OP_GLOBAL_AVG_POOL, 0x1c, true, 5, {1, 6, 1, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const reduce_case *c = &cases[i];
        fg_layer_ir *ir = after_conv3d(c->op);
        const fg_op *op = &ir->ops[1];
        if (op->kind != c->kind || op->reduce_mask != c->mask || op->keepdim != c->keepdim)
            fail_msg("%s: kind %s mask 0x%x keepdim %d, expected %s mask 0x%x keepdim %d", c->op,
                     fg_op_kind_name(op->kind), op->reduce_mask, op->keepdim, fg_op_kind_name(c->kind), c->mask,
                     c->keepdim);
        fgt_assert_shape(&op->out, c->dim, c->rank, c->op);
        assert_int_equal(ir->n_params, 2);
        free(ir);
    }
}

/* 2D global average pooling and a reduction after it. */
static void global_avg_pool_2d(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"g\" {\n"
                                      "  input = { \"N\", 3, 9, 9 },\n"
                                      "  conv2d { out_channels = 7, kernel = 3 },\n"
                                      "  global_avg_pool {},\n"
                                      "  sum { dim = 1 },\n"
                                      "}\n");
    FGT_ASSERT_SHAPE(&ir->ops[1].out, 1, 7, 1, 1);
    assert_int_equal(ir->ops[1].reduce_mask, 0xc);
    FGT_ASSERT_SHAPE(&ir->ops[2].out, 1, 1, 1);
    free(ir);
}

/* ---- pools -------------------------------------------------------------------------------------- */

static void pools(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string(
        "return layer \"p\" {\n"
        "  input = { \"N\", 2, 19, 17 },\n"
        "  conv2d { out_channels = 4, kernel = 1 },\n"              /* [4, 19, 17] */
        "  max_pool { kernel = 2 },\n"                              /* stride = kernel: [4, 9, 8] */
        "  avg_pool { kernel = 3, stride = 1, padding = 1 },\n"     /* [4, 9, 8] */
        "  max_pool2d { kernel = { 3, 2 }, stride = { 2, 3 }, padding = { 1, 0 } },\n" /* (9+2-3)/2+1=5, (8-2)/3+1=3 */
        "  avg_pool2d { kernel = 2, stride = 1, count_include_pad = false },\n"          /* [4, 4, 2] */
        "}\n");
    FGT_ASSERT_SHAPE(&ir->ops[1].out, 1, 4, 9, 8);
    assert_int_equal(ir->ops[1].kind, FG_OP_MAX_POOL);
    assert_int_equal(ir->ops[1].stride[0], 2);
    assert_int_equal(ir->ops[1].stride[1], 2);
    FGT_ASSERT_SHAPE(&ir->ops[2].out, 1, 4, 9, 8);
    assert_int_equal(ir->ops[2].kind, FG_OP_AVG_POOL);
    assert_true(ir->ops[2].count_include_pad);
    FGT_ASSERT_SHAPE(&ir->ops[3].out, 1, 4, 5, 3);
    assert_int_equal(ir->ops[3].kernel[0], 3);
    assert_int_equal(ir->ops[3].kernel[1], 2);
    assert_int_equal(ir->ops[3].padding[0], 1);
    FGT_ASSERT_SHAPE(&ir->ops[4].out, 1, 4, 4, 2);
    assert_false(ir->ops[4].count_include_pad);
    for (int k = 1; k < 5; k++)
        assert_int_equal(ir->ops[k].spatial, 2);
    assert_int_equal(ir->n_params, 2);
    free(ir);

    ir = fgt_load_string("return layer \"p3\" {\n"
                         "  input = { \"N\", 1, 9, 10, 11 },\n"
                         "  conv3d { out_channels = 2, kernel = 1 },\n"
                         "  max_pool3d { kernel = 2, stride = { 1, 2, 2 }, padding = 1 },\n" /* [2, 10, 6, 6] */
                         "  avg_pool { kernel = { 2, 3, 3 }, count_include_pad = false },\n"  /* [2, 5, 2, 2] */
                         "}\n");
    FGT_ASSERT_SHAPE(&ir->ops[1].out, 1, 2, 10, 6, 6);
    assert_int_equal(ir->ops[1].spatial, 3);
    FGT_ASSERT_SHAPE(&ir->ops[2].out, 1, 2, 5, 2, 2);
    assert_int_equal(ir->ops[2].stride[0], 2);
    assert_int_equal(ir->ops[2].stride[2], 3);
    free(ir);
}

/* ---- shape ops ---------------------------------------------------------------------------------- */

typedef struct shape_case {
    const char *ops;       /* spec text after the conv; the last op is the one checked */
    fg_op_kind kind;       /* its kind */
    int rank;              /* its output shape */
    int64_t dim[FG_MAX_RANK];
    int layout_rank;       /* the layout kernels index it by (fg_value_layout) */
    int64_t layout[FG_MAX_RANK];
} shape_case;

/* flatten, squeeze, unsqueeze and view/reshape as PyTorch shapes them, after a conv3d whose
 * value is [N, 6, 5, 4, 3]: the output shape, and the layout the kernels keep (the value's
 * before the first shape op). */
static void shape_ops(void **state)
{
    (void)state;
#define CONV_OUT 5, {1, 6, 5, 4, 3}
    static const shape_case cases[] = {
        {"flatten {}", FG_OP_FLATTEN, 2, {1, 360}, CONV_OUT},
        {"flatten { start_dim = 2 }", FG_OP_FLATTEN, 3, {1, 6, 60}, CONV_OUT},
        {"flatten { start_dim = -3, end_dim = -2 }", FG_OP_FLATTEN, 4, {1, 6, 20, 3}, CONV_OUT},
        {"flatten { start_dim = 3, end_dim = 3 }", FG_OP_FLATTEN, 5, {1, 6, 5, 4, 3}, CONV_OUT},
        {"flatten { start_dim = 0, end_dim = 0 }", FG_OP_FLATTEN, 5, {1, 6, 5, 4, 3}, CONV_OUT}, /* PyTorch: a no-op */
        {"squeeze { dim = 1 }", FG_OP_SQUEEZE, 5, {1, 6, 5, 4, 3}, CONV_OUT}, /* extent 6: stays */
        {"sum { dim = 1, keepdim = true }, squeeze { dim = 1 }", FG_OP_SQUEEZE, 4, {1, 5, 4, 3}, 5, {1, 1, 5, 4, 3}},
        {"mean { dims = { 2, 3, 4 }, keepdim = true }, squeeze { dims = { -1, -2, 2 } }", FG_OP_SQUEEZE, 2, {1, 6},
         5, {1, 6, 1, 1, 1}},
        {"global_avg_pool {}, squeeze { dim = -1 }, squeeze { dim = -1 }, relu {}", FG_OP_RELU, 3, {1, 6, 1},
         5, {1, 6, 1, 1, 1}},
        {"flatten { start_dim = 2 }, unsqueeze { dim = -1 }", FG_OP_UNSQUEEZE, 4, {1, 6, 60, 1}, CONV_OUT},
        {"flatten {}, unsqueeze { dim = 1 }", FG_OP_UNSQUEEZE, 3, {1, 1, 360}, CONV_OUT},
        {"flatten {}, unsqueeze { dim = -2 }", FG_OP_UNSQUEEZE, 3, {1, 1, 360}, CONV_OUT},
        {"sum { dims = { 1, 2, 3, 4 } }, unsqueeze { dim = 1 }", FG_OP_UNSQUEEZE, 2, {1, 1}, 1, {1}},
        {"view { shape = { \"N\", -1 } }", FG_OP_VIEW, 2, {1, 360}, CONV_OUT},
        {"reshape { shape = { -1, 6, 60 } }", FG_OP_VIEW, 3, {1, 6, 60}, CONV_OUT},
        {"view { shape = { \"N\", 3, -1, 2, 5 } }", FG_OP_VIEW, 5, {1, 3, 12, 2, 5}, CONV_OUT},
        {"sum { dims = { 1, 2, 3, 4 } }, reshape { shape = { \"N\", 1, 1 } }", FG_OP_VIEW, 3, {1, 1, 1}, 1, {1}},
        {"sum { dims = { 1, 2, 3, 4 }, keepdim = true }, flatten {}", FG_OP_FLATTEN, 2, {1, 1}, 5, {1, 1, 1, 1, 1}},
        /* after a shape op: elementwise ops, a value named after it, or one laid out alike */
        {"flatten { as = \"f\" }, exp {}, mul { scalar = 2 }, add { value = \"f\" }", FG_OP_ADD, 2, {1, 360},
         CONV_OUT},
        {"relu { as = \"r\" }, squeeze { dim = 2 }, sub { value = \"r\" }", FG_OP_SUB, 5, {1, 6, 5, 4, 3},
         CONV_OUT},
    };
#undef CONV_OUT
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const shape_case *c = &cases[i];
        fg_layer_ir *ir = after_conv3d(c->ops);
        int last = ir->n_ops - 1;
        const fg_op *op = &ir->ops[last];
        if (op->kind != c->kind)
            fail_msg("%s: the last op is %s, expected %s", c->ops, fg_op_kind_name(op->kind), fg_op_kind_name(c->kind));
        fgt_assert_shape(&op->out, c->dim, c->rank, c->ops);
        fgt_assert_shape(fg_value_layout(ir, last), c->layout, c->layout_rank, c->ops);
        assert_int_equal(fg_shape_sample_count(&op->out), fg_shape_sample_count(fg_value_layout(ir, last)));
        assert_int_equal(ir->n_params, 2); /* shape ops bind nothing */
        free(ir);
    }

    /* what shape inference resolves: flatten's dims, the dims squeeze names and the one
     * unsqueeze inserts (reduce_mask), view's shape as written */
    fg_layer_ir *ir = after_conv3d("flatten { start_dim = -2 },\n" /* [6, 5, 12] */
                                   "  squeeze { dims = { 1, -2 } },\n" /* neither is 1: the same */
                                   "  unsqueeze { dim = -3 },\n"       /* [6, 1, 5, 12] */
                                   "  reshape { shape = { \"N\", 6, -1 } }"); /* [6, 60] */
    assert_int_equal(ir->ops[1].start_dim, 3);
    assert_int_equal(ir->ops[1].end_dim, 4);
    assert_int_equal(ir->ops[1].line, 4);
    assert_int_equal(ir->ops[2].reduce_mask, (1u << 1) | (1u << 2));
    FGT_ASSERT_SHAPE(&ir->ops[2].out, 1, 6, 5, 12);
    assert_int_equal(ir->ops[3].reduce_mask, 1u << 2);
    FGT_ASSERT_SHAPE(&ir->ops[3].out, 1, 6, 1, 5, 12);
    assert_int_equal(ir->ops[4].kind, FG_OP_VIEW);
    assert_int_equal(ir->ops[4].n_list, 3);
    assert_int_equal(ir->ops[4].list[0], FG_VIEW_BATCH);
    assert_int_equal(ir->ops[4].list[1], 6);
    assert_int_equal(ir->ops[4].list[2], -1);
    FGT_ASSERT_SHAPE(&ir->ops[4].out, 1, 6, 60);
    for (int k = 1; k < 5; k++) {
        assert_int_equal(fg_op_kind_class(ir->ops[k].kind), FG_CLASS_SHAPE);
        FGT_ASSERT_SHAPE(fg_value_layout(ir, k), 1, 6, 5, 4, 3);
    }
    free(ir);
}

/* ---- specs as programs: locals, loops and helpers are allowed --------------------------------- */

static void spec_with_locals_and_loops(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("local C = 8\n"
                                      "local ops = { input = { \"N\", 2, 12, 12 }, precision = \"tf32\" }\n"
                                      "ops[1] = conv2d { out_channels = C * 2, kernel = math.max(1, 3) }\n"
                                      "for i = 1, 3 do ops[#ops + 1] = relu {} end\n"
                                      "ops[#ops + 1] = group_norm { groups = C // 2 }\n"
                                      "return layer \"prog\" (ops)\n");
    assert_int_equal(ir->precision, FG_PRECISION_TF32);
    assert_int_equal(ir->n_ops, 5);
    assert_int_equal(ir->ops[0].out_channels, 16);
    assert_int_equal(ir->ops[4].groups, 4);
    FGT_ASSERT_SHAPE(&ir->ops[4].out, 1, 16, 10, 10);
    assert_int_equal(ir->ops[2].line, 4);
    free(ir);
}

/* ---- the reference specs (PROBLEMS.md) ---------------------------------------------------------- */

static void reference_specs(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb79");
    FGT_ASSERT_SHAPE(&ir->input, 1, 3, 16, 32, 32);
    assert_int_equal(ir->n_ops, 6);
    FGT_ASSERT_SHAPE(&ir->ops[0].out, 1, 16, 14, 30, 30);
    assert_int_equal(ir->ops[1].kind, FG_OP_MUL);
    assert_int_equal(ir->ops[2].kind, FG_OP_INSTANCE_NORM);
    assert_int_equal(ir->ops[3].kind, FG_OP_CLAMP);
    assert_true(ir->ops[3].lo == -1.0 && ir->ops[3].hi == 1.0);
    assert_int_equal(ir->ops[4].operand_param, ir->ops[1].operand_param); /* the same tensor */
    assert_int_equal(ir->ops[5].kind, FG_OP_REDUCE_MAX);
    FGT_ASSERT_SHAPE(&ir->ops[5].out, 1, 14, 30, 30);
    FGT_ASSERT_PARAM(ir, "conv.weight", 16, 3, 3, 3, 3);
    FGT_ASSERT_PARAM(ir, "conv.bias", 16);
    FGT_ASSERT_PARAM(ir, "multiplier", 16, 1, 1, 1);
    assert_int_equal(ir->n_params, 3);
    fg_stat_layout L;
    fg_norm_stat_layout(&ir->ops[2], &L);
    assert_int_equal(L.count_per_sample, 12600); /* D*H*W per (n, c) */
    free(ir);

    ir = fgt_load_spec("kb21");
    FGT_ASSERT_SHAPE(&ir->input, 1, 8, 256, 256);
    FGT_ASSERT_SHAPE(&ir->ops[0].out, 1, 32, 254, 254);
    FGT_ASSERT_SHAPE(&ir->ops[4].out, 1, 32, 254, 254);
    assert_int_equal(ir->ops[4].kind, FG_OP_GROUP_NORM);
    assert_int_equal(ir->ops[4].groups, 8);
    FGT_ASSERT_PARAM(ir, "conv.weight", 32, 8, 3, 3);
    FGT_ASSERT_PARAM(ir, "conv.bias", 32);
    FGT_ASSERT_PARAM(ir, "bias", 32, 1, 1);
    FGT_ASSERT_PARAM(ir, "scale", 32, 1, 1);
    FGT_ASSERT_PARAM(ir, "group_norm.weight", 32);
    FGT_ASSERT_PARAM(ir, "group_norm.bias", 32);
    assert_int_equal(ir->n_params, 6);
    fg_norm_stat_layout(&ir->ops[4], &L);
    assert_int_equal(L.count_per_sample, 4 * 254 * 254);
    free(ir);

    ir = fgt_load_spec("kb23");
    FGT_ASSERT_SHAPE(&ir->input, 1, 3, 24, 32, 32);
    FGT_ASSERT_SHAPE(&ir->ops[0].out, 1, 24, 22, 30, 30);
    assert_int_equal(ir->ops[1].groups, 8);
    assert_int_equal(ir->ops[2].kind, FG_OP_REDUCE_MEAN);
    assert_int_equal(ir->ops[2].reduce_mask, 0x1e);
    FGT_ASSERT_SHAPE(&ir->ops[2].out, 1);
    FGT_ASSERT_PARAM(ir, "conv.weight", 24, 3, 3, 3, 3);
    FGT_ASSERT_PARAM(ir, "group_norm.weight", 24);
    FGT_ASSERT_PARAM(ir, "group_norm.bias", 24);
    assert_int_equal(ir->n_params, 4);
    free(ir);

    ir = fgt_load_spec("kb85");
    FGT_ASSERT_SHAPE(&ir->input, 1, 8, 128, 128);
    FGT_ASSERT_SHAPE(&ir->ops[0].out, 1, 64, 126, 126);
    assert_int_equal(ir->ops[1].groups, 16);
    FGT_ASSERT_SHAPE(&ir->ops[3].out, 1, 64, 31, 31);
    assert_int_equal(ir->ops[3].kind, FG_OP_MAX_POOL);
    assert_int_equal(ir->ops[3].stride[0], 4);
    FGT_ASSERT_SHAPE(&ir->ops[4].out, 1, 64, 31, 31);
    assert_true(ir->ops[4].lo == 0.0 && ir->ops[4].hi == 1.0);
    FGT_ASSERT_PARAM(ir, "conv.weight", 64, 8, 3, 3);
    FGT_ASSERT_PARAM(ir, "scale", 64, 1, 1);
    FGT_ASSERT_PARAM(ir, "group_norm.weight", 64);
    assert_int_equal(ir->n_params, 5);
    free(ir);

    ir = fgt_load_spec("kb17");
    FGT_ASSERT_SHAPE(&ir->input, 1, 64, 128, 128);
    FGT_ASSERT_SHAPE(&ir->ops[0].out, 1, 128, 126, 126);
    assert_int_equal(ir->ops[1].kind, FG_OP_INSTANCE_NORM);
    assert_false(ir->ops[1].affine);
    assert_int_equal(ir->ops[2].kind, FG_OP_DIV);
    assert_true(ir->ops[2].scalar == 2.0);
    FGT_ASSERT_SHAPE(&ir->ops[2].out, 1, 128, 126, 126);
    FGT_ASSERT_PARAM(ir, "conv.weight", 128, 64, 3, 3);
    FGT_ASSERT_PARAM(ir, "conv.bias", 128);
    assert_int_equal(ir->n_params, 2);
    free(ir);

    ir = fgt_load_spec("kb92");
    FGT_ASSERT_SHAPE(&ir->input, 1, 8, 128, 128);
    FGT_ASSERT_SHAPE(&ir->ops[0].out, 1, 64, 126, 126);
    assert_string_equal(ir->ops[0].as, "c");
    assert_int_equal(ir->ops[2].kind, FG_OP_TANH);
    assert_int_equal(ir->ops[3].kind, FG_OP_HARDSWISH);
    assert_int_equal(ir->ops[4].kind, FG_OP_ADD);
    assert_int_equal(ir->ops[4].operand_value, 0);
    assert_int_equal(ir->ops[5].kind, FG_OP_LOGSUMEXP);
    assert_true(ir->ops[5].keepdim);
    FGT_ASSERT_SHAPE(&ir->ops[5].out, 1, 1, 126, 126);
    FGT_ASSERT_PARAM(ir, "group_norm.weight", 64);
    FGT_ASSERT_PARAM(ir, "group_norm.bias", 64);
    assert_int_equal(ir->n_params, 4);
    free(ir);
}

static void shape_helpers(void **state)
{
    (void)state;
    fg_shape s = {.rank = 4, .dim = {1, 16, 14, 30}};
    char buf[64];
    assert_string_equal(fg_shape_str(&s, buf, sizeof buf), "[N, 16, 14, 30]");
    assert_int_equal(fg_shape_sample_count(&s), 16 * 14 * 30);
    char small[8];
    fg_shape_str(&s, small, sizeof small); /* truncates, never overflows */
    assert_true(strlen(small) < sizeof small);
    assert_string_equal(fg_op_kind_name(FG_OP_GROUP_NORM), "group_norm");
    assert_string_equal(fg_op_kind_name(FG_OP_REDUCE_MAX), "max");
    assert_string_equal(fg_op_kind_name(FG_OP_MAXIMUM), "max");
    assert_string_equal(fg_op_kind_name((fg_op_kind)999), "?");
    assert_int_equal(fg_op_kind_class(FG_OP_GLOBAL_AVG_POOL), FG_CLASS_REDUCE);
    assert_int_equal(fg_op_kind_class(FG_OP_SOFTMAX), FG_CLASS_SOFTMAX);
    int n;
    const char *const *names = fg_constructor_names(&n);
    assert_true(n >= 40);
    bool has_layer = false, has_swish = false;
    for (int i = 0; i < n; i++) {
        has_layer |= strcmp(names[i], "layer") == 0;
        has_swish |= strcmp(names[i], "swish") == 0;
    }
    assert_true(has_layer && has_swish);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(conv2d_defaults),
        cmocka_unit_test(conv2d_stride_padding_dilation_groups),
        cmocka_unit_test(conv2d_depthwise_and_scalar_fields),
        cmocka_unit_test(conv3d_everything),
        cmocka_unit_test(every_unary),
        cmocka_unit_test(binary_operands),
        cmocka_unit_test(norms),
        cmocka_unit_test(layer_norm_last_dim_only),
        cmocka_unit_test(reductions),
        cmocka_unit_test(global_avg_pool_2d),
        cmocka_unit_test(pools),
        cmocka_unit_test(shape_ops),
        cmocka_unit_test(spec_with_locals_and_loops),
        cmocka_unit_test(reference_specs),
        cmocka_unit_test(shape_helpers),
    };
    char *dir = fgt_tmpdir("shapes-env");
    fgt_isolate_environment(dir);
    int failed = cmocka_run_group_tests_name("shapes", tests, NULL, NULL);
    fgt_rmtree(dir);
    free(dir);
    return failed;
}
