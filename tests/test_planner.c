/* SPDX-License-Identifier: Apache-2.0 */
/* Planner decisions: how the reference layers and a few generic ones split into passes,
 * what each pass computes, which values go to workspace buffers, which statistics are
 * accumulated, and the arguments each kernel takes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "spec_loader.h"
#include "../runtime/launcher.h"
#include "test_util.h"

/* One expected pass: kind, first..last, source buffer, store buffer, output?, feeds. */
typedef struct want_pass {
    fg_pass_kind kind;
    int first, last;
    int source_buffer;
    int store_buffer;
    bool store_output;
    int n_feeds;
    int feed0;
    int finalize_accum;
} want_pass;


/* The workspace the runtime's launcher lays out for `plan` and `batch` samples (the one owner
 * of that layout: runtime/launcher.c). */
static fg_launch_layout workspace_for(const fg_layer_ir *ir, const fg_plan *plan, int64_t batch)
{
    fg_launch_table t;
    fg_launch_layout layout;
    fg_error err = {{0}};
    if (fg_launch_table_init(&t, ir, plan, &err) != 0 || fg_launch_layout_for(&t, batch, &layout, &err) != 0)
        fail_msg("%s: %s", ir->name, err.msg);
    fg_launch_table_free(&t);
    return layout;
}

static void check_passes(const fg_layer_ir *ir, const fg_plan *plan, const want_pass *want, int n)
{
    if (plan->n_passes != n)
        fail_msg("%s: %d passes, expected %d", ir->name, plan->n_passes, n);
    for (int i = 0; i < n; i++) {
        const fg_pass *p = &plan->passes[i];
        const want_pass *w = &want[i];
        char kernel[64];
        snprintf(kernel, sizeof kernel, "fg_pass%d_%s", i,
                 w->kind == FG_PASS_CONV ? "conv" : w->kind == FG_PASS_MAP ? "map" : "finalize");
        bool ok = p->kind == w->kind && p->source_buffer == w->source_buffer && p->store_buffer == w->store_buffer &&
                  p->store_output == w->store_output && p->n_feeds == w->n_feeds &&
                  strcmp(p->kernel, kernel) == 0;
        if (w->kind != FG_PASS_FINALIZE)
            ok = ok && p->first == w->first && p->last == w->last && p->domain == w->last;
        else
            ok = ok && p->finalize_accum == w->finalize_accum;
        if (w->n_feeds)
            ok = ok && p->feeds[0] == w->feed0;
        if (!ok)
            fail_msg("%s pass %d: %s kind %d v%d..v%d domain v%d source b%d store b%d output %d feeds %d (s%d) "
                     "finalizes s%d; expected kind %d v%d..v%d source b%d store b%d output %d feeds %d (s%d) "
                     "finalizes s%d",
                     ir->name, i, p->kernel, p->kind, p->first, p->last, p->domain, p->source_buffer, p->store_buffer,
                     p->store_output, p->n_feeds, p->n_feeds ? p->feeds[0] : -1, p->finalize_accum, w->kind, w->first,
                     w->last, w->source_buffer, w->store_buffer, w->store_output, w->n_feeds, w->feed0,
                     w->finalize_accum);
    }
    /* exactly one pass writes the layer output, and it is the last one */
    for (int i = 0; i < n; i++)
        assert_int_equal(plan->passes[i].store_output, i == n - 1);
}

static void check_accum(const fg_plan *plan, int a, fg_accum_kind kind, int op, int64_t keys, int64_t count,
                        int finalized)
{
    assert_true(a < plan->n_accums);
    const fg_accum *acc = &plan->accums[a];
    if (acc->kind != kind || acc->op != op || acc->value != op - 1 || acc->keys_per_sample != keys ||
        acc->count_per_sample != count || acc->finalized != finalized)
        fail_msg("statistics s%d: kind %d op %d value %d keys %lld count %lld finalized %d; expected kind %d op %d "
                 "keys %lld count %lld finalized %d",
                 a, acc->kind, acc->op, acc->value, (long long)acc->keys_per_sample, (long long)acc->count_per_sample,
                 acc->finalized, kind, op, (long long)keys, (long long)count, finalized);
}

/* fusegen plan's lines, collected */
typedef struct text_sink {
    char buf[1 << 16];
    size_t len;
} text_sink;

static void collect_line(void *ctx, const char *line)
{
    text_sink *t = ctx;
    size_t n = strlen(line);
    if (t->len + n + 2 < sizeof t->buf) {
        memcpy(t->buf + t->len, line, n);
        t->buf[t->len + n] = '\n';
        t->len += n + 1;
        t->buf[t->len] = '\0';
    }
}

/* `fusegen plan`'s text for (ir, plan), in a sink the caller frees */
static text_sink *printed_plan(const fg_layer_ir *ir, const fg_plan *plan)
{
    text_sink *t = calloc(1, sizeof *t);
    assert_non_null(t);
    fg_plan_print(ir, plan, collect_line, t);
    return t;
}

static const fg_arg *find_arg(const fg_pass *p, fg_arg_kind kind, int index)
{
    for (int i = 0; i < p->n_args; i++)
        if (p->args[i].kind == kind && p->args[i].index == index)
            return &p->args[i];
    return NULL;
}

/* Every pass ends with (batch, batch_base) and has no duplicate argument. */
static void check_args_common(const fg_plan *plan)
{
    for (int i = 0; i < plan->n_passes; i++) {
        const fg_pass *p = &plan->passes[i];
        assert_true(p->n_args >= 2);
        assert_int_equal(p->args[p->n_args - 2].kind, FG_ARG_BATCH);
        assert_int_equal(p->args[p->n_args - 1].kind, FG_ARG_BATCH_BASE);
        for (int a = 0; a < p->n_args; a++)
            for (int b = a + 1; b < p->n_args; b++)
                assert_false(p->args[a].kind == p->args[b].kind && p->args[a].index == p->args[b].index);
        assert_int_equal(find_arg(p, FG_ARG_OUTPUT, 0) != NULL, p->store_output);
        if (p->kind == FG_PASS_CONV)
            assert_non_null(find_arg(p, FG_ARG_INPUT, 0));
        else
            assert_null(find_arg(p, FG_ARG_INPUT, 0));
        if (p->source_buffer >= 0)
            assert_non_null(find_arg(p, FG_ARG_BUFFER, p->source_buffer));
        for (int f = 0; f < p->n_feeds; f++) {
            assert_non_null(find_arg(p, FG_ARG_ACCUM, p->feeds[f]));
            /* the runtime clears what a pass feeds before it runs */
            assert_int_equal(p->zero[f], p->feeds[f]);
        }
        assert_int_equal(p->n_zero, p->n_feeds);
        assert_true(p->launch.block > 0 && p->launch.block <= 1024);
        assert_true(p->launch.grid_x > 0 && p->launch.grid_y > 0);
    }
}

#define N_WANT(w) ((int)(sizeof(w) / sizeof((w)[0])))

/* ---- the reference layers ------------------------------------------------------------------ */

static void kb17(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb17");
    fg_plan *plan = fgt_plan(ir, -1);
    /* the conv is expensive (64 input channels): materialize, not recompute */
    assert_int_equal(plan->strategy, FG_STRATEGY_MATERIALIZE);
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 0, -1, 0, false, 1, 0, -1},
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_MAP, 1, 2, 0, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->n_buffers, 1);
    assert_int_equal(plan->buffers[0].value, 0);
    assert_int_equal(plan->buffers[0].per_sample, 128 * 126 * 126);
    assert_int_equal(plan->n_accums, 1);
    check_accum(plan, 0, FG_ACCUM_MOMENTS, 1, 128, 126 * 126, 1);
    assert_false(plan->accums[0].over_batch);
    assert_int_equal(plan->op_accum[1], 0);
    check_args_common(plan);
    /* the map pass reads the finalized statistics, not the raw sums */
    assert_non_null(find_arg(&plan->passes[2], FG_ARG_STATS, 0));
    assert_null(find_arg(&plan->passes[2], FG_ARG_ACCUM, 0));
    /* the finalize pass reads the sums and writes the statistics */
    assert_non_null(find_arg(&plan->passes[1], FG_ARG_ACCUM, 0));
    assert_non_null(find_arg(&plan->passes[1], FG_ARG_STATS, 0));
    assert_int_equal(plan->passes[1].launch.grid_x, 1); /* 128 statistics, 128 threads */
    assert_true(plan->passes[1].launch.per_sample);

    /* workspace for 2 samples: the buffer, then the fp64 moments and the float2 statistics,
     * each 256-byte aligned */
    fg_launch_layout ws = workspace_for(ir, plan, 2);
    uint64_t buf = 2ull * 128 * 126 * 126 * 4; /* 16257024, a multiple of 256 */
    assert_int_equal(ws.buffer_offset[0], 0);
    assert_int_equal(ws.accum_offset[0], buf);
    assert_int_equal(ws.accum_bytes[0], 2 * 128 * 16);
    assert_int_equal(ws.stats_offset[0], buf + 2 * 128 * 16);
    assert_int_equal(ws.total, buf + 2 * 128 * 16 + 2 * 128 * 8);
    assert_int_equal(fg_accum_defs[plan->accums[0].kind].clear_word, 0);
    free(plan);
    free(ir);
}

static void kb21(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb21");
    fg_plan *plan = fgt_plan(ir, -1);
    assert_int_equal(plan->strategy, FG_STRATEGY_MATERIALIZE);
    /* add, mul and sigmoid fuse into the conv's epilogue; the group norm needs statistics */
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 3, -1, 0, false, 1, 0, -1},
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_MAP, 4, 4, 0, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->n_buffers, 1);
    assert_int_equal(plan->buffers[0].value, 3);
    assert_int_equal(plan->buffers[0].per_sample, 2064512);
    check_accum(plan, 0, FG_ACCUM_MOMENTS, 4, 8, 4 * 254 * 254, 1);
    check_args_common(plan);
    /* the conv pass: input, conv weight and bias, bias, scale, the buffer, the moments */
    const fg_pass *p = &plan->passes[0];
    static const fg_arg_kind kinds[] = {FG_ARG_INPUT, FG_ARG_PARAM, FG_ARG_PARAM,  FG_ARG_PARAM,      FG_ARG_PARAM,
                                        FG_ARG_BUFFER, FG_ARG_ACCUM, FG_ARG_BATCH, FG_ARG_BATCH_BASE};
    assert_int_equal(p->n_args, 9);
    for (int a = 0; a < 9; a++)
        assert_int_equal(p->args[a].kind, kinds[a]);
    int names[4];
    for (int a = 0; a < 4; a++)
        names[a] = p->args[1 + a].index;
    assert_string_equal(ir->params[names[0]].name, "conv.weight");
    assert_string_equal(ir->params[names[1]].name, "conv.bias");
    assert_string_equal(ir->params[names[2]].name, "bias");
    assert_string_equal(ir->params[names[3]].name, "scale");
    /* the map pass: the buffer, the group norm's affine parameters, the statistics, the output */
    p = &plan->passes[2];
    assert_non_null(find_arg(p, FG_ARG_PARAM, fgt_find_param(ir, "group_norm.weight")));
    assert_non_null(find_arg(p, FG_ARG_PARAM, fgt_find_param(ir, "group_norm.bias")));
    assert_null(find_arg(p, FG_ARG_PARAM, fgt_find_param(ir, "conv.weight")));
    assert_non_null(find_arg(p, FG_ARG_STATS, 0));
    /* the conv's grid covers the 254x254 outputs with its tiles (several per block on
     * tensor cores), and every channel */
    const fg_conv_tiling *t = &plan->passes[0].conv;
    assert_int_equal(t->engine, FG_CONV_MMA);
    assert_int_equal(t->co_tile % (16 * t->warp_mt), 0);
    assert_int_equal(t->tile[1], t->warps[1] * t->warp_rows);
    assert_int_equal(t->tile[2], t->warps[2] * t->warp_ntw * 8);
    int64_t tiles_w = (254 + t->tile[2] - 1) / t->tile[2], tiles_h = (254 + t->tile[1] - 1) / t->tile[1];
    assert_int_equal(plan->passes[0].launch.grid_x, (tiles_w * tiles_h + t->tiles_per_block - 1) / t->tiles_per_block);
    assert_int_equal(plan->passes[0].launch.block, 32 * t->warps[0] * t->warps[1] * t->warps[2]);
    assert_int_equal(plan->passes[0].launch.grid_y, (32 + t->co_tile - 1) / t->co_tile);
    /* shared memory within what one block may use on every supported arch (sm_80: 163 KB) */
    assert_true(plan->passes[0].launch.smem_bytes > 0 && plan->passes[0].launch.smem_bytes <= 163 * 1024);
    free(plan);
    free(ir);
}

static void kb23(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb23");
    /* "auto" takes the channel-sums rule (a mean over everything of a group norm's output):
     * one conv pass feeding fp64 moments per (sample, channel), one map pass computing the
     * mean from them (channel_sums below) */
    fg_plan *plan = fgt_plan(ir, -1);
    assert_int_equal(plan->strategy, FG_STRATEGY_CHANNEL_SUMS);
    static const want_pass sums[] = {
        {FG_PASS_CONV, 0, 0, -1, -1, false, 1, 0, -1},
        {FG_PASS_MAP, 1, 2, -1, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, sums, N_WANT(sums));
    assert_int_equal(plan->passes[1].chan_sums, 2);
    free(plan);

    /* asked for, recompute runs the conv twice: the second conv pass runs through to the mean
     * with no intermediate tensor */
    plan = fgt_plan(ir, FG_STRATEGY_RECOMPUTE);
    assert_int_equal(plan->strategy, FG_STRATEGY_RECOMPUTE);
    static const want_pass recomputed[] = {
        {FG_PASS_CONV, 0, 0, -1, -1, false, 1, 0, -1},
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_CONV, 0, 1, -1, -1, false, 1, 1, -1},
        {FG_PASS_MAP, 2, 2, -1, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, recomputed, N_WANT(recomputed));
    assert_int_equal(plan->n_buffers, 0);
    free(plan);

    plan = fgt_plan(ir, FG_STRATEGY_MATERIALIZE);
    /* the mean over 475200 elements is too big to loop over inline: the group norm's map pass
     * feeds a sum, and the last pass reads that accumulator directly (no buffer) */
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 0, -1, 0, false, 1, 0, -1},
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_MAP, 1, 1, 0, -1, false, 1, 1, -1},
        {FG_PASS_MAP, 2, 2, -1, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->n_buffers, 1);
    assert_int_equal(plan->buffers[0].value, 0);
    assert_int_equal(plan->buffers[0].per_sample, 24 * 22 * 30 * 30);
    assert_int_equal(plan->n_accums, 2);
    check_accum(plan, 0, FG_ACCUM_MOMENTS, 1, 8, 3 * 22 * 30 * 30, 1);
    check_accum(plan, 1, FG_ACCUM_SUM, 2, 1, 24 * 22 * 30 * 30, -1);
    assert_int_equal(plan->op_accum[2], 1);
    assert_false(plan->inline_loop[2]);
    check_args_common(plan);
    assert_non_null(find_arg(&plan->passes[3], FG_ARG_ACCUM, 1));
    assert_null(find_arg(&plan->passes[3], FG_ARG_BUFFER, 0));
    free(plan);
    free(ir);
}

static void kb79(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb79");
    fg_plan *plan = fgt_plan(ir, -1);
    /* x multiplier fuses into the conv; the norm, clamp, x multiplier and the max over 16
     * channels (small: an inline loop) fuse into one map pass */
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 1, -1, 0, false, 1, 0, -1},
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_MAP, 2, 5, 0, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->buffers[0].value, 1);
    assert_int_equal(plan->buffers[0].per_sample, 16 * 14 * 30 * 30);
    assert_int_equal(plan->n_accums, 1);
    check_accum(plan, 0, FG_ACCUM_MOMENTS, 2, 16, 14 * 30 * 30, 1);
    assert_true(plan->inline_loop[5]);
    assert_int_equal(plan->op_accum[5], -1);
    check_args_common(plan);
    int m = fgt_find_param(ir, "multiplier");
    assert_non_null(find_arg(&plan->passes[0], FG_ARG_PARAM, m));
    assert_non_null(find_arg(&plan->passes[2], FG_ARG_PARAM, m));
    /* the output is [N, 14, 30, 30]: the map pass covers 12600 elements per sample */
    const fg_pass *p = &plan->passes[2];
    assert_int_equal(p->launch.grid_x * p->launch.block * p->launch.elems_per_thread >= 12600, true);
    free(plan);
    free(ir);
}

static void kb85(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb85");
    fg_plan *plan = fgt_plan(ir, -1);
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 0, -1, 0, false, 1, 0, -1},
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_MAP, 1, 4, 0, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, want, N_WANT(want));
    check_accum(plan, 0, FG_ACCUM_MOMENTS, 1, 16, 4 * 126 * 126, 1);
    assert_int_equal(plan->buffers[0].per_sample, 64 * 126 * 126);
    assert_true(plan->inline_loop[3]); /* the max pool loops over its window */
    check_args_common(plan);
    free(plan);
    free(ir);
}

static void kb92(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb92");
    fg_plan *plan = fgt_plan(ir, -1);
    /* the residual reads the conv output back from the same buffer the norm reads */
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 0, -1, 0, false, 1, 0, -1},
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_MAP, 1, 5, 0, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->n_buffers, 1);
    assert_int_equal(plan->buffers[0].value, 0);
    check_accum(plan, 0, FG_ACCUM_MOMENTS, 1, 16, 4 * 126 * 126, 1);
    assert_int_equal(plan->n_accums, 1); /* logsumexp over 64 channels: inline */
    assert_true(plan->inline_loop[5]);
    check_args_common(plan);
    /* even when asked to, the planner does not recompute: a later op reads the conv output */
    fg_plan *forced = fgt_plan(ir, FG_STRATEGY_RECOMPUTE);
    assert_int_equal(forced->strategy, FG_STRATEGY_MATERIALIZE);
    check_passes(ir, forced, want, N_WANT(want));
    free(forced);
    free(plan);
    free(ir);
}

/* ---- generic cases --------------------------------------------------------------------------- */

static void softmax_needs_max_sumexp_and_finalize(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"sm\" {\n"
                                      "  input = { \"N\", 4, 64, 64 },\n"
                                      "  conv2d { out_channels = 8, kernel = 3 },\n"
                                      "  softmax { dim = 2 },\n"
                                      "  relu {},\n"
                                      "}\n");
    fg_plan *plan = fgt_plan(ir, -1);
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 0, -1, 0, false, 1, 0, -1},      /* conv, max over H */
        {FG_PASS_MAP, 1, 0, 0, -1, false, 1, 1, -1},       /* re-reads v0: sum of exp(x - max) */
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 1},  /* max and 1/sum */
        {FG_PASS_MAP, 1, 2, 0, -1, true, 0, 0, -1},        /* softmax and relu */
    };
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->n_accums, 2);
    check_accum(plan, 0, FG_ACCUM_MAX, 1, 8 * 62, 62, -1);
    check_accum(plan, 1, FG_ACCUM_SUMEXP, 1, 8 * 62, 62, 2);
    assert_int_equal(plan->accums[1].max_accum, 0);
    assert_int_equal(plan->op_accum[1], 1);
    assert_int_equal(plan->op_max_accum[1], 0);
    /* the max is accumulated as ordered ints from -inf; the sum from 0 */
    assert_int_equal(fg_accum_defs[plan->accums[0].kind].clear_word, 0xff800000u ^ 0x7fffffffu);
    assert_int_equal(fg_accum_defs[plan->accums[1].kind].clear_word, 0);
    check_args_common(plan);
    /* the sum-of-exp pass needs the max too */
    assert_non_null(find_arg(&plan->passes[1], FG_ARG_ACCUM, 0));
    assert_non_null(find_arg(&plan->passes[1], FG_ARG_ACCUM, 1));
    free(plan);
    free(ir);
}

static void large_mean_reads_its_accumulator(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"mean\" {\n"
                                      "  input = { \"N\", 4, 64, 64 },\n"
                                      "  conv2d { out_channels = 8, kernel = 3 },\n"
                                      "  relu {},\n"
                                      "  mean { dims = { 2, 3 } },\n"
                                      "}\n");
    fg_plan *plan = fgt_plan(ir, -1);
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 1, -1, -1, false, 1, 0, -1}, /* no buffer: nobody reads the value */
        {FG_PASS_MAP, 2, 2, -1, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->n_buffers, 0);
    check_accum(plan, 0, FG_ACCUM_SUM, 2, 8, 62 * 62, -1);
    assert_non_null(find_arg(&plan->passes[1], FG_ARG_ACCUM, 0));
    check_args_common(plan);
    free(plan);
    free(ir);

    /* a small mean (extent <= 1024) loops inline instead */
    ir = fgt_load_string("return layer \"mean\" {\n"
                         "  input = { \"N\", 4, 34, 34 },\n"
                         "  conv2d { out_channels = 8, kernel = 3 },\n"
                         "  mean { dims = { 2, 3 } },\n"
                         "}\n");
    plan = fgt_plan(ir, -1);
    static const want_pass small[] = {
        {FG_PASS_CONV, 0, 0, -1, 0, false, 0, 0, -1},
        {FG_PASS_MAP, 1, 1, 0, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, small, N_WANT(small));
    assert_int_equal(plan->n_accums, 0);
    assert_true(plan->inline_loop[1]);
    free(plan);
    free(ir);
}

static void running_batch_norm_fuses_into_conv(void **state)
{
    (void)state;
    /* not directly after the conv: evaluated inline, from its parameters */
    fg_layer_ir *ir = fgt_load_string("return layer \"bn\" {\n"
                                      "  input = { \"N\", 4, 64, 64 },\n"
                                      "  conv2d { out_channels = 8, kernel = 3 },\n"
                                      "  relu {},\n"
                                      "  batch_norm { name = \"bn\", stats = \"running\" },\n"
                                      "}\n");
    fg_plan *plan = fgt_plan(ir, -1);
    static const want_pass want[] = {{FG_PASS_CONV, 0, 2, -1, -1, true, 0, 0, -1}};
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->fold.op, -1);
    assert_int_equal(plan->n_buffers, 0);
    assert_int_equal(plan->n_accums, 0);
    const fg_pass *p = &plan->passes[0];
    static const char *const params[] = {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean",
                                         "bn.running_var"};
    for (int i = 0; i < 6; i++)
        assert_non_null(find_arg(p, FG_ARG_PARAM, fgt_find_param(ir, params[i])));
    check_args_common(plan);
    free(plan);
    free(ir);

    /* with batch statistics it needs statistics over the whole batch */
    ir = fgt_load_string("return layer \"bn\" {\n"
                         "  input = { \"N\", 4, 64, 64 },\n"
                         "  conv2d { out_channels = 8, kernel = 3 },\n"
                         "  batch_norm { name = \"bn\" },\n"
                         "}\n");
    plan = fgt_plan(ir, FG_STRATEGY_MATERIALIZE);
    assert_int_equal(plan->n_passes, 3);
    assert_true(plan->accums[0].over_batch);
    assert_int_equal(plan->accums[0].keys_per_sample, 8);
    assert_false(plan->passes[1].launch.per_sample); /* finalize once, over the whole batch */
    fg_launch_layout ws = workspace_for(ir, plan, 5);
    assert_int_equal(ws.accum_bytes[0], 8 * 16); /* not multiplied by the batch */
    free(plan);
    free(ir);
}

/* What a plan with a folded batch_norm (gen/fold.h) reads: the kernels take the two folded
 * tensors, kernel parameters after the spec's, instead of the conv's and the norm's. */
static void expect_folded(const char *source, const char *const *spec_params, int n_spec_params, bool conv_bias)
{
    fg_layer_ir *ir = fgt_load_string(source);
    fg_plan *plan = fgt_plan(ir, -1);
    const fg_bn_fold *f = &plan->fold;
    assert_int_equal(f->op, 1);
    assert_int_equal(f->folded_weight, ir->n_params);
    assert_int_equal(f->folded_bias, ir->n_params + 1);
    assert_int_equal(fg_bn_fold_param_count(ir, f), ir->n_params + 2);
    assert_int_equal(f->conv_weight, fgt_find_param(ir, "conv.weight"));
    assert_int_equal(f->conv_bias, conv_bias ? fgt_find_param(ir, "conv.bias") : -1);
    assert_int_equal(f->mean, fgt_find_param(ir, "bn.running_mean"));
    assert_int_equal(f->var, fgt_find_param(ir, "bn.running_var"));
    assert_int_equal(f->channels, ir->ops[0].out_channels);
    assert_int_equal(f->channels * f->per_channel, ir->params[f->conv_weight].count);
    /* the spec's parameters are all still there to bind, none of them read by a kernel */
    for (int i = 0; i < n_spec_params; i++) {
        int idx = fgt_find_param(ir, spec_params[i]);
        assert_true(idx >= 0);
        for (int q = 0; q < plan->n_passes; q++)
            assert_null(find_arg(&plan->passes[q], FG_ARG_PARAM, idx));
    }
    int bias;
    assert_int_equal(fg_plan_conv_params(ir, plan, &bias), f->folded_weight);
    assert_int_equal(bias, f->folded_bias);
    assert_non_null(find_arg(&plan->passes[0], FG_ARG_PARAM, f->folded_weight));
    assert_non_null(find_arg(&plan->passes[0], FG_ARG_PARAM, f->folded_bias));
    check_args_common(plan);
    /* `fusegen plan` says so */
    text_sink *t = printed_plan(ir, plan);
    fgt_assert_contains(t->buf, "folded: batch_norm bn (v1, line 4) into the conv's weights and bias");
    free(t);
    free(plan);
    free(ir);
}

static void running_batch_norm_after_the_conv_is_folded(void **state)
{
    (void)state;
    static const char *const all[] = {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean",
                                      "bn.running_var"};
    expect_folded("return layer \"bn\" {\n"
                  "  input = { \"N\", 4, 64, 64 },\n"
                  "  conv2d { out_channels = 8, kernel = 3 },\n"
                  "  batch_norm { name = \"bn\", stats = \"running\" },\n"
                  "  relu {},\n"
                  "}\n",
                  all, 6, true);
    /* a conv without bias gets one; a norm without affine has no weight or bias; 3D, groups */
    static const char *const bare[] = {"conv.weight", "bn.running_mean", "bn.running_var"};
    expect_folded("return layer \"bn3\" {\n"
                  "  input = { \"N\", 4, 6, 8, 8 },\n"
                  "  conv3d { out_channels = 6, kernel = { 1, 3, 3 }, groups = 2, bias = false },\n"
                  "  batch_norm { name = \"bn\", stats = \"running\", affine = false, eps = 1e-3 },\n"
                  "  instance_norm {},\n"
                  "}\n",
                  bare, 3, false);
    /* the folded plan has no batch_norm: its source neither (no parameter of the norm, no
     * square root of a variance), and the conv reads the folded tensors */
    fgt_rendered_layer r;
    assert_int_equal(fgt_render_layer("folded", "return layer \"folded\" {\n"
                                                "  input = { \"N\", 4, 16, 16 },\n"
                                                "  conv2d { out_channels = 8, kernel = 3, bias = false },\n"
                                                "  batch_norm { name = \"bn\", stats = \"running\" },\n"
                                                "  relu {},\n"
                                                "}\n",
                                     &r),
                     0);
    fgt_assert_contains(r.src.source, "batch_norm (folded)");
    fgt_assert_not_contains(r.src.source, "sqrtf");
    for (int i = 0; i < r.ir->n_params; i++) { /* p0..p4: conv.weight, bn.* */
        char name[32];
        snprintf(name, sizeof name, "__restrict__ p%d,", i);
        fgt_assert_not_contains(r.src.source, name);
    }
    fgt_assert_contains(r.src.source, "const float *__restrict__ p5, const float *__restrict__ p6");
    fgt_rendered_layer_free(&r);
}

static void batch_norm_is_not_folded_when_the_conv_value_is_read(void **state)
{
    (void)state;
    /* a residual of the conv's own value needs it unfolded: the norm stays inline */
    fg_layer_ir *ir = fgt_load_string("return layer \"res\" {\n"
                                      "  input = { \"N\", 4, 16, 16 },\n"
                                      "  conv2d { out_channels = 8, kernel = 3, as = \"c\" },\n"
                                      "  batch_norm { name = \"bn\", stats = \"running\" },\n"
                                      "  add { value = \"c\" },\n"
                                      "}\n");
    fg_plan *plan = fgt_plan(ir, -1);
    assert_int_equal(plan->fold.op, -1);
    assert_non_null(find_arg(&plan->passes[0], FG_ARG_PARAM, fgt_find_param(ir, "bn.running_var")));
    free(plan);
    free(ir);
    /* batch statistics are never folded */
    ir = fgt_load_string("return layer \"bs\" {\n"
                         "  input = { \"N\", 4, 16, 16 },\n"
                         "  conv2d { out_channels = 8, kernel = 3 },\n"
                         "  batch_norm { name = \"bn\" },\n"
                         "}\n");
    plan = fgt_plan(ir, -1);
    assert_int_equal(plan->fold.op, -1);
    free(plan);
    free(ir);
}

static void recompute_runs_the_conv_twice(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb17");
    fg_plan *plan = fgt_plan(ir, FG_STRATEGY_RECOMPUTE);
    assert_int_equal(plan->strategy, FG_STRATEGY_RECOMPUTE);
    static const want_pass want[] = {
        {FG_PASS_CONV, 0, 0, -1, -1, false, 1, 0, -1}, /* statistics only, nothing stored */
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_CONV, 0, 2, -1, -1, true, 0, 0, -1}, /* conv again, norm and divide fused */
    };
    check_passes(ir, plan, want, N_WANT(want));
    assert_int_equal(plan->n_buffers, 0);
    check_args_common(plan);
    assert_non_null(find_arg(&plan->passes[2], FG_ARG_STATS, 0));
    fg_launch_layout ws = workspace_for(ir, plan, 3);
    assert_int_equal(ws.total, 3 * 128 * 16 + 3 * 128 * 8); /* no intermediate tensor */
    free(plan);

    /* kb21 as well: its add/mul/sigmoid chain is computed in both conv passes */
    fg_layer_ir *ir21 = fgt_load_spec("kb21");
    plan = fgt_plan(ir21, FG_STRATEGY_RECOMPUTE);
    static const want_pass want21[] = {
        {FG_PASS_CONV, 0, 3, -1, -1, false, 1, 0, -1},
        {FG_PASS_FINALIZE, 0, 0, -1, -1, false, 0, 0, 0},
        {FG_PASS_CONV, 0, 4, -1, -1, true, 0, 0, -1},
    };
    check_passes(ir21, plan, want21, N_WANT(want21));
    free(plan);
    free(ir21);

    /* "auto" keeps recompute only where the second conv pass ends the layer with no
     * intermediate tensor and a small output: a norm followed by a reduction (through an
     * activation: without it the channel-sums rule would take it)... */
    fg_layer_ir *reduced = fgt_load_string("return layer \"reduced\" {\n"
                                           "  input = { \"N\", 1, 64, 64 },\n"
                                           "  conv2d { out_channels = 64, kernel = 1 },\n"
                                           "  instance_norm {},\n"
                                           "  relu {},\n"
                                           "  mean { dims = { 2, 3 } },\n"
                                           "}\n");
    plan = fgt_plan(reduced, -1);
    assert_int_equal(plan->strategy, FG_STRATEGY_RECOMPUTE);
    assert_int_equal(plan->passes[2].kind, FG_PASS_CONV);
    assert_int_equal(plan->n_buffers, 0);
    free(plan);
    free(reduced);
    /* ...not where the output is as large as the conv's (the conv twice costs more than
     * the tensor it saves, measured) nor where the second pass must still store a tensor
     * (a max over the channels cannot run inside the conv's epilogue) */
    static const char *const materialized[] = {
        "return layer \"same_size\" {\n  input = { \"N\", 1, 64, 64 },\n"
        "  conv2d { out_channels = 64, kernel = 1 },\n  instance_norm {},\n}\n",
        "return layer \"channel_max\" {\n  input = { \"N\", 1, 64, 64 },\n"
        "  conv2d { out_channels = 64, kernel = 1 },\n  instance_norm {},\n  max { dim = 1 },\n}\n",
    };
    for (int i = 0; i < 2; i++) {
        fg_layer_ir *m = fgt_load_string(materialized[i]);
        plan = fgt_plan(m, -1);
        assert_int_equal(plan->strategy, FG_STRATEGY_MATERIALIZE);
        assert_int_equal(plan->passes[2].kind, FG_PASS_MAP);
        free(plan);
        plan = fgt_plan(m, FG_STRATEGY_RECOMPUTE); /* still possible when asked for */
        assert_int_equal(plan->strategy, FG_STRATEGY_RECOMPUTE);
        assert_int_equal(plan->passes[2].kind, FG_PASS_CONV);
        free(plan);
        free(m);
    }
    free(ir);
}

/* The channel-sums rule (gen/planner.c, channel_sums_reduction): a sum or mean over every spatial
 * dim of a group/instance/batch norm's output, through ops affine per channel, plans as one conv
 * pass feeding fp64 moments per (sample, channel) and one map pass computing the output from
 * them; anything that breaks the affine property, or another reduction or norm, plans as
 * before. */
static void expect_channel_sums(const char *source, int norm, int reduce, int64_t channels, int64_t positions)
{
    fg_layer_ir *ir = fgt_load_string(source);
    fg_plan *plan = fgt_plan(ir, -1);
    if (plan->strategy != FG_STRATEGY_CHANNEL_SUMS)
        fail_msg("%s: strategy %d, expected channel sums", ir->name, (int)plan->strategy);
    const want_pass want[] = {
        {FG_PASS_CONV, 0, norm - 1, -1, -1, false, 1, 0, -1},
        {FG_PASS_MAP, norm, ir->n_ops - 1, -1, -1, true, 0, 0, -1},
    };
    check_passes(ir, plan, want, N_WANT(want));
    check_args_common(plan);
    assert_int_equal(plan->n_buffers, 0);
    assert_int_equal(plan->n_accums, 1);
    const fg_accum *a = &plan->accums[0];
    assert_int_equal(a->kind, FG_ACCUM_MOMENTS);
    assert_true(a->per_channel);
    assert_false(a->over_batch);
    assert_int_equal(a->value, norm - 1);
    assert_int_equal(a->keys_per_sample, channels);
    assert_int_equal(a->count_per_sample, positions);
    assert_int_equal(a->finalized, -1); /* read raw, in fp64 */
    assert_int_equal(plan->op_accum[norm], 0);
    assert_int_equal(plan->op_accum[reduce], 0);
    const fg_pass *m = &plan->passes[1];
    assert_int_equal(m->chan_sums, reduce);
    assert_int_equal(plan->passes[0].chan_sums, -1);
    assert_non_null(find_arg(m, FG_ARG_ACCUM, 0));
    assert_null(find_arg(m, FG_ARG_STATS, 0));
    /* the runtime's workspace: the moments and nothing else (no conv output) */
    fg_launch_layout ws = workspace_for(ir, plan, 3);
    assert_true(ws.total <= (uint64_t)(3 * channels * 16 + 3 * channels * 8 + 1024));
    text_sink *t = printed_plan(ir, plan);
    fgt_assert_contains(t->buf, "strategy channel_sums");
    fgt_assert_contains(t->buf, "an affine map commutes with a mean");
    fgt_assert_contains(t->buf, "(one a channel)");
    free(t);
    /* asked for, the older plans stay (the A/B of the rule) */
    free(plan);
    plan = fgt_plan(ir, FG_STRATEGY_RECOMPUTE);
    assert_int_equal(plan->strategy, FG_STRATEGY_RECOMPUTE);
    assert_int_equal(plan->passes[2].kind, FG_PASS_CONV);
    free(plan);
    plan = fgt_plan(ir, FG_STRATEGY_MATERIALIZE);
    assert_int_equal(plan->strategy, FG_STRATEGY_MATERIALIZE);
    free(plan);
    free(ir);
}

static void expect_no_channel_sums(const char *source)
{
    fg_layer_ir *ir = fgt_load_string(source);
    fg_plan *plan = fgt_plan(ir, -1);
    if (plan->strategy == FG_STRATEGY_CHANNEL_SUMS)
        fail_msg("%s: the channel-sums rule applied", ir->name);
    for (int i = 0; i < plan->n_passes; i++)
        assert_int_equal(plan->passes[i].chan_sums, -1);
    for (int i = 0; i < plan->n_accums; i++)
        assert_false(plan->accums[i].per_channel);
    /* the plan of before: the conv runs twice or its value is stored */
    int convs = 0;
    for (int i = 0; i < plan->n_passes; i++)
        convs += plan->passes[i].kind == FG_PASS_CONV;
    assert_true(convs == 2 || plan->n_buffers > 0);
    free(plan);
    free(ir);
}

static void channel_sums(void **state)
{
    (void)state;
    /* KB23's shape: group norm, then a mean over every dim but the batch */
    expect_channel_sums("return layer \"gn_mean_all\" {\n  input = { \"N\", 3, 10, 12, 12 },\n"
                        "  conv3d { out_channels = 16, kernel = 3 },\n  group_norm { groups = 4 },\n"
                        "  mean { dims = { 1, 2, 3, 4 } },\n}\n",
                        1, 2, 16, 8 * 10 * 10);
    /* instance norm, then a mean over the spatial dims only (global average pooling): [N, C] */
    expect_channel_sums("return layer \"in_mean_spatial\" {\n  input = { \"N\", 4, 18, 18 },\n"
                        "  conv2d { out_channels = 16, kernel = 3 },\n  instance_norm { affine = true },\n"
                        "  mean { dims = { 2, 3 } },\n}\n",
                        1, 2, 16, 16 * 16);
    /* a per-channel mul, a scalar sub and div between, a sum with keepdim, an activation after
     * the reduction (elementwise on the reduced value) */
    expect_channel_sums("return layer \"in_mul_sum\" {\n  input = { \"N\", 4, 18, 18 },\n"
                        "  conv2d { out_channels = 16, kernel = 3 },\n  instance_norm {},\n"
                        "  mul { param = \"scale\", shape = { 16, 1, 1 } },\n  sub { scalar = 0.25 },\n"
                        "  div { scalar = 3 },\n  sum { dims = { 2, 3 }, keepdim = true },\n  relu {},\n}\n",
                        1, 5, 16, 16 * 16);
    /* ops before the norm stay in the conv's epilogue; a sum over everything */
    expect_channel_sums("return layer \"mul_gn_sum\" {\n  input = { \"N\", 3, 10, 12, 12 },\n"
                        "  conv3d { out_channels = 16, kernel = 3 },\n  mul { scalar = 2.0 },\n"
                        "  group_norm { groups = 4 },\n  add { param = \"shift\", shape = { 16, 1, 1, 1 } },\n"
                        "  sum { dims = { 1, 2, 3, 4 } },\n}\n",
                        2, 4, 16, 8 * 10 * 10);
    /* batch statistics (the norm's statistic over the batch: assembled in the map pass) and
     * global_avg_pool, then a flatten */
    expect_channel_sums("return layer \"bn_gap\" {\n  input = { \"N\", 4, 10, 10 },\n"
                        "  conv2d { out_channels = 8, kernel = 3, padding = 1 },\n  batch_norm {},\n"
                        "  global_avg_pool {},\n  flatten {},\n}\n",
                        1, 2, 8, 10 * 10);

    /* not affine between the norm and the mean: an activation, a clamp */
    expect_no_channel_sums("return layer \"sigmoid\" {\n  input = { \"N\", 3, 10, 12, 12 },\n"
                           "  conv3d { out_channels = 16, kernel = 3 },\n  group_norm { groups = 4 },\n"
                           "  sigmoid {},\n  mean { dims = { 1, 2, 3, 4 } },\n}\n");
    expect_no_channel_sums("return layer \"clamp\" {\n  input = { \"N\", 4, 18, 18 },\n"
                           "  conv2d { out_channels = 16, kernel = 3 },\n  instance_norm {},\n"
                           "  clamp { min = -0.5, max = 0.5 },\n  mean { dims = { 2, 3 } },\n}\n");
    /* a parameter that varies along a spatial dim is not per channel */
    expect_no_channel_sums("return layer \"spatial_param\" {\n  input = { \"N\", 4, 18, 18 },\n"
                           "  conv2d { out_channels = 16, kernel = 3 },\n  instance_norm {},\n"
                           "  mul { param = \"p\", shape = { 16 } },\n  mean { dims = { 2, 3 } },\n}\n");
    /* a max is not a mean */
    expect_no_channel_sums("return layer \"max\" {\n  input = { \"N\", 3, 10, 12, 12 },\n"
                           "  conv3d { out_channels = 16, kernel = 3 },\n  group_norm { groups = 4 },\n"
                           "  max { dims = { 1, 2, 3, 4 } },\n}\n");
    /* a mean that keeps a spatial dim */
    expect_no_channel_sums("return layer \"keeps_w\" {\n  input = { \"N\", 4, 18, 18 },\n"
                           "  conv2d { out_channels = 16, kernel = 3 },\n  instance_norm {},\n"
                           "  mean { dims = { 1, 2 } },\n}\n");
    /* layer norm over the channels: statistics per position */
    expect_no_channel_sums("return layer \"ln\" {\n  input = { \"N\", 4, 18, 18 },\n"
                           "  conv2d { out_channels = 16, kernel = 3 },\n  layer_norm { dim = 1 },\n"
                           "  mean { dims = { 1, 2, 3 } },\n}\n");
    /* layer norm over the trailing dims: its affine varies along the positions */
    expect_no_channel_sums("return layer \"ln_trailing\" {\n  input = { \"N\", 4, 18, 18 },\n"
                           "  conv2d { out_channels = 16, kernel = 3 },\n"
                           "  layer_norm { normalized_shape = { 16, 16, 16 } },\n  mean { dims = { 1, 2, 3 } },\n}\n");
}

static void named_value_behind_a_statistic(void **state)
{
    (void)state;
    /* the named value r (v1) is read after the norm: the conv pass stores it next to v2 */
    fg_layer_ir *ir = fgt_load_string("return layer \"res\" {\n"
                                      "  input = { \"N\", 2, 20, 20 },\n"
                                      "  conv2d { out_channels = 8, kernel = 3 },\n"
                                      "  relu { as = \"r\" },\n"
                                      "  mul { scalar = 2 },\n"
                                      "  instance_norm {},\n"
                                      "  add { value = \"r\" },\n"
                                      "}\n");
    fg_plan *plan = fgt_plan(ir, -1);
    assert_int_equal(plan->n_passes, 3);
    const fg_pass *conv = &plan->passes[0];
    assert_int_equal(conv->last, 2);
    assert_int_equal(conv->n_extra_stores, 1);
    assert_int_equal(plan->buffers[conv->extra_stores[0]].value, 1);
    assert_int_equal(plan->buffers[conv->store_buffer].value, 2);
    const fg_pass *map = &plan->passes[2];
    assert_non_null(find_arg(map, FG_ARG_BUFFER, conv->extra_stores[0]));
    check_args_common(plan);
    free(plan);
    free(ir);

    /* ... which it cannot do when a window op sits between the value and the cut: the
     * planner refuses with a message that names the value and its line */
    ir = fgt_load_string("return layer \"res\" {\n"
                         "  input = { \"N\", 2, 20, 20 },\n"
                         "  conv2d { out_channels = 8, kernel = 3 },\n"
                         "  instance_norm {},\n"
                         "  relu { as = \"r\" },\n"
                         "  max_pool { kernel = 1 },\n"
                         "  group_norm { groups = 2 },\n"
                         "  add { value = \"r\" },\n"
                         "}\n");
    plan = malloc(sizeof *plan);
    fg_error err = {{0}};
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    opts.force_strategy = FG_STRATEGY_MATERIALIZE; /* recompute would fuse r into the second conv pass */
    assert_int_equal(fg_plan_layer(ir, &opts, plan, &err), -1);
    fgt_assert_contains(err.msg, "test.lua:5:");
    fgt_assert_contains(err.msg, "value 'r' is read after a statistic");
    free(plan);
    free(ir);
}

/* A map pass writing a channels-last output transposes through a shared-memory tile
 * (planner.c, map_cl_tile): tiles of 32 channels x 64 pixels (a power of two of channels
 * below 32: narrower and longer), one padded tile a buffer it reads; the same layer NC(D)HW,
 * or a map pass that gathers, keeps one element a thread. */
static const char cl_ragged[] = "return layer \"t\" {\n  input = { \"N\", 4, 6, 9, 11 },%s\n"
                                "  conv3d { out_channels = %d, kernel = 3, padding = 1%s },\n"
                                "  instance_norm { affine = true },\n  %s {},\n%s}\n";

/* The launch of the last pass (materialize: a map pass writing the output) of `source`, or of
 * cl_ragged filled with the rest when `source` is NULL; `print` gets `fusegen plan`'s text. */
static fg_launch cl_map_launch(const char *source, const char *layout, int channels, const char *as,
                               const char *act, const char *tail, text_sink *print)
{
    char src[512];
    if (!source)
        snprintf(src, sizeof src, cl_ragged, layout, channels, as, act, tail);
    fg_layer_ir *ir = fgt_load_string(source ? source : src);
    fg_plan *plan = fgt_plan(ir, FG_STRATEGY_MATERIALIZE);
    const fg_pass *map = &plan->passes[plan->n_passes - 1];
    assert_int_equal(map->kind, FG_PASS_MAP);
    assert_true(map->store_output);
    if (print)
        fg_plan_print(ir, plan, collect_line, print);
    fg_launch l = map->launch;
    free(plan);
    free(ir);
    return l;
}

static void channels_last_map_tiles(void **state)
{
    (void)state;
    static const char cl_bf16[] = " layout = \"channels_last\", dtype = \"bf16\",";
    static const char cl[] = " layout = \"channels_last\",";
    text_sink *t = calloc(1, sizeof *t);
    assert_non_null(t);
    fg_launch l = cl_map_launch(NULL, cl_bf16, 40, "", "leaky_relu", "", t);
    assert_int_equal(l.tile_c, 32);
    assert_int_equal(l.tile_p, 64);
    assert_int_equal(l.tile_pitch, 65);
    assert_int_equal(l.elems_per_thread, 8);
    assert_int_equal(l.grid_x, 2 * 10); /* 40 channels, 594 pixels */
    assert_int_equal(l.smem_bytes, 32 * 65 * 4);
    fgt_assert_contains(t->buf, "a block takes 32 channels x 64 pixels of a sample");
    fgt_assert_contains(t->buf, "launch: 256 threads, grid 20 x 1 x N, 8320 B shared");
    free(t);

    /* NC(D)HW: untouched */
    l = cl_map_launch(NULL, "", 40, "", "leaky_relu", "", NULL);
    assert_int_equal(l.tile_c, 0);
    assert_int_equal(l.smem_bytes, 0);
    assert_int_equal(l.elems_per_thread, 4);

    /* 7 channels: a tile of 8 x 256, rows padded by 4 */
    l = cl_map_launch(NULL, cl, 7, "", "relu", "", NULL);
    assert_int_equal(l.tile_c, 8);
    assert_int_equal(l.tile_p, 256);
    assert_int_equal(l.tile_pitch, 260);
    assert_int_equal(l.grid_x, 3);

    /* the residual reads the conv's value, the pass's source: one tile */
    l = cl_map_launch(NULL, cl, 24, ", as = \"c\"", "relu", "  add { value = \"c\" },\n", NULL);
    assert_int_equal(l.smem_bytes, 32 * 65 * 4);

    /* two: the pre-norm value (the source) and the conv's, read back by the residual */
    l = cl_map_launch("return layer \"t\" {\n  input = { \"N\", 10, 13, 17 }, layout = \"channels_last\",\n"
                      "  conv2d { out_channels = 24, kernel = 3, padding = 1, as = \"c\" },\n  relu {},\n"
                      "  group_norm { groups = 4 },\n  silu {},\n  add { value = \"c\" },\n}\n",
                      NULL, 0, NULL, NULL, NULL, NULL);
    assert_int_equal(l.smem_bytes, 2 * 32 * 65 * 4);
    assert_int_equal(l.grid_x, 4); /* 221 pixels */

    /* a pool in the map pass gathers: one element a thread, as before */
    l = cl_map_launch(NULL, cl, 24, "", "relu", "  max_pool { kernel = 2 },\n", NULL);
    assert_int_equal(l.tile_c, 0);
    assert_int_equal(l.elems_per_thread, 1);
}

static void unary_only_layer_is_one_pass(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"one\" {\n"
                                      "  input = { \"N\", 3, 16, 16 },\n"
                                      "  conv2d { out_channels = 4, kernel = 3 },\n"
                                      "  relu {}, mul { scalar = 3 }, tanh {},\n"
                                      "}\n");
    fg_plan *plan = fgt_plan(ir, -1);
    static const want_pass want[] = {{FG_PASS_CONV, 0, 3, -1, -1, true, 0, 0, -1}};
    check_passes(ir, plan, want, N_WANT(want));
    check_args_common(plan);
    fg_launch_layout ws = workspace_for(ir, plan, 7);
    assert_int_equal(ws.total, 0);
    free(plan);
    free(ir);
}

/* strategy = "resident": one pass, a cluster per sample (kb79: all 16 channels, since a max
 * over the channels follows) or per norm group (kb21: 4 channels); refused on sm_80, where
 * there are no thread-block clusters, and for layers it cannot serve. */
static const char kb79_resident[] = "return layer \"kb79r\" {\n"
                                    "  input = { \"N\", 3, 16, 32, 32 }, strategy = \"resident\",\n"
                                    "  conv3d { out_channels = 16, kernel = 3 },\n"
                                    "  mul { param = \"multiplier\", shape = { 16, 1, 1, 1 } },\n"
                                    "  instance_norm {}, clamp { min = -1, max = 1 },\n"
                                    "  mul { param = \"multiplier\" }, max { dim = 1 },\n"
                                    "}\n";

static void resident_on_request(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string(kb79_resident);
    fg_plan *plan = malloc(sizeof *plan);
    assert_non_null(plan);
    fg_error err = {{0}};
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    assert_int_equal(fg_plan_layer(ir, &opts, plan, &err), 0);
    assert_int_equal(plan->strategy, FG_STRATEGY_RESIDENT);
    assert_int_equal(plan->n_passes, 1);
    const fg_pass *ps = &plan->passes[0];
    assert_int_equal(ps->kind, FG_PASS_RESIDENT);
    assert_string_equal(ps->kernel, "fg_pass0_resident");
    assert_true(ps->store_output);
    assert_int_equal(ps->res.channel_block, 16); /* the max over channels needs them all */
    assert_int_equal(ps->res.channel_group, 1);
    assert_int_equal(ps->res.norm_op, 2);
    assert_int_equal(ps->res.reduce_op, 5);
    assert_int_equal(ps->res.cluster, 8);        /* 806 KB per sample over 8 CTAs */
    assert_int_equal(ps->res.rows, 14 * 30);
    assert_true(ps->res.slice % 4 == 0 && ps->res.slice >= (14 * 30 + 7) / 8 * 30);
    assert_true(ps->launch.smem_bytes <= 227 * 1024);
    assert_int_equal(plan->n_buffers, 0);
    assert_int_equal(plan->n_accums, 0);

    /* no clusters before sm_90 */
    opts.sm = 80;
    assert_int_equal(fg_plan_layer(ir, &opts, plan, &err), -1);
    fgt_assert_contains(err.msg, "strategy \"resident\" is not possible");
    fgt_assert_contains(err.msg, "sm_80");

    /* a layer without a norm after the conv cannot be resident */
    fg_layer_ir *plain = fgt_load_string("return layer \"plain\" { input = { \"N\", 3, 8, 8 }, strategy = \"resident\",\n"
                                         "  conv2d { out_channels = 4, kernel = 3 }, relu {} }\n");
    opts.sm = 90;
    assert_int_equal(fg_plan_layer(plain, &opts, plan, &err), -1);
    fgt_assert_contains(err.msg, "is not possible for this layer");
    free(plain);
    free(plan);
    free(ir);
}

/* The conv engine and the tensor-core tiling: which layers run on tensor cores, how many
 * tiles a block takes, and shared memory as the template lays it out. */
static int64_t mma_smem_expected(const fg_conv_tiling *t, int64_t taps)
{
    int64_t steps = t->k_blocked ? t->ci_chunk / 8 * taps : (t->ci_chunk * taps + 7) / 8;
    int64_t buffers = t->tiles_per_block > 1 ? 2 : 1;
    int64_t table = t->k_blocked ? 0 : steps * 8;
    return 4 * (buffers * t->ci_chunk * t->ch_pitch + steps * (t->co_tile / 16) * 256 + table);
}

/* Plans a spec (or spec text) and returns its first pass's conv tiling. */
/* The first conv pass's tiling, planned for sm_90 with `engine` and `mma_tiles` (0: the
 * planner's choice). */
static const fg_conv_tiling *first_conv_with(fg_layer_ir *ir, fg_plan **plan, fg_engine_choice engine, int mma_tiles)
{
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    opts.engine = engine;
    opts.mma_tiles = mma_tiles;
    *plan = fgt_plan_with(ir, &opts);
    return &(*plan)->passes[0].conv;
}

static const fg_conv_tiling *first_conv(fg_layer_ir *ir, fg_plan **plan)
{
    return first_conv_with(ir, plan, FG_ENGINE_AUTO, 0);
}

static void tensor_core_tiling(void **state)
{
    (void)state;
    fg_plan *plan;
    /* KB21: tensor cores, one m-tile x 8 n-tiles, 8 tiles per block double-buffered */
    fg_layer_ir *ir = fgt_load_spec("kb21");
    const fg_conv_tiling *t = first_conv(ir, &plan);
    assert_int_equal(t->engine, FG_CONV_MMA);
    assert_int_equal(t->warp_mt * 16 * t->warp_rows * t->warp_ntw * 8 / 32, 32); /* accumulators a lane */
    assert_int_equal(t->tiles_per_block, 8);
    assert_int_equal(plan->passes[0].launch.smem_bytes, mma_smem_expected(t, 9));
    assert_int_equal(t->ch_pitch % 32, 8);
    assert_true(t->ch_pitch >= t->in_tile[0] * t->in_tile[1] * t->in_tile[2]);
    free(plan);
    /* sm_80 has mma.sync with TF32 too; before it, FMAs whatever is asked */
    fg_plan_options opts;
    fg_plan_options_init(&opts, 80);
    plan = calloc(1, sizeof *plan);
    assert_non_null(plan);
    fg_error err;
    assert_int_equal(fg_plan_layer(ir, &opts, plan, &err), 0);
    assert_int_equal(plan->passes[0].conv.engine, FG_CONV_MMA);
    opts.sm = 75;
    opts.engine = FG_ENGINE_PREFER_MMA;
    assert_int_equal(fg_plan_layer(ir, &opts, plan, &err), 0);
    assert_int_equal(plan->passes[0].conv.engine, FG_CONV_FMA);
    free(plan);
    free(ir);

    /* KB17: a long reduction, staged in chunks: one tile per block, one input buffer */
    ir = fgt_load_spec("kb17");
    t = first_conv(ir, &plan);
    assert_int_equal(t->engine, FG_CONV_MMA);
    assert_int_equal(t->warp_mt, 2);
    assert_true(t->ci_chunk < 64 && t->ci_chunk % 8 == 0);
    assert_int_equal(t->tiles_per_block, 1);
    assert_int_equal(plan->passes[0].launch.smem_bytes, mma_smem_expected(t, 9));
    assert_true(plan->passes[0].launch.smem_bytes <= 96 * 1024);
    free(plan);
    free(ir);

    /* KB79: 3 input channels, the offset table; a narrow row per warp */
    ir = fgt_load_spec("kb79");
    t = first_conv(ir, &plan);
    assert_int_equal(t->engine, FG_CONV_MMA);
    assert_false(t->k_blocked);
    assert_int_equal(t->warp_rows, 1);
    assert_int_equal(t->warp_ntw, 4);
    assert_int_equal(plan->passes[0].launch.smem_bytes, mma_smem_expected(t, 27));
    free(plan);
    free(ir);

    /* KB85: 64 channels and a reduction of 72 stay on FMAs unless forced; FMAs when asked */
    ir = fgt_load_spec("kb85");
    assert_int_equal(first_conv(ir, &plan)->engine, FG_CONV_FMA);
    free(plan);
    t = first_conv_with(ir, &plan, FG_ENGINE_PREFER_MMA, 0);
    assert_int_equal(t->engine, FG_CONV_MMA);
    assert_int_equal(plan->passes[0].launch.smem_bytes, mma_smem_expected(t, 9));
    free(plan);
    free(ir);
    ir = fgt_load_spec("kb21");
    assert_int_equal(first_conv_with(ir, &plan, FG_ENGINE_PREFER_FMA, 0)->engine, FG_CONV_FMA);
    free(plan);
    free(ir);

    /* a tiny output: one tile per sample, so one tile per block and no second buffer;
     * a caller's mma_tiles (FUSEGEN_MMA_TILES) asks for more and gets the second buffer */
    ir = fgt_load_string("return layer \"tiny\" {\n  input = { \"N\", 8, 10, 10 },\n"
                         "  conv2d { out_channels = 16, kernel = 3 },\n  relu {},\n}\n");
    t = first_conv(ir, &plan);
    assert_int_equal(t->engine, FG_CONV_MMA);
    assert_int_equal(t->tiles_per_block, 1);
    assert_int_equal(plan->passes[0].launch.grid_x, 1);
    assert_int_equal(plan->passes[0].launch.smem_bytes, mma_smem_expected(t, 9));
    free(plan);
    t = first_conv_with(ir, &plan, FG_ENGINE_AUTO, 3);
    assert_int_equal(t->tiles_per_block, 3);
    assert_int_equal(plan->passes[0].launch.smem_bytes, mma_smem_expected(t, 9));
    free(plan);
    free(ir);
}

/* The first conv's chan_lanes on the FMA engine (asserted), planned for sm_90. */
static int fma_chan_lanes(const char *source)
{
    fg_layer_ir *ir = fgt_load_string(source);
    fg_plan *plan;
    const fg_conv_tiling *t = first_conv_with(ir, &plan, FG_ENGINE_PREFER_FMA, 0);
    assert_int_equal(t->engine, FG_CONV_FMA);
    int lanes = t->chan_lanes;
    free(plan);
    free(ir);
    return lanes;
}

/* The FMA engine's channels-last mapping (planner.c conv_tiling_cl): a channels-last
 * depthwise 7x7 (ConvNeXt's) takes it, with layer_norm over the channels; the same conv in
 * NCHW, a wide group, or a thread tile set by hand keep the classic mapping. */
static void channels_last_fma_mapping(void **state)
{
    (void)state;
    static const char dw[] = "return layer \"dw\" {\n"
                             "  input = { \"N\", 96, 56, 56 },\n"
                             "  dtype = \"bf16\", layout = \"channels_last\",\n"
                             "  conv2d { out_channels = 96, kernel = 7, padding = 3, groups = 96 },\n"
                             "  layer_norm { dim = 1 },\n"
                             "}\n";
    fg_layer_ir *ir = fgt_load_string(dw);
    fg_plan *plan;
    const fg_conv_tiling *t = first_conv_with(ir, &plan, FG_ENGINE_AUTO, 0);
    assert_int_equal(t->engine, FG_CONV_FMA);
    assert_int_equal(t->chan_lanes, 32);
    assert_int_equal(t->thread_co, 1);
    assert_int_equal(t->ci_chunk, 32); /* the 32 groups' input channels */
    assert_int_equal(t->smem.pixel_pitch, 32);
    assert_int_equal(t->in_vec, 8); /* 16-byte vectors of 8 bf16 channels */
    assert_int_equal(plan->passes[0].launch.block, 32 * t->threads[0] * t->threads[1] * t->threads[2]);
    assert_int_equal(plan->passes[0].launch.grid_y, 3);
    int64_t pixels = (int64_t)t->in_tile[0] * t->in_tile[1] * t->in_tile[2];
    assert_int_equal(plan->passes[0].launch.smem_bytes, 4 * (pixels * 32 + 49 * 33));
    text_sink *sink = calloc(1, sizeof *sink);
    assert_non_null(sink);
    fg_plan_print(ir, plan, collect_line, sink);
    fgt_assert_contains(sink->buf, "channels innermost: tile 1x8x16 outputs x 32 channels per block");
    fgt_assert_contains(sink->buf, "input staged in 16-byte vectors (8 channels) where aligned");
    /* "auto" runs this conv twice (recompute_pays: the per-pixel norm on this mapping) */
    assert_int_equal(plan->strategy, FG_STRATEGY_RECOMPUTE);
    fgt_assert_contains(sink->buf, "strategy recompute");
    free(sink);
    free(plan);
    /* materialize (asked for): the buffer's NCHW stores 4 outputs along W at once */
    fg_plan_options forced;
    fg_plan_options_init(&forced, 90);
    forced.force_strategy = FG_STRATEGY_MATERIALIZE;
    plan = fgt_plan_with(ir, &forced);
    assert_int_equal(plan->strategy, FG_STRATEGY_MATERIALIZE);
    sink = calloc(1, sizeof *sink);
    assert_non_null(sink);
    fg_plan_print(ir, plan, collect_line, sink);
    fgt_assert_contains(sink->buf, "a buffer's (NCHW) stores 4 outputs along W at once");
    free(sink);
    free(plan);
    free(ir);
    /* NCHW, or a wide group (64 input channels) channels last: the classic mapping */
    assert_int_equal(fma_chan_lanes("return layer \"dw\" {\n"
                                    "  input = { \"N\", 96, 56, 56 },\n"
                                    "  conv2d { out_channels = 96, kernel = 7, padding = 3, groups = 96 },\n"
                                    "  relu {},\n"
                                    "}\n"),
                     0);
    assert_int_equal(fma_chan_lanes("return layer \"w\" {\n"
                                    "  input = { \"N\", 64, 20, 20 }, layout = \"channels_last\",\n"
                                    "  conv2d { out_channels = 16, kernel = 3 },\n"
                                    "}\n"),
                     0);
    /* a thread tile set by hand describes the classic mapping */
    static const char grouped[] = "return layer \"g\" {\n"
                                  "  input = { \"N\", 40, 23, 29 }, layout = \"channels_last\",\n"
                                  "  conv2d { out_channels = 40, kernel = 3, stride = 2, groups = 10 },\n"
                                  "}\n";
    ir = fgt_load_string(grouped);
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    opts.engine = FG_ENGINE_PREFER_FMA;
    plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->passes[0].conv.chan_lanes, 32); /* 8 groups of 4 a block, 2 blocks */
    assert_int_equal(plan->passes[0].launch.grid_y, 2);
    assert_int_equal(plan->passes[0].conv.in_vec, 4); /* 4 floats; 40 and 32 channels: whole vectors */
    free(plan);
    opts.conv_tile[0] = 2;
    plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->passes[0].conv.chan_lanes, 0);
    free(plan);
    free(ir);
    opts.conv_tile[0] = 0;
    /* the scalar staging: 12 lanes of 6 input channels (6 floats a pixel: no whole vectors),
     * and a prologue (it transforms element by element) */
    static const char narrow[] = "return layer \"n\" {\n"
                                 "  input = { \"N\", 6, 21, 19 }, layout = \"channels_last\",\n"
                                 "  conv2d { out_channels = 12, kernel = 3, padding = 1, groups = 3 },\n"
                                 "}\n";
    ir = fgt_load_string(narrow);
    plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->passes[0].conv.chan_lanes, 12);
    assert_int_equal(plan->passes[0].conv.in_vec, 0);
    free(plan);
    free(ir);
    static const char pro[] = "return layer \"p\" {\n"
                              "  input = { \"N\", 32, 9, 9 }, layout = \"channels_last\",\n"
                              "  relu {},\n"
                              "  conv2d { out_channels = 32, kernel = 3, groups = 32 },\n"
                              "}\n";
    ir = fgt_load_string(pro);
    plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->passes[0].conv.chan_lanes, 32);
    assert_int_equal(plan->passes[0].conv.in_vec, 0);
    free(plan);
    free(ir);
}

static void plan_print_mentions_every_pass(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb23");
    fg_plan *plan = fgt_plan(ir, FG_STRATEGY_MATERIALIZE);
    text_sink *t = printed_plan(ir, plan);
    fgt_assert_contains(t->buf, "plan: 4 passes");
    fgt_assert_contains(t->buf, "fg_pass0_conv");
    fgt_assert_contains(t->buf, "fg_pass1_finalize");
    fgt_assert_contains(t->buf, "fg_pass2_map");
    fgt_assert_contains(t->buf, "fg_pass3_map");
    fgt_assert_contains(t->buf, "buffer b0: v0, 475200 floats per sample");
    fgt_assert_contains(t->buf, "statistics s1: sum (fp64) of v1, 1 per sample over 475200 elements each");
    t->len = 0;
    fg_ir_print(ir, collect_line, t);
    fgt_assert_contains(t->buf, "input      [N, 3, 24, 32, 32]");
    fgt_assert_contains(t->buf, "-> [N, 24, 22, 30, 30]");
    fgt_assert_contains(t->buf, "param group_norm.weight");
    free(t);
    free(plan);
    free(ir);
}

/* A pass with more kernel parameters than the old fixed table held (48): 46 parameters of
 * their own after the conv, then a norm. The plan keeps every pass and argument (it once
 * overflowed the table and turned the finalize pass into a nameless map pass). */
static void many_parameters_in_one_pass(void **state)
{
    (void)state;
    char src[8192];
    size_t len = (size_t)snprintf(src, sizeof src, "return layer \"many_args\" {\n  input = { \"N\", 3, 12, 12 },\n"
                                                   "  conv2d { out_channels = 4, kernel = 3 },\n");
    for (int i = 0; i < 46; i++)
        len += (size_t)snprintf(src + len, sizeof src - len, "  mul { param = \"p%d\", shape = { 1 } },\n", i);
    snprintf(src + len, sizeof src - len, "  instance_norm {},\n}\n");
    fg_layer_ir *ir = fgt_load_string(src);
    fg_plan *plan = fgt_plan(ir, -1);
    assert_int_equal(plan->n_passes, 3);
    assert_int_equal(plan->passes[0].kind, FG_PASS_CONV);
    assert_int_equal(plan->passes[1].kind, FG_PASS_FINALIZE);
    assert_int_equal(plan->passes[2].kind, FG_PASS_MAP);
    /* input, weight, bias, 46 parameters, the buffer, the accumulator, batch, batch base */
    assert_int_equal(plan->passes[0].n_args, 53);
    assert_true(plan->passes[0].n_args <= FG_MAX_ARGS);
    for (int i = 0; i < plan->n_passes; i++)
        assert_true(plan->passes[i].kernel[0] != '\0');
    free(plan);
    free(ir);
}

/* Convs that cannot be generated are refused by the planner with the spec's line and the
 * reason, in milliseconds (they once planned, then rendered for minutes into gigabytes). */
static void ungeneratable_convs_are_refused(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"return layer \"t\" {\n  input = { \"N\", 1, 16384, 16384 },\n  conv2d { out_channels = 1, kernel = 8192 },\n}\n",
         "t.lua:3: conv2d: field 'kernel' has 67108864 taps"},
        {"return layer \"t\" {\n  input = { \"N\", 1, 8, 2097160 },\n"
         "  conv2d { out_channels = 1, kernel = { 1, 3 }, dilation = 1048576 },\n}\n",
         "t.lua:3: conv2d: one input channel of a block's tile"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fg_layer_ir *ir = malloc(sizeof *ir);
        fg_plan *plan = malloc(sizeof *plan);
        fg_error err = {{0}};
        assert_int_equal(fg_spec_load_string("t.lua", cases[i].spec, strlen(cases[i].spec), ir, &err), 0);
        for (int sm = 80; sm <= 90; sm += 10) {
            fg_plan_options opts;
            fg_plan_options_init(&opts, sm);
            assert_int_equal(fg_plan_layer(ir, &opts, plan, &err), -1);
            fgt_assert_contains(err.msg, cases[i].want);
            fgt_assert_contains(err.msg, "cannot be generated");
        }
        free(plan);
        free(ir);
    }
}

/* Which engine computes the conv, by architecture and precision (bench/NOTES.md v6). */
static fg_pass_kind first_pass_with(const char *arch, int in_channels, const char *conv, const char *precision)
{
    char src[512];
    snprintf(src, sizeof src,
             "return layer \"engine\" {\n"
             "  input = { \"N\", %d, 16, 16 }, precision = \"%s\",\n"
             "  %s,\n"
             "  relu {},\n"
             "}\n",
             in_channels, precision, conv);
    fg_layer_ir *ir = fgt_load_string(src);
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, arch);
    fg_plan *plan = fgt_plan_with(ir, &opts);
    fg_pass_kind kind = plan->passes[0].kind;
    free(plan);
    free(ir);
    return kind;
}

static fg_pass_kind first_pass_on(const char *arch, const char *conv, const char *precision)
{
    return first_pass_with(arch, 32, conv, precision);
}

static void engine_by_arch_and_precision(void **state)
{
    (void)state;
    const char *wide = "conv2d { out_channels = 32, kernel = 3 }";                     /* K 288 */
    const char *short_k = "conv2d { out_channels = 32, kernel = 1 }";                  /* K 32 */
    const char *depthwise = "conv2d { out_channels = 32, kernel = 3, groups = 32 }"; /* 1 channel a group */
    const char *four = "conv2d { out_channels = 32, kernel = 3, groups = 8 }";       /* 4 channels a group */
    /* fp32: wgmma on sm_90a for a long enough reduction, else the conv pass */
    assert_int_equal(first_pass_on("sm_90a", wide, "fp32"), FG_PASS_PACK_WEIGHTS);
    assert_int_equal(first_pass_on("sm_90a", short_k, "fp32"), FG_PASS_CONV);
    assert_int_equal(first_pass_on("sm_90", wide, "fp32"), FG_PASS_CONV);
    assert_int_equal(first_pass_on("sm_90a", depthwise, "fp32"), FG_PASS_CONV);
    /* ... a 1x1 conv with 64 channels in and out (K 64) on wgmma, 16 outputs on 144 inputs
     * (K 144) on mma.sync (bench/engine-choice.py's measurements, NOTES v7) */
    assert_int_equal(first_pass_with("sm_90a", 64, "conv2d { out_channels = 64, kernel = 1 }", "fp32"),
                     FG_PASS_PACK_WEIGHTS);
    assert_int_equal(first_pass_with("sm_90a", 64, "conv2d { out_channels = 32, kernel = 1 }", "fp32"), FG_PASS_CONV);
    assert_int_equal(first_pass_with("sm_90a", 16, "conv2d { out_channels = 16, kernel = 3 }", "fp32"), FG_PASS_CONV);
    /* tf32: wgmma on sm_90a whatever the reduction, cuDNN elsewhere ... */
    assert_int_equal(first_pass_on("sm_90a", short_k, "tf32"), FG_PASS_PACK_WEIGHTS);
    assert_int_equal(first_pass_on("sm_80", wide, "tf32"), FG_PASS_CUDNN);
    assert_int_equal(first_pass_on("sm_90", short_k, "tf32"), FG_PASS_CUDNN);
    /* ... except narrow groups, which the exact conv pass runs faster than either */
    assert_int_equal(first_pass_on("sm_90a", depthwise, "tf32"), FG_PASS_CONV);
    assert_int_equal(first_pass_on("sm_90a", four, "tf32"), FG_PASS_CONV);
    assert_int_equal(first_pass_on("sm_80", depthwise, "tf32"), FG_PASS_CONV);
    /* ... and, on sm_90a, 16-31 outputs a group where the fp32 rule keeps mma.sync (KB79,
     * KB23: one TF32 product on wgmma measured 1.6-1.8x slower); off Hopper they go to cuDNN */
    const char *sixteen = "conv2d { out_channels = 16, kernel = 3 }"; /* K 27 */
    assert_int_equal(first_pass_with("sm_90a", 3, sixteen, "tf32"), FG_PASS_CONV);
    assert_int_equal(first_pass_with("sm_80", 3, sixteen, "tf32"), FG_PASS_CUDNN);
    assert_int_equal(first_pass_with("sm_90a", 64, "conv2d { out_channels = 16, kernel = 1 }", "tf32"),
                     FG_PASS_CONV);
    /* ... wide inputs included (the wgmma tiling packs them in channel blocks): 512 -> 16 1x1
     * follows the fp32 rule too */
    assert_int_equal(first_pass_with("sm_90a", 512, "conv2d { out_channels = 16, kernel = 1 }", "tf32"),
                     FG_PASS_CONV);
    /* the input-packing pass transposes 32 pixels of 383 TF32 channels at most through its 48
     * KB of shared memory, wider inputs in channel blocks: wgmma either way (it had been
     * mma.sync past 376 channels) */
    assert_int_equal(first_pass_with("sm_90a", 376, wide, "fp32"), FG_PASS_PACK_WEIGHTS);
    assert_int_equal(first_pass_with("sm_90a", 377, wide, "fp32"), FG_PASS_PACK_WEIGHTS);
    assert_int_equal(first_pass_with("sm_90a", 1024, wide, "fp32"), FG_PASS_PACK_WEIGHTS);
}

/* Where the runtime times two engines at the first run (fg_plan_engine_alternative): fp32 on
 * sm_90a between what the measurements settled, never when an engine is forced. */
static bool engine_open(const char *arch, int in_channels, int out_channels, int kernel, const char *precision,
                        fg_engine_choice engine, fg_engine_choice *other)
{
    char src[512];
    snprintf(src, sizeof src,
             "return layer \"open\" {\n  input = { \"N\", %d, 32, 32 }, precision = \"%s\",\n"
             "  conv2d { out_channels = %d, kernel = %d },\n  relu {},\n}\n",
             in_channels, precision, out_channels, kernel);
    fg_layer_ir *ir = fgt_load_string(src);
    fg_plan_options opts, alternative;
    fg_plan_options_for_arch(&opts, arch);
    opts.engine = engine;
    fg_plan *plan = fgt_plan_with(ir, &opts);
    bool open = fg_plan_engine_alternative(ir, &opts, plan, &alternative);
    if (open) {
        *other = alternative.engine;
        assert_int_equal(alternative.sm, opts.sm); /* only the engine differs */
    }
    free(plan);
    free(ir);
    return open;
}

static void engine_left_open_is_timed(void **state)
{
    (void)state;
    fg_engine_choice other = FG_ENGINE_AUTO;
    /* KB85's conv (8 -> 64, K 72) on the FMA engine: wgmma timed against it */
    assert_true(engine_open("sm_90a", 8, 64, 3, "fp32", FG_ENGINE_AUTO, &other));
    assert_int_equal(other, FG_ENGINE_PREFER_WGMMA);
    /* 32 -> 32 3x3 (K 288, 32 outputs) on wgmma: mma.sync timed against it */
    assert_true(engine_open("sm_90a", 32, 32, 3, "fp32", FG_ENGINE_AUTO, &other));
    assert_int_equal(other, FG_ENGINE_PREFER_MMA);
    /* settled: wide and long, short, narrow; another precision or architecture; forced */
    assert_false(engine_open("sm_90a", 64, 128, 3, "fp32", FG_ENGINE_AUTO, &other));
    assert_false(engine_open("sm_90a", 3, 64, 3, "fp32", FG_ENGINE_AUTO, &other));
    assert_false(engine_open("sm_90a", 16, 16, 3, "fp32", FG_ENGINE_AUTO, &other));
    assert_false(engine_open("sm_90a", 8, 64, 3, "tf32", FG_ENGINE_AUTO, &other));
    assert_false(engine_open("sm_90", 8, 64, 3, "fp32", FG_ENGINE_AUTO, &other));
    assert_false(engine_open("sm_90a", 8, 64, 3, "fp32", FG_ENGINE_PREFER_MMA, &other));
}

/* ---- split K on the wgmma engine (wgmma_split, fg_wgmma_splits) ----------------------------- */

/* A conv on sm_90a, `in` channels of `size`^spatial, a 3x3(x3) kernel, then `tail`; its
 * splits counted in waves where `waves` (fg_plan_options.split_waves). */
static fg_plan *conv_plan_waves(const char *precision, int spatial, int in, int out, int size, int stride, int groups,
                                const char *tail, int split_k, int waves, fg_layer_ir **ir_out)
{
    char src[1024], depth[16] = "";
    if (spatial == 3)
        snprintf(depth, sizeof depth, "%d, ", size);
    snprintf(src, sizeof src,
             "return layer \"split\" {\n  input = { \"N\", %d, %s%d, %d },\n  precision = \"%s\",\n"
             "  conv%dd { out_channels = %d, kernel = 3, stride = %d, padding = 1, groups = %d },\n  %s,\n}\n",
             in, depth, size, size, precision, spatial, out, stride, groups, tail);
    fg_layer_ir *ir = fgt_load_string(src);
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.split_k = split_k;
    opts.split_waves = waves;
    fg_plan *plan = fgt_plan_with(ir, &opts);
    *ir_out = ir;
    return plan;
}

/* The same with the splits within one wave (the default). */
static fg_plan *conv_plan(const char *precision, int spatial, int in, int out, int size, int stride, int groups,
                          const char *tail, int split_k, fg_layer_ir **ir_out)
{
    return conv_plan_waves(precision, spatial, in, out, size, stride, groups, tail, split_k, 0, ir_out);
}

/* The conv pass's wgmma split: the most splits, and the splits at `batch`. */
static int splits_at(const fg_plan *plan, int64_t batch)
{
    for (int i = 0; i < plan->n_passes; i++)
        if (plan->passes[i].kind == FG_PASS_CONV && plan->passes[i].conv.engine == FG_CONV_WGMMA)
            return fg_wgmma_splits(&plan->wgmma, fg_wgmma_tiles(&plan->wgmma, plan->passes[i].launch.grid_x, batch));
    fail_msg("no wgmma conv pass");
    return 0;
}

/* The small grids of issue 11 (few tiles, long K) split; tiles x splits stay within 132 SMs
 * at every batch, and each split keeps >= 2 x stages K chunks. */
static void split_k_fills_small_grids(void **state)
{
    (void)state;
    static const struct {
        int spatial, in, out, size, stride;
        int64_t batch;
        int most, at_batch;
    } cases[] = {
        {2, 256, 256, 14, 1, 1, 12, 12}, /* 4 tiles a sample, 72 K chunks, 3 stages */
        {2, 256, 256, 7, 1, 32, 12, 5},  /* 2 tiles a sample; flat: 13 x 2 at batch 32 */
        {2, 128, 256, 28, 2, 8, 6, 4},   /* 14x14 outputs, 4 tiles, 36 K chunks (not flat: 196 of 256 rows) */
        {3, 128, 128, 8, 1, 16, 16, 2},  /* 4 tiles, 108 K chunks: at most 16 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fg_layer_ir *ir;
        fg_plan *plan = conv_plan("fp32", cases[i].spatial, cases[i].in, cases[i].out, cases[i].size, cases[i].stride,
                                  1, "relu {}", 0, &ir);
        const fg_wgmma_tiling *w = &plan->wgmma;
        assert_int_equal(w->parts, 2);
        assert_int_equal(w->split_k, cases[i].most);
        assert_int_equal(splits_at(plan, cases[i].batch), cases[i].at_batch);
        assert_true(w->kch / w->split_k >= 2 * w->stages);
        for (int64_t n = 1; n <= 256; n++) {
            int s = splits_at(plan, n);
            assert_true(s >= 1 && s <= w->split_k);
            assert_true(s == 1 || fg_wgmma_tiles(w, plan->passes[2].launch.grid_x, n) * s <= 132);
        }
        /* the workspace pieces: a counter per tile and a partial tile per unit, for 132 units;
         * the conv pass writes both; the flag fits in its shared memory */
        assert_int_equal(w->split_counters, 0);
        assert_int_equal(plan->buffers[w->split_counters].fixed, 132);
        assert_int_equal(plan->buffers[w->split_partials].fixed, 132 * w->split_slot);
        assert_int_equal(w->split_slot, (int64_t)w->wgmt * w->bn / 2 * 256);
        const fg_pass *conv = &plan->passes[2];
        assert_int_equal(conv->kind, FG_PASS_CONV);
        int found = 0;
        for (int a = 0; a < conv->n_args; a++)
            found += conv->args[a].kind == FG_ARG_BUFFER &&
                     (conv->args[a].index == w->split_counters || conv->args[a].index == w->split_partials);
        assert_int_equal(found, 2);
        assert_true(1024 + w->flag_offset + 4 <= conv->launch.smem_bytes && conv->launch.smem_bytes <= 227 * 1024);
        free(plan);
        free(ir);
    }
    /* tf32 (one product, deeper ring), a statistics epilogue, groups: split too */
    fg_layer_ir *ir;
    fg_plan *plan = conv_plan("tf32", 2, 256, 256, 14, 1, 1, "relu {}", 0, &ir);
    assert_true(plan->wgmma.split_k >= 2 && plan->wgmma.kch / plan->wgmma.split_k >= 2 * plan->wgmma.stages);
    free(plan);
    free(ir);
    plan = conv_plan("fp32", 2, 256, 256, 14, 1, 1, "instance_norm {}", 0, &ir);
    assert_int_equal(plan->wgmma.split_k, 12);
    free(plan);
    free(ir);
    plan = conv_plan("fp32", 2, 256, 256, 14, 1, 2, "relu {}", 0, &ir); /* 2 groups of 128: 36 K chunks */
    assert_int_equal(plan->wgmma.split_k, 6);
    free(plan);
    free(ir);
}

/* Grids that fill the GPU at batch 1 never split (the kernel is the unsplit one); neither do
 * the reference layers, on any engine choice. */
static void split_k_leaves_large_grids(void **state)
{
    (void)state;
    fg_layer_ir *ir;
    /* 64 -> 64 3x3 on 128x128: 128 tiles a sample, so no second split fits in 132 SMs */
    fg_plan *plan = conv_plan("fp32", 2, 64, 64, 128, 1, 1, "relu {}", 0, &ir);
    assert_int_equal(plan->wgmma.parts, 2);
    assert_int_equal(plan->wgmma.split_k, 1);
    assert_int_equal(plan->wgmma.split_counters, -1);
    assert_int_equal(splits_at(plan, 1), 1);
    free(plan);
    free(ir);
    /* a short K (16 -> 64: 5 K chunks) keeps every chunk in one CTA */
    plan = conv_plan("fp32", 2, 16, 64, 14, 1, 1, "relu {}", 0, &ir);
    if (plan->wgmma.parts)
        assert_int_equal(plan->wgmma.split_k, 1);
    free(plan);
    free(ir);
    for (int i = 0; i < FGT_N_REFERENCE_SPECS; i++) {
        ir = fgt_load_spec(fgt_reference_specs[i]);
        for (int engine = 0; engine < 2; engine++) {
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.engine = engine ? FG_ENGINE_PREFER_WGMMA : FG_ENGINE_AUTO;
            plan = fgt_plan_with(ir, &opts);
            if (plan->wgmma.parts && plan->wgmma.split_k != 1)
                fail_msg("%s: split K in %d", ir->name, plan->wgmma.split_k);
            free(plan);
        }
        free(ir);
    }
}

/* Flat tiles (fg_wgmma_tiling.flat): where a sample leaves more than a quarter of its tiles'
 * rows empty and the epilogue keys nothing by sample, a tile's rows run on over the next
 * samples; fg_wgmma_tiles counts the batch's pixels flattened, and `fusegen plan` says so.
 * Not with statistics (an instance norm, a channel reduction), nor at 56x56 (2 % empty),
 * 28x28 (an eighth) or 14x14 (60 of 256 rows, 23 %: measured slower flat, bench/NOTES.md v40). */
static void wgmma_flat_tiles_where_images_are_small(void **state)
{
    (void)state;
    static const struct {
        int size, out;
        const char *tail;
        bool flat;
        int64_t tiles_at_32; /* a launch's tiles at batch 32 */
    } cases[] = {
        {7, 512, "relu {}", true, 13 * 4},         /* 49 pixels: 1568 rows at batch 32, 13 tiles, 4 blocks */
        {12, 128, "relu {}", true, 36},            /* 144 pixels: 2 tiles a sample, 36 flat */
        {14, 128, "relu {}", false, 2 * 32},       /* 196 pixels: 2 tiles a sample, 60 of 256 rows empty */
        {5, 64, "gelu {}", true, 7},               /* 25 pixels: 800 rows */
        {56, 128, "relu {}", false, 25 * 32},      /* 3136 pixels: 25 tiles, 64 rows empty */
        {28, 128, "relu {}", false, 7 * 32},       /* 784 pixels: 7 tiles, 112 of 896 rows empty */
        {7, 512, "instance_norm {}", false, 4 * 32},
        {7, 128, "logsumexp { dim = 1, keepdim = true }", false, 32},
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.wgmma_alternate = 1; /* shared tiles, as counted here (tiles in turn: wgmma_tiles_in_turn) */
    opts.wgmma_flat_predicated = 1; /* the flat tiles' branch (predicated stores: wgmma_flat_predicated) */
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "return layer \"t\" {\n  input = { \"N\", 256, %d, %d },\n  dtype = \"bf16\",\n"
                 "  layout = \"channels_last\",\n  precision = \"tf32\",\n"
                 "  conv2d { out_channels = %d, kernel = 1 },\n  %s,\n}\n",
                 cases[i].size, cases[i].size, cases[i].out, cases[i].tail);
        fg_layer_ir *ir = fgt_load_string(spec);
        fg_plan *plan = fgt_plan_with(ir, &opts);
        const fg_wgmma_tiling *w = &plan->wgmma;
        assert_true(w->parts > 0);
        if (w->flat != cases[i].flat)
            fail_msg("%dx%d %s: flat %d", cases[i].size, cases[i].size, cases[i].tail, (int)w->flat);
        assert_int_equal(w->opix, (int64_t)cases[i].size * cases[i].size);
        int conv = -1;
        for (int p = 0; p < plan->n_passes; p++)
            if (plan->passes[p].kind == FG_PASS_CONV)
                conv = p;
        assert_true(conv >= 0);
        const int64_t grid_x = plan->passes[conv].launch.grid_x;
        assert_int_equal(grid_x, (int64_t)w->m_tiles * w->nblk); /* a sample's tiles, as ever */
        assert_int_equal(fg_wgmma_tiles(w, grid_x, 32), cases[i].tiles_at_32);
        assert_int_equal(fg_wgmma_tiles(w, grid_x, 1), grid_x); /* one sample: its own tiles either way */
        text_sink *t = printed_plan(ir, plan);
        if (cases[i].flat)
            fgt_assert_contains(t->buf, "so a tile's 128 rows run on over the next samples' pixels");
        else
            fgt_assert_not_contains(t->buf, "flat tiles");
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        if (cases[i].flat) {
            fgt_assert_contains(src.source, "r.n = (int)(f / OPIX);");
            fgt_assert_contains(src.source, "const int ntiles = (int)(((long long)batch * OPIX + BM - 1) / BM) * (NBLK * GROUPS);");
            fgt_assert_contains(src.source, "const int n0 = tl.n, g = tl.g, co0 = tl.nb * BN, pm0 = tl.m0 + row0;");
            fgt_assert_contains(src.source, "&& n < batch) {");
        } else {
            fgt_assert_not_contains(src.source, "n0 = tl.n");
            fgt_assert_contains(src.source, "r.n = t / GROUPS;");
        }
        free(t);
        fg_rendered_free(&src);
        free(plan);
        free(ir);
    }
}

/* FUSEGEN_SPLIT_K (fg_plan_options.split_k): 1 turns split K off, N sets the most splits
 * (past the K chunks' bound, still within the SMs); `fusegen plan` says so. */
static void split_k_forced_and_printed(void **state)
{
    (void)state;
    fg_layer_ir *ir;
    fg_plan *plan = conv_plan("fp32", 2, 256, 256, 14, 1, 1, "relu {}", 1, &ir);
    assert_int_equal(plan->wgmma.split_k, 1);
    assert_int_equal(splits_at(plan, 1), 1);
    free(plan);
    free(ir);
    plan = conv_plan("fp32", 2, 256, 256, 14, 1, 1, "relu {}", 24, &ir);
    assert_int_equal(plan->wgmma.split_k, 24);
    assert_int_equal(plan->wgmma.split_min_chunks, 3);
    assert_int_equal(splits_at(plan, 1), 24);
    assert_int_equal(splits_at(plan, 2), 16);
    free(plan);
    free(ir);
    plan = conv_plan("fp32", 2, 256, 256, 14, 1, 1, "relu {}", 0, &ir);
    text_sink *t = printed_plan(ir, plan);
    fgt_assert_contains(t->buf, "split K in up to 12: a sample's 4 tiles fill 4 of 132 SMs");
    fgt_assert_contains(t->buf, "72 K chunks (>= 6 each)");
    fgt_assert_contains(t->buf, "N=1: 12, N=2: 12, N=4: 8, N=8: 4, N=16: 2, N=32: 1 (and larger: none)");
    fgt_assert_contains(t->buf, "buffer b0: split K's arrival counters, 132 words");
    free(t);
    free(plan);
    free(ir);
}

/* ---- split K counted in waves (FUSEGEN_SPLIT_WAVES=1, fg_plan_options.split_waves) ---------- */

/* A split tiling as the planner leaves it under the wave rule (gen/planner.c, wgmma_split):
 * 528 partials (4 waves of 132), a chunk costing 3 and a partial 1. */
static fg_wgmma_tiling waves_tiling(int kch, int split_k, int partial_cost)
{
    fg_wgmma_tiling w;
    memset(&w, 0, sizeof w);
    w.kch = kch;
    w.split_k = split_k;
    w.split_fill = 4 * 132;
    w.split_waves = 1;
    w.split_sms = 132;
    w.split_chunk_cost = 3;
    w.split_partial_cost = partial_cost;
    return w;
}

/* The launch rule: the S in 1..split_k of the least 3 x ceil(tiles S / 132) x ceil(kch / S) + S
 * (S > 1), within 528 units, the fewer on a tie; the one-wave rule on the same tiles (the
 * default) as it was. */
static void split_waves_rule(void **state)
{
    (void)state;
    static const struct {
        int64_t tiles;
        int kch, split_k, waves, one_wave;
    } cases[] = {
        /* ConvNeXt 768's layer c at batch 32 (78 flat tiles, 48 chunks, at most 4 splits at 5
         * stages): 3 splits, 2 waves of 16 chunks (cost 99 against 144 unsplit, 146 at 2
         * splits, 112 at 4: 3 waves of 12) */
        {78, 48, 4, 3, 1},
        /* ... with 16 allowed: 5 (3 waves of 10 chunks, 95); 6 take 4 waves (102), 7 pass 528 */
        {78, 48, 16, 5, 1},
        /* NOTES' ConvNeXt 384 c (147 tiles, 24 chunks): 2 waves of 24 unsplit (144), 3 of 12 at
         * 2 splits (110), 4 of 8 at 3 (99); 4 splits would be 588 units, past the 528 partials */
        {147, 24, 2, 2, 1},
        {147, 24, 3, 3, 1},
        {147, 24, 4, 3, 1},
        /* ConvNeXt 384 c as planned today at batch 32 (14x14 not flat: 192 tiles, 2 splits at
         * most): 3 waves of 12 (110) against 2 of 24 (144) */
        {192, 24, 2, 2, 1},
        /* S stays 1: a whole wave (2 splits take 2 waves of half the chunks: the fixup tips it),
         * 96 tiles of 24 chunks (72 against 74), and 300 tiles (2 splits pass 528) */
        {132, 48, 4, 1, 1},
        {96, 24, 2, 1, 1},
        {300, 48, 4, 1, 1},
        /* few tiles: the same as one wave where every split fits it (4 tiles, 72 chunks, 12:
         * 3 x 6 + 12 = 30 against 11 splits' 3 x 7 + 11 = 32) */
        {4, 72, 12, 12, 12},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fg_wgmma_tiling w = waves_tiling(cases[i].kch, cases[i].split_k, 1);
        const int s = fg_wgmma_splits(&w, cases[i].tiles);
        if (s != cases[i].waves)
            fail_msg("%lld tiles of %d chunks, at most %d: %d splits counted in waves, expected %d",
                     (long long)cases[i].tiles, cases[i].kch, cases[i].split_k, s, cases[i].waves);
        assert_true(s == 1 || cases[i].tiles * s <= w.split_fill);
        /* the default rule on the same tiling: within one wave of 132 */
        fg_wgmma_tiling one = w;
        one.split_waves = one.split_sms = one.split_chunk_cost = one.split_partial_cost = 0;
        one.split_fill = 132;
        assert_int_equal(fg_wgmma_splits(&one, cases[i].tiles), cases[i].one_wave);
    }
    /* a tie takes the fewer splits: without a partial's cost, 10 tiles of 12 chunks cost 6 at
     * 6 to 11 splits (one wave of 2 chunks) */
    fg_wgmma_tiling w = waves_tiling(12, 11, 0);
    assert_int_equal(fg_wgmma_splits(&w, 10), 6);
    assert_int_equal(fg_wgmma_splits(&w, 0), 1);
    w.split_k = 1; /* a plan that never splits */
    assert_int_equal(fg_wgmma_splits(&w, 10), 1);
}

/* The planner under the wave rule: the most splits bounded by the 528 partials over a
 * sample's tiles instead of one wave, the workspace holding 528 counters and partial tiles,
 * the kernel rendering the rule's constants; a layer no batch would split keeps the unsplit
 * kernel; `fusegen plan` names the rule. */
static void split_waves_planned(void **state)
{
    (void)state;
    fg_layer_ir *ir;
    /* 256 -> 256 3x3 on 7x7 (flat: 2 tiles a sample at 37 x 2 at batch 96, 72 chunks) */
    fg_plan *plan = conv_plan_waves("fp32", 2, 256, 256, 7, 1, 1, "relu {}", 0, 1, &ir);
    const fg_wgmma_tiling *w = &plan->wgmma;
    assert_int_equal(w->split_waves, 1);
    assert_int_equal(w->split_k, 12);
    assert_int_equal(w->split_fill, 528);
    assert_int_equal(w->split_sms, 132);
    assert_int_equal(plan->buffers[w->split_counters].fixed, 528);
    assert_int_equal(plan->buffers[w->split_partials].fixed, 528 * w->split_slot);
    assert_int_equal(splits_at(plan, 96), 7); /* 518 units, 4 waves of 10 or 11 chunks */
    for (int64_t n = 1; n <= 300; n++) {
        const int s = splits_at(plan, n);
        assert_true(s >= 1 && s <= w->split_k);
        assert_true(s == 1 || fg_wgmma_tiles(w, plan->passes[2].launch.grid_x, n) * s <= w->split_fill);
    }
    fg_rendered src;
    fg_error err = {{0}};
    assert_int_equal(fg_render(ir, plan, &src, &err), 0);
    fgt_assert_contains(src.source, "constexpr int SPLIT_K = 12, SPLIT_FILL = 528,");
    fgt_assert_contains(src.source, "constexpr int SPLIT_SMS = 132, SPLIT_CHUNK_COST = 3, SPLIT_PARTIAL_COST = 1;");
    fg_rendered_free(&src);
    text_sink *t = printed_plan(ir, plan);
    fgt_assert_contains(t->buf, "split K in up to 12, counted in waves (FUSEGEN_SPLIT_WAVES=1)");
    fgt_assert_contains(t->buf, "+ 1/3 of a chunk a partial (S > 1), tiles x S <= 528");
    fgt_assert_contains(t->buf, "N=64: 5 (50 tiles, 2 waves), N=128: 4 (98 tiles, 3 waves)");
    fgt_assert_contains(t->buf, "N=512 and larger: none (2 x 392 tiles > 528)");
    fgt_assert_contains(t->buf, "buffer b0: split K's arrival counters, 528 words");
    fgt_assert_contains(t->buf, "528 of 16384 floats");
    free(t);
    free(plan);
    free(ir);
    /* the default: one wave, 132 partials, the rule's constants not rendered */
    plan = conv_plan("fp32", 2, 256, 256, 7, 1, 1, "relu {}", 0, &ir);
    assert_int_equal(plan->wgmma.split_waves, 0);
    assert_int_equal(plan->wgmma.split_fill, 132);
    assert_int_equal(splits_at(plan, 96), 1);
    assert_int_equal(fg_render(ir, plan, &src, &err), 0);
    fgt_assert_not_contains(src.source, "SPLIT_SMS");
    fg_rendered_free(&src);
    free(plan);
    free(ir);
    /* 64 -> 64 3x3 on 128x128 (128 tiles a sample, 18 chunks): 2 splits fit the 528 partials
     * at batches 1 and 2, but a wave of 128 tiles in 2 splits takes 2 waves of 9 chunks, no
     * faster: no batch splits, so no split kernel */
    plan = conv_plan_waves("fp32", 2, 64, 64, 128, 1, 1, "relu {}", 0, 1, &ir);
    assert_int_equal(plan->wgmma.parts, 2);
    assert_int_equal(plan->wgmma.split_k, 1);
    assert_int_equal(plan->wgmma.split_waves, 0);
    assert_int_equal(plan->wgmma.split_counters, -1);
    free(plan);
    free(ir);
}

/* The wgmma conv pass of `plan` (-1: none). */
static int wgmma_conv_pass(const fg_plan *plan)
{
    for (int i = 0; i < plan->n_passes; i++)
        if (plan->passes[i].kind == FG_PASS_CONV && plan->passes[i].conv.engine == FG_CONV_WGMMA)
            return i;
    return -1;
}

/* A reduction over the channels after a wgmma conv whose tile spans every output channel
 * (groups 1, nblk 1) runs in the conv pass's epilogue: the conv pass writes the reduced
 * output, no buffer holds the value before the reduction, no map pass reads it. */
static void wgmma_channel_reduction_fused(void **state)
{
    (void)state;
    /* issue 11's example: 64 -> 128 3x3 on 128x128, a shift, relu, logsumexp keeping the dim */
    fg_layer_ir *ir = fgt_load_string("return layer \"lse\" {\n"
                                      "  input = { \"N\", 64, 128, 128 },\n"
                                      "  conv2d { out_channels = 128, kernel = { 3, 3 } },\n"
                                      "  add { param = \"shift\" },\n"
                                      "  relu {},\n"
                                      "  logsumexp { dim = 1, keepdim = true },\n"
                                      "}\n");
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    fg_plan *plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->n_passes, 3); /* the two packing passes and the conv */
    const fg_pass *conv = &plan->passes[2];
    assert_int_equal(wgmma_conv_pass(plan), 2);
    assert_int_equal(plan->wgmma.nblk, 1);
    assert_int_equal(conv->first, 0);
    assert_int_equal(conv->last, 3);
    assert_int_equal(conv->domain, 3);
    assert_int_equal(conv->chan_reduce, 3);
    assert_true(conv->store_output);
    assert_int_equal(conv->store_buffer, -1);
    assert_int_equal(conv->n_extra_stores, 0);
    assert_int_equal(conv->n_feeds, 0);
    assert_int_equal(plan->n_accums, 0);
    for (int b = 0; b < plan->n_buffers; b++)
        assert_int_equal(plan->buffers[b].value, -1); /* packed operands only */
    assert_non_null(find_arg(conv, FG_ARG_OUTPUT, 0));
    text_sink *t = printed_plan(ir, plan);
    fgt_assert_contains(t->buf, "plan: 3 passes");
    fgt_assert_contains(t->buf, "computes conv v0..v3 inline, writes the output");
    fgt_assert_contains(t->buf, "v3 (logsumexp over the channels) in the epilogue: a tile holds all 128 channels");
    free(t);
    free(plan);
    free(ir);

    /* every fusable reduction, with and without keepdim, with elementwise ops after it; 2D
     * and 3D; split K (a few tiles, a long K); one TF32 product; channels that fill no tile */
    static const char *const reductions[] = {"max", "min", "sum", "mean", "logsumexp"};
    for (int r = 0; r < 5; r++) {
        for (int keep = 0; keep < 2; keep++) {
            static const struct {
                const char *precision;
                int spatial, in, out, size;
                bool split;
            } shapes[] = {
                {"fp32", 2, 64, 128, 128, false}, {"fp32", 2, 256, 128, 14, true}, {"fp32", 3, 32, 100, 10, true},
                {"tf32", 2, 128, 64, 20, true},
            };
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                char tail[256];
                snprintf(tail, sizeof tail, "gelu {},\n  %s { dim = 1, keepdim = %s },\n  mul { scalar = 2 },\n  tanh {}",
                         reductions[r], keep ? "true" : "false");
                plan = conv_plan(shapes[s].precision, shapes[s].spatial, shapes[s].in, shapes[s].out, shapes[s].size, 1,
                                 1, tail, 0, &ir);
                int c = wgmma_conv_pass(plan);
                if (c < 0 || plan->passes[c].chan_reduce != 2 || plan->passes[c].last != 4 ||
                    !plan->passes[c].store_output || c != plan->n_passes - 1 ||
                    plan->n_buffers != 1 + plan->wgmma.parts + 2 * shapes[s].split)
                    fail_msg("%s keepdim %d on shape %zu: not fused (%d passes, %d buffers)", reductions[r], keep, s,
                             plan->n_passes, plan->n_buffers);
                assert_int_equal(plan->wgmma.split_k > 1, shapes[s].split);
                assert_non_null(find_arg(&plan->passes[c], FG_ARG_OUTPUT, 0));
                free(plan);
                free(ir);
            }
        }
    }
}

/* Where the condition does not hold the plan is what it was: the conv pass stores the value
 * before the reduction and a map pass reduces it. */
static void wgmma_channel_reduction_not_fused(void **state)
{
    (void)state;
    static const struct {
        const char *why;
        int in, out, groups;
        const char *tail;
        int buffered; /* the value the conv pass stores (-1: none, it feeds the reduction's accumulator) */
    } cases[] = {
        {"groups > 1", 128, 128, 2, "relu {},\n  logsumexp { dim = 1 }", 1},
        {"320 channels: three channel tiles (nblk 3)", 64, 320, 1, "relu {},\n  max { dim = 1, keepdim = true }", 1},
        {"a norm before the reduction", 64, 128, 1, "instance_norm {},\n  sum { dim = 1 }", 0},
        {"a reduction over dims 2, 3", 64, 128, 1, "relu {},\n  logsumexp { dims = { 2, 3 } }", 1},
        /* 2048 elements each: the conv pass feeds an accumulator instead of storing */
        {"over dims 1 and 2", 64, 128, 1, "relu {},\n  mean { dims = { 1, 2 }, keepdim = true }", -1},
        {"a pool after the reduction", 64, 128, 1, "relu {},\n  max { dim = 1, keepdim = true },\n  max_pool { kernel = 2 }",
         1},
        {"a second reduction", 64, 128, 1, "sum { dim = 1 },\n  max { dim = 1 }", 0},
        {"softmax over the channels", 64, 128, 1, "softmax { dim = 1 }", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fg_layer_ir *ir;
        fg_plan *plan = conv_plan("fp32", 2, cases[i].in, cases[i].out, 16, 1, cases[i].groups, cases[i].tail, 0, &ir);
        int c = wgmma_conv_pass(plan);
        if (c < 0)
            fail_msg("%s: no wgmma conv", cases[i].why);
        for (int p = 0; p < plan->n_passes; p++)
            if (plan->passes[p].chan_reduce != -1)
                fail_msg("%s: pass %d reduces over the channels", cases[i].why, p);
        const fg_pass *conv = &plan->passes[c];
        bool as_today = cases[i].buffered < 0 ? conv->store_buffer < 0 && conv->n_feeds == 1
                                              : conv->store_buffer >= 0 &&
                                                    plan->buffers[conv->store_buffer].value == cases[i].buffered;
        if (conv->store_output || !as_today)
            fail_msg("%s: the conv pass stores b%d (v%d), writes the output %d", cases[i].why, conv->store_buffer,
                     conv->store_buffer >= 0 ? plan->buffers[conv->store_buffer].value : -1, conv->store_output);
        free(plan);
        free(ir);
    }
    /* the same layer off the wgmma engine (sm_90, or mma.sync preferred on sm_90a): a map pass */
    fg_layer_ir *ir = fgt_load_string("return layer \"lse\" {\n  input = { \"N\", 64, 32, 32 },\n"
                                      "  conv2d { out_channels = 128, kernel = 3 },\n  relu {},\n"
                                      "  logsumexp { dim = 1, keepdim = true },\n}\n");
    for (int k = 0; k < 2; k++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, k ? "sm_90a" : "sm_90");
        if (k)
            opts.engine = FG_ENGINE_PREFER_MMA;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->n_passes, 2);
        assert_int_equal(plan->passes[0].chan_reduce, -1);
        assert_int_equal(plan->passes[0].last, 1);
        assert_int_equal(plan->passes[1].kind, FG_PASS_MAP);
        free(plan);
    }
    free(ir);
}

/* The plan for sm_90a with the conv on wgmma where the shape allows it. */
static fg_plan *plan_sm90a_wgmma(const fg_layer_ir *ir)
{
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    return fgt_plan_with(ir, &opts);
}

/* A half layer (dtype bf16/fp16) on the wgmma engine: the operands are its dtype (the input
 * one exact part of 2-byte elements; the weights hi and lo for fp32 precision, one rounded part
 * for tf32), 64 elements to a K chunk; the buffers and the stage hold 2-byte elements; an
 * fp32 layer keeps TF32 operands; `fusegen plan` says which. */
/* The m64 tiles per consumer warpgroup: one (128-pixel tiles) for half operands, two (256)
 * for TF32 ones where they fit; FUSEGEN_WGMMA_M64 (fg_plan_options.wgmma_m64) caps either */
static void wgmma_m64_knob(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"m\" {\n  input = { \"N\", 64, 56, 56 },\n  dtype = \"bf16\",\n"
                                      "  conv2d { out_channels = 64, kernel = 3, padding = 1 },\n}\n");
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.wgmma_alternate = 1; /* shared tiles, as counted here (tiles in turn: wgmma_tiles_in_turn) */
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    /* half operands: 128-pixel tiles by default (measured: v19), 256 on request */
    fg_plan *plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->wgmma.wgmt, 1);
    assert_int_equal(plan->wgmma.bm, 128);
    assert_int_equal(plan->wgmma.m_tiles, 25); /* 3136 pixels */
    free(plan);
    opts.wgmma_m64 = 2;
    plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->wgmma.wgmt, 2);
    assert_int_equal(plan->wgmma.bm, 256);
    free(plan);
    free(ir);
    /* TF32 operands (float32, precision tf32: one product's registers): 256 by default, 128 on request */
    ir = fgt_load_string("return layer \"t\" {\n  input = { \"N\", 64, 56, 56 },\n  precision = \"tf32\",\n"
                         "  conv2d { out_channels = 64, kernel = 3, padding = 1 },\n}\n");
    opts.wgmma_m64 = 0;
    plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->wgmma.wgmt, 2);
    free(plan);
    opts.wgmma_m64 = 1;
    plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->wgmma.wgmt, 1);
    free(plan);
    free(ir);
}

/* The widest channel block (fg_wgmma_tiling.bn): 256 for half operands with a long K (16
 * chunks and up) where a sample has 66 tiles of 128 x 128 or more, 128 otherwise, 128 again
 * where a wide block does not fit the registers (a statistic's partials in the epilogue);
 * FUSEGEN_WGMMA_BN (wgmma_bn) sets it */
static void wgmma_wide_channel_blocks(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int bn, nblk;
    } cases[] = {
        /* SD's 3x3 at 320 channels, bf16: 45 chunks -> 2 x 160 on 64x64 (32 x 3 tiles of 128 x
         * 128 a sample), 3 x 112 on 16x16 (2 x 3: a small batch splits K) */
        {"input = { \"N\", 320, 64, 64 }, dtype = \"bf16\",\n  conv2d { out_channels = 320, kernel = 3, padding = 1 },\n",
         160, 2},
        {"input = { \"N\", 320, 16, 16 }, dtype = \"bf16\",\n  conv2d { out_channels = 320, kernel = 3, padding = 1 },\n",
         112, 3},
        /* 66 tiles a sample (22 x 3) is wide, 63 (21 x 3) is not */
        {"input = { \"N\", 320, 44, 64 }, dtype = \"bf16\",\n  conv2d { out_channels = 320, kernel = 3, padding = 1 },\n",
         160, 2},
        {"input = { \"N\", 320, 42, 64 }, dtype = \"bf16\",\n  conv2d { out_channels = 320, kernel = 3, padding = 1 },\n",
         112, 3},
        /* a 1x1 of 384 channels out: 2 chunks -> 3 x 128 */
        {"input = { \"N\", 96, 16, 16 }, dtype = \"bf16\",\n  conv2d { out_channels = 384, kernel = 1 },\n", 128, 3},
        /* TF32 operands keep 128 at any K */
        {"input = { \"N\", 320, 16, 16 }, precision = \"tf32\",\n  conv2d { out_channels = 320, kernel = 3, padding = 1 },\n",
         112, 3},
        /* 512 out: 2 x 256; with a group norm's partials beside 128 accumulators a thread
         * (304 registers) a wide block does not fit: 4 x 128 */
        {"input = { \"N\", 128, 64, 64 }, dtype = \"bf16\", precision = \"tf32\",\n"
         "  conv2d { out_channels = 512, kernel = 3, padding = 1 },\n",
         256, 2},
        {"input = { \"N\", 128, 64, 64 }, dtype = \"bf16\", precision = \"tf32\",\n"
         "  conv2d { out_channels = 512, kernel = 3, padding = 1 },\n  group_norm { groups = 32 },\n",
         128, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char spec[512];
        snprintf(spec, sizeof spec, "return layer \"w\" {\n  %s}\n", cases[i].spec);
        fg_layer_ir *ir = fgt_load_string(spec);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.engine = FG_ENGINE_PREFER_WGMMA;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->wgmma.bn, cases[i].bn);
        assert_int_equal(plan->wgmma.nblk, cases[i].nblk);
        free(plan);
        if (i == 0) { /* the knob */
            opts.wgmma_bn = 100;
            plan = fgt_plan_with(ir, &opts);
            /* at most 104 (100 rounded up to 8): 320 in 4 blocks of 80 */
            assert_int_equal(plan->wgmma.bn, 80);
            assert_int_equal(plan->wgmma.nblk, 4);
            free(plan);
        }
        free(ir);
    }
}

/* CTA pairs sharing B chunks (fg_wgmma_tiling.multicast): only on request
 * (FUSEGEN_WGMMA_MULTICAST=2), and only where every tile reads the same B sequence: one
 * channel block (<= 128 output channels), one group, no split K. The source says so. */
static void wgmma_multicast_where_b_is_shared(void **state)
{
    (void)state;
    static const struct {
        const char *conv;
        int multicast;
    } cases[] = {
        {"conv2d { out_channels = 128, kernel = 3, padding = 1 }", 2},
        {"conv2d { out_channels = 256, kernel = 3, padding = 1 }", 1},            /* two channel blocks */
        {"conv2d { out_channels = 128, kernel = 3, padding = 1, groups = 2 }", 1}, /* two groups */
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec, "return layer \"m\" {\n  input = { \"N\", 64, 128, 128 },\n  %s,\n}\n", cases[i].conv);
        fg_layer_ir *ir = fgt_load_string(spec);
        opts.wgmma_multicast = 0;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->wgmma.multicast, 1); /* off by default */
        free(plan);
        opts.wgmma_multicast = 2;
        plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->wgmma.split_k, 1);
        assert_int_equal(plan->wgmma.multicast, cases[i].multicast);
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        if (cases[i].multicast == 2) {
            fgt_assert_contains(src.source, "__cluster_dims__(2, 1, 1)");
            fgt_assert_contains(src.source, "pair_copy_b(sA + P * A_BYTES, wtile, kc, bar_full + 8 * s);");
            fgt_assert_contains(src.source, "fgw_mbar_init(bar_empty + 8 * s, 16);");
        } else {
            fgt_assert_not_contains(src.source, "__cluster_dims__");
            fgt_assert_not_contains(src.source, "pair_");
        }
        fg_rendered_free(&src);
        free(plan);
        free(ir);
    }
    /* a small layer splits K: no pairs */
    fg_layer_ir *ir = fgt_load_string("return layer \"s\" {\n  input = { \"N\", 512, 7, 7 },\n"
                                      "  conv2d { out_channels = 128, kernel = 3, padding = 1 },\n}\n");
    fg_plan *plan = fgt_plan_with(ir, &opts);
    assert_true(plan->wgmma.split_k > 1);
    assert_int_equal(plan->wgmma.multicast, 1);
    free(plan);
    free(ir);
}

/* The staged channels-last epilogue (fg_wgmma_staged_epilogue): the slabs are reserved for a
 * channels-last layer without statistics, after the partials and before the barriers, and used
 * by its conv pass where the output is its only target; never for NCHW, nor where the layer
 * has statistics (the pass then stores a buffer), but where that buffer is held as the output
 * is (fg_io_buffer_value: a half layer at precision tf32), in half the bytes. */
static void wgmma_staged_epilogue_where_channels_last(void **state)
{
    (void)state;
    static const struct {
        const char *layout, *ops, *precision, *strategy;
        int reserved, staged, io;
    } cases[] = {
        {"channels_last", "relu {}", "fp32", "auto", 1, 1, 0},
        {"channels_last", "mul { param = \"gamma\", shape = { 64, 1, 1 } }, relu {}", "fp32", "auto", 1, 1, 0}, /* a per-channel load */
        {"channels_last", "instance_norm {}, relu {}", "fp32", "auto", 0, 0, 0},
        {"channels_last", "instance_norm {}, relu {}", "tf32", "auto", 1, 1, 1}, /* the buffer held in bf16, channels last */
        {"channels_last", "group_norm { groups = 4 }, relu {}", "tf32", "materialize", 1, 1, 1},
        /* recompute stores no value: no buffer, and the statistics pass keeps the fragments' mapping */
        {"channels_last", "instance_norm {}, relu {}", "tf32", "recompute", 0, 0, 0},
        /* a key a pixel: 32 lanes of the slabs' mapping would feed one key */
        {"channels_last", "layer_norm { dim = 1 }, relu {}", "tf32", "materialize", 0, 0, 0},
        {"nchw", "relu {}", "fp32", "auto", 0, 0, 0},
        {"nchw", "instance_norm {}, relu {}", "tf32", "auto", 0, 0, 0},
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "return layer \"t\" {\n  input = { \"N\", 64, 20, 20 },\n  dtype = \"bf16\",\n  layout = \"%s\",\n"
                 "  precision = \"%s\",\n  strategy = \"%s\",\n  conv2d { out_channels = 64, kernel = 3, padding = 1 },\n"
                 "  %s,\n}\n",
                 cases[i].layout, cases[i].precision, cases[i].strategy, cases[i].ops);
        fg_layer_ir *ir = fgt_load_string(spec);
        fg_plan *plan = fgt_plan_with(ir, &opts);
        const fg_wgmma_tiling *w = &plan->wgmma;
        assert_true(w->parts > 0);
        assert_int_equal(w->epi_bytes > 0, cases[i].reserved);
        if (cases[i].reserved) {
            assert_int_equal(w->epi_bytes, 8 * FG_WGMMA_EPI_ROWS * FG_WGMMA_EPI_STRIDE * 4);
            assert_int_equal(w->epi_offset, w->stat_offset + w->stat_bytes);
        }
        /* no block tensor in a layer alone: no residual's tile, the slabs' rows as ever */
        assert_int_equal(w->res_bytes, 0);
        assert_int_equal(w->res_param, -1);
        assert_int_equal(w->epi_stride, FG_WGMMA_EPI_STRIDE);
        assert_int_equal(w->bar_offset, w->stat_offset + w->stat_bytes + w->epi_bytes);
        int staged = 0;
        for (int p = 0; p < plan->n_passes; p++)
            staged += fg_wgmma_staged_epilogue(plan, &plan->passes[p]);
        assert_int_equal(staged, cases[i].staged);
        int io_buffers = 0;
        for (int b = 0; b < plan->n_buffers; b++)
            io_buffers += plan->buffers[b].io;
        const bool io_expected = cases[i].io;
        assert_int_equal(io_buffers, io_expected ? 1 : 0);
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        text_sink *t = printed_plan(ir, plan);
        if (io_expected) {
            /* stored rounded along the channels, its statistics fed as stored, read back widened */
            /* the conv pass's parameter (not const), its stores from the slabs along the channels */
            fgt_assert_contains(src.source, ", fg_io *__restrict__ b2, double *a0");
            fgt_assert_contains(src.source, "b2[(fg_u64)n * 25600 + c + (px) * 64] = fg_io_round(v0);");
            fgt_assert_contains(src.source, "fg_io_widen(fg_io_round(v0))");
            /* the map pass reads it in channels-last order, 4 vectors of the same 8 channels a
             * thread, its per-channel statistics loaded once */
            fgt_assert_contains(src.source, "fg_pass4_map(const fg_io *__restrict__ b2,");
            fgt_assert_contains(src.source, "const int cb = (int)(v0 % 8) * 8;");
            fgt_assert_contains(src.source, "q[3] = v0 + 768 < 3200 ? *(const uint4 *)(src + (v0 + 768) * 8)");
            if (strstr(cases[i].ops, "instance_norm")) {
                fgt_assert_contains(src.source, "const fg_stat hc1 = (true) ? s0[(long long)n * 64 + c0] : fg_stat{};");
                fgt_assert_contains(src.source, "(fg_io_widen((unsigned short)(q[3].w >> 16)) - hc22.a) * hc22.b");
            }
            fgt_assert_contains(src.source, "*(uint4 *)y = make_uint4(h[0], h[1], h[2], h[3]);");
            fgt_assert_contains(t->buf, "a thread takes 4 vectors of 8 consecutive channels of a pixel");
            fgt_assert_contains(t->buf, "in the layer's dtype, channels last");
        }
        if (cases[i].staged) {
            fgt_assert_contains(src.source, "float *const slab = ");
            fgt_assert_contains(src.source, "const float v0 = slab[rr * 40 + lane]");
            fgt_assert_contains(t->buf, "the epilogue through shared memory (channels last)");
        } else {
            fgt_assert_not_contains(src.source, "slab");
            fgt_assert_not_contains(t->buf, "the epilogue through shared memory");
        }
        free(t);
        fg_rendered_free(&src);
        free(plan);
        free(ir);
    }
    /* a caller's default for "auto" (FUSEGEN_STRATEGY) asking for recompute: no slabs either */
    opts.default_strategy = FG_STRATEGY_RECOMPUTE;
    fg_layer_ir *ir = fgt_load_string("return layer \"t\" {\n  input = { \"N\", 64, 20, 20 },\n  dtype = \"bf16\",\n"
                                      "  layout = \"channels_last\",\n  precision = \"tf32\",\n"
                                      "  conv2d { out_channels = 64, kernel = 3, padding = 1 },\n"
                                      "  instance_norm {}, relu {},\n}\n");
    fg_plan *plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->strategy, FG_STRATEGY_RECOMPUTE);
    assert_int_equal(plan->wgmma.epi_bytes, 0);
    for (int b = 0; b < plan->n_buffers; b++)
        assert_false(plan->buffers[b].io);
    free(plan);
    free(ir);
}

/* Loads bench/ab-specs/NAME.lua (a block spec of the A/B measurements) into b and plans its
 * layer `layer` with opts: the plan (the caller frees it and b), the layer in *ir. */
static fg_plan *plan_ab_layer(const char *name, int layer, const fg_plan_options *opts, fg_block_ir *b,
                              const fg_layer_ir **ir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/bench/ab-specs/%s.lua", FUSEGEN_SOURCE_DIR, name);
    fg_error err = {{0}};
    if (fg_block_spec_load_file(path, b, &err) != 0)
        fail_msg("%s: %s", path, err.msg);
    *ir = &b->layers[layer];
    return fgt_plan_with(*ir, opts);
}

/* The residual's tile in shared memory (fg_wgmma_tiling.res_bytes, bench/NOTES.md v42) in the
 * A/B blocks of bench/ab-specs/ (bf16, channels last): bm x bn x 2 bytes after the slabs, whose
 * rows are then 32 floats apart (swizzled), reserved before the stages are counted and only
 * where the ring keeps 3 stages (4 with block accumulation): ResNet's and ConvNeXt's last 1x1
 * convs and SD's layer out lose a stage to it (SD at 1280 channels keeps 3 in 256-channel
 * tiles only with the 4 KB the swizzled slabs save); the same block at fp32 precision (block
 * accumulation) keeps its 4 stages and no tile, as does a layer without a residual. */
static void wgmma_residual_in_shared_memory(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer, stages, bn; /* the layer's conv tile; bn 0: not checked */
        bool res;
        int bn_asked; /* FUSEGEN_WGMMA_BN, 0: the planner's */
    } cases[] = {
        {"resnet2048_bf16_cl_tf32", 2, 5, 128, true, 0}, /* 6 without */
        {"resnet1024_bf16_cl_tf32", 2, 5, 128, true, 0},
        {"resnet512_bf16_cl_tf32", 2, 5, 128, true, 0},
        {"resnet_block_bf16_cl_tf32", 2, 5, 128, true, 0},
        {"resnet2048_bf16_cl_tf32", 0, 6, 128, false, 0}, /* no residual */
        {"resnet_block_bf16_cl_fp32", 2, 4, 128, false, 0}, /* block accumulation: 3 stages with it */
        {"sd_resnet_block_bf16_cl_tf32", 1, 4, 160, true, 0}, /* 5 */
        {"sd_resnet_block_bf16_cl_tf32", 0, 5, 160, false, 0}, /* the time embedding: a value a channel */
        {"sd1280_bf16_cl_tf32", 1, 5, 128, true, 0}, /* 6 (20 tiles a sample: not widened, v43) */
        /* 256-channel tiles asked for: 3 (4 without; 2 with the slabs' rows 40 floats apart) */
        {"sd1280_bf16_cl_tf32", 1, 3, 256, true, 256},
        {"sd1280_bf16_cl", 1, 3, 128, false, 0}, /* block accumulation */
        {"convnext_bf16_cl_tf32", 2, 6, 96, true, 0}, /* 7 */
        {"convnext768_bf16_cl_tf32", 2, 5, 128, true, 0}, /* 6 */
        {"convnext384_bf16_cl_tf32", 2, 5, 128, true, 0}, /* 6 */
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.wgmma_alternate = 1; /* shared tiles, as counted here (tiles in turn: wgmma_tiles_in_turn) */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_block_ir b;
        const fg_layer_ir *ir;
        opts.wgmma_bn = cases[i].bn_asked;
        fg_plan *plan = plan_ab_layer(cases[i].spec, cases[i].layer, &opts, &b, &ir);
        const fg_wgmma_tiling *w = &plan->wgmma;
        print_message("%s layer %s: %d stages, bn %d, residual %lld B\n", cases[i].spec, ir->name, w->stages, w->bn,
                      (long long)w->res_bytes);
        assert_int_equal(w->stages, cases[i].stages);
        assert_int_equal(w->bn, cases[i].bn);
        assert_int_equal(w->res_bytes > 0, cases[i].res);
        if (cases[i].res) {
            assert_int_equal(w->res_bytes, (int64_t)w->bm * w->bn * 2);
            assert_true(ir->params[w->res_param].batched);
            assert_string_equal(ir->params[w->res_param].name, "input");
            assert_int_equal(w->epi_stride, FG_WGMMA_EPI_COLS);
            assert_int_equal(w->epi_bytes, 8 * FG_WGMMA_EPI_ROWS * FG_WGMMA_EPI_COLS * 4);
            assert_int_equal(w->res_offset % 16, 0); /* 16-byte cp.async */
            assert_true(w->stages >= 3 + w->block_acc);
            /* one stage more without it: the tile took it */
            assert_true(227 * 1024 - 1024 - 256 - w->stat_bytes - 8 * FG_WGMMA_EPI_ROWS * FG_WGMMA_EPI_STRIDE * 4 >=
                        (w->stages + 1) * w->stage_bytes);
        } else {
            assert_int_equal(w->res_param, -1);
            assert_int_equal(w->epi_stride, FG_WGMMA_EPI_STRIDE);
        }
        assert_int_equal(w->res_offset, w->epi_offset + w->epi_bytes);
        assert_int_equal(w->bar_offset, w->res_offset + w->res_bytes);
        assert_true(1024 + w->bar_offset + 16 * w->stages + 16 <= 227 * 1024);
        /* fusegen plan says so */
        text_sink *t = printed_plan(ir, plan);
        if (cases[i].res)
            fgt_assert_contains(t->buf, "the residual 'input' through shared memory");
        else
            fgt_assert_not_contains(t->buf, "through shared memory: each consumer warp copies");
        free(t);
        free(plan);
        fg_block_ir_free(&b);
    }
}

/* Split K counted in waves on the blocks it is for (bench/NOTES.md Waiting 0 (k)): ConvNeXt
 * 768's and 384's last 1x1 conv (layer c), whose tiles at batch 32 fill part of a wave or
 * spill into a short second one, split there under FUSEGEN_SPLIT_WAVES=1 and not by default;
 * a batch whose tiles already fill a wave stays unsplit. */
static void split_waves_convnext(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int most;          /* split_k: 48 / (2 x 5 stages) or 24 / 10 */
        int64_t batch, tiles;
        int one_wave, waves; /* the splits at that batch by each rule */
    } cases[] = {
        {"convnext768_bf16_cl_tf32", 4, 32, 78, 1, 3},  /* 78 SMs of 132 -> 2 waves of 16 chunks */
        {"convnext768_bf16_cl_tf32", 4, 64, 150, 1, 3}, /* 2 waves of 48 -> 4 of 16 (450 units) */
        {"convnext768_bf16_cl_tf32", 4, 8, 24, 4, 4},   /* one wave either way */
        {"convnext384_bf16_cl_tf32", 2, 32, 192, 1, 2}, /* 2 waves of 24 -> 3 of 12 */
        {"convnext384_bf16_cl_tf32", 2, 16, 96, 1, 1},  /* 72 against 74 with the fixup: unsplit */
        {"convnext384_bf16_cl_tf32", 2, 4, 24, 2, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int waves = 0; waves < 2; waves++) {
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.split_waves = waves;
            fg_block_ir b;
            const fg_layer_ir *ir;
            fg_plan *plan = plan_ab_layer(cases[i].spec, 2, &opts, &b, &ir);
            const fg_wgmma_tiling *w = &plan->wgmma;
            const int conv = wgmma_conv_pass(plan);
            assert_true(conv >= 0);
            assert_string_equal(ir->name, "convnext.c");
            assert_int_equal(w->split_k, cases[i].most);
            assert_int_equal(w->split_waves, waves);
            assert_int_equal(w->split_fill, waves ? 528 : 132);
            assert_int_equal(plan->buffers[w->split_partials].fixed, (int64_t)w->split_fill * w->split_slot);
            const int64_t tiles = fg_wgmma_tiles(w, plan->passes[conv].launch.grid_x, cases[i].batch);
            assert_int_equal(tiles, cases[i].tiles);
            const int s = fg_wgmma_splits(w, tiles);
            if (s != (waves ? cases[i].waves : cases[i].one_wave))
                fail_msg("%s c at batch %lld: %d splits%s", cases[i].spec, (long long)cases[i].batch, s,
                         waves ? " counted in waves" : "");
            free(plan);
            fg_block_ir_free(&b);
        }
}

/* The staged epilogue's rows per iteration (staged_rows_unrolled): 8 where the chain calls a
 * math function and its code would be repeated 128 times (4 chunks x 16 rows x the full and
 * checked copies), all 16 where it is light or flat tiles have no checked copy;
 * FUSEGEN_WGMMA_EPI_ROWS (wgmma_epi_rows) sets it */
static void wgmma_epilogue_rows_unrolled(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer, asked, rows;
    } cases[] = {
        {"convnext384_bf16_cl_tf32", 1, 0, 8},  /* 1x1 384 -> 1536 + GELU (erff): 128 copies */
        {"convnext_bf16_cl_tf32", 1, 0, 8},     /* 96 -> 384 + GELU */
        {"convnext768_bf16_cl_tf32", 1, 0, 16}, /* flat tiles: 64 copies */
        {"convnext384_bf16_cl_tf32", 2, 0, 16}, /* scale + residual: light */
        {"resnet_block_bf16_cl_tf32", 2, 0, 16},
        {"sd_resnet_block_bf16_cl_tf32", 1, 0, 16},
        {"resnet_block_bf16_cl_tf32", 2, 4, 4}, /* asked for */
        {"convnext384_bf16_cl_tf32", 1, 16, 16},
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.wgmma_alternate = 1; /* shared tiles, as counted here (tiles in turn: wgmma_tiles_in_turn) */
    opts.wgmma_flat_predicated = 1; /* the flat tiles' branch (predicated stores: wgmma_flat_predicated) */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_block_ir b;
        const fg_layer_ir *ir;
        opts.wgmma_epi_rows = cases[i].asked;
        fg_plan *plan = plan_ab_layer(cases[i].spec, cases[i].layer, &opts, &b, &ir);
        print_message("%s layer %s: rows %d\n", cases[i].spec, ir->name, plan->wgmma.epi_unroll);
        assert_true(plan->wgmma.epi_bytes > 0);
        assert_int_equal(plan->wgmma.epi_unroll, cases[i].rows);
        text_sink *t = printed_plan(ir, plan);
        if (cases[i].rows < FG_WGMMA_EPI_ROWS)
            fgt_assert_contains(t->buf, cases[i].rows == 8 ? "its rows 8 at a time" : "its rows 4 at a time");
        else
            fgt_assert_not_contains(t->buf, "at a time, not all");
        free(t);
        free(plan);
        fg_block_ir_free(&b);
    }
}

/* The wgmma input pack by pixel rows holds whole pixels where the prologue's norm is over each
 * pixel's channels, up to 256 vectors a pixel (planner.c, pro_norm_per_pixel), and computes
 * their statistics itself; SD's GroupNorm packs keep their channel blocks */
static void wgmma_pack_whole_pixels(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer;
        bool whole;
    } cases[] = {
        {"convnext_bf16_cl_tf32", 1, true},    /* 96 channels: 12 vectors a pixel */
        {"convnext384_bf16_cl_tf32", 1, true}, /* 48 */
        {"convnext768_bf16_cl_tf32", 1, true}, /* 96 */
        {"sd1280_bf16_cl_tf32", 0, false},     /* GroupNorm: statistics pass, 4 channel blocks */
        {"sd1280_bf16_cl_tf32", 1, false},
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_block_ir b;
        const fg_layer_ir *ir;
        fg_plan *plan = plan_ab_layer(cases[i].spec, cases[i].layer, &opts, &b, &ir);
        const fg_wgmma_tiling *w = &plan->wgmma;
        print_message("%s layer %s: pack_xb %d of %d, pixel statistics %d\n", cases[i].spec, ir->name, w->pack_xb, w->xc,
                      (int)plan->pack_pixel_stats);
        assert_true(w->pack_vec > 0);
        assert_int_equal(w->pack_xb == w->xc, cases[i].whole);
        assert_int_equal(plan->pack_pixel_stats, cases[i].whole);
        bool stats_pass = false;
        for (int p = 0; p < plan->n_passes; p++)
            stats_pass = stats_pass || plan->passes[p].kind == FG_PASS_PRO_STATS;
        if (cases[i].whole) /* SD's layer out has none either: its statistics come from layer h */
            assert_false(stats_pass);
        free(plan);
        fg_block_ir_free(&b);
    }
}

/* The consumer warpgroups' tiles in turn (fg_wgmma_tiling.alternate): where the epilogue
 * syncs neither warpgroup with the other nor pairs CTAs, a tile is one warpgroup's 64 wgmt
 * rows (the ring's A stage halves), split K in units of one warpgroup's tile where a sample's
 * tiles leave room, flat exactly where the shared tiles are, the
 * residual's tile still 16 wgmt rows a consumer warp, and 16 bytes more shared memory for the
 * two turn barriers (after the ring's and their slack); refused with statistics partials and
 * two CTAs a multiprocessor; chosen by default where the operands are half, no CTA pairs are
 * asked for and K never splits or the shared tiles still split at batch 32
 * (FUSEGEN_WGMMA_ALTERNATE=2 asks elsewhere, 1 never). */
static void wgmma_tiles_in_turn(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer, asked, ctas, multicast;
        bool alternate, turn_splits;
    } cases[] = {
        {"convnext768_bf16_cl_tf32", 1, 2, 0, 0, true, false},  /* 1x1 + GELU, flat tiles */
        {"convnext768_bf16_cl_tf32", 2, 2, 0, 0, true, true},   /* split K in turn, the residual in shared memory */
        {"convnext768_bf16_cl_tf32", 1, 0, 0, 0, true, false},  /* chosen: 12 K chunks never split */
        {"convnext768_bf16_cl_tf32", 1, 1, 0, 0, false, false}, /* shared tiles asked for */
        {"convnext768_bf16_cl_tf32", 1, 0, 0, 2, false, false}, /* not chosen where CTA pairs are asked for */
        {"convnext768_bf16_cl_tf32", 2, 0, 0, 0, false, false}, /* not chosen: split K below batch 32 */
        {"resnet2048_bf16_cl_tf32", 0, 2, 0, 0, true, true},    /* flat 1x1, split in turn up to batch 16 */
        {"resnet2048_bf16_cl_tf32", 1, 2, 0, 0, true, true},    /* flat 3x3 */
        {"resnet2048_bf16_cl_tf32", 0, 0, 0, 0, true, true},    /* chosen: its shared tiles split at batch 32 */
        {"resnet2048_bf16_cl_tf32", 1, 0, 0, 0, true, true},
        {"resnet_block_bf16_cl_tf32", 1, 2, 0, 0, true, false}, /* 3x3 on 56x56 */
        {"resnet_block_bf16_cl_tf32", 1, 0, 0, 0, true, false}, /* chosen: 9 K chunks */
        {"resnet_block_bf16_cl_fp32", 2, 2, 0, 0, true, false}, /* block accumulation in ping-pong too */
        {"conv_64_128_256", 0, 2, 0, 0, true, false},           /* TF32 operands: two m64 tiles a warpgroup */
        {"conv_64_128_256", 0, 0, 0, 0, false, false},          /* TF32 operands are not chosen in turn */
        {"sd_resnet_block_bf16_cl_tf32", 0, 2, 0, 0, false, false}, /* exports its output's statistics */
        {"nnunet_stage_bf16_cl_tf32", 0, 2, 0, 0, false, false},    /* InstanceNorm's partials */
        {"convnext_bf16_cl_tf32", 1, 2, 2, 0, false, false},        /* two CTAs a multiprocessor */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        fg_block_ir b, b0;
        const fg_layer_ir *ir, *ir0;
        opts.wgmma_alternate = 1;
        fg_plan *shared = plan_ab_layer(cases[i].spec, cases[i].layer, &opts, &b0, &ir0);
        opts.wgmma_alternate = cases[i].asked;
        opts.wgmma_ctas = cases[i].ctas;
        opts.wgmma_multicast = cases[i].multicast;
        fg_plan *plan = plan_ab_layer(cases[i].spec, cases[i].layer, &opts, &b, &ir);
        const fg_wgmma_tiling *w = &plan->wgmma, *w0 = &shared->wgmma;
        print_message("%s layer %s: alternate %d, tiles of %d (shared: %d), split %d (%d), flat %d\n", cases[i].spec,
                      ir->name, w->alternate, w->bm, w0->bm, w->split_k, w0->split_k, (int)w->flat);
        assert_int_equal(w->alternate, cases[i].alternate);
        text_sink *t = printed_plan(ir, plan);
        const int c = wgmma_conv_pass(plan);
        assert_true(c >= 0);
        const fg_pass *conv = &plan->passes[c];
        if (cases[i].alternate) {
            fgt_assert_contains(t->buf, "take whole tiles of");
            assert_int_equal(w->bm, 64 * w->wgmt);
            assert_int_equal(w0->bm, 128 * w0->wgmt);
            assert_int_equal(w->wgmt, w0->wgmt);
            /* split K where a sample's 64-row tiles leave room (ResNet 2048's: 4 tiles a sample) */
            assert_int_equal(w->split_k > 1, cases[i].turn_splits);
            assert_int_equal(w->multicast, 1);
            assert_int_equal(w->flat, w0->flat);
            assert_int_equal(w->a_bytes * 2, w0->a_bytes);
            if (w->res_bytes > 0)
                assert_int_equal(w->res_bytes, (int64_t)128 * w->wgmt * w->bn * 2);
            /* the stages, the barriers, their slack, then the turn barriers (and a split's two
             * flags, one a warpgroup, a partial one warpgroup's accumulators) */
            assert_int_equal(conv->launch.smem_bytes, 1024 + w->bar_offset + 16 * w->stages + 16 + 16 + (w->split_k > 1 ? 16 : 0));
            if (w->split_k > 1) {
                assert_int_equal(w->flag_offset, w->bar_offset + 16 * w->stages + 32);
                assert_int_equal(w->split_slot, (int64_t)w->wgmt * (w->bn / 2) * 128);
                fgt_assert_contains(t->buf, "whose fixup syncs that warpgroup alone");
            }
        } else {
            fgt_assert_not_contains(t->buf, "take whole tiles of");
            if (cases[i].ctas == 0)
                assert_int_equal(w->bm, w0->bm);
        }
        free(t);
        free(plan);
        free(shared);
        fg_block_ir_free(&b);
        fg_block_ir_free(&b0);
    }
}

/* A flat tile's outputs checked by predicated stores (fg_wgmma_tiling.flat_predicated, the
 * default; FUSEGEN_WGMMA_FLAT_PREDICATED=1 keeps the branch): only flat tiles whose chunks hold
 * only existing channels (bn a multiple of 32, the group's channels whole blocks); a chain with
 * a math call then takes its staged rows 8 at a time (the registers), a light one all 16. */
static void wgmma_flat_predicated(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer, asked;
        bool predicated;
        int rows;
        bool linear; /* the rows as one run of the batch's pixels (flat_rows_linear) */
    } cases[] = {
        {"convnext768_bf16_cl_tf32", 1, 2, true, 8, true},   /* 1x1 + GELU, 7x7: flat */
        {"convnext768_bf16_cl_tf32", 2, 2, true, 16, true},  /* scale + residual (in shared memory) */
        {"convnext768_bf16_cl_tf32", 1, 1, false, 16, false}, /* the branch asked for */
        {"convnext768_bf16_cl_tf32", 1, 0, true, 8, true},    /* the default */
        {"resnet2048_bf16_cl_tf32", 0, 2, true, 16, true},
        {"convnext384_bf16_cl_tf32", 1, 2, true, 8, true},   /* 14x14: flat as the turns' tiles (wgmma_flat_in_turn) */
        {"convnext384_bf16_cl_tf32", 2, 2, false, 16, false}, /* 14x14, shared tiles: not flat */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.wgmma_flat_predicated = cases[i].asked;
        fg_block_ir b;
        const fg_layer_ir *ir;
        fg_plan *plan = plan_ab_layer(cases[i].spec, cases[i].layer, &opts, &b, &ir);
        print_message("%s layer %s: flat %d, predicated %d, rows %d\n", cases[i].spec, ir->name, (int)plan->wgmma.flat,
                      plan->wgmma.flat_predicated, plan->wgmma.epi_unroll);
        assert_int_equal(plan->wgmma.flat_predicated, cases[i].predicated);
        assert_int_equal(plan->wgmma.flat_rows_linear, cases[i].linear);
        assert_int_equal(plan->wgmma.epi_unroll, cases[i].rows);
        text_sink *t = printed_plan(ir, plan);
        if (cases[i].predicated)
            fgt_assert_contains(t->buf, "skipped by predicated stores");
        else
            fgt_assert_not_contains(t->buf, "skipped by predicated stores");
        free(t);
        free(plan);
        fg_block_ir_free(&b);
    }
    /* 88 output channels on 7x7 images: flat tiles of 88 channels, whose last 32-channel chunk
     * has lanes past the channels: the branch stays */
    fg_layer_ir *ir = fgt_load_string("return layer \"l\" { input = { \"N\", 64, 7, 7 }, dtype = \"bf16\", "
                                      "layout = \"channels_last\", conv2d { out_channels = 88, kernel = 3, padding = 1 } }");
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.wgmma_flat_predicated = 2;
    fg_plan *plan = fgt_plan_with(ir, &opts);
    assert_true(plan->wgmma.flat);
    assert_int_equal(plan->wgmma.bn, 88);
    assert_int_equal(plan->wgmma.flat_predicated, 0);
    free(plan);
    free(ir);
}

/* Flat tiles where tiles in turn leave rows empty (fg_plan_options.wgmma_flat): by default past
 * a fifth of a sample's 64-row tiles -- ConvNeXt's 384-channel 1x1 + GELU at 14x14 (4 tiles of
 * 64 rows for 196 pixels) goes flat, each tile's predicated stores with it, ResNet-50's 512
 * stage at 28x28 (13 for 784, 6 % empty) does not; FUSEGEN_WGMMA_FLAT=2 takes any empty row
 * (the 512 stage too), 1 the quarter rule alone (nothing at 14x14). The 1x1 back to 384
 * channels keeps its shared tiles and its split K (only turns' tiles), ConvNeXt 96's 56x56 (49
 * tiles of 64 exactly) has no row to save. */
static void wgmma_flat_in_turn(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer, asked;
        bool flat;
        int m_tiles; /* a sample's (flat: unused by the launch, the rule's count) */
    } cases[] = {
        {"convnext384_bf16_cl_tf32", 1, 0, true, 4},
        {"convnext384_bf16_cl_tf32", 1, 2, true, 4},
        {"convnext384_bf16_cl_tf32", 1, 1, false, 4},
        {"convnext384_bf16_cl_tf32", 2, 0, false, 2}, /* shared tiles, split K */
        {"convnext384_bf16_cl_tf32", 2, 2, false, 2},
        {"resnet512_bf16_cl_tf32", 0, 0, false, 13},
        {"resnet512_bf16_cl_tf32", 0, 2, true, 13},
        {"convnext_bf16_cl_tf32", 1, 2, false, 49},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.wgmma_flat = cases[i].asked;
        fg_block_ir b;
        const fg_layer_ir *ir;
        fg_plan *plan = plan_ab_layer(cases[i].spec, cases[i].layer, &opts, &b, &ir);
        print_message("%s layer %s: flat %d, alternate %d, m tiles %d, split %d\n", cases[i].spec, ir->name,
                      (int)plan->wgmma.flat, plan->wgmma.alternate, plan->wgmma.m_tiles, plan->wgmma.split_k);
        assert_int_equal(plan->wgmma.flat, cases[i].flat);
        assert_int_equal(plan->wgmma.m_tiles, cases[i].m_tiles);
        if (cases[i].flat) {
            assert_true(plan->wgmma.alternate);
            assert_true(plan->wgmma.flat_predicated);
            /* a batch of 32: the batch's pixels in 64-row tiles, each of the channel blocks */
            assert_int_equal(fg_wgmma_tiles(&plan->wgmma, (int64_t)plan->wgmma.m_tiles * plan->wgmma.nblk, 32),
                             (32 * plan->wgmma.opix + 63) / 64 * plan->wgmma.nblk);
        }
        if (cases[i].layer == 2)
            assert_true(plan->wgmma.split_k > 1);
        free(plan);
        fg_block_ir_free(&b);
    }
}

/* The staged epilogue's 16-byte vectors (fg_wgmma_tiling.epi_vec, fg_wgmma_epi_vec; opt-in by
 * FUSEGEN_WGMMA_EPI_VEC=2): 8 channels a lane for a half layer, 4 for an fp32 one, the residual's
 * tile in shared memory read the same way; not unasked, not where the conv pass feeds a
 * statistic (SD's layer h: its partials keep a lane a channel), not where the chain reads a
 * block tensor by pixel from global memory (an fp32 layer's residual: the scalar epilogue
 * prefetches its rows), not where a group's channels are no multiple of the vector. `fusegen
 * plan` says so where it applies. */
static void wgmma_epi_vec_where_asked(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer, asked, vec;
    } ab[] = {
        {"convnext384_bf16_cl_tf32", 1, 2, 8}, /* 1x1 + GELU, flat tiles, predicated stores */
        {"convnext384_bf16_cl_tf32", 1, 0, 1}, /* the default */
        {"convnext384_bf16_cl_tf32", 1, 1, 1},
        {"convnext384_bf16_cl_tf32", 2, 2, 8}, /* scale + the residual's tile in shared memory */
        {"resnet2048_bf16_cl_tf32", 2, 2, 8},  /* the residual, flat tiles */
        {"sd_resnet_block_bf16_cl_tf32", 0, 2, 1}, /* feeds the next group norm's statistics */
        {"sd_resnet_block_bf16_cl_tf32", 1, 2, 8},
    };
    for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.wgmma_epi_vec = ab[i].asked;
        fg_block_ir b;
        const fg_layer_ir *ir;
        fg_plan *plan = plan_ab_layer(ab[i].spec, ab[i].layer, &opts, &b, &ir);
        int vec = 0, staged = 0;
        for (int p = 0; p < plan->n_passes; p++)
            if (fg_wgmma_staged_epilogue(plan, &plan->passes[p])) {
                staged++;
                vec = fg_wgmma_epi_vec(plan, &plan->passes[p]);
            }
        print_message("%s layer %s: asked %d, vectors of %d\n", ab[i].spec, ir->name, ab[i].asked, vec);
        assert_int_equal(staged, 1);
        assert_int_equal(vec, ab[i].vec);
        text_sink *t = printed_plan(ir, plan);
        if (vec > 1)
            fgt_assert_contains(t->buf, "neighbouring channels of a row back and stores them as one 16-byte vector");
        else
            fgt_assert_not_contains(t->buf, "16-byte vector (FUSEGEN_WGMMA_EPI_VEC");
        free(t);
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        /* the vectors' stores, and only there */
        if (vec > 1)
            fgt_assert_contains(src.source, "st.global.v4.b32");
        else
            fgt_assert_not_contains(src.source, "st.global.v4");
        fg_rendered_free(&src);
        free(plan);
        fg_block_ir_free(&b);
    }
    static const struct {
        const char *dtype, *ops;
        int out_channels, vec;
    } layers[] = {
        {"fp32", "relu {}", 64, 4},
        {"bf16", "relu {}", 64, 8},
        {"fp16", "mul { param = \"gamma\", shape = { 64, 1, 1 } }, relu {}", 64, 8},
        {"bf16", "relu {}", 20, 1}, /* 20 channels: no whole vectors of 8 */
        {"fp32", "relu {}", 20, 4},
    };
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "return layer \"t\" { input = { \"N\", 64, 20, 20 }, dtype = \"%s\", layout = \"channels_last\",\n"
                 "  conv2d { out_channels = %d, kernel = 3, padding = 1 }, %s }",
                 layers[i].dtype, layers[i].out_channels, layers[i].ops);
        fg_layer_ir *ir = fgt_load_string(spec);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.engine = FG_ENGINE_PREFER_WGMMA;
        opts.wgmma_epi_vec = 2;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        print_message("%s, %d channels: vectors of %d\n", layers[i].dtype, layers[i].out_channels, plan->wgmma.epi_vec);
        assert_int_equal(plan->wgmma.epi_vec, layers[i].vec);
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        fgt_assert_contains(src.source, layers[i].vec == 4 ? "st.global.v4.f32" : layers[i].vec == 8 ? "st.global.v4.b32" : "fg_pass");
        fg_rendered_free(&src);
        free(plan);
        free(ir);
    }
}

/* GELU by the five-term fit (fg_plan.fast_gelu; FUSEGEN_FAST_GELU=1 keeps erff): at precision
 * tf32, in a layer with an erf GELU (in its chain or its prologue); `fusegen plan` says so. Not
 * at fp32 precision, not for the tanh form, not where erff is asked for. */
static void fast_gelu_where_asked(void **state)
{
    (void)state;
    static const struct {
        const char *precision, *ops;
        int asked;
        bool fast;
    } cases[] = {
        {"tf32", "gelu {}", 2, true},
        {"tf32", "gelu {}", 0, true}, /* the default since v49 */
        {"tf32", "gelu {}", 1, false},
        {"fp32", "gelu {}", 2, false},
        {"tf32", "gelu { approximate = \"tanh\" }", 2, false},
        {"tf32", "relu {}", 2, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "return layer \"l\" { input = { \"N\", 64, 14, 14 }, dtype = \"bf16\", layout = \"channels_last\", "
                 "precision = \"%s\", conv2d { out_channels = 256, kernel = 1 }, %s }",
                 cases[i].precision, cases[i].ops);
        fg_layer_ir *ir = fgt_load_string(spec);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.fast_gelu = cases[i].asked;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->fast_gelu, cases[i].fast);
        text_sink *t = printed_plan(ir, plan);
        if (cases[i].fast)
            fgt_assert_contains(t->buf, "GELU's erf by a five-term fit");
        else
            fgt_assert_not_contains(t->buf, "five-term fit");
        free(t);
        free(plan);
        free(ir);
    }
    /* in the prologue: a GELU before the conv */
    fg_layer_ir *ir = fgt_load_string("return layer \"l\" { input = { \"N\", 64, 14, 14 }, precision = \"tf32\", "
                                      "gelu {}, conv2d { out_channels = 64, kernel = 3, padding = 1 } }");
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.fast_gelu = 2;
    fg_plan *plan = fgt_plan_with(ir, &opts);
    assert_true(plan->fast_gelu);
    free(plan);
    free(ir);
}

/* Ping-pong block accumulation (wgmma_ping_pong): where the block accumulates, A is by TMA and
 * the ring has 4 stages or more, with the consumers' registers raised to hold three
 * accumulators beside a 40-register producer; never with cp.async, one product, or 3 stages. */
/* Two wgmma CTAs a multiprocessor (FUSEGEN_WGMMA_CTAS=2): where there is no block accumulation,
 * A comes by TMA and the consumers fit 96 registers; channel blocks of at most 64, a ring of at
 * least 2 in half the shared memory, the launch bounds and setmaxnreg marks for two blocks.
 * Elsewhere one, as without the knob. */
static void wgmma_two_ctas_where_they_fit(void **state)
{
    (void)state;
    static const struct {
        const char *input, *dtype, *precision, *layout, *conv;
        int ctas_knob, a_tma_knob, ctas, bn;
    } cases[] = {
        /* ConvNeXt's 96 -> 384 in bf16, tf32: 6 blocks of 64 */
        {"96, 56, 56", "bf16", "tf32", "channels_last", "out_channels = 384, kernel = 1", 2, 0, 2, 64},
        {"96, 56, 56", "bf16", "tf32", "channels_last", "out_channels = 384, kernel = 1", 0, 0, 1, 128},
        {"96, 56, 56", "bf16", "tf32", "channels_last", "out_channels = 384, kernel = 1", 2, 1, 1, 128}, /* cp.async */
        /* 96 outputs: 2 blocks of 48 */
        {"384, 56, 56", "bf16", "tf32", "channels_last", "out_channels = 96, kernel = 1", 2, 0, 2, 48},
        /* fp32 precision accumulates blocks: one */
        {"64, 32, 32", "bf16", "fp32", "nchw", "out_channels = 128, kernel = 3, padding = 1", 2, 0, 1, 128},
        /* one TF32 product (precision tf32, fp32 tensors) */
        {"64, 32, 32", "fp32", "tf32", "nchw", "out_channels = 128, kernel = 3, padding = 1", 2, 0, 2, 64},
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "return layer \"t\" {\n  input = { \"N\", %s },\n  dtype = \"%s\",\n  precision = \"%s\",\n"
                 "  layout = \"%s\",\n  conv2d { %s },\n}\n",
                 cases[i].input, cases[i].dtype, cases[i].precision, cases[i].layout, cases[i].conv);
        fg_layer_ir *ir = fgt_load_string(spec);
        opts.wgmma_ctas = cases[i].ctas_knob;
        opts.wgmma_a_tma = cases[i].a_tma_knob;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        const fg_wgmma_tiling *w = &plan->wgmma;
        assert_true(w->parts > 0);
        assert_int_equal(w->ctas_per_sm, cases[i].ctas);
        assert_int_equal(w->bn, cases[i].bn);
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        if (cases[i].ctas == 2) {
            assert_int_equal(w->a_tma, 2);
            assert_int_equal(w->wgmt, 1);
            assert_true(w->stages >= 2);
            assert_int_equal(w->consumer_regs, 96);
            assert_int_equal(w->producer_regs, 40);
            assert_true(1024 + w->bar_offset + 16 * w->stages + 16 <= (228 - 2) * 1024 / 2);
            fgt_assert_contains(src.source, "__launch_bounds__(384, 2)");
            fgt_assert_contains(src.source, "BASEREG = 80;");
        } else {
            fgt_assert_contains(src.source, "__launch_bounds__(384, 1)");
            fgt_assert_contains(src.source, "BASEREG = 168;");
        }
        fg_rendered_free(&src);
        free(plan);
        free(ir);
    }
}

static void wgmma_ping_pong_where_it_pays(void **state)
{
    (void)state;
    static const struct {
        const char *input, *dtype, *precision;
        int a_tma_knob, ping_pong;
    } cases[] = {
        /* bf16 in fp32 precision: x.w_lo + x.w_hi, block accumulated, 6 stages */
        {"64, 32, 32", "bf16", "fp32", 0, 1},
        {"64, 32, 32", "bf16", "fp32", 1, 0}, /* cp.async: its producer needs its registers */
        {"64, 32, 32", "bf16", "tf32", 0, 0}, /* one product: no block accumulation */
        {"64, 32, 32", "fp32", "fp32", 0, 0}, /* 3xTF32 at 128 x 128: a ring of 3 */
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "return layer \"t\" {\n  input = { \"N\", %s },\n  dtype = \"%s\",\n  precision = \"%s\",\n"
                 "  conv2d { out_channels = 128, kernel = 3, padding = 1 },\n}\n",
                 cases[i].input, cases[i].dtype, cases[i].precision);
        fg_layer_ir *ir = fgt_load_string(spec);
        opts.wgmma_a_tma = cases[i].a_tma_knob;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        const fg_wgmma_tiling *w = &plan->wgmma;
        assert_true(w->parts > 0);
        assert_int_equal(w->ping_pong, cases[i].ping_pong);
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        if (cases[i].ping_pong) {
            assert_true(w->stages >= 4);
            assert_int_equal(w->consumer_regs, 232);
            assert_int_equal(w->producer_regs, 40);
            fgt_assert_contains(src.source, "float tmp2[WGMT][BN / 2];");
            fgt_assert_contains(src.source, "issue_at(tmp2, it0 + kc + 1, row0, sbase, bar_full);");
        } else {
            fgt_assert_not_contains(src.source, "tmp2");
        }
        fg_rendered_free(&src);
        free(plan);
        free(ir);
    }
}

/* A by TMA in im2col mode (fg_wgmma_tiling.a_tma): only on request (FUSEGEN_WGMMA_A_TMA=2) and
 * where TMA can build the stage (fg_wgmma_a_tma_refusal: CP a multiple of a chunk, the rank-4/5
 * corner, offset and stride limits); the map's plan-time arguments by hand; the source has the
 * TMA producer only then (and the default source none of it). */
static void wgmma_a_tma_where_tma_builds_the_stage(void **state)
{
    (void)state;
    static const struct {
        const char *input, *conv, *dtype;
        int a_tma, rank;
        int lower[3], upper[3], elem_strides[5];
        int64_t dims[4];
    } cases[] = {
        /* 2D pad 1 stride 1: upper = P - (K-1) */
        {"64, 128, 128", "conv2d { out_channels = 128, kernel = 3, padding = 1 }", "fp32", 2, 4, {-1, -1}, {-1, -1},
         {1, 1, 1, 1}, {64, 128, 128}},
        /* stride 2: O 28, upper = 27 * 2 - 1 - 55 */
        {"64, 56, 56", "conv2d { out_channels = 64, kernel = 3, padding = 1, stride = 2 }", "fp32", 2, 4, {-1, -1},
         {-2, -2}, {1, 2, 2, 1}, {64, 56, 56}},
        /* dilation 2, pad 2: O 56, upper = 55 - 2 - 55 */
        {"64, 56, 56", "conv2d { out_channels = 64, kernel = 3, padding = 2, dilation = 2 }", "fp32", 2, 4, {-2, -2},
         {-2, -2}, {1, 1, 1, 1}, {64, 56, 56}},
        /* non-square, no padding: W 40 H 24, O 38 x 22, upper -2 */
        {"32, 24, 40", "conv2d { out_channels = 64, kernel = 3 }", "fp32", 2, 4, {0, 0}, {-2, -2}, {1, 1, 1, 1},
         {32, 40, 24}},
        /* 3D pad 1: rank 5 */
        {"32, 8, 16, 16", "conv3d { out_channels = 32, kernel = 3, padding = 1 }", "fp32", 2, 5, {-1, -1, -1},
         {-1, -1, -1}, {1, 1, 1, 1, 1}, {32, 16, 16, 8}},
        /* 3D: pad 16 is the corner's limit, 17 past it */
        {"32, 8, 8, 8", "conv3d { out_channels = 32, kernel = 3, padding = 16 }", "fp32", 2, 5, {-16, -16, -16},
         {14, 14, 14}, {1, 1, 1, 1, 1}, {32, 8, 8, 8}},
        {"32, 8, 8, 8", "conv3d { out_channels = 32, kernel = 3, padding = 17 }", "fp32", 1, 0, {0}, {0}, {0}, {0}},
        /* 3D dilated extent: 2 x 15 = 30 fits (pad 15 keeps the upper corner at -15), 2 x 16 = 32 does not
         * (its corners, -16 and -16, would) */
        {"32, 8, 8, 8", "conv3d { out_channels = 32, kernel = 3, padding = 15, dilation = 15 }", "fp32", 2, 5,
         {-15, -15, -15}, {-15, -15, -15}, {1, 1, 1, 1, 1}, {32, 8, 8, 8}},
        {"32, 8, 8, 8", "conv3d { out_channels = 32, kernel = 3, padding = 16, dilation = 16 }", "fp32", 1, 0, {0},
         {0}, {0}, {0}},
        /* 3D without padding: the upper corner P - 2 Dil reaches -16 at dilation 8, past it at 9 */
        {"32, 40, 40, 40", "conv3d { out_channels = 32, kernel = 3, dilation = 8 }", "fp32", 2, 5, {0, 0, 0},
         {-16, -16, -16}, {1, 1, 1, 1, 1}, {32, 40, 40, 40}},
        {"32, 40, 40, 40", "conv3d { out_channels = 32, kernel = 3, dilation = 9 }", "fp32", 1, 0, {0}, {0}, {0}, {0}},
        /* 2D: with wgmma's pads (< 32) the upper corner bounds the dilated extent before the
         * offsets (254) do: 31 - 158 = -127 fits, 31 - 160 = -129 does not */
        {"32, 200, 200", "conv2d { out_channels = 32, kernel = 3, padding = 31, dilation = 79 }", "fp32", 2, 4,
         {-31, -31}, {-127, -127}, {1, 1, 1, 1}, {32, 200, 200}},
        {"32, 200, 200", "conv2d { out_channels = 32, kernel = 3, padding = 31, dilation = 80 }", "fp32", 1, 0, {0},
         {0}, {0}, {0}},
        /* strides: 8 is the traversal's limit, 9 past it */
        {"64, 64, 64", "conv2d { out_channels = 64, kernel = 8, stride = 8 }", "fp32", 2, 4, {0, 0}, {-7, -7},
         {1, 8, 8, 1}, {64, 64, 64}},
        {"64, 72, 72", "conv2d { out_channels = 64, kernel = 9, stride = 9 }", "fp32", 1, 0, {0}, {0}, {0}, {0}},
        /* groups: each group's channels a multiple of 32 */
        {"128, 32, 32", "conv2d { out_channels = 128, kernel = 3, padding = 1, groups = 2 }", "fp32", 2, 4, {-1, -1},
         {-1, -1}, {1, 1, 1, 1}, {128, 32, 32}},
        /* a chunk would span two taps: 48 channels (fp32), 96 (bf16), 16 */
        {"48, 32, 32", "conv2d { out_channels = 64, kernel = 3, padding = 1 }", "fp32", 1, 0, {0}, {0}, {0}, {0}},
        {"96, 32, 32", "conv2d { out_channels = 64, kernel = 3, padding = 1 }", "bf16", 1, 0, {0}, {0}, {0}, {0}},
        {"16, 32, 32", "conv2d { out_channels = 64, kernel = 3, padding = 1 }", "fp32", 1, 0, {0}, {0}, {0}, {0}},
        /* half: 64 channels a chunk */
        {"128, 32, 32", "conv2d { out_channels = 64, kernel = 3, padding = 1 }", "bf16", 2, 4, {-1, -1}, {-1, -1},
         {1, 1, 1, 1}, {128, 32, 32}},
        /* one tap, one group: the last chunk's channels past the input's are zero fill (96 bf16,
         * 48 fp32); a chunk wider than the channels (40 bf16) and two groups stay refused */
        {"96, 32, 32", "conv2d { out_channels = 384, kernel = 1 }", "bf16", 2, 4, {0, 0}, {0, 0}, {1, 1, 1, 1},
         {96, 32, 32}},
        {"48, 32, 32", "conv2d { out_channels = 64, kernel = 1 }", "fp32", 2, 4, {0, 0}, {0, 0}, {1, 1, 1, 1},
         {48, 32, 32}},
        {"40, 32, 32", "conv2d { out_channels = 64, kernel = 1 }", "bf16", 1, 0, {0}, {0}, {0}, {0}},
        {"192, 32, 32", "conv2d { out_channels = 64, kernel = 1, groups = 2 }", "bf16", 1, 0, {0}, {0}, {0}, {0}},
    };
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec, "return layer \"t\" {\n  input = { \"N\", %s },\n  dtype = \"%s\",\n  %s,\n}\n",
                 cases[i].input, cases[i].dtype, cases[i].conv);
        fg_layer_ir *ir = fgt_load_string(spec);
        /* by default where TMA can build the stage, with no refusal recorded where it cannot */
        opts.wgmma_a_tma = 0;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_true(plan->wgmma.parts > 0);
        assert_int_equal(plan->wgmma.a_tma, cases[i].a_tma);
        assert_null(plan->wgmma.a_tma_refused);
        free(plan);
        /* cp.async on request */
        opts.wgmma_a_tma = 1;
        plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->wgmma.a_tma, 1);
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        fgt_assert_not_contains(src.source, "tmap");
        fgt_assert_contains(src.source, "fgw_mbar_init(bar_full + 8 * s, 128);");
        fg_rendered_free(&src);
        free(plan);
        opts.wgmma_a_tma = 2;
        plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->wgmma.a_tma, cases[i].a_tma);
        assert_int_equal(fg_wgmma_a_tma_refusal(ir, &plan->wgmma, NULL) == NULL, cases[i].a_tma == 2);
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        const fg_pass *conv = NULL;
        for (int p = 0; p < plan->n_passes; p++)
            if (plan->passes[p].kind == FG_PASS_CONV)
                conv = &plan->passes[p];
        assert_non_null(conv);
        if (cases[i].a_tma == 2) {
            const fg_im2col_map *m = &plan->wgmma.im2col;
            const int el = strcmp(cases[i].dtype, "fp32") ? 2 : 4;
            assert_int_equal(m->rank, cases[i].rank);
            assert_int_equal(m->elem_bytes, el);
            assert_int_equal(m->channels, 128 / el);
            assert_int_equal(m->pixels, plan->wgmma.bm);
            uint64_t stride = (uint64_t)cases[i].dims[0] * (uint64_t)el;
            assert_int_equal(m->dims[0], plan->wgmma.xc);
            assert_int_equal(m->dims[0], cases[i].dims[0]);
            for (int d = 0; d < m->rank - 2; d++) {
                assert_int_equal(m->dims[1 + d], cases[i].dims[1 + d]);
                assert_int_equal(m->strides[d], stride);
                stride *= (uint64_t)cases[i].dims[1 + d];
                assert_int_equal(m->lower[d], cases[i].lower[d]);
                assert_int_equal(m->upper[d], cases[i].upper[d]);
            }
            assert_int_equal(m->strides[m->rank - 2], stride);
            assert_int_equal(m->dims[m->rank - 1], 0); /* the batch: the launcher's */
            for (int d = 0; d < m->rank; d++)
                assert_int_equal(m->elem_strides[d], cases[i].elem_strides[d]);
            assert_non_null(find_arg(conv, FG_ARG_TMAP, plan->wgmma.packed_hi));
            assert_int_equal(find_arg(conv, FG_ARG_TMAP, plan->wgmma.packed_lo) != NULL, plan->wgmma.packed_lo >= 0);
            fgt_assert_contains(src.source, "struct __align__(64) fgw_tmap {");
            fgt_assert_contains(src.source, cases[i].rank == 5 ? "fgw_tma_im2col5(sA, ta_hi" : "fgw_tma_im2col4(sA, ta_hi");
            fgt_assert_contains(src.source, "const __grid_constant__ fgw_tmap m");
            fgt_assert_contains(src.source, "fgw_mbar_init(bar_full + 8 * s, 1);");
            fgt_assert_not_contains(src.source, "fgw_cp16(dst");
            fgt_assert_not_contains(src.source, "fgw_fence_proxy_async(); /* cp.async");
        } else {
            assert_int_equal(plan->wgmma.im2col.rank, 0);
            assert_null(find_arg(conv, FG_ARG_TMAP, plan->wgmma.packed_hi));
            fgt_assert_not_contains(src.source, "tmap");
            /* asked for and refused: `fusegen plan` says why */
            assert_non_null(plan->wgmma.a_tma_refused);
            text_sink *t = printed_plan(ir, plan);
            fgt_assert_contains(t->buf, "TMA was asked for (FUSEGEN_WGMMA_A_TMA=2) and refused: ");
            fgt_assert_contains(t->buf, plan->wgmma.a_tma_refused);
            free(t);
        }
        fg_rendered_free(&src);
        free(plan);
        free(ir);
    }
}

/* Where the wgmma engine cannot tile a conv on sm_90a, the plan says why (fusegen plan prints
 * it): a limit of the engine, not the measured choice, which leaves it empty. */
static void wgmma_refusal_said(void **state)
{
    (void)state;
    static const struct {
        const char *layer, *why; /* NULL: wgmma runs it, or the measured rule chose */
    } cases[] = {
        {"input = { \"N\", 16, 4, 1000, 8 }, conv3d { out_channels = 32, kernel = 3 }", "3D conv with an image past 991"},
        {"input = { \"N\", 16, 40, 40 }, conv2d { out_channels = 32, kernel = 3, padding = 32 }", "padding of 32"},
        {"input = { \"N\", 16, 40, 40 }, conv2d { out_channels = 16, kernel = 3, groups = 4 }", "fewer than 8 output"},
        {"input = { \"N\", 16, 1100, 1030 }, conv2d { out_channels = 64, kernel = 3, padding = 1 }", NULL},
        {"input = { \"N\", 640, 16, 16 }, conv2d { out_channels = 64, kernel = 3, padding = 1 }", NULL},
        {"input = { \"N\", 3, 40, 40 }, conv2d { out_channels = 16, kernel = 3 }", NULL}, /* mma.sync, measured */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char src[512];
        snprintf(src, sizeof src, "return layer \"r\" {\n  %s,\n}\n", cases[i].layer);
        fg_layer_ir *ir = fgt_load_string(src);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        fg_plan *plan = fgt_plan_with(ir, &opts);
        if (cases[i].why ? !strstr(plan->wgmma_refused, cases[i].why) : plan->wgmma_refused[0] != 0)
            fail_msg("%s: wgmma_refused is '%s', expected '%s'", cases[i].layer, plan->wgmma_refused,
                     cases[i].why ? cases[i].why : "");
        free(plan);
        free(ir);
    }
}

static void wgmma_half_operands(void **state)
{
    (void)state;
    static const struct {
        const char *dtype, *precision;
        int spatial, in, out, size;
        int operand, parts;
    } cases[] = {
        {"bf16", "fp32", 2, 64, 128, 32, FG_WGMMA_BF16, 2},  {"fp16", "fp32", 2, 64, 128, 32, FG_WGMMA_F16, 2},
        {"bf16", "tf32", 2, 64, 128, 32, FG_WGMMA_BF16, 1},  {"fp16", "tf32", 2, 64, 128, 32, FG_WGMMA_F16, 1},
        {"bf16", "fp32", 3, 3, 32, 12, FG_WGMMA_BF16, 2},    {"fp16", "fp32", 2, 20, 200, 17, FG_WGMMA_F16, 2},
        {"fp32", "fp32", 2, 64, 128, 32, FG_WGMMA_TF32, 2},  {"fp32", "tf32", 2, 64, 128, 32, FG_WGMMA_TF32, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char src[1024], depth[16] = "";
        if (cases[i].spatial == 3)
            snprintf(depth, sizeof depth, "%d, ", cases[i].size);
        snprintf(src, sizeof src,
                 "return layer \"half\" {\n  input = { \"N\", %d, %s%d, %d },\n  dtype = \"%s\",\n  precision = \"%s\",\n"
                 "  conv%dd { out_channels = %d, kernel = 3, padding = 1 },\n  relu {},\n}\n",
                 cases[i].in, depth, cases[i].size, cases[i].size, cases[i].dtype, cases[i].precision,
                 cases[i].spatial, cases[i].out);
        fg_layer_ir *ir = fgt_load_string(src);
        fg_plan *plan = plan_sm90a_wgmma(ir);
        const fg_wgmma_tiling *w = &plan->wgmma;
        bool half = cases[i].operand != FG_WGMMA_TF32;
        int el = half ? 2 : 4, taps = cases[i].spatial == 3 ? 27 : 9;
        assert_int_equal(w->operand, cases[i].operand);
        assert_int_equal(w->parts, cases[i].parts);
        assert_int_equal(w->a_parts, half ? 1 : cases[i].parts);
        assert_int_equal(w->block_acc, cases[i].parts == 2);
        assert_int_equal(w->kc_elems, 128 / el);
        /* a 16-byte copy is one tap's channels: 8 half elements (3 channels pad to 8) */
        assert_int_equal(w->cp % (16 / el), 0);
        assert_true(w->cp >= cases[i].in && w->cp < cases[i].in + 8);
        assert_int_equal(w->kch, (taps * w->cp + w->kc_elems - 1) / w->kc_elems);
        assert_int_equal(w->stage_bytes, w->a_parts * w->a_bytes + w->parts * w->b_bytes);
        assert_int_equal(w->a_bytes, w->bm * 128);
        assert_true(w->stages >= 3);
        assert_int_equal(w->packed_lo >= 0, w->a_parts == 2);
        int64_t ipix = fg_shape_sample_count(&ir->input) / ir->input.dim[1];
        assert_int_equal(plan->buffers[w->packed_hi].per_sample, ipix * w->xc * el / 4);
        assert_int_equal(plan->buffers[w->packed_w].fixed, (int64_t)w->nblk * w->kch * w->parts * w->bn * 32);
        /* the weights' pack pass runs a thread per element of the operand's type: a launch
         * sized by the buffer's floats left half of a half layer's weights unwritten */
        assert_int_equal(w->w_elems, (int64_t)w->nblk * w->kch * w->parts * w->bn * w->kc_elems);
        for (int k = 0; k < plan->n_passes; k++)
            if (plan->passes[k].kind == FG_PASS_PACK_WEIGHTS)
                assert_true(plan->passes[k].launch.grid_x * plan->passes[k].launch.block >= w->w_elems &&
                            (plan->passes[k].launch.grid_x - 1) * plan->passes[k].launch.block < w->w_elems);
        text_sink *t = printed_plan(ir, plan);
        char want[128];
        snprintf(want, sizeof want, "K chunks of %d,", w->kc_elems);
        fgt_assert_contains(t->buf, want);
        /* the weight pack is the layer's, at bind; its image is no piece of the workspace */
        snprintf(want, sizeof want, "into b%d; packed once at bind (or at the prepare after it), not in a run",
                 w->packed_w);
        fgt_assert_contains(t->buf, want);
        snprintf(want, sizeof want, "buffer b%d: the packed weights, %lld floats, the layer's own, not in the workspace",
                 w->packed_w, (long long)plan->buffers[w->packed_w].fixed);
        fgt_assert_contains(t->buf, want);
        if (!half) {
            fgt_assert_contains(t->buf, cases[i].parts == 2 ? "(3xTF32" : "(one TF32 product)");
        } else {
            const char *op = cases[i].operand == FG_WGMMA_BF16 ? "bf16" : "f16";
            snprintf(want, sizeof want, "wgmma tensor cores (%s operands, %s", op,
                     cases[i].parts == 2 ? "x.w_lo + x.w_hi" : "one product");
            fgt_assert_contains(t->buf, want);
            snprintf(want, sizeof want, "the input channels-innermost, as %s, into b%d", op, w->packed_hi);
            fgt_assert_contains(t->buf, want);
            snprintf(want, sizeof want, "reads the input as %s (%s operands", cases[i].dtype, op);
            fgt_assert_contains(t->buf, want);
            fgt_assert_contains(t->buf, cases[i].parts == 2 ? "hi and lo (w - hi)" : "rounded to nearest");
        }
        free(t);
        free(plan);
        free(ir);
    }
    /* split K on a half layer: 256 -> 256 on 14x14 has 36 K chunks of 64 (72 of 32 at fp32) and a
     * ring of 4 stages of 48 KB (1 input part + 2 weight parts of 16 KB): 4 splits */
    fg_layer_ir *ir = fgt_load_string("return layer \"hs\" {\n  input = { \"N\", 256, 14, 14 },\n  dtype = \"bf16\",\n"
                                      "  conv2d { out_channels = 256, kernel = 3, padding = 1 },\n}\n");
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    fg_plan *plan = fgt_plan_with(ir, &opts);
    assert_int_equal(plan->wgmma.operand, FG_WGMMA_BF16);
    assert_int_equal(plan->wgmma.kch, 36);
    assert_int_equal(plan->wgmma.stage_bytes, 3 * 16384);
    assert_int_equal(plan->wgmma.stages, 4);
    assert_int_equal(plan->wgmma.split_k, 4);
    assert_int_equal(splits_at(plan, 1), 4);
    free(plan);
    free(ir);
}

/* A half layer with a prologue on the wgmma engine (GroupNorm -> SiLU -> conv, Stable
 * Diffusion's ResnetBlock2D): the operands are the layer's dtype, as without a prologue, but
 * the packed input is the prologue's fp32 result, no longer a value of the dtype: split into hi
 * and lo for fp32 precision (a_parts 2: x_lo.w_hi + x_hi.w_lo + x_hi.w_hi), rounded once for
 * tf32 (a_parts 1). The input pack (a block per 32 pixels of each sample, or by pixel rows
 * when channels-last) applies the prologue and writes both parts (2-byte elements); `fusegen plan` says what the
 * operands are; channels-last and split K keep the same operands. */
static void wgmma_half_prologue_operands(void **state)
{
    (void)state;
    static const struct {
        const char *dtype, *precision, *layout;
        int operand, parts;
    } cases[] = {
        {"bf16", "fp32", "nchw", FG_WGMMA_BF16, 2},          {"bf16", "tf32", "nchw", FG_WGMMA_BF16, 1},
        {"fp16", "fp32", "nchw", FG_WGMMA_F16, 2},           {"fp16", "tf32", "nchw", FG_WGMMA_F16, 1},
        {"bf16", "fp32", "channels_last", FG_WGMMA_BF16, 2}, {"fp32", "fp32", "nchw", FG_WGMMA_TF32, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "return layer \"hp\" {\n  input = { \"N\", 64, 16, 16 },\n  dtype = \"%s\",\n  precision = \"%s\",\n"
                 "  layout = \"%s\",\n  group_norm { name = \"norm1\", groups = 32, eps = 1e-6 },\n  silu {},\n"
                 "  conv2d { name = \"conv1\", out_channels = 64, kernel = 3, padding = 1 },\n}\n",
                 cases[i].dtype, cases[i].precision, cases[i].layout);
        fg_layer_ir *ir = fgt_load_string(src);
        fg_plan *plan = plan_sm90a_wgmma(ir);
        const fg_wgmma_tiling *w = &plan->wgmma;
        bool half = cases[i].operand != FG_WGMMA_TF32;
        int el = half ? 2 : 4;
        assert_int_equal(w->operand, cases[i].operand);
        assert_int_equal(w->parts, cases[i].parts);
        assert_int_equal(w->a_parts, cases[i].parts); /* the normalized input split as the weights */
        assert_int_equal(w->kc_elems, 128 / el);
        assert_int_equal(w->stage_bytes, w->a_parts * w->a_bytes + w->parts * w->b_bytes);
        assert_true(w->stages >= 3);
        assert_int_equal(w->packed_lo >= 0, w->a_parts == 2);
        int64_t ipix = 16 * 16;
        assert_int_equal(plan->buffers[w->packed_hi].per_sample, ipix * w->xc * el / 4);
        if (w->packed_lo >= 0)
            assert_int_equal(plan->buffers[w->packed_lo].per_sample, ipix * w->xc * el / 4);
        /* the input pack, per sample; it reads the prologue's statistics and writes every
         * packed part of the input. Through the transposing tile: 32 pixels a block. By pixel
         * rows (a channels-last input, pack_vec): a thread a 16-byte vector of channels, kept
         * for its FG_PACK_ROWS_ITERS (4) pixels, the block's vectors side by side */
        const fg_pass *pack = NULL;
        for (int k = 0; k < plan->n_passes; k++)
            if (plan->passes[k].kind == FG_PASS_PACK_INPUT)
                pack = &plan->passes[k];
        assert_non_null(pack);
        assert_true(pack->launch.per_sample);
        assert_int_equal(w->pack_vec != 0, strcmp(cases[i].layout, "channels_last") == 0);
        if (w->pack_vec) {
            int units = w->pack_xb / w->pack_vec;
            assert_int_equal(w->pack_vec, 16 / el);
            assert_int_equal(pack->launch.row_vec, w->pack_vec);
            assert_int_equal(pack->launch.elems_per_thread, 4);
            assert_int_equal(pack->launch.block % units, 0);
            assert_true(pack->launch.block <= 256 && pack->launch.block > 128);
            assert_int_equal(pack->launch.row_pixels, 4 * (pack->launch.block / units));
            assert_int_equal(pack->launch.grid_x, (ipix + pack->launch.row_pixels - 1) / pack->launch.row_pixels);
        } else {
            assert_int_equal(pack->launch.block, 256);
            assert_int_equal(pack->launch.grid_x, ipix / 32);
        }
        assert_int_equal(pack->launch.grid_y, (w->xc + w->pack_xb - 1) / w->pack_xb);
        /* the statistics finalized: by a finalize pass, or (the rows pack, their only reader) by
         * each pack block from the sums, with no finalize pass */
        assert_int_equal(plan->pack_finalizes, w->pack_vec != 0);
        int finalize_passes = 0;
        for (int k = 0; k < plan->n_passes; k++)
            finalize_passes += plan->passes[k].kind == FG_PASS_FINALIZE;
        assert_int_equal(finalize_passes, !plan->pack_finalizes);
        bool stats = false, hi = false, lo = false;
        for (int a = 0; a < pack->n_args; a++) {
            stats |= pack->args[a].kind == (plan->pack_finalizes ? FG_ARG_ACCUM : FG_ARG_STATS) &&
                     pack->args[a].index == plan->pro_accum;
            hi |= pack->args[a].kind == FG_ARG_BUFFER && pack->args[a].index == w->packed_hi;
            lo |= pack->args[a].kind == FG_ARG_BUFFER && pack->args[a].index == w->packed_lo;
        }
        assert_true(stats && hi);
        assert_int_equal(lo, w->packed_lo >= 0);
        text_sink *t = printed_plan(ir, plan);
        if (half) {
            const char *op = cases[i].operand == FG_WGMMA_BF16 ? "bf16" : "f16";
            char want[192];
            snprintf(want, sizeof want, "wgmma tensor cores (%s operands, %s", op,
                     cases[i].parts == 2 ? "x_lo.w_hi + x_hi.w_lo + x_hi.w_hi"
                                         : "one product, input and weights rounded to");
            fgt_assert_contains(t->buf, want);
            snprintf(want, sizeof want, "the input through the prologue, channels-innermost, %s %s, into b%d", op,
                     cases[i].parts == 2 ? "hi and lo (v - hi)" : "rounded to nearest", w->packed_hi);
            fgt_assert_contains(t->buf, want);
            snprintf(want, sizeof want, "the conv's wgmma reads the prologue's fp32 result %s (%s operands",
                     cases[i].parts == 2 ? "split into hi + lo of the dtype" : "rounded to the dtype", op);
            fgt_assert_contains(t->buf, want);
        } else {
            fgt_assert_contains(t->buf, "(3xTF32");
        }
        free(t);
        free(plan);
        free(ir);
    }
    /* split K at batch 1 (256 -> 256 on 14x14, bf16): 36 K chunks of 64, a ring of 3 stages of
     * 64 KB (2 input parts + 2 weight parts of 16 KB): 6 splits, against 4 without a prologue
     * (one input part, 4 stages) */
    fg_layer_ir *ir = fgt_load_string("return layer \"hs\" {\n  input = { \"N\", 256, 14, 14 },\n  dtype = \"bf16\",\n"
                                      "  group_norm { groups = 32, eps = 1e-6 },\n  silu {},\n"
                                      "  conv2d { out_channels = 256, kernel = 3, padding = 1 },\n}\n");
    fg_plan *plan = plan_sm90a_wgmma(ir);
    assert_int_equal(plan->wgmma.operand, FG_WGMMA_BF16);
    assert_int_equal(plan->wgmma.a_parts, 2);
    assert_int_equal(plan->wgmma.kch, 36);
    assert_int_equal(plan->wgmma.stage_bytes, 4 * 16384);
    assert_int_equal(plan->wgmma.stages, 3);
    assert_int_equal(plan->wgmma.split_k, 6);
    assert_int_equal(splits_at(plan, 1), 6);
    free(plan);
    free(ir);
}

/* A prologue norm that needs statistics of the input: a statistics pass over the input and
 * its finalize come first; no buffer holds the normalized input (on FMA and mma.sync none at
 * all; on wgmma only the packed operands, which are it); the conv pass (or the input pack)
 * reads the finalized statistics and the prologue's parameters. BatchNorm on running
 * statistics needs no pass. cuDNN (tf32 on sm_80) and resident are refused. */
/* layer_norm { dim = 1 }: one statistic per (sample, position) over the channels, as the
 * statistic layout, the epilogue's accumulator and the prologue's say; materialize and
 * recompute plan; resident is refused with the norm's own message. */
static void channel_layer_norm_statistics(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"cln\" {\n  input = { \"N\", 8, 12, 10 },\n"
                                      "  conv2d { out_channels = 16, kernel = 3, padding = 1 },\n"
                                      "  layer_norm { name = \"ln\", dim = 1, eps = 1e-6 },\n  gelu {},\n}\n");
    const fg_op *ln = &ir->ops[1];
    assert_int_equal(ln->kind, FG_OP_CHANNEL_LAYER_NORM);
    assert_int_equal(fgt_find_param(ir, "ln.weight") >= 0, 1);
    assert_int_equal(ir->params[ln->weight_param].rank, 1);
    assert_int_equal(ir->params[ln->weight_param].dim[0], 16);
    assert_int_equal(ir->params[ln->bias_param].dim[0], 16);
    fg_stat_layout sl;
    fg_norm_stat_layout(ln, &sl);
    assert_int_equal(sl.channel_group, 16);
    assert_int_equal(sl.mask, 0);
    assert_false(sl.over_batch);
    assert_int_equal(sl.keys_per_sample, 12 * 10);
    assert_int_equal(sl.count_per_sample, 16);
    for (int s = 0; s < 2; s++) {
        fg_plan *plan = fgt_plan(ir, s ? FG_STRATEGY_RECOMPUTE : FG_STRATEGY_MATERIALIZE);
        assert_int_equal(plan->strategy, s ? FG_STRATEGY_RECOMPUTE : FG_STRATEGY_MATERIALIZE);
        int a = plan->op_accum[1];
        assert_true(a >= 0);
        assert_int_equal(plan->accums[a].kind, FG_ACCUM_MOMENTS);
        assert_int_equal(plan->accums[a].keys_per_sample, 120);
        assert_int_equal(plan->accums[a].count_per_sample, 16);
        assert_false(plan->accums[a].over_batch);
        assert_true(plan->accums[a].finalized >= 0);
        free(plan);
    }
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    opts.force_strategy = FG_STRATEGY_RESIDENT;
    fg_plan *plan = calloc(1, sizeof *plan);
    fg_error err;
    assert_int_equal(fg_plan_layer(ir, &opts, plan, &err), -1);
    fgt_assert_contains(err.msg, "test.lua:4: strategy \"resident\" is not possible for layer_norm { dim = 1 }");
    free(plan);
    free(ir);

    /* in a prologue: a statistics pass over the input, per position over its 32 channels */
    ir = fgt_load_string("return layer \"pcln\" {\n  input = { \"N\", 32, 6, 7 },\n"
                         "  layer_norm { name = \"norm\", dim = 1 },\n"
                         "  conv2d { out_channels = 64, kernel = 1 },\n}\n");
    assert_int_equal(ir->n_pro, 1);
    plan = fgt_plan(ir, -1);
    assert_int_equal(plan->pro_norm, 0);
    assert_int_equal(plan->passes[0].kind, FG_PASS_PRO_STATS);
    const fg_accum *pa = &plan->accums[plan->pro_accum];
    assert_int_equal(pa->keys_per_sample, 42);
    assert_int_equal(pa->count_per_sample, 32);
    free(plan);
    free(ir);
}

static void prologue_statistics_pass(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string("return layer \"sd_half\" {\n  input = { \"N\", 64, 16, 16 },\n"
                                      "  group_norm { name = \"norm1\", groups = 32 },\n  silu {},\n"
                                      "  conv2d { name = \"conv1\", out_channels = 64, kernel = 3, padding = 1 },\n}\n");
    assert_int_equal(ir->n_pro, 2);
    assert_int_equal(ir->n_ops, 1);
    static const fg_engine_choice engines[] = {FG_ENGINE_PREFER_FMA, FG_ENGINE_PREFER_MMA, FG_ENGINE_PREFER_WGMMA};
    for (int e = 0; e < 3; e++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, e == 2 ? "sm_90a" : "sm_90");
        opts.engine = engines[e];
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->pro_norm, 0);
        assert_int_equal(plan->passes[0].kind, FG_PASS_PRO_STATS);
        assert_int_equal(plan->passes[1].kind, FG_PASS_FINALIZE);
        const fg_accum *a = &plan->accums[plan->pro_accum];
        assert_true(a->prologue);
        assert_int_equal(a->kind, FG_ACCUM_MOMENTS);
        assert_int_equal(a->keys_per_sample, 32);
        assert_int_equal(a->count_per_sample, 2 * 16 * 16);
        assert_int_equal(plan->passes[0].n_zero, 1);
        assert_int_equal(plan->passes[1].finalize_accum, plan->pro_accum);
        for (int b = 0; b < plan->n_buffers; b++)
            assert_int_equal(plan->buffers[b].value, -1); /* packed operands only */
        if (e < 2)
            assert_int_equal(plan->n_buffers, 0);
        const fg_pass *stager = NULL;
        for (int p = 0; p < plan->n_passes; p++)
            if (plan->passes[p].kind == (e == 2 ? FG_PASS_PACK_INPUT : FG_PASS_CONV))
                stager = &plan->passes[p];
        assert_non_null(stager);
        bool stats = false, gamma = false;
        for (int q = 0; q < stager->n_args; q++) {
            stats |= stager->args[q].kind == FG_ARG_STATS && stager->args[q].index == plan->pro_accum;
            gamma |= stager->args[q].kind == FG_ARG_PARAM && stager->args[q].index == ir->pro[0].weight_param;
        }
        assert_true(stats && gamma);
        free(plan);
    }
    free(ir);

    /* channels last: the statistics by pixel rows where a key is a group of channels (16-byte
     * vectors of a pixel, 64 blocks a sample at most) or a pixel (a layer norm over its
     * channels: 4 pixels a thread, as many blocks as that makes); not for an NCHW input or
     * channels that do not fill the vectors */
    static const struct {
        const char *spec;
        int row_vec, block, row_pixels;
        int64_t grid_x;
    } rows[] = {
        /* 320 bf16 channels: 40 vectors a pixel, 6 pixels a step, 11 steps a block */
        {"input = { \"N\", 320, 64, 64 }, layout = \"channels_last\", dtype = \"bf16\",\n"
         "  group_norm { groups = 32 },\n  silu {},\n",
         8, 240, 66, 63},
        /* fp32 3D instance norm: 8 vectors a pixel, 32 pixels a step, 8 steps a block */
        {"input = { \"N\", 32, 16, 32, 32 }, layout = \"channels_last\",\n  instance_norm {},\n", 4, 256, 256,
         64},
        {"input = { \"N\", 320, 64, 64 }, dtype = \"bf16\",\n  group_norm { groups = 32 },\n", 0, 0, 0, 0},
        {"input = { \"N\", 12, 8, 8 }, layout = \"channels_last\", dtype = \"bf16\",\n  group_norm { groups = 4 },\n",
         0, 0, 0, 0},
        /* a key a pixel: 8 vectors a pixel, 32 pixels a step, 4 steps a block, 64 pixels */
        {"input = { \"N\", 32, 8, 8 }, layout = \"channels_last\",\n  layer_norm { dim = 1 },\n", 4, 256, 128, 1},
        /* 96 bf16 channels (ConvNeXt's) on 56x56: 12 vectors a pixel, 21 a step, 84 a block */
        {"input = { \"N\", 96, 56, 56 }, layout = \"channels_last\", dtype = \"bf16\",\n  layer_norm { dim = 1 },\n",
         8, 252, 84, 38},
        {"input = { \"N\", 32, 8, 8 },\n  layer_norm { dim = 1 },\n", 0, 0, 0, 0},
    };
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        char spec[512];
        snprintf(spec, sizeof spec, "return layer \"rows\" {\n  %s  conv%dd { out_channels = 16, kernel = 1 },\n}\n",
                 rows[r].spec, r == 1 ? 3 : 2);
        ir = fgt_load_string(spec);
        fg_plan *plan = fgt_plan(ir, -1);
        const fg_launch *l = &plan->passes[0].launch;
        assert_int_equal(plan->passes[0].kind, FG_PASS_PRO_STATS);
        assert_int_equal(l->row_vec, rows[r].row_vec);
        if (rows[r].row_vec) {
            assert_int_equal(l->block, rows[r].block);
            assert_int_equal(l->row_pixels, rows[r].row_pixels);
            assert_int_equal(l->grid_x, rows[r].grid_x);
            assert_int_equal(l->elems_per_thread * (l->block / (ir->input.dim[1] / l->row_vec)), l->row_pixels);
        }
        free(plan);
        free(ir);
    }

    /* the wgmma input pack by pixel rows (fg_wgmma_tiling.pack_vec) where a channels-last
     * input is its packed layout: no padding channels, whole 16-byte vectors; not for an NCHW
     * input, padded groups (6 channels -> 8) or a half input packed as it is (read directly) */
    static const struct {
        const char *spec;
        int pack_vec;
    } packs[] = {
        {"layout = \"channels_last\", dtype = \"bf16\",\n  group_norm { groups = 8 },\n  silu {},\n"
         "  conv2d { out_channels = 64, kernel = 3, padding = 1 },\n",
         8},
        {"layout = \"channels_last\",\n  conv2d { out_channels = 64, kernel = 3, padding = 1, groups = 2 },\n", 4},
        {"dtype = \"bf16\",\n  group_norm { groups = 8 },\n  conv2d { out_channels = 64, kernel = 3 },\n", 0},
        {"layout = \"channels_last\",\n  conv2d { out_channels = 64, kernel = 3, groups = 8 },\n", 0},
        {"layout = \"channels_last\", dtype = \"bf16\",\n  conv2d { out_channels = 64, kernel = 1 },\n", 0},
    };
    for (size_t r = 0; r < sizeof packs / sizeof *packs; r++) {
        char spec[512];
        snprintf(spec, sizeof spec, "return layer \"packs\" {\n  input = { \"N\", 48, 10, 12 }, %s}\n",
                 packs[r].spec);
        ir = fgt_load_string(spec);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.engine = FG_ENGINE_PREFER_WGMMA;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->passes[plan->n_passes - 1].conv.engine, FG_CONV_WGMMA);
        assert_int_equal(plan->wgmma.pack_vec, packs[r].pack_vec);
        free(plan);
        free(ir);
    }

    /* eval-mode BatchNorm: a per-channel affine from the running statistics, no pass */
    ir = fgt_load_string("return layer \"preact\" {\n  input = { \"N\", 16, 8, 8 },\n"
                         "  batch_norm { name = \"bn\", stats = \"running\" },\n  relu {},\n"
                         "  conv2d { out_channels = 16, kernel = 1 },\n}\n");
    fg_plan *plan = fgt_plan(ir, -1);
    assert_int_equal(plan->pro_norm, -1);
    assert_int_equal(plan->pro_accum, -1);
    assert_int_equal(plan->passes[0].kind == FG_PASS_PRO_STATS, 0);
    free(plan);
    free(ir);

    /* precision tf32 off wgmma: the generated conv (it applies the prologue), not cuDNN */
    ir = fgt_load_string("return layer \"tf\" {\n  input = { \"N\", 32, 16, 16 },\n  precision = \"tf32\",\n"
                         "  group_norm { groups = 8 },\n  silu {},\n"
                         "  conv2d { out_channels = 32, kernel = 3, padding = 1 },\n}\n");
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_80");
    plan = fgt_plan_with(ir, &opts);
    for (int p = 0; p < plan->n_passes; p++)
        assert_int_not_equal(plan->passes[p].kind, FG_PASS_CUDNN);
    text_sink *t = printed_plan(ir, plan);
    fgt_assert_contains(t->buf, "prologue: pro0..pro1 applied to each input element as the conv stages it");
    fgt_assert_contains(t->buf, "statistics of pro0 by a pass over the input");
    fgt_assert_contains(t->buf, "cuDNN's conv (it reads the raw input) is not used");
    fgt_assert_contains(t->buf, "pro_stat fg_pass0_pro_stats: reads the input, feeds s0");
    t->len = 0;
    fg_ir_print(ir, collect_line, t);
    fgt_assert_contains(t->buf, "pro0  group_norm");
    fgt_assert_contains(t->buf, "pro1  silu");
    free(t);
    free(plan);

    /* resident: refused, naming the prologue */
    fg_error err = {{0}};
    fg_plan_options_for_arch(&opts, "sm_90");
    opts.force_strategy = FG_STRATEGY_RESIDENT;
    plan = malloc(sizeof *plan);
    assert_int_equal(fg_plan_layer(ir, &opts, plan, &err), -1);
    fgt_assert_contains(err.msg, "test.lua:4:"); /* the first op before the conv */
    fgt_assert_contains(err.msg, "strategy \"resident\" is not possible for a layer with ops before the conv");
    free(plan);
    free(ir);
}

/* A norm over each position's channels (layer_norm { dim = 1 }) first in the prologue of a wgmma
 * conv whose channels-last input the pack reads by pixel rows, every channel of a pixel in one
 * block: the pack computes the statistics (fg_plan.pack_pixel_stats), no statistics pass, no
 * accumulator, no finalize. Not for an NCHW input, a norm after another prologue op, a norm
 * over whole channels, or off wgmma. */
static void pack_computes_pixel_statistics(void **state)
{
    (void)state;
    static const struct {
        const char *fields, *pro;
        int cout;
        bool pack_stats;
    } cases[] = {
        {"dtype = \"bf16\", layout = \"channels_last\"", "layer_norm { dim = 1, eps = 1e-6 }", 384, true},
        {"layout = \"channels_last\"", "layer_norm { dim = 1 }, relu {}", 128, true},
        {"dtype = \"fp16\", layout = \"channels_last\", precision = \"tf32\"", "layer_norm { dim = 1 }", 64, true},
        {"dtype = \"bf16\"", "layer_norm { dim = 1 }", 384, false},
        {"dtype = \"bf16\", layout = \"channels_last\"", "add { scalar = 1 }, layer_norm { dim = 1 }", 384, false},
        {"dtype = \"bf16\", layout = \"channels_last\"", "group_norm { groups = 8 }", 384, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "return layer \"pix\" {\n  input = { \"N\", 96, 14, 14 }, %s,\n  %s,\n"
                 "  conv2d { out_channels = %d, kernel = 1 },\n}\n",
                 cases[i].fields, cases[i].pro, cases[i].cout);
        fg_layer_ir *ir = fgt_load_string(spec);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->wgmma.parts != 0, 1);
        assert_int_equal(plan->pack_pixel_stats, cases[i].pack_stats);
        int stats_passes = 0;
        for (int k = 0; k < plan->n_passes; k++)
            stats_passes += plan->passes[k].kind == FG_PASS_PRO_STATS || plan->passes[k].kind == FG_PASS_FINALIZE;
        text_sink *t = printed_plan(ir, plan);
        if (cases[i].pack_stats) {
            assert_int_equal(plan->pro_norm, 0);
            assert_int_equal(plan->pro_accum, -1);
            assert_int_equal(plan->n_accums, 0);
            assert_int_equal(stats_passes, 0);
            fgt_assert_contains(t->buf, "statistics of pro0 computed by the input pack, each pixel's from its channels");
        } else {
            assert_true(plan->pro_accum >= 0);
            assert_true(stats_passes >= 1);
            fgt_assert_not_contains(t->buf, "computed by the input pack");
        }
        free(t);
        free(plan);
        free(ir);
    }
    /* off wgmma (sm_80): the statistics pass */
    fg_layer_ir *ir = fgt_load_string("return layer \"pix\" {\n  input = { \"N\", 96, 14, 14 }, dtype = \"bf16\", "
                                      "layout = \"channels_last\",\n  layer_norm { dim = 1 },\n"
                                      "  conv2d { out_channels = 384, kernel = 1 },\n}\n");
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_80");
    fg_plan *plan = fgt_plan_with(ir, &opts);
    assert_false(plan->pack_pixel_stats);
    assert_int_equal(plan->passes[0].kind, FG_PASS_PRO_STATS);
    free(plan);
    free(ir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pack_computes_pixel_statistics),
        cmocka_unit_test(many_parameters_in_one_pass),
        cmocka_unit_test(ungeneratable_convs_are_refused),
        cmocka_unit_test(kb17),
        cmocka_unit_test(kb21),
        cmocka_unit_test(kb23),
        cmocka_unit_test(channel_sums),
        cmocka_unit_test(kb79),
        cmocka_unit_test(kb85),
        cmocka_unit_test(kb92),
        cmocka_unit_test(softmax_needs_max_sumexp_and_finalize),
        cmocka_unit_test(large_mean_reads_its_accumulator),
        cmocka_unit_test(running_batch_norm_fuses_into_conv),
        cmocka_unit_test(running_batch_norm_after_the_conv_is_folded),
        cmocka_unit_test(batch_norm_is_not_folded_when_the_conv_value_is_read),
        cmocka_unit_test(recompute_runs_the_conv_twice),
        cmocka_unit_test(named_value_behind_a_statistic),
        cmocka_unit_test(channels_last_map_tiles),
        cmocka_unit_test(unary_only_layer_is_one_pass),
        cmocka_unit_test(tensor_core_tiling),
        cmocka_unit_test(channels_last_fma_mapping),
        cmocka_unit_test(plan_print_mentions_every_pass),
        cmocka_unit_test(resident_on_request),
        cmocka_unit_test(engine_by_arch_and_precision),
        cmocka_unit_test(engine_left_open_is_timed),
        cmocka_unit_test(split_k_fills_small_grids),
        cmocka_unit_test(split_k_leaves_large_grids),
        cmocka_unit_test(split_k_forced_and_printed),
        cmocka_unit_test(split_waves_rule),
        cmocka_unit_test(split_waves_planned),
        cmocka_unit_test(wgmma_flat_tiles_where_images_are_small),
        cmocka_unit_test(wgmma_channel_reduction_fused),
        cmocka_unit_test(wgmma_channel_reduction_not_fused),
        cmocka_unit_test(wgmma_m64_knob),
        cmocka_unit_test(wgmma_wide_channel_blocks),
        cmocka_unit_test(wgmma_multicast_where_b_is_shared),
        cmocka_unit_test(wgmma_a_tma_where_tma_builds_the_stage),
        cmocka_unit_test(wgmma_ping_pong_where_it_pays),
        cmocka_unit_test(wgmma_two_ctas_where_they_fit),
        cmocka_unit_test(wgmma_staged_epilogue_where_channels_last),
        cmocka_unit_test(wgmma_residual_in_shared_memory),
        cmocka_unit_test(split_waves_convnext),
        cmocka_unit_test(wgmma_epilogue_rows_unrolled),
        cmocka_unit_test(wgmma_pack_whole_pixels),
        cmocka_unit_test(wgmma_tiles_in_turn),
        cmocka_unit_test(wgmma_flat_in_turn),
        cmocka_unit_test(fast_gelu_where_asked),
        cmocka_unit_test(wgmma_epi_vec_where_asked),
        cmocka_unit_test(wgmma_flat_predicated),
        cmocka_unit_test(wgmma_refusal_said),
        cmocka_unit_test(wgmma_half_operands),
        cmocka_unit_test(wgmma_half_prologue_operands),
        cmocka_unit_test(prologue_statistics_pass),
        cmocka_unit_test(channel_layer_norm_statistics),
    };
    char *dir = fgt_tmpdir("planner-env");
    fgt_isolate_environment(dir);
    int failed = cmocka_run_group_tests_name("planner", tests, NULL, NULL);
    fgt_rmtree(dir);
    free(dir);
    return failed;
}
