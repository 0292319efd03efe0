/* SPDX-License-Identifier: Apache-2.0 */
/* api_example.c: the complete C API example of docs/api.md (the two must stay identical;
 * tests/doc_examples.sh checks it). Runs specs/kb79.lua on the GPU for a batch of 4 and
 * compares the result with fusegen's CPU reference.
 *
 *   usage: api_example [SPEC]      (default: specs/kb79.lua)
 *   exit:  0 match, 1 error or mismatch, 77 no CUDA device (a skipped test) */
#include <cuda_runtime.h>
#include <fusegen.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_FG(call)                                                                            \
    do {                                                                                          \
        fg_status s_ = (call);                                                                    \
        if (s_ != FG_OK) {                                                                        \
            fprintf(stderr, "%s failed: %s: %s\n", #call, fg_status_name(s_), fg_last_error());   \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

#define CHECK_CUDA(call)                                                                          \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));                    \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* A small deterministic generator: uniform floats in [lo, hi). */
static float uniform(uint64_t *state, float lo, float hi)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((*state >> 40) * (1.0 / 16777216.0));
}

static int64_t element_count(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

int main(int argc, char **argv)
{
    const char *spec = argc > 1 ? argv[1] : "specs/kb79.lua";
    const int64_t batch = 4;
    uint64_t rng = 42;

    /* 1. A context on device 0 with the default caches. */
    fg_context_options opts;
    fg_context_options_init(&opts);
    opts.device = 0;
    fg_context *ctx = NULL;
    fg_status s = fg_context_create(&opts, &ctx);
    if (s == FG_ERR_NO_DEVICE) {
        printf("no CUDA device, skipping: %s\n", fg_last_error());
        return 77;
    }
    CHECK_FG(s);

    /* 2. The layer: the spec is loaded, checked and planned here; kernels come later. */
    fg_layer *layer = NULL;
    CHECK_FG(fg_layer_load_file(ctx, spec, &layer));

    /* 3. Parameters, by state_dict name, from host arrays (the layer keeps a copy on the
     *    host and one on the device). Random values stand in for a model's weights. */
    int n_params = 0;
    CHECK_FG(fg_layer_param_count(layer, &n_params));
    for (int i = 0; i < n_params; i++) {
        const char *name;
        int rank;
        int64_t dims[FG_MAX_DIMS];
        CHECK_FG(fg_layer_param_info(layer, i, &name, &rank, dims));
        int64_t count = element_count(rank, dims);
        float bound = 1.0f / sqrtf((float)(count / dims[0])); /* values in +-1/sqrt(fan_in) */
        float *values = malloc(sizeof(float) * (size_t)count);
        if (!values)
            return 1;
        for (int64_t j = 0; j < count; j++)
            values[j] = uniform(&rng, -bound, bound);
        CHECK_FG(fg_layer_bind_host(layer, name, values, sizeof(float) * (size_t)count));
        free(values);
        printf("bound %-18s (%lld floats)\n", name, (long long)count);
    }

    /* 4. Input and output shapes for this batch, host buffers, a random input. */
    int in_rank, out_rank;
    int64_t in_dims[FG_MAX_DIMS], out_dims[FG_MAX_DIMS];
    CHECK_FG(fg_layer_input_shape(layer, batch, &in_rank, in_dims));
    CHECK_FG(fg_layer_output_shape(layer, batch, &out_rank, out_dims));
    int64_t n_in = element_count(in_rank, in_dims), n_out = element_count(out_rank, out_dims);
    float *x = malloc(sizeof(float) * (size_t)n_in);
    float *y = malloc(sizeof(float) * (size_t)n_out);
    float *ref = malloc(sizeof(float) * (size_t)n_out);
    if (!x || !y || !ref)
        return 1;
    for (int64_t j = 0; j < n_in; j++)
        x[j] = uniform(&rng, 0.0f, 1.0f);

    /* 5. Device buffers from the CUDA runtime: fusegen runs in the device's primary context,
     *    the same one the runtime (and PyTorch) uses, so these pointers work as they are. */
    float *d_x = NULL, *d_y = NULL;
    CHECK_CUDA(cudaMalloc((void **)&d_x, sizeof(float) * (size_t)n_in));
    CHECK_CUDA(cudaMalloc((void **)&d_y, sizeof(float) * (size_t)n_out));
    CHECK_CUDA(cudaMemcpy(d_x, x, sizeof(float) * (size_t)n_in, cudaMemcpyHostToDevice));

    /* 6. Run on the default stream (the first run compiles or loads the kernels), wait,
     *    copy the output back. */
    CHECK_FG(fg_layer_run(layer, d_x, d_y, batch, NULL));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(y, d_y, sizeof(float) * (size_t)n_out, cudaMemcpyDeviceToHost));

    /* 7. The CPU reference (float64 inside) on the same input and parameters. */
    CHECK_FG(fg_layer_run_cpu(layer, x, ref, batch));
    double max_err = 0.0;
    int64_t bad = 0;
    for (int64_t j = 0; j < n_out; j++) {
        double err = fabs((double)y[j] - (double)ref[j]);
        if (!(err <= 1e-4 + 1e-4 * fabs((double)ref[j])))
            bad++; /* also counts NaN */
        if (err > max_err)
            max_err = err;
    }
    printf("%s: output [", spec);
    for (int d = 0; d < out_rank; d++)
        printf("%s%lld", d ? ", " : "", (long long)out_dims[d]);
    printf("], max abs error vs the CPU reference %.3g, %lld of %lld outside atol=rtol=1e-4\n", max_err,
           (long long)bad, (long long)n_out);

    /* 8. Clean up: layers before their context. */
    CHECK_CUDA(cudaFree(d_x));
    CHECK_CUDA(cudaFree(d_y));
    free(x);
    free(y);
    free(ref);
    CHECK_FG(fg_layer_destroy(layer));
    CHECK_FG(fg_context_destroy(ctx));
    return bad == 0 ? 0 : 1;
}
