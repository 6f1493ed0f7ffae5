"""Benchmark of the DistIR text format: parse, print and memory per op.

Not a test: it prints numbers. Run from the repository root::

    .venv/bin/python benchmarks/bench_text.py [--ops 100000] [--repeats 5]

It generates a program of ``--ops`` op statements (a mix of ONNX, training and communication
ops with attributes, dense literals, quoted names, and calls to several generic functions),
then reports the median over ``--repeats`` runs of:

- parse: ``distir.parse`` (lex, LALR parse, name resolution and ``verify``), in ops/s;
- parse (no verify): ``parse_module`` alone, in ops/s;
- print: ``distir.dumps``, in ops/s;
- memory: bytes held by the parsed module per op (``tracemalloc``, after a full collection),
  and the peak allocated during parsing per op (one run: allocation is deterministic, and
  tracing makes parsing several times slower).

Times are wall-clock; the load average is printed too, since other work on the machine slows
every figure.

Targets (on a 2-core machine): parse >= 25,000 ops/s, print >= 200,000 ops/s, <= 1 KB/op.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import distir  # noqa: E402
from distir.ir.parser import parse_module  # noqa: E402

TARGETS = {"parse": 25_000.0, "print": 200_000.0, "bytes_per_op": 1024.0}

_HELPERS = """\
// Generic helpers: types are inferred at each call.
func @layer(%w, %x, %b) {
  %h = Gemm(%x, %w, %b, alpha=1.0, beta=0.5, transB=1)
  %a = Relu(%h)
  return %a, %h
}

func @layer_grad(%w, %x, %h, %da) {
  %dh = ReluGrad(%h, %da)
  %dx, %dw = MatMulGrad(%x, %w, %dh)
  return %dx, %dw
}

func @norm(%x, %g, %b) {
  %y = LayerNormalization(%x, %g, %b, axis=-1, epsilon=1e-05)
  %z = Gelu(%y, approximate="tanh")
  return %z
}
"""

_HELPER_OPS = 2 + 2 + 2

# One block of @main: (text, number of op statements). ``{i}`` is the block index.
_BLOCK = """\
  %x{i}_0, %x{i}_1 = Split(%x{p}, axis=0, num_outputs=2)
  %"gpu_0/fc{i}/h" = MatMul(%x{i}_0, %w1)
  %a{i} = Add(%"gpu_0/fc{i}/h", %b1)
  %r{i} = Relu(%a{i})
  %c{i} = Constant(value=dense<Int64>[1, -1], device=0)
  %t{i} = Reshape(%r{i}, %c{i})
  %l{i}, %hl{i} = call @layer(%w1, %x{i}_1, %b1)
  %n{i} = call @norm(%l{i}, %g, %b1)
  %f{i} = Cast(%n{i}, to=Float16)
  %s{i} = Send(%f{i}, device=1)
  %d{i}, _ = Dropout(%t{i}, seed=7)
  %dx{i}, %dw{i} = call @layer_grad(%w1, %x{i}_1, %hl{i}, %l{i})
  %m{i}_0, %m{i}_1 = MPIAllreduce(%dw{i}, %s{i})
  %u{i} = SGDOptimizer(%w1, %m{i}_0, lr=0.01)
  %x{i} = Concat(%d{i}, %dx{i}, axis=0)
"""
_BLOCK_OPS = _BLOCK.count("\n")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _machine import cpu_model  # noqa: E402


def make_program(n_ops: int) -> tuple[str, int]:
    """The text of a program with about ``n_ops`` op statements, and its exact op count."""
    n_blocks = max(1, (n_ops - _HELPER_OPS) // _BLOCK_OPS)
    parts = [_HELPERS, "\n// The entry function.\n",
             "func @main(%w1: Tensor[Float32, (64, 64), 0],\n"
             "           %b1: Tensor[Float32, (64,), 0],\n"
             "           %g: Tensor[Float32, (64,), 0],\n"
             "           %x0: Tensor[Float32, (32, 64), 0]) {\n"]
    parts.append("  %x0_init = Identity(%x0)\n")
    count = _HELPER_OPS + 1
    prev = "0_init"
    for i in range(1, n_blocks + 1):
        parts.append(_BLOCK.format(i=i, p=prev))
        prev = str(i)
        count += _BLOCK_OPS
    while count < n_ops:
        parts.append(f"  %x{prev}_pad{count} = Identity(%x{prev})\n")
        count += 1
    parts.append(f"  return %x{prev}\n}}\n")
    return "".join(parts), count


def _time(fn: object, repeats: int) -> tuple[float, float]:
    """Median wall-clock and CPU seconds of ``fn()`` over ``repeats`` runs."""
    wall, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        fn()  # type: ignore[operator]
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def _memory(text: str) -> tuple[int, int]:
    """(bytes held by the parsed module, peak bytes allocated while parsing)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    m = distir.parse(text, "bench.dir")
    gc.collect()
    cur, pk = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del m
    return cur - base, pk - base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=100_000, help="op statements in the program")
    ap.add_argument("--repeats", type=int, default=5, help="runs per measurement (median)")
    args = ap.parse_args(argv)

    text, n = make_program(args.ops)
    distir.parse(text, "bench.dir")  # warm up: builds the LALR tables once
    m = distir.parse(text, "bench.dir")
    assert sum(len(f.ops) for f in m) == n, "op count mismatch"
    printed = distir.dumps(m)
    assert distir.dumps(distir.parse(printed)) == printed, "round trip failed"

    t_parse = _time(lambda: distir.parse(text, "bench.dir"), args.repeats)
    t_raw = _time(lambda: parse_module(text, "bench.dir"), args.repeats)
    t_print = _time(lambda: distir.dumps(m), args.repeats)
    held, peak = _memory(text)

    def rate(t: tuple[float, float], target: float | None) -> tuple:
        ok = None if target is None else n / t[0] >= target
        return (f"{n / t[0]:,.0f} ops/s", f"{n / t[1]:,.0f} ops/s", f"{t[0] * 1e3:,.1f} ms",
                "" if target is None else f">= {target:,.0f} ops/s", ok)

    def mem(b: int, target: float | None) -> tuple:
        ok = None if target is None else b / n <= target
        return (f"{b / n:,.0f} B/op", "", f"{b / 2**20:,.1f} MiB",
                "" if target is None else f"<= {target:,.0f} B/op", ok)

    rows = [
        ("parse + verify", *rate(t_parse, TARGETS["parse"])),
        ("parse (no verify)", *rate(t_raw, None)),
        ("print", *rate(t_print, TARGETS["print"])),
        ("memory held", *mem(held, TARGETS["bytes_per_op"])),
        ("memory peak (parse)", *mem(peak, None)),
    ]
    print(f"distir text benchmark: {n:,} ops in {len(m)} functions, "
          f"{len(text) / 2**20:.1f} MiB of text; times are medians of {args.repeats} runs")
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(
        os, "getloadavg") else ""
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {cpu_model()}{load}")
    head = ("measure", "rate (wall)", "rate (cpu)", "total (wall)", "target")
    w = [max(len(str(r[k])) for r in [head, *rows]) for k in range(5)]
    print("  ".join(h.ljust(x) for h, x in zip(head, w, strict=True)) + "  met")
    for r in rows:
        ok = "" if r[5] is None else ("yes" if r[5] else "NO")
        print("  ".join(str(c).ljust(x) for c, x in zip(r[:5], w, strict=True)) + "  " + ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
