"""Cost rules of ops whose work an attribute shapes: ``Einsum`` (its equation), ``Resize``
(its mode), ``ConvTranspose`` (its kernel and groups), ``LSTM`` and ``GRU`` (their
directions and gates).

- A two-operand ``Einsum`` is one (batched) matrix product: its letters shared by both
  operands and the result are the batch, those shared by the operands only are contracted
  (``k``), the others are ``m`` (left operand's) and ``n`` (right operand's); ``...`` axes
  count as batch when both operands have them, else as ``m`` or ``n``. It costs
  ``Hardware.bmm_time`` / ``matmul_time`` like ``MatMul``. Any other ``Einsum`` (one
  operand: a transpose, trace or sum; three or more: a chain) is a memory-bound kernel with
  one multiply-add (2 FLOPs) per point of the full index space per extra operand.
- ``Resize`` is memory-bound: per result element, 2 FLOPs per tap of each resized axis
  (nearest 0 taps, linear 2, cubic 4; antialiased downsampling widens linear and cubic
  taps by ``1 / scale``).
- ``ConvTranspose`` is an implicit GEMM like ``Conv``: ``m = N * input pixels``,
  ``n = M * kernel size`` (output channels times the window each input pixel scatters to),
  ``k = C / group``.
- ``LSTM`` and ``GRU`` are, per direction, one product for the input projection of every
  step ``(T * N) x I @ I x G*H`` and one recurrent product per step ``N x H @ H x G*H`` (as
  the backend runs them; G = 4 gates, 3 for GRU), plus a memory-bound pass over the gates
  of every step.
"""

from __future__ import annotations

import math
from typing import Any

from distir.analysis.cost import COST_RULES, OpCost, main_dtype, tensor_bytes
from distir.analysis.cost.compute import _products
from distir.analysis.hardware import Hardware
from distir.analysis.type_rules.indexing import einsum_sizes
from distir.ir.types import TensorType

_TAPS = {"nearest": 0, "linear": 2, "cubic": 4}


def _prod(xs: Any) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


@COST_RULES.register("Einsum")
def einsum(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
           hw: Hardware) -> OpCost:
    ts = [t for t in ins if isinstance(t, TensorType)]
    eq = str(attrs["equation"])
    sizes, ell, out = einsum_sizes(eq, [t.shape for t in ts])
    lhs = eq.replace(" ", "").partition("->")[0].split(",")
    if len(ts) == 2:
        a, b = (set(t.replace("...", "")) for t in lhs)
        o = set(out.replace("...", ""))
        n_ell = _prod(ell)
        batch = _prod(sizes[c] for c in a & b & o)
        k = _prod(sizes[c] for c in (a & b) - o)
        m = _prod(sizes[c] for c in (a - b) & o)
        n = _prod(sizes[c] for c in (b - a) & o)
        dots = ["..." in t for t in lhs]
        if all(dots):
            batch *= n_ell
        elif dots[0]:
            m *= n_ell
        elif dots[1]:
            n *= n_ell
        if batch > 1:
            return _products(hw, [(batch, m, n, k)], ts[0])
        return _products(hw, [(m, n, k)], ts[0])
    space = _prod(sizes.values()) * _prod(ell)
    flops = 2.0 * space * max(len(ts) - 1, 1)
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    return OpCost(hw.memory_time(nbytes, flops, main_dtype(ins, outs)), flops, nbytes)


@COST_RULES.register("ConvTranspose")
def conv_transpose(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                   hw: Hardware) -> OpCost:
    x, w = ins[0], ins[1]
    group = int(attrs.get("group", 1))
    m = x.shape[0] * _prod(x.shape[2:])
    n = w.shape[1] * group * _prod(w.shape[2:])
    return _products(hw, [(m, n, x.shape[1] // group)], x)


@COST_RULES.register("LSTM", "GRU")
def recurrent(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
         hw: Hardware) -> OpCost:
    x, r = ins[0], ins[2]
    d, gh, h = r.shape  # gh: the gates times the hidden size
    t_len, batch = (x.shape[1], x.shape[0]) if attrs.get("layout", 0) else x.shape[:2]
    dims = [(t_len * batch, gh, x.shape[2])] + [(batch, gh, h)] * t_len
    gates = float(d * t_len * batch * gh * x.dtype.itemsize * 3)
    return _products(hw, dims * d, x, gates + tensor_bytes(outs))


@COST_RULES.register("GridSample")
def grid_sample(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                hw: Hardware) -> OpCost:
    """Memory-bound: 2 FLOPs per tap of each result element (1 tap for nearest, 2 per
    spatial axis for linear, 4 for cubic)."""
    x, y = ins[0], outs[0]
    per_axis = {"nearest": 1, "linear": 2, "cubic": 4}.get(str(attrs.get("mode")), 2)
    flops = 2.0 * per_axis ** (x.rank - 2) * y.numel
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    return OpCost(hw.memory_time(nbytes, flops, main_dtype(ins, outs)), flops, nbytes)


@COST_RULES.register("Resize")
def resize(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
           hw: Hardware) -> OpCost:
    x, y = ins[0], outs[0]
    taps = _TAPS.get(str(attrs.get("mode", "nearest")), 0)
    per_element = 0.0
    for d_in, d_out in zip(x.shape, y.shape, strict=True):
        if d_in == d_out or taps == 0:
            continue
        widen = d_in / d_out if attrs.get("antialias", 0) and d_out < d_in else 1.0
        per_element += 2.0 * math.ceil(taps * widen)
    flops = per_element * y.numel
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    return OpCost(hw.memory_time(nbytes, flops, main_dtype(ins, outs)), flops, nbytes)
