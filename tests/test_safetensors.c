/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors: a write/read round trip, and every malformed file refused with a message
 * that names the file and, where there is one, the tensor. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/half.h"
#include "api_internal.h"
#include "fusegen.h"
#include "safetensors.h"
#include "test_util.h"

static char *g_dir; /* this test's directory */

/* Writes <dir>/<name>: an 8-byte little-endian header length (hlen, or the header's own
 * length when hlen < 0), the header text, then `payload`. Returns the path (static). */
static const char *make_file(const char *name, const char *header, long long hlen, const void *payload,
                             size_t payload_len)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    size_t h = strlen(header);
    uint64_t declared = hlen < 0 ? (uint64_t)h : (uint64_t)hlen;
    size_t total = 8 + h + payload_len;
    unsigned char *buf = malloc(total);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(declared >> (8 * i));
    memcpy(buf + 8, header, h);
    if (payload_len)
        memcpy(buf + 8 + h, payload, payload_len);
    assert_int_equal(fgt_write_file(path, buf, total), 0);
    free(buf);
    return path;
}

static const float eight_floats[8] = {1, 2, 3, 4, 5, 6, 7, 8};

typedef struct bad_file {
    const char *name;     /* file name, and the case's name */
    const char *header;
    long long hlen;       /* -1: the header's length */
    size_t payload_len;   /* bytes of eight_floats */
    const char *expect[3];
} bad_file;

static const bad_file bad_files[] = {
    {"header_past_end.safetensors", "{}", 1000, 0, {"header length 1000 runs past the end of the file (10 bytes)"}},
    {"header_len_huge.safetensors", "{}", 0x7fffffffffffffffLL, 8, {"runs past the end of the file"}},
    {"invalid_json.safetensors", "{\"w\": {\"dtype\": \"F32\",", -1, 0, {"invalid JSON header"}},
    {"not_an_object.safetensors", "[1, 2, 3]", -1, 0, {"the header is not a JSON object"}},
    {"duplicate_names.safetensors",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     -1, 8, {"invalid JSON header", "duplicate", "w"}},
    {"offsets_outside.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 8,
     {"tensor 'w'", "data_offsets [0, 16] lie outside the 8 data bytes"}},
    {"offsets_reversed.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", -1, 8,
     {"tensor 'w'", "lie outside"}},
    {"offsets_negative.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", -1, 8,
     {"tensor 'w'", "lie outside"}},
    {"offsets_not_pair.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", -1, 8,
     {"tensor 'w'", "data_offsets must be [begin, end]"}},
    {"overlap.safetensors",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     -1, 12, {"tensors 'a' and 'b' overlap in the data"}},
    {"unaligned.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", -1, 8,
     {"tensor 'w'", "data offset 2 is not aligned to its 4-byte elements"}},
    {"unaligned_f64.safetensors", "{\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[4,12]}}", -1, 16,
     {"tensor 'd'", "not aligned to its 8-byte elements"}},
    {"unknown_dtype.safetensors", "{\"w\":{\"dtype\":\"X99\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 8,
     {"tensor 'w'", "unknown dtype 'X99'"}},
    {"missing_dtype.safetensors", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 8,
     {"tensor 'w'", "missing dtype"}},
    {"size_mismatch.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8,
     {"tensor 'w'", "shape holds 3 elements (12 bytes of F32) but data_offsets span 8 bytes"}},
    {"size_mismatch_f16.safetensors", "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", -1, 8,
     {"tensor 'h'", "shape holds 4 elements (8 bytes of F16) but data_offsets span 4 bytes"}},
    {"negative_dim.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", -1, 8,
     {"tensor 'w'", "shape entries must be non-negative integers"}},
    {"huge_shape.safetensors",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,4]}}", -1, 8,
     {"tensor 'w'", "shape is too large"}},
    {"rank_too_high.safetensors",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", -1, 8,
     {"tensor 'w'", "shape must be a list of at most 8 dims"}},
    {"entry_not_object.safetensors", "{\"w\": 5}", -1, 0, {"tensor 'w'", "its entry is not an object"}},
    /* the second hardening round: the data must be exactly the tensors', as the format's
     * reference implementation requires */
    {"gap_between.safetensors",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     -1, 12, {"4 bytes of the data before tensor 'b' belong to no tensor"}},
    {"gap_first.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8,
     {"4 bytes of the data before tensor 'a'"}},
    {"trailing_bytes.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 8,
     {"4 bytes after the last tensor belong to no tensor"}},
    /* a header length 5 bytes short, pointing into the JSON's padding: every tensor would be
     * read 5 bytes off */
    {"header_5_short.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}      ", 54 + 6 - 5, 4,
     {"5 bytes after the last tensor"}},
    {"control_char_name.safetensors", "{\"a\\u0007\\u001b]0;x\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     -1, 4, {"tensor 'a\\x07\\x1b]0;x': unknown dtype"}},
};
enum { N_BAD = sizeof bad_files / sizeof bad_files[0] };

static void run_bad_file(void **state)
{
    const bad_file *c = *state;
    const char *path = make_file(c->name, c->header, c->hlen, eight_floats, c->payload_len);
    fg_tensor_file f;
    fg_error err = {{0}};
    if (fg_safetensors_read(path, &f, &err) == 0)
        fail_msg("%s: the file was accepted", c->name);
    assert_int_equal(f.n, 0);
    assert_null(f.tensors);
    fgt_assert_contains(err.msg, path);
    for (int i = 0; i < 3 && c->expect[i]; i++)
        fgt_assert_contains(err.msg, c->expect[i]);
    /* the same bytes parsed in memory name the display name instead */
    size_t len = 0;
    unsigned char *bytes = fgt_read_file(path, &len);
    assert_non_null(bytes);
    assert_int_equal(fg_safetensors_parse(bytes, len, "in-memory.bin", &f, &err), -1);
    fgt_assert_contains(err.msg, "in-memory.bin");
    free(bytes);
}

/* A zero-size tensor at the same offset as the next one is accepted whatever the key order
 * (the sort used to tie on equal begin offsets and let the order decide). */
static void zero_size_tie(void **state)
{
    (void)state;
    static const char *const headers[] = {
        "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
    };
    for (int i = 0; i < 2; i++) {
        fg_tensor_file f;
        fg_error err = {{0}};
        if (fg_safetensors_read(make_file("tie.safetensors", headers[i], -1, eight_floats, 8), &f, &err) != 0)
            fail_msg("key order %d: %s", i, err.msg);
        assert_int_equal(f.n, 3);
        assert_true(fg_tensor_find(&f, "b")->data[0] == 2);
        fg_tensor_file_free(&f);
    }
}

/* More tensors than fusegen reads (500k empty tensors took 619 MB) are refused; so is a FIFO
 * (open() used to block forever). */
static void too_many_tensors_and_fifo(void **state)
{
    (void)state;
    enum { N = 70000 };
    size_t cap = (size_t)N * 64 + 16, len = 0;
    char *header = malloc(cap);
    assert_non_null(header);
    len += (size_t)snprintf(header + len, cap - len, "{");
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(header + len, cap - len, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                                i ? "," : "", i);
    snprintf(header + len, cap - len, "}");
    fg_tensor_file f;
    fg_error err = {{0}};
    assert_int_equal(fg_safetensors_read(make_file("many.safetensors", header, -1, NULL, 0), &f, &err), -1);
    fgt_assert_contains(err.msg, "70000 tensors; fusegen reads files of at most 65536");
    free(header);
    char path[4096];
    snprintf(path, sizeof path, "%s/fifo.safetensors", g_dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(fg_safetensors_read(path, &f, &err), -1);
    fgt_assert_contains(err.msg, "not a regular file");
}

static void too_short_and_unreadable(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/short.safetensors", g_dir);
    assert_int_equal(fgt_write_file(path, "abc", 3), 0);
    fg_tensor_file f;
    fg_error err = {{0}};
    assert_int_equal(fg_safetensors_read(path, &f, &err), -1);
    fgt_assert_contains(err.msg, path);
    fgt_assert_contains(err.msg, "too short for a safetensors file (3 bytes)");
    assert_int_equal(fgt_write_file(path, "", 0), 0);
    assert_int_equal(fg_safetensors_read(path, &f, &err), -1);
    fgt_assert_contains(err.msg, "(0 bytes)");

    snprintf(path, sizeof path, "%s/missing.safetensors", g_dir);
    assert_int_equal(fg_safetensors_read(path, &f, &err), -1);
    fgt_assert_contains(err.msg, path);
    fgt_assert_contains(err.msg, "No such file");

    assert_int_equal(fg_safetensors_read(g_dir, &f, &err), -1);
    fgt_assert_contains(err.msg, "not a regular file");
}

static void round_trip(void **state)
{
    (void)state;
    float weight[8] = {1.5f, -0.0f, INFINITY, -INFINITY, NAN, 1e-42f /* denormal */, 3.4e38f, -7};
    float bias[2] = {0.25f, -0.5f};
    float scalar[1] = {42};
    fg_tensor tensors[4] = {
        {.name = "conv.weight", .rank = 4, .dim = {2, 1, 2, 2}, .count = 8, .data = weight},
        {.name = "conv.bias", .rank = 1, .dim = {2}, .count = 2, .data = bias},
        {.name = "scalar", .rank = 0, .count = 1, .data = scalar},
        {.name = "empty", .rank = 2, .dim = {0, 3}, .count = 0, .data = scalar},
    };
    char path[4096];
    snprintf(path, sizeof path, "%s/round_trip.safetensors", g_dir);
    fg_error err = {{0}};
    for (int pass = 0; pass < 2; pass++) { /* the second write replaces the first */
        if (fg_safetensors_write(path, tensors, 4, &err) != 0)
            fail_msg("write: %s", err.msg);
        fg_tensor_file f;
        if (fg_safetensors_read(path, &f, &err) != 0)
            fail_msg("read: %s", err.msg);
        assert_int_equal(f.n, 4);
        for (int i = 0; i < 4; i++) {
            const fg_tensor *t = fg_tensor_find(&f, tensors[i].name);
            if (!t)
                fail_msg("tensor %s missing after the round trip", tensors[i].name);
            assert_string_equal(t->dtype, "F32");
            assert_int_equal(t->rank, tensors[i].rank);
            for (int d = 0; d < t->rank; d++)
                assert_int_equal(t->dim[d], tensors[i].dim[d]);
            assert_int_equal(t->count, tensors[i].count);
            assert_non_null(t->data);
            if (t->count)
                assert_memory_equal(t->data, tensors[i].data, t->count * 4); /* bit for bit, NaN included */
        }
        assert_null(fg_tensor_find(&f, "conv"));
        fg_tensor_file_free(&f);
        assert_int_equal(f.n, 0);
        assert_null(f.tensors);
        fg_tensor_file_free(&f); /* twice is harmless */
    }
    /* the layout: the header is padded so that the data starts 8-byte aligned */
    size_t len = 0;
    unsigned char *bytes = fgt_read_file(path, &len);
    assert_non_null(bytes);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)bytes[i] << (8 * i);
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(len, 8 + hlen + (8 + 2 + 1) * 4);
    assert_int_equal(bytes[8], '{');
    free(bytes);
    /* no temporary file is left beside it, and the file is readable by others */
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, "round_trip") && strcmp(e->d_name, "round_trip.safetensors") != 0)
            fail_msg("left behind: %s", e->d_name);
    closedir(d);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);

    /* a folder that does not exist: the message names the path */
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", g_dir);
    assert_int_equal(fg_safetensors_write(path, tensors, 1, &err), -1);
    fgt_assert_contains(err.msg, path);
}

/* Other dtypes are listed (so that binding one can name it) but carry no data; metadata is
 * skipped. */
static void other_dtypes_and_metadata(void **state)
{
    (void)state;
    const char *path = make_file("mixed.safetensors",
                                 "{\"__metadata__\":{\"format\":\"pt\"},"
                                 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                 "\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[8,16]},"
                                 "\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[16,24]}}",
                                 -1, eight_floats, 24);
    fg_tensor_file f;
    fg_error err = {{0}};
    if (fg_safetensors_read(path, &f, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(f.n, 3);
    assert_null(fg_tensor_find(&f, "__metadata__"));
    const fg_tensor *w = fg_tensor_find(&f, "w");
    assert_non_null(w);
    assert_non_null(w->data);
    assert_true(w->data[0] == 1 && w->data[1] == 2);
    const fg_tensor *h = fg_tensor_find(&f, "h");
    assert_non_null(h);
    assert_string_equal(h->dtype, "F16");
    assert_int_equal(h->count, 4);
    assert_non_null(h->data); /* widened to floats (half_precision_widened checks the values) */
    const fg_tensor *n = fg_tensor_find(&f, "bn.num_batches_tracked");
    assert_non_null(n);
    assert_string_equal(n->dtype, "I64");
    assert_int_equal(n->rank, 0);
    assert_null(n->data);
    fg_tensor_file_free(&f);
}

/* A CPU-only context with its cache in the test's directory. */
static fg_context *cpu_context(void)
{
    fg_context_options opts;
    fg_context_options_init(&opts);
    opts.device = -1;
    char cache[4096];
    snprintf(cache, sizeof cache, "%s/cache", g_dir);
    opts.cache_dir = cache;
    opts.cache_path = "";
    fg_context *ctx = NULL;
    if (fg_context_create(&opts, &ctx) != FG_OK)
        fail_msg("fg_context_create (CPU only): %s", fg_last_error());
    return ctx;
}

/* Binding a file to a layer (CPU-only context): a non-F32 parameter, a missing one, a
 * wrong shape and an extra tensor are each refused, naming the file and the tensor. */
static void binding_checks_dtype_shape_and_names(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    fg_layer *layer = NULL;
    const char *spec = "return layer \"bind\" {\n"
                       "  input = { \"N\", 1, 3, 3 },\n"
                       "  conv2d { out_channels = 2, kernel = 1 },\n"
                       "}\n";
    if (fg_layer_load_string(ctx, "bind.lua", spec, &layer) != FG_OK)
        fail_msg("fg_layer_load_string: %s", fg_last_error());

    static const char *const w_f32 = "\"conv.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,1,1],\"data_offsets\":[0,8]}";
    static const char *const b_f32 = "\"conv.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}";
    char header[1024];
    struct {
        const char *file;
        const char *w, *b, *extra;
        const char *expect;
        size_t payload; /* the data is contiguous and ends with the last tensor */
    } cases[] = {
        {"i32.safetensors", "\"conv.weight\":{\"dtype\":\"I32\",\"shape\":[2,1,1,1],\"data_offsets\":[0,8]}", b_f32,
         NULL, "tensor 'conv.weight' is I32; fusegen reads parameters stored as F32, F16 or BF16", 16},
        {"missing.safetensors", w_f32, NULL, NULL, "has no tensor 'conv.bias'", 8},
        {"shape.safetensors", "\"conv.weight\":{\"dtype\":\"F32\",\"shape\":[1,2,1,1],\"data_offsets\":[0,8]}", b_f32,
         NULL, "tensor 'conv.weight' has shape [1, 2, 1, 1] but layer bind needs [2, 1, 1, 1]", 16},
        {"extra.safetensors", w_f32, b_f32, "\"other\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}",
         "tensor 'other' is not a parameter of layer bind", 20},
        {"control_chars.safetensors", w_f32, b_f32,
         "\"ot\\u001b[2Jher\\n\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}",
         "tensor 'ot\\x1b[2Jher\\x0a' is not a parameter", 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(header, sizeof header, "{%s%s%s%s%s}", cases[i].w, cases[i].b ? "," : "", cases[i].b ? cases[i].b : "",
                 cases[i].extra ? "," : "", cases[i].extra ? cases[i].extra : "");
        const char *path = make_file(cases[i].file, header, -1, eight_floats, cases[i].payload);
        fg_status s = fg_layer_bind_safetensors(layer, path, 0);
        if (s != FG_ERR_TENSOR_FILE)
            fail_msg("%s: status %s, expected FG_ERR_TENSOR_FILE", cases[i].file, fg_status_name(s));
        fgt_assert_contains(fg_last_error(), path);
        fgt_assert_contains(fg_last_error(), cases[i].expect);
    }
    /* the good file binds; extra tensors are allowed when asked for */
    snprintf(header, sizeof header, "{%s,%s}", w_f32, b_f32);
    assert_int_equal(fg_layer_bind_safetensors(layer, make_file("good.safetensors", header, -1, eight_floats, 16), 0),
                     FG_OK);
    snprintf(header, sizeof header, "{%s,%s,%s}", w_f32, b_f32,
             "\"other\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}");
    assert_int_equal(fg_layer_bind_safetensors(layer, make_file("extra_ok.safetensors", header, -1, eight_floats, 20), 1),
                     FG_OK);
    /* a malformed file is a tensor-file error too, with the parser's message */
    assert_int_equal(fg_layer_bind_safetensors(layer, make_file("bad.safetensors", "{", -1, NULL, 0), 0),
                     FG_ERR_TENSOR_FILE);
    fgt_assert_contains(fg_last_error(), "invalid JSON header");
    assert_int_equal(fg_layer_destroy(layer), FG_OK);
    assert_int_equal(fg_context_destroy(ctx), FG_OK);
}

/* F16 and BF16 tensors read as floats, exactly: every half value is a float. The expected
 * values come from the formats' definitions (not from the reader's arithmetic), and a layer
 * bound from a BF16 file computes what it computes bound from the same values in F32. */
static void half_precision_widened(void **state)
{
    (void)state;
    static const uint16_t halves[8] = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x7BFF, 0x8000, 0x3555, 0x7C00};
    const float want_h[8] = {1.0f, -2.0f, ldexpf(1, -24), ldexpf(1023, -24), 65504.0f, -0.0f, 0.333251953125f,
                             INFINITY};
    static const uint16_t bhalves[4] = {0x3F80, 0xC040, 0x0001, 0x4049}; /* 1, -3, 2^-133, 3.140625 */
    const float want_b[4] = {1.0f, -3.0f, ldexpf(1, -133), 3.140625f};
    unsigned char payload[24];
    memcpy(payload, halves, 16);
    memcpy(payload + 16, bhalves, 8);
    const char *path = make_file("halves.safetensors",
                                 "{\"h\":{\"dtype\":\"F16\",\"shape\":[8],\"data_offsets\":[0,16]},"
                                 "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[16,24]}}",
                                 -1, payload, sizeof payload);
    fg_tensor_file f;
    fg_error err = {{0}};
    if (fg_safetensors_read(path, &f, &err) != 0)
        fail_msg("%s", err.msg);
    const fg_tensor *h = fg_tensor_find(&f, "h"), *b = fg_tensor_find(&f, "b");
    assert_non_null(h);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) {
        if (memcmp(&h->data[i], &want_h[i], sizeof(float)) != 0) /* bit for bit: -0 and inf too */
            fail_msg("F16 0x%04x read as %a, expected %a", halves[i], (double)h->data[i], (double)want_h[i]);
    }
    for (int i = 0; i < 4; i++)
        if (memcmp(&b->data[i], &want_b[i], sizeof(float)) != 0)
            fail_msg("BF16 0x%04x read as %a, expected %a", bhalves[i], (double)b->data[i], (double)want_b[i]);
    fg_tensor_file_free(&f);
    /* NaN stays NaN */
    uint16_t nan16 = 0x7E00;
    path = make_file("nan.safetensors", "{\"n\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}", -1,
                     &nan16, 2);
    if (fg_safetensors_read(path, &f, &err) != 0)
        fail_msg("%s", err.msg);
    assert_true(isnan(fg_tensor_find(&f, "n")->data[0]));
    fg_tensor_file_free(&f);

    /* a layer bound from BF16 runs as bound from the same values in F32 */
    fg_context *ctx = cpu_context();
    const char *spec = "return layer \"halfbind\" {\n"
                       "  input = { \"N\", 1, 3, 3 },\n"
                       "  conv2d { out_channels = 2, kernel = 1 },\n"
                       "}\n";
    fg_layer *from_half = NULL, *from_float = NULL;
    if (fg_layer_load_string(ctx, "halfbind.lua", spec, &from_half) != FG_OK ||
        fg_layer_load_string(ctx, "halfbind.lua", spec, &from_float) != FG_OK)
        fail_msg("load: %s", fg_last_error());
    static const uint16_t wb[4] = {0x3F80, 0xC040, 0x4049, 0xBE00}; /* weight 1, -3; bias 3.140625, -0.125 */
    path = make_file("bf16_params.safetensors",
                     "{\"conv.weight\":{\"dtype\":\"BF16\",\"shape\":[2,1,1,1],\"data_offsets\":[0,4]},"
                     "\"conv.bias\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
                     -1, wb, sizeof wb);
    if (fg_layer_bind_safetensors(from_half, path, 0) != FG_OK)
        fail_msg("bind BF16: %s", fg_last_error());
    const float w32[2] = {1.0f, -3.0f}, b32[2] = {3.140625f, -0.125f};
    assert_int_equal(fg_layer_bind_host(from_float, "conv.weight", w32, sizeof w32), FG_OK);
    assert_int_equal(fg_layer_bind_host(from_float, "conv.bias", b32, sizeof b32), FG_OK);
    float x[9], y_half[18], y_float[18];
    for (int i = 0; i < 9; i++)
        x[i] = 0.25f * (float)i - 1.0f;
    assert_int_equal(fg_layer_run_cpu(from_half, x, y_half, 1), FG_OK);
    assert_int_equal(fg_layer_run_cpu(from_float, x, y_float, 1), FG_OK);
    assert_memory_equal(y_half, y_float, sizeof y_half);
    assert_true(y_half[0] == 1.0f * x[0] + 3.140625f); /* and it is the conv of those values */
    assert_int_equal(fg_layer_destroy(from_half), FG_OK);
    assert_int_equal(fg_layer_destroy(from_float), FG_OK);
    assert_int_equal(fg_context_destroy(ctx), FG_OK);
}

/* A BatchNorm's state_dict in a strict bind: a batch_norm with batch statistics accepts its
 * running statistics and its step counter (int64) and reads neither (fg_layer_ignored_info
 * lists them); the same names with another dtype or shape, or running statistics of a
 * module the spec does not have, are refused, naming the tensor. */
static void batch_norm_state_in_a_strict_bind(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    fg_layer *layer = NULL;
    const char *spec = "return layer \"bnstate\" {\n"
                       "  input = { \"N\", 1, 3, 3 },\n"
                       "  conv2d { out_channels = 2, kernel = 1 },\n"
                       "  batch_norm { name = \"bn\", momentum = 0.1 },\n"
                       "}\n";
    if (fg_layer_load_string(ctx, "bnstate.lua", spec, &layer) != FG_OK)
        fail_msg("fg_layer_load_string: %s", fg_last_error());
    int count = -1;
    assert_int_equal(fg_layer_ignored_count(layer, &count), FG_OK);
    assert_int_equal(count, 3);
    static const char *const names[] = {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"};
    for (int i = 0; i < 3; i++) {
        const char *name = NULL, *dtype = NULL;
        int rank = -1;
        int64_t dims[FG_MAX_DIMS] = {0};
        assert_int_equal(fg_layer_ignored_info(layer, i, &name, &rank, dims, &dtype), FG_OK);
        assert_string_equal(name, names[i]);
        assert_int_equal(rank, i < 2 ? 1 : 0);
        if (i < 2)
            assert_int_equal(dims[0], 2);
        assert_string_equal(dtype, i < 2 ? "F32" : "I64");
    }

    static const char *const params = "\"conv.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,1,1],\"data_offsets\":[0,8]},"
                                      "\"conv.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                                      "\"bn.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
                                      "\"bn.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}";
    static const char *const mean = "\"bn.running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[32,40]}";
    static const char *const var = "\"bn.running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[40,48]}";
    static const float payload[16] = {0.5f, -1.5f, 0.25f, 2, 1.5f, 0.75f, -0.5f, 0.125f, 0.3f, -0.2f, 1.1f, 0.9f, 7};
    char header[2048];
    /* what PyTorch's BatchNorm2d in training mode saves: binds strictly */
    snprintf(header, sizeof header, "{%s,%s,%s,%s}", params, mean, var,
             "\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[48,56]}");
    assert_int_equal(fg_layer_bind_safetensors(layer, make_file("train_bn.safetensors", header, -1, payload, 56), 0),
                     FG_OK);
    /* the parameters are bound and the running statistics left alone: the CPU reference runs
     * on the batch's statistics (two samples, so the variance is not zero) */
    float x[18], y[36];
    for (int i = 0; i < 18; i++)
        x[i] = (float)((i * 7) % 11) - 4.5f;
    assert_int_equal(fg_layer_run_cpu(layer, x, y, 2), FG_OK);
    double sum = 0, sq = 0; /* channel 0 of both samples: batch-normalized, then weight 1.5, bias -0.5 */
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 9; i++) {
            double v = (y[n * 18 + i] + 0.5) / 1.5;
            sum += v;
            sq += v * v;
        }
    assert_true(fabs(sum / 18) < 1e-5 && fabs(sq / 18 - 1) < 1e-3);

    struct {
        const char *file, *extra, *expect;
        size_t payload;
    } cases[] = {
        {"counter_f32.safetensors", "\"bn.num_batches_tracked\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[48,52]}",
         "tensor 'bn.num_batches_tracked' is F32 []; layer bnstate accepts it, and leaves it unused, as BatchNorm "
         "state: I64 []",
         52},
        {"counter_vector.safetensors",
         "\"other.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[48,64]}",
         "tensor 'other.num_batches_tracked' is I64 [2]; layer bnstate accepts it, and leaves it unused, as "
         "BatchNorm state: I64 []",
         64},
        {"mean_shape.safetensors", "\"bn.running_mean\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[32,44]}",
         "tensor 'bn.running_mean' is F32 [3]; layer bnstate accepts it, and leaves it unused, as BatchNorm state: "
         "F32 (or F16, BF16) [2]",
         52},
        {"mean_of_another.safetensors",
         "\"bn2.running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[48,56]}",
         "tensor 'bn2.running_mean' is not a parameter of layer bnstate", 56},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strncmp(cases[i].extra, "\"bn.running_mean\"", 17) == 0) /* in place of the good one */
            snprintf(header, sizeof header, "{%s,%s,%s}", params, cases[i].extra,
                     "\"bn.running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[44,52]}");
        else
            snprintf(header, sizeof header, "{%s,%s,%s,%s}", params, mean, var, cases[i].extra);
        const char *path = make_file(cases[i].file, header, -1, payload, cases[i].payload);
        fg_status st = fg_layer_bind_safetensors(layer, path, 0);
        if (st != FG_ERR_TENSOR_FILE)
            fail_msg("%s: status %s, expected FG_ERR_TENSOR_FILE", cases[i].file, fg_status_name(st));
        fgt_assert_contains(fg_last_error(), path);
        fgt_assert_contains(fg_last_error(), cases[i].expect);
        /* what allow_extra is for */
        assert_int_equal(fg_layer_bind_safetensors(layer, path, 1), FG_OK);
    }
    /* a step counter of a module the spec does not have is still accepted (it was always) */
    snprintf(header, sizeof header, "{%s,%s}", params,
             "\"stem.bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}");
    assert_int_equal(fg_layer_bind_safetensors(layer, make_file("counter_only.safetensors", header, -1, payload, 40), 0),
                     FG_OK);
    /* misuse of the list */
    const char *name = NULL;
    assert_int_equal(fg_layer_ignored_info(layer, 3, &name, NULL, NULL, NULL), FG_ERR_INVALID_ARGUMENT);
    fgt_assert_contains(fg_last_error(), "fg_layer_ignored_info: index 3 out of range (the layer ignores 3");
    assert_int_equal(fg_layer_ignored_count(layer, NULL), FG_ERR_INVALID_ARGUMENT);
    fgt_assert_contains(fg_last_error(), "fg_layer_ignored_count: count is NULL");
    assert_int_equal(fg_layer_destroy(layer), FG_OK);
    assert_int_equal(fg_layer_ignored_count(layer, &count), FG_ERR_INVALID_ARGUMENT);
    fgt_assert_contains(fg_last_error(), "not a live layer");
    assert_int_equal(fg_context_destroy(ctx), FG_OK);
}

/* A batch_norm folded into the conv (gen/fold.h) in a CPU-only context: the layer's folded
 * weight and bias are computed when the last tensor they come from is bound (from a file),
 * recomputed at every later bind of one of them, and equal fg_bn_fold_compute on the values
 * bound at that moment; the bound tensors stay as they were given. */
static void folded_batch_norm_follows_every_bind(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    fg_layer *layer = NULL;
    const char *spec = "return layer \"fold\" {\n"
                       "  input = { \"N\", 1, 3, 3 },\n"
                       "  conv2d { out_channels = 2, kernel = 1, bias = false },\n"
                       "  batch_norm { name = \"bn\", stats = \"running\" },\n"
                       "}\n";
    if (fg_layer_load_string(ctx, "fold.lua", spec, &layer) != FG_OK)
        fail_msg("fg_layer_load_string: %s", fg_last_error());
    const fg_bn_fold *fold = &layer->plan.fold;
    assert_int_equal(fold->op, 1);
    const fg_param_binding *fw = &layer->params[fold->folded_weight], *fb = &layer->params[fold->folded_bias];
    const char *header = "{\"conv.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,1,1],\"data_offsets\":[0,8]},"
                         "\"bn.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                         "\"bn.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
                         "\"bn.running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
                         "\"bn.running_var\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[32,40]},"
                         "\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[40,48]}}";
    /* conv.weight [2,1,1,1], bn.weight, bn.bias, bn.running_mean, bn.running_var [2], the counter */
    static const float six[12] = {0.5f, -1.5f, 2, 0.75f, -0.5f, 0.125f, 0.3f, -0.2f, 1.1f, 0.9f, 0, 0};
    /* before the last of them is bound there is nothing to fold */
    assert_int_equal(fg_layer_bind_host(layer, "conv.weight", six, 8), FG_OK);
    assert_false(fw->bound || fb->bound);
    assert_int_equal(fg_layer_bind_safetensors(layer, make_file("fold.safetensors", header, -1, six, 48), 0), FG_OK);
    float want_w[2], want_b[2];
    for (int round = 0; round < 3; round++) {
        const float *params[FG_MAX_PARAMS] = {0};
        for (int p = 0; p < layer->ir.n_params; p++)
            params[p] = layer->params[p].host;
        fg_bn_fold_compute(fold, params, want_w, want_b);
        assert_true(fw->bound && fb->bound);
        assert_memory_equal(fw->host, want_w, sizeof want_w);
        assert_memory_equal(fb->host, want_b, sizeof want_b);
        if (round == 0) { /* w' = w * gamma / sqrt(var + eps); then a new running variance */
            assert_true(want_w[0] == (float)(0.5 * 2 / sqrt((double)1.1f + 1e-5)));
            static const float var[2] = {4, 0.25f};
            assert_int_equal(fg_layer_bind_host(layer, "bn.running_var", var, sizeof var), FG_OK);
            assert_true(layer->params[fgt_find_param(&layer->ir, "bn.running_var")].host[0] == 4);
        } else if (round == 1) { /* a new conv weight */
            static const float w[2] = {-1, 3};
            assert_int_equal(fg_layer_bind_host(layer, "conv.weight", w, sizeof w), FG_OK);
        }
    }
    assert_true(want_w[0] == (float)(-1.0 * 2 / sqrt(4 + 1e-5)));
    assert_int_equal(fg_layer_destroy(layer), FG_OK);
    assert_int_equal(fg_context_destroy(ctx), FG_OK);
}

/* common/half.h: rounding to nearest even (ties, subnormals, overflow, NaN) and every 16-bit
 * pattern widened and narrowed back unchanged. */
static void half_conversions(void **state)
{
    (void)state;
    static const struct {
        float x;
        int dtype;
        uint16_t bits;
    } known[] = {
        {1.0f, 1, 0x3f80}, {1.0f, 2, 0x3c00}, {-2.0f, 1, 0xc000}, {-2.0f, 2, 0xc000},
        {1.0f + 0x1p-8f, 1, 0x3f80},        /* a tie: to even */
        {1.0f + 0x3p-8f, 1, 0x3f82},        /* a tie: to even (up) */
        {1.0f + 0x1p-11f, 2, 0x3c00},       {1.0f + 0x3p-11f, 2, 0x3c02},
        {65504.0f, 2, 0x7bff},              {65519.0f, 2, 0x7bff}, {65520.0f, 2, 0x7c00}, /* overflow at the tie */
        {0x1p-24f, 2, 0x0001},              {0x1p-25f, 2, 0x0000}, {0x3p-25f, 2, 0x0002}, /* subnormals */
        {0x1p-133f, 1, 0x0001},             {3.4e38f, 1, 0x7f80}, /* bf16 overflows to infinity */
        {-0.0f, 1, 0x8000},                 {-0.0f, 2, 0x8000},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        uint16_t got = fg_float_to_half_bits(known[i].x, known[i].dtype);
        if (got != known[i].bits)
            fail_msg("%a as %s: 0x%04x, expected 0x%04x", (double)known[i].x, known[i].dtype == 1 ? "bf16" : "fp16",
                     got, known[i].bits);
    }
    assert_int_equal(fg_float_to_half_bits(NAN, 1), 0x7fc0);
    assert_int_equal(fg_float_to_half_bits(NAN, 2), 0x7e00);
    for (int dtype = 1; dtype <= 2; dtype++)
        for (uint32_t h = 0; h < 0x10000; h++) {
            float f = fg_half_bits_to_float((uint16_t)h, dtype);
            if (isnan(f))
                continue;
            if (fg_float_to_half_bits(f, dtype) != h || fg_round_to_dtype(f, dtype) != (double)f)
                fail_msg("dtype %d: 0x%04x does not round-trip", dtype, h);
        }
}

/* A BF16 or F16 tensor is written in its dtype (rounded) and reads back as those values. */
static void half_written(void **state)
{
    (void)state;
    float v[4] = {1.0f + 0x3p-11f, -3.14159f, 1e-3f, 70000.0f};
    for (int dtype = 1; dtype <= 2; dtype++) {
        fg_tensor t = {.name = "output", .rank = 1, .dim = {4}, .count = 4, .data = v};
        snprintf(t.dtype, sizeof t.dtype, "%s", dtype == 1 ? "BF16" : "F16");
        char path[4096];
        snprintf(path, sizeof path, "%s/half_%d.safetensors", g_dir, dtype);
        fg_error err = {{0}};
        if (fg_safetensors_write(path, &t, 1, &err) != 0)
            fail_msg("write: %s", err.msg);
        fg_tensor_file f;
        if (fg_safetensors_read(path, &f, &err) != 0)
            fail_msg("read: %s", err.msg);
        assert_string_equal(f.tensors[0].dtype, t.dtype);
        for (int i = 0; i < 4; i++)
            assert_true(f.tensors[0].data[i] == (float)fg_round_to_dtype(v[i], dtype));
        fg_tensor_file_free(&f);
    }
}

/* Layers with dtype bf16 and fp16 on the CPU reference: each input value rounded to the dtype,
 * the float64 result rounded once: within half an ulp of the dtype of the float32 layer's
 * result on the rounded input, and a value of the dtype. fg_layer_dtype names the dtype. */
static void half_dtype_reference(void **state)
{
    (void)state;
    fg_context *ctx = cpu_context();
    static const char *const names[] = {"fp32", "bf16", "fp16"};
    const int64_t batch = 2, n_in = batch * 3 * 9 * 10;
    float *x = malloc(sizeof(float) * (size_t)n_in), *xr = malloc(sizeof(float) * (size_t)n_in);
    float w[4 * 3 * 3 * 3], b[4];
    for (int i = 0; i < 108; i++)
        w[i] = (float)sin(0.7 * i) * 0.4f;
    for (int i = 0; i < 4; i++)
        b[i] = 0.1f * (float)i - 0.15f;
    for (int64_t i = 0; i < n_in; i++)
        x[i] = (float)(0.5 + 0.49 * sin(1.3 * (double)i));
    float out[3][2 * 1 * 7 * 8];
    for (int dtype = 2; dtype >= 0; dtype--) {
        char src[1024];
        snprintf(src, sizeof src,
                 "return layer \"t\" {\n  input = { \"N\", 3, 9, 10 },\n%s"
                 "  conv2d { name = \"conv\", out_channels = 4, kernel = 3 },\n  group_norm { groups = 2, affine = false },\n"
                 "  gelu {},\n  logsumexp { dim = 1, keepdim = true },\n}\n",
                 dtype == 1 ? "  dtype = \"bf16\",\n" : dtype == 2 ? "  dtype = \"fp16\",\n" : "");
        fg_layer *layer = NULL;
        if (fg_layer_load_string(ctx, "half.lua", src, &layer) != FG_OK)
            fail_msg("load (%s): %s", names[dtype], fg_last_error());
        const char *name = NULL;
        int bytes = 0;
        assert_int_equal(fg_layer_dtype(layer, &name, &bytes), FG_OK);
        assert_string_equal(name, names[dtype]);
        assert_int_equal(bytes, dtype ? 2 : 4);
        assert_int_equal(fg_layer_dtype(layer, NULL, NULL), FG_ERR_INVALID_ARGUMENT);
        assert_int_equal(fg_layer_bind_host(layer, "conv.weight", w, sizeof w), FG_OK);
        assert_int_equal(fg_layer_bind_host(layer, "conv.bias", b, sizeof b), FG_OK);
        /* the fp32 layer runs on the values the half layers read: rounded to fp16 (finer
         * than bf16's, so each half layer is compared with the fp32 layer on its own input) */
        for (int64_t i = 0; i < n_in; i++)
            xr[i] = (float)fg_round_to_dtype(x[i], dtype ? dtype : 2);
        if (fg_layer_run_cpu(layer, dtype ? x : xr, out[dtype], batch) != FG_OK)
            fail_msg("run (%s): %s", names[dtype], fg_last_error());
        fg_layer_destroy(layer);
        if (dtype == 2) {
            for (int i = 0; i < 112; i++) {
                if (fg_round_to_dtype(out[2][i], 2) != (double)out[2][i])
                    fail_msg("fp16 output %d (%a) is not an fp16 value", i, (double)out[2][i]);
            }
        }
    }
    /* fp16 against the fp32 layer on the fp16-rounded input */
    for (int i = 0; i < 112; i++)
        if (fabs((double)out[2][i] - out[0][i]) > 0.5 * fg_dtype_ulp(out[0][i], 2) * (1 + 1e-6))
            fail_msg("fp16 output %d: %a, the fp32 layer's %a", i, (double)out[2][i], (double)out[0][i]);
    /* bf16 reads the input rounded to bf16: its result against the fp32 layer on that input */
    {
        fg_layer *layer = NULL;
        const char *src = "return layer \"t\" {\n  input = { \"N\", 3, 9, 10 },\n"
                          "  conv2d { name = \"conv\", out_channels = 4, kernel = 3 },\n  group_norm { groups = 2, affine = false },\n"
                          "  gelu {},\n  logsumexp { dim = 1, keepdim = true },\n}\n";
        assert_int_equal(fg_layer_load_string(ctx, "half.lua", src, &layer), FG_OK);
        assert_int_equal(fg_layer_bind_host(layer, "conv.weight", w, sizeof w), FG_OK);
        assert_int_equal(fg_layer_bind_host(layer, "conv.bias", b, sizeof b), FG_OK);
        for (int64_t i = 0; i < n_in; i++)
            xr[i] = (float)fg_round_to_dtype(x[i], 1);
        assert_int_equal(fg_layer_run_cpu(layer, xr, out[0], batch), FG_OK);
        fg_layer_destroy(layer);
    }
    for (int i = 0; i < 112; i++) {
        if (fg_round_to_dtype(out[1][i], 1) != (double)out[1][i])
            fail_msg("bf16 output %d (%a) is not a bf16 value", i, (double)out[1][i]);
        if (fabs((double)out[1][i] - out[0][i]) > 0.5 * fg_dtype_ulp(out[0][i], 1) * (1 + 1e-6))
            fail_msg("bf16 output %d: %a, the fp32 layer's %a", i, (double)out[1][i], (double)out[0][i]);
    }
    free(x);
    free(xr);
    fg_context_destroy(ctx);
}

int main(void)
{
    char *env = fgt_tmpdir("safetensors-env");
    fgt_isolate_environment(env);
    g_dir = fgt_tmpdir("safetensors");
    struct CMUnitTest tests[N_BAD + 12];
    for (int i = 0; i < N_BAD; i++)
        tests[i] = (struct CMUnitTest){bad_files[i].name, run_bad_file, NULL, NULL, (void *)&bad_files[i]};
    tests[N_BAD] = (struct CMUnitTest)cmocka_unit_test(too_short_and_unreadable);
    tests[N_BAD + 1] = (struct CMUnitTest)cmocka_unit_test(round_trip);
    tests[N_BAD + 2] = (struct CMUnitTest)cmocka_unit_test(other_dtypes_and_metadata);
    tests[N_BAD + 3] = (struct CMUnitTest)cmocka_unit_test(binding_checks_dtype_shape_and_names);
    tests[N_BAD + 4] = (struct CMUnitTest)cmocka_unit_test(zero_size_tie);
    tests[N_BAD + 5] = (struct CMUnitTest)cmocka_unit_test(too_many_tensors_and_fifo);
    tests[N_BAD + 6] = (struct CMUnitTest)cmocka_unit_test(batch_norm_state_in_a_strict_bind);
    tests[N_BAD + 7] = (struct CMUnitTest)cmocka_unit_test(folded_batch_norm_follows_every_bind);
    tests[N_BAD + 8] = (struct CMUnitTest)cmocka_unit_test(half_precision_widened);
    tests[N_BAD + 9] = (struct CMUnitTest)cmocka_unit_test(half_conversions);
    tests[N_BAD + 10] = (struct CMUnitTest)cmocka_unit_test(half_written);
    tests[N_BAD + 11] = (struct CMUnitTest)cmocka_unit_test(half_dtype_reference);
    int failed = _cmocka_run_group_tests("safetensors", tests, N_BAD + 12, NULL, NULL);
    fgt_rmtree(g_dir);
    free(g_dir);
    fgt_rmtree(env);
    free(env);
    return failed;
}
