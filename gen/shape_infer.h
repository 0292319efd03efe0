/* SPDX-License-Identifier: Apache-2.0 */
/* Shape inference and semantic checks on a freshly loaded IR: output shapes of every op,
 * the parameters each op binds (with their shapes), and every impossible combination
 * (groups not dividing channels, a kernel larger than its input, a reduction over a dim
 * that does not exist, sizes that overflow). Messages name the file, line and field. */
#ifndef FG_SHAPE_INFER_H
#define FG_SHAPE_INFER_H

#include "../common/diag.h"
#include "ir.h"

/* Largest per-sample element count of any value: kernels index a sample with 32 bits. */
#define FG_MAX_SAMPLE_ELEMENTS ((int64_t)INT32_MAX)

int fg_infer_shapes(fg_layer_ir *ir, fg_error *err);

#endif
