/* SPDX-License-Identifier: Apache-2.0 */
#include "graph_capture.h"

#include <stddef.h>

int fg_graph_capture(const fg_cuda *cu, CUstream *capture_stream, fg_enqueue_fn enqueue, void *arg,
                     CUgraphExec *exec)
{
    if (*exec) {
        cu->GraphExecDestroy(*exec);
        *exec = NULL;
    }
    if (!*capture_stream && cu->StreamCreate(capture_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        *capture_stream = NULL;
        return -1;
    }
    if (cu->StreamBeginCapture(*capture_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS)
        return -1;
    int rc = enqueue(arg, *capture_stream);
    /* the capture ends whatever the enqueue did, so that the stream is usable again */
    CUgraph graph = NULL;
    CUresult r = cu->StreamEndCapture(*capture_stream, &graph);
    if (rc != 0 || r != CUDA_SUCCESS || !graph) {
        if (graph)
            cu->GraphDestroy(graph);
        return -1;
    }
    r = cu->GraphInstantiate(exec, graph, 0);
    cu->GraphDestroy(graph); /* the executable graph is a copy */
    if (r != CUDA_SUCCESS) {
        *exec = NULL;
        return -1;
    }
    return 0;
}

bool fg_stream_capturing(const fg_cuda *cu, CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return !cu->StreamIsCapturing || cu->StreamIsCapturing(stream, &status) != CUDA_SUCCESS ||
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}
