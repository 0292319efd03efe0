/* SPDX-License-Identifier: Apache-2.0 */
/* `fusegen plan`'s account of a plan (fg_plan_print, gen/planner.h): the passes, what each
 * computes, stores and feeds, the engines' tilings and launch geometry, and the reasons the
 * planner records (a tf32 conv left to the exact engines, wgmma refused, split K). Reads the
 * plan only: gen/planner.c makes it. */
#include "planner.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *accum_kind_name(fg_accum_kind k)
{
    return fg_accum_defs[k].describe;
}

/* Split K counted in waves (FUSEGEN_SPLIT_WAVES=1, the rule at wgmma_split): the rule, and the
 * splits it takes at each batch whose tiles leave room for two splits (past those, none). */
static void print_split_waves(const fg_wgmma_tiling *w, int64_t tiles, void (*emit)(void *ctx, const char *line),
                              void *ctx)
{
    char line[1024];
    snprintf(line, sizeof line,
             "           split K in up to %d, counted in waves (FUSEGEN_SPLIT_WAVES=1): a sample's %" PRId64
             " tiles, %d K chunks (>= %d a split); a launch takes the S of the least waves of %d SMs x chunks a "
             "split + %d/%d of a chunk a partial (S > 1), tiles x S <= %d (the partials held), the fewer on a tie; "
             "each split writes an fp32 partial, the last to arrive adds them in split order and runs the epilogue",
             w->split_k, tiles, w->kch, w->split_min_chunks, w->split_sms, w->split_partial_cost, w->split_chunk_cost,
             w->split_fill);
    emit(ctx, line);
    int len = snprintf(line, sizeof line, "           splits by batch (waves):");
    int64_t n = 1;
    for (; len < 900 && 2 * fg_wgmma_tiles(w, tiles, n) <= w->split_fill; n *= 2) {
        const int64_t t = fg_wgmma_tiles(w, tiles, n);
        const int s = fg_wgmma_splits(w, t);
        const int64_t waves = fg_wgmma_split_waves(w, t * s);
        len += snprintf(line + len, sizeof line - (size_t)len, " N=%" PRId64 ": %d (%" PRId64 " tiles, %" PRId64 " wave%s),",
                        n, s, t, waves, waves > 1 ? "s" : "");
    }
    if (len < 900)
        snprintf(line + len, sizeof line - (size_t)len, " N=%" PRId64 " and larger: none (2 x %" PRId64 " tiles > %d)", n,
                 fg_wgmma_tiles(w, tiles, n), w->split_fill);
    emit(ctx, line);
}

/* Split K (the rule at wgmma_split): how many splits, at which batches, and why. */
static void print_split(const fg_wgmma_tiling *w, int64_t tiles, void (*emit)(void *ctx, const char *line), void *ctx)
{
    if (w->split_waves) {
        print_split_waves(w, tiles, emit, ctx);
        return;
    }
    char line[1024];
    snprintf(line, sizeof line,
             "           split K in up to %d: a sample's %" PRId64 " tiles fill %" PRId64 " of %d SMs, so up to %d CTAs "
             "share a tile's %d K chunks (>= %d each); each writes an fp32 partial, the last to arrive adds them in "
             "split order and runs the epilogue",
             w->split_k, tiles, tiles, w->split_fill, w->split_k, w->kch, w->split_min_chunks);
    emit(ctx, line);
    int len = snprintf(line, sizeof line, "           splits by batch (tiles x splits <= %d):", w->split_fill);
    for (int64_t n = 1; len < 900; n *= 2) {
        int s = fg_wgmma_splits(w, fg_wgmma_tiles(w, tiles, n));
        len += snprintf(line + len, sizeof line - (size_t)len, " N=%" PRId64 ": %d%s", n, s, s > 1 ? "," : "");
        if (s == 1) {
            len += snprintf(line + len, sizeof line - (size_t)len, " (and larger: none)");
            break;
        }
    }
    emit(ctx, line);
}

/* Why the channel-sums strategy applies (the rule at channel_sums_reduction in planner.c). */
static void print_channel_sums_why(const fg_layer_ir *ir, const fg_plan *plan, const fg_pass *ps,
                                   void (*emit)(void *ctx, const char *line), void *ctx)
{
    char line[1024];
    const int k = ps->first, r = ps->chan_sums;
    const fg_op *red = &ir->ops[r];
    int len = snprintf(line, sizeof line, "  why: v%d (%s over dims {", r, fg_op_kind_name(red->kind));
    for (int d = 1, first = 1; d < red->in.rank; d++)
        if (red->reduce_mask & (1u << d)) {
            len += snprintf(line + len, sizeof line - (size_t)len, "%s%d", first ? "" : ",", d);
            first = 0;
        }
    len += snprintf(line + len, sizeof line - (size_t)len,
                    "}) reduces every position of v%d, which is %s (op %d: statistics over whole channels)", r - 1,
                    fg_op_kind_name(ir->ops[k].kind), k);
    if (r - 1 > k)
        len += snprintf(line + len, sizeof line - (size_t)len, " then ops %d..%d, affine per channel", k + 1, r - 1);
    snprintf(line + len, sizeof line - (size_t)len,
             "; an affine map commutes with a mean, so v%d needs only each channel's mean of v%d, and the norm's "
             "statistics come from the same fp64 sums per channel (s%d): the conv runs once (recompute would run it "
             "twice), v%d is never stored (materialize would store it)",
             r, k - 1, plan->op_accum[r], k - 1);
    emit(ctx, line);
}

void fg_plan_print(const fg_layer_ir *ir, const fg_plan *plan, void (*emit)(void *ctx, const char *line),
                   void *ctx)
{
    char line[1024];
    static const char *const strategies[] = {
        "materialize (the value before each statistic is stored once)",
        "recompute (the conv runs twice, no intermediate)",
        "resident (one kernel; a cluster keeps each norm group in shared memory)",
        "channel_sums (the conv runs once and feeds fp64 moments per channel; the reduction is computed from them)"};
    static_assert(sizeof strategies / sizeof *strategies == FG_STRATEGY_CHANNEL_SUMS + 1, "a strategy without words");
    snprintf(line, sizeof line, "plan: %d passes, strategy %s", plan->n_passes, strategies[plan->strategy]);
    emit(ctx, line);
    for (int i = 0; i < plan->n_passes; i++)
        if (plan->passes[i].chan_sums >= 0)
            print_channel_sums_why(ir, plan, &plan->passes[i], emit, ctx);
    if (plan->wgmma_refused[0]) {
        snprintf(line, sizeof line, "  the conv is on %s: wgmma cannot run it (%s)", fg_plan_conv_engine_name(plan),
                 plan->wgmma_refused);
        emit(ctx, line);
    }
    if (plan->fast_gelu)
        emit(ctx, "  precision tf32: GELU's erf by a five-term fit (FUSEGEN_FAST_GELU=2; within 5.3e-7 of it, "
                  "~16 instructions an element against erff's ~24)");
    if (plan->tf32_exact) {
        snprintf(line, sizeof line,
                 "  precision tf32: %s computes the conv exactly; with %lld outputs a group one TF32 product is no "
                 "faster (measured; gen/planner.c, tf32_stays_exact)",
                 fg_plan_conv_engine_name(plan), (long long)(ir->ops[0].out_channels / ir->ops[0].groups));
        emit(ctx, line);
    }
    if (ir->dtype != FG_DTYPE_FP32) {
        const char *d = fg_dtype_name(ir->dtype);
        if (plan->wgmma.parts && ir->n_pro)
            snprintf(line, sizeof line,
                     "  dtype %s: the input is read as %s and widened to fp32 where the prologue reads it; the "
                     "conv's wgmma reads the prologue's fp32 result %s (%s operands, fp32 accumulation); the output "
                     "is rounded to %s (to nearest even) where it is stored; everything between is fp32",
                     d, d, plan->wgmma.a_parts == 2 ? "split into hi + lo of the dtype" : "rounded to the dtype",
                     fg_wgmma_operand_name(plan->wgmma.operand), d);
        else if (plan->wgmma.parts)
            snprintf(line, sizeof line,
                     "  dtype %s: the conv's wgmma reads the input as %s (%s operands, fp32 accumulation); the "
                     "output is rounded to %s (to nearest even) where it is stored; everything between is fp32",
                     d, d, fg_wgmma_operand_name(plan->wgmma.operand), d);
        else
            snprintf(line, sizeof line,
                     "  dtype %s: the input is read as %s and widened to fp32 where the conv loads it; the output is "
                     "rounded to %s (to nearest even) where it is stored; everything between is fp32",
                     d, d, d);
        emit(ctx, line);
        if (ir->precision == FG_PRECISION_TF32 && !plan->wgmma.parts && !plan->tf32_exact) {
            snprintf(line, sizeof line,
                     "  precision tf32 with dtype %s: cuDNN's conv (fp32 only) is not used; %s computes the conv "
                     "(as exact as fp32)",
                     d, fg_plan_conv_engine_name(plan));
            emit(ctx, line);
        }
    }
    if (ir->layout == FG_LAYOUT_CHANNELS_LAST) {
        bool io_buffer = false;
        for (int i = 0; i < plan->n_buffers; i++)
            io_buffer |= plan->buffers[i].io;
        snprintf(line, sizeof line,
                 "  layout channels_last: the input is read as N%sC and the output written as N%sC (channels "
                 "innermost); every buffer between is NC%s%s",
                 ir->input.rank == 5 ? "DHW" : "HW", ir->input.rank == 5 ? "DHW" : "HW",
                 ir->input.rank == 5 ? "DHW" : "HW", io_buffer ? " but one held as the output is (below)" : "");
        emit(ctx, line);
        if (ir->precision == FG_PRECISION_TF32 && ir->dtype == FG_DTYPE_FP32 && !plan->wgmma.parts &&
            !plan->tf32_exact) {
            snprintf(line, sizeof line,
                     "  precision tf32 with layout channels_last: cuDNN's conv (NCHW only here) is not used; %s "
                     "computes the conv (as exact as fp32)",
                     fg_plan_conv_engine_name(plan));
            emit(ctx, line);
        }
    }
    if (ir->n_pro) {
        bool wg = plan->wgmma.parts != 0;
        int len = snprintf(line, sizeof line, "  prologue: pro0..pro%d applied to each input element %s (padding stays "
                                              "zero); no tensor holds the normalized input",
                           ir->n_pro - 1,
                           wg ? "as the wgmma input pack writes it (the packed hi/lo hold the normalized input)"
                              : "as the conv stages it in shared memory");
        if (plan->pro_norm >= 0)
            snprintf(line + len, sizeof line - (size_t)len, "; statistics of pro%d %s%s", plan->pro_norm,
                     ir->pro_stats_given      ? "gathered by the layer of the block that writes the input, as it stores it"
                     : plan->pack_pixel_stats ? "computed by the input pack, each pixel's from its channels in the block "
                                                "(fp32, two passes over registers: no statistics pass, no finalize)"
                                              : "by a pass over the input",
                     plan->pack_finalizes ? ", finalized by each block of the input pack (no finalize pass)" : "");
        emit(ctx, line);
        if (ir->precision == FG_PRECISION_TF32 && !wg && !plan->tf32_exact) {
            snprintf(line, sizeof line,
                     "  precision tf32 with a prologue: cuDNN's conv (it reads the raw input) is not used; %s computes "
                     "the conv (as exact as fp32)",
                     fg_plan_conv_engine_name(plan));
            emit(ctx, line);
        }
    }
    if (plan->fold.op >= 0) {
        const fg_op *bn = &ir->ops[plan->fold.op];
        snprintf(line, sizeof line,
                 "  folded: %s %s (v%d, line %d) into the conv's weights and bias, computed in float64 when they "
                 "are bound; the kernels read v%d as v%d",
                 fg_op_kind_name(bn->kind), bn->name, plan->fold.op, bn->line, plan->fold.op, plan->fold.op - 1);
        emit(ctx, line);
    }
    for (int i = 0; i < plan->n_passes; i++) {
        const fg_pass *ps = &plan->passes[i];
        int len;
        if (ps->kind == FG_PASS_PACK_INPUT || ps->kind == FG_PASS_PACK_WEIGHTS) {
            const fg_wgmma_tiling *w = &plan->wgmma;
            if (ps->kind == FG_PASS_PACK_INPUT && w->operand != FG_WGMMA_TF32 && ir->n_pro)
                snprintf(line, sizeof line,
                         "  pass %d pack     %s: the input through the prologue, channels-innermost, %s %s, into b%d%s", i,
                         ps->kernel, fg_wgmma_operand_name(w->operand),
                         w->a_parts == 2 ? "hi and lo (v - hi)" : "rounded to nearest", w->packed_hi,
                         w->a_parts == 2 ? " and the next" : "");
            else if (ps->kind == FG_PASS_PACK_INPUT && w->operand != FG_WGMMA_TF32)
                snprintf(line, sizeof line, "  pass %d pack     %s: the input channels-innermost, as %s, into b%d%s", i,
                         ps->kernel, fg_wgmma_operand_name(w->operand), w->packed_hi,
                         w->input_direct ? " (skipped where the input is 16-byte aligned: it already is that)" : "");
            else if (ps->kind == FG_PASS_PACK_INPUT)
                snprintf(line, sizeof line, "  pass %d pack     %s: the input channels-innermost, TF32 hi%s, into b%d%s", i,
                         ps->kernel, w && w->packed_lo >= 0 ? " and lo" : "", w ? w->packed_hi : -1,
                         w && w->packed_lo >= 0 ? " and the next" : "");
            else if (w->operand != FG_WGMMA_TF32)
                snprintf(line, sizeof line,
                         "  pass %d pack     %s: the weights as the wgmma B tiles' images, %s %s, into b%d; packed "
                         "once at bind (or at the prepare after it), not in a run",
                         i, ps->kernel, fg_wgmma_operand_name(w->operand),
                         w->parts == 2 ? "hi and lo (w - hi)" : "rounded to nearest", w->packed_w);
            else
                snprintf(line, sizeof line,
                         "  pass %d pack     %s: the weights as the wgmma B tiles' images, into b%d; packed once at "
                         "bind (or at the prepare after it), not in a run",
                         i, ps->kernel, w->packed_w);
            emit(ctx, line);
            if (ps->kind == FG_PASS_PACK_INPUT && w->pack_vec) {
                snprintf(line, sizeof line,
                         "           by pixel rows: the channels-last input is the packed layout already (no padding "
                         "channels), %d elements (16 bytes) a thread at a time",
                         w->pack_vec);
                emit(ctx, line);
            }
            snprintf(line, sizeof line, "           launch: %d threads, grid %lld x %lld x %s%s", ps->launch.block,
                     (long long)ps->launch.grid_x, (long long)ps->launch.grid_y, ps->launch.per_sample ? "N" : "1",
                     ps->launch.grid_y > 1 ? " (the channels in blocks: too wide for one block's tile)" : "");
            emit(ctx, line);
            continue;
        }
        if (ps->kind == FG_PASS_PRO_STATS) {
            const fg_accum *a = &plan->accums[plan->pro_accum];
            const fg_op *norm = &ir->pro[plan->pro_norm];
            snprintf(line, sizeof line,
                     "  pass %d pro_stat %s: reads the input%s, feeds s%d (%s of the input for pro%d %s, %lld keys of "
                     "%lld elements per sample%s)",
                     i, ps->kernel, plan->pro_norm ? " through the prologue ops before its norm" : "",
                     plan->pro_accum, accum_kind_name(a->kind), plan->pro_norm, fg_op_kind_name(norm->kind),
                     (long long)a->keys_per_sample, (long long)a->count_per_sample, a->over_batch ? ", over the batch" : "");
            emit(ctx, line);
            fg_stat_layout sl;
            fg_norm_stat_layout(norm, &sl);
            if (ps->launch.row_vec)
                snprintf(line, sizeof line,
                         "           launch: %d threads, grid %lld x 1 x N: pixel rows (channels last), %d channels "
                         "(16 bytes) a thread at a time, %d pixels a block, %s",
                         ps->launch.block, (long long)ps->launch.grid_x, ps->launch.row_vec, ps->launch.row_pixels,
                         sl.per_position ? "a pixel's threads' fp64 sums added up in the block, one flush a pixel (its key)"
                                         : "per-channel fp64 sums added into the keys");
            else
                snprintf(line, sizeof line, "           launch: %d threads, grid %lld x 1 x N", ps->launch.block,
                         (long long)ps->launch.grid_x);
            emit(ctx, line);
            continue;
        }
        if (ps->kind == FG_PASS_FINALIZE) {
            const fg_accum *a = &plan->accums[ps->finalize_accum];
            if (a->prologue)
                len = snprintf(line, sizeof line, "  pass %d %-8s %s: statistics s%d of the input for pro%d (%s)", i,
                               "finalize", ps->kernel, ps->finalize_accum, a->op, fg_op_kind_name(ir->pro[a->op].kind));
            else
                len = snprintf(line, sizeof line, "  pass %d %-8s %s: statistics s%d of v%d for op %d (%s)", i,
                               "finalize", ps->kernel, ps->finalize_accum, a->value, a->op,
                               fg_op_kind_name(ir->ops[a->op].kind));
        } else {
            const char *from = ps->kind == FG_PASS_CONV ? "conv" : "";
            if (ps->kind == FG_PASS_RESIDENT) {
                const struct fg_resident *r = &ps->res;
                snprintf(line, sizeof line,
                         "  pass %d resident %s: conv v0..v%d kept in shared memory, statistics of op %d over "
                         "clusters of %d CTAs, then v%d..v%d, writes the output",
                         i, ps->kernel, r->norm_op - 1, r->norm_op, r->cluster, r->norm_op, ps->last);
                emit(ctx, line);
                snprintf(line, sizeof line,
                         "           a cluster owns %d channels (norm groups of %d) of one sample; each CTA %lld rows, "
                         "%lld floats per channel",
                         r->channel_block, r->channel_group, (long long)((r->rows + r->cluster - 1) / r->cluster),
                         (long long)r->slice);
                emit(ctx, line);
                const fg_conv_tiling *t = &ps->conv;
                snprintf(line, sizeof line,
                         "           conv tiles %dx%d outputs, %dx%d outputs x %d channels per thread, %d input channels "
                         "staged at a time",
                         t->tile[1], t->tile[2], t->thread_h, t->thread_w, t->thread_co, t->ci_chunk);
                emit(ctx, line);
                snprintf(line, sizeof line, "           launch: %d threads, grid %lld x %lld x N, %d B shared",
                         ps->launch.block, (long long)ps->launch.grid_x, (long long)ps->launch.grid_y,
                         ps->launch.smem_bytes);
                emit(ctx, line);
                continue;
            }
            if (ps->kind == FG_PASS_CUDNN) {
                snprintf(line, sizeof line, "  pass %d cudnn    cuDNN's convolution (TF32 allowed) computes v0%s", i,
                         ps->store_output ? " and writes the output" : ", stored in b0");
                emit(ctx, line);
                continue;
            }
            char src[32];
            if (ps->source_buffer >= 0)
                snprintf(src, sizeof src, "buffer b%d (v%d)", ps->source_buffer, plan->buffers[ps->source_buffer].value);
            else
                snprintf(src, sizeof src, "%s", ps->kind == FG_PASS_CONV ? "the input" : "statistics");
            if (ps->first <= ps->last)
                len = snprintf(line, sizeof line, "  pass %d %-8s %s: reads %s, computes %s v%d..v%d inline", i,
                               ps->kind == FG_PASS_CONV ? "conv" : "map", ps->kernel, src, from, ps->first, ps->last);
            else
                len = snprintf(line, sizeof line, "  pass %d %-8s %s: reads %s again", i, "map", ps->kernel, src);
            if (ps->store_output)
                len += snprintf(line + len, sizeof line - (size_t)len, ", writes the output");
            if (ps->store_buffer >= 0)
                len += snprintf(line + len, sizeof line - (size_t)len, ", stores v%d in b%d", ps->domain,
                                ps->store_buffer);
            for (int f = 0; f < ps->n_feeds; f++)
                len += snprintf(line + len, sizeof line - (size_t)len, ", feeds s%d (%s of v%d%s)", ps->feeds[f],
                                accum_kind_name(plan->accums[ps->feeds[f]].kind), plan->accums[ps->feeds[f]].value,
                                plan->accums[ps->feeds[f]].per_channel ? " per channel" : "");
        }
        emit(ctx, line);
        if (ps->chan_sums >= 0) {
            const int k = ps->first, r = ps->chan_sums;
            const fg_op *red = &ir->ops[r];
            const char *then = !(red->reduce_mask & 2u)           ? "kept per channel"
                               : red->kind == FG_OP_REDUCE_SUM ? "summed over the channels"
                                                               : "averaged over the channels";
            snprintf(line, sizeof line,
                     "           v%d from s%d: per channel, its mean of v%d through v%d..v%d in fp64 (the norm's "
                     "mean and variance from the sums of its channels), %s%s; v%d..v%d are never computed per "
                     "element",
                     r, plan->op_accum[r], k - 1, k, r - 1, then,
                     red->kind == FG_OP_REDUCE_SUM ? ", times the positions of a channel" : "", k, r - 1);
            emit(ctx, line);
        }
        const fg_launch *l = &ps->launch;
        if (ps->kind == FG_PASS_CONV && ps->conv.engine == FG_CONV_WGMMA) {
            const fg_wgmma_tiling *w = &plan->wgmma;
            const char *op = fg_wgmma_operand_name(w->operand);
            char how[96];
            if (w->operand == FG_WGMMA_TF32)
                snprintf(how, sizeof how, "%s", w->parts == 2 ? "3xTF32, chunks accumulated in fp32" : "one TF32 product");
            else if (w->a_parts == 2)
                snprintf(how, sizeof how, "%s operands, x_lo.w_hi + x_hi.w_lo + x_hi.w_hi, chunks accumulated in fp32",
                         op);
            else if (w->parts == 2)
                snprintf(how, sizeof how, "%s operands, x.w_lo + x.w_hi, chunks accumulated in fp32", op);
            else if (ir->n_pro)
                snprintf(how, sizeof how, "%s operands, one product, input and weights rounded to %s", op, op);
            else
                snprintf(how, sizeof how, "%s operands, one product, weights rounded to %s", op, op);
            snprintf(line, sizeof line,
                     "           wgmma tensor cores (%s): tiles of %d pixels x %d channels, %d m64 tiles per consumer "
                     "warpgroup, %d K chunks of %d, a ring of %d stages; persistent blocks%s",
                     how, w->bm, w->bn, w->wgmt, w->kch, w->kc_elems, w->stages,
                     w->multicast == 2 ? " in pairs (clusters of 2) that share each weight chunk by TMA multicast" : "");
            emit(ctx, line);
            if (w->flat) {
                snprintf(line, sizeof line,
                         "           flat tiles: a sample has %" PRId64 " output pixels, so a tile's %d rows run on over the "
                         "next samples' pixels (the batch's pixels flattened: %" PRId64 " tiles a channel block at "
                         "batch 32 instead of %" PRId64 "); the channel blocks of a tile's rows are consecutive tiles",
                         w->opix, w->bm, fg_wgmma_tiles(w, w->m_tiles, 32), (int64_t)32 * w->m_tiles);
                emit(ctx, line);
                if (w->flat_predicated) {
                    snprintf(line, sizeof line,
                             "           a row past the batch is skipped by predicated stores, not a branch around each "
                             "output (FUSEGEN_WGMMA_FLAT_PREDICATED=1: a branch), so that a warp's rows interleave");
                    emit(ctx, line);
                }
            }
            if (w->a_tma == 2) {
                snprintf(line, sizeof line,
                         "           the input's im2col rows (A) by TMA in im2col mode: one rank-%d tensor copy of %d "
                         "pixels x 128 bytes per stage and part, issued by one producer thread (FUSEGEN_WGMMA_A_TMA=1: cp.async)",
                         w->im2col.rank, w->im2col.pixels);
                emit(ctx, line);
            } else if (w->a_tma_refused) {
                snprintf(line, sizeof line,
                         "           the input's im2col rows (A) by 128 producer threads' cp.async: TMA was asked for "
                         "(FUSEGEN_WGMMA_A_TMA=2) and refused: %s",
                         w->a_tma_refused);
                emit(ctx, line);
            }
            if (w->ctas_per_sm == 2) {
                snprintf(line, sizeof line,
                         "           two CTAs a multiprocessor (FUSEGEN_WGMMA_CTAS=2): a persistent grid of twice the "
                         "SMs, consumers %d registers, producer %d",
                         w->consumer_regs, w->producer_regs);
                emit(ctx, line);
            }
            if (w->alternate) {
                snprintf(line, sizeof line,
                         "           the two consumer warpgroups take whole tiles of %d pixels in turn "
                         "(FUSEGEN_WGMMA_ALTERNATE=1: shared tiles): one's main loop runs while the other's epilogue does; "
                         "%s",
                         w->bm,
                         w->split_k > 1 ? "a split's unit is one warpgroup's, whose fixup syncs that warpgroup alone"
                                        : "no split K");
                emit(ctx, line);
            }
            if (w->ping_pong) {
                snprintf(line, sizeof line,
                         "           each K chunk's sum into one of two accumulators in turn (ping-pong), the next "
                         "chunk's wgmmas running while it is added; consumers %d registers, producer %d",
                         w->consumer_regs, w->producer_regs);
                emit(ctx, line);
            }
            if (fg_wgmma_staged_epilogue(plan, ps)) {
                snprintf(line, sizeof line,
                         "           the epilogue through shared memory (channels last): each consumer warp stages its "
                         "%d rows x %d channels of the accumulators and reads them back a pixel at a time, its lanes "
                         "along the channels, so its loads and stores are contiguous",
                         FG_WGMMA_EPI_ROWS, FG_WGMMA_EPI_COLS);
                emit(ctx, line);
                const int vec = fg_wgmma_epi_vec(plan, ps);
                if (vec > 1) {
                    snprintf(line, sizeof line,
                             "           a lane reads %d neighbouring channels of a row back and stores them as one "
                             "16-byte vector (FUSEGEN_WGMMA_EPI_VEC=2; 1: a lane a channel)",
                             vec);
                    emit(ctx, line);
                }
                if (w->epi_unroll < FG_WGMMA_EPI_ROWS) {
                    snprintf(line, sizeof line,
                             "           its rows %d at a time, not all %d unrolled (the planner's choice where the "
                             "chain calls math functions such as erff, expf, tanhf, whose code repeated for every row "
                             "outgrows the instruction cache -- with predicated stores, the registers -- or "
                             "FUSEGEN_WGMMA_EPI_ROWS)",
                             w->epi_unroll, FG_WGMMA_EPI_ROWS);
                    emit(ctx, line);
                }
                if (w->res_bytes > 0) {
                    snprintf(line, sizeof line,
                             "           the residual '%s' through shared memory: each consumer warp copies its rows x "
                             "%d channels of it by 16-byte cp.async before the tile's main loop and the epilogue "
                             "reads them there (%" PRId64 " B reserved before the ring's stages were counted; the "
                             "slabs' rows %d floats apart, swizzled)",
                             ir->params[w->res_param].name, w->bn, w->res_bytes, w->epi_stride);
                    emit(ctx, line);
                }
            }
            if (ps->chan_reduce >= 0) {
                const fg_op *red = &ir->ops[ps->chan_reduce];
                snprintf(line, sizeof line,
                         "           v%d (%s over the channels) in the epilogue: a tile holds all %d channels of its "
                         "pixels, reduced in each thread's registers and across the 4 lanes of a quad; v%d is never "
                         "stored",
                         ps->chan_reduce, fg_op_kind_name(red->kind), (int)ir->ops[0].out_channels, ps->chan_reduce - 1);
                emit(ctx, line);
            }
            if (w->split_k > 1)
                print_split(w, ps->launch.grid_x, emit, ctx);
        } else if (ps->kind == FG_PASS_CONV && ps->conv.engine == FG_CONV_MMA) {
            const fg_conv_tiling *t = &ps->conv;
            snprintf(line, sizeof line,
                     "           3xTF32 tensor cores: tile %dx%dx%d outputs x %d channels per block; %dx%d outputs x "
                     "%d channels per warp; %d tiles per block; %d input channels staged at a time, %s steps",
                     t->tile[0], t->tile[1], t->tile[2], t->co_tile, t->warp_rows, t->warp_ntw * 8,
                     t->warp_mt * 16, t->tiles_per_block, t->ci_chunk,
                     t->k_blocked ? "(8 channels, tap)" : "(channel x tap) / 8");
            emit(ctx, line);
        } else if (ps->kind == FG_PASS_CONV && ps->conv.chan_lanes > 0) {
            const fg_conv_tiling *t = &ps->conv;
            /* the epilogue stores an NCHW buffer's outputs along W as one vector a thread where
             * the pass stores no output and W is even (conv.lua, M.epilogue's `pair`) */
            const fg_shape *o = &ir->ops[0].out;
            bool buffers = ps->store_buffer >= 0 || ps->n_extra_stores > 0;
            char vec[96] = "";
            if (buffers && !ps->store_output && t->thread_w > 1 && o->dim[o->rank - 1] % 2 == 0)
                snprintf(vec, sizeof vec, "; a buffer's (NCHW) stores %d outputs along W at once", t->thread_w);
            /* the staging's 16-byte vectors (planner.c conv_tiling_cl) */
            char staged[96] = "";
            if (t->in_vec > 0)
                snprintf(staged, sizeof staged, ", input staged in 16-byte vectors (%d channels) where aligned",
                         t->in_vec);
            snprintf(line, sizeof line,
                     "           channels innermost: tile %dx%dx%d outputs x %d channels per block, consecutive "
                     "threads on consecutive channels (the input's loads%s along C); %dx%d outputs x 1 channel per "
                     "thread%s; %d input channels staged [pixel][channel]%s",
                     t->tile[0], t->tile[1], t->tile[2], t->chan_lanes, ps->store_output ? " and the output's stores" : "",
                     t->thread_h, t->thread_w, vec, t->ci_chunk, staged);
            emit(ctx, line);
        } else if (ps->kind == FG_PASS_CONV) {
            const fg_conv_tiling *t = &ps->conv;
            snprintf(line, sizeof line,
                     "           tile %dx%dx%d outputs x %d channels per block; %dx%d outputs x %d channels per "
                     "thread; %d input channels staged at a time, unrolled x%d",
                     t->tile[0], t->tile[1], t->tile[2], t->co_tile, t->thread_h, t->thread_w, t->thread_co,
                     t->ci_chunk, t->ci_unroll);
            emit(ctx, line);
        }
        if (ps->kind == FG_PASS_MAP && l->tile_c > 0) {
            snprintf(line, sizeof line,
                     "           channels last through shared memory: a block takes %d channels x %d pixels of a "
                     "sample, reads its buffers along pixels, evaluates and writes along channels (planner.c, "
                     "map_cl_tile)",
                     l->tile_c, l->tile_p);
            emit(ctx, line);
        }
        if (ps->kind == FG_PASS_MAP && l->cl_vec > 0) {
            snprintf(line, sizeof line,
                     "           channels last from a buffer held so: a thread takes %d vectors of %d consecutive "
                     "channels of a pixel (16-byte loads and stores), all of the same channels, %d vectors apart "
                     "(planner.c, map_launch)",
                     l->cl_vectors, l->cl_vec, l->cl_stride);
            emit(ctx, line);
        }
        snprintf(line, sizeof line, "           launch: %d threads, grid %" PRId64 " x %" PRId64 " x %s, %d B shared",
                 l->block, l->grid_x, l->grid_y, l->per_sample ? "N" : "1", l->smem_bytes);
        emit(ctx, line);
    }
    for (int i = 0; i < plan->n_buffers; i++) {
        if (plan->wgmma.split_k > 1 && i == plan->wgmma.split_counters)
            snprintf(line, sizeof line, "  buffer b%d: split K's arrival counters, %" PRId64 " words (zero between launches)",
                     i, plan->buffers[i].fixed);
        else if (plan->wgmma.split_k > 1 && i == plan->wgmma.split_partials)
            snprintf(line, sizeof line, "  buffer b%d: split K's partial tiles, %d of %" PRId64 " floats", i,
                     plan->wgmma.split_fill, plan->wgmma.split_slot);
        else if (plan->wgmma.parts && i == plan->wgmma.packed_w)
            snprintf(line, sizeof line,
                     "  buffer b%d: the packed weights, %" PRId64 " floats, the layer's own, not in the workspace",
                     i, plan->buffers[i].fixed);
        else if (plan->buffers[i].value < 0)
            snprintf(line, sizeof line, "  buffer b%d: a packed operand, %" PRId64 " floats per sample + %" PRId64, i,
                     plan->buffers[i].per_sample, plan->buffers[i].fixed);
        else if (plan->buffers[i].io)
            snprintf(line, sizeof line,
                     "  buffer b%d: v%d in the layer's dtype, channels last (as PyTorch's half model holds it), %" PRId64
                     " floats per sample",
                     i, plan->buffers[i].value, plan->buffers[i].per_sample);
        else
            snprintf(line, sizeof line, "  buffer b%d: v%d, %" PRId64 " floats per sample", i, plan->buffers[i].value,
                     plan->buffers[i].per_sample);
        emit(ctx, line);
    }
    for (int i = 0; i < plan->n_accums; i++) {
        const fg_accum *a = &plan->accums[i];
        char of[48];
        if (a->prologue)
            snprintf(of, sizeof of, "the input (for pro%d)", a->op);
        else if (a->link == FG_LINK_EXPORTED)
            snprintf(of, sizeof of, "v%d (the output)", a->value);
        else
            snprintf(of, sizeof of, "v%d", a->value);
        snprintf(line, sizeof line, "  statistics s%d: %s of %s, %" PRId64 " per %s over %" PRId64 " elements each%s",
                 i, accum_kind_name(a->kind), of, a->keys_per_sample, a->over_batch ? "layer (whole batch)" : "sample",
                 a->count_per_sample, a->per_channel ? " (one a channel)" : "");
        emit(ctx, line);
        if (a->link == FG_LINK_EXPORTED) {
            snprintf(line, sizeof line,
                     "      for the %s of the block's layer that reads the output: it runs no statistics pass "
                     "(outside this layer's workspace)",
                     fg_op_written_name(&ir->export_norm));
            emit(ctx, line);
        } else if (a->link == FG_LINK_GIVEN) {
            emit(ctx, "      gathered by the block's layer that writes the input (outside this layer's workspace)");
        }
    }
}
