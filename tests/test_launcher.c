/* SPDX-License-Identifier: Apache-2.0 */
/* The launcher's table (runtime/launcher.h): taken from the plan once, checked, and scaled
 * by the batch on every run without calling the planner. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_capture.h"
#include "launcher.h"
#include "split_k_specs.h"
#include "test_util.h"

static uint64_t align256(uint64_t x)
{
    return (x + 255) & ~(uint64_t)255;
}

/* The table's workspace layout for every batch, against the plan: each buffer holds its
 * floats per sample times the batch plus its fixed floats, each accumulator its keys (per
 * sample, or once for statistics over the batch) times the monoid's bytes per key, then 8
 * bytes of finalized statistics per key; every piece 256-byte aligned, in the plan's order,
 * none overlapping the next, the total exactly their aligned sizes -- all but a wgmma conv's
 * packed weights, which are the layer's own (fg_launch_packed_bytes), not the workspace's. */
static void layout_matches_the_plan(const fg_layer_ir *ir, const fg_plan *plan)
{
    fg_launch_table t;
    fg_error err = {{0}};
    if (fg_launch_table_init(&t, ir, plan, &err) != 0)
        fail_msg("%s: %s", ir->name, err.msg);
    static const int64_t batches[] = {1, 2, 3, 7, 128, 65537};
    for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
        const uint64_t n = (uint64_t)batches[b];
        fg_launch_layout got;
        assert_int_equal(fg_launch_layout_for(&t, batches[b], &got, &err), 0);
        uint64_t end = 0, sum = 0; /* where the previous piece ends; the pieces' aligned sizes */
        for (int i = 0; i < plan->n_buffers; i++) {
            uint64_t bytes = 4 * ((uint64_t)plan->buffers[i].per_sample * n + (uint64_t)plan->buffers[i].fixed);
            if (i == t.packed_w) {
                assert_int_equal(fg_launch_packed_bytes(&t), bytes);
                continue;
            }
            assert_true(got.buffer_offset[i] % 256 == 0 && got.buffer_offset[i] >= end);
            end = got.buffer_offset[i] + bytes;
            sum += align256(bytes);
        }
        for (int i = 0; i < plan->n_accums; i++) {
            const fg_accum *a = &plan->accums[i];
            uint64_t keys = (uint64_t)a->keys_per_sample * (a->over_batch ? 1 : n);
            assert_true(got.accum_bytes[i] == keys * (uint64_t)fg_accum_defs[a->kind].bytes_per_key);
            assert_true(got.accum_offset[i] % 256 == 0 && got.accum_offset[i] >= end);
            end = got.accum_offset[i] + got.accum_bytes[i];
            assert_true(got.stats_offset[i] % 256 == 0 && got.stats_offset[i] >= end);
            end = got.stats_offset[i] + keys * 8;
            sum += align256(got.accum_bytes[i]) + align256(keys * 8);
        }
        assert_true(got.total >= end && got.total < end + 256);
        assert_int_equal(got.total, sum);
    }
    fg_launch_table_free(&t);
}

static void reference_specs(void **state)
{
    (void)state;
    for (int s = 0; s < FGT_N_REFERENCE_SPECS; s++) {
        fg_layer_ir *ir = fgt_load_spec(fgt_reference_specs[s]);
        for (int strategy = -1; strategy <= 1; strategy++) {
            fg_plan *plan = fgt_plan(ir, strategy);
            layout_matches_the_plan(ir, plan);
            free(plan);
        }
        free(ir);
    }
    fg_layer_ir *ir = fgt_load_string(fgt_every_op_spec);
    fg_plan *plan = fgt_plan(ir, -1);
    layout_matches_the_plan(ir, plan);
    free(plan);
    free(ir);
}

/* Refuses `plan` with a message containing `why`. */
static void refused(const fg_layer_ir *ir, const fg_plan *plan, const char *why)
{
    fg_launch_table t;
    fg_error err = {{0}};
    assert_int_equal(fg_launch_table_init(&t, ir, plan, &err), -1);
    fgt_assert_contains(err.msg, why);
    assert_null(t.passes);
}

/* A plan the launcher cannot launch is refused before any run, never indexed past an array
 * (the hardening issue: 53 arguments filled 48-slot stack arrays at launch). */
static void bad_plans_refused(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb79");
    fg_plan *good = fgt_plan(ir, -1), *plan = malloc(sizeof *plan);
    assert_non_null(plan);

    *plan = *good;
    plan->passes[1].n_args = FG_MAX_ARGS + 5;
    char most[64];
    snprintf(most, sizeof most, "kernel arguments; fusegen launches at most %d", FG_MAX_ARGS);
    refused(ir, plan, most);
    *plan = *good;
    plan->passes[0].n_args = -1;
    refused(ir, plan, "has -1 kernel arguments");
    *plan = *good;
    for (int a = 0; a < plan->passes[2].n_args; a++)
        if (plan->passes[2].args[a].kind == FG_ARG_PARAM)
            plan->passes[2].args[a].index = 64;
    refused(ir, plan, "names parameter 64 of 3");
    *plan = *good;
    plan->passes[2].args[0].kind = FG_ARG_BUFFER;
    plan->passes[2].args[0].index = 5;
    refused(ir, plan, "names buffer 5 of 1");
    *plan = *good;
    plan->passes[0].args[0].kind = (fg_arg_kind)99;
    refused(ir, plan, "unknown kind (99)");
    *plan = *good;
    plan->passes[0].n_zero = 1;
    plan->passes[0].zero[0] = 3;
    refused(ir, plan, "clears statistic 3 of 1");
    *plan = *good;
    plan->passes[0].launch.block = 4096;
    refused(ir, plan, "a launch the GPU cannot run");
    *plan = *good;
    plan->n_passes = FG_MAX_PASSES + 1;
    refused(ir, plan, "out of range");

    /* a batch whose workspace overflows 64 bits is refused, not wrapped */
    fg_launch_table t;
    fg_launch_layout layout;
    fg_error err = {{0}};
    *plan = *good;
    plan->buffers[0].per_sample = INT64_MAX / 2;
    assert_int_equal(fg_launch_table_init(&t, ir, plan, &err), 0);
    assert_int_equal(fg_launch_layout_for(&t, INT32_MAX, &layout, &err), -1);
    fgt_assert_contains(err.msg, "does not fit in memory");
    fg_launch_table_free(&t);
    free(plan);
    free(good);
    free(ir);
}

/* Split K (launcher.h): the counters lie at offset 0 for every batch (the layer zeroes them
 * once there), the split pass is marked, and a plan whose split buffers are missing is
 * refused. */
static void split_k_workspace(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string(split_k_cases[1].source); /* instance_norm: a buffer and statistics too */
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    fg_plan *plan = fgt_plan_with(ir, &opts), *bad = malloc(sizeof *bad);
    assert_non_null(bad);
    const fg_wgmma_tiling *w = &plan->wgmma;
    assert_true(w->split_k > 1);
    layout_matches_the_plan(ir, plan);
    fg_launch_table t;
    fg_error err = {{0}};
    assert_int_equal(fg_launch_table_init(&t, ir, plan, &err), 0);
    assert_int_equal(t.split_counters, w->split_counters);
    int split_passes = 0;
    for (int i = 0; i < t.n_passes; i++)
        split_passes += t.passes[i].split;
    assert_int_equal(split_passes, 1);
    static const int64_t batches[] = {1, 2, 5, 64, 1000};
    for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
        fg_launch_layout got;
        assert_int_equal(fg_launch_layout_for(&t, batches[b], &got, &err), 0);
        assert_int_equal(got.buffer_offset[w->split_counters], 0);
        for (int i = 0; i < plan->n_buffers; i++)
            if (i != w->split_counters && i != t.packed_w) /* (the packed weights: the layer's own) */
                assert_true(got.buffer_offset[i] >= 4 * (uint64_t)w->split_fill);
    }
    fg_launch_table_free(&t);

    *bad = *plan;
    bad->wgmma.split_partials = plan->n_buffers;
    refused(ir, bad, "split-K buffers");
    *bad = *plan;
    bad->buffers[w->split_counters].fixed = w->split_fill - 1;
    refused(ir, bad, "split-K buffers");
    free(bad);
    free(plan);
    free(ir);
}

/* Where a run reads a channels-last half input as the wgmma engine's packed operand
 * (fg_launch_input_direct): only for such an input with no prologue and no padding channels,
 * and only where it is 16-byte aligned; the plan's input-packing pass is still there for the
 * other runs. */
static bool direct_for(const char *body, CUdeviceptr input)
{
    char src[1024];
    snprintf(src, sizeof src, "return layer \"d\" {\n%s\n}\n", body);
    fg_layer_ir *ir = fgt_load_string(src);
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    fg_plan *plan = fgt_plan_with(ir, &opts);
    fg_launch_table t;
    fg_error err = {{0}};
    if (fg_launch_table_init(&t, ir, plan, &err) != 0)
        fail_msg("%s", err.msg);
    bool packs = false;
    for (int i = 0; i < t.n_passes; i++)
        packs |= t.passes[i].pack_input;
    bool direct = fg_launch_input_direct(&t, input);
    if (direct && !packs)
        fail_msg("a direct input with no packing pass to skip: %s", body);
    fg_launch_table_free(&t);
    free(plan);
    free(ir);
    return direct;
}

/* The wgmma conv's A by TMA (FUSEGEN_WGMMA_A_TMA=2): cuTensorMapEncodeIm2col's arguments from the
 * plan and the batch, by hand (fg_im2col_args_for); the launcher encodes a pass's map again only
 * for another address or batch, fails clearly without the driver entry point, and applies the
 * <= 13.1 small-tensor workaround. A fake driver records the calls. */
static int fake_encodes, fake_version;
static fg_im2col_args fake_last;
static CUdeviceptr fake_address;
static CUresult fake_encode(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                            const cuuint64_t *dims, const cuuint64_t *strides, const int *lower, const int *upper,
                            cuuint32_t channels, cuuint32_t pixels, const cuuint32_t *elem_strides,
                            CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                            CUtensorMapFloatOOBfill fill)
{
    (void)interleave;
    fake_encodes++;
    memset(&fake_last, 0, sizeof fake_last);
    fake_last.type = type;
    fake_last.rank = rank;
    memcpy(fake_last.dims, dims, rank * sizeof *dims);
    memcpy(fake_last.strides, strides, (rank - 1) * sizeof *strides);
    memcpy(fake_last.lower, lower, (rank - 2) * sizeof *lower);
    memcpy(fake_last.upper, upper, (rank - 2) * sizeof *upper);
    memcpy(fake_last.elem_strides, elem_strides, rank * sizeof *elem_strides);
    fake_last.channels = channels;
    fake_last.pixels = pixels;
    fake_last.swizzle = swizzle;
    fake_last.l2 = l2;
    fake_last.fill = fill;
    fake_address = (CUdeviceptr)(uintptr_t)address;
    memset(map, 0xff, sizeof *map);
    return CUDA_SUCCESS;
}
static CUresult fake_version_of(int *v)
{
    *v = fake_version;
    return CUDA_SUCCESS;
}
static unsigned fake_conv_grid; /* the grid of the last wgmma conv launch (384 threads) */
static CUresult tma_fake_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned smem, CUstream s, void **params, void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)s, (void)params, (void)extra;
    if (bx == 384)
        fake_conv_grid = gx;
    return CUDA_SUCCESS;
}
static CUresult tma_fake_memset(CUdeviceptr p, unsigned v, size_t n, CUstream s)
{
    (void)p, (void)v, (void)n, (void)s;
    return CUDA_SUCCESS;
}

static fg_plan *tma_plan(const char *input, const char *conv, fg_layer_ir **ir)
{
    char src[512];
    snprintf(src, sizeof src, "return layer \"t\" {\n  input = { \"N\", %s },\n  %s,\n}\n", input, conv);
    *ir = fgt_load_string(src);
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.engine = FG_ENGINE_PREFER_WGMMA;
    opts.wgmma_a_tma = 2;
    fg_plan *plan = fgt_plan_with(*ir, &opts);
    assert_int_equal(plan->wgmma.a_tma, 2);
    return plan;
}

/* A fake driver that launches nothing (tma_fake_launch) and memory at made-up addresses, a
 * run of 132 SMs: enough for the launcher to plan and "launch" a wgmma layer's passes. */
static void fake_wgmma_run(fg_cuda *cu, fg_launch_memory *mem, CUdeviceptr *params)
{
    memset(cu, 0, sizeof *cu);
    cu->LaunchKernel = tma_fake_launch;
    cu->MemsetD32Async = tma_fake_memset;
    memset(mem, 0, sizeof *mem);
    mem->input = 0x100000;
    mem->output = 0x200000;
    mem->params = params;
    mem->workspace = 0x400000;
    mem->packed_w = 0x300000;
    mem->sm_count = 132;
    mem->counters_zero = true;
}

static void im2col_encode_arguments(void **state)
{
    (void)state;
    static const struct {
        const char *input, *conv;
        cuuint32_t rank;
        cuuint64_t dims[5], strides[4];
        int lower[3], upper[3];
        cuuint32_t elem_strides[5];
    } cases[] = {
        /* 2D pad 1 stride 1, fp32: 64 channels x 4 bytes a pixel; O = I: upper = 1 - 2 */
        {"64, 20, 30", "conv2d { out_channels = 64, kernel = 3, padding = 1 }", 4, {64, 30, 20, 3},
         {256, 256 * 30, 256 * 30 * 20}, {-1, -1}, {-1, -1}, {1, 1, 1, 1}},
        /* stride 2: O 15 x 10, upper W = 14 * 2 - 1 - 29 = -2, H = 9 * 2 - 1 - 19 = -2 */
        {"64, 20, 30", "conv2d { out_channels = 64, kernel = 3, padding = 1, stride = 2 }", 4, {64, 30, 20, 3},
         {256, 256 * 30, 256 * 30 * 20}, {-1, -1}, {-2, -2}, {1, 2, 2, 1}},
        /* dilation 2, pad 1: O = I - 2, upper = (I - 3) - 1 - (I - 1) = -3 */
        {"64, 20, 30", "conv2d { out_channels = 64, kernel = 3, padding = 1, dilation = 2 }", 4, {64, 30, 20, 3},
         {256, 256 * 30, 256 * 30 * 20}, {-1, -1}, {-3, -3}, {1, 1, 1, 1}},
        /* 3D pad (1, 0, 2) kernel 3: O D = 6, H = 10, W = 14 x ... upper D = 5 - 1 - 5 = -1, H = -2, W = 2 - 2 = 0 */
        {"32, 6, 12, 14", "conv3d { out_channels = 32, kernel = 3, padding = { 1, 0, 2 } }", 5, {32, 14, 12, 6, 3},
         {128, 128 * 14, 128 * 14 * 12, 128 * 14 * 12 * 6}, {-2, 0, -1}, {0, -2, -1}, {1, 1, 1, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_layer_ir *ir;
        fg_plan *plan = tma_plan(cases[i].input, cases[i].conv, &ir);
        fg_im2col_args a;
        fg_im2col_args_for(&plan->wgmma.im2col, 3, &a);
        assert_int_equal(a.type, CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
        assert_int_equal(a.rank, cases[i].rank);
        for (cuuint32_t d = 0; d < a.rank; d++) {
            assert_int_equal(a.dims[d], cases[i].dims[d]);
            assert_int_equal(a.elem_strides[d], cases[i].elem_strides[d]);
        }
        for (cuuint32_t d = 0; d + 1 < a.rank; d++)
            assert_int_equal(a.strides[d], cases[i].strides[d]);
        for (cuuint32_t d = 0; d + 2 < a.rank; d++) {
            assert_int_equal(a.lower[d], cases[i].lower[d]);
            assert_int_equal(a.upper[d], cases[i].upper[d]);
        }
        assert_int_equal(a.channels, 32);
        assert_int_equal(a.pixels, plan->wgmma.bm);
        assert_int_equal(a.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
        assert_int_equal(a.fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        assert_int_equal(a.bytes, cases[i].strides[a.rank - 2] * 3);
        free(plan);
        free(ir);
    }
    /* bf16: 64 channels a row, BFLOAT16 */
    fg_layer_ir *ir;
    fg_plan *plan = tma_plan("128, 16, 16", "dtype = \"bf16\",\n  conv2d { out_channels = 64, kernel = 3 }", &ir);
    fg_im2col_args a;
    fg_im2col_args_for(&plan->wgmma.im2col, 2, &a);
    assert_int_equal(a.type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    assert_int_equal(a.channels, 64);
    assert_int_equal(a.strides[0], 256);
    assert_int_equal(a.dims[3], 2);
    assert_int_equal(a.upper[0], -2);
    free(plan);
    free(ir);
}

/* The launcher's map cache and its failures, on a fake driver. */
static void im2col_encode_at_launch(void **state)
{
    (void)state;
    fg_layer_ir *ir;
    fg_plan *plan = tma_plan("64, 20, 30", "conv2d { out_channels = 64, kernel = 3, padding = 1 }", &ir);
    fg_launch_table t;
    fg_error err = {{0}};
    if (fg_launch_table_init(&t, ir, plan, &err) != 0)
        fail_msg("%s", err.msg);
    fg_cuda cu;
    CUfunction functions[FG_MAX_PASSES] = {0};
    CUdeviceptr params[8] = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x8000};
    fg_launch_memory mem;
    fake_wgmma_run(&cu, &mem, params);
    assert_int_equal(fg_launch_layout_for(&t, 2, &mem.layout, &err), 0);
    /* no entry point: a message naming the knob */
    assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 2, NULL, &err), -1);
    fgt_assert_contains(err.msg, "cuTensorMapEncodeIm2col");
    fgt_assert_contains(err.msg, "FUSEGEN_WGMMA_A_TMA");
    cu.TensorMapEncodeIm2col = fake_encode;
    cu.DriverGetVersion = fake_version_of;
    fake_version = 13000;
    fake_encodes = 0;
    assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 2, NULL, &err), 0);
    const int per_run = fake_encodes; /* hi and lo (fp32: 3xTF32) */
    assert_int_equal(per_run, 2);
    assert_int_equal(fake_last.dims[3], 2);
    assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 2, NULL, &err), 0);
    assert_int_equal(fake_encodes, per_run); /* the same address and batch: cached */
    mem.workspace = 0x800000; /* another workspace: the packed input moves */
    assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 2, NULL, &err), 0);
    assert_int_equal(fake_encodes, 2 * per_run);
    assert_int_equal(fake_address, mem.workspace + mem.layout.buffer_offset[plan->wgmma.packed_lo]);
    assert_int_equal(fg_launch_layout_for(&t, 5, &mem.layout, &err), 0);
    assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 5, NULL, &err), 0); /* another batch */
    assert_int_equal(fake_encodes, 3 * per_run);
    assert_int_equal(fake_last.dims[3], 5);
    /* the <= 13.1 workaround: bit 21 of word 1 cleared for a tensor under 128 KiB (5 x 150 KB is not) */
    CUtensorMap m;
    assert_int_equal(fg_launch_encode_im2col(&cu, &plan->wgmma.im2col, 0x10000, 5, &m, &err), 0);
    assert_true(m.opaque[1] & (1ull << 21));
    fg_layer_ir *small_ir;
    fg_plan *small = tma_plan("64, 8, 8", "conv2d { out_channels = 64, kernel = 3, padding = 1 }", &small_ir);
    assert_int_equal(fg_launch_encode_im2col(&cu, &small->wgmma.im2col, 0x10000, 1, &m, &err), 0);
    assert_false(m.opaque[1] & (1ull << 21));
    assert_true(m.opaque[1] & (1ull << 20));
    fake_version = 13020;
    assert_int_equal(fg_launch_encode_im2col(&cu, &small->wgmma.im2col, 0x10000, 1, &m, &err), 0);
    assert_true(m.opaque[1] & (1ull << 21));
    /* a misaligned address is refused before the driver */
    assert_int_equal(fg_launch_encode_im2col(&cu, &small->wgmma.im2col, 0x10008, 1, &m, &err), -1);
    fgt_assert_contains(err.msg, "16-byte aligned");
    free(small);
    free(small_ir);
    fg_launch_table_free(&t);
    free(plan);
    free(ir);
}

/* The persistent wgmma grid: one CTA a multiprocessor, two where the plan runs two
 * (fg_wgmma_tiling.ctas_per_sm), never more than the tiles. */
static void persistent_grid_per_multiprocessor(void **state)
{
    (void)state;
    for (int ctas = 1; ctas <= 2; ctas++) {
        fg_layer_ir *ir = fgt_load_string("return layer \"t\" {\n  input = { \"N\", 96, 56, 56 }, dtype = \"bf16\",\n"
                                          "  layout = \"channels_last\", precision = \"tf32\",\n"
                                          "  conv2d { out_channels = 384, kernel = 1 },\n}\n");
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.engine = FG_ENGINE_PREFER_WGMMA;
        opts.wgmma_ctas = ctas;
        opts.wgmma_alternate = 1; /* shared tiles of 128 pixels, as counted below (in turn: 64) */
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->wgmma.ctas_per_sm, ctas);
        fg_launch_table t;
        fg_error err = {{0}};
        if (fg_launch_table_init(&t, ir, plan, &err) != 0)
            fail_msg("%s", err.msg);
        fg_cuda cu;
        CUfunction functions[FG_MAX_PASSES] = {0};
        CUdeviceptr params[8] = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x8000};
        fg_launch_memory mem;
        fake_wgmma_run(&cu, &mem, params);
        cu.TensorMapEncodeIm2col = fake_encode;
        cu.DriverGetVersion = fake_version_of;
        fake_version = 13000;
        /* batch 8: 25 x 8 tiles of 128 pixels a channel block, more than 264 */
        assert_int_equal(fg_launch_layout_for(&t, 8, &mem.layout, &err), 0);
        assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 8, NULL, &err), 0);
        assert_int_equal(fake_conv_grid, 132 * ctas);
        /* batch 1: 25 x 3 or 25 x 6 tiles, fewer than the slots */
        assert_int_equal(fg_launch_layout_for(&t, 1, &mem.layout, &err), 0);
        assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 1, NULL, &err), 0);
        assert_int_equal(fake_conv_grid, ctas == 2 ? 150 : 75);
        fg_launch_table_free(&t);
        free(plan);
        free(ir);
    }
}

static void input_direct(void **state)
{
    (void)state;
    const char *cl_bf16 = "input = { \"N\", 64, 14, 14 }, dtype = \"bf16\", layout = \"channels_last\",\n"
                          "conv2d { out_channels = 64, kernel = 3, padding = 1 }";
    assert_true(direct_for(cl_bf16, 0x10000));
    assert_true(direct_for(cl_bf16, 0x10010));
    assert_false(direct_for(cl_bf16, 0x10002)); /* one bf16 element off 16 bytes */
    assert_false(direct_for(cl_bf16, 0x10008));
    /* NCHW, fp32 (TF32 hi and lo), a prologue, padding channels (12 -> 16): packed */
    assert_false(direct_for("input = { \"N\", 64, 14, 14 }, dtype = \"bf16\",\n"
                            "conv2d { out_channels = 64, kernel = 3, padding = 1 }",
                            0x10000));
    assert_false(direct_for("input = { \"N\", 64, 14, 14 }, layout = \"channels_last\",\n"
                            "conv2d { out_channels = 64, kernel = 3, padding = 1 }",
                            0x10000));
    assert_false(direct_for("input = { \"N\", 64, 14, 14 }, dtype = \"bf16\", layout = \"channels_last\",\n"
                            "group_norm { groups = 8 }, conv2d { out_channels = 64, kernel = 3, padding = 1 }",
                            0x10000));
    assert_false(direct_for("input = { \"N\", 12, 14, 14 }, dtype = \"fp16\", layout = \"channels_last\",\n"
                            "conv2d { out_channels = 64, kernel = 3, padding = 1 }",
                            0x10000));
}

/* A driver that launches nothing: it records which kernels a launch enqueues (the table's
 * scratch holds the pointers each was given) and answers capture queries as told. */
static struct {
    int n;
    CUfunction launched[FG_MAX_PASSES * 2];
    CUresult capture_result;
    CUstreamCaptureStatus capture_status;
} fake;

static CUresult fake_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned smem, CUstream stream, void **params, void **extra)
{
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)stream, (void)params, (void)extra;
    if (fake.n < FG_MAX_PASSES * 2)
        fake.launched[fake.n++] = f;
    return CUDA_SUCCESS;
}

static CUresult fake_memset(CUdeviceptr p, unsigned v, size_t n, CUstream stream)
{
    (void)p, (void)v, (void)n, (void)stream;
    return CUDA_SUCCESS;
}

static CUresult fake_is_capturing(CUstream stream, CUstreamCaptureStatus *status)
{
    (void)stream;
    *status = fake.capture_status;
    return fake.capture_result;
}

static CUresult fake_error_name(CUresult r, const char **s)
{
    (void)r;
    *s = "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
}

/* The pointer pass i was last given for its argument naming buffer `buffer` (0: none). */
static CUdeviceptr buffer_arg(const fg_launch_table *t, int i, int buffer)
{
    for (int a = 0; a < t->passes[i].n_args; a++)
        if (t->passes[i].args[a].kind == FG_ARG_BUFFER && t->passes[i].args[a].index == buffer)
            return t->passes[i].ptrs[a];
    return 0;
}

/* The wgmma engine's weight pack is the layer's, once per bind, not a run's: fg_launch_run
 * enqueues every pass but it and gives the conv the image at mem->packed_w (refusing a run
 * without one), fg_launch_pack_weights enqueues it alone, reading the conv weight's binding
 * and writing that image; the image is no piece of the workspace; a plan whose pack does
 * not fit its tiling is refused. fp32 (TF32 hi and lo) and bf16 operands. */
static void weights_packed_outside_runs(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "input = { \"N\", 64, 14, 14 },\nconv2d { out_channels = 64, kernel = 3, padding = 1 }, relu {}",
        "input = { \"N\", 64, 14, 14 }, dtype = \"bf16\",\nconv2d { out_channels = 64, kernel = 3, padding = 1 }",
    };
    fg_cuda cu;
    memset(&cu, 0, sizeof cu);
    cu.LaunchKernel = fake_launch;
    cu.MemsetD32Async = fake_memset;
    cu.GetErrorName = fake_error_name;
    cu.GetErrorString = fake_error_name;
    for (size_t c = 0; c < sizeof bodies / sizeof *bodies; c++) {
        char src[1024];
        snprintf(src, sizeof src, "return layer \"p\" {\n%s\n}\n", bodies[c]);
        fg_layer_ir *ir = fgt_load_string(src);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.engine = FG_ENGINE_PREFER_WGMMA;
        opts.wgmma_a_tma = 1; /* cp.async: the fake driver encodes no tensor maps (the TMA launch: below) */
        fg_plan *plan = fgt_plan_with(ir, &opts), *bad = malloc(sizeof *bad);
        assert_non_null(bad);
        const fg_wgmma_tiling *w = &plan->wgmma;
        assert_true(w->parts > 0);
        layout_matches_the_plan(ir, plan);
        fg_launch_table t;
        fg_error err = {{0}};
        assert_int_equal(fg_launch_table_init(&t, ir, plan, &err), 0);
        assert_int_equal(t.packed_w, w->packed_w);
        assert_int_equal(fg_launch_packed_bytes(&t), 4 * (uint64_t)plan->buffers[w->packed_w].fixed);
        int pack = -1, conv = -1;
        CUfunction functions[FG_MAX_PASSES];
        for (int i = 0; i < t.n_passes; i++) {
            functions[i] = (CUfunction)(uintptr_t)(0x100 + i);
            assert_int_equal(t.passes[i].pack_weights, plan->passes[i].kind == FG_PASS_PACK_WEIGHTS);
            if (t.passes[i].pack_weights)
                pack = i;
            if (plan->passes[i].kind == FG_PASS_CONV)
                conv = i;
        }
        assert_true(pack >= 0 && conv >= 0);
        fg_launch_layout layout;
        assert_int_equal(fg_launch_layout_for(&t, 1, &layout, &err), 0);
        /* a run: every pass but the pack, the conv reading the layer's image */
        CUdeviceptr params[FG_MAX_KERNEL_PARAMS];
        for (int i = 0; i < FG_MAX_KERNEL_PARAMS; i++)
            params[i] = 0x10000 * (CUdeviceptr)(i + 1);
        fg_launch_memory mem = {.input = 0x1000000, .output = 0x2000000, .params = params, .workspace = 0x3000000,
                                .packed_w = 0x4000000, .layout = layout, .sm_count = 132, .counters_zero = true};
        fake.n = 0;
        assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 1, NULL, &err), 0);
        assert_int_equal(fake.n, t.n_passes - 1);
        for (int k = 0; k < fake.n; k++)
            assert_true(fake.launched[k] != functions[pack]);
        assert_int_equal(buffer_arg(&t, conv, w->packed_w), 0x4000000);
        /* without an image, no run */
        mem.packed_w = 0;
        fake.n = 0;
        assert_int_equal(fg_launch_run(&cu, &t, functions, &mem, 1, NULL, &err), -1);
        fgt_assert_contains(err.msg, "packed weights are not written");
        assert_int_equal(fake.n, 0);
        /* the pack alone: the conv's weight into the image */
        assert_int_equal(fg_launch_pack_weights(&cu, &t, functions, params, 0x5000000, NULL, &err), 0);
        assert_int_equal(fake.n, 1);
        assert_true(fake.launched[0] == functions[pack]);
        assert_int_equal(buffer_arg(&t, pack, w->packed_w), 0x5000000);
        assert_int_equal(t.passes[pack].args[0].kind, FG_ARG_PARAM);
        assert_int_equal(t.passes[pack].ptrs[0], params[t.conv_weight]);
        fg_launch_table_free(&t);

        *bad = *plan;
        bad->buffers[w->packed_w].per_sample = 1;
        refused(ir, bad, "weight pack");
        *bad = *plan;
        for (int i = 0; i < bad->n_passes; i++) /* the input pack writing into the image */
            for (int a = 0; a < bad->passes[i].n_args; a++)
                if (bad->passes[i].kind == FG_PASS_PACK_INPUT && bad->passes[i].args[a].kind == FG_ARG_BUFFER)
                    bad->passes[i].args[a].index = w->packed_w;
        refused(ir, bad, "reads the packed weights");
        free(bad);
        free(plan);
        free(ir);
    }
}

/* The capture query a run asks before it would pack (graph_capture.h): a capture in
 * progress, an invalidated one and a query that fails (the legacy stream beside another
 * stream's capture) all count as capturing. */
static void capture_query(void **state)
{
    (void)state;
    fg_cuda cu;
    memset(&cu, 0, sizeof cu);
    assert_true(fg_stream_capturing(&cu, NULL)); /* no query: assume the worst */
    cu.StreamIsCapturing = fake_is_capturing;
    fake.capture_result = CUDA_SUCCESS;
    fake.capture_status = CU_STREAM_CAPTURE_STATUS_NONE;
    assert_false(fg_stream_capturing(&cu, NULL));
    fake.capture_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    assert_true(fg_stream_capturing(&cu, NULL));
    fake.capture_status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    assert_true(fg_stream_capturing(&cu, NULL));
    fake.capture_status = CU_STREAM_CAPTURE_STATUS_NONE;
    fake.capture_result = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    assert_true(fg_stream_capturing(&cu, NULL));
}

int main(void)
{
    char *dir = fgt_tmpdir("launcher");
    fgt_isolate_environment(dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_specs),
        cmocka_unit_test(bad_plans_refused),
        cmocka_unit_test(split_k_workspace),
        cmocka_unit_test(persistent_grid_per_multiprocessor),
        cmocka_unit_test(input_direct),
        cmocka_unit_test(im2col_encode_arguments),
        cmocka_unit_test(im2col_encode_at_launch),
        cmocka_unit_test(weights_packed_outside_runs),
        cmocka_unit_test(capture_query),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fgt_rmtree(dir);
    free(dir);
    return rc;
}
