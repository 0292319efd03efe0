/* SPDX-License-Identifier: Apache-2.0 */
/* Blocks (gen/block.h): what is not loading (gen/spec_loader.c reads and wires them). */
#include "block.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_registry.h"
#include "planner.h"

void fg_block_ir_free(fg_block_ir *b)
{
    free(b->layers);
    b->layers = NULL;
    b->n_layers = 0;
}

bool fg_block_param_first_use(const fg_block_ir *b, int layer, int param)
{
    const fg_param *mine = &b->layers[layer].params[param];
    if (mine->batched)
        return false;
    for (int m = 0; m <= layer; m++)
        for (int j = 0; j < (m < layer ? b->layers[m].n_params : param); j++)
            if (!b->layers[m].params[j].batched && !strcmp(b->layers[m].params[j].name, mine->name))
                return false;
    return true;
}

/* Whether norm op's statistics (a prologue's, on its input) can come from the layer writing
 * that input: one set per sample and channel group over every spatial position, so that every
 * output of a channel adds into one key (what a conv epilogue's per-channel partials gather). */
static bool linkable_norm(const fg_op *op)
{
    if (fg_op_kind_class(op->kind) != FG_CLASS_NORM || !fg_op_stats(op))
        return false;
    fg_stat_layout L;
    fg_norm_stat_layout(op, &L);
    return !L.over_batch && L.whole_channels;
}

static bool same_statistics(const fg_op *a, const fg_op *b)
{
    fg_stat_layout x, y;
    fg_norm_stat_layout(a, &x);
    fg_norm_stat_layout(b, &y);
    return fg_op_stats(a) == fg_op_stats(b) && x.channel_group == y.channel_group && x.mask == y.mask &&
           fg_shape_same(&a->in, &b->in);
}

void fg_block_link_statistics(fg_block_ir *b)
{
    for (int i = 0; i < b->n_layers; i++) {
        fg_layer_ir *reader = &b->layers[i];
        int w = b->tensors[b->layer[i].from].layer; /* in run order, before layer i */
        if (w < 0 || reader->n_pro == 0 || !linkable_norm(&reader->pro[0]))
            continue;
        fg_layer_ir *src = &b->layers[w];
        /* not resident (one kernel that keeps its output in shared memory), and an output laid
         * out as it is shaped (no view at the end: the kernels index the value before it) */
        if (src->strategy == FG_STRATEGY_RESIDENT ||
            !fg_shape_same(fg_value_layout(src, src->n_ops - 1), &src->ops[src->n_ops - 1].out))
            continue;
        if (src->exports_stats && !same_statistics(&src->export_norm, &reader->pro[0]))
            continue;
        src->exports_stats = true;
        src->export_norm = reader->pro[0];
        reader->pro_stats_given = true;
    }
}

int fg_block_stats_from(const fg_block_ir *b, int i)
{
    return b->layers[i].pro_stats_given ? b->tensors[b->layer[i].from].layer : -1;
}

int64_t fg_block_stats_sample_bytes(const fg_block_ir *b, int i)
{
    const fg_layer_ir *ir = &b->layers[i];
    if (!ir->exports_stats)
        return 0;
    fg_stat_layout L;
    fg_norm_stat_layout(&ir->export_norm, &L);
    const fg_reduce_def *r = fg_op_stats(&ir->export_norm);
    return L.keys_per_sample * (int64_t)fg_accum_defs[r->accums[0]].bytes_per_key;
}

const char *fg_block_ir_layer_name(const fg_block_ir *b, int i)
{
    if (b->single)
        return b->layers[0].name;
    return b->tensors[b->layer[i].out].name;
}

void fg_block_print(const fg_block_ir *b, void (*emit)(void *ctx, const char *line), void *ctx)
{
    char line[1024], shape[128];
    snprintf(line, sizeof line, "block %s (%s): %d layers, run in this order", b->name, b->file, b->n_layers);
    emit(ctx, line);
    /* (only when not the default: an fp32 NC(D)HW block prints what it always has) */
    if (b->dtype != FG_DTYPE_FP32 || b->layout != FG_LAYOUT_NCHW) {
        snprintf(line, sizeof line,
                 "  dtype %s, layout %s: every tensor of the block (the inputs, the output, the tensors between "
                 "layers, the tensor operands); parameters float32",
                 fg_dtype_name(b->dtype), fg_layout_name(b->layout));
        emit(ctx, line);
    }
    for (int t = 0; t < b->n_inputs; t++) {
        fg_shape_str(&b->tensors[t].shape, shape, sizeof shape);
        snprintf(line, sizeof line, "  input  %-12s %s", b->tensors[t].name, shape);
        emit(ctx, line);
    }
    for (int i = 0; i < b->n_layers; i++) {
        const fg_layer_ir *ir = &b->layers[i];
        char reads[512] = "";
        for (int p = 0; p < ir->n_params; p++)
            if (ir->params[p].batched)
                snprintf(reads + strlen(reads), sizeof reads - strlen(reads), "%s%s", reads[0] ? ", " : " + tensor ",
                         ir->params[p].name);
        snprintf(line, sizeof line, "  layer  %-12s %s <- %s%s   (line %d)", fg_block_ir_layer_name(b, i),
                 fg_shape_str(&b->tensors[b->layer[i].out].shape, shape, sizeof shape),
                 b->tensors[b->layer[i].from].name, reads, b->layer[i].line);
        emit(ctx, line);
        if (b->layer[i].moved_ops > 0) {
            const fg_op *first = &ir->pro[0], *last = &ir->pro[b->layer[i].moved_ops - 1];
            const char *w = b->tensors[b->layer[i].from].name;
            snprintf(line, sizeof line,
                     "         its prologue pro0..pro%d (%s .. %s, line %d%s) moved here from the end of layer %s, "
                     "whose output only this layer reads: %s stores the value before them",
                     b->layer[i].moved_ops - 1, fg_op_written_name(first), fg_op_written_name(last), first->line,
                     last->line != first->line ? "ff." : "", w, w);
            emit(ctx, line);
        }
    }
    snprintf(line, sizeof line, "  output %-12s %s", b->tensors[b->output].name,
             fg_shape_str(&b->tensors[b->output].shape, shape, sizeof shape));
    emit(ctx, line);
}
