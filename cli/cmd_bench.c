/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <math.h>
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
    "Times the layer's whole forward (all its kernels) with CUDA events on random data, the L2\n"
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

static double compulsory_bytes(const fg_layer_ir *ir, int64_t batch)
{
    /* the input and output in the layer's dtype (2 bytes for bf16/fp16), parameters float32 */
    double b = (double)fg_dtype_size(ir->dtype) * (double)batch *
               (double)(fg_shape_sample_count(&ir->input) + fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out));
    for (int i = 0; i < ir->n_params; i++)
        b += 4.0 * (double)ir->params[i].count;
    return b;
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
    int rc = EXIT_FAIL;
    fg_context *ctx = NULL;
    fg_layer *layer = NULL;
    CUdeviceptr dx = 0, dy = 0;
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
    if (fg_layer_load_file(ctx, argv[optind], &layer) != FG_OK) {
        fprintf(stderr, "%s\n", fg_last_error());
        goto out;
    }
    const fg_layer_ir *ir = fg_tools_layer_ir(layer);
    int64_t n_in = batch * fg_shape_sample_count(&ir->input);
    int64_t n_out = batch * fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out);
    if (!(x = malloc(sizeof(float) * (size_t)n_in)) || !(times = malloc(sizeof(double) * (size_t)iters))) {
        cli_error("out of memory");
        goto out;
    }
    fg_random_uniform(x, (size_t)n_in, 0, 1, 0.0f, 1.0f);
    char prepared[160];
    if (fg_tools_bind_random(layer, 0) != FG_OK || fg_tools_prepare(layer, batch) != FG_OK ||
        fg_tools_describe_prepare(layer, prepared, sizeof prepared) != FG_OK ||
        fg_tools_alloc(ctx, sizeof(float) * (size_t)n_in, &dx) != FG_OK ||
        fg_tools_alloc(ctx, sizeof(float) * (size_t)n_out, &dy) != FG_OK ||
        fg_tools_upload_io(ctx, dx, x, (size_t)n_in, (int)ir->dtype) != FG_OK || /* in the layer's dtype */
        fg_tools_time_runs(layer, dx, dy, batch, warmup, iters, times) != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    double med = times[iters / 2], lo = times[iters / 10], hi = times[iters - 1 - iters / 10];
    double flops = conv_flops(ir, batch), bytes = compulsory_bytes(ir, batch);
    double floor_ms = fmax(flops / (fma * 1e12), bytes / (bw * 1e12)) * 1e3;
    printf("%s on %s, batch %ld: median %.4f ms (p10 %.4f, p90 %.4f, %ld runs), %.1f TFLOP/s, %.2f TB/s compulsory, "
           "floor %.4f ms = %.0f%% of the floor's speed; %s\n",
           ir->name, device.name, batch, med, lo, hi, iters, flops / (med * 1e-3) / 1e12,
           bytes / (med * 1e-3) / 1e12, floor_ms, 100.0 * floor_ms / med, prepared);
    rc = EXIT_OK;
out:
    if (ctx) {
        fg_tools_free(ctx, dx);
        fg_tools_free(ctx, dy);
    }
    if (layer)
        fg_layer_destroy(layer);
    fg_context_destroy(ctx);
    free(x);
    free(times);
    return rc;
}
