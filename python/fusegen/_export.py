# SPDX-License-Identifier: Apache-2.0
"""fusegen.export: a PyTorch conv block -> the fusegen spec (Lua text) that computes the same.

    spec = fusegen.export(module, example_input)     # 'return layer "Model" { ... }'

torch.fx traces the module symbolically (modules of torch.nn stay whole, so their names, and
so their state_dict keys, carry over into the spec), and one run on `example_input` gives
every value's shape. Each node of the graph then becomes one op of the spec language
(docs/spec.md), or the export stops with ExportError naming the node, its source line and
what the language cannot express. The spec's parameters are the module's state_dict keys:
`fusegen.Layer(spec).load_state_dict(module.state_dict())` binds them as they are.

What maps (module, function or method):
  conv       nn.Conv2d/3d, F.conv2d/3d (weights `P.weight`/`P.bias`): one per layer; the ops
             before it (norms and elementwise ops: GroupNorm -> SiLU -> conv) form its
             prologue, anything else there is refused by the spec loader (docs/spec.md)
  unary      ReLU ReLU6 LeakyReLU GELU Sigmoid Tanh Softplus Mish SiLU Hardswish Hardsigmoid
             Hardtanh Softsign, clamp/clip/clamp_min/clamp_max, exp log abs neg (and their
             functional and method forms)
  binary     + - * / (operator, torch.add/sub/mul/div, methods), torch.minimum/maximum,
             torch.min/max(x, other): the other operand a number, a parameter or buffer
             (by its state_dict key) or an earlier value of the chain (a residual)
  norms      nn.GroupNorm, nn.InstanceNorm1d/2d/3d, nn.BatchNorm1d/2d/3d (training mode: batch
             statistics, the running ones loaded and left unchanged; eval mode: running
             statistics, folded into the conv when the norm follows it; momentum recorded),
             nn.LayerNorm, F.group_norm, F.layer_norm
  reductions sum mean amax amin logsumexp softmax, torch.max/min(x, dim)[0] / .values
  pools      nn.MaxPool/AvgPool 1d/2d/3d and F.max_pool*/avg_pool*; adaptive avg/max pools
             whose output divides the input (global average pool included)
  no-ops     nn.Identity, x.contiguous()
  dropout    nn.Dropout*, F.dropout* in inference (eval mode; refused in training mode)
  shape ops  nn.Flatten, torch.flatten/x.flatten (from dim 1 on), torch.squeeze/x.squeeze
             with a dim, torch.unsqueeze/x.unsqueeze, x.view, torch.reshape/x.reshape: a new
             shape for the same values, the batch staying dim 0 (the spec language lets
             only elementwise ops follow them: docs/spec.md, "Shape ops")
PENDING_OPS below lists the ops the exporter maps whose spec op arrived later; an entry set
to False refuses its op with the spec text it would emit (all are on).
"""

import copy
import inspect
import operator
import os
import re
from typing import Any, Optional

__all__ = ["ExportError", "PENDING_OPS", "export"]

# ---- ops the spec language was extended with ---------------------------------------------
# The exporter knew how each PyTorch call maps (the text on the right is what it emits)
# before fusegen's spec loader accepted the op; an entry is True once it does. An entry set
# to False refuses the node with a message that names this table.
PENDING_OPS = {
    "dropout": True,  # nn.Dropout*, F.dropout* in inference: dropout { p = P }
    "flatten": True,  # nn.Flatten, torch.flatten, x.flatten: flatten { start_dim = S, end_dim = E }
    "squeeze": True,  # torch.squeeze, x.squeeze(D): squeeze { dim = D }
    "unsqueeze": True,  # torch.unsqueeze, x.unsqueeze(D): unsqueeze { dim = D }
    "view": True,  # x.view(...): view { shape = { "N", ... } }
    "reshape": True,  # torch.reshape, x.reshape(...): reshape { shape = { "N", ... } }
}


class ExportError(ValueError):
    """The module cannot be written as a fusegen spec. `node` is the name of the torch.fx node
    at fault (None when the whole module is), `where` its source line when known."""

    def __init__(self, message: str, node: Optional[str] = None, where: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.node = node
        self.where = where


# ---- the spec text ---------------------------------------------------------------------------


class _Op:
    """One op of the spec: a constructor, its fields in order, the fx node it came from."""

    def __init__(self, kind, fields, node):
        self.kind = kind
        self.fields = fields  # [(name, value)]
        self.node = node
        self.as_name = None


def _lua(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, (list, tuple)):
        return "{ " + ", ".join(_lua(v) for v in value) + " }"
    raise TypeError(f"no Lua form for {value!r}")


def _compact(values):
    """A spatial field: one number when every dim has the same, else the list."""
    values = [int(v) for v in values]
    return values[0] if len(set(values)) == 1 else values


# ---- argument binding ----------------------------------------------------------------------
# One Python signature per call shape, so that positional and keyword arguments (as written
# in the module's forward) are read the same way whatever the spelling.


def _s_unary(input, inplace=False): ...
def _s_leaky(input, negative_slope=0.01, inplace=False): ...
def _s_gelu(input, approximate="none"): ...
def _s_softplus(input, beta=1.0, threshold=20.0): ...
def _s_hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False): ...
def _s_clamp(input, min=None, max=None): ...
def _s_clamp_min(input, min): ...
def _s_clamp_max(input, max): ...
def _s_binary(input, other, *, alpha=1, rounding_mode=None): ...
def _s_reduce(input, dim=None, keepdim=False, *, dtype=None): ...
def _s_minmax(input, dim=None, keepdim=False): ...
def _s_amax(input, dim=(), keepdim=False): ...
def _s_logsumexp(input, dim, keepdim=False): ...
def _s_softmax(input, dim=None, _stacklevel=3, dtype=None): ...
def _s_torch_softmax(input, dim, dtype=None): ...
def _s_conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1): ...
def _s_group_norm(input, num_groups, weight=None, bias=None, eps=1e-05): ...
def _s_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05): ...
def _s_max_pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False): ...
def _s_avg_pool(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None): ...
def _s_avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True): ...
def _s_adaptive(input, output_size, return_indices=False): ...
def _s_dropout(input, p=0.5, training=True, inplace=False): ...
def _s_flatten(input, start_dim=0, end_dim=-1): ...
def _s_dim(input, dim=None): ...
def _s_shape(input, *shape): ...


def _bind(sig_fn, node, args, kwargs):
    try:
        bound = inspect.signature(sig_fn).bind(*args, **kwargs)
    except TypeError as e:
        raise _Refusal(f"unexpected arguments ({e})") from None
    bound.apply_defaults()
    return bound.arguments


class _Refusal(Exception):
    """Raised by a handler; the translator turns it into an ExportError naming the node."""


# ---- the translation -------------------------------------------------------------------------


def _node_where(node):
    """'model.py:14: y = torch.sigmoid(c)' from the node's recorded stack (its innermost frame
    outside torch), else None."""
    import sys

    torch_dir = os.path.dirname(sys.modules["torch"].__file__) + os.sep
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', node.stack_trace or "")
    frames = [f for f in frames if not f[0].startswith(torch_dir)]
    if not frames:
        return None
    path, line, code = frames[-1]
    return f"{os.path.basename(path)}:{line}: {code.strip()}"


def _describe(node):
    if node.op == "call_module":
        what = f"module '{node.target}'"
    elif node.op == "call_method":
        what = f"method .{node.target}()"
    else:
        what = getattr(node.target, "__name__", str(node.target))
    return what


class _Translator:
    def __init__(self, module, gm, torch, F, nn):
        self.module = module
        self.gm = gm
        self.torch, self.F, self.nn = torch, F, nn
        self.modules = dict(gm.named_modules())
        self.state_keys = set(module.state_dict().keys())
        self.ops = []
        self.alias = {}  # node -> the node whose value it is
        self.value_op = {}  # node -> index in self.ops of the op producing its value
        self.current = None  # the node holding the chain's current value (the input at first)
        self.input = None  # the placeholder
        self.conv_seen = False  # ops before it form the spec's prologue (docs/spec.md)
        self.shape_queries = set()  # x.size(), x.shape, x.dim() and their items: numbers, not values
        self._build_tables()

    # -- helpers

    def shape(self, node):
        meta = node.meta.get("tensor_meta")
        if not hasattr(meta, "shape") and isinstance(meta, (tuple, list)) and meta:
            meta = meta[0]  # torch.max(x, dim): (values, indices)
        shape = getattr(meta, "shape", None)
        if shape is None:
            raise _Refusal(f"has no tensor shape after the run on the example input (value {node.name})")
        return tuple(int(d) for d in shape)

    def resolve(self, node):
        while node in self.alias:
            node = self.alias[node]
        return node

    def is_value(self, arg):
        return isinstance(arg, self.Node) and self.resolve(arg) in self.value_op

    def param_key(self, arg):
        """The state_dict key of a get_attr node (a parameter or persistent buffer), else None."""
        if isinstance(arg, self.Node) and arg.op == "get_attr":
            return arg.target
        return None

    def tensor_of(self, key):
        obj = self.module
        for part in key.split("."):
            obj = getattr(obj, part)
        return obj

    def need_param(self, arg, what):
        key = self.param_key(arg)
        if isinstance(arg, self.Node) and arg in self.shape_queries:
            raise _Refusal(f"uses a tensor's shape ('{arg.name}') as {what}: write the number itself")
        if key is None:
            raise _Refusal(f"{what} must be a parameter or buffer of the module (got {self._arg_text(arg)})")
        if key not in self.state_keys:
            raise _Refusal(
                f"{what} '{key}' is not in the module's state_dict (a non-persistent buffer or a plain "
                "tensor attribute): the spec binds parameters by state_dict key; register it with "
                "nn.Parameter or register_buffer(persistent=True)"
            )
        return key

    def _arg_text(self, arg):
        if isinstance(arg, self.Node):
            return f"node '{arg.name}'"
        return repr(arg)

    def chain_input(self, node, arg):
        """Checks that `arg` is the chain's current value, the only value a non-binary op may
        read (the spec is a chain: op k reads the value of op k-1)."""
        if not isinstance(arg, self.Node):
            raise _Refusal(f"its input is {arg!r}, not a tensor of the chain")
        src = self.resolve(arg)
        if self.current is None:
            raise _Refusal("comes before the layer's input")  # the placeholder starts the chain
        if src is not self.current:
            if src is self.input:
                raise _Refusal(
                    "reads the layer's input, but only the first op (the conv, or its prologue) may: "
                    "a spec is one chain of ops through one conv"
                )
            if src in self.value_op:
                raise _Refusal(
                    f"reads '{src.name}', but the value before it is '{self.current.name}': a spec is one "
                    "chain of ops, each reading the one before; an earlier value can only be the second "
                    "operand of add/sub/mul/div/min/max"
                )
            raise _Refusal(f"reads {self._arg_text(arg)}, which is not a value of the chain (computed from parameters?)")
        return src

    def emit(self, node, kind, fields):
        op = _Op(kind, fields, node)
        self.ops.append(op)
        self.value_op[node] = len(self.ops) - 1
        self.current = node
        return op

    def dims(self, node, dim, rank, what="dim"):
        """A dim argument (int or sequence) as non-negative dims, refusing the batch dim."""
        if dim is None:
            raise _Refusal("reduces over every dim, the batch included: name the dims (fusegen's batch is a run-time argument)")
        dims = [dim] if isinstance(dim, int) else list(dim)
        if not dims:
            raise _Refusal("reduces over every dim, the batch included: name the dims (fusegen's batch is a run-time argument)")
        out = []
        for d in dims:
            if not isinstance(d, int):
                raise _Refusal(f"field '{what}' must be whole numbers (got {d!r})")
            if not -rank <= d < rank:
                raise _Refusal(f"names dim {d} of a {rank}-dim value")
            d = d % rank
            if d == 0:
                raise _Refusal(
                    "reduces over the batch dim 0; fusegen's batch is a run-time argument and cannot be reduced"
                )
            out.append(d)
        return out

    def number(self, value, what):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Refusal(f"{what} must be a number (got {self._arg_text(value)})")
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise _Refusal(f"{what} must be finite (got {value})")
        return value

    # -- the walk

    def run(self):
        for node in self.gm.graph.nodes:
            try:
                self.visit(node)
            except _Refusal as r:
                where = _node_where(node)
                raise ExportError(
                    f"fusegen.export: node '{node.name}' ({_describe(node)}{', ' + where if where else ''}) "
                    f"{r}",
                    node=node.name,
                    where=where,
                ) from None
        if not self.conv_seen:
            raise ExportError("fusegen.export: the module computes no convolution: a spec has one conv2d or conv3d")
        return self.ops

    def visit(self, node):
        if node.op == "placeholder":
            if self.input is not None:
                if node.users:
                    raise _Refusal("is a second input: a spec has one input tensor")
                return
            self.input = node
            # the chain starts at the input: ops before the conv are its prologue (the spec
            # loader says which may come there; _check_loads reports its refusal)
            self.current = node
            return
        if node.op == "get_attr":
            return  # read where used
        if node.op == "output":
            out = node.args[0]
            if not isinstance(out, self.Node):
                raise _Refusal("returns more than one tensor (or no tensor): a spec has one output")
            if self.resolve(out) is not self.current:
                raise _Refusal(
                    f"returns '{self.resolve(out).name}', but the last value of the chain is "
                    f"'{self.current.name if self.current is not None else None}'"
                )
            return
        handler = self.handler(node)
        if handler is None:
            raise _Refusal(self.unsupported_reason(node))
        handler(node)

    def unsupported_reason(self, node):
        if node.op == "call_module":
            cls = type(self.modules[node.target]).__name__
            return f"is a {cls}, which has no op in the spec language (docs/spec.md lists the ops)"
        return "has no op in the spec language (docs/spec.md lists the ops)"

    def handler(self, node):
        if node.op == "call_module":
            mod = self.modules[node.target]
            for cls, fn in self.module_handlers:
                if isinstance(mod, cls):
                    return lambda n: fn(n, mod)
            return None
        if node.op == "call_function":
            for target, fn in self.function_handlers:
                if node.target is target:
                    return fn
            return None
        if node.op == "call_method":
            return self.method_handlers.get(node.target)
        return None

    # -- handler tables

    def _build_tables(self):
        torch, F, nn = self.torch, self.F, self.nn
        import torch.fx

        self.Node = torch.fx.Node
        u = self.unary
        self.module_handlers = [
            (nn.Conv2d, self.conv_module),
            (nn.Conv3d, self.conv_module),
            (nn.Identity, self.identity),
            (nn.ReLU, lambda n, m: u(n, n.args[0], "relu", [])),
            (nn.ReLU6, lambda n, m: u(n, n.args[0], "hardtanh", [("min", 0.0), ("max", 6.0)])),
            (nn.Hardtanh, lambda n, m: u(n, n.args[0], "hardtanh", [("min", float(m.min_val)), ("max", float(m.max_val))])),
            (nn.LeakyReLU, lambda n, m: u(n, n.args[0], "leaky_relu", [("negative_slope", float(m.negative_slope))])),
            (nn.GELU, lambda n, m: self.gelu(n, n.args[0], m.approximate)),
            (nn.Sigmoid, lambda n, m: u(n, n.args[0], "sigmoid", [])),
            (nn.Tanh, lambda n, m: u(n, n.args[0], "tanh", [])),
            (nn.Softplus, lambda n, m: self.softplus(n, n.args[0], m.beta, m.threshold)),
            (nn.Mish, lambda n, m: u(n, n.args[0], "mish", [])),
            (nn.SiLU, lambda n, m: u(n, n.args[0], "silu", [])),
            (nn.Hardswish, lambda n, m: u(n, n.args[0], "hardswish", [])),
            (nn.Hardsigmoid, lambda n, m: u(n, n.args[0], "hardsigmoid", [])),
            (nn.Softsign, lambda n, m: u(n, n.args[0], "softsign", [])),
            (nn.GroupNorm, self.group_norm_module),
            (nn.modules.instancenorm._InstanceNorm, self.instance_norm_module),
            (nn.modules.batchnorm._BatchNorm, self.batch_norm_module),
            (nn.LayerNorm, self.layer_norm_module),
            (nn.modules.pooling._MaxPoolNd, self.max_pool_module),
            (nn.modules.pooling._AvgPoolNd, self.avg_pool_module),
            (nn.modules.pooling._AdaptiveAvgPoolNd, lambda n, m: self.adaptive(n, n.args[0], m.output_size, "avg")),
            (nn.modules.pooling._AdaptiveMaxPoolNd, self.adaptive_max_module),
            (nn.Softmax, lambda n, m: self.softmax(n, n.args[0], m.dim)),
            (nn.modules.dropout._DropoutNd, self.dropout_module),
            (nn.Flatten, lambda n, m: self.flatten(n, n.args[0], m.start_dim, m.end_dim)),
        ]

        def fn_unary(kind, fields=()):
            def h(n):
                a = _bind(_s_unary, n, n.args, n.kwargs)
                u(n, a["input"], kind, list(fields))

            return h

        def fn_plain(kind):
            def h(n):
                a = _bind(_s_unary, n, n.args, n.kwargs)
                u(n, a["input"], kind, [])

            return h

        f = []
        f += [(t, fn_unary("relu")) for t in (torch.relu, torch.relu_, F.relu, F.relu_)]
        f += [(F.relu6, fn_unary("hardtanh", [("min", 0.0), ("max", 6.0)]))]
        f += [(t, self.fn_leaky) for t in (F.leaky_relu, F.leaky_relu_)]
        f += [(F.gelu, self.fn_gelu)]
        f += [(t, fn_plain("sigmoid")) for t in (torch.sigmoid, F.sigmoid)]
        f += [(t, fn_plain("tanh")) for t in (torch.tanh, F.tanh)]
        f += [(F.softplus, self.fn_softplus)]
        f += [(F.mish, fn_unary("mish")), (F.silu, fn_unary("silu"))]
        f += [(F.hardswish, fn_unary("hardswish")), (F.hardsigmoid, fn_unary("hardsigmoid"))]
        f += [(F.softsign, fn_plain("softsign"))]
        f += [(t, self.fn_hardtanh) for t in (F.hardtanh, F.hardtanh_)]
        f += [(t, self.fn_clamp) for t in (torch.clamp, torch.clip)]
        f += [(torch.clamp_min, self.fn_clamp_min), (torch.clamp_max, self.fn_clamp_max)]
        f += [(torch.exp, fn_plain("exp")), (torch.log, fn_plain("log")), (torch.abs, fn_plain("abs"))]
        f += [(torch.neg, fn_plain("neg")), (operator.neg, fn_plain("neg"))]
        for kind, targets in (
            ("add", (operator.add, operator.iadd, torch.add)),
            ("sub", (operator.sub, operator.isub, torch.sub, torch.subtract)),
            ("mul", (operator.mul, operator.imul, torch.mul, torch.multiply)),
            ("div", (operator.truediv, operator.itruediv, torch.div, torch.true_divide, torch.divide)),
            ("min", (torch.minimum,)),
            ("max", (torch.maximum,)),
        ):
            f += [(t, self.fn_binary(kind)) for t in targets]
        f += [(torch.max, self.fn_minmax("max")), (torch.min, self.fn_minmax("min"))]
        f += [(torch.amax, self.fn_amax("max")), (torch.amin, self.fn_amax("min"))]
        f += [(torch.sum, self.fn_reduce("sum")), (torch.mean, self.fn_reduce("mean"))]
        f += [(torch.logsumexp, self.fn_logsumexp)]
        f += [(torch.softmax, self.fn_softmax(_s_torch_softmax)), (F.softmax, self.fn_softmax(_s_softmax))]
        f += [(F.conv2d, self.fn_conv(2)), (F.conv3d, self.fn_conv(3))]
        f += [(F.group_norm, self.fn_group_norm), (F.layer_norm, self.fn_layer_norm)]
        f += [(t, self.fn_max_pool) for t in (F.max_pool1d, F.max_pool2d, F.max_pool3d)]
        f += [(F.avg_pool1d, self.fn_avg_pool(_s_avg_pool1d)), (F.avg_pool2d, self.fn_avg_pool(_s_avg_pool))]
        f += [(F.avg_pool3d, self.fn_avg_pool(_s_avg_pool))]
        f += [(t, self.fn_adaptive("avg")) for t in (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)]
        f += [(t, self.fn_adaptive("max")) for t in (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)]
        f += [(t, self.fn_dropout) for t in (F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout)]
        f += [(torch.flatten, self.fn_flatten)]
        f += [(torch.squeeze, self.fn_squeeze("squeeze")), (torch.unsqueeze, self.fn_squeeze("unsqueeze"))]
        f += [(torch.reshape, self.fn_reshape("reshape"))]
        f += [(operator.getitem, self.fn_getitem), (getattr, self.fn_getattr)]
        self.function_handlers = f

        m = {}
        for name in ("relu", "relu_"):
            m[name] = fn_plain("relu")
        for name, kind in (("sigmoid", "sigmoid"), ("tanh", "tanh"), ("exp", "exp"), ("log", "log"), ("abs", "abs"), ("neg", "neg")):
            m[name] = m[name + "_"] = fn_plain(kind)
        m["clamp"] = m["clamp_"] = m["clip"] = m["clip_"] = self.fn_clamp
        m["clamp_min"] = m["clamp_min_"] = self.fn_clamp_min
        m["clamp_max"] = m["clamp_max_"] = self.fn_clamp_max
        for kind, names in (
            ("add", ("add", "add_", "__add__", "__radd__", "__iadd__")),
            ("sub", ("sub", "sub_", "subtract", "__sub__", "__isub__")),
            ("mul", ("mul", "mul_", "multiply", "__mul__", "__rmul__", "__imul__")),
            ("div", ("div", "div_", "divide", "true_divide", "__truediv__", "__itruediv__")),
            ("min", ("minimum",)),
            ("max", ("maximum",)),
        ):
            for name in names:
                m[name] = self.fn_binary(kind)
        m["__rsub__"] = self.fn_binary("sub", reflected=True)
        m["__rtruediv__"] = self.fn_binary("div", reflected=True)
        m["max"], m["min"] = self.fn_minmax("max"), self.fn_minmax("min")
        m["amax"], m["amin"] = self.fn_amax("max"), self.fn_amax("min")
        m["sum"], m["mean"] = self.fn_reduce("sum"), self.fn_reduce("mean")
        m["logsumexp"] = self.fn_logsumexp
        m["softmax"] = self.fn_softmax(_s_torch_softmax)
        m["contiguous"] = self.method_contiguous
        m["size"] = m["dim"] = self.shape_query
        m["flatten"] = self.fn_flatten
        m["squeeze"], m["unsqueeze"] = self.fn_squeeze("squeeze"), self.fn_squeeze("unsqueeze")
        m["view"], m["reshape"] = self.fn_reshape("view"), self.fn_reshape("reshape")
        self.method_handlers = m

    # -- ops

    def identity(self, node, mod=None):
        src = self.chain_input(node, node.args[0])
        self.alias[node] = src

    def method_contiguous(self, node):
        if len(node.args) > 1 or node.kwargs:
            raise _Refusal("with a memory format has no spec op")
        self.identity(node)

    def unary(self, node, arg, kind, fields):
        self.chain_input(node, arg)
        self.emit(node, kind, fields)

    def gelu(self, node, arg, approximate):
        if approximate not in ("none", "tanh"):
            raise _Refusal(f"approximate={approximate!r} has no spec op (gelu takes 'none' or 'tanh')")
        self.unary(node, arg, "gelu", [("approximate", "tanh")] if approximate == "tanh" else [])

    def fn_gelu(self, node):
        a = _bind(_s_gelu, node, node.args, node.kwargs)
        self.gelu(node, a["input"], a["approximate"])

    def softplus(self, node, arg, beta, threshold):
        self.unary(
            node, arg, "softplus", [("beta", self.number(beta, "beta")), ("threshold", self.number(threshold, "threshold"))]
        )

    def fn_softplus(self, node):
        a = _bind(_s_softplus, node, node.args, node.kwargs)
        self.softplus(node, a["input"], a["beta"], a["threshold"])

    def fn_leaky(self, node):
        a = _bind(_s_leaky, node, node.args, node.kwargs)
        self.unary(node, a["input"], "leaky_relu", [("negative_slope", self.number(a["negative_slope"], "negative_slope"))])

    def fn_hardtanh(self, node):
        a = _bind(_s_hardtanh, node, node.args, node.kwargs)
        self.unary(
            node,
            a["input"],
            "hardtanh",
            [("min", self.number(a["min_val"], "min_val")), ("max", self.number(a["max_val"], "max_val"))],
        )

    def _clamp(self, node, arg, lo, hi):
        for bound, what in ((lo, "min"), (hi, "max")):
            if isinstance(bound, self.Node):
                raise _Refusal(
                    f"clamps with a tensor {what}: the spec's clamp takes numbers; write torch.maximum/torch.minimum"
                )
        fields = []
        if lo is not None:
            fields.append(("min", self.number(lo, "min")))
        if hi is not None:
            fields.append(("max", self.number(hi, "max")))
        if not fields:
            raise _Refusal("clamps with neither min nor max")
        self.unary(node, arg, "clamp", fields)

    def fn_clamp(self, node):
        a = _bind(_s_clamp, node, node.args, node.kwargs)
        self._clamp(node, a["input"], a["min"], a["max"])

    def fn_clamp_min(self, node):
        a = _bind(_s_clamp_min, node, node.args, node.kwargs)
        self._clamp(node, a["input"], a["min"], None)

    def fn_clamp_max(self, node):
        a = _bind(_s_clamp_max, node, node.args, node.kwargs)
        self._clamp(node, a["input"], None, a["max"])

    # binary ops: op(x, b) with x the chain's current value

    def fn_binary(self, kind, reflected=False):
        def h(node):
            a = _bind(_s_binary, node, node.args, node.kwargs)
            lhs, rhs = a["input"], a["other"]
            if reflected:
                lhs, rhs = rhs, lhs
            if a["rounding_mode"] is not None:
                raise _Refusal(f"divides with rounding_mode={a['rounding_mode']!r}: the spec's div is true division")
            self.binary(node, kind, lhs, rhs, a["alpha"])

        return h

    def binary(self, node, kind, lhs, rhs, alpha=1):
        cur = self.current
        lhs_cur = isinstance(lhs, self.Node) and self.resolve(lhs) is cur
        rhs_cur = isinstance(rhs, self.Node) and self.resolve(rhs) is cur
        if cur is None:
            raise _Refusal("comes before the layer's input")  # the placeholder starts the chain
        if lhs_cur and rhs_cur:
            # x op x: the operand is the value itself
            operand, negate_first = rhs, False
        elif lhs_cur:
            operand, negate_first = rhs, False
        elif rhs_cur:
            operand = lhs
            if kind in ("add", "mul", "min", "max"):
                negate_first = False
            elif kind == "sub":
                negate_first = True  # b - x = (-x) + b
            else:
                raise _Refusal(
                    "divides by the chain's value (b / x): the spec's div divides the value by its operand, "
                    "and there is no reciprocal op"
                )
        else:
            src = lhs if isinstance(lhs, self.Node) else rhs
            if isinstance(src, self.Node) and self.resolve(src) in self.value_op:
                raise _Refusal(
                    f"reads '{self.resolve(src).name}', but the value before it is '{cur.name}': a spec is one chain "
                    "of ops, each reading the one before; an earlier value can only be the second operand"
                )
            raise _Refusal("combines parameters or numbers only, not the chain's value: precompute it in the module")
        if alpha != 1:
            if kind not in ("add", "sub") or isinstance(operand, self.Node):
                raise _Refusal(f"has alpha={alpha!r}, which the spec has only for a number operand of add/sub")
        field = self.operand(node, operand, alpha)
        if negate_first:
            neg = self.emit(node, "neg", [])
            neg.node = node
            kind = "add"
        self.emit(node, kind, field)

    def operand(self, node, operand, alpha=1):
        cur_shape = self.shape(self.current)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return [("scalar", self.number(operand * alpha, "the operand"))]
        if not isinstance(operand, self.Node):
            raise _Refusal(f"has an operand {operand!r} the spec cannot express")
        src = self.resolve(operand)
        if src in self.value_op:
            shape = self.shape(src)
            if shape != cur_shape:
                raise _Refusal(
                    f"combines the value with '{src.name}' of shape {list(shape)}, but the spec's value operand must "
                    f"have the value's shape {list(cur_shape)} (no broadcasting between values)"
                )
            self.ops[self.value_op[src]].as_name = src.name
            return [("value", src.name)]
        key = self.need_param(operand, "the operand")
        t = self.tensor_of(key)
        shape = tuple(int(d) for d in t.shape)
        if not t.is_floating_point():
            raise _Refusal(f"the operand '{key}' is {t.dtype}; parameters are floating point")
        if not 1 <= len(shape) <= 5:
            raise _Refusal(f"the operand '{key}' has {len(shape)} dims; a spec parameter has 1 to 5")
        if len(shape) > len(cur_shape):
            raise _Refusal(
                f"the operand '{key}' {list(shape)} has more dims than the value {list(cur_shape)} (it would broadcast the value)"
            )
        for i, d in enumerate(shape):
            vd = cur_shape[len(cur_shape) - len(shape) + i]
            at_batch = len(cur_shape) - len(shape) + i == 0
            if d != 1 and (d != vd or at_batch):
                raise _Refusal(
                    f"the operand '{key}' {list(shape)} does not broadcast against the value "
                    f"[N, {', '.join(str(v) for v in cur_shape[1:])}] without growing it"
                )
        return [("param", key), ("shape", list(shape))]

    # reductions

    def _reduce(self, node, kind, arg, dim, keepdim):
        src = self.chain_input(node, arg)
        dims = self.dims(node, dim, len(self.shape(src)))
        fields = [("dim", dims[0])] if len(dims) == 1 else [("dims", dims)]
        if keepdim:
            fields.append(("keepdim", True))
        self.emit(node, kind, fields)

    def fn_reduce(self, kind):
        def h(node):
            a = _bind(_s_reduce, node, node.args, node.kwargs)
            if a["dtype"] is not None:
                raise _Refusal(f"sets dtype={a['dtype']}: fusegen computes in float32 (statistics in float64)")
            self._reduce(node, kind, a["input"], a["dim"], a["keepdim"])

        return h

    def fn_amax(self, kind):
        def h(node):
            a = _bind(_s_amax, node, node.args, node.kwargs)
            self._reduce(node, kind, a["input"], a["dim"], a["keepdim"])

        return h

    def fn_minmax(self, kind):
        def h(node):
            a = _bind(_s_minmax, node, node.args, node.kwargs)
            dim = a["dim"]
            if isinstance(dim, self.Node) or (dim is not None and not isinstance(dim, int)):
                # torch.max(x, other): elementwise
                return self.binary(node, kind, a["input"], dim)
            if dim is None:
                raise _Refusal(f"takes the {kind} of every element, the batch included; give a dim")
            for user in node.users:
                ok = (user.target is operator.getitem and user.args[1] == 0) or (
                    user.target is getattr and user.args[1] == "values"
                )
                if not ok:
                    raise _Refusal(
                        f"has its indices used (by node '{user.name}'): the spec's {kind} gives the values only"
                    )
            self._reduce(node, kind, a["input"], dim, a["keepdim"])

        return h

    def shape_query(self, node):
        self.shape_queries.add(node)

    def fn_getitem(self, node):
        src, index = node.args
        if isinstance(src, self.Node) and src in self.shape_queries:
            return self.shape_query(node)
        if isinstance(src, self.Node) and src in self.value_op and index == 0 and src.target in (self.torch.max, self.torch.min, "max", "min"):
            self.alias[node] = src
            return
        raise _Refusal("indexes a tensor or tuple, which the spec language cannot express")

    def fn_getattr(self, node):
        src, name = node.args
        if name == "shape":
            return self.shape_query(node)
        if isinstance(src, self.Node) and src in self.value_op and name == "values":
            self.alias[node] = src
            return
        raise _Refusal(f"reads the attribute '{name}', which the spec language cannot express")

    def fn_logsumexp(self, node):
        a = _bind(_s_logsumexp, node, node.args, node.kwargs)
        self._reduce(node, "logsumexp", a["input"], a["dim"], a["keepdim"])

    def softmax(self, node, arg, dim, dtype=None):
        if dtype is not None:
            raise _Refusal(f"sets dtype={dtype}: fusegen computes in float32")
        src = self.chain_input(node, arg)
        if dim is None:
            raise _Refusal("has no dim (PyTorch's implicit dim choice is deprecated): give dim")
        dims = self.dims(node, dim, len(self.shape(src)))
        self.emit(node, "softmax", [("dim", dims[0])])

    def fn_softmax(self, sig):
        def h(node):
            a = _bind(sig, node, node.args, node.kwargs)
            self.softmax(node, a["input"], a["dim"], a["dtype"])

        return h

    # the convolution

    def conv(self, node, arg, name, rank, weight_shape, has_bias, stride, padding, dilation, groups):
        if self.conv_seen:
            raise _Refusal("is a second convolution: a spec has exactly one")
        if not isinstance(arg, self.Node) or self.resolve(arg) is not self.current:
            raise _Refusal(
                "convolves something other than the chain's value: the conv reads the layer's input, or "
                "the value of the normalizations and elementwise ops before it"
            )
        self.conv_seen = True
        in_shape = self.shape(self.input)
        if len(in_shape) != rank + 2:
            raise _Refusal(f"is a {rank}D convolution of a {len(in_shape)}-dim input")
        k = weight_shape[2:]
        if isinstance(padding, str):
            if padding == "valid":
                padding = [0] * rank
            elif padding == "same":
                total = [dilation[i] * (k[i] - 1) for i in range(rank)]
                if any(t % 2 for t in total):
                    raise _Refusal(
                        "has padding='same' with an even (dilated) kernel: PyTorch pads unevenly there, and the "
                        "spec pads both sides alike"
                    )
                padding = [t // 2 for t in total]
            else:
                raise _Refusal(f"has padding={padding!r}")
        fields = [
            ("name", name),
            ("out_channels", int(weight_shape[0])),
            ("kernel", _compact(k)),
        ]
        if any(s != 1 for s in stride):
            fields.append(("stride", _compact(stride)))
        if any(p != 0 for p in padding):
            fields.append(("padding", _compact(padding)))
        if any(d != 1 for d in dilation):
            fields.append(("dilation", _compact(dilation)))
        if groups != 1:
            fields.append(("groups", int(groups)))
        if not has_bias:
            fields.append(("bias", False))
        self.emit(node, f"conv{rank}d", fields)

    def conv_module(self, node, mod):
        rank = 2 if isinstance(mod, self.nn.Conv2d) else 3
        if mod.padding_mode != "zeros":
            raise _Refusal(f"pads with padding_mode={mod.padding_mode!r}; the spec's conv pads with zeros")
        self.conv(
            node,
            node.args[0],
            node.target,
            rank,
            tuple(mod.weight.shape),
            mod.bias is not None,
            list(mod.stride),
            mod.padding if isinstance(mod.padding, str) else list(mod.padding),
            list(mod.dilation),
            mod.groups,
        )

    def module_prefix(self, keys, what):
        """The common module name P of parameters named P.weight / P.bias (functional ops),
        since the spec names a conv's or norm's parameters <name>.weight and <name>.bias."""
        prefixes = set()
        for suffix, key in keys:
            if key is None:
                continue
            if not key.endswith("." + suffix):
                raise _Refusal(
                    f"reads its {suffix} from '{key}', but the spec names a {what}'s parameters <name>.{suffix}: "
                    f"keep them in a submodule (e.g. an nn.{'Conv2d' if what == 'conv' else 'GroupNorm'})"
                )
            prefixes.add(key[: -len(suffix) - 1])
        if len(prefixes) > 1:
            raise _Refusal(f"reads parameters of different modules ({', '.join(sorted(prefixes))})")
        return prefixes.pop() if prefixes else None

    def fn_conv(self, rank):
        def h(node):
            a = _bind(_s_conv, node, node.args, node.kwargs)
            wkey = self.need_param(a["weight"], "the weight")
            bkey = self.need_param(a["bias"], "the bias") if a["bias"] is not None else None
            name = self.module_prefix([("weight", wkey), ("bias", bkey)], "conv")

            def per_dim(v):
                return [int(v)] * rank if isinstance(v, int) else [int(x) for x in v]

            pad = a["padding"] if isinstance(a["padding"], str) else per_dim(a["padding"])
            self.conv(
                node,
                a["input"],
                name,
                rank,
                tuple(self.tensor_of(wkey).shape),
                bkey is not None,
                per_dim(a["stride"]),
                pad,
                per_dim(a["dilation"]),
                a["groups"],
            )

        return h

    # normalizations

    def _affine_fields(self, affine, default):
        return [] if affine == default else [("affine", bool(affine))]

    def group_norm_module(self, node, mod):
        self.chain_input(node, node.args[0])
        fields = [("name", node.target), ("groups", int(mod.num_groups)), ("eps", float(mod.eps))]
        self.emit(node, "group_norm", fields + self._affine_fields(mod.affine, True))

    def fn_group_norm(self, node):
        a = _bind(_s_group_norm, node, node.args, node.kwargs)
        self.chain_input(node, a["input"])
        wkey = self.need_param(a["weight"], "the weight") if a["weight"] is not None else None
        bkey = self.need_param(a["bias"], "the bias") if a["bias"] is not None else None
        if (wkey is None) != (bkey is None):
            raise _Refusal("has a weight without a bias (or a bias without a weight); the spec's affine norm has both")
        name = self.module_prefix([("weight", wkey), ("bias", bkey)], "norm")
        fields = ([("name", name)] if name else []) + [("groups", int(a["num_groups"])), ("eps", float(a["eps"]))]
        self.emit(node, "group_norm", fields + self._affine_fields(wkey is not None, True))

    def instance_norm_module(self, node, mod):
        if mod.track_running_stats and not mod.training:
            raise _Refusal(
                "uses running statistics (track_running_stats=True in eval mode); the spec's instance_norm "
                "normalizes each sample by its own statistics"
            )
        self.chain_input(node, node.args[0])
        fields = [("name", node.target), ("eps", float(mod.eps))]
        self.emit(node, "instance_norm", fields + self._affine_fields(mod.affine, False))

    def batch_norm_module(self, node, mod):
        self.chain_input(node, node.args[0])
        running = (not mod.training) and mod.track_running_stats and mod.running_mean is not None
        fields = [("name", node.target), ("eps", float(mod.eps))]
        fields += self._affine_fields(mod.affine, True)
        if running:
            fields.append(("stats", "running"))
        # recorded as the module has it (None, a cumulative average: left out); fusegen's
        # forward pass updates no running statistics (docs/spec.md, Normalizations)
        if mod.momentum is not None:
            momentum = self.number(mod.momentum, "momentum")
            if not 0 <= momentum <= 1:
                raise _Refusal(f"has momentum {momentum}; a spec's batch_norm momentum is between 0 and 1 (or None)")
            fields.append(("momentum", momentum))
        self.emit(node, "batch_norm", fields)

    def layer_norm(self, node, arg, name, normalized_shape, eps, affine):
        self.chain_input(node, arg)
        fields = ([("name", name)] if name else []) + [
            ("normalized_shape", [int(d) for d in normalized_shape]),
            ("eps", float(eps)),
        ]
        self.emit(node, "layer_norm", fields + self._affine_fields(affine, True))

    def layer_norm_module(self, node, mod):
        if mod.elementwise_affine and getattr(mod, "bias", None) is None:
            raise _Refusal("has a weight but no bias (bias=False); the spec's affine layer_norm has both")
        self.layer_norm(node, node.args[0], node.target, mod.normalized_shape, mod.eps, mod.elementwise_affine)

    def fn_layer_norm(self, node):
        a = _bind(_s_layer_norm, node, node.args, node.kwargs)
        wkey = self.need_param(a["weight"], "the weight") if a["weight"] is not None else None
        bkey = self.need_param(a["bias"], "the bias") if a["bias"] is not None else None
        if (wkey is None) != (bkey is None):
            raise _Refusal("has a weight without a bias (or a bias without a weight); the spec's affine norm has both")
        name = self.module_prefix([("weight", wkey), ("bias", bkey)], "norm")
        ns = a["normalized_shape"]
        ns = [ns] if isinstance(ns, int) else list(ns)
        self.layer_norm(node, a["input"], name, ns, a["eps"], wkey is not None)

    # pooling

    def _pool_kind(self, base, nd, rank):
        if nd is not None and nd != rank - 2:
            raise _Refusal(f"is a {nd}D pool of a value with {rank - 2} spatial dims")
        return base + {1: "", 2: "2d", 3: "3d"}[rank - 2] if rank - 2 in (1, 2, 3) else None

    def pool(self, node, arg, base, nd, kernel, stride, padding, dilation, ceil_mode, extra):
        src = self.chain_input(node, arg)
        shape = self.shape(src)
        rank = len(shape)
        if not 3 <= rank <= 5:
            raise _Refusal(f"pools a value of {rank} dims; the spec's pools need 1 to 3 spatial dims")
        sd = rank - 2

        def per_dim(v, what):
            if isinstance(v, int):
                return [v] * sd
            v = list(v)
            if len(v) == 1:
                return v * sd
            if len(v) != sd:
                raise _Refusal(f"has {len(v)} values for '{what}' but the value has {sd} spatial dims")
            return [int(x) for x in v]

        kernel = per_dim(kernel, "kernel_size")
        stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else per_dim(stride, "stride")
        padding = per_dim(padding, "padding")
        if dilation is not None and any(d != 1 for d in per_dim(dilation, "dilation")):
            raise _Refusal("has dilation; the spec's pools have none")
        if ceil_mode:
            floor_out = [(shape[2 + i] + 2 * padding[i] - kernel[i]) // stride[i] + 1 for i in range(sd)]
            if list(self.shape(node)[2:]) != floor_out:
                raise _Refusal("has ceil_mode=True, which here gives a larger output than the spec's floor mode")
        fields = [("kernel", _compact(kernel))]
        if stride != kernel:
            fields.append(("stride", _compact(stride)))
        if any(p != 0 for p in padding):
            fields.append(("padding", _compact(padding)))
        self.emit(node, self._pool_kind(base, nd, rank), fields + extra)

    def max_pool_module(self, node, mod):
        if mod.return_indices:
            raise _Refusal("returns indices; the spec's max_pool gives the values only")
        nd = int(type(mod).__name__[-2]) if type(mod).__name__[-2:-1].isdigit() else None
        self.pool(node, node.args[0], "max_pool", nd, mod.kernel_size, mod.stride, mod.padding, mod.dilation, mod.ceil_mode, [])

    def fn_max_pool(self, node):
        a = _bind(_s_max_pool, node, node.args, node.kwargs)
        if a["return_indices"]:
            raise _Refusal("returns indices; the spec's max_pool gives the values only")
        nd = int(node.target.__name__[-2]) if node.target.__name__[-2:-1].isdigit() else None
        self.pool(node, a["input"], "max_pool", nd, a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"], [])

    def _avg_extra(self, count_include_pad, divisor_override):
        if divisor_override:
            raise _Refusal("has divisor_override; the spec's avg_pool divides by the window")
        return [] if count_include_pad else [("count_include_pad", False)]

    def avg_pool_module(self, node, mod):
        nd = int(type(mod).__name__[-2]) if type(mod).__name__[-2:-1].isdigit() else None
        extra = self._avg_extra(mod.count_include_pad, getattr(mod, "divisor_override", None))
        self.pool(node, node.args[0], "avg_pool", nd, mod.kernel_size, mod.stride, mod.padding, None, mod.ceil_mode, extra)

    def fn_avg_pool(self, sig):
        def h(node):
            a = _bind(sig, node, node.args, node.kwargs)
            extra = self._avg_extra(a["count_include_pad"], a.get("divisor_override"))
            nd = int(node.target.__name__[-2]) if node.target.__name__[-2:-1].isdigit() else None
            self.pool(node, a["input"], "avg_pool", nd, a["kernel_size"], a["stride"], a["padding"], None, a["ceil_mode"], extra)

        return h

    def adaptive(self, node, arg, output_size, kind):
        src = self.chain_input(node, arg)
        shape = self.shape(src)
        sd = len(shape) - 2
        if sd < 1:
            raise _Refusal("pools a value without spatial dims")
        out = [output_size] * sd if isinstance(output_size, int) or output_size is None else list(output_size)
        if len(out) != sd:
            raise _Refusal(f"has {len(out)} output sizes for {sd} spatial dims")
        ins = shape[2:]
        out = [ins[i] if o is None else int(o) for i, o in enumerate(out)]
        if kind == "avg" and all(o == 1 for o in out):
            self.emit(node, "global_avg_pool", [])
            return
        bad = [i for i in range(sd) if ins[i] % out[i]]
        if bad:
            i = bad[0]
            raise _Refusal(
                f"pools spatial dim {i} from {ins[i]} to {out[i]}, which does not divide it: overlapping adaptive "
                "windows have no spec op (sizes that divide map to a pool with kernel = stride = in / out)"
            )
        kernel = [ins[i] // out[i] for i in range(sd)]
        fields = [("kernel", _compact(kernel))]
        self.emit(node, {1: f"{kind}_pool", 2: f"{kind}_pool2d", 3: f"{kind}_pool3d"}[sd], fields)

    def adaptive_max_module(self, node, mod):
        if mod.return_indices:
            raise _Refusal("returns indices; the spec's max_pool gives the values only")
        self.adaptive(node, node.args[0], mod.output_size, "max")

    def fn_adaptive(self, kind):
        def h(node):
            a = _bind(_s_adaptive, node, node.args, node.kwargs)
            if a["return_indices"]:
                raise _Refusal("returns indices; the spec's max_pool gives the values only")
            self.adaptive(node, a["input"], a["output_size"], kind)

        return h

    # ops the language is getting (PENDING_OPS)

    def pending(self, node, arg, kind, fields):
        self.chain_input(node, arg)
        if not PENDING_OPS.get(kind):
            text = f"{kind} {{ " + ", ".join(f"{k} = {_lua(v)}" for k, v in fields) + " }" if fields else f"{kind} {{}}"
            raise _Refusal(
                f"maps to the spec op `{text}`, which fusegen's spec language does not have yet "
                f"(PENDING_OPS['{kind}'] in fusegen/_export.py switches it on once it does)"
            )
        self.emit(node, kind, fields)

    def dropout(self, node, arg, p, training):
        if training and p > 0:
            raise _Refusal(
                f"is dropout in training mode (p={p}): random, so no spec computes it; export the module in "
                "eval mode (module.eval()), where dropout is the identity"
            )
        self.pending(node, arg, "dropout", [("p", float(p))])

    def dropout_module(self, node, mod):
        self.dropout(node, node.args[0], mod.p, mod.training)

    def fn_dropout(self, node):
        a = _bind(_s_dropout, node, node.args, node.kwargs)
        self.dropout(node, a["input"], a["p"], a["training"])

    def flatten(self, node, arg, start_dim, end_dim):
        if isinstance(arg, self.Node) and self.resolve(arg) in self.value_op:
            rank = len(self.shape(self.resolve(arg)))
            if start_dim % rank == 0:
                raise _Refusal("flattens the batch dim 0 into others; fusegen's batch stays dim 0")
        self.pending(node, arg, "flatten", [("start_dim", int(start_dim)), ("end_dim", int(end_dim))])

    def fn_flatten(self, node):
        a = _bind(_s_flatten, node, node.args, node.kwargs)
        self.flatten(node, a["input"], a["start_dim"], a["end_dim"])

    def fn_squeeze(self, kind):
        def h(node):
            a = _bind(_s_dim, node, node.args, node.kwargs)
            if a["dim"] is None:
                raise _Refusal(f"{kind}s without a dim: give the dim (the batch dim 0 must stay)")
            self.pending(node, a["input"], kind, [("dim", a["dim"] if isinstance(a["dim"], int) else list(a["dim"]))])

        return h

    def fn_reshape(self, kind):
        def h(node):
            arg = node.args[0]
            out = self.shape(node)
            if isinstance(arg, self.Node) and self.resolve(arg) in self.value_op:
                if out[0] != self.shape(self.resolve(arg))[0]:
                    raise _Refusal(f"{kind}s the batch dim 0 into others; fusegen's batch stays dim 0")
            self.pending(node, arg, kind, [("shape", ["N"] + [int(d) for d in out[1:]])])

        return h


# ---- in-place ops ----------------------------------------------------------------------------


def _inplace_input(node, modules):
    """The value an in-place node overwrites, or None when the node is not in-place."""
    if node.op == "call_method" and node.target.endswith("_") and not node.target.startswith("__"):
        return node.args[0]
    if node.op == "call_method" and node.target in ("__iadd__", "__isub__", "__imul__", "__itruediv__"):
        return node.args[0]
    if node.op == "call_function":
        name = getattr(node.target, "__name__", "")
        if node.kwargs.get("inplace") or (name.endswith("_") and not name.startswith("__")) or name in (
            "iadd",
            "isub",
            "imul",
            "itruediv",
        ):
            return node.args[0] if node.args else None
    if node.op == "call_module" and getattr(modules.get(node.target), "inplace", False):
        return node.args[0]
    return None


def _check_inplace(gm, modules, torch):
    """An in-place op is read as the same op out of place, which is right only when nothing
    else reads the tensor it overwrites."""
    for node in gm.graph.nodes:
        src = _inplace_input(node, modules)
        if isinstance(src, torch.fx.Node) and len(src.users) > 1:
            others = [u.name for u in src.users if u is not node]
            where = _node_where(node)
            raise ExportError(
                f"fusegen.export: node '{node.name}' ({_describe(node)}{', ' + where if where else ''}) works in "
                f"place on '{src.name}', which is also read by {', '.join(repr(o) for o in others)}: the spec "
                "has no in-place ops; use the out-of-place form",
                node=node.name,
                where=where,
            )


# ---- the entry point -------------------------------------------------------------------------

_NAME_OK = re.compile(r"^[\x20-\x7e]{1,95}$")


def _layer_name(name):
    if not _NAME_OK.match(name) or any(c in name for c in "/\\\"'"):
        raise ExportError(
            f"fusegen.export: the layer name {name!r} is not a valid spec name (1 to 95 printable ASCII "
            "characters without / \\ \" ')"
        )
    return name


def _render(ops, name, input_shape, module, torch_version, dtype=None, layout=None):
    from . import __version__

    lines = [
        f"-- Exported from {type(module).__name__} by fusegen.export (fusegen {__version__}, "
        f"torch {torch_version}).",
        "-- Parameters are the module's state_dict keys: Layer(spec).load_state_dict(module.state_dict()).",
        f"return layer {_lua(name)} {{",
        f"  input = {_lua(['N'] + [int(d) for d in input_shape[1:]])},",
    ]
    if dtype is not None:
        lines.append(f"  dtype = {_lua(dtype)},  -- the input's (and the output's) dtype; parameters stay float32")
    if layout is not None:
        lines.append(f"  layout = {_lua(layout)},  -- the input's (and the output's) memory format, N(D)HWC")
    op_lines = {}
    for op in ops:
        fields = list(op.fields)
        if op.as_name:
            fields.append(("as", op.as_name))
        body = ", ".join(f"{k} = {_lua(v)}" for k, v in fields)
        text = f"  {op.kind} {{ {body} }}," if body else f"  {op.kind} {{}},"
        where = _node_where(op.node)
        comment = f"{op.node.name}" + (f" ({where.split(': ', 1)[0]})" if where else "")
        op_lines[len(lines) + 1] = op
        lines.append(f"{text:<72} -- {comment}")
    lines.append("}")
    return "\n".join(lines) + "\n", op_lines


def export(module: Any, example_input: Any, *, name: Optional[str] = None, check: bool = True) -> str:
    """Writes `module` (a torch.nn.Module: one conv and the ops after it) as a fusegen spec.

    example_input: a tensor the module accepts ([N, C, H, W] or [N, C, D, H, W]), used to
    trace the module and give every value its shape; the spec's input is that shape with the
    batch left to run time ("N"). A torch.bfloat16 or torch.float16 example input gives the
    spec that `dtype` (its input and output; the parameters stay float32). An example input in
    torch.channels_last / channels_last_3d memory format (and not also contiguous, as a tensor
    with one channel or one position is) gives the spec layout = "channels_last", unless the
    module's output has no channel dim to put last (then, with check, the default "nchw"). name: the layer's name (default: the module's class name).
    check: load the spec with libfusegen (a CPU-only context) and compare its output shape
    with the module's; a spec the library refuses raises ExportError naming the node.

    The module is traced as it is: training or eval mode decides batch_norm's statistics and
    whether dropout is allowed. It is not modified (a copy runs on the example input).
    Returns the spec's Lua text. Raises ExportError for anything the language cannot express,
    naming the torch.fx node and its source line.
    """
    import torch
    import torch.fx
    import torch.nn.functional as F
    from torch import nn
    from torch.fx.passes.shape_prop import ShapeProp

    if not isinstance(module, nn.Module):
        raise TypeError(f"fusegen.export: module must be a torch.nn.Module, not {type(module).__name__}")
    if isinstance(example_input, (tuple, list)):
        if len(example_input) != 1:
            raise ExportError(f"fusegen.export: a spec has one input tensor; got {len(example_input)} example inputs")
        example_input = example_input[0]
    if not isinstance(example_input, torch.Tensor):
        raise TypeError(f"fusegen.export: example_input must be a tensor, not {type(example_input).__name__}")
    if example_input.dim() not in (4, 5):
        raise ExportError(
            f"fusegen.export: the example input has shape {list(example_input.shape)}; a spec's input is "
            "[N, C, H, W] or [N, C, D, H, W]"
        )
    layer_name = _layer_name(name if name is not None else type(module).__name__)

    # Trace and run a copy: a run in training mode updates batch_norm's running statistics.
    work = copy.deepcopy(module)
    tracer = torch.fx.Tracer()
    tracer.record_stack_traces = True
    try:
        graph = tracer.trace(work)
    except Exception as e:
        raise ExportError(
            f"fusegen.export: torch.fx cannot trace {type(module).__name__}: {type(e).__name__}: {e}. "
            "The exporter needs a forward without control flow that depends on tensor values."
        ) from e
    gm = torch.fx.GraphModule(tracer.root, graph, type(module).__name__)
    modules = dict(gm.named_modules())
    _check_inplace(gm, modules, torch)
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(example_input.detach())
    except Exception as e:
        raise ExportError(
            f"fusegen.export: running {type(module).__name__} on the example input {list(example_input.shape)} "
            f"failed: {type(e).__name__}: {e}"
        ) from e
    gm.graph.eliminate_dead_code()

    tr = _Translator(module, gm, torch, F, nn)
    ops = tr.run()
    # a bf16/fp16 example input makes a layer of that dtype (its input and output); every
    # other floating type gives the default, float32
    dtype = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(example_input.dtype)
    # a channels-last example input makes a channels-last layer (its input and output)
    layout = None
    if example_input.dim() in (4, 5) and not example_input.is_contiguous():
        mf = torch.channels_last if example_input.dim() == 4 else torch.channels_last_3d
        if example_input.is_contiguous(memory_format=mf):
            layout = "channels_last"
    text, op_lines = _render(ops, layer_name, tuple(example_input.shape), module, torch.__version__, dtype, layout)
    if check:
        try:
            _check_loads(text, op_lines, layer_name, gm, example_input)
        except ExportError as e:
            if layout is None or 'layout "channels_last"' not in str(e):
                raise
            # the output has no channel dim to put last (flatten, a channel reduction): NCHW
            text, op_lines = _render(ops, layer_name, tuple(example_input.shape), module, torch.__version__, dtype)
            _check_loads(text, op_lines, layer_name, gm, example_input)
    return text


def _check_loads(text, op_lines, layer_name, gm, example_input):
    from . import _core

    ctx = _core.Context(device=-1, cache_path="")
    try:
        try:
            layer = _core.Layer(text, context=ctx, name=f"{layer_name}.lua")
        except _core.Error as e:
            m = re.search(r":(\d+): ", e.message)
            op = op_lines.get(int(m.group(1))) if m else None
            hint = ""
            if op is not None:
                where = _node_where(op.node)
                hint = f" (op from node '{op.node.name}'{', ' + where if where else ''})"
            raise ExportError(
                f"fusegen.export: the exported spec does not load: {e.message}{hint}",
                node=op.node.name if op is not None else None,
            ) from None
        batch = int(example_input.shape[0])
        out_node = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        want = tuple(int(d) for d in out_node.meta["tensor_meta"].shape)
        got = layer.output_shape(batch)
        layer.close()
        if got != want:
            raise ExportError(
                f"fusegen.export: the exported spec gives an output of shape {list(got)} for batch {batch}, "
                f"but the module's is {list(want)} (a fusegen.export bug: please report it)"
            )
    finally:
        ctx.close()
