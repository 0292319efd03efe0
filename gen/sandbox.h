/* SPDX-License-Identifier: Apache-2.0 */
/* A Lua state for evaluating untrusted spec files: text chunks only, an empty environment
 * filled by the caller, a memory cap and an instruction budget. One state per spec, so
 * specs loaded one after another never see each other. */
#ifndef FG_SANDBOX_H
#define FG_SANDBOX_H

#include <lua.h>
#include <stddef.h>

typedef struct fg_sandbox_limits {
    size_t memory_bytes;     /* total Lua heap */
    size_t allocated_bytes;  /* all allocations of a run added up (churn); 0: 16 x memory_bytes */
    long long instructions;  /* VM instructions before the spec is stopped */
    double seconds;          /* CPU time of the running thread before the spec is stopped */
} fg_sandbox_limits;

extern const fg_sandbox_limits fg_sandbox_default_limits;

typedef struct fg_sandbox fg_sandbox;

fg_sandbox *fg_sandbox_new(const fg_sandbox_limits *limits);
void fg_sandbox_free(fg_sandbox *sb);
lua_State *fg_sandbox_state(fg_sandbox *sb);

/* Loads `source` as a text chunk named `chunkname` (shown in messages as the file name)
 * with the table at stack index `env_index` as its only environment, and runs it in
 * protected mode with the limits armed. On success pushes the chunk's first result and
 * returns 0; on failure pushes nothing and copies Lua's message to msg. */
int fg_sandbox_run(fg_sandbox *sb, const char *source, size_t len, const char *chunkname,
                   int env_index, char *msg, size_t msg_cap);

/* Runs a C function under lua_pcall with the limits armed (used to walk the spec's tables:
 * a hostile table can still carry metamethods-free but huge contents). */
int fg_sandbox_pcall(fg_sandbox *sb, lua_CFunction fn, void *ud, char *msg, size_t msg_cap);

#endif
