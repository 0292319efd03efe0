/* SPDX-License-Identifier: Apache-2.0 */
/* The block API (include/fusegen.h, "Blocks"): a block owns one fg_layer per layer of its
 * spec (gen/block.h), binds parameters by name across them, and runs them in order on one
 * stream. A layer's `tensor` operands are batched parameters (fg_param.batched): before each
 * layer runs, their bindings point at the block input, an extra input or an earlier layer's
 * output in the block's workspace. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/half.h"
#include "../gen/block.h"
#include "api_internal.h"
#include "handles.h"
#include "random_init.h"
#include "tools.h"
#include "safetensors.h"

#define FG_BLOCK_MAX_PARAMS (FG_MAX_PARAMS * 4)

struct fg_block {
    fg_context *ctx;
    fg_block_ir ir;
    fg_layer *layers[FG_MAX_BLOCK_LAYERS];
    /* every parameter once: (layer, index) of its first use */
    int n_params;
    struct {
        int layer, param;
    } params[FG_BLOCK_MAX_PARAMS];
    pthread_mutex_t lock; /* one run at a time: the block's workspace */
    CUdeviceptr workspace;
    size_t workspace_bytes;
};

#define ENTER_BLOCK(block, fn)                                                                                  \
    do {                                                                                                        \
        fg_api_clear_error();                                                                                   \
        if (!fg_handle_acquire(block, FG_HANDLE_BLOCK))                                                         \
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: not a live block (NULL or destroyed)", fn);         \
    } while (0)

static void free_block(fg_block *b)
{
    for (int i = 0; i < b->ir.n_layers; i++)
        if (b->layers[i])
            fg_layer_destroy(b->layers[i]);
    if (b->workspace && b->ctx->cu)
        b->ctx->cu->MemFree(b->workspace);
    fg_block_ir_free(&b->ir);
    free(b);
}

static fg_status load_held(fg_context *ctx, const char *name, const char *source, size_t len, bool is_file,
                           fg_block **out)
{
    if (!source)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_load: %s is NULL", is_file ? "path" : "source");
    if (is_file && access(source, R_OK) != 0)
        return fg_api_fail(FG_ERR_IO, "%s: cannot read the spec: %s", source, strerror(errno));
    fg_block *b = calloc(1, sizeof *b);
    if (!b)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    b->ctx = ctx;
    fg_error err;
    int rc = is_file ? fg_block_spec_load_file(source, &b->ir, &err)
                     : fg_block_spec_load_string(name ? name : "<string>", source, len, &b->ir, &err);
    if (rc != 0) {
        fg_block_ir_free(&b->ir);
        free(b);
        return fg_api_fail_error(FG_ERR_SPEC, &err);
    }
    if (b->ir.single) {
        fg_status s = fg_api_fail(FG_ERR_SPEC, "%s: the spec returns a layer, not a block: load it with fg_layer_load_*",
                                  b->ir.file);
        fg_block_ir_free(&b->ir);
        free(b);
        return s;
    }
    for (int i = 0; i < b->ir.n_layers; i++) {
        fg_status s = fg_layer_create_from_ir(ctx, &b->ir.layers[i], &b->layers[i]);
        if (s != FG_OK) {
            /* freeing the layers made so far clears the thread's error: keep the message */
            fg_error why;
            snprintf(why.msg, sizeof why.msg, "%s", fg_last_error());
            free_block(b);
            return fg_api_fail_error(s, &why);
        }
        const fg_layer_ir *ir = &b->ir.layers[i];
        for (int p = 0; p < ir->n_params; p++) {
            if (ir->params[p].batched)
                continue;
            bool seen = false;
            for (int q = 0; q < b->n_params && !seen; q++)
                seen = !strcmp(b->ir.layers[b->params[q].layer].params[b->params[q].param].name, ir->params[p].name);
            if (!seen && b->n_params < FG_BLOCK_MAX_PARAMS) {
                b->params[b->n_params].layer = i;
                b->params[b->n_params++].param = p;
            }
        }
    }
    pthread_mutex_init(&b->lock, NULL);
    if (fg_handle_add(b, FG_HANDLE_BLOCK) != 0) {
        pthread_mutex_destroy(&b->lock);
        free_block(b);
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *out = b;
    return FG_OK;
}

static fg_status load(fg_context *ctx, const char *name, const char *source, size_t len, bool is_file, fg_block **out)
{
    fg_api_clear_error();
    if (!out)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_load: out is NULL");
    *out = NULL;
    if (!fg_handle_acquire(ctx, FG_HANDLE_CONTEXT))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_load: not a live context (NULL or destroyed)");
    fg_status s = load_held(ctx, name, source, len, is_file, out);
    fg_handle_release(ctx);
    return s;
}

FG_API fg_status fg_block_load_file(fg_context *ctx, const char *path, fg_block **out)
{
    return load(ctx, NULL, path, 0, true, out);
}

FG_API fg_status fg_block_load_string(fg_context *ctx, const char *name, const char *source, fg_block **out)
{
    return load(ctx, name, source, source ? strlen(source) : 0, false, out);
}

FG_API fg_status fg_block_destroy(fg_block *block)
{
    fg_api_clear_error();
    if (fg_handle_remove(block, FG_HANDLE_BLOCK, NULL) != 0)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_destroy: not a live block (NULL or destroyed)");
    if (block->workspace && block->ctx->cu) {
        /* the last run may still read it */
        block->ctx->cu->CtxSetCurrent(block->ctx->cuctx);
        block->ctx->cu->CtxSynchronize();
    }
    pthread_mutex_destroy(&block->lock);
    free_block(block);
    return FG_OK;
}

static fg_status shape_out(const fg_shape *s, int64_t batch, int *rank, int64_t *dims, const char *fn)
{
    if (!rank || !dims)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: rank or dims is NULL", fn);
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: batch must be between 1 and %d (got %lld)", fn, INT32_MAX,
                           (long long)batch);
    *rank = s->rank;
    dims[0] = batch;
    for (int d = 1; d < s->rank; d++)
        dims[d] = s->dim[d];
    return FG_OK;
}

FG_API fg_status fg_block_input_count(const fg_block *block, int *count)
{
    ENTER_BLOCK(block, "fg_block_input_count");
    fg_status s = count ? FG_OK : fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_input_count: count is NULL");
    if (s == FG_OK)
        *count = block->ir.n_inputs;
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_input_info(const fg_block *block, int index, int64_t batch, const char **name, int *rank,
                                     int64_t dims[FG_MAX_DIMS])
{
    ENTER_BLOCK(block, "fg_block_input_info");
    fg_status s;
    if (index < 0 || index >= block->ir.n_inputs) {
        s = fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_input_info: index %d out of range (%d inputs)", index,
                        block->ir.n_inputs);
    } else {
        s = shape_out(&block->ir.tensors[index].shape, batch, rank, dims, "fg_block_input_info");
        if (s == FG_OK && name)
            *name = block->ir.tensors[index].name;
    }
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_output_shape(const fg_block *block, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS])
{
    ENTER_BLOCK(block, "fg_block_output_shape");
    fg_status s = shape_out(&block->ir.tensors[block->ir.output].shape, batch, rank, dims, "fg_block_output_shape");
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_dtype(const fg_block *block, const char **dtype, int *element_bytes)
{
    ENTER_BLOCK(block, "fg_block_dtype");
    fg_status s = FG_OK;
    if (!dtype && !element_bytes)
        s = fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_dtype: dtype and element_bytes are both NULL");
    if (s == FG_OK && dtype)
        *dtype = fg_dtype_name(block->ir.dtype);
    if (s == FG_OK && element_bytes)
        *element_bytes = fg_dtype_size(block->ir.dtype);
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_layout(const fg_block *block, const char **layout)
{
    ENTER_BLOCK(block, "fg_block_layout");
    fg_status s = layout ? FG_OK : fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_layout: layout is NULL");
    if (s == FG_OK)
        *layout = fg_layout_name(block->ir.layout);
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_layer_count(const fg_block *block, int *count)
{
    ENTER_BLOCK(block, "fg_block_layer_count");
    fg_status s = count ? FG_OK : fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_layer_count: count is NULL");
    if (s == FG_OK)
        *count = block->ir.n_layers;
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_layer_name(const fg_block *block, int index, const char **name)
{
    ENTER_BLOCK(block, "fg_block_layer_name");
    fg_status s = FG_OK;
    if (index < 0 || index >= block->ir.n_layers || !name)
        s = fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_layer_name: index %d out of range (%d layers) or name NULL",
                        index, block->ir.n_layers);
    else
        *name = fg_block_ir_layer_name(&block->ir, index);
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_param_count(const fg_block *block, int *count)
{
    ENTER_BLOCK(block, "fg_block_param_count");
    fg_status s = count ? FG_OK : fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_param_count: count is NULL");
    if (s == FG_OK)
        *count = block->n_params;
    fg_handle_release(block);
    return s;
}

static const fg_param *block_param(const fg_block *b, int i)
{
    return &b->ir.layers[b->params[i].layer].params[b->params[i].param];
}

FG_API fg_status fg_block_param_info(const fg_block *block, int index, const char **name, int *rank,
                                     int64_t dims[FG_MAX_DIMS])
{
    ENTER_BLOCK(block, "fg_block_param_info");
    fg_status s = FG_OK;
    if (index < 0 || index >= block->n_params) {
        s = fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_param_info: index %d out of range (%d parameters)", index,
                        block->n_params);
    } else {
        const fg_param *p = block_param(block, index);
        if (name)
            *name = p->name;
        if (rank)
            *rank = p->rank;
        for (int d = 0; dims && d < p->rank; d++)
            dims[d] = p->dim[d];
    }
    fg_handle_release(block);
    return s;
}

static int find_block_param(const fg_block *b, const char *name)
{
    for (int i = 0; name && i < b->n_params; i++)
        if (!strcmp(block_param(b, i)->name, name))
            return i;
    return -1;
}

static bool layer_reads(const fg_block *b, int layer, const char *name)
{
    const fg_layer_ir *ir = &b->ir.layers[layer];
    for (int p = 0; p < ir->n_params; p++)
        if (!ir->params[p].batched && !strcmp(ir->params[p].name, name))
            return true;
    return false;
}

/* Binds `name` in every layer that reads it (host or device memory). */
static fg_status bind_held(fg_block *b, const char *fn, const char *name, const void *data, size_t bytes, bool host)
{
    if (find_block_param(b, name) < 0)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: block %s has no parameter '%s'", fn, b->ir.name,
                           name ? name : "(NULL)");
    pthread_mutex_lock(&b->lock); /* not under a run of the block */
    fg_status s = FG_OK;
    for (int i = 0; i < b->ir.n_layers && s == FG_OK; i++)
        if (layer_reads(b, i, name))
            s = host ? fg_layer_bind_host(b->layers[i], name, data, bytes)
                     : fg_layer_bind_device(b->layers[i], name, data, bytes);
    pthread_mutex_unlock(&b->lock);
    return s;
}

FG_API fg_status fg_block_bind_host(fg_block *block, const char *name, const float *data, size_t bytes)
{
    ENTER_BLOCK(block, "fg_block_bind_host");
    fg_status s = bind_held(block, "fg_block_bind_host", name, data, bytes, true);
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_bind_device(fg_block *block, const char *name, const void *device_ptr, size_t bytes)
{
    ENTER_BLOCK(block, "fg_block_bind_device");
    fg_status s = bind_held(block, "fg_block_bind_device", name, device_ptr, bytes, false);
    fg_handle_release(block);
    return s;
}

/* A tensor of the file the block accepts without reading: a batch_norm's num_batches_tracked
 * and the like (fg_layer_ignored_info of any layer). */
static bool ignored_by_block(const fg_block *b, const char *name)
{
    for (int i = 0; i < b->ir.n_layers; i++) {
        int n = 0;
        fg_layer_ignored_count(b->layers[i], &n);
        for (int k = 0; k < n; k++) {
            const char *iname;
            int rank;
            int64_t dims[FG_MAX_DIMS];
            const char *dtype;
            if (fg_layer_ignored_info(b->layers[i], k, &iname, &rank, dims, &dtype) == FG_OK && !strcmp(iname, name))
                return true;
        }
    }
    return false;
}

static fg_status bind_safetensors_held(fg_block *b, const char *path, int allow_extra)
{
    if (!path)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_bind_safetensors: path is NULL");
    fg_tensor_file f;
    fg_error err;
    if (fg_safetensors_read(path, &f, &err) != 0)
        return fg_api_fail_error(FG_ERR_TENSOR_FILE, &err);
    fg_status s = FG_OK;
    /* everything checked first, so that a bad file binds nothing */
    for (int i = 0; i < b->n_params && s == FG_OK; i++) {
        const fg_param *p = block_param(b, i);
        const fg_tensor *t = fg_tensor_find(&f, p->name);
        bool same = t && t->rank == p->rank;
        for (int d = 0; same && d < p->rank; d++)
            same = t->dim[d] == p->dim[d];
        if (!t)
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: has no tensor '%s', which block %s needs (spec line %d)", path,
                            p->name, b->ir.name, p->first_line);
        else if (!t->data)
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: tensor '%s' is %s; fusegen reads parameters stored as F32, F16 or BF16",
                            path, p->name, t->dtype);
        else if (!same)
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: tensor '%s' does not have the shape block %s needs (spec line %d)",
                            path, p->name, b->ir.name, p->first_line);
    }
    for (int i = 0; i < f.n && s == FG_OK && !allow_extra; i++)
        if (find_block_param(b, f.tensors[i].name) < 0 && !ignored_by_block(b, f.tensors[i].name))
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: tensor '%s' is not a parameter of block %s (allow extra tensors to "
                                                "ignore it)",
                            path, f.tensors[i].name, b->ir.name);
    for (int i = 0; i < b->n_params && s == FG_OK; i++) {
        const fg_tensor *t = fg_tensor_find(&f, block_param(b, i)->name);
        s = bind_held(b, "fg_block_bind_safetensors", t->name, t->data, (size_t)t->count * sizeof(float), true);
    }
    fg_tensor_file_free(&f);
    return s;
}

FG_API fg_status fg_block_bind_safetensors(fg_block *block, const char *path, int allow_extra)
{
    ENTER_BLOCK(block, "fg_block_bind_safetensors");
    fg_status s = bind_safetensors_held(block, path, allow_extra);
    fg_handle_release(block);
    return s;
}

/* Each layer's kernels, in run order, as fg_layer_prepare_held loads them for `batch` (0: not
 * known). The block held. */
static fg_status prepare_layers(fg_block *block, int64_t batch)
{
    fg_status s = FG_OK;
    for (int i = 0; i < block->ir.n_layers && s == FG_OK; i++)
        s = fg_layer_prepare_held(block->layers[i], batch);
    return s;
}

FG_API fg_status fg_block_prepare(fg_block *block)
{
    ENTER_BLOCK(block, "fg_block_prepare");
    fg_status s = prepare_layers(block, 0);
    fg_handle_release(block);
    return s;
}

fg_status fg_tools_block_prepare(fg_block *block, int64_t batch)
{
    ENTER_BLOCK(block, "fg_tools_block_prepare");
    fg_status s = batch < 1 || batch > INT32_MAX
                      ? fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                                    "fg_tools_block_prepare: batch must be between 1 and %d (got %lld)", INT32_MAX,
                                    (long long)batch)
                      : prepare_layers(block, batch);
    fg_handle_release(block);
    return s;
}

fg_context *fg_block_context(const fg_block *block)
{
    return fg_handle_live(block, FG_HANDLE_BLOCK) ? block->ctx : NULL;
}

static uint64_t align256(uint64_t x)
{
    return (x + 255) & ~(uint64_t)255;
}

/* Where each intermediate tensor lies in the workspace (offsets[t], bytes), then the layers'
 * scratch (at *scratch, *scratch_bytes); returns the total or 0 with the error set. */
static fg_status layout_for(const fg_block *b, int64_t batch, uint64_t offsets[FG_MAX_BLOCK_TENSORS], uint64_t *scratch,
                            uint64_t *scratch_bytes, uint64_t *total)
{
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "block %s: batch must be between 1 and %d (got %lld)", b->ir.name,
                           INT32_MAX, (long long)batch);
    uint64_t at = 0;
    for (int i = 0; i < b->ir.n_layers; i++) {
        int t = b->ir.layer[i].out;
        offsets[t] = at;
        if (t != b->ir.output)
            at += align256((uint64_t)batch * (uint64_t)fg_shape_sample_count(&b->ir.tensors[t].shape) *
                           (uint64_t)fg_dtype_size(b->ir.dtype)); /* a tensor of the block: its dtype */
    }
    uint64_t most = 0;
    for (int i = 0; i < b->ir.n_layers; i++) {
        size_t need = 0;
        fg_status s = fg_layer_workspace_size(b->layers[i], batch, &need);
        if (s != FG_OK)
            return s;
        if (need > most)
            most = need;
    }
    *scratch = at;
    *scratch_bytes = most;
    *total = at + align256(most);
    return FG_OK;
}

FG_API fg_status fg_block_workspace_size(const fg_block *block, int64_t batch, size_t *bytes)
{
    ENTER_BLOCK(block, "fg_block_workspace_size");
    uint64_t offsets[FG_MAX_BLOCK_TENSORS], scratch, scratch_bytes, total = 0;
    fg_status s = bytes ? layout_for(block, batch, offsets, &scratch, &scratch_bytes, &total)
                        : fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_workspace_size: bytes is NULL");
    if (s == FG_OK)
        *bytes = (size_t)total;
    fg_handle_release(block);
    return s;
}

/* The layers in order on `stream`, with the block lock held. */
static fg_status run_layers(fg_block *b, const void *const *inputs, void *output, int64_t batch, CUdeviceptr ws,
                            const uint64_t *offsets, uint64_t scratch, uint64_t scratch_bytes, void *stream)
{
    CUdeviceptr tensors[FG_MAX_BLOCK_TENSORS];
    for (int t = 0; t < b->ir.n_inputs; t++) {
        if (!inputs[t])
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "block %s: input %d ('%s') is NULL", b->ir.name, t,
                               b->ir.tensors[t].name);
        tensors[t] = (CUdeviceptr)inputs[t];
    }
    for (int i = 0; i < b->ir.n_layers; i++) {
        int t = b->ir.layer[i].out;
        tensors[t] = t == b->ir.output ? (CUdeviceptr)output : ws + offsets[t];
    }
    fg_status s = FG_OK;
    for (int i = 0; i < b->ir.n_layers && s == FG_OK; i++) {
        fg_layer *layer = b->layers[i];
        /* the tensor operands: bindings to the tensors of this run (no bind is in flight: the
         * block lock is held, and the layers are the block's own) */
        pthread_rwlock_wrlock(&layer->bindings_lock);
        for (int p = 0; p < layer->ir.n_params; p++)
            if (layer->ir.params[p].batched) {
                layer->params[p].device = tensors[layer->ir.params[p].tensor];
                layer->params[p].bound = true;
            }
        pthread_rwlock_unlock(&layer->bindings_lock);
        s = fg_layer_run_workspace(layer, (const void *)tensors[b->ir.layer[i].from], (void *)tensors[b->ir.layer[i].out],
                                   batch, scratch_bytes ? (void *)(ws + scratch) : NULL, scratch_bytes, stream);
    }
    return s;
}

static fg_status run_held(fg_block *b, const void *const *inputs, void *output, int64_t batch, void *workspace,
                          size_t workspace_bytes, bool own, void *stream)
{
    if (!inputs || !output)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_run: inputs or output is NULL");
    if (!b->ctx->cu)
        return fg_api_fail(FG_ERR_NO_DEVICE, "fg_block_run: the context has no device (device -1)");
    uint64_t offsets[FG_MAX_BLOCK_TENSORS], scratch, scratch_bytes, total;
    fg_status s = layout_for(b, batch, offsets, &scratch, &scratch_bytes, &total);
    if (s != FG_OK)
        return s;
    pthread_mutex_lock(&b->lock);
    CUdeviceptr ws = (CUdeviceptr)workspace;
    if (own) {
        const fg_cuda *cu = b->ctx->cu;
        if ((s = fg_api_enter(b->ctx)) == FG_OK && total > b->workspace_bytes) {
            /* the old workspace may be in use by the previous run */
            CUresult r = cu->CtxSynchronize();
            if (r == CUDA_SUCCESS && b->workspace)
                r = cu->MemFree(b->workspace);
            b->workspace = 0;
            b->workspace_bytes = 0;
            if (r == CUDA_SUCCESS && (r = cu->MemAlloc(&b->workspace, total)) == CUDA_SUCCESS)
                b->workspace_bytes = total;
            if (r != CUDA_SUCCESS)
                s = fg_api_fail(FG_ERR_OUT_OF_MEMORY, "block %s: cannot allocate %llu bytes of workspace", b->ir.name,
                                (unsigned long long)total);
        }
        ws = b->workspace;
    } else if (total > workspace_bytes || (total > 0 && !workspace) || (uintptr_t)workspace % 256 != 0) {
        s = fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                        "fg_block_run_workspace: block %s needs %llu bytes of 256-byte aligned workspace for batch %lld, "
                        "got %zu (fg_block_workspace_size)",
                        b->ir.name, (unsigned long long)total, (long long)batch, workspace_bytes);
    }
    if (s == FG_OK)
        s = run_layers(b, inputs, output, batch, ws, offsets, scratch, scratch_bytes, stream);
    pthread_mutex_unlock(&b->lock);
    return s;
}

FG_API fg_status fg_block_run(fg_block *block, const void *const *inputs, void *output, int64_t batch, void *stream)
{
    ENTER_BLOCK(block, "fg_block_run");
    fg_status s = run_held(block, inputs, output, batch, NULL, 0, true, stream);
    fg_handle_release(block);
    return s;
}

FG_API fg_status fg_block_run_workspace(fg_block *block, const void *const *inputs, void *output, int64_t batch,
                                        void *workspace, size_t workspace_bytes, void *stream)
{
    ENTER_BLOCK(block, "fg_block_run_workspace");
    fg_status s = run_held(block, inputs, output, batch, workspace, workspace_bytes, false, stream);
    fg_handle_release(block);
    return s;
}

static fg_status run_cpu_held(fg_block *b, const float *const *inputs, float *output, int64_t batch)
{
    if (!inputs || !output)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_run_cpu: inputs or output is NULL");
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_run_cpu: batch must be between 1 and %d (got %lld)",
                           INT32_MAX, (long long)batch);
    for (int t = 0; t < b->ir.n_inputs; t++)
        if (!inputs[t])
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_run_cpu: input %d ('%s') is NULL", t,
                               b->ir.tensors[t].name);
    const float *params[FG_MAX_BLOCK_LAYERS][FG_MAX_PARAMS];
    const float *const *lists[FG_MAX_BLOCK_LAYERS];
    pthread_mutex_lock(&b->lock);
    fg_status s = FG_OK;
    for (int i = 0; i < b->ir.n_layers && s == FG_OK; i++) {
        const fg_layer *layer = b->layers[i];
        for (int p = 0; p < layer->ir.n_params && s == FG_OK; p++) {
            params[i][p] = layer->params[p].host;
            if (!layer->ir.params[p].batched && !layer->params[p].host)
                s = fg_api_fail(FG_ERR_UNBOUND,
                                "block %s: parameter '%s' is not bound in host memory (the CPU path needs "
                                "fg_block_bind_host or a safetensors file)",
                                b->ir.name, layer->ir.params[p].name);
        }
        lists[i] = params[i];
    }
    int64_t n_out = batch * fg_shape_sample_count(&b->ir.tensors[b->ir.output].shape);
    double *out = s == FG_OK ? malloc(sizeof(double) * (size_t)n_out) : NULL;
    if (s == FG_OK && !out)
        s = fg_api_fail(FG_ERR_OUT_OF_MEMORY, "fg_block_run_cpu: out of memory");
    fg_error err;
    if (s == FG_OK && fg_reference_run_block(&b->ir, batch, inputs, lists, out, &err) != 0)
        s = fg_api_fail_error(FG_ERR_OUT_OF_MEMORY, &err);
    pthread_mutex_unlock(&b->lock);
    /* the float64 result rounded once to the block's dtype (float, or bf16/fp16 held in a
     * float), as fg_layer_run_cpu rounds a layer's */
    for (int64_t i = 0; s == FG_OK && i < n_out; i++)
        output[i] = (float)fg_round_to_dtype(out[i], (int)b->ir.dtype);
    free(out);
    return s;
}

FG_API fg_status fg_block_run_cpu(fg_block *block, const float *const *inputs, float *output, int64_t batch)
{
    ENTER_BLOCK(block, "fg_block_run_cpu");
    fg_status s = run_cpu_held(block, inputs, output, batch);
    fg_handle_release(block);
    return s;
}

fg_status fg_tools_block_bind_random(fg_block *block, uint64_t seed)
{
    ENTER_BLOCK(block, "fg_tools_block_bind_random");
    fg_status s = FG_OK;
    /* each parameter from the layer that first reads it, as fg_tools_bind_random draws it */
    for (int i = 0; i < block->ir.n_layers && s == FG_OK; i++) {
        const fg_layer_ir *ir = &block->ir.layers[i];
        float *params[FG_MAX_PARAMS] = {0};
        for (int p = 0; p < ir->n_params && s == FG_OK; p++)
            if (!(params[p] = malloc(sizeof(float) * (size_t)ir->params[p].count)))
                s = fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory for the parameters");
        if (s == FG_OK)
            fg_random_params(ir, seed + (uint64_t)i, params);
        for (int q = 0; q < block->n_params && s == FG_OK; q++)
            if (block->params[q].layer == i) {
                const fg_param *p = block_param(block, q);
                s = bind_held(block, "fg_tools_block_bind_random", p->name, params[block->params[q].param],
                              sizeof(float) * (size_t)p->count, true);
            }
        for (int p = 0; p < ir->n_params; p++)
            free(params[p]);
    }
    fg_handle_release(block);
    return s;
}

fg_layer *fg_tools_block_layer(fg_block *block, int i)
{
    fg_api_clear_error();
    if (!fg_handle_live(block, FG_HANDLE_BLOCK) || i < 0 || i >= block->ir.n_layers) {
        fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_tools_block_layer: not a live block, or no layer %d", i);
        return NULL;
    }
    return block->layers[i];
}

double fg_tools_block_reference_work(const fg_block *block, int64_t batch)
{
    double work = 0;
    for (int i = 0; i < block->ir.n_layers; i++)
        work += fg_reference_work(&block->ir.layers[i], batch);
    return work;
}

bool fg_tools_block_stats_over_batch(const fg_block *block)
{
    for (int i = 0; i < block->ir.n_layers; i++)
        for (int a = 0; a < block->layers[i]->plan.n_accums; a++)
            if (block->layers[i]->plan.accums[a].over_batch)
                return true;
    return false;
}
