/* SPDX-License-Identifier: Apache-2.0 */
#include "ir.h"

#include "op_registry.h"

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

bool fg_shape_same(const fg_shape *a, const fg_shape *b)
{
    bool same = a->rank == b->rank;
    for (int d = 1; same && d < a->rank; d++)
        same = a->dim[d] == b->dim[d];
    return same;
}

const fg_shape *fg_value_layout(const fg_layer_ir *ir, int k)
{
    for (int j = 1; j <= k; j++)
        if (fg_op_kind_class(ir->ops[j].kind) == FG_CLASS_SHAPE)
            return &ir->ops[j].in;
    return &ir->ops[k].out;
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
    const fg_norm_def *norm = &fg_op_def_of(op->kind)->norm;
    memset(out, 0, sizeof *out);
    switch (norm->channels) {
    case FG_NORM_GROUPS:
        out->channel_group = channels / op->groups;
        break;
    case FG_NORM_EACH:
        out->channel_group = 1;
        break;
    case FG_NORM_TRAILING:
        /* the trailing dims; when those include the channels, all of them share the statistic */
        out->channel_group = op->normalized_rank >= s->rank - 1 ? channels : 1;
        break;
    case FG_NORM_ACROSS:
        /* one statistic per position, over all its channels */
        out->channel_group = channels;
        break;
    }
    out->over_batch = norm->over_batch;
    for (int d = 2; d < s->rank; d++) {
        bool reduced = norm->channels == FG_NORM_TRAILING ? d >= s->rank - op->normalized_rank
                                                          : norm->channels != FG_NORM_ACROSS;
        if (reduced)
            out->mask |= 1u << d;
    }
    out->whole_channels = true;
    for (int d = 2; d < s->rank; d++)
        out->whole_channels = out->whole_channels && (out->mask & (1u << d));
    out->per_position = out->mask == 0 && out->channel_group == channels;
    out->keys_per_sample = channels / out->channel_group;
    out->count_per_sample = out->channel_group;
    for (int d = 2; d < s->rank; d++) {
        if (out->mask & (1u << d))
            out->count_per_sample *= s->dim[d];
        else
            out->keys_per_sample *= s->dim[d];
    }
}

#define APPEND(...) \
    (*len += (size_t)snprintf(buf + *len, *len < cap ? cap - *len : 0, __VA_ARGS__), *len = *len < cap ? *len : cap)

/* One registry field as `fusegen plan` shows it. */
static void describe_field(const fg_layer_ir *ir, const fg_op *op, const fg_field *f, char *buf, size_t cap,
                           size_t *len)
{
    const char *base = (const char *)op;
    if (f->describe == FG_DESCRIBE_NONE)
        return;
    switch (f->type) {
    case FG_FIELD_NAME:
        if (f->describe == FG_DESCRIBE_MODULE)
            APPEND(" %s:", base + f->member);
        else
            APPEND(" %s=%s", f->name, base + f->member);
        break;
    case FG_FIELD_INT:
        APPEND(" %s=%" PRId64, f->name, *(const int64_t *)(base + f->member));
        break;
    case FG_FIELD_NUMBER:
        APPEND(" %s=%g", f->name, *(const double *)(base + f->member));
        break;
    case FG_FIELD_OPT_NUMBER:
        if (*(const bool *)(base + f->flag))
            APPEND(" %s=%g", f->name, *(const double *)(base + f->member));
        break;
    case FG_FIELD_BOOL: {
        bool v = *(const bool *)(base + f->member);
        if (f->describe == FG_DESCRIBE_BARE) {
            if (v)
                APPEND(" %s", f->name);
        } else {
            APPEND(" %s=%s", f->name, v ? "on" : "off");
        }
        break;
    }
    case FG_FIELD_CHOICE:
        APPEND(" %s=%s", f->name, f->choices[*(const int *)(base + f->member)]);
        break;
    case FG_FIELD_SPATIAL: {
        const int *v = (const int *)(base + f->member);
        APPEND(" %s=", f->name);
        for (int i = 0; i < op->spatial; i++)
            APPEND("%s%d", i ? "x" : "", v[i]);
        break;
    }
    case FG_FIELD_INT_LIST: {
        const int64_t *v = (const int64_t *)(base + f->member);
        APPEND(" %s={", f->name);
        for (int i = 0; i < *(const int *)(base + f->flag); i++)
            APPEND("%s%" PRId64, i ? "," : "", v[i]);
        APPEND("}");
        break;
    }
    case FG_FIELD_SHAPE: {
        const int64_t *v = (const int64_t *)(base + f->member);
        APPEND(" %s={", f->name);
        for (int i = 0; i < *(const int *)(base + f->flag); i++) {
            if (i == 0 && v[i] == FG_VIEW_BATCH)
                APPEND("N");
            else
                APPEND("%s%" PRId64, i ? "," : "", v[i]);
        }
        APPEND("}");
        break;
    }
    case FG_FIELD_DIMS:
        APPEND(" dims={");
        for (int d = 1, first = 1; d < FG_MAX_RANK; d++)
            if (op->reduce_mask & (1u << d)) {
                APPEND("%s%d", first ? "" : ",", d);
                first = 0;
            }
        APPEND("}");
        break;
    case FG_FIELD_OPERAND:
        if (op->operand == FG_OPERAND_SCALAR)
            APPEND(" scalar %.9g", op->scalar);
        else if (op->operand == FG_OPERAND_PARAM && op->tensor_operand)
            APPEND(" tensor %s", ir->params[op->operand_param].name);
        else if (op->operand == FG_OPERAND_PARAM)
            APPEND(" param %s", ir->params[op->operand_param].name);
        else
            APPEND(" value %s (op %d)", ir->ops[op->operand_value].as, op->operand_value);
        break;
    }
}

static void describe_op(const fg_layer_ir *ir, const fg_op *op, char *buf, size_t cap)
{
    size_t n = 0, *len = &n;
    const fg_op_def *d = fg_op_def_of(op->kind);
    APPEND("%s", d->name);
    for (int i = 0; i < FG_MAX_FIELDS && d->fields[i].name; i++)
        describe_field(ir, op, &d->fields[i], buf, cap, len);
    if (op->as[0])
        APPEND(" as %s", op->as);
}
#undef APPEND

const char *fg_dtype_name(fg_dtype dtype)
{
    return dtype == FG_DTYPE_BF16 ? "bf16" : dtype == FG_DTYPE_FP16 ? "fp16" : "fp32";
}

int fg_dtype_size(fg_dtype dtype)
{
    return dtype == FG_DTYPE_FP32 ? 4 : 2;
}

const char *fg_layout_name(fg_layout layout)
{
    return layout == FG_LAYOUT_CHANNELS_LAST ? "channels_last" : "nchw";
}

void fg_ir_print(const fg_layer_ir *ir, void (*emit)(void *ctx, const char *line), void *ctx)
{
    char line[1024], shape[128], desc[512];
    /* the dtype only when it is not the default: fp32 plans print as they always have */
    snprintf(line, sizeof line, "layer %s (%s, precision %s%s%s%s)", ir->name, ir->file,
             ir->precision == FG_PRECISION_TF32 ? "tf32" : "fp32", ir->dtype != FG_DTYPE_FP32 ? ", dtype " : "",
             ir->dtype != FG_DTYPE_FP32 ? fg_dtype_name(ir->dtype) : "",
             ir->layout == FG_LAYOUT_CHANNELS_LAST ? ", layout channels_last" : "");
    emit(ctx, line);
    snprintf(line, sizeof line, "  input      %s", fg_shape_str(&ir->input, shape, sizeof shape));
    emit(ctx, line);
    /* the prologue: applied to the input where the conv stages it (no value of its own) */
    for (int j = 0; j < ir->n_pro; j++) {
        describe_op(ir, &ir->pro[j], desc, sizeof desc);
        snprintf(line, sizeof line, "  pro%-2d %-36s -> %s   (line %d)", j, desc,
                 fg_shape_str(&ir->pro[j].out, shape, sizeof shape), ir->pro[j].line);
        emit(ctx, line);
    }
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

static void add_ignored(const fg_layer_ir *ir, fg_ignored_state *out, int *n, const char *module, const char *leaf,
                        int rank, int64_t dim, bool int64)
{
    char name[sizeof out->name];
    snprintf(name, sizeof name, "%s.%s", module, leaf);
    for (int i = 0; i < ir->n_params; i++)
        if (strcmp(ir->params[i].name, name) == 0)
            return; /* a parameter of the layer after all (a batch_norm of the same name on running statistics) */
    for (int i = 0; i < *n; i++)
        if (strcmp(out[i].name, name) == 0)
            return;
    fg_ignored_state *e = &out[(*n)++];
    memcpy(e->name, name, sizeof name);
    e->rank = rank;
    e->dim = dim;
    e->int64 = int64;
}

int fg_ir_ignored_state(const fg_layer_ir *ir, fg_ignored_state out[FG_MAX_IGNORED_STATE])
{
    int n = 0;
    for (int k = 0; k < ir->n_pro + ir->n_ops; k++) {
        const fg_op *op = k < ir->n_pro ? &ir->pro[k] : &ir->ops[k - ir->n_pro];
        if (op->kind != FG_OP_BATCH_NORM)
            continue;
        if (!op->running_stats) {
            add_ignored(ir, out, &n, op->name, "running_mean", 1, op->in.dim[1], false);
            add_ignored(ir, out, &n, op->name, "running_var", 1, op->in.dim[1], false);
        }
        add_ignored(ir, out, &n, op->name, "num_batches_tracked", 0, 1, true);
    }
    return n;
}
