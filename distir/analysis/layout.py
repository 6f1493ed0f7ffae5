"""Memory formats: which convolutions the PyTorch backend hands a channels-last input.

The backend computes some ops as views of their input (``Transpose`` where
``copied_transpose`` does not make it contiguous; ``Reshape``, ``Flatten``, ``Squeeze``,
``Unsqueeze`` where PyTorch can), so a tensor can reach an op with strides other than a
contiguous one's. For most kernels that changes little; for a convolution it changes the
kernels: cuDNN runs a convolution whose input is in the channels-last memory format
(``[N, C, H, W]`` with ``C`` innermost) by its NHWC kernels, and ``convolution_backward``
both gradients too. Vision transformers do this in every block: SegFormer's, PVT's and
CvT's reshape a ``[B, H * W, C]`` token tensor, transposed, to ``[B, C, H, W]`` for a
depthwise 3 x 3, which then runs 1.4 to 7 times faster than on an NCHW tensor (measured
on an H200, ``grid_search/results/channels_last/``).

``LAYOUT_OPS`` are the ops whose cost depends on the strides of their inputs: a
convolution's format, an indexing op's broadcast index, a reshape that copies, a
reduction read in its input's memory order, a concatenation of a part that is a view.
The simulator keeps a ``Layouts`` tracker while it runs a program that has any: when it
first costs such an op, the tracker follows the input back through the stride-keeping ops
(``STRIDE_OPS``) of its function to where it started (an op's result: contiguous; a
parameter: the strides the caller passed; a call's result: the strides the callee
returned), and forward again with the types the interpreter found
(``strides_through``). A strided input reaches the cost rule as the attribute
``MEMORY_FORMAT`` (``"channels_last"``), which ``cost.train.conv_fit_time`` prices by the
profile's ``_nhwc`` fits. A 1-D convolution never runs channels-last: PyTorch makes its
input contiguous before it views ``[N, C, L]`` as an image (``at::_convolution``: "avoid
accidentally going through NHWC for permuted 3d input"), so the transposed ``[N, L, C]``
token tensor SqueezeBERT's projections convolve is copied first, and a gradient's ``dy``
too where it is not contiguous. Strides cross calls: a layer's backward function receives the
view its forward function returned as a saved activation.

PyTorch copies a convolution's input that is not dense in the format its kernels run in
(``Layouts.conv_layout``): CvT's class token makes the image a slice of the tokens, so its
channels-last view has gaps; a channel split of an NCHW image; a contiguous ``dy`` beside a
channels-last ``x``. The rules add those copies (``COPIED_INPUTS``,
``cost.train.input_copies_time``).

A 2-D convolution run by channels-last kernels writes its result (a gradient its ``dx``)
in that format, so a convolution that reads it runs channels-last too. An elementwise op
(``ORDERED_OPS``) writes its result in its operands' memory order, as ``TensorIterator``
does (``iteration_order``), and reads an operand whose order differs across its rows
(``Layouts.elementwise_layout``). Not modelled: ops that make a strided input contiguous
before their kernel (a softmax, a layer norm) and the copies ``torch.matmul`` makes of
operands other than a transposed matrix, and a ``Slice`` of steps other than 1. A called
function is costed with the strides of its first call with given argument types (its
summary serves later calls).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

from distir.analysis.values import concrete, type_of
from distir.ir.core import Function, Op, Value

__all__ = ["LAYOUT_OPS", "ALWAYS_LOOKED_AT", "RESTRIDING", "CONV_OPS", "INDEX_OPS",
           "RESHAPE_OPS", "REDUCE_OPS", "BY_INPUT_OPS", "CONCAT_OPS", "ORDERED_OPS",
           "WHEN_STRIDED", "STRIDE_OPS", "MEMORY_FORMAT",
           "COPIED_INPUTS", "INDEX_ELEMENTS", "INPUT_STRIDES", "STRIDED_INPUTS", "READ_ACROSS",
           "Layouts", "strides_through", "view_strides", "contiguous_strides",
           "slice_steps_by_axis",
           "channels_last_strides", "is_channels_last", "reshape_target", "iteration_order"]

CONV_OPS = frozenset({"Conv", "ConvGrad"})
"""Ops whose cost depends on the memory format of their first input."""

INDEX_OPS = frozenset({"GatherElements", "ScatterElements"})
"""Ops whose cost depends on how many distinct elements their index (input 1) holds: the
backend wraps negative indices once per distinct element of an index broadcast by
``Expand`` (HF DeBERTa's relative positions, expanded over batch and heads; ``torch.gather``
with an index expanded along the gathered rows' width), and the kernel reads such an
index from the cache."""

RESHAPE_OPS = frozenset({"Reshape", "Flatten"})
"""Ops the backend runs as a view of their input where its strides allow one, else as a
copy of it (``torch.reshape``): ConvBERT's im2col, a transposed token tensor reshaped to
heads, cost that copy."""

REDUCE_OPS = frozenset({"ReduceSum", "ReduceMean"})
"""Ops PyTorch runs in their input's memory order (TensorIterator sorts the axes by
stride), so that a reduction of a strided view costs as one of its storage's axes
(``cost.compute.reduced_blocks``): a transposed token tensor's bias gradient reads rows of
tokens, not of channels."""

BY_INPUT_OPS = RESHAPE_OPS | REDUCE_OPS
"""Ops whose cost depends on their first input's strides, and only where it may be a
strided view (``memory.layout_sensitive``)."""

CONCAT_OPS = frozenset({"Concat"})
"""Ops PyTorch runs by a slower kernel where an input is not contiguous: ``torch.cat``
copies contiguous parts by its batched kernel, and reads any part that is a view (a zero
row ``Expand``-ed from a scalar: a relative-position shift's pad; a ``Slice``) element by
element, five times slower on an H200 (``grid_search/results/strided_reduce/``)."""

ORDERED_OPS = frozenset({
    "Abs", "Add", "And", "Ceil", "Clip", "Div", "Equal", "Floor", "Greater",
    "GreaterOrEqual", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Max", "Min", "Mul", "Neg",
    "Not", "Or", "Reciprocal", "Relu", "Sub", "Where", "Cast", "Sqrt", "ReluGrad", "Mod",
    "Xor", "PRelu", "Sign", "Round", "IsInf", "CastLike", "HardSigmoid", "HardSwish",
    "Softsign", "BitwiseNot", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Exp", "Log", "Erf",
    "Gelu", "Sigmoid", "Tanh", "Sin", "Cos", "Softplus", "Pow", "GeluGrad", "Mish", "Atan",
    "Selu", "Elu", "Tan", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Celu"})
"""Elementwise ops PyTorch runs by ``TensorIterator``, in their operands' memory order: the
axes sorted by the first operand's strides that tell them apart (``iteration_order``), the
result written densely in that order, so that an op of a transposed view gives a
transposed result; an operand whose strides disagree with that order is read across its
rows (``Layouts.elementwise_layout``), at a transposing copy's cost: an ``Add`` of a
contiguous ``[96, 512, 512]`` tensor and a transposed view of one took 184 us on an H200,
its transposing copy 173, a contiguous ``Add`` 72 (``grid_search/results/elementwise_order``)."""

FIRST_OPERANDS = {"GeluGrad": 1}
"""``ORDERED_OPS`` whose kernel takes another input first than the IR's first, which then
decides the order: ``GeluGrad(x, dy)`` runs ``gelu_backward(dy, x)``."""

WHEN_STRIDED = BY_INPUT_OPS | CONCAT_OPS | ORDERED_OPS
"""Layout ops whose cost depends on their inputs' strides only where one may be a strided
view (``memory.layout_sensitive``), their records shared by layout
(``memory.BY_STRIDES``); a convolution or an indexing op is always looked at."""

LAYOUT_OPS = CONV_OPS | INDEX_OPS | WHEN_STRIDED
"""Ops whose cost depends on the strides of an input."""

ALWAYS_LOOKED_AT = CONV_OPS | INDEX_OPS
"""Layout ops the simulator looks at wherever they are (a convolution's result may be
channels-last, an index a broadcast view)."""

STRIDE_OPS = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                        "Identity", "Split", "Slice", "Expand"})
"""Ops whose results the backend may give their input's storage with other strides
(``Split`` and ``Slice`` of unit steps: a part of it, with its strides; ``Expand``: stride 0
along the axes it broadcasts)."""

RESTRIDING = frozenset({"Transpose", "Split", "Slice", "Expand"})
"""The ``STRIDE_OPS`` that may give a contiguous input other strides (``restrides``): a
program without any of them, nor a convolution, holds contiguous values only."""

INDEX_ELEMENTS = "index_elements"
"""The attribute the simulator adds for an ``INDEX_OPS`` rule whose index is a broadcast
view: the index's distinct elements (its elements along the axes of non-zero stride)."""

MEMORY_FORMAT = "memory_format"
"""The attribute the simulator adds for a ``LAYOUT_OPS`` rule whose kernels run in the
channels-last format (value ``"channels_last"``)."""

COPIED_INPUTS = "copied_inputs"
"""The attribute the simulator adds for a ``LAYOUT_OPS`` rule whose inputs PyTorch copies
before the kernel, views not dense in the format the kernel runs in: ``(position, the axis
of stride 1 the copy reads along)`` pairs (``Layouts.conv_layout``)."""

STRIDED_INPUTS = "strided_inputs"
"""The attribute the simulator adds for a ``CONCAT_OPS`` rule some of whose inputs are
views that are not contiguous: how many."""

READ_ACROSS = "read_across"
"""The attribute the simulator adds for an ``ORDERED_OPS`` rule some of whose operands are
read across their rows (their innermost axis is not the result's):
``(position, the operand's innermost axis, the result's innermost axis)`` triples."""

INPUT_STRIDES = "input_strides"
"""The attribute the simulator adds for a ``REDUCE_OPS`` rule whose input is a strided
view: its strides (elements)."""

Strides = tuple[int, ...]


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides (elements) of a contiguous tensor of ``shape`` (memoized: a program
    asks for a few shapes many times)."""
    got = _CONTIGUOUS.get(shape)
    if got is None:
        if len(_CONTIGUOUS) > 65536:
            _CONTIGUOUS.clear()
        got = _CONTIGUOUS[shape] = _contiguous(shape)
    return got


_CONTIGUOUS: dict[tuple[int, ...], tuple[int, ...]] = {}


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = [1] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= max(shape[i], 1)
    return tuple(out)


def view_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                 new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides of ``new_shape`` viewing a tensor of ``shape`` and ``strides`` without a
    copy, as PyTorch's ``view`` finds them, or ``None`` where no view exists (then
    ``reshape`` copies): the axes of ``new_shape`` must split or merge runs of axes that are
    contiguous with one another in memory."""
    numel = 1
    for d in shape:
        numel *= d
    if numel == 0 or not shape:
        return contiguous_strides(new_shape)
    out = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    base = strides[-1]
    tensor_numel = 1
    view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                out[view_d] = view_numel * base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                base = strides[d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return tuple(out)


def _same(shape: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether strides ``a`` and ``b`` agree on every axis longer than 1."""
    return all(x == y for x, y, d in zip(a, b, shape, strict=True) if d != 1)


def _innermost(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The axis of the smallest stride among those longer than 1 (the last, if none)."""
    axes = [d for d in range(len(shape)) if shape[d] > 1]
    return min(axes, key=lambda d: (strides[d], -d)) if axes else len(shape) - 1


def channels_last_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a dense channels-last ``[N, C, H, W]`` tensor of ``shape``."""
    _, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def _ordered_channels_last(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether the strides are ordered as channels-last ones (``C`` innermost, then ``W``,
    ``H``, ``N``; not necessarily dense), as PyTorch's ``is_channels_last_strides_2d``
    tests them before choosing that format, and not also a contiguous tensor's order."""
    if _same(shape, strides, contiguous_strides(shape)):
        return False
    least = 0
    for d in (1, 3, 2, 0):
        if shape[d] == 0 or strides[d] < least:
            return False
        if d == 0 and least == strides[1]:
            return False
        least = strides[d] * shape[d] if shape[d] > 1 else strides[d]
    return True


def is_channels_last(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a rank-4 ``[N, C, H, W]`` tensor of these strides is in the channels-last
    memory format and not also contiguous (as with one channel or one pixel)."""
    if len(shape) != 4:
        return False
    return _same(shape, strides, channels_last_strides(shape)) and \
        not _same(shape, strides, contiguous_strides(shape))


def iteration_order(shape: tuple[int, ...], operands: list[Strides]) -> tuple[int, ...]:
    """The axes of an elementwise op's result of ``shape``, innermost first, as PyTorch's
    ``TensorIterator`` orders them (``reorder_dimensions``) from its ``operands``' strides
    (broadcast to ``shape``: stride 0 along a broadcast axis): of two axes, the one of the
    smaller stride in the first operand whose strides tell them apart (neither 0) goes
    inner; equal strides put the shorter axis inner; no operand telling them apart keeps
    the later axis inner. The result is written densely in this order."""
    rank = len(shape)
    perm = list(range(rank - 1, -1, -1))

    def swap(d0: int, d1: int) -> int:
        for st in operands:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    for i in range(1, rank):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return tuple(perm)


def _broadcast_strides(shape: tuple[int, ...], strides: Strides,
                       out_shape: tuple[int, ...]) -> Strides:
    """``strides`` of a ``shape`` operand broadcast to ``out_shape`` (stride 0 along the
    axes it is broadcast along, and along axes of length 1)."""
    lead = len(out_shape) - len(shape)
    return tuple(0 if d < lead or shape[d - lead] == 1 else strides[d - lead]
                 for d in range(len(out_shape)))


def strides_through(op: Op, shape: tuple[int, ...], strides: Strides, itemsize: int,
                    out_shape: tuple[int, ...],
                    steps: dict[int, int] | None = None) -> Strides:
    """The strides of ``op``'s result (one of ``STRIDE_OPS``), given its input's shape and
    strides, as the backend computes it (a copy is contiguous); ``steps``: a ``Slice``'s
    step per axis (``slice_steps_by_axis``), where known."""
    if op.op_type == "Split":
        return strides  # a part of the input, with its strides
    if op.op_type == "Slice":  # a part, every step-th element along a stepped axis
        if not steps:
            return strides
        if min(steps.values()) < 1:
            return contiguous_strides(out_shape)  # (an index_select: a copy)
        return tuple(st * steps.get(a, 1) for a, st in enumerate(strides))
    if op.op_type == "Expand":  # stride 0 along the broadcast axes (new ones, or of 1)
        lead = len(out_shape) - len(shape)
        return tuple(0 if d < lead or (shape[d - lead] == 1 and out_shape[d] != 1)
                     else strides[d - lead] for d in range(len(out_shape)))
    if op.op_type == "Transpose":
        from distir.analysis.cost.compute import copied_transpose, only_unit_axes_move

        raw = op.attrs.get("perm")
        rank = len(shape)
        perm = tuple(range(rank - 1, -1, -1)) if raw is None else \
            tuple(int(p) % rank for p in raw)  # type: ignore[union-attr]
        if not only_unit_axes_move(shape, perm):
            if copied_transpose(shape, itemsize, perm):
                return contiguous_strides(out_shape)
            return tuple(strides[p] for p in perm)
    if shape == out_shape:
        return strides
    v = view_strides(shape, strides, out_shape)
    return contiguous_strides(out_shape) if v is None else v


def slice_steps_by_axis(rank: int, axes: Any, steps: Any) -> dict[int, int] | None:
    """A ``Slice``'s step per axis of a ``rank``-axis input, from the concrete values of its
    ``axes`` (``None``: the leading axes, one per step) and ``steps`` inputs; ``None`` where
    the steps are not known (or are all 1)."""
    if steps is None:
        return None
    st = [int(x) for x in steps.reshape(-1).tolist()]
    ax = list(range(len(st))) if axes is None else \
        [int(a) % rank for a in axes.reshape(-1).tolist()]
    if len(ax) != len(st) or all(x == 1 for x in st):
        return None
    return dict(zip(ax, st, strict=True))


def reshape_target(op: Op, shape: tuple[int, ...], args: tuple) -> tuple[int, ...] | None:
    """The result's shape of a ``Reshape`` (its second argument's concrete value, ``0`` and
    ``-1`` read as ONNX reads them) or ``Flatten`` (its ``axis``) of a ``shape`` input;
    ``None`` where the target is not known."""
    if op.op_type == "Flatten":
        a = int(op.attrs.get("axis", 1))  # type: ignore[arg-type]
        a = a + len(shape) if a < 0 else a
        lead, numel = math.prod(shape[:a]), math.prod(shape)
        return (lead, numel // lead if lead else 0)
    value = concrete(args[1]) if len(args) > 1 and args[1] is not None else None
    if value is None:
        return None
    out = value.reshape(-1).tolist()
    if 0 in out and not op.attrs.get("allowzero", 0):
        out = [shape[i] if v == 0 and i < len(shape) else v for i, v in enumerate(out)]
    if -1 in out:
        known = -math.prod(out)
        out[out.index(-1)] = math.prod(shape) // known if known else 0
    return tuple(out)


def restrides(op: Op) -> bool:
    """Whether ``op`` (one of ``STRIDE_OPS``) gives a contiguous input other strides: a
    part (``Split``, ``Slice``), a broadcast (``Expand``), a ``Transpose`` of the last two
    axes. One that moves a batch axis does not: the backend copies it
    (``cost.compute.copied_transpose``), or views it where only axes of length 1 move."""
    t = op.op_type
    if t in ("Split", "Slice", "Expand"):
        return True
    if t != "Transpose":
        return False
    from distir.analysis.cost.compute import copies_batch_axes

    perm = op.attrs.get("perm")
    return not (isinstance(perm, tuple | list) and copies_batch_axes(len(perm), perm))


class _Frame:
    __slots__ = ("fn", "params", "key", "results", "transposed", "seen")

    def __init__(self, fn: Function, params: dict[int, Strides], key: tuple,
                 transposed: frozenset[Value]) -> None:
        self.fn = fn
        self.params = params  # strided parameters, by index
        self.key = key
        # strided results of calls made, of convolutions run by channels-last kernels and
        # of elementwise ops of strided operands
        self.results: dict[Value, Strides] = {}
        self.transposed = transposed  # the function's views whose chain restrides
        self.seen: dict[Value, Strides | None] = {}  # strides found for views, this run


class Layouts:
    """The strides of a program's values as its simulation runs, where they are not a
    contiguous tensor's: ``enter`` / ``leave`` around each function run (the caller's
    ``before_call`` names its strided arguments), ``returned`` at the end of a run (its
    strided results, kept per callee and argument strides), ``after_call`` binds a call's
    strided results in the caller, ``memory_format`` of an op's first input. ``env`` gives
    the values of the function running (``Interpreter.env``)."""

    def __init__(self, env: Callable[[], dict[Value | None, Any] | None]) -> None:
        self._env = env
        self._frames: list[_Frame] = []
        self._next: tuple[dict[int, Strides], tuple] = ({}, ())
        self._returns: dict[tuple[int, tuple], tuple[Function, dict[int, Strides]]] = {}
        self._fns: dict[int, tuple[Function, dict[Value, Op], dict[Value, int],
                                   dict[Value, Value], frozenset[Value], frozenset[Value]]] = {}
        self._views: dict[tuple, int | None] = {}  # _view_axis's, by shapes and strides

    def _facts(self, fn: Function) -> tuple[dict[Value, Op], dict[Value, int],
                                            dict[Value, Value], frozenset[Value],
                                            frozenset[Value]]:
        """Per function: the producers among ``STRIDE_OPS`` of their results (a ``Slice``
        of given steps is not one), the parameters' indices, where each such result's chain
        of views starts, and the results whose chain restrides (``restrides``). Last, the
        results whose chain only takes parts (``Split``, ``Slice``), whose strides are
        their chain's start's (``reshape_layout``'s short way)."""
        f = self._fns.get(id(fn))
        if f is None:
            prod: dict[Value, Op] = {}
            start: dict[Value, Value] = {}
            transposed: set[Value] = set()
            parts: set[Value] = set()
            for op in [op for op in fn.ops if op.op_type in STRIDE_OPS]:  # (few of them)
                if op.callee is None and op.outputs and \
                        op.inputs and op.inputs[0] is not None and \
                        (op.op_type != "Slice" or len(op.inputs) < 5 or op.inputs[4] is None):
                    x = op.inputs[0]
                    strided = x in transposed or restrides(op)
                    part = op.op_type in ("Split", "Slice") and (x not in prod or x in parts)
                    for v in op.outputs:
                        prod[v] = op
                        start[v] = start.get(x, x)
                        if strided:
                            transposed.add(v)
                        if part:
                            parts.add(v)
            f = self._fns[id(fn)] = (fn, prod, {p: i for i, p in enumerate(fn.params)},
                                     start, frozenset(transposed), frozenset(parts))
        return f[1], f[2], f[3], f[4], f[5]

    def forget(self, callees: Collection[int]) -> None:
        """At the end of a program: drop every function's facts and the returned strides
        of callees not among ``callees`` (ids), so that a long search holds no program
        it is done with."""
        self._fns.clear()
        for k in [k for k in self._returns if k[0] not in callees]:
            del self._returns[k]

    def enter(self, fn: Function) -> None:
        params, key = self._next
        self._next = ({}, ())
        self._frames.append(_Frame(fn, params, key, self._facts(fn)[3]))

    def frame_key(self) -> tuple:
        """The strides of the strided arguments of the function running (``before_call``'s
        key): an op whose record is its own is priced by them."""
        return self._frames[-1].key

    def contiguous(self, values: tuple[Value | None, ...]) -> bool:
        """Whether ``values`` of the function running are all contiguous for sure, at C
        speed (the common case): no strided argument or result in the frame, and none of
        them a view whose chain restrides."""
        frame = self._frames[-1]
        return not frame.params and not frame.results and frame.transposed.isdisjoint(values)

    def leave(self) -> None:
        self._frames.pop()

    def strides(self, v: Value | None) -> Strides | None:
        """The strides of ``v`` in the function running, ``None`` where contiguous (or not
        a tensor)."""
        if v is None:
            return None
        frame = self._frames[-1]
        prod, param_index, start_of, transposed, _ = self._facts(frame.fn)
        start = start_of.get(v, v)
        i = param_index.get(start)
        base = frame.params.get(i) if i is not None else frame.results.get(start)
        if base is None and v not in transposed:
            return None  # whole views of a contiguous tensor that transpose nothing
        seen = frame.seen
        if v in seen:  # (each view's strides are found once per run of its function)
            return seen[v]
        env = self._env()
        assert env is not None
        first = v
        chain: list[Op] = []
        outs: list[Value] = []  # (the result of each: a Split has several)
        while v in prod and v not in seen:
            p = prod[v]
            chain.append(p)
            outs.append(v)
            v = p.inputs[0]  # type: ignore[assignment]
        t = type_of(env[v])
        shape, dtype = getattr(t, "shape", None), getattr(t, "dtype", None)
        if shape is None or dtype is None:
            return None
        shape = tuple(shape)
        if v in seen:  # a view whose strides an earlier reader found
            known = seen[v]
            strides = contiguous_strides(shape) if known is None else known
        else:
            strides = base if base is not None else contiguous_strides(shape)
        for p, o in reversed(list(zip(chain, outs, strict=True))):
            out = getattr(type_of(env[o]), "shape", None)
            if out is None:
                return None
            strides = strides_through(p, shape, strides, dtype.itemsize, tuple(out))
            shape = tuple(out)
            seen[o] = None if _same(shape, strides, contiguous_strides(shape)) else strides
        got = None if _same(shape, strides, contiguous_strides(shape)) else strides
        seen[first] = got
        return got

    def _strided(self, values: tuple[Value | None, ...]) -> dict[int, Strides]:
        """The strided ones among ``values`` of the function running, by position."""
        frame = self._frames[-1]
        start_of, transposed = self._facts(frame.fn)[2:4]
        if not frame.params and not frame.results:
            if transposed.isdisjoint(values):
                return {}  # (the common case, at C speed: nothing strided reaches here)
            cand = [i for i, v in enumerate(values) if v in transposed]
        else:  # views of the function's own values, or of strided arguments and results
            results, params = frame.results, frame.params
            param_index = self._facts(frame.fn)[1]
            get = start_of.get
            cand = []
            for i, v in enumerate(values):
                if v is None:
                    continue
                s = get(v, v)
                if v in transposed or s in results or param_index.get(s) in params:
                    cand.append(i)
        out = {}
        for i in cand:
            st = self.strides(values[i])
            if st is not None:
                out[i] = st
        return out

    def op_layout(self, op: Op, out_shape: tuple[int, ...] = ()) -> \
            tuple[tuple[str, Any], ...] | None:
        """The attributes by which ``op`` (one of ``LAYOUT_OPS``) reaches its cost rule, as
        ``(name, value)`` pairs, ``None`` where its inputs are contiguous: a convolution's
        ``MEMORY_FORMAT`` and ``COPIED_INPUTS`` (``conv_layout``), an indexing op's
        ``INDEX_ELEMENTS`` (``index_elements``), a concatenation's ``STRIDED_INPUTS``, a
        reduction's ``INPUT_STRIDES``. A convolution run channels-last marks its first
        result (of ``out_shape``) as written in that format."""
        if op.op_type in INDEX_OPS:
            n = self.index_elements(op)
            return None if n is None else ((INDEX_ELEMENTS, n),)
        if op.op_type in REDUCE_OPS:
            return self.input_strides(op)
        if op.op_type in CONCAT_OPS:
            n = len(self._strided(op.inputs))
            return ((STRIDED_INPUTS, n),) if n else None
        if op.op_type in ORDERED_OPS:
            return self.elementwise_layout(op)
        if op.op_type in RESHAPE_OPS:
            env = self._env()
            assert env is not None
            shape = tuple(getattr(type_of(env[op.inputs[0]]), "shape", ()))
            return self.reshape_layout(op, shape, out_shape)
        got = self.conv_layout(op)
        if got is None:
            return None
        y = op.outputs[0] if op.outputs else None
        if got[0] == "channels_last" and y is not None and len(out_shape) == 4:
            # cuDNN writes the result (a gradient's dx) in the format it ran in
            self._frames[-1].results[y] = channels_last_strides(out_shape)
        return (MEMORY_FORMAT, got[0]), (COPIED_INPUTS, got[1])

    def written(self, op: Op) -> Strides | None:
        """The strides ``op_layout`` found for ``op``'s first result where it is not
        contiguous (a convolution run channels-last), for its record: ``mark`` sets them
        again where the record serves another run of the function."""
        y = op.outputs[0] if op.outputs else None
        return None if y is None else self._frames[-1].results.get(y)

    def mark(self, op: Op, strides: Strides) -> None:
        """``op``'s first result is written in ``strides`` (``written``), in the function
        running."""
        self._frames[-1].results[op.outputs[0]] = strides

    def reshape_layout(self, op: Op, shape: tuple[int, ...], out_shape: tuple[int, ...],
                       ) -> tuple[tuple[str, Any], ...] | None:
        """``op_layout`` of a ``Reshape`` or ``Flatten`` of a ``shape`` input to
        ``out_shape``: where no view of its strided input gives the result and the backend
        copies it (``torch.reshape``), ``COPIED_INPUTS`` with the axis of stride 1 the copy
        reads along; else ``None``. A part (``Split``, ``Slice``) of a contiguous tensor,
        the common case, takes a short way: its strides are the whole's."""
        x = op.inputs[0]
        frame = self._frames[-1]
        f = self._fns.get(id(frame.fn))
        if f is not None and x in f[5] and not frame.params and not frame.results:
            env = self._env()
            assert env is not None
            whole = getattr(type_of(env[f[3].get(x, x)]), "shape", None)
            st = None if whole is None else contiguous_strides(tuple(whole))
        else:
            st = self.strides(x)
        if st is None:
            return None
        key = (shape, st, out_shape)
        axis = self._views.get(key, -1)
        if axis == -1:
            axis = self._views[key] = None if len(st) != len(shape) or \
                view_strides(shape, st, out_shape) is not None else _innermost(shape, st)
        return None if axis is None else ((COPIED_INPUTS, ((0, axis),)),)

    def elementwise_layout(self, op: Op) -> tuple[tuple[str, Any], ...] | None:
        """``op_layout`` of an elementwise op (``ORDERED_OPS``): where some operand is a
        strided view, its result (of its operands' broadcast shape) takes the order
        ``iteration_order`` finds (kept for its readers where it is not contiguous), and
        each operand of the result's elements (not broadcast) whose innermost axis is not
        the result's is read across its rows (``READ_ACROSS``); else ``None``."""
        strided = self._strided(op.inputs)
        if not strided or not op.outputs:
            return None
        env = self._env()
        assert env is not None
        shapes: list[tuple[int, tuple[int, ...]]] = []
        for i, x in enumerate(op.inputs):
            shape = getattr(type_of(env[x]), "shape", None) if x is not None else None
            if shape is not None:
                shapes.append((i, tuple(shape)))
        rank = max((len(s) for _, s in shapes), default=0)
        out = [1] * rank
        for _, s in shapes:
            for d, n in enumerate(s, rank - len(s)):
                if n != 1:
                    out[d] = n
        out_shape = tuple(out)
        operands: list[tuple[int, Strides]] = []  # (position, strides broadcast)
        for i, shape in shapes:
            st = strided.get(i)
            operands.append((i, _broadcast_strides(
                shape, contiguous_strides(shape) if st is None else st, out_shape)))
        decide = [st for _, st in operands]
        first = FIRST_OPERANDS.get(op.op_type)
        if first is not None:  # (the kernel's own operand order)
            ahead = [st for i, st in operands if i == first]
            decide = ahead + [st for i, st in operands if i != first]
        order = iteration_order(out_shape, decide)
        dense = [0] * rank
        acc = 1
        for a in order:
            dense[a] = acc
            acc *= max(out_shape[a], 1)
        y = op.outputs[0]
        results = self._frames[-1].results
        if _same(out_shape, tuple(dense), contiguous_strides(out_shape)):
            results.pop(y, None)
        else:
            results[y] = tuple(dense)
        inner = next((a for a in order if out_shape[a] > 1), None)
        if inner is None:
            return None
        across = []
        axes = [a for a in range(rank) if out_shape[a] > 1]
        for i, st in operands:
            if (i not in strided and y not in results) or any(st[a] == 0 for a in axes):
                continue  # (a contiguous operand of a contiguous result; a broadcast one)
            own = min(axes, key=lambda a: (st[a], -a))
            if own != inner:
                across.append((i, own, inner))
        return ((READ_ACROSS, tuple(across)),) if across else None

    def input_strides(self, op: Op) -> tuple[tuple[str, Any], ...] | None:
        """``op_layout`` of a reduction (``REDUCE_OPS``): its input's strides
        (``INPUT_STRIDES``) where it is a strided view, else ``None``."""
        st = self.strides(op.inputs[0] if op.inputs else None)
        return None if st is None else ((INPUT_STRIDES, st),)

    def index_elements(self, op: Op) -> int | None:
        """The distinct elements of ``op``'s index (input 1) where it is broadcast (a view
        of stride 0 along some axis of length > 1), else ``None``."""
        ins = op.inputs
        st = self.strides(ins[1]) if len(ins) > 1 else None
        if st is None:
            return None
        env = self._env()
        assert env is not None
        shape = tuple(getattr(type_of(env[ins[1]]), "shape", ()))
        if len(shape) != len(st) or not any(s == 0 and d > 1 for s, d in zip(st, shape)):
            return None
        n = 1
        for s, d in zip(st, shape):
            if s != 0:
                n *= d
        return n

    def conv_layout(self, op: Op) -> tuple[str | None, tuple[tuple[int, int], ...]] | None:
        """How PyTorch runs the convolution ``op`` (a ``Conv`` or ``ConvGrad``) on its
        inputs' strides: the format of its kernels, ``"channels_last"`` where ``x``'s
        strides are ordered as that format's (dense or not: ``suggest_memory_format``),
        else ``None`` (NCHW); and the inputs it copies first, ``x`` and a gradient's
        ``dy`` where they are not dense in that format, as ``(position, the axis of
        stride 1 they are copied from)``. ``None`` for a convolution of contiguous NCHW
        inputs. A 1-D convolution runs on contiguous ``[N, C, L]`` tensors: PyTorch copies
        a strided ``x`` or ``dy`` first."""
        ins = op.inputs
        sx = self.strides(ins[0] if ins else None)
        sdy = self.strides(ins[2]) if op.op_type == "ConvGrad" and len(ins) > 2 else None
        if sx is None and sdy is None:
            return None
        env = self._env()
        assert env is not None
        shape = tuple(getattr(type_of(env[ins[0]]), "shape", ()))
        if len(shape) not in (3, 4):
            return None
        fmt = "channels_last" if sx is not None and len(shape) == 4 and \
            _ordered_channels_last(shape, sx) else None
        copied: list[tuple[int, int]] = []
        for i, st in ((0, sx), (2, sdy)):
            if i == 2 and op.op_type != "ConvGrad":
                continue
            t_shape = tuple(getattr(type_of(env[ins[i]]), "shape", ()))
            if len(t_shape) not in (3, 4):
                continue
            st = contiguous_strides(t_shape) if st is None else st
            dense = contiguous_strides(t_shape) if fmt is None else \
                channels_last_strides(t_shape)
            if not _same(t_shape, st, dense):  # (a contiguous dy too, for NHWC kernels)
                copied.append((i, _innermost(t_shape, st)))
        if fmt is None and not copied:
            return None
        return fmt, tuple(copied)

    def before_call(self, op: Op) -> tuple:
        """Name the call's strided arguments to the callee's run; the key of its strides."""
        params = self._strided(op.inputs)
        key = tuple(sorted(params.items()))
        self._next = (params, key)
        return key

    def returned(self, fn: Function) -> None:
        """At the end of ``fn``'s run: its strided results, kept for its callers."""
        frame = self._frames[-1]
        rets = self._strided(fn.returns)
        self._returns[(id(fn), frame.key)] = (fn, rets)

    def after_call(self, op: Op, callee: Function, key: tuple) -> None:
        """Bind the strided results of ``op`` (a call of ``callee`` with argument strides
        ``key``) in the caller."""
        self._next = ({}, ())
        got = self._returns.get((id(callee), key))
        if got and got[1]:
            results = self._frames[-1].results
            for j, s in got[1].items():
                results[op.outputs[j]] = s
