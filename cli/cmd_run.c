/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/random_init.h"
#include "../runtime/safetensors.h"
#include "../runtime/tools.h"
#include "cli.h"
#include "compare.h"
#include "fusegen.h"
#include "../common/clock.h"
#include "../common/accuracy.h"
#include "../common/half.h"

static const char usage[] =
    "usage: fusegen run SPEC [options]\n"
    "\n"
    "Runs the layer of SPEC on random or given tensors, on the GPU (JIT-compiling what the\n"
    "kernel caches lack) or with the CPU reference. A block spec (docs/spec.md, Blocks) runs\n"
    "on random inputs (--random), with random or given (--weights) parameters.\n"
    "\n"
    "options:\n"
    "  --device gpu|cpu      where to run (default gpu)\n"
    "  --random SEED         random input x ~ U[0,1) (default, seed 0), in the layer's dtype; with\n"
    "                        no --weights, random parameters too (conv as PyTorch initializes it,\n"
    "                        others N(0,1))\n"
    "  --batch N             samples of random input (default 1)\n"
    "  --input X             input from a safetensors file (tensor 'input', or its only tensor;\n"
    "                        F32 for an fp32 layer (F16, BF16 widened), BF16 or F16 for a layer\n"
    "                        with that dtype; a channels_last layer's as [N, (D,) H, W, C],\n"
    "                        its memory order)\n"
    "  --weights W           parameters from a safetensors file (state_dict names)\n"
    "  --out Y               write the output to a safetensors file (tensor 'output', in the\n"
    "                        layer's dtype; a channels_last layer's as [N, (D,) H, W, C])\n"
    "  --check               also run the CPU reference (float64) on the same data and compare:\n"
    "                        max abs error, relative L2 error, PASS/FAIL at atol = rtol = 1e-4\n"
    "                        (precision tf32: 5e-3, with bf16 4e-2)\n"
    "                        (plus 1 ulp of the dtype for a bf16/fp16 layer)\n"
    "  --check-samples K     compare only the first K samples (the reference is slow on big batches)\n"
    "  --force               run the CPU reference even when it needs more than 2e10 multiply-adds\n"
    "  --arch ARCH           compile for ARCH instead of the device's (e.g. sm_90a)\n"
    "  --cache DIR           user kernel cache (default $FUSEGEN_CACHE_DIR or ~/.cache/fusegen)\n"
    "  -v, --verbose         say where the kernels came from\n"
    "\n"
    "Exit status: 0 when the run (and the check) succeeded, 1 otherwise, 2 on bad usage.\n";

typedef struct run_opts {
    const char *spec, *input, *weights, *out, *arch, *cache;
    int gpu, check, verbose, force;
    uint64_t seed;
    long long batch, check_samples;
} run_opts;

static int parse(int argc, char **argv, run_opts *o)
{
    static const struct option longopts[] = {
        {"help", no_argument, 0, 'h'},          {"device", required_argument, 0, 'd'},
        {"random", required_argument, 0, 'r'},  {"batch", required_argument, 0, 'b'},
        {"input", required_argument, 0, 'i'},   {"weights", required_argument, 0, 'w'},
        {"out", required_argument, 0, 'o'},     {"check", no_argument, 0, 'c'},
        {"check-samples", required_argument, 0, 'k'}, {"arch", required_argument, 0, 'a'},
        {"cache", required_argument, 0, 'C'},   {"verbose", no_argument, 0, 'v'},
        {"force", no_argument, 0, 'f'},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->gpu = 1;
    o->batch = -1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "hv", longopts, NULL)) != -1) {
        long v;
        switch (c) {
        case 'h':
            fputs(usage, stdout);
            return 1;
        case 'd':
            if (strcmp(optarg, "gpu") && strcmp(optarg, "cpu"))
                return cli_usage_error("run", "--device must be gpu or cpu, not '%s'", optarg);
            o->gpu = strcmp(optarg, "gpu") == 0;
            break;
        case 'r':
            if (cli_parse_seed("run", "--random", optarg, &o->seed))
                return EXIT_USAGE;
            break;
        case 'b':
            if ((v = cli_parse_positive("run", "--batch", optarg, INT32_MAX)) < 0)
                return EXIT_USAGE;
            o->batch = v;
            break;
        case 'k':
            if ((v = cli_parse_positive("run", "--check-samples", optarg, INT32_MAX)) < 0)
                return EXIT_USAGE;
            o->check_samples = v;
            break;
        case 'i':
            o->input = optarg;
            break;
        case 'w':
            o->weights = optarg;
            break;
        case 'o':
            o->out = optarg;
            break;
        case 'c':
            o->check = 1;
            break;
        case 'a':
            o->arch = optarg;
            break;
        case 'C':
            if (cli_parse_dir("run", "--cache", optarg, &o->cache))
                return EXIT_USAGE;
            break;
        case 'v':
            o->verbose = 1;
            break;
        case 'f':
            o->force = 1;
            break;
        default:
            return cli_usage_error("run", "unknown option");
        }
    }
    if (argc - optind != 1)
        return cli_usage_error("run", "expects exactly one SPEC");
    o->spec = argv[optind];
    if (o->input && o->batch > 0)
        return cli_usage_error("run", "--batch applies to random input; --input brings its own batch");
    if (o->batch < 0)
        o->batch = 1;
    return 0;
}

/* "[2, 16, 8, 8]" */
static void shape_string(int rank, const int64_t *dims, char *shape, size_t cap)
{
    int len = snprintf(shape, cap, "[");
    for (int d = 0; d < rank && (size_t)len < cap; d++)
        len += snprintf(shape + len, cap - (size_t)len, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if ((size_t)len < cap)
        snprintf(shape + len, cap - (size_t)len, "]");
}

static int64_t element_count(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

/* A dtype's fg_dtype code (common/half.h) from its name. */
static int dtype_code(const char *name)
{
    return strcmp(name, "bf16") == 0 ? 1 : strcmp(name, "fp16") == 0 ? 2 : 0;
}

/* The layer's dtype: fg_dtype's code (common/half.h) and name. */
static int layer_dtype(fg_layer *layer, const char **name)
{
    const char *n = "fp32";
    fg_layer_dtype(layer, &n, NULL);
    if (name)
        *name = n;
    return dtype_code(n);
}

/* Whether the layer's input and output are channels last (the spec's `layout`). */
static bool layer_channels_last(fg_layer *layer)
{
    const char *l = "nchw";
    fg_layer_layout(layer, &l);
    return strcmp(l, "channels_last") == 0;
}

/* A logical (N, C, spatial...) shape in the order its elements sit in memory: unchanged, or
 * for a channels-last layer or block (N, spatial..., C). The safetensors files of `run`
 * (--input, --out) hold the tensors with their memory order's shape (safetensors has no
 * strides). */
static void memory_order(bool channels_last, int rank, int64_t dims[FG_MAX_DIMS])
{
    if (rank < 3 || !channels_last)
        return;
    int64_t c = dims[1];
    for (int d = 1; d < rank - 1; d++)
        dims[d] = dims[d + 1];
    dims[rank - 1] = c;
}

/* The input: from --input (checked against the layer), or random (rounded to the layer's
 * dtype: the values the GPU and the reference then read are the same). */
static float *make_input(const run_opts *o, fg_layer *layer, int64_t *batch, int64_t *count)
{
    int rank;
    int64_t dims[FG_MAX_DIMS];
    const char *dname;
    int dtype = layer_dtype(layer, &dname);
    static const char *const st_names[] = {"F32", "BF16", "F16"};
    if (!o->input) {
        fg_layer_input_shape(layer, o->batch, &rank, dims);
        *batch = o->batch;
        *count = 1;
        for (int d = 0; d < rank; d++)
            *count *= dims[d];
        float *x = malloc(sizeof(float) * (size_t)*count);
        if (x) {
            fg_random_uniform(x, (size_t)*count, (uint64_t)o->seed, 1, 0.0f, 1.0f);
            for (int64_t i = 0; dtype && i < *count; i++)
                x[i] = (float)fg_round_to_dtype(x[i], dtype);
        } else
            cli_error("out of memory for the input");
        return x;
    }
    fg_tensor_file f;
    fg_error err;
    if (fg_safetensors_read(o->input, &f, &err) != 0) {
        cli_error("%s", err.msg);
        return NULL;
    }
    const fg_tensor *t = fg_tensor_find(&f, "input");
    if (!t && f.n == 1)
        t = &f.tensors[0];
    float *x = NULL;
    char shown[512];
    if (t)
        fg_tensor_name_shown(t->name, shown, sizeof shown);
    if (!t) {
        cli_error("%s: no tensor named 'input' (and more than one tensor)", o->input);
    } else if (!t->data) {
        cli_error("%s: tensor '%s' is %s; fusegen needs %s", o->input, shown, t->dtype, st_names[dtype]);
    } else if (dtype && strcmp(t->dtype, st_names[dtype]) != 0) {
        cli_error("%s: tensor '%s' is %s, but the layer's input is %s (its spec's dtype = \"%s\")", o->input, shown,
                  t->dtype, st_names[dtype], dname);
    } else if (t->rank < 1 || t->dim[0] < 1 || t->dim[0] > INT32_MAX) {
        cli_error("%s: tensor '%s' has %s; the input's first dim is the batch, 1 or more", o->input, shown,
                  t->rank < 1 ? "no dims" : "a batch of 0");
    } else {
        fg_layer_input_shape(layer, t->dim[0], &rank, dims);
        memory_order(layer_channels_last(layer), rank, dims);
        bool ok = t->rank == rank;
        for (int d = 1; ok && d < rank; d++)
            ok = t->dim[d] == dims[d];
        if (!ok) {
            cli_error("%s: tensor '%s' does not have the layer's input shape [N, ...] (%d dims expected%s)", o->input,
                      shown, rank,
                      layer_channels_last(layer) ? "; layout \"channels_last\": the file holds it as [N, (D,) H, W, C]"
                                                 : "");
        } else {
            *batch = t->dim[0];
            *count = (int64_t)t->count;
            x = malloc(t->count * sizeof(float));
            if (x)
                memcpy(x, t->data, t->count * sizeof(float));
        }
    }
    fg_tensor_file_free(&f);
    return x;
}

static int bind_params(const run_opts *o, fg_layer *layer)
{
    if (o->weights) {
        if (fg_layer_bind_safetensors(layer, o->weights, 0) != FG_OK) {
            cli_error("%s", fg_last_error());
            return -1;
        }
        return 0;
    }
    if (fg_tools_bind_random(layer, (uint64_t)o->seed) != FG_OK) {
        cli_error("%s", fg_last_error());
        return -1;
    }
    return 0;
}

/* Runs on the GPU: copies in, poisons the output with NaN so unwritten elements show,
 * runs, copies back. Prints the time of the first run (JIT included). */
static int run_gpu(fg_context *ctx, fg_layer *layer, const float *x, int64_t n_in, float *y, int64_t n_out,
                   int64_t batch)
{
    CUdeviceptr dx = 0, dy = 0;
    int rc = -1, dtype = layer_dtype(layer, NULL);
    size_t elem = dtype ? 2 : sizeof(float); /* the input and output in the layer's dtype */
    if (fg_tools_alloc(ctx, elem * (size_t)n_in, &dx) != FG_OK || fg_tools_alloc(ctx, elem * (size_t)n_out, &dy) != FG_OK ||
        fg_tools_upload_io(ctx, dx, x, (size_t)n_in, dtype) != FG_OK ||
        fg_tools_fill_nan_io(ctx, dy, (size_t)n_out, dtype) != FG_OK) {
        cli_error("preparing device buffers: %s", fg_last_error());
        goto out;
    }
    double t0 = fg_seconds_now();
    if (fg_layer_run(layer, (void *)dx, (void *)dy, batch, NULL) != FG_OK || fg_tools_synchronize(ctx) != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    double first = fg_seconds_now() - t0;
    char prepared[160];
    fg_tools_describe_prepare(layer, prepared, sizeof prepared);
    fprintf(stderr, "first run %.1f ms; %s\n", first * 1e3, prepared);
    if (fg_tools_download_io(ctx, y, dy, (size_t)n_out, dtype) != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    rc = 0;
out:
    fg_tools_free(ctx, dx);
    fg_tools_free(ctx, dy);
    return rc;
}

/* The CPU reference's budget: direct loops in double run some 0.3-1e9 multiply-adds a
 * second, so past this a run takes minutes. */
#define REFERENCE_BUDGET 2e10
#define REFERENCE_REPORTED 1e9 /* progress lines past this much work */

typedef struct progress_state {
    double started;
    int last_tenth;
} progress_state;

static void report_progress(void *ctx, double done)
{
    progress_state *p = ctx;
    int tenth = (int)(done * 10);
    if (tenth > p->last_tenth && tenth < 10) {
        p->last_tenth = tenth;
        fprintf(stderr, "CPU reference: %d%% after %.0f s\n", tenth * 10, fg_seconds_now() - p->started);
    }
}

/* The samples the CPU reference will run: all of them for --device cpu; for --check the
 * first --check-samples, or all when a statistic spans the batch. */
static int64_t reference_samples(const run_opts *o, fg_layer *layer, int64_t batch)
{
    if (o->gpu && !o->check)
        return 0;
    int64_t samples = o->gpu && o->check_samples && o->check_samples < batch ? o->check_samples : batch;
    const fg_plan *plan = fg_tools_layer_plan(layer);
    for (int i = 0; i < plan->n_accums && samples < batch; i++)
        if (plan->accums[i].over_batch) {
            fprintf(stderr, "note: statistics span the batch; checking all %lld samples\n", (long long)batch);
            samples = batch;
        }
    return samples;
}

/* Whether the CPU reference may run on `samples` samples: not past the budget without
 * --force. Asked before anything is allocated or bound. */
static bool reference_allowed(const run_opts *o, fg_layer *layer, int64_t samples)
{
    double work = fg_tools_reference_work(layer, samples);
    if (work <= REFERENCE_BUDGET || o->force)
        return true;
    cli_error("the CPU reference would need about %.2g multiply-adds for %lld samples (minutes to hours; the budget "
              "is %.0e): pass --force to run it anyway%s",
              work, (long long)samples, REFERENCE_BUDGET,
              o->gpu ? ", or check fewer samples with --check-samples" : "");
    return false;
}

/* The CPU reference on `samples` samples, with progress lines on long runs. */
static fg_status run_reference(fg_layer *layer, const float *x, float *y, int64_t samples)
{
    double work = fg_tools_reference_work(layer, samples);
    progress_state p = {fg_seconds_now(), 0};
    if (work > REFERENCE_REPORTED)
        fprintf(stderr, "CPU reference: about %.2g multiply-adds\n", work);
    fg_status s = fg_tools_run_cpu(layer, x, y, samples, work > REFERENCE_REPORTED ? report_progress : NULL, &p);
    if (s != FG_OK)
        cli_error("%s", fg_last_error());
    return s;
}

/* --check: the output against the reference (`what`, computed on `samples` of `batch` samples
 * since t0) within the layer's accuracy bar (common/accuracy.h: atol = rtol = 1e-4 for exact
 * fp32 precision; for precision "tf32", which some layer of a block has when `tf32`, 5e-3 or
 * 4e-2 with bf16), plus 1 ulp of a bf16/fp16 dtype (the reference is rounded to it too:
 * compare.h); prints the line and returns whether it passed. */
static bool check_report(const float *y, const float *ref, int64_t n, const char *what, int64_t samples,
                         int64_t batch, double t0, int dtype, const char *dname, bool tf32)
{
    const double bar = fg_accuracy_bar(tf32, dtype);
    fg_comparison cmp;
    fg_compare_dtype(y, ref, (size_t)n, bar, bar, dtype ? 1.0 : 0.0, dtype, &cmp);
    char ulp[40] = "";
    if (dtype)
        snprintf(ulp, sizeof ulp, " + 1 ulp of %s", dname);
    const int exp10 = (int)floor(log10(bar) + 1e-9); /* the bar as the docs write it: 1e-4, 5e-3 */
    printf("check against the CPU reference (%s, %lld of %lld samples, %.1f s): max abs error %.3g, "
           "relative L2 error %.3g, %lld of %lld elements outside atol=rtol=%ge%d%s%s%s: %s\n",
           what, (long long)samples, (long long)batch, fg_seconds_now() - t0, cmp.max_abs, cmp.rel_l2,
           (long long)cmp.bad, (long long)cmp.count, bar / pow(10.0, exp10), exp10, ulp, tf32 ? " (precision tf32)" : "",
           cmp.nan ? " (NaN present)" : "", cmp.pass ? "PASS" : "FAIL");
    return cmp.pass;
}

/* Whether the layer's conv may use one TF32 (or half) product: the spec's precision "tf32". */
static bool layer_tf32(fg_layer *layer)
{
    const fg_layer_ir *ir = fg_tools_layer_ir(layer);
    return ir && ir->precision == FG_PRECISION_TF32;
}

/* The same for a block: any of its layers. */
static bool block_tf32(fg_block *block)
{
    int n = 0;
    fg_block_layer_count(block, &n);
    for (int i = 0; i < n; i++)
        if (layer_tf32(fg_tools_block_layer(block, i)))
            return true;
    return false;
}

/* `run` on a block spec (docs/spec.md, "Blocks"): random inputs (each input its own stream of
 * the seed), random or given parameters, the block on the GPU or the CPU reference, and
 * --check against the reference. */
static int run_block(const run_opts *o, fg_context *ctx, fg_block *block)
{
    int rc = EXIT_FAIL, n_inputs = 0;
    float *x[1 + FG_MAX_DIMS] = {0}, *y = NULL, *ref = NULL;
    CUdeviceptr dx[1 + FG_MAX_DIMS] = {0}, dy = 0;
    int64_t counts[1 + FG_MAX_DIMS] = {0};
    const int64_t batch = o->batch;
    /* every tensor of the block in its dtype and layout (the inputs rounded to the dtype here:
     * the values the GPU and the reference then read are the same, as for a layer) */
    const char *dname = "fp32", *lname = "nchw";
    fg_block_dtype(block, &dname, NULL);
    fg_block_layout(block, &lname);
    const int dtype = dtype_code(dname);
    const bool channels_last = strcmp(lname, "channels_last") == 0;
    const size_t elem = dtype ? 2 : sizeof(float);
    if (o->input) {
        cli_error("--input is not supported for a block yet: its inputs are random (--random SEED)");
        return EXIT_USAGE;
    }
    fg_block_input_count(block, &n_inputs);
    if (n_inputs > 1 + FG_MAX_DIMS) {
        cli_error("the block has too many inputs for run");
        return EXIT_FAIL;
    }
    for (int t = 0; t < n_inputs; t++) {
        int rank;
        int64_t dims[FG_MAX_DIMS];
        fg_block_input_info(block, t, batch, NULL, &rank, dims);
        counts[t] = element_count(rank, dims);
        if (!(x[t] = malloc(sizeof(float) * (size_t)counts[t]))) {
            cli_error("out of memory for the inputs");
            goto out;
        }
        fg_random_uniform(x[t], (size_t)counts[t], (uint64_t)o->seed, 1 + (uint64_t)t, 0.0f, 1.0f);
        for (int64_t i = 0; dtype && i < counts[t]; i++)
            x[t][i] = (float)fg_round_to_dtype(x[t][i], dtype);
    }
    int64_t samples = o->gpu && o->check_samples && o->check_samples < batch ? o->check_samples : batch;
    if (samples < batch && fg_tools_block_stats_over_batch(block)) {
        fprintf(stderr, "note: statistics span the batch; checking all %lld samples\n", (long long)batch);
        samples = batch;
    }
    double work = fg_tools_block_reference_work(block, samples);
    if ((!o->gpu || o->check) && work > REFERENCE_BUDGET && !o->force) {
        cli_error("the CPU reference would need about %.2g multiply-adds for %lld samples (the budget is %.0e): pass "
                  "--force to run it anyway%s",
                  work, (long long)samples, REFERENCE_BUDGET, o->gpu ? ", or check fewer samples with --check-samples" : "");
        goto out;
    }
    fg_status bs = o->weights ? fg_block_bind_safetensors(block, o->weights, 0)
                              : fg_tools_block_bind_random(block, (uint64_t)o->seed);
    if (bs != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    int rank;
    int64_t dims[FG_MAX_DIMS];
    fg_block_output_shape(block, batch, &rank, dims);
    int64_t n_out = element_count(rank, dims);
    if (!(y = malloc(sizeof(float) * (size_t)n_out))) {
        cli_error("out of memory for the output");
        goto out;
    }
    if (o->gpu) {
        const void *inputs[1 + FG_MAX_DIMS];
        for (int t = 0; t < n_inputs; t++) {
            if (fg_tools_alloc(ctx, elem * (size_t)counts[t], &dx[t]) != FG_OK ||
                fg_tools_upload_io(ctx, dx[t], x[t], (size_t)counts[t], dtype) != FG_OK) {
                cli_error("preparing device buffers: %s", fg_last_error());
                goto out;
            }
            inputs[t] = (const void *)dx[t];
        }
        if (fg_tools_alloc(ctx, elem * (size_t)n_out, &dy) != FG_OK ||
            fg_tools_fill_nan_io(ctx, dy, (size_t)n_out, dtype) != FG_OK) {
            cli_error("preparing device buffers: %s", fg_last_error());
            goto out;
        }
        double t0 = fg_seconds_now();
        if (fg_block_run(block, inputs, (void *)dy, batch, NULL) != FG_OK || fg_tools_synchronize(ctx) != FG_OK ||
            fg_tools_download_io(ctx, y, dy, (size_t)n_out, dtype) != FG_OK) {
            cli_error("%s", fg_last_error());
            goto out;
        }
        fprintf(stderr, "first run %.1f ms (JIT of every layer included)\n", (fg_seconds_now() - t0) * 1e3);
    } else {
        double t0 = fg_seconds_now();
        if (fg_block_run_cpu(block, (const float *const *)x, y, batch) != FG_OK) {
            cli_error("%s", fg_last_error());
            goto out;
        }
        fprintf(stderr, "CPU reference: %.1f ms\n", (fg_seconds_now() - t0) * 1e3);
    }
    char shape[128];
    shape_string(rank, dims, shape, sizeof shape);
    fg_tools_device device = {.name = "the CPU (reference)"};
    if (o->gpu)
        fg_tools_device_info(ctx, &device);
    int n_layers = 0;
    fg_block_layer_count(block, &n_layers);
    printf("block of %d layers: output %s%s on %s\n", n_layers, shape, channels_last ? " (channels last)" : "",
           device.name);
    if (o->out) {
        static const char *const st_names[] = {"F32", "BF16", "F16"};
        fg_tensor t = {.name = "output", .rank = rank, .count = (size_t)n_out, .data = y};
        snprintf(t.dtype, sizeof t.dtype, "%s", st_names[dtype]); /* the block's dtype */
        memcpy(t.dim, dims, sizeof(int64_t) * (size_t)rank);
        memory_order(channels_last, rank, t.dim); /* channels last: [N, (D,) H, W, C] */
        fg_error err;
        if (fg_safetensors_write(o->out, &t, 1, &err) != 0) {
            cli_error("%s", err.msg);
            goto out;
        }
        fprintf(stderr, "wrote %s\n", o->out);
    }
    rc = EXIT_OK;
    if (o->check) {
        int64_t per_out = n_out / batch;
        if (!(ref = malloc(sizeof(float) * (size_t)(per_out * batch)))) {
            cli_error("out of memory for the reference");
            rc = EXIT_FAIL;
            goto out;
        }
        /* the reference on the first `samples` samples: the inputs are sample-major */
        double t0 = fg_seconds_now();
        if (fg_block_run_cpu(block, (const float *const *)x, ref, samples) != FG_OK) {
            cli_error("%s", fg_last_error());
            rc = EXIT_FAIL;
            goto out;
        }
        if (!check_report(y, ref, per_out * samples, "float64 per layer", samples, batch, t0, dtype, dname,
                          block_tf32(block)))
            rc = EXIT_FAIL;
    }
out:
    for (int t = 0; t < n_inputs && t < 1 + FG_MAX_DIMS; t++) {
        free(x[t]);
        if (dx[t])
            fg_tools_free(ctx, dx[t]);
    }
    if (dy)
        fg_tools_free(ctx, dy);
    free(y);
    free(ref);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int p = parse(argc, argv, &o);
    if (p)
        return p == 1 ? EXIT_OK : p;
    fg_context_options copts;
    fg_context_options_init(&copts);
    copts.device = o.gpu ? 0 : -1;
    copts.arch = o.arch;
    copts.cache_dir = o.cache;
    copts.verbose = o.verbose;
    fg_context *ctx = NULL;
    fg_layer *layer = NULL;
    float *x = NULL, *y = NULL, *ref = NULL;
    int rc = EXIT_FAIL;
    if (fg_context_create(&copts, &ctx) != FG_OK) {
        cli_error("%s", fg_last_error());
        return EXIT_FAIL;
    }
    if (fg_layer_load_file(ctx, o.spec, &layer) != FG_OK) {
        /* a block spec: the block path (the layer loader says so, having loaded nothing) */
        fg_block *block = NULL;
        if (strstr(fg_last_error(), "the spec returns a block") && fg_block_load_file(ctx, o.spec, &block) == FG_OK) {
            rc = run_block(&o, ctx, block);
            fg_block_destroy(block);
            goto out;
        }
        fprintf(stderr, "%s\n", fg_last_error());
        goto out;
    }
    int64_t batch = 0, n_in = 0;
    if (!(x = make_input(&o, layer, &batch, &n_in)))
        goto out;
    int64_t samples = reference_samples(&o, layer, batch);
    if (!reference_allowed(&o, layer, samples) || bind_params(&o, layer) != 0)
        goto out;
    int rank;
    int64_t dims[FG_MAX_DIMS];
    fg_layer_output_shape(layer, batch, &rank, dims);
    int64_t n_out = element_count(rank, dims);
    if (!(y = malloc(sizeof(float) * (size_t)n_out))) {
        cli_error("out of memory for the output");
        goto out;
    }
    if (o.gpu) {
        if (run_gpu(ctx, layer, x, n_in, y, n_out, batch) != 0)
            goto out;
    } else {
        double t0 = fg_seconds_now();
        if (run_reference(layer, x, y, batch) != FG_OK)
            goto out;
        fprintf(stderr, "CPU reference: %.1f ms\n", (fg_seconds_now() - t0) * 1e3);
    }
    char shape[128];
    shape_string(rank, dims, shape, sizeof shape);
    fg_tools_device device = {.name = "the CPU (reference)"};
    if (o.gpu)
        fg_tools_device_info(ctx, &device);
    printf("%s: output %s%s on %s\n", fg_tools_layer_ir(layer)->name, shape,
           layer_channels_last(layer) ? " (channels last)" : "", device.name);
    if (o.out) {
        static const char *const st_names[] = {"F32", "BF16", "F16"};
        fg_tensor t = {.name = "output", .rank = rank, .count = (size_t)n_out, .data = y};
        snprintf(t.dtype, sizeof t.dtype, "%s", st_names[layer_dtype(layer, NULL)]); /* the layer's dtype */
        memcpy(t.dim, dims, sizeof(int64_t) * (size_t)rank);
        memory_order(layer_channels_last(layer), rank, t.dim); /* channels last: [N, (D,) H, W, C] */
        fg_error err;
        if (fg_safetensors_write(o.out, &t, 1, &err) != 0) {
            cli_error("%s", err.msg);
            goto out;
        }
        fprintf(stderr, "wrote %s\n", o.out);
    }
    rc = EXIT_OK;
    if (o.check) {
        int64_t per_out = n_out / batch;
        if (!(ref = malloc(sizeof(float) * (size_t)(per_out * samples)))) {
            cli_error("out of memory for the reference");
            rc = EXIT_FAIL;
            goto out;
        }
        double t0 = fg_seconds_now();
        if (run_reference(layer, x, ref, samples) != FG_OK) {
            rc = EXIT_FAIL;
            goto out;
        }
        const char *dname;
        int dtype = layer_dtype(layer, &dname);
        if (!check_report(y, ref, per_out * samples, "float64", samples, batch, t0, dtype, dname, layer_tf32(layer)))
            rc = EXIT_FAIL;
    }
out:
    free(x);
    free(y);
    free(ref);
    if (layer)
        fg_layer_destroy(layer);
    fg_context_destroy(ctx);
    return rc;
}
