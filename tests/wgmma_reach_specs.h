/* SPDX-License-Identifier: Apache-2.0 */
/* Layers past a limit the wgmma engine once had, so that they ran on mma.sync:
 *   - "channel blocks": an input too wide for one block of the input-packing pass (32 pixels x
 *     every packed channel of a pixel in a 48 KB tile: more than 383 TF32 or 767 half channels,
 *     padding included), whose pass now transposes the channels in blocks
 *     (fg_wgmma_tiling.pack_xb; templates/conv_wgmma.lua, render_pack_input_blocked). The
 *     cases check a block boundary inside a group's padding channels, channels last, a half
 *     input packed as it is, a half input through a prologue (fp32 values split into hi and
 *     lo), precision tf32;
 *   - "16-bit coordinates": a 2D image of 992 pixels or more along a side, past the producer's
 *     10-bit packed row origins (fg_wgmma_tiling.coord_bits): padding, stride, dilation and
 *     channels last at the far edges;
 *   - "wide channel blocks": half operands with a long K in tiles of more than 128 channels
 *     (up to 256: planner.c wgmma_tiling), a channel block not a multiple of 32 (the staged
 *     epilogue's last 32-channel chunk partial), a residual in the epilogue, fp32 precision's
 *     x.w_lo + x.w_hi with block accumulation, a prologue;
 *   - "flat tiles": small images, whose tile's rows run on over the next samples' pixels
 *     (fg_wgmma_tiling.flat): a tile over 3 samples, one over 4 with a sample's first pixel in
 *     the middle of a warp's rows, a batch whose pixels fill whole tiles, channels last (the
 *     staged epilogue) and NCHW (the fragments'), a direct 1x1 half input, stride 2 with
 *     groups, 3D, split K, a parameter indexed by pixel.
 * The compile test plans each on wgmma (preferred, as the GPU test runs them) for sm_90a and asserts the plan took the way named
 * (tests/test_compile.c); the GPU test runs them against the CPU float64 reference in a
 * context preferring wgmma (tests/gpu/test_gpu_variants.c). */
#ifndef FG_TEST_WGMMA_REACH_SPECS_H
#define FG_TEST_WGMMA_REACH_SPECS_H

#include <stdint.h>
#include "../common/accuracy.h"

typedef struct wgmma_reach_case {
    const char *name;
    const char *reach; /* "channel blocks", "16-bit coordinates", "wide channel blocks" or "flat tiles" */
    int64_t batch;
    double tol; /* fp32: against float64; a half dtype: plus 1 ulp of it (gpu_harness.h) */
    const char *source;
} wgmma_reach_case;

#define WGMMA_REACH_SPEC(...) #__VA_ARGS__

static const wgmma_reach_case wgmma_reach_cases[] = {
    /* ConvNeXt's second pointwise conv (384 -> 96) with its layer scale: 384 TF32 channels, two
     * blocks of 192 */
    {"wide_fp32_1x1_384", "channel blocks", 2, 1e-4, WGMMA_REACH_SPEC(return layer "wide_fp32_1x1_384" {
        input = { "N", 384, 13, 11 },
        conv2d { out_channels = 96, kernel = 1 },
        mul { param = "gamma", shape = { 96, 1, 1 } },
    })},
    /* 3 groups of 130 channels, each padded to 136: 408 packed channels in blocks of 208, the
     * first block ending inside the second group */
    {"wide_fp32_groups_padded_3x3", "channel blocks", 2, 1e-4, WGMMA_REACH_SPEC(return layer "wide_fp32_groups_padded_3x3" {
        input = { "N", 390, 9, 10 },
        conv2d { out_channels = 96, kernel = 3, padding = 1, groups = 3 },
        relu {},
    })},
    /* channels last, 3x3 with stride 2: packed by pixel rows in 3 channel blocks of 352 (no
     * per-pixel norm in the prologue, and 264 vectors of 4 channels a pixel, more than a block's
     * 256 threads: either keeps the channel blocks, planner.c) */
    {"wide_fp32_channels_last_1056", "channel blocks", 1, 1e-4, WGMMA_REACH_SPEC(return layer "wide_fp32_channels_last_1056" {
        input = { "N", 1056, 7, 9 },
        layout = "channels_last",
        conv2d { out_channels = 64, kernel = 3, stride = 2, padding = 1 },
        gelu {},
    })},
    /* a bf16 input packed as it is: 800 channels in two blocks of 400 */
    {"wide_bf16_1x1_800", "channel blocks", 2, 1e-4, WGMMA_REACH_SPEC(return layer "wide_bf16_1x1_800" {
        input = { "N", 800, 10, 10 },
        dtype = "bf16",
        conv2d { out_channels = 128, kernel = 1 },
    })},
    /* fp16 through a prologue (GroupNorm -> SiLU, Stable Diffusion's 640-channel stage): the
     * normalized fp32 values split into hi and lo, 640 channels in two blocks of 320 */
    {"wide_fp16_gn_silu_conv_640", "channel blocks", 1, 1e-4, WGMMA_REACH_SPEC(return layer "wide_fp16_gn_silu_conv_640" {
        input = { "N", 640, 8, 8 },
        dtype = "fp16",
        group_norm { groups = 32, eps = 1e-6 },
        silu {},
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
    })},
    /* precision tf32, one TF32 part: 512 channels in two blocks of 256 (the TF32 bar) */
    {"wide_tf32_1x1_512", "channel blocks", 2, FG_BAR_TF32, WGMMA_REACH_SPEC(return layer "wide_tf32_1x1_512" {
        input = { "N", 512, 12, 12 },
        precision = "tf32",
        conv2d { out_channels = 128, kernel = 1 },
        relu {},
    })},
    /* 1100 pixels wide, 1030 high, padded: both coordinates past 10 bits */
    {"big_fp32_3x3_1100", "16-bit coordinates", 1, 1e-4, WGMMA_REACH_SPEC(return layer "big_fp32_3x3_1100" {
        input = { "N", 8, 1030, 1100 },
        conv2d { out_channels = 16, kernel = 3, padding = 1 },
        relu {},
    })},
    /* a tall bf16 channels-last image with stride 2 */
    {"big_bf16_cl_stride2_tall", "16-bit coordinates", 2, 1e-4, WGMMA_REACH_SPEC(return layer "big_bf16_cl_stride2_tall" {
        input = { "N", 16, 2101, 40 },
        dtype = "bf16",
        layout = "channels_last",
        conv2d { out_channels = 32, kernel = 3, stride = 2, padding = 1 },
    })},
    /* a long row with a dilated 5x5 kernel and padding 4 at both ends */
    {"big_fp32_dilated_row_1500", "16-bit coordinates", 1, 1e-4, WGMMA_REACH_SPEC(return layer "big_fp32_dilated_row_1500" {
        input = { "N", 8, 24, 1500 },
        conv2d { out_channels = 16, kernel = 5, dilation = 2, padding = 4 },
        gelu {},
    })},
    /* SD-like: bf16 channels last, 192 -> 320 (2 blocks of 160: 27 K chunks), precision tf32
     * (the weights rounded to bf16: the half cases' tf32 bar, FG_BAR_TF32_BF16, test_gpu_variants.c), a
     * per-channel shift; 44x64, the smallest image of 3 x 22 tiles of 128 x 128 a sample that
     * the planner widens (v43; 10x9 takes flat tiles of 128 channels). With a parameter of
     * the output's shape this layer spills under NVRTC once its full-tile epilogue is live (any
     * image of 64 pixels or more; at 10x9 it was dead code): bench/NOTES.md v40 */
    {"wide_bn_bf16_cl_3x3_320", "wide channel blocks", 2, FG_BAR_TF32_BF16, WGMMA_REACH_SPEC(return layer "wide_bn_bf16_cl_3x3_320" {
        input = { "N", 192, 44, 64 },
        dtype = "bf16",
        layout = "channels_last",
        precision = "tf32",
        conv2d { out_channels = 320, kernel = 3, padding = 1 },
        add { param = "skip", shape = { 320, 1, 1 } },
    })},
    /* fp16 NCHW at fp32 precision (x.w_lo + x.w_hi, block accumulation), 272 channels in 2
     * blocks of 136, GroupNorm -> SiLU before the conv; 44x64 as above */
    {"wide_bn_fp16_pro_3x3_272", "wide channel blocks", 2, 1e-4, WGMMA_REACH_SPEC(return layer "wide_bn_fp16_pro_3x3_272" {
        input = { "N", 128, 44, 64 },
        dtype = "fp16",
        group_norm { groups = 16 },
        silu {},
        conv2d { out_channels = 272, kernel = 3, padding = 1 },
        relu {},
    })},
    /* 7x7 (49 pixels a sample) at batch 5: tiles over 3 samples, the last past the batch;
     * fp32 at fp32 precision (both operands in two parts), NCHW */
    {"flat_fp32_7x7_batch5", "flat tiles", 5, 1e-4, WGMMA_REACH_SPEC(return layer "flat_fp32_7x7_batch5" {
        input = { "N", 64, 7, 7 },
        conv2d { out_channels = 96, kernel = 3, padding = 1 },
        mul { param = "m", shape = { 96, 1, 1 } },
        relu {},
    })},
    /* 5x7 (35 pixels): a sample starts inside a warp's 16 rows; a direct bf16 channels-last
     * 1x1 input, the staged epilogue */
    {"flat_bf16_cl_1x1_5x7", "flat tiles", 7, 1e-4, WGMMA_REACH_SPEC(return layer "flat_bf16_cl_1x1_5x7" {
        input = { "N", 64, 5, 7 },
        dtype = "bf16",
        layout = "channels_last",
        conv2d { out_channels = 128, kernel = 1 },
        gelu {},
    })},
    /* 14x14 -> 7x7 by stride 2, two groups, fp16 at precision tf32 */
    {"flat_fp16_stride2_groups", "flat tiles", 3, FG_BAR_TF32, WGMMA_REACH_SPEC(return layer "flat_fp16_stride2_groups" {
        input = { "N", 64, 14, 14 },
        dtype = "fp16",
        precision = "tf32",
        conv2d { out_channels = 64, kernel = 3, stride = 2, padding = 1, groups = 2 },
        hardswish {},
    })},
    /* 3D, 4x4x4 (64 pixels) with padding, bf16 channels last */
    {"flat_bf16_cl_3d_4cubed", "flat tiles", 3, 1e-4, WGMMA_REACH_SPEC(return layer "flat_bf16_cl_3d_4cubed" {
        input = { "N", 16, 4, 4, 4 },
        dtype = "bf16",
        layout = "channels_last",
        conv3d { out_channels = 48, kernel = 3, padding = 1 },
        add { param = "b", shape = { 48, 1, 1, 1 } },
    })},
    /* by TMA (a rank-5 im2col map): 3D, 4x4x4 with padding, 64 bf16 channels */
    {"flat_bf16_cl_3d_tma", "flat tiles", 3, 1e-4, WGMMA_REACH_SPEC(return layer "flat_bf16_cl_3d_tma" {
        input = { "N", 64, 4, 4, 4 },
        dtype = "bf16",
        layout = "channels_last",
        conv3d { out_channels = 64, kernel = 3, padding = 1 },
        relu {},
    })},
    /* by TMA: 14x14 -> 7x7, stride 2 with dilation 2 and padding 2 */
    {"flat_bf16_cl_dilated_stride2_tma", "flat tiles", 5, 1e-4, WGMMA_REACH_SPEC(return layer "flat_bf16_cl_dilated_stride2_tma" {
        input = { "N", 64, 14, 14 },
        dtype = "bf16",
        layout = "channels_last",
        conv2d { out_channels = 64, kernel = 3, stride = 2, padding = 2, dilation = 2 },
        silu {},
    })},
    /* batch 128 at 7x7: 6272 pixels, 49 whole tiles (no row past the batch); a parameter
     * indexed by pixel as well as channel */
    {"flat_tf32_7x7_batch128", "flat tiles", 128, FG_BAR_TF32, WGMMA_REACH_SPEC(return layer "flat_tf32_7x7_batch128" {
        input = { "N", 32, 7, 7 },
        precision = "tf32",
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
        add { param = "skip", shape = { 64, 7, 7 } },
    })},
    /* a long K at batch 2: split K over 1 flat tile a channel block (98 pixels) */
    {"flat_bf16_split_k_7x7", "flat tiles", 2, 1e-4, WGMMA_REACH_SPEC(return layer "flat_bf16_split_k_7x7" {
        input = { "N", 512, 7, 7 },
        dtype = "bf16",
        conv2d { out_channels = 128, kernel = 3, padding = 1 },
        relu {},
    })},
};

#define N_WGMMA_REACH_CASES ((int)(sizeof wgmma_reach_cases / sizeof *wgmma_reach_cases))

#endif
