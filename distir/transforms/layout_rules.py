"""Layout rules: for each op, the layouts of its results given the layouts of its inputs.

A rule is ``rule(op_type, ins, shapes, outs, attrs, const) -> ((layout, partial), ...)``:
``ins`` are the input layouts (``None`` for an omitted input), ``shapes`` and ``outs`` the
global shapes of the inputs and results, ``attrs`` the attributes with schema defaults and
``const(i)`` the known value of input ``i`` (a numpy array) or ``None``. ``partial`` is a
string of the marks (``"b"``, ``"t"``) over which the result is a partial sum.

A rule raises ``Reject`` when the op cannot run locally on those layouts (a softmax over a
split axis), and ``Demand`` when it could if an input had another layout (the bias of a
column-parallel projection, a mask of full batch size; the analysis decides whether that
input can take it). Rules are pure functions of their arguments (the analysis memoizes
them). All rules live in one ``RuleTable``, ``LAYOUT_RULES``, with a rule for every op of
the IR but the communication ops; an op without one takes whole inputs only. This module
holds the rules of elementwise, matrix, loss and optimizer ops; ``layout_shape_rules``
those of shape, reshaping, softmax, normalization and reduction ops, ``layout_index_rules``
those of indexing, padding, scanning and generator ops, ``layout_nn_rules`` those of
convolution, pooling, batch-norm, ``Gemm`` and their gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distir.analysis.rules import RuleTable
from distir.transforms.layout import B, Demand, Layout, Reject, T, replicated

__all__ = ["LAYOUT_RULES", "register", "apply_rule", "matmul_layout"]

Shape = tuple[int, ...]
RuleResult = tuple[tuple[Layout, str], ...]
LayoutRule = Callable[..., RuleResult]

LAYOUT_RULES = RuleTable("layout")
"""The layout rule of each op, keyed by op name (``distir.analysis.rules.RuleTable``)."""

register = LAYOUT_RULES.register


def apply_rule(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict[str, Any],
               const: Callable[[int], Any]) -> RuleResult:
    """The result layouts of one op; the default rule accepts whole inputs only."""
    rule = LAYOUT_RULES.get(op_type)
    if rule is not None:
        return rule(op_type, ins, shapes, outs, attrs, const)
    for lay in ins:
        if lay is not None and any(lay.marks):
            raise Reject(f"{op_type} has no layout rule, so it cannot take a split input")
    return tuple((replicated(len(s)), "") for s in outs)


# -- elementwise -------------------------------------------------------------------------
UNARY = ("Relu", "Gelu", "Tanh", "Sigmoid", "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs",
         "Reciprocal", "Cast", "Identity", "Softplus", "LeakyRelu", "Floor", "Ceil", "Sin",
         "Cos", "Not", "IsNaN", "Dropout", "Sign", "Round", "HardSigmoid", "Elu", "Selu",
         "Celu", "Mish", "Softsign", "HardSwish", "Atan", "IsInf", "Acos", "Acosh", "Asin",
         "Asinh", "Atanh", "Cosh", "Sinh", "Tan", "Shrink", "ThresholdedRelu", "BitwiseNot")
BROADCAST = ("Add", "Sub", "Mul", "Div", "Pow", "Sum", "Max", "Min", "Mean", "Mod", "Equal",
             "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where",
             "Clip", "PRelu", "ReluGrad", "GeluGrad", "MSELossGrad", "SGDOptimizer",
             "AdamOptimizer", "BitwiseAnd", "BitwiseOr", "BitwiseXor")


@register(*UNARY)
def unary(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
          const: Callable) -> RuleResult:
    lay = ins[0]
    return tuple((lay, "") for _ in outs)


def broadcast_marks(ins: tuple, shapes: tuple, rank: int) -> Layout:
    """The layout of a broadcasting elementwise op's result; ``Demand`` for an input that
    must be split like the others (a bias), ``Reject`` for conflicting splits."""
    marks: list[str | None] = [None] * rank
    groups = 0  # the interleaved groups of the first tensor-parallel split seen
    for lay, shp in zip(ins, shapes, strict=True):
        if lay is None or not any(lay.marks):
            continue
        off = rank - len(shp)
        for j, m in enumerate(lay.marks):
            if m is None:
                continue
            k = off + j
            if marks[k] is None:
                if m in marks:
                    raise Reject(f"inputs split the {m!r} mark along different axes")
                marks[k] = m
            elif marks[k] != m:
                raise Reject(f"axis {k} is split as {marks[k]!r} by one input and as {m!r} "
                             "by another")
            if m == T:
                if groups and lay.groups != groups:
                    raise Reject("inputs split the tensor-parallel axis in different groups")
                groups = lay.groups
    if not any(marks):
        return replicated(rank)
    groups = groups or 1
    for i, (lay, shp) in enumerate(zip(ins, shapes, strict=True)):
        if shp is None:
            continue
        off = rank - len(shp)
        want = list(lay.marks) if lay is not None else [None] * len(shp)
        bad = False
        for k, m in enumerate(marks):
            j = k - off
            if m is None or j < 0 or shp[j] == 1:
                continue
            if want[j] != m:
                want[j] = m
                bad = True
        if bad:
            raise Demand(i, Layout(tuple(want), groups if T in want else 1))
    return Layout(tuple(marks), groups if T in marks else 1)


@register(*BROADCAST)
def broadcast(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    rank = len(outs[0])
    lay = broadcast_marks(ins, shapes, rank)
    res = []
    for s in outs:  # AdamOptimizer: w, m, v share one shape
        res.append((lay if len(s) == rank else replicated(len(s)), ""))
    return tuple(res)


# -- matrix products -----------------------------------------------------------------------
def _roles(rank: int, left: bool) -> tuple[list[int], int | None, int]:
    """(batch axes, free axis, contraction axis) of a MatMul operand."""
    if rank == 1:
        return [], None, 0
    if left:
        return list(range(rank - 2)), rank - 2, rank - 1
    return list(range(rank - 2)), rank - 1, rank - 2


def matmul_layout(la: Layout, lb: Layout, sa: Shape, sb: Shape
                  ) -> tuple[Layout, str, list[int], list[int]]:
    """The layout of ``MatMul(a, b)`` (numpy semantics) and the mark of a split contraction.

    Also returns the result's batch axes where ``a`` (resp. ``b``) is broadcast, which the
    gradient rule needs. A split contraction axis on one side only is a ``Demand`` on the
    other side (the weight of a row-parallel projection)."""
    a_batch, a_n, a_k = _roles(len(sa), True)
    b_batch, b_m, b_k = _roles(len(sb), False)
    ma, mb = la.marks, lb.marks
    nbatch = max(len(a_batch), len(b_batch))
    out: list[str | None] = []
    a_bcast: list[int] = []
    b_bcast: list[int] = []
    src_t = None
    for j in range(nbatch):
        ja = j - (nbatch - len(a_batch))
        jb = j - (nbatch - len(b_batch))
        has_a = ja >= 0 and (sa[ja] != 1 or ma[ja] is not None)
        has_b = jb >= 0 and (sb[jb] != 1 or mb[jb] is not None)
        xa = ma[ja] if has_a else None
        xb = mb[jb] if has_b else None
        if has_a and has_b and xa != xb:
            if xb is None:
                raise Demand(1, _with(lb, jb, xa, la.groups))
            if xa is None:
                raise Demand(0, _with(la, ja, xb, lb.groups))
            raise Reject("the operands split a batch axis differently")
        if not has_a:
            a_bcast.append(j)
        if not has_b:
            b_bcast.append(j)
        x = xa or xb
        if x == T:
            src_t = la if xa else lb
        out.append(x)
    if a_n is not None:
        out.append(ma[a_n])
        if ma[a_n] == T:
            src_t = la
    if b_m is not None:
        out.append(mb[b_m])
        if mb[b_m] == T:
            src_t = lb
    ka, kb = ma[a_k], mb[b_k]
    partial = ""
    if ka != kb:
        if kb is None:
            raise Demand(1, _with(lb, b_k, ka, la.groups))
        if ka is None:
            raise Demand(0, _with(la, a_k, kb, lb.groups))
        raise Reject("the operands split the contraction axis differently")
    if ka is not None:
        if ka == T and la.groups != lb.groups:
            raise Reject("the operands split the contraction axis in different groups")
        partial = ka
    if out.count(T) > 1 or out.count(B) > 1:
        raise Reject("both operands split their free axes with the same mark")
    if ka is not None and ka in out:
        raise Reject(f"the {ka!r} mark splits both the contraction and a result axis")
    groups = src_t.groups if (src_t is not None and T in out) else 1
    return Layout(tuple(out), groups), partial, a_bcast, b_bcast


def _with(lay: Layout, axis: int, mark: str | None, groups: int) -> Layout:
    marks = list(lay.marks)
    marks[axis] = mark
    return Layout(tuple(marks), groups if T in marks else 1)


@register("MatMul")
def matmul(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    lay, partial, _, _ = matmul_layout(ins[0], ins[1], shapes[0], shapes[1])
    return ((lay, partial),)


@register("MatMulGrad")
def matmul_grad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                const: Callable) -> RuleResult:
    la, lb, ldy = ins
    sa, sb = shapes[0], shapes[1]
    ly, _, a_bcast, b_bcast = matmul_layout(la, lb, sa, sb)
    if ldy != ly:
        raise Reject(f"dy is split as {ldy}, unlike MatMul(a, b) which is {ly}")
    _, a_n, _ = _roles(len(sa), True)
    _, b_m, _ = _roles(len(sb), False)
    da: set[str] = set()
    db: set[str] = set()
    if b_m is not None and lb.marks[b_m]:  # da = dy @ b^T contracts b's free axis
        da.add(lb.marks[b_m])  # type: ignore[arg-type]
    if a_n is not None and la.marks[a_n]:  # db = a^T @ dy contracts a's free axis
        db.add(la.marks[a_n])  # type: ignore[arg-type]
    for j in a_bcast:  # summed over the axes along which a was broadcast
        if ly.marks[j]:
            da.add(ly.marks[j])  # type: ignore[arg-type]
    for j in b_bcast:
        if ly.marks[j]:
            db.add(ly.marks[j])  # type: ignore[arg-type]
    return ((la, "".join(sorted(da))), (lb, "".join(sorted(db))))


# -- losses ----------------------------------------------------------------------------------
@register("MSELoss")
def mse_loss(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
             const: Callable) -> RuleResult:
    lay = broadcast_marks(ins, shapes, len(shapes[0]))
    return ((replicated(len(outs[0])), "".join(sorted(m for m in lay.marks if m))),)


def _xent(ins: tuple, shapes: tuple) -> Layout:
    """The logits' layout; the classes are on their last axis. Split over the ranks there
    (a vocabulary-parallel LM head), each rank holds its classes' logits and the loss and
    its gradient are computed without gathering them (``vocab_parallel``)."""
    logits, labels = ins
    m = logits.marks[-1] if logits.marks else None
    if m is not None and (m != T or logits.groups != 1):
        raise Reject("the class axis of the logits is split")
    want = logits.marks[:-1]
    if labels.marks != want:
        raise Demand(1, Layout(want))
    return logits


@register("SoftmaxCrossEntropyLoss")
def xent(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
         const: Callable) -> RuleResult:
    lay = _xent(ins, shapes)
    return ((replicated(len(outs[0])), "".join(sorted(m for m in lay.marks[:-1] if m))),)


@register("SoftmaxCrossEntropyLossGrad")
def xent_grad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    return ((_xent(ins, shapes), ""),)


MEAN_SCALED = frozenset({"MSELoss", "MSELossGrad", "SoftmaxCrossEntropyLoss",
                         "SoftmaxCrossEntropyLossGrad", "ReduceMean", "BatchNormalization"})
"""Ops with results that may be means over split axes: each shard's mean is scaled by the
shard count before the partial results are summed (``mean_scale_marks``)."""


def mean_scale_marks(op_type: str, attrs: dict, ins: tuple, k: int = 0,
                     partial: str = "") -> str:
    """The marks whose shard count divides result ``k`` of this op (``partial``: the
    result's partial marks): a ``reduction="mean"`` loss (or its gradient), a
    ``ReduceMean`` over split axes, the running statistics of ``BatchNormalization``; each
    shard averages over its own elements only."""
    if op_type == "ReduceMean":
        return partial if k == 0 else ""
    if op_type == "BatchNormalization":
        return partial if k > 0 else ""
    if k != 0 or attrs.get("reduction") != "mean":
        return ""
    lay = ins[0]
    if op_type.startswith("SoftmaxCrossEntropy"):
        return "b" if lay.marks and lay.marks[0] == B else ""
    return "".join(sorted(m for m in lay.marks if m))


# Registers the rules of the other op families in the same table.
from distir.transforms import layout_index_rules as _index_rules  # noqa: E402,F401
from distir.transforms import layout_nn_rules as _nn_rules  # noqa: E402,F401
from distir.transforms import layout_shape_rules as _shape_rules  # noqa: E402,F401
