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
#include "handles.h"
#include "kernel_build.h"
#include "launcher.h"
#include "random_init.h"
#include "safetensors.h"
#include "../common/clock.h"

#define CHECK_LAYER(layer, fn)                                                                                 \
    do {                                                                                                       \
        fg_api_clear_error();                                                                                  \
        if (!fg_handle_live(layer, FG_HANDLE_LAYER))                                                           \
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: not a live layer (NULL or destroyed)", fn);        \
    } while (0)

static fg_status load(fg_context *ctx, const char *name, const char *source, size_t len, bool is_file,
                      fg_layer **out)
{
    fg_api_clear_error();
    if (!out)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_load: out is NULL");
    *out = NULL;
    if (!fg_handle_live(ctx, FG_HANDLE_CONTEXT))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_load: not a live context (NULL or destroyed)");
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
    /* the plan depends on the architecture (clusters need sm_90) */
    fg_plan_options popts = {.force_strategy = -1, .sm = fg_arch_sm(ctx->arch)};
    if (fg_plan_layer(&layer->ir, &popts, &layer->plan, &err) != 0) {
        free(layer);
        return fg_api_fail_error(FG_ERR_SPEC, &err);
    }
    const char *no_graphs = getenv("FUSEGEN_NO_GRAPHS");
    layer->graphs_off = (no_graphs && *no_graphs && strcmp(no_graphs, "0") != 0) || layer->plan.n_passes < 2;
    for (int i = 0; i < layer->plan.n_passes; i++)
        if (layer->plan.passes[i].kind == FG_PASS_CUDNN)
            layer->graphs_off = true; /* cuDNN's algorithm search cannot run inside a capture */
    pthread_mutex_init(&layer->lock, NULL);
    if (fg_handle_add(layer, FG_HANDLE_LAYER) != 0) {
        pthread_mutex_destroy(&layer->lock);
        free(layer);
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *out = layer;
    return FG_OK;
}

FG_API fg_status fg_layer_load_file(fg_context *ctx, const char *path, fg_layer **out)
{
    return load(ctx, NULL, path, 0, true, out);
}

FG_API fg_status fg_layer_load_string(fg_context *ctx, const char *name, const char *source, fg_layer **out)
{
    return load(ctx, name, source, source ? strlen(source) : 0, false, out);
}

static void release_binding(fg_layer *layer, int i)
{
    fg_param_binding *b = &layer->params[i];
    if (b->owned && layer->ctx->cu)
        layer->ctx->cu->MemFree(b->owned);
    free(b->host);
    memset(b, 0, sizeof *b);
}

FG_API fg_status fg_layer_destroy(fg_layer *layer)
{
    fg_api_clear_error();
    if (!fg_handle_remove(layer, FG_HANDLE_LAYER))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_destroy: not a live layer (NULL or destroyed)");
    const fg_cuda *cu = layer->ctx->cu;
    if (cu)
        cu->CtxSetCurrent(layer->ctx->cuctx);
    for (int i = 0; i < layer->ir.n_params; i++)
        release_binding(layer, i);
    if (cu && layer->graph)
        cu->GraphExecDestroy(layer->graph);
    if (cu && layer->capture_stream)
        cu->StreamDestroy(layer->capture_stream);
    if (cu && layer->done)
        cu->EventDestroy(layer->done);
    if (cu && layer->workspace)
        cu->MemFree(layer->workspace);
    if (cu && layer->module)
        cu->ModuleUnload(layer->module);
    fg_cudnn_conv_destroy(layer->cudnn);
    pthread_mutex_destroy(&layer->lock);
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

FG_API fg_status fg_layer_input_shape(const fg_layer *layer, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS])
{
    CHECK_LAYER(layer, "fg_layer_input_shape");
    return shape_for(&layer->ir.input, batch, rank, dims, "fg_layer_input_shape");
}

FG_API fg_status fg_layer_output_shape(const fg_layer *layer, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS])
{
    CHECK_LAYER(layer, "fg_layer_output_shape");
    return shape_for(&layer->ir.ops[layer->ir.n_ops - 1].out, batch, rank, dims, "fg_layer_output_shape");
}

FG_API fg_status fg_layer_param_count(const fg_layer *layer, int *count)
{
    CHECK_LAYER(layer, "fg_layer_param_count");
    if (!count)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_param_count: count is NULL");
    *count = layer->ir.n_params;
    return FG_OK;
}

FG_API fg_status fg_layer_param_info(const fg_layer *layer, int index, const char **name, int *rank,
                                     int64_t dims[FG_MAX_DIMS])
{
    CHECK_LAYER(layer, "fg_layer_param_info");
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

FG_API fg_status fg_layer_bind_device(fg_layer *layer, const char *name, const void *device_ptr, size_t bytes)
{
    CHECK_LAYER(layer, "fg_layer_bind_device");
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
    release_binding(layer, i);
    layer->params[i].bound = true;
    layer->params[i].device = (CUdeviceptr)device_ptr;
    layer->binding_generation++;
    return FG_OK;
}

FG_API fg_status fg_layer_bind_host(fg_layer *layer, const char *name, const float *data, size_t bytes)
{
    CHECK_LAYER(layer, "fg_layer_bind_host");
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
    release_binding(layer, i);
    fg_param_binding *b = &layer->params[i];
    b->bound = true;
    b->host = copy;
    b->device = dev;
    b->owned = dev;
    layer->binding_generation++;
    return FG_OK;
}

fg_status fg_layer_bind_random(fg_layer *layer, uint64_t seed)
{
    const fg_layer_ir *ir = &layer->ir;
    float *params[FG_MAX_PARAMS] = {0};
    fg_status s = FG_OK;
    for (int i = 0; i < ir->n_params && s == FG_OK; i++)
        if (!(params[i] = malloc(sizeof(float) * (size_t)ir->params[i].count)))
            s = fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory for the parameters");
    if (s == FG_OK)
        fg_random_params(ir, seed, params);
    for (int i = 0; i < ir->n_params && s == FG_OK; i++)
        s = fg_layer_bind_host(layer, ir->params[i].name, params[i], sizeof(float) * (size_t)ir->params[i].count);
    for (int i = 0; i < ir->n_params; i++)
        free(params[i]);
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

FG_API fg_status fg_layer_bind_safetensors(fg_layer *layer, const char *path, int allow_extra)
{
    CHECK_LAYER(layer, "fg_layer_bind_safetensors");
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
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: tensor '%s' is %s; fusegen needs F32", path, p->name, t->dtype);
        } else if (!shapes_match(p, t)) {
            shape_text(p->rank, p->dim, a, sizeof a);
            shape_text(t->rank, t->dim, b, sizeof b);
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: tensor '%s' has shape %s but layer %s needs %s", path, p->name, b,
                            layer->ir.name, a);
        }
    }
    for (int i = 0; i < f.n && s == FG_OK && !allow_extra; i++) {
        const char *name = f.tensors[i].name;
        const char *suffix = strrchr(name, '.');
        /* BatchNorm's step counter is state, not a parameter of the forward pass */
        if (suffix && strcmp(suffix, ".num_batches_tracked") == 0)
            continue;
        if (find_param(layer, name) < 0)
            s = fg_api_fail(FG_ERR_TENSOR_FILE, "%s: tensor '%s' is not a parameter of layer %s (pass allow_extra to "
                                                "ignore tensors the spec does not use)",
                            path, name, layer->ir.name);
    }
    for (int i = 0; i < layer->ir.n_params && s == FG_OK; i++) {
        const fg_tensor *t = fg_tensor_find(&f, layer->ir.params[i].name);
        s = fg_layer_bind_host(layer, t->name, t->data, t->count * sizeof(float));
    }
    fg_tensor_file_free(&f);
    return s;
}

/* Loads the layer's kernels (from the caches, or compiled now). Context lock held. */
static fg_status prepare_locked(fg_layer *layer)
{
    if (layer->module)
        return FG_OK;
    fg_context *ctx = layer->ctx;
    double t0 = fg_seconds_now();
    fg_error err;
    fg_built built;
    if (fg_build_layer(&ctx->cache, NULL, &layer->ir, &layer->plan, ctx->arch, &built, &err) != 0)
        return fg_api_fail_error(FG_ERR_COMPILE, &err);
    if (ctx->verbose)
        fprintf(stderr, "fusegen: %s for %s: %s%s\n", layer->ir.name, ctx->arch,
                built.from_cache ? (built.shipped ? "from the shipped cache" : "from the cache") : "compiled",
                !built.from_cache && !built.stored ? " (not stored)" : "");
    if (!built.from_cache && !built.stored)
        fprintf(stderr, "fusegen: warning: kernels for %s compiled but not cached: %s\n", layer->ir.name,
                built.store_error);
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
        const fg_pass *ps = &layer->plan.passes[i];
        if (ps->kind == FG_PASS_CUDNN) {
            if (!layer->cudnn && fg_cudnn_conv_create(&layer->ir.ops[0], true, &layer->cudnn, &err) != 0) {
                cu->ModuleUnload(layer->module);
                layer->module = NULL;
                return fg_api_fail_error(FG_ERR_NO_DEVICE, &err);
            }
            continue;
        }
        r = cu->ModuleGetFunction(&layer->functions[i], layer->module, ps->kernel);
        if (r == CUDA_SUCCESS && ps->launch.smem_bytes > 48 * 1024)
            r = cu->FuncSetAttribute(layer->functions[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     ps->launch.smem_bytes);
        if (r != CUDA_SUCCESS) {
            cu->ModuleUnload(layer->module);
            layer->module = NULL;
            fg_cuda_fail(&err, r, ps->kernel);
            return fg_api_fail_error(FG_ERR_CUDA, &err);
        }
    }
    layer->from_cache = built.from_cache;
    double t_end = fg_seconds_now();
    layer->prepare_seconds.total = t_end - t0;
    layer->prepare_seconds.render = built.rendered ? built.render_seconds : -1;
    layer->prepare_seconds.build = t_built - t0 - (built.rendered ? built.render_seconds : 0);
    layer->prepare_seconds.load = t_end - t_built;
    return FG_OK;
}

void fg_layer_describe_prepare(const fg_layer *layer, char *buf, size_t cap)
{
    char rendering[48] = "found by the plan alias, not rendered";
    if (layer->prepare_seconds.render >= 0)
        snprintf(rendering, sizeof rendering, "rendering %.1f", layer->prepare_seconds.render * 1e3);
    snprintf(buf, cap, "kernels %s in %.1f ms (%s, %s %.1f, module load %.1f)",
             layer->from_cache ? "loaded from the cache" : "compiled", layer->prepare_seconds.total * 1e3, rendering,
             layer->from_cache ? "cache lookup" : "compile", layer->prepare_seconds.build * 1e3,
             layer->prepare_seconds.load * 1e3);
}

FG_API fg_status fg_layer_prepare(fg_layer *layer)
{
    CHECK_LAYER(layer, "fg_layer_prepare");
    fg_status s = fg_api_enter(layer->ctx);
    if (s != FG_OK)
        return s;
    pthread_mutex_lock(&layer->ctx->lock);
    s = prepare_locked(layer);
    pthread_mutex_unlock(&layer->ctx->lock);
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
    return FG_OK;
}

/* Whether the captured graph was made for exactly these pointers, batch and bindings. */
static bool graph_matches(const fg_layer *layer, const fg_launch_memory *mem, int64_t batch)
{
    return layer->graph && layer->graph_batch == batch && layer->graph_input == mem->input &&
           layer->graph_output == mem->output && layer->graph_workspace == mem->workspace &&
           layer->graph_generation == layer->binding_generation;
}

/* Captures the plan's launches (and the memsets that clear its statistics) into a CUDA graph
 * on a private stream; the caller's stream then runs it with one launch. */
static int capture_graph(fg_layer *layer, const fg_launch_memory *mem, int64_t batch)
{
    const fg_cuda *cu = layer->ctx->cu;
    fg_error err;
    if (layer->graph) {
        cu->GraphExecDestroy(layer->graph);
        layer->graph = NULL;
    }
    if (!layer->capture_stream && cu->StreamCreate(&layer->capture_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return -1;
    if (cu->StreamBeginCapture(layer->capture_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS)
        return -1;
    int rc = fg_launch_plan(cu, &layer->plan, layer->functions, mem, batch, layer->capture_stream, &err);
    CUgraph graph = NULL;
    CUresult r = cu->StreamEndCapture(layer->capture_stream, &graph);
    if (rc != 0 || r != CUDA_SUCCESS || !graph) {
        if (graph)
            cu->GraphDestroy(graph);
        return -1;
    }
    r = cu->GraphInstantiate(&layer->graph, graph, 0);
    cu->GraphDestroy(graph);
    if (r != CUDA_SUCCESS) {
        layer->graph = NULL;
        return -1;
    }
    layer->graph_batch = batch;
    layer->graph_input = mem->input;
    layer->graph_output = mem->output;
    layer->graph_workspace = mem->workspace;
    layer->graph_generation = layer->binding_generation;
    return 0;
}

static fg_status run_locked(fg_layer *layer, const void *input, void *output, int64_t batch, CUstream stream)
{
    const fg_cuda *cu = layer->ctx->cu;
    fg_error err;
    fg_launch_memory mem;
    memset(&mem, 0, sizeof mem);
    if (fg_plan_workspace(&layer->plan, batch, &mem.layout, &err) != 0)
        return fg_api_fail_error(FG_ERR_INVALID_ARGUMENT, &err);
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
    mem.cudnn = layer->cudnn;
    mem.conv = &layer->ir.ops[0];
    for (int i = 0; i < layer->ir.n_params; i++)
        mem.params[i] = layer->params[i].device;
    if (!layer->graphs_off && !graph_matches(layer, &mem, batch) && capture_graph(layer, &mem, batch) != 0)
        layer->graphs_off = true; /* a capture that fails is not retried: plain launches work */
    if (!layer->graphs_off && layer->graph) {
        CUresult g = cu->GraphLaunch(layer->graph, stream);
        if (g != CUDA_SUCCESS) {
            fg_cuda_fail(&err, g, "launching the layer's CUDA graph");
            return fg_api_fail_error(FG_ERR_CUDA, &err);
        }
    } else if (fg_launch_plan(cu, &layer->plan, layer->functions, &mem, batch, stream, &err) != 0) {
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

/* The checks every GPU run starts with: its pointers and batch. */
static fg_status check_run_args(const char *fn, const void *input, const void *output, int64_t batch)
{
    if (!input || !output)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: input or output is NULL", fn);
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: batch must be between 1 and %d (got %lld)", fn, INT32_MAX,
                           (long long)batch);
    return FG_OK;
}

/* What every GPU run needs before launching: the context current, every parameter bound,
 * the kernels prepared. */
static fg_status enter_bound_prepared(fg_layer *layer)
{
    fg_status s = fg_api_enter(layer->ctx);
    if (s != FG_OK)
        return s;
    if ((s = check_bound(layer, false)) != FG_OK)
        return s;
    pthread_mutex_lock(&layer->ctx->lock);
    s = prepare_locked(layer);
    pthread_mutex_unlock(&layer->ctx->lock);
    return s;
}

FG_API fg_status fg_layer_run(fg_layer *layer, const void *input, void *output, int64_t batch, void *stream)
{
    CHECK_LAYER(layer, "fg_layer_run");
    fg_status s = check_run_args("fg_layer_run", input, output, batch);
    if (s != FG_OK || (s = enter_bound_prepared(layer)) != FG_OK)
        return s;
    pthread_mutex_lock(&layer->lock);
    s = run_locked(layer, input, output, batch, (CUstream)stream);
    pthread_mutex_unlock(&layer->lock);
    return s;
}

FG_API fg_status fg_layer_workspace_size(const fg_layer *layer, int64_t batch, size_t *bytes)
{
    CHECK_LAYER(layer, "fg_layer_workspace_size");
    if (!bytes)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_workspace_size: bytes is NULL");
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_workspace_size: batch must be between 1 and %d (got %lld)",
                           INT32_MAX, (long long)batch);
    fg_workspace_layout layout;
    fg_error err;
    if (fg_plan_workspace(&layer->plan, batch, &layout, &err) != 0)
        return fg_api_fail_error(FG_ERR_INVALID_ARGUMENT, &err);
    *bytes = (size_t)layout.total; /* size_t is 64-bit on every target (Linux x86-64, aarch64) */
    return FG_OK;
}

/* A run on caller-owned workspace: no allocation, no event, no captured graph of the layer's
 * own (each pass is launched on `stream`), so it works inside a capture of the caller's, and
 * runs on different streams with different workspaces may overlap. */
FG_API fg_status fg_layer_run_workspace(fg_layer *layer, const void *input, void *output, int64_t batch,
                                        void *workspace, size_t workspace_bytes, void *stream)
{
    CHECK_LAYER(layer, "fg_layer_run_workspace");
    fg_status s = check_run_args("fg_layer_run_workspace", input, output, batch);
    if (s != FG_OK)
        return s;
    for (int i = 0; i < layer->plan.n_passes; i++)
        if (layer->plan.passes[i].kind == FG_PASS_CUDNN)
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                               "fg_layer_run_workspace: layer %s runs its conv in cuDNN (precision = \"tf32\"), whose "
                               "workspace is the layer's own: use fg_layer_run",
                               layer->ir.name);
    fg_workspace_layout layout;
    fg_error err;
    if (fg_plan_workspace(&layer->plan, batch, &layout, &err) != 0)
        return fg_api_fail_error(FG_ERR_INVALID_ARGUMENT, &err);
    if (layout.total > workspace_bytes || (layout.total > 0 && !workspace))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT,
                           "fg_layer_run_workspace: layer %s needs %llu bytes of workspace for batch %lld, got %zu%s "
                           "(fg_layer_workspace_size)",
                           layer->ir.name, (unsigned long long)layout.total, (long long)batch, workspace_bytes,
                           workspace ? "" : " at NULL");
    if ((uintptr_t)workspace % 256 != 0)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_run_workspace: the workspace must be 256-byte aligned");
    if ((s = enter_bound_prepared(layer)) != FG_OK)
        return s;
    fg_launch_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.layout = layout;
    mem.input = (CUdeviceptr)input;
    mem.output = (CUdeviceptr)output;
    mem.workspace = (CUdeviceptr)workspace;
    mem.conv = &layer->ir.ops[0];
    for (int i = 0; i < layer->ir.n_params; i++)
        mem.params[i] = layer->params[i].device;
    if (fg_launch_plan(layer->ctx->cu, &layer->plan, layer->functions, &mem, batch, (CUstream)stream, &err) != 0)
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    return FG_OK;
}

FG_API fg_status fg_layer_run_cpu(fg_layer *layer, const float *input, float *output, int64_t batch)
{
    CHECK_LAYER(layer, "fg_layer_run_cpu");
    if (!input || !output)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_run_cpu: input or output is NULL");
    if (batch < 1 || batch > INT32_MAX)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_layer_run_cpu: batch must be between 1 and %d (got %lld)",
                           INT32_MAX, (long long)batch);
    fg_status s = check_bound(layer, true);
    if (s != FG_OK)
        return s;
    int64_t n_out = batch * fg_shape_sample_count(&layer->ir.ops[layer->ir.n_ops - 1].out);
    double *out = malloc(sizeof(double) * (size_t)n_out);
    if (!out)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "fg_layer_run_cpu: out of memory");
    const float *params[FG_MAX_PARAMS];
    for (int i = 0; i < layer->ir.n_params; i++)
        params[i] = layer->params[i].host;
    fg_error err;
    if (fg_reference_run(&layer->ir, batch, input, params, out, &err) != 0) {
        free(out);
        return fg_api_fail_error(FG_ERR_OUT_OF_MEMORY, &err);
    }
    for (int64_t i = 0; i < n_out; i++)
        output[i] = (float)out[i];
    free(out);
    return FG_OK;
}
