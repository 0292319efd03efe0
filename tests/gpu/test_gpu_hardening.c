/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU half of the second hardening round (docs/hardening.md):
 *   1. a pass with many kernel arguments (a conv, then 43 and 47 per-channel multiplies and
 *      an instance norm): the layer runs correctly against the CPU reference, or is refused
 *      at load with a message naming the pass; it never launches past an argument array;
 *   2. a plan alias planted for another shape of the same layer name (a smaller input) is
 *      refused: the layer runs its own kernels and matches the reference (the old code loaded
 *      the smaller layer's kernels: out of bounds, compute-sanitizer memcheck reports it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/kernel_build.h"
#include "gpu_harness.h"

static int many_arguments(fg_context *ctx, int muls)
{
    size_t cap = 8192, len = 0;
    char *src = malloc(cap);
    len += (size_t)snprintf(src + len, cap - len,
                            "return layer \"many_args_%d\" {\n  input = { \"N\", 3, 12, 12 },\n"
                            "  conv2d { out_channels = 4, kernel = 3 },\n",
                            muls);
    for (int k = 0; k < muls; k++)
        len += (size_t)snprintf(src + len, cap - len, "  mul { param = \"p%d\", shape = { 4, 1, 1 } },\n", k);
    snprintf(src + len, cap - len, "  instance_norm {},\n}\n");
    char name[64];
    snprintf(name, sizeof name, "many_args_%d.lua", muls);
    gpu_result r = gpu_check_spec(ctx, name, src, 2, 4700 + (uint64_t)muls, 1e-4);
    free(src);
    if (!r.ok && strstr(r.error, "load:") && (strstr(r.error, "argument") || strstr(r.error, "at most"))) {
        printf("ok     %-24s refused at load: %s\n", name, r.error);
        return 0;
    }
    if (!r.ok) {
        printf("FAILED %-24s %s\n", name, r.error);
        return 1;
    }
    printf("%s %-24s ran: max abs %.3g, %lld/%lld outside 1e-4%s\n", r.pass ? "ok    " : "FAILED", name, r.max_abs,
           r.bad, r.count, r.nan ? " (NaN)" : "");
    return r.pass ? 0 : 1;
}

static const char *const big_spec = "return layer \"alias_shape\" {\n  input = { \"N\", 3, 20, 20 },\n"
                                    "  conv2d { out_channels = 8, kernel = 3 },\n  relu {},\n}\n";
static const char *const small_spec = "return layer \"alias_shape\" {\n  input = { \"N\", 3, 8, 8 },\n"
                                      "  conv2d { out_channels = 8, kernel = 3 },\n  relu {},\n}\n";

/* The plan alias path of `source`'s layer in the context's cache. */
static int alias_path(fg_context *ctx, const char *source, char *path, size_t cap)
{
    fg_layer *layer = NULL;
    if (fg_layer_load_string(ctx, "alias.lua", source, &layer) != FG_OK)
        return -1;
    fg_cache_identity id;
    fg_error err;
    fg_tools_device device;
    if (fg_build_identity(&id, &err) != 0 || fg_tools_device_info(ctx, &device) != FG_OK) {
        fg_layer_destroy(layer);
        return -1;
    }
    char plan_key[FG_CACHE_KEY_HEX + 1];
    fg_plan_key(&id, fg_tools_layer_ir(layer), fg_tools_layer_plan(layer), device.arch, plan_key);
    fg_cache_alias_path(gpu_cache_dir(), plan_key, path, cap);
    fg_layer_destroy(layer);
    return 0;
}

static int planted_alias(fg_context *ctx)
{
    /* the smaller layer runs first: its entry and alias are in the cache */
    gpu_result r = gpu_check_spec(ctx, "alias_small.lua", small_spec, 2, 11, 1e-4);
    char small_alias[2048], big_alias[2048];
    if (!r.ok || !r.pass || alias_path(ctx, small_spec, small_alias, sizeof small_alias) != 0 ||
        alias_path(ctx, big_spec, big_alias, sizeof big_alias) != 0) {
        printf("FAILED planted alias: setting up: %s\n", r.error);
        return 1;
    }
    /* plant: the bigger layer's alias names the smaller layer's entry */
    size_t len = 0;
    char *text = gpu_read_file(small_alias);
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", big_alias);
    *strrchr(dir, '/') = '\0';
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    FILE *f = text && system(cmd) == 0 ? fopen(big_alias, "wb") : NULL;
    if (f) {
        len = strlen(text);
        fwrite(text, 1, len, f);
        fclose(f);
    }
    free(text);
    if (!len) {
        printf("FAILED planted alias: cannot write %s\n", big_alias);
        return 1;
    }
    r = gpu_check_spec(ctx, "alias_big.lua", big_spec, 2, 12, 1e-4);
    printf("%s planted alias for another shape: %s max abs %.3g, %lld/%lld outside 1e-4%s\n",
           r.ok && r.pass ? "ok    " : "FAILED", r.ok ? "ran its own kernels," : r.error, r.max_abs, r.bad, r.count,
           r.nan ? " (NaN)" : "");
    return r.ok && r.pass ? 0 : 1;
}

int main(void)
{
    fg_context *ctx = gpu_open("test_gpu_hardening");
    int failed = many_arguments(ctx, 43) + many_arguments(ctx, 47) + planted_alias(ctx);
    gpu_close(ctx);
    printf("3 cases, %d failed\n", failed);
    return failed ? 1 : 0;
}
