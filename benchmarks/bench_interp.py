"""Benchmark of the interpreter loop: type propagation and reference execution, in ops/s.

Not a test: it prints numbers. Run from the repository root::

    .venv/bin/python benchmarks/bench_interp.py [--ops 100000] [--repeats 5] [--profile]

It builds programs of about ``--ops`` ops with abstract (typed) inputs, made of a
transformer-like block repeated: MatMul, Add, Relu, Softmax, and a Reshape whose target shape
is computed at run time (Shape -> Gather -> Unsqueeze -> Concat, as exported GPT-2 graphs do),
plus the Constants an exporter emits for each use. Two programs:

- flat: every op in ``@main`` (a 100,000-statement function);
- calls: ``@main`` calls three generic functions (a block, a head split, an MLP) many times;
  ops are counted as executed, a call counting as its callee's ops.

and reports the median over ``--repeats`` runs of:

- type propagation: ``infer_types`` (a fresh ``TypeInterpreter`` each run, so its memo tables
  start empty and warm only within the run, as in real use), in ops/s;
- reference execution: ``execute`` without the type check (``NumpyInterpreter`` on numpy
  arrays of small shapes, ``--exec-ops`` ops), in ops/s.

Target (on a 2-core machine): type propagation >= 150,000 ops/s on both programs.
``--profile`` prints the top of a cProfile of one type propagation of the flat program.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from distir.analysis import NumpyInterpreter, infer_types, random_inputs  # noqa: E402
from distir.ir import DType, Function, FunctionBuilder, TensorType, Value  # noqa: E402

TARGET = 150_000.0


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _machine import cpu_model  # noqa: E402


def _i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def _block(b: FunctionBuilder, x: Value, w1: Value, b1: Value, w2: Value, b2: Value) -> Value:
    """One block of 19 ops: MLP, residual, and a run-time-shaped Reshape around Softmax."""
    h = b.op("MatMul", x, w1)
    a = b.op("Add", h, b1)
    r = b.op("Relu", a)
    o = b.op("MatMul", r, w2)
    y = b.op("Add", o, b2)
    s = b.op("Shape", y)
    i2 = b.op("Constant", value=np.array(2, dtype=np.int64))
    d = b.op("Gather", s, i2, axis=0)
    ax = b.op("Constant", value=_i64(0))
    du = b.op("Unsqueeze", d, ax)
    m1 = b.op("Constant", value=_i64(-1))
    shp = b.op("Concat", m1, du, axis=0)
    flat = b.op("Reshape", y, shp)
    sm = b.op("Softmax", flat, axis=-1)
    back_shape = b.op("Shape", y)
    back = b.op("Reshape", sm, back_shape)
    z = b.op("Add", back, x)
    t = b.op("Sigmoid", z)
    return b.op("Mul", t, z)


BLOCK_OPS = 19


def _heads(b: FunctionBuilder, x: Value, n_head: int) -> Value:
    """Split the last axis into heads with a shape from Shape -> Gather -> Div."""
    s = b.op("Shape", x)
    parts = []
    for k in (0, 1):
        i = b.op("Constant", value=np.array(k, dtype=np.int64))
        g = b.op("Gather", s, i, axis=0)
        parts.append(b.op("Unsqueeze", g, b.op("Constant", value=_i64(0))))
    i = b.op("Constant", value=np.array(2, dtype=np.int64))
    d = b.op("Gather", s, i, axis=0)
    nh = b.op("Constant", value=np.array(n_head, dtype=np.int64))
    hd = b.op("Div", d, nh)
    shape = b.op("Concat", *parts, b.op("Constant", value=_i64(n_head)),
                 b.op("Unsqueeze", hd, b.op("Constant", value=_i64(0))), axis=0)
    r = b.op("Reshape", x, shape)
    return b.op("Transpose", r, perm=(0, 2, 1, 3))


def _params(b: FunctionBuilder, batch: int, seq: int, d: int, f: int) -> list[Value]:
    F = DType.Float32
    return [b.param("x", TensorType(F, (batch, seq, d), 0)),
            b.param("w1", TensorType(F, (d, f), 0)), b.param("b1", TensorType(F, (f,), 0)),
            b.param("w2", TensorType(F, (f, d), 0)), b.param("b2", TensorType(F, (d,), 0))]


def flat_program(n_ops: int, batch: int, seq: int, d: int) -> Function:
    """``@main`` of about ``n_ops`` ops: the block repeated, all inline."""
    b = FunctionBuilder("main")
    x, w1, b1, w2, b2 = _params(b, batch, seq, d, 4 * d)
    for _ in range(max(1, n_ops // BLOCK_OPS)):
        x = _block(b, x, w1, b1, w2, b2)
    while len(b.ops) < n_ops:
        x = b.op("Identity", x)
    return b.ret(x)


def distinct_program(n_ops: int, batch: int, seq: int, d: int) -> Function:
    """The flat program, but each block reads its own input of another sequence length, so
    no two blocks share argument types: every op misses the memo table (the worst case)."""
    b = FunctionBuilder("main")
    _, w1, b1, w2, b2 = _params(b, batch, seq, d, 4 * d)
    for i in range(max(1, n_ops // BLOCK_OPS)):
        x = b.param(f"x{i}", TensorType(DType.Float32, (batch, i + 1, d), 0))
        x = _block(b, x, w1, b1, w2, b2)
    while len(b.ops) < n_ops:
        x = b.op("Identity", x)
    return b.ret(x)


def call_program(n_ops: int, batch: int, seq: int, d: int) -> Function:
    """``@main`` calling three generic functions; about ``n_ops`` ops executed."""
    fb = FunctionBuilder("block")
    fb_args = [fb.param(n) for n in ("x", "w1", "b1", "w2", "b2")]
    block = fb.ret(_block(fb, *fb_args))
    hb = FunctionBuilder("heads")
    heads = hb.ret(_heads(hb, hb.param("x"), 4))
    mb = FunctionBuilder("mlp")
    mx, mw, mbias = mb.param("x"), mb.param("w"), mb.param("b")
    mlp = mb.ret(mb.op("Relu", mb.op("Add", mb.op("MatMul", mx, mw), mbias)))

    b = FunctionBuilder("main")
    x, w1, b1, w2, b2 = _params(b, batch, seq, d, 4 * d)
    w3 = b.param("w3", TensorType(DType.Float32, (d, d), 0))
    per_round = len(block.ops) + len(heads.ops) + len(mlp.ops) + 2  # + Softmax, Add
    for _ in range(max(1, n_ops // per_round)):
        x = b.call(block, x, w1, b1, w2, b2)
        hx = b.call(heads, x)
        b.op("Softmax", hx, axis=-1)
        x = b.op("Add", x, b.call(mlp, x, w3, b2))
    return b.ret(x)


def _time(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median wall-clock and median process CPU seconds of ``repeats`` calls. The CPU time
    is the steadier figure when other work shares the cores."""
    wall, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return statistics.median(wall), statistics.median(cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=100_000, help="ops per program")
    ap.add_argument("--exec-ops", type=int, default=20_000,
                    help="ops per program for reference execution")
    ap.add_argument("--repeats", type=int, default=5, help="runs per measurement (median)")
    ap.add_argument("--profile", action="store_true",
                    help="print a cProfile of one type propagation of the flat program")
    args = ap.parse_args(argv)

    big = dict(batch=8, seq=128, d=768)
    small = dict(batch=2, seq=4, d=8)
    progs = {"flat": flat_program(args.ops, **big), "calls": call_program(args.ops, **big),
             "distinct shapes (worst case)": distinct_program(args.ops, **big)}
    rows = []
    for name, fn in progs.items():
        n = fn.num_ops(inline_calls=True)
        infer_types(fn)  # imports the rule modules once; later runs start with empty caches
        t, c = _time(lambda fn=fn: infer_types(fn), args.repeats)
        rows.append((f"type propagation, {name}", n, t, c,
                     n / t >= TARGET if "worst" not in name else None))
    for name, maker in (("flat", flat_program), ("calls", call_program)):
        fn = maker(args.exec_ops, **small)
        n = fn.num_ops(inline_calls=True)
        # Small weights keep the values finite through thousands of blocks.
        inputs = [a if a.ndim == 3 else a * np.float32(0.05) for a in random_inputs(fn, seed=0)]
        NumpyInterpreter().run(fn, inputs)  # builds the kernels once, as a warm-up
        t, c = _time(lambda fn=fn, i=inputs: NumpyInterpreter().run(fn, i),
                     max(1, min(3, args.repeats)))
        rows.append((f"reference execution, {name} (small shapes)", n, t, c, None))

    print(f"distir interpreter benchmark: median of {args.repeats} "
          f"(execution: {max(1, min(3, args.repeats))})")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {cpu_model()}")
    head = ("measure", "ops", "rate (wall)", "total", "rate (CPU time)", "target")
    table = [(m, f"{n:,}", f"{n / t:,.0f} ops/s", f"{t * 1e3:,.1f} ms", f"{n / c:,.0f} ops/s",
              "" if ok is None else f">= {TARGET:,.0f} ops/s", ok) for m, n, t, c, ok in rows]
    w = [max(len(h), *(len(r[k]) for r in table)) for k, h in enumerate(head)]
    print("  ".join(h.ljust(x) for h, x in zip(head, w, strict=True)) + "  ok")
    for r in table:
        ok = "" if r[6] is None else ("yes" if r[6] else "NO")
        print("  ".join(c.ljust(x) for c, x in zip(r[:6], w, strict=True)) + "  " + ok)

    if args.profile:
        fn = progs["flat"]
        prof = cProfile.Profile()
        prof.enable()
        infer_types(fn)
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
        print(buf.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
