/* SPDX-License-Identifier: Apache-2.0 */
/* Layers whose conv splits K on the wgmma engine (sm_90a; gen/planner.c, wgmma_split): few
 * output tiles, a long K. The compile test renders and compiles them for sm_90a; the GPU test
 * (tests/gpu/test_gpu_split_k.c) runs them against the CPU reference and checks that repeated
 * runs, graph replays and a caller's workspace give the same bits. `splits` is what a launch
 * of `batch` samples uses (fg_wgmma_splits); 1 for a split-capable kernel run at a batch
 * that fills the GPU without splitting. `splits_waves` is the same with the splits counted in
 * waves (FUSEGEN_SPLIT_WAVES=1, fg_plan_options.split_waves: bench/gpu-check runs the GPU test
 * with it too); past one wave of 132 units where tiles x splits exceed it. `splits_turns` is
 * the same where the consumer warpgroups take tiles in turn wherever they can
 * (FUSEGEN_WGMMA_ALTERNATE=2, fg_plan_options.wgmma_alternate: every case without statistics
 * partials; 64-row tiles, so fewer splits where the tiles double): a unit is one warpgroup's
 * (tile, split), its fixup that warpgroup's alone. */
#ifndef FG_TEST_SPLIT_K_SPECS_H
#define FG_TEST_SPLIT_K_SPECS_H

#include <stdint.h>
#include "../common/accuracy.h"

typedef struct split_k_case {
    const char *name;
    int64_t batch;
    int splits;
    int splits_waves;
    int splits_turns;
    double tol;
    const char *source;
} split_k_case;

#define SPLIT_K_SPEC(...) #__VA_ARGS__

static const split_k_case split_k_cases[] = {
    /* 4 tiles of 72 K chunks: 12 splits of 6 chunks */
    {"split_2d_bias_relu", 1, 12, 12, 9, 1e-4, SPLIT_K_SPEC(return layer "split_2d_bias_relu" {
        input = { "N", 256, 14, 14 },
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
        relu {},
    })},
    /* statistics over every split's sum: the last CTA of each tile feeds them */
    {"split_2d_instance_norm", 2, 12, 12, 12, 1e-4, SPLIT_K_SPEC(return layer "split_2d_instance_norm" {
        input = { "N", 256, 14, 14 },
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
        instance_norm { affine = true },
        relu {},
    })},
    /* both conv passes of recompute split; group statistics; stride 2 */
    {"split_2d_group_norm_recompute", 3, 6, 6, 6, 1e-4, SPLIT_K_SPEC(return layer "split_2d_group_norm_recompute" {
        input = { "N", 128, 28, 28 },
        strategy = "recompute",
        conv2d { out_channels = 256, kernel = 3, stride = 2, padding = 1 },
        group_norm { groups = 8 },
        hardswish {},
    })},
    /* 3D: 108 K chunks over 16 splits (6 or 7 each) */
    {"split_3d_mul_silu", 2, 16, 16, 8, 1e-4, SPLIT_K_SPEC(return layer "split_3d_mul_silu" {
        input = { "N", 128, 8, 8, 8 },
        conv3d { out_channels = 128, kernel = 3, padding = 1 },
        mul { param = "scale", shape = { 128, 1, 1, 1 } },
        silu {},
    })},
    /* two groups of 128 channels, no bias */
    {"split_grouped", 1, 6, 6, 4, 1e-4, SPLIT_K_SPEC(return layer "split_grouped" {
        input = { "N", 256, 14, 14 },
        conv2d { out_channels = 256, kernel = 3, padding = 1, groups = 2, bias = false },
        add { param = "shift", shape = { 256, 1, 1 } },
        gelu {},
    })},
    /* channels that fill no tile (136 = 2 x 72 padded), a statistic fed tile by tile (max) */
    {"split_odd_channels_softmax", 2, 3, 3, 3, 1e-4, SPLIT_K_SPEC(return layer "split_odd_channels_softmax" {
        input = { "N", 96, 9, 11 },
        conv2d { out_channels = 136, kernel = 3, padding = 1 },
        softmax { dim = 1 },
    })},
    /* one TF32 product: the plain accumulator path */
    {"split_tf32", 1, 9, 9, 5, FG_BAR_TF32, SPLIT_K_SPEC(return layer "split_tf32" {
        input = { "N", 256, 14, 14 },
        precision = "tf32",
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
        relu {},
    })},
    /* the split-capable kernel at a batch that fills the GPU: flat tiles (49 pixels a
     * sample), 37 x 2 tiles at batch 96, no split; counted in waves, 7 splits of 10 or 11 of
     * its 72 K chunks, 518 units (4 waves) of the 528 partials the workspace holds */
    {"split_7x7_unsplit_batch", 96, 1, 7, 1, 1e-4, SPLIT_K_SPEC(return layer "split_7x7_unsplit_batch" {
        input = { "N", 256, 7, 7 },
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
        relu {},
    })},
    /* ... and at one that does not: 4 x 2 flat tiles (each over up to 4 samples) x 12 splits */
    {"split_7x7_batch_8", 8, 12, 12, 9, 1e-4, SPLIT_K_SPEC(return layer "split_7x7_batch_8" {
        input = { "N", 256, 7, 7 },
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
        relu {},
    })},
    /* a bf16 input and output: the partials stay fp32, the last CTA rounds once; bf16 operands
     * (K chunks of 64: 36, a ring of 4 stages): 4 splits of 9 chunks */
    {"split_bf16_instance_norm", 2, 4, 4, 4, 1e-4, SPLIT_K_SPEC(return layer "split_bf16_instance_norm" {
        input = { "N", 256, 14, 14 },
        dtype = "bf16",
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
        instance_norm { affine = true },
        relu {},
    })},
    /* ConvNeXt 768's last 1x1 conv (3072 -> 768 on 7x7, bench/NOTES.md Waiting 0 (k)) at
     * fp32 precision: 78 flat tiles at batch 32 fill one wave unsplit; counted in waves, 5
     * splits of 9 or 10 of its 48 K chunks, 390 units over 3 waves */
    {"split_waves_1x1", 32, 1, 5, 1, 1e-4, SPLIT_K_SPEC(return layer "split_waves_1x1" {
        input = { "N", 3072, 7, 7 },
        dtype = "bf16",
        layout = "channels_last",
        conv2d { out_channels = 768, kernel = 1 },
        mul { param = "gamma", shape = { 768, 1, 1 } },
    })},
    /* fp16 operands: 36 K chunks of 64 over 4 splits (2 tiles a sample, 16 at batch 8) */
    {"split_fp16_batch_8", 8, 4, 4, 3, 1e-4, SPLIT_K_SPEC(return layer "split_fp16_batch_8" {
        input = { "N", 256, 7, 7 },
        dtype = "fp16",
        conv2d { out_channels = 256, kernel = 3, padding = 1 },
        relu {},
    })},
};

#define N_SPLIT_K_CASES ((int)(sizeof split_k_cases / sizeof *split_k_cases))

#endif
