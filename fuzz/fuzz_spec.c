/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: the spec loader (sandboxed Lua, field checks, shape inference), and for
 * every spec it accepts the planner and the renderer, the code that trusts a loaded IR.
 * Small sandbox limits keep each input fast; inputs over 16 KiB are ignored (run with
 * -max_len=16384 or less). Any crash, sanitizer report or leak is a finding. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "planner.h"
#include "render.h"
#include "spec_loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16 * 1024)
        return 0;
    static fg_layer_ir ir; /* large: not on the stack */
    static fg_plan plan;
    fg_sandbox_limits limits = {.memory_bytes = 8u << 20, .instructions = 2000000, .seconds = 2.0};
    fg_error err;
    if (fg_spec_load_string_limited("fuzz.lua", (const char *)data, size, &limits, &ir, &err) != 0)
        return 0;
    for (int sm = 80; sm <= 90; sm += 10) {
        fg_plan_options opts;
        fg_plan_options_init(&opts, sm);
        if (fg_plan_layer(&ir, &opts, &plan, &err) != 0)
            continue;
        fg_rendered src;
        if (fg_render(&ir, &plan, &src, &err) == 0)
            fg_rendered_free(&src);
    }
    return 0;
}
