#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/api_internal.h"
#include "../runtime/nvrtc_compiler.h"
#include "../runtime/random_init.h"
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

typedef struct gpu {
    fg_context *ctx;
    const fg_cuda *cu;
    CUstream stream;
    CUevent start, stop;
    CUdeviceptr flush;
    size_t flush_bytes;
} gpu;

static int check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 0;
    fg_error err;
    fg_cuda_fail(&err, r, what);
    cli_error("%s", err.msg);
    return -1;
}

static int gpu_open(gpu *g, const char *cache)
{
    memset(g, 0, sizeof *g);
    fg_context_options o;
    fg_context_options_init(&o);
    o.cache_dir = cache;
    if (fg_context_create(&o, &g->ctx) != FG_OK) {
        cli_error("%s", fg_last_error());
        return -1;
    }
    g->cu = g->ctx->cu;
    fg_api_enter(g->ctx);
    int l2 = 0;
    g->cu->DeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, g->ctx->dev);
    g->flush_bytes = (size_t)(l2 > 0 ? l2 : 64 << 20) * 4;
    if (check(g->cu->StreamCreate(&g->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
        check(g->cu->EventCreate(&g->start, 0), "cuEventCreate") ||
        check(g->cu->EventCreate(&g->stop, 0), "cuEventCreate") ||
        check(g->cu->MemAlloc(&g->flush, g->flush_bytes), "allocating the L2 flush buffer"))
        return -1;
    return 0;
}

static void gpu_close(gpu *g)
{
    if (!g->cu)
        return;
    if (g->flush)
        g->cu->MemFree(g->flush);
    if (g->start)
        g->cu->EventDestroy(g->start);
    if (g->stop)
        g->cu->EventDestroy(g->stop);
    if (g->stream)
        g->cu->StreamDestroy(g->stream);
    fg_context_destroy(g->ctx);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- ceilings ------------------------------------------------------------------------- */

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

static int measure_ceilings(gpu *g, double *fma_tflops, double *copy_tbs)
{
    const fg_cuda *cu = g->cu;
    fg_compiled c;
    fg_error err;
    if (fg_nvrtc_compile(fma_source, "fma_peak.cu", g->ctx->arch, NULL, &c, &err) != 0) {
        cli_error("%s", err.msg);
        return -1;
    }
    CUmodule mod;
    CUfunction fn;
    int rc = check(cu->ModuleLoadData(&mod, c.cubin), "loading the FMA kernel");
    fg_compiled_free(&c);
    if (rc || check(cu->ModuleGetFunction(&fn, mod, "fma_peak"), "fma_peak"))
        return -1;
    float seed = 1.0f;
    int iters = 4096;
    CUdeviceptr out = g->flush;
    void *args[] = {&out, &seed, &iters};
    unsigned blocks = (unsigned)g->ctx->sm_count * 8, threads = 256;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        cu->EventRecord(g->start, g->stream);
        if (check(cu->LaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, g->stream, args, NULL), "fma_peak"))
            return -1;
        cu->EventRecord(g->stop, g->stream);
        cu->EventSynchronize(g->stop);
        float ms = 0;
        cu->EventElapsedTime(&ms, g->start, g->stop);
        double flops = 2.0 * blocks * threads * (double)iters * 16 * 8;
        if (rep > 0 && flops / (ms * 1e-3) > best)
            best = flops / (ms * 1e-3);
    }
    cu->ModuleUnload(mod);
    *fma_tflops = best / 1e12;
    /* device-to-device copy of half the flush buffer onto the other half */
    size_t half = g->flush_bytes / 2;
    double best_bw = 0;
    for (int rep = 0; rep < 6; rep++) {
        cu->EventRecord(g->start, g->stream);
        if (check(cu->MemcpyDtoDAsync(g->flush + half, g->flush, half, g->stream), "copy"))
            return -1;
        cu->EventRecord(g->stop, g->stream);
        cu->EventSynchronize(g->stop);
        float ms = 0;
        cu->EventElapsedTime(&ms, g->start, g->stop);
        if (rep > 0 && 2.0 * (double)half / (ms * 1e-3) > best_bw)
            best_bw = 2.0 * (double)half / (ms * 1e-3);
    }
    *copy_tbs = best_bw / 1e12;
    return 0;
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
    double b = 4.0 * (double)batch *
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
            if ((batch = cli_parse_positive("bench", "--batch", optarg)) < 0)
                return EXIT_USAGE;
            break;
        case 'i':
            if ((iters = cli_parse_positive("bench", "--iters", optarg)) < 0)
                return EXIT_USAGE;
            break;
        case 'w':
            if ((warmup = cli_parse_positive("bench", "--warmup", optarg)) < 0)
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
            cache = optarg;
            break;
        default:
            return cli_usage_error("bench", "unknown option");
        }
    }
    if (!ceilings_only && argc - optind != 1)
        return cli_usage_error("bench", "expects exactly one SPEC (or --ceilings)");
    gpu g;
    int rc = EXIT_FAIL;
    fg_layer *layer = NULL;
    CUdeviceptr dx = 0, dy = 0;
    float *x = NULL;
    double *times = NULL;
    if (gpu_open(&g, cache) != 0)
        goto out;
    if (ceilings_only || fma == 0 || bw == 0) {
        double f, b;
        if (measure_ceilings(&g, &f, &b) != 0)
            goto out;
        if (fma == 0)
            fma = f;
        if (bw == 0)
            bw = b;
        printf("ceilings on %s: fp32 FMA %.1f TFLOP/s, device copy %.2f TB/s (bytes read + written)\n",
               g.ctx->device_name, f, b);
        if (ceilings_only) {
            rc = EXIT_OK;
            goto out;
        }
    }
    if (fg_layer_load_file(g.ctx, argv[optind], &layer) != FG_OK) {
        fprintf(stderr, "%s\n", fg_last_error());
        goto out;
    }
    const fg_layer_ir *ir = &layer->ir;
    int64_t n_in = batch * fg_shape_sample_count(&ir->input);
    int64_t n_out = batch * fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out);
    if (!(x = malloc(sizeof(float) * (size_t)n_in)) || !(times = malloc(sizeof(double) * (size_t)iters))) {
        cli_error("out of memory");
        goto out;
    }
    fg_random_uniform(x, (size_t)n_in, 0, 1, 0.0f, 1.0f);
    if (fg_layer_bind_random(layer, 0) != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    if (fg_layer_prepare(layer) != FG_OK) {
        cli_error("%s", fg_last_error());
        goto out;
    }
    char prepared[160];
    fg_layer_describe_prepare(layer, prepared, sizeof prepared);
    fg_api_enter(g.ctx);
    if (check(g.cu->MemAlloc(&dx, sizeof(float) * (size_t)n_in), "input") ||
        check(g.cu->MemAlloc(&dy, sizeof(float) * (size_t)n_out), "output") ||
        check(g.cu->MemcpyHtoD(dx, x, sizeof(float) * (size_t)n_in), "input copy"))
        goto out;
    for (long i = 0; i < warmup + iters; i++) {
        if (check(g.cu->MemsetD8Async(g.flush, (unsigned char)i, g.flush_bytes, g.stream), "L2 flush"))
            goto out;
        g.cu->EventRecord(g.start, g.stream);
        if (fg_layer_run(layer, (void *)dx, (void *)dy, batch, g.stream) != FG_OK) {
            cli_error("%s", fg_last_error());
            goto out;
        }
        g.cu->EventRecord(g.stop, g.stream);
        if (check(g.cu->EventSynchronize(g.stop), "running the layer"))
            goto out;
        float ms = 0;
        g.cu->EventElapsedTime(&ms, g.start, g.stop);
        if (i >= warmup)
            times[i - warmup] = ms;
    }
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    double med = times[iters / 2], lo = times[iters / 10], hi = times[iters - 1 - iters / 10];
    double flops = conv_flops(ir, batch), bytes = compulsory_bytes(ir, batch);
    double floor_ms = fmax(flops / (fma * 1e12), bytes / (bw * 1e12)) * 1e3;
    printf("%s on %s, batch %ld: median %.4f ms (p10 %.4f, p90 %.4f, %ld runs), %.1f TFLOP/s, %.2f TB/s compulsory, "
           "floor %.4f ms = %.0f%% of the floor's speed; %s\n",
           ir->name, g.ctx->device_name, batch, med, lo, hi, iters, flops / (med * 1e-3) / 1e12,
           bytes / (med * 1e-3) / 1e12, floor_ms, 100.0 * floor_ms / med,
           prepared);
    rc = EXIT_OK;
out:
    if (dx)
        g.cu->MemFree(dx);
    if (dy)
        g.cu->MemFree(dy);
    if (layer)
        fg_layer_destroy(layer);
    gpu_close(&g);
    free(x);
    free(times);
    return rc;
}
