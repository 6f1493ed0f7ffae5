"""``distir execute``: run a program with the reference executor and summarize its outputs.

Inputs are random (seeded; normal for floats, small non-negative integers otherwise) unless
``--inputs`` gives one ``.npy`` file per free parameter of the entry function, in order.
Each output is reported with its name, shape, dtype and min/max/mean/std; ``--out DIR``
also saves it as ``DIR/out_<i>_<name>.npy``; ``--json`` prints one JSON object instead of
the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("execute", help="run a .dir program with the reference executor",
                       description="Run the entry function of a .dir file with the numpy "
                       "reference executor (after type and placement checks) and print a "
                       "summary of each output.")
    p.add_argument("file", help="a .dir file")
    p.add_argument("--inputs", nargs="+", metavar="A.npy", default=None,
                   help="one .npy file per free parameter of the entry function, in order "
                   "(default: random inputs)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random inputs, when --inputs is not given (default 0)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="save each output as DIR/out_<i>_<name>.npy")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on standard output and nothing else")
    p.set_defaults(func=run_execute)


def run_execute(args: argparse.Namespace) -> int:
    import distir
    from distir.analysis import execute, random_inputs

    m = distir.load(args.file)
    fn = m.entry
    if fn.is_typed:  # refuse, before allocating anything, what this machine cannot hold
        from distir.analysis.api import check_host_memory

        check_host_memory(fn)
    if args.inputs is None:
        inputs = random_inputs(fn, args.seed)
    else:
        inputs = load_inputs(fn, args.inputs)
    outs = execute(fn, inputs)
    names = [output_name(v.name, i) for i, v in enumerate(fn.returns)]
    saved: list[str | None] = [None] * len(outs)
    if args.out is not None:
        saved = save_outputs(args.out, names, outs)
    rows = [summarize(n, o) for n, o in zip(names, outs)]
    if args.json:
        for r, path in zip(rows, saved):
            if path is not None:
                r["file"] = path
        doc = {"file": args.file, "function": fn.name,
               "inputs": "random" if args.inputs is None else list(args.inputs),
               "seed": args.seed if args.inputs is None else None, "outputs": rows}
        sys.stdout.write(json.dumps(doc) + "\n")
    else:
        sys.stdout.write(format_table(rows))
        if args.out is not None:
            sys.stdout.write(f"saved {len(outs)} output{'s' * (len(outs) != 1)} to "
                             f"{args.out}\n")
    return 0


def load_inputs(fn: Any, paths: list[str]) -> list[Any]:
    """The arrays of ``paths``, checked against the declared types of ``fn``'s free
    parameters (or of all its parameters, when that many are given)."""
    import numpy as np

    from distir.errors import ConfigError, ExecutionError
    from distir.ir.types import DType, TensorType

    free = [p for p in fn.params if p.name not in fn.initializers]
    if len(paths) == len(free):
        params = free
    elif len(paths) == len(fn.params):
        params = list(fn.params)
    else:
        names = ", ".join("%" + str(p.name) for p in free)
        raise ExecutionError(f"@{fn.name} takes {len(free)} input{'s' * (len(free) != 1)} "
                             f"({names}), {len(paths)} given with --inputs", fn.loc)
    arrays = []
    for path, p in zip(paths, params):
        try:
            a = np.load(path, allow_pickle=False)
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - a corrupt or non-.npy file
            raise ConfigError(f"{path}: not a readable .npy file ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''})") from None
        if not isinstance(a, np.ndarray):
            raise ConfigError(f"{path}: holds several arrays (.npz); give one .npy per input")
        t = p.type
        if isinstance(t, TensorType):
            try:
                dt = DType.from_np(a.dtype)
            except KeyError:
                dt = None
            if tuple(a.shape) != t.shape or dt is not t.dtype:
                raise ExecutionError(
                    f"{path}: %{p.name} of @{fn.name} is declared {t}, but the file holds "
                    f"{a.dtype} of shape {tuple(a.shape)}: give an array of dtype "
                    f"{t.dtype.np} and shape {t.shape}", p.loc)
        arrays.append(a)
    return arrays


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def output_name(name: str | None, i: int) -> str:
    """A printable name for result ``i`` (its name hint, or ``out<i>``)."""
    return name if name else f"out{i}"


def save_outputs(out_dir: str, names: list[str], outs: list[Any]) -> list[str | None]:
    """Save each output as ``out_<i>_<name>.npy`` (names made file-safe); the paths."""
    import numpy as np

    os.makedirs(out_dir, exist_ok=True)
    paths: list[str | None] = []
    for i, (n, o) in enumerate(zip(names, outs)):
        path = os.path.join(out_dir, f"out_{i}_{_UNSAFE.sub('_', n).strip('.') or 'out'}.npy")
        np.save(path, o, allow_pickle=False)
        paths.append(path)
    return paths


def summarize(name: str, a: Any) -> dict[str, Any]:
    """Name, shape, dtype and summary statistics (computed in float64) of one output;
    non-finite statistics are the strings "nan", "inf", "-inf" (valid JSON)."""
    import numpy as np

    from distir.ir.types import DType

    a = np.asarray(a)
    try:
        dtype = DType.from_np(a.dtype).value
    except KeyError:
        dtype = str(a.dtype)
    row: dict[str, Any] = {"name": name, "shape": list(a.shape), "dtype": dtype}
    if a.size == 0:
        row.update(min=None, max=None, mean=None, std=None)
        return row
    x = a.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        stats = {"min": x.min(), "max": x.max(), "mean": x.mean(), "std": x.std()}
    for k, v in stats.items():
        v = float(v)
        row[k] = v if math.isfinite(v) else ("nan" if math.isnan(v) else
                                             ("inf" if v > 0 else "-inf"))
    return row


def format_table(rows: list[dict[str, Any]]) -> str:
    """The outputs as an aligned text table, one line per output."""
    header = ["#", "name", "shape", "dtype", "min", "max", "mean", "std"]

    def num(v: Any) -> str:
        return "-" if v is None else (v if isinstance(v, str) else f"{v:.6g}")

    def shape(s: list[int]) -> str:
        return "(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"

    body = [[str(i), r["name"], shape(r["shape"]), r["dtype"], num(r["min"]), num(r["max"]),
             num(r["mean"]), num(r["std"])] for i, r in enumerate(rows)]
    widths = [max(len(row[c]) for row in [header] + body) for c in range(len(header))]
    right = {0, 4, 5, 6, 7}
    lines = ["  ".join(cell.rjust(w) if c in right else cell.ljust(w)
                       for c, (cell, w) in enumerate(zip(row, widths))).rstrip()
             for row in [header] + body]
    return "\n".join(lines) + "\n"
