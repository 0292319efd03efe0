/* SPDX-License-Identifier: Apache-2.0 */
/* Files embedded into the library at build time (the Lua templates). */
#ifndef FG_EMBEDDED_H
#define FG_EMBEDDED_H

#include <stddef.h>

typedef struct fg_embedded_file {
    const char *path; /* relative to templates/, e.g. "conv.lua" */
    const char *data; /* NUL-terminated */
    size_t size;      /* without the NUL */
} fg_embedded_file;

extern const fg_embedded_file fg_embedded_files[];
extern const int fg_embedded_file_count;

#endif
