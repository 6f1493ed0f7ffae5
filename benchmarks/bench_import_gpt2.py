"""Benchmark of model import: building, importing and type-propagating the GPT-2 presets.

Not a test: it prints numbers. Run from the repository root::

    .venv/bin/python benchmarks/bench_import_gpt2.py [--preset gpt2-175b ...] [--repeats 3]

For each preset (default: ``gpt2-175b``) it reports the median over ``--repeats`` runs of

- build: ``GPT2Config.onnx_model()``, the ONNX graph with weights as graph inputs;
- import: ``distir.import_onnx`` of that ``ModelProto``;
- types: ``distir.infer_types`` of the imported ``@main`` (mixed abstract/concrete type
  propagation: the ``Shape`` chains are evaluated on concrete values);

and the total of the first run (cold: it also loads the rule modules). One more run under
``tracemalloc`` gives the peak of Python allocations during build + import + type
propagation, and the number of values of ``@main`` whose shape type propagation found
(which must be all of them). ``tracemalloc`` does not see the protobuf objects of the ONNX
model (they live in C++); ``max RSS``, the process's peak resident set
(``resource.getrusage``, interpreter and libraries included), does. ``RSS before`` is that
figure after the imports, before the first build.

Target: the 175B preset builds, imports and type-propagates in seconds (< 10 s in all) and
in less than 1 GB of memory.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import onnx  # noqa: E402, F401  (imported before the timings start)

import distir  # noqa: E402
from distir.analysis import type_env  # noqa: E402
from distir.analysis.values import type_of  # noqa: E402
from distir.importers.onnx import import_onnx  # noqa: E402
from distir.ir.types import TensorType  # noqa: E402
from distir.models import presets  # noqa: E402

TARGET_SECONDS = 10.0
TARGET_BYTES = 1 << 30


def _maxrss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024  # Linux reports KiB


def _once(cfg: presets.ModelConfig) -> tuple[float, float, float, distir.Function]:
    t0 = time.perf_counter()
    model = cfg.onnx_model()  # type: ignore[union-attr]
    t1 = time.perf_counter()
    fn = import_onnx(model).entry
    t2 = time.perf_counter()
    distir.infer_types(fn)
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, fn


def bench(name: str, repeats: int, batch_size: int | None) -> dict[str, float]:
    cfg = presets.get(name, **({} if batch_size is None else {"batch_size": batch_size}))
    times: list[tuple[float, float, float]] = []
    fn = None
    for _ in range(repeats):
        fn = None
        gc.collect()
        *t, fn = _once(cfg)
        times.append((t[0], t[1], t[2]))
    assert fn is not None
    n_ops = len(fn.ops)

    del fn
    gc.collect()
    tracemalloc.start()
    *_, fn = _once(cfg)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    env = type_env(fn)
    values = list(fn.params) + [v for op in fn.ops for v in op.outputs]
    known = sum(1 for v in values if isinstance(type_of(env[v]), TensorType))
    build, imp, types = (statistics.median(x) for x in zip(*times, strict=True))
    return {"ops": n_ops, "params": len(fn.params), "values": len(values), "known": known,
            "build_s": build, "import_s": imp, "types_s": types,
            "total_s": build + imp + types, "first_s": sum(times[0]), "peak_bytes": peak,
            "weights": cfg.num_params}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", nargs="+", default=["gpt2-175b"],
                    choices=presets.names("gpt2"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=None,
                    help=f"default: the presets' ({presets.DEFAULT_GPT2_BATCH})")
    args = ap.parse_args()

    print(f"python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} cores, onnx {onnx.__version__}")
    rss0 = _maxrss_bytes()
    print(f"RSS before: {rss0 / 2**20:.0f} MiB")
    ok = True
    for name in args.preset:
        r = bench(name, args.repeats, args.batch_size)
        print(f"{name}: {r['weights'] / 1e9:.1f}e9 weights, {r['ops']} ops, "
              f"{r['params']} params; shapes known for {r['known']}/{r['values']} values")
        print(f"  build {r['build_s']:.3f} s, import {r['import_s']:.3f} s, "
              f"types {r['types_s']:.3f} s, total {r['total_s']:.3f} s "
              f"(median of {args.repeats}; first run {r['first_s']:.3f} s)")
        print(f"  peak traced allocations {r['peak_bytes'] / 2**20:.1f} MiB")
        ok &= (r["known"] == r["values"] and r["total_s"] < TARGET_SECONDS
               and r["peak_bytes"] < TARGET_BYTES)
    rss = _maxrss_bytes()
    print(f"max RSS: {rss / 2**20:.0f} MiB (of which {(rss - rss0) / 2**20:.0f} MiB after "
          "the imports)")
    ok &= rss < TARGET_BYTES
    print("targets met" if ok else "TARGETS MISSED")


if __name__ == "__main__":
    main()
