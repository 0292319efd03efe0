/* SPDX-License-Identifier: Apache-2.0 */
/* NVRTC: generated source -> cubin for one architecture. libnvrtc is loaded with dlopen on
 * first use (so nothing needs it to start), from the caller's choice (FUSEGEN_NVRTC), the
 * loader's search path, or the CUDA toolkit found at build time. */
#ifndef FG_NVRTC_COMPILER_H
#define FG_NVRTC_COMPILER_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/diag.h"

#define FG_MAX_KERNELS 32

/* What ptxas reported for one kernel. */
typedef struct fg_kernel_resources {
    char name[96];
    int registers;
    int stack_frame;  /* bytes */
    int spill_stores; /* bytes */
    int spill_loads;  /* bytes */
} fg_kernel_resources;

typedef struct fg_compiled {
    unsigned char *cubin;
    size_t size;
    int n_kernels;
    fg_kernel_resources kernels[FG_MAX_KERNELS];
    double seconds;
    bool wgmma_warnings;    /* ptxas warned about wgmma (serialized: a generator bug; tests fail on it) */
} fg_compiled;

/* The library to try first (FUSEGEN_NVRTC, read by the caller); only the first call before
 * NVRTC is loaded counts. */
void fg_nvrtc_use_library(const char *path);

/* Starts loading libnvrtc on a background thread (once per process; a no-op after that). */
void fg_nvrtc_preload(void);
/* Waits until a preload started by fg_nvrtc_preload has finished (no-op without one). A
 * process that exits while another thread is inside dlopen of libnvrtc can crash in the
 * library's constructors or destructors (seen: a GPU test skipping on a machine without a
 * device, under load), so fg_context_create waits before it returns. */
void fg_nvrtc_preload_wait(void);

/* NVRTC's version ("13.0"), loading the library if needed (or waiting for the preload). */
int fg_nvrtc_version(int *major, int *minor, fg_error *err);

/* 0 when the loaded NVRTC compiles for `arch` ("sm_90", "sm_90a"); else -1 with a message
 * listing what it supports (nvrtcGetSupportedArchs). */
int fg_nvrtc_check_arch(const char *arch, fg_error *err);

/* The options every compile uses for `arch` ("sm_90"), as one string (part of cache keys). */
void fg_nvrtc_options_string(const char *arch, char *buf, size_t cap);

/* Compiles `source` (named `source_name` in diagnostics). On failure the message holds
 * NVRTC's log, and the source is saved in `failed_dir` (TMPDIR, read by the caller; NULL:
 * not saved) so the line numbers can be followed. */
int fg_nvrtc_compile(const char *source, const char *source_name, const char *arch, const char *failed_dir,
                     fg_compiled *out, fg_error *err);
void fg_compiled_free(fg_compiled *c);

/* Parses ptxas' "-v" report into per-kernel resources (exposed for tests). */
int fg_parse_ptxas_report(const char *log, fg_kernel_resources *out, int cap);

/* Whether NVRTC's log holds a ptxas warning about wgmma (C75xx: serialized wgmma), not a
 * front-end warning that merely names a "wgmma" source. */
bool fg_nvrtc_log_has_wgmma_warning(const char *log);

#endif
