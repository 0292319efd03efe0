/* SPDX-License-Identifier: Apache-2.0 */
/* Layers with a prologue: ops before the conv, applied to its input where it is staged
 * (docs/spec.md, "Prologue"). The compile test renders each for sm_80, sm_90 and sm_90a with
 * each conv engine forced (tests/test_compile.c); the GPU test runs them against the CPU
 * float64 reference in a context preferring `engine` (tests/gpu/test_gpu_variants.c; NULL:
 * the planner's choice; "wgmma" needs sm_90a, the H200's default). Each needs at most the
 * engines the shape allows: the planner falls back where one cannot run the conv. */
#ifndef FG_TEST_PROLOGUE_SPECS_H
#define FG_TEST_PROLOGUE_SPECS_H

#include <stdint.h>
#include "../common/accuracy.h"

typedef struct prologue_case {
    const char *name;
    const char *engine; /* FUSEGEN_CONV_ENGINE for the GPU run, NULL: the planner's choice */
    int64_t batch;
    double tol;         /* fp32: against float64; a half dtype: plus 1 ulp of it */
    const char *source;
} prologue_case;

#define PROLOGUE_SPEC(...) #__VA_ARGS__

static const prologue_case prologue_cases[] = {
    /* Stable Diffusion's ResnetBlock2D, first half, small: GroupNorm -> SiLU -> conv3x3 with
     * padding (a padded tap must add 0, not silu(norm(0))), on each engine */
    {"pro_gn_silu_conv3x3_fma", "fma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_gn_silu_conv3x3_fma" {
        input = { "N", 32, 20, 18 },
        group_norm { name = "norm1", groups = 8, eps = 1e-6 },
        silu {},
        conv2d { name = "conv1", out_channels = 32, kernel = 3, padding = 1 },
    })},
    {"pro_gn_silu_conv3x3_mma", "mma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_gn_silu_conv3x3_mma" {
        input = { "N", 32, 20, 18 },
        group_norm { name = "norm1", groups = 8, eps = 1e-6 },
        silu {},
        conv2d { name = "conv1", out_channels = 32, kernel = 3, padding = 1 },
    })},
    {"pro_gn_silu_conv3x3_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_gn_silu_conv3x3_wgmma" {
        input = { "N", 32, 20, 18 },
        group_norm { name = "norm1", groups = 8, eps = 1e-6 },
        silu {},
        conv2d { name = "conv1", out_channels = 32, kernel = 3, padding = 1 },
    })},
    /* pre-activation ResNet: BatchNorm (eval: running statistics, no statistics pass) -> ReLU
     * -> 1x1 conv */
    {"pro_bn_eval_relu_conv1x1", NULL, 3, 1e-4, PROLOGUE_SPEC(return layer "pro_bn_eval_relu_conv1x1" {
        input = { "N", 48, 14, 15 },
        batch_norm { name = "bn1", stats = "running" },
        relu {},
        conv2d { name = "conv1", out_channels = 40, kernel = 1, bias = false },
    })},
    /* instance norm before a 3D conv (per sample and channel over D, H, W); stride 2 */
    {"pro_instance_norm_conv3d", "mma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_instance_norm_conv3d" {
        input = { "N", 8, 6, 10, 12 },
        instance_norm { affine = true },
        leaky_relu { negative_slope = 0.1 },
        conv3d { out_channels = 12, kernel = 3, padding = 1, stride = { 1, 2, 2 } },
    })},
    /* ops before the norm go through the statistics pass too; a per-channel parameter after it */
    {"pro_relu_gn_mul_conv", "fma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_relu_gn_mul_conv" {
        input = { "N", 12, 13, 11 },
        add { scalar = -0.25 },
        relu {},
        group_norm { groups = 4 },
        mul { param = "scale" },
        gelu {},
        conv2d { out_channels = 16, kernel = 3, padding = { 2, 1 }, dilation = { 2, 1 }, groups = 2 },
    })},
    /* batch statistics (training-mode BatchNorm): one statistic per channel over the batch */
    {"pro_bn_batch_stats", NULL, 4, 1e-4, PROLOGUE_SPEC(return layer "pro_bn_batch_stats" {
        input = { "N", 16, 9, 10 },
        batch_norm { momentum = 0.1 },
        hardswish {},
        conv2d { out_channels = 24, kernel = 3, padding = 1 },
    })},
    /* layer norm over the trailing dims (C, H, W: per sample), then a 1x1 conv */
    {"pro_layer_norm_conv1x1", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_layer_norm_conv1x1" {
        input = { "N", 64, 8, 9 },
        layer_norm { normalized_shape = { 64, 8, 9 } },
        gelu { approximate = "tanh" },
        conv2d { out_channels = 96, kernel = 1 },
    })},
    /* the whole first half of ResnetBlock2D as one layer, both norms: the prologue's and one
     * after the conv (recompute: the conv pass, and so the prologue, runs twice) */
    {"pro_resnet_half_recompute", NULL, 2, 1e-4, PROLOGUE_SPEC(return layer "pro_resnet_half_recompute" {
        input = { "N", 32, 16, 16 },
        strategy = "recompute",
        group_norm { name = "norm1", groups = 8, eps = 1e-6 },
        silu {},
        conv2d { name = "conv1", out_channels = 32, kernel = 3, padding = 1 },
        group_norm { name = "norm2", groups = 8, eps = 1e-6 },
        silu {},
    })},
    /* bf16 input: widened, then the prologue (the statistics pass reads bf16 too) */
    {"pro_bf16_gn_silu_mma", "mma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_gn_silu_mma" {
        input = { "N", 32, 15, 17 },
        dtype = "bf16",
        group_norm { groups = 8 },
        silu {},
        conv2d { out_channels = 32, kernel = 3, padding = 1 },
    })},
    {"pro_bf16_gn_silu_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_gn_silu_wgmma" {
        input = { "N", 32, 15, 17 },
        dtype = "bf16",
        group_norm { groups = 8 },
        silu {},
        conv2d { out_channels = 32, kernel = 3, padding = 1 },
    })},
    /* channels-last input: the statistics pass, the staging and the pack read N(D)HWC */
    {"pro_cl_gn_silu_fma", "fma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_cl_gn_silu_fma" {
        input = { "N", 24, 13, 14 },
        layout = "channels_last",
        group_norm { groups = 6 },
        silu {},
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
    })},
    {"pro_cl_gn_silu_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_cl_gn_silu_wgmma" {
        input = { "N", 24, 13, 14 },
        layout = "channels_last",
        group_norm { groups = 6 },
        silu {},
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
    })},
    /* split K at batch 1 (4 tiles of 72 K chunks on wgmma: tests/split_k_specs.h): the packed
     * input every split reads is the normalized one */
    {"pro_split_k_batch1", "wgmma", 1, 1e-4, PROLOGUE_SPEC(return layer "pro_split_k_batch1" {
        input = { "N", 256, 14, 14 },
        group_norm { groups = 32, eps = 1e-6 },
        silu {},
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
    })},
    /* review of the merge: paths the cases above leave to one engine. The wgmma pack with
     * padded channels (CIN_G 6 -> CP 8), groups and dilation; 3D with a stride on wgmma; a
     * layer norm's per-element affine in the mma.sync staging; an fp16 input; 64 -> 64 on
     * mma.sync (one m-tile a warp with a prologue); tf32 precision (the generated conv, not
     * cuDNN, with the tf32 bar) */
    {"pro_relu_gn_mul_conv_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_relu_gn_mul_conv_wgmma" {
        input = { "N", 12, 13, 11 },
        add { scalar = -0.25 },
        relu {},
        group_norm { groups = 4 },
        mul { param = "scale" },
        gelu {},
        conv2d { out_channels = 16, kernel = 3, padding = { 2, 1 }, dilation = { 2, 1 }, groups = 2 },
    })},
    {"pro_instance_norm_conv3d_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_instance_norm_conv3d_wgmma" {
        input = { "N", 8, 6, 10, 12 },
        instance_norm { affine = true },
        leaky_relu { negative_slope = 0.1 },
        conv3d { out_channels = 12, kernel = 3, padding = 1, stride = { 1, 2, 2 } },
    })},
    {"pro_layer_norm_mma", "mma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_layer_norm_mma" {
        input = { "N", 16, 8, 9 },
        layer_norm { normalized_shape = { 16, 8, 9 } },
        relu {},
        conv2d { out_channels = 32, kernel = 3, padding = 1 },
    })},
    /* layer_norm { dim = 1 } (ConvNeXt's LayerNorm, each position over its channels) before a
     * 1x1 conv (ConvNeXt's pwconv1 after its norm) and before a padded 3x3 */
    {"pro_cln_conv1x1_wg", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_cln_conv1x1_wg" {
        input = { "N", 64, 8, 9 },
        layer_norm { name = "norm", dim = 1, eps = 1e-6 },
        conv2d { name = "pwconv1", out_channels = 128, kernel = 1 },
        gelu {},
    })},
    {"pro_cln_conv3x3_fma", "fma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_cln_conv3x3_fma" {
        input = { "N", 12, 11, 9 },
        layer_norm { name = "norm", dim = 1 },
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
    })},
    {"pro_cln_cl_mma", "mma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_cln_cl_mma" {
        input = { "N", 16, 10, 12 },
        layout = "channels_last",
        layer_norm { name = "norm", dim = 1 },
        conv2d { out_channels = 32, kernel = 1 },
        relu {},
    })},
    {"pro_fp16_gn_silu_fma", "fma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_fp16_gn_silu_fma" {
        input = { "N", 16, 11, 12 },
        dtype = "fp16",
        group_norm { groups = 4 },
        silu {},
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
    })},
    {"pro_gn_silu_64_mma", "mma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_gn_silu_64_mma" {
        input = { "N", 64, 16, 16 },
        group_norm { groups = 32, eps = 1e-6 },
        silu {},
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
    })},
    {"pro_tf32_gn_silu", NULL, 2, FG_BAR_TF32, PROLOGUE_SPEC(return layer "pro_tf32_gn_silu" {
        input = { "N", 32, 16, 16 },
        precision = "tf32",
        group_norm { groups = 8 },
        silu {},
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
    })},
    /* half layers with a prologue on half wgmma operands (sm_90a): the pack writes the
     * normalized input split into hi + lo of the dtype (fp32 precision: x_lo.w_hi +
     * x_hi.w_lo + x_hi.w_hi, the fp32 bar plus an ulp of the dtype) or rounded to it once
     * (tf32: the v12 bars, 4e-2 bf16, 5e-3 fp16); group and instance norms, padded channels
     * with groups, channels-last, two channel blocks, split K at batch 1 */
    {"pro_bf16_gn_silu_tf32_wgmma", "wgmma", 2, FG_BAR_TF32_BF16, PROLOGUE_SPEC(return layer "pro_bf16_gn_silu_tf32_wgmma" {
        input = { "N", 32, 15, 17 },
        dtype = "bf16",
        precision = "tf32",
        group_norm { groups = 8 },
        silu {},
        conv2d { out_channels = 32, kernel = 3, padding = 1 },
    })},
    {"pro_fp16_gn_silu_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_fp16_gn_silu_wgmma" {
        input = { "N", 64, 16, 16 },
        dtype = "fp16",
        group_norm { groups = 32, eps = 1e-6 },
        silu {},
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
    })},
    {"pro_fp16_gn_silu_tf32_wgmma", "wgmma", 2, FG_BAR_TF32, PROLOGUE_SPEC(return layer "pro_fp16_gn_silu_tf32_wgmma" {
        input = { "N", 64, 16, 16 },
        dtype = "fp16",
        precision = "tf32",
        group_norm { groups = 32, eps = 1e-6 },
        silu {},
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
    })},
    {"pro_bf16_instance_norm_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_instance_norm_wgmma" {
        input = { "N", 16, 14, 13 },
        dtype = "bf16",
        instance_norm { affine = true },
        leaky_relu { negative_slope = 0.1 },
        conv2d { out_channels = 24, kernel = 3, padding = 1, stride = 2 },
    })},
    {"pro_fp16_instance_norm_3d_tf32_wgmma", "wgmma", 2, FG_BAR_TF32,
     PROLOGUE_SPEC(return layer "pro_fp16_instance_norm_3d_tf32_wgmma" {
        input = { "N", 8, 6, 10, 12 },
        dtype = "fp16",
        precision = "tf32",
        instance_norm { affine = true },
        leaky_relu { negative_slope = 0.1 },
        conv3d { out_channels = 12, kernel = 3, padding = 1, stride = { 1, 2, 2 } },
    })},
    {"pro_fp16_relu_gn_mul_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_fp16_relu_gn_mul_wgmma" {
        input = { "N", 12, 13, 11 },
        dtype = "fp16",
        add { scalar = -0.25 },
        relu {},
        group_norm { groups = 4 },
        mul { param = "scale" },
        gelu {},
        conv2d { out_channels = 16, kernel = 3, padding = { 2, 1 }, dilation = { 2, 1 }, groups = 2 },
    })},
    {"pro_bf16_cl_gn_silu_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_cl_gn_silu_wgmma" {
        input = { "N", 48, 13, 14 },
        dtype = "bf16",
        layout = "channels_last",
        group_norm { groups = 6 },
        silu {},
        conv2d { out_channels = 32, kernel = 3, padding = 1, groups = 2 },
    })},
    {"pro_bf16_gn_silu_2blk_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_gn_silu_2blk_wgmma" {
        input = { "N", 64, 12, 12 },
        dtype = "bf16",
        group_norm { groups = 16, eps = 1e-6 },
        silu {},
        conv2d { out_channels = 200, kernel = 3, padding = 1 },
    })},
    /* layer_norm { dim = 1 } first in the prologue of a wgmma conv over a channels-last input:
     * the input pack by rows computes each pixel's statistics from its channels (the planner's
     * pack_pixel_stats): 12 threads a pixel (96 bf16 channels, ConvNeXt's), 16 (64 fp32), 6
     * with a padded 3x3 after it, 4 in 3D (fp16); pixels that do not fill the last block */
    {"pro_bf16_cl_cln_1x1_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_cl_cln_1x1_wgmma" {
        input = { "N", 96, 7, 9 },
        dtype = "bf16",
        layout = "channels_last",
        layer_norm { name = "norm", dim = 1, eps = 1e-6 },
        conv2d { out_channels = 192, kernel = 1 },
        gelu {},
    })},
    {"pro_cl_cln_relu_1x1_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_cl_cln_relu_1x1_wgmma" {
        input = { "N", 64, 5, 11 },
        layout = "channels_last",
        layer_norm { name = "norm", dim = 1 },
        relu {},
        conv2d { out_channels = 128, kernel = 1 },
    })},
    {"pro_bf16_cl_cln_3x3_wgmma", "wgmma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_cl_cln_3x3_wgmma" {
        input = { "N", 48, 13, 11 },
        dtype = "bf16",
        layout = "channels_last",
        layer_norm { name = "norm", dim = 1 },
        mul { param = "scale" },
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
    })},
    {"pro_fp16_cl_cln_3d_tf32_wgmma", "wgmma", 2, FG_BAR_TF32, PROLOGUE_SPEC(return layer "pro_fp16_cl_cln_3d_tf32_wgmma" {
        input = { "N", 32, 4, 5, 6 },
        dtype = "fp16",
        layout = "channels_last",
        precision = "tf32",
        layer_norm { name = "norm", dim = 1 },
        conv3d { out_channels = 64, kernel = 1 },
    })},
    /* the statistics pass by pixel rows (mma.sync reads the input itself): a key a pixel for
     * layer_norm { dim = 1 } (96 bf16 channels: 12 threads a pixel), a key a channel for an
     * instance norm whose channels are as many as the pixels (16 on 4x4) */
    {"pro_bf16_cl_cln_rows_mma", "mma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_cl_cln_rows_mma" {
        input = { "N", 96, 7, 9 },
        dtype = "bf16",
        layout = "channels_last",
        layer_norm { name = "norm", dim = 1, eps = 1e-6 },
        conv2d { out_channels = 32, kernel = 1 },
    })},
    {"pro_bf16_cl_in_keys_as_pixels_mma", "mma", 2, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_cl_in_keys_as_pixels_mma" {
        input = { "N", 16, 4, 4 },
        dtype = "bf16",
        layout = "channels_last",
        instance_norm { affine = true },
        leaky_relu { negative_slope = 0.1 },
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
    })},
    {"pro_bf16_split_k_batch1", "wgmma", 1, 1e-4, PROLOGUE_SPEC(return layer "pro_bf16_split_k_batch1" {
        input = { "N", 256, 14, 14 },
        dtype = "bf16",
        group_norm { groups = 32, eps = 1e-6 },
        silu {},
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
    })},
};

#define N_PROLOGUE_CASES ((int)(sizeof prologue_cases / sizeof *prologue_cases))

#endif
