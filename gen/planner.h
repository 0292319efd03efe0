/* SPDX-License-Identifier: Apache-2.0 */
/* The planner: splits a layer into passes (kernels) at every op that needs a global
 * statistic, fuses everything else into the passes' epilogues, and picks launch geometry.
 *
 * Vocabulary. Value k is the output of op k (value 0 is the convolution). A pass evaluates
 * ops first..last inline at every element of its domain (the index space of value `last`),
 * starting from value first-1, which it either computes (the conv pass: first == 0) or
 * loads from a workspace buffer. A pass may store its domain value (to a buffer or to the
 * layer output) and may feed accumulators: statistics a later op needs (norm mean and
 * variance, softmax max and sum of exponentials) or the partial results of a reduction
 * too large to loop over inline. A finalize pass turns an accumulator into what its
 * consumer reads (mean and 1/sqrt(var + eps) per statistic; the reduced value). */
#ifndef FG_PLANNER_H
#define FG_PLANNER_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/diag.h"
#include "fold.h"
#include "ir.h"
#include "op_registry.h"

#define FG_MAX_PASSES 32
#define FG_MAX_BUFFERS 16
#define FG_MAX_ACCUMS 16
/* A pass's kernel parameters: every parameter, buffer and accumulator of the layer (two per
 * accumulator at most: its own and the max it reads), its statistics, the input, the
 * output, the batch and its base. A pass can never need more: the planner still checks. */
#define FG_MAX_ARGS (FG_MAX_PARAMS + FG_MAX_BUFFERS + 3 * FG_MAX_ACCUMS + 4)

/* Reductions whose extent is at most this run as a loop inside the consumer's evaluation;
 * larger ones go through an accumulator. */
#define FG_INLINE_REDUCE_MAX 1024

typedef enum fg_pass_kind {
    FG_PASS_CONV,     /* computes value 0 with a direct convolution */
    FG_PASS_MAP,      /* one thread per domain element (or a few), from a buffer */
    FG_PASS_FINALIZE, /* one thread per statistic */
    FG_PASS_CUDNN,    /* value 0 by cuDNN's convolution (precision = "tf32"); no generated kernel */
    FG_PASS_RESIDENT, /* the whole layer in one kernel: a cluster keeps a norm's groups in shared memory */
    /* the wgmma engine's operands: the input channels-innermost, split into TF32 hi (and lo)
     * (a half layer's input as it is, or its prologue's result split or rounded into the
     * dtype), and the weights as the shared-memory images of its B tiles */
    FG_PASS_PACK_INPUT,
    FG_PASS_PACK_WEIGHTS,
    /* the statistics of the prologue's norm (fg_plan.pro_norm) over the layer input: reads the
     * input, applies the prologue ops before the norm, feeds the norm's fp64 moments; the
     * conv's staging (or the wgmma input pack) then applies the whole prologue */
    FG_PASS_PRO_STATS,
} fg_pass_kind;

typedef enum fg_accum_link {
    FG_LINK_NONE,
    FG_LINK_GIVEN,    /* the prologue norm's statistics, gathered by the layer writing the input */
    FG_LINK_EXPORTED, /* this layer's output's statistics for the next layer's prologue norm */
} fg_accum_link;
#define FG_LINKS 2 /* FG_LINK_GIVEN and FG_LINK_EXPORTED: fg_launch_memory.links[link - 1] */

typedef struct fg_accum {
    fg_accum_kind kind;
    int op;                 /* the op that consumes it */
    int value;              /* the value it reduces (op - 1) */
    int max_accum;          /* FG_ACCUM_SUMEXP: the accumulator holding the max, else -1 */
    int64_t keys_per_sample;/* statistics per sample (in all when over_batch) */
    bool over_batch;
    int64_t count_per_sample; /* elements per statistic and per sample */
    int finalized;          /* norms and softmax: the finalize pass that reads it, else -1 */
    bool prologue;          /* op indexes the prologue (ir->pro) and value is -1: the layer input */
    /* statistics shared with another layer of a block (fg_layer_ir.pro_stats_given,
     * exports_stats): the runtime places them outside the layer's workspace, where both
     * layers' kernels find them (fg_launch_memory.links) */
    fg_accum_link link;
    /* keyed per (sample, channel) of `value`, n * C + c, over its spatial positions, whatever
     * op's own statistics are: the channel-sums strategy's moments (gen/planner.c,
     * channel_sums_reduction), read raw by its map pass (the norm op's statistics assembled from
     * them, and the reduction after it) */
    bool per_channel;
} fg_accum;

/* A workspace buffer holding one value for the whole batch (float). */
typedef struct fg_buffer {
    int value;          /* the value it holds; -1 for a packed operand of the wgmma engine */
    int64_t per_sample; /* floats per sample (of its storage) */
    int64_t fixed;      /* floats besides (the packed weights) */
    bool io;            /* held in the layer's dtype, channels last, not as fp32 NC(D)HW
                         * (fg_io_buffer_value) */
} fg_buffer;

/* The value a half, channels-last layer at precision tf32 stores in its dtype and channels
 * last between its conv pass and its map pass (the value before its one statistic, of the
 * output's shape, read back by nothing but that map pass), or -1. PyTorch's half model rounds
 * there too; fp32 NC(D)HW doubles the bytes and the conv's stores go C elements apart
 * (bench/NOTES.md: the nnU-Net block's output norm, 134 MB written and read at batch 2).
 * `wanted_strategy`: the strategy asked for (the spec's, or the caller's for "auto"; -1 auto):
 * recompute and resident store no such value. */
int fg_io_buffer_value(const fg_layer_ir *ir, int wanted_strategy);

typedef enum fg_arg_kind {
    FG_ARG_INPUT,   /* the layer input (const float*) */
    FG_ARG_OUTPUT,  /* the layer output (float*) */
    FG_ARG_BUFFER,  /* workspace buffer `index` (float*) */
    FG_ARG_PARAM,   /* parameter `index` (const float*) */
    FG_ARG_ACCUM,   /* accumulator `index` (raw storage) */
    FG_ARG_STATS,   /* finalized statistics of accumulator `index` (float2 per key) */
    FG_ARG_BATCH,   /* int: samples in this launch */
    FG_ARG_BATCH_BASE, /* int: index of the launch's first sample (launches are split at 65535) */
    /* the wgmma conv's A operand by TMA (fg_wgmma_tiling.a_tma 2): a 128-byte CUtensorMap, passed
     * by value (a `const __grid_constant__` parameter), in im2col mode over buffer `index` (a
     * packed input part, or the input where fg_launch_input_direct), encoded by the launcher
     * from fg_wgmma_tiling.im2col, the buffer's address and the run's batch */
    FG_ARG_TMAP,
} fg_arg_kind;

typedef struct fg_arg {
    fg_arg_kind kind;
    int index;
} fg_arg;

/* Launch geometry. grid.x covers one sample's work; grid.y covers conv output-channel tiles;
 * grid.z covers the batch (in chunks). Finalize passes over batch-wide statistics run with
 * grid.z = 1 and loop over the batch inside. */
typedef struct fg_launch {
    int block;              /* threads per block */
    int elems_per_thread;   /* map passes: domain elements each thread evaluates */
    int64_t grid_x, grid_y;
    bool per_sample;        /* grid.z = samples in the launch */
    int64_t finalize_keys;  /* FINALIZE over batch-wide statistics: keys, grid.x from this */
    int smem_bytes;         /* dynamic shared memory */
    /* a map pass writing a channels-last output through shared memory (planner.c,
     * map_cl_tile): a block's tile of tile_c channels x tile_p pixels of one sample, each
     * staged buffer's tile rows tile_pitch floats apart; all 0 for any other pass */
    int tile_c, tile_p, tile_pitch;
    /* persistent: grid_x is the tiles of one sample; the launcher starts min(grid_x * batch,
     * the device's multiprocessors) blocks and each walks tiles (no grid.z) */
    bool persistent;
    /* the prologue's statistics over a channels-last input by pixel rows (planner.c,
     * pro_stats_launch): a thread reads row_vec consecutive channels of a pixel at a time (16
     * bytes), a block row_pixels pixels of one sample; both 0 for the kernel that sums a span
     * of one key's elements a block, and for any other pass */
    int row_vec, row_pixels;
    /* a map pass whose source is held channels last in the layer's dtype (fg_buffer.io) and
     * which reads nothing else, stores only the output and feeds nothing (planner.c,
     * map_launch): thread t of a block takes cl_vectors vectors of cl_vec consecutive elements
     * of that order (channels of one pixel), t, t + cl_stride, ... from the block's first
     * (cl_stride a multiple of C / cl_vec, so all the thread's vectors hold the same channels;
     * threads from cl_stride on idle); all 0 for any other pass */
    int cl_vec, cl_vectors, cl_stride;
} fg_launch;

/* How the conv pass multiplies. */
typedef enum fg_conv_engine {
    /* CUDA-core FMAs: every thread of a block works on the same output channels at the same
     * time, so the weights it reads are warp-uniform (broadcast float4 loads from shared
     * memory); its register tile is thread_h rows x thread_w consecutive outputs x thread_co
     * channels. */
    FG_CONV_FMA = 0,
    /* Tensor cores (mma.sync m16n8k8 TF32, sm_80+) with every product split in three
     * (a_hi*b_hi + a_hi*b_lo + a_lo*b_hi): fp32 accuracy at tensor-core speed. The conv is an
     * implicit GEMM per warp: 16 output channels x 8 consecutive outputs per MMA. */
    FG_CONV_MMA = 1,
    /* Tensor cores on Hopper (wgmma.mma_async, sm_90a): an implicit GEMM over packed operands
     * (FG_PASS_PACK_*), M = output pixels of a sample, N = output channels, K = (tap,
     * channel); a producer warpgroup fills a ring of shared-memory stages with cp.async, two
     * consumer warpgroups run the wgmmas and the fused epilogue; persistent blocks. fp32
     * precision: 3xTF32 with each 32-wide K chunk accumulated apart and added in fp32;
     * tf32: one product. A bf16/fp16 layer multiplies in its dtype (fg_wgmma_operand). */
    FG_CONV_WGMMA = 2,
} fg_conv_engine;

/* A conv pass's dynamic shared memory as the planner lays it out: the one place these
 * numbers are computed (templates print them; the total is the pass's launch.smem_bytes).
 * Offsets and sizes are in floats from the start of dynamic shared memory; a resident
 * pass's kept conv output comes first, before input_offset. */
typedef struct fg_smem_layout {
    int64_t input_offset;              /* the staged input tile(s) */
    int input_buffers;                 /* 2: double-buffered (the next tile lands while one computes) */
    int64_t buffer_floats;             /* floats from one input buffer to the next */
    int64_t channel_pitch;             /* floats between two staged input channels */
    int64_t pixel_pitch;               /* FMA channels-last mapping (chan_lanes > 0): floats between
                                        * two staged pixels, whose channels are adjacent; else 0 */
    int64_t weights_offset, weights_floats;
    int weights_co_pitch;              /* FMA: floats per (channel, tap) row of weights */
    int64_t table_offset, table_entries; /* MMA, unblocked: the (channel, tap) offsets (ints) */
} fg_smem_layout;

/* Conv pass tiling (all extents in output elements). */
typedef struct fg_conv_tiling {
    int engine;             /* an fg_conv_engine */
    int tile[3];            /* output tile per block: D, H, W (FMA: threads x thread tile;
                             * MMA: warps x warp tile) */
    int threads[3];         /* threads along D, H, W */
    int thread_h;           /* output rows per thread */
    int thread_w;           /* consecutive outputs along W per thread */
    int thread_co;          /* channels per thread = one channel tile; a multiple of 4 (1 with chan_lanes) */
    /* FMA engine, channels-last input and output, few channels per group: consecutive threads
     * take consecutive output channels (chan_lanes of them per block, whole groups), each one
     * channel and thread_h x thread_w outputs, and the input tile is staged [pixel][channel]:
     * global loads and the output's stores then run along C, where the classic mapping's
     * threads (along W within one channel) touch one element per pixel, C elements apart.
     * threads[] are then the thread tiles along D, H, W (block = chan_lanes x their product),
     * co_tile = chan_lanes and ci_chunk the input channels of the block's groups, all staged
     * at once. 0: the classic mapping. */
    int chan_lanes;
    /* channels-last mapping: the input is staged in 16-byte vectors of in_vec consecutive
     * channels of a pixel (8 of a half dtype, 4 floats), one load and one index computation a
     * vector, where the input pointer is 16-byte aligned at run time (else, and 0 here, one
     * element at a time) */
    int in_vec;
    int co_tile;            /* channels per block (within a group): it loops over co_tile / thread_co tiles */
    int ci_chunk;           /* input channels staged in shared memory at a time */
    int ci_unroll;          /* unroll factor of the input-channel loop (the unrolling cliff) */
    int in_tile[3];         /* staged input extents D, H, W (W padded to a multiple of 4) */
    int ch_pitch;           /* floats between two staged input channels (>= the tile; padded so
                             * that the MMA engine's loads of 4 channels hit distinct banks) */
    /* FG_CONV_MMA only: a warp computes warp_mt x 16 channels of warp_rows rows x warp_ntw x 8
     * consecutive outputs; warps[] warps along D, H, W make the block. threads[],
     * thread_h/w/co are unused. */
    int warp_mt, warp_rows, warp_ntw;
    int warps[3];
    /* 1: the reduction runs over (8 input channels, tap) steps (ci_chunk % 8 == 0); 0: over
     * the flattened (channel, tap) index padded to 8, each lane's offsets in a table */
    int k_blocked;
    /* tiles one block computes in turn (the weights staged once, the next tile's input
     * copied while this one computes: double-buffered); 1 when the input is staged in
     * chunks */
    int tiles_per_block;
    int ksteps;             /* MMA: reduction steps per staged chunk */
    /* MMA: the products of this many reduction steps go to a fresh accumulator, which is then
     * added to the running sum with an ordinary fp32 add: the tensor core's accumulation
     * truncates, so one long chain drifts (bench/NOTES.md v8) */
    int acc_steps;
    fg_smem_layout smem;
} fg_conv_tiling;

/* The element type of the wgmma engine's operands (fg_wgmma_tiling.operand). */
typedef enum fg_wgmma_operand {
    FG_WGMMA_TF32 = 0, /* an fp32 layer: 4-byte elements, wgmma m64nNk8 .tf32 */
    FG_WGMMA_BF16 = 1, /* a bf16 layer: its input as it is (a prologue's result rounded or
                        * split), the weights rounded (and split) to bf16; m64nNk16 */
    FG_WGMMA_F16 = 2,  /* an fp16 layer, the same in IEEE half */
} fg_wgmma_operand;

const char *fg_wgmma_operand_name(int operand);

/* A TMA tensor map in im2col mode over a packed input part of the wgmma conv
 * (cuTensorMapEncodeIm2col's arguments, fg_wgmma_tiling.a_tma 2): everything but the address
 * and the batch, which the launcher adds (dims[rank - 1] = the batch). The packed input is
 * [N][D][H][W][XC] (channels innermost), so dims are innermost first {XC, W, H, N} (2D, rank 4)
 * or {XC, W, H, D, N} (3D, rank 5). One copy loads `pixels` (BM) rows of `channels` elements
 * (128 bytes: one K chunk of one tap) with the 128-byte swizzle; the pixel box's corners make
 * the base walk exactly the output positions (lower = -pad, upper = (O-1) S - pad - (I-1));
 * the conv stride is the traversal stride (elem_strides); the tap's offset times the dilation
 * is the copy's im2col offset (the kernel's). Computed at plan time (fg_wgmma_im2col_map). */
typedef struct fg_im2col_map {
    int rank;             /* 4 or 5 */
    int elem_bytes;       /* 4 (TF32 parts: fp32 bits) or 2 (bf16/fp16) */
    int operand;          /* an fg_wgmma_operand: the map's data type (FLOAT32, BFLOAT16, FLOAT16) */
    uint64_t dims[5];     /* innermost first; the last (the batch) is 0 here */
    uint64_t strides[4];  /* bytes, of dims 1..rank-1 */
    int lower[3], upper[3]; /* pixel box corners, (W, H[, D]) */
    int channels;         /* channelsPerPixel: elements of a 128-byte row */
    int pixels;           /* pixelsPerColumn: BM */
    int elem_strides[5];  /* {1, SW, SH[, SD], 1} */
} fg_im2col_map;

/* The channels-last epilogue's staging slab of a consumer warp: the 16 rows of an m64 tile the
 * warp holds, 32 channels at a time, rows 40 floats apart (the accumulators' float2 writes
 * then take the 2 wavefronts their 256 bytes need, and the reads of a row none extra). Where
 * the residual's tile is in shared memory too (fg_wgmma_tiling.res_bytes), rows are
 * FG_WGMMA_EPI_COLS floats apart instead, each row's 8-float groups XOR-swizzled by its index
 * (the same wavefronts, 4 KB fewer: SD's 1280-channel conv keeps 3 stages). */
enum { FG_WGMMA_EPI_ROWS = 16, FG_WGMMA_EPI_COLS = 32, FG_WGMMA_EPI_STRIDE = 40 };

/* The wgmma engine's tile, ring and registers, as the planner chose them: one per layer (every
 * conv pass of a layer runs the same conv on it), in fg_plan.wgmma. */
typedef struct fg_wgmma_tiling {
    /* the weights' parts (B): 2, hi and lo (fp32 precision), 1: one rounded part (tf32); with
     * TF32 operands the input (A) has as many (3xTF32: lo.hi + hi.lo + hi.hi), with half ones
     * it has one (a_parts): a half input is exact, so fp32 precision is x.w_lo + x.w_hi; but a
     * half layer with a prologue packs the normalized input, split as the weights are (fp32
     * precision: x_hi.w_lo + x_lo.w_hi + x_hi.w_hi, the same three products in the dtype) */
    int parts;
    int a_parts;         /* the input's parts (A): parts for TF32 operands and with a prologue, else 1 */
    int operand;         /* an fg_wgmma_operand */
    int kc_elems;        /* K elements per chunk: one 128-byte row, 32 TF32 or 64 half elements */
    int block_acc;       /* 1: each K chunk into a fresh accumulator, added in fp32 */
    int bn, nblk;        /* output channels per tile, tiles along the channels of a group */
    int wgmt, bm;        /* m64 tiles per consumer warpgroup; output pixels per tile (128 wgmt; 64 wgmt where alternate) */
    int m_tiles;         /* tiles along a sample's output pixels */
    bool flat;           /* a tile's rows run on over the next samples' output pixels (the
                          * batch's pixels flattened): where a sample would leave more than a
                          * quarter of its tiles' rows empty (7x7 images: 49 of 128) and the
                          * epilogue keys nothing by sample (no statistics, no channel
                          * reduction); the launch's tiles are fg_wgmma_tiles */
    int64_t opix;        /* output pixels of a sample */
    int cp, xc;          /* packed channels per group (padded), per pixel (all groups) */
    int pack_xb;         /* packed channels of a pixel one block of the input-packing pass
                          * transposes: xc, or a share of them where 32 pixels x xc channels
                          * would not fit its 48 KB tile (wide inputs: 384 TF32 channels and up);
                          * xc again by pixel rows (pack_vec) where the prologue's norm is over
                          * each pixel's channels and they are at most 256 vectors (the pack
                          * computes its statistics: planner.c, pro_norm_per_pixel) */
    int pack_vec;        /* the packing pass by pixel rows: a channels-last input whose groups
                          * need no padding channels is the packed layout [N][pixels][xc]
                          * already, so the pack is elementwise, pack_vec input elements (16
                          * bytes) a thread at a time, stored as 16-byte vectors; 0: through
                          * the transposing tile (and for a direct input: a plain copy) */
    int kch;             /* K chunks of kc_elems */
    int coord_bits;      /* bits a coordinate of the producer's packed row origins: 10, or 16 (2D) */
    int64_t w_elems;     /* elements of the packed weights (of the operand's type): the pack pass's threads */
    int stages;          /* the ring's depth */
    int64_t a_bytes, b_bytes, stage_bytes; /* one operand part of A, of B; a whole stage */
    int64_t stat_offset, stat_bytes; /* fp64 statistics partials of the 8 consumer warps, after the stages */
    /* the channels-last epilogue's staging: a slab per consumer warp (FG_WGMMA_EPI_ROWS rows x
     * FG_WGMMA_EPI_STRIDE floats), after the partials; 0 bytes where the layer's layout is NCHW
     * or it has statistics (fg_wgmma_staged_epilogue says which conv pass uses it) */
    int64_t epi_offset, epi_bytes;
    int epi_stride;      /* floats between a slab's rows: FG_WGMMA_EPI_STRIDE, or FG_WGMMA_EPI_COLS swizzled */
    int epi_unroll;      /* the slab's rows a staged epilogue handles per iteration of its row loop (unrolled),
                          * 1..FG_WGMMA_EPI_ROWS, a divisor of it; where its rows' tensor loads are
                          * prefetched, the chunks are at most this many rows too (conv.lua) */
    int epi_vec;         /* the staged epilogue's channels a lane (fg_wgmma_epi_vec): 1, a lane a channel
                          * and a 2- or 4-byte load and store an element; 8 (half) or 4 (fp32), 16-byte
                          * vectors: a lane reads a row's 8 or 4 neighbouring channels from the slab (and
                          * the residual's tile), runs each one's chain and stores them as one vector */
    /* The residual's tile in shared memory (bench/NOTES.md v42): where a half, channels-last
     * staged epilogue reads a block tensor of the output's shape (parameter res_param) and the
     * layer has no statistics, reduction, softmax or pool, each consumer warp copies its rows x
     * bn channels of it (2-byte elements) here by cp.async before the tile's main loop and the
     * epilogue reads them after it, instead of waiting on their DRAM loads (ResNet-50's last
     * 1x1 conv at 2048 channels, 7x7: 40 us against 21 for its first, with 8 rows' loads in
     * flight: v41). bm x bn x 2 bytes after the slabs, reserved only where the ring still keeps
     * 3 stages (4 with block accumulation). res_param -1 and 0 bytes: none (an fp32 layer keeps
     * the register prefetch, conv.lua). */
    int res_param;
    int64_t res_offset, res_bytes;
    int64_t bar_offset;  /* the mbarriers, after those (from the 1024-aligned base) */
    int consumer_regs, producer_regs; /* setmaxnreg */
    /* CTAs a multiprocessor holds: 1, or 2 (FUSEGEN_WGMMA_CTAS=2, where they fit: no block
     * accumulation, channel blocks of at most 64, A by TMA, >= 2 stages in half the shared
     * memory, the consumers at 96 registers): twice the consumer warps to hide an epilogue's
     * latencies where the K loop is short. The persistent grid is ctas_per_sm x the SMs. */
    int ctas_per_sm;
    int packed_hi, packed_lo, packed_w; /* the packed operands' buffers (-1: none) */
    /* 1: the layer input already is the packed A operand (a half, channels-last input with no
     * prologue, one part, no padding channels: [N][pixel][groups][cp] in its dtype): where it
     * is 16-byte aligned the launcher gives the conv the input for buffer packed_hi and skips
     * the input-packing pass (fg_launch_input_direct); elsewhere the pass packs it as always */
    int input_direct;
    /* 2: the conv pass runs in clusters of two CTAs that share each B chunk (one TMA multicast
     * copy of half of it by each; conv_wgmma.lua's multicast_engine), so the pair reads the
     * weights from L2 once; only where every tile reads the same B sequence (one channel
     * block, one group, no split K). 1: every CTA copies its own. */
    int multicast;
    /* 2: the producer loads the A operand (the im2col rows) with TMA in im2col mode: one elected
     * thread issues one cp.async.bulk.tensor per stage and part (the map: im2col, kernel
     * parameters of kind FG_ARG_TMAP), instead of 128 threads' 16-byte cp.async copies. By
     * default (FUSEGEN_WGMMA_A_TMA=1 asks for cp.async) where TMA can build the stage's image
     * (fg_wgmma_a_tma_refusal: a chunk is one tap x one 128-byte channel block, the pads,
     * corners, dilated offsets and strides within the map's limits, BM <= 256). A tile's rows
     * past the sample's output pixels then hold the next sample's pixels (zeros past the
     * batch): the epilogue masks every row q >= OPIX (stores, statistics, channel reductions;
     * split K sums whole partial tiles and masks at its epilogue). 1: cp.async. */
    int a_tma;
    /* 1: the consumers add each K chunk's sum (block accumulation) from two accumulators in
     * turn, the next chunk's wgmmas issued before the last one's sum is added; where the block
     * accumulates, A is by TMA (its producer needs 40 registers), the ring has 4 stages or more
     * and the three accumulators fit the consumers' 232 registers (wgmma_ping_pong). 0: one
     * chunk accumulator. */
    int ping_pong;
    /* 1: the two consumer warpgroups take whole tiles in turn (CUTLASS's "ping-pong" kernel
     * schedule; not the block accumulation's ping_pong above): a tile is one warpgroup's
     * 64 wgmt rows (bm), warpgroup cw runs the CTA's tiles begin + cw, begin + cw + 2, ...,
     * each main loop starting once the other warpgroup's previous one has ended (two turn
     * mbarriers after the ring's), so one warpgroup's epilogue runs while the other's wgmmas
     * do (where both share each tile the tensor cores idle through every epilogue, 74 % of
     * ConvNeXt 768's 1x1 + GELU, bench/NOTES.md v44). Chosen where the operands are half and K
     * never splits or the shared tiles still split at batch 32 (planner.c, wgmma_tiling_chosen:
     * measured in v46 and v49), asked for by
     * FUSEGEN_WGMMA_ALTERNATE=2 elsewhere; only where nothing in the epilogue syncs the two
     * warpgroups or pairs CTAs: no statistics partials or channel reduction, no multicast
     * pair, one CTA a multiprocessor. With split K a unit is a (tile, split) of one warpgroup,
     * whose fixup syncs and flags that warpgroup alone (split_slot, flag_offset). The flat-tile rule still counts 128 wgmt rows,
     * so that flat tiles are where the shared tiles have them. 0: the warpgroups share each tile. */
    int alternate;
    /* 1: a flat tile's epilogue checks each output's sample against the batch without a branch
     * (the default; FUSEGEN_WGMMA_FLAT_PREDICATED=1 keeps the branch; measured in bench/NOTES.md
     * v46: ConvNeXt 768's block -13 % at N32, ResNet 2048's -5 %): the row past the batch computes
     * its chain on the tile's first sample (its loads in bounds) and only its stores are
     * predicated, so that the compiler interleaves a warp's rows. With the check as a branch
     * around each output (0) every row is a block of its own and the rows run one after the
     * other: ConvNeXt 768's 1x1 + GELU (flat, 7x7) alternates one shared-memory load and one
     * store per row through its whole epilogue, where the 14x14 stage's unchecked full tiles
     * load 8 rows before storing them (the cubins' SASS, bench/NOTES.md v45). Only in the staged
     * epilogue (channels last) of half operands with one product (bf16/fp16 at precision tf32)
     * where no tensor's rows are prefetched into registers (elsewhere the interleaved rows
     * spilled, planner.c), and where every channel of a tile's chunks exists (bn a multiple of
     * FG_WGMMA_EPI_COLS, the group's channels whole blocks), so that the sample is the only
     * check. */
    int flat_predicated;
    /* 1 (with flat_predicated): the chain reads nothing by an output's sample or pixel (values
     * per channel, the residual's tile in shared memory), so a row's output index is taken as
     * that of pixel n0 x opix + row of the batch's pixels run together (channels last: the
     * same element) instead of dividing the row into its sample and pixel; its address then
     * steps by the channels from row to row, as a full tile's do (v45) */
    int flat_rows_linear;
    /* FUSEGEN_WGMMA_A_TMA=2 asked for TMA where fg_wgmma_a_tma_refusal refused: why (a static
     * string, for `fusegen plan`); NULL otherwise */
    const char *a_tma_refused;
    fg_im2col_map im2col; /* a_tma 2: the map's plan-time arguments */
    /* Split K, for grids too small to fill the GPU: a tile's K chunks are shared by up to
     * split_k CTAs (work units of the persistent loop), each writing its fp32 partial tile to
     * the workspace; the last to arrive on the tile's counter adds every partial in split
     * order and runs the epilogue. split_k is the most splits (a launch of one sample's tiles);
     * a launch of `tiles` tiles uses fg_wgmma_splits(w, tiles). 1: never split, and every
     * field below is 0 (-1 for the buffers). */
    int split_k;
    int split_fill;      /* tiles x splits of a launch stay at most this (the GPU's SMs, as planned for;
                          * with split_waves, the units whose partials the workspace holds) */
    int split_min_chunks;/* the K chunks every split keeps at least (the rule's bound) */
    /* 0: a launch takes the most splits that keep tiles x splits <= split_fill (one wave);
     * 1 (FUSEGEN_SPLIT_WAVES=1): the splits S of the least estimated time counted in waves,
     * split_chunk_cost x ceil(tiles x S / split_sms) x ceil(kch / S) + split_partial_cost x S
     * (no partials at S = 1), within split_fill (gen/planner.c, wgmma_split) */
    int split_waves;
    int split_sms;          /* split_waves: the SMs a wave of units fills */
    int split_chunk_cost;   /* split_waves: a K chunk's time and a partial's (its write and the */
    int split_partial_cost; /* last CTA's read of it), in the same unit */
    int split_counters, split_partials; /* buffers: an arrival counter per tile (zero between launches),
                                         * split_fill partial tiles of split_slot floats */
    int64_t split_slot;  /* floats of one (tile, split) partial: the accumulators of the 256 consumer threads
                          * (alternate: of the 128 of the warpgroup whose tile it is) */
    int64_t flag_offset; /* shared memory: the last-arrival flag (alternate: one per warpgroup), after the
                          * barriers (and the turn barriers) */
} fg_wgmma_tiling;

/* The K splits a launch of `tiles` output tiles (the batch's) uses: as many as keep tiles x
 * splits within w->split_fill, at most w->split_k; 1 (no split) below 2; with w->split_waves,
 * the least estimated time in waves (fg_wgmma_tiling.split_waves). The generated kernel
 * computes the same from its batch argument. */
int fg_wgmma_splits(const fg_wgmma_tiling *w, int64_t tiles);
/* The waves of w->split_sms work units that `units` (tiles x splits) take (split_waves) */
int64_t fg_wgmma_split_waves(const fg_wgmma_tiling *w, int64_t units);
/* The tiles of a launch of `batch` samples of a wgmma conv pass whose grid_x (a sample's
 * tiles) is `grid_x`: grid_x x batch, or with flat tiles (fg_wgmma_tiling.flat) the tiles of
 * the batch's pixels flattened, ceil(batch x opix / bm) a channel block and group. */
int64_t fg_wgmma_tiles(const fg_wgmma_tiling *w, int64_t grid_x, int64_t batch);

/* Why the wgmma conv of `ir` on tiling `w` cannot load A by TMA in im2col mode (the reason, for
 * fusegen plan), or NULL where it can; where it can, fills *map (may be NULL) with the map's
 * plan-time arguments. A pure function of the layer and the tiling (tests/test_planner.c). */
const char *fg_wgmma_a_tma_refusal(const fg_layer_ir *ir, const fg_wgmma_tiling *w, fg_im2col_map *map);
/* A conv thread's registers before setmaxnreg, as the launch bounds give them: 168 (384
 * threads a multiprocessor), 80 (two CTAs of them, ctas_per_sm 2). */
int fg_wgmma_base_regs(const fg_wgmma_tiling *w);

struct fg_pass;
struct fg_plan;
/* Whether wgmma conv pass `ps` stores its outputs through the staging slabs (the tiling's
 * epi_bytes): its only target is a channels-last layer output, with no statistics and no
 * channel reduction. Each consumer warp then writes its 16 rows x 32 channels of the
 * accumulators to its slab and reads them back a pixel at a time with the lanes along the
 * channels, so the epilogue's loads (tensors read at the output's index) and stores are
 * contiguous along C. Read by the template (pass.staged_epilogue) and by fusegen plan. */
bool fg_wgmma_staged_epilogue(const struct fg_plan *plan, const struct fg_pass *ps);
/* The channels a lane of conv pass ps's staged epilogue stores as one 16-byte vector
 * (fg_wgmma_tiling.epi_vec where the pass feeds no statistic, whose partials are kept a lane a
 * channel), or 1: a lane a channel. */
int fg_wgmma_epi_vec(const struct fg_plan *plan, const struct fg_pass *ps);

typedef struct fg_pass {
    fg_pass_kind kind;
    char kernel[64];        /* kernel function name */
    int first, last;        /* ops evaluated inline (first > last: none) */
    int source_buffer;      /* buffer holding value first-1, -1 for the conv pass */
    int domain;             /* the value whose index space the pass covers */
    int store_buffer;       /* buffer the domain value goes to, -1 if none */
    int n_extra_stores;     /* other values of the chain stored for later ops to read */
    int extra_stores[4];    /* buffers (each holds one value of first..last) */
    bool store_output;      /* the domain value is the layer output */
    int n_feeds;
    int feeds[4];           /* accumulators fed with the domain value */
    int finalize_accum;     /* FINALIZE: the accumulator it finalizes */
    int n_zero;
    int zero[4];            /* accumulators the runtime clears before this pass */
    fg_conv_tiling conv;
    /* a wgmma conv pass whose tile holds every output channel: the reduction over the channels
     * (op index; -1 none) it computes in its epilogue, the ops after it applied to the reduced
     * value (the rule at wgmma_channel_reduction in planner.c) */
    int chan_reduce;
    /* a map pass of the channel-sums strategy: the sum or mean (op index; -1 none) it computes
     * from the conv pass's fp64 moments per (sample, channel) instead of from the elements (ops first..chan_sums - 1 are the norm and ops affine per channel: it
     * evaluates them once per channel, in fp64, on the channel's mean) */
    int chan_sums;
    struct fg_resident {
        int cluster;            /* CTAs per cluster (1, 2, 4, 8) */
        int channel_block;      /* output channels a cluster owns, all positions of them */
        int channel_group;      /* channels per statistic of the norm */
        int norm_op;            /* the norm whose statistics the cluster reduces */
        int reduce_op;          /* the channel reduction applied after it, -1 if none */
        int64_t rows;           /* output rows (D x H) of a sample */
        int64_t slice;          /* floats per channel one CTA keeps: its rows x W at most */
    } res;
    fg_launch launch;
    int n_args;
    fg_arg args[FG_MAX_ARGS];
} fg_pass;

typedef enum fg_strategy {
    FG_STRATEGY_MATERIALIZE, /* the conv pass writes the pre-norm value once */
    FG_STRATEGY_RECOMPUTE,   /* the conv pass runs again after the statistics are known */
    FG_STRATEGY_RESIDENT,    /* one kernel: conv output kept in (distributed) shared memory */
    /* a sum or mean over every spatial dim of a norm's output (through ops affine per channel):
     * the conv pass feeds fp64 moments per (sample, channel), one map pass
     * computes the reduction from them (gen/planner.c, channel_sums_reduction). Chosen by
     * "auto" only; a spec or FUSEGEN_STRATEGY cannot ask for it */
    FG_STRATEGY_CHANNEL_SUMS,
} fg_strategy;

typedef struct fg_plan {
    fg_strategy strategy;
    int n_passes;
    fg_pass passes[FG_MAX_PASSES];
    int n_buffers;
    fg_buffer buffers[FG_MAX_BUFFERS];
    int n_accums;
    fg_accum accums[FG_MAX_ACCUMS];
    /* how each op is evaluated when inline: 1 when it loops over a window (reduction, pool) */
    bool inline_loop[FG_MAX_OPS];
    /* the accumulator holding a value's reduction / statistics, -1 when none */
    int op_accum[FG_MAX_OPS];
    int op_max_accum[FG_MAX_OPS];
    /* a batch_norm folded into the conv (gen/fold.h; fold.op -1: none): the conv reads the
     * folded weight and bias, kernel parameters fold.folded_weight and fold.folded_bias, and
     * the folded op is the identity in every pass */
    fg_bn_fold fold;
    /* the wgmma engine's tiling when the conv runs on it (a conv pass with engine
     * FG_CONV_WGMMA, after the packing passes); all zero otherwise */
    fg_wgmma_tiling wgmma;
    /* the prologue (ops before the conv, ir->pro): the norm whose statistics a
     * FG_PASS_PRO_STATS pass gathers over the input (-1: none needs any) and its
     * accumulator (-1: none); the conv pass (or, on wgmma, the input pack) applies every
     * prologue op to each input element it stages: no tensor holds the normalized input */
    int pro_norm, pro_accum;
    /* the accumulator of fg_layer_ir.export_norm's statistics over the output, fed by the
     * pass that stores the output (-1: the layer exports none) */
    int export_accum;
    /* the prologue's statistics are finalized by each block of the wgmma input pack by pixel
     * rows (its sample's keys into shared memory), not by a finalize pass: that pack is their
     * only reader (gen/planner.c, prologue_finalize) */
    bool pack_finalizes;
    /* the prologue's norm is over each position's channels (layer_norm { dim = 1 }, first in
     * the prologue) and the wgmma input pack by pixel rows holds every channel of its pixels
     * in one block: the pack computes each pixel's mean and variance itself (pro_accum -1: no
     * statistics pass, no accumulator, no finalize; gen/planner.c, pack_pixel_statistics) */
    bool pack_pixel_stats;
    /* precision "tf32" whose conv the exact engines compute: one TF32 product is no faster
     * there (narrow groups; on sm_90a, fewer than 32 outputs a group: gen/planner.c,
     * tf32_stays_exact) -- no cuDNN pass, no wgmma */
    bool tf32_exact;
    /* on sm_90a, where the wgmma engine cannot tile the conv (a limit of it, not a measured
     * choice): why, for `fusegen plan`; empty otherwise */
    char wgmma_refused[128];
    /* GELU's erf by a five-term fit instead of erff (templates/ops.lua, fg_gelu_fast): asked
     * for (fg_plan_options.fast_gelu 2), in a layer with a GELU (approximate "none") at
     * precision "tf32" only, whose conv is ~1e-3 off (or exact, where one TF32 product is no
     * faster: the fit's 5.3e-7 is still far under the 1e-4 bar) */
    bool fast_gelu;
} fg_plan;

/* Which conv engine a plan uses: the planner's choice, or one a caller prefers (where the
 * shape allows it; a benchmarking and testing knob). */
typedef enum fg_engine_choice {
    FG_ENGINE_AUTO = 0,
    FG_ENGINE_PREFER_FMA,
    FG_ENGINE_PREFER_MMA,
    FG_ENGINE_PREFER_WGMMA,
} fg_engine_choice;

/* Everything the planner decides from besides the layer IR. The planner reads nothing else
 * (no environment): runtime/environment.c fills the knobs at the API and CLI edges. Zero
 * means "the planner chooses" for every knob; fg_plan_options_init sets the rest. */
typedef struct fg_plan_options {
    int force_strategy;     /* -1: the spec's `strategy` (or, for "auto", default_strategy); else an fg_strategy */
    int default_strategy;   /* -1: choose by cost; else the fg_strategy for specs that say "auto" */
    int sm;                 /* target compute capability x 10 (80, 90); 0: 90 */
    bool wgmma;             /* the target has wgmma (sm_90a: the arch-specific Hopper target) */
    fg_engine_choice engine;
    int mma_warp[3];        /* tensor-core warp tile: m-tiles, rows, n-tiles (0: choose) */
    int mma_tiles;          /* tensor-core tiles per block, 1..8 (0: choose) */
    int mma_acc_steps;      /* tensor-core reduction steps per fresh accumulator, 1..64 (0: choose) */
    int conv_tile[4];       /* FMA thread tile: rows, cols, channels, ci unroll (0: choose) */
    int split_k;            /* wgmma: at most this many K splits (1: never split; 0: choose) */
    int split_waves;        /* wgmma: 1 chooses a launch's K splits counted in waves, past one wave of
                             * tiles x splits (fg_wgmma_tiling.split_waves); 0: within one wave */
    int wgmma_m64;          /* wgmma: at most this many m64 tiles per consumer warpgroup, 1..2 (0: choose) */
    int wgmma_multicast;    /* wgmma: 2 shares B chunks between the CTAs of a pair where it can, 1 never (0: choose) */
    int wgmma_a_tma;        /* wgmma: 2 loads A (the im2col rows) by TMA where it can, 1 never (0: choose: where it can) */
    int wgmma_ctas;         /* wgmma: 2 runs two CTAs a multiprocessor where they fit, 1 one (0: choose: one) */
    int wgmma_bn;           /* wgmma: the widest channel block of a tile, 8..256, rounded up to 8 (0: choose) */
    int wgmma_epi_rows;     /* wgmma: the staged epilogue's rows per iteration of its row loop, 1, 2, 4, 8 or 16 (0: choose) */
    int wgmma_alternate;    /* wgmma: 2 has the consumer warpgroups take whole tiles in turn where they can, 1 never (0: choose: half operands where K never splits or the shared tiles still split at batch 32) */
    int wgmma_flat_predicated; /* wgmma: 2 checks a flat tile's outputs by predicated stores where it can, 1 by a branch (0: choose: predicated stores) */
    int fast_gelu;          /* 1: GELU (approximate "none") by erff everywhere; 2 or 0: by fg_gelu_fast at precision "tf32" (the default since v49) */
    int wgmma_epi_vec;      /* wgmma: 2 has a staged epilogue's lane store 16-byte vectors of neighbouring channels where it can, 1 a channel a lane (0: choose: 1; opt-in, measured slower on three blocks of four: bench/NOTES.md v49) */
    int wgmma_flat;         /* wgmma: 2 takes flat tiles also where tiles in turn leave any of a sample's rows empty, 1 only past a quarter of 128-row tiles (0: choose: also past a fifth of the turns' 64-row tiles) */
} fg_plan_options;

/* The planner's own choice for everything, for architecture `sm` (0: sm_90). */
void fg_plan_options_init(fg_plan_options *opts, int sm);
/* Whether `rows` may be asked for as fg_plan_options.wgmma_epi_rows: a divisor of the staging
 * slab's FG_WGMMA_EPI_ROWS (1, 2, 4, 8 or 16); the planner chooses in place of any other. */
bool fg_wgmma_epi_rows_valid(int rows);
/* The same for an architecture name: "sm_80", "sm_90", "sm_90a" (wgmma). */
void fg_plan_options_for_arch(fg_plan_options *opts, const char *arch);
/* Points options (knobs already set) at an architecture: what it has (sm, wgmma). */
void fg_plan_options_set_arch(fg_plan_options *opts, const char *arch);

int fg_plan_layer(const fg_layer_ir *ir, const fg_plan_options *opts, fg_plan *plan, fg_error *err);

/* The engine that computes the plan's conv, for messages: "wgmma", "mma.sync", "the FMA
 * engine" or "cuDNN". */
const char *fg_plan_conv_engine_name(const fg_plan *plan);

/* Whether `plan`'s conv engine is one the planner's measurements leave open (fp32 on
 * sm_90a, a reduction and width between what the sweep settled, bench/NOTES.md v7); then
 * *alternative is `opts` preferring the other engine, for the runtime to time both at the
 * first run (runtime/tuning.h). False when opts force an engine. */
bool fg_plan_engine_alternative(const fg_layer_ir *ir, const fg_plan_options *opts, const fg_plan *plan,
                                fg_plan_options *alternative);

/* The kernel parameters the conv reads as its weight and bias: the spec's, or the folded
 * ones (gen/fold.h). Returns the weight's; *bias is -1 when the conv adds none. */
int fg_plan_conv_params(const fg_layer_ir *ir, const fg_plan *plan, int *bias);

/* "sm_90" / "sm_90a" -> 90; 0 when the text is not an architecture. */
int fg_arch_sm(const char *arch);
/* Whether the architecture is Hopper's arch-specific target (sm_90a): wgmma, setmaxnreg. */
bool fg_arch_has_wgmma(const char *arch);

/* The plan as `fusegen plan` prints it, a line at a time through emit (gen/plan_print.c). */
void fg_plan_print(const fg_layer_ir *ir, const fg_plan *plan, void (*emit)(void *ctx, const char *line),
                   void *ctx);

#endif
