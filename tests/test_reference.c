/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU reference against values computed by hand (in the comments) or from closed
 * forms: it is the oracle of every GPU test, so it is itself checked against numbers that
 * do not come from it. Small specs are written as strings and fed explicit inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_reference.h"
#include "fold.h"
#include "random_init.h"
#include "spec_loader.h"
#include "test_util.h"

typedef struct named_param {
    const char *name;
    const float *data;
    int count;
} named_param;

/* Loads `src`, binds the parameters by name, runs `batch` samples of `input`; returns the
 * output (caller frees) and its element count. */
static double *run(const char *src, int batch, const float *input, int input_count, const named_param *params,
                   int n_params, int64_t *out_count, fg_layer_ir **ir_out)
{
    fg_layer_ir *ir = fgt_load_string(src);
    assert_int_equal(input_count, batch * fg_shape_sample_count(&ir->input));
    const float *bound[FG_MAX_PARAMS] = {0};
    for (int i = 0; i < n_params; i++) {
        int p = fgt_find_param(ir, params[i].name);
        if (p < 0)
            fail_msg("the spec has no parameter '%s'", params[i].name);
        if (ir->params[p].count != params[i].count)
            fail_msg("parameter '%s' has %lld elements, the test gives %d", params[i].name,
                     (long long)ir->params[p].count, params[i].count);
        bound[p] = params[i].data;
    }
    for (int p = 0; p < ir->n_params; p++)
        if (!bound[p])
            fail_msg("the test binds no data to parameter '%s'", ir->params[p].name);
    int64_t n = batch * fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out);
    double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_non_null(out);
    for (int64_t i = 0; i < n; i++)
        out[i] = NAN; /* poisoned: every element must be written */
    fg_error err = {{0}};
    if (fg_reference_run(ir, batch, input, bound, out, &err) != 0)
        fail_msg("fg_reference_run: %s", err.msg);
    *out_count = n;
    if (ir_out)
        *ir_out = ir;
    else
        free(ir);
    return out;
}

static void expect_values(const char *what, const double *got, const double *want, int64_t n, double tol)
{
    for (int64_t i = 0; i < n; i++) {
        double scale = fabs(want[i]) > 1 ? fabs(want[i]) : 1;
        if (!(fabs(got[i] - want[i]) <= tol * scale))
            fail_msg("%s: element %lld is %.17g, expected %.17g", what, (long long)i, got[i], want[i]);
    }
}

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define EXPECT(what, got, n, ...)                                                                            \
    do {                                                                                                     \
        static const double want_[] = {__VA_ARGS__};                                                        \
        assert_int_equal((n), N_OF(want_));                                                                  \
        expect_values((what), (got), want_, (n), 1e-12);                                                     \
    } while (0)

/* The 4x4 input 1..16 used by several cases:
 *    1  2  3  4
 *    5  6  7  8
 *    9 10 11 12
 *   13 14 15 16 */
static const float ramp16[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
/* and a 3x3 kernel with no symmetry:
 *    1  2  0
 *    0  1  0
 *   -1  0  3 */
static const float kernel3[9] = {1, 2, 0, 0, 1, 0, -1, 0, 3};

/* ---- convolution ---------------------------------------------------------------------------- */

static void conv2d_known_weights(void **state)
{
    (void)state;
    const char *src = "return layer \"c\" {\n"
                      "  input = { \"N\", 1, 4, 4 },\n"
                      "  conv2d { out_channels = 1, kernel = 3 },\n"
                      "}\n";
    static const float bias[1] = {0.5f};
    float input[32];
    for (int i = 0; i < 16; i++) {
        input[i] = ramp16[i];
        input[16 + i] = 2 * ramp16[i]; /* the second sample: twice the first */
    }
    named_param p[] = {{"conv.weight", kernel3, 9}, {"conv.bias", bias, 1}};
    int64_t n;
    double *out = run(src, 2, input, 32, p, 2, &n, NULL);
    /* out[0][0] = 1*1 + 2*2 + 0*3 + 0*5 + 1*6 + 0*7 - 1*9 + 0*10 + 3*11 = 35, + 0.5
     * out[0][1] = 1*2 + 2*3 + 1*7 - 1*10 + 3*12 = 41, + 0.5
     * out[1][0] = 1*5 + 2*6 + 1*10 - 1*13 + 3*15 = 59, + 0.5
     * out[1][1] = 1*6 + 2*7 + 1*11 - 1*14 + 3*16 = 65, + 0.5
     * second sample: 2 * (35, 41, 59, 65) + 0.5 */
    EXPECT("conv2d 3x3", out, n, 35.5, 41.5, 59.5, 65.5, 70.5, 82.5, 118.5, 130.5);
    free(out);
}

static void conv2d_stride_and_padding(void **state)
{
    (void)state;
    const char *src = "return layer \"c\" {\n"
                      "  input = { \"N\", 1, 4, 4 },\n"
                      "  conv2d { out_channels = 1, kernel = 3, stride = 2, padding = 1, bias = false },\n"
                      "}\n";
    named_param p[] = {{"conv.weight", kernel3, 9}};
    int64_t n;
    double *out = run(src, 1, ramp16, 16, p, 1, &n, NULL);
    /* windows start at -1 and 1 in each dim; taps outside the input read zero:
     * [0][0]: rows -1..1, cols -1..1: 1*x[0][0] + 3*x[1][1]            = 1 + 18           = 19
     * [0][1]: rows -1..1, cols  1..3: 1*x[0][2] - 1*x[1][1] + 3*x[1][3] = 3 - 6 + 24      = 21
     * [1][0]: rows  1..3, cols -1..1: 2*x[1][0] + 1*x[2][0] + 3*x[3][1] = 10 + 9 + 42    = 61
     * [1][1]: rows  1..3, cols  1..3: 6 + 2*7 + 11 - 14 + 3*16                           = 65 */
    EXPECT("conv2d stride 2 padding 1", out, n, 19, 21, 61, 65);
    free(out);
}

static void conv2d_dilation(void **state)
{
    (void)state;
    const char *src = "return layer \"c\" {\n"
                      "  input = { \"N\", 1, 5, 5 },\n"
                      "  conv2d { out_channels = 1, kernel = 3, dilation = 2, bias = false },\n"
                      "}\n";
    float input[25];
    for (int i = 0; i < 25; i++)
        input[i] = (float)(i + 1); /* x[i][j] = 5i + j + 1 */
    named_param p[] = {{"conv.weight", kernel3, 9}};
    int64_t n;
    double *out = run(src, 1, input, 25, p, 1, &n, NULL);
    /* taps at rows/cols 0, 2, 4: 1*x[0][0] + 2*x[0][2] + 1*x[2][2] - 1*x[4][0] + 3*x[4][4]
     *                          = 1 + 6 + 13 - 21 + 75 = 74 */
    EXPECT("conv2d dilation 2", out, n, 74);
    free(out);

    /* asymmetric: kernel 1x2 with dilation (1, 3) on one row 1 2 3 4 5: out[j] = a*x[j] + b*x[j+3] */
    src = "return layer \"c\" {\n"
          "  input = { \"N\", 1, 1, 5 },\n"
          "  conv2d { out_channels = 1, kernel = { 1, 2 }, dilation = { 1, 3 }, bias = false },\n"
          "}\n";
    static const float w[2] = {10, 1};
    static const float row[5] = {1, 2, 3, 4, 5};
    named_param q[] = {{"conv.weight", w, 2}};
    out = run(src, 1, row, 5, q, 1, &n, NULL);
    EXPECT("conv2d dilation (1, 3)", out, n, 10 + 4, 20 + 5);
    free(out);
}

static void conv2d_groups(void **state)
{
    (void)state;
    const char *src = "return layer \"g\" {\n"
                      "  input = { \"N\", 4, 1, 1 },\n"
                      "  conv2d { out_channels = 2, kernel = 1, groups = 2 },\n"
                      "}\n";
    static const float input[4] = {1, 2, 3, 4};
    static const float w[4] = {10, 20, 30, 40}; /* [2 out][2 in per group] */
    static const float b[2] = {0.5f, -0.5f};
    named_param p[] = {{"conv.weight", w, 4}, {"conv.bias", b, 2}};
    int64_t n;
    double *out = run(src, 1, input, 4, p, 2, &n, NULL);
    /* group 0 reads channels 0, 1: 10*1 + 20*2 + 0.5; group 1 reads 2, 3: 30*3 + 40*4 - 0.5 */
    EXPECT("conv2d groups 2", out, n, 50.5, 249.5);
    free(out);

    /* depthwise 2x2 over two channels */
    src = "return layer \"dw\" {\n"
          "  input = { \"N\", 2, 2, 2 },\n"
          "  conv2d { out_channels = 2, kernel = 2, groups = 2, bias = false },\n"
          "}\n";
    static const float x2[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const float w2[8] = {1, 0, 0, 1, 0, 1, 1, 0};
    named_param q[] = {{"conv.weight", w2, 8}};
    out = run(src, 1, x2, 8, q, 1, &n, NULL);
    EXPECT("depthwise", out, n, 1 + 4, 6 + 7);
    free(out);
}

static void conv3d_known_weights(void **state)
{
    (void)state;
    const char *src = "return layer \"c3\" {\n"
                      "  input = { \"N\", 1, 2, 2, 2 },\n"
                      "  conv3d { out_channels = 1, kernel = 2 },\n"
                      "}\n";
    static const float input[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const float w[8] = {1, -1, 2, -2, 3, -3, 4, -4};
    static const float b[1] = {100};
    named_param p[] = {{"conv.weight", w, 8}, {"conv.bias", b, 1}};
    int64_t n;
    double *out = run(src, 1, input, 8, p, 2, &n, NULL);
    /* 1 - 2 + 6 - 8 + 15 - 18 + 28 - 32 = -10, + 100 */
    EXPECT("conv3d", out, n, 90);
    free(out);
}

/* ---- normalizations ------------------------------------------------------------------------ */

/* A layer whose conv is the identity on C channels (1x1, weight I, no bias), so the ops
 * after it see the input exactly. */
static char *identity_layer(int c, const char *dims, const char *ops)
{
    char *s = malloc(2048);
    assert_non_null(s);
    snprintf(s, 2048,
             "return layer \"t\" {\n"
             "  input = { \"N\", %d, %s },\n"
             "  conv2d { out_channels = %d, kernel = 1, bias = false },\n"
             "%s"
             "}\n",
             c, dims, c, ops);
    return s;
}

static float *identity_weight(int c)
{
    float *w = calloc((size_t)(c * c), sizeof *w);
    assert_non_null(w);
    for (int i = 0; i < c; i++)
        w[i * c + i] = 1;
    return w;
}

static void group_norm(void **state)
{
    (void)state;
    char *src = identity_layer(4, "1, 2", "  group_norm { groups = 2 },\n");
    float *I = identity_weight(4);
    /* group 0 = channels 0, 1: {1, 2, 3, 4}: mean 2.5, var (2.25 + .25 + .25 + 2.25)/4 = 1.25
     * group 1 = channels 2, 3: {10, 10, 10, 14}: mean 11, var (1 + 1 + 1 + 9)/4 = 3 */
    static const float x[8] = {1, 2, 3, 4, 10, 10, 10, 14};
    static const float gw[4] = {1, 2, 1, 0.5f}, gb[4] = {0, 1, -1, 0};
    named_param p[] = {{"conv.weight", I, 16}, {"group_norm.weight", gw, 4}, {"group_norm.bias", gb, 4}};
    int64_t n;
    double *out = run(src, 1, x, 8, p, 3, &n, NULL);
    double s0 = sqrt(1.25 + 1e-5), s1 = sqrt(3 + 1e-5);
    double want[8] = {
        (1 - 2.5) / s0 * 1 + 0,     (2 - 2.5) / s0 * 1 + 0,     (3 - 2.5) / s0 * 2 + 1,   (4 - 2.5) / s0 * 2 + 1,
        (10 - 11) / s1 * 1 - 1,     (10 - 11) / s1 * 1 - 1,     (10 - 11) / s1 * 0.5 + 0, (14 - 11) / s1 * 0.5 + 0,
    };
    assert_int_equal(n, 8);
    expect_values("group_norm", out, want, 8, 1e-12);
    free(out);
    free(src);
    free(I);
}

static void instance_norm(void **state)
{
    (void)state;
    char *src = identity_layer(2, "2, 2", "  instance_norm {},\n");
    float *I = identity_weight(2);
    /* channel 0: {1, 2, 3, 4}: mean 2.5 var 1.25; channel 1 constant: normalizes to 0;
     * sample 1 = sample 0 + 100: the statistics are per sample, the result the same */
    float x[16] = {1, 2, 3, 4, 7, 7, 7, 7};
    for (int i = 0; i < 8; i++)
        x[8 + i] = x[i] + 100;
    named_param p[] = {{"conv.weight", I, 4}};
    int64_t n;
    double *out = run(src, 2, x, 16, p, 1, &n, NULL);
    double s = sqrt(1.25 + 1e-5);
    double want[16] = {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s, 0, 0, 0, 0};
    memcpy(want + 8, want, 8 * sizeof(double));
    assert_int_equal(n, 16);
    expect_values("instance_norm", out, want, 16, 1e-9);
    free(out);
    free(src);
    free(I);
}

static void layer_norm(void **state)
{
    (void)state;
    /* over C, H, W = everything: {1, 2, 3, 4}: mean 2.5, var 1.25; elementwise affine */
    char *src = identity_layer(2, "1, 2", "  layer_norm { normalized_shape = { 2, 1, 2 }, eps = 1e-6 },\n");
    float *I = identity_weight(2);
    static const float x[4] = {1, 2, 3, 4};
    static const float lw[4] = {1, 2, 3, 4}, lb[4] = {0, 0, 0, 1};
    named_param p[] = {{"conv.weight", I, 4}, {"layer_norm.weight", lw, 4}, {"layer_norm.bias", lb, 4}};
    int64_t n;
    double *out = run(src, 1, x, 4, p, 3, &n, NULL);
    double s = sqrt(1.25 + 1e-6);
    double want[4] = {-1.5 / s * 1, -0.5 / s * 2, 0.5 / s * 3, 1.5 / s * 4 + 1};
    expect_values("layer_norm over C,H,W", out, want, n, 1e-12);
    free(out);
    free(src);

    /* over the last dim only: each row {a, b} becomes (-1, 1) * |a-b|/2 / sqrt(var + eps) */
    src = identity_layer(2, "1, 2", "  layer_norm { normalized_shape = 2, affine = false },\n");
    static const float y[4] = {0, 2, 5, 5};
    named_param q[] = {{"conv.weight", I, 4}};
    out = run(src, 1, y, 4, q, 1, &n, NULL);
    double t = 1 / sqrt(1 + 1e-5); /* row 0: mean 1, var 1; row 1: constant */
    double want2[4] = {-t, t, 0, 0};
    expect_values("layer_norm over W", out, want2, n, 1e-12);
    free(out);
    free(src);
    free(I);
}

/* layer_norm { dim = 1 } (ConvNeXt's LayerNorm): each (sample, position) over its channels.
 * Identity conv on C = 3, [1, 2] positions, batch 2. Hand values: sample 0 position 0 holds
 * {1, 2, 3} (mean 2, var 2/3), position 1 {4, 4, 4} (var 0: the bias alone); sample 1
 * position 0 {0, 6, -3} (mean 1, var 14), position 1 {10, -2, 1} (mean 3, var 26). Weight
 * and bias per channel. */
static void channel_layer_norm(void **state)
{
    (void)state;
    char *src = identity_layer(3, "1, 2", "  layer_norm { name = \"ln\", dim = 1, eps = 1e-6 },\n");
    float *I = identity_weight(3);
    /* NCHW: x[n][c][w] */
    static const float x[12] = {1, 4, 2, 4, 3, 4, /* sample 1 */ 0, 10, 6, -2, -3, 1};
    static const float lw[3] = {1, 2, 3}, lb[3] = {0, 0.5f, -1};
    named_param p[] = {{"conv.weight", I, 9}, {"ln.weight", lw, 3}, {"ln.bias", lb, 3}};
    int64_t n;
    double *out = run(src, 2, x, 12, p, 3, &n, NULL);
    assert_int_equal(n, 12);
    double r0 = 1 / sqrt(2.0 / 3 + 1e-6), r1 = 1 / sqrt(14 + 1e-6), r2 = 1 / sqrt(26 + 1e-6);
    double want[12] = {
        -1 * r0 * 1 + 0,    0 + 0,       /* channel 0 */
        0 * r0 * 2 + 0.5,   0 + 0.5,     /* channel 1 */
        1 * r0 * 3 - 1,     0 - 1,       /* channel 2 */
        -1 * r1 * 1 + 0,    7 * r2 * 1 + 0,
        5 * r1 * 2 + 0.5,   -5 * r2 * 2 + 0.5,
        -4 * r1 * 3 - 1,    -2 * r2 * 3 - 1,
    };
    expect_values("layer_norm dim 1", out, want, n, 1e-12);
    free(out);
    free(src);

    /* a negative dim from the end (-3 of [N, C, H, W]) is the same op; no affine; a larger
     * value checked against a direct computation, position by position, in double */
    src = identity_layer(5, "3, 4", "  layer_norm { dim = -3, affine = false },\n");
    float *I5 = identity_weight(5);
    float y[2 * 5 * 12];
    for (int i = 0; i < 2 * 5 * 12; i++)
        y[i] = (float)((i * 37 % 23) - 11) * 0.25f;
    named_param q[] = {{"conv.weight", I5, 25}};
    out = run(src, 2, y, 2 * 5 * 12, q, 1, &n, NULL);
    assert_int_equal(n, 120);
    for (int b = 0; b < 2; b++)
        for (int pos = 0; pos < 12; pos++) {
            double m = 0, v = 0;
            for (int c = 0; c < 5; c++)
                m += y[(b * 5 + c) * 12 + pos];
            m /= 5;
            for (int c = 0; c < 5; c++)
                v += (y[(b * 5 + c) * 12 + pos] - m) * (y[(b * 5 + c) * 12 + pos] - m);
            v /= 5;
            for (int c = 0; c < 5; c++) {
                int i = (b * 5 + c) * 12 + pos;
                double w = (y[i] - m) / sqrt(v + 1e-5);
                if (fabs(out[i] - w) > 1e-12)
                    fail_msg("layer_norm dim -3 at sample %d channel %d position %d: %.17g, expected %.17g", b, c,
                             pos, out[i], w);
            }
        }
    free(out);
    free(src);
    free(I5);
    free(I);
}

/* In a prologue: the input's channels normalized per position before a 1x1 conv that sums
 * them with weights {1, 10}: input C = 2, one position per sample {a, b} -> normalized
 * {-1, 1} * r (a < b) -> affine (w {2, 3}, b {1, 0}) -> {1 - 2r, 3r} -> 1 - 2r + 30r. */
static void channel_layer_norm_prologue(void **state)
{
    (void)state;
    const char *src = "return layer \"p\" {\n  input = { \"N\", 2, 1, 1 },\n  layer_norm { name = \"ln\", dim = 1 },\n"
                      "  conv2d { name = \"conv\", out_channels = 1, kernel = 1, bias = false },\n}\n";
    static const float x[2] = {1, 3}, w[2] = {1, 10}, lw[2] = {2, 3}, lb[2] = {1, 0};
    named_param p[] = {{"conv.weight", w, 2}, {"ln.weight", lw, 2}, {"ln.bias", lb, 2}};
    int64_t n;
    double *out = run(src, 1, x, 2, p, 3, &n, NULL);
    assert_int_equal(n, 1);
    double r = 1 / sqrt(1 + 1e-5);
    static double want[1];
    want[0] = 1 + 28 * r;
    expect_values("layer_norm dim 1 in a prologue", out, want, 1, 1e-12);
    free(out);
}

static void batch_norm(void **state)
{
    (void)state;
    /* batch statistics: per channel over the batch and the spatial dims.
     * channel 0: sample 0 {1, 3}, sample 1 {5, 7}: mean 4, var (9 + 1 + 1 + 9)/4 = 5
     * channel 1: sample 0 {0, 0}, sample 1 {2, 2}: mean 1, var 1 */
    char *src = identity_layer(2, "1, 2", "  batch_norm { name = \"bn\" },\n");
    float *I = identity_weight(2);
    static const float x[8] = {1, 3, 0, 0, 5, 7, 2, 2};
    static const float w[2] = {1, 3}, b[2] = {0, 10};
    named_param p[] = {{"conv.weight", I, 4}, {"bn.weight", w, 2}, {"bn.bias", b, 2}};
    int64_t n;
    double *out = run(src, 2, x, 8, p, 3, &n, NULL);
    double s0 = sqrt(5 + 1e-5), s1 = sqrt(1 + 1e-5);
    double want[8] = {-3 / s0, -1 / s0, -3 / s1 + 10, -3 / s1 + 10, 1 / s0, 3 / s0, 3 / s1 + 10, 3 / s1 + 10};
    expect_values("batch_norm (batch statistics)", out, want, n, 1e-12);
    free(out);
    free(src);

    /* running statistics: (x - running_mean) / sqrt(running_var + eps) * weight + bias */
    src = identity_layer(2, "1, 2", "  batch_norm { name = \"bn\", stats = \"running\", eps = 1e-3 },\n");
    static const float rm[2] = {1, -1}, rv[2] = {4, 0.25f};
    static const float rw[2] = {2, 1}, rb[2] = {0, 3};
    named_param q[] = {{"conv.weight", I, 4},     {"bn.weight", rw, 2},      {"bn.bias", rb, 2},
                       {"bn.running_mean", rm, 2}, {"bn.running_var", rv, 2}};
    out = run(src, 2, x, 8, q, 5, &n, NULL);
    double r0 = sqrt(4 + 1e-3), r1 = sqrt(0.25 + 1e-3);
    double want2[8] = {(1 - 1) / r0 * 2, (3 - 1) / r0 * 2, (0 + 1) / r1 + 3, (0 + 1) / r1 + 3,
                       (5 - 1) / r0 * 2, (7 - 1) / r0 * 2, (2 + 1) / r1 + 3, (2 + 1) / r1 + 3};
    expect_values("batch_norm (running statistics)", out, want2, n, 1e-12);
    free(out);
    free(src);
    free(I);
}

/* ---- a batch_norm folded into the conv (gen/fold.h) ------------------------------------------ */

/* The fold's arithmetic on values whose results are exact: conv [2, 1, 1, 2] with bias, then a
 * batch_norm with eps 0.25 (exact in binary), var + eps = 4 and 1. */
static void batch_norm_fold_arithmetic(void **state)
{
    (void)state;
    static const float w[4] = {1, -2, 0.5f, 3}, b[2] = {1, -1};
    static const float gamma[2] = {2, -1}, beta[2] = {0.5f, 0};
    static const float mean[2] = {3, -1}, var[2] = {3.75f, 0.75f};
    fg_layer_ir *ir = fgt_load_string("return layer \"f\" {\n"
                                      "  input = { \"N\", 1, 3, 3 },\n"
                                      "  conv2d { out_channels = 2, kernel = { 1, 2 } },\n"
                                      "  batch_norm { name = \"bn\", stats = \"running\", eps = 0.25 },\n"
                                      "}\n");
    fg_bn_fold fold;
    fg_bn_fold_find(ir, &fold);
    assert_int_equal(fold.op, 1);
    assert_int_equal(fold.channels, 2);
    assert_int_equal(fold.per_channel, 2);
    const float *params[FG_MAX_PARAMS] = {0};
    params[fgt_find_param(ir, "conv.weight")] = w;
    params[fgt_find_param(ir, "conv.bias")] = b;
    params[fgt_find_param(ir, "bn.weight")] = gamma;
    params[fgt_find_param(ir, "bn.bias")] = beta;
    params[fgt_find_param(ir, "bn.running_mean")] = mean;
    params[fgt_find_param(ir, "bn.running_var")] = var;
    float fw[4], fb[2];
    fg_bn_fold_compute(&fold, params, fw, fb);
    /* scale = gamma / sqrt(var + eps) = {2 / 2, -1 / 1} = {1, -1};
     * w' = w * scale = {1, -2, -0.5, -3}; b' = (b - mean) * scale + beta = {-2 + 0.5, 0 + 0} */
    static const float want_w[4] = {1, -2, -0.5f, -3}, want_b[2] = {-1.5f, 0};
    for (int i = 0; i < 4; i++)
        assert_true(fw[i] == want_w[i]);
    for (int i = 0; i < 2; i++)
        assert_true(fb[i] == want_b[i]);
    free(ir);

    /* no affine, no conv bias: scale = 1 / sqrt(var + eps) = {0.5, 1}; b' = -mean * scale */
    ir = fgt_load_string("return layer \"g\" {\n"
                         "  input = { \"N\", 1, 3, 3 },\n"
                         "  conv2d { out_channels = 2, kernel = { 1, 2 }, bias = false },\n"
                         "  batch_norm { name = \"bn\", stats = \"running\", eps = 0.25, affine = false },\n"
                         "}\n");
    fg_bn_fold_find(ir, &fold);
    assert_int_equal(fold.op, 1);
    assert_int_equal(fold.conv_bias, -1);
    assert_int_equal(fold.norm_weight, -1);
    assert_int_equal(fold.norm_bias, -1);
    memset(params, 0, sizeof params);
    params[fgt_find_param(ir, "conv.weight")] = w;
    params[fgt_find_param(ir, "bn.running_mean")] = mean;
    params[fgt_find_param(ir, "bn.running_var")] = var;
    fg_bn_fold_compute(&fold, params, fw, fb);
    static const float want_w2[4] = {0.5f, -1, 0.5f, 3}, want_b2[2] = {-1.5f, 1};
    for (int i = 0; i < 4; i++)
        assert_true(fw[i] == want_w2[i]);
    for (int i = 0; i < 2; i++)
        assert_true(fb[i] == want_b2[i]);
    free(ir);
}

/* The reference of a layer with the batch_norm (random parameters and input) against the
 * reference of the same layer without it, its conv given the folded weight and bias: equal
 * but for the folded tensors' rounding to float. */
static void expect_fold_equivalent(const char *with_norm, const char *folded, int batch)
{
    fg_layer_ir *ir = fgt_load_string(with_norm), *ir2 = fgt_load_string(folded);
    fg_bn_fold fold;
    fg_bn_fold_find(ir, &fold);
    assert_int_equal(fold.op, 1);
    float *params[FG_MAX_PARAMS] = {0};
    for (int p = 0; p < ir->n_params; p++)
        assert_non_null(params[p] = malloc(sizeof(float) * (size_t)ir->params[p].count));
    fg_random_params(ir, 11, params);
    int64_t n_in = batch * fg_shape_sample_count(&ir->input);
    int64_t n_out = batch * fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out);
    assert_int_equal(n_out, batch * fg_shape_sample_count(&ir2->ops[ir2->n_ops - 1].out));
    float *x = malloc(sizeof(float) * (size_t)n_in);
    float *fw = malloc(sizeof(float) * (size_t)(fold.channels * fold.per_channel));
    float *fb = malloc(sizeof(float) * (size_t)fold.channels);
    double *want = malloc(sizeof(double) * (size_t)n_out), *got = malloc(sizeof(double) * (size_t)n_out);
    assert_true(x && fw && fb && want && got);
    fg_random_uniform(x, (size_t)n_in, 11, 1, -1.0f, 1.0f);
    fg_bn_fold_compute(&fold, (const float *const *)params, fw, fb);
    /* the folded layer: the conv reads w' and b', every other parameter is the same tensor */
    const float *bound[FG_MAX_PARAMS] = {0};
    for (int p = 0; p < ir2->n_params; p++) {
        const char *name = ir2->params[p].name;
        bound[p] = strcmp(name, "conv.weight") == 0 ? fw
                   : strcmp(name, "conv.bias") == 0 ? fb
                                                    : params[fgt_find_param(ir, name)];
    }
    fg_error err = {{0}};
    if (fg_reference_run(ir, batch, x, (const float *const *)params, want, &err) != 0 ||
        fg_reference_run(ir2, batch, x, bound, got, &err) != 0)
        fail_msg("fg_reference_run: %s", err.msg);
    double biggest = 0;
    for (int64_t i = 0; i < n_out; i++)
        biggest = fmax(biggest, fabs(want[i]));
    assert_true(biggest > 0.1); /* real values, not zeros */
    expect_values(ir->name, got, want, n_out, 2e-6);
    for (int p = 0; p < ir->n_params; p++)
        free(params[p]);
    free(x);
    free(fw);
    free(fb);
    free(want);
    free(got);
    free(ir);
    free(ir2);
}

static void batch_norm_fold_is_the_unfolded_layer(void **state)
{
    (void)state;
    expect_fold_equivalent("return layer \"a\" {\n  input = { \"N\", 3, 9, 11 },\n"
                           "  conv2d { out_channels = 5, kernel = 3, padding = 1 },\n"
                           "  batch_norm { name = \"bn\", stats = \"running\", eps = 1e-3 },\n"
                           "  relu {},\n}\n",
                           "return layer \"a\" {\n  input = { \"N\", 3, 9, 11 },\n"
                           "  conv2d { out_channels = 5, kernel = 3, padding = 1 },\n"
                           "  relu {},\n}\n",
                           2);
    /* 3D, grouped, no conv bias, no affine; a later op with a parameter of its own */
    expect_fold_equivalent("return layer \"b\" {\n  input = { \"N\", 4, 5, 7, 6 },\n"
                           "  conv3d { out_channels = 6, kernel = { 2, 3, 3 }, groups = 2, bias = false },\n"
                           "  batch_norm { name = \"bn\", stats = \"running\", affine = false },\n"
                           "  mul { param = \"gain\" },\n}\n",
                           "return layer \"b\" {\n  input = { \"N\", 4, 5, 7, 6 },\n"
                           "  conv3d { out_channels = 6, kernel = { 2, 3, 3 }, groups = 2 },\n"
                           "  mul { param = \"gain\" },\n}\n",
                           3);
    /* depthwise, strided, then a norm over the batch */
    expect_fold_equivalent("return layer \"c\" {\n  input = { \"N\", 4, 10, 10 },\n"
                           "  conv2d { out_channels = 8, kernel = 3, stride = 2, groups = 4 },\n"
                           "  batch_norm { name = \"bn\", stats = \"running\" },\n"
                           "  batch_norm { name = \"bn2\" },\n}\n",
                           "return layer \"c\" {\n  input = { \"N\", 4, 10, 10 },\n"
                           "  conv2d { out_channels = 8, kernel = 3, stride = 2, groups = 4 },\n"
                           "  batch_norm { name = \"bn2\" },\n}\n",
                           4);
}

/* ---- reductions -------------------------------------------------------------------------------- */

static void logsumexp_is_stable(void **state)
{
    (void)state;
    char *src = identity_layer(3, "1, 1", "  logsumexp { dim = 1 },\n");
    float *I = identity_weight(3);
    /* three samples: small, large (exp(1000) overflows a double), very negative */
    static const float x[9] = {1, 2, 3, 1000, 999, 1000, -1000, -1000, -1000};
    named_param p[] = {{"conv.weight", I, 9}};
    int64_t n;
    double *out = run(src, 3, x, 9, p, 1, &n, NULL);
    /* log(e + e^2 + e^3); 1000 + log(2 + e^-1); -1000 + log(3) */
    EXPECT("logsumexp", out, n, 3.40760596444438, 1000.8619948040582, -998.9013877113318);
    for (int i = 0; i < 3; i++)
        assert_true(isfinite(out[i]));
    free(out);
    free(src);
    free(I);
}

static void softmax_sums_to_one(void **state)
{
    (void)state;
    char *src = identity_layer(3, "1, 2", "  softmax { dim = 1 },\n");
    float *I = identity_weight(3);
    /* per (h, w) position over the 3 channels: position 0 sees {1, 2, 3}, position 1 sees
     * {1000, 999, 1000} */
    static const float x[6] = {1, 1000, 2, 999, 3, 1000};
    named_param p[] = {{"conv.weight", I, 9}};
    int64_t n;
    double *out = run(src, 1, x, 6, p, 1, &n, NULL);
    EXPECT("softmax", out, n, 0.09003057317038046, 0.4223187982515182, 0.24472847105479767, 0.15536240349696362,
           0.6652409557748219, 0.4223187982515182);
    assert_true(fabs(out[0] + out[2] + out[4] - 1) < 1e-15);
    assert_true(fabs(out[1] + out[3] + out[5] - 1) < 1e-15);
    free(out);
    free(src);

    /* over W: each row sums to one */
    src = identity_layer(1, "2, 4", "  softmax { dim = -1 },\n");
    static const float y[8] = {0, 0, 0, 0, -5, 1, 2, 30};
    named_param q[] = {{"conv.weight", I, 1}};
    out = run(src, 1, y, 8, q, 1, &n, NULL);
    double row1 = exp(-5.0) + exp(1.0) + exp(2.0) + exp(30.0);
    double want[8] = {0.25, 0.25, 0.25, 0.25, exp(-5.0) / row1, exp(1.0) / row1, exp(2.0) / row1, exp(30.0) / row1};
    expect_values("softmax over W", out, want, n, 1e-12);
    assert_true(fabs(out[4] + out[5] + out[6] + out[7] - 1) < 1e-14);
    free(out);
    free(src);
    free(I);
}

static void max_min_sum_mean(void **state)
{
    (void)state;
    float *I = identity_weight(2);
    /* x[c][h][w], C = 2, H = 2, W = 3:
     *   c0: 1 5 2 | -1 0 4     c1: 3 3 9 | 7 -8 6 */
    static const float x[12] = {1, 5, 2, -1, 0, 4, 3, 3, 9, 7, -8, 6};
    named_param p[] = {{"conv.weight", I, 4}};
    int64_t n;
    struct {
        const char *op;
        int count;
        double want[12];
    } cases[] = {
        {"  max { dim = 1 },\n", 6, {3, 5, 9, 7, 0, 6}},
        {"  min { dim = 1, keepdim = true },\n", 6, {1, 3, 2, -1, -8, 4}},
        {"  max { dims = { 2, 3 } },\n", 2, {5, 9}},
        {"  min { dims = { -1, -2 }, keepdim = true },\n", 2, {-1, -8}},
        {"  sum { dim = 3 },\n", 4, {8, 3, 15, 5}},
        {"  sum { dims = { 1, 2, 3 } },\n", 1, {31}},
        {"  mean { dim = 2 },\n", 6, {0, 2.5, 3, 5, -2.5, 7.5}},
        {"  mean { dims = { 1, 3 }, keepdim = true },\n", 2, {23.0 / 6, 8.0 / 6}}, /* per row, over C and W */
        {"  global_avg_pool {},\n", 2, {11.0 / 6, 20.0 / 6}},
        {"  sum { dim = 3 },\n  max { dim = 1 },\n", 2, {15, 5}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *src = identity_layer(2, "2, 3", cases[i].op);
        double *out = run(src, 1, x, 12, p, 1, &n, NULL);
        assert_int_equal(n, cases[i].count);
        expect_values(cases[i].op, out, cases[i].want, n, 1e-12);
        free(out);
        free(src);
    }
    free(I);
}

/* ---- shape ops ---------------------------------------------------------------------------------- */

/* A shape op gives the same elements in the same order (a dense value in a new shape): the
 * values below are the input's, or what the ops after the shape op make of them, in the
 * input's order; the output's shape is the reshaped one. Two samples, so that a sample's
 * elements stay its own. */
static void shape_ops(void **state)
{
    (void)state;
    float *I = identity_weight(2);
    /* x[n][c][h][w], C = 2, H = 2, W = 3: sample 0 as in max_min_sum_mean, sample 1 its
     * negation plus 10 */
    float x[24];
    static const float x0[12] = {1, 5, 2, -1, 0, 4, 3, 3, 9, 7, -8, 6};
    for (int i = 0; i < 12; i++) {
        x[i] = x0[i];
        x[12 + i] = 10 - x0[i];
    }
    named_param p[] = {{"conv.weight", I, 4}};
    enum { SAME, EXP_MINUS_X, TWICE };
    struct {
        const char *ops;
        int rank;
        int64_t dim[FG_MAX_RANK];
        int how; /* the output from x */
    } cases[] = {
        {"  flatten {},\n", 2, {1, 12}, SAME},
        {"  flatten { start_dim = 2 },\n  unsqueeze { dim = -1 },\n", 4, {1, 2, 6, 1}, SAME},
        {"  squeeze { dim = 2 },\n  mul { scalar = 2 },\n", 4, {1, 2, 2, 3}, TWICE}, /* extent 2: stays */
        {"  unsqueeze { dim = 2 },\n  squeeze { dims = { 2, -1 } },\n", 4, {1, 2, 2, 3}, SAME},
        {"  view { shape = { \"N\", 3, -1 }, as = \"v\" },\n  exp {},\n  sub { value = \"v\" },\n", 3, {1, 3, 4},
         EXP_MINUS_X},
        {"  reshape { shape = { -1, 1, 12, 1 } },\n  flatten { start_dim = 1, end_dim = 2 },\n", 3, {1, 12, 1}, SAME},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *src = identity_layer(2, "2, 3", cases[i].ops);
        fg_layer_ir *ir;
        int64_t n;
        double *out = run(src, 2, x, 24, p, 1, &n, &ir);
        fgt_assert_shape(&ir->ops[ir->n_ops - 1].out, cases[i].dim, cases[i].rank, cases[i].ops);
        assert_int_equal(n, 24);
        double want[24];
        for (int j = 0; j < 24; j++)
            want[j] = cases[i].how == SAME ? x[j] : cases[i].how == TWICE ? 2.0 * x[j] : exp(x[j]) - x[j];
        expect_values(cases[i].ops, out, want, n, 1e-15);
        free(out);
        free(ir);
        free(src);
    }

    /* after a reduction: sum over W keeps [2, 2, 1], the squeeze drops the 1 */
    char *src = identity_layer(2, "2, 3", "  sum { dim = 3, keepdim = true },\n  squeeze { dim = -1 },\n");
    fg_layer_ir *ir;
    int64_t n;
    double *out = run(src, 2, x, 24, p, 1, &n, &ir);
    FGT_ASSERT_SHAPE(&ir->ops[2].out, 1, 2, 2);
    EXPECT("sum, squeeze", out, n, 8, 3, 15, 5, 22, 27, 15, 25);
    free(out);
    free(ir);
    free(src);
    free(I);
}

/* ---- pooling ------------------------------------------------------------------------------------ */

static void pooling(void **state)
{
    (void)state;
    float *I = identity_weight(1);
    named_param p[] = {{"conv.weight", I, 1}};
    int64_t n;
    struct {
        const char *op;
        int count;
        double want[4];
    } cases[] = {
        /* 2x2 windows of the ramp */
        {"  max_pool { kernel = 2 },\n", 4, {6, 8, 14, 16}},
        {"  avg_pool { kernel = 2 },\n", 4, {3.5, 5.5, 11.5, 13.5}},
        /* kernel 3, stride 2, padding 1: windows rows/cols {-1..1} and {1..3}
         * sums of the valid elements: 1+2+5+6 = 14 (4 valid), 2+3+4+6+7+8 = 30 (6),
         * 5+6+9+10+13+14 = 57 (6), 6+7+8+10+11+12+14+15+16 = 99 (9) */
        {"  max_pool { kernel = 3, stride = 2, padding = 1 },\n", 4, {6, 8, 14, 16}},
        {"  avg_pool { kernel = 3, stride = 2, padding = 1 },\n", 4, {14.0 / 9, 30.0 / 9, 57.0 / 9, 99.0 / 9}},
        {"  avg_pool { kernel = 3, stride = 2, padding = 1, count_include_pad = false },\n", 4, {3.5, 5, 9.5, 11}},
        /* kernel (1, 4): one window per row */
        {"  max_pool2d { kernel = { 1, 4 } },\n", 4, {4, 8, 12, 16}},
        {"  avg_pool2d { kernel = { 4, 1 } },\n", 4, {7, 8, 9, 10}},
        {"  global_avg_pool {},\n", 1, {8.5}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *src = identity_layer(1, "4, 4", cases[i].op);
        double *out = run(src, 1, ramp16, 16, p, 1, &n, NULL);
        assert_int_equal(n, cases[i].count);
        expect_values(cases[i].op, out, cases[i].want, n, 1e-12);
        free(out);
        free(src);
    }
    /* max pooling never picks up the zero padding: all inputs negative */
    float neg[16];
    for (int i = 0; i < 16; i++)
        neg[i] = -ramp16[i];
    char *src = identity_layer(1, "4, 4", "  max_pool { kernel = 3, stride = 2, padding = 1 },\n");
    double *out = run(src, 1, neg, 16, p, 1, &n, NULL);
    EXPECT("max_pool of negatives with padding", out, n, -1, -2, -5, -6);
    free(out);
    free(src);
    free(I);

    /* 3D: kernel 2 over a 2x2x2 cube of 1..8 */
    const char *src3 = "return layer \"p3\" {\n"
          "  input = { \"N\", 1, 2, 2, 2 },\n"
          "  conv3d { out_channels = 1, kernel = 1, bias = false },\n"
          "  avg_pool3d { kernel = 2 },\n"
          "}\n";
    static const float cube[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const float one[1] = {1};
    named_param q[] = {{"conv.weight", one, 1}};
    out = run(src3, 1, cube, 8, q, 1, &n, NULL);
    EXPECT("avg_pool3d", out, n, 4.5);
    free(out);
}

/* ---- elementwise functions ------------------------------------------------------------------- */

/* One row per value checked: the op as a spec writes it, an input and the exact result
 * (computed independently: closed forms and mpmath). Every unary kind of the op registry
 * must have a row; a new activation adds its own. */
static const struct {
    const char *op;
    double x, want;
} unary_rows[] = {
    {"relu {}", -1, 0},
    {"relu {}", 2.5, 2.5},
    {"leaky_relu { negative_slope = 0.1 }", -2, -0.2},
    {"leaky_relu { negative_slope = 0.1 }", 3, 3},
    {"leaky_relu {}", -2, -0.02}, /* PyTorch's default slope 0.01 */
    {"gelu {}", 1, 0.8413447460685429},
    {"gelu {}", -1, -0.15865525393145707},
    {"gelu {}", 0, 0},
    {"gelu { approximate = \"tanh\" }", 1, 0.8411919906082768},
    {"gelu { approximate = \"tanh\" }", -1, -0.15880800939172324},
    {"sigmoid {}", 0, 0.5},
    {"sigmoid {}", 1, 0.7310585786300049},
    {"tanh {}", 0.5, 0.46211715726000974},
    {"softplus {}", 1, 1.3132616875182228},
    {"softplus {}", -1, 0.31326168751822286},
    {"softplus {}", 25, 25},   /* threshold branch: x itself, exactly */
    {"softplus { beta = 2, threshold = 20 }", 1, 1.0634640055214863}, /* log1p(e^2) / 2 */
    {"softplus { beta = 2, threshold = 20 }", 15, 15},   /* beta * x = 30 > 20: linear */
    {"mish {}", 1, 0.8650983882673103},
    {"mish {}", -1, -0.30340146137410895},
    {"silu {}", 1, 0.7310585786300049},
    {"silu {}", -1, -0.2689414213699951},
    {"hardswish {}", -3, 0},
    {"hardswish {}", -4, 0},
    {"hardswish {}", 1, 0.6666666666666666},
    {"hardswish {}", 3, 3},
    {"hardswish {}", 0.5, 0.2916666666666667},
    {"hardsigmoid {}", -3, 0},
    {"hardsigmoid {}", 1, 0.6666666666666666},
    {"hardsigmoid {}", 3, 1},
    {"hardsigmoid {}", 0, 0.5},
    {"hardtanh {}", 2, 1},
    {"hardtanh {}", -2, -1},
    {"hardtanh {}", 0.25, 0.25},
    {"clamp { min = -0.5 }", -3, -0.5},
    {"clamp { min = -0.5 }", 100, 100}, /* no upper bound */
    {"clamp { max = 2 }", 5, 2},
    {"clamp { max = 2 }", -100, -100}, /* no lower bound */
    {"clamp { min = 0, max = 1 }", -1, 0},
    {"clamp { min = 0, max = 1 }", 0.3, 0.3},
    {"clamp { min = 0, max = 1 }", 7, 1},
    {"exp {}", 1, 2.718281828459045},
    {"exp {}", 0, 1},
    {"log {}", 2.718281828459045, 1},
    {"log {}", 1, 0},
    {"abs {}", -2, 2},
    {"neg {}", 3, -3},
    {"softsign {}", 1, 0.5},
    {"softsign {}", -3, -0.75},
    {"softsign {}", 0, 0},
    {"dropout {}", -1.25, -1.25},
    {"dropout2d { p = 0.1 }", 7, 7},
};

/* Loads `op` after a 1x1 conv and returns the layer (its ops[1] is the op). */
static fg_layer_ir *one_op_layer(const char *op)
{
    char src[512];
    snprintf(src, sizeof src,
             "return layer \"u\" {\n  input = { \"N\", 1, 1, 1 },\n  conv2d { out_channels = 1, kernel = 1 },\n  %s,\n}\n", op);
    return fgt_load_string(src);
}

static double unary_at(const char *op, double x)
{
    fg_layer_ir *ir = one_op_layer(op);
    double y = fg_ref_unary(&ir->ops[1], x);
    free(ir);
    return y;
}

static void unary_functions(void **state)
{
    (void)state;
    bool covered[FG_OP_KIND_COUNT] = {false};
    for (size_t i = 0; i < sizeof unary_rows / sizeof unary_rows[0]; i++) {
        fg_layer_ir *ir = one_op_layer(unary_rows[i].op);
        const fg_op *op = &ir->ops[1];
        covered[op->kind] = true;
        double got = fg_ref_unary(op, unary_rows[i].x), want = unary_rows[i].want;
        if (!(fabs(got - want) <= 1e-15 * (fabs(want) > 1 ? fabs(want) : 1)))
            fail_msg("%s at %g = %.17g, expected %.17g", unary_rows[i].op, unary_rows[i].x, got, want);
        free(ir);
    }
    for (int k = 0; k < FG_OP_KIND_COUNT; k++)
        if (fg_op_kind_class((fg_op_kind)k) == FG_CLASS_UNARY && !covered[k])
            fail_msg("unary op %s has no row in unary_rows", fg_op_kind_name((fg_op_kind)k));
    assert_true(unary_at("softplus {}", 25) == 25.0); /* exactly the input above the threshold */
    assert_true(isnan(unary_at("log {}", -1)));
    assert_true(isinf(unary_at("log {}", 0)));
    assert_true(unary_at("relu {}", -0.0) == 0.0);
    /* softplus stays finite where exp overflows */
    assert_true(unary_at("softplus {}", 800) == 800);
}

/* Every kind of the op registry has a definition in the reference. */
static void reference_defines_every_op(void **state)
{
    (void)state;
    for (int k = 0; k < FG_OP_KIND_COUNT; k++)
        if (!fg_ref_defines((fg_op_kind)k))
            fail_msg("the CPU reference does not define %s", fg_op_kind_name((fg_op_kind)k));
}

static void binary_with_broadcast_and_values(void **state)
{
    (void)state;
    float *I = identity_weight(2);
    /* x[c][h][w] with C = H = W = 2: 1..8 */
    static const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const float per_c[2] = {10, 20}, per_w[2] = {2, -1}, per_h[2] = {100, 200};
    char *src = identity_layer(2, "2, 2",
                               "  add { param = \"pc\" },\n"                           /* x + [10|20] per channel */
                               "  mul { param = \"pw\", shape = { 2 } },\n"            /* * [2, -1] along W */
                               "  sub { param = \"ph\", shape = { 1, 2, 1 } },\n");    /* - [100, 200] along H */
    named_param p[] = {{"conv.weight", I, 4}, {"pc", per_c, 2}, {"pw", per_w, 2}, {"ph", per_h, 2}};
    int64_t n;
    double *out = run(src, 1, x, 8, p, 4, &n, NULL);
    /* c0: (1+10)*2-100, (2+10)*-1-100, (3+10)*2-200, (4+10)*-1-200
     * c1: (5+20)*2-100, (6+20)*-1-100, (7+20)*2-200, (8+20)*-1-200 */
    EXPECT("param broadcasting", out, n, -78, -112, -174, -214, -50, -126, -146, -228);
    free(out);
    free(src);

    /* named values: a residual and min/max/div with them */
    src = identity_layer(2, "2, 2",
                         "  mul { scalar = 3, as = \"t\" },\n" /* t = 3x */
                         "  sub { scalar = 10 },\n"            /* 3x - 10 */
                         "  max { value = \"t\" },\n"          /* max(3x - 10, 3x) = 3x */
                         "  div { scalar = 3, as = \"u\" },\n" /* x */
                         "  min { scalar = 4.5 },\n"           /* min(x, 4.5) */
                         "  add { value = \"u\" },\n"          /* + x */
                         "  div { value = \"t\" },\n");        /* / 3x */
    named_param q[] = {{"conv.weight", I, 4}};
    out = run(src, 1, x, 8, q, 1, &n, NULL);
    double want[8];
    for (int i = 0; i < 8; i++)
        want[i] = (fmin(x[i], 4.5) + x[i]) / (3.0 * x[i]);
    expect_values("named values", out, want, n, 1e-12);
    free(out);
    free(src);
    free(I);

    assert_true(fg_ref_binary(FG_OP_SUB, 7, 2) == 5);
    assert_true(fg_ref_binary(FG_OP_DIV, 1, 4) == 0.25);
    assert_true(fg_ref_binary(FG_OP_MINIMUM, -1, 2) == -1);
    assert_true(fg_ref_binary(FG_OP_MAXIMUM, -1, 2) == 2);
    /* torch.minimum / maximum propagate NaN from either side */
    assert_true(isnan(fg_ref_binary(FG_OP_MINIMUM, NAN, 1)));
    assert_true(isnan(fg_ref_binary(FG_OP_MINIMUM, 1, NAN)));
    assert_true(isnan(fg_ref_binary(FG_OP_MAXIMUM, 1, NAN)));
}

/* A reference layer end to end on a reduced shape, with values that can be checked by a
 * second, independent evaluation in this test: KB92's chain on a 2-channel 1x1 conv. */
static void kb92_chain_small(void **state)
{
    (void)state;
    const char *src = "return layer \"kb92_small\" {\n"
                      "  input = { \"N\", 1, 2, 2 },\n"
                      "  conv2d { out_channels = 2, kernel = 1, as = \"c\" },\n"
                      "  group_norm { groups = 1 },\n"
                      "  tanh {},\n"
                      "  hardswish {},\n"
                      "  add { value = \"c\" },\n"
                      "  logsumexp { dim = 1, keepdim = true },\n"
                      "}\n";
    static const float x[4] = {0.5f, -1, 2, 0.25f};
    static const float w[2] = {1, -2}, b[2] = {0, 1};
    static const float gw[2] = {1, 1}, gb[2] = {0, 0};
    named_param p[] = {{"conv.weight", w, 2}, {"conv.bias", b, 2}, {"group_norm.weight", gw, 2},
                       {"group_norm.bias", gb, 2}};
    int64_t n;
    double *out = run(src, 1, x, 4, p, 4, &n, NULL);
    assert_int_equal(n, 4);
    /* c[0] = x, c[1] = 1 - 2x; one group over all 8 values */
    double c[8], mean = 0, var = 0;
    for (int i = 0; i < 4; i++) {
        c[i] = x[i];
        c[4 + i] = 1 - 2.0 * x[i];
    }
    for (int i = 0; i < 8; i++)
        mean += c[i] / 8;
    for (int i = 0; i < 8; i++)
        var += (c[i] - mean) * (c[i] - mean) / 8;
    for (int i = 0; i < 4; i++) {
        double y[2];
        for (int ch = 0; ch < 2; ch++) {
            double t = tanh((c[ch * 4 + i] - mean) / sqrt(var + 1e-5));
            y[ch] = t * fmin(fmax(t + 3, 0), 6) / 6 + c[ch * 4 + i];
        }
        double m = fmax(y[0], y[1]);
        double want = m + log(exp(y[0] - m) + exp(y[1] - m));
        if (fabs(out[i] - want) > 1e-12)
            fail_msg("kb92 chain at %d: %.17g, expected %.17g", i, out[i], want);
    }
    free(out);
}

/* layout = "channels_last": the reference on N(D)HWC memory gives, element for element, the
 * NC(D)HW layer's results on the same values transposed (bit-identical: the same float64
 * computation in between). 2D and 3D, groups, a pool, a keepdim channel reduction, bf16. */
static void channels_last_is_a_transpose(void **state)
{
    (void)state;
    static const char *const sources[] = {
        "return layer \"a\" {\n  input = { \"N\", 6, 9, 11 },\n  conv2d { name = \"conv\", out_channels = 8, kernel = 3, "
        "groups = 2, padding = 1 },\n  group_norm { name = \"gn\", groups = 4 },\n  max_pool { kernel = 2 },\n  relu {},\n}\n",
        "return layer \"b\" {\n  input = { \"N\", 3, 5, 7, 6 },\n  conv3d { name = \"conv\", out_channels = 5, kernel = 3 },\n"
        "  instance_norm { eps = 1e-5 },\n  logsumexp { dim = 1, keepdim = true },\n}\n",
        "return layer \"c\" {\n  input = { \"N\", 4, 7, 5 },\n  dtype = \"bf16\",\n  conv2d { name = \"conv\", out_channels = 3, "
        "kernel = 1 },\n  sigmoid {},\n  mean { dim = { 2, 3 }, keepdim = true },\n}\n",
        "return layer \"d\" {\n  input = { \"N\", 5, 6, 7 },\n  layer_norm { name = \"pre\", dim = 1 },\n"
        "  conv2d { name = \"conv\", out_channels = 6, kernel = 3, padding = 1 },\n  layer_norm { name = \"ln\", dim = 1 },\n"
        "  gelu {},\n}\n",
    };
    for (size_t s = 0; s < sizeof sources / sizeof *sources; s++) {
        fg_layer_ir *ir = fgt_load_string(sources[s]);
        const int64_t batch = 2;
        const fg_shape *os = &ir->ops[ir->n_ops - 1].out;
        int64_t ci = ir->input.dim[1], pi = fg_shape_sample_count(&ir->input) / ci;
        int64_t co = os->dim[1], po = fg_shape_sample_count(os) / co;
        float *x = malloc(sizeof(float) * (size_t)(batch * ci * pi)), *xl = malloc(sizeof(float) * (size_t)(batch * ci * pi));
        double *y = malloc(sizeof(double) * (size_t)(batch * co * po)), *yl = malloc(sizeof(double) * (size_t)(batch * co * po));
        float *pdata[FG_MAX_PARAMS];
        const float *params[FG_MAX_PARAMS];
        uint64_t seed = 12345 + s;
        for (int64_t i = 0; i < batch * ci * pi; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(seed >> 40) / (double)(1 << 24) - 0.5);
        }
        for (int p = 0; p < ir->n_params; p++) {
            pdata[p] = malloc(sizeof(float) * (size_t)ir->params[p].count);
            for (int64_t i = 0; i < ir->params[p].count; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                pdata[p][i] = (float)((double)(seed >> 40) / (double)(1 << 24));
            }
            params[p] = pdata[p];
        }
        for (int64_t n = 0; n < batch; n++)
            for (int64_t p = 0; p < pi; p++)
                for (int64_t c = 0; c < ci; c++)
                    xl[(n * pi + p) * ci + c] = x[(n * ci + c) * pi + p];
        fg_error err;
        assert_int_equal(fg_reference_run(ir, batch, x, params, y, &err), 0);
        ir->layout = FG_LAYOUT_CHANNELS_LAST;
        assert_int_equal(fg_reference_run(ir, batch, xl, params, yl, &err), 0);
        for (int64_t n = 0; n < batch; n++)
            for (int64_t p = 0; p < po; p++)
                for (int64_t c = 0; c < co; c++)
                    if (memcmp(&yl[(n * po + p) * co + c], &y[(n * co + c) * po + p], sizeof(double)) != 0)
                        fail_msg("%s: sample %lld channel %lld position %lld: %.17g (channels last) != %.17g", ir->name,
                                 (long long)n, (long long)c, (long long)p, yl[(n * po + p) * co + c],
                                 y[(n * co + c) * po + p]);
        for (int p = 0; p < ir->n_params; p++)
            free(pdata[p]);
        free(x), free(xl), free(y), free(yl);
        free(ir);
    }
}

/* A prologue (ops before the conv) transforms the conv's input; the conv pads the
 * transformed tensor, so a padded tap adds 0, not f(0). Input [1, 1, 1, 2] = {1, 3}:
 * instance_norm -> {-1, 1} / sqrt(1 + eps); add 5 -> {5 - r, 5 + r}; a 1x3 kernel of ones with
 * padding 1 along W: out[0] = 0 + (5 - r) + (5 + r) = 10 = out[1]. (Padding with f(0) =
 * (0 - 2) * r + 5 would give 15 - 2r.) */
static void prologue_pads_the_transformed_input(void **state)
{
    (void)state;
    const char *src = "return layer \"p\" {\n  input = { \"N\", 1, 1, 2 },\n  instance_norm {},\n"
                      "  add { scalar = 5 },\n  conv2d { name = \"conv\", out_channels = 1, kernel = { 1, 3 }, "
                      "padding = { 0, 1 }, bias = false },\n}\n";
    static const float x[2] = {1, 3}, w[3] = {1, 1, 1};
    named_param p[] = {{"conv.weight", w, 3}};
    int64_t n;
    double *out = run(src, 1, x, 2, p, 1, &n, NULL);
    assert_int_equal(n, 2);
    static const double want1[2] = {10.0, 10.0};
    expect_values("instance_norm, add, conv", out, want1, 2, 1e-12);
    free(out);
    /* batch_norm on running statistics (mean -2, var 4, weight 1, bias 1), relu, mul 2:
     * f(x) = 2 relu((x + 2) r + 1), r = 1 / sqrt(4 + eps): f(1) + f(3) = 16 r + 4 at both
     * outputs; padding with f(0) = 4 r + 2 would add it */
    src = "return layer \"p\" {\n  input = { \"N\", 1, 1, 2 },\n  batch_norm { name = \"bn\", stats = \"running\" },\n"
          "  relu {},\n  mul { scalar = 2 },\n  conv2d { name = \"conv\", out_channels = 1, kernel = { 1, 3 }, "
          "padding = { 0, 1 }, bias = false },\n}\n";
    static const float x2[2] = {1, 3}, rm[1] = {-2}, rv[1] = {4}, bw[1] = {1}, bb[1] = {1};
    named_param p2[] = {{"conv.weight", w, 3}, {"bn.running_mean", rm, 1}, {"bn.running_var", rv, 1},
                        {"bn.weight", bw, 1}, {"bn.bias", bb, 1}};
    out = run(src, 1, x2, 2, p2, 5, &n, NULL);
    double r = 1 / sqrt(4 + 1e-5), want2[2] = {16 * r + 4, 16 * r + 4};
    assert_int_equal(n, 2);
    expect_values("batch_norm(running), relu, mul, conv", out, want2, 2, 1e-12);
    free(out);
}

/* GroupNorm -> SiLU -> conv3x3 (Stable Diffusion's ResnetBlock2D, small) against a
 * computation written here, loop by loop: statistics of the raw input per (sample, group),
 * the normalized and activated tensor materialized, then a zero-padded direct conv. */
static void prologue_group_norm_silu_conv(void **state)
{
    (void)state;
    enum { N = 2, C = 4, H = 3, W = 4, CO = 3, G = 2 };
    const char *src = "return layer \"sd\" {\n  input = { \"N\", 4, 3, 4 },\n"
                      "  group_norm { name = \"norm1\", groups = 2, eps = 1e-6 },\n  silu {},\n"
                      "  conv2d { name = \"conv1\", out_channels = 3, kernel = 3, padding = 1 },\n}\n";
    float x[N * C * H * W], w[CO * C * 9], b[CO], gw[C], gb[C];
    for (int i = 0; i < N * C * H * W; i++)
        x[i] = (float)((i * 37 % 23) - 9) * 0.25f + (float)(i / (H * W * 2)); /* group means differ */
    for (int i = 0; i < CO * C * 9; i++)
        w[i] = (float)((i * 13 % 17) - 8) * 0.125f;
    for (int i = 0; i < CO; i++)
        b[i] = 0.5f * (float)i - 0.25f;
    for (int i = 0; i < C; i++)
        gw[i] = 1.0f + 0.25f * (float)i, gb[i] = 0.5f - 0.375f * (float)i;
    named_param p[] = {{"norm1.weight", gw, C}, {"norm1.bias", gb, C}, {"conv1.weight", w, CO * C * 9},
                       {"conv1.bias", b, CO}};
    int64_t n;
    double *out = run(src, N, x, N * C * H * W, p, 4, &n, NULL);
    assert_int_equal(n, N * CO * H * W);
    double y[N][C][H][W];
    for (int s = 0; s < N; s++)
        for (int g = 0; g < G; g++) {
            double sum = 0, sq = 0;
            int cnt = (C / G) * H * W;
            for (int c = g * (C / G); c < (g + 1) * (C / G); c++)
                for (int i = 0; i < H * W; i++)
                    sum += x[((s * C + c) * H * W) + i];
            double mean = sum / cnt;
            for (int c = g * (C / G); c < (g + 1) * (C / G); c++)
                for (int i = 0; i < H * W; i++) {
                    double d = x[((s * C + c) * H * W) + i] - mean;
                    sq += d * d;
                }
            double rstd = 1 / sqrt(sq / cnt + 1e-6);
            for (int c = g * (C / G); c < (g + 1) * (C / G); c++)
                for (int i = 0; i < H * W; i++) {
                    double v = (x[((s * C + c) * H * W) + i] - mean) * rstd * gw[c] + gb[c];
                    y[s][c][i / W][i % W] = v / (1 + exp(-v));
                }
        }
    double want[N * CO * H * W];
    for (int s = 0; s < N; s++)
        for (int o = 0; o < CO; o++)
            for (int h = 0; h < H; h++)
                for (int x0 = 0; x0 < W; x0++) {
                    double acc = b[o];
                    for (int c = 0; c < C; c++)
                        for (int a = 0; a < 3; a++)
                            for (int e = 0; e < 3; e++) {
                                int ih = h + a - 1, iw = x0 + e - 1;
                                if (ih >= 0 && ih < H && iw >= 0 && iw < W) /* padding: 0 */
                                    acc += y[s][c][ih][iw] * w[((o * C + c) * 3 + a) * 3 + e];
                            }
                    want[((s * CO + o) * H + h) * W + x0] = acc;
                }
    expect_values("group_norm, silu, conv3x3", out, want, n, 1e-12);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(conv2d_known_weights),
        cmocka_unit_test(conv2d_stride_and_padding),
        cmocka_unit_test(conv2d_dilation),
        cmocka_unit_test(conv2d_groups),
        cmocka_unit_test(conv3d_known_weights),
        cmocka_unit_test(group_norm),
        cmocka_unit_test(instance_norm),
        cmocka_unit_test(layer_norm),
        cmocka_unit_test(channel_layer_norm),
        cmocka_unit_test(channel_layer_norm_prologue),
        cmocka_unit_test(batch_norm),
        cmocka_unit_test(batch_norm_fold_arithmetic),
        cmocka_unit_test(batch_norm_fold_is_the_unfolded_layer),
        cmocka_unit_test(logsumexp_is_stable),
        cmocka_unit_test(softmax_sums_to_one),
        cmocka_unit_test(max_min_sum_mean),
        cmocka_unit_test(pooling),
        cmocka_unit_test(shape_ops),
        cmocka_unit_test(unary_functions),
        cmocka_unit_test(reference_defines_every_op),
        cmocka_unit_test(binary_with_broadcast_and_values),
        cmocka_unit_test(kb92_chain_small),
        cmocka_unit_test(channels_last_is_a_transpose),
        cmocka_unit_test(prologue_pads_the_transformed_input),
        cmocka_unit_test(prologue_group_norm_silu_conv),
    };
    char *dir = fgt_tmpdir("reference-env");
    fgt_isolate_environment(dir);
    int failed = cmocka_run_group_tests_name("reference", tests, NULL, NULL);
    fgt_rmtree(dir);
    free(dir);
    return failed;
}
