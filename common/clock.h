/* SPDX-License-Identifier: Apache-2.0 */
/* Seconds on the monotonic clock: for the timings the runtime and the CLI report (compile,
 * prepare, first run). */
#ifndef FG_CLOCK_H
#define FG_CLOCK_H

#include <time.h>

static inline double fg_seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
