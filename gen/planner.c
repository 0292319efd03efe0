/* SPDX-License-Identifier: Apache-2.0 */
#include "planner.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct planner {
    const fg_layer_ir *ir;
    const fg_plan_options *opts;
    fg_plan *plan;
    fg_error *err;
    bool stored[FG_MAX_OPS];     /* value has a buffer */
    int buffer_of[FG_MAX_OPS];
    bool ready[FG_MAX_OPS];      /* the accumulators op k needs are finalized */
    int auto_cut;                /* "auto" tried recompute after value auto_cut; -1 otherwise */
    bool use_wgmma;              /* the conv runs on the wgmma engine (chosen before chaining) */
    bool tf32_exact_rule;        /* choose_wgmma left a tf32 conv to the exact engines (tf32_stays_exact) */
    int chan_sums;               /* the channel-sums strategy's reduction (channel_sums_reduction); -1 none */
    int io_value;                /* fg_io_buffer_value for the strategy asked for; -1 none */
} planner;

static int64_t reduce_extent(const fg_op *op)
{
    int64_t e = 1;
    for (int d = 1; d < op->in.rank; d++)
        if (op->reduce_mask & (1u << d))
            e *= op->in.dim[d];
    return e;
}

/* Ops that need a finalized statistic over their whole input before producing an element
 * (norms, softmax: the registry's `stats`). */
static bool needs_stats(const fg_op *op)
{
    return fg_op_stats(op) != NULL;
}

static bool is_big_reduce(const fg_op *op)
{
    return fg_op_kind_class(op->kind) == FG_CLASS_REDUCE && reduce_extent(op) > FG_INLINE_REDUCE_MAX;
}

/* The accumulators an op gathers across blocks: its statistic's (norms, softmax) or, for a
 * reduction too long to loop over inline, its partial results'. */
static const fg_reduce_def *accumulated(const fg_op *op)
{
    if (needs_stats(op))
        return fg_op_stats(op);
    return is_big_reduce(op) ? fg_op_def_of(op->kind)->reduce : NULL;
}

/* Whether ops first..last of `ir` include one that reads many elements for each of its outputs
 * (a reduction, softmax or pool: keyed by sample, a loop over the reduced extent) */
static bool any_gathers(const fg_layer_ir *ir, int first, int last)
{
    for (int k = first; k <= last; k++) {
        fg_op_class c = fg_op_kind_class(ir->ops[k].kind);
        if (c == FG_CLASS_REDUCE || c == FG_CLASS_SOFTMAX || c == FG_CLASS_POOL)
            return true;
    }
    return false;
}

static bool is_window(const fg_op *op)
{
    fg_op_class c = fg_op_kind_class(op->kind);
    return c == FG_CLASS_POOL || (c == FG_CLASS_REDUCE && !is_big_reduce(op));
}

static int wanted_strategy(const fg_layer_ir *ir, const fg_plan_options *opts);

int fg_io_buffer_value(const fg_layer_ir *ir, int wanted)
{
    if (ir->layout != FG_LAYOUT_CHANNELS_LAST || ir->dtype == FG_DTYPE_FP32 || ir->precision != FG_PRECISION_TF32 ||
        wanted == FG_STRATEGY_RECOMPUTE || wanted == FG_STRATEGY_RESIDENT || ir->n_ops < 2 ||
        ir->exports_stats) /* its map pass would feed them in channels-last order: a key change an element */
        return -1;
    const fg_shape *out = &ir->ops[ir->n_ops - 1].out;
    int stat = -1;
    for (int k = 1; k < ir->n_ops; k++) {
        const fg_op *op = &ir->ops[k];
        fg_op_class c = fg_op_kind_class(op->kind);
        /* elementwise ops and norms over the output's shape; no value read back by name */
        if ((c != FG_CLASS_UNARY && c != FG_CLASS_BINARY && c != FG_CLASS_NORM) || !fg_shape_same(&op->out, out) ||
            op->operand == FG_OPERAND_VALUE)
            return -1;
        if (accumulated(op)) {
            if (stat >= 0)
                return -1;
            stat = k;
        }
    }
    if (stat < 1 || !fg_shape_same(&ir->ops[stat - 1].out, out))
        return -1;
    /* a key a group of whole channels: the slabs' mapping (a lane a channel) feeds a per-pixel
     * or per-row key (layer_norm over the channels or over W) with 32 lanes on one key */
    fg_stat_layout sl;
    fg_norm_stat_layout(&ir->ops[stat], &sl);
    return sl.whole_channels ? stat - 1 : -1;
}

static int add_buffer(planner *p, int value)
{
    if (p->stored[value])
        return p->buffer_of[value];
    fg_plan *plan = p->plan;
    if (plan->n_buffers == FG_MAX_BUFFERS)
        return fg_fail(p->err, "%s: too many intermediate buffers", p->ir->file), -1;
    fg_buffer *b = &plan->buffers[plan->n_buffers];
    b->value = value;
    b->per_sample = fg_shape_sample_count(&p->ir->ops[value].out);
    b->io = value == p->io_value;
    if (b->io) /* two 16-bit elements a float */
        b->per_sample = (b->per_sample + 1) / 2;
    p->stored[value] = true;
    p->buffer_of[value] = plan->n_buffers;
    return plan->n_buffers++;
}

static int add_accum(planner *p, fg_accum_kind kind, int op_index, int max_accum)
{
    fg_plan *plan = p->plan;
    if (plan->n_accums == FG_MAX_ACCUMS)
        return fg_fail(p->err, "%s: too many statistics", p->ir->file), -1;
    const fg_op *op = &p->ir->ops[op_index];
    fg_accum *a = &plan->accums[plan->n_accums];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->op = op_index;
    a->value = op_index - 1;
    a->max_accum = max_accum;
    a->finalized = -1;
    if (fg_op_kind_class(op->kind) == FG_CLASS_NORM) {
        /* one key per statistic of the norm */
        fg_stat_layout L;
        fg_norm_stat_layout(op, &L);
        a->keys_per_sample = L.keys_per_sample;
        a->count_per_sample = L.count_per_sample;
        a->over_batch = L.over_batch;
    } else {
        /* reductions and softmax: one statistic per element of the keepdim shape */
        a->keys_per_sample = fg_shape_sample_count(&op->in) / reduce_extent(op);
        a->count_per_sample = reduce_extent(op);
    }
    return plan->n_accums++;
}

static fg_pass *new_pass(planner *p, fg_pass_kind kind)
{
    fg_plan *plan = p->plan;
    if (plan->n_passes == FG_MAX_PASSES) {
        fg_fail(p->err, "%s: the plan needs more than %d passes", p->ir->file, FG_MAX_PASSES);
        return NULL;
    }
    fg_pass *ps = &plan->passes[plan->n_passes];
    memset(ps, 0, sizeof *ps);
    ps->kind = kind;
    ps->source_buffer = ps->store_buffer = ps->finalize_accum = -1;
    ps->chan_reduce = -1;
    ps->chan_sums = -1;
    static const char *const kinds[] = {"conv",       "map",          "finalize", "cudnn",
                                        "resident",   "pack_input",   "pack_weights", "pro_stats"};
    static_assert(sizeof kinds / sizeof *kinds == FG_PASS_PRO_STATS + 1, "a pass kind without a kernel name");
    snprintf(ps->kernel, sizeof ps->kernel, "fg_pass%d_%s", plan->n_passes, kinds[kind]);
    plan->n_passes++;
    return ps;
}

/* Whether op j can be evaluated inline in a pass that can compute every value from
 * `lowest` on (the conv pass: 0; a map pass: its source value, or its first op when it
 * starts from an accumulator). */
static bool inline_ok(planner *p, int lowest, int j, bool conv_pass)
{
    const fg_op *op = &p->ir->ops[j];
    if (op->operand == FG_OPERAND_VALUE) {
        /* shape inference resolved the name to an earlier value, 0 <= v < j (saying so
         * also keeps GCC's -O3 -Warray-bounds from assuming the -1 of "no operand") */
        int v = op->operand_value;
        if (v < 0 || v >= j || (v < lowest && !p->stored[v]))
            return false;
    }
    if (needs_stats(op) || is_big_reduce(op))
        return p->ready[j];
    if (conv_pass && is_window(op))
        return false; /* a window needs neighbours the conv pass does not hold */
    return true;
}

/* Marks an op whose accumulators were just finalized (or that reads them directly). */
static int feed(planner *p, fg_pass *ps, int accum)
{
    if (ps->n_feeds == 4)
        return fg_fail(p->err, "%s: a pass feeds too many statistics", p->ir->file);
    ps->feeds[ps->n_feeds++] = accum;
    ps->zero[ps->n_zero++] = accum;
    return 0;
}

static int add_finalize(planner *p, int accum)
{
    fg_pass *f = new_pass(p, FG_PASS_FINALIZE);
    if (!f)
        return -1;
    f->finalize_accum = accum;
    f->first = 1;
    f->last = 0;
    f->domain = p->plan->accums[accum].prologue ? 0 : p->plan->accums[accum].value;
    p->plan->accums[accum].finalized = p->plan->n_passes - 1;
    return 0;
}

/* Makes the statistics op k needs available: its accumulators (the registry's list, in
 * order) are fed by passes over value k-1 -- the first by the pass the caller has created
 * (`ps`), each later one (a sum of exp(x - max) after the max) by a further map pass over
 * the stored value -- and, for an op that reads a finalized statistic (norms, softmax), a
 * finalize pass of the last. */
static int prepare_stats(planner *p, fg_pass *ps, int k)
{
    const fg_op *op = &p->ir->ops[k];
    fg_plan *plan = p->plan;
    const fg_reduce_def *r = accumulated(op);
    int previous = -1;
    for (int i = 0; i < r->n_accums; i++) {
        fg_accum_kind kind = r->accums[i];
        int a = add_accum(p, kind, k, fg_accum_defs[kind].needs_max ? previous : -1);
        if (a < 0)
            return -1;
        fg_pass *feeder = ps;
        if (i > 0) {
            feeder = new_pass(p, FG_PASS_MAP);
            if (!feeder)
                return -1;
            int v = k - 1;
            feeder->source_buffer = p->buffer_of[v];
            feeder->first = v + 1;
            feeder->last = v;
            feeder->domain = v;
        }
        if (feed(p, feeder, a))
            return -1;
        plan->op_max_accum[k] = previous;
        plan->op_accum[k] = a;
        previous = a;
    }
    if (needs_stats(op))
        return add_finalize(p, plan->op_accum[k]);
    return 0;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int round_up(int64_t x, int m)
{
    return (int)ceil_div(x, m) * m;
}

/* Conv extents in D, H, W order (2D convs have depth 1). */
typedef struct conv_geometry {
    int64_t in[3], out[3];
    int k[3], s[3], d[3];
    int64_t cin_g, cout_g, taps;
    bool prologue; /* the layer has ops before the conv, applied where the input is staged */
} conv_geometry;

static void geometry(const fg_op *conv, conv_geometry *g)
{
    int sp = conv->spatial, off = 3 - sp;
    for (int i = 0; i < 3; i++) {
        g->in[i] = g->out[i] = 1;
        g->k[i] = g->s[i] = g->d[i] = 1;
    }
    for (int i = 0; i < sp; i++) {
        g->in[off + i] = conv->in.dim[2 + i];
        g->out[off + i] = conv->out.dim[2 + i];
        g->k[off + i] = conv->kernel[i];
        g->s[off + i] = conv->stride[i];
        g->d[off + i] = conv->dilation[i];
    }
    g->cin_g = conv->in.dim[1] / conv->groups;
    g->cout_g = conv->out_channels / conv->groups;
    g->taps = (int64_t)g->k[0] * g->k[1] * g->k[2];
    g->prologue = false;
}

/* The FMA engine's shared memory for ci staged channels, after `kept` floats of kept conv
 * output (resident passes): [ci][input tile] and their weights [ci][tap][co, padded to 4].
 * Returns the bytes; fills *out when given. */
static int64_t fma_layout(const conv_geometry *g, const fg_conv_tiling *t, int64_t ci, int64_t kept,
                          fg_smem_layout *out)
{
    fg_smem_layout l = {0};
    int64_t tile = (int64_t)t->in_tile[0] * t->in_tile[1] * t->in_tile[2];
    l.input_offset = kept;
    l.input_buffers = 1;
    l.buffer_floats = ci * tile;
    l.channel_pitch = tile;
    l.weights_offset = kept + ci * tile;
    l.weights_co_pitch = round_up(t->co_tile, 4);
    l.weights_floats = ci * g->taps * l.weights_co_pitch;
    l.table_offset = l.weights_offset + l.weights_floats;
    if (out)
        *out = l;
    return 4 * l.table_offset;
}

static int64_t conv_smem(const conv_geometry *g, const fg_conv_tiling *t, int64_t ci)
{
    return fma_layout(g, t, ci, 0, NULL);
}

enum { CONV_SMEM_BUDGET = 96 * 1024 }; /* two blocks per SM fit beside each other */

/* The MMA engine's reduction steps per staged chunk of ci input channels: (8 channels, tap)
 * steps when blocked, else the flattened (channel, tap) index in steps of 8. */
static int64_t mma_ksteps(const conv_geometry *g, const fg_conv_tiling *t, int64_t ci)
{
    return t->k_blocked ? ci / 8 * g->taps : ceil_div(ci * g->taps, 8);
}

/* Shared memory of the MMA engine: ci staged channels (two buffers where a block computes
 * several tiles, never when chunked), the weights of co_tile channels for them as ready-made
 * A fragments ([step][m-tile][hi, lo][32 lanes][4]), and the unblocked steps' offset table.
 * Returns the bytes; fills *out when given. */
static int64_t mma_layout(const conv_geometry *g, const fg_conv_tiling *t, int64_t ci, fg_smem_layout *out)
{
    fg_smem_layout l = {0};
    int64_t ksteps = mma_ksteps(g, t, ci);
    l.input_offset = 0;
    l.input_buffers = ci == g->cin_g && t->tiles_per_block > 1 ? 2 : 1;
    l.buffer_floats = ci * t->ch_pitch;
    l.channel_pitch = t->ch_pitch;
    l.weights_offset = l.input_buffers * l.buffer_floats;
    l.weights_floats = ksteps * (t->co_tile / 16) * 2 * 128;
    l.table_offset = l.weights_offset + l.weights_floats;
    l.table_entries = t->k_blocked ? 0 : ksteps * 8; /* an offset per reduction index */
    int64_t bytes = 4 * (l.table_offset + l.table_entries);
    if (out)
        *out = l;
    return bytes;
}

static int64_t mma_smem(const conv_geometry *g, const fg_conv_tiling *t, int64_t ci)
{
    return mma_layout(g, t, ci, NULL);
}

/* Unblocked steps read their offsets from a table in shared memory; they are fully
 * unrolled, so at most this many per chunk (KB79's 3 channels x 27 taps is 11). */
enum { MMA_TABLE_STEPS = 16 };
/* Reduction steps (k = 8 each, three MMAs: lo.hi, hi.lo, hi.hi) per fresh accumulator before
 * the ordinary fp32 add into the running sum (bench/NOTES.md v8: the error and the cost of
 * each choice, measured at inputs x1, x100 and +10). */
enum { MMA_ACC_STEPS = 1 };

/* Tiling for the tensor-core engine; false when it cannot run the shape (fewer than 8
 * channels or a reduction under 8; a reduction that neither blocks by 8 nor fits the step
 * table; shared memory over budget) or, unless `forced`, when the FMA engine measured faster
 * for such shapes. */
static bool conv_tiling_mma(const conv_geometry *g, fg_pass *ps, const fg_plan_options *opts)
{
    bool forced = opts->engine == FG_ENGINE_PREFER_MMA;
    fg_conv_tiling *t = &ps->conv;
    int64_t k = g->cin_g * g->taps;
    if (g->cout_g < 8 || k < 8)
        return false;
    /* Measured on the H200 (bench/NOTES.md, v4): tensor cores win on long reductions (KB17,
     * 576: 7.7 vs 11.5 ms) and on narrow layers (<= 32 channels: KB21, KB79, KB23); with
     * 64 channels and a short reduction the FMA engine's broadcast weights win (KB85 0.76
     * vs 1.00 ms, KB92 1.01 vs 1.25). */
    if (k < 128 && g->cout_g > 32 && !forced)
        return false;
    memset(t, 0, sizeof *t);
    t->engine = FG_CONV_MMA;
    /* a warp: 32 accumulators per lane, n-tiles of 8 outputs along W. Two m-tiles on long
     * reductions, and where a row is too short for 8 n-tiles (KB23: 32 channels x 32 outputs
     * 0.61 ms, 16 x 32 0.97 ms); otherwise one, as the epilogue's values compete for the 128
     * registers (KB21: 16 channels x 64 outputs 2.23 ms, no spills; 32 x 32 spilled, 2.31
     * ms). 64 accumulators ran KB17 12 % faster (6.7 vs 7.5 ms) but spill; the compile test
     * keeps every reference layer spill-free. */
    int64_t row_tiles = ceil_div(g->out[2], 8);
    t->warp_mt = g->cout_g > 16 && (k >= 128 || row_tiles < 8) ? 2 : 1;
    /* a prologue's ops run in the staging, between reduction chunks, while the accumulators
     * are live: one m-tile keeps them spill-free (two spilled SD's GroupNorm -> SiLU -> conv
     * 64 -> 64 3x3, 8 bytes) */
    if (g->prologue)
        t->warp_mt = 1;
    int ntiles = 8 / t->warp_mt;
    t->warp_ntw = (int)(row_tiles < ntiles ? row_tiles : ntiles);
    /* a narrow row (W < 64) is one warp's work: stacking two rows spilled KB79's conv (8
     * bytes) for no measurable gain (0.237 vs 0.239 ms) */
    t->warp_rows = 1;
    /* a caller may set the warp tile (FUSEGEN_MMA_WARP; bench/NOTES.md) */
    if (opts->mma_warp[0] > 0) {
        t->warp_mt = opts->mma_warp[0];
        t->warp_rows = opts->mma_warp[1];
        t->warp_ntw = opts->mma_warp[2];
    }
    if (t->warp_rows > g->out[1])
        t->warp_rows = (int)g->out[1];
    /* 8 warps: two depths x four row groups for 3D (less halo than eight rows), else rows,
     * then along W while the rows run out */
    int64_t row_groups = ceil_div(g->out[1], t->warp_rows);
    t->warps[0] = g->out[0] >= 2 ? 2 : 1;
    t->warps[1] = (int)(row_groups < 8 / t->warps[0] ? row_groups : 8 / t->warps[0]);
    t->warps[2] = 1;
    while (t->warps[0] * t->warps[1] * t->warps[2] < 8 && (int64_t)t->warps[2] * t->warp_ntw * 8 < g->out[2])
        t->warps[2] *= 2;
    t->tile[0] = t->warps[0];
    t->tile[1] = t->warps[1] * t->warp_rows;
    t->tile[2] = t->warps[2] * t->warp_ntw * 8;
    for (int i = 0; i < 3; i++)
        t->in_tile[i] = (t->tile[i] - 1) * g->s[i] + (g->k[i] - 1) * g->d[i] + 1;
    t->in_tile[2] = round_up(t->in_tile[2], 4);
    int64_t volume = (int64_t)t->in_tile[0] * t->in_tile[1] * t->in_tile[2];
    /* blocked steps load 4 channels x 8 outputs per instruction: a channel pitch of 8 (mod
     * 32) floats puts them in 32 distinct banks (with unit stride along W) */
    t->k_blocked = g->cin_g % 8 == 0;
    t->ch_pitch = (int)(t->k_blocked ? volume + (8 - volume % 32 + 32) % 32 : volume);
    t->ci_chunk = (int)g->cin_g;
    if (!t->k_blocked) {
        if (g->taps > 8 * MMA_TABLE_STEPS)
            return false;
        while (mma_ksteps(g, t, t->ci_chunk) > MMA_TABLE_STEPS)
            t->ci_chunk--;
    }
    int warps = t->warps[0] * t->warps[1] * t->warps[2];
    int64_t tiles = ceil_div(g->out[0], t->tile[0]) * ceil_div(g->out[1], t->tile[1]) * ceil_div(g->out[2], t->tile[2]);
    /* several tiles per block amortize the weights' staging and hide the input's behind
     * compute (two input buffers); a sample keeps >= 8 blocks so that small batches still
     * spread over the GPU. A caller may set it (FUSEGEN_MMA_TILES; bench/NOTES.md). */
    int64_t r = opts->mma_tiles > 0 ? opts->mma_tiles : tiles / 8;
    t->tiles_per_block = (int)(r < 1 ? 1 : r > 8 ? 8 : r);
    /* within the budget: first one channel tile per block, then one tile (one buffer), then
     * the input channels in halving chunks (one tile per block) */
    t->co_tile = round_up(g->cout_g, 16 * t->warp_mt);
    if (mma_smem(g, t, t->ci_chunk) > CONV_SMEM_BUDGET)
        t->co_tile = 16 * t->warp_mt;
    if (mma_smem(g, t, t->ci_chunk) > CONV_SMEM_BUDGET)
        t->tiles_per_block = 1;
    while (mma_smem(g, t, t->ci_chunk) > CONV_SMEM_BUDGET && t->ci_chunk > 8)
        t->ci_chunk = t->k_blocked ? round_up(t->ci_chunk / 2, 8) : t->ci_chunk / 2;
    if (t->ci_chunk != g->cin_g)
        t->tiles_per_block = 1; /* chunked staging: one tile per block, one buffer */
    if (mma_smem(g, t, t->ci_chunk) > CONV_SMEM_BUDGET)
        return false;
    ps->launch.block = 32 * warps;
    ps->launch.grid_x = ceil_div(tiles, t->tiles_per_block);
    t->ksteps = (int)mma_ksteps(g, t, t->ci_chunk);
    t->acc_steps = opts->mma_acc_steps > 0 ? opts->mma_acc_steps : MMA_ACC_STEPS;
    ps->launch.smem_bytes = (int)mma_layout(g, t, t->ci_chunk, &t->smem);
    return true;
}

/* ---- the wgmma engine (sm_90a) ----------------------------------------------------------- */

enum {
    MAX_BLOCK_SMEM = 227 * 1024, /* opt-in shared memory of one block on sm_90 */
    /* two blocks a multiprocessor: half of its 228 KB, less the 1 KB the system keeps a block */
    TWO_BLOCK_SMEM = (228 - 2) * 1024 / 2,
    WGMMA_MAX_STAGES = 8,
    /* two wgmma CTAs a multiprocessor: 768 threads of 85 registers compile to 80 each
     * (fg_wgmma_base_regs); after setmaxnreg the producer warpgroup's 40 and the consumers'
     * WGMMA_TWO_CTA_REGS must fit the block's 384 x 80 */
    WGMMA_BASE_REGS = 168,
    WGMMA_TWO_CTA_BASE_REGS = 80,
    WGMMA_TWO_CTA_REGS = 96,
    WGMMA_TWO_CTA_BN = 64,
    WGMMA_WIDE_BN_KCH = 16,    /* K chunks from which half operands take channel blocks of up to 256 */
    WGMMA_WIDE_BN_TILES = 66,  /* ... where a sample has this many 128 x 128 tiles (half an H200's 132 SMs) */
    WGMMA_PACKED_BIAS = 32,    /* the producer packs a row's origin coordinates + this bias into one word */
    WGMMA_PACK_PIXELS = 32,    /* pixels the input-packing pass transposes per block (conv_wgmma.lua's tile), through */
    WGMMA_PACK_SMEM = 48 * 1024, /* a static shared array: at most 48 KB */
};

/* Whether some op of the layer gathers statistics (the conv pass's epilogue then keeps a
 * partial per channel slot in registers). */
static bool layer_has_statistics(const fg_layer_ir *ir)
{
    for (int k = 1; k < ir->n_ops; k++)
        if (needs_stats(&ir->ops[k]) || is_big_reduce(&ir->ops[k]))
            return true;
    return false;
}

int fg_wgmma_base_regs(const fg_wgmma_tiling *w)
{
    return w->ctas_per_sm == 2 ? WGMMA_TWO_CTA_BASE_REGS : WGMMA_BASE_REGS;
}

/* Two wgmma CTAs a multiprocessor where they fit (FUSEGEN_WGMMA_CTAS=2; opt-in while measured):
 * only with A by TMA (the cp.async producer needs more than the 40 registers left to it). */
static int wgmma_ctas_asked(const fg_plan_options *opts)
{
    return opts->wgmma_ctas == 2 && opts->wgmma_a_tma != 1 ? 2 : 1;
}

/* Elements of the layer's input dtype in a 16-byte vector: what one thread loads at a time
 * where a kernel reads a channels-last input in vectors (the FMA engine's staging, the
 * statistics and input-pack passes by pixel rows). */
static int io_vec_elems(const fg_layer_ir *ir)
{
    return 16 / fg_dtype_size(ir->dtype);
}

/* Whether the prologue starts with a norm over each position's channels (mean and variance,
 * per sample) whose statistics are not handed from another layer: what the wgmma input pack
 * by pixel rows can compute itself where its blocks hold whole pixels (pack_pixel_statistics) */
static bool pro_norm_per_pixel(const fg_layer_ir *ir)
{
    if (ir->n_pro == 0 || ir->pro_stats_given)
        return false;
    const fg_reduce_def *r = fg_op_stats(&ir->pro[0]);
    if (!r || r->n_accums != 1 || r->accums[0] != FG_ACCUM_MOMENTS)
        return false;
    fg_stat_layout L;
    fg_norm_stat_layout(&ir->pro[0], &L);
    return L.per_position && !L.over_batch;
}

/* Whether a sample's `rows` (its tiles' rows) leave enough of them empty past its `opix`
 * output pixels for flat tiles (fg_wgmma_tiling.flat) to pay: more than a quarter */
static bool flat_saves_rows(int64_t rows, int64_t opix)
{
    return (rows - opix) * 4 > rows;
}

/* The block tensor whose tile a half, channels-last staged epilogue would copy into shared
 * memory (fg_wgmma_tiling.res_param), or -1: one of the output's shape (a residual: its row of
 * an output pixel is bn channels contiguous in memory) that the chain reads, where every op
 * keeps the conv's shape (a view would index it otherwise), nothing gathers statistics or many
 * elements (the epilogue that reads it is the staged one) and a group's channels come in whole
 * 16-byte pieces (8 of a 2-byte dtype: an aligned tensor's pieces are then aligned too). */
static int staged_residual(const fg_layer_ir *ir, const fg_wgmma_tiling *w, bool partials)
{
    const fg_shape *out = &ir->ops[0].out;
    if (w->operand == FG_WGMMA_TF32 || ir->layout != FG_LAYOUT_CHANNELS_LAST || w->epi_bytes == 0 || partials ||
        any_gathers(ir, 1, ir->n_ops - 1) || (out->dim[1] / ir->ops[0].groups) % 8 != 0)
        return -1;
    for (int k = 1; k < ir->n_ops; k++)
        if (!fg_shape_same(&ir->ops[k].out, out))
            return -1;
    for (int k = 1; k < ir->n_ops; k++) {
        const fg_op *op = &ir->ops[k];
        if (op->operand != FG_OPERAND_PARAM || !op->tensor_operand)
            continue;
        const fg_param *p = &ir->params[op->operand_param];
        bool same = p->rank == out->rank - 1;
        for (int d = 0; same && d < p->rank; d++)
            same = p->dim[d] == out->dim[d + 1];
        if (same)
            return op->operand_param;
    }
    return -1;
}

/* Whether a parameter holds a value per pixel: past its channels, an extent above 1 (templates'
 * lib.per_pixel_tensor asks the same of a block tensor) */
static bool param_per_pixel(const fg_param *p)
{
    for (int d = 1; d < p->rank; d++)
        if (p->dim[d] != 1)
            return true;
    return false;
}

/* Whether the layer reads a block tensor with a value per pixel (a residual, a mask) other than
 * res_param (-1: none), the one whose tile is in shared memory: the staged epilogue loads such
 * rows ahead into registers (conv.lua, prefetch) */
static bool per_pixel_tensor_besides(const fg_layer_ir *ir, int res_param)
{
    for (int i = 0; i < ir->n_params; i++)
        if (ir->params[i].batched && i != res_param && param_per_pixel(&ir->params[i]))
            return true;
    return false;
}

/* Whether the ops after the conv read no tensor by an output's sample or pixel -- only values
 * per channel (or one value) and the residual whose tile is in shared memory (res_param) --
 * so that a flat tile's rows may index the channels-last output as one run of the batch's
 * pixels: pixel p of sample n is row n x opix + p (fg_wgmma_tiling.flat_rows_linear) */
static bool chain_reads_by_channel(const fg_layer_ir *ir, int res_param)
{
    for (int k = 1; k < ir->n_ops; k++) {
        const fg_op *op = &ir->ops[k];
        if (!fg_shape_same(&op->out, &ir->ops[0].out)) /* the stored value is indexed as the conv's */
            return false;
        if (op->operand != FG_OPERAND_PARAM || op->operand_param == res_param)
            continue;
        const fg_param *p = &ir->params[op->operand_param];
        if (p->batched || param_per_pixel(p))
            return false;
    }
    return true;
}

/* The wgmma engine's tile for a conv; false when it cannot run the shape (channels, coordinates
 * the producer packs in 10 bits, shared memory). Chosen once per layer (every conv pass of a
 * layer runs the same conv), before the passes are chained: the packed operands are passes
 * of their own that run first. Measured on the H200 (bench/NOTES.md, v6): 3xTF32 wants one
 * m64 tile per consumer warpgroup at 128 channels (the block accumulator doubles the
 * registers), one TF32 product two. */
static bool wgmma_tiling(const fg_layer_ir *ir, const conv_geometry *g, int groups, const fg_plan_options *opts,
                         int ctas, int alternate_asked, int io_value, fg_wgmma_tiling *w, const char **why)
{
    const int bn_asked = opts->wgmma_bn;
    int most_m64 = opts->wgmma_m64;
    memset(w, 0, sizeof *w);
    w->res_param = -1;
    const char *unused;
    if (!why)
        why = &unused;
    *why = "fewer than 8 output channels a group";
    if (g->cout_g < 8)
        return false;
    /* The producer keeps each A row's origin (d, h, w) + WGMMA_PACKED_BIAS in one 32-bit word:
     * 10 bits a coordinate, or for a 2D conv (d is always 0) 16 bits each of (h, w) where an
     * image is past the 10 bits (1024 pixels and up: SDXL's VAE decoder, full-resolution
     * segmentation); the sources of images that fit 10 bits are unchanged. */
    bool flat = g->in[0] == 1 && g->k[0] == 1 && g->out[0] == 1 &&
                (ir->ops[0].spatial < 3 || ir->ops[0].padding[0] == 0); /* no depth to check */
    w->coord_bits = 0;
    for (int bits = 10; bits <= 16 && !w->coord_bits; bits += 6) {
        int64_t most = ((int64_t)1 << bits) - 1 - WGMMA_PACKED_BIAS;
        bool fits = bits == 10 || flat;
        for (int i = 0; i < 3; i++)
            fits = fits && g->in[i] <= most && (g->k[i] - 1) * g->d[i] <= most && g->out[i] * g->s[i] <= most;
        if (fits)
            w->coord_bits = bits;
    }
    *why = "a 3D conv with an image past 991 pixels along a dimension (the producer's 10-bit coordinates)";
    if (!w->coord_bits)
        return false;
    const fg_op *conv = &ir->ops[0];
    *why = "padding of 32 or more";
    for (int i = 0; i < conv->spatial; i++)
        if (conv->padding[i] >= WGMMA_PACKED_BIAS)
            return false;
    /* A half layer's operands are its dtype (the weights rounded, or split into hi + lo for
     * fp32 precision: planner.h), 2-byte elements, 64 to a 128-byte row; an fp32 layer's are
     * TF32, 32 to a row, both operands split for fp32 precision. A half input is exact in its
     * dtype: one part. A half layer with a prologue packs the normalized input, an fp32 value
     * that is no longer one of the dtype: split as the weights are for fp32 precision (hi.w_hi
     * + hi.w_lo + lo.w_hi, 3xTF32's three products in the dtype: ~2^-16 of each term in bf16,
     * tests/test_half_split.c), rounded once for tf32 (as PyTorch's half tensor between the
     * norm and the conv) */
    w->operand = ir->dtype == FG_DTYPE_BF16   ? FG_WGMMA_BF16
                 : ir->dtype == FG_DTYPE_FP16 ? FG_WGMMA_F16
                                              : FG_WGMMA_TF32;
    const int el = w->operand == FG_WGMMA_TF32 ? 4 : 2; /* bytes an element */
    w->parts = ir->precision == FG_PRECISION_FP32 ? 2 : 1;
    w->a_parts = w->operand == FG_WGMMA_TF32 || ir->n_pro > 0 ? w->parts : 1;
    /* the packing pass stages floats where it applies a prologue (its fp32 result), the input
     * as it is otherwise */
    const int tile_el = ir->n_pro > 0 ? 4 : el;
    w->kc_elems = 128 / el;
    w->block_acc = w->parts == 2;
    /* two CTAs a multiprocessor (fg_wgmma_tiling.ctas_per_sm) only without block accumulation:
     * channel blocks of at most 64 (the consumers' 96 registers) */
    w->ctas_per_sm = ctas == 2 && !w->block_acc ? 2 : 1;
    /* a 16-byte copy of the producer holds one tap's channels: 4 TF32 or 8 half elements */
    w->cp = g->cin_g <= 16 / el ? 16 / el : round_up(g->cin_g, 8);
    w->xc = groups * w->cp;
    /* The widest channel block: 128 (64 for two CTAs a multiprocessor); for half operands
     * whose K is long (WGMMA_WIDE_BN_KCH chunks and up: the main loop is most of a tile's
     * time) 256 where the registers and shared memory allow, so that each A row a tile reads
     * from L2 serves more channels. Measured on the H200 (bench/NOTES.md v31, knob
     * FUSEGEN_WGMMA_BN): SD's 320 -> 320 3x3 in bf16 (45 chunks) at 2 x 160 channels instead
     * of 3 x 112, its conv 46 -> 26 us and the block -33 % at batch 2, -35 % at 8, -9 % at 1;
     * the 1x1 convs of ResNet-50's and ConvNeXt's blocks (1-6 chunks) at 256 and 192 lost
     * 18-28 % at batch 1 (half the tiles) and 2 % at batch 32, so a short K keeps 128.
     * Only where a sample has WGMMA_WIDE_BN_TILES tiles of 128 x 128 or more (SD 320 at 64x64:
     * 96): with fewer, a launch at a small batch splits K, and a wide tile's fp32 partial is
     * twice as large while its split count doubles. Measured (bench/NOTES.md v43, bf16
     * channels last, one product, 128 against 256): SD's 1280 -> 1280 3x3 at 16x16 (20 tiles a
     * sample), batch 2, 66.6 -> 34.9 us; 640 at 32x32 (40), 43.3 -> 39.9; ResNet-50's 1024
     * stage at 14x14 (4), batch 32, its 1x1 23.2 -> 13.8 us and its 3x3 29.4 -> 20.9.
     * FUSEGEN_WGMMA_BN (fg_plan_options.wgmma_bn) sets it by hand. */
    const int64_t opix = g->out[0] * g->out[1] * g->out[2];
    const int64_t tiles128 = ceil_div(opix, 128) * ceil_div(g->cout_g, 128) * groups;
    bool wide = bn_asked <= 0 && w->operand != FG_WGMMA_TF32 &&
                ceil_div(g->taps * w->cp, w->kc_elems) >= WGMMA_WIDE_BN_KCH && tiles128 >= WGMMA_WIDE_BN_TILES;
    /* where no 128-channel block fits (two parts of each operand, the statistics' partials:
     * SD's 640-channel GroupNorm -> SiLU -> conv that exports its output's statistics, in bf16
     * at fp32 precision, 234 KB), more blocks of fewer channels each, down to 64 (below
     * that the 3xTF32 engine on mma.sync has been as fast) */
    int narrower = 0; /* channel blocks added to the widest's count */
retile:;
    const int most_bn = bn_asked > 0            ? (int)round_up(bn_asked, 8)
                        : w->ctas_per_sm == 2 ? WGMMA_TWO_CTA_BN
                        : wide                ? 256
                                              : 128;
    w->nblk = (g->cout_g <= most_bn ? 1 : (int)ceil_div(g->cout_g, most_bn)) + narrower;
    w->bn = round_up(ceil_div(g->cout_g, w->nblk), 8);
    /* a channels-last half input with no prologue and no padding channels is the packed operand
     * as it is (planner.h, input_direct) */
    w->input_direct = w->operand != FG_WGMMA_TF32 && w->a_parts == 1 && ir->n_pro == 0 &&
                      ir->layout == FG_LAYOUT_CHANNELS_LAST && w->cp == g->cin_g;
    /* the packing pass's tile: 32 pixels x pack_xb channels (+1 against bank conflicts); where
     * all xc do not fit, the fewest channel blocks that do, of equal multiples of 8 */
    int64_t fit = WGMMA_PACK_SMEM / (WGMMA_PACK_PIXELS * tile_el) - 1;
    if (w->xc <= fit) {
        w->pack_xb = w->xc;
    } else {
        int64_t blocks = ceil_div(w->xc, fit / 8 * 8);
        w->pack_xb = (int)round_up(ceil_div(w->xc, blocks), 8);
    }
    /* measured on the H200 (bench/NOTES.md v31): SD's GroupNorm -> SiLU pack at 320 bf16
     * channels, batch 2, 25 us through the tile (scalar loads and stores), 14 us by rows */
    const int vec = io_vec_elems(ir);
    w->pack_vec = ir->layout == FG_LAYOUT_CHANNELS_LAST && w->cp == g->cin_g && !w->input_direct && w->xc % vec == 0 &&
                          w->pack_xb % vec == 0
                      ? vec
                      : 0;
    /* by rows there is no tile to fit: where the prologue's norm is over each pixel's channels,
     * a block holds whole pixels (up to 256 vectors of them, its threads) and the pack computes
     * their statistics itself (pack_pixel_statistics): ConvNeXt's LayerNorm at 384 and 768
     * channels took a statistics pass and a pack in channel blocks (bench/NOTES.md v44).
     * Elsewhere (SD's GroupNorm at 640+ channels) the channel blocks stay, as measured. */
    if (w->pack_vec && w->xc / vec <= 256 && pro_norm_per_pixel(ir))
        w->pack_xb = w->xc;
    *why = "a packed input of 2^31 elements or more a sample (the producer's offsets are ints)";
    if ((int64_t)g->in[0] * g->in[1] * g->in[2] * w->xc > INT32_MAX)
        return false;
    w->kch = (int)ceil_div(g->taps * w->cp, w->kc_elems);
    w->b_bytes = (int64_t)w->bn * 128;
    /* the conv pass feeds statistics: a later op's (gathered across the block's tiles in up to
     * two accumulators), or only those of the output that the next layer of a block reads (one) */
    const bool op_stats = layer_has_statistics(ir), partials = op_stats || ir->exports_stats;
    /* whole tiles per consumer warpgroup in turn (fg_wgmma_tiling.alternate) where no epilogue
     * step syncs the two warpgroups (the statistics partials' flush) and one CTA holds the SM */
    w->alternate = alternate_asked == 2 && w->ctas_per_sm == 1 && !partials;
    const int tile_rows = w->alternate ? 64 : 128; /* a tile's rows per m64 tile a warpgroup holds */
    /* TF32 operands: two m64 tiles per consumer warpgroup where the registers and at least 3
     * stages allow it (twice the rows per weight tile), else one. Half operands: one (128-pixel
     * tiles), measured (bench/NOTES.md v19: FUSEGEN_WGMMA_M64=1 against the planner's 256-pixel
     * tiles): the ResNet-50 bottleneck in bf16 ran 33 % faster at batch 1 (13 CTAs for a 56x56
     * sample at 256 pixels), 10 % at batch 32 and 128, equal at 8; a 64->128 3x3 on 256x256 at
     * batch 64 and SD's GN->SiLU->conv at batch 2 and 8 equal. FUSEGEN_WGMMA_M64 (1 or 2) caps
     * either. Live registers: in the main loop the
     * accumulator (and the block accumulator); in the epilogue the accumulator, a statistics
     * partial per channel slot and its working set (estimates: ptxas reports, and the
     * compile test fails on any spill). */
    /* statistics partials gathered across a block's tiles: two fp64 per channel and per
     * consumer warp and accumulator */
    w->stat_bytes = (op_stats && io_value < 0 ? 2 : partials ? 1 : 0) * 8 * (int64_t)w->bn * 2 * 8;
    /* a channels-last output is stored through the staging slabs (fg_wgmma_staged_epilogue)
     * unless a later op needs statistics (then the conv pass is not the one writing the
     * output, or its epilogue keeps per-channel partials in the fragments' mapping): measured
     * on the H200, the fragments' own 2- and 4-byte stores and loads C elements apart took a
     * ResNet-50 bottleneck's last 1x1 conv (bf16, channels last, batch 32) 148 us for ~115 MB,
     * at 0.7 TB/s (bench/NOTES.md v26). The statistics the next layer reads are gathered in
     * the slabs' mapping (a lane a channel). */
    w->epi_bytes = ir->layout == FG_LAYOUT_CHANNELS_LAST && (!op_stats || io_value >= 0)
                       ? 8 * (int64_t)FG_WGMMA_EPI_ROWS * FG_WGMMA_EPI_STRIDE * 4
                       : 0;
    const int64_t slabs = w->epi_bytes;
    /* the residual's tile in shared memory where the ring keeps 3 stages with it (4 with block
     * accumulation: ping-pong's), its slabs swizzled (planner.h); never for two CTAs a
     * multiprocessor (their half of the shared memory) */
    const int residual = w->ctas_per_sm == 1 ? staged_residual(ir, w, partials) : -1;
    const int64_t swizzled = 8 * (int64_t)FG_WGMMA_EPI_ROWS * FG_WGMMA_EPI_COLS * 4;
    /* live partials in the epilogue: a float pair per channel slot (the fragments' bn / 4
     * slots, or a lane's channel in each of the slabs' 32-channel chunks); a moments slot
     * holds four (templates/feed.lua: shift and count too), but the wgmma epilogue adds a
     * slot's partials into s_stat at the end of its iteration (th.slot_end), so few are live
     * at once there */
    const int partial_regs = !partials            ? 0
                             : w->epi_bytes == 0 ? w->bn / 2
                                                 : 2 * (int)ceil_div(w->bn, FG_WGMMA_EPI_COLS);
    if (most_m64 == 0)
        most_m64 = w->operand == FG_WGMMA_TF32 ? 2 : 1;
    const bool two = w->ctas_per_sm == 2;
    for (w->wgmt = two ? 1 : most_m64; w->wgmt >= 1; w->wgmt--) {
        int acc = w->wgmt * w->bn / 2;
        int main_loop = acc * (1 + w->block_acc) + 32;
        int epilogue = acc + partial_regs + 48;
        int need = round_up((main_loop > epilogue ? main_loop : epilogue) + 16, 8);
        w->bm = tile_rows * w->wgmt;
        w->a_bytes = (int64_t)w->bm * 128;
        w->stage_bytes = w->a_parts * w->a_bytes + w->parts * w->b_bytes;
        const int64_t room = (two ? TWO_BLOCK_SMEM : MAX_BLOCK_SMEM) - 1024 - 256 - w->stat_bytes;
        int64_t stages = (room - slabs) / w->stage_bytes;
        /* two CTAs: a ring of 2 still overlaps the next tile's copies with the epilogue, the
         * other CTA's work with both; and A by TMA (its producer's 40 registers) */
        if (two && (need > WGMMA_TWO_CTA_REGS || stages < 2 || fg_wgmma_a_tma_refusal(ir, w, NULL)))
            continue;
        if (!two && (need > 232 || stages < 3))
            continue;
        w->res_param = -1;
        w->res_bytes = 0;
        w->epi_bytes = slabs;
        w->epi_stride = FG_WGMMA_EPI_STRIDE;
        if (residual >= 0) {
            /* every consumer warp's 16 wgmt rows: a tile's, or each warpgroup's own tile's */
            const int64_t tile = (int64_t)128 * w->wgmt * w->bn * 2,
                          with = (room - swizzled - tile) / w->stage_bytes;
            if (with >= 3 + w->block_acc) {
                stages = with;
                w->res_param = residual;
                w->res_bytes = tile;
                w->epi_bytes = swizzled;
                w->epi_stride = FG_WGMMA_EPI_COLS;
            }
        }
        w->stages = (int)(stages > WGMMA_MAX_STAGES ? WGMMA_MAX_STAGES : stages);
        if (two) {
            w->consumer_regs = WGMMA_TWO_CTA_REGS;
            w->producer_regs = 40;
            break;
        }
        w->consumer_regs = need < 168 ? 168 : need;
        int producer = 504 - 2 * w->consumer_regs;
        w->producer_regs = producer > 168 ? 168 : producer;
        break;
    }
    if (two && w->wgmt < 1) { /* does not fit two a multiprocessor: one, as ever */
        w->ctas_per_sm = 1;
        goto retile;
    }
    if (wide && w->wgmt < 1) { /* a wide block does not fit: 128 (two CTAs retiled above) */
        wide = false;
        goto retile;
    }
    if (w->wgmt < 1 && bn_asked <= 0 && w->bn > 64 && g->cout_g > 64) { /* one more, narrower block */
        narrower++;
        goto retile;
    }
    *why = "no tile fits the registers and shared memory with 3 stages";
    if (w->wgmt < 1)
        return false;
    *why = NULL;
    w->m_tiles = (int)ceil_div(opix, w->bm);
    w->opix = opix;
    /* the flat-tile rule on the rows of a shared tile (128 wgmt) also where each warpgroup
     * takes its own (64 wgmt): flat tiles exactly where the shared tiles would be flat */
    const int64_t rule_rows = ceil_div(opix, 128 * (int64_t)w->wgmt) * 128 * w->wgmt;
    /* flat tiles where a sample leaves more than a quarter of its tiles' rows empty and the
     * epilogue keys nothing by sample (no statistics; no reduction, softmax or pool, so no
     * channel reduction in the epilogue either):
     * ResNet-50's and ConvNeXt's 7x7 stages filled 49 of 128 rows, 0.25x and 0.40x of
     * PyTorch bf16 (bench/NOTES.md v39), and flat tiles took 41-48 % off those blocks (v40).
     * Not at 14x14 (196 of 256 rows): flat tiles give up wide blocks, two m64 tiles and
     * with them split K there, and those blocks took 23-33 % longer flat (v40). The cp.async
     * producer's int offsets then reach into the samples a tile runs over */
    /* (a reduction, softmax or pool after the conv: its epilogue may key by sample) */
    /* Where the consumer warpgroups take tiles in turn (64 rows; no wide block or
     * second m64 tile for flat tiles to give up), flat also where a sample leaves more than a
     * fifth of its 64-row tiles' rows empty. Measured on the H200 (bench/NOTES.md v47, the
     * knob below on every turn layer with any row empty): ConvNeXt's 384-channel block at
     * 14x14 (its 1x1 + GELU: 4 tiles of 64 a sample for 196 pixels, 98 a batch of 32 flat
     * instead of 128) -7.4 % at batch 32, -1.6 % at 8; ResNet-50's 1024 stage (14x14) -0.3 %;
     * its 512 stage at 28x28 (13 tiles for 784 pixels, 6 % empty) +4.6 %, so not there.
     * FUSEGEN_WGMMA_FLAT (fg_plan_options.wgmma_flat): 1 keeps the quarter rule alone, 2 takes
     * flat tiles wherever the turns leave any row empty. */
    const int64_t turn_rows = (int64_t)w->m_tiles * w->bm;
    const bool turn_rows_empty = w->alternate && opts->wgmma_flat != 1 &&
                                 (opts->wgmma_flat == 2 ? turn_rows > opix : (turn_rows - opix) * 5 > turn_rows);
    w->flat = !partials && !any_gathers(ir, 1, ir->n_ops - 1) && (flat_saves_rows(rule_rows, opix) || turn_rows_empty) &&
              (w->bm / opix + 2) * g->in[0] * g->in[1] * g->in[2] * w->xc <= INT32_MAX;
    /* a flat tile's per-row sample costs the epilogue registers: at 256 channels (ResNet-50's
     * 7x7 1x1 convs in bf16) and with two m64 tiles a warpgroup (a TF32 7x7 3x3 with a
     * parameter of the output's shape, cp.async) it spilled at 168 */
    if (w->flat && w->wgmt > 1) {
        /* one m64 tile a warpgroup: flat still where 128-row tiles waste as much, else the
         * two-tile plan as it was, unflattened */
        const int64_t rows = ceil_div(opix, 128) * 128;
        if (flat_saves_rows(rows, opix)) {
            most_m64 = 1;
            goto retile;
        }
        w->flat = false;
    }
    if (w->flat && wide) {
        wide = false;
        goto retile;
    }
    /* the flat tiles' outputs checked by predicated stores (fg_wgmma_tiling.flat_predicated)
     * where the sample is the only check, the epilogue is staged (channels last), the
     * operands are half with one product and no tensor's rows are prefetched into registers:
     * with the rows interleaved a 1x1 conv + residual on 7x7 images spilled in bf16 at fp32
     * precision (block accumulation: 36 bytes in the staged epilogue, 12 with the branch; 8
     * in the fragments', none), in fp32 tensors at tf32 (TF32 operands, the residual
     * prefetched: 8, none) and in a bf16 layer reading two per-pixel tensors (one in shared
     * memory, the other prefetched) */
    w->flat_predicated = opts->wgmma_flat_predicated != 1 && w->flat && w->epi_bytes > 0 && w->operand != FG_WGMMA_TF32 &&
                         !w->block_acc && !per_pixel_tensor_besides(ir, w->res_param) &&
                         w->bn % FG_WGMMA_EPI_COLS == 0 && (int64_t)w->nblk * w->bn == g->cout_g;
    /* and the rows as one run of the batch's pixels where nothing needs their sample or pixel:
     * no division a row (its address steps by the channels, as a full tile's do) */
    w->flat_rows_linear = w->flat_predicated && chain_reads_by_channel(ir, w->res_param);
    w->stat_offset = (int64_t)w->stages * w->stage_bytes;
    w->epi_offset = w->stat_offset + w->stat_bytes;
    w->res_offset = w->epi_offset + w->epi_bytes;
    w->bar_offset = w->res_offset + w->res_bytes;
    w->packed_hi = w->packed_lo = w->packed_w = -1;
    w->split_k = 1; /* wgmma_split decides */
    w->split_counters = w->split_partials = -1;
    return true;
}

/* Split K (fg_wgmma_tiling.split_k). A tile computes K = taps x channels in chunks of kc_elems
 * (32 TF32 or 64 half elements) through a ring of `stages` shared-memory stages; a layer with few tiles (a small batch, a
 * small image, many channels) leaves most SMs idle while each tile walks a long K. Splitting
 * the K chunks of a tile over S CTAs fills them, at a price: each split writes its fp32
 * partial tile (wgmt x 128 pixels x bn channels) and the last CTA reads all S back before the
 * epilogue, and each split fills the ring before it runs at speed. A tile then takes about
 * kch / S chunk times of compute plus S reads of a partial; a partial has one stage's A and B
 * bytes at 3xTF32 (64 KB at 128 x 128) and no compute, estimated at a third of a chunk time
 * (3 MFLOP at ~2.5 TFLOP/s of one SM, 1.3 us, against 64 KB at ~150 GB/s, 0.4 us), so the
 * time is lowest near S = sqrt(3 kch) (15 at kch 72) and flat around it. The rule, chosen
 * without measurements (to be timed on the H200):
 *   - S <= the SMs / a launch's tiles: one wave of tiles x S work units at most; the SMs are
 *     the 132 of the H100 SXM and H200 (the sm_90a parts fusegen is measured on);
 *   - every split keeps >= 2 x stages chunks: the producer runs `stages` chunks ahead, so at
 *     least half of a split's chunks run with the ring already full, the fill (one stage's
 *     latency) is amortized, and S stays at or below the estimate's optimum (kch / 6 at 3
 *     stages <= sqrt(3 kch) up to kch 108);
 *   - S <= 16 (the last CTA's reads of the partials are serial);
 *   - S >= 2, else no split (the kernel is then the unsplit one, byte for byte).
 * The planner does not know the batch (a plan serves every batch): it records the most
 * splits (one sample's tiles) and the generated kernel and the launcher compute S for the
 * batch of each launch with fg_wgmma_splits.
 *
 * Counted in waves (FUSEGEN_SPLIT_WAVES=1, opt-in, unmeasured; bench/NOTES.md Waiting 0 (k)):
 * the one-wave bound leaves SMs idle where a launch's tiles fill part of a wave (ConvNeXt
 * 768's 1x1 3072 -> 768 at batch 32: 78 tiles of 48 chunks on 78 SMs) or spill into a short
 * second one (ConvNeXt 384's 1x1 at batch 32: 192 tiles, the second wave 60). The persistent
 * CTAs walk contiguous ranges of ceil(units / SMs) units, so a launch takes about waves(S) =
 * ceil(tiles x S / 132) units' time, each ceil(kch / S) chunks; the launch takes the S in
 * 1..split_k of the least
 *   waves(S) x ceil(kch / S) + F x S   (F x S only where S > 1),
 * F the fixup's cost a partial (its write and the last CTA's read), a third of a chunk time as
 * estimated above (v43 measured the fixup at a fifth to a third of a split conv's time, not a
 * partial's: F is not measured); a tie takes the fewer splits. ConvNeXt 768's c then splits
 * in 3 (2 waves of 16 chunks, 33 against 48) and 384's in 2 (its 24 chunks at 5 stages allow
 * no more: 3 waves of 12, 36.7 against 48). The partial tiles are indexed by unit (tile x S +
 * split), so the workspace holds WGMMA_SPLIT_WAVES waves of them (split_fill units) and a
 * launch splits only while tiles x S fits; the planner's bound on S is then split_fill / a
 * sample's tiles instead of one wave, and a layer gets the split kernel only where some batch
 * splits under the rule. */
enum {
    WGMMA_SPLIT_FILL = 132,   /* the SMs of an H100 SXM / H200 */
    WGMMA_MAX_SPLIT = 16,
    /* the wave rule: partial tiles for 4 waves of units, 528 (33 MB at 64 KB partials, 128 x
     * 128 tiles of one m64 tile a warpgroup; 66 MB at two), so that up to 264 tiles may split
     * in 2 and 147 in 3 */
    WGMMA_SPLIT_WAVES = 4,
    /* the wave rule's costs: a K chunk 3, a partial 1 (F = a third of a chunk, unmeasured) */
    WGMMA_SPLIT_CHUNK_COST = 3,
    WGMMA_SPLIT_PARTIAL_COST = 1,
};

/* A sample's tiles of a wgmma conv: its m tiles, channel blocks and groups (the conv pass's
 * grid_x, the tiles split K divides among the SMs) */
static int64_t wgmma_sample_tiles(const fg_wgmma_tiling *w, int64_t groups)
{
    return (int64_t)w->m_tiles * w->nblk * groups;
}

int64_t fg_wgmma_tiles(const fg_wgmma_tiling *w, int64_t grid_x, int64_t batch)
{
    if (!w->flat || w->m_tiles < 1)
        return grid_x * batch;
    return ceil_div(batch * w->opix, w->bm) * (grid_x / w->m_tiles);
}

int64_t fg_wgmma_split_waves(const fg_wgmma_tiling *w, int64_t units)
{
    return ceil_div(units, w->split_sms);
}

/* The wave rule's estimated time of a launch of `tiles` tiles in `s` splits (the rule above;
 * the generated kernel's splits_for computes the same from the constants rendered from w). */
static int64_t wgmma_split_cost(const fg_wgmma_tiling *w, int64_t tiles, int s)
{
    return w->split_chunk_cost * fg_wgmma_split_waves(w, tiles * s) * ceil_div(w->kch, s) +
           (s > 1 ? (int64_t)w->split_partial_cost * s : 0);
}

int fg_wgmma_splits(const fg_wgmma_tiling *w, int64_t tiles)
{
    if (w->split_k < 2 || tiles < 1)
        return 1;
    if (w->split_waves) {
        int best = 1;
        int64_t best_cost = wgmma_split_cost(w, tiles, 1);
        for (int s = 2; s <= w->split_k && tiles * s <= w->split_fill; s++) {
            const int64_t cost = wgmma_split_cost(w, tiles, s);
            if (cost < best_cost)
                best = s, best_cost = cost;
        }
        return best;
    }
    int64_t s = w->split_fill / tiles;
    return s < 2 ? 1 : s < w->split_k ? (int)s : w->split_k;
}

/* Chooses w->split_k for a conv of `tiles` tiles a sample (the rule above); a caller may set
 * the most splits (FUSEGEN_SPLIT_K: 1 never splits; N replaces the K chunks' bound, each split
 * keeping one chunk at least) and count them in waves (FUSEGEN_SPLIT_WAVES=1). */
static void wgmma_split(const fg_plan_options *opts, fg_wgmma_tiling *w, int64_t tiles)
{
    w->split_k = 1;
    w->split_counters = w->split_partials = -1;
    int64_t s = w->kch / (2 * (int64_t)w->stages);
    if (s > WGMMA_MAX_SPLIT)
        s = WGMMA_MAX_SPLIT;
    if (opts->split_k > 0)
        s = opts->split_k < w->kch ? opts->split_k : w->kch;
    const int waves = opts->split_waves == 1;
    const int64_t units = waves ? (int64_t)WGMMA_SPLIT_WAVES * WGMMA_SPLIT_FILL : WGMMA_SPLIT_FILL;
    int64_t fill = units / tiles;
    if (s > fill)
        s = fill;
    if (s < 2)
        return;
    fg_wgmma_tiling t = *w;
    t.split_k = (int)s;
    t.split_fill = (int)units;
    t.split_min_chunks = (int)(w->kch / s); /* the fewest a split gets (at split_k splits) */
    /* a partial is the accumulators of the threads that hold the tile: both consumer
     * warpgroups' (256 threads), or, where the warpgroups take tiles in turn, one's (128), each
     * warpgroup then arriving on its own tiles' counters with its own flag */
    t.split_slot = (int64_t)w->wgmt * (w->bn / 2) * (w->alternate ? 128 : 256);
    /* the flag (a warpgroup's each where they take tiles in turn) after the barriers (full and
     * empty per stage), their 16 bytes of slack and the turn barriers */
    t.flag_offset = w->bar_offset + 16 * (int64_t)w->stages + 16 + (w->alternate ? 16 : 0);
    if (waves) {
        t.split_waves = 1;
        t.split_sms = WGMMA_SPLIT_FILL;
        t.split_chunk_cost = WGMMA_SPLIT_CHUNK_COST;
        t.split_partial_cost = WGMMA_SPLIT_PARTIAL_COST;
        /* the split kernel only where some launch splits: past the batches whose tiles leave
         * room for 2 splits none can, and below them the rule may keep 1 at every one (a
         * sample's tiles filling whole waves) */
        bool splits = false;
        for (int64_t n = 1, launch; !splits && 2 * (launch = fg_wgmma_tiles(&t, tiles, n)) <= t.split_fill; n++)
            splits = fg_wgmma_splits(&t, launch) > 1;
        if (!splits)
            return;
    }
    *w = t;
}

/* Whether the conv pass's CTAs pair up to share B chunks (fg_wgmma_tiling.multicast): where
 * every tile reads the same B sequence -- one channel block of one group, no split K -- and
 * the caller asks for it (FUSEGEN_WGMMA_MULTICAST=2). Off by default: measured 7-18 % slower
 * on the H200's large convs (bench/NOTES.md v22: the pair's lock-step costs more than the
 * halved B reads save while A is copied by the producer threads); kept for the TMA producer. */
static void wgmma_multicast(const fg_plan_options *opts, fg_wgmma_tiling *w, int groups)
{
    w->multicast =
        opts->wgmma_multicast == 2 && w->nblk == 1 && groups == 1 && w->split_k == 1 && !w->alternate ? 2 : 1;
}

/* The batch at which a split-capable conv's shared tiles are asked whether they still split
 * (wgmma_tiling_chosen): the large batch of the blocks measured (bench/NOTES.md v49) */
enum { WGMMA_TURN_BATCH = 32 };

/* The wgmma tile for a conv with the consumer warpgroups' tiles chosen (fg_wgmma_tiling.alternate):
 * as asked (FUSEGEN_WGMMA_ALTERNATE 1 or 2), else in turn where its operands are half with one
 * product, no CTA pair being asked for, and the conv never splits K at any batch or its shared
 * tiles still split at batch 32 (the turns split K too, a unit one warpgroup's, since v49).
 * Measured on an H100 (v49, the turns with their split on every split-capable layer against
 * the shared tiles): ResNet 2048 (its 1x1 and 3x3 split in 2 at batch 32 in shared tiles,
 * not at all in turn) -11.6 % at batch 32, -18.6 % at 8, -16.0 % at 1, taken by this rule;
 * ConvNeXt 768 +8.6 % at 32 and ResNet 1024 +4.7 % (their layers split only below batch 32,
 * where they gained: -9.1 % and -9.7 % at 8), ConvNeXt 384 -8.5 % at 32, all left shared: a
 * plan serves every batch, and the rule keeps only what lost nowhere. Measured
 * on the H200 with the turns on every layer that can take them (bench/NOTES.md v46, blocks at
 * N32 unless said): ResNet 2048 -16 %, 256 -4 % (N1 -16 %), 1024 -4 %, ConvNeXt 96 -10 % (N1
 * -7 %), 384 -7 %; ConvNeXt 768 +6 %, whose 1x1 back to 768 channels (48 K chunks) is
 * main-loop bound. This rule keeps the split-capable layers' shared tiles (768's c; ResNet
 * 2048's a and b, 1024's b, 384's c) for their small batches, where the turns were not
 * measured: part of the N32 gains above is left (a plan serves every batch; turns for the
 * batches that do not split need the launch's batch, as Waiting 0 (a)'s narrower blocks do).
 * TF32 operands (fp32 layers) and several products (block accumulation: half tensors at
 * fp32 precision) are not measured in turn and keep shared tiles. */
static bool wgmma_tiling_chosen(const fg_plan_options *opts, const fg_layer_ir *ir, const conv_geometry *g, int io_value,
                                fg_wgmma_tiling *w, const char **why)
{
    const int groups = (int)ir->ops[0].groups, ctas = wgmma_ctas_asked(opts);
    const bool choose = opts->wgmma_alternate == 0 && opts->wgmma_multicast != 2;
    if (!wgmma_tiling(ir, g, groups, opts, ctas, choose ? 1 : opts->wgmma_alternate, io_value, w, why))
        return false;
    if (!choose || w->operand == FG_WGMMA_TF32 || w->block_acc)
        return true;
    /* the shared tiles' split, as first_passes will choose it (wgmma_split: 1 where no batch splits) */
    fg_wgmma_tiling split = *w;
    const int64_t sample_tiles = wgmma_sample_tiles(w, groups);
    wgmma_split(opts, &split, sample_tiles);
    /* a split-capable conv in turn too where its shared tiles still split at batch
     * WGMMA_TURN_BATCH: there the turns' 64-row tiles fill the GPU without the fixup, and at
     * smaller batches they split as well (each unit one warpgroup's); by the one-wave rule
     * only (FUSEGEN_SPLIT_WAVES=1 splits ConvNeXt 768's last 1x1 at batch 32, never measured in
     * turn) */
    const bool splits_large = split.split_k > 1 && !split.split_waves &&
                              fg_wgmma_splits(&split, fg_wgmma_tiles(&split, sample_tiles, WGMMA_TURN_BATCH)) > 1;
    fg_wgmma_tiling turn;
    if ((split.split_k == 1 || splits_large) &&
        wgmma_tiling(ir, g, groups, opts, ctas, 2, io_value, &turn, NULL) &&
        turn.alternate)
        *w = turn;
    return true;
}

/* TMA im2col limits (cuTensorMapEncodeIm2col, PTX cp.async.bulk.tensor .im2col; bench/hopper-tma.md
 * section 4): the pixel box corners are signed 8 bits a dim in a rank-4 map, 5 in a rank-5 one;
 * the im2col offsets (a tap's position times the dilation) 8 or 5 bits unsigned, kept below
 * 2^bits - 1 as CUTLASS's can_implement does; the traversal strides 1..8. */
const char *fg_wgmma_a_tma_refusal(const fg_layer_ir *ir, const fg_wgmma_tiling *w, fg_im2col_map *map)
{
    const fg_op *conv = &ir->ops[0];
    conv_geometry g;
    geometry(conv, &g);
    if (!w->parts)
        return "the conv is not on wgmma";
    /* A chunk holds one tap's channel block. Where the packed channels are no multiple of a
     * chunk, the last chunk of a tap would run into the next tap's -- except for a 1x1 conv
     * of one group: there is no next tap, and the chunk's channels past the input's (the
     * map's extent, xc = cp) are the TMA unit's zero fill, as the weights' rows there are
     * zero (the weights' image pads K); at least one whole chunk of channels, so that the
     * box is no wider than the map */
    const bool one_tap = g.taps == 1 && conv->groups == 1 && w->cp >= w->kc_elems;
    if (w->cp % w->kc_elems && !one_tap)
        return w->operand == FG_WGMMA_TF32 ? "its packed channels a group are no multiple of 32 (a K chunk would span taps)"
                                           : "its packed channels a group are no multiple of 64 (a K chunk would span taps)";
    if (w->bm > 256)
        return "tiles of more than 256 pixels";
    int off = 3 - conv->spatial, pad[3] = {0, 0, 0};
    for (int i = off; i < 3; i++)
        pad[i] = (int)conv->padding[i - off];
    /* depth only where the conv has one: a 2D conv's map is rank 4 (wider limits) */
    const bool depth = g.in[0] > 1 || g.k[0] > 1 || g.out[0] > 1 || pad[0] > 0;
    const int rank = depth ? 5 : 4, bits = depth ? 5 : 8;
    const int corner_lo = -(1 << (bits - 1)), corner_hi = (1 << (bits - 1)) - 1, offset_max = (1 << bits) - 2;
    fg_im2col_map m;
    memset(&m, 0, sizeof m);
    m.rank = rank;
    m.operand = w->operand;
    m.elem_bytes = w->operand == FG_WGMMA_TF32 ? 4 : 2;
    m.channels = w->kc_elems;
    m.pixels = w->bm;
    m.dims[0] = (uint64_t)w->xc;
    m.elem_strides[0] = 1;
    uint64_t stride = (uint64_t)w->xc * (uint64_t)m.elem_bytes;
    /* the spatial dims innermost first: W, H[, D] (geometry's index 2, 1, 0) */
    for (int j = 0; j < rank - 2; j++) {
        int i = 2 - j;
        int64_t lower = -pad[i], upper = (g.out[i] - 1) * g.s[i] - pad[i] - (g.in[i] - 1);
        if (lower < corner_lo || lower > corner_hi)
            return "padding past the TMA pixel box's corner range";
        if (upper < corner_lo || upper > corner_hi)
            return "a pixel box corner past the TMA range (the output extent, stride and padding)";
        if ((int64_t)(g.k[i] - 1) * g.d[i] > offset_max)
            return "a dilated kernel extent past the TMA im2col offsets";
        if (g.s[i] < 1 || g.s[i] > 8)
            return "a stride past 8 (TMA traversal strides)";
        m.dims[1 + j] = (uint64_t)g.in[i];
        m.strides[j] = stride;
        stride *= (uint64_t)g.in[i];
        m.lower[j] = (int)lower;
        m.upper[j] = (int)upper;
        m.elem_strides[1 + j] = g.s[i];
    }
    m.strides[rank - 2] = stride; /* a sample */
    m.elem_strides[rank - 1] = 1;
    m.dims[rank - 1] = 0;         /* the batch: the launcher's */
    if (map)
        *map = m;
    return NULL;
}

bool fg_wgmma_staged_epilogue(const fg_plan *plan, const fg_pass *ps)
{
    /* it stores the output, or a buffer held as the output is (fg_io_buffer_value); the one
     * statistic it may feed is the output's, for the next layer (fg_layer_ir.exports_stats),
     * or that buffer's */
    bool io_store = ps->store_output ? ps->store_buffer < 0 : ps->store_buffer >= 0 && plan->buffers[ps->store_buffer].io;
    return plan->wgmma.epi_bytes > 0 && ps->kind == FG_PASS_CONV && ps->conv.engine == FG_CONV_WGMMA && io_store &&
           ps->n_extra_stores == 0 && ps->n_feeds <= 1 && ps->chan_reduce < 0;
}

/* Whether the producer loads A by TMA in im2col mode (fg_wgmma_tiling.a_tma): where
 * fg_wgmma_a_tma_refusal allows, unless the caller asks for cp.async (FUSEGEN_WGMMA_A_TMA=1).
 * Measured on the H200 (bench/NOTES.md, "A by TMA"): 4-9 % faster than the 128 producer
 * threads' cp.async on every layer tried (3xTF32, tf32, bf16; large convs and blocks), bit for
 * bit the same outputs. A refusal is recorded (for fusegen plan) only where TMA was asked for. */
static void wgmma_a_tma(const fg_plan_options *opts, const fg_layer_ir *ir, fg_wgmma_tiling *w)
{
    w->a_tma = 1;
    w->a_tma_refused = NULL;
    memset(&w->im2col, 0, sizeof w->im2col);
    if (opts->wgmma_a_tma == 1)
        return;
    /* the map is written only where TMA can build the stage */
    const char *refused = fg_wgmma_a_tma_refusal(ir, w, &w->im2col);
    if (!refused)
        w->a_tma = 2;
    else if (opts->wgmma_a_tma == 2)
        w->a_tma_refused = refused;
}

/* Ping-pong block accumulation (fg_wgmma_tiling.ping_pong): where the block accumulates
 * (3xTF32 and the exact half products), A comes by TMA, and the accumulator plus two chunk
 * accumulators fit. Registers: 3 x the accumulator and ~40 for the loop, the descriptors and
 * the addresses (ptxas; the compile test fails on any spill); the consumers then take 232, the
 * most two consumer warpgroups can beside a producer at 40 (504 of the SM's 512 a thread slot),
 * as CUTLASS's warp-specialized kernels do. The cp.async producer needs more than 40.
 * Only with 4 stages or more: the consumers then hold two stages at a time, and a ring of 3
 * leaves the producer one stage ahead. Measured (bench/ab-cli, H200, bench/NOTES.md v27):
 * 3-stage rings +3.4 % (KB17, batch 128 and 8) and +1.8 % (64->128 3x3 on 256x256), though
 * SD's GroupNorm -> SiLU -> conv in bf16 (3 stages) gained 6.4 %; a bf16 ResNet block in
 * fp32 precision (4 and 6 stages) -10 %. */
static void wgmma_ping_pong(fg_wgmma_tiling *w)
{
    w->ping_pong = 0;
    if (!w->block_acc || w->a_tma != 2 || w->stages < 4)
        return;
    int need = round_up(3 * (w->wgmt * w->bn / 2) + 40, 8);
    if (need > 232)
        return;
    w->ping_pong = 1;
    if (need > w->consumer_regs) {
        w->consumer_regs = need;
        w->producer_regs = 504 - 2 * need;
    }
}

/* Output channels per group below which a tensor-core conv wastes most of each MMA (the
 * narrowest wgmma and mma.sync tiles are 8 or 16 channels wide): depthwise and 4-channel
 * groups. The sweep (bench/NOTES.md v6) measured them 3-28x slower on wgmma in tf32 than
 * on the exact conv pass, and cuDNN's TF32 path no faster than wgmma there. */
#define NARROW_GROUP_CHANNELS 16

static bool narrow_groups(const fg_layer_ir *ir)
{
    conv_geometry g;
    geometry(&ir->ops[0], &g);
    return g.cout_g < NARROW_GROUP_CHANNELS;
}

/* Output channels per group from which precision "tf32" on sm_90a always takes one TF32
 * product on wgmma. Below it (16-31 outputs a group) the exact engines' own measured choice
 * stands, because one TF32 product on wgmma was measured slower than the exact mma.sync conv
 * there: KB79 (3D 3->16, K 81) 0.359 ms against 0.222 and KB23 (3D 3->24, K 81) 1.212 against
 * 0.677 (bench/RESULTS.md, 2026-12-02), and on the sweep 3->16 3x3 0.052 against 0.042,
 * 32->16 1x1 0.060 against 0.047, 64->64 in 4 groups 0.074 against 0.066 (2026-12-01); with
 * 32 outputs a group one product wins (8->32 3x3 1.235 against 1.547, 16->32 0.215 against
 * 0.282). */
#define TF32_WIDE_GROUP_CHANNELS 32

/* Whether precision "tf32" leaves the conv to the exact engines (3xTF32 or fp32 FMAs, never
 * less exact than asked): narrow groups everywhere, and on sm_90a groups narrower than
 * TF32_WIDE_GROUP_CHANNELS unless the measured fp32 rule (choose_wgmma) still picks wgmma
 * (float32 layers: a half layer's one product on half operands was not measured against it).
 * Off Hopper the others go to cuDNN with TF32. */
static bool tf32_stays_exact(const planner *p)
{
    return p->ir->precision == FG_PRECISION_TF32 && !p->use_wgmma && (narrow_groups(p->ir) || p->tf32_exact_rule);
}

/* A caller may prefer an engine where the shape allows it (FUSEGEN_CONV_ENGINE): a knob for
 * tests and benchmarks (bench/NOTES.md). mma.sync with TF32 starts at sm_80. */
static bool want_mma(const fg_plan_options *opts)
{
    return opts->sm >= 80 && opts->engine != FG_ENGINE_PREFER_FMA;
}

/* Whether the layer's conv runs on the wgmma engine: on sm_90a for convs with wide enough
 * outputs and reductions to feed it (measured, below), and for precision "tf32" unless the groups are narrow
 * (one product, instead of cuDNN and a separate pass); a caller may prefer it
 * (FUSEGEN_CONV_ENGINE=wgmma) or another engine. */
static bool choose_wgmma_fp32(planner *p, const conv_geometry *gp);

/* The fp32 math functions that cost an element of an epilogue tens of instructions (CUDA's
 * erff, expf, tanhf, log1pf, logf; fg_sigmoid is an expf and a division). */
static const char *const costly_math[] = {"erff(", "expf(", "tanhf(", "log1pf(", "logf(", "powf(", "fg_sigmoid("};

/* Such calls in the chain the conv pass evaluates after the conv, per element: up to `last`
 * (the value a staged epilogue stores: the output, or a buffer held as it, before its map
 * pass). An op's unguarded snippet steps all apply, of its guarded ones (alternatives such as
 * gelu's forms, or optional ones) the costliest is counted. */
static int chain_math_calls(const fg_layer_ir *ir, int last)
{
    int calls = 0;
    for (int k = 1; k <= last; k++) {
        const fg_op_def *d = fg_op_def_of(ir->ops[k].kind);
        int guarded = 0;
        for (int i = 0; i < FG_MAX_SNIPPET_STEPS && d->cuda[i].text; i++) {
            int n = 0;
            for (size_t f = 0; f < sizeof costly_math / sizeof costly_math[0]; f++)
                for (const char *at = d->cuda[i].text; (at = strstr(at, costly_math[f])) != NULL; at++)
                    n++;
            if (d->cuda[i].guard)
                guarded = n > guarded ? n : guarded;
            else
                calls += n;
        }
        calls += guarded;
    }
    return calls;
}

/* The staged epilogue's rows per iteration of its row loop (fg_wgmma_tiling.epi_unroll). All
 * FG_WGMMA_EPI_ROWS unrolled give a warp the most independent rows, but the element's code is
 * then repeated chunks x m64 tiles x 16 times, twice where a checked copy serves partial tiles
 * (not flat ones). With math calls in the chain that outgrew the instruction cache: ConvNeXt's
 * 1x1 conv + GELU at 384 -> 1536 channels compiled to 7912 instructions and 39 % of its warp
 * samples waited on instruction fetch; 8 rows at a time took its block 0.1126 -> 0.0952 ms at
 * batch 32 and the 96-channel block 0.0336 -> 0.0238 ms at batch 1, while light chains lost
 * 3-6 % (ResNet's, SD's) and 4 or 2 rows lost more (bench/NOTES.md v44). The estimate: ~16
 * instructions an element and ~30 a math call, against a budget of 4096. */
static int staged_rows_unrolled(const fg_layer_ir *ir, int io_value, const fg_wgmma_tiling *w)
{
    const int64_t chunks = ceil_div(w->bn, FG_WGMMA_EPI_COLS), copies = w->flat ? 1 : 2;
    const int64_t bodies = chunks * w->wgmt * FG_WGMMA_EPI_ROWS * copies;
    const int calls = chain_math_calls(ir, io_value >= 0 ? io_value : ir->n_ops - 1);
    /* a flat tile checked by predicated stores (fg_wgmma_tiling.flat_predicated) has its rows
     * interleaved by the compiler, each row's chain live at once: with a math call 16 rows
     * took ConvNeXt 768's 1x1 + GELU to the consumers' 168 registers and a spill under NVRTC,
     * 8 to 141 (no GPU run yet: bench/NOTES.md v45) */
    if (w->flat_predicated && calls > 0)
        return FG_WGMMA_EPI_ROWS / 2;
    return bodies * (16 + 30 * calls) > 4096 ? FG_WGMMA_EPI_ROWS / 2 : FG_WGMMA_EPI_ROWS;
}

/* The staged epilogue's channels a lane (fg_wgmma_tiling.epi_vec), asked for by
 * FUSEGEN_WGMMA_EPI_VEC=2 (opt-in: measured on an H100, bench/NOTES.md v49, +1.7 to +2.8 % on
 * ConvNeXt 384, ResNet 256 and SD 320, -6.6 % on ResNet 2048; why not yet known). A lane a channel spends a 4-byte slab load,
 * a 2-byte store and its address on every element, ~10 of ConvNeXt's 1x1 + GELU's ~43
 * instructions an element in an epilogue measured bound by its instruction issue (bench/NOTES.md
 * v47); 16 bytes a lane (8 half or 4 fp32 channels of one row) take one store and two or one
 * slab loads for them all, and one load of the residual's tile where it is in shared memory.
 * Only where every vector is whole and aligned with the tensor (channels a group a multiple of
 * it: the channel blocks are, being multiples of 8), a row's vectors are unrolled together (at
 * least that many rows a time: fg_wgmma_tiling.epi_unroll), and the chain reads no block tensor
 * by pixel from global memory, whose loads the scalar epilogue prefetches a chunk of rows at a
 * time (conv.lua). */
static int staged_vector(const fg_plan_options *opts, const fg_layer_ir *ir, const conv_geometry *g,
                         const fg_wgmma_tiling *w)
{
    const int v = ir->dtype == FG_DTYPE_FP32 ? 4 : 8;
    if (opts->wgmma_epi_vec != 2 || w->epi_bytes == 0 || g->cout_g % v != 0 || w->bn % v != 0 ||
        w->epi_unroll % v != 0 || per_pixel_tensor_besides(ir, w->res_param))
        return 1;
    return v;
}

int fg_wgmma_epi_vec(const fg_plan *plan, const fg_pass *ps)
{
    return fg_wgmma_staged_epilogue(plan, ps) && ps->n_feeds == 0 && plan->wgmma.epi_vec > 1 ? plan->wgmma.epi_vec : 1;
}

bool fg_wgmma_epi_rows_valid(int rows)
{
    return rows > 0 && rows <= FG_WGMMA_EPI_ROWS && FG_WGMMA_EPI_ROWS % rows == 0;
}

static bool choose_wgmma(planner *p)
{
    const fg_plan_options *opts = p->opts;
    if (!opts->wgmma || opts->engine == FG_ENGINE_PREFER_FMA || opts->engine == FG_ENGINE_PREFER_MMA)
        return false;
    conv_geometry g;
    geometry(&p->ir->ops[0], &g);
    const char *why = NULL;
    if (!wgmma_tiling_chosen(opts, p->ir, &g, p->io_value, &p->plan->wgmma, &why)) {
        /* said by fusegen plan: a limit of the engine, not a measured choice */
        snprintf(p->plan->wgmma_refused, sizeof p->plan->wgmma_refused, "%s", why ? why : "");
        return false;
    }
    p->plan->wgmma.epi_unroll = fg_wgmma_epi_rows_valid(opts->wgmma_epi_rows)
                                    ? opts->wgmma_epi_rows
                                    : staged_rows_unrolled(p->ir, p->io_value, &p->plan->wgmma);
    p->plan->wgmma.epi_vec = staged_vector(opts, p->ir, &g, &p->plan->wgmma);
    if (opts->engine == FG_ENGINE_PREFER_WGMMA)
        return true;
    if (p->ir->precision == FG_PRECISION_TF32) {
        if (narrow_groups(p->ir))
            return false;
        if (g.cout_g >= TF32_WIDE_GROUP_CHANNELS || p->ir->dtype != FG_DTYPE_FP32)
            return true; /* half layers: one product on half operands, not measured against the exact conv */
        /* 16-31 outputs a group: the exact engines' choice below stands (TF32_WIDE_GROUP_CHANNELS);
         * only here, where wgmma could run the shape and no engine was forced, was it measured
         * against: elsewhere tf32 keeps cuDNN */
        p->tf32_exact_rule = !choose_wgmma_fp32(p, &g);
        return !p->tf32_exact_rule;
    }
    return choose_wgmma_fp32(p, &g);
}

/* The fp32 (3xTF32) rule of choose_wgmma: whether wgmma beats the exact engines on this shape. */
static bool choose_wgmma_fp32(planner *p, const conv_geometry *gp)
{
    const fg_plan_options *opts = p->opts;
    const conv_geometry g = *gp;
    /* fp32 (3xTF32), measured on the H200 with every engine forced on the sweep's 42 shapes
     * (bench/engine-choice.py, bench/NOTES.md v7). wgmma re-reads its im2col rows for every
     * 128-channel block and its K chunks are 32 wide: it wins with wide outputs and long
     * reductions (64->64 3x3: 0.140 ms against mma.sync's 0.195), on 1x1 convs with 64
     * channels or more (64->256: 0.089 against the FMA engine's 0.624 and mma.sync's 0.192)
     * and wherever mma.sync cannot run (3D 8->16 5x5x5: 0.080 against FMA's 0.256); with
     * 16-32 outputs a group and a short reduction mma.sync's reuse of the staged input
     * across taps wins (16->16 7x7: 0.069 against 0.132; 64->64 in 4 groups 0.058 against
     * 0.112; 16->32 3x3 0.251 against 0.307). Short reductions over 3x3 taps stay off wgmma
     * (8->64, K 72: KB85 and KB92's statistics epilogues run 5 % slower on it). */
    const int64_t k = g.cin_g * g.taps;
    if (g.cout_g < NARROW_GROUP_CHANNELS)
        return false;
    if (k >= 128 && (g.cout_g >= 64 || (g.cout_g >= 32 && k >= 256)))
        return true;
    if (g.taps == 1 && k >= 64 && g.cout_g >= 64)
        return true;
    if (k < 128)
        return false;
    fg_pass mma;
    memset(&mma, 0, sizeof mma);
    return !(want_mma(opts) && conv_tiling_mma(&g, &mma, opts));
}

const char *fg_wgmma_operand_name(int operand)
{
    static const char *const names[] = {"tf32", "bf16", "f16"};
    return operand >= FG_WGMMA_TF32 && operand <= FG_WGMMA_F16 ? names[operand] : "?";
}

const char *fg_plan_conv_engine_name(const fg_plan *plan)
{
    if (plan->wgmma.parts)
        return "wgmma";
    for (int i = 0; i < plan->n_passes; i++) {
        if (plan->passes[i].kind == FG_PASS_CUDNN)
            return "cuDNN";
        if (plan->passes[i].kind == FG_PASS_CONV)
            return plan->passes[i].conv.engine == FG_CONV_MMA ? "mma.sync" : "the FMA engine";
    }
    return "no conv";
}

/* Where the measurements leave the conv engine open (bench/NOTES.md v7): fp32 on sm_90a,
 * both engines able to run the conv, and neither settled by the sweep -- wide and long
 * (K >= 256 with >= 64 outputs a group: wgmma 1.4-2.9x faster; 1x1 convs with >= 64: 3.4-7x),
 * short (K < 64) or narrow (< 32 outputs a group: mma.sync 1.2-2.9x faster: KB79, KB23,
 * 16->16 7x7).
 * In between, the epilogue decides (KB85's statistics ran 5 % slower on wgmma, the same
 * conv with a bias 13 % faster): the runtime times both at the first run. */
bool fg_plan_engine_alternative(const fg_layer_ir *ir, const fg_plan_options *opts, const fg_plan *plan,
                                fg_plan_options *alternative)
{
    if (opts->engine != FG_ENGINE_AUTO || !opts->wgmma || ir->precision != FG_PRECISION_FP32 || ir->n_ops < 1 ||
        fg_op_kind_class(ir->ops[0].kind) != FG_CLASS_CONV)
        return false;
    conv_geometry g;
    geometry(&ir->ops[0], &g);
    fg_wgmma_tiling w;
    if (!wgmma_tiling_chosen(opts, ir, &g, fg_io_buffer_value(ir, wanted_strategy(ir, opts)), &w, NULL))
        return false;
    const int64_t k = g.cin_g * g.taps;
    if ((k >= 256 && g.cout_g >= 64) || (g.taps == 1 && g.cout_g >= 64) || k < 64 || g.cout_g < 32)
        return false;
    *alternative = *opts;
    /* plan->wgmma is all zero unless the conv runs on wgmma */
    alternative->engine = plan->wgmma.parts ? FG_ENGINE_PREFER_MMA : FG_ENGINE_PREFER_WGMMA;
    return true;
}

/* The passes that pack the wgmma engine's operands, before everything else. */
static int add_pack_passes(planner *p)
{
    const fg_layer_ir *ir = p->ir;
    fg_plan *plan = p->plan;
    fg_wgmma_tiling *w = &p->plan->wgmma;
    if (plan->n_buffers + 3 > FG_MAX_BUFFERS)
        return fg_fail(p->err, "%s: too many intermediate buffers", ir->file);
    int64_t ipix = fg_shape_sample_count(&ir->input) / ir->input.dim[1];
    int64_t groups = ir->ops[0].groups;
    if (w->split_k > 1 && plan->n_buffers + 5 > FG_MAX_BUFFERS)
        return fg_fail(p->err, "%s: too many intermediate buffers", ir->file);
    fg_buffer *b;
    if (w->split_k > 1) {
        /* split K: the tiles' arrival counters (one 32-bit word each; the launcher places them
         * first and keeps them zero between launches) and the partial tiles */
        b = &plan->buffers[plan->n_buffers];
        b->value = -1;
        b->fixed = w->split_fill;
        w->split_counters = plan->n_buffers++;
        b = &plan->buffers[plan->n_buffers];
        b->value = -1;
        b->fixed = w->split_fill * w->split_slot;
        w->split_partials = plan->n_buffers++;
    }
    /* the packed input: xc elements a pixel, 4 or 2 bytes each (xc is a multiple of 4, of 8
     * for half operands); the weights' images: rows of 128 bytes, 32 floats */
    const int64_t el = w->operand == FG_WGMMA_TF32 ? 4 : 2;
    b = &plan->buffers[plan->n_buffers];
    b->value = -1;
    b->per_sample = ipix * w->xc * el / 4;
    w->packed_hi = plan->n_buffers++;
    if (w->a_parts == 2) {
        b = &plan->buffers[plan->n_buffers];
        b->value = -1;
        b->per_sample = ipix * w->xc * el / 4;
        w->packed_lo = plan->n_buffers++;
    }
    b = &plan->buffers[plan->n_buffers];
    b->value = -1;
    w->w_elems = (int64_t)groups * w->nblk * w->kch * w->parts * w->bn * w->kc_elems;
    if (w->w_elems > INT32_MAX) /* the pack kernel indexes with int */
        return fg_fail(p->err,
                       "%s:%d: this conv's weights as wgmma tiles are %lld elements, more than the packing kernel "
                       "indexes (2^31 - 1): this conv cannot be generated on the wgmma engine",
                       p->ir->file, p->ir->ops[0].line, (long long)w->w_elems);
    b->fixed = w->w_elems * el / 4; /* floats */
    w->packed_w = plan->n_buffers++;
    fg_pass *pw = new_pass(p, FG_PASS_PACK_WEIGHTS);
    fg_pass *pi = pw ? new_pass(p, FG_PASS_PACK_INPUT) : NULL;
    if (!pi)
        return -1;
    pw->first = pi->first = 1;
    pw->last = pi->last = 0; /* no op of the chain */
    return 0;
}

/* Where generation stops: both engines unroll every tap of the kernel (the instruction-cache
 * cliff, DESIGN.md: a loop body past ~50 KB of SASS runs slower, and NVRTC's time grows
 * with it), and stage a block's input tile, halo included, in shared memory. A conv past
 * either bound is refused with the reason rather than rendered into a source of hundreds
 * of megabytes. */
enum {
    MAX_UNROLLED_TAPS = 4096,        /* 16x16x16; the largest common kernels are 7x7x7 (343), 31x31 (961) */
};

/* The FMA engine's channels-last mapping (fg_conv_tiling.chan_lanes): a block of `lanes`
 * consecutive output channels (whole groups) times thread tiles along D, H, W. Shared memory:
 * the input tile [pixel][the groups' input channels], then the weights [ci][tap][lane],
 * rows padded by one float (the staging writes them transposed: a pitch of lanes + 1 keeps
 * those stores on distinct banks, and the reads, one channel a lane, stay conflict-free). */
static int64_t cl_layout(const conv_geometry *g, const fg_conv_tiling *t, fg_smem_layout *out)
{
    fg_smem_layout l = {0};
    int64_t pixels = (int64_t)t->in_tile[0] * t->in_tile[1] * t->in_tile[2];
    l.input_buffers = 1;
    l.channel_pitch = 1;
    l.pixel_pitch = t->ci_chunk;
    l.buffer_floats = pixels * t->ci_chunk;
    l.weights_offset = l.buffer_floats;
    l.weights_co_pitch = t->chan_lanes + 1;
    l.weights_floats = g->cin_g * g->taps * l.weights_co_pitch;
    l.table_offset = l.weights_offset + l.weights_floats;
    if (out)
        *out = l;
    return 4 * l.table_offset;
}

/* Sets the thread tiles along D, H, W (threads[]) from the thread tile and `strips` of them
 * (a power of two), and the block's output and input tiles: a factor of two at a time to W
 * or H, whichever tile is shorter and still has outputs to cover, then D. */
static void cl_strips(const conv_geometry *g, fg_conv_tiling *t, int strips)
{
    int n[3] = {1, 1, 1};
    for (; strips > 1; strips /= 2) {
        bool w = n[2] * t->thread_w < g->out[2], h = n[1] * t->thread_h < g->out[1];
        if (w && (!h || n[2] * t->thread_w <= n[1] * t->thread_h))
            n[2] *= 2;
        else if (h)
            n[1] *= 2;
        else if (n[0] < g->out[0])
            n[0] *= 2;
        else
            break;
    }
    int rt[3] = {1, t->thread_h, t->thread_w};
    for (int i = 0; i < 3; i++) {
        t->threads[i] = n[i];
        t->tile[i] = n[i] * rt[i];
        t->in_tile[i] = (t->tile[i] - 1) * g->s[i] + (g->k[i] - 1) * g->d[i] + 1;
    }
}

/* The channels-last mapping where it fits (returns true and fills ps): a channels-last layer
 * whose groups are narrow (at most 32 output and 8 input channels: depthwise and grouped
 * convs). The classic mapping reads such an input one element per pixel, C elements apart,
 * and its per-pixel statistics (layer_norm over channels) cost an atomic per element; here a
 * warp's loads and stores run along C and a pixel's statistic is added up across the warp.
 * Not taken: NCHW layers; wide groups (the classic mapping's channel tiles reuse each input
 * element across channels, and its staging reads runs of a group's channels); a kernel row
 * slab over 64 taps (the thread keeps one (channel, depth) slab of weights in registers); a
 * thread tile set by hand (FUSEGEN_CONV_TILE describes the classic tile); a staged tile past
 * the shared-memory budget even at one thread tile. */
static bool conv_tiling_cl(const planner *p, const conv_geometry *g, fg_pass *ps)
{
    const int *knob = p->opts->conv_tile;
    if (p->ir->layout != FG_LAYOUT_CHANNELS_LAST || g->cout_g > 32 || g->cin_g > 8 ||
        (int64_t)g->k[1] * g->k[2] > 64 || knob[0] || knob[1] || knob[2] || knob[3])
        return false;
    fg_conv_tiling *t = &ps->conv;
    memset(t, 0, sizeof *t);
    t->engine = FG_CONV_FMA;
    int64_t cout = p->ir->ops[0].out_channels;
    int lanes = (int)(32 / g->cout_g * g->cout_g);
    if (cout < lanes)
        lanes = (int)cout;
    t->chan_lanes = t->co_tile = lanes;
    t->thread_co = 1;
    t->ci_chunk = (int)(lanes / g->cout_g * g->cin_g);
    /* The input staged in 16-byte vectors (conv.lua, stage_input_vec): a scalar staging loop
     * spends its time on the index arithmetic of every element and on each 2- or 4-byte
     * load's latency in turn. A vector of channels stays 16-byte aligned in memory where a
     * pixel holds whole vectors (C) and in shared memory where the staged pixel does
     * (ci_chunk, its pitch); the block's first channel, blockIdx.y * ci_chunk, is then one
     * too. The pointer itself is checked at run time (a view may start anywhere). A prologue
     * transforms one element at a time: it keeps the scalar staging. */
    int vec = io_vec_elems(p->ir);
    if (!g->prologue && t->ci_chunk % vec == 0 && p->ir->ops[0].in.dim[1] % vec == 0)
        t->in_vec = vec;
    t->ci_unroll = 1;
    t->ch_pitch = 1;
    /* 4 x 4 outputs a thread (each staged input is read by up to 4 rows, each weight by 16
     * outputs), fewer where the output is small or where the unrolled body of one input
     * channel would pass ~1600 FMAs or the registers (outputs, one slab of weights, one
     * input row) ~128 */
    t->thread_w = g->out[2] >= 4 ? 4 : g->out[2] >= 2 ? 2 : 1;
    t->thread_h = g->out[1] >= 4 ? 4 : g->out[1] >= 2 ? 2 : 1;
    for (;;) {
        int64_t acc = (int64_t)t->thread_h * t->thread_w;
        int64_t row = (int64_t)(t->thread_w - 1) * g->s[2] + (int64_t)(g->k[2] - 1) * g->d[2] + 1;
        if ((acc * g->taps <= 1600 && acc + (int64_t)g->k[1] * g->k[2] + row + 32 <= 128) || acc == 1)
            break;
        if (t->thread_h > 1)
            t->thread_h /= 2;
        else
            t->thread_w /= 2;
    }
    /* up to 256 threads: 8 thread tiles of 32 channels */
    int strips = 1;
    while ((int64_t)lanes * strips * 2 <= 256)
        strips *= 2;
    for (;; strips /= 2) {
        cl_strips(g, t, strips);
        if (cl_layout(g, t, NULL) <= CONV_SMEM_BUDGET)
            break;
        if (strips == 1)
            return false;
    }
    ps->launch.block = lanes * t->threads[0] * t->threads[1] * t->threads[2];
    ps->launch.grid_x =
        ceil_div(g->out[0], t->tile[0]) * ceil_div(g->out[1], t->tile[1]) * ceil_div(g->out[2], t->tile[2]);
    ps->launch.grid_y = ceil_div(cout, lanes);
    ps->launch.per_sample = true;
    ps->launch.smem_bytes = (int)cl_layout(g, t, &t->smem);
    return true;
}

static int conv_tiling(const planner *p, fg_pass *ps)
{
    const fg_plan_options *opts = p->opts;
    const fg_op *conv = &p->ir->ops[0];
    conv_geometry g;
    geometry(conv, &g);
    g.prologue = p->ir->n_pro > 0;
    const char *what = fg_op_kind_name(conv->kind);
    if (g.taps > MAX_UNROLLED_TAPS)
        return fg_fail(p->err, "%s:%d: %s: field 'kernel' has %lld taps; fusegen unrolls the taps of a kernel and "
                               "generates at most %d (the instruction cache would thrash long before): this conv "
                               "cannot be generated",
                       p->ir->file, conv->line, what, (long long)g.taps, MAX_UNROLLED_TAPS);
    fg_conv_tiling *t = &ps->conv;
    ps->launch.per_sample = true;
    if (p->use_wgmma) {
        memset(t, 0, sizeof *t);
        t->engine = FG_CONV_WGMMA;
        ps->launch.block = 384; /* a producer warpgroup and two consumers */
        ps->launch.grid_x = wgmma_sample_tiles(&p->plan->wgmma, conv->groups);
        ps->launch.grid_y = 1;
        ps->launch.persistent = true;
        ps->launch.per_sample = false;
        /* the stages, the barriers (full and empty per stage, 16 B of slack) and 1024 bytes to
         * align the base the operands' swizzle needs */
        ps->launch.smem_bytes = (int)(1024 + p->plan->wgmma.bar_offset + 16 * p->plan->wgmma.stages + 16);
        if (p->plan->wgmma.split_k > 1)
            ps->launch.smem_bytes += 16; /* split K: the last-arrival flag */
        if (p->plan->wgmma.alternate)
            ps->launch.smem_bytes += 16; /* the consumer warpgroups' two turn barriers */
        return 0;
    }
    if (want_mma(opts) && conv_tiling_mma(&g, ps, opts)) {
        ps->launch.grid_y = conv->groups * ceil_div(g.cout_g, t->co_tile);
        return 0;
    }
    if (conv_tiling_cl(p, &g, ps))
        return 0;
    memset(t, 0, sizeof *t);
    t->engine = FG_CONV_FMA;
    /* Register tile: 2 rows x 4 outputs x 8 channels (64 accumulators) where the shape allows,
     * shrunk until the unrolled body of one input channel stays under ~900 FMAs (compile time
     * and the instruction cache) and the registers under ~120 (no spills at 2 blocks/SM). */
    t->thread_co = g.cout_g >= 8 ? 8 : round_up(g.cout_g, 4);
    t->thread_w = g.out[2] >= 16 ? 4 : g.out[2] >= 2 ? 2 : 1;
    t->thread_h = g.out[1] >= 2 ? 2 : 1;
    for (;;) {
        int64_t acc = (int64_t)t->thread_co * t->thread_h * t->thread_w;
        int64_t row = (int64_t)(t->thread_w - 1) * g.s[2] + (int64_t)(g.k[2] - 1) * g.d[2] + 1;
        int64_t regs = acc + t->thread_h * row + t->thread_co + 32;
        if ((acc * g.taps <= 900 && regs <= 128) || acc <= 4)
            break;
        /* 3D kernels shrink along W first: 2 rows x 2 outputs ran faster than 1 x 4 (NOTES.md) */
        if (g.taps > 9 && t->thread_w > 2)
            t->thread_w /= 2;
        else if (t->thread_h > 1)
            t->thread_h = 1;
        else if (t->thread_w > 2)
            t->thread_w /= 2;
        else if (t->thread_co > 4)
            t->thread_co = 4;
        else
            t->thread_w = 1;
    }
    /* a caller may set the thread tile (FUSEGEN_CONV_TILE="rows,cols,channels,unroll"), a knob
     * for benchmarking candidates by hand (bench/NOTES.md); 0 keeps the planner's choice */
    int f_h = opts->conv_tile[0], f_w = opts->conv_tile[1], f_c = opts->conv_tile[2], f_u = opts->conv_tile[3];
    {
        if (f_h > 0)
            t->thread_h = f_h;
        if (f_w > 0)
            t->thread_w = f_w;
        if (f_c > 0 && f_c % 4 == 0)
            t->thread_co = f_c;
    }
    /* threads: up to 16 along W, then rows, then depth, aiming at 128..256 per block */
    int tx = (int)(ceil_div(g.out[2], t->thread_w) < 16 ? ceil_div(g.out[2], t->thread_w) : 16);
    int64_t rows = ceil_div(g.out[1], t->thread_h);
    int ty = (int)(rows < 256 / tx ? rows : 256 / tx);
    int tz = (int)(g.out[0] < 256 / (tx * ty) ? g.out[0] : 256 / (tx * ty));
    t->threads[0] = tz;
    t->threads[1] = ty;
    t->threads[2] = tx;
    t->tile[0] = tz;
    t->tile[1] = ty * t->thread_h;
    t->tile[2] = tx * t->thread_w;
    for (int i = 0; i < 3; i++)
        t->in_tile[i] = (t->tile[i] - 1) * g.s[i] + (g.k[i] - 1) * g.d[i] + 1;
    t->in_tile[2] = round_up(t->in_tile[2], 4);
    /* a block covers every channel of its group when the whole input tile fits (the tile is
     * staged once and reused for every channel tile); otherwise 32 channels, staged in chunks */
    t->co_tile = round_up(g.cout_g, t->thread_co);
    t->ci_chunk = (int)g.cin_g;
    if (conv_smem(&g, t, g.cin_g) > CONV_SMEM_BUDGET) {
        /* staged in chunks: one channel tile per block, so that each chunk is staged once */
        t->co_tile = t->thread_co;
        while (t->ci_chunk > 1 && conv_smem(&g, t, t->ci_chunk) > CONV_SMEM_BUDGET)
            t->ci_chunk = (t->ci_chunk + 1) / 2;
    }
    /* unroll the input-channel loop only while its body stays small (instruction cache) */
    int64_t body = g.taps * t->thread_co * t->thread_h * t->thread_w;
    t->ci_unroll = body <= 300 && t->ci_chunk % 2 == 0 ? 2 : 1;
    if (f_u > 0 && t->ci_chunk % f_u == 0)
        t->ci_unroll = f_u;
    int64_t tiles = ceil_div(g.out[0], t->tile[0]) * ceil_div(g.out[1], t->tile[1]) * ceil_div(g.out[2], t->tile[2]);
    ps->launch.block = tx * ty * tz;
    ps->launch.grid_x = tiles;
    ps->launch.grid_y = conv->groups * ceil_div(g.cout_g, t->co_tile);
    ps->launch.per_sample = true;
    t->ch_pitch = t->in_tile[0] * t->in_tile[1] * t->in_tile[2];
    int64_t bytes = fma_layout(&g, t, t->ci_chunk, 0, &t->smem);
    if (bytes > MAX_BLOCK_SMEM)
        return fg_fail(p->err, "%s:%d: %s: one input channel of a block's tile, halo included (%d x %d x %d "
                               "floats: the kernel spans %lld x %lld x %lld inputs with its dilation), and its "
                               "weights need %lld bytes of shared memory; a block has at most %d: this conv cannot "
                               "be generated",
                       p->ir->file, conv->line, what, t->in_tile[0], t->in_tile[1], t->in_tile[2],
                       (long long)(g.k[0] - 1) * g.d[0] + 1, (long long)(g.k[1] - 1) * g.d[1] + 1,
                       (long long)(g.k[2] - 1) * g.d[2] + 1, (long long)bytes, MAX_BLOCK_SMEM);
    ps->launch.smem_bytes = (int)bytes;
    return 0;
}

/* A map pass that writes a channels-last output, elementwise (no op reads another element,
 * no shape op), with no other store: index by index it reads its buffers (NC(D)HW) along
 * pixels and writes the output (N(D)HWC) along channels, so one of the two is strided by C
 * in any one-element-a-thread order (the nnU-Net stage's map, bf16 2x64x64^3: 554 us, 15 %
 * of DRAM's bandwidth). It transposes instead (templates/map.lua, render_cl_tiled): a block
 * takes a tile of tile_c channels x tile_p pixels of one sample, copies each buffer's tile
 * into shared memory along pixels, then evaluates the chain and stores along channels.
 * tile_c is 32 (a warp's store spans 32 channels), less for fewer channels (a power of two,
 * so that threadIdx.x % tile_c is a thread's channel in every row it writes); tile_p makes
 * the tile 2048 elements, 8 a thread. A row is padded by 32 / tile_c floats: the 32 lanes of
 * a store then read 32 different banks (32 / tile_c rows of tile_c channels). A pass that
 * also stores a buffer (NC(D)HW: it wants the other order), starts from statistics (channel
 * sums), feeds a statistic (no plan has a map pass that writes the output and feeds) or reads
 * more than MAP_CL_TILE_BUFFERS buffers keeps the one-element-a-thread order. Returns the
 * buffers it stages, 0 when the pass is not tiled. */
#define MAP_CL_TILE_ELEMS 2048
#define MAP_CL_TILE_BUFFERS 4
static int map_cl_tile(const planner *p, const fg_pass *ps, int *tile_c, int *tile_p, int *pitch)
{
    const fg_layer_ir *ir = p->ir;
    const fg_shape *dom = &ir->ops[ps->domain].out;
    if (ir->layout != FG_LAYOUT_CHANNELS_LAST || !ps->store_output || ps->store_buffer >= 0 ||
        ps->n_extra_stores > 0 || ps->chan_sums >= 0 || ps->source_buffer < 0 || ps->n_feeds > 0 ||
        p->plan->buffers[ps->source_buffer].io) /* channels last already: read in the output's order */
        return 0;
    /* a shape op (templates see the shapes before it: fg_value_layout), or one channel or one
     * pixel (channels last is the NC(D)HW order there) */
    if (fg_value_layout(ir, ps->domain) != dom || dom->rank < 3 || dom->dim[1] == 1 ||
        fg_shape_sample_count(dom) == dom->dim[1])
        return 0;
    if (!fg_shape_same(&ir->ops[p->plan->buffers[ps->source_buffer].value].out, dom))
        return 0;
    int staged[MAP_CL_TILE_BUFFERS], n = 0;
    staged[n++] = ps->source_buffer;
    for (int k = ps->first; k <= ps->last; k++) {
        const fg_op *op = &ir->ops[k];
        fg_op_class c = fg_op_kind_class(op->kind);
        if (c != FG_CLASS_UNARY && c != FG_CLASS_BINARY && c != FG_CLASS_NORM)
            return 0;
        if (!fg_shape_same(&op->out, dom))
            return 0;
        if (op->operand == FG_OPERAND_VALUE && op->operand_value < ps->first - 1) {
            if (!fg_shape_same(&ir->ops[op->operand_value].out, dom))
                return 0;
            int b = p->buffer_of[op->operand_value], seen = 0;
            for (int i = 0; i < n; i++)
                seen |= staged[i] == b;
            if (!seen && n == MAP_CL_TILE_BUFFERS)
                return 0;
            if (!seen)
                staged[n++] = b;
        }
    }
    int tc = 1;
    while (tc < 32 && tc < dom->dim[1])
        tc *= 2;
    *tile_c = tc;
    *tile_p = MAP_CL_TILE_ELEMS / tc;
    *pitch = *tile_p + 32 / tc;
    return n;
}

/* Whether map pass `ps` reads no buffer but its source (no op of it reads a value by name:
 * op_args). */
static bool map_reads_only_source(const fg_layer_ir *ir, const fg_pass *ps)
{
    for (int k = ps->first; k <= ps->last; k++)
        if (ir->ops[k].operand == FG_OPERAND_VALUE)
            return false;
    return true;
}

/* 16-byte vectors a thread of a map pass reading a source held channels last (map_launch) */
#ifndef MAP_CL_VECTORS
#define MAP_CL_VECTORS 4
#endif

static void map_launch(const planner *p, fg_pass *ps)
{
    const fg_layer_ir *ir = p->ir;
    int64_t n = fg_shape_sample_count(&ir->ops[ps->domain].out);
    /* a few elements per thread (strided by the block, so loads stay coalesced); a sample's
     * elements span grid.x. An element that reads many (a reduction, softmax or pool in the
     * pass: a loop over the reduced extent per element) gets a thread of its own: four per
     * thread left a channel reduction at batch 8 with one block of 8 warps per SM, bound by
     * load latency (bench/NOTES.md v10) */
    const bool gathers = any_gathers(ir, ps->first, ps->last);
    ps->launch.block = 256;
    ps->launch.elems_per_thread = gathers ? 1 : 4;
    ps->launch.grid_x = (n + 256 * ps->launch.elems_per_thread - 1) / (256 * ps->launch.elems_per_thread);
    ps->launch.grid_y = 1;
    ps->launch.per_sample = true;
    /* a source held channels last in the dtype (fg_buffer.io): a thread takes MAP_CL_VECTORS
     * vectors of 8 channels of a pixel (16 bytes each), consecutive vectors in consecutive
     * threads, a thread's vectors the same 8 channels (the block's stride a multiple of C / 8
     * vectors), so that its per-channel loads (statistics, affine parameters) are made once.
     * Measured on the H200 (bench/NOTES.md v39), nnU-Net's block output at batch 2: one vector
     * a thread, each element loading its own per-channel values, was L1-bound (8 sectors a
     * per-channel load across a warp's 8 channel groups, the LSU queue full) at 30 % of DRAM
     * peak; a warp per channel group (one address a load) was worse (91 against 78 us: 48 load
     * instructions a thread, strided 16-byte accesses) */
    const int64_t channels = ir->ops[ps->domain].out.dim[1];
    if (!gathers && ps->source_buffer >= 0 && p->plan->buffers[ps->source_buffer].io && channels % 8 == 0 &&
        channels / 8 <= 256 && ps->store_output && ps->store_buffer < 0 && ps->n_extra_stores == 0 &&
        ps->n_feeds == 0 && ps->chan_sums < 0 && map_reads_only_source(ir, ps)) {
        const int64_t octets = channels / 8, stride = 256 - 256 % octets;
        ps->launch.cl_vec = 8;
        ps->launch.cl_vectors = MAP_CL_VECTORS;
        ps->launch.cl_stride = (int)stride;
        ps->launch.elems_per_thread = 8 * MAP_CL_VECTORS;
        ps->launch.grid_x = ceil_div(n / 8, stride * MAP_CL_VECTORS);
        return;
    }
    int tc, tp, pitch, staged = map_cl_tile(p, ps, &tc, &tp, &pitch);
    if (staged > 0) {
        const fg_shape *dom = &ir->ops[ps->domain].out;
        ps->launch.tile_c = tc;
        ps->launch.tile_p = tp;
        ps->launch.tile_pitch = pitch;
        ps->launch.elems_per_thread = MAP_CL_TILE_ELEMS / 256;
        /* the channel tiles of one pixel range in consecutive blocks: together they write
         * one contiguous span of the output */
        ps->launch.grid_x = ceil_div(dom->dim[1], tc) * ceil_div(n / dom->dim[1], tp);
        ps->launch.smem_bytes = staged * tc * pitch * (int)sizeof(float);
    }
}

static void finalize_launch(const fg_plan *plan, fg_pass *ps)
{
    const fg_accum *a = &plan->accums[ps->finalize_accum];
    ps->launch.block = 128;
    if (a->over_batch) {
        ps->launch.per_sample = false;
        ps->launch.finalize_keys = a->keys_per_sample;
        ps->launch.grid_x = (a->keys_per_sample + 127) / 128;
    } else {
        ps->launch.per_sample = true;
        ps->launch.grid_x = (a->keys_per_sample + 127) / 128;
    }
    ps->launch.grid_y = 1;
}

/* The prologue's statistics pass. Over a channels-last input whose statistic reduces every
 * spatial dim (group, instance and batch norms: a key is a group of channels), a pixel's
 * channels are contiguous, so a block reads whole pixel rows in 16-byte vectors: thread t
 * keeps channels (t % units) * row_vec.. of every (block / units)-th pixel, sums them per
 * channel in fp64, and the block adds its per-channel sums into the keys; FG_PRO_ROWS_BLOCKS
 * blocks a sample at most: every block flushes every key of its sample (fp64 atomics on the
 * same few addresses), so the fewer the better, as long as a batch of two fills the GPU
 * with loads in flight (8 of a thread's 16-byte loads unrolled). A statistic over each pixel's
 * channels (a layer norm with dim = 1) is read the same way, a key a pixel. Any other
 * statistic (an NCHW input, channels that do not fill
 * 16-byte vectors or more of them than a block has threads) sums a span of at most
 * FG_PRO_STATS_SPAN elements of one key a block, so grid.x = keys x spans; a key of fewer
 * elements takes a smaller block. (Read along a channel, a channels-last input is read a
 * 2- or 4-byte element C elements apart: measured 18-22 us for SD's 2.6 MB sample.) */
#define FG_PRO_STATS_SPAN 4096
#define FG_PRO_ROWS_BLOCKS 64
#define FG_PRO_PIXEL_ROWS_ITERS 4
static bool pro_stats_rows(const fg_layer_ir *ir, const fg_plan *plan, fg_pass *ps)
{
    const fg_op *norm = &ir->pro[plan->pro_norm];
    const fg_shape *s = &norm->in;
    fg_stat_layout L;
    fg_norm_stat_layout(norm, &L);
    int vec = io_vec_elems(ir);
    int64_t channels = s->dim[1];
    if (ir->layout != FG_LAYOUT_CHANNELS_LAST || !(L.whole_channels || L.per_position) || channels % vec ||
        channels / vec > 256)
        return false;
    int units = (int)(channels / vec), slots = 256 / units;
    int64_t pixels = 1;
    for (int d = 2; d < s->rank; d++)
        pixels *= s->dim[d];
    /* a key a pixel (a statistic over each pixel's channels): no key is shared by two blocks,
     * so as many blocks as the pixels make, FG_PRO_PIXEL_ROWS_ITERS pixels a thread (their loads
     * in flight together), where one block a pixel and one element a thread ran ~100k tiny
     * blocks at ConvNeXt's N32 (templates/prologue.lua, render_pixel_rows) */
    int64_t iters = L.per_position ? FG_PRO_PIXEL_ROWS_ITERS : ceil_div(pixels, (int64_t)slots * FG_PRO_ROWS_BLOCKS);
    ps->launch.block = units * slots;
    ps->launch.row_vec = vec;
    ps->launch.row_pixels = (int)(iters * slots);
    ps->launch.elems_per_thread = (int)iters;
    ps->launch.grid_x = ceil_div(pixels, iters * slots);
    return true;
}

/* The wgmma input pack. Through the transposing tile: 32 pixels a block, every channel (or
 * pack_xb of them a block along y), through shared memory (coalesced both ways). By pixel rows
 * (pack_vec): as the statistics pass by rows, thread t keeps one vector of channels,
 * (t % units) * pack_vec.., of every (block / units)-th pixel, so whatever the prologue reads
 * per channel (a norm's statistics, its affine parameters) is loaded once a thread, not once
 * an element; FG_PACK_ROWS_ITERS pixels a thread, so that small batches still fill the GPU
 * with blocks (there are no atomics to spare here). Measured (bench/NOTES.md v32): SD's
 * GroupNorm -> SiLU pack at 320 bf16 channels, batch 2, a thread a vector of 32 pixels x 40
 * vectors in turn: 10.7 us, L1-bound (95 % hits: a statistic and two parameters loaded per
 * element). */
#define FG_PACK_ROWS_ITERS 4
static void pack_input_launch(const fg_layer_ir *ir, const fg_wgmma_tiling *w, fg_pass *ps)
{
    int64_t ipix = fg_shape_sample_count(&ir->input) / ir->input.dim[1];
    ps->launch.per_sample = true;
    ps->launch.grid_y = ceil_div(w->xc, w->pack_xb); /* channel blocks */
    if (w->pack_vec) {
        int units = w->pack_xb / w->pack_vec, slots = units < 256 ? 256 / units : 1;
        ps->launch.block = units * slots;
        ps->launch.row_vec = w->pack_vec;
        ps->launch.elems_per_thread = FG_PACK_ROWS_ITERS;
        ps->launch.row_pixels = FG_PACK_ROWS_ITERS * slots;
        ps->launch.grid_x = ceil_div(ipix, ps->launch.row_pixels);
        return;
    }
    ps->launch.block = 256;
    ps->launch.grid_x = ceil_div(ipix, WGMMA_PACK_PIXELS);
}

static void pro_stats_launch(const fg_layer_ir *ir, const fg_plan *plan, fg_pass *ps)
{
    ps->launch.grid_y = 1;
    ps->launch.per_sample = true;
    if (pro_stats_rows(ir, plan, ps))
        return;
    const fg_accum *a = &plan->accums[plan->pro_accum];
    int64_t spans = ceil_div(a->count_per_sample, FG_PRO_STATS_SPAN);
    int block = 32;
    while (block < 256 && block < a->count_per_sample)
        block *= 2;
    ps->launch.block = block;
    ps->launch.elems_per_thread = (int)ceil_div(a->count_per_sample < FG_PRO_STATS_SPAN ? a->count_per_sample
                                                                                       : FG_PRO_STATS_SPAN,
                                                block);
    ps->launch.grid_x = a->keys_per_sample * spans;
}

/* ---- kernel arguments ---------------------------------------------------------------- */

/* Adds a kernel parameter once. A full table (FG_MAX_ARGS covers the worst case, so that
 * would be a planner bug) leaves n_args past FG_MAX_ARGS, which pass_args reports. */
static void add_arg(fg_pass *ps, fg_arg_kind kind, int index)
{
    if (ps->n_args > FG_MAX_ARGS)
        return;
    for (int i = 0; i < ps->n_args; i++)
        if (ps->args[i].kind == kind && ps->args[i].index == index)
            return;
    if (ps->n_args == FG_MAX_ARGS) {
        ps->n_args = FG_MAX_ARGS + 1;
        return;
    }
    ps->args[ps->n_args].kind = kind;
    ps->args[ps->n_args].index = index;
    ps->n_args++;
}

int fg_plan_conv_params(const fg_layer_ir *ir, const fg_plan *plan, int *bias)
{
    const fg_op *conv = &ir->ops[0];
    if (plan->fold.op >= 0) {
        *bias = plan->fold.folded_bias;
        return plan->fold.folded_weight;
    }
    *bias = conv->bias ? conv->bias_param : -1;
    return conv->weight_param;
}

static void prologue_args(const fg_layer_ir *ir, const fg_plan *plan, fg_pass *ps, int upto);

/* Everything op j reads when evaluated inline. */
static void op_args(const fg_layer_ir *ir, const fg_plan *plan, const planner *p, fg_pass *ps, int j)
{
    const fg_op *op = &ir->ops[j];
    int bias;
    if (j == plan->fold.op)
        return; /* folded into the conv's weights: the identity here */
    if (j == 0 && ps->conv.engine == FG_CONV_WGMMA) {
        /* the packed operands instead of the input and the weights */
        const fg_wgmma_tiling *w = &plan->wgmma;
        add_arg(ps, FG_ARG_BUFFER, w->packed_hi);
        if (w->packed_lo >= 0)
            add_arg(ps, FG_ARG_BUFFER, w->packed_lo);
        add_arg(ps, FG_ARG_BUFFER, w->packed_w);
        if (w->a_tma == 2) { /* the maps over the packed input parts (after the buffers) */
            add_arg(ps, FG_ARG_TMAP, w->packed_hi);
            if (w->packed_lo >= 0)
                add_arg(ps, FG_ARG_TMAP, w->packed_lo);
        }
        if (w->split_k > 1) {
            add_arg(ps, FG_ARG_BUFFER, w->split_partials);
            add_arg(ps, FG_ARG_BUFFER, w->split_counters);
        }
        fg_plan_conv_params(ir, plan, &bias);
        if (bias >= 0)
            add_arg(ps, FG_ARG_PARAM, bias);
    } else if (j == 0) {
        add_arg(ps, FG_ARG_INPUT, 0);
        add_arg(ps, FG_ARG_PARAM, fg_plan_conv_params(ir, plan, &bias));
        if (bias >= 0)
            add_arg(ps, FG_ARG_PARAM, bias);
        prologue_args(ir, plan, ps, ir->n_pro); /* applied where the input is staged */
    }
    if (op->operand == FG_OPERAND_PARAM)
        add_arg(ps, FG_ARG_PARAM, op->operand_param);
    if (j == ps->chan_sums) /* reads its per-channel sums, whatever its extent (channel_sums_reduction) */
        add_arg(ps, FG_ARG_ACCUM, plan->op_accum[j]);
    if (op->operand == FG_OPERAND_VALUE && op->operand_value < ps->first - (ps->source_buffer >= 0))
        add_arg(ps, FG_ARG_BUFFER, p->buffer_of[op->operand_value]);
    if (fg_op_kind_class(op->kind) == FG_CLASS_NORM) {
        if (op->affine) {
            add_arg(ps, FG_ARG_PARAM, op->weight_param);
            add_arg(ps, FG_ARG_PARAM, op->bias_param);
        }
        if (op->mean_param >= 0) { /* running statistics */
            add_arg(ps, FG_ARG_PARAM, op->mean_param);
            add_arg(ps, FG_ARG_PARAM, op->var_param);
        }
    }
    if ((needs_stats(op) || is_big_reduce(op)) && plan->op_accum[j] >= 0) {
        int a = plan->op_accum[j];
        if (plan->accums[a].finalized >= 0) {
            add_arg(ps, FG_ARG_STATS, a);
        } else {
            add_arg(ps, FG_ARG_ACCUM, a);
            if (plan->op_max_accum[j] >= 0)
                add_arg(ps, FG_ARG_ACCUM, plan->op_max_accum[j]);
        }
    }
}

static void pass_args(const fg_layer_ir *ir, fg_plan *plan, const planner *p, fg_pass *ps)
{
    ps->n_args = 0;
    if (ps->kind == FG_PASS_PRO_STATS) {
        add_arg(ps, FG_ARG_INPUT, 0);
        prologue_args(ir, plan, ps, plan->pro_norm); /* the ops before the norm */
        add_arg(ps, FG_ARG_ACCUM, plan->pro_accum);
        add_arg(ps, FG_ARG_BATCH, 0);
        add_arg(ps, FG_ARG_BATCH_BASE, 0);
        return;
    }
    if (ps->kind == FG_PASS_PACK_INPUT) {
        add_arg(ps, FG_ARG_INPUT, 0);
        prologue_args(ir, plan, ps, ir->n_pro); /* the packed input is the normalized one */
        add_arg(ps, FG_ARG_BUFFER, p->plan->wgmma.packed_hi);
        if (p->plan->wgmma.packed_lo >= 0)
            add_arg(ps, FG_ARG_BUFFER, p->plan->wgmma.packed_lo);
        add_arg(ps, FG_ARG_BATCH, 0);
        add_arg(ps, FG_ARG_BATCH_BASE, 0);
        return;
    }
    if (ps->kind == FG_PASS_PACK_WEIGHTS) {
        int bias;
        add_arg(ps, FG_ARG_PARAM, fg_plan_conv_params(ir, plan, &bias));
        add_arg(ps, FG_ARG_BUFFER, p->plan->wgmma.packed_w);
        add_arg(ps, FG_ARG_BATCH, 0);
        add_arg(ps, FG_ARG_BATCH_BASE, 0);
        return;
    }
    if (ps->kind == FG_PASS_FINALIZE) {
        add_arg(ps, FG_ARG_ACCUM, ps->finalize_accum);
        if (plan->accums[ps->finalize_accum].max_accum >= 0)
            add_arg(ps, FG_ARG_ACCUM, plan->accums[ps->finalize_accum].max_accum);
        add_arg(ps, FG_ARG_STATS, ps->finalize_accum);
        add_arg(ps, FG_ARG_BATCH, 0);
        add_arg(ps, FG_ARG_BATCH_BASE, 0);
        return;
    }
    if (ps->source_buffer >= 0)
        add_arg(ps, FG_ARG_BUFFER, ps->source_buffer);
    for (int j = ps->first; j <= ps->last; j++)
        op_args(ir, plan, p, ps, j);
    if (ps->store_output)
        add_arg(ps, FG_ARG_OUTPUT, 0);
    if (ps->store_buffer >= 0)
        add_arg(ps, FG_ARG_BUFFER, ps->store_buffer);
    for (int i = 0; i < ps->n_extra_stores; i++)
        add_arg(ps, FG_ARG_BUFFER, ps->extra_stores[i]);
    for (int i = 0; i < ps->n_feeds; i++) {
        add_arg(ps, FG_ARG_ACCUM, ps->feeds[i]);
        int m = plan->accums[ps->feeds[i]].max_accum;
        if (m >= 0)
            add_arg(ps, FG_ARG_ACCUM, m);
    }
    add_arg(ps, FG_ARG_BATCH, 0);
    add_arg(ps, FG_ARG_BATCH_BASE, 0);
}

/* Values some later op reads as an operand, outside the chain that computes them. */
static bool value_needed_after(const fg_layer_ir *ir, int v, int after)
{
    for (int j = after + 1; j < ir->n_ops; j++)
        if (ir->ops[j].operand == FG_OPERAND_VALUE && ir->ops[j].operand_value == v)
            return true;
    return false;
}

/* ---- strategy ------------------------------------------------------------------------- */

/* The conv pass can be run twice (recompute) instead of writing and re-reading its output
 * (materialize) when the first cut after it is a norm. */
/* "auto" plans recompute first and keeps it only when it pays (fg_plan_layer): when the
 * second conv pass runs through to the layer's output with no intermediate tensor, and that
 * output is at most a quarter of the value before the norm (or the case below). Measured on
 * the H200 (bench/NOTES.md, v4): recompute won only there (KB23: 0.61 vs 1.01 ms); wherever the second pass
 * still had to store a tensor (a max over channels, a pool after the norm) or the output
 * is as large as the conv's, running the conv twice cost more than the tensor it saved
 * (KB79 0.33 vs 0.21 ms, KB21 2.46 vs 2.31 ms). */
static bool recompute_pays(const fg_layer_ir *ir, const fg_plan *plan, int cut)
{
    if (plan->n_buffers > 0)
        return false;
    int64_t out = fg_shape_sample_count(&ir->ops[ir->n_ops - 1].out);
    if (4 * out <= fg_shape_sample_count(&ir->ops[cut].out))
        return true;
    /* And a conv on the CUDA-core engine's channels-last mapping whose norm is over each
     * pixel's channels (ConvNeXt's depthwise 7x7 -> LayerNorm): there materialize stores the
     * value as an NCHW fp32 buffer from a thread per channel and runs a map pass over it, the
     * second conv pass writes the output along the channels. Measured (bench/NOTES.md v30):
     * the bf16 ConvNeXt block at batch 32, recompute -16 %. */
    const fg_op *norm = &ir->ops[cut + 1];
    if (fg_op_kind_class(norm->kind) != FG_CLASS_NORM || fg_op_def_of(norm->kind)->norm.channels != FG_NORM_ACROSS)
        return false;
    for (int i = 0; i < plan->n_passes; i++)
        if (plan->passes[i].kind == FG_PASS_CONV && plan->passes[i].conv.engine == FG_CONV_FMA &&
            plan->passes[i].conv.chan_lanes > 0)
            return true;
    return false;
}

/* ---- the resident strategy ------------------------------------------------------------ */

enum {
    RESIDENT_KEEP_BUDGET = 160 * 1024, /* bytes of kept conv output per CTA */
    RESIDENT_SMEM_LIMIT = 227 * 1024,  /* opt-in shared memory per block on sm_90 */
};

/* Whether ops first..last can be evaluated at one position from the kept value `kept` with
 * the norm's statistics known: elementwise ops (and shape ops: no code), then at most one
 * reduction over the channels (dim 1 only), then elementwise ops again. Returns the
 * reduction's index (or -1) through *reduce_op, false when something else appears. */
static bool resident_tail_ok(const fg_layer_ir *ir, int norm, int kept, int *reduce_op)
{
    *reduce_op = -1;
    for (int j = norm + 1; j < ir->n_ops; j++) {
        const fg_op *op = &ir->ops[j];
        fg_op_class c = fg_op_kind_class(op->kind);
        if (op->operand == FG_OPERAND_VALUE) {
            int v = op->operand_value;
            bool same_positions = *reduce_op < 0 || v > *reduce_op;
            if (!(v == kept || v >= norm) || !same_positions)
                return false;
        }
        if (c == FG_CLASS_UNARY || c == FG_CLASS_BINARY || c == FG_CLASS_SHAPE)
            continue;
        if (c == FG_CLASS_REDUCE && op->reduce_mask == (1u << 1) && *reduce_op < 0 &&
            op->in.dim[1] <= FG_INLINE_REDUCE_MAX) {
            *reduce_op = j;
            continue;
        }
        return false;
    }
    return true;
}

/* Plans the whole layer as one resident pass when the shape allows it: the conv and the ops
 * before the first norm run tile by tile; their result stays in the shared memory of a
 * cluster of CTAs that together own every position of a block of channels (whole norm
 * groups); the norm's statistics are reduced over the cluster (distributed shared memory);
 * the rest of the chain is applied in place and the output is written once. Nothing but the
 * input and the output touches device memory. */
static bool plan_resident(planner *p, int sm)
{
    const fg_layer_ir *ir = p->ir;
    fg_plan *plan = p->plan;
    const fg_op *conv = &ir->ops[0];
    if (ir->precision != FG_PRECISION_FP32)
        return false;
    int t = 0;
    while (t + 1 < ir->n_ops && inline_ok(p, 0, t + 1, true))
        t++;
    int k = t + 1;
    if (k >= ir->n_ops)
        return false;
    const fg_op *norm = &ir->ops[k];
    if (fg_op_kind_class(norm->kind) != FG_CLASS_NORM || !needs_stats(norm))
        return false;
    fg_stat_layout sl;
    fg_norm_stat_layout(norm, &sl);
    if (sl.over_batch || !sl.whole_channels)
        return false;
    int reduce_op;
    if (!resident_tail_ok(ir, k, t, &reduce_op))
        return false;
    /* values of the conv chain other than the kept one cannot be read after the norm */
    for (int v = 0; v < t; v++)
        if (value_needed_after(ir, v, t))
            return false;
    conv_geometry g;
    geometry(conv, &g);
    int64_t channels = conv->out_channels;
    /* channel block: all channels when a channel reduction follows, else whole statistic
     * groups, at least 8 channels when that divides evenly (a full register tile) */
    int64_t block = channels;
    if (reduce_op < 0) {
        block = sl.channel_group;
        while (block < 8 && channels % (block * 2) == 0)
            block *= 2;
    }
    if (block > g.cout_g || g.cout_g % block != 0)
        return false; /* a cluster's channels must come from one conv group */
    int64_t rows = g.out[0] * g.out[1];
    int cluster;
    for (;;) {
        cluster = 1;
        while (cluster <= 8 && ceil_div(rows, cluster) * g.out[2] * block * 4 > RESIDENT_KEEP_BUDGET)
            cluster *= 2;
        /* too big for 8 CTAs: fewer channels per cluster, down to one statistic group */
        if (cluster <= 8 || reduce_op >= 0 || block / 2 < sl.channel_group || (block / 2) % sl.channel_group)
            break;
        block /= 2;
    }
    if (cluster > 8 || (cluster > 1 && sm < 90) || rows < cluster)
        return false;

    fg_pass *ps = new_pass(p, FG_PASS_RESIDENT);
    if (!ps)
        return false;
    plan->strategy = FG_STRATEGY_RESIDENT;
    ps->first = 0;
    ps->last = ps->domain = ir->n_ops - 1;
    ps->store_output = true;
    ps->res.cluster = cluster;
    ps->res.channel_block = (int)block;
    ps->res.channel_group = (int)sl.channel_group;
    ps->res.norm_op = k;
    ps->res.reduce_op = reduce_op;
    ps->res.rows = rows;
    ps->res.slice = round_up(ceil_div(rows, cluster) * g.out[2], 4); /* keeps what follows 16-byte aligned */
    for (int j = 0; j < ir->n_ops; j++)
        p->ready[j] = true;

    /* the conv inside: one output depth at a time, tiles of rows x columns */
    fg_conv_tiling *ct = &ps->conv;
    ct->thread_co = block >= 8 ? 8 : round_up(block, 4);
    ct->thread_h = g.out[1] >= 2 ? 2 : 1;
    ct->thread_w = g.out[2] >= 16 ? (ct->thread_co <= 4 ? 8 : 4) : g.out[2] >= 2 ? 2 : 1;
    while ((int64_t)ct->thread_co * ct->thread_h * ct->thread_w * g.taps > 900 && ct->thread_h * ct->thread_w > 2) {
        if (ct->thread_h > 1)
            ct->thread_h = 1;
        else
            ct->thread_w /= 2;
    }
    int tx = (int)(ceil_div(g.out[2], ct->thread_w) < 32 ? ceil_div(g.out[2], ct->thread_w) : 32);
    int ty = (int)(ceil_div(g.out[1], ct->thread_h) < 256 / tx ? ceil_div(g.out[1], ct->thread_h) : 256 / tx);
    ct->threads[0] = 1;
    ct->threads[1] = ty;
    ct->threads[2] = tx;
    ct->tile[0] = 1;
    ct->tile[1] = ty * ct->thread_h;
    ct->tile[2] = tx * ct->thread_w;
    ct->in_tile[0] = (g.k[0] - 1) * g.d[0] + 1;
    ct->in_tile[1] = (ct->tile[1] - 1) * g.s[1] + (g.k[1] - 1) * g.d[1] + 1;
    ct->in_tile[2] = round_up((int64_t)(ct->tile[2] - 1) * g.s[2] + (int64_t)(g.k[2] - 1) * g.d[2] + 1, 4);
    ct->co_tile = (int)round_up(block, ct->thread_co);
    int64_t kept = block * ps->res.slice * 4;
    ct->ci_chunk = (int)g.cin_g;
    while (ct->ci_chunk > 1 && kept + conv_smem(&g, ct, ct->ci_chunk) > RESIDENT_SMEM_LIMIT - 4096)
        ct->ci_chunk = (ct->ci_chunk + 1) / 2;
    if (kept + conv_smem(&g, ct, ct->ci_chunk) > RESIDENT_SMEM_LIMIT - 4096) {
        plan->n_passes--;
        plan->strategy = FG_STRATEGY_MATERIALIZE;
        return false;
    }
    ct->ci_unroll = 1;
    ct->ch_pitch = ct->in_tile[0] * ct->in_tile[1] * ct->in_tile[2];
    ps->launch.block = tx * ty;
    ps->launch.grid_x = cluster;
    ps->launch.grid_y = channels / block;
    ps->launch.per_sample = true;
    ps->launch.smem_bytes = (int)fma_layout(&g, ct, ct->ci_chunk, kept / 4, &ct->smem);
    return true;
}

void fg_plan_options_for_arch(fg_plan_options *opts, const char *arch)
{
    fg_plan_options_init(opts, 0);
    fg_plan_options_set_arch(opts, arch);
}

void fg_plan_options_set_arch(fg_plan_options *opts, const char *arch)
{
    int sm = fg_arch_sm(arch);
    opts->sm = sm ? sm : 90;
    opts->wgmma = fg_arch_has_wgmma(arch);
}

void fg_plan_options_init(fg_plan_options *opts, int sm)
{
    memset(opts, 0, sizeof *opts);
    opts->force_strategy = -1;
    opts->default_strategy = -1;
    opts->sm = sm ? sm : 90;
}

/* A fresh planner state over an empty plan. */
static void start(planner *p, const fg_layer_ir *ir, const fg_plan_options *opts, fg_plan *plan, fg_error *err)
{
    memset(plan, 0, sizeof *plan);
    memset(p, 0, sizeof *p);
    p->ir = ir;
    p->opts = opts;
    p->plan = plan;
    p->err = err;
    p->auto_cut = -1;
    p->chan_sums = -1;
    p->io_value = fg_io_buffer_value(ir, wanted_strategy(ir, opts));
    for (int k = 0; k < FG_MAX_OPS; k++) {
        plan->op_accum[k] = plan->op_max_accum[k] = -1;
        p->buffer_of[k] = -1;
    }
    for (int k = 0; k < ir->n_ops; k++)
        plan->inline_loop[k] = is_window(&ir->ops[k]);
    plan->pro_norm = plan->pro_accum = plan->export_accum = -1;
    fg_bn_fold_find(ir, &plan->fold);
    /* the fast forms (GELU's erf by fg_gelu_fast) at precision tf32 unless FUSEGEN_FAST_GELU=1,
     * in a layer with an op that has one (the registry's fg_snippet.fast). Measured on an H100
     * (bench/NOTES.md v49, against erff in the same run): ConvNeXt's bf16 blocks -7.2 % (96
     * channels), -4.1 % (384), -1.6 % (768) at batch 32 */
    bool fast = false;
    for (int k = 0; k < ir->n_ops; k++)
        fast = fast || fg_op_has_fast_step(&ir->ops[k]);
    for (int k = 0; k < ir->n_pro; k++)
        fast = fast || fg_op_has_fast_step(&ir->pro[k]);
    plan->fast_gelu = opts->fast_gelu != 1 && ir->precision == FG_PRECISION_TF32 && fast;
}

/* An accumulator of norm op's statistics (the registry's r: one accumulator), no pass yet. */
static void norm_accum(fg_accum *a, const fg_op *op, const fg_reduce_def *r)
{
    memset(a, 0, sizeof *a);
    a->kind = r->accums[0];
    a->max_accum = -1;
    a->finalized = -1;
    fg_stat_layout L;
    fg_norm_stat_layout(op, &L);
    a->keys_per_sample = L.keys_per_sample;
    a->count_per_sample = L.count_per_sample;
    a->over_batch = L.over_batch;
}

/* Whether the wgmma input pack computes the prologue norm's statistics itself
 * (fg_plan.pack_pixel_stats): a norm over each position's channels (mean and variance), first
 * in the prologue (the pack reads the input as the statistics are of it), statistics not
 * handed from another layer, and a pack by pixel rows whose blocks hold every channel of their
 * pixels (one channel block, no padding channels). Then a pixel's statistics are a few
 * threads' registers added up in the block, where a statistics pass would read the input once
 * more and a finalize pass follow it (ConvNeXt's LayerNorm before its 1x1 conv: bench/NOTES.md
 * v37). */
static bool pack_pixel_statistics(const planner *p)
{
    const fg_layer_ir *ir = p->ir;
    const fg_plan *plan = p->plan;
    const fg_wgmma_tiling *w = &plan->wgmma;
    return p->use_wgmma && plan->pro_norm == 0 && pro_norm_per_pixel(ir) && w->pack_vec != 0 && w->pack_xb == w->xc &&
           w->xc == ir->input.dim[1];
}

/* The prologue's statistics: when one of its norms needs statistics of the input (shape
 * inference allows one), a pass over the input gathers them (the registry's accumulators,
 * the norms' fp64 moments) and prologue_finalize below decides who turns them into mean and
 * 1/sqrt(var + eps) per key -- unless the layer writing the input gathered them, or the
 * input pack computes them itself (pack_pixel_statistics). */
static int prologue_passes(planner *p)
{
    const fg_layer_ir *ir = p->ir;
    fg_plan *plan = p->plan;
    for (int j = 0; j < ir->n_pro; j++)
        if (needs_stats(&ir->pro[j]))
            plan->pro_norm = j;
    if (plan->pro_norm < 0)
        return 0;
    if ((plan->pack_pixel_stats = pack_pixel_statistics(p)))
        return 0;
    const fg_op *op = &ir->pro[plan->pro_norm];
    const fg_reduce_def *r = fg_op_stats(op);
    if (plan->n_accums == FG_MAX_ACCUMS || r->n_accums != 1)
        return fg_fail(p->err, "%s:%d: %s: the prologue's statistics need one accumulator", ir->file, op->line,
                       fg_op_written_name(op));
    fg_accum *a = &plan->accums[plan->n_accums];
    norm_accum(a, op, r);
    a->op = plan->pro_norm;
    a->value = -1;
    a->prologue = true;
    plan->pro_accum = plan->n_accums++;
    if (ir->pro_stats_given) {
        /* the layer writing the input gathered them (gen/block.c, fg_block_link_statistics) */
        if (plan->pro_norm != 0)
            return fg_fail(p->err, "%s:%d: %s: statistics handed from another layer are of the input itself, but "
                                   "prologue op %d is not the first (internal error)",
                           ir->file, op->line, fg_op_written_name(op), plan->pro_norm);
        a->link = FG_LINK_GIVEN;
        return 0;
    }
    fg_pass *ps = new_pass(p, FG_PASS_PRO_STATS);
    if (!ps || feed(p, ps, plan->pro_accum))
        return -1;
    ps->first = 1;
    ps->last = 0; /* no op of the chain */
    return 0;
}

/* The statistics of the output that the next layer of a block reads (fg_layer_ir.exports_stats):
 * one accumulator over the last value, fed by the pass that stores it (chain_passes), so that
 * the reader runs no statistics pass. For a half output the values fed are the stored ones
 * (rounded to the dtype and widened: templates/feed.lua), the ones the reader normalizes, not
 * the fp32 values before the rounding: the two differ where a group's spread is below the
 * dtype's step (bench/NOTES.md v37). */
static int export_accum(planner *p)
{
    const fg_layer_ir *ir = p->ir;
    fg_plan *plan = p->plan;
    if (!ir->exports_stats)
        return 0;
    const fg_op *op = &ir->export_norm;
    const fg_reduce_def *r = fg_op_stats(op);
    if (plan->n_accums == FG_MAX_ACCUMS || !r || r->n_accums != 1 ||
        !fg_shape_same(&op->in, &ir->ops[ir->n_ops - 1].out))
        return fg_fail(p->err, "%s:%d: %s: the statistics the next layer reads cannot be gathered here (internal error)",
                       ir->file, op->line, fg_op_written_name(op));
    fg_accum *a = &plan->accums[plan->n_accums];
    norm_accum(a, op, r);
    a->op = -1;
    a->value = ir->n_ops - 1;
    a->link = FG_LINK_EXPORTED;
    plan->export_accum = plan->n_accums++;
    return 0;
}

/* Where the prologue's statistics are finalized: by the wgmma input pack by pixel rows when it
 * is their only reader (the wgmma conv reads the packed, normalized input) -- each of its
 * blocks finalizes its sample's keys into shared memory, a finalize pass's work repeated a
 * block, which costs less than the pass's launch and its gap in the graph (bench/NOTES.md
 * v34) -- else by a finalize pass before the passes that stage the input. */
#define FG_PACK_FINALIZE_KEYS 2048 /* fg_stat in the pack's shared memory: 16 KB */
static int prologue_finalize(planner *p)
{
    fg_plan *plan = p->plan;
    if (plan->pro_accum < 0)
        return 0;
    const fg_accum *a = &plan->accums[plan->pro_accum];
    plan->pack_finalizes = p->use_wgmma && plan->wgmma.pack_vec > 0 && a->max_accum < 0 &&
                           a->keys_per_sample <= FG_PACK_FINALIZE_KEYS;
    return plan->pack_finalizes ? 0 : add_finalize(p, plan->pro_accum);
}

/* What a pass that stages the input reads for the prologue: each op's operand and
 * parameters, the finalized statistics of its norm. */
static void prologue_args(const fg_layer_ir *ir, const fg_plan *plan, fg_pass *ps, int upto)
{
    for (int j = 0; j < upto; j++) {
        const fg_op *op = &ir->pro[j];
        if (op->operand == FG_OPERAND_PARAM)
            add_arg(ps, FG_ARG_PARAM, op->operand_param);
        if (fg_op_kind_class(op->kind) != FG_CLASS_NORM)
            continue;
        if (op->affine) {
            add_arg(ps, FG_ARG_PARAM, op->weight_param);
            add_arg(ps, FG_ARG_PARAM, op->bias_param);
        }
        if (op->mean_param >= 0) {
            add_arg(ps, FG_ARG_PARAM, op->mean_param);
            add_arg(ps, FG_ARG_PARAM, op->var_param);
        }
        if (j == plan->pro_norm && plan->pro_accum >= 0) /* the sums where the pass finalizes them itself */
            add_arg(ps, plan->pack_finalizes ? FG_ARG_ACCUM : FG_ARG_STATS, plan->pro_accum);
    }
}

/* The last op of a chain that starts at op `first` in a pass that can compute every value
 * from `lowest` on. */
static int chain_end(planner *p, int lowest, int first, bool conv_pass)
{
    int last_op = p->ir->n_ops - 1, u = first;
    while (u < last_op && inline_ok(p, lowest, u + 1, conv_pass))
        u++;
    return u;
}

/* Whether precision "tf32" sends the conv to cuDNN: off the wgmma engine and for groups not
 * narrow, with a float32 input (cuDNN would read a half input as floats: with dtype bf16 or
 * fp16 the generated conv, exact, runs instead, and `fusegen plan` says so), and no prologue
 * (cuDNN reads the input as it is; the generated conv applies the prologue as it stages). */
static bool cudnn_conv(const fg_layer_ir *ir, const fg_plan *plan, bool use_wgmma)
{
    /* a cuDNN conv that writes the output itself cannot gather statistics of it */
    return ir->precision == FG_PRECISION_TF32 && !use_wgmma && !plan->tf32_exact && ir->dtype == FG_DTYPE_FP32 &&
           ir->layout == FG_LAYOUT_NCHW && ir->n_pro == 0 && !(ir->exports_stats && ir->n_ops == 1);
}

/* A reduction over the channels fused into the wgmma conv pass's epilogue. A wgmma tile is
 * BM output pixels x BN channels, and in the accumulator fragment (m64nNk8) each pixel's
 * channels lie in one thread's registers and the 4 lanes of its quad; the two consumer
 * warpgroups hold different pixels. When one tile spans every output channel of the layer
 * (groups 1, nblk 1: at most 128 channels), the epilogue can reduce over them in registers
 * and a shuffle within the quad, and write the reduced value: the value before the reduction
 * (a tensor as large as the conv's output) is neither stored nor read back by a map pass.
 * The chain after the conv (ops 1..t, what the conv pass evaluates inline) must be
 * elementwise ops (no statistic, no shape op) followed by op t+1, a max, min, sum, mean or
 * logsumexp over exactly dim 1, and then elementwise ops only, up to the layer's output,
 * reading no value from before the reduction. Returns the reduction's op, or -1 (the plan
 * stays as it was). */
static int wgmma_channel_reduction(const planner *p, int t)
{
    const fg_layer_ir *ir = p->ir;
    const fg_op *conv = &ir->ops[0];
    /* (its epilogue feeds no statistics: a layer exporting them keeps the reduction's own pass) */
    if (!p->use_wgmma || conv->groups != 1 || p->plan->wgmma.nblk != 1 || t + 1 >= ir->n_ops || ir->exports_stats)
        return -1;
    const int r = t + 1;
    const fg_op *red = &ir->ops[r];
    switch (red->kind) {
    case FG_OP_REDUCE_MAX:
    case FG_OP_REDUCE_MIN:
    case FG_OP_REDUCE_SUM:
    case FG_OP_REDUCE_MEAN:
    case FG_OP_LOGSUMEXP:
        break;
    default:
        return -1;
    }
    if (red->reduce_mask != (1u << 1) || red->in.dim[1] != conv->out_channels || red->in.rank != conv->out.rank)
        return -1;
    for (int j = 1; j < ir->n_ops; j++) {
        if (j == r)
            continue;
        const fg_op *op = &ir->ops[j];
        fg_op_class c = fg_op_kind_class(op->kind);
        if (j == p->plan->fold.op)
            continue; /* folded into the conv: the identity */
        if (c != FG_CLASS_UNARY && c != FG_CLASS_BINARY)
            return -1;
        /* after the reduction only the reduced value's positions exist */
        if (j > r && op->operand == FG_OPERAND_VALUE && op->operand_value < r)
            return -1;
    }
    return r;
}

/* ---- the channel-sums rule ------------------------------------------------------------ */

/* Whether op `op` (between a norm and the reduction after it) is affine per (sample, channel):
 * x -> a x + b with a and b depending on the sample and channel alone. add, sub, mul and div
 * (the value is always the left operand, so sub and div stay affine) by a scalar or by a
 * parameter that varies along the channels only (every other dim of its broadcast 1). */
static bool affine_per_channel(const fg_layer_ir *ir, const fg_op *op)
{
    switch (op->kind) {
    case FG_OP_ADD:
    case FG_OP_SUB:
    case FG_OP_MUL:
    case FG_OP_DIV:
        break;
    default:
        return false;
    }
    if (op->operand == FG_OPERAND_SCALAR)
        return true;
    if (op->operand != FG_OPERAND_PARAM)
        return false;
    const fg_param *pm = &ir->params[op->operand_param];
    for (int pd = 0; pd < pm->rank; pd++) { /* right-aligned against the value, as PyTorch broadcasts */
        int d = op->in.rank - pm->rank + pd;
        if (pm->dim[pd] != 1 && d != 1)
            return false;
    }
    return true;
}

/* The channel-sums rule: a sum or mean over every spatial dim of a normalized value needs no
 * element of it. For a norm with statistics over whole channels (group_norm, instance_norm,
 * batch_norm with batch statistics: each channel's elements share one mean mu and deviation
 * sigma) followed by ops f_c affine per (sample, channel), and m_c = mean_s y_{c,s} the mean of
 * the norm's input over a channel's positions s,
 *   mean_s f_c((y_{c,s} - mu) / sigma * gamma_c + beta_c) = f_c((m_c - mu) / sigma * gamma_c + beta_c)
 * (an affine map commutes with a mean), so the reduction is a sum over channels of a per-channel
 * fp64 value: the mean over the reduced channels (1 when dim 1 is kept) or, for a sum, that
 * times the positions of a channel. mu and sigma come from the same sums: the conv pass feeds
 * fp64 moments per (sample, channel) of its value instead of per statistic of the norm; no
 * second conv pass (recompute) and no stored conv output (materialize). Matches, after the conv pass's chain (ops 1..t): op t+1 such a norm; then ops
 * affine per channel (affine_per_channel); then a sum, mean or global_avg_pool whose reduced
 * dims hold every spatial dim (dim 1 reduced or not) over a value of the norm's shape; then only
 * elementwise or shape ops, reading no value from before the reduction. Anything else (an
 * activation or clamp before the reduction, a max, layer_norm's statistics or affine that vary
 * along the positions) plans as before. Returns the reduction's op, or -1. */
static int channel_sums_reduction(const planner *p, int t)
{
    const fg_layer_ir *ir = p->ir;
    const int k = t + 1;
    if (k >= ir->n_ops)
        return -1;
    const fg_op *norm = &ir->ops[k];
    if (fg_op_kind_class(norm->kind) != FG_CLASS_NORM || !needs_stats(norm) || k == p->plan->fold.op)
        return -1;
    fg_norm_channels channels = fg_op_def_of(norm->kind)->norm.channels;
    if (channels != FG_NORM_GROUPS && channels != FG_NORM_EACH)
        return -1; /* layer norms: per position, or affine per element */
    const fg_reduce_def *st = fg_op_stats(norm);
    if (st->n_accums != 1 || st->accums[0] != FG_ACCUM_MOMENTS)
        return -1; /* the map pass computes mean and variance from fp64 moments */
    fg_stat_layout L;
    fg_norm_stat_layout(norm, &L);
    for (int d = 2; d < norm->in.rank; d++)
        if (!(L.mask & (1u << d)))
            return -1;
    int r = k + 1;
    while (r < ir->n_ops && affine_per_channel(ir, &ir->ops[r]))
        r++;
    if (r >= ir->n_ops)
        return -1;
    const fg_op *red = &ir->ops[r];
    if (red->kind != FG_OP_REDUCE_SUM && red->kind != FG_OP_REDUCE_MEAN && red->kind != FG_OP_GLOBAL_AVG_POOL)
        return -1;
    if (red->in.rank != norm->out.rank)
        return -1;
    for (int d = 1; d < red->in.rank; d++)
        if (red->in.dim[d] != norm->out.dim[d])
            return -1;
    for (int d = 2; d < red->in.rank; d++)
        if (!(red->reduce_mask & (1u << d)))
            return -1;
    for (int j = r + 1; j < ir->n_ops; j++) {
        const fg_op *op = &ir->ops[j];
        fg_op_class c = fg_op_kind_class(op->kind);
        if (c != FG_CLASS_UNARY && c != FG_CLASS_BINARY && c != FG_CLASS_SHAPE)
            return -1;
        /* only the reduced value's positions exist after it */
        if (op->operand == FG_OPERAND_VALUE && op->operand_value < r)
            return -1;
    }
    return r;
}

/* The channel-sums strategy's passes after the conv pass `ps`, whose chain stopped at the norm
 * k: it feeds one accumulator, the fp64 moments (sum and sum of squares) per (sample, channel)
 * of value k - 1 -- the reduction reads the sums, and the norm's statistics (a group of channels,
 * or a channel over the batch) are assembled from both, so the conv pass keeps as many partials
 * as a pass feeding the norm alone; then one map pass over the layer's output runs ops k..last,
 * the norm and the affine ops once per channel on the channel's mean, in fp64
 * (templates/chan_sums.lua). Returns that pass. */
static fg_pass *channel_sums_passes(planner *p, fg_pass *ps, int k)
{
    const fg_layer_ir *ir = p->ir;
    fg_plan *plan = p->plan;
    const int r = p->chan_sums;
    const fg_shape *in = &ir->ops[r].in;
    int a = add_accum(p, FG_ACCUM_MOMENTS, k, -1);
    if (a < 0 || feed(p, ps, a))
        return NULL;
    fg_accum *acc = &plan->accums[a];
    acc->per_channel = true; /* finalized stays -1: the map pass reads the fp64 sums */
    acc->over_batch = false;
    acc->keys_per_sample = in->dim[1];
    acc->count_per_sample = fg_shape_sample_count(in) / in->dim[1];
    plan->op_accum[k] = plan->op_accum[r] = a;
    p->ready[k] = p->ready[r] = true;
    fg_pass *q = new_pass(p, FG_PASS_MAP);
    if (!q)
        return NULL;
    q->first = k;
    q->last = q->domain = ir->n_ops - 1;
    q->chan_sums = r;
    return q;
}

/* The first pass: cuDNN's conv (precision "tf32") and a map pass for the ops after it, or
 * the conv pass with every op it can fuse. Sets the plan's strategy when a norm follows the
 * conv's chain: recompute unless `wanted` says materialize or a later op reads a value of
 * the chain back. Returns the pass the chain continues from. */
static fg_pass *first_passes(planner *p, int wanted)
{
    const fg_layer_ir *ir = p->ir;
    fg_plan *plan = p->plan;
    int last_op = ir->n_ops - 1;
    plan->strategy = FG_STRATEGY_MATERIALIZE;
    /* the engine first: where the prologue's statistics are gathered depends on its input
     * pack (prologue_passes); the engine's choice reads no pass nor accumulator */
    p->use_wgmma = choose_wgmma(p);
    if (!p->use_wgmma) /* choose_wgmma may have tiled it before choosing another engine */
        memset(&plan->wgmma, 0, sizeof plan->wgmma);
    if (p->use_wgmma) {
        wgmma_split(p->opts, &plan->wgmma, wgmma_sample_tiles(&plan->wgmma, ir->ops[0].groups));
        wgmma_multicast(p->opts, &plan->wgmma, (int)ir->ops[0].groups);
        wgmma_a_tma(p->opts, ir, &plan->wgmma);
        wgmma_ping_pong(&plan->wgmma);
    }
    if (prologue_passes(p) || export_accum(p))
        return NULL;
    if (prologue_finalize(p))
        return NULL;
    if (p->use_wgmma && add_pack_passes(p))
        return NULL;
    /* precision "tf32" permits TF32 products; narrow groups get the exact conv pass, which
     * is faster there than any TF32 path */
    plan->tf32_exact = tf32_stays_exact(p);
    if (cudnn_conv(ir, plan, p->use_wgmma)) {
        /* cuDNN computes value 0 (TF32 tensor cores allowed); the ops after it start from
         * its buffer */
        fg_pass *ps = new_pass(p, FG_PASS_CUDNN);
        if (!ps)
            return NULL;
        ps->first = ps->last = ps->domain = 0;
        if (last_op == 0)
            return ps;
        if ((ps->store_buffer = add_buffer(p, 0)) < 0)
            return NULL;
        ps = new_pass(p, FG_PASS_MAP);
        if (!ps)
            return NULL;
        ps->first = 1;
        ps->source_buffer = p->buffer_of[0];
        ps->last = ps->domain = chain_end(p, 0, 0, false);
        return ps;
    }
    fg_pass *ps = new_pass(p, FG_PASS_CONV);
    if (!ps)
        return NULL;
    ps->first = 0;
    int t = ps->last = ps->domain = chain_end(p, 0, 0, true);
    if ((ps->chan_reduce = wgmma_channel_reduction(p, t)) >= 0)
        t = ps->last = ps->domain = last_op; /* the reduction and what follows it, in the epilogue */
    /* the chain stopped at a norm that needs statistics: a strategy decides what follows */
    const bool norm_cut =
        t < last_op && needs_stats(&ir->ops[t + 1]) && fg_op_kind_class(ir->ops[t + 1].kind) == FG_CLASS_NORM;
    if (norm_cut && wanted < 0 && (p->chan_sums = channel_sums_reduction(p, t)) >= 0) {
        /* algebra instead of a second conv or a stored tensor: "auto" only, so that a spec (or
         * FUSEGEN_STRATEGY) asking for materialize or recompute still gets that plan */
        plan->strategy = FG_STRATEGY_CHANNEL_SUMS;
    } else if (norm_cut) {
        plan->strategy = wanted == FG_STRATEGY_MATERIALIZE ? FG_STRATEGY_MATERIALIZE : FG_STRATEGY_RECOMPUTE;
        p->auto_cut = wanted < 0 ? t : -1; /* "auto": decided once the recompute plan is known */
        /* recompute cannot serve a value some later op reads back */
        for (int v = 0; v <= t; v++)
            if (value_needed_after(ir, v, t))
                plan->strategy = FG_STRATEGY_MATERIALIZE;
    }
    return ps;
}

/* Chains the passes after `ps` until the layer's output: at each op the chain stopped at
 * (one that needs a statistic, a big reduction, a window the pass cannot hold), the value is
 * stored where later passes read it, the statistics are gathered, and a new pass takes
 * over. With the recompute strategy the first stop gathers the norm's statistics and runs
 * the conv pass again instead. */
static int chain_passes(planner *p, fg_pass *ps)
{
    const fg_layer_ir *ir = p->ir;
    fg_plan *plan = p->plan;
    fg_error *err = p->err;
    int last_op = ir->n_ops - 1;
    bool recomputed = false;
    for (;;) {
        int k = ps->last + 1; /* the op that stopped the chain */
        if (ps->last == last_op) {
            ps->store_output = true;
            if (plan->export_accum < 0)
                return 0;
            if (ps->kind != FG_PASS_CONV && ps->kind != FG_PASS_MAP)
                return fg_fail(err, "%s: the pass writing the output cannot gather the statistics the next layer "
                                    "reads (internal error)",
                               ir->file);
            return feed(p, ps, plan->export_accum);
        }
        const fg_op *op = &ir->ops[k];
        if (plan->strategy == FG_STRATEGY_CHANNEL_SUMS && !p->ready[k]) {
            /* the conv pass feeds fp64 moments per (sample, channel); one map pass
             * computes the rest of the layer from them */
            if (!(ps = channel_sums_passes(p, ps, k)))
                return -1;
            continue;
        }
        if (plan->strategy == FG_STRATEGY_RECOMPUTE && !recomputed) {
            /* statistics only; then the conv pass again, now able to apply the norm */
            recomputed = true;
            if (prepare_stats(p, ps, k))
                return -1;
            p->ready[k] = true;
            if (!(ps = new_pass(p, FG_PASS_CONV)))
                return -1;
            ps->first = 0;
            ps->last = ps->domain = chain_end(p, 0, 0, true);
            continue;
        }
        /* The value the chain stopped at goes to a buffer when the next pass reads it (all
         * but a big reduction, which reads only its accumulator; logsumexp reads it twice)
         * or a later op does. */
        int v = ps->last;
        bool next_reads_value = !is_big_reduce(op) || accumulated(op)->n_accums > 1;
        if ((next_reads_value || value_needed_after(ir, v, k)) && !p->stored[v]) {
            ps->store_buffer = add_buffer(p, v);
            if (ps->store_buffer < 0)
                return -1;
        }
        /* Other values of this chain that a later op reads back are stored too, as long as
         * they share the domain's index space (no window op in between). */
        for (int u = ps->last - 1; u >= ps->first; u--) {
            if (is_window(&ir->ops[u + 1]))
                break;
            if (value_needed_after(ir, u, ps->last) && !p->stored[u]) {
                if (ps->n_extra_stores == 4)
                    return fg_fail(err, "%s: a pass stores too many named values", ir->file);
                int b = add_buffer(p, u);
                if (b < 0)
                    return -1;
                ps->extra_stores[ps->n_extra_stores++] = b;
            }
        }
        for (int u = ps->first; u < ps->last; u++)
            if (value_needed_after(ir, u, ps->last) && !p->stored[u])
                return fg_fail(err, "%s:%d: value '%s' is read after a statistic but is followed by a pooling or "
                                    "reduction in the same pass; name the value after that op instead",
                               ir->file, ir->ops[u].line, ir->ops[u].as);
        if (needs_stats(op) || is_big_reduce(op)) {
            if (prepare_stats(p, ps, k))
                return -1;
            p->ready[k] = true;
        }
        if (!(ps = new_pass(p, FG_PASS_MAP)))
            return -1;
        ps->first = k;
        /* a big reduction starts from its accumulator, everything else from the buffer */
        bool from_accum = is_big_reduce(op);
        ps->source_buffer = from_accum ? -1 : p->buffer_of[v];
        ps->last = ps->domain = chain_end(p, from_accum ? k : v, k, false);
    }
}

/* Launch geometry of every pass: the conv tiling (and its shared-memory layout), the map and
 * finalize grids. cuDNN's pass has none: the runtime calls cuDNN. */
static int assign_geometry(planner *p)
{
    fg_plan *plan = p->plan;
    for (int i = 0; i < plan->n_passes; i++) {
        fg_pass *q = &plan->passes[i];
        switch (q->kind) {
        case FG_PASS_CONV:
            if (conv_tiling(p, q))
                return -1;
            break;
        case FG_PASS_MAP:
            map_launch(p, q);
            break;
        case FG_PASS_FINALIZE:
            finalize_launch(plan, q);
            break;
        case FG_PASS_PACK_INPUT:
            pack_input_launch(p->ir, &p->plan->wgmma, q);
            break;
        case FG_PASS_PRO_STATS:
            pro_stats_launch(p->ir, plan, q);
            break;
        case FG_PASS_PACK_WEIGHTS:
            q->launch.block = 256;
            q->launch.grid_x = ceil_div(p->plan->wgmma.w_elems, 256); /* a thread an element */
            q->launch.grid_y = 1;
            q->launch.per_sample = false;
            break;
        case FG_PASS_CUDNN:
        case FG_PASS_RESIDENT: /* tiled by plan_resident */
            break;
        }
    }
    return 0;
}

/* Every pass's kernel parameters, in the order the templates print them. */
static int assign_arguments(planner *p)
{
    fg_plan *plan = p->plan;
    for (int i = 0; i < plan->n_passes; i++) {
        fg_pass *q = &plan->passes[i];
        if (q->kind == FG_PASS_CUDNN)
            continue; /* no kernel, no arguments */
        pass_args(p->ir, plan, p, q);
        if (q->n_args > FG_MAX_ARGS)
            return fg_fail(p->err, "%s: pass %d needs more than %d kernel parameters (a planner bug)", p->ir->file, i,
                           FG_MAX_ARGS);
    }
    return 0;
}

/* The strategy the spec (or the caller) asks for: -1 for "auto". */
static int wanted_strategy(const fg_layer_ir *ir, const fg_plan_options *opts)
{
    int wanted = opts->force_strategy >= 0 ? opts->force_strategy : ir->strategy;
    /* a caller's default for specs that say "auto" (FUSEGEN_STRATEGY: a benchmarking knob,
     * bench/NOTES.md) */
    return wanted < 0 ? opts->default_strategy : wanted;
}

/* The plan for one strategy request (`wanted`: -1 auto, or materialize or recompute). */
static int plan_with(planner *p, int wanted)
{
    fg_pass *ps = first_passes(p, wanted);
    if (!ps || chain_passes(p, ps) || assign_geometry(p))
        return -1;
    return assign_arguments(p);
}

int fg_plan_layer(const fg_layer_ir *ir, const fg_plan_options *given, fg_plan *plan, fg_error *err)
{
    fg_plan_options opts;
    if (given) {
        opts = *given;
        if (!opts.sm)
            opts.sm = 90;
    } else {
        fg_plan_options_init(&opts, 0);
    }
    planner p;
    start(&p, ir, &opts, plan, err);
    int wanted = wanted_strategy(ir, &opts);
    /* "auto" does not pick resident: measured on the H200 it is still slower than materialize
     * (bench/NOTES.md, v3); a spec (or FUSEGEN_STRATEGY) can ask for it */
    if (wanted == FG_STRATEGY_RESIDENT) {
        if (ir->n_pro)
            return fg_fail(err, "%s:%d: strategy \"resident\" is not possible for a layer with ops before the conv "
                                "(%s): use \"auto\", \"materialize\" or \"recompute\"",
                           ir->file, ir->pro[0].line, fg_op_written_name(&ir->pro[0]));
        for (int k = 1; k < ir->n_ops; k++)
            if (fg_op_def_of(ir->ops[k].kind)->norm.channels == FG_NORM_ACROSS &&
                fg_op_kind_class(ir->ops[k].kind) == FG_CLASS_NORM)
                return fg_fail(err, "%s:%d: strategy \"resident\" is not possible for layer_norm { dim = 1 }: its "
                                    "statistics are per position (over the channels), resident keeps whole channels; "
                                    "use \"auto\", \"materialize\" or \"recompute\"",
                               ir->file, ir->ops[k].line);
        if (ir->exports_stats) /* the block links no layer whose spec asks for resident */
            return fg_fail(err, "%s: strategy \"resident\" cannot gather the statistics of the output that the next "
                                "layer of the block reads; use \"auto\", \"materialize\" or \"recompute\"",
                           ir->file);
        if (!plan_resident(&p, opts.sm))
            return fg_fail(err, "%s: strategy \"resident\" is not possible for this layer on sm_%d: it needs a norm "
                                "over whole channels (group/instance/layer norm) after the conv's elementwise ops, at "
                                "most one channel reduction after it, and a norm group that fits in 8 CTAs' shared "
                                "memory; use \"auto\"",
                           ir->file, opts.sm);
        return assign_arguments(&p);
    }
    if (plan_with(&p, wanted))
        return -1;
    /* "auto" planned recompute first; it keeps it only when it pays, else plans materialize */
    if (p.auto_cut >= 0 && plan->strategy == FG_STRATEGY_RECOMPUTE && !recompute_pays(ir, plan, p.auto_cut)) {
        start(&p, ir, &opts, plan, err);
        return plan_with(&p, FG_STRATEGY_MATERIALIZE);
    }
    return 0;
}

bool fg_arch_has_wgmma(const char *arch)
{
    return arch && strcmp(arch, "sm_90a") == 0;
}

int fg_arch_sm(const char *arch)
{
    int sm = 0;
    if (!arch || sscanf(arch, "sm_%d", &sm) != 1 || sm < 10)
        return 0;
    return sm;
}
