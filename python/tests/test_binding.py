# SPDX-License-Identifier: Apache-2.0
"""Tests of the Python binding (python/fusegen) over libfusegen.so.

CPU tests run everywhere: they check the library's CPU float64 reference against a third,
independent implementation of KB79 written here in NumPy (from PROBLEMS.md, not from the C
code), plus the binding's error paths. GPU tests need torch with CUDA and are skipped, with
the reason shown, elsewhere.

Run:  python3 -m pytest python/tests -q -rs      or      python3 python/tests/test_binding.py
The library: $FUSEGEN_LIBRARY, else <repo>/build/libfusegen.so (see python/run-tests).
"""

import json
import os
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))  # the package from this checkout, not an installed one

import numpy as np  # noqa: E402

import fusegen  # noqa: E402

SPECS = os.path.join(REPO, "specs")


def spec(name):
    return os.path.join(SPECS, name + ".lua")


def torch_cuda():
    """torch if it is installed and sees a GPU, else None."""
    try:
        import torch
    except Exception:
        return None
    return torch if torch.cuda.is_available() else None


def random_params(layer, rng):
    """Parameters as PROBLEMS.md draws them: conv weight and bias U(-1/sqrt(fan_in), +),
    everything else N(0, 1)."""
    params = dict(layer.params)
    w = params["conv.weight"]
    fan_in = int(np.prod(w[1:]))
    bound = 1.0 / np.sqrt(fan_in)
    out = {}
    for name, shape in params.items():
        if name.startswith("conv."):
            out[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
        else:
            out[name] = rng.standard_normal(size=shape).astype(np.float32)
    return out


def kb79_numpy(x, p):
    """KB79 in float64 from PROBLEMS.md: conv3d(3->16, k=3) -> *m -> instance_norm (biased
    variance, eps 1e-5, no affine) -> clamp(-1, 1) -> *m -> max over channels."""
    x = x.astype(np.float64)
    w = p["conv.weight"].astype(np.float64)
    b = p["conv.bias"].astype(np.float64)
    m = p["multiplier"].astype(np.float64)  # [16, 1, 1, 1]: broadcasts over D, H, W
    # patches[n, c, d, h, w, i, j, k] = x[n, c, d+i, h+j, w+k]: a valid (padding 0) conv
    patches = np.lib.stride_tricks.sliding_window_view(x, (3, 3, 3), axis=(2, 3, 4))
    y = np.einsum("ncdhwijk,ocijk->nodhw", patches, w, optimize=True) + b[None, :, None, None, None]
    y = y * m
    mean = y.mean(axis=(2, 3, 4), keepdims=True)
    var = ((y - mean) ** 2).mean(axis=(2, 3, 4), keepdims=True)
    y = (y - mean) / np.sqrt(var + 1e-5)
    y = np.clip(y, -1.0, 1.0)
    y = y * m
    return y.max(axis=1)


def write_safetensors(path, tensors):
    """A minimal safetensors writer (8-byte little-endian header size, JSON header, raw data),
    so the test needs no safetensors package."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


class CpuContextTest(unittest.TestCase):
    """Tests sharing one CPU-only context."""

    @classmethod
    def setUpClass(cls):
        cls.ctx = fusegen.Context(device=-1)

    @classmethod
    def tearDownClass(cls):
        cls.ctx.close()


class CpuReferenceTest(CpuContextTest):
    """The C library's CPU reference against the NumPy implementation above."""

    def setUp(self):
        self.rng = np.random.default_rng(79)
        self.layer = fusegen.Layer(spec("kb79"), self.ctx)
        self.params = random_params(self.layer, self.rng)
        self.x = self.rng.random((2, 3, 16, 32, 32), dtype=np.float32)

    def tearDown(self):
        self.layer.close()

    def test_shapes_and_params(self):
        self.assertEqual(
            self.layer.params,
            [("conv.weight", (16, 3, 3, 3, 3)), ("conv.bias", (16,)), ("multiplier", (16, 1, 1, 1))],
        )
        self.assertEqual(self.layer.input_shape(2), (2, 3, 16, 32, 32))
        self.assertEqual(self.layer.output_shape(5), (5, 14, 30, 30))

    def test_kb79_matches_numpy(self):
        self.layer.load_state_dict(self.params)
        y = self.layer(self.x)
        self.assertIsInstance(y, np.ndarray)
        self.assertEqual(y.dtype, np.float32)
        ref = kb79_numpy(self.x, self.params)
        self.assertEqual(y.shape, ref.shape)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
        # the reference is float64 inside, so it is far better than the bar
        self.assertLess(np.abs(y - ref).max(), 1e-5)

    def test_run_reference_and_out(self):
        self.layer.load_state_dict(self.params)
        out = np.full(self.layer.output_shape(2), np.nan, dtype=np.float32)
        y = self.layer.run_reference(self.x, out=out)
        self.assertIs(y, out)
        np.testing.assert_allclose(y, kb79_numpy(self.x, self.params), rtol=1e-4, atol=1e-4)

    def test_float64_input_is_converted(self):
        self.layer.load_state_dict(self.params)
        np.testing.assert_array_equal(self.layer(self.x.astype(np.float64)), self.layer(self.x))

    def test_safetensors(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kb79.safetensors")
            write_safetensors(path, self.params)
            self.layer.load_safetensors(path)
            np.testing.assert_allclose(self.layer(self.x), kb79_numpy(self.x, self.params), rtol=1e-4, atol=1e-4)
            extra = os.path.join(d, "extra.safetensors")
            write_safetensors(extra, dict(self.params, other=np.zeros(3, np.float32)))
            with self.assertRaises(fusegen.Error) as cm:
                self.layer.load_safetensors(extra)
            self.assertEqual(cm.exception.status, "FG_ERR_TENSOR_FILE")
            self.assertIn("other", cm.exception.message)
            self.layer.load_safetensors(extra, allow_extra=True)

    def test_source_string(self):
        with open(spec("kb79")) as f:
            text = f.read()
        with fusegen.Layer(text, self.ctx, name="inline-kb79") as layer:
            self.assertEqual(layer.params, self.layer.params)
            layer.load_state_dict(self.params)
            self.layer.load_state_dict(self.params)
            np.testing.assert_array_equal(layer(self.x), self.layer(self.x))

    def test_num_batches_tracked_ignored_and_non_strict(self):
        sd = dict(self.params)
        sd["bn.num_batches_tracked"] = np.array(3)
        self.layer.load_state_dict(sd)  # strict, but the counter is not a parameter
        partial = {k: v for k, v in self.params.items() if k != "multiplier"}
        partial["extra"] = np.zeros(2, np.float32)
        missing, unexpected = self.layer.load_state_dict(partial, strict=False)
        self.assertEqual(missing, ["multiplier"])
        self.assertEqual(unexpected, ["extra"])


# A classifier head: a conv block pooled to one value per channel, the two trailing dims
# squeezed away (x.squeeze(-1).squeeze(-1)); TAIL goes after the squeezes.
HEAD = """return layer "head" {
  input = { "N", 3, 9, 7 },
  conv2d { out_channels = 6, kernel = 3, padding = 1 },
  relu {},
  global_avg_pool {},
%s}
"""
SQUEEZED = "  squeeze { dim = -1 },\n  squeeze { dim = -1 },\n  mul { scalar = 2 },\n"


class ShapeOpsTest(CpuContextTest):
    """A layer ending in shape ops: its output shape is the reshaped one, everywhere."""

    def test_output_shape_and_values(self):
        rng = np.random.default_rng(13)
        layer = fusegen.Layer(HEAD % SQUEEZED, self.ctx, name="head.lua")
        pooled = fusegen.Layer(HEAD % "", self.ctx, name="pooled.lua")
        with layer, pooled:
            self.assertEqual(layer.output_shape(5), (5, 6))
            self.assertEqual(pooled.output_shape(5), (5, 6, 1, 1))
            self.assertIn("output ['N', 6]", repr(layer))
            params = random_params(layer, rng)
            layer.load_state_dict(params)
            pooled.load_state_dict(params)
            x = rng.random((4, 3, 9, 7), dtype=np.float32)
            y = layer(x)
            self.assertEqual(y.shape, (4, 6))
            np.testing.assert_array_equal(y, 2 * pooled(x).reshape(4, 6))
            out = np.full((4, 6), np.nan, dtype=np.float32)
            self.assertIs(layer.run_reference(x, out=out), out)
            with self.assertRaises(ValueError):
                layer.run_reference(x, out=np.empty((4, 6, 1, 1), np.float32))

    def test_refused_shape_op(self):
        with self.assertRaises(fusegen.Error) as cm:
            fusegen.Layer(HEAD % "  flatten {},\n  sum { dim = 1 },\n", self.ctx, name="bad.lua")
        self.assertIn("bad.lua:7: sum: comes after the shape op flatten (line 6)", str(cm.exception))


class ErrorTest(CpuContextTest):
    def setUp(self):
        self.layer = fusegen.Layer(spec("kb79"), self.ctx)
        self.params = random_params(self.layer, np.random.default_rng(1))

    def tearDown(self):
        self.layer.close()

    def test_error_is_runtime_error(self):
        self.assertTrue(issubclass(fusegen.Error, RuntimeError))

    def test_unknown_param_did_you_mean(self):
        with self.assertRaises(fusegen.Error) as cm:
            self.layer.bind("multiplyer", self.params["multiplier"])
        self.assertEqual(cm.exception.status, "FG_ERR_INVALID_ARGUMENT")
        self.assertIn("did you mean 'multiplier'", str(cm.exception))

    def test_strict_state_dict_lists_keys(self):
        sd = dict(self.params)
        sd["multiplyer"] = sd.pop("multiplier")
        with self.assertRaises(KeyError) as cm:
            self.layer.load_state_dict(sd)
        msg = str(cm.exception)
        self.assertIn("missing keys: 'multiplier'", msg)
        self.assertIn("unexpected keys: 'multiplyer' (did you mean 'multiplier'?)", msg)
        self.assertEqual(cm.exception.missing_keys, ["multiplier"])
        # nothing was bound: the CPU run reports the first unbound parameter
        with self.assertRaises(fusegen.Error) as run:
            self.layer(np.zeros((1, 3, 16, 32, 32), np.float32))
        self.assertEqual(run.exception.status, "FG_ERR_UNBOUND")
        self.assertIn("conv.weight", run.exception.message)

    def test_wrong_param_shape(self):
        sd = dict(self.params, multiplier=self.params["multiplier"].reshape(16))
        with self.assertRaises(ValueError) as cm:
            self.layer.load_state_dict(sd)
        self.assertIn("[16, 1, 1, 1]", str(cm.exception))
        with self.assertRaises(ValueError):
            self.layer.bind("conv.bias", np.zeros(15, np.float32))

    def test_wrong_input_shape(self):
        self.layer.load_state_dict(self.params)
        with self.assertRaises(ValueError) as cm:
            self.layer(np.zeros((2, 3, 16, 32, 31), np.float32))
        self.assertIn("['N', 3, 16, 32, 32]", str(cm.exception))
        with self.assertRaises(TypeError):
            self.layer(np.zeros((1, 3, 16, 32, 32), np.int32))

    def test_bad_spec_names_file_and_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.lua")
            with open(path, "w") as f:
                f.write('return layer "bad" {\n  input = { "N", 3, 8, 8 },\n')
                f.write('  conv2d { name = "conv", out_chanels = 4, kernel = 3 },\n}\n')
            with self.assertRaises(fusegen.Error) as cm:
                fusegen.Layer(path, self.ctx)
        self.assertEqual(cm.exception.status, "FG_ERR_SPEC")
        self.assertIn("bad.lua:3:", cm.exception.message)
        self.assertIn("did you mean 'out_channels'", cm.exception.message)

    def test_bad_spec_string_uses_name(self):
        with self.assertRaises(fusegen.Error) as cm:
            fusegen.Layer('return layer "x" {\n  input = { "N", 3, 8, 8 }\n  oops\n}\n', self.ctx, name="mine.lua")
        self.assertEqual(cm.exception.status, "FG_ERR_SPEC")
        self.assertIn("mine.lua:", cm.exception.message)

    def test_missing_spec_file(self):
        with self.assertRaises(fusegen.Error) as cm:
            fusegen.Layer(os.path.join(SPECS, "no_such_layer.lua"), self.ctx)
        self.assertIn("no_such_layer.lua", cm.exception.message)

    def test_closed_layer_and_context_order(self):
        ctx = fusegen.Context(device=-1)
        layer = fusegen.Layer(spec("kb21"), ctx)
        ctx.close()  # closes the layer first, then the context
        self.assertTrue(layer.closed)
        with self.assertRaises(ValueError):
            layer.input_shape(1)
        layer.close()  # idempotent
        ctx.close()

    def test_workspace_size_and_run_workspace_checks(self):
        # what fusegen.torch allocates from torch for each run: per sample, so linear in the
        # batch up to 256-byte alignment of each piece
        sizes = {b: self.layer.workspace_size(b) for b in (1, 2, 4)}
        self.assertGreater(sizes[1], 0)  # KB79's instance norm keeps statistics between passes
        self.assertLessEqual(abs(sizes[4] - 2 * sizes[2]), 8 * 256, sizes)
        with self.assertRaises(fusegen.Error) as cm:
            self.layer.workspace_size(0)
        self.assertIn("batch must be between 1", cm.exception.message)
        # fg_layer_run_workspace checks its arguments before touching any memory (the
        # pointers here are never read), then needs a device
        need = sizes[2]
        cases = [
            (need - 1, 0x10000, "needs %d bytes of workspace for batch 2, got %d" % (need, need - 1)),
            (need, 0x10010, "must be 256-byte aligned"),
            (need, 0x10000, "CPU"),
        ]
        for ws_bytes, ws_ptr, fragment in cases:
            with self.assertRaises(fusegen.Error) as cm:
                self.layer._run_workspace(0x20000, 0x30000, 2, ws_ptr, ws_bytes, 0)
            self.assertIn(fragment, cm.exception.message)
        self.assertEqual(cm.exception.status, "FG_ERR_NO_DEVICE")

    def test_cuda_tensor_on_cpu_context(self):
        torch = torch_cuda()
        if torch is None:
            self.skipTest("needs torch with CUDA")
        with self.assertRaises(fusegen.Error) as cm:
            self.layer(torch.zeros((1, 3, 16, 32, 32), device="cuda"))
        self.assertEqual(cm.exception.status, "FG_ERR_NO_DEVICE")


@unittest.skipUnless(torch_cuda() is not None, "GPU tests need torch with CUDA (torch.cuda.is_available())")
class GpuTest(unittest.TestCase):
    """The generated kernels on CUDA tensors against the CPU reference on the same data."""

    @classmethod
    def setUpClass(cls):
        cls.torch = torch_cuda()
        cls.ctx = fusegen.Context(device=0)

    @classmethod
    def tearDownClass(cls):
        cls.ctx.close()

    def check_layer(self, name, batch):
        torch = self.torch
        rng = np.random.default_rng(int(name[2:]))  # kb79 -> 79: the same data every run
        with fusegen.Layer(spec(name), self.ctx) as layer:
            params = random_params(layer, rng)
            # torch CUDA tensors for the state_dict: the binding copies through the host
            layer.load_state_dict({k: torch.from_numpy(v).cuda() for k, v in params.items()})
            x = rng.random(layer.input_shape(batch), dtype=np.float32)
            xd = torch.from_numpy(x).cuda()
            y = layer(xd)
            self.assertTrue(y.is_cuda)
            self.assertEqual(tuple(y.shape), layer.output_shape(batch))
            # a poisoned out= buffer: elements the kernels do not write stay NaN and fail
            out = torch.full(layer.output_shape(batch), float("nan"), device="cuda")
            self.assertIs(layer(xd, out=out), out)
            torch.cuda.synchronize()
            ref = layer(x)  # NumPy in: the CPU float64 reference
            for got in (y, out):
                np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-4, atol=1e-4)
            # a CPU torch tensor runs the reference too, and gives a CPU tensor back
            yc = layer(torch.from_numpy(x))
            self.assertFalse(yc.is_cuda)
            np.testing.assert_array_equal(yc.numpy(), ref)

    def test_kb79(self):
        self.check_layer("kb79", 2)

    def test_kb21(self):
        self.check_layer("kb21", 2)

    def test_shape_ops(self):
        # the kernels write the squeezed output: its shape, the reference's values
        torch = self.torch
        rng = np.random.default_rng(6)
        with fusegen.Layer(HEAD % SQUEEZED, self.ctx, name="head.lua") as layer:
            layer.load_state_dict(random_params(layer, rng))
            x = rng.random((3, 3, 9, 7), dtype=np.float32)
            out = torch.full((3, 6), float("nan"), device="cuda")
            self.assertIs(layer(torch.from_numpy(x).cuda(), out=out), out)
            torch.cuda.synchronize()
            np.testing.assert_allclose(out.cpu().numpy(), layer(x), rtol=1e-4, atol=1e-4)

    def test_default_context_uses_gpu(self):
        with fusegen.Layer(spec("kb79")) as layer:
            self.assertGreaterEqual(layer.context.device, 0)

    def test_input_checks(self):
        torch = self.torch
        with fusegen.Layer(spec("kb79"), self.ctx) as layer:
            layer.load_state_dict(random_params(layer, np.random.default_rng(2)))
            with self.assertRaises(TypeError):
                layer(torch.zeros((1, 3, 16, 32, 32), device="cuda", dtype=torch.float64))
            with self.assertRaises(ValueError):
                layer(torch.zeros((1, 3, 16, 32, 30), device="cuda"))
            # a non-contiguous input is made contiguous, not misread
            x = torch.rand((2, 3, 16, 32, 32), device="cuda")
            xt = x.transpose(3, 4).contiguous().transpose(3, 4)
            self.assertFalse(xt.is_contiguous())
            torch.testing.assert_close(layer(xt), layer(x), rtol=0, atol=0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
