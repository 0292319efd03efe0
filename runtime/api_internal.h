/* SPDX-License-Identifier: Apache-2.0 */
/* What the public handles hold, shared by the files implementing include/fusegen.h. */
#ifndef FG_API_INTERNAL_H
#define FG_API_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "../gen/ir.h"
#include "../gen/planner.h"
#include "../reference/cpu_reference.h"
#include "cache.h"
#include "cuda_driver.h"
#include "cudnn_conv.h"
#include "environment.h"
#include "launcher.h"
#include "tuning.h"
#include "fusegen.h"

struct fg_context {
    int device;             /* -1: CPU only */
    fg_log_fn log;          /* where messages go (fg_context_log), and up to which level */
    void *log_user;
    int log_level;
    fg_plan_options plan_options; /* the planner's knobs, read from the environment once here */
    fg_env_runtime env;     /* the rest of the environment, read once by fg_context_create */
    fg_cache cache;
    char arch[16];
    const fg_cuda *cu;      /* NULL for CPU-only contexts */
    CUdevice dev;
    CUcontext cuctx;        /* the device's primary context (shared with the CUDA runtime) */
    int sm_count;
    char device_name[128];
    pthread_mutex_t lock;   /* serializes JIT and module loading */
};

typedef struct fg_param_binding {
    bool bound;
    float *host;            /* layer-owned host copy (bind_host, safetensors), or NULL */
    CUdeviceptr device;     /* what the kernels read */
    CUdeviceptr owned;      /* device memory the layer allocated for it, or 0 */
} fg_param_binding;

struct fg_layer {
    fg_context *ctx;
    fg_layer_ir ir;
    fg_plan plan;
    fg_launch_table launch; /* what runs need from the plan, taken and checked at load */
    fg_bn_fold fold;        /* the plan's (gen/fold.h), and whether it has a cuDNN pass: the */
    bool has_cudnn;         /* same in every plan the layer may adopt, so read without a lock */
    fg_layer_candidate *alternative; /* a plan to time against this one at the first prepare
                                        (runtime/tuning.h); NULL when none or decided. The
                                        plan and launch table change only then, under the
                                        context's lock */
    /* the spec's parameters, then (gen/fold.h) the folded conv weight and bias, which the
     * layer computes from them whenever one of those is bound */
    fg_param_binding params[FG_MAX_KERNEL_PARAMS];
    /* state_dict entries the layer accepts and never reads (fg_layer_ignored_info) */
    int n_ignored;
    fg_ignored_state ignored[FG_MAX_IGNORED_STATE];
    CUmodule module;
    CUfunction functions[FG_MAX_PASSES];
    fg_cudnn_conv *cudnn;   /* when the plan has a cuDNN pass */
    bool from_cache;        /* the kernels came from a cache (no compile) */
    struct {
        double total, render, build, load; /* seconds: all, rendering the source (-1: skipped,
                                              the plan alias led to the entry), cache lookup or
                                              compile (build), module load (load) */
        double tune;                        /* of `total`, choosing between two plans (tuning.h) */
        fg_tuning_outcome tuning;
    } prepare_seconds;
    CUdeviceptr workspace;
    size_t workspace_bytes;
    /* A wgmma conv's weights as its B tiles' images (launcher.h, fg_launch_pack_weights): the
     * layer's own memory, outside the workspace, allocated at the first pack and kept at that
     * address (a caller's captured graph holds it). Packed once per binding of the weight the
     * pack reads (the conv's, or the folded one): by that bind, or where the kernels were not
     * loaded yet, by the prepare after it -- or by the run after it where the layer was not
     * prepared, or where a repack failed part way (never inside a capture: ensure_packed).
     * packed_current: it holds the image of the weight bound now. Both written under the
     * context's lock, with the bindings lock held (a bind's for writing, a prepare's or run's
     * for reading). */
    CUdeviceptr packed_w;
    bool packed_current;
    pthread_mutex_t lock;   /* one run at a time: runs share the workspace */
    pthread_rwlock_t bindings_lock; /* runs read the parameter bindings (shared), binds replace them */
    CUevent done;           /* recorded after each run; a run on another stream waits for it */
    CUstream last_stream;
    /* The last run's launches captured as a CUDA graph and replayed while nothing they bake
     * in changes (one launch instead of one per pass and per memset). */
    CUgraphExec graph;
    CUstream capture_stream;
    int64_t graph_batch;
    CUdeviceptr graph_input, graph_output, graph_workspace, graph_packed_w;
    unsigned binding_generation, graph_generation; /* bumped by every bind */
    bool graphs_off;        /* FUSEGEN_NO_GRAPHS, a cuDNN pass, or a failed capture */
};

/* A message through the context's log (fusegen.h, fg_log_fn) when `level` is shown. */
void fg_context_log(const fg_context *ctx, fg_log_level level, const char *fmt, ...) FG_PRINTF(3, 4);

/* Sets the calling thread's last error and returns `status`. */
fg_status fg_api_fail(fg_status status, const char *fmt, ...) FG_PRINTF(2, 3);
fg_status fg_api_fail_error(fg_status status, const fg_error *err);
void fg_api_clear_error(void);

/* fg_layer_run_cpu with a progress callback (runtime/tools.h, fg_tools_run_cpu). */
fg_status fg_layer_run_cpu_progress(fg_layer *layer, const float *input, float *output, int64_t batch,
                                    fg_reference_progress progress, void *ctx);

/* fg_layer_prepare for runs of `batch` samples (0: not known): where the layer's engine is
 * timed at its first prepare (tuning.h), at that batch. The handle held. */
fg_status fg_layer_prepare_held(fg_layer *layer, int64_t batch);
/* A layer from an IR loaded elsewhere (a block's layer: runtime/api_block.c), planned for
 * the context's architecture and registered as a live layer handle. */
fg_status fg_layer_create_from_ir(fg_context *ctx, const fg_layer_ir *ir, fg_layer **out);

/* fg_layer_run_workspace for a layer of a block: `links` (FG_LINKS pointers) hold the
 * statistics it shares with the block's other layers (fg_accum.link), each where the block
 * keeps them for this run. The handle held. */
fg_status fg_layer_run_linked(fg_layer *layer, const void *input, void *output, int64_t batch, void *workspace,
                              size_t workspace_bytes, const CUdeviceptr links[FG_LINKS], void *stream);

/* The context a live block was loaded on (runtime/tools.c's timing), or NULL. */
fg_context *fg_block_context(const fg_block *block);

/* Makes the context's CUDA context current on this thread. */
fg_status fg_api_enter(fg_context *ctx);

#endif
