# SPDX-License-Identifier: Apache-2.0
"""fusegen.torch: a fusegen layer as a PyTorch module, over an op registered with torch.library.

    import fusegen.torch
    fused = fusegen.torch.FusedLayer(spec)          # a .lua path or spec text (fusegen.export's)
    fused.load_state_dict(module.state_dict())      # the spec's parameters are its own
    fused = fused.to("cuda")
    y = fused(x)                                    # torch.ops.fusegen.layer
    model = torch.compile(nn.Sequential(stem, fused, head), fullgraph=True)

FusedLayer is an nn.Module whose parameters (and batch_norm running statistics and
num_batches_tracked, as buffers) are the spec's, under the spec's state_dict names, so
state_dict(), load_state_dict(), .to(device) and .cuda() behave as for any module. A
batch_norm on batch statistics never reads or updates its buffers; one folded into the
conv keeps its tensors (the folded weights are the fusegen layer's, made at each bind). Its forward calls the custom op
`fusegen::layer(Tensor x, Tensor[] params, str spec, int instance) -> Tensor`, which has a
fake (meta) implementation, so torch.compile traces through it without a graph break and
Inductor calls it as an extern kernel. On a CUDA tensor the op launches the generated
kernels on torch's current stream, with its output and workspace allocated by torch's
caching allocator (fg_layer_run_workspace): nothing is allocated outside torch (but for a
layer's first run where fusegen times two conv engines, and the image of a wgmma conv's
weights, packed at each bind: docs/torch.md), and the
launches are captured by CUDA graphs (torch.cuda.graph, torch.compile(mode="reduce-overhead"))
like any kernel. On a CPU tensor it runs fusegen's float64 CPU reference (slow: an oracle).

Inference only: the op has no autograd formula (its output does not require grad).
Parameters must be float32; the module's `.double()` or `.half()` make the op refuse to run.
The input and output have the spec's dtype: float32, or torch.bfloat16 / torch.float16 for a
spec with dtype = "bf16" / "fp16" (an input of another dtype is refused).
For a spec with layout = "channels_last" the input is read in torch.channels_last (2D) or
torch.channels_last_3d (3D) memory format -- a tensor already in it as it is, any other one
after one conversion (x.contiguous(memory_format=...)), as torch ops do -- and the output is
returned in that memory format (its shape is the logical (N, C, spatial...) one).
Layers whose conv runs in cuDNN (precision = "tf32") are refused at the first CUDA run.
"""

import base64
import difflib
import itertools
import os
import threading
import weakref
from typing import Optional, Tuple

import torch
from torch import nn

from . import _core

__all__ = ["FusedBlock", "FusedLayer", "fused_block", "fused_layer"]

_lock = threading.Lock()
_contexts: "dict[int, _core.Context]" = {}  # device index (-1: CPU) -> Context
_runtimes: "dict[tuple[int, str], _Runtime]" = {}  # (instance, base64 spec) -> _Runtime
_instances = itertools.count(1)


def _context(index):
    """One context per device for every fused layer of the process (-1: CPU only)."""
    with _lock:
        ctx = _contexts.get(index)
        if ctx is None or ctx.closed:
            ctx = _contexts[index] = _core.Context(device=index)
        return ctx


class _Runtime:
    """The fusegen layers behind one FusedLayer: one per device it has run on, each with the
    parameter tensors it is bound to. Shared by every call of the op with its instance id."""

    kind = _core.Layer  # what a spec is loaded as (_BlockRuntime: _core.Block)

    def __init__(self, spec, name):
        self.spec, self.name = spec, name
        self.lock = threading.Lock()
        self.layers = {}  # device index (-1: CPU) -> Layer (_BlockRuntime: Block)
        self.bound = {}  # device index -> [(data_ptr, version) per parameter]
        probe = self.layer(-1)
        self.param_names = [n for n, _ in probe.params]
        self.param_shapes = [tuple(s) for _, s in probe.params]
        self.dtype = probe.torch_dtype  # of every input and the output (the spec's dtype)
        self.dtype_name = probe.dtype
        self.out_tail = tuple(probe.output_shape(1)[1:])
        self.describe(probe)

    def describe(self, probe):
        """What the op needs of the spec beside the above, from its CPU layer `probe`."""
        self.ignored = probe.ignored
        self.in_tail = tuple(probe.input_shape(1)[1:])
        self.memory_format = probe.torch_memory_format  # of the input and the output (the spec's layout)

    def layer(self, index):
        layer = self.layers.get(index)
        if layer is None or layer.closed:
            layer = self.layers[index] = self.kind(self.spec, context=_context(index), name=self.name)
            self.bound.pop(index, None)
        return layer

    def check_input(self, x, params):
        if tuple(x.shape[1:]) != self.in_tail or x.dim() != len(self.in_tail) + 1:
            raise ValueError(
                f"fusegen: input shape {list(x.shape)} does not match layer {self.name}'s input "
                f"{['N'] + list(self.in_tail)}"
            )
        if x.dtype != self.dtype:
            raise TypeError(
                f"fusegen: the input is {x.dtype}, but layer {self.name} takes {self.dtype} "
                f'(its spec\'s dtype = "{self.dtype_name}")'
            )
        self.check_params(x, params)

    def check_params(self, x, params):
        kind = self.kind._kind  # "layer" or "block", in messages
        if len(params) != len(self.param_names):
            raise ValueError(f"fusegen: {kind} {self.name} takes {len(self.param_names)} parameters, got {len(params)}")
        for name, shape, p in zip(self.param_names, self.param_shapes, params):
            if tuple(p.shape) != shape:
                raise ValueError(f"fusegen: parameter '{name}' has shape {list(p.shape)}, the {kind} needs {list(shape)}")
            if p.dtype != torch.float32:
                raise TypeError(f"fusegen: parameter '{name}' is {p.dtype}; fusegen runs float32")
            if p.device != x.device:
                raise ValueError(f"fusegen: parameter '{name}' is on {p.device} but the input is on {x.device}")

    def bind(self, index, layer, params):
        """(Re)binds the parameters whose storage or contents (version) changed since the
        last call: CUDA tensors by pointer, CPU ones by copy. A CUDA tensor updated in place
        is bound again too: the kernels read most parameters through the pointer, but a
        batch norm folded into the conv is recomputed from its tensors when they are bound,
        and a conv on the wgmma engine reads its weight as an image packed at the bind."""
        seen = self.bound.get(index)
        now = [(p.data_ptr(), p._version) for p in params]
        if seen == now:
            return
        if index >= 0 and torch.cuda.is_current_stream_capturing():
            changed = [n for i, n in enumerate(self.param_names) if seen is None or seen[i] != now[i]]
            raise RuntimeError(
                f"fusegen: parameters {changed} are new or changed since this module's last run, and the "
                "stream is being captured into a CUDA graph: binding them reads them (a folded batch norm, "
                "a wgmma conv's packed weights), which a capture cannot hold; run the module once outside "
                "the capture after changing its parameters (as torch.cuda.graph's warm-up does)")
        for i, (name, p) in enumerate(zip(self.param_names, params)):
            if seen is not None and seen[i] == now[i]:
                continue
            if index >= 0:
                if not p.is_contiguous():
                    raise ValueError(f"fusegen: parameter '{name}' must be contiguous")
                layer.bind_device(name, p.detach())
            else:
                layer.bind(name, p.detach())
        self.bound[index] = now

    def bound_layer(self, x, params):
        """(the layer of x's device bound to `params`, the device's index (-1: CPU))."""
        if x.is_cuda:
            index = x.device.index if x.device.index is not None else torch.cuda.current_device()
        elif x.device.type == "cpu":
            index = -1
        else:
            raise ValueError(f"fusegen: tensors on {x.device} are not supported (CUDA or CPU)")
        with self.lock:
            layer = self.layer(index)
            self.bind(index, layer, params)
        return layer, index

    def launch(self, layer, inputs, out, batch):
        """Runs `layer` on the CUDA device of `out` (inputs: device pointers; a block's, a
        list) with a workspace from torch's caching allocator, on the current stream: freed
        when this returns, which is safe, since later users of the memory run after these
        kernels on the same stream."""
        ws_bytes = layer.workspace_size(batch)
        ws = torch.empty(ws_bytes, device=out.device, dtype=torch.uint8) if ws_bytes else None
        stream = torch.cuda.current_stream(out.device).cuda_stream
        layer._run_workspace(inputs, out.data_ptr(), batch, ws.data_ptr() if ws is not None else 0, ws_bytes, stream)
        return out

    def run(self, x, params):
        self.check_input(x, params)
        layer, index = self.bound_layer(x, params)
        x = x.detach()
        mf = self.memory_format  # a channels-last layer: x as it is when already channels last
        if index < 0:
            out = layer.run_reference(x.contiguous(memory_format=mf).float().numpy())
            return torch.from_numpy(out).to(self.dtype)
        x = x.contiguous(memory_format=mf)
        if x.data_ptr() % 16:  # the kernels read 16 bytes at a time
            x = x.clone(memory_format=mf)
        batch = x.shape[0]
        out = torch.empty((batch,) + self.out_tail, device=x.device, dtype=self.dtype, memory_format=mf)
        return self.launch(layer, x.data_ptr(), out, batch)

    def close(self):
        if any(i >= 0 for i in self.layers) and torch.cuda.is_available():
            torch.cuda.synchronize()  # kernels of these layers may still be in flight
        for layer in self.layers.values():
            layer.close()
        self.layers.clear()


def _encode(text):
    """The spec as the op's string argument: base64, because Inductor writes string arguments
    into generated Python source as literals and a spec's newlines and quotes break them."""
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _runtime(instance, spec, cls=None):
    cls = cls or _Runtime
    key = (instance, spec)
    with _lock:
        rt = _runtimes.get(key)
    if rt is None:
        # an op call without its FusedLayer (e.g. a graph saved and loaded elsewhere)
        try:
            text = base64.b64decode(spec.encode("ascii"), validate=True).decode("utf-8")
        except (ValueError, UnicodeError):
            raise ValueError(f"fusegen: the op's spec argument is not a base64-encoded spec (layer instance {instance})") from None
        rt = cls(text, f"fusegen-{cls.kind._kind}-{instance}.lua")
        with _lock:
            rt = _runtimes.setdefault(key, rt)
    return rt


def _release(key):
    with _lock:
        rt = _runtimes.pop(key, None)
    if rt is not None:
        try:
            rt.close()
        except Exception:  # at interpreter exit torch or the library may be gone
            pass


@torch.library.custom_op("fusegen::layer", mutates_args=())
def fused_layer(x: torch.Tensor, params: list[torch.Tensor], spec: str, instance: int) -> torch.Tensor:
    """The op: runs the spec's layer on x with the given parameters (in the spec's order).
    `spec` is the spec's text in base64 (see _encode). `instance` names the FusedLayer whose fusegen layers (kernels, bindings) serve the call."""
    return _runtime(instance, spec).run(x, params)


@fused_layer.register_fake
def _(x, params, spec, instance):
    rt = _runtime(instance, spec)
    if x.dim() != len(rt.in_tail) + 1 or tuple(x.shape[1:]) != rt.in_tail:
        raise ValueError(
            f"fusegen: input shape {list(x.shape)} does not match layer {rt.name}'s input {['N'] + list(rt.in_tail)}"
        )
    return x.new_empty((x.shape[0],) + rt.out_tail, dtype=rt.dtype).contiguous(memory_format=rt.memory_format)


def _read_spec(spec, name):
    """(text, name) of a spec given as a .lua path or as its text."""
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and spec.endswith(".lua") and "\n" not in spec):
        path = os.fspath(spec)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), name or path
        except OSError as e:
            raise _core.Error("FG_ERR_SPEC", f"{path}: cannot read the spec: {e.strerror}") from None
    if isinstance(spec, str):
        return spec, name
    raise TypeError(f"fusegen: a spec is a path or Lua source text, not {type(spec).__name__}")


class _Fused(nn.Module):
    """What FusedLayer and FusedBlock share: the spec, its runtime (`_fg_runtime_class`)
    registered under a fresh instance id for the op's calls, the spec's parameters as the
    module's, and the runtime's fusegen layer or block for a device."""

    _fg_runtime_class = _Runtime

    def _fg_setup(self, spec, name):
        """__init__'s common part (after nn.Module's): returns the runtime."""
        text, name = _read_spec(spec, name)
        instance = next(_instances)
        rt = self._fg_runtime_class(text, name or "<string>")
        encoded = _encode(text)
        with _lock:
            _runtimes[(instance, encoded)] = rt
        self._fg_spec = text
        self._fg_encoded = encoded
        self._fg_instance = instance
        self._fg_names = list(rt.param_names)
        self._fg_output_tail = rt.out_tail
        weakref.finalize(self, _release, (instance, encoded))
        for pname, shape in zip(rt.param_names, rt.param_shapes):
            self._register(pname, shape)
        return rt

    def _register(self, key, shape, dtype="F32"):
        """Registers `key` ('conv.weight', 'bn.running_var', 'scale') under child modules, as
        nn.Module.state_dict names it; running statistics and num_batches_tracked as buffers
        (running variances start at one), the rest as parameters."""
        *path, leaf = key.split(".")
        owner = self
        for part in path:
            child = owner._modules.get(part)
            if child is None:
                child = nn.Module()
                try:
                    owner.add_module(part, child)
                except (KeyError, TypeError) as e:
                    raise ValueError(f"fusegen: parameter '{key}' cannot be a module attribute: {e}") from None
            owner = child
        try:
            if dtype == "I64":
                owner.register_buffer(leaf, torch.zeros(shape, dtype=torch.long))
            elif leaf in ("running_mean", "running_var"):
                owner.register_buffer(leaf, torch.ones(shape) if leaf == "running_var" else torch.zeros(shape))
            else:
                owner.register_parameter(leaf, nn.Parameter(torch.zeros(shape), requires_grad=False))
        except (KeyError, TypeError) as e:
            raise ValueError(f"fusegen: parameter '{key}' cannot be a module attribute: {e}") from None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A BatchNorm with track_running_stats=False saves no running statistics and no
        # num_batches_tracked, and a block's batch norms may keep no num_batches_tracked:
        # the buffers the op never reads (_fg_optional) keep their values instead of being
        # missing (the children load from this dict after this call).
        for name in self._fg_optional:
            if prefix + name not in state_dict:
                state_dict[prefix + name] = self.get_buffer(name)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _fg_params(self):
        out = []
        for key in self._fg_names:
            *path, leaf = key.split(".")
            owner = self
            for part in path:
                owner = owner._modules[part]
            t = owner._parameters.get(leaf)
            out.append(t if t is not None else owner._buffers[leaf])
        return out

    @property
    def spec(self) -> str:
        """The spec's Lua text."""
        return self._fg_spec

    def output_shape(self, batch: int) -> Tuple[int, ...]:
        return (batch,) + self._fg_output_tail

    def _fg_layer(self, device):
        """(the runtime's layer or block for `device` (default: the parameters'), its index)"""
        device = torch.device(device) if device is not None else self._fg_params()[0].device
        index = -1
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
        return _runtime(self._fg_instance, self._fg_encoded, self._fg_runtime_class).layer(index), index

    def workspace_size(self, batch: int, device: "Optional[torch.device | str]" = None) -> int:
        """Bytes of workspace a CUDA run of `batch` samples takes from torch's allocator (the
        plan depends on the GPU: default, the parameters' device)."""
        return self._fg_layer(device)[0].workspace_size(batch)

    def prepare(self, device: "Optional[torch.device | str]" = None) -> None:
        """Compiles or loads the kernels (a block's: every layer's) for `device` (default: the
        parameters' device) now, e.g. before capturing a CUDA graph by hand: loading kernels
        cannot be captured."""
        layer, index = self._fg_layer(device)
        if index >= 0:
            layer.prepare()


class FusedLayer(_Fused):
    """A fusegen layer as an nn.Module (see the module's docstring).

    spec: a path to a .lua file, or the spec's text (e.g. what fusegen.export returns).
    name: stands for the spec in messages (default: the file, or '<name of the layer>.lua').
    The parameters start at zero (running variances at one): load a state_dict.
    """

    def __init__(self, spec: "str | os.PathLike[str]", name: Optional[str] = None):
        super().__init__()
        rt = self._fg_setup(spec, name)
        self._fg_input_tail = rt.in_tail
        # what a BatchNorm's state_dict has beside (fg_layer_ignored_info): buffers the op
        # never reads; a module without them (track_running_stats=False) still loads strictly
        self._fg_optional = [name for name, _, _ in rt.ignored]
        for name, shape, dtype in rt.ignored:
            self._register(name, shape, dtype)

    def input_shape(self, batch: int) -> Tuple[int, ...]:
        return (batch,) + self._fg_input_tail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.fusegen.layer(x, self._fg_params(), self._fg_encoded, self._fg_instance)

    def extra_repr(self):
        first = next((line for line in self._fg_spec.splitlines() if line.lstrip().startswith("return layer")), "")
        return f"{first.strip().rstrip('{').strip()} input {['N', *self._fg_input_tail]} -> output {['N', *self._fg_output_tail]}"


# ---- blocks ------------------------------------------------------------------------------------


class _BlockRuntime(_Runtime):
    """The fusegen blocks behind one FusedBlock: one per device (-1: CPU), as _Runtime."""

    kind = _core.Block

    def describe(self, probe):
        self.input_names = probe.input_names
        self.in_tails = [tuple(probe.input_shape(1, n)[1:]) for n in ["input"] + self.input_names]
        # every tensor of the block (the extra inputs too) has its dtype and layout
        self.memory_format_for = probe._memory_format_for  # by rank: an [N, C] input is plain
        self.out_memory_format = probe._memory_format_for(len(self.out_tail) + 1)

    def check_inputs(self, x, extra):
        names = ["input"] + self.input_names
        if len(extra) != len(self.input_names):
            raise ValueError(
                f"fusegen: block {self.name} takes {len(self.input_names)} extra input(s) "
                f"({', '.join(self.input_names) or 'none'}), got {len(extra)}"
            )
        for n, tail, t in zip(names, self.in_tails, [x] + list(extra)):
            if t.dim() != len(tail) + 1 or tuple(t.shape[1:]) != tail or t.shape[0] != x.shape[0]:
                raise ValueError(
                    f"fusegen: input '{n}' has shape {list(t.shape)}, but block {self.name} takes "
                    f"{['N', *tail]} (N = {x.shape[0]}, the block input's batch)"
                )
            if t.dtype != self.dtype:
                raise TypeError(
                    f"fusegen: input '{n}' is {t.dtype}, but block {self.name} takes {self.dtype} "
                    f'(its spec\'s dtype = "{self.dtype_name}")'
                )
            if t.device != x.device:
                raise ValueError(f"fusegen: input '{n}' is on {t.device} but the block input is on {x.device}")

    def run(self, x, extra, params):
        self.check_inputs(x, extra)
        self.check_params(x, params)
        block, index = self.bound_layer(x, params)
        # each input in the block's memory format: as it is when already so (no copy)
        xs = [t.detach().contiguous(memory_format=self.memory_format_for(t.dim())) for t in [x] + list(extra)]
        if index < 0:
            # NumPy has no bfloat16: the reference on the values as float32, its result (rounded
            # to the dtype) back in the dtype
            y = torch.from_numpy(block.run_reference(*[t.float().numpy() for t in xs]))
            return y.to(self.dtype).contiguous(memory_format=self.out_memory_format)
        # the kernels read 16 bytes at a time
        xs = [t.clone(memory_format=self.memory_format_for(t.dim())) if t.data_ptr() % 16 else t for t in xs]
        batch = x.shape[0]
        out = torch.empty((batch,) + self.out_tail, device=x.device, dtype=self.dtype,
                          memory_format=self.out_memory_format)
        return self.launch(block, [t.data_ptr() for t in xs], out, batch)


@torch.library.custom_op("fusegen::block", mutates_args=())
def fused_block(x: torch.Tensor, extra: list[torch.Tensor], params: list[torch.Tensor], spec: str,
                instance: int) -> torch.Tensor:
    """The block op: runs the spec's block on x and the extra inputs (in the spec's order:
    its `inputs` sorted by name) with the given parameters (in the block's order). `spec` is
    the spec's text in base64; `instance` names the FusedBlock whose blocks serve the call."""
    return _runtime(instance, spec, _BlockRuntime).run(x, extra, params)


@fused_block.register_fake
def _(x, extra, params, spec, instance):
    rt = _runtime(instance, spec, _BlockRuntime)
    if len(extra) != len(rt.input_names):
        raise ValueError(f"fusegen: block {rt.name} takes {len(rt.input_names)} extra input(s), got {len(extra)}")
    for n, tail, t in zip(["input"] + rt.input_names, rt.in_tails, [x] + list(extra)):
        if t.dim() != len(tail) + 1 or tuple(t.shape[1:]) != tail:
            raise ValueError(f"fusegen: input '{n}' has shape {list(t.shape)}, but block {rt.name} takes {['N', *tail]}")
    return x.new_empty((x.shape[0],) + rt.out_tail, dtype=rt.dtype).contiguous(memory_format=rt.out_memory_format)


class FusedBlock(_Fused):
    """A fusegen block spec (docs/spec.md, "Blocks") as an nn.Module, over the op
    `fusegen::block(Tensor x, Tensor[] extra, Tensor[] params, str spec, int instance)`.

    Its parameters are the block's, under their state_dict keys (conv1.weight,
    bn1.running_mean, ...), so the equivalent PyTorch module's state_dict loads into it;
    a batch norm's num_batches_tracked is accepted (a buffer the op never reads).
    forward(x, *extra, **named): the extra inputs (`input_names`: the spec's `inputs`, sorted
    by name) positionally in that order or by name. CUDA tensors: the block's kernels on
    torch's current stream, output and workspace from torch's allocator; CPU tensors: the
    float64 CPU reference. Every input and the output have the spec's block `dtype` and
    `layout` (a bf16 channels-last block takes torch.bfloat16 tensors, 4-D/5-D ones in
    channels_last memory, as they are; temb [N, C] in bf16 too); parameters are float32.
    Inference only.
    The parameters start at zero (running variances at one): load a state_dict.

    What a PyTorch block computes outside the spec (SD's time_emb_proj(silu(temb))) stays a
    PyTorch module: subclass FusedBlock, add it, and forward its result (docs/torch.md).
    """

    _fg_runtime_class = _BlockRuntime

    def __init__(self, spec: "str | os.PathLike[str]", name: Optional[str] = None):
        super().__init__()
        rt = self._fg_setup(spec, name)
        self._fg_input_names = list(rt.input_names)
        self._fg_input_tails = list(rt.in_tails)
        self._fg_layers = rt.layer(-1).layers
        # a batch norm on running statistics: the module's state_dict also has its
        # num_batches_tracked, which the block accepts and never reads
        self._fg_optional = []
        for pname in rt.param_names:
            if pname.endswith(".running_mean"):
                extra = pname[: -len("running_mean")] + "num_batches_tracked"
                if extra not in rt.param_names:
                    self._register(extra, (), "I64")
                    self._fg_optional.append(extra)

    @property
    def input_names(self) -> "list[str]":
        """The extra inputs' names, in the order forward takes them positionally."""
        return list(self._fg_input_names)

    def input_shape(self, batch: int, name: str = "input") -> Tuple[int, ...]:
        names = ["input"] + self._fg_input_names
        if name not in names:
            raise ValueError(f"fusegen: the block has no input '{name}' (its inputs: {', '.join(names)})")
        return (batch,) + self._fg_input_tails[names.index(name)]

    def _fg_order(self, extra, named):
        names = self._fg_input_names
        if len(extra) > len(names):
            raise TypeError(
                f"fusegen: the block takes {len(names)} extra input(s) ({', '.join(names) or 'none'}), "
                f"got {len(extra)} positional"
            )
        given = dict(zip(names, extra))
        for k, v in named.items():
            if k not in names:
                near = difflib.get_close_matches(k, names, n=1)
                raise TypeError(
                    f"fusegen: the block has no input '{k}'" + (f" (did you mean '{near[0]}'?)" if near else "")
                    + f"; its extra inputs: {', '.join(names) or 'none'}"
                )
            if k in given:
                raise TypeError(f"fusegen: input '{k}' given twice (positionally and by name)")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise TypeError(f"fusegen: the block needs the input(s) {', '.join(repr(n) for n in missing)}")
        return [given[n] for n in names]

    def forward(self, x: torch.Tensor, *extra: torch.Tensor, **named: torch.Tensor) -> torch.Tensor:
        return torch.ops.fusegen.block(x, self._fg_order(extra, named), self._fg_params(), self._fg_encoded,
                                       self._fg_instance)

    def extra_repr(self):
        ins = ", ".join(f"{n} {['N', *t]}" for n, t in zip(["input"] + self._fg_input_names, self._fg_input_tails))
        return f"layers {self._fg_layers}: {ins} -> output {['N', *self._fg_output_tail]}"
