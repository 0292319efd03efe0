#include "ir.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int64_t fg_shape_sample_count(const fg_shape *s)
{
    int64_t n = 1;
    for (int d = 1; d < s->rank; d++)
        n *= s->dim[d]; /* shape inference has already checked this cannot overflow */
    return n;
}

const char *fg_shape_str(const fg_shape *s, char *buf, int cap)
{
    int len = snprintf(buf, (size_t)cap, "[N");
    for (int d = 1; d < s->rank && len < cap; d++)
        len += snprintf(buf + len, (size_t)(cap - len), ", %" PRId64, s->dim[d]);
    if (len < cap)
        snprintf(buf + len, (size_t)(cap - len), "]");
    return buf;
}

void fg_norm_stat_layout(const fg_op *op, fg_stat_layout *out)
{
    const fg_shape *s = &op->in;
    int64_t channels = s->dim[1];
    memset(out, 0, sizeof *out);
    switch (op->kind) {
    case FG_OP_GROUP_NORM:
        out->channel_group = channels / op->groups;
        break;
    case FG_OP_INSTANCE_NORM:
        out->channel_group = 1;
        break;
    case FG_OP_BATCH_NORM:
        out->channel_group = 1;
        out->over_batch = true;
        break;
    case FG_OP_LAYER_NORM:
        /* Normalizes the trailing dims; when those include the channels, all of them share
         * the statistic. */
        out->channel_group = op->normalized_rank >= s->rank - 1 ? channels : 1;
        break;
    default:
        return;
    }
    for (int d = 2; d < s->rank; d++) {
        bool reduced = op->kind != FG_OP_LAYER_NORM || d >= s->rank - op->normalized_rank;
        if (reduced)
            out->mask |= 1u << d;
    }
    out->keys_per_sample = channels / out->channel_group;
    out->count_per_sample = out->channel_group;
    for (int d = 2; d < s->rank; d++) {
        if (out->mask & (1u << d))
            out->count_per_sample *= s->dim[d];
        else
            out->keys_per_sample *= s->dim[d];
    }
}

static void describe_op(const fg_layer_ir *ir, const fg_op *op, char *buf, size_t cap)
{
    size_t len = 0;
#define APPEND(...) \
    (len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, __VA_ARGS__), len = len < cap ? len : cap)
    APPEND("%s", fg_op_kind_name(op->kind));
    switch (fg_op_kind_class(op->kind)) {
    case FG_CLASS_CONV:
        APPEND(" %s: out_channels=%" PRId64 " kernel=", op->name, op->out_channels);
        for (int i = 0; i < op->spatial; i++)
            APPEND("%s%d", i ? "x" : "", op->kernel[i]);
        APPEND(" stride=");
        for (int i = 0; i < op->spatial; i++)
            APPEND("%s%d", i ? "x" : "", op->stride[i]);
        APPEND(" padding=");
        for (int i = 0; i < op->spatial; i++)
            APPEND("%s%d", i ? "x" : "", op->padding[i]);
        APPEND(" dilation=");
        for (int i = 0; i < op->spatial; i++)
            APPEND("%s%d", i ? "x" : "", op->dilation[i]);
        APPEND(" groups=%" PRId64 " bias=%s", op->groups, op->bias ? "on" : "off");
        break;
    case FG_CLASS_BINARY:
        if (op->operand == FG_OPERAND_SCALAR)
            APPEND(" scalar %.9g", op->scalar);
        else if (op->operand == FG_OPERAND_PARAM)
            APPEND(" param %s", ir->params[op->operand_param].name);
        else
            APPEND(" value %s (op %d)", ir->ops[op->operand_value].as, op->operand_value);
        break;
    case FG_CLASS_NORM:
        APPEND(" %s: eps=%g affine=%s", op->name, op->eps, op->affine ? "on" : "off");
        if (op->kind == FG_OP_GROUP_NORM)
            APPEND(" groups=%" PRId64, op->groups);
        if (op->kind == FG_OP_BATCH_NORM)
            APPEND(" stats=%s", op->running_stats ? "running" : "batch");
        if (op->kind == FG_OP_LAYER_NORM)
            APPEND(" normalized_dims=%d", op->normalized_rank);
        break;
    case FG_CLASS_REDUCE:
    case FG_CLASS_SOFTMAX:
        APPEND(" dims={");
        for (int d = 1, first = 1; d < FG_MAX_RANK; d++)
            if (op->reduce_mask & (1u << d)) {
                APPEND("%s%d", first ? "" : ",", d);
                first = 0;
            }
        APPEND("}%s", op->keepdim ? " keepdim" : "");
        break;
    case FG_CLASS_POOL:
        APPEND(" kernel=");
        for (int i = 0; i < op->in.rank - 2; i++)
            APPEND("%s%d", i ? "x" : "", op->kernel[i]);
        APPEND(" stride=");
        for (int i = 0; i < op->in.rank - 2; i++)
            APPEND("%s%d", i ? "x" : "", op->stride[i]);
        break;
    case FG_CLASS_UNARY:
        if (op->kind == FG_OP_CLAMP || op->kind == FG_OP_HARDTANH) {
            if (op->has_lo)
                APPEND(" min=%g", op->lo);
            if (op->has_hi)
                APPEND(" max=%g", op->hi);
        } else if (op->kind == FG_OP_LEAKY_RELU) {
            APPEND(" negative_slope=%g", op->alpha);
        } else if (op->kind == FG_OP_SOFTPLUS) {
            APPEND(" beta=%g threshold=%g", op->beta, op->threshold);
        } else if (op->kind == FG_OP_GELU) {
            APPEND(" approximate=%s", op->gelu_tanh ? "tanh" : "none");
        }
        break;
    }
    if (op->as[0])
        APPEND(" as %s", op->as);
#undef APPEND
}

void fg_ir_print(const fg_layer_ir *ir, void (*emit)(void *ctx, const char *line), void *ctx)
{
    char line[1024], shape[128], desc[512];
    snprintf(line, sizeof line, "layer %s (%s, precision %s)", ir->name, ir->file,
             ir->precision == FG_PRECISION_TF32 ? "tf32" : "fp32");
    emit(ctx, line);
    snprintf(line, sizeof line, "  input      %s", fg_shape_str(&ir->input, shape, sizeof shape));
    emit(ctx, line);
    for (int k = 0; k < ir->n_ops; k++) {
        describe_op(ir, &ir->ops[k], desc, sizeof desc);
        snprintf(line, sizeof line, "  v%-2d = %-36s -> %s   (line %d)", k, desc,
                 fg_shape_str(&ir->ops[k].out, shape, sizeof shape), ir->ops[k].line);
        emit(ctx, line);
    }
    for (int i = 0; i < ir->n_params; i++) {
        const fg_param *p = &ir->params[i];
        int len = snprintf(line, sizeof line, "  param %-24s [", p->name);
        for (int d = 0; d < p->rank; d++)
            len += snprintf(line + len, sizeof line - (size_t)len, "%s%" PRId64, d ? ", " : "", p->dim[d]);
        snprintf(line + len, sizeof line - (size_t)len, "]");
        emit(ctx, line);
    }
}
