# SPDX-License-Identifier: Apache-2.0
"""Round trips through fusegen.export: a PyTorch module -> a spec -> fusegen's CPU reference.

For each module, fusegen.export writes the spec; fusegen.Layer loads it in a CPU-only
context, binds the module's state_dict as it is, and runs its float64 CPU reference
(reference/cpu_reference.c) on the same float32 input. The oracle is the module itself,
run by PyTorch in float64 on the same values: two independent implementations of the same
layer. The modules are the six reference layers of PROBLEMS.md and twenty more conv
blocks (2D and 3D, norms in both modes, reductions, pools, residuals, functional forms,
nested modules). Then: what the exporter refuses, with the node named; the PENDING_OPS
table; the `python -m fusegen export` and `fusegen export` commands.

Needs torch (CPU is enough; skipped, with the reason shown, without it) and libfusegen.so
($FUSEGEN_LIBRARY, see python/run-tests).
"""

import copy
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))  # the package from this checkout

import numpy as np  # noqa: E402

import fusegen  # noqa: E402
from fusegen import _export  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # the whole file skips, loudly
    torch = None

NO_TORCH = "torch is not installed: the export round trips did NOT run (pip install torch)"
# fusegen's reference computes in float64 from the float32 values and rounds the output to
# float32; the module runs in float64 on the same values: they differ by that rounding.
RTOL = ATOL = 2e-6


# ---- the modules ------------------------------------------------------------------------------

if torch is not None:

    # The six reference layers, written as PROBLEMS.md states them (as KernelBench does).
    class KB79(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(3, 16, 3)
            self.multiplier = nn.Parameter(torch.randn(16, 1, 1, 1))
            self.instance_norm = nn.InstanceNorm3d(16)

        def forward(self, x):
            x = self.conv(x)
            x = x * self.multiplier
            x = self.instance_norm(x)
            x = torch.clamp(x, -1.0, 1.0)
            x = x * self.multiplier
            return torch.max(x, dim=1)[0]

    class KB21(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 32, 3)
            self.bias = nn.Parameter(torch.randn(32, 1, 1))
            self.scale = nn.Parameter(torch.randn(32, 1, 1))
            self.group_norm = nn.GroupNorm(8, 32)

        def forward(self, x):
            x = self.conv(x)
            x = x + self.bias
            x = x * self.scale
            x = torch.sigmoid(x)
            return self.group_norm(x)

    class KB23(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(3, 24, 3)
            self.group_norm = nn.GroupNorm(8, 24)

        def forward(self, x):
            x = self.group_norm(self.conv(x))
            return x.mean(dim=[1, 2, 3, 4])

    class KB85(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 64, 3)
            self.group_norm = nn.GroupNorm(16, 64)
            self.scale = nn.Parameter(torch.ones(64, 1, 1))
            self.maxpool = nn.MaxPool2d(kernel_size=4)

        def forward(self, x):
            x = self.group_norm(self.conv(x))
            x = x * self.scale
            x = self.maxpool(x)
            return torch.clamp(x, 0.0, 1.0)

    class KB17(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(64, 128, 3)
            self.instance_norm = nn.InstanceNorm2d(128)

        def forward(self, x):
            x = self.instance_norm(self.conv(x))
            return x / 2.0

    class KB92(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 64, 3)
            self.group_norm = nn.GroupNorm(16, 64)
            self.tanh = nn.Tanh()
            self.hardswish = nn.Hardswish()

        def forward(self, x):
            x_conv = self.conv(x)
            x_norm = self.group_norm(x_conv)
            x_tanh = self.tanh(x_norm)
            x_hard_swish = self.hardswish(x_tanh)
            x_res = x_conv + x_hard_swish
            return torch.logsumexp(x_res, dim=1, keepdim=True)

    # More conv blocks.
    class BatchNormEval(nn.Module):  # 2D, strided and padded conv, batch norm on running stats
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1)
            self.bn = nn.BatchNorm2d(8, eps=1e-3)
            self.act = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class BatchNormTrainPool(nn.Module):  # batch statistics, dilated conv without bias, avg pool
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 3, dilation=2, bias=False)
            self.bn = nn.BatchNorm2d(6)
            self.pool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)

        def forward(self, x):
            return self.pool(F.leaky_relu(self.bn(self.conv(x)), 0.2))

    class GroupGelu3d(nn.Module):  # 3D grouped, padded and dilated conv, global average pool
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(4, 8, 3, groups=2, padding=(0, 1, 1), dilation=(1, 2, 2))
            self.norm = nn.GroupNorm(4, 8, eps=1e-4)
            self.gelu = nn.GELU(approximate="tanh")
            self.pool = nn.AdaptiveAvgPool3d(1)

        def forward(self, x):
            return self.pool(self.gelu(self.norm(self.conv(x))))

    class LayerNormSoftplus(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, bias=False)
            self.ln = nn.LayerNorm([4, 6, 6])
            self.softplus = nn.Softplus(beta=2.0, threshold=10.0)

        def forward(self, x):
            return self.softplus(self.ln(self.conv(x))).mean(dim=(2, 3), keepdim=True)

    class InstanceMishGate(nn.Module):  # affine instance norm, a gate by the conv output, softmax
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.inorm = nn.InstanceNorm2d(8, affine=True)

        def forward(self, x):
            c = self.conv(x)
            y = F.mish(self.inorm(c))
            return torch.softmax(y * c, dim=1)

    class Relu6Pool3d(nn.Module):  # 3D: ReLU6, an anisotropic pool, amax to [N, C], a [C] gain
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(2, 4, (1, 3, 3))
            self.pool = nn.MaxPool3d((1, 2, 2))
            self.gain = nn.Parameter(torch.randn(4))

        def forward(self, x):
            y = torch.amax(F.relu6(self.conv(x)), dim=(2, 3, 4))
            return y * self.gain

    class SigmoidRsub(nn.Module):  # 1 - x (neg, then add), clamp_min, logsumexp over the last dim
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 5, 3)
            self.scale = nn.Parameter(torch.randn(5, 1, 1))

        def forward(self, x):
            y = 1.0 - torch.sigmoid(self.conv(x))
            y = (y * self.scale).clamp_min(-0.1)
            return torch.logsumexp(y, dim=-1)

    class SameSiluResidual(nn.Module):  # padding='same', c - y (a residual on the right), min
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding="same")

        def forward(self, x):
            c = self.conv(x)
            y = c - F.silu(c)
            y = F.hardtanh(y, -0.5, 0.5)
            return torch.min(y, dim=1, keepdim=True).values

    class SumDiv(nn.Module):  # a reduction to [N], then a number and a [1] parameter
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 5, 5, stride=(1, 2))
            self.out_scale = nn.Parameter(torch.randn(1))

        def forward(self, x):
            return self.conv(x).sum(dim=(1, 2, 3)) / 7.0 * self.out_scale

    class SwishAdaptiveMax(nn.Module):  # x * sigmoid(x), an adaptive max pool, maximum with a buffer
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 3, padding=1)
            self.pool = nn.AdaptiveMaxPool2d((4, 4))
            self.register_buffer("floor", torch.randn(6, 1, 1) * 0.1)

        def forward(self, x):
            c = self.conv(x)
            y = self.pool(c * torch.sigmoid(c))
            y = torch.maximum(F.hardsigmoid(y), self.floor)
            return y.clamp(max=0.9)

    class NestedSequential(nn.Module):  # parameters under nested names: block.0.weight, block.1.*
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
            self.pool = nn.MaxPool2d(3, stride=2, padding=1)

        def forward(self, x):
            y = self.pool(self.block(x))
            return torch.log(y.abs() + 1.0).mean(dim=(1, 2, 3))

    class Functional(nn.Module):  # F.conv2d / F.group_norm on submodules' parameters
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 3)
            self.gn = nn.GroupNorm(3, 6)

        def forward(self, x):
            y = F.conv2d(x, self.conv.weight, self.conv.bias, padding=1)
            y = F.group_norm(y, 3, self.gn.weight, self.gn.bias, 1e-5)
            y = F.max_pool2d(F.gelu(y), 2)
            return torch.tanh(F.avg_pool2d(y, 2, stride=1))

    class Pool3dExpSum(nn.Module):  # 3D: strided conv, batch norm (eval), avg pool, exp, sum
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(3, 4, 3, stride=(1, 2, 2))
            self.bn = nn.BatchNorm3d(4)
            self.pool = nn.AvgPool3d(2, stride=1)

        def forward(self, x):
            y = self.pool(F.hardswish(self.bn(self.conv(x))))
            return torch.exp(y).sum(dim=1, keepdim=True)

    class MinMaxValues(nn.Module):  # torch.minimum with a value, - a parameter, neg, abs, max(x, y)
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3)
            self.shift = nn.Parameter(torch.randn(4, 1, 1))

        def forward(self, x):
            c = self.conv(x)
            r = torch.relu(c)
            y = torch.minimum(torch.tanh(r), r)
            y = torch.abs(-(y - self.shift))
            return torch.max(y, c)

    class LayerNormChannelsLast(nn.Module):  # layer norm over the last dim only, no affine
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.ln = nn.LayerNorm(6, elementwise_affine=False)

        def forward(self, x):
            return F.softplus(self.ln(self.conv(x)))

    class DropoutSoftsign(nn.Module):  # dropout in inference (the identity), softsign
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.drop = nn.Dropout2d(0.2)

        def forward(self, x):
            y = F.softsign(self.drop(self.conv(x)))
            return F.dropout(y, 0.3, training=self.training).mean(dim=(2, 3))

    class PoolFlatten(nn.Module):  # shape ops: a classifier's head, torch.flatten(x, 1) after a pool
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            x = F.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1)
            return torch.flatten(x, 1) * 2.0

    class SqueezeHead(nn.Module):  # x.squeeze(-1).squeeze(-1) after adaptive_avg_pool2d(x, 1), batch norm (eval)
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 6, 3, stride=2)
            self.bn = nn.BatchNorm2d(6)

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(F.silu(self.bn(self.conv(x))), 1)
            return torch.sigmoid(x.squeeze(-1).squeeze(-1))

    class Flatten3d(nn.Module):  # 3D: nn.Flatten, x.view(x.size(0), C, -1), unsqueeze, a value after them
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(2, 4, 3, padding=1)
            self.pool = nn.MaxPool3d(2)
            self.flat = nn.Flatten()

        def forward(self, x):
            y = self.flat(self.pool(self.conv(x)))
            y = y.view(y.size(0), 4, -1)
            return (torch.tanh(y) * y).unsqueeze(1)

    class GroupNormReshape(nn.Module):  # torch.reshape after a group norm, x.reshape, squeeze of a dim that stays
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.gn = nn.GroupNorm(2, 8)

        def forward(self, x):
            y = torch.reshape(self.gn(self.conv(x)), (-1, 2, 4, 36))
            return F.gelu(y.reshape(y.shape[0], 8, 36).squeeze(1))

    # Batch norm: folded into the conv (eval, right after it), inline (after an activation),
    # without affine, 3D, on batch statistics with and without running statistics.
    class ConvReluBatchNorm(nn.Module):  # eval: after the ReLU, so not folded (inline)
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 3, padding=1)
            self.bn = nn.BatchNorm2d(6, momentum=0.3)

        def forward(self, x):
            return self.bn(torch.relu(self.conv(x)))

    class BatchNormNoAffine(nn.Module):  # eval, folded: no conv bias, no norm weight or bias
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 6, 3, bias=False)
            self.bn = nn.BatchNorm2d(6, affine=False, eps=1e-3)

        def forward(self, x):
            return torch.sigmoid(self.bn(self.conv(x)))

    class Conv3dBatchNorm3d(nn.Module):  # eval, folded: grouped and padded 3D conv
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(4, 6, (2, 3, 3), padding=1, groups=2)
            self.bn = nn.BatchNorm3d(6, momentum=None)

        def forward(self, x):
            return torch.tanh(self.bn(self.conv(x)))

    class BatchNormNoRunningStats(nn.Module):  # batch statistics; the state_dict has none
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 5, 3)
            self.bn = nn.BatchNorm2d(5, affine=False, track_running_stats=False)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))

    # Prologues: norms and elementwise ops before the conv (docs/spec.md, "Prologue").
    class SDResnetFirstHalf(nn.Module):  # Stable Diffusion's ResnetBlock2D: norm1, SiLU, conv1
        def __init__(self):
            super().__init__()
            self.norm1 = nn.GroupNorm(2, 8, eps=1e-6)
            self.nonlinearity = nn.SiLU()
            self.conv1 = nn.Conv2d(8, 6, 3, padding=1)

        def forward(self, x):
            return self.conv1(self.nonlinearity(self.norm1(x)))

    class PreActBatchNorm(nn.Module):  # pre-activation ResNet: BatchNorm (eval) -> ReLU -> conv
        def __init__(self):
            super().__init__()
            self.bn1 = nn.BatchNorm2d(4)
            self.conv1 = nn.Conv2d(4, 5, 1, bias=False)

        def forward(self, x):
            return self.conv1(F.relu(self.bn1(x)))

    # (class, example input shape, eval mode?, reference spec in specs/ or None)
    CASES = [
        (SDResnetFirstHalf, (2, 8, 7, 9), True, None),
        (PreActBatchNorm, (3, 4, 6, 6), True, None),
        (KB79, (2, 3, 16, 32, 32), False, "kb79"),
        (KB21, (1, 8, 256, 256), False, "kb21"),
        (KB23, (2, 3, 24, 32, 32), False, "kb23"),
        (KB85, (1, 8, 128, 128), False, "kb85"),
        (KB17, (1, 64, 128, 128), False, "kb17"),
        (KB92, (1, 8, 128, 128), False, "kb92"),
        (BatchNormEval, (2, 4, 16, 16), True, None),
        (BatchNormTrainPool, (3, 3, 16, 16), False, None),
        (GroupGelu3d, (2, 4, 6, 10, 10), False, None),
        (LayerNormSoftplus, (2, 3, 8, 8), False, None),
        (InstanceMishGate, (2, 3, 10, 10), False, None),
        (Relu6Pool3d, (2, 2, 3, 10, 10), False, None),
        (SigmoidRsub, (2, 3, 9, 11), False, None),
        (SameSiluResidual, (2, 4, 8, 8), False, None),
        (SumDiv, (2, 3, 12, 16), False, None),
        (SwishAdaptiveMax, (2, 3, 8, 8), False, None),
        (NestedSequential, (2, 3, 12, 12), True, None),
        (Functional, (2, 3, 12, 12), False, None),
        (Pool3dExpSum, (2, 3, 6, 12, 12), True, None),
        (MinMaxValues, (2, 2, 8, 8), False, None),
        (LayerNormChannelsLast, (2, 3, 8, 8), False, None),
        (DropoutSoftsign, (2, 3, 8, 8), True, None),
        (PoolFlatten, (2, 3, 10, 10), False, None),
        (SqueezeHead, (3, 4, 11, 9), True, None),
        (Flatten3d, (2, 2, 4, 6, 6), False, None),
        (GroupNormReshape, (2, 3, 8, 8), False, None),
        (ConvReluBatchNorm, (2, 3, 10, 10), True, None),
        (BatchNormNoAffine, (2, 4, 9, 11), True, None),
        (Conv3dBatchNorm3d, (2, 4, 5, 8, 8), True, None),
        (BatchNormNoRunningStats, (3, 3, 8, 8), False, None),
    ]

# The modules above whose spec folds the batch norm into the conv (eval mode, right after
# it), and those whose batch norm stays in the kernels.
FOLDED = {"BatchNormEval", "BatchNormNoAffine", "Conv3dBatchNorm3d", "Pool3dExpSum"}
NOT_FOLDED = {"ConvReluBatchNorm", "BatchNormTrainPool", "BatchNormNoRunningStats"}


def randomize(module, gen):
    """Parameters and buffers drawn as PROBLEMS.md draws them (convs keep PyTorch's init,
    everything else N(0, 1)), running variances positive."""
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point():
                continue
            owner = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
            if isinstance(owner, nn.modules.conv._ConvNd):
                continue
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
            else:
                t.copy_(torch.randn(t.shape, generator=gen))


def build_case(cls_, shape, eval_mode):
    """A module of CASES with random parameters, in its mode, and an input x ~ U[0, 1)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    module = cls_()
    randomize(module, gen)
    if eval_mode:
        module.eval()
    return module, torch.rand(shape, generator=gen)


def cpu_context():
    return fusegen.Context(device=-1, cache_path="")


@unittest.skipIf(torch is None, NO_TORCH)
class RoundTrip(unittest.TestCase):
    """The exported spec's output equals the module's, in float64, on the same input."""

    @classmethod
    def setUpClass(cls):
        cls.ctx = cpu_context()

    @classmethod
    def tearDownClass(cls):
        cls.ctx.close()

    def round_trip(self, cls_, shape, eval_mode, ref_spec):
        module, x = build_case(cls_, shape, eval_mode)
        state_before = {k: v.clone() for k, v in module.state_dict().items()}
        spec = fusegen.export(module, x)
        # export leaves the module as it was (batch norm in training mode would update its
        # running statistics if it ran the module itself)
        for k, v in module.state_dict().items():
            self.assertTrue(torch.equal(v, state_before[k]), f"export changed {k}")
        layer = fusegen.Layer(spec, context=self.ctx, name=f"{cls_.__name__}.lua")
        try:
            # strictly: a batch norm in training mode accepts its running statistics and
            # num_batches_tracked (unused), one in eval mode reads them
            missing, unexpected = layer.load_state_dict(module.state_dict())
            self.assertEqual((missing, unexpected), ([], []))
            got = layer.run_reference(x.numpy())
            want = copy.deepcopy(module).double()(x.double()).detach().numpy()
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{cls_.__name__}:\n{spec}")
            if ref_spec:
                # the same layer as the hand-written spec: parameters, input and output shapes
                with fusegen.Layer(os.path.join(REPO, "specs", ref_spec + ".lua"), context=self.ctx) as ref:
                    self.assertEqual(layer.params, ref.params)
                    self.assertEqual(layer.input_shape(3), ref.input_shape(3))
                    self.assertEqual(layer.output_shape(3), ref.output_shape(3))
        finally:
            layer.close()
        return spec

    if torch is not None:
        for _cls, _shape, _eval, _ref in CASES:
            locals()[f"test_{_cls.__name__}"] = (
                lambda self, c=_cls, s=_shape, e=_eval, r=_ref: self.round_trip(c, s, e, r) and None
            )
        del _cls, _shape, _eval, _ref

    def test_the_spec_text(self):
        spec = self.round_trip(KB92, (1, 8, 16, 16), False, None)
        # the residual: the conv's value is named after its torch.fx node and read back
        self.assertIn('conv2d { name = "conv", out_channels = 64, kernel = 3, as = "conv" }', spec)
        self.assertIn('add { value = "conv" }', spec)
        self.assertIn("logsumexp { dim = 1, keepdim = true }", spec)
        self.assertIn('input = { "N", 8, 16, 16 }', spec)
        # each op names its node and source line
        self.assertRegex(spec, r"-- add \(test_export\.py:\d+\)")

    def test_batch_norm_modes(self):
        m = BatchNormEval()
        x = torch.rand(2, 4, 8, 8)
        self.assertIn('stats = "running", momentum = 0.1 }', fusegen.export(m.eval(), x))
        self.assertNotIn("stats", fusegen.export(m.train(), x))
        # momentum as the module has it; None (a cumulative average) is left out
        m.bn.momentum = 0.25
        self.assertIn('batch_norm { name = "bn", eps = 0.001, momentum = 0.25 }', fusegen.export(m.train(), x))
        m.bn.momentum = None
        self.assertNotIn("momentum", fusegen.export(m.train(), x))
        m.bn.momentum = 1.5  # PyTorch takes it; the spec language does not
        with self.assertRaises(fusegen.ExportError) as cm:
            fusegen.export(m.train(), x)
        self.assertIn("has momentum 1.5; a spec's batch_norm momentum is between 0 and 1", str(cm.exception))

    def test_batch_norm_state_in_training_mode(self):
        # the running statistics of a training-mode batch norm: accepted, shape-checked, unused
        module, x = build_case(BatchNormTrainPool, (3, 3, 16, 16), False)
        with fusegen.Layer(fusegen.export(module, x), context=self.ctx) as layer:
            self.assertEqual(
                layer.ignored,
                [("bn.running_mean", (6,), "F32"), ("bn.running_var", (6,), "F32"), ("bn.num_batches_tracked", (), "I64")],
            )
            sd = module.state_dict()
            layer.load_state_dict(sd)
            want = layer.run_reference(x.numpy())
            sd = dict(sd, **{"bn.running_mean": sd["bn.running_mean"] + 100.0})
            layer.load_state_dict(sd)
            np.testing.assert_array_equal(layer.run_reference(x.numpy()), want)  # not read
            sd["bn.running_var"] = torch.ones(7)
            with self.assertRaises(ValueError) as cm:
                layer.load_state_dict(sd)
            self.assertIn("'bn.running_var' has shape [7] but layer", str(cm.exception))

    def test_batch_norm_folding(self):
        lib = os.environ.get("FUSEGEN_LIBRARY")
        cli = os.path.join(os.path.dirname(lib), "fusegen") if lib else None
        if not cli or not os.access(cli, os.X_OK):
            self.skipTest("the fusegen CLI is not next to $FUSEGEN_LIBRARY")
        with tempfile.TemporaryDirectory() as tmp:
            for cls_, shape, eval_mode, _ in CASES:
                if cls_.__name__ not in FOLDED | NOT_FOLDED:
                    continue
                module, x = build_case(cls_, shape, eval_mode)
                path = os.path.join(tmp, cls_.__name__ + ".lua")
                with open(path, "w") as f:
                    f.write(fusegen.export(module, x))
                plan = subprocess.run([cli, "plan", path], capture_output=True, text=True, timeout=60)
                self.assertEqual(plan.returncode, 0, plan.stderr)
                folded = "  folded: batch_norm bn (v1, line" in plan.stdout
                self.assertEqual(folded, cls_.__name__ in FOLDED, f"{cls_.__name__}:\n{plan.stdout}")


if torch is not None:

    class ConvThen(nn.Module):
        """A Conv2d(C, 4 or `out`, 3) named conv, then tail(self, conv output): the refusal
        tests' modules. `extra` holds more parameters or buffers: name -> (tensor, persistent)."""

        def __init__(self, tail, in_channels=3, out=4, **extra):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out, 3)
            self.tail = tail
            for name, (t, persistent) in extra.items():
                if persistent is None:
                    self.register_parameter(name, nn.Parameter(t))
                else:
                    self.register_buffer(name, t, persistent=persistent)

        def forward(self, x):
            return self.tail(self, self.conv(x))


@unittest.skipIf(torch is None, NO_TORCH)
class Refusals(unittest.TestCase):
    """What the spec language cannot express is refused, naming the node and its line."""

    def refused(self, module, shape, node, *fragments):
        with self.assertRaises(fusegen.ExportError) as cm:
            fusegen.export(module, torch.rand(shape))
        e = cm.exception
        self.assertEqual(e.node, node, str(e))
        for f in fragments:
            self.assertIn(f, str(e))
        return e

    def test_unknown_module(self):
        m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ELU())
        e = self.refused(m, (1, 3, 8, 8), "_1", "ELU", "has no op in the spec language")
        self.assertIn("node '_1' (module '1'", str(e))

    def test_second_conv(self):
        m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 1))
        self.refused(m, (1, 3, 8, 8), "_2", "second convolution")

    def test_op_before_the_conv(self):
        # norms and elementwise ops may (a prologue); a pool may not: the spec loader says so
        m = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(3, 4, 3))
        self.refused(m, (1, 3, 8, 8), "_0", "does not load", "max_pool2d: cannot come before the convolution")

    def test_prologue_spec_text(self):
        spec = fusegen.export(SDResnetFirstHalf().eval(), torch.rand(2, 8, 7, 9))
        lines = [line.strip() for line in spec.splitlines()]
        g = next(i for i, t in enumerate(lines) if t.startswith("group_norm {"))
        self.assertTrue(lines[g + 1].startswith("silu {"), spec)
        self.assertTrue(lines[g + 2].startswith('conv2d { name = "conv1"'), spec)

    def test_branch_is_not_a_chain(self):
        def branch(m, c):
            a = torch.relu(c)
            b = torch.sigmoid(c)
            return a + b

        e = self.refused(ConvThen(branch), (1, 3, 8, 8), "sigmoid", "reads 'conv', but the value before it is 'relu'")
        self.assertRegex(str(e), r"test_export\.py:\d+: b = torch\.sigmoid\(c\)")

    def test_reciprocal(self):
        self.refused(ConvThen(lambda m, c: 2.0 / c), (1, 3, 8, 8), "truediv", "divides by the chain's value")

    def test_padding_mode(self):
        m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"))
        self.refused(m, (1, 3, 8, 8), "_0", "padding_mode='reflect'")

    def test_same_padding_even_kernel(self):
        m = nn.Sequential(nn.Conv2d(3, 4, 2, padding="same"))
        self.refused(m, (1, 3, 8, 8), "_0", "padding='same' with an even")

    def test_dropout_training(self):
        m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Dropout(0.3))
        self.refused(m, (1, 3, 8, 8), "_1", "training mode", "module.eval()")

    def test_pending_ops(self):
        # an op switched off in PENDING_OPS is refused with the text it maps to
        self.assertTrue(all(_export.PENDING_OPS.values()), _export.PENDING_OPS)
        saved = dict(_export.PENDING_OPS)
        try:
            _export.PENDING_OPS["flatten"] = _export.PENDING_OPS["view"] = False
            m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten())
            self.refused(m, (1, 3, 8, 8), "_1", "`flatten { start_dim = 1, end_dim = -1 }`", "PENDING_OPS['flatten']")
            view = ConvThen(lambda m, c: c.view(c.size(0), -1))
            self.refused(view, (2, 3, 8, 8), "view", '`view { shape = { "N", 144 } }`')
        finally:
            _export.PENDING_OPS.update(saved)

    def test_shape_ops_are_emitted(self):
        m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Dropout(0.25), nn.Flatten()).eval()
        spec = fusegen.export(m, torch.rand(1, 3, 8, 8))
        self.assertIn("dropout { p = 0.25 }", spec)
        self.assertIn("flatten { start_dim = 1, end_dim = -1 }", spec)
        view = ConvThen(lambda m, c: torch.relu(c.view(c.size(0), -1)).unsqueeze(2).squeeze(-1))
        spec = fusegen.export(view, torch.rand(2, 3, 8, 8))
        self.assertIn('view { shape = { "N", 144 } }', spec)
        self.assertIn("unsqueeze { dim = 2 }", spec)
        self.assertIn("squeeze { dim = -1 }", spec)
        with cpu_context() as ctx, fusegen.Layer(spec, context=ctx) as layer:
            self.assertEqual(layer.output_shape(5), (5, 144))

    def test_shape_op_over_the_batch(self):
        self.refused(ConvThen(lambda m, c: torch.flatten(c)), (2, 3, 8, 8), "flatten", "flattens the batch dim 0")
        self.refused(ConvThen(lambda m, c: c.reshape(-1, 8)), (2, 3, 8, 8), "reshape", "reshapes the batch dim 0")
        self.refused(ConvThen(lambda m, c: c.squeeze()), (2, 3, 8, 8), "squeeze", "without a dim")

    def test_reduction_after_a_shape_op(self):
        # the spec language lets only elementwise ops follow a shape op: the loader's message
        with self.assertRaises(fusegen.ExportError) as cm:
            fusegen.export(ConvThen(lambda m, c: torch.flatten(c, 1).sum(dim=1)), torch.rand(2, 3, 8, 8))
        self.assertTrue(cm.exception.node.startswith("sum"), str(cm.exception))
        self.assertIn("sum: comes after the shape op flatten (line 6): a reduction over reshaped dims", str(cm.exception))

    def test_control_flow(self):
        def flow(m, c):
            if c.sum() > 0:
                c = -c
            return c

        with self.assertRaises(fusegen.ExportError) as cm:
            fusegen.export(ConvThen(flow), torch.rand(1, 3, 8, 8))
        self.assertIn("torch.fx cannot trace ConvThen", str(cm.exception))
        self.assertIsNone(cm.exception.node)

    def test_two_outputs(self):
        self.refused(ConvThen(lambda m, c: (c, torch.relu(c))), (1, 3, 8, 8), "output", "more than one tensor")

    def test_parameter_that_broadcasts_wrongly(self):
        # [8, 1, 1, 1] lines up with [N, C, H, W]: PyTorch grows the value to [8, 8, 6, 6]
        m = ConvThen(lambda m, c: c * m.gain, out=8, gain=(torch.randn(8, 1, 1, 1), None))
        self.refused(m, (1, 3, 8, 8), "mul", "'gain' [8, 1, 1, 1] does not broadcast against the value [N, 8, 6, 6]")

    def test_in_place_on_a_value_read_again(self):
        def in_place(m, c):
            y = torch.sigmoid(c)
            c.relu_()  # changes c, which the add reads
            return y + c

        self.refused(ConvThen(in_place), (1, 3, 8, 8), "relu_", "works in place on 'conv'")

    def test_non_persistent_buffer(self):
        m = ConvThen(lambda m, c: c * m.k, k=(torch.ones(4, 1, 1), False))
        self.refused(m, (1, 3, 8, 8), "mul", "'k' is not in the module's state_dict")

    def test_reduction_over_the_batch(self):
        self.refused(ConvThen(lambda m, c: c.sum(dim=(0, 1))), (2, 3, 8, 8), "sum_1", "reduces over the batch dim 0")

    def test_library_refusal_names_the_node(self):
        # the spec language has these ops, but the planner refuses the combination (docs/spec.md:
        # a value read after a statistic must not be followed by a pooling in its pass)
        def tail(m, c):
            r = torch.relu(m.gn(c))
            return m.gn2(m.pool(r)) + r

        m = ConvThen(tail, in_channels=4, out=6)
        m.gn, m.gn2, m.pool = nn.GroupNorm(2, 6), nn.GroupNorm(2, 6), nn.AvgPool2d(1)
        with self.assertRaises(fusegen.ExportError) as cm:
            fusegen.export(m, torch.rand(1, 4, 8, 8))
        msg = str(cm.exception)
        self.assertIn("the exported spec does not load", msg)
        self.assertIn("value 'relu' is read after a statistic", msg)
        self.assertIn("(op from node 'relu'", msg)

    def test_bad_example_input(self):
        m = nn.Sequential(nn.Conv2d(3, 4, 3))
        with self.assertRaises(fusegen.ExportError) as cm:
            fusegen.export(m, torch.rand(3, 8, 8))
        self.assertIn("[N, C, H, W] or [N, C, D, H, W]", str(cm.exception))
        with self.assertRaises(TypeError):
            fusegen.export("not a module", torch.rand(1, 3, 8, 8))


MODULE_FILE = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Model(nn.Module):
        def __init__(self, channels, groups):
            super().__init__()
            self.conv = nn.Conv2d(3, channels, 3)
            self.group_norm = nn.GroupNorm(groups, channels)

        def forward(self, x):
            return torch.relu(self.group_norm(self.conv(x)))

    class Other(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(2, 4, 3)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.conv(x))

    def get_inputs():
        return [torch.rand(2, 3, 16, 16)]

    def get_init_inputs():
        return [8, 4]
    """
)


@unittest.skipIf(torch is None, NO_TORCH)
class Command(unittest.TestCase):
    """`python -m fusegen export` and the CLI's `fusegen export`, on a KernelBench-style file."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.tmp.name, "block.py")
        with open(cls.path, "w") as f:
            f.write(MODULE_FILE)
        cls.env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_export(self, *args, cli=None):
        cmd = [cli, "export"] if cli else [sys.executable, "-m", "fusegen", "export"]
        return subprocess.run(cmd + list(args), capture_output=True, text=True, env=self.env, timeout=300)

    def check_default(self, r):
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('return layer "Model" {', r.stdout)
        self.assertIn('input = { "N", 3, 16, 16 }', r.stdout)
        self.assertIn('group_norm { name = "group_norm", groups = 4, eps = 1e-05 }', r.stdout)
        with cpu_context() as ctx, fusegen.Layer(r.stdout, context=ctx) as layer:
            self.assertEqual([n for n, _ in layer.params], ["conv.weight", "conv.bias", "group_norm.weight", "group_norm.bias"])

    def test_python_module(self):
        self.check_default(self.run_export(self.path))

    def test_class_shape_eval_output(self):
        out = os.path.join(self.tmp.name, "other.lua")
        r = self.run_export(f"{self.path}:Other", "--input-shape", "1,2,6,8,8", "--eval", "-o", out, "--name", "other3d")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            text = f.read()
        self.assertIn('return layer "other3d" {', text)
        self.assertIn('input = { "N", 2, 6, 8, 8 }', text)
        self.assertIn("dropout { p = 0.5 }", text)  # the identity in eval mode
        r = self.run_export(f"{self.path}:Other", "--input-shape", "1,2,6,8,8", "-o", out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("training mode", r.stderr)

    def test_usage(self):
        r = self.run_export("--help")
        self.assertEqual(r.returncode, 0)
        self.assertTrue(r.stdout.startswith("usage: fusegen export MODULE.py[:CLASS]"))
        r = self.run_export()
        self.assertEqual(r.returncode, 2)
        r = self.run_export(self.path, "--input-shape", "1,2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--input-shape expects", r.stderr)
        r = self.run_export(f"{self.path}:Nope")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no nn.Module class 'Nope' (its classes: Model, Other)", r.stderr)

    def test_cli(self):
        lib = os.environ.get("FUSEGEN_LIBRARY")
        cli = os.path.join(os.path.dirname(lib), "fusegen") if lib else None
        if not cli or not os.access(cli, os.X_OK):
            self.skipTest("the fusegen CLI is not next to $FUSEGEN_LIBRARY")
        # the CLI hands over to `python -m fusegen export`: name this Python (it has torch)
        self.env["FUSEGEN_PYTHON"] = sys.executable
        try:
            self.check_default(self.run_export(self.path, cli=cli))
        finally:
            del self.env["FUSEGEN_PYTHON"]


if __name__ == "__main__":
    unittest.main(verbosity=2)
