/* SPDX-License-Identifier: Apache-2.0 */
/* runtime/tools.h: what the CLI, the GPU tests and the benchmarks need beyond the public API. */
#include "tools.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "handles.h"
#include "kernel_build.h"
#include "nvrtc_compiler.h"
#include "random_init.h"
#include "../common/half.h"

static fg_status check_layer(const fg_layer *layer, const char *fn)
{
    fg_api_clear_error();
    if (!fg_handle_live(layer, FG_HANDLE_LAYER))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: not a live layer (NULL or destroyed)", fn);
    return FG_OK;
}

/* A live context with a device, made current on this thread. */
static fg_status enter_device(fg_context *ctx, const char *fn)
{
    fg_api_clear_error();
    if (!fg_handle_live(ctx, FG_HANDLE_CONTEXT))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "%s: not a live context (NULL or destroyed)", fn);
    return fg_api_enter(ctx);
}

static fg_status cuda_status(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return FG_OK;
    fg_error err;
    fg_cuda_fail(&err, r, what);
    return fg_api_fail_error(r == CUDA_ERROR_OUT_OF_MEMORY ? FG_ERR_OUT_OF_MEMORY : FG_ERR_CUDA, &err);
}

const fg_layer_ir *fg_tools_layer_ir(const fg_layer *layer)
{
    return check_layer(layer, "fg_tools_layer_ir") == FG_OK ? &layer->ir : NULL;
}

const fg_plan *fg_tools_layer_plan(const fg_layer *layer)
{
    return check_layer(layer, "fg_tools_layer_plan") == FG_OK ? &layer->plan : NULL;
}

fg_status fg_tools_bind_random(fg_layer *layer, uint64_t seed)
{
    fg_status s = check_layer(layer, "fg_tools_bind_random");
    if (s != FG_OK)
        return s;
    const fg_layer_ir *ir = &layer->ir;
    float *params[FG_MAX_PARAMS] = {0};
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

fg_status fg_tools_prepare(fg_layer *layer, int64_t batch)
{
    fg_api_clear_error();
    if (!fg_handle_acquire(layer, FG_HANDLE_LAYER))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_tools_prepare: not a live layer (NULL or destroyed)");
    fg_status s = batch < 1 || batch > INT32_MAX
                      ? fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_tools_prepare: batch must be between 1 and %d (got %lld)",
                                    INT32_MAX, (long long)batch)
                      : fg_layer_prepare_held(layer, batch);
    fg_handle_release(layer);
    return s;
}

/* Whether the layer's last prepare compiled kernels: where two plans were timed first
 * (runtime/tuning.h), it did if either was compiled. */
static bool prepare_compiled(const fg_layer *layer)
{
    return !layer->from_cache || layer->prepare_seconds.tuning == FG_TUNING_COMPILED;
}

fg_status fg_tools_describe_prepare(const fg_layer *layer, char *buf, size_t cap)
{
    fg_status s = check_layer(layer, "fg_tools_describe_prepare");
    if (s != FG_OK)
        return s;
    char rendering[48] = "found by the plan alias, not rendered";
    if (layer->prepare_seconds.render >= 0)
        snprintf(rendering, sizeof rendering, "rendering %.1f", layer->prepare_seconds.render * 1e3);
    fg_tuning_outcome tuning = layer->prepare_seconds.tuning;
    char tuned[96] = "";
    if (tuning != FG_TUNING_NONE)
        snprintf(tuned, sizeof tuned, "two plans %sand timed %.1f, ",
                 tuning == FG_TUNING_COMPILED ? "compiled side by side " : "loaded ", layer->prepare_seconds.tune * 1e3);
    snprintf(buf, cap, "kernels %s in %.1f ms (%s%s, %s %.1f, module load %.1f)",
             prepare_compiled(layer) ? "compiled" : "loaded from the cache", layer->prepare_seconds.total * 1e3, tuned,
             rendering, layer->from_cache ? "cache lookup" : "compile", layer->prepare_seconds.build * 1e3,
             layer->prepare_seconds.load * 1e3);
    return FG_OK;
}

fg_status fg_tools_block_describe_prepare(fg_block *block, char *buf, size_t cap)
{
    int n = 0, compiled = 0, tuned = 0;
    fg_status s = fg_block_layer_count(block, &n);
    double total = 0;
    for (int i = 0; i < n && s == FG_OK; i++) {
        const fg_layer *layer = fg_tools_block_layer(block, i);
        if (!layer)
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_tools_block_describe_prepare: no layer %d", i);
        compiled += prepare_compiled(layer);
        tuned += layer->prepare_seconds.tuning != FG_TUNING_NONE;
        total += layer->prepare_seconds.total;
    }
    if (s != FG_OK)
        return s;
    char timed[64] = "";
    if (tuned)
        snprintf(timed, sizeof timed, "; %d timed two plans first", tuned);
    snprintf(buf, cap, "kernels of %d layers in %.1f ms (%d compiled, %d loaded from the cache%s)", n, total * 1e3,
             compiled, n - compiled, timed);
    return FG_OK;
}

fg_status fg_tools_layer_cached(fg_layer *layer, int *wanted, bool found[2], char keys[2][FG_CACHE_KEY_HEX + 1])
{
    fg_status s = check_layer(layer, "fg_tools_layer_cached");
    if (s != FG_OK)
        return s;
    fg_context *ctx = layer->ctx;
    fg_plan alternative;
    const fg_plan *plans[2] = {&layer->plan, &alternative};
    found[0] = found[1] = false;
    fg_error err;
    pthread_mutex_lock(&ctx->lock); /* the identity, as a first prepare sets it; the plan it may swap */
    *wanted = 1 + fg_tuning_alternative_plan(layer, &alternative);
    if (ctx->cache.identity.nvrtc_major == 0 && fg_build_identity(&ctx->cache.identity, &err) != 0)
        s = fg_api_fail_error(FG_ERR_COMPILE, &err);
    const fg_builder builder = {.cache = &ctx->cache};
    for (int c = 0; c < *wanted && s == FG_OK; c++) {
        fg_built built;
        int hit = fg_build_find(&builder, &layer->ir, plans[c], ctx->arch, &built, &err);
        if (hit < 0)
            s = fg_api_fail_error(FG_ERR_IO, &err);
        found[c] = hit > 0;
        memcpy(keys[c], hit > 0 ? built.key : built.plan_key, FG_CACHE_KEY_HEX + 1);
        fg_built_free(&built);
    }
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

fg_status fg_tools_run_cpu(fg_layer *layer, const float *input, float *output, int64_t batch,
                           void (*progress)(void *ctx, double done), void *ctx)
{
    return fg_layer_run_cpu_progress(layer, input, output, batch, progress, ctx);
}

double fg_tools_reference_work(const fg_layer *layer, int64_t batch)
{
    return check_layer(layer, "fg_tools_reference_work") == FG_OK ? fg_reference_work(&layer->ir, batch) : 0;
}

fg_status fg_tools_device_info(fg_context *ctx, fg_tools_device *out)
{
    fg_status s = enter_device(ctx, "fg_tools_device_info");
    if (s != FG_OK)
        return s;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", ctx->device_name);
    snprintf(out->arch, sizeof out->arch, "%s", ctx->arch);
    out->sm_count = ctx->sm_count;
    ctx->cu->DeviceGetAttribute(&out->l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ctx->dev);
    return FG_OK;
}

fg_status fg_tools_alloc(fg_context *ctx, size_t bytes, CUdeviceptr *out)
{
    *out = 0;
    fg_status s = enter_device(ctx, "fg_tools_alloc");
    return s != FG_OK ? s : cuda_status(ctx->cu->MemAlloc(out, bytes ? bytes : 1), "allocating device memory");
}

fg_status fg_tools_free(fg_context *ctx, CUdeviceptr p)
{
    fg_status s = enter_device(ctx, "fg_tools_free");
    return s != FG_OK || !p ? s : cuda_status(ctx->cu->MemFree(p), "freeing device memory");
}

fg_status fg_tools_upload(fg_context *ctx, CUdeviceptr dst, const void *src, size_t bytes)
{
    fg_status s = enter_device(ctx, "fg_tools_upload");
    return s != FG_OK ? s : cuda_status(ctx->cu->MemcpyHtoD(dst, src, bytes), "copying to the device");
}

fg_status fg_tools_download(fg_context *ctx, void *dst, CUdeviceptr src, size_t bytes)
{
    fg_status s = enter_device(ctx, "fg_tools_download");
    return s != FG_OK ? s : cuda_status(ctx->cu->MemcpyDtoH(dst, src, bytes), "copying from the device");
}

fg_status fg_tools_fill_nan(fg_context *ctx, CUdeviceptr p, size_t floats)
{
    fg_status s = enter_device(ctx, "fg_tools_fill_nan");
    return s != FG_OK ? s : cuda_status(ctx->cu->MemsetD32Async(p, 0x7fc00000u, floats, NULL), "filling with NaN");
}

fg_status fg_tools_upload_io(fg_context *ctx, CUdeviceptr dst, const float *src, size_t count, int dtype)
{
    if (dtype == 0)
        return fg_tools_upload(ctx, dst, src, count * sizeof(float));
    uint16_t *h = malloc(count ? count * 2 : 2);
    if (!h)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "fg_tools_upload_io: out of memory");
    for (size_t i = 0; i < count; i++)
        h[i] = fg_float_to_half_bits(src[i], dtype);
    fg_status s = fg_tools_upload(ctx, dst, h, count * 2);
    free(h);
    return s;
}

fg_status fg_tools_download_io(fg_context *ctx, float *dst, CUdeviceptr src, size_t count, int dtype)
{
    if (dtype == 0)
        return fg_tools_download(ctx, dst, src, count * sizeof(float));
    uint16_t *h = malloc(count ? count * 2 : 2);
    if (!h)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "fg_tools_download_io: out of memory");
    fg_status s = fg_tools_download(ctx, h, src, count * 2);
    for (size_t i = 0; s == FG_OK && i < count; i++)
        dst[i] = fg_half_bits_to_float(h[i], dtype);
    free(h);
    return s;
}

fg_status fg_tools_fill_nan_io(fg_context *ctx, CUdeviceptr p, size_t count, int dtype)
{
    if (dtype == 0)
        return fg_tools_fill_nan(ctx, p, count);
    fg_status s = enter_device(ctx, "fg_tools_fill_nan_io");
    /* 0xffff is a NaN in bf16 and in fp16 */
    return s != FG_OK ? s : cuda_status(ctx->cu->MemsetD8Async(p, 0xff, count * 2, NULL), "filling with NaN");
}

fg_status fg_tools_synchronize(fg_context *ctx)
{
    fg_status s = enter_device(ctx, "fg_tools_synchronize");
    return s != FG_OK ? s : cuda_status(ctx->cu->StreamSynchronize(NULL), "running on the device");
}

/* ---- timing --------------------------------------------------------------------------- */

/* A stream, two events and a buffer of 4 x L2 to flush the L2 with. */
typedef struct timer {
    const fg_cuda *cu;
    CUstream stream;
    CUevent start, stop;
    CUdeviceptr flush;
    size_t flush_bytes;
} timer;

static void timer_close(timer *t)
{
    if (t->flush)
        t->cu->MemFree(t->flush);
    if (t->start)
        t->cu->EventDestroy(t->start);
    if (t->stop)
        t->cu->EventDestroy(t->stop);
    if (t->stream)
        t->cu->StreamDestroy(t->stream);
}

static fg_status timer_open(fg_context *ctx, timer *t)
{
    memset(t, 0, sizeof *t);
    t->cu = ctx->cu;
    int l2 = 0;
    t->cu->DeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ctx->dev);
    t->flush_bytes = (size_t)(l2 > 0 ? l2 : 64 << 20) * 4;
    fg_status s = cuda_status(t->cu->StreamCreate(&t->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    if (s == FG_OK)
        s = cuda_status(t->cu->EventCreate(&t->start, 0), "cuEventCreate");
    if (s == FG_OK)
        s = cuda_status(t->cu->EventCreate(&t->stop, 0), "cuEventCreate");
    if (s == FG_OK)
        s = cuda_status(t->cu->MemAlloc(&t->flush, t->flush_bytes), "allocating the L2 flush buffer");
    if (s != FG_OK)
        timer_close(t);
    return s;
}

/* Milliseconds between the two events, once `stop` has completed. */
static fg_status elapsed(const timer *t, double *ms)
{
    float f = 0;
    fg_status s = cuda_status(t->cu->EventSynchronize(t->stop), "running the timed work");
    if (s == FG_OK)
        s = cuda_status(t->cu->EventElapsedTime(&f, t->start, t->stop), "cuEventElapsedTime");
    *ms = f;
    return s;
}

/* Times `iters` runs of run(arg, stream) after `warmup` untimed ones, the L2 flushed before
 * each (fg_tools_time_runs, fg_tools_time_block_runs). */
static fg_status time_runs(fg_context *ctx, const char *fn, fg_status (*run)(void *arg, CUstream stream), void *arg,
                           long warmup, long iters, double *times_ms)
{
    fg_status s = enter_device(ctx, fn);
    timer t;
    if (s != FG_OK || (s = timer_open(ctx, &t)) != FG_OK)
        return s;
    for (long i = 0; i < warmup + iters && s == FG_OK; i++) {
        s = cuda_status(t.cu->MemsetD8Async(t.flush, (unsigned char)i, t.flush_bytes, t.stream), "flushing the L2");
        if (s == FG_OK)
            s = cuda_status(t.cu->EventRecord(t.start, t.stream), "cuEventRecord");
        if (s == FG_OK)
            s = run(arg, t.stream);
        if (s == FG_OK)
            s = cuda_status(t.cu->EventRecord(t.stop, t.stream), "cuEventRecord");
        double ms = 0;
        if (s == FG_OK)
            s = elapsed(&t, &ms);
        if (s == FG_OK && i >= warmup)
            times_ms[i - warmup] = ms;
    }
    timer_close(&t);
    return s;
}

typedef struct timed_run {
    fg_layer *layer;
    fg_block *block;
    const void *const *inputs; /* the block's; a layer's is inputs[0] */
    void *output;
    int64_t batch;
} timed_run;

static fg_status run_timed(void *arg, CUstream stream)
{
    const timed_run *r = arg;
    return r->layer ? fg_layer_run(r->layer, r->inputs[0], r->output, r->batch, stream)
                    : fg_block_run(r->block, r->inputs, r->output, r->batch, stream);
}

fg_status fg_tools_time_runs(fg_layer *layer, CUdeviceptr input, CUdeviceptr output, int64_t batch, long warmup,
                             long iters, double *times_ms)
{
    fg_status s = check_layer(layer, "fg_tools_time_runs");
    const void *inputs[1] = {(const void *)input};
    timed_run r = {.layer = layer, .inputs = inputs, .output = (void *)output, .batch = batch};
    return s != FG_OK ? s : time_runs(layer->ctx, "fg_tools_time_runs", run_timed, &r, warmup, iters, times_ms);
}

fg_status fg_tools_time_block_runs(fg_block *block, const void *const *inputs, void *output, int64_t batch, long warmup,
                                   long iters, double *times_ms)
{
    fg_api_clear_error();
    fg_context *ctx = fg_block_context(block);
    if (!ctx)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_tools_time_block_runs: not a live block (NULL or destroyed)");
    timed_run r = {.block = block, .inputs = inputs, .output = output, .batch = batch};
    return time_runs(ctx, "fg_tools_time_block_runs", run_timed, &r, warmup, iters, times_ms);
}

static const char fma_source[] =
    "extern \"C\" __global__ void fma_peak(float *out, float seed, int iters)\n"
    "{\n"
    "    float a[8];\n"
    "    for (int i = 0; i < 8; ++i) a[i] = seed + threadIdx.x * 1e-7f + i;\n"
    "    for (int it = 0; it < iters; ++it) {\n"
    "#pragma unroll\n"
    "        for (int k = 0; k < 16; ++k) {\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 8; ++i) a[i] = fmaf(a[i], 0.999999f, 1e-7f);\n"
    "        }\n"
    "    }\n"
    "    float s = 0.0f;\n"
    "    for (int i = 0; i < 8; ++i) s += a[i];\n"
    "    if (s == 12345.0f) out[0] = s; /* keeps the loop alive */\n"
    "}\n";

static fg_status fma_rate(fg_context *ctx, timer *t, double *tflops)
{
    fg_compiled c;
    fg_error err;
    if (fg_nvrtc_compile(fma_source, "fma_peak.cu", ctx->arch, NULL, &c, &err) != 0)
        return fg_api_fail_error(FG_ERR_COMPILE, &err);
    CUmodule mod;
    CUfunction fn;
    fg_status s = cuda_status(t->cu->ModuleLoadData(&mod, c.cubin), "loading the FMA kernel");
    fg_compiled_free(&c);
    if (s != FG_OK)
        return s;
    s = cuda_status(t->cu->ModuleGetFunction(&fn, mod, "fma_peak"), "fma_peak");
    float seed = 1.0f;
    int iters = 4096;
    CUdeviceptr out = t->flush;
    void *args[] = {&out, &seed, &iters};
    unsigned blocks = (unsigned)ctx->sm_count * 8, threads = 256;
    double best = 0;
    for (int rep = 0; rep < 5 && s == FG_OK; rep++) {
        double ms = 0;
        s = cuda_status(t->cu->EventRecord(t->start, t->stream), "cuEventRecord");
        if (s == FG_OK)
            s = cuda_status(t->cu->LaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, t->stream, args, NULL), "fma_peak");
        if (s == FG_OK)
            s = cuda_status(t->cu->EventRecord(t->stop, t->stream), "cuEventRecord");
        if (s == FG_OK)
            s = elapsed(t, &ms);
        double flops = 2.0 * blocks * threads * (double)iters * 16 * 8;
        if (s == FG_OK && rep > 0 && flops / (ms * 1e-3) > best) /* the first launch warms up */
            best = flops / (ms * 1e-3);
    }
    t->cu->ModuleUnload(mod);
    *tflops = best / 1e12;
    return s;
}

static fg_status copy_rate(timer *t, double *tbs)
{
    /* device-to-device copy of half the flush buffer onto the other half */
    size_t half = t->flush_bytes / 2;
    double best = 0;
    fg_status s = FG_OK;
    for (int rep = 0; rep < 6 && s == FG_OK; rep++) {
        double ms = 0;
        s = cuda_status(t->cu->EventRecord(t->start, t->stream), "cuEventRecord");
        if (s == FG_OK)
            s = cuda_status(t->cu->MemcpyDtoDAsync(t->flush + half, t->flush, half, t->stream), "copy");
        if (s == FG_OK)
            s = cuda_status(t->cu->EventRecord(t->stop, t->stream), "cuEventRecord");
        if (s == FG_OK)
            s = elapsed(t, &ms);
        if (s == FG_OK && rep > 0 && 2.0 * (double)half / (ms * 1e-3) > best)
            best = 2.0 * (double)half / (ms * 1e-3);
    }
    *tbs = best / 1e12;
    return s;
}

fg_status fg_tools_ceilings(fg_context *ctx, double *fma_tflops, double *copy_tbs)
{
    fg_status s = enter_device(ctx, "fg_tools_ceilings");
    timer t;
    if (s != FG_OK || (s = timer_open(ctx, &t)) != FG_OK)
        return s;
    s = fma_rate(ctx, &t, fma_tflops);
    if (s == FG_OK)
        s = copy_rate(&t, copy_tbs);
    timer_close(&t);
    return s;
}
