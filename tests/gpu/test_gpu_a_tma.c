/* SPDX-License-Identifier: Apache-2.0 */
/* The wgmma conv's A operand by TMA in im2col mode (FUSEGEN_WGMMA_A_TMA=2, fg_wgmma_tiling.a_tma;
 * bench/hopper-tma.md) against the cp.async producer, on the GPU (sm_90a; elsewhere every case
 * says it is skipped). The TMA unit must write the same bytes into every stage as the 128
 * producer threads do (same rows, swizzle, channel block, zero fill), so the wgmma sums and the
 * whole output are the same bits. Per layer:
 *   1. planned twice, the knob off and on (the context's plan options), the engine forced to
 *      wgmma; on must give a_tma 2 (the cases are eligible by construction);
 *   2. the same random parameters and input; the output of the TMA run (which captures the
 *      layer's graph), of a replay, of a run on a copy of the input at another address (the
 *      packed input moves with the workspace only, but a direct input moves: the map is
 *      encoded again) and of a run at batch 1 (another map batch, another graph) must be the
 *      cp.async run's bits (batch 1: its first sample's);
 *   3. each case runs under an alarm: a full barrier whose expect_tx never completes (a TMA
 *      copy counting fewer bytes than armed) hangs the kernel; the alarm turns that into a
 *      failure naming the case instead of a stuck test.
 * The shapes: padding on every side, stride 2, dilation 2, OW and OPIX not multiples of the
 * tile (rows crossing output rows and, at batch >= 2, into the next sample: the epilogue must
 * mask them, statistics included), groups, 64 and 96 channels a group (a chunk's channel
 * offset), 3D with depth padding (rank-5 maps), fp32 (3xTF32: two maps), tf32, bf16 and fp16
 * (a channels-last bf16 input read directly: the map over the caller's input), a prologue's
 * split half input (two maps of halves), a 1x1 stride-2 conv, 1x1 convs whose channels are no
 * multiple of a chunk (the last chunk's tail is the TMA unit's zero fill) and split K. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/api_internal.h" /* fg_context.plan_options: the knob per layer */
#include "gpu_harness.h"

typedef struct tma_case {
    const char *name;
    int64_t batch;
    const char *source;
} tma_case;

#define LAYER(name, body) "return layer \"" name "\" {\n" body "\n}\n"

static const tma_case cases[] = {
    {"pad_all_sides", 2,
     LAYER("pad_all_sides", "input = { \"N\", 64, 30, 30 },\nconv2d { out_channels = 128, kernel = 3, padding = 1 }")},
    {"stride2", 3,
     LAYER("stride2", "input = { \"N\", 64, 57, 57 },\nconv2d { out_channels = 64, kernel = 3, padding = 1, stride = 2 }")},
    {"dilation2", 2,
     LAYER("dilation2", "input = { \"N\", 64, 33, 33 },\nconv2d { out_channels = 64, kernel = 3, padding = 2, dilation = 2 }")},
    {"rows_past_opix_instnorm", 3,
     LAYER("rows_past_opix_instnorm", "input = { \"N\", 64, 17, 19 },\nconv2d { out_channels = 64, kernel = 3, padding = 1 },\n"
                                      "instance_norm {},\nrelu {}")},
    {"groups2", 2,
     LAYER("groups2", "input = { \"N\", 128, 20, 20 },\nconv2d { out_channels = 128, kernel = 3, padding = 1, groups = 2 }")},
    {"cp96", 2, LAYER("cp96", "input = { \"N\", 96, 20, 20 },\nconv2d { out_channels = 64, kernel = 3, padding = 1 }")},
    {"conv3d_pad", 2,
     LAYER("conv3d_pad", "input = { \"N\", 32, 6, 10, 12 },\nconv3d { out_channels = 64, kernel = 3, padding = 1 }")},
    {"tf32", 2,
     LAYER("tf32", "input = { \"N\", 64, 30, 30 },\nprecision = \"tf32\",\n"
                   "conv2d { out_channels = 128, kernel = 3, padding = 1 }")},
    {"bf16", 2,
     LAYER("bf16", "input = { \"N\", 128, 20, 20 },\ndtype = \"bf16\",\nconv2d { out_channels = 64, kernel = 3, padding = 1 }")},
    {"bf16_direct", 2,
     LAYER("bf16_direct", "input = { \"N\", 64, 21, 21 },\ndtype = \"bf16\",\nlayout = \"channels_last\",\n"
                          "conv2d { out_channels = 64, kernel = 3, padding = 1 }")},
    {"fp16_prologue_split", 2,
     LAYER("fp16_prologue_split", "input = { \"N\", 128, 16, 16 },\ndtype = \"fp16\",\ngroup_norm { groups = 8 },\n"
                                  "conv2d { out_channels = 64, kernel = 3, padding = 1 }")},
    {"conv1x1_stride2", 2,
     LAYER("conv1x1_stride2", "input = { \"N\", 64, 28, 28 },\nconv2d { out_channels = 128, kernel = 1, stride = 2 }")},
    {"conv1x1_c96_bf16_cl", 2,
     LAYER("conv1x1_c96_bf16_cl", "input = { \"N\", 96, 15, 15 },\ndtype = \"bf16\",\nlayout = \"channels_last\",\n"
                                  "conv2d { out_channels = 160, kernel = 1 },\ngelu {}")},
    {"conv1x1_c48_fp32", 2, LAYER("conv1x1_c48_fp32", "input = { \"N\", 48, 13, 13 },\nconv2d { out_channels = 64, kernel = 1 }")},
    {"conv1x1_c72_fp16_stride2", 3,
     LAYER("conv1x1_c72_fp16_stride2", "input = { \"N\", 72, 17, 17 },\ndtype = \"fp16\",\n"
                                       "conv2d { out_channels = 64, kernel = 1, stride = 2 }")},
    {"split_k", 1, LAYER("split_k", "input = { \"N\", 512, 7, 7 },\nconv2d { out_channels = 128, kernel = 3, padding = 1 }")},
};

static const char *current = "";

static void on_alarm(int sig)
{
    (void)sig;
    char line[256];
    int n = snprintf(line, sizeof line,
                     "FAILED %s: timed out (a hang: a full barrier armed for more bytes than the TMA copies "
                     "delivered?)\n",
                     current);
    if (n > 0)
        (void)!write(1, line, (size_t)n);
    _exit(1);
}

/* Loads, binds (seed), plans with the knob at a_tma and prepares a layer; NULL with why. */
static fg_layer *load(fg_context *ctx, const tma_case *k, int a_tma, int *planned, char *why, size_t cap)
{
    fg_plan_options saved = ctx->plan_options;
    ctx->plan_options.engine = FG_ENGINE_PREFER_WGMMA;
    ctx->plan_options.wgmma_a_tma = a_tma;
    fg_layer *layer = NULL;
    fg_status s = fg_layer_load_string(ctx, k->name, k->source, &layer);
    if (s == FG_OK)
        s = fg_tools_bind_random(layer, 1234);
    if (s == FG_OK)
        s = fg_tools_prepare(layer, k->batch);
    ctx->plan_options = saved;
    if (s != FG_OK) {
        snprintf(why, cap, "knob %d: %s", a_tma, fg_last_error());
        fg_layer_destroy(layer);
        return NULL;
    }
    const fg_plan *plan = fg_tools_layer_plan(layer);
    *planned = plan && plan->wgmma.parts ? plan->wgmma.a_tma : 0;
    return layer;
}

static int run(fg_context *ctx, fg_layer *layer, CUdeviceptr dx, CUdeviceptr dy, int64_t batch, float *out, size_t n,
               int dtype)
{
    if (fg_tools_fill_nan_io(ctx, dy, n, dtype) != FG_OK)
        return -1;
    if (fg_layer_run(layer, (void *)dx, (void *)dy, batch, NULL) != FG_OK || fg_tools_synchronize(ctx) != FG_OK)
        return -1;
    return fg_tools_download_io(ctx, out, dy, n, dtype) == FG_OK ? 0 : -1;
}

/* 0: the same bits; 1: a difference or failure (why); 2: skipped (why) */
static int check(fg_context *ctx, const tma_case *k, char *why, size_t cap)
{
    int rc = 1, off_plan = 0, on_plan = 0;
    fg_layer *off = load(ctx, k, 1, &off_plan, why, cap), *on = NULL;
    float *x = NULL, *ref = NULL, *got = NULL;
    CUdeviceptr dx = 0, dx2 = 0, dy = 0;
    if (!off)
        goto out;
    if (!off_plan) {
        snprintf(why, cap, "not on the wgmma engine on this device");
        rc = 2;
        goto out;
    }
    on = load(ctx, k, 2, &on_plan, why, cap);
    if (!on)
        goto out;
    if (on_plan != 2) {
        snprintf(why, cap, "planned a_tma %d with the knob on (the case is meant to be eligible)", on_plan);
        goto out;
    }
    const fg_layer_ir *ir = fg_tools_layer_ir(off);
    int dtype = (int)ir->dtype;
    size_t elem = (size_t)fg_dtype_size(ir->dtype);
    size_t in1 = (size_t)fg_shape_sample_count(&ir->input), out1 = (size_t)fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out);
    size_t n_in = in1 * (size_t)k->batch, n_out = out1 * (size_t)k->batch;
    x = malloc(n_in * sizeof *x);
    ref = malloc(n_out * sizeof *ref);
    got = malloc(n_out * sizeof *got);
    if (!x || !ref || !got) {
        snprintf(why, cap, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_in; i++)
        x[i] = (float)((i * 2654435761u) % 2000u) / 1000.0f - 1.0f;
    if (fg_tools_alloc(ctx, n_in * elem, &dx) != FG_OK || fg_tools_alloc(ctx, n_in * elem + 256, &dx2) != FG_OK ||
        fg_tools_alloc(ctx, n_out * elem, &dy) != FG_OK || fg_tools_upload_io(ctx, dx, x, n_in, dtype) != FG_OK ||
        fg_tools_upload_io(ctx, dx2 + 256, x, n_in, dtype) != FG_OK) {
        snprintf(why, cap, "device buffers: %s", fg_last_error());
        goto out;
    }
    if (run(ctx, off, dx, dy, k->batch, ref, n_out, dtype) != 0) {
        snprintf(why, cap, "the cp.async run: %s", fg_last_error());
        goto out;
    }
    static const char *const what[] = {"the TMA run", "a graph replay", "a run on the input at another address",
                                       "a run at batch 1"};
    for (int r = 0; r < 4; r++) {
        int64_t b = r == 3 ? 1 : k->batch;
        size_t n = r == 3 ? out1 : n_out;
        if (run(ctx, on, r == 2 ? dx2 + 256 : dx, dy, b, got, n, dtype) != 0) {
            snprintf(why, cap, "%s: %s", what[r], fg_last_error());
            goto out;
        }
        if (memcmp(ref, got, n * sizeof *got) != 0) {
            size_t d = 0;
            while (d < n && memcmp(&ref[d], &got[d], sizeof *got) == 0)
                d++;
            snprintf(why, cap, "%s differs from cp.async's at element %zu of %zu (%.9g, cp.async %.9g)", what[r], d, n,
                     (double)got[d], (double)ref[d]);
            goto out;
        }
    }
    rc = 0;
out:
    fg_tools_free(ctx, dx);
    fg_tools_free(ctx, dx2);
    fg_tools_free(ctx, dy);
    free(x);
    free(ref);
    free(got);
    fg_layer_destroy(off);
    fg_layer_destroy(on);
    return rc;
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const char *t = getenv("FUSEGEN_TEST_TMA_TIMEOUT"); /* seconds a case may take (compiles included) */
    unsigned limit = t && atoi(t) > 0 ? (unsigned)atoi(t) : 240;
    signal(SIGALRM, on_alarm);
    fg_context *ctx = gpu_open("test_gpu_a_tma");
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[512] = "";
        current = cases[i].name;
        alarm(limit);
        int rc = check(ctx, &cases[i], why, sizeof why);
        alarm(0);
        if (rc == 0) {
            printf("ok     %s batch %lld: TMA == cp.async, bit for bit\n", cases[i].name, (long long)cases[i].batch);
            passed++;
        } else if (rc == 2) {
            printf("SKIP   %s: %s\n", cases[i].name, why);
            skipped++;
        } else {
            printf("FAILED %s: %s\n", cases[i].name, why);
            failed++;
        }
        fflush(stdout);
    }
    gpu_close(ctx);
    printf("test_gpu_a_tma: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : passed ? 0 : 77;
}
