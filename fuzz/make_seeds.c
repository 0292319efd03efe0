/* SPDX-License-Identifier: Apache-2.0 */
/* Writes the seed corpora of the fuzzers (committed under fuzz/corpus/; run this only to
 * refresh them): fuzz_make_seeds OUTPUT_DIR creates OUTPUT_DIR/<harness>/ with
 *   fuzz_spec:        the reference specs, the every-op spec, a small spec, and the source
 *                     of every bad-spec case of tests/test_spec_errors.c;
 *   fuzz_safetensors: files written by fg_safetensors_write, hand-made valid ones (metadata,
 *                     an I64 tensor, a scalar) and broken variants;
 *   fuzz_cache_entry: entries written by fg_cache_store (a small fake cubin, and a real
 *                     one compiled with NVRTC when it is available) and broken variants,
 *                     each behind the harness's mode byte (see fuzz_cache_entry.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* the bad-spec cases, with the test's own main renamed */
int spec_errors_main(void);
#define main spec_errors_main
#include "../tests/test_spec_errors.c"
#undef main

#include "cache.h"
#include "kernel_build.h"
#include "render.h"
#include "safetensors.h"

static const char *out_root;
static int written;

static void put(const char *harness, const char *name, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_root, harness);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", out_root, harness, name);
    if (fgt_write_file(path, data, len) != 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    written++;
}

/* ---- specs ---------------------------------------------------------------------------------------- */

static const char small_spec[] = "return layer \"seed\" {\n"
                                 "  input = { \"N\", 2, 10, 10 },\n"
                                 "  conv2d { out_channels = 4, kernel = 3 },\n"
                                 "  relu {},\n"
                                 "}\n";

static void spec_seeds(void)
{
    for (int i = 0; i < FGT_N_REFERENCE_SPECS; i++) {
        char path[1024], name[256];
        size_t len = 0;
        unsigned char *src = fgt_read_file(fgt_spec_path(fgt_reference_specs[i], path, sizeof path), &len);
        if (!src) {
            fprintf(stderr, "cannot read %s\n", path);
            exit(1);
        }
        snprintf(name, sizeof name, "good-%s.lua", fgt_reference_specs[i]);
        put("fuzz_spec", name, src, len);
        free(src);
    }
    put("fuzz_spec", "good-every-op.lua", fgt_every_op_spec, strlen(fgt_every_op_spec));
    put("fuzz_spec", "good-small.lua", small_spec, strlen(small_spec));
    for (int i = 0; i < N_CASES; i++) {
        char name[256];
        snprintf(name, sizeof name, "bad-%s.lua", cases[i].name);
        put("fuzz_spec", name, cases[i].source, strlen(cases[i].source));
    }
}

/* ---- safetensors --------------------------------------------------------------------------------- */

static void put_file(const char *harness, const char *name, const char *path)
{
    size_t len = 0;
    unsigned char *data = fgt_read_file(path, &len);
    if (!data) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    put(harness, name, data, len);
    free(data);
}

/* a hand-made file: 8-byte length, the header, `payload` bytes of a counting pattern */
static void put_safetensors(const char *name, const char *header, size_t payload)
{
    size_t hlen = strlen(header);
    size_t len = 8 + hlen + payload;
    unsigned char *b = calloc(1, len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(b + 8, header, hlen);
    for (size_t i = 0; i < payload; i++)
        b[8 + hlen + i] = (unsigned char)i;
    put("fuzz_safetensors", name, b, len);
    free(b);
}

static void safetensors_seeds(const char *tmp)
{
    char path[4096];
    fg_error err;
    float w[72], bias[4], scale[4];
    for (int i = 0; i < 72; i++)
        w[i] = (float)i * 0.5f;
    for (int i = 0; i < 4; i++)
        bias[i] = scale[i] = (float)i;
    fg_tensor three[3] = {
        {.name = "conv.weight", .dtype = "F32", .rank = 4, .dim = {4, 2, 3, 3}, .count = 72, .data = w},
        {.name = "conv.bias", .dtype = "F32", .rank = 1, .dim = {4}, .count = 4, .data = bias},
        {.name = "scale", .dtype = "F32", .rank = 3, .dim = {4, 1, 1}, .count = 4, .data = scale},
    };
    snprintf(path, sizeof path, "%s/three.safetensors", tmp);
    if (fg_safetensors_write(path, three, 3, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    put_file("fuzz_safetensors", "good-three.safetensors", path);
    snprintf(path, sizeof path, "%s/one.safetensors", tmp);
    fg_tensor one = {.name = "w", .dtype = "F32", .rank = 2, .dim = {2, 3}, .count = 6, .data = w};
    if (fg_safetensors_write(path, &one, 1, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    put_file("fuzz_safetensors", "good-one.safetensors", path);
    snprintf(path, sizeof path, "%s/none.safetensors", tmp);
    if (fg_safetensors_write(path, NULL, 0, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    put_file("fuzz_safetensors", "good-empty.safetensors", path);

    /* hand-made: what PyTorch writes for a BatchNorm (metadata, an I64 counter), a scalar */
    put_safetensors("good-state-dict.safetensors",
                    "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"bn.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                    "\"bn.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]},"
                    "\"bn.running_mean\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[32,48]},"
                    "\"bn.running_var\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[48,64]},"
                    "\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[64,72]}}",
                    72);
    put_safetensors("good-scalar-and-f16.safetensors",
                    "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                    "\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[4,12]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[12,12]}}",
                    12);
    /* broken */
    put_safetensors("bad-overlap.safetensors",
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                    24);
    put_safetensors("bad-past-end.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}",
                    16);
    put_safetensors("bad-reversed.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8);
    put_safetensors("bad-shape-mismatch.safetensors",
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16);
    put_safetensors("bad-negative-shape.safetensors",
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16);
    put_safetensors("bad-huge-shape.safetensors",
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,16]}}", 16);
    put_safetensors("bad-unknown-dtype.safetensors",
                    "{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
    put_safetensors("bad-duplicate.safetensors",
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    8);
    put_safetensors("bad-not-object.safetensors", "[1,2,3]", 0);
    put_safetensors("bad-json.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],", 4);
    put_safetensors("bad-fields.safetensors", "{\"a\":{\"dtype\":5,\"shape\":\"x\",\"data_offsets\":{}}}", 4);
    put_safetensors("bad-rank.safetensors",
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
    unsigned char huge_len[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    put("fuzz_safetensors", "bad-header-length.safetensors", huge_len, sizeof huge_len);
    put("fuzz_safetensors", "bad-short.safetensors", "\x02\0\0", 3);
}

/* ---- cache entries -------------------------------------------------------------------------------------- */

/* mode byte (fuzz_cache_entry.c): bit 0 set = parse as is; clear = checksum recomputed;
 * bit 1 = expect the harness's key; bit 2 = expect arch sm_90 */
static void put_entry(const char *name, int mode, const unsigned char *data, size_t len)
{
    unsigned char *b = malloc(len + 1);
    b[0] = (unsigned char)mode;
    memcpy(b + 1, data, len);
    put("fuzz_cache_entry", name, b, len + 1);
    free(b);
}

enum { HEADER = 132, SUM = 32 };

static void cache_seeds(const char *tmp)
{
    fg_cache cache;
    fg_error err;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/cache", tmp);
    if (fg_cache_init(&cache, dir, "", &err) != 0 || fg_build_identity(&cache.identity, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    static const char key[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    unsigned char cubin[256];
    memset(cubin, 0, sizeof cubin);
    memcpy(cubin, "\x7f" "ELF\x02\x01\x01", 7);
    for (size_t i = 8; i < sizeof cubin; i++)
        cubin[i] = (unsigned char)(i * 7);
    const char *meta = "{\"arch\":\"sm_90\",\"compile_seconds\":0.5,\"created\":1700000000,\"generator\":\"0.1.0\","
                       "\"kernels\":[{\"name\":\"fg_pass0_conv\",\"registers\":96,\"spill_loads\":0,"
                       "\"spill_stores\":0,\"stack_frame\":0},{\"name\":\"fg_pass1_norm\",\"registers\":40,"
                       "\"spill_loads\":4,\"spill_stores\":4,\"stack_frame\":16}],\"layer\":\"seed\","
                       "\"spec\":\"seed.lua\"}";
    if (fg_cache_store(&cache, NULL, key, "sm_90", cubin, sizeof cubin, meta, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    char path[4200];
    fg_cache_entry_path(dir, key, path, sizeof path);
    size_t len = 0;
    unsigned char *good = fgt_read_file(path, &len);
    if (!good) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    put_entry("good-as-is.fgc", 1, good, len);
    put_entry("good-resealed.fgc", 0, good, len);
    put_entry("good-expect-key-arch.fgc", 6, good, len);
    put_entry("good-expect-key-arch-as-is.fgc", 7, good, len);

    unsigned char *b = malloc(len + 16);
    memcpy(b, good, len);
    b[HEADER + 10] ^= 0x20;
    put_entry("bad-flipped-bit.fgc", 1, b, len);
    put_entry("bad-truncated.fgc", 0, good, len / 2);
    put_entry("bad-header-only.fgc", 0, good, HEADER + SUM);
    put_entry("bad-empty.fgc", 0, good, 0);
    memcpy(b, good, len);
    memcpy(b, "NOTCUBIN", 8);
    put_entry("bad-magic.fgc", 0, b, len);
    memcpy(b, good, len);
    b[8] = 2;
    put_entry("bad-format.fgc", 0, b, len);
    memcpy(b, good, len);
    memset(b + 76, 'x', 16);
    put_entry("bad-arch-unterminated.fgc", 0, b, len);
    memcpy(b, good, len);
    memcpy(b + 92, "9.9.9\0\0\0", 8);
    put_entry("bad-generator.fgc", 0, b, len);
    memcpy(b, good, len);
    b[HEADER - 9] = 0x7f; /* the cubin size's top byte */
    put_entry("bad-cubin-size.fgc", 0, b, len);
    memcpy(b, good, len);
    b[len - SUM - 1] = '}'; /* the description loses its NUL */
    put_entry("bad-meta-unterminated.fgc", 0, b, len);
    memcpy(b, good, len);
    memcpy(b + HEADER + sizeof cubin, "{\"kernels\":[1,\"x\",{\"name\":5}],\"layer\":[]", 41);
    put_entry("bad-meta-json.fgc", 0, b, len);
    memcpy(b, good, len);
    memcpy(b + len, "trailing", 8);
    put_entry("bad-trailing.fgc", 0, b, len + 8);
    free(b);
    free(good);

    /* a real entry, compiled from the small spec (skipped without NVRTC) */
    fg_layer_ir *ir = malloc(sizeof *ir);
    fg_plan *plan = malloc(sizeof *plan);
    fg_rendered src;
    fg_plan_options opts;
    fg_plan_options_init(&opts, 90);
    fg_built built;
    if (fg_spec_load_string("seed.lua", small_spec, strlen(small_spec), ir, &err) == 0 &&
        fg_plan_layer(ir, &opts, plan, &err) == 0 && fg_render(ir, plan, &src, &err) == 0) {
        if (fg_build_cubin(&(fg_builder){.cache = &cache}, ir, src.source, "sm_90", NULL, &built, &err) == 0 && built.stored) {
            fg_cache_entry_path(dir, built.key, path, sizeof path);
            unsigned char *real = fgt_read_file(path, &len);
            if (real)
                put_entry("good-compiled.fgc", 5, real, len);
            free(real);
            fg_built_free(&built);
        } else {
            fprintf(stderr, "note: no compiled entry seed: %s\n", err.msg);
        }
        fg_rendered_free(&src);
    }
    free(plan);
    free(ir);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
        return 2;
    }
    out_root = argv[1];
    mkdir(out_root, 0755);
    char *tmp = fgt_tmpdir("seeds");
    fgt_isolate_environment(tmp);
    spec_seeds();
    safetensors_seeds(tmp);
    cache_seeds(tmp);
    fgt_rmtree(tmp);
    free(tmp);
    printf("wrote %d seed files under %s\n", written, out_root);
    return 0;
}
