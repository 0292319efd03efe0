/* SPDX-License-Identifier: Apache-2.0 */
#include "tuning.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "graph_capture.h"
#include "kernel_build.h"
#include "random_init.h"
#include "../common/half.h"

enum {
    WARM_UP_RUNS = 2,                 /* per candidate, untimed, alternating A and B */
    TIMED_RUNS = 5,                   /* per candidate, then, alternating likewise */
    UNKNOWN_BATCH = 32,               /* timed when the prepare came before any run */
};
/* The alternative must beat the planner's plan by this fraction to be chosen: the planner's
 * choice is the prior, a difference within the noise of a few runs is not evidence against
 * it (the H200, KB85 at batch 128: the FMA engine 0.76 ms and wgmma 0.80 ms with the L2
 * flushed before each run; after its first-run timing without this margin, the layer ran
 * at 0.82 ms in the PyTorch comparison, 0.76 in fusegen bench). */
static const double TUNING_MARGIN = 0.03;
static const uint64_t TUNING_BYTES = 1ull << 30; /* input, output and workspace of a timing */

bool fg_tuning_alternative_plan(const fg_layer *layer, fg_plan *out)
{
    const fg_context *ctx = layer->ctx;
    fg_plan_options opts = ctx->plan_options, alternative;
    fg_plan_options_set_arch(&opts, ctx->arch);
    fg_error err;
    /* another engine, nothing else: the layer reads its fold and cuDNN-ness without a lock */
    return fg_plan_engine_alternative(&layer->ir, &opts, &layer->plan, &alternative) &&
           fg_plan_layer(&layer->ir, &alternative, out, &err) == 0 && memcmp(out, &layer->plan, sizeof *out) != 0 &&
           memcmp(&out->fold, &layer->plan.fold, sizeof out->fold) == 0;
}

fg_layer_candidate *fg_tuning_candidate(const fg_layer *layer)
{
    const fg_context *ctx = layer->ctx;
    if (!ctx->cu || ctx->env.no_tuning)
        return NULL;
    fg_layer_candidate *c = calloc(1, sizeof *c);
    fg_error err;
    if (!c)
        return NULL;
    if (!fg_tuning_alternative_plan(layer, &c->plan) || fg_launch_table_init(&c->launch, &layer->ir, &c->plan, &err) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

void fg_tuning_candidate_free(fg_layer_candidate *c)
{
    if (c) {
        fg_launch_table_free(&c->launch);
        free(c);
    }
}

/* The alias key a choice is recorded under: both candidates, the GPU, the batch's power of two. */
static void tuning_key(const fg_context *ctx, char plan_keys[2][FG_CACHE_KEY_HEX + 1], int batch_log2,
                       char key[FG_CACHE_KEY_HEX + 1])
{
    char gpu[160];
    snprintf(gpu, sizeof gpu, "tuning 1|%s|%d SMs|batch 2^%d", ctx->device_name, ctx->sm_count, batch_log2);
    const void *parts[] = {gpu, plan_keys[0], plan_keys[1]};
    const size_t sizes[] = {strlen(gpu), FG_CACHE_KEY_HEX, FG_CACHE_KEY_HEX};
    fg_cache_plan_key(&ctx->cache.identity, parts, sizes, 3, ctx->arch, "tuning", key);
}

typedef struct build_job {
    fg_builder builder;
    fg_cache cache;         /* the second build's copy of the context's, whose warnings it keeps */
    char warning[512];      /* for the context's log after the join: the log callback is called
                               only from threads that called into the context (docs/api.md) */
    const fg_layer_ir *ir;
    const fg_plan *plan;
    const char *arch;
    fg_built built;
    fg_error err;
    int rc;
} build_job;

static void keep_warning(void *ctx, const char *msg)
{
    build_job *j = ctx;
    if (!j->warning[0])
        snprintf(j->warning, sizeof j->warning, "%s", msg);
}

static void *build_one(void *arg)
{
    build_job *j = arg;
    j->rc = fg_build_layer(&j->builder, j->ir, j->plan, j->arch, &j->built, &j->err);
    return NULL;
}

/* Everything one timing needs on the GPU, freed by release(). */
typedef struct timing {
    const fg_cuda *cu;
    CUmodule module[2];
    CUfunction functions[2][FG_MAX_PASSES];
    CUdeviceptr input, output, workspace, params[FG_MAX_KERNEL_PARAMS];
    CUdeviceptr packed_w[2]; /* a wgmma candidate's packed weights, packed once before the runs */
    int n_params;
    CUstream stream;
    CUevent ev[2][WARM_UP_RUNS + TIMED_RUNS][2];
} timing;

static void release(timing *t)
{
    const fg_cuda *cu = t->cu;
    if (t->stream)
        cu->StreamSynchronize(t->stream);
    for (int c = 0; c < 2; c++) {
        if (t->module[c])
            cu->ModuleUnload(t->module[c]);
        for (int r = 0; r < WARM_UP_RUNS + TIMED_RUNS; r++)
            for (int e = 0; e < 2; e++)
                if (t->ev[c][r][e])
                    cu->EventDestroy(t->ev[c][r][e]);
    }
    CUdeviceptr *bufs[] = {&t->input, &t->output, &t->workspace, &t->packed_w[0], &t->packed_w[1]};
    for (int i = 0; i < 5; i++)
        if (*bufs[i])
            cu->MemFree(*bufs[i]);
    for (int i = 0; i < t->n_params; i++)
        if (t->params[i])
            cu->MemFree(t->params[i]);
    if (t->stream)
        cu->StreamDestroy(t->stream);
}

/* Random floats in [-1, 1) on the device. */
static CUresult upload_random(const fg_cuda *cu, CUdeviceptr *dst, size_t n, uint64_t stream)
{
    float *host = malloc((n ? n : 1) * sizeof *host);
    if (!host)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fg_random_uniform(host, n, 0x7475, stream, -1.0f, 1.0f);
    CUresult r = cu->MemAlloc(dst, (n ? n : 1) * sizeof *host);
    if (r == CUDA_SUCCESS)
        r = cu->MemcpyHtoD(*dst, host, n * sizeof *host);
    free(host);
    return r;
}

/* The input of a layer of dtype `dtype` (fg_dtype): random values in [-1, 1) in that dtype
 * (a half layer reading float bits would see NaNs, infinities and subnormals). */
static CUresult upload_random_input(const fg_cuda *cu, CUdeviceptr *dst, size_t n, int dtype)
{
    if (dtype == 0)
        return upload_random(cu, dst, n, 0);
    float *host = malloc((n ? n : 1) * sizeof *host);
    uint16_t *bits = malloc((n ? n : 1) * sizeof *bits);
    CUresult r = host && bits ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        fg_random_uniform(host, n, 0x7475, 0, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i++)
            bits[i] = fg_float_to_half_bits(host[i], dtype);
        r = cu->MemAlloc(dst, (n ? n : 1) * sizeof *bits);
    }
    if (r == CUDA_SUCCESS)
        r = cu->MemcpyHtoD(*dst, bits, n * sizeof *bits);
    free(host);
    free(bits);
    return r;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Times both candidates (their cubins in built[]) at `batch`: ms[c] the median of each.
 * 0, or -1 with err. */
static int time_candidates(fg_layer *layer, const fg_launch_table *launch[2], const fg_plan *plan[2],
                           fg_built built[2], int64_t batch, double ms[2], fg_error *err)
{
    fg_context *ctx = layer->ctx;
    const fg_cuda *cu = ctx->cu;
    timing t;
    memset(&t, 0, sizeof t);
    t.cu = cu;
    fg_launch_memory mem[2];
    memset(mem, 0, sizeof mem);
    CUresult r = CUDA_SUCCESS;
    uint64_t workspace = 0;
    for (int c = 0; c < 2; c++) {
        if (fg_launch_layout_for(launch[c], batch, &mem[c].layout, err) != 0)
            return -1;
        if (mem[c].layout.total > workspace)
            workspace = mem[c].layout.total;
    }
    for (int c = 0; c < 2 && r == CUDA_SUCCESS; c++) {
        r = cu->ModuleLoadData(&t.module[c], built[c].cubin);
        if (r != CUDA_SUCCESS) {
            t.module[c] = NULL;
            break;
        }
        if (fg_module_functions(cu, t.module[c], plan[c], t.functions[c], err) != 0) {
            release(&t);
            return -1;
        }
    }
    const fg_layer_ir *ir = &layer->ir;
    size_t in = (size_t)(batch * fg_shape_sample_count(&ir->input));
    size_t out = (size_t)(batch * fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out));
    if (r == CUDA_SUCCESS)
        r = upload_random_input(cu, &t.input, in, (int)ir->dtype);
    if (r == CUDA_SUCCESS)
        r = cu->MemAlloc(&t.output, out ? out * sizeof(float) : 4);
    if (r == CUDA_SUCCESS)
        r = cu->MemAlloc(&t.workspace, workspace ? workspace : 256);
    /* the kernel parameters: the spec's, and a folded batch norm's weight and bias (gen/fold.h;
     * both candidates fold alike, the engine is all they differ in) */
    const fg_bn_fold *fold = &plan[0]->fold;
    for (int i = 0; i < fg_bn_fold_param_count(ir, fold) && r == CUDA_SUCCESS; i++, t.n_params++) {
        int64_t count = i < ir->n_params             ? ir->params[i].count
                        : i == fold->folded_weight ? fold->channels * fold->per_channel
                                                   : fold->channels;
        r = upload_random(cu, &t.params[i], (size_t)count, 1 + (uint64_t)i);
    }
    if (r == CUDA_SUCCESS)
        r = cu->StreamCreate(&t.stream, CU_STREAM_NON_BLOCKING);
    for (int c = 0; c < 2 && r == CUDA_SUCCESS; c++)
        for (int k = 0; k < WARM_UP_RUNS + TIMED_RUNS && r == CUDA_SUCCESS; k++)
            for (int e = 0; e < 2 && r == CUDA_SUCCESS; e++)
                r = cu->EventCreate(&t.ev[c][k][e], CU_EVENT_DEFAULT);
    /* a wgmma candidate's weights are packed once, as a bind packs them, outside the timing:
     * its runs read the image */
    for (int c = 0; c < 2 && r == CUDA_SUCCESS; c++) {
        uint64_t bytes = fg_launch_packed_bytes(launch[c]);
        if (bytes && (r = cu->MemAlloc(&t.packed_w[c], bytes)) == CUDA_SUCCESS &&
            fg_launch_pack_weights(cu, launch[c], t.functions[c], t.params, t.packed_w[c], t.stream, err) != 0) {
            release(&t);
            return -1;
        }
    }
    if (r != CUDA_SUCCESS) {
        release(&t);
        return fg_cuda_fail(err, r, "setting up the timing of two plans");
    }
    for (int c = 0; c < 2; c++) {
        mem[c].packed_w = t.packed_w[c];
        mem[c].input = t.input;
        mem[c].output = t.output;
        mem[c].workspace = t.workspace;
        mem[c].params = t.params;
        mem[c].sm_count = ctx->sm_count;
    }
    /* the first WARM_UP_RUNS warm up (lazy loading, caches, clocks); A and B alternate so that
     * clocks and temperature drift hit both alike */
    /* the workspace is shared, so a plan with split-K counters gets them cleared before each
     * of its runs, outside the timed span: the layer's own runs find them zero and pay no
     * memset (fg_launch_memory.counters_zero), which would add microseconds to runs of tens */
    for (int c = 0; c < 2; c++)
        mem[c].counters_zero = true;
    for (int k = 0; k < WARM_UP_RUNS + TIMED_RUNS; k++)
        for (int c = 0; c < 2; c++) {
            if (fg_launch_clear_counters(cu, launch[c], &mem[c], t.stream, err) != 0) {
                release(&t);
                return -1;
            }
            if ((r = cu->EventRecord(t.ev[c][k][0], t.stream)) != CUDA_SUCCESS ||
                fg_launch_run(cu, launch[c], t.functions[c], &mem[c], batch, t.stream, err) != 0 ||
                (r = cu->EventRecord(t.ev[c][k][1], t.stream)) != CUDA_SUCCESS) {
                release(&t);
                return r != CUDA_SUCCESS ? fg_cuda_fail(err, r, "timing two plans") : -1;
            }
        }
    if ((r = cu->StreamSynchronize(t.stream)) != CUDA_SUCCESS) {
        release(&t);
        return fg_cuda_fail(err, r, "timing two plans");
    }
    for (int c = 0; c < 2; c++) {
        float v[TIMED_RUNS];
        for (int k = 0; k < TIMED_RUNS; k++)
            if ((r = cu->EventElapsedTime(&v[k], t.ev[c][WARM_UP_RUNS + k][0], t.ev[c][WARM_UP_RUNS + k][1])) !=
                CUDA_SUCCESS) {
                release(&t);
                return fg_cuda_fail(err, r, "reading the timings");
            }
        qsort(v, TIMED_RUNS, sizeof v[0], cmp_float);
        ms[c] = v[TIMED_RUNS / 2];
    }
    release(&t);
    return 0;
}

/* The batch timed: the run's (or UNKNOWN_BATCH), fewer samples where its tensors and
 * workspace would pass TUNING_BYTES (a large batch of a large layer fills the GPU long
 * before). */
static int64_t timed_batch(const fg_layer *layer, const fg_layer_candidate *alt, int64_t batch)
{
    const fg_layer_ir *ir = &layer->ir;
    int64_t b = batch > 0 ? batch : UNKNOWN_BATCH;
    for (; b > 1; b = b / 2) {
        fg_launch_layout l0, l1;
        fg_error err;
        if (fg_launch_layout_for(&layer->launch, b, &l0, &err) != 0 ||
            fg_launch_layout_for(&alt->launch, b, &l1, &err) != 0)
            continue;
        uint64_t tensors = (uint64_t)b * (uint64_t)(fg_shape_sample_count(&ir->input) +
                                                    fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out)) * 4;
        if (tensors + (l0.total > l1.total ? l0.total : l1.total) <= TUNING_BYTES)
            break;
    }
    return b;
}

static int log2_floor(int64_t v)
{
    int l = 0;
    while (v > 1) {
        v >>= 1;
        l++;
    }
    return l;
}

/* Makes candidate `c` (0: the layer's own plan, 1: alt) the layer's. */
static void adopt(fg_layer *layer, fg_layer_candidate *alt, int c)
{
    if (c == 1) {
        fg_plan plan = layer->plan;
        fg_launch_table launch = layer->launch;
        layer->plan = alt->plan;
        layer->launch = alt->launch;
        alt->plan = plan;
        alt->launch = launch;
    }
    fg_tuning_candidate_free(alt);
}

/* Keeps the layer's own plan without timing it against alt, saying why. */
static fg_tuning_outcome keep_planners(fg_layer *layer, fg_layer_candidate *alt, fg_log_level level, const char *why)
{
    fg_context_log(layer->ctx, level, "%s: conv on %s, the planner's choice, not timed against %s: %s", layer->ir.name,
                   fg_plan_conv_engine_name(&layer->plan), fg_plan_conv_engine_name(&alt->plan), why);
    fg_tuning_candidate_free(alt);
    return FG_TUNING_NONE;
}

fg_tuning_outcome fg_tuning_decide(fg_layer *layer, int64_t batch, CUstream stream)
{
    fg_layer_candidate *alt = layer->alternative;
    layer->alternative = NULL; /* decided now, whatever happens */
    if (!alt)
        return FG_TUNING_NONE;
    fg_context *ctx = layer->ctx;
    const fg_cuda *cu = ctx->cu;
    const fg_plan *plan[2] = {&layer->plan, &alt->plan};
    const fg_launch_table *launch[2] = {&layer->launch, &alt->launch};
    char plan_keys[2][FG_CACHE_KEY_HEX + 1], key[FG_CACHE_KEY_HEX + 1], winner[FG_CACHE_KEY_HEX + 1];
    int64_t timed = timed_batch(layer, alt, batch);
    for (int c = 0; c < 2; c++)
        fg_plan_key(&ctx->cache.identity, &layer->ir, plan[c], ctx->arch, plan_keys[c]);
    tuning_key(ctx, plan_keys, log2_floor(timed), key);
    /* recorded by an earlier process: the winner's entry is the one a candidate's alias names */
    if (fg_cache_lookup_alias(&ctx->cache, key, winner)) {
        for (int c = 0; c < 2; c++) {
            char entry[FG_CACHE_KEY_HEX + 1];
            if (fg_cache_lookup_alias(&ctx->cache, plan_keys[c], entry) && strcmp(entry, winner) == 0) {
                fg_context_log(ctx, FG_LOG_DEBUG, "%s: conv on %s, as timed before on this GPU (cache)", layer->ir.name,
                               fg_plan_conv_engine_name(plan[c]));
                adopt(layer, alt, c);
                return FG_TUNING_NONE;
            }
        }
    }
    /* never inside a capture: only a stream known not to be capturing is timed on */
    if (fg_stream_capturing(cu, stream))
        return keep_planners(layer, alt, FG_LOG_INFO, "its first run is inside (or beside) a stream capture");
    /* the timing owns the GPU: work the caller queued before this run finishes first (a
     * non-blocking stream would overlap the timed runs) */
    if (cu->StreamSynchronize(stream) != CUDA_SUCCESS)
        return keep_planners(layer, alt, FG_LOG_WARN, "the run's stream failed before the timing");
    /* both builds side by side: a JIT from an empty cache costs one compile's time */
    build_job *jobs = calloc(2, sizeof *jobs);
    if (!jobs)
        return keep_planners(layer, alt, FG_LOG_WARN, "out of memory");
    pthread_t thread;
    for (int c = 0; c < 2; c++) {
        jobs[c].builder = (fg_builder){.cache = &ctx->cache, .failed_source_dir = ctx->env.tmpdir};
        jobs[c].ir = &layer->ir;
        jobs[c].plan = plan[c];
        jobs[c].arch = ctx->arch;
    }
    jobs[1].cache = ctx->cache;
    jobs[1].cache.warn = keep_warning;
    jobs[1].cache.warn_ctx = &jobs[1];
    jobs[1].builder.cache = &jobs[1].cache;
    bool threaded = pthread_create(&thread, NULL, build_one, &jobs[1]) == 0;
    build_one(&jobs[0]);
    if (threaded)
        pthread_join(thread, NULL);
    else
        build_one(&jobs[1]);
    if (jobs[1].warning[0])
        fg_context_log(ctx, FG_LOG_WARN, "%s", jobs[1].warning);
    double ms[2] = {0, 0};
    fg_error err;
    int choice = 0;
    fg_tuning_outcome outcome = FG_TUNING_NONE;
    if (jobs[0].rc != 0 || jobs[1].rc != 0) {
        fg_context_log(ctx, FG_LOG_WARN, "%s: conv on %s, the planner's choice, not timed against %s: %s",
                       layer->ir.name, fg_plan_conv_engine_name(plan[0]), fg_plan_conv_engine_name(plan[1]),
                       (jobs[1].rc != 0 ? jobs[1].err : jobs[0].err).msg);
    } else {
        fg_built built[2] = {jobs[0].built, jobs[1].built};
        if (time_candidates(layer, launch, plan, built, timed, ms, &err) != 0) {
            fg_context_log(ctx, FG_LOG_WARN, "%s: conv on %s, the planner's choice: timing it against %s failed: %s",
                           layer->ir.name, fg_plan_conv_engine_name(plan[0]), fg_plan_conv_engine_name(plan[1]),
                           err.msg);
        } else {
            outcome = jobs[0].built.from_cache && jobs[1].built.from_cache ? FG_TUNING_TIMED : FG_TUNING_COMPILED;
            choice = ms[1] < ms[0] * (1.0 - TUNING_MARGIN) ? 1 : 0;
            const fg_built *w = &jobs[choice].built;
            fg_error store_err;
            bool recorded = (w->from_cache || w->stored) &&
                            fg_cache_store_alias(&ctx->cache, NULL, key, w->key, &store_err) == 0;
            fg_context_log(ctx, FG_LOG_INFO,
                           "%s: timed the conv on %s (%.3f ms) and %s (%.3f ms) at batch %lld: %s%s%s",
                           layer->ir.name, fg_plan_conv_engine_name(plan[0]), ms[0], fg_plan_conv_engine_name(plan[1]),
                           ms[1], (long long)timed, fg_plan_conv_engine_name(plan[choice]),
                           choice == 0 && ms[1] < ms[0] ? " (the other is not 3 % faster)" : "",
                           recorded ? " (recorded in the cache)" : "");
        }
    }
    for (int c = 0; c < 2; c++)
        fg_built_free(&jobs[c].built);
    free(jobs);
    adopt(layer, alt, choice);
    return outcome;
}
