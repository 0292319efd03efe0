/* SPDX-License-Identifier: Apache-2.0 */
/* The context half of the public API (include/fusegen.h): errors, options, devices. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "environment.h"
#include "handles.h"
#include "nvrtc_compiler.h"

static _Thread_local char last_error[4096];

fg_status fg_api_fail(fg_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

fg_status fg_api_fail_error(fg_status status, const fg_error *err)
{
    return fg_api_fail(status, "%s", err->msg);
}

void fg_api_clear_error(void)
{
    last_error[0] = '\0';
}

FG_API const char *fg_last_error(void)
{
    return last_error;
}

FG_API const char *fg_status_name(fg_status status)
{
    static const char *const names[] = {"FG_OK",          "FG_ERR_INVALID_ARGUMENT", "FG_ERR_SPEC",
                                        "FG_ERR_IO",      "FG_ERR_TENSOR_FILE",      "FG_ERR_COMPILE",
                                        "FG_ERR_NO_DEVICE", "FG_ERR_CUDA",           "FG_ERR_UNBOUND",
                                        "FG_ERR_OUT_OF_MEMORY", "FG_ERR_INTERNAL"};
    return (unsigned)status < sizeof names / sizeof *names ? names[status] : "FG_ERR_UNKNOWN";
}

FG_API const char *fg_version(void)
{
    return FUSEGEN_VERSION;
}

FG_API void fg_context_options_init(fg_context_options *opts)
{
    if (opts) {
        memset(opts, 0, sizeof *opts);
        opts->struct_size = sizeof *opts;
    }
}

/* The default log: stderr, "fusegen: warning: ..." for warnings. */
static void log_stderr(void *user, fg_log_level level, const char *message)
{
    (void)user;
    fprintf(stderr, "fusegen: %s%s\n", level == FG_LOG_WARN ? "warning: " : "", message);
}

void fg_context_log(const fg_context *ctx, fg_log_level level, const char *fmt, ...)
{
    if ((int)level > ctx->log_level)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->log(ctx->log_user, level, msg);
}

/* The cache's and the planner knobs' warnings go to the context's log. */
static void log_warning(void *ctx, const char *msg)
{
    fg_context_log(ctx, FG_LOG_WARN, "%s", msg);
}

fg_status fg_api_enter(fg_context *ctx)
{
    if (!ctx->cu)
        return fg_api_fail(FG_ERR_NO_DEVICE, "this context is CPU-only (created with device -1)");
    CUresult r = ctx->cu->CtxSetCurrent(ctx->cuctx);
    if (r != CUDA_SUCCESS) {
        fg_error err;
        fg_cuda_fail(&err, r, "cuCtxSetCurrent");
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    return FG_OK;
}

static fg_status open_device(fg_context *ctx)
{
    fg_error err;
    ctx->cu = fg_cuda_get(ctx->env.cuda_library, &err);
    if (!ctx->cu)
        return fg_api_fail_error(FG_ERR_NO_DEVICE, &err);
    const fg_cuda *cu = ctx->cu;
    int count = 0;
    CUresult r = cu->DeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count == 0)
        return fg_api_fail(FG_ERR_NO_DEVICE, "no CUDA device: the driver reports %d devices", count);
    if (ctx->device >= count)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "device %d does not exist (%d CUDA devices)", ctx->device, count);
    if ((r = cu->DeviceGet(&ctx->dev, ctx->device)) != CUDA_SUCCESS ||
        (r = cu->DevicePrimaryCtxRetain(&ctx->cuctx, ctx->dev)) != CUDA_SUCCESS) {
        fg_cuda_fail(&err, r, "opening the device");
        return fg_api_fail_error(FG_ERR_CUDA, &err);
    }
    int major = 0, minor = 0;
    cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->dev);
    cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->dev);
    cu->DeviceGetAttribute(&ctx->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->dev);
    if (ctx->env.sm_count_cap > 0 && ctx->env.sm_count_cap < ctx->sm_count) { /* FUSEGEN_SM_COUNT: tests */
        fg_context_log(ctx, FG_LOG_INFO, "FUSEGEN_SM_COUNT: persistent convs on %d of the %d multiprocessors",
                       ctx->env.sm_count_cap, ctx->sm_count);
        ctx->sm_count = ctx->env.sm_count_cap;
    }
    cu->DeviceGetName(ctx->device_name, sizeof ctx->device_name, ctx->dev);
    if (major < 8) {
        cu->DevicePrimaryCtxRelease(ctx->dev);
        return fg_api_fail(FG_ERR_NO_DEVICE, "%s is compute capability %d.%d; fusegen needs 8.0 or newer",
                           ctx->device_name, major, minor);
    }
    /* Hopper's kernels are built for its arch-specific target, sm_90a: the wgmma engine needs
     * it (a cubin for sm_90a runs on compute capability 9.0 only, which this device is) */
    if (!ctx->arch[0])
        snprintf(ctx->arch, sizeof ctx->arch, "sm_%d%d%s", major, minor, major == 9 && minor == 0 ? "a" : "");
    return FG_OK;
}


FG_API fg_status fg_context_create(const fg_context_options *opts, fg_context **out)
{
    fg_api_clear_error();
    if (!out)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_context_create: out is NULL");
    *out = NULL;
    /* the caller's struct may be older (shorter) than ours: read only what it has */
    fg_context_options given;
    fg_context_options_init(&given);
    if (opts) {
        if (opts->struct_size < offsetof(fg_context_options, log))
            return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_context_create: opts->struct_size is %zu; initialize the "
                                                        "options with fg_context_options_init",
                               opts->struct_size);
        memcpy(&given, opts, opts->struct_size < sizeof given ? opts->struct_size : sizeof given);
        given.struct_size = sizeof given;
    }
    opts = &given;
    if (opts->device < -1)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_context_create: device %d is invalid", opts->device);
    if (opts->arch && (strlen(opts->arch) >= 16 || strncmp(opts->arch, "sm_", 3) != 0))
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_context_create: arch '%s' is not like sm_90", opts->arch);
    fg_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    ctx->device = opts->device;
    fg_env_runtime_read(&ctx->env);
    ctx->log = opts->log ? opts->log : log_stderr;
    ctx->log_user = opts->log_user;
    ctx->log_level = opts->log_level > 0 ? opts->log_level : ctx->env.log_level > 0 ? ctx->env.log_level : FG_LOG_WARN;
    if (opts->verbose && ctx->log_level < FG_LOG_INFO)
        ctx->log_level = FG_LOG_INFO;
    if (ctx->env.log_error[0])
        fg_context_log(ctx, FG_LOG_WARN, "%s", ctx->env.log_error);
    if (ctx->env.sm_count_error[0])
        fg_context_log(ctx, FG_LOG_WARN, "%s", ctx->env.sm_count_error);
    fg_plan_options_init(&ctx->plan_options, 0);
    fg_env_plan_options(&ctx->plan_options, log_warning, ctx);
    if (opts->arch)
        snprintf(ctx->arch, sizeof ctx->arch, "%s", opts->arch);
    fg_error err;
    const char *user_dir = opts->cache_dir && opts->cache_dir[0] ? opts->cache_dir : ctx->env.user_cache;
    const char *shipped = opts->cache_path ? opts->cache_path : ctx->env.shipped_caches;
    if (!user_dir[0]) {
        fg_status s = fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_context_create: %s", ctx->env.user_cache_error);
        free(ctx);
        return s;
    }
    if (fg_cache_init(&ctx->cache, user_dir, shipped, &err) != 0) {
        free(ctx);
        return fg_api_fail_error(FG_ERR_INVALID_ARGUMENT, &err);
    }
    ctx->cache.warn = log_warning;
    ctx->cache.warn_ctx = ctx;
    ctx->cache.max_bytes = ctx->env.cache_max_bytes;
    if (ctx->env.cache_max_error[0])
        fg_context_log(ctx, FG_LOG_WARN, "%s", ctx->env.cache_max_error);
    fg_cache_check_trust(&ctx->cache); /* untrusted caches are left out, with a warning */
    fg_nvrtc_use_library(ctx->env.nvrtc_library);
    fg_cudnn_use_library(ctx->env.cudnn_library);
    if (ctx->device >= 0) {
        fg_nvrtc_preload(); /* overlaps the driver's start-up */
        fg_status s = open_device(ctx);
        /* no thread of ours outlives the call: the caller may exit at once (a process that
         * exits during the preload's dlopen can crash, fg_nvrtc_preload_wait); the device's
         * start-up takes longer than the load, so this rarely waits */
        fg_nvrtc_preload_wait();
        if (s != FG_OK) {
            free(ctx);
            return s;
        }
    }
    pthread_mutex_init(&ctx->lock, NULL);
    if (fg_handle_add(ctx, FG_HANDLE_CONTEXT) != 0) {
        if (ctx->cu)
            ctx->cu->DevicePrimaryCtxRelease(ctx->dev);
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return fg_api_fail(FG_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *out = ctx;
    return FG_OK;
}

static const void *layer_owner(const void *layer)
{
    return ((const fg_layer *)layer)->ctx;
}

FG_API fg_status fg_context_destroy(fg_context *ctx)
{
    fg_api_clear_error();
    /* waits for calls in flight on the context (a load in another thread), then refuses while
     * layers of it live */
    int layers = fg_handle_remove(ctx, FG_HANDLE_CONTEXT, layer_owner);
    if (layers < 0)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_context_destroy: not a live context (NULL or destroyed)");
    if (layers)
        return fg_api_fail(FG_ERR_INVALID_ARGUMENT, "fg_context_destroy: %d layers of this context are still alive; "
                                                    "destroy them first",
                           layers);
    if (ctx->cu)
        ctx->cu->DevicePrimaryCtxRelease(ctx->dev);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return FG_OK;
}
