/* SPDX-License-Identifier: Apache-2.0 */
/* Choosing a layer's conv engine by timing, where the planner's measurements leave it open
 * (fg_plan_engine_alternative, bench/NOTES.md v7).
 *
 * At load, a layer whose engine is open gets a second candidate plan. At its first prepare
 * on the GPU both candidates are built (compiled side by side, or found in the caches: `fusegen
 * build` stores both), run on random data at the run's batch (capped at 1 GiB of tensors),
 * alternately, two warm-ups and five timed runs each; the alternative is kept only when its
 * median is 3 % below the planner's plan's (the prior); the layer
 * then runs that plan for its life. The choice is recorded in the user cache as an alias from
 * a tuning key -- the identity, both plan keys, the GPU's name and multiprocessor count, the
 * batch's power of two -- to the winner's entry, so that later processes on the same GPU take
 * it without timing (and lose it, like any alias, when the entry is evicted). A capture in
 * progress on the run's stream, FUSEGEN_TUNE=0 or a failure to time keeps the planner's
 * choice. */
#ifndef FG_TUNING_H
#define FG_TUNING_H

#include <stdbool.h>
#include <stdint.h>

#include "../gen/planner.h"
#include "cuda_driver.h"
#include "launcher.h"

typedef struct fg_layer fg_layer;

/* A plan the layer may run instead of its own, with its launch table. */
typedef struct fg_layer_candidate {
    fg_plan plan;
    fg_launch_table launch;
} fg_layer_candidate;

/* The plan the layer's would be timed against (another conv engine, nothing else) when the
 * planner left its engine open, whatever the context's device and FUSEGEN_TUNE: true and
 * *out planned, else false. */
bool fg_tuning_alternative_plan(const fg_layer *layer, fg_plan *out);
/* At load: the layer's alternative plan when its engine is open, else NULL (also on any
 * failure to plan it: the planner's choice stands). */
fg_layer_candidate *fg_tuning_candidate(const fg_layer *layer);
void fg_tuning_candidate_free(fg_layer_candidate *c);

/* What fg_tuning_decide did, for timing lines. */
typedef enum fg_tuning_outcome {
    FG_TUNING_NONE = 0,     /* nothing to decide, a recorded choice, or no timing possible */
    FG_TUNING_TIMED,        /* both plans' kernels came from the caches and were timed */
    FG_TUNING_COMPILED,     /* at least one was compiled, then both were timed */
} fg_tuning_outcome;

/* At the first prepare (context lock held, the context current): decides between the layer's
 * plan and layer->alternative, which it frees; the layer's plan and launch table become the
 * winner's. `batch`: the run's (0: not known, 32 is timed); `stream`: the run's (a capture
 * in progress on it means no timing). Never fails the prepare: any problem is logged and
 * the planner's choice kept. */
fg_tuning_outcome fg_tuning_decide(fg_layer *layer, int64_t batch, CUstream stream);

#endif
