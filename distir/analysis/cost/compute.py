"""Cost rules of compute ops: matrix products, convolution, memory-bound kernels, views.

- Matrix products (``MatMul``, ``Gemm``, their gradients, ``Conv`` as an implicit GEMM)
  cost ``Hardware.matmul_time(m, n, k)`` per product: the profile's fitted matmul model for
  the dtype, else the roofline ``launch + max(2mnk / peak, bytes / bandwidth)``. Batch
  dimensions are folded into ``m`` (one large product with the same FLOPs).
- Every other kernel is memory-bound: ``Hardware.memory_time(bytes, flops)`` with ``bytes``
  the sizes of its inputs and results (read once, written once) and ``flops`` a small
  per-element count (1 for arithmetic, 8 for transcendental functions, 5 for reductions
  and normalizations, 12 for Adam).
- Views and values known before the step cost nothing: ``Reshape``, ``Flatten``,
  ``Squeeze``, ``Unsqueeze``, ``Identity``, ``Shape``, ``Split``, ``Slice``, ``Expand``,
  ``Transpose`` (PyTorch returns views for all of them) and ``Constant``.
"""

from __future__ import annotations

from typing import Any

from distir.analysis.cost import COST_RULES, ZERO, OpCost, main_dtype, tensor_bytes
from distir.analysis.hardware import Hardware
from distir.ir.types import TensorType, Type

VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Split", "Slice",
         "Expand", "Transpose", "Constant")
SIMPLE = ("Abs", "Add", "And", "Ceil", "Clip", "Div", "Equal", "Floor", "Greater",
          "GreaterOrEqual", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Max", "Min", "Mul",
          "Neg", "Not", "Or", "Reciprocal", "Relu", "Sub", "Sum", "Where", "Cast", "Dropout",
          "Sqrt", "ReluGrad", "MSELossGrad", "SGDOptimizer")
TRANSCENDENTAL = ("Exp", "Log", "Erf", "Gelu", "Sigmoid", "Tanh", "Sin", "Cos", "Softplus",
                  "Pow", "GeluGrad")
REDUCING = ("ReduceMean", "ReduceSum", "ReduceMax", "ArgMax", "Softmax", "LogSoftmax",
            "LayerNormalization", "BatchNormalization", "LRN", "MSELoss",
            "SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad", "GlobalAveragePool")
COPIES = ("Concat", "Gather", "Tile", "Trilu", "ScatterND", "ConstantOfShape", "Range")

_FLOPS_PER_ELEMENT = {**dict.fromkeys(SIMPLE, 1.0), **dict.fromkeys(TRANSCENDENTAL, 8.0),
                      **dict.fromkeys(REDUCING, 5.0), **dict.fromkeys(COPIES, 0.0),
                      "AdamOptimizer": 12.0}


def _numel(ts: tuple[Type | None, ...]) -> int:
    return sum(t.numel for t in ts if isinstance(t, TensorType))


@COST_RULES.register(*VIEWS)
def view(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
         hw: Hardware) -> OpCost:
    return ZERO


@COST_RULES.register(*SIMPLE, *TRANSCENDENTAL, *REDUCING, *COPIES, "AdamOptimizer")
def memory_bound(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                 hw: Hardware) -> OpCost:
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    flops = _FLOPS_PER_ELEMENT[op_type] * max(_numel(outs), _numel(ins))
    return OpCost(hw.memory_time(nbytes, flops, main_dtype(ins, outs)), flops, nbytes)


@COST_RULES.register("MaxPool", "AveragePool")
def pool(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
         hw: Hardware) -> OpCost:
    window = 1
    for k in attrs.get("kernel_shape") or ():
        window *= k
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    flops = float(_numel(outs[:1]) * window)
    return OpCost(hw.memory_time(nbytes, flops, main_dtype(ins, outs)), flops, nbytes)


def _products(hw: Hardware, dims: list[tuple[int, int, int]], t: TensorType,
              extra_bytes: float = 0.0) -> OpCost:
    """The cost of the matrix products ``dims`` (each ``(m, n, k)``) in ``t``'s dtype, plus
    a memory-bound kernel over ``extra_bytes`` when there are any."""
    dt, size = t.dtype.value, t.dtype.itemsize
    secs = flops = nbytes = 0.0
    for m, n, k in dims:
        if m == 0 or n == 0:
            continue
        secs += hw.matmul_time(m, n, k, dt, size)
        flops += 2.0 * m * n * k
        nbytes += float((m * k + k * n + m * n) * size)
    if extra_bytes:
        secs += hw.memory_time(extra_bytes, extra_bytes / size, dt)
        nbytes += extra_bytes
    return OpCost(secs, flops, nbytes)


def _matmul_dims(a: TensorType, b: TensorType) -> tuple[int, int, int, int, bool]:
    """``(batch, M, K, N, b_batched)`` of ``numpy.matmul(a, b)``."""
    sa = (1,) + a.shape if a.rank == 1 else a.shape
    sb = b.shape + (1,) if b.rank == 1 else b.shape
    m, k, n = sa[-2], sa[-1], sb[-1]
    batch_a = 1
    for d in sa[:-2]:
        batch_a *= d
    batch_b = 1
    for d in sb[:-2]:
        batch_b *= d
    return max(batch_a, batch_b), m, k, n, batch_b > 1


@COST_RULES.register("MatMul")
def matmul(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
           hw: Hardware) -> OpCost:
    batch, m, k, n, _ = _matmul_dims(ins[0], ins[1])
    return _products(hw, [(batch * m, n, k)], ins[0])


@COST_RULES.register("MatMulGrad")
def matmul_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                hw: Hardware) -> OpCost:
    """da = dy @ b^T and db = a^T @ dy (summed over broadcast batches when b is shared)."""
    batch, m, k, n, b_batched = _matmul_dims(ins[0], ins[1])
    db = (batch * k, n, m) if b_batched else (k, n, batch * m)
    return _products(hw, [(batch * m, k, n), db], ins[0])


@COST_RULES.register("Gemm")
def gemm(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
         hw: Hardware) -> OpCost:
    a, y = ins[0], outs[0]
    m, n = y.shape
    k = a.shape[0] if attrs.get("transA", 0) else a.shape[1]
    return _products(hw, [(m, n, k)], a)


@COST_RULES.register("GemmGrad")
def gemm_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
              hw: Hardware) -> OpCost:
    """da: (m x n) @ (n x k); db: (k x m) @ (m x n); dc: a reduction of dy."""
    a, dy = ins[0], ins[-1]
    m, n = dy.shape
    k = a.shape[0] if attrs.get("transA", 0) else a.shape[1]
    extra = float(dy.size_bytes + outs[2].size_bytes) if len(outs) == 3 else 0.0
    return _products(hw, [(m, k, n), (k, n, m)], a, extra)


@COST_RULES.register("Conv")
def conv(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
         hw: Hardware) -> OpCost:
    """An implicit GEMM: ``m = N * output pixels``, ``n = M`` (output channels),
    ``k = C / group * kernel size``."""
    x, w, y = ins[0], ins[1], outs[0]
    pixels = 1
    for d in y.shape[2:]:
        pixels *= d
    window = 1
    for d in w.shape[2:]:
        window *= d
    return _products(hw, [(x.shape[0] * pixels, w.shape[0], w.shape[1] * window)], x)
