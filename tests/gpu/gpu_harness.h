/* SPDX-License-Identifier: Apache-2.0 */
/* Shared pieces of the GPU tests: a device context, running a spec on the GPU with a
 * NaN-poisoned output and on the CPU reference with the same random data, and comparing.
 * Every GPU test program exits with 77 (ctest's "skipped") when there is no CUDA device,
 * after saying so on stdout. */
#ifndef FG_GPU_HARNESS_H
#define FG_GPU_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "../../runtime/tools.h"
#include "fusegen.h"

#define GPU_SKIP 77

/* Opens device 0 with a fresh temporary kernel cache; exits with GPU_SKIP without a device. */
fg_context *gpu_open(const char *program);
void gpu_close(fg_context *ctx);
/* The temporary kernel cache gpu_open made. */
const char *gpu_cache_dir(void);

typedef struct gpu_result {
    double max_abs, rel_l2;
    long long bad, count;
    bool nan, pass, ok; /* ok: it ran; pass: it matched */
    char error[1024];
} gpu_result;

/* Loads `source` (a spec), binds random parameters (seed), runs `batch` random samples on the
 * GPU and on the CPU reference, compares at atol = rtol = tol; for a layer with dtype bf16 or
 * fp16, in that dtype (input and output), against the reference rounded to it, with 1 ulp of
 * the dtype added to the bound (docs/spec.md). */
gpu_result gpu_check_spec(fg_context *ctx, const char *name, const char *source, int64_t batch, uint64_t seed,
                          double tol);
/* The same with the output written `out_offset` elements (of the layer's dtype) into its
 * allocation (as from a view of a larger tensor: not 16-byte aligned unless out_offset % 4 == 0
 * for float32). */
gpu_result gpu_check_spec_at(fg_context *ctx, const char *name, const char *source, int64_t batch, uint64_t seed,
                             double tol, int out_offset);
/* The same with the input read from `in_offset` elements into its allocation too (an input
 * that is not 16-byte aligned: the wgmma engine then packs even a channels-last half input,
 * fg_launch_input_direct). */
gpu_result gpu_check_spec_offsets(fg_context *ctx, const char *name, const char *source, int64_t batch, uint64_t seed,
                                  double tol, int in_offset, int out_offset);

/* Compares a GPU output with the reference into r (max_abs, rel_l2, bad, count, nan, pass):
 * |out - ref| <= tol + tol |ref|, plus 1 ulp of the dtype for a bf16/fp16 output (dtype 1, 2):
 * the reference is rounded to the dtype (fg_layer_run_cpu, fg_block_run_cpu) and the kernel
 * rounds its fp32 result, so near the middle between two values of the dtype they may land
 * on neighbours; a half output at tol 1e-4 also needs rel L2 <= 1e-3. r->ok is left as it is. */
void gpu_compare(const float *out, const float *ref, size_t n, double tol, int dtype, gpu_result *r);
/* The same for the output of a chain of `layers` half layers, each rounding its output to the
 * dtype as the reference's do (test_gpu_blocks): where an exact value lies that close to a
 * midpoint the two round an ulp apart, and the next layer reads the difference as an input
 * error, absolute at the scale of the tensor's values (a norm can amplify it): each earlier
 * layer adds an ulp of the dtype at the output's largest magnitude. */
void gpu_compare_chain(const float *out, const float *ref, size_t n, double tol, int dtype, int layers, gpu_result *r);

/* Prints one line for a case's result ("ok" or "FAILED", its errors or why it did not run);
 * true when it failed. */
bool gpu_report(const char *name, int64_t batch, double tol, const gpu_result *r);

/* The ResNet bottleneck the block tests run (64 -> 16 -> 16 -> 64 channels at 14x14, each
 * conv followed by an eval BatchNorm, which is folded; the residual), a format with one %s
 * where the block fields dtype and layout go ("" for fp32 NCHW). */
#define GPU_BOTTLENECK_SPEC                                                                                     \
    "return block \"bottleneck\" {\n"                                                                            \
    "  input = { \"N\", 64, 14, 14 },%s\n"                                                                      \
    "  layer \"a\" { conv2d { name = \"conv1\", out_channels = 16, kernel = 1, bias = false },\n"                  \
    "    batch_norm { name = \"bn1\", stats = \"running\" }, relu {} },\n"                                         \
    "  layer \"b\" { conv2d { name = \"conv2\", out_channels = 16, kernel = 3, padding = 1, bias = false },\n"     \
    "    batch_norm { name = \"bn2\", stats = \"running\" }, relu {} },\n"                                         \
    "  layer \"c\" { conv2d { name = \"conv3\", out_channels = 64, kernel = 1, bias = false },\n"                  \
    "    batch_norm { name = \"bn3\", stats = \"running\" }, add { tensor = \"input\" }, relu {} },\n"             \
    "}\n"

/* Reads a whole file (specs). */
char *gpu_read_file(const char *path);

#endif
