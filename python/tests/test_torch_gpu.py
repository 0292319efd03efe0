# SPDX-License-Identifier: Apache-2.0
"""fusegen.torch on a GPU: FusedLayer in eager mode, on a side stream, inside torch.compile
(no graph break, Inductor and CUDA graphs) and inside a hand-captured CUDA graph, with its
workspace from torch's caching allocator; and every exported module of test_export.py run
on the GPU. Every result is compared with the PyTorch module in float64 (PROBLEMS.md's bar:
allclose with atol = rtol = 1e-4).

Needs torch with a CUDA device (skipped, with the reason shown, elsewhere) and libfusegen.so
($FUSEGEN_LIBRARY; python/run-tests sets it). On the GPU host: bench/gpu-check torch-op.
"""

import copy
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import fusegen  # noqa: E402

try:
    import torch

    CUDA = torch.cuda.is_available()
except ImportError:
    torch, CUDA = None, False

SKIP = "needs torch with a CUDA device: the GPU tests of fusegen.torch did NOT run"
TOL = 1e-4

if CUDA:
    import fusegen.torch as fgt
    from torch import nn
    from test_export import CASES, KB92, build_case, randomize
    from test_torch import HalfBlock, Net, assert_half_close  # torch ops around a FusedLayer; half dtypes
    from test_torch import CLBlock, CLBlock3d  # layout = "channels_last"


def assert_close(test, got, want, what):
    got = got.detach().double().cpu().numpy()
    want = want.detach().double().cpu().numpy()
    test.assertEqual(got.shape, want.shape, what)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    test.assertTrue(np.allclose(got, want, atol=TOL, rtol=TOL), f"{what}: max abs error {err:.3g} > {TOL} (+ rtol)")
    return err


@unittest.skipUnless(CUDA, SKIP)
class ExportedOnGPU(unittest.TestCase):
    """Each module of test_export.py: exported, run by FusedLayer on the GPU, compared with
    the module in float64 (on the GPU as well)."""

    def run_case(self, cls_, shape, eval_mode):
        module, x = build_case(cls_, shape, eval_mode)
        fused = fgt.FusedLayer(fusegen.export(module, x), name=f"{cls_.__name__}.lua")
        fused.load_state_dict(module.state_dict())  # strict: batch norm state included
        fused = fused.cuda()
        got = fused(x.cuda())
        want = copy.deepcopy(module).cuda().double()(x.cuda().double())
        err = assert_close(self, got, want, cls_.__name__)
        print(f"\n[exported on the GPU] {cls_.__name__}: output {list(got.shape)}, max abs error {err:.2g}")

    if CUDA:
        for _cls, _shape, _eval, _ref in CASES:
            locals()[f"test_{_cls.__name__}"] = lambda self, c=_cls, s=_shape, e=_eval: self.run_case(c, s, e)
        del _cls, _shape, _eval, _ref


@unittest.skipUnless(CUDA, SKIP)
class TorchOpOnGPU(unittest.TestCase):
    """KB92 (a conv, a group norm: statistics and a workspace, a residual) between torch ops."""

    SHAPE = (4, 8, 40, 40)

    def setUp(self):
        torch.manual_seed(0)
        self.module = KB92()
        randomize(self.module, torch.Generator().manual_seed(1))
        spec = fusegen.export(self.module, torch.rand(self.SHAPE))
        self.fused = fgt.FusedLayer(spec, name="kb92_small.lua")
        self.fused.load_state_dict(self.module.state_dict())
        self.fused = self.fused.cuda()
        self.net = Net(self.fused)
        self.module64 = copy.deepcopy(self.module).cuda().double()

    def reference(self, x):
        y = self.module64(x.double() * 0.5 + 0.25)
        return torch.sigmoid(y).mean(dim=(2, 3))

    def rand(self, batch=None):
        shape = (batch or self.SHAPE[0],) + self.SHAPE[1:]
        return torch.rand(shape, device="cuda")

    def test_eager(self):
        x = self.rand()
        assert_close(self, self.net(x), self.reference(x), "eager")

    def test_workspace_from_torchs_allocator(self):
        batch = self.SHAPE[0]
        ws = self.fused.workspace_size(batch)
        self.assertGreater(ws, 0)  # the group norm's statistics live there
        x = self.rand()
        self.fused(x)  # kernels loaded, parameters bound
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y = self.fused(x)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        # torch's allocator held the output and the workspace at once during the call
        self.assertGreaterEqual(peak - base, ws + y.numel() * 4)
        # and the workspace went back to torch when the call returned
        self.assertLess(torch.cuda.memory_allocated() - base, ws + y.numel() * 4)

    def test_side_stream(self):
        x = self.rand()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.cuda._sleep(20_000_000)  # keep the stream busy: the layer must queue behind
            y = self.net(x)
        torch.cuda.current_stream().wait_stream(s)
        assert_close(self, y, self.reference(x), "side stream")

    def test_cuda_graph_capture(self):
        static_x = self.rand()
        self.fused.prepare()  # kernels cannot be loaded while capturing
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.net(static_x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = self.net(static_x)
        for i in range(3):
            x = self.rand()
            static_x.copy_(x)
            graph.replay()
            torch.cuda.synchronize()
            # new inputs, new outputs: the layer's kernels are in the graph, on its stream
            assert_close(self, static_y, self.reference(x), f"CUDA graph replay {i}")

    def test_capture_refuses_a_changed_parameter(self):
        """A parameter updated in place since the last run is bound again at the next one; inside
        a capture that bind would read it (a wgmma conv's packed image, a folded batch norm),
        which a capture cannot hold: the op says so instead of breaking the capture."""
        x = self.rand()
        self.fused.prepare()
        self.net(x)
        torch.cuda.synchronize()
        with torch.no_grad():
            next(self.fused.parameters()).mul_(1.0)  # in place: the version moves
        graph = torch.cuda.CUDAGraph()
        with self.assertRaisesRegex(RuntimeError, "being captured"):
            with torch.cuda.graph(graph):
                self.net(x)
        # outside a capture the run binds it again
        assert_close(self, self.net(x), self.reference(x), "after the refused capture")

    def test_compile_no_graph_break(self):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(self.net)(self.rand())
        self.assertEqual(explained.graph_break_count, 0, explained.break_reasons)
        self.assertEqual(explained.graph_count, 1)

    def test_compile_fullgraph(self):
        torch._dynamo.reset()
        compiled = torch.compile(self.net, fullgraph=True)
        for batch in (4, 2):
            x = self.rand(batch)
            assert_close(self, compiled(x), self.reference(x), f"torch.compile, batch {batch}")

    def test_compile_cuda_graphs(self):
        torch._dynamo.reset()
        from torch._dynamo.utils import counters

        counters.clear()
        compiled = torch.compile(self.net, mode="reduce-overhead", fullgraph=True)
        for i in range(5):  # warm-up, recording, then replays
            x = self.rand()
            y = compiled(x).clone()
            assert_close(self, y, self.reference(x), f"torch.compile reduce-overhead, call {i}")
        self.assertEqual(dict(counters["inductor"]).get("cudagraph_skips", 0), 0, dict(counters["inductor"]))

    def test_moves_between_devices(self):
        x = self.rand(2)
        on_gpu = self.fused(x)
        self.fused.cpu()
        on_cpu = self.fused(x.cpu())  # the CPU reference
        self.fused.cuda()  # new storage: the layer rebinds
        assert_close(self, on_gpu, on_cpu, "GPU vs the CPU reference")
        assert_close(self, self.fused(x), on_cpu, "GPU after .cpu().cuda()")


@unittest.skipUnless(CUDA, SKIP)
class PersistentConvOnGPU(unittest.TestCase):
    """A conv long enough for Hopper's wgmma engine (16 -> 32 channels, 3x3: a reduction of
    144), whose persistent kernel sizes its grid by the device's multiprocessors, through the
    op's workspace path (fg_layer_run_workspace), with instance-norm statistics kept across
    a block's tiles. Elsewhere the same layer runs on mma.sync: the comparison holds either way."""

    def test_against_the_module(self):
        torch.manual_seed(0)
        module = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.InstanceNorm2d(32), nn.ReLU())
        x = torch.rand(6, 16, 36, 36)
        fused = fgt.FusedLayer(fusegen.export(module, x), name="persistent_conv.lua")
        fused.load_state_dict(module.state_dict())
        fused = fused.cuda()
        got = fused(x.cuda())
        want = copy.deepcopy(module).cuda().double()(x.cuda().double())
        err = assert_close(self, got, want, "persistent conv")
        print(f"\n[persistent conv] output {list(got.shape)}, max abs error {err:.2g}")


@unittest.skipUnless(CUDA, SKIP)
class FoldedBatchNormOnGPU(unittest.TestCase):
    """An eval-mode batch norm right after the conv, folded into its weights and bias by the
    layer (gen/fold.h): the parameters are bound by pointer, so an in-place update must be
    bound again (the op does it when a tensor's version changes) for the fold to follow."""

    def test_in_place_updates_are_folded_again(self):
        torch.manual_seed(0)
        module = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.SiLU()).eval()
        randomize(module, torch.Generator().manual_seed(2))
        x = torch.rand(3, 8, 20, 20)
        spec = fusegen.export(module, x)
        fused = fgt.FusedLayer(spec, name="folded_bn.lua")
        fused.load_state_dict(module.state_dict())
        fused, module, x = fused.cuda(), module.cuda(), x.cuda()
        for what in ("as loaded", "running_var x3 in place", "weight + 0.5 in place", "conv.weight negated in place"):
            with torch.no_grad():
                for m in (fused, module):
                    if what.startswith("running_var"):
                        m.get_buffer("1.running_var").mul_(3.0)
                    elif what.startswith("weight"):
                        m.get_parameter("1.weight").add_(0.5)
                    elif what.startswith("conv"):
                        m.get_parameter("0.weight").neg_()
            want = copy.deepcopy(module).double()(x.double())
            err = assert_close(self, fused(x), want, f"folded batch norm, {what}")
            print(f"\n[folded batch norm] {what}: max abs error {err:.2g}")
        # state_dict round trip: the module's tensors, not the folded ones
        for k, v in module.state_dict().items():
            self.assertTrue(torch.equal(fused.state_dict()[k], v), k)

@unittest.skipUnless(CUDA, SKIP)
class HalfDtypeOnGPU(unittest.TestCase):
    """Specs with dtype = "bf16" / "fp16" on the GPU: bf16/fp16 CUDA tensors in and out through
    FusedLayer (fg_layer_run_workspace) and Layer (fg_layer_run), a conv with a group norm
    and a channel max; compared with the module in float64 rounded to the dtype, within
    1 ulp of the dtype (+ 1e-4 relative). A float32 tensor is refused."""

    def run_dtype(self, dtype, name):
        torch.manual_seed(0)
        block = HalfBlock().eval()
        x = torch.rand(3, 4, 40, 40).to(dtype)
        spec = fusegen.export(copy.deepcopy(block).to(dtype), x)
        self.assertIn(f'dtype = "{name}"', spec)
        want = copy.deepcopy(block).cuda().double()(x.cuda().double())
        fused = fgt.FusedLayer(spec)
        fused.load_state_dict(block.state_dict())
        fused = fused.cuda()
        got = fused(x.cuda())
        assert_half_close(self, got, want, dtype, f"{name} FusedLayer")
        out = torch.empty_like(got)
        ctx = fusegen.Context(device=0)
        layer = fusegen.Layer(spec, context=ctx)
        for k, v in block.state_dict().items():
            layer.bind(k, v)
        layer(x.cuda(), out=out)
        torch.cuda.synchronize()
        assert_half_close(self, out, want, dtype, f"{name} Layer")
        with self.assertRaises(TypeError) as cm:
            fused(x.float().cuda())
        self.assertIn(f'dtype = "{name}"', str(cm.exception))
        with self.assertRaises(TypeError):
            layer(x.cuda(), out=torch.empty(out.shape, device="cuda", dtype=torch.float32))
        # parameters stay float32 on a half layer (bind_device of a float32 CUDA tensor was
        # refused once: the parameter check used the layer's dtype); a half parameter is refused
        layer.bind_device("conv.weight", block.conv.weight.detach().cuda())
        with self.assertRaises(TypeError):
            layer.bind_device("conv.weight", block.conv.weight.detach().cuda().to(dtype))
        layer.close()
        ctx.close()
        print(f"\n[half on the GPU] {name}: output {list(got.shape)} {got.dtype}")

    def test_bf16(self):
        self.run_dtype(torch.bfloat16, "bf16")

    def test_fp16(self):
        self.run_dtype(torch.float16, "fp16")


@unittest.skipUnless(CUDA, SKIP)
class ChannelsLastOnGPU(unittest.TestCase):
    """Specs with layout = "channels_last" on the GPU (awaiting the H200): channels_last CUDA
    tensors in and out through FusedLayer and Layer, each conv engine forced (FUSEGEN_CONV_ENGINE
    when the context is made), fp32 and bf16, 2D and 3D; an NCHW input is converted; the output
    is channels_last and equals the NCHW layer's within the float32 bar."""

    def run_case(self, block, x, mf, engine=None, dtype=torch.float32):
        block = block.eval()
        xin = x.to(dtype).contiguous(memory_format=mf)
        spec = fusegen.export(copy.deepcopy(block).to(dtype), xin)
        self.assertIn('layout = "channels_last"', spec)
        want = copy.deepcopy(block).cuda().double()(xin.cuda().double())
        if engine:
            os.environ["FUSEGEN_CONV_ENGINE"] = engine
        try:
            ctx = fusegen.Context(device=0)
        finally:
            os.environ.pop("FUSEGEN_CONV_ENGINE", None)
        layer = fusegen.Layer(spec, context=ctx)
        for k, v in block.state_dict().items():
            layer.bind(k, v)
        for given in (xin.cuda(), xin.cuda().contiguous()):  # as it is; converted once
            got = layer(given)
            torch.cuda.synchronize()
            self.assertTrue(got.is_contiguous(memory_format=mf))
            if dtype == torch.float32:
                assert_close(self, got, want, f"channels_last {engine or 'auto'} Layer")
            else:
                assert_half_close(self, got, want, dtype, f"channels_last {engine or 'auto'} Layer")
        out = torch.empty(got.shape, device="cuda", dtype=dtype)  # NCHW-contiguous: refused
        if not out.is_contiguous(memory_format=mf):
            with self.assertRaises(ValueError) as cm:
                layer(xin.cuda(), out=out)
            self.assertIn('layout = "channels_last"', str(cm.exception))
        layer.close()
        ctx.close()
        fused = fgt.FusedLayer(spec)
        fused.load_state_dict(block.state_dict())
        fused = fused.cuda()
        y = fused(xin.cuda())
        self.assertTrue(y.is_contiguous(memory_format=mf))
        if dtype == torch.float32:
            assert_close(self, y, want, "channels_last FusedLayer")
        else:
            assert_half_close(self, y, want, dtype, "channels_last FusedLayer")

    def test_engines_2d(self):
        torch.manual_seed(0)
        for engine in (None, "fma", "mma", "wgmma"):
            self.run_case(CLBlock(), torch.rand(3, 4, 30, 34), torch.channels_last, engine)

    def test_3d(self):
        torch.manual_seed(0)
        self.run_case(CLBlock3d(), torch.rand(2, 3, 10, 12, 14), torch.channels_last_3d)

    def test_bf16(self):
        torch.manual_seed(0)
        for engine in ("mma", "wgmma"):
            self.run_case(CLBlock(), torch.rand(2, 4, 26, 22), torch.channels_last, engine, torch.bfloat16)


if __name__ == "__main__":
    unittest.main(verbosity=2)


# ---- blocks (fusegen.Block, fusegen.torch.FusedBlock) -------------------------------------------

if CUDA:
    from test_blocks import BOTTLENECK, SD_SMALL, SPECS, FusedResnetBlock2D, module, with_fields


@unittest.skipUnless(CUDA, SKIP)
class BlocksOnGPU(unittest.TestCase):
    """Block specs on CUDA against bench/blocks.py's modules in float64 (atol = rtol = 1e-4):
    the small bottleneck and SD block of test_blocks.py and the ResNet-50 bottleneck and SD
    ResnetBlock2D of specs/blocks/, through fusegen.Block (the block's workspace) and
    FusedBlock (torch's allocator, side stream, CUDA graph, torch.compile)."""

    def sd_case(self, spec, channels, batch, fused=True):
        m = module("sd", channels)
        x, t = torch.randn(batch, channels, *((64, 64) if channels == 320 else (8, 8))), torch.randn(batch, 1280)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x.double(), t.double())
        return m, x.cuda(), t.cuda(), want

    def test_block_bottleneck_and_sd_small(self):
        m = module("resnet", 16)
        b = fusegen.Block(BOTTLENECK, name="bottleneck.lua")  # default context: the GPU
        b.load_state_dict(m.state_dict())
        x = torch.randn(4, 16, 8, 8, device="cuda")
        with torch.no_grad():
            want = copy.deepcopy(m).cuda().double()(x.double())
        assert_close(self, b(x), want, "Block bottleneck")
        m, x, t, want = self.sd_case(SD_SMALL, 64, 2)
        b = fusegen.Block(SD_SMALL)
        b.load_state_dict(m.state_dict(), strict=False)
        temb = m.cuda().time_emb_proj(torch.nn.functional.silu(t)).detach()
        assert_close(self, b(x, temb=temb), want, "Block sd_small, temb by name")
        assert_close(self, b(x, temb), want, "Block sd_small, temb positional")

    def test_block_bind_device(self):
        m = module("resnet", 16).cuda()
        b = fusegen.Block(BOTTLENECK)
        for k, v in m.state_dict().items():
            if not k.endswith("num_batches_tracked"):
                b.bind_device(k, v.contiguous())
        x = torch.randn(2, 16, 8, 8, device="cuda")
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x.double())
        assert_close(self, b(x), want, "Block, parameters bound on the device")

    def test_real_specs(self):
        m = module("resnet", 256)
        fused = fgt.FusedBlock(os.path.join(SPECS, "resnet50_bottleneck.lua"))
        fused.load_state_dict(m.state_dict())
        fused.cuda()
        x = torch.randn(8, 256, 56, 56)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x.double())
            assert_close(self, fused(x.cuda()), want, "specs/blocks/resnet50_bottleneck.lua")
        m, x, t, want = self.sd_case(None, 320, 2)
        fused = FusedResnetBlock2D(os.path.join(SPECS, "sd_resnet_block.lua"), 320)
        fused.load_state_dict(m.state_dict())
        fused.cuda()
        with torch.no_grad():
            assert_close(self, fused(x, t), want, "specs/blocks/sd_resnet_block.lua (FusedBlock)")
        b = fusegen.Block(os.path.join(SPECS, "sd_resnet_block.lua"))
        b.load_state_dict(m.state_dict(), strict=False)
        temb = m.cuda().time_emb_proj(torch.nn.functional.silu(t)).detach()
        assert_close(self, b(x, temb=temb), want, "specs/blocks/sd_resnet_block.lua (Block)")

    def test_fused_block_workspace_stream_graph_compile(self):
        m, x, t, want = self.sd_case(SD_SMALL, 64, 2)
        fused = FusedResnetBlock2D(SD_SMALL, 64)
        fused.load_state_dict(m.state_dict())
        fused.cuda()
        with torch.no_grad():
            ws = fused.workspace_size(2)
            self.assertGreater(ws, 0)  # the layer "h"'s output lives there
            fused(x, t)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            y = fused(x, t)
            torch.cuda.synchronize()
            self.assertGreaterEqual(torch.cuda.max_memory_allocated() - base, ws + y.numel() * 4)
            assert_close(self, y, want, "FusedBlock eager")
            # a busy side stream: the block queues behind it
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                torch.cuda._sleep(20_000_000)
                y = fused(x, t)
            torch.cuda.current_stream().wait_stream(s)
            assert_close(self, y, want, "FusedBlock on a side stream")
            # a hand-captured CUDA graph
            fused.prepare()
            static_x, static_t = x.clone(), t.clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    fused(static_x, static_t)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = fused(static_x, static_t)
            graph.replay()
            torch.cuda.synchronize()
            assert_close(self, static_y, want, "FusedBlock in a CUDA graph")
            torch._dynamo.reset()
            compiled = torch.compile(fused, fullgraph=True)
            assert_close(self, compiled(x, t), want, "FusedBlock under torch.compile")

    def test_moves_between_devices(self):
        m = module("resnet", 16)
        fused = fgt.FusedBlock(BOTTLENECK)
        fused.load_state_dict(m.state_dict())
        x = torch.randn(2, 16, 8, 8)
        with torch.no_grad():
            on_cpu = fused(x)
            on_gpu = fused.cuda()(x.cuda())
        assert_close(self, on_gpu, on_cpu.double(), "FusedBlock GPU vs the CPU reference")


@unittest.skipUnless(CUDA, SKIP)
class BlockDtypesOnGPU(unittest.TestCase):
    """The SD block (test_blocks.py's SD_SMALL, the time embedding projected in PyTorch) with
    the block fields dtype and layout, through FusedBlock on CUDA tensors of the block's dtype
    and memory format (taken as they are: the output comes back in them too), against the
    module in float64. A half block rounds each layer's output to its dtype: bf16 (8 bits) is
    held to 3e-2, fp16 to 3e-3; fp32 channels last to the fp32 bar, 1e-4."""

    CASES = [
        ('dtype = "bf16",', torch.bfloat16, torch.contiguous_format, 3e-2),
        ('dtype = "bf16", layout = "channels_last",', torch.bfloat16, torch.channels_last, 3e-2),
        ('dtype = "fp16",', torch.float16, torch.contiguous_format, 3e-3),
        ('layout = "channels_last",', torch.float32, torch.channels_last, 1e-4),
    ] if CUDA else []

    def test_sd_small(self):
        m = module("sd", 64)
        x, t = torch.randn(3, 64, 8, 8), torch.randn(3, 1280)
        with torch.no_grad():
            want = copy.deepcopy(m).double()(x.double(), t.double())
        for fields, dtype, mf, tol in self.CASES:
            with self.subTest(fields=fields):
                fused = FusedResnetBlock2D(with_fields(SD_SMALL, fields), 64).cuda()
                fused.load_state_dict(m.state_dict())
                fused.time_emb_proj.to(dtype)  # the projection feeds the block its dtype
                xd = x.cuda().to(dtype).contiguous(memory_format=mf)
                with torch.no_grad():
                    y = fused(xd, t.cuda().to(dtype))
                torch.cuda.synchronize()
                self.assertEqual(y.dtype, dtype)
                self.assertTrue(y.is_contiguous(memory_format=mf))
                err = (y.double().cpu() - want).abs().max().item()
                self.assertTrue(torch.allclose(y.double().cpu(), want, atol=tol, rtol=tol), f"{fields}: max abs {err:.3g}")
