/* SPDX-License-Identifier: Apache-2.0 */
/* The cubin cache: a miss then a hit; corrupt, truncated, empty and mismatched entries are
 * reported, ignored and rebuilt; unwritable caches cost the store but not the cubin;
 * shipped caches are read first and never written; concurrent builders of one key all
 * succeed and leave one valid entry; plan aliases skip rendering and, when bad, cost only
 * the rendering. Every test works in its own temporary directory. */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "fusegen.h"
#include "kernel_build.h"
#include "render.h"
#include "spec_loader.h"
#include "test_util.h"
#include "../runtime/environment.h"

/* The entry layout (runtime/cache.c): magic[8], format u32, key[64], arch[16],
 * generator[16], nvrtc major u32, minor u32, cubin size u64, meta size u64 (132 bytes),
 * then the cubin, the description, and a 32-byte BLAKE2b checksum of all before it. */
enum {
    OFF_FORMAT = 8,
    OFF_KEY = 12,
    OFF_ARCH = 76,
    OFF_GENERATOR = 92,
    HEADER_BYTES = 132,
    CHECKSUM_BYTES = 32,
};

#define ARCH "sm_90"

/* A small layer: compiles in a fraction of a second. */
static const char *const small_spec = "return layer \"cache_test\" {\n"
                                      "  input = { \"N\", 2, 10, 10 },\n"
                                      "  conv2d { out_channels = 4, kernel = 3 },\n"
                                      "  relu {},\n"
                                      "}\n";

typedef struct fixture {
    char *root;        /* this test's directory */
    fgt_rendered_layer layer; /* small_spec, loaded, planned and rendered */
    char key[FG_CACHE_KEY_HEX + 1]; /* of (src, ARCH) */
} fixture;

/* warnings the cache reports */
typedef struct warnings {
    int count;
    char last[4096];
} warnings;

static void collect_warning(void *ctx, const char *msg)
{
    warnings *w = ctx;
    w->count++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

/* this fusegen's identity (the NVRTC it loads), as the context and the CLI give the cache */
static fg_cache_identity test_identity;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->root = fgt_tmpdir("cache");
    fg_error err;
    if (fgt_render_layer("cache_test.lua", small_spec, &f->layer) != 0)
        return -1;
    if (fg_build_identity(&test_identity, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    char options[256];
    fg_nvrtc_options_string(ARCH, options, sizeof options);
    fg_cache_key(&test_identity, f->layer.src.source, f->layer.src.length, ARCH, options, f->key);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    fgt_rmtree(f->root);
    free(f->root);
    fgt_rendered_layer_free(&f->layer);
    free(f);
    return 0;
}

static char *subdir(const fixture *f, const char *name)
{
    return fgt_join(f->root, name);
}

static void init_cache(fg_cache *cache, const char *user_dir, const char *shipped, warnings *w)
{
    fg_error err = {{0}};
    if (fgt_cache_init(cache, user_dir, shipped ? shipped : "", &err) != 0)
        fail_msg("fg_cache_init: %s", err.msg);
    if (w) {
        memset(w, 0, sizeof *w);
        cache->warn = collect_warning;
        cache->warn_ctx = w;
    }
}

static void build(const fixture *f, fg_cache *cache, const char *store_dir, fg_built *out)
{
    fg_error err = {{0}};
    if (fg_build_cubin(FGT_BUILDER(cache, store_dir), f->layer.ir, f->layer.src.source, ARCH, NULL, out, &err) != 0)
        fail_msg("fg_build_cubin: %s", err.msg);
    assert_non_null(out->cubin);
    assert_true(out->cubin_size > 64);
    assert_memory_equal(out->cubin, "\x7f" "ELF", 4);
    assert_string_equal(out->key, f->key);
    assert_int_equal(out->n_kernels, f->layer.plan->n_passes);
}

static int count_entries_visit(void *ctx, const char *path, const char *key)
{
    (void)path;
    (void)key;
    ++*(int *)ctx;
    return 0;
}

static int count_entries(const char *dir)
{
    int n = 0;
    fg_error err;
    assert_int_equal(fg_cache_walk(dir, count_entries_visit, &n, &err), 0);
    return n;
}

static void entry_path(const char *dir, const char *key, char *buf, size_t cap)
{
    fg_cache_entry_path(dir, key, buf, cap);
}

static void verify_entry(const char *path, const char *key, const char *arch)
{
    fg_cache_entry e;
    fg_error err = {{0}};
    if (fg_cache_read_entry(path, &(fg_entry_expect){key, arch, fg_version()}, &e, &err) != 0)
        fail_msg("entry %s does not verify: %s", path, err.msg);
    assert_string_equal(e.arch, arch);
    assert_string_equal(e.path, path);
    assert_memory_equal(e.cubin, "\x7f" "ELF", 4);
    fg_cache_entry_free(&e);
}

/* Recomputes an entry's checksum after the test patched it. */
static void reseal(unsigned char *data, size_t size)
{
    crypto_generichash(data + size - CHECKSUM_BYTES, CHECKSUM_BYTES, data, size - CHECKSUM_BYTES, NULL, 0);
}

/* ---- keys, paths, configuration -------------------------------------------------------------- */

static void keys_and_paths(void **state)
{
    fixture *f = *state;
    char a[FG_CACHE_KEY_HEX + 1], b[FG_CACHE_KEY_HEX + 1];
    const char *src = f->layer.src.source;
    size_t len = f->layer.src.length;
    const fg_cache_identity id = {"0.1.0", "t", "g", 13, 0};
    fg_cache_identity other = id;
    fg_cache_key(&id, src, len, "sm_90", "opts", a);
    assert_int_equal(strlen(a), FG_CACHE_KEY_HEX);
    for (const char *p = a; *p; p++)
        assert_true((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'));
    fg_cache_key(&id, src, len, "sm_90", "opts", b);
    assert_string_equal(a, b); /* deterministic */
    fg_cache_key(&id, src, len, "sm_80", "opts", b);
    assert_string_not_equal(a, b);
    fg_cache_key(&id, src, len, "sm_90", "opts -G", b);
    assert_string_not_equal(a, b);
    other.nvrtc_minor = 1;
    fg_cache_key(&other, src, len, "sm_90", "opts", b);
    assert_string_not_equal(a, b);
    other = id;
    snprintf(other.templates_digest, sizeof other.templates_digest, "u");
    fg_cache_key(&other, src, len, "sm_90", "opts", b);
    assert_string_not_equal(a, b);
    other = id;
    snprintf(other.version, sizeof other.version, "0.1.1");
    fg_cache_key(&other, src, len, "sm_90", "opts", b);
    assert_string_not_equal(a, b);
    fg_cache_key(&id, src, len - 1, "sm_90", "opts", b);
    assert_string_not_equal(a, b);
    char path[1200];
    entry_path("/some/dir", a, path, sizeof path);
    char want[1200];
    snprintf(want, sizeof want, "/some/dir/%.2s/%s.fgc", a, a);
    assert_string_equal(path, want);
}

static void init_from_environment(void **state)
{
    (void)state;
    fg_cache c;
    fg_error err = {{0}};
    fg_env_runtime env;
    char *saved_dir = strdup(getenv("FUSEGEN_CACHE_DIR"));
    char *saved_xdg = strdup(getenv("XDG_CACHE_HOME"));
    char *saved_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;

    /* runtime/environment.c resolves the defaults once; the cache takes what it is given */
    setenv("FUSEGEN_CACHE_DIR", "/explicit/dir", 1);
    fg_env_runtime_read(&env);
    assert_string_equal(env.user_cache, "/explicit/dir");
    unsetenv("FUSEGEN_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    fg_env_runtime_read(&env);
    assert_string_equal(env.user_cache, "/xdg/fusegen");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/someone", 1);
    fg_env_runtime_read(&env);
    assert_string_equal(env.user_cache, "/home/someone/.cache/fusegen");
    unsetenv("HOME");
    fg_env_runtime_read(&env);
    assert_string_equal(env.user_cache, "");
    fgt_assert_contains(env.user_cache_error, "no cache directory");
    assert_int_equal(fgt_cache_init(&c, NULL, "", &err), -1);
    fgt_assert_contains(err.msg, "no cache directory");
    assert_int_equal(fgt_cache_init(&c, "/argument/wins", "", &err), 0);
    assert_string_equal(c.user_dir, "/argument/wins");
    assert_int_equal(c.n_shipped, 0);

    /* shipped caches: colon-separated, empty parts skipped */
    assert_int_equal(fgt_cache_init(&c, "/u", ":/ship/a::/ship/b:", &err), 0);
    assert_int_equal(c.n_shipped, 2);
    assert_string_equal(c.shipped[0], "/ship/a");
    assert_string_equal(c.shipped[1], "/ship/b");
    setenv("FUSEGEN_CACHE_PATH", "/env/ship", 1);
    fg_env_runtime_read(&env);
    assert_true(env.shipped_set);
    assert_string_equal(env.shipped_caches, "/env/ship");
    assert_int_equal(fgt_cache_init(&c, "/u", NULL, &err), 0); /* NULL: none; the cache reads no environment */
    assert_int_equal(c.n_shipped, 0);
    unsetenv("FUSEGEN_CACHE_PATH");
    char many[1024] = "";
    for (int i = 0; i < FG_CACHE_MAX_SHIPPED + 1; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "/s%d:", i);
    assert_int_equal(fgt_cache_init(&c, "/u", many, &err), -1);
    fgt_assert_contains(err.msg, "more than 16");

    setenv("FUSEGEN_CACHE_DIR", saved_dir, 1);
    setenv("XDG_CACHE_HOME", saved_xdg, 1);
    if (saved_home)
        setenv("HOME", saved_home, 1);
    free(saved_dir);
    free(saved_xdg);
    free(saved_home);
}

/* ---- miss, then hit ------------------------------------------------------------------------------ */

static void miss_then_hit(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "miss_then_hit");
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);

    fg_built first;
    build(f, &cache, NULL, &first);
    assert_false(first.from_cache);
    assert_false(first.shipped);
    if (!first.stored)
        fail_msg("not stored: %s", first.store_error);
    assert_true(first.compile_seconds > 0);
    for (int i = 0; i < first.n_kernels; i++)
        assert_int_equal(first.kernels[i].spill_stores, 0);
    char path[1200];
    entry_path(dir, f->key, path, sizeof path);
    verify_entry(path, f->key, ARCH);
    assert_int_equal(count_entries(dir), 1);
    /* entries are readable by others (a cache may be shared or shipped) */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);

    /* the description names the layer and its kernels */
    fg_cache_entry e;
    fg_error err;
    assert_int_equal(fg_cache_read_entry(path, &(fg_entry_expect){f->key, ARCH, fg_version()}, &e, &err), 0);
    char layer[128];
    fg_kernel_resources k[8];
    assert_int_equal(fg_describe_parse(e.meta_json, layer, sizeof layer, k, 8), f->layer.plan->n_passes);
    assert_string_equal(layer, "cache_test");
    assert_string_equal(k[0].name, "fg_pass0_conv");
    assert_int_equal(e.cubin_size, first.cubin_size);
    assert_memory_equal(e.cubin, first.cubin, first.cubin_size);
    fg_cache_entry_free(&e);

    fg_built second;
    build(f, &cache, NULL, &second);
    assert_true(second.from_cache);
    assert_false(second.shipped);
    assert_false(second.stored);
    assert_int_equal(second.cubin_size, first.cubin_size);
    assert_memory_equal(second.cubin, first.cubin, first.cubin_size);
    assert_int_equal(second.n_kernels, first.n_kernels);
    assert_string_equal(second.kernels[0].name, first.kernels[0].name);
    assert_int_equal(second.kernels[0].registers, first.kernels[0].registers);
    assert_int_equal(w.count, 0);
    assert_int_equal(count_entries(dir), 1);

    /* another architecture is another key, another entry */
    fg_built other;
    fg_error e2 = {{0}};
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, "sm_80", NULL, &other, &e2), 0);
    assert_false(other.from_cache);
    assert_string_not_equal(other.key, f->key);
    assert_int_equal(count_entries(dir), 2);
    fg_built_free(&other);
    fg_built_free(&first);
    fg_built_free(&second);
    free(dir);
}

/* ---- corruption ------------------------------------------------------------------------------------ */

typedef enum corruption { TRUNCATED, FLIPPED_BIT, EMPTY, BAD_MAGIC, EXTRA_BYTE } corruption;

/* Writes a corrupted copy of a valid entry over it; checks it is reported, skipped by the
 * lookup, rebuilt by the next build, and valid afterwards. */
static void corrupt_and_rebuild(const fixture *f, corruption kind, const char *name, const char *fragment)
{
    char *dir = subdir(f, name);
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);
    fg_built b;
    build(f, &cache, NULL, &b);
    assert_true(b.stored);
    fg_built_free(&b);
    char path[1200];
    entry_path(dir, f->key, path, sizeof path);
    size_t size = 0;
    unsigned char *data = fgt_read_file(path, &size);
    assert_non_null(data);
    assert_true(size > HEADER_BYTES + CHECKSUM_BYTES);
    size_t new_size = size;
    switch (kind) {
    case TRUNCATED:
        new_size = size / 2;
        break;
    case FLIPPED_BIT:
        data[size / 2] ^= 0x10;
        break;
    case EMPTY:
        new_size = 0;
        break;
    case BAD_MAGIC:
        memcpy(data, "NOTCUBIN", 8);
        break;
    case EXTRA_BYTE:
        new_size = size + 1; /* fgt_read_file leaves a NUL after the data */
        break;
    }
    assert_int_equal(fgt_write_file(path, data, new_size), 0);
    free(data);

    fg_cache_entry e;
    fg_error err = {{0}};
    assert_int_equal(fg_cache_read_entry(path, &(fg_entry_expect){f->key, ARCH, fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, path);
    fgt_assert_contains(err.msg, fragment);
    assert_null(e.cubin);

    assert_int_equal(fg_cache_lookup(&cache, f->key, ARCH, &e, &err), 0);
    assert_int_equal(w.count, 1);
    fgt_assert_contains(w.last, "ignoring a bad cache entry (it will be rebuilt)");
    fgt_assert_contains(w.last, path);
    fgt_assert_contains(w.last, fragment);

    build(f, &cache, NULL, &b);
    assert_false(b.from_cache);
    if (!b.stored)
        fail_msg("the rebuilt entry was not stored: %s", b.store_error);
    fg_built_free(&b);
    verify_entry(path, f->key, ARCH);
    build(f, &cache, NULL, &b);
    assert_true(b.from_cache);
    fg_built_free(&b);
    assert_int_equal(w.count, 2); /* the rebuild's own lookup saw the bad entry once more */
    free(dir);
}

static void truncated_entry(void **state)
{
    corrupt_and_rebuild(*state, TRUNCATED, "truncated", "do not match the file");
}

static void flipped_bit(void **state)
{
    corrupt_and_rebuild(*state, FLIPPED_BIT, "flipped", "checksum mismatch");
}

static void zero_length_entry(void **state)
{
    corrupt_and_rebuild(*state, EMPTY, "empty", "truncated entry (0 bytes");
}

static void bad_magic(void **state)
{
    corrupt_and_rebuild(*state, BAD_MAGIC, "magic", "not a fusegen cache entry");
}

static void trailing_garbage(void **state)
{
    corrupt_and_rebuild(*state, EXTRA_BYTE, "extra", "do not match the file");
}

/* Valid checksums over wrong contents: another arch, another generator, another format,
 * another key. Each is refused by name. */
static void mismatched_headers(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "mismatch");
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);
    fg_built b;
    build(f, &cache, NULL, &b);
    fg_built_free(&b);
    char path[1200];
    entry_path(dir, f->key, path, sizeof path);
    size_t size = 0;
    unsigned char *good = fgt_read_file(path, &size);
    assert_non_null(good);
    unsigned char *data = malloc(size);
    assert_non_null(data);
    fg_cache_entry e;
    fg_error err;

    /* the untouched bytes parse */
    assert_int_equal(fg_cache_parse_entry(good, size, &(fg_entry_expect){f->key, ARCH, fg_version()}, &e, &err), 0);
    assert_string_equal(e.arch, ARCH);
    char generator[17];
    snprintf(generator, sizeof generator, "%s", e.generator);
    fg_cache_entry_free(&e);

    /* another generator version */
    memcpy(data, good, size);
    memset(data + OFF_GENERATOR, 0, 16);
    memcpy(data + OFF_GENERATOR, "9.9.9", 5);
    reseal(data, size);
    assert_int_equal(fg_cache_parse_entry(data, size, &(fg_entry_expect){f->key, ARCH, fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, "entry was written by fusegen 9.9.9, this is");
    fgt_assert_contains(err.msg, generator);
    /* ... on disk: reported, skipped and rebuilt */
    assert_int_equal(fgt_write_file(path, data, size), 0);
    assert_int_equal(fg_cache_read_entry(path, &(fg_entry_expect){f->key, ARCH, fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, path);
    fgt_assert_contains(err.msg, "fusegen 9.9.9");
    assert_int_equal(fg_cache_lookup(&cache, f->key, ARCH, &e, &err), 0);
    fgt_assert_contains(w.last, "fusegen 9.9.9");
    build(f, &cache, NULL, &b);
    assert_false(b.from_cache);
    assert_true(b.stored);
    fg_built_free(&b);
    verify_entry(path, f->key, ARCH);

    /* another format */
    memcpy(data, good, size);
    data[OFF_FORMAT] = 2;
    reseal(data, size);
    assert_int_equal(fg_cache_parse_entry(data, size, &(fg_entry_expect){NULL, NULL, fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, "entry format 2, this fusegen reads format 1");

    /* the file name promises another key */
    memcpy(data, good, size);
    data[OFF_KEY] = data[OFF_KEY] == 'a' ? 'b' : 'a';
    reseal(data, size);
    assert_int_equal(fg_cache_parse_entry(data, size, &(fg_entry_expect){f->key, ARCH, fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, "entry holds key");

    /* an unterminated arch string */
    memcpy(data, good, size);
    memset(data + OFF_ARCH, 'x', 16);
    reseal(data, size);
    assert_int_equal(fg_cache_parse_entry(data, size, &(fg_entry_expect){NULL, NULL, fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, "malformed header strings");

    /* the size fields claim more than the file holds */
    memcpy(data, good, size);
    data[HEADER_BYTES - 9] = 0x7f; /* the cubin size's top byte */
    reseal(data, size);
    assert_int_equal(fg_cache_parse_entry(data, size, &(fg_entry_expect){NULL, NULL, fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, "do not match the file");

    free(data);
    free(good);
    free(dir);
}

/* An entry stored as sm_90 under the key sm_80 asks for is not used for sm_80. */
static void wrong_arch(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "arch");
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);
    fg_built b90;
    build(f, &cache, NULL, &b90);
    fg_error err = {{0}};
    char options[256], key80[FG_CACHE_KEY_HEX + 1];
    fg_nvrtc_options_string("sm_80", options, sizeof options);
    fg_cache_key(&test_identity, f->layer.src.source, f->layer.src.length, "sm_80", options, key80);
    /* plant the sm_90 cubin under the sm_80 key, labelled sm_90 */
    assert_int_equal(fg_cache_store(&cache, NULL, key80, "sm_90", b90.cubin, b90.cubin_size, "{}", &err), 0);
    char path[1200];
    entry_path(dir, key80, path, sizeof path);
    fg_cache_entry e;
    assert_int_equal(fg_cache_read_entry(path, &(fg_entry_expect){key80, "sm_80", fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, "entry is for sm_90, not sm_80");
    assert_int_equal(fg_cache_lookup(&cache, key80, "sm_80", &e, &err), 0);
    assert_int_equal(w.count, 1);
    fgt_assert_contains(w.last, "entry is for sm_90, not sm_80");

    fg_built b80;
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, "sm_80", NULL, &b80, &err), 0);
    assert_false(b80.from_cache);
    assert_true(b80.stored);
    assert_string_equal(b80.key, key80);
    /* the rebuilt cubin is an sm_80 one, not the planted sm_90 bytes */
    assert_false(b80.cubin_size == b90.cubin_size && memcmp(b80.cubin, b90.cubin, b90.cubin_size) == 0);
    verify_entry(path, key80, "sm_80");
    fg_built_free(&b80);
    fg_built_free(&b90);
    free(dir);
}

/* ---- unwritable caches ---------------------------------------------------------------------------- */

/* Returns 0 when a build into the read-only `dir` compiled but did not store, else a code;
 * no cmocka here: it may run in a child process. */
static int readonly_case(const fixture *f, const char *dir)
{
    fg_cache cache;
    fg_error err = {{0}};
    if (fgt_cache_init(&cache, dir, "", &err) != 0) {
        fprintf(stderr, "readonly: fg_cache_init: %s\n", err.msg);
        return 2;
    }
    fg_built b;
    if (fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, ARCH, NULL, &b, &err) != 0) {
        fprintf(stderr, "readonly: the build failed: %s\n", err.msg);
        return 3;
    }
    int rc = 0;
    if (!b.cubin || b.cubin_size < 4 || memcmp(b.cubin, "\x7f" "ELF", 4) != 0) {
        fprintf(stderr, "readonly: no cubin came back\n");
        rc = 4;
    } else if (b.from_cache || b.stored) {
        fprintf(stderr, "readonly: from_cache %d stored %d: the store should have failed\n", b.from_cache, b.stored);
        rc = 5;
    } else if (!strstr(b.store_error, "Permission denied") || !strstr(b.store_error, dir)) {
        fprintf(stderr, "readonly: store_error does not say why or where: '%s'\n", b.store_error);
        rc = 6;
    } else if (fg_cache_store(&cache, NULL, b.key, ARCH, b.cubin, b.cubin_size, "{}", &err) == 0 ||
               !strstr(err.msg, "Permission denied")) {
        fprintf(stderr, "readonly: a direct store did not fail clearly: '%s'\n", err.msg);
        rc = 7;
    }
    fg_built_free(&b);
    return rc;
}

static void readonly_directory(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "readonly");
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(chmod(dir, 0555), 0);
    if (geteuid() != 0) {
        int rc = readonly_case(f, dir);
        chmod(dir, 0755);
        free(dir);
        if (rc)
            fail_msg("read-only cache sub-case failed with code %d (see above)", rc);
        return;
    }
    /* root ignores permissions: run the case in a child that gives up root */
    printf("NOTE: running as root, which ignores directory permissions: the read-only cache case runs in a "
           "child process as uid/gid 65534\n");
    fflush(stdout);
    char *parent = strdup(f->root);
    char *slash = strrchr(parent, '/');
    if (slash)
        *slash = '\0';
    chmod(parent, 0755); /* the isolated environment's directory, then this test's */
    chmod(f->root, 0755);
    free(parent);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
            fprintf(stderr, "cannot drop root: %s\n", strerror(errno));
            _exit(100);
        }
        if (access(dir, W_OK) == 0) { /* still privileged somehow */
            fprintf(stderr, "the read-only directory is still writable after dropping root\n");
            _exit(101);
        }
        _exit(readonly_case(f, dir));
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    chmod(dir, 0755);
    free(dir);
    assert_true(WIFEXITED(status));
    int code = WEXITSTATUS(status);
    if (code == 100 || code == 101) {
        printf("NOTE: SKIPPED the read-only cache sub-case: running as root and the child could not give up its "
               "privileges (code %d)\n",
               code);
        skip();
    }
    if (code != 0)
        fail_msg("read-only cache sub-case failed in the child with code %d (see above)", code);
}

static void cache_path_is_a_file(void **state)
{
    fixture *f = *state;
    char *file = subdir(f, "not_a_directory");
    assert_int_equal(fgt_write_file(file, "x", 1), 0);
    fg_cache cache;
    warnings w;
    init_cache(&cache, file, NULL, &w);
    fg_built b;
    build(f, &cache, NULL, &b);
    assert_false(b.from_cache);
    assert_false(b.stored);
    fgt_assert_contains(b.store_error, "not_a_directory");
    fgt_assert_contains(b.store_error, "Not a directory");
    assert_int_equal(w.count, 0); /* a missing entry is not a bad one */
    fg_built_free(&b);
    /* the file is untouched */
    size_t len = 0;
    unsigned char *data = fgt_read_file(file, &len);
    assert_int_equal(len, 1);
    free(data);
    /* and a directory where an entry should be is reported as such */
    char *dir = subdir(f, "dir_entry");
    init_cache(&cache, dir, NULL, &w);
    char path[1200];
    entry_path(dir, f->key, path, sizeof path);
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/%.2s", dir, f->key);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    fg_cache_entry e;
    fg_error err;
    assert_int_equal(fg_cache_read_entry(path, &(fg_entry_expect){f->key, ARCH, fg_version()}, &e, &err), -1);
    fgt_assert_contains(err.msg, "not a regular file");
    assert_int_equal(fg_cache_lookup(&cache, f->key, ARCH, &e, &err), 0);
    assert_int_equal(w.count, 1);
    free(dir);
    free(file);
}

/* ---- shipped caches -------------------------------------------------------------------------------- */

static void shipped_cache(void **state)
{
    fixture *f = *state;
    char *ship = subdir(f, "ship");
    char *user = subdir(f, "ship_user");
    char *other = subdir(f, "ship_other");
    fg_cache cache;
    warnings w;

    /* `fusegen build --cache ship`: stored in ship, not in the user cache */
    init_cache(&cache, user, NULL, &w);
    fg_built b;
    build(f, &cache, ship, &b);
    assert_true(b.stored);
    fg_built_free(&b);
    assert_int_equal(count_entries(ship), 1);
    assert_int_equal(count_entries(user), 0);
    char ship_path[1200];
    entry_path(ship, f->key, ship_path, sizeof ship_path);
    size_t ship_size = 0;
    unsigned char *ship_bytes = fgt_read_file(ship_path, &ship_size);
    assert_non_null(ship_bytes);

    /* found there first, nothing written to the user cache */
    char shipped_list[2400];
    snprintf(shipped_list, sizeof shipped_list, "%s:%s", other, ship); /* the first has nothing */
    init_cache(&cache, user, shipped_list, &w);
    assert_int_equal(cache.n_shipped, 2);
    build(f, &cache, NULL, &b);
    assert_true(b.from_cache);
    assert_true(b.shipped);
    assert_false(b.stored);
    fg_built_free(&b);
    assert_int_equal(count_entries(user), 0);
    assert_int_equal(w.count, 0);

    /* a shipped cache is never written */
    fg_error err = {{0}};
    assert_int_equal(fg_cache_store(&cache, ship, f->key, ARCH, "cubin", 5, "{}", &err), -1);
    fgt_assert_contains(err.msg, "shipped (read-only) cache; not writing to it");
    fgt_assert_contains(err.msg, ship);

    /* searched before the user cache: plant a different entry for the same key there */
    fg_cache plain;
    init_cache(&plain, user, NULL, NULL);
    static const char fake[] = "\x7f" "ELF fake user cubin";
    assert_int_equal(fg_cache_store(&plain, NULL, f->key, ARCH, fake, sizeof fake, "{}", &err), 0);
    fg_cache_entry e;
    assert_int_equal(fg_cache_lookup(&cache, f->key, ARCH, &e, &err), 1);
    assert_true(e.shipped);
    assert_string_equal(e.path, ship_path);
    assert_false(e.cubin_size == sizeof fake);
    fg_cache_entry_free(&e);

    /* a bad shipped entry is reported and skipped (the user's is used), and left as it is */
    unsigned char *bad = malloc(ship_size);
    memcpy(bad, ship_bytes, ship_size);
    bad[ship_size / 3] ^= 1;
    assert_int_equal(fgt_write_file(ship_path, bad, ship_size), 0);
    assert_int_equal(fg_cache_lookup(&cache, f->key, ARCH, &e, &err), 1);
    assert_false(e.shipped);
    assert_int_equal(e.cubin_size, sizeof fake);
    fg_cache_entry_free(&e);
    assert_int_equal(w.count, 1);
    fgt_assert_contains(w.last, "ignoring a bad entry in the shipped cache");
    fgt_assert_contains(w.last, ship_path);

    /* with no user entry either, the build compiles and stores into the user cache only */
    char user_path[1200];
    entry_path(user, f->key, user_path, sizeof user_path);
    assert_int_equal(unlink(user_path), 0);
    build(f, &cache, NULL, &b);
    assert_false(b.from_cache);
    assert_true(b.stored);
    fg_built_free(&b);
    verify_entry(user_path, f->key, ARCH);
    size_t after_size = 0;
    unsigned char *after = fgt_read_file(ship_path, &after_size);
    assert_int_equal(after_size, ship_size);
    assert_memory_equal(after, bad, ship_size); /* the shipped file was not "repaired" */
    free(after);
    free(bad);
    free(ship_bytes);
    free(ship);
    free(user);
    free(other);
}

/* ---- concurrency ------------------------------------------------------------------------------------ */

static void concurrent_builders(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "concurrent");
    enum { WORKERS = 4 };
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        fflush(stdout);
        fflush(stderr);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(go[1]);
            char c;
            if (read(go[0], &c, 1) < 0) /* returns 0 when the parent closes: all start together */
                _exit(10);
            fg_cache cache;
            fg_error err = {{0}};
            if (fgt_cache_init(&cache, dir, "", &err) != 0) {
                fprintf(stderr, "worker %d: %s\n", i, err.msg);
                _exit(11);
            }
            fg_built b;
            if (fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, ARCH, NULL, &b, &err) != 0) {
                fprintf(stderr, "worker %d: %s\n", i, err.msg);
                _exit(12);
            }
            int rc = 0;
            if (!b.from_cache && !b.stored) {
                fprintf(stderr, "worker %d: compiled but not stored: %s\n", i, b.store_error);
                rc = 13;
            }
            if (!b.cubin || memcmp(b.cubin, "\x7f" "ELF", 4) != 0)
                rc = 14;
            fg_built_free(&b);
            _exit(rc);
        }
    }
    close(go[0]);
    close(go[1]);
    int failures = 0;
    for (int i = 0; i < WORKERS; i++) {
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "worker %d: status 0x%x\n", i, status);
            failures++;
        }
    }
    assert_int_equal(failures, 0);

    /* one entry, valid, and no temporary files left behind */
    assert_int_equal(count_entries(dir), 1);
    char path[1200];
    entry_path(dir, f->key, path, sizeof path);
    verify_entry(path, f->key, ARCH);
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/%.2s", dir, f->key);
    DIR *d = opendir(sub);
    assert_non_null(d);
    int files = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        files++;
        if (e->d_name[0] == '.')
            fail_msg("a temporary file was left behind: %s/%s", sub, e->d_name);
    }
    closedir(d);
    assert_int_equal(files, 1);

    /* and the parent now gets it from the cache */
    fg_cache cache;
    init_cache(&cache, dir, NULL, NULL);
    fg_built b;
    build(f, &cache, NULL, &b);
    assert_true(b.from_cache);
    fg_built_free(&b);
    free(dir);
}

/* Walking visits entries only: not temporary files, not stray names. */
static void walk_sees_entries_only(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "walk");
    fg_cache cache;
    init_cache(&cache, dir, NULL, NULL);
    fg_error err;
    assert_int_equal(fg_cache_store(&cache, NULL, f->key, ARCH, "\x7f" "ELF", 4, "{}", &err), 0);
    char stray[1300];
    snprintf(stray, sizeof stray, "%s/%.2s/.%s.tmp.abcdef", dir, f->key, f->key);
    assert_int_equal(fgt_write_file(stray, "x", 1), 0);
    snprintf(stray, sizeof stray, "%s/%.2s/notes.txt", dir, f->key);
    assert_int_equal(fgt_write_file(stray, "x", 1), 0);
    snprintf(stray, sizeof stray, "%s/README", dir);
    assert_int_equal(fgt_write_file(stray, "x", 1), 0);
    assert_int_equal(count_entries(dir), 1);
    /* a missing cache is an empty one */
    char missing[1200];
    snprintf(missing, sizeof missing, "%s/does/not/exist", dir);
    assert_int_equal(count_entries(missing), 0);
    /* bad keys and arch names are refused by the store */
    assert_int_equal(fg_cache_store(&cache, NULL, "../../etc", ARCH, "x", 1, "{}", &err), -1);
    fgt_assert_contains(err.msg, "bad cache key");
    assert_int_equal(fg_cache_store(&cache, NULL, f->key, "sm_90_with_a_very_long_name", "x", 1, "{}", &err), -1);
    free(dir);
}

/* ---- plan aliases ------------------------------------------------------------------------- */

/* fg_build_layer on the fixture's layer; checks the cubin is the fixture's source's. */
static void build_layer(const fixture *f, fg_cache *cache, fg_built *out)
{
    fg_error err = {{0}};
    if (fg_build_layer(FGT_BUILDER(cache, NULL), f->layer.ir, f->layer.plan, ARCH, out, &err) != 0)
        fail_msg("fg_build_layer: %s", err.msg);
    assert_string_equal(out->key, f->key);
    assert_memory_equal(out->cubin, "\x7f" "ELF", 4);
    assert_int_equal(out->n_kernels, f->layer.plan->n_passes);
}

static void alias_path(const fixture *f, const char *dir, char *buf, size_t cap)
{
    char plan_key[FG_CACHE_KEY_HEX + 1];
    fg_plan_key(&test_identity, f->layer.ir, f->layer.plan, ARCH, plan_key);
    fg_cache_alias_path(dir, plan_key, buf, cap);
}

/* The fixture layer's alias in dir exists and names the fixture's entry. */
static void assert_alias_names_fixture(const fixture *f, const char *dir)
{
    char path[1200], key[FG_CACHE_KEY_HEX + 1];
    alias_path(f, dir, path, sizeof path);
    fg_error err = {{0}};
    if (fg_cache_read_alias(path, key, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(key, f->key);
}

/* The first build renders, compiles and records the alias; the next one loads the same
 * cubin through it without rendering. */
static void plan_alias_skips_rendering(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "alias");
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);
    fg_built first, second;
    build_layer(f, &cache, &first);
    assert_true(first.rendered);
    assert_false(first.from_cache);
    assert_true(first.stored);
    assert_alias_names_fixture(f, dir);
    build_layer(f, &cache, &second);
    assert_false(second.rendered);
    assert_true(second.from_cache);
    assert_int_equal(second.cubin_size, first.cubin_size);
    assert_memory_equal(second.cubin, first.cubin, first.cubin_size);
    assert_int_equal(w.count, 0);
    fg_built_free(&first);
    fg_built_free(&second);
    free(dir);
}

/* The plan key covers the IR and the plan, not the spec's path. */
static void plan_key_inputs(void **state)
{
    fixture *f = *state;
    char a[FG_CACHE_KEY_HEX + 1], b[FG_CACHE_KEY_HEX + 1];
    fg_plan_key(&test_identity, f->layer.ir, f->layer.plan, ARCH, a);
    fg_plan_key(&test_identity, f->layer.ir, f->layer.plan, ARCH, b);
    assert_string_equal(a, b);
    assert_string_not_equal(a, f->key); /* its own key space */
    fg_layer_ir *ir = malloc(sizeof *ir);
    fg_plan *plan = malloc(sizeof *plan);
    assert_non_null(ir);
    assert_non_null(plan);
    memcpy(ir, f->layer.ir, sizeof *ir);
    memcpy(plan, f->layer.plan, sizeof *plan);
    snprintf(ir->file, sizeof ir->file, "/elsewhere/cache_test.lua");
    fg_plan_key(&test_identity, ir, plan, ARCH, b);
    assert_string_equal(a, b);
    ir->ops[0].line++; /* the source's comments name spec lines */
    fg_plan_key(&test_identity, ir, plan, ARCH, b);
    assert_string_not_equal(a, b);
    ir->ops[0].line--;
    plan->passes[0].launch.block *= 2;
    fg_plan_key(&test_identity, ir, plan, ARCH, b);
    assert_string_not_equal(a, b);
    plan->passes[0].launch.block /= 2;
    fg_plan_key(&test_identity, ir, plan, "sm_80", b);
    assert_string_not_equal(a, b);
    free(ir);
    free(plan);
}

/* A malformed alias is reported and ignored (the layer renders, finds its entry by the
 * source's key) and is written again; one naming a missing entry means a compile. */
static void bad_plan_alias(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "bad-alias");
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);
    fg_built b;
    build_layer(f, &cache, &b);
    fg_built_free(&b);
    char path[1200], key[FG_CACHE_KEY_HEX + 1];
    alias_path(f, dir, path, sizeof path);
    /* empty, truncated, another format, and a right-sized one whose key is a path */
    static const char *const bad[] = {
        "", "FGPLAN 1\n", "FGPLAN 2\n0000000000000000000000000000000000000000000000000000000000000000\n",
        "FGPLAN 1\n../../../../etc/passwd/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(fgt_write_file(path, bad[i], strlen(bad[i])), 0);
        fg_error err = {{0}};
        assert_int_equal(fg_cache_read_alias(path, key, &err), -1);
        fgt_assert_contains(err.msg, path);
        w.count = 0;
        build_layer(f, &cache, &b);
        assert_true(b.rendered);
        assert_true(b.from_cache);
        assert_int_equal(w.count, 1);
        fgt_assert_contains(w.last, "bad plan alias");
        fg_built_free(&b);
        assert_alias_names_fixture(f, dir); /* rewritten */
    }
    /* an alias naming an entry that is gone: compiled and stored again */
    char entry[1200];
    entry_path(dir, f->key, entry, sizeof entry);
    assert_int_equal(unlink(entry), 0);
    w.count = 0;
    build_layer(f, &cache, &b);
    assert_true(b.rendered);
    assert_false(b.from_cache);
    assert_true(b.stored);
    assert_int_equal(w.count, 0);
    fg_built_free(&b);
    verify_entry(entry, f->key, ARCH);
    free(dir);
}

/* An alias that names a valid entry of another layer (a collision, or a generator bug) is
 * reported and ignored: the layer gets its own kernels. */
static void alias_to_another_layer(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "other-layer");
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);
    static const char other[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    fg_error err = {{0}};
    assert_int_equal(fg_cache_store(&cache, NULL, other, ARCH, "\x7f" "ELF", 4, "{\"layer\":\"someone_else\"}", &err), 0);
    char plan_key[FG_CACHE_KEY_HEX + 1];
    fg_plan_key(&test_identity, f->layer.ir, f->layer.plan, ARCH, plan_key);
    assert_int_equal(fg_cache_store_alias(&cache, NULL, plan_key, other, &err), 0);
    fg_built b;
    build_layer(f, &cache, &b); /* its own key and cubin, checked there */
    assert_true(b.rendered);
    assert_int_equal(w.count, 1);
    fgt_assert_contains(w.last, "was built for no recorded layer and shape");
    fg_built_free(&b);
    assert_alias_names_fixture(f, dir); /* rewritten to its own entry */
    free(dir);
}

/* The hardening issue: an alias written for another spec with the same layer name and a
 * smaller input was accepted, and its kernels loaded for the wrong shape (out of bounds on
 * the GPU). The entry records the plan key it was built for; the alias must match it. */
static void alias_to_another_shape(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "other-shape");
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);
    fgt_rendered_layer smaller;
    assert_int_equal(fgt_render_layer("smaller.lua",
                                      "return layer \"cache_test\" {\n  input = { \"N\", 2, 6, 6 },\n"
                                      "  conv2d { out_channels = 4, kernel = 3 },\n  relu {},\n}\n",
                                      &smaller),
                     0);
    fg_built b;
    fg_error err = {{0}};
    assert_int_equal(fg_build_layer(FGT_BUILDER(&cache, NULL), smaller.ir, smaller.plan, ARCH, &b, &err), 0);
    assert_true(b.stored);
    char small_key[FG_CACHE_KEY_HEX + 1], plan_key[FG_CACHE_KEY_HEX + 1];
    memcpy(small_key, b.key, sizeof small_key);
    fg_built_free(&b);
    /* plant: the fixture layer's alias names the smaller layer's entry */
    fg_plan_key(&test_identity, f->layer.ir, f->layer.plan, ARCH, plan_key);
    assert_int_equal(fg_cache_store_alias(&cache, NULL, plan_key, small_key, &err), 0);
    build_layer(f, &cache, &b); /* checks it got its own cubin */
    assert_true(b.rendered);
    assert_string_not_equal(b.key, small_key);
    assert_int_equal(w.count, 1);
    fgt_assert_contains(w.last, "was built for another layer or shape");
    fg_built_free(&b);
    assert_alias_names_fixture(f, dir);
    fgt_rendered_layer_free(&smaller);
    free(dir);
}

/* `fusegen build --cache DIR` writes aliases too: a shipped cache serves them read-only. */
static void shipped_plan_alias(void **state)
{
    fixture *f = *state;
    char *ship = subdir(f, "ship-alias"), *user = subdir(f, "user-alias");
    fg_cache builder;
    init_cache(&builder, user, NULL, NULL);
    fg_built b;
    fg_error err = {{0}};
    assert_int_equal(fg_build_layer(FGT_BUILDER(&builder, ship), f->layer.ir, f->layer.plan, ARCH, &b, &err), 0);
    assert_true(b.stored);
    fg_built_free(&b);
    assert_int_equal(count_entries(user), 0);
    fg_cache cache;
    warnings w;
    init_cache(&cache, user, ship, &w);
    build_layer(f, &cache, &b);
    assert_false(b.rendered);
    assert_true(b.shipped);
    fg_built_free(&b);
    char path[1200];
    alias_path(f, user, path, sizeof path);
    assert_int_not_equal(access(path, F_OK), 0); /* nothing written to the user cache */
    assert_int_equal(count_entries(user), 0);
    assert_int_equal(w.count, 0);
    free(ship);
    free(user);
}

/* ---- caches other users can write --------------------------------------------------------------- */

/* A shipped cache writable by its group, and a user cache writable by everyone, are left out
 * with a warning saying why; nothing is read from or stored into them. */
static void untrusted_caches(void **state)
{
    fixture *f = *state;
    char *ship = subdir(f, "group-writable-ship"), *user = subdir(f, "world-writable-user");
    assert_int_equal(mkdir(ship, 0775), 0);
    assert_int_equal(chmod(ship, 0775), 0);
    assert_int_equal(mkdir(user, 0700), 0);
    assert_int_equal(chmod(user, 0777), 0);
    fg_cache cache;
    warnings w;
    init_cache(&cache, user, ship, &w);
    assert_int_equal(fg_cache_check_trust(&cache), 2);
    assert_int_equal(cache.n_shipped, 0);
    assert_int_equal(w.count, 2);
    fgt_assert_contains(w.last, "writable by every user (mode 0777)");
    fgt_assert_contains(cache.user_refused, user);
    fg_built b;
    build(f, &cache, NULL, &b);
    assert_false(b.stored);
    fgt_assert_contains(b.store_error, "writable by every user");
    fg_built_free(&b);
    /* made private, it is used again (and nothing was stored into it before) */
    assert_int_equal(chmod(user, 0700), 0);
    assert_int_equal(count_entries(user), 0);
    init_cache(&cache, user, NULL, &w);
    assert_int_equal(fg_cache_check_trust(&cache), 0);
    build(f, &cache, NULL, &b);
    assert_true(b.stored);
    fg_built_free(&b);
    free(ship);
    free(user);
}

/* A new user cache is created private (0700). */
static void new_cache_is_private(void **state)
{
    fixture *f = *state;
    char *parent = subdir(f, "fresh"), *dir = fgt_join(parent, "a/b/cache");
    fg_cache cache;
    warnings w;
    init_cache(&cache, dir, NULL, &w);
    fg_built b;
    build(f, &cache, NULL, &b);
    assert_true(b.stored);
    fg_built_free(&b);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    free(dir);
    free(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keys_and_paths),
        cmocka_unit_test(init_from_environment),
        cmocka_unit_test(miss_then_hit),
        cmocka_unit_test(truncated_entry),
        cmocka_unit_test(flipped_bit),
        cmocka_unit_test(zero_length_entry),
        cmocka_unit_test(bad_magic),
        cmocka_unit_test(trailing_garbage),
        cmocka_unit_test(mismatched_headers),
        cmocka_unit_test(wrong_arch),
        cmocka_unit_test(readonly_directory),
        cmocka_unit_test(cache_path_is_a_file),
        cmocka_unit_test(shipped_cache),
        cmocka_unit_test(concurrent_builders),
        cmocka_unit_test(walk_sees_entries_only),
        cmocka_unit_test(plan_alias_skips_rendering),
        cmocka_unit_test(plan_key_inputs),
        cmocka_unit_test(bad_plan_alias),
        cmocka_unit_test(alias_to_another_layer),
        cmocka_unit_test(alias_to_another_shape),
        cmocka_unit_test(untrusted_caches),
        cmocka_unit_test(new_cache_is_private),
        cmocka_unit_test(shipped_plan_alias),
    };
    char *dir = fgt_tmpdir("cache-env");
    fgt_isolate_environment(dir);
    int failed = cmocka_run_group_tests_name("cache", tests, setup, teardown);
    fgt_rmtree(dir);
    free(dir);
    return failed;
}
