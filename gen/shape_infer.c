/* SPDX-License-Identifier: Apache-2.0 */
#include "shape_infer.h"

#include "op_registry.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct infer_ctx {
    fg_layer_ir *ir;
    fg_error *err;
    const fg_op *op;
} infer_ctx;

static int op_fail(infer_ctx *c, const char *field, const char *fmt, ...) FG_PRINTF(3, 4);
static int op_fail(infer_ctx *c, const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *spec_name = fg_op_written_name(c->op);
    if (field)
        return fg_fail(c->err, "%s:%d: %s: field '%s' %s", c->ir->file, c->op->line, spec_name, field, msg);
    return fg_fail(c->err, "%s:%d: %s: %s", c->ir->file, c->op->line, spec_name, msg);
}

/* Every value's per-sample size must fit the kernels' 32-bit sample indexing; products are
 * overflow-checked on the way. */
static int check_size(infer_ctx *c, const fg_shape *s, const char *what)
{
    int64_t n = 1;
    for (int d = 1; d < s->rank; d++) {
        if (__builtin_mul_overflow(n, s->dim[d], &n) || n > FG_MAX_SAMPLE_ELEMENTS) {
            char buf[128];
            return op_fail(c, NULL, "%s %s has more than %" PRId64 " elements per sample", what,
                           fg_shape_str(s, buf, sizeof buf), FG_MAX_SAMPLE_ELEMENTS);
        }
    }
    return 0;
}

/* Registers a parameter, or checks that a reused name keeps its shape. */
static int add_param(infer_ctx *c, const char *name, int rank, const int64_t *dim, int *index)
{
    fg_layer_ir *ir = c->ir;
    for (int i = 0; i < ir->n_params; i++) {
        fg_param *p = &ir->params[i];
        if (strcmp(p->name, name) != 0)
            continue;
        bool same = p->rank == rank;
        for (int d = 0; same && d < rank; d++)
            same = p->dim[d] == dim[d];
        if (!same) {
            char a[128] = "", b[128] = "";
            for (int d = 0; d < p->rank; d++)
                snprintf(a + strlen(a), sizeof a - strlen(a), "%s%" PRId64, d ? ", " : "", p->dim[d]);
            for (int d = 0; d < rank; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%" PRId64, d ? ", " : "", dim[d]);
            return op_fail(c, NULL, "parameter '%s' is used with shape [%s] here but [%s] at line %d", name, b, a,
                           p->first_line);
        }
        *index = i;
        return 0;
    }
    if (ir->n_params == FG_MAX_PARAMS)
        return op_fail(c, NULL, "too many parameters (at most %d)", FG_MAX_PARAMS);
    fg_param *p = &ir->params[ir->n_params];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rank = rank;
    p->count = 1;
    for (int d = 0; d < rank; d++) {
        p->dim[d] = dim[d];
        if (__builtin_mul_overflow(p->count, dim[d], &p->count) || p->count > FG_MAX_SAMPLE_ELEMENTS)
            return op_fail(c, NULL, "parameter '%s' is too large", name);
    }
    p->first_line = c->op->line;
    *index = ir->n_params++;
    return 0;
}

static int add_module_param(infer_ctx *c, const char *module, const char *suffix, int rank, const int64_t *dim,
                            int *index)
{
    char name[FG_NAME_MAX];
    if ((size_t)snprintf(name, sizeof name, "%s.%s", module, suffix) >= sizeof name)
        return op_fail(c, "name", "'%s' is too long", module);
    return add_param(c, name, rank, dim, index);
}

/* Expands a spatial field given as one value or one per dim. */
static int expand_spatial(infer_ctx *c, const char *field, int given, int *v, int spatial)
{
    if (given > 1 && given != spatial)
        return op_fail(c, field, "has %d values; give one or %d", given, spatial);
    if (given == 1)
        for (int i = 1; i < spatial; i++)
            v[i] = v[0];
    return 0;
}

static int infer_conv(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    char buf[128];
    if (in->rank != op->spatial + 2)
        return op_fail(c, NULL, "expects a %dD input [N, C, %s] but the layer input is %s", op->spatial + 2,
                       op->spatial == 2 ? "H, W" : "D, H, W", fg_shape_str(in, buf, sizeof buf));
    if (expand_spatial(c, "kernel", op->kernel_n, op->kernel, op->spatial) ||
        expand_spatial(c, "stride", op->stride_n, op->stride, op->spatial) ||
        expand_spatial(c, "padding", op->padding_n, op->padding, op->spatial) ||
        expand_spatial(c, "dilation", op->dilation_n, op->dilation, op->spatial))
        return -1;
    int64_t cin = in->dim[1];
    if (cin % op->groups)
        return op_fail(c, "groups", "(%" PRId64 ") must divide the input channels (%" PRId64 ")", op->groups, cin);
    if (op->out_channels % op->groups)
        return op_fail(c, "groups", "(%" PRId64 ") must divide out_channels (%" PRId64 ")", op->groups,
                       op->out_channels);
    fg_shape *out = &op->out;
    out->rank = in->rank;
    out->dim[0] = 1;
    out->dim[1] = op->out_channels;
    for (int i = 0; i < op->spatial; i++) {
        int64_t padded = in->dim[2 + i] + 2 * (int64_t)op->padding[i];
        int64_t extent = (int64_t)op->dilation[i] * (op->kernel[i] - 1) + 1;
        if (extent > padded)
            return op_fail(c, "kernel",
                           "is larger than the input: spatial dim %d is %" PRId64 " (padded) but the kernel spans %" PRId64,
                           i, padded, extent);
        out->dim[2 + i] = (padded - extent) / op->stride[i] + 1;
    }
    int64_t wdim[FG_MAX_RANK] = {op->out_channels, cin / op->groups};
    for (int i = 0; i < op->spatial; i++)
        wdim[2 + i] = op->kernel[i];
    if (add_module_param(c, op->name, "weight", 2 + op->spatial, wdim, &op->weight_param))
        return -1;
    if (op->bias && add_module_param(c, op->name, "bias", 1, &op->out_channels, &op->bias_param))
        return -1;
    return 0;
}

/* PyTorch broadcasting, right-aligned; the batch dim of a parameter must be 1. */
static int check_broadcast(infer_ctx *c, const char *what, int rank, const int64_t *dim, const fg_shape *to)
{
    char buf[128];
    if (rank > to->rank)
        return op_fail(c, "shape", "%s has rank %d, more than the value %s", what, rank,
                       fg_shape_str(to, buf, sizeof buf));
    for (int i = 0; i < rank; i++) {
        int td = to->rank - rank + i;
        bool ok = dim[i] == 1 || (td > 0 && dim[i] == to->dim[td]);
        if (!ok)
            return op_fail(c, "shape",
                           "%s does not broadcast against the value %s: its dim %d is %" PRId64,
                           what, fg_shape_str(to, buf, sizeof buf), i, dim[i]);
    }
    return 0;
}

static int find_value(infer_ctx *c, int upto, const char *name)
{
    const char *names[FG_MAX_OPS] = {0};
    int n = 0;
    for (int k = upto - 1; k >= 0; k--) {
        if (!c->ir->ops[k].as[0])
            continue;
        if (!strcmp(c->ir->ops[k].as, name))
            return k;
        names[n++] = c->ir->ops[k].as;
    }
    const char *near = fg_nearest_name(name, names, n);
    if (near)
        op_fail(c, "value", "'%s' names no earlier value (did you mean '%s'?)", name, near);
    else if (n == 0)
        op_fail(c, "value", "'%s' names no earlier value: name one with as = \"%s\" on an earlier op", name, name);
    else
        op_fail(c, "value", "'%s' names no earlier value", name);
    return -1;
}

/* A block tensor as a binary operand (docs/spec.md, "Blocks"): the value's own shape, or a
 * per-sample vector [N, C] broadcast over the spatial dims; a batched parameter of the layer,
 * [C, spatial...] or [C, 1, ...]. */
static int infer_tensor_operand(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    fg_shape t = {.rank = op->tensor_rank};
    memcpy(t.dim, op->tensor_dim, sizeof t.dim);
    bool same = t.rank == in->rank, vector = t.rank == 2 && in->rank >= 2 && t.dim[1] == in->dim[1];
    for (int d = 1; same && d < in->rank; d++)
        same = t.dim[d] == in->dim[d];
    if (!same && !vector) {
        char a[128], b[128];
        return op_fail(c, "tensor", "'%s' is %s but the value here is %s: a tensor operand has the value's shape, or "
                                    "is [N, C] (one value per sample and channel, broadcast over the spatial dims)",
                       op->param_name, fg_shape_str(&t, a, sizeof a), fg_shape_str(in, b, sizeof b));
    }
    int64_t dim[FG_MAX_RANK];
    int rank = in->rank - 1;
    for (int d = 0; d < rank; d++)
        dim[d] = same || d == 0 ? in->dim[d + 1] : 1;
    for (int i = 0; i < c->ir->n_params; i++)
        if (!strcmp(c->ir->params[i].name, op->param_name) && !c->ir->params[i].batched)
            return op_fail(c, "tensor", "'%s' is also the name of a parameter of this layer (line %d): rename the "
                                        "layer or the parameter",
                           op->param_name, c->ir->params[i].first_line);
    if (add_param(c, op->param_name, rank, dim, &op->operand_param))
        return -1;
    c->ir->params[op->operand_param].batched = true;
    return 0;
}

static int infer_binary(infer_ctx *c, fg_op *op, const fg_shape *in, int k)
{
    op->out = *in;
    if (op->operand == FG_OPERAND_PARAM && op->tensor_operand)
        return infer_tensor_operand(c, op, in);
    if (op->operand == FG_OPERAND_PARAM) {
        int64_t dim[FG_MAX_RANK];
        int rank = op->param_rank;
        if (rank) {
            memcpy(dim, op->param_dim, sizeof dim);
        } else {
            /* default: one value per channel, shaped to broadcast like PyTorch's [C, 1, ...] */
            if (in->rank < 2)
                return op_fail(c, "shape", "must be given: the value has no channel dim to default to");
            rank = in->rank - 1;
            dim[0] = in->dim[1];
            for (int d = 1; d < rank; d++)
                dim[d] = 1;
            /* a parameter already declared keeps its declared shape */
            for (int i = 0; i < c->ir->n_params; i++)
                if (!strcmp(c->ir->params[i].name, op->param_name)) {
                    rank = c->ir->params[i].rank;
                    memcpy(dim, c->ir->params[i].dim, sizeof dim);
                }
        }
        for (int i = 0; i < c->ir->n_params; i++)
            if (!strcmp(c->ir->params[i].name, op->param_name) && c->ir->params[i].batched)
                return op_fail(c, "param", "'%s' names a tensor of the block (line %d), not a parameter",
                               op->param_name, c->ir->params[i].first_line);
        char what[FG_NAME_MAX + 16];
        snprintf(what, sizeof what, "param '%s'", op->param_name);
        if (check_broadcast(c, what, rank, dim, in))
            return -1;
        return add_param(c, op->param_name, rank, dim, &op->operand_param);
    }
    if (op->operand == FG_OPERAND_VALUE) {
        int v = find_value(c, k, op->value_name);
        if (v < 0)
            return -1;
        const fg_shape *vs = &c->ir->ops[v].out;
        if (!fg_shape_same(vs, in)) {
            char a[128], b[128];
            return op_fail(c, "value", "'%s' has shape %s but this op's input is %s; both must match",
                           op->value_name, fg_shape_str(vs, a, sizeof a), fg_shape_str(in, b, sizeof b));
        }
        op->operand_value = v;
    }
    return 0;
}

static int infer_norm(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    char buf[128];
    const fg_norm_def *norm = &fg_op_def_of(op->kind)->norm;
    op->out = *in;
    if (in->rank < 2 || (norm->channels != FG_NORM_TRAILING && in->rank < 3))
        return op_fail(c, NULL, "needs a value with channels and at least one spatial dim, got %s",
                       fg_shape_str(in, buf, sizeof buf));
    int64_t channels = in->dim[1];
    int64_t affine_dim[FG_MAX_RANK] = {channels};
    int affine_rank = 1;
    if (norm->channels == FG_NORM_ACROSS) {
        int64_t d = op->norm_dim < 0 ? op->norm_dim + in->rank : op->norm_dim;
        if (d != 1)
            return op_fail(c, "dim", "is %" PRId64 " but layer_norm normalizes dim 1 only (the channels of each "
                                     "position of %s; -%d from the end); for trailing dims use normalized_shape",
                           op->norm_dim, fg_shape_str(in, buf, sizeof buf), in->rank - 1);
    }
    if (norm->channels == FG_NORM_GROUPS && channels % op->groups)
        return op_fail(c, "groups", "(%" PRId64 ") must divide the channels (%" PRId64 ")", op->groups, channels);
    if (norm->channels == FG_NORM_TRAILING) {
        if (op->n_list > in->rank - 1)
            return op_fail(c, "normalized_shape", "has %d dims but the value %s has only %d besides the batch",
                           op->n_list, fg_shape_str(in, buf, sizeof buf), in->rank - 1);
        for (int i = 0; i < op->n_list; i++) {
            int d = in->rank - op->n_list + i;
            if (op->list[i] != in->dim[d])
                return op_fail(c, "normalized_shape", "must match the value's trailing dims: entry %d is %" PRId64
                                                      " but the value %s has %" PRId64 " there",
                               i, op->list[i], fg_shape_str(in, buf, sizeof buf), in->dim[d]);
        }
        op->normalized_rank = op->n_list;
        affine_rank = op->n_list;
        memcpy(affine_dim, op->list, sizeof(int64_t) * (size_t)op->n_list);
    }
    if (op->affine) {
        if (add_module_param(c, op->name, "weight", affine_rank, affine_dim, &op->weight_param) ||
            add_module_param(c, op->name, "bias", affine_rank, affine_dim, &op->bias_param))
            return -1;
    }
    if (!fg_op_stats(op)) {
        /* a norm that gathers no statistic reads the running ones (batch_norm, eval mode) */
        if (add_module_param(c, op->name, "running_mean", 1, &channels, &op->mean_param) ||
            add_module_param(c, op->name, "running_var", 1, &channels, &op->var_param))
            return -1;
    }
    return 0;
}

static int infer_reduce(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    char buf[128];
    const char *field = op->n_dims == 1 ? "dim" : "dims";
    if (!fg_op_field(op->kind, "dim") && !fg_op_field(op->kind, "dims")) {
        /* a reduction without dims (global_avg_pool): every spatial dim, kept */
        if (in->rank < 3)
            return op_fail(c, NULL, "needs spatial dims, got %s", fg_shape_str(in, buf, sizeof buf));
        op->n_dims = 0;
        for (int d = 2; d < in->rank; d++)
            op->dims[op->n_dims++] = d;
        op->keepdim = true;
    }
    op->reduce_mask = 0;
    for (int i = 0; i < op->n_dims; i++) {
        int d = op->dims[i];
        if (d < -in->rank || d >= in->rank)
            return op_fail(c, field, "names dim %d but the value %s has %d dims (valid: %d..%d)", d,
                           fg_shape_str(in, buf, sizeof buf), in->rank, -in->rank, in->rank - 1);
        if (d < 0)
            d += in->rank;
        if (d == 0)
            return op_fail(c, field, "reduces over the batch dim 0, which is bound at run time; reduce over "
                                     "dims 1..%d", in->rank - 1);
        if (op->reduce_mask & (1u << d))
            return op_fail(c, field, "lists dim %d twice", d);
        op->reduce_mask |= 1u << d;
    }
    if (fg_op_kind_class(op->kind) == FG_CLASS_SOFTMAX) {
        if (op->n_dims != 1)
            return op_fail(c, "dim", "must name exactly one dim (got %d)", op->n_dims);
        op->out = *in;
        return 0;
    }
    fg_shape *out = &op->out;
    out->rank = 0;
    for (int d = 0; d < in->rank; d++) {
        if (op->reduce_mask & (1u << d)) {
            if (op->keepdim)
                out->dim[out->rank++] = 1;
        } else {
            out->dim[out->rank++] = in->dim[d];
        }
    }
    return 0;
}

static int infer_pool(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    char buf[128];
    int spatial = in->rank - 2;
    if (spatial < 1 || spatial > 3)
        return op_fail(c, NULL, "needs a value [N, C, spatial...], got %s", fg_shape_str(in, buf, sizeof buf));
    if (op->spatial && op->spatial != spatial)
        return op_fail(c, NULL, "is a %dD pool but the value %s has %d spatial dims", op->spatial,
                       fg_shape_str(in, buf, sizeof buf), spatial);
    op->spatial = spatial;
    int stride_n = op->stride_n ? op->stride_n : op->kernel_n;
    if (expand_spatial(c, "kernel", op->kernel_n, op->kernel, spatial) ||
        expand_spatial(c, "stride", stride_n, op->stride, spatial) ||
        expand_spatial(c, "padding", op->padding_n, op->padding, spatial))
        return -1;
    op->out.rank = in->rank;
    op->out.dim[0] = 1;
    op->out.dim[1] = in->dim[1];
    for (int i = 0; i < spatial; i++) {
        if (2 * op->padding[i] > op->kernel[i])
            return op_fail(c, "padding", "(%d) must be at most half the kernel (%d)", op->padding[i], op->kernel[i]);
        int64_t padded = in->dim[2 + i] + 2 * (int64_t)op->padding[i];
        if (op->kernel[i] > padded)
            return op_fail(c, "kernel", "(%d) is larger than the input's spatial dim %d (%" PRId64 ")", op->kernel[i],
                           i, padded);
        op->out.dim[2 + i] = (padded - op->kernel[i]) / op->stride[i] + 1;
    }
    return 0;
}

/* ---- shape ops -------------------------------------------------------------------------- */

/* PyTorch's dim wrapping: d in [-rank, rank - 1], negative dims count from the end. */
static int wrap_dim(infer_ctx *c, const char *field, int64_t d, int rank, const fg_shape *in, int *out)
{
    char buf[128];
    if (d < -rank || d >= rank)
        return op_fail(c, field, "names dim %" PRId64 " but the value %s%s has %d dims (valid: %d..%d)", d,
                       fg_shape_str(in, buf, sizeof buf), rank > in->rank ? " with the new one" : "", rank, -rank,
                       rank - 1);
    *out = (int)(d < 0 ? d + rank : d);
    return 0;
}

static int infer_flatten(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    char buf[128];
    int s = 0, e = 0; /* set by wrap_dim; GCC -O3 cannot see it */
    if (wrap_dim(c, "start_dim", op->start_dim, in->rank, in, &s) ||
        wrap_dim(c, "end_dim", op->end_dim, in->rank, in, &e))
        return -1;
    if (s > e)
        return op_fail(c, "start_dim", "(dim %d) comes after end_dim (dim %d) of the value %s", s, e,
                       fg_shape_str(in, buf, sizeof buf));
    if (s == 0 && e > 0)
        return op_fail(c, "start_dim", "is dim 0, which merges the batch into dims 1..%d; fusegen's batch is bound at "
                                       "run time and stays dim 0: flatten from dim 1 (nn.Flatten's default, "
                                       "torch.flatten(x, 1))",
                       e);
    op->start_dim = s;
    op->end_dim = e;
    fg_shape *out = &op->out;
    out->rank = 0;
    for (int d = 0; d < in->rank; d++) {
        if (d <= s || d > e)
            out->dim[out->rank++] = in->dim[d];
        else
            out->dim[out->rank - 1] *= in->dim[d]; /* at most the sample's count, which fits */
    }
    return 0;
}

static int infer_squeeze(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    const char *field = op->n_dims == 1 ? "dim" : "dims";
    op->reduce_mask = 0;
    for (int i = 0; i < op->n_dims; i++) {
        int d = 0; /* set by wrap_dim; GCC -O3 cannot see it */
        if (wrap_dim(c, field, op->dims[i], in->rank, in, &d))
            return -1;
        if (d == 0)
            return op_fail(c, field, "names the batch dim 0, which is bound at run time: whether it goes would "
                                     "depend on it (PyTorch removes it only when the batch is 1); name dims 1..%d",
                           in->rank - 1);
        if (op->reduce_mask & (1u << d))
            return op_fail(c, field, "lists dim %d twice", d);
        op->reduce_mask |= 1u << d;
    }
    op->out.rank = 0;
    for (int d = 0; d < in->rank; d++)
        if (!(op->reduce_mask & (1u << d)) || in->dim[d] != 1)
            op->out.dim[op->out.rank++] = in->dim[d];
    return 0;
}

static int infer_unsqueeze(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    char buf[128];
    int d = 0; /* set by wrap_dim; GCC -O3 cannot see it */
    if (op->n_dims != 1)
        return op_fail(c, "dim", "must name exactly one dim (got %d)", op->n_dims);
    if (in->rank == FG_MAX_RANK)
        return op_fail(c, NULL, "would give the value %s a dim more than the %d fusegen's values have at most",
                       fg_shape_str(in, buf, sizeof buf), FG_MAX_RANK);
    if (wrap_dim(c, "dim", op->dims[0], in->rank + 1, in, &d))
        return -1;
    if (d == 0)
        return op_fail(c, "dim", "inserts the new dim before the batch; fusegen's batch stays dim 0: insert at "
                                 "dims 1..%d",
                       in->rank);
    op->reduce_mask = 1u << d;
    op->out.rank = in->rank + 1;
    for (int i = 0, j = 0; i < op->out.rank; i++)
        op->out.dim[i] = i == d ? 1 : in->dim[j++];
    return 0;
}

static int infer_view(infer_ctx *c, fg_op *op, const fg_shape *in)
{
    char buf[128];
    int64_t count = fg_shape_sample_count(in), known = 1;
    int inferred = -1;
    for (int i = 1; i < op->n_list; i++) {
        if (op->list[i] < 0)
            inferred = i;
        else if (__builtin_mul_overflow(known, op->list[i], &known) || known > count)
            return op_fail(c, "shape", "holds more elements per sample than the value %s (%" PRId64 ")",
                           fg_shape_str(in, buf, sizeof buf), count);
    }
    if (op->list[0] < 0) {
        /* -1 first: the batch, when the rest holds exactly one sample */
        if (known != count)
            return op_fail(c, "shape", "has -1 first and %" PRId64 " elements per entry of dim 0 after it, but a "
                                       "sample of the value %s has %" PRId64 ": that -1 would merge the batch "
                                       "with other dims, and fusegen's batch stays dim 0",
                           known, fg_shape_str(in, buf, sizeof buf), count);
    } else if (inferred < 0 ? known != count : count % known != 0) {
        return op_fail(c, "shape", "%s %" PRId64 " elements per sample but the value %s has %" PRId64,
                       inferred < 0 ? "holds" : "cannot infer its -1: the other extents hold", known,
                       fg_shape_str(in, buf, sizeof buf), count);
    }
    op->out.rank = op->n_list;
    op->out.dim[0] = 1;
    for (int i = 1; i < op->n_list; i++)
        op->out.dim[i] = i == inferred ? count / known : op->list[i];
    return 0;
}

/* The shape ops' own rules, by kind (the class's: shape ops change the shape alone). */
typedef int (*shape_infer_fn)(infer_ctx *c, fg_op *op, const fg_shape *in);
static const shape_infer_fn infer_shape_op[FG_OP_KIND_COUNT] = {
    [FG_OP_FLATTEN] = infer_flatten,
    [FG_OP_SQUEEZE] = infer_squeeze,
    [FG_OP_UNSQUEEZE] = infer_unsqueeze,
    [FG_OP_VIEW] = infer_view,
};

/* What may follow a shape op: ops that read no coordinates of their own (elementwise ops
 * with a scalar or a value laid out alike, and more shape ops). The kernels index every
 * value from the first shape op on in the layout of the value before it (fg_value_layout),
 * which is right for those alone: a parameter would broadcast, and a norm, reduction,
 * softmax or pool would pick its elements, by dims the kernels do not index. Checked before
 * the op's own inference, whose messages would be about the reshaped dims. */
static int check_after_shape_op(infer_ctx *c, const fg_op *op, const fg_op *shape_op)
{
    const char *what = NULL;
    switch (fg_op_kind_class(op->kind)) {
    case FG_CLASS_CONV: /* refused as a second conv */
    case FG_CLASS_UNARY:
    case FG_CLASS_SHAPE:
        return 0;
    case FG_CLASS_BINARY:
        if (op->operand != FG_OPERAND_PARAM)
            return 0; /* a value operand: check_value_layout, once it is resolved */
        return op_fail(c, "param", "'%s' comes after the shape op %s (line %d): a parameter broadcasts against the "
                                   "layout before the shape op, not the reshaped one; apply this op before the %s",
                       op->param_name, fg_op_written_name(shape_op), shape_op->line, fg_op_written_name(shape_op));
    case FG_CLASS_NORM:
        what = "a normalization";
        break;
    case FG_CLASS_REDUCE:
        what = "a reduction";
        break;
    case FG_CLASS_SOFTMAX:
        what = "a softmax";
        break;
    case FG_CLASS_POOL:
        what = "a pooling";
        break;
    }
    return op_fail(c, NULL, "comes after the shape op %s (line %d): %s over reshaped dims is not supported (the "
                            "kernels index every value after a shape op in the layout before it); apply it before "
                            "the %s. Only elementwise ops and shape ops may follow a shape op",
                   fg_op_written_name(shape_op), shape_op->line, what, fg_op_written_name(shape_op));
}

/* A value operand after a shape op must be laid out as the op's input (the kernels read it
 * at the same coordinates): a value at or after the first shape op is; one before it only
 * when its shape is that layout. */
static int check_value_layout(infer_ctx *c, const fg_op *op, int k, int first_shape)
{
    char a[128], b[128];
    const fg_shape *mine = fg_value_layout(c->ir, k - 1), *theirs = fg_value_layout(c->ir, op->operand_value);
    if (fg_shape_same(mine, theirs))
        return 0;
    const fg_op *s = &c->ir->ops[first_shape];
    return op_fail(c, "value", "'%s' is from before the shape op %s (line %d) and laid out as %s, but the values "
                               "after it are laid out as %s; name a value at or after the %s",
                   op->value_name, fg_op_written_name(s), s->line, fg_shape_str(theirs, a, sizeof a),
                   fg_shape_str(mine, b, sizeof b), fg_op_written_name(s));
}

/* The prologue (ops before the conv, the spec loader kept only the registry's `prologue`
 * ones): each reads and produces the input's shape. The planner gathers at most one
 * statistic over the input before the conv pass. */
static int infer_prologue(infer_ctx *c)
{
    fg_layer_ir *ir = c->ir;
    int stats = -1;
    for (int j = 0; j < ir->n_pro; j++) {
        fg_op *op = &ir->pro[j];
        const fg_shape *in = &ir->input;
        c->op = op;
        op->in = *in;
        int rc = 0;
        switch (fg_op_kind_class(op->kind)) {
        case FG_CLASS_UNARY:
            op->out = *in;
            break;
        case FG_CLASS_BINARY:
            rc = infer_binary(c, op, in, 0);
            break;
        case FG_CLASS_NORM:
            rc = infer_norm(c, op, in);
            if (!rc && fg_op_stats(op)) {
                if (stats >= 0)
                    return op_fail(c, NULL, "a second normalization with statistics before the convolution (the "
                                            "first is line %d): a prologue gathers one statistic over the input",
                                   ir->pro[stats].line);
                stats = j;
            }
            break;
        case FG_CLASS_CONV:
        case FG_CLASS_REDUCE:
        case FG_CLASS_SOFTMAX:
        case FG_CLASS_POOL:
        case FG_CLASS_SHAPE: /* the spec loader refuses these first (fg_op_def.prologue) */
            return op_fail(c, NULL, "cannot come before the convolution");
        }
        if (rc)
            return -1;
    }
    return 0;
}

int fg_infer_shapes(fg_layer_ir *ir, fg_error *err)
{
    infer_ctx c = {.ir = ir, .err = err};
    if (ir->n_ops == 0 || fg_op_kind_class(ir->ops[0].kind) != FG_CLASS_CONV) {
        int line = ir->n_ops ? ir->ops[0].line : 0;
        return fg_fail(err, "%s:%d: the first op must be conv2d or conv3d (the anchor of the layer)", ir->file, line);
    }
    {
        fg_op dummy = {.kind = FG_OP_CONV2D, .line = ir->ops[0].line};
        c.op = &dummy;
        if (check_size(&c, &ir->input, "the layer input"))
            return -1;
    }
    if (infer_prologue(&c))
        return -1;
    int first_shape = -1; /* the first shape op */
    for (int k = 0; k < ir->n_ops; k++) {
        fg_op *op = &ir->ops[k];
        const fg_shape *in = k == 0 ? &ir->input : &ir->ops[k - 1].out;
        c.op = op;
        op->in = *in;
        if (first_shape >= 0 && check_after_shape_op(&c, op, &ir->ops[first_shape]))
            return -1;
        int rc = 0;
        switch (fg_op_kind_class(op->kind)) {
        case FG_CLASS_CONV:
            if (k > 0)
                return op_fail(&c, NULL, "only the first op may be a convolution");
            rc = infer_conv(&c, op, in);
            break;
        case FG_CLASS_UNARY:
            op->out = *in;
            break;
        case FG_CLASS_BINARY:
            rc = infer_binary(&c, op, in, k);
            break;
        case FG_CLASS_NORM:
            rc = infer_norm(&c, op, in);
            break;
        case FG_CLASS_REDUCE:
        case FG_CLASS_SOFTMAX:
            rc = infer_reduce(&c, op, in);
            break;
        case FG_CLASS_POOL:
            rc = infer_pool(&c, op, in);
            break;
        case FG_CLASS_SHAPE:
            rc = infer_shape_op[op->kind] ? infer_shape_op[op->kind](&c, op, in)
                                          : op_fail(&c, NULL, "has no shape rule in gen/shape_infer.c");
            if (first_shape < 0)
                first_shape = k;
            break;
        }
        if (rc || check_size(&c, &op->out, "its output"))
            return -1;
        if (first_shape >= 0 && k > first_shape && op->operand == FG_OPERAND_VALUE &&
            check_value_layout(&c, op, k, first_shape))
            return -1;
        if (op->as[0]) {
            for (int j = 0; j < k; j++)
                if (!strcmp(ir->ops[j].as, op->as))
                    return op_fail(&c, "as", "'%s' already names the value of line %d", op->as, ir->ops[j].line);
        }
    }
    /* layout "channels_last" puts the output's dim 1 last: the output must still be (N, C,
     * spatial...) as the input is -- the input's rank, no shape op (flatten, view, squeeze,
     * unsqueeze) on the way. A reduction with keepdim keeps that form (a dim of 1). */
    if (ir->layout == FG_LAYOUT_CHANNELS_LAST) {
        const fg_op *last = &ir->ops[ir->n_ops - 1];
        char shape[128];
        if (first_shape >= 0)
            return fg_fail(err, "%s:%d: layout \"channels_last\": the layer output has no channel dim to put last after "
                                "%s (a shape op); use layout \"nchw\" or end the layer before it",
                           ir->file, ir->ops[first_shape].line, fg_op_written_name(&ir->ops[first_shape]));
        if (last->out.rank != ir->input.rank)
            return fg_fail(err, "%s:%d: layout \"channels_last\": the layer output %s has no channel dim to put last "
                                "(rank %d, the input's is %d: reduce with keepdim = true, or use layout \"nchw\")",
                           ir->file, last->line, fg_shape_str(&last->out, shape, sizeof shape), last->out.rank,
                           ir->input.rank);
    }
    return 0;
}
