/* SPDX-License-Identifier: Apache-2.0 */
#include "safetensors.h"
#include "../common/half.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header over this is refused before parsing. The format's reference allows 100 MB, but a
 * state_dict's header is about 100 bytes a tensor: 16 MiB is 160k tensors, and parsing
 * 100 MB of JSON takes gigabytes. So are more tensors than this (500k empty tensors took
 * 619 MB): a layer binds at most 64 parameters. */
#define MAX_HEADER_BYTES (16u << 20)
#define MAX_TENSORS 65536

typedef struct span {
    uint64_t begin, end;
    const char *name;
} span;

/* By begin, then end, then name: a zero-size tensor at the same offset as the next one sorts
 * first whatever the header's key order (the qsort tie made that order decide). */
static int by_offsets(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* A tensor name for messages: printable ASCII as is, anything else (control characters,
 * escapes, bytes of other encodings) as \xHH, at most ~120 characters. Names come from the
 * file: raw, they could rewrite the user's terminal. */
const char *fg_tensor_name_shown(const char *name, char *buf, size_t cap)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && n + 8 < cap; p++) {
        if (n > 120) {
            n += (size_t)snprintf(buf + n, cap - n, "...");
            break;
        }
        if (*p >= 0x20 && *p < 0x7f && *p != '\\')
            buf[n++] = (char)*p;
        else
            n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", *p);
    }
    buf[n < cap ? n : cap - 1] = '\0';
    return buf;
}

/* IEEE binary16 -> float, exactly (every half is a float): subnormals are man x 2^-24. */
static float half_to_float(uint16_t h)
{
    int exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    float v = exp == 0    ? ldexpf((float)man, -24)
              : exp == 31 ? (man ? NAN : INFINITY)
                          : ldexpf((float)(man | 0x400), exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* bfloat16 -> float, exactly: bfloat16 is a float's upper half. */
static float bfloat16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static int parse_tensor(const char *display, const char *raw_name, json_t *info, uint64_t data_size,
                        const unsigned char *data, fg_tensor *t, span *sp, fg_error *err)
{
    char name_buf[512];
    const char *name = fg_tensor_name_shown(raw_name, name_buf, sizeof name_buf); /* for messages */
    if (!json_is_object(info))
        return fg_fail(err, "%s: tensor '%s': its entry is not an object", display, name);
    const char *dtype = json_string_value(json_object_get(info, "dtype"));
    json_t *shape = json_object_get(info, "shape");
    json_t *offs = json_object_get(info, "data_offsets");
    if (!dtype)
        return fg_fail(err, "%s: tensor '%s': missing dtype", display, name);
    static const struct {
        const char *name;
        int bytes;
    } known[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
                 {"U8", 1},  {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    int elem = 0;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcmp(dtype, known[i].name) == 0)
            elem = known[i].bytes;
    if (!elem)
        return fg_fail(err, "%s: tensor '%s': unknown dtype '%s'", display, name,
                       fg_tensor_name_shown(dtype, (char[64]){0}, 64));
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
    if (!json_is_array(shape) || json_array_size(shape) > FG_TENSOR_MAX_RANK)
        return fg_fail(err, "%s: tensor '%s': shape must be a list of at most %d dims", display, name,
                       FG_TENSOR_MAX_RANK);
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
        !json_is_integer(json_array_get(offs, 1)))
        return fg_fail(err, "%s: tensor '%s': data_offsets must be [begin, end]", display, name);
    json_int_t b = json_integer_value(json_array_get(offs, 0)), e = json_integer_value(json_array_get(offs, 1));
    if (b < 0 || e < b || (uint64_t)e > data_size)
        return fg_fail(err, "%s: tensor '%s': data_offsets [%lld, %lld] lie outside the %llu data bytes", display,
                       name, (long long)b, (long long)e, (unsigned long long)data_size);
    if (b % elem != 0)
        return fg_fail(err, "%s: tensor '%s': data offset %lld is not aligned to its %d-byte elements", display, name,
                       (long long)b, elem);
    t->rank = (int)json_array_size(shape);
    uint64_t count = 1;
    for (int d = 0; d < t->rank; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return fg_fail(err, "%s: tensor '%s': shape entries must be non-negative integers", display, name);
        t->dim[d] = json_integer_value(v);
        if (__builtin_mul_overflow(count, (uint64_t)t->dim[d], &count) || count > (uint64_t)1 << 40)
            return fg_fail(err, "%s: tensor '%s': shape is too large", display, name);
    }
    if (count * (uint64_t)elem != (uint64_t)(e - b))
        return fg_fail(err, "%s: tensor '%s': shape holds %llu elements (%llu bytes of %s) but data_offsets span %lld "
                            "bytes",
                       display, name, (unsigned long long)count, (unsigned long long)count * (uint64_t)elem, dtype,
                       (long long)(e - b));
    t->count = (size_t)count;
    t->name = strdup(raw_name);
    if (!t->name)
        return fg_fail(err, "%s: out of memory", display);
    /* float data as floats: F32 as it is, F16 and BF16 widened exactly (a half-precision
     * checkpoint binds to an fp32 layer with the values it holds); other dtypes stay unread */
    bool f32 = strcmp(dtype, "F32") == 0, f16 = strcmp(dtype, "F16") == 0, bf16 = strcmp(dtype, "BF16") == 0;
    if (f32 || f16 || bf16) {
        t->data = malloc(count ? count * 4 : 4);
        if (!t->data)
            return fg_fail(err, "%s: out of memory", display);
        if (f32) {
            memcpy(t->data, data + b, count * 4); /* little-endian on every machine fusegen targets */
        } else {
            for (uint64_t i = 0; i < count; i++) {
                uint16_t h;
                memcpy(&h, data + b + 2 * i, 2);
                t->data[i] = f16 ? half_to_float(h) : bfloat16_to_float(h);
            }
        }
    }
    sp->begin = (uint64_t)b;
    sp->end = (uint64_t)e;
    sp->name = t->name;
    return 0;
}

static uint64_t header_length(const unsigned char *len8)
{
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len8[i] << (8 * i);
    return hlen;
}

/* The 8-byte header length against the file's size (and fusegen's limit). */
static int check_header_length(uint64_t hlen, size_t size, const char *display, fg_error *err)
{
    if (hlen > size - 8)
        return fg_fail(err, "%s: header length %llu runs past the end of the file (%zu bytes)", display,
                       (unsigned long long)hlen, size);
    if (hlen > MAX_HEADER_BYTES)
        return fg_fail(err, "%s: header length %llu is larger than fusegen reads (%u bytes)", display,
                       (unsigned long long)hlen, MAX_HEADER_BYTES);
    return 0;
}

int fg_safetensors_parse(const unsigned char *data, size_t size, const char *display, fg_tensor_file *out,
                         fg_error *err)
{
    memset(out, 0, sizeof *out);
    if (size < 8)
        return fg_fail(err, "%s: too short for a safetensors file (%zu bytes)", display, size);
    uint64_t hlen = header_length(data);
    if (check_header_length(hlen, size, display, err))
        return -1;
    json_error_t jerr;
    json_t *root = json_loadb((const char *)data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fg_fail(err, "%s: invalid JSON header at byte %d: %s", display, jerr.position, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return fg_fail(err, "%s: the header is not a JSON object", display);
    }
    const unsigned char *payload = data + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    size_t n = json_object_size(root);
    if (n > MAX_TENSORS + 1) { /* + __metadata__ */
        json_decref(root);
        return fg_fail(err, "%s: %zu tensors; fusegen reads files of at most %d", display, n, MAX_TENSORS);
    }
    out->tensors = calloc(n ? n : 1, sizeof *out->tensors);
    span *spans = calloc(n ? n : 1, sizeof *spans);
    int rc = 0;
    if (!out->tensors || !spans)
        rc = fg_fail(err, "%s: out of memory", display);
    const char *name;
    json_t *info;
    json_object_foreach(root, name, info)
    {
        if (rc)
            break;
        if (strcmp(name, "__metadata__") == 0)
            continue;
        rc = parse_tensor(display, name, info, data_size, payload, &out->tensors[out->n], &spans[out->n], err);
        out->n++;
    }
    /* the format's rule (its reference implementation's validate): the tensors' data is
     * contiguous from the first byte after the header to the last byte of the file, with no
     * gap, overlap or trailing byte; a header length that is off shows up here */
    if (rc == 0 && out->n > 0)
        qsort(spans, (size_t)out->n, sizeof *spans, by_offsets);
    char a[512], b[512];
    uint64_t at = 0;
    for (int i = 0; i < out->n && rc == 0; i++) {
        if (spans[i].begin < at)
            rc = fg_fail(err, "%s: tensors '%s' and '%s' overlap in the data", display, fg_tensor_name_shown(spans[i - 1].name, a, sizeof a),
                         fg_tensor_name_shown(spans[i].name, b, sizeof b));
        else if (spans[i].begin > at)
            rc = fg_fail(err, "%s: %llu bytes of the data before tensor '%s' belong to no tensor (the data must be "
                              "contiguous)",
                         display, (unsigned long long)(spans[i].begin - at), fg_tensor_name_shown(spans[i].name, a, sizeof a));
        at = spans[i].end;
    }
    if (rc == 0 && at != data_size)
        rc = fg_fail(err, "%s: %llu bytes after the last tensor belong to no tensor (the header length may be wrong)",
                     display, (unsigned long long)(data_size - at));
    free(spans);
    json_decref(root);
    if (rc)
        fg_tensor_file_free(out);
    return rc;
}

int fg_safetensors_read(const char *path, fg_tensor_file *out, fg_error *err)
{
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: a FIFO would block open() forever; it is refused below instead */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return fg_fail(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fg_fail(err, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    /* the 8-byte header length first: a huge or foreign file is refused before any of it is
     * read, and the rest is mapped, so only the header and the float tensors are touched */
    unsigned char len8[8];
    if (size >= 8 && pread(fd, len8, 8, 0) != 8) {
        close(fd);
        return fg_fail(err, "%s: cannot read: %s", path, strerror(errno));
    }
    if (size >= 8 && check_header_length(header_length(len8), size, path, err)) {
        close(fd);
        return -1;
    }
    void *map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (size && map == MAP_FAILED)
        return fg_fail(err, "%s: cannot map: %s", path, strerror(errno));
    int rc = fg_safetensors_parse(map ? map : (const void *)"", size, path, out, err);
    if (map)
        munmap(map, size);
    return rc;
}

/* The dtype code (common/half.h) a tensor is written in: its dtype "BF16" or "F16", else F32. */
static int written_dtype(const fg_tensor *t)
{
    return strcmp(t->dtype, "BF16") == 0 ? 1 : strcmp(t->dtype, "F16") == 0 ? 2 : 0;
}

static int write_data(FILE *f, const fg_tensor *t)
{
    int dt = written_dtype(t);
    if (dt == 0)
        return fwrite(t->data, 4, t->count, f) == t->count;
    for (size_t i = 0; i < t->count; i++) {
        uint16_t h = fg_float_to_half_bits(t->data[i], dt);
        unsigned char b[2] = {(unsigned char)(h & 0xff), (unsigned char)(h >> 8)};
        if (fwrite(b, 1, 2, f) != 2)
            return 0;
    }
    return 1;
}

int fg_safetensors_write(const char *path, const fg_tensor *tensors, int n, fg_error *err)
{
    json_t *root = json_object();
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        static const char *const names[] = {"F32", "BF16", "F16"};
        int dt = written_dtype(&tensors[i]);
        json_t *o = json_object(), *shape = json_array(), *offs = json_array();
        for (int d = 0; d < tensors[i].rank; d++)
            json_array_append_new(shape, json_integer(tensors[i].dim[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += tensors[i].count * (dt ? 2 : 4);
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_object_set_new(o, "dtype", json_string(names[dt]));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "data_offsets", offs);
        json_object_set_new(root, tensors[i].name, o);
    }
    /* the file goes in by rename, which would replace a device node (`--out /dev/null` as
     * root) or a FIFO with a regular file: only a regular file (or nothing) is replaced */
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        json_decref(root);
        return fg_fail(err, "%s exists and is not a regular file; refusing to replace it", path);
    }
    char *header = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!header)
        return fg_fail(err, "%s: out of memory", path);
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) & ~(size_t)7; /* keeps the data 8-byte aligned */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(header);
        return fg_fail(err, "%s: cannot create a temporary file: %s", path, strerror(errno));
    }
    FILE *f = fdopen(fd, "wb");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = f && fwrite(len8, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++)
        ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++)
        ok = write_data(f, &tensors[i]);
    free(header);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0 && fchmod(fileno(f), 0644) == 0;
    if (f ? fclose(f) != 0 : close(fd) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return fg_fail(err, "%s: cannot write: %s", path, strerror(e ? e : EIO));
    }
    return 0;
}

const fg_tensor *fg_tensor_find(const fg_tensor_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (f->tensors[i].name && strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

void fg_tensor_file_free(fg_tensor_file *f)
{
    if (!f || !f->tensors)
        return;
    for (int i = 0; i < f->n; i++) {
        free(f->tensors[i].name);
        free(f->tensors[i].data);
    }
    free(f->tensors);
    f->tensors = NULL;
    f->n = 0;
}
