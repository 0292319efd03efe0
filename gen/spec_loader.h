/* SPDX-License-Identifier: Apache-2.0 */
/* Spec files → layer IR. A spec is Lua evaluated in the sandbox (sandbox.h); this file
 * provides the constructors a spec may call (layer, conv2d, relu, ...), walks what the spec
 * returned, checks every field, and then runs shape inference (shape_infer.h). Every error
 * names the spec file, the line and the field. */
#ifndef FG_SPEC_LOADER_H
#define FG_SPEC_LOADER_H

#include <stddef.h>

#include "../common/diag.h"
#include "ir.h"
#include "sandbox.h"

/* Spec files larger than this are refused before Lua sees them. */
#define FG_SPEC_MAX_BYTES (1u << 20)

int fg_spec_load_file(const char *path, fg_layer_ir *ir, fg_error *err);
/* `display_name` stands for the file in messages ("<string>" if NULL). */
int fg_spec_load_string(const char *display_name, const char *source, size_t len, fg_layer_ir *ir,
                        fg_error *err);
/* The same with explicit sandbox limits (tests use small ones). */
int fg_spec_load_string_limited(const char *display_name, const char *source, size_t len,
                                const fg_sandbox_limits *limits, fg_layer_ir *ir, fg_error *err);

/* Every word of the spec language -- constructors, their fields and choices, the layer's
 * fields, the functions a spec sees -- once or more, in no particular order (`fusegen ops
 * --fuzz-dict` sorts them into the fuzzer's dictionary). */
void fg_spec_vocabulary(void (*word)(void *ctx, const char *w), void *ctx);

#endif
