/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/kernel_build.h"
#include "../runtime/tools.h"
#include "cli.h"
#include "../gen/render.h"
#include "../common/clock.h"

static const char usage[] =
    "usage: fusegen build [--arch LIST] [--cache DIR] [-j N] [--check] SPEC...\n"
    "\n"
    "Precompiles the kernels of every SPEC (a layer, or each layer of a block) for every\n"
    "architecture into a cache, with no GPU needed, under the keys the runtime looks them up\n"
    "by. Kernels already in the cache are not compiled again. Ship DIR with an application\n"
    "and point FUSEGEN_CACHE_PATH at it.\n"
    "\n"
    "options:\n"
    "  --arch LIST     comma-separated architectures (default " CLI_DEFAULT_ARCHS ")\n"
    "  --cache DIR     cache to fill (default: the user cache, $FUSEGEN_CACHE_DIR or\n"
    "                  $XDG_CACHE_HOME/fusegen or ~/.cache/fusegen)\n"
    "  -j, --jobs N    compile N kernels in parallel (default: the number of CPUs)\n"
    "  --check         compile nothing: load each SPEC as the runtime does (no GPU needed) and\n"
    "                  say whether the cache holds every kernel set its prepare would load\n"
    "                  for each architecture; exit 1 if any is missing\n";

#define MAX_ARCHS 8
#define MAX_SPECS 256

typedef struct work {
    const fg_layer_ir *ir;
    const char *source;
    const char *arch;
    char plan_key[FG_CACHE_KEY_HEX + 1]; /* recorded as an alias of the source's key */
    fg_built built;
    int failed;
    char error[4096];
    char alias_error[1024]; /* why the plan alias could not be stored, or "" */
} work;

typedef struct pool {
    pthread_mutex_t lock;
    pthread_cond_t finished; /* signalled after each item, for the progress line */
    bool progress_line;      /* stderr is a terminal: a "[done/total] elapsed" line is kept last */
    work *items;
    int n, next, done;
    fg_builder builder;
    int compiled, cached, failed, unstored, unaliased;
    double started;
} pool;

/* The terminal's last line: done/total, running, elapsed. Lock held. */
static void draw_progress(const pool *p)
{
    if (p->progress_line)
        fprintf(stderr, "\r\033[K[%d/%d] %d running, %.0f s", p->done, p->n, p->next - p->done,
                fg_seconds_now() - p->started);
}

/* Lock held: a line of its own, above the progress line. */
static void begin_line(const pool *p)
{
    if (p->progress_line)
        fputs("\r\033[K", stderr);
}

static void report(pool *p, work *w)
{
    /* called with the lock held: lines never interleave */
    begin_line(p);
    p->done++;
    fprintf(stderr, "[%d/%d] %s %s: ", p->done, p->n, w->ir->name, w->arch);
    if (w->failed) {
        p->failed++;
        fprintf(stderr, "FAILED\n%s\n", w->error);
        return;
    }
    const fg_built *b = &w->built;
    int max_regs = 0, spills = 0;
    for (int i = 0; i < b->n_kernels; i++) {
        if (b->kernels[i].registers > max_regs)
            max_regs = b->kernels[i].registers;
        spills += b->kernels[i].spill_stores + b->kernels[i].spill_loads;
    }
    if (b->from_cache) {
        p->cached++;
        if (b->n_kernels > 0)
            fprintf(stderr, "in the cache%s (%d kernels)", b->shipped ? " (shipped)" : "", b->n_kernels);
        else
            fprintf(stderr, "in the cache%s (registers and spills unknown: no ptxas report)", b->shipped ? " (shipped)" : "");
    } else {
        p->compiled++;
        if (b->n_kernels > 0)
            fprintf(stderr, "compiled in %.2f s, %d kernels, up to %d registers, %s", b->compile_seconds, b->n_kernels,
                    max_regs, spills ? "SPILLS" : "no spills");
        else /* NVRTC answered from its own cache (CUDA_CACHE_DISABLE=0 was set) */
            fprintf(stderr, "compiled in %.2f s, registers and spills unknown (no ptxas report)", b->compile_seconds);
        if (!b->stored) {
            p->unstored++;
            fprintf(stderr, "; NOT stored: %s", b->store_error);
        }
    }
    if (w->alias_error[0]) { /* only where the entry is in the cache (fg_build_record_alias) */
        p->unaliased++;
        fprintf(stderr, "; plan alias NOT stored: %s", w->alias_error);
    }
    fprintf(stderr, "\n");
    draw_progress(p);
}

static void *worker(void *arg)
{
    pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int i = p->next < p->n ? p->next++ : -1;
        if (i >= 0) { /* each layer as it starts: a compile can take seconds */
            begin_line(p);
            fprintf(stderr, "started %s %s\n", p->items[i].ir->name, p->items[i].arch);
            draw_progress(p);
        }
        pthread_mutex_unlock(&p->lock);
        if (i < 0)
            return NULL;
        work *w = &p->items[i];
        fg_error err;
        if (fg_build_cubin(&p->builder, w->ir, w->source, w->arch, w->plan_key, &w->built, &err) != 0) {
            w->failed = 1;
            snprintf(w->error, sizeof w->error, "%s", err.msg);
        } else if (fg_build_record_alias(&p->builder, w->plan_key, &w->built, &err) != 0) {
            snprintf(w->alias_error, sizeof w->alias_error, "%s", err.msg);
        }
        pthread_mutex_lock(&p->lock);
        report(p, w);
        pthread_cond_signal(&p->finished);
        pthread_mutex_unlock(&p->lock);
    }
}

/* --check: each spec loaded by the runtime on a CPU-only context for each architecture, over
 * the cache build fills (no shipped caches), and each layer's kernels looked up as its first
 * prepare would look them up (fg_tools_layer_cached). */
static int check_cached(const char *cache_dir, const char *dest, char archs[][16], int n_archs, char **paths,
                        const fg_block_ir *specs, int n_specs)
{
    int wanted_all = 0, found_all = 0, rc = EXIT_OK;
    for (int a = 0; a < n_archs && rc == EXIT_OK; a++) {
        fg_context_options opts;
        fg_context_options_init(&opts);
        opts.device = -1;
        opts.arch = archs[a];
        opts.cache_dir = cache_dir;
        opts.cache_path = "";
        fg_context *ctx = NULL;
        if (fg_context_create(&opts, &ctx) != FG_OK) {
            cli_error("%s", fg_last_error());
            return EXIT_FAIL;
        }
        for (int s = 0; s < n_specs && rc == EXIT_OK; s++) {
            fg_layer *single = NULL;
            fg_block *block = NULL;
            const fg_block_ir *spec = &specs[s * n_archs + a]; /* the layer count: the same for any target */
            fg_status st = spec->single ? fg_layer_load_file(ctx, paths[s], &single)
                                        : fg_block_load_file(ctx, paths[s], &block);
            for (int l = 0; l < spec->n_layers && st == FG_OK; l++) {
                fg_layer *layer = single ? single : fg_tools_block_layer(block, l);
                int wanted = 0;
                bool found[2];
                char keys[2][FG_CACHE_KEY_HEX + 1];
                if ((st = fg_tools_layer_cached(layer, &wanted, found, keys)) != FG_OK)
                    break;
                bool all = found[0] && (wanted == 1 || found[1]);
                printf("%-8s %-7s %s:", all ? "cached" : "MISSING", archs[a], fg_tools_layer_ir(layer)->name);
                for (int c = 0; c < wanted; c++) {
                    wanted_all++;
                    found_all += found[c];
                    printf("%s %s %.16s", c ? "; the plan timed against it:" : "",
                           found[c] ? "entry" : "no entry for the plan alias", keys[c]);
                }
                printf("\n");
            }
            if (st != FG_OK) {
                fprintf(stderr, "%s\n", fg_last_error());
                rc = EXIT_FAIL;
            }
            if (single)
                fg_layer_destroy(single);
            if (block)
                fg_block_destroy(block);
        }
        fg_context_destroy(ctx);
    }
    if (rc == EXIT_OK)
        fprintf(stderr, "%d of the %d kernel sets the runtime would load are in %s%s\n", found_all, wanted_all, dest,
                found_all < wanted_all ? ": run fusegen build without --check" : "");
    return rc == EXIT_OK && found_all < wanted_all ? EXIT_FAIL : rc;
}

int cmd_build(int argc, char **argv)
{
    static const struct option longopts[] = {{"help", no_argument, 0, 'h'},
                                             {"arch", required_argument, 0, 'a'},
                                             {"cache", required_argument, 0, 'c'},
                                             {"jobs", required_argument, 0, 'j'},
                                             {"check", no_argument, 0, 'k'},
                                             {0, 0, 0, 0}};
    const char *arch_list = CLI_DEFAULT_ARCHS, *cache_dir = NULL;
    long jobs = sysconf(_SC_NPROCESSORS_ONLN);
    bool check = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "hj:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(usage, stdout);
            return EXIT_OK;
        case 'a':
            arch_list = optarg;
            break;
        case 'c':
            if (cli_parse_dir("build", "--cache", optarg, &cache_dir))
                return EXIT_USAGE;
            break;
        case 'j':
            if ((jobs = cli_parse_positive("build", "-j", optarg, 64)) < 0)
                return EXIT_USAGE;
            break;
        case 'k':
            check = true;
            break;
        default:
            return cli_usage_error("build", "unknown option");
        }
    }
    int n_specs = argc - optind;
    if (n_specs < 1)
        return cli_usage_error("build", "expects at least one SPEC");
    if (n_specs > MAX_SPECS)
        return cli_usage_error("build", "at most %d specs at a time", MAX_SPECS);
    char archs[MAX_ARCHS][16];
    int n_archs = cli_parse_archs(arch_list, archs, MAX_ARCHS);
    if (n_archs < 0)
        return EXIT_USAGE;

    /* NVRTC (CUDA 12.9+) keeps compiled programs in the CUDA compute cache where a driver is
     * present, and a program it serves from there comes without ptxas' report of registers
     * and spills, which build records with each entry. Off unless the user asked for it. */
    setenv("CUDA_CACHE_DISABLE", "1", 0);
    fg_cache cache;
    fg_error err;
    /* build fills one cache completely: entries already in $FUSEGEN_CACHE_PATH do not count */
    if (cli_open_cache(&cache, cache_dir, false) != 0)
        return EXIT_FAIL;
    cache.create_mode = 0755; /* a cache built to be shipped: others read it */
    if (fg_build_identity(&cache.identity, &err) != 0) {
        cli_error("%s", err.msg);
        return EXIT_FAIL;
    }
    int major = cache.identity.nvrtc_major, minor = cache.identity.nvrtc_minor;
    for (int a = 0; a < n_archs; a++) {
        if (fg_nvrtc_check_arch(archs[a], &err) != 0)
            return cli_usage_error("build", "%s", err.msg);
        if (fg_arch_sm(archs[a]) != 80 && fg_arch_sm(archs[a]) != 90)
            fprintf(stderr, "note: %s: NVRTC %d.%d compiles for it, but fusegen's kernels are tested on sm_80 and "
                            "sm_90 or sm_90a (H200) only\n",
                    archs[a], major, minor);
    }

    /* every spec as the runtime loads it for each target: a layer, or a block's layers
     * (docs/spec.md, Blocks; a block's IR may depend on the target), specs[s * n_archs + a] */
    fg_block_ir *specs = calloc((size_t)n_specs * (size_t)n_archs, sizeof *specs);
    fg_plan *plan = malloc(2 * sizeof *plan);
    fg_rendered *srcs = NULL;
    work *items = NULL;
    int rc = EXIT_OK, n_loaded = 0, n_layers = 0, n_items = 0;
    if (!specs || !plan) {
        cli_error("out of memory");
        rc = EXIT_FAIL;
        goto out;
    }
    for (; n_loaded < n_specs * n_archs; n_loaded++) {
        const int s = n_loaded / n_archs, a = n_loaded % n_archs;
        if (cli_load_spec(argv[optind + s], archs[a], &specs[n_loaded]) != 0) {
            rc = EXIT_FAIL;
            goto out;
        }
        if (a == 0)
            n_layers += specs[n_loaded].n_layers;
    }
    if (check) {
        rc = check_cached(cache_dir, cache_dir ? cache_dir : cache.user_dir, archs, n_archs, argv + optind, specs,
                          n_specs);
        goto out;
    }
    /* one source per layer and architecture (the plan depends on the architecture), and a
     * second where the runtime times two plans at the first run (runtime/tuning.h), so that
     * a shipped cache has both */
    int max_items = 2 * n_layers * n_archs;
    srcs = calloc((size_t)max_items, sizeof *srcs);
    items = calloc((size_t)max_items, sizeof *items);
    if (!srcs || !items) {
        cli_error("out of memory");
        rc = EXIT_FAIL;
        goto out;
    }
    double t0 = fg_seconds_now();
    for (int s = 0; s < n_specs; s++) {
        for (int a = 0; a < n_archs; a++) {
            const fg_block_ir *spec = &specs[s * n_archs + a];
            for (int l = 0; l < spec->n_layers; l++) {
                const fg_layer_ir *ir = &spec->layers[l];
                int n_plans = cli_plans_for_cache(ir, archs[a], plan);
                if (n_plans < 0) {
                    rc = EXIT_FAIL;
                    goto out;
                }
                for (int k = 0; k < n_plans; k++) {
                    work *w = &items[n_items];
                    if (fg_render(ir, &plan[k], &srcs[n_items], &err) != 0) {
                        fprintf(stderr, "%s\n", err.msg);
                        rc = EXIT_FAIL;
                        goto out;
                    }
                    fg_plan_key(&cache.identity, ir, &plan[k], archs[a], w->plan_key);
                    w->ir = ir;
                    w->source = srcs[n_items].source;
                    w->arch = archs[a];
                    n_items++;
                }
            }
        }
    }
    pool p = {.items = items,
              .n = n_items,
              .builder = {.cache = &cache, .store_dir = cache_dir, .failed_source_dir = cli_environment()->tmpdir}};
    pthread_mutex_init(&p.lock, NULL);
    pthread_cond_init(&p.finished, NULL);
    p.progress_line = isatty(STDERR_FILENO);
    p.started = t0;
    const char *dest = cache_dir ? cache_dir : cache.user_dir;
    char layers[48] = ""; /* a block's layers each have a kernel set */
    if (n_layers > n_specs)
        snprintf(layers, sizeof layers, " of %d layers", n_layers);
    fprintf(stderr, "building %d kernel set%s (%d spec%s%s x %d arch%s%s, NVRTC %d.%d) into %s with %ld job%s\n",
            p.n, p.n == 1 ? "" : "s", n_specs, n_specs == 1 ? "" : "s", layers, n_archs, n_archs == 1 ? "" : "s",
            p.n > n_layers * n_archs ? ", and the plans timed against another at the first run" : "", major, minor, dest,
            jobs, jobs == 1 ? "" : "s");
    int n_threads = (int)(jobs < p.n ? jobs : p.n);
    pthread_t threads[64];
    if (n_threads > 64)
        n_threads = 64;
    int started = 0;
    for (int i = 0; i < n_threads; i++)
        if (pthread_create(&threads[i], NULL, worker, &p) == 0)
            started++;
    if (started == 0)
        worker(&p);
    /* on a terminal the progress line's clock ticks while compiles run */
    pthread_mutex_lock(&p.lock);
    while (p.done < p.n) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&p.finished, &p.lock, &until);
        draw_progress(&p);
    }
    begin_line(&p);
    pthread_mutex_unlock(&p.lock);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    pthread_cond_destroy(&p.finished);
    pthread_mutex_destroy(&p.lock);
    fprintf(stderr, "done in %.2f s: %d compiled, %d already in the cache, %d failed%s\n", fg_seconds_now() - t0, p.compiled,
            p.cached, p.failed, p.compiled == 0 && p.failed == 0 ? " (nothing to compile)" : "");
    if (p.unstored)
        fprintf(stderr, "warning: %d compiled kernel set%s could not be stored in %s\n", p.unstored,
                p.unstored == 1 ? "" : "s", dest);
    if (p.unaliased) /* not a failure: those layers' first load renders their source first */
        fprintf(stderr, "warning: %d plan alias%s could not be stored in %s\n", p.unaliased,
                p.unaliased == 1 ? "" : "es", dest);
    if (p.failed || p.unstored)
        rc = EXIT_FAIL;
    for (int i = 0; i < p.n; i++)
        fg_built_free(&items[i].built);
out:
    if (srcs)
        for (int s = 0; s < n_items; s++)
            fg_rendered_free(&srcs[s]);
    free(srcs);
    free(items);
    free(plan);
    for (int s = 0; s < n_loaded; s++)
        fg_block_ir_free(&specs[s]);
    free(specs);
    return rc;
}
