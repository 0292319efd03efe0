#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The conv engines against each other on the sweep's shapes: what the planner's choice costs.

    python3 bench/engine-choice.py --build build --out OUTDIR [--only NAME,...] [--engines auto,fma,mma,wgmma]

For every entry of bench/sweep.py (both precisions) and every engine that can run it
(FUSEGEN_CONV_ENGINE=fma|mma|wgmma forces one; auto is the planner's choice), `fusegen bench`
times the whole layer at the entry's batch (median of CUDA-event timings, L2 flushed; no
PyTorch in the process, so it is quick). An engine the shape does not admit falls back to
another: the table names the engine each plan really used (from `fusegen plan`), and a
forced run whose plan is the same as another's is not timed twice. Where the runtime times two
engines at the first run (runtime/tuning.h), auto's engine reads "X/Y timed" and its time is
the winner's. The last columns say
which engine was fastest and how much slower auto's choice was: the measured ground truth
for the planner's cost model.
"""

import argparse
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from sweep import ENTRIES  # noqa: E402

ENGINE_OF_PLAN = (("wgmma tensor cores", "wgmma"), ("cuDNN", "cudnn"), ("3xTF32 tensor cores", "mma"),
                  ("TF32 tensor cores", "mma"), ("outputs x", "fma"))


def engine_used(fg, spec, env):
    """The engine of the plan, and the plan's text; "X/Y timed" where the runtime times two
    engines at the first run (fusegen plan's "engine:" line; auto's time is then the winner's)."""
    text = subprocess.run([fg, "plan", "--arch", "sm_90a", spec], env=env, capture_output=True, text=True).stdout
    conv = text.split(" conv ", 1)[1] if " conv " in text else text
    name = next((n for marker, n in ENGINE_OF_PLAN if marker in conv), "?")
    timed = [l for l in text.splitlines() if l.startswith("engine: ")]
    if timed and " or wgmma" in timed[0]:
        name += "/wgmma timed"
    elif timed and "wgmma or " in timed[0]:
        name = "wgmma/" + ("mma" if "mma.sync" in timed[0] else "fma") + " timed"
    return name, text


def bench(fg, spec, batch, env, iters):
    r = subprocess.run([fg, "bench", spec, "--batch", str(batch), "--iters", str(iters), "--warmup", "3",
                        "--fma-tflops", "64.7", "--copy-tbs", "3.84"], env=env, capture_output=True, text=True)
    m = re.search(r"median ([0-9.]+) ms", r.stdout + r.stderr)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--engines", default="auto,fma,mma,wgmma")
    ap.add_argument("--iters", type=int, default=15)
    args = ap.parse_args()
    fg = os.path.join(args.build, "fusegen")
    specs = os.path.join(args.out, "specs")
    os.makedirs(specs, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    engines = args.engines.split(",")
    entries = [e for e in ENTRIES if not only or e.name in only]
    paths = []
    for e in entries:
        for prec in ("fp32", "tf32"):
            paths.append(os.path.join(specs, f"{e.name}.{prec}.lua"))
            with open(paths[-1], "w") as f:
                f.write(e.spec(prec))
    # every engine's kernels compiled first, in parallel (`fusegen build`), into one cache that
    # the timed runs then load from
    os.environ.setdefault("FUSEGEN_CACHE_DIR", os.path.join(args.out, "cache"))
    for eng in engines:
        env = dict(os.environ)
        if eng != "auto":
            env["FUSEGEN_CONV_ENGINE"] = eng
        subprocess.run([fg, "build", "--arch", "sm_90a", "-j", str(os.cpu_count() or 2)] + paths, env=env,
                       stdout=subprocess.DEVNULL)
    rows = ["| entry | precision | auto's engine | " + " | ".join(f"{e} ms" for e in engines) +
            " | fastest | auto / fastest |", "|---|---|---|" + "---|" * len(engines) + "---|---|"]
    for e in entries:
        for prec in ("fp32", "tf32"):
            spec = os.path.join(specs, f"{e.name}.{prec}.lua")
            times, used, seen = {}, {}, {}
            for eng in engines:
                env = dict(os.environ)
                if eng != "auto":
                    env["FUSEGEN_CONV_ENGINE"] = eng
                name, plan = engine_used(fg, spec, env)
                used[eng] = name
                if plan in seen:  # the same plan as another engine's: same time
                    times[eng] = times[seen[plan]]
                    continue
                seen[plan] = eng
                times[eng] = bench(fg, spec, e.batch, env, args.iters)
            measured = {used[k]: v for k, v in times.items() if v is not None and k != "auto"}
            best = min(measured, key=measured.get) if measured else "?"
            ratio = (times["auto"] / measured[best]) if measured and times.get("auto") else float("nan")
            cells = []
            for eng in engines:
                t = times.get(eng)
                txt = "-" if t is None else f"{t:.3f}"
                if eng != "auto" and used[eng] != eng:
                    txt += f" ({used[eng]})"
                cells.append(txt)
            row = f"| {e.describe()} | {prec} | {used.get('auto', '?')} | " + " | ".join(cells) + f" | {best} | {ratio:.2f} |"
            rows.append(row)
            print(row, flush=True)
    with open(os.path.join(args.out, "engine-choice.md"), "w") as f:
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
