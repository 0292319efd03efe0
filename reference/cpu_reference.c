#include "cpu_reference.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

double fg_ref_unary(const fg_op *op, double x)
{
    switch (op->kind) {
    case FG_OP_RELU:
        return x > 0 ? x : 0;
    case FG_OP_LEAKY_RELU:
        return x > 0 ? x : op->alpha * x;
    case FG_OP_GELU:
        if (op->gelu_tanh)
            return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case FG_OP_SIGMOID:
        return 1 / (1 + exp(-x));
    case FG_OP_TANH:
        return tanh(x);
    case FG_OP_SOFTPLUS:
        return op->beta * x > op->threshold ? x : log1p(exp(op->beta * x)) / op->beta;
    case FG_OP_MISH: {
        double sp = x > 20 ? x : log1p(exp(x));
        return x * tanh(sp);
    }
    case FG_OP_SILU:
        return x / (1 + exp(-x));
    case FG_OP_HARDSWISH:
        return x * fmin(fmax(x + 3, 0), 6) / 6;
    case FG_OP_HARDSIGMOID:
        return fmin(fmax(x + 3, 0), 6) / 6;
    case FG_OP_HARDTANH:
    case FG_OP_CLAMP:
        if (op->has_lo && x < op->lo)
            x = op->lo;
        if (op->has_hi && x > op->hi)
            x = op->hi;
        return x;
    case FG_OP_EXP:
        return exp(x);
    case FG_OP_LOG:
        return log(x);
    case FG_OP_ABS:
        return fabs(x);
    case FG_OP_NEG:
        return -x;
    default:
        return NAN;
    }
}

double fg_ref_binary(fg_op_kind kind, double a, double b)
{
    switch (kind) {
    case FG_OP_ADD:
        return a + b;
    case FG_OP_SUB:
        return a - b;
    case FG_OP_MUL:
        return a * b;
    case FG_OP_DIV:
        return a / b;
    case FG_OP_MINIMUM: /* torch.minimum propagates NaN */
        return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
    case FG_OP_MAXIMUM:
        return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
    default:
        return NAN;
    }
}

typedef struct progress_hook {
    fg_reference_progress fn;
    void *ctx;
} progress_hook;

static void conv(const fg_op *op, const fg_shape *in_shape, const float *x, const float *w, const float *bias,
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
                            const float *xc = x + (n * cin + g * cin_g + cl) * in_plane;
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
                                        acc += (double)xc[(id * in_d[1] + ih) * in_d[2] + iw] *
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
    bool softmax = op->kind == FG_OP_SOFTMAX;
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
        mx[q] = op->kind == FG_OP_REDUCE_MIN ? INFINITY : -INFINITY;
#define KEY(n, i) reduce_key(op, s, &kshape, ksample, (n), (i))
    for (int64_t n = 0; n < batch; n++)
        for (int64_t i = 0; i < in->sample; i++) {
            int64_t k = KEY(n, i);
            double x = in->data[n * in->sample + i];
            if (op->kind == FG_OP_REDUCE_MIN)
                mx[k] = x < mx[k] || isnan(x) ? x : mx[k];
            else
                mx[k] = x > mx[k] || isnan(x) ? x : mx[k];
            acc[k] += x;
        }
    if (op->kind == FG_OP_LOGSUMEXP || softmax) {
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
            double r;
            switch (op->kind) {
            case FG_OP_REDUCE_MAX:
            case FG_OP_REDUCE_MIN:
                r = mx[q];
                break;
            case FG_OP_REDUCE_SUM:
                r = acc[q];
                break;
            case FG_OP_LOGSUMEXP:
                r = isfinite(mx[q]) ? mx[q] + log(acc[q]) : mx[q];
                break;
            default: /* mean, global_avg_pool */
                r = acc[q] / (double)group;
                break;
            }
            out->data[q] = r;
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
            double r;
            if (op->kind == FG_OP_MAX_POOL)
                r = best;
            else
                r = sum / (double)(op->count_include_pad ? window : valid);
            out->data[n * out->sample + j] = r;
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

int fg_reference_run_progress(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                              double *output, fg_reference_progress progress, void *ctx, fg_error *err)
{
    const progress_hook hook = {progress, ctx};
    value vals[FG_MAX_OPS];
    memset(vals, 0, sizeof vals);
    int rc = 0;
    int64_t coords[FG_MAX_RANK];
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
        switch (fg_op_kind_class(op->kind)) {
        case FG_CLASS_CONV:
            conv(op, &ir->input, input, params[op->weight_param], op->bias ? params[op->bias_param] : NULL, out,
                 batch, &hook);
            break;
        case FG_CLASS_UNARY:
            for (int64_t i = 0; i < in->sample * batch; i++)
                out->data[i] = fg_ref_unary(op, in->data[i]);
            break;
        case FG_CLASS_BINARY:
            for (int64_t n = 0; n < batch; n++)
                for (int64_t i = 0; i < in->sample; i++) {
                    double b;
                    if (op->operand == FG_OPERAND_SCALAR) {
                        b = op->scalar;
                    } else if (op->operand == FG_OPERAND_PARAM) {
                        unravel(&in->shape, i, coords);
                        b = params[op->operand_param][param_index(&ir->params[op->operand_param], &in->shape, coords)];
                    } else {
                        b = vals[op->operand_value].data[n * in->sample + i];
                    }
                    out->data[n * in->sample + i] = fg_ref_binary(op->kind, in->data[n * in->sample + i], b);
                }
            break;
        case FG_CLASS_NORM:
            rc = norm(ir, op, in, out, batch, params, err);
            break;
        case FG_CLASS_REDUCE:
        case FG_CLASS_SOFTMAX:
            rc = reduce(op, in, out, batch, err);
            break;
        case FG_CLASS_POOL:
            pool(op, in, out, batch);
            break;
        }
        /* values nobody reads again are freed as soon as the next one exists */
        if (k >= 1 && !used_later(ir, k - 1) && vals[k - 1].data != output) {
            free(vals[k - 1].data);
            vals[k - 1].data = NULL;
        }
    }
    for (int k = 0; k < ir->n_ops; k++)
        if (vals[k].data != output)
            free(vals[k].data);
    return rc;
}
