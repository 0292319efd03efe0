/* SPDX-License-Identifier: Apache-2.0 */
/* Layers whose input is too wide for one block of the wgmma engine's input-packing pass (32
 * pixels x every packed channel of a pixel in a 48 KB tile: more than 383 TF32 or 767 half
 * channels, padding included), so that the pass transposes the channels in blocks
 * (fg_wgmma_tiling.pack_xb; templates/conv_wgmma.lua, render_pack_input_blocked). Each checks
 * a detail of the blocked path: a block boundary inside a group's padding channels, channels
 * last, a half input packed as it is, a half input through a prologue (fp32 values split into
 * hi and lo), precision tf32. The compile test plans each on wgmma for sm_90a and asserts the
 * pass has several channel blocks (tests/test_compile.c); the GPU test runs them against the
 * CPU float64 reference in a context preferring wgmma (tests/gpu/test_gpu_variants.c). */
#ifndef FG_TEST_WIDE_INPUT_SPECS_H
#define FG_TEST_WIDE_INPUT_SPECS_H

#include <stdint.h>

typedef struct wide_input_case {
    const char *name;
    int64_t batch;
    double tol; /* fp32: against float64; a half dtype: plus 1 ulp of it (gpu_harness.h) */
    const char *source;
} wide_input_case;

#define WIDE_INPUT_SPEC(...) #__VA_ARGS__

static const wide_input_case wide_input_cases[] = {
    /* ConvNeXt's second pointwise conv (384 -> 96) with its layer scale: 384 TF32 channels, two
     * blocks of 192 */
    {"wide_fp32_1x1_384", 2, 1e-4, WIDE_INPUT_SPEC(return layer "wide_fp32_1x1_384" {
        input = { "N", 384, 13, 11 },
        conv2d { out_channels = 96, kernel = 1 },
        mul { param = "gamma", shape = { 96, 1, 1 } },
    })},
    /* 3 groups of 130 channels, each padded to 136: 408 packed channels in blocks of 208, the
     * first block ending inside the second group */
    {"wide_fp32_groups_padded_3x3", 2, 1e-4, WIDE_INPUT_SPEC(return layer "wide_fp32_groups_padded_3x3" {
        input = { "N", 390, 9, 10 },
        conv2d { out_channels = 96, kernel = 3, padding = 1, groups = 3 },
        relu {},
    })},
    /* channels last, 3x3 with stride 2, 3 blocks of 344 (the last 336) */
    {"wide_fp32_channels_last_1024", 1, 1e-4, WIDE_INPUT_SPEC(return layer "wide_fp32_channels_last_1024" {
        input = { "N", 1024, 7, 9 },
        layout = "channels_last",
        conv2d { out_channels = 64, kernel = 3, stride = 2, padding = 1 },
        gelu {},
    })},
    /* a bf16 input packed as it is: 800 channels in two blocks of 400 */
    {"wide_bf16_1x1_800", 2, 1e-4, WIDE_INPUT_SPEC(return layer "wide_bf16_1x1_800" {
        input = { "N", 800, 10, 10 },
        dtype = "bf16",
        conv2d { out_channels = 128, kernel = 1 },
    })},
    /* fp16 through a prologue (GroupNorm -> SiLU, Stable Diffusion's 640-channel stage): the
     * normalized fp32 values split into hi and lo, 640 channels in two blocks of 320 */
    {"wide_fp16_gn_silu_conv_640", 1, 1e-4, WIDE_INPUT_SPEC(return layer "wide_fp16_gn_silu_conv_640" {
        input = { "N", 640, 8, 8 },
        dtype = "fp16",
        group_norm { groups = 32, eps = 1e-6 },
        silu {},
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
    })},
    /* precision tf32, one TF32 part: 512 channels in two blocks of 256 (the TF32 bar) */
    {"wide_tf32_1x1_512", 2, 5e-3, WIDE_INPUT_SPEC(return layer "wide_tf32_1x1_512" {
        input = { "N", 512, 12, 12 },
        precision = "tf32",
        conv2d { out_channels = 128, kernel = 1 },
        relu {},
    })},
};

#define N_WIDE_INPUT_CASES ((int)(sizeof wide_input_cases / sizeof *wide_input_cases))

#endif
