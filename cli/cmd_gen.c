/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../gen/block.h"
#include "cli.h"
#include "../gen/render.h"

static const char usage[] =
    "usage: fusegen gen [--arch ARCH] SPEC [-o DIR]\n"
    "\n"
    "Writes the CUDA C++ generated for SPEC: to stdout, or with -o to DIR/<layer>.cu.\n"
    "The source is self-contained (no #include) and is exactly what NVRTC compiles.\n"
    "\n"
    "options:\n"
    "  -o, --output DIR   directory to write <layer>.cu into (created if missing)\n"
    "  --arch ARCH        generate for this architecture (default " CLI_DEFAULT_ARCH ")\n";

static int gen_one(const fg_layer_ir *irp, const fg_plan *planp, const char *outdir);

int cmd_gen(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, 0, 'h'}, {"output", required_argument, 0, 'o'},
        {"arch", required_argument, 0, 'a'}, {0, 0, 0, 0}};
    const char *outdir = NULL, *arch = CLI_DEFAULT_ARCH;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return EXIT_OK;
        }
        if (c == 'o')
            outdir = optarg;
        else if (c == 'a' && fg_arch_sm(optarg) >= 80)
            arch = optarg;
        else if (c == 'a')
            return cli_usage_error("gen", "--arch expects sm_80 or newer, got '%s'", optarg);
        else
            return cli_usage_error("gen", "unknown option");
    }
    if (argc - optind != 1)
        return cli_usage_error("gen", "expects exactly one SPEC");
    static fg_block_ir block;
    fg_error berr;
    fg_plan_options bopts;
    cli_plan_options(&bopts, arch); /* a block's IR may depend on the target: as the runtime loads it */
    if (fg_block_spec_load_file_for(argv[optind], &bopts, &block, &berr) != 0) {
        fprintf(stderr, "%s\n", berr.msg);
        fg_block_ir_free(&block);
        return EXIT_FAIL;
    }
    if (!block.single) {
        /* a block: each layer's source, in run order (stdout, or BLOCK.LAYER.cu files) */
        fg_plan_options opts;
        cli_plan_options(&opts, arch);
        int rc = EXIT_OK;
        for (int i = 0; i < block.n_layers && rc == EXIT_OK; i++) {
            static fg_plan lplan;
            if (fg_plan_layer(&block.layers[i], &opts, &lplan, &berr) != 0) {
                fprintf(stderr, "%s\n", berr.msg);
                rc = EXIT_FAIL;
            } else {
                if (!outdir)
                    printf("// ---- block %s, layer %s ----\n", block.name, fg_block_ir_layer_name(&block, i));
                rc = gen_one(&block.layers[i], &lplan, outdir);
            }
        }
        fg_block_ir_free(&block);
        return rc;
    }
    fg_block_ir_free(&block);
    static fg_layer_ir ir;
    static fg_plan plan;
    if (cli_load_and_plan(argv[optind], arch, &ir, &plan) != 0)
        return EXIT_FAIL;
    return gen_one(&ir, &plan, outdir);
}

/* Renders one layer: to stdout, or OUTDIR/NAME.cu. */
static int gen_one(const fg_layer_ir *irp, const fg_plan *planp, const char *outdir)
{
    fg_rendered src;
    fg_error err;
    if (fg_render(irp, planp, &src, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return EXIT_FAIL;
    }
    int rc = EXIT_OK;
    if (!outdir) {
        fwrite(src.source, 1, src.length, stdout);
    } else {
        if (mkdir(outdir, 0755) != 0 && errno != EEXIST) {
            cli_error("cannot create %s: %s", outdir, strerror(errno));
            fg_rendered_free(&src);
            return EXIT_FAIL;
        }
        char path[2048], tmp[2100];
        snprintf(path, sizeof path, "%s/%s.cu", outdir, irp->name);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        struct stat st; /* renaming would replace a device node or FIFO with a regular file */
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
            cli_error("%s exists and is not a regular file; refusing to replace it", path);
            fg_rendered_free(&src);
            return EXIT_FAIL;
        }
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(src.source, 1, src.length, f) != src.length || fclose(f) != 0 || rename(tmp, path) != 0) {
            cli_error("cannot write %s: %s", path, strerror(errno));
            remove(tmp);
            rc = EXIT_FAIL;
        } else {
            fprintf(stderr, "wrote %s (%zu bytes)\n", path, src.length);
        }
    }
    fg_rendered_free(&src);
    return rc;
}
