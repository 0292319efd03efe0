/* SPDX-License-Identifier: Apache-2.0 */
/* Layers whose reduction over the channels runs in the wgmma conv pass's epilogue (sm_90a;
 * gen/planner.c, wgmma_channel_reduction): every tile spans all output channels, and the
 * chain after the conv is elementwise ops, one max/min/sum/mean/logsumexp over dim 1, then
 * elementwise ops. Shapes the planner sends to wgmma on its own (fp32: K >= 256 and >= 64
 * output channels; tf32: any). The compile test renders and compiles them for sm_90a; the GPU
 * variants test (tests/gpu/test_gpu_variants.c) runs them against the CPU float64 reference. */
#ifndef FG_TEST_CHANNEL_REDUCE_SPECS_H
#define FG_TEST_CHANNEL_REDUCE_SPECS_H

#include <stdint.h>
#include "../common/accuracy.h"

typedef struct channel_reduce_case {
    const char *name;
    int64_t batch;
    double tol;
    const char *source;
} channel_reduce_case;

#define CHANNEL_REDUCE_SPEC(...) #__VA_ARGS__

static const channel_reduce_case channel_reduce_cases[] = {
    /* issue 11's example, smaller: a parameter and relu before a logsumexp keeping the dim */
    {"chanred_logsumexp_keepdim", 3, 1e-4, CHANNEL_REDUCE_SPEC(return layer "chanred_logsumexp_keepdim" {
        input = { "N", 64, 30, 34 },
        conv2d { out_channels = 128, kernel = { 3, 3 } },
        add { param = "shift" },
        relu {},
        logsumexp { dim = 1, keepdim = true },
    })},
    /* max without keepdim, a sigmoid on the reduced value; 96 channels */
    {"chanred_max_sigmoid", 2, 1e-4, CHANNEL_REDUCE_SPEC(return layer "chanred_max_sigmoid" {
        input = { "N", 32, 17, 19 },
        conv2d { out_channels = 96, kernel = 3, padding = 1 },
        mul { param = "scale", shape = { 96, 1, 1 } },
        max { dim = 1 },
        sigmoid {},
    })},
    /* min keeping the dim, no bias, the conv's value read back before the reduction */
    {"chanred_min_residual", 3, 1e-4, CHANNEL_REDUCE_SPEC(return layer "chanred_min_residual" {
        input = { "N", 40, 15, 13 },
        conv2d { out_channels = 72, kernel = 3, bias = false, as = "c" },
        tanh {},
        add { value = "c" },
        min { dim = 1, keepdim = true },
        add { scalar = 0.25 },
    })},
    /* a sum at batch 8 */
    {"chanred_sum_batch8", 8, 1e-4, CHANNEL_REDUCE_SPEC(return layer "chanred_sum_batch8" {
        input = { "N", 64, 12, 12 },
        conv2d { out_channels = 128, kernel = 3, padding = 1 },
        relu {},
        sum { dim = 1 },
    })},
    /* 3D; 100 channels (a tile of 104: channels past the layer's in every quad) */
    {"chanred_mean_3d", 2, 1e-4, CHANNEL_REDUCE_SPEC(return layer "chanred_mean_3d" {
        input = { "N", 32, 6, 7, 8 },
        conv3d { out_channels = 100, kernel = 3, padding = 1 },
        gelu {},
        mean { dim = 1, keepdim = true },
        mul { scalar = 2.0 },
    })},
    /* split K: 256 -> 128 3x3 on 14x14 has 2 tiles a sample: 12 splits at batch 1, 8 at batch
     * 8; the reduction runs in the last split's epilogue; ops after it read it by name */
    {"chanred_logsumexp_split_k_batch1", 1, 1e-4, CHANNEL_REDUCE_SPEC(return layer "chanred_logsumexp_split_k_batch1" {
        input = { "N", 256, 14, 14 },
        conv2d { out_channels = 128, kernel = 3, padding = 1 },
        add { param = "shift", shape = { 128, 1, 1 } },
        logsumexp { dim = 1, as = "l" },
        sub { scalar = 1.0 },
        mul { value = "l" },
    })},
    {"chanred_logsumexp_split_k_batch8", 8, 1e-4, CHANNEL_REDUCE_SPEC(return layer "chanred_logsumexp_split_k_batch8" {
        input = { "N", 256, 14, 14 },
        conv2d { out_channels = 128, kernel = 3, padding = 1 },
        add { param = "shift", shape = { 128, 1, 1 } },
        logsumexp { dim = 1, as = "l" },
        sub { scalar = 1.0 },
        mul { value = "l" },
    })},
    /* one TF32 product (precision "tf32"): the plain accumulator path */
    {"chanred_sum_tf32", 2, FG_BAR_TF32, CHANNEL_REDUCE_SPEC(return layer "chanred_sum_tf32" {
        input = { "N", 128, 20, 20 },
        precision = "tf32",
        conv2d { out_channels = 128, kernel = 3, padding = 1 },
        relu {},
        sum { dim = 1 },
        mul { scalar = 0.25 },
    })},
    /* a bf16 input and output: the reduced value rounded where it is stored */
    {"chanred_logsumexp_bf16", 2, 1e-4, CHANNEL_REDUCE_SPEC(return layer "chanred_logsumexp_bf16" {
        input = { "N", 64, 30, 34 },
        dtype = "bf16",
        conv2d { out_channels = 128, kernel = 3 },
        relu {},
        logsumexp { dim = 1, keepdim = true },
    })},
};

#define N_CHANNEL_REDUCE_CASES ((int)(sizeof channel_reduce_cases / sizeof *channel_reduce_cases))

#endif
