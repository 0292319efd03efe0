/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "../gen/block.h"
#include "cli.h"

static const char usage[] =
    "usage: fusegen plan [--arch ARCH] SPEC\n"
    "\n"
    "Loads SPEC, prints every op with its inferred output shape (the batch N is bound at run\n"
    "time), the parameters it binds (state_dict names and shapes), and the kernel plan: the\n"
    "passes, what each computes and stores, the statistics between them, launch geometry.\n"
    "\n"
    "options:\n"
    "  --arch ARCH   plan for this architecture (default " CLI_DEFAULT_ARCH "; sm_80 has no thread-block\n"
    "                clusters, so it plans differently)\n";

static void print_line(void *ctx, const char *line)
{
    (void)ctx;
    puts(line);
}

/* A block: its wiring, each layer as `fusegen plan` prints a layer, then the block's
 * kernels in run order and its workspace. */
static int plan_block(const fg_block_ir *b, const char *arch)
{
    static fg_plan plans[FG_MAX_BLOCK_LAYERS];
    fg_plan_options opts;
    cli_plan_options(&opts, arch);
    fg_error err;
    for (int i = 0; i < b->n_layers; i++)
        if (fg_plan_layer(&b->layers[i], &opts, &plans[i], &err) != 0) {
            fprintf(stderr, "%s\n", err.msg);
            return EXIT_FAIL;
        }
    fg_block_print(b, print_line, NULL);
    for (int i = 0; i < b->n_layers; i++) {
        printf("\n");
        fg_ir_print(&b->layers[i], print_line, NULL);
        fg_plan_print(&b->layers[i], &plans[i], print_line, NULL);
    }
    printf("\nblock kernels, in order on one stream:\n");
    int k = 0, packs = 0;
    for (int i = 0; i < b->n_layers; i++)
        for (int p = 0; p < plans[i].n_passes; p++) {
            if (plans[i].passes[p].kind == FG_PASS_PACK_WEIGHTS)
                packs++; /* not a run's: below */
            else
                printf("  %2d  %-12s %s\n", k++, fg_block_ir_layer_name(b, i), plans[i].passes[p].kernel);
        }
    if (packs)
        printf("packed once at bind, not in a run (each layer its own image of its conv's weights):\n");
    for (int i = 0; i < b->n_layers; i++)
        for (int p = 0; p < plans[i].n_passes; p++)
            if (plans[i].passes[p].kind == FG_PASS_PACK_WEIGHTS)
                printf("      %-12s %s\n", fg_block_ir_layer_name(b, i), plans[i].passes[p].kernel);
    /* (the tensors of the block have its dtype: fp32 blocks keep the words they always had) */
    const bool fp32 = b->dtype == FG_DTYPE_FP32;
    const char *elements = fp32 ? "floats" : b->dtype == FG_DTYPE_BF16 ? "bf16 values" : "fp16 values";
    printf("block workspace: the layers' outputs but the block's, %s each%s:\n", fp32 ? "float32" : fg_dtype_name(b->dtype),
           b->layout == FG_LAYOUT_CHANNELS_LAST ? ", channels last" : "");
    int64_t floats = 0;
    for (int i = 0; i < b->n_layers; i++) {
        int t = b->layer[i].out;
        if (t == b->output)
            continue;
        char shape[128];
        int64_t n = fg_shape_sample_count(&b->tensors[t].shape);
        printf("  %-12s %s   %lld %s a sample\n", b->tensors[t].name,
               fg_shape_str(&b->tensors[t].shape, shape, sizeof shape), (long long)n, elements);
        floats += n;
    }
    /* the statistics a layer gathers of its output for the next one's norm (fp64 sums) */
    int64_t stat_bytes = 0;
    for (int i = 0; i < b->n_layers; i++) {
        int64_t bytes = fg_block_stats_sample_bytes(b, i);
        if (bytes)
            printf("  statistics of %s for its reader's %s   %lld bytes a sample\n", fg_block_ir_layer_name(b, i),
                   fg_op_written_name(&b->layers[i].export_norm), (long long)bytes);
        stat_bytes += bytes;
    }
    char stats[64] = "";
    if (stat_bytes)
        snprintf(stats, sizeof stats, " + N x %lld bytes of statistics", (long long)stat_bytes);
    printf("  then one scratch area for the layers' own workspace (the largest; the layers run one after "
           "the other)\n  in all N x %lld %s%s + the scratch\n",
           (long long)floats, elements, stats);
    return EXIT_OK;
}

int cmd_plan(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, 0, 'h'}, {"arch", required_argument, 0, 'a'}, {0, 0, 0, 0}};
    const char *arch = CLI_DEFAULT_ARCH;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return EXIT_OK;
        }
        if (c == 'a' && fg_arch_sm(optarg) >= 80) {
            arch = optarg;
            continue;
        }
        if (c == 'a')
            return cli_usage_error("plan", "--arch expects sm_80 or newer, got '%s'", optarg);
        return cli_usage_error("plan", "unknown option");
    }
    if (argc - optind != 1)
        return cli_usage_error("plan", "expects exactly one SPEC");
    static fg_block_ir block;
    fg_error err;
    fg_plan_options opts;
    cli_plan_options(&opts, arch); /* a block's IR may depend on the target: as the runtime loads it */
    if (fg_block_spec_load_file_for(argv[optind], &opts, &block, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        fg_block_ir_free(&block);
        return EXIT_FAIL;
    }
    if (!block.single) {
        int rc = plan_block(&block, arch);
        fg_block_ir_free(&block);
        return rc;
    }
    fg_block_ir_free(&block);
    static fg_layer_ir ir;
    static fg_plan plan;
    if (cli_load_and_plan(argv[optind], arch, &ir, &plan) != 0)
        return EXIT_FAIL;
    fg_ir_print(&ir, print_line, NULL);
    fg_plan_print(&ir, &plan, print_line, NULL);
    static fg_plan alternative;
    if (cli_alternative_plan(&ir, arch, &plan, &alternative, true))
        printf("engine: %s or %s, whichever runs faster at the first run on the GPU (timed once, the choice "
               "cached per GPU; FUSEGEN_TUNE=0: %s): the measurements leave this shape open (bench/NOTES.md v7)\n",
               fg_plan_conv_engine_name(&plan), fg_plan_conv_engine_name(&alternative), fg_plan_conv_engine_name(&plan));
    return EXIT_OK;
}
