/* SPDX-License-Identifier: Apache-2.0 */
/* Rendering: hands the IR and the plan to the Lua templates (templates/, embedded in the
 * library) and collects the CUDA C++ they print. The templates run in a Lua state of their
 * own with the base, string, table and math libraries; they are trusted code, but still
 * get no io or os. */
#ifndef FG_RENDER_H
#define FG_RENDER_H

#include <stddef.h>

#include "../common/diag.h"
#include "ir.h"
#include "planner.h"

/* Bounds on rendering: the generated source (today's layers: 20-200 KB; the largest conv the
 * planner accepts, 4096 taps, about 2 MB) and the templates' Lua heap. */
#define FG_MAX_SOURCE_BYTES (16 << 20)
#define FG_RENDER_MAX_HEAP (512 << 20)

typedef struct fg_rendered {
    char *source;     /* NUL-terminated CUDA C++, self-contained */
    size_t length;
} fg_rendered;

int fg_render(const fg_layer_ir *ir, const fg_plan *plan, fg_rendered *out, fg_error *err);
void fg_rendered_free(fg_rendered *r);

/* A digest of every embedded template, part of the generator's identity (cache keys). */
const char *fg_templates_digest(void);

#endif
