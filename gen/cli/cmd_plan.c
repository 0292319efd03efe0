#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: fusegen plan SPEC\n"
    "\n"
    "Loads SPEC, prints every op with its inferred output shape (the batch N is bound at run\n"
    "time), the parameters it binds (state_dict names and shapes), and the kernel plan: the\n"
    "passes, what each computes and stores, the statistics between them, launch geometry.\n";

static void print_line(void *ctx, const char *line)
{
    (void)ctx;
    puts(line);
}

int cmd_plan(int argc, char **argv)
{
    static const struct option longopts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return EXIT_OK;
        }
        return cli_usage_error("plan", "unknown option");
    }
    if (argc - optind != 1)
        return cli_usage_error("plan", "expects exactly one SPEC");
    static fg_layer_ir ir;
    static fg_plan plan;
    if (cli_load_and_plan(argv[optind], &ir, &plan) != 0)
        return EXIT_FAIL;
    fg_ir_print(&ir, print_line, NULL);
    fg_plan_print(&ir, &plan, print_line, NULL);
    return EXIT_OK;
}
