#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fusegen against PyTorch on the reference layers of PROBLEMS.md: accuracy, speed, cold start.

    python3 bench/compare_torch.py --build build --out OUTDIR [--layers kb79,kb21] [--iters 40]
                                   [--batch 128] [--no-cold-start]
    python3 bench/compare_torch.py --self-test        # no torch, no GPU: tables, floors, files

For each layer it builds the PyTorch module from PROBLEMS.md (not from the spec: the two are
independent statements of the same semantics), draws parameters and inputs as PROBLEMS.md
says, and runs on the same inputs:
  ref64       the module in float64 on the GPU: the ground truth
  eager       fp32 eager with TF32 off (cuDNN and matmul): PyTorch at fp32 accuracy
  eager_tf32  fp32 eager with PyTorch's default flags (cuDNN convs may use TF32)
  compile     torch.compile (default mode), by default under PyTorch's default flags, as a
              user gets it (--compile-precision fp32 turns TF32 off for it too)
  compile_fp32  torch.compile with TF32 off: the accuracy-matched peer of fusegen's fp32 mode
              (left out when --compile-precision fp32 already made `compile` that)
  fusegen     the spec through the Python binding: Layer(spec).load_state_dict(sd); layer(x)
  fusegen_tf32  the same spec with precision = "tf32" (one TF32 product): the peer of compile
              under the default flags (its bar is compile's error, not 1e-4)
Accuracy: allclose(out, ref64, atol=rtol=1e-4) (PROBLEMS.md's bar), max abs error, relative
L2 error. Speed: median of --iters CUDA-event timings, a 256 MB buffer written before each
run so the L2 starts cold, warm-up runs excluded. Cold start: fresh processes timed from
their start to the first synchronized output (fusegen with an empty kernel cache = JIT,
fusegen with a warm cache, torch.compile with empty Inductor/Triton caches, eager).

Writes OUTDIR/RESULTS.md, OUTDIR/results.json and OUTDIR/results.png, and prints the tables.
Exit status: 0 when every fusegen output passed the accuracy bar, 1 otherwise (or when
fusegen failed to run), 2 on bad usage. A failure of one implementation on one layer is
reported in its table cell ('error: ...') and the run goes on.
"""

import argparse
import copy
import datetime
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The machine's measured ceilings (PROBLEMS.md, "The floors on that machine").
FMA_TFLOPS = 65.1  # fp32 FMA rate
COPY_TBS = 4.22  # device-to-device copy, bytes read + written
ATOL = RTOL = 1e-4  # the accuracy bar against float64
FLUSH_BYTES = 256 << 20  # > 4x the H200's 60 MB L2
IMPLS = ("eager", "eager_tf32", "compile", "compile_fp32", "fusegen", "fusegen_tf32")
IMPL_TITLES = {
    "eager": "eager", "eager_tf32": "eager tf32", "compile": "compile", "compile_fp32": "compile fp32",
    "fusegen": "fusegen", "fusegen_tf32": "fusegen tf32",
}  # fmt: skip
COLD_IMPLS = ("eager", "compile", "fusegen_jit", "fusegen_warm")
COLD_TITLES = {"eager": "eager", "compile": "torch.compile", "fusegen_jit": "fusegen JIT", "fusegen_warm": "fusegen warm cache"}
RESULT_TAG = "COLD_START_RESULT "  # the line a cold-start child prints its numbers on
# what libfusegen prints with verbose on when it loads a layer's kernels (runtime/api_layer.c)
KERNELS_FROM = re.compile(r"^fusegen: \S+ for \S+: (compiled|from the cache|from the shipped cache)", re.M)


# ---- the layers, as data ---------------------------------------------------------------------


def prod(xs):
    p = 1
    for v in xs:
        p *= v
    return p


@dataclass(frozen=True)
class LayerDef:
    """One reference layer: enough shape facts for the floors, and where its spec is.
    Shapes are per sample (the batch is a run-time argument)."""

    key: str  # 'kb79': the --layers name and the spec's file name
    title: str  # 'KB79'
    input: tuple  # (C_in, spatial...)
    out_channels: int
    kernel: tuple  # one size per spatial dim
    output: tuple  # the layer's output per sample, as PROBLEMS.md states it
    groups: int = 1

    @property
    def spec(self):
        return os.path.join(REPO, "specs", self.key + ".lua")

    def conv_out_spatial(self):
        # stride 1, padding 0, dilation 1 (PROBLEMS.md's conventions)
        return tuple(i - k + 1 for i, k in zip(self.input[1:], self.kernel))

    def conv_flops(self, batch):
        """2 * N * C_out * prod(out spatial) * C_in / groups * prod(kernel): one multiply and
        one add per tap. The epilogue's FLOPs are negligible beside it and not counted."""
        c_in = self.input[0]
        return 2 * batch * self.out_channels * prod(self.conv_out_spatial()) * (c_in // self.groups) * prod(self.kernel)

    def compulsory_bytes(self, batch):
        """The input read once and the output written once, in fp32 (parameters are tiny and,
        as in PROBLEMS.md's table, left out)."""
        return 4 * batch * (prod(self.input) + prod(self.output))

    def floor(self, batch, fma_tflops=FMA_TFLOPS, copy_tbs=COPY_TBS):
        """The time no implementation can beat: max(compute time at the FMA rate, compulsory
        traffic at the copy bandwidth), in ms."""
        compute_ms = self.conv_flops(batch) / (fma_tflops * 1e12) * 1e3
        memory_ms = self.compulsory_bytes(batch) / (copy_tbs * 1e12) * 1e3
        return {"compute_ms": compute_ms, "memory_ms": memory_ms, "floor_ms": max(compute_ms, memory_ms)}


# PROBLEMS.md's six layers, in its order.
LAYERS = {
    ld.key: ld
    for ld in (
        LayerDef("kb79", "KB79", (3, 16, 32, 32), 16, (3, 3, 3), (14, 30, 30)),
        LayerDef("kb21", "KB21", (8, 256, 256), 32, (3, 3), (32, 254, 254)),
        LayerDef("kb23", "KB23", (3, 24, 32, 32), 24, (3, 3, 3), ()),
        LayerDef("kb85", "KB85", (8, 128, 128), 64, (3, 3), (64, 31, 31)),
        LayerDef("kb17", "KB17", (64, 128, 128), 128, (3, 3), (128, 126, 126)),
        LayerDef("kb92", "KB92", (8, 128, 128), 64, (3, 3), (1, 126, 126)),
    )
}

# PROBLEMS.md's floor table, to check the arithmetic above against (--self-test):
# conv GFLOP, compulsory MB, floor in µs.
PROBLEMS_FLOORS = {
    "kb79": (4.18, 31.7, 64),
    "kb21": (38.0, 1325, 584),
    "kb23": (9.85, 37.7, 151),
    "kb85": (18.7, 98.6, 288),
    "kb17": (299.7, 1577, 4600),
    "kb92": (18.7, 75.2, 288),
}


def build_module(key, torch):
    """The PyTorch module of a reference layer, written from PROBLEMS.md. Parameter names are
    the state_dict keys the specs bind (conv.weight, conv.bias, multiplier, bias, scale,
    group_norm.weight, group_norm.bias). Defined here so that torch is imported only when
    needed (--self-test runs without it)."""
    nn = torch.nn
    F = torch.nn.functional

    class KB79(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(3, 16, 3)
            self.multiplier = nn.Parameter(torch.empty(16, 1, 1, 1))
            self.instance_norm = nn.InstanceNorm3d(16, eps=1e-5)  # affine off: no state_dict entries

        def forward(self, x):
            y = self.conv(x) * self.multiplier
            y = self.instance_norm(y)
            y = torch.clamp(y, -1.0, 1.0) * self.multiplier
            return torch.max(y, dim=1).values

    class KB21(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 32, 3)
            self.bias = nn.Parameter(torch.empty(32, 1, 1))
            self.scale = nn.Parameter(torch.empty(32, 1, 1))
            self.group_norm = nn.GroupNorm(8, 32, eps=1e-5)

        def forward(self, x):
            y = (self.conv(x) + self.bias) * self.scale
            return self.group_norm(torch.sigmoid(y))

    class KB23(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(3, 24, 3)
            self.group_norm = nn.GroupNorm(8, 24, eps=1e-5)

        def forward(self, x):
            return self.group_norm(self.conv(x)).mean(dim=[1, 2, 3, 4])

    class KB85(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 64, 3)
            self.group_norm = nn.GroupNorm(16, 64, eps=1e-5)
            self.scale = nn.Parameter(torch.empty(64, 1, 1))

        def forward(self, x):
            y = self.group_norm(self.conv(x)) * self.scale
            y = F.max_pool2d(y, kernel_size=4)  # stride = kernel, no padding, floor
            return torch.clamp(y, 0.0, 1.0)

    class KB17(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(64, 128, 3)
            self.instance_norm = nn.InstanceNorm2d(128, eps=1e-5)

        def forward(self, x):
            return self.instance_norm(self.conv(x)) / 2.0

    class KB92(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 64, 3)
            self.group_norm = nn.GroupNorm(16, 64, eps=1e-5)

        def forward(self, x):
            c = self.conv(x)
            y = F.hardswish(torch.tanh(self.group_norm(c)))  # v * clamp(v + 3, 0, 6) / 6
            return torch.logsumexp(c + y, dim=1, keepdim=True)  # the residual is the conv output

    return {"kb79": KB79, "kb21": KB21, "kb23": KB23, "kb85": KB85, "kb17": KB17, "kb92": KB92}[key]()


# x ~ U[0, 1) times INPUT_SCALE plus INPUT_OFFSET (--input-scale, --input-offset; main sets
# them): "exact" means never less exact than cuDNN fp32 at any input scale
INPUT_SCALE, INPUT_OFFSET = 1.0, 0.0


def make_case(ld, batch, seed, torch, device):
    """The module (fp32, on `device`) and the input, drawn the same way in every process:
    conv as PyTorch initializes it, every other parameter ~ N(0, 1) (GroupNorm's affine too,
    so that path is exercised), x ~ U[0, 1) (scaled and offset as asked)."""
    torch.manual_seed(seed)
    module = build_module(ld.key, torch)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if not name.startswith("conv."):
                p.normal_()
    module = module.to(device).eval()  # eval() changes nothing for these norms; explicit anyway
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    x = torch.rand((batch,) + ld.input, generator=gen, device=device, dtype=torch.float32)
    if INPUT_SCALE != 1.0 or INPUT_OFFSET != 0.0:
        x = x * INPUT_SCALE + INPUT_OFFSET
    return module, x


# ---- formatting (pure Python: exercised by --self-test) ---------------------------------------


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fmt_ms(v):
    if not is_num(v) or not math.isfinite(v):
        return "—"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def fmt_err(v):
    if not is_num(v):
        return "—"
    return "nan" if math.isnan(v) else f"{v:.2g}"


def fmt_ratio(num, den):
    """num/den as a speed-up of fusegen (den) over another implementation (num)."""
    if not (is_num(num) and is_num(den)) or den <= 0 or not math.isfinite(num):
        return "—"
    return f"{num / den:.2f}×"


def fmt_pct(v):
    return f"{v:.0f}%" if is_num(v) and math.isfinite(v) else "—"


def cell_error(msg, width=70):
    """An error for a table cell: one line, no '|' (it would split the cell), bounded."""
    text = " ".join(str(msg).split()).replace("|", "/")
    return "error: " + (text if len(text) <= width else text[: width - 1] + "…")


def impl_cell(r, key, fmt):
    """r: one implementation's result dict. An error shows instead of any of its numbers."""
    if r is None:
        return "—"
    if r.get("error"):
        return cell_error(r["error"])
    return fmt(r.get(key))


def passes_cell(r):
    if r is None:
        return "—"
    if r.get("error"):
        return cell_error(r["error"], 40)
    return "yes" if r.get("passes") else "**no**"


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        assert len(row) == len(header), (header, row)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


MAIN_HEADER = [
    "layer", "eager ms", "eager tf32 ms", "compile ms", "compile fp32 ms", "fusegen ms", "fusegen tf32 ms",
    "vs eager", "vs compile", "vs compile fp32", "tf32 vs compile", "% of floor", "fusegen passes",
    "compile passes", "eager passes", "eager tf32 passes", "fusegen max err", "fusegen tf32 max err", "floor ms",
]  # fmt: skip


def median_or_none(r):
    return r.get("median_ms") if r and not r.get("error") else None


def main_table(results):
    """Speed and the pass/fail of accuracy, one row per layer. 'vs X' is X's time over
    fusegen's fp32 mode (above 1: fusegen is faster); 'tf32 vs compile' is compile's (default
    flags) over fusegen's tf32 mode; '% of floor' is floor time over fusegen's."""
    rows = []
    for lr in results["layers"]:
        im = lr["impls"]
        fg = im.get("fusegen") or {}
        fg_ms = median_or_none(fg)
        tf32_ms = median_or_none(im.get("fusegen_tf32"))
        floor_ms = lr["floor"]["floor_ms"]
        rows.append([
            lr["title"] + (f" (error: {lr['error']})" if lr.get("error") else ""),
            impl_cell(im.get("eager"), "median_ms", fmt_ms),
            impl_cell(im.get("eager_tf32"), "median_ms", fmt_ms),
            impl_cell(im.get("compile"), "median_ms", fmt_ms),
            impl_cell(im.get("compile_fp32"), "median_ms", fmt_ms),
            impl_cell(im.get("fusegen"), "median_ms", fmt_ms),
            impl_cell(im.get("fusegen_tf32"), "median_ms", fmt_ms),
            fmt_ratio(median_or_none(im.get("eager")), fg_ms),
            fmt_ratio(median_or_none(im.get("compile")), fg_ms),
            fmt_ratio(median_or_none(im.get("compile_fp32")), fg_ms),
            fmt_ratio(median_or_none(im.get("compile")), tf32_ms),
            fmt_pct(100.0 * floor_ms / fg_ms) if is_num(fg_ms) and fg_ms > 0 else "—",
            passes_cell(im.get("fusegen")),
            passes_cell(im.get("compile")),
            passes_cell(im.get("eager")),
            passes_cell(im.get("eager_tf32")),
            impl_cell(im.get("fusegen"), "max_abs_err", fmt_err),
            impl_cell(im.get("fusegen_tf32"), "max_abs_err", fmt_err),
            fmt_ms(floor_ms),
        ])  # fmt: skip
    return md_table(MAIN_HEADER, rows)


def accuracy_table(results):
    header = ["layer"]
    for k in IMPLS:
        header += [f"{IMPL_TITLES[k]} max err", f"{IMPL_TITLES[k]} rel L2"]
    rows = []
    for lr in results["layers"]:
        row = [lr["title"]]
        for k in IMPLS:
            r = lr["impls"].get(k)
            row += [impl_cell(r, "max_abs_err", fmt_err), impl_cell(r, "rel_l2_err", fmt_err) if r and not r.get("error") else "—"]
        rows.append(row)
    return md_table(header, rows)


def cold_table(results):
    """Seconds from process start to the first synchronized output; in parentheses the first
    call alone (after torch is imported and the model and input are on the GPU)."""
    header = ["layer"] + [COLD_TITLES[k] + " s" for k in COLD_IMPLS]
    rows = []
    for lr in results["layers"]:
        cold = lr.get("cold_start")
        if not cold:
            continue
        row = [lr["title"]]
        for k in COLD_IMPLS:
            r = cold.get(k)
            if r is None:
                row.append("—")
            elif r.get("error"):
                row.append(cell_error(r["error"]))
            else:
                note = f" ({r['first_call_s']:.2f}"
                if r.get("kernels"):
                    note += f", kernels {r['kernels']}"
                    if r.get("prepare_s") is not None:
                        note += f" in {r['prepare_s'] * 1e3:.1f} ms"
                row.append(f"{r['total_s']:.2f}{note})")
        rows.append(row)
    return md_table(header, rows) if rows else ""


def fusegen_ok(results):
    """True when fusegen ran and passed on every layer measured."""
    for lr in results["layers"]:
        fg = lr["impls"].get("fusegen")
        if not fg or fg.get("error") or not fg.get("passes"):
            return False
    return bool(results["layers"])


def results_markdown(results):
    env = results["env"]
    s = results["settings"]
    parts = [
        f"# fusegen vs PyTorch — {env['date']}",
        "",
        f"- GPU: {env.get('gpu', '?')}; torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}, "
        f"cuDNN {env.get('cudnn', '?')}; fusegen {env.get('fusegen', '?')} at commit {env.get('commit', '?')}",
        f"- batch {s['batch']}, median of {s['iters']} runs after {s['warmup']} warm-up runs, CUDA events, "
        f"{FLUSH_BYTES >> 20} MB written before each run to flush the L2; seed {s['seed']}"
        + (f"; inputs U[0, 1) x {s['input_scale']:g} + {s['input_offset']:g}"
           if s.get("input_scale", 1.0) != 1.0 or s.get("input_offset", 0.0) != 0.0 else ""),
        f"- accuracy: allclose(out, float64 reference, atol={ATOL:g}, rtol={RTOL:g}); the reference is the same "
        "module in float64 on the GPU",
        "- eager: TF32 off (cuDNN and matmul); eager tf32: PyTorch's default flags "
        f"(cudnn.allow_tf32={env.get('default_cudnn_tf32', '?')}, matmul.allow_tf32={env.get('default_matmul_tf32', '?')}); "
        f"compile: torch.compile default mode, {s['compile_precision']} precision flags; compile fp32: "
        "torch.compile with TF32 off; fusegen tf32: the same spec with precision = \"tf32\" (not held to 1e-4)",
        f"- floor: max(conv FLOPs / {FMA_TFLOPS} TFLOP/s, (input + output bytes) / {COPY_TBS} TB/s), "
        "PROBLEMS.md's measured ceilings; 'vs X' = X's time / fusegen's; '% of floor' = floor / fusegen's time",
        "",
        "## Speed and accuracy",
        "",
        main_table(results),
        "",
        "## Accuracy detail (max abs error, relative L2 error against float64)",
        "",
        accuracy_table(results),
        "",
    ]
    cold = cold_table(results)
    if cold:
        parts += [
            "## Cold start",
            "",
            "Seconds from a fresh process's start to its first synchronized output (importing torch, "
            "CUDA init and building the model included); in parentheses the first call alone, and for "
            "fusegen how long `Layer.prepare()` took to compile or load the kernels (its part of the first "
            "call). fusegen JIT: empty kernel cache and NVRTC's own cache off (CUDA_CACHE_DISABLE=1); "
            "fusegen warm cache: the same kernel cache after the JIT run; "
            "torch.compile: empty Inductor and Triton caches.",
            "",
            cold,
            "",
        ]
    parts += ["![median times per layer](results.png)", ""]
    return "\n".join(parts)


def json_safe(v):
    """NaN and infinities as strings: strict JSON has no spelling for them."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def plot(results, path):
    """Grouped bars of the median times per layer (log scale), the floor as a black tick."""
    import matplotlib

    matplotlib.use("Agg")  # no display on the GPU machine
    import matplotlib.pyplot as plt

    layers = results["layers"]
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(layers)), 4.5))
    width = 0.8 / len(IMPLS)
    for i, k in enumerate(IMPLS):
        xs, ys = [], []
        for j, lr in enumerate(layers):
            r = lr["impls"].get(k) or {}
            if is_num(r.get("median_ms")) and not r.get("error"):
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(r["median_ms"])
        ax.bar(xs, ys, width, label=IMPL_TITLES[k])
    for j, lr in enumerate(layers):
        ax.hlines(lr["floor"]["floor_ms"], j - 0.45, j + 0.45, colors="black", linewidth=2, label="floor" if j == 0 else None)
    ax.set_xticks(range(len(layers)), [lr["title"] for lr in layers])
    ax.set_yscale("log")
    ax.set_ylabel(f"median ms (batch {results['settings']['batch']})")
    ax.set_title(f"fusegen vs PyTorch on {results['env'].get('gpu', '?')}")
    ax.legend(fontsize="small")
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(results, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "RESULTS.md"), "w") as f:
        f.write(results_markdown(results))
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(json_safe(results), f, indent=1)
    try:
        plot(results, os.path.join(out_dir, "results.png"))
    except Exception as e:  # a missing matplotlib must not lose the tables
        print(f"compare_torch: no plot: {type(e).__name__}: {e}", file=sys.stderr)


def print_tables(results):
    print()
    print(main_table(results))
    print()
    print(accuracy_table(results))
    cold = cold_table(results)
    if cold:
        print()
        print(cold)
    print()


# ---- the environment ---------------------------------------------------------------------------


def git_commit(override=None):
    """--commit, else $FUSEGEN_COMMIT, else git's short hash (+dirty), else 'unknown' (the GPU
    machine gets a copy of the working tree without .git: pass --commit there)."""
    if override or os.environ.get("FUSEGEN_COMMIT"):
        return override or os.environ["FUSEGEN_COMMIT"]
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=30)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except Exception:
        return "unknown"


def setup_fusegen_path(build):
    """Makes `import fusegen` find this checkout's binding and the chosen build's library.
    An explicit --build wins over $FUSEGEN_LIBRARY; children inherit the environment."""
    if build is not None:
        path = build if os.path.isabs(build) or os.path.isdir(build) else os.path.join(REPO, build)
        os.environ["FUSEGEN_LIBRARY"] = os.path.abspath(os.path.join(path, "libfusegen.so"))
    elif "FUSEGEN_LIBRARY" not in os.environ:
        os.environ["FUSEGEN_LIBRARY"] = os.path.join(REPO, "build", "libfusegen.so")
    sys.path.insert(0, os.path.join(REPO, "python"))


def spec_text(path, precision):
    """The spec's text, with precision = "tf32" set for fusegen's tf32 mode (the reference
    specs do not name a precision: fp32, the default, is theirs)."""
    with open(path) as f:
        text = f.read()
    if precision == "fp32":
        return text
    if re.search(r"^\s*precision\s*=", text, re.M):
        return re.sub(r'^(\s*precision\s*=\s*)"[a-z0-9]+"', rf'\g<1>"{precision}"', text, count=1, flags=re.M)
    text, n = re.subn(r"^(\s*input\s*=\s*\{[^}]*\},)$", rf'\1\n  precision = "{precision}",', text, count=1, flags=re.M)
    if n != 1:
        raise ValueError(f"{path}: no 'input = {{...}},' line to put precision after")
    return text


class Precision:
    """TF32 switches. Only the legacy allow_tf32 flags are touched: mixing them with the newer
    fp32_precision settings makes some PyTorch versions raise when either is read."""

    def __init__(self, torch):
        self.torch = torch
        self.default_cudnn = bool(torch.backends.cudnn.allow_tf32)
        self.default_matmul = bool(torch.backends.cuda.matmul.allow_tf32)

    def set(self, mode):
        b = self.torch.backends
        if mode == "fp32":
            b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32 = False, False
        elif mode == "default":
            b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32 = self.default_cudnn, self.default_matmul
        else:
            raise ValueError(mode)


# ---- measuring ----------------------------------------------------------------------------------


def accuracy(torch, out, ref):
    """allclose against the float64 reference, max abs error, relative L2 error."""
    if tuple(out.shape) != tuple(ref.shape):
        raise RuntimeError(f"output shape {list(out.shape)} != reference {list(ref.shape)}")
    o = out.detach().double()
    d = o - ref
    finite = bool(torch.isfinite(o).all())
    max_abs = float(d.abs().max()) if finite else float("nan")
    rel = float(d.norm() / ref.norm()) if finite else float("nan")
    passes = finite and bool(torch.allclose(o, ref, rtol=RTOL, atol=ATOL))
    return {"passes": passes, "max_abs_err": max_abs, "rel_l2_err": rel}


def time_cuda(torch, fn, iters, warmup, flush):
    """Median-ready list of CUDA-event times (ms) of fn(), each after an L2 flush."""
    for _ in range(warmup):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        flush.zero_()  # written, not read: evicts the L2 (4x its size) before the timed run
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def time_graph(torch, fn, iters, warmup, flush):
    """time_cuda's list for fn() captured once in a CUDA graph and replayed: the GPU's time
    without the Python and launch work of each call, which at batches 1-8 can exceed the GPU
    work (PyTorch's reduce-overhead mode does this for a compiled model; a fusegen op is
    capturable once its kernels are loaded, which the warm-up does). Warm-up on a side stream,
    as torch.cuda.graph asks; raises where fn cannot be captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_cuda(torch, graph.replay, iters, warmup, flush)


def summarize(times):
    s = sorted(times)
    n = len(s)
    return {"median_ms": statistics.median(s), "p10_ms": s[n // 10], "p90_ms": s[n - 1 - n // 10], "times_ms": times}


def short_error(e):
    text = f"{type(e).__name__}: {e}"
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__


def measure_layer(ld, args, torch, prec, fg_ctx, flush):
    """Every implementation on one layer. Returns the layer's result dict."""
    res = {"key": ld.key, "title": ld.title, "floor": ld.floor(args.batch), "impls": {}}
    res["conv_gflop"] = ld.conv_flops(args.batch) / 1e9
    res["compulsory_mb"] = ld.compulsory_bytes(args.batch) / 1e6
    dev = torch.device("cuda", torch.cuda.current_device())
    try:
        module, x = make_case(ld, args.batch, args.seed, torch, dev)
        with torch.no_grad():
            ref = copy.deepcopy(module).double()(x.double())
        torch.cuda.synchronize()
    except Exception as e:
        traceback.print_exc()
        res["error"] = "reference: " + short_error(e)
        return res
    print(f"{ld.title}: reference ready, output {list(ref.shape)}", flush=True)

    def run_impl(name, precision, make_fn):
        """make_fn() -> (fn, first_output): fn() runs the implementation once."""
        t0 = time.time()
        try:
            prec.set(precision)
            with torch.no_grad():
                fn, out = make_fn()
                torch.cuda.synchronize()
                r = accuracy(torch, out, ref)
                r["first_call_s"] = time.time() - t0
                del out
                r.update(summarize(time_cuda(torch, fn, args.iters, args.warmup, flush)))
        except Exception as e:
            traceback.print_exc()
            r = {"error": short_error(e)}
        r["precision"] = precision
        res["impls"][name] = r
        what = r.get("error") or (
            f"median {r['median_ms']:.4f} ms, max err {r['max_abs_err']:.3g}, {'PASS' if r['passes'] else 'FAIL'}"
        )
        print(f"{ld.title} {name}: {what}", flush=True)

    def eager():
        return (lambda: module(x)), module(x)

    def compiled():
        torch._dynamo.reset()  # a fresh compile per layer, not one limited by earlier ones
        c = torch.compile(module)
        return (lambda: c(x)), c(x)

    def fusegen_impl(precision="fp32"):
        import fusegen

        if isinstance(fg_ctx, Exception):
            raise fg_ctx
        layer = fusegen.Layer(spec_text(ld.spec, precision), fg_ctx, name=f"{ld.spec} ({precision})")
        res["_fusegen_layers"].append(layer)  # closed by the caller, after the timing
        if layer.output_shape(args.batch) != tuple(ref.shape):
            raise RuntimeError(f"fusegen output shape {list(layer.output_shape(args.batch))} != PyTorch's {list(ref.shape)}")
        layer.load_state_dict(module.state_dict())
        # the first (JIT) run writes into a NaN-filled buffer: an element the kernels do not
        # write fails the check instead of passing on whatever the allocator left there
        out = torch.full(tuple(ref.shape), float("nan"), device=dev)
        layer(x, out=out)
        return (lambda: layer(x)), out

    if not args.only_fusegen:
        run_impl("eager", "fp32", eager)
        run_impl("eager_tf32", "default", eager)
        run_impl("compile", args.compile_precision, compiled)
        if args.compile_precision != "fp32":
            run_impl("compile_fp32", "fp32", compiled)
    res["_fusegen_layers"] = []
    run_impl("fusegen", "fp32", fusegen_impl)
    if args.tf32:
        run_impl("fusegen_tf32", "fp32", lambda: fusegen_impl("tf32"))
    for layer in res.pop("_fusegen_layers"):
        layer.close()
    prec.set("default")
    del module, x, ref
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return res


# ---- cold start ----------------------------------------------------------------------------------


def cold_start_child(impl, key, args):
    """Runs in a fresh process: the first output of one implementation on one layer. Prints
    one RESULT_TAG line with wall-clock times (time.time(), comparable with the parent's)."""
    import torch

    t_torch = time.time()
    ld = LAYERS[key]
    dev = torch.device("cuda", 0)
    module, x = make_case(ld, args.batch, args.seed, torch, dev)
    torch.cuda.synchronize()
    t_ready = time.time()
    prec = Precision(torch)
    with torch.no_grad():
        if impl == "eager":
            prec.set("default")
            y = module(x)
        elif impl == "compile":
            prec.set(args.compile_precision)
            y = torch.compile(module)(x)
        elif impl in ("fusegen_jit", "fusegen_warm"):
            import fusegen

            # the kernel cache comes from $FUSEGEN_CACHE_DIR; verbose: the library reports on
            # stderr whether it compiled or found the kernels (the parent checks)
            ctx = fusegen.Context(device=0, verbose=True)
            layer = fusegen.Layer(ld.spec, ctx)
            layer.load_state_dict(module.state_dict())
            t_prepare = time.time()
            layer.prepare()  # JIT or cache load, timed on its own (it also runs inside the first call)
            prepare_s = time.time() - t_prepare
            y = layer(x)
        else:
            raise SystemExit(f"unknown cold-start implementation '{impl}'")
        torch.cuda.synchronize()
    t_done = time.time()
    result = {"t_torch": t_torch, "t_ready": t_ready, "t_done": t_done, "shape": list(y.shape)}
    if impl.startswith("fusegen"):
        result["prepare_s"] = prepare_s
    print(RESULT_TAG + json.dumps(result), flush=True)


def run_cold_start(ld, args, scratch):
    """All cold-start children of one layer, in order: eager, compile, fusegen JIT (empty
    cache), fusegen warm (the cache the JIT run filled)."""
    out = {}
    fg_cache = tempfile.mkdtemp(prefix=f"fusegen-cache-{ld.key}-", dir=scratch)
    for impl in COLD_IMPLS:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("FUSEGEN_CACHE_PATH", None)  # no shipped caches: JIT must really compile
        if impl == "compile":
            inductor = tempfile.mkdtemp(prefix=f"inductor-{ld.key}-", dir=scratch)
            env["TORCHINDUCTOR_CACHE_DIR"] = inductor
            env["TRITON_CACHE_DIR"] = os.path.join(inductor, "triton")
        if impl.startswith("fusegen"):
            env["FUSEGEN_CACHE_DIR"] = fg_cache
        if impl == "fusegen_jit":
            # NVRTC (CUDA 12.9+) keeps its own cache of compiled programs where a driver is
            # present: a JIT run after the tests compiled the same sources would hit it
            env["CUDA_CACHE_DISABLE"] = "1"
        cmd = [sys.executable, os.path.abspath(__file__), "--cold-start-child", impl, ld.key,
               "--batch", str(args.batch), "--seed", str(args.seed),
               "--compile-precision", args.compile_precision,
               "--input-scale", repr(args.input_scale), "--input-offset", repr(args.input_offset)]  # fmt: skip
        t0 = time.time()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.cold_start_timeout)
            line = next((l for l in reversed(p.stdout.splitlines()) if l.startswith(RESULT_TAG)), None)
            if p.returncode != 0 or line is None:
                tail = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
                raise RuntimeError(f"exit {p.returncode}: {tail}")
            r = json.loads(line[len(RESULT_TAG):])
            rec = {"total_s": r["t_done"] - t0, "first_call_s": r["t_done"] - r["t_ready"], "import_torch_s": r["t_torch"] - t0}
            if impl.startswith("fusegen"):
                # the library's own verbose report says where the kernels came from, so a
                # "JIT" run that hit a cache (or a "warm" one that compiled) shows as such
                found = KERNELS_FROM.findall(p.stderr)
                rec["kernels"] = ", ".join(sorted(set(found))) or "unknown"
                rec["prepare_s"] = r.get("prepare_s")
        except subprocess.TimeoutExpired:
            rec = {"error": f"timed out after {args.cold_start_timeout} s"}
        except Exception as e:
            rec = {"error": short_error(e)}
        out[impl] = rec
        what = rec.get("error") or f"{rec['total_s']:.2f} s (first call {rec['first_call_s']:.2f} s)"
        print(f"{ld.title} cold start {impl}: {what}", flush=True)
    return out


# ---- the run ----------------------------------------------------------------------------------


def run(args):
    setup_fusegen_path(args.build)
    try:
        import torch
    except ImportError as e:
        print(f"compare_torch: this benchmark needs PyTorch ({e}); --self-test runs without it", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("compare_torch: torch sees no CUDA device; this benchmark needs a GPU", file=sys.stderr)
        return 1
    prec = Precision(torch)
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "commit": git_commit(args.commit),
        "default_cudnn_tf32": prec.default_cudnn,
        "default_matmul_tf32": prec.default_matmul,
        "fusegen_library": os.environ.get("FUSEGEN_LIBRARY"),
    }
    try:
        import fusegen

        fg_ctx = fusegen.Context(device=torch.cuda.current_device())
        env["fusegen"] = fusegen.version()
    except Exception as e:  # every fusegen cell then says why
        traceback.print_exc()
        fg_ctx = e
    settings = {k: getattr(args, k) for k in ("batch", "iters", "warmup", "seed", "compile_precision", "layers",
                                              "input_scale", "input_offset")}
    results = {"env": env, "settings": settings, "layers": []}
    print(f"compare_torch: {env['gpu']}, torch {env['torch']}, library {env['fusegen_library']}", flush=True)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    for key in args.layers:
        results["layers"].append(measure_layer(LAYERS[key], args, torch, prec, fg_ctx, flush))
    del flush
    if not isinstance(fg_ctx, Exception):
        fg_ctx.close()
    torch.cuda.empty_cache()
    if args.cold_start:
        scratch = tempfile.mkdtemp(prefix="compare-torch-cold-")
        try:
            for lr in results["layers"]:
                lr["cold_start"] = run_cold_start(LAYERS[lr["key"]], args, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    write_outputs(results, args.out)
    print_tables(results)
    ok = fusegen_ok(results)
    print(f"wrote {os.path.join(args.out, 'RESULTS.md')}; fusegen accuracy: {'all PASS' if ok else 'FAILED on some layer'}")
    return 0 if ok else 1


# ---- self-test (no torch, no GPU) ----------------------------------------------------------------


def self_test():
    """Checks what can be checked without torch: the floor arithmetic against PROBLEMS.md,
    the tables (fake numbers, errors in cells), the output files and the exit logic."""
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    for key, (gflop, mb, floor_us) in PROBLEMS_FLOORS.items():
        ld = LAYERS[key]
        f = ld.floor(128)
        check(abs(ld.conv_flops(128) / 1e9 - gflop) <= 0.01 * gflop, f"{key} GFLOP {ld.conv_flops(128) / 1e9:.2f} vs {gflop}")
        check(abs(ld.compulsory_bytes(128) / 1e6 - mb) <= 0.01 * mb, f"{key} MB {ld.compulsory_bytes(128) / 1e6:.1f} vs {mb}")
        check(abs(f["floor_ms"] * 1e3 - floor_us) <= 0.02 * floor_us, f"{key} floor {f['floor_ms'] * 1e3:.0f} us vs {floor_us}")
        check(f["floor_ms"] == f["compute_ms"], f"{key} should be compute-bound")
        check(os.path.exists(ld.spec), f"{key}: no spec at {ld.spec}")
    check(LAYERS["kb79"].conv_out_spatial() == (14, 30, 30), "kb79 conv output")
    check(LAYERS["kb85"].conv_out_spatial() == (126, 126), "kb85 conv output")

    def impl(ms, err, passes=True):
        return {"median_ms": ms, "max_abs_err": err, "rel_l2_err": err / 10, "passes": passes, "times_ms": [ms] * 3}

    fake = {
        "env": {"date": "2026-01-01 00:00 UTC", "gpu": "Fake GPU", "torch": "0.0", "cuda": "13.0", "cudnn": 91900, "commit": "abc1234"},
        "settings": {"batch": 128, "iters": 40, "warmup": 5, "seed": 0, "compile_precision": "default", "layers": ["kb79", "kb21"]},
        "layers": [
            {"key": "kb79", "title": "KB79", "floor": LAYERS["kb79"].floor(128), "impls": {
                "eager": impl(0.988, 3e-6), "eager_tf32": impl(0.95, 2e-4, False), "compile": impl(0.588, 4e-6),
                "compile_fp32": impl(0.7, 3e-6), "fusegen": impl(0.2, 1e-6), "fusegen_tf32": impl(0.147, 2e-4, False)},
             "cold_start": {"eager": {"total_s": 4.0, "first_call_s": 0.5}, "compile": {"error": "timed out | after 300 s"},
                            "fusegen_jit": {"total_s": 5.0, "first_call_s": 1.2, "kernels": "compiled"},
                            "fusegen_warm": {"total_s": 4.1, "first_call_s": 0.05, "kernels": "from cache",
                                             "prepare_s": 0.0013}}},
            {"key": "kb21", "title": "KB21", "floor": LAYERS["kb21"].floor(128), "impls": {
                "eager": impl(9.0, float("nan"), False), "eager_tf32": {"error": "RuntimeError: CUDA out of memory.\nmore"},
                "compile": impl(2.64, 1.4e-3, False), "fusegen": impl(1.0, 2e-5)}},
        ],
    }  # fmt: skip
    table = main_table(fake)
    lines = table.splitlines()
    check(lines[0].startswith("| layer"), "header starts with '| layer'")
    check(all(l.count("|") == lines[0].count("|") for l in lines), "every row has the header's column count")
    check("4.94×" in lines[2], f"vs eager ratio in {lines[2]}")  # 0.988 / 0.2
    check("32%" in lines[2], f"% of floor in {lines[2]}")  # 64.2 us / 200 us
    check("3.50×" in lines[2] and "4.00×" in lines[2], f"vs compile fp32 and tf32 vs compile in {lines[2]}")
    for key in LAYERS:
        t = spec_text(LAYERS[key].spec, "tf32")
        check(t.count('precision = "tf32"') == 1 and t.replace('  precision = "tf32",\n', "") == spec_text(LAYERS[key].spec, "fp32"),
              f"{key}: spec_text sets tf32 once and changes nothing else")
    check("error: RuntimeError: CUDA out of memory. more" in table, "error cell, one line")
    check("**no**" in table and "yes" in table, "pass cells")
    cold = cold_table(fake)
    check(cold.startswith("| layer") and "error: timed out / after 300 s" in cold, "cold table with an error cell")
    check("KB21" not in cold, "layers without cold-start numbers are left out of the cold table")
    check("kernels from cache in 1.3 ms" in cold, "the warm load's prepare time in the cold table")
    acc = accuracy_table(fake)
    check("nan" in acc, "NaN errors show as nan")
    check(fusegen_ok(fake), "fusegen_ok with all fusegen passing")
    fake["layers"][1]["impls"]["fusegen"]["passes"] = False
    check(not fusegen_ok(fake), "fusegen_ok sees a failure")
    fake["layers"][1]["impls"]["fusegen"] = {"error": "Error: FG_ERR_COMPILE: nvrtc"}
    check(not fusegen_ok(fake), "fusegen_ok sees an error")
    check(fmt_ratio(1.0, None) == "—" and fmt_ms(float("nan")) == "—" and fmt_ms(12.345) == "12.3", "formatters")
    with tempfile.TemporaryDirectory() as d:
        write_outputs(fake, d)
        md = open(os.path.join(d, "RESULTS.md")).read()
        check("| layer" in md and "## Cold start" in md and "Fake GPU" in md, "RESULTS.md content")
        data = json.load(open(os.path.join(d, "results.json")))  # strict enough: NaN became a string
        check(data["layers"][0]["impls"]["fusegen"]["median_ms"] == 0.2, "results.json round trip")
        check(data["layers"][1]["impls"]["eager"]["max_abs_err"] == "nan", "NaN in JSON as a string")
        try:
            import matplotlib  # noqa: F401

            check(os.path.getsize(os.path.join(d, "results.png")) > 1000, "results.png written")
        except ImportError:
            print("self-test: matplotlib not installed; plot not checked")
    args = parse_args(["--layers", "KB79,kb21", "--out", "x", "--no-cold-start"])
    check(args.layers == ["kb79", "kb21"] and not args.cold_start, "argument parsing")
    print(table)
    print()
    print(cold)
    if failures:
        print("self-test FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("self-test passed")
    return 0


# ---- command line -------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=None, help="build folder holding libfusegen.so (default: $FUSEGEN_LIBRARY, else build)")
    p.add_argument("--out", default=None, help="folder for RESULTS.md, results.json, results.png (required to run)")
    p.add_argument("--layers", default=",".join(LAYERS), help="comma-separated, from: " + ",".join(LAYERS))
    p.add_argument("--iters", type=int, default=40, help="timed runs per implementation (default 40)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    p.add_argument("--batch", type=int, default=128, help="samples (default 128, PROBLEMS.md's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--input-scale", type=float, default=1.0, help="multiply the U[0, 1) inputs by this (default 1)")
    p.add_argument("--input-offset", type=float, default=0.0, help="then add this (default 0)")
    p.add_argument("--compile-precision", choices=("default", "fp32"), default="default",
                   help="TF32 flags for torch.compile: PyTorch's defaults (as users get it) or fp32")  # fmt: skip
    p.add_argument("--commit", default=None, help="commit to report (default: $FUSEGEN_COMMIT, else git rev-parse)")
    p.add_argument("--only-fusegen", action="store_true", help="skip eager and torch.compile (quick checks)")
    p.add_argument("--no-tf32", dest="tf32", action="store_false", help="skip fusegen's tf32 mode")
    p.add_argument("--no-cold-start", dest="cold_start", action="store_false", help="skip the cold-start processes")
    p.add_argument("--cold-start-timeout", type=int, default=600, help="seconds per cold-start process")
    p.add_argument("--self-test", action="store_true", help="check the tables and floors without torch or a GPU")
    p.add_argument("--cold-start-child", nargs=2, metavar=("IMPL", "LAYER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    layers = [k.strip().lower() for k in args.layers.split(",") if k.strip()]
    unknown = [k for k in layers if k not in LAYERS]
    if unknown:
        p.error(f"unknown layer(s) {', '.join(unknown)}; known: {', '.join(LAYERS)}")
    args.layers = layers
    if args.iters < 1 or args.warmup < 0 or args.batch < 1:
        p.error("--iters and --batch must be positive, --warmup non-negative")
    if not (args.self_test or args.cold_start_child) and not args.out:
        p.error("--out OUTDIR is required")
    return args


def main(argv=None):
    global INPUT_SCALE, INPUT_OFFSET
    args = parse_args(sys.argv[1:] if argv is None else argv)
    INPUT_SCALE, INPUT_OFFSET = args.input_scale, args.input_offset
    if args.self_test:
        return self_test()
    if args.cold_start_child:
        setup_fusegen_path(args.build)
        impl, key = args.cold_start_child
        cold_start_child(impl, key, args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
