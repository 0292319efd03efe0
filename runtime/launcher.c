#include "launcher.h"

#include <stdio.h>
#include <string.h>

enum { MAX_GRID_Z = 65535 };

static CUdeviceptr arg_pointer(const fg_arg *a, const fg_launch_memory *m)
{
    switch (a->kind) {
    case FG_ARG_INPUT:
        return m->input;
    case FG_ARG_OUTPUT:
        return m->output;
    case FG_ARG_BUFFER:
        return m->workspace + m->layout.buffer_offset[a->index];
    case FG_ARG_PARAM:
        return m->params[a->index];
    case FG_ARG_ACCUM:
        return m->workspace + m->layout.accum_offset[a->index];
    case FG_ARG_STATS:
        return m->workspace + m->layout.stats_offset[a->index];
    default:
        return 0;
    }
}

int fg_launch_plan(const fg_cuda *cu, const fg_plan *plan, const CUfunction *functions, const fg_launch_memory *mem,
                   int64_t batch, CUstream stream, fg_error *err)
{
    for (int i = 0; i < plan->n_passes; i++) {
        const fg_pass *ps = &plan->passes[i];
        for (int z = 0; z < ps->n_zero; z++) {
            const fg_accum *a = &plan->accums[ps->zero[z]];
            CUdeviceptr p = mem->workspace + mem->layout.accum_offset[ps->zero[z]];
            CUresult r = cu->MemsetD32Async(p, fg_accum_defs[a->kind].clear_word, mem->layout.accum_bytes[ps->zero[z]] / 4, stream);
            if (r != CUDA_SUCCESS)
                return fg_cuda_fail(err, r, "clearing statistics (cuMemsetD32Async)");
        }
        if (ps->kind == FG_PASS_CUDNN) {
            CUdeviceptr y = ps->store_output ? mem->output : mem->workspace + mem->layout.buffer_offset[ps->store_buffer];
            CUdeviceptr bias = mem->conv->bias ? mem->params[mem->conv->bias_param] : 0;
            if (fg_cudnn_conv_run(mem->cudnn, batch, mem->input, mem->params[mem->conv->weight_param], bias, y, stream,
                                  err) != 0)
                return -1;
            continue;
        }
        CUdeviceptr ptrs[FG_MAX_ARGS];
        int ints[FG_MAX_ARGS];
        void *args[FG_MAX_ARGS];
        int batch_base = 0;
        int total = (int)batch;
        for (int a = 0; a < ps->n_args; a++) {
            const fg_arg *arg = &ps->args[a];
            if (arg->kind == FG_ARG_BATCH) {
                ints[a] = total;
                args[a] = &ints[a];
            } else if (arg->kind == FG_ARG_BATCH_BASE) {
                args[a] = &batch_base;
            } else {
                ptrs[a] = arg_pointer(arg, mem);
                args[a] = &ptrs[a];
            }
        }
        const fg_launch *l = &ps->launch;
        int64_t chunks = l->per_sample ? batch : 1;
        for (int64_t base = 0; base < chunks; base += MAX_GRID_Z) {
            batch_base = (int)base;
            unsigned gz = (unsigned)(chunks - base < MAX_GRID_Z ? chunks - base : MAX_GRID_Z);
            CUresult r = cu->LaunchKernel(functions[i], (unsigned)l->grid_x, (unsigned)l->grid_y, gz, (unsigned)l->block,
                                          1, 1, (unsigned)l->smem_bytes, stream, args, NULL);
            if (r != CUDA_SUCCESS) {
                char what[128];
                snprintf(what, sizeof what, "launching %s", ps->kernel);
                return fg_cuda_fail(err, r, what);
            }
        }
    }
    return 0;
}
