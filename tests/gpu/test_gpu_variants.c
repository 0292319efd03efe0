/* SPDX-License-Identifier: Apache-2.0 */
/* Shape and op variants on the GPU against the CPU float64 reference: a hand-written list that
 * uses every op at least once with non-default conv settings (odd sizes, channel counts that
 * are not multiples of 4, 8 or 32, strides, paddings, dilations, groups, no bias), then layers
 * drawn at random (fixed seed) from the whole op set. Outputs are poisoned before each run.
 *
 * usage: test_gpu_variants [N_RANDOM [NAME_PART]]   (NAME_PART: only the fixed cases whose name
 *        contains it, no random ones; none matching is a failure) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../gen/spec_loader.h"
#include "../channel_norm_specs.h"
#include "../channel_reduce_specs.h"
#include "../prologue_specs.h"
#include "../wgmma_reach_specs.h"
#include "gpu_harness.h"
#include "../../common/accuracy.h"

typedef struct variant {
    const char *name;
    int64_t batch;
    double tol;
    const char *source;
} variant;

#define SPEC(...) #__VA_ARGS__

static const variant fixed[] = {
    {"activations_a", 3, 1e-4, SPEC(return layer "activations_a" {
        input = { "N", 3, 17, 23 },
        conv2d { out_channels = 7, kernel = 3, padding = 1 },
        relu {}, leaky_relu { negative_slope = 0.2 }, gelu {}, gelu { approximate = "tanh" }, sigmoid {},
    })},
    {"activations_b", 2, 1e-4, SPEC(return layer "activations_b" {
        input = { "N", 5, 19, 21 },
        conv2d { out_channels = 13, kernel = { 3, 5 }, stride = 2, padding = { 1, 2 } },
        tanh {}, softplus { beta = 2, threshold = 1 }, mish {}, silu {}, hardswish {}, hardsigmoid {},
        hardtanh { min = -0.5, max = 0.75 }, clamp { min = -0.4 }, neg {}, abs {},
        add { scalar = 0.5 }, log {}, exp {},
    })},
    {"binary_operands", 3, 1e-4, SPEC(return layer "binary_operands" {
        input = { "N", 4, 15, 15 },
        conv2d { out_channels = 6, kernel = 3, dilation = 2, bias = false, as = "c" },
        add { param = "bias2", shape = { 6, 1, 1 } },
        mul { param = "rowscale", shape = { 11, 1 } },
        sub { value = "c" },
        div { scalar = 3.0 },
        max { param = "floor", shape = { 6, 1, 1 } },
        min { scalar = 0.8 },
        mul { value = "c" },
    })},
    {"grouped_conv_group_norm", 3, 1e-4, SPEC(return layer "grouped_conv_group_norm" {
        input = { "N", 6, 20, 18 },
        conv2d { out_channels = 9, kernel = 3, groups = 3, stride = { 1, 2 } },
        group_norm { groups = 3 },
        relu {},
    })},
    {"instance_norm_affine", 2, 1e-4, SPEC(return layer "instance_norm_affine" {
        input = { "N", 3, 33, 31 },
        conv2d { out_channels = 10, kernel = 4 },
        instance_norm { affine = true, eps = 1e-3 },
    })},
    {"batch_norm_batch_stats", 5, 1e-4, SPEC(return layer "batch_norm_batch_stats" {
        input = { "N", 3, 12, 14 },
        conv2d { out_channels = 5, kernel = 3 },
        batch_norm { name = "bn" },
        sigmoid {},
    })},
    {"batch_norm_running", 3, 1e-4, SPEC(return layer "batch_norm_running" {
        input = { "N", 3, 12, 14 },
        conv2d { out_channels = 5, kernel = 3 },
        batch_norm { name = "bn", stats = "running" },
        tanh {},
    })},
    {"layer_norm_hw", 2, 1e-4, SPEC(return layer "layer_norm_hw" {
        input = { "N", 2, 14, 12 },
        conv2d { out_channels = 3, kernel = 3 },
        layer_norm { normalized_shape = { 12, 10 } },
    })},
    {"layer_norm_chw", 2, 1e-4, SPEC(return layer "layer_norm_chw" {
        input = { "N", 2, 9, 9 },
        conv2d { out_channels = 7, kernel = 2 },
        layer_norm { normalized_shape = { 7, 8, 8 }, affine = false },
        relu {},
    })},
    {"reduce_max_min_sum", 3, 1e-4, SPEC(return layer "reduce_max_min_sum" {
        input = { "N", 3, 13, 11 },
        conv2d { out_channels = 5, kernel = 3 },
        max { dims = { 2 }, keepdim = true },
        min { dim = 1 },
        sum { dim = -1 },
    })},
    {"mean_big_accumulated", 2, 1e-4, SPEC(return layer "mean_big_accumulated" {
        input = { "N", 3, 40, 40 },
        conv2d { out_channels = 4, kernel = 3 },
        mean { dims = { 1, 2, 3 } },
    })},
    {"logsumexp_small_and_softmax", 3, 1e-4, SPEC(return layer "logsumexp_small_and_softmax" {
        input = { "N", 3, 10, 12 },
        conv2d { out_channels = 6, kernel = 3 },
        softmax { dim = 1 },
        logsumexp { dim = 3, keepdim = true },
    })},
    {"logsumexp_big", 2, 1e-4, SPEC(return layer "logsumexp_big" {
        input = { "N", 2, 36, 36 },
        conv2d { out_channels = 3, kernel = 3 },
        logsumexp { dims = { 2, 3 } },
    })},
    {"softmax_spatial", 2, 1e-4, SPEC(return layer "softmax_spatial" {
        input = { "N", 2, 12, 40 },
        conv2d { out_channels = 3, kernel = 3 },
        softmax { dim = 3 },
    })},
    {"max_big_then_ops", 2, 1e-4, SPEC(return layer "max_big_then_ops" {
        input = { "N", 2, 40, 40 },
        conv2d { out_channels = 5, kernel = 3 },
        max { dims = { 2, 3 }, keepdim = true },
        mul { scalar = 2.0 },
        min { dims = { 1 } },
    })},
    {"pools_2d", 3, 1e-4, SPEC(return layer "pools_2d" {
        input = { "N", 3, 27, 29 },
        conv2d { out_channels = 6, kernel = 3 },
        max_pool { kernel = 2 },
        avg_pool { kernel = 3, stride = 2, padding = 1, count_include_pad = false },
        avg_pool2d { kernel = 2, stride = 1 },
    })},
    {"group_norm_then_pool", 2, 1e-4, SPEC(return layer "group_norm_then_pool" {
        input = { "N", 4, 30, 30 },
        conv2d { out_channels = 8, kernel = 3 },
        group_norm { groups = 4 },
        max_pool { kernel = 4, padding = 1 },
        global_avg_pool {},
    })},
    {"conv3d_strided_dilated_grouped", 3, 1e-4, SPEC(return layer "conv3d_strided_dilated_grouped" {
        input = { "N", 4, 11, 13, 12 },
        conv3d { out_channels = 6, kernel = { 3, 2, 3 }, stride = { 2, 1, 2 }, padding = 1, dilation = { 1, 2, 1 },
                 groups = 2, bias = false },
        instance_norm {},
        max_pool3d { kernel = 2 },
        avg_pool3d { kernel = { 1, 2, 2 } },
    })},
    {"conv3d_softmax_channels", 2, 1e-4, SPEC(return layer "conv3d_softmax_channels" {
        input = { "N", 2, 7, 9, 8 },
        conv3d { out_channels = 5, kernel = 3 },
        softmax { dim = 1 },
        sum { dims = { 1 }, keepdim = true },
    })},
    {"norm_after_norm", 2, 1e-4, SPEC(return layer "norm_after_norm" {
        input = { "N", 3, 20, 20 },
        conv2d { out_channels = 8, kernel = 3 },
        group_norm { groups = 2 },
        relu {},
        instance_norm {},
        gelu {},
    })},
    {"recompute_strategy", 3, 1e-4, SPEC(return layer "recompute_strategy" {
        input = { "N", 2, 24, 22 },
        strategy = "recompute",
        conv2d { out_channels = 5, kernel = 3 },
        add { scalar = 0.25 },
        group_norm { groups = 5 },
        hardswish {},
    })},
    /* the channel-sums rule (gen/planner.c, channel_sums_reduction): one conv pass feeding fp64
     * moments per (sample, channel), one map pass computing the reduction from them */
    {"channel_sums_gn_mean_all_3d", 3, 1e-4, SPEC(return layer "channel_sums_gn_mean_all_3d" {
        input = { "N", 3, 10, 12, 13 },
        conv3d { out_channels = 16, kernel = 3 },
        group_norm { groups = 4 },
        mean { dims = { 1, 2, 3, 4 } },
    })},
    /* an instance norm's own channel mean cancels (each output is beta * scale + 0.5 whatever the
     * conv computes): this case checks the affine ops' parameters; the others the moments */
    {"channel_sums_in_mul_spatial_2d", 4, 1e-4, SPEC(return layer "channel_sums_in_mul_spatial_2d" {
        input = { "N", 5, 19, 17 },
        conv2d { out_channels = 24, kernel = 3, padding = 1 },
        instance_norm { affine = true },
        mul { param = "scale", shape = { 24, 1, 1 } },
        add { scalar = 0.5 },
        mean { dims = { 2, 3 } },
    })},
    {"channel_sums_gn_sum_keepdim_2d", 2, 1e-4, SPEC(return layer "channel_sums_gn_sum_keepdim_2d" {
        input = { "N", 4, 21, 23 },
        conv2d { out_channels = 16, kernel = 3, bias = false },
        mul { scalar = 1.5 },
        group_norm { groups = 8 },
        div { param = "d", shape = { 16, 1, 1 } },
        sub { scalar = 0.1 },
        sum { dims = { 2, 3 }, keepdim = true },
        tanh {},
    })},
    {"channel_sums_bn_batch_stats_gap", 5, 1e-4, SPEC(return layer "channel_sums_bn_batch_stats_gap" {
        input = { "N", 6, 25, 25 },
        conv2d { out_channels = 12, kernel = 3, stride = 2 },
        batch_norm { name = "bn" },
        global_avg_pool {},
        flatten {},
    })},
    {"residual_after_norm", 2, 1e-4, SPEC(return layer "residual_after_norm" {
        input = { "N", 3, 16, 16 },
        conv2d { out_channels = 8, kernel = 3 },
        relu { as = "r" },
        group_norm { groups = 4 },
        add { value = "r" },
        instance_norm {},
        sub { value = "r" },
    })},
    /* statistics of values far above their spread (mean/spread ~200): float partial sums of x
     * and x^2 lose the variance there (bench/NOTES.md v38); each way of gathering moments once:
     * the conv epilogue's per-channel slots, recompute, resident, a per-pixel key, a map pass */
    {"far_from_zero_group_norm", 2, 1e-4, SPEC(return layer "far_from_zero_group_norm" {
        input = { "N", 16, 24, 24 },
        conv2d { out_channels = 32, kernel = 3, padding = 1 },
        add { scalar = 100 },
        group_norm { groups = 8 },
    })},
    {"far_from_zero_instance_norm_recompute", 2, 1e-4, SPEC(return layer "far_from_zero_instance_norm_recompute" {
        input = { "N", 8, 20, 22 },
        strategy = "recompute",
        conv2d { out_channels = 24, kernel = 3 },
        add { scalar = -100 },
        instance_norm {},
    })},
    {"far_from_zero_resident", 2, 1e-4, SPEC(return layer "far_from_zero_resident" {
        input = { "N", 8, 40, 38 },
        strategy = "resident",
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
        add { scalar = 100 },
        group_norm { groups = 4 },
    })},
    {"far_from_zero_layer_norm_channels", 2, 1e-4, SPEC(return layer "far_from_zero_layer_norm_channels" {
        input = { "N", 16, 12, 14 },
        conv2d { out_channels = 48, kernel = 3, padding = 1 },
        add { scalar = 100 },
        layer_norm { dim = 1 },
    })},
    {"far_from_zero_norm_after_norm", 2, 1e-4, SPEC(return layer "far_from_zero_norm_after_norm" {
        input = { "N", 8, 20, 20 },
        conv2d { out_channels = 16, kernel = 3 },
        group_norm { groups = 4 },
        mul { scalar = 0.01 },
        add { scalar = 2 },
        instance_norm {},
    })},
    {"conv_only_1x1_stride", 4, 1e-4, SPEC(return layer "conv_only_1x1_stride" {
        input = { "N", 33, 9, 10 },
        conv2d { out_channels = 35, kernel = 1, stride = 3 },
    })},
    {"resident_kb79_like", 3, 1e-4, SPEC(return layer "resident_kb79_like" {
        input = { "N", 3, 10, 18, 17 },
        strategy = "resident",
        conv3d { out_channels = 16, kernel = 3 },
        mul { param = "multiplier", shape = { 16, 1, 1, 1 } },
        instance_norm {},
        clamp { min = -1.0, max = 1.0 },
        mul { param = "multiplier" },
        max { dim = 1 },
    })},
    {"resident_group_norm_cluster", 2, 1e-4, SPEC(return layer "resident_group_norm_cluster" {
        input = { "N", 8, 130, 129 },
        strategy = "resident",
        conv2d { out_channels = 16, kernel = 3 },
        add { param = "bias", shape = { 16, 1, 1 } },
        sigmoid {},
        group_norm { groups = 4 },
    })},
    {"resident_logsumexp_keepdim", 2, 1e-4, SPEC(return layer "resident_logsumexp_keepdim" {
        input = { "N", 4, 40, 38 },
        strategy = "resident",
        conv2d { out_channels = 12, kernel = 3, padding = 1, as = "c" },
        group_norm { groups = 3 },
        tanh {},
        add { value = "c" },
        logsumexp { dim = 1, keepdim = true },
        mul { scalar = 0.5 },
    })},
    /* precision tf32 with 32 outputs: one TF32 product (wgmma on sm_90a, cuDNN elsewhere); with
     * fewer the exact engines run it on sm_90a (planner.c, tf32_stays_exact) */
    {"tf32_cudnn_path", 2, FG_BAR_TF32, SPEC(return layer "tf32_cudnn_path" {
        input = { "N", 16, 20, 20 },
        precision = "tf32",
        conv2d { out_channels = 32, kernel = 3 },
        instance_norm {},
        div { scalar = 2.0 },
    })},
    {"tf32_cudnn_conv3d_max", 2, FG_BAR_TF32, SPEC(return layer "tf32_cudnn_conv3d_max" {
        input = { "N", 3, 8, 10, 10 },
        precision = "tf32",
        conv3d { out_channels = 16, kernel = 3 },
        mul { param = "m", shape = { 16, 1, 1, 1 } },
        instance_norm {},
        max { dim = 1 },
    })},
    /* shape ops (no kernel code): the output in its new shape, after every kind of pass */
    {"shape_classifier_head", 3, 1e-4, SPEC(return layer "shape_classifier_head" {
        input = { "N", 3, 29, 27 },
        conv2d { out_channels = 10, kernel = 3, stride = 2, padding = 1 },
        relu {},
        global_avg_pool {},
        squeeze { dim = -1 },
        squeeze { dim = -1 },
    })},
    {"shape_conv3d_pool_flatten", 2, 1e-4, SPEC(return layer "shape_conv3d_pool_flatten" {
        input = { "N", 2, 7, 12, 11 },
        conv3d { out_channels = 6, kernel = 3, padding = 1, bias = false },
        max_pool3d { kernel = 2 },
        flatten { as = "f" },
        tanh {},
        mul { value = "f" },
        unsqueeze { dim = 1 },
    })},
    {"shape_big_mean_squeeze", 2, 1e-4, SPEC(return layer "shape_big_mean_squeeze" {
        input = { "N", 4, 45, 41 },
        conv2d { out_channels = 5, kernel = 3 },
        mean { dims = { 2, 3 }, keepdim = true },
        squeeze { dims = { 2, 3 } },
        add { scalar = 0.25 },
    })},
    {"shape_recompute_view", 3, 1e-4, SPEC(return layer "shape_recompute_view" {
        input = { "N", 3, 20, 22 },
        strategy = "recompute",
        conv2d { out_channels = 8, kernel = 3 },
        instance_norm {},
        view { shape = { "N", 2, -1, 20 } },
        relu {},
    })},
    {"shape_resident_reshape", 2, 1e-4, SPEC(return layer "shape_resident_reshape" {
        input = { "N", 3, 10, 18, 17 },
        strategy = "resident",
        conv3d { out_channels = 16, kernel = 3 },
        instance_norm {},
        reshape { shape = { -1, 4, 4, 128, 15 } },
        clamp { min = -1.0, max = 1.0 },
        flatten { start_dim = 2 },
    })},
    /* narrow groups in tf32 take the exact conv pass (planner.c, narrow_groups): fp32's bar */
    {"tf32_depthwise_exact", 2, 1e-4, SPEC(return layer "tf32_depthwise_exact" {
        input = { "N", 12, 14, 14 },
        precision = "tf32",
        conv2d { out_channels = 12, kernel = 3, padding = 1, groups = 12 },
        instance_norm {},
        gelu {},
    })},
    /* batch_norm on running statistics right after the conv: folded into its weights and bias
     * when they are bound (gen/fold.h), against the reference of the unfolded layer; then
     * the same norm where it cannot be folded, inline */
    {"batch_norm_folded_3d_grouped", 3, 1e-4, SPEC(return layer "batch_norm_folded_3d_grouped" {
        input = { "N", 4, 7, 11, 10 },
        conv3d { out_channels = 6, kernel = { 2, 3, 3 }, stride = { 1, 2, 1 }, padding = 1, groups = 2, bias = false },
        batch_norm { name = "bn", stats = "running", momentum = 0.1 },
        relu {},
    })},
    {"batch_norm_folded_no_affine_pool", 2, 1e-4, SPEC(return layer "batch_norm_folded_no_affine_pool" {
        input = { "N", 5, 19, 17 },
        conv2d { out_channels = 7, kernel = 3, dilation = 2 },
        batch_norm { name = "bn", stats = "running", affine = false, eps = 1e-3 },
        max_pool { kernel = 2 },
        tanh {},
    })},
    {"batch_norm_folded_then_norm", 3, 1e-4, SPEC(return layer "batch_norm_folded_then_norm" {
        input = { "N", 3, 21, 20 },
        conv2d { out_channels = 8, kernel = 3, padding = 1 },
        batch_norm { name = "bn", stats = "running" },
        silu { as = "s" },
        group_norm { groups = 2 },
        add { value = "s" },
    })},
    {"batch_norm_folded_wgmma", 2, 1e-4, SPEC(return layer "batch_norm_folded_wgmma" {
        input = { "N", 16, 30, 34 },
        conv2d { out_channels = 32, kernel = 3, padding = 1, bias = false },
        batch_norm { name = "bn", stats = "running" },
        relu {},
    })},
    {"batch_norm_folded_tf32_cudnn", 2, FG_BAR_TF32, SPEC(return layer "batch_norm_folded_tf32_cudnn" {
        input = { "N", 16, 20, 20 },
        precision = "tf32",
        conv2d { out_channels = 32, kernel = 3 },
        batch_norm { name = "bn", stats = "running" },
        relu {},
    })},
    {"batch_norm_folded_resident", 2, 1e-4, SPEC(return layer "batch_norm_folded_resident" {
        input = { "N", 3, 18, 17 },
        strategy = "resident",
        conv2d { out_channels = 8, kernel = 3, padding = 1 },
        batch_norm { name = "bn", stats = "running" },
        relu {},
        group_norm { groups = 4 },
    })},
    {"batch_norm_running_after_relu", 3, 1e-4, SPEC(return layer "batch_norm_running_after_relu" {
        input = { "N", 3, 12, 14 },
        conv2d { out_channels = 5, kernel = 3 },
        relu {},
        batch_norm { name = "bn", stats = "running" },
        sigmoid {},
    })},
    {"batch_norm_running_residual", 2, 1e-4, SPEC(return layer "batch_norm_running_residual" {
        input = { "N", 3, 12, 14 },
        conv2d { out_channels = 5, kernel = 3, as = "c" },
        batch_norm { name = "bn", stats = "running", affine = false },
        add { value = "c" },
    })},
};

/* Half-precision input and output (dtype = "bf16" / "fp16"): each conv engine forced
 * (FUSEGEN_CONV_ENGINE in the case's own context; "wgmma" needs sm_90a), each strategy, a
 * norm epilogue, a channel reduction, the map pass's vectorized and scalar stores, the conv
 * epilogue's paired stores at an odd output offset, and precision "tf32" (no cuDNN for half
 * layers). Compared with the float64 reference rounded to the dtype, within 1 ulp of the
 * dtype plus tol (gpu_harness.h). */
typedef struct half_variant {
    const char *name;
    const char *engine; /* FUSEGEN_CONV_ENGINE, NULL: the planner's choice */
    int64_t batch;
    int out_offset;     /* elements of the dtype */
    double tol;         /* added to 1 ulp of the dtype */
    const char *source;
} half_variant;

static const half_variant halves[] = {
    {"half_bf16_fma_group_norm", "fma", 3, 0, 1e-4, SPEC(return layer "half_bf16_fma_group_norm" {
        input = { "N", 6, 21, 19 },
        dtype = "bf16",
        conv2d { out_channels = 12, kernel = 3, padding = 1 },
        group_norm { groups = 3 },
        relu {},
    })},
    {"half_fp16_mma_channel_max", "mma", 2, 0, 1e-4, SPEC(return layer "half_fp16_mma_channel_max" {
        input = { "N", 8, 30, 34 },
        dtype = "fp16",
        conv2d { out_channels = 32, kernel = 3 },
        instance_norm {},
        max { dim = 1 },
    })},
    {"half_bf16_wgmma_logsumexp", "wgmma", 2, 0, 1e-4, SPEC(return layer "half_bf16_wgmma_logsumexp" {
        input = { "N", 16, 24, 26 },
        dtype = "bf16",
        conv2d { out_channels = 64, kernel = 3, padding = 1, as = "c" },
        group_norm { groups = 16 },
        tanh {},
        add { value = "c" },
        logsumexp { dim = 1, keepdim = true },
    })},
    {"half_fp16_wgmma_conv_only", "wgmma", 2, 1, 1e-4, SPEC(return layer "half_fp16_wgmma_conv_only" {
        input = { "N", 32, 20, 20 },
        dtype = "fp16",
        conv2d { out_channels = 64, kernel = 1 },
    })},
    {"half_bf16_fma_pairs_odd_offset", "fma", 3, 1, 1e-4, SPEC(return layer "half_bf16_fma_pairs_odd_offset" {
        input = { "N", 3, 18, 22 },
        dtype = "bf16",
        conv2d { out_channels = 5, kernel = 3, padding = 1 },
        sigmoid {},
    })},
    {"half_bf16_mma_pairs", "mma", 2, 0, 1e-4, SPEC(return layer "half_bf16_mma_pairs" {
        input = { "N", 8, 22, 26 },
        dtype = "bf16",
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
        leaky_relu { negative_slope = 0.1 },
    })},
    {"half_fp16_mma_pairs_odd_offset", "mma", 3, 1, 1e-4, SPEC(return layer "half_fp16_mma_pairs_odd_offset" {
        input = { "N", 8, 22, 26 },
        dtype = "fp16",
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
        silu {},
    })},
    {"half_fp16_mma_map_scalar", "mma", 2, 3, 1e-4, SPEC(return layer "half_fp16_mma_map_scalar" {
        input = { "N", 8, 17, 19 },
        dtype = "fp16",
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
        batch_norm { name = "bn" },
        hardswish {},
    })},
    {"half_fp16_recompute_mean", NULL, 2, 0, 1e-4, SPEC(return layer "half_fp16_recompute_mean" {
        input = { "N", 3, 10, 18, 18 },
        dtype = "fp16",
        strategy = "recompute",
        conv3d { out_channels = 12, kernel = 3 },
        group_norm { groups = 4 },
        mean { dims = { 1, 2, 3, 4 } },
    })},
    /* the channel-sums rule on the wgmma engine: its epilogue's per-channel statistics slots feed
     * moments keyed per (sample, channel) */
    {"half_bf16_wgmma_channel_sums", "wgmma", 3, 0, 1e-4, SPEC(return layer "half_bf16_wgmma_channel_sums" {
        input = { "N", 16, 19, 17 },
        dtype = "bf16",
        conv2d { out_channels = 32, kernel = 3, padding = 1 },
        instance_norm { affine = true },
        mul { param = "scale", shape = { 32, 1, 1 } },
        mean { dims = { 2, 3 } },
    })},
    {"half_bf16_resident_channel_max", NULL, 2, 0, 1e-4, SPEC(return layer "half_bf16_resident_channel_max" {
        input = { "N", 3, 8, 20, 20 },
        dtype = "bf16",
        strategy = "resident",
        conv3d { out_channels = 16, kernel = 3 },
        mul { param = "m", shape = { 16, 1, 1, 1 } },
        instance_norm {},
        clamp { min = -1.0, max = 1.0 },
        max { dim = 1 },
    })},
    /* on sm_90a this runs on wgmma with bf16 operands, the weights rounded once to bf16: the
     * tf32 bar scaled by bf16's rounding (the wgmma cases below say why) */
    {"half_bf16_tf32_no_cudnn", NULL, 2, 0, FG_BAR_TF32_BF16, SPEC(return layer "half_bf16_tf32_no_cudnn" {
        input = { "N", 16, 20, 20 },
        dtype = "bf16",
        precision = "tf32",
        conv2d { out_channels = 24, kernel = 3 },
        relu {},
    })},
    /* The wgmma engine on half operands (wgmma m64nNk16 on the layer's dtype; docs/design.md):
     * the input packed as it is, the weights split into hi + lo in the dtype for precision fp32
     * (bar: 1e-4 + 1 ulp of the dtype, as every half case; the split carries each weight to
     * 2^-16 of itself in bf16, to 2^-22 or 2^-25 absolute in fp16: tests/test_half_split.c)
     * or rounded once for tf32. The tf32 bar is the TF32 cases' 5e-3 scaled by the weight
     * rounding: TF32 rounds x and w to 11 significant bits; fp16 rounds only w, to 11 bits
     * (5e-3 holds); bf16 rounds w to 8 bits, 2^3 times coarser (4e-2: common/accuracy.h,
     * FG_BAR_TF32 and FG_BAR_TF32_BF16, which `fusegen run --check` applies too). Each shape below also
     * checks a packing detail: channels padded to 8 a tap (3 -> 8, 12 -> 16), 2 channel
     * blocks (200 channels), stride 2, split K at batch 1, channels-last input. */
    {"half_bf16_wgmma_exact_group_norm", "wgmma", 2, 0, 1e-4, SPEC(return layer "half_bf16_wgmma_exact_group_norm" {
        input = { "N", 64, 28, 28 },
        dtype = "bf16",
        conv2d { out_channels = 128, kernel = 3, padding = 1 },
        group_norm { groups = 8 },
        silu {},
    })},
    {"half_fp16_wgmma_exact_stride2", "wgmma", 3, 1, 1e-4, SPEC(return layer "half_fp16_wgmma_exact_stride2" {
        input = { "N", 48, 33, 31 },
        dtype = "fp16",
        conv2d { out_channels = 200, kernel = 3, stride = 2, padding = 1 },
        gelu {},
    })},
    {"half_bf16_wgmma_tf32", "wgmma", 2, 0, FG_BAR_TF32_BF16, SPEC(return layer "half_bf16_wgmma_tf32" {
        input = { "N", 64, 20, 22 },
        dtype = "bf16",
        precision = "tf32",
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
        relu {},
    })},
    {"half_fp16_wgmma_tf32", "wgmma", 2, 1, FG_BAR_TF32, SPEC(return layer "half_fp16_wgmma_tf32" {
        input = { "N", 32, 19, 21 },
        dtype = "fp16",
        precision = "tf32",
        conv2d { out_channels = 80, kernel = 3 },
        tanh {},
    })},
    {"half_bf16_wgmma_3d_exact", "wgmma", 2, 0, 1e-4, SPEC(return layer "half_bf16_wgmma_3d_exact" {
        input = { "N", 3, 10, 18, 18 },
        dtype = "bf16",
        conv3d { out_channels = 32, kernel = 3, padding = 1 },
        instance_norm {},
        relu {},
    })},
    {"half_fp16_wgmma_3d_exact", "wgmma", 2, 0, 1e-4, SPEC(return layer "half_fp16_wgmma_3d_exact" {
        input = { "N", 12, 8, 12, 12 },
        dtype = "fp16",
        conv3d { out_channels = 48, kernel = 3 },
        mul { param = "m", shape = { 48, 1, 1, 1 } },
    })},
    /* batch 1, 256 channels on 14x14: 4 tiles, 36 K chunks of 64: split K in 4 */
    {"half_bf16_wgmma_split_k", NULL, 1, 0, 1e-4, SPEC(return layer "half_bf16_wgmma_split_k" {
        input = { "N", 256, 14, 14 },
        dtype = "bf16",
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
        relu {},
    })},
    /* one tile (100 pixels x 128 channels) at batch 1: split K in 4 of 9 chunks */
    {"half_fp16_wgmma_split_k_tf32", NULL, 1, 0, FG_BAR_TF32, SPEC(return layer "half_fp16_wgmma_split_k_tf32" {
        input = { "N", 256, 10, 10 },
        dtype = "fp16",
        precision = "tf32",
        conv2d { out_channels = 128, kernel = 3, padding = 1 },
        relu {},
    })},
};

/* Channels-last input and output (layout = "channels_last"): each conv engine forced, a norm
 * epilogue (materialize and recompute), a pool after the conv, a keepdim channel reduction,
 * groups and odd shapes, bf16/fp16 with it, resident, an odd output offset. The harness
 * uploads the input as it is (its memory is N(D)HWC for these layers) and the CPU reference
 * (fg_layer_run_cpu) reads and writes the same memory in the same layout. */
static const half_variant layouts[] = {
    {"cl_fma_group_norm", "fma", 3, 0, 1e-4, SPEC(return layer "cl_fma_group_norm" {
        input = { "N", 6, 21, 19 },
        layout = "channels_last",
        conv2d { out_channels = 12, kernel = 3, padding = 1, groups = 3 },
        group_norm { groups = 3 },
        relu {},
    })},
    {"cl_mma_max_pool", "mma", 2, 0, 1e-4, SPEC(return layer "cl_mma_max_pool" {
        input = { "N", 8, 30, 34 },
        layout = "channels_last",
        conv2d { out_channels = 32, kernel = 3 },
        max_pool { kernel = 2 },
        clamp { min = -0.5, max = 0.5 },
    })},
    {"cl_wgmma_logsumexp", "wgmma", 2, 0, 1e-4, SPEC(return layer "cl_wgmma_logsumexp" {
        input = { "N", 16, 24, 26 },
        layout = "channels_last",
        conv2d { out_channels = 64, kernel = 3, padding = 1, as = "c" },
        group_norm { groups = 16 },
        tanh {},
        add { value = "c" },
        logsumexp { dim = 1, keepdim = true },
    })},
    {"cl_wgmma_conv_only_offset", "wgmma", 2, 1, 1e-4, SPEC(return layer "cl_wgmma_conv_only_offset" {
        input = { "N", 32, 20, 20 },
        layout = "channels_last",
        conv2d { out_channels = 64, kernel = 1, groups = 2 },
    })},
    {"cl_fma_odd_stride", "fma", 3, 1, 1e-4, SPEC(return layer "cl_fma_odd_stride" {
        input = { "N", 3, 17, 23 },
        layout = "channels_last",
        conv2d { out_channels = 5, kernel = 3, stride = 2, padding = 1 },
        sigmoid {},
    })},
    {"cl_mma_batch_norm_running", "mma", 2, 0, 1e-4, SPEC(return layer "cl_mma_batch_norm_running" {
        input = { "N", 8, 22, 26 },
        layout = "channels_last",
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
        batch_norm { name = "bn", stats = "running" },
        hardswish {},
    })},
    {"cl_bf16_mma_group_norm", "mma", 2, 0, 1e-4, SPEC(return layer "cl_bf16_mma_group_norm" {
        input = { "N", 8, 17, 19 },
        layout = "channels_last",
        dtype = "bf16",
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
        group_norm { groups = 4 },
        avg_pool { kernel = 2 },
    })},
    {"cl_bf16_wgmma", "wgmma", 2, 1, 1e-4, SPEC(return layer "cl_bf16_wgmma" {
        input = { "N", 16, 20, 22 },
        layout = "channels_last",
        dtype = "bf16",
        conv2d { out_channels = 32, kernel = 3 },
        silu {},
    })},
    /* 40 channels in one tile: its second 32-channel chunk holds 8, the lanes past them store
     * nothing (with FUSEGEN_WGMMA_EPI_VEC=2 a lane's 8-channel vectors, bench/NOTES.md v48: the
     * first cut stored those lanes' zeros at the output's start); odd offset: the vectors'
     * unaligned fallback; fp32: vectors of 4 */
    {"cl_bf16_wgmma_40_offset", "wgmma", 3, 1, 1e-4, SPEC(return layer "cl_bf16_wgmma_40_offset" {
        input = { "N", 24, 20, 20 },
        layout = "channels_last",
        dtype = "bf16",
        conv2d { out_channels = 40, kernel = 3, padding = 1 },
        mul { param = "gamma", shape = { 40, 1, 1 } },
        relu {},
    })},
    {"cl_wgmma_40", "wgmma", 3, 0, 1e-4, SPEC(return layer "cl_wgmma_40" {
        input = { "N", 24, 20, 20 },
        layout = "channels_last",
        conv2d { out_channels = 40, kernel = 3, padding = 1 },
        relu {},
    })},
    /* half operands on wgmma with a channels-last input (its packing pass is a near copy of
     * 16-bit elements): fp16 exact with groups (12 channels a group, padded to 16), bf16 tf32
     * (the bar of the halves' tf32 cases) */
    {"cl_fp16_wgmma_exact_groups", "wgmma", 2, 1, 1e-4, SPEC(return layer "cl_fp16_wgmma_exact_groups" {
        input = { "N", 24, 18, 20 },
        layout = "channels_last",
        dtype = "fp16",
        conv2d { out_channels = 64, kernel = 3, padding = 1, groups = 2 },
        group_norm { groups = 4 },
    })},
    {"cl_bf16_wgmma_tf32", "wgmma", 2, 0, FG_BAR_TF32_BF16, SPEC(return layer "cl_bf16_wgmma_tf32" {
        input = { "N", 32, 16, 18 },
        layout = "channels_last",
        dtype = "bf16",
        precision = "tf32",
        conv2d { out_channels = 48, kernel = 3 },
        hardswish {},
    })},
    /* the value before the norm held in the dtype, channels last, between the conv pass and the
     * map pass (planner.h, fg_io_buffer_value): each engine's store of it */
    {"cl_bf16_wgmma_tf32_io_buffer", "wgmma", 2, 0, FG_BAR_TF32_BF16, SPEC(return layer "cl_bf16_wgmma_tf32_io_buffer" {
        input = { "N", 16, 6, 10, 12 },
        layout = "channels_last",
        dtype = "bf16",
        precision = "tf32",
        conv3d { out_channels = 32, kernel = 3, padding = 1 },
        instance_norm { affine = true },
        leaky_relu { negative_slope = 0.01 },
    })},
    {"cl_fp16_mma_tf32_io_buffer", "mma", 2, 1, FG_BAR_TF32, SPEC(return layer "cl_fp16_mma_tf32_io_buffer" {
        input = { "N", 8, 14, 18 },
        layout = "channels_last",
        dtype = "fp16",
        precision = "tf32",
        conv2d { out_channels = 24, kernel = 3 },
        group_norm { groups = 4 },
        silu {},
    })},
    /* groups of 48 channels: a group spans two of the slabs' 32-channel chunks (and one
     * chunk two groups) */
    {"cl_fp16_wgmma_tf32_io_buffer_groups", "wgmma", 2, 0, FG_BAR_TF32, SPEC(return layer "cl_fp16_wgmma_tf32_io_buffer_groups" {
        input = { "N", 40, 11, 13 },
        layout = "channels_last",
        dtype = "fp16",
        precision = "tf32",
        conv2d { out_channels = 96, kernel = 3, padding = 1 },
        group_norm { groups = 2, affine = true },
        silu {},
    })},
    /* batch 1, one tile of 100 pixels: split K, the last split's epilogue stores the buffer */
    {"cl_bf16_wgmma_tf32_io_buffer_split_k", NULL, 1, 0, FG_BAR_TF32_BF16, SPEC(return layer "cl_bf16_wgmma_tf32_io_buffer_split_k" {
        input = { "N", 256, 10, 10 },
        layout = "channels_last",
        dtype = "bf16",
        precision = "tf32",
        conv2d { out_channels = 128, kernel = 3, padding = 1 },
        group_norm { groups = 8 },
        silu {},
    })},
    /* the FMA engine is exact, so the buffer's rounding (half an ulp of bf16 at the value
     * before the norm, over the group's spread) is the error besides the output's: at 1e-2 it
     * failed 4 of 2002 elements by up to 0.0156 on the H200, as PyTorch's bf16 model rounds */
    {"cl_bf16_fma_tf32_io_buffer", "fma", 2, 1, FG_BAR_TF32_BF16, SPEC(return layer "cl_bf16_fma_tf32_io_buffer" {
        input = { "N", 5, 15, 13 },
        layout = "channels_last",
        dtype = "bf16",
        precision = "tf32",
        conv2d { out_channels = 7, kernel = 3 },
        instance_norm {},
    })},
    {"cl_fp16_fma_instance_norm", "fma", 2, 0, 1e-4, SPEC(return layer "cl_fp16_fma_instance_norm" {
        input = { "N", 5, 15, 13 },
        layout = "channels_last",
        dtype = "fp16",
        conv2d { out_channels = 7, kernel = 3 },
        instance_norm {},
    })},
    {"cl_recompute_mean_keepdim", NULL, 2, 0, 1e-4, SPEC(return layer "cl_recompute_mean_keepdim" {
        input = { "N", 3, 10, 18, 18 },
        layout = "channels_last",
        strategy = "recompute",
        conv3d { out_channels = 12, kernel = 3 },
        group_norm { groups = 4 },
        mean { dims = { 2, 3, 4 }, keepdim = true },
    })},
    {"cl_channel_sums_mean_keepdim", NULL, 2, 0, 1e-4, SPEC(return layer "cl_channel_sums_mean_keepdim" {
        input = { "N", 3, 10, 18, 18 },
        layout = "channels_last",
        conv3d { out_channels = 12, kernel = 3 },
        group_norm { groups = 4 },
        mean { dims = { 2, 3, 4 }, keepdim = true },
    })},
    {"cl_resident_channel_max", NULL, 2, 0, 1e-4, SPEC(return layer "cl_resident_channel_max" {
        input = { "N", 3, 8, 20, 20 },
        layout = "channels_last",
        strategy = "resident",
        conv3d { out_channels = 16, kernel = 3 },
        instance_norm {},
        clamp { min = -1.0, max = 1.0 },
        max { dim = 1, keepdim = true },
    })},
    {"cl_resident_bf16", NULL, 2, 0, 1e-4, SPEC(return layer "cl_resident_bf16" {
        input = { "N", 4, 12, 14 },
        layout = "channels_last",
        dtype = "bf16",
        strategy = "resident",
        conv2d { out_channels = 16, kernel = 3 },
        group_norm { groups = 4 },
        relu {},
    })},
    {"cl_tf32_no_cudnn", NULL, 2, 0, FG_BAR_TF32, SPEC(return layer "cl_tf32_no_cudnn" {
        input = { "N", 16, 20, 20 },
        layout = "channels_last",
        precision = "tf32",
        conv2d { out_channels = 24, kernel = 3 },
        relu {},
    })},
    /* the FMA engine's channels-last mapping (planner.c conv_tiling_cl: a thread a channel,
     * the input staged [pixel][channel]): a depthwise 7x7 with layer_norm over the channels
     * (a statistic slot per pixel, added up across the warp), ragged tiles in H and W; a
     * grouped conv of 4 channels a group, stride 2, 40 channels (the second block of 32
     * lanes ragged), group_norm over 8 channels (a slot per channel, lanes merged); a 3D
     * depthwise conv with a channel multiplier of 2, dilation 2 and a prologue, layer_norm
     * over the channels then tanh */
    {"cl_bf16_fma_dw7_layer_norm", "fma", 2, 0, 1e-4, SPEC(return layer "cl_bf16_fma_dw7_layer_norm" {
        input = { "N", 96, 20, 27 },
        layout = "channels_last",
        dtype = "bf16",
        conv2d { out_channels = 96, kernel = 7, padding = 3, groups = 96 },
        layer_norm { dim = 1, eps = 1e-6 },
    })},
    {"cl_fma_grouped4_stride2", "fma", 3, 1, 1e-4, SPEC(return layer "cl_fma_grouped4_stride2" {
        input = { "N", 40, 23, 29 },
        layout = "channels_last",
        conv2d { out_channels = 40, kernel = 3, stride = 2, padding = 1, groups = 10 },
        group_norm { groups = 5 },
        relu {},
    })},
    {"cl_fma_dw3d_prologue", "fma", 2, 0, 1e-4, SPEC(return layer "cl_fma_dw3d_prologue" {
        input = { "N", 24, 7, 11, 13 },
        layout = "channels_last",
        batch_norm { name = "bn0", stats = "running" },
        relu {},
        conv3d { out_channels = 48, kernel = 3, padding = 2, dilation = 2, groups = 24 },
        layer_norm { dim = 1 },
        tanh {},
    })},
    /* the scalar staging by shape (planner.c conv_tiling_cl, in_vec 0): a bf16 depthwise conv
     * of 12 channels (12 lanes, 12 channels a pixel: not whole vectors of 8) */
    {"cl_bf16_fma_scalar_12ch", "fma", 2, 0, 1e-4, SPEC(return layer "cl_bf16_fma_scalar_12ch" {
        input = { "N", 12, 11, 9 },
        layout = "channels_last",
        dtype = "bf16",
        conv2d { out_channels = 12, kernel = 5, padding = 2, groups = 12 },
        layer_norm { dim = 1 },
    })},
    /* a map pass writing the output through a shared-memory tile (gen/planner.c, map_cl_tile)
     * with ragged edges: 3D bf16, 40 channels (tiles of 32: the second holds 8), 6x9x11 = 594
     * pixels (tiles of 64: the last holds 18) */
    {"cl_bf16_3d_tile_ragged", NULL, 2, 0, 1e-4, SPEC(return layer "cl_bf16_3d_tile_ragged" {
        input = { "N", 4, 6, 9, 11 },
        layout = "channels_last",
        dtype = "bf16",
        conv3d { out_channels = 40, kernel = 3, padding = 1 },
        instance_norm { affine = true },
        leaky_relu { negative_slope = 0.01 },
    })},
    /* two buffers staged (the pre-norm value, and the conv's for the residual), 24 channels in
     * a tile of 32, 13x17 pixels, fp32 at an odd output offset */
    {"cl_fma_tile_two_buffers", "fma", 3, 1, 1e-4, SPEC(return layer "cl_fma_tile_two_buffers" {
        input = { "N", 10, 13, 17 },
        layout = "channels_last",
        conv2d { out_channels = 24, kernel = 3, padding = 1, as = "c" },
        relu {},
        group_norm { groups = 4 },
        silu {},
        add { value = "c" },
    })},
};

/* A context whose plans prefer `engine` (NULL: the planner's choice), sharing the test's cache. */
static fg_context *engine_context(const char *engine)
{
    if (engine)
        setenv("FUSEGEN_CONV_ENGINE", engine, 1);
    fg_context_options o;
    fg_context_options_init(&o);
    o.cache_dir = gpu_cache_dir();
    fg_context *c = NULL;
    fg_status s = fg_context_create(&o, &c);
    unsetenv("FUSEGEN_CONV_ENGINE");
    if (s != FG_OK) {
        printf("FAILED: a context for engine %s: %s\n", engine ? engine : "auto", fg_last_error());
        return NULL;
    }
    return c;
}

/* One case in a context preferring `engine` (NULL: the planner's choice), its output written
 * at `out_offset` elements of the dtype; `what` ("channels last, ") goes into its line.
 * Returns 1 when it failed. The bar: tol against float64 (plus 1 ulp of a half dtype). */
static int run_on_engine_at(const char *name, const char *engine, const char *source, int64_t batch, uint64_t seed,
                            double tol, int in_offset, int out_offset, const char *what)
{
    fg_context *ectx = engine_context(engine);
    if (!ectx)
        return 1;
    gpu_result r = gpu_check_spec_offsets(ectx, name, source, batch, seed, tol, in_offset, out_offset);
    fg_context_destroy(ectx);
    if (!r.ok)
        printf("FAILED %-32s: %s\n", name, r.error);
    else
        printf("%s %-32s batch %lld (%sengine %s, output offset %d): max abs %.3g, rel L2 %.3g, %lld/%lld outside "
               "%.0e (+ 1 ulp of a half dtype)%s\n",
               r.pass ? "ok    " : "FAILED", name, (long long)batch, what, engine ? engine : "auto", out_offset, r.max_abs,
               r.rel_l2, r.bad, r.count, tol, r.nan ? " (NaN)" : "");
    return !r.ok || !r.pass;
}

static int run_on_engine(const char *name, const char *engine, const char *source, int64_t batch, uint64_t seed,
                         double tol, int out_offset, const char *what)
{
    return run_on_engine_at(name, engine, source, batch, seed, tol, 0, out_offset, what);
}

/* A channels-last half input with no prologue and no padding channels is the wgmma engine's
 * packed operand as it is: aligned, the conv reads it directly (no packing pass); one element
 * off 16 bytes, the packing pass runs as for any other input (fg_launch_input_direct). Each
 * case runs both ways. */
static const half_variant direct_inputs[] = {
    {"direct_bf16_cl_1x1", "wgmma", 2, 0, 1e-4, SPEC(return layer "direct_bf16_cl_1x1" {
        input = { "N", 64, 14, 15 },
        dtype = "bf16",
        layout = "channels_last",
        conv2d { out_channels = 96, kernel = 1 },
        relu {},
    })},
    {"direct_fp16_cl_3x3_groups_tf32", "wgmma", 3, 1, FG_BAR_TF32, SPEC(return layer "direct_fp16_cl_3x3_groups_tf32" {
        input = { "N", 32, 17, 13 },
        dtype = "fp16",
        layout = "channels_last",
        precision = "tf32",
        conv2d { out_channels = 64, kernel = 3, padding = 1, groups = 2 },
        group_norm { groups = 4 },
    })},
};

/* The FMA engine's channels-last mapping staging its input in 16-byte vectors (planner.c
 * conv_tiling_cl, in_vec; conv.lua stage_input_vec): each case runs with the input 16-byte
 * aligned (the vector loop) and one element off (the block-uniform check takes the scalar
 * loop). A bf16 depthwise 7x7 on an odd 15x13 (padding at every border, ragged tiles); fp32
 * groups of 2 channels, 48 channels (the second block of 32 lanes half empty: its vectors
 * past the last channel zero-filled), stride 2; fp16 groups of 8 input -> 4 output channels
 * (64 staged channels a pixel for 32 lanes), dilation 2; a 3D fp32 depthwise conv. */
static const half_variant cl_vector_inputs[] = {
    {"clv_bf16_dw7_odd", "fma", 2, 0, 1e-4, SPEC(return layer "clv_bf16_dw7_odd" {
        input = { "N", 64, 15, 13 },
        layout = "channels_last",
        dtype = "bf16",
        conv2d { out_channels = 64, kernel = 7, padding = 3, groups = 64 },
        layer_norm { dim = 1, eps = 1e-6 },
    })},
    {"clv_fp32_groups2_ragged", "fma", 3, 1, 1e-4, SPEC(return layer "clv_fp32_groups2_ragged" {
        input = { "N", 48, 17, 11 },
        layout = "channels_last",
        conv2d { out_channels = 48, kernel = 3, stride = 2, padding = 1, groups = 24 },
        group_norm { groups = 6 },
        relu {},
    })},
    {"clv_fp16_groups8to4_dilated", "fma", 2, 0, 1e-4, SPEC(return layer "clv_fp16_groups8to4_dilated" {
        input = { "N", 64, 13, 14 },
        layout = "channels_last",
        dtype = "fp16",
        conv2d { out_channels = 32, kernel = 3, padding = 2, dilation = 2, groups = 8 },
        gelu {},
    })},
    {"clv_fp32_dw3d", "fma", 2, 0, 1e-4, SPEC(return layer "clv_fp32_dw3d" {
        input = { "N", 32, 5, 9, 7 },
        layout = "channels_last",
        conv3d { out_channels = 32, kernel = 3, padding = 1, groups = 32 },
        layer_norm { dim = 1 },
    })},
};

/* Channels-last inputs read by pixel rows in 16-byte vectors: the prologue's statistics pass
 * (planner.c pro_stats_rows: group, instance and batch norms) and the wgmma input pack where
 * the input is its packed layout (conv_wgmma.lua pack_input_rows). Each case runs with the
 * input 16-byte aligned and one element off (both kernels take their scalar loads). A bf16
 * SD-like group norm whose groups (8 channels... 4 of a vector) straddle no vector and one
 * whose do (12 channels a group, 8 a vector); fp32 3D instance norm (TF32 hi and lo packed);
 * fp16 batch statistics over the batch (one key a channel) at tf32; fp32 with no prologue,
 * groups of 32 channels (the pack alone). */
static const half_variant cl_rows_inputs[] = {
    {"rows_bf16_gn_silu_3x3", "wgmma", 2, 0, 1e-4, SPEC(return layer "rows_bf16_gn_silu_3x3" {
        input = { "N", 64, 12, 10 },
        layout = "channels_last",
        dtype = "bf16",
        group_norm { groups = 8 },
        silu {},
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
    })},
    {"rows_bf16_gn12_straddle", "wgmma", 3, 1, 1e-4, SPEC(return layer "rows_bf16_gn12_straddle" {
        input = { "N", 192, 7, 9 },
        layout = "channels_last",
        dtype = "bf16",
        group_norm { groups = 16, eps = 1e-6 },
        mul { param = "scale" },
        silu {},
        conv2d { out_channels = 64, kernel = 1 },
    })},
    {"rows_fp32_in3d", "wgmma", 2, 0, 1e-4, SPEC(return layer "rows_fp32_in3d" {
        input = { "N", 32, 5, 6, 7 },
        layout = "channels_last",
        instance_norm { affine = true },
        leaky_relu { negative_slope = 0.01 },
        conv3d { out_channels = 32, kernel = 3, padding = 1 },
    })},
    {"rows_fp16_bn_batch_tf32", "wgmma", 3, 0, FG_BAR_TF32, SPEC(return layer "rows_fp16_bn_batch_tf32" {
        input = { "N", 128, 6, 11 },
        layout = "channels_last",
        dtype = "fp16",
        precision = "tf32",
        batch_norm {},
        relu {},
        conv2d { out_channels = 64, kernel = 1 },
    })},
    {"rows_fp32_pack_groups", "wgmma", 2, 0, 1e-4, SPEC(return layer "rows_fp32_pack_groups" {
        input = { "N", 64, 9, 11 },
        layout = "channels_last",
        conv2d { out_channels = 64, kernel = 3, padding = 1, groups = 2 },
        relu {},
    })},
};

/* More kernel parameters in one pass than a fixed 48-slot table held (hardening round 2):
 * runs correctly */
static char many_args_spec[8192];
static const char *many_args(void)
{
    size_t len = (size_t)snprintf(many_args_spec, sizeof many_args_spec,
                                  "return layer \"many_args\" {\n  input = { \"N\", 3, 12, 12 },\n"
                                  "  conv2d { out_channels = 4, kernel = 3 },\n");
    for (int i = 0; i < 46; i++)
        len += (size_t)snprintf(many_args_spec + len, sizeof many_args_spec - len,
                                "  mul { param = \"p%d\", shape = { 1 } },\n", i);
    snprintf(many_args_spec + len, sizeof many_args_spec - len, "  instance_norm {},\n}\n");
    return many_args_spec;
}

/* ---- random layers -------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static unsigned rnd(unsigned n)
{
    /* xorshift64*: test-case generation only */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (unsigned)((rng_state * 0x2545f4914f6cdd1dull) >> 33) % n;
}

static const char *const tails[] = {
    "relu {}", "gelu {}", "sigmoid {}", "tanh {}", "silu {}", "mish {}", "hardswish {}", "softplus {}",
    "leaky_relu {}", "hardtanh {}", "clamp { min = -0.5, max = 0.5 }", "mul { scalar = 1.5 }",
    "add { param = \"shift\" }", "mul { param = \"gain\" }", "group_norm { groups = 1 }", "instance_norm {}",
    "batch_norm { stats = \"running\" }", "batch_norm {}", "max_pool { kernel = 2 }",
    "avg_pool { kernel = 2, stride = 1 }", "softmax { dim = 1 }",
};
static const char *const finals[] = {
    "", "max { dim = 1 }", "mean { dims = { 2, 3 } }", "logsumexp { dim = 1, keepdim = true }",
    "sum { dim = -1 }", "global_avg_pool {}", "min { dims = { 1, 3 }, keepdim = true }",
};

static void random_layer(int index, char *buf, size_t cap)
{
    int cin = 1 + (int)rnd(9), groups = 1 + (int)rnd(3);
    cin *= groups;
    int cout = groups * (1 + (int)rnd(12));
    int h = 6 + (int)rnd(30), w = 6 + (int)rnd(30);
    int k = 1 + (int)rnd(4), stride = 1 + (int)rnd(2), pad = (int)rnd(3), dil = 1 + (int)rnd(2);
    size_t len = (size_t)snprintf(buf, cap,
                                  "return layer \"random_%d\" {\n  input = { \"N\", %d, %d, %d },\n"
                                  "  conv2d { out_channels = %d, kernel = %d, stride = %d, padding = %d, dilation = %d, "
                                  "groups = %d, bias = %s },\n",
                                  index, cin, h, w, cout, k, stride, pad, dil, groups, rnd(2) ? "true" : "false");
    int n_tail = (int)rnd(5);
    for (int i = 0; i < n_tail; i++)
        len += (size_t)snprintf(buf + len, cap - len, "  %s,\n", tails[rnd(sizeof tails / sizeof *tails)]);
    const char *fin = finals[rnd(sizeof finals / sizeof *finals)];
    if (fin[0])
        len += (size_t)snprintf(buf + len, cap - len, "  %s,\n", fin);
    snprintf(buf + len, cap - len, "}\n");
}

/* Writes one spec to DIR/NAME.lua; false (after perror) when it cannot. */
static bool dump_one(const char *dir, const char *name, const char *source)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.lua", dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(source, f) < 0 || fclose(f) != 0) {
        perror(path);
        return false;
    }
    return true;
}

/* `test_gpu_variants --dump DIR [N]` writes every variant's spec to DIR (no GPU needed):
 * scripts/golden-sources generates their kernels to show that a refactor leaves the
 * generated source unchanged. The random draws are the same as in a GPU run. */
static int dump_specs(const char *dir, int n_random)
{
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        if (!dump_one(dir, fixed[i].name, fixed[i].source))
            return 1;
    }
    for (size_t i = 0; i < sizeof halves / sizeof *halves; i++) {
        if (!dump_one(dir, halves[i].name, halves[i].source))
            return 1;
    }
    /* the channel reductions fused into the wgmma epilogue (tests/channel_reduce_specs.h) */
    for (int i = 0; i < N_CHANNEL_REDUCE_CASES; i++) {
        if (!dump_one(dir, channel_reduce_cases[i].name, channel_reduce_cases[i].source))
            return 1;
    }
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        if (!dump_one(dir, layouts[i].name, layouts[i].source))
            return 1;
    }
    for (int i = 0; i < N_CHANNEL_NORM_CASES; i++) {
        if (!dump_one(dir, channel_norm_cases[i].name, channel_norm_cases[i].source))
            return 1;
    }
    /* prologues: ops before the conv (tests/prologue_specs.h) */
    for (int i = 0; i < N_PROLOGUE_CASES; i++) {
        if (!dump_one(dir, prologue_cases[i].name, prologue_cases[i].source))
            return 1;
    }
    for (size_t i = 0; i < sizeof direct_inputs / sizeof *direct_inputs; i++) {
        if (!dump_one(dir, direct_inputs[i].name, direct_inputs[i].source))
            return 1;
    }
    for (size_t i = 0; i < sizeof cl_vector_inputs / sizeof *cl_vector_inputs; i++) {
        if (!dump_one(dir, cl_vector_inputs[i].name, cl_vector_inputs[i].source))
            return 1;
    }
    for (size_t i = 0; i < sizeof cl_rows_inputs / sizeof *cl_rows_inputs; i++) {
        if (!dump_one(dir, cl_rows_inputs[i].name, cl_rows_inputs[i].source))
            return 1;
    }
    /* shapes past a former limit of the wgmma engine (tests/wgmma_reach_specs.h) */
    for (int i = 0; i < N_WGMMA_REACH_CASES; i++) {
        if (!dump_one(dir, wgmma_reach_cases[i].name, wgmma_reach_cases[i].source))
            return 1;
    }
    if (!dump_one(dir, "many_args", many_args()))
        return 1;
    int drawn = 0, tries = 0;
    while (drawn < n_random && tries < 50 * n_random) {
        char src[2048], name[32];
        random_layer(drawn, src, sizeof src);
        tries++;
        fg_layer_ir ir;
        fg_error err;
        snprintf(name, sizeof name, "random_%d", drawn);
        if (fg_spec_load_string(name, src, strlen(src), &ir, &err) != 0)
            continue;
        (void)rnd(4); /* the batch a GPU run draws */
        if (!dump_one(dir, name, src))
            return 1;
        drawn++;
    }
    return 0;
}

/* argv[2]: run only the fixed cases whose name contains it (and no random ones) */
static const char *case_filter;

static bool selected(const char *name)
{
    return !case_filter || strstr(name, case_filter);
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--dump") == 0)
        return dump_specs(argv[2], argc > 3 ? atoi(argv[3]) : 40);
    int n_random = argc > 1 ? atoi(argv[1]) : 40;
    if (argc > 2) {
        case_filter = argv[2];
        n_random = 0;
    }
    fg_context *ctx = gpu_open("test_gpu_variants");
    int cases = 0, failed = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        const variant *v = &fixed[i];
        if (!selected(v->name))
            continue;
        gpu_result r = gpu_check_spec(ctx, v->name, v->source, v->batch, 500 + i, v->tol);
        cases++;
        failed += gpu_report(v->name, v->batch, v->tol, &r);
    }
    for (size_t i = 0; i < sizeof halves / sizeof *halves; i++) {
        const half_variant *v = &halves[i];
        if (!selected(v->name))
            continue;
        cases++;
        failed += run_on_engine(v->name, v->engine, v->source, v->batch, 700 + i, v->tol, v->out_offset, "");
    }
    /* reductions over the channels in the wgmma conv pass's epilogue (on sm_90a; elsewhere the
     * same layers run as a conv pass and a map pass) */
    for (int i = 0; i < N_CHANNEL_REDUCE_CASES; i++) {
        const channel_reduce_case *v = &channel_reduce_cases[i];
        if (!selected(v->name))
            continue;
        gpu_result r = gpu_check_spec(ctx, v->name, v->source, v->batch, 600 + (uint64_t)i, v->tol);
        cases++;
        failed += gpu_report(v->name, v->batch, v->tol, &r);
    }
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        const half_variant *v = &layouts[i];
        if (!selected(v->name))
            continue;
        cases++;
        failed += run_on_engine(v->name, v->engine, v->source, v->batch, 800 + i, v->tol, v->out_offset,
                                "channels last, ");
    }
    /* layer_norm { dim = 1 } after the conv (tests/channel_norm_specs.h), each in a context
     * preferring its engine */
    for (int i = 0; i < N_CHANNEL_NORM_CASES; i++) {
        const channel_norm_case *v = &channel_norm_cases[i];
        if (!selected(v->name))
            continue;
        cases++;
        failed += run_on_engine(v->name, v->engine, v->source, v->batch, 1300 + (uint64_t)i, v->tol, 0,
                                "layer_norm dim 1, ");
    }
    /* prologues (ops before the conv, applied where the input is staged), each in a context
     * preferring its engine; fp32 layers within tol of float64, half ones plus 1 ulp */
    for (int i = 0; i < N_PROLOGUE_CASES; i++) {
        const prologue_case *v = &prologue_cases[i];
        if (!selected(v->name))
            continue;
        cases++;
        failed += run_on_engine(v->name, v->engine, v->source, v->batch, 1100 + (uint64_t)i, v->tol, 0, "prologue, ");
    }
    for (size_t i = 0; i < sizeof direct_inputs / sizeof *direct_inputs; i++) {
        const half_variant *v = &direct_inputs[i];
        if (!selected(v->name))
            continue;
        cases += 2;
        failed += run_on_engine_at(v->name, v->engine, v->source, v->batch, 1500 + i, v->tol, 0, v->out_offset,
                                   "input read directly where aligned, ");
        failed += run_on_engine_at(v->name, v->engine, v->source, v->batch, 1500 + i, v->tol, 1, v->out_offset,
                                   "input 2 bytes off 16, packed, ");
    }
    for (size_t i = 0; i < sizeof cl_vector_inputs / sizeof *cl_vector_inputs; i++) {
        const half_variant *v = &cl_vector_inputs[i];
        if (!selected(v->name))
            continue;
        cases += 2;
        failed += run_on_engine_at(v->name, v->engine, v->source, v->batch, 1600 + i, v->tol, 0, v->out_offset,
                                   "input staged in vectors, ");
        failed += run_on_engine_at(v->name, v->engine, v->source, v->batch, 1600 + i, v->tol, 1, v->out_offset,
                                   "input 1 element off 16 bytes, scalar, ");
    }
    for (size_t i = 0; i < sizeof cl_rows_inputs / sizeof *cl_rows_inputs; i++) {
        const half_variant *v = &cl_rows_inputs[i];
        if (!selected(v->name))
            continue;
        cases += 2;
        failed += run_on_engine_at(v->name, v->engine, v->source, v->batch, 1700 + i, v->tol, 0, v->out_offset,
                                   "input read in 16-byte rows, ");
        failed += run_on_engine_at(v->name, v->engine, v->source, v->batch, 1700 + i, v->tol, 1, v->out_offset,
                                   "input 1 element off 16 bytes, scalar, ");
    }
    /* shapes past a former limit of the wgmma engine, on wgmma (on sm_90a) */
    for (int i = 0; i < N_WGMMA_REACH_CASES; i++) {
        const wgmma_reach_case *v = &wgmma_reach_cases[i];
        if (!selected(v->name))
            continue;
        char what[64];
        snprintf(what, sizeof what, "%s, ", v->reach);
        cases++;
        failed += run_on_engine(v->name, "wgmma", v->source, v->batch, 1400 + (uint64_t)i, v->tol, 0, what);
    }
    if (selected("many_args")) {
        gpu_result r = gpu_check_spec(ctx, "many_args", many_args(), 3, 777, 1e-4);
        cases++;
        if (!r.ok || !r.pass)
            failed++;
        printf("%s %-32s batch 3: %s max abs %.3g, rel L2 %.3g (53 kernel parameters in one pass)\n",
               r.ok && r.pass ? "ok    " : "FAILED", "many_args", r.ok ? "" : r.error, r.max_abs, r.rel_l2);
    }
    int drawn = 0, tries = 0;
    while (drawn < n_random && tries < 50 * n_random) {
        char src[2048], name[32];
        random_layer(drawn, src, sizeof src);
        tries++;
        fg_layer_ir ir;
        fg_error err;
        snprintf(name, sizeof name, "random_%d", drawn);
        if (fg_spec_load_string(name, src, strlen(src), &ir, &err) != 0)
            continue; /* an impossible combination: draw again */
        int64_t batch = 1 + (int64_t)rnd(4);
        gpu_result r = gpu_check_spec(ctx, name, src, batch, 900 + (uint64_t)drawn, 1e-4);
        cases++;
        drawn++;
        if (!r.ok || !r.pass) {
            failed++;
            printf("FAILED %-12s batch %lld: %s max abs %.3g rel L2 %.3g %lld bad%s\n%s", name, (long long)batch,
                   r.ok ? "" : r.error, r.max_abs, r.rel_l2, r.bad, r.nan ? " (NaN)" : "", src);
        } else {
            printf("ok     %-12s batch %lld: max abs %.3g, rel L2 %.3g\n", name, (long long)batch, r.max_abs, r.rel_l2);
        }
    }
    gpu_close(ctx);
    if (case_filter && cases == 0) {
        printf("no case's name contains '%s'\n", case_filter);
        return 1;
    }
    printf("%d cases (%d random), %d failed\n", cases, drawn, failed);
    return failed ? 1 : 0;
}
