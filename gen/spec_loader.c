/* SPDX-License-Identifier: Apache-2.0 */
#include "spec_loader.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <sys/stat.h>
#include <unistd.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_registry.h"
#include "block.h"
#include "planner.h"
#include "shape_infer.h"

/* ---- The constructors a spec can call: the op registry's (op_registry.h) ------------------ */

/* What a spec sees besides the constructors: a few pure functions of Lua's base and math
 * libraries, and the layer's own fields. */
/* (and `tostring`: pure_tostring, which prints no addresses) */
static const char *const base_funcs[] = {"ipairs", "pairs", "next", "type", "tonumber", "select", "error", "assert"};
static const char *const math_funcs[] = {"abs", "ceil", "floor", "max", "min", "sqrt",
                                         "fmod", "tointeger", "huge", "pi", "maxinteger"};
static const char *const layer_fields[] = {"input", "precision", "strategy", "dtype", "layout"};
static const char *const precisions[] = {"fp32", "tf32"};
static const char *const dtypes[] = {"fp32", "bf16", "fp16"}; /* in fg_dtype's order */
static const char *const layouts[] = {"nchw", "channels_last"}; /* in fg_layout's order */
static const char *const strategies[] = {"auto", "materialize", "recompute", "resident"};
#define COUNT(a) (int)(sizeof(a) / sizeof *(a))

/* Registry keys. Op and layer records live in registry tables the spec cannot reach, keyed
 * by the (empty) handle tables the constructors return, so a spec cannot forge an op. */
static const char REG_OPS[] = "fusegen.ops";
static const char REG_CTORS[] = "fusegen.ctors";

static int current_line(lua_State *L)
{
    lua_Debug ar;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "l", &ar))
        return ar.currentline;
    return 0;
}

/* Records {kind=name, line=N, args=tbl} under a new handle and returns the handle. */
static int record(lua_State *L, const char *kind, int args_index, int line)
{
    lua_getfield(L, LUA_REGISTRYINDEX, REG_OPS);
    lua_newtable(L); /* handle */
    lua_pushvalue(L, -1);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
    lua_pushinteger(L, line);
    lua_setfield(L, -2, "line");
    lua_pushvalue(L, args_index);
    lua_setfield(L, -2, "args");
    lua_rawset(L, -4);
    return 1;
}

static int op_constructor(lua_State *L)
{
    const char *name = lua_tostring(L, lua_upvalueindex(1));
    int line = current_line(L);
    if (lua_gettop(L) == 0) {
        lua_newtable(L); /* relu() */
    } else if (lua_isnil(L, 1)) {
        lua_newtable(L);
        lua_replace(L, 1);
    }
    if (!lua_istable(L, 1))
        return luaL_error(L, "%s expects a table of fields: write %s { ... } (got a %s)", name, name,
                          luaL_typename(L, 1));
    lua_settop(L, 1);
    return record(L, name, 1, line);
}

/* `layer "NAME" { ... }` and `block "NAME" { ... }`: the constructor takes the name
 * (upvalue 1: the kind) and returns the body's constructor (upvalues: the name, the kind),
 * which records the table. */
static int named_body(lua_State *L)
{
    int line = current_line(L);
    const char *name = lua_tostring(L, lua_upvalueindex(1)), *kind = lua_tostring(L, lua_upvalueindex(2));
    if (!lua_istable(L, 1))
        return luaL_error(L, "%s \"%s\" expects a table: %s \"%s\" { input = {...}, %s }", kind, name, kind, name,
                          strcmp(kind, "block") == 0 ? "layer \"a\" { ... }, ..." : "...");
    lua_settop(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_setfield(L, 1, "\1name"); /* a key no spec field can spell */
    return record(L, kind, 1, line);
}

static int named_constructor(lua_State *L)
{
    const char *kind = lua_tostring(L, lua_upvalueindex(1));
    if (lua_type(L, 1) != LUA_TSTRING)
        return luaL_error(L, "%s expects a name first: return %s \"my_%s\" { ... }", kind, kind, kind);
    lua_settop(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushcclosure(L, named_body, 2);
    return 1;
}

/* The environment is an empty proxy: names resolve through this __index to the table of
 * constructors and helpers (its upvalue), so that every assignment to a global, even one
 * to an existing name such as `relu = 5`, reaches __newindex and is refused. Reading a
 * global the spec never defined is almost always a misspelt constructor. */
static int env_index(lua_State *L)
{
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
        return 1;
    lua_pop(L, 1);
    const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (!key)
        return 0;
    int n_names;
    const char *const *names = fg_constructor_names(&n_names);
    const char *near = fg_nearest_name(key, names, n_names);
    if (near)
        return luaL_error(L, "unknown name '%s' (did you mean '%s'?)", key, near);
    return luaL_error(L, "unknown name '%s': a spec can use only fusegen's constructors, "
                         "plain tables, numbers and strings", key);
}

static int env_newindex(lua_State *L)
{
    return luaL_error(L, "a spec cannot set global '%s': use a local", luaL_optstring(L, 2, "?"));
}

/* tostring for specs: a spec is a pure function of its text, so a value whose printed form
 * is an address (a table, a function such as `relu`, a thread) prints as its type alone;
 * Lua's own tostring would put heap and code addresses into layer names, and so into cache
 * keys and files. Numbers, strings, booleans and nil print as in Lua. */
static int pure_tostring(lua_State *L)
{
    luaL_checkany(L, 1);
    switch (lua_type(L, 1)) {
    case LUA_TNUMBER:
    case LUA_TSTRING:
    case LUA_TBOOLEAN:
    case LUA_TNIL:
        luaL_tolstring(L, 1, NULL);
        break;
    default:
        lua_pushstring(L, luaL_typename(L, 1));
        break;
    }
    return 1;
}

/* Builds the spec's environment and leaves it on the stack. */
static void push_environment(lua_State *L)
{
    /* The base and math libraries are opened only to copy a few pure functions out of
     * them; the spec never sees the global table. */
    luaL_requiref(L, "_G", luaopen_base, 1);
    lua_pop(L, 1);
    luaL_requiref(L, "math", luaopen_math, 1);
    lua_pop(L, 1);

    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, REG_OPS);
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, REG_CTORS);

    lua_newtable(L); /* env */
    for (size_t i = 0; i < sizeof base_funcs / sizeof *base_funcs; i++) {
        lua_getglobal(L, base_funcs[i]);
        lua_setfield(L, -2, base_funcs[i]);
    }
    lua_pushcfunction(L, pure_tostring);
    lua_setfield(L, -2, "tostring");
    lua_newtable(L);
    lua_getglobal(L, "math");
    for (size_t i = 0; i < sizeof math_funcs / sizeof *math_funcs; i++) {
        lua_getfield(L, -1, math_funcs[i]);
        lua_setfield(L, -3, math_funcs[i]);
    }
    lua_pop(L, 1);
    lua_setfield(L, -2, "math");

    lua_getfield(L, LUA_REGISTRYINDEX, REG_CTORS);
    int n_names;
    const char *const *names = fg_constructor_names(&n_names);
    for (int i = 2; i < n_names; i++) { /* names[0] and [1] are "layer" and "block" */
        lua_pushstring(L, names[i]);
        lua_pushcclosure(L, op_constructor, 1);
        lua_pushvalue(L, -1);
        lua_setfield(L, -4, names[i]);
        lua_pushstring(L, names[i]);
        lua_rawset(L, -3); /* ctors[function] = name, to accept a bare `relu` */
    }
    lua_pop(L, 1);
    for (int i = 0; i < 2; i++) { /* names[0] and [1] */
        lua_pushstring(L, names[i]);
        lua_pushcclosure(L, named_constructor, 1);
        lua_setfield(L, -2, names[i]);
    }

    /* Drop the global table's contents: nothing reachable from a function the spec holds
     * (pairs' upvalues and so on) leads back to io/os/load. */
    lua_pushglobaltable(L);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_pushnil(L);
        lua_rawset(L, -4);
    }
    lua_pop(L, 1);

    lua_newtable(L); /* the proxy the spec sees as its environment */
    lua_createtable(L, 0, 3); /* its metatable */
    lua_pushvalue(L, -3);     /* the names, as __index's upvalue */
    lua_pushcclosure(L, env_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, env_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_remove(L, -2); /* the names stay reachable through the proxy's metatable only */
}

/* ---- Walking the returned layer --------------------------------------------------------- */

typedef struct walk_ctx {
    fg_layer_ir *ir;
    fg_block_ir *block;     /* the block being read, NULL for a layer spec */
    /* per layer of the block, in the spec's order: `from` as written, "" when absent */
    char from[FG_MAX_BLOCK_LAYERS][FG_NAME_MAX];
    char output[FG_NAME_MAX];
    const char *file;
    int result_ref;
    /* the op being read, for messages */
    const char *op_name;
    int op_line;
} walk_ctx;

static int raise(lua_State *L, walk_ctx *w, int line, const char *fmt, ...) FG_PRINTF(4, 5);
static int raise(lua_State *L, walk_ctx *w, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return luaL_error(L, "%s:%d: %s", w->file, line, msg);
}

#define FIELD_FAIL(L, w, field, ...)                                                               \
    do {                                                                                           \
        char fmsg_[512];                                                                           \
        snprintf(fmsg_, sizeof fmsg_, __VA_ARGS__);                                                \
        raise(L, w, (w)->op_line, "%s: field '%s' %s", (w)->op_name, field, fmsg_);                \
    } while (0)

/* Pushes args[field] (raw) and returns whether it is present. */
static bool get_field(lua_State *L, int args, const char *field)
{
    lua_pushstring(L, field);
    lua_rawget(L, args);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return false;
    }
    return true;
}

static int64_t to_integer(lua_State *L, walk_ctx *w, int idx, const char *field, int64_t lo, int64_t hi)
{
    int isnum = 0;
    /* lua_tointegerx also converts numeric strings: "3" is a mistake, not a number */
    lua_Integer v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &isnum) : 0;
    if (!isnum) {
        if (lua_type(L, idx) == LUA_TNUMBER)
            FIELD_FAIL(L, w, field, "must be a whole number (got %g)", lua_tonumber(L, idx));
        FIELD_FAIL(L, w, field, "must be a whole number (got a %s)", luaL_typename(L, idx));
    }
    if (v < lo || v > hi)
        FIELD_FAIL(L, w, field, "must be between %lld and %lld (got %lld)", (long long)lo, (long long)hi,
                   (long long)v);
    return v;
}

static int64_t opt_integer(lua_State *L, walk_ctx *w, int args, const char *field, int64_t def, int64_t lo,
                           int64_t hi, bool required)
{
    if (!get_field(L, args, field)) {
        if (required)
            FIELD_FAIL(L, w, field, "is required");
        return def;
    }
    int64_t v = to_integer(L, w, -1, field, lo, hi);
    lua_pop(L, 1);
    return v;
}

static double opt_number(lua_State *L, walk_ctx *w, int args, const char *field, double def, bool *given)
{
    if (given)
        *given = false;
    if (!get_field(L, args, field))
        return def;
    if (lua_type(L, -1) != LUA_TNUMBER)
        FIELD_FAIL(L, w, field, "must be a number (got a %s)", luaL_typename(L, -1));
    double v = lua_tonumber(L, -1);
    if (!isfinite(v))
        FIELD_FAIL(L, w, field, "must be a finite number (got %g)", v);
    lua_pop(L, 1);
    if (given)
        *given = true;
    return v;
}

static bool opt_bool(lua_State *L, walk_ctx *w, int args, const char *field, bool def)
{
    if (!get_field(L, args, field))
        return def;
    if (!lua_isboolean(L, -1))
        FIELD_FAIL(L, w, field, "must be true or false (got a %s)", luaL_typename(L, -1));
    bool v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* A name bound to a state_dict key or a value: printable, no path separators. */
static void check_name(lua_State *L, walk_ctx *w, const char *field, const char *s, size_t len)
{
    if (len == 0)
        FIELD_FAIL(L, w, field, "must not be empty");
    if (len >= FG_NAME_MAX)
        FIELD_FAIL(L, w, field, "is too long (%zu characters, at most %d)", len, FG_NAME_MAX - 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            FIELD_FAIL(L, w, field, "must not contain control characters");
        if (c == '/' || c == '\\')
            FIELD_FAIL(L, w, field, "must not contain path separators ('%s')", s);
        if (c == '"' || c == '\'' || c > 0x7e)
            FIELD_FAIL(L, w, field, "must be plain ASCII without quotes ('%s')", s);
    }
}

static bool opt_name(lua_State *L, walk_ctx *w, int args, const char *field, char *out)
{
    if (!get_field(L, args, field))
        return false;
    if (lua_type(L, -1) != LUA_TSTRING)
        FIELD_FAIL(L, w, field, "must be a string (got a %s)", luaL_typename(L, -1));
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    check_name(L, w, field, s, len);
    memcpy(out, s, len + 1);
    lua_pop(L, 1);
    return true;
}

/* One of `choices`; returns its index, or def when absent. */
static int opt_choice(lua_State *L, walk_ctx *w, int args, const char *field, const char *const *choices,
                      int n, int def)
{
    if (!get_field(L, args, field))
        return def;
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, choices[i]) == 0) {
            lua_pop(L, 1);
            return i;
        }
    char list[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "", choices[i]);
    FIELD_FAIL(L, w, field, "must be one of %s", list);
    return def;
}

/* Whether the table on top of the stack has no keys but 1..n: a list with holes or extra keys
 * is a mistake, not a shorter list. */
static bool plain_list(lua_State *L, int n)
{
    int count = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        count++;
    }
    return count == n;
}

/* An integer or a list of up to `maxn` integers; returns how many were given (0: absent). */
static int opt_int_list(lua_State *L, walk_ctx *w, int args, const char *field, int maxn, int64_t lo,
                        int64_t hi, int64_t *out)
{
    if (!get_field(L, args, field))
        return 0;
    int n;
    if (lua_type(L, -1) == LUA_TNUMBER) {
        out[0] = to_integer(L, w, -1, field, lo, hi);
        n = 1;
    } else if (lua_istable(L, -1)) {
        lua_Unsigned len = lua_rawlen(L, -1);
        if (len == 0 || len > (lua_Unsigned)maxn)
            FIELD_FAIL(L, w, field, "must be a number or a list of 1 to %d numbers (got a list of %llu)", maxn,
                       (unsigned long long)len);
        n = (int)len;
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, -1, i + 1);
            out[i] = to_integer(L, w, -1, field, lo, hi);
            lua_pop(L, 1);
        }
        if (!plain_list(L, n))
            FIELD_FAIL(L, w, field, "must be a plain list of numbers");
    } else {
        FIELD_FAIL(L, w, field, "must be a number or a list of numbers (got a %s)", luaL_typename(L, -1));
        n = 0;
    }
    lua_pop(L, 1);
    return n;
}

static void opt_spatial(lua_State *L, walk_ctx *w, int args, const char *field, int def, int64_t lo,
                        int *values, int *count)
{
    int64_t v[3];
    int n = opt_int_list(L, w, args, field, 3, lo, 1 << 20, v);
    *count = n;
    for (int i = 0; i < 3; i++)
        values[i] = n == 0 ? def : (int)(n == 1 ? v[0] : (i < n ? v[i] : 0));
}

/* The kinds a constructor makes (several share one: max reduces with `dim`, is elementwise
 * with an operand), with the spatial dims an alias fixes (max_pool2d). */
typedef struct ctor_kinds {
    int n;
    fg_op_kind kinds[3];
    int spatial;
    int alias; /* 0: the op's own name; i + 1: its alias i */
} ctor_kinds;

static ctor_kinds kinds_of(const char *ctor)
{
    ctor_kinds c = {0};
    for (int k = 0; k < FG_OP_KIND_COUNT && c.n < 3; k++) {
        const fg_op_def *d = &fg_op_defs[k];
        bool match = strcmp(d->name, ctor) == 0;
        for (int a = 0; a < 2 && d->aliases[a].name && !match; a++)
            if (strcmp(d->aliases[a].name, ctor) == 0) {
                match = true;
                c.spatial = d->aliases[a].spatial;
                c.alias = a + 1;
            }
        if (match)
            c.kinds[c.n++] = (fg_op_kind)k;
    }
    return c;
}

/* The spec fields a registry field stands for (DIMS "dims" takes `dim` or `dims`, an
 * OPERAND `scalar`, `param`, `shape` or `value`). */
static int spec_fields_of(const fg_field *f, const char **out)
{
    if (f->type == FG_FIELD_OPERAND) {
        out[0] = "scalar", out[1] = "param", out[2] = "shape", out[3] = "value", out[4] = "tensor";
        return 5;
    }
    if (f->type == FG_FIELD_DIMS && strcmp(f->name, "dims") == 0) {
        out[0] = "dim", out[1] = "dims";
        return 2;
    }
    out[0] = f->name;
    return 1;
}

/* The spec fields of a kind, in the registry's order; returns how many. */
static int known_fields(fg_op_kind kind, const char **out, int cap)
{
    int n = 0;
    const fg_op_def *d = &fg_op_defs[kind];
    for (int i = 0; i < FG_MAX_FIELDS && d->fields[i].name; i++) {
        const char *names[5];
        int m = spec_fields_of(&d->fields[i], names);
        for (int j = 0; j < m && n < cap; j++)
            out[n++] = names[j];
    }
    return n;
}

static bool listed(const char *name, const char *const *list, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i], name) == 0)
            return true;
    return false;
}

/* Unknown fields: report the first with the nearest known one. */
static void check_fields(lua_State *L, walk_ctx *w, int args, const char *ctor, const ctor_kinds *ck)
{
    const char *known[40];
    int n = 0;
    for (int i = 0; i < ck->n; i++) {
        const char *fields[32];
        int m = known_fields(ck->kinds[i], fields, 32);
        for (int j = 0; j < m; j++)
            if (!listed(fields[j], known, n))
                known[n++] = fields[j];
    }
    known[n++] = "as";
    lua_pushnil(L);
    while (lua_next(L, args)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) {
            raise(L, w, w->op_line, "%s: fields must be named (found a %s key: write name = value)", ctor,
                  luaL_typename(L, -1));
        }
        const char *key = lua_tostring(L, -1);
        if (!listed(key, known, n)) {
            const char *near = fg_nearest_name(key, known, n);
            char list[512] = "";
            for (int i = 0; i < n; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", known[i]);
            if (near)
                raise(L, w, w->op_line, "%s: unknown field '%s' (did you mean '%s'?)", ctor, key, near);
            raise(L, w, w->op_line, "%s: unknown field '%s' (known fields: %s)", ctor, key, list);
        }
    }
}

/* A number a kernel will hold as a float: finite, within fp32's range, and not so small that
 * it would silently become 0 (values in between round to the nearest float, as PyTorch
 * rounds a Python float applied to an fp32 tensor). */
static double check_fp32(lua_State *L, walk_ctx *w, const char *field, double v, fg_number_rule rule)
{
    if (fabs(v) > FLT_MAX)
        FIELD_FAIL(L, w, field, "is outside fp32's range (got %g; the largest float is %g)", v, (double)FLT_MAX);
    if (v != 0 && (float)v == 0.0f)
        FIELD_FAIL(L, w, field, "rounds to 0 in fp32 (got %g; the smallest float is %g)", v, (double)FLT_TRUE_MIN);
    if (rule == FG_NUMBER_POSITIVE && !(v > 0))
        FIELD_FAIL(L, w, field, "must be positive (got %g)", v);
    if (rule == FG_NUMBER_NONZERO && v == 0)
        FIELD_FAIL(L, w, field, "must not be zero");
    return v;
}

static void read_dims(lua_State *L, walk_ctx *w, int args, fg_op *op, bool required, const char *doc)
{
    int64_t v[FG_MAX_RANK];
    bool has_dim = get_field(L, args, "dim");
    if (has_dim)
        lua_pop(L, 1);
    bool has_dims = get_field(L, args, "dims");
    if (has_dims)
        lua_pop(L, 1);
    if (has_dim && has_dims)
        FIELD_FAIL(L, w, "dims", "cannot be given together with 'dim'");
    if (!has_dim && !has_dims) {
        if (required)
            FIELD_FAIL(L, w, "dim", "is required (%s)", doc);
        return;
    }
    const char *field = has_dim ? "dim" : "dims";
    op->n_dims = opt_int_list(L, w, args, field, FG_MAX_RANK, -FG_MAX_RANK, FG_MAX_RANK, v);
    for (int i = 0; i < op->n_dims; i++)
        op->dims[i] = (int)v[i];
}

static void read_operand(lua_State *L, walk_ctx *w, int args, fg_op *op)
{
    int given = 0;
    bool has_scalar = false;
    op->scalar = opt_number(L, w, args, "scalar", 0, &has_scalar);
    if (has_scalar) {
        check_fp32(L, w, "scalar", op->scalar, FG_NUMBER_ANY);
        op->operand = FG_OPERAND_SCALAR;
        given++;
    }
    if (opt_name(L, w, args, "param", op->param_name)) {
        op->operand = FG_OPERAND_PARAM;
        given++;
    }
    if (opt_name(L, w, args, "value", op->value_name)) {
        op->operand = FG_OPERAND_VALUE;
        given++;
    }
    char tensor[FG_NAME_MAX];
    if (opt_name(L, w, args, "tensor", tensor)) {
        if (!w->block)
            FIELD_FAIL(L, w, "tensor", "names a tensor of a block ('%s'): only the layers of a block { ... } read "
                                       "other tensors; in a layer, use value = \"<name given with as>\"",
                       tensor);
        /* a batched parameter of the layer, resolved by the block loader (gen/block.h) */
        op->operand = FG_OPERAND_PARAM;
        op->tensor_operand = true;
        snprintf(op->param_name, sizeof op->param_name, "%s", tensor);
        given++;
    }
    if (given != 1)
        raise(L, w, w->op_line, "%s: give exactly one operand: scalar = <number>, param = \"<state_dict key>\" "
                                "or value = \"<name given with as>\"%s (%d given)",
              w->op_name, w->block ? " or tensor = \"<block tensor>\"" : "", given);
    int64_t shape[FG_MAX_RANK];
    int n = opt_int_list(L, w, args, "shape", FG_MAX_RANK, 1, INT32_MAX, shape);
    if (n && (op->operand != FG_OPERAND_PARAM || op->tensor_operand))
        FIELD_FAIL(L, w, "shape", "applies only to a param operand");
    op->param_rank = n;
    for (int i = 0; i < n; i++)
        op->param_dim[i] = shape[i];
}

/* A shape as view writes it: "N" (the batch) or -1 first, then extents >= 1, one of them
 * -1 at most (-1 first counts); shape inference checks it against the value. */
static int read_shape(lua_State *L, walk_ctx *w, int args, const char *field, int64_t *out)
{
    if (!get_field(L, args, field))
        return 0;
    if (!lua_istable(L, -1))
        FIELD_FAIL(L, w, field, "must be a list like { \"N\", 64, -1 } (got a %s)", luaL_typename(L, -1));
    lua_Unsigned len = lua_rawlen(L, -1);
    if (len == 0 || len > FG_MAX_RANK)
        FIELD_FAIL(L, w, field, "must have 1 to %d entries, the batch first (got %llu)", FG_MAX_RANK,
                   (unsigned long long)len);
    int n = (int)len, inferred = -1;
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, -1, i + 1);
        if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "N") == 0) {
            if (i > 0)
                FIELD_FAIL(L, w, field, "has \"N\" at entry %d: the batch can only come first", i + 1);
            out[i] = FG_VIEW_BATCH;
        } else if (i == 0 && !(lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) == -1)) {
            FIELD_FAIL(L, w, field, "must start with \"N\" (or -1 standing for it): the batch size is a run-time "
                                    "argument and stays dim 0");
        } else {
            out[i] = to_integer(L, w, -1, field, -1, INT32_MAX);
            if (out[i] == 0)
                FIELD_FAIL(L, w, field, "has 0 at entry %d: every extent must be positive (or one -1)", i + 1);
            if (out[i] == -1) {
                if (inferred >= 0)
                    FIELD_FAIL(L, w, field, "has -1 at entries %d and %d: only one extent can be inferred",
                               inferred + 1, i + 1);
                inferred = i;
            }
        }
        lua_pop(L, 1);
    }
    if (!plain_list(L, n))
        FIELD_FAIL(L, w, field, "must be a plain list");
    lua_pop(L, 1);
    return n;
}

/* Which of the kinds sharing a constructor the spec means: the one whose selector fields it
 * gives, else the one that has none. A field of the other kind given along with the
 * selectors is a mistake worth its own message. */
static fg_op_kind choose_kind(lua_State *L, walk_ctx *w, int args, const ctor_kinds *ck)
{
    fg_op_kind plain = ck->kinds[0];
    int selected = -1;
    for (int i = 0; i < ck->n; i++) {
        const fg_op_def *d = &fg_op_defs[ck->kinds[i]];
        if (!d->selectors[0]) {
            plain = ck->kinds[i];
            continue;
        }
        for (int j = 0; j < 3 && d->selectors[j]; j++)
            if (get_field(L, args, d->selectors[j])) {
                lua_pop(L, 1);
                selected = (int)ck->kinds[i];
            }
    }
    if (selected < 0)
        return plain;
    const char *mine[32], *theirs[32];
    int n_mine = known_fields((fg_op_kind)selected, mine, 32);
    for (int i = 0; i < ck->n; i++) {
        if ((int)ck->kinds[i] == selected)
            continue;
        int n = known_fields(ck->kinds[i], theirs, 32);
        for (int j = 0; j < n; j++)
            if (!listed(theirs[j], mine, n_mine) && get_field(L, args, theirs[j]))
                FIELD_FAIL(L, w, theirs[j], "cannot be combined with %s", fg_op_defs[selected].conflict_hint);
    }
    return (fg_op_kind)selected;
}

/* Reads one registry field into the op. */
static void read_field(lua_State *L, walk_ctx *w, int args, const fg_field *f, fg_op *op)
{
    char *base = (char *)op;
    if (f->required && f->type != FG_FIELD_DIMS && f->type != FG_FIELD_OPERAND && !get_field(L, args, f->name))
        FIELD_FAIL(L, w, f->name, "is required (%s)", f->doc);
    else if (f->required && f->type != FG_FIELD_DIMS && f->type != FG_FIELD_OPERAND)
        lua_pop(L, 1);
    switch (f->type) {
    case FG_FIELD_INT:
        *(int64_t *)(base + f->member) = opt_integer(L, w, args, f->name, (int64_t)f->def, f->lo, f->hi, false);
        break;
    case FG_FIELD_NUMBER:
    case FG_FIELD_OPT_NUMBER: {
        bool given = false;
        double v = opt_number(L, w, args, f->name, f->def, &given);
        *(double *)(base + f->member) = given ? check_fp32(L, w, f->name, v, f->rule) : v;
        if (f->type == FG_FIELD_OPT_NUMBER)
            *(bool *)(base + f->flag) = given;
        break;
    }
    case FG_FIELD_BOOL:
        *(bool *)(base + f->member) = opt_bool(L, w, args, f->name, f->def != 0);
        break;
    case FG_FIELD_NAME:
        opt_name(L, w, args, f->name, base + f->member);
        break;
    case FG_FIELD_CHOICE:
        *(int *)(base + f->member) = opt_choice(L, w, args, f->name, f->choices, f->n_choices, (int)f->def);
        break;
    case FG_FIELD_SPATIAL:
        opt_spatial(L, w, args, f->name, (int)f->def, f->lo, (int *)(base + f->member), (int *)(base + f->flag));
        break;
    case FG_FIELD_INT_LIST:
        *(int *)(base + f->flag) =
            opt_int_list(L, w, args, f->name, FG_MAX_RANK - 1, f->lo, f->hi, (int64_t *)(base + f->member));
        break;
    case FG_FIELD_SHAPE:
        *(int *)(base + f->flag) = read_shape(L, w, args, f->name, (int64_t *)(base + f->member));
        break;
    case FG_FIELD_DIMS:
        read_dims(L, w, args, op, f->required, f->doc);
        break;
    case FG_FIELD_OPERAND:
        read_operand(L, w, args, op);
        break;
    }
}

static void read_op(lua_State *L, walk_ctx *w, const char *ctor, int line, int args, fg_op *op)
{
    ctor_kinds ck = kinds_of(ctor);
    w->op_name = ctor;
    w->op_line = line;
    memset(op, 0, sizeof *op);
    op->line = line;
    op->weight_param = op->bias_param = op->operand_param = op->operand_value = -1;
    op->mean_param = op->var_param = -1;
    check_fields(L, w, args, ctor, &ck);
    opt_name(L, w, args, "as", op->as);
    op->kind = choose_kind(L, w, args, &ck);
    const fg_op_def *d = &fg_op_defs[op->kind];
    op->spatial = d->spatial ? d->spatial : ck.spatial; /* pools without one: from the value's rank */
    op->alias = ck.alias;
    for (int i = 0; i < FG_MAX_FIELDS && d->fields[i].name; i++) {
        const fg_field *f = &d->fields[i];
        if (f->type == FG_FIELD_NAME)
            snprintf(op->name, sizeof op->name, "%s", f->def_name ? f->def_name : ctor);
        read_field(L, w, args, f, op);
    }
    if (d->check) {
        char msg[256];
        const char *field = d->check(op, msg, sizeof msg);
        if (field)
            FIELD_FAIL(L, w, field, "%s", msg);
    }
}

/* An op before the convolution: the registry says which may come there (docs/spec.md,
 * "Prologue"); it reads the layer input and nothing else, and names no value. */
static void add_prologue_op(lua_State *L, walk_ctx *w, const fg_op *op)
{
    fg_layer_ir *ir = w->ir;
    const char *name = fg_op_written_name(op);
    if (!fg_op_defs[op->kind].prologue)
        raise(L, w, op->line,
              "%s: cannot come before the convolution: only normalizations and elementwise ops may "
              "(a prologue, applied to the conv's input as it is staged); the first op after them must be "
              "conv2d or conv3d",
              name);
    if (op->operand == FG_OPERAND_VALUE)
        raise(L, w, op->line,
              "%s: field 'value' cannot be used before the convolution: a prologue op reads the layer input "
              "and a scalar or parameter operand only",
              name);
    if (op->as[0])
        raise(L, w, op->line, "%s: field 'as' cannot be used before the convolution: prologue values are not "
                              "stored, so later ops cannot read them",
              name);
    if (ir->n_pro == FG_MAX_PROLOGUE)
        raise(L, w, op->line, "%s: more than %d ops before the convolution", name, FG_MAX_PROLOGUE);
    ir->pro[ir->n_pro++] = *op;
}

static void read_input(lua_State *L, walk_ctx *w, int body, int line)
{
    w->op_name = "layer";
    w->op_line = line;
    if (!get_field(L, body, "input"))
        raise(L, w, line, "layer: field 'input' is required, e.g. input = { \"N\", 3, 32, 32 }");
    if (!lua_istable(L, -1))
        FIELD_FAIL(L, w, "input", "must be a list like { \"N\", 3, 32, 32 } (got a %s)", luaL_typename(L, -1));
    lua_Unsigned len = lua_rawlen(L, -1);
    if (len < 4 || len > FG_MAX_RANK)
        FIELD_FAIL(L, w, "input", "must have 4 entries (N, C, H, W) or 5 (N, C, D, H, W); got %llu",
                   (unsigned long long)len);
    lua_rawgeti(L, -1, 1);
    if (lua_type(L, -1) != LUA_TSTRING || strcmp(lua_tostring(L, -1), "N") != 0)
        FIELD_FAIL(L, w, "input", "must start with \"N\": the batch size is a run-time argument");
    lua_pop(L, 1);
    fg_shape *in = &w->ir->input;
    in->rank = (int)len;
    in->dim[0] = 1;
    for (int d = 1; d < in->rank; d++) {
        lua_rawgeti(L, -1, d + 1);
        in->dim[d] = to_integer(L, w, -1, "input", 1, INT32_MAX);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* The layer record at stack index `rec` into `ir`: its name, fields and ops. In a block
 * (w->block), a layer has `from` instead of `input`, `dtype` and `layout` (the block's). */
/* Opens a `layer "name" {...}` or `block "name" {...}` record: pushes its line, its body
 * (*body: the body's stack index) and its name, checked; what the errors name is `what`. */
static const char *open_record(lua_State *L, walk_ctx *w, int rec, const char *what, int *line, int *body,
                               size_t *nlen)
{
    lua_getfield(L, rec, "line");
    *line = (int)lua_tointeger(L, -1);
    lua_getfield(L, rec, "args");
    *body = lua_gettop(L);
    lua_getfield(L, *body, "\1name");
    const char *name = lua_tolstring(L, -1, nlen);
    w->op_name = what;
    w->op_line = *line;
    check_name(L, w, "name", name, *nlen);
    return name;
}

static void walk_layer(lua_State *L, walk_ctx *w, int ops, int rec, fg_layer_ir *ir, int index)
{
    static const char *const block_layer_fields[] = {"from", "precision", "strategy"};
    const char *const *fields = w->block ? block_layer_fields : layer_fields;
    int n_fields = w->block ? COUNT(block_layer_fields) : COUNT(layer_fields);
    w->ir = ir;
    int line, body;
    size_t nlen;
    const char *lname = open_record(L, w, rec, "layer", &line, &body, &nlen);
    if (w->block) {
        snprintf(ir->name, sizeof ir->name, "%s.%s", w->block->name, lname);
        if (strlen(w->block->name) + 1 + nlen >= sizeof ir->name)
            raise(L, w, line, "layer: the name '%s.%s' is longer than %d characters", w->block->name, lname,
                  FG_NAME_MAX - 1);
        fg_block_tensor *t = &w->block->tensors[w->block->n_tensors];
        snprintf(t->name, sizeof t->name, "%s", lname);
        t->layer = index;
        t->line = line;
    } else {
        snprintf(ir->name, sizeof ir->name, "%s", lname);
    }
    lua_pop(L, 1);

    /* Keys: the fields, and the ops as a list 1..n. */
    lua_Unsigned n = lua_rawlen(L, body);
    lua_pushnil(L);
    while (lua_next(L, body)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) {
            const char *k = lua_tostring(L, -1);
            if (k[0] == '\1' || listed(k, fields, n_fields))
                continue;
            const char *near = fg_nearest_name(k, fields, n_fields);
            if (w->block && !strcmp(k, "input"))
                raise(L, w, line, "layer: field '%s' is the block's in a block: a layer reads the tensor named by "
                                  "'from' (default: the layer before it, or the block input)",
                      k);
            /* every tensor of a block has one dtype and layout: a layer's input and output are
             * tensors of the block, so the fields can only be the block's */
            if (w->block && listed(k, layer_fields, COUNT(layer_fields)))
                raise(L, w, line, "layer: field '%s' is the block's in a block: write %s = ... on the block (every "
                                  "tensor of a block, so every layer's input and output, has the block's)",
                      k, k);
            raise(L, w, line, "layer: unknown field '%s'%s%s%s", k,
                  near ? " (did you mean '" : w->block ? " (known: from, precision, strategy)"
                                                       : " (known: input, precision, strategy, dtype, layout)",
                  near ? near : "", near ? "'?)" : "");
        }
        lua_Integer i = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        if (i < 1 || (lua_Unsigned)i > n)
            raise(L, w, line, "layer: the ops must form a plain list (found key %s)", luaL_tolstring(L, -1, NULL));
    }
    if (w->block) {
        opt_name(L, w, body, "from", w->from[index]);
        ir->input.rank = 0; /* the block loader sets it from `from` */
    } else {
        read_input(L, w, body, line);
    }
    ir->precision = opt_choice(L, w, body, "precision", precisions, COUNT(precisions), 0) == 1 ? FG_PRECISION_TF32 : FG_PRECISION_FP32;
    if (!w->block) {
        /* the dtype of the layer's input and output in memory; everything inside stays fp32 */
        ir->dtype = (fg_dtype)opt_choice(L, w, body, "dtype", dtypes, COUNT(dtypes), 0);
        /* the memory layout of the layer's input and output; every buffer inside stays NC(D)HW */
        ir->layout = (fg_layout)opt_choice(L, w, body, "layout", layouts, COUNT(layouts), 0);
    } else {
        /* a layer of a block reads and writes tensors of the block: the block's (walk_block
         * reads them before the layers) */
        ir->dtype = w->block->dtype;
        ir->layout = w->block->layout;
    }
    /* the planner chooses by cost; a spec may insist (benchmarks, tests) */
    ir->strategy = opt_choice(L, w, body, "strategy", strategies, COUNT(strategies), 0) - 1;

    if (n == 0)
        raise(L, w, line, "layer: has no ops; the first must be conv2d or conv3d");
    if (n > FG_MAX_OPS)
        raise(L, w, line, "layer: has %llu ops; at most %d are supported", (unsigned long long)n, FG_MAX_OPS);
    lua_getfield(L, LUA_REGISTRYINDEX, REG_CTORS);
    int ctors = lua_gettop(L);
    for (lua_Unsigned i = 1; i <= n; i++) {
        lua_rawgeti(L, body, (lua_Integer)i);
        int item = lua_gettop(L);
        const char *kind = NULL;
        int op_line = line;
        int args;
        if (lua_isfunction(L, item)) {
            /* a bare constructor such as `relu`: an op with no fields */
            lua_pushvalue(L, item);
            lua_rawget(L, ctors);
            kind = lua_tostring(L, -1);
            if (!kind)
                raise(L, w, line, "layer: entry %llu is a function, not an op", (unsigned long long)i);
            lua_newtable(L);
            args = lua_gettop(L);
        } else {
            lua_pushvalue(L, item);
            lua_rawget(L, ops);
            if (!lua_istable(L, -1))
                raise(L, w, line, "layer: entry %llu is a %s, not an op (ops are written like relu {} or "
                                  "conv2d { ... })",
                      (unsigned long long)i, luaL_typename(L, item));
            int r = lua_gettop(L);
            lua_getfield(L, r, "kind");
            kind = lua_tostring(L, -1);
            lua_getfield(L, r, "line");
            op_line = (int)lua_tointeger(L, -1);
            lua_pop(L, 1);
            if (!strcmp(kind, "layer"))
                raise(L, w, op_line, "layer: entry %llu is a layer; layers do not nest (put several layers in a "
                                     "block { ... })",
                      (unsigned long long)i);
            if (!strcmp(kind, "block"))
                raise(L, w, op_line, "layer: entry %llu is a block; blocks do not nest", (unsigned long long)i);
            lua_getfield(L, r, "args");
            args = lua_gettop(L);
        }
        fg_op op;
        read_op(L, w, kind, op_line, args, &op);
        if (ir->n_ops == 0 && fg_op_kind_class(op.kind) != FG_CLASS_CONV)
            add_prologue_op(L, w, &op);
        else
            ir->ops[ir->n_ops++] = op;
        lua_settop(L, ctors);
    }
    if (ir->n_ops == 0)
        raise(L, w, ir->pro[0].line,
              "layer: has no convolution: the first op must be conv2d or conv3d, after the normalizations and "
              "elementwise ops a layer may put before it (%s here)",
              fg_op_written_name(&ir->pro[0]));
    lua_settop(L, rec);
}

/* A block's shape field ({ "N", C, ... }): 2 to FG_MAX_RANK entries for an extra input. */
static void read_block_shape(lua_State *L, walk_ctx *w, const char *field, int min_rank, fg_shape *out)
{
    if (!lua_istable(L, -1))
        FIELD_FAIL(L, w, field, "must be a list like { \"N\", 3, 32, 32 } (got a %s)", luaL_typename(L, -1));
    lua_Unsigned len = lua_rawlen(L, -1);
    if (len < (lua_Unsigned)min_rank || len > FG_MAX_RANK)
        FIELD_FAIL(L, w, field, "must have %d to %d entries, \"N\" first; got %llu", min_rank, FG_MAX_RANK,
                   (unsigned long long)len);
    lua_rawgeti(L, -1, 1);
    if (lua_type(L, -1) != LUA_TSTRING || strcmp(lua_tostring(L, -1), "N") != 0)
        FIELD_FAIL(L, w, field, "must start with \"N\": the batch size is a run-time argument");
    lua_pop(L, 1);
    out->rank = (int)len;
    out->dim[0] = 1;
    for (int d = 1; d < out->rank; d++) {
        lua_rawgeti(L, -1, d + 1);
        out->dim[d] = to_integer(L, w, -1, field, 1, INT32_MAX);
        lua_pop(L, 1);
    }
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(((const fg_block_tensor *)a)->name, ((const fg_block_tensor *)b)->name);
}

static void walk_block(lua_State *L, walk_ctx *w, int ops, int rec)
{
    static const char *const block_fields[] = {"input", "inputs", "output", "dtype", "layout"};
    fg_block_ir *b = w->block;
    int line, body;
    size_t nlen;
    const char *bname = open_record(L, w, rec, "block", &line, &body, &nlen);
    b->line = line;
    snprintf(b->name, sizeof b->name, "%s", bname);
    lua_pop(L, 1);
    lua_Unsigned n = lua_rawlen(L, body);
    lua_pushnil(L);
    while (lua_next(L, body)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) {
            const char *k = lua_tostring(L, -1);
            if (k[0] == '\1' || listed(k, block_fields, COUNT(block_fields)))
                continue;
            const char *near = fg_nearest_name(k, block_fields, COUNT(block_fields));
            raise(L, w, line, "block: unknown field '%s'%s%s%s", k,
                  near ? " (did you mean '" : " (known: input, inputs, output, dtype, layout)", near ? near : "",
                  near ? "'?)" : "");
        }
        lua_Integer i = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        if (i < 1 || (lua_Unsigned)i > n)
            raise(L, w, line, "block: the layers must form a plain list (found key %s)", luaL_tolstring(L, -1, NULL));
    }
    /* the tensors: "input", the extra inputs sorted by name, then the layers' outputs */
    if (!get_field(L, body, "input"))
        raise(L, w, line, "block: field 'input' is required, e.g. input = { \"N\", 64, 56, 56 }");
    read_block_shape(L, w, "input", 4, &b->tensors[0].shape);
    lua_pop(L, 1);
    snprintf(b->tensors[0].name, sizeof b->tensors[0].name, "input");
    b->tensors[0].layer = -1;
    b->tensors[0].line = line;
    b->n_tensors = 1;
    if (get_field(L, body, "inputs")) {
        if (!lua_istable(L, -1))
            FIELD_FAIL(L, w, "inputs", "must be a table of named shapes, e.g. inputs = { temb = { \"N\", 320 } } "
                                       "(got a %s)",
                       luaL_typename(L, -1));
        int t = lua_gettop(L);
        lua_pushnil(L);
        while (lua_next(L, t)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                FIELD_FAIL(L, w, "inputs", "must name each input: inputs = { temb = { \"N\", 320 } }");
            size_t klen;
            const char *k = lua_tolstring(L, -2, &klen);
            check_name(L, w, "inputs", k, klen);
            if (b->n_tensors == 1 + FG_MAX_BLOCK_INPUTS)
                FIELD_FAIL(L, w, "inputs", "has more than %d inputs", FG_MAX_BLOCK_INPUTS);
            if (!strcmp(k, "input"))
                FIELD_FAIL(L, w, "inputs", "names 'input', the block's own input: choose another name");
            fg_block_tensor *bt = &b->tensors[b->n_tensors++];
            snprintf(bt->name, sizeof bt->name, "%s", k);
            bt->layer = -1;
            bt->line = line;
            read_block_shape(L, w, "inputs", 2, &bt->shape);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        qsort(b->tensors + 1, (size_t)(b->n_tensors - 1), sizeof b->tensors[0], compare_names);
    }
    b->n_inputs = b->n_tensors;
    opt_name(L, w, body, "output", w->output);
    /* the dtype and layout of every tensor of the block (the same choices and messages as a
     * layer's); read before the layers, which take them */
    b->dtype = (fg_dtype)opt_choice(L, w, body, "dtype", dtypes, COUNT(dtypes), 0);
    b->layout = (fg_layout)opt_choice(L, w, body, "layout", layouts, COUNT(layouts), 0);
    if (n == 0)
        raise(L, w, line, "block: has no layers: list them as layer \"a\" { conv2d { ... }, ... }");
    if (n > FG_MAX_BLOCK_LAYERS)
        raise(L, w, line, "block: has %llu layers; at most %d are supported", (unsigned long long)n,
              FG_MAX_BLOCK_LAYERS);
    for (lua_Unsigned i = 1; i <= n; i++) {
        lua_rawgeti(L, body, (lua_Integer)i);
        int item = lua_gettop(L);
        lua_pushvalue(L, item);
        lua_rawget(L, ops);
        const char *kind = NULL;
        if (lua_istable(L, -1)) {
            lua_getfield(L, -1, "kind");
            kind = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
        if (!kind || strcmp(kind, "layer") != 0)
            raise(L, w, line, "block: entry %llu is %s, not a layer: a block lists layers, layer \"a\" { conv2d "
                              "{ ... }, ... }",
                  (unsigned long long)i, kind ? kind : luaL_typename(L, item));
        int r = lua_gettop(L);
        int index = (int)i - 1;
        b->layers[index].file[0] = 0;
        snprintf(b->layers[index].file, sizeof b->layers[index].file, "%s", b->file);
        walk_layer(L, w, ops, r, &b->layers[index], index);
        b->layer[index].line = b->tensors[b->n_tensors].line;
        b->layer[index].spec_index = index;
        b->layer[index].out = b->n_tensors;
        w->op_name = "layer";
        w->op_line = b->layer[index].line;
        for (int t = 0; t < b->n_tensors; t++)
            if (!strcmp(b->tensors[t].name, b->tensors[b->n_tensors].name))
                raise(L, w, b->layer[index].line, "layer: the name '%s' is already %s (line %d): layers and inputs "
                                                  "of a block need distinct names",
                      b->tensors[t].name, b->tensors[t].layer >= 0 ? "a layer's" : "an input's", b->tensors[t].line);
        b->n_tensors++;
        b->n_layers++;
        lua_settop(L, body);
    }
}

static int walk(lua_State *L)
{
    walk_ctx *w = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->result_ref);
    int result = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, REG_OPS);
    int ops = lua_gettop(L);

    lua_pushvalue(L, result);
    lua_rawget(L, ops);
    const char *kind = "";
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "kind");
        kind = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    bool is_layer = strcmp(kind, "layer") == 0, is_block = strcmp(kind, "block") == 0;
    if (is_block && !w->block)
        return luaL_error(L, "%s: the spec returns a block, which this entry point does not load: load it as a block "
                             "(fg_block_load_file or fg_block_load_string, or any fusegen command)",
                          w->file);
    if (!is_layer && !is_block) {
        const char *what = lua_istable(L, -1) ? "an op" : luaL_typename(L, result);
        return luaL_error(L, "%s: the spec must return a layer: return layer \"name\" { input = {...}, ... } "
                             "(it returned %s)",
                          w->file, what);
    }
    if (is_layer) {
        fg_block_ir *b = w->block;
        w->block = NULL; /* a plain layer spec: its own semantics */
        if (b)
            b->single = true, b->n_layers = 1;
        walk_layer(L, w, ops, lua_gettop(L), w->ir, 0);
        w->block = b;
        return 0;
    }
    walk_block(L, w, ops, lua_gettop(L));
    return 0;
}

static const char *tensor_of_layer_name(const fg_block_ir *b, int layer)
{
    return b->tensors[b->layer[layer].out].name;
}

/* The tensor named `name`, or -1 with a message naming the field and the nearest name. */
/* The tensor of the block named `name`, -1: none. */
static int tensor_index(const fg_block_ir *b, const char *name)
{
    for (int t = 0; t < b->n_tensors; t++)
        if (!strcmp(b->tensors[t].name, name))
            return t;
    return -1;
}

static int find_tensor(const fg_block_ir *b, const char *name, const char *file, int line, const char *what,
                       const char *field, fg_error *err)
{
    const int found = tensor_index(b, name);
    if (found >= 0)
        return found;
    const char *names[FG_MAX_BLOCK_TENSORS];
    for (int t = 0; t < b->n_tensors; t++)
        names[t] = b->tensors[t].name;
    const char *near = fg_nearest_name(name, names, b->n_tensors);
    char known[1024] = "";
    for (int t = 0; t < b->n_tensors; t++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", t ? ", " : "", names[t]);
    if (near)
        fg_fail(err, "%s:%d: %s: field '%s' names no tensor of the block: '%s' (did you mean '%s'?)", file, line, what,
                field, name, near);
    else
        fg_fail(err, "%s:%d: %s: field '%s' names no tensor of the block: '%s' (the tensors: %s)", file, line, what,
                field, name, known);
    return -1;
}

/* Layer i's shapes (its input is tensor `from`'s, known: the layers before it in run order
 * are inferred), and its output tensor's shape from them. */
static int infer_block_layer(fg_block_ir *b, int i, fg_error *err)
{
    fg_layer_ir *ir = &b->layers[i];
    ir->input = b->tensors[b->layer[i].from].shape;
    if (ir->input.rank < 4) {
        char buf[128];
        return fg_fail(err, "%s:%d: layer: field 'from' names '%s', which is %s: a layer's input needs a channel "
                            "and spatial dims",
                       b->file, b->layer[i].line, b->tensors[b->layer[i].from].name,
                       fg_shape_str(&ir->input, buf, sizeof buf));
    }
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? ir->n_ops : ir->n_pro;
        for (int k = 0; k < n; k++) {
            fg_op *op = pass ? &ir->ops[k] : &ir->pro[k];
            const int t = op->tensor_operand ? tensor_index(b, op->param_name) : -1;
            if (t >= 0) {
                op->tensor_rank = b->tensors[t].shape.rank;
                memcpy(op->tensor_dim, b->tensors[t].shape.dim, sizeof op->tensor_dim);
            }
        }
    }
    if (fg_infer_shapes(ir, err) != 0)
        return -1;
    for (int p = 0; p < ir->n_params; p++) {
        const int t = ir->params[p].batched ? tensor_index(b, ir->params[p].name) : -1;
        if (t >= 0)
            ir->params[p].tensor = t;
    }
    b->tensors[b->layer[i].out].shape = ir->ops[ir->n_ops - 1].out;
    return 0;
}

/* Whether layer r reads a norm over each position's channels best itself: a channels-last
 * block (a pixel's channels contiguous) whose layer r starts with a 1x1 conv over all its
 * channels (ConvNeXt's LayerNorm -> Linear): the wgmma input pack by pixel rows computes each
 * pixel's statistics from its channels (fg_plan.pack_pixel_stats) where one of its blocks holds
 * them, else a statistics pass by pixel rows does (a key a pixel), where the writer would run
 * its conv twice (once to gather them) or store the value before the norm. The structure only:
 * fg_block_spec_load_*_for keeps the norm with its writer where the reader is not on wgmma. */
static bool pixel_norm_reader(const fg_block_ir *b, int r)
{
    const fg_op *conv = &b->layers[r].ops[0];
    if (b->layout != FG_LAYOUT_CHANNELS_LAST || fg_op_kind_class(conv->kind) != FG_CLASS_CONV || conv->groups != 1)
        return false;
    for (int d = 0; d < conv->in.rank - 2; d++)
        if (conv->kernel[d] != 1 || conv->stride[d] != 1 || conv->padding[d] != 0)
            return false;
    return true;
}

/* A norm after a layer's conv, and the elementwise ops after it, moved into the prologue of the
 * one layer that reads the output (gen/block.h, fg_block_layer.moved_ops): the writer then
 * stores its conv chain's value before the norm (and, for a norm over whole channels, gathers
 * its statistics as it stores it: fg_block_link_statistics), and the reader applies the norm
 * where it stages its input --
 * no stored value before the norm and no map pass over it in the writer. The same function:
 * the moved ops are shape-preserving and the writer's output is read by nothing else.
 * Measured (bench/NOTES.md v36): the nnU-Net stage in bf16 at batch 2, 0.6435 -> 0.600 ms.
 * Moved where: the reader has no prologue and reads the writer's output as its input only;
 * nothing else reads it (another layer, a tensor operand, the block's output); the writer's
 * ops from the norm on are all prologue ops (fg_op_def.prologue), the norm first, with
 * statistics per sample over whole channels (or over each position's channels, where
 * pixel_norm_reader says the reader computes them best), none naming or reading a value
 * (`as`, `value`);
 * at most FG_MAX_PROLOGUE of them. Both layers are inferred again from their parsed forms (which
 * then hold the move: a writer may itself have been a reader); should either fail (it cannot:
 * the ops keep their shapes), both stay as they were. */
static void move_norms_to_readers(fg_block_ir *b, fg_layer_ir *parsed,
                                  int deps[FG_MAX_BLOCK_LAYERS][FG_MAX_BLOCK_TENSORS], const int *n_deps)
{
    for (int r = 0; r < b->n_layers; r++) {
        const int from = b->layer[r].from, w = b->tensors[from].layer;
        if (w < 0 || from == b->output || parsed[r].n_pro > 0 || b->layers[r].n_pro > 0)
            continue;
        int readers = 0;
        for (int i = 0; i < b->n_layers; i++)
            for (int d = 0; d < n_deps[i]; d++)
                readers += deps[i][d] == from;
        if (readers != 1) /* deps[r][0] is `from`; a tensor operand naming it is another read */
            continue;
        const fg_layer_ir *src = &b->layers[w];
        int k = -1;
        for (int j = 1; j < src->n_ops && k < 0; j++)
            if (fg_op_kind_class(src->ops[j].kind) == FG_CLASS_NORM && fg_op_stats(&src->ops[j]))
                k = j;
        if (k < 0 || src->n_ops - k > FG_MAX_PROLOGUE)
            continue;
        fg_stat_layout L;
        fg_norm_stat_layout(&src->ops[k], &L);
        bool movable =
            !L.over_batch && (L.whole_channels || (L.per_position && !b->pixel_norms_kept && pixel_norm_reader(b, r)));
        for (int j = k; j < src->n_ops && movable; j++) {
            const fg_op *op = &parsed[w].ops[j];
            movable = fg_op_defs[op->kind].prologue && op->operand != FG_OPERAND_VALUE && !op->as[0] &&
                      (j == k || !fg_op_stats(op)) && fg_shape_same(&src->ops[j].in, &src->ops[j].out);
        }
        if (!movable)
            continue;
        /* was[0..1]: the two layers as inferred; was[2..3]: their parsed forms after the move */
        fg_layer_ir *was = malloc(4 * sizeof *was);
        if (!was)
            return; /* nothing moved: the layers stay as inferred */
        was[0] = b->layers[w];
        was[1] = b->layers[r];
        was[2] = parsed[w];
        was[3] = parsed[r];
        for (int j = k; j < was[2].n_ops; j++)
            was[3].pro[was[3].n_pro++] = was[2].ops[j];
        was[2].n_ops = k;
        const fg_shape out_was = b->tensors[b->layer[w].out].shape;
        b->layers[w] = was[2];
        b->layers[r] = was[3];
        fg_error ignored;
        if (infer_block_layer(b, w, &ignored) != 0 || infer_block_layer(b, r, &ignored) != 0 ||
            !fg_shape_same(&b->tensors[b->layer[w].out].shape, &out_was)) {
            b->layers[w] = was[0];
            b->layers[r] = was[1];
            b->tensors[b->layer[w].out].shape = out_was;
        } else {
            parsed[w] = was[2];
            parsed[r] = was[3];
            b->layer[r].moved_ops = was[3].n_pro;
        }
        free(was);
    }
}

/* Wires the block's layers (from, tensor operands, output), orders them so that each comes
 * after what it reads, infers every layer's shapes in that order and checks the parameters
 * shared by name. */
static int resolve_block(fg_block_ir *b, walk_ctx *w, fg_error *err)
{
    int deps[FG_MAX_BLOCK_LAYERS][FG_MAX_BLOCK_TENSORS]; /* tensors each layer reads */
    int n_deps[FG_MAX_BLOCK_LAYERS] = {0};
    for (int i = 0; i < b->n_layers; i++) {
        fg_layer_ir *ir = &b->layers[i];
        int from = i == 0 ? 0 : b->layer[i - 1].out;
        if (w->from[i][0] && (from = find_tensor(b, w->from[i], b->file, b->layer[i].line, "layer", "from", err)) < 0)
            return -1;
        if (from == b->layer[i].out)
            return fg_fail(err, "%s:%d: layer: field 'from' names the layer itself ('%s')", b->file, b->layer[i].line,
                           w->from[i]);
        b->layer[i].from = from;
        deps[i][n_deps[i]++] = from;
        for (int pass = 0; pass < 2; pass++) {
            int n = pass ? ir->n_ops : ir->n_pro;
            for (int k = 0; k < n; k++) {
                fg_op *op = pass ? &ir->ops[k] : &ir->pro[k];
                if (!op->tensor_operand)
                    continue;
                int t = find_tensor(b, op->param_name, b->file, op->line, fg_op_written_name(op), "tensor", err);
                if (t < 0)
                    return -1;
                if (t == b->layer[i].out)
                    return fg_fail(err, "%s:%d: %s: field 'tensor' names the output of its own layer ('%s'): use "
                                        "value = with as = for the layer's own values",
                                   b->file, op->line, fg_op_written_name(op), op->param_name);
                deps[i][n_deps[i]++] = t;
            }
        }
    }
    /* run order: Kahn's algorithm in spec order; what is left forms a cycle */
    int order[FG_MAX_BLOCK_LAYERS], placed = 0;
    bool done[FG_MAX_BLOCK_LAYERS] = {false};
    while (placed < b->n_layers) {
        int next = -1;
        for (int i = 0; i < b->n_layers && next < 0; i++) {
            if (done[i])
                continue;
            bool ready = true;
            for (int d = 0; d < n_deps[i] && ready; d++) {
                int writer = b->tensors[deps[i][d]].layer;
                ready = writer < 0 || done[writer];
            }
            if (ready)
                next = i;
        }
        if (next < 0) {
            /* follow a cycle from the first layer left, to name it */
            int cur = 0;
            while (done[cur])
                cur++;
            int seen[FG_MAX_BLOCK_LAYERS], n_seen = 0, start = -1;
            while (start < 0) {
                for (int s = 0; s < n_seen; s++)
                    if (seen[s] == cur)
                        start = s;
                if (start >= 0)
                    break;
                seen[n_seen++] = cur;
                for (int d = 0; d < n_deps[cur]; d++) {
                    int writer = b->tensors[deps[cur][d]].layer;
                    if (writer >= 0 && !done[writer]) {
                        cur = writer;
                        break;
                    }
                }
            }
            char path[1024] = "";
            for (int s = n_seen - 1; s >= start; s--)
                snprintf(path + strlen(path), sizeof path - strlen(path), "%s -> ", tensor_of_layer_name(b, seen[s]));
            snprintf(path + strlen(path), sizeof path - strlen(path), "%s", tensor_of_layer_name(b, seen[n_seen - 1]));
            return fg_fail(err, "%s:%d: layer: the layers form a cycle (%s, each reading the next through 'from' or "
                                "'tensor'): a block's layers must read only the inputs and earlier layers",
                           b->file, b->layer[seen[n_seen - 1]].line, path);
        }
        done[next] = true;
        order[placed++] = next;
    }
    /* the output: `output`, or the last layer of the spec */
    b->output = b->layer[b->n_layers - 1].out;
    if (w->output[0] && (b->output = find_tensor(b, w->output, b->file, b->line, "block", "output", err)) < 0)
        return -1;
    if (b->tensors[b->output].layer < 0)
        return fg_fail(err, "%s:%d: block: field 'output' names an input ('%s'): the output must be a layer's",
                       b->file, b->line, w->output);
    /* every layer must lead to the output */
    bool used[FG_MAX_BLOCK_TENSORS] = {false};
    used[b->output] = true;
    for (int j = b->n_layers - 1; j >= 0; j--) {
        int i = order[j];
        if (!used[b->layer[i].out])
            continue;
        for (int d = 0; d < n_deps[i]; d++)
            used[deps[i][d]] = true;
    }
    for (int i = 0; i < b->n_layers; i++)
        if (!used[b->layer[i].out])
            return fg_fail(err, "%s:%d: layer: '%s' is not used: the block's output ('%s') does not depend on it",
                           b->file, b->layer[i].line, tensor_of_layer_name(b, i), b->tensors[b->output].name);
    /* shapes, in run order; the layers as parsed kept for move_norms_to_readers */
    fg_layer_ir *parsed = malloc(sizeof *parsed * (size_t)b->n_layers);
    if (!parsed)
        return fg_fail(err, "%s: out of memory", b->file);
    memcpy(parsed, b->layers, sizeof *parsed * (size_t)b->n_layers);
    for (int j = 0; j < b->n_layers; j++)
        if (infer_block_layer(b, order[j], err) != 0) {
            free(parsed);
            return -1;
        }
    move_norms_to_readers(b, parsed, deps, n_deps);
    free(parsed);
    /* a parameter name keeps one shape across the block (load_state_dict binds it once) */
    for (int i = 0; i < b->n_layers; i++)
        for (int p = 0; p < b->layers[i].n_params; p++) {
            const fg_param *a = &b->layers[i].params[p];
            for (int j = i + 1; j < b->n_layers; j++)
                for (int q = 0; q < b->layers[j].n_params; q++) {
                    const fg_param *c = &b->layers[j].params[q];
                    if (strcmp(a->name, c->name) != 0 || a->batched || c->batched)
                        continue;
                    bool same = a->rank == c->rank;
                    for (int d = 0; same && d < a->rank; d++)
                        same = a->dim[d] == c->dim[d];
                    if (!same) {
                        fg_shape sa = {.rank = a->rank + 1}, sc = {.rank = c->rank + 1};
                        memcpy(sa.dim + 1, a->dim, sizeof(int64_t) * (size_t)a->rank);
                        memcpy(sc.dim + 1, c->dim, sizeof(int64_t) * (size_t)c->rank);
                        char x[128], y[128];
                        /* the shapes without the "N" fg_shape_str prints first */
                        fg_shape_str(&sa, x, sizeof x);
                        fg_shape_str(&sc, y, sizeof y);
                        return fg_fail(err, "%s:%d: parameter '%s' has shape [%s in layer '%s' but [%s in layer '%s' "
                                            "(line %d): a name is one state_dict entry, with one shape",
                                       b->file, c->first_line, a->name, y + 4, tensor_of_layer_name(b, j), x + 4,
                                       tensor_of_layer_name(b, i), a->first_line);
                    }
                }
        }
    /* the layers in run order */
    fg_layer_ir *sorted = malloc(sizeof *sorted * (size_t)b->n_layers);
    if (!sorted)
        return fg_fail(err, "%s: out of memory", b->file);
    fg_block_layer layer[FG_MAX_BLOCK_LAYERS];
    for (int j = 0; j < b->n_layers; j++) {
        sorted[j] = b->layers[order[j]];
        layer[j] = b->layer[order[j]];
    }
    for (int t = 0; t < b->n_tensors; t++)
        for (int j = 0; j < b->n_layers; j++)
            if (b->tensors[t].layer == order[j]) {
                b->tensors[t].layer = j;
                break;
            }
    memcpy(b->layer, layer, sizeof layer);
    free(b->layers);
    b->layers = sorted;
    fg_block_link_statistics(b);
    return 0;
}

static int load_spec(const char *display, const char *src, size_t len, const fg_sandbox_limits *limits,
                     fg_layer_ir *ir, fg_block_ir *block, fg_error *err)
{
    memset(ir, 0, sizeof *ir);
    snprintf(ir->file, sizeof ir->file, "%s", display ? display : "<string>");
    if (len > FG_SPEC_MAX_BYTES)
        return fg_fail(err, "%s: spec is %zu bytes; specs are limited to %u bytes", ir->file, len, FG_SPEC_MAX_BYTES);
    fg_sandbox *sb = fg_sandbox_new(limits);
    if (!sb)
        return fg_fail(err, "%s: out of memory creating the Lua sandbox", ir->file);
    lua_State *L = fg_sandbox_state(sb);
    char msg[2048];
    char chunkname[600];
    snprintf(chunkname, sizeof chunkname, "@%s", ir->file);
    int rc = -1;
    walk_ctx *w = calloc(1, sizeof *w);
    /* Building the environment allocates; it runs protected like everything else. */
    if (w && lua_checkstack(L, 8)) {
        push_environment(L);
        if (fg_sandbox_run(sb, src, len, chunkname, -1, msg, sizeof msg) != 0) {
            fg_fail(err, "%s", msg);
        } else {
            w->ir = ir;
            w->block = block;
            w->file = ir->file;
            w->result_ref = luaL_ref(L, LUA_REGISTRYINDEX);
            if (fg_sandbox_pcall(sb, walk, w, msg, sizeof msg) != 0)
                fg_fail(err, "%s", msg);
            else
                rc = 0;
        }
    } else {
        fg_fail(err, "%s: out of memory in the Lua sandbox", ir->file);
    }
    fg_sandbox_free(sb);
    if (rc == 0 && (!block || block->single))
        rc = fg_infer_shapes(ir, err);
    else if (rc == 0)
        rc = resolve_block(block, w, err);
    free(w);
    return rc;
}

static int load(const char *display, const char *src, size_t len, const fg_sandbox_limits *limits,
                fg_layer_ir *ir, fg_error *err)
{
    return load_spec(display, src, len, limits, ir, NULL, err);
}

int fg_spec_load_string_limited(const char *display_name, const char *source, size_t len,
                                const fg_sandbox_limits *limits, fg_layer_ir *ir, fg_error *err)
{
    return load(display_name, source, len, limits, ir, err);
}

int fg_spec_load_string(const char *display_name, const char *source, size_t len, fg_layer_ir *ir,
                        fg_error *err)
{
    return load(display_name, source, len, NULL, ir, err);
}

/* The spec file's bytes (malloc'ed), or NULL with err set. */
static char *read_spec(const char *path, size_t *len, fg_error *err)
{
    /* O_NONBLOCK: a FIFO (or a device) would block open() forever; it is refused below */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) {
        fg_fail(err, "%s: cannot open spec: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        fg_fail(err, "%s: cannot open spec: not a regular file", path);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        fg_fail(err, "%s: cannot open spec: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(FG_SPEC_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        fg_fail(err, "%s: out of memory", path);
        return NULL;
    }
    *len = fread(buf, 1, FG_SPEC_MAX_BYTES + 1, f);
    int read_error = ferror(f);
    fclose(f);
    if (read_error || *len > FG_SPEC_MAX_BYTES) {
        if (read_error)
            fg_fail(err, "%s: read error", path);
        else
            fg_fail(err, "%s: spec is larger than %u bytes", path, FG_SPEC_MAX_BYTES);
        free(buf);
        return NULL;
    }
    return buf;
}

int fg_spec_load_file(const char *path, fg_layer_ir *ir, fg_error *err)
{
    size_t len;
    char *buf = read_spec(path, &len, err);
    if (!buf)
        return -1;
    int rc = load(path, buf, len, NULL, ir, err);
    free(buf);
    return rc;
}

static int load_block_string(const char *display_name, const char *source, size_t len, bool pixel_norms_kept,
                             fg_block_ir *b, fg_error *err)
{
    memset(b, 0, sizeof *b);
    b->pixel_norms_kept = pixel_norms_kept;
    const char *display = display_name ? display_name : "<string>";
    snprintf(b->file, sizeof b->file, "%s", display);
    b->layers = calloc(FG_MAX_BLOCK_LAYERS, sizeof *b->layers);
    if (!b->layers)
        return fg_fail(err, "%s: out of memory", display);
    fg_layer_ir *first = b->layers;
    int rc = load_spec(display, source, len, NULL, first, b, err);
    if (rc == 0 && b->single) {
        b->n_layers = 1;
        b->output = -1;
        b->dtype = b->layers[0].dtype;
        b->layout = b->layers[0].layout;
        snprintf(b->name, sizeof b->name, "%s", b->layers[0].name);
    }
    return rc;
}

int fg_block_spec_load_string(const char *display_name, const char *source, size_t len, fg_block_ir *b, fg_error *err)
{
    return load_block_string(display_name, source, len, false, b, err);
}

/* Whether a norm over each position's channels that the loader moved to a reader is one that
 * reader's plan for `opts` does not apply in the wgmma input pack (or the plan fails: the load
 * without the move reports what is wrong, if anything). */
static bool pixel_moves_unfit(const fg_block_ir *b, const fg_plan_options *opts)
{
    fg_plan *plan = NULL;
    bool unfit = false;
    for (int r = 0; r < b->n_layers && !unfit; r++) {
        const fg_layer_ir *ir = &b->layers[r];
        if (b->layer[r].moved_ops == 0 || fg_op_kind_class(ir->pro[0].kind) != FG_CLASS_NORM)
            continue;
        fg_stat_layout L;
        fg_norm_stat_layout(&ir->pro[0], &L);
        if (!L.per_position)
            continue;
        if (!plan && !(plan = malloc(sizeof *plan)))
            return true;
        fg_error ignored;
        unfit = fg_plan_layer(ir, opts, plan, &ignored) != 0 || plan->wgmma.parts == 0;
    }
    free(plan);
    return unfit;
}

int fg_block_spec_load_string_for(const char *display_name, const char *source, size_t len,
                                  const fg_plan_options *opts, fg_block_ir *b, fg_error *err)
{
    int rc = load_block_string(display_name, source, len, false, b, err);
    if (rc != 0 || !opts || b->single || !pixel_moves_unfit(b, opts))
        return rc;
    fg_block_ir_free(b);
    return load_block_string(display_name, source, len, true, b, err);
}

int fg_block_spec_load_file_for(const char *path, const fg_plan_options *opts, fg_block_ir *b, fg_error *err)
{
    size_t len;
    memset(b, 0, sizeof *b);
    char *buf = read_spec(path, &len, err);
    if (!buf)
        return -1;
    int rc = fg_block_spec_load_string_for(path, buf, len, opts, b, err);
    free(buf);
    return rc;
}

int fg_block_spec_load_file(const char *path, fg_block_ir *b, fg_error *err)
{
    return fg_block_spec_load_file_for(path, NULL, b, err);
}

void fg_spec_vocabulary(void (*word)(void *ctx, const char *w), void *ctx)
{
    int n;
    const char *const *names = fg_constructor_names(&n);
    for (int i = 0; i < n; i++)
        word(ctx, names[i]);
    for (int k = 0; k < FG_OP_KIND_COUNT; k++) {
        const char *fields[32];
        int m = known_fields((fg_op_kind)k, fields, 32);
        for (int i = 0; i < m; i++)
            word(ctx, fields[i]);
        for (int i = 0; i < FG_MAX_FIELDS && fg_op_defs[k].fields[i].name; i++)
            for (int c = 0; c < fg_op_defs[k].fields[i].n_choices; c++)
                word(ctx, fg_op_defs[k].fields[i].choices[c]);
    }
    word(ctx, "as");
    word(ctx, "N");
    word(ctx, "tostring");
    static const char *const block_words[] = {"from", "inputs", "output", "input"};
    const char *const *lists[] = {base_funcs, math_funcs, layer_fields, precisions, strategies, dtypes, layouts, block_words};
    const int counts[] = {COUNT(base_funcs), COUNT(math_funcs), COUNT(layer_fields), COUNT(precisions),
                          COUNT(strategies), COUNT(dtypes), COUNT(layouts), COUNT(block_words)};
    for (int l = 0; l < COUNT(lists); l++)
        for (int i = 0; i < counts[l]; i++)
            word(ctx, lists[l][i]);
    word(ctx, "math");
}
