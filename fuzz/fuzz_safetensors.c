/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: the safetensors reader (8-byte header length, JSON header, dtypes,
 * shapes, data offsets, overlaps). Every tensor of an accepted file is read back in full,
 * so a wrong size or offset shows up as an out-of-bounds read. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_tensor_file f;
    fg_error err;
    if (fg_safetensors_parse(data, size, "fuzz.safetensors", &f, &err) != 0)
        return 0;
    volatile float sink = 0;
    for (int i = 0; i < f.n; i++) {
        const fg_tensor *t = &f.tensors[i];
        if (t->name && fg_tensor_find(&f, t->name) == NULL)
            __builtin_trap(); /* every tensor can be found by its name */
        (void)strlen(t->dtype);
        if (t->data)
            for (size_t k = 0; k < t->count; k++)
                sink += t->data[k];
    }
    (void)sink;
    fg_tensor_file_free(&f);
    return 0;
}
