/* SPDX-License-Identifier: Apache-2.0 */
/* The layer IR: what a spec means, after loading and shape inference.
 *
 * A layer is one anchor convolution (ops[0]) followed by a chain of ops, optionally preceded
 * by a prologue (pro[], applied to the input as the conv reads it). Op k reads the
 * value produced by op k-1 (and, for binary ops, an operand) and produces value k. The
 * batch dimension is symbolic (bound at run time); every other extent is a constant.
 * Nothing here knows about CUDA: the planner and the templates turn this into kernels,
 * and reference/ evaluates it on the CPU. */
#ifndef FG_IR_H
#define FG_IR_H

#include <stdbool.h>
#include <stdint.h>

#define FG_MAX_RANK 5          /* N, C and up to three spatial dims */
#define FG_MAX_OPS 48
#define FG_MAX_PROLOGUE 8      /* ops before the convolution (docs/spec.md, "Prologue") */
#define FG_MAX_PARAMS 64
#define FG_NAME_MAX 96

/* A shape whose dim[0] is the batch: its extent is bound at run time, so dim[0] holds 1
 * and every size computed from a shape is "per sample". */
typedef struct fg_shape {
    int rank;
    int64_t dim[FG_MAX_RANK];
} fg_shape;

typedef enum fg_op_class {
    FG_CLASS_CONV,
    FG_CLASS_UNARY,
    FG_CLASS_BINARY,
    FG_CLASS_NORM,
    FG_CLASS_REDUCE,
    FG_CLASS_SOFTMAX,
    FG_CLASS_POOL,
    /* flatten, squeeze, unsqueeze, view: a new logical shape for the same dense value (no
     * kernel code, no data movement; docs/spec.md, "Shape ops") */
    FG_CLASS_SHAPE,
} fg_op_class;

/* Every op kind. What each one is -- its constructor, class, fields and semantics -- is
 * the op registry's (gen/op_registry.h): this list only names them. Several kinds may
 * share a constructor (max is a reduction with `dim`, elementwise with an operand). */
#define FG_OP_KINDS(X) \
    X(CONV2D)          \
    X(CONV3D)          \
    X(RELU)            \
    X(LEAKY_RELU)      \
    X(GELU)            \
    X(SIGMOID)         \
    X(TANH)            \
    X(SOFTPLUS)        \
    X(MISH)            \
    X(SILU)            \
    X(HARDSWISH)       \
    X(HARDSIGMOID)     \
    X(HARDTANH)        \
    X(CLAMP)           \
    X(EXP)             \
    X(LOG)             \
    X(ABS)             \
    X(NEG)             \
    X(SOFTSIGN)        \
    X(DROPOUT)         \
    X(ADD)             \
    X(SUB)             \
    X(MUL)             \
    X(DIV)             \
    X(MINIMUM)         \
    X(MAXIMUM)         \
    X(GROUP_NORM)      \
    X(INSTANCE_NORM)   \
    X(BATCH_NORM)      \
    X(LAYER_NORM)      \
    X(CHANNEL_LAYER_NORM) \
    X(REDUCE_MAX)      \
    X(REDUCE_MIN)      \
    X(REDUCE_SUM)      \
    X(REDUCE_MEAN)     \
    X(LOGSUMEXP)       \
    X(SOFTMAX)         \
    X(MAX_POOL)        \
    X(AVG_POOL)        \
    X(GLOBAL_AVG_POOL) \
    X(FLATTEN)         \
    X(SQUEEZE)         \
    X(UNSQUEEZE)       \
    X(VIEW)

typedef enum fg_op_kind {
#define FG_X(kind) FG_OP_##kind,
    FG_OP_KINDS(FG_X)
#undef FG_X
} fg_op_kind;
/* Not an enumerator, so that a switch naming every kind is complete (-Wswitch). */
#define FG_X(kind) +1
enum { FG_OP_KIND_COUNT = 0 FG_OP_KINDS(FG_X) };
#undef FG_X

typedef enum fg_operand_kind {
    FG_OPERAND_NONE,
    FG_OPERAND_SCALAR,
    FG_OPERAND_PARAM, /* a state_dict tensor, broadcast against the value */
    FG_OPERAND_VALUE, /* an earlier value of the chain, named with `as` */
} fg_operand_kind;

typedef enum fg_precision { FG_PRECISION_FP32, FG_PRECISION_TF32 } fg_precision;

/* The dtype of the layer's input and output in memory (the spec's `dtype`). Parameters,
 * intermediate values and statistics are float32 whatever it is. */
typedef enum fg_dtype { FG_DTYPE_FP32, FG_DTYPE_BF16, FG_DTYPE_FP16 } fg_dtype;

/* "fp32", "bf16", "fp16"; the bytes of one element. */
const char *fg_dtype_name(fg_dtype dtype);
int fg_dtype_size(fg_dtype dtype);

/* The memory layout of the layer's input and output (the spec's `layout`): NC(D)HW, or
 * channels last, N(D)HWC. Parameters and every intermediate buffer stay NC(D)HW. */
typedef enum fg_layout { FG_LAYOUT_NCHW, FG_LAYOUT_CHANNELS_LAST } fg_layout;

/* "nchw", "channels_last". */
const char *fg_layout_name(fg_layout layout);

/* A parameter tensor bound by its state_dict name. Its shape carries no batch dim. */
typedef struct fg_param {
    char name[FG_NAME_MAX];
    int rank;
    int64_t dim[FG_MAX_RANK];
    int64_t count;
    int first_line; /* where the spec first used it, for messages */
    /* A tensor of a block (docs/spec.md, "Blocks"), read per sample: element (n, i) is at
     * n * count + i. Bound at each run to the block's input, an extra input or an earlier
     * layer's output, never by name; `tensor` is its index in the block (gen/block.h). A
     * single-layer spec has none. */
    bool batched;
    int tensor;
} fg_param;

typedef struct fg_op {
    fg_op_kind kind;
    int line;                /* line in the spec, for messages */
    int alias;               /* the constructor the spec wrote, for messages: 0 the op's name, i + 1 alias i */
    char name[FG_NAME_MAX];  /* module name: prefix of its state_dict keys ("conv") */
    char as[FG_NAME_MAX];    /* name given to this op's value, "" if none */
    fg_shape in, out;        /* inferred shapes (batch symbolic) */

    /* conv */
    int spatial;             /* 2 or 3 */
    int64_t out_channels;
    int64_t groups;          /* conv groups, or group_norm groups */
    int kernel[3], stride[3], padding[3], dilation[3]; /* per spatial dim; pools too */
    bool bias;
    int weight_param, bias_param; /* indices into fg_layer_ir.params, -1 if none */

    /* binary operand */
    fg_operand_kind operand;
    double scalar;
    int operand_param;       /* index into params */
    int operand_value;       /* index of the op whose value is used */

    /* unary parameters: leaky_relu slope, softplus beta/threshold, clamp/hardtanh bounds */
    double alpha, beta, threshold;
    bool has_lo, has_hi;
    double lo, hi;
    int gelu_tanh;           /* gelu: the `approximate` choice, 1 for "tanh" */
    double dropout_p;        /* dropout: the drop probability (the identity in inference) */
    bool training;           /* dropout: training mode asked for (refused) */

    /* norms */
    double eps;
    bool affine;
    int running_stats;       /* batch_norm: the `stats` choice, 1 for "running" */
    double momentum;         /* batch_norm: PyTorch's momentum (recorded, unused: docs/spec.md) */
    bool has_momentum;       /* given; absent stands for PyTorch's momentum=None */
    int normalized_rank;     /* layer_norm: how many trailing dims are normalized */
    int64_t norm_dim;        /* layer_norm { dim = 1 }: the dim normalized, as written (1: the channels) */
    int mean_param, var_param; /* batch_norm running statistics */

    /* reductions and softmax: bit d set when dim d is reduced (never dim 0); squeeze: the
     * input dims named (those of extent 1 go), unsqueeze: the output dim inserted */
    unsigned reduce_mask;
    bool keepdim;

    /* pools */
    bool count_include_pad;

    /* flatten: the first and last dims merged (as the spec wrote them; shape inference
     * resolves negative ones) */
    int64_t start_dim, end_dim;

    /* As the spec wrote them; shape inference checks and resolves these. */
    char param_name[FG_NAME_MAX]; /* binary operand `param` */
    int param_rank;               /* its `shape`, 0 when not given */
    int64_t param_dim[FG_MAX_RANK];
    char value_name[FG_NAME_MAX]; /* binary operand `value` */
    /* binary operand `tensor` (layers of a block only): param_name names the block tensor;
     * the block loader puts its shape, the batch dim included, in tensor_rank/tensor_dim
     * before shape inference, which makes it a batched parameter (fg_param.batched) */
    bool tensor_operand;
    int tensor_rank;
    int64_t tensor_dim[FG_MAX_RANK];
    int n_dims;                   /* reduce/softmax `dim`/`dims` (may be negative) */
    int dims[FG_MAX_RANK];
    int n_list;                   /* layer_norm `normalized_shape`, view `shape` */
    int64_t list[FG_MAX_RANK];    /* view: list[0] is the batch, FG_VIEW_BATCH ("N") or -1 */
    int kernel_n, stride_n, padding_n, dilation_n; /* values given: 0 default, 1 all dims */
} fg_op;

/* view's `shape`: the entry "N" (the batch; only first) */
#define FG_VIEW_BATCH 0

typedef struct fg_layer_ir {
    char name[FG_NAME_MAX];
    char file[512];          /* spec file, for messages */
    fg_shape input;
    fg_precision precision;
    fg_dtype dtype;          /* of the input and the output */
    fg_layout layout;        /* of the input and the output */
    int strategy;            /* the spec's `strategy`: -1 auto, else an fg_strategy */
    int n_ops;
    fg_op ops[FG_MAX_OPS];
    /* The prologue: ops the spec puts before the convolution (the registry's `prologue`
     * ones: norms and elementwise ops), applied in order to the layer input where the conv
     * stages it. Each has in = out = the input's shape; they have no value numbers (value 0
     * stays the conv) and no `as`. */
    int n_pro;
    fg_op pro[FG_MAX_PROLOGUE];
    /* Statistics handed from one layer of a block to the next (gen/block.c,
     * fg_block_link_statistics; a layer loaded alone has neither). pro_stats_given: the
     * prologue's norm, pro[0], reads statistics of the input that the layer writing it gathered
     * (the runtime points the norm's accumulator at them), so no pass here gathers them.
     * exports_stats: the pass writing this layer's output also gathers, over the values it
     * stores, the statistics export_norm needs; export_norm is the reading layer's pro[0] with
     * this layer's output shape as its shapes. */
    bool pro_stats_given;
    bool exports_stats;
    fg_op export_norm;
    int n_params;
    fg_param params[FG_MAX_PARAMS];
} fg_layer_ir;

/* The constructor name and class of a kind (gen/op_registry.c); "?" for no kind. */
const char *fg_op_kind_name(fg_op_kind kind);
/* The constructor the spec wrote for op (max_pool3d for a max_pool so written): for messages. */
const char *fg_op_written_name(const fg_op *op);
fg_op_class fg_op_kind_class(fg_op_kind kind);

/* The shape kernels index value k by. A shape op (FG_CLASS_SHAPE) changes only the logical
 * shape of its dense value, and only ops that do not depend on the shape may follow one
 * (shape inference), so from the first shape op on every value is laid out as the value
 * before it: that shape; before it, the value's own. The logical shapes (ops[k].out) are
 * what users see (the output shape, `fusegen plan`) and what the CPU reference computes on. */
const fg_shape *fg_value_layout(const fg_layer_ir *ir, int k);

/* Elements per sample (every dim but the batch). */
int64_t fg_shape_sample_count(const fg_shape *s);
/* Whether two shapes are equal, the batch aside. */
bool fg_shape_same(const fg_shape *a, const fg_shape *b);
/* "[N, 16, 14, 30, 30]" into buf. */
const char *fg_shape_str(const fg_shape *s, char *buf, int cap);

/* Norm statistics: which elements share one mean/variance. Channels are split into runs of
 * `channel_group` consecutive channels (1: each channel its own statistic, C: all channels
 * together, between: group_norm); the spatial dims (d >= 2) in `mask` are reduced, the
 * others kept. The statistic of element (n, c, s...) has the key
 *   ((c / channel_group) * prod(kept spatial extents) + kept spatial coords) [+ n * keys_per_sample]
 * where n enters only when the statistic is per sample (everything but batch_norm). */
typedef struct fg_stat_layout {
    unsigned mask;           /* spatial dims reduced into one statistic */
    bool whole_channels;     /* mask holds every spatial dim: a key is a group of channels */
    bool per_position;       /* mask empty and every channel together: a key is one position's channels */
    int64_t channel_group;   /* consecutive channels sharing one statistic */
    bool over_batch;         /* the statistic spans the batch (batch_norm, batch stats) */
    int64_t keys_per_sample; /* statistics per sample (in all, when over_batch) */
    int64_t count_per_sample;/* elements per statistic and per sample of the batch */
} fg_stat_layout;

void fg_norm_stat_layout(const fg_op *op, fg_stat_layout *out);

/* A state_dict entry a layer accepts and never reads: every batch_norm's num_batches_tracked
 * (an int64 scalar) and, for one with batch statistics, its running_mean and running_var [C]
 * (the forward pass with batch statistics does not update them: docs/spec.md,
 * Normalizations). PyTorch's BatchNorm has them in its state_dict, so strict binding
 * accepts them; none is a parameter of the layer. */
typedef struct fg_ignored_state {
    char name[FG_NAME_MAX + 24]; /* room for ".num_batches_tracked" after any module name */
    int rank;                    /* 0: a scalar, 1: [dim] */
    int64_t dim;
    bool int64;                  /* stored as int64 (safetensors I64), else float32 */
} fg_ignored_state;

#define FG_MAX_IGNORED_STATE (3 * FG_MAX_OPS)

/* The layer's ignored state entries, each name once, in op order; returns their count. */
int fg_ir_ignored_state(const fg_layer_ir *ir, fg_ignored_state out[FG_MAX_IGNORED_STATE]);

/* A human-readable dump of the IR with shapes, used by `fusegen plan`. */
void fg_ir_print(const fg_layer_ir *ir, void (*emit)(void *ctx, const char *line), void *ctx);

#endif
