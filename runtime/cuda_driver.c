/* SPDX-License-Identifier: Apache-2.0 */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fg_cuda cuda;
static char load_error[1024];
static int loaded, tried;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static void load(const char *preferred)
{
    const char *names[] = {preferred, "libcuda.so.1", "libcuda.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++)
        if (names[i] && names[i][0])
            h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error,
                 "no CUDA driver: libcuda.so.1 cannot be loaded (%s); GPU work needs an NVIDIA driver, everything "
                 "else (plan, gen, build, run --device cpu) works without one",
                 dlerror());
        return;
    }
#define SYM(field, name)                                                                     \
    do {                                                                                     \
        *(void **)&cuda.field = dlsym(h, name);                                              \
        if (!cuda.field) {                                                                   \
            snprintf(load_error, sizeof load_error, "the CUDA driver lacks %s: too old", name); \
            return;                                                                          \
        }                                                                                    \
    } while (0)
    SYM(Init, "cuInit");
    SYM(DeviceGetCount, "cuDeviceGetCount");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
    SYM(DeviceGetName, "cuDeviceGetName");
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(CtxGetCurrent, "cuCtxGetCurrent");
    SYM(CtxSynchronize, "cuCtxSynchronize");
    SYM(ModuleLoadData, "cuModuleLoadData");
    SYM(ModuleUnload, "cuModuleUnload");
    SYM(ModuleGetFunction, "cuModuleGetFunction");
    SYM(FuncSetAttribute, "cuFuncSetAttribute");
    SYM(LaunchKernel, "cuLaunchKernel");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemFree, "cuMemFree_v2");
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    SYM(MemsetD32Async, "cuMemsetD32Async");
    SYM(MemsetD8Async, "cuMemsetD8Async");
    SYM(StreamCreate, "cuStreamCreate");
    SYM(StreamDestroy, "cuStreamDestroy_v2");
    SYM(StreamSynchronize, "cuStreamSynchronize");
    SYM(EventCreate, "cuEventCreate");
    SYM(EventDestroy, "cuEventDestroy_v2");
    SYM(EventRecord, "cuEventRecord");
    SYM(EventSynchronize, "cuEventSynchronize");
    SYM(EventElapsedTime, "cuEventElapsedTime_v2");
    SYM(StreamWaitEvent, "cuStreamWaitEvent");
    SYM(StreamBeginCapture, "cuStreamBeginCapture_v2");
    SYM(StreamEndCapture, "cuStreamEndCapture");
    SYM(StreamIsCapturing, "cuStreamIsCapturing");
    SYM(GraphInstantiate, "cuGraphInstantiateWithFlags");
    SYM(GraphLaunch, "cuGraphLaunch");
    SYM(GraphExecDestroy, "cuGraphExecDestroy");
    SYM(GraphDestroy, "cuGraphDestroy");
    SYM(GraphGetNodes, "cuGraphGetNodes");
    SYM(GraphNodeGetType, "cuGraphNodeGetType");
    SYM(GetErrorName, "cuGetErrorName");
    SYM(GetErrorString, "cuGetErrorString");
#undef SYM
    /* optional entry points: a driver without them still loads (fg_cuda says which are NULL) */
    *(void **)&cuda.TensorMapEncodeIm2col = dlsym(h, "cuTensorMapEncodeIm2col");
    *(void **)&cuda.DriverGetVersion = dlsym(h, "cuDriverGetVersion");
    CUresult r = cuda.Init(0);
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuda.GetErrorName(r, &name);
        snprintf(load_error, sizeof load_error, "no CUDA device: cuInit failed (%s)", name);
        return;
    }
    loaded = 1;
}

const fg_cuda *fg_cuda_get(const char *preferred, fg_error *err)
{
    pthread_mutex_lock(&load_lock);
    if (!tried)
        load(preferred);
    tried = 1;
    pthread_mutex_unlock(&load_lock);
    if (!loaded) {
        fg_fail(err, "%s", load_error);
        return NULL;
    }
    return &cuda;
}

int fg_cuda_fail(fg_error *err, CUresult r, const char *what)
{
    const char *name = "CUDA error", *desc = "";
    if (loaded) {
        cuda.GetErrorName(r, &name);
        cuda.GetErrorString(r, &desc);
    }
    return fg_fail(err, "%s failed: %s (%s)", what, name ? name : "?", desc ? desc : "");
}
