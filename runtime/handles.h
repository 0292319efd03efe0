/* SPDX-License-Identifier: Apache-2.0 */
/* Live-handle registry: every context and layer the API hands out is recorded here until it
 * is destroyed, so that a NULL, stale (destroyed) or forged handle is rejected with a status
 * before anything dereferences it. Each API call holds its handle (fg_handle_acquire ...
 * fg_handle_release) while it runs; destroying a handle waits for the calls that hold it, and
 * refuses new ones from the moment it starts, so a layer is never freed under a run or a
 * bind in another thread. */
#ifndef FG_HANDLES_H
#define FG_HANDLES_H

#include <stdbool.h>

typedef enum fg_handle_kind { FG_HANDLE_CONTEXT = 1, FG_HANDLE_LAYER = 2, FG_HANDLE_BLOCK = 3 } fg_handle_kind;

int fg_handle_add(void *p, fg_handle_kind kind);
/* Whether p is a live handle of `kind` (and not being destroyed). */
bool fg_handle_live(const void *p, fg_handle_kind kind);
/* Holds p for a call: false when it is not live (or is being destroyed). Every true must be
 * paired with fg_handle_release. */
bool fg_handle_acquire(const void *p, fg_handle_kind kind);
void fg_handle_release(const void *p);
/* Destroys p's registration once no call holds it. With `owner` (a layer's context), the
 * removal of a context is refused while layers of it live: returns their count (> 0) and p
 * stays live. Returns 0 when removed, -1 when p was not live (or another thread is already
 * destroying it). */
int fg_handle_remove(void *p, fg_handle_kind kind, const void *(*owner)(const void *layer));

#endif
