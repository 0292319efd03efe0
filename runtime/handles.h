/* Live-handle registry: every context and layer the API hands out is recorded here until it
 * is destroyed, so that a NULL, stale (destroyed) or forged handle is rejected with a status
 * before anything dereferences it. */
#ifndef FG_HANDLES_H
#define FG_HANDLES_H

#include <stdbool.h>

typedef enum fg_handle_kind { FG_HANDLE_CONTEXT = 1, FG_HANDLE_LAYER = 2 } fg_handle_kind;

int fg_handle_add(void *p, fg_handle_kind kind);
bool fg_handle_live(const void *p, fg_handle_kind kind);
/* Removes p; false when it was not live (double destroy). */
bool fg_handle_remove(void *p, fg_handle_kind kind);
/* Live handles of a kind (a context refuses to be destroyed while its layers live). */
int fg_handle_count_layers_of(const void *ctx, const void *(*owner)(const void *layer));

#endif
