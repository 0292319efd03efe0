#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The conv kernels' SASS, read without a GPU: for each layer of each spec, `fusegen gen`
writes its source, NVRTC compiles it for sm_90a as the runtime does, and cuobjdump lists the
conv kernel's instructions. Printed per kernel: instructions, registers and spill bytes
(ptxas), BSSY (the start of a divergent block: a branch the compiler kept), and how far the
epilogue's rows overlap -- the runs of shared-memory loads (LDS) before a global store (STG)
after the last HGMMA, longest and mean: 1 where each row is loaded, computed and stored before
the next (bench/NOTES.md v45), 8 or 16 where the rows interleave (a row may load twice: its
slab value and a residual in shared memory).

usage: bench/sass-rows.py [--build DIR] [--env NAME=VALUE ...] [--arch sm_90a] SPEC...
needs cuobjdump: $CUOBJDUMP, or on PATH (`pip install nvidia-cuda-cuobjdump`: the CUDA
toolkit images without it), and libnvrtc ($CUDA_HOME/lib64, default /usr/local/cuda)."""
import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile

# runtime/nvrtc_compiler.c's base_options, and the architecture: the same code as a run's JIT
NVRTC_OPTIONS = ["--std=c++17", "--ptxas-options=-v", "-lineinfo", "--split-compile=4"]


def nvrtc_compile(lib, source, name, arch):
    """The cubin and ptxas's log of one source, or raises with NVRTC's log."""
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source, name.encode(), 0, None, None) != 0:
        raise RuntimeError(f"{name}: nvrtcCreateProgram failed")
    opts = [o.encode() for o in NVRTC_OPTIONS + [f"--gpu-architecture={arch}"]]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if rc != 0:
        raise RuntimeError(f"{name}: NVRTC failed:\n{text}")
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetCUBIN(prog, cubin)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw, text


def ptxas_resources(log, kernel):
    """(registers, spill store bytes) ptxas reported for `kernel`."""
    at = log.find(f"'{kernel}'")
    part = log[at:at + 600] if at >= 0 else ""
    regs = re.search(r"Used (\d+) registers", part)
    spill = re.search(r"(\d+) bytes spill stores", part)
    return (int(regs.group(1)) if regs else -1, int(spill.group(1)) if spill else -1)


def sass(cuobjdump, cubin_path, kernel):
    """The kernel's instructions' mnemonics (the predicate guard dropped), in order."""
    out = subprocess.run([cuobjdump, "-sass", "-fun", kernel, cubin_path], capture_output=True, text=True,
                         check=True).stdout
    ops = []
    for line in out.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4,5}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if m:
            ops.append(m.group(1))
    return ops


def lds_runs(ops):
    """The runs of LDS before an STG after the last HGMMA: (longest, mean)."""
    last = max((i for i, op in enumerate(ops) if op.startswith("HGMMA")), default=-1)
    runs, run = [], 0
    for op in ops[last + 1:]:
        if op.startswith("LDS"):
            run += 1
        elif op.startswith("STG") and run:
            runs.append(run)
            run = 0
    if not runs:
        return 0, 0.0
    return max(runs), sum(runs) / len(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="the build folder with the fusegen CLI")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for fusegen gen (a knob)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("specs", nargs="+")
    args = ap.parse_args()
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump:
        sys.exit("sass-rows: no cuobjdump: set CUOBJDUMP or `pip install nvidia-cuda-cuobjdump`")
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    lib = ctypes.CDLL(os.path.join(cuda, "lib64", "libnvrtc.so"))
    env = dict(os.environ)
    for kv in args.env:
        name, _, value = kv.partition("=")
        env[name] = value
    fusegen = os.path.join(args.build, "fusegen")
    print("| spec | layer | kernel | instructions | registers | spill bytes | BSSY | LDS runs before a store (longest, mean) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.specs:
            out = os.path.join(tmp, os.path.basename(spec))
            subprocess.run([fusegen, "gen", spec, "-o", out], env=env, check=True, capture_output=True)
            for cu in sorted(f for f in os.listdir(out) if f.endswith(".cu")):
                source = open(os.path.join(out, cu), "rb").read()
                kernels = re.findall(rb"__global__ void __launch_bounds__\(384, \d\) (?:__cluster_dims__\([^)]*\) )?"
                                     rb"(fg_pass\d+_conv)", source)
                if not kernels:
                    continue
                cubin, log = nvrtc_compile(lib, source, cu, args.arch)
                path = os.path.join(out, cu + ".cubin")
                open(path, "wb").write(cubin)
                for k in (k.decode() for k in kernels):
                    ops = sass(cuobjdump, path, k)
                    regs, spill = ptxas_resources(log, k)
                    longest, mean = lds_runs(ops)
                    print(f"| {os.path.basename(spec)} | {cu[:-3]} | {k} | {len(ops)} | {regs} | {spill} | "
                          f"{sum(op == 'BSSY' for op in ops)} | {longest}, {mean:.1f} |")


if __name__ == "__main__":
    main()
