/* SPDX-License-Identifier: Apache-2.0 */
/* Blocks on the GPU (docs/spec.md, "Blocks"): a ResNet bottleneck (eval BatchNorm, folded),
 * an SD ResnetBlock2D at small channels (GroupNorm -> SiLU -> conv prologues, the time
 * embedding [N, C], the residual) and an nnU-Net stage, each run with fg_block_run and with
 * fg_block_run_workspace at batches 1 and 3, against the block's CPU reference (float64 per
 * layer) within 1e-4 (allclose atol = rtol = 1e-4, and relative L2). Batch 3 catches a tensor
 * read at the wrong sample (every sample but the first would be off). Exits 77 without a
 * GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/random_init.h"
#include "gpu_harness.h"

typedef struct block_case {
    const char *name;
    const char *source;
} block_case;

static const block_case cases[] = {
    {"resnet_bottleneck",
     "return block \"bottleneck\" {\n"
     "  input = { \"N\", 64, 14, 14 },\n"
     "  layer \"a\" { conv2d { name = \"conv1\", out_channels = 16, kernel = 1, bias = false },\n"
     "    batch_norm { name = \"bn1\", stats = \"running\" }, relu {} },\n"
     "  layer \"b\" { conv2d { name = \"conv2\", out_channels = 16, kernel = 3, padding = 1, bias = false },\n"
     "    batch_norm { name = \"bn2\", stats = \"running\" }, relu {} },\n"
     "  layer \"c\" { conv2d { name = \"conv3\", out_channels = 64, kernel = 1, bias = false },\n"
     "    batch_norm { name = \"bn3\", stats = \"running\" }, add { tensor = \"input\" }, relu {} },\n"
     "}\n"},
    {"sd_resnet_block",
     "return block \"sd\" {\n"
     "  input = { \"N\", 64, 16, 16 },\n"
     "  inputs = { temb = { \"N\", 64 } },\n"
     "  layer \"h\" { group_norm { name = \"norm1\", groups = 32 }, silu {},\n"
     "    conv2d { name = \"conv1\", out_channels = 64, kernel = 3, padding = 1 }, add { tensor = \"temb\" } },\n"
     "  layer \"out\" { group_norm { name = \"norm2\", groups = 32 }, silu {},\n"
     "    conv2d { name = \"conv2\", out_channels = 64, kernel = 3, padding = 1 }, add { tensor = \"input\" } },\n"
     "}\n"},
    {"nnunet_stage",
     "return block \"stage\" {\n"
     "  input = { \"N\", 8, 12, 12, 12 },\n"
     "  layer \"a\" { conv3d { name = \"conv1\", out_channels = 16, kernel = 3, padding = 1 },\n"
     "    instance_norm { name = \"norm1\", affine = true }, leaky_relu { negative_slope = 0.01 } },\n"
     "  layer \"b\" { conv3d { name = \"conv2\", out_channels = 16, kernel = 3, padding = 1 },\n"
     "    instance_norm { name = \"norm2\", affine = true }, leaky_relu { negative_slope = 0.01 } },\n"
     "}\n"},
};

static int64_t count_of(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

/* Runs one case at `batch`; returns true when both runs match the reference. */
static bool run_case(fg_context *ctx, const block_case *c, int64_t batch)
{
    fg_block *b = NULL;
    float *x[4] = {0}, *y = NULL, *y2 = NULL, *ref = NULL;
    CUdeviceptr dx[4] = {0}, dy = 0, dws = 0;
    bool ok = false;
    int n_inputs = 0, rank;
    int64_t dims[FG_MAX_DIMS], counts[4];
    const void *inputs[4];
    if (fg_block_load_string(ctx, c->name, c->source, &b) != FG_OK) {
        fprintf(stderr, "%s: load: %s\n", c->name, fg_last_error());
        return false;
    }
    if (fg_tools_block_bind_random(b, 7) != FG_OK) {
        fprintf(stderr, "%s: bind: %s\n", c->name, fg_last_error());
        goto out;
    }
    fg_block_input_count(b, &n_inputs);
    for (int t = 0; t < n_inputs; t++) {
        fg_block_input_info(b, t, batch, NULL, &rank, dims);
        counts[t] = count_of(rank, dims);
        x[t] = malloc(sizeof(float) * (size_t)counts[t]);
        fg_random_uniform(x[t], (size_t)counts[t], 11, 1 + (uint64_t)t, -1.0f, 1.0f);
        if (fg_tools_alloc(ctx, sizeof(float) * (size_t)counts[t], &dx[t]) != FG_OK ||
            fg_tools_upload(ctx, dx[t], x[t], sizeof(float) * (size_t)counts[t]) != FG_OK)
            goto out;
        inputs[t] = (const void *)dx[t];
    }
    fg_block_output_shape(b, batch, &rank, dims);
    int64_t n_out = count_of(rank, dims);
    y = malloc(sizeof(float) * (size_t)n_out);
    y2 = malloc(sizeof(float) * (size_t)n_out);
    ref = malloc(sizeof(float) * (size_t)n_out);
    if (fg_tools_alloc(ctx, sizeof(float) * (size_t)n_out, &dy) != FG_OK || fg_tools_fill_nan(ctx, dy, (size_t)n_out) != FG_OK)
        goto out;
    if (fg_block_run(b, inputs, (void *)dy, batch, NULL) != FG_OK || fg_tools_synchronize(ctx) != FG_OK ||
        fg_tools_download(ctx, y, dy, sizeof(float) * (size_t)n_out) != FG_OK) {
        fprintf(stderr, "%s: run: %s\n", c->name, fg_last_error());
        goto out;
    }
    /* the same on caller-owned workspace */
    size_t ws = 0;
    if (fg_block_workspace_size(b, batch, &ws) != FG_OK || (ws && fg_tools_alloc(ctx, ws, &dws) != FG_OK) ||
        fg_tools_fill_nan(ctx, dy, (size_t)n_out) != FG_OK ||
        fg_block_run_workspace(b, inputs, (void *)dy, batch, (void *)dws, ws, NULL) != FG_OK ||
        fg_tools_synchronize(ctx) != FG_OK || fg_tools_download(ctx, y2, dy, sizeof(float) * (size_t)n_out) != FG_OK) {
        fprintf(stderr, "%s: run_workspace: %s\n", c->name, fg_last_error());
        goto out;
    }
    if (fg_block_run_cpu(b, (const float *const *)x, ref, batch) != FG_OK) {
        fprintf(stderr, "%s: reference: %s\n", c->name, fg_last_error());
        goto out;
    }
    ok = true;
    for (int pass = 0; pass < 2; pass++) {
        const float *out = pass ? y2 : y;
        double max_abs = 0, err2 = 0, ref2 = 0;
        long long bad = 0;
        for (int64_t i = 0; i < n_out; i++) {
            double d = fabs((double)out[i] - (double)ref[i]);
            if (!(d <= 1e-4 + 1e-4 * fabs((double)ref[i])))
                bad++;
            if (d > max_abs || isnan(d))
                max_abs = isnan(d) ? INFINITY : d;
            err2 += d * d;
            ref2 += (double)ref[i] * ref[i];
        }
        double rel = sqrt(err2 / (ref2 > 0 ? ref2 : 1));
        bool pass_ok = bad == 0 && rel <= 1e-4;
        printf("%-20s batch %lld %-14s max abs %.3g rel L2 %.3g, %lld of %lld outside 1e-4: %s\n", c->name,
               (long long)batch, pass ? "run_workspace" : "run", max_abs, rel, bad, (long long)n_out,
               pass_ok ? "PASS" : "FAIL");
        ok = ok && pass_ok;
    }
out:
    for (int t = 0; t < 4; t++) {
        free(x[t]);
        if (dx[t])
            fg_tools_free(ctx, dx[t]);
    }
    if (dy)
        fg_tools_free(ctx, dy);
    if (dws)
        fg_tools_free(ctx, dws);
    free(y), free(y2), free(ref);
    fg_block_destroy(b);
    return ok;
}

int main(void)
{
    fg_context *ctx = gpu_open("test_gpu_blocks");
    if (!ctx)
        return GPU_SKIP;
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int64_t batch = 1; batch <= 3; batch += 2)
            failed += !run_case(ctx, &cases[i], batch);
    gpu_close(ctx);
    printf("%d failed\n", failed);
    return failed ? 1 : 0;
}
