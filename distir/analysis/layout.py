"""Memory formats: which convolutions the PyTorch backend hands a channels-last input.

The backend computes some ops as views of their input (``Transpose`` where
``copied_transpose`` does not make it contiguous; ``Reshape``, ``Flatten``, ``Squeeze``,
``Unsqueeze`` where PyTorch can), so a tensor can reach an op with strides other than a
contiguous one's. For most kernels that changes little; for a convolution it changes the
kernels: cuDNN runs a convolution whose input is in the channels-last memory format
(``[N, C, H, W]`` with ``C`` innermost) by its NHWC kernels, and ``convolution_backward``
both gradients too. Vision transformers do this in every block: SegFormer's and PVT's
feed-forward reshape a ``[B, H * W, C]`` token tensor, transposed, to ``[B, C, H, W]``
for a depthwise 3 x 3, which then runs 2 to 5 times faster than on an NCHW tensor.

``LAYOUT_OPS`` are the ops whose cost depends on the memory format of their first input.
For each, liveness (``distir.analysis.memory``) records the chain of stride-keeping ops
that produced that input (``view_chain``, structural, once per function) in the op's
signature; the simulator, when it first costs the op with given argument types, follows the
chain's strides from its start with the types the interpreter found (``memory_format``)
and hands the rule ``memory_format="channels_last"`` among the attributes
(``MEMORY_FORMAT``), which ``cost.train.conv_fit_time`` prices by the profile's ``_nhwc``
fits.

What is modelled: a chain starts from a contiguous tensor (an op's result, an argument);
views keep strides as PyTorch's ``view`` computes them (``view_strides``), a ``Reshape``
that cannot be a view copies (contiguous), as does a ``Transpose`` the backend copies.
Not modelled: formats carried through other ops (an elementwise op keeps its input's
strides in PyTorch, and a convolution's result is channels-last when its input is), and
the copy PyTorch makes of a gradient ``dy`` whose format differs from ``x``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distir.ir.core import Function, Op, Value

__all__ = ["LAYOUT_OPS", "STRIDE_OPS", "MEMORY_FORMAT", "ViewChain", "view_chain",
           "producers", "memory_format", "view_strides", "contiguous_strides",
           "is_channels_last"]

LAYOUT_OPS = frozenset({"Conv", "ConvGrad"})
"""Ops whose cost depends on the memory format of their first input."""

STRIDE_OPS = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                        "Identity"})
"""Ops whose result the backend may give its input's storage with other strides."""

MEMORY_FORMAT = "memory_format"
"""The attribute the simulator adds for a ``LAYOUT_OPS`` rule whose first input is
channels-last (value ``"channels_last"``)."""


class ViewChain(tuple):  # type: ignore[type-arg]
    """The stride-keeping ops (``STRIDE_OPS``) that produced an op's first input, from the
    one nearest the start to the producer of the input; a tuple of ``Op``."""

    __slots__ = ()


def producers(fn: Function) -> dict[Value, Op]:
    """The ``STRIDE_OPS`` of ``fn`` by the value they produce."""
    return {op.outputs[0]: op for op in fn.ops
            if op.op_type in STRIDE_OPS and op.callee is None and op.outputs}


def view_chain(op: Op, producer: dict[Value, Op]) -> ViewChain | None:
    """The chain of ``STRIDE_OPS`` that produced ``op``'s first input, where it holds a
    ``Transpose`` (else the input's strides are a contiguous tensor's, or nothing is
    known of them: ``None``)."""
    chain: list[Op] = []
    v = op.inputs[0] if op.inputs else None
    while v is not None:
        p = producer.get(v)
        if p is None or not p.inputs:
            break
        chain.append(p)
        v = p.inputs[0]
    if not any(p.op_type == "Transpose" for p in chain):
        return None
    return ViewChain(reversed(chain))


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides (elements) of a contiguous tensor of ``shape``."""
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


def is_channels_last(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a rank-4 ``[N, C, H, W]`` tensor of these strides is in the channels-last
    memory format and not also contiguous (as with one channel or one pixel)."""
    if len(shape) != 4:
        return False
    _, c, h, w = shape
    channels_last = (h * w * c, 1, w * c, c)
    return _same(shape, strides, channels_last) and \
        not _same(shape, strides, contiguous_strides(shape))


def _through(op: Op, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int,
             out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of ``op``'s result, given its input's, as the backend computes it."""
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


def memory_format(chain: ViewChain, type_of_value: Callable[[Value], Any]) -> str | None:
    """``"channels_last"`` where the chain hands its last result over in that format,
    following strides from a contiguous start with the types ``type_of_value`` gives
    (``None`` where a type is not a tensor's, or for any other format)."""
    first = type_of_value(chain[0].inputs[0])
    shape = getattr(first, "shape", None)
    dtype = getattr(first, "dtype", None)
    if shape is None or dtype is None:
        return None
    strides = contiguous_strides(tuple(shape))
    for op in chain:
        out = getattr(type_of_value(op.outputs[0]), "shape", None)
        if out is None:
            return None
        strides = _through(op, tuple(shape), strides, dtype.itemsize, tuple(out))
        shape = tuple(out)
    return "channels_last" if is_channels_last(shape, strides) else None
