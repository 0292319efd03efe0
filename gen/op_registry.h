/* SPDX-License-Identifier: Apache-2.0 */
/* The op registry: the one place that says what each op of the spec language is.
 *
 * One entry per op kind (gen/op_registry.c, indexed by fg_op_kind) gives its constructor
 * name and aliases, its class, its fields (type, default, bounds, the fg_op member each
 * fills), its cross-field checks, its CUDA semantics (a snippet for elementwise ops, the
 * inline loop and the accumulators for reductions) and a line of documentation. Everything
 * else reads it: the spec loader (constructors, fields, did-you-mean), describe (fusegen
 * plan), shape inference (which module parameters an op binds), the planner (which
 * statistics an op needs, how they are accumulated and finalized), the bridge to the
 * templates (gen/render.c pushes each op's entry), the launcher (how an accumulator is
 * cleared) and the generated docs table and fuzz dictionary (`fusegen ops`).
 *
 * The accumulators statistics are gathered in across thread blocks are monoids, listed in
 * fg_accum_defs: identity, combine, storage and precision, and how a finalize pass turns
 * them into what a consumer reads. A reduction names the monoids it needs.
 *
 * The float64 CPU reference (reference/cpu_reference.c) stays hand-written: it is the
 * independent oracle the GPU is tested against. It and every table indexed by kind carry a
 * static_assert on FG_OP_KIND_COUNT, so an op cannot be half-wired: adding one fails the
 * build until each table has been visited (docs/design.md, "Adding an op"). */
#ifndef FG_OP_REGISTRY_H
#define FG_OP_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"

/* ---- fields ---------------------------------------------------------------------------- */

typedef enum fg_field_type {
    FG_FIELD_INT,        /* a whole number in [lo, hi] -> int64_t member */
    FG_FIELD_NUMBER,     /* a finite number that fp32 holds -> double member */
    FG_FIELD_OPT_NUMBER, /* the same, optional: `flag` (a bool member) records that it was given */
    FG_FIELD_BOOL,       /* true or false -> bool member */
    FG_FIELD_NAME,       /* a state_dict-safe name -> char[FG_NAME_MAX] member */
    FG_FIELD_CHOICE,     /* one of `choices` -> int member (the index) */
    FG_FIELD_SPATIAL,    /* one integer or one per spatial dim -> int[3] member; `flag`: int count given */
    FG_FIELD_INT_LIST,   /* a list of up to FG_MAX_RANK - 1 integers -> int64_t list/n_list */
    FG_FIELD_DIMS,       /* `dim` or `dims` (spec fields), integers -> dims/n_dims */
    FG_FIELD_SHAPE,      /* a shape: "N" (or -1) first, then extents or one -1 -> int64_t list/n_list */
    FG_FIELD_OPERAND,    /* `scalar`, `param` (with `shape`) or `value`: a binary op's operand */
} fg_field_type;

/* Extra rules on a NUMBER field, checked with the spec's file and line. */
typedef enum fg_number_rule {
    FG_NUMBER_ANY = 0,
    FG_NUMBER_POSITIVE,
    FG_NUMBER_NONZERO,
} fg_number_rule;

/* How `fusegen plan` prints a field after the op's name. */
typedef enum fg_describe {
    FG_DESCRIBE_KV = 0,   /* " field=value" */
    FG_DESCRIBE_MODULE,   /* " value:" (the module name that prefixes state_dict keys) */
    FG_DESCRIBE_BARE,     /* " field" when true (bools) */
    FG_DESCRIBE_GIVEN,    /* " field=value" only when given (OPT_NUMBER) */
    FG_DESCRIBE_NONE,     /* not printed */
} fg_describe;

typedef struct fg_field {
    const char *name;          /* as a spec writes it */
    fg_field_type type;
    size_t member;             /* offsetof(fg_op, ...) of what it fills */
    size_t flag;               /* OPT_NUMBER: offsetof the bool "given"; SPATIAL: of the int count */
    bool required;
    double def;                /* default of INT, NUMBER, OPT_NUMBER, BOOL, CHOICE (index), SPATIAL */
    const char *def_name;      /* NAME default; NULL: the constructor's own name */
    int64_t lo, hi;            /* INT, SPATIAL, INT_LIST bounds */
    fg_number_rule rule;
    const char *const *choices;
    int n_choices;
    fg_describe describe;
    const char *doc;           /* one line for docs/spec.md */
} fg_field;

enum { FG_MAX_FIELDS = 8 };

/* ---- CUDA semantics ---------------------------------------------------------------------- */

/* A CUDA C expression with placeholders: {x} (the value; {a} and {b} for binary ops) and
 * {field} (a field's value as a float literal, e.g. {negative_slope}). A unary op's snippet
 * is a list of steps applied in turn (each step's {x} is the previous step's result); a
 * step with a guard applies only when it holds: "field?" (an OPT_NUMBER given) or
 * "field=choice". */
typedef struct fg_snippet {
    const char *guard;
    const char *text;
    /* where the layer's plan allows a faster, less exact form of the step (fg_plan.fast_gelu:
     * precision "tf32" and FUSEGEN_FAST_GELU=2), this text instead; NULL: none */
    const char *fast;
} fg_snippet;

enum { FG_MAX_SNIPPET_STEPS = 2 };

/* The accumulators (monoids) that gather a statistic across thread blocks. */
typedef enum fg_accum_kind {
    FG_ACCUM_MOMENTS, /* sum and sum of squares, fp64 (norms) */
    FG_ACCUM_SUM,     /* fp64 sum */
    FG_ACCUM_MAX,     /* max, as an order-preserving int (atomicMax) */
    FG_ACCUM_MIN,
    FG_ACCUM_SUMEXP,  /* fp64 sum of exp(x - max), after a FG_ACCUM_MAX of the same value */
    FG_ACCUM_KIND_COUNT
} fg_accum_kind;

/* A monoid, and every piece of code that handles it. Placeholders in the CUDA texts: {s}
 * and {q} (a thread's partials, float registers), {x} (an element's contribution), {acc}
 * (the accumulator array), {k} (a key), {max} (the FG_ACCUM_MAX array a SUMEXP depends on),
 * {v} (the element's value), {key}. Multi-line texts keep their own indentation. */
typedef struct fg_accum_def {
    const char *name;           /* the templates' name ("moments") */
    const char *describe;       /* for `fusegen plan` */
    int bytes_per_key;          /* workspace */
    uint32_t clear_word;        /* the 32-bit pattern the launcher clears it with (the identity) */
    const char *ctype;          /* element type of the kernel parameter ("double", "int") */
    const char *identity;       /* a partial's starting value (float) */
    const char *combine;        /* adds element {x} into the partials {s} (and {q}) */
    const char *contribution;   /* what an element adds, from its value {v}; NULL: {v} itself */
    const char *flush;          /* plain atomics of partials {s}, {q} under key {k} */
    const char *merge;          /* lanes holding one key combine their partials into ms (mq) */
    const char *feed;           /* the warp-aggregated atomics of mk, ms (mq) or {k}, {s} ({q}) */
    bool extreme;               /* max/min: merged as floats, fed as ordered ints */
    bool needs_max;             /* reads the FG_ACCUM_MAX of the same value ({max}) */
    /* a thread's float partials add up {x} = the element minus a shift (the slot's first
     * element) and count the elements; they become fp64 sums of the values before any merge
     * (templates/feed.lua): a variance from float sums of x and x^2 is lost where the mean is
     * far above the spread */
    bool shifted;
    /* a finalize pass (one thread per key) writing fg_stat {a, b}: statements over {acc},
     * {max}, {stats}, {key}, {count} (elements per key), {eps}; NULL: read directly */
    const char *finalize;
} fg_accum_def;

extern const fg_accum_def fg_accum_defs[FG_ACCUM_KIND_COUNT];

/* What a norm's statistic spans. */
typedef enum fg_norm_channels {
    FG_NORM_GROUPS,    /* runs of C / groups channels (group_norm) */
    FG_NORM_EACH,      /* every channel on its own (instance_norm, batch_norm) */
    FG_NORM_TRAILING,  /* the trailing normalized_rank dims (layer_norm) */
    FG_NORM_ACROSS,    /* all channels at each position (layer_norm { dim = 1 }, ConvNeXt's) */
} fg_norm_channels;

typedef struct fg_norm_def {
    fg_norm_channels channels;
    bool over_batch;   /* the statistic spans the batch (batch_norm with batch statistics) */
} fg_norm_def;

/* A reduction (or softmax): evaluated inline as a loop where its extent is small, else
 * gathered in accumulators by earlier passes. Inline texts use {acc} (the loop's state
 * variable), {x} (an element) and {count} (elements reduced, a float literal); `read` uses
 * {a0}, {a1} (the accumulators, in the order of `accums`), {key} and {count} (a double
 * literal). */
typedef struct fg_reduce_def {
    const char *init;   /* declares {acc} */
    const char *step;   /* adds {x} into {acc} */
    const char *final;  /* the result; "{acc}": the state itself */
    fg_accum_kind accums[2];
    int n_accums;
    const char *read;   /* the reduced value from the accumulators (reductions) */
} fg_reduce_def;

/* ---- the op entry ------------------------------------------------------------------------ */

typedef struct fg_op_alias {
    const char *name;
    int spatial;        /* pools: max_pool2d fixes 2 spatial dims; 0 otherwise */
} fg_op_alias;

typedef struct fg_op_def {
    const char *name;              /* the constructor a spec calls */
    fg_op_alias aliases[2];        /* further constructors of the same kind */
    fg_op_class cls;
    /* May come before the convolution (docs/spec.md, "Prologue"): applied to the conv's input
     * as it is staged (elementwise ops; norms from a statistics pass over the input, or from
     * running statistics). Every other op before the conv is refused by the spec loader. */
    bool prologue;
    int spatial;                   /* convs: the spatial dims (2, 3) */
    fg_field fields[FG_MAX_FIELDS];
    /* Kinds sharing a constructor (max: the reduction and the elementwise maximum): the
     * fields whose presence selects this kind; and the hint when a field of the other kind
     * is given too. */
    const char *selectors[3];
    const char *conflict_hint;
    /* Cross-field checks after the fields are read: returns the field at fault with its
     * message in msg, or NULL. */
    const char *(*check)(fg_op *op, char *msg, size_t cap);
    fg_snippet cuda[FG_MAX_SNIPPET_STEPS]; /* unary: steps; binary: one text of {a}, {b} */
    fg_norm_def norm;              /* FG_CLASS_NORM */
    const fg_reduce_def *reduce;   /* FG_CLASS_REDUCE, FG_CLASS_SOFTMAX, FG_CLASS_POOL (inline) */
    /* Norms and softmax: the accumulators of their statistic, finalized before the op reads
     * it. NULL for an op that needs none; stats_unless, when set, says when an op of a kind
     * that has them needs none after all (batch_norm with running statistics). */
    const fg_reduce_def *stats;
    bool (*stats_unless)(const fg_op *op);
    const char *doc;               /* one line for docs/spec.md's table */
    /* How the op is used in the tests that run every kind (tests/test_render.c, the GPU's
     * test_gpu_ops.c): spec text placed after `conv2d { out_channels = 8, kernel = 3,
     * padding = 1, as = "c" }` on an input [N, 4, 34, 34] (the convs: the whole conv, also on
     * [N, 4, 8, 10, 12] for conv3d). NULL entries after the first; none at all: `name {}`. */
    const char *examples[3];
} fg_op_def;

extern const fg_op_def fg_op_defs[FG_OP_KIND_COUNT];

const fg_op_def *fg_op_def_of(fg_op_kind kind);

/* Every constructor and alias a spec can call, "layer" first; the count through *n. */
const char *const *fg_constructor_names(int *n);

/* The statistics op `op` needs before it can produce an element: its reduce_def (the
 * accumulators to gather), or NULL. */
const fg_reduce_def *fg_op_stats(const fg_op *op);

/* A whole spec (layer "<constructor>_<i>") that uses example i of kind `kind`: what the
 * tests that run every kind load. Returns 0, or -1 when the kind has no example i. */
int fg_op_example_spec(fg_op_kind kind, int i, char *buf, size_t cap);

/* A field of kind `kind` by spec name (NULL if none). */
const fg_field *fg_op_field(fg_op_kind kind, const char *name);
/* Whether one of the snippet steps that apply to `op` (their guards hold: "field?" an optional
 * number given, "field=choice"; templates/ops.lua's guard_holds reads them the same way) has a
 * fast form (fg_snippet.fast). */
bool fg_op_has_fast_step(const fg_op *op);

#endif
