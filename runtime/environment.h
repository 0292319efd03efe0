/* The environment edge: the one place below the CLI's argument parsing where fusegen reads
 * environment variables. The CLI and the public API (fg_context_create) call these once and
 * pass what they read down as options; every stage below (planner, renderer, compiler,
 * cache, launcher) is a function of its arguments.
 *
 * Planner knobs (docs/api.md lists them; all are for benchmarks and tests):
 *   FUSEGEN_STRATEGY     materialize | recompute | resident, for specs that say "auto"
 *   FUSEGEN_CONV_ENGINE  fma | mma: the conv engine where the shape allows it
 *   FUSEGEN_MMA_WARP     mt,rows,ntw: the tensor-core engine's warp tile
 *   FUSEGEN_MMA_TILES    R: tiles per block of the tensor-core engine (1..8)
 *   FUSEGEN_CONV_TILE    rows,cols,channels[,unroll]: the FMA engine's thread tile
 * A value that does not parse is ignored with a warning through `warn` (which may be NULL),
 * never half-applied. */
#ifndef FG_ENVIRONMENT_H
#define FG_ENVIRONMENT_H

#include "../gen/planner.h"

/* Fills the knobs of `opts` (already initialized, fg_plan_options_init) from the environment. */
void fg_env_plan_options(fg_plan_options *opts, void (*warn)(void *ctx, const char *msg), void *warn_ctx);

#endif
