/* SPDX-License-Identifier: Apache-2.0 */
#include "cpu_reference.h"

#include "../common/half.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The semantics here are written independently of the op registry (gen/op_registry.c),
 * which only says which class an op belongs to: this file is the oracle the generated
 * kernels are tested against. */

/* A dense value of the chain: batch * sample_count doubles, NC(D)HW. */
typedef struct value {
    fg_shape shape;
    int64_t sample;
    double *data;
} value;

/* Row-major coordinates <-> linear index within one sample (coords[0] is the batch). */
static void unravel(const fg_shape *s, int64_t i, int64_t *coords)
{
    for (int d = s->rank - 1; d >= 1; d--) {
        coords[d] = i % s->dim[d];
        i /= s->dim[d];
    }
}

static int64_t ravel(const fg_shape *s, const int64_t *coords)
{
    int64_t i = 0;
    for (int d = 1; d < s->rank; d++)
        i = i * s->dim[d] + coords[d];
    return i;
}

/* ---- each op's semantics, one table per class ------------------------------------------
 * A table has one entry per op kind of its class (NULL elsewhere); a count check beside each
 * fails the build when a kind is added, so that every table is visited (docs/design.md,
 * "Adding an op"), and a kind of the class without an entry is refused at run time, never
 * computed as something else (tests/test_reference.c checks every kind has one). */

typedef double (*ref_unary_fn)(const fg_op *op, double x);

static double ref_relu(const fg_op *op, double x) { (void)op; return x > 0 ? x : 0; }
static double ref_leaky_relu(const fg_op *op, double x) { return x > 0 ? x : op->alpha * x; }
static double ref_gelu(const fg_op *op, double x)
{
    if (op->gelu_tanh)
        return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}
static double ref_sigmoid(const fg_op *op, double x) { (void)op; return 1 / (1 + exp(-x)); }
static double ref_tanh(const fg_op *op, double x) { (void)op; return tanh(x); }
static double ref_softplus(const fg_op *op, double x)
{
    return op->beta * x > op->threshold ? x : log1p(exp(op->beta * x)) / op->beta;
}
static double ref_mish(const fg_op *op, double x)
{
    (void)op;
    double sp = x > 20 ? x : log1p(exp(x));
    return x * tanh(sp);
}
static double ref_silu(const fg_op *op, double x) { (void)op; return x / (1 + exp(-x)); }
static double ref_hardswish(const fg_op *op, double x) { (void)op; return x * fmin(fmax(x + 3, 0), 6) / 6; }
static double ref_hardsigmoid(const fg_op *op, double x) { (void)op; return fmin(fmax(x + 3, 0), 6) / 6; }
static double ref_clamp(const fg_op *op, double x)
{
    if (op->has_lo && x < op->lo)
        x = op->lo;
    if (op->has_hi && x > op->hi)
        x = op->hi;
    return x;
}
static double ref_exp(const fg_op *op, double x) { (void)op; return exp(x); }
static double ref_log(const fg_op *op, double x) { (void)op; return log(x); }
static double ref_abs(const fg_op *op, double x) { (void)op; return fabs(x); }
static double ref_neg(const fg_op *op, double x) { (void)op; return -x; }
static double ref_softsign(const fg_op *op, double x) { (void)op; return x / (1 + fabs(x)); }
static double ref_identity(const fg_op *op, double x) { (void)op; return x; }

static const ref_unary_fn ref_unary[FG_OP_KIND_COUNT] = {
    [FG_OP_RELU] = ref_relu,
    [FG_OP_LEAKY_RELU] = ref_leaky_relu,
    [FG_OP_GELU] = ref_gelu,
    [FG_OP_SIGMOID] = ref_sigmoid,
    [FG_OP_TANH] = ref_tanh,
    [FG_OP_SOFTPLUS] = ref_softplus,
    [FG_OP_MISH] = ref_mish,
    [FG_OP_SILU] = ref_silu,
    [FG_OP_HARDSWISH] = ref_hardswish,
    [FG_OP_HARDSIGMOID] = ref_hardsigmoid,
    [FG_OP_HARDTANH] = ref_clamp, /* with both bounds */
    [FG_OP_CLAMP] = ref_clamp,
    [FG_OP_EXP] = ref_exp,
    [FG_OP_LOG] = ref_log,
    [FG_OP_ABS] = ref_abs,
    [FG_OP_NEG] = ref_neg,
    [FG_OP_SOFTSIGN] = ref_softsign,
    [FG_OP_DROPOUT] = ref_identity, /* inference */
};

typedef double (*ref_binary_fn)(double a, double b);

static double ref_add(double a, double b) { return a + b; }
static double ref_sub(double a, double b) { return a - b; }
static double ref_mul(double a, double b) { return a * b; }
static double ref_div(double a, double b) { return a / b; }
/* torch.minimum and torch.maximum propagate NaN */
static double ref_minimum(double a, double b) { return isnan(a) || isnan(b) ? NAN : (a < b ? a : b); }
static double ref_maximum(double a, double b) { return isnan(a) || isnan(b) ? NAN : (a > b ? a : b); }

static const ref_binary_fn ref_binary[FG_OP_KIND_COUNT] = {
    [FG_OP_ADD] = ref_add,
    [FG_OP_SUB] = ref_sub,
    [FG_OP_MUL] = ref_mul,
    [FG_OP_DIV] = ref_div,
    [FG_OP_MINIMUM] = ref_minimum,
    [FG_OP_MAXIMUM] = ref_maximum,
};

/* A reduction's result from the extreme of its elements (the max; the min for a min), their
 * sum (of exp(x - max) for logsumexp) and their count. */
typedef double (*ref_reduce_fn)(double extreme, double sum, int64_t count);

static double ref_extreme(double extreme, double sum, int64_t count) { (void)sum, (void)count; return extreme; }
static double ref_sum(double extreme, double sum, int64_t count) { (void)extreme, (void)count; return sum; }
static double ref_mean(double extreme, double sum, int64_t count) { (void)extreme; return sum / (double)count; }
static double ref_logsumexp(double extreme, double sum, int64_t count)
{
    (void)count;
    return isfinite(extreme) ? extreme + log(sum) : extreme;
}

/* what the extreme is: a max, or a min */
static const bool ref_reduce_min[FG_OP_KIND_COUNT] = {[FG_OP_REDUCE_MIN] = true};

static const ref_reduce_fn ref_reduce[FG_OP_KIND_COUNT] = {
    [FG_OP_REDUCE_MAX] = ref_extreme,
    [FG_OP_REDUCE_MIN] = ref_extreme,
    [FG_OP_REDUCE_SUM] = ref_sum,
    [FG_OP_REDUCE_MEAN] = ref_mean,
    [FG_OP_LOGSUMEXP] = ref_logsumexp,
    [FG_OP_GLOBAL_AVG_POOL] = ref_mean,
};

/* A pool's result from the max, the sum and the count of its window's elements (`count`:
 * all of them, or those inside the input, as count_include_pad says). */
typedef double (*ref_pool_fn)(double best, double sum, int64_t count);

static const ref_pool_fn ref_pool[FG_OP_KIND_COUNT] = {
    [FG_OP_MAX_POOL] = ref_extreme,
    [FG_OP_AVG_POOL] = ref_mean,
};
/* ggml's guard: a new op kind fails the build here until the tables above have been visited */
static_assert(FG_OP_KIND_COUNT == 44, "a new op kind: define it in ref_unary, ref_binary, ref_reduce or ref_pool "
                                      "(a shape op: nothing, its class copies the elements)");

/* Whether the reference defines `kind` (its class's table has it). */
bool fg_ref_defines(fg_op_kind kind)
{
    switch (fg_op_kind_class(kind)) {
    case FG_CLASS_CONV:
    case FG_CLASS_NORM:
    case FG_CLASS_SOFTMAX:
        return true; /* one routine each below */
    case FG_CLASS_UNARY:
        return ref_unary[kind] != NULL;
    case FG_CLASS_BINARY:
        return ref_binary[kind] != NULL;
    case FG_CLASS_REDUCE:
        return ref_reduce[kind] != NULL;
    case FG_CLASS_POOL:
        return ref_pool[kind] != NULL;
    case FG_CLASS_SHAPE:
        return true; /* the same elements in their new shape (shape inference's) */
    }
    return false;
}

double fg_ref_unary(const fg_op *op, double x)
{
    return ref_unary[op->kind] ? ref_unary[op->kind](op, x) : NAN;
}

double fg_ref_binary(fg_op_kind kind, double a, double b)
{
    return ref_binary[kind] ? ref_binary[kind](a, b) : NAN;
}

typedef struct progress_hook {
    fg_reference_progress fn;
    void *ctx;
} progress_hook;

static void conv(const fg_op *op, const fg_shape *in_shape, const double *x, const float *w, const float *bias,
                 value *out, int64_t batch, const progress_hook *progress)
{
    /* 2D runs as 3D with depth 1 */
    int64_t in_d[3] = {1, 1, 1}, out_d[3] = {1, 1, 1};
    int k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pd[3] = {0, 0, 0}, dl[3] = {1, 1, 1};
    int off = 3 - op->spatial;
    for (int i = 0; i < op->spatial; i++) {
        in_d[off + i] = in_shape->dim[2 + i];
        out_d[off + i] = out->shape.dim[2 + i];
        k[off + i] = op->kernel[i];
        st[off + i] = op->stride[i];
        pd[off + i] = op->padding[i];
        dl[off + i] = op->dilation[i];
    }
    int64_t cin = in_shape->dim[1], cout = op->out_channels;
    int64_t cin_g = cin / op->groups, cout_g = cout / op->groups;
    int64_t in_plane = in_d[0] * in_d[1] * in_d[2], out_plane = out_d[0] * out_d[1] * out_d[2];
    int64_t taps = (int64_t)k[0] * k[1] * k[2];
    for (int64_t n = 0; n < batch; n++)
        for (int64_t co = 0; co < cout; co++) {
            int64_t g = co / cout_g;
            double *o = out->data + (n * cout + co) * out_plane;
            for (int64_t od = 0; od < out_d[0]; od++)
                for (int64_t oh = 0; oh < out_d[1]; oh++)
                    for (int64_t ow = 0; ow < out_d[2]; ow++) {
                        double acc = bias ? bias[co] : 0.0;
                        for (int64_t cl = 0; cl < cin_g; cl++) {
                            const double *xc = x + (n * cin + g * cin_g + cl) * in_plane;
                            const float *wc = w + (co * cin_g + cl) * taps;
                            for (int a = 0; a < k[0]; a++) {
                                int64_t id = od * st[0] - pd[0] + (int64_t)a * dl[0];
                                if (id < 0 || id >= in_d[0])
                                    continue;
                                for (int b = 0; b < k[1]; b++) {
                                    int64_t ih = oh * st[1] - pd[1] + (int64_t)b * dl[1];
                                    if (ih < 0 || ih >= in_d[1])
                                        continue;
                                    for (int c = 0; c < k[2]; c++) {
                                        int64_t iw = ow * st[2] - pd[2] + (int64_t)c * dl[2];
                                        if (iw < 0 || iw >= in_d[2])
                                            continue;
                                        acc += xc[(id * in_d[1] + ih) * in_d[2] + iw] *
                                               (double)wc[(a * k[1] + b) * k[2] + c];
                                    }
                                }
                            }
                        }
                        o[(od * out_d[1] + oh) * out_d[2] + ow] = acc;
                    }
            if (progress->fn)
                progress->fn(progress->ctx, (double)(n * cout + co + 1) / (double)(batch * cout));
        }
}

double fg_reference_work(const fg_layer_ir *ir, int64_t batch)
{
    const fg_op *c = &ir->ops[0];
    double taps = 1;
    for (int i = 0; i < c->spatial; i++)
        taps *= c->kernel[i];
    double work = (double)fg_shape_sample_count(&c->out) * (double)(c->in.dim[1] / c->groups) * taps;
    for (int k = 1; k < ir->n_ops; k++) /* norms and reductions read a value two or three times */
        work += 4.0 * (double)fg_shape_sample_count(&ir->ops[k].in);
    work += 4.0 * (double)ir->n_pro * (double)fg_shape_sample_count(&ir->input);
    return work * (double)batch;
}

/* Index of a broadcast parameter at the given value coordinates (right-aligned). */
static int64_t param_index(const fg_param *p, const fg_shape *s, const int64_t *coords)
{
    int64_t i = 0;
    for (int pd = 0; pd < p->rank; pd++) {
        int d = s->rank - p->rank + pd;
        int64_t c = p->dim[pd] == 1 || d < 1 ? 0 : coords[d];
        i = i * p->dim[pd] + c;
    }
    return i;
}

static int64_t stat_key(const fg_stat_layout *L, const fg_shape *s, const int64_t *coords, int64_t n)
{
    int64_t key = coords[1] / L->channel_group;
    for (int d = 2; d < s->rank; d++)
        if (!(L->mask & (1u << d)))
            key = key * s->dim[d] + coords[d];
    return L->over_batch ? key : n * L->keys_per_sample + key;
}

static int norm(const fg_layer_ir *ir, const fg_op *op, const value *in, value *out, int64_t batch,
                const float *const *params, fg_error *err)
{
    fg_stat_layout L;
    fg_norm_stat_layout(op, &L);
    int64_t keys = L.over_batch ? L.keys_per_sample : batch * L.keys_per_sample;
    int64_t count = L.over_batch ? L.count_per_sample * batch : L.count_per_sample;
    double *mean = calloc((size_t)keys, sizeof *mean), *var = calloc((size_t)keys, sizeof *var);
    if (!mean || !var) {
        free(mean);
        free(var);
        return fg_fail(err, "CPU reference: out of memory for %s statistics", op->name);
    }
    int64_t coords[FG_MAX_RANK];
    const fg_shape *s = &in->shape;
    bool running = op->kind == FG_OP_BATCH_NORM && op->running_stats;
    if (!running) {
        /* two passes: exact mean, then the variance around it */
        for (int pass = 0; pass < 2; pass++)
            for (int64_t n = 0; n < batch; n++)
                for (int64_t i = 0; i < in->sample; i++) {
                    unravel(s, i, coords);
                    int64_t key = stat_key(&L, s, coords, n);
                    double x = in->data[n * in->sample + i];
                    if (pass == 0)
                        mean[key] += x;
                    else
                        var[key] += (x - mean[key]) * (x - mean[key]);
                    if (pass == 0 && n == batch - 1 && i == in->sample - 1)
                        for (int64_t q = 0; q < keys; q++)
                            mean[q] /= (double)count;
                }
        for (int64_t q = 0; q < keys; q++)
            var[q] /= (double)count; /* biased, as PyTorch normalizes */
    }
    const float *w = op->affine ? params[op->weight_param] : NULL;
    const float *b = op->affine ? params[op->bias_param] : NULL;
    for (int64_t n = 0; n < batch; n++)
        for (int64_t i = 0; i < in->sample; i++) {
            unravel(s, i, coords);
            double m, v;
            if (running) {
                m = params[op->mean_param][coords[1]];
                v = params[op->var_param][coords[1]];
            } else {
                int64_t key = stat_key(&L, s, coords, n);
                m = mean[key];
                v = var[key];
            }
            double y = (in->data[n * in->sample + i] - m) / sqrt(v + op->eps);
            if (op->affine) {
                int64_t a;
                if (op->kind == FG_OP_LAYER_NORM)
                    a = param_index(&ir->params[op->weight_param], s, coords);
                else
                    a = coords[1];
                y = y * w[a] + b[a];
            }
            out->data[n * out->sample + i] = y;
        }
    free(mean);
    free(var);
    return 0;
}

/* The statistic (on the keepdim shape) that input element i of sample n feeds. */
static int64_t reduce_key(const fg_op *op, const fg_shape *s, const fg_shape *kshape, int64_t ksample, int64_t n,
                          int64_t i)
{
    int64_t coords[FG_MAX_RANK];
    unravel(s, i, coords);
    for (int d = 1; d < s->rank; d++)
        if (op->reduce_mask & (1u << d))
            coords[d] = 0;
    return n * ksample + ravel(kshape, coords);
}

/* Reductions (and softmax) over reduce_mask. Output element of an input element: drop or
 * zero the reduced coordinates. */
static int reduce(const fg_op *op, const value *in, value *out, int64_t batch, fg_error *err)
{
    const fg_shape *s = &in->shape;
    bool softmax = fg_op_kind_class(op->kind) == FG_CLASS_SOFTMAX;
    /* statistics live on the keepdim shape */
    fg_shape kshape = *s;
    int64_t group = 1;
    for (int d = 1; d < s->rank; d++)
        if (op->reduce_mask & (1u << d)) {
            kshape.dim[d] = 1;
            group *= s->dim[d];
        }
    int64_t ksample = fg_shape_sample_count(&kshape);
    double *mx = malloc(sizeof(double) * (size_t)(ksample * batch));
    double *acc = calloc((size_t)(ksample * batch), sizeof(double));
    if (!mx || !acc) {
        free(mx);
        free(acc);
        return fg_fail(err, "CPU reference: out of memory for a reduction");
    }
    for (int64_t q = 0; q < ksample * batch; q++)
        mx[q] = ref_reduce_min[op->kind] ? INFINITY : -INFINITY;
#define KEY(n, i) reduce_key(op, s, &kshape, ksample, (n), (i))
    for (int64_t n = 0; n < batch; n++)
        for (int64_t i = 0; i < in->sample; i++) {
            int64_t k = KEY(n, i);
            double x = in->data[n * in->sample + i];
            if (ref_reduce_min[op->kind])
                mx[k] = x < mx[k] || isnan(x) ? x : mx[k];
            else
                mx[k] = x > mx[k] || isnan(x) ? x : mx[k];
            acc[k] += x;
        }
    if (ref_reduce[op->kind] == ref_logsumexp || softmax) { /* the sum of exp(x - max) */
        memset(acc, 0, sizeof(double) * (size_t)(ksample * batch));
        for (int64_t n = 0; n < batch; n++)
            for (int64_t i = 0; i < in->sample; i++) {
                int64_t k = KEY(n, i);
                if (isfinite(mx[k]))
                    acc[k] += exp(in->data[n * in->sample + i] - mx[k]);
            }
    }
    if (softmax) {
        for (int64_t n = 0; n < batch; n++)
            for (int64_t i = 0; i < in->sample; i++) {
                int64_t k = KEY(n, i);
                out->data[n * out->sample + i] = exp(in->data[n * in->sample + i] - mx[k]) / acc[k];
            }
    } else {
        /* the output is the keepdim shape with or without the unit dims: same order */
        for (int64_t q = 0; q < ksample * batch; q++) {
            out->data[q] = ref_reduce[op->kind](mx[q], acc[q], group);
        }
    }
#undef KEY
    free(mx);
    free(acc);
    return 0;
}

static void pool(const fg_op *op, const value *in, value *out, int64_t batch)
{
    const fg_shape *s = &in->shape, *o = &out->shape;
    int sp = op->spatial;
    int64_t oc[FG_MAX_RANK], ic[FG_MAX_RANK];
    int64_t window = 1;
    for (int i = 0; i < sp; i++)
        window *= op->kernel[i];
    for (int64_t n = 0; n < batch; n++)
        for (int64_t j = 0; j < out->sample; j++) {
            unravel(o, j, oc);
            double best = -INFINITY, sum = 0;
            int64_t valid = 0;
            for (int64_t t = 0; t < window; t++) {
                int64_t r = t;
                bool inside = true;
                ic[1] = oc[1];
                for (int i = sp - 1; i >= 0; i--) {
                    int64_t kk = r % op->kernel[i];
                    r /= op->kernel[i];
                    ic[2 + i] = oc[2 + i] * op->stride[i] - op->padding[i] + kk;
                    inside = inside && ic[2 + i] >= 0 && ic[2 + i] < s->dim[2 + i];
                }
                if (!inside)
                    continue;
                double x = in->data[n * in->sample + ravel(s, ic)];
                best = x > best || isnan(x) ? x : best;
                sum += x;
                valid++;
            }
            out->data[n * out->sample + j] = ref_pool[op->kind](best, sum, op->count_include_pad ? window : valid);
        }
}

static bool used_later(const fg_layer_ir *ir, int k)
{
    for (int j = k + 2; j < ir->n_ops; j++)
        if (ir->ops[j].operand == FG_OPERAND_VALUE && ir->ops[j].operand_value == k)
            return true;
    return false;
}

int fg_reference_run(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                     double *output, fg_error *err)
{
    return fg_reference_run_progress(ir, batch, input, params, output, NULL, NULL, err);
}

static int run_nchw(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                    double *output, fg_reference_progress progress, void *ctx, fg_error *err);

/* Channels and positions per sample of an (N, C, spatial...) shape. */
static void channels_positions(const fg_shape *s, int64_t *c, int64_t *p)
{
    *c = s->dim[1];
    *p = 1;
    for (int d = 2; d < s->rank; d++)
        *p *= s->dim[d];
}

/* `batch` samples of an N(D)HWC tensor of shape `s` as NC(D)HW floats (a new array), or NULL
 * (out of memory). */
static float *nchw_copy(const fg_shape *s, int64_t batch, const float *src)
{
    int64_t ci, pi;
    channels_positions(s, &ci, &pi);
    float *x = calloc((size_t)(batch * ci * pi), sizeof(float)); /* (calloc: GCC cannot see the loop below fill it) */
    for (int64_t n = 0; x && n < batch; n++)
        for (int64_t p = 0; p < pi; p++)
            for (int64_t c = 0; c < ci; c++)
                x[(n * ci + c) * pi + p] = src[(n * pi + p) * ci + c];
    return x;
}

/* Layout "channels_last": the input is N(D)HWC and so is the output; the values are computed
 * NC(D)HW as always and the two are transposed on the way in and out. So are the block
 * tensors a layer of a block reads as operands (batched parameters): they are tensors of the
 * block, in its layout (an [N, C] one is the same memory either way). */
int fg_reference_run_progress(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                              double *output, fg_reference_progress progress, void *ctx, fg_error *err)
{
    if (ir->layout != FG_LAYOUT_CHANNELS_LAST)
        return run_nchw(ir, batch, input, params, output, progress, ctx, err);
    const fg_shape *os = &ir->ops[ir->n_ops - 1].out;
    int64_t co, po;
    channels_positions(os, &co, &po);
    float *x = nchw_copy(&ir->input, batch, input);
    double *y = malloc(sizeof(double) * (size_t)(batch * co * po));
    const float *p_nchw[FG_MAX_PARAMS];
    float *owned[FG_MAX_PARAMS] = {NULL};
    bool ok = x && y;
    for (int q = 0; q < ir->n_params; q++) {
        p_nchw[q] = params[q];
        if (ir->params[q].batched && ok) {
            fg_shape ts = {.rank = ir->params[q].rank + 1, .dim = {1}};
            memcpy(ts.dim + 1, ir->params[q].dim, sizeof(int64_t) * (size_t)ir->params[q].rank);
            ok = (p_nchw[q] = owned[q] = nchw_copy(&ts, batch, params[q])) != NULL;
        }
    }
    int rc;
    if (!ok) {
        rc = fg_fail(err, "CPU reference: out of memory for the channels-last input, output and block tensors");
    } else {
        rc = run_nchw(ir, batch, x, p_nchw, y, progress, ctx, err);
        if (rc == 0)
            for (int64_t n = 0; n < batch; n++)
                for (int64_t p = 0; p < po; p++)
                    for (int64_t c = 0; c < co; c++)
                        output[(n * po + p) * co + c] = y[(n * co + c) * po + p];
    }
    for (int q = 0; q < ir->n_params; q++)
        free(owned[q]);
    free(x);
    free(y);
    return rc;
}

/* Value `out` of op `op` (not a conv) from `in`: the chain's ops and the prologue's.
 * `vals` holds the chain's earlier values (a binary op's named operand). */
static int apply_op(const fg_layer_ir *ir, const fg_op *op, const value *in, value *out, const value *vals,
                    int64_t batch, const float *const *params, fg_error *err)
{
    int64_t coords[FG_MAX_RANK];
    switch (fg_op_kind_class(op->kind)) {
    case FG_CLASS_CONV:
        return fg_fail(err, "CPU reference: a convolution at line %d is not the layer's anchor", op->line);
    case FG_CLASS_UNARY:
        for (int64_t i = 0; i < in->sample * batch; i++)
            out->data[i] = ref_unary[op->kind](op, in->data[i]);
        break;
    case FG_CLASS_BINARY:
        for (int64_t n = 0; n < batch; n++)
            for (int64_t i = 0; i < in->sample; i++) {
                double b;
                if (op->operand == FG_OPERAND_SCALAR) {
                    b = op->scalar;
                } else if (op->operand == FG_OPERAND_PARAM) {
                    unravel(&in->shape, i, coords);
                    const fg_param *p = &ir->params[op->operand_param];
                    /* a block tensor (batched) holds one value per sample */
                    int64_t at = param_index(p, &in->shape, coords) + (p->batched ? n * p->count : 0);
                    b = params[op->operand_param][at];
                } else {
                    b = vals[op->operand_value].data[n * in->sample + i];
                }
                out->data[n * in->sample + i] = ref_binary[op->kind](in->data[n * in->sample + i], b);
            }
        break;
    case FG_CLASS_NORM:
        return norm(ir, op, in, out, batch, params, err);
    case FG_CLASS_REDUCE:
    case FG_CLASS_SOFTMAX:
        return reduce(op, in, out, batch, err);
    case FG_CLASS_POOL:
        pool(op, in, out, batch);
        break;
    case FG_CLASS_SHAPE:
        /* a dense value in a new shape: the elements in the same order */
        memcpy(out->data, in->data, sizeof(double) * (size_t)(in->sample * batch));
        break;
    }
    return 0;
}

/* The conv's input in double: the layer input after the prologue's ops, in order, each on
 * the whole tensor (a prologue norm's statistics over the input as it is then). */
static int conv_input(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                      value *x, fg_error *err)
{
    x->shape = ir->input;
    x->sample = fg_shape_sample_count(&ir->input);
    size_t count = (size_t)(x->sample * batch);
    x->data = malloc(sizeof(double) * count);
    value t = *x;
    t.data = ir->n_pro ? malloc(sizeof(double) * count) : NULL;
    if (!x->data || (ir->n_pro && !t.data)) {
        free(x->data);
        free(t.data);
        x->data = NULL;
        return fg_fail(err, "CPU reference: out of memory for the conv's input (%zu doubles)", count);
    }
    for (size_t i = 0; i < count; i++)
        x->data[i] = input[i];
    int rc = 0;
    for (int j = 0; j < ir->n_pro && rc == 0; j++) {
        if (!fg_ref_defines(ir->pro[j].kind)) {
            rc = fg_fail(err, "CPU reference: op %s (line %d) has no definition here", fg_op_kind_name(ir->pro[j].kind),
                         ir->pro[j].line);
            break;
        }
        rc = apply_op(ir, &ir->pro[j], x, &t, NULL, batch, params, err);
        double *swap = x->data;
        x->data = t.data;
        t.data = swap;
    }
    free(t.data);
    if (rc) {
        free(x->data);
        x->data = NULL;
    }
    return rc;
}

static int run_nchw(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                    double *output, fg_reference_progress progress, void *ctx, fg_error *err)
{
    const progress_hook hook = {progress, ctx};
    value vals[FG_MAX_OPS];
    memset(vals, 0, sizeof vals);
    value x;
    int rc = conv_input(ir, batch, input, params, &x, err);
    for (int k = 0; k < ir->n_ops && rc == 0; k++) {
        const fg_op *op = &ir->ops[k];
        value *out = &vals[k];
        out->shape = op->out;
        out->sample = fg_shape_sample_count(&op->out);
        out->data = k == ir->n_ops - 1 ? output : malloc(sizeof(double) * (size_t)(out->sample * batch));
        if (!out->data) {
            rc = fg_fail(err, "CPU reference: out of memory for value %d (%lld doubles)", k,
                         (long long)(out->sample * batch));
            break;
        }
        const value *in = k ? &vals[k - 1] : NULL;
        if (!fg_ref_defines(op->kind)) {
            rc = fg_fail(err, "CPU reference: op %s (line %d) has no definition here", fg_op_kind_name(op->kind),
                         op->line);
            break;
        }
        if (k == 0)
            conv(op, &ir->input, x.data, params[op->weight_param], op->bias ? params[op->bias_param] : NULL, out,
                 batch, &hook);
        else
            rc = apply_op(ir, op, in, out, vals, batch, params, err);
        /* values nobody reads again are freed as soon as the next one exists */
        if (k >= 1 && !used_later(ir, k - 1) && vals[k - 1].data != output) {
            free(vals[k - 1].data);
            vals[k - 1].data = NULL;
        }
    }
    free(x.data);
    for (int k = 0; k < ir->n_ops; k++)
        if (vals[k].data != output)
            free(vals[k].data);
    return rc;
}

int fg_reference_run_block(const fg_block_ir *b, int64_t batch, const float *const *inputs,
                           const float *const *const *params, double *output, fg_error *err)
{
    const float *tensors[FG_MAX_BLOCK_TENSORS] = {NULL};
    float *owned[FG_MAX_BLOCK_TENSORS] = {NULL};
    int rc = 0;
    /* a bf16/fp16 block reads its inputs in that dtype: the values the GPU reads (each one
     * rounded to the dtype, as fg_layer_run_cpu rounds a half layer's input) */
    for (int t = 0; t < b->n_inputs && rc == 0; t++) {
        tensors[t] = inputs[t];
        if (b->dtype == FG_DTYPE_FP32)
            continue;
        const int64_t n = batch * fg_shape_sample_count(&b->tensors[t].shape);
        if (!(owned[t] = malloc(sizeof(float) * (size_t)n)))
            rc = fg_fail(err, "CPU reference: out of memory for block input '%s'", b->tensors[t].name);
        for (int64_t e = 0; rc == 0 && e < n; e++)
            owned[t][e] = (float)fg_round_to_dtype(inputs[t][e], (int)b->dtype);
        tensors[t] = owned[t];
    }
    for (int i = 0; i < b->n_layers && rc == 0; i++) {
        const fg_layer_ir *ir = &b->layers[i];
        const int out = b->layer[i].out;
        const int64_t n_out = batch * fg_shape_sample_count(&b->tensors[out].shape);
        double *y = out == b->output ? output : malloc(sizeof(double) * (size_t)n_out);
        const float *p[FG_MAX_PARAMS];
        for (int q = 0; q < ir->n_params; q++)
            p[q] = !ir->params[q].batched ? params[i][q] : tensors[ir->params[q].tensor];
        if (!y) {
            rc = fg_fail(err, "CPU reference: out of memory for layer %s", ir->name);
            break;
        }
        rc = fg_reference_run(ir, batch, tensors[b->layer[i].from], p, y, err);
        if (rc == 0 && out != b->output) {
            if (!(tensors[out] = owned[out] = malloc(sizeof(float) * (size_t)n_out)))
                rc = fg_fail(err, "CPU reference: out of memory for layer %s", ir->name);
            /* what the GPU stores: rounded to the block's dtype (to float for fp32), as the
             * layer reference rounds a half layer's output */
            for (int64_t e = 0; rc == 0 && e < n_out; e++)
                owned[out][e] = (float)fg_round_to_dtype(y[e], (int)b->dtype);
        }
        if (y != output)
            free(y);
    }
    for (int t = 0; t < FG_MAX_BLOCK_TENSORS; t++)
        free(owned[t]);
    return rc;
}
