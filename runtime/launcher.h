/* Launching a plan's passes on a stream: clears the accumulators each pass feeds, passes
 * each kernel its arguments in the plan's order, and splits the batch into launches of at
 * most 65535 samples (grid.z). */
#ifndef FG_LAUNCHER_H
#define FG_LAUNCHER_H

#include <stdint.h>

#include "../gen/ir.h"
#include "../gen/planner.h"
#include "cuda_driver.h"
#include "cudnn_conv.h"

typedef struct fg_launch_memory {
    CUdeviceptr input, output;
    CUdeviceptr params[FG_MAX_PARAMS];
    CUdeviceptr workspace;
    fg_workspace_layout layout; /* for this batch */
    fg_cudnn_conv *cudnn;       /* for FG_PASS_CUDNN */
    const fg_op *conv;          /* the layer's conv op (its weight and bias parameters) */
} fg_launch_memory;

int fg_launch_plan(const fg_cuda *cu, const fg_plan *plan, const CUfunction *functions, const fg_launch_memory *mem,
                   int64_t batch, CUstream stream, fg_error *err);

#endif
