/* SPDX-License-Identifier: Apache-2.0 */
/* The environment edge (runtime/environment.c): each planner knob lands in its option when
 * its value is valid, and a value that does not parse or is out of range is ignored with one
 * warning that names the variable and the value, never half-applied; the runtime settings
 * (cache size cap, log level, graphs, tuning, TMPDIR) read the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "environment.h"
#include "test_util.h"

/* every variable this file sets, cleared before each test */
static const char *const knobs[] = {
    "FUSEGEN_STRATEGY",     "FUSEGEN_CONV_ENGINE", "FUSEGEN_MMA_WARP",         "FUSEGEN_MMA_TILES",
    "FUSEGEN_MMA_ACC_STEPS", "FUSEGEN_SPLIT_K",    "FUSEGEN_WGMMA_M64",        "FUSEGEN_WGMMA_MULTICAST",
    "FUSEGEN_WGMMA_A_TMA",  "FUSEGEN_WGMMA_CTAS",  "FUSEGEN_CONV_TILE",        "FUSEGEN_LOG",
    "FUSEGEN_CACHE_MAX_SIZE", "FUSEGEN_NO_GRAPHS", "FUSEGEN_TUNE",             "TMPDIR",
    "FUSEGEN_WGMMA_BN",     "FUSEGEN_WGMMA_EPI_ROWS",   "FUSEGEN_WGMMA_ALTERNATE",
    "FUSEGEN_WGMMA_FLAT_PREDICATED", "FUSEGEN_SM_COUNT", "FUSEGEN_SPLIT_WAVES", "FUSEGEN_WGMMA_FLAT",
    "FUSEGEN_FAST_GELU",    "FUSEGEN_WGMMA_EPI_VEC",
};

typedef struct warnings {
    int count;
    char last[512];
} warnings;

static void collect(void *ctx, const char *msg)
{
    warnings *w = ctx;
    w->count++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

static int clear_knobs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
        unsetenv(knobs[i]);
    return 0;
}

/* the options as the planner's defaults leave them, then with `var`=`value` applied */
static fg_plan_options read_with(const char *var, const char *value, warnings *w)
{
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    memset(w, 0, sizeof *w);
    setenv(var, value, 1);
    fg_env_plan_options(&opts, collect, w);
    unsetenv(var);
    return opts;
}

static void no_variables_change_nothing(void **state)
{
    (void)state;
    fg_plan_options defaults, opts;
    fg_plan_options_init(&defaults, 90);
    fg_plan_options_init(&opts, 90);
    warnings w = {0};
    fg_env_plan_options(&opts, collect, &w);
    assert_int_equal(w.count, 0);
    assert_memory_equal(&opts, &defaults, sizeof opts);
}

/* One integer knob: a valid value is taken, the bounds are inclusive, and every bad value
 * leaves the option as it was with one warning naming the variable and the value. */
typedef struct int_knob {
    const char *var;
    size_t offset; /* of the int in fg_plan_options */
    int lo, hi;
} int_knob;

static int option_at(const fg_plan_options *opts, size_t offset)
{
    int v;
    memcpy(&v, (const char *)opts + offset, sizeof v);
    return v;
}

static void integer_knobs(void **state)
{
    (void)state;
    static const int_knob ints[] = {
        {"FUSEGEN_MMA_TILES", offsetof(fg_plan_options, mma_tiles), 1, 8},
        {"FUSEGEN_MMA_ACC_STEPS", offsetof(fg_plan_options, mma_acc_steps), 1, 64},
        {"FUSEGEN_SPLIT_K", offsetof(fg_plan_options, split_k), 1, 64},
        {"FUSEGEN_SPLIT_WAVES", offsetof(fg_plan_options, split_waves), 0, 1},
        {"FUSEGEN_WGMMA_M64", offsetof(fg_plan_options, wgmma_m64), 1, 2},
        {"FUSEGEN_WGMMA_MULTICAST", offsetof(fg_plan_options, wgmma_multicast), 1, 2},
        {"FUSEGEN_WGMMA_A_TMA", offsetof(fg_plan_options, wgmma_a_tma), 1, 2},
        {"FUSEGEN_WGMMA_CTAS", offsetof(fg_plan_options, wgmma_ctas), 1, 2},
        {"FUSEGEN_WGMMA_BN", offsetof(fg_plan_options, wgmma_bn), 8, 256},
        {"FUSEGEN_WGMMA_ALTERNATE", offsetof(fg_plan_options, wgmma_alternate), 1, 2},
        {"FUSEGEN_WGMMA_FLAT_PREDICATED", offsetof(fg_plan_options, wgmma_flat_predicated), 1, 2},
        {"FUSEGEN_WGMMA_FLAT", offsetof(fg_plan_options, wgmma_flat), 1, 2},
        {"FUSEGEN_WGMMA_EPI_VEC", offsetof(fg_plan_options, wgmma_epi_vec), 1, 2},
        {"FUSEGEN_FAST_GELU", offsetof(fg_plan_options, fast_gelu), 1, 2},
        {"FUSEGEN_WGMMA_EPI_ROWS", offsetof(fg_plan_options, wgmma_epi_rows), 1, 16},
    };
    fg_plan_options defaults;
    fg_plan_options_init(&defaults, 90);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const int_knob *k = &ints[i];
        const int def = option_at(&defaults, k->offset);
        warnings w;
        char value[32];
        int good[] = {k->lo, k->hi};
        for (int j = 0; j < 2; j++) {
            snprintf(value, sizeof value, "%d", good[j]);
            fg_plan_options opts = read_with(k->var, value, &w);
            assert_int_equal(option_at(&opts, k->offset), good[j]);
            assert_int_equal(w.count, 0);
        }
        char below[32], above[32];
        snprintf(below, sizeof below, "%d", k->lo - 1);
        snprintf(above, sizeof above, "%d", k->hi + 1);
        const char *bad[] = {below, above, "two", "2x", "1,2", " "};
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            fg_plan_options opts = read_with(k->var, bad[j], &w);
            assert_int_equal(option_at(&opts, k->offset), def);
            assert_int_equal(w.count, 1);
            fgt_assert_contains(w.last, k->var);
            fgt_assert_contains(w.last, "ignored");
        }
    }
}

/* FUSEGEN_WGMMA_EPI_ROWS takes only divisors of the slab's 16 rows */
static void epilogue_rows_divide_the_slab(void **state)
{
    (void)state;
    warnings w;
    fg_plan_options opts = read_with("FUSEGEN_WGMMA_EPI_ROWS", "8", &w);
    assert_int_equal(opts.wgmma_epi_rows, 8);
    assert_int_equal(w.count, 0);
    const char *bad[] = {"3", "6", "12"};
    for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
        opts = read_with("FUSEGEN_WGMMA_EPI_ROWS", bad[j], &w);
        assert_int_equal(opts.wgmma_epi_rows, 0);
        assert_int_equal(w.count, 1);
        fgt_assert_contains(w.last, "FUSEGEN_WGMMA_EPI_ROWS");
        fgt_assert_contains(w.last, "1, 2, 4, 8 or 16");
    }
}

static void named_knobs(void **state)
{
    (void)state;
    warnings w;
    fg_plan_options opts = read_with("FUSEGEN_CONV_ENGINE", "wgmma", &w);
    assert_int_equal(opts.engine, FG_ENGINE_PREFER_WGMMA);
    opts = read_with("FUSEGEN_CONV_ENGINE", "mma", &w);
    assert_int_equal(opts.engine, FG_ENGINE_PREFER_MMA);
    opts = read_with("FUSEGEN_CONV_ENGINE", "FMA", &w); /* names are lower case */
    assert_int_equal(opts.engine, FG_ENGINE_AUTO);
    assert_int_equal(w.count, 1);
    fgt_assert_contains(w.last, "FUSEGEN_CONV_ENGINE=\"FMA\" ignored: expected fma, mma or wgmma");
    opts = read_with("FUSEGEN_STRATEGY", "resident", &w);
    assert_int_equal(opts.default_strategy, FG_STRATEGY_RESIDENT);
    opts = read_with("FUSEGEN_STRATEGY", "fastest", &w);
    assert_int_equal(opts.default_strategy, -1);
    assert_int_equal(w.count, 1);
}

/* The tuple knobs take every field or none. */
static void tuple_knobs(void **state)
{
    (void)state;
    warnings w;
    fg_plan_options opts = read_with("FUSEGEN_MMA_WARP", "2,2,8", &w); /* rows x n-tiles = 16, the most */
    assert_int_equal(w.count, 0);
    assert_int_equal(opts.mma_warp[0], 2);
    assert_int_equal(opts.mma_warp[1], 2);
    assert_int_equal(opts.mma_warp[2], 8);
    /* rows x n-tiles above 16: nothing of it taken */
    opts = read_with("FUSEGEN_MMA_WARP", "2,4,5", &w);
    assert_int_equal(w.count, 1);
    assert_int_equal(opts.mma_warp[0], 0);
    assert_int_equal(opts.mma_warp[1], 0);
    opts = read_with("FUSEGEN_CONV_TILE", "4,8,16", &w); /* the unroll may be left out */
    assert_int_equal(w.count, 0);
    assert_int_equal(opts.conv_tile[2], 16);
    assert_int_equal(opts.conv_tile[3], 0);
    opts = read_with("FUSEGEN_CONV_TILE", "4,8,6", &w); /* channels not a multiple of 4 */
    assert_int_equal(w.count, 1);
    assert_int_equal(opts.conv_tile[0], 0);
    opts = read_with("FUSEGEN_CONV_TILE", "4,8,16,2,1", &w); /* one field too many */
    assert_int_equal(w.count, 1);
}

static void runtime_settings(void **state)
{
    (void)state;
    fg_env_runtime env;
    fg_env_runtime_read(&env);
    assert_string_equal(env.tmpdir, "/tmp");
    assert_false(env.no_graphs);
    assert_false(env.no_tuning);
    assert_int_equal(env.log_level, 0);
    assert_true(env.cache_max_bytes > 0);
    const unsigned long long default_max = env.cache_max_bytes;

    setenv("FUSEGEN_CACHE_MAX_SIZE", "500M", 1);
    setenv("FUSEGEN_LOG", "debug", 1);
    setenv("FUSEGEN_NO_GRAPHS", "1", 1);
    setenv("FUSEGEN_TUNE", "off", 1);
    setenv("TMPDIR", "/var/tmp", 1);
    setenv("FUSEGEN_SM_COUNT", "3", 1);
    fg_env_runtime_read(&env);
    assert_int_equal(env.sm_count_cap, 3);
    assert_true(env.cache_max_bytes == 500ull << 20);
    assert_int_equal(env.log_level, 3);
    assert_true(env.no_graphs);
    assert_true(env.no_tuning);
    assert_string_equal(env.tmpdir, "/var/tmp");

    /* bad values: the default, and the reason kept for the library's log */
    setenv("FUSEGEN_CACHE_MAX_SIZE", "lots", 1);
    setenv("FUSEGEN_LOG", "verbose", 1);
    setenv("FUSEGEN_NO_GRAPHS", "0", 1);
    setenv("FUSEGEN_TUNE", "1", 1);
    setenv("FUSEGEN_SM_COUNT", "0", 1);
    fg_env_runtime_read(&env);
    assert_int_equal(env.sm_count_cap, 0);
    fgt_assert_contains(env.sm_count_error, "FUSEGEN_SM_COUNT=\"0\" ignored");
    assert_true(env.cache_max_bytes == default_max);
    fgt_assert_contains(env.cache_max_error, "FUSEGEN_CACHE_MAX_SIZE=\"lots\" ignored");
    assert_int_equal(env.log_level, 0);
    fgt_assert_contains(env.log_error, "FUSEGEN_LOG=\"verbose\" ignored");
    assert_false(env.no_graphs);
    assert_false(env.no_tuning);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(no_variables_change_nothing, clear_knobs),
        cmocka_unit_test_setup(integer_knobs, clear_knobs),
        cmocka_unit_test_setup(epilogue_rows_divide_the_slab, clear_knobs),
        cmocka_unit_test_setup(named_knobs, clear_knobs),
        cmocka_unit_test_setup(tuple_knobs, clear_knobs),
        cmocka_unit_test_setup(runtime_settings, clear_knobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
