/* SPDX-License-Identifier: Apache-2.0 */
/* Uses libfusegen as an application would: loads a small layer into a CPU-only context,
 * binds its parameters and runs the CPU reference; the expected output is worked out by
 * hand below. Prints "consumer: OK ..." and exits 0 when the numbers match. */
#include <fusegen.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *spec =
    "return layer \"consumer\" {\n"
    "  input = { \"N\", 1, 2, 2 },\n"
    "  conv2d { name = \"conv\", out_channels = 1, kernel = 1 },\n"
    "  relu {},\n"
    "  mul { scalar = 3 },\n"
    "}\n";

static int fail(const char *what, fg_status s)
{
    fprintf(stderr, "consumer: %s failed: %s: %s\n", what, fg_status_name(s), fg_last_error());
    return 1;
}

int main(void)
{
    fg_context_options opts;
    fg_context_options_init(&opts);
    opts.device = -1; /* CPU only: no GPU needed */
    opts.cache_path = "";
    fg_context *ctx;
    fg_layer *layer;
    fg_status s;
    if ((s = fg_context_create(&opts, &ctx)) != FG_OK)
        return fail("fg_context_create", s);
    if ((s = fg_layer_load_string(ctx, "consumer.lua", spec, &layer)) != FG_OK)
        return fail("fg_layer_load_string", s);
    const float weight = 2.0f, bias = 0.5f;
    if ((s = fg_layer_bind_host(layer, "conv.weight", &weight, sizeof weight)) != FG_OK ||
        (s = fg_layer_bind_host(layer, "conv.bias", &bias, sizeof bias)) != FG_OK)
        return fail("fg_layer_bind_host", s);
    const float x[4] = {1.0f, -2.0f, 3.0f, -4.0f};
    float y[4];
    if ((s = fg_layer_run_cpu(layer, x, y, 1)) != FG_OK)
        return fail("fg_layer_run_cpu", s);
    /* 3 * relu(2x + 0.5) */
    const float want[4] = {7.5f, 0.0f, 19.5f, 0.0f};
    for (int i = 0; i < 4; i++) {
        if (fabsf(y[i] - want[i]) > 1e-6f) {
            fprintf(stderr, "consumer: y[%d] = %g, expected %g\n", i, y[i], want[i]);
            return 1;
        }
    }
    fg_layer_destroy(layer);
    fg_context_destroy(ctx);
    printf("consumer: OK, fusegen %s, y = [%g, %g, %g, %g]\n", fg_version(), y[0], y[1], y[2], y[3]);
    return 0;
}
