/* SPDX-License-Identifier: Apache-2.0 */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* ---- entry format ----------------------------------------------------------------------- */

#define ENTRY_MAGIC "FGCUBIN\0"
#define ENTRY_FORMAT 1u
#define MAX_ENTRY_BYTES (256u << 20) /* a cubin of a layer is well under a megabyte */

/* All integers little-endian; the struct is written field by field, never as memory. */
typedef struct entry_header {
    char magic[8];
    uint32_t format;
    char key[FG_CACHE_KEY_HEX];
    char arch[16];
    char generator[16];
    uint32_t nvrtc_major, nvrtc_minor;
    uint64_t cubin_size, meta_size;
} entry_header;

enum { HEADER_BYTES = 8 + 4 + FG_CACHE_KEY_HEX + 16 + 16 + 4 + 4 + 8 + 8, CHECKSUM_BYTES = 32 };

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void encode_header(const entry_header *h, unsigned char *p)
{
    memcpy(p, h->magic, 8);
    put_u32(p + 8, h->format);
    memcpy(p + 12, h->key, FG_CACHE_KEY_HEX);
    memcpy(p + 12 + FG_CACHE_KEY_HEX, h->arch, 16);
    memcpy(p + 28 + FG_CACHE_KEY_HEX, h->generator, 16);
    put_u32(p + 44 + FG_CACHE_KEY_HEX, h->nvrtc_major);
    put_u32(p + 48 + FG_CACHE_KEY_HEX, h->nvrtc_minor);
    put_u64(p + 52 + FG_CACHE_KEY_HEX, h->cubin_size);
    put_u64(p + 60 + FG_CACHE_KEY_HEX, h->meta_size);
}

static void decode_header(const unsigned char *p, entry_header *h)
{
    memcpy(h->magic, p, 8);
    h->format = get_u32(p + 8);
    memcpy(h->key, p + 12, FG_CACHE_KEY_HEX);
    memcpy(h->arch, p + 12 + FG_CACHE_KEY_HEX, 16);
    memcpy(h->generator, p + 28 + FG_CACHE_KEY_HEX, 16);
    h->nvrtc_major = get_u32(p + 44 + FG_CACHE_KEY_HEX);
    h->nvrtc_minor = get_u32(p + 48 + FG_CACHE_KEY_HEX);
    h->cubin_size = get_u64(p + 52 + FG_CACHE_KEY_HEX);
    h->meta_size = get_u64(p + 60 + FG_CACHE_KEY_HEX);
}

/* ---- keys and paths ------------------------------------------------------------------------ */

/* BLAKE2b-256 of the generator's identity (with `what` appended), then `parts`. */
static void hash_key(const fg_cache_identity *id, const char *what, const void *const *parts, const size_t *sizes,
                     int n_parts, const char *arch, const char *options, char key[FG_CACHE_KEY_HEX + 1])
{
    unsigned char h[32];
    crypto_generichash_state st;
    char ident[512];
    int n = snprintf(ident, sizeof ident, "fusegen %s|templates %s|nvrtc %d.%d|arch %s|options %s|format %u%s",
                     id->version, id->templates_digest, id->nvrtc_major, id->nvrtc_minor, arch, options,
                     ENTRY_FORMAT, what);
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    crypto_generichash_update(&st, (const unsigned char *)ident, (size_t)n + 1);
    for (int i = 0; i < n_parts; i++)
        crypto_generichash_update(&st, parts[i], sizes[i]);
    crypto_generichash_final(&st, h, sizeof h);
    sodium_bin2hex(key, FG_CACHE_KEY_HEX + 1, h, sizeof h);
}

void fg_cache_key(const fg_cache_identity *id, const char *source, size_t len, const char *arch, const char *options,
                  char key[FG_CACHE_KEY_HEX + 1])
{
    const void *parts[] = {source};
    hash_key(id, "", parts, &len, 1, arch, options, key);
}

void fg_cache_plan_key(const fg_cache_identity *id, const void *const *parts, const size_t *sizes, int n_parts,
                       const char *arch, const char *options, char key[FG_CACHE_KEY_HEX + 1])
{
    char what[256];
    int len = snprintf(what, sizeof what, "|plan|generator %s|parts", id->generator_digest);
    for (int i = 0; i < n_parts && len > 0 && (size_t)len < sizeof what; i++)
        len += snprintf(what + len, sizeof what - (size_t)len, " %zu", sizes[i]);
    hash_key(id, what, parts, sizes, n_parts, arch, options, key);
}

void fg_cache_entry_path(const char *dir, const char *key, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%.2s/%s.fgc", dir, key, key);
}

static bool is_key(const char *s)
{
    if (strlen(s) != FG_CACHE_KEY_HEX)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

/* ---- trust --------------------------------------------------------------------------------- */

/* What fusegen reads from a cache becomes code on the GPU, so a cache is trusted only as far
 * as who can write it (ccache's and Triton's rule): directories and files owned by the user
 * or root, writable by nobody else; no symbolic links inside a cache (the top directory may
 * be reached through one). A checksum cannot help here: whoever can write the directory can
 * write a valid checksum. docs/hardening.md has the threat model. */
static bool trusted_owner(uid_t uid)
{
    return uid == geteuid() || uid == 0;
}

/* Why a cache directory or file with status `st` is not trusted, or NULL. */
static const char *distrust(const struct stat *st, char *buf, size_t cap)
{
    if (!trusted_owner(st->st_uid))
        snprintf(buf, cap, "owned by uid %u (not you, uid %u, nor root)", (unsigned)st->st_uid, (unsigned)geteuid());
    else if (st->st_mode & (S_IWGRP | S_IWOTH))
        snprintf(buf, cap, "writable by %s (mode %04o)", st->st_mode & S_IWOTH ? "every user" : "its group",
                 (unsigned)(st->st_mode & 07777));
    else
        return NULL;
    return buf;
}

/* 0 when `path` is a trusted cache directory, 1 when it does not exist, -1 (err says why)
 * when it is refused. `top`: the cache's own directory, which may be a symbolic link to one;
 * below it nothing may be. */
static int check_dir(const char *path, bool top, fg_error *err)
{
    struct stat st;
    if ((top ? stat(path, &st) : lstat(path, &st)) != 0) /* ENOTDIR: a parent is a file, so nothing is there */
        return errno == ENOENT || errno == ENOTDIR ? 1 : fg_fail(err, "%s: %s", path, strerror(errno));
    char why[160];
    if (S_ISLNK(st.st_mode))
        return fg_fail(err, "%s is a symbolic link; fusegen never reads or writes through one inside a cache", path);
    if (!S_ISDIR(st.st_mode))
        return fg_fail(err, "%s: %s", path, strerror(ENOTDIR));
    if (distrust(&st, why, sizeof why))
        return fg_fail(err, "%s is %s; fusegen trusts only cache directories that no one but you (or root) can "
                            "write",
                       path, why);
    return 0;
}

int fg_cache_init(fg_cache *cache, const char *user_dir, const char *shipped_path, fg_error *err)
{
    memset(cache, 0, sizeof *cache);
    if (!user_dir || !user_dir[0])
        return fg_fail(err, "no cache directory given");
    /* a path that does not fit is refused: truncated, it would name another directory */
    int n = snprintf(cache->user_dir, sizeof cache->user_dir, "%s", user_dir);
    if (n < 0 || (size_t)n >= sizeof cache->user_dir) {
        cache->user_dir[0] = '\0';
        return fg_fail(err, "the cache directory's path is too long (%d bytes; at most %zu)", n,
                       sizeof cache->user_dir - 1);
    }
    if (shipped_path) {
        const char *p = shipped_path;
        while (*p) {
            const char *colon = strchr(p, ':');
            size_t len = colon ? (size_t)(colon - p) : strlen(p);
            if (len >= sizeof cache->shipped[0])
                return fg_fail(err, "a shipped cache's path is too long (%zu bytes; at most %zu)", len,
                               sizeof cache->shipped[0] - 1);
            if (len > 0) {
                if (cache->n_shipped == FG_CACHE_MAX_SHIPPED)
                    return fg_fail(err, "more than %d shipped caches (FUSEGEN_CACHE_PATH)", FG_CACHE_MAX_SHIPPED);
                memcpy(cache->shipped[cache->n_shipped], p, len);
                cache->shipped[cache->n_shipped][len] = '\0';
                cache->n_shipped++;
            }
            p += len + (colon != NULL);
        }
    }
    cache->create_mode = 0700;
    return 0;
}

int fg_cache_check_trust(fg_cache *cache)
{
    fg_error e;
    int kept = 0;
    for (int i = 0; i < cache->n_shipped; i++) {
        if (check_dir(cache->shipped[i], true, &e) < 0) {
            fg_cache_warn(cache, "ignoring the shipped cache %s", e.msg);
            continue;
        }
        if (kept != i)
            memcpy(cache->shipped[kept], cache->shipped[i], sizeof cache->shipped[i]);
        kept++;
    }
    int dropped = cache->n_shipped - kept;
    cache->n_shipped = kept;
    cache->user_refused[0] = '\0';
    if (check_dir(cache->user_dir, true, &e) < 0) {
        snprintf(cache->user_refused, sizeof cache->user_refused, "%s", e.msg);
        fg_cache_warn(cache, "not using the cache %s", e.msg);
        dropped++;
    }
    return dropped;
}

void fg_cache_warn(fg_cache *cache, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (cache->warn)
        cache->warn(cache->warn_ctx, msg);
    else
        fprintf(stderr, "fusegen: %s\n", msg);
}

/* ---- reading ------------------------------------------------------------------------------- */

int fg_cache_parse_entry(const unsigned char *data, size_t size, const fg_entry_expect *expect, fg_cache_entry *out,
                         fg_error *err)
{
    static const fg_entry_expect anything;
    if (!expect)
        expect = &anything;
    const char *expect_key = expect->key, *expect_arch = expect->arch;
    memset(out, 0, sizeof *out);
    if (size < HEADER_BYTES + CHECKSUM_BYTES)
        return fg_fail(err, "truncated entry (%zu bytes, the header alone is %d)", size, HEADER_BYTES + CHECKSUM_BYTES);
    entry_header h;
    decode_header(data, &h);
    if (memcmp(h.magic, ENTRY_MAGIC, 8) != 0)
        return fg_fail(err, "not a fusegen cache entry (bad magic)");
    if (h.format != ENTRY_FORMAT)
        return fg_fail(err, "entry format %u, this fusegen reads format %u", h.format, ENTRY_FORMAT);
    if (h.cubin_size > MAX_ENTRY_BYTES || h.meta_size > MAX_ENTRY_BYTES ||
        HEADER_BYTES + h.cubin_size + h.meta_size + CHECKSUM_BYTES != size)
        return fg_fail(err, "sizes in the header (%llu + %llu bytes) do not match the file (%zu bytes): truncated?",
                       (unsigned long long)h.cubin_size, (unsigned long long)h.meta_size, size);
    unsigned char sum[CHECKSUM_BYTES];
    crypto_generichash(sum, sizeof sum, data, size - CHECKSUM_BYTES, NULL, 0);
    if (sodium_memcmp(sum, data + size - CHECKSUM_BYTES, CHECKSUM_BYTES) != 0)
        return fg_fail(err, "checksum mismatch: the entry is corrupt");
    if (h.arch[15] || h.generator[15])
        return fg_fail(err, "malformed header strings");
    if (expect_key && memcmp(h.key, expect_key, FG_CACHE_KEY_HEX) != 0)
        return fg_fail(err, "entry holds key %.16s..., not the %.16s... its name promises", h.key, expect_key);
    if (expect_arch && strcmp(h.arch, expect_arch) != 0)
        return fg_fail(err, "entry is for %s, not %s", h.arch, expect_arch);
    if (expect->version && strcmp(h.generator, expect->version) != 0)
        return fg_fail(err, "entry was written by fusegen %s, this is %s", h.generator, expect->version);
    const unsigned char *meta = data + HEADER_BYTES + h.cubin_size;
    if (h.meta_size == 0 || memchr(meta, '\0', h.meta_size) != meta + h.meta_size - 1)
        return fg_fail(err, "malformed description");
    out->cubin = malloc(h.cubin_size ? h.cubin_size : 1);
    out->meta_json = malloc(h.meta_size);
    if (!out->cubin || !out->meta_json) {
        fg_cache_entry_free(out);
        return fg_fail(err, "out of memory");
    }
    memcpy(out->cubin, data + HEADER_BYTES, h.cubin_size);
    out->cubin_size = h.cubin_size;
    memcpy(out->meta_json, meta, h.meta_size);
    memcpy(out->arch, h.arch, 16);
    memcpy(out->generator, h.generator, 16);
    out->nvrtc_major = (int)h.nvrtc_major;
    out->nvrtc_minor = (int)h.nvrtc_minor;
    return 0;
}

/* Opens a cache file for reading: never through a symbolic link, never blocking (a FIFO
 * planted as an entry would hang open() and read()), and only a regular file that no one
 * but the user or root can write. */
static int open_cache_file(const char *path, struct stat *st, fg_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return fg_fail(err, "%s: %s", path, errno == ELOOP ? "a symbolic link (refused)" : strerror(errno));
    char why[160];
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return fg_fail(err, "%s: not a regular file (refused)", path);
    }
    if (distrust(st, why, sizeof why)) {
        close(fd);
        return fg_fail(err, "%s: %s (refused)", path, why);
    }
    return fd;
}

int fg_cache_read_entry(const char *path, const fg_entry_expect *expect, fg_cache_entry *out, fg_error *err)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    int fd = open_cache_file(path, &st, err);
    if (fd < 0)
        return -1;
    if ((uint64_t)st.st_size > MAX_ENTRY_BYTES) {
        close(fd);
        return fg_fail(err, "%s: implausibly large entry (%lld bytes)", path, (long long)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    unsigned char *data = malloc(size ? size : 1);
    if (!data) {
        close(fd);
        return fg_fail(err, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, data + got, size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    int rc;
    if (got != size)
        rc = fg_fail(err, "%s: short read", path);
    else if ((rc = fg_cache_parse_entry(data, size, expect, out, err)) != 0)
        fg_fail_context(err, "%s", path);
    free(data);
    if (rc == 0)
        snprintf(out->path, sizeof out->path, "%s", path);
    return rc;
}

void fg_cache_entry_free(fg_cache_entry *e)
{
    if (!e)
        return;
    free(e->cubin);
    free(e->meta_json);
    e->cubin = NULL;
    e->meta_json = NULL;
}

/* The path of `name` (an entry or alias file named after `key`) in cache `dir` when it
 * exists in a trusted subdirectory; false when it is absent or refused (reported). */
static bool find_file(fg_cache *cache, const char *dir, const char *key, const char *suffix, char *path, size_t cap)
{
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/%.2s", dir, key);
    fg_error e;
    int rc = check_dir(sub, false, &e);
    if (rc < 0)
        fg_cache_warn(cache, "ignoring %s", e.msg);
    if (rc != 0)
        return false;
    snprintf(path, cap, "%s/%s%s", sub, key, suffix);
    return access(path, F_OK) == 0;
}

/* The caches to read, in order: the shipped ones, then the user cache unless it is refused. */
static int n_readable(const fg_cache *cache)
{
    return cache->n_shipped + (cache->user_refused[0] == '\0');
}

int fg_cache_lookup(fg_cache *cache, const char *key, const char *arch, fg_cache_entry *out, fg_error *err)
{
    (void)err;
    if (!is_key(key))
        return 0;
    const fg_entry_expect expect = {key, arch, cache->identity.version};
    char path[1200];
    for (int i = 0; i < n_readable(cache); i++) {
        bool user = i == cache->n_shipped;
        if (!find_file(cache, user ? cache->user_dir : cache->shipped[i], key, ".fgc", path, sizeof path))
            continue;
        fg_error e;
        if (fg_cache_read_entry(path, &expect, out, &e) == 0) {
            out->shipped = !user;
            if (user) /* least recently used goes first when the cache is over its size */
                utimensat(AT_FDCWD, path, NULL, 0);
            return 1;
        }
        fg_cache_warn(cache, user ? "ignoring a bad cache entry (it will be rebuilt): %s"
                                  : "ignoring a bad entry in the shipped cache: %s",
                      e.msg);
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------------------------- */

/* Creates `dir` and its missing parents with `mode`. */
static int mkdir_p(const char *dir, mode_t mode, fg_error *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) != 0 && errno != EEXIST)
            return fg_fail(err, "cannot create %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, mode) != 0 && errno != EEXIST)
        return fg_fail(err, "cannot create %s: %s", tmp, strerror(errno));
    return 0;
}

static int write_all(int fd, const void *data, size_t len)
{
    const unsigned char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Writes `parts` as one file `final_path` in directory `sub`: into a temporary file there
 * (named after `name`), fsync'ed, mode 0644, renamed into place. Readers never see a
 * partial file; on failure nothing is left behind. */
static int write_atomically(const char *sub, const char *name, const char *final_path, const void *const *parts,
                            const size_t *sizes, int n_parts, const char *dir, fg_error *err)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.XXXXXX", sub, name);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return fg_fail(err, "cannot write to the cache %s: %s", dir, strerror(errno));
    int rc = 0;
    for (int i = 0; i < n_parts && rc == 0; i++)
        if (write_all(fd, parts[i], sizes[i]))
            rc = fg_fail(err, "cannot write %s: %s", tmp, strerror(errno ? errno : EIO));
    if (rc == 0 && fchmod(fd, 0644) != 0) /* mkstemp makes 0600; a cache may be shared or shipped */
        rc = fg_fail(err, "cannot set permissions on %s: %s", tmp, strerror(errno));
    else if (rc == 0 && fsync(fd) != 0)
        rc = fg_fail(err, "cannot flush %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = fg_fail(err, "cannot close %s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, final_path) != 0)
        rc = fg_fail(err, "cannot move the entry into place (%s): %s", final_path, strerror(errno));
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* Checks that `dir` (the user cache when NULL) may take a file named after `key` and makes
 * its subdirectory `sub`; *dir is set to the directory used. */
static int prepare_store(const fg_cache *cache, const char **dir, const char *key, char *sub, size_t sub_cap,
                         fg_error *err)
{
    if (!*dir)
        *dir = cache->user_dir;
    for (int i = 0; i < cache->n_shipped; i++)
        if (strcmp(cache->shipped[i], *dir) == 0)
            return fg_fail(err, "%s is a shipped (read-only) cache; not writing to it", *dir);
    if (!is_key(key))
        return fg_fail(err, "bad cache key");
    if (strlen(*dir) >= sizeof cache->user_dir) /* the paths below would be truncated */
        return fg_fail(err, "the cache directory's path is too long (%zu bytes; at most %zu)", strlen(*dir),
                       sizeof cache->user_dir - 1);
    if (*dir == cache->user_dir && cache->user_refused[0])
        return fg_fail(err, "%s", cache->user_refused);
    /* created private unless the caller builds a cache to ship (create_mode); a directory
     * someone else made or can write is refused, never written into */
    if (mkdir_p(*dir, cache->create_mode ? cache->create_mode : 0700, err) || check_dir(*dir, true, err) < 0)
        return -1;
    snprintf(sub, sub_cap, "%s/%.2s", *dir, key);
    if (mkdir(sub, 0755) != 0 && errno != EEXIST)
        return fg_fail(err, "cannot create %s: %s", sub, strerror(errno));
    return check_dir(sub, false, err) < 0 ? -1 : 0;
}

int fg_cache_store(fg_cache *cache, const char *dir, const char *key, const char *arch, const void *cubin,
                   size_t cubin_size, const char *meta_json, fg_error *err)
{
    if (strlen(arch) >= 16)
        return fg_fail(err, "bad arch");
    if (!cache->identity.version[0] || cache->identity.nvrtc_major <= 0)
        return fg_fail(err, "internal error: the cache was given no identity (fg_build_identity)");
    char sub[1100];
    if (prepare_store(cache, &dir, key, sub, sizeof sub, err))
        return -1;

    entry_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, ENTRY_MAGIC, 8);
    h.format = ENTRY_FORMAT;
    memcpy(h.key, key, FG_CACHE_KEY_HEX);
    snprintf(h.arch, sizeof h.arch, "%s", arch);
    snprintf(h.generator, sizeof h.generator, "%s", cache->identity.version);
    h.nvrtc_major = (uint32_t)cache->identity.nvrtc_major;
    h.nvrtc_minor = (uint32_t)cache->identity.nvrtc_minor;
    size_t meta_size = strlen(meta_json) + 1;
    h.cubin_size = cubin_size;
    h.meta_size = meta_size;
    unsigned char head[HEADER_BYTES];
    encode_header(&h, head);

    unsigned char sum[CHECKSUM_BYTES];
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, sizeof sum);
    crypto_generichash_update(&st, head, sizeof head);
    crypto_generichash_update(&st, cubin, cubin_size);
    crypto_generichash_update(&st, (const unsigned char *)meta_json, meta_size);
    crypto_generichash_final(&st, sum, sizeof sum);

    char final_path[1100];
    fg_cache_entry_path(dir, key, final_path, sizeof final_path);
    const void *parts[] = {head, cubin, meta_json, sum};
    const size_t sizes[] = {sizeof head, cubin_size, meta_size, sizeof sum};
    return write_atomically(sub, key, final_path, parts, sizes, 4, dir, err);
}

/* ---- plan aliases --------------------------------------------------------------------------- */

#define ALIAS_MAGIC "FGPLAN 1\n"
enum { ALIAS_BYTES = sizeof ALIAS_MAGIC - 1 + FG_CACHE_KEY_HEX + 1 };

void fg_cache_alias_path(const char *dir, const char *plan_key, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%.2s/%s.fgp", dir, plan_key, plan_key);
}

int fg_cache_read_alias(const char *path, char key[FG_CACHE_KEY_HEX + 1], fg_error *err)
{
    struct stat st;
    int fd = open_cache_file(path, &st, err);
    if (fd < 0)
        return -1;
    char buf[ALIAS_BYTES + 1];
    size_t got = 0;
    while (got < sizeof buf) {
        ssize_t r = read(fd, buf + got, sizeof buf - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != ALIAS_BYTES || memcmp(buf, ALIAS_MAGIC, sizeof ALIAS_MAGIC - 1) != 0 || buf[ALIAS_BYTES - 1] != '\n')
        return fg_fail(err, "%s: not a fusegen plan alias (%zu bytes; expected \"FGPLAN 1\" and a key)", path, got);
    memcpy(key, buf + sizeof ALIAS_MAGIC - 1, FG_CACHE_KEY_HEX);
    key[FG_CACHE_KEY_HEX] = '\0';
    if (!is_key(key))
        return fg_fail(err, "%s: the plan alias holds no valid key", path);
    return 0;
}

int fg_cache_lookup_alias(fg_cache *cache, const char *plan_key, char key[FG_CACHE_KEY_HEX + 1])
{
    char path[1200];
    if (!is_key(plan_key))
        return 0;
    for (int i = 0; i < n_readable(cache); i++) {
        bool user = i == cache->n_shipped;
        if (!find_file(cache, user ? cache->user_dir : cache->shipped[i], plan_key, ".fgp", path, sizeof path))
            continue;
        fg_error e;
        if (fg_cache_read_alias(path, key, &e) == 0)
            return 1;
        fg_cache_warn(cache, "ignoring a bad plan alias%s: %s", user ? " (it will be rewritten)" : " in the shipped cache",
             e.msg);
    }
    return 0;
}

int fg_cache_store_alias(fg_cache *cache, const char *dir, const char *plan_key, const char *key, fg_error *err)
{
    if (!is_key(key))
        return fg_fail(err, "bad cache key");
    char sub[1100];
    if (prepare_store(cache, &dir, plan_key, sub, sizeof sub, err))
        return -1;
    char text[ALIAS_BYTES + 1], final_path[1100];
    snprintf(text, sizeof text, "%s%s\n", ALIAS_MAGIC, key);
    fg_cache_alias_path(dir, plan_key, final_path, sizeof final_path);
    const void *parts[] = {text};
    const size_t sizes[] = {ALIAS_BYTES};
    return write_atomically(sub, plan_key, final_path, parts, sizes, 1, dir, err);
}

/* ---- walking ------------------------------------------------------------------------------- */

/* A file name "<64 hex digits><suffix>"; its key goes to `key`. */
static bool named_by_key(const char *name, const char *suffix, char key[FG_CACHE_KEY_HEX + 1])
{
    size_t len = strlen(name);
    if (len != FG_CACHE_KEY_HEX + strlen(suffix) || strcmp(name + FG_CACHE_KEY_HEX, suffix) != 0)
        return false;
    memcpy(key, name, FG_CACHE_KEY_HEX);
    key[FG_CACHE_KEY_HEX] = '\0';
    return is_key(key);
}

/* Visits the files of one <dir>/<xx> subdirectory (already checked). */
static int walk_subdir(const char *sub, int (*visit)(void *ctx, const fg_cache_file *f), void *ctx)
{
    DIR *inner = opendir(sub);
    if (!inner)
        return 0;
    struct dirent *e;
    int stop = 0;
    while (!stop && (e = readdir(inner)) != NULL) {
        char key[FG_CACHE_KEY_HEX + 1], path[1200];
        fg_cache_file f = {.key = key, .path = path};
        if (named_by_key(e->d_name, ".fgc", key))
            f.kind = FG_CACHE_ENTRY;
        else if (named_by_key(e->d_name, ".fgp", key))
            f.kind = FG_CACHE_ALIAS;
        else if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp.")) /* a store that never finished */
            f.kind = FG_CACHE_TEMPORARY, f.key = NULL;
        else
            continue;
        snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        f.bytes = (long long)st.st_size;
        f.mtime = st.st_mtime;
        f.mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        stop = visit(ctx, &f);
    }
    closedir(inner);
    return stop;
}

int fg_cache_walk_all(const char *dir, int (*visit)(void *ctx, const fg_cache_file *f), void *ctx, fg_error *err)
{
    int rc = check_dir(dir, true, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0; /* refused, or absent: nothing in it */
    DIR *top = opendir(dir);
    if (!top)
        return fg_fail(err, "cannot read the cache %s: %s", dir, strerror(errno));
    struct dirent *d;
    int stop = 0;
    while (!stop && (d = readdir(top)) != NULL) {
        if (strlen(d->d_name) != 2 || d->d_name[0] == '.')
            continue;
        char sub[1100];
        snprintf(sub, sizeof sub, "%s/%s", dir, d->d_name);
        fg_error why;
        if (check_dir(sub, false, &why) != 0) {
            /* a symbolic link or someone else's: never read, written or emptied through */
            fg_cache_file f = {.kind = FG_CACHE_REFUSED, .path = sub, .problem = why.msg};
            stop = visit(ctx, &f);
            continue;
        }
        stop = walk_subdir(sub, visit, ctx);
    }
    closedir(top);
    return 0;
}

/* fg_cache_walk / fg_cache_walk_aliases: one kind of file through the general walk */
typedef struct kind_walk {
    fg_cache_file_kind kind;
    int (*visit)(void *ctx, const char *path, const char *key);
    void *ctx;
} kind_walk;

static int visit_kind(void *ctx, const fg_cache_file *f)
{
    kind_walk *w = ctx;
    return f->kind == w->kind ? w->visit(w->ctx, f->path, f->key) : 0;
}

int fg_cache_walk(const char *dir, int (*visit)(void *ctx, const char *path, const char *key), void *ctx,
                  fg_error *err)
{
    kind_walk w = {FG_CACHE_ENTRY, visit, ctx};
    return fg_cache_walk_all(dir, visit_kind, &w, err);
}

int fg_cache_walk_aliases(const char *dir, int (*visit)(void *ctx, const char *path, const char *plan_key), void *ctx,
                          fg_error *err)
{
    kind_walk w = {FG_CACHE_ALIAS, visit, ctx};
    return fg_cache_walk_all(dir, visit_kind, &w, err);
}
