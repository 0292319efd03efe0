/* SPDX-License-Identifier: Apache-2.0 */
/* Keeping a cache in shape (docs/cli.md, `fusegen cache prune|stats`): a size cap with
 * least-recently-used eviction (a hit in the user cache refreshes its entry's time), removal
 * of entries another fusegen version wrote, of unfinished temporary files and of plan aliases
 * whose entry is gone; and statistics of hits, misses and the compile time they saved. */
#ifndef FG_CACHE_MAINTENANCE_H
#define FG_CACHE_MAINTENANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "cache.h"

#define FG_CACHE_DEFAULT_MAX_BYTES (4ull << 30) /* FUSEGEN_CACHE_MAX_SIZE's default */

typedef struct fg_prune_options {
    uint64_t max_bytes;        /* entries (and their aliases) used least recently go until the rest fit; 0: no cap */
    int64_t older_than;        /* seconds: entries not used for longer are removed; 0: none */
    const char *version;       /* entries another generator version wrote are removed; NULL: kept */
    int64_t temporaries_after; /* seconds: unfinished temporary files older than this are removed (a store in
                                  progress is younger); < 0: kept */
    int64_t now;               /* the time to compare with (seconds since the epoch) */
} fg_prune_options;

typedef struct fg_prune_result {
    int entries, aliases;                      /* kept */
    uint64_t bytes;                            /* kept: entries and aliases */
    int evicted, expired, stale, bad;          /* entries removed: over the cap, unused, other version, unreadable */
    int orphan_aliases, temporaries;           /* other files removed */
    uint64_t bytes_removed;
} fg_prune_result;

/* Prunes the cache `dir` (never a shipped one: the caller decides). Bad entries are left to
 * `cache verify` and the next build unless options->version is set. */
int fg_cache_prune(const char *dir, const fg_prune_options *options, fg_prune_result *result, fg_error *err);

/* "4G", "500M", "100k", "123" (bytes), "0" (no cap): -1 when it does not parse. */
int fg_parse_size(const char *text, uint64_t *bytes);
/* "30d", "12h", "15m", "90s": -1 when it does not parse. */
int fg_parse_age(const char *text, int64_t *seconds);

/* ---- statistics ----------------------------------------------------------------------- */

typedef struct fg_cache_stats {
    int64_t hits, misses;
    double compile_seconds; /* spent compiling the misses */
    double saved_seconds;   /* the hits' entries took this long to compile once */
} fg_cache_stats;

/* Adds one lookup's outcome to `<dir>/stats` (under an exclusive lock, so concurrent
 * processes count right); nothing when the cache does not exist or is not writable. */
void fg_cache_stats_record(const char *dir, bool hit, double seconds);
/* Reads them (all zero when there are none yet). */
int fg_cache_stats_read(const char *dir, fg_cache_stats *stats, fg_error *err);

#endif
