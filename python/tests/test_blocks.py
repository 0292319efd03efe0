# SPDX-License-Identifier: Apache-2.0
"""fusegen.Block and fusegen.torch.FusedBlock on the CPU (the float64 block reference).

Block specs (docs/spec.md, "Blocks") against the PyTorch modules of bench/blocks.py
(make_block) in float64: a small bottleneck and SD ResnetBlock2D written here, and the
ResNet-50 bottleneck and SD ResnetBlock2D of specs/blocks/ at their real shapes (batch 1;
the SD one takes ~30 s of CPU reference). Also: the extra inputs by position and by name,
state_dict round trips with the PyTorch modules, the fusegen::block op (opcheck,
torch.compile fullgraph) and the errors (extra input names and shapes, a layer spec given
to Block and a block spec to Layer, missing parameters). GPU: test_torch_gpu.py.
"""

import copy
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "bench"))

import numpy as np  # noqa: E402

import fusegen  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    from torch import nn

    import fusegen.torch as fgt
    from blocks import make_block, randomize  # bench/blocks.py: the PyTorch blocks
except ImportError:
    torch = None

NO_TORCH = "torch is not installed: the block tests did NOT run (pip install torch)"
TOL = 1e-5  # each layer in float64, the tensors between layers as floats, vs the module in float64
SPECS = os.path.join(REPO, "specs", "blocks")

# bench/blocks.py's resnet family at 16 channels (bottleneck width 4)
BOTTLENECK = """return block "bottleneck" {
  input = { "N", 16, 8, 8 },
  layer "a" {
    conv2d { name = "conv1", out_channels = 4, kernel = 1, bias = false },
    batch_norm { name = "bn1", stats = "running" }, relu {},
  },
  layer "b" {
    conv2d { name = "conv2", out_channels = 4, kernel = 3, padding = 1, bias = false },
    batch_norm { name = "bn2", stats = "running" }, relu {},
  },
  layer "c" {
    conv2d { name = "conv3", out_channels = 16, kernel = 1, bias = false },
    batch_norm { name = "bn3", stats = "running" },
    add { tensor = "input" }, relu {},
  },
}
"""

# bench/blocks.py's sd family at 64 channels: the block takes time_emb_proj(silu(temb))
SD_SMALL = """return block "sd_small" {
  input = { "N", 64, 8, 8 },
  inputs = { temb = { "N", 64 } },
  layer "h" {
    group_norm { name = "norm1", groups = 32, eps = 1e-5 }, silu {},
    conv2d { name = "conv1", out_channels = 64, kernel = 3, padding = 1 },
    add { tensor = "temb" },
  },
  layer "out" {
    group_norm { name = "norm2", groups = 32, eps = 1e-5 }, silu {},
    conv2d { name = "conv2", out_channels = 64, kernel = 3, padding = 1 },
    add { tensor = "input" },
  },
}
"""

LAYER = """return layer "one" {
  input = { "N", 4, 6, 6 },
  conv2d { name = "conv", out_channels = 8, kernel = 3, padding = 1 },
  relu {},
}
"""


def cpu_context():
    return fusegen.Context(device=-1)


def module(family, channels, seed=0):
    torch.manual_seed(seed)
    m = make_block(family, {"channels": channels}, nn, F, torch).eval()
    randomize(m, torch, 100 + seed)
    return m


def assert_close(test, got, want, what):
    got = np.asarray(got.detach().double().numpy() if hasattr(got, "detach") else got, dtype=np.float64)
    want = want.detach().double().numpy()
    test.assertEqual(got.shape, want.shape, what)
    err = float(np.max(np.abs(got - want)))
    test.assertTrue(np.allclose(got, want, atol=TOL, rtol=TOL), f"{what}: max abs error {err:.3g} > {TOL} (+ rtol)")


if torch is not None:

    class FusedResnetBlock2D(fgt.FusedBlock):
        """bench/blocks.py's ResnetBlock2D with its convs in a FusedBlock and the time
        embedding's projection in PyTorch: the module's state_dict loads strictly."""

        def __init__(self, spec, channels):
            super().__init__(spec)
            self.time_emb_proj = nn.Linear(1280, channels)

        def forward(self, x, temb):
            return super().forward(x, self.time_emb_proj(F.silu(temb)))


@unittest.skipIf(torch is None, NO_TORCH)
class BlockReference(unittest.TestCase):
    """fusegen.Block: NumPy and CPU torch tensors against the modules in float64."""

    def test_bottleneck(self):
        m = module("resnet", 16)
        b = fusegen.Block(BOTTLENECK, context=cpu_context(), name="bottleneck.lua")
        self.assertEqual(b.layers, ["a", "b", "c"])
        self.assertEqual(b.input_names, [])
        self.assertEqual(b.output_shape(3), (3, 16, 8, 8))
        self.assertEqual(b.load_state_dict(m.state_dict()), fusegen.IncompatibleKeys([], []))
        x = torch.randn(3, 16, 8, 8, dtype=torch.float64)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x)
        assert_close(self, b(x.float()), want, "CPU tensor")
        y = b(x.float().numpy())
        self.assertIsInstance(y, np.ndarray)
        assert_close(self, y, want, "NumPy")

    def test_sd_extra_input_by_position_and_name(self):
        m = module("sd", 64).double()
        b = fusegen.Block(SD_SMALL, context=cpu_context())
        self.assertEqual(b.input_names, ["temb"])
        self.assertEqual(b.input_shape(2, "temb"), (2, 64))
        keys = b.load_state_dict(m.state_dict(), strict=False)  # time_emb_proj stays outside the spec
        self.assertEqual(sorted(keys.unexpected_keys), ["time_emb_proj.bias", "time_emb_proj.weight"])
        x, t = torch.randn(2, 64, 8, 8, dtype=torch.float64), torch.randn(2, 1280, dtype=torch.float64)
        with torch.no_grad():
            want, temb = m(x, t), m.time_emb_proj(F.silu(t))
        assert_close(self, b(x.float(), temb.float()), want, "temb positional")
        assert_close(self, b(x.float(), temb=temb.float()), want, "temb by name")
        assert_close(self, b.run_reference(x.numpy(), temb=temb.numpy()), want, "run_reference")

    def test_resnet50_bottleneck_spec(self):
        m = module("resnet", 256)
        b = fusegen.Block(os.path.join(SPECS, "resnet50_bottleneck.lua"), context=cpu_context())
        b.load_state_dict(m.state_dict())
        x = torch.randn(1, 256, 56, 56, dtype=torch.float64)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x)
        assert_close(self, b(x.float()), want, "specs/blocks/resnet50_bottleneck.lua")

    def test_closed(self):
        b = fusegen.Block(BOTTLENECK, context=cpu_context())
        b.close()
        b.close()
        with self.assertRaises(ValueError):
            b.output_shape(1)


@unittest.skipIf(torch is None, NO_TORCH)
class BlockErrors(unittest.TestCase):
    def setUp(self):
        self.b = fusegen.Block(SD_SMALL, context=cpu_context(), name="sd_small.lua")
        self.b.load_state_dict(module("sd", 64).state_dict(), strict=False)
        self.x, self.t = np.zeros((2, 64, 8, 8), np.float32), np.zeros((2, 64), np.float32)

    def test_layer_spec_to_block(self):
        with self.assertRaises(fusegen.Error) as cm:
            fusegen.Block(LAYER, context=cpu_context())
        self.assertEqual(cm.exception.status, "FG_ERR_SPEC")
        self.assertIn("returns a layer, not a block", str(cm.exception))
        self.assertIn("in Python: fusegen.Layer", str(cm.exception))

    def test_block_spec_to_layer(self):
        with self.assertRaises(fusegen.Error) as cm:
            fusegen.Layer(BOTTLENECK, context=cpu_context())
        self.assertIn("returns a block", str(cm.exception))
        self.assertIn("in Python: fusegen.Block", str(cm.exception))
        with self.assertRaises(fusegen.Error):
            fgt.FusedLayer(BOTTLENECK)
        with self.assertRaises(fusegen.Error):
            fgt.FusedBlock(LAYER)

    def test_unknown_extra_input(self):
        with self.assertRaisesRegex(TypeError, r"no input 'tmb' \(did you mean 'temb'\?\)"):
            self.b(self.x, tmb=self.t)

    def test_missing_extra_input(self):
        with self.assertRaisesRegex(TypeError, r"needs the input\(s\) 'temb'"):
            self.b(self.x)

    def test_too_many_and_twice(self):
        with self.assertRaisesRegex(TypeError, "1 extra input"):
            self.b(self.x, self.t, self.t)
        with self.assertRaisesRegex(TypeError, "given twice"):
            self.b(self.x, self.t, temb=self.t)

    def test_extra_input_shape(self):
        with self.assertRaisesRegex(ValueError, r"input 'temb' has shape \[2, 32\].*\['N', 64\]"):
            self.b(self.x, temb=np.zeros((2, 32), np.float32))
        with self.assertRaisesRegex(ValueError, r"input 'temb' has shape \[3, 64\]"):
            self.b(self.x, temb=np.zeros((3, 64), np.float32))
        with self.assertRaisesRegex(ValueError, r"input 'input' has shape"):
            self.b(np.zeros((2, 64, 4, 4), np.float32), temb=self.t)

    def test_missing_parameters(self):
        b = fusegen.Block(BOTTLENECK, context=cpu_context(), name="bottleneck.lua")
        sd = module("resnet", 16).state_dict()
        del sd["conv2.weight"]
        with self.assertRaises(fusegen.StateDictError) as cm:
            b.load_state_dict(sd)
        self.assertEqual(cm.exception.missing_keys, ["conv2.weight"])
        self.assertIn("bottleneck.lua", str(cm.exception))
        with self.assertRaises(fusegen.Error) as cm:  # nothing bound: running says what is unbound
            b(np.zeros((1, 16, 8, 8), np.float32))
        self.assertEqual(cm.exception.status, "FG_ERR_UNBOUND")
        with self.assertRaisesRegex(fusegen.Error, "did you mean 'conv1.weight'"):
            b.bind("conv1.weigth", np.zeros((4, 16, 1, 1), np.float32))
        with self.assertRaisesRegex(ValueError, r"\[4, 16\]"):
            b.bind("conv1.weight", np.zeros((4, 16), np.float32))

    def test_cuda_tensor_on_cpu_context(self):
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device")
        with self.assertRaises(fusegen.Error):
            self.b(torch.zeros(2, 64, 8, 8, device="cuda"), temb=torch.zeros(2, 64, device="cuda"))


@unittest.skipIf(torch is None, NO_TORCH)
class FusedBlockOnCPU(unittest.TestCase):
    def test_bottleneck_state_dict_round_trip(self):
        m = module("resnet", 16)
        fused = fgt.FusedBlock(BOTTLENECK)
        self.assertEqual(list(fused.state_dict()), list(m.state_dict()))
        fused.load_state_dict(m.state_dict())  # strict, num_batches_tracked included
        x = torch.randn(2, 16, 8, 8)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x.double())
            assert_close(self, fused(x), want, "FusedBlock")
            # back: a fresh PyTorch module from the FusedBlock's state_dict, and a second FusedBlock
            m2 = make_block("resnet", {"channels": 16}, nn, F, torch).eval()
            m2.load_state_dict(fused.state_dict())
            assert_close(self, m2.double()(x.double()), want, "module from FusedBlock.state_dict()")
            fused2 = fgt.FusedBlock(BOTTLENECK)
            fused2.load_state_dict(fused.state_dict())
            self.assertTrue(torch.equal(fused2(x), fused(x)))

    def test_rebinds_after_load_state_dict(self):
        fused = fgt.FusedBlock(BOTTLENECK)
        x = torch.randn(1, 16, 8, 8)
        first = fused(x)  # zero parameters
        m = module("resnet", 16, seed=3)
        fused.load_state_dict(m.state_dict())
        with torch.no_grad():
            want = m.double()(x.double())
        self.assertFalse(torch.equal(first, fused(x)))
        assert_close(self, fused(x), want, "after load_state_dict")

    def test_sd_small_subclass_strict(self):
        m = module("sd", 64)
        fused = FusedResnetBlock2D(SD_SMALL, 64)
        fused.load_state_dict(m.state_dict())  # strict: time_emb_proj is the subclass's
        x, t = torch.randn(2, 64, 8, 8), torch.randn(2, 1280)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x.double(), t.double())
            temb = m.double().time_emb_proj(F.silu(t.double())).float()
            assert_close(self, fused(x, t), want, "subclass")
            base = fgt.FusedBlock(SD_SMALL)
            base.load_state_dict(m.state_dict(), strict=False)
            assert_close(self, base(x, temb=temb), want, "FusedBlock, temb by name")
            assert_close(self, base(x, temb), want, "FusedBlock, temb positional")
        with self.assertRaisesRegex(TypeError, "did you mean 'temb'"):
            base(x, tembb=temb)
        with self.assertRaisesRegex(ValueError, r"input 'temb' has shape \[2, 1280\]"):
            base(x, t)
        with self.assertRaisesRegex(TypeError, "float32"):
            base(x, temb.double())

    def test_missing_keys(self):
        fused = fgt.FusedBlock(BOTTLENECK)
        sd = module("resnet", 16).state_dict()
        del sd["bn3.running_var"]
        with self.assertRaisesRegex(RuntimeError, "bn3.running_var"):
            fused.load_state_dict(sd)

    def test_opcheck_and_compile(self):
        m = module("sd", 64)
        fused = fgt.FusedBlock(SD_SMALL)
        fused.load_state_dict(m.state_dict(), strict=False)
        x, temb = torch.randn(2, 64, 8, 8), torch.randn(2, 64)
        torch.library.opcheck(
            torch.ops.fusegen.block.default,
            (x, [temb], fused._fg_params(), fused._fg_encoded, fused._fg_instance),
        )

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = fused

            def forward(self, x, temb):
                return torch.tanh(self.block(x * 2, temb=temb + 1))

        net = Net()
        with torch.no_grad():
            eager = net(x, temb)
            compiled = torch.compile(net, fullgraph=True)(x, temb)
        self.assertTrue(torch.allclose(compiled, eager, atol=1e-6, rtol=1e-6))

    def test_sd_resnet_block_spec(self):
        """specs/blocks/sd_resnet_block.lua against bench/blocks.py's ResnetBlock2D (320
        channels, 64x64, batch 1): the slowest test here (~30 s of CPU reference)."""
        m = module("sd", 320)
        fused = FusedResnetBlock2D(os.path.join(SPECS, "sd_resnet_block.lua"), 320)
        fused.load_state_dict(m.state_dict())
        x, t = torch.randn(1, 320, 64, 64), torch.randn(1, 1280)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x.double(), t.double())
            assert_close(self, fused(x, t), want, "specs/blocks/sd_resnet_block.lua")



def with_fields(spec, fields):
    """A block spec with block fields (dtype, layout) added after its `input` line."""
    head, rest = spec.split("\n", 2)[:2], spec.split("\n", 2)[2]
    return "\n".join(head) + "\n  " + fields + "\n" + rest


@unittest.skipIf(torch is None, NO_TORCH)
class BlockDtypeLayout(unittest.TestCase):
    """The block fields dtype and layout on the CPU: fusegen.Block's properties and reference
    in each layout, FusedBlock on bf16 channels-last CPU tensors, and the op's fake."""

    def setUp(self):
        self.m = module("sd", 64)
        self.state = {k: v for k, v in self.m.state_dict().items() if not k.startswith("time_emb_proj")}

    def block(self, fields):
        b = fusegen.Block(with_fields(SD_SMALL, fields), context=cpu_context(), name="sd.lua")
        b.load_state_dict(self.state)
        return b

    def test_properties(self):
        b = self.block('dtype = "bf16", layout = "channels_last",')
        self.assertEqual((b.dtype, b.layout), ("bf16", "channels_last"))
        self.assertEqual(b.torch_dtype, torch.bfloat16)
        self.assertEqual(b.torch_memory_format, torch.channels_last)
        plain = self.block("")
        self.assertEqual((plain.dtype, plain.layout, plain.torch_dtype), ("fp32", "nchw", torch.float32))
        # the tensors between layers in 2 bytes instead of 4
        self.assertLess(b.workspace_size(2), plain.workspace_size(2))

    def test_channels_last_reference_is_the_nchw_one(self):
        x, t = np.random.default_rng(1).standard_normal((2, 64, 8, 8)), np.random.default_rng(2).standard_normal((2, 64))
        want = self.block("")(x, t)
        got = self.block('layout = "channels_last",')(x, t)
        self.assertEqual(got.shape, want.shape)
        self.assertTrue(got.strides[1] < got.strides[2], "the result has channels-last strides")
        self.assertTrue(np.allclose(got, want, atol=1e-6, rtol=1e-6))

    def test_bf16_reference_rounds(self):
        x, t = np.random.default_rng(3).standard_normal((2, 64, 8, 8)), np.random.default_rng(4).standard_normal((2, 64))
        want = self.block("")(x, t)
        got = self.block('dtype = "bf16",')(x, t)
        as_bf16 = torch.from_numpy(np.ascontiguousarray(got)).to(torch.bfloat16).float().numpy()
        self.assertTrue(np.array_equal(as_bf16, got), "every output value is a bf16 value")
        self.assertTrue(np.allclose(got, want, atol=5e-2, rtol=5e-2))
        self.assertFalse(np.array_equal(got, want))

    def test_fused_block_bf16_channels_last_cpu(self):
        fused = fgt.FusedBlock(with_fields(SD_SMALL, 'dtype = "bf16", layout = "channels_last",'))
        fused.load_state_dict(self.state)
        x = torch.randn(2, 64, 8, 8).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        t = torch.randn(2, 64).to(torch.bfloat16)  # temb in the block's dtype too
        with torch.no_grad():
            y = fused(x, t)
            want = copy.deepcopy(self.m).double()
        self.assertEqual(y.dtype, torch.bfloat16)
        self.assertTrue(y.is_contiguous(memory_format=torch.channels_last))
        # the module with temb as the already-projected input: the block's own part
        h = want.conv1(F.silu(want.norm1(x.double()))) + t.double()[:, :, None, None]
        ref = x.double() + want.conv2(F.silu(want.norm2(h)))
        self.assertTrue(torch.allclose(y.double(), ref, atol=5e-2, rtol=5e-2))
        with self.assertRaisesRegex(TypeError, r"input 'temb' is torch.float32, but block .* takes torch.bfloat16"):
            fused(x, t.float())
        torch.library.opcheck(
            torch.ops.fusegen.block.default, (x, [t], fused._fg_params(), fused._fg_encoded, fused._fg_instance)
        )

    def test_block_refuses_other_dtype(self):
        b = self.block('dtype = "fp16",')
        with self.assertRaisesRegex(TypeError, r"input 'input' is torch.float32, but block sd.lua takes torch.float16"):
            b(torch.zeros(1, 64, 8, 8), torch.zeros(1, 64, dtype=torch.float16))


if __name__ == "__main__":
    unittest.main()
