/* The CPU reference: the one definition of every op's semantics, evaluated in double.
 * It is the oracle of every test (GPU kernels are checked against it) and the engine behind
 * `fusegen run --device cpu`. Written for clarity, not speed: direct loops, no tiling. */
#ifndef FG_CPU_REFERENCE_H
#define FG_CPU_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/diag.h"
#include "../gen/ir.h"

/* Evaluates the layer on `batch` samples. `input` holds batch * sample_count(ir->input)
 * floats; `params[i]` holds ir->params[i].count floats; `output` receives
 * batch * sample_count(last op's out) doubles. Returns 0, or -1 with err set (out of
 * memory). */
int fg_reference_run(const fg_layer_ir *ir, int64_t batch, const float *input, const float *const *params,
                     double *output, fg_error *err);

/* Whether the reference defines an op kind (tests check every kind of the registry). */
bool fg_ref_defines(fg_op_kind kind);

/* The elementwise functions, exposed so that tests can hold the templates to them. */
double fg_ref_unary(const fg_op *op, double x);
double fg_ref_binary(fg_op_kind kind, double a, double b);

#endif
