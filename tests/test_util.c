/* SPDX-License-Identifier: Apache-2.0 */
#include "test_util.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "spec_loader.h"

/* cmocka's fail_msg, reported at the caller's position */
#define FAIL_AT(file, line, ...)                                                                             \
    do {                                                                                                     \
        print_error("ERROR: " __VA_ARGS__);                                                                  \
        print_error("\n");                                                                                   \
        _fail((file), (line));                                                                               \
    } while (0)

const char *const fgt_reference_specs[FGT_N_REFERENCE_SPECS] = {"kb17", "kb21", "kb23", "kb79", "kb85", "kb92"};

char *fgt_tmpdir(const char *tag)
{
    const char *base = getenv("FGT_TMPDIR_BASE"); /* set by fgt_isolate_environment */
    if (!base || !base[0])
        base = getenv("TMPDIR");
    if (!base || !base[0])
        base = "/tmp";
    size_t cap = strlen(base) + strlen(tag) + 32;
    char *path = malloc(cap);
    assert_non_null(path);
    snprintf(path, cap, "%s/fusegen-%s-XXXXXX", base, tag);
    if (!mkdtemp(path))
        fail_msg("mkdtemp(%s): %s", path, strerror(errno));
    return path;
}

static int make_writable(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type == FTW_D || type == FTW_DNR)
        chmod(path, (st->st_mode & 07777) | 0700);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

void fgt_rmtree(const char *path)
{
    if (!path)
        return;
    nftw(path, make_writable, 16, FTW_PHYS);
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void fgt_isolate_environment(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/user-cache", dir);
    setenv("FUSEGEN_CACHE_DIR", buf, 1);
    snprintf(buf, sizeof buf, "%s/xdg-cache", dir);
    setenv("XDG_CACHE_HOME", buf, 1);
    unsetenv("FUSEGEN_CACHE_PATH");
    setenv("TMPDIR", dir, 1); /* NVRTC failures save their source under $TMPDIR */
    setenv("FGT_TMPDIR_BASE", dir, 1);
    /* FGT_TEST_FILTER / FGT_TEST_SKIP: run only / skip the cases whose names match (cmocka's
     * wildcards * and ?); scripts/valgrind-tests skips the slowest NVRTC cases with them */
    const char *only = getenv("FGT_TEST_FILTER"), *skip_these = getenv("FGT_TEST_SKIP");
    if (only && only[0])
        cmocka_set_test_filter(only);
    if (skip_these && skip_these[0])
        cmocka_set_skip_filter(skip_these);
}

unsigned char *fgt_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        unsigned char *nb = realloc(buf, cap + 1);
        if (!nb)
            free(buf);
        buf = nb;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = n;
    }
    return buf;
}

int fgt_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    int rc = fclose(f);
    return w == len && rc == 0 ? 0 : -1;
}

const char *fgt_spec_path(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/specs/%s.lua", FUSEGEN_SOURCE_DIR, name);
    return buf;
}

fg_layer_ir *fgt_load_string_at(const char *source, const char *file, int line)
{
    fg_layer_ir *ir = malloc(sizeof *ir);
    assert_non_null(ir);
    fg_error err = {{0}};
    if (fg_spec_load_string("test.lua", source, strlen(source), ir, &err) != 0)
        FAIL_AT(file, line, "the spec was refused: %s\n--- spec ---\n%s", err.msg, source);
    return ir;
}

fg_layer_ir *fgt_load_spec_at(const char *name, const char *file, int line)
{
    char path[1024];
    fg_layer_ir *ir = malloc(sizeof *ir);
    assert_non_null(ir);
    fg_error err = {{0}};
    if (fg_spec_load_file(fgt_spec_path(name, path, sizeof path), ir, &err) != 0)
        FAIL_AT(file, line, "%s was refused: %s", path, err.msg);
    return ir;
}

fg_plan *fgt_plan_with_at(const fg_layer_ir *ir, const fg_plan_options *opts, const char *file, int line)
{
    fg_plan *plan = malloc(sizeof *plan);
    assert_non_null(plan);
    fg_error err = {{0}};
    if (fg_plan_layer(ir, opts, plan, &err) != 0)
        FAIL_AT(file, line, "planning %s failed: %s", ir->name, err.msg);
    return plan;
}

fg_plan *fgt_plan_at(const fg_layer_ir *ir, int force_strategy, const char *file, int line)
{
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    opts.force_strategy = force_strategy;
    return fgt_plan_with_at(ir, &opts, file, line);
}

void fgt_assert_contains_at(const char *haystack, const char *needle, const char *file, int line)
{
    if (!haystack || !strstr(haystack, needle))
        FAIL_AT(file, line, "expected to find \"%s\" in:\n%.3000s", needle, haystack ? haystack : "(null)");
}

void fgt_assert_not_contains_at(const char *haystack, const char *needle, const char *file, int line)
{
    const char *p = haystack ? strstr(haystack, needle) : NULL;
    if (p)
        FAIL_AT(file, line, "did not expect \"%s\"; found it at: %.200s", needle, p);
}

int fgt_count(const char *haystack, const char *needle)
{
    int n = 0;
    size_t len = strlen(needle);
    for (const char *p = haystack; (p = strstr(p, needle)) != NULL; p += len)
        n++;
    return n;
}

void fgt_assert_launch_bounds_at(const char *source, const fg_plan *plan, const char *what, const char *file,
                                 int line)
{
    static const char key[] = "__launch_bounds__(";
    int n = 0;
    for (const char *p = strstr(source, key); p; p = strstr(p + 1, key), n++) {
        if (n >= plan->n_passes)
            FAIL_AT(file, line, "%s: more kernels than the plan's %d passes", what, plan->n_passes);
        int bound = atoi(p + strlen(key));
        if (bound != plan->passes[n].launch.block)
            FAIL_AT(file, line, "%s: pass %d's kernel (%s) is written for %d threads, the plan launches %d", what, n,
                    plan->passes[n].kernel, bound, plan->passes[n].launch.block);
    }
    if (n != plan->n_passes)
        FAIL_AT(file, line, "%s: %d kernels, the plan has %d passes", what, n, plan->n_passes);
}

void fgt_assert_shape_at(const fg_shape *s, const int64_t *dims, int rank, const char *where, const char *file,
                         int line)
{
    char got[128];
    fg_shape_str(s, got, sizeof got);
    bool ok = s->rank == rank && s->dim[0] == 1;
    for (int d = 1; ok && d < rank; d++)
        ok = s->dim[d] == dims[d];
    if (!ok) {
        char want[128];
        fg_shape w = {.rank = rank};
        for (int d = 0; d < rank && d < FG_MAX_RANK; d++)
            w.dim[d] = dims[d];
        FAIL_AT(file, line, "%s: shape %s, expected %s", where, got, fg_shape_str(&w, want, sizeof want));
    }
}

int fgt_find_param(const fg_layer_ir *ir, const char *name)
{
    for (int i = 0; i < ir->n_params; i++)
        if (strcmp(ir->params[i].name, name) == 0)
            return i;
    return -1;
}

int fgt_assert_param_at(const fg_layer_ir *ir, const char *name, const int64_t *dims, int rank, const char *file,
                        int line)
{
    int i = fgt_find_param(ir, name);
    if (i < 0) {
        char list[1024] = "";
        for (int k = 0; k < ir->n_params; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), " %s", ir->params[k].name);
        FAIL_AT(file, line, "parameter '%s' is not registered (registered:%s)", name, list);
    }
    const fg_param *p = &ir->params[i];
    int64_t count = 1;
    bool ok = p->rank == rank;
    for (int d = 0; d < rank; d++) {
        ok = ok && p->dim[d] == dims[d];
        count *= dims[d];
    }
    if (!ok || p->count != count) {
        char got[128] = "";
        for (int d = 0; d < p->rank; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)p->dim[d]);
        FAIL_AT(file, line, "parameter '%s' has shape [%s] (count %lld), expected rank %d with %lld elements", name, got,
                 (long long)p->count, rank, (long long)count);
    }
    return i;
}

double fgt_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A layer with every op kind (and most options), for the render and compile tests. */
const char fgt_every_op_spec[] =
    "return layer \"all\" {\n"
    "  input = { \"N\", 4, 12, 16 },\n"
    "  conv2d { out_channels = 8, kernel = 3, padding = 1, groups = 2, as = \"c\" },\n"
    "  relu {}, leaky_relu { negative_slope = 0.1 }, gelu {}, gelu { approximate = \"tanh\" }, sigmoid {}, tanh {},\n"
    "  softplus { beta = 2, threshold = 10 }, mish {}, silu {}, hardswish {}, hardsigmoid {}, hardtanh {},\n"
    "  clamp { min = -0.5, max = 2 }, exp {}, log {}, abs {}, neg {},\n"
    "  add { scalar = 1 }, sub { param = \"p\", shape = { 8, 1, 1 } }, mul { value = \"c\" }, div { scalar = 3 },\n"
    "  min { scalar = 0.5 }, max { param = \"q\", shape = { 16 } },\n"
    "  group_norm { groups = 4 }, instance_norm {}, batch_norm { name = \"bn\" },\n"
    "  batch_norm { name = \"bn2\", stats = \"running\" }, layer_norm { normalized_shape = { 12, 16 } },\n"
    "  max_pool { kernel = 2, padding = 1 }, avg_pool2d { kernel = 2, stride = 1, padding = 1, count_include_pad = false },\n"
    "  softmax { dim = 1 }, logsumexp { dim = 3, keepdim = true }, sum { dim = 2, keepdim = true },\n"
    "  min { dim = 1, keepdim = true }, global_avg_pool {}, mean { dims = { 1 } },\n"
    "  unsqueeze { dim = 1 }, flatten {}, view { shape = { \"N\", -1, 1 } }, squeeze { dim = 2 }, relu {},\n"
    "}\n";

int fgt_cache_init(fg_cache *cache, const char *user_dir, const char *shipped, fg_error *err)
{
    if (fg_cache_init(cache, user_dir, shipped, err) != 0)
        return -1;
    return fg_build_identity(&cache->identity, err);
}

char *fgt_join(const char *dir, const char *name)
{
    size_t cap = strlen(dir) + strlen(name) + 2;
    char *p = malloc(cap);
    assert_non_null(p);
    snprintf(p, cap, "%s/%s", dir, name);
    return p;
}

int fgt_render_layer(const char *name, const char *source, fgt_rendered_layer *out)
{
    memset(out, 0, sizeof *out);
    out->ir = malloc(sizeof *out->ir);
    out->plan = malloc(sizeof *out->plan);
    fg_error err = {{0}};
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    if (!out->ir || !out->plan) {
        fprintf(stderr, "%s: out of memory\n", name);
        return -1;
    }
    if (fg_spec_load_string(name, source, strlen(source), out->ir, &err) ||
        fg_plan_layer(out->ir, &opts, out->plan, &err) || fg_render(out->ir, out->plan, &out->src, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

void fgt_rendered_layer_free(fgt_rendered_layer *r)
{
    fg_rendered_free(&r->src);
    free(r->plan);
    free(r->ir);
}
