/* SPDX-License-Identifier: Apache-2.0 */
#include "environment.h"
#include "cache_maintenance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void warn_bad(void (*warn)(void *, const char *), void *ctx, const char *var, const char *value,
                     const char *expected)
{
    if (!warn)
        return;
    char msg[512];
    snprintf(msg, sizeof msg, "%s=\"%.100s\" ignored: expected %s", var, value, expected);
    warn(ctx, msg);
}

/* "a,b,c": n integers (the last `optional` of them may be left out, and are then 0), each
 * in [lo, hi], and nothing else. */
static bool parse_ints(const char *s, int *out, int n, int optional, int lo, int hi)
{
    int got = 0;
    const char *p = s;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > hi || got == n)
            return false;
        out[got++] = (int)v;
        if (*end == '\0')
            break;
        if (*end != ',')
            return false;
        p = end + 1;
    }
    if (got < n - optional)
        return false;
    for (int i = got; i < n; i++)
        out[i] = 0;
    return true;
}

/* One integer knob in lo..hi: *out keeps its value when the variable is unset or bad (warned) */
static void env_int(const char *var, int lo, int hi, int *out, const char *expected,
                    void (*warn)(void *, const char *), void *warn_ctx)
{
    const char *v = getenv(var);
    int x;
    if (!v || !*v)
        return;
    if (parse_ints(v, &x, 1, 0, lo, hi))
        *out = x;
    else
        warn_bad(warn, warn_ctx, var, v, expected);
}

void fg_env_plan_options(fg_plan_options *opts, void (*warn)(void *ctx, const char *msg), void *warn_ctx)
{
    const char *v = getenv("FUSEGEN_STRATEGY");
    if (v && *v) {
        static const char *const names[] = {"materialize", "recompute", "resident"};
        int found = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(v, names[i]) == 0)
                found = i;
        if (found >= 0)
            opts->default_strategy = found;
        else
            warn_bad(warn, warn_ctx, "FUSEGEN_STRATEGY", v, "materialize, recompute or resident");
    }
    v = getenv("FUSEGEN_CONV_ENGINE");
    if (v && *v) {
        if (strcmp(v, "fma") == 0)
            opts->engine = FG_ENGINE_PREFER_FMA;
        else if (strcmp(v, "mma") == 0)
            opts->engine = FG_ENGINE_PREFER_MMA;
        else if (strcmp(v, "wgmma") == 0)
            opts->engine = FG_ENGINE_PREFER_WGMMA;
        else
            warn_bad(warn, warn_ctx, "FUSEGEN_CONV_ENGINE", v, "fma, mma or wgmma");
    }
    v = getenv("FUSEGEN_MMA_WARP");
    if (v && *v) {
        int w[3];
        /* a warp holds at most 16 n-tiles of accumulators */
        if (parse_ints(v, w, 3, 0, 1, 16) && w[0] <= 4 && w[1] * w[2] <= 16)
            memcpy(opts->mma_warp, w, sizeof w);
        else
            warn_bad(warn, warn_ctx, "FUSEGEN_MMA_WARP", v, "mt,rows,ntw with mt 1..4 and rows x ntw <= 16");
    }
    env_int("FUSEGEN_MMA_TILES", 1, 8, &opts->mma_tiles, "a number of tiles, 1 to 8", warn, warn_ctx);
    env_int("FUSEGEN_MMA_ACC_STEPS", 1, 64, &opts->mma_acc_steps, "a number of reduction steps, 1 to 64", warn,
            warn_ctx);
    env_int("FUSEGEN_SPLIT_K", 1, 64, &opts->split_k, "the most K splits of the wgmma engine, 1 (never) to 64", warn,
            warn_ctx);
    env_int("FUSEGEN_SPLIT_WAVES", 0, 1, &opts->split_waves,
            "0 (wgmma K splits within one wave of the SMs) or 1 (counted in waves)", warn, warn_ctx);
    env_int("FUSEGEN_WGMMA_M64", 1, 2, &opts->wgmma_m64,
            "the most m64 tiles per wgmma consumer warpgroup, 1 (128-pixel tiles) or 2", warn, warn_ctx);
    env_int("FUSEGEN_WGMMA_MULTICAST", 1, 2, &opts->wgmma_multicast,
            "1 (each wgmma CTA copies its weights) or 2 (pairs of CTAs share them)", warn, warn_ctx);
    env_int("FUSEGEN_WGMMA_A_TMA", 1, 2, &opts->wgmma_a_tma,
            "1 (the wgmma producer threads copy A with cp.async) or 2 (TMA in im2col mode where it can, the default)", warn,
            warn_ctx);
    env_int("FUSEGEN_WGMMA_CTAS", 1, 2, &opts->wgmma_ctas,
            "1 (one wgmma CTA a multiprocessor) or 2 (two where they fit)", warn, warn_ctx);
    env_int("FUSEGEN_WGMMA_ALTERNATE", 1, 2, &opts->wgmma_alternate,
            "1 (the wgmma consumer warpgroups share each tile) or 2 (they take whole tiles in turn where they can; "
            "default: where K never splits, half operands)",
            warn, warn_ctx);
    env_int("FUSEGEN_WGMMA_FLAT_PREDICATED", 1, 2, &opts->wgmma_flat_predicated,
            "1 (a flat wgmma tile checks each output's sample by a branch) or 2 (by predicated stores where it can, the default)",
            warn, warn_ctx);
    env_int("FUSEGEN_FAST_GELU", 1, 2, &opts->fast_gelu,
            "1 (GELU by erff everywhere) or 2 (by a five-term fit of erfc at precision tf32, the default)", warn, warn_ctx);
    env_int("FUSEGEN_WGMMA_FLAT", 1, 2, &opts->wgmma_flat,
            "1 (flat wgmma tiles only where a sample leaves more than a quarter of its 128-row tiles empty) or "
            "2 (also where tiles in turn leave any rows empty; default: where they leave more than a fifth)",
            warn, warn_ctx);
    env_int("FUSEGEN_WGMMA_EPI_VEC", 1, 2, &opts->wgmma_epi_vec,
            "1 (a wgmma staged epilogue's lane a channel, the default) or 2 (16-byte vectors of neighbouring channels "
            "where it can)",
            warn, warn_ctx);
    env_int("FUSEGEN_WGMMA_BN", 8, 256, &opts->wgmma_bn,
            "the widest channel block of a wgmma tile, 8 to 256 (rounded up to a multiple of 8)", warn, warn_ctx);
    int rows = 0;
    env_int("FUSEGEN_WGMMA_EPI_ROWS", 1, 16, &rows, "1, 2, 4, 8 or 16", warn, warn_ctx);
    if (rows && !fg_wgmma_epi_rows_valid(rows))
        warn_bad(warn, warn_ctx, "FUSEGEN_WGMMA_EPI_ROWS", getenv("FUSEGEN_WGMMA_EPI_ROWS"), "1, 2, 4, 8 or 16");
    else if (rows)
        opts->wgmma_epi_rows = rows;
    v = getenv("FUSEGEN_CONV_TILE");
    if (v && *v) {
        int t[4];
        if (parse_ints(v, t, 4, 1, 0, 64) && (t[2] == 0 || t[2] % 4 == 0))
            memcpy(opts->conv_tile, t, sizeof t);
        else
            warn_bad(warn, warn_ctx, "FUSEGEN_CONV_TILE", v,
                     "rows,cols,channels[,unroll] (0 keeps the planner's choice; channels a multiple of 4)");
    }
}

/* Copies the variable into buf; false when unset or empty. A value that does not fit is
 * treated as unset rather than truncated into another path. */
static bool copy_var(const char *name, char *buf, size_t cap)
{
    const char *v = getenv(name);
    buf[0] = '\0';
    if (!v || !v[0] || strlen(v) >= cap)
        return false;
    memcpy(buf, v, strlen(v) + 1);
    return true;
}

static void user_cache_dir(fg_env_runtime *env)
{
    char base[FG_ENV_PATH_MAX];
    int n;
    const char *what;
    if (copy_var("FUSEGEN_CACHE_DIR", env->user_cache, sizeof env->user_cache))
        return;
    if (getenv("FUSEGEN_CACHE_DIR") && getenv("FUSEGEN_CACHE_DIR")[0]) {
        snprintf(env->user_cache_error, sizeof env->user_cache_error,
                 "FUSEGEN_CACHE_DIR is longer than %d bytes", FG_ENV_PATH_MAX - 1);
        return;
    }
    if (copy_var("XDG_CACHE_HOME", base, sizeof base)) {
        what = "XDG_CACHE_HOME";
        n = snprintf(env->user_cache, sizeof env->user_cache, "%s/fusegen", base);
    } else if (copy_var("HOME", base, sizeof base)) {
        what = "HOME";
        n = snprintf(env->user_cache, sizeof env->user_cache, "%s/.cache/fusegen", base);
    } else {
        snprintf(env->user_cache_error, sizeof env->user_cache_error,
                 "no cache directory: set FUSEGEN_CACHE_DIR, XDG_CACHE_HOME or HOME");
        return;
    }
    if (n < 0 || (size_t)n >= sizeof env->user_cache) {
        env->user_cache[0] = '\0';
        snprintf(env->user_cache_error, sizeof env->user_cache_error, "the cache directory under %s is too long",
                 what);
    }
}

void fg_env_runtime_read(fg_env_runtime *env)
{
    memset(env, 0, sizeof *env);
    user_cache_dir(env);
    const char *shipped = getenv("FUSEGEN_CACHE_PATH");
    env->shipped_set = shipped != NULL;
    if (shipped && strlen(shipped) < sizeof env->shipped_caches)
        memcpy(env->shipped_caches, shipped, strlen(shipped) + 1);
    copy_var("FUSEGEN_NVRTC", env->nvrtc_library, sizeof env->nvrtc_library);
    copy_var("FUSEGEN_LIBCUDA", env->cuda_library, sizeof env->cuda_library);
    copy_var("FUSEGEN_LIBCUDNN", env->cudnn_library, sizeof env->cudnn_library);
    if (!copy_var("TMPDIR", env->tmpdir, sizeof env->tmpdir))
        snprintf(env->tmpdir, sizeof env->tmpdir, "/tmp");
    const char *no_graphs = getenv("FUSEGEN_NO_GRAPHS");
    env->no_graphs = no_graphs && *no_graphs && strcmp(no_graphs, "0") != 0;
    const char *tune = getenv("FUSEGEN_TUNE");
    env->no_tuning = tune && (strcmp(tune, "0") == 0 || strcasecmp(tune, "off") == 0 || strcasecmp(tune, "no") == 0 ||
                              strcasecmp(tune, "false") == 0);
    env->cache_max_bytes = FG_CACHE_DEFAULT_MAX_BYTES;
    const char *max = getenv("FUSEGEN_CACHE_MAX_SIZE");
    uint64_t bytes;
    if (max && *max && fg_parse_size(max, &bytes) == 0)
        env->cache_max_bytes = bytes;
    else if (max && *max)
        snprintf(env->cache_max_error, sizeof env->cache_max_error,
                 "FUSEGEN_CACHE_MAX_SIZE=\"%.40s\" ignored: expected a size like 4G, 500M or 0 (no cap)", max);
    const char *sms = getenv("FUSEGEN_SM_COUNT");
    if (sms && *sms) {
        int n;
        if (parse_ints(sms, &n, 1, 0, 1, 4096))
            env->sm_count_cap = n;
        else
            snprintf(env->sm_count_error, sizeof env->sm_count_error,
                     "FUSEGEN_SM_COUNT=\"%.40s\" ignored: expected a number of multiprocessors, 1 to 4096", sms);
    }
    const char *log = getenv("FUSEGEN_LOG");
    if (log && *log) {
        static const char *const levels[] = {"warn", "info", "debug"};
        for (int i = 0; i < 3; i++)
            if (strcmp(log, levels[i]) == 0)
                env->log_level = i + 1;
        if (!env->log_level)
            snprintf(env->log_error, sizeof env->log_error, "FUSEGEN_LOG=\"%.40s\" ignored: expected warn, info or debug",
                     log);
    }
}
