/* SPDX-License-Identifier: Apache-2.0 */
#include "../common/diag.h"

#include <stdio.h>
#include <string.h>

int fg_vfail(fg_error *err, const char *fmt, va_list ap)
{
    if (err)
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return -1;
}

int fg_fail(fg_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fg_vfail(err, fmt, ap);
    va_end(ap);
    return -1;
}

int fg_fail_context(fg_error *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[1024], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* truncation of an over-long message is acceptable; build it piecewise so the compiler
     * does not flag it */
    size_t plen = strlen(prefix);
    if (plen > sizeof err->msg - 3)
        plen = sizeof err->msg - 3;
    memcpy(err->msg, prefix, plen);
    memcpy(err->msg + plen, ": ", 2);
    size_t room = sizeof err->msg - plen - 3, olen = strlen(old);
    if (olen > room)
        olen = room;
    memcpy(err->msg + plen + 2, old, olen);
    err->msg[plen + 2 + olen] = '\0';
    return -1;
}

void fg_error_clear(fg_error *err)
{
    if (err)
        err->msg[0] = '\0';
}

/* Levenshtein distance with a two-row table; names are short, so the O(n*m) cost is nothing. */
static int edit_distance(const char *a, const char *b)
{
    enum { MAXLEN = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= MAXLEN || lb >= MAXLEN)
        return MAXLEN;
    int prev[MAXLEN + 1], cur[MAXLEN + 1];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            int best = sub < del ? sub : del;
            cur[j] = best < ins ? best : ins;
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

const char *fg_nearest_name(const char *word, const char *const *candidates, int n)
{
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(word, candidates[i]);
        if (d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    /* A third of the word's length (at least 2 edits) still reads as a typo. */
    int limit = (int)strlen(word) / 3;
    if (limit < 2)
        limit = 2;
    return best_d <= limit ? best : NULL;
}
