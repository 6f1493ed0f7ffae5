"""Tensor-parallel patterns: the seeds of the tensor pass and the weights a split pulls in.

The tensor pass (``TensorPass._tensor_pass``) splits one *candidate* weight at a time and
lets the layout rules propagate the split. Two structural helpers widen what it finds on
any graph (never by value names):

- ``candidates``: the weights that open a column-parallel split, each with its split
  layout: the second operand of ``MatMul`` (a 2-D parameter, or one reached through a
  ``Transpose``) and of ``Gemm`` (``transB`` honoured: a transposed weight ``(n, k)`` is
  split along axis 0), the weight of a ``Conv`` (``group=1``; its output channels, axis 0:
  the next convolution then takes split input channels and is summed over the ranks), and
  a 2-D table that a ``Gather`` looks up by batch-split indices (an embedding: split by
  vocabulary rows, each rank looks up its rows and the results are summed).
- ``pull_tensor``: when a rule demands that an *activation* be split over the ranks (the
  other branch of ``gate * up``, the keys of ``q @ k^T``, the values of ``p @ v``), the
  split is pulled back through what the activation is made of (elementwise ops,
  reshapes, transposes, slices, concatenations and expansions along other axes (rotary
  embeddings, grouped keys), softmaxes and lookups along another axis (a per-head
  position bias), matrix products and convolutions) to the weights it comes from, which
  are split too. Only weights are chosen here; the forward propagation then recomputes
  every layout through the rules, so a pull never asserts a layout that a rule did not
  accept.

Invariants: a pull returns parameters that are not data, not locked by an earlier
candidate and still whole (their layouts carry no batch mark), and values that each rank
makes at its local shape (``ConstantOfShape``, an ``Expand`` along the split axis: the
zeros a gradient scatters into), which the analysis marks as ``forced``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distir.ir.core import Value
from distir.transforms.layout import B, Layout, Reject, T, is_bt, replicated, t_axis
from distir.transforms.layout_rules import BROADCAST, UNARY
from distir.transforms.layout_shape_rules import reshape_layout

if TYPE_CHECKING:
    from distir.transforms.tensor_pass import TensorPass

__all__ = ["candidates", "pull_tensor"]

_UNARY = frozenset(UNARY)
_BROADCAST = frozenset(BROADCAST) - {"SGDOptimizer", "AdamOptimizer", "ReluGrad",
                                     "GeluGrad", "MSELossGrad"}
_RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
_SOFTMAX = frozenset({"Softmax", "LogSoftmax"})
_SAME_AXIS = frozenset({"Slice", "Concat", "Expand"})
_MAX_DEPTH = 64
_ROW_WISE = _UNARY | _BROADCAST | _RESHAPES | _SOFTMAX | {"Transpose", "MatMul", "Slice",
                                                          "Concat"}
"""Ops through which an axis holding the batch and the heads (``"btH"``) is pulled."""


def _weight_through(sh: TensorPass, v: Value | None) -> tuple[Value, bool] | None:
    """``(parameter, transposed)`` when ``v`` is a 2-D parameter or ``Transpose`` of one."""
    prog = sh.prog
    if v is None or len(prog.shape(v)) != 2:
        return None
    if v in prog.param_set:
        return v, False
    op = prog.producer_op(v)
    if op is None or op.op_type != "Transpose" or op.inputs[0] not in prog.param_set:
        return None
    perm = prog.attrs(op).get("perm")
    if perm is not None and list(perm) != [1, 0]:
        return None
    return op.inputs[0], True  # type: ignore[return-value]


def candidates(sh: TensorPass, i: int) -> tuple[Value, Layout] | None:
    """The weight that op ``i`` would split column-parallel, with the layout it would take
    (axis of the product's output features marked ``"t"``), or ``None``."""
    prog = sh.prog
    op = prog.ops[i]
    t = op.op_type
    if t == "Conv":  # output channels: weight axis 0
        x, w = op.inputs[0], op.inputs[1]
        if x is None or w is None or w not in prog.param_set or T in sh.layout[x].marks or \
                int(prog.attrs(op).get("group", 1) or 1) != 1:
            return None
        return w, Layout((T,) + (None,) * (len(prog.shape(w)) - 1))
    if t == "Gather":  # an embedding table looked up by the batch: split by vocabulary rows
        w, idx = op.inputs
        axis = prog.attrs(op).get("axis", 0)
        if w is None or idx is None or w not in prog.param_set or len(prog.shape(w)) != 2 \
                or axis not in (0, -2) or B not in sh.layout[idx].marks:
            return None
        return w, Layout((T, None))
    if t not in ("MatMul", "Gemm") or len(op.inputs) < 2:
        return None
    x = op.inputs[0]
    if x is None or T in sh.layout[x].marks:
        return None
    if t == "Gemm" and prog.attrs(op).get("transA", 0):
        return None
    got = _weight_through(sh, op.inputs[1])
    if got is None:
        return None
    w, transposed = got
    if t == "Gemm" and prog.attrs(op).get("transB", 0):
        transposed = not transposed
    return w, Layout((T, None) if transposed else (None, T))


def _free(sh: TensorPass, v: Value, want: Layout) -> bool:
    """Whether parameter ``v`` may still take the tensor split ``want``."""
    return (v not in sh.data and v not in sh.locked and not any(sh.layout[v].marks)
            and "b" not in "".join(m for m in want.marks if m))


def pull_tensor(sh: TensorPass, v: Value, want: Layout) -> dict[Value, Layout] | None:
    """The weights (and locally made values) to split, with their layouts, so that the
    forward propagation gives ``v`` the layout ``want``; ``None`` when ``v`` cannot be
    split so. Only the ``"t"`` mark is pulled: ``v``'s other marks must already agree with
    ``want``."""
    seeds: dict[Value, Layout] = {}
    if not _pull(sh, v, want, seeds, 0) or not seeds:
        return None
    return seeds


def _broadcast_along(sx: tuple[int, ...], so: tuple[int, ...], ax: int) -> bool:
    """Whether an operand of shape ``sx`` is broadcast along axis ``ax`` of ``so``."""
    j = ax - (len(so) - len(sx))
    return j < 0 or sx[j] == 1


def _merge(cur: Layout, want: Layout) -> Layout | None:
    """``cur`` with ``want``'s ``"t"`` (or ``"btH"``) mark; ``None`` if they disagree."""
    marks: list[str | None] = []
    for c, w in zip(cur.marks, want.marks, strict=True):
        if w == T or is_bt(w):
            if c not in (None, w) and not (is_bt(w) and c == B):
                return None
            marks.append(w)
        elif c == T or is_bt(c):
            return None
        else:
            marks.append(c)
    return Layout(tuple(marks), want.groups if t_axis(Layout(tuple(marks))) is not None else 1)


def _pull(sh: TensorPass, v: Value | None, want: Layout, seeds: dict[Value, Layout],
          depth: int) -> bool:
    if v is None or depth > _MAX_DEPTH:
        return False
    prog = sh.prog
    shape = prog.shape(v)
    if len(shape) != len(want.marks):
        return False
    cur = sh.layout.get(v) or replicated(len(shape))
    wa, ca = t_axis(want), t_axis(cur)
    if wa is None:
        return ca is None
    if ca == wa and cur.marks[ca] == want.marks[wa] and cur.groups == want.groups:
        return True
    target = _merge(cur, want)
    if target is None:
        return False
    ax = t_axis(target)
    assert ax is not None
    tm = target.marks[ax]  # "t", or "btH": the batch with the heads inside
    if v in prog.param_set:
        if tm != T:
            return False
        if len(prog.users.get(v, ())) > 1 and (v not in sh.trained
                                               or sh._shared_by_value(v)):
            return True  # shared: each user that needs it split slices it (_slice_use)
        w = Layout(tuple(m if m == T else None for m in target.marks), target.groups)
        if not _free(sh, v, w) or seeds.get(v, w) != w:
            return False
        seeds[v] = w
        return True
    op = prog.producer_op(v)
    if op is None or len(op.outputs) != 1:
        return False
    t = op.op_type
    g = target.groups

    def one_t(rank: int, axis: int | None) -> Layout:
        return Layout(tuple(tm if a == axis else None for a in range(rank)),
                      g if axis is not None else 1)

    if tm != T and t not in _ROW_WISE:
        return False

    if t == "Identity" and op.inputs[0] in sh.trained:
        return True  # an exporter's copy of a trained weight shared by value: sliced on use
    if t in _UNARY:
        return _pull(sh, op.inputs[0], target, seeds, depth + 1)
    if t in _BROADCAST:
        ok = False
        for x in op.inputs:
            if x is None:
                continue
            sx = prog.shape(x)
            j = ax - (len(shape) - len(sx))
            if j < 0 or sx[j] == 1:
                continue
            if not _pull(sh, x, one_t(len(sx), j), seeds, depth + 1):
                return False
            ok = True
        return ok
    if t in _RESHAPES:
        x = op.inputs[0]
        if x is None:
            return False
        try:
            lay = reshape_layout(one_t(len(shape), ax), shape, prog.shape(x))
        except Reject:  # the batch and the heads merged in one axis: both marks needed
            try:
                lay = reshape_layout(target, shape, prog.shape(x))
            except Reject:
                return False
        return _pull(sh, x, lay, seeds, depth + 1)
    if t in _SOFTMAX:  # normalized along another axis (attention probabilities)
        axis = prog.attrs(op).get("axis", -1)
        if (axis + len(shape) if axis < 0 else axis) == ax:
            return False
        return _pull(sh, op.inputs[0], target, seeds, depth + 1)
    if t == "ConstantOfShape" or t == "Expand" and op.inputs[0] is not None and \
            _broadcast_along(prog.shape(op.inputs[0]), shape, ax):
        seeds[v] = target  # made at its local shape on each rank (a gradient's zeros)
        return True
    if t in _SAME_AXIS:  # the split axis is neither sliced, concatenated nor expanded
        xs = op.inputs if t == "Concat" else op.inputs[:1]
        ok = False
        for x in xs:
            if x is None:
                continue
            sx = prog.shape(x)
            j = ax - (len(shape) - len(sx))
            if j < 0 or sx[j] == 1 and t == "Expand":
                continue
            if sx[j] != shape[ax] or not _pull(sh, x, one_t(len(sx), j), seeds, depth + 1):
                return False
            ok = True
        return ok
    if t == "ScatterND" and ax == 0 and prog.attrs(op).get("reduction") == "add" and \
            op.inputs[1] is not None and prog.shape(op.inputs[1])[-1:] == (1,):
        # an embedding's gradient: added into rows split like the vocabulary-parallel table
        return _pull(sh, op.inputs[0], target, seeds, depth + 1)
    if t == "Gather":  # a table looked up along another axis (a per-head position bias)
        data, idx = op.inputs
        if data is None or idx is None:
            return False
        rd, ri = len(prog.shape(data)), len(prog.shape(idx))
        axis = prog.attrs(op).get("axis", 0)
        axis = axis + rd if axis < 0 else axis
        if ax < axis:
            j = ax
        elif ax >= axis + ri:
            j = ax - ri + 1
        else:
            return False
        return _pull(sh, data, one_t(rd, j), seeds, depth + 1)
    if t == "Transpose":
        x = op.inputs[0]
        if x is None:
            return False
        perm = prog.attrs(op).get("perm") or list(range(len(shape)))[::-1]
        return _pull(sh, x, one_t(len(shape), int(perm[ax])), seeds, depth + 1)
    if t == "MatMul":
        a, b = op.inputs
        if a is None or b is None:
            return False
        sa, sb = prog.shape(a), prog.shape(b)
        if len(sb) < 2 or len(sa) < 1:
            return False
        rank = len(shape)
        if ax == rank - 1 and tm == T:  # the output features: b's columns
            return _pull(sh, b, one_t(len(sb), len(sb) - 1), seeds, depth + 1)
        if ax >= rank - 2:
            return False
        ok = False  # a batch axis (attention heads): both operands where not broadcast
        for x, sx in ((a, sa), (b, sb)):
            j = ax - (rank - len(sx))
            if len(sx) < 2 or j < 0 or sx[j] == 1:
                continue
            if not _pull(sh, x, one_t(len(sx), j), seeds, depth + 1):
                return False
            ok = True
        return ok
    if t == "Conv":  # output channels: weight axis 0 and the bias
        if ax != 1 or int(prog.attrs(op).get("group", 1) or 1) != 1:
            return False
        cw = op.inputs[1]
        c = op.inputs[2] if len(op.inputs) > 2 else None
        if cw is None or not _pull(sh, cw, one_t(len(prog.shape(cw)), 0), seeds, depth + 1):
            return False
        return c is None or _pull(sh, c, one_t(1, 0), seeds, depth + 1)
    if t == "Gemm":
        attrs = prog.attrs(op)
        if ax != 1 or attrs.get("transA", 0):
            return False
        b = op.inputs[1]
        if b is None or not _pull(sh, b, one_t(2, 0 if attrs.get("transB", 0) else 1),
                                  seeds, depth + 1):
            return False
        c = op.inputs[2] if len(op.inputs) > 2 else None
        if c is not None:
            sc = prog.shape(c)
            j = 1 - (2 - len(sc))
            if j >= 0 and sc[j] != 1:
                return _pull(sh, c, one_t(len(sc), j), seeds, depth + 1)
        return True
    return False
