"""Programs that isolate the Adam updates of a measured training step (see README.md).

From a step's ``program.dir`` (one rank's program, as ``grid_search.study explain`` writes
it), writes two programs of its ``AdamOptimizer`` updates alone, in the step's order and
with its shapes and dtypes, each update reading fresh inputs:

- ``adam_only.dir``: the updates and nothing else;
- ``adam_big.dir``: the same, with ``--big`` GiB of other inputs alive through the step (as
  a training step's activations and weights are), handed back unchanged;
- with ``--inputs``, ``adam_only``'s inputs as a training step has them, one ``.npy`` file
  per parameter in order (``in_00000.npy``, ...): the step count 1, second moments of
  squares, the rest normal (``distir run`` draws every float input from a normal
  distribution otherwise).

    python adam_programs.py STEP.dir OUT_DIR [--big 16] [--inputs]

Run each with ``distir run FILE --cuda-graph --profile DIR`` and read the kernels with
``adam_kernels.py``.
"""

from __future__ import annotations

import argparse
import os

from distir.analysis import type_env, type_of
from distir.ir import DType, FunctionBuilder, Module, TensorType, dumps, parse


def adam_types(path: str) -> list[tuple[TensorType, dict]]:
    """The weight type and attributes of every ``AdamOptimizer`` of the program, in order
    (calls followed where they are made)."""
    with open(path, encoding="utf-8") as f:
        mod = parse(f.read(), path)
    env = type_env(mod.entry)  # (the values of called functions recorded too)
    out: list[tuple[TensorType, dict]] = []

    def walk(fn) -> None:  # noqa: ANN001 - a probe
        for op in fn.ops:
            if op.callee is not None:
                walk(op.callee)
            elif op.op_type == "AdamOptimizer":
                out.append((type_of(env[op.inputs[0]]), dict(op.attrs)))

    walk(mod.entry)
    return out


def write(updates: list[tuple[TensorType, dict]], path: str, big_gib: int) -> None:
    b = FunctionBuilder("main")
    step = b.param("step", TensorType(DType.Float32, (), 0))
    rets = []
    for i, (t, attrs) in enumerate(updates):
        w, g, m, v = (b.param(f"{r}{i}", t) for r in ("w", "g", "m", "v"))
        rets.extend(b.op("AdamOptimizer", w, g, m, v, step, name=(f"w{i}n", f"m{i}n", f"v{i}n"),
                         **attrs))
    for j in range(big_gib):
        rets.append(b.param(f"big{j}", TensorType(DType.Float32, (256, 1024, 1024), 0)))
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps(Module([b.ret(*rets)])))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step")
    p.add_argument("out")
    p.add_argument("--big", type=int, default=16, help="GiB of other live inputs")
    p.add_argument("--inputs", action="store_true", help="write adam_only's inputs too")
    a = p.parse_args()
    ups = adam_types(a.step)
    os.makedirs(a.out, exist_ok=True)
    write(ups, os.path.join(a.out, "adam_only.dir"), 0)
    write(ups, os.path.join(a.out, "adam_big.dir"), a.big)
    if a.inputs:
        import numpy as np

        rng = np.random.default_rng(0)
        arrays = [np.ones((), np.float32)]
        for t, _ in ups:
            for role in "wgmv":
                x = rng.standard_normal(t.shape, dtype=np.float32)
                arrays.append(x * x if role == "v" else x)
        for i, x in enumerate(arrays):
            np.save(os.path.join(a.out, f"in_{i:05d}.npy"), x)
    print(f"{len(ups)} updates, {sum(t.numel for t, _ in ups)} elements")


if __name__ == "__main__":
    main()
