/* SPDX-License-Identifier: Apache-2.0 */
/* The cubin cache: content-addressed entries on disk, never trusted blindly.
 *
 * An entry is one file <dir>/<key[0..1]>/<key>.fgc: a fixed header (magic, format version,
 * key, arch, generator and NVRTC versions, sizes), the cubin, a JSON description (layer,
 * kernels, registers and spills), and a BLAKE2b checksum over all of it. Entries are
 * written to a temporary file in the same directory and renamed into place, so a reader
 * never sees a torn file and concurrent writers of the same key both succeed. Every load
 * verifies the whole entry; a bad one is reported, ignored, and replaced when rebuilt.
 *
 * Lookup order: the shipped read-only caches, then the user cache (the directories come
 * from the caller: the context's options or the environment, runtime/environment.h).
 * Shipped caches are never written. */
#ifndef FG_CACHE_H
#define FG_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"

#define FG_CACHE_KEY_HEX 64 /* BLAKE2b-256 */
#define FG_CACHE_MAX_SHIPPED 16

/* Who made and who compiles the entries: every key hashes it and every entry records the
 * version and NVRTC's. The cache computes none of it; its caller does (kernel_build.h,
 * fg_build_identity) and hands it over, so the cache is a function of what it is given. */
typedef struct fg_cache_identity {
    char version[16];           /* the generator's version: entries of another are refused */
    char templates_digest[72];  /* the embedded templates */
    char generator_digest[72];  /* gen/'s C sources, which turn (IR, plan) into the templates' input */
    int nvrtc_major, nvrtc_minor; /* 0.0: not known yet (nothing can be keyed or stored) */
} fg_cache_identity;

typedef struct fg_cache {
    char user_dir[1024];
    char user_refused[1100]; /* why the user cache is not used (fg_cache_check_trust), or "" */
    unsigned create_mode;    /* of a cache directory fusegen creates: 0700 (fg_cache_init); 0755 for one to ship */
    uint64_t max_bytes;      /* the user cache's size cap (FUSEGEN_CACHE_MAX_SIZE), enforced after each store
                                into it by evicting the least recently used entries; 0: none */
    fg_cache_identity identity;
    int n_shipped;
    char shipped[FG_CACHE_MAX_SHIPPED][1024];
    /* called for every problem worth telling the user (bad entries, unwritable dirs) */
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
} fg_cache;

/* user_dir: the user cache (the callers resolve the environment's default:
 * runtime/environment.h); shipped_path: colon-separated shipped caches, NULL or "" for none. */
int fg_cache_init(fg_cache *cache, const char *user_dir, const char *shipped_path, fg_error *err);

/* The key of a compile: hash of the identity's version, templates digest and NVRTC version,
 * the arch, options and the source. */
void fg_cache_key(const fg_cache_identity *id, const char *source, size_t len, const char *arch, const char *options,
                  char key[FG_CACHE_KEY_HEX + 1]);

/* The key of a plan alias: the same identity plus the generator digest and the parts'
 * sizes, over the parts: the bytes of a layer IR and its plan (kernel_build.c, fg_plan_key;
 * both zero-initialized structs without pointers, so their bytes are their value). */
void fg_cache_plan_key(const fg_cache_identity *id, const void *const *parts, const size_t *sizes, int n_parts,
                       const char *arch, const char *options, char key[FG_CACHE_KEY_HEX + 1]);

/* Checks who can write the caches (docs/hardening.md): a shipped cache or the user cache
 * owned by another user (not root), or writable by its group or everyone, is not used, with
 * a warning through cache->warn saying why (the user cache's reason stays in user_refused,
 * and stores into it fail with it). Caches that do not exist yet are fine. Returns the
 * number of caches refused. Call once after fg_cache_init and setting warn. */
int fg_cache_check_trust(fg_cache *cache);

/* Tells the user about a cache problem through cache->warn (else on stderr). */
void fg_cache_warn(fg_cache *cache, const char *fmt, ...) FG_PRINTF(2, 3);

typedef struct fg_cache_entry {
    unsigned char *cubin;
    size_t cubin_size;
    char *meta_json;     /* NUL-terminated */
    char arch[16];
    char generator[16];
    int nvrtc_major, nvrtc_minor;
    char path[1100];     /* where it was found */
    bool shipped;        /* found in a read-only shipped cache */
} fg_cache_entry;

/* 1 and the entry when found and valid; 0 when absent (or every copy was bad: each bad one
 * is reported through warn); -1 on an error that is not about the entry. */
int fg_cache_lookup(fg_cache *cache, const char *key, const char *arch, fg_cache_entry *out, fg_error *err);
void fg_cache_entry_free(fg_cache_entry *e);

/* Writes an entry into the user cache (or into `dir` when not NULL, for `fusegen build
 * --cache DIR`). Returns 0, or -1 with err saying why it could not be stored. */
int fg_cache_store(fg_cache *cache, const char *dir, const char *key, const char *arch, const void *cubin,
                   size_t cubin_size, const char *meta_json, fg_error *err);

/* What an entry must be for its reader; a NULL field is not checked. */
typedef struct fg_entry_expect {
    const char *key, *arch;
    const char *version; /* the generator version that wrote it */
} fg_entry_expect;

/* Reads and verifies one entry file (used by lookup, `cache verify` and the fuzzers). */
int fg_cache_read_entry(const char *path, const fg_entry_expect *expect, fg_cache_entry *out, fg_error *err);
/* The same on bytes already in memory. */
int fg_cache_parse_entry(const unsigned char *data, size_t size, const fg_entry_expect *expect, fg_cache_entry *out,
                         fg_error *err);

/* What a walk of a cache finds. */
typedef enum fg_cache_file_kind {
    FG_CACHE_ENTRY,     /* <xx>/<key>.fgc */
    FG_CACHE_ALIAS,     /* <xx>/<plan key>.fgp */
    FG_CACHE_TEMPORARY, /* <xx>/.<key>.tmp.XXXXXX: a store that never finished (killed) */
    FG_CACHE_REFUSED,   /* a subdirectory that is a symbolic link or someone else's: not entered */
} fg_cache_file_kind;

typedef struct fg_cache_file {
    fg_cache_file_kind kind;
    const char *path;
    const char *key;     /* entries and aliases: from the name */
    const char *problem; /* FG_CACHE_REFUSED: why */
    long long bytes;
    long long mtime;     /* seconds since the epoch */
    long long mtime_ns;  /* the same in nanoseconds: which of two entries was used last */
} fg_cache_file;

/* Visits every file of the cache `dir` (ls, verify, clear, prune), never following a symbolic
 * link or entering a directory someone else can write. The callback returns non-zero to
 * stop. A cache that does not exist has nothing; one that is refused (check_trust's rules) is
 * an error. */
int fg_cache_walk_all(const char *dir, int (*visit)(void *ctx, const fg_cache_file *f), void *ctx, fg_error *err);

/* Visits every entry file under dir. The callback returns non-zero to stop. */
int fg_cache_walk(const char *dir, int (*visit)(void *ctx, const char *path, const char *key), void *ctx,
                  fg_error *err);

/* Plan aliases: <dir>/<plan_key[0..1]>/<plan_key>.fgp holds "FGPLAN 1\n<key>\n", the key of
 * the source that a (layer IR, plan) pair renders to, so that a warm load finds its entry
 * without rendering (kernel_build.h, fg_plan_key). An alias only points: the entry it names
 * is verified as usual, and a missing or bad one means rendering after all. Written
 * atomically like entries; read from the shipped caches first, then the user cache. */
void fg_cache_alias_path(const char *dir, const char *plan_key, char *buf, size_t cap);
/* 1 and `key` when an alias for plan_key is found (bad ones are reported through warn), else 0. */
int fg_cache_lookup_alias(fg_cache *cache, const char *plan_key, char key[FG_CACHE_KEY_HEX + 1]);
/* Reads one alias file (lookup, `cache verify`). */
int fg_cache_read_alias(const char *path, char key[FG_CACHE_KEY_HEX + 1], fg_error *err);
/* Writes an alias into the user cache (or `dir`). */
int fg_cache_store_alias(fg_cache *cache, const char *dir, const char *plan_key, const char *key, fg_error *err);
/* Visits every alias file under dir. */
int fg_cache_walk_aliases(const char *dir, int (*visit)(void *ctx, const char *path, const char *plan_key), void *ctx,
                          fg_error *err);

/* Builds "<dir>/<key[0..1]>/<key>.fgc". */
void fg_cache_entry_path(const char *dir, const char *key, char *buf, size_t cap);

#endif
