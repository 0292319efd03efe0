/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU reference: the one definition of every op's semantics, evaluated in double.
 * It is the oracle of every test (GPU kernels are checked against it) and the engine behind
 * `fusegen run --device cpu`. Written for clarity, not speed: direct loops, no tiling. */
#ifndef FG_CPU_REFERENCE_H
#define FG_CPU_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/diag.h"
#include "../gen/block.h"
#include "../gen/ir.h"

/* Evaluates the layer on `batch` samples. `input` holds batch * sample_count(ir->input)
 * floats; `params[i]` holds ir->params[i].count floats; `output` receives
 * batch * sample_count(last op's out) doubles. Both are NC(D)HW, or N(D)HWC for a layer
 * with layout "channels_last" (ir->layout). Returns 0, or -1 with err set (out of
 * memory). */
int fg_reference_run(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                     double *output, fg_error *err);

/* Whether the reference defines an op kind (tests check every kind of the registry). */
bool fg_ref_defines(fg_op_kind kind);
/* The same, calling progress(ctx, fraction done) as it goes (after every output channel of
 * every sample of the convolution, which is nearly all the work); progress may be NULL. */
typedef void (*fg_reference_progress)(void *ctx, double done);
int fg_reference_run_progress(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                              double *output, fg_reference_progress progress, void *ctx, fg_error *err);

/* About how many multiply-adds (or other double operations) a run of `batch` samples costs:
 * the convolution's multiply-adds, plus a few operations per element of every later value.
 * For refusing, or warning about, runs that would take minutes before starting them. */
double fg_reference_work(const fg_layer_ir *ir, int64_t batch);

/* The elementwise functions, exposed so that tests can hold the templates to them. */
double fg_ref_unary(const fg_op *op, double x);
double fg_ref_binary(fg_op_kind kind, double a, double b);

/* Evaluates a block (gen/block.h) on `batch` samples: each layer with fg_reference_run, in
 * run order, on the tensors it reads. inputs[t] holds tensor t of the block for t below
 * b->n_inputs ("input", then the extra inputs), batch * sample_count floats each; params[i]
 * holds layer i's parameters (params[i][p] for b->layers[i].params[p]; batched ones are
 * ignored: the block's tensors stand in). Every tensor is in the block's layout (b->layout:
 * N(D)HWC for "channels_last"). Every layer is evaluated in double; the tensors between
 * layers are kept as floats rounded to the block's dtype (what the GPU stores), and for a
 * bf16/fp16 block the inputs are rounded to it first (what the GPU reads), as
 * fg_layer_run_cpu does for a layer. `output` receives the output tensor's
 * batch * sample_count doubles, not rounded (the caller rounds them to the dtype). */
int fg_reference_run_block(const fg_block_ir *b, int64_t batch, const float *const *inputs,
                           const float *const *const *params, double *output, fg_error *err);
#endif
