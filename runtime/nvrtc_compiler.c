/* SPDX-License-Identifier: Apache-2.0 */
#include "nvrtc_compiler.h"
#include "../common/clock.h"

#include <ctype.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct nvrtc_api {
    void *handle;
    nvrtcResult (*version)(int *, int *);
    nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*log)(nvrtcProgram, char *);
    nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*cubin)(nvrtcProgram, char *);
    nvrtcResult (*destroy)(nvrtcProgram *);
    const char *(*error_string)(nvrtcResult);
    nvrtcResult (*num_archs)(int *);
    nvrtcResult (*archs)(int *);
    int n_archs;       /* the architectures this NVRTC compiles for, x 10 (80, 90, ...) */
    int arch_list[64];
    char path[512];    /* which library was loaded */
    char load_error[2048];
} nvrtc_api;

static nvrtc_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static char preferred_library[4096]; /* fg_nvrtc_use_library */

void fg_nvrtc_use_library(const char *path)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (!preferred_library[0] && path && strlen(path) < sizeof preferred_library)
        snprintf(preferred_library, sizeof preferred_library, "%s", path);
    pthread_mutex_unlock(&lock);
}

/* Where NVRTC is looked for, in order: the caller's choice (FUSEGEN_NVRTC), the loader's
 * search path for CUDA 13 and 12 (LD_LIBRARY_PATH, ldconfig: a toolkit, or the pip wheels'
 * lib folders when the binding or the user put them there), the toolkit found at build time,
 * /usr/local/cuda. The supported CUDA versions are 12 (12.1 or newer: --split-compile) and 13
 * (docs/api.md). */
static void load_api(void)
{
    char toolkit13[512], toolkit12[512];
    snprintf(toolkit13, sizeof toolkit13, "%s/libnvrtc.so.13", FUSEGEN_CUDA_LIBDIR);
    snprintf(toolkit12, sizeof toolkit12, "%s/libnvrtc.so.12", FUSEGEN_CUDA_LIBDIR);
    const char *candidates[] = {preferred_library, "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", toolkit13,
                                toolkit12, "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12"};
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && !api.handle; i++)
        if (candidates[i] && candidates[i][0] && (api.handle = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL)))
            snprintf(api.path, sizeof api.path, "%s", candidates[i]);
    if (!api.handle) {
        snprintf(api.load_error, sizeof api.load_error,
                 "cannot load libnvrtc (tried %s%s%slibnvrtc.so.13, libnvrtc.so.12, libnvrtc.so, %s, %s and "
                 "/usr/local/cuda/lib64): install the CUDA toolkit's NVRTC (CUDA 12.1 or newer; pip: "
                 "nvidia-cuda-nvrtc-cu12, with its lib folder on LD_LIBRARY_PATH) or point FUSEGEN_NVRTC at "
                 "libnvrtc.so",
                 preferred_library[0] ? "FUSEGEN_NVRTC=" : "", preferred_library, preferred_library[0] ? ", " : "",
                 toolkit13, toolkit12);
        return;
    }
#define SYM(field, name)                                                                               \
    do {                                                                                               \
        *(void **)&api.field = dlsym(api.handle, name);                                                \
        if (!api.field) {                                                                              \
            snprintf(api.load_error, sizeof api.load_error, "libnvrtc lacks %s: too old?", name);      \
            dlclose(api.handle);                                                                       \
            api.handle = NULL;                                                                         \
            return;                                                                                    \
        }                                                                                              \
    } while (0)
    SYM(version, "nvrtcVersion");
    SYM(create, "nvrtcCreateProgram");
    SYM(compile, "nvrtcCompileProgram");
    SYM(log_size, "nvrtcGetProgramLogSize");
    SYM(log, "nvrtcGetProgramLog");
    SYM(cubin_size, "nvrtcGetCUBINSize");
    SYM(cubin, "nvrtcGetCUBIN");
    SYM(destroy, "nvrtcDestroyProgram");
    SYM(error_string, "nvrtcGetErrorString");
    SYM(num_archs, "nvrtcGetNumSupportedArchs");
    SYM(archs, "nvrtcGetSupportedArchs");
#undef SYM
    int n = 0;
    if (api.num_archs(&n) == NVRTC_SUCCESS && n > 0 && n <= (int)(sizeof api.arch_list / sizeof *api.arch_list) &&
        api.archs(api.arch_list) == NVRTC_SUCCESS)
        api.n_archs = n;
}


/* Loading libnvrtc (~100 MB, relocated at dlopen) takes 6-10 ms: started on its own thread
 * while a GPU context initializes (which takes longer), it is off the path of the first
 * layer loaded from a warm cache, whose key still needs NVRTC's version. */
static void *preload_thread(void *unused)
{
    (void)unused;
    pthread_once(&api_once, load_api);
    return NULL;
}

static pthread_once_t preload_once = PTHREAD_ONCE_INIT;
static atomic_bool preload_started;

static void start_preload(void)
{
    pthread_t th;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* no thread: the first fg_nvrtc_version loads the library itself */
    atomic_store(&preload_started, pthread_create(&th, &attr, preload_thread, NULL) == 0);
    pthread_attr_destroy(&attr);
}

void fg_nvrtc_preload(void)
{
    pthread_once(&preload_once, start_preload); /* one thread per process, not per context */
}

void fg_nvrtc_preload_wait(void)
{
    if (atomic_load(&preload_started))
        pthread_once(&api_once, load_api); /* returns once the preload thread's load is done */
}

static int ensure_api(fg_error *err)
{
    pthread_once(&api_once, load_api);
    if (!api.handle)
        return fg_fail(err, "%s", api.load_error);
    return 0;
}

int fg_nvrtc_check_arch(const char *arch, fg_error *err)
{
    if (ensure_api(err))
        return -1;
    int major = 0, minor = 0;
    api.version(&major, &minor);
    int sm = 0;
    char suffix[8] = "";
    if (sscanf(arch, "sm_%d%7s", &sm, suffix) < 1 || (suffix[0] && strcmp(suffix, "a") && strcmp(suffix, "f")))
        return fg_fail(err, "'%s' is not an architecture like sm_90", arch);
    char list[512] = "";
    size_t len = 0;
    for (int i = 0; i < api.n_archs; i++) {
        if (api.arch_list[i] == sm)
            return 0;
        len += (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0, "%ssm_%d", i ? ", " : "",
                                api.arch_list[i]);
    }
    if (api.n_archs == 0)
        return 0; /* this NVRTC did not say: let it decide */
    return fg_fail(err, "architecture %s is not supported by NVRTC %d.%d (%s), which compiles for %s", arch, major,
                   minor, api.path, list);
}

int fg_nvrtc_version(int *major, int *minor, fg_error *err)
{
    if (ensure_api(err))
        return -1;
    if (api.version(major, minor) != NVRTC_SUCCESS)
        return fg_fail(err, "nvrtcVersion failed");
    return 0;
}

/* The options, in one place: they are part of every cache key. --ptxas-options=-v makes
 * ptxas report registers and spills into the log, which the cache keeps and the tests
 * check. -lineinfo costs nothing at run time and makes profiles readable.
 * --split-compile=4 lets NVRTC optimize a layer's kernels on up to 4 threads: the same
 * SASS (checked on KB23's cubin), KB23's compile 2.07 -> 1.58 s on 2 cores. A fixed count
 * (not 0, "all cores"): `fusegen build -j N` already runs N compiles at once, and the
 * option must be the same everywhere for shipped caches to match. */
static const char *const base_options[] = {"--std=c++17", "--ptxas-options=-v", "-lineinfo", "--split-compile=4"};

void fg_nvrtc_options_string(const char *arch, char *buf, size_t cap)
{
    int len = snprintf(buf, cap, "--gpu-architecture=%s", arch);
    for (size_t i = 0; i < sizeof base_options / sizeof *base_options && len >= 0 && (size_t)len < cap; i++)
        len += snprintf(buf + len, cap - (size_t)len, " %s", base_options[i]);
}

int fg_parse_ptxas_report(const char *log, fg_kernel_resources *out, int cap)
{
    int n = 0, cur = -1; /* cur: the slot of the function being read, -1 when it did not fit */
    for (const char *line = log; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[512];
        if (len >= sizeof buf)
            len = sizeof buf - 1;
        memcpy(buf, line, len);
        buf[len] = '\0';
        const char *p;
        if ((p = strstr(buf, "Function properties for ")) != NULL) {
            cur = n < cap ? n++ : -1;
            if (cur >= 0) {
                memset(&out[cur], 0, sizeof out[cur]);
                snprintf(out[cur].name, sizeof out[cur].name, "%s", p + strlen("Function properties for "));
            }
        } else if (cur >= 0 && strstr(buf, "bytes stack frame") != NULL) {
            /* "ptxas         .     N bytes stack frame, S bytes spill stores, L bytes spill loads" */
            const char *q = buf;
            while (*q && !isdigit((unsigned char)*q))
                q++;
            sscanf(q, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &out[cur].stack_frame,
                   &out[cur].spill_stores, &out[cur].spill_loads);
        } else if (cur >= 0 && (p = strstr(buf, "Used ")) != NULL) {
            sscanf(p, "Used %d registers", &out[cur].registers);
        }
        line = end ? end + 1 : NULL;
    }
    return n;
}

/* Keeps a failing source where the user can open it at the log's line numbers. */
static void save_failed_source(const char *source, const char *source_name, const char *dir, char *path, size_t cap)
{
    path[0] = '\0';
    if (!dir || !dir[0])
        return;
    snprintf(path, cap, "%s/fusegen-failed-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        path[0] = '\0';
        return;
    }
    size_t len = strlen(source);
    ssize_t w = write(fd, source, len);
    close(fd);
    if (w != (ssize_t)len)
        path[0] = '\0';
    (void)source_name;
}

/* A line of the log with a ptxas warning about wgmma: "ptxas warning : (C7511) ...
 * wgmma.mma_async instructions are serialized ...", any C75xx code, or a line naming wgmma
 * and a warning. Line by line, and not the front end's "x.cu(12): warning #177-D": an unused
 * variable in a source whose layer is named "..._wgmma" is not one. */
bool fg_nvrtc_log_has_wgmma_warning(const char *log)
{
    for (const char *line = log; line && *line;) {
        const char *end = strchr(line, '\n');
        int n = end ? (int)(end - line) : (int)strlen(line);
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", n < (int)sizeof buf ? n : (int)sizeof buf - 1, line);
        bool front_end = strstr(buf, "): warning #") != NULL; /* "x.cu(12): warning #177-D: ..." */
        if (strstr(buf, "(C75") || (!front_end && strstr(buf, "wgmma") && strstr(buf, "warning")))
            return true;
        line = end ? end + 1 : NULL;
    }
    return false;
}

int fg_nvrtc_compile(const char *source, const char *source_name, const char *arch, const char *failed_dir,
                     fg_compiled *out, fg_error *err)
{
    memset(out, 0, sizeof *out);
    if (ensure_api(err))
        return -1;
    double t0 = fg_seconds_now();
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    const char *opts[8] = {archopt};
    int nopts = 1;
    for (size_t i = 0; i < sizeof base_options / sizeof *base_options; i++)
        opts[nopts++] = base_options[i];
    nvrtcProgram prog;
    nvrtcResult r = api.create(&prog, source, source_name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return fg_fail(err, "%s: nvrtcCreateProgram: %s", source_name, api.error_string(r));
    r = api.compile(prog, nopts, opts);
    size_t log_size = 0;
    api.log_size(prog, &log_size);
    char *log = malloc(log_size + 1);
    if (!log) {
        api.destroy(&prog);
        return fg_fail(err, "out of memory");
    }
    log[0] = '\0';
    if (log_size)
        api.log(prog, log);
    log[log_size] = '\0';
    int rc = 0;
    if (r != NVRTC_SUCCESS) {
        char saved[512];
        save_failed_source(source, source_name, failed_dir, saved, sizeof saved);
        rc = fg_fail(err, "%s: NVRTC could not compile the generated source for %s (%s)%s%s:\n%s", source_name, arch,
                     api.error_string(r), saved[0] ? "; source saved as " : "", saved, log);
    } else {
        out->n_kernels = fg_parse_ptxas_report(log, out->kernels, FG_MAX_KERNELS);
        /* ptxas's C75xx warnings: wgmma serialized (an accumulator touched between wgmmas, a
         * missing fence): a generator bug that costs the engine most of its speed */
        out->wgmma_warnings = fg_nvrtc_log_has_wgmma_warning(log);
        size_t size = 0;
        if (api.cubin_size(prog, &size) != NVRTC_SUCCESS || size == 0 || !(out->cubin = malloc(size))) {
            rc = fg_fail(err, "%s: NVRTC produced no cubin for %s", source_name, arch);
        } else if (api.cubin(prog, (char *)out->cubin) != NVRTC_SUCCESS) {
            rc = fg_fail(err, "%s: nvrtcGetCUBIN failed", source_name);
        } else {
            out->size = size;
        }
    }
    free(log);
    api.destroy(&prog);
    out->seconds = fg_seconds_now() - t0;
    if (rc)
        fg_compiled_free(out);
    return rc;
}

void fg_compiled_free(fg_compiled *c)
{
    if (c) {
        free(c->cubin);
        c->cubin = NULL;
        c->size = 0;
    }
}
