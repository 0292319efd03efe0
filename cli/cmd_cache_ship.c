/* SPDX-License-Identifier: Apache-2.0 */
/* fusegen cache export / import: exactly the entries and plan aliases a set of layers needs,
 * as a tar file to ship, and back. The archive is written and read by the system's tar
 * (through posix_spawn, never a shell); fusegen stages it in a private temporary directory,
 * and on import lists it first (regular files and directories with a cache's names only),
 * then verifies every entry and alias before storing it as any other store does. */
#include <errno.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../gen/render.h"
#include "../runtime/kernel_build.h"
#include "cli.h"

extern char **environ;

/* Runs argv (argv[0] found on PATH), its stdout into `out` when not NULL; the exit status. */
static int spawn(char *const argv[], char *out, size_t cap)
{
    int fds[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out && pipe(fds) == 0) {
        posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&fa, fds[0]);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (fds[1] >= 0)
        close(fds[1]);
    size_t got = 0;
    if (out) {
        ssize_t n;
        while (rc == 0 && fds[0] >= 0 && (n = read(fds[0], out + got, cap - 1 - got)) > 0 && got + 1 < cap)
            got += (size_t)n;
        out[got] = '\0';
        if (fds[0] >= 0)
            close(fds[0]);
    }
    if (rc != 0) {
        cli_error("cannot run %s: %s", argv[0], strerror(rc));
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); /* FTW_PHYS: links are removed, not followed */
}

/* A private staging directory under TMPDIR. */
static int make_stage(char *buf, size_t cap, const char *what)
{
    snprintf(buf, cap, "%s/fusegen-%s-XXXXXX", cli_environment()->tmpdir, what);
    if (!mkdtemp(buf)) {
        cli_error("cannot create a temporary directory %s: %s", buf, strerror(errno));
        return -1;
    }
    return 0;
}

/* Copies the entry for (ir, plan, arch) and its plan alias from `cache` into `stage`. */
static int export_one(fg_cache *cache, fg_cache *stage, const fg_layer_ir *ir, const fg_plan *plan, const char *arch)
{
    char plan_key[FG_CACHE_KEY_HEX + 1], key[FG_CACHE_KEY_HEX + 1], options[256], recorded[FG_CACHE_KEY_HEX + 1];
    fg_plan_key(&cache->identity, ir, plan, arch, plan_key);
    fg_nvrtc_options_string(arch, options, sizeof options);
    fg_cache_entry e;
    fg_error err;
    int found = 0;
    if (fg_cache_lookup_alias(cache, plan_key, key) && fg_cache_lookup(cache, key, arch, &e, &err) == 1) {
        fg_describe_origin(e.meta_json, recorded, NULL);
        found = strcmp(recorded, plan_key) == 0;
        if (!found)
            fg_cache_entry_free(&e);
    }
    if (!found) { /* no alias (or one for something else): the source's own key */
        fg_rendered src;
        if (fg_render(ir, plan, &src, &err) != 0) {
            fprintf(stderr, "%s\n", err.msg);
            return -1;
        }
        fg_cache_key(&cache->identity, src.source, src.length, arch, options, key);
        fg_rendered_free(&src);
        found = fg_cache_lookup(cache, key, arch, &e, &err) == 1;
    }
    if (!found) {
        cli_error("%s for %s is not in the cache %s: run fusegen build --arch %s first", ir->name, arch,
                  cache->user_dir, arch);
        return -1;
    }
    fg_describe_origin(e.meta_json, recorded, NULL);
    int rc = fg_cache_store(stage, NULL, key, arch, e.cubin, e.cubin_size, e.meta_json, &err);
    /* the alias only where the entry proves it is this plan's (else an importer would refuse it) */
    if (rc == 0 && strcmp(recorded, plan_key) == 0)
        rc = fg_cache_store_alias(stage, NULL, plan_key, key, &err);
    fg_cache_entry_free(&e);
    if (rc != 0)
        cli_error("%s", err.msg);
    else
        fprintf(stderr, "%s %s: %.16s\n", ir->name, arch, key);
    return rc;
}

int cli_cache_export(fg_cache *cache, const char *arch_list, const char *output, char **specs, int n_specs)
{
    char archs[8][16];
    int n_archs = cli_parse_archs(arch_list, archs, 8);
    if (n_archs < 0)
        return EXIT_USAGE;
    fg_error err;
    if (fg_build_identity(&cache->identity, &err) != 0) {
        cli_error("%s", err.msg);
        return EXIT_FAIL;
    }
    struct stat st; /* like --out: only a regular file is replaced */
    if (lstat(output, &st) == 0 && !S_ISREG(st.st_mode)) {
        cli_error("%s exists and is not a regular file; refusing to replace it", output);
        return EXIT_FAIL;
    }
    char dir[4096];
    if (make_stage(dir, sizeof dir, "export") != 0)
        return EXIT_FAIL;
    fg_cache stage;
    int rc = fg_cache_init(&stage, dir, NULL, &err) != 0 ? (cli_error("%s", err.msg), EXIT_FAIL) : EXIT_OK;
    stage.identity = cache->identity;
    stage.create_mode = 0755;
    fg_block_ir *spec = calloc(1, sizeof *spec);
    fg_plan *plan = malloc(2 * sizeof *plan);
    if (!spec || !plan)
        rc = EXIT_FAIL;
    int exported = 0, n_layers = 0;
    for (int s = 0; s < n_specs && rc == EXIT_OK; s++)
        for (int a = 0; a < n_archs && rc == EXIT_OK; a++) {
            /* a layer, or a block's layers as the runtime loads them for that target */
            if (cli_load_spec(specs[s], archs[a], spec) != 0) {
                rc = EXIT_FAIL;
                break;
            }
            if (a == 0)
                n_layers += spec->n_layers;
            for (int l = 0; l < spec->n_layers && rc == EXIT_OK; l++) {
                /* with the plan the runtime times it against at the first run (runtime/tuning.h),
                 * which `fusegen build` stored too: a shipped cache spares users that compile */
                int n_plans = cli_plans_for_cache(&spec->layers[l], archs[a], plan);
                if (n_plans < 0)
                    rc = EXIT_FAIL;
                for (int k = 0; k < n_plans && rc == EXIT_OK; k++) {
                    if (export_one(cache, &stage, &spec->layers[l], &plan[k], archs[a]) != 0)
                        rc = EXIT_FAIL;
                    else
                        exported++;
                }
            }
            fg_block_ir_free(spec);
        }
    free(spec);
    free(plan);
    if (rc == EXIT_OK) {
        char *const argv[] = {"tar", "-cf", (char *)output, "-C", dir, "--owner=0", "--group=0", "--numeric-owner",
                              ".", NULL};
        if (spawn(argv, NULL, 0) != 0) {
            cli_error("tar could not write %s", output);
            rc = EXIT_FAIL;
        } else {
            char layers[48] = ""; /* a block's layers each have a kernel set */
            if (n_layers > n_specs)
                snprintf(layers, sizeof layers, " of %d layers", n_layers);
            fprintf(stderr, "wrote %s: %d kernel sets (%d specs%s x %d archs%s) with their plan aliases\n", output,
                    exported, n_specs, layers, n_archs,
                    exported > n_layers * n_archs ? ", and the plans timed against another at the first run" : "");
        }
    }
    remove_tree(dir);
    return rc;
}

/* Whether a listed member name is one a cache export holds: ".", "./xx/", "./xx/<key>.fgc|.fgp". */
static bool cache_member(const char *name)
{
    if (!strcmp(name, "./") || !strcmp(name, "."))
        return true;
    if (strncmp(name, "./", 2) != 0 || strlen(name) < 5 || name[4] != '/')
        return false;
    const char *rest = name + 5;
    if (!*rest)
        return true; /* the two-digit directory */
    size_t len = strlen(rest);
    if (len != FG_CACHE_KEY_HEX + 4 || (strcmp(rest + FG_CACHE_KEY_HEX, ".fgc") && strcmp(rest + FG_CACHE_KEY_HEX, ".fgp")))
        return false;
    for (size_t i = 0; i < FG_CACHE_KEY_HEX; i++)
        if (!((rest[i] >= '0' && rest[i] <= '9') || (rest[i] >= 'a' && rest[i] <= 'f')))
            return false;
    return strncmp(rest, name + 2, 2) == 0;
}

/* Lists the archive: only regular files and directories with a cache's names. */
static int check_listing(const char *archive)
{
    static char listing[1 << 20];
    char *const argv[] = {"tar", "-tvf", (char *)archive, NULL};
    if (spawn(argv, listing, sizeof listing) != 0) {
        cli_error("%s: tar cannot list it (not a tar file?)", archive);
        return -1;
    }
    for (char *line = strtok(listing, "\n"); line; line = strtok(NULL, "\n")) {
        const char *name = strrchr(line, ' ');
        name = name ? name + 1 : line;
        if ((line[0] != '-' && line[0] != 'd') || !cache_member(name)) {
            cli_error("%s: refusing the archive: member '%.200s' is not a cache entry, plan alias or their folder",
                      archive, name);
            return -1;
        }
    }
    return 0;
}

typedef struct import_state {
    fg_cache *cache;
    int entries, aliases, refused;
} import_state;

static int import_file(void *ctx, const fg_cache_file *f)
{
    import_state *s = ctx;
    fg_error err;
    if (f->kind == FG_CACHE_ENTRY) {
        fg_cache_entry e;
        if (fg_cache_read_entry(f->path, &(fg_entry_expect){.key = f->key, .version = FUSEGEN_VERSION}, &e, &err) != 0 ||
            fg_cache_store(s->cache, NULL, f->key, e.arch, e.cubin, e.cubin_size, e.meta_json, &err) != 0) {
            s->refused++;
            printf("REFUSED %.16s  %s\n", f->key, err.msg);
        } else {
            s->entries++;
        }
        if (e.cubin)
            fg_cache_entry_free(&e);
    } else if (f->kind == FG_CACHE_REFUSED || f->kind == FG_CACHE_TEMPORARY) {
        s->refused++;
        printf("REFUSED %s\n", f->problem ? f->problem : f->path);
    }
    return 0;
}

static int import_alias(void *ctx, const fg_cache_file *f)
{
    import_state *s = ctx;
    if (f->kind != FG_CACHE_ALIAS)
        return 0;
    char key[FG_CACHE_KEY_HEX + 1], path[1200];
    fg_error err;
    int rc = fg_cache_read_alias(f->path, key, &err);
    if (rc == 0) { /* only an alias whose entry is there (it is verified again when used) */
        fg_cache_entry_path(s->cache->user_dir, key, path, sizeof path);
        if (access(path, F_OK) != 0)
            rc = fg_fail(&err, "the plan alias names entry %.16s..., which is not in the cache", key);
    }
    if (rc == 0)
        rc = fg_cache_store_alias(s->cache, NULL, f->key, key, &err);
    if (rc != 0) {
        s->refused++;
        printf("REFUSED %.16s  %s\n", f->key, err.msg);
    } else {
        s->aliases++;
    }
    return 0;
}

int cli_cache_import(fg_cache *cache, const char *archive)
{
    struct stat st;
    if (stat(archive, &st) != 0 || !S_ISREG(st.st_mode)) {
        cli_error("%s: not a regular file", archive);
        return EXIT_FAIL;
    }
    fg_error err;
    if (check_listing(archive) != 0)
        return EXIT_FAIL;
    if (fg_build_identity(&cache->identity, &err) != 0) {
        cli_error("%s", err.msg);
        return EXIT_FAIL;
    }
    char dir[4096];
    if (make_stage(dir, sizeof dir, "import") != 0)
        return EXIT_FAIL;
    /* extracted files must pass the cache's own trust checks: private, ours */
    mode_t old = umask(077);
    char *const argv[] = {"tar", "-xf", (char *)archive, "-C", dir, "--no-same-owner", "--no-same-permissions", NULL};
    int rc = spawn(argv, NULL, 0);
    umask(old);
    import_state s = {.cache = cache};
    if (rc != 0) {
        cli_error("%s: tar could not extract it", archive);
    } else if (fg_cache_walk_all(dir, import_file, &s, &err) != 0 || fg_cache_walk_all(dir, import_alias, &s, &err) != 0) {
        cli_error("%s", err.msg);
        rc = -1;
    }
    remove_tree(dir);
    if (rc != 0)
        return EXIT_FAIL;
    fprintf(stderr, "imported %d entries and %d plan aliases into %s%s\n", s.entries, s.aliases, cache->user_dir,
            s.refused ? "; some files were refused (above)" : "");
    return s.refused ? EXIT_FAIL : EXIT_OK;
}
