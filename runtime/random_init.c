/* SPDX-License-Identifier: Apache-2.0 */
#include "random_init.h"

#include <math.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

/* Blocks of random bytes for (seed, stream). */
static void random_bytes(uint32_t *out, size_t n_words, uint64_t seed, uint64_t stream, uint64_t block)
{
    unsigned char key[randombytes_SEEDBYTES] = {0};
    memcpy(key, &seed, sizeof seed);
    memcpy(key + 8, &stream, sizeof stream);
    memcpy(key + 16, &block, sizeof block);
    randombytes_buf_deterministic(out, n_words * sizeof *out, key);
}

enum { CHUNK = 4096 };

void fg_random_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, float lo, float hi)
{
    uint32_t words[CHUNK];
    for (size_t base = 0, block = 0; base < n; base += CHUNK, block++) {
        size_t m = n - base < CHUNK ? n - base : CHUNK;
        random_bytes(words, m, seed, stream, block);
        for (size_t i = 0; i < m; i++) {
            /* 24 random bits: exactly representable, in [0, 1) */
            float u = (float)(words[i] >> 8) * (1.0f / 16777216.0f);
            out[base + i] = lo + (hi - lo) * u;
        }
    }
}

void fg_random_normal(float *out, size_t n, uint64_t seed, uint64_t stream)
{
    uint32_t words[CHUNK];
    for (size_t base = 0, block = 0; base < n; base += CHUNK / 2, block++) {
        size_t m = n - base < CHUNK / 2 ? n - base : CHUNK / 2;
        random_bytes(words, 2 * m, seed, stream, block);
        for (size_t i = 0; i < m; i++) {
            /* Box-Muller; u1 in (0, 1] keeps the log finite */
            double u1 = ((double)(words[2 * i] >> 8) + 1.0) / 16777216.0;
            double u2 = (double)(words[2 * i + 1] >> 8) / 16777216.0;
            out[base + i] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
        }
    }
}

void fg_random_params(const fg_layer_ir *ir, uint64_t seed, float *const *params)
{
    const fg_op *conv = &ir->ops[0];
    int64_t fan_in = conv->in.dim[1] / conv->groups;
    for (int i = 0; i < conv->spatial; i++)
        fan_in *= conv->kernel[i];
    float bound = 1.0f / sqrtf((float)fan_in);
    for (int p = 0; p < ir->n_params; p++) {
        uint64_t stream = 1000 + (uint64_t)p;
        size_t n = (size_t)ir->params[p].count;
        bool is_conv = p == conv->weight_param || p == conv->bias_param;
        bool is_var = false;
        for (int k = 0; k < ir->n_ops; k++)
            is_var |= ir->ops[k].var_param == p;
        for (int j = 0; j < ir->n_pro; j++) /* a batch_norm before the conv */
            is_var |= ir->pro[j].var_param == p;
        if (is_conv)
            fg_random_uniform(params[p], n, seed, stream, -bound, bound);
        else if (is_var)
            fg_random_uniform(params[p], n, seed, stream, 0.5f, 1.5f);
        else
            fg_random_normal(params[p], n, seed, stream);
    }
}
