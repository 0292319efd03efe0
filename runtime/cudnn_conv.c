/* SPDX-License-Identifier: Apache-2.0 */
#include "cudnn_conv.h"

#include <cudnn.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cudnn_api {
    cudnnStatus_t (*Create)(cudnnHandle_t *);
    cudnnStatus_t (*Destroy)(cudnnHandle_t);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    const char *(*GetErrorString)(cudnnStatus_t);
    cudnnStatus_t (*CreateTensorDescriptor)(cudnnTensorDescriptor_t *);
    cudnnStatus_t (*DestroyTensorDescriptor)(cudnnTensorDescriptor_t);
    cudnnStatus_t (*SetTensorNdDescriptor)(cudnnTensorDescriptor_t, cudnnDataType_t, int, const int *, const int *);
    cudnnStatus_t (*CreateFilterDescriptor)(cudnnFilterDescriptor_t *);
    cudnnStatus_t (*DestroyFilterDescriptor)(cudnnFilterDescriptor_t);
    cudnnStatus_t (*SetFilterNdDescriptor)(cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, int,
                                           const int *);
    cudnnStatus_t (*CreateConvolutionDescriptor)(cudnnConvolutionDescriptor_t *);
    cudnnStatus_t (*DestroyConvolutionDescriptor)(cudnnConvolutionDescriptor_t);
    cudnnStatus_t (*SetConvolutionNdDescriptor)(cudnnConvolutionDescriptor_t, int, const int *, const int *,
                                                const int *, cudnnConvolutionMode_t, cudnnDataType_t);
    cudnnStatus_t (*SetConvolutionGroupCount)(cudnnConvolutionDescriptor_t, int);
    cudnnStatus_t (*SetConvolutionMathType)(cudnnConvolutionDescriptor_t, cudnnMathType_t);
    cudnnStatus_t (*FindConvolutionForwardAlgorithm)(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                     const cudnnFilterDescriptor_t, const cudnnConvolutionDescriptor_t,
                                                     const cudnnTensorDescriptor_t, const int, int *,
                                                     cudnnConvolutionFwdAlgoPerf_t *);
    cudnnStatus_t (*GetConvolutionForwardWorkspaceSize)(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                        const cudnnFilterDescriptor_t,
                                                        const cudnnConvolutionDescriptor_t,
                                                        const cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgo_t,
                                                        size_t *);
    cudnnStatus_t (*ConvolutionForward)(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *,
                                        const cudnnFilterDescriptor_t, const void *,
                                        const cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t, void *, size_t,
                                        const void *, const cudnnTensorDescriptor_t, void *);
    cudnnStatus_t (*AddTensor)(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *, const void *,
                               const cudnnTensorDescriptor_t, void *);
} cudnn_api;

static cudnn_api api;
static int api_loaded;
static char api_error[512];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static char preferred_library[4096]; /* fg_cudnn_use_library */

void fg_cudnn_use_library(const char *path)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (!preferred_library[0] && path && strlen(path) < sizeof preferred_library)
        snprintf(preferred_library, sizeof preferred_library, "%s", path);
    pthread_mutex_unlock(&lock);
}

static void load_api(void)
{
    const char *names[] = {preferred_library, "libcudnn.so.9", "libcudnn.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++)
        if (names[i] && names[i][0])
            h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(api_error, sizeof api_error, "cuDNN is not available (libcudnn.so.9: %s); set LD_LIBRARY_PATH or "
                                              "FUSEGEN_LIBCUDNN",
                 dlerror());
        return;
    }
#define SYM(field, name)                                                                 \
    do {                                                                                 \
        *(void **)&api.field = dlsym(h, name);                                           \
        if (!api.field) {                                                                \
            snprintf(api_error, sizeof api_error, "libcudnn lacks %s", name);            \
            return;                                                                      \
        }                                                                                \
    } while (0)
    SYM(Create, "cudnnCreate");
    SYM(Destroy, "cudnnDestroy");
    SYM(SetStream, "cudnnSetStream");
    SYM(GetErrorString, "cudnnGetErrorString");
    SYM(CreateTensorDescriptor, "cudnnCreateTensorDescriptor");
    SYM(DestroyTensorDescriptor, "cudnnDestroyTensorDescriptor");
    SYM(SetTensorNdDescriptor, "cudnnSetTensorNdDescriptor");
    SYM(CreateFilterDescriptor, "cudnnCreateFilterDescriptor");
    SYM(DestroyFilterDescriptor, "cudnnDestroyFilterDescriptor");
    SYM(SetFilterNdDescriptor, "cudnnSetFilterNdDescriptor");
    SYM(CreateConvolutionDescriptor, "cudnnCreateConvolutionDescriptor");
    SYM(DestroyConvolutionDescriptor, "cudnnDestroyConvolutionDescriptor");
    SYM(SetConvolutionNdDescriptor, "cudnnSetConvolutionNdDescriptor");
    SYM(SetConvolutionGroupCount, "cudnnSetConvolutionGroupCount");
    SYM(SetConvolutionMathType, "cudnnSetConvolutionMathType");
    SYM(FindConvolutionForwardAlgorithm, "cudnnFindConvolutionForwardAlgorithm");
    SYM(GetConvolutionForwardWorkspaceSize, "cudnnGetConvolutionForwardWorkspaceSize");
    SYM(ConvolutionForward, "cudnnConvolutionForward");
    SYM(AddTensor, "cudnnAddTensor");
#undef SYM
    api_loaded = 1;
}

enum { MAX_BATCHES = 8 };

struct fg_cudnn_conv {
    cudnnHandle_t handle;
    cudnnTensorDescriptor_t x_desc, y_desc, b_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    int nd;                      /* spatial dims + 2 */
    int in_dims[5], out_dims[5]; /* batch filled per run */
    bool tf32;
    const fg_cuda *cu;
    /* algorithm chosen per batch size */
    int n_known;
    int64_t known_batch[MAX_BATCHES];
    cudnnConvolutionFwdAlgo_t known_algo[MAX_BATCHES];
    size_t known_ws[MAX_BATCHES];
    cudnnConvolutionFwdAlgo_t algo;
    CUdeviceptr workspace;
    size_t workspace_bytes;
};

static int cudnn_fail(fg_error *err, cudnnStatus_t s, const char *what)
{
    return fg_fail(err, "cuDNN %s failed: %s", what, api.GetErrorString(s));
}

#define CK(call, what)                          \
    do {                                        \
        cudnnStatus_t s_ = (call);              \
        if (s_ != CUDNN_STATUS_SUCCESS)         \
            return cudnn_fail(err, s_, what);   \
    } while (0)

static void strides_of(const int *dims, int nd, int *strides)
{
    strides[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--)
        strides[i] = strides[i + 1] * dims[i + 1];
}

int fg_cudnn_conv_create(const fg_op *conv, bool tf32, fg_cudnn_conv **out, fg_error *err)
{
    *out = NULL;
    const fg_cuda *cu = fg_cuda_get(NULL, err); /* loaded by the context already */
    if (!cu)
        return -1;
    pthread_once(&api_once, load_api);
    if (!api_loaded)
        return fg_fail(err, "%s", api_error);
    fg_cudnn_conv *c = calloc(1, sizeof *c);
    if (!c)
        return fg_fail(err, "out of memory");
    c->cu = cu;
    c->tf32 = tf32;
    c->nd = conv->spatial + 2;
    for (int d = 1; d < c->nd; d++) {
        c->in_dims[d] = (int)conv->in.dim[d];
        c->out_dims[d] = (int)conv->out.dim[d];
    }
    int rc = -1;
    int wdims[5] = {(int)conv->out_channels, (int)(conv->in.dim[1] / conv->groups)};
    int pad[3], stride[3], dil[3];
    for (int i = 0; i < conv->spatial; i++) {
        wdims[2 + i] = conv->kernel[i];
        pad[i] = conv->padding[i];
        stride[i] = conv->stride[i];
        dil[i] = conv->dilation[i];
    }
    int bdims[5] = {1, (int)conv->out_channels, 1, 1, 1}, bstrides[5];
    strides_of(bdims, c->nd, bstrides);
    cudnnStatus_t s;
    if ((s = api.Create(&c->handle)) != CUDNN_STATUS_SUCCESS) {
        cudnn_fail(err, s, "cudnnCreate");
        free(c);
        return -1;
    }
    if ((s = api.CreateTensorDescriptor(&c->x_desc)) || (s = api.CreateTensorDescriptor(&c->y_desc)) ||
        (s = api.CreateTensorDescriptor(&c->b_desc)) || (s = api.CreateFilterDescriptor(&c->w_desc)) ||
        (s = api.CreateConvolutionDescriptor(&c->conv_desc)) ||
        (s = api.SetFilterNdDescriptor(c->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c->nd, wdims)) ||
        (s = api.SetConvolutionNdDescriptor(c->conv_desc, conv->spatial, pad, stride, dil, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT)) ||
        (s = api.SetConvolutionGroupCount(c->conv_desc, (int)conv->groups)) ||
        (s = api.SetConvolutionMathType(c->conv_desc, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH)) ||
        (s = api.SetTensorNdDescriptor(c->b_desc, CUDNN_DATA_FLOAT, c->nd, bdims, bstrides))) {
        cudnn_fail(err, s, "setting up the convolution");
        fg_cudnn_conv_destroy(c);
        return -1;
    }
    rc = 0;
    *out = c;
    return rc;
}

void fg_cudnn_conv_destroy(fg_cudnn_conv *c)
{
    if (!c)
        return;
    if (c->workspace)
        c->cu->MemFree(c->workspace);
    if (c->x_desc)
        api.DestroyTensorDescriptor(c->x_desc);
    if (c->y_desc)
        api.DestroyTensorDescriptor(c->y_desc);
    if (c->b_desc)
        api.DestroyTensorDescriptor(c->b_desc);
    if (c->w_desc)
        api.DestroyFilterDescriptor(c->w_desc);
    if (c->conv_desc)
        api.DestroyConvolutionDescriptor(c->conv_desc);
    if (c->handle)
        api.Destroy(c->handle);
    free(c);
}

static const char *algo_name(cudnnConvolutionFwdAlgo_t a)
{
    static const char *const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                        "FFT",           "FFT_TILING",            "WINOGRAD", "WINOGRAD_NONFUSED"};
    return (unsigned)a < sizeof names / sizeof *names ? names[a] : "?";
}

const char *fg_cudnn_conv_algorithm(const fg_cudnn_conv *c)
{
    return algo_name(c->algo);
}

/* The fastest algorithm for this batch size that fits the math restriction, found once. */
static int choose_algorithm(fg_cudnn_conv *c, int64_t batch, fg_error *err)
{
    for (int i = 0; i < c->n_known; i++)
        if (c->known_batch[i] == batch) {
            c->algo = c->known_algo[i];
            return 0;
        }
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int found = 0;
    CK(api.FindConvolutionForwardAlgorithm(c->handle, c->x_desc, c->w_desc, c->conv_desc, c->y_desc, 16, &found, perf),
       "searching for an algorithm");
    int pick = -1;
    for (int i = 0; i < found && pick < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && (c->tf32 || perf[i].mathType != CUDNN_TENSOR_OP_MATH))
            pick = i;
    if (pick < 0)
        return fg_fail(err, "cuDNN found no algorithm for this convolution");
    c->algo = perf[pick].algo;
    if (c->n_known < MAX_BATCHES) {
        c->known_batch[c->n_known] = batch;
        c->known_algo[c->n_known] = perf[pick].algo;
        c->known_ws[c->n_known] = perf[pick].memory;
        c->n_known++;
    }
    return 0;
}

int fg_cudnn_conv_run(fg_cudnn_conv *c, int64_t batch, CUdeviceptr x, CUdeviceptr w, CUdeviceptr bias,
                      CUdeviceptr y, CUstream stream, fg_error *err)
{
    int strides[5];
    c->in_dims[0] = c->out_dims[0] = (int)batch;
    strides_of(c->in_dims, c->nd, strides);
    CK(api.SetTensorNdDescriptor(c->x_desc, CUDNN_DATA_FLOAT, c->nd, c->in_dims, strides), "input descriptor");
    strides_of(c->out_dims, c->nd, strides);
    CK(api.SetTensorNdDescriptor(c->y_desc, CUDNN_DATA_FLOAT, c->nd, c->out_dims, strides), "output descriptor");
    CK(api.SetStream(c->handle, (cudaStream_t)stream), "cudnnSetStream");
    if (choose_algorithm(c, batch, err))
        return -1;
    size_t ws = 0;
    CK(api.GetConvolutionForwardWorkspaceSize(c->handle, c->x_desc, c->w_desc, c->conv_desc, c->y_desc, c->algo, &ws),
       "workspace size");
    if (ws > c->workspace_bytes) {
        c->cu->StreamSynchronize(stream);
        if (c->workspace)
            c->cu->MemFree(c->workspace);
        c->workspace = 0;
        c->workspace_bytes = 0;
        CUresult r = c->cu->MemAlloc(&c->workspace, ws);
        if (r != CUDA_SUCCESS)
            return fg_cuda_fail(err, r, "allocating cuDNN's workspace");
        c->workspace_bytes = ws;
    }
    const float one = 1.0f, zero = 0.0f;
    CK(api.ConvolutionForward(c->handle, &one, c->x_desc, (const void *)x, c->w_desc, (const void *)w, c->conv_desc,
                              c->algo, (void *)c->workspace, ws, &zero, c->y_desc, (void *)y),
       "cudnnConvolutionForward");
    if (bias)
        CK(api.AddTensor(c->handle, &one, c->b_desc, (const void *)bias, &one, c->y_desc, (void *)y), "adding the bias");
    return 0;
}
