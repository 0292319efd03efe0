/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors files (the format PyTorch users export state_dicts and tensors with):
 * reading with every structural check, and writing atomically. fusegen computes in float32:
 * F32 tensors are loaded; tensors of other known dtypes (a state_dict's int64
 * num_batches_tracked, say) are checked and listed without data, so that binding one is an
 * error that names it; an unknown dtype makes the file invalid. */
#ifndef FG_SAFETENSORS_H
#define FG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"

#define FG_TENSOR_MAX_RANK 8

typedef struct fg_tensor {
    char *name;
    char dtype[12]; /* "F32", "I64", ... */
    int rank;
    int64_t dim[FG_TENSOR_MAX_RANK];
    size_t count;  /* elements */
    float *data;   /* owned: F32, F16 and BF16 tensors as floats (widened exactly); NULL for others */
} fg_tensor;

typedef struct fg_tensor_file {
    int n;
    fg_tensor *tensors;
} fg_tensor_file;

int fg_safetensors_read(const char *path, fg_tensor_file *out, fg_error *err);
/* `display` names the file in messages. */
int fg_safetensors_parse(const unsigned char *data, size_t size, const char *display, fg_tensor_file *out,
                         fg_error *err);
/* Writes to a temporary file beside `path` and renames it into place. Each tensor's data
 * are floats; a tensor whose dtype is "BF16" or "F16" is written in that dtype (each value
 * rounded to nearest even), any other as F32. */
int fg_safetensors_write(const char *path, const fg_tensor *tensors, int n, fg_error *err);

/* A tensor name (from a file) fit for a message: control characters and non-ASCII bytes as
 * \xHH, long names cut. Returns buf. */
const char *fg_tensor_name_shown(const char *name, char *buf, size_t cap);

const fg_tensor *fg_tensor_find(const fg_tensor_file *f, const char *name);
void fg_tensor_file_free(fg_tensor_file *f);

#endif
