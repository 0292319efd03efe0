/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

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
