/* SPDX-License-Identifier: Apache-2.0 */
/* Caches that cannot be written: fusegen still produces the kernels (compiled in memory)
 * and says why it could not store them, and never leaves a partial entry or a temporary
 * file behind, nor touches the entries already there.
 *
 *   - a cache directory that does not exist yet is created (parents too);
 *   - one whose parent is a regular file cannot be: not stored, "Not a directory";
 *   - a path longer than the cache keeps is refused, never truncated;
 *   - a full disk: a real one (a full 256 KiB tmpfs, where mounting one is allowed), and
 *     one simulated with RLIMIT_FSIZE in a child process (SIGXFSZ ignored, so the
 *     write fails with EFBIG like ENOSPC would): at 0 bytes (nothing fits) and at 4 KiB (the
 *     header and part of the cubin fit, then the write fails);
 *   - the same through the CLI (`fusegen build`, its path given as argv[1]): exit status 1,
 *     each kernel set reported "compiled ... NOT stored: <why>"; for a full disk, a cache
 *     path that is a file, and a read-only directory (as an unprivileged user when the
 *     test runs as root, which ignores permissions).
 *
 * A real ENOSPC needs a tiny tmpfs, which only root or an unprivileged user namespace may
 * mount (in a private mount namespace of a child: nothing outlives the test); that case
 * is skipped where neither is allowed, and the file size limit exercises the same code
 * path (a write() failing in the middle of an entry) everywhere. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "kernel_build.h"
#include "render.h"
#include "spec_loader.h"
#include "test_util.h"

#define ARCH "sm_90"
#define OTHER_ARCH "sm_80"

static const char *fusegen_binary; /* argv[1] */
static const char *unprivileged_tmpdir; /* $TMPDIR for the CLI run as uid 65534 */

/* A small layer: compiles in a fraction of a second. */
static const char *const small_spec = "return layer \"storage_test\" {\n"
                                      "  input = { \"N\", 2, 10, 10 },\n"
                                      "  conv2d { out_channels = 4, kernel = 3 },\n"
                                      "  relu {},\n"
                                      "}\n";

typedef struct fixture {
    char *root;
    fgt_rendered_layer layer; /* small_spec, loaded, planned and rendered */
    char spec_path[1200]; /* small_spec as a file, for the CLI */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->root = fgt_tmpdir("storage");
    if (fgt_render_layer("storage_test.lua", small_spec, &f->layer) != 0)
        return -1;
    snprintf(f->spec_path, sizeof f->spec_path, "%s/storage_test.lua", f->root);
    if (fgt_write_file(f->spec_path, small_spec, strlen(small_spec)) != 0)
        return -1;
    *state = f;
    return 0;
}

/* The message a forked child wrote to the pipe before exiting (NUL-terminated). */
static void read_child_message(int fd, char *msg, size_t cap)
{
    size_t got = 0;
    msg[0] = '\0';
    while (got < cap) {
        ssize_t n = read(fd, msg + got, cap - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    msg[cap - 1] = '\0';
    close(fd);
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

static void init_cache(fg_cache *cache, const char *dir)
{
    fg_error err = {{0}};
    if (fgt_cache_init(cache, dir, "", &err) != 0)
        fail_msg("fg_cache_init: %s", err.msg);
}

static void assert_cubin(const fg_built *b)
{
    assert_non_null(b->cubin);
    assert_true(b->cubin_size > 64);
    assert_memory_equal(b->cubin, "\x7f" "ELF", 4);
}

/* A forked child ends with _exit() while its parent's buffers are still in use by the
 * parent; the compiler may drop the child's last references to them (nothing runs after
 * _exit), and valgrind's leak check at the child's exit would report them as lost. The
 * parent parks them here before forking. */
static const void *volatile parent_buffers[4]; /* volatile: the stores must stay */

static void park(const void *a, const void *b, const void *c)
{
    parent_buffers[0] = a;
    parent_buffers[1] = b;
    parent_buffers[2] = c;
}

/* ---- the directory holds complete, valid entries and nothing else ------------------------------- */

static struct {
    int entries, bad;
    char bad_path[1200];
} scan;

/* A complete plan alias (the layer's source key, runtime/cache.h) is fine beside entries. */
static bool valid_alias(const char *path, const char *name)
{
    char key[FG_CACHE_KEY_HEX + 1];
    fg_error err;
    return name[0] != '.' && strlen(name) == FG_CACHE_KEY_HEX + 4 && strcmp(name + FG_CACHE_KEY_HEX, ".fgp") == 0 &&
           fg_cache_read_alias(path, key, &err) == 0;
}

static int scan_visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    if (type != FTW_F)
        return 0;
    const char *name = path + ftw->base;
    size_t len = strlen(name);
    if (valid_alias(path, name) || (ftw->level == 1 && strcmp(name, "stats.json") == 0)) /* hit/miss counts */
        return 0;
    fg_cache_entry e;
    fg_error err;
    if (name[0] == '.' || len != FG_CACHE_KEY_HEX + 4 || strcmp(name + FG_CACHE_KEY_HEX, ".fgc") != 0 ||
        fg_cache_read_entry(path, NULL, &e, &err) != 0) {
        scan.bad++;
        snprintf(scan.bad_path, sizeof scan.bad_path, "%s", path);
        return 0;
    }
    fg_cache_entry_free(&e);
    scan.entries++;
    return 0;
}

/* Fails unless `dir` holds exactly `entries` valid entry files and no other file (but valid
 * plan aliases and the statistics file). */
static void assert_clean_cache(const char *dir, int entries)
{
    memset(&scan, 0, sizeof scan);
    struct stat st;
    if (stat(dir, &st) == 0)
        assert_int_equal(nftw(dir, scan_visit, 16, FTW_PHYS), 0);
    if (scan.bad)
        fail_msg("%s: %d stray or partial files, e.g. %s", dir, scan.bad, scan.bad_path);
    assert_int_equal(scan.entries, entries);
}

/* ---- (a) missing cache directories ---------------------------------------------------------------- */

static void missing_directory_is_created(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "not/yet/there/cache");
    fg_cache cache;
    init_cache(&cache, dir);
    fg_built b;
    fg_error err = {{0}};
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, ARCH, NULL, &b, &err), 0);
    assert_cubin(&b);
    assert_false(b.from_cache);
    if (!b.stored)
        fail_msg("not stored in a cache that only had to be created: %s", b.store_error);
    assert_string_equal(b.store_error, "");
    assert_clean_cache(dir, 1);
    fg_built_free(&b);
    /* and found there next time */
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, ARCH, NULL, &b, &err), 0);
    assert_true(b.from_cache);
    fg_built_free(&b);
    free(dir);
}

static void parent_is_a_file(void **state)
{
    fixture *f = *state;
    char *file = subdir(f, "plain_file");
    assert_int_equal(fgt_write_file(file, "data", 4), 0);
    char *dir = subdir(f, "plain_file/cache");
    fg_cache cache;
    init_cache(&cache, dir);
    fg_built b;
    fg_error err = {{0}};
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, ARCH, NULL, &b, &err), 0);
    assert_cubin(&b);
    assert_false(b.from_cache);
    assert_false(b.stored);
    fgt_assert_contains(b.store_error, "plain_file");
    fgt_assert_contains(b.store_error, "Not a directory");
    fg_built_free(&b);
    /* the file is untouched */
    size_t len = 0;
    unsigned char *data = fgt_read_file(file, &len);
    assert_non_null(data);
    assert_int_equal(len, 4);
    assert_memory_equal(data, "data", 4);
    free(data);
    free(dir);
    free(file);
}

/* root/<name>/d/d/...: a path of about 1200 bytes, longer than the cache keeps (1023). */
static char *long_path(const fixture *f, const char *name)
{
    size_t cap = strlen(f->root) + strlen(name) + 1300;
    char *dir = malloc(cap);
    assert_non_null(dir);
    int len = snprintf(dir, cap, "%s/%s", f->root, name);
    while (len < 1200)
        len += snprintf(dir + len, cap - (size_t)len, "/d");
    return dir;
}

/* A cache path longer than the cache keeps (1023 bytes) is refused, never truncated: the
 * truncated path would name another directory, which would then be created and written. */
static void path_too_long(void **state)
{
    fixture *f = *state;
    char *dir = long_path(f, "long");
    char *top = subdir(f, "long");
    fg_cache cache;
    fg_error err = {{0}};
    assert_int_equal(fgt_cache_init(&cache, dir, "", &err), -1);
    fgt_assert_contains(err.msg, "path is too long");
    assert_int_equal(fgt_cache_init(&cache, "/tmp/short", dir, &err), -1);
    fgt_assert_contains(err.msg, "shipped cache's path is too long");
    /* a valid cache, asked to store into the long directory */
    char *ok = subdir(f, "short");
    init_cache(&cache, ok);
    static const char key[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    assert_int_equal(fg_cache_store(&cache, dir, key, ARCH, "\x7f" "ELF", 4, "{}", &err), -1);
    fgt_assert_contains(err.msg, "path is too long");
    fg_built b;
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, dir), f->layer.ir, f->layer.src.source, ARCH, NULL, &b, &err), -1);
    fgt_assert_contains(err.msg, "path is too long");
    fg_built_free(&b);
    /* nothing was created, under the long path or a truncation of it */
    struct stat st;
    assert_int_equal(stat(top, &st), -1);
    assert_int_equal(stat(ok, &st), -1);
    free(ok);
    free(top);
    free(dir);
}

/* ---- (b) a full disk ------------------------------------------------------------------------------ */

/* What a child reports back through a pipe. */
typedef struct child_result {
    int rc; /* 0: fg_build_cubin returned 0 */
    int from_cache, stored, cubin_ok;
    size_t cubin_size;
    char message[1024]; /* store_error, or the build's error */
} child_result;

/* Runs fg_build_cubin in a child process whose files may not grow past `limit` bytes. */
static child_result build_with_file_size_limit(const fixture *f, const char *dir, const char *arch, rlim_t limit)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child_result r;
        memset(&r, 0, sizeof r);
        struct rlimit rl = {limit, limit};
        signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead of killing us */
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) {
            r.rc = -100;
            snprintf(r.message, sizeof r.message, "setrlimit: %s", strerror(errno));
        } else {
            fg_cache cache;
            fg_error err = {{0}};
            fg_built b;
            if (fgt_cache_init(&cache, dir, "", &err) != 0) {
                r.rc = -101;
                snprintf(r.message, sizeof r.message, "%s", err.msg);
            } else if (fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, arch, NULL, &b, &err) != 0) {
                r.rc = -1;
                snprintf(r.message, sizeof r.message, "%s", err.msg);
            } else {
                r.from_cache = b.from_cache;
                r.stored = b.stored;
                r.cubin_size = b.cubin_size;
                r.cubin_ok = b.cubin && b.cubin_size > 64 && memcmp(b.cubin, "\x7f" "ELF", 4) == 0;
                snprintf(r.message, sizeof r.message, "%s", b.store_error);
                fg_built_free(&b);
            }
        }
        ssize_t w = write(fds[1], &r, sizeof r); /* a pipe: not limited by RLIMIT_FSIZE */
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    child_result r;
    memset(&r, 0, sizeof r);
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = read(fds[0], (char *)&r + got, sizeof r - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != sizeof r)
        fail_msg("the limited child died (status 0x%x, %zu bytes of result)", status, got);
    if (r.rc != 0)
        fail_msg("the build in the limited child failed (%d): %s", r.rc, r.message);
    return r;
}

static void full_disk_case(const fixture *f, const char *name, rlim_t limit)
{
    char *dir = subdir(f, name);
    /* a good entry for another key (another architecture) is already there */
    fg_cache cache;
    init_cache(&cache, dir);
    fg_built other;
    fg_error err = {{0}};
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, OTHER_ARCH, NULL, &other, &err), 0);
    assert_true(other.stored);
    char other_path[1200];
    fg_cache_entry_path(dir, other.key, other_path, sizeof other_path);
    size_t before_len = 0;
    unsigned char *before = fgt_read_file(other_path, &before_len);
    assert_non_null(before);
    struct stat st_before;
    assert_int_equal(stat(other_path, &st_before), 0);

    park(dir, before, other.cubin);
    child_result r = build_with_file_size_limit(f, dir, ARCH, limit);
    assert_false(r.from_cache);
    assert_true(r.cubin_ok); /* the kernels were produced, in memory */
    assert_false(r.stored);
    /* says why (EFBIG here; ENOSPC on a real full disk) and where */
    fgt_assert_contains(r.message, "File too large");
    fgt_assert_contains(r.message, dir);
    printf("# limit %llu bytes: not stored: %s\n", (unsigned long long)limit, r.message);

    /* no partial entry, no temporary file; the other entry is untouched */
    assert_clean_cache(dir, 1);
    size_t after_len = 0;
    unsigned char *after = fgt_read_file(other_path, &after_len);
    assert_non_null(after);
    assert_int_equal(after_len, before_len);
    assert_memory_equal(after, before, before_len);
    struct stat st_after;
    assert_int_equal(stat(other_path, &st_after), 0);
    assert_int_equal(st_after.st_ino, st_before.st_ino);
    assert_int_equal(st_after.st_mtim.tv_sec, st_before.st_mtim.tv_sec);
    assert_int_equal(st_after.st_mtim.tv_nsec, st_before.st_mtim.tv_nsec);
    free(after);
    free(before);

    /* with room again, the same build stores, and both entries are found */
    fg_built b;
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, ARCH, NULL, &b, &err), 0);
    assert_false(b.from_cache);
    if (!b.stored)
        fail_msg("not stored once there was room: %s", b.store_error);
    /* a fresh compile of the same source: NVRTC's cubin size is not stable from one compile
     * to the next (seen here: 51728 or 51856 bytes, a 128-byte section alignment), so it
     * is checked to be a real cubin, not to equal the child's byte for byte */
    assert_true(b.cubin_size > 0 && r.cubin_size > 0);
    assert_memory_equal(b.cubin, "\x7f" "ELF", 4);
    fg_built_free(&b);
    assert_clean_cache(dir, 2);
    assert_int_equal(fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, OTHER_ARCH, NULL, &b, &err), 0);
    assert_true(b.from_cache);
    fg_built_free(&b);
    fg_built_free(&other);
    free(dir);
}

static void full_disk_nothing_fits(void **state)
{
    full_disk_case(*state, "full0", 0);
}

static void full_disk_mid_entry(void **state)
{
    full_disk_case(*state, "full4k", 4096);
}

/* Storing directly: the store fails with the reason, leaves nothing. */
static void full_disk_direct_store(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "full_direct");
    assert_int_equal(mkdir(dir, 0755), 0);
    static unsigned char blob[64 * 1024];
    memcpy(blob, "\x7f" "ELF", 4);
    const char *key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    park(dir, NULL, NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        struct rlimit rl = {8192, 8192};
        signal(SIGXFSZ, SIG_IGN);
        char msg[1024] = "setrlimit failed";
        int rc = 100;
        if (setrlimit(RLIMIT_FSIZE, &rl) == 0) {
            fg_cache cache;
            fg_error err = {{0}};
            fgt_cache_init(&cache, dir, "", &err);
            rc = fg_cache_store(&cache, NULL, key, ARCH, blob, sizeof blob, "{\"layer\":\"x\"}", &err) == 0 ? 1 : 0;
            snprintf(msg, sizeof msg, "%s", err.msg);
        }
        ssize_t w = write(fds[1], msg, sizeof msg);
        (void)w;
        _exit(rc);
    }
    close(fds[1]);
    char msg[1024];
    read_child_message(fds[0], msg, sizeof msg);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("the store under a 8 KiB limit did not fail as it should (code %d): %s", WEXITSTATUS(status), msg);
    fgt_assert_contains(msg, "cannot write");
    fgt_assert_contains(msg, "File too large");
    assert_clean_cache(dir, 0);
    free(dir);
}

/* A real ENOSPC: a 256 KiB tmpfs mounted over the cache in a private mount namespace of a
 * child process (root, or an unprivileged user namespace; skipped where neither is
 * allowed). A good entry is stored first, the file system is then filled up to one free
 * page, and the next build must compile, not store ("No space left on device"), and leave
 * the directory with the one good entry, untouched. The mount vanishes with the child. */
static int enospc_child(const fixture *f, const char *dir, char *msg, size_t cap)
{
    if (unshare(CLONE_NEWNS) != 0) {
        uid_t uid = geteuid();
        gid_t gid = getegid();
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            snprintf(msg, cap, "no mount namespace: %s", strerror(errno));
            return 77;
        }
        char map[64];
        snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
        fgt_write_file("/proc/self/setgroups", "deny", 4);
        if (fgt_write_file("/proc/self/uid_map", map, strlen(map)) != 0) {
            snprintf(msg, cap, "cannot map the user namespace");
            return 77;
        }
        snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
        fgt_write_file("/proc/self/gid_map", map, strlen(map));
    }
    /* source and type are ignored for MS_PRIVATE; named, not NULL, for valgrind */
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=256k,mode=0700") != 0) {
        snprintf(msg, cap, "cannot mount a tmpfs: %s", strerror(errno));
        return 77;
    }
    fg_cache cache;
    fg_error err = {{0}};
    fg_built b;
    if (fgt_cache_init(&cache, dir, "", &err) != 0 ||
        fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, OTHER_ARCH, NULL, &b, &err) != 0) {
        snprintf(msg, cap, "the first build failed: %s", err.msg);
        return 1;
    }
    if (!b.stored) {
        snprintf(msg, cap, "the first entry did not fit in 256 KiB: %s", b.store_error);
        return 1;
    }
    char good[1200];
    fg_cache_entry_path(dir, b.key, good, sizeof good);
    fg_built_free(&b);
    size_t good_len = 0;
    unsigned char *good_before = fgt_read_file(good, &good_len);
    /* fill the file system, then free one page */
    char filler[1200];
    snprintf(filler, sizeof filler, "%s/filler", dir);
    FILE *fp = fopen(filler, "wb");
    static const char page[4096];
    long filled = 0;
    while (fp && fwrite(page, 1, sizeof page, fp) == sizeof page && fflush(fp) == 0)
        filled += (long)sizeof page;
    if (fp)
        fclose(fp);
    if (truncate(filler, filled > 4096 ? filled - 4096 : 0) != 0) {
        snprintf(msg, cap, "truncate: %s", strerror(errno));
        return 1;
    }
    int rc = 0;
    if (fg_build_cubin(FGT_BUILDER(&cache, NULL), f->layer.ir, f->layer.src.source, ARCH, NULL, &b, &err) != 0) {
        snprintf(msg, cap, "the build on a full disk failed: %s", err.msg);
        return 1;
    }
    if (b.from_cache || b.stored || !b.cubin || memcmp(b.cubin, "\x7f" "ELF", 4) != 0)
        rc = 2, snprintf(msg, cap, "from_cache %d stored %d cubin %p", b.from_cache, b.stored, (void *)b.cubin);
    else if (!strstr(b.store_error, "No space left on device") || !strstr(b.store_error, dir))
        rc = 3, snprintf(msg, cap, "store_error does not say why or where: %s", b.store_error);
    else
        snprintf(msg, cap, "%s", b.store_error);
    fg_built_free(&b);
    unlink(filler);
    memset(&scan, 0, sizeof scan);
    nftw(dir, scan_visit, 16, FTW_PHYS);
    size_t good_after_len = 0;
    unsigned char *good_after = fgt_read_file(good, &good_after_len);
    if (rc == 0 && (scan.bad || scan.entries != 1))
        rc = 4, snprintf(msg, cap, "%d entries, %d stray or partial files (e.g. %s)", scan.entries, scan.bad,
                         scan.bad_path);
    else if (rc == 0 && (!good_before || !good_after || good_len != good_after_len ||
                         memcmp(good_before, good_after, good_len) != 0))
        rc = 5, snprintf(msg, cap, "the good entry changed");
    free(good_before);
    free(good_after);
    return rc;
}

static void full_disk_tmpfs(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "tmpfs");
    assert_int_equal(mkdir(dir, 0755), 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    park(dir, NULL, NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        char msg[1024] = "";
        int rc = enospc_child(f, dir, msg, sizeof msg);
        ssize_t w = write(fds[1], msg, sizeof msg);
        (void)w;
        _exit(rc);
    }
    close(fds[1]);
    char msg[1024];
    read_child_message(fds[0], msg, sizeof msg);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    free(dir);
    if (!WIFEXITED(status))
        fail_msg("the tmpfs child died (status 0x%x)", status);
    if (WEXITSTATUS(status) == 77) {
        printf("# SKIPPED the tmpfs case: %s (the RLIMIT_FSIZE cases cover the same path)\n", msg);
        skip();
    }
    if (WEXITSTATUS(status) != 0)
        fail_msg("full tmpfs case failed (code %d): %s", WEXITSTATUS(status), msg);
    printf("# full tmpfs: not stored: %s\n", msg);
}

/* ---- (c) the CLI ------------------------------------------------------------------------------------ */

typedef enum cli_mode { CLI_PLAIN, CLI_FILE_LIMIT, CLI_UNPRIVILEGED } cli_mode;

typedef struct cli_result {
    int exit_code; /* -1: killed by a signal; 100+: the child could not set itself up */
    char output[16384];
} cli_result;

/* Runs `fusegen build --arch sm_90 --cache DIR SPEC` and collects stdout + stderr. */
static void run_cli_build(const fixture *f, const char *cache_dir, cli_mode mode, cli_result *out)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        close(fds[1]);
        if (mode == CLI_FILE_LIMIT) {
            struct rlimit rl = {2048, 2048};
            signal(SIGXFSZ, SIG_IGN); /* stays ignored across exec */
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
                _exit(100);
        }
        if (mode == CLI_UNPRIVILEGED && geteuid() == 0 &&
            (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
            fprintf(stderr, "cannot drop root: %s\n", strerror(errno));
            _exit(101);
        }
        if (mode == CLI_UNPRIVILEGED && unprivileged_tmpdir) /* NVRTC (and valgrind) may write there */
            setenv("TMPDIR", unprivileged_tmpdir, 1);
        execl(fusegen_binary, fusegen_binary, "build", "-j", "1", "--arch", ARCH, "--cache", cache_dir, f->spec_path,
              (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", fusegen_binary, strerror(errno));
        _exit(102);
    }
    close(fds[1]);
    size_t got = 0;
    for (;;) {
        char buf[4096];
        ssize_t n = read(fds[0], buf, sizeof buf);
        if (n <= 0)
            break;
        size_t room = sizeof out->output - 1 - got;
        size_t take = (size_t)n < room ? (size_t)n : room;
        memcpy(out->output + got, buf, take);
        got += take;
    }
    out->output[got] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    out->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    size_t n = strlen(cache_dir);
    printf("# fusegen build --cache %s%s (%s): exit %d\n", n > 100 ? "..." : "", n > 100 ? cache_dir + n - 100 : cache_dir,
           mode == CLI_FILE_LIMIT ? "files limited to 2 KiB" : mode == CLI_UNPRIVILEGED ? "unprivileged" : "plain",
           out->exit_code);
}

/* Exit status 1, the kernel set reported compiled but not stored, with `why`. */
static void assert_cli_not_stored(const cli_result *r, const char *why)
{
    if (r->exit_code != 1)
        fail_msg("fusegen build exited with %d, expected 1:\n%s", r->exit_code, r->output);
    fgt_assert_contains(r->output, "storage_test sm_90: compiled in");
    fgt_assert_contains(r->output, "; NOT stored: ");
    fgt_assert_contains(r->output, why);
    fgt_assert_contains(r->output, "1 compiled, 0 already in the cache, 0 failed");
    fgt_assert_contains(r->output, "warning: 1 compiled kernel set could not be stored in");
}

static void cli_missing_directory(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "cli/new/cache");
    cli_result *r = malloc(sizeof *r);
    assert_non_null(r);
    run_cli_build(f, dir, CLI_PLAIN, r);
    if (r->exit_code != 0)
        fail_msg("fusegen build into a missing directory exited with %d:\n%s", r->exit_code, r->output);
    fgt_assert_not_contains(r->output, "NOT stored");
    assert_clean_cache(dir, 1);
    free(r);
    free(dir);
}

static void cli_path_too_long(void **state)
{
    fixture *f = *state;
    char *dir = long_path(f, "cli_long");
    cli_result *r = malloc(sizeof *r);
    assert_non_null(r);
    run_cli_build(f, dir, CLI_PLAIN, r);
    if (r->exit_code != 1)
        fail_msg("fusegen build with a too long cache path exited with %d:\n%s", r->exit_code, r->output);
    fgt_assert_contains(r->output, "path is too long");
    char *top = subdir(f, "cli_long");
    struct stat st;
    assert_int_equal(stat(top, &st), -1);
    free(top);
    free(r);
    free(dir);
}

static void cli_full_disk(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "cli_full");
    cli_result *r = malloc(sizeof *r);
    assert_non_null(r);
    run_cli_build(f, dir, CLI_FILE_LIMIT, r);
    assert_cli_not_stored(r, "File too large");
    fgt_assert_contains(r->output, dir);
    assert_clean_cache(dir, 0);
    free(r);
    free(dir);
}

static void cli_cache_is_a_file(void **state)
{
    fixture *f = *state;
    char *file = subdir(f, "cli_file");
    assert_int_equal(fgt_write_file(file, "x", 1), 0);
    cli_result *r = malloc(sizeof *r);
    assert_non_null(r);
    run_cli_build(f, file, CLI_PLAIN, r);
    assert_cli_not_stored(r, "Not a directory");
    fgt_assert_contains(r->output, "cli_file");
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_size, 1);
    free(r);
    free(file);
}

static void cli_readonly_directory(void **state)
{
    fixture *f = *state;
    char *dir = subdir(f, "cli_readonly");
    assert_int_equal(mkdir(dir, 0555), 0);
    assert_int_equal(chmod(dir, 0555), 0);
    if (geteuid() == 0) {
        /* the unprivileged child must reach the spec and the directory */
        printf("# running as root: the CLI runs as uid/gid 65534 for the read-only case\n");
        char *parent = strdup(f->root);
        char *slash = strrchr(parent, '/');
        if (slash)
            *slash = '\0';
        chmod(parent, 0755);
        chmod(f->root, 0755);
        chmod(f->spec_path, 0644);
        free(parent);
    }
    char *tmp = subdir(f, "unprivileged_tmp");
    assert_int_equal(mkdir(tmp, 0755), 0);
    assert_int_equal(chmod(tmp, 01777), 0);
    unprivileged_tmpdir = tmp;
    cli_result *r = malloc(sizeof *r);
    assert_non_null(r);
    run_cli_build(f, dir, CLI_UNPRIVILEGED, r);
    chmod(dir, 0755);
    unprivileged_tmpdir = NULL;
    free(tmp);
    if (r->exit_code == 101) {
        printf("# SKIPPED: running as root and the child could not give up its privileges\n");
        free(r);
        free(dir);
        skip();
    }
    assert_cli_not_stored(r, "Permission denied");
    assert_clean_cache(dir, 0);
    free(r);
    free(dir);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FUSEGEN_BINARY\n", argv[0]);
        return 2;
    }
    char *abs = realpath(argv[1], NULL);
    if (!abs) {
        fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    fusegen_binary = abs;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(missing_directory_is_created),
        cmocka_unit_test(parent_is_a_file),
        cmocka_unit_test(path_too_long),
        cmocka_unit_test(full_disk_nothing_fits),
        cmocka_unit_test(full_disk_mid_entry),
        cmocka_unit_test(full_disk_direct_store),
        cmocka_unit_test(full_disk_tmpfs),
        cmocka_unit_test(cli_missing_directory),
        cmocka_unit_test(cli_path_too_long),
        cmocka_unit_test(cli_full_disk),
        cmocka_unit_test(cli_cache_is_a_file),
        cmocka_unit_test(cli_readonly_directory),
    };
    char *dir = fgt_tmpdir("storage-env");
    fgt_isolate_environment(dir);
    int failed = cmocka_run_group_tests_name("storage_failures", tests, setup, teardown);
    fgt_rmtree(dir);
    free(dir);
    free(abs);
    return failed;
}
