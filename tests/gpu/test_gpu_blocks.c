/* SPDX-License-Identifier: Apache-2.0 */
/* Blocks on the GPU (docs/spec.md, "Blocks"): a ResNet bottleneck (eval BatchNorm, folded),
 * an SD ResnetBlock2D at small channels (GroupNorm -> SiLU -> conv prologues, the time
 * embedding [N, C], the residual), an nnU-Net stage (3D) and a ConvNeXt block (depthwise 7x7,
 * layer_norm over the channels, the layer scale, the residual), each in fp32 NCHW, bf16 NCHW,
 * bf16 channels last, fp16 NCHW and fp32 channels last (the block fields dtype and layout:
 * every tensor of the block, the tensor operands included, in them), run with fg_block_run
 * and with fg_block_run_workspace at batches 1 and 3 on random inputs (a half block a third
 * time with its inputs 2 bytes past a 16-byte boundary: the unaligned paths), outputs poisoned
 * with NaNs first, against the block's CPU reference (float64 per layer; for a half block the
 * inputs and each layer's output rounded to the dtype) with the layer harness's bar
 * (gpu_compare_chain: atol = rtol = 1e-4, for bf16/fp16 plus an ulp and each earlier layer's
 * ulp at the output's scale, and rel L2 <= 1e-3; a case at precision tf32, its bar). Batch 3
 * catches a tensor read at the wrong sample (every sample but the first would be off).
 * A fifth block, in bf16 only, checks that the statistics a writer gathers for its reader's
 * norm are those of its output as stored (rounded to the dtype).
 *
 * Then the block's CUDA graph (runtime/api_block.c), on the fp32 bottleneck (a folded batch
 * norm) and SD block (statistics cleared by memsets, an extra input): a sequence of runs that
 * each must replay the graph, capture it again or launch each pass, as the counts of
 * fg_tools_block_graph_counts say, and each must match the reference (output poisoned
 * first): the first run (it prepares the layers: launched pass by pass), the same pointers
 * twice, another output and back (the block keeps two graphs), a parameter bound again to
 * other values (the reference changes), another batch, caller-owned workspace, caller-owned
 * workspace with three outputs in turn (two graphs cannot hold them: graphs stop there after 3
 * captures in a row, not for the block's own runs), and a context
 * created with FUSEGEN_NO_GRAPHS=1 (every run pass by pass).
 *
 * test_gpu_blocks [FILTER]: only the cases whose name ("sd_resnet_block/bf16_cl") contains
 * FILTER (or $FUSEGEN_TEST_FILTER). Ends with "N cases, M failed"; exits 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/accuracy.h"
#include "../../runtime/random_init.h"
#include "gpu_harness.h"

/* A block family: its spec with "%s" where the block fields dtype and layout go; half_only:
 * run in the bf16 and fp16 variants only; tf32: its layers are at precision "tf32", held to
 * that bar (common/accuracy.h) instead of 1e-4. */
typedef struct block_case {
    const char *name;
    const char *source;
    bool half_only;
    bool tf32;
} block_case;

static const block_case cases[] = {
    {"resnet_bottleneck", GPU_BOTTLENECK_SPEC, false, false},
    {"sd_resnet_block",
     "return block \"sd\" {\n"
     "  input = { \"N\", 64, 16, 16 },%s\n"
     "  inputs = { temb = { \"N\", 64 } },\n"
     "  layer \"h\" { group_norm { name = \"norm1\", groups = 32 }, silu {},\n"
     "    conv2d { name = \"conv1\", out_channels = 64, kernel = 3, padding = 1 }, add { tensor = \"temb\" } },\n"
     "  layer \"out\" { group_norm { name = \"norm2\", groups = 32 }, silu {},\n"
     "    conv2d { name = \"conv2\", out_channels = 64, kernel = 3, padding = 1 }, add { tensor = \"input\" } },\n"
     "}\n",
     false, false},
    {"nnunet_stage",
     "return block \"stage\" {\n"
     "  input = { \"N\", 8, 12, 12, 12 },%s\n"
     "  layer \"a\" { conv3d { name = \"conv1\", out_channels = 16, kernel = 3, padding = 1 },\n"
     "    instance_norm { name = \"norm1\", affine = true }, leaky_relu { negative_slope = 0.01 } },\n"
     "  layer \"b\" { conv3d { name = \"conv2\", out_channels = 16, kernel = 3, padding = 1 },\n"
     "    instance_norm { name = \"norm2\", affine = true }, leaky_relu { negative_slope = 0.01 } },\n"
     "}\n",
     false, false},
    {"convnext",
     "return block \"convnext\" {\n"
     "  input = { \"N\", 32, 14, 14 },%s\n"
     "  layer \"a\" { conv2d { name = \"dwconv\", out_channels = 32, kernel = 7, padding = 3, groups = 32 },\n"
     "    layer_norm { name = \"norm\", dim = 1, eps = 1e-6 } },\n"
     "  layer \"b\" { conv2d { name = \"pwconv1\", out_channels = 128, kernel = 1 }, gelu {} },\n"
     "  layer \"c\" { conv2d { name = \"pwconv2\", out_channels = 32, kernel = 1 },\n"
     "    mul { param = \"gamma\", shape = { 32, 1, 1 } }, add { tensor = \"input\" } },\n"
     "}\n",
     false, false},
    /* ConvNeXt at 768 channels: channels last, layer b's input pack holds every channel of its
     * pixels (96 threads of 8 bf16 channels, 192 of 4 fp32 ones: planner.c) and computes the
     * LayerNorm's statistics itself, no statistics pass (bench/NOTES.md v44); its 1x1 conv +
     * GELU on 14x14 images (two tiles a sample, the second 68 of 128 rows: the checked copy)
     * runs its staged epilogue's rows 8 at a time */
    {"convnext_wide",
     "return block \"convnext_wide\" {\n"
     "  input = { \"N\", 768, 14, 14 },%s\n"
     "  layer \"a\" { conv2d { name = \"dwconv\", out_channels = 768, kernel = 7, padding = 3, groups = 768 },\n"
     "    layer_norm { name = \"norm\", dim = 1, eps = 1e-6 } },\n"
     "  layer \"b\" { conv2d { name = \"pwconv1\", out_channels = 256, kernel = 1 }, gelu {} },\n"
     "  layer \"c\" { conv2d { name = \"pwconv2\", out_channels = 768, kernel = 1 },\n"
     "    mul { param = \"gamma\", shape = { 768, 1, 1 } }, add { tensor = \"input\" } },\n"
     "}\n",
     false, false},
    /* ConvNeXt's 7x7 stage at 128 channels: its 1x1 convs run in flat tiles (49 pixels a
     * sample, a tile's 128 rows over the next samples': at batch 1, 79 rows past the batch; at
     * 3, the second tile's last 109), whose channel blocks are whole (256 and 128 channels):
     * with FUSEGEN_WGMMA_FLAT_PREDICATED=2 (bench/gpu-check runs it so) the rows past the batch
     * compute on the first sample and only their stores are predicated, layer b's GELU 8 rows
     * at a time, layer c's residual read at the clamped sample. Precision tf32: one product,
     * the predicated stores' condition in the half channels-last variants (planner.h) */
    {"convnext_7x7",
     "return block \"convnext_7x7\" {\n"
     "  input = { \"N\", 128, 7, 7 },%s\n"
     "  layer \"a\" { conv2d { name = \"dwconv\", out_channels = 128, kernel = 7, padding = 3, groups = 128 },\n"
     "    layer_norm { name = \"norm\", dim = 1, eps = 1e-6 } },\n"
     "  layer \"b\" { precision = \"tf32\", conv2d { name = \"pwconv1\", out_channels = 256, kernel = 1 }, gelu {} },\n"
     "  layer \"c\" { precision = \"tf32\", conv2d { name = \"pwconv2\", out_channels = 128, kernel = 1 },\n"
     "    mul { param = \"gamma\", shape = { 128, 1, 1 } }, add { tensor = \"input\" } },\n"
     "}\n",
     false, true},
    /* the statistics a writer gathers for its reader's group norm (fg_block_link_statistics)
     * are those of the output as stored: here 4 +- ~0.003, far below bf16's step there (1/32),
     * so the rounded values' spread is not the fp32 values' (the values before the rounding
     * normalized every group by an O(1) wrong amount). Half only: in fp32 the stored values'
     * own rounding is ~1e-4 of that spread, beyond the bar. At this mean/spread (~1300) float
     * sums of x and x^2 lost the fp16 case's variance (max abs 2e-3) until the partials were
     * shifted (bench/NOTES.md v38). */
    {"stored_stats",
     "return block \"stored_stats\" {\n"
     "  input = { \"N\", 32, 8, 8 },%s\n"
     "  layer \"h\" { conv2d { name = \"conv1\", out_channels = 32, kernel = 3, padding = 1 },\n"
     "    mul { scalar = 0.002 }, add { scalar = 4 } },\n"
     "  layer \"out\" { group_norm { name = \"norm\", groups = 8 }, silu {},\n"
     "    conv2d { name = \"conv2\", out_channels = 32, kernel = 3, padding = 1 } },\n"
     "}\n",
     true, false},
    /* 640 channels: channels last, layer h (both parts of its operands and the exported
     * statistics' partials) finds no 128-channel wgmma tile and takes 6 of 112 (planner.c
     * wgmma_tiling, `narrower`); before, it ran on mma.sync */
    {"sd_wide",
     "return block \"sd_wide\" {\n"
     "  input = { \"N\", 640, 6, 6 },%s\n"
     "  inputs = { temb = { \"N\", 640 } },\n"
     "  layer \"h\" { group_norm { name = \"norm1\", groups = 32 }, silu {},\n"
     "    conv2d { name = \"conv1\", out_channels = 640, kernel = 3, padding = 1 }, add { tensor = \"temb\" } },\n"
     "  layer \"out\" { group_norm { name = \"norm2\", groups = 32 }, silu {},\n"
     "    conv2d { name = \"conv2\", out_channels = 640, kernel = 3, padding = 1 }, add { tensor = \"input\" } },\n"
     "}\n",
     false, false},
    /* the same hand-off far from zero in every dtype (mean/spread ~200, the writer's epilogue
     * partials shifted: bench/NOTES.md v38) */
    {"far_stats",
     "return block \"far_stats\" {\n"
     "  input = { \"N\", 32, 8, 8 },%s\n"
     "  layer \"h\" { conv2d { name = \"conv1\", out_channels = 32, kernel = 3, padding = 1 },\n"
     "    add { scalar = 100 } },\n"
     "  layer \"out\" { group_norm { name = \"norm\", groups = 8 }, silu {},\n"
     "    conv2d { name = \"conv2\", out_channels = 32, kernel = 3, padding = 1 } },\n"
     "}\n",
     false, false},
    /* the residual's tile in shared memory (bench/NOTES.md v42: bf16_cl; the NCHW variants read
     * it as ever): layer wide in 128-channel tiles (v43: 8 tiles a sample are too few to widen),
     * or with FUSEGEN_WGMMA_BN=256 (bench/gpu-check runs it so) in 256-channel tiles (3 stages
     * beside the 64 KB tile, the slabs swizzled), whose last of a sample's 4 tiles holds 16 of
     * its 128 rows (the rest zeros), its 36 K chunks split over several CTAs, each of which
     * copies the tile (the last to arrive runs the epilogue); layer flat in flat tiles of 88 channels (the last 32-channel chunk 24
     * lanes wide; rows 176 bytes, 11 pieces) over 7x7 samples of an extra input, its rows past
     * the batch zeros (batch 1: 79 of 128; batch 3: 109 of the second tile's), its K split too.
     * Precision tf32: no 256-channel tile fits fp32 precision's two parts of the weights. */
    {"res_staged",
     "return block \"res_staged\" {\n"
     "  input = { \"N\", 256, 20, 20 },%s\n"
     "  inputs = { skip = { \"N\", 88, 7, 7 } },\n"
     "  layer \"wide\" { precision = \"tf32\",\n"
     "    conv2d { name = \"conv1\", out_channels = 256, kernel = 3, padding = 1 }, add { tensor = \"input\" }, relu {} },\n"
     "  layer \"flat\" { precision = \"tf32\",\n"
     "    conv2d { name = \"conv2\", out_channels = 88, kernel = 3, stride = 3, padding = 1 }, add { tensor = \"skip\" } },\n"
     "}\n",
     true, true},
};

/* The block fields of each variant (inserted after `input`). */
static const struct {
    const char *name, *fields;
} variants[] = {
    {"fp32", ""},
    {"bf16", " dtype = \"bf16\","},
    {"bf16_cl", " dtype = \"bf16\", layout = \"channels_last\","},
    {"fp16", " dtype = \"fp16\","},
    {"fp32_cl", " layout = \"channels_last\","},
};

static int64_t count_of(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

/* The inputs of a half block's third run: 2 bytes (one element) past a 16-byte boundary, as a
 * view of a tensor may start. */
enum { UNALIGNED_BYTES = 2 };

/* Runs one case at `batch`; returns the number of failed checks (run, run_workspace, and with
 * `unaligned` a run on inputs UNALIGNED_BYTES past a 16-byte boundary: 0 to 2 or 3). tf32:
 * the block's layers are at precision "tf32" (block_case). */
static int run_case(fg_context *ctx, const char *name, const char *source, bool tf32, bool unaligned, int64_t batch)
{
    fg_block *b = NULL;
    float *x[4] = {0}, *y = NULL, *y2 = NULL, *ref = NULL;
    CUdeviceptr dx[4] = {0}, du[4] = {0}, dy = 0, dws = 0;
    int failed = unaligned ? 3 : 2, n_inputs = 0, rank, dtype = 0, elem = 4;
    int64_t dims[FG_MAX_DIMS], counts[4];
    const void *inputs[4];
    const char *dname = "fp32";
    gpu_result r[2];
    memset(r, 0, sizeof r);
    if (fg_block_load_string(ctx, name, source, &b) != FG_OK) {
        printf("FAILED %-32s: load: %s\n", name, fg_last_error());
        return 2;
    }
    fg_block_dtype(b, &dname, &elem);
    dtype = strcmp(dname, "bf16") == 0 ? 1 : strcmp(dname, "fp16") == 0 ? 2 : 0;
    /* A half block's layers each round their output to the dtype, as the reference's do, and a
     * later layer reads their differences (gpu_compare_chain; measured on the H200 against the
     * one-layer bar: SD's block in bf16 0.07 % of outputs outside, up to 0.0156, the nnU-Net
     * stage in fp16 up to 0.002 at outputs below 1, rel L2 <= 3.6e-4). The rel L2 bound
     * (1e-3) still holds the whole block to the accuracy of fp32 precision. */
    int n_layers = 1;
    fg_block_layer_count(b, &n_layers);
    if (fg_tools_block_bind_random(b, 7) != FG_OK) {
        printf("FAILED %-32s: bind: %s\n", name, fg_last_error());
        goto out;
    }
    /* the inputs in the block's dtype (rounded on upload, as the reference rounds them) and
     * layout (random data: the same numbers serve as NC(D)HW or N(D)HWC memory) */
    fg_block_input_count(b, &n_inputs);
    for (int t = 0; t < n_inputs; t++) {
        fg_block_input_info(b, t, batch, NULL, &rank, dims);
        counts[t] = count_of(rank, dims);
        x[t] = malloc(sizeof(float) * (size_t)counts[t]);
        fg_random_uniform(x[t], (size_t)counts[t], 11, 1 + (uint64_t)t, -1.0f, 1.0f);
        if (fg_tools_alloc(ctx, (size_t)elem * (size_t)counts[t], &dx[t]) != FG_OK ||
            fg_tools_upload_io(ctx, dx[t], x[t], (size_t)counts[t], dtype) != FG_OK)
            goto out;
        inputs[t] = (const void *)dx[t];
    }
    fg_block_output_shape(b, batch, &rank, dims);
    int64_t n_out = count_of(rank, dims);
    y = malloc(sizeof(float) * (size_t)n_out);
    y2 = malloc(sizeof(float) * (size_t)n_out);
    ref = malloc(sizeof(float) * (size_t)n_out);
    if (fg_tools_alloc(ctx, (size_t)elem * (size_t)n_out, &dy) != FG_OK ||
        fg_tools_fill_nan_io(ctx, dy, (size_t)n_out, dtype) != FG_OK)
        goto out;
    if (fg_block_run(b, inputs, (void *)dy, batch, NULL) != FG_OK || fg_tools_synchronize(ctx) != FG_OK ||
        fg_tools_download_io(ctx, y, dy, (size_t)n_out, dtype) != FG_OK) {
        printf("FAILED %-32s: run: %s\n", name, fg_last_error());
        goto out;
    }
    /* the same on caller-owned workspace, the output poisoned again */
    size_t ws = 0;
    if (fg_block_workspace_size(b, batch, &ws) != FG_OK || (ws && fg_tools_alloc(ctx, ws, &dws) != FG_OK) ||
        fg_tools_fill_nan_io(ctx, dy, (size_t)n_out, dtype) != FG_OK ||
        fg_block_run_workspace(b, inputs, (void *)dy, batch, (void *)dws, ws, NULL) != FG_OK ||
        fg_tools_synchronize(ctx) != FG_OK || fg_tools_download_io(ctx, y2, dy, (size_t)n_out, dtype) != FG_OK) {
        printf("FAILED %-32s: run_workspace: %s\n", name, fg_last_error());
        goto out;
    }
    if (fg_block_run_cpu(b, (const float *const *)x, ref, batch) != FG_OK) {
        printf("FAILED %-32s: reference: %s\n", name, fg_last_error());
        goto out;
    }
    failed = 0;
    const double tol = fg_accuracy_bar(tf32, dtype);
    for (int pass = 0; pass < 2; pass++) {
        char what[128];
        snprintf(what, sizeof what, "%s %s", name, pass ? "run_workspace" : "run");
        r[pass].ok = true;
        gpu_compare_chain(pass ? y2 : y, ref, (size_t)n_out, tol, dtype, n_layers, &r[pass]);
        failed += gpu_report(what, batch, tol, &r[pass]);
    }
    /* A third run on the same values with each input UNALIGNED_BYTES past a 16-byte boundary
     * (the allocations are 256-byte aligned): whatever reads an input in 16-byte pieces where
     * it is aligned must take its element-by-element path (the input packed instead of read
     * as the conv's operand, the residual's tile copied into shared memory element by
     * element: bench/NOTES.md v42), the output poisoned again. */
    if (unaligned) {
        char what[128];
        snprintf(what, sizeof what, "%s unaligned inputs", name);
        const void *shifted[4];
        bool ran = true;
        for (int t = 0; t < n_inputs && ran; t++) {
            ran = fg_tools_alloc(ctx, (size_t)elem * (size_t)counts[t] + 16, &du[t]) == FG_OK &&
                  fg_tools_upload_io(ctx, du[t] + UNALIGNED_BYTES, x[t], (size_t)counts[t], dtype) == FG_OK;
            shifted[t] = (const void *)(du[t] + UNALIGNED_BYTES);
        }
        if (!ran || fg_tools_fill_nan_io(ctx, dy, (size_t)n_out, dtype) != FG_OK ||
            fg_block_run(b, shifted, (void *)dy, batch, NULL) != FG_OK || fg_tools_synchronize(ctx) != FG_OK ||
            fg_tools_download_io(ctx, y, dy, (size_t)n_out, dtype) != FG_OK) {
            printf("FAILED %-32s: run: %s\n", what, fg_last_error());
            failed++;
        } else {
            gpu_result ru;
            memset(&ru, 0, sizeof ru);
            ru.ok = true;
            gpu_compare_chain(y, ref, (size_t)n_out, tol, dtype, n_layers, &ru);
            failed += gpu_report(what, batch, tol, &ru);
        }
    }
out:
    for (int t = 0; t < 4; t++) {
        free(x[t]);
        if (dx[t])
            fg_tools_free(ctx, dx[t]);
        if (du[t])
            fg_tools_free(ctx, du[t]);
    }
    if (dy)
        fg_tools_free(ctx, dy);
    if (dws)
        fg_tools_free(ctx, dws);
    free(y), free(y2), free(ref);
    fg_block_destroy(b);
    return failed;
}

/* ---- the block's CUDA graph ------------------------------------------------------------ */

/* A block, its inputs at one batch, two outputs, caller-owned workspace, and the reference
 * of its bindings now. */
typedef struct graph_fixture {
    fg_context *ctx;
    const char *name;
    fg_block *b;
    int n_inputs, n_layers;
    int64_t batch, n_out;
    float *x[4], *y, *ref;
    CUdeviceptr dx[4], dy[3], dws; /* three outputs: the block keeps two graphs */
    size_t ws_bytes;
    fg_tools_block_graphs seen; /* the counts after the last checked run */
} graph_fixture;

static void fixture_free_buffers(graph_fixture *f)
{
    for (int t = 0; t < 4; t++) {
        free(f->x[t]);
        f->x[t] = NULL;
        if (f->dx[t])
            fg_tools_free(f->ctx, f->dx[t]);
        f->dx[t] = 0;
    }
    for (int k = 0; k < 3; k++) {
        if (f->dy[k])
            fg_tools_free(f->ctx, f->dy[k]);
        f->dy[k] = 0;
    }
    if (f->dws)
        fg_tools_free(f->ctx, f->dws);
    f->dws = 0;
    free(f->y), free(f->ref);
    f->y = f->ref = NULL;
}

static bool fixture_reference(graph_fixture *f)
{
    if (fg_block_run_cpu(f->b, (const float *const *)f->x, f->ref, f->batch) == FG_OK)
        return true;
    printf("FAILED %-32s: reference: %s\n", f->name, fg_last_error());
    return false;
}

/* New random inputs, outputs and workspace for `batch`, and their reference. The old buffers
 * are freed first, so the new ones may lie at the same addresses: a graph's key tells them
 * apart by the batch. */
static bool fixture_batch(graph_fixture *f, int64_t batch)
{
    int rank;
    int64_t dims[FG_MAX_DIMS];
    fixture_free_buffers(f);
    f->batch = batch;
    for (int t = 0; t < f->n_inputs; t++) {
        fg_block_input_info(f->b, t, batch, NULL, &rank, dims);
        int64_t n = count_of(rank, dims);
        f->x[t] = malloc(sizeof(float) * (size_t)n);
        fg_random_uniform(f->x[t], (size_t)n, 13 + (uint64_t)batch, 1 + (uint64_t)t, -1.0f, 1.0f);
        if (fg_tools_alloc(f->ctx, sizeof(float) * (size_t)n, &f->dx[t]) != FG_OK ||
            fg_tools_upload(f->ctx, f->dx[t], f->x[t], sizeof(float) * (size_t)n) != FG_OK)
            goto fail;
    }
    fg_block_output_shape(f->b, batch, &rank, dims);
    f->n_out = count_of(rank, dims);
    f->y = malloc(sizeof(float) * (size_t)f->n_out);
    f->ref = malloc(sizeof(float) * (size_t)f->n_out);
    for (int k = 0; k < 3; k++)
        if (fg_tools_alloc(f->ctx, sizeof(float) * (size_t)f->n_out, &f->dy[k]) != FG_OK)
            goto fail;
    if (fg_block_workspace_size(f->b, batch, &f->ws_bytes) != FG_OK ||
        (f->ws_bytes && fg_tools_alloc(f->ctx, f->ws_bytes, &f->dws) != FG_OK))
        goto fail;
    return fixture_reference(f);
fail:
    printf("FAILED %-32s: device buffers: %s\n", f->name, fg_last_error());
    return false;
}

/* Loads the block, binds random parameters (seed 7, as run_case) and sets up batch 1; false,
 * said, on failure. */
static bool fixture_open(graph_fixture *f, fg_context *ctx, const char *name, const char *source)
{
    *f = (graph_fixture){.ctx = ctx, .name = name};
    if (fg_block_load_string(ctx, name, source, &f->b) != FG_OK || fg_tools_block_bind_random(f->b, 7) != FG_OK) {
        printf("FAILED %-32s graph: load: %s\n", name, fg_last_error());
        return false;
    }
    fg_block_input_count(f->b, &f->n_inputs);
    fg_block_layer_count(f->b, &f->n_layers);
    return fixture_batch(f, 1);
}

/* What a run must have done: +1 to one of the counts (a capture adds a graph run too). */
typedef enum { REPLAY, CAPTURE, PLAIN } graph_step;

/* A run of the sequence: into output `out`, on the block's workspace (own) or the fixture's,
 * doing `step`, after which graphs are off for caller-owned workspace or not. */
typedef struct graph_run {
    const char *what;
    int out;
    bool own;
    graph_step step;
    bool caller_off;
} graph_run;

/* Poisons the output, runs, compares with the reference and checks the counts against the
 * step and `off` (graphs off for the block); returns the number of failures (0, 1). */
static int check_graph_run(graph_fixture *f, const graph_run *run, bool off)
{
    char name[160];
    snprintf(name, sizeof name, "%s graph: %s", f->name, run->what);
    int out = run->out;
    bool own = run->own;
    graph_step step = run->step;
    const void *inputs[4] = {(const void *)f->dx[0], (const void *)f->dx[1], (const void *)f->dx[2],
                             (const void *)f->dx[3]};
    void *y = (void *)f->dy[out];
    if (fg_tools_fill_nan(f->ctx, f->dy[out], (size_t)f->n_out) != FG_OK ||
        (own ? fg_block_run(f->b, inputs, y, f->batch, NULL)
             : fg_block_run_workspace(f->b, inputs, y, f->batch, (void *)f->dws, f->ws_bytes, NULL)) != FG_OK ||
        fg_tools_synchronize(f->ctx) != FG_OK ||
        fg_tools_download(f->ctx, f->y, f->dy[out], sizeof(float) * (size_t)f->n_out) != FG_OK) {
        printf("FAILED %-32s: %s\n", name, fg_last_error());
        return 1;
    }
    gpu_result r;
    memset(&r, 0, sizeof r);
    r.ok = true;
    gpu_compare_chain(f->y, f->ref, (size_t)f->n_out, 1e-4, 0, f->n_layers, &r);
    int failed = gpu_report(name, f->batch, 1e-4, &r);
    fg_tools_block_graphs now, want = f->seen;
    if (fg_tools_block_graph_counts(f->b, &now) != FG_OK) {
        printf("FAILED %-32s: %s\n", name, fg_last_error());
        return 1;
    }
    want.captures += step == CAPTURE;
    want.graph_runs += step != PLAIN;
    want.plain_runs += step == PLAIN;
    want.off = off;
    want.caller_off = run->caller_off;
    if (now.captures != want.captures || now.graph_runs != want.graph_runs || now.plain_runs != want.plain_runs ||
        now.off != want.off || now.caller_off != want.caller_off) {
        printf("FAILED %-32s: %ld captures, %ld graph runs, %ld plain runs, graphs %s, on caller workspace %s; "
               "expected %ld, %ld, %ld, %s, %s\n",
               name, now.captures, now.graph_runs, now.plain_runs, now.off ? "off" : "on",
               now.caller_off ? "off" : "on", want.captures, want.graph_runs, want.plain_runs, want.off ? "off" : "on",
               want.caller_off ? "off" : "on");
        failed = 1;
    }
    f->seen = now;
    return failed;
}

/* check_graph_run for each of n runs, counting them as cases. */
static int check_graph_runs(graph_fixture *f, const graph_run *runs, size_t n, bool off, int *n_cases)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++, (*n_cases)++)
        failed += check_graph_run(f, &runs[i], off);
    return failed;
}

/* Binds the last layer's first parameter (a conv weight or a norm's scale) to other random
 * values in every layer that reads it, and takes the new reference: it must differ from the
 * old one, or a replay of a stale graph could pass. */
static int rebind_a_parameter(graph_fixture *f)
{
    fg_layer *last = fg_tools_block_layer(f->b, f->n_layers - 1);
    const char *pname = NULL;
    int rank = 0;
    int64_t dims[FG_MAX_DIMS];
    if (!last || fg_layer_param_info(last, 0, &pname, &rank, dims) != FG_OK) {
        printf("FAILED %-32s graph: rebind: %s\n", f->name, fg_last_error());
        return 1;
    }
    size_t n = (size_t)count_of(rank, dims);
    float *values = malloc(sizeof(float) * n), *old_ref = malloc(sizeof(float) * (size_t)f->n_out);
    fg_random_uniform(values, n, 99, 1, -0.25f, 0.25f);
    memcpy(old_ref, f->ref, sizeof(float) * (size_t)f->n_out);
    int failed = 0;
    if (fg_block_bind_host(f->b, pname, values, sizeof(float) * n) != FG_OK) {
        printf("FAILED %-32s graph: rebind '%s': %s\n", f->name, pname, fg_last_error());
        failed = 1;
    } else if (!fixture_reference(f)) {
        failed = 1;
    } else {
        double most = 0;
        for (int64_t i = 0; i < f->n_out; i++)
            most = fmax(most, fabs((double)f->ref[i] - (double)old_ref[i]));
        printf("%s %-32s graph: '%s' bound again: the reference moves by up to %.3g\n", most > 1e-2 ? "ok    " : "FAILED",
               f->name, pname, most);
        failed = most <= 1e-2;
    }
    free(values), free(old_ref);
    return failed;
}

/* The sequence of runs of the file's comment on one block; returns the number of failures. */
static int graph_case(fg_context *ctx, const char *name, const char *source, int *n_cases)
{
    graph_fixture f;
    int failed = 0;
    if (!fixture_open(&f, ctx, name, source)) {
        (*n_cases)++;
        failed = 1;
        goto out;
    }
    static const graph_run first[] = {
        {"first run (prepares)", 0, true, PLAIN, false},
        {"second run (captures)", 0, true, CAPTURE, false},
        {"same pointers (replays)", 0, true, REPLAY, false},
        {"another output", 1, true, CAPTURE, false},
        {"another output again", 1, true, REPLAY, false},
        {"the first output again (its graph kept)", 0, true, REPLAY, false},
    };
    static const graph_run after_bind[] = {
        {"after the bind", 1, true, CAPTURE, false},
        {"after the bind again", 1, true, REPLAY, false},
        {"caller workspace", 0, false, CAPTURE, false},
        {"caller workspace again", 0, false, REPLAY, false},
        /* three outputs in turn, more than the two graphs hold: three captures in a row, then
         * pass by pass */
        {"caller workspace, output 1", 1, false, CAPTURE, false},
        {"caller workspace, output 2", 2, false, CAPTURE, false},
        {"caller workspace, output 0 again", 0, false, CAPTURE, false},
        {"caller workspace, output 1 again", 1, false, PLAIN, true},
        {"caller workspace, same output", 1, false, PLAIN, true},
        {"own workspace after them", 0, true, CAPTURE, true},
        {"own workspace after them again", 0, true, REPLAY, true},
    };
    /* another batch: new inputs and outputs, a larger workspace of the block's own */
    static const graph_run batch_3[] = {
        {"batch 3", 0, true, CAPTURE, true},
        {"batch 3 again", 0, true, REPLAY, true},
    };
    failed += check_graph_runs(&f, first, sizeof first / sizeof *first, false, n_cases);
    (*n_cases)++;
    failed += rebind_a_parameter(&f);
    failed += check_graph_runs(&f, after_bind, sizeof after_bind / sizeof *after_bind, false, n_cases);
    if (!fixture_batch(&f, 3)) {
        (*n_cases)++;
        failed++;
    } else {
        failed += check_graph_runs(&f, batch_3, sizeof batch_3 / sizeof *batch_3, false, n_cases);
    }
out:
    fixture_free_buffers(&f);
    fg_block_destroy(f.b);
    return failed;
}

/* The same block in a context created under FUSEGEN_NO_GRAPHS=1 (the environment is read
 * when a context is created): every run launches each pass. */
static int no_graphs_case(const char *name, const char *source, int *n_cases)
{
    const char *was = getenv("FUSEGEN_NO_GRAPHS");
    char *saved = was ? strdup(was) : NULL;
    setenv("FUSEGEN_NO_GRAPHS", "1", 1);
    fg_context_options o;
    fg_context_options_init(&o);
    o.cache_dir = gpu_cache_dir();
    fg_context *ctx = NULL;
    fg_status s = fg_context_create(&o, &ctx);
    if (saved)
        setenv("FUSEGEN_NO_GRAPHS", saved, 1);
    else
        unsetenv("FUSEGEN_NO_GRAPHS");
    free(saved);
    if (s != FG_OK) {
        printf("FAILED %-32s no graphs: context: %s\n", name, fg_last_error());
        (*n_cases)++;
        return 1;
    }
    static const graph_run runs[] = {
        {"FUSEGEN_NO_GRAPHS=1", 0, true, PLAIN, false},
        {"FUSEGEN_NO_GRAPHS=1 again", 0, true, PLAIN, false},
        {"FUSEGEN_NO_GRAPHS=1 caller workspace", 0, false, PLAIN, false},
    };
    graph_fixture f;
    int failed = 0;
    if (!fixture_open(&f, ctx, name, source)) {
        (*n_cases)++;
        failed = 1;
    } else {
        f.seen.off = true;
        failed += check_graph_runs(&f, runs, sizeof runs / sizeof *runs, true, n_cases);
    }
    fixture_free_buffers(&f);
    fg_block_destroy(f.b);
    fg_context_destroy(ctx);
    return failed;
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : getenv("FUSEGEN_TEST_FILTER");
    fg_context *ctx = gpu_open("test_gpu_blocks");
    if (!ctx)
        return GPU_SKIP;
    int n_cases = 0, failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
            char name[96], source[4096];
            snprintf(name, sizeof name, "%s/%s", cases[i].name, variants[v].name);
            bool half = strstr(variants[v].fields, "bf16") || strstr(variants[v].fields, "fp16");
            if ((filter && *filter && !strstr(name, filter)) || (cases[i].half_only && !half))
                continue;
            snprintf(source, sizeof source, cases[i].source, variants[v].fields);
            for (int64_t batch = 1; batch <= 3; batch += 2) {
                /* fg_block_run and fg_block_run_workspace, and a half block's run on unaligned
                 * inputs (2 bytes past 16: one element; an fp32 input is 4-byte aligned at least) */
                n_cases += half ? 3 : 2;
                failed += run_case(ctx, name, source, cases[i].tf32, half, batch);
            }
        }
    /* the graph sequence on the fp32 bottleneck and SD block ("resnet_bottleneck/fp32 graph") */
    for (size_t i = 0; i < 2; i++) {
        char name[96], label[128], source[4096];
        snprintf(name, sizeof name, "%s/fp32", cases[i].name);
        snprintf(label, sizeof label, "%s graph", name);
        if (filter && *filter && !strstr(label, filter))
            continue;
        snprintf(source, sizeof source, cases[i].source, variants[0].fields);
        failed += graph_case(ctx, name, source, &n_cases);
        failed += no_graphs_case(name, source, &n_cases);
    }
    gpu_close(ctx);
    if (n_cases == 0)
        printf("no case matches '%s'\n", filter);
    printf("%d cases, %d failed\n", n_cases, failed);
    return failed || n_cases == 0 ? 1 : 0;
}
