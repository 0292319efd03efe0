/* SPDX-License-Identifier: Apache-2.0 */
/* The op registry's table: one entry per op kind (op_registry.h says who reads what). To add
 * an op, follow docs/design.md, "Adding an op". */
#include "op_registry.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define M(member) offsetof(fg_op, member)

/* ---- fields shared by several ops ---------------------------------------------------------- */

#define SPATIAL_MAX (1 << 20)

#define MODULE_NAME(default_name, what)                                                                       \
    {.name = "name", .type = FG_FIELD_NAME, .member = M(name), .def_name = default_name,                     \
     .describe = FG_DESCRIBE_MODULE, .doc = what}
#define SPATIAL(field, member_, count, req, default_, low, what)                                              \
    {.name = field, .type = FG_FIELD_SPATIAL, .member = M(member_), .flag = M(count), .required = req,       \
     .def = default_, .lo = low, .hi = SPATIAL_MAX, .doc = what}
#define EPS                                                                                                    \
    {.name = "eps", .type = FG_FIELD_NUMBER, .member = M(eps), .def = 1e-5, .rule = FG_NUMBER_POSITIVE,      \
     .doc = "added to the variance"}
#define AFFINE(default_)                                                                                       \
    {.name = "affine", .type = FG_FIELD_BOOL, .member = M(affine), .def = default_,                          \
     .doc = "learnable <name>.weight and <name>.bias"}
#define OPERAND {.name = "operand", .type = FG_FIELD_OPERAND, .doc = "scalar, param (with shape) or value"}
#define DIMS(field, req)                                                                                       \
    {.name = field, .type = FG_FIELD_DIMS, .required = req, .lo = -FG_MAX_RANK, .hi = FG_MAX_RANK,           \
     .doc = "the dims reduced (negative: from the end)"}
#define KEEPDIM {.name = "keepdim", .type = FG_FIELD_BOOL, .member = M(keepdim), .describe = FG_DESCRIBE_BARE, \
                 .doc = "keep reduced dims with extent 1"}

static const char *const gelu_forms[] = {"none", "tanh"};
static const char *const batch_norm_stats[] = {"batch", "running"};

/* ---- cross-field checks ---------------------------------------------------------------------- */

static const char *clamp_bounds(fg_op *op, char *msg, size_t cap)
{
    if (!op->has_lo && !op->has_hi) {
        snprintf(msg, cap, "or 'max' is required: clamp { min = ..., max = ... }");
        return "min";
    }
    if (op->has_lo && op->has_hi && op->lo > op->hi) {
        snprintf(msg, cap, "must not be below min (%g < %g)", op->hi, op->lo);
        return "max";
    }
    return NULL;
}

/* hardtanh always has both bounds (its defaults -1 and 1) */
static const char *hardtanh_bounds(fg_op *op, char *msg, size_t cap)
{
    op->has_lo = op->has_hi = true;
    return clamp_bounds(op, msg, cap);
}

/* PyTorch's pools: the stride defaults to the kernel */
static const char *pool_stride(fg_op *op, char *msg, size_t cap)
{
    (void)msg;
    (void)cap;
    if (op->stride_n == 0)
        memcpy(op->stride, op->kernel, sizeof op->stride);
    return NULL;
}

static const char *dropout_inference(fg_op *op, char *msg, size_t cap)
{
    if (op->dropout_p < 0 || op->dropout_p > 1) {
        snprintf(msg, cap, "must be between 0 and 1 (got %g)", op->dropout_p);
        return "p";
    }
    if (op->training) {
        snprintf(msg, cap, "asks for training-mode dropout (random zeros); fusegen generates inference "
                           "kernels, where dropout is the identity: leave training out or set it to false");
        return "training";
    }
    return NULL;
}

static const char *batch_norm_momentum(fg_op *op, char *msg, size_t cap)
{
    if (op->has_momentum && (op->momentum < 0 || op->momentum > 1)) {
        snprintf(msg, cap, "must be between 0 and 1 (got %g), as PyTorch's BatchNorm momentum; leave it out for "
                           "momentum=None (a cumulative average)",
                 op->momentum);
        return "momentum";
    }
    return NULL;
}

static bool running_statistics(const fg_op *op)
{
    return op->running_stats == 1;
}

/* ---- reductions: inline loops and accumulators -------------------------------------------- */

static const fg_reduce_def reduce_max = {
    .init = "float {acc} = __int_as_float(0xff800000);",
    .step = "{acc} = fg_maximum({acc}, {x});",
    .final = "{acc}",
    .accums = {FG_ACCUM_MAX},
    .n_accums = 1,
    .read = "fg_unordered({a0}[{key}])",
};

static const fg_reduce_def reduce_min = {
    .init = "float {acc} = __int_as_float(0x7f800000);",
    .step = "{acc} = fg_minimum({acc}, {x});",
    .final = "{acc}",
    .accums = {FG_ACCUM_MIN},
    .n_accums = 1,
    .read = "fg_unordered({a0}[{key}])",
};

static const fg_reduce_def reduce_sum = {
    .init = "float {acc} = 0.0f;",
    .step = "{acc} = {acc} + {x};",
    .final = "{acc}",
    .accums = {FG_ACCUM_SUM},
    .n_accums = 1,
    .read = "(float){a0}[{key}]",
};

static const fg_reduce_def reduce_mean = {
    .init = "float {acc} = 0.0f;",
    .step = "{acc} = {acc} + {x};",
    .final = "({acc} / {count})",
    .accums = {FG_ACCUM_SUM},
    .n_accums = 1,
    .read = "(float)({a0}[{key}] / {count})",
};

/* log(sum(exp(x))) in one pass: a running max m and the sum s of exp(x - m), rescaled when
 * m grows; across blocks the max first, then the sum of exp(x - max) */
static const fg_reduce_def reduce_logsumexp = {
    .init = "float {acc}_m = __int_as_float(0xff800000), {acc}_s = 0.0f;",
    .step = "if ({x} > {acc}_m) {\n"
            "    {acc}_s = {acc}_s * expf({acc}_m - {x}) + 1.0f;\n"
            "    {acc}_m = {x};\n"
            "} else if ({x} > __int_as_float(0xff800000)) {\n"
            "    {acc}_s += expf({x} - {acc}_m);\n"
            "}",
    .final = "({acc}_s > 0.0f ? {acc}_m + logf({acc}_s) : {acc}_m)",
    .accums = {FG_ACCUM_MAX, FG_ACCUM_SUMEXP},
    .n_accums = 2,
    .read = "fg_unordered({a0}[{key}]) + logf((float){a1}[{key}])",
};

/* softmax: its statistic (max, 1 / sum of exp(x - max)) is always gathered and finalized */
static const fg_reduce_def softmax_stats = {
    .accums = {FG_ACCUM_MAX, FG_ACCUM_SUMEXP},
    .n_accums = 2,
};

static const fg_reduce_def norm_stats = {
    .accums = {FG_ACCUM_MOMENTS},
    .n_accums = 1,
};

static const fg_reduce_def pool_max = {
    .init = "float {acc} = __int_as_float(0xff800000);",
    .step = "{acc} = fg_maximum({acc}, {x});",
    .final = "{acc}",
};

static const fg_reduce_def pool_avg = {
    .init = "float {acc} = 0.0f;",
    .step = "{acc} += {x};",
    .final = "{acc} / {count}",
};

/* ---- the accumulators (monoids) -------------------------------------------------------------- */

/* floats are accumulated as order-preserving ints: i >= 0 ? i : i ^ 0x7fffffff */
#define ORDERED_NEG_INF (0xff800000u ^ 0x7fffffffu)
#define ORDERED_POS_INF 0x7f800000u

#define SUM_MERGE "double ms = (double){s}, mq = (double){q};\nfg_merge_lanes(mk, ms, mq);"

const fg_accum_def fg_accum_defs[FG_ACCUM_KIND_COUNT] = {
    [FG_ACCUM_MOMENTS] = {
        .name = "moments",
        .describe = "mean+variance (fp64 sums)",
        .bytes_per_key = 16,
        .clear_word = 0,
        .ctype = "double",
        .identity = "0.0f",
        .combine = "{s} += {x};\n{q} += {x} * {x};",
        .flush = "atomicAdd({acc} + 2 * {k}, (double){s}); atomicAdd({acc} + 2 * {k} + 1, (double){q});",
        .merge = SUM_MERGE,
        .feed = "fg_feed2({acc}, {k}, (double){s}, (double){q});",
        .shifted = true,
        /* the biased variance (PyTorch normalizes with it) from fp64 sums */
        .finalize = "const double mean = {acc}[2 * key] / cnt;\n"
                    "double var = {acc}[2 * key + 1] / cnt - mean * mean;\n"
                    "if (var < 0.0) var = 0.0;\n"
                    "{stats}[key].a = (float)mean;\n"
                    "{stats}[key].b = (float)(1.0 / sqrt(var + {eps}));",
    },
    [FG_ACCUM_SUM] = {
        .name = "sum",
        .describe = "sum (fp64)",
        .bytes_per_key = 8,
        .clear_word = 0,
        .ctype = "double",
        .identity = "0.0f",
        .combine = "{s} += {x};",
        .flush = "atomicAdd({acc} + {k}, (double){s});",
        .merge = SUM_MERGE,
        .feed = "fg_feed1({acc}, {k}, (double){s});",
    },
    [FG_ACCUM_MAX] = {
        .name = "max",
        .describe = "max",
        .bytes_per_key = 4,
        .clear_word = ORDERED_NEG_INF,
        .ctype = "int",
        .identity = "__int_as_float(0xff800000)",
        .combine = "{s} = fg_maximum({s}, {x});",
        .flush = "atomicMax({acc} + {k}, fg_ordered({s}));",
        .merge = "float ms = {s};\nfg_merge_lanes_extreme(mk, ms, true);",
        .feed = "fg_feed_max((int *){acc}, {k}, {s});",
        .extreme = true,
    },
    [FG_ACCUM_MIN] = {
        .name = "min",
        .describe = "min",
        .bytes_per_key = 4,
        .clear_word = ORDERED_POS_INF,
        .ctype = "int",
        .identity = "__int_as_float(0x7f800000)",
        .combine = "{s} = fg_minimum({s}, {x});",
        .flush = "atomicMin({acc} + {k}, fg_ordered({s}));",
        .merge = "float ms = {s};\nfg_merge_lanes_extreme(mk, ms, false);",
        .feed = "fg_feed_min((int *){acc}, {k}, {s});",
        .extreme = true,
    },
    [FG_ACCUM_SUMEXP] = {
        .name = "sumexp",
        .describe = "sum of exp(x - max) (fp64)",
        .bytes_per_key = 8,
        .clear_word = 0,
        .ctype = "double",
        .identity = "0.0f",
        .combine = "{s} += {x};",
        .contribution = "expf({v} - fg_unordered({max}[{key}]))",
        .flush = "atomicAdd({acc} + {k}, (double){s});",
        .merge = SUM_MERGE,
        .feed = "fg_feed1({acc}, {k}, (double){s});",
        .needs_max = true,
        /* softmax's statistic: the max and 1 / sum */
        .finalize = "{stats}[key].a = fg_unordered({max}[key]);\n"
                    "{stats}[key].b = (float)(1.0 / {acc}[key]);",
    },
};
static_assert(FG_ACCUM_KIND_COUNT == 5, "a new accumulator kind: give it an entry in fg_accum_defs");

/* ---- the ops ------------------------------------------------------------------------------------ */

const fg_op_def fg_op_defs[FG_OP_KIND_COUNT] = {
    /* ---- the anchor convolution ---- */
    [FG_OP_CONV2D] = {
        .name = "conv2d",
        .cls = FG_CLASS_CONV,
        .spatial = 2,
        .fields = {
            MODULE_NAME("conv", "module name: the parameters are <name>.weight, <name>.bias"),
            {.name = "out_channels", .type = FG_FIELD_INT, .member = M(out_channels), .required = true, .lo = 1,
             .hi = SPATIAL_MAX, .doc = "output channels"},
            SPATIAL("kernel", kernel, kernel_n, true, 1, 1, "kernel extent"),
            SPATIAL("stride", stride, stride_n, false, 1, 1, "stride"),
            SPATIAL("padding", padding, padding_n, false, 0, 0, "zero padding on both sides"),
            SPATIAL("dilation", dilation, dilation_n, false, 1, 1, "dilation"),
            {.name = "groups", .type = FG_FIELD_INT, .member = M(groups), .def = 1, .lo = 1, .hi = SPATIAL_MAX,
             .doc = "must divide the input channels and out_channels"},
            {.name = "bias", .type = FG_FIELD_BOOL, .member = M(bias), .def = 1, .doc = "add <name>.bias"},
        },
        .doc = "2D convolution (PyTorch Conv2d); the layer's anchor, after its prologue if any",
        .examples = {"conv2d { out_channels = 8, kernel = 3, padding = 1 }", "conv2d { out_channels = 6, kernel = { 3, 5 }, stride = 2, dilation = { 1, 2 }, groups = 2, bias = false }"},
    },
    [FG_OP_CONV3D] = {
        .name = "conv3d",
        .cls = FG_CLASS_CONV,
        .spatial = 3,
        .fields = {
            MODULE_NAME("conv", "module name: the parameters are <name>.weight, <name>.bias"),
            {.name = "out_channels", .type = FG_FIELD_INT, .member = M(out_channels), .required = true, .lo = 1,
             .hi = SPATIAL_MAX, .doc = "output channels"},
            SPATIAL("kernel", kernel, kernel_n, true, 1, 1, "kernel extent"),
            SPATIAL("stride", stride, stride_n, false, 1, 1, "stride"),
            SPATIAL("padding", padding, padding_n, false, 0, 0, "zero padding on both sides"),
            SPATIAL("dilation", dilation, dilation_n, false, 1, 1, "dilation"),
            {.name = "groups", .type = FG_FIELD_INT, .member = M(groups), .def = 1, .lo = 1, .hi = SPATIAL_MAX,
             .doc = "must divide the input channels and out_channels"},
            {.name = "bias", .type = FG_FIELD_BOOL, .member = M(bias), .def = 1, .doc = "add <name>.bias"},
        },
        .doc = "3D convolution (PyTorch Conv3d); the layer's anchor, after its prologue if any",
        .examples = {"conv3d { out_channels = 8, kernel = 3, padding = 1 }", "conv3d { out_channels = 6, kernel = { 1, 3, 3 }, stride = { 1, 2, 2 }, groups = 2 }"},
    },

    /* ---- elementwise, one operand ---- */
    [FG_OP_RELU] = {.name = "relu", .cls = FG_CLASS_UNARY, .prologue = true, .cuda = {{.text = "({x} < 0.0f ? 0.0f : {x})"}},
                    .doc = "max(x, 0)"},
    [FG_OP_LEAKY_RELU] = {
        .name = "leaky_relu",
        .cls = FG_CLASS_UNARY, .prologue = true,
        .fields = {{.name = "negative_slope", .type = FG_FIELD_NUMBER, .member = M(alpha), .def = 0.01,
                    .doc = "slope below zero"}},
        .cuda = {{.text = "({x} > 0.0f ? {x} : {negative_slope} * {x})"}},
        .doc = "x > 0 ? x : negative_slope·x",
        .examples = {"leaky_relu {}", "leaky_relu { negative_slope = 0.2 }"},
    },
    [FG_OP_GELU] = {
        .name = "gelu",
        .cls = FG_CLASS_UNARY, .prologue = true,
        .fields = {{.name = "approximate", .type = FG_FIELD_CHOICE, .member = M(gelu_tanh), .choices = gelu_forms,
                    .n_choices = 2, .doc = "\"none\" (erf) or \"tanh\""}},
        .cuda = {{.guard = "approximate=tanh",
                  .text = "(0.5f * {x} * (1.0f + tanhf(0.797884561f * ({x} + 0.044715f * {x} * {x} * {x}))))"},
                 {.guard = "approximate=none", .text = "(0.5f * {x} * (1.0f + erff({x} * 0.707106781f)))",
                  .fast = "fg_gelu_fast({x})"}},
        .doc = "\"none\": 0.5·x·(1 + erf(x/√2)); \"tanh\": 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))",
        .examples = {"gelu {}", "gelu { approximate = \"tanh\" }"},
    },
    [FG_OP_SIGMOID] = {.name = "sigmoid", .cls = FG_CLASS_UNARY, .prologue = true, .cuda = {{.text = "fg_sigmoid({x})"}},
                       .doc = "1 / (1 + e^−x)"},
    [FG_OP_TANH] = {.name = "tanh", .cls = FG_CLASS_UNARY, .prologue = true, .cuda = {{.text = "tanhf({x})"}}, .doc = "tanh(x)"},
    [FG_OP_SOFTPLUS] = {
        .name = "softplus",
        .cls = FG_CLASS_UNARY, .prologue = true,
        .fields = {{.name = "beta", .type = FG_FIELD_NUMBER, .member = M(beta), .def = 1.0, .rule = FG_NUMBER_NONZERO,
                    .doc = "scale, not 0"},
                   {.name = "threshold", .type = FG_FIELD_NUMBER, .member = M(threshold), .def = 20.0,
                    .doc = "linear above it"}},
        .cuda = {{.text = "({beta} * {x} > {threshold} ? {x} : log1pf(expf({beta} * {x})) / {beta})"}},
        .doc = "beta·x > threshold ? x : log1p(e^(beta·x)) / beta",
        .examples = {"softplus {}", "softplus { beta = 2, threshold = 1 }"},
    },
    [FG_OP_MISH] = {.name = "mish", .cls = FG_CLASS_UNARY, .prologue = true,
                    .cuda = {{.text = "({x} * tanhf({x} > 20.0f ? {x} : log1pf(expf({x}))))"}},
                    .doc = "x·tanh(sp), sp = x > 20 ? x : log1p(e^x)"},
    [FG_OP_SILU] = {.name = "silu", .aliases = {{.name = "swish"}}, .cls = FG_CLASS_UNARY, .prologue = true,
                    .cuda = {{.text = "({x} * fg_sigmoid({x}))"}}, .doc = "x / (1 + e^−x)"},
    [FG_OP_HARDSWISH] = {.name = "hardswish", .cls = FG_CLASS_UNARY, .prologue = true,
                         .cuda = {{.text = "({x} * fminf(fmaxf({x} + 3.0f, 0.0f), 6.0f) / 6.0f)"}},
                         .doc = "x·min(max(x + 3, 0), 6) / 6"},
    [FG_OP_HARDSIGMOID] = {.name = "hardsigmoid", .cls = FG_CLASS_UNARY, .prologue = true,
                           .cuda = {{.text = "(fminf(fmaxf({x} + 3.0f, 0.0f), 6.0f) / 6.0f)"}},
                           .doc = "min(max(x + 3, 0), 6) / 6"},
    /* comparisons, not fminf/fmaxf, so that NaN passes through as in PyTorch */
    [FG_OP_HARDTANH] = {
        .name = "hardtanh",
        .cls = FG_CLASS_UNARY, .prologue = true,
        .fields = {{.name = "min", .type = FG_FIELD_NUMBER, .member = M(lo), .def = -1.0, .doc = "lower bound"},
                   {.name = "max", .type = FG_FIELD_NUMBER, .member = M(hi), .def = 1.0, .doc = "upper bound"}},
        .check = hardtanh_bounds,
        .cuda = {{.text = "({x} < {min} ? {min} : {x})"}, {.text = "({x} > {max} ? {max} : {x})"}},
        .doc = "x < min ? min : x > max ? max : x",
        .examples = {"hardtanh {}", "hardtanh { min = -0.25, max = 0.5 }"},
    },
    [FG_OP_CLAMP] = {
        .name = "clamp",
        .cls = FG_CLASS_UNARY, .prologue = true,
        .fields = {{.name = "min", .type = FG_FIELD_OPT_NUMBER, .member = M(lo), .flag = M(has_lo),
                    .describe = FG_DESCRIBE_GIVEN, .doc = "lower bound (optional)"},
                   {.name = "max", .type = FG_FIELD_OPT_NUMBER, .member = M(hi), .flag = M(has_hi),
                    .describe = FG_DESCRIBE_GIVEN, .doc = "upper bound (optional; at least one of the two)"}},
        .check = clamp_bounds,
        .cuda = {{.guard = "min?", .text = "({x} < {min} ? {min} : {x})"},
                 {.guard = "max?", .text = "({x} > {max} ? {max} : {x})"}},
        .doc = "as hardtanh, with only the bounds given",
        .examples = {"clamp { min = -0.5 }", "clamp { max = 0.25 }", "clamp { min = 0.1, max = 0.6 }"},
    },
    [FG_OP_EXP] = {.name = "exp", .cls = FG_CLASS_UNARY, .prologue = true, .cuda = {{.text = "expf({x})"}}, .doc = "e^x"},
    [FG_OP_LOG] = {.name = "log", .cls = FG_CLASS_UNARY, .prologue = true, .cuda = {{.text = "logf({x})"}}, .doc = "ln x", .examples = {"abs {}, log {}"}},
    [FG_OP_ABS] = {.name = "abs", .cls = FG_CLASS_UNARY, .prologue = true, .cuda = {{.text = "fabsf({x})"}}, .doc = "|x|"},
    [FG_OP_NEG] = {.name = "neg", .cls = FG_CLASS_UNARY, .prologue = true, .cuda = {{.text = "(-{x})"}}, .doc = "−x"},
    [FG_OP_SOFTSIGN] = {.name = "softsign", .cls = FG_CLASS_UNARY, .prologue = true, .cuda = {{.text = "({x} / (1.0f + fabsf({x})))"}},
                        .doc = "x / (1 + |x|)"},
    /* inference only: the identity (a spec that asks for training-mode dropout is refused) */
    [FG_OP_DROPOUT] = {
        .name = "dropout",
        .aliases = {{.name = "dropout2d"}, {.name = "dropout3d"}},
        .cls = FG_CLASS_UNARY, .prologue = true,
        .fields = {{.name = "p", .type = FG_FIELD_NUMBER, .member = M(dropout_p), .def = 0.5,
                    .doc = "the drop probability, 0..1 (unused in inference)"},
                   {.name = "training", .type = FG_FIELD_BOOL, .member = M(training),
                    .describe = FG_DESCRIBE_BARE, .doc = "must be false: fusegen runs inference"}},
        .check = dropout_inference,
        .cuda = {{.text = "{x}"}},
        .doc = "x (the identity: dropout in inference, nn.Dropout in eval mode)",
    },

    /* ---- elementwise, two operands ---- */
    [FG_OP_ADD] = {.name = "add", .cls = FG_CLASS_BINARY, .prologue = true, .fields = {OPERAND}, .cuda = {{.text = "({a} + {b})"}},
                   .doc = "x + operand", .examples = {"add { scalar = 0.5 }", "add { param = \"p\" }", "add { value = \"c\" }"}},
    [FG_OP_SUB] = {.name = "sub", .cls = FG_CLASS_BINARY, .prologue = true, .fields = {OPERAND}, .cuda = {{.text = "({a} - {b})"}},
                   .doc = "x − operand", .examples = {"sub { scalar = 0.5 }", "sub { param = \"p\", shape = { 34 } }", "sub { value = \"c\" }"}},
    [FG_OP_MUL] = {.name = "mul", .cls = FG_CLASS_BINARY, .prologue = true, .fields = {OPERAND}, .cuda = {{.text = "({a} * {b})"}},
                   .doc = "x · operand", .examples = {"mul { scalar = -1.5 }", "mul { param = \"p\" }", "mul { value = \"c\" }"}},
    [FG_OP_DIV] = {.name = "div", .cls = FG_CLASS_BINARY, .prologue = true, .fields = {OPERAND}, .cuda = {{.text = "({a} / {b})"}},
                   .doc = "x / operand", .examples = {"div { scalar = 3 }", "div { param = \"p\", shape = { 8, 1, 34 } }", "abs {}, add { scalar = 1, as = \"d\" }, mul { scalar = 3 }, div { value = \"d\" }"}},
    [FG_OP_MINIMUM] = {.name = "min", .cls = FG_CLASS_BINARY, .prologue = true, .fields = {OPERAND},
                       .cuda = {{.text = "fg_minimum({a}, {b})"}},
                       .doc = "the smaller of x and the operand (NaN if either is; torch.minimum)", .examples = {"min { scalar = 0.1 }", "min { param = \"p\" }", "relu {}, min { value = \"c\" }"}},
    [FG_OP_MAXIMUM] = {.name = "max", .cls = FG_CLASS_BINARY, .prologue = true, .fields = {OPERAND},
                       .cuda = {{.text = "fg_maximum({a}, {b})"}},
                       .doc = "the larger of x and the operand (NaN if either is; torch.maximum)", .examples = {"max { scalar = 0.1 }", "max { param = \"p\" }", "relu {}, max { value = \"c\" }"}},

    /* ---- normalizations ---- */
    [FG_OP_GROUP_NORM] = {
        .name = "group_norm",
        .cls = FG_CLASS_NORM, .prologue = true,
        .fields = {MODULE_NAME(NULL, "module name, prefix of the parameters"), EPS, AFFINE(1),
                   {.name = "groups", .type = FG_FIELD_INT, .member = M(groups), .required = true, .lo = 1,
                    .hi = SPATIAL_MAX, .doc = "must divide the channels"}},
        .norm = {.channels = FG_NORM_GROUPS},
        .stats = &norm_stats,
        .doc = "per sample, over C / groups consecutive channels and all spatial dims",
        .examples = {"group_norm { groups = 2 }", "group_norm { groups = 8, affine = false, eps = 1e-3 }"},
    },
    [FG_OP_INSTANCE_NORM] = {
        .name = "instance_norm",
        .cls = FG_CLASS_NORM, .prologue = true,
        .fields = {MODULE_NAME(NULL, "module name, prefix of the parameters"), EPS, AFFINE(0)},
        .norm = {.channels = FG_NORM_EACH},
        .stats = &norm_stats,
        .doc = "per sample and channel, over all spatial dims",
        .examples = {"instance_norm {}", "instance_norm { affine = true }"},
    },
    [FG_OP_BATCH_NORM] = {
        .name = "batch_norm",
        .cls = FG_CLASS_NORM, .prologue = true,
        .fields = {MODULE_NAME(NULL, "module name, prefix of the parameters"), EPS, AFFINE(1),
                   {.name = "stats", .type = FG_FIELD_CHOICE, .member = M(running_stats), .choices = batch_norm_stats,
                    .n_choices = 2,
                    .doc = "\"batch\": batch statistics (training mode); \"running\": <name>.running_mean/var"},
                   {.name = "momentum", .type = FG_FIELD_OPT_NUMBER, .member = M(momentum), .flag = M(has_momentum),
                    .describe = FG_DESCRIBE_GIVEN,
                    .doc = "PyTorch's momentum, 0..1 (absent: None); recorded, the running statistics are not updated"}},
        .check = batch_norm_momentum,
        .norm = {.channels = FG_NORM_EACH, .over_batch = true},
        .stats = &norm_stats,
        .stats_unless = running_statistics,
        .doc = "per channel, over the batch and all spatial dims (or the running statistics)",
        .examples = {"batch_norm { momentum = 0.1 }", "batch_norm { stats = \"running\" }",
                     "relu {}, batch_norm { stats = \"running\", affine = false }"},
    },
    [FG_OP_LAYER_NORM] = {
        .name = "layer_norm",
        .cls = FG_CLASS_NORM, .prologue = true,
        .fields = {MODULE_NAME(NULL, "module name, prefix of the parameters"), EPS, AFFINE(1),
                   {.name = "normalized_shape", .type = FG_FIELD_INT_LIST, .member = M(list), .flag = M(n_list),
                    .required = true, .lo = 1, .hi = INT32_MAX,
                    .doc = "the trailing dims to normalize, as in PyTorch"}},
        .norm = {.channels = FG_NORM_TRAILING},
        .stats = &norm_stats,
        .doc = "per sample, over the trailing dims in normalized_shape",
        .examples = {"layer_norm { normalized_shape = { 34, 34 } }", "layer_norm { normalized_shape = { 8, 34, 34 }, affine = false }"},
    },

    /* layer_norm { dim = 1 }: PyTorch's LayerNorm(C) on x.permute(0, 2, 3, 1) (ConvNeXt's
     * LayerNorm, timm's LayerNorm2d): the channels of each position, weight and bias [C] */
    [FG_OP_CHANNEL_LAYER_NORM] = {
        .name = "layer_norm",
        .cls = FG_CLASS_NORM, .prologue = true,
        .fields = {MODULE_NAME(NULL, "module name, prefix of the parameters"), EPS, AFFINE(1),
                   {.name = "dim", .type = FG_FIELD_INT, .member = M(norm_dim), .required = true,
                    .lo = -FG_MAX_RANK, .hi = FG_MAX_RANK,
                    .doc = "1 (the channels; -rank + 1 from the end): each position over its channels"}},
        .selectors = {"dim"},
        .conflict_hint = "dim: layer_norm { dim = 1 } normalizes the channels, normalized_shape the trailing dims",
        .norm = {.channels = FG_NORM_ACROSS},
        .stats = &norm_stats,
        .doc = "with dim = 1: per sample and position, over the channels (ConvNeXt's LayerNorm; weight, bias [C])",
        .examples = {"layer_norm { dim = 1 }", "layer_norm { dim = 1, affine = false, eps = 1e-6 }"},
    },

    /* ---- reductions and softmax ---- */
    [FG_OP_REDUCE_MAX] = {
        .name = "max",
        .cls = FG_CLASS_REDUCE,
        .fields = {DIMS("dims", true), KEEPDIM},
        .selectors = {"dim", "dims", "keepdim"},
        .conflict_hint = "dim/dims: max { dim = ... } reduces, max { scalar = ... } is elementwise",
        .reduce = &reduce_max,
        .doc = "the largest element (NaN if any is)",
        .examples = {"max { dim = 1 }", "max { dims = { 2, 3 }, keepdim = true }"},
    },
    [FG_OP_REDUCE_MIN] = {
        .name = "min",
        .cls = FG_CLASS_REDUCE,
        .fields = {DIMS("dims", true), KEEPDIM},
        .selectors = {"dim", "dims", "keepdim"},
        .conflict_hint = "dim/dims: min { dim = ... } reduces, min { scalar = ... } is elementwise",
        .reduce = &reduce_min,
        .doc = "the smallest element (NaN if any is)",
        .examples = {"min { dim = 1, keepdim = true }", "min { dims = { 2, 3 } }"},
    },
    [FG_OP_REDUCE_SUM] = {.name = "sum", .cls = FG_CLASS_REDUCE, .fields = {DIMS("dims", true), KEEPDIM},
                          .reduce = &reduce_sum, .doc = "Σ x", .examples = {"sum { dim = 3 }", "sum { dims = { 2, 3 } }"}},
    [FG_OP_REDUCE_MEAN] = {.name = "mean", .cls = FG_CLASS_REDUCE, .fields = {DIMS("dims", true), KEEPDIM},
                           .reduce = &reduce_mean, .doc = "Σ x / count", .examples = {"mean { dim = 1 }", "mean { dims = { 1, 2, 3 } }"}},
    [FG_OP_LOGSUMEXP] = {.name = "logsumexp", .cls = FG_CLASS_REDUCE, .fields = {DIMS("dims", true), KEEPDIM},
                         .reduce = &reduce_logsumexp, .doc = "m + log Σ e^(x − m), m the max", .examples = {"logsumexp { dim = 1, keepdim = true }", "logsumexp { dims = { 2, 3 } }"}},
    [FG_OP_SOFTMAX] = {.name = "softmax", .cls = FG_CLASS_SOFTMAX, .fields = {DIMS("dim", true)},
                       .stats = &softmax_stats, .doc = "e^(x − m) / Σ e^(x − m) over one dim", .examples = {"softmax { dim = 1 }", "softmax { dim = 3 }"}},

    /* ---- pooling ---- */
    [FG_OP_MAX_POOL] = {
        .name = "max_pool",
        .aliases = {{"max_pool2d", 2}, {"max_pool3d", 3}},
        .cls = FG_CLASS_POOL,
        .fields = {SPATIAL("kernel", kernel, kernel_n, true, 1, 1, "window extent"),
                   SPATIAL("stride", stride, stride_n, false, 0, 1, "step (default: the kernel)"),
                   {.name = "padding", .type = FG_FIELD_SPATIAL, .member = M(padding), .flag = M(padding_n),
                    .lo = 0, .hi = SPATIAL_MAX, .describe = FG_DESCRIBE_NONE,
                    .doc = "implicit -inf padding, at most half the kernel"}},
        .check = pool_stride,
        .reduce = &pool_max,
        .doc = "the largest element of each window",
        .examples = {"max_pool { kernel = 2 }", "max_pool2d { kernel = 3, stride = 2, padding = 1 }"},
    },
    [FG_OP_AVG_POOL] = {
        .name = "avg_pool",
        .aliases = {{"avg_pool2d", 2}, {"avg_pool3d", 3}},
        .cls = FG_CLASS_POOL,
        .fields = {SPATIAL("kernel", kernel, kernel_n, true, 1, 1, "window extent"),
                   SPATIAL("stride", stride, stride_n, false, 0, 1, "step (default: the kernel)"),
                   {.name = "padding", .type = FG_FIELD_SPATIAL, .member = M(padding), .flag = M(padding_n),
                    .lo = 0, .hi = SPATIAL_MAX, .describe = FG_DESCRIBE_NONE,
                    .doc = "implicit zero padding, at most half the kernel"},
                   {.name = "count_include_pad", .type = FG_FIELD_BOOL, .member = M(count_include_pad), .def = 1,
                    .describe = FG_DESCRIBE_NONE, .doc = "divide by the whole window, padding included"}},
        .check = pool_stride,
        .reduce = &pool_avg,
        .doc = "the mean of each window",
        .examples = {"avg_pool { kernel = 2 }", "avg_pool2d { kernel = 3, stride = 2, padding = 1, count_include_pad = false }"},
    },
    [FG_OP_GLOBAL_AVG_POOL] = {.name = "global_avg_pool", .cls = FG_CLASS_REDUCE, .reduce = &reduce_mean,
                               .doc = "the mean over all spatial dims, kept as extent 1 (adaptive_avg_pool to 1)"},

    /* ---- shape ops ---- */
    /* a new shape for the same dense elements: no kernel code (gen/shape_infer.c says what
     * may follow one) */
    [FG_OP_FLATTEN] = {
        .name = "flatten",
        .cls = FG_CLASS_SHAPE,
        .fields = {{.name = "start_dim", .type = FG_FIELD_INT, .member = M(start_dim), .def = 1, .lo = -FG_MAX_RANK,
                    .hi = FG_MAX_RANK - 1,
                    .doc = "the first dim merged (negative: from the end); 1 as in nn.Flatten, never 0 (the batch)"},
                   {.name = "end_dim", .type = FG_FIELD_INT, .member = M(end_dim), .def = -1, .lo = -FG_MAX_RANK,
                    .hi = FG_MAX_RANK - 1, .doc = "the last dim merged"}},
        .doc = "dims start_dim..end_dim merged into one (nn.Flatten, torch.flatten(x, 1))",
        .examples = {"flatten {}", "flatten { start_dim = 2 }, relu {}",
                     "sum { dim = 1, keepdim = true }, flatten { start_dim = -2, end_dim = -1 }, mul { scalar = 0.5 }"},
    },
    [FG_OP_SQUEEZE] = {
        .name = "squeeze",
        .cls = FG_CLASS_SHAPE,
        .fields = {{.name = "dims", .type = FG_FIELD_DIMS, .required = true, .lo = -FG_MAX_RANK, .hi = FG_MAX_RANK,
                    .doc = "the dims to remove (negative: from the end); never the batch"}},
        .doc = "the named dims of extent 1 removed; a named dim of another extent stays, as in PyTorch",
        .examples = {"squeeze { dim = 2 }", "max { dim = 1, keepdim = true }, squeeze { dim = 1 }, tanh {}",
                     "mean { dims = { 2, 3 }, keepdim = true }, squeeze { dims = { -1, -2 } }"},
    },
    [FG_OP_UNSQUEEZE] = {
        .name = "unsqueeze",
        .cls = FG_CLASS_SHAPE,
        .fields = {{.name = "dim", .type = FG_FIELD_DIMS, .required = true, .lo = -FG_MAX_RANK, .hi = FG_MAX_RANK,
                    .doc = "where the new dim goes (negative: from the end); not before the batch"}},
        .doc = "a dim of extent 1 inserted at dim",
        .examples = {"unsqueeze { dim = 1 }", "unsqueeze { dim = -1 }, sigmoid {}",
                     "max_pool { kernel = 2 }, unsqueeze { dim = 2, as = \"u\" }, exp {}, sub { value = \"u\" }"},
    },
    [FG_OP_VIEW] = {
        .name = "view",
        .aliases = {{.name = "reshape"}},
        .cls = FG_CLASS_SHAPE,
        .fields = {{.name = "shape", .type = FG_FIELD_SHAPE, .member = M(list), .flag = M(n_list), .required = true,
                    .doc = "\"N\" (or -1 for the batch) first, then the extents; one of them may be -1"}},
        .doc = "the same elements in the given shape (x.view, x.reshape: fusegen's values are contiguous)",
        .examples = {"view { shape = { \"N\", -1 } }",
                     "reshape { shape = { -1, 16, 17, 34 }, as = \"r\" }, exp {}, add { value = \"r\" }",
                     "group_norm { groups = 2 }, view { shape = { \"N\", 2, 4, 1156 } }, flatten { start_dim = 2 }, hardswish {}"},
    },
};
static_assert(FG_OP_KIND_COUNT == 44, "a new op kind: give it an entry in fg_op_defs (docs/design.md, Adding an op)");

const fg_op_def *fg_op_def_of(fg_op_kind kind)
{
    return (unsigned)kind < FG_OP_KIND_COUNT ? &fg_op_defs[kind] : NULL;
}

const char *fg_op_kind_name(fg_op_kind kind)
{
    return (unsigned)kind < FG_OP_KIND_COUNT ? fg_op_defs[kind].name : "?";
}

const char *fg_op_written_name(const fg_op *op)
{
    const fg_op_def *d = fg_op_def_of(op->kind);
    if (d && op->alias >= 1 && op->alias <= 2 && d->aliases[op->alias - 1].name)
        return d->aliases[op->alias - 1].name;
    return fg_op_kind_name(op->kind);
}

fg_op_class fg_op_kind_class(fg_op_kind kind)
{
    return fg_op_defs[kind].cls;
}

const fg_reduce_def *fg_op_stats(const fg_op *op)
{
    const fg_op_def *d = &fg_op_defs[op->kind];
    if (!d->stats || (d->stats_unless && d->stats_unless(op)))
        return NULL;
    return d->stats;
}

const fg_field *fg_op_field(fg_op_kind kind, const char *name)
{
    const fg_op_def *d = fg_op_def_of(kind);
    for (int i = 0; d && i < FG_MAX_FIELDS && d->fields[i].name; i++)
        if (strcmp(d->fields[i].name, name) == 0)
            return &d->fields[i];
    return NULL;
}

/* Whether a snippet step's guard holds for op (NULL: always), as templates/ops.lua's guard_holds */
static bool snippet_guard_holds(const fg_op *op, const char *guard)
{
    if (!guard)
        return true;
    const char *eq = strchr(guard, '=');
    char name[32];
    size_t len = eq ? (size_t)(eq - guard) : strcspn(guard, "?");
    if (len >= sizeof name)
        return false;
    memcpy(name, guard, len);
    name[len] = '\0';
    const fg_field *f = fg_op_field(op->kind, name);
    if (!f)
        return false;
    const char *base = (const char *)op;
    if (!eq)
        return f->type == FG_FIELD_OPT_NUMBER && *(const bool *)(base + f->flag);
    return f->type == FG_FIELD_CHOICE && strcmp(f->choices[*(const int *)(base + f->member)], eq + 1) == 0;
}

bool fg_op_has_fast_step(const fg_op *op)
{
    const fg_op_def *d = fg_op_def_of(op->kind);
    for (int i = 0; d && i < FG_MAX_SNIPPET_STEPS && d->cuda[i].text; i++)
        if (d->cuda[i].fast && snippet_guard_holds(op, d->cuda[i].guard))
            return true;
    return false;
}

/* "layer", "block", then every constructor once (kinds sharing one are listed once) with its aliases. */
enum { MAX_CONSTRUCTORS = 2 + FG_OP_KIND_COUNT * 3 };
static const char *constructors[MAX_CONSTRUCTORS];
static int n_constructors;

static void add_constructor(const char *name)
{
    for (int i = 0; i < n_constructors; i++)
        if (strcmp(constructors[i], name) == 0)
            return;
    constructors[n_constructors++] = name;
}

static void list_constructors(void)
{
    add_constructor("layer");
    add_constructor("block");
    for (int k = 0; k < FG_OP_KIND_COUNT; k++) {
        add_constructor(fg_op_defs[k].name);
        for (int a = 0; a < 2 && fg_op_defs[k].aliases[a].name; a++)
            add_constructor(fg_op_defs[k].aliases[a].name);
    }
}

const char *const *fg_constructor_names(int *n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, list_constructors);
    *n = n_constructors;
    return constructors;
}

int fg_op_example_spec(fg_op_kind kind, int i, char *buf, size_t cap)
{
    const fg_op_def *d = fg_op_def_of(kind);
    char plain[64];
    const char *example = NULL;
    if (!d || i < 0 || i >= 3)
        return -1;
    if (d->examples[0]) {
        example = d->examples[i];
    } else if (i == 0) {
        snprintf(plain, sizeof plain, "%s {}", d->name);
        example = plain;
    }
    if (!example)
        return -1;
    int n;
    if (d->cls == FG_CLASS_CONV)
        n = snprintf(buf, cap, "return layer \"%s_%d\" {\n  input = { \"N\", 4, %s },\n  %s,\n}\n", d->name, i,
                     d->spatial == 3 ? "8, 10, 12" : "34, 34", example);
    else
        n = snprintf(buf, cap,
                     "return layer \"%s_%d\" {\n  input = { \"N\", 4, 34, 34 },\n"
                     "  conv2d { out_channels = 8, kernel = 3, padding = 1, as = \"c\" },\n  %s,\n}\n",
                     d->name, i, example);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}
