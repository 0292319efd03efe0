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
#include "graph_capture.h"
#include "handles.h"
#include "random_init.h"
#include "tools.h"
#include "safetensors.h"

#define FG_BLOCK_MAX_PARAMS (FG_MAX_PARAMS * 4)

/* What a block's captured graph bakes in, so that it is replayed only for a run that would
 * launch exactly what it holds: every tensor of the block (the inputs and output the caller
 * gives; the layer outputs in the workspace, at offsets that follow the batch; from these
 * run_layers points the tensor operands' bindings, which it sets without bumping a
 * generation), the workspace (the layers' scratch lies there), the batch (grids, offsets),
 * each layer's binding generation (every bind of a parameter bumps it, a folded batch norm's
 * recomputation and a wgmma conv's weight pack included), each layer's loaded kernels (the
 * module its first prepare loaded, after tuning chose its plan; it never changes after) and
 * each wgmma layer's packed weights (written outside any graph: at a bind, or at the prepare
 * that loaded the kernels; the address stays). Zero-filled before it is set, so that memcmp
 * compares it. */
typedef struct block_graph_key {
    int64_t batch;
    CUdeviceptr tensors[FG_MAX_BLOCK_TENSORS];
    CUdeviceptr workspace;
    unsigned generations[FG_MAX_BLOCK_LAYERS];
    CUmodule modules[FG_MAX_BLOCK_LAYERS];
    CUdeviceptr packed_w[FG_MAX_BLOCK_LAYERS];
} block_graph_key;

/* Runs on caller-owned workspace stop capturing after this many captures in a row (no
 * replay between them): fusegen.torch hands over a workspace and an output from torch's
 * allocator on every call, and a capture and instantiation costs far more than the launches
 * it would save. A block keeps BLOCK_GRAPH_SLOTS graphs (the least recently used one is
 * captured over): in a loop `y = block(x)` the old y is alive during the call, so two outputs
 * alternate, and each has its graph. A capture that fails where the plain launches work is
 * retried on later runs, up to CAPTURE_FAILURES_MAX in a row (another thread's synchronization
 * during the capture invalidates it, and that passes). */
enum { CALLER_CAPTURES_IN_A_ROW_MAX = 3, BLOCK_GRAPH_SLOTS = 2, CAPTURE_FAILURES_MAX = 3 };

struct fg_block {
    fg_context *ctx;
    fg_block_ir ir;
    fg_layer *layers[FG_MAX_BLOCK_LAYERS];
    /* every parameter once: (layer, index) of its first use */
    int n_params;
    struct {
        int layer, param;
    } params[FG_BLOCK_MAX_PARAMS];
    pthread_mutex_t lock; /* one run at a time: the block's workspace, its graph */
    CUdeviceptr workspace;
    size_t workspace_bytes;
    CUevent done;         /* recorded after each run on the block's workspace; a run on */
    CUstream last_stream; /* another stream waits for it (as a layer's own runs do) */
    /* The whole block's launches captured as one CUDA graph and replayed while its key
     * matches (one launch instead of one per pass and memset of every layer). */
    CUgraphExec graphs[BLOCK_GRAPH_SLOTS];
    block_graph_key graph_keys[BLOCK_GRAPH_SLOTS];
    unsigned long graph_used[BLOCK_GRAPH_SLOTS]; /* the run count at each slot's last use */
    CUstream capture_stream;
    bool graphs_off;        /* FUSEGEN_NO_GRAPHS, a cuDNN layer, or failed captures */
    int capture_failures;   /* captures failed in a row where the plain launches worked */
    bool caller_graphs_off; /* runs on caller-owned workspace: their key kept changing */
    int captures_in_a_row;  /* captures by runs on caller-owned workspace since the last replay */
    long captures, graph_runs, plain_runs; /* fg_tools_block_graph_counts */
};

#define ENTER_BLOCK(block, fn)                                                                                  \
    do {                                                                                                        \
        fg_api_clear_error();                                                                                   \
        if (!fg_handle_acquire(block, FG_HANDLE_BLOCK))                                                         \
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: not a live block (NULL or destroyed)", fn);         \
    } while (0)

static void free_block(fg_block *b)
{
    const fg_cuda *cu = b->ctx->cu;
    for (int i = 0; i < BLOCK_GRAPH_SLOTS; i++)
        if (cu && b->graphs[i]) /* before the layers unload the kernels they launch */
            cu->GraphExecDestroy(b->graphs[i]);
    for (int i = 0; i < b->ir.n_layers; i++)
        if (b->layers[i])
            fg_layer_destroy(b->layers[i]);
    if (cu && b->capture_stream)
        cu->StreamDestroy(b->capture_stream);
    if (cu && b->done)
        cu->EventDestroy(b->done);
    if (b->workspace && cu)
        cu->MemFree(b->workspace);
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
    /* for the context's target, as its layers are planned (fg_layer_create_from_ir) */
    fg_plan_options popts = ctx->plan_options;
    fg_plan_options_set_arch(&popts, ctx->arch);
    int rc = is_file ? fg_block_spec_load_file_for(source, &popts, &b->ir, &err)
                     : fg_block_spec_load_string_for(name ? name : "<string>", source, len, &popts, &b->ir, &err);
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
            if (fg_block_param_first_use(&b->ir, i, p) && b->n_params < FG_BLOCK_MAX_PARAMS) {
                b->params[b->n_params].layer = i;
                b->params[b->n_params++].param = p;
            }
        }
    }
    /* a cuDNN call is not captured reliably (its algorithm search runs at the first call);
     * has_cudnn is the same in every plan a layer may adopt */
    b->graphs_off = ctx->env.no_graphs;
    for (int i = 0; i < b->ir.n_layers; i++)
        b->graphs_off = b->graphs_off || b->layers[i]->has_cudnn;
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
    if ((block->workspace || block->graphs[0] || block->done) && block->ctx->cu) {
        /* the last run may still read the workspace and the parameters, or run the graph */
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
    /* nor under one still on the GPU: the bind frees the parameter's old device copy, and
     * the layers' own wait (their `done` event) knows nothing of the block's runs (runs on
     * caller-owned workspace record no event: the caller orders them) */
    if (b->done && (s = fg_api_enter(b->ctx)) == FG_OK && b->ctx->cu->EventSynchronize(b->done) != CUDA_SUCCESS)
        s = fg_api_fail(FG_ERR_CUDA, "%s: the block's last run failed on the GPU", fn);
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

/* The block's workspace for one batch: each intermediate tensor (offsets[t] bytes in), the
 * statistics each layer gathers for the next one (stats[i]: of layer i's output; 0 where it
 * gathers none), then the scratch the layers share (every layer's own workspace). */
typedef struct block_layout {
    uint64_t offsets[FG_MAX_BLOCK_TENSORS];
    uint64_t stats[FG_MAX_BLOCK_LAYERS];
    uint64_t scratch, scratch_bytes, total;
} block_layout;

/* Fills *l for `batch`, or fails with the error set. */
static fg_status layout_for(const fg_block *b, int64_t batch, block_layout *l)
{
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "block %s: batch must be between 1 and %d (got %lld)", b->ir.name,
                           INT32_MAX, (long long)batch);
    memset(l, 0, sizeof *l);
    uint64_t at = 0;
    for (int i = 0; i < b->ir.n_layers; i++) {
        int t = b->ir.layer[i].out;
        l->offsets[t] = at;
        if (t != b->ir.output)
            at += align256((uint64_t)batch * (uint64_t)fg_shape_sample_count(&b->ir.tensors[t].shape) *
                           (uint64_t)fg_dtype_size(b->ir.dtype)); /* a tensor of the block: its dtype */
    }
    /* outside the scratch: the writer's passes fill them, the reader's read them, other layers
     * run in between */
    for (int i = 0; i < b->ir.n_layers; i++) {
        uint64_t bytes = (uint64_t)batch * (uint64_t)fg_block_stats_sample_bytes(&b->ir, i);
        if (bytes) {
            l->stats[i] = at;
            at += align256(bytes);
        }
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
    l->scratch = at;
    l->scratch_bytes = most;
    l->total = at + align256(most);
    return FG_OK;
}

FG_API fg_status fg_block_workspace_size(const fg_block *block, int64_t batch, size_t *bytes)
{
    ENTER_BLOCK(block, "fg_block_workspace_size");
    block_layout l;
    fg_status s = bytes ? layout_for(block, batch, &l)
                        : fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_workspace_size: bytes is NULL");
    if (s == FG_OK)
        *bytes = (size_t)l.total;
    fg_handle_release(block);
    return s;
}

/* One run's memory: every tensor of the block (the inputs, the layer outputs: the block's
 * output or a slice of the workspace) and the layers' scratch. */
typedef struct block_run {
    int64_t batch;
    CUdeviceptr tensors[FG_MAX_BLOCK_TENSORS];
    CUdeviceptr workspace, scratch; /* scratch: 0 when no layer needs any */
    uint64_t scratch_bytes;
    CUdeviceptr stats[FG_MAX_BLOCK_LAYERS]; /* block_layout.stats in this workspace (0: none) */
    fg_status status; /* of run_layers, when a capture enqueues it */
} block_run;

static fg_status place_tensors(const fg_block *b, const void *const *inputs, void *output, int64_t batch,
                               CUdeviceptr ws, const block_layout *l, block_run *run)
{
    memset(run, 0, sizeof *run);
    for (int t = 0; t < b->ir.n_inputs; t++) {
        if (!inputs[t])
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "block %s: input %d ('%s') is NULL", b->ir.name, t,
                               b->ir.tensors[t].name);
        run->tensors[t] = (CUdeviceptr)inputs[t];
    }
    for (int i = 0; i < b->ir.n_layers; i++) {
        int t = b->ir.layer[i].out;
        run->tensors[t] = t == b->ir.output ? (CUdeviceptr)output : ws + l->offsets[t];
        run->stats[i] = b->ir.layers[i].exports_stats ? ws + l->stats[i] : 0;
    }
    run->batch = batch;
    run->workspace = ws;
    run->scratch = l->scratch_bytes ? ws + l->scratch : 0;
    run->scratch_bytes = l->scratch_bytes;
    return FG_OK;
}

/* The layers in order on `stream`, each pass and memset launched, with the block lock held. */
static fg_status run_layers(fg_block *b, const block_run *run, CUstream stream)
{
    fg_status s = FG_OK;
    for (int i = 0; i < b->ir.n_layers && s == FG_OK; i++) {
        fg_layer *layer = b->layers[i];
        /* the tensor operands: bindings to the tensors of this run (no bind is in flight: the
         * block lock is held, and the layers are the block's own). Set in place, without
         * bumping the layer's binding generation: the block's graph key holds the tensors. */
        pthread_rwlock_wrlock(&layer->bindings_lock);
        for (int p = 0; p < layer->ir.n_params; p++)
            if (layer->ir.params[p].batched) {
                layer->params[p].device = run->tensors[layer->ir.params[p].tensor];
                layer->params[p].bound = true;
            }
        pthread_rwlock_unlock(&layer->bindings_lock);
        /* the statistics it reads from the layer writing its input, those it gathers for the next */
        CUdeviceptr links[FG_LINKS] = {0};
        const int from = fg_block_stats_from(&b->ir, i);
        links[FG_LINK_GIVEN - 1] = from >= 0 ? run->stats[from] : 0;
        links[FG_LINK_EXPORTED - 1] = run->stats[i];
        s = fg_layer_run_linked(layer, (const void *)run->tensors[b->ir.layer[i].from],
                                (void *)run->tensors[b->ir.layer[i].out], run->batch, (void *)run->scratch,
                                run->scratch_bytes, links, stream);
    }
    return s;
}

/* The key of a graph of this run into *key; false while a layer is not prepared yet or its
 * packed weights are stale. A first prepare may time two plans (runtime/tuning.h) and swaps
 * the layer's plan, launch table and kernels: that run launches each pass, as before graphs,
 * and the next one captures, when every layer's kernels are final. */
static bool graph_key_for(fg_block *b, const block_run *run, block_graph_key *key)
{
    memset(key, 0, sizeof *key);
    key->batch = run->batch;
    memcpy(key->tensors, run->tensors, sizeof key->tensors);
    key->workspace = run->workspace;
    bool prepared = true;
    pthread_mutex_lock(&b->ctx->lock); /* a prepare in another thread sets the module under it */
    for (int i = 0; i < b->ir.n_layers && prepared; i++) {
        const fg_layer *layer = b->layers[i];
        key->modules[i] = layer->module;
        key->packed_w[i] = layer->packed_w;
        /* a stale image (a repack that failed part way) is packed again by a plain run; a
         * graph's replay would read it as it is */
        prepared = key->modules[i] != NULL && (layer->launch.packed_w < 0 || layer->packed_current);
    }
    pthread_mutex_unlock(&b->ctx->lock);
    /* binds of the block's layers go through bind_held, under the block lock held here */
    for (int i = 0; i < b->ir.n_layers; i++)
        key->generations[i] = b->layers[i]->binding_generation;
    return prepared;
}

typedef struct block_capture {
    fg_block *block;
    block_run *run;
} block_capture;

static int enqueue_block_launches(void *arg, CUstream stream)
{
    block_capture *c = arg;
    c->run->status = run_layers(c->block, c->run, stream);
    return c->run->status == FG_OK ? 0 : -1;
}

/* The run as one graph launch, captured first when the graph was made for another key; false
 * when it is to launch each pass instead (graphs off, a layer not prepared, a capture of the
 * caller's in progress, too many captures in a row on caller-owned workspace, a failed
 * capture: *capture_failed). Block lock held. */
static bool run_as_graph(fg_block *b, block_run *run, bool own, bool capturing, CUstream stream, bool *capture_failed,
                         fg_status *s)
{
    const fg_cuda *cu = b->ctx->cu;
    block_graph_key key;
    *capture_failed = false;
    if (b->graphs_off || (!own && b->caller_graphs_off) || capturing ||
        !graph_key_for(b, run, &key))
        return false;
    /* the slot whose graph was made for this key, else the empty or least recently used one */
    int slot = -1, victim = 0;
    for (int i = 0; i < BLOCK_GRAPH_SLOTS && slot < 0; i++) {
        if (b->graphs[i] && memcmp(&key, &b->graph_keys[i], sizeof key) == 0)
            slot = i;
        else if (!b->graphs[i] || (b->graphs[victim] && b->graph_used[i] < b->graph_used[victim]))
            victim = i;
    }
    if (slot < 0) {
        if (!own && b->captures_in_a_row >= CALLER_CAPTURES_IN_A_ROW_MAX) {
            b->caller_graphs_off = true;
            fg_context_log(b->ctx, FG_LOG_INFO,
                           "block %s: its pointers changed on %d runs in a row on caller-owned workspace: these runs "
                           "now launch each pass (capturing each time would cost more than it saves)",
                           b->ir.name, b->captures_in_a_row);
            return false;
        }
        block_capture capture = {.block = b, .run = run};
        if (fg_graph_capture(cu, &b->capture_stream, enqueue_block_launches, &capture, &b->graphs[victim]) != 0) {
            *capture_failed = true;
            return false;
        }
        slot = victim;
        memcpy(&b->graph_keys[slot], &key, sizeof key);
        b->captures++;
        b->capture_failures = 0;
        if (!own) /* the block's own workspace and buffers the caller keeps are stable */
            b->captures_in_a_row++;
    } else {
        b->captures_in_a_row = 0;
    }
    b->graph_used[slot] = (unsigned long)(b->captures + b->graph_runs + b->plain_runs) + 1;
    CUresult r = cu->GraphLaunch(b->graphs[slot], stream);
    if (r != CUDA_SUCCESS) {
        fg_error err;
        fg_cuda_fail(&err, r, "launching the block's CUDA graph");
        *s = fg_api_fail_error(FG_ERR_CUDA, &err);
    } else {
        b->graph_runs++;
        *s = FG_OK;
    }
    return true;
}

/* The run, as a graph or pass by pass, block lock held; `capturing`: the caller is capturing
 * `stream` (fg_stream_capturing: the run enqueues plain launches, which become nodes of the
 * caller's graph). */
static fg_status run_block(fg_block *b, block_run *run, bool own, bool capturing, CUstream stream)
{
    bool capture_failed;
    fg_status s;
    if (run_as_graph(b, run, own, capturing, stream, &capture_failed, &s))
        return s;
    s = run_layers(b, run, stream);
    if (s == FG_OK)
        b->plain_runs++;
    /* A capture that failed where the plain launches work is the capture's failure (its
     * message is not this run's error): retried on later runs, and after CAPTURE_FAILURES_MAX
     * in a row the block launches each pass from then on. Where they fail too, the run was at
     * fault (an unbound parameter...): its error is returned and a later run captures. */
    if (capture_failed && s == FG_OK) {
        fg_api_clear_error();
        if (++b->capture_failures >= CAPTURE_FAILURES_MAX) {
            b->graphs_off = true;
            fg_context_log(b->ctx, FG_LOG_INFO,
                           "block %s: its runs could not be captured as a CUDA graph %d times in a row: they launch "
                           "each pass",
                           b->ir.name, b->capture_failures);
        }
    }
    return s;
}

/* Runs on the block's workspace share it: a run queued on another stream than the last one
 * waits for the last one on the GPU (api_layer.c's run_locked does the same for a layer). */
static fg_status order_after_last_run(fg_block *b, CUstream stream)
{
    if (!b->done || stream == b->last_stream)
        return FG_OK;
    CUresult r = b->ctx->cu->StreamWaitEvent(stream, b->done, 0);
    if (r == CUDA_SUCCESS)
        return FG_OK;
    fg_error err;
    fg_cuda_fail(&err, r, "ordering this run after the block's previous one (cuStreamWaitEvent)");
    return fg_api_fail_error(FG_ERR_CUDA, &err);
}

static fg_status record_run_end(fg_block *b, CUstream stream)
{
    const fg_cuda *cu = b->ctx->cu;
    CUresult r = b->done ? CUDA_SUCCESS : cu->EventCreate(&b->done, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS)
        r = cu->EventRecord(b->done, stream);
    if (r != CUDA_SUCCESS) {
        fg_error err;
        fg_cuda_fail(&err, r, "recording the end of the block's run (cuEventRecord)");
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    b->last_stream = stream;
    return FG_OK;
}

static fg_status run_held(fg_block *b, const void *const *inputs, void *output, int64_t batch, void *workspace,
                          size_t workspace_bytes, bool own, void *stream)
{
    if (!inputs || !output)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_block_run: inputs or output is NULL");
    if (!b->ctx->cu)
        return fg_api_fail(FG_ERR_NO_DEVICE, "fg_block_run: the context has no device (device -1)");
    block_layout l;
    fg_status s = layout_for(b, batch, &l);
    if (s != FG_OK)
        return s;
    const uint64_t total = l.total;
    pthread_mutex_lock(&b->lock);
    CUdeviceptr ws = (CUdeviceptr)workspace;
    if (own) {
        const fg_cuda *cu = b->ctx->cu;
        if ((s = fg_api_enter(b->ctx)) == FG_OK && total > b->workspace_bytes) {
            /* the old workspace may be in use by the previous run */
            CUresult r = cu->CtxSynchronize();
            if (r == CUDA_SUCCESS && b->workspace)
                r = cu->MemFree(b->workspace);
            if (r == CUDA_SUCCESS) { /* else the old workspace stays the block's (freed with it) */
                b->workspace = 0;
                b->workspace_bytes = 0;
            }
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
    } else {
        s = fg_api_enter(b->ctx);
    }
    block_run run;
    if (s == FG_OK)
        s = place_tensors(b, inputs, output, batch, ws, &l, &run);
    /* Inside a capture of the caller's the run's launches become nodes of the caller's graph:
     * an event recorded there could not be waited on outside that graph (a later bind's wait
     * would fail), and the caller's graph orders its own replays */
    const bool capturing = s == FG_OK && fg_stream_capturing(b->ctx->cu, (CUstream)stream);
    const bool ordered = own && !capturing;
    if (s == FG_OK && ordered)
        s = order_after_last_run(b, (CUstream)stream);
    if (s == FG_OK)
        s = run_block(b, &run, own, capturing, (CUstream)stream);
    if (s == FG_OK && ordered)
        s = record_run_end(b, (CUstream)stream);
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

fg_status fg_tools_block_graph_counts(fg_block *block, fg_tools_block_graphs *out)
{
    ENTER_BLOCK(block, "fg_tools_block_graph_counts");
    fg_status s = out ? FG_OK : fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_tools_block_graph_counts: out is NULL");
    if (s == FG_OK) {
        pthread_mutex_lock(&block->lock);
        *out = (fg_tools_block_graphs){.captures = block->captures,
                                       .graph_runs = block->graph_runs,
                                       .plain_runs = block->plain_runs,
                                       .off = block->graphs_off,
                                       .caller_off = block->caller_graphs_off};
        pthread_mutex_unlock(&block->lock);
    }
    fg_handle_release(block);
    return s;
}
