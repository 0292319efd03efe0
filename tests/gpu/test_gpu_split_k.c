/* SPDX-License-Identifier: Apache-2.0 */
/* Split K on the wgmma engine (gen/planner.c, wgmma_split; templates/conv_wgmma.lua), on the
 * GPU, for the layers of tests/split_k_specs.h:
 *   1. each plans the splits the case expects at its batch (on sm_90a; other devices run the
 *      layers without the engine and say so): `splits`, or with FUSEGEN_SPLIT_WAVES=1 in the
 *      environment (bench/gpu-check runs it so too) `splits_waves`, the splits counted in
 *      waves, several cases then walking more units than the GPU has SMs, or with
 *      FUSEGEN_WGMMA_ALTERNATE=2 `splits_turns`, the consumer warpgroups' tiles in turn;
 *   2. each matches the CPU float64 reference (poisoned outputs, random data);
 *   3. three more runs give the same bits as the first (which captures the layer's graph):
 *      two replays of that graph (the kernels must leave the arrival counters at zero: the
 *      graph holds no memset of them) and one on a caller's workspace filled with NaN bytes
 *      (the launcher clears the counters there) -- the last CTA adds the partials in split
 *      order, so the arrival order cannot change a bit;
 *   4. two more runs on the caller's workspace with the persistent grid cut to 7 and 50
 *      blocks (the context's SM count lowered, as on smaller or partitioned GPUs): each block
 *      then walks several (tile, split) units, the ring's phases carried across them, and
 *      the bits must still be the first run's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/api_internal.h" /* fg_context.sm_count: the persistent grid's size */
#include "../split_k_specs.h"
#include "gpu_harness.h"

/* 1: the splits a launch of the case's batch uses; -1 when the conv is not on wgmma; *waves:
 * whether the plan counts them in waves (fg_wgmma_tiling.split_waves) */
static int planned_splits(fg_context *ctx, const split_k_case *k, int *waves)
{
    fg_layer *layer = NULL;
    int splits = -1;
    *waves = 0;
    if (fg_layer_load_string(ctx, k->name, k->source, &layer) == FG_OK && fg_tools_prepare(layer, k->batch) == FG_OK) {
        const fg_plan *plan = fg_tools_layer_plan(layer);
        for (int p = 0; plan && p < plan->n_passes; p++)
            if (plan->passes[p].kind == FG_PASS_CONV && plan->passes[p].conv.engine == FG_CONV_WGMMA) {
                splits = fg_wgmma_splits(&plan->wgmma, fg_wgmma_tiles(&plan->wgmma, plan->passes[p].launch.grid_x, k->batch));
                *waves = plan->wgmma.split_waves;
            }
    } else {
        printf("       %s: %s\n", k->name, fg_last_error());
    }
    fg_layer_destroy(layer);
    return splits;
}

/* 3: returns 0 when every run gave the first run's bits */
static int same_bits(fg_context *ctx, const split_k_case *k, uint64_t seed, char *why, size_t cap)
{
    fg_layer *layer = NULL;
    const fg_layer_ir *ir;
    int rc = 1;
    float *x = NULL, *first = NULL, *again = NULL;
    CUdeviceptr dx = 0, dy = 0, ws = 0;
    size_t ws_bytes = 0;
    if (fg_layer_load_string(ctx, k->name, k->source, &layer) != FG_OK || fg_tools_bind_random(layer, seed) != FG_OK) {
        snprintf(why, cap, "load: %s", fg_last_error());
        goto out;
    }
    ir = fg_tools_layer_ir(layer);
    int dtype = (int)ir->dtype; /* the input and output in the layer's dtype */
    size_t elem = (size_t)fg_dtype_size(ir->dtype);
    size_t n_in = (size_t)(k->batch * fg_shape_sample_count(&ir->input));
    size_t n_out = (size_t)(k->batch * fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out));
    x = malloc(n_in * sizeof *x);
    first = malloc(n_out * sizeof *first);
    again = malloc(n_out * sizeof *again);
    if (!x || !first || !again) {
        snprintf(why, cap, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_in; i++)
        x[i] = (float)((i * 2654435761u) % 1000u) / 1000.0f - 0.5f;
    if (fg_tools_alloc(ctx, n_in * elem, &dx) != FG_OK || fg_tools_alloc(ctx, n_out * elem, &dy) != FG_OK ||
        fg_tools_upload_io(ctx, dx, x, n_in, dtype) != FG_OK ||
        fg_layer_workspace_size(layer, k->batch, &ws_bytes) != FG_OK ||
        fg_tools_alloc(ctx, ws_bytes ? ws_bytes : 256, &ws) != FG_OK) {
        snprintf(why, cap, "device buffers: %s", fg_last_error());
        goto out;
    }
    static const char *const runs[] = {"the first run", "a graph replay", "a second replay",
                                       "a run on a caller's workspace of NaN bytes", "a run on 7 blocks",
                                       "a run on 50 blocks"};
    static const int blocks[] = {0, 0, 0, 0, 7, 50};
    for (int r = 0; r < 6; r++) {
        fg_status s;
        if (fg_tools_fill_nan_io(ctx, dy, n_out, dtype) != FG_OK) {
            snprintf(why, cap, "poisoning: %s", fg_last_error());
            goto out;
        }
        if (r >= 3) {
            if (fg_tools_fill_nan(ctx, ws, ws_bytes / 4) != FG_OK) {
                snprintf(why, cap, "poisoning: %s", fg_last_error());
                goto out;
            }
            int sm_count = ctx->sm_count;
            if (blocks[r])
                ctx->sm_count = blocks[r]; /* read by this run's launch only (no graph on this path) */
            s = fg_layer_run_workspace(layer, (void *)dx, (void *)dy, k->batch, (void *)ws, ws_bytes, NULL);
            ctx->sm_count = sm_count;
        } else {
            s = fg_layer_run(layer, (void *)dx, (void *)dy, k->batch, NULL);
        }
        if (s != FG_OK || fg_tools_synchronize(ctx) != FG_OK ||
            fg_tools_download_io(ctx, r == 0 ? first : again, dy, n_out, dtype) != FG_OK) {
            snprintf(why, cap, "%s: %s", runs[r], fg_last_error());
            goto out;
        }
        if (r > 0 && memcmp(first, again, n_out * sizeof(float)) != 0) {
            size_t d = 0;
            while (d < n_out && memcmp(&first[d], &again[d], sizeof(float)) == 0)
                d++;
            snprintf(why, cap, "%s differs from the first at element %zu (%.9g, first %.9g)", runs[r], d,
                     (double)again[d], (double)first[d]);
            goto out;
        }
    }
    rc = 0;
out:
    fg_tools_free(ctx, dx);
    fg_tools_free(ctx, dy);
    fg_tools_free(ctx, ws);
    free(x);
    free(first);
    free(again);
    fg_layer_destroy(layer);
    return rc;
}

/* test_gpu_split_k [NAME...]: the cases whose name contains one of NAME (all without one):
 * racecheck runs a few, it is ~100x slower than the plain run */
static bool selected(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return true;
    for (int a = 1; a < argc; a++)
        if (strstr(name, argv[a]))
            return true;
    return false;
}

int main(int argc, char **argv)
{
    fg_context *ctx = gpu_open("test_gpu_split_k");
    fg_tools_device device;
    if (fg_tools_device_info(ctx, &device) != FG_OK) {
        printf("FAILED %s\n", fg_last_error());
        return 1;
    }
    bool hopper = strcmp(device.arch, "sm_90a") == 0;
    if (!hopper)
        printf("note: %s is not sm_90a: the layers run without the wgmma engine, split K is not exercised\n",
               device.arch);
    /* the rule the context's plans take (the API reads the knob): the case's column for it */
    const char *knob = getenv("FUSEGEN_SPLIT_WAVES");
    const int waves_asked = knob && strcmp(knob, "1") == 0;
    if (waves_asked)
        printf("note: FUSEGEN_SPLIT_WAVES=1: the splits counted in waves (split_k_specs.h, splits_waves)\n");
    const char *turns_knob = getenv("FUSEGEN_WGMMA_ALTERNATE");
    const int turns_asked = turns_knob && strcmp(turns_knob, "2") == 0;
    if (turns_asked && waves_asked) {
        printf("FAILED: FUSEGEN_SPLIT_WAVES=1 with FUSEGEN_WGMMA_ALTERNATE=2: split_k_specs.h has no column for both\n");
        return 1;
    }
    if (turns_asked)
        printf("note: FUSEGEN_WGMMA_ALTERNATE=2: tiles in turn where they can (split_k_specs.h, splits_turns)\n");
    int cases = 0, failed = 0;
    for (int i = 0; i < N_SPLIT_K_CASES; i++) {
        const split_k_case *k = &split_k_cases[i];
        if (!selected(k->name, argc, argv))
            continue;
        if (hopper) {
            int waves;
            int s = planned_splits(ctx, k, &waves);
            const int want = waves_asked ? k->splits_waves : turns_asked ? k->splits_turns : k->splits;
            bool ok = s == want && waves == waves_asked;
            printf("%s %-32s batch %lld: %d splits planned%s, %d expected%s\n", ok ? "ok    " : "FAILED", k->name,
                   (long long)k->batch, s, waves ? " (counted in waves)" : "", want,
                   waves != waves_asked ? " (the plan's rule is not the one FUSEGEN_SPLIT_WAVES asks for)" : "");
            cases++, failed += !ok;
        }
        gpu_result r = gpu_check_spec(ctx, k->name, k->source, k->batch, 1100 + (uint64_t)i, k->tol);
        cases++;
        failed += gpu_report(k->name, k->batch, k->tol, &r);
        char why[512] = "";
        int bad = same_bits(ctx, k, 1100 + (uint64_t)i, why, sizeof why);
        cases++, failed += bad;
        printf("%s %-32s graph replays, a caller's workspace, 7 and 50 blocks: %s\n", bad ? "FAILED" : "ok    ", k->name,
               bad ? why : "the same bits as the first run");
    }
    gpu_close(ctx);
    printf("%d cases, %d failed\n", cases, failed);
    if (!cases) {
        printf("FAILED: no case matches the names given\n");
        return 1;
    }
    return failed ? 1 : 0;
}
