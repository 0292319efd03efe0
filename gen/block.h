/* SPDX-License-Identifier: Apache-2.0 */
/* A block: several layers wired in a DAG, run as one unit (docs/spec.md, "Blocks").
 *
 * Each layer is an ordinary layer IR (gen/ir.h: optional prologue, one conv, ops after it)
 * whose input is a tensor of the block: the block input, an extra input, or an earlier
 * layer's output. Binary ops may read any tensor of the block (`tensor = "name"`) as a
 * batched parameter of the layer (fg_param.batched). The loader orders the layers so that
 * every layer comes after the tensors it reads (a cycle is an error); the block's output is
 * one layer's output. Parameters are shared by name across layers (a name must keep its
 * shape). Nothing here knows about CUDA: each layer is planned and run as a layer is. */
#ifndef FG_BLOCK_H
#define FG_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"
#include "ir.h"

#define FG_MAX_BLOCK_LAYERS 16
#define FG_MAX_BLOCK_INPUTS 4 /* extra inputs besides "input" */
#define FG_MAX_BLOCK_TENSORS (1 + FG_MAX_BLOCK_INPUTS + FG_MAX_BLOCK_LAYERS)

/* A tensor of the block: tensors[0] is "input", then the extra inputs (sorted by name), then
 * each layer's output (in the spec's order of layers). */
typedef struct fg_block_tensor {
    char name[FG_NAME_MAX];
    fg_shape shape;          /* dim[0] the batch (held as 1) */
    int layer;               /* the layer (index into fg_block_ir.layers) that writes it; -1: an input */
    int line;
} fg_block_tensor;

typedef struct fg_block_layer {
    int line;                /* the `layer` line */
    int from;                /* the tensor it reads as its input */
    int out;                 /* the tensor it writes */
    int spec_index;          /* its position in the spec */
    /* ops the spec put after the conv of the layer writing `from` (a norm and the elementwise
     * ops after it) that the loader moved to the front of this layer's prologue (0: none) */
    int moved_ops;
} fg_block_layer;

typedef struct fg_block_ir {
    char name[FG_NAME_MAX];
    char file[512];
    int line;                /* the `block` line */
    /* The spec returned a plain layer: layers[0] is it, with its own semantics (dtype, layout). */
    bool single;
    int n_tensors;
    int n_inputs;            /* "input" and the extra inputs: tensors[0..n_inputs-1] */
    fg_block_tensor tensors[FG_MAX_BLOCK_TENSORS];
    int n_layers;
    fg_block_layer layer[FG_MAX_BLOCK_LAYERS]; /* in run order: every layer after what it reads */
    fg_layer_ir *layers;     /* n_layers IRs (heap), in run order; ir.name is BLOCK.LAYER */
    int output;              /* the tensor the block returns */
    /* The block's `dtype` and `layout`: of every tensor of the block (its inputs, the layers'
     * outputs), so every layer has them (each layer reads and writes tensors of the block);
     * a layer's `tensor` operands are read in them too. Parameters stay float32 NC(D)HW. */
    fg_dtype dtype;
    fg_layout layout;
    /* Loaded with no norm over each position's channels moved to its reader
     * (fg_block_spec_load_*_for: the target's reader would not compute its statistics). */
    bool pixel_norms_kept;
} fg_block_ir;

/* Loads a spec that returns a block or a layer (then single, n_layers 1). Returns 0 or -1
 * with err set (every message names the file, the line and the field). fg_block_ir_free
 * frees what a load allocated, after success or failure. */
int fg_block_spec_load_file(const char *path, fg_block_ir *b, fg_error *err);
int fg_block_spec_load_string(const char *display_name, const char *source, size_t len, fg_block_ir *b, fg_error *err);
void fg_block_ir_free(fg_block_ir *b);

struct fg_plan_options;
/* The same for the target `opts` plans for (gen/planner.h; NULL: as above). A norm over each
 * position's channels moves to its reader only where the reader's plan for that target runs
 * its conv on wgmma, whose input pack normalizes by pixel rows (and computes the statistics
 * itself where one of its blocks holds a pixel's channels: fg_plan.pack_pixel_stats);
 * elsewhere the block is loaded again with every such norm kept by its writer
 * (pixel_norms_kept). Measured (bench/NOTES.md v37): ConvNeXt in bf16 channels last with the
 * reader on mma.sync (sm_80's engine, forced on the H200) ran 19 % slower moved, its staging
 * normalizing each element; on wgmma 30 % faster at 96 channels, 14 % at 384 (a statistics
 * pass, the pack in channel blocks), even at 768.
 * The IR then depends on the target: the runtime, `fusegen plan`, `gen` and `build` load each
 * block for the target they plan for. */
int fg_block_spec_load_file_for(const char *path, const struct fg_plan_options *opts, fg_block_ir *b, fg_error *err);
int fg_block_spec_load_string_for(const char *display_name, const char *source, size_t len,
                                  const struct fg_plan_options *opts, fg_block_ir *b, fg_error *err);

/* Hands statistics from layer to layer (the loader calls it once the layers are in run order
 * and their shapes inferred): where a layer's first prologue op is a norm whose statistics
 * are per sample over all spatial positions (group and instance norms, a layer norm over
 * [C, spatial...]) and its input is another layer's output, the writing layer gathers them
 * in the pass that stores that output (fg_layer_ir.exports_stats) and the reader runs no
 * statistics pass (pro_stats_given). A writer gathers one set: a second reader of its output
 * whose norm groups the channels otherwise gathers its own. */
void fg_block_link_statistics(fg_block_ir *b);

/* The layer (run order) whose output pass gathers the statistics layer i's prologue norm
 * reads (fg_layer_ir.pro_stats_given: the layer writing its input), -1: none. */
int fg_block_stats_from(const fg_block_ir *b, int i);

/* The bytes a sample of the statistics layer i gathers of its output for the next layer
 * (fg_layer_ir.exports_stats: the reader's norm's accumulator, fp64 sums), 0: none. The
 * runtime keeps them in the block's workspace, outside the layers' shared scratch. */
int64_t fg_block_stats_sample_bytes(const fg_block_ir *b, int i);

/* The layer's name inside the block ("a" of "bottleneck.a"). */
const char *fg_block_ir_layer_name(const fg_block_ir *b, int i);

/* Whether parameter `param` of layer `layer` is the block's own parameter at its first use: not
 * a tensor operand of the block (batched), and no earlier layer, nor an earlier parameter of
 * this one, reads a parameter of that name (the block binds a name once, in every layer that
 * reads it). */
bool fg_block_param_first_use(const fg_block_ir *b, int layer, int param);

/* A human-readable description: the tensors, the layers, their wiring (fusegen plan). */
void fg_block_print(const fg_block_ir *b, void (*emit)(void *ctx, const char *line), void *ctx);

#endif
