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
    return 0;
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

int fg_cache_read_entry(const char *path, const fg_entry_expect *expect, fg_cache_entry *out, fg_error *err)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fg_fail(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fg_fail(err, "%s: not a regular file", path);
    }
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

int fg_cache_lookup(fg_cache *cache, const char *key, const char *arch, fg_cache_entry *out, fg_error *err)
{
    (void)err;
    const fg_entry_expect expect = {key, arch, cache->identity.version};
    char path[1100];
    for (int i = 0; i < cache->n_shipped; i++) {
        fg_cache_entry_path(cache->shipped[i], key, path, sizeof path);
        if (access(path, F_OK) != 0)
            continue;
        fg_error e;
        if (fg_cache_read_entry(path, &expect, out, &e) == 0) {
            out->shipped = true;
            return 1;
        }
        fg_cache_warn(cache, "ignoring a bad entry in the shipped cache: %s", e.msg);
    }
    fg_cache_entry_path(cache->user_dir, key, path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    fg_error e;
    if (fg_cache_read_entry(path, &expect, out, &e) == 0)
        return 1;
    fg_cache_warn(cache, "ignoring a bad cache entry (it will be rebuilt): %s", e.msg);
    return 0;
}

/* ---- writing ------------------------------------------------------------------------------- */

static int mkdir_p(const char *dir, fg_error *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return fg_fail(err, "cannot create %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return fg_fail(err, "cannot create %s: %s", tmp, strerror(errno));
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
        return fg_fail(err, "%s is not a directory", tmp);
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
    snprintf(sub, sub_cap, "%s/%.2s", *dir, key);
    return mkdir_p(sub, err);
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
    FILE *f = fopen(path, "rb");
    if (!f)
        return fg_fail(err, "%s: %s", path, strerror(errno));
    char buf[ALIAS_BYTES + 1];
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
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
    char path[1100];
    for (int i = 0; i <= cache->n_shipped; i++) {
        bool user = i == cache->n_shipped;
        fg_cache_alias_path(user ? cache->user_dir : cache->shipped[i], plan_key, path, sizeof path);
        if (access(path, F_OK) != 0)
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

/* Visits every <dir>/<xx>/<key><suffix> file. */
static int walk_files(const char *dir, const char *suffix, int (*visit)(void *ctx, const char *path, const char *key),
                      void *ctx, fg_error *err)
{
    DIR *top = opendir(dir);
    if (!top) {
        if (errno == ENOENT)
            return 0;
        return fg_fail(err, "cannot read the cache %s: %s", dir, strerror(errno));
    }
    struct dirent *d;
    int stop = 0;
    while (!stop && (d = readdir(top)) != NULL) {
        if (strlen(d->d_name) != 2 || d->d_name[0] == '.')
            continue;
        char sub[1100];
        snprintf(sub, sizeof sub, "%s/%s", dir, d->d_name);
        DIR *inner = opendir(sub);
        if (!inner)
            continue;
        struct dirent *e;
        while (!stop && (e = readdir(inner)) != NULL) {
            size_t len = strlen(e->d_name);
            if (len != FG_CACHE_KEY_HEX + strlen(suffix) || strcmp(e->d_name + FG_CACHE_KEY_HEX, suffix) != 0)
                continue;
            char key[FG_CACHE_KEY_HEX + 1];
            memcpy(key, e->d_name, FG_CACHE_KEY_HEX);
            key[FG_CACHE_KEY_HEX] = '\0';
            if (!is_key(key))
                continue;
            char path[1200];
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
            stop = visit(ctx, path, key);
        }
        closedir(inner);
    }
    closedir(top);
    return 0;
}

int fg_cache_walk(const char *dir, int (*visit)(void *ctx, const char *path, const char *key), void *ctx,
                  fg_error *err)
{
    return walk_files(dir, ".fgc", visit, ctx, err);
}

int fg_cache_walk_aliases(const char *dir, int (*visit)(void *ctx, const char *path, const char *plan_key), void *ctx,
                          fg_error *err)
{
    return walk_files(dir, ".fgp", visit, ctx, err);
}
