/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "../runtime/environment.h"
#include "../runtime/nvrtc_compiler.h"
#include "../gen/block.h"
#include "../gen/spec_loader.h"

static const char usage[] =
    "usage: fusegen <command> [options]\n"
    "\n"
    "Shape-specialized fused CUDA kernels from layer specs (a conv and the ops after it).\n"
    "\n"
    "commands:\n"
    "  plan SPEC                  print the layer's ops with inferred shapes and its kernel plan\n"
    "  gen SPEC [-o DIR]          write the generated CUDA source\n"
    "  build [--arch LIST] [--cache DIR] [-j N] SPEC...\n"
    "                             precompile kernels into a cache (no GPU needed)\n"
    "  cache ls|verify|clear|stats|prune|export|import [--cache DIR]\n"
    "                             list, check, empty, measure, trim or ship a kernel cache\n"
    "  run SPEC [--device cpu|gpu] [--random SEED --batch N | --input X] [--weights W] [--out Y] [--check]\n"
    "                             run a layer on random or given tensors\n"
    "  bench SPEC [--batch N] [--iters N] | bench --ceilings\n"
    "                             time a layer or a block on the GPU against the hardware floor\n"
    "  ops [--markdown]           list the ops a spec can use, their fields and defaults\n"
    "  export MODULE.py[:CLASS] [-o SPEC]\n"
    "                             write the spec of a PyTorch module (needs the Python package and torch)\n"
    "  version                    print the version\n"
    "\n"
    "Run 'fusegen <command> --help' for a command's options. Docs: docs/spec.md, docs/cli.md.\n";

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fusegen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fusegen %s: ", command);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nRun 'fusegen %s --help' for usage.\n", command);
    va_end(ap);
    return EXIT_USAGE;
}

static void warn_knob(void *unused, const char *msg)
{
    (void)unused;
    fprintf(stderr, "fusegen: warning: %s\n", msg);
}

const fg_env_runtime *cli_environment(void)
{
    static fg_env_runtime env;
    static bool read;
    if (!read) { /* the CLI is single-threaded until build starts its workers */
        fg_env_runtime_read(&env);
        fg_nvrtc_use_library(env.nvrtc_library);
        read = true;
    }
    return &env;
}

int cli_open_cache(fg_cache *cache, const char *dir, bool with_shipped)
{
    const fg_env_runtime *env = cli_environment();
    if (!dir && !env->user_cache[0]) {
        cli_error("%s", env->user_cache_error);
        return -1;
    }
    fg_error err;
    if (fg_cache_init(cache, dir ? dir : env->user_cache, with_shipped ? env->shipped_caches : NULL, &err) != 0) {
        cli_error("%s", err.msg);
        return -1;
    }
    fg_cache_check_trust(cache);
    if (!dir) /* the user's own cache keeps its size; a --cache DIR built to ship is not trimmed */
        cache->max_bytes = env->cache_max_bytes;
    if (env->cache_max_error[0])
        fprintf(stderr, "fusegen: warning: %s\n", env->cache_max_error);
    return 0;
}

void cli_plan_options(fg_plan_options *opts, const char *arch)
{
    fg_plan_options_for_arch(opts, arch);
    fg_env_plan_options(opts, warn_knob, NULL);
}

int cli_load_and_plan(const char *path, const char *arch, fg_layer_ir *ir, fg_plan *plan)
{
    fg_error err;
    if (fg_spec_load_file(path, ir, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    fg_plan_options opts;
    cli_plan_options(&opts, arch);
    if (plan && fg_plan_layer(ir, &opts, plan, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

int cli_alternative_plan(const fg_layer_ir *ir, const char *arch, const fg_plan *plan, fg_plan *alternative,
                         bool as_this_process)
{
    fg_plan_options opts, other;
    cli_plan_options(&opts, arch);
    fg_error err;
    if ((as_this_process && cli_environment()->no_tuning) || !fg_plan_engine_alternative(ir, &opts, plan, &other) ||
        fg_plan_layer(ir, &other, alternative, &err) != 0)
        return 0;
    return memcmp(alternative, plan, sizeof *plan) != 0;
}

int cli_load_spec(const char *path, const char *arch, fg_block_ir *b)
{
    fg_error err;
    memset(b, 0, sizeof *b);
    fg_plan_options opts;
    if (arch)
        cli_plan_options(&opts, arch);
    if (fg_block_spec_load_file_for(path, arch ? &opts : NULL, b, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        fg_block_ir_free(b);
        return -1;
    }
    return 0;
}

int cli_plans_for_cache(const fg_layer_ir *ir, const char *arch, fg_plan plans[2])
{
    fg_plan_options opts;
    cli_plan_options(&opts, arch);
    fg_error err;
    if (fg_plan_layer(ir, &opts, &plans[0], &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 1 + cli_alternative_plan(ir, arch, &plans[0], &plans[1], false);
}

int cli_parse_archs(const char *list, char archs[][16], int cap)
{
    int n = 0;
    const char *p = list;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= 16 || n == cap) {
            cli_error("bad --arch list '%s' (expected e.g. sm_80,sm_90a)", list);
            return -1;
        }
        memcpy(archs[n], p, len);
        archs[n][len] = '\0';
        int num = 0;
        char suffix[4] = "";
        if (sscanf(archs[n], "sm_%d%3s", &num, suffix) < 1 || num < 80 || (suffix[0] && strcmp(suffix, "a") != 0)) {
            cli_error("unsupported architecture '%s': fusegen targets sm_80 and newer (sm_80, sm_86, sm_89, "
                      "sm_90, sm_90a, ...)",
                      archs[n]);
            return -1;
        }
        n++;
        p += len + (comma != NULL);
    }
    if (n == 0)
        cli_error("empty --arch list");
    return n ? n : -1;
}

/* Digits only: strtoll alone would take " 5", "+5" and clamp what overflows. */
static bool parse_digits(const char *value, long long *out)
{
    if (!isdigit((unsigned char)value[0]))
        return false;
    char *end;
    errno = 0;
    *out = strtoll(value, &end, 10);
    return *end == '\0' && errno == 0;
}

long cli_parse_positive(const char *command, const char *option, const char *value, long max)
{
    long long v;
    if (!parse_digits(value, &v) || v <= 0 || v > max) {
        cli_usage_error(command, "%s expects an integer from 1 to %ld, got '%s'", option, max, value);
        return -1;
    }
    return (long)v;
}

int cli_parse_seed(const char *command, const char *option, const char *value, uint64_t *out)
{
    long long v;
    if (!parse_digits(value, &v)) {
        cli_usage_error(command, "%s expects an integer from 0 to %lld, got '%s'", option, LLONG_MAX, value);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_dir(const char *command, const char *option, const char *value, const char **out)
{
    if (!value[0]) /* "" would fall back to the default user cache: `cache clear --cache ""` emptied it */
        return cli_usage_error(command, "%s expects a directory, got an empty string", option), -1;
    *out = value;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("fusegen %s\n", FUSEGEN_VERSION);
        return EXIT_OK;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } commands[] = {
        {"plan", cmd_plan}, {"gen", cmd_gen}, {"build", cmd_build}, {"cache", cmd_cache},
        {"run", cmd_run},   {"bench", cmd_bench}, {"ops", cmd_ops}, {"export", cmd_export},
    };
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(cmd, commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    const char *names[] = {"plan", "gen", "build", "cache", "run", "bench", "ops", "export", "version", "help"};
    const char *near = fg_nearest_name(cmd, names, (int)(sizeof names / sizeof *names));
    if (near)
        cli_error("unknown command '%s' (did you mean '%s'?)", cmd, near);
    else
        cli_error("unknown command '%s'", cmd);
    fputs("Run 'fusegen --help' for the list of commands.\n", stderr);
    return EXIT_USAGE;
}
