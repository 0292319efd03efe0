/* SPDX-License-Identifier: Apache-2.0 */
/* What only tools need: the `fusegen` CLI, the GPU tests and benchmarks. Applications use
 * include/fusegen.h alone; tools use that plus this header, never the handles' internals
 * (runtime/api_internal.h). These functions are in the static library the CLI and the tests
 * link, not exported from libfusegen.so, and may change with it.
 *
 * Every function validates its handles like the public API, returns an fg_status and sets
 * fg_last_error() on failure. Device pointers are CUdeviceptr values on the context's
 * device (its primary context, so the CUDA runtime's pointers work too). */
#ifndef FG_TOOLS_H
#define FG_TOOLS_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../gen/ir.h"
#include "../gen/planner.h"
#include "cache.h"
#include "fusegen.h"

/* ---- a layer's insides, read-only (they live as long as the layer) ---------------------- */

/* The layer's IR (ops, shapes, parameters) and its plan, or NULL for a dead handle. */
const fg_layer_ir *fg_tools_layer_ir(const fg_layer *layer);
const fg_plan *fg_tools_layer_plan(const fg_layer *layer);

/* Binds every parameter to random values drawn as fg_random_params does
 * (runtime/random_init.h) for `seed`: the CLI's --random, fusegen bench and the GPU tests.
 * The layer keeps host copies, so fg_layer_run_cpu can run. */
fg_status fg_tools_bind_random(fg_layer *layer, uint64_t seed);

/* fg_layer_prepare for runs of `batch` samples: a layer whose conv engine is timed at its
 * first prepare (runtime/tuning.h) is timed at that batch (fg_layer_prepare times at 32). */
fg_status fg_tools_prepare(fg_layer *layer, int64_t batch);

/* "kernels loaded from the cache in 1.9 ms (rendering 0.7, cache lookup 0.3, module load
 * 0.9)": how the layer's kernels were last prepared, for timing lines. */
fg_status fg_tools_describe_prepare(const fg_layer *layer, char *buf, size_t cap);

/* Whether fg_layer_prepare would find the layer's kernels for the context's architecture in
 * the context's caches, looked up as it looks them up (the plan alias of the layer's IR and
 * plan, naming an entry that records that plan: fg_build_find), with no device, rendering or
 * compile. *wanted is 1, or 2 where the runtime times another plan at the first prepare
 * (runtime/tuning.h; counted whatever FUSEGEN_TUNE says, as `fusegen build` stores both);
 * for each plan c, found[c] says whether it is in the caches and keys[c] is the entry's key,
 * or the plan alias key looked up in vain. `fusegen build --check`. */
fg_status fg_tools_layer_cached(fg_layer *layer, int *wanted, bool found[2], char keys[2][FG_CACHE_KEY_HEX + 1]);

/* The CPU reference (fg_layer_run_cpu) calling progress(ctx, fraction done) as it goes, and
 * an estimate of its work beforehand (multiply-adds; reference/cpu_reference.h), so that a
 * tool can refuse or announce a run that would take minutes. */
fg_status fg_tools_run_cpu(fg_layer *layer, const float *input, float *output, int64_t batch,
                           void (*progress)(void *ctx, double done), void *ctx);
double fg_tools_reference_work(const fg_layer *layer, int64_t batch);

/* ---- the device ----------------------------------------------------------------------- */

typedef struct fg_tools_device {
    char name[128]; /* "NVIDIA H200" */
    char arch[16];  /* the context's architecture, "sm_90" */
    int sm_count;
    int l2_bytes;
} fg_tools_device;

/* FG_ERR_NO_DEVICE for a CPU-only context. */
fg_status fg_tools_device_info(fg_context *ctx, fg_tools_device *out);

/* Device memory and copies (synchronous, except fill_nan which is ordered on the default
 * stream); fg_tools_synchronize waits for the default stream. */
fg_status fg_tools_alloc(fg_context *ctx, size_t bytes, CUdeviceptr *out);
fg_status fg_tools_free(fg_context *ctx, CUdeviceptr p);
fg_status fg_tools_upload(fg_context *ctx, CUdeviceptr dst, const void *src, size_t bytes);
fg_status fg_tools_download(fg_context *ctx, void *dst, CUdeviceptr src, size_t bytes);
/* Fills `floats` floats with NaN, so that an element no kernel writes shows. */
fg_status fg_tools_fill_nan(fg_context *ctx, CUdeviceptr p, size_t floats);
fg_status fg_tools_synchronize(fg_context *ctx);
/* The same for a layer's input and output in its dtype (fg_layer_dtype; common/half.h's
 * codes: 0 fp32, 1 bf16, 2 fp16): `count` floats on the host, `count` elements of the dtype
 * on the device, converted on the way (rounded to nearest even on upload, exact on download);
 * fill_nan_io writes NaNs of the dtype. */
fg_status fg_tools_upload_io(fg_context *ctx, CUdeviceptr dst, const float *src, size_t count, int dtype);
fg_status fg_tools_download_io(fg_context *ctx, float *dst, CUdeviceptr src, size_t count, int dtype);
fg_status fg_tools_fill_nan_io(fg_context *ctx, CUdeviceptr p, size_t count, int dtype);

/* ---- timing --------------------------------------------------------------------------- */

/* Times `iters` runs of the layer (after `warmup` untimed ones) with CUDA events on a stream
 * of its own, overwriting a buffer of four times the L2 before each run so that no run
 * finds the previous one's data in the L2. times_ms receives `iters` values. */
fg_status fg_tools_time_runs(fg_layer *layer, CUdeviceptr input, CUdeviceptr output, int64_t batch, long warmup,
                             long iters, double *times_ms);

/* The same for a block (fg_block_run on `inputs`, fg_block_input_count device pointers). */
fg_status fg_tools_time_block_runs(fg_block *block, const void *const *inputs, void *output, int64_t batch, long warmup,
                                   long iters, double *times_ms);

/* The two rates of the hardware floor, measured: fp32 FMA TFLOP/s (an NVRTC-compiled kernel
 * of independent fmaf chains, 8 blocks per SM, best of 4 timed launches) and device copy
 * TB/s (bytes read + written, a device-to-device copy of 2 x L2 bytes, best of 5). */
fg_status fg_tools_ceilings(fg_context *ctx, double *fma_tflops, double *copy_tbs);

/* Blocks (runtime/api_block.c): random parameters as fg_tools_bind_random draws them (each
 * key from the layer that reads it first), the CPU reference's work, and whether a layer's
 * statistics span the batch (then a check needs every sample). */
fg_status fg_tools_block_bind_random(fg_block *block, uint64_t seed);
/* fg_block_prepare for runs of `batch` samples (fg_tools_prepare of each layer), and the
 * summary of how its layers' kernels were prepared: "kernels of 3 layers in 4.1 ms (0
 * compiled, 3 loaded from the cache)". */
fg_status fg_tools_block_prepare(fg_block *block, int64_t batch);
fg_status fg_tools_block_describe_prepare(fg_block *block, char *buf, size_t cap);
/* The block's i-th layer in run order (owned by the block), or NULL for a dead handle or an
 * index out of range. */
fg_layer *fg_tools_block_layer(fg_block *block, int i);
double fg_tools_block_reference_work(const fg_block *block, int64_t batch);
bool fg_tools_block_stats_over_batch(const fg_block *block);

/* How a block's GPU runs went so far (runtime/api_block.c), for the GPU tests: the CUDA graphs
 * of the whole block captured, the runs that launched one (a capture's own run included),
 * the runs that launched each pass instead; whether graphs are off for every run
 * (FUSEGEN_NO_GRAPHS, a cuDNN layer, a failed capture) and for runs on caller-owned workspace
 * (their pointers kept changing). */
typedef struct fg_tools_block_graphs {
    long captures, graph_runs, plain_runs;
    bool off, caller_off;
} fg_tools_block_graphs;
fg_status fg_tools_block_graph_counts(fg_block *block, fg_tools_block_graphs *out);

#endif
