/* SPDX-License-Identifier: Apache-2.0 */
/* Bad specs: every one must be refused, and the message must say where (file and line),
 * what (the field), and for a misspelling what was probably meant. Each case is its own
 * cmocka test, so a failure names the case. The sources are loaded as "bad.lua". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spec_loader.h"
#include "test_util.h"

/* Line 1: return layer ..., line 2: input, line 3: conv2d (output [N, 6, 6, 6]); the
 * case's ops start on line 4. */
#define HDR                                                                                                  \
    "return layer \"t\" {\n"                                                                                 \
    "  input = { \"N\", 4, 8, 8 },\n"                                                                        \
    "  conv2d { out_channels = 6, kernel = 3 },\n"
/* A layer whose conv line (3) is the case's subject. */
#define CONV(fields)                                                                                         \
    "return layer \"t\" {\n"                                                                                 \
    "  input = { \"N\", 4, 8, 8 },\n"                                                                        \
    "  conv2d { " fields " },\n"                                                                             \
    "}\n"

/* Each limit is tested alone (the others out of reach), so that its own message is asserted
 * whatever the machine's speed; with the default limits a case accepts whichever limit
 * stops the spec first: on a loaded two-core machine under ASan that can be the CPU time. */
enum limits_kind { NO_LIMITS_CASE, DEFAULT_LIMITS, ONLY_INSTRUCTIONS, SMALL_MEMORY, SHORT_TIME };
#define ANY_LIMIT "instruction budget|time limit|memory limit"

typedef struct bad_case {
    const char *name;
    const char *source;
    /* fragments that must all appear; "a|b" accepts either a or b */
    const char *expect[6];
    enum limits_kind limits;
} bad_case;

static const bad_case cases[] = {
    /* ---- names: misspelt constructors and fields ---- */
    {.name = "unknown_op_suggests_relu", .source = HDR "  relux {},\n}\n", .expect = {"bad.lua:4:", "unknown name 'relux'", "did you mean 'relu'?"}},
    {.name = "unknown_op_suggests_group_norm", .source = HDR "  group_nrom { groups = 2 },\n}\n", .expect = {"bad.lua:4:", "unknown name 'group_nrom'", "did you mean 'group_norm'?"}},
    {.name = "unknown_op_no_suggestion", .source = HDR "  frobnicate_everything {},\n}\n", .expect = {"bad.lua:4:", "unknown name 'frobnicate_everything'", "fusegen's constructors"}},
    {.name = "unknown_field_suggests_out_channels", .source = CONV("out_chanels = 6, kernel = 3"), .expect = {"bad.lua:3:", "conv2d", "unknown field 'out_chanels'", "did you mean 'out_channels'?"}},
    {.name = "unknown_field_suggests_negative_slope", .source = HDR "  leaky_relu { negative_slop = 0.2 },\n}\n", .expect = {"bad.lua:4:", "leaky_relu", "'negative_slop'", "did you mean 'negative_slope'?"}},
    {.name = "unknown_field_lists_known", .source = HDR "  relu { zzzzzzzz = 1 },\n}\n", .expect = {"bad.lua:4:", "relu: unknown field 'zzzzzzzz'", "known fields: as"}},
    {.name = "unknown_layer_field_suggests_input", .source =
     "return layer \"t\" {\n  inputt = { \"N\", 4, 8, 8 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "layer: unknown field 'inputt'", "did you mean 'input'?"}},
    {.name = "softmax_dims_suggests_dim", .source = HDR "  softmax { dims = { 1 } },\n}\n", .expect = {"bad.lua:4:", "softmax: unknown field 'dims'", "did you mean 'dim'?"}},
    {.name = "positional_field", .source = HDR "  relu { 1 },\n}\n", .expect = {"bad.lua:4:", "relu: fields must be named"}},

    /* ---- required fields ---- */
    {.name = "missing_out_channels", .source = CONV("kernel = 3"), .expect = {"bad.lua:3:", "conv2d: field 'out_channels' is required"}},
    {.name = "missing_kernel", .source = CONV("out_channels = 6"), .expect = {"bad.lua:3:", "conv2d: field 'kernel' is required"}},
    {.name = "missing_group_norm_groups", .source = HDR "  group_norm {},\n}\n", .expect = {"bad.lua:4:", "group_norm: field 'groups' is required"}},
    {.name = "missing_sum_dim", .source = HDR "  sum { keepdim = true },\n}\n", .expect = {"bad.lua:4:", "sum: field 'dim' is required"}},
    {.name = "missing_mean_dim", .source = HDR "  mean {},\n}\n", .expect = {"bad.lua:4:", "mean: field 'dim' is required"}},
    {.name = "missing_logsumexp_dim", .source = HDR "  logsumexp {},\n}\n", .expect = {"bad.lua:4:", "logsumexp: field 'dim' is required"}},
    {.name = "missing_max_dim_with_keepdim", .source = HDR "  max { keepdim = true },\n}\n", .expect = {"bad.lua:4:", "max: field 'dim' is required"}},
    {.name = "missing_softmax_dim", .source = HDR "  softmax {},\n}\n", .expect = {"bad.lua:4:", "softmax: field 'dim' is required"}},
    {.name = "missing_pool_kernel", .source = HDR "  max_pool { stride = 2 },\n}\n", .expect = {"bad.lua:4:", "max_pool: field 'kernel' is required"}},
    {.name = "missing_layer_norm_shape", .source = HDR "  layer_norm {},\n}\n", .expect = {"bad.lua:4:", "layer_norm: field 'normalized_shape' is required"}},
    {.name = "missing_operand", .source = HDR "  add {},\n}\n", .expect = {"bad.lua:4:", "add: give exactly one operand", "(0 given)"}},
    {.name = "two_operands", .source = HDR "  mul { scalar = 2, param = \"m\" },\n}\n", .expect = {"bad.lua:4:", "mul: give exactly one operand", "(2 given)"}},
    {.name = "clamp_without_bounds", .source = HDR "  clamp {},\n}\n", .expect = {"bad.lua:4:", "clamp: field 'min' or 'max' is required"}},
    {.name = "missing_input", .source = "return layer \"t\" {\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "layer: field 'input' is required"}},

    /* ---- types ---- */
    {.name = "out_channels_string", .source = CONV("out_channels = \"6\", kernel = 3"), .expect = {"bad.lua:3:", "field 'out_channels' must be a whole number (got a string)"}},
    {.name = "kernel_boolean", .source = CONV("out_channels = 6, kernel = true"), .expect = {"bad.lua:3:", "field 'kernel' must be a number or a list of numbers (got a boolean)"}},
    {.name = "kernel_empty_list", .source = CONV("out_channels = 6, kernel = {}"), .expect = {"bad.lua:3:", "field 'kernel'", "got a list of 0"}},
    {.name = "kernel_list_with_holes", .source = CONV("out_channels = 6, kernel = { 3, 3, x = 1 }"), .expect = {"bad.lua:3:", "field 'kernel' must be a plain list of numbers"}},
    {.name = "bias_number", .source = CONV("out_channels = 6, kernel = 3, bias = 1"), .expect = {"bad.lua:3:", "field 'bias' must be true or false (got a number)"}},
    {.name = "param_number", .source = HDR "  mul { param = 5 },\n}\n", .expect = {"bad.lua:4:", "mul: field 'param' must be a string (got a number)"}},
    {.name = "eps_string", .source = HDR "  instance_norm { eps = \"small\" },\n}\n", .expect = {"bad.lua:4:", "field 'eps' must be a number (got a string)"}},
    {.name = "input_number", .source = "return layer \"t\" {\n  input = 5,\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'input' must be a list", "(got a number)"}},
    {.name = "input_entry_string", .source = "return layer \"t\" {\n  input = { \"N\", \"4\", 8, 8 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'input' must be a whole number (got a string)"}},
    {.name = "gelu_approximate_choice", .source = HDR "  gelu { approximate = \"fast\" },\n}\n", .expect = {"bad.lua:4:", "field 'approximate' must be one of \"none\", \"tanh\""}},
    {.name = "batch_norm_momentum_string", .source = HDR "  batch_norm { momentum = \"0.1\" },\n}\n", .expect = {"bad.lua:4:", "batch_norm: field 'momentum' must be a number (got a string)"}},
    {.name = "batch_norm_momentum_negative", .source = HDR "  batch_norm { momentum = -0.1 },\n}\n", .expect = {"bad.lua:4:", "batch_norm: field 'momentum' must be between 0 and 1 (got -0.1)", "leave it out for momentum=None"}},
    {.name = "batch_norm_momentum_above_one", .source = HDR "  batch_norm { stats = \"running\", momentum = 1.5 },\n}\n", .expect = {"bad.lua:4:", "batch_norm: field 'momentum' must be between 0 and 1 (got 1.5)"}},
    {.name = "batch_norm_momentum_nan", .source = HDR "  batch_norm { momentum = 0/0 },\n}\n", .expect = {"bad.lua:4:", "batch_norm: field 'momentum' must be a finite number"}},
    {.name = "batch_norm_momentum_misspelt", .source = HDR "  batch_norm { momentm = 0.1 },\n}\n", .expect = {"bad.lua:4:", "did you mean 'momentum'"}},
    {.name = "batch_norm_stats_choice", .source = HDR "  batch_norm { stats = \"moving\" },\n}\n", .expect = {"bad.lua:4:", "field 'stats' must be one of \"batch\", \"running\""}},
    {.name = "precision_choice", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  precision = \"fp16\",\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'precision' must be one of \"fp32\", \"tf32\""}},
    {.name = "dtype_choice", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  dtype = \"float16\",\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "layer: field 'dtype' must be one of \"fp32\", \"bf16\", \"fp16\""}},
    {.name = "dtype_not_a_string", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  dtype = 16,\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'dtype' must be one of"}},
    {.name = "dtype_misspelt_field", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  dtyp = \"bf16\",\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "layer: unknown field 'dtyp'", "did you mean 'dtype'?"}},
    {.name = "layout_choice", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  layout = \"nhwc\",\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "layer: field 'layout' must be one of \"nchw\", \"channels_last\""}},
    {.name = "layout_not_a_string", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  layout = true,\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'layout' must be one of"}},
    {.name = "layout_misspelt_field", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  layuot = \"channels_last\",\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "layer: unknown field 'layuot'", "did you mean 'layout'?"}},
    {.name = "layout_channel_reduced", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  layout = \"channels_last\",\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n  max { dim = 1 },\n}\n", .expect = {"bad.lua:5:", "layout \"channels_last\": the layer output [N, 6, 6] has no channel dim to put last", "keepdim = true"}},
    {.name = "layout_flatten", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  layout = \"channels_last\",\n"
                         "  conv2d { out_channels = 6, kernel = 3 },\n  flatten {},\n}\n", .expect = {"bad.lua:5:", "layout \"channels_last\": the layer output has no channel dim to put last after flatten"}},
    {.name = "op_called_with_number", .source = HDR "  relu(3),\n}\n", .expect = {"bad.lua:4:", "relu expects a table of fields", "got a number"}},
    {.name = "layer_without_name", .source = "return layer { input = { \"N\", 4, 8, 8 } }\n", .expect = {"bad.lua:1:", "layer expects a name first"}},
    {.name = "layer_body_not_table", .source = "return layer \"t\" (42)\n", .expect = {"bad.lua:1:", "layer \"t\" expects a table"}},
    {.name = "entry_is_a_number", .source = HDR "  42,\n}\n", .expect = {"bad.lua:1:", "entry 2 is a number, not an op"}},
    {.name = "ops_not_a_list", .source = HDR "  [7] = relu {},\n}\n", .expect = {"bad.lua:1:", "the ops must form a plain list"}},
    {.name = "nested_layer", .source = HDR "  layer \"inner\" { input = { \"N\", 1, 4, 4 } },\n}\n", .expect = {"bad.lua:4:", "layers do not nest"}},

    /* ---- numbers: sign, zero, fractions, non-finite ---- */
    {.name = "negative_out_channels", .source = CONV("out_channels = -4, kernel = 3"), .expect = {"bad.lua:3:", "field 'out_channels' must be between 1 and", "(got -4)"}},
    {.name = "zero_out_channels", .source = CONV("out_channels = 0, kernel = 3"), .expect = {"bad.lua:3:", "field 'out_channels'", "(got 0)"}},
    {.name = "zero_kernel", .source = CONV("out_channels = 6, kernel = 0"), .expect = {"bad.lua:3:", "field 'kernel' must be between 1", "(got 0)"}},
    {.name = "negative_padding", .source = CONV("out_channels = 6, kernel = 3, padding = -1"), .expect = {"bad.lua:3:", "field 'padding' must be between 0", "(got -1)"}},
    {.name = "zero_stride", .source = CONV("out_channels = 6, kernel = 3, stride = { 1, 0 }"), .expect = {"bad.lua:3:", "field 'stride'", "(got 0)"}},
    {.name = "fractional_stride", .source = CONV("out_channels = 6, kernel = 3, stride = 1.5"), .expect = {"bad.lua:3:", "field 'stride' must be a whole number (got 1.5)"}},
    {.name = "fractional_groups", .source = CONV("out_channels = 6, kernel = 3, groups = 2.5"), .expect = {"bad.lua:3:", "field 'groups' must be a whole number (got 2.5)"}},
    {.name = "infinite_out_channels", .source = CONV("out_channels = 1/0, kernel = 3"), .expect = {"bad.lua:3:", "field 'out_channels' must be a whole number (got inf)"}},
    {.name = "nan_out_channels", .source = CONV("out_channels = 0/0, kernel = 3"), .expect = {"bad.lua:3:", "field 'out_channels' must be a whole number", "nan"}},
    {.name = "infinite_scalar", .source = HDR "  add { scalar = 1/0 },\n}\n", .expect = {"bad.lua:4:", "field 'scalar' must be a finite number (got inf)"}},
    {.name = "nan_scalar", .source = HDR "  mul { scalar = 0/0 },\n}\n", .expect = {"bad.lua:4:", "field 'scalar' must be a finite number", "nan"}},
    {.name = "negative_infinite_clamp", .source = HDR "  clamp { min = -1/0 },\n}\n", .expect = {"bad.lua:4:", "field 'min' must be a finite number (got -inf)"}},
    {.name = "scalar_beyond_fp32", .source = HDR "  mul { scalar = 1e308 },\n}\n", .expect = {"bad.lua:4:", "mul: field 'scalar' is outside fp32's range (got 1e+308"}},
    {.name = "scalar_rounds_to_zero", .source = HDR "  add { scalar = 1e-320 },\n}\n", .expect = {"bad.lua:4:", "add: field 'scalar' rounds to 0 in fp32"}},
    {.name = "slope_beyond_fp32", .source = HDR "  leaky_relu { negative_slope = 1e39 },\n}\n", .expect = {"bad.lua:4:", "field 'negative_slope' is outside fp32's range"}},
    {.name = "clamp_bound_beyond_fp32", .source = HDR "  clamp { max = -3.5e38 },\n}\n", .expect = {"bad.lua:4:", "field 'max' is outside fp32's range"}},
    {.name = "dropout_training", .source = HDR "  dropout { training = true },\n}\n", .expect = {"bad.lua:4:", "dropout: field 'training' asks for training-mode dropout"}},
    {.name = "dropout_probability", .source = HDR "  dropout2d { p = 1.5 },\n}\n", .expect = {"bad.lua:4:", "dropout2d: field 'p' must be between 0 and 1 (got 1.5)"}},
    {.name = "zero_eps", .source = HDR "  instance_norm { eps = 0 },\n}\n", .expect = {"bad.lua:4:", "field 'eps' must be positive (got 0)"}},
    {.name = "negative_eps", .source = HDR "  group_norm { groups = 2, eps = -1e-5 },\n}\n", .expect = {"bad.lua:4:", "field 'eps' must be positive"}},
    {.name = "softplus_zero_beta", .source = HDR "  softplus { beta = 0 },\n}\n", .expect = {"bad.lua:4:", "field 'beta' must not be zero"}},
    {.name = "clamp_min_above_max", .source = HDR "  clamp { min = 1, max = -1 },\n}\n", .expect = {"bad.lua:4:", "clamp: field 'max' must not be below min"}},
    {.name = "hardtanh_min_above_max", .source = HDR "  hardtanh { min = 2, max = 1 },\n}\n", .expect = {"bad.lua:4:", "hardtanh: field 'max' must not be below min"}},
    {.name = "zero_input_dim", .source = "return layer \"t\" {\n  input = { \"N\", 0, 8, 8 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'input' must be between 1", "(got 0)"}},

    /* ---- shapes and semantics ---- */
    {.name = "conv_groups_vs_input_channels", .source = CONV("out_channels = 6, kernel = 3, groups = 3"), .expect = {"bad.lua:3:", "conv2d: field 'groups' (3) must divide the input channels (4)"}},
    {.name = "conv_groups_vs_out_channels", .source = CONV("out_channels = 6, kernel = 3, groups = 4"), .expect = {"bad.lua:3:", "conv2d: field 'groups' (4) must divide out_channels (6)"}},
    {.name = "group_norm_groups_vs_channels", .source = HDR "  group_norm { groups = 4 },\n}\n", .expect = {"bad.lua:4:", "group_norm: field 'groups' (4) must divide the channels (6)"}},
    {.name = "kernel_larger_than_input", .source = CONV("out_channels = 6, kernel = 9"), .expect = {"bad.lua:3:", "conv2d: field 'kernel' is larger than the input", "spans 9"}},
    {.name = "dilated_kernel_larger_than_input", .source = CONV("out_channels = 6, kernel = 3, dilation = { 1, 4 }"), .expect = {"bad.lua:3:", "field 'kernel' is larger than the input: spatial dim 1 is 8 (padded) but the kernel spans 9"}},
    {.name = "kernel_list_wrong_length", .source = CONV("out_channels = 6, kernel = { 3, 3, 3 }"), .expect = {"bad.lua:3:", "field 'kernel' has 3 values; give one or 2"}},
    {.name = "reduce_missing_dim", .source = HDR "  sum { dim = 4 },\n}\n", .expect = {"bad.lua:4:", "sum: field 'dim' names dim 4 but the value [N, 6, 6, 6] has 4 dims (valid: -4..3)"}},
    {.name = "reduce_missing_negative_dim", .source = HDR "  max { dims = { 1, -5 } },\n}\n", .expect = {"bad.lua:4:", "field 'dims' names dim -5"}},
    {.name = "reduce_batch_dim", .source = HDR "  mean { dim = 0 },\n}\n", .expect = {"bad.lua:4:", "mean: field 'dim' reduces over the batch dim 0"}},
    {.name = "reduce_batch_dim_negative", .source = HDR "  logsumexp { dim = -4 },\n}\n", .expect = {"bad.lua:4:", "reduces over the batch dim 0"}},
    {.name = "reduce_duplicate_dims", .source = HDR "  sum { dims = { 2, 2 } },\n}\n", .expect = {"bad.lua:4:", "sum: field 'dims' lists dim 2 twice"}},
    {.name = "reduce_duplicate_dims_negative", .source = HDR "  min { dims = { 1, -3 } },\n}\n", .expect = {"bad.lua:4:", "field 'dims' lists dim 1 twice"}},
    {.name = "reduce_dim_and_dims", .source = HDR "  sum { dim = 1, dims = { 2 } },\n}\n", .expect = {"bad.lua:4:", "field 'dims' cannot be given together with 'dim'"}},
    {.name = "reduce_with_operand", .source = HDR "  max { dim = 1, scalar = 0 },\n}\n", .expect = {"bad.lua:4:", "field 'scalar' cannot be combined with dim/dims"}},
    {.name = "softmax_two_dims", .source = HDR "  softmax { dim = { 1, 2 } },\n}\n", .expect = {"bad.lua:4:", "softmax", "field 'dim'", "one dim"}},
    {.name = "value_unknown_with_suggestion", .source = HDR "  relu { as = \"cc\" },\n  add { value = \"c\" },\n}\n", .expect = {"bad.lua:5:", "add: field 'value' 'c' names no earlier value", "did you mean 'cc'?"}},
    {.name = "value_unknown_without_names", .source = HDR "  add { value = \"skip\" },\n}\n", .expect = {"bad.lua:4:", "'skip' names no earlier value", "as = \"skip\""}},
    {.name = "value_named_later", .source = HDR "  add { value = \"late\" },\n  relu { as = \"late\" },\n}\n", .expect = {"bad.lua:4:", "'late' names no earlier value"}},
    {.name = "value_shape_mismatch", .source = HDR "  relu { as = \"r\" },\n  max_pool { kernel = 2 },\n  add { value = \"r\" },\n}\n", .expect = {"bad.lua:6:", "add: field 'value' 'r' has shape [N, 6, 6, 6] but this op's input is [N, 6, 3, 3]"}},
    {.name = "value_name_twice", .source = HDR "  relu { as = \"r\" },\n  tanh { as = \"r\" },\n}\n", .expect = {"bad.lua:5:", "field 'as' 'r' already names the value of line 4"}},
    {.name = "param_reused_other_shape", .source = HDR "  mul { param = \"m\", shape = { 6, 1, 1 } },\n  add { param = \"m\", shape = { 6, 1 } },\n}\n", .expect = {"bad.lua:5:", "parameter 'm' is used with shape [6, 1] here but [6, 1, 1] at line 4"}},
    {.name = "param_clashes_with_conv_weight", .source = HDR "  mul { param = \"conv.bias\", shape = { 6, 1, 1 } },\n}\n", .expect = {"bad.lua:4:", "parameter 'conv.bias' is used with shape [6, 1, 1] here but [6] at line 3"}},
    {.name = "param_does_not_broadcast", .source = HDR "  mul { param = \"m\", shape = { 5, 1, 1 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' param 'm' does not broadcast against the value [N, 6, 6, 6]: its dim 0 is 5"}},
    {.name = "param_batch_dim_not_one", .source = HDR "  mul { param = \"m\", shape = { 2, 6, 1, 1 } },\n}\n", .expect = {"bad.lua:4:", "param 'm' does not broadcast", "its dim 0 is 2"}},
    {.name = "param_rank_too_high", .source = HDR "  mul { param = \"m\", shape = { 1, 1, 6, 1, 1 } },\n}\n", .expect = {"bad.lua:4:", "param 'm' has rank 5, more than the value"}},
    {.name = "shape_without_param", .source = HDR "  add { scalar = 1, shape = { 6 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' applies only to a param operand"}},
    {.name = "first_op_not_conv", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  relu {},\n}\n", .expect = {"bad.lua:3:", "the first op must be conv2d or conv3d"}},
    /* ---- the prologue: what may come before the conv (docs/spec.md, "Prologue") ---- */
#define PRO(ops) "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n" ops "  conv2d { out_channels = 6, kernel = 3 },\n}\n"
    {.name = "prologue_pool_refused", .source = PRO("  relu {},\n  max_pool { kernel = 2 },\n"), .expect = {"bad.lua:4:", "max_pool: cannot come before the convolution", "only normalizations and elementwise ops"}},
    {.name = "prologue_layer_norm_dim", .source = PRO("  layer_norm { dim = 3 },\n"), .expect = {"bad.lua:3:", "layer_norm: field 'dim' is 3 but"}},
    {.name = "prologue_avg_pool2d_refused", .source = PRO("  avg_pool2d { kernel = 2 },\n"), .expect = {"bad.lua:3:", "avg_pool2d: cannot come before the convolution"}},
    {.name = "prologue_reduction_refused", .source = PRO("  sum { dim = 1, keepdim = true },\n"), .expect = {"bad.lua:3:", "sum: cannot come before the convolution"}},
    {.name = "prologue_softmax_refused", .source = PRO("  softmax { dim = 1 },\n"), .expect = {"bad.lua:3:", "softmax: cannot come before the convolution"}},
    {.name = "prologue_reshape_refused", .source = PRO("  view { shape = { \"N\", 4, 8, 8 } },\n"), .expect = {"bad.lua:3:", "view: cannot come before the convolution"}},
    {.name = "prologue_flatten_refused", .source = PRO("  silu {},\n  flatten {},\n"), .expect = {"bad.lua:4:", "flatten: cannot come before the convolution"}},
    {.name = "prologue_value_operand_refused", .source = PRO("  add { value = \"x\" },\n"), .expect = {"bad.lua:3:", "add: field 'value' cannot be used before the convolution"}},
    {.name = "prologue_as_refused", .source = PRO("  relu { as = \"r\" },\n"), .expect = {"bad.lua:3:", "relu: field 'as' cannot be used before the convolution"}},
    {.name = "prologue_two_statistics_refused", .source = PRO("  group_norm { groups = 2 },\n  silu {},\n  instance_norm {},\n"), .expect = {"bad.lua:5:", "instance_norm: a second normalization with statistics before the convolution", "line 3"}},
    {.name = "prologue_group_norm_groups", .source = PRO("  group_norm { groups = 3 },\n"), .expect = {"bad.lua:3:", "group_norm: field 'groups' (3) must divide the channels (4)"}},
    {.name = "prologue_layer_norm_shape", .source = PRO("  layer_norm { normalized_shape = { 7, 8 } },\n"), .expect = {"bad.lua:3:", "layer_norm: field 'normalized_shape' must match the value's trailing dims"}},
    {.name = "prologue_param_broadcast", .source = PRO("  mul { param = \"m\", shape = { 3, 1, 1 } },\n"), .expect = {"bad.lua:3:", "mul: ", "param 'm'"}},
    {.name = "prologue_without_conv", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  group_norm { groups = 2 },\n  silu {},\n}\n", .expect = {"bad.lua:3:", "has no convolution", "the first op must be conv2d or conv3d", "group_norm here"}},
    {.name = "prologue_too_long", .source = PRO("  relu {},\n  relu {},\n  relu {},\n  relu {},\n  relu {},\n  relu {},\n  relu {},\n  relu {},\n  silu {},\n"), .expect = {"bad.lua:11:", "silu: more than 8 ops before the convolution"}},
#undef PRO
    {.name = "two_convs", .source = HDR "  conv2d { out_channels = 6, kernel = 1 },\n}\n", .expect = {"bad.lua:4:", "conv2d: only the first op may be a convolution"}},
    {.name = "conv2d_on_5d_input", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8, 8 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:3:", "conv2d: expects a 4D input [N, C, H, W] but the layer input is [N, 4, 8, 8, 8]"}},
    {.name = "conv3d_on_4d_input", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n  conv3d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:3:", "conv3d: expects a 5D input"}},
    {.name = "input_without_N", .source = "return layer \"t\" {\n  input = { 128, 4, 8, 8 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'input' must start with \"N\""}},
    {.name = "input_rank_3", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'input' must have 4 entries", "got 3"}},
    {.name = "input_rank_6", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8, 8, 8 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'input' must have 4 entries", "got 6"}},
    {.name = "layer_without_ops", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 },\n}\n", .expect = {"bad.lua:1:", "layer: has no ops"}},
    {.name = "too_many_ops", .source =
     "local ops = { input = { \"N\", 4, 8, 8 }, conv2d { out_channels = 6, kernel = 3 } }\n"
     "for i = 1, 60 do ops[#ops + 1] = relu {} end\nreturn layer \"t\" (ops)\n", .expect = {"bad.lua:3:", "has 61 ops; at most 48 are supported"}},
    {.name = "layer_norm_shape_mismatch", .source = HDR "  layer_norm { normalized_shape = { 6, 5 } },\n}\n", .expect = {"bad.lua:4:", "layer_norm: field 'normalized_shape' must match the value's trailing dims: entry 1 is 5"}},
    {.name = "layer_norm_dim_not_channels", .source = HDR "  layer_norm { dim = 2 },\n}\n", .expect = {"bad.lua:4:", "layer_norm: field 'dim' is 2 but layer_norm normalizes dim 1 only", "use normalized_shape"}},
    {.name = "layer_norm_dim_last", .source = HDR "  layer_norm { dim = -1 },\n}\n", .expect = {"bad.lua:4:", "field 'dim' is -1 but layer_norm normalizes dim 1 only", "-3 from the end"}},
    {.name = "layer_norm_dim_and_shape", .source = HDR "  layer_norm { dim = 1, normalized_shape = { 6, 6 } },\n}\n", .expect = {"bad.lua:4:", "field 'normalized_shape' cannot be combined with dim: layer_norm { dim = 1 } normalizes the channels"}},
    {.name = "layer_norm_dim_not_integer", .source = HDR "  layer_norm { dim = 1.5 },\n}\n", .expect = {"bad.lua:4:", "layer_norm: field 'dim'"}},
    {.name = "layer_norm_dim_out_of_range", .source = HDR "  layer_norm { dim = 9 },\n}\n", .expect = {"bad.lua:4:", "layer_norm: field 'dim'"}},
    {.name = "layer_norm_dim_typo", .source = HDR "  layer_norm { dim = 1, epss = 1e-6 },\n}\n", .expect = {"bad.lua:4:", "epss", "eps"}},
    {.name = "layer_norm_too_many_dims", .source = HDR "  layer_norm { normalized_shape = { 1, 6, 6, 6 } },\n}\n", .expect = {"bad.lua:4:", "field 'normalized_shape' has 4 dims but the value [N, 6, 6, 6] has only 3"}},
    {.name = "pool_padding_above_half_kernel", .source = HDR "  max_pool { kernel = 2, padding = 2 },\n}\n", .expect = {"bad.lua:4:", "max_pool: field 'padding' (2) must be at most half the kernel (2)"}},
    {.name = "avg_pool_padding_above_half_kernel", .source = HDR "  avg_pool { kernel = { 3, 4 }, padding = { 1, 3 } },\n}\n", .expect = {"bad.lua:4:", "avg_pool: field 'padding' (3) must be at most half the kernel (4)"}},
    {.name = "pool_kernel_larger_than_input", .source = HDR "  max_pool { kernel = 7 },\n}\n", .expect = {"bad.lua:4:", "field 'kernel' (7) is larger than the input's spatial dim 0 (6)"}},
    {.name = "pool3d_on_2d_value", .source = HDR "  max_pool3d { kernel = 2 },\n}\n", .expect = {"bad.lua:4:", "max_pool3d: is a 3D pool but the value [N, 6, 6, 6] has 2 spatial dims"}},
    {.name = "element_count_overflow", .source =
     "return layer \"t\" {\n  input = { \"N\", 65536, 65536, 65536 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:3:", "the layer input [N, 65536, 65536, 65536] has more than 2147483647 elements per sample"}},
    {.name = "conv_output_overflow", .source =
     "return layer \"t\" {\n  input = { \"N\", 1, 40000, 40000 },\n  conv2d { out_channels = 2, kernel = 1 },\n}\n", .expect = {"bad.lua:3:", "conv2d: its output [N, 2, 40000, 40000] has more than 2147483647 elements per sample"}},

    /* ---- shape ops: fields, PyTorch's rules, the batch, and what may follow one ---- */
    {.name = "flatten_batch", .source = HDR "  flatten { start_dim = 0 },\n}\n", .expect = {"bad.lua:4:", "flatten: field 'start_dim' is dim 0, which merges the batch into dims 1..3", "torch.flatten(x, 1)"}},
    {.name = "flatten_batch_negative", .source = HDR "  flatten { start_dim = -4, end_dim = 1 },\n}\n", .expect = {"bad.lua:4:", "field 'start_dim' is dim 0, which merges the batch into dims 1..1"}},
    {.name = "flatten_end_out_of_range", .source = HDR "  flatten { end_dim = 4 },\n}\n", .expect = {"bad.lua:4:", "flatten: field 'end_dim' names dim 4 but the value [N, 6, 6, 6] has 4 dims (valid: -4..3)"}},
    {.name = "flatten_start_after_end", .source = HDR "  flatten { start_dim = 3, end_dim = -2 },\n}\n", .expect = {"bad.lua:4:", "field 'start_dim' (dim 3) comes after end_dim (dim 2) of the value [N, 6, 6, 6]"}},
    {.name = "flatten_fractional", .source = HDR "  flatten { start_dim = 1.5 },\n}\n", .expect = {"bad.lua:4:", "flatten: field 'start_dim' must be a whole number (got 1.5)"}},
    {.name = "flatten_beyond_rank_bounds", .source = HDR "  flatten { end_dim = -6 },\n}\n", .expect = {"bad.lua:4:", "field 'end_dim' must be between -5 and 4 (got -6)"}},
    {.name = "flatten_misspelt_field", .source = HDR "  flatten { strat_dim = 1 },\n}\n", .expect = {"bad.lua:4:", "flatten: unknown field 'strat_dim'", "did you mean 'start_dim'?"}},
    {.name = "flatten_rank_one", .source = HDR "  sum { dims = { 1, 2, 3 } },\n  flatten {},\n}\n", .expect = {"bad.lua:5:", "flatten: field 'start_dim' names dim 1 but the value [N] has 1 dims (valid: -1..0)"}},
    {.name = "squeeze_missing_dim", .source = HDR "  squeeze {},\n}\n", .expect = {"bad.lua:4:", "squeeze: field 'dim' is required"}},
    {.name = "squeeze_batch", .source = HDR "  squeeze { dim = 0 },\n}\n", .expect = {"bad.lua:4:", "squeeze: field 'dim' names the batch dim 0", "name dims 1..3"}},
    {.name = "squeeze_batch_negative", .source = HDR "  squeeze { dims = { -1, -4 } },\n}\n", .expect = {"bad.lua:4:", "field 'dims' names the batch dim 0"}},
    {.name = "squeeze_dim_out_of_range", .source = HDR "  squeeze { dim = 4 },\n}\n", .expect = {"bad.lua:4:", "squeeze: field 'dim' names dim 4 but the value [N, 6, 6, 6] has 4 dims"}},
    {.name = "squeeze_duplicate_dims", .source = HDR "  squeeze { dims = { 3, -1 } },\n}\n", .expect = {"bad.lua:4:", "squeeze: field 'dims' lists dim 3 twice"}},
    {.name = "unsqueeze_batch", .source = HDR "  unsqueeze { dim = 0 },\n}\n", .expect = {"bad.lua:4:", "unsqueeze: field 'dim' inserts the new dim before the batch", "dims 1..4"}},
    {.name = "unsqueeze_batch_negative", .source = HDR "  unsqueeze { dim = -5 },\n}\n", .expect = {"bad.lua:4:", "field 'dim' inserts the new dim before the batch"}},
    {.name = "unsqueeze_out_of_range", .source = HDR "  unsqueeze { dim = 5 },\n}\n", .expect = {"bad.lua:4:", "field 'dim' names dim 5 but the value [N, 6, 6, 6] with the new one has 5 dims (valid: -5..4)"}},
    {.name = "unsqueeze_two_dims", .source = HDR "  unsqueeze { dim = { 1, 2 } },\n}\n", .expect = {"bad.lua:4:", "unsqueeze: field 'dim' must name exactly one dim (got 2)"}},
    {.name = "unsqueeze_dims_suggests_dim", .source = HDR "  unsqueeze { dims = 1 },\n}\n", .expect = {"bad.lua:4:", "unsqueeze: unknown field 'dims'", "did you mean 'dim'?"}},
    {.name = "unsqueeze_beyond_rank_5", .source = HDR "  unsqueeze { dim = 1 },\n  unsqueeze { dim = 1 },\n}\n", .expect = {"bad.lua:5:", "unsqueeze: would give the value [N, 1, 6, 6, 6] a dim more than the 5"}},
    {.name = "view_missing_shape", .source = HDR "  view {},\n}\n", .expect = {"bad.lua:4:", "view: field 'shape' is required"}},
    {.name = "view_shape_number", .source = HDR "  view { shape = 216 },\n}\n", .expect = {"bad.lua:4:", "view: field 'shape' must be a list like { \"N\", 64, -1 } (got a number)"}},
    {.name = "view_element_count", .source = HDR "  view { shape = { \"N\", 6, 35 } },\n}\n", .expect = {"bad.lua:4:", "view: field 'shape' holds 210 elements per sample but the value [N, 6, 6, 6] has 216"}},
    {.name = "reshape_element_count_too_many", .source = HDR "  reshape { shape = { \"N\", 65536, 65536, 65536 } },\n}\n", .expect = {"bad.lua:4:", "reshape: field 'shape' holds more elements per sample than the value [N, 6, 6, 6] (216)"}},
    {.name = "view_cannot_infer", .source = HDR "  view { shape = { \"N\", 5, -1 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' cannot infer its -1: the other extents hold 5 elements per sample but the value [N, 6, 6, 6] has 216"}},
    {.name = "view_two_inferred", .source = HDR "  view { shape = { \"N\", -1, 6, -1 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' has -1 at entries 2 and 4: only one extent can be inferred"}},
    {.name = "view_inferred_batch_and_more", .source = HDR "  reshape { shape = { -1, 6, -1 } },\n}\n", .expect = {"bad.lua:4:", "reshape: field 'shape' has -1 at entries 1 and 3"}},
    {.name = "view_batch_not_first", .source = HDR "  view { shape = { 6, \"N\", 36 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' must start with \"N\" (or -1 standing for it)"}},
    {.name = "view_N_twice", .source = HDR "  view { shape = { \"N\", \"N\", 216 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' has \"N\" at entry 2: the batch can only come first"}},
    {.name = "view_merges_batch", .source = HDR "  view { shape = { -1, 8 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' has -1 first and 8 elements per entry of dim 0 after it", "[N, 6, 6, 6] has 216", "merge the batch"}},
    {.name = "view_zero_extent", .source = HDR "  view { shape = { \"N\", 0, 216 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' has 0 at entry 2"}},
    {.name = "view_negative_extent", .source = HDR "  view { shape = { \"N\", -2, -108 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' must be between -1 and", "(got -2)"}},
    {.name = "view_string_extent", .source = HDR "  view { shape = { \"N\", \"216\" } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' must be a whole number (got a string)"}},
    {.name = "view_too_many_entries", .source = HDR "  view { shape = { \"N\", 1, 1, 6, 6, 6 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' must have 1 to 5 entries, the batch first (got 6)"}},
    {.name = "view_shape_with_holes", .source = HDR "  view { shape = { \"N\", 216, x = 1 } },\n}\n", .expect = {"bad.lua:4:", "field 'shape' must be a plain list"}},
    {.name = "reduction_after_flatten", .source = HDR "  flatten {},\n  sum { dim = 1 },\n}\n", .expect = {"bad.lua:5:", "sum: comes after the shape op flatten (line 4): a reduction over reshaped dims is not supported", "apply it before the flatten", "Only elementwise ops and shape ops may follow a shape op"}},
    {.name = "norm_after_view", .source = HDR "  view { shape = { \"N\", 6, 36 } },\n  relu {},\n  group_norm { groups = 2 },\n}\n", .expect = {"bad.lua:6:", "group_norm: comes after the shape op view (line 4): a normalization over reshaped dims"}},
    {.name = "softmax_after_squeeze", .source = HDR "  squeeze { dim = 1 },\n  softmax { dim = 1 },\n}\n", .expect = {"bad.lua:5:", "softmax: comes after the shape op squeeze (line 4): a softmax"}},
    {.name = "pool_after_unsqueeze", .source = HDR "  unsqueeze { dim = 2 },\n  squeeze { dim = 2 },\n  max_pool2d { kernel = 2 },\n}\n", .expect = {"bad.lua:6:", "max_pool2d: comes after the shape op unsqueeze (line 4): a pooling"}},
    {.name = "param_after_flatten", .source = HDR "  flatten {},\n  mul { param = \"s\", shape = { 216 } },\n}\n", .expect = {"bad.lua:5:", "mul: field 'param' 's' comes after the shape op flatten (line 4): a parameter broadcasts against the layout before the shape op"}},
    {.name = "value_laid_out_otherwise", .source = HDR "  max { dim = 2, keepdim = true, as = \"m\" },\n  sum { dim = 2 },\n  unsqueeze { dim = 2 },\n  add { value = \"m\" },\n}\n", .expect = {"bad.lua:7:", "add: field 'value' 'm' is from before the shape op unsqueeze (line 6) and laid out as [N, 6, 1, 6], but the values after it are laid out as [N, 6, 6]"}},

    /* ---- names ---- */
    {.name = "layer_name_with_slash", .source =
     "return layer \"a/b\" {\n  input = { \"N\", 4, 8, 8 },\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:1:", "field 'name' must not contain path separators ('a/b')"}},
    {.name = "conv_name_with_backslash", .source = CONV("name = \"a\\\\b\", out_channels = 6, kernel = 3"), .expect = {"bad.lua:3:", "conv2d: field 'name' must not contain path separators"}},
    {.name = "conv_name_with_newline", .source = CONV("name = \"a\\nb\", out_channels = 6, kernel = 3"), .expect = {"bad.lua:3:", "field 'name' must not contain control characters"}},
    {.name = "as_with_tab", .source = HDR "  relu { as = \"r\\tx\" },\n}\n", .expect = {"bad.lua:4:", "field 'as' must not contain control characters"}},
    {.name = "param_with_escape_char", .source = HDR "  mul { param = \"m\\27[31m\" },\n}\n", .expect = {"bad.lua:4:", "field 'param' must not contain control characters"}},
    {.name = "param_with_slash", .source = HDR "  mul { param = \"../etc/passwd\" },\n}\n", .expect = {"bad.lua:4:", "field 'param' must not contain path separators"}},
    {.name = "name_with_quote", .source = HDR "  group_norm { name = \"g'n\", groups = 2 },\n}\n", .expect = {"bad.lua:4:", "must be plain ASCII without quotes"}},
    {.name = "empty_name", .source = HDR "  relu { as = \"\" },\n}\n", .expect = {"bad.lua:4:", "field 'as' must not be empty"}},
    {.name = "name_too_long", .source = CONV("name = \"" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" "\", out_channels = 6, kernel = 3"), .expect = {"bad.lua:3:", "field 'name' is too long (104 characters"}},

    /* ---- what the spec returns ---- */
    {.name = "returns_number", .source = "return 42\n", .expect = {"bad.lua:", "the spec must return a layer", "(it returned number)"}},
    {.name = "returns_nil", .source = "local x = 1\n", .expect = {"bad.lua:", "the spec must return a layer", "(it returned nil)"}},
    {.name = "returns_op", .source = "return relu {}\n", .expect = {"bad.lua:", "the spec must return a layer", "(it returned an op)"}},
    {.name = "returns_unfinished_layer", .source = "return layer \"t\"\n", .expect = {"bad.lua:", "the spec must return a layer", "(it returned function)"}},
    {.name = "returns_plain_table", .source = "return { input = { \"N\", 4, 8, 8 } }\n", .expect = {"bad.lua:", "the spec must return a layer", "(it returned table)"}},

    /* ---- Lua errors ---- */
    {.name = "syntax_error", .source = "return layer \"t\" {\n  input = { \"N\", 4, 8, 8 }\n  conv2d { out_channels = 6, kernel = 3 },\n}\n", .expect = {"bad.lua:3:", "'}' expected (to close '{' at line 1)"}},
    {.name = "syntax_error_unfinished_string", .source = "local a = 1\nlocal b = \"oops\n", .expect = {"bad.lua:2:", "unfinished string"}},
    {.name = "runtime_error_call", .source = "local x = 1\nerror(\"boom\")\n", .expect = {"bad.lua:2: boom"}},
    {.name = "runtime_error_arithmetic", .source = "local t = {}\nlocal y = t.missing + 1\n", .expect = {"bad.lua:2:", "attempt to perform arithmetic"}},
    {.name = "runtime_error_non_string", .source = "error({})\n", .expect = {"bad.lua:", "error object is not a string"}},
    {.name = "bytecode_refused", .source = "\033LuaT\n", .expect = {"bad.lua", "binary chunk"}},

    /* ---- the sandbox: nothing but constructors, tables, numbers and strings ---- */
    {.name = "no_io", .source = "io.write(\"x\")\n", .expect = {"bad.lua:1:", "unknown name 'io'"}},
    {.name = "no_os", .source = "local t = os.time()\n", .expect = {"bad.lua:1:", "unknown name 'os'"}},
    {.name = "no_require", .source = "local m = require(\"os\")\n", .expect = {"bad.lua:1:", "unknown name 'require'"}},
    {.name = "no_load", .source = "local f = load(\"return 1\")\n", .expect = {"bad.lua:1:", "unknown name 'load'"}},
    {.name = "no_loadstring", .source = "local f = loadstring(\"return 1\")\n", .expect = {"bad.lua:1:", "unknown name 'loadstring'"}},
    {.name = "no_dofile", .source = "dofile(\"/etc/passwd\")\n", .expect = {"bad.lua:1:", "unknown name 'dofile'"}},
    {.name = "no_string", .source = "local r = string.rep(\"x\", 10)\n", .expect = {"bad.lua:1:", "unknown name 'string'"}},
    {.name = "no_string_methods", .source = "local r = (\"x\"):rep(100)\n", .expect = {"bad.lua:1:", "attempt to index a string value"}},
    {.name = "no_debug", .source = "local d = debug.getinfo(1)\n", .expect = {"bad.lua:1:", "unknown name 'debug'"}},
    {.name = "no_setmetatable", .source = "setmetatable({}, {})\n", .expect = {"bad.lua:1:", "unknown name 'setmetatable'"}},
    {.name = "no_getmetatable", .source = "local m = getmetatable(\"\")\n", .expect = {"bad.lua:1:", "unknown name 'getmetatable'"}},
    {.name = "no_rawset", .source = "rawset(_ENV, \"x\", 1)\n", .expect = {"bad.lua:1:", "unknown name 'rawset'"}},
    {.name = "no_collectgarbage", .source = "collectgarbage()\n", .expect = {"bad.lua:1:", "unknown name 'collectgarbage'"}},
    {.name = "no_G", .source = "local g = _G\n", .expect = {"bad.lua:1:", "unknown name '_G'"}},
    {.name = "no_print", .source = "print(1)\n", .expect = {"bad.lua:1:", "unknown name 'print'"}},
    {.name = "global_assignment", .source = "x = 1\n", .expect = {"bad.lua:1:", "a spec cannot set global 'x': use a local"}},
    {.name = "global_function", .source = "local a = 1\nfunction helper() end\n", .expect = {"bad.lua:2:", "cannot set global 'helper'"}},
    {.name = "overwrite_constructor", .source = "relu = 5\n", .expect = {"bad.lua:1:", "cannot set global 'relu'"}},
    {.name = "infinite_loop", .source = "local x = 0\nwhile true do x = x + 1 end\n", .expect = {"bad.lua:2:", "instruction budget"}, .limits = ONLY_INSTRUCTIONS},
    {.name = "infinite_loop_default_limits", .source = "local x = 0\nwhile true do x = x + 1 end\n", .expect = {"bad.lua:2:", "instruction budget|time limit"}, .limits = DEFAULT_LIMITS},
    {.name = "infinite_loop_in_function", .source = "local function spin()\n  while true do end\nend\nspin()\n", .expect = {"bad.lua:2:", "instruction budget|time limit"}, .limits = DEFAULT_LIMITS},
    {.name = "time_limit", .source = "local x = 0\nwhile true do x = x + 1 end\n", .expect = {"bad.lua:2:", "time limit (0.2 s of CPU time)"}, .limits = SHORT_TIME},
    {.name = "memory_bomb_table", .source = "local t = {}\nfor i = 1, 1e9 do t[i] = i end\n", .expect = {"bad.lua", "memory limit"}, .limits = SMALL_MEMORY},
    {.name = "memory_bomb_table_default_limits", .source = "local t = {}\nfor i = 1, 1e9 do t[i] = { i } end\n", .expect = {"bad.lua", ANY_LIMIT}, .limits = DEFAULT_LIMITS},
    {.name = "memory_churn_concat", .source = "local s = \"x\"\nwhile true do s = s .. #s end\n", .expect = {"bad.lua", "allocated in all"}, .limits = SMALL_MEMORY},
    {.name = "memory_bomb_concat", .source = "local s = \"x\"\nwhile true do s = s .. s end\n", .expect = {"bad.lua", ANY_LIMIT}, .limits = DEFAULT_LIMITS},
    {.name = "unbounded_recursion", .source = "local function f(n) return f(n + 1) + 1 end\nreturn f(1)\n", .expect = {"bad.lua", ANY_LIMIT "|stack overflow"}, .limits = DEFAULT_LIMITS},
    {.name = "unbounded_recursion_small_memory", .source = "local function f(n) return f(n + 1) + 1 end\nreturn f(1)\n", .expect = {"bad.lua", "memory limit|stack overflow"}, .limits = SMALL_MEMORY},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* One alternative of "a|b" found in msg? */
static bool contains_any(const char *msg, const char *fragment)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", fragment);
    for (char *save = NULL, *alt = strtok_r(buf, "|", &save); alt; alt = strtok_r(NULL, "|", &save))
        if (strstr(msg, alt))
            return true;
    return false;
}

static void run_case(void **state)
{
    const bad_case *c = *state;
    fg_layer_ir *ir = malloc(sizeof *ir);
    assert_non_null(ir);
    fg_error err;
    memset(&err, 0, sizeof err);
    fg_sandbox_limits limits = fg_sandbox_default_limits;
    if (c->limits == ONLY_INSTRUCTIONS)
        limits.seconds = 1e9;
    if (c->limits == SMALL_MEMORY) {
        limits.memory_bytes = 2u << 20;
        limits.seconds = 1e9;
    }
    if (c->limits == SHORT_TIME) {
        limits.instructions = 1LL << 60;
        limits.seconds = 0.2;
    }
    int rc = fg_spec_load_string_limited("bad.lua", c->source, strlen(c->source), &limits, ir, &err);
    free(ir);
    if (rc == 0)
        fail_msg("case %s: the spec was accepted; it must be refused\n--- spec ---\n%s", c->name, c->source);
    if (rc != -1)
        fail_msg("case %s: return value %d, expected -1", c->name, rc);
    for (int i = 0; i < 6 && c->expect[i]; i++)
        if (!contains_any(err.msg, c->expect[i]))
            fail_msg("case %s: the message lacks \"%s\":\n  %s", c->name, c->expect[i], err.msg);
}

/* ---- cases that need more than a string ------------------------------------------------ */

/* A spec file: messages carry the file's path. */
static void file_errors_name_the_path(void **state)
{
    (void)state;
    char *dir = fgt_tmpdir("spec-errors");
    char path[4096];
    snprintf(path, sizeof path, "%s/my_layer.lua", dir);
    const char *src = "-- a comment\n" HDR "  relu {},\n  sigmoidd {},\n}\n";
    assert_int_equal(fgt_write_file(path, src, strlen(src)), 0);
    fg_layer_ir *ir = malloc(sizeof *ir);
    fg_error err = {{0}};
    assert_int_equal(fg_spec_load_file(path, ir, &err), -1);
    char want[4200];
    snprintf(want, sizeof want, "%s:6:", path);
    fgt_assert_contains(err.msg, want);
    fgt_assert_contains(err.msg, "did you mean 'sigmoid'?");

    snprintf(path, sizeof path, "%s/missing.lua", dir);
    assert_int_equal(fg_spec_load_file(path, ir, &err), -1);
    fgt_assert_contains(err.msg, path);
    fgt_assert_contains(err.msg, "cannot open spec");
    free(ir);
    fgt_rmtree(dir);
    free(dir);
}

/* Specs over the size limit are refused before Lua sees them (file and string). */
static void oversized_spec(void **state)
{
    (void)state;
    size_t len = FG_SPEC_MAX_BYTES + 10;
    char *src = malloc(len + 1);
    assert_non_null(src);
    memset(src, ' ', len);
    src[len] = '\0';
    fg_layer_ir *ir = malloc(sizeof *ir);
    fg_error err = {{0}};
    assert_int_equal(fg_spec_load_string("huge.lua", src, len, ir, &err), -1);
    fgt_assert_contains(err.msg, "huge.lua");
    fgt_assert_contains(err.msg, "limited to");

    char *dir = fgt_tmpdir("spec-errors");
    char path[4096];
    snprintf(path, sizeof path, "%s/huge.lua", dir);
    assert_int_equal(fgt_write_file(path, src, len), 0);
    assert_int_equal(fg_spec_load_file(path, ir, &err), -1);
    fgt_assert_contains(err.msg, path);
    fgt_assert_contains(err.msg, "larger than");
    free(src);
    free(ir);
    fgt_rmtree(dir);
    free(dir);
}

/* A refused spec leaves nothing behind: the same good spec loads before and after a
 * hostile one, and a spec cannot see globals another spec tried to set. */
static void specs_are_isolated(void **state)
{
    (void)state;
    const char *good = HDR "  relu {},\n}\n";
    fg_layer_ir *ir = fgt_load_string(good);
    assert_int_equal(ir->n_ops, 2);
    free(ir);
    fg_layer_ir *bad = malloc(sizeof *bad);
    fg_error err = {{0}};
    const char *setter = "x_from_other_spec = 1\n";
    assert_int_equal(fg_spec_load_string("bad.lua", setter, strlen(setter), bad, &err), -1);
    const char *reader = "local v = x_from_other_spec\nreturn v\n";
    assert_int_equal(fg_spec_load_string("bad.lua", reader, strlen(reader), bad, &err), -1);
    fgt_assert_contains(err.msg, "unknown name 'x_from_other_spec'");
    free(bad);
    ir = fgt_load_string(good);
    assert_int_equal(ir->n_ops, 2);
    free(ir);
}

/* The suggestion helper itself. */
static void nearest_name(void **state)
{
    (void)state;
    const char *const names[] = {"relu", "group_norm", "out_channels", "kernel"};
    assert_string_equal(fg_nearest_name("relux", names, 4), "relu");
    assert_string_equal(fg_nearest_name("gruop_norm", names, 4), "group_norm");
    assert_string_equal(fg_nearest_name("out_chanels", names, 4), "out_channels");
    assert_string_equal(fg_nearest_name("kernal", names, 4), "kernel");
    assert_null(fg_nearest_name("completely_different", names, 4));
    assert_null(fg_nearest_name("x", names, 0));
}

int main(void)
{
    struct CMUnitTest tests[N_CASES + 4];
    for (int i = 0; i < N_CASES; i++) {
        tests[i] = (struct CMUnitTest){cases[i].name, run_case, NULL, NULL, (void *)&cases[i]};
    }
    tests[N_CASES] = (struct CMUnitTest)cmocka_unit_test(file_errors_name_the_path);
    tests[N_CASES + 1] = (struct CMUnitTest)cmocka_unit_test(oversized_spec);
    tests[N_CASES + 2] = (struct CMUnitTest)cmocka_unit_test(specs_are_isolated);
    tests[N_CASES + 3] = (struct CMUnitTest)cmocka_unit_test(nearest_name);
    char *dir = fgt_tmpdir("spec-errors-env");
    fgt_isolate_environment(dir);
    int failed = _cmocka_run_group_tests("spec_errors", tests, N_CASES + 4, NULL, NULL);
    fgt_rmtree(dir);
    free(dir);
    return failed;
}
