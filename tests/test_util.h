/* SPDX-License-Identifier: Apache-2.0 */
/* Shared helpers of the CPU tests: temporary directories, files, loading specs with
 * assertions. Every test that touches a kernel cache works in its own mkdtemp directory
 * and never in the user's ~/.cache. */
#ifndef FG_TEST_UTIL_H
#define FG_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four headers above first */
#include <cmocka.h>

#include "ir.h"
#include "planner.h"
#include "render.h"
#include "../runtime/kernel_build.h"

/* A builder (runtime/kernel_build.h) on `cache` storing into `store_dir` (NULL: the user
 * cache), saving failed sources under $TMPDIR (the test's own directory). */
#define FGT_BUILDER(cache_, dir_)                                                                            \
    (&(const fg_builder){.cache = (cache_), .store_dir = (dir_), .failed_source_dir = getenv("TMPDIR")})

/* The six reference specs of PROBLEMS.md, in specs/. */
#define FGT_N_REFERENCE_SPECS 6
extern const char *const fgt_reference_specs[FGT_N_REFERENCE_SPECS]; /* "kb17", ... */

/* A new empty directory under $TMPDIR (or /tmp); the caller frees the string. */
char *fgt_tmpdir(const char *tag);
/* Removes a directory tree (making read-only folders writable first). */
void fgt_rmtree(const char *path);
/* Points every cache default ($FUSEGEN_CACHE_DIR, $XDG_CACHE_HOME, $FUSEGEN_CACHE_PATH,
 * $TMPDIR) into `dir`, so that nothing a test runs can reach the user's caches. Also
 * applies $FGT_TEST_FILTER / $FGT_TEST_SKIP (cmocka name patterns) when set. */
void fgt_isolate_environment(const char *dir);

/* Whole-file helpers; read returns a malloc'd buffer (NUL-terminated) or NULL. */
unsigned char *fgt_read_file(const char *path, size_t *len);
int fgt_write_file(const char *path, const void *data, size_t len);

/* "<source dir>/specs/<name>.lua" */
const char *fgt_spec_path(const char *name, char *buf, size_t cap);

/* Loading that fails the test (with the loader's message) when the spec is refused. The
 * IR is heap-allocated: fg_layer_ir is large. */
fg_layer_ir *fgt_load_string_at(const char *source, const char *file, int line);
fg_layer_ir *fgt_load_spec_at(const char *name, const char *file, int line);
fg_plan *fgt_plan_at(const fg_layer_ir *ir, int force_strategy, const char *file, int line);
#define fgt_load_string(source) fgt_load_string_at((source), __FILE__, __LINE__)
#define fgt_load_spec(name) fgt_load_spec_at((name), __FILE__, __LINE__)
#define fgt_plan(ir, force_strategy) fgt_plan_at((ir), (force_strategy), __FILE__, __LINE__)
/* The same with every planner option given (engine, tiles, ...). */
fg_plan *fgt_plan_with_at(const fg_layer_ir *ir, const fg_plan_options *opts, const char *file, int line);
#define fgt_plan_with(ir, opts) fgt_plan_with_at((ir), (opts), __FILE__, __LINE__)

/* strstr that fails the test with both strings shown when `needle` is missing. Failures
 * of these helpers are reported at the caller's file and line. */
void fgt_assert_contains_at(const char *haystack, const char *needle, const char *file, int line);
void fgt_assert_not_contains_at(const char *haystack, const char *needle, const char *file, int line);
#define fgt_assert_contains(h, n) fgt_assert_contains_at((h), (n), __FILE__, __LINE__)
#define fgt_assert_not_contains(h, n) fgt_assert_not_contains_at((h), (n), __FILE__, __LINE__)
int fgt_count(const char *haystack, const char *needle);

/* Each kernel of `source` (one a pass, in pass order) is written for the block its pass
 * launches: its __launch_bounds__ is launch.block. A kernel that strides by a fixed thread
 * count misses work under a smaller block, and nothing else in the source shows it. */
void fgt_assert_launch_bounds_at(const char *source, const fg_plan *plan, const char *what, const char *file,
                                 int line);
#define fgt_assert_launch_bounds(src, plan, what) fgt_assert_launch_bounds_at((src), (plan), (what), __FILE__, __LINE__)

/* Shape assertions: FGT_ASSERT_SHAPE(&op->out, 1, 6, 6, 6) (dim[0], the batch, is 1). */
void fgt_assert_shape_at(const fg_shape *s, const int64_t *dims, int rank, const char *where, const char *file,
                         int line);
#define fgt_assert_shape(s, dims, rank, where) fgt_assert_shape_at((s), (dims), (rank), (where), __FILE__, __LINE__)
#define FGT_ASSERT_SHAPE(shape, ...)                                                                         \
    fgt_assert_shape_at((shape), (const int64_t[]){__VA_ARGS__},                                             \
                        (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), #shape, __FILE__, __LINE__)
/* The parameter `name` exists with exactly these dims; returns its index. */
int fgt_assert_param_at(const fg_layer_ir *ir, const char *name, const int64_t *dims, int rank, const char *file,
                        int line);
#define FGT_ASSERT_PARAM(ir, name, ...)                                                                      \
    fgt_assert_param_at((ir), (name), (const int64_t[]){__VA_ARGS__},                                        \
                        (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), __FILE__, __LINE__)
int fgt_find_param(const fg_layer_ir *ir, const char *name);

double fgt_now(void);

/* A layer loaded from source text (`name` in messages), planned with the default options and
 * rendered: what the cache tests compile and store. Returns 0, or -1 with the reason on
 * stderr (for cmocka setup functions, which report failure by their return value). */
typedef struct fgt_rendered_layer {
    fg_layer_ir *ir;
    fg_plan *plan;
    fg_rendered src;
} fgt_rendered_layer;
int fgt_render_layer(const char *name, const char *source, fgt_rendered_layer *out);
void fgt_rendered_layer_free(fgt_rendered_layer *r);

/* fg_cache_init, then the cache's identity (fg_build_identity: this fusegen, the NVRTC it
 * loads), as the context and the CLI give it. */
int fgt_cache_init(fg_cache *cache, const char *user_dir, const char *shipped, fg_error *err);

/* "dir/name", malloc'd. */
char *fgt_join(const char *dir, const char *name);

/* A layer that uses every op kind. */
extern const char fgt_every_op_spec[];

#endif
