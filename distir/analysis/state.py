"""Optimizer state: the inputs that a random draw must make as a training step holds them.

A program run on random inputs (``distir run`` or ``distir execute`` without inputs, the
searches' real runs) should run as training runs it. Most inputs can be any floats, but an
optimizer's state cannot: Adam's second moments are never negative and its step count is a
whole number from 1. ``state_roles`` finds the entry parameters that reach such an input,
structurally (through calls), and the role by which they are drawn.
"""

from __future__ import annotations

from typing import Any

from distir.ir.core import Function

__all__ = ["STATE_INPUTS", "state_roles"]

STATE_INPUTS: dict[str, dict[int, str]] = {"AdamOptimizer": {3: "square", 4: "count"}}
"""Inputs of optimizer ops that hold state a training step never has at random, by op and
input position: a random draw of them is not a step that training runs. Adam's second
moments are never negative and its step count is a whole number from 1; drawn from a
normal distribution, the fused kernel takes the square root of negative moments and raises
0.9 to a fractional, negative power, and runs at half its speed (an H200 took 66 us for an
update of 65,536 to 1 M float32 elements so, 34 us with a training step's values:
``grid_search/results/adam_step/``)."""


PARTS = frozenset({"Split", "Slice", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                   "Transpose", "Identity", "Cast", "Concat", "Send"})
"""Ops whose results hold their first input's values (all inputs', for ``Concat``): a
state input made by them from a parameter (a ZeRO rank's shard of the moments, ``Split``
of the whole) is drawn as that parameter."""


def state_roles(fn: Function) -> dict[int, str]:
    """The parameters of ``fn`` (by index) that reach an input of ``STATE_INPUTS``, through
    any calls and the ops of ``PARTS``, and the role by which a random draw makes them
    (``"square"``: the squares of normal floats; ``"count"``: ones):
    ``distir.analysis.random_inputs`` and the backend's ``distir.backend.worker.
    draw_inputs``. A parameter that reaches inputs of both roles takes the first met."""
    found: dict[Any, str] = {}
    has: dict[int, bool] = {}

    def holds(f: Any) -> bool:  # whether f, or a function it calls, has such an op
        h = has.get(id(f))
        if h is None:
            has[id(f)] = False  # (a recursive call holds nothing new)
            h = has[id(f)] = any(op.op_type in STATE_INPUTS or
                                 (op.callee is not None and holds(op.callee))
                                 for op in f.ops)
        return h

    def visit(f: Any, root: dict[Any, tuple[Any, ...]]) -> None:
        for op in f.ops:
            if op.callee is not None:
                if holds(op.callee):
                    visit(op.callee, {p: root.get(a, (a,)) for p, a in
                                      zip(op.callee.params, op.inputs) if a is not None})
                continue
            if op.op_type in PARTS:
                srcs = op.inputs if op.op_type == "Concat" else op.inputs[:1]
                got = tuple(r for x in srcs if x is not None for r in root.get(x, (x,)))
                for o in op.outputs:
                    root[o] = got
                continue
            spec = STATE_INPUTS.get(op.op_type)
            if spec:
                for pos, role in spec.items():
                    x = op.inputs[pos] if pos < len(op.inputs) else None
                    if x is not None:
                        for r in root.get(x, (x,)):
                            found.setdefault(r, role)

    if holds(fn):
        visit(fn, {})
    return {i: found[p] for i, p in enumerate(fn.params) if p in found}
