/* SPDX-License-Identifier: Apache-2.0 */
/* Error messages: one mechanism for the whole library. A function that can fail takes an
 * fg_error* and fills it; the caller decides whether to print it (CLI) or keep it as the
 * thread's last error (C API). */
#ifndef FG_DIAG_H
#define FG_DIAG_H

#include <stdarg.h>

typedef struct fg_error {
    char msg[4096];
} fg_error;

#if defined(__GNUC__)
#define FG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FG_PRINTF(a, b)
#endif

/* Sets the message (replacing any earlier one). Always returns -1 so that callers can
 * write `return fg_fail(err, ...)`. A NULL err is allowed and ignored. */
int fg_fail(fg_error *err, const char *fmt, ...) FG_PRINTF(2, 3);
int fg_vfail(fg_error *err, const char *fmt, va_list ap);
/* Prepends "context: " to the current message. */
int fg_fail_context(fg_error *err, const char *fmt, ...) FG_PRINTF(2, 3);
void fg_error_clear(fg_error *err);

/* "did you mean 'x'?" support: the candidate closest to `word` by edit distance, or NULL
 * when none is close enough to be a plausible misspelling. */
const char *fg_nearest_name(const char *word, const char *const *candidates, int n);

#endif
