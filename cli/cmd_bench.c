/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/random_init.h"
#include "../runtime/tools.h"
#include "cli.h"
#include "fusegen.h"

static const char usage[] =
    "usage: fusegen bench SPEC [--batch N] [--iters N] [--warmup N]\n"
    "       fusegen bench --ceilings\n"
    "\n"
    "Times the layer's whole forward (all its kernels), or a block's (all its layers, as\n"
    "fg_block_run runs them), with CUDA events on random data, the L2\n"
    "cache flushed before each trial and warm-up runs excluded, and reports the median, the\n"
    "spread, achieved FLOP/s and bytes/s, and the fraction of the hardware floor\n"
    "max(conv FLOPs / FMA rate, compulsory bytes / copy bandwidth). The rates are measured in\n"
    "the same process first (as --ceilings does) unless given.\n"
    "\n"
    "options:\n"
    "  --batch N          samples (default: 128)\n"
    "  --iters N          timed runs (default: 40)\n"
    "  --warmup N         untimed runs first (default: 5)\n"
    "  --fma-tflops X     use X as the fp32 FMA rate instead of measuring it\n"
    "  --copy-tbs X       use X as the copy bandwidth (bytes read + written) instead of measuring it\n"
    "  --ceilings         only measure and print the two rates\n"
    "  --cache DIR        user kernel cache\n";

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- the layer ------------------------------------------------------------------------ */

static double conv_flops(const fg_layer_ir *ir, int64_t batch)
{
    const fg_op *conv = &ir->ops[0];
    double taps = 1;
    for (int i = 0; i < conv->spatial; i++)
        taps *= conv->kernel[i];
    return 2.0 * (double)batch * (double)fg_shape_sample_count(&conv->out) * (double)(conv->in.dim[1] / conv->groups) *
           taps;
}

/* The spec's conv FLOPs and compulsory bytes for `batch` samples: its inputs and output once
 * in its dtype (2 bytes for bf16/fp16), its parameters once in float32 (a block's, shared by
 * name, once; its tensors between layers count as nothing: they are not compulsory). */
static void spec_work(const fg_block_ir *spec, int64_t batch, double *flops, double *bytes)
{
    const fg_layer_ir *first = &spec->layers[0];
    double samples = 0; /* of the inputs and the output */
    if (spec->single) {
        samples = (double)(fg_shape_sample_count(&first->input) + fg_shape_sample_count(&first->ops[first->n_ops - 1].out));
    } else {
        for (int t = 0; t < spec->n_inputs; t++)
            samples += (double)fg_shape_sample_count(&spec->tensors[t].shape);
        samples += (double)fg_shape_sample_count(&spec->tensors[spec->output].shape);
    }
    *bytes = (double)fg_dtype_size(first->dtype) * (double)batch * samples; /* a block's layers have its dtype */
    *flops = 0;
    for (int l = 0; l < spec->n_layers; l++) {
        const fg_layer_ir *ir = &spec->layers[l];
        *flops += conv_flops(ir, batch);
        for (int i = 0; i < ir->n_params; i++)
            if (fg_block_param_first_use(spec, l, i))
                *bytes += 4.0 * (double)ir->params[i].count;
    }
}

/* The spec loaded on the GPU with random parameters and prepared for `batch`: a layer or a
 * block, either timed by the same loop (runtime/tools.c). */
typedef struct bench_target {
    fg_layer *layer;
    fg_block *block;
} bench_target;

static fg_status target_load(fg_context *ctx, const fg_block_ir *spec, const char *path, int64_t batch,
                             bench_target *t, char *prepared, size_t cap)
{
    if (spec->single) {
        fg_status s = fg_layer_load_file(ctx, path, &t->layer);
        if (s == FG_OK && (s = fg_tools_bind_random(t->layer, 0)) == FG_OK && (s = fg_tools_prepare(t->layer, batch)) == FG_OK)
            s = fg_tools_describe_prepare(t->layer, prepared, cap);
        return s;
    }
    fg_status s = fg_block_load_file(ctx, path, &t->block);
    if (s == FG_OK && (s = fg_tools_block_bind_random(t->block, 0)) == FG_OK &&
        (s = fg_tools_block_prepare(t->block, batch)) == FG_OK)
        s = fg_tools_block_describe_prepare(t->block, prepared, cap);
    return s;
}

static fg_status target_time(const bench_target *t, const void *const *inputs, void *output, int64_t batch,
                             long warmup, long iters, double *times)
{
    return t->layer ? fg_tools_time_runs(t->layer, (CUdeviceptr)inputs[0], (CUdeviceptr)output, batch, warmup, iters, times)
                    : fg_tools_time_block_runs(t->block, inputs, output, batch, warmup, iters, times);
}

int cmd_bench(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, 0, 'h'},        {"batch", required_argument, 0, 'b'},
        {"iters", required_argument, 0, 'i'}, {"warmup", required_argument, 0, 'w'},
        {"fma-tflops", required_argument, 0, 'f'}, {"copy-tbs", required_argument, 0, 'c'},
        {"ceilings", no_argument, 0, 'C'},    {"cache", required_argument, 0, 'd'},
        {0, 0, 0, 0}};
    long batch = 128, iters = 40, warmup = 5;
    double fma = 0, bw = 0;
    int ceilings_only = 0;
    const char *cache = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(usage, stdout);
            return EXIT_OK;
        case 'b':
            if ((batch = cli_parse_positive("bench", "--batch", optarg, INT32_MAX)) < 0)
                return EXIT_USAGE;
            break;
        case 'i':
            if ((iters = cli_parse_positive("bench", "--iters", optarg, 1000000)) < 0)
                return EXIT_USAGE;
            break;
        case 'w':
            if ((warmup = cli_parse_positive("bench", "--warmup", optarg, 1000000)) < 0)
                return EXIT_USAGE;
            break;
        case 'f':
            fma = atof(optarg);
            if (!(fma > 0))
                return cli_usage_error("bench", "--fma-tflops expects a positive number");
            break;
        case 'c':
            bw = atof(optarg);
            if (!(bw > 0))
                return cli_usage_error("bench", "--copy-tbs expects a positive number");
            break;
        case 'C':
            ceilings_only = 1;
            break;
        case 'd':
            if (cli_parse_dir("bench", "--cache", optarg, &cache))
                return EXIT_USAGE;
            break;
        default:
            return cli_usage_error("bench", "unknown option");
        }
    }
    if (!ceilings_only && argc - optind != 1)
        return cli_usage_error("bench", "expects exactly one SPEC (or --ceilings)");
    const char *path = ceilings_only ? NULL : argv[optind];
    /* the spec first: a bad one is an error whether or not there is a GPU */
    static fg_block_ir spec;
    if (path && cli_load_spec(path, NULL, &spec) != 0) /* (its inputs: the same on any target) */
        return EXIT_FAIL;
    int rc = EXIT_FAIL, n_inputs = path ? (spec.single ? 1 : spec.n_inputs) : 0;
    fg_context *ctx = NULL;
    bench_target target = {0};
    CUdeviceptr dx[1 + FG_MAX_BLOCK_INPUTS] = {0}, dy = 0;
    float *x = NULL;
    double *times = NULL;
    fg_context_options copts;
    fg_context_options_init(&copts);
    copts.cache_dir = cache;
    fg_tools_device device;
    if (fg_context_create(&copts, &ctx) != FG_OK || fg_tools_device_info(ctx, &device) != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    if (ceilings_only || fma == 0 || bw == 0) {
        double f, b;
        if (fg_tools_ceilings(ctx, &f, &b) != FG_OK) {
            cli_error("%s", fg_last_error());
            goto out;
        }
        if (fma == 0)
            fma = f;
        if (bw == 0)
            bw = b;
        printf("ceilings on %s: fp32 FMA %.1f TFLOP/s, device copy %.2f TB/s (bytes read + written)\n", device.name, f,
               b);
        if (ceilings_only) {
            rc = EXIT_OK;
            goto out;
        }
    }
    char prepared[160];
    if (target_load(ctx, &spec, path, batch, &target, prepared, sizeof prepared) != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    /* random inputs in the spec's dtype, each its own stream of seed 0 (a layer's: stream 1) */
    const fg_layer_ir *first = &spec.layers[0];
    const void *inputs[1 + FG_MAX_BLOCK_INPUTS];
    for (int t = 0; t < n_inputs; t++) {
        int64_t n = batch * fg_shape_sample_count(spec.single ? &first->input : &spec.tensors[t].shape);
        free(x);
        if (!(x = malloc(sizeof(float) * (size_t)n))) {
            cli_error("out of memory");
            goto out;
        }
        fg_random_uniform(x, (size_t)n, 0, 1 + (uint64_t)t, 0.0f, 1.0f);
        if (fg_tools_alloc(ctx, sizeof(float) * (size_t)n, &dx[t]) != FG_OK ||
            fg_tools_upload_io(ctx, dx[t], x, (size_t)n, (int)first->dtype) != FG_OK) {
            cli_error("%s", fg_last_error());
            goto out;
        }
        inputs[t] = (const void *)dx[t];
    }
    int64_t n_out = batch * fg_shape_sample_count(spec.single ? &first->ops[first->n_ops - 1].out
                                                              : &spec.tensors[spec.output].shape);
    if (!(times = malloc(sizeof(double) * (size_t)iters))) {
        cli_error("out of memory");
        goto out;
    }
    if (fg_tools_alloc(ctx, sizeof(float) * (size_t)n_out, &dy) != FG_OK ||
        target_time(&target, inputs, (void *)dy, batch, warmup, iters, times) != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    double med = times[iters / 2], lo = times[iters / 10], hi = times[iters - 1 - iters / 10];
    double flops, bytes;
    spec_work(&spec, batch, &flops, &bytes);
    double floor_ms = fmax(flops / (fma * 1e12), bytes / (bw * 1e12)) * 1e3;
    printf("%s on %s, batch %ld: median %.4f ms (p10 %.4f, p90 %.4f, %ld runs), %.1f TFLOP/s, %.2f TB/s compulsory, "
           "floor %.4f ms = %.0f%% of the floor's speed; %s\n",
           spec.single ? first->name : spec.name, device.name, batch, med, lo, hi, iters, flops / (med * 1e-3) / 1e12,
           bytes / (med * 1e-3) / 1e12, floor_ms, 100.0 * floor_ms / med, prepared);
    rc = EXIT_OK;
out:
    if (ctx) {
        for (int t = 0; t < n_inputs; t++)
            fg_tools_free(ctx, dx[t]);
        fg_tools_free(ctx, dy);
    }
    if (target.layer)
        fg_layer_destroy(target.layer);
    if (target.block)
        fg_block_destroy(target.block);
    fg_context_destroy(ctx);
    if (path)
        fg_block_ir_free(&spec);
    free(x);
    free(times);
    return rc;
}
