/* SPDX-License-Identifier: Apache-2.0 */
/* The block specs of specs/blocks/ (docs/spec.md, "Blocks"), for the tests that load them
 * all (test_blocks: they load and plan; test_compile: every layer compiles). */
#ifndef FG_TEST_BLOCK_SPECS_H
#define FG_TEST_BLOCK_SPECS_H

#include <stdio.h>

#include "block.h"
#include "test_util.h"

static const char *const fgt_block_specs[] = {"resnet50_bottleneck", "sd_resnet_block", "nnunet_stage", "convnext"};
#define FGT_N_BLOCK_SPECS (int)(sizeof fgt_block_specs / sizeof *fgt_block_specs)

/* Loads specs/blocks/NAME.lua into b, failing the test with the loader's message. */
static inline void fgt_load_block_spec(int i, fg_block_ir *b)
{
    char path[1024], rel[128];
    snprintf(rel, sizeof rel, "blocks/%s", fgt_block_specs[i]);
    fgt_spec_path(rel, path, sizeof path);
    fg_error err;
    if (fg_block_spec_load_file(path, b, &err) != 0)
        fail_msg("%s", err.msg);
}

#endif
