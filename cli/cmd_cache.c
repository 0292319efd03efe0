#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/kernel_build.h"
#include "cli.h"

static const char usage[] =
    "usage: fusegen cache ls|verify|clear [--cache DIR]\n"
    "\n"
    "  ls       list the entries: key, architecture, layer, size, kernels and registers\n"
    "  verify   read every entry and check its header and checksum, and every plan alias;\n"
    "           exit 1 if any is bad\n"
    "  clear    delete every entry and plan alias\n"
    "\n"
    "options:\n"
    "  --cache DIR   the cache to work on (default: the user cache)\n";

typedef struct walk_state {
    const char *mode;
    int entries, bad, aliases, temporaries, refused;
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
    if (fg_cache_read_entry(f->path, &(fg_entry_expect){.key = f->key, .version = FUSEGEN_VERSION}, &e, &err) != 0) {
        w->bad++;
        printf("BAD  %.16s  %s\n", f->key, err.msg);
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

int cmd_cache(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, 0, 'h'}, {"cache", required_argument, 0, 'c'}, {0, 0, 0, 0}};
    const char *dir = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return EXIT_OK;
        }
        if (c != 'c')
            return cli_usage_error("cache", "unknown option");
        if (cli_parse_dir("cache", "--cache", optarg, &dir))
            return EXIT_USAGE;
    }
    if (argc - optind != 1)
        return cli_usage_error("cache", "expects one of ls, verify, clear");
    const char *mode = argv[optind];
    if (strcmp(mode, "ls") && strcmp(mode, "verify") && strcmp(mode, "clear"))
        return cli_usage_error("cache", "unknown action '%s' (expected ls, verify or clear)", mode);
    fg_cache cache;
    fg_error err;
    if (cli_open_cache(&cache, dir, false) != 0)
        return EXIT_FAIL;
    walk_state w = {.mode = mode};
    if (fg_cache_walk_all(cache.user_dir, visit, &w, &err) != 0) {
        cli_error("%s", err.msg);
        return EXIT_FAIL;
    }
    char extra[128] = "";
    if (w.temporaries || w.refused)
        snprintf(extra, sizeof extra, ", %d unfinished temporary files, %d refused subdirectories", w.temporaries,
                 w.refused);
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
