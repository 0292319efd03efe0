/* SPDX-License-Identifier: Apache-2.0 */
/* The layer half of the public API (include/fusegen.h): loading, binding, JIT, running. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../gen/render.h"
#include "../gen/spec_loader.h"
#include "../reference/cpu_reference.h"
#include "api_internal.h"
#include "graph_capture.h"
#include "handles.h"
#include "kernel_build.h"
#include "launcher.h"
#include "safetensors.h"
#include "../common/clock.h"
#include "../common/half.h"

/* Every call on a layer holds it (runtime/handles.h) from here to its fg_handle_release, so
 * that fg_layer_destroy in another thread waits for it instead of freeing the layer under it. */
#define ENTER_LAYER(layer, fn)                                                                                 \
    do {                                                                                                       \
        fg_api_clear_error();                                                                                  \
        if (!fg_handle_acquire(layer, FG_HANDLE_LAYER))                                                        \
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: not a live layer (NULL or destroyed)", fn);        \
    } while (0)

/* Whether runs replay a captured CUDA graph: not with FUSEGEN_NO_GRAPHS, a plan of one pass,
 * or a cuDNN pass (its algorithm search cannot run inside a capture). */
static bool graphs_wanted(const fg_layer *layer)
{
    return !layer->ctx->env.no_graphs && layer->plan.n_passes >= 2 && !layer->has_cudnn;
}

static fg_status finish_load(fg_context *ctx, fg_layer *layer, fg_layer **out);

fg_status fg_layer_create_from_ir(fg_context *ctx, const fg_layer_ir *ir, fg_layer **out)
{
    fg_layer *layer = calloc(1, sizeof *layer);
    if (!layer)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    layer->ctx = ctx;
    layer->ir = *ir;
    return finish_load(ctx, layer, out);
}

static fg_status load_held(fg_context *ctx, const char *name, const char *source, size_t len, bool is_file,
                           fg_layer **out)
{
    if (!source)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_load: %s is NULL", is_file ? "path" : "source");
    fg_layer *layer = calloc(1, sizeof *layer);
    if (!layer)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    layer->ctx = ctx;
    fg_error err;
    if (is_file && access(source, R_OK) != 0) {
        free(layer);
        return fg_api_fail(FG_ERR_IO, "%s: cannot read the spec: %s", source, strerror(errno));
    }
    int rc = is_file ? fg_spec_load_file(source, &layer->ir, &err)
                     : fg_spec_load_string(name ? name : "<string>", source, len, &layer->ir, &err);
    if (rc != 0) {
        free(layer);
        return fg_api_fail_error(FG_ERR_SPEC, &err);
    }
    return finish_load(ctx, layer, out);
}

/* Plans a loaded IR, takes its launch table and registers the handle; frees `layer` on
 * failure. */
static fg_status finish_load(fg_context *ctx, fg_layer *layer, fg_layer **out)
{
    fg_error err;
    /* the plan depends on the architecture (clusters need sm_90) */
    fg_plan_options popts = ctx->plan_options;
    fg_plan_options_set_arch(&popts, ctx->arch);
    if (fg_plan_layer(&layer->ir, &popts, &layer->plan, &err) != 0) {
        free(layer);
        return fg_api_fail_error(FG_ERR_SPEC, &err);
    }
    if (fg_launch_table_init(&layer->launch, &layer->ir, &layer->plan, &err) != 0) {
        fg_status s = fg_api_fail(FG_ERR_SPEC, "%s: cannot be launched: %s", layer->ir.file, err.msg);
        free(layer);
        return s;
    }
    layer->n_ignored = fg_ir_ignored_state(&layer->ir, layer->ignored);
    /* what no plan the layer may adopt changes (tuning.c refuses a candidate that differs):
     * read without the context's lock, while a first prepare may swap the plan */
    layer->fold = layer->plan.fold;
    for (int i = 0; i < layer->plan.n_passes; i++)
        layer->has_cudnn = layer->has_cudnn || layer->plan.passes[i].kind == FG_PASS_CUDNN;
    layer->graphs_off = !graphs_wanted(layer);
    layer->alternative = fg_tuning_candidate(layer);
    pthread_mutex_init(&layer->lock, NULL);
    pthread_rwlock_init(&layer->bindings_lock, NULL);
    if (fg_handle_add(layer, FG_HANDLE_LAYER) != 0) {
        pthread_mutex_destroy(&layer->lock);
        pthread_rwlock_destroy(&layer->bindings_lock);
        fg_tuning_candidate_free(layer->alternative);
        fg_launch_table_free(&layer->launch);
        free(layer);
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *out = layer;
    return FG_OK;
}

static fg_status load(fg_context *ctx, const char *name, const char *source, size_t len, bool is_file,
                      fg_layer **out)
{
    fg_api_clear_error();
    if (!out)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_load: out is NULL");
    *out = NULL;
    if (!fg_handle_acquire(ctx, FG_HANDLE_CONTEXT))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_load: not a live context (NULL or destroyed)");
    fg_status s = load_held(ctx, name, source, len, is_file, out);
    fg_handle_release(ctx);
    return s;
}

FG_API fg_status fg_layer_load_file(fg_context *ctx, const char *path, fg_layer **out)
{
    return load(ctx, NULL, path, 0, true, out);
}

FG_API fg_status fg_layer_load_string(fg_context *ctx, const char *name, const char *source, fg_layer **out)
{
    return load(ctx, name, source, source ? strlen(source) : 0, false, out);
}

/* Frees what a binding owns (its host copy, its device copy) and clears it. */
static void free_binding(const fg_layer *layer, fg_param_binding *b)
{
    if (b->owned && layer->ctx->cu)
        layer->ctx->cu->MemFree(b->owned);
    free(b->host);
    memset(b, 0, sizeof *b);
}

static void release_binding(fg_layer *layer, int i)
{
    free_binding(layer, &layer->params[i]);
}

/* The kernel parameters of the layer: the spec's, and the folded weight and bias. */
static int kernel_param_count(const fg_layer *layer)
{
    return fg_bn_fold_param_count(&layer->ir, &layer->fold);
}

/* Waits until the GPU has finished the layer's last run (its kernels read the parameters'
 * device copies and the workspace), so that they can be freed. */
static void wait_for_gpu_runs(fg_layer *layer)
{
    const fg_cuda *cu = layer->ctx->cu;
    if (cu && layer->done) {
        cu->CtxSetCurrent(layer->ctx->cuctx);
        cu->EventSynchronize(layer->done);
    }
}

/* A host copy of device memory the caller bound (the fold reads it): the device first
 * finishes what is queued (the tensor may have just been written, on any stream). */
static fg_status read_back(fg_layer *layer, CUdeviceptr src, size_t bytes, float **out)
{
    const fg_cuda *cu = layer->ctx->cu;
    fg_status s = fg_api_enter(layer->ctx);
    if (s != FG_OK)
        return s;
    *out = malloc(bytes ? bytes : 1);
    if (!*out)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    CUresult r = cu->CtxSynchronize();
    if (r == CUDA_SUCCESS)
        r = cu->MemcpyDtoH(*out, src, bytes);
    if (r != CUDA_SUCCESS) {
        free(*out);
        *out = NULL;
        fg_error err;
        fg_cuda_fail(&err, r, "reading back a device-bound parameter to fold a batch_norm");
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    return FG_OK;
}

/* w' and b' (gen/fold.h) from the host values `src`, into new bindings with a host copy
 * and, in a context with a device, a device copy; on failure both stay unbound. */
static fg_status fold_into(fg_layer *layer, const float *const *src, fg_param_binding *w, fg_param_binding *bias)
{
    const fg_bn_fold *fold = &layer->fold;
    const fg_cuda *cu = layer->ctx->cu;
    fg_param_binding *dst[2] = {w, bias};
    size_t bytes[2] = {(size_t)(fold->channels * fold->per_channel) * sizeof(float),
                       (size_t)fold->channels * sizeof(float)};
    fg_status s = FG_OK;
    w->host = malloc(bytes[0]);
    bias->host = malloc(bytes[1]);
    if (!w->host || !bias->host)
        s = fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    else
        fg_bn_fold_compute(fold, src, w->host, bias->host);
    if (s == FG_OK && cu && (s = fg_api_enter(layer->ctx)) == FG_OK) {
        CUresult r = CUDA_SUCCESS;
        for (int k = 0; k < 2 && r == CUDA_SUCCESS; k++) {
            r = cu->MemAlloc(&dst[k]->owned, bytes[k]);
            if (r == CUDA_SUCCESS)
                r = cu->MemcpyHtoD(dst[k]->owned, dst[k]->host, bytes[k]);
            dst[k]->device = dst[k]->owned;
        }
        if (r != CUDA_SUCCESS) {
            fg_error err;
            fg_cuda_fail(&err, r, "copying a folded batch_norm's weights to the device");
            s = fg_api_fail_error(r == CUDA_ERROR_OUT_OF_MEMORY ? FG_ERR_OUT_OF_MEMORY : FG_ERR_CUDA, &err);
        }
    }
    for (int k = 0; k < 2; k++) {
        if (s == FG_OK)
            dst[k]->bound = true;
        else
            free_binding(layer, dst[k]);
    }
    return s;
}

/* The folded conv weight and bias from the parameters bound now, `b` standing for parameter
 * i (device-bound ones are read back). *w and *bias stay unbound when a parameter the fold
 * reads is not bound yet. Bindings lock held. */
static fg_status compute_fold(fg_layer *layer, int i, const fg_param_binding *b, fg_param_binding *w,
                              fg_param_binding *bias)
{
    const fg_bn_fold *fold = &layer->fold;
    const fg_layer_ir *ir = &layer->ir;
    const fg_param_binding *from[FG_MAX_PARAMS] = {0};
    const float *src[FG_MAX_PARAMS] = {0};
    float *copies[FG_MAX_PARAMS] = {0};
    memset(w, 0, sizeof *w);
    memset(bias, 0, sizeof *bias);
    for (int p = 0; p < ir->n_params; p++) {
        if (!fg_bn_fold_reads(fold, p))
            continue;
        from[p] = p == i ? b : &layer->params[p];
        if (!from[p]->bound)
            return FG_OK; /* the fold waits for the last of its parameters */
    }
    fg_status s = FG_OK;
    for (int p = 0; p < ir->n_params && s == FG_OK; p++) {
        if (!from[p])
            continue;
        if (from[p]->host)
            src[p] = from[p]->host;
        else if ((s = read_back(layer, from[p]->device, (size_t)ir->params[p].count * sizeof(float), &copies[p])) ==
                 FG_OK)
            src[p] = copies[p];
    }
    if (s == FG_OK)
        s = fold_into(layer, src, w, bias);
    for (int p = 0; p < ir->n_params; p++)
        free(copies[p]);
    return s;
}

/* The wgmma conv's weights packed from binding `w` (the conv's weight, or the folded one)
 * into the layer's image (fg_layer.packed_w), finished on the GPU before this returns, so
 * that a run on any stream sees it. The weight is read after cuCtxSynchronize, as the fold
 * reads device memory back: writes queued on any stream, and the bind's own copy, are seen.
 * That synchronization also finishes every run in flight that reads the image (runs on
 * caller-owned workspace record no event), and none can be enqueued until this returns (a
 * bind holds the bindings lock for writing; a run packs only under the context lock, which
 * every run takes before it launches). The pack writes new memory first; the first image is
 * kept as it is, a later one is copied over the image in place, so that the image's address
 * never changes. On failure the image is as it was (stale only where the copy failed:
 * packed_current). Context lock held, bindings lock held, the kernels loaded. */
static fg_status pack_weights(fg_layer *layer, const fg_param_binding *w)
{
    const fg_cuda *cu = layer->ctx->cu;
    const uint64_t bytes = fg_launch_packed_bytes(&layer->launch);
    CUdeviceptr params[FG_MAX_KERNEL_PARAMS] = {0}, scratch = 0;
    params[layer->launch.conv_weight] = w->device;
    CUstream stream = NULL;
    fg_error err;
    int rc = 0;
    /* every copy into the weight's device memory done: the caller's queued writes, and the
     * bind's own copy from pageable host memory, which may return before its DMA lands */
    CUresult r = cu->CtxSynchronize();
    if (r == CUDA_SUCCESS)
        r = cu->MemAlloc(&scratch, bytes);
    if (r == CUDA_SUCCESS)
        r = cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS)
        rc = fg_launch_pack_weights(cu, &layer->launch, layer->functions, params, scratch, stream, &err);
    if (r == CUDA_SUCCESS && rc == 0)
        r = cu->StreamSynchronize(stream);
    if (r == CUDA_SUCCESS && rc == 0 && !layer->packed_w) {
        layer->packed_w = scratch;
        scratch = 0;
    } else if (r == CUDA_SUCCESS && rc == 0) {
        layer->packed_current = false; /* until the copy is whole */
        r = cu->MemcpyDtoDAsync(layer->packed_w, scratch, bytes, stream);
        if (r == CUDA_SUCCESS)
            r = cu->StreamSynchronize(stream);
    }
    if (stream)
        cu->StreamDestroy(stream);
    if (scratch)
        cu->MemFree(scratch);
    if (r == CUDA_SUCCESS && rc == 0) {
        layer->packed_current = true;
        return FG_OK;
    }
    if (r != CUDA_SUCCESS)
        fg_cuda_fail(&err, r, "packing the wgmma conv's weights");
    return fg_api_fail(r == CUDA_ERROR_OUT_OF_MEMORY ? FG_ERR_OUT_OF_MEMORY : FG_ERR_CUDA, "layer %s: %s",
                       layer->ir.name, err.msg);
}

/* At a bind of `w`, the binding the weight pack is to read (the conv's weight, or the folded
 * one): packed now where the kernels are loaded; elsewhere (or while a fold waits for its
 * last parameter) the image is stale until a prepare or run packs it. Bindings lock held
 * for writing. */
static fg_status repack_for_bind(fg_layer *layer, const fg_param_binding *w)
{
    fg_status s = FG_OK;
    pthread_mutex_lock(&layer->ctx->lock); /* the kernels and the plan a prepare settles */
    if (layer->module && layer->launch.packed_w >= 0 && w->bound)
        s = pack_weights(layer, w);
    else
        layer->packed_current = false;
    pthread_mutex_unlock(&layer->ctx->lock);
    return s;
}

/* Where the image is not the bound weight's (the kernels were loaded after the bind), packs
 * it: at a prepare, or at a run on `stream` -- unless that stream is being captured, which
 * fails, naming the layer, rather than put a one-time pack into the caller's graph.
 * Context lock held, bindings lock held for reading, the kernels loaded. */
static fg_status ensure_packed(fg_layer *layer, bool run, CUstream stream)
{
    if (layer->launch.packed_w < 0 || layer->packed_current)
        return FG_OK;
    const fg_param_binding *w = &layer->params[layer->launch.conv_weight];
    if (!w->bound)
        return FG_OK; /* packed when it is bound; a run refuses unbound parameters first */
    if (run && fg_stream_capturing(layer->ctx->cu, stream))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                           "layer %s: its wgmma conv's weights are not packed yet, and a run on a stream being "
                           "captured cannot pack them (a one-time pass the graph would replay): prepare the layer "
                           "(fg_layer_prepare, or a run) after binding its parameters, before capturing",
                           layer->ir.name);
    return pack_weights(layer, w);
}

/* Puts `b` (its copies now the layer's) in place of parameter i's binding, and when the
 * parameter feeds a folded batch_norm, the folded weight and bias recomputed with it, and
 * when it is what a wgmma conv's weight pack reads (the weight, or the folded one), the
 * packed image: all together, so that no run sees a fold or an image of older values; on
 * failure nothing changes and the new copies are freed. Runs read the bindings (a CPU run
 * its host copy, a GPU run its device copy, asynchronously): the swap waits for the runs in
 * flight in other threads (the bindings lock) and for the GPU to finish the last one, then
 * frees the old copies. */
static fg_status replace_binding(fg_layer *layer, int i, fg_param_binding *b)
{
    const fg_bn_fold *fold = &layer->fold;
    fg_param_binding w, bias;
    pthread_rwlock_wrlock(&layer->bindings_lock);
    bool refold = fg_bn_fold_reads(fold, i);
    fg_status s = refold ? compute_fold(layer, i, b, &w, &bias) : FG_OK;
    if (s == FG_OK && (refold || i == layer->ir.ops[0].weight_param))
        s = repack_for_bind(layer, refold ? &w : b);
    if (s != FG_OK && refold) {
        free_binding(layer, &w); /* (unbound and empty where the fold failed) */
        free_binding(layer, &bias);
    }
    if (s == FG_OK) {
        wait_for_gpu_runs(layer);
        release_binding(layer, i);
        layer->params[i] = *b;
        if (refold) {
            release_binding(layer, fold->folded_weight);
            release_binding(layer, fold->folded_bias);
            layer->params[fold->folded_weight] = w;
            layer->params[fold->folded_bias] = bias;
        }
        layer->binding_generation++;
    } else {
        free_binding(layer, b);
    }
    pthread_rwlock_unlock(&layer->bindings_lock);
    return s;
}

FG_API fg_status fg_layer_destroy(fg_layer *layer)
{
    fg_api_clear_error();
    /* waits for the calls on the layer in flight in other threads; refuses new ones */
    if (fg_handle_remove(layer, FG_HANDLE_LAYER, NULL) != 0)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_destroy: not a live layer (NULL or destroyed)");
    const fg_cuda *cu = layer->ctx->cu;
    wait_for_gpu_runs(layer);
    for (int i = 0; i < kernel_param_count(layer); i++)
        release_binding(layer, i);
    if (cu && layer->graph)
        cu->GraphExecDestroy(layer->graph);
    if (cu && layer->capture_stream)
        cu->StreamDestroy(layer->capture_stream);
    if (cu && layer->done)
        cu->EventDestroy(layer->done);
    if (cu && layer->workspace)
        cu->MemFree(layer->workspace);
    if (cu && layer->packed_w)
        cu->MemFree(layer->packed_w);
    if (cu && layer->module)
        cu->ModuleUnload(layer->module);
    fg_cudnn_conv_destroy(layer->cudnn);
    fg_tuning_candidate_free(layer->alternative);
    fg_launch_table_free(&layer->launch);
    pthread_mutex_destroy(&layer->lock);
    pthread_rwlock_destroy(&layer->bindings_lock);
    free(layer);
    return FG_OK;
}

static fg_status shape_for(const fg_shape *s, int64_t batch, int *rank, int64_t *dims, const char *fn)
{
    if (!rank || !dims)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: rank or dims is NULL", fn);
    if (batch < 1)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: batch must be at least 1 (got %lld)", fn, (long long)batch);
    *rank = s->rank;
    dims[0] = batch;
    for (int d = 1; d < s->rank; d++)
        dims[d] = s->dim[d];
    return FG_OK;
}

static fg_status input_shape_held(const fg_layer *layer, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS])
{
    return shape_for(&layer->ir.input, batch, rank, dims, "fg_layer_input_shape");
}

FG_API fg_status fg_layer_input_shape(const fg_layer *layer, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS])
{
    ENTER_LAYER(layer, "fg_layer_input_shape");
    fg_status s = input_shape_held(layer, batch, rank, dims);
    fg_handle_release(layer);
    return s;
}

static fg_status output_shape_held(const fg_layer *layer, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS])
{
    return shape_for(&layer->ir.ops[layer->ir.n_ops - 1].out, batch, rank, dims, "fg_layer_output_shape");
}

FG_API fg_status fg_layer_output_shape(const fg_layer *layer, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS])
{
    ENTER_LAYER(layer, "fg_layer_output_shape");
    fg_status s = output_shape_held(layer, batch, rank, dims);
    fg_handle_release(layer);
    return s;
}

static fg_status dtype_held(const fg_layer *layer, const char **dtype, int *element_bytes)
{
    if (!dtype && !element_bytes)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_dtype: dtype and element_bytes are both NULL");
    if (dtype)
        *dtype = fg_dtype_name(layer->ir.dtype);
    if (element_bytes)
        *element_bytes = fg_dtype_size(layer->ir.dtype);
    return FG_OK;
}

FG_API fg_status fg_layer_dtype(const fg_layer *layer, const char **dtype, int *element_bytes)
{
    ENTER_LAYER(layer, "fg_layer_dtype");
    fg_status s = dtype_held(layer, dtype, element_bytes);
    fg_handle_release(layer);
    return s;
}

FG_API fg_status fg_layer_layout(const fg_layer *layer, const char **layout)
{
    ENTER_LAYER(layer, "fg_layer_layout");
    fg_status s = FG_OK;
    if (!layout)
        s = fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_layout: layout is NULL");
    else
        *layout = fg_layout_name(layer->ir.layout);
    fg_handle_release(layer);
    return s;
}

static fg_status param_count_held(const fg_layer *layer, int *count)
{
    if (!count)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_param_count: count is NULL");
    *count = layer->ir.n_params;
    return FG_OK;
}

FG_API fg_status fg_layer_param_count(const fg_layer *layer, int *count)
{
    ENTER_LAYER(layer, "fg_layer_param_count");
    fg_status s = param_count_held(layer, count);
    fg_handle_release(layer);
    return s;
}

static fg_status param_info_held(const fg_layer *layer, int index, const char **name, int *rank,
                                     int64_t dims[FG_MAX_DIMS])
{
    if (index < 0 || index >= layer->ir.n_params)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_param_info: index %d out of range (the layer has %d "
                                                    "parameters)",
                           index, layer->ir.n_params);
    const fg_param *p = &layer->ir.params[index];
    if (name)
        *name = p->name;
    if (rank)
        *rank = p->rank;
    if (dims)
        for (int d = 0; d < p->rank; d++)
            dims[d] = p->dim[d];
    return FG_OK;
}

FG_API fg_status fg_layer_param_info(const fg_layer *layer, int index, const char **name, int *rank,
                                     int64_t dims[FG_MAX_DIMS])
{
    ENTER_LAYER(layer, "fg_layer_param_info");
    fg_status s = param_info_held(layer, index, name, rank, dims);
    fg_handle_release(layer);
    return s;
}

static fg_status ignored_count_held(const fg_layer *layer, int *count)
{
    if (!count)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_ignored_count: count is NULL");
    *count = layer->n_ignored;
    return FG_OK;
}

FG_API fg_status fg_layer_ignored_count(const fg_layer *layer, int *count)
{
    ENTER_LAYER(layer, "fg_layer_ignored_count");
    fg_status s = ignored_count_held(layer, count);
    fg_handle_release(layer);
    return s;
}

static fg_status ignored_info_held(const fg_layer *layer, int index, const char **name, int *rank,
                                   int64_t dims[FG_MAX_DIMS], const char **dtype)
{
    if (index < 0 || index >= layer->n_ignored)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                           "fg_layer_ignored_info: index %d out of range (the layer ignores %d state_dict entries)", index,
                           layer->n_ignored);
    const fg_ignored_state *e = &layer->ignored[index];
    if (name)
        *name = e->name;
    if (rank)
        *rank = e->rank;
    if (dims && e->rank == 1)
        dims[0] = e->dim;
    if (dtype)
        *dtype = e->int64 ? "I64" : "F32";
    return FG_OK;
}

FG_API fg_status fg_layer_ignored_info(const fg_layer *layer, int index, const char **name, int *rank,
                                       int64_t dims[FG_MAX_DIMS], const char **dtype)
{
    ENTER_LAYER(layer, "fg_layer_ignored_info");
    fg_status s = ignored_info_held(layer, index, name, rank, dims, dtype);
    fg_handle_release(layer);
    return s;
}

static int find_param(const fg_layer *layer, const char *name)
{
    for (int i = 0; i < layer->ir.n_params; i++)
        if (strcmp(layer->ir.params[i].name, name) == 0)
            return i;
    return -1;
}

static fg_status unknown_param(const fg_layer *layer, const char *fn, const char *name)
{
    const char *names[FG_MAX_PARAMS];
    for (int i = 0; i < layer->ir.n_params; i++)
        names[i] = layer->ir.params[i].name;
    const char *near = fg_nearest_name(name, names, layer->ir.n_params);
    return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: layer %s has no parameter '%s'%s%s%s", fn, layer->ir.name, name,
                       near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
}

static fg_status bind_device_held(fg_layer *layer, const char *name, const void *device_ptr, size_t bytes)
{
    if (!name || !device_ptr)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_bind_device: name or pointer is NULL");
    if (!layer->ctx->cu)
        return fg_api_fail(FG_ERR_NO_DEVICE, "fg_layer_bind_device: the context is CPU-only");
    int i = find_param(layer, name);
    if (i < 0)
        return unknown_param(layer, "fg_layer_bind_device", name);
    size_t want = (size_t)layer->ir.params[i].count * sizeof(float);
    if (bytes != want)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_bind_device: '%s' needs %zu bytes (float32), got %zu",
                           name, want, bytes);
    fg_status s = fg_api_enter(layer->ctx);
    if (s != FG_OK)
        return s;
    return replace_binding(layer, i, &(fg_param_binding){.bound = true, .device = (CUdeviceptr)device_ptr});
}

FG_API fg_status fg_layer_bind_device(fg_layer *layer, const char *name, const void *device_ptr, size_t bytes)
{
    ENTER_LAYER(layer, "fg_layer_bind_device");
    fg_status s = bind_device_held(layer, name, device_ptr, bytes);
    fg_handle_release(layer);
    return s;
}

static fg_status bind_host_held(fg_layer *layer, const char *name, const float *data, size_t bytes)
{
    if (!name || !data)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_bind_host: name or data is NULL");
    int i = find_param(layer, name);
    if (i < 0)
        return unknown_param(layer, "fg_layer_bind_host", name);
    size_t want = (size_t)layer->ir.params[i].count * sizeof(float);
    if (bytes != want)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_bind_host: '%s' needs %zu bytes (float32), got %zu",
                           name, want, bytes);
    float *copy = malloc(want);
    if (!copy)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(copy, data, want);
    CUdeviceptr dev = 0;
    const fg_cuda *cu = layer->ctx->cu;
    if (cu) {
        fg_status s = fg_api_enter(layer->ctx);
        CUresult r = CUDA_SUCCESS;
        if (s == FG_OK && ((r = cu->MemAlloc(&dev, want)) != CUDA_SUCCESS || (r = cu->MemcpyHtoD(dev, copy, want)) != CUDA_SUCCESS)) {
            if (dev)
                cu->MemFree(dev);
            free(copy);
            fg_error err;
            fg_cuda_fail(&err, r, "copying a parameter to the device");
            return fg_api_fail_error(r == CUDA_ERROR_OUT_OF_MEMORY ? FG_ERR_OUT_OF_MEMORY : FG_ERR_CUDA, &err);
        }
        if (s != FG_OK) {
            free(copy);
            return s;
        }
    }
    return replace_binding(layer, i, &(fg_param_binding){.bound = true, .host = copy, .device = dev, .owned = dev});
}

FG_API fg_status fg_layer_bind_host(fg_layer *layer, const char *name, const float *data, size_t bytes)
{
    ENTER_LAYER(layer, "fg_layer_bind_host");
    fg_status s = bind_host_held(layer, name, data, bytes);
    fg_handle_release(layer);
    return s;
}

static bool shapes_match(const fg_param *p, const fg_tensor *t)
{
    if (p->rank != t->rank)
        return false;
    for (int d = 0; d < p->rank; d++)
        if (p->dim[d] != t->dim[d])
            return false;
    return true;
}

static void shape_text(int rank, const int64_t *dim, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < rank && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? ", " : "", (long long)dim[d]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

static const fg_ignored_state *find_ignored(const fg_layer *layer, const char *name)
{
    for (int i = 0; i < layer->n_ignored; i++)
        if (strcmp(layer->ignored[i].name, name) == 0)
            return &layer->ignored[i];
    return NULL;
}

/* A tensor of the file that is no parameter of the layer, in a strict bind: accepted when it
 * is state the layer ignores (fg_layer_ignored_info) with the dtype and shape PyTorch saves
 * it with, or any module's num_batches_tracked (BatchNorm's step counter, an int64 scalar);
 * an error naming it otherwise. */
static fg_status check_unused_tensor(const fg_layer *layer, const char *path, const fg_tensor *t)
{
    char shown[512], got[128], want[64];
    const fg_ignored_state *e = find_ignored(layer, t->name);
    const char *suffix = strrchr(t->name, '.');
    if (!e && !(suffix && strcmp(suffix, ".num_batches_tracked") == 0))
        return fg_api_fail(FG_ERR_TENSOR_FILE, "%s: tensor '%s' is not a parameter of layer %s (pass allow_extra to "
                                               "ignore tensors the spec does not use)",
                           path, fg_tensor_name_shown(t->name, shown, sizeof shown), layer->ir.name);
    fg_ignored_state counter = {.rank = 0, .int64 = true};
    if (!e)
        e = &counter;
    bool dtype_ok = e->int64 ? strcmp(t->dtype, "I64") == 0 : t->data != NULL; /* F32, F16, BF16 */
    if (dtype_ok && t->rank == e->rank && (e->rank == 0 || t->dim[0] == e->dim))
        return FG_OK;
    shape_text(t->rank, t->dim, got, sizeof got);
    shape_text(e->rank, &e->dim, want, sizeof want);
    return fg_api_fail(FG_ERR_TENSOR_FILE,
                       "%s: tensor '%s' is %s %s; layer %s accepts it, and leaves it unused, as BatchNorm state: %s %s",
                       path, fg_tensor_name_shown(t->name, shown, sizeof shown), t->dtype, got, layer->ir.name,
                       e->int64 ? "I64" : "F32 (or F16, BF16)", want);
}

static fg_status bind_safetensors_held(fg_layer *layer, const char *path, int allow_extra)
{
    if (!path)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_bind_safetensors: path is NULL");
    fg_tensor_file f;
    fg_error err;
    if (fg_safetensors_read(path, &f, &err) != 0)
        return fg_api_fail_error(FG_ERR_TENSOR_FILE, &err);
    fg_status s = FG_OK;
    /* check everything first, so that a bad file binds nothing */
    for (int i = 0; i < layer->ir.n_params && s == FG_OK; i++) {
        const fg_param *p = &layer->ir.params[i];
        const fg_tensor *t = fg_tensor_find(&f, p->name);
        char a[128], b[128];
        if (!t) {
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: has no tensor '%s', which layer %s needs (spec line %d)", path,
                            p->name, layer->ir.name, p->first_line);
        } else if (!t->data) {
            s = fg_api_fail(FG_ERR_TENSOR_FILE,
                            "%s: tensor '%s' is %s; fusegen reads parameters stored as F32, F16 or BF16", path,
                            p->name, t->dtype);
        } else if (!shapes_match(p, t)) {
            shape_text(p->rank, p->dim, a, sizeof a);
            shape_text(t->rank, t->dim, b, sizeof b);
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: tensor '%s' has shape %s but layer %s needs %s", path, p->name, b,
                            layer->ir.name, a);
        }
    }
    for (int i = 0; i < f.n && s == FG_OK && !allow_extra; i++)
        if (find_param(layer, f.tensors[i].name) < 0)
            s = check_unused_tensor(layer, path, &f.tensors[i]);
    for (int i = 0; i < layer->ir.n_params && s == FG_OK; i++) {
        const fg_tensor *t = fg_tensor_find(&f, layer->ir.params[i].name);
        s = bind_host_held(layer, t->name, t->data, t->count * sizeof(float));
    }
    fg_tensor_file_free(&f);
    return s;
}

FG_API fg_status fg_layer_bind_safetensors(fg_layer *layer, const char *path, int allow_extra)
{
    ENTER_LAYER(layer, "fg_layer_bind_safetensors");
    fg_status s = bind_safetensors_held(layer, path, allow_extra);
    fg_handle_release(layer);
    return s;
}

/* Loads the layer's kernels (from the caches, or compiled now), first choosing between two
 * plans by timing them where the planner left the engine open (runtime/tuning.h) at `batch`
 * (0: not known) on `stream`'s device. Context lock held. */
static fg_status prepare_locked(fg_layer *layer, int64_t batch, CUstream stream)
{
    if (layer->module)
        return FG_OK;
    fg_context *ctx = layer->ctx;
    double t0 = fg_seconds_now();
    fg_error err;
    fg_built built;
    /* the cache's identity needs NVRTC's version: found at the first prepare, not at
     * fg_context_create, so that CPU-only work never needs NVRTC */
    if (ctx->cache.identity.nvrtc_major == 0 && fg_build_identity(&ctx->cache.identity, &err) != 0)
        return fg_api_fail_error(FG_ERR_COMPILE, &err);
    double t_tune = fg_seconds_now();
    fg_tuning_outcome tuning = FG_TUNING_NONE;
    if (layer->alternative) {
        tuning = fg_tuning_decide(layer, batch, stream);
        layer->graphs_off = !graphs_wanted(layer); /* the plan kept may have another pass count */
    }
    t_tune = fg_seconds_now() - t_tune;
    const fg_builder builder = {.cache = &ctx->cache, .failed_source_dir = ctx->env.tmpdir};
    if (fg_build_layer(&builder, &layer->ir, &layer->plan, ctx->arch, &built, &err) != 0)
        return fg_api_fail_error(FG_ERR_COMPILE, &err);
    if (built.from_cache && tuning == FG_TUNING_COMPILED) {
        fg_context_log(ctx, FG_LOG_INFO,
                       "%s for %s: compiled with another plan and timed against it in %.2f s (%.16s...)",
                       layer->ir.name, ctx->arch, t_tune, built.key);
    } else if (built.from_cache) {
        fg_context_log(ctx, FG_LOG_INFO, "%s for %s: from the %scache (%.16s...)", layer->ir.name, ctx->arch,
                       built.shipped ? "shipped " : "", built.key);
    } else if (built.stored) {
        char path[1200];
        fg_cache_entry_path(ctx->cache.user_dir, built.key, path, sizeof path);
        fg_context_log(ctx, FG_LOG_INFO, "%s for %s: compiled in %.2f s (%d kernels), cached as %s", layer->ir.name,
                       ctx->arch, built.compile_seconds, built.n_kernels, path);
    } else {
        fg_context_log(ctx, FG_LOG_WARN, "kernels for %s compiled but not cached: %s", layer->ir.name,
                       built.store_error);
    }
    double t_built = fg_seconds_now();
    const fg_cuda *cu = ctx->cu;
    CUresult r = cu->ModuleLoadData(&layer->module, built.cubin);
    fg_built_free(&built);
    if (r != CUDA_SUCCESS) {
        layer->module = NULL;
        fg_cuda_fail(&err, r, "loading the kernels (cuModuleLoadData)");
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    for (int i = 0; i < layer->plan.n_passes; i++) {
        if (layer->plan.passes[i].kind == FG_PASS_CUDNN && !layer->cudnn &&
            fg_cudnn_conv_create(&layer->ir.ops[0], true, &layer->cudnn, &err) != 0) {
            cu->ModuleUnload(layer->module);
            layer->module = NULL;
            return fg_api_fail_error(FG_ERR_NO_DEVICE, &err);
        }
    }
    if (fg_module_functions(cu, layer->module, &layer->plan, layer->functions, &err) != 0) {
        cu->ModuleUnload(layer->module);
        layer->module = NULL;
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    layer->from_cache = built.from_cache;
    double t_end = fg_seconds_now();
    layer->prepare_seconds.total = t_end - t0;
    layer->prepare_seconds.tune = t_tune;
    layer->prepare_seconds.tuning = tuning;
    layer->prepare_seconds.render = built.rendered ? built.render_seconds : -1;
    layer->prepare_seconds.build = t_built - t0 - t_tune - (built.rendered ? built.render_seconds : 0);
    layer->prepare_seconds.load = t_end - t_built;
    fg_context_log(ctx, FG_LOG_DEBUG, "%s: kernels ready in %.1f ms (%s, %s %.1f ms, module load %.1f ms)",
                   layer->ir.name, layer->prepare_seconds.total * 1e3,
                   built.rendered ? "rendered" : "found by the plan alias", built.from_cache ? "cache lookup" : "compile",
                   layer->prepare_seconds.build * 1e3, layer->prepare_seconds.load * 1e3);
    return FG_OK;
}

fg_status fg_layer_prepare_held(fg_layer *layer, int64_t batch)
{
    fg_status s = fg_api_enter(layer->ctx);
    if (s != FG_OK)
        return s;
    pthread_rwlock_rdlock(&layer->bindings_lock); /* the weight pack reads the weight's binding */
    pthread_mutex_lock(&layer->ctx->lock);
    s = prepare_locked(layer, batch, NULL);
    if (s == FG_OK)
        s = ensure_packed(layer, false, NULL);
    pthread_mutex_unlock(&layer->ctx->lock);
    pthread_rwlock_unlock(&layer->bindings_lock);
    return s;
}

FG_API fg_status fg_layer_prepare(fg_layer *layer)
{
    ENTER_LAYER(layer, "fg_layer_prepare");
    fg_status s = fg_layer_prepare_held(layer, 0);
    fg_handle_release(layer);
    return s;
}

static fg_status check_bound(const fg_layer *layer, bool host)
{
    for (int i = 0; i < layer->ir.n_params; i++) {
        const fg_param_binding *b = &layer->params[i];
        if (!b->bound || (host && !b->host))
            return fg_api_fail(FG_ERR_UNBOUND, "layer %s: parameter '%s' is not bound%s", layer->ir.name,
                               layer->ir.params[i].name,
                               b->bound ? " in host memory (the CPU path needs fg_layer_bind_host or a safetensors file)"
                                        : "");
    }
    const fg_bn_fold *fold = &layer->fold;
    if (!host && fold->op >= 0 && !(layer->params[fold->folded_weight].bound && layer->params[fold->folded_bias].bound))
        return fg_api_fail(FG_ERR_UNBOUND, "layer %s: batch_norm '%s' is folded into the conv but its folded weights "
                                           "were not computed: bind its parameters again",
                           layer->ir.name, layer->ir.ops[fold->op].name);
    return FG_OK;
}

/* Whether the captured graph was made for exactly these pointers, batch and bindings. */
static bool graph_matches(const fg_layer *layer, const fg_launch_memory *mem, int64_t batch)
{
    return layer->graph && layer->graph_batch == batch && layer->graph_input == mem->input &&
           layer->graph_output == mem->output && layer->graph_workspace == mem->workspace &&
           layer->graph_packed_w == mem->packed_w && layer->graph_generation == layer->binding_generation;
}

/* What a capture of the layer's launches enqueues: fg_launch_run, as a plain run calls it. */
typedef struct layer_launches {
    fg_layer *layer;
    const fg_launch_memory *mem;
    int64_t batch;
} layer_launches;

static int enqueue_layer_launches(void *arg, CUstream stream)
{
    const layer_launches *l = arg;
    fg_error err;
    return fg_launch_run(l->layer->ctx->cu, &l->layer->launch, l->layer->functions, l->mem, l->batch, stream, &err);
}

/* Captures the plan's launches (and the memsets that clear its statistics) into a CUDA graph
 * (runtime/graph_capture.h); the caller's stream then runs it with one launch. */
static int capture_graph(fg_layer *layer, const fg_launch_memory *mem, int64_t batch)
{
    layer_launches launches = {.layer = layer, .mem = mem, .batch = batch};
    if (fg_graph_capture(layer->ctx->cu, &layer->capture_stream, enqueue_layer_launches, &launches, &layer->graph) != 0)
        return -1;
    layer->graph_batch = batch;
    layer->graph_input = mem->input;
    layer->graph_output = mem->output;
    layer->graph_workspace = mem->workspace;
    layer->graph_packed_w = mem->packed_w;
    layer->graph_generation = layer->binding_generation;
    return 0;
}

static fg_status run_locked(fg_layer *layer, const void *input, void *output, int64_t batch, CUdeviceptr packed_w,
                            CUstream stream)
{
    const fg_cuda *cu = layer->ctx->cu;
    fg_error err;
    fg_launch_memory mem;
    memset(&mem, 0, sizeof mem);
    if (fg_launch_layout_for(&layer->launch, batch, &mem.layout, &err) != 0)
        return fg_api_fail_error(FG_ERR_OUT_OF_MEMORY, &err);
    if (mem.layout.total > layer->workspace_bytes) {
        /* the old workspace may still be in use by work queued on this stream, or by the
         * previous run on another stream */
        CUresult r = cu->StreamSynchronize(stream);
        if (r == CUDA_SUCCESS && layer->done)
            r = cu->EventSynchronize(layer->done);
        if (r == CUDA_SUCCESS && layer->workspace)
            r = cu->MemFree(layer->workspace);
        layer->workspace = 0;
        layer->workspace_bytes = 0;
        if (r == CUDA_SUCCESS)
            r = cu->MemAlloc(&layer->workspace, mem.layout.total);
        if (r != CUDA_SUCCESS) {
            layer->workspace = 0;
            fg_cuda_fail(&err, r, "allocating the layer's workspace");
            return fg_api_fail_error(r == CUDA_ERROR_OUT_OF_MEMORY ? FG_ERR_OUT_OF_MEMORY : FG_ERR_CUDA, &err);
        }
        layer->workspace_bytes = mem.layout.total;
        /* split K's counters start at zero and every launch leaves them so (launcher.h) */
        mem.workspace = layer->workspace;
        if (fg_launch_clear_counters(cu, &layer->launch, &mem, stream, &err) != 0)
            return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    /* runs share the workspace: a run queued on another stream than the last one must not
     * start before the last one has finished on the GPU */
    if (layer->done && stream != layer->last_stream) {
        CUresult r = cu->StreamWaitEvent(stream, layer->done, 0);
        if (r != CUDA_SUCCESS) {
            fg_cuda_fail(&err, r, "ordering this run after the previous one (cuStreamWaitEvent)");
            return fg_api_fail_error(FG_ERR_CUDA, &err);
        }
    }
    mem.input = (CUdeviceptr)input;
    mem.output = (CUdeviceptr)output;
    mem.workspace = layer->workspace;
    mem.packed_w = packed_w;
    mem.cudnn = layer->cudnn;
    mem.sm_count = layer->ctx->sm_count;
    mem.counters_zero = true; /* zeroed when allocated, above */
    CUdeviceptr params[FG_MAX_KERNEL_PARAMS];
    for (int i = 0; i < kernel_param_count(layer); i++)
        params[i] = layer->params[i].device;
    mem.params = params;
    if (!layer->graphs_off && !graph_matches(layer, &mem, batch) && capture_graph(layer, &mem, batch) != 0)
        layer->graphs_off = true; /* a capture that fails is not retried: plain launches work */
    if (!layer->graphs_off && layer->graph) {
        CUresult g = cu->GraphLaunch(layer->graph, stream);
        if (g != CUDA_SUCCESS) {
            fg_cuda_fail(&err, g, "launching the layer's CUDA graph");
            return fg_api_fail_error(FG_ERR_CUDA, &err);
        }
    } else if (fg_launch_run(cu, &layer->launch, layer->functions, &mem, batch, stream, &err) != 0) {
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    CUresult r = layer->done ? CUDA_SUCCESS : cu->EventCreate(&layer->done, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS)
        r = cu->EventRecord(layer->done, stream);
    if (r != CUDA_SUCCESS) {
        fg_cuda_fail(&err, r, "recording the end of the run (cuEventRecord)");
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    layer->last_stream = stream;
    return FG_OK;
}

/* The checks every GPU run starts with: its pointers and batch; a layer that shares statistics
 * with the other layers of its block runs in the block only. */
static fg_status check_run_args(const fg_layer *layer, const char *fn, const void *input, const void *output,
                                int64_t batch, bool linked)
{
    if (!linked && (layer->ir.pro_stats_given || layer->ir.exports_stats))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                           "%s: layer %s hands statistics to another layer of its block, or reads theirs: run the "
                           "block",
                           fn, layer->ir.name);
    if (!input || !output)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: input or output is NULL", fn);
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: batch must be between 1 and %d (got %lld)", fn, INT32_MAX,
                           (long long)batch);
    return FG_OK;
}

/* What every GPU run on `stream` needs before launching, the caller holding bindings_lock
 * for reading: every parameter bound, the kernels prepared, a wgmma conv's weights packed
 * (*packed_w: their image, which stays as it is until a bind). */
static fg_status bound_and_prepared(fg_layer *layer, int64_t batch, CUstream stream, CUdeviceptr *packed_w)
{
    fg_status s = check_bound(layer, false);
    if (s == FG_OK) {
        pthread_mutex_lock(&layer->ctx->lock);
        s = prepare_locked(layer, batch, stream);
        if (s == FG_OK)
            s = ensure_packed(layer, true, stream);
        *packed_w = layer->packed_w;
        pthread_mutex_unlock(&layer->ctx->lock);
    }
    return s;
}

static fg_status run_held(fg_layer *layer, const void *input, void *output, int64_t batch, void *stream)
{
    fg_status s = check_run_args(layer, "fg_layer_run", input, output, batch, false);
    if (s != FG_OK || (s = fg_api_enter(layer->ctx)) != FG_OK)
        return s;
    pthread_rwlock_rdlock(&layer->bindings_lock); /* no bind frees a parameter under this run */
    CUdeviceptr packed_w = 0;
    if ((s = bound_and_prepared(layer, batch, (CUstream)stream, &packed_w)) == FG_OK) {
        pthread_mutex_lock(&layer->lock);
        s = run_locked(layer, input, output, batch, packed_w, (CUstream)stream);
        pthread_mutex_unlock(&layer->lock);
    }
    pthread_rwlock_unlock(&layer->bindings_lock);
    return s;
}

FG_API fg_status fg_layer_run(fg_layer *layer, const void *input, void *output, int64_t batch, void *stream)
{
    ENTER_LAYER(layer, "fg_layer_run");
    fg_status s = run_held(layer, input, output, batch, stream);
    fg_handle_release(layer);
    return s;
}

/* The workspace a run of `batch` samples needs: the plan's, or, while a first prepare has yet
 * to choose between two plans (runtime/tuning.h), the larger of theirs. Takes the context's
 * lock (that choice swaps the plan under it). */
static int workspace_needed(const fg_layer *layer, int64_t batch, uint64_t *total, fg_error *err)
{
    fg_launch_layout layout, other;
    pthread_mutex_lock(&layer->ctx->lock);
    int rc = fg_launch_layout_for(&layer->launch, batch, &layout, err);
    if (rc == 0 && layer->alternative &&
        (rc = fg_launch_layout_for(&layer->alternative->launch, batch, &other, err)) == 0 && other.total > layout.total)
        layout.total = other.total;
    pthread_mutex_unlock(&layer->ctx->lock);
    *total = layout.total;
    return rc;
}

static fg_status workspace_size_held(const fg_layer *layer, int64_t batch, size_t *bytes)
{
    if (!bytes)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_workspace_size: bytes is NULL");
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_workspace_size: batch must be between 1 and %d (got %lld)",
                           INT32_MAX, (long long)batch);
    fg_error err;
    uint64_t total;
    if (workspace_needed(layer, batch, &total, &err) != 0)
        return fg_api_fail_error(FG_ERR_INVALID_ARGUMENT, &err);
    *bytes = (size_t)total; /* size_t is 64-bit on every target (Linux x86-64, aarch64) */
    return FG_OK;
}

FG_API fg_status fg_layer_workspace_size(const fg_layer *layer, int64_t batch, size_t *bytes)
{
    ENTER_LAYER(layer, "fg_layer_workspace_size");
    fg_status s = workspace_size_held(layer, batch, bytes);
    fg_handle_release(layer);
    return s;
}

/* A run on caller-owned workspace: no allocation, no event, no captured graph of the layer's
 * own (each pass is launched on `stream`), so it works inside a capture of the caller's, and
 * runs on different streams with different workspaces may overlap. */
static fg_status run_workspace_held(fg_layer *layer, const void *input, void *output, int64_t batch, void *workspace,
                                    size_t workspace_bytes, const CUdeviceptr *links, void *stream)
{
    fg_status s = check_run_args(layer, "fg_layer_run_workspace", input, output, batch, links != NULL);
    if (s != FG_OK)
        return s;
    if (layer->has_cudnn)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                           "fg_layer_run_workspace: layer %s runs its conv in cuDNN (precision = \"tf32\"), whose "
                           "workspace is the layer's own: use fg_layer_run",
                           layer->ir.name);
    fg_launch_memory mem;
    memset(&mem, 0, sizeof mem);
    fg_error err;
    uint64_t needed;
    if (workspace_needed(layer, batch, &needed, &err) != 0)
        return fg_api_fail_error(FG_ERR_INVALID_ARGUMENT, &err);
    if (needed > workspace_bytes || (needed > 0 && !workspace))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                           "fg_layer_run_workspace: layer %s needs %llu bytes of workspace for batch %lld, got %zu%s "
                           "(fg_layer_workspace_size)",
                           layer->ir.name, (unsigned long long)needed, (long long)batch, workspace_bytes,
                           workspace ? "" : " at NULL");
    if ((uintptr_t)workspace % 256 != 0)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_run_workspace: the workspace must be 256-byte aligned");
    if ((s = fg_api_enter(layer->ctx)) != FG_OK)
        return s;
    pthread_rwlock_rdlock(&layer->bindings_lock); /* no bind frees a parameter under this run */
    /* the layout of the plan the prepare settled on (at most `needed` bytes) */
    if ((s = bound_and_prepared(layer, batch, (CUstream)stream, &mem.packed_w)) == FG_OK &&
        fg_launch_layout_for(&layer->launch, batch, &mem.layout, &err) != 0)
        s = fg_api_fail_error(FG_ERR_INVALID_ARGUMENT, &err);
    if (s == FG_OK) {
        CUdeviceptr params[FG_MAX_KERNEL_PARAMS];
        for (int i = 0; i < kernel_param_count(layer); i++)
            params[i] = layer->params[i].device;
        mem.input = (CUdeviceptr)input;
        mem.output = (CUdeviceptr)output;
        mem.workspace = (CUdeviceptr)workspace;
        mem.sm_count = layer->ctx->sm_count;
        mem.params = params;
        for (int k = 0; links && k < FG_LINKS; k++)
            mem.links[k] = links[k];
        /* the lock covers enqueuing only (the launch table's scratch arrays): the kernels of
         * runs on different streams still overlap on the GPU */
        pthread_mutex_lock(&layer->lock);
        if (fg_launch_run(layer->ctx->cu, &layer->launch, layer->functions, &mem, batch, (CUstream)stream, &err) != 0)
            s = fg_api_fail_error(FG_ERR_CUDA, &err);
        pthread_mutex_unlock(&layer->lock);
    }
    pthread_rwlock_unlock(&layer->bindings_lock);
    return s;
}

FG_API fg_status fg_layer_run_workspace(fg_layer *layer, const void *input, void *output, int64_t batch,
                                        void *workspace, size_t workspace_bytes, void *stream)
{
    ENTER_LAYER(layer, "fg_layer_run_workspace");
    fg_status s = run_workspace_held(layer, input, output, batch, workspace, workspace_bytes, NULL, stream);
    fg_handle_release(layer);
    return s;
}

fg_status fg_layer_run_linked(fg_layer *layer, const void *input, void *output, int64_t batch, void *workspace,
                              size_t workspace_bytes, const CUdeviceptr links[FG_LINKS], void *stream)
{
    return run_workspace_held(layer, input, output, batch, workspace, workspace_bytes, links, stream);
}

static fg_status run_cpu_held(fg_layer *layer, const float *input, float *output, int64_t batch,
                              fg_reference_progress progress, void *progress_ctx)
{
    if (!input || !output)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_run_cpu: input or output is NULL");
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_run_cpu: batch must be between 1 and %d (got %lld)",
                           INT32_MAX, (long long)batch);
    int64_t n_out = batch * fg_shape_sample_count(&layer->ir.ops[layer->ir.n_ops - 1].out);
    double *out = malloc(sizeof(double) * (size_t)n_out);
    if (!out)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "fg_layer_run_cpu: out of memory");
    pthread_rwlock_rdlock(&layer->bindings_lock); /* no bind frees a parameter under this run */
    fg_status s = check_bound(layer, true);
    if (s == FG_OK) {
        const float *params[FG_MAX_PARAMS];
        for (int i = 0; i < layer->ir.n_params; i++)
            params[i] = layer->params[i].host;
        /* a bf16/fp16 layer reads its input in that dtype: the reference reads the values the
         * GPU would (each input value rounded to the dtype; identity for values already of it) */
        const float *x = input;
        float *rounded = NULL;
        if (layer->ir.dtype != FG_DTYPE_FP32) {
            int64_t n_in = batch * fg_shape_sample_count(&layer->ir.input);
            if (!(rounded = malloc(sizeof(float) * (size_t)n_in))) {
                s = fg_api_fail(FG_ERR_OUT_OF_MEMORY, "fg_layer_run_cpu: out of memory");
            } else {
                for (int64_t i = 0; i < n_in; i++)
                    rounded[i] = (float)fg_round_to_dtype(input[i], (int)layer->ir.dtype);
                x = rounded;
            }
        }
        fg_error err;
        if (s == FG_OK && fg_reference_run_progress(&layer->ir, batch, x, params, out, progress, progress_ctx, &err) != 0)
            s = fg_api_fail_error(FG_ERR_OUT_OF_MEMORY, &err);
        free(rounded);
    }
    pthread_rwlock_unlock(&layer->bindings_lock);
    /* the float64 result rounded once to the output's dtype (float, or bf16/fp16 held in a float) */
    for (int64_t i = 0; s == FG_OK && i < n_out; i++)
        output[i] = (float)fg_round_to_dtype(out[i], (int)layer->ir.dtype);
    free(out);
    return s;
}

FG_API fg_status fg_layer_run_cpu(fg_layer *layer, const float *input, float *output, int64_t batch)
{
    ENTER_LAYER(layer, "fg_layer_run_cpu");
    fg_status s = run_cpu_held(layer, input, output, batch, NULL, NULL);
    fg_handle_release(layer);
    return s;
}

fg_status fg_layer_run_cpu_progress(fg_layer *layer, const float *input, float *output, int64_t batch,
                                    fg_reference_progress progress, void *ctx)
{
    ENTER_LAYER(layer, "fg_tools_run_cpu");
    fg_status s = run_cpu_held(layer, input, output, batch, progress, ctx);
    fg_handle_release(layer);
    return s;
}
