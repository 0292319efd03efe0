/* SPDX-License-Identifier: Apache-2.0 */
/* A wgmma conv's weights, packed once per bind (docs/api.md, "Binding parameters"): the image
 * of the B tiles is the layer's own, written at the bind (or at the prepare after it) and
 * never by a run, so every run must see the weight bound last -- and only that: a weight
 * bound by device pointer and changed in place without a bind keeps the image of the values
 * it held when bound. Every case runs on a context created with FUSEGEN_CONV_ENGINE=wgmma
 * (no timing against another engine) on sm_90a, checks that its layers really are planned
 * with a weight pack (else it fails: the cases would show nothing), poisons the output with
 * NaNs before each run and compares with the float64 CPU reference of the same layer (or
 * block) holding host copies of the values (atol = rtol = 1e-4, for bf16 plus an ulp and rel
 * L2 <= 1e-3: gpu_compare), and checks that the new weights move the reference (a rebind
 * that changed nothing would show nothing):
 *   layer/{fp32,bf16}/host-rebind       W1 from the host, runs (fg_layer_run: its graph
 *                                       captured, then replayed; fg_layer_run_workspace), W2
 *                                       from the host, the same runs against W2;
 *   layer/{fp32,bf16}/device-in-place   W1 by device pointer, a run; W2 written into that
 *                                       memory without a bind: runs still match W1 (and not
 *                                       W2); bound again: W2;
 *   block/bottleneck/rebind             the ResNet bottleneck of test_gpu_blocks (three wgmma
 *                                       layers, folded batch norms): runs that prepare,
 *                                       capture and replay the block's graph, a conv weight
 *                                       bound again, runs that capture and replay again, each
 *                                       against the reference (and the graph counts saying so);
 *   capture/fp32/no-pack-in-graph       fg_layer_run_workspace inside a capture of the caller's
 *                                       (global mode) after prepare: the graph holds one kernel
 *                                       node per pass but the weight pack; its replay matches
 *                                       W1; after W2 is bound outside it, a replay of the same
 *                                       graph matches W2 (the image keeps its address);
 *   capture/fp32/unpacked-refused       the same call on a layer bound but never prepared
 *                                       (relaxed capture, so that loading its kernels is allowed
 *                                       there): FG_ERR_INVALID_ARGUMENT naming the layer and
 *                                       saying to prepare before capturing; outside the capture
 *                                       it then runs and matches.
 *
 * test_gpu_packed_weights [FILTER]: only the cases whose name contains FILTER (or
 * $FUSEGEN_TEST_FILTER). Ends with "N cases, M failed"; exits 77 without a GPU or on a GPU
 * without wgmma (not sm_90a). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/cuda_driver.h"
#include "../../runtime/random_init.h"
#include "gpu_harness.h"

enum { BATCH = 2 };
static const double TOL = 1e-4;
/* the smallest move of the reference a new weight must cause (the outputs are ~0.1-1) */
static const double MOVED = 1e-2;

static int n_cases, n_failed;

static void failed(const char *name, const char *what)
{
    printf("FAILED %-36s %s: %s\n", name, what, fg_last_error());
    n_failed++;
}

/* A wgmma plan: a weight pack among its passes. */
static bool packs_weights(const fg_layer *layer)
{
    const fg_plan *plan = fg_tools_layer_plan(layer);
    for (int i = 0; plan->wgmma.parts && i < plan->n_passes; i++)
        if (plan->passes[i].kind == FG_PASS_PACK_WEIGHTS)
            return true;
    return false;
}

/* One layer on the GPU and the same spec for its CPU reference, with device buffers. */
typedef struct fixture {
    const char *name;
    fg_context *ctx;
    fg_layer *gpu, *ref;
    int dtype;
    size_t elem;
    int64_t n_in, n_out;
    float *x, *y, *want, *last;
    CUdeviceptr dx, dy, dws;
    size_t ws_bytes;
} fixture;

static const char *layer_spec(bool bf16)
{
    return bf16 ? "return layer \"packed_bf16\" {\n"
                  "  input = { \"N\", 64, 14, 14 }, dtype = \"bf16\",\n"
                  "  conv2d { name = \"conv\", out_channels = 64, kernel = 3, padding = 1 },\n"
                  "  relu {},\n"
                  "}\n"
                : "return layer \"packed_fp32\" {\n"
                  "  input = { \"N\", 64, 14, 14 },\n"
                  "  conv2d { name = \"conv\", out_channels = 64, kernel = 3, padding = 1 },\n"
                  "  relu {},\n"
                  "}\n";
}

static void fixture_free(fixture *f)
{
    if (f->gpu)
        fg_layer_destroy(f->gpu);
    if (f->ref)
        fg_layer_destroy(f->ref);
    fg_tools_free(f->ctx, f->dx);
    fg_tools_free(f->ctx, f->dy);
    fg_tools_free(f->ctx, f->dws);
    free(f->x), free(f->y), free(f->want), free(f->last);
    memset(f, 0, sizeof *f);
}

/* Loads the spec twice, binds every parameter from the host (seed 7) on both, allocates the
 * buffers (the input random, uploaded in the layer's dtype); false after reporting. */
static bool fixture_open(fixture *f, fg_context *ctx, const char *name, bool bf16)
{
    memset(f, 0, sizeof *f);
    f->name = name;
    f->ctx = ctx;
    const char *src = layer_spec(bf16);
    if (fg_layer_load_string(ctx, "packed.lua", src, &f->gpu) != FG_OK ||
        fg_layer_load_string(ctx, "packed.lua", src, &f->ref) != FG_OK) {
        failed(name, "load");
        return false;
    }
    if (!packs_weights(f->gpu)) {
        printf("FAILED %-36s the layer is not planned on wgmma with a weight pack: the case shows nothing\n", name);
        n_failed++;
        return false;
    }
    const fg_layer_ir *ir = fg_tools_layer_ir(f->gpu);
    f->dtype = (int)ir->dtype;
    f->elem = (size_t)fg_dtype_size(ir->dtype);
    f->n_in = BATCH * fg_shape_sample_count(&ir->input);
    f->n_out = BATCH * fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out);
    f->x = malloc(sizeof(float) * (size_t)f->n_in);
    f->y = malloc(sizeof(float) * (size_t)f->n_out);
    f->want = malloc(sizeof(float) * (size_t)f->n_out);
    f->last = calloc((size_t)f->n_out, sizeof(float));
    if (!f->x || !f->y || !f->want || !f->last) {
        failed(name, "out of host memory");
        return false;
    }
    fg_random_uniform(f->x, (size_t)f->n_in, 21, 1, -1.0f, 1.0f);
    if (fg_tools_bind_random(f->gpu, 7) != FG_OK || fg_tools_bind_random(f->ref, 7) != FG_OK ||
        fg_layer_workspace_size(f->gpu, BATCH, &f->ws_bytes) != FG_OK ||
        fg_tools_alloc(ctx, f->elem * (size_t)f->n_in, &f->dx) != FG_OK ||
        fg_tools_alloc(ctx, f->elem * (size_t)f->n_out, &f->dy) != FG_OK ||
        fg_tools_alloc(ctx, f->ws_bytes ? f->ws_bytes : 256, &f->dws) != FG_OK ||
        fg_tools_upload_io(ctx, f->dx, f->x, (size_t)f->n_in, f->dtype) != FG_OK) {
        failed(name, "bind or device buffers");
        return false;
    }
    return true;
}

/* The reference of the values bound now into f->want; how far it moved since the last call. */
static double reference(fixture *f)
{
    if (fg_layer_run_cpu(f->ref, f->x, f->want, BATCH) != FG_OK) {
        failed(f->name, "reference");
        return 0;
    }
    double moved = 0;
    for (int64_t i = 0; i < f->n_out; i++) {
        moved = fmax(moved, fabs((double)f->want[i] - (double)f->last[i]));
        f->last[i] = f->want[i];
    }
    return moved;
}

/* The output of one GPU run (poisoned first) into f->y; false after reporting. */
static bool run_gpu(fixture *f, bool workspace, const char *what)
{
    if (fg_tools_fill_nan_io(f->ctx, f->dy, (size_t)f->n_out, f->dtype) != FG_OK) {
        failed(f->name, "poisoning the output");
        return false;
    }
    fg_status s = workspace ? fg_layer_run_workspace(f->gpu, (void *)f->dx, (void *)f->dy, BATCH, (void *)f->dws,
                                                     f->ws_bytes, NULL)
                            : fg_layer_run(f->gpu, (void *)f->dx, (void *)f->dy, BATCH, NULL);
    if (s != FG_OK || fg_tools_synchronize(f->ctx) != FG_OK ||
        fg_tools_download_io(f->ctx, f->y, f->dy, (size_t)f->n_out, f->dtype) != FG_OK) {
        failed(f->name, what);
        return false;
    }
    return true;
}

/* Compares f->y with f->want; prints a line; true when it matched. */
static bool matches(fixture *f, const char *what)
{
    gpu_result r;
    memset(&r, 0, sizeof r);
    r.ok = true;
    gpu_compare(f->y, f->want, (size_t)f->n_out, TOL, f->dtype, &r);
    printf("%s %-36s %-44s max abs %.3g, rel L2 %.3g, %lld/%lld outside\n", r.pass ? "ok    " : "FAILED", f->name,
           what, r.max_abs, r.rel_l2, r.bad, r.count);
    if (!r.pass)
        n_failed++;
    return r.pass;
}

/* A run checked against the reference of the values bound now. */
static void check_run(fixture *f, bool workspace, const char *what)
{
    n_cases++;
    if (run_gpu(f, workspace, what))
        matches(f, what);
}

/* The reference moved by at least MOVED since the last one. */
static void check_moved(fixture *f, double moved, const char *what)
{
    n_cases++;
    bool ok = moved >= MOVED;
    printf("%s %-36s %-44s the reference moves by up to %.3g\n", ok ? "ok    " : "FAILED", f->name, what, moved);
    if (!ok)
        n_failed++;
}

/* The conv weight W2: PyTorch's initialization, another seed. */
static float *other_weight(const fixture *f, size_t *count)
{
    const fg_layer_ir *ir = fg_tools_layer_ir(f->gpu);
    const fg_param *p = &ir->params[ir->ops[0].weight_param];
    *count = (size_t)p->count;
    float *w = malloc(sizeof(float) * *count);
    float bound = 1.0f / sqrtf((float)(p->count / p->dim[0]));
    if (w)
        fg_random_uniform(w, *count, 99, 1, -bound, bound);
    return w;
}

static void host_rebind(fg_context *ctx, const char *name, bool bf16)
{
    fixture f;
    if (!fixture_open(&f, ctx, name, bf16)) {
        n_cases++;
        fixture_free(&f);
        return;
    }
    reference(&f);
    check_run(&f, false, "W1: fg_layer_run (captures its graph)");
    check_run(&f, false, "W1: fg_layer_run again (replays it)");
    check_run(&f, true, "W1: fg_layer_run_workspace");
    size_t count;
    float *w2 = other_weight(&f, &count);
    if (!w2 || fg_layer_bind_host(f.gpu, "conv.weight", w2, count * sizeof(float)) != FG_OK ||
        fg_layer_bind_host(f.ref, "conv.weight", w2, count * sizeof(float)) != FG_OK) {
        n_cases++;
        failed(name, "binding W2");
    } else {
        check_moved(&f, reference(&f), "W2 bound from the host");
        check_run(&f, false, "W2: fg_layer_run (captures again)");
        check_run(&f, false, "W2: fg_layer_run again (replays)");
        check_run(&f, true, "W2: fg_layer_run_workspace");
    }
    free(w2);
    fixture_free(&f);
}

static void device_in_place(fg_context *ctx, const char *name, bool bf16)
{
    fixture f;
    CUdeviceptr dw = 0;
    float *w1 = NULL, *w2 = NULL;
    if (!fixture_open(&f, ctx, name, bf16)) {
        n_cases++;
        goto out;
    }
    size_t count, bytes;
    w2 = other_weight(&f, &count);
    bytes = count * sizeof(float);
    const fg_layer_ir *ir = fg_tools_layer_ir(f.gpu);
    float *params[FG_MAX_PARAMS] = {0};
    for (int p = 0; p < ir->n_params; p++)
        params[p] = malloc(sizeof(float) * (size_t)ir->params[p].count);
    fg_random_params(ir, 7, params); /* W1: what fg_tools_bind_random bound */
    w1 = params[ir->ops[0].weight_param];
    params[ir->ops[0].weight_param] = NULL;
    for (int p = 0; p < ir->n_params; p++)
        free(params[p]);
    if (!w1 || !w2 || fg_tools_alloc(ctx, bytes, &dw) != FG_OK || fg_tools_upload(ctx, dw, w1, bytes) != FG_OK ||
        fg_layer_bind_device(f.gpu, "conv.weight", (void *)dw, bytes) != FG_OK) {
        n_cases++;
        failed(name, "binding W1 by device pointer");
        goto out;
    }
    reference(&f); /* W1 (the reference layer holds its host copy from the random binding) */
    check_run(&f, false, "W1 by pointer: fg_layer_run");
    check_run(&f, true, "W1 by pointer: fg_layer_run_workspace");
    /* W2 into the same memory, no bind: the image is still W1's */
    if (fg_tools_upload(ctx, dw, w2, bytes) != FG_OK || fg_tools_synchronize(ctx) != FG_OK) {
        n_cases++;
        failed(name, "writing W2 in place");
        goto out;
    }
    check_run(&f, false, "W2 in place, not bound: still W1 (run)");
    check_run(&f, true, "W2 in place, not bound: still W1 (workspace)");
    float *y_w1 = malloc(sizeof(float) * (size_t)f.n_out);
    if (y_w1)
        memcpy(y_w1, f.y, sizeof(float) * (size_t)f.n_out);
    if (fg_layer_bind_host(f.ref, "conv.weight", w2, bytes) != FG_OK) {
        n_cases++;
        failed(name, "binding W2 on the reference");
        free(y_w1);
        goto out;
    }
    double moved = reference(&f);
    check_moved(&f, moved, "W2 on the reference");
    /* and that unbound run's output is not W2's */
    n_cases++;
    double off = 0;
    for (int64_t i = 0; y_w1 && i < f.n_out; i++)
        off = fmax(off, fabs((double)y_w1[i] - (double)f.want[i]));
    printf("%s %-36s %-44s differs from W2's reference by up to %.3g\n", off >= MOVED ? "ok    " : "FAILED", name,
           "W2 in place, not bound: not W2", off);
    if (off < MOVED)
        n_failed++;
    free(y_w1);
    /* bound again: W2 */
    if (fg_layer_bind_device(f.gpu, "conv.weight", (void *)dw, bytes) != FG_OK) {
        n_cases++;
        failed(name, "binding the same pointer again");
        goto out;
    }
    check_run(&f, false, "bound again: W2 (run)");
    check_run(&f, true, "bound again: W2 (workspace)");
out:
    free(w1), free(w2);
    fixture_free(&f);
    if (dw)
        fg_tools_free(ctx, dw);
}

/* ---- the block ---------------------------------------------------------------------------- */

/* A run of the block (poisoned output first) against its reference, with what the graph
 * counts say it did: `captures` and `replays` each grew by that much. */
static void block_run(fg_context *ctx, fg_block *b, CUdeviceptr dx, CUdeviceptr dy, const float *x, float *y,
                      float *want, int64_t n_out, const char *what, long captures, long replays,
                      fg_tools_block_graphs *seen)
{
    const char *name = "block/bottleneck/rebind";
    n_cases++;
    const void *inputs[1] = {(const void *)dx};
    const float *host_inputs[1] = {x};
    fg_tools_block_graphs now;
    if (fg_tools_fill_nan(ctx, dy, (size_t)n_out) != FG_OK || fg_block_run(b, inputs, (void *)dy, BATCH, NULL) != FG_OK ||
        fg_tools_synchronize(ctx) != FG_OK || fg_tools_download(ctx, y, dy, sizeof(float) * (size_t)n_out) != FG_OK ||
        fg_block_run_cpu(b, host_inputs, want, BATCH) != FG_OK || fg_tools_block_graph_counts(b, &now) != FG_OK) {
        failed(name, what);
        return;
    }
    gpu_result r;
    memset(&r, 0, sizeof r);
    r.ok = true;
    gpu_compare_chain(y, want, (size_t)n_out, TOL, 0, 3, &r);
    bool counted = now.captures - seen->captures == captures && now.graph_runs - seen->graph_runs == replays;
    printf("%s %-36s %-44s max abs %.3g, %lld/%lld outside; graph: %ld captures, %ld replays%s\n",
           r.pass && counted ? "ok    " : "FAILED", name, what, r.max_abs, r.bad, r.count,
           now.captures - seen->captures, now.graph_runs - seen->graph_runs, counted ? "" : " (not as expected)");
    if (!r.pass || !counted)
        n_failed++;
    *seen = now;
}

static void block_rebind(fg_context *ctx)
{
    const char *name = "block/bottleneck/rebind";
    fg_block *b = NULL;
    float *x = NULL, *y = NULL, *want = NULL, *old = NULL, *w2 = NULL;
    CUdeviceptr dx = 0, dy = 0;
    int n_layers = 0, rank;
    int64_t dims[FG_MAX_DIMS];
    char source[2048];
    snprintf(source, sizeof source, GPU_BOTTLENECK_SPEC, ""); /* fp32 NCHW */
    if (fg_block_load_string(ctx, "bottleneck.lua", source, &b) != FG_OK || fg_block_layer_count(b, &n_layers) != FG_OK) {
        n_cases++;
        failed(name, "load");
        goto out;
    }
    for (int i = 0; i < n_layers; i++)
        if (!packs_weights(fg_tools_block_layer(b, i))) {
            n_cases++;
            printf("FAILED %-36s layer %d is not planned on wgmma with a weight pack: the case shows nothing\n", name, i);
            n_failed++;
            goto out;
        }
    fg_block_input_info(b, 0, BATCH, NULL, &rank, dims);
    int64_t n_in = 1, n_out;
    for (int d = 0; d < rank; d++)
        n_in *= dims[d];
    n_out = n_in; /* the residual: the output has the input's shape */
    x = malloc(sizeof(float) * (size_t)n_in);
    y = malloc(sizeof(float) * (size_t)n_out);
    want = malloc(sizeof(float) * (size_t)n_out);
    old = malloc(sizeof(float) * (size_t)n_out);
    w2 = malloc(sizeof(float) * 16 * 16 * 9);
    if (!x || !y || !want || !old || !w2) {
        n_cases++;
        failed(name, "out of host memory");
        goto out;
    }
    fg_random_uniform(x, (size_t)n_in, 31, 1, -1.0f, 1.0f);
    fg_random_uniform(w2, 16 * 16 * 9, 99, 2, -1.0f / 12, 1.0f / 12); /* fan_in 144 */
    if (fg_tools_block_bind_random(b, 7) != FG_OK || fg_tools_alloc(ctx, sizeof(float) * (size_t)n_in, &dx) != FG_OK ||
        fg_tools_alloc(ctx, sizeof(float) * (size_t)n_out, &dy) != FG_OK ||
        fg_tools_upload(ctx, dx, x, sizeof(float) * (size_t)n_in) != FG_OK) {
        n_cases++;
        failed(name, "bind or device buffers");
        goto out;
    }
    fg_tools_block_graphs seen;
    memset(&seen, 0, sizeof seen);
    block_run(ctx, b, dx, dy, x, y, want, n_out, "first run (prepares, packs)", 0, 0, &seen);
    block_run(ctx, b, dx, dy, x, y, want, n_out, "second run (captures)", 1, 1, &seen);
    block_run(ctx, b, dx, dy, x, y, want, n_out, "third run (replays)", 0, 1, &seen);
    memcpy(old, want, sizeof(float) * (size_t)n_out);
    if (fg_block_bind_host(b, "conv2.weight", w2, sizeof(float) * 16 * 16 * 9) != FG_OK) {
        n_cases++;
        failed(name, "binding conv2.weight again");
        goto out;
    }
    block_run(ctx, b, dx, dy, x, y, want, n_out, "conv2.weight bound again (captures)", 1, 1, &seen);
    n_cases++;
    double moved = 0;
    for (int64_t i = 0; i < n_out; i++)
        moved = fmax(moved, fabs((double)want[i] - (double)old[i]));
    printf("%s %-36s %-44s the reference moves by up to %.3g\n", moved >= MOVED ? "ok    " : "FAILED", name,
           "conv2.weight bound again", moved);
    if (moved < MOVED)
        n_failed++;
    block_run(ctx, b, dx, dy, x, y, want, n_out, "after the bind, again (replays)", 0, 1, &seen);
out:
    if (b)
        fg_block_destroy(b);
    fg_tools_free(ctx, dx);
    fg_tools_free(ctx, dy);
    free(x), free(y), free(want), free(old), free(w2);
}

/* ---- a capture of the caller's ------------------------------------------------------------ */

/* The kernel nodes of `graph`, or -1. */
static long kernel_nodes(const fg_cuda *cu, CUgraph graph)
{
    size_t n = 0;
    if (cu->GraphGetNodes(graph, NULL, &n) != CUDA_SUCCESS)
        return -1;
    CUgraphNode *nodes = calloc(n ? n : 1, sizeof *nodes);
    long kernels = 0;
    if (!nodes || cu->GraphGetNodes(graph, nodes, &n) != CUDA_SUCCESS)
        kernels = -1;
    for (size_t i = 0; kernels >= 0 && i < n; i++) {
        CUgraphNodeType type;
        if (cu->GraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS)
            kernels = -1;
        else if (type == CU_GRAPH_NODE_TYPE_KERNEL)
            kernels++;
    }
    free(nodes);
    return kernels;
}

/* Replays `exec` on `stream` into f->y (poisoned first); false after reporting. */
static bool replay(fixture *f, const fg_cuda *cu, CUgraphExec exec, CUstream stream, const char *what)
{
    if (fg_tools_fill_nan_io(f->ctx, f->dy, (size_t)f->n_out, f->dtype) != FG_OK || fg_tools_synchronize(f->ctx) != FG_OK ||
        cu->GraphLaunch(exec, stream) != CUDA_SUCCESS || cu->StreamSynchronize(stream) != CUDA_SUCCESS ||
        fg_tools_download_io(f->ctx, f->y, f->dy, (size_t)f->n_out, f->dtype) != FG_OK) {
        failed(f->name, what);
        return false;
    }
    return true;
}

static void capture_prepared(fg_context *ctx, const fg_cuda *cu, CUstream stream)
{
    const char *name = "capture/fp32/no-pack-in-graph";
    fixture f;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    float *w2 = NULL;
    if (!fixture_open(&f, ctx, name, false)) {
        n_cases++;
        goto out;
    }
    reference(&f);
    if (fg_layer_prepare(f.gpu) != FG_OK) {
        n_cases++;
        failed(name, "prepare");
        goto out;
    }
    n_cases++;
    fg_status s = FG_ERR_INTERNAL;
    if (cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS)
        s = fg_layer_run_workspace(f.gpu, (void *)f.dx, (void *)f.dy, BATCH, (void *)f.dws, f.ws_bytes, stream);
    CUresult r = cu->StreamEndCapture(stream, &graph);
    if (s != FG_OK || r != CUDA_SUCCESS || !graph) {
        failed(name, "fg_layer_run_workspace inside the capture");
        goto out;
    }
    /* every pass a run launches is a kernel node: all the plan's but the weight pack (the
     * fp32 NCHW input is packed by its pass; no statistics, so no memset) */
    long kernels = kernel_nodes(cu, graph), want_kernels = fg_tools_layer_plan(f.gpu)->n_passes - 1;
    bool ok = kernels == want_kernels;
    printf("%s %-36s %-44s %ld kernel nodes, %ld expected (the plan's passes but the pack)\n", ok ? "ok    " : "FAILED",
           name, "the captured graph", kernels, want_kernels);
    if (!ok)
        n_failed++;
    if (cu->GraphInstantiate(&exec, graph, 0) != CUDA_SUCCESS) {
        n_cases++;
        failed(name, "instantiating the graph");
        goto out;
    }
    n_cases++;
    if (replay(&f, cu, exec, stream, "replay"))
        matches(&f, "W1: the caller's graph replayed");
    size_t count;
    w2 = other_weight(&f, &count);
    if (!w2 || fg_layer_bind_host(f.gpu, "conv.weight", w2, count * sizeof(float)) != FG_OK ||
        fg_layer_bind_host(f.ref, "conv.weight", w2, count * sizeof(float)) != FG_OK) {
        n_cases++;
        failed(name, "binding W2");
        goto out;
    }
    check_moved(&f, reference(&f), "W2 bound outside the capture");
    n_cases++;
    if (replay(&f, cu, exec, stream, "replay after the bind"))
        matches(&f, "W2: the same graph replayed (the image's address)");
out:
    if (exec)
        cu->GraphExecDestroy(exec);
    if (graph)
        cu->GraphDestroy(graph);
    free(w2);
    fixture_free(&f);
}

static void capture_unprepared(fg_context *ctx, const fg_cuda *cu, CUstream stream)
{
    const char *name = "capture/fp32/unpacked-refused";
    fixture f;
    CUgraph graph = NULL;
    if (!fixture_open(&f, ctx, name, false)) {
        n_cases++;
        fixture_free(&f);
        return;
    }
    reference(&f);
    n_cases++;
    fg_status s = FG_OK;
    char msg[1024] = "";
    if (cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS) {
        s = fg_layer_run_workspace(f.gpu, (void *)f.dx, (void *)f.dy, BATCH, (void *)f.dws, f.ws_bytes, stream);
        snprintf(msg, sizeof msg, "%s", fg_last_error());
    }
    cu->StreamEndCapture(stream, &graph); /* (whatever the capture holds: nothing is run) */
    if (graph)
        cu->GraphDestroy(graph);
    bool ok = s == FG_ERR_INVALID_ARGUMENT && strstr(msg, "packed_fp32") && strstr(msg, "before capturing");
    printf("%s %-36s %-44s %s: %s\n", ok ? "ok    " : "FAILED", name, "a run inside the capture, not prepared",
           fg_status_name(s), msg);
    if (!ok)
        n_failed++;
    /* outside the capture the run packs (a first run) and matches */
    check_run(&f, true, "then outside the capture: W1");
    fixture_free(&f);
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : getenv("FUSEGEN_TEST_FILTER");
    setenv("FUSEGEN_CONV_ENGINE", "wgmma", 1); /* read by the context: no timing against another engine */
    fg_context *ctx = gpu_open("test_gpu_packed_weights");
    fg_tools_device device;
    memset(&device, 0, sizeof device);
    if (fg_tools_device_info(ctx, &device) != FG_OK || strcmp(device.arch, "sm_90a") != 0) {
        printf("SKIPPED test_gpu_packed_weights: the wgmma engine needs sm_90a, the device is %s\n", device.arch);
        gpu_close(ctx);
        return GPU_SKIP;
    }
    fg_error err;
    const fg_cuda *cu = fg_cuda_get(NULL, &err);
    CUstream stream = NULL;
    CUdeviceptr probe = 0; /* (makes the context current on this thread for the driver calls) */
    if (!cu || fg_tools_alloc(ctx, 256, &probe) != FG_OK || cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        printf("FAILED test_gpu_packed_weights: the driver or a stream: %s\n", cu ? fg_last_error() : err.msg);
        return 1;
    }
    fg_tools_free(ctx, probe);
    static const struct {
        const char *name;
        int kind; /* 0 host rebind, 1 device in place, 2 block, 3 capture after prepare, 4 capture unprepared */
        bool bf16;
    } cases[] = {
        {"layer/fp32/host-rebind", 0, false},      {"layer/bf16/host-rebind", 0, true},
        {"layer/fp32/device-in-place", 1, false},  {"layer/bf16/device-in-place", 1, true},
        {"block/bottleneck/rebind", 2, false},     {"capture/fp32/no-pack-in-graph", 3, false},
        {"capture/fp32/unpacked-refused", 4, false},
    };
    int matched = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (filter && *filter && !strstr(cases[i].name, filter))
            continue;
        matched++;
        switch (cases[i].kind) {
        case 0:
            host_rebind(ctx, cases[i].name, cases[i].bf16);
            break;
        case 1:
            device_in_place(ctx, cases[i].name, cases[i].bf16);
            break;
        case 2:
            block_rebind(ctx);
            break;
        case 3:
            capture_prepared(ctx, cu, stream);
            break;
        default:
            capture_unprepared(ctx, cu, stream);
            break;
        }
    }
    cu->StreamDestroy(stream);
    gpu_close(ctx);
    if (!matched)
        printf("no case matches '%s'\n", filter);
    printf("%d cases, %d failed\n", n_cases, n_failed);
    return n_failed || !matched ? 1 : 0;
}
