#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Real model blocks in PyTorch: the baselines fusegen's block work (issue 14) is measured against.

    python3 bench/blocks.py --out OUTDIR [--families resnet,sd,nnunet,convnext] [--dtypes fp32,bf16,fp16]
                            [--layouts nchw,cl] [--compile both|none] [--iters N] [--deadline-s S]
                           [--configs 0,1]
    python3 bench/blocks.py --smoke       # tiny shapes on the CPU: the harness itself, no GPU

Four block families at shapes from their public configurations (several per family, small
batches included), each in fp32, bf16 and fp16, NCHW and channels_last, eager and
torch.compile (default flags; fp32 also with TF32 off, the accuracy-matched peer of fusegen's
exact fp32):
  resnet    ResNet-50 bottleneck: 1x1 -> BN -> ReLU -> 3x3 -> BN -> ReLU -> 1x1 -> BN -> + x -> ReLU
            (BatchNorm in eval mode)
  sd        Stable Diffusion's UNet ResnetBlock2D: GroupNorm(32) -> SiLU -> 3x3 (+ the time
            embedding's Linear(silu(t))) -> GroupNorm(32) -> SiLU -> 3x3 -> + x
  nnunet    an nnU-Net encoder stage: 2 x (Conv3d 3x3x3 -> InstanceNorm3d(affine) -> LeakyReLU(0.01))
  convnext  a ConvNeXt block: depthwise 7x7 -> LayerNorm over channels -> Linear(C, 4C) -> GELU ->
            Linear(4C, C) -> layer scale -> + x
Speed: median of CUDA-event timings with the L2 flushed before each (bench/compare_torch.py's
method). One Python call between two events times the CPU where its Python and launches take
longer than the GPU work (batches 1-8, and at batch 32 too: ResNet's bottleneck in bf16 timed
0.151 and 0.310 ms in two runs of torch.compile without a graph, 0.132 in one; RESULTS.md
2026-12-04): for configurations of at most --graph-batch samples (default: all) each mode is
also timed captured in a CUDA graph and replayed (compare_torch.time_graph; the key gets
" graph"), the peer of torch.compile's reduce-overhead mode, for PyTorch and fusegen alike;
the tables report the faster of the two;
a mode that cannot be captured records its error under that key. Accuracy: max abs and relative L2 error against the same block in float64 (the bar
issue 14 sets for fusegen's half precision is "at least as good as PyTorch's in that dtype",
these numbers). This is the table fusegen's block work is to beat (issue 14: >= 1.3x the
fastest PyTorch configuration in bf16/fp16, >= 2x torch.compile fp32 with TF32 off).

fusegen (with --fusegen, the default when the Python package is importable): the block as
fusegen can run it today, one conv and the ops after it per spec (`fusegen.export` of each
part, a FusedLayer per part, fp32 weights, the run's dtype and layout), and the rest in
PyTorch eager in that dtype: what is left in PyTorch is what block specs and prologue fusion
are to absorb (fusegen_parts says which ops, per family).

fusegen block (every dtype and layout: the spec's block fields dtype and layout): the whole block as one fusegen
block spec (fusegen.torch.FusedBlock) -- specs/blocks/'s spec of the family when its input
has the configuration's channels and size (resnet 256 56x56, sd 320 64x64, nnunet 32->64
64^3, convnext 96 56x56: its Linear weights and gamma reshaped to the spec's 1x1 convs and
[C, 1, 1]), and with --smoke a small spec of the smoke shape written by
block_spec_text. SD's time embedding projection, Linear(silu(temb)), stays in PyTorch: the
block takes its result.

fusegen block tf32 (bf16 and fp16 only): the same block spec with `precision = "tf32"` on every
layer (with_precision). A half layer's default precision ("fp32") carries each weight as two
parts in the dtype, x.w_lo + x.w_hi, and so holds the fp32 bar; "tf32" on Hopper's wgmma
engine rounds each weight once to the dtype and computes one product per term -- what
PyTorch's bf16/fp16 conv does (docs/spec.md, "dtype"). Elsewhere (sm_80: no wgmma) a half
conv never goes to cuDNN, so the tf32 mode runs the exact conv and times like the default.
Issue 14's bar for half precision is "at least as good as PyTorch's bf16 (fp16) result on the
same inputs", so the tf32 mode is a fair peer of PyTorch's half runs when its rel L2 error
against float64 is no worse than that of the PyTorch configuration it is timed against (the
fastest in that dtype); the summary table's "fusegen block bf16/fp16" columns give, per
precision, the fastest layout's time and rel L2 next to that PyTorch error, and mark such a
tf32 run "peer". With --smoke the blocks run on the CPU reference (float64, output rounded to
the dtype), where both precisions give the same numbers: the smoke run checks the harness,
not the precisions.
"""

import argparse
import copy
import datetime
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


# ---- the blocks -------------------------------------------------------------------------------


def make_block(family, cfg, nn, F, torch):
    """The block's module for one configuration: fresh parameters, eval mode."""
    if family == "resnet":
        c, mid = cfg["channels"], cfg["channels"] // 4

        class Bottleneck(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1, self.bn1 = nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid)
                self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid)
                self.conv3, self.bn3 = nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c)

            def forward(self, x):
                y = F.relu(self.bn1(self.conv1(x)))
                y = F.relu(self.bn2(self.conv2(y)))
                return F.relu(self.bn3(self.conv3(y)) + x)

        return Bottleneck()
    if family == "sd":
        c = cfg["channels"]

        class ResnetBlock2D(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm1, self.conv1 = nn.GroupNorm(32, c, eps=1e-5), nn.Conv2d(c, c, 3, padding=1)
                self.time_emb_proj = nn.Linear(1280, c)
                self.norm2, self.conv2 = nn.GroupNorm(32, c, eps=1e-5), nn.Conv2d(c, c, 3, padding=1)

            def forward(self, x, temb):
                h = self.conv1(F.silu(self.norm1(x)))
                h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
                h = self.conv2(F.silu(self.norm2(h)))
                return x + h

        return ResnetBlock2D()
    if family == "nnunet":
        cin, cout = cfg["in_channels"], cfg["channels"]

        class Stage(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1, self.norm1 = nn.Conv3d(cin, cout, 3, padding=1), nn.InstanceNorm3d(cout, affine=True)
                self.conv2, self.norm2 = nn.Conv3d(cout, cout, 3, padding=1), nn.InstanceNorm3d(cout, affine=True)

            def forward(self, x):
                x = F.leaky_relu(self.norm1(self.conv1(x)), 0.01)
                return F.leaky_relu(self.norm2(self.conv2(x)), 0.01)

        return Stage()
    if family == "convnext":
        c = cfg["channels"]

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.dwconv = nn.Conv2d(c, c, 7, padding=3, groups=c)
                self.norm = nn.LayerNorm(c, eps=1e-6)
                self.pwconv1, self.pwconv2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
                self.gamma = nn.Parameter(torch.full((c,), 1e-6))

            def forward(self, x):
                y = self.dwconv(x).permute(0, 2, 3, 1)
                y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
                return x + (self.gamma * y).permute(0, 3, 1, 2)

        return Block()
    raise ValueError(family)


def fusegen_parts(family, block, nn, F):
    """The block as fusegen layers (nn.Sequential parts: a conv and the ops after it, which
    fusegen.export turns into specs) and PyTorch glue: returns (parts, forward) where
    forward(layers, block, *xs) runs the block with layers[i] standing for parts[i] and the
    block's own modules (in the run's dtype) for the glue."""
    if family == "resnet":  # the residual add and its ReLU stay in PyTorch: a spec has one input
        parts = [nn.Sequential(block.conv1, block.bn1, nn.ReLU()), nn.Sequential(block.conv2, block.bn2, nn.ReLU()),
                 nn.Sequential(block.conv3, block.bn3)]

        def forward(L, b, x):
            return F.relu(L[2](L[1](L[0](x))) + x)

        return parts, forward
    if family == "nnunet":  # the whole stage: two fusegen layers
        parts = [nn.Sequential(block.conv1, block.norm1, nn.LeakyReLU(0.01)),
                 nn.Sequential(block.conv2, block.norm2, nn.LeakyReLU(0.01))]

        def forward(L, b, x):
            return L[1](L[0](x))

        return parts, forward
    if family == "sd":  # norm + SiLU before each conv (prologue), the time embedding, the residual
        parts = [nn.Sequential(block.conv1), nn.Sequential(block.conv2)]

        def forward(L, b, x, temb):
            h = L[0](F.silu(b.norm1(x)))
            h = h + b.time_emb_proj(F.silu(temb))[:, :, None, None]
            return x + L[1](F.silu(b.norm2(h)))

        return parts, forward
    if family == "convnext":  # the Linears as 1x1 convs; LayerNorm (between convs), scale, residual
        c = block.dwconv.in_channels
        pw1, pw2 = nn.Conv2d(c, 4 * c, 1), nn.Conv2d(4 * c, c, 1)
        with __import__("torch").no_grad():
            pw1.weight.copy_(block.pwconv1.weight[:, :, None, None])
            pw1.bias.copy_(block.pwconv1.bias)
            pw2.weight.copy_(block.pwconv2.weight[:, :, None, None])
            pw2.bias.copy_(block.pwconv2.bias)
        parts = [nn.Sequential(block.dwconv), nn.Sequential(pw1, nn.GELU()), nn.Sequential(pw2)]

        def forward(L, b, x):
            y = L[0](x)
            y = b.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return x + b.gamma[:, None, None] * L[2](L[1](y))

        return parts, forward
    raise ValueError(family)


def fusegen_block(family, base, module, xs, nn, F, torch):
    """A callable running the block through fusegen layers (fusegen_parts) on xs's device,
    dtype and memory format; base: the block in fp32 (the layers' weights), module: the same
    block in the run's dtype and layout (the glue)."""
    import fusegen
    import fusegen.torch as fgt

    parts, forward = fusegen_parts(family, copy.deepcopy(base), nn, F)
    glue_parts, _ = fusegen_parts(family, module, nn, F)
    x, dev, dt = xs[0], xs[0].device, xs[0].dtype
    layers = []
    example = x
    with torch.no_grad():
        for i, (part, glue) in enumerate(zip(parts, glue_parts)):
            glue = glue.to(device=dev, dtype=dt)  # convnext's 1x1 convs are new modules
            spec = fusegen.export(copy.deepcopy(part).to(device=dev, dtype=dt), example, name=f"{family}_part{i}")
            layer = fgt.FusedLayer(spec)
            layer.load_state_dict(part.state_dict())
            layers.append(layer.to(dev))
            # the next part's example input: this part's output, and the glue between them, in
            # the run's dtype (traced once, here)
            example = glue(example)
            if family == "convnext" and i == 0:
                example = module.norm(example.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            elif family == "sd" and i == 0:
                example = F.silu(module.norm2(example))
    return lambda *a: forward(layers, module, *a)


# ---- fusegen block specs ----------------------------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK_SPECS = {  # family -> the block spec of specs/blocks (one shape each; dtype and layout written per run)
    "resnet": "specs/blocks/resnet50_bottleneck.lua",
    "sd": "specs/blocks/sd_resnet_block.lua",
    "nnunet": "specs/blocks/nnunet_stage.lua",
    "convnext": "specs/blocks/convnext.lua",
}


def block_spec_text(family, cfg):
    """A block spec for one configuration, written here (--smoke runs its small shapes
    through it): the same wiring and state_dict names as specs/blocks/'s spec of the family."""
    size = ", ".join(str(s) for s in cfg["size"])
    c = cfg["channels"]
    if family == "resnet":
        return f"""return block "bottleneck" {{
  input = {{ "N", {c}, {size} }},
  layer "a" {{ conv2d {{ name = "conv1", out_channels = {c // 4}, kernel = 1, bias = false }},
             batch_norm {{ name = "bn1", stats = "running" }}, relu {{}} }},
  layer "b" {{ conv2d {{ name = "conv2", out_channels = {c // 4}, kernel = 3, padding = 1, bias = false }},
             batch_norm {{ name = "bn2", stats = "running" }}, relu {{}} }},
  layer "c" {{ conv2d {{ name = "conv3", out_channels = {c}, kernel = 1, bias = false }},
             batch_norm {{ name = "bn3", stats = "running" }}, add {{ tensor = "input" }}, relu {{}} }},
}}
"""
    if family == "sd":
        return f"""return block "sd_resnet_block" {{
  input = {{ "N", {c}, {size} }},
  inputs = {{ temb = {{ "N", {c} }} }},
  layer "h" {{ group_norm {{ name = "norm1", groups = 32, eps = 1e-5 }}, silu {{}},
             conv2d {{ name = "conv1", out_channels = {c}, kernel = 3, padding = 1 }}, add {{ tensor = "temb" }} }},
  layer "out" {{ group_norm {{ name = "norm2", groups = 32, eps = 1e-5 }}, silu {{}},
             conv2d {{ name = "conv2", out_channels = {c}, kernel = 3, padding = 1 }}, add {{ tensor = "input" }} }},
}}
"""
    if family == "nnunet":
        return f"""return block "nnunet_stage" {{
  input = {{ "N", {cfg["in_channels"]}, {size} }},
  layer "a" {{ conv3d {{ name = "conv1", out_channels = {c}, kernel = 3, padding = 1 }},
             instance_norm {{ name = "norm1", affine = true }}, leaky_relu {{ negative_slope = 0.01 }} }},
  layer "b" {{ conv3d {{ name = "conv2", out_channels = {c}, kernel = 3, padding = 1 }},
             instance_norm {{ name = "norm2", affine = true }}, leaky_relu {{ negative_slope = 0.01 }} }},
}}
"""
    if family == "convnext":
        return f"""return block "convnext" {{
  input = {{ "N", {c}, {size} }},
  layer "a" {{ conv2d {{ name = "dwconv", out_channels = {c}, kernel = 7, padding = 3, groups = {c} }},
             layer_norm {{ name = "norm", dim = 1, eps = 1e-6 }} }},
  layer "b" {{ conv2d {{ name = "pwconv1", out_channels = {4 * c}, kernel = 1 }}, gelu {{}} }},
  layer "c" {{ conv2d {{ name = "pwconv2", out_channels = {c}, kernel = 1 }},
             mul {{ param = "gamma", shape = {{ {c}, 1, 1 }} }}, add {{ tensor = "input" }} }},
}}
"""
    return None


def with_block_fields(text, dname, layout):
    """The block spec `text` with the block fields for a run's dtype and layout ("nchw"/"cl")
    written after its `input` line (none for fp32 NCHW: the spec as it is)."""
    fields = ([f'dtype = "{dname}"'] if dname != "fp32" else []) + (['layout = "channels_last"'] if layout == "cl" else [])
    if not fields:
        return text
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("input ="))
    lines.insert(at + 1, "  " + ", ".join(fields) + ",")
    return "\n".join(lines)


def with_precision(spec, precision):
    """The block spec (text, name) with `precision = "..."` on every layer (none is written in
    the specs this script runs: a layer's default is "fp32")."""
    text, name = spec
    text, n = re.subn(r'(\blayer\s+"[^"]+"\s*\{)', rf'\1 precision = "{precision}",', text)
    if n == 0:
        raise ValueError(f"{name}: no layer to set the precision of")
    return text, f"{name} {precision}"


def block_spec_for(family, cfg, smoke, dname="fp32", layout="nchw"):
    """(spec text, name) of the block spec to run for a configuration in a dtype ("fp32",
    "bf16", "fp16") and layout ("nchw", "cl"), or None: specs/blocks/'s spec of the family
    when its input has the configuration's channels and size (any batch), else (and with
    --smoke) the spec block_spec_text writes for the configuration's shapes (the same wiring
    and names: every configuration runs as a block, not only the shape the repo's spec was
    written for); either with the block fields dtype and layout written in
    (with_block_fields)."""
    suffix = "" if (dname, layout) == ("fp32", "nchw") else f" ({dname} {layout})"
    text = block_spec_text(family, cfg)
    name = f"smoke_{family}.lua" if smoke else f"{family} (written for {describe(family, cfg)})"
    written = (with_block_fields(text, dname, layout), name + suffix) if text is not None else None
    rel = BLOCK_SPECS.get(family)
    if smoke or rel is None:
        return written
    import fusegen

    path = os.path.join(REPO, rel)
    with fusegen.Block(path, context=fusegen.Context(device=-1)) as probe:  # loads, compiles nothing
        shape = probe.input_shape(1)
    cin = cfg.get("in_channels", cfg["channels"])
    if shape[1:] != (cin,) + tuple(cfg["size"]):
        return written
    with open(path, encoding="utf-8") as f:
        return with_block_fields(f.read(), dname, layout), rel + suffix


def fusegen_block_spec(family, spec, base, nn, F, torch, device, dtype=None):
    """A callable running the block as one fusegen block spec (fusegen.torch.FusedBlock, in the
    spec's dtype and layout: the run's tensors as they are; fp32 parameters) with base's
    parameters; for sd the time embedding's projection stays in PyTorch (in the run's dtype,
    which the block's temb input has): the block takes time_emb_proj(silu(temb)) as its
    input "temb"."""
    import fusegen.torch as fgt

    text, name = spec
    fused = fgt.FusedBlock(text, name=name)
    state = base.state_dict()
    if family == "convnext":  # the spec's 1x1 convs and [C, 1, 1] gamma hold the Linears' numbers
        state = dict(state)
        for k in ("pwconv1.weight", "pwconv2.weight"):
            state[k] = state[k][:, :, None, None]
        state["gamma"] = state["gamma"][:, None, None]
    keys = fused.load_state_dict(state, strict=False)
    extra = [k for k in keys.unexpected_keys if not (family == "sd" and k.startswith("time_emb_proj."))]
    if keys.missing_keys or extra:
        raise RuntimeError(f"the block spec {name} does not match the module: missing {keys.missing_keys}, unexpected {extra}")
    fused = fused.to(device)
    if family == "sd":
        proj = copy.deepcopy(base.time_emb_proj).to(device=device, dtype=dtype or torch.float32)
        return lambda x, temb: fused(x, proj(F.silu(temb)))
    return fused


def randomize(module, torch, seed):
    """Every parameter and buffer away from its init (norm affines ~ N(1, 0.1) and N(0, 0.1),
    running statistics, layer scale ~ 0.1-sized): blocks whose norms and scales are the
    identity would hide errors."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("weight") and p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias") and p.dim() == 1 and "conv" not in name and "proj" not in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name == "gamma":
                p.copy_(0.1 * torch.rand(p.shape, generator=g))
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))


# Shapes from the public configurations: torchvision's ResNet-50 stages, Stable Diffusion 1.x/2.x's
# UNet (320/640/1280 channels on 64/32/16 latents), nnU-Net's 3D full-resolution encoder
# (32 -> 64 -> 128 ... on 128^3 patches, batch 2), ConvNeXt-T's stages (96/192/384/768).
CONFIGS = {
    "resnet": [
        {"channels": 256, "size": (56, 56), "batch": 32},
        {"channels": 256, "size": (56, 56), "batch": 1},
        {"channels": 512, "size": (28, 28), "batch": 32},
        {"channels": 1024, "size": (14, 14), "batch": 32},
        {"channels": 2048, "size": (7, 7), "batch": 32},
    ],
    "sd": [
        {"channels": 320, "size": (64, 64), "batch": 2},
        {"channels": 320, "size": (64, 64), "batch": 1},
        {"channels": 640, "size": (32, 32), "batch": 2},
        {"channels": 1280, "size": (16, 16), "batch": 2},
    ],
    "nnunet": [
        {"in_channels": 32, "channels": 64, "size": (64, 64, 64), "batch": 2},
        {"in_channels": 64, "channels": 128, "size": (32, 32, 32), "batch": 2},
        {"in_channels": 1, "channels": 32, "size": (128, 128, 128), "batch": 2},
        {"in_channels": 128, "channels": 256, "size": (16, 16, 16), "batch": 1},
    ],
    "convnext": [
        {"channels": 96, "size": (56, 56), "batch": 32},
        {"channels": 96, "size": (56, 56), "batch": 1},
        {"channels": 192, "size": (28, 28), "batch": 32},
        {"channels": 384, "size": (14, 14), "batch": 32},
        {"channels": 768, "size": (7, 7), "batch": 32},
    ],
}
SMOKE = {"resnet": [{"channels": 64, "size": (8, 8), "batch": 2}],
         "sd": [{"channels": 64, "size": (8, 8), "batch": 2}],
         "nnunet": [{"in_channels": 2, "channels": 8, "size": (6, 6, 6), "batch": 2}],
         "convnext": [{"channels": 16, "size": (8, 8), "batch": 2}]}


def describe(family, cfg):
    size = "x".join(str(s) for s in cfg["size"])
    chans = f"{cfg['in_channels']}->{cfg['channels']}" if "in_channels" in cfg else str(cfg["channels"])
    return f"{family} {chans} {size} N{cfg['batch']}"


def inputs(family, cfg, torch, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    cin = cfg.get("in_channels", cfg["channels"])
    x = torch.randn((cfg["batch"], cin) + tuple(cfg["size"]), generator=g).to(device)
    if family == "sd":
        return (x, torch.randn((cfg["batch"], 1280), generator=g).to(device))
    return (x,)


def block_flops(module, args):
    """Multiply-adds x 2 of every conv and Linear in the block (a forward hook count)."""
    total = [0]

    def hook(mod, inp, out):
        if hasattr(mod, "kernel_size"):  # Conv
            k = 1
            for s in mod.kernel_size:
                k *= s
            total[0] += 2 * out.numel() * (mod.in_channels // mod.groups) * k
        else:  # Linear
            total[0] += 2 * out.numel() * mod.in_features

    import torch.nn as nn

    hs = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d, nn.Linear))]
    module(*args)
    for h in hs:
        h.remove()
    return total[0]


# ---- measuring --------------------------------------------------------------------------------

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def run(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    device = "cpu" if args.smoke else "cuda"
    configs = SMOKE if args.smoke else CONFIGS
    if not args.smoke:
        from compare_torch import Precision, accuracy, summarize, time_cuda, time_graph

        prec = Precision(torch)
        flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    else:
        from compare_torch import accuracy, summarize

        prec, flush = None, None
    rows, results, t_start = [], [], time.time()
    block_specs = {}  # (family, config index, dtype, layout) -> the block spec "fusegen block" runs
    if args.fusegen:
        for family in args.families:
            for ci, cfg in enumerate(configs[family]):
                for dname in args.dtypes:
                    for layout in args.layouts:
                        try:
                            block_specs[(family, ci, dname, layout)] = block_spec_for(family, cfg, args.smoke, dname, layout)
                        except Exception as e:  # a spec that does not load: the other modes still run
                            print(f"blocks: no fusegen block for {describe(family, cfg)} {dname} {layout} "
                                  f"({type(e).__name__}: {e})")
    for family in args.families:
        for ci, cfg in enumerate(configs[family]):
            if args.configs is not None and ci not in args.configs:
                continue
            if args.deadline_s and time.time() - t_start > args.deadline_s:
                print(f"blocks: deadline of {args.deadline_s} s reached; {describe(family, cfg)} and later not run")
                break
            torch.manual_seed(ci)
            base = make_block(family, cfg, nn, F, torch).eval()
            randomize(base, torch, 100 + ci)
            x64 = [t.double() for t in inputs(family, cfg, torch, "cpu", 200 + ci)]
            with torch.no_grad():
                ref = copy.deepcopy(base).double().to(device)(*[t.to(device) for t in x64])
                flops = block_flops(copy.deepcopy(base).double(), x64)
            entry = {"block": describe(family, cfg), "gflop": flops / 1e9, "impls": {}}
            results.append(entry)
            for dname in args.dtypes:
                dtype = getattr(torch, DTYPES[dname])
                for layout in args.layouts:
                    fmt = torch.channels_last_3d if family == "nnunet" else torch.channels_last
                    mf = fmt if layout == "cl" else torch.contiguous_format
                    module = copy.deepcopy(base).to(device=device, dtype=dtype).to(memory_format=mf)
                    xs = [t.to(device=device, dtype=dtype) for t in x64]
                    xs[0] = xs[0].contiguous(memory_format=mf)
                    modes = [("eager", False, "default")]
                    if dname == "fp32":
                        modes.append(("eager tf32 off", False, "fp32"))
                    if args.compile != "none":
                        modes.append(("compile", True, "default"))
                        if dname == "fp32":
                            modes.append(("compile tf32 off", True, "fp32"))
                    if args.fusegen:
                        modes.append(("fusegen", False, "default"))
                        # the block spec in the run's dtype and layout (block fields)
                        if block_specs.get((family, ci, dname, layout)):
                            modes.append(("fusegen block", False, "default"))
                            # a half block with one product per term on the dtype's weights:
                            # PyTorch's own bf16/fp16 conv, the peer it is measured against
                            if dname != "fp32":
                                modes.append(("fusegen block tf32", False, "default"))
                    for mode, compiled, flags in modes:
                        key = f"{dname} {layout} {mode}"
                        try:
                            if prec:
                                prec.set(flags)
                            torch._dynamo.reset()
                            if mode.startswith("fusegen block"):
                                spec = block_specs[(family, ci, dname, layout)]
                                if mode.endswith(" tf32"):
                                    spec = with_precision(spec, "tf32")
                                fn_mod = fusegen_block_spec(family, spec, base, nn, F, torch, device, dtype)
                            elif mode == "fusegen":
                                fn_mod = fusegen_block(family, base, module, xs, nn, F, torch)
                            else:
                                fn_mod = torch.compile(module) if compiled else module
                            with torch.no_grad():
                                out = fn_mod(*xs)
                                r = accuracy(torch, out.float().to(ref.dtype), ref) if out.dtype != ref.dtype else accuracy(torch, out, ref)
                                if not args.smoke:
                                    r.update(summarize(time_cuda(torch, lambda: fn_mod(*xs), args.iters, 3, flush)))
                            r.pop("times_ms", None)
                        except Exception as e:  # one mode failing must not lose the others
                            r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
                        finally:
                            if prec:
                                prec.set("default")
                        entry["impls"][key] = r
                        if not args.smoke and "median_ms" in r and cfg["batch"] <= args.graph_batch:
                            # the same call captured in a CUDA graph: the GPU's time alone
                            g = {k: v for k, v in r.items() if k not in ("median_ms", "p10_ms", "p90_ms")}
                            try:
                                if prec:
                                    prec.set(flags)
                                with torch.no_grad():
                                    g.update(summarize(time_graph(torch, lambda: fn_mod(*xs), args.iters, 3, flush)))
                                g.pop("times_ms", None)
                            except Exception as e:
                                g = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
                            finally:
                                if prec:
                                    prec.set("default")
                            entry["impls"][key + " graph"] = g
                        for k in (key, key + " graph"):
                            if k not in entry["impls"]:
                                continue
                            rk = entry["impls"][k]
                            t = f"{rk['median_ms']:.3f} ms" if "median_ms" in rk else rk.get("error", "")
                            err = (f"max err {rk['max_abs_err']:.2g}, rel L2 {rk['rel_l2_err']:.2g}"
                                   if "max_abs_err" in rk else "")
                            print(f"{entry['block']:<28} {k:<36} {t:>12}  {err}", flush=True)
    return results


def best(impls, keep):
    """(key, result) of the fastest timed run whose key passes keep, or None."""
    timed = {k: v for k, v in impls.items() if keep(k) and "median_ms" in v}
    if not timed:
        return None
    k = min(timed, key=lambda k: timed[k]["median_ms"])
    return k, timed[k]


def half_block_cell(impls, d):
    """The fusegen block in half dtype d, per precision: the fastest layout's time (or, with
    --smoke, the first result's) and rel L2 against float64, then the fastest PyTorch
    configuration's rel L2 in d; "peer" marks a tf32 run whose error is no worse than it."""
    pytorch = best(impls, lambda k: k.startswith(d + " ") and "tf32 off" not in k and "fusegen" not in k)
    if pytorch is None:  # --smoke: no times; PyTorch's first eager run
        pytorch = next(((k, v) for k, v in impls.items() if k.startswith(d + " ") and k.endswith(" eager")
                        and "rel_l2_err" in v), None)
    bar = pytorch[1].get("rel_l2_err") if pytorch else None
    parts = []
    for precision, suffix in (("fp32", " fusegen block"), ("tf32", " fusegen block tf32")):
        # (its CUDA graph too: PyTorch's best above counts torch.compile's graphs)
        mine = {k: v for k, v in impls.items() if k.startswith(d + " ") and (k.endswith(suffix) or k.endswith(suffix + " graph"))}
        run = best(mine, lambda k: True) or next(((k, v) for k, v in mine.items() if "rel_l2_err" in v), None)
        if run is None:
            errs = [v["error"] for v in mine.values() if "error" in v]
            if errs:
                parts.append(f"{precision} error: " + errs[0][:50].replace("|", "/"))
            continue
        k, v = run
        t = f"{v['median_ms']:.3f} " if "median_ms" in v else ""
        peer = ", peer" if precision == "tf32" and bar is not None and v["rel_l2_err"] <= bar else ""
        parts.append(f"{precision} {t}({k.split()[1]}, {v['rel_l2_err']:.1e}{peer})")
    if not parts:
        return "—"
    return " · ".join(parts) + (f" vs {bar:.1e}" if bar is not None else "")


def table(results, dtypes):
    """One row per block: per dtype the fastest PyTorch configuration (eager or compile, NCHW
    or channels_last; fp32's TF32-off runs apart), fusegen's layers in their faster layout and
    the ratio (above 1: fusegen faster), the range of PyTorch's errors against float64, and
    for each half dtype the fusegen block per precision next to them (half_block_cell)."""
    cols = ["block", "GFLOP"]
    for d in dtypes:
        cols += [f"fastest {d} PyTorch (config)", f"fusegen {d} (layout, rel L2)", "vs PyTorch"]
    cols += ["fusegen block fp32 nchw (rel L2)", "compile fp32 tf32 off"]
    for d in dtypes:
        cols.append(f"{d} PyTorch rel L2")
        if d != "fp32":
            cols.append(f"fusegen block {d}: fastest per precision (layout, rel L2) vs fastest {d} PyTorch's rel L2")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for e in results:
        cells = []
        for d in dtypes:
            torch_best = best(e["impls"], lambda k: k.startswith(d + " ") and "tf32 off" not in k and "fusegen" not in k)
            fg = best(e["impls"], lambda k: k.startswith(d + " ") and (k.endswith(" fusegen") or k.endswith(" fusegen graph")))
            cells.append(f"{torch_best[1]['median_ms']:.3f} ({torch_best[0][len(d) + 1:]})" if torch_best else "—")
            if fg:
                layout = fg[0].split()[1]
                cells.append(f"{fg[1]['median_ms']:.3f} ({layout}, {fg[1]['rel_l2_err']:.1e})")
            else:
                errs = [v["error"] for k, v in e["impls"].items() if k.startswith(d + " ") and k.endswith(" fusegen") and "error" in v]
                cells.append(("error: " + errs[0][:60].replace("|", "/")) if errs else "—")
            cells.append(f"{torch_best[1]['median_ms'] / fg[1]['median_ms']:.2f}×" if torch_best and fg else "—")
        blk = e["impls"].get("fp32 nchw fusegen block")
        if blk and "median_ms" in blk:
            fp32_best = best(e["impls"], lambda k: k.startswith("fp32 ") and "fusegen" not in k)
            ratio = f", {fp32_best[1]['median_ms'] / blk['median_ms']:.2f}× fastest fp32 PyTorch" if fp32_best else ""
            cells.append(f"{blk['median_ms']:.3f} ({blk['rel_l2_err']:.1e}{ratio})")
        elif blk and "error" in blk:
            cells.append("error: " + blk["error"][:60].replace("|", "/"))
        elif blk:  # --smoke: accuracy only
            cells.append(f"rel L2 {blk['rel_l2_err']:.1e}" if "rel_l2_err" in blk else "—")
        else:
            cells.append("—")
        off = [v["median_ms"] for k, v in e["impls"].items() if k.endswith("compile tf32 off") and "median_ms" in v]
        cells.append(f"{min(off):.3f}" if off else "—")
        for d in dtypes:
            errs = [v["rel_l2_err"] for k, v in e["impls"].items() if k.startswith(d + " ") and "rel_l2_err" in v
                    and "tf32 off" not in k and "fusegen" not in k]
            cells.append(f"{min(errs):.1e}-{max(errs):.1e}" if errs else "—")
            if d != "fp32":
                cells.append(half_block_cell(e["impls"], d))
        lines.append(f"| {e['block']} | {e['gflop']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/fusegen-blocks")
    ap.add_argument("--families", default="resnet,sd,nnunet,convnext")
    ap.add_argument("--dtypes", default="fp32,bf16,fp16")
    ap.add_argument("--layouts", default="nchw,cl")
    ap.add_argument("--compile", choices=("both", "none"), default="both")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--graph-batch", type=int, default=1 << 30,
                    help="also time each mode in a CUDA graph for configurations of at most this batch (default: every one; 0: never)")
    ap.add_argument("--deadline-s", type=float, default=0, help="start no block after this many seconds")
    ap.add_argument("--configs", default=None,
                    help="only these configurations of each family, by index (e.g. 0,1; default: all)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, eager only: the harness itself")
    ap.add_argument("--fusegen", choices=("auto", "yes", "no"), default="auto",
                    help="also run the block as fusegen layers (auto: when the Python package imports)")
    ap.add_argument("--build", default=None, help="build folder holding libfusegen.so (default: $FUSEGEN_LIBRARY, else build)")
    args = ap.parse_args()
    args.families = [f for f in args.families.split(",") if f]
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    args.layouts = [l for l in args.layouts.split(",") if l]
    try:
        args.configs = None if args.configs is None else {int(c) for c in args.configs.split(",") if c}
    except ValueError:
        ap.error(f"--configs: '{args.configs}' is not a list of indexes")
    for f in args.families:
        if f not in CONFIGS:
            ap.error(f"unknown family '{f}' (resnet, sd, nnunet, convnext)")
    for d in args.dtypes:
        if d not in DTYPES:
            ap.error(f"unknown dtype '{d}' (fp32, bf16, fp16)")
    if args.smoke:
        args.compile = "none"
    if args.fusegen != "no":
        from compare_torch import setup_fusegen_path

        setup_fusegen_path(args.build)
        try:
            import fusegen.torch  # noqa: F401
        except Exception as e:  # the package or its library missing: PyTorch's table alone
            if args.fusegen == "yes":
                raise
            print(f"blocks: fusegen not run ({type(e).__name__}: {e})")
            args.fusegen = "no"
    args.fusegen = args.fusegen != "no"
    results = run(args)
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md = table(results, args.dtypes)
    with open(os.path.join(args.out, "BLOCKS.md"), "w") as f:
        f.write(f"# Model blocks in PyTorch, {stamp}{' (smoke test, CPU)' if args.smoke else ''}\n\n{md}\n")
    with open(os.path.join(args.out, "blocks.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print(md)
    # an error anywhere, or fusegen's fp32 layers outside allclose(1e-4) against float64
    bad = [e["block"] for e in results if any("error" in v or (k.startswith("fp32 ") and k.endswith((" fusegen", " fusegen block"))
                                                              and not v.get("passes")) for k, v in e["impls"].items())]
    print(f"blocks: {len(results)} blocks, {sum(len(e['impls']) for e in results)} runs; errors in {len(bad)}: {' '.join(bad)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
