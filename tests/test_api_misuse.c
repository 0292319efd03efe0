/* SPDX-License-Identifier: Apache-2.0 */
/* The C API (include/fusegen.h) misused in every way a caller can: NULL handles and
 * out-pointers, destroyed handles (use after destroy, double destroy), a context passed as
 * a layer and the reverse, pointers that were never handles, wrong byte sizes, unknown
 * parameter names, bad batches, a context destroyed while its layers live, GPU-only calls
 * on a CPU-only context, status names out of range. Every call must return a status and
 * set a message, never crash nor touch freed memory (the suite runs under ASan and
 * valgrind: the live-handle registry of runtime/handles.c compares addresses and never
 * dereferences a handle it does not know). fg_last_error() is per thread.
 *
 * Also: specs loaded one after another into the same context cannot see or change each
 * other (each gets its own Lua state; a spec that poisons every table it can reach leaves
 * the next spec unaffected).
 *
 * Everything here uses CPU-only contexts (device -1): it runs without a GPU. */
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusegen.h"
#include "test_util.h"

/* conv (weight [4, 2, 3, 3], bias [4]) -> mul by a [4, 1, 1] parameter: three params */
static const char *const spec = "return layer \"misuse\" {\n"
                                "  input = { \"N\", 2, 6, 6 },\n"
                                "  conv2d { name = \"conv\", out_channels = 4, kernel = 3 },\n"
                                "  mul { param = \"scale\", shape = { 4, 1, 1 } },\n"
                                "}\n";
#define WEIGHT_COUNT (4 * 2 * 3 * 3)
#define IN_COUNT (2 * 6 * 6)
#define OUT_COUNT (4 * 4 * 4)

static int calls_checked, failures_checked; /* reported at the end */

#define EXPECT(call, status)                                                                                   \
    do {                                                                                                       \
        fg_status s_ = (call);                                                                                 \
        calls_checked++;                                                                                       \
        failures_checked += (status) != FG_OK;                                                                 \
        if (s_ != (status))                                                                                    \
            fail_msg("%s returned %s, expected %s (message: '%s')", #call, fg_status_name(s_),                \
                     fg_status_name(status), fg_last_error());                                                 \
    } while (0)

/* a failing call sets a message; a succeeding one clears it */
#define EXPECT_FAIL(call, status, fragment)                                                                    \
    do {                                                                                                       \
        EXPECT(call, status);                                                                                  \
        fgt_assert_contains(fg_last_error(), (fragment));                                                      \
    } while (0)

static fg_context *cpu_context(void)
{
    fg_context_options o;
    fg_context_options_init(&o);
    o.device = -1;
    o.arch = "sm_90";
    fg_context *ctx = NULL;
    EXPECT(fg_context_create(&o, &ctx), FG_OK);
    assert_non_null(ctx);
    assert_string_equal(fg_last_error(), "");
    return ctx;
}

static fg_layer *load(fg_context *ctx)
{
    fg_layer *layer = NULL;
    EXPECT(fg_layer_load_string(ctx, "misuse.lua", spec, &layer), FG_OK);
    assert_non_null(layer);
    return layer;
}

/* ---- contexts ---------------------------------------------------------------------------------- */

static void context_arguments(void **state)
{
    (void)state;
    fg_context_options_init(NULL); /* no crash */
    fg_context_options o;
    memset(&o, 0x5a, sizeof o);
    fg_context_options_init(&o);
    assert_int_equal(o.device, 0);
    assert_null(o.cache_dir);
    assert_null(o.arch);

    EXPECT_FAIL(fg_context_create(NULL, NULL), FG_ERR_INVALID_ARGUMENT, "out is NULL");
    o.device = -1;
    EXPECT_FAIL(fg_context_create(&o, NULL), FG_ERR_INVALID_ARGUMENT, "out is NULL");
    fg_context *ctx = (fg_context *)(uintptr_t)0x1234;
    o.device = -2;
    EXPECT_FAIL(fg_context_create(&o, &ctx), FG_ERR_INVALID_ARGUMENT, "device -2 is invalid");
    assert_null(ctx); /* cleared on failure */
    o.device = INT_MIN;
    EXPECT_FAIL(fg_context_create(&o, &ctx), FG_ERR_INVALID_ARGUMENT, "is invalid");
    o.device = -1;
    o.arch = "compute_90";
    EXPECT_FAIL(fg_context_create(&o, &ctx), FG_ERR_INVALID_ARGUMENT, "is not like sm_90");
    o.arch = "sm_90aaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    EXPECT_FAIL(fg_context_create(&o, &ctx), FG_ERR_INVALID_ARGUMENT, "is not like sm_90");
    o.arch = "";
    EXPECT_FAIL(fg_context_create(&o, &ctx), FG_ERR_INVALID_ARGUMENT, "is not like sm_90");
    assert_null(ctx);

    o.arch = NULL;
    /* cache paths longer than the cache keeps are refused, not truncated */
    char long_path[1500];
    memset(long_path, 'd', sizeof long_path);
    for (size_t i = 0; i + 1 < sizeof long_path; i += 2)
        long_path[i] = '/';
    long_path[sizeof long_path - 1] = '\0';
    o.cache_dir = long_path;
    EXPECT_FAIL(fg_context_create(&o, &ctx), FG_ERR_INVALID_ARGUMENT, "path is too long");
    o.cache_dir = NULL;
    o.cache_path = long_path;
    EXPECT_FAIL(fg_context_create(&o, &ctx), FG_ERR_INVALID_ARGUMENT, "shipped cache's path is too long");
    o.cache_path = NULL;
    assert_null(ctx);
    EXPECT(fg_context_create(&o, &ctx), FG_OK);
    assert_non_null(ctx);
    EXPECT(fg_context_destroy(ctx), FG_OK);
    assert_string_equal(fg_last_error(), "");
}

static void context_destroy_misuse(void **state)
{
    (void)state;
    EXPECT_FAIL(fg_context_destroy(NULL), FG_ERR_INVALID_ARGUMENT, "not a live context");
    fg_context *ctx = cpu_context();
    fg_layer *layer = load(ctx);
    /* refused while a layer lives, and the context stays usable */
    EXPECT_FAIL(fg_context_destroy(ctx), FG_ERR_INVALID_ARGUMENT, "1 layers of this context are still alive");
    fg_layer *second = load(ctx);
    EXPECT_FAIL(fg_context_destroy(ctx), FG_ERR_INVALID_ARGUMENT, "2 layers");
    /* a layer is not a context */
    EXPECT_FAIL(fg_context_destroy((fg_context *)layer), FG_ERR_INVALID_ARGUMENT, "not a live context");
    EXPECT(fg_layer_destroy(layer), FG_OK);
    EXPECT(fg_layer_destroy(second), FG_OK);
    EXPECT(fg_context_destroy(ctx), FG_OK);
    /* double destroy and use after destroy */
    EXPECT_FAIL(fg_context_destroy(ctx), FG_ERR_INVALID_ARGUMENT, "not a live context");
    fg_layer *out = (fg_layer *)(uintptr_t)0x1234;
    EXPECT_FAIL(fg_layer_load_string(ctx, "x.lua", spec, &out), FG_ERR_INVALID_ARGUMENT, "not a live context");
    assert_null(out);
    EXPECT_FAIL(fg_layer_load_file(ctx, "x.lua", &out), FG_ERR_INVALID_ARGUMENT, "not a live context");
    /* a pointer that never was a handle (it is never dereferenced) */
    int not_a_handle = 42;
    EXPECT_FAIL(fg_context_destroy((fg_context *)&not_a_handle), FG_ERR_INVALID_ARGUMENT, "not a live context");
    EXPECT_FAIL(fg_layer_load_string((fg_context *)&not_a_handle, "x.lua", spec, &out), FG_ERR_INVALID_ARGUMENT,
                "not a live context");
    assert_int_equal(not_a_handle, 42);
}

/* ---- loading --------------------------------------------------------------------------------------- */

static void load_arguments(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    fg_layer *layer = (fg_layer *)(uintptr_t)0x1234;
    EXPECT_FAIL(fg_layer_load_string(NULL, "x.lua", spec, &layer), FG_ERR_INVALID_ARGUMENT, "not a live context");
    assert_null(layer);
    EXPECT_FAIL(fg_layer_load_file(NULL, "x.lua", &layer), FG_ERR_INVALID_ARGUMENT, "not a live context");
    EXPECT_FAIL(fg_layer_load_string(ctx, "x.lua", spec, NULL), FG_ERR_INVALID_ARGUMENT, "out is NULL");
    EXPECT_FAIL(fg_layer_load_file(ctx, "x.lua", NULL), FG_ERR_INVALID_ARGUMENT, "out is NULL");
    EXPECT_FAIL(fg_layer_load_string(ctx, "x.lua", NULL, &layer), FG_ERR_INVALID_ARGUMENT, "source is NULL");
    EXPECT_FAIL(fg_layer_load_file(ctx, NULL, &layer), FG_ERR_INVALID_ARGUMENT, "path is NULL");
    /* a missing file, an empty string, a bad spec */
    EXPECT_FAIL(fg_layer_load_file(ctx, "/nonexistent/dir/spec.lua", &layer), FG_ERR_IO, "/nonexistent/dir/spec.lua");
    assert_null(layer);
    EXPECT_FAIL(fg_layer_load_string(ctx, "empty.lua", "", &layer), FG_ERR_SPEC, "empty.lua");
    EXPECT_FAIL(fg_layer_load_string(ctx, NULL, "return 1", &layer), FG_ERR_SPEC, "<string>");
    EXPECT_FAIL(fg_layer_load_string(ctx, "bad.lua", "return layer \"x\" { input = { \"N\", 2, 6, 6 }, relux {} }",
                                     &layer),
                FG_ERR_SPEC, "did you mean 'relu'?");
    assert_null(layer);
    /* a layer is not a context */
    fg_layer *good = load(ctx);
    EXPECT_FAIL(fg_layer_load_string((fg_context *)good, "x.lua", spec, &layer), FG_ERR_INVALID_ARGUMENT,
                "not a live context");
    EXPECT(fg_layer_destroy(good), FG_OK);
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

/* ---- every layer function with a handle that is not a live layer --------------------------------------- */

static void check_every_layer_function(fg_layer *bad, const char *what)
{
    int rank = -7, count = -7;
    int64_t dims[FG_MAX_DIMS] = {0};
    const char *name = NULL;
    float buf[WEIGHT_COUNT] = {0}, out[OUT_COUNT];
    float in[IN_COUNT] = {0};
    print_message("# %s\n", what);
    EXPECT_FAIL(fg_layer_input_shape(bad, 1, &rank, dims), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_output_shape(bad, 1, &rank, dims), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_param_count(bad, &count), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_param_info(bad, 0, &name, &rank, dims), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_ignored_count(bad, &count), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_ignored_info(bad, 0, &name, &rank, dims, &name), FG_ERR_INVALID_ARGUMENT,
                "not a live layer");
    EXPECT_FAIL(fg_layer_bind_device(bad, "conv.weight", buf, sizeof buf), FG_ERR_INVALID_ARGUMENT,
                "not a live layer");
    EXPECT_FAIL(fg_layer_bind_host(bad, "conv.weight", buf, sizeof buf), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_bind_safetensors(bad, "/nonexistent.safetensors", 0), FG_ERR_INVALID_ARGUMENT,
                "not a live layer");
    EXPECT_FAIL(fg_layer_prepare(bad), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_run(bad, in, out, 1, NULL), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_run_cpu(bad, in, out, 1), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    size_t ws = 7;
    EXPECT_FAIL(fg_layer_workspace_size(bad, 1, &ws), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    EXPECT_FAIL(fg_layer_run_workspace(bad, in, out, 1, buf, sizeof buf, NULL), FG_ERR_INVALID_ARGUMENT,
                "not a live layer");
    assert_int_equal(ws, 7);
    EXPECT_FAIL(fg_layer_destroy(bad), FG_ERR_INVALID_ARGUMENT, "not a live layer");
    /* nothing was written through the out-pointers */
    assert_int_equal(rank, -7);
    assert_int_equal(count, -7);
    assert_null(name);
}

static void layer_handles(void **state)
{
    (void)state;
    check_every_layer_function(NULL, "NULL layer");
    fg_context *ctx = cpu_context();
    check_every_layer_function((fg_layer *)ctx, "a context passed as a layer");
    int not_a_handle = 42;
    check_every_layer_function((fg_layer *)&not_a_handle, "a pointer that never was a handle");
    char *heap = malloc(64);
    assert_non_null(heap);
    check_every_layer_function((fg_layer *)heap, "a heap block that never was a handle");
    free(heap);

    /* use after destroy: the freed layer is never read (ASan / valgrind would report it) */
    fg_layer *layer = load(ctx);
    fg_layer *other = load(ctx);
    EXPECT(fg_layer_destroy(layer), FG_OK);
    check_every_layer_function(layer, "a destroyed layer (use after destroy, double destroy)");
    /* the other layer is unaffected */
    int count = 0;
    EXPECT(fg_layer_param_count(other, &count), FG_OK);
    assert_int_equal(count, 3);
    EXPECT(fg_layer_destroy(other), FG_OK);
    check_every_layer_function(other, "the second destroyed layer");
    EXPECT(fg_context_destroy(ctx), FG_OK);
    /* the context is gone too: its layers' handles stay dead */
    check_every_layer_function(layer, "a layer of a destroyed context");
}

/* ---- arguments of live layers ------------------------------------------------------------------------ */

static void shapes_and_params(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    fg_layer *layer = load(ctx);
    int rank = 0;
    int64_t dims[FG_MAX_DIMS];
    EXPECT(fg_layer_input_shape(layer, 3, &rank, dims), FG_OK);
    assert_int_equal(rank, 4);
    assert_int_equal(dims[0], 3);
    assert_int_equal(dims[1], 2);
    EXPECT(fg_layer_output_shape(layer, 5, &rank, dims), FG_OK);
    assert_int_equal(rank, 4);
    assert_int_equal(dims[0], 5);
    assert_int_equal(dims[1], 4);
    assert_int_equal(dims[3], 4);
    const int64_t bad_batches[] = {0, -1, -1000, INT64_MIN};
    for (size_t i = 0; i < sizeof bad_batches / sizeof *bad_batches; i++) {
        EXPECT_FAIL(fg_layer_input_shape(layer, bad_batches[i], &rank, dims), FG_ERR_INVALID_ARGUMENT,
                    "batch must be at least 1");
        EXPECT_FAIL(fg_layer_output_shape(layer, bad_batches[i], &rank, dims), FG_ERR_INVALID_ARGUMENT,
                    "batch must be at least 1");
    }
    EXPECT_FAIL(fg_layer_input_shape(layer, 1, NULL, dims), FG_ERR_INVALID_ARGUMENT, "rank or dims is NULL");
    EXPECT_FAIL(fg_layer_input_shape(layer, 1, &rank, NULL), FG_ERR_INVALID_ARGUMENT, "rank or dims is NULL");
    EXPECT_FAIL(fg_layer_output_shape(layer, 1, NULL, NULL), FG_ERR_INVALID_ARGUMENT, "rank or dims is NULL");

    EXPECT_FAIL(fg_layer_param_count(layer, NULL), FG_ERR_INVALID_ARGUMENT, "count is NULL");
    int count = 0;
    EXPECT(fg_layer_param_count(layer, &count), FG_OK);
    assert_int_equal(count, 3);
    const char *name = NULL;
    EXPECT(fg_layer_param_info(layer, 0, &name, &rank, dims), FG_OK);
    assert_string_equal(name, "conv.weight");
    assert_int_equal(rank, 4);
    EXPECT(fg_layer_param_info(layer, 2, NULL, NULL, NULL), FG_OK); /* every out-pointer is optional */
    const int bad_index[] = {-1, 3, 4, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof bad_index / sizeof *bad_index; i++)
        EXPECT_FAIL(fg_layer_param_info(layer, bad_index[i], &name, &rank, dims), FG_ERR_INVALID_ARGUMENT,
                    "out of range (the layer has 3 parameters)");
    /* no batch_norm: nothing a state_dict could carry beyond the parameters */
    EXPECT_FAIL(fg_layer_ignored_count(layer, NULL), FG_ERR_INVALID_ARGUMENT, "count is NULL");
    EXPECT(fg_layer_ignored_count(layer, &count), FG_OK);
    assert_int_equal(count, 0);
    for (size_t i = 0; i < sizeof bad_index / sizeof *bad_index; i++)
        EXPECT_FAIL(fg_layer_ignored_info(layer, bad_index[i], &name, &rank, dims, &name), FG_ERR_INVALID_ARGUMENT,
                    "out of range (the layer ignores 0 state_dict entries)");
    EXPECT(fg_layer_destroy(layer), FG_OK);
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

static void binding(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    fg_layer *layer = load(ctx);
    static float w[WEIGHT_COUNT + 16], b[4], s[4];
    const size_t wbytes = WEIGHT_COUNT * sizeof(float);
    /* wrong sizes: none binds */
    const size_t bad_sizes[] = {0, 1, wbytes - 1, wbytes - sizeof(float), wbytes + 1, wbytes + sizeof(float),
                                WEIGHT_COUNT, SIZE_MAX, SIZE_MAX / 2};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof *bad_sizes; i++)
        EXPECT_FAIL(fg_layer_bind_host(layer, "conv.weight", w, bad_sizes[i]), FG_ERR_INVALID_ARGUMENT,
                    "'conv.weight' needs 288 bytes (float32)");
    EXPECT_FAIL(fg_layer_bind_host(layer, "conv.bias", b, 4), FG_ERR_INVALID_ARGUMENT, "needs 16 bytes");
    /* NULLs */
    EXPECT_FAIL(fg_layer_bind_host(layer, NULL, w, wbytes), FG_ERR_INVALID_ARGUMENT, "name or data is NULL");
    EXPECT_FAIL(fg_layer_bind_host(layer, "conv.weight", NULL, wbytes), FG_ERR_INVALID_ARGUMENT,
                "name or data is NULL");
    /* unknown names, with a suggestion when one is close */
    EXPECT_FAIL(fg_layer_bind_host(layer, "conv.weights", w, wbytes), FG_ERR_INVALID_ARGUMENT,
                "did you mean 'conv.weight'?");
    fgt_assert_contains(fg_last_error(), "has no parameter 'conv.weights'");
    EXPECT_FAIL(fg_layer_bind_host(layer, "scael", s, sizeof s), FG_ERR_INVALID_ARGUMENT, "did you mean 'scale'?");
    EXPECT_FAIL(fg_layer_bind_host(layer, "completely.unrelated.tensor", w, wbytes), FG_ERR_INVALID_ARGUMENT,
                "has no parameter 'completely.unrelated.tensor'");
    fgt_assert_not_contains(fg_last_error(), "did you mean");
    EXPECT_FAIL(fg_layer_bind_host(layer, "", w, wbytes), FG_ERR_INVALID_ARGUMENT, "has no parameter ''");

    /* GPU-only calls on a CPU-only context */
    EXPECT_FAIL(fg_layer_bind_device(layer, "conv.weight", w, wbytes), FG_ERR_NO_DEVICE, "CPU-only");
    EXPECT_FAIL(fg_layer_bind_device(layer, NULL, w, wbytes), FG_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT_FAIL(fg_layer_bind_device(layer, "conv.weight", NULL, wbytes), FG_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT_FAIL(fg_layer_prepare(layer), FG_ERR_NO_DEVICE, "CPU-only");

    /* safetensors: NULL and missing paths */
    EXPECT_FAIL(fg_layer_bind_safetensors(layer, NULL, 0), FG_ERR_INVALID_ARGUMENT, "path is NULL");
    EXPECT_FAIL(fg_layer_bind_safetensors(layer, "/nonexistent/w.safetensors", 1), FG_ERR_TENSOR_FILE,
                "/nonexistent/w.safetensors");

    /* nothing is bound yet: the CPU run says which parameter is missing */
    float in[2 * IN_COUNT] = {0}, out[2 * OUT_COUNT];
    EXPECT_FAIL(fg_layer_run_cpu(layer, in, out, 1), FG_ERR_UNBOUND, "'conv.weight' is not bound");
    EXPECT(fg_layer_bind_host(layer, "conv.weight", w, wbytes), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "conv.bias", b, sizeof b), FG_OK);
    EXPECT_FAIL(fg_layer_run_cpu(layer, in, out, 1), FG_ERR_UNBOUND, "'scale' is not bound");
    EXPECT(fg_layer_bind_host(layer, "scale", s, sizeof s), FG_OK);
    /* rebinding replaces (and frees) the previous copy */
    EXPECT(fg_layer_bind_host(layer, "conv.weight", w, wbytes), FG_OK);
    EXPECT(fg_layer_run_cpu(layer, in, out, 2), FG_OK);
    assert_string_equal(fg_last_error(), "");
    EXPECT(fg_layer_destroy(layer), FG_OK);
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

static void running(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    fg_layer *layer = load(ctx);
    static float w[WEIGHT_COUNT], b[4], s[4] = {1, 1, 1, 1};
    EXPECT(fg_layer_bind_host(layer, "conv.weight", w, sizeof w), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "conv.bias", b, sizeof b), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "scale", s, sizeof s), FG_OK);
    float in[IN_COUNT] = {0}, out[OUT_COUNT];
    const int64_t bad_batches[] = {0, -1, INT64_MIN, (int64_t)INT32_MAX + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad_batches / sizeof *bad_batches; i++) {
        EXPECT_FAIL(fg_layer_run_cpu(layer, in, out, bad_batches[i]), FG_ERR_INVALID_ARGUMENT, "batch");
        EXPECT_FAIL(fg_layer_run(layer, in, out, bad_batches[i], NULL), FG_ERR_INVALID_ARGUMENT, "batch");
    }
    EXPECT_FAIL(fg_layer_run_cpu(layer, NULL, out, 1), FG_ERR_INVALID_ARGUMENT, "input or output is NULL");
    EXPECT_FAIL(fg_layer_run_cpu(layer, in, NULL, 1), FG_ERR_INVALID_ARGUMENT, "input or output is NULL");
    EXPECT_FAIL(fg_layer_run(layer, NULL, out, 1, NULL), FG_ERR_INVALID_ARGUMENT, "input or output is NULL");
    EXPECT_FAIL(fg_layer_run(layer, in, NULL, 1, NULL), FG_ERR_INVALID_ARGUMENT, "input or output is NULL");
    /* a GPU run on a CPU-only context */
    EXPECT_FAIL(fg_layer_run(layer, in, out, 1, NULL), FG_ERR_NO_DEVICE, "CPU-only");
    /* the CPU run works and gives bias * scale on a zero input */
    EXPECT(fg_layer_run_cpu(layer, in, out, 1), FG_OK);
    for (int i = 0; i < OUT_COUNT; i++)
        assert_true(out[i] == 0.0f);
    EXPECT(fg_layer_destroy(layer), FG_OK);
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

/* ---- status names, version -------------------------------------------------------------------------- */

static void status_names(void **state)
{
    (void)state;
    static const char *const want[] = {"FG_OK",          "FG_ERR_INVALID_ARGUMENT", "FG_ERR_SPEC",
                                       "FG_ERR_IO",      "FG_ERR_TENSOR_FILE",      "FG_ERR_COMPILE",
                                       "FG_ERR_NO_DEVICE", "FG_ERR_CUDA",           "FG_ERR_UNBOUND",
                                       "FG_ERR_OUT_OF_MEMORY", "FG_ERR_INTERNAL"};
    for (int s = FG_OK; s <= FG_ERR_INTERNAL; s++)
        assert_string_equal(fg_status_name((fg_status)s), want[s]);
    const int out_of_range[] = {FG_ERR_INTERNAL + 1, 100, -1, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof out_of_range / sizeof *out_of_range; i++) {
        const char *n = fg_status_name((fg_status)out_of_range[i]);
        assert_non_null(n);
        assert_string_equal(n, "FG_ERR_UNKNOWN");
    }
    assert_non_null(fg_version());
    assert_true(strlen(fg_version()) > 0);
    assert_non_null(fg_last_error());
}

/* ---- fg_last_error is per thread ---------------------------------------------------------------------- */

typedef struct thread_arg {
    pthread_barrier_t *set, *checked;
    char seen_before[256], seen_after[256];
    fg_status status;
} thread_arg;

static void *other_thread(void *p)
{
    thread_arg *a = p;
    snprintf(a->seen_before, sizeof a->seen_before, "%s", fg_last_error());
    /* its own error ... */
    fg_layer *layer;
    a->status = fg_layer_load_string(NULL, "t.lua", spec, &layer);
    pthread_barrier_wait(a->set);   /* the main thread now has an error of its own */
    pthread_barrier_wait(a->checked);
    snprintf(a->seen_after, sizeof a->seen_after, "%s", fg_last_error());
    return NULL;
}

static void last_error_is_per_thread(void **state)
{
    (void)state;
    pthread_barrier_t set, checked;
    pthread_barrier_init(&set, NULL, 2);
    pthread_barrier_init(&checked, NULL, 2);
    /* this thread fails first */
    EXPECT_FAIL(fg_layer_param_count(NULL, NULL), FG_ERR_INVALID_ARGUMENT, "fg_layer_param_count");
    thread_arg a;
    memset(&a, 0, sizeof a);
    a.set = &set;
    a.checked = &checked;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread, &a), 0);
    pthread_barrier_wait(&set);
    /* the other thread's failure did not change this thread's message */
    fgt_assert_contains(fg_last_error(), "fg_layer_param_count");
    fgt_assert_not_contains(fg_last_error(), "fg_layer_load");
    /* a new failure here does not change the other thread's message */
    EXPECT_FAIL(fg_context_destroy(NULL), FG_ERR_INVALID_ARGUMENT, "fg_context_destroy");
    pthread_barrier_wait(&checked);
    pthread_join(t, NULL);
    assert_string_equal(a.seen_before, ""); /* a new thread starts with no error */
    assert_int_equal(a.status, FG_ERR_INVALID_ARGUMENT);
    fgt_assert_contains(a.seen_after, "fg_layer_load: not a live context");
    fgt_assert_not_contains(a.seen_after, "fg_context_destroy");
    fgt_assert_contains(fg_last_error(), "fg_context_destroy");
    pthread_barrier_destroy(&set);
    pthread_barrier_destroy(&checked);
}

/* ---- specs loaded one after another cannot see each other ------------------------------------------------ */

/* Tries to leave traces behind: globals are refused, so it poisons the one shared-looking
 * table it can write to (math), then loads fine. */
static const char *const poisoner =
    "local m = math\n"
    "m.floor = function() error('poisoned floor') end\n"
    "m.max = nil\n"
    "m.left_by_the_first_spec = 1\n"
    "return layer \"poisoner\" {\n"
    "  input = { \"N\", 2, 6, 6 },\n"
    "  conv2d { name = \"conv\", out_channels = 4, kernel = 3 },\n"
    "}\n";
/* Fails (with a message naming what it found) if anything of the first spec is visible. */
static const char *const checker =
    "assert(math.left_by_the_first_spec == nil, 'saw the first spec\\'s math field')\n"
    "assert(math.floor(2.5) == 2, 'math.floor is poisoned')\n"
    "assert(math.max(1, 2) == 2, 'math.max is gone')\n"
    "return layer \"checker\" {\n"
    "  input = { \"N\", 2, 6, 6 },\n"
    "  conv2d { name = \"conv\", out_channels = math.max(3, 4), kernel = math.floor(3.5) },\n"
    "}\n";

static void specs_are_isolated(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    fg_layer *first = NULL, *second = NULL, *third = NULL;
    /* a spec cannot set a global, in any way */
    EXPECT_FAIL(fg_layer_load_string(ctx, "g.lua", "shared_global = 1\nreturn 1", &first), FG_ERR_SPEC,
                "cannot set global 'shared_global'");
    EXPECT_FAIL(fg_layer_load_string(ctx, "g.lua", "rawset(_ENV, 'x', 1)", &first), FG_ERR_SPEC, "unknown name");
    EXPECT_FAIL(fg_layer_load_string(ctx, "r.lua", "return shared_global", &first), FG_ERR_SPEC,
                "unknown name 'shared_global'");
    /* the poisoner loads */
    EXPECT(fg_layer_load_string(ctx, "poison.lua", poisoner, &first), FG_OK);
    /* while the poisoner's layer lives, and after it is destroyed, the next spec is clean */
    EXPECT(fg_layer_load_string(ctx, "check.lua", checker, &second), FG_OK);
    int count = 0;
    EXPECT(fg_layer_param_count(second, &count), FG_OK);
    assert_int_equal(count, 2);
    EXPECT(fg_layer_destroy(first), FG_OK);
    EXPECT(fg_layer_load_string(ctx, "check.lua", checker, &third), FG_OK);
    EXPECT(fg_layer_destroy(second), FG_OK);
    EXPECT(fg_layer_destroy(third), FG_OK);
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

/* ---- one context shared by threads ---------------------------------------------------------------------- */

static const char *const shared_spec = "return layer \"shared\" {\n"
                                        "  input = { \"N\", 3, 9, 9 },\n"
                                        "  conv2d { out_channels = 5, kernel = 3 },\n"
                                        "  group_norm { groups = 5 },\n"
                                        "  max { dim = 1 },\n"
                                        "}\n";

typedef struct shared_run {
    fg_context *ctx;
    const float *x, *w, *b, *gw, *gb;
    const float *expect; /* 49 outputs */
    int ok;
} shared_run;

/* Loads, binds and runs its own layer on the shared context, several times over. */
static void *shared_worker(void *p)
{
    shared_run *r = p;
    r->ok = 1;
    for (int rep = 0; rep < 5 && r->ok; rep++) {
        fg_layer *layer = NULL;
        float y[49];
        r->ok = fg_layer_load_string(r->ctx, "shared.lua", shared_spec, &layer) == FG_OK &&
                fg_layer_bind_host(layer, "conv.weight", r->w, 5 * 3 * 9 * sizeof(float)) == FG_OK &&
                fg_layer_bind_host(layer, "conv.bias", r->b, 5 * sizeof(float)) == FG_OK &&
                fg_layer_bind_host(layer, "group_norm.weight", r->gw, 5 * sizeof(float)) == FG_OK &&
                fg_layer_bind_host(layer, "group_norm.bias", r->gb, 5 * sizeof(float)) == FG_OK &&
                fg_layer_run_cpu(layer, r->x, y, 1) == FG_OK && memcmp(y, r->expect, sizeof y) == 0;
        if (layer && fg_layer_destroy(layer) != FG_OK)
            r->ok = 0;
    }
    return NULL;
}

static void threads_share_a_context(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    float x[3 * 81], w[5 * 27], b[5], gw[5], gb[5], expect[49];
    for (int i = 0; i < 3 * 81; i++)
        x[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < 5 * 27; i++)
        w[i] = (float)((i * 53) % 97) / 97.0f - 0.5f;
    for (int i = 0; i < 5; i++) {
        b[i] = 0.1f * (float)i;
        gw[i] = 1.0f + 0.2f * (float)i;
        gb[i] = -0.3f * (float)i;
    }
    fg_layer *layer = NULL;
    EXPECT(fg_layer_load_string(ctx, "shared.lua", shared_spec, &layer), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "conv.weight", w, sizeof w), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "conv.bias", b, sizeof b), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "group_norm.weight", gw, sizeof gw), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "group_norm.bias", gb, sizeof gb), FG_OK);
    EXPECT(fg_layer_run_cpu(layer, x, expect, 1), FG_OK);
    enum { THREADS = 8 };
    shared_run runs[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        runs[i] = (shared_run){.ctx = ctx, .x = x, .w = w, .b = b, .gw = gw, .gb = gb, .expect = expect};
        assert_int_equal(pthread_create(&threads[i], NULL, shared_worker, &runs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        assert_true(runs[i].ok);
    }
    EXPECT(fg_layer_destroy(layer), FG_OK);
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

/* ---- closing and binding while another thread runs the layer ------------------------------- */

/* A conv big enough that a CPU run takes a few milliseconds: the other thread's call lands
 * inside it most of the time (whether it does changes nothing the test asserts). */
static const char *const busy_spec = "return layer \"busy\" {\n"
                                     "  input = { \"N\", 8, 24, 24 },\n"
                                     "  conv2d { name = \"conv\", out_channels = 16, kernel = 3, bias = false },\n"
                                     "}\n";
enum { BUSY_W = 16 * 8 * 9, BUSY_IN = 8 * 24 * 24, BUSY_OUT = 16 * 22 * 22, BUSY_RUNS = 12 };

typedef struct busy_run {
    fg_layer *layer;
    const float *x;
    const float *expect_a, *expect_b;
    int runs;
    fg_status status[BUSY_RUNS];
    int matched[BUSY_RUNS]; /* 1: A's output, 2: B's, 0: neither */
    char message[BUSY_RUNS][256];
} busy_run;

static void *busy_worker(void *arg)
{
    busy_run *r = arg;
    float *y = malloc(sizeof(float) * BUSY_OUT);
    for (int i = 0; i < r->runs && y; i++) {
        memset(y, 0, sizeof(float) * BUSY_OUT);
        r->status[i] = fg_layer_run_cpu(r->layer, r->x, y, 1);
        snprintf(r->message[i], sizeof r->message[i], "%s", fg_last_error());
        r->matched[i] = !memcmp(y, r->expect_a, sizeof(float) * BUSY_OUT)   ? 1
                        : !memcmp(y, r->expect_b, sizeof(float) * BUSY_OUT) ? 2
                                                                             : 0;
    }
    free(y);
    return NULL;
}

/* The hardening issue: Layer.close() or bind in one thread while another was inside
 * layer(x) freed the binding under the run (ASan: heap-use-after-free in the reference). Now
 * destroy waits for the calls in flight and refuses new ones, and a bind waits for the runs
 * in flight: every run returns A's or B's exact output, or is refused as a dead layer. */
static void close_and_bind_during_runs(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    static float x[BUSY_IN], wa[BUSY_W], wb[BUSY_W], ya[BUSY_OUT], yb[BUSY_OUT];
    for (int i = 0; i < BUSY_IN; i++)
        x[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < BUSY_W; i++) {
        wa[i] = (float)((i * 53) % 97) / 97.0f - 0.5f;
        wb[i] = -wa[i];
    }
    fg_layer *layer = NULL;
    EXPECT(fg_layer_load_string(ctx, "busy.lua", busy_spec, &layer), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "conv.weight", wb, sizeof wb), FG_OK);
    EXPECT(fg_layer_run_cpu(layer, x, yb, 1), FG_OK);
    EXPECT(fg_layer_bind_host(layer, "conv.weight", wa, sizeof wa), FG_OK);
    EXPECT(fg_layer_run_cpu(layer, x, ya, 1), FG_OK);

    /* binds while runs go on: each run sees one whole binding */
    busy_run r = {.layer = layer, .x = x, .expect_a = ya, .expect_b = yb, .runs = BUSY_RUNS};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, busy_worker, &r), 0);
    for (int i = 0; i < 2 * BUSY_RUNS; i++)
        EXPECT(fg_layer_bind_host(layer, "conv.weight", i % 2 ? wa : wb, sizeof wa), FG_OK);
    pthread_join(th, NULL);
    for (int i = 0; i < BUSY_RUNS; i++) {
        if (r.status[i] != FG_OK)
            fail_msg("run %d during binds: %s: %s", i, fg_status_name(r.status[i]), r.message[i]);
        assert_int_not_equal(r.matched[i], 0);
    }
    EXPECT(fg_layer_destroy(layer), FG_OK);

    /* destroy while a run goes on: the run finishes first, or is refused */
    for (int round = 0; round < 6; round++) {
        EXPECT(fg_layer_load_string(ctx, "busy.lua", busy_spec, &layer), FG_OK);
        EXPECT(fg_layer_bind_host(layer, "conv.weight", wa, sizeof wa), FG_OK);
        busy_run d = {.layer = layer, .x = x, .expect_a = ya, .expect_b = ya, .runs = 3};
        assert_int_equal(pthread_create(&th, NULL, busy_worker, &d), 0);
        EXPECT(fg_layer_destroy(layer), FG_OK);
        pthread_join(th, NULL);
        for (int i = 0; i < d.runs; i++) {
            if (d.status[i] == FG_OK) {
                assert_int_equal(d.matched[i], 1);
            } else {
                assert_int_equal(d.status[i], FG_ERR_INVALID_ARGUMENT);
                fgt_assert_contains(d.message[i], "not a live layer");
            }
        }
    }
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

/* A spec is a pure function of its text: tostring of a table or a function used to print its
 * address, so the layer's name (and its cache key, and the files naming it) changed with
 * every load. Now such values print as their type. */
static void specs_are_pure(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    static const char *const source = "return layer (\"pure_\" .. tostring({}) .. \"_\" .. tostring(relu) .. \"_\" ..\n"
                                      "  tostring(1.5) .. tostring(true) .. tostring(nil)) {\n"
                                      "  input = { \"N\", 2, 6, 6 },\n"
                                      "  conv2d { out_channels = 4, kernel = 3 },\n"
                                      "}\n";
    fg_layer *layer = NULL;
    EXPECT(fg_layer_load_string(ctx, "pure.lua", source, &layer), FG_OK);
    EXPECT(fg_layer_destroy(layer), FG_OK);
    fg_layer_ir *ir = fgt_load_string(source);
    assert_string_equal(ir->name, "pure_table_function_1.5truenil");
    free(ir);
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

/* ---- options: their size, and the log ------------------------------------------------------ */

typedef struct captured_log {
    int count[4];
    char last[512];
} captured_log;

static void capture(void *user, fg_log_level level, const char *message)
{
    captured_log *c = user;
    if ((int)level >= 1 && (int)level <= 3)
        c->count[level]++;
    snprintf(c->last, sizeof c->last, "%s", message);
}

/* struct_size lets the options grow: 0 (never initialized) is refused, an older caller's
 * shorter struct is read up to its size; messages go to the log callback, filtered by level,
 * and nowhere else. */
static void options_size_and_log(void **state)
{
    (void)state;
    fg_context_options o;
    memset(&o, 0, sizeof o);
    o.device = -1;
    fg_context *ctx = NULL;
    EXPECT_FAIL(fg_context_create(&o, &ctx), FG_ERR_INVALID_ARGUMENT, "initialize the options with fg_context_options_init");
    assert_null(ctx);
    fg_context_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    o.device = -1;
    o.struct_size = offsetof(fg_context_options, log); /* a caller built before the log fields */
    o.log_level = 99;                                   /* beyond its size: never read */
    EXPECT(fg_context_create(&o, &ctx), FG_OK);
    EXPECT(fg_context_destroy(ctx), FG_OK);

    /* a planner knob that does not parse is a warning, through the callback */
    captured_log c;
    memset(&c, 0, sizeof c);
    fg_context_options_init(&o);
    o.device = -1;
    o.log = capture;
    o.log_user = &c;
    setenv("FUSEGEN_STRATEGY", "bogus", 1);
    EXPECT(fg_context_create(&o, &ctx), FG_OK);
    assert_int_equal(c.count[FG_LOG_WARN], 1);
    fgt_assert_contains(c.last, "FUSEGEN_STRATEGY=\"bogus\" ignored");
    EXPECT(fg_context_destroy(ctx), FG_OK);
    /* FUSEGEN_LOG that does not parse is said too; the level filters */
    memset(&c, 0, sizeof c);
    unsetenv("FUSEGEN_STRATEGY");
    setenv("FUSEGEN_LOG", "loud", 1);
    EXPECT(fg_context_create(&o, &ctx), FG_OK);
    assert_int_equal(c.count[FG_LOG_WARN], 1);
    fgt_assert_contains(c.last, "FUSEGEN_LOG=\"loud\" ignored: expected warn, info or debug");
    EXPECT(fg_context_destroy(ctx), FG_OK);
    unsetenv("FUSEGEN_LOG");
}

/* A layer ending in shape ops reports the reshaped output shape, and its CPU run gives the
 * same floats as the layer without them (a shape op moves no data); a refused shape op is a
 * spec error naming the line. */
static void reshaped_output(void **state)
{
    (void)state;
    static const char *const pooled = "return layer \"pooled\" {\n"
                                      "  input = { \"N\", 2, 6, 6 },\n"
                                      "  conv2d { name = \"conv\", out_channels = 4, kernel = 3 },\n"
                                      "  relu {},\n"
                                      "  global_avg_pool {},\n"
                                      "%s"
                                      "}\n";
    char plain_src[512], squeezed_src[512];
    snprintf(plain_src, sizeof plain_src, pooled, "");
    snprintf(squeezed_src, sizeof squeezed_src, pooled, "  squeeze { dim = -1 },\n  squeeze { dim = -1 },\n  neg {},\n");
    fg_context *ctx = cpu_context();
    fg_layer *plain = NULL, *squeezed = NULL;
    EXPECT(fg_layer_load_string(ctx, "plain.lua", plain_src, &plain), FG_OK);
    EXPECT(fg_layer_load_string(ctx, "squeezed.lua", squeezed_src, &squeezed), FG_OK);
    int rank = 0;
    int64_t dims[FG_MAX_DIMS];
    EXPECT(fg_layer_output_shape(plain, 3, &rank, dims), FG_OK);
    assert_int_equal(rank, 4);
    EXPECT(fg_layer_output_shape(squeezed, 3, &rank, dims), FG_OK);
    assert_int_equal(rank, 2);
    assert_int_equal(dims[0], 3);
    assert_int_equal(dims[1], 4);

    float w[WEIGHT_COUNT], b[4], in[3 * IN_COUNT], out_plain[12], out_squeezed[12];
    for (int i = 0; i < WEIGHT_COUNT; i++)
        w[i] = (float)((i * 37 % 19) - 9) / 16.0f;
    for (int i = 0; i < 4; i++)
        b[i] = 0.25f * (float)i - 0.3f;
    for (int i = 0; i < 3 * IN_COUNT; i++)
        in[i] = (float)((i * 53 % 31) + 1) / 31.0f;
    fg_layer *both[2] = {plain, squeezed};
    for (int l = 0; l < 2; l++) {
        EXPECT(fg_layer_bind_host(both[l], "conv.weight", w, sizeof w), FG_OK);
        EXPECT(fg_layer_bind_host(both[l], "conv.bias", b, sizeof b), FG_OK);
    }
    EXPECT(fg_layer_run_cpu(plain, in, out_plain, 3), FG_OK);
    EXPECT(fg_layer_run_cpu(squeezed, in, out_squeezed, 3), FG_OK);
    for (int i = 0; i < 12; i++)
        assert_true(out_squeezed[i] == -out_plain[i] && out_plain[i] != 0.0f);
    EXPECT(fg_layer_destroy(plain), FG_OK);
    EXPECT(fg_layer_destroy(squeezed), FG_OK);

    char bad_src[512];
    snprintf(bad_src, sizeof bad_src, pooled, "  flatten { start_dim = 0 },\n");
    fg_layer *bad = NULL;
    EXPECT_FAIL(fg_layer_load_string(ctx, "bad.lua", bad_src, &bad), FG_ERR_SPEC,
                "bad.lua:6: flatten: field 'start_dim' is dim 0, which merges the batch");
    assert_null(bad);
    EXPECT(fg_context_destroy(ctx), FG_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(context_arguments),
        cmocka_unit_test(context_destroy_misuse),
        cmocka_unit_test(load_arguments),
        cmocka_unit_test(layer_handles),
        cmocka_unit_test(shapes_and_params),
        cmocka_unit_test(reshaped_output),
        cmocka_unit_test(binding),
        cmocka_unit_test(running),
        cmocka_unit_test(status_names),
        cmocka_unit_test(last_error_is_per_thread),
        cmocka_unit_test(specs_are_isolated),
        cmocka_unit_test(threads_share_a_context),
        cmocka_unit_test(close_and_bind_during_runs),
        cmocka_unit_test(specs_are_pure),
        cmocka_unit_test(options_size_and_log),
    };
    char *dir = fgt_tmpdir("api-misuse-env");
    fgt_isolate_environment(dir);
    int failed = cmocka_run_group_tests_name("api_misuse", tests, NULL, NULL);
    printf("# %d API calls checked, %d of them misuse refused with a status and a message\n", calls_checked,
           failures_checked);
    fgt_rmtree(dir);
    free(dir);
    return failed;
}
