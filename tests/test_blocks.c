/* SPDX-License-Identifier: Apache-2.0 */
/* Blocks (gen/block.h, docs/spec.md "Blocks"): spec errors (file, line, field), the wiring
 * and run order, and the CPU reference of a block against an independent computation: its
 * layers as single-layer specs, run one by one with the single-layer reference, and the
 * residual / time embedding added by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "block.h"
#include "block_specs.h"
#include "cpu_reference.h"
#include "fusegen.h"
#include "render.h"
#include "spec_loader.h"
#include "test_util.h"
#include "tools.h"

static fg_block_ir *load_block(const char *src)
{
    fg_block_ir *b = calloc(1, sizeof *b);
    fg_error err;
    if (fg_block_spec_load_string("blk.lua", src, strlen(src), b, &err) != 0)
        fail_msg("block refused: %s", err.msg);
    return b;
}

static void free_block(fg_block_ir *b)
{
    fg_block_ir_free(b);
    free(b);
}

static void expect_error(const char *src, const char *fragment)
{
    fg_block_ir b;
    fg_error err;
    int rc = fg_block_spec_load_string("blk.lua", src, strlen(src), &b, &err);
    fg_block_ir_free(&b);
    if (rc == 0)
        fail_msg("accepted, expected an error with: %s\n%s", fragment, src);
    fgt_assert_contains_at(err.msg, fragment, __FILE__, __LINE__);
}

/* line 1 block, 2 input, then the layers from line 3 */
#define BLOCK_HDR "return block \"b\" {\n  input = { \"N\", 4, 6, 6 },\n"

static void errors(void **state)
{
    (void)state;
    /* an unknown `from`, with the nearest name */
    expect_error(BLOCK_HDR "  layer \"alpha\" { conv2d { name = \"c1\", out_channels = 4, kernel = 1 } },\n"
                           "  layer \"beta\" { from = \"alpah\", conv2d { name = \"c2\", out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:4: layer: field 'from' names no tensor of the block: 'alpah' (did you mean 'alpha'?)");
    /* an unknown tensor operand */
    expect_error(BLOCK_HDR "  layer \"a\" { conv2d { out_channels = 4, kernel = 1 },\n"
                           "    add { tensor = \"skip\" } },\n}\n",
                 "blk.lua:4: add: field 'tensor' names no tensor of the block: 'skip' (the tensors: input, a)");
    /* a cycle: a reads b, b reads a */
    expect_error(BLOCK_HDR "  layer \"a\" { from = \"b\", conv2d { name = \"c1\", out_channels = 4, kernel = 1 } },\n"
                           "  layer \"b\" { from = \"a\", conv2d { name = \"c2\", out_channels = 4, kernel = 1 } },\n}\n",
                 "layer: the layers form a cycle (");
    expect_error(BLOCK_HDR "  layer \"a\" { from = \"b\", conv2d { name = \"c1\", out_channels = 4, kernel = 1 } },\n"
                           "  layer \"b\" { from = \"a\", conv2d { name = \"c2\", out_channels = 4, kernel = 1 } },\n}\n",
                 "a -> b");
    /* a residual of another shape */
    expect_error(BLOCK_HDR "  layer \"a\" { conv2d { out_channels = 8, kernel = 1 },\n"
                           "    add { tensor = \"input\" } },\n}\n",
                 "blk.lua:4: add: field 'tensor' 'input' is [N, 4, 6, 6] but the value here is [N, 8, 6, 6]");
    /* a per-sample vector of the wrong channel count */
    expect_error("return block \"b\" {\n  input = { \"N\", 4, 6, 6 },\n  inputs = { temb = { \"N\", 5 } },\n"
                 "  layer \"a\" { conv2d { out_channels = 4, kernel = 1 },\n    add { tensor = \"temb\" } },\n}\n",
                 "blk.lua:5: add: field 'tensor' 'temb' is [N, 5] but the value here is [N, 4, 6, 6]");
    /* one parameter name, two shapes */
    expect_error(BLOCK_HDR "  layer \"a\" { conv2d { name = \"conv\", out_channels = 4, kernel = 1 } },\n"
                           "  layer \"b\" { conv2d { name = \"conv\", out_channels = 4, kernel = 3, padding = 1 } },\n}\n",
                 "blk.lua:4: parameter 'conv.weight' has shape [4, 4, 3, 3] in layer 'b' but [4, 4, 1, 1] in layer 'a' "
                 "(line 3)");
    /* `tensor` outside a block */
    expect_error("return layer \"t\" {\n  input = { \"N\", 4, 6, 6 },\n  conv2d { out_channels = 4, kernel = 1 },\n"
                 "  add { tensor = \"input\" },\n}\n",
                 "blk.lua:4: add: field 'tensor' names a tensor of a block ('input')");
    /* a layer of a block has no input of its own */
    expect_error(BLOCK_HDR "  layer \"a\" { input = { \"N\", 4, 6, 6 }, conv2d { out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:3: layer: field 'input' is the block's in a block");
    /* a layer nothing reads */
    expect_error(BLOCK_HDR "  layer \"a\" { conv2d { name = \"c1\", out_channels = 4, kernel = 1 } },\n"
                           "  layer \"b\" { from = \"input\", conv2d { name = \"c2\", out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:3: layer: 'a' is not used");
    /* duplicate names */
    expect_error(BLOCK_HDR "  layer \"a\" { conv2d { name = \"c1\", out_channels = 4, kernel = 1 } },\n"
                           "  layer \"a\" { conv2d { name = \"c2\", out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:4: layer: the name 'a' is already a layer's (line 3)");
    /* the plain layer loader refuses a block with a message that says what to do */
    fg_layer_ir *ir = calloc(1, sizeof *ir);
    fg_error err;
    const char *src = BLOCK_HDR "  layer \"a\" { conv2d { out_channels = 4, kernel = 1 } },\n}\n";
    assert_int_not_equal(fg_spec_load_string("blk.lua", src, strlen(src), ir, &err), 0);
    fgt_assert_contains_at(err.msg, "the spec returns a block", __FILE__, __LINE__);
    free(ir);
}

/* The block fields dtype and layout: the layers' choices and messages, on the block. */
static void dtype_layout_errors(void **state)
{
    (void)state;
    expect_error("return block \"b\" {\n  input = { \"N\", 4, 6, 6 },\n  dtype = \"half\",\n"
                 "  layer \"a\" { conv2d { out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:1: block: field 'dtype' must be one of \"fp32\", \"bf16\", \"fp16\"");
    expect_error("return block \"b\" {\n  input = { \"N\", 4, 6, 6 },\n  layout = \"nhwc\",\n"
                 "  layer \"a\" { conv2d { out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:1: block: field 'layout' must be one of \"nchw\", \"channels_last\"");
    expect_error("return block \"b\" {\n  input = { \"N\", 4, 6, 6 },\n  dtpye = \"bf16\",\n"
                 "  layer \"a\" { conv2d { out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:1: block: unknown field 'dtpye' (did you mean 'dtype'?)");
    /* a layer's own dtype or layout: every tensor of the block has the block's */
    expect_error(BLOCK_HDR "  layer \"a\" { dtype = \"bf16\", conv2d { out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:3: layer: field 'dtype' is the block's in a block: write dtype = ... on the block");
    expect_error(BLOCK_HDR "  layer \"a\" { layout = \"channels_last\", conv2d { out_channels = 4, kernel = 1 } },\n}\n",
                 "blk.lua:3: layer: field 'layout' is the block's in a block: write layout = ... on the block");
    /* channels last: every layer's output keeps a channel dim (the layer rule, at its line) */
    expect_error("return block \"b\" {\n  input = { \"N\", 4, 6, 6 },\n  layout = \"channels_last\",\n"
                 "  layer \"a\" { conv2d { out_channels = 4, kernel = 1 },\n    max { dim = 1 } },\n}\n",
                 "blk.lua:5: layout \"channels_last\": the layer output [N, 6, 6] has no channel dim to put last");
}

/* dtype and layout reach every layer; the block without them is fp32 NC(D)HW. */
static void dtype_layout_loading(void **state)
{
    (void)state;
    fg_block_ir *b = load_block("return block \"b\" {\n  input = { \"N\", 4, 6, 6 },\n  dtype = \"fp16\",\n"
                                "  layout = \"channels_last\",\n"
                                "  layer \"a\" { conv2d { name = \"c1\", out_channels = 4, kernel = 1 } },\n"
                                "  layer \"b\" { conv2d { name = \"c2\", out_channels = 4, kernel = 3, padding = 1 },\n"
                                "    add { tensor = \"input\" } },\n}\n");
    assert_int_equal(b->dtype, FG_DTYPE_FP16);
    assert_int_equal(b->layout, FG_LAYOUT_CHANNELS_LAST);
    for (int i = 0; i < b->n_layers; i++) {
        assert_int_equal(b->layers[i].dtype, FG_DTYPE_FP16);
        assert_int_equal(b->layers[i].layout, FG_LAYOUT_CHANNELS_LAST);
        fg_plan *plan = fgt_plan(&b->layers[i], -1);
        free(plan);
    }
    free_block(b);
    b = load_block(BLOCK_HDR "  layer \"a\" { conv2d { out_channels = 4, kernel = 1 } },\n}\n");
    assert_int_equal(b->dtype, FG_DTYPE_FP32);
    assert_int_equal(b->layout, FG_LAYOUT_NCHW);
    assert_int_equal(b->layers[0].dtype, FG_DTYPE_FP32);
    free_block(b);
}

/* Layers listed out of order run in dependency order; tensors and batched params are wired. */
static void wiring(void **state)
{
    (void)state;
    fg_block_ir *b = load_block(
        "return block \"w\" {\n  input = { \"N\", 4, 6, 6 },\n  output = \"c\",\n"
        "  layer \"c\" { from = \"b\", conv2d { name = \"c3\", out_channels = 4, kernel = 1 }, add { tensor = \"a\" } },\n"
        "  layer \"a\" { from = \"input\", conv2d { name = \"c1\", out_channels = 4, kernel = 1 } },\n"
        "  layer \"b\" { from = \"a\", conv2d { name = \"c2\", out_channels = 4, kernel = 3, padding = 1 } },\n}\n");
    assert_int_equal(b->n_layers, 3);
    assert_string_equal(fg_block_ir_layer_name(b, 0), "a");
    assert_string_equal(fg_block_ir_layer_name(b, 1), "b");
    assert_string_equal(fg_block_ir_layer_name(b, 2), "c");
    assert_string_equal(b->layers[2].name, "w.c");
    assert_string_equal(b->tensors[b->output].name, "c");
    assert_int_equal(b->tensors[b->layer[2].out].layer, 2);
    /* layer c reads a as a batched parameter bound to tensor a */
    const fg_layer_ir *c = &b->layers[2];
    int found = 0;
    for (int p = 0; p < c->n_params; p++)
        if (c->params[p].batched) {
            found++;
            assert_string_equal(c->params[p].name, "a");
            assert_string_equal(b->tensors[c->params[p].tensor].name, "a");
            assert_int_equal(c->params[p].count, 4 * 6 * 6);
        }
    assert_int_equal(found, 1);
    /* each layer plans on its own (one conv pass each here) */
    for (int i = 0; i < 3; i++) {
        fg_plan *plan = fgt_plan(&b->layers[i], -1);
        assert_int_equal(plan->n_passes, 1);
        free(plan);
    }
    free_block(b);
}

static void fill(float *x, int64_t n, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0);
    }
}

/* The parameters of a loaded IR, filled by name (the same name the same values, whichever
 * IR holds it); running variances kept positive. */
static float **params_for(const fg_layer_ir *ir)
{
    float **p = calloc((size_t)FG_MAX_PARAMS, sizeof *p);
    for (int i = 0; i < ir->n_params; i++) {
        if (ir->params[i].batched)
            continue;
        p[i] = malloc(sizeof(float) * (size_t)ir->params[i].count);
        unsigned seed = 7;
        for (const char *c = ir->params[i].name; *c; c++)
            seed = seed * 31u + (unsigned char)*c;
        fill(p[i], ir->params[i].count, seed);
        if (strstr(ir->params[i].name, "running_var") || strstr(ir->params[i].name, "weight") == NULL)
            for (int64_t e = 0; strstr(ir->params[i].name, "running_var") && e < ir->params[i].count; e++)
                p[i][e] = 0.5f + fabsf(p[i][e]);
    }
    return p;
}

static void free_params(float **p)
{
    for (int i = 0; i < FG_MAX_PARAMS; i++)
        free(p[i]);
    free(p);
}

/* a single-layer spec's reference output, as floats */
static float *run_layer(const char *src, int64_t batch, const float *x, int64_t *n_out)
{
    fg_layer_ir *ir = fgt_load_string(src);
    float **p = params_for(ir);
    *n_out = batch * fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out);
    double *y = malloc(sizeof(double) * (size_t)*n_out);
    float *f = malloc(sizeof(float) * (size_t)*n_out);
    fg_error err;
    assert_int_equal(fg_reference_run(ir, batch, x, (const float *const *)p, y, &err), 0);
    for (int64_t i = 0; i < *n_out; i++)
        f[i] = (float)y[i];
    free(y);
    free_params(p);
    free(ir);
    return f;
}

static double *run_block(fg_block_ir *b, int64_t batch, const float *const *inputs)
{
    float **params[FG_MAX_BLOCK_LAYERS];
    for (int i = 0; i < b->n_layers; i++)
        params[i] = params_for(&b->layers[i]);
    int64_t n = batch * fg_shape_sample_count(&b->tensors[b->output].shape);
    double *y = malloc(sizeof(double) * (size_t)n);
    fg_error err;
    if (fg_reference_run_block(b, batch, inputs, (const float *const *const *)params, y, &err) != 0)
        fail_msg("%s", err.msg);
    for (int i = 0; i < b->n_layers; i++)
        free_params(params[i]);
    return y;
}

/* A ResNet bottleneck (eval BatchNorm) against its three layers run apart, the residual and
 * the last ReLU applied by hand. */
static void bottleneck_reference(void **state)
{
    (void)state;
    const int64_t batch = 2, c = 8, hw = 5;
    fg_block_ir *b = load_block(
        "return block \"bn\" {\n  input = { \"N\", 8, 5, 5 },\n"
        "  layer \"a\" { conv2d { name = \"conv1\", out_channels = 2, kernel = 1, bias = false },\n"
        "    batch_norm { name = \"bn1\", stats = \"running\" }, relu {} },\n"
        "  layer \"b\" { conv2d { name = \"conv2\", out_channels = 2, kernel = 3, padding = 1, bias = false },\n"
        "    batch_norm { name = \"bn2\", stats = \"running\" }, relu {} },\n"
        "  layer \"c\" { conv2d { name = \"conv3\", out_channels = 8, kernel = 1, bias = false },\n"
        "    batch_norm { name = \"bn3\", stats = \"running\" }, add { tensor = \"input\" }, relu {} },\n}\n");
    int64_t n_in = batch * c * hw * hw, n1, n2, n3;
    float *x = malloc(sizeof(float) * (size_t)n_in);
    fill(x, n_in, 42);
    const float *inputs[1] = {x};
    double *y = run_block(b, batch, inputs);
    float *a = run_layer("return layer \"a\" { input = { \"N\", 8, 5, 5 },\n"
                         "  conv2d { name = \"conv1\", out_channels = 2, kernel = 1, bias = false },\n"
                         "  batch_norm { name = \"bn1\", stats = \"running\" }, relu {} }\n",
                         batch, x, &n1);
    float *bb = run_layer("return layer \"b\" { input = { \"N\", 2, 5, 5 },\n"
                          "  conv2d { name = \"conv2\", out_channels = 2, kernel = 3, padding = 1, bias = false },\n"
                          "  batch_norm { name = \"bn2\", stats = \"running\" }, relu {} }\n",
                          batch, a, &n2);
    float *cc = run_layer("return layer \"c\" { input = { \"N\", 2, 5, 5 },\n"
                          "  conv2d { name = \"conv3\", out_channels = 8, kernel = 1, bias = false },\n"
                          "  batch_norm { name = \"bn3\", stats = \"running\" } }\n",
                          batch, bb, &n3);
    assert_int_equal(n3, n_in);
    double worst = 0;
    for (int64_t i = 0; i < n_in; i++) {
        double want = fmax((double)cc[i] + (double)x[i], 0.0);
        worst = fmax(worst, fabs(want - y[i]));
    }
    /* the independent path rounds the pre-residual value to float once more */
    assert_true(worst < 1e-5);
    free(x), free(y), free(a), free(bb), free(cc);
    free_block(b);
}

/* A ConvNeXt block, small (specs/blocks/convnext.lua's layers at 8 channels, 6x6): depthwise
 * 7x7 -> layer_norm { dim = 1 } -> 1x1 up -> GELU -> 1x1 down -> layer scale -> + input,
 * against its three layers run apart, the layer scale and residual applied by hand. */
static void convnext_reference(void **state)
{
    (void)state;
    const int64_t batch = 2, c = 8, hw = 6;
    fg_block_ir *b = load_block(
        "return block \"cnx\" {\n  input = { \"N\", 8, 6, 6 },\n"
        "  layer \"a\" { conv2d { name = \"dwconv\", out_channels = 8, kernel = 7, padding = 3, groups = 8 },\n"
        "    layer_norm { name = \"norm\", dim = 1, eps = 1e-6 } },\n"
        "  layer \"b\" { conv2d { name = \"pwconv1\", out_channels = 32, kernel = 1 }, gelu {} },\n"
        "  layer \"c\" { conv2d { name = \"pwconv2\", out_channels = 8, kernel = 1 },\n"
        "    mul { param = \"gamma\", shape = { 8, 1, 1 } }, add { tensor = \"input\" } },\n}\n");
    int64_t n_in = batch * c * hw * hw, n1, n2, n3;
    float *x = malloc(sizeof(float) * (size_t)n_in);
    fill(x, n_in, 43);
    const float *inputs[1] = {x};
    double *y = run_block(b, batch, inputs);
    float *a = run_layer("return layer \"a\" { input = { \"N\", 8, 6, 6 },\n"
                         "  conv2d { name = \"dwconv\", out_channels = 8, kernel = 7, padding = 3, groups = 8 },\n"
                         "  layer_norm { name = \"norm\", dim = 1, eps = 1e-6 } }\n",
                         batch, x, &n1);
    float *bb = run_layer("return layer \"b\" { input = { \"N\", 8, 6, 6 },\n"
                          "  conv2d { name = \"pwconv1\", out_channels = 32, kernel = 1 }, gelu {} }\n",
                          batch, a, &n2);
    float *cc = run_layer("return layer \"c\" { input = { \"N\", 32, 6, 6 },\n"
                          "  conv2d { name = \"pwconv2\", out_channels = 8, kernel = 1 } }\n",
                          batch, bb, &n3);
    assert_int_equal(n3, n_in);
    /* gamma as params_for fills it (by name) */
    float gamma[8];
    unsigned seed = 7;
    for (const char *ch = "gamma"; *ch; ch++)
        seed = seed * 31u + (unsigned char)*ch;
    fill(gamma, 8, seed);
    double worst = 0;
    for (int64_t i = 0; i < n_in; i++) {
        int64_t ch = (i / (hw * hw)) % c;
        double want = (double)cc[i] * gamma[ch] + (double)x[i];
        worst = fmax(worst, fabs(want - y[i]));
    }
    /* the independent path rounds each layer's output to float once more */
    assert_true(worst < 1e-5);
    free(x), free(y), free(a), free(bb), free(cc);
    free_block(b);
}

/* SD's ResnetBlock2D at 8 channels, 4x4, with block fields `fields` (a string literal). */
#define SD_BLOCK(fields)                                                                                       \
    "return block \"sd\" {\n  input = { \"N\", 8, 4, 4 },\n  inputs = { temb = { \"N\", 8 } },\n" fields        \
    "  layer \"h\" { group_norm { name = \"norm1\", groups = 4 }, silu {},\n"                                    \
    "    conv2d { name = \"conv1\", out_channels = 8, kernel = 3, padding = 1 }, add { tensor = \"temb\" } },\n"   \
    "  layer \"out\" { group_norm { name = \"norm2\", groups = 4 }, silu {},\n"                                  \
    "    conv2d { name = \"conv2\", out_channels = 8, kernel = 3, padding = 1 }, add { tensor = \"input\" } },\n}\n"

/* SD's ResnetBlock2D shape: GroupNorm -> SiLU -> conv prologues, a per-sample time
 * embedding [N, C] broadcast over H, W, the residual of the block input. */
static void sd_reference(void **state)
{
    (void)state;
    const int64_t batch = 2, c = 8, hw = 4;
    fg_block_ir *b = load_block(SD_BLOCK(""));
    assert_int_equal(b->n_inputs, 2);
    assert_string_equal(b->tensors[1].name, "temb");
    int64_t n_in = batch * c * hw * hw, n1, n2;
    float *x = malloc(sizeof(float) * (size_t)n_in), *t = malloc(sizeof(float) * (size_t)(batch * c));
    fill(x, n_in, 3);
    fill(t, batch * c, 5);
    const float *inputs[2] = {x, t};
    double *y = run_block(b, batch, inputs);
    float *h = run_layer("return layer \"h\" { input = { \"N\", 8, 4, 4 },\n"
                         "  group_norm { name = \"norm1\", groups = 4 }, silu {},\n"
                         "  conv2d { name = \"conv1\", out_channels = 8, kernel = 3, padding = 1 } }\n",
                         batch, x, &n1);
    for (int64_t i = 0; i < n1; i++)
        h[i] = (float)((double)h[i] + (double)t[(i / (hw * hw * c)) * c + (i / (hw * hw)) % c]);
    float *o = run_layer("return layer \"o\" { input = { \"N\", 8, 4, 4 },\n"
                         "  group_norm { name = \"norm2\", groups = 4 }, silu {},\n"
                         "  conv2d { name = \"conv2\", out_channels = 8, kernel = 3, padding = 1 } }\n",
                         batch, h, &n2);
    double worst = 0;
    for (int64_t i = 0; i < n_in; i++)
        worst = fmax(worst, fabs((double)o[i] + (double)x[i] - y[i]));
    assert_true(worst < 1e-5);
    free(x), free(t), free(y), free(h), free(o);
    free_block(b);
}

/* 4-D NCHW <-> NHWC (c, hw: channels and positions per sample). */
static void to_nhwc(const float *x, float *y, int64_t batch, int64_t c, int64_t hw)
{
    for (int64_t n = 0; n < batch; n++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++)
                y[(n * hw + p) * c + ch] = x[(n * c + ch) * hw + p];
}

static float bf16(double v)
{
    return (float)fg_round_to_dtype(v, FG_DTYPE_BF16);
}

/* The SD block in bf16, channels last, against its layers run apart in fp32 NCHW with the
 * rounding a bf16 block does by hand: the inputs rounded to bf16, each layer's output
 * (residual and time embedding added) rounded to bf16. Checks the reference's transposition
 * of the tensor operands (the residual is NHWC, temb [N, C] either way) and its rounding. */
static void sd_bf16_channels_last_reference(void **state)
{
    (void)state;
    const int64_t batch = 2, c = 8, hw = 16;
    fg_block_ir *b = load_block(SD_BLOCK("  dtype = \"bf16\", layout = \"channels_last\",\n"));
    int64_t n_in = batch * c * hw, n1, n2;
    float *x = malloc(sizeof(float) * (size_t)n_in), *x_cl = malloc(sizeof(float) * (size_t)n_in);
    float *t = malloc(sizeof(float) * (size_t)(batch * c));
    fill(x, n_in, 3);
    fill(t, batch * c, 5);
    to_nhwc(x, x_cl, batch, c, hw);
    const float *inputs[2] = {x_cl, t};
    double *y = run_block(b, batch, inputs); /* NHWC */
    for (int64_t i = 0; i < n_in; i++)
        x[i] = bf16(x[i]);
    for (int64_t i = 0; i < batch * c; i++)
        t[i] = bf16(t[i]);
    float *h = run_layer("return layer \"h\" { input = { \"N\", 8, 4, 4 },\n"
                         "  group_norm { name = \"norm1\", groups = 4 }, silu {},\n"
                         "  conv2d { name = \"conv1\", out_channels = 8, kernel = 3, padding = 1 } }\n",
                         batch, x, &n1);
    for (int64_t i = 0; i < n1; i++)
        h[i] = bf16((double)h[i] + (double)t[(i / (hw * c)) * c + (i / hw) % c]);
    float *o = run_layer("return layer \"o\" { input = { \"N\", 8, 4, 4 },\n"
                         "  group_norm { name = \"norm2\", groups = 4 }, silu {},\n"
                         "  conv2d { name = \"conv2\", out_channels = 8, kernel = 3, padding = 1 } }\n",
                         batch, h, &n2);
    float *want = malloc(sizeof(float) * (size_t)n_in), *want_cl = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t i = 0; i < n_in; i++)
        want[i] = bf16((double)o[i] + (double)x[i]);
    to_nhwc(want, want_cl, batch, c, hw);
    /* the hand path rounds each layer's output to float before bf16: at most 1 ulp apart */
    int64_t exact = 0;
    for (int64_t i = 0; i < n_in; i++) {
        double got = bf16(y[i]);
        assert_true(fabs(got - want_cl[i]) <= fg_dtype_ulp(want_cl[i], FG_DTYPE_BF16));
        exact += got == want_cl[i];
    }
    assert_true(exact >= n_in * 95 / 100);
    free(x), free(x_cl), free(t), free(y), free(h), free(o), free(want), free(want_cl);
    free_block(b);
}

/* The C API of a block with dtype and layout: fg_block_dtype / fg_block_layout, the workspace
 * in the dtype's element size, and fg_block_run_cpu rounding its output to the dtype. */
static void dtype_layout_api(void **state)
{
    (void)state;
    fg_context_options o;
    fg_context_options_init(&o);
    o.device = -1;
    fg_context *ctx = NULL;
    assert_int_equal(fg_context_create(&o, &ctx), FG_OK);
    size_t ws[2] = {0};
    for (int half = 0; half < 2; half++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "return block \"b\" {\n  input = { \"N\", 8, 6, 6 },%s\n"
                 "  layer \"a\" { conv2d { name = \"c1\", out_channels = 16, kernel = 1 } },\n"
                 "  layer \"b\" { conv2d { name = \"c2\", out_channels = 8, kernel = 1 }, add { tensor = \"input\" } },\n}\n",
                 half ? " dtype = \"bf16\", layout = \"channels_last\"," : "");
        fg_block *b = NULL;
        assert_int_equal(fg_block_load_string(ctx, "blk.lua", src, &b), FG_OK);
        const char *dtype = NULL, *layout = NULL;
        int bytes = 0;
        assert_int_equal(fg_block_dtype(b, &dtype, &bytes), FG_OK);
        assert_int_equal(fg_block_layout(b, &layout), FG_OK);
        assert_string_equal(dtype, half ? "bf16" : "fp32");
        assert_int_equal(bytes, half ? 2 : 4);
        assert_string_equal(layout, half ? "channels_last" : "nchw");
        assert_int_equal(fg_block_dtype(b, NULL, NULL), FG_ERR_INVALID_ARGUMENT);
        assert_int_equal(fg_block_layout(b, NULL), FG_ERR_INVALID_ARGUMENT);
        assert_int_equal(fg_block_workspace_size(b, 4, &ws[half]), FG_OK);
        assert_int_equal(fg_tools_block_bind_random(b, 3), FG_OK);
        float x[2 * 8 * 36], y[2 * 8 * 36];
        fill(x, 2 * 8 * 36, 9);
        const float *inputs[1] = {x};
        assert_int_equal(fg_block_run_cpu(b, inputs, y, 2), FG_OK);
        for (int i = 0; half && i < 2 * 8 * 36; i++)
            assert_true(y[i] == bf16(y[i])); /* the output is bf16 values */
        fg_block_destroy(b);
    }
    /* the one tensor between layers ([4, 16, 6, 6]) in 2 bytes instead of 4 (256-byte pieces) */
    assert_int_equal(ws[0] - ws[1], 4 * 16 * 36 * 2);
    fg_context_destroy(ctx);
}

/* The workspace a wgmma layer's run needs (fg_layer_workspace_size, in a CPU-only context
 * planning for sm_90a with FUSEGEN_CONV_ENGINE=wgmma) holds its buffers but the packed
 * weights, which are the layer's own (written at bind): exactly the other pieces, 256-byte
 * aligned; a block's is its tensors between layers and the largest of its layers'. */
static void packed_weights_outside_the_workspace(void **state)
{
    (void)state;
    setenv("FUSEGEN_CONV_ENGINE", "wgmma", 1); /* read when the context is created */
    fg_context_options o;
    fg_context_options_init(&o);
    o.device = -1;
    o.arch = "sm_90a";
    fg_context *ctx = NULL;
    fg_status s = fg_context_create(&o, &ctx);
    unsetenv("FUSEGEN_CONV_ENGINE");
    assert_int_equal(s, FG_OK);
    fg_block *b = NULL;
    assert_int_equal(fg_block_load_string(ctx, "bottleneck.lua",
                                          "return block \"bottleneck\" {\n  input = { \"N\", 64, 14, 14 },\n"
                                          "  layer \"a\" { conv2d { name = \"c1\", out_channels = 16, kernel = 1 }, relu {} },\n"
                                          "  layer \"b\" { conv2d { name = \"c2\", out_channels = 16, kernel = 3, padding = 1 } },\n"
                                          "  layer \"c\" { conv2d { name = \"c3\", out_channels = 64, kernel = 1 },\n"
                                          "    add { tensor = \"input\" } },\n}\n",
                                          &b),
                     FG_OK);
    for (int64_t batch = 1; batch <= 3; batch += 2) {
        size_t most = 0;
        for (int i = 0; i < 3; i++) {
            fg_layer *layer = fg_tools_block_layer(b, i);
            const fg_plan *plan = fg_tools_layer_plan(layer);
            const int packed = plan->wgmma.packed_w;
            assert_true(plan->wgmma.parts > 0 && packed >= 0 && plan->buffers[packed].fixed > 0);
            uint64_t want = 0;
            for (int k = 0; k < plan->n_buffers; k++)
                if (k != packed)
                    want += (4 * (uint64_t)(plan->buffers[k].per_sample * batch + plan->buffers[k].fixed) + 255) & ~255ull;
            assert_int_equal(plan->n_accums, 0);
            size_t got = 0;
            assert_int_equal(fg_layer_workspace_size(layer, batch, &got), FG_OK);
            assert_int_equal(got, want);
            most = got > most ? got : most;
        }
        size_t block_ws = 0;
        assert_int_equal(fg_block_workspace_size(b, batch, &block_ws), FG_OK);
        /* a's and b's outputs ([N, 16, 14, 14] floats, 256-byte pieces), then the scratch */
        uint64_t tensor = ((uint64_t)batch * 16 * 14 * 14 * 4 + 255) & ~255ull;
        assert_int_equal(block_ws, 2 * tensor + ((most + 255) & ~(size_t)255));
    }
    fg_block_destroy(b);
    fg_context_destroy(ctx);
}

/* The pass of plan that feeds accumulator a, or NULL. */
static const fg_pass *feeder_of(const fg_plan *plan, int a)
{
    for (int i = 0; i < plan->n_passes; i++)
        for (int f = 0; f < plan->passes[i].n_feeds; f++)
            if (plan->passes[i].feeds[f] == a)
                return &plan->passes[i];
    return NULL;
}

static bool has_pass(const fg_plan *plan, fg_pass_kind kind)
{
    for (int i = 0; i < plan->n_passes; i++)
        if (plan->passes[i].kind == kind)
            return true;
    return false;
}

/* Channel blocks narrower than 128 where a 128-channel block does not fit (planner.c
 * wgmma_tiling, `narrower`): SD's block at 640 channels in bf16, channels last, at fp32
 * precision: layer h packs both parts of the normalized input and of the weights and keeps the
 * exported statistics' partials, 234 KB at 128 channels, so it takes 6 blocks of 112 (it
 * fell to mma.sync before); layer out, without the partials, keeps 5 of 128. */
static void narrower_blocks_where_128_does_not_fit(void **state)
{
    (void)state;
    fg_block_ir *b = load_block(
        "return block \"sd\" {\n  input = { \"N\", 640, 32, 32 },\n  dtype = \"bf16\", layout = \"channels_last\",\n"
        "  inputs = { temb = { \"N\", 640 } },\n"
        "  layer \"h\" { group_norm { name = \"norm1\", groups = 32 }, silu {},\n"
        "    conv2d { name = \"conv1\", out_channels = 640, kernel = 3, padding = 1 }, add { tensor = \"temb\" } },\n"
        "  layer \"out\" { group_norm { name = \"norm2\", groups = 32 }, silu {},\n"
        "    conv2d { name = \"conv2\", out_channels = 640, kernel = 3, padding = 1 }, add { tensor = \"input\" } },\n}\n");
    assert_true(b->layers[0].exports_stats);
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    fg_plan *h = fgt_plan_with(&b->layers[0], &opts), *out = fgt_plan_with(&b->layers[1], &opts);
    assert_string_equal(h->wgmma_refused, "");
    assert_true(h->wgmma.parts == 2 && h->wgmma.stages >= 3);
    assert_int_equal(h->wgmma.nblk, 6);
    assert_int_equal(h->wgmma.bn, 112);
    assert_true(h->wgmma.bar_offset <= 227 * 1024);
    assert_int_equal(out->wgmma.nblk, 5);
    assert_int_equal(out->wgmma.bn, 128);
    free(h), free(out);
    free_block(b);
}

/* How layer `i` of `b`, planned for sm_90a (A by TMA where it can, or never: a_tma 1), renders
 * a wgmma conv's staged epilogue reading a block tensor of the output's shape: its rows loaded
 * ahead into registers (conv.lua, prefetch), its tile copied into shared memory during the
 * main loop (conv_wgmma.lua, res_copy; fg_wgmma_tiling.res_bytes), or neither (read in the
 * row loop, or no such tensor). The plan and the source must agree. */
typedef enum { RES_ROWS, RES_AHEAD, RES_SMEM } residual_path;

static residual_path residual_of(fg_block_ir *b, int i, int a_tma)
{
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.wgmma_a_tma = a_tma;
    fg_plan *plan = fgt_plan_with(&b->layers[i], &opts);
    const fg_wgmma_tiling *w = &plan->wgmma;
    assert_true(w->parts > 0);
    fg_rendered src;
    fg_error err = {{0}};
    assert_int_equal(fg_render(&b->layers[i], plan, &src, &err), 0);
    const bool ahead = strstr(src.source, "loaded together before any of them is stored") != NULL;
    const bool smem = strstr(src.source, "res_copy(res_s, ") != NULL;
    assert_int_equal(smem, w->res_bytes > 0);
    assert_false(ahead && smem);
    if (ahead) {
        /* 8 rows at a time, each existing row's value read from them where it is stored */
        fgt_assert_contains(src.source, "for (int rh = 0; rh < 16; rh += 8) {");
        fgt_assert_contains(src.source, "float pre0[8];");
        fgt_assert_contains(src.source, " + pre0[rc])");
    }
    if (smem) {
        char p[16], line[160];
        snprintf(p, sizeof p, "p%d", w->res_param); /* its kernel argument (templates/layer.lua) */
        /* this warp's rows x BN channels, copied before each tile's main loop, waited for (every
         * lane's: __syncwarp) after it, read by the epilogue from shared memory alone */
        snprintf(line, sizeof line, "res_copy(res_s, %s, tl, row0 + 16 * warp, batch, res_vec);\n", p);
        const char *copy = strstr(src.source, line), *loop = strstr(src.source, "        mainloop(acc, tmp, ");
        const char *wait = strstr(src.source, "fgw_cp_wait0(); __syncwarp();");
        assert_non_null(copy);
        assert_true(loop && wait && copy < loop && loop < wait);
        fgt_assert_contains(src.source, "fg_io_widen(res_s[(16 * mt + rr) * BN + 32 * kk + lane])");
        snprintf(line, sizeof line, "const bool res_vec = ((unsigned long long)%s & 15) == 0;", p);
        fgt_assert_contains(src.source, line);
        snprintf(line, sizeof line, "%s[(fg_u64)n", p);
        fgt_assert_not_contains(src.source, line); /* no load of it from global memory in the epilogue */
        fgt_assert_not_contains(src.source, "pre0[");
        /* rows past the sample (flat: past the batch) and channels past the group's are zeros */
        fgt_assert_contains(src.source, w->flat ? "const bool ok = n < batch && tl.nb * BN + 8 * u < COUT_G;"
                                                : "const bool ok = q < OPIX && tl.nb * BN + 8 * u < COUT_G;");
        fgt_assert_contains(src.source, "fgw_cp16(fgw_smem_addr(d), ok ? s : src, ok ? 16u : 0u);");
        fgt_assert_contains(src.source, "for (int e = 0; e < 8; ++e) d[e] = ok ? s[e] : (fg_io)0;");
        /* the slabs' rows 32 floats apart, swizzled, where the tile takes shared memory too */
        fgt_assert_contains(src.source, "slab[rr * 32 + (lane ^ ((rr & 3) << 3))]");
        fgt_assert_contains(src.source, "* 32 + ((8 * jj + 2 * (lane & 3)) ^ ((lane & 12) << 1))] =");
    } else {
        fgt_assert_not_contains(src.source, "res_s");
        fgt_assert_not_contains(src.source, "fgw_cp_wait0");
        if (strstr(src.source, "float *const slab = "))
            fgt_assert_contains(src.source, "slab[rr * 40 + lane]");
    }
    fg_rendered_free(&src);
    free(plan);
    return smem ? RES_SMEM : ahead ? RES_AHEAD : RES_ROWS;
}

/* A residual read in a staged (channels-last) wgmma epilogue. In a half layer its tile is
 * copied into shared memory by cp.async during the main loop (bench/NOTES.md v42: with 8 rows'
 * loads in flight ResNet-50's last 1x1 conv at 2048 channels, 7x7, still took 40 us against 21
 * for its first), with either A producer and in any channel block (SD's 1280-channel conv in
 * 256-channel tiles too), wherever the ring keeps 3 stages with it (4 with block
 * accumulation). Elsewhere it is loaded 8 rows at a time before those rows are stored (v41:
 * row by row the conv took 70 us), in an fp32 layer or a half one whose ring the tile would
 * take below that: only in 128-channel tiles of one m64 tile a warpgroup (SD's 1280-channel
 * conv in 256-channel tiles was 57 % slower with it), not in flat tiles fed by cp.async (they
 * spilled). Neither for a per-sample vector (the time embedding) or without a residual. */
static void residual_rows_loaded_ahead(void **state)
{
    (void)state;
    static const char *const bottleneck =
        "return block \"bottleneck\" {\n  input = { \"N\", 2048, 7, 7 },\n"
        "  dtype = \"%s\", layout = \"channels_last\",\n"
        "  layer \"a\" { precision = \"%s\", conv2d { name = \"conv1\", out_channels = 512, kernel = 1, bias = false }, relu {} },\n"
        "  layer \"c\" { precision = \"%s\", conv2d { name = \"conv3\", out_channels = 2048, kernel = 1, bias = false },\n"
        "    add { tensor = \"input\" }, relu {} },\n}\n";
    char src[1024];
    snprintf(src, sizeof src, bottleneck, "bf16", "tf32", "tf32");
    fg_block_ir *b = load_block(src);
    assert_int_equal(residual_of(b, 0, 0), RES_ROWS); /* no residual */
    assert_int_equal(residual_of(b, 1, 0), RES_SMEM);
    assert_int_equal(residual_of(b, 1, 1), RES_SMEM); /* flat tiles fed by cp.async too */
    free_block(b);
    /* fp32 precision: block accumulation, whose 4 stages the tile would leave 3 of */
    snprintf(src, sizeof src, bottleneck, "bf16", "fp32", "fp32");
    b = load_block(src);
    assert_int_equal(residual_of(b, 1, 0), RES_AHEAD);
    assert_int_equal(residual_of(b, 1, 1), RES_ROWS); /* flat tiles fed by cp.async */
    free_block(b);
    /* an fp32 layer: the register prefetch */
    snprintf(src, sizeof src, bottleneck, "fp32", "tf32", "tf32");
    b = load_block(src);
    assert_int_equal(residual_of(b, 1, 0), RES_AHEAD);
    assert_int_equal(residual_of(b, 1, 1), RES_ROWS);
    free_block(b);
    b = load_block(
        "return block \"sd\" {\n  input = { \"N\", 1280, 16, 16 },\n  dtype = \"bf16\", layout = \"channels_last\",\n"
        "  inputs = { temb = { \"N\", 1280 } },\n"
        "  layer \"h\" { precision = \"tf32\", group_norm { name = \"norm1\", groups = 32 }, silu {},\n"
        "    conv2d { name = \"conv1\", out_channels = 1280, kernel = 3, padding = 1 }, add { tensor = \"temb\" } },\n"
        "  layer \"out\" { precision = \"tf32\", group_norm { name = \"norm2\", groups = 32 }, silu {},\n"
        "    conv2d { name = \"conv2\", out_channels = 1280, kernel = 3, padding = 1 }, add { tensor = \"input\" } },\n}\n");
    assert_int_equal(residual_of(b, 0, 0), RES_ROWS); /* the time embedding: one value a channel */
    assert_int_equal(residual_of(b, 1, 0), RES_SMEM); /* 256-channel tiles, 3 stages */
    free_block(b);
    static const char *const small =
        "return block \"sd\" {\n  input = { \"N\", %d, 16, 16 },\n  dtype = \"%s\", layout = \"channels_last\",\n"
        "  layer \"out\" { precision = \"tf32\", conv2d { out_channels = %d, kernel = 3, padding = 1 },\n"
        "    add { tensor = \"input\" } },\n}\n";
    for (int d = 0; d < 2; d++) {
        /* fp16 in 128-channel tiles of one m64 tile a warpgroup; fp32 (TF32 operands: two) in
         * 64-channel ones; 256 pixels, not flat: by cp.async too */
        const int ch = d ? 64 : 128;
        snprintf(src, sizeof src, small, ch, d ? "fp32" : "fp16", ch);
        b = load_block(src);
        assert_int_equal(residual_of(b, 0, 0), d ? RES_AHEAD : RES_SMEM);
        assert_int_equal(residual_of(b, 0, 1), d ? RES_AHEAD : RES_SMEM);
        free_block(b);
    }
}

/* Statistics handed on (fg_block_link_statistics): SD's layer out normalizes layer h's output,
 * so h's pass that stores it gathers the GroupNorm's statistics (cleared before that pass) and
 * out runs no statistics pass, on every engine; its accumulator is the block's, outside the
 * layer's scratch, and the layer runs only in its block. A norm keyed otherwise (per pixel,
 * batch statistics), a layer reading the block input, and a second reader grouping the channels
 * otherwise gather their own. */
static void statistics_handed_on(void **state)
{
    (void)state;
    fg_block_ir *b = load_block(SD_BLOCK(""));
    assert_int_equal(fg_block_stats_from(b, 0), -1);
    assert_int_equal(fg_block_stats_from(b, 1), 0);
    assert_true(b->layers[0].exports_stats && !b->layers[0].pro_stats_given);
    assert_true(b->layers[1].pro_stats_given && !b->layers[1].exports_stats);
    for (int e = 0; e < 3; e++) {
        fg_plan_options opts;
        fg_plan_options_init(&opts, 90);
        opts.engine = e == 0 ? FG_ENGINE_PREFER_FMA : e == 1 ? FG_ENGINE_PREFER_MMA : FG_ENGINE_PREFER_WGMMA;
        fg_plan *h = fgt_plan_with(&b->layers[0], &opts), *out = fgt_plan_with(&b->layers[1], &opts);
        assert_true(h->export_accum >= 0);
        assert_int_equal(h->accums[h->export_accum].link, FG_LINK_EXPORTED);
        assert_int_equal(h->accums[h->export_accum].keys_per_sample, 4);
        const fg_pass *ps = feeder_of(h, h->export_accum);
        assert_non_null(ps);
        assert_true(ps->store_output);
        bool cleared = false;
        for (int z = 0; z < ps->n_zero; z++)
            cleared = cleared || ps->zero[z] == h->export_accum;
        assert_true(cleared);
        assert_true(has_pass(h, FG_PASS_PRO_STATS)); /* of the block input: its own */
        assert_int_equal(out->export_accum, -1);
        assert_int_equal(out->accums[out->pro_accum].link, FG_LINK_GIVEN);
        assert_false(has_pass(out, FG_PASS_PRO_STATS));
        assert_null(feeder_of(out, out->pro_accum));
        free(h), free(out);
    }
    free_block(b);

    /* gathered by the reader itself */
    static const char *const own[] = {
        "layer_norm { dim = 1 }", /* a statistic per pixel */
        "batch_norm { name = \"bn\" }", /* over the batch */
    };
    for (int i = 0; i < 2; i++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "return block \"o\" {\n  input = { \"N\", 8, 4, 4 },\n"
                 "  layer \"a\" { group_norm { groups = 2 }, conv2d { name = \"c1\", out_channels = 8, kernel = 1 } },\n"
                 "  layer \"b\" { %s, conv2d { name = \"c2\", out_channels = 8, kernel = 1 } },\n}\n",
                 own[i]);
        b = load_block(src);
        assert_int_equal(fg_block_stats_from(b, 0), -1); /* the block input */
        assert_int_equal(fg_block_stats_from(b, 1), -1);
        assert_false(b->layers[0].exports_stats || b->layers[1].pro_stats_given);
        free_block(b);
    }
    b = load_block("return block \"two\" {\n  input = { \"N\", 8, 4, 4 },\n  output = \"c\",\n"
                   "  layer \"a\" { conv2d { name = \"c1\", out_channels = 8, kernel = 1 } },\n"
                   "  layer \"b\" { from = \"a\", group_norm { groups = 2 }, conv2d { name = \"c2\", out_channels = 8, kernel = 1 } },\n"
                   "  layer \"c\" { from = \"a\", group_norm { groups = 4 }, conv2d { name = \"c3\", out_channels = 8, kernel = 1 },\n"
                   "    add { tensor = \"b\" } },\n}\n");
    assert_int_equal(fg_block_stats_from(b, 1), 0);
    assert_int_equal(fg_block_stats_from(b, 2), -1);
    fg_stat_layout L;
    fg_norm_stat_layout(&b->layers[0].export_norm, &L);
    assert_int_equal(L.keys_per_sample, 2);
    free_block(b);

    /* the runtime: the statistics outside the layers' scratch, the layer refused alone */
    fg_context_options o;
    fg_context_options_init(&o);
    o.device = -1;
    o.arch = "sm_90a";
    fg_context *ctx = NULL;
    assert_int_equal(fg_context_create(&o, &ctx), FG_OK);
    fg_block *blk = NULL;
    assert_int_equal(fg_block_load_string(ctx, "sd.lua", SD_BLOCK(""), &blk), FG_OK);
    for (int64_t batch = 1; batch <= 3; batch += 2) {
        size_t most = 0, got = 0;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(fg_layer_workspace_size(fg_tools_block_layer(blk, i), batch, &got), FG_OK);
            most = got > most ? got : most;
        }
        assert_int_equal(fg_block_workspace_size(blk, batch, &got), FG_OK);
        /* h's output (float [N, 8, 4, 4]), its statistics (4 keys x 2 doubles a sample), the scratch */
        uint64_t tensor = ((uint64_t)batch * 8 * 16 * 4 + 255) & ~255ull, stats = ((uint64_t)batch * 4 * 16 + 255) & ~255ull;
        assert_int_equal(got, tensor + stats + ((most + 255) & ~(size_t)255));
    }
    float dummy[4];
    assert_int_equal(fg_layer_run_workspace(fg_tools_block_layer(blk, 1), dummy, dummy, 1, NULL, 0, NULL),
                     FG_ERR_INVALID_ARGUMENT);
    fgt_assert_contains(fg_last_error(), "run the block");
    fg_block_destroy(blk);
    fg_context_destroy(ctx);
}

/* A norm after a layer's conv moves into the prologue of the one layer reading its output
 * (move_norms_to_readers, gen/spec_loader.c): a chain of three nnU-Net-like layers ends with a
 * with its conv alone, b with a's instance_norm -> leaky_relu as its prologue (statistics from
 * a's epilogue), c with b's; the block's reference equals the three layers as written, run
 * apart. Nothing moves where the output has another reader (a residual), the reader has a
 * prologue, the norm keys pixels, or an op after the norm reads a named value. */
static void norms_moved_to_readers(void **state)
{
    (void)state;
#define NN_LAYER(name, from, conv, norm)                                                                        \
    "  layer \"" name "\" { from = \"" from "\", conv2d { name = \"" conv "\", out_channels = 6, kernel = 3, "     \
    "padding = 1 },\n    instance_norm { name = \"" norm "\", affine = true }, leaky_relu { negative_slope = 0.01 } },\n"
    fg_block_ir *b = load_block("return block \"nn\" {\n  input = { \"N\", 4, 5, 5 },\n" NN_LAYER("a", "input", "c1", "n1")
                                    NN_LAYER("b", "a", "c2", "n2") NN_LAYER("c", "b", "c3", "n3") "}\n");
    assert_int_equal(b->n_layers, 3);
    assert_int_equal(b->layers[0].n_ops, 1);
    assert_int_equal(b->layers[0].n_pro, 0);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(b->layer[i].moved_ops, 2);
        assert_int_equal(b->layers[i].n_pro, 2);
        assert_int_equal(b->layers[i].pro[0].kind, FG_OP_INSTANCE_NORM);
        assert_int_equal(b->layers[i].pro[1].kind, FG_OP_LEAKY_RELU);
        assert_int_equal(b->layers[i].n_ops, i == 2 ? 3 : 1); /* c keeps its own: the block's output */
        assert_int_equal(fg_block_stats_from(b, i), i - 1);
        assert_true(b->layers[i].pro_stats_given && b->layers[i - 1].exports_stats);
    }
    assert_string_equal(b->layers[1].pro[0].name, "n1");
    assert_string_equal(b->layers[2].pro[0].name, "n2");
    int has_n1 = 0;
    for (int p = 0; p < b->layers[1].n_params; p++)
        has_n1 += !strcmp(b->layers[1].params[p].name, "n1.weight") || !strcmp(b->layers[1].params[p].name, "n1.bias");
    assert_int_equal(has_n1, 2);
    assert_int_equal(b->layers[0].n_params, 2); /* c1.weight, c1.bias */
    const int64_t batch = 2, n_in = batch * 4 * 25;
    float *x = malloc(sizeof(float) * (size_t)n_in);
    fill(x, n_in, 11);
    const float *inputs[1] = {x};
    double *y = run_block(b, batch, inputs);
    int64_t n1, n2, n3;
    float *a = run_layer("return layer \"a\" { input = { \"N\", 4, 5, 5 },\n  conv2d { name = \"c1\", out_channels = 6, "
                         "kernel = 3, padding = 1 },\n  instance_norm { name = \"n1\", affine = true }, leaky_relu "
                         "{ negative_slope = 0.01 } }\n",
                         batch, x, &n1);
    float *bb = run_layer("return layer \"b\" { input = { \"N\", 6, 5, 5 },\n  conv2d { name = \"c2\", out_channels = 6, "
                          "kernel = 3, padding = 1 },\n  instance_norm { name = \"n2\", affine = true }, leaky_relu "
                          "{ negative_slope = 0.01 } }\n",
                          batch, a, &n2);
    float *cc = run_layer("return layer \"c\" { input = { \"N\", 6, 5, 5 },\n  conv2d { name = \"c3\", out_channels = 6, "
                          "kernel = 3, padding = 1 },\n  instance_norm { name = \"n3\", affine = true }, leaky_relu "
                          "{ negative_slope = 0.01 } }\n",
                          batch, bb, &n3);
    assert_int_equal(n3, batch * 6 * 25);
    double worst = 0;
    for (int64_t i = 0; i < n3; i++)
        worst = fmax(worst, fabs((double)cc[i] - y[i]));
    assert_true(worst < 1e-5); /* the tensors between layers are floats, at other points */
    free(x), free(y), free(a), free(bb), free(cc);
    free_block(b);

    /* stays where it was written */
    static const char *const kept[] = {
        /* a residual reads a's output too */
        "return block \"k\" {\n  input = { \"N\", 4, 5, 5 },\n" NN_LAYER("a", "input", "c1", "n1")
        "  layer \"b\" { conv2d { name = \"c2\", out_channels = 6, kernel = 1 }, add { tensor = \"a\" } },\n}\n",
        /* b has a prologue of its own */
        "return block \"k\" {\n  input = { \"N\", 4, 5, 5 },\n" NN_LAYER("a", "input", "c1", "n1")
        "  layer \"b\" { relu {}, conv2d { name = \"c2\", out_channels = 6, kernel = 1 } },\n}\n",
        /* a per-pixel statistic in an NCHW block (channels last, a 1x1 reader takes it: below) */
        "return block \"k\" {\n  input = { \"N\", 4, 5, 5 },\n"
        "  layer \"a\" { conv2d { name = \"c1\", out_channels = 6, kernel = 1 }, layer_norm { dim = 1 } },\n"
        "  layer \"b\" { conv2d { name = \"c2\", out_channels = 6, kernel = 1 } },\n}\n",
        /* a per-pixel statistic, channels last, read by a 3x3 conv */
        "return block \"k\" {\n  input = { \"N\", 4, 5, 5 }, layout = \"channels_last\",\n"
        "  layer \"a\" { conv2d { name = \"c1\", out_channels = 6, kernel = 1 }, layer_norm { dim = 1 } },\n"
        "  layer \"b\" { conv2d { name = \"c2\", out_channels = 6, kernel = 3, padding = 1 } },\n}\n",
        /* an op after the norm reads a named value */
        "return block \"k\" {\n  input = { \"N\", 4, 5, 5 },\n"
        "  layer \"a\" { conv2d { name = \"c1\", out_channels = 6, kernel = 1, as = \"y\" }, instance_norm {},\n"
        "    add { value = \"y\" } },\n"
        "  layer \"b\" { conv2d { name = \"c2\", out_channels = 6, kernel = 1 } },\n}\n",
        /* two layers read a */
        "return block \"k\" {\n  input = { \"N\", 4, 5, 5 },\n  output = \"c\",\n" NN_LAYER("a", "input", "c1", "n1")
        "  layer \"b\" { from = \"a\", conv2d { name = \"c2\", out_channels = 6, kernel = 1 } },\n"
        "  layer \"c\" { from = \"a\", conv2d { name = \"c3\", out_channels = 6, kernel = 1 }, add { tensor = \"b\" } },\n}\n",
    };
#undef NN_LAYER
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
        b = load_block(kept[i]);
        for (int l = 0; l < b->n_layers; l++)
            if (b->layer[l].moved_ops != 0)
                fail_msg("case %zu: layer %d took %d ops", i, l, b->layer[l].moved_ops);
        assert_true(b->layers[0].n_ops >= 2);
        free_block(b);
    }
}

/* x [N][C][P] as [N][P][C] (channels last), or back with `back`. */
static void transpose_channels(const double *from, double *to, int64_t n, int64_t c, int64_t p, bool back)
{
    for (int64_t s = 0; s < n; s++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t q = 0; q < p; q++) {
                int64_t nchw = (s * c + ch) * p + q, nhwc = (s * p + q) * c + ch;
                to[back ? nchw : nhwc] = from[back ? nhwc : nchw];
            }
}

/* A norm over each pixel's channels moves into the reader's prologue too where the block is
 * channels last and the reader starts with a 1x1 conv (pixel_norm_reader, gen/spec_loader.c:
 * ConvNeXt's dwconv -> LayerNorm -> Linear; its wgmma input pack computes the statistics).
 * No statistics are linked (the reader's pack computes them); the block's reference equals
 * the NCHW block's, where nothing moves, on the same numbers. */
static void pixel_norms_moved_to_a_pointwise_reader(void **state)
{
    (void)state;
#define CNX(layout)                                                                                          \
    "return block \"cnx\" {\n  input = { \"N\", 8, 6, 5 }," layout "\n"                                        \
    "  layer \"a\" { conv2d { name = \"dw\", out_channels = 8, kernel = 7, padding = 3, groups = 8 },\n"        \
    "    layer_norm { name = \"norm\", dim = 1, eps = 1e-6 }, mul { scalar = 2 } },\n"                          \
    "  layer \"b\" { conv2d { name = \"pw1\", out_channels = 32, kernel = 1 }, gelu {} },\n"                   \
    "  layer \"c\" { conv2d { name = \"pw2\", out_channels = 8, kernel = 1 }, add { tensor = \"input\" } },\n}\n"
    fg_block_ir *cl = load_block(CNX(" layout = \"channels_last\","));
    fg_block_ir *nchw = load_block(CNX(""));
#undef CNX
    assert_int_equal(cl->layers[0].n_ops, 1);
    assert_int_equal(cl->layer[1].moved_ops, 2);
    assert_int_equal(cl->layers[1].n_pro, 2);
    assert_int_equal(cl->layers[1].pro[0].kind, FG_OP_CHANNEL_LAYER_NORM);
    assert_int_equal(cl->layers[1].pro[1].kind, FG_OP_MUL);
    assert_false(cl->layers[1].pro_stats_given || cl->layers[0].exports_stats);
    assert_int_equal(cl->layer[2].moved_ops, 0);
    assert_int_equal(nchw->layer[1].moved_ops, 0);
    assert_int_equal(nchw->layers[0].n_ops, 3);
    const int64_t batch = 2, c = 8, p = 30, n = batch * c * p;
    float *x = malloc(sizeof(float) * (size_t)n), *x_cl = malloc(sizeof(float) * (size_t)n);
    double *xd = malloc(sizeof(double) * (size_t)n), *xd_cl = malloc(sizeof(double) * (size_t)n);
    fill(x, n, 5);
    for (int64_t i = 0; i < n; i++)
        xd[i] = x[i];
    transpose_channels(xd, xd_cl, batch, c, p, false);
    for (int64_t i = 0; i < n; i++)
        x_cl[i] = (float)xd_cl[i];
    const float *in_nchw[1] = {x}, *in_cl[1] = {x_cl};
    double *y = run_block(nchw, batch, in_nchw), *y_cl = run_block(cl, batch, in_cl);
    transpose_channels(y_cl, xd, batch, c, p, true);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(xd[i] - y[i]));
    assert_true(worst < 1e-5); /* the tensors between layers are floats, at other points */
    free(x), free(x_cl), free(xd), free(xd_cl), free(y), free(y_cl);
    free_block(cl);
    free_block(nchw);
}

/* Loaded for a target (fg_block_spec_load_string_for), a norm over each pixel's channels moves
 * only where the reader's conv runs on wgmma there: ConvNeXt's block in bf16 channels last
 * moves it for sm_90a, keeps it with its writer for sm_80 and with the engine forced to
 * mma.sync (pixel_norms_kept); a norm over whole channels moves on any target. */
static void pixel_norm_moves_follow_the_target(void **state)
{
    (void)state;
    static const char *const convnext =
        "return block \"cnx\" {\n  input = { \"N\", 96, 14, 14 }, dtype = \"bf16\", layout = \"channels_last\",\n"
        "  layer \"a\" { conv2d { name = \"dw\", out_channels = 96, kernel = 7, padding = 3, groups = 96 },\n"
        "    layer_norm { name = \"norm\", dim = 1, eps = 1e-6 } },\n"
        "  layer \"b\" { conv2d { name = \"pw1\", out_channels = 384, kernel = 1 }, gelu {} },\n"
        "  layer \"c\" { conv2d { name = \"pw2\", out_channels = 96, kernel = 1 }, add { tensor = \"input\" } },\n}\n";
    static const char *const nnunet =
        "return block \"nn\" {\n  input = { \"N\", 32, 8, 8 }, dtype = \"bf16\", layout = \"channels_last\",\n"
        "  layer \"a\" { conv2d { name = \"c1\", out_channels = 64, kernel = 3, padding = 1 }, instance_norm {} },\n"
        "  layer \"b\" { conv2d { name = \"c2\", out_channels = 64, kernel = 3, padding = 1 } },\n}\n";
    static const struct {
        const char *arch;
        int engine;
        bool moved;
    } targets[] = {
        {"sm_90a", FG_ENGINE_AUTO, true},
        {"sm_80", FG_ENGINE_AUTO, false},
        {"sm_90a", FG_ENGINE_PREFER_MMA, false},
    };
    for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, targets[t].arch);
        opts.engine = targets[t].engine;
        fg_block_ir b;
        fg_error err;
        if (fg_block_spec_load_string_for("cnx.lua", convnext, strlen(convnext), &opts, &b, &err) != 0)
            fail_msg("%s", err.msg);
        assert_int_equal(b.layer[1].moved_ops, targets[t].moved ? 1 : 0);
        assert_int_equal(b.pixel_norms_kept, !targets[t].moved);
        assert_int_equal(b.layers[0].n_ops, targets[t].moved ? 1 : 2);
        fg_block_ir_free(&b);
        if (fg_block_spec_load_string_for("nn.lua", nnunet, strlen(nnunet), &opts, &b, &err) != 0)
            fail_msg("%s", err.msg);
        assert_int_equal(b.layer[1].moved_ops, 1);
        assert_false(b.pixel_norms_kept);
        fg_block_ir_free(&b);
    }
}

/* The block specs in specs/blocks/ load, and their layers plan for sm_80 and sm_90a. */
static void shipped_block_specs(void **state)
{
    (void)state;
    for (int i = 0; i < FGT_N_BLOCK_SPECS; i++) {
        fg_block_ir b;
        fgt_load_block_spec(i, &b);
        assert_false(b.single);
        for (int l = 0; l < b.n_layers; l++) {
            fg_plan *plan = fgt_plan(&b.layers[l], -1);
            free(plan);
        }
        fg_block_ir_free(&b);
    }
}

int main(void)
{
    char *dir = fgt_tmpdir("blocks");
    fgt_isolate_environment(dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(errors),
        cmocka_unit_test(wiring),
        cmocka_unit_test(bottleneck_reference),
        cmocka_unit_test(convnext_reference),
        cmocka_unit_test(sd_reference),
        cmocka_unit_test(shipped_block_specs),
        cmocka_unit_test(dtype_layout_errors),
        cmocka_unit_test(dtype_layout_loading),
        cmocka_unit_test(sd_bf16_channels_last_reference),
        cmocka_unit_test(dtype_layout_api),
        cmocka_unit_test(packed_weights_outside_the_workspace),
        cmocka_unit_test(statistics_handed_on),
        cmocka_unit_test(narrower_blocks_where_128_does_not_fit),
        cmocka_unit_test(residual_rows_loaded_ahead),
        cmocka_unit_test(norms_moved_to_readers),
        cmocka_unit_test(pixel_norms_moved_to_a_pointwise_reader),
        cmocka_unit_test(pixel_norm_moves_follow_the_target),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fgt_rmtree(dir);
    free(dir);
    return rc;
}
