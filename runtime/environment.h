/* SPDX-License-Identifier: Apache-2.0 */
/* The environment edge: the one place in the library where fusegen reads environment
 * variables. The CLI and the public API (fg_context_create) call these once and pass what
 * they read down as arguments and options; every stage below (planner, renderer, compiler,
 * cache, loaders, launcher) is a function of its arguments. `grep -rn getenv gen runtime
 * reference common` finds only this file.
 *
 * Planner knobs (docs/api.md lists them; all are for benchmarks and tests):
 *   FUSEGEN_STRATEGY     materialize | recompute | resident, for specs that say "auto"
 *   FUSEGEN_CONV_ENGINE  fma | mma | wgmma: the conv engine where the shape allows it
 *   FUSEGEN_MMA_WARP     mt,rows,ntw: the tensor-core engine's warp tile
 *   FUSEGEN_MMA_TILES    R: tiles per block of the tensor-core engine (1..8)
 *   FUSEGEN_MMA_ACC_STEPS A: reduction steps per fresh accumulator of the tensor-core engine (1..64)
 *   FUSEGEN_CONV_TILE    rows,cols,channels[,unroll]: the FMA engine's thread tile
 *   FUSEGEN_SPLIT_K      N: the wgmma engine splits a tile's K over at most N CTAs (1: never)
 *   FUSEGEN_SPLIT_WAVES  0 | 1: a launch's K splits within one wave of the SMs (0) or counted in waves (1)
 *   FUSEGEN_WGMMA_M64    1 | 2: the most m64 tiles per wgmma consumer warpgroup
 *   FUSEGEN_WGMMA_MULTICAST 1 | 2: pairs of wgmma CTAs share each weight chunk (2) or not
 *   FUSEGEN_WGMMA_A_TMA  1 | 2: the wgmma producer loads A by TMA in im2col mode where it can (2, the default) or never (1)
 *   FUSEGEN_WGMMA_BN     8..256: the widest channel block of a wgmma tile (default 128)
 *   FUSEGEN_WGMMA_EPI_ROWS 1 | 2 | 4 | 8 | 16: the staged wgmma epilogue's rows per iteration of its row loop
 * A value that does not parse is ignored with a warning through `warn` (which may be NULL),
 * never half-applied.
 *
 * Runtime settings (fg_env_runtime):
 *   FUSEGEN_CACHE_DIR, else $XDG_CACHE_HOME/fusegen, else $HOME/.cache/fusegen: the user cache
 *   FUSEGEN_CACHE_PATH   shipped read-only caches, colon-separated
 *   FUSEGEN_NVRTC, FUSEGEN_LIBCUDA, FUSEGEN_LIBCUDNN: the libraries to try first
 *   FUSEGEN_NO_GRAPHS    1: launch passes directly instead of replaying a CUDA graph
 *   FUSEGEN_TUNE         0 (off, no, false): keep the planner's conv engine where it would time two
 *                        (runtime/tuning.h)
 *   FUSEGEN_LOG          warn | info | debug: what the library's log shows
 *   FUSEGEN_CACHE_MAX_SIZE  the user cache's size cap ("4G", "500M", "0": none; default 4G)
 *   TMPDIR               where a source NVRTC rejects is saved (default /tmp) */
#ifndef FG_ENVIRONMENT_H
#define FG_ENVIRONMENT_H

#include <stdbool.h>

#include "../common/diag.h"
#include "../gen/planner.h"

/* Fills the knobs of `opts` (already initialized, fg_plan_options_init) from the environment. */
void fg_env_plan_options(fg_plan_options *opts, void (*warn)(void *ctx, const char *msg), void *warn_ctx);

enum { FG_ENV_PATH_MAX = 4096 };

/* Everything else the runtime takes from the environment, copied (a later setenv cannot
 * change it). An empty string means "not set". */
typedef struct fg_env_runtime {
    char user_cache[FG_ENV_PATH_MAX];   /* "" when none can be determined (user_cache_error says why) */
    char user_cache_error[256];
    bool shipped_set;                   /* FUSEGEN_CACHE_PATH is set (even empty: no shipped caches) */
    char shipped_caches[FG_ENV_PATH_MAX];
    char nvrtc_library[FG_ENV_PATH_MAX];
    char cuda_library[FG_ENV_PATH_MAX];
    char cudnn_library[FG_ENV_PATH_MAX];
    char tmpdir[FG_ENV_PATH_MAX];       /* TMPDIR, else "/tmp" */
    bool no_graphs;
    bool no_tuning;                     /* FUSEGEN_TUNE=0: the planner's engine, never timed */
    int log_level;                      /* FUSEGEN_LOG: 1 warn, 2 info, 3 debug; 0 when unset */
    unsigned long long cache_max_bytes; /* FUSEGEN_CACHE_MAX_SIZE ("4G", "0": no cap); default 4 GiB */
    char cache_max_error[128];          /* why FUSEGEN_CACHE_MAX_SIZE was ignored, or "" */
    char log_error[128];                /* why FUSEGEN_LOG was ignored, or "" */
    /* FUSEGEN_SM_COUNT: at most this many of the device's multiprocessors for a persistent
     * conv's CTAs (0: all). For tests: a few CTAs then walk many tiles each, as the largest
     * launches do, at a test's small shapes */
    int sm_count_cap;
    char sm_count_error[128];           /* why FUSEGEN_SM_COUNT was ignored, or "" */
} fg_env_runtime;

/* Reads every runtime setting above once. */
void fg_env_runtime_read(fg_env_runtime *env);

#endif
