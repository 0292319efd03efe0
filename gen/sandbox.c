/* SPDX-License-Identifier: Apache-2.0 */
#include "sandbox.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const fg_sandbox_limits fg_sandbox_default_limits = {
    .memory_bytes = 64u << 20,
    .instructions = 50LL * 1000 * 1000,
    .seconds = 2.0,
};

struct fg_sandbox {
    lua_State *L;
    fg_sandbox_limits limits;
    size_t used;
    size_t allocated;   /* bytes allocated since the run was armed (churn) */
    bool churned;       /* an allocation was refused for the churn limit */
    long long executed;
    struct timespec started;
};

/* The hook runs every HOOK_EVERY VM instructions. */
enum { HOOK_EVERY = 1000 };

/* Refusing an allocation makes Lua raise "not enough memory", which the protected call
 * catches: a memory bomb ends as an ordinary error. Besides the live heap, the bytes
 * allocated in all are capped: a loop that keeps building strings under the heap limit
 * (s = s .. #s) would otherwise push gigabytes through malloc until the time limit, and
 * under a sanitizer's allocator that alone ran a fuzzer out of memory. */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    fg_sandbox *sb = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        sb->used -= old;
        return NULL;
    }
    if (nsize > old && sb->used - old + nsize > sb->limits.memory_bytes)
        return NULL;
    if (nsize > old) {
        size_t cap = sb->limits.allocated_bytes ? sb->limits.allocated_bytes : 16 * sb->limits.memory_bytes;
        if (sb->allocated + (nsize - old) > cap) {
            sb->churned = true;
            return NULL;
        }
        sb->allocated += nsize - old;
    }
    void *p = realloc(ptr, nsize);
    if (p)
        sb->used = sb->used - old + nsize;
    return p;
}

/* The time limit counts the CPU time of the thread that runs the spec, not wall time: a
 * busy machine (a parallel build, `ctest -j8` on two cores) must not stop a spec that the
 * instruction budget or the memory cap would let finish, nor turn their message into a
 * time-limit one. The limit still ends what the other two do not see (a slow C function
 * called from a short loop). */
static double seconds_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) * 1e-9;
}

static fg_sandbox *sandbox_of(lua_State *L)
{
    void *ud = NULL;
    lua_getallocf(L, &ud);
    return ud;
}

static void budget_hook(lua_State *L, lua_Debug *ar)
{
    fg_sandbox *sb = sandbox_of(L);
    sb->executed += HOOK_EVERY;
    bool over_budget = sb->executed > sb->limits.instructions;
    if (!over_budget && seconds_since(&sb->started) <= sb->limits.seconds)
        return;
    /* Where the spec was stopped (luaL_error's own position would be the hook's caller).
     * lua_pushfstring (behind luaL_error) knows neither %lld nor %.1f: format here. */
    char where[128] = "";
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
        snprintf(where, sizeof where, "%s:%d: ", ar->short_src, ar->currentline);
    char msg[512];
    if (over_budget)
        snprintf(msg, sizeof msg, "%sthe spec ran past its instruction budget (%lld instructions): a spec is data, "
                                  "not a program; is there an endless loop?",
                 where, sb->limits.instructions);
    else
        snprintf(msg, sizeof msg, "%sthe spec ran past its time limit (%.1f s of CPU time)", where, sb->limits.seconds);
    luaL_error(L, "%s", msg);
}

fg_sandbox *fg_sandbox_new(const fg_sandbox_limits *limits)
{
    fg_sandbox *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    sb->limits = limits ? *limits : fg_sandbox_default_limits;
    sb->L = lua_newstate(capped_alloc, sb);
    if (!sb->L) {
        free(sb);
        return NULL;
    }
    return sb;
}

void fg_sandbox_free(fg_sandbox *sb)
{
    if (!sb)
        return;
    lua_close(sb->L);
    free(sb);
}

lua_State *fg_sandbox_state(fg_sandbox *sb)
{
    return sb->L;
}

static void arm(fg_sandbox *sb)
{
    sb->executed = 0;
    sb->allocated = 0;
    sb->churned = false;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &sb->started);
    lua_sethook(sb->L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
}

static void disarm(fg_sandbox *sb)
{
    lua_sethook(sb->L, NULL, 0, 0);
}

static void copy_message(lua_State *L, char *msg, size_t cap)
{
    const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error object is not a string";
    snprintf(msg, cap, "%s", m);
    lua_pop(L, 1);
}

/* The same for errors of the chunk itself: every message names the spec, by its full path.
 * Lua's positions ("file:LINE:") use the chunk's short_src, which is cut to 60 characters
 * ("...end/of/a/long/path.lua"); it is replaced by the full name. Lua's own messages for a
 * refused binary chunk and for running out of memory carry no position at all. */
static void copy_chunk_message(fg_sandbox *sb, int status, const char *chunkname, const char *short_src, char *msg,
                               size_t cap)
{
    lua_State *L = sb->L;
    const char *name = chunkname[0] == '@' || chunkname[0] == '=' ? chunkname + 1 : chunkname;
    const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error object is not a string";
    size_t nlen = strlen(name), slen = strlen(short_src);
    if (status == LUA_ERRMEM && sb->churned)
        snprintf(msg, cap,
                 "%s: the spec ran past its memory limit (%zu bytes allocated in all; a spec is data, not a "
                 "program: is there an endless loop?)",
                 name, sb->limits.allocated_bytes ? sb->limits.allocated_bytes : 16 * sb->limits.memory_bytes);
    else if (status == LUA_ERRMEM)
        snprintf(msg, cap, "%s: the spec ran past its memory limit (%zu bytes)", name, sb->limits.memory_bytes);
    else if (strncmp(m, name, nlen) == 0 && m[nlen] == ':')
        snprintf(msg, cap, "%s", m);
    else if (slen > 0 && strncmp(m, short_src, slen) == 0 && m[slen] == ':')
        snprintf(msg, cap, "%s%s", name, m + slen);
    else
        snprintf(msg, cap, "%s: %s", name, m);
    lua_pop(L, 1);
}

/* The short_src Lua gives a chunk of this name (learnt from an empty chunk). */
static void chunk_short_src(lua_State *L, const char *chunkname, char *out, size_t cap)
{
    out[0] = '\0';
    if (luaL_loadbufferx(L, "", 0, chunkname, "t") != LUA_OK) {
        lua_pop(L, 1);
        return;
    }
    lua_Debug ar;
    if (lua_getinfo(L, ">S", &ar))
        snprintf(out, cap, "%s", ar.short_src);
    else
        lua_pop(L, 1);
}

int fg_sandbox_run(fg_sandbox *sb, const char *source, size_t len, const char *chunkname,
                   int env_index, char *msg, size_t msg_cap)
{
    lua_State *L = sb->L;
    env_index = lua_absindex(L, env_index);
    char short_src[LUA_IDSIZE + 1];
    chunk_short_src(L, chunkname, short_src, sizeof short_src);
    /* Mode "t": a precompiled (bytecode) chunk is refused before it runs; bytecode can
     * break the VM's safety. */
    int status = luaL_loadbufferx(L, source, len, chunkname, "t");
    if (status != LUA_OK) {
        copy_chunk_message(sb, status, chunkname, short_src, msg, msg_cap);
        return -1;
    }
    lua_pushvalue(L, env_index);
    if (!lua_setupvalue(L, -2, 1)) /* _ENV is a main chunk's first upvalue */
        lua_pop(L, 1);
    arm(sb);
    int rc = lua_pcall(L, 0, 1, 0);
    disarm(sb);
    if (rc != LUA_OK) {
        copy_chunk_message(sb, rc, chunkname, short_src, msg, msg_cap);
        return -1;
    }
    return 0;
}

int fg_sandbox_pcall(fg_sandbox *sb, lua_CFunction fn, void *ud, char *msg, size_t msg_cap)
{
    lua_State *L = sb->L;
    lua_pushcfunction(L, fn);
    lua_pushlightuserdata(L, ud);
    arm(sb);
    int rc = lua_pcall(L, 1, 0, 0);
    disarm(sb);
    if (rc != LUA_OK) {
        copy_message(L, msg, msg_cap);
        return -1;
    }
    return 0;
}
