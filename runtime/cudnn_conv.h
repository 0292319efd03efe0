/* SPDX-License-Identifier: Apache-2.0 */
/* cuDNN's convolution, loaded with dlopen like the driver: the alternative conv path the
 * planner selects for `precision = "tf32"` (cuDNN's fastest algorithm for the shape, chosen
 * once per batch size and kept), and the independent oracle of the GPU tests (fp32 FMA math
 * only, no TF32). */
#ifndef FG_CUDNN_CONV_H
#define FG_CUDNN_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "../gen/ir.h"
#include "cuda_driver.h"

typedef struct fg_cudnn_conv fg_cudnn_conv;

/* The library to try first (FUSEGEN_LIBCUDNN, read by the caller) before libcudnn.so.9 and
 * libcudnn.so; only the first call before cuDNN is loaded counts. */
void fg_cudnn_use_library(const char *path);

/* `conv` is the layer's conv op (its in/out shapes give everything but the batch). With tf32
 * the tensor cores may run in TF32; without, cuDNN is restricted to fp32 FMA math. */
int fg_cudnn_conv_create(const fg_op *conv, bool tf32, fg_cudnn_conv **out, fg_error *err);
void fg_cudnn_conv_destroy(fg_cudnn_conv *c);

/* y = conv(x, w) (+ bias when bias != 0), all float32 NC(D)HW device memory. The first run
 * for a batch size searches for the fastest algorithm. */
int fg_cudnn_conv_run(fg_cudnn_conv *c, int64_t batch, CUdeviceptr x, CUdeviceptr w, CUdeviceptr bias,
                      CUdeviceptr y, CUstream stream, fg_error *err);

/* The algorithm chosen for the last run, for reports ("IMPLICIT_PRECOMP_GEMM"). */
const char *fg_cudnn_conv_algorithm(const fg_cudnn_conv *c);

#endif
