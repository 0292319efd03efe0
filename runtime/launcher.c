/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_GRID_Z = 65535, MAX_GRID_Y = 65535, MAX_BLOCK = 1024 };

/* Whether every argument of pass `ps` names something the plan has. */
static int check_args(const fg_layer_ir *ir, const fg_plan *plan, int i, const fg_pass *ps, fg_error *err)
{
    for (int a = 0; a < ps->n_args; a++) {
        const fg_arg *arg = &ps->args[a];
        int limit = -1;
        const char *what = "";
        switch (arg->kind) {
        case FG_ARG_INPUT:
        case FG_ARG_OUTPUT:
        case FG_ARG_BATCH:
        case FG_ARG_BATCH_BASE:
            continue;
        case FG_ARG_BUFFER:
            limit = plan->n_buffers, what = "buffer";
            break;
        case FG_ARG_TMAP:
            if (plan->wgmma.a_tma != 2 || (arg->index != plan->wgmma.packed_hi && arg->index != plan->wgmma.packed_lo))
                return fg_fail(err, "pass %d (%s): argument %d is a tensor map over buffer %d, no packed input of the "
                                    "plan's TMA producer", i, ps->kernel, a, arg->index);
            limit = plan->n_buffers, what = "buffer";
            break;
        case FG_ARG_PARAM:
            limit = fg_bn_fold_param_count(ir, &plan->fold), what = "parameter";
            break;
        case FG_ARG_ACCUM:
        case FG_ARG_STATS:
            limit = plan->n_accums, what = "statistic";
            break;
        }
        if (limit < 0)
            return fg_fail(err, "pass %d (%s): argument %d has an unknown kind (%d)", i, ps->kernel, a, (int)arg->kind);
        if (arg->index < 0 || arg->index >= limit)
            return fg_fail(err, "pass %d (%s): argument %d names %s %d of %d", i, ps->kernel, a, what, arg->index,
                           limit);
    }
    return 0;
}

static int check_plan(const fg_layer_ir *ir, const fg_plan *plan, fg_error *err)
{
    if (plan->n_passes < 1 || plan->n_passes > FG_MAX_PASSES || plan->n_buffers < 0 ||
        plan->n_buffers > FG_MAX_BUFFERS || plan->n_accums < 0 || plan->n_accums > FG_MAX_ACCUMS ||
        ir->n_params < 0 || ir->n_params > FG_MAX_PARAMS)
        return fg_fail(err, "layer %s: the plan's counts are out of range (%d passes, %d buffers, %d statistics)",
                       ir->name, plan->n_passes, plan->n_buffers, plan->n_accums);
    for (int i = 0; i < plan->n_passes; i++) {
        const fg_pass *ps = &plan->passes[i];
        const fg_launch *l = &ps->launch;
        if (ps->n_args < 0 || ps->n_args > FG_MAX_ARGS)
            return fg_fail(err, "layer %s: pass %d (%s) has %d kernel arguments; fusegen launches at most %d",
                           ir->name, i, ps->kernel, ps->n_args, FG_MAX_ARGS);
        if (ps->n_zero < 0 || ps->n_zero > (int)(sizeof ps->zero / sizeof *ps->zero))
            return fg_fail(err, "layer %s: pass %d (%s) clears %d statistics", ir->name, i, ps->kernel, ps->n_zero);
        for (int z = 0; z < ps->n_zero; z++)
            if (ps->zero[z] < 0 || ps->zero[z] >= plan->n_accums)
                return fg_fail(err, "layer %s: pass %d (%s) clears statistic %d of %d", ir->name, i, ps->kernel,
                               ps->zero[z], plan->n_accums);
        if (ps->kind == FG_PASS_CUDNN) {
            if (!ps->store_output && (ps->store_buffer < 0 || ps->store_buffer >= plan->n_buffers))
                return fg_fail(err, "layer %s: pass %d (cuDNN) stores into buffer %d of %d", ir->name, i,
                               ps->store_buffer, plan->n_buffers);
            continue;
        }
        if (l->block < 1 || l->block > MAX_BLOCK || l->grid_x < 1 || l->grid_x > INT32_MAX || l->grid_y < 1 ||
            l->grid_y > MAX_GRID_Y || l->smem_bytes < 0)
            return fg_fail(err, "layer %s: pass %d (%s) has a launch the GPU cannot run (block %d, grid %lld x %lld, "
                                "%d B shared)",
                           ir->name, i, ps->kernel, l->block, (long long)l->grid_x, (long long)l->grid_y,
                           l->smem_bytes);
        if (check_args(ir, plan, i, ps, err))
            return fg_fail_context(err, "layer %s", ir->name);
    }
    const fg_wgmma_tiling *w = &plan->wgmma;
    if (w->split_k > 1 &&
        (w->split_counters < 0 || w->split_counters >= plan->n_buffers || w->split_partials < 0 ||
         w->split_partials >= plan->n_buffers || w->split_fill < 2 || plan->buffers[w->split_counters].per_sample != 0 ||
         plan->buffers[w->split_counters].fixed < w->split_fill ||
         plan->buffers[w->split_partials].fixed < (int64_t)w->split_fill * w->split_slot))
        return fg_fail(err, "layer %s: the plan's split-K buffers (%d and %d of %d) do not fit its %d splits", ir->name,
                       w->split_counters, w->split_partials, plan->n_buffers, w->split_k);
    /* the weight pack's image lies outside the workspace: one buffer of fixed size, which a
     * pack pass writes and only the packs do (a run never launches them) */
    int packs = 0;
    for (int i = 0; i < plan->n_passes; i++) {
        const fg_pass *ps = &plan->passes[i];
        if (ps->kind == FG_PASS_PACK_WEIGHTS)
            packs++;
        for (int a = 0; a < ps->n_args && w->parts; a++)
            if (ps->args[a].kind == FG_ARG_BUFFER && ps->args[a].index == w->packed_w &&
                ps->kind != FG_PASS_PACK_WEIGHTS && !(ps->kind == FG_PASS_CONV && ps->conv.engine == FG_CONV_WGMMA))
                return fg_fail(err, "layer %s: pass %d (%s) reads the packed weights (buffer %d) but is no wgmma conv",
                               ir->name, i, ps->kernel, w->packed_w);
    }
    if (packs && (packs != 1 || !w->parts || w->packed_w < 0 || w->packed_w >= plan->n_buffers ||
                  plan->buffers[w->packed_w].per_sample != 0 || plan->buffers[w->packed_w].fixed < 1))
        return fg_fail(err, "layer %s: the plan's weight pack (%d passes, buffer %d of %d) does not fit its wgmma tiling",
                       ir->name, packs, w->packed_w, plan->n_buffers);
    const fg_op *conv = &ir->ops[0];
    if (conv->weight_param < 0 || conv->weight_param >= ir->n_params ||
        (conv->bias && (conv->bias_param < 0 || conv->bias_param >= ir->n_params)))
        return fg_fail(err, "layer %s: the conv's parameters are out of range", ir->name);
    const fg_bn_fold *fold = &plan->fold;
    if (fold->op >= 0 && (fold->op != 1 || fold->folded_weight != ir->n_params || fold->folded_bias != ir->n_params + 1))
        return fg_fail(err, "layer %s: the plan's folded batch_norm (op %d, parameters %d and %d) does not fit the layer",
                       ir->name, fold->op, fold->folded_weight, fold->folded_bias);
    return 0;
}

int fg_launch_table_init(fg_launch_table *t, const fg_layer_ir *ir, const fg_plan *plan, fg_error *err)
{
    memset(t, 0, sizeof *t);
    if (check_plan(ir, plan, err))
        return -1;
    t->passes = calloc((size_t)plan->n_passes, sizeof *t->passes);
    if (!t->passes)
        return fg_fail(err, "out of memory");
    t->n_passes = plan->n_passes;
    t->n_buffers = plan->n_buffers;
    t->n_accums = plan->n_accums;
    t->n_params = fg_bn_fold_param_count(ir, &plan->fold);
    t->conv_weight = fg_plan_conv_params(ir, plan, &t->conv_bias);
    t->wgmma = plan->wgmma;
    t->split_counters = plan->wgmma.split_k > 1 ? plan->wgmma.split_counters : -1;
    t->packed_w = -1;
    for (int i = 0; i < plan->n_buffers; i++) {
        t->buffers[i].per_sample = (uint64_t)plan->buffers[i].per_sample * 4; /* floats */
        t->buffers[i].fixed = (uint64_t)plan->buffers[i].fixed * 4;
    }
    for (int i = 0; i < plan->n_accums; i++) {
        const fg_accum *a = &plan->accums[i];
        uint64_t per_key = (uint64_t)fg_accum_defs[a->kind].bytes_per_key;
        uint64_t keys = (uint64_t)a->keys_per_sample;
        /* statistics over the batch have one set of keys whatever the batch */
        fg_launch_piece *acc = &t->accums[i], *st = &t->stats[i];
        if (a->over_batch) {
            acc->fixed = keys * per_key;
            st->fixed = keys * 8;
        } else {
            acc->per_sample = keys * per_key;
            st->per_sample = keys * 8;
        }
        t->clear_pattern[i] = fg_accum_defs[a->kind].clear_word;
        t->accum_link[i] = a->link;
    }
    for (int i = 0; i < plan->n_passes; i++) {
        const fg_pass *ps = &plan->passes[i];
        fg_launch_pass *lp = &t->passes[i];
        lp->cudnn = ps->kind == FG_PASS_CUDNN;
        lp->store_output = ps->store_output;
        lp->store_buffer = ps->store_buffer;
        snprintf(lp->kernel, sizeof lp->kernel, "%s", ps->kernel);
        lp->grid_x = (unsigned)ps->launch.grid_x;
        lp->grid_y = (unsigned)ps->launch.grid_y;
        lp->block = (unsigned)ps->launch.block;
        lp->smem_bytes = (unsigned)ps->launch.smem_bytes;
        lp->per_sample = ps->launch.per_sample;
        lp->pack_input = ps->kind == FG_PASS_PACK_INPUT;
        lp->pack_weights = ps->kind == FG_PASS_PACK_WEIGHTS;
        if (lp->pack_weights)
            t->packed_w = plan->wgmma.packed_w; /* check_plan: in range, of fixed size */
        lp->persistent = ps->launch.persistent;
        lp->split = ps->kind == FG_PASS_CONV && ps->conv.engine == FG_CONV_WGMMA && plan->wgmma.split_k > 1;
        lp->n_zero = ps->n_zero;
        memcpy(lp->zero, ps->zero, sizeof(int) * (size_t)ps->n_zero);
        lp->n_args = ps->n_args;
        size_t n = ps->n_args ? (size_t)ps->n_args : 1;
        lp->args = malloc(n * sizeof *lp->args);
        lp->ptrs = malloc(n * sizeof *lp->ptrs);
        lp->ints = malloc(n * sizeof *lp->ints);
        lp->values = malloc(n * sizeof *lp->values);
        if (!lp->args || !lp->ptrs || !lp->ints || !lp->values) {
            fg_launch_table_free(t);
            return fg_fail(err, "out of memory");
        }
        memcpy(lp->args, ps->args, sizeof *lp->args * (size_t)ps->n_args);
        bool maps = false;
        for (int a = 0; a < ps->n_args; a++)
            maps = maps || ps->args[a].kind == FG_ARG_TMAP;
        if (maps) {
            lp->tmaps = aligned_alloc(_Alignof(fg_launch_tmap), n * sizeof *lp->tmaps);
            if (!lp->tmaps) {
                fg_launch_table_free(t);
                return fg_fail(err, "out of memory");
            }
            memset(lp->tmaps, 0, n * sizeof *lp->tmaps);
        }
    }
    return 0;
}

void fg_launch_table_free(fg_launch_table *t)
{
    if (!t || !t->passes)
        return;
    for (int i = 0; i < t->n_passes; i++) {
        free(t->passes[i].args);
        free(t->passes[i].ptrs);
        free(t->passes[i].ints);
        free(t->passes[i].values);
        free(t->passes[i].tmaps);
    }
    free(t->passes);
    t->passes = NULL;
    t->n_passes = 0;
}

/* Adds a piece of `bytes` at *off (256-byte aligned after it); false on overflow. */
static bool place(uint64_t *off, const fg_launch_piece *p, uint64_t batch, uint64_t *at, uint64_t *bytes)
{
    uint64_t b;
    if (__builtin_mul_overflow(p->per_sample, batch, &b) || __builtin_add_overflow(b, p->fixed, &b))
        return false;
    uint64_t end;
    if (__builtin_add_overflow(*off, b, &end) || end > UINT64_MAX - 255)
        return false;
    *at = *off;
    if (bytes)
        *bytes = b;
    *off = (end + 255) & ~(uint64_t)255;
    return true;
}

uint64_t fg_launch_packed_bytes(const fg_launch_table *t)
{
    return t->packed_w >= 0 ? t->buffers[t->packed_w].fixed : 0;
}

int fg_launch_layout_for(const fg_launch_table *t, int64_t batch, fg_launch_layout *out, fg_error *err)
{
    memset(out, 0, sizeof *out);
    uint64_t off = 0, n = (uint64_t)batch;
    bool ok = batch >= 1;
    /* the split-K counters first: at offset 0 whatever the batch, so that the zeros a layer
     * wrote there when it allocated its workspace stay under them at every batch */
    int first = t->split_counters;
    if (first >= 0)
        ok = t->buffers[first].per_sample == 0 && place(&off, &t->buffers[first], n, &out->buffer_offset[first], NULL);
    for (int i = 0; i < t->n_buffers && ok; i++)
        if (i != first && i != t->packed_w) /* the packed weights are the layer's own */
            ok = place(&off, &t->buffers[i], n, &out->buffer_offset[i], NULL);
    for (int i = 0; i < t->n_accums && ok; i++)
        ok = place(&off, &t->accums[i], n, &out->accum_offset[i], &out->accum_bytes[i]) &&
             place(&off, &t->stats[i], n, &out->stats_offset[i], NULL);
    if (!ok)
        return fg_fail(err, "the workspace for a batch of %lld does not fit in memory", (long long)batch);
    out->total = off;
    return 0;
}

bool fg_launch_input_direct(const fg_launch_table *t, CUdeviceptr input)
{
    return t->wgmma.parts && t->wgmma.input_direct && t->wgmma.packed_hi >= 0 && input % 16 == 0;
}

/* Accumulator a's storage: the block's where it is shared with another layer, else the workspace's. */
static CUdeviceptr accum_pointer(const fg_launch_table *t, const fg_launch_memory *m, int a)
{
    fg_accum_link link = t->accum_link[a];
    if (link != FG_LINK_NONE && m->links[link - 1])
        return m->links[link - 1];
    return m->workspace + m->layout.accum_offset[a];
}

/* The pointer for argument `a`; `direct_buffer` is the buffer the input stands in for (-1:
 * none, fg_launch_input_direct). */
static CUdeviceptr arg_pointer(const fg_launch_table *t, const fg_arg *a, const fg_launch_memory *m,
                               int direct_buffer)
{
    switch (a->kind) {
    case FG_ARG_INPUT:
        return m->input;
    case FG_ARG_OUTPUT:
        return m->output;
    case FG_ARG_BUFFER:
    case FG_ARG_TMAP: /* the map's buffer */
        if (a->index == direct_buffer)
            return m->input;
        if (a->index == t->packed_w)
            return m->packed_w;
        return m->workspace + m->layout.buffer_offset[a->index];
    case FG_ARG_PARAM:
        return m->params[a->index];
    case FG_ARG_ACCUM:
        return accum_pointer(t, m, a->index);
    case FG_ARG_STATS:
        return m->workspace + m->layout.stats_offset[a->index];
    case FG_ARG_BATCH:
    case FG_ARG_BATCH_BASE:
        break;
    }
    return 0; /* not a pointer (fg_launch_table_init checked every kind) */
}

int fg_launch_clear_counters(const fg_cuda *cu, const fg_launch_table *t, const fg_launch_memory *mem,
                             CUstream stream, fg_error *err)
{
    if (t->split_counters < 0)
        return 0;
    CUresult r = cu->MemsetD32Async(mem->workspace + mem->layout.buffer_offset[t->split_counters], 0,
                                    t->buffers[t->split_counters].fixed / 4, stream);
    return r == CUDA_SUCCESS ? 0 : fg_cuda_fail(err, r, "clearing the split-K counters (cuMemsetD32Async)");
}

void fg_im2col_args_for(const fg_im2col_map *map, int64_t batch, fg_im2col_args *out)
{
    memset(out, 0, sizeof *out);
    out->type = map->operand == FG_WGMMA_BF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                : map->operand == FG_WGMMA_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                               : CU_TENSOR_MAP_DATA_TYPE_FLOAT32; /* the packed TF32 bits as they are */
    out->rank = (cuuint32_t)map->rank;
    for (int i = 0; i < map->rank; i++) {
        out->dims[i] = i == map->rank - 1 ? (cuuint64_t)batch : map->dims[i];
        out->elem_strides[i] = (cuuint32_t)map->elem_strides[i];
    }
    for (int i = 0; i < map->rank - 1; i++)
        out->strides[i] = map->strides[i];
    for (int i = 0; i < map->rank - 2; i++) {
        out->lower[i] = map->lower[i];
        out->upper[i] = map->upper[i];
    }
    out->channels = (cuuint32_t)map->channels;
    out->pixels = (cuuint32_t)map->pixels;
    out->swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    out->fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE; /* zeros (the NAN_REQUEST_ZERO_FMA one fills NaN) */
    out->l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    out->bytes = map->rank >= 2 ? (uint64_t)map->strides[map->rank - 2] * (uint64_t)batch : 0;
}

int fg_launch_encode_im2col(const fg_cuda *cu, const fg_im2col_map *map, CUdeviceptr address, int64_t batch,
                            CUtensorMap *out, fg_error *err)
{
    if (!cu->TensorMapEncodeIm2col)
        return fg_fail(err, "the CUDA driver lacks cuTensorMapEncodeIm2col (a CUDA 12 driver or newer loads the wgmma "
                            "conv's input by TMA); FUSEGEN_WGMMA_A_TMA=1 copies it with cp.async instead");
    if (address % 16)
        return fg_fail(err, "the wgmma conv's input by TMA: the packed input at %#llx is not 16-byte aligned",
                       (unsigned long long)address);
    fg_im2col_args a;
    fg_im2col_args_for(map, batch, &a);
    CUresult r = cu->TensorMapEncodeIm2col(out, a.type, a.rank, (void *)(uintptr_t)address, a.dims, a.strides, a.lower,
                                           a.upper, a.channels, a.pixels, a.elem_strides,
                                           CU_TENSOR_MAP_INTERLEAVE_NONE, a.swizzle, a.l2, a.fill);
    if (r != CUDA_SUCCESS) {
        char what[192];
        snprintf(what, sizeof what,
                 "encoding the wgmma conv's im2col tensor map (rank %u, batch %lld; cuTensorMapEncodeIm2col; "
                 "FUSEGEN_WGMMA_A_TMA=1 copies the input with cp.async instead)",
                 a.rank, (long long)batch);
        return fg_cuda_fail(err, r, what);
    }
    int version = 0;
    if (cu->DriverGetVersion && cu->DriverGetVersion(&version) == CUDA_SUCCESS && version <= 13010 &&
        a.bytes < 128 * 1024)
        out->opaque[1] &= ~((cuuint64_t)1 << 21);
    return 0;
}

/* Enqueues pass i's memsets and kernel (or cuDNN's conv) for `batch` samples. */
static int launch_pass(const fg_cuda *cu, const fg_launch_table *t, int i, const CUfunction *functions,
                       const fg_launch_memory *mem, int64_t batch, int direct_buffer, CUstream stream, fg_error *err)
{
    const fg_launch_pass *lp = &t->passes[i];
    for (int z = 0; z < lp->n_zero; z++) {
        int a = lp->zero[z];
        CUresult r = cu->MemsetD32Async(accum_pointer(t, mem, a), t->clear_pattern[a],
                                        mem->layout.accum_bytes[a] / 4, stream);
        if (r != CUDA_SUCCESS)
            return fg_cuda_fail(err, r, "clearing statistics (cuMemsetD32Async)");
    }
    if (lp->cudnn) {
        CUdeviceptr y = lp->store_output ? mem->output : mem->workspace + mem->layout.buffer_offset[lp->store_buffer];
        CUdeviceptr bias = t->conv_bias >= 0 ? mem->params[t->conv_bias] : 0;
        return fg_cudnn_conv_run(mem->cudnn, batch, mem->input, mem->params[t->conv_weight], bias, y, stream, err) != 0
                   ? -1
                   : 0;
    }
    int batch_base = 0;
    for (int a = 0; a < lp->n_args; a++) {
        const fg_arg *arg = &lp->args[a];
        if (arg->kind == FG_ARG_BATCH) {
            lp->ints[a] = (int)batch;
            lp->values[a] = &lp->ints[a];
        } else if (arg->kind == FG_ARG_BATCH_BASE) {
            lp->values[a] = &batch_base;
        } else if (arg->kind == FG_ARG_TMAP) {
            /* encoded again only for another address or batch (fg_launch_tmap) */
            fg_launch_tmap *m = &lp->tmaps[a];
            CUdeviceptr at = arg_pointer(t, arg, mem, direct_buffer);
            if (m->address != at || m->batch != batch) {
                m->address = 0;
                if (fg_launch_encode_im2col(cu, &t->wgmma.im2col, at, batch, &m->map, err) != 0)
                    return -1;
                m->address = at;
                m->batch = batch;
            }
            lp->values[a] = &m->map;
        } else {
            lp->ptrs[a] = arg_pointer(t, arg, mem, direct_buffer);
            lp->values[a] = &lp->ptrs[a];
        }
    }
    int64_t chunks = lp->per_sample ? batch : 1;
    unsigned gx = lp->grid_x;
    if (lp->split && !mem->counters_zero && fg_launch_clear_counters(cu, t, mem, stream, err) != 0)
        return -1;
    if (lp->persistent) {
        /* ctas_per_sm blocks a multiprocessor (or one per work unit, when there are fewer):
         * each walks the batch's tiles (grid_x of them per sample, or those of the batch's
         * pixels flattened: fg_wgmma_tiles), or with split K its (tile, split) units */
        int64_t tiles = fg_wgmma_tiles(&t->wgmma, lp->grid_x, batch);
        if (lp->split)
            tiles *= fg_wgmma_splits(&t->wgmma, tiles);
        if (mem->sm_count <= 0) /* one block would be correct but ~100x slow: say so */
            return fg_fail(err, "pass %d is persistent but the run gave no multiprocessor count", i);
        int64_t slots = (int64_t)mem->sm_count * t->wgmma.ctas_per_sm;
        gx = (unsigned)(tiles < slots ? tiles : slots);
        /* whole clusters of two (a CTA without tiles runs empty steps), within the SMs */
        if (t->wgmma.multicast == 2 && gx % 2)
            gx = gx == 1 || gx < (unsigned)mem->sm_count ? gx + 1 : gx - 1;
    }
    for (int64_t base = 0; base < chunks; base += MAX_GRID_Z) {
        batch_base = (int)base;
        unsigned gz = (unsigned)(chunks - base < MAX_GRID_Z ? chunks - base : MAX_GRID_Z);
        CUresult r = cu->LaunchKernel(functions[i], gx, lp->grid_y, gz, lp->block, 1, 1, lp->smem_bytes, stream,
                                      lp->values, NULL);
        if (r != CUDA_SUCCESS) {
            char what[128];
            snprintf(what, sizeof what, "launching %s", lp->kernel);
            return fg_cuda_fail(err, r, what);
        }
    }
    return 0;
}

int fg_launch_run(const fg_cuda *cu, const fg_launch_table *t, const CUfunction *functions,
                  const fg_launch_memory *mem, int64_t batch, CUstream stream, fg_error *err)
{
    if (t->packed_w >= 0 && !mem->packed_w)
        return fg_fail(err, "the wgmma conv's packed weights are not written (fg_launch_pack_weights)");
    const int direct_buffer = fg_launch_input_direct(t, mem->input) ? t->wgmma.packed_hi : -1;
    for (int i = 0; i < t->n_passes; i++) {
        const fg_launch_pass *lp = &t->passes[i];
        if (lp->pack_weights || (lp->pack_input && direct_buffer >= 0))
            continue; /* packed at bind; the input already is the packed operand */
        if (launch_pass(cu, t, i, functions, mem, batch, direct_buffer, stream, err) != 0)
            return -1;
    }
    return 0;
}

int fg_launch_pack_weights(const fg_cuda *cu, const fg_launch_table *t, const CUfunction *functions,
                           const CUdeviceptr *params, CUdeviceptr packed_w, CUstream stream, fg_error *err)
{
    fg_launch_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.params = params;
    mem.packed_w = packed_w;
    for (int i = 0; i < t->n_passes; i++)
        if (t->passes[i].pack_weights && launch_pass(cu, t, i, functions, &mem, 1, -1, stream, err) != 0)
            return -1;
    return 0;
}

int fg_module_functions(const fg_cuda *cu, CUmodule module, const fg_plan *plan, CUfunction *functions, fg_error *err)
{
    for (int i = 0; i < plan->n_passes; i++) {
        const fg_pass *ps = &plan->passes[i];
        functions[i] = NULL;
        if (ps->kind == FG_PASS_CUDNN)
            continue;
        CUresult r = cu->ModuleGetFunction(&functions[i], module, ps->kernel);
        if (r == CUDA_SUCCESS && ps->launch.smem_bytes > 48 * 1024)
            r = cu->FuncSetAttribute(functions[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     ps->launch.smem_bytes);
        /* two wgmma CTAs a multiprocessor need the largest shared-memory carveout: ask for it
         * rather than leave it to the driver's choice */
        if (r == CUDA_SUCCESS && ps->kind == FG_PASS_CONV && ps->conv.engine == FG_CONV_WGMMA &&
            plan->wgmma.ctas_per_sm > 1)
            r = cu->FuncSetAttribute(functions[i], CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                     CU_SHAREDMEM_CARVEOUT_MAX_SHARED);
        if (r != CUDA_SUCCESS)
            return fg_cuda_fail(err, r, ps->kernel);
    }
    return 0;
}
