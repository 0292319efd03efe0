# SPDX-License-Identifier: Apache-2.0
"""Finding and loading libfusegen.so, and the ctypes prototypes of include/fusegen.h.

Only this module knows about ctypes declarations; everything else calls `lib()` and gets a
ctypes.CDLL whose functions have their argument and result types set, so a wrong argument
count or type fails in Python instead of corrupting the C side.
"""

import ctypes
import ctypes.util
import os
import re
import threading

# The value of FG_MAX_DIMS in include/fusegen.h: shape queries fill an int64_t[FG_MAX_DIMS].
MAX_DIMS = 8

# Every fusegen function returns an fg_status (a C enum: int); FG_OK is 0.
OK = 0

_lock = threading.Lock()
_lib = None
_lib_path = None


class LibraryNotFound(OSError):
    """libfusegen.so could not be found or loaded."""


_HERE = os.path.dirname(os.path.abspath(__file__))
# <repo>/python/fusegen/ in a source checkout
_REPO = os.path.dirname(os.path.dirname(_HERE))


def source_checkout():
    """The repository's root when this package is used from a source checkout, else None."""
    if os.path.isfile(os.path.join(_REPO, "CMakeLists.txt")) and os.path.isfile(
        os.path.join(_REPO, "python", "fusegen", "__init__.py")
    ):
        return _REPO
    return None


def source_version():
    """The version in a source checkout's CMakeLists.txt (the one place it is written)."""
    repo = source_checkout()
    if repo is not None:
        with open(os.path.join(repo, "CMakeLists.txt"), encoding="utf-8") as f:
            m = re.search(r"project\(fusegen VERSION ([0-9][0-9.]*)", f.read())
        if m:
            return m.group(1)
    return "0+unknown"


def _candidates():
    """Where to look for the library, in order, with a word on where each came from."""
    env = os.environ.get("FUSEGEN_LIBRARY")
    if env:
        # An explicit choice is the only candidate: silently falling back to another build
        # would make "which library did I test?" impossible to answer.
        yield env, "FUSEGEN_LIBRARY"
        return
    # An installed wheel carries the library (and the shared objects it links) in the
    # package folder itself.
    yield os.path.join(_HERE, "libfusegen.so"), "the installed package"
    # A source checkout's default build folder.
    repo = source_checkout()
    if repo is not None:
        yield os.path.join(repo, "build", "libfusegen.so"), "the repository's build folder"
    found = ctypes.util.find_library("fusegen")
    if found:
        yield found, "the system library path"


def _declare(lib):
    """Sets argtypes/restype for every function of the public API."""
    c_int, c_int64, c_size_t = ctypes.c_int, ctypes.c_int64, ctypes.c_size_t
    c_void_p, c_char_p = ctypes.c_void_p, ctypes.c_char_p
    p_int = ctypes.POINTER(ctypes.c_int)
    p_dims = ctypes.POINTER(ctypes.c_int64)
    p_float = ctypes.POINTER(ctypes.c_float)
    p_handle = ctypes.POINTER(c_void_p)  # fg_context ** / fg_layer **

    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("fg_context_options_init", None, ctypes.POINTER(ContextOptions))
    fn("fg_last_error", c_char_p)
    fn("fg_status_name", c_char_p, c_int)
    fn("fg_version", c_char_p)
    fn("fg_context_create", c_int, ctypes.POINTER(ContextOptions), p_handle)
    fn("fg_context_destroy", c_int, c_void_p)
    fn("fg_layer_load_file", c_int, c_void_p, c_char_p, p_handle)
    fn("fg_layer_load_string", c_int, c_void_p, c_char_p, c_char_p, p_handle)
    fn("fg_layer_destroy", c_int, c_void_p)
    fn("fg_layer_input_shape", c_int, c_void_p, c_int64, p_int, p_dims)
    fn("fg_layer_dtype", c_int, c_void_p, ctypes.POINTER(c_char_p), p_int)
    fn("fg_layer_layout", c_int, c_void_p, ctypes.POINTER(c_char_p))
    fn("fg_layer_output_shape", c_int, c_void_p, c_int64, p_int, p_dims)
    fn("fg_layer_param_count", c_int, c_void_p, p_int)
    fn("fg_layer_param_info", c_int, c_void_p, c_int, ctypes.POINTER(c_char_p), p_int, p_dims)
    fn("fg_layer_ignored_count", c_int, c_void_p, p_int)
    fn("fg_layer_ignored_info", c_int, c_void_p, c_int, ctypes.POINTER(c_char_p), p_int, p_dims, ctypes.POINTER(c_char_p))
    fn("fg_layer_bind_device", c_int, c_void_p, c_char_p, c_void_p, c_size_t)
    fn("fg_layer_bind_host", c_int, c_void_p, c_char_p, p_float, c_size_t)
    fn("fg_layer_bind_safetensors", c_int, c_void_p, c_char_p, c_int)
    fn("fg_layer_prepare", c_int, c_void_p)
    fn("fg_layer_run", c_int, c_void_p, c_void_p, c_void_p, c_int64, c_void_p)
    fn("fg_layer_run_cpu", c_int, c_void_p, p_float, p_float, c_int64)
    fn("fg_layer_workspace_size", c_int, c_void_p, c_int64, ctypes.POINTER(c_size_t))
    fn("fg_layer_run_workspace", c_int, c_void_p, c_void_p, c_void_p, c_int64, c_void_p, c_size_t, c_void_p)
    # blocks (fg_block *): the inputs are arrays of pointers, "input" first
    p_ptrs = ctypes.POINTER(c_void_p)
    fn("fg_block_load_file", c_int, c_void_p, c_char_p, p_handle)
    fn("fg_block_load_string", c_int, c_void_p, c_char_p, c_char_p, p_handle)
    fn("fg_block_destroy", c_int, c_void_p)
    fn("fg_block_input_count", c_int, c_void_p, p_int)
    fn("fg_block_input_info", c_int, c_void_p, c_int, c_int64, ctypes.POINTER(c_char_p), p_int, p_dims)
    fn("fg_block_output_shape", c_int, c_void_p, c_int64, p_int, p_dims)
    fn("fg_block_dtype", c_int, c_void_p, ctypes.POINTER(c_char_p), p_int)
    fn("fg_block_layout", c_int, c_void_p, ctypes.POINTER(c_char_p))
    fn("fg_block_layer_count", c_int, c_void_p, p_int)
    fn("fg_block_layer_name", c_int, c_void_p, c_int, ctypes.POINTER(c_char_p))
    fn("fg_block_param_count", c_int, c_void_p, p_int)
    fn("fg_block_param_info", c_int, c_void_p, c_int, ctypes.POINTER(c_char_p), p_int, p_dims)
    fn("fg_block_bind_host", c_int, c_void_p, c_char_p, p_float, c_size_t)
    fn("fg_block_bind_device", c_int, c_void_p, c_char_p, c_void_p, c_size_t)
    fn("fg_block_bind_safetensors", c_int, c_void_p, c_char_p, c_int)
    fn("fg_block_prepare", c_int, c_void_p)
    fn("fg_block_workspace_size", c_int, c_void_p, c_int64, ctypes.POINTER(c_size_t))
    fn("fg_block_run", c_int, c_void_p, p_ptrs, c_void_p, c_int64, c_void_p)
    fn("fg_block_run_workspace", c_int, c_void_p, p_ptrs, c_void_p, c_int64, c_void_p, c_size_t, c_void_p)
    fn("fg_block_run_cpu", c_int, c_void_p, ctypes.POINTER(p_float), p_float, c_int64)


# fg_log_fn: void (*)(void *user, fg_log_level level, const char *message)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


class ContextOptions(ctypes.Structure):
    """struct fg_context_options, field for field (tests/test_prototypes.py checks it against
    include/fusegen.h). fg_context_options_init sets struct_size."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("cache_path", ctypes.c_char_p),
        ("arch", ctypes.c_char_p),
        ("verbose", ctypes.c_int),
        ("log", LOG_FN),
        ("log_user", ctypes.c_void_p),
        ("log_level", ctypes.c_int),
    ]


def lib():
    """The loaded library (loaded on first use). Raises LibraryNotFound with every place tried."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path, origin in _candidates():
            # find_library returns a bare soname ("libfusegen.so.0"), which only the dynamic
            # loader can resolve; a path we built ourselves must exist.
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path} ({origin}: no such file)")
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({origin}: {e})")
                continue
            _declare(handle)
            _lib, _lib_path = handle, path
            return _lib
        raise LibraryNotFound(
            "fusegen: cannot load libfusegen.so; tried:\n  "
            + ("\n  ".join(tried) if tried else "(nothing: no candidate found)")
            + "\nInstall the package with its library (pip install . in fusegen's repository), "
            "build it (cmake -S . -B build && cmake --build build) or set FUSEGEN_LIBRARY "
            "to the path of libfusegen.so."
        )


def library_path():
    """The path (or soname) the library was loaded from; loads it if needed."""
    lib()
    return _lib_path
