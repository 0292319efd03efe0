/* SPDX-License-Identifier: Apache-2.0 */
/* `fusegen ops`: the spec language's ops as the op registry (gen/op_registry.c) defines
 * them -- for people, for docs/spec.md's generated table, and for the fuzzer's dictionary. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gen/op_registry.h"
#include "../gen/spec_loader.h"
#include "cli.h"

static const char usage[] =
    "usage: fusegen ops [--markdown | --names | --fuzz-dict]\n"
    "\n"
    "Lists every op a spec can use, from the op registry: its constructor (and aliases), its\n"
    "fields with their types and defaults, and what it computes.\n"
    "\n"
    "options:\n"
    "  --markdown    the table of docs/spec.md (\"Every op\")\n"
    "  --names       every constructor a spec can call, on one line\n"
    "  --fuzz-dict   the libFuzzer dictionary of the spec language (fuzz/fuzz_spec.dict)\n";

static const char *const class_names[] = {"convolution", "elementwise", "elementwise (two operands)",
                                          "normalization", "reduction", "softmax", "pooling", "shape"};

/* "integer 1..1048576", "number", ... */
static void field_type(const fg_field *f, char *buf, size_t cap)
{
    switch (f->type) {
    case FG_FIELD_INT:
        snprintf(buf, cap, "integer %" PRId64 "..%" PRId64, f->lo, f->hi);
        break;
    case FG_FIELD_NUMBER:
    case FG_FIELD_OPT_NUMBER:
        snprintf(buf, cap, "number%s", f->rule == FG_NUMBER_POSITIVE ? " > 0"
                                       : f->rule == FG_NUMBER_NONZERO ? ", not 0"
                                                                       : "");
        break;
    case FG_FIELD_BOOL:
        snprintf(buf, cap, "boolean");
        break;
    case FG_FIELD_NAME:
        snprintf(buf, cap, "name");
        break;
    case FG_FIELD_CHOICE: {
        size_t len = 0;
        for (int i = 0; i < f->n_choices && len < cap; i++)
            len += (size_t)snprintf(buf + len, cap - len, "%s\"%s\"", i ? " or " : "", f->choices[i]);
        break;
    }
    case FG_FIELD_SPATIAL:
        snprintf(buf, cap, "integer or one per spatial dim, %" PRId64 "..%" PRId64, f->lo, f->hi);
        break;
    case FG_FIELD_INT_LIST:
        snprintf(buf, cap, "integer or list of integers");
        break;
    case FG_FIELD_DIMS:
        snprintf(buf, cap, "integer or list of dims");
        break;
    case FG_FIELD_SHAPE:
        snprintf(buf, cap, "list: \"N\" or -1, then integers (one may be -1)");
        break;
    case FG_FIELD_OPERAND:
        snprintf(buf, cap, "scalar = number, param = name [shape = list] or value = name");
        break;
    }
}

/* "required", "0.01", "\"conv\"", ... */
static void field_default(const fg_op_def *d, const fg_field *f, char *buf, size_t cap)
{
    if (f->required) {
        snprintf(buf, cap, "required");
        return;
    }
    switch (f->type) {
    case FG_FIELD_INT:
    case FG_FIELD_NUMBER:
        snprintf(buf, cap, "%g", f->def);
        break;
    case FG_FIELD_SPATIAL:
        if (f->def == 0 && f->lo > 0)
            snprintf(buf, cap, "the kernel");
        else
            snprintf(buf, cap, "%g", f->def);
        break;
    case FG_FIELD_OPT_NUMBER:
        snprintf(buf, cap, "none");
        break;
    case FG_FIELD_BOOL:
        snprintf(buf, cap, "%s", f->def != 0 ? "true" : "false");
        break;
    case FG_FIELD_NAME:
        snprintf(buf, cap, "\"%s\"", f->def_name ? f->def_name : d->name);
        break;
    case FG_FIELD_CHOICE:
        snprintf(buf, cap, "\"%s\"", f->choices[(int)f->def]);
        break;
    case FG_FIELD_INT_LIST:
    case FG_FIELD_DIMS:
    case FG_FIELD_SHAPE:
    case FG_FIELD_OPERAND:
        snprintf(buf, cap, "none");
        break;
    }
}

/* "`conv2d`" or "`max_pool`, `max_pool2d`, `max_pool3d`" */
static void constructors(const fg_op_def *d, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "`%s`", d->name);
    for (int a = 0; a < 2 && d->aliases[a].name && len < cap; a++)
        len += (size_t)snprintf(buf + len, cap - len, ", `%s`", d->aliases[a].name);
}

static void print_markdown(void)
{
    puts("| op | kind | fields: type (default) | computes |");
    puts("|---|---|---|---|");
    for (int k = 0; k < FG_OP_KIND_COUNT; k++) {
        const fg_op_def *d = &fg_op_defs[k];
        char names[128], fields[2048] = "", type[160], def[64];
        constructors(d, names, sizeof names);
        size_t len = 0;
        for (int i = 0; i < FG_MAX_FIELDS && d->fields[i].name && len < sizeof fields; i++) {
            const fg_field *f = &d->fields[i];
            field_type(f, type, sizeof type);
            field_default(d, f, def, sizeof def);
            if (f->type == FG_FIELD_OPERAND)
                len += (size_t)snprintf(fields + len, sizeof fields - len, "%sone operand: %s", i ? "; " : "", type);
            else
                len += (size_t)snprintf(fields + len, sizeof fields - len, "%s`%s`%s: %s (%s)", i ? "; " : "",
                                        f->name, f->type == FG_FIELD_DIMS && !strcmp(f->name, "dims") ? "/`dim`" : "",
                                        type, def);
        }
        printf("| %s | %s | %s | %s |\n", names, class_names[d->cls], fields[0] ? fields : "", d->doc);
    }
}

static void print_list(void)
{
    for (int k = 0; k < FG_OP_KIND_COUNT; k++) {
        const fg_op_def *d = &fg_op_defs[k];
        char names[128], type[160], def[64];
        constructors(d, names, sizeof names);
        printf("%s  (%s)\n    %s\n", names, class_names[d->cls], d->doc);
        for (int i = 0; i < FG_MAX_FIELDS && d->fields[i].name; i++) {
            const fg_field *f = &d->fields[i];
            field_type(f, type, sizeof type);
            field_default(d, f, def, sizeof def);
            printf("    %-18s %s; %s (%s%s)\n", f->type == FG_FIELD_OPERAND ? "operand" : f->name, type, f->doc,
                   f->required ? "" : "default ", def);
        }
    }
}

/* The dictionary: every word of the language, sorted and unique, then Lua's tokens and a few
 * numbers that stress the checks. */
typedef struct words {
    const char *w[512];
    int n;
} words;

static void add_word(void *ctx, const char *w)
{
    words *ws = ctx;
    for (int i = 0; i < ws->n; i++)
        if (strcmp(ws->w[i], w) == 0)
            return;
    if (ws->n < (int)(sizeof ws->w / sizeof *ws->w))
        ws->w[ws->n++] = w;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void print_fuzz_dict(void)
{
    static words ws;
    fg_spec_vocabulary(add_word, &ws);
    qsort(ws.w, (size_t)ws.n, sizeof *ws.w, by_name);
    puts("# fuzz_spec: the spec language (constructors, fields, choices) and Lua tokens.");
    puts("# Generated by `fusegen ops --fuzz-dict` from the op registry; tests/doc_examples.sh checks it.");
    for (int i = 0; i < ws.n; i++)
        printf("\"%s\"\n", ws.w[i]);
    static const char *const lua_tokens[] = {
        "return", "local", "function", "end", "for",  "in",  "do",  "while", "repeat", "until", "if",
        "then",   "else",  "elseif",   "nil", "true", "false", "and", "or",  "not",    "goto",  "break",
        "..",     "...",   "==",       "~=",  "<=",   ">=",  "//",  "::",  "{",      "}",     "[[",
        "]]",     "--[[",  "#",        "1e308", "-0", "0x7fffffffffffffff", "nan", "inf", "1e-320", "3.5e38"};
    for (size_t i = 0; i < sizeof lua_tokens / sizeof *lua_tokens; i++)
        printf("\"%s\"\n", lua_tokens[i]);
}

int cmd_ops(int argc, char **argv)
{
    static const struct option longopts[] = {{"help", no_argument, 0, 'h'},
                                              {"markdown", no_argument, 0, 'm'},
                                              {"names", no_argument, 0, 'n'},
                                              {"fuzz-dict", no_argument, 0, 'f'},
                                              {0, 0, 0, 0}};
    int mode = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return EXIT_OK;
        }
        if (c == 'm' || c == 'n' || c == 'f') {
            if (mode)
                return cli_usage_error("ops", "give at most one of --markdown, --names, --fuzz-dict");
            mode = c;
            continue;
        }
        return cli_usage_error("ops", "unknown option");
    }
    if (optind != argc)
        return cli_usage_error("ops", "takes no arguments");
    if (mode == 'm') {
        print_markdown();
    } else if (mode == 'n') {
        int n;
        const char *const *names = fg_constructor_names(&n);
        for (int i = 0; i < n; i++)
            printf("%s%s", i ? " " : "", names[i]);
        putchar('\n');
    } else if (mode == 'f') {
        print_fuzz_dict();
    } else {
        print_list();
    }
    return EXIT_OK;
}
