/* SPDX-License-Identifier: Apache-2.0 */
/* Launching a layer's passes on a stream. At prepare time fg_launch_table_init takes from
 * the plan what every run needs and checks it (argument counts and indices, accumulators to
 * clear, geometry), so that a run never calls into the planner and never indexes past an
 * array: a plan the launcher cannot launch is refused there, with a message naming the pass.
 * A run then scales the workspace pieces by the batch (fg_launch_layout), clears the
 * accumulators each pass feeds, passes each kernel its arguments in the plan's order and
 * splits the batch into launches of at most 65535 samples (grid.z). One pass is not a run's:
 * the wgmma engine's weight pack (FG_PASS_PACK_WEIGHTS) writes an image of the weights that
 * only a bind changes, into memory of the layer's own outside the workspace
 * (fg_launch_pack_weights). */
#ifndef FG_LAUNCHER_H
#define FG_LAUNCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "../gen/ir.h"
#include "../gen/planner.h"
#include "cuda_driver.h"
#include "cudnn_conv.h"

/* One piece of the workspace: `per_sample` bytes for every sample plus `fixed` bytes
 * (statistics over the whole batch), 256-byte aligned, in the plan's order. */
typedef struct fg_launch_piece {
    uint64_t per_sample, fixed;
} fg_launch_piece;

/* A TMA tensor map argument (FG_ARG_TMAP) of a pass, with what it was encoded for: a launch on
 * the same buffer address and batch passes it as it is, another encodes it again. A captured
 * graph holds the map's bytes as of its capture; every graph fusegen captures is keyed by the
 * workspace, the input and the batch (runtime/api_layer.c graph_matches, api_block.c
 * block_graph_key), from which the map's address and batch follow: a replay never reads a map
 * of another address or batch. */
typedef struct fg_launch_tmap {
    CUtensorMap map;     /* 128 bytes, aligned as cuda.h asks (>= 64, the kernel parameter's) */
    CUdeviceptr address; /* 0: never encoded */
    int64_t batch;
} fg_launch_tmap;

typedef struct fg_launch_pass {
    bool cudnn;               /* cuDNN computes value 0 (no generated kernel) */
    bool store_output;        /* cuDNN: into the layer output, else into buffer `store_buffer` */
    int store_buffer;
    char kernel[64];
    unsigned grid_x, grid_y, block, smem_bytes;
    bool per_sample;          /* grid.z covers the batch */
    bool pack_input;          /* the wgmma input-packing pass (skipped where fg_launch_input_direct) */
    bool pack_weights;        /* the wgmma weight pack: fg_launch_pack_weights, never a run */
    bool persistent;          /* grid_x is one sample's tiles: min(grid_x * batch, SMs) blocks walk them */
    bool split;               /* the wgmma conv with split K: min(tiles x splits, SMs) blocks walk the
                               * (tile, split) units, fg_wgmma_splits(&table->wgmma, tiles) splits */
    int n_args;
    fg_arg *args;             /* n_args, in the kernel's parameter order */
    CUdeviceptr *ptrs;        /* scratch for one launch: n_args pointers, */
    int *ints;                /* n_args ints */
    void **values;            /* and n_args argument addresses */
    fg_launch_tmap *tmaps;    /* n_args maps (those of FG_ARG_TMAP arguments used), NULL when it has none */
    int n_zero;
    int zero[FG_MAX_ACCUMS];  /* accumulators cleared before the pass */
} fg_launch_pass;

typedef struct fg_launch_table {
    int n_passes;
    fg_launch_pass *passes;
    int n_buffers, n_accums, n_params;
    fg_launch_piece buffers[FG_MAX_BUFFERS];
    fg_launch_piece accums[FG_MAX_ACCUMS], stats[FG_MAX_ACCUMS];
    uint32_t clear_pattern[FG_MAX_ACCUMS];
    fg_accum_link accum_link[FG_MAX_ACCUMS]; /* statistics shared with another layer of a block */
    int conv_weight, conv_bias; /* parameters of the conv (cuDNN), -1 for no bias */
    fg_wgmma_tiling wgmma;      /* the plan's (its split K) */
    /* split K: the buffer of the tiles' arrival counters, -1 when none. The layout places it
     * first (offset 0 whatever the batch); the kernels leave it zero after every launch, so
     * it needs clearing only where the memory is not known to hold zeros (fg_launch_memory's
     * counters_zero). */
    int split_counters;
    /* the wgmma conv's packed weights (fg_wgmma_tiling.packed_w), -1 when none: a buffer of
     * the plan that the layout leaves out of the workspace; the kernels read the image at
     * fg_launch_memory.packed_w, fg_launch_packed_bytes long */
    int packed_w;
} fg_launch_table;

/* Builds and checks the table; -1 with err naming what the launcher cannot launch. */
int fg_launch_table_init(fg_launch_table *t, const fg_layer_ir *ir, const fg_plan *plan, fg_error *err);
void fg_launch_table_free(fg_launch_table *t);

/* Where each piece of the workspace lies for a batch. */
typedef struct fg_launch_layout {
    uint64_t total;
    uint64_t buffer_offset[FG_MAX_BUFFERS];
    uint64_t accum_offset[FG_MAX_ACCUMS], accum_bytes[FG_MAX_ACCUMS];
    uint64_t stats_offset[FG_MAX_ACCUMS];
} fg_launch_layout;

/* The arguments of cuTensorMapEncodeIm2col for `map` (the plan's, fg_wgmma_tiling.im2col) over
 * `batch` samples: dims and strides as the driver takes them, the data type, the corners and
 * element strides, swizzle 128B, zero fill (a pure function: tests/test_launcher.c). */
typedef struct fg_im2col_args {
    CUtensorMapDataType type;
    cuuint32_t rank;
    cuuint64_t dims[5], strides[4];
    int lower[3], upper[3];
    cuuint32_t channels, pixels;
    cuuint32_t elem_strides[5];
    CUtensorMapSwizzle swizzle;
    CUtensorMapFloatOOBfill fill;
    CUtensorMapL2promotion l2;
    uint64_t bytes; /* the tensor's bytes (the driver workaround's test) */
} fg_im2col_args;
void fg_im2col_args_for(const fg_im2col_map *map, int64_t batch, fg_im2col_args *out);

/* Encodes the map over `address` (16-byte aligned) for `batch` samples: 0, or -1 with err
 * saying why (a driver without cuTensorMapEncodeIm2col, or the driver's refusal), naming
 * FUSEGEN_WGMMA_A_TMA. On drivers up to 13.1 a map over less than 128 KiB gets bit 21 of its
 * second 64-bit word cleared after encoding, as CUTLASS 4.3.4's make_im2col_tma_copy_desc does
 * (its CHANGELOG: "occasional errors on Blackwell when the tensor's backing memory allocation is
 * less than 128KB and it is not a dense non-overlapping tensor"; bench/hopper-tma.md section 3). */
int fg_launch_encode_im2col(const fg_cuda *cu, const fg_im2col_map *map, CUdeviceptr address, int64_t batch,
                            CUtensorMap *out, fg_error *err);

/* Whether a run on `input` skips the input-packing pass and gives the conv the input itself
 * for the packed operand (fg_wgmma_tiling.input_direct): where the plan allows it and the
 * input is 16-byte aligned (the producer's cp.async copies 16 bytes at a time). */
bool fg_launch_input_direct(const fg_launch_table *t, CUdeviceptr input);

/* The bytes of the packed weights' image (fg_launch_table.packed_w); 0 when none. */
uint64_t fg_launch_packed_bytes(const fg_launch_table *t);

/* -1 when the workspace for `batch` samples would not fit in 64 bits. */
int fg_launch_layout_for(const fg_launch_table *t, int64_t batch, fg_launch_layout *out, fg_error *err);

typedef struct fg_launch_memory {
    CUdeviceptr input, output;
    const CUdeviceptr *params;  /* table->n_params bound parameters */
    CUdeviceptr workspace;
    CUdeviceptr packed_w;       /* the packed weights' image (fg_launch_pack_weights wrote it); 0: none */
    fg_launch_layout layout;    /* for this batch */
    fg_cudnn_conv *cudnn;       /* for a cuDNN pass */
    int sm_count;               /* the device's multiprocessors (persistent passes) */
    /* where a block keeps the statistics its layers hand on (fg_accum.link: links[link - 1]);
     * 0: the accumulator's own place in the workspace (a layer timed alone, runtime/tuning.c) */
    CUdeviceptr links[FG_LINKS];
    /* the split-K counters (fg_launch_table.split_counters) already hold zeros: the layer's own
     * workspace, zeroed with fg_launch_clear_counters when allocated; the tuning's shared
     * workspace, cleared before each timed run outside its timing. False: every run clears
     * them first (a caller's workspace). */
    bool counters_zero;
} fg_launch_memory;

/* Enqueues the clearing of the split-K counters (nothing when the plan has none). */
int fg_launch_clear_counters(const fg_cuda *cu, const fg_launch_table *t, const fg_launch_memory *mem,
                             CUstream stream, fg_error *err);

/* The kernel of every generated pass of `plan` in a loaded module (cuDNN passes: NULL), with
 * the dynamic shared memory above 48 KB that each asks for allowed. */
int fg_module_functions(const fg_cuda *cu, CUmodule module, const fg_plan *plan, CUfunction *functions, fg_error *err);

/* Enqueues every pass but the weight pack (the image at mem->packed_w is read as it is).
 * functions[i] is pass i's kernel (unused for cuDNN passes). The table's scratch arrays are
 * used: one launch of a table at a time (the layer's lock). */
int fg_launch_run(const fg_cuda *cu, const fg_launch_table *t, const CUfunction *functions,
                  const fg_launch_memory *mem, int64_t batch, CUstream stream, fg_error *err);

/* Enqueues the weight pack alone (nothing when the plan has none): the conv's weight,
 * params[t->conv_weight], as the B tiles' images into `packed_w` (fg_launch_packed_bytes).
 * The same one-launch-at-a-time rule as fg_launch_run. */
int fg_launch_pack_weights(const fg_cuda *cu, const fg_launch_table *t, const CUfunction *functions,
                           const CUdeviceptr *params, CUdeviceptr packed_w, CUstream stream, fg_error *err);

#endif
