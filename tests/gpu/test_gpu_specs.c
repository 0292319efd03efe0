/* SPDX-License-Identifier: Apache-2.0 */
/* Every spec in specs/ on the GPU against the CPU float64 reference: batch 1 and an odd
 * batch, fresh random inputs and parameters each time, the output poisoned with NaN before
 * each run so that an unwritten element fails. The odd batch writes its output one float
 * past a 16-byte boundary (a view's pointer), where vectorized stores must not be used. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "specs";
    fg_context *ctx = gpu_open("test_gpu_specs");
    DIR *d = opendir(dir);
    if (!d) {
        printf("FAILED: cannot open %s\n", dir);
        return 1;
    }
    struct dirent *e;
    int cases = 0, failed = 0;
    char names[64][256];
    int n = 0;
    while ((e = readdir(d)) && n < 64) {
        size_t len = strlen(e->d_name);
        if (len > 4 && !strcmp(e->d_name + len - 4, ".lua"))
            snprintf(names[n++], sizeof names[0], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    static const int64_t batches[] = {1, 3};
    for (int i = 0; i < n; i++) {
        char *src = gpu_read_file(names[i]);
        if (!src) {
            printf("FAILED %s: unreadable\n", names[i]);
            failed++;
            continue;
        }
        for (int b = 0; b < 2; b++) {
            uint64_t seed = 100 + (uint64_t)(i * 2 + b);
            gpu_result r = gpu_check_spec_at(ctx, names[i], src, batches[b], seed, 1e-4, b);
            cases++;
            if (!r.ok || !r.pass)
                failed++;
            if (!r.ok)
                printf("FAILED %-24s batch %lld: %s\n", names[i], (long long)batches[b], r.error);
            else
                printf("%s %-24s batch %lld%s: max abs %.3g, rel L2 %.3g, %lld/%lld outside 1e-4%s\n",
                       r.pass ? "ok    " : "FAILED", names[i], (long long)batches[b], b ? " (output unaligned)" : "",
                       r.max_abs, r.rel_l2, r.bad, r.count, r.nan ? " (NaN)" : "");
        }
        free(src);
    }
    gpu_close(ctx);
    printf("%d cases, %d failed\n", cases, failed);
    return failed ? 1 : 0;
}
