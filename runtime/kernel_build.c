/* SPDX-License-Identifier: Apache-2.0 */
#include "kernel_build.h"

#include "../gen/render.h"
#include "cache_maintenance.h"
#include "../common/clock.h"

#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* cmake/digest.cmake: SHA-256 of the C sources in gen/, which turn (IR, plan) into the
 * templates' input */
extern const char fg_generator_digest[];

int fg_build_identity(fg_cache_identity *id, fg_error *err)
{
    memset(id, 0, sizeof *id);
    if (fg_nvrtc_version(&id->nvrtc_major, &id->nvrtc_minor, err))
        return -1;
    snprintf(id->version, sizeof id->version, "%s", FUSEGEN_VERSION);
    snprintf(id->templates_digest, sizeof id->templates_digest, "%s", fg_templates_digest());
    snprintf(id->generator_digest, sizeof id->generator_digest, "%s", fg_generator_digest);
    return 0;
}

/* Keys need the whole identity: a cache without NVRTC's version cannot name an entry. */
static int check_identity(const fg_cache *cache, fg_error *err)
{
    if (!cache->identity.version[0] || cache->identity.nvrtc_major <= 0)
        return fg_fail(err, "internal error: the cache was given no identity (fg_build_identity)");
    return 0;
}

char *fg_build_describe(const fg_layer_ir *ir, const char *arch, const char *plan_key, const fg_compiled *c)
{
    json_t *root = json_object();
    json_object_set_new(root, "layer", json_string(ir->name));
    if (plan_key)
        json_object_set_new(root, "plan_key", json_string(plan_key));
    json_object_set_new(root, "spec", json_string(ir->file));
    json_object_set_new(root, "arch", json_string(arch));
    json_object_set_new(root, "generator", json_string(FUSEGEN_VERSION));
    json_object_set_new(root, "compile_seconds", json_real(c->seconds));
    json_object_set_new(root, "created", json_integer((json_int_t)time(NULL)));
    json_t *kernels = json_array();
    for (int i = 0; i < c->n_kernels; i++) {
        const fg_kernel_resources *k = &c->kernels[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(k->name));
        json_object_set_new(o, "registers", json_integer(k->registers));
        json_object_set_new(o, "stack_frame", json_integer(k->stack_frame));
        json_object_set_new(o, "spill_stores", json_integer(k->spill_stores));
        json_object_set_new(o, "spill_loads", json_integer(k->spill_loads));
        json_array_append_new(kernels, o);
    }
    json_object_set_new(root, "kernels", kernels);
    char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return s;
}

int fg_describe_parse(const char *json, char *layer, size_t layer_cap, fg_kernel_resources *kernels, int cap)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    if (!root)
        return -1;
    const char *name = json_string_value(json_object_get(root, "layer"));
    if (layer)
        snprintf(layer, layer_cap, "%s", name ? name : "?");
    json_t *arr = json_object_get(root, "kernels");
    int n = 0;
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o)
    {
        if (n == cap)
            break;
        fg_kernel_resources *k = &kernels[n++];
        memset(k, 0, sizeof *k);
        const char *kn = json_string_value(json_object_get(o, "name"));
        snprintf(k->name, sizeof k->name, "%s", kn ? kn : "?");
        k->registers = (int)json_integer_value(json_object_get(o, "registers"));
        k->stack_frame = (int)json_integer_value(json_object_get(o, "stack_frame"));
        k->spill_stores = (int)json_integer_value(json_object_get(o, "spill_stores"));
        k->spill_loads = (int)json_integer_value(json_object_get(o, "spill_loads"));
    }
    json_decref(root);
    return n;
}

int fg_describe_origin(const char *json, char key[FG_CACHE_KEY_HEX + 1], double *compile_seconds)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    const char *k = root ? json_string_value(json_object_get(root, "plan_key")) : NULL;
    if (compile_seconds)
        *compile_seconds = root ? json_number_value(json_object_get(root, "compile_seconds")) : 0;
    int rc = k && strlen(k) == FG_CACHE_KEY_HEX ? 0 : -1;
    key[0] = '\0';
    if (rc == 0)
        memcpy(key, k, FG_CACHE_KEY_HEX + 1);
    json_decref(root);
    return rc;
}

/* 1 with `out` holding the entry's cubin and resources when `key` is in the caches (and,
 * when reached through a plan alias, the entry records exactly that `plan_key`), 0 when not,
 * -1 on an error. */
static int lookup_entry(fg_cache *cache, const char *key, const char *arch, const fg_layer_ir *ir,
                        const char *plan_key, fg_built *out, fg_error *err)
{
    fg_cache_entry entry;
    int found = fg_cache_lookup(cache, key, arch, &entry, err);
    if (found <= 0)
        return found;
    out->n_kernels = fg_describe_parse(entry.meta_json, NULL, 0, out->kernels, FG_MAX_KERNELS);
    if (out->n_kernels < 0)
        out->n_kernels = 0;
    fg_describe_origin(entry.meta_json, out->plan_key, &out->compile_seconds);
    free(entry.meta_json);
    /* An alias only points; the entry proves what it was built for. One for another layer or
     * another shape of this one (same name) would run kernels on the wrong sizes. */
    if (plan_key && strcmp(out->plan_key, plan_key) != 0) {
        fg_cache_warn(cache, "ignoring the plan alias %.16s... of layer %s: its entry %.16s... was built for %s", plan_key,
                      ir->name, key, out->plan_key[0] ? "another layer or shape" : "no recorded layer and shape");
        free(entry.cubin);
        out->n_kernels = 0;
        return 0;
    }
    out->cubin = entry.cubin;
    out->cubin_size = entry.cubin_size;
    out->from_cache = true;
    out->shipped = entry.shipped;
    return 1;
}

/* The caches to look in: `fusegen build --cache DIR` looks in DIR (its own output) as well. */
static int lookup_caches(const fg_cache *cache, const char *store_dir, fg_cache *lookup, fg_error *err)
{
    *lookup = *cache;
    if (store_dir && strlen(store_dir) >= sizeof lookup->user_dir) /* truncated, it would name another */
        return fg_fail(err, "the cache directory's path is too long (%zu bytes; at most %zu)", strlen(store_dir),
                       sizeof lookup->user_dir - 1);
    if (store_dir)
        snprintf(lookup->user_dir, sizeof lookup->user_dir, "%s", store_dir);
    return 0;
}

int fg_build_cubin(const fg_builder *b, const fg_layer_ir *ir, const char *source, const char *arch,
                   const char *plan_key, fg_built *out, fg_error *err)
{
    fg_cache *cache = b->cache;
    const char *store_dir = b->store_dir;
    memset(out, 0, sizeof *out);
    if (check_identity(cache, err))
        return -1;
    char options[256];
    fg_nvrtc_options_string(arch, options, sizeof options);
    fg_cache_key(&cache->identity, source, strlen(source), arch, options, out->key);

    fg_cache lookup;
    if (lookup_caches(cache, store_dir, &lookup, err))
        return -1;
    int found = lookup_entry(&lookup, out->key, arch, ir, NULL, out, err);
    if (found != 0) {
        if (found > 0 && !store_dir)
            fg_cache_stats_record(cache->user_dir, true, out->compile_seconds);
        return found < 0 ? -1 : 0;
    }

    char name[FG_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s.cu", ir->name);
    fg_compiled c;
    /* an architecture this NVRTC does not know fails here, not inside NVRTC (which left the
     * source in TMPDIR) */
    if (fg_nvrtc_check_arch(arch, err) || fg_nvrtc_compile(source, name, arch, b->failed_source_dir, &c, err))
        return -1;
    out->cubin = c.cubin;
    out->cubin_size = c.size;
    out->compile_seconds = c.seconds;
    out->n_kernels = c.n_kernels;
    memcpy(out->kernels, c.kernels, sizeof c.kernels);
    char *meta = fg_build_describe(ir, arch, plan_key, &c);
    if (plan_key)
        snprintf(out->plan_key, sizeof out->plan_key, "%s", plan_key);
    fg_error store_err;
    if (!meta) {
        snprintf(out->store_error, sizeof out->store_error, "out of memory describing the entry");
    } else if (fg_cache_store(cache, store_dir, out->key, arch, c.cubin, c.size, meta, &store_err) == 0) {
        out->stored = true;
        if (!store_dir && cache->max_bytes) { /* keep the user cache under its cap: least recently used go */
            fg_prune_options cap = {.max_bytes = cache->max_bytes, .temporaries_after = -1, .now = time(NULL)};
            fg_prune_result pruned;
            fg_error prune_err;
            if (fg_cache_prune(cache->user_dir, &cap, &pruned, &prune_err) != 0)
                fg_cache_warn(cache, "cannot keep the cache under its size: %s", prune_err.msg);
        }
    } else {
        snprintf(out->store_error, sizeof out->store_error, "%s", store_err.msg);
    }
    free(meta);
    if (!store_dir) /* after the store: the first one creates the cache */
        fg_cache_stats_record(cache->user_dir, false, c.seconds);
    return 0;
}

void fg_plan_key(const fg_cache_identity *id, const fg_layer_ir *ir, const fg_plan *plan, const char *arch,
                 char key[FG_CACHE_KEY_HEX + 1])
{
    char options[256];
    fg_nvrtc_options_string(arch, options, sizeof options);
    /* the IR around the spec's path, which is only for messages (the source never names it),
     * then the plan */
    const size_t before = offsetof(fg_layer_ir, file), after = before + sizeof ir->file;
    const void *parts[] = {ir, (const char *)ir + after, plan};
    const size_t sizes[] = {before, sizeof *ir - after, sizeof *plan};
    fg_cache_plan_key(id, parts, sizes, 3, arch, options, key);
}

int fg_build_record_alias(const fg_builder *builder, const char *plan_key, const fg_built *b, fg_error *err)
{
    if (!b->from_cache && !b->stored)
        return 0; /* no entry to point at */
    if (strcmp(b->plan_key, plan_key) != 0)
        return 0; /* the entry records another (IR, plan), or none: an alias to it would be refused */
    return fg_cache_store_alias(builder->cache, builder->store_dir, plan_key, b->key, err);
}

int fg_build_find(const fg_builder *b, const fg_layer_ir *ir, const fg_plan *plan, const char *arch, fg_built *out,
                  fg_error *err)
{
    memset(out, 0, sizeof *out);
    char key[FG_CACHE_KEY_HEX + 1];
    fg_cache lookup;
    if (check_identity(b->cache, err) || lookup_caches(b->cache, b->store_dir, &lookup, err))
        return -1;
    fg_plan_key(&b->cache->identity, ir, plan, arch, out->plan_key);
    if (!fg_cache_lookup_alias(&lookup, out->plan_key, key))
        return 0;
    char plan_key[FG_CACHE_KEY_HEX + 1];
    memcpy(plan_key, out->plan_key, sizeof plan_key);
    int found = lookup_entry(&lookup, key, arch, ir, plan_key, out, err);
    if (found > 0)
        memcpy(out->key, key, sizeof out->key);
    else /* lookup_entry left there the plan key the entry records, if any */
        memcpy(out->plan_key, plan_key, sizeof out->plan_key);
    return found;
}

int fg_build_layer(const fg_builder *b, const fg_layer_ir *ir, const fg_plan *plan, const char *arch, fg_built *out,
                   fg_error *err)
{
    fg_cache *cache = b->cache;
    const char *store_dir = b->store_dir;
    int found = fg_build_find(b, ir, plan, arch, out, err);
    if (found < 0)
        return -1;
    if (found) {
        if (!store_dir)
            fg_cache_stats_record(cache->user_dir, true, out->compile_seconds);
        return 0;
    }
    char plan_key[FG_CACHE_KEY_HEX + 1];
    memcpy(plan_key, out->plan_key, sizeof plan_key);
    /* no alias, or it names an entry that is gone or bad: render */
    double t0 = fg_seconds_now();
    fg_rendered src;
    if (fg_render(ir, plan, &src, err) != 0)
        return -1;
    double render_seconds = fg_seconds_now() - t0;
    int rc = fg_build_cubin(b, ir, src.source, arch, plan_key, out, err);
    fg_rendered_free(&src);
    if (rc != 0)
        return -1;
    out->rendered = true;
    out->render_seconds = render_seconds;
    /* The alias goes where the entry would be stored (the user cache, or store_dir). Failing
     * that is only worth a warning for an entry just stored there: a cache that the entry
     * was found in may be read-only on purpose. */
    fg_error alias_err;
    if (fg_build_record_alias(b, plan_key, out, &alias_err) != 0 && out->stored)
        fg_cache_warn(cache, "cannot record the plan alias (the next load renders again): %s", alias_err.msg);
    return 0;
}

void fg_built_free(fg_built *b)
{
    if (b) {
        free(b->cubin);
        b->cubin = NULL;
    }
}
