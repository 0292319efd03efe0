/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: the cubin cache's entry parser (header, sizes, checksum, strings,
 * description), and the description reader `fusegen cache ls` and the JIT use.
 *
 * The entry ends in a BLAKE2b checksum that random mutations almost never satisfy, which
 * would leave everything after the checksum check unexplored. So the first input byte
 * picks a mode: odd, the rest is parsed as it is (the checksum gate itself); even, the
 * checksum of the rest is recomputed first (everything behind the gate: header strings,
 * key and arch checks, the description). */
#include <sodium.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "fusegen.h"
#include "kernel_build.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0];
    data++;
    size--;
    unsigned char *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    if (!(mode & 1) && size >= 32)
        crypto_generichash(copy + size - 32, 32, copy, size - 32, NULL, 0);
    static const char key[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const char *expect_key = (mode & 2) ? key : NULL;
    const char *expect_arch = (mode & 4) ? "sm_90" : NULL;
    fg_cache_entry e;
    fg_error err;
    const fg_entry_expect expect = {expect_key, expect_arch, (mode & 4) ? fg_version() : NULL};
    if (fg_cache_parse_entry(copy, size, &expect, &e, &err) == 0) {
        volatile unsigned sink = 0;
        for (size_t i = 0; i < e.cubin_size; i++)
            sink += e.cubin[i];
        (void)sink;
        char layer[128];
        fg_kernel_resources k[FG_MAX_KERNELS];
        (void)strlen(e.arch);
        (void)strlen(e.generator);
        (void)fg_describe_parse(e.meta_json, layer, sizeof layer, k, FG_MAX_KERNELS);
        fg_cache_entry_free(&e);
    }
    free(copy);
    return 0;
}
