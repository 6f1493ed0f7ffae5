"""Equivalence checks of substitutions: on random inputs with the reference executor, and
symbolically with z3 (the optional ``verify`` extra).

The symbolic check runs the original and the rewritten example through the one interpreter
loop (``Interpreter``) with a rule table over numpy arrays of z3 real expressions, one
variable per input element, and proves every output element equal: first by normalizing
the difference to a sum of monomials, else by asking z3 for a counterexample (none must
exist). Element-wise unary ops other than ``Relu`` are uninterpreted functions, so the
proof holds for any such op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from distir.analysis.interpreter import Interpreter
from distir.errors import DistIRError, UnsupportedError
from distir.ir.core import Function, Op
from distir.transforms.spmd.subst_core import Graph, Substitution, rewrite

__all__ = ["Verdict", "verify_substitution", "prove_equal", "check_on_inputs"]


@dataclass(frozen=True)
class Verdict:
    """What ``verify_substitution`` found: ``sites`` rewritten and compared, the largest
    relative difference on random inputs (``max_rel_error``), and ``z3``: ``"proved"``,
    ``"skipped"`` (z3 not installed or no symbolic example) or ``"failed: ..."``."""

    name: str
    sites: int
    max_rel_error: float
    z3: str

    @property
    def ok(self) -> bool:
        return self.sites > 0 and self.max_rel_error <= 1e-4 and not self.z3.startswith(
            "failed")


def check_on_inputs(a: Function, b: Function, seeds: tuple[int, ...] = (0, 1)) -> float:
    """The largest difference between ``a``'s and ``b``'s results on random inputs,
    relative to the largest magnitude of ``a``'s result."""
    import distir
    from distir.analysis import random_inputs

    worst = 0.0
    for seed in seeds:
        ins = random_inputs(a, seed=seed)
        for x, y in zip(distir.execute(a, ins), distir.execute(b, ins), strict=True):
            x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)
            if x64.shape != y64.shape:
                return float("inf")
            scale = max(1.0, float(np.abs(x64).max(initial=0.0)))
            worst = max(worst, float(np.abs(x64 - y64).max(initial=0.0)) / scale)
    return worst


def verify_substitution(sub: Substitution, *, seeds: tuple[int, ...] = (0, 1),
                        use_z3: bool = True) -> Verdict:
    """Rewrite every site of ``sub``'s example at each of its shapes and compare with the
    original on random inputs; prove its symbolic example with z3 where installed."""
    sites, worst = 0, 0.0
    for shape in sub.shapes:
        fn = sub.examples(shape)
        g = Graph(fn)
        for site in sub.find(g):
            worst = max(worst, check_on_inputs(fn, rewrite(g, site, sub), seeds))
            sites += 1
    z3 = "skipped"
    if use_z3 and sub.z3_shape is not None:
        try:
            import z3 as _z3  # noqa: F401
        except ImportError:
            pass
        else:
            fn = sub.examples(sub.z3_shape)
            g = Graph(fn)
            found = sub.find(g)
            if not found:
                z3 = "failed: no site in the symbolic example"
            else:
                fails = [m for s in found if (m := prove_equal(fn, rewrite(g, s, sub)))]
                z3 = f"failed: {fails[0]}" if fails else "proved"
    return Verdict(sub.name, sites, worst, z3)


# -- the symbolic rule table ------------------------------------------------------------------

Rule = Callable[[Op, dict[str, Any], tuple], tuple]


def _each(f: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    out = np.empty(np.shape(x), object)
    for idx in np.ndindex(np.shape(x)):
        out[idx] = f(x[idx])
    return out


def _sym_rules() -> dict[str, Rule]:
    import z3

    def relu(e: Any) -> Any:
        return z3.If(e > 0, e, z3.RealVal(0))

    def ax(a: dict[str, Any], x: np.ndarray, name: str = "axis", default: int = 0) -> int:
        return int(a.get(name, default)) % x.ndim

    def split(op: Op, a: dict[str, Any], ins: tuple) -> tuple:
        x, k = ins[0], ax(a, ins[0])
        if len(ins) > 1 and ins[1] is not None:
            cuts = np.cumsum(np.asarray(ins[1], np.int64))[:-1]
        else:
            n = len(op.outputs)
            cuts = np.arange(1, n) * (x.shape[k] // n)
        return tuple(np.split(x, cuts, axis=k))

    def transpose(op: Op, a: dict[str, Any], ins: tuple) -> tuple:
        p = op.attr("perm")
        return (np.transpose(ins[0], None if p is None else tuple(p)),)

    def gemm(op: Op, a: dict[str, Any], ins: tuple) -> tuple:
        x = ins[0].T if op.attr("transA", 0) else ins[0]
        w = ins[1].T if op.attr("transB", 0) else ins[1]
        y = float(op.attr("alpha", 1.0)) * np.matmul(x, w)
        if len(ins) > 2 and ins[2] is not None:
            y = y + float(op.attr("beta", 1.0)) * ins[2]
        return (y,)

    rules: dict[str, Rule] = {
        "MatMul": lambda op, a, ins: (np.matmul(ins[0], ins[1]),),
        "Add": lambda op, a, ins: (ins[0] + ins[1],),
        "Sub": lambda op, a, ins: (ins[0] - ins[1],),
        "Mul": lambda op, a, ins: (ins[0] * ins[1],),
        "Div": lambda op, a, ins: (ins[0] / ins[1],),
        "Sum": lambda op, a, ins: (sum(ins[1:], ins[0]),),
        "Identity": lambda op, a, ins: (ins[0],),
        "Concat": lambda op, a, ins: (np.concatenate(ins, axis=ax(a, ins[0])),),
        "Constant": lambda op, a, ins: (np.asarray(op.attrs["value"].array),),  # type: ignore[union-attr]
        "Relu": lambda op, a, ins: (_each(relu, ins[0]),),
        "Split": split, "Transpose": transpose, "Gemm": gemm,
    }
    return rules


class SymbolicInterpreter(Interpreter):
    """Evaluates a function on arrays of z3 expressions (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.rules = _sym_rules()
        self.functions: dict[tuple, Any] = {}

    def eval_op(self, op: Op, args: tuple) -> tuple:
        rule = self.rules.get(op.op_type)
        if rule is not None:
            return rule(op, self.attrs_of(op), args)
        from distir.transforms.spmd.subst_views import ELEMENTWISE

        if op.op_type in ELEMENTWISE and len(args) == 1:
            import z3

            key = (op.op_type, op.attrs_key)
            f = self.functions.get(key)
            if f is None:
                f = self.functions[key] = z3.Function(f"{op.op_type}{len(self.functions)}",
                                                      z3.RealSort(), z3.RealSort())
            return (_each(f, args[0]),)
        raise UnsupportedError(f"{op.op_type} has no symbolic rule (supported: "
                               f"{', '.join(sorted(self.rules))} and element-wise ops)")


def prove_equal(a: Function, b: Function) -> str | None:
    """``None`` when z3 proves ``a`` and ``b`` (same parameters) give equal results for all
    real inputs, else what failed, in one line."""
    import z3

    args = []
    for k, p in enumerate(a.params):
        shape = getattr(p.type, "shape", None)
        if shape is None:
            return f"parameter {k} has no tensor type"
        flat = [z3.Real(f"p{k}_{i}") for i in range(int(np.prod(shape, dtype=np.int64)))]
        arr = np.empty(len(flat), object)
        arr[:] = flat
        args.append(arr.reshape(shape))
    try:
        xs = SymbolicInterpreter().run(a, args)
        ys = SymbolicInterpreter().run(b, args)
    except DistIRError as e:
        return e.message
    for r, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if np.shape(x) != np.shape(y):
            return f"result {r}: shapes {np.shape(x)} and {np.shape(y)}"
        pending = []
        for idx in np.ndindex(np.shape(x)):
            d = z3.simplify(z3.RealVal(0) + x[idx] - y[idx], som=True)
            if not (z3.is_rational_value(d) and d.as_fraction() == 0):
                pending.append(x[idx] != y[idx])
        if pending:
            s = z3.Solver()
            s.set("timeout", 20_000)
            s.add(z3.Or(*pending))
            res = s.check()
            if res != z3.unsat:
                return f"result {r}: z3 says {res} (a counterexample may exist)"
    return None

