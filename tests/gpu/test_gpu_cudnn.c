/* SPDX-License-Identifier: Apache-2.0 */
/* cuDNN as a second, independent oracle for the convolution: for the conv of every spec in
 * specs/ and of a few odd shapes, fusegen's generated conv (a conv-only layer) and cuDNN's
 * (fp32 FMA math, no TF32) run on the same data, and both are checked against the CPU
 * float64 reference. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../gen/spec_loader.h"
#include "../../runtime/cudnn_conv.h"
#include "../../runtime/random_init.h"
#include "gpu_harness.h"

/* A conv-only spec with the same conv as `ir`. */
static void conv_only(const fg_layer_ir *ir, char *buf, size_t cap)
{
    const fg_op *c = &ir->ops[0];
    size_t len = (size_t)snprintf(buf, cap, "return layer \"%s_conv\" {\n  input = { \"N\"", ir->name);
    for (int d = 1; d < ir->input.rank; d++)
        len += (size_t)snprintf(buf + len, cap - len, ", %" PRId64, ir->input.dim[d]);
    len += (size_t)snprintf(buf + len, cap - len, " },\n  conv%dd { out_channels = %" PRId64 ", groups = %" PRId64
                                                  ", bias = %s",
                            c->spatial, c->out_channels, c->groups, c->bias ? "true" : "false");
    static const char *const fields[] = {"kernel", "stride", "padding", "dilation"};
    const int *vals[] = {c->kernel, c->stride, c->padding, c->dilation};
    for (int f = 0; f < 4; f++) {
        len += (size_t)snprintf(buf + len, cap - len, ", %s = {", fields[f]);
        for (int i = 0; i < c->spatial; i++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? ", " : " ", vals[f][i]);
        len += (size_t)snprintf(buf + len, cap - len, " }");
    }
    snprintf(buf + len, cap - len, " },\n}\n");
}

static int check_cudnn(fg_context *ctx, const char *name, const char *src, int64_t batch, uint64_t seed)
{
    fg_layer *layer = NULL;
    if (fg_layer_load_string(ctx, name, src, &layer) != FG_OK) {
        printf("FAILED %s: %s\n", name, fg_last_error());
        return 1;
    }
    const fg_layer_ir *ir = fg_tools_layer_ir(layer);
    int64_t n_in = batch * fg_shape_sample_count(&ir->input);
    int64_t n_out = batch * fg_shape_sample_count(&ir->ops[0].out);
    float *x = malloc(sizeof(float) * (size_t)n_in), *y = malloc(sizeof(float) * (size_t)n_out);
    float *yc = malloc(sizeof(float) * (size_t)n_out), *ref = malloc(sizeof(float) * (size_t)n_out);
    float *params[FG_MAX_PARAMS] = {0};
    CUdeviceptr dx = 0, dy = 0, dyc = 0, dw = 0, db = 0;
    fg_cudnn_conv *conv = NULL;
    fg_error err;
    int failed = 1;
    fg_random_uniform(x, (size_t)n_in, seed, 1, 0.0f, 1.0f);
    const fg_op *c = &ir->ops[0];
    /* the layer and cuDNN get the same random parameters */
    for (int i = 0; i < ir->n_params; i++)
        if (!(params[i] = malloc(sizeof(float) * (size_t)ir->params[i].count))) {
            printf("FAILED %s: out of memory\n", name);
            goto out;
        }
    fg_random_params(ir, seed, params);
    for (int i = 0; i < ir->n_params; i++)
        if (fg_layer_bind_host(layer, ir->params[i].name, params[i], sizeof(float) * (size_t)ir->params[i].count)) {
            printf("FAILED %s: bind: %s\n", name, fg_last_error());
            goto out;
        }
    const float *weight = params[c->weight_param];
    const float *bias = c->bias ? params[c->bias_param] : NULL;
    size_t wbytes = sizeof(float) * (size_t)ir->params[c->weight_param].count;
    size_t bbytes = sizeof(float) * (size_t)c->out_channels;
    if (fg_tools_alloc(ctx, sizeof(float) * (size_t)n_in, &dx) || fg_tools_alloc(ctx, sizeof(float) * (size_t)n_out, &dy) ||
        fg_tools_alloc(ctx, sizeof(float) * (size_t)n_out, &dyc) || fg_tools_alloc(ctx, wbytes, &dw) ||
        (c->bias && fg_tools_alloc(ctx, bbytes, &db)) || fg_tools_upload(ctx, dx, x, sizeof(float) * (size_t)n_in) ||
        fg_tools_upload(ctx, dw, weight, wbytes) || (c->bias && fg_tools_upload(ctx, db, bias, bbytes)) ||
        fg_tools_fill_nan(ctx, dy, (size_t)n_out) || fg_tools_fill_nan(ctx, dyc, (size_t)n_out)) {
        printf("FAILED %s: device buffers: %s\n", name, fg_last_error());
        goto out;
    }
    if (fg_layer_run(layer, (void *)dx, (void *)dy, batch, NULL) != FG_OK) {
        printf("FAILED %s: fusegen: %s\n", name, fg_last_error());
        goto out;
    }
    if (fg_cudnn_conv_create(c, false, &conv, &err) != 0 ||
        fg_cudnn_conv_run(conv, batch, dx, dw, db, dyc, NULL, &err) != 0) {
        printf("FAILED %s: cuDNN: %s\n", name, err.msg);
        goto out;
    }
    if (fg_tools_synchronize(ctx) || fg_tools_download(ctx, y, dy, sizeof(float) * (size_t)n_out) ||
        fg_tools_download(ctx, yc, dyc, sizeof(float) * (size_t)n_out)) {
        printf("FAILED %s: running: %s\n", name, fg_last_error());
        goto out;
    }
    if (fg_layer_run_cpu(layer, x, ref, batch) != FG_OK) {
        printf("FAILED %s: reference: %s\n", name, fg_last_error());
        goto out;
    }
    double max_fc = 0, max_fr = 0, max_cr = 0;
    long long bad = 0;
    for (int64_t i = 0; i < n_out; i++) {
        double a = y[i], b = yc[i], r = ref[i];
        double fc = fabs(a - b), fr = fabs(a - r), cr = fabs(b - r);
        if (!(fc <= 1e-4 + 1e-4 * fabs(b)) || !(fr <= 1e-4 + 1e-4 * fabs(r)) || !(cr <= 1e-4 + 1e-4 * fabs(r)))
            bad++;
        max_fc = fc > max_fc ? fc : max_fc;
        max_fr = fr > max_fr ? fr : max_fr;
        max_cr = cr > max_cr ? cr : max_cr;
    }
    failed = bad != 0;
    printf("%s %-40s batch %lld: fusegen-cuDNN %.3g, fusegen-reference %.3g, cuDNN-reference %.3g (cuDNN %s)\n",
           failed ? "FAILED" : "ok    ", name, (long long)batch, max_fc, max_fr, max_cr, fg_cudnn_conv_algorithm(conv));
out:
    fg_cudnn_conv_destroy(conv);
    CUdeviceptr bufs[] = {dx, dy, dyc, dw, db};
    for (int i = 0; i < 5; i++)
        fg_tools_free(ctx, bufs[i]);
    for (int i = 0; i < FG_MAX_PARAMS; i++)
        free(params[i]);
    free(x);
    free(y);
    free(yc);
    free(ref);
    fg_layer_destroy(layer);
    return failed;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "specs";
    fg_context *ctx = gpu_open("test_gpu_cudnn");
    static const char *const specs[] = {"kb79", "kb21", "kb23", "kb85", "kb17", "kb92"};
    int failed = 0, cases = 0;
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        char path[1024], src[4096];
        snprintf(path, sizeof path, "%s/%s.lua", dir, specs[i]);
        fg_layer_ir ir;
        fg_error err;
        if (fg_spec_load_file(path, &ir, &err) != 0) {
            printf("FAILED %s: %s\n", path, err.msg);
            failed++;
            continue;
        }
        conv_only(&ir, src, sizeof src);
        failed += check_cudnn(ctx, ir.name, src, 2, 40 + i);
        cases++;
    }
    static const char *const odd[] = {
        "return layer \"odd_a\" { input = { \"N\", 5, 23, 19 }, conv2d { out_channels = 7, kernel = 3, stride = 2, "
        "padding = 1 } }",
        "return layer \"odd_b\" { input = { \"N\", 6, 17, 17 }, conv2d { out_channels = 9, kernel = { 2, 3 }, "
        "dilation = 2, groups = 3, bias = false } }",
        "return layer \"odd_c\" { input = { \"N\", 3, 9, 11, 10 }, conv3d { out_channels = 5, kernel = 3, "
        "padding = { 0, 1, 2 }, stride = { 1, 2, 1 } } }",
    };
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
        failed += check_cudnn(ctx, "odd", odd[i], 3, 70 + i);
        cases++;
    }
    gpu_close(ctx);
    printf("%d cases, %d failed\n", cases, failed);
    return failed ? 1 : 0;
}
