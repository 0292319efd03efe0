# SPDX-License-Identifier: Apache-2.0
"""fusegen: shape-specialized fused CUDA kernels for conv + epilogue layers, from Python.

A thin ctypes binding over libfusegen.so (include/fusegen.h); no compiled extension.

    import fusegen, torch
    layer = fusegen.Layer("specs/kb79.lua")            # default context: GPU if torch sees one
    layer.load_state_dict(module.state_dict())          # PyTorch names bind as they are
    y = layer(x)                                        # x: CUDA float32 tensor [N, 3, 16, 32, 32]
    y_ref = layer(x.cpu().numpy())                      # the CPU float64 reference, as NumPy

    spec = fusegen.export(module, example_input)        # a PyTorch conv block -> spec text
    fused = fusegen.torch.FusedLayer(spec)              # an nn.Module over a torch.library op

The library is found through $FUSEGEN_LIBRARY (a path to libfusegen.so), else the copy an
installed wheel carries in this package's folder, else <repo>/build/libfusegen.so in a source
checkout, else the system's library path (ctypes.util.find_library). It is loaded at first
use, not at import; torch is imported only by fusegen.export and fusegen.torch.
"""

from . import _native
from ._core import (
    Context,
    Error,
    IncompatibleKeys,
    Layer,
    Block,
    StateDictError,
    default_context,
    library_path,
    version,
)
from ._export import ExportError, export
from ._native import LibraryNotFound

try:
    from ._version import __version__  # written into the wheel when it is built
except ImportError:  # a source checkout: the version is in CMakeLists.txt
    __version__ = _native.source_version()


def __getattr__(name: str):
    # `fusegen.torch` is imported on first use, so `import fusegen` never imports torch.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'fusegen' has no attribute '{name}'")


__all__ = [
    "Context",
    "Error",
    "ExportError",
    "IncompatibleKeys",
    "Layer",
    "Block",
    "LibraryNotFound",
    "StateDictError",
    "__version__",
    "default_context",
    "export",
    "library_path",
    "version",
]
