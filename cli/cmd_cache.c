/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/cache_maintenance.h"
#include "../runtime/kernel_build.h"
#include "cli.h"

static const char usage[] =
    "usage: fusegen cache ls|verify|clear|stats [--cache DIR]\n"
    "       fusegen cache prune [--max-size S] [--older-than D] [--cache DIR]\n"
    "       fusegen cache export [--arch LIST] [--cache DIR] -o FILE.tar SPEC...\n"
    "       fusegen cache import [--cache DIR] FILE.tar\n"
    "\n"
    "  ls       list the entries: key, architecture, layer, size, kernels and registers\n"
    "  verify   read every entry and check its header and checksum, and every plan alias;\n"
    "           exit 1 if any is bad (entries of another fusegen version are STALE, not bad)\n"
    "  clear    delete every entry, plan alias and unfinished temporary file\n"
    "  stats    entries, size, hits, misses and the compile time the hits saved\n"
    "  prune    delete entries of other fusegen versions, entries unused for --older-than,\n"
    "           the least recently used ones past the size cap, and leftovers\n"
    "  export   write exactly the entries and plan aliases the SPECs need for each --arch\n"
    "           into a tar file (from the caches; build them first)\n"
    "  import   verify every entry and plan alias of such a tar file and store them\n"
    "\n"
    "options:\n"
    "  --cache DIR         the cache to work on (default: the user cache)\n"
    "  --max-size S        prune: the size cap, e.g. 2G, 500M (default $FUSEGEN_CACHE_MAX_SIZE or 4G)\n"
    "  --older-than D      prune: also delete entries not used for D, e.g. 30d, 12h\n"
    "  --arch LIST         export: architectures (default " CLI_DEFAULT_ARCHS ")\n"
    "  -o, --output FILE   export: the tar file to write\n";

typedef struct walk_state {
    const char *mode;
    int entries, bad, stale, aliases, temporaries, refused;
    long long bytes;
} walk_state;

/* In clear mode, removes the file and returns true. */
static bool cleared(const walk_state *w, const char *path)
{
    if (strcmp(w->mode, "clear") != 0)
        return false;
    if (unlink(path) != 0)
        cli_error("cannot remove %s: %s", path, strerror(errno));
    return true;
}

/* A plan alias (runtime/cache.h): removed by clear, checked by verify, counted by ls. */
static void visit_alias(walk_state *w, const fg_cache_file *f)
{
    w->aliases++;
    if (cleared(w, f->path))
        return;
    char key[FG_CACHE_KEY_HEX + 1];
    fg_error err;
    if (!strcmp(w->mode, "verify") && fg_cache_read_alias(f->path, key, &err) != 0) {
        w->bad++;
        printf("BAD  %.16s  %s\n", f->key, err.msg);
    }
}

static void visit_entry(walk_state *w, const fg_cache_file *f)
{
    w->entries++;
    if (cleared(w, f->path))
        return;
    fg_cache_entry e;
    fg_error err;
    if (fg_cache_read_entry(f->path, &(fg_entry_expect){.key = f->key}, &e, &err) != 0) {
        w->bad++;
        printf("BAD  %.16s  %s\n", f->key, err.msg);
        return;
    }
    if (strcmp(e.generator, FUSEGEN_VERSION) != 0) { /* never used by this fusegen; prune removes it */
        w->stale++;
        if (strcmp(w->mode, "clear") != 0)
            printf("STALE %.16s  written by fusegen %s, this is %s (fusegen cache prune removes it)\n", f->key,
                   e.generator, FUSEGEN_VERSION);
        fg_cache_entry_free(&e);
        return;
    }
    w->bytes += (long long)e.cubin_size;
    if (!strcmp(w->mode, "ls")) {
        char layer[128];
        fg_kernel_resources k[FG_MAX_KERNELS];
        int n = fg_describe_parse(e.meta_json, layer, sizeof layer, k, FG_MAX_KERNELS);
        int regs = 0, spills = 0;
        for (int i = 0; i < n; i++) {
            regs = k[i].registers > regs ? k[i].registers : regs;
            spills += k[i].spill_loads + k[i].spill_stores;
        }
        if (n > 0)
            printf("%.16s  %-7s %-48s %8zu B  %d kernels, <= %d regs%s\n", f->key, e.arch, layer, e.cubin_size, n, regs,
                   spills ? ", SPILLS" : "");
        else /* compiled from NVRTC's own cache: no ptxas report */
            printf("%.16s  %-7s %-48s %8zu B  registers unknown\n", f->key, e.arch, layer, e.cubin_size);
    }
    fg_cache_entry_free(&e);
}

static int visit(void *ctx, const fg_cache_file *f)
{
    walk_state *w = ctx;
    switch (f->kind) {
    case FG_CACHE_ENTRY:
        visit_entry(w, f);
        break;
    case FG_CACHE_ALIAS:
        visit_alias(w, f);
        break;
    case FG_CACHE_TEMPORARY: /* left by a store that was killed; clear removes it */
        w->temporaries++;
        if (!cleared(w, f->path) && strcmp(w->mode, "ls") != 0)
            printf("TEMP %s: a store that never finished (fusegen cache clear removes it)\n", f->path);
        break;
    case FG_CACHE_REFUSED: /* never entered, emptied or written through */
        w->refused++;
        w->bad++;
        printf("REFUSED  %s\n", f->problem);
        break;
    }
    return 0;
}

static int cache_stats(const fg_cache *cache)
{
    walk_state w = {.mode = "stats"};
    fg_error err;
    fg_cache_stats st;
    if (fg_cache_walk_all(cache->user_dir, visit, &w, &err) != 0 || fg_cache_stats_read(cache->user_dir, &st, &err) != 0) {
        cli_error("%s", err.msg);
        return EXIT_FAIL;
    }
    long long lookups = st.hits + st.misses;
    printf("%s: %d entries (%lld bytes of cubins), %d plan aliases, %d bad, %d stale\n", cache->user_dir, w.entries,
           w.bytes, w.aliases, w.bad, w.stale);
    printf("lookups %lld: %lld hits, %lld misses (%.0f%% hits); compile time spent %.1f s, saved by the hits %.1f s\n",
           lookups, (long long)st.hits, (long long)st.misses, lookups ? 100.0 * (double)st.hits / (double)lookups : 0.0,
           st.compile_seconds, st.saved_seconds);
    if (cache->max_bytes)
        printf("size cap %.3g GB (FUSEGEN_CACHE_MAX_SIZE)\n", (double)cache->max_bytes / 1e9);
    return EXIT_OK;
}

static int cache_prune(const fg_cache *cache, uint64_t max_bytes, int64_t older_than)
{
    fg_prune_options o = {.max_bytes = max_bytes,
                          .older_than = older_than,
                          .version = FUSEGEN_VERSION,
                          .temporaries_after = 3600, /* a store in progress takes seconds */
                          .now = time(NULL)};
    fg_prune_result r;
    fg_error err;
    if (fg_cache_prune(cache->user_dir, &o, &r, &err) != 0) {
        cli_error("%s", err.msg);
        return EXIT_FAIL;
    }
    fprintf(stderr,
            "%s: removed %d entries of other fusegen versions, %d unused, %d over the size cap, %d unreadable, "
            "%d plan aliases without an entry, %d unfinished temporary files (%llu bytes); kept %d entries and %d "
            "plan aliases (%llu bytes)\n",
            cache->user_dir, r.stale, r.expired, r.evicted, r.bad, r.orphan_aliases, r.temporaries,
            (unsigned long long)r.bytes_removed, r.entries, r.aliases, (unsigned long long)r.bytes);
    return EXIT_OK;
}

int cmd_cache(int argc, char **argv)
{
    static const struct option longopts[] = {{"help", no_argument, 0, 'h'},
                                             {"cache", required_argument, 0, 'c'},
                                             {"max-size", required_argument, 0, 'm'},
                                             {"older-than", required_argument, 0, 'O'},
                                             {"arch", required_argument, 0, 'a'},
                                             {"output", required_argument, 0, 'o'},
                                             {0, 0, 0, 0}};
    const char *dir = NULL, *arch_list = CLI_DEFAULT_ARCHS, *output = NULL;
    uint64_t max_bytes = 0;
    int64_t older_than = 0;
    bool max_given = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(usage, stdout);
            return EXIT_OK;
        case 'c':
            if (cli_parse_dir("cache", "--cache", optarg, &dir))
                return EXIT_USAGE;
            break;
        case 'm':
            if (fg_parse_size(optarg, &max_bytes) != 0)
                return cli_usage_error("cache", "--max-size expects a size like 2G, 500M or 0 (no cap), got '%s'",
                                       optarg);
            max_given = true;
            break;
        case 'O':
            if (fg_parse_age(optarg, &older_than) != 0 || older_than <= 0)
                return cli_usage_error("cache", "--older-than expects an age like 30d, 12h or 90m, got '%s'", optarg);
            break;
        case 'a':
            arch_list = optarg;
            break;
        case 'o':
            if (!optarg[0])
                return cli_usage_error("cache", "-o expects a file name");
            output = optarg;
            break;
        default:
            return cli_usage_error("cache", "unknown option");
        }
    }
    if (argc - optind < 1)
        return cli_usage_error("cache", "expects one of ls, verify, clear, stats, prune, export, import");
    const char *mode = argv[optind];
    int n_args = argc - optind - 1;
    static const char *const modes[] = {"ls", "verify", "clear", "stats", "prune", "export", "import"};
    bool known = false;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        known |= strcmp(mode, modes[i]) == 0;
    if (!known)
        return cli_usage_error("cache", "unknown action '%s' (expected ls, verify, clear, stats, prune, export or import)",
                               mode);
    bool is_export = !strcmp(mode, "export"), is_import = !strcmp(mode, "import");
    if ((max_given || older_than) && strcmp(mode, "prune") != 0)
        return cli_usage_error("cache", "--max-size and --older-than go with prune");
    if ((output || strcmp(arch_list, CLI_DEFAULT_ARCHS) != 0) && !is_export)
        return cli_usage_error("cache", "--arch and -o go with export");
    if (is_export && (!output || n_args < 1))
        return cli_usage_error("cache", "export expects -o FILE.tar and at least one SPEC");
    if (is_import && n_args != 1)
        return cli_usage_error("cache", "import expects one FILE.tar");
    if (!is_export && !is_import && n_args != 0)
        return cli_usage_error("cache", "%s takes no arguments", mode);
    fg_cache cache;
    fg_error err;
    if (cli_open_cache(&cache, dir, is_export) != 0)
        return EXIT_FAIL;
    if (!strcmp(mode, "stats"))
        return cache_stats(&cache);
    if (!strcmp(mode, "prune"))
        return cache_prune(&cache, max_given ? max_bytes : cache.max_bytes ? cache.max_bytes : cli_environment()->cache_max_bytes,
                           older_than);
    if (is_export)
        return cli_cache_export(&cache, arch_list, output, argv + optind + 1, n_args);
    if (is_import)
        return cli_cache_import(&cache, argv[optind + 1]);
    walk_state w = {.mode = mode};
    if (fg_cache_walk_all(cache.user_dir, visit, &w, &err) != 0) {
        cli_error("%s", err.msg);
        return EXIT_FAIL;
    }
    char extra[160] = "";
    if (w.temporaries || w.refused || w.stale)
        snprintf(extra, sizeof extra, ", %d unfinished temporary files, %d refused subdirectories, %d stale entries",
                 w.temporaries, w.refused, w.stale);
    if (!strcmp(mode, "clear"))
        fprintf(stderr, "removed %d entries, %d plan aliases and %d temporary files from %s%s\n", w.entries,
                w.aliases, w.temporaries, cache.user_dir,
                w.refused ? " (refused subdirectories left alone)" : "");
    else
        fprintf(stderr, "%s: %d entries, %d bad, %lld bytes of cubins, %d plan aliases%s\n", cache.user_dir, w.entries,
                w.bad, w.bytes, w.aliases, extra);
    /* only verify fails on bad entries; ls lists them */
    return w.bad && !strcmp(mode, "verify") ? EXIT_FAIL : EXIT_OK;
}
