/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* fusegen export: the PyTorch exporter lives in the Python package (fusegen.export traces
 * the module with torch.fx), so this command hands over to it, replacing itself with
 * `PYTHON -m fusegen export ARGS...`. PYTHON is $FUSEGEN_PYTHON, else the python3 next to
 * this executable (a venv's bin/, where `pip install` put both), else python3 on the PATH.
 * Run from its own build tree, it puts the source tree's python/ first on PYTHONPATH, so the
 * package is the one this binary was built with. Usage: python/fusegen/__main__.py. */
int cmd_export(int argc, char **argv)
{
    char exe[PATH_MAX] = "", dir[PATH_MAX] = "", python[PATH_MAX] = "python3";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(dir, sizeof dir, "%s", exe);
        }
    }
    const char *env = getenv("FUSEGEN_PYTHON");
    if (env && *env) {
        snprintf(python, sizeof python, "%s", env);
    } else if (dir[0]) {
        char beside[PATH_MAX];
        snprintf(beside, sizeof beside, "%s/python3", dir);
        if (access(beside, X_OK) == 0)
            snprintf(python, sizeof python, "%s", beside);
    }
#if defined(FUSEGEN_BUILD_TREE) && defined(FUSEGEN_SOURCE_TREE)
    char here[PATH_MAX], build[PATH_MAX];
    if (dir[0] && realpath(dir, here) && realpath(FUSEGEN_BUILD_TREE, build) && !strcmp(here, build)) {
        const char *old = getenv("PYTHONPATH");
        size_t len = strlen(FUSEGEN_SOURCE_TREE "/python") + (old && *old ? strlen(old) + 1 : 0) + 1;
        char *path = malloc(len);
        if (path) {
            snprintf(path, len, "%s%s%s", FUSEGEN_SOURCE_TREE "/python", old && *old ? ":" : "", old && *old ? old : "");
            setenv("PYTHONPATH", path, 1);
            free(path);
        }
    }
#endif
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args) {
        cli_error("export: out of memory");
        return EXIT_FAIL;
    }
    args[0] = python;
    args[1] = "-m";
    args[2] = "fusegen";
    args[3] = "export";
    for (int i = 1; i < argc; i++)
        args[3 + i] = argv[i];
    fflush(NULL);
    execvp(python, args);
    cli_error("export: cannot run %s (%s): the exporter is part of the Python package; install it "
              "(pip install . in fusegen's repository) or name a Python that has it in FUSEGEN_PYTHON",
              python, strerror(errno));
    free(args);
    return EXIT_FAIL;
}
