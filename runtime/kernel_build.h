/* SPDX-License-Identifier: Apache-2.0 */
/* Getting a layer's cubin for one architecture: find it through its plan alias, or render,
 * look the source up in the caches, compile with NVRTC on a miss, store the result. Shared
 * by `fusegen build`, the runtime's JIT and the tests. */
#ifndef FG_KERNEL_BUILD_H
#define FG_KERNEL_BUILD_H

#include <stdbool.h>

#include "../gen/ir.h"
#include "../gen/planner.h"
#include "cache.h"
#include "nvrtc_compiler.h"

typedef struct fg_built {
    unsigned char *cubin;
    size_t cubin_size;
    char key[FG_CACHE_KEY_HEX + 1];
    bool from_cache;     /* found in a cache (no compile) */
    bool shipped;        /* found in a shipped cache */
    bool stored;         /* compiled and written to the cache */
    char store_error[1024]; /* why it could not be stored, when compiled but not stored */
    double compile_seconds; /* this compile's, or (from a cache) the entry's when it was compiled */
    bool rendered;       /* fg_build_layer rendered the source (no plan alias led to the entry) */
    char plan_key[FG_CACHE_KEY_HEX + 1]; /* the plan key the entry records ("" if none): the
                                          * (IR, plan) it was built for, what a plan alias to it
                                          * must match */
    double render_seconds;
    int n_kernels;
    fg_kernel_resources kernels[FG_MAX_KERNELS];
} fg_built;

/* This fusegen's identity for its caches: its version, the digests of the templates and of
 * the generator's C sources, and the version of the NVRTC it loaded (loading it, so it can
 * fail). The edges (the context's first prepare, the CLI) call it once and give it to the
 * cache: fg_cache.identity. */
int fg_build_identity(fg_cache_identity *id, fg_error *err);

/* Where builds look, store and leave failures: given by the caller (the context, or the
 * CLI), never read from the environment here. */
typedef struct fg_builder {
    fg_cache *cache;
    const char *store_dir;          /* NULL: the cache's user dir (`fusegen build --cache DIR`: DIR) */
    const char *failed_source_dir;  /* where a source NVRTC rejects is saved (TMPDIR); NULL: not saved */
} fg_builder;

/* `source` is the rendered source of (ir, plan); `plan_key` (fg_plan_key; NULL: unknown) is
 * recorded in a new entry, so that a plan alias can prove it names an entry of exactly this
 * IR and plan. */
int fg_build_cubin(const fg_builder *b, const fg_layer_ir *ir, const char *source, const char *arch,
                   const char *plan_key, fg_built *out, fg_error *err);
void fg_built_free(fg_built *b);

/* The plan alias key of (ir, plan) for arch (cache.h): fg_render is a function of the IR,
 * the plan and the templates alone, so this names the source without rendering it. The
 * spec's path is left out: the source does not contain it. */
void fg_plan_key(const fg_cache_identity *id, const fg_layer_ir *ir, const fg_plan *plan, const char *arch,
                 char key[FG_CACHE_KEY_HEX + 1]);

/* Records plan_key as an alias of b's entry (in store_dir, or the user cache) when b came
 * from a cache or was stored and the entry records that plan key; 0 also when there is
 * nothing to record. */
int fg_build_record_alias(const fg_builder *builder, const char *plan_key, const fg_built *b, fg_error *err);

/* 1 with `out` holding the cubin when the plan alias of (ir, plan) for arch names a valid
 * entry that records exactly that plan (fg_build_layer's lookup: no rendering, no compile),
 * 0 when not (out->plan_key: the alias key looked up), -1 on an error. */
int fg_build_find(const fg_builder *b, const fg_layer_ir *ir, const fg_plan *plan, const char *arch, fg_built *out,
                  fg_error *err);

/* A layer's cubin for arch: through its plan alias when that names a valid entry (no
 * rendering), else renders, fg_build_cubin's, and records the alias (in store_dir, or the
 * user cache) once the entry is in a cache. */
int fg_build_layer(const fg_builder *b, const fg_layer_ir *ir, const fg_plan *plan, const char *arch, fg_built *out,
                   fg_error *err);

/* The description stored with an entry (JSON): layer, spec, arch, plan key (may be NULL),
 * kernels and resources. */
char *fg_build_describe(const fg_layer_ir *ir, const char *arch, const char *plan_key, const fg_compiled *c);

/* The plan key a description records ("" and -1 when none) and the compile time it took. */
int fg_describe_origin(const char *json, char key[FG_CACHE_KEY_HEX + 1], double *compile_seconds);

/* Reads the kernels' resources back from an entry's description. */
int fg_describe_parse(const char *json, char *layer, size_t layer_cap, fg_kernel_resources *kernels, int cap);

#endif
