# SPDX-License-Identifier: Apache-2.0
"""fusegen.torch on the CPU: FusedLayer as an nn.Module, the fusegen::layer op and torch.compile.

On CPU tensors the op runs fusegen's float64 CPU reference, so these tests check everything
but the GPU path: the module's parameters and state_dict, binding (and rebinding after
load_state_dict or an in-place update), the op's registration (torch.library.opcheck: schema,
fake implementation, no aliasing), and a torch.compile'd model containing the layer traced
without a graph break (fullgraph=True), its result equal to the eager one and to the PyTorch
module in float64. The GPU side (CUDA streams, torch's allocator, CUDA graphs) is
test_torch_gpu.py. Needs torch (a CPU build is enough); skipped, with the reason shown,
without it.
"""

import copy
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

import fusegen  # noqa: E402

try:
    import torch
    from torch import nn

    import fusegen.torch as fgt
except ImportError:
    torch = None

NO_TORCH = "torch is not installed: the FusedLayer CPU tests did NOT run (pip install torch)"
RTOL = ATOL = 2e-6  # fusegen's float64 reference rounded to float32, vs the module in float64


if torch is not None:

    class Block(nn.Module):
        """A conv block with every kind of state: conv weights, a batch norm in eval mode
        (running statistics: buffers), a per-channel parameter, and a residual."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.scale = nn.Parameter(torch.randn(8, 1, 1))

        def forward(self, x):
            c = self.conv(x)
            y = torch.tanh(self.bn(c)) * self.scale
            return torch.logsumexp(y + c, dim=1, keepdim=True)

    def make_block(seed=0):
        torch.manual_seed(seed)
        m = Block()
        with torch.no_grad():
            m.bn.weight.normal_()
            m.bn.bias.normal_()
            m.bn.running_mean.normal_()
            m.bn.running_var.uniform_(0.5, 1.5)
        return m.eval()

    class Net(nn.Module):
        """torch ops around a FusedLayer: what torch.compile has to trace through."""

        def __init__(self, fused):
            super().__init__()
            self.fused = fused

        def forward(self, x):
            y = self.fused(x * 0.5 + 0.25)
            return torch.sigmoid(y).mean(dim=(2, 3))


@unittest.skipIf(torch is None, NO_TORCH)
class FusedLayerModule(unittest.TestCase):
    def setUp(self):
        self.block = make_block()
        self.x = torch.rand(2, 3, 10, 10)
        self.spec = fusegen.export(self.block, self.x)

    def test_state_dict_is_the_modules(self):
        fused = fgt.FusedLayer(self.spec)
        # the same keys as nn.BatchNorm2d and nn.Conv2d have, num_batches_tracked included
        self.assertEqual(set(fused.state_dict()), set(self.block.state_dict()))
        for k, v in fused.state_dict().items():
            self.assertEqual(v.shape, self.block.state_dict()[k].shape, k)
        self.assertEqual(
            sorted(n for n, _ in fused.named_buffers()),
            ["bn.num_batches_tracked", "bn.running_mean", "bn.running_var"],
        )
        self.assertTrue(all(not p.requires_grad for p in fused.parameters()))
        result = fused.load_state_dict(self.block.state_dict())  # strict
        self.assertEqual((result.missing_keys, result.unexpected_keys), ([], []))
        self.assertEqual(fused.input_shape(5), (5, 3, 10, 10))
        self.assertEqual(fused.output_shape(5), (5, 1, 10, 10))
        self.assertIn("input ['N', 3, 10, 10] -> output ['N', 1, 10, 10]", repr(fused))

    def test_forward_matches_the_module(self):
        fused = fgt.FusedLayer(self.spec).to("cpu")
        fused.load_state_dict(self.block.state_dict())
        got = fused(self.x)
        self.assertEqual(got.dtype, torch.float32)
        want = copy.deepcopy(self.block).double()(self.x.double())
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=RTOL, atol=ATOL)

    def test_rebinds_after_load_and_in_place_updates(self):
        fused = fgt.FusedLayer(self.spec)
        fused.load_state_dict(self.block.state_dict())
        before = fused(self.x)
        other = make_block(seed=1)
        fused.load_state_dict(other.state_dict())
        want = copy.deepcopy(other).double()(self.x.double()).detach().numpy()
        np.testing.assert_allclose(fused(self.x).numpy(), want, rtol=RTOL, atol=ATOL)
        with torch.no_grad():
            fused.scale.mul_(2.0)  # in place: same storage, new version
            other.scale.mul_(2.0)
        want = copy.deepcopy(other).double()(self.x.double()).detach().numpy()
        np.testing.assert_allclose(fused(self.x).numpy(), want, rtol=RTOL, atol=ATOL)
        self.assertFalse(torch.allclose(before, fused(self.x)))

    def test_spec_file(self):
        fused = fgt.FusedLayer(os.path.join(REPO, "specs", "kb79.lua"))
        self.assertEqual(list(fused.state_dict()), ["multiplier", "conv.weight", "conv.bias"])
        self.assertEqual(fused.output_shape(2), (2, 14, 30, 30))
        with self.assertRaises(fusegen.Error) as cm:
            fgt.FusedLayer(os.path.join(REPO, "specs", "nope.lua"))
        self.assertIn("nope.lua", str(cm.exception))
        with self.assertRaises(fusegen.Error) as cm:
            fgt.FusedLayer('return layer "t" {\n  input = { "N", 3, 8, 8 },\n  conv2d { out_chanels = 4, kernel = 3 },\n}\n', name="bad.lua")
        self.assertIn("bad.lua:3: conv2d: unknown field 'out_chanels' (did you mean 'out_channels'?)", str(cm.exception))

    def test_errors(self):
        fused = fgt.FusedLayer(self.spec)
        with self.assertRaises(ValueError) as cm:
            fused(torch.rand(2, 3, 9, 10))
        self.assertIn("does not match layer", str(cm.exception))
        with self.assertRaises(TypeError):
            fused(torch.rand(2, 3, 10, 10, dtype=torch.float64))
        with self.assertRaises(TypeError) as cm:
            fused.double()(self.x)
        self.assertIn("fusegen runs float32", str(cm.exception))

    def test_import_fusegen_does_not_import_torch(self):
        code = "import sys, fusegen; assert 'torch' not in sys.modules; fusegen.torch; assert 'torch' in sys.modules"
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_the_op(self):
        fused = fgt.FusedLayer(self.spec)
        fused.load_state_dict(self.block.state_dict())
        self.assertTrue(hasattr(torch.ops.fusegen, "layer"))
        # schema, fake (meta) implementation against the real one, no aliasing of inputs
        torch.library.opcheck(
            torch.ops.fusegen.layer.default, (self.x, fused._fg_params(), fused._fg_encoded, fused._fg_instance)
        )


if torch is not None:

    class Head(nn.Module):
        """A conv block ending in shape ops: its output is [N, 8], not the conv's layout."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            y = nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1)
            return torch.tanh(torch.flatten(y, 1))


@unittest.skipIf(torch is None, NO_TORCH)
class ShapeOps(unittest.TestCase):
    """FusedLayer returns the reshaped tensor: eager, the op's fake implementation, compiled."""

    def setUp(self):
        torch.manual_seed(3)
        self.head = Head()
        self.x = torch.rand(2, 3, 10, 10)
        self.fused = fgt.FusedLayer(fusegen.export(self.head, self.x))
        self.fused.load_state_dict(self.head.state_dict())

    def test_eager(self):
        self.assertEqual(self.fused.output_shape(4), (4, 8))
        got = self.fused(self.x)
        self.assertEqual(tuple(got.shape), (2, 8))
        want = copy.deepcopy(self.head).double()(self.x.double())
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=RTOL, atol=ATOL)

    def test_the_op_and_compile(self):
        torch.library.opcheck(
            torch.ops.fusegen.layer.default,
            (self.x, self.fused._fg_params(), self.fused._fg_encoded, self.fused._fg_instance),
        )
        torch._dynamo.reset()
        compiled = torch.compile(
            lambda x: torch.softmax(self.fused(x), dim=1), fullgraph=True, dynamic=True, backend="aot_eager"
        )
        for batch in (1, 5):
            x = torch.rand(batch, 3, 10, 10)
            want = torch.softmax(copy.deepcopy(self.head).double()(x.double()), dim=1).detach().numpy()
            got = compiled(x)
            self.assertEqual(tuple(got.shape), (batch, 8))
            np.testing.assert_allclose(got.numpy(), want, rtol=RTOL, atol=ATOL)


@unittest.skipIf(torch is None, NO_TORCH)
class BatchNormState(unittest.TestCase):
    """A batch norm's state in a FusedLayer: in eval mode right after the conv (folded into
    it by the layer, the module's tensors kept as they are), and in training mode (its
    running statistics are buffers the op never reads)."""

    def module(self, train, **bn):
        torch.manual_seed(3)
        m = nn.Sequential(nn.Conv2d(3, 6, 3, bias=False), nn.BatchNorm2d(6, **bn), nn.ReLU())
        with torch.no_grad():
            if m[1].affine:
                m[1].weight.normal_()
                m[1].bias.normal_()
            if m[1].track_running_stats:
                m[1].running_mean.normal_()
                m[1].running_var.uniform_(0.5, 1.5)
                m[1].num_batches_tracked.fill_(7)
        return m.train(train)

    def check(self, fused, module, x, what):
        want = copy.deepcopy(module).double()(x.double()).detach().numpy()
        np.testing.assert_allclose(fused(x).numpy(), want, rtol=RTOL, atol=ATOL, err_msg=what)

    def test_folded_eval_round_trip(self):
        module, x = self.module(False), torch.rand(2, 3, 9, 9)
        fused = fgt.FusedLayer(fusegen.export(module, x))
        result = fused.load_state_dict(module.state_dict())  # strict
        self.assertEqual((result.missing_keys, result.unexpected_keys), ([], []))
        # the module's tensors come back as they went in: the folded weights are the layer's own
        sd = fused.state_dict()
        self.assertEqual(list(sd), list(module.state_dict()))
        for k, v in module.state_dict().items():
            self.assertTrue(torch.equal(sd[k], v), k)
        self.check(fused, module, x, "folded, as loaded")
        with torch.no_grad():  # in place: the layer binds the new values (and folds them) again
            for m in (fused, module):
                m.get_buffer("1.running_var").mul_(3.0)
                m.get_parameter("1.weight").add_(0.5)
        self.check(fused, module, x, "after in-place updates")
        m2 = self.module(False)
        with torch.no_grad():
            m2[0].weight.mul_(-1)
        fused.load_state_dict(m2.state_dict())
        self.check(fused, m2, x, "after loading another module")

    def test_training_mode_running_statistics(self):
        module, x = self.module(True, momentum=0.2), torch.rand(4, 3, 9, 9)
        spec = fusegen.export(module, x)
        self.assertIn("momentum = 0.2", spec)
        fused = fgt.FusedLayer(spec)
        self.assertEqual(set(fused.state_dict()), set(module.state_dict()))
        self.assertEqual(fused.get_buffer("1.num_batches_tracked").dtype, torch.long)
        result = fused.load_state_dict(module.state_dict())  # strict, running statistics included
        self.assertEqual((result.missing_keys, result.unexpected_keys), ([], []))
        before = {k: v.clone() for k, v in fused.state_dict().items()}
        self.check(fused, module, x, "batch statistics")
        # the forward pass leaves the running statistics as they are (PyTorch's would update them)
        for k, v in fused.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), k)
        # a module that tracks none (track_running_stats=False) loads strictly too
        bare = self.module(True, track_running_stats=False, affine=False)
        fused = fgt.FusedLayer(fusegen.export(bare, x))
        result = fused.load_state_dict(bare.state_dict())
        self.assertEqual((result.missing_keys, result.unexpected_keys), ([], []))
        self.check(fused, bare, x, "batch statistics, no running ones")
        # inside another module: its keys carry the prefix
        outer = nn.Sequential(fused)
        result = outer.load_state_dict({"0." + k: v for k, v in bare.state_dict().items()})
        self.assertEqual((result.missing_keys, result.unexpected_keys), ([], []))


@unittest.skipIf(torch is None, NO_TORCH)
class Compile(unittest.TestCase):
    """torch.compile traces through the op: one graph, no break, the same numbers."""

    @classmethod
    def setUpClass(cls):
        block = make_block()
        x = torch.rand(2, 3, 10, 10)
        cls.fused = fgt.FusedLayer(fusegen.export(block, x))
        cls.fused.load_state_dict(block.state_dict())
        cls.block = block

    def reference(self, x):
        y = copy.deepcopy(self.block).double()(x.double() * 0.5 + 0.25)
        return torch.sigmoid(y).mean(dim=(2, 3)).detach().numpy()

    def test_no_graph_break(self):
        net = Net(self.fused)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(net)(torch.rand(2, 3, 10, 10))
        self.assertEqual(explained.graph_break_count, 0, explained.break_reasons)
        self.assertEqual(explained.graph_count, 1)
        ops = [str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"]
        self.assertIn("fusegen.layer", ops)

    @unittest.skipUnless(
        shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++"),
        "Inductor's CPU code needs a C++ compiler: torch.compile with Inductor on the CPU did NOT run",
    )
    def test_fullgraph_inductor(self):
        net = Net(self.fused)
        torch._dynamo.reset()
        compiled = torch.compile(net, fullgraph=True)
        for batch in (2, 3):
            x = torch.rand(batch, 3, 10, 10)
            got = compiled(x)
            np.testing.assert_allclose(got.numpy(), net(x).numpy(), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got.numpy(), self.reference(x), rtol=RTOL, atol=ATOL)

    def test_dynamic_batch(self):
        net = Net(self.fused)
        torch._dynamo.reset()
        compiled = torch.compile(net, fullgraph=True, dynamic=True, backend="aot_eager")
        for batch in (1, 4, 7):
            x = torch.rand(batch, 3, 10, 10)
            np.testing.assert_allclose(compiled(x).numpy(), self.reference(x), rtol=RTOL, atol=ATOL)

    def test_shape_error_while_tracing(self):
        torch._dynamo.reset()
        compiled = torch.compile(Net(self.fused), fullgraph=True, backend="aot_eager")
        with self.assertRaises(Exception) as cm:
            compiled(torch.rand(2, 3, 12, 10))
        self.assertIn("does not match layer", str(cm.exception))

if torch is not None:

    class HalfBlock(nn.Module):
        """A conv, a group norm (statistics), an activation and a max over channels."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 16, 3)
            self.gn = nn.GroupNorm(4, 16)

        def forward(self, x):
            return torch.amax(torch.relu(self.gn(self.conv(x))), dim=1, keepdim=True)


def half_ulp(want, dtype):
    """One unit in the last place of `dtype` at each value of `want` (float64 NumPy)."""
    digits, emin = (8, -126) if dtype == torch.bfloat16 else (11, -14)
    e = np.floor(np.log2(np.maximum(np.abs(want), 2.0**emin)))
    return np.exp2(e - (digits - 1))


def assert_half_close(test, got, want, dtype, what):
    """The half-dtype bar (docs/spec.md): |got - want rounded to the dtype| <= 1e-4 (1 + |want|)
    + 1 ulp of the dtype."""
    test.assertEqual(got.dtype, dtype, what)
    want_r = want.to(dtype).double().detach().cpu().numpy()
    g = got.double().detach().cpu().numpy()
    bound = 1e-4 + 1e-4 * np.abs(want_r) + half_ulp(want_r, dtype)
    bad = np.abs(g - want_r) > bound
    test.assertFalse(bad.any(), f"{what}: {int(bad.sum())} elements past 1 ulp; max error {np.max(np.abs(g - want_r)):.3g}")


@unittest.skipIf(torch is None, NO_TORCH)
class HalfDtype(unittest.TestCase):
    """A spec with dtype = "bf16" / "fp16": its input and output are that torch dtype (on the
    CPU through the float64 reference: the input's values, the result rounded once); float32
    parameters; a tensor of another dtype is refused, naming the spec's field."""

    def setUp(self):
        torch.manual_seed(0)
        self.block = HalfBlock().eval()

    def run_dtype(self, dtype, name):
        x = torch.rand(2, 4, 12, 12).to(dtype)
        # a module and example input in the dtype: the spec gets the dtype
        spec = fusegen.export(copy.deepcopy(self.block).to(dtype), x)
        self.assertIn(f'dtype = "{name}"', spec)
        fused = fgt.FusedLayer(spec)
        fused.load_state_dict(self.block.state_dict())
        self.assertTrue(all(p.dtype == torch.float32 for p in fused.parameters()))
        got = fused(x)
        want = copy.deepcopy(self.block).double()(x.double())
        assert_half_close(self, got, want, dtype, name)
        layer = fusegen.Layer(spec)
        self.assertEqual(layer.dtype, name)
        self.assertEqual(layer.torch_dtype, dtype)
        for k, v in self.block.state_dict().items():
            layer.bind(k, v)
        assert_half_close(self, layer(x), want, dtype, name + " (Layer)")
        with self.assertRaises(TypeError) as cm:
            fused(x.float())
        self.assertIn(f'dtype = "{name}"', str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            layer(x.float())
        self.assertIn(f'dtype = "{name}"', str(cm.exception))

    def test_bf16(self):
        self.run_dtype(torch.bfloat16, "bf16")

    def test_fp16(self):
        self.run_dtype(torch.float16, "fp16")

    def test_fp32_layer_cpu_tensor_of_another_float_is_converted(self):
        # an fp32 Layer's CPU reference converts any floating CPU tensor to float32, as it
        # did before dtype (only the half dtypes' layers and CUDA tensors check the dtype)
        spec = fusegen.export(self.block, torch.rand(1, 4, 12, 12))
        layer = fusegen.Layer(spec)
        for k, v in self.block.state_dict().items():
            layer.bind(k, v)
        x = torch.rand(2, 4, 12, 12)
        want = layer(x)
        self.assertEqual(want.dtype, torch.float32)
        torch.testing.assert_close(layer(x.double()), want, rtol=0, atol=0)
        with self.assertRaises(TypeError) as cm:  # NumPy has no bfloat16: refused, naming the field
            layer(x.bfloat16())
        self.assertIn('dtype = "fp32"', str(cm.exception))

    def test_half_layer_cpu_out_is_checked(self):
        spec = fusegen.export(copy.deepcopy(self.block).bfloat16(), torch.rand(2, 4, 12, 12).bfloat16())
        layer = fusegen.Layer(spec)
        for k, v in self.block.state_dict().items():
            layer.bind(k, v)
        x = torch.rand(2, 4, 12, 12).bfloat16()
        want = layer(x)
        out = torch.full(tuple(want.shape), float("nan"), dtype=torch.bfloat16)
        self.assertIs(layer(x, out=out), out)
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        # a wrong shape is refused as the float32 path refuses it (ValueError naming the shape),
        # also one the result would broadcast to
        for shape in ((4,) + tuple(want.shape[1:]), (2, 2) + tuple(want.shape[2:])):
            with self.assertRaises(ValueError) as cm:
                layer(x, out=torch.empty(shape, dtype=torch.bfloat16))
            self.assertIn("out must be", str(cm.exception))

    def test_fp32_layer_refuses_half(self):
        fused = fgt.FusedLayer(fusegen.export(self.block, torch.rand(1, 4, 12, 12)))
        with self.assertRaises(TypeError) as cm:
            fused(torch.rand(1, 4, 12, 12, dtype=torch.bfloat16))
        self.assertIn('dtype = "fp32"', str(cm.exception))


if torch is not None:

    class CLBlock(nn.Module):
        """A grouped conv, a group norm, an activation and a max pool: an output with channels."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3, padding=1, groups=2)
            self.gn = nn.GroupNorm(4, 8)

        def forward(self, x):
            return F_max_pool(torch.relu(self.gn(self.conv(x))))

    def F_max_pool(x):
        return torch.nn.functional.max_pool2d(x, 2)

    class CLBlock3d(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(3, 6, 3)

        def forward(self, x):
            return torch.sigmoid(self.conv(x)).mean(dim=1, keepdim=True)


@unittest.skipIf(torch is None, NO_TORCH)
class ChannelsLast(unittest.TestCase):
    """A spec with layout = "channels_last": Layer and FusedLayer take a channels_last tensor as
    it is and return the output in that memory format (the logical NCHW shape); an NCHW tensor
    is converted; the CPU reference equals the NCHW layer's exactly; export sets the field for a
    channels-last example input (and leaves it out where the output has no channel dim)."""

    def setUp(self):
        torch.manual_seed(0)

    def check(self, block, x, mf):
        block = block.eval()
        spec_nchw = fusegen.export(block, x)
        self.assertNotIn("layout", spec_nchw)
        spec = fusegen.export(block, x.contiguous(memory_format=mf))
        self.assertIn('layout = "channels_last"', spec)
        ref = fusegen.Layer(spec_nchw)
        layer = fusegen.Layer(spec)
        self.assertEqual(layer.layout, "channels_last")
        self.assertEqual(ref.layout, "nchw")
        self.assertIs(layer.torch_memory_format, mf)
        for k, v in block.state_dict().items():
            ref.bind(k, v)
            layer.bind(k, v)
        want = ref(x)
        for given in (x.contiguous(memory_format=mf), x.contiguous()):  # as it is; converted
            got = layer(given)
            self.assertEqual(tuple(got.shape), tuple(want.shape))
            self.assertTrue(got.is_contiguous(memory_format=mf))
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        # NumPy: the logical shape in, a channels-last-strided view out; `out` filled
        got = layer.run_reference(x.numpy())
        np.testing.assert_array_equal(got, want.numpy())
        out = np.full(tuple(want.shape), np.nan, dtype=np.float32)
        self.assertIs(layer.run_reference(x.numpy(), out=out), out)
        np.testing.assert_array_equal(out, want.numpy())
        # FusedLayer: the same, and the PyTorch module within the float32 bar
        fused = fgt.FusedLayer(spec)
        fused.load_state_dict(block.state_dict())
        y = fused(x.contiguous(memory_format=mf))
        self.assertTrue(y.is_contiguous(memory_format=mf))
        torch.testing.assert_close(y, want, rtol=0, atol=0)
        torch.testing.assert_close(y.double(), block.double()(x.double()), rtol=RTOL, atol=ATOL)
        block.float()

    def test_2d(self):
        self.check(CLBlock(), torch.rand(2, 4, 10, 12), torch.channels_last)

    def test_3d(self):
        self.check(CLBlock3d(), torch.rand(2, 3, 6, 7, 8), torch.channels_last_3d)

    def test_bf16(self):
        block = CLBlock().eval()
        x = torch.rand(2, 4, 10, 12).bfloat16()
        spec = fusegen.export(copy.deepcopy(block).bfloat16(), x.contiguous(memory_format=torch.channels_last))
        self.assertIn('layout = "channels_last"', spec)
        self.assertIn('dtype = "bf16"', spec)
        layer = fusegen.Layer(spec)
        for k, v in block.state_dict().items():
            layer.bind(k, v)
        got = layer(x.contiguous(memory_format=torch.channels_last))
        self.assertEqual(got.dtype, torch.bfloat16)
        self.assertTrue(got.is_contiguous(memory_format=torch.channels_last))
        assert_half_close(self, got, block.double()(x.double()), torch.bfloat16, "bf16 channels_last")

    def test_no_channel_dim_exports_nchw(self):
        class Flat(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 8, 3)

            def forward(self, x):
                return torch.amax(self.conv(x), dim=1)

        x = torch.rand(1, 4, 8, 8).contiguous(memory_format=torch.channels_last)
        spec = fusegen.export(Flat(), x)
        self.assertNotIn("layout", spec)
        with self.assertRaises(fusegen.Error) as cm:
            fusegen.Layer(spec.replace("input = ", 'layout = "channels_last",\n  input = '))
        self.assertIn('layout "channels_last"', str(cm.exception))
        self.assertIn("no channel dim", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
