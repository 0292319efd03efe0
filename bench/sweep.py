#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shape sweep: fusegen's conv engines on conv configurations no spec of specs/ has.

    python3 bench/sweep.py --build build --out OUTDIR [--only NAME,...] [--compile both|default|none]
    python3 bench/sweep.py --write-specs DIR        # the specs only (no torch, no GPU)

Each entry is a conv (2D or 3D; channels 3-320, kernels 1-7, strides 1-2, padding,
dilation, groups and depthwise, batch 1-128, small and large images) with a light epilogue
(a per-channel parameter added, then relu). For each entry, on the same inputs:
  fusegen fp32   the spec with precision "fp32" (fp32 accuracy: 3xTF32 tensor cores or FMAs)
  fusegen tf32   the same spec with precision "tf32" (one TF32 product)
  cudnn fp32     PyTorch eager, TF32 off (cuDNN's fp32 conv)
  cudnn tf32     PyTorch eager with its default flags (cuDNN convs on TF32)
  compile        torch.compile, default flags (TF32 convs)
  compile fp32   torch.compile with TF32 off
Speed: median of --iters CUDA-event timings with the L2 flushed before each (the method of
bench/compare_torch.py). Reported: ms, fp32-equivalent TFLOP/s (2 * N * C_out * output
pixels * C_in / groups * taps / time) and the fraction of the precision's roofline on the
H200 (fp32 mode: 3xTF32 on wgmma, 163 TFLOP/s; tf32 mode: 490 TFLOP/s; DESIGN.md). Accuracy
against float64: fusegen fp32 must pass allclose(1e-4) and be no less exact than cuDNN fp32.

Nothing in gen/, templates/ or runtime/ names an entry of this list.
"""

import argparse
import copy
import datetime
import json
import os
import sys
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))

ROOF = {"fp32": 163.0, "tf32": 490.0}  # TFLOP/s on the H200 (DESIGN.md's calibration)


def prod(xs):
    p = 1
    for v in xs:
        p *= v
    return p


class Entry:
    """One conv configuration: channels, spatial input, kernel, stride, padding, dilation,
    groups, batch (all per spatial dim where it applies)."""

    def __init__(self, name, cin, cout, spatial, kernel, stride=1, padding=0, dilation=1, groups=1, batch=32):
        sp = len(spatial)
        as_list = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * sp
        self.name, self.cin, self.cout, self.spatial = name, cin, cout, list(spatial)
        self.kernel, self.stride = as_list(kernel), as_list(stride)
        self.padding, self.dilation = as_list(padding), as_list(dilation)
        self.groups, self.batch = groups, batch

    @property
    def dims(self):
        return len(self.spatial)

    def out_spatial(self):
        return [
            (i + 2 * p - d * (k - 1) - 1) // s + 1
            for i, k, s, p, d in zip(self.spatial, self.kernel, self.stride, self.padding, self.dilation)
        ]

    def flops(self):
        return 2 * self.batch * self.cout * prod(self.out_spatial()) * (self.cin // self.groups) * prod(self.kernel)

    def spec(self, precision):
        lua = lambda v: "{ " + ", ".join(str(x) for x in v) + " }"
        return (
            f'return layer "sweep_{self.name}" {{\n'
            f'  input = {{ "N", {self.cin}, {", ".join(str(x) for x in self.spatial)} }},\n'
            f'  precision = "{precision}",\n'
            f"  conv{self.dims}d {{ out_channels = {self.cout}, kernel = {lua(self.kernel)}, stride = {lua(self.stride)},"
            f" padding = {lua(self.padding)}, dilation = {lua(self.dilation)}, groups = {self.groups} }},\n"
            f'  add {{ param = "shift" }},\n'
            f"  relu {{}},\n"
            f"}}\n"
        )

    def describe(self):
        k = "x".join(str(v) for v in self.kernel)
        s = "" if set(self.stride) == {1} else " s" + "x".join(str(v) for v in self.stride)
        p = "" if set(self.padding) == {0} else " p" + "x".join(str(v) for v in self.padding)
        d = "" if set(self.dilation) == {1} else " d" + "x".join(str(v) for v in self.dilation)
        g = "" if self.groups == 1 else (" dw" if self.groups == self.cin == self.cout else f" g{self.groups}")
        size = "x".join(str(v) for v in self.spatial)
        return f"{self.dims}D {self.cin}->{self.cout} k{k}{s}{p}{d}{g} {size} N{self.batch}"


E = Entry
ENTRIES = [
    # 2D: stems, ResNet/ConvNeXt/UNet-like bodies, pointwise, depthwise, grouped, big and tiny images
    E("stem3_16", 3, 16, (224, 224), 3, padding=1, batch=8),
    E("stem7x7_s2", 3, 64, (224, 224), 7, stride=2, padding=3, batch=32),
    E("c16_32_k3", 16, 32, (128, 128), 3, batch=64),
    E("c32_32_k3p1", 32, 32, (112, 112), 3, padding=1, batch=32),
    E("c64_64_k3p1", 64, 64, (56, 56), 3, padding=1, batch=32),
    E("c64_64_k1", 64, 64, (56, 56), 1, batch=32),
    E("c64_256_k1", 64, 256, (56, 56), 1, batch=32),
    E("c256_64_k1", 256, 64, (56, 56), 1, batch=32),
    E("c128_128_k3p1", 128, 128, (28, 28), 3, padding=1, batch=32),
    E("c128_256_k3s2", 128, 256, (28, 28), 3, stride=2, padding=1, batch=8),
    E("c256_256_k3p1", 256, 256, (14, 14), 3, padding=1, batch=32),
    E("c256_256_k3p1_b1", 256, 256, (14, 14), 3, padding=1, batch=1),
    E("c64_128_k3_128", 64, 128, (128, 128), 3, batch=64),
    E("c64_128_k3_256", 64, 128, (256, 256), 3, batch=64),
    E("c8_32_k3_256", 8, 32, (256, 256), 3, batch=128),
    E("c8_64_k3_128", 8, 64, (128, 128), 3, batch=128),
    E("c32_64_k5p2", 32, 64, (64, 64), 5, padding=2, batch=32),
    E("c16_16_k7p3", 16, 16, (64, 64), 7, padding=3, batch=32),
    E("dw96_k3", 96, 96, (56, 56), 3, padding=1, groups=96, batch=32),
    E("dw128_k7", 128, 128, (56, 56), 7, padding=3, groups=128, batch=32),
    E("g4_64_k3", 64, 64, (56, 56), 3, padding=1, groups=4, batch=32),
    E("g32_128_k3", 128, 128, (28, 28), 3, padding=1, groups=32, batch=32),
    E("c256_128_k3p1", 256, 128, (32, 32), 3, padding=1, batch=16),
    E("c32_16_k1_224", 32, 16, (224, 224), 1, batch=8),
    E("c64_64_k3d2", 64, 64, (56, 56), 3, padding=2, dilation=2, batch=16),
    E("c3_32_k3s2_512", 3, 32, (512, 512), 3, stride=2, padding=1, batch=4),
    E("c128_128_k3p1_b8", 128, 128, (64, 64), 3, padding=1, batch=8),
    E("c64_64_k3p1_b1", 64, 64, (56, 56), 3, padding=1, batch=1),
    E("c320_320_k3p1", 320, 320, (64, 64), 3, padding=1, batch=2),
    E("c256_256_k1", 256, 256, (28, 28), 1, batch=64),
    E("c256_256_k3p1_7", 256, 256, (7, 7), 3, padding=1, batch=32),
    # wide inputs (past the wgmma input pack's one-block tile: v18) and images past 991 pixels
    # a side (the producer's 10-bit coordinates): ConvNeXt's and ResNet's projections, SD's
    # 640-channel stage, a full-resolution VAE-decoder conv
    E("c384_96_k1", 384, 96, (56, 56), 1, batch=32),
    E("c1024_256_k1", 1024, 256, (14, 14), 1, batch=32),
    E("c640_640_k3p1", 640, 640, (32, 32), 3, padding=1, batch=2),
    E("c64_64_k3p1_1024", 64, 64, (1024, 1024), 3, padding=1, batch=1),
    # 3D: KB79/KB23-like, nnU-Net stages, video stems, pointwise, depthwise
    E("c3d_3_16_k3", 3, 16, (16, 32, 32), 3, batch=128),
    E("c3d_3_24_k3", 3, 24, (24, 32, 32), 3, batch=128),
    E("c3d_32_64_k3p1", 32, 64, (32, 32, 32), 3, padding=1, batch=2),
    E("c3d_64_64_k3p1", 64, 64, (16, 16, 16), 3, padding=1, batch=4),
    E("c3d_16_32_k3s2", 16, 32, (32, 32, 32), 3, stride=2, padding=1, batch=4),
    E("c3d_64_128_k1", 64, 128, (16, 16, 16), 1, batch=8),
    E("c3d_32_32_k133", 32, 32, (16, 56, 56), (1, 3, 3), padding=(0, 1, 1), batch=2),
    E("c3d_8_16_k5p2", 8, 16, (24, 24, 24), 5, padding=2, batch=4),
    E("c3d_128_128_k3p1", 128, 128, (8, 8, 8), 3, padding=1, batch=16),
    E("c3d_stem_k377", 3, 64, (16, 112, 112), (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), batch=2),
    E("c3d_dw64_k3", 64, 64, (16, 16, 16), 3, padding=1, groups=64, batch=8),
]
assert len({e.name for e in ENTRIES}) == len(ENTRIES) >= 40


def module_for(e, torch):
    conv_cls = torch.nn.Conv2d if e.dims == 2 else torch.nn.Conv3d

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv_cls(e.cin, e.cout, e.kernel, e.stride, e.padding, e.dilation, e.groups)
            self.shift = torch.nn.Parameter(torch.randn([e.cout] + [1] * e.dims))

        def forward(self, x):
            return torch.relu(self.conv(x) + self.shift)

    return Block()


def write_specs(directory):
    os.makedirs(directory, exist_ok=True)
    for e in ENTRIES:
        for prec in ("fp32", "tf32"):
            with open(os.path.join(directory, f"{e.name}.{prec}.lua"), "w") as f:
                f.write(e.spec(prec))
    print(f"sweep: {2 * len(ENTRIES)} specs in {directory}")


def run(args):
    import torch
    from compare_torch import Precision, accuracy, summarize, time_cuda, setup_fusegen_path

    setup_fusegen_path(args.build)
    import fusegen

    dev = torch.device("cuda", 0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    prec = Precision(torch)
    ctx = fusegen.Context(0)
    spec_dir = os.path.join(args.out, "sweep-specs")
    write_specs(spec_dir)
    entries = [e for e in ENTRIES if not args.only or e.name in args.only.split(",")]
    results = []
    t_start = time.time()
    for e in entries:
        if args.deadline_s and time.time() - t_start > args.deadline_s:
            print(f"sweep: deadline of {args.deadline_s} s reached; {e.name} and later not run", flush=True)
            break
        r = {"name": e.name, "describe": e.describe(), "gflop": e.flops() / 1e9, "impls": {}}
        results.append(r)
        try:
            torch.manual_seed(0)
            module = module_for(e, torch).to(dev)
            # x ~ U[0, 1), then scaled and offset (--input-scale, --input-offset): the accuracy
            # bar "never less exact than cuDNN fp32" must hold at any input scale
            x = torch.rand([e.batch, e.cin] + e.spatial, device=dev) * args.input_scale + args.input_offset
            with torch.no_grad():
                ref = copy.deepcopy(module).double()(x.double())
        except Exception as ex:
            r["error"] = str(ex)[:200]
            continue

        def timed(name, precision, make):
            t0 = time.time()
            try:
                prec.set(precision)
                with torch.no_grad():
                    fn, out = make()
                    torch.cuda.synchronize()
                    a = accuracy(torch, out, ref)
                    a["first_call_s"] = time.time() - t0
                    a.update(summarize(time_cuda(torch, fn, args.iters, args.warmup, flush)))
                a["tflops"] = e.flops() / (a["median_ms"] * 1e-3) / 1e12
            except Exception as ex:
                traceback.print_exc()
                a = {"error": str(ex)[:200]}
            r["impls"][name] = a
            print(f"{e.name} {name}: " + (a.get("error") or f"{a['median_ms']:.4f} ms {a['tflops']:.1f} TFLOP/s "
                                          f"err {a['max_abs_err']:.2e} {'PASS' if a['passes'] else 'FAIL'}"), flush=True)

        def fusegen_impl(p):
            def make():
                layer = fusegen.Layer(os.path.join(spec_dir, f"{e.name}.{p}.lua"), ctx)
                r.setdefault("_layers", []).append(layer)
                layer.load_state_dict(module.state_dict())
                out = torch.full(tuple(ref.shape), float("nan"), device=dev)
                layer(x, out=out)
                return (lambda: layer(x)), out
            return make

        def eager():
            return (lambda: module(x)), module(x)

        def compiled():
            torch._dynamo.reset()
            c = torch.compile(module)
            return (lambda: c(x)), c(x)

        timed("fusegen fp32", "fp32", fusegen_impl("fp32"))
        timed("fusegen tf32", "default", fusegen_impl("tf32"))
        timed("cudnn fp32", "fp32", eager)
        timed("cudnn tf32", "default", eager)
        if args.compile in ("both", "default"):
            timed("compile", "default", compiled)
        if args.compile == "both":
            timed("compile fp32", "fp32", compiled)
        for layer in r.pop("_layers", []):
            layer.close()
        prec.set("default")
        torch._dynamo.reset()
        del module, x, ref
        torch.cuda.empty_cache()
    return results


def table(results):
    cols = ["fusegen fp32", "fusegen tf32", "cudnn fp32", "cudnn tf32", "compile", "compile fp32"]
    lines = ["| entry | GFLOP | " + " | ".join(f"{c} ms" for c in cols) +
             " | fp32 TFLOP/s (% roof) | tf32 TFLOP/s (% roof) | fp32 vs compile fp32 | tf32 vs compile | fp32 err (cuDNN fp32 err) |",
             "|" + "---|" * (len(cols) + 7)]
    for r in results:
        im = r["impls"]
        ms = lambda c: f"{im[c]['median_ms']:.3f}" if c in im and "median_ms" in im[c] else ("err" if c in im else "-")
        def tf(c, roof):
            if c not in im or "tflops" not in im[c]:
                return "-"
            return f"{im[c]['tflops']:.1f} ({100 * im[c]['tflops'] / roof:.0f}%)"
        def ratio(a, b):
            if a in im and b in im and "median_ms" in im[a] and "median_ms" in im[b]:
                return f"{im[b]['median_ms'] / im[a]['median_ms']:.2f}x"
            return "-"
        def err(c):
            return f"{im[c]['max_abs_err']:.1e}" if c in im and "max_abs_err" in im[c] else "-"
        lines.append(f"| {r['describe']} | {r['gflop']:.1f} | " + " | ".join(ms(c) for c in cols) +
                     f" | {tf('fusegen fp32', ROOF['fp32'])} | {tf('fusegen tf32', ROOF['tf32'])} | "
                     f"{ratio('fusegen fp32', 'compile fp32')} | {ratio('fusegen tf32', 'compile')} | "
                     f"{err('fusegen fp32')} ({err('cudnn fp32')}) |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="/tmp/fusegen-sweep")
    ap.add_argument("--only", default="")
    ap.add_argument("--compile", choices=("both", "default", "none"), default="both")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--write-specs", metavar="DIR")
    ap.add_argument("--deadline-s", type=float, default=0, help="start no entry after this many seconds")
    ap.add_argument("--input-scale", type=float, default=1.0, help="multiply the U[0, 1) inputs by this (default 1)")
    ap.add_argument("--input-offset", type=float, default=0.0, help="then add this (default 0)")
    args = ap.parse_args(argv)
    if args.write_specs:
        write_specs(args.write_specs)
        return 0
    os.makedirs(args.out, exist_ok=True)
    results = run(args)
    md = table(results)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(os.path.join(args.out, "SWEEP.md"), "w") as f:
        inputs = ("" if args.input_scale == 1.0 and args.input_offset == 0.0 else
                  f", inputs U[0, 1) x {args.input_scale:g} + {args.input_offset:g}")
        f.write(f"# Shape sweep, {stamp}, commit {os.environ.get('FUSEGEN_COMMIT', '?')}{inputs}\n\n{md}\n")
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print(md)
    bad = [r["name"] for r in results if not r["impls"].get("fusegen fp32", {}).get("passes")]
    # the other half of the bar: never less exact than cuDNN fp32 on the same inputs
    def err(r, impl):
        return r["impls"].get(impl, {}).get("max_abs_err")
    worse = [r["name"] for r in results
             if err(r, "fusegen fp32") is not None and err(r, "cudnn fp32") is not None
             and err(r, "fusegen fp32") > err(r, "cudnn fp32")]
    print(f"sweep: {len(results)} entries; fusegen fp32 fails the 1e-4 bar on {len(bad)}: {' '.join(bad)}; "
          f"less exact than cuDNN fp32 on {len(worse)}: {' '.join(worse)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
