/* SPDX-License-Identifier: Apache-2.0 */
#include "cache_maintenance.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- pruning -------------------------------------------------------------------------------- */

typedef struct found {
    char path[1200];
    char key[FG_CACHE_KEY_HEX + 1]; /* an entry's key; an alias's target */
    long long bytes, mtime, mtime_ns;
    bool removed;
} found;

typedef struct inventory {
    found *entries, *aliases, *temporaries;
    int n_entries, n_aliases, n_temporaries;
    int cap_entries, cap_aliases, cap_temporaries;
    bool oom;
} inventory;

static found *add(found **list, int *n, int *cap, bool *oom)
{
    if (*n == *cap) {
        int grown = *cap ? 2 * *cap : 64;
        found *l = realloc(*list, sizeof *l * (size_t)grown);
        if (!l) {
            *oom = true;
            return NULL;
        }
        *list = l;
        *cap = grown;
    }
    found *f = &(*list)[(*n)++];
    memset(f, 0, sizeof *f);
    return f;
}

static int collect(void *ctx, const fg_cache_file *file)
{
    inventory *inv = ctx;
    found *f = NULL;
    if (file->kind == FG_CACHE_ENTRY)
        f = add(&inv->entries, &inv->n_entries, &inv->cap_entries, &inv->oom);
    else if (file->kind == FG_CACHE_ALIAS)
        f = add(&inv->aliases, &inv->n_aliases, &inv->cap_aliases, &inv->oom);
    else if (file->kind == FG_CACHE_TEMPORARY)
        f = add(&inv->temporaries, &inv->n_temporaries, &inv->cap_temporaries, &inv->oom);
    if (!f)
        return inv->oom;
    snprintf(f->path, sizeof f->path, "%s", file->path);
    if (file->kind == FG_CACHE_ENTRY)
        snprintf(f->key, sizeof f->key, "%s", file->key);
    f->bytes = file->bytes;
    f->mtime = file->mtime;
    f->mtime_ns = file->mtime_ns;
    return 0;
}

static int oldest_first(const void *a, const void *b)
{
    const found *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

static bool remove_file(found *f, uint64_t *bytes_removed)
{
    if (unlink(f->path) != 0 && errno != ENOENT)
        return false;
    f->removed = true;
    *bytes_removed += (uint64_t)f->bytes;
    return true;
}

static bool entry_kept(const inventory *inv, const char *key)
{
    for (int i = 0; i < inv->n_entries; i++)
        if (!inv->entries[i].removed && strcmp(inv->entries[i].key, key) == 0)
            return true;
    return false;
}

int fg_cache_prune(const char *dir, const fg_prune_options *o, fg_prune_result *r, fg_error *err)
{
    memset(r, 0, sizeof *r);
    inventory inv = {0};
    int rc = fg_cache_walk_all(dir, collect, &inv, err);
    if (rc == 0 && inv.oom)
        rc = fg_fail(err, "out of memory listing the cache %s", dir);
    for (int i = 0; rc == 0 && i < inv.n_temporaries; i++)
        if (o->temporaries_after >= 0 && o->now - inv.temporaries[i].mtime > o->temporaries_after)
            r->temporaries += remove_file(&inv.temporaries[i], &r->bytes_removed);
    for (int i = 0; rc == 0 && i < inv.n_entries; i++) {
        found *e = &inv.entries[i];
        if (o->version) { /* reads every entry: only for an explicit prune */
            fg_cache_entry entry;
            fg_error why;
            if (fg_cache_read_entry(e->path, &(fg_entry_expect){.key = e->key}, &entry, &why) != 0) {
                r->bad += remove_file(e, &r->bytes_removed);
                continue;
            }
            bool stale = strcmp(entry.generator, o->version) != 0;
            fg_cache_entry_free(&entry);
            if (stale) {
                r->stale += remove_file(e, &r->bytes_removed);
                continue;
            }
        }
        if (o->older_than > 0 && o->now - e->mtime > o->older_than)
            r->expired += remove_file(e, &r->bytes_removed);
    }
    /* aliases: read for their target (74 bytes each) */
    for (int i = 0; rc == 0 && i < inv.n_aliases; i++) {
        fg_error why;
        if (fg_cache_read_alias(inv.aliases[i].path, inv.aliases[i].key, &why) != 0)
            inv.aliases[i].key[0] = '\0';
    }
    /* the size cap: least recently used entries first (a hit refreshes an entry's time) */
    uint64_t total = 0;
    for (int i = 0; i < inv.n_entries; i++)
        total += inv.entries[i].removed ? 0 : (uint64_t)inv.entries[i].bytes;
    for (int i = 0; i < inv.n_aliases; i++)
        total += (uint64_t)inv.aliases[i].bytes;
    if (rc == 0 && o->max_bytes && total > o->max_bytes) {
        qsort(inv.entries, (size_t)inv.n_entries, sizeof *inv.entries, oldest_first);
        for (int i = 0; i < inv.n_entries && total > o->max_bytes; i++) {
            found *e = &inv.entries[i];
            if (e->removed)
                continue;
            if (remove_file(e, &r->bytes_removed)) {
                r->evicted++;
                total -= (uint64_t)e->bytes;
            }
        }
    }
    /* aliases whose entry is gone only cost a render; they go with their entry */
    for (int i = 0; rc == 0 && i < inv.n_aliases; i++) {
        found *a = &inv.aliases[i];
        if (!a->key[0] || !entry_kept(&inv, a->key))
            r->orphan_aliases += remove_file(a, &r->bytes_removed);
    }
    for (int i = 0; i < inv.n_entries; i++)
        if (!inv.entries[i].removed) {
            r->entries++;
            r->bytes += (uint64_t)inv.entries[i].bytes;
        }
    for (int i = 0; i < inv.n_aliases; i++)
        if (!inv.aliases[i].removed) {
            r->aliases++;
            r->bytes += (uint64_t)inv.aliases[i].bytes;
        }
    free(inv.entries);
    free(inv.aliases);
    free(inv.temporaries);
    return rc;
}

int fg_parse_size(const char *text, uint64_t *bytes)
{
    char *end;
    errno = 0;
    if (!text || text[0] < '0' || text[0] > '9')
        return -1;
    unsigned long long v = strtoull(text, &end, 10);
    uint64_t unit = 1;
    switch (*end) {
    case 'k': case 'K': unit = 1ull << 10; end++; break;
    case 'm': case 'M': unit = 1ull << 20; end++; break;
    case 'g': case 'G': unit = 1ull << 30; end++; break;
    case 't': case 'T': unit = 1ull << 40; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || errno || __builtin_mul_overflow((uint64_t)v, unit, bytes))
        return -1;
    return 0;
}

int fg_parse_age(const char *text, int64_t *seconds)
{
    char *end;
    errno = 0;
    if (!text || text[0] < '0' || text[0] > '9')
        return -1;
    long long v = strtoll(text, &end, 10);
    int64_t unit = *end == 'd' ? 86400 : *end == 'h' ? 3600 : *end == 'm' ? 60 : *end == 's' ? 1 : 0;
    if (!unit || end[1] || errno || __builtin_mul_overflow((int64_t)v, unit, seconds))
        return -1;
    return 0;
}

/* ---- statistics ----------------------------------------------------------------------------- */

static void stats_path(const char *dir, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/stats.json", dir);
}

static void stats_from_json(const char *text, fg_cache_stats *s)
{
    memset(s, 0, sizeof *s);
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return; /* unreadable statistics start again from zero: they are only statistics */
    }
    s->hits = json_integer_value(json_object_get(root, "hits"));
    s->misses = json_integer_value(json_object_get(root, "misses"));
    s->compile_seconds = json_number_value(json_object_get(root, "compile_seconds"));
    s->saved_seconds = json_number_value(json_object_get(root, "saved_seconds"));
    json_decref(root);
}

/* Reads the open stats file (at most 4 KiB) into s. */
static void read_stats_fd(int fd, fg_cache_stats *s)
{
    char buf[4097];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    stats_from_json(buf, s);
}

void fg_cache_stats_record(const char *dir, bool hit, double seconds)
{
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return;
    char path[1200];
    stats_path(dir, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0)
        return;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || flock(fd, LOCK_EX) != 0) {
        close(fd);
        return;
    }
    fg_cache_stats s;
    read_stats_fd(fd, &s);
    if (hit) {
        s.hits++;
        s.saved_seconds += seconds;
    } else {
        s.misses++;
        s.compile_seconds += seconds;
    }
    char text[512];
    int n = snprintf(text, sizeof text,
                     "{\"hits\": %lld, \"misses\": %lld, \"compile_seconds\": %.3f, \"saved_seconds\": %.3f}\n",
                     (long long)s.hits, (long long)s.misses, s.compile_seconds, s.saved_seconds);
    if (n > 0 && ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) == n) {
        /* written; the lock goes with the descriptor */
    }
    close(fd);
}

int fg_cache_stats_read(const char *dir, fg_cache_stats *s, fg_error *err)
{
    memset(s, 0, sizeof *s);
    char path[1200];
    stats_path(dir, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? 0 : fg_fail(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fg_fail(err, "%s: not a regular file", path);
    }
    flock(fd, LOCK_SH);
    read_stats_fd(fd, s);
    close(fd);
    return 0;
}
