# SPDX-License-Identifier: Apache-2.0
"""Context, Layer and Error: the Python face of include/fusegen.h.

Ownership follows the C API: a layer belongs to a context, and the C library refuses to
destroy a context while any of its layers lives. So a Layer keeps a strong reference to its
Context (the context cannot be garbage-collected first), and a Context tracks its layers
weakly so that an explicit Context.close() can close them first.

Tensors: torch CUDA tensors run on the GPU (fg_layer_run on torch's current stream); NumPy
arrays and CPU torch tensors run the CPU float64 reference (fg_layer_run_cpu). torch is never
imported by this module unless it is needed (a default context, see default_context()); a
torch tensor is recognised through sys.modules, since whoever passes one has imported torch.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import difflib
import os
import sys
import threading
import weakref
from typing import Any, Mapping, Optional, Tuple, Union

import numpy as np

from . import _native
from ._native import MAX_DIMS, OK, ContextOptions, lib

_P_FLOAT = ctypes.POINTER(ctypes.c_float)

PathLike = Union[str, bytes, "os.PathLike[str]"]
Shape = Tuple[Any, ...]  # ints; the batch may be the symbol 'N' in shapes for messages


class Error(RuntimeError):
    """A fusegen call failed. `status` is the fg_status name (e.g. 'FG_ERR_SPEC'), `message`
    the library's explanation (fg_last_error: names the file, line, field or tensor)."""

    def __init__(self, status: str, message: str):
        self.status = status
        self.message = message
        super().__init__(f"{status}: {message}" if message else status)


class StateDictError(KeyError):
    """load_state_dict(strict=True) found missing or unexpected keys."""

    def __init__(self, message: str, missing: list, unexpected: list):
        super().__init__(message)
        self.message = message
        self.missing_keys = missing
        self.unexpected_keys = unexpected

    def __str__(self):  # KeyError's own __str__ shows repr(message), quotes and all
        return self.message


# What load_state_dict returns, as PyTorch's Module.load_state_dict does.
IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _check(status):
    """Raises Error for any status but FG_OK. Must run right after the call, on the same
    thread: fg_last_error() is thread-local."""
    if status != OK:
        L = lib()
        name = L.fg_status_name(status).decode()
        message = L.fg_last_error().decode(errors="replace")
        raise Error(name, message)


def _cstr(value, what):
    """str/PathLike/None -> bytes/None for a const char * argument."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, (str, os.PathLike)):
        return os.fsencode(value)
    raise TypeError(f"fusegen: {what} must be a string or a path, not {type(value).__name__}")


def _torch_if_tensor(x):
    """The torch module if x is a torch.Tensor, else None (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch
    return None


def _pip_nvrtc():
    """libnvrtc from the NVIDIA pip wheels (torch's dependency nvidia-cuda-nvrtc-cu12, or a
    CUDA 13 wheel), or None. The C library finds a toolkit's NVRTC itself; it cannot know
    Python's site-packages."""
    for base in sys.path:
        for sub, name in (("nvidia/cuda_nvrtc/lib", "libnvrtc.so.12"), ("nvidia/cu13/lib", "libnvrtc.so.13"),
                          ("nvidia/cuda_nvrtc/lib", "libnvrtc.so.13")):
            path = os.path.join(base, sub, name)
            if os.path.isfile(path):
                return path
    return None


def _find_nvrtc_for_torch_users():
    """Points FUSEGEN_NVRTC (read by fg_context_create) at the pip wheels' NVRTC when the
    user set none and the system has no libnvrtc the loader can find."""
    if os.environ.get("FUSEGEN_NVRTC"):
        return
    if ctypes.util.find_library("nvrtc") or any(
        os.path.exists(f"/usr/local/cuda/lib64/libnvrtc.so.{v}") for v in (13, 12)
    ):
        return
    path = _pip_nvrtc()
    if path:
        os.environ["FUSEGEN_NVRTC"] = path


def version() -> str:
    """The library's version string (fg_version)."""
    return lib().fg_version().decode()


# ---- lifetime ------------------------------------------------------------------------------


class _Handle:
    """What Context and Layer share about owning a C handle: `closed`, `with` blocks,
    a check before use, and closing when garbage-collected. A subclass sets self._handle
    (None first, so that close() and __del__ work whatever its __init__ raises) and
    defines close()."""

    _handle: Optional[int] = None

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _live_handle(self):
        if self._handle is None:
            raise ValueError(f"fusegen: this {type(self).__name__} is closed")
        return self._handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # A context runs this only once every layer is gone (layers hold a reference to their
        # context). At interpreter exit module globals may already be torn down: never raise.
        try:
            self.close()
        except Exception:
            pass


# ---- contexts ------------------------------------------------------------------------------


class Context(_Handle):
    """A device (or CPU only, device=-1), the kernel caches and options (fg_context_create).

    cache_dir: the user cache (default $FUSEGEN_CACHE_DIR, $XDG_CACHE_HOME/fusegen or
    ~/.cache/fusegen); cache_path: shipped read-only caches, colon-separated (default
    $FUSEGEN_CACHE_PATH); arch: e.g. 'sm_90' (default: the device's); verbose: report compiles
    and cache use on stderr.
    """

    def __init__(
        self,
        device: int = 0,
        cache_dir: Optional[PathLike] = None,
        cache_path: Optional[str] = None,
        arch: Optional[str] = None,
        verbose: bool = False,
    ):
        self._handle = None  # first, so that close()/__del__ work whatever fails below
        self._layers: "weakref.WeakSet[Layer]" = weakref.WeakSet()
        self._lock = threading.Lock()
        L = lib()
        _find_nvrtc_for_torch_users()
        opts = ContextOptions()
        L.fg_context_options_init(ctypes.byref(opts))
        opts.device = int(device)
        # ctypes keeps these bytes objects alive only as long as `opts` lives; the C side
        # copies what it keeps during fg_context_create.
        opts.cache_dir = _cstr(cache_dir, "cache_dir")
        opts.cache_path = _cstr(cache_path, "cache_path")
        opts.arch = _cstr(arch, "arch")
        opts.verbose = 1 if verbose else 0
        handle = ctypes.c_void_p()
        _check(L.fg_context_create(ctypes.byref(opts), ctypes.byref(handle)))
        self._handle = handle.value
        self.device = int(device)
        self.cache_dir, self.cache_path, self.arch = cache_dir, cache_path, arch

    @property
    def has_device(self) -> bool:
        return self.device >= 0

    def _adopt(self, layer):
        with self._lock:
            self._layers.add(layer)

    def close(self) -> None:
        """Closes the context's live layers, then the context. Idempotent."""
        if self._handle is None:
            return
        for layer in list(self._layers):
            layer.close()
        handle, self._handle = self._handle, None
        _check(lib().fg_context_destroy(handle))

    def __repr__(self):
        where = "cpu" if self.device < 0 else f"cuda:{self.device}"
        return f"<fusegen.Context {where}{' closed' if self.closed else ''}>"


_default_context = None
_default_lock = threading.Lock()


def default_context() -> Context:
    """The context a Layer gets when given none, created on first use: torch's current CUDA
    device (normally 0) if torch is importable and sees a GPU, else CPU-only (device -1)."""
    global _default_context
    with _default_lock:
        if _default_context is None or _default_context.closed:
            device = -1
            try:
                import torch

                if torch.cuda.is_available():
                    device = torch.cuda.current_device()
            except Exception:  # not installed, or a broken CUDA install: CPU-only
                pass
            _default_context = Context(device=device)
        return _default_context


# ---- layers --------------------------------------------------------------------------------


def _looks_like_path(spec):
    # A spec's source always spans lines or ends in '}', so a one-line string ending in
    # '.lua' is a file name, existing or not: a missing file is then reported as such
    # instead of as a Lua syntax error in the "source" 'specs/kb97.lua'.
    return isinstance(spec, os.PathLike) or (isinstance(spec, str) and spec.endswith(".lua") and "\n" not in spec)


@contextlib.contextmanager
def _kind_hint(says, use):
    """Adds the Python class to use to the library's message when a spec is of the other
    kind (a block spec given to Layer, a layer spec to Block): its message names C calls."""
    try:
        yield
    except Error as e:
        if e.status == "FG_ERR_SPEC" and says in e.message:
            raise Error(e.status, f"{e.message} (in Python: {use})") from None
        raise


class _Spec(_Handle):
    """What Layer and Block share: a spec loaded into a context through the C API's
    fg_<kind>_* functions, and its parameters (`_params`: [(state_dict name, shape)]) with
    their binding from NumPy arrays, torch tensors, state_dicts and safetensors files.
    `_kind` ("layer" or "block") names both the functions and the object in messages."""

    _kind = ""  # set by the subclass
    _hint = ("", "")  # _kind_hint's arguments: what the library says of a spec of the other kind

    def _api(self, fn):
        """The C API's fg_<kind>_<fn> (fg_layer_prepare, fg_block_prepare, ...)."""
        return getattr(lib(), f"fg_{self._kind}_{fn}")

    def _load(self, spec, context, name):
        """__init__'s first part: loads `spec` (see Layer and Block) into `context`."""
        self._handle = None
        self._device_refs: dict[str, Any] = {}  # tensors bound with bind_device, kept alive here
        self.context = context if context is not None else default_context()
        handle = ctypes.c_void_p()
        ctx = self.context._live_handle()
        with _kind_hint(*self._hint):
            if _looks_like_path(spec):
                self.source = os.fsdecode(os.fspath(spec))
                _check(self._api("load_file")(ctx, os.fsencode(self.source), ctypes.byref(handle)))
            elif isinstance(spec, (str, bytes)):
                text = spec.encode() if isinstance(spec, str) else spec
                self.source = name or "<string>"
                _check(self._api("load_string")(ctx, _cstr(name, "name"), text, ctypes.byref(handle)))
            else:
                raise TypeError(f"fusegen: a spec is a path or Lua source text, not {type(spec).__name__}")
        self._handle = handle.value
        self.context._adopt(self)

    # -- lifetime

    def close(self) -> None:
        """Destroys the layer or block (its kernels, workspace and parameter copies).
        Idempotent."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        self._device_refs.clear()
        _check(self._api("destroy")(handle))

    # -- parameters

    def _read_params(self):
        h = self._live_handle()
        count = ctypes.c_int()
        _check(self._api("param_count")(h, ctypes.byref(count)))
        out = []
        for i in range(count.value):
            name, rank, dims = ctypes.c_char_p(), ctypes.c_int(), (ctypes.c_int64 * MAX_DIMS)()
            _check(self._api("param_info")(h, i, ctypes.byref(name), ctypes.byref(rank), dims))
            out.append((name.value.decode(), tuple(dims[d] for d in range(rank.value))))
        return out

    def _param_shape(self, name):
        for n, shape in self._params:
            if n == name:
                return shape
        return None

    def _host_copy(self, name, value, shape):
        """value (torch tensor on any device, NumPy array, nested lists) as a contiguous
        float32 NumPy array of exactly `shape`. (A block's messages say "layer" too.)"""
        torch = _torch_if_tensor(value)
        if torch is not None:
            # The layer keeps its own copy (host and device), so a CPU staging copy is the
            # simple safe choice whatever device the tensor is on.
            if value.is_complex() or value.dtype == torch.bool:
                raise TypeError(f"fusegen: parameter '{name}' has dtype {value.dtype}; expected a real number type")
            arr = value.detach().float().contiguous().cpu().numpy()
        else:
            arr = np.asarray(value)
            if arr.dtype.kind not in "fiu":
                raise TypeError(f"fusegen: parameter '{name}' has dtype {arr.dtype}; expected a real number type")
            arr = np.ascontiguousarray(arr, dtype=np.float32)
        if tuple(arr.shape) != tuple(shape):
            raise ValueError(
                f"fusegen: parameter '{name}' has shape {list(arr.shape)} but layer {self.source} needs {list(shape)}"
            )
        return arr

    def _bind_device(self, h, name, tensor, shape):
        """bind_device's last part, once the tensor's dtype and device are checked: its shape
        (unless `shape` is None: the library names an unknown parameter), then the binding."""
        if shape is not None and tuple(tensor.shape) != shape:
            raise ValueError(
                f"fusegen: parameter '{name}' has shape {list(tensor.shape)} but {self._kind} {self.source} "
                f"needs {list(shape)}"
            )
        if not tensor.is_contiguous():
            raise ValueError(f"fusegen: parameter '{name}' must be contiguous for bind_device")
        _check(self._api("bind_device")(h, name.encode(), tensor.data_ptr(), tensor.numel() * 4))
        self._device_refs[name] = tensor

    def _load_state_dict(self, state_dict, strict, ignored):
        """load_state_dict's work. ignored: {state_dict name: shape} of the state accepted,
        shape-checked and left unused (Layer.ignored)."""
        self._live_handle()
        names = [n for n, _ in self._params]
        for k, shape in ignored.items():
            if k in state_dict and tuple(np.shape(state_dict[k])) != shape:
                raise ValueError(
                    f"fusegen: '{k}' has shape {list(np.shape(state_dict[k]))} but {self._kind} {self.source} "
                    f"accepts it (unused) with shape {list(shape)}"
                )
        keys = [k for k in state_dict if not k.endswith(".num_batches_tracked") and k not in ignored]
        missing = [n for n in names if n not in state_dict]
        unexpected = [k for k in keys if self._param_shape(k) is None]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append("missing keys: " + ", ".join(repr(k) for k in missing))
            if unexpected:
                hints = []
                for k in unexpected:
                    near = difflib.get_close_matches(k, missing or names, n=1)
                    hints.append(repr(k) + (f" (did you mean '{near[0]}'?)" if near else ""))
                parts.append("unexpected keys: " + ", ".join(hints))
            raise StateDictError(
                f"fusegen: the state_dict does not match {self._kind} {self.source}: " + "; ".join(parts),
                missing,
                unexpected,
            )
        # convert and check everything before binding anything, so an error binds nothing
        arrays = [(n, self._host_copy(n, state_dict[n], shape)) for n, shape in self._params if n in state_dict]
        bind_host = self._api("bind_host")
        for name, arr in arrays:
            _check(bind_host(self._handle, name.encode(), arr.ctypes.data_as(_P_FLOAT), arr.nbytes))
            self._device_refs.pop(name, None)
        return IncompatibleKeys(missing, unexpected)

    def load_safetensors(self, path: PathLike, allow_extra: bool = False) -> None:
        """Binds every parameter from a safetensors file of F32 tensors named by state_dict
        keys (fg_layer_bind_safetensors / fg_block_bind_safetensors). Extra tensors are an
        error unless allow_extra."""
        _check(self._api("bind_safetensors")(self._live_handle(), _cstr(path, "path"), 1 if allow_extra else 0))
        self._device_refs.clear()

    def prepare(self) -> None:
        """Compiles (or loads from the caches) every kernel (of every layer of a block) now
        rather than at the first run."""
        _check(self._api("prepare")(self._live_handle()))

    def workspace_size(self, batch: int) -> int:
        """Bytes of device workspace a run of `batch` samples needs (fg_layer_workspace_size /
        fg_block_workspace_size); 0 when none. A layer's: the intermediate values and
        statistics between its passes; a block's: its layers' outputs but the block's, and
        the largest layer workspace."""
        size = ctypes.c_size_t()
        _check(self._api("workspace_size")(self._live_handle(), int(batch), ctypes.byref(size)))
        return size.value


class Layer(_Spec):
    """A layer spec loaded into a context (fg_layer_load_file / fg_layer_load_string).

    spec: a path to a .lua file, or the spec's source text (then `name` stands for it in
    messages). context: a Context; None uses default_context().

    Calling the layer runs it: layer(x) with a torch CUDA tensor runs the generated kernels on
    torch's current stream and returns a new CUDA tensor; with a NumPy array or a CPU torch
    tensor it runs the CPU float64 reference and returns the same kind of object.
    """

    _kind = "layer"  # fg_layer_*, and in messages (Block shares some methods)
    _hint = ("returns a block", "fusegen.Block (or fusegen.torch.FusedBlock)")

    def __init__(self, spec: PathLike, context: Optional[Context] = None, name: Optional[str] = None):
        self._load(spec, context, name)
        self._params = self._read_params()
        self._ignored = self._read_ignored()
        dtype = ctypes.c_char_p()
        _check(lib().fg_layer_dtype(self._handle, ctypes.byref(dtype), None))
        self._dtype = dtype.value.decode()
        layout = ctypes.c_char_p()
        _check(lib().fg_layer_layout(self._handle, ctypes.byref(layout)))
        self._layout = layout.value.decode()

    # -- lifetime

    def __repr__(self):
        if self.closed:
            return f"<fusegen.Layer {self.source} closed>"
        return (
            f"<fusegen.Layer {self.source}: input {list(self.input_shape('N'))} -> "
            f"output {list(self.output_shape('N'))}, params {[n for n, _ in self._params]}>"
        )

    # -- shapes and parameters

    def _read_ignored(self):
        L, h = lib(), self._live_handle()
        count = ctypes.c_int()
        _check(L.fg_layer_ignored_count(h, ctypes.byref(count)))
        out = []
        for i in range(count.value):
            name, rank, dims, dtype = ctypes.c_char_p(), ctypes.c_int(), (ctypes.c_int64 * MAX_DIMS)(), ctypes.c_char_p()
            _check(L.fg_layer_ignored_info(h, i, ctypes.byref(name), ctypes.byref(rank), dims, ctypes.byref(dtype)))
            out.append((name.value.decode(), tuple(dims[d] for d in range(rank.value)), dtype.value.decode()))
        return out

    @property
    def params(self) -> list[tuple[str, Shape]]:
        """[(state_dict name, shape), ...] in the spec's order."""
        return list(self._params)

    @property
    def ignored(self) -> list[tuple[str, Shape, str]]:
        """[(state_dict name, shape, dtype), ...]: what a module's state_dict carries that the
        layer accepts and never reads (fg_layer_ignored_info): every batch_norm's
        num_batches_tracked ((), "I64") and, for one on batch statistics, its running_mean and
        running_var ((C,), "F32"), which fusegen's forward pass leaves unchanged."""
        return list(self._ignored)

    def _shape(self, fn, batch):
        # batch 'N' (any non-int) gives the symbolic form, for messages
        symbolic = not isinstance(batch, int)
        rank, dims = ctypes.c_int(), (ctypes.c_int64 * MAX_DIMS)()
        _check(fn(self._live_handle(), 1 if symbolic else batch, ctypes.byref(rank), dims))
        shape = tuple(dims[d] for d in range(rank.value))
        return (batch,) + shape[1:] if symbolic else shape

    @property
    def dtype(self) -> str:
        """The dtype of the layer's input and output (the spec's `dtype`): "fp32", "bf16" or
        "fp16". Parameters are float32 whatever it is."""
        return self._dtype

    @property
    def torch_dtype(self) -> Any:
        """The torch dtype of the layer's input and output tensors on the GPU (imports torch)."""
        import torch

        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[self._dtype]

    @property
    def layout(self) -> str:
        """The memory layout of the layer's input and output (the spec's `layout`): "nchw" or
        "channels_last" (N(D)HWC). Shapes (input_shape, output_shape) are logical
        (N, C, spatial...) either way; parameters are never channels last."""
        return self._layout

    @property
    def torch_memory_format(self) -> Any:
        """The torch memory format of the layer's input and output: torch.contiguous_format,
        or torch.channels_last (2D) / torch.channels_last_3d (3D) for layout "channels_last"
        (imports torch)."""
        import torch

        return self._memory_format_for(len(self.input_shape(1)))

    def _memory_format_for(self, rank):
        """The torch memory format of a tensor of `rank` in this layout: channels last puts
        the channel of a 4-D / 5-D tensor last; other ranks (a block's [N, C] input) have one
        memory order either way."""
        import torch

        if self._layout != "channels_last" or rank not in (4, 5):
            return torch.contiguous_format
        return torch.channels_last_3d if rank == 5 else torch.channels_last

    def _memory_perm(self, rank):
        """The axes of a logical (N, C, spatial...) array in memory order: (0, 2, .., 1)."""
        return (0,) + tuple(range(2, rank)) + (1,)

    def _logical_perm(self, rank):
        """The inverse: a memory-order (N, spatial..., C) array's axes in logical order."""
        return (0, rank - 1) + tuple(range(1, rank - 1))

    def input_shape(self, batch: int) -> Shape:
        """The input's shape for `batch` samples (a tuple)."""
        return self._shape(lib().fg_layer_input_shape, batch)

    def output_shape(self, batch: int) -> Shape:
        """The output's shape for `batch` samples (a tuple)."""
        return self._shape(lib().fg_layer_output_shape, batch)

    # -- binding

    def bind(self, name: str, value: Any) -> None:
        """Binds one parameter from a NumPy array or a torch tensor (any device): the layer
        keeps a copy. An unknown name raises Error, with the nearest valid name."""
        h = self._live_handle()
        shape = self._param_shape(name)
        if shape is None:
            # let the library say it: its message names the layer and suggests a name
            _check(lib().fg_layer_bind_host(h, name.encode(), _P_FLOAT(ctypes.c_float(0.0)), 4))
            raise AssertionError("unreachable: fg_layer_bind_host accepted an unknown parameter")
        arr = self._host_copy(name, value, shape)
        _check(lib().fg_layer_bind_host(h, name.encode(), arr.ctypes.data_as(_P_FLOAT), arr.nbytes))
        self._device_refs.pop(name, None)

    def bind_device(self, name: str, tensor: Any) -> None:
        """Binds one parameter to a torch CUDA tensor without copying (fg_layer_bind_device).
        The layer keeps a reference to the tensor; updates to it are seen by later runs,
        except for a parameter a folded batch norm is computed from (`fusegen plan` says
        "folded"), which is read when bound: bind it again after updating it. The CPU
        reference path cannot use such a parameter (it needs a host copy)."""
        h = self._live_handle()
        torch = _torch_if_tensor(tensor)
        if torch is None or not tensor.is_cuda:
            raise TypeError(f"fusegen: bind_device('{name}') needs a torch CUDA tensor")
        self._check_cuda_tensor(tensor, f"parameter '{name}'", parameter=True)
        self._bind_device(h, name, tensor, self._param_shape(name))

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Binds every parameter from a state_dict-like mapping (torch tensors or NumPy
        arrays), like torch.nn.Module.load_state_dict. The state the layer ignores (see
        `ignored`: a batch norm's num_batches_tracked, the running statistics of one on batch
        statistics) is accepted, shape-checked and left unused, as are '*.num_batches_tracked'
        entries of other modules. strict=True: missing or unexpected keys raise
        StateDictError (a KeyError) naming them; nothing is bound then. Returns
        (missing_keys, unexpected_keys)."""
        return self._load_state_dict(state_dict, strict, {n: shape for n, shape, _ in self._ignored})

    def _run_workspace(self, input_ptr: int, output_ptr: int, batch: int, workspace_ptr: int, workspace_bytes: int,
                       stream: int) -> None:
        """fg_layer_run_workspace on raw device pointers and a stream handle (fusegen.torch's
        op: the caller owns every buffer, the workspace included)."""
        _check(
            lib().fg_layer_run_workspace(
                self._live_handle(), input_ptr, output_ptr, batch, workspace_ptr or None, workspace_bytes, stream or None
            )
        )

    # -- running

    def _check_input(self, shape):
        if len(shape) < 1 or shape[0] < 1:
            raise ValueError(f"fusegen: input shape {list(shape)} has no batch dimension")
        want = self.input_shape(shape[0])
        if tuple(shape) != want:
            raise ValueError(
                f"fusegen: input shape {list(shape)} does not match layer {self.source}'s input "
                f"{list(self.input_shape('N'))}"
            )
        return shape[0]

    def _check_dtype(self, t, what):
        want = self.torch_dtype
        if t.dtype != want:
            raise TypeError(
                f"fusegen: {what} is {t.dtype}, but {self._kind} {self.source} takes {want} "
                f'(its spec\'s dtype = "{self._dtype}")'
            )

    def _check_cuda_tensor(self, t, what, parameter=False):
        torch = sys.modules["torch"]
        if parameter:  # parameters are float32 whatever the layer's dtype (the kernels read fp32 weights)
            if t.dtype != torch.float32:
                raise TypeError(f"fusegen: {what} is {t.dtype}; parameters are float32 (layer {self.source})")
        else:
            self._check_dtype(t, what)
        index = t.device.index if t.device.index is not None else torch.cuda.current_device()
        if index != self.context.device:
            raise ValueError(f"fusegen: {what} is on {t.device} but the layer's context uses cuda:{self.context.device}")

    def __call__(self, x: Any, out: Any = None) -> Any:
        """Runs the layer: a torch CUDA tensor on the GPU (asynchronously, on torch's current
        stream of x's device), a NumPy array or CPU torch tensor with the CPU reference.
        `out`, if given, receives the output (same kind as the result; contiguous float32)."""
        torch = _torch_if_tensor(x)
        if torch is not None and x.is_cuda:
            return self._run_cuda(torch, x, out)
        if torch is not None:
            if out is not None and _torch_if_tensor(out) is None:
                raise TypeError("fusegen: out must be a CPU torch tensor when x is one")
            # an fp32 layer's reference converts any floating CPU tensor NumPy holds to float32
            # (as NumPy input is); a half layer takes its dtype only, and NumPy has no bfloat16
            if self._dtype != "fp32" or x.dtype == torch.bfloat16:
                self._check_dtype(x, "the input")
            if self._dtype != "fp32":
                # NumPy has no bfloat16: the reference runs on the values as float32 and its
                # result (rounded to the dtype) comes back in the dtype
                if out is not None:
                    self._check_dtype(out, "out")
                    shape = self.output_shape(self._check_input(tuple(x.shape)))
                    if tuple(out.shape) != shape:
                        raise ValueError(f"fusegen: out must be a tensor of shape {list(shape)}, got {list(out.shape)}")
                y = torch.from_numpy(self.run_reference(x.detach().cpu().float().numpy())).to(self.torch_dtype)
                if out is not None:
                    out.copy_(y)
                    return out
                return y
            host_out = out.numpy() if out is not None else None
            return torch.from_numpy(self.run_reference(x.detach().cpu().numpy(), out=host_out))
        return self.run_reference(x, out=out)

    def _run_cuda(self, torch, x, out):
        h = self._live_handle()
        if not self.context.has_device:
            raise Error(
                "FG_ERR_NO_DEVICE",
                f"layer {self.source} belongs to a CPU-only context (device -1) but got a CUDA tensor; "
                "create the layer with Context(device=N) to run on the GPU",
            )
        self._check_cuda_tensor(x, "the input")
        # a channels-last layer takes x in that memory format as it is (no copy); any other
        # x is converted once, as a torch op given another memory format would
        mf = self.torch_memory_format
        x = x.contiguous(memory_format=mf)
        batch = self._check_input(tuple(x.shape))
        shape = self.output_shape(batch)
        if out is None:
            out = torch.empty(shape, device=x.device, dtype=self.torch_dtype, memory_format=mf)
        else:
            if _torch_if_tensor(out) is None or not out.is_cuda:
                raise TypeError("fusegen: out must be a CUDA tensor when the input is one")
            self._check_cuda_tensor(out, "out")
            if tuple(out.shape) != shape or not out.is_contiguous(memory_format=mf):
                if self._layout == "channels_last":
                    raise ValueError(
                        f"fusegen: out must be a tensor of shape {list(shape)} in memory format {mf} "
                        f'(layer {self.source}\'s spec has layout = "channels_last")'
                    )
                raise ValueError(f"fusegen: out must be a contiguous tensor of shape {list(shape)}")
        stream = torch.cuda.current_stream(x.device).cuda_stream
        # The launch is asynchronous on `stream`; x (perhaps a contiguous copy) may be freed
        # when we return, which is safe: torch's allocator reuses memory in stream order.
        _check(lib().fg_layer_run(h, x.data_ptr(), out.data_ptr(), batch, stream))
        return out

    def run_reference(self, x: Any, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The CPU float64 reference (fg_layer_run_cpu) on a NumPy array (converted to
        float32, the API's input type); returns a float32 NumPy array. Needs host-bound
        parameters (bind, load_state_dict or load_safetensors). For a bf16/fp16 layer the
        input values are rounded to the dtype first and the result is rounded to it (still
        returned as float32)."""
        h = self._live_handle()
        arr = np.asarray(x)
        if arr.dtype.kind != "f":
            raise TypeError(f"fusegen: the input has dtype {arr.dtype}; expected floating point")
        if self._layout == "channels_last":
            return self._run_reference_channels_last(h, arr, out)
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        batch = self._check_input(tuple(arr.shape))
        shape = self.output_shape(batch)
        if out is None:
            out = np.empty(shape, dtype=np.float32)
        elif (
            not isinstance(out, np.ndarray)
            or out.dtype != np.float32
            or tuple(out.shape) != shape
            or not out.flags.c_contiguous
            or not out.flags.writeable
        ):
            raise ValueError(f"fusegen: out must be a writable C-contiguous float32 array of shape {list(shape)}")
        _check(lib().fg_layer_run_cpu(h, arr.ctypes.data_as(_P_FLOAT), out.ctypes.data_as(_P_FLOAT), batch))
        return out

    def _run_reference_channels_last(self, h, arr, out):
        """run_reference for layout "channels_last": x has the logical shape (N, C, spatial...)
        and any strides (a channels-last array is used as it is); the result has the logical
        shape with channels-last strides (a transposed view of N(D)HWC memory), as torch's
        channels_last tensors have. `out` (logical shape, float32, writable) receives it."""
        batch = self._check_input(tuple(arr.shape))
        shape = self.output_shape(batch)
        mem = np.ascontiguousarray(arr.transpose(self._memory_perm(arr.ndim)), dtype=np.float32)
        res = np.empty(tuple(shape[d] for d in self._memory_perm(len(shape))), dtype=np.float32)
        if out is not None and (
            not isinstance(out, np.ndarray)
            or out.dtype != np.float32
            or tuple(out.shape) != shape
            or not out.flags.writeable
        ):
            raise ValueError(f"fusegen: out must be a writable float32 array of shape {list(shape)}")
        _check(lib().fg_layer_run_cpu(h, mem.ctypes.data_as(_P_FLOAT), res.ctypes.data_as(_P_FLOAT), batch))
        y = res.transpose(self._logical_perm(len(shape)))
        if out is None:
            return y
        np.copyto(out, y)
        return out


def library_path() -> str:
    """Where libfusegen.so was loaded from (loads it if needed)."""
    return _native.library_path()


# ---- blocks --------------------------------------------------------------------------------


class Block(_Spec):
    """A block spec (docs/spec.md, "Blocks": several layers wired in a DAG, residuals, extra
    per-sample inputs such as SD's time embedding) loaded into a context (fg_block_load_*).

    spec: a path to a .lua file, or the spec's source text (then `name` stands for it in
    messages). context: a Context; None uses default_context(). A spec that returns a plain
    layer is refused (Error FG_ERR_SPEC: use Layer), as Layer refuses a block spec.

    Calling the block runs it: block(x, temb) or block(x, temb=t) -- the extra inputs
    (`input_names`, the spec's `inputs` sorted by name) positionally in that order or by
    name. Torch CUDA tensors run the generated kernels on torch's current stream of x's
    device (asynchronously; the block's own workspace, grown as needed: fusegen.torch's
    FusedBlock takes it from torch's allocator instead) and return a new CUDA tensor; NumPy
    arrays or CPU torch tensors run the CPU float64 reference (fg_block_run_cpu) and return
    the same kind of object. Every tensor of the block (its inputs, the time embedding
    included, and its output) has the block's `dtype` and `layout` (the spec's block fields):
    a bf16 channels-last block takes torch.bfloat16 tensors in torch.channels_last memory
    (an [N, C] input is plain contiguous) as they are, without copies, as Layer does.
    """

    _kind = "block"  # fg_block_*, and in messages
    _hint = ("returns a layer", "fusegen.Layer (or fusegen.torch.FusedLayer)")

    def __init__(self, spec: PathLike, context: Optional[Context] = None, name: Optional[str] = None):
        self._load(spec, context, name)
        self._params = self._read_params()
        L, h = lib(), self._handle
        count = ctypes.c_int()
        _check(L.fg_block_input_count(h, ctypes.byref(count)))
        self._inputs = []  # [(name, shape at batch 1)], "input" first
        for i in range(count.value):
            iname, rank, dims = ctypes.c_char_p(), ctypes.c_int(), (ctypes.c_int64 * MAX_DIMS)()
            _check(L.fg_block_input_info(h, i, 1, ctypes.byref(iname), ctypes.byref(rank), dims))
            self._inputs.append((iname.value.decode(), tuple(dims[d] for d in range(rank.value))))
        dtype, layout = ctypes.c_char_p(), ctypes.c_char_p()
        _check(L.fg_block_dtype(h, ctypes.byref(dtype), None))
        _check(L.fg_block_layout(h, ctypes.byref(layout)))
        self._dtype, self._layout = dtype.value.decode(), layout.value.decode()
        _check(L.fg_block_layer_count(h, ctypes.byref(count)))
        self._layers = []
        for i in range(count.value):
            lname = ctypes.c_char_p()
            _check(L.fg_block_layer_name(h, i, ctypes.byref(lname)))
            self._layers.append(lname.value.decode())

    # -- lifetime

    def __repr__(self):
        if self.closed:
            return f"<fusegen.Block {self.source} closed>"
        ins = ", ".join(f"{n} {list(self.input_shape('N', n))}" for n, _ in self._inputs)
        return f"<fusegen.Block {self.source}: {ins} -> output {list(self.output_shape('N'))}, layers {self._layers}>"

    # -- shapes and parameters

    @property
    def params(self) -> list[tuple[str, Shape]]:
        """[(state_dict name, shape), ...]: every key once, in the order the layers use them."""
        return list(self._params)

    @property
    def layers(self) -> list[str]:
        """The layers' names, in run order."""
        return list(self._layers)

    @property
    def input_names(self) -> list[str]:
        """The extra inputs' names (the spec's `inputs`, sorted by name): the order of the
        extra arguments of a call (and of fusegen.torch.FusedBlock's forward)."""
        return [n for n, _ in self._inputs[1:]]

    # the dtype and layout of every tensor of the block, as a layer's input and output
    dtype = Layer.dtype
    torch_dtype = Layer.torch_dtype
    layout = Layer.layout
    torch_memory_format = Layer.torch_memory_format
    _memory_format_for = Layer._memory_format_for
    _memory_perm = Layer._memory_perm
    _logical_perm = Layer._logical_perm
    _check_dtype = Layer._check_dtype

    def _channels_last(self, rank):
        """Whether a tensor of `rank` is held channels last (N(D)HWC) in memory."""
        return self._layout == "channels_last" and rank >= 3

    def input_shape(self, batch: Any, name: str = "input") -> Shape:
        """The shape of input `name` ("input", the block input, or an extra input) for
        `batch` samples; batch 'N' (any non-int) gives the symbolic form."""
        for n, shape in self._inputs:
            if n == name:
                return (batch if not isinstance(batch, int) else int(batch),) + shape[1:]
        raise ValueError(f"fusegen: block {self.source} has no input '{name}' ({self._input_list()})")

    def output_shape(self, batch: Any) -> Shape:
        """The output's shape for `batch` samples (a tuple)."""
        symbolic = not isinstance(batch, int)
        rank, dims = ctypes.c_int(), (ctypes.c_int64 * MAX_DIMS)()
        _check(lib().fg_block_output_shape(self._live_handle(), 1 if symbolic else batch, ctypes.byref(rank), dims))
        shape = tuple(dims[d] for d in range(rank.value))
        return (batch,) + shape[1:] if symbolic else shape

    def _input_list(self):
        return "its inputs: " + ", ".join(f"'{n}' {['N', *s[1:]]}" for n, s in self._inputs)

    # -- binding

    def _unknown_param(self, name):
        near = difflib.get_close_matches(name, [n for n, _ in self._params], n=1)
        return Error(
            "FG_ERR_INVALID_ARGUMENT",
            f"block {self.source} has no parameter '{name}'" + (f" (did you mean '{near[0]}'?)" if near else ""),
        )

    def bind(self, name: str, value: Any) -> None:
        """Binds one parameter (in every layer that reads it) from a NumPy array or a torch
        tensor (any device): the block keeps a copy."""
        h = self._live_handle()
        shape = self._param_shape(name)
        if shape is None:
            raise self._unknown_param(name)
        arr = self._host_copy(name, value, shape)
        _check(lib().fg_block_bind_host(h, name.encode(), arr.ctypes.data_as(_P_FLOAT), arr.nbytes))
        self._device_refs.pop(name, None)

    def bind_device(self, name: str, tensor: Any) -> None:
        """Binds one parameter to a torch CUDA float32 tensor without copying
        (fg_block_bind_device); the block keeps a reference to it. As for Layer.bind_device,
        a parameter a folded batch norm is computed from is read when bound."""
        h = self._live_handle()
        torch = _torch_if_tensor(tensor)
        if torch is None or not tensor.is_cuda:
            raise TypeError(f"fusegen: bind_device('{name}') needs a torch CUDA tensor")
        shape = self._param_shape(name)
        if shape is None:
            raise self._unknown_param(name)
        if tensor.dtype != torch.float32:
            raise TypeError(f"fusegen: parameter '{name}' is {tensor.dtype}; parameters are float32 (block {self.source})")
        self._check_device(tensor, f"parameter '{name}'")
        self._bind_device(h, name, tensor, shape)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Binds every parameter from a state_dict-like mapping (torch tensors or NumPy
        arrays), like torch.nn.Module.load_state_dict: the PyTorch module's own state_dict
        binds the block. '*.num_batches_tracked' entries are accepted and unused. strict=True:
        missing or unexpected keys raise StateDictError naming them, and nothing is bound.
        Returns (missing_keys, unexpected_keys)."""
        return self._load_state_dict(state_dict, strict, {})

    # -- running

    def _order_inputs(self, extra, named):
        """(extra positional, named) -> the extra inputs in input_names order; clear errors for
        unknown, missing and doubly given names."""
        names = self.input_names
        if len(extra) > len(names):
            raise TypeError(
                f"fusegen: block {self.source} takes {len(names)} extra input(s) "
                f"({', '.join(names) or 'none'}), got {len(extra)} positional"
            )
        given = dict(zip(names, extra))
        for k, v in named.items():
            if k not in names:
                near = difflib.get_close_matches(k, names, n=1)
                raise TypeError(
                    f"fusegen: block {self.source} has no input '{k}'"
                    + (f" (did you mean '{near[0]}'?)" if near else "")
                    + f"; {self._input_list()}"
                )
            if k in given:
                raise TypeError(f"fusegen: input '{k}' of block {self.source} given twice (positionally and by name)")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise TypeError(
                f"fusegen: block {self.source} needs the input(s) {', '.join(repr(n) for n in missing)}; {self._input_list()}"
            )
        return [given[n] for n in names]

    def _check_shapes(self, shapes):
        """shapes: of "input" then the extra inputs; returns the batch."""
        first = shapes[0]
        if len(first) < 1 or first[0] < 1:
            raise ValueError(f"fusegen: input shape {list(first)} has no batch dimension")
        batch = int(first[0])
        for (n, _), shape in zip(self._inputs, shapes):
            want = self.input_shape(batch, n)
            if tuple(shape) != want:
                raise ValueError(
                    f"fusegen: input '{n}' has shape {list(shape)}, but block {self.source} takes "
                    f"{list(self.input_shape('N', n))} (batch {batch}: {list(want)})"
                )
        return batch

    def _check_device(self, t, what):
        torch = sys.modules["torch"]
        if not self.context.has_device:
            raise Error(
                "FG_ERR_NO_DEVICE",
                f"block {self.source} belongs to a CPU-only context (device -1) but got a CUDA tensor; "
                "create the block with Context(device=N) to run on the GPU",
            )
        index = t.device.index if t.device.index is not None else torch.cuda.current_device()
        if index != self.context.device:
            raise ValueError(f"fusegen: {what} is on {t.device} but the block's context uses cuda:{self.context.device}")

    def __call__(self, x: Any, *extra: Any, **named: Any) -> Any:
        """Runs the block (see the class docstring): every input a torch CUDA tensor (GPU),
        or every one a NumPy array / CPU torch tensor (the CPU reference)."""
        xs = [x] + self._order_inputs(extra, named)
        names = [n for n, _ in self._inputs]
        torch = _torch_if_tensor(x)
        if torch is not None and x.is_cuda:
            for n, t in zip(names, xs):
                if _torch_if_tensor(t) is None or not t.is_cuda:
                    raise TypeError(f"fusegen: input '{n}' must be a CUDA tensor, like the block input")
                self._check_dtype(t, f"input '{n}'")
                if t.device != x.device:
                    raise ValueError(f"fusegen: input '{n}' is on {t.device} but the block input is on {x.device}")
            return self._run_cuda(torch, xs)
        for n, t in zip(names, xs):
            if _torch_if_tensor(t) is not None and t.device.type != "cpu":
                raise TypeError(f"fusegen: input '{n}' is on {t.device} but the block input is on the CPU")
        if torch is not None:
            # a half block takes its dtype only (NumPy has no bfloat16: the reference runs on
            # the values as float32, and its result, rounded to the dtype, comes back in it)
            for n, t in zip(names, xs):
                if _torch_if_tensor(t) is not None and (self._dtype != "fp32" or t.dtype == torch.bfloat16):
                    self._check_dtype(t, f"input '{n}'")
            y = self.run_reference(*[t.detach().cpu().float().numpy() if _torch_if_tensor(t) is not None else t for t in xs])
            return torch.from_numpy(y).to(self.torch_dtype)
        return self.run_reference(*xs)

    def _run_cuda(self, torch, xs):
        self._check_device(xs[0], "the input")
        # each input in the block's memory format as it is (no copy); any other is converted once
        xs = [t.contiguous(memory_format=self._memory_format_for(t.dim())) for t in xs]
        # the kernels read 16 bytes at a time
        xs = [t.clone(memory_format=self._memory_format_for(t.dim())) if t.data_ptr() % 16 else t for t in xs]
        batch = self._check_shapes([tuple(t.shape) for t in xs])
        shape = self.output_shape(batch)
        out = torch.empty(shape, device=xs[0].device, dtype=self.torch_dtype,
                          memory_format=self._memory_format_for(len(shape)))
        ptrs = (ctypes.c_void_p * len(xs))(*[t.data_ptr() for t in xs])
        stream = torch.cuda.current_stream(xs[0].device).cuda_stream
        # asynchronous on `stream`; inputs freed when we return are reused by torch's
        # allocator in stream order, after these kernels
        _check(lib().fg_block_run(self._live_handle(), ptrs, out.data_ptr(), batch, stream or None))
        return out

    def _run_workspace(self, input_ptrs, output_ptr: int, batch: int, workspace_ptr: int, workspace_bytes: int,
                       stream: int) -> None:
        """fg_block_run_workspace on raw device pointers (input first, then the extra inputs
        in input_names order) and a stream handle (fusegen.torch's op owns every buffer)."""
        ptrs = (ctypes.c_void_p * len(input_ptrs))(*input_ptrs)
        _check(
            lib().fg_block_run_workspace(
                self._live_handle(), ptrs, output_ptr, batch, workspace_ptr or None, workspace_bytes, stream or None
            )
        )

    def run_reference(self, x: Any, *extra: Any, **named: Any) -> np.ndarray:
        """The CPU float64 reference of the whole block (fg_block_run_cpu) on NumPy arrays
        (converted to float32); returns a float32 NumPy array. Needs host-bound parameters.
        For a bf16/fp16 block the inputs are rounded to the dtype first and each layer's
        result is rounded to it (still returned as float32). Channels last: the arrays have
        the logical shape (N, C, spatial...) and any strides, and the result has the logical
        shape with channels-last strides, as Layer.run_reference."""
        h = self._live_handle()
        arrs = []
        for n, t in zip([n for n, _ in self._inputs], [x] + self._order_inputs(extra, named)):
            a = np.asarray(t)
            if a.dtype.kind != "f":
                raise TypeError(f"fusegen: input '{n}' has dtype {a.dtype}; expected floating point")
            arrs.append(a)
        batch = self._check_shapes([a.shape for a in arrs])
        # the library reads and writes the block's memory order: N(D)HWC when channels last
        mem = [np.ascontiguousarray(a.transpose(self._memory_perm(a.ndim)) if self._channels_last(a.ndim) else a,
                                    dtype=np.float32) for a in arrs]
        shape = self.output_shape(batch)
        cl = self._channels_last(len(shape))
        res = np.empty(tuple(shape[d] for d in self._memory_perm(len(shape))) if cl else shape, dtype=np.float32)
        ptrs = (_P_FLOAT * len(mem))(*[a.ctypes.data_as(_P_FLOAT) for a in mem])
        _check(lib().fg_block_run_cpu(h, ptrs, res.ctypes.data_as(_P_FLOAT), batch))
        return res.transpose(self._logical_perm(len(shape))) if cl else res
