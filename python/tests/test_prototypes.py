# SPDX-License-Identifier: Apache-2.0
"""The ctypes declarations of python/fusegen/_native.py against include/fusegen.h: every
FG_API function is declared with the same argument and result types, struct
fg_context_options has the same fields in the same order, and the constants agree. A change
to the header that the binding does not follow fails here instead of corrupting memory.
No library is loaded (the declarations are applied to a stand-in object).

Run:  python3 -m pytest python/tests -q      or      python3 -m unittest discover -s python/tests
"""

import ctypes
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

from fusegen import _native  # noqa: E402

HEADER = os.path.join(REPO, "include", "fusegen.h")


def header_text():
    with open(HEADER) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


# C type (spaces normalized, parameter names dropped) -> ctypes type
C_TYPES = {
    "void": None,
    "int": ctypes.c_int,
    "fg_status": ctypes.c_int,
    "int64_t": ctypes.c_int64,
    "size_t": ctypes.c_size_t,
    "const char *": ctypes.c_char_p,
    "const char **": ctypes.POINTER(ctypes.c_char_p),
    "int *": ctypes.POINTER(ctypes.c_int),
    "size_t *": ctypes.POINTER(ctypes.c_size_t),
    "int64_t []": ctypes.POINTER(ctypes.c_int64),
    "const float *": ctypes.POINTER(ctypes.c_float),
    "float *": ctypes.POINTER(ctypes.c_float),
    "const void *": ctypes.c_void_p,
    "void *": ctypes.c_void_p,
    "fg_context *": ctypes.c_void_p,
    "fg_layer *": ctypes.c_void_p,
    "const fg_layer *": ctypes.c_void_p,
    "fg_context **": ctypes.POINTER(ctypes.c_void_p),
    "fg_layer **": ctypes.POINTER(ctypes.c_void_p),
    "fg_block *": ctypes.c_void_p,
    "const fg_block *": ctypes.c_void_p,
    "fg_block **": ctypes.POINTER(ctypes.c_void_p),
    "const void *const *": ctypes.POINTER(ctypes.c_void_p),
    "const float *const *": ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
    "fg_context_options *": ctypes.POINTER(_native.ContextOptions),
    "const fg_context_options *": ctypes.POINTER(_native.ContextOptions),
    "fg_log_fn": _native.LOG_FN,
}


def c_type(decl):
    """'const char *name' -> 'const char *'; 'int64_t dims[FG_MAX_DIMS]' -> 'int64_t []'."""
    decl = re.sub(r"\s+", " ", decl.strip())
    array = "[" in decl
    decl = re.sub(r"\[[^\]]*\]", "", decl).strip()
    m = re.match(r"^(.*?)(\w+)$", decl)
    base = m.group(1) if m and m.group(1).strip() else decl  # "void" alone has no name
    base = re.sub(r"\s*\*", " *", base.strip()).replace("* *", "**").strip()
    base = re.sub(r" \*\*", " **", base)
    return base + (" []" if array else "")


def header_functions():
    out = {}
    for m in re.finditer(r"FG_API\s+([\w\s\*]+?)\s*\b(fg_\w+)\s*\(([^)]*)\)\s*;", header_text()):
        ret, name, args = m.group(1), m.group(2), m.group(3)
        ret = re.sub(r"\s*\*", " *", ret.strip())
        params = [] if args.strip() in ("", "void") else [c_type(a) for a in args.split(",")]
        out[name] = (ret, params)
    return out


def header_struct_fields():
    m = re.search(r"typedef struct fg_context_options \{(.*?)\} fg_context_options;", header_text(), re.S)
    fields = []
    for decl in m.group(1).split(";"):
        if decl.strip():
            name = re.search(r"(\w+)\s*$", decl.strip()).group(1)
            fields.append((name, c_type(decl)))
    return fields


class Recorder:
    """Stands in for the CDLL: records what _native._declare sets on each function."""

    class Fn:
        argtypes = None
        restype = None

    def __init__(self):
        self.fns = {}

    def __getattr__(self, name):
        return self.fns.setdefault(name, Recorder.Fn())


def same(a, b):
    if a is None or b is None:
        return a is b
    if hasattr(a, "_type_") and hasattr(b, "_type_") and issubclass(a, ctypes._Pointer) and issubclass(b, ctypes._Pointer):
        return same(a._type_, b._type_)
    return a is b


class Prototypes(unittest.TestCase):
    def test_every_function_declared_alike(self):
        declared = Recorder()
        _native._declare(declared)
        header = header_functions()
        self.assertGreater(len(header), 15)
        self.assertEqual(sorted(declared.fns), sorted(header), "functions in fusegen.h vs _native._declare")
        for name, (ret, params) in header.items():
            fn = declared.fns[name]
            self.assertTrue(same(fn.restype, C_TYPES[ret]), f"{name}: result {ret} declared as {fn.restype}")
            self.assertEqual(len(fn.argtypes), len(params), f"{name}: {params} declared as {fn.argtypes}")
            for i, (have, want) in enumerate(zip(fn.argtypes, params)):
                self.assertTrue(same(have, C_TYPES[want]), f"{name}: argument {i} is {want}, declared as {have}")

    def test_options_struct_field_for_field(self):
        fields = header_struct_fields()
        self.assertEqual([f for f, _ in fields], [f for f, _ in _native.ContextOptions._fields_])
        for (name, ctype), (_, have) in zip(fields, _native.ContextOptions._fields_):
            want = C_TYPES["int" if ctype.startswith("int") and ctype != "int *" else ctype]
            self.assertTrue(same(have, want), f"field {name}: {ctype} declared as {have}")

    def test_constants(self):
        text = header_text()
        self.assertEqual(int(re.search(r"#define FG_MAX_DIMS (\d+)", text).group(1)), _native.MAX_DIMS)
        self.assertEqual(int(re.search(r"FG_OK = (\d+)", text).group(1)), _native.OK)


if __name__ == "__main__":
    unittest.main()
