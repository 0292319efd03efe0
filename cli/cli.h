/* SPDX-License-Identifier: Apache-2.0 */
/* The fusegen command line: one file per command, sharing these helpers. Conventions:
 * results on stdout, messages and progress on stderr, exit 0 on success, 1 on failure,
 * 2 on a usage error. */
#ifndef FG_CLI_H
#define FG_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/diag.h"
#include "../gen/block.h"
#include "../gen/ir.h"
#include "../gen/planner.h"
#include "../runtime/cache.h"
#include "../runtime/environment.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

int cmd_plan(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_build(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_ops(int argc, char **argv);
/* fusegen cache export / import (cmd_cache_ship.c) */
int cli_cache_export(fg_cache *cache, const char *arch_list, const char *output, char **specs, int n_specs);
int cli_cache_import(fg_cache *cache, const char *archive);
int cmd_export(int argc, char **argv);

/* "fusegen: <message>" on stderr. */
void cli_error(const char *fmt, ...) FG_PRINTF(1, 2);
/* Prints a usage error and the hint to run --help; returns EXIT_USAGE. */
int cli_usage_error(const char *command, const char *fmt, ...) FG_PRINTF(2, 3);

/* The environment's runtime settings (runtime/environment.h), read once; commands without a
 * context take their cache directories and library locations from here. */
const fg_env_runtime *cli_environment(void);
/* Initializes `cache` on `dir` (NULL: the environment's user cache), with no shipped caches
 * unless `with_shipped`; loads NVRTC's preferred library setting. Prints why on failure. */
int cli_open_cache(fg_cache *cache, const char *dir, bool with_shipped);

/* What commands generate for by default: Hopper's arch-specific target, which a context on
 * a compute capability 9.0 device asks for (runtime/api_context.c: the wgmma engine needs
 * it), and the A100's. A cache shipped for sm_90 would serve no H100 or H200. */
#define CLI_DEFAULT_ARCH "sm_90a"
#define CLI_DEFAULT_ARCHS "sm_80,sm_90a"

/* The planner options for `arch` with the knobs of the environment (runtime/environment.h). */
void cli_plan_options(fg_plan_options *opts, const char *arch);
/* Loads a spec and plans it for `arch` ("sm_90"), printing any error; returns 0 or -1. */
int cli_load_and_plan(const char *path, const char *arch, fg_layer_ir *ir, fg_plan *plan);
/* 1 and *alternative planned when the runtime would time `plan` against another at the first
 * run (fg_plan_engine_alternative), else 0. `as_this_process`: as this process's runtime
 * would (FUSEGEN_TUNE=0 turns the timing off: `fusegen plan`), else as any user's (a cache
 * built to ship holds both plans whatever the builder's environment). */
int cli_alternative_plan(const fg_layer_ir *ir, const char *arch, const fg_plan *plan, fg_plan *alternative,
                         bool as_this_process);
/* Loads the spec at `path` as the runtime will for `arch` (a block's IR may depend on the
 * target: fg_block_spec_load_file_for; NULL: the structure alone, for what does not depend on
 * it): a layer spec (b->single; its layer in layers[0]) or a block (its layers in run order,
 * each IR exactly the one fg_block_load_file gives its layer on that target, so the same cache
 * keys). Prints why it failed; returns 0 or -1. fg_block_ir_free frees it after success (a
 * failure frees what it loaded). */
int cli_load_spec(const char *path, const char *arch, fg_block_ir *b);
/* The plans a cache for `arch` must hold for one layer (build, cache export): the planner's
 * in plans[0], and in plans[1] the one the runtime times it against at the first run, if
 * any. Returns how many (1 or 2), or -1 after printing why the layer cannot be planned. */
int cli_plans_for_cache(const fg_layer_ir *ir, const char *arch, fg_plan plans[2]);

/* Splits "sm_80,sm_90" into at most `cap` entries; checks each looks like sm_NN[a]. */
int cli_parse_archs(const char *list, char archs[][16], int cap);

/* Option values, strictly (digits only, no sign, no spaces, no overflow); each prints a usage
 * error and returns -1 on a bad value. An integer from 1 to max: */
long cli_parse_positive(const char *command, const char *option, const char *value, long max);
/* A seed from 0 to LLONG_MAX: */
int cli_parse_seed(const char *command, const char *option, const char *value, uint64_t *out);
/* A directory, never "" (which would mean the default user cache): */
int cli_parse_dir(const char *command, const char *option, const char *value, const char **out);

#endif
