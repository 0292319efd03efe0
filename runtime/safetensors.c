#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header over this is refused before parsing (the format's own reference limit). */
#define MAX_HEADER_BYTES (100u << 20)

typedef struct span {
    uint64_t begin, end;
    const char *name;
} span;

static int by_begin(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int parse_tensor(const char *display, const char *name, json_t *info, uint64_t data_size,
                        const unsigned char *data, fg_tensor *t, span *sp, fg_error *err)
{
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
        return fg_fail(err, "%s: tensor '%s': unknown dtype '%s'", display, name, dtype);
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
    t->name = strdup(name);
    if (!t->name)
        return fg_fail(err, "%s: out of memory", display);
    if (elem == 4 && strcmp(dtype, "F32") == 0) {
        t->data = malloc(count ? count * 4 : 4);
        if (!t->data)
            return fg_fail(err, "%s: out of memory", display);
        memcpy(t->data, data + b, count * 4); /* little-endian on every machine fusegen targets */
    }
    sp->begin = (uint64_t)b;
    sp->end = (uint64_t)e;
    sp->name = t->name;
    return 0;
}

int fg_safetensors_parse(const unsigned char *data, size_t size, const char *display, fg_tensor_file *out,
                         fg_error *err)
{
    memset(out, 0, sizeof *out);
    if (size < 8)
        return fg_fail(err, "%s: too short for a safetensors file (%zu bytes)", display, size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)data[i] << (8 * i);
    if (hlen > size - 8)
        return fg_fail(err, "%s: header length %llu runs past the end of the file (%zu bytes)", display,
                       (unsigned long long)hlen, size);
    if (hlen > MAX_HEADER_BYTES)
        return fg_fail(err, "%s: header length %llu is implausibly large", display, (unsigned long long)hlen);
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
    if (rc == 0 && out->n > 1) {
        qsort(spans, (size_t)out->n, sizeof *spans, by_begin);
        for (int i = 1; i < out->n && rc == 0; i++)
            if (spans[i].begin < spans[i - 1].end)
                rc = fg_fail(err, "%s: tensors '%s' and '%s' overlap in the data", display, spans[i - 1].name,
                             spans[i].name);
    }
    free(spans);
    json_decref(root);
    if (rc)
        fg_tensor_file_free(out);
    return rc;
}

int fg_safetensors_read(const char *path, fg_tensor_file *out, fg_error *err)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fg_fail(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fg_fail(err, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    unsigned char *data = malloc(size ? size : 1);
    if (!data) {
        close(fd);
        return fg_fail(err, "%s: out of memory (%zu bytes)", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, data + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    int rc = got == size ? fg_safetensors_parse(data, size, path, out, err) : fg_fail(err, "%s: short read", path);
    free(data);
    return rc;
}

int fg_safetensors_write(const char *path, const fg_tensor *tensors, int n, fg_error *err)
{
    json_t *root = json_object();
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *o = json_object(), *shape = json_array(), *offs = json_array();
        for (int d = 0; d < tensors[i].rank; d++)
            json_array_append_new(shape, json_integer(tensors[i].dim[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += tensors[i].count * 4;
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_object_set_new(o, "dtype", json_string("F32"));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "data_offsets", offs);
        json_object_set_new(root, tensors[i].name, o);
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
        ok = fwrite(tensors[i].data, 4, tensors[i].count, f) == tensors[i].count;
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
