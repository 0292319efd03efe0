/* SPDX-License-Identifier: Apache-2.0 */
#include "render.h"

#include <assert.h>
#include <lauxlib.h>
#include <pthread.h>
#include <lualib.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedded.h"
#include "op_registry.h"

/* ---- embedded modules ---------------------------------------------------------------- */

static const fg_embedded_file *find_embedded(const char *path)
{
    for (int i = 0; i < fg_embedded_file_count; i++)
        if (strcmp(fg_embedded_files[i].path, path) == 0)
            return &fg_embedded_files[i];
    return NULL;
}

/* import("name") loads templates/name.lua once and returns its value. */
static int lua_import(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, "fusegen.modules");
    lua_getfield(L, -1, name);
    if (!lua_isnil(L, -1))
        return 1;
    lua_pop(L, 1);
    char path[128];
    snprintf(path, sizeof path, "%s.lua", name);
    const fg_embedded_file *f = find_embedded(path);
    if (!f)
        return luaL_error(L, "template module '%s' is not embedded", name);
    char chunk[160];
    snprintf(chunk, sizeof chunk, "@templates/%s", path);
    if (luaL_loadbufferx(L, f->data, f->size, chunk, "t") != LUA_OK)
        return lua_error(L);
    lua_call(L, 0, 1);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
    return 1;
}

/* ---- pushing the IR and the plan --------------------------------------------------------- */

static void set_int(lua_State *L, const char *k, long long v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void set_bool(lua_State *L, const char *k, bool v)
{
    lua_pushboolean(L, v);
    lua_setfield(L, -2, k);
}

static void set_str(lua_State *L, const char *k, const char *v)
{
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}

/* A 0-based array of integers. */
static void push_int_array(lua_State *L, const int64_t *v, int n)
{
    lua_createtable(L, n, 1);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, v[i]);
        lua_rawseti(L, -2, i);
    }
    set_int(L, "n", n);
}

static void set_int3(lua_State *L, const char *k, const int *v, int n)
{
    int64_t t[3] = {v[0], v[1], v[2]};
    push_int_array(L, t, n);
    lua_setfield(L, -2, k);
}

static void push_shape(lua_State *L, const fg_shape *s)
{
    lua_createtable(L, 0, 3);
    set_int(L, "rank", s->rank);
    push_int_array(L, s->dim, s->rank);
    lua_setfield(L, -2, "dim");
    set_int(L, "sample", fg_shape_sample_count(s));
}

static const char *const kind_enum_names[] = {
#define FG_X(kind) #kind,
    FG_OP_KINDS(FG_X)
#undef FG_X
};
static_assert(sizeof kind_enum_names / sizeof *kind_enum_names == FG_OP_KIND_COUNT, "one name per kind");

static const char *const class_names[] = {"conv", "unary", "binary", "norm", "reduce", "softmax", "pool", "shape"};
static const char *const norm_channel_names[] = {"groups", "each", "trailing", "across"};

/* An optional string field (nil when NULL). */
static void set_opt_str(lua_State *L, const char *k, const char *v)
{
    if (v)
        set_str(L, k, v);
}

/* The registry's fields of an op, by spec name, as `op.f` (and `op.given` for optional
 * ones): what the CUDA snippets' placeholders name. */
static void push_fields(lua_State *L, const fg_op *op, const fg_op_def *d)
{
    const char *base = (const char *)op;
    lua_createtable(L, 0, FG_MAX_FIELDS);
    lua_createtable(L, 0, 2); /* given */
    for (int i = 0; i < FG_MAX_FIELDS && d->fields[i].name; i++) {
        const fg_field *f = &d->fields[i];
        switch (f->type) {
        case FG_FIELD_INT:
            lua_pushinteger(L, *(const int64_t *)(base + f->member));
            break;
        case FG_FIELD_NUMBER:
        case FG_FIELD_OPT_NUMBER:
            lua_pushnumber(L, *(const double *)(base + f->member));
            if (f->type == FG_FIELD_OPT_NUMBER) {
                lua_pushboolean(L, *(const bool *)(base + f->flag));
                lua_setfield(L, -3, f->name);
            }
            break;
        case FG_FIELD_BOOL:
            lua_pushboolean(L, *(const bool *)(base + f->member));
            break;
        case FG_FIELD_NAME:
            lua_pushstring(L, base + f->member);
            break;
        case FG_FIELD_CHOICE:
            lua_pushstring(L, f->choices[*(const int *)(base + f->member)]);
            break;
        case FG_FIELD_SPATIAL: {
            const int *v = (const int *)(base + f->member);
            int64_t t[3] = {v[0], v[1], v[2]};
            push_int_array(L, t, 3);
            break;
        }
        case FG_FIELD_INT_LIST:
        case FG_FIELD_SHAPE: /* view: no template reads it (the shape is out_shape) */
            push_int_array(L, (const int64_t *)(base + f->member), *(const int *)(base + f->flag));
            break;
        case FG_FIELD_DIMS:    /* resolved into reduce_mask by shape inference */
        case FG_FIELD_OPERAND: /* resolved into the operand fields below */
            continue;
        }
        lua_setfield(L, -3, f->name);
    }
    lua_setfield(L, -2, "given");
    lua_setfield(L, -2, "f");
}

static void push_accum_list(lua_State *L, const fg_reduce_def *r)
{
    lua_createtable(L, r->n_accums, 0);
    for (int i = 0; i < r->n_accums; i++) {
        lua_pushstring(L, fg_accum_defs[r->accums[i]].name);
        lua_rawseti(L, -2, i + 1);
    }
}

/* The op's semantics from the registry: `cuda` (snippet steps), `reduce` (inline loop and
 * accumulators), `has_stats` (whether it reads a finalized statistic), `norm_channels`. */
static void push_semantics(lua_State *L, const fg_op *op, const fg_op_def *d)
{
    lua_createtable(L, FG_MAX_SNIPPET_STEPS, 0);
    for (int i = 0; i < FG_MAX_SNIPPET_STEPS && d->cuda[i].text; i++) {
        lua_createtable(L, 0, 2);
        set_opt_str(L, "guard", d->cuda[i].guard);
        set_str(L, "text", d->cuda[i].text);
        set_opt_str(L, "fast", d->cuda[i].fast);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "cuda");
    if (d->reduce) {
        lua_createtable(L, 0, 5);
        set_opt_str(L, "init", d->reduce->init);
        set_opt_str(L, "step", d->reduce->step);
        set_opt_str(L, "final", d->reduce->final);
        set_opt_str(L, "read", d->reduce->read);
        push_accum_list(L, d->reduce);
        lua_setfield(L, -2, "accums");
        lua_setfield(L, -2, "reduce");
    }
    set_bool(L, "has_stats", fg_op_stats(op) != NULL);
    if (d->cls == FG_CLASS_NORM)
        set_str(L, "norm_channels", norm_channel_names[d->norm.channels]);
}

static void push_op_at(lua_State *L, const fg_op *op, const fg_shape *in, const fg_shape *out, const fg_bn_fold *fold,
                       int k);

/* Op k as the templates see it. Its shapes are the layouts the kernels index values by
 * (fg_value_layout): a shape op is the identity there, in the layout before it. With a
 * batch_norm folded into the conv (gen/fold.h), the conv reads the folded weight and bias and
 * the batch_norm is marked `folded` (the identity). */
static void push_op(lua_State *L, const fg_layer_ir *ir, const fg_bn_fold *fold, int k)
{
    push_op_at(L, &ir->ops[k], k == 0 ? &ir->ops[k].in : fg_value_layout(ir, k - 1), fg_value_layout(ir, k), fold, k);
}

/* An op with the shapes kernels index its input and output by; k its value (-1: a prologue op). */
static void push_op_at(lua_State *L, const fg_op *op, const fg_shape *in, const fg_shape *out, const fg_bn_fold *fold,
                       int k)
{
    const fg_op_def *d = fg_op_def_of(op->kind);
    lua_createtable(L, 0, 40);
    set_str(L, "kind", kind_enum_names[op->kind]);
    set_str(L, "spec_name", d->name);
    set_str(L, "class", class_names[d->cls]);
    set_int(L, "line", op->line);
    set_str(L, "name", op->name);
    set_str(L, "as", op->as);
    push_shape(L, in);
    lua_setfield(L, -2, "in_shape");
    push_shape(L, out);
    lua_setfield(L, -2, "out_shape");
    push_shape(L, &op->out); /* the value's shape as the spec means it: for people */
    lua_setfield(L, -2, "shape");
    push_fields(L, op, d);
    push_semantics(L, op, d);
    /* what shape inference resolved: conv and pool geometry, the operand, parameters,
     * statistics and reduced dims */
    set_int(L, "spatial", op->spatial);
    set_int(L, "out_channels", op->out_channels);
    set_int(L, "groups", op->groups);
    set_int3(L, "kernel", op->kernel, 3);
    set_int3(L, "stride", op->stride, 3);
    set_int3(L, "padding", op->padding, 3);
    set_int3(L, "dilation", op->dilation, 3);
    bool into_conv = k == 0 && fold->op >= 0;
    set_bool(L, "bias", into_conv || op->bias);
    set_int(L, "weight_param", into_conv ? fold->folded_weight : op->weight_param);
    set_int(L, "bias_param", into_conv ? fold->folded_bias : op->bias_param);
    if (k >= 0 && k == fold->op)
        set_bool(L, "folded", true);
    static const char *const operand_names[] = {"none", "scalar", "param", "value"};
    set_str(L, "operand", operand_names[op->operand]);
    set_num(L, "scalar", op->scalar);
    set_int(L, "operand_param", op->operand_param);
    set_int(L, "operand_value", op->operand_value);
    set_num(L, "eps", op->eps);
    set_bool(L, "affine", op->affine);
    set_int(L, "normalized_rank", op->normalized_rank);
    set_int(L, "mean_param", op->mean_param);
    set_int(L, "var_param", op->var_param);
    set_int(L, "reduce_mask", op->reduce_mask);
    set_bool(L, "keepdim", op->keepdim);
    if (d->cls == FG_CLASS_NORM) {
        fg_stat_layout sl;
        fg_norm_stat_layout(op, &sl);
        lua_createtable(L, 0, 6);
        set_int(L, "mask", sl.mask);
        set_int(L, "channel_group", sl.channel_group);
        set_bool(L, "over_batch", sl.over_batch);
        set_bool(L, "per_position", sl.per_position);
        set_int(L, "keys_per_sample", sl.keys_per_sample);
        set_int(L, "count_per_sample", sl.count_per_sample);
        lua_setfield(L, -2, "stat");
    }
}

static void push_param(lua_State *L, const char *name, int rank, const int64_t *dim, int64_t count)
{
    lua_createtable(L, 0, 4);
    set_str(L, "name", name);
    set_int(L, "rank", rank);
    push_int_array(L, dim, rank);
    lua_setfield(L, -2, "dim");
    set_int(L, "count", count);
}

/* The accumulators (monoids) by name: what feed.lua and finalize.lua print for each. */
static void push_accum_defs(lua_State *L)
{
    lua_createtable(L, 0, FG_ACCUM_KIND_COUNT);
    for (int k = 0; k < FG_ACCUM_KIND_COUNT; k++) {
        const fg_accum_def *a = &fg_accum_defs[k];
        lua_createtable(L, 0, 13);
        set_str(L, "name", a->name);
        set_str(L, "ctype", a->ctype);
        set_int(L, "bytes_per_key", a->bytes_per_key);
        set_str(L, "identity", a->identity);
        set_str(L, "combine", a->combine);
        set_opt_str(L, "contribution", a->contribution);
        set_str(L, "flush", a->flush);
        set_str(L, "merge", a->merge);
        set_str(L, "feed", a->feed);
        set_bool(L, "extreme", a->extreme);
        set_bool(L, "needs_max", a->needs_max);
        set_bool(L, "shifted", a->shifted);
        set_opt_str(L, "finalize", a->finalize);
        lua_setfield(L, -2, a->name);
    }
}

static void push_ir(lua_State *L, const fg_layer_ir *ir, const fg_bn_fold *fold)
{
    lua_createtable(L, 0, 8);
    set_str(L, "name", ir->name);
    /* no "file": the source must not depend on the spec's path (plan aliases leave it out) */
    set_str(L, "precision", ir->precision == FG_PRECISION_TF32 ? "tf32" : "fp32");
    set_str(L, "dtype", fg_dtype_name(ir->dtype));
    set_str(L, "layout", fg_layout_name(ir->layout));
    push_shape(L, &ir->input);
    lua_setfield(L, -2, "input");
    set_int(L, "n_ops", ir->n_ops);
    lua_createtable(L, ir->n_ops, 1);
    for (int k = 0; k < ir->n_ops; k++) {
        push_op(L, ir, fold, k);
        lua_rawseti(L, -2, k);
    }
    lua_setfield(L, -2, "ops");
    /* the prologue (ops before the conv, each on the input's shape): pro[0..n_pro-1] */
    set_int(L, "n_pro", ir->n_pro);
    lua_createtable(L, ir->n_pro, 1);
    for (int j = 0; j < ir->n_pro; j++) {
        push_op_at(L, &ir->pro[j], &ir->input, &ir->input, fold, -1);
        lua_rawseti(L, -2, j);
    }
    lua_setfield(L, -2, "pro");
    /* the next layer's prologue norm whose statistics of the output this layer gathers (the
     * accumulator marked `exported`; gen/block.c links only outputs laid out as they are shaped) */
    if (ir->exports_stats) {
        const fg_shape *out = fg_value_layout(ir, ir->n_ops - 1);
        push_op_at(L, &ir->export_norm, out, out, fold, -1);
        lua_setfield(L, -2, "export_norm");
    }
    int n_params = fg_bn_fold_param_count(ir, fold);
    set_int(L, "n_params", n_params);
    lua_createtable(L, n_params, 1);
    for (int i = 0; i < ir->n_params; i++) {
        const fg_param *p = &ir->params[i];
        push_param(L, p->name, p->rank, p->dim, p->count);
        if (p->batched) /* a block tensor: indexed per sample (expr.lua, param_at) */
            set_bool(L, "batched", true);
        lua_rawseti(L, -2, i);
    }
    if (fold->op >= 0) {
        /* the folded tensors: the conv weight's shape, and one bias per output channel */
        const fg_param *w = &ir->params[fold->conv_weight];
        push_param(L, "(folded weight)", w->rank, w->dim, w->count);
        lua_rawseti(L, -2, fold->folded_weight);
        push_param(L, "(folded bias)", 1, &fold->channels, fold->channels);
        lua_rawseti(L, -2, fold->folded_bias);
    }
    lua_setfield(L, -2, "params");
}

static const char *const pass_kind_names[] = {"conv", "map", "finalize", "cudnn", "resident", "pack_input",
                                              "pack_weights", "pro_stats"};
static_assert(sizeof pass_kind_names / sizeof *pass_kind_names == FG_PASS_PRO_STATS + 1, "one name per pass kind");
static const char *const arg_kind_names[] = {"input",  "output", "buffer",     "param", "accum",
                                             "stats",  "batch",  "batch_base", "tmap"};
static_assert(sizeof arg_kind_names / sizeof *arg_kind_names == FG_ARG_TMAP + 1, "one name per argument kind");

/* The layer's wgmma tiling (fg_plan.wgmma), for templates/conv_wgmma.lua. */
static void push_wgmma(lua_State *L, const fg_wgmma_tiling *w)
{
    lua_createtable(L, 0, 30);
    set_int(L, "parts", w->parts);
    set_int(L, "a_parts", w->a_parts);
    set_int(L, "operand", w->operand);
    set_int(L, "kc_elems", w->kc_elems);
    set_int(L, "pack_xb", w->pack_xb);
    set_int(L, "pack_vec", w->pack_vec);
    set_int(L, "coord_bits", w->coord_bits);
    set_int(L, "w_elems", w->w_elems);
    set_int(L, "block_acc", w->block_acc);
    set_int(L, "multicast", w->multicast);
    set_int(L, "a_tma", w->a_tma);
    set_int(L, "ping_pong", w->ping_pong);
    set_int(L, "a_tma_rank", w->im2col.rank);
    set_int(L, "bn", w->bn);
    set_int(L, "nblk", w->nblk);
    set_int(L, "wgmt", w->wgmt);
    set_int(L, "bm", w->bm);
    set_int(L, "m_tiles", w->m_tiles);
    set_bool(L, "flat", w->flat);
    set_int(L, "cp", w->cp);
    set_int(L, "xc", w->xc);
    set_int(L, "kch", w->kch);
    set_int(L, "stages", w->stages);
    set_int(L, "a_bytes", w->a_bytes);
    set_int(L, "b_bytes", w->b_bytes);
    set_int(L, "stage_bytes", w->stage_bytes);
    set_int(L, "stat_offset", w->stat_offset);
    set_int(L, "stat_bytes", w->stat_bytes);
    set_int(L, "epi_offset", w->epi_offset);
    set_int(L, "epi_bytes", w->epi_bytes);
    set_int(L, "epi_rows", FG_WGMMA_EPI_ROWS);
    set_int(L, "epi_cols", FG_WGMMA_EPI_COLS);
    set_int(L, "epi_stride", w->epi_stride);
    set_int(L, "epi_unroll", w->epi_unroll);
    set_int(L, "res_param", w->res_param);
    set_int(L, "res_offset", w->res_offset);
    set_int(L, "res_bytes", w->res_bytes);
    set_int(L, "bar_offset", w->bar_offset);
    set_int(L, "consumer_regs", w->consumer_regs);
    set_int(L, "producer_regs", w->producer_regs);
    set_int(L, "ctas_per_sm", w->ctas_per_sm);
    set_int(L, "alternate", w->alternate);
    set_int(L, "flat_predicated", w->flat_predicated);
    set_int(L, "flat_rows_linear", w->flat_rows_linear);
    set_int(L, "base_regs", fg_wgmma_base_regs(w));
    set_int(L, "packed_hi", w->packed_hi);
    set_int(L, "packed_lo", w->packed_lo);
    set_int(L, "packed_w", w->packed_w);
    set_int(L, "split_k", w->split_k);
    set_int(L, "split_fill", w->split_fill);
    set_int(L, "split_counters", w->split_counters);
    set_int(L, "split_partials", w->split_partials);
    set_int(L, "split_slot", w->split_slot);
    set_int(L, "split_waves", w->split_waves);
    set_int(L, "split_sms", w->split_sms);
    set_int(L, "split_chunk_cost", w->split_chunk_cost);
    set_int(L, "split_partial_cost", w->split_partial_cost);
    set_int(L, "flag_offset", w->flag_offset);
}

static void push_plan(lua_State *L, const fg_plan *plan)
{
    lua_createtable(L, 0, 8);
    static const char *const strategies[] = {"materialize", "recompute", "resident", "channel_sums"};
    static_assert(sizeof strategies / sizeof *strategies == FG_STRATEGY_CHANNEL_SUMS + 1, "a strategy without a name");
    set_str(L, "strategy", strategies[plan->strategy]);
    set_bool(L, "fast_gelu", plan->fast_gelu);
    set_int(L, "n_passes", plan->n_passes);
    lua_createtable(L, plan->n_passes, 1);
    for (int i = 0; i < plan->n_passes; i++) {
        const fg_pass *ps = &plan->passes[i];
        lua_createtable(L, 0, 20);
        set_int(L, "index", i);
        set_str(L, "kind", pass_kind_names[ps->kind]);
        set_str(L, "kernel", ps->kernel);
        set_int(L, "first", ps->first);
        set_int(L, "last", ps->last);
        set_int(L, "source_buffer", ps->source_buffer);
        set_int(L, "domain", ps->domain);
        set_int(L, "store_buffer", ps->store_buffer);
        set_bool(L, "store_output", ps->store_output);
        int64_t tmp[4];
        for (int f = 0; f < ps->n_extra_stores; f++)
            tmp[f] = ps->extra_stores[f];
        push_int_array(L, tmp, ps->n_extra_stores);
        lua_setfield(L, -2, "extra_stores");
        for (int f = 0; f < ps->n_feeds; f++)
            tmp[f] = ps->feeds[f];
        push_int_array(L, tmp, ps->n_feeds);
        lua_setfield(L, -2, "feeds");
        set_int(L, "finalize_accum", ps->finalize_accum);
        set_int(L, "chan_reduce", ps->chan_reduce);
        set_bool(L, "staged_epilogue", fg_wgmma_staged_epilogue(plan, ps));
        set_int(L, "epi_vec", fg_wgmma_epi_vec(plan, ps));
        set_int(L, "chan_sums", ps->chan_sums);
        lua_createtable(L, 0, 10);
        const fg_conv_tiling *t = &ps->conv;
        set_int3(L, "tile", t->tile, 3);
        set_int3(L, "threads", t->threads, 3);
        set_int(L, "thread_w", t->thread_w);
        set_int(L, "thread_h", t->thread_h);
        set_int3(L, "in_tile", t->in_tile, 3);
        set_int(L, "thread_co", t->thread_co);
        set_int(L, "chan_lanes", t->chan_lanes);
        set_int(L, "in_vec", t->in_vec);
        set_int(L, "co_tile", t->co_tile);
        set_int(L, "ci_chunk", t->ci_chunk);
        set_int(L, "ci_unroll", t->ci_unroll);
        set_int(L, "engine", t->engine);
        set_int(L, "ch_pitch", t->ch_pitch);
        set_int(L, "warp_mt", t->warp_mt);
        set_int(L, "warp_rows", t->warp_rows);
        set_int(L, "warp_ntw", t->warp_ntw);
        set_int3(L, "warps", t->warps, 3);
        set_int(L, "k_blocked", t->k_blocked);
        set_int(L, "tiles_per_block", t->tiles_per_block);
        set_int(L, "ksteps", t->ksteps);
        set_int(L, "acc_steps", t->acc_steps);
        lua_createtable(L, 0, 14);
        set_int(L, "input_offset", t->smem.input_offset);
        set_int(L, "input_buffers", t->smem.input_buffers);
        set_int(L, "buffer_floats", t->smem.buffer_floats);
        set_int(L, "channel_pitch", t->smem.channel_pitch);
        set_int(L, "pixel_pitch", t->smem.pixel_pitch);
        set_int(L, "weights_offset", t->smem.weights_offset);
        set_int(L, "weights_co_pitch", t->smem.weights_co_pitch);
        set_int(L, "table_offset", t->smem.table_offset);
        lua_setfield(L, -2, "smem");
        lua_setfield(L, -2, "conv");
        lua_createtable(L, 0, 8);
        set_int(L, "cluster", ps->res.cluster);
        set_int(L, "channel_block", ps->res.channel_block);
        set_int(L, "channel_group", ps->res.channel_group);
        set_int(L, "norm_op", ps->res.norm_op);
        set_int(L, "reduce_op", ps->res.reduce_op);
        set_int(L, "rows", ps->res.rows);
        set_int(L, "slice", ps->res.slice);
        lua_setfield(L, -2, "res");
        lua_createtable(L, 0, 14);
        set_int(L, "block", ps->launch.block);
        set_int(L, "elems", ps->launch.elems_per_thread);
        set_int(L, "grid_x", ps->launch.grid_x);
        set_int(L, "grid_y", ps->launch.grid_y);
        set_bool(L, "per_sample", ps->launch.per_sample);
        set_int(L, "smem_bytes", ps->launch.smem_bytes);
        set_int(L, "tile_c", ps->launch.tile_c);
        set_int(L, "tile_p", ps->launch.tile_p);
        set_int(L, "tile_pitch", ps->launch.tile_pitch);
        set_int(L, "row_vec", ps->launch.row_vec);
        set_int(L, "row_pixels", ps->launch.row_pixels);
        set_int(L, "cl_vec", ps->launch.cl_vec);
        set_int(L, "cl_vectors", ps->launch.cl_vectors);
        set_int(L, "cl_stride", ps->launch.cl_stride);
        lua_setfield(L, -2, "launch");
        lua_createtable(L, ps->n_args, 1);
        for (int a = 0; a < ps->n_args; a++) {
            lua_createtable(L, 0, 2);
            set_str(L, "kind", arg_kind_names[ps->args[a].kind]);
            set_int(L, "index", ps->args[a].index);
            lua_rawseti(L, -2, a);
        }
        set_int(L, "n", ps->n_args);
        lua_setfield(L, -2, "args");
        lua_rawseti(L, -2, i);
    }
    lua_setfield(L, -2, "passes");
    push_wgmma(L, &plan->wgmma);
    lua_setfield(L, -2, "wgmma");
    set_int(L, "n_buffers", plan->n_buffers);
    lua_createtable(L, plan->n_buffers, 1);
    for (int i = 0; i < plan->n_buffers; i++) {
        lua_createtable(L, 0, 2);
        set_int(L, "value", plan->buffers[i].value);
        set_int(L, "per_sample", plan->buffers[i].per_sample);
        set_bool(L, "io", plan->buffers[i].io);
        set_int(L, "fixed", plan->buffers[i].fixed);
        lua_rawseti(L, -2, i);
    }
    lua_setfield(L, -2, "buffers");
    set_int(L, "n_accums", plan->n_accums);
    lua_createtable(L, plan->n_accums, 1);
    for (int i = 0; i < plan->n_accums; i++) {
        const fg_accum *a = &plan->accums[i];
        lua_createtable(L, 0, 8);
        set_str(L, "kind", fg_accum_defs[a->kind].name);
        set_int(L, "op", a->op);
        set_int(L, "value", a->value);
        set_int(L, "max_accum", a->max_accum);
        set_int(L, "keys_per_sample", a->keys_per_sample);
        set_bool(L, "over_batch", a->over_batch);
        set_int(L, "count_per_sample", a->count_per_sample);
        set_int(L, "finalized", a->finalized);
        set_bool(L, "prologue", a->prologue);
        set_bool(L, "per_channel", a->per_channel);
        set_bool(L, "exported", a->link == FG_LINK_EXPORTED);
        lua_rawseti(L, -2, i);
    }
    lua_setfield(L, -2, "accums");
    set_int(L, "pro_norm", plan->pro_norm);
    set_int(L, "pro_accum", plan->pro_accum);
    set_bool(L, "pack_finalizes", plan->pack_finalizes);
    set_bool(L, "pack_pixel_stats", plan->pack_pixel_stats);
    lua_createtable(L, FG_MAX_OPS, 0);
    for (int k = 0; k < FG_MAX_OPS; k++) {
        lua_createtable(L, 0, 3);
        set_bool(L, "inline_loop", plan->inline_loop[k]);
        set_int(L, "accum", plan->op_accum[k]);
        set_int(L, "max_accum", plan->op_max_accum[k]);
        /* the accumulators of a reduction, in the registry's order (a0, a1) */
        int64_t list[2];
        int n = 0;
        if (plan->op_max_accum[k] >= 0)
            list[n++] = plan->op_max_accum[k];
        if (plan->op_accum[k] >= 0)
            list[n++] = plan->op_accum[k];
        lua_createtable(L, n, 0);
        for (int i = 0; i < n; i++) {
            lua_pushinteger(L, list[i]);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "accums");
        lua_rawseti(L, -2, k);
    }
    lua_setfield(L, -2, "op");
    push_accum_defs(L);
    lua_setfield(L, -2, "accum_defs");
}

/* ---- running the templates --------------------------------------------------------------- */

typedef struct render_call {
    const fg_layer_ir *ir;
    const fg_plan *plan;
} render_call;

static int render_protected(lua_State *L)
{
    render_call *rc = lua_touserdata(L, 1);
    lua_pushcfunction(L, lua_import);
    lua_pushstring(L, "layer");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "render");
    push_ir(L, rc->ir, &rc->plan->fold);
    push_plan(L, rc->plan);
    lua_call(L, 2, 1);
    if (lua_type(L, -1) != LUA_TSTRING)
        return luaL_error(L, "templates/layer.lua: render returned a %s, not source text", luaL_typename(L, -1));
    return 1;
}

/* The templates' Lua heap is capped too: the planner bounds what a layer asks for (taps,
 * shared memory), and this catches whatever still grows past it -- a template bug, or a
 * shape nobody foresaw -- as an error instead of gigabytes. */
typedef struct render_heap {
    size_t used;
} render_heap;

static void *render_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    render_heap *h = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        h->used -= old;
        return NULL;
    }
    if (nsize > old && h->used - old + nsize > FG_RENDER_MAX_HEAP)
        return NULL;
    void *p = realloc(ptr, nsize);
    if (p)
        h->used = h->used - old + nsize;
    return p;
}

int fg_render(const fg_layer_ir *ir, const fg_plan *plan, fg_rendered *out, fg_error *err)
{
    memset(out, 0, sizeof *out);
    render_heap heap = {0};
    lua_State *L = lua_newstate(render_alloc, &heap);
    if (!L)
        return fg_fail(err, "%s: out of memory starting the template engine", ir->file);
    luaL_requiref(L, "_G", luaopen_base, 1);
    luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 1);
    luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 1);
    luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 1);
    lua_settop(L, 0);
    static const char *const unsafe[] = {"dofile", "loadfile", "load", "collectgarbage"};
    for (size_t i = 0; i < sizeof unsafe / sizeof *unsafe; i++) {
        lua_pushnil(L);
        lua_setglobal(L, unsafe[i]);
    }
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "fusegen.modules");
    lua_pushcfunction(L, lua_import);
    lua_setglobal(L, "import");

    render_call rc = {ir, plan};
    lua_pushcfunction(L, render_protected);
    lua_pushlightuserdata(L, &rc);
    int status = lua_pcall(L, 1, 1, 0);
    int ret = 0;
    size_t len = 0;
    if (status == LUA_ERRMEM) {
        ret = fg_fail(err, "%s: rendering layer %s took more than %d MiB; the layer cannot be generated", ir->file,
                      ir->name, FG_RENDER_MAX_HEAP >> 20);
    } else if (status != LUA_OK) {
        ret = fg_fail(err, "%s: rendering failed (a template bug): %s", ir->file,
                      lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
    } else if (lua_tolstring(L, -1, &len), len > FG_MAX_SOURCE_BYTES) {
        ret = fg_fail(err, "%s: the source generated for layer %s is %zu bytes; at most %d are compiled (NVRTC's time "
                           "and the kernels' instruction cache grow with it): the layer cannot be generated",
                      ir->file, ir->name, len, FG_MAX_SOURCE_BYTES);
    } else {
        const char *s = lua_tolstring(L, -1, &len);
        out->source = malloc(len + 1);
        if (!out->source) {
            ret = fg_fail(err, "%s: out of memory", ir->file);
        } else {
            memcpy(out->source, s, len + 1);
            out->length = len;
        }
    }
    lua_close(L);
    return ret;
}

void fg_rendered_free(fg_rendered *r)
{
    if (r) {
        free(r->source);
        r->source = NULL;
    }
}

static char templates_digest[33];

static void compute_templates_digest(void)
{
    unsigned char h[16];
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    for (int i = 0; i < fg_embedded_file_count; i++) {
        crypto_generichash_update(&st, (const unsigned char *)fg_embedded_files[i].path,
                                  strlen(fg_embedded_files[i].path) + 1);
        crypto_generichash_update(&st, (const unsigned char *)fg_embedded_files[i].data, fg_embedded_files[i].size);
    }
    crypto_generichash_final(&st, h, sizeof h);
    sodium_bin2hex(templates_digest, sizeof templates_digest, h, sizeof h);
}

const char *fg_templates_digest(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, compute_templates_digest);
    return templates_digest;
}
