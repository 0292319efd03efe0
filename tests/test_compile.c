/* SPDX-License-Identifier: Apache-2.0 */
/* NVRTC compilation of every spec for sm_80 and sm_90, on a machine with no GPU: each
 * produces a CUDA ELF cubin for the right architecture with one kernel per planned pass,
 * and ptxas reports no spills and no stack frame for any kernel. */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block.h"
#include "block_specs.h"
#include "nvrtc_compiler.h"
#include "render.h"
#include "spec_loader.h"
#include "channel_norm_specs.h"
#include "channel_reduce_specs.h"
#include "prologue_specs.h"
#include "wgmma_reach_specs.h"
#include "split_k_specs.h"
#include "test_util.h"

static const char *const archs[] = {"sm_80", "sm_90"};

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The cubin is a 64-bit little-endian ELF for EM_CUDA (190) whose flags name the SM. */
static void check_cubin(const char *what, const unsigned char *cubin, size_t size, int sm)
{
    if (size < 64 || memcmp(cubin, "\x7f" "ELF", 4) != 0)
        fail_msg("%s: not an ELF file (%zu bytes)", what, size);
    assert_int_equal(cubin[4], 2); /* ELFCLASS64 */
    assert_int_equal(cubin[5], 1); /* little-endian */
    unsigned machine = (unsigned)cubin[18] | (unsigned)cubin[19] << 8;
    if (machine != 190)
        fail_msg("%s: e_machine %u, expected EM_CUDA (190)", what, machine);
    uint32_t flags = le32(cubin + 48);
    if ((flags & 0xff) != (uint32_t)sm && ((flags >> 8) & 0xff) != (uint32_t)sm)
        fail_msg("%s: e_flags 0x%x do not name sm_%d", what, flags, sm);
}

/* The tensor-core engine's per-step block accumulation (fp32 accuracy at any input scale,
 * bench/NOTES.md v8) leaves a few registers' worth of spills in the reference layers' conv
 * passes at the 128-register cap (28-96 bytes, in the cost v8 measured); more than this is
 * a regression. */
enum { SPILL_TOLERANCE_BYTES = 128 };

/* One kernel per pass, by name; no spills (but the tolerance above); registers that fit the
 * launch. Every problem is printed (a failing run shows all of them at once); returns how
 * many. */
static int check_resources(const char *what, const fg_plan *plan, const fg_compiled *c)
{
    int problems = 0;
#define PROBLEM(...) (print_error("ERROR: " __VA_ARGS__), print_error("\n"), problems++)
    if (c->n_kernels != plan->n_passes)
        PROBLEM("%s: ptxas reported %d kernels, the plan has %d passes", what, c->n_kernels, plan->n_passes);
    for (int p = 0; p < plan->n_passes; p++) {
        const fg_kernel_resources *k = NULL;
        for (int i = 0; i < c->n_kernels; i++)
            if (strcmp(c->kernels[i].name, plan->passes[p].kernel) == 0)
                k = &c->kernels[i];
        if (!k) {
            PROBLEM("%s: no resources reported for kernel %s", what, plan->passes[p].kernel);
            continue;
        }
        if (k->spill_stores > SPILL_TOLERANCE_BYTES || k->spill_loads > SPILL_TOLERANCE_BYTES ||
            k->stack_frame > SPILL_TOLERANCE_BYTES)
            PROBLEM("%s: kernel %s spills: %d bytes stack frame, %d bytes spill stores, %d bytes spill loads", what,
                    k->name, k->stack_frame, k->spill_stores, k->spill_loads);
        if (k->registers <= 0 || k->registers > 255)
            PROBLEM("%s: kernel %s uses %d registers", what, k->name, k->registers);
        int block = plan->passes[p].launch.block;
        if (k->registers * block > 65536)
            PROBLEM("%s: kernel %s: %d registers x %d threads do not fit an SM", what, k->name, k->registers, block);
    }
#undef PROBLEM
    return problems;
}

/* Compiles (ir, plan) for each arch; returns the number of resource problems. */
static int compile_ir(fg_layer_ir *ir, int force_strategy, const char *const *arch_list, int n_archs)
{
    fg_plan *plan = fgt_plan(ir, force_strategy);
    fg_rendered src;
    fg_error err = {{0}};
    if (fg_render(ir, plan, &src, &err) != 0)
        fail_msg("%s: %s", ir->name, err.msg);
    fgt_assert_launch_bounds(src.source, plan, ir->name);
    int problems = 0;
    for (int a = 0; a < n_archs; a++) {
        fg_compiled c;
        char what[256];
        snprintf(what, sizeof what, "%s for %s", ir->name, arch_list[a]);
        if (fg_nvrtc_compile(src.source, ir->name, arch_list[a], NULL, &c, &err) != 0)
            fail_msg("%s: %s", what, err.msg);
        assert_non_null(c.cubin);
        assert_true(c.size > 0);
        assert_true(c.seconds > 0);
        check_cubin(what, c.cubin, c.size, atoi(arch_list[a] + 3));
        problems += check_resources(what, plan, &c);
        fg_compiled_free(&c);
        assert_null(c.cubin);
    }
    fg_rendered_free(&src);
    free(plan);
    return problems;
}

static void reference_specs(void **state)
{
    (void)state;
    int problems = 0;
    for (int i = 0; i < FGT_N_REFERENCE_SPECS; i++) {
        fg_layer_ir *ir = fgt_load_spec(fgt_reference_specs[i]);
        problems += compile_ir(ir, -1, archs, 2);
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* Renders (ir, plan) and compiles it for `arch`: the cubin, the resources (returns the
 * problems) and no ptxas warning about wgmma (a serialized wgmma is a generator bug). When
 * `needle` is given, the source must contain it. */
static int compile_arch(const fg_layer_ir *ir, const fg_plan *plan, const char *what, const char *needle,
                        const char *arch)
{
    fg_rendered src;
    fg_error err = {{0}};
    if (fg_render(ir, plan, &src, &err) != 0)
        fail_msg("%s: %s", ir->name, err.msg);
    if (needle && !strstr(src.source, needle))
        fail_msg("%s: the source has no '%s'", what, needle);
    fgt_assert_launch_bounds(src.source, plan, what);
    fg_compiled c;
    if (fg_nvrtc_compile(src.source, ir->name, arch, NULL, &c, &err) != 0)
        fail_msg("%s: %s", what, err.msg);
    check_cubin(what, c.cubin, c.size, atoi(arch + 3));
    int problems = check_resources(what, plan, &c);
    if (c.wgmma_warnings)
        fail_msg("%s: ptxas warned about wgmma (serialized?)", what);
    fg_compiled_free(&c);
    fg_rendered_free(&src);
    return problems;
}

static int compile_sm90a(const fg_layer_ir *ir, const fg_plan *plan, const char *what, const char *needle)
{
    return compile_arch(ir, plan, what, needle, "sm_90a");
}

/* The SASS instructions of `kernel` in a cubin (compiled here, so trusted): its .text.<kernel>
 * section's bytes / 16, or -1 where it has none. How large a kernel's code is, without a GPU:
 * bench/NOTES.md v44 found one stalled on instruction fetch at 7912. */
static long kernel_instructions(const unsigned char *cubin, size_t size, const char *kernel)
{
    Elf64_Ehdr eh;
    memcpy(&eh, cubin, sizeof eh);
    assert_true(eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr) <= size);
    Elf64_Shdr names;
    memcpy(&names, cubin + eh.e_shoff + (size_t)eh.e_shstrndx * sizeof(Elf64_Shdr), sizeof names);
    char want[256];
    snprintf(want, sizeof want, ".text.%s", kernel);
    for (int i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        memcpy(&sh, cubin + eh.e_shoff + (size_t)i * sizeof sh, sizeof sh);
        assert_true(names.sh_offset + sh.sh_name < size);
        if (strcmp((const char *)cubin + names.sh_offset + sh.sh_name, want) == 0)
            return (long)(sh.sh_size / 16);
    }
    return -1;
}

/* The staged epilogue's rows 8 at a time where its chain calls math functions (planner.c,
 * staged_rows_unrolled): ConvNeXt 384's 1x1 conv + GELU compiles to less than 4500
 * instructions, against more than 6000 with all 16 rows unrolled (FUSEGEN_WGMMA_EPI_ROWS=16; v44
 * measured 7912 and 39 % of its warp samples waiting on instruction fetch); a light chain
 * (ResNet's 1x1 + residual) keeps all 16 at that size. Those are its tiles of one sample
 * (FUSEGEN_WGMMA_FLAT=1), whose epilogue has a full tile's copy and a checked one; as flat tiles
 * (its default since v47: one copy, each output's row checked by a predicated store) it is
 * 1744 and 2688. The bounds are NVRTC 13.0's numbers with a margin; another ptxas may move
 * them. */
/* The block spec bench/ab-specs/<name>.lua into b. */
static void load_ab_block(const char *name, fg_block_ir *b)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/bench/ab-specs/%s.lua", FUSEGEN_SOURCE_DIR, name);
    fg_error err = {{0}};
    if (fg_block_spec_load_file(path, b, &err) != 0)
        fail_msg("%s: %s", path, err.msg);
}

/* The SASS instructions of (ir, plan)'s conv kernel, compiled for sm_90a (kernel_instructions);
 * fails the test where ptxas reports a resource problem (a spill) */
static long conv_kernel_instructions(const fg_layer_ir *ir, const fg_plan *plan, const char *what)
{
    fg_rendered src;
    fg_error err = {{0}};
    if (fg_render(ir, plan, &src, &err) != 0)
        fail_msg("%s: %s", what, err.msg);
    fg_compiled c;
    if (fg_nvrtc_compile(src.source, ir->name, "sm_90a", NULL, &c, &err) != 0)
        fail_msg("%s: %s", what, err.msg);
    check_cubin(what, c.cubin, c.size, 90);
    assert_int_equal(check_resources(what, plan, &c), 0);
    long conv = -1;
    for (int p = 0; p < plan->n_passes; p++)
        if (plan->passes[p].kind == FG_PASS_CONV)
            conv = kernel_instructions(c.cubin, c.size, plan->passes[p].kernel);
    fg_compiled_free(&c);
    fg_rendered_free(&src);
    return conv;
}

static void staged_epilogue_code_size(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer, rows_asked, rows, flat_asked;
        long most, least; /* the conv kernel's instructions */
    } cases[] = {
        {"convnext384_bf16_cl_tf32", 1, 0, 8, 1, 4500, 0},
        {"convnext384_bf16_cl_tf32", 1, 16, 16, 1, 100000, 6000},
        {"convnext384_bf16_cl_tf32", 1, 0, 8, 0, 2500, 0},     /* flat: 1744 */
        {"convnext384_bf16_cl_tf32", 1, 16, 16, 0, 4000, 2000}, /* flat: 2688 */
        {"resnet_block_bf16_cl_tf32", 2, 0, 16, 0, 4500, 0},   /* 3680: all rows unrolled stay small */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_block_ir b;
        load_ab_block(cases[i].spec, &b);
        const fg_layer_ir *ir = &b.layers[cases[i].layer];
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.wgmma_epi_rows = cases[i].rows_asked;
        opts.wgmma_flat = cases[i].flat_asked;
        opts.fast_gelu = 1; /* erff, whose instructions the bounds were set by (the fast form: 5848 at 16 rows) */
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->wgmma.epi_unroll, cases[i].rows);
        assert_int_equal(plan->wgmma.flat, cases[i].flat_asked != 1 && cases[i].layer == 1);
        long conv = conv_kernel_instructions(ir, plan, ir->name);
        print_message("%s layer %s, rows %d: the conv kernel has %ld instructions\n", cases[i].spec, ir->name,
                      cases[i].rows, conv);
        assert_true(conv > cases[i].least && conv < cases[i].most);
        free(plan);
        fg_block_ir_free(&b);
    }
}

/* GELU by the five-term fit (FUSEGEN_FAST_GELU=2, fg_gelu_fast) compiles without a spill and
 * shortens ConvNeXt 384's 1x1 + GELU kernel (NVRTC 13.0: 1744 -> 1464 instructions, the
 * epilogue's ~47 to ~39 an output), the source carrying the helper only then. */
static void fast_gelu_compiles_shorter(void **state)
{
    (void)state;
    long n[2];
    for (int fast = 0; fast < 2; fast++) {
        fg_block_ir b;
        load_ab_block("convnext384_bf16_cl_tf32", &b);
        const fg_layer_ir *ir = &b.layers[1];
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.fast_gelu = fast ? 2 : 1;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        assert_int_equal(plan->fast_gelu, fast);
        fg_rendered src;
        fg_error err = {{0}};
        assert_int_equal(fg_render(ir, plan, &src, &err), 0);
        assert_int_equal(strstr(src.source, "fg_gelu_fast(") != NULL, fast);
        assert_int_equal(strstr(src.source, "erff(") != NULL, !fast);
        fg_rendered_free(&src);
        n[fast] = conv_kernel_instructions(ir, plan, ir->name);
        print_message("convnext384 layer b, FUSEGEN_FAST_GELU=%d: %ld instructions\n", fast ? 2 : 1, n[fast]);
        free(plan);
        fg_block_ir_free(&b);
    }
    assert_true(n[1] > 0 && n[1] + 150 < n[0]);
}

/* The staged epilogue's 16-byte vectors (FUSEGEN_WGMMA_EPI_VEC=2, fg_wgmma_epi_vec) compile with
 * no spill in every A/B block's layer that takes them: the 1x1 + GELU layers (flat tiles,
 * predicated stores), the residual's tile in shared memory read 16 bytes a lane (ConvNeXt's,
 * ResNet's, SD's last layers), whole tiles and partial ones. (NVRTC 13.0: ConvNeXt 384's 1x1 +
 * GELU kernel 1744 -> 1768 instructions, the scalar fallback for unaligned tensors included,
 * while its epilogue's loop runs ~259 instead of 309 for a lane's 8 outputs: bench/NOTES.md v48.) */
static void epi_vec_compiles(void **state)
{
    (void)state;
    static const char *const specs[] = {"convnext_bf16_cl_tf32", "convnext384_bf16_cl_tf32", "convnext768_bf16_cl_tf32",
                                        "resnet_block_bf16_cl_tf32", "resnet2048_bf16_cl_tf32",
                                        "sd_resnet_block_bf16_cl_tf32"};
    int vectorized = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        fg_block_ir b;
        load_ab_block(specs[i], &b);
        for (int l = 0; l < b.n_layers; l++) {
            const fg_layer_ir *ir = &b.layers[l];
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.wgmma_epi_vec = 2;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            int vec = 1;
            for (int p = 0; p < plan->n_passes; p++)
                if (fg_wgmma_epi_vec(plan, &plan->passes[p]) > 1)
                    vec = fg_wgmma_epi_vec(plan, &plan->passes[p]);
            if (vec > 1) {
                long n = conv_kernel_instructions(ir, plan, ir->name);
                print_message("%s layer %s, vectors of %d: %ld instructions\n", specs[i], ir->name, vec, n);
                assert_true(n > 0);
                vectorized++;
            }
            free(plan);
        }
        fg_block_ir_free(&b);
    }
    assert_true(vectorized >= 10);
}

/* A flat tile's outputs checked by predicated stores (the default; FUSEGEN_WGMMA_FLAT_PREDICATED=1: a branch): the
 * 1x1 conv kernels of ConvNeXt's and ResNet-50's last stages (7x7, flat) compile with no
 * spills to fewer instructions than with a branch around each output, which made every row
 * a block of its own (ConvNeXt 768's GELU layer: 3816 against 1680 instructions with its rows
 * indexed as one run of the batch's pixels, NVRTC 13.0; bench/NOTES.md v45). */
static void flat_tiles_predicated(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int layer, alternate; /* FUSEGEN_WGMMA_ALTERNATE (0: the default) */
    } cases[] = {
        {"convnext768_bf16_cl_tf32", 1, 0},
        {"convnext768_bf16_cl_tf32", 2, 0}, /* the residual's tile in shared memory */
        /* shared tiles, as v46 measured the stores on it: its default since v49 (units in turn
         * with split K) is 2440 instructions predicated against 2360 with the branch, and was
         * measured faster than the shared tiles (bench/NOTES.md v49) */
        {"resnet2048_bf16_cl_tf32", 0, 1},
        {"resnet2048_bf16_cl_tf32", 2, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_block_ir b;
        load_ab_block(cases[i].spec, &b);
        const fg_layer_ir *ir = &b.layers[cases[i].layer];
        long conv[2] = {-1, -1};
        for (int asked = 1; asked <= 2; asked++) {
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.wgmma_flat_predicated = asked;
            opts.wgmma_alternate = cases[i].alternate;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            assert_int_equal(plan->wgmma.flat_predicated, asked == 2);
            fg_rendered src;
            fg_error err = {{0}};
            if (fg_render(ir, plan, &src, &err) != 0)
                fail_msg("%s: %s", ir->name, err.msg);
            if ((strstr(src.source, "if (ok) ") != NULL) != (asked == 2))
                fail_msg("%s: predicated stores %s", ir->name, asked == 2 ? "missing" : "without the knob");
            fg_rendered_free(&src);
            char what[256];
            snprintf(what, sizeof what, "%s layer %s, FUSEGEN_WGMMA_FLAT_PREDICATED=%d", cases[i].spec, ir->name, asked);
            conv[asked - 1] = conv_kernel_instructions(ir, plan, what);
            print_message("%s: the conv kernel has %ld instructions\n", what, conv[asked - 1]);
            free(plan);
        }
        assert_true(conv[1] > 0 && conv[1] < conv[0]);
        fg_block_ir_free(&b);
    }
    /* a 3x3 conv to 96 channels and a 1x1 in 2 groups with per-pixel parameters (predicated,
     * no spills); a layer reading two per-pixel block tensors, one prefetched into registers
     * (the branch: the interleaved rows spilled) */
    static const char blk[] =
        "return block \"t\" {\n  input = { \"N\", 128, 7, 7 }, dtype = \"bf16\", layout = \"channels_last\",\n"
        "  inputs = { skip = { \"N\", 96, 7, 7 } },\n"
        "  layer \"k3\" { precision = \"tf32\", conv2d { name = \"c1\", out_channels = 96, kernel = 3, padding = 1 }, relu {} },\n"
        "  layer \"g2\" { precision = \"tf32\", conv2d { name = \"c2\", out_channels = 128, kernel = 1, groups = 2 },\n"
        "    mul { param = \"s\", shape = { 128, 7, 7 } }, gelu {} },\n"
        "  layer \"two\" { precision = \"tf32\", conv2d { name = \"c3\", out_channels = 96, kernel = 1 },\n"
        "    mul { tensor = \"skip\" }, add { tensor = \"k3\" } },\n}\n";
    static const bool predicated[] = {true, true, false};
    /* the rows as one run of the batch's pixels: not where a parameter has a value a pixel */
    static const bool linear[] = {true, false, false};
    fg_block_ir b;
    fg_error err = {{0}};
    if (fg_block_spec_load_string("t.lua", blk, sizeof blk - 1, &b, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(b.n_layers, 3);
    for (int l = 0; l < b.n_layers; l++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.wgmma_flat_predicated = 2;
        fg_plan *plan = fgt_plan_with(&b.layers[l], &opts);
        assert_true(plan->wgmma.flat);
        assert_int_equal(plan->wgmma.flat_predicated, predicated[l]);
        assert_int_equal(plan->wgmma.flat_rows_linear, linear[l]);
        char what[256];
        snprintf(what, sizeof what, "layer %s, FUSEGEN_WGMMA_FLAT_PREDICATED=2", b.layers[l].name);
        print_message("%s: the conv kernel has %ld instructions\n", what,
                      conv_kernel_instructions(&b.layers[l], plan, what));
        free(plan);
    }
    fg_block_ir_free(&b);
}

/* The consumer warpgroups' tiles in turn (FUSEGEN_WGMMA_ALTERNATE=2) on the A/B blocks of
 * bench/ab-specs/ that take it (bf16 and fp32 precision, TF32 operands, flat tiles, the
 * residual in shared memory, block accumulation in ping-pong; flat tiles with predicated stores
 * too): every conv kernel compiles for sm_90a with its turn barriers, no spills and no
 * serialized wgmma; the split-capable ones with each warpgroup's own fixup. */
static void wgmma_tiles_in_turn(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "convnext768_bf16_cl_tf32",  "convnext384_bf16_cl_tf32", "convnext_bf16_cl_tf32", "resnet_block_bf16_cl_tf32",
        "resnet_block_bf16_cl_fp32", "resnet2048_bf16_cl_tf32",  "conv_64_128_256",       "sd_resnet_block_bf16_cl_tf32",
    };
    int problems = 0, alternate = 0, split = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        fg_block_ir b;
        load_ab_block(specs[i], &b);
        for (int l = 0; l < b.n_layers; l++) {
            const fg_layer_ir *ir = &b.layers[l];
            for (int predicated = 1; predicated <= 2; predicated++) { /* with FUSEGEN_WGMMA_FLAT_PREDICATED too */
                fg_plan_options opts;
                fg_plan_options_for_arch(&opts, "sm_90a");
                opts.wgmma_alternate = 2;
                opts.wgmma_flat_predicated = predicated;
                fg_plan *plan = fgt_plan_with(ir, &opts);
                if (plan->wgmma.alternate && (predicated == 1 || plan->wgmma.flat_predicated)) {
                    char what[256];
                    snprintf(what, sizeof what, "%s layer %s, tiles in turn%s", specs[i], ir->name,
                             predicated == 2 ? ", predicated stores" : "");
                    /* with split K, the units in turn and each warpgroup's own fixup */
                    const bool splits = plan->wgmma.split_k > 1;
                    problems += compile_sm90a(ir, plan, what, splits ? "split_flag + cw)" : "fgw_mbar_wait(bar_turn + 8 * (1 - cw)");
                    alternate++;
                    split += splits;
                }
                free(plan);
            }
        }
        fg_block_ir_free(&b);
    }
    print_message("%d conv layers with their tiles in turn compiled, %d of them split-capable\n", alternate, split);
    assert_true(alternate >= 22); /* 17, and the 7x7 stages' five flat layers with predicated stores too */
    /* ConvNeXt 768's and 384's 1x1 back, ResNet 2048's 1x1 and 3x3 (the last two flat, twice) */
    assert_true(split >= 6);
    assert_int_equal(problems, 0);
}

/* The wgmma engine (sm_90a) on every reference layer, in both precisions: compiles, no
 * spills, and no ptxas warning about wgmma (a serialized wgmma is a generator bug). */
static void wgmma_engine(void **state)
{
    (void)state;
    int problems = 0;
    for (int i = 0; i < FGT_N_REFERENCE_SPECS; i++) {
        fg_layer_ir *ir = fgt_load_spec(fgt_reference_specs[i]);
        for (int precision = 0; precision < 2; precision++) {
            ir->precision = precision ? FG_PRECISION_TF32 : FG_PRECISION_FP32;
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.engine = FG_ENGINE_PREFER_WGMMA;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            bool wgmma = false;
            for (int p = 0; p < plan->n_passes; p++)
                wgmma |= plan->passes[p].kind == FG_PASS_CONV && plan->passes[p].conv.engine == FG_CONV_WGMMA;
            assert_true(wgmma);
            char what[256];
            snprintf(what, sizeof what, "%s (%s) for sm_90a", ir->name, precision ? "tf32" : "fp32");
            problems += compile_sm90a(ir, plan, what, NULL);
            free(plan);
        }
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* The wgmma engine with split K (tests/split_k_specs.h, the GPU test's layers): each plans the
 * splits the GPU test expects at its batch, renders the split kernel and compiles for
 * sm_90a without spills or wgmma warnings; the same with the splits counted in waves
 * (FUSEGEN_SPLIT_WAVES=1, which bench/gpu-check runs the GPU test with), whose kernel computes
 * its splits by the rendered rule; and with the tiles in turn asked for (FUSEGEN_WGMMA_ALTERNATE=2,
 * also run by bench/gpu-check): a unit is one warpgroup's, its fixup that warpgroup's alone. */
static void wgmma_split_k(void **state)
{
    (void)state;
    int problems = 0;
    /* rule 0: one wave; 1: counted in waves; 2: one wave, the tiles in turn where they can */
    for (int rule = 0; rule < 3; rule++)
        for (int i = 0; i < N_SPLIT_K_CASES; i++) {
            const split_k_case *k = &split_k_cases[i];
            const int waves = rule == 1;
            const int want = rule == 1 ? k->splits_waves : rule == 2 ? k->splits_turns : k->splits;
            fg_layer_ir *ir = fgt_load_string(k->source);
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.split_waves = waves;
            if (rule == 2)
                opts.wgmma_alternate = 2;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            int conv = -1;
            for (int p = 0; p < plan->n_passes; p++)
                if (plan->passes[p].kind == FG_PASS_CONV && plan->passes[p].conv.engine == FG_CONV_WGMMA)
                    conv = p;
            if (conv < 0 || plan->wgmma.split_k < 2)
                fail_msg("%s: no wgmma conv with split K", k->name);
            assert_int_equal(plan->wgmma.split_waves, waves);
            int splits =
                fg_wgmma_splits(&plan->wgmma, fg_wgmma_tiles(&plan->wgmma, plan->passes[conv].launch.grid_x, k->batch));
            if (splits != want)
                fail_msg("%s: %d splits at batch %lld%s, the GPU test expects %d", k->name, splits, (long long)k->batch,
                         waves ? " counted in waves" : rule == 2 ? " with the tiles in turn" : "", want);
            /* with the turns asked for, every case without statistics partials takes them */
            if (rule == 2 && !plan->wgmma.alternate && !strstr(k->name, "norm") && !strstr(k->name, "softmax"))
                fail_msg("%s: no tiles in turn with FUSEGEN_WGMMA_ALTERNATE=2", k->name);
            char what[256];
            snprintf(what, sizeof what, "%s (split K in up to %d%s) for sm_90a", k->name, plan->wgmma.split_k,
                     waves ? ", counted in waves" : rule == 2 && plan->wgmma.alternate ? ", tiles in turn" : "");
            problems += compile_sm90a(ir, plan, what,
                                      waves                                 ? "SPLIT_PARTIAL_COST * s"
                                      : rule == 2 && plan->wgmma.alternate ? "split_flag + cw)"
                                                                            : "split_fixup(acc, ");
            free(plan);
            free(ir);
        }
    assert_int_equal(problems, 0);
}

/* Reductions over the channels in the wgmma conv pass's epilogue (tests/channel_reduce_specs.h,
 * the GPU test's layers): each plans the fused pass (no map pass, no intermediate), renders
 * the reduction and compiles for sm_90a without spills or wgmma warnings. */
static void wgmma_channel_reduction(void **state)
{
    (void)state;
    int problems = 0;
    for (int i = 0; i < N_CHANNEL_REDUCE_CASES; i++) {
        const channel_reduce_case *k = &channel_reduce_cases[i];
        fg_layer_ir *ir = fgt_load_string(k->source);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        fg_plan *plan = fgt_plan_with(ir, &opts);
        const fg_pass *last = &plan->passes[plan->n_passes - 1];
        if (last->kind != FG_PASS_CONV || last->conv.engine != FG_CONV_WGMMA || last->chan_reduce < 0 ||
            plan->n_passes != 3)
            fail_msg("%s: the reduction is not fused into the wgmma conv pass", k->name);
        char what[256], needle[128];
        snprintf(what, sizeof what, "%s for sm_90a", k->name);
        snprintf(needle, sizeof needle, "over the %d channels, in the epilogue", (int)ir->ops[0].out_channels);
        problems += compile_sm90a(ir, plan, what, needle);
        free(plan);
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* The wgmma engine on half operands (a bf16/fp16 layer: wgmma m64nNk16 on its dtype): every
 * reference layer in both precisions (the weights split into hi and lo, or rounded once), in
 * bf16 or fp16 by turns, and a few split-K layers in bf16 and channel-reduction layers in
 * fp16 (3D, recompute, a statistic fed tile by tile, split K under the reduction, tf32; the
 * suites' own bf16/fp16 cases run in wgmma_split_k and wgmma_channel_reduction), each compiled
 * for sm_90a with no spills and no ptxas warning about wgmma; the source carries the dtype's
 * wgmma. (A subset: NVRTC takes a second or two a source and the suite has a time limit.) */
static int compile_half_wgmma(fg_layer_ir *ir, fg_dtype dtype, fg_engine_choice engine, const char *what_kind)
{
    ir->dtype = dtype;
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.engine = engine;
    fg_plan *plan = fgt_plan_with(ir, &opts);
    int want = dtype == FG_DTYPE_BF16 ? FG_WGMMA_BF16 : FG_WGMMA_F16;
    char what[256];
    snprintf(what, sizeof what, "%s (%s, dtype %s, precision %s) for sm_90a", ir->name, what_kind,
             fg_dtype_name(dtype), ir->precision == FG_PRECISION_TF32 ? "tf32" : "fp32");
    if (!plan->wgmma.parts || plan->wgmma.operand != want || plan->wgmma.a_parts != 1)
        fail_msg("%s: the conv is not on wgmma with %s operands", what, fg_wgmma_operand_name(want));
    const char *instr = dtype == FG_DTYPE_BF16 ? "k16.f32.bf16.bf16 {" : "k16.f32.f16.f16 {";
    int problems = compile_sm90a(ir, plan, what, instr);
    free(plan);
    return problems;
}

static void wgmma_half_operands(void **state)
{
    (void)state;
    int problems = 0;
    for (int i = 0; i < FGT_N_REFERENCE_SPECS; i++) {
        for (int precision = 0; precision < 2; precision++) {
            fg_layer_ir *ir = fgt_load_spec(fgt_reference_specs[i]);
            ir->precision = precision ? FG_PRECISION_TF32 : FG_PRECISION_FP32;
            problems += compile_half_wgmma(ir, i % 2 ? FG_DTYPE_FP16 : FG_DTYPE_BF16, FG_ENGINE_PREFER_WGMMA, "reference");
            free(ir);
        }
    }
    static const char *const split_names[] = {"split_3d_mul_silu", "split_2d_group_norm_recompute",
                                              "split_odd_channels_softmax"};
    static const char *const reduce_names[] = {"chanred_mean_3d", "chanred_logsumexp_split_k_batch1",
                                               "chanred_sum_tf32"};
    int found = 0;
    for (int i = 0; i < N_SPLIT_K_CASES; i++) {
        for (int n = 0; n < 3; n++) {
            if (strcmp(split_k_cases[i].name, split_names[n]) != 0)
                continue;
            fg_layer_ir *ir = fgt_load_string(split_k_cases[i].source);
            problems += compile_half_wgmma(ir, FG_DTYPE_BF16, FG_ENGINE_AUTO, "split K");
            free(ir);
            found++;
        }
    }
    for (int i = 0; i < N_CHANNEL_REDUCE_CASES; i++) {
        for (int n = 0; n < 3; n++) {
            if (strcmp(channel_reduce_cases[i].name, reduce_names[n]) != 0)
                continue;
            fg_layer_ir *ir = fgt_load_string(channel_reduce_cases[i].source);
            problems += compile_half_wgmma(ir, FG_DTYPE_FP16, FG_ENGINE_AUTO, "channel reduction");
            free(ir);
            found++;
        }
    }
    assert_int_equal(found, 6);
    assert_int_equal(problems, 0);
}

/* The recompute variant of a reference layer (two conv kernels). */
static void recompute_variant(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_spec("kb21");
    int problems = compile_ir(ir, FG_STRATEGY_RECOMPUTE, archs, 1);
    free(ir);
    assert_int_equal(problems, 0);
}

/* The resident variants of kb79 (cluster of 8, max over channels) and kb21 (a cluster per norm
 * group) for sm_90, the only architecture with thread-block clusters. */
static void resident_variants(void **state)
{
    (void)state;
    static const char *const sm90[] = {"sm_90"};
    int problems = 0;
    static const char *const names[] = {"kb79", "kb21"};
    for (int i = 0; i < 2; i++) {
        fg_layer_ir *ir = fgt_load_spec(names[i]);
        problems += compile_ir(ir, FG_STRATEGY_RESIDENT, sm90, 1);
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* Half-precision input and output (the spec's dtype = "bf16" / "fp16"): every engine and
 * strategy renders its converting loads and rounding stores and compiles for sm_80 and
 * sm_90a (sm_90 for resident) without spills (but the tolerance above). The source must
 * carry the dtype's conversions; the fp32 sources (golden-sources) carry none. */
typedef struct half_case {
    const char *spec;
    fg_dtype dtype;
    const char *arch;
    fg_engine_choice engine;
    int strategy; /* -1: the planner's */
    int engine_is; /* the conv engine the plan must have (an fg_conv_engine), -1: any */
} half_case;

static void half_dtypes(void **state)
{
    (void)state;
    static const half_case cases[] = {
        {"kb85", FG_DTYPE_BF16, "sm_80", FG_ENGINE_AUTO, -1, -1},
        {"kb85", FG_DTYPE_FP16, "sm_90a", FG_ENGINE_AUTO, -1, -1},
        {"kb23", FG_DTYPE_FP16, "sm_80", FG_ENGINE_AUTO, -1, -1}, /* 3D, a mean over everything */
        {"kb92", FG_DTYPE_BF16, "sm_80", FG_ENGINE_PREFER_FMA, -1, FG_CONV_FMA},
        {"kb92", FG_DTYPE_FP16, "sm_80", FG_ENGINE_PREFER_MMA, -1, FG_CONV_MMA},
        {"kb92", FG_DTYPE_BF16, "sm_90a", FG_ENGINE_PREFER_WGMMA, -1, FG_CONV_WGMMA},
        {"kb21", FG_DTYPE_FP16, "sm_80", FG_ENGINE_AUTO, FG_STRATEGY_RECOMPUTE, -1},
        {"kb79", FG_DTYPE_BF16, "sm_90", FG_ENGINE_AUTO, FG_STRATEGY_RESIDENT, -1},
    };
    int problems = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const half_case *h = &cases[i];
        fg_layer_ir *ir = fgt_load_spec(h->spec);
        ir->dtype = h->dtype;
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, h->arch);
        opts.engine = h->engine;
        opts.force_strategy = h->strategy;
        fg_plan *plan = fgt_plan_with(ir, &opts);
        bool engine_seen = h->engine_is < 0;
        for (int p = 0; p < plan->n_passes; p++)
            engine_seen |= plan->passes[p].kind == FG_PASS_CONV && (int)plan->passes[p].conv.engine == h->engine_is;
        char what[256];
        snprintf(what, sizeof what, "%s (dtype %s, engine %d, strategy %d) for %s", ir->name, fg_dtype_name(h->dtype),
                 (int)h->engine, h->strategy, h->arch);
        if (!engine_seen)
            fail_msg("%s: the plan's conv is not on engine %d", what, h->engine_is);
        for (int p = 0; p < plan->n_passes; p++)
            if (plan->passes[p].kind == FG_PASS_CUDNN)
                fail_msg("%s: a half-dtype layer planned on cuDNN", what);
        fg_rendered src;
        fg_error err = {{0}};
        if (fg_render(ir, plan, &src, &err) != 0)
            fail_msg("%s: %s", what, err.msg);
        const char *cvt = h->dtype == FG_DTYPE_BF16 ? "cvt.rn.bf16.f32" : "cvt.rn.f16.f32";
        if (!strstr(src.source, cvt) || !strstr(src.source, "const fg_io *__restrict__ x") ||
            !strstr(src.source, "fg_io_round(") || !strstr(src.source, "fg_io_load("))
            fail_msg("%s: the source lacks the dtype's loads, stores or conversions", what);
        fg_compiled c;
        if (fg_nvrtc_compile(src.source, ir->name, h->arch, NULL, &c, &err) != 0)
            fail_msg("%s: %s", what, err.msg);
        check_cubin(what, c.cubin, c.size, atoi(h->arch + 3));
        problems += check_resources(what, plan, &c);
        fg_compiled_free(&c);
        fg_rendered_free(&src);
        free(plan);
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* Prologues (tests/prologue_specs.h, the GPU test's layers): each layer for sm_80, sm_90 and
 * sm_90a with the FMA and mma.sync engines forced, and for sm_90a on wgmma; the plan's conv
 * is on the forced engine (wgmma where the shape allows it), no pass is cuDNN's, the conv
 * (or the wgmma input pack: their sums, where it finalizes them) reads the prologue's
 * statistics when it has some, and every
 * kernel compiles with NVRTC without spills. */
static void prologues(void **state)
{
    (void)state;
    static const struct {
        const char *arch;
        fg_engine_choice engine;
        int engine_is;
    } runs[] = {
        {"sm_80", FG_ENGINE_PREFER_FMA, FG_CONV_FMA},  {"sm_80", FG_ENGINE_PREFER_MMA, FG_CONV_MMA},
        {"sm_90", FG_ENGINE_PREFER_FMA, FG_CONV_FMA},  {"sm_90", FG_ENGINE_PREFER_MMA, FG_CONV_MMA},
        {"sm_90a", FG_ENGINE_PREFER_MMA, FG_CONV_MMA}, {"sm_90a", FG_ENGINE_PREFER_WGMMA, FG_CONV_WGMMA},
    };
    int problems = 0;
    for (int i = 0; i < N_PROLOGUE_CASES; i++) {
        fg_layer_ir *ir = fgt_load_string(prologue_cases[i].source);
        for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, runs[r].arch);
            opts.engine = runs[r].engine;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            char what[256];
            snprintf(what, sizeof what, "%s (engine %d) for %s", ir->name, (int)runs[r].engine, runs[r].arch);
            bool engine_seen = false, stats_read = plan->pro_accum < 0;
            for (int p = 0; p < plan->n_passes; p++) {
                const fg_pass *ps = &plan->passes[p];
                if (ps->kind == FG_PASS_CUDNN)
                    fail_msg("%s: a prologue layer planned on cuDNN", what);
                engine_seen |= ps->kind == FG_PASS_CONV && (int)ps->conv.engine == runs[r].engine_is;
                /* finalized statistics, or (the rows pack that finalizes them itself) the sums */
                fg_arg_kind read = ps->kind == FG_PASS_PACK_INPUT && plan->pack_finalizes ? FG_ARG_ACCUM : FG_ARG_STATS;
                if ((ps->kind == FG_PASS_CONV && ps->conv.engine != FG_CONV_WGMMA) || ps->kind == FG_PASS_PACK_INPUT)
                    for (int a = 0; a < ps->n_args; a++)
                        stats_read |= ps->args[a].kind == read && ps->args[a].index == plan->pro_accum;
            }
            /* wgmma only where the shape allows it (the planner falls back to mma.sync) */
            if (!engine_seen && runs[r].engine_is != FG_CONV_WGMMA)
                fail_msg("%s: the plan's conv is not on engine %d", what, runs[r].engine_is);
            if (!stats_read)
                fail_msg("%s: no pass that stages the input reads the prologue's statistics", what);
            problems += compile_arch(ir, plan, what, NULL, runs[r].arch);
            free(plan);
        }
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* Shapes past a former limit of the wgmma engine (tests/wgmma_reach_specs.h): each plans on
 * wgmma for sm_90a (before, the planner refused it and the conv ran on mma.sync) the way its
 * case names -- an input pack in several channel blocks of at most pack_xb that cover every
 * packed channel exactly, 16-bit packed coordinates, tiles of more than 128 channels, or flat
 * tiles (a tile's rows over several samples: small images) -- and
 * every kernel compiles without spills. */
static void wgmma_reach(void **state)
{
    (void)state;
    int problems = 0;
    for (int i = 0; i < N_WGMMA_REACH_CASES; i++) {
        const wgmma_reach_case *v = &wgmma_reach_cases[i];
        fg_layer_ir *ir = fgt_load_string(v->source);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.engine = FG_ENGINE_PREFER_WGMMA; /* as the GPU test runs them (a short K would take mma.sync) */
        fg_plan *plan = fgt_plan_with(ir, &opts);
        const fg_wgmma_tiling *w = &plan->wgmma;
        if (!w->parts)
            fail_msg("%s: not planned on wgmma", ir->name);
        bool blocked = false;
        for (int p = 0; p < plan->n_passes; p++) {
            const fg_pass *ps = &plan->passes[p];
            if (ps->kind != FG_PASS_PACK_INPUT)
                continue;
            blocked = ps->launch.grid_y > 1;
            if (ps->launch.grid_y * w->pack_xb < w->xc || (ps->launch.grid_y - 1) * w->pack_xb >= w->xc)
                fail_msg("%s: %lld blocks of %d do not cover %d channels exactly", ir->name,
                         (long long)ps->launch.grid_y, w->pack_xb, w->xc);
        }
        const char *needle;
        char wide[32];
        if (!strcmp(v->reach, "wide channel blocks")) {
            if (w->bn <= 128)
                fail_msg("%s: channel blocks of %d", ir->name, w->bn);
            snprintf(wide, sizeof wide, "m64n%dk16", w->bn); /* the wgmmas' shape */
            needle = wide;
        } else if (!strcmp(v->reach, "flat tiles")) {
            if (!w->flat)
                fail_msg("%s: tiles not flat (%lld pixels a sample, %d a tile)", ir->name, (long long)w->opix, w->bm);
            /* decode_tile's flat rows, and the producer's: the cp.async one rows in their sample */
            needle = w->a_tma == 2 ? "const long long f = (long long)t * BM;" : "if (tl.n + sq < batch) {";
        } else if (!strcmp(v->reach, "channel blocks")) {
            if (!blocked)
                fail_msg("%s: the input pack is not in channel blocks (pack_xb %d, xc %d)", ir->name, w->pack_xb, w->xc);
            needle = "constexpr int XB = "; /* the blocked pack's */
        } else {
            if (w->coord_bits != 16 || blocked)
                fail_msg("%s: coordinates in %d bits, pack blocked %d", ir->name, w->coord_bits, (int)blocked);
            needle = "(crd >> 16)";
        }
        problems += compile_sm90a(ir, plan, ir->name, needle);
        free(plan);
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* layer_norm { dim = 1 } after the conv (tests/channel_norm_specs.h): each case on its engine
 * for sm_80 (but wgmma) and sm_90a; the plan has the case's strategy and conv engine, one
 * statistic per (sample, position) over the channels, and every kernel compiles with NVRTC
 * without spills. Resident is refused with the norm's own message. */
static void channel_layer_norms(void **state)
{
    (void)state;
    int problems = 0;
    for (int i = 0; i < N_CHANNEL_NORM_CASES; i++) {
        const channel_norm_case *c = &channel_norm_cases[i];
        fg_layer_ir *ir = fgt_load_string(c->source);
        bool wgmma = strcmp(c->engine, "wgmma") == 0;
        fg_engine_choice choice = wgmma ? FG_ENGINE_PREFER_WGMMA
                                  : strcmp(c->engine, "mma") == 0 ? FG_ENGINE_PREFER_MMA : FG_ENGINE_PREFER_FMA;
        int engine_is = wgmma ? FG_CONV_WGMMA : choice == FG_ENGINE_PREFER_MMA ? FG_CONV_MMA : FG_CONV_FMA;
        int norm = 1;
        while (ir->ops[norm].kind != FG_OP_CHANNEL_LAYER_NORM)
            norm++;
        const fg_shape *v = &ir->ops[norm].in;
        for (int r = wgmma ? 1 : 0; r < 2; r++) {
            const char *arch = r ? "sm_90a" : "sm_80";
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, arch);
            opts.engine = choice;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            char what[256];
            snprintf(what, sizeof what, "%s for %s", c->name, arch);
            fg_strategy want = strcmp(c->strategy, "recompute") == 0 ? FG_STRATEGY_RECOMPUTE : FG_STRATEGY_MATERIALIZE;
            if (plan->strategy != want)
                fail_msg("%s: strategy %d, expected %s", what, (int)plan->strategy, c->strategy);
            bool engine_seen = false;
            for (int p = 0; p < plan->n_passes; p++)
                engine_seen |= plan->passes[p].kind == FG_PASS_CONV && (int)plan->passes[p].conv.engine == engine_is;
            if (!engine_seen)
                fail_msg("%s: the plan's conv is not on %s", what, c->engine);
            int a = plan->op_accum[norm];
            assert_true(a >= 0);
            assert_int_equal(plan->accums[a].keys_per_sample, fg_shape_sample_count(v) / v->dim[1]);
            assert_int_equal(plan->accums[a].count_per_sample, v->dim[1]);
            problems += compile_arch(ir, plan, what, NULL, arch);
            free(plan);
        }
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* Channels-last input and output (the spec's layout = "channels_last"): every engine and
 * strategy renders its N(D)HWC reads and stores and compiles for sm_80 and sm_90a (sm_90
 * for resident) without spills (but the tolerance above), with fp32 and a half dtype. The
 * source must differ from the same layer's NCHW source, and no channels-last layer plans
 * cuDNN. */
typedef struct layout_case {
    const char *spec;   /* a spec name, or NULL: `source` */
    const char *source;
    fg_dtype dtype;
    const char *arch;
    fg_engine_choice engine;
    int strategy;  /* -1: the planner's */
    int engine_is; /* the conv engine the plan must have (an fg_conv_engine), -1: any */
} layout_case;

#define CL3D_RESIDENT                                                                                            \
    "return layer \"cl3d\" {\n  input = { \"N\", 3, 10, 18, 18 },\n  conv3d { name = \"conv\", out_channels = 16, " \
    "kernel = 3 },\n  instance_norm { eps = 1e-5 },\n  clamp { min = -1.0, max = 1.0 },\n"                     \
    "  max { dim = 1, keepdim = true },\n}\n"

/* the FMA engine's channels-last mapping, its input staged in 16-byte vectors (8 channels of
 * a half dtype, 4 floats) or one element at a time where the pointer is off 16 */
#define CL_DEPTHWISE                                                                                              \
    "return layer \"cldw\" {\n  input = { \"N\", 32, 15, 13 },\n  conv2d { out_channels = 32, kernel = 7, "       \
    "padding = 3, groups = 32 },\n  layer_norm { dim = 1 },\n}\n"

static void channels_last(void **state)
{
    (void)state;
    static const layout_case cases[] = {
        {"kb85", NULL, FG_DTYPE_FP32, "sm_80", FG_ENGINE_AUTO, -1, -1},
        {"kb85", NULL, FG_DTYPE_BF16, "sm_90a", FG_ENGINE_AUTO, -1, -1},
        {"kb92", NULL, FG_DTYPE_FP32, "sm_80", FG_ENGINE_PREFER_FMA, -1, FG_CONV_FMA},
        {"kb92", NULL, FG_DTYPE_FP32, "sm_80", FG_ENGINE_PREFER_MMA, -1, FG_CONV_MMA},
        {"kb92", NULL, FG_DTYPE_FP32, "sm_90a", FG_ENGINE_PREFER_WGMMA, -1, FG_CONV_WGMMA},
        {"kb92", NULL, FG_DTYPE_FP16, "sm_80", FG_ENGINE_PREFER_FMA, -1, FG_CONV_FMA},
        {"kb92", NULL, FG_DTYPE_BF16, "sm_80", FG_ENGINE_PREFER_MMA, -1, FG_CONV_MMA},
        {"kb92", NULL, FG_DTYPE_BF16, "sm_90a", FG_ENGINE_PREFER_WGMMA, -1, FG_CONV_WGMMA},
        {"kb21", NULL, FG_DTYPE_FP32, "sm_80", FG_ENGINE_AUTO, FG_STRATEGY_RECOMPUTE, -1},
        {"kb21", NULL, FG_DTYPE_FP32, "sm_90a", FG_ENGINE_PREFER_WGMMA, FG_STRATEGY_MATERIALIZE, FG_CONV_WGMMA},
        {NULL, CL3D_RESIDENT, FG_DTYPE_FP32, "sm_90", FG_ENGINE_AUTO, FG_STRATEGY_RESIDENT, -1},
        {NULL, CL3D_RESIDENT, FG_DTYPE_BF16, "sm_90", FG_ENGINE_AUTO, FG_STRATEGY_RESIDENT, -1},
        {NULL, CL3D_RESIDENT, FG_DTYPE_FP32, "sm_90a", FG_ENGINE_PREFER_WGMMA, -1, FG_CONV_WGMMA},
        {NULL, CL_DEPTHWISE, FG_DTYPE_FP32, "sm_80", FG_ENGINE_PREFER_FMA, -1, FG_CONV_FMA},
        {NULL, CL_DEPTHWISE, FG_DTYPE_BF16, "sm_90a", FG_ENGINE_PREFER_FMA, -1, FG_CONV_FMA},
        {NULL, CL_DEPTHWISE, FG_DTYPE_FP16, "sm_80", FG_ENGINE_PREFER_FMA, -1, FG_CONV_FMA},
    };
    int problems = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const layout_case *h = &cases[i];
        fg_layer_ir *ir = h->spec ? fgt_load_spec(h->spec) : fgt_load_string(h->source);
        ir->dtype = h->dtype;
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, h->arch);
        opts.engine = h->engine;
        opts.force_strategy = h->strategy;
        fg_rendered nchw;
        fg_error err = {{0}};
        fg_plan *plan = fgt_plan_with(ir, &opts);
        if (fg_render(ir, plan, &nchw, &err) != 0)
            fail_msg("%s (nchw): %s", ir->name, err.msg);
        free(plan);
        ir->layout = FG_LAYOUT_CHANNELS_LAST;
        plan = fgt_plan_with(ir, &opts);
        bool engine_seen = h->engine_is < 0;
        for (int p = 0; p < plan->n_passes; p++)
            engine_seen |= plan->passes[p].kind == FG_PASS_CONV && (int)plan->passes[p].conv.engine == h->engine_is;
        char what[256];
        snprintf(what, sizeof what, "%s (channels_last, dtype %s, engine %d, strategy %d) for %s", ir->name,
                 fg_dtype_name(h->dtype), (int)h->engine, h->strategy, h->arch);
        if (!engine_seen)
            fail_msg("%s: the plan's conv is not on engine %d", what, h->engine_is);
        for (int p = 0; p < plan->n_passes; p++)
            if (plan->passes[p].kind == FG_PASS_CUDNN)
                fail_msg("%s: a channels-last layer planned on cuDNN", what);
        fg_rendered src;
        if (fg_render(ir, plan, &src, &err) != 0)
            fail_msg("%s: %s", what, err.msg);
        if (!strcmp(src.source, nchw.source))
            fail_msg("%s: the source is the NCHW layer's", what);
        fg_compiled c;
        if (fg_nvrtc_compile(src.source, ir->name, h->arch, NULL, &c, &err) != 0)
            fail_msg("%s: %s", what, err.msg);
        check_cubin(what, c.cubin, c.size, atoi(h->arch + 3));
        problems += check_resources(what, plan, &c);
        fg_compiled_free(&c);
        fg_rendered_free(&src);
        fg_rendered_free(&nchw);
        free(plan);
        free(ir);
    }
    assert_int_equal(problems, 0);
}

/* A layer with every op kind: the templates of each compile. */
static void every_op_kind(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string(fgt_every_op_spec);
    static const char *const sm90[] = {"sm_90"};
    int problems = compile_ir(ir, -1, sm90, 1);
    free(ir);
    ir = fgt_load_string("return layer \"c3\" {\n"
                         "  input = { \"N\", 2, 9, 10, 11 },\n"
                         "  conv3d { out_channels = 6, kernel = { 3, 2, 1 }, stride = { 2, 1, 3 }, padding = { 1, 0, 2 },\n"
                         "           dilation = { 1, 2, 1 }, groups = 2, bias = false },\n"
                         "  max_pool3d { kernel = 2, padding = 1 },\n"
                         "  sum { dims = { 2, 3, 4 } },\n"
                         "}\n");
    static const char *const sm80[] = {"sm_80"};
    problems += compile_ir(ir, -1, sm80, 1);
    free(ir);
    assert_int_equal(problems, 0);
}

/* A broken source fails with NVRTC's log, and the source is saved for the user. */
static void compile_error_is_reported(void **state)
{
    (void)state;
    const char *bad = "extern \"C\" __global__ void k(float *x) { x[0] = undefined_thing; }\n";
    fg_compiled c;
    fg_error err = {{0}};
    assert_int_equal(fg_nvrtc_compile(bad, "broken.cu", "sm_90", getenv("TMPDIR"), &c, &err), -1);
    assert_null(c.cubin);
    fgt_assert_contains(err.msg, "broken.cu");
    fgt_assert_contains(err.msg, "NVRTC could not compile the generated source for sm_90");
    fgt_assert_contains(err.msg, "undefined_thing");
    const char *saved = strstr(err.msg, "source saved as ");
    assert_non_null(saved);
    char path[1024];
    assert_int_equal(sscanf(saved + strlen("source saved as "), "%1023[^:]", path), 1);
    /* $TMPDIR points into this test's own directory */
    fgt_assert_contains(path, getenv("TMPDIR"));
    size_t len = 0;
    unsigned char *text = fgt_read_file(path, &len);
    assert_non_null(text);
    assert_string_equal((const char *)text, bad);
    free(text);
    unlink(path);

    /* an unknown architecture is an error too, not a crash */
    assert_int_equal(fg_nvrtc_compile("extern \"C\" __global__ void k() {}\n", "arch.cu", "sm_1", NULL, &c, &err), -1);
    fgt_assert_contains(err.msg, "arch.cu");
}

static void version_and_options(void **state)
{
    (void)state;
    int major = 0, minor = -1;
    fg_error err = {{0}};
    assert_int_equal(fg_nvrtc_version(&major, &minor, &err), 0);
    assert_true(major >= 11);
    assert_true(minor >= 0);
    char opts[256];
    fg_nvrtc_options_string("sm_90", opts, sizeof opts);
    fgt_assert_contains(opts, "--gpu-architecture=sm_90");
    fgt_assert_contains(opts, "--ptxas-options=-v"); /* the resource report the tests read */
    char other[256];
    fg_nvrtc_options_string("sm_80", other, sizeof other);
    assert_string_not_equal(opts, other);
}

static void ptxas_report_parser(void **state)
{
    (void)state;
    const char *log = "ptxas info    : 0 bytes gmem\n"
                      "ptxas info    : Compiling entry function 'fg_pass0_conv' for 'sm_90'\n"
                      "ptxas info    : Function properties for fg_pass0_conv\n"
                      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                      "ptxas info    : Used 80 registers, used 1 barriers, 384 bytes cmem[0]\n"
                      "ptxas info    : Compiling entry function 'fg_pass1_map' for 'sm_90'\n"
                      "ptxas info    : Function properties for fg_pass1_map\n"
                      "    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
                      "ptxas info    : Used 255 registers, 400 bytes cmem[0]";
    fg_kernel_resources k[4];
    assert_int_equal(fg_parse_ptxas_report(log, k, 4), 2);
    assert_string_equal(k[0].name, "fg_pass0_conv");
    assert_int_equal(k[0].registers, 80);
    assert_int_equal(k[0].stack_frame, 0);
    assert_int_equal(k[0].spill_stores, 0);
    assert_string_equal(k[1].name, "fg_pass1_map");
    assert_int_equal(k[1].registers, 255);
    assert_int_equal(k[1].stack_frame, 24);
    assert_int_equal(k[1].spill_stores, 8);
    assert_int_equal(k[1].spill_loads, 12);
    /* more kernels than room: the first ones are kept, nothing overflows */
    assert_int_equal(fg_parse_ptxas_report(log, k, 1), 1);
    assert_string_equal(k[0].name, "fg_pass0_conv");
    assert_int_equal(k[0].registers, 80); /* not the dropped kernel's numbers */
    assert_int_equal(k[0].stack_frame, 0);
    assert_int_equal(k[0].spill_loads, 0);
    assert_int_equal(fg_parse_ptxas_report("", k, 4), 0);
}

/* The block specs (specs/blocks/): every layer compiles for sm_80 (the planner's engine) and
 * for sm_90a on the wgmma engine, with its tensor operands (batched parameters, read at the
 * sample in scope: the residual in an epilogue, SD's time embedding) in the source. */
static void blocks(void **state)
{
    (void)state;
    static const char *const sm80[] = {"sm_80"};
    int problems = 0, tensor_reads = 0;
    for (int i = 0; i < FGT_N_BLOCK_SPECS; i++) {
        fg_block_ir b;
        fgt_load_block_spec(i, &b);
        for (int l = 0; l < b.n_layers; l++) {
            fg_layer_ir *ir = &b.layers[l];
            problems += compile_ir(ir, -1, sm80, 1);
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.engine = FG_ENGINE_PREFER_WGMMA;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            char what[256];
            snprintf(what, sizeof what, "%s for sm_90a (wgmma)", ir->name);
            problems += compile_sm90a(ir, plan, what, NULL);
            fg_rendered src;
            fg_error err;
            assert_int_equal(fg_render(ir, plan, &src, &err), 0);
            for (int p = 0; p < ir->n_params; p++)
                if (ir->params[p].batched) {
                    /* the kernel reads the tensor at the sample in scope */
                    char needle[64];
                    snprintf(needle, sizeof needle, "[(fg_u64)n * %lld + ", (long long)ir->params[p].count);
                    fgt_assert_contains_at(src.source, needle, __FILE__, __LINE__);
                    tensor_reads++;
                }
            fg_rendered_free(&src);
            free(plan);
        }
        fg_block_ir_free(&b);
    }
    assert_int_equal(tensor_reads, 4); /* the bottleneck's residual, SD's temb and residual, ConvNeXt's residual */
    /* tensor operands before a norm (read where its statistics are gathered), after it (in
     * the pass that applies it), in a prologue, with each strategy */
    static const char src[] =
        "return block \"t\" {\n  input = { \"N\", 8, 10, 10 },\n  inputs = { v = { \"N\", 16 } },\n"
        "  layer \"a\" { mul { tensor = \"input\" }, conv2d { out_channels = 16, kernel = 3, padding = 1 },\n"
        "    add { tensor = \"v\" }, group_norm { groups = 4 }, mul { tensor = \"v\" }, relu {} },\n"
        "  layer \"b\" { conv2d { name = \"c2\", out_channels = 8, kernel = 1 }, instance_norm {},\n"
        "    add { tensor = \"input\" }, sub { tensor = \"input\" }, mean { dims = { 2, 3 } } },\n}\n";
    fg_block_ir b;
    fg_error err;
    if (fg_block_spec_load_string("t.lua", src, sizeof src - 1, &b, &err) != 0)
        fail_msg("%s", err.msg);
    static const char *const both[] = {"sm_80", "sm_90"};
    for (int l = 0; l < b.n_layers; l++) {
        problems += compile_ir(&b.layers[l], FG_STRATEGY_MATERIALIZE, both, 2);
        problems += compile_ir(&b.layers[l], FG_STRATEGY_RECOMPUTE, both, 1);
    }
    fg_block_ir_free(&b);
    assert_int_equal(problems, 0);
}

/* The same block with the block fields dtype and layout: its tensor operands are read in the
 * block's dtype (widened by fg_io_load) and layout (channels innermost), in the prologue, the
 * statistics pass and the epilogue, on every engine. */
static void block_dtypes(void **state)
{
    (void)state;
    static const char *const fields[] = {"dtype = \"bf16\", layout = \"channels_last\"", "dtype = \"fp16\"",
                                         "layout = \"channels_last\""};
    static const char *const sm80[] = {"sm_80"};
    int problems = 0;
    for (int f = 0; f < 3; f++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "return block \"t\" {\n  input = { \"N\", 8, 10, 10 },\n  inputs = { v = { \"N\", 16 } }, %s,\n"
                 "  layer \"a\" { mul { tensor = \"input\" }, conv2d { out_channels = 16, kernel = 3, padding = 1 },\n"
                 "    add { tensor = \"v\" }, group_norm { groups = 4 }, mul { tensor = \"v\" }, relu {} },\n"
                 "  layer \"b\" { conv2d { name = \"c2\", out_channels = 8, kernel = 1 }, instance_norm {},\n"
                 "    add { tensor = \"input\" }, sub { tensor = \"input\" } },\n}\n",
                 fields[f]);
        fg_block_ir b;
        fg_error err;
        if (fg_block_spec_load_string("t.lua", src, strlen(src), &b, &err) != 0)
            fail_msg("%s", err.msg);
        for (int l = 0; l < b.n_layers; l++) {
            fg_layer_ir *ir = &b.layers[l];
            problems += compile_ir(ir, FG_STRATEGY_MATERIALIZE, sm80, 1);
            problems += compile_ir(ir, FG_STRATEGY_RECOMPUTE, sm80, 1);
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.engine = FG_ENGINE_PREFER_WGMMA;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            char what[256];
            snprintf(what, sizeof what, "%s (%s) for sm_90a (wgmma)", ir->name, fields[f]);
            problems += compile_sm90a(ir, plan, what, NULL);
            fg_rendered out;
            assert_int_equal(fg_render(ir, plan, &out, &err), 0);
            if (b.dtype != FG_DTYPE_FP32)
                fgt_assert_contains_at(out.source, "fg_io_load(&p", __FILE__, __LINE__);
            if (b.layout == FG_LAYOUT_CHANNELS_LAST && l == 1) /* the residual [N, 8, 10, 10]: C innermost */
                fgt_assert_contains_at(out.source, " * 80 + ", __FILE__, __LINE__);
            fg_rendered_free(&out);
            free(plan);
        }
        fg_block_ir_free(&b);
    }
    assert_int_equal(problems, 0);
}

/* Statistics handed from layer to layer (gen/block.c, fg_block_link_statistics): SD's shape
 * (GroupNorm -> SiLU -> conv, twice) with layer h gathering the statistics of its output for
 * layer out, compiled without spills on the wgmma engine in bf16 channels-last (the epilogue
 * through the slabs, a lane a channel, feeds them) and fp32 NCHW (the fragments' mapping), and
 * on sm_80's engine. */
static void statistics_handed_on(void **state)
{
    (void)state;
    static const char *const sm80[] = {"sm_80"};
    int problems = 0;
    for (int f = 0; f < 2; f++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "return block \"sd\" {\n  input = { \"N\", 64, 16, 16 },\n  inputs = { temb = { \"N\", 64 } }, %s\n"
                 "  layer \"h\" { group_norm { name = \"norm1\", groups = 8 }, silu {},\n"
                 "    conv2d { name = \"conv1\", out_channels = 64, kernel = 3, padding = 1 }, add { tensor = \"temb\" } },\n"
                 "  layer \"out\" { group_norm { name = \"norm2\", groups = 8 }, silu {},\n"
                 "    conv2d { name = \"conv2\", out_channels = 64, kernel = 3, padding = 1 }, add { tensor = \"input\" } },\n}\n",
                 f == 0 ? "dtype = \"bf16\", layout = \"channels_last\"," : "");
        fg_block_ir b;
        fg_error err;
        if (fg_block_spec_load_string("sd.lua", src, strlen(src), &b, &err) != 0)
            fail_msg("%s", err.msg);
        assert_true(b.layers[0].exports_stats && b.layers[1].pro_stats_given);
        for (int l = 0; l < 2; l++) {
            fg_layer_ir *ir = &b.layers[l];
            if (f == 1)
                problems += compile_ir(ir, -1, sm80, 1);
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.engine = FG_ENGINE_PREFER_WGMMA;
            fg_plan *plan = fgt_plan_with(ir, &opts);
            char what[256];
            snprintf(what, sizeof what, "%s (%s) for sm_90a (wgmma)", ir->name, f == 0 ? "bf16 cl" : "fp32");
            /* h's partials added up per channel at the end of each slot: a lane's own (slabs), or
             * over the 8 lanes holding it, their counts too (the shifted partials) */
            const char *needle = l == 1 ? NULL : f == 0 ? "* BN + 32 * kk + lane) * 2;" : "const float o = __shfl_sync(full, fo";
            problems += compile_sm90a(ir, plan, what, needle);
            free(plan);
        }
        fg_block_ir_free(&b);
    }
    assert_int_equal(problems, 0);
}

/* What counts as a wgmma warning in NVRTC's log: ptxas's C75xx lines, not a front-end warning
 * in a source whose layer name says wgmma */
static void wgmma_warning_lines(void **state)
{
    (void)state;
    assert_true(fg_nvrtc_log_has_wgmma_warning(
        "ptxas info    : Used 168 registers\nptxas warning : (C7511) Potential Performance Loss: wgmma.mma_async "
        "instructions are serialized due to the presence of Extern calls in the function 'f'.\n"));
    assert_true(fg_nvrtc_log_has_wgmma_warning("ptxas info : (C7510) wgmma pipeline crossing function boundary\n"));
    assert_false(fg_nvrtc_log_has_wgmma_warning(
        "cln_wgmma.cu(241): warning #177-D: variable \"c\" was declared but never referenced\n"));
    assert_false(fg_nvrtc_log_has_wgmma_warning("ptxas info : Compiling entry function 'fg_pass2_conv_wgmma'\n"));
    assert_false(fg_nvrtc_log_has_wgmma_warning(""));
}

int main(void)
{
    /* NVRTC's own cache (CUDA 12.9+, where a driver is present) answers without the ptxas
     * report these tests check: always compile */
    setenv("CUDA_CACHE_DISABLE", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version_and_options),
        cmocka_unit_test(ptxas_report_parser),
        cmocka_unit_test(wgmma_warning_lines),
        cmocka_unit_test(reference_specs),
        cmocka_unit_test(blocks),
        cmocka_unit_test(block_dtypes),
        cmocka_unit_test(statistics_handed_on),
        cmocka_unit_test(wgmma_engine),
        cmocka_unit_test(wgmma_split_k),
        cmocka_unit_test(wgmma_channel_reduction),
        cmocka_unit_test(wgmma_half_operands),
        cmocka_unit_test(resident_variants),
        cmocka_unit_test(recompute_variant),
        cmocka_unit_test(half_dtypes),
        cmocka_unit_test(channels_last),
        cmocka_unit_test(prologues),
        cmocka_unit_test(wgmma_reach),
        cmocka_unit_test(staged_epilogue_code_size),
        cmocka_unit_test(epi_vec_compiles),
        cmocka_unit_test(fast_gelu_compiles_shorter),
        cmocka_unit_test(wgmma_tiles_in_turn),
        cmocka_unit_test(flat_tiles_predicated),
        cmocka_unit_test(channel_layer_norms),
        cmocka_unit_test(every_op_kind),
        cmocka_unit_test(compile_error_is_reported),
    };
    char *dir = fgt_tmpdir("compile-env");
    fgt_isolate_environment(dir);
    int failed = cmocka_run_group_tests_name("compile", tests, NULL, NULL);
    fgt_rmtree(dir);
    free(dir);
    return failed;
}
