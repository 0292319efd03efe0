/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA driver API, loaded with dlopen on first use. Nothing links libcuda, so every
 * binary starts on machines without a GPU driver; GPU calls then fail with a clear
 * "no CUDA driver" message instead. Only the entry points fusegen uses are resolved. */
#ifndef FG_CUDA_DRIVER_H
#define FG_CUDA_DRIVER_H

#include <cuda.h>

#include "../common/diag.h"

typedef struct fg_cuda {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*GraphExecDestroy)(CUgraphExec);
    CUresult (*GraphDestroy)(CUgraph);
    CUresult (*GraphGetNodes)(CUgraph, CUgraphNode *, size_t *);      /* the GPU tests count a graph's */
    CUresult (*GraphNodeGetType)(CUgraphNode, CUgraphNodeType *);     /* kernels */
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
    /* optional: NULL where the driver lacks them (a CUDA 11 driver); only the wgmma conv's A by
     * TMA (the default where the planner allows it) needs them, and its launch fails with a
     * message naming FUSEGEN_WGMMA_A_TMA=1 without them */
    CUresult (*TensorMapEncodeIm2col)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                      const cuuint64_t *, const int *, const int *, cuuint32_t, cuuint32_t,
                                      const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                      CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    CUresult (*DriverGetVersion)(int *);
} fg_cuda;

/* The loaded driver (cuInit done), or NULL with err saying why. Thread-safe. The first call
 * loads it, trying `preferred` (FUSEGEN_LIBCUDA, read by the caller; NULL or "": none)
 * before libcuda.so.1 and libcuda.so; later calls return what the first one found. */
const fg_cuda *fg_cuda_get(const char *preferred, fg_error *err);

/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for a failed call; returns -1. */
int fg_cuda_fail(fg_error *err, CUresult r, const char *what);

#endif
