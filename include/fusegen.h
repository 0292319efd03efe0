/* SPDX-License-Identifier: Apache-2.0 */
/* fusegen: shape-specialized fused CUDA kernels for conv + epilogue layers.
 *
 * The runtime API. A context holds a device, the kernel caches and options; a layer is a
 * spec (file or string) loaded into a context, with its parameters bound by PyTorch
 * state_dict name; running a layer launches its kernels on a CUDA stream, compiling with
 * NVRTC whatever the caches do not already hold. Every GPU-free part (loading, planning,
 * compiling, the CPU reference) works on machines without a GPU or driver.
 *
 * Every function returns an fg_status; on failure fg_last_error() gives a message for the
 * calling thread that names what was wrong (file, field, tensor, ...). Handles are checked:
 * NULL, destroyed or foreign handles are rejected with FG_ERR_INVALID_ARGUMENT.
 *
 * Thread safety: a context may be shared by threads; a layer may be run from several
 * threads and on several streams: its runs share the layer's workspace, so they are queued
 * one at a time and a run on another stream than the previous run waits for that run on
 * the GPU (an event). A bind waits for the layer's runs in flight (and for the GPU to
 * finish the last one) before it replaces a parameter; destroying a layer or a context waits
 * for the calls on it in flight in other threads and refuses new ones.
 *
 * CUDA context: fusegen works in the device's primary context, the one the CUDA runtime
 * (and so PyTorch) uses, so device pointers and streams from the runtime can be passed in.
 *
 * Example (see docs/api.md for a complete program):
 *
 *     fg_context *ctx;  fg_layer *layer;
 *     fg_context_create(NULL, &ctx);                 // device 0, default caches
 *     fg_layer_load_file(ctx, "specs/kb79.lua", &layer);
 *     fg_layer_bind_safetensors(layer, "weights.safetensors");
 *     fg_layer_run(layer, d_x, d_y, 128, stream);     // device pointers, batch 128
 *     fg_layer_destroy(layer);  fg_context_destroy(ctx);
 */
#ifndef FUSEGEN_H
#define FUSEGEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FUSEGEN_BUILDING_LIBRARY)
#define FG_API __attribute__((visibility("default")))
#else
#define FG_API
#endif

typedef enum fg_status {
    FG_OK = 0,
    FG_ERR_INVALID_ARGUMENT = 1, /* NULL/destroyed handle, bad size, unknown name */
    FG_ERR_SPEC = 2,             /* the spec does not load (syntax, fields, shapes) */
    FG_ERR_IO = 3,               /* a file could not be read or written */
    FG_ERR_TENSOR_FILE = 4,      /* a malformed safetensors file */
    FG_ERR_COMPILE = 5,          /* NVRTC is missing or rejected the generated source */
    FG_ERR_NO_DEVICE = 6,        /* no CUDA driver or device */
    FG_ERR_CUDA = 7,             /* a CUDA driver call failed */
    FG_ERR_UNBOUND = 8,          /* a parameter has not been bound */
    FG_ERR_OUT_OF_MEMORY = 9,
    FG_ERR_INTERNAL = 10,
} fg_status;

typedef struct fg_context fg_context;
typedef struct fg_layer fg_layer;

/* Message levels: the library writes nothing itself except through the context's log, and
 * by default that shows warnings only (on stderr). */
typedef enum fg_log_level {
    FG_LOG_WARN = 1,  /* something was not as asked: a bad cache entry, kernels not cached, a knob ignored */
    FG_LOG_INFO = 2,  /* what took time: the first JIT of a layer (what, how long, where it is cached) */
    FG_LOG_DEBUG = 3, /* cache lookups, plan aliases, timings of every prepare */
} fg_log_level;

/* Receives one message (no trailing newline) at `level`; `user` is fg_context_options.log_user.
 * May be called from any thread that calls into the context. */
typedef void (*fg_log_fn)(void *user, fg_log_level level, const char *message);

typedef struct fg_context_options {
    size_t struct_size;     /* sizeof(fg_context_options), set by fg_context_options_init: the
                               struct grows at its end, and the library reads only what the
                               caller's version has */
    int device;             /* CUDA device ordinal (default 0); -1: CPU only, no GPU calls */
    const char *cache_dir;  /* user cache; NULL: $FUSEGEN_CACHE_DIR, $XDG_CACHE_HOME/fusegen, ~/.cache/fusegen */
    const char *cache_path; /* shipped read-only caches, colon-separated; NULL: $FUSEGEN_CACHE_PATH */
    const char *arch;       /* e.g. "sm_90a"; NULL: the device's */
    int verbose;            /* 1: the same as log_level = FG_LOG_INFO */
    fg_log_fn log;          /* NULL: messages go to stderr as "fusegen: ..." */
    void *log_user;
    int log_level;          /* messages up to this level; 0: $FUSEGEN_LOG (warn, info, debug), else FG_LOG_WARN */
} fg_context_options;

/* Fills `opts` with the defaults (device 0, environment caches, warnings on stderr) and sets
 * struct_size. Every fg_context_options must be initialized with it. */
FG_API void fg_context_options_init(fg_context_options *opts);

/* The message for the calling thread's last failed call ("" if none). */
FG_API const char *fg_last_error(void);
FG_API const char *fg_status_name(fg_status status);
FG_API const char *fg_version(void);

/* opts may be NULL (defaults). The CUDA driver is loaded here unless device is -1; with no
 * driver the call fails with FG_ERR_NO_DEVICE (use device -1 for CPU-only work). */
FG_API fg_status fg_context_create(const fg_context_options *opts, fg_context **out);
FG_API fg_status fg_context_destroy(fg_context *ctx);

FG_API fg_status fg_layer_load_file(fg_context *ctx, const char *path, fg_layer **out);
/* `name` stands for the file in messages. */
FG_API fg_status fg_layer_load_string(fg_context *ctx, const char *name, const char *source, fg_layer **out);
FG_API fg_status fg_layer_destroy(fg_layer *layer);

#define FG_MAX_DIMS 8

/* Shapes of the input and output for `batch` samples. */
FG_API fg_status fg_layer_input_shape(const fg_layer *layer, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS]);
FG_API fg_status fg_layer_output_shape(const fg_layer *layer, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS]);

/* The dtype of the layer's input and output in device memory (the spec's `dtype`): "fp32",
 * "bf16" or "fp16", and the bytes of one element (4 or 2; either pointer may be NULL).
 * Parameters are float32 whatever it is. */
FG_API fg_status fg_layer_dtype(const fg_layer *layer, const char **dtype, int *element_bytes);

/* The memory layout of the layer's input and output (the spec's `layout`): "nchw" (contiguous
 * NC(D)HW) or "channels_last" (contiguous N(D)HWC: the channel innermost; PyTorch's
 * torch.channels_last / channels_last_3d memory). fg_layer_input_shape/output_shape report
 * the logical (N, C, spatial...) shape either way; every pointer of fg_layer_run*,
 * fg_layer_run_cpu included, holds the elements in this layout. Parameters are never
 * affected. */
FG_API fg_status fg_layer_layout(const fg_layer *layer, const char **layout);

/* Parameters in the spec's order: name (a state_dict key) and shape. */
FG_API fg_status fg_layer_param_count(const fg_layer *layer, int *count);
FG_API fg_status fg_layer_param_info(const fg_layer *layer, int index, const char **name, int *rank,
                                     int64_t dims[FG_MAX_DIMS]);

/* State a module's state_dict carries that the layer accepts and never reads: every
 * batch_norm's num_batches_tracked (dtype "I64", rank 0) and, for one with batch statistics,
 * its running_mean and running_var ("F32", [C]: the forward pass leaves them unchanged).
 * Strict binding (fg_layer_bind_safetensors, the Python bindings) accepts these keys. */
FG_API fg_status fg_layer_ignored_count(const fg_layer *layer, int *count);
FG_API fg_status fg_layer_ignored_info(const fg_layer *layer, int index, const char **name, int *rank,
                                       int64_t dims[FG_MAX_DIMS], const char **dtype);

/* Binds one parameter to caller-owned device memory (float32, contiguous, `bytes` must
 * equal its size). The memory must stay valid while the layer runs. A parameter a folded
 * batch_norm is computed from (the conv's weight and bias, the norm's parameters and
 * running statistics: `fusegen plan` says "folded") is read once, here; so is the conv's
 * weight (or the folded one) where the conv runs on Hopper's wgmma engine, which packs it
 * into an image of the layer's own (`fusegen plan`: "packed once at bind"; before the
 * layer's first prepare, at that prepare): after changing its memory, bind it again. Such
 * a bind waits for the device (cuCtxSynchronize), so that writes queued on any stream are
 * read. */
FG_API fg_status fg_layer_bind_device(fg_layer *layer, const char *name, const void *device_ptr, size_t bytes);
/* Binds one parameter from host memory; the layer keeps a copy (on the device too when the
 * context has one). */
FG_API fg_status fg_layer_bind_host(fg_layer *layer, const char *name, const float *data, size_t bytes);
/* Binds every parameter from a safetensors file (F32 tensors named by state_dict keys).
 * Tensors the spec does not use are an error unless `allow_extra` is non-zero. */
FG_API fg_status fg_layer_bind_safetensors(fg_layer *layer, const char *path, int allow_extra);

/* Compiles (or loads from the caches) every kernel of the layer now instead of at the first
 * run, and packs a wgmma conv's weight if it is bound (later binds pack it themselves; a run
 * packs only where nothing did: no prepare, or a bind whose pack failed). Needs a context
 * with a device. */
FG_API fg_status fg_layer_prepare(fg_layer *layer);

/* Runs the layer on `batch` samples: `input` and `output` are device pointers (contiguous
 * NC(D)HW, or N(D)HWC for a layer with layout "channels_last" (fg_layer_layout), of the layer's dtype: float32, or bf16/fp16 for a spec with that `dtype`, see
 * fg_layer_dtype; the pointers carry no type, so a caller must check it); `stream` is a CUstream/cudaStream_t (NULL: the default stream).
 * Asynchronous like any launch: the output is ready when the stream is. */
FG_API fg_status fg_layer_run(fg_layer *layer, const void *input, void *output, int64_t batch, void *stream);

/* The device workspace (bytes) a run of `batch` samples needs for the layer's intermediate
 * values and statistics; 0 when it keeps none. (A wgmma conv's packed weights are the
 * layer's own memory, not in it.) */
FG_API fg_status fg_layer_workspace_size(const fg_layer *layer, int64_t batch, size_t *bytes);

/* fg_layer_run on caller-owned workspace: `workspace` is device memory of at least
 * fg_layer_workspace_size(batch) bytes, 256-byte aligned (NULL when that size is 0). The
 * layer allocates nothing, records no event and replays no graph of its own: each pass is
 * launched on `stream`, so the call may be captured into the caller's CUDA graph (prepare
 * the layer first, its parameters bound: compiling and loading kernels and packing a wgmma
 * conv's weights cannot be captured, and a run on a stream being captured whose weights are
 * not packed yet fails with FG_ERR_INVALID_ARGUMENT), and runs on different streams with
 * different workspaces may overlap. The workspace must stay untouched until
 * the run is done on `stream` (a stream-ordered allocator, like PyTorch's, does that by
 * itself). Not for layers whose conv runs in cuDNN (precision "tf32"): FG_ERR_INVALID_ARGUMENT. */
FG_API fg_status fg_layer_run_workspace(fg_layer *layer, const void *input, void *output, int64_t batch,
                                        void *workspace, size_t workspace_bytes, void *stream);

/* The CPU reference (double accumulation) on host memory; needs host-bound parameters
 * (fg_layer_bind_host or fg_layer_bind_safetensors). `input` and `output` are floats for
 * every dtype, in the layer's layout (N(D)HWC for "channels_last"); for a bf16/fp16 layer each input value is rounded to the dtype first (what the
 * GPU reads) and the float64 result is rounded to the dtype (to nearest even) once. */
FG_API fg_status fg_layer_run_cpu(fg_layer *layer, const float *input, float *output, int64_t batch);

/* ---- Blocks: several layers wired in a DAG, run as one unit (docs/spec.md, "Blocks") ----
 *
 * A block has one input ("input"), extra named inputs (the spec's `inputs`, sorted by name)
 * and one output; inputs[0] of the run functions is the block input, inputs[i] extra input
 * i (fg_block_input_info). Parameters are bound by state_dict key for the whole block (a key
 * may be read by several layers). Every tensor of a block (its inputs, its output, the
 * tensors between layers) has the block's dtype and layout (the spec's block fields `dtype`
 * and `layout`: fg_block_dtype, fg_block_layout), as a layer's input and output have its
 * own; parameters are float32 whatever they are. Each layer runs its own
 * kernels; a run launches them all, in dependency order, on one stream, the layers'
 * outputs but the block's in the workspace. Thread safety as for layers: runs of one block
 * are serialized. */
typedef struct fg_block fg_block;

/* Loads a block spec (a spec returning a plain layer is refused: use fg_layer_load_*). */
FG_API fg_status fg_block_load_file(fg_context *ctx, const char *path, fg_block **out);
FG_API fg_status fg_block_load_string(fg_context *ctx, const char *name, const char *source, fg_block **out);
FG_API fg_status fg_block_destroy(fg_block *block);

/* The inputs (1 + extra inputs): name ("input" first) and shape for `batch` samples. */
FG_API fg_status fg_block_input_count(const fg_block *block, int *count);
FG_API fg_status fg_block_input_info(const fg_block *block, int index, int64_t batch, const char **name, int *rank,
                                     int64_t dims[FG_MAX_DIMS]);
FG_API fg_status fg_block_output_shape(const fg_block *block, int64_t batch, int *rank, int64_t dims[FG_MAX_DIMS]);
/* The dtype of every tensor of the block in device memory ("fp32", "bf16" or "fp16") and the
 * bytes of one element (either pointer may be NULL), and their layout ("nchw" or
 * "channels_last": N(D)HWC; an [N, C] input is the same memory either way): as
 * fg_layer_dtype and fg_layer_layout for a layer. Shapes stay logical (N, C, spatial...). */
FG_API fg_status fg_block_dtype(const fg_block *block, const char **dtype, int *element_bytes);
FG_API fg_status fg_block_layout(const fg_block *block, const char **layout);
/* The layers, in run order: count, and each one's name ("a" of layer "a"). */
FG_API fg_status fg_block_layer_count(const fg_block *block, int *count);
FG_API fg_status fg_block_layer_name(const fg_block *block, int index, const char **name);

/* Parameters of all layers, each state_dict key once, in the order the layers (in run order)
 * first use them. */
FG_API fg_status fg_block_param_count(const fg_block *block, int *count);
FG_API fg_status fg_block_param_info(const fg_block *block, int index, const char **name, int *rank,
                                     int64_t dims[FG_MAX_DIMS]);
/* As fg_layer_bind_host / _device / _safetensors, for every layer that reads `name` (each
 * wgmma layer packing its own image of a weight it reads, at this bind). */
FG_API fg_status fg_block_bind_host(fg_block *block, const char *name, const float *data, size_t bytes);
FG_API fg_status fg_block_bind_device(fg_block *block, const char *name, const void *device_ptr, size_t bytes);
FG_API fg_status fg_block_bind_safetensors(fg_block *block, const char *path, int allow_extra);

/* Compiles (or loads from the caches) every layer's kernels now. */
FG_API fg_status fg_block_prepare(fg_block *block);
/* Device workspace for a run of `batch` samples: the intermediate tensors and the largest
 * layer workspace (256-byte aligned pieces). */
FG_API fg_status fg_block_workspace_size(const fg_block *block, int64_t batch, size_t *bytes);
/* Runs the block: inputs[] and output are device pointers (contiguous, of the block's dtype
 * and layout: fg_block_dtype, fg_block_layout). */
FG_API fg_status fg_block_run(fg_block *block, const void *const *inputs, void *output, int64_t batch,
                              void *stream);
/* The same on caller-owned workspace (fg_block_workspace_size bytes, 256-byte aligned):
 * nothing allocated, each kernel launched on `stream`, so it may be captured in the caller's
 * CUDA graph once the block is prepared. Not for layers whose conv runs in cuDNN. */
FG_API fg_status fg_block_run_workspace(fg_block *block, const void *const *inputs, void *output, int64_t batch,
                                        void *workspace, size_t workspace_bytes, void *stream);
/* The CPU reference of the whole block (each layer in float64; the tensors between layers
 * as floats), on host memory; needs host-bound parameters. `inputs` and `output` are floats
 * for every dtype, in the block's layout; for a bf16/fp16 block each input value is rounded
 * to the dtype first (what the GPU reads), and each layer's float64 result is rounded to the
 * dtype (to nearest even) once, the tensors between layers and the output alike. */
FG_API fg_status fg_block_run_cpu(fg_block *block, const float *const *inputs, float *output, int64_t batch);

#ifdef __cplusplus
}
#endif

#endif
