/* SPDX-License-Identifier: Apache-2.0 */
/* Layers with layer_norm { dim = 1 } (ConvNeXt's LayerNorm: each position normalized over its
 * channels) after the conv: each conv engine forced, materialize and recompute, channels last,
 * a half dtype, the ConvNeXt shape (depthwise 7x7, then the norm, a layer scale and the
 * residual). The compile test renders each for its engine (sm_80 where the engine runs there,
 * and sm_90a) and checks the plan (tests/test_compile.c); the GPU test runs each in a context
 * preferring `engine` against the CPU float64 reference (tests/gpu/test_gpu_variants.c). The
 * prologue form is in tests/prologue_specs.h. These kernels have front-end warnings (#177-D,
 * an unused channel coordinate: the statistic's key has no channel), as layer_norm over C, H,
 * W without affine has had; the wgmma-warning check reads ptxas's lines only. */
#ifndef FG_TEST_CHANNEL_NORM_SPECS_H
#define FG_TEST_CHANNEL_NORM_SPECS_H

#include <stdint.h>

typedef struct channel_norm_case {
    const char *name;
    const char *engine;   /* FUSEGEN_CONV_ENGINE: "fma", "mma" or "wgmma" (sm_90a only) */
    const char *strategy; /* the strategy the plan must have */
    int64_t batch;
    double tol;           /* fp32: against float64; a half dtype: plus 1 ulp of it */
    const char *source;
} channel_norm_case;

#define CHANNEL_NORM_SPEC(...) #__VA_ARGS__

static const channel_norm_case channel_norm_cases[] = {
    {"cln_fma_materialize", "fma", "materialize", 3, 1e-4, CHANNEL_NORM_SPEC(return layer "cln_fma_materialize" {
        input = { "N", 16, 13, 11 },
        strategy = "materialize",
        conv2d { out_channels = 24, kernel = 3, padding = 1 },
        layer_norm { name = "ln", dim = 1, eps = 1e-6 },
        gelu {},
    })},
    {"cln_mma_recompute", "mma", "recompute", 2, 1e-4, CHANNEL_NORM_SPEC(return layer "cln_mma_recompute" {
        input = { "N", 8, 14, 12 },
        strategy = "recompute",
        conv2d { out_channels = 32, kernel = 3 },
        layer_norm { dim = 1 },
        relu {},
    })},
    {"cln_wg_materialize", "wgmma", "materialize", 2, 1e-4, CHANNEL_NORM_SPEC(return layer "cln_wg_materialize" {
        input = { "N", 32, 12, 12 },
        strategy = "materialize",
        conv2d { out_channels = 64, kernel = 1 },
        layer_norm { name = "ln", dim = 1, affine = false },
    })},
    {"cln_wg_recompute", "wgmma", "recompute", 2, 1e-4, CHANNEL_NORM_SPEC(return layer "cln_wg_recompute" {
        input = { "N", 32, 10, 12 },
        strategy = "recompute",
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
        layer_norm { name = "ln", dim = 1 },
        gelu {},
    })},
    /* ConvNeXt's start of a block, small: depthwise 7x7, the norm, then (as a stand-in for the
     * MLP) a layer scale and the residual with the conv's output */
    {"cln_cl_fma_depthwise", "fma", "materialize", 2, 1e-4, CHANNEL_NORM_SPEC(return layer "cln_cl_fma_depthwise" {
        input = { "N", 24, 14, 14 },
        layout = "channels_last",
        conv2d { name = "dwconv", out_channels = 24, kernel = 7, padding = 3, groups = 24, as = "c" },
        layer_norm { name = "norm", dim = 1, eps = 1e-6 },
        mul { param = "gamma", shape = { 24, 1, 1 } },
        add { value = "c" },
    })},
    {"cln_cl_mma_recompute", "mma", "recompute", 2, 1e-4, CHANNEL_NORM_SPEC(return layer "cln_cl_mma_recompute" {
        input = { "N", 16, 11, 13 },
        layout = "channels_last",
        strategy = "recompute",
        conv2d { out_channels = 48, kernel = 3, padding = 1 },
        layer_norm { name = "ln", dim = 1 },
        silu {},
    })},
    {"cln_cl_wg", "wgmma", "materialize", 2, 1e-4, CHANNEL_NORM_SPEC(return layer "cln_cl_wg" {
        input = { "N", 32, 10, 12 },
        layout = "channels_last",
        strategy = "materialize",
        conv2d { out_channels = 64, kernel = 3, padding = 1 },
        layer_norm { name = "ln", dim = 1, eps = 1e-6 },
        gelu {},
    })},
    {"cln_cl_bf16_mma", "mma", "materialize", 2, 1e-4, CHANNEL_NORM_SPEC(return layer "cln_cl_bf16_mma" {
        input = { "N", 16, 9, 10 },
        layout = "channels_last",
        dtype = "bf16",
        strategy = "materialize",
        conv2d { out_channels = 32, kernel = 3, padding = 1 },
        layer_norm { name = "ln", dim = 1 },
    })},
};

#define N_CHANNEL_NORM_CASES ((int)(sizeof channel_norm_cases / sizeof *channel_norm_cases))

#endif
