/* SPDX-License-Identifier: Apache-2.0 */
/* Every op kind of the op registry on the GPU against the CPU float64 reference: each
 * example the registry gives (gen/op_registry.c, `examples`) after a conv, with random
 * parameters and inputs, outputs poisoned before the run. The list of kinds is the
 * registry's, not kept by hand: a new op is tested here once it has its entry. */
#include <stdio.h>
#include <string.h>

#include "../../gen/op_registry.h"
#include "gpu_harness.h"

int main(void)
{
    fg_context *ctx = gpu_open("test_gpu_ops");
    int cases = 0, failed = 0;
    for (int k = 0; k < FG_OP_KIND_COUNT; k++) {
        char spec[1024];
        for (int i = 0; fg_op_example_spec((fg_op_kind)k, i, spec, sizeof spec) == 0; i++) {
            char name[96];
            snprintf(name, sizeof name, "%s_%d", fg_op_defs[k].name, i);
            gpu_result r = gpu_check_spec(ctx, name, spec, 3, 1000 + (uint64_t)(k * 3 + i), 1e-4);
            cases++;
            if (!r.ok || !r.pass) {
                failed++;
                printf("FAILED %-20s %s max abs %.3g rel L2 %.3g %lld bad%s\n%s", name, r.ok ? "" : r.error,
                       r.max_abs, r.rel_l2, r.bad, r.nan ? " (NaN)" : "", spec);
            } else {
                printf("ok     %-20s max abs %.3g, rel L2 %.3g\n", name, r.max_abs, r.rel_l2);
            }
        }
    }
    gpu_close(ctx);
    printf("%d cases (every op kind of the registry), %d failed\n", cases, failed);
    return failed ? 1 : 0;
}
