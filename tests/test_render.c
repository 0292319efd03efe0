/* SPDX-License-Identifier: Apache-2.0 */
/* Rendering: the structure of the generated CUDA source (not its exact text). It must be
 * self-contained, have its tap loops unrolled and every shape constant baked in, and take
 * no shape arguments at run time. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_registry.h"
#include "render.h"
#include "spec_loader.h"
#include "test_util.h"

typedef struct rendered_layer {
    fg_layer_ir *ir;
    fg_plan *plan;
    fg_rendered src;
} rendered_layer;

static rendered_layer *render_ir_with(fg_layer_ir *ir, const fg_plan_options *opts)
{
    rendered_layer *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->ir = ir;
    r->plan = fgt_plan_with(ir, opts);
    fg_error err = {{0}};
    if (fg_render(r->ir, r->plan, &r->src, &err) != 0)
        fail_msg("rendering %s failed: %s", ir->name, err.msg);
    assert_non_null(r->src.source);
    assert_int_equal(strlen(r->src.source), r->src.length);
    return r;
}

static rendered_layer *render_ir(fg_layer_ir *ir, int force_strategy)
{
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    opts.force_strategy = force_strategy;
    return render_ir_with(ir, &opts);
}

static rendered_layer *render_spec(const char *name, int force_strategy)
{
    return render_ir(fgt_load_spec(name), force_strategy);
}

/* The same on the CUDA-core engine (what FUSEGEN_CONV_ENGINE=fma asks for). */
static rendered_layer *render_spec_fma(const char *name)
{
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    opts.engine = FG_ENGINE_PREFER_FMA;
    rendered_layer *r = render_ir_with(fgt_load_spec(name), &opts);
    assert_int_equal(r->plan->passes[0].conv.engine, FG_CONV_FMA);
    return r;
}

static void free_rendered(rendered_layer *r)
{
    fg_rendered_free(&r->src);
    free(r->plan);
    free(r->ir);
    free(r);
}

/* The text of kernel `name`: from its signature to the next kernel's (or the end). */
static char *kernel_text(const char *source, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof needle, " %s(", name);
    const char *start = strstr(source, needle);
    if (!start)
        fail_msg("kernel %s not found in the source", name);
    while (start > source && start[-1] != '\n')
        start--;
    const char *end = strstr(start + 1, "extern \"C\"");
    size_t len = end ? (size_t)(end - start) : strlen(start);
    char *text = malloc(len + 1);
    assert_non_null(text);
    memcpy(text, start, len);
    text[len] = '\0';
    return text;
}

/* Parses every extern "C" kernel signature: its name is fg_pass<i>_<kind>, it has
 * __launch_bounds__, and its parameters are pointers except the final "int batch, int
 * batch_base" (no shape is passed at run time). Returns the number of kernels. */
static int check_signatures(const rendered_layer *r)
{
    const char *s = r->src.source;
    int n = 0;
    for (const char *p = strstr(s, "extern \"C\""); p; p = strstr(p + 1, "extern \"C\"")) {
        const char *eol = strchr(p, '\n');
        assert_non_null(eol);
        char line[2048];
        size_t len = (size_t)(eol - p);
        assert_true(len < sizeof line);
        memcpy(line, p, len);
        line[len] = '\0';
        if (!strstr(line, "__global__ void __launch_bounds__("))
            fail_msg("%s: kernel without __launch_bounds__: %s", r->ir->name, line);
        const char *bounds_end = strstr(line, ") ");
        assert_non_null(bounds_end);
        const char *name = bounds_end + 2;
        const char *open = strchr(name, '(');
        assert_non_null(open);
        const char *close = strrchr(line, ')');
        assert_true(close > open);
        char kname[128];
        snprintf(kname, sizeof kname, "%.*s", (int)(open - name), name);
        assert_true(n < r->plan->n_passes);
        if (strcmp(kname, r->plan->passes[n].kernel) != 0)
            fail_msg("%s: kernel %d is %s, the plan says %s", r->ir->name, n, kname, r->plan->passes[n].kernel);
        /* parameters */
        char params[1536];
        snprintf(params, sizeof params, "%.*s", (int)(close - open - 1), open + 1);
        int count = 0, ints = 0;
        char *save = NULL;
        for (char *tok = strtok_r(params, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            while (isspace((unsigned char)*tok))
                tok++;
            count++;
            /* pointers, and the wgmma conv's tensor maps (128 bytes by value: FG_ARG_TMAP) */
            if (strchr(tok, '*') || strncmp(tok, "const __grid_constant__ fgw_tmap ", 33) == 0)
                continue;
            ints++;
            if (ints == 1 && strcmp(tok, "int batch") != 0)
                fail_msg("%s %s: parameter '%s' is neither a pointer nor 'int batch'", r->ir->name, kname, tok);
            if (ints == 2 && strcmp(tok, "int batch_base") != 0)
                fail_msg("%s %s: parameter '%s' is neither a pointer nor 'int batch_base'", r->ir->name, kname, tok);
            if (ints > 2)
                fail_msg("%s %s: unexpected scalar parameter '%s' (shapes must be baked in)", r->ir->name, kname, tok);
        }
        if (ints != 2)
            fail_msg("%s %s: expected 'int batch, int batch_base' at the end: %s", r->ir->name, kname, line);
        /* the batch pair comes last */
        const char *tail = strstr(line, "int batch, int batch_base)");
        assert_non_null(tail);
        assert_int_equal(count, r->plan->passes[n].n_args);
        n++;
    }
    return n;
}

static void common_checks(const rendered_layer *r)
{
    const char *s = r->src.source;
    fgt_assert_not_contains(s, "#include");
    fgt_assert_not_contains(s, "#import");
    assert_int_equal(check_signatures(r), r->plan->n_passes);
    fgt_assert_launch_bounds(s, r->plan, r->ir->name);
    /* every conv pass unrolls every tap of the kernel, each once; the tensor-core engine's
     * unblocked reduction unrolls its steps of 8 (channel, tap) pairs instead, unless each
     * step flushes its own accumulator (acc_steps 1), where they are a rolled loop */
    const fg_op *conv = &r->ir->ops[0];
    int taps = 1;
    for (int i = 0; i < conv->spatial; i++)
        taps *= conv->kernel[i];
    int want_taps = 0, want_steps = 0;
    for (int i = 0; i < r->plan->n_passes; i++) {
        const fg_pass *p = &r->plan->passes[i];
        if (p->kind != FG_PASS_CONV || p->conv.engine == FG_CONV_WGMMA)
            continue; /* the wgmma engine's taps are K chunks of its main loop, not unrolled */
        if (p->conv.engine == FG_CONV_MMA && !p->conv.k_blocked) {
            if (p->conv.acc_steps != 1) /* a fresh accumulator per step: the steps are a rolled loop */
                want_steps += (p->conv.ci_chunk * taps + 7) / 8;
        }
        else
            want_taps += taps;
    }
    assert_int_equal(fgt_count(s, "/* tap "), want_taps);
    assert_int_equal(fgt_count(s, "/* step "), want_steps);
    /* NVRTC rejects sources with NUL bytes or non-ASCII; keep the text plain */
    for (size_t i = 0; i < r->src.length; i++)
        if ((unsigned char)s[i] > 0x7e || ((unsigned char)s[i] < 0x20 && s[i] != '\n'))
            fail_msg("%s: byte 0x%02x at offset %zu is not plain text", r->ir->name, (unsigned char)s[i], i);
}

/* ---- the reference layers ------------------------------------------------------------------- */

/* The CUDA-core engine's text (FUSEGEN_CONV_ENGINE=fma; sm_90 plans pick tensor cores for
 * these layers, tested below). */
static void kb79(void **state)
{
    (void)state;
    rendered_layer *r = render_spec_fma("kb79");
    common_checks(r);
    char *conv = kernel_text(r->src.source, "fg_pass0_conv");
    fgt_assert_contains(conv, "tap 0,0,0");
    fgt_assert_contains(conv, "tap 2,2,2");
    fgt_assert_not_contains(conv, "tap 3");
    assert_int_equal(fgt_count(conv, "/* tap "), 27);
    /* the conv output [16, 14, 30, 30] and the pre-norm buffer: 201600 floats per sample */
    fgt_assert_contains(conv, "201600");
    fgt_assert_contains(conv, "od < 14");
    fgt_assert_contains(conv, "oh < 30");
    fgt_assert_contains(conv, "ow < 30");
    fgt_assert_contains(conv, "__launch_bounds__(");
    free(conv);
    char *map = kernel_text(r->src.source, "fg_pass2_map");
    fgt_assert_contains(map, "12600"); /* the output, [14, 30, 30] per sample */
    fgt_assert_not_contains(map, "tap ");
    free(map);
    free_rendered(r);
}

static void kb21(void **state)
{
    (void)state;
    rendered_layer *r = render_spec_fma("kb21");
    common_checks(r);
    char *conv = kernel_text(r->src.source, "fg_pass0_conv");
    fgt_assert_contains(conv, "tap 0,0");
    fgt_assert_contains(conv, "tap 2,2");
    assert_int_equal(fgt_count(conv, "/* tap "), 9);
    fgt_assert_contains(conv, "254");
    fgt_assert_contains(conv, "2064512"); /* 32 * 254 * 254 */
    fgt_assert_contains(conv, "65536");   /* 256 * 256: the input plane */
    free(conv);
    char *map = kernel_text(r->src.source, "fg_pass2_map");
    fgt_assert_contains(map, "2064512");
    fgt_assert_contains(map, "254");
    free(map);
    char *fin = kernel_text(r->src.source, "fg_pass1_finalize");
    fgt_assert_contains(fin, "258064"); /* elements per group: 4 * 254 * 254 */
    free(fin);
    free_rendered(r);
}

/* The tensor-core engine: 3xTF32 MMAs (three per tile and step), the weights staged as
 * fragments, a blocked reduction (8 channels x tap) or an offset table (3 channels). Which
 * layers get it is test_planner's tensor_core_tiling. */
static void tensor_core_engine(void **state)
{
    (void)state;
    rendered_layer *r = render_spec("kb21", -1);
    common_checks(r);
    const fg_conv_tiling *t = &r->plan->passes[0].conv;
    assert_int_equal(t->engine, FG_CONV_MMA);
    assert_true(t->k_blocked);
    assert_int_equal(t->ch_pitch % 32, 8); /* 4 channels x 8 outputs: 32 banks */
    assert_true(t->tiles_per_block > 1);
    char *conv = kernel_text(r->src.source, "fg_pass0_conv");
    fgt_assert_contains(conv, "/* tap 8 */");
    fgt_assert_not_contains(conv, "tap 9");
    fgt_assert_contains(conv, "fg_tf32_hi(w)");  /* weights split once, at staging */
    fgt_assert_contains(conv, "fg_cp_async_wait_but1()"); /* double-buffered tiles */
    fgt_assert_contains(conv, "oh < 254");
    fgt_assert_contains(conv, "2064512");
    /* 9 taps x (32 channels / 16 per m-tile) x n-tiles x 3 products, each step's into a
     * fresh accumulator (the first product starts it) added to acc in fp32 */
    int ntiles = t->warp_rows * t->warp_ntw;
    assert_int_equal(t->acc_steps, 1);
    assert_int_equal(fgt_count(conv, "fg_mma_tf32_fresh(p"), 9 * t->warp_mt * ntiles);
    assert_int_equal(fgt_count(conv, "fg_mma_tf32(p"), 9 * t->warp_mt * ntiles * 2);
    assert_int_equal(fgt_count(conv, "acc[0][0][0] += p0[0];"), 9);
    fgt_assert_not_contains(conv, "fg_mma_tf32(acc");
    free(conv);
    fgt_assert_contains(r->src.source, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32");
    free_rendered(r);

    r = render_spec("kb79", -1);
    common_checks(r);
    t = &r->plan->passes[0].conv;
    assert_int_equal(t->engine, FG_CONV_MMA);
    assert_false(t->k_blocked);
    conv = kernel_text(r->src.source, "fg_pass0_conv");
    fgt_assert_contains(conv, "s_ko[");
    /* 3 x 27 = 81 -> 11 steps of 8, a rolled loop (each flushes its own accumulator; unrolled,
     * they spilled: bench/NOTES.md v11) */
    fgt_assert_contains(conv, "for (int s = 0; s < 11; ++s) {");
    fgt_assert_not_contains(conv, "/* step ");
    fgt_assert_contains(conv, "od < 14");
    free(conv);
    free_rendered(r);
}

static void kb23_kb85_kb17_kb92(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        const char *constants[4];
    } cases[] = {
        {"kb23", {"/ 19800.0", "od < 22"}},        /* 22*30*30: the mean from the moments per channel */
        {"kb85", {"1016064", "126", "tap 2,2"}},   /* 64*126*126 (FMA engine: 64 channels) */
        {"kb17", {"2032128", "126", "tap 8 "}},    /* 128*126*126 (tensor cores) */
        {"kb92", {"1016064", "15876", "tap 2,2"}}, /* 126*126: the logsumexp output */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rendered_layer *r = render_spec(cases[i].spec, -1);
        common_checks(r);
        for (int c = 0; c < 4 && cases[i].constants[c]; c++)
            fgt_assert_contains(r->src.source, cases[i].constants[c]);
        free_rendered(r);
    }
}

static void every_reference_spec_has_its_kernels(void **state)
{
    (void)state;
    for (int i = 0; i < FGT_N_REFERENCE_SPECS; i++) {
        rendered_layer *r = render_spec(fgt_reference_specs[i], -1);
        for (int p = 0; p < r->plan->n_passes; p++) {
            char needle[96];
            snprintf(needle, sizeof needle, " %s(", r->plan->passes[p].kernel);
            fgt_assert_contains(r->src.source, needle);
        }
        fgt_assert_contains(r->src.source, "fg_pass0_conv(");
        /* the layer is named in the header comment */
        fgt_assert_contains(r->src.source, r->ir->name);
        free_rendered(r);
    }
}

/* Rendering is deterministic: the cache key hashes the source. */
static void deterministic(void **state)
{
    (void)state;
    rendered_layer *a = render_spec("kb92", -1);
    rendered_layer *b = render_spec("kb92", -1);
    assert_int_equal(a->src.length, b->src.length);
    assert_memory_equal(a->src.source, b->src.source, a->src.length);
    free_rendered(a);
    free_rendered(b);
    const char *d = fg_templates_digest();
    assert_int_equal(strlen(d), 32);
    for (const char *p = d; *p; p++)
        assert_true(isxdigit((unsigned char)*p));
    assert_string_equal(d, fg_templates_digest());
}

/* A different shape yields different constants (nothing is passed at run time). */
static void shapes_are_baked(void **state)
{
    (void)state;
    const char *fmt = "return layer \"b\" {\n"
                      "  input = { \"N\", 3, %d, %d },\n"
                      "  conv2d { out_channels = 5, kernel = 3 },\n"
                      "  relu {},\n"
                      "}\n";
    char src[512];
    snprintf(src, sizeof src, fmt, 41, 37);
    rendered_layer *a = render_ir(fgt_load_string(src), -1);
    snprintf(src, sizeof src, fmt, 23, 29);
    rendered_layer *b = render_ir(fgt_load_string(src), -1);
    common_checks(a);
    common_checks(b);
    fgt_assert_contains(a->src.source, "oh < 39");
    fgt_assert_contains(a->src.source, "ow < 35");
    fgt_assert_contains(a->src.source, "6825"); /* 5 * 39 * 35 */
    fgt_assert_contains(b->src.source, "oh < 21");
    fgt_assert_contains(b->src.source, "ow < 27");
    fgt_assert_contains(b->src.source, "2835"); /* 5 * 21 * 27 */
    fgt_assert_not_contains(b->src.source, "6825");
    free_rendered(a);
    free_rendered(b);
}

/* The recompute strategy renders two conv kernels. */
static void recompute(void **state)
{
    (void)state;
    rendered_layer *r = render_spec("kb17", FG_STRATEGY_RECOMPUTE);
    common_checks(r);
    fgt_assert_contains(r->src.source, " fg_pass0_conv(");
    fgt_assert_contains(r->src.source, " fg_pass2_conv(");
    assert_int_equal(fgt_count(r->src.source, "/* tap 8 */"), 2);
    free_rendered(r);
}

/* Every op kind renders (and follows the same rules). */
static void every_op_kind(void **state)
{
    (void)state;
    fg_layer_ir *ir = fgt_load_string(fgt_every_op_spec);
    rendered_layer *r = render_ir(ir, -1);
    common_checks(r);
    /* the elementwise functions appear under their CUDA names */
    fgt_assert_contains(r->src.source, "erff(");
    fgt_assert_contains(r->src.source, "tanhf(");
    fgt_assert_contains(r->src.source, "expf(");
    fgt_assert_contains(r->src.source, "logf(");
    free_rendered(r);

    ir = fgt_load_string("return layer \"p3\" {\n"
                         "  input = { \"N\", 2, 6, 7, 8 },\n"
                         "  conv3d { out_channels = 4, kernel = { 3, 1, 2 }, stride = { 1, 2, 1 }, dilation = { 1, 1, 2 } },\n"
                         "  avg_pool3d { kernel = 2, padding = 1 },\n"
                         "  max_pool { kernel = { 2, 1, 1 } },\n"
                         "}\n");
    r = render_ir(ir, -1);
    common_checks(r);
    fgt_assert_contains(r->src.source, "tap 2,0,1");
    free_rendered(r);
}

/* Every function a snippet calls ("erff(", "fg_sigmoid(") appears in the source. */
static void assert_snippet_calls(const char *source, const char *snippet, const char *spec)
{
    for (const char *p = snippet; *p; p++) {
        if (*p != '(' || p == snippet || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= '0' && p[-1] <= '9')))
            continue;
        const char *b = p;
        while (b > snippet && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') || (b[-1] >= '0' && b[-1] <= '9')))
            b--;
        char call[64];
        snprintf(call, sizeof call, "%.*s(", (int)(p - b), b);
        if (!strstr(source, call))
            fail_msg("%s: the source lacks %s, which the op's snippet calls\n%s", spec, call, snippet);
    }
}

/* Every example of every op kind of the registry renders for sm_80, sm_90 and sm_90a (on the
 * wgmma engine where the conv allows it) and follows
 * the same rules; elementwise ops show their snippet's calls. The kinds come from the
 * registry itself, not a hand-kept list: a new op is tested here once it has its entry. */
static void every_registry_op(void **state)
{
    (void)state;
    int rendered = 0;
    for (int k = 0; k < FG_OP_KIND_COUNT; k++) {
        const fg_op_def *d = &fg_op_defs[k];
        char spec[1024];
        int i = 0;
        for (; fg_op_example_spec((fg_op_kind)k, i, spec, sizeof spec) == 0; i++) {
            static const char *const archs[] = {"sm_80", "sm_90", "sm_90a"};
            for (int a = 0; a < 3; a++) {
                fg_plan_options opts;
                fg_plan_options_for_arch(&opts, archs[a]);
                if (a == 2)
                    opts.engine = FG_ENGINE_PREFER_WGMMA; /* wherever the shape allows it */
                rendered_layer *r = render_ir_with(fgt_load_string(spec), &opts);
                common_checks(r);
                for (int step = 0; step < FG_MAX_SNIPPET_STEPS && d->cuda[step].text; step++)
                    if (!d->cuda[step].guard)
                        assert_snippet_calls(r->src.source, d->cuda[step].text, spec);
                free_rendered(r);
                rendered++;
            }
        }
        if (i == 0)
            fail_msg("op %s has no example", d->name);
    }
    assert_true(rendered >= 3 * FG_OP_KIND_COUNT);
}

/* A half layer on the wgmma engine renders half operands: the dtype's wgmma (m64nNk16, both
 * operands K-major: transpose flags 0), the input packed as it is (2-byte elements, no lo),
 * the weights split into hi and lo in the dtype for fp32 precision and rounded once for tf32;
 * an fp32 layer keeps its TF32 wgmma. */
static void wgmma_half_operands(void **state)
{
    (void)state;
    static const struct {
        const char *dtype, *precision, *instr;
        bool split;
    } cases[] = {
        {"bf16", "fp32", "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {", true},
        {"fp16", "fp32", "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {", true},
        {"bf16", "tf32", "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {", false},
        {"fp16", "tf32", "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char src[512];
        snprintf(src, sizeof src,
                 "return layer \"half\" {\n  input = { \"N\", 64, 24, 24 },\n  dtype = \"%s\",\n  precision = \"%s\",\n"
                 "  conv2d { out_channels = 128, kernel = 3, padding = 1 },\n  relu {},\n}\n",
                 cases[i].dtype, cases[i].precision);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_90a");
        opts.wgmma_a_tma = 1; /* the cp.async producer's text (the TMA one: test_planner.c) */
        rendered_layer *r = render_ir_with(fgt_load_string(src), &opts);
        common_checks(r);
        const char *s = r->src.source;
        fgt_assert_contains(s, cases[i].instr);
        fgt_assert_contains(s, "p, 1, 1, 0, 0;");
        fgt_assert_not_contains(s, "k8.f32.tf32.tf32");
        fgt_assert_not_contains(s, "h = fgw_tf32(v)"); /* no TF32 packing */
        fgt_assert_contains(s, cases[i].split ? "constexpr int PA = 1, PB = 2, BLOCK_ACC = 1;"
                                              : "constexpr int PA = 1, PB = 1, BLOCK_ACC = 0;");
        fgt_assert_contains(s, "KCH = 9; /* packed channels per group, per pixel; K chunks of 64 */");
        char *pw = kernel_text(s, "fg_pass0_pack_weights");
        fgt_assert_contains(pw, "const int k = kc * 64 + (pu ^ (row & 7)) * 8 + e;");
        if (cases[i].split) {
            fgt_assert_contains(pw, "part == 0 ? h : fg_io_round(v - fg_io_load(&h))");
        } else {
            fgt_assert_contains(pw, "= fg_io_round(v);");
            fgt_assert_not_contains(pw, "fg_io_round(v - ");
        }
        free(pw);
        char *pi = kernel_text(s, "fg_pass1_pack_input");
        fgt_assert_contains(pi, "__shared__ fg_io tile[");
        fgt_assert_not_contains(pi, "fg_io_load(");
        free(pi);
        char *conv = kernel_text(s, "fg_pass2_conv");
        fgt_assert_contains(conv, "producer(b0, nullptr, b1,");
        free(conv);
        /* the producer copies 8 half elements a 16-byte unit, 64 to a chunk; one A part */
        fgt_assert_contains(s, "const int k = kc * 64 + seg * 8;");
        fgt_assert_contains(s, "const fg_io *xh = (const fg_io *)xhi");
        fgt_assert_not_contains(s, "if (P == 2) fgw_cp16(dst + A_BYTES");
        fgt_assert_contains(s, "fgw_mma(d[mt], a + 2 * ks, bl + 2 * ks, sd);");
        free_rendered(r);
    }
    /* the same layer in fp32: TF32 operands as before */
    fg_plan_options opts;
    fg_plan_options_for_arch(&opts, "sm_90a");
    opts.wgmma_a_tma = 1; /* the cp.async producer's text */
    rendered_layer *r = render_ir_with(fgt_load_string("return layer \"f\" {\n  input = { \"N\", 64, 24, 24 },\n"
                                                       "  conv2d { out_channels = 128, kernel = 3, padding = 1 },\n}\n"),
                                       &opts);
    fgt_assert_contains(r->src.source, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {");
    fgt_assert_contains(r->src.source, "constexpr int P = 2, BLOCK_ACC = 1;");
    fgt_assert_contains(r->src.source, "const int k = kc * 32 + seg * 4;");
    fgt_assert_not_contains(r->src.source, ".bf16.bf16");
    free_rendered(r);
}

/* A prologue (GroupNorm -> SiLU before the conv, Stable Diffusion's ResnetBlock2D): the
 * statistics pass reads the raw input and feeds fp64 moments, the finalize pass turns them
 * into mean and 1/sqrt(var + eps), and the pass that stages the input -- the conv on the FMA
 * and mma.sync engines, the input pack on wgmma -- normalizes, scales, shifts and applies
 * SiLU to each element inside the input, leaving the padding at 0. No kernel writes the
 * normalized input to a buffer (the wgmma pack's packed operands excepted: they are it). */
static void prologue_applied_where_staged(void **state)
{
    (void)state;
    static const char *const src = "return layer \"sd_half\" {\n  input = { \"N\", 64, 16, 16 },\n"
                                   "  group_norm { name = \"norm1\", groups = 32, eps = 1e-6 },\n  silu {},\n"
                                   "  conv2d { name = \"conv1\", out_channels = 64, kernel = 3, padding = 1 },\n}\n";
    static const struct {
        const char *arch;
        fg_engine_choice engine;
        const char *stager; /* the kernel that applies the prologue */
    } runs[] = {{"sm_90", FG_ENGINE_PREFER_FMA, "fg_pass2_conv"},
                {"sm_90", FG_ENGINE_PREFER_MMA, "fg_pass2_conv"},
                {"sm_90a", FG_ENGINE_PREFER_WGMMA, "fg_pass3_pack_input"}};
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, runs[k].arch);
        opts.engine = runs[k].engine;
        rendered_layer *r = render_ir_with(fgt_load_string(src), &opts);
        common_checks(r);
        char *stats = kernel_text(r->src.source, "fg_pass0_pro_stats");
        fgt_assert_contains(stats, "atomicAdd(a0 + 2 * ((long long)n * 32 + q), (double)s)");
        fgt_assert_contains(stats, "s2 += (double)x0 * (double)x0;");
        char *fin = kernel_text(r->src.source, "fg_pass1_finalize");
        fgt_assert_contains(fin, "s0[key].b = (float)(1.0 / sqrt(var + ");
        char *st = kernel_text(r->src.source, runs[k].stager);
        /* the statistic of the element's group, the affine parameters, SiLU */
        fgt_assert_contains(st, "const fg_stat *__restrict__ s0");
        fgt_assert_contains(st, "/ 2];"); /* 2 channels a group */
        fgt_assert_contains(st, "fmaf((xv - st");
        fgt_assert_contains(st, "* fg_sigmoid(pro0_xv)");
        if (runs[k].engine == FG_ENGINE_PREFER_WGMMA) {
            fgt_assert_contains(st, "if (pix0 + pp < IPIX) {");
            char *conv = kernel_text(r->src.source, "fg_pass4_conv");
            assert_null(strstr(conv, "fg_sigmoid")); /* the packed input is already normalized */
            free(conv);
        } else {
            fgt_assert_contains(st, "float xs = 0.0f;"); /* outside the input (padding): 0 */
            fgt_assert_contains(st, "if (in) {");
            assert_null(strstr(st, "fg_cp_async4(s_in")); /* loaded, transformed, stored */
        }
        free(stats);
        free(fin);
        free(st);
        free_rendered(r);
    }
}

/* A half layer with a prologue on wgmma: the input pack applies the prologue in fp32 and
 * writes it in the layer's dtype, split into hi and the rounded remainder lo (fp32 precision)
 * or rounded once (tf32); the conv multiplies in the dtype, with the input's lo part A_BYTES
 * after hi in each stage (three products a k-step: x_lo.w_hi, x_hi.w_lo, x_hi.w_hi) or one
 * part (the same producer and products as a half layer without a prologue). */
static void half_prologue_packs_the_dtype(void **state)
{
    (void)state;
    for (int dtype = 0; dtype < 2; dtype++) {
        for (int tf32 = 0; tf32 < 2; tf32++) {
            char src[512];
            snprintf(src, sizeof src,
                     "return layer \"hp\" {\n  input = { \"N\", 64, 16, 16 },\n  dtype = \"%s\",\n  precision = \"%s\",\n"
                     "  group_norm { groups = 32, eps = 1e-6 },\n  silu {},\n"
                     "  conv2d { out_channels = 64, kernel = 3, padding = 1 },\n}\n",
                     dtype ? "fp16" : "bf16", tf32 ? "tf32" : "fp32");
            fg_plan_options opts;
            fg_plan_options_for_arch(&opts, "sm_90a");
            opts.engine = FG_ENGINE_PREFER_WGMMA;
            opts.wgmma_a_tma = 1; /* the cp.async producer's text (the TMA one: test_planner.c) */
            rendered_layer *r = render_ir_with(fgt_load_string(src), &opts);
            common_checks(r);
            char *pack = kernel_text(r->src.source, "fg_pass3_pack_input");
            fgt_assert_contains(pack, "* fg_sigmoid(pro0_xv)");   /* the prologue, in fp32 */
            fgt_assert_contains(pack, "__shared__ float tile[");  /* its result staged as floats */
            fgt_assert_contains(pack, "const fg_io h = fg_io_round(v);");
            fgt_assert_contains(pack, "((fg_io *)b0)[base + i] = h;");
            if (tf32)
                fgt_assert_not_contains(pack, "fg_io_round(v - fg_io_load(&h))");
            else
                fgt_assert_contains(pack, "((fg_io *)b1)[base + i] = fg_io_round(v - fg_io_load(&h));");
            fgt_assert_not_contains(pack, "fgw_tf32");
            const char *s = r->src.source;
            fgt_assert_contains(s, dtype ? "k16.f32.f16.f16 {" : "k16.f32.bf16.bf16 {");
            if (tf32) {
                fgt_assert_contains(s, "constexpr int PA = 1, PB = 1,");
                fgt_assert_contains(s, "/* (one part of A) */");
            } else {
                fgt_assert_contains(s, "constexpr int PA = 2, PB = 2,");
                fgt_assert_contains(s, "fgw_cp16(dst + A_BYTES, xl + off, ok ? 16u : 0u);");
                fgt_assert_contains(s, "fgw_mma(d[mt], al + 2 * ks, bh + 2 * ks, sd);");
                fgt_assert_contains(s, "fgw_mma(d[mt], ah + 2 * ks, bl + 2 * ks, 1);");
                fgt_assert_contains(s, "fgw_mma(d[mt], ah + 2 * ks, bh + 2 * ks, 1);");
            }
            free(pack);
            free_rendered(r);
        }
    }
}

/* The prologue's statistics pass by pixel rows: a key a pixel for a norm over each pixel's
 * channels (layer_norm { dim = 1 }: its threads' sums added up in the block, one flush a
 * pixel), per-channel sums for a norm over whole channels, also where the channels happen to
 * be as many as the pixels (an instance norm of 16 channels on 4x4: the key count alone does
 * not tell them apart). */
static void statistics_rows_by_key(void **state)
{
    (void)state;
    static const struct {
        const char *norm;
        bool pixel_keys;
    } cases[] = {
        {"layer_norm { dim = 1 }", true},
        {"instance_norm { affine = true }", false},
        {"group_norm { groups = 1 }", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "return layer \"rows\" {\n  input = { \"N\", 16, 4, 4 }, layout = \"channels_last\", dtype = \"bf16\",\n"
                 "  %s,\n  conv2d { out_channels = 16, kernel = 3, padding = 1 },\n}\n",
                 cases[i].norm);
        fg_plan_options opts;
        fg_plan_options_for_arch(&opts, "sm_80");
        rendered_layer *r = render_ir_with(fgt_load_string(spec), &opts);
        assert_int_equal(r->plan->passes[0].kind, FG_PASS_PRO_STATS);
        assert_true(r->plan->passes[0].launch.row_vec > 0);
        char *k = kernel_text(r->src.source, "fg_pass0_pro_stats");
        if (cases[i].pixel_keys) {
            fgt_assert_contains(k, "[the block's pixel][its threads]");
        } else {
            fgt_assert_not_contains(k, "[the block's pixel][its threads]");
            fgt_assert_contains(k, "the block's sums a channel");
        }
        free(k);
        free_rendered(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_registry_op),
        cmocka_unit_test(kb79),
        cmocka_unit_test(kb21),
        cmocka_unit_test(tensor_core_engine),
        cmocka_unit_test(kb23_kb85_kb17_kb92),
        cmocka_unit_test(every_reference_spec_has_its_kernels),
        cmocka_unit_test(deterministic),
        cmocka_unit_test(shapes_are_baked),
        cmocka_unit_test(recompute),
        cmocka_unit_test(every_op_kind),
        cmocka_unit_test(wgmma_half_operands),
        cmocka_unit_test(prologue_applied_where_staged),
        cmocka_unit_test(half_prologue_packs_the_dtype),
        cmocka_unit_test(statistics_rows_by_key),
    };
    char *dir = fgt_tmpdir("render-env");
    fgt_isolate_environment(dir);
    int failed = cmocka_run_group_tests_name("render", tests, NULL, NULL);
    fgt_rmtree(dir);
    free(dir);
    return failed;
}
