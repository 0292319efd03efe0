/* SPDX-License-Identifier: Apache-2.0 */
/* Capturing a run's launches into a CUDA graph, for a layer's runs (runtime/api_layer.c) and
 * a block's (runtime/api_block.c). The launches are enqueued on a private stream while it is
 * being captured, so that nothing of the caller's stream is recorded and nothing runs; the
 * caller's stream then runs the whole graph with one cuGraphLaunch, instead of one launch per
 * kernel and per memset. */
#ifndef FG_GRAPH_CAPTURE_H
#define FG_GRAPH_CAPTURE_H

#include <stdbool.h>

#include "cuda_driver.h"

/* Enqueues a run's work on `stream`: 0, or -1 (the enqueuer keeps its own error). */
typedef int (*fg_enqueue_fn)(void *arg, CUstream stream);

/* Replaces *exec (destroyed first; NULL on failure) with the instantiated graph of what
 * enqueue(arg, stream) enqueues on *capture_stream, created at the first capture as a
 * non-blocking stream (the legacy stream must not join the capture). The capture is
 * thread-local (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL): other threads' CUDA calls neither join
 * it nor break it; enqueue must make no call a capture forbids on this thread (allocations,
 * synchronizations). Returns 0, or -1 when the enqueue, the capture or the instantiation
 * failed. */
int fg_graph_capture(const fg_cuda *cu, CUstream *capture_stream, fg_enqueue_fn enqueue, void *arg,
                     CUgraphExec *exec);

/* Whether `stream` is being captured, by the caller (torch.cuda.graph, cudaStreamBeginCapture):
 * then a run may only enqueue what the caller's graph is to hold -- no timing, no one-time
 * work, no synchronization. A query that fails counts as a capture (on the legacy stream,
 * cuStreamIsCapturing fails while another stream captures). */
bool fg_stream_capturing(const fg_cuda *cu, CUstream stream);

#endif
