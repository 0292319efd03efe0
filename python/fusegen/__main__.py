# SPDX-License-Identifier: Apache-2.0
"""`python -m fusegen export MODULE.py[:Class]`: a PyTorch module in a file -> a fusegen spec.

The `fusegen export` command of the CLI runs this (cli/cmd_export.c). See USAGE below and
docs/cli.md.
"""

import getopt
import importlib.util
import os
import sys

USAGE = """\
usage: fusegen export MODULE.py[:CLASS] [--input-shape N,C,H,W] [--eval] [--name NAME]
                      [-o SPEC.lua] [--weights FILE.safetensors] [--no-check]

Writes the fusegen spec of a PyTorch module defined in a Python file (one conv and the ops
after it), traced with torch.fx; parameters keep the module's state_dict names.

  MODULE.py[:CLASS]   the file and the nn.Module class in it (default: the class named Model,
                      else the file's only nn.Module subclass); the default class is built
                      with the arguments get_init_inputs() returns, if the file defines
                      that function (KernelBench's convention), a named one with none
  --input-shape SHAPE the example input's shape (default: the first tensor of the file's
                      get_inputs(), cut to two samples); the spec's batch is left to run time
  --eval              put the module in eval mode first (batch_norm then uses its running
                      statistics, dropout is the identity); by default it stays as built
  --name NAME         the layer's name (default: the class name)
  -o, --output FILE   write the spec there instead of on stdout
  --weights FILE      also write the module's parameters that the spec uses as safetensors
                      (needs the safetensors package), for fusegen run --weights
  --no-check          do not load the spec with libfusegen to check it

Exit status: 0 on success, 1 when the module cannot be exported (the message names the
torch.fx node and its source line), 2 on a usage error.
"""


def _usage_error(msg):
    sys.stderr.write(f"fusegen export: {msg}\nRun 'fusegen export --help' for usage.\n")
    return 2


def _load_class(path, class_name):
    """Imports the file as a module (its folder first on sys.path, for its own imports) and
    picks the class."""
    import torch

    if not os.path.isfile(path):
        raise FileNotFoundError(f"fusegen export: no such file: {path}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    modname = "fusegen_export_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    defined = [
        v
        for v in vars(mod).values()
        if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == modname
    ]
    if class_name:
        cls = getattr(mod, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            names = ", ".join(c.__name__ for c in defined) or "none"
            raise LookupError(f"fusegen export: {path} has no nn.Module class '{class_name}' (its classes: {names})")
    elif isinstance(getattr(mod, "Model", None), type) and issubclass(mod.Model, torch.nn.Module):
        cls = mod.Model
    elif len(defined) == 1:
        cls = defined[0]
    else:
        names = ", ".join(c.__name__ for c in defined) or "none"
        raise LookupError(f"fusegen export: name the class: {path}:CLASS (nn.Module classes defined there: {names})")
    return mod, cls


def export_main(argv):
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(USAGE)
        return 0
    try:
        opts, args = getopt.gnu_getopt(argv, "o:", ["input-shape=", "eval", "name=", "output=", "weights=", "no-check"])
    except getopt.GetoptError as e:
        return _usage_error(str(e))
    if len(args) != 1:
        return _usage_error("expects one MODULE.py[:CLASS]" if not args else f"unexpected arguments: {' '.join(args[1:])}")
    o = {}
    for k, v in opts:
        o[{"-o": "--output"}.get(k, k)] = v
    shape = None
    if "--input-shape" in o:
        try:
            shape = [int(d) for d in o["--input-shape"].split(",")]
            if len(shape) not in (4, 5) or min(shape) < 1:
                raise ValueError
        except ValueError:
            return _usage_error(f"--input-shape expects 4 or 5 positive integers, N,C,H,W or N,C,D,H,W (got '{o['--input-shape']}')")
    target = args[0]
    path, _, class_name = target.partition(":") if not os.path.isfile(target) else (target, "", "")

    try:
        import torch
    except ImportError:
        sys.stderr.write("fusegen export: needs PyTorch (pip install torch)\n")
        return 1
    from . import ExportError, export

    try:
        mod, cls = _load_class(path, class_name)
        init = mod.get_init_inputs() if not class_name and callable(getattr(mod, "get_init_inputs", None)) else []
        try:
            module = cls(*init)
        except TypeError as e:
            sys.stderr.write(f"fusegen export: cannot build {cls.__name__}({', '.join(map(repr, init))}): {e}\n")
            return 1
        if "--eval" in o:
            module.eval()
        if shape is not None:
            example = torch.rand(shape)
        elif callable(getattr(mod, "get_inputs", None)):
            inputs = mod.get_inputs()
            example = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
            # only the shapes matter: two samples (batch_norm in training mode needs more than
            # one) spare a run of the whole batch on the CPU
            example = example[:2]
        else:
            return _usage_error(f"{path} defines no get_inputs(): give --input-shape N,C,H,W")
        text = export(module, example, name=o.get("--name"), check="--no-check" not in o)
    except (ExportError, FileNotFoundError, LookupError) as e:
        sys.stderr.write(f"{e}\n")
        return 1
    if "--output" in o:
        with open(o["--output"], "w", encoding="utf-8") as f:
            f.write(text)
        sys.stderr.write(f"fusegen export: wrote {o['--output']}\n")
    else:
        sys.stdout.write(text)
    if "--weights" in o:
        try:
            from safetensors.torch import save_file
        except ImportError:
            sys.stderr.write("fusegen export: --weights needs the safetensors package (pip install safetensors)\n")
            return 1
        from . import Context, Layer

        with Context(device=-1, cache_path="") as ctx:
            keys = [n for n, _ in Layer(text, context=ctx).params]
        sd = module.state_dict()
        save_file({k: sd[k].detach().float().contiguous().cpu() for k in keys}, o["--weights"])
        sys.stderr.write(f"fusegen export: wrote {o['--weights']} ({len(keys)} tensors)\n")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write("usage: python -m fusegen export MODULE.py[:CLASS] [options]   (see --help of export)\n")
        return 0 if argv else 2
    if argv[0] == "export":
        return export_main(argv[1:])
    sys.stderr.write(f"fusegen: unknown command '{argv[0]}' (python -m fusegen has: export)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
