/* SPDX-License-Identifier: Apache-2.0 */
/* The conv engine chosen by timing (runtime/tuning.h), on the GPU:
 *   1. a layer whose engine the planner leaves open (8 -> 64 channels, 3x3: K 72) is timed
 *      on both engines at its first run, says so in the log, and matches the CPU reference;
 *   2. a second context on the same cache takes the recorded choice without timing and
 *      matches again;
 *   3. the workspace reported before the first run covers the plan chosen at it (the torch
 *      op allocates it first);
 *   4. a layer the measurements settle (64 -> 128, K 576) is never timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

static const char *const open_spec = "return layer \"tuning_open\" {\n  input = { \"N\", 8, 40, 40 },\n"
                                     "  conv2d { name = \"conv\", out_channels = 64, kernel = 3 },\n"
                                     "  group_norm { name = \"gn\", groups = 16 },\n  relu {},\n}\n";
static const char *const settled_spec = "return layer \"tuning_settled\" {\n  input = { \"N\", 64, 20, 20 },\n"
                                        "  conv2d { out_channels = 128, kernel = 3 },\n  relu {},\n}\n";

typedef struct log_capture {
    char text[16384];
    size_t len;
} log_capture;

static void capture(void *user, fg_log_level level, const char *message)
{
    (void)level;
    log_capture *c = user;
    int n = snprintf(c->text + c->len, sizeof c->text - c->len, "%s\n", message);
    if (n > 0 && c->len + (size_t)n < sizeof c->text)
        c->len += (size_t)n;
}

static fg_context *open_logged(log_capture *log)
{
    memset(log, 0, sizeof *log);
    fg_context_options o;
    fg_context_options_init(&o);
    o.cache_dir = gpu_cache_dir();
    o.log = capture;
    o.log_user = log;
    o.log_level = FG_LOG_DEBUG;
    fg_context *ctx = NULL;
    if (fg_context_create(&o, &ctx) != FG_OK) {
        printf("FAILED cannot open a context: %s\n", fg_last_error());
        exit(1);
    }
    return ctx;
}

static int expect(bool ok, const char *what, const log_capture *log)
{
    printf("%s %s\n", ok ? "ok    " : "FAILED", what);
    if (!ok)
        printf("  log:\n%s", log->text);
    return ok ? 0 : 1;
}

static int check(fg_context *ctx, const char *name, const char *spec, const log_capture *log)
{
    gpu_result r = gpu_check_spec(ctx, name, spec, 3, 4242, 1e-4);
    char what[256];
    snprintf(what, sizeof what, "%s matches the CPU reference (max abs %.3g, %lld/%lld outside 1e-4)%s", name,
             r.max_abs, r.bad, r.count, r.ok ? "" : r.error);
    return expect(r.ok && r.pass, what, log);
}

int main(void)
{
    fg_context *base = gpu_open("test_gpu_tuning");
    int failed = 0, cases = 0;
    log_capture log;

    /* 3: the workspace reported before the first run, then the first run's own */
    fg_context *ctx = open_logged(&log);
    fg_layer *layer = NULL;
    size_t before = 0, after = 0;
    if (fg_layer_load_string(ctx, "tuning_open.lua", open_spec, &layer) != FG_OK ||
        fg_layer_workspace_size(layer, 3, &before) != FG_OK) {
        printf("FAILED loading the open layer: %s\n", fg_last_error());
        return 1;
    }
    fg_layer_destroy(layer);

    /* 1: the first run times both engines */
    failed += check(ctx, "tuning_open", open_spec, &log), cases++;
    failed += expect(strstr(log.text, "tuning_open: timed the conv on") != NULL,
                     "the first run timed two engines and said so", &log), cases++;
    failed += expect(strstr(log.text, "recorded in the cache") != NULL, "the choice was recorded", &log), cases++;
    if (fg_layer_load_string(ctx, "tuning_open.lua", open_spec, &layer) == FG_OK && fg_layer_prepare(layer) == FG_OK &&
        fg_layer_workspace_size(layer, 3, &after) == FG_OK)
        failed += expect(after <= before, "the workspace reported before the choice covers the chosen plan's", &log);
    else
        failed += expect(false, "the workspace after the choice", &log);
    cases++;
    fg_layer_destroy(layer);
    fg_context_destroy(ctx);

    /* 2: another context on the same cache takes the recorded choice */
    ctx = open_logged(&log);
    failed += check(ctx, "tuning_open (again)", open_spec, &log), cases++;
    failed += expect(strstr(log.text, "as timed before on this GPU") != NULL && !strstr(log.text, "timed the conv on"),
                     "a second context took the recorded choice without timing", &log),
        cases++;

    /* 4: a settled layer is never timed */
    failed += check(ctx, "tuning_settled", settled_spec, &log), cases++;
    failed += expect(!strstr(log.text, "tuning_settled: timed"), "a settled layer was not timed", &log), cases++;
    fg_context_destroy(ctx);
    gpu_close(base);
    printf("%d cases, %d failed\n", cases, failed);
    return failed ? 1 : 0;
}
