#include <stdio.h>

#include "cli.h"

int cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("run: not yet built");
    return EXIT_FAIL;
}

int cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("bench: not yet built");
    return EXIT_FAIL;
}
