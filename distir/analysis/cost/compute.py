"""Cost rules of compute ops: matrix products, convolution, memory-bound kernels, views.

- Matrix products (``MatMul``, ``Gemm``, their gradients, ``Conv`` as an implicit GEMM
  where the profile has no ``conv`` fit: ``cost/train.py``)
  cost ``Hardware.matmul_time(m, n, k)`` per product: the profile's fitted matmul model for
  the dtype, else the roofline ``launch + max(2mnk / peak, bytes / bandwidth)``. Batch
  dimensions of one operand are folded into ``m`` (one large product with the same FLOPs, as
  ``torch.matmul`` does); when both operands are batched (attention's ``[B, H, T, hd] @
  [B, H, hd, T]``) the product is one batched kernel, ``Hardware.bmm_time``: the profile's
  ``bmm`` fit, else the folded product.
- ``MatMulGrad`` runs its products with an operand read transposed (``da = dy @ b^T``,
  ``db = a^T @ dy``), which cuBLAS runs at other speeds than ``a @ b``: the profile's
  ``matmul_nt`` / ``matmul_tn`` fits for a 2-D ``b`` (a weight: ``Hardware.
  layout_matmul_time``) and ``bmm_nt`` / ``bmm_tn`` with both operands batched
  (``Hardware.layout_bmm_time``), each falling back to ``matmul`` / ``bmm``
  (``calibration/bench_matmul_grad.py``). A ``MatMul`` keeps ``matmul`` even when its
  operand is a ``Transpose``'s view (the tied LM head ``x @ wte^T``, 1.5 times slower on an
  H100 than ``matmul`` predicts): a rule sees its op's types and attributes only, and no
  type says that an operand is a transposed view.
- An adding ``ScatterND`` (the embedding gradient) uses the profile's
  ``scatter_add_repeated`` fit where it has one (the backend's kernel, PyTorch's
  embedding backward, measured with the indices the backend draws when it measures a
  step: integers in [0, 8)); else ``scatter_add``. One of at most ``FEW_SCATTER_ROWS``
  index rows (the gradient of a ``Gather`` of one slice, as of the query, key or value
  out of ``nn.MultiheadAttention``'s packed projection) the backend adds with
  ``index_add``, parallel over every element: the profile's ``scatter_add_few`` fit where it
  has one (``calibration.bench_train``), else memory-bound like a copy.
- Every other kernel is memory-bound: ``Hardware.memory_time(bytes, flops)`` with ``bytes``
  the sizes of its inputs and results (read once, written once) and ``flops`` a small
  per-element count (1 for arithmetic, 8 for transcendental functions, 5 for reductions,
  normalizations, scans and selections, 0 for copies and index shuffles, 12 for Adam).
  ``Softmax``/``LogSoftmax``, ``LayerNormalization``, ``Gelu``, the cross-entropy loss and
  its gradient, ``AdamOptimizer``, ``ReduceSum``/``ReduceMean``, training-mode
  ``BatchNormalization``, adding ``ScatterND`` and ``MaxPool`` use the profile's
  ``softmax``, ``layernorm``, ``gelu``, ``cross_entropy[_grad]``, ``adam``, ``reduce``,
  ``batchnorm``, ``scatter_add`` and ``maxpool`` fits where it has them (``Hardware.kernel_time``),
  the others the ``elementwise`` one, except that an elementwise op with an operand of rank
  >= 1 broadcast to a larger result (a bias against activations, a mask against attention
  scores, a per-row statistic) uses the ``elementwise_bcast`` fit where the profile has one:
  PyTorch runs those on a strided path bound by elements per second, at about half the
  bytes per second in half precision (``calibration/bench_broadcast.py``). 0-d operands are
  scalars (the backend passes constants as numbers). Kernel fits are per dtype
  (``Hardware.kernel_time``); the ``layernorm`` and ``reduce`` fits also see the rows'
  shape (``row_features``: the normalized width; the kept elements and the reduced ones
  after them), where a profile fitted them so. ``Einsum`` and ``Resize``: ``structured.py``.
- Views and values known before the step cost nothing: ``Reshape``, ``Flatten``,
  ``Squeeze``, ``Unsqueeze``, ``Identity``, ``Shape``, ``Split``, ``Slice``, ``Expand``,
  ``Transpose`` (PyTorch returns views for all of them) and ``Constant``. Exception, with a
  profile that fits ``copy``: a ``Transpose`` of rank 3 or more that moves a batch axis (any
  axis but the last two) costs one copy of the tensor (``Hardware.kernel_time("copy")``):
  the backend makes it contiguous there, once (as a view it could not be read with merged
  batch axes, so each reader would copy it: ``torch.matmul`` reshapes 4-D operands to 3-D
  for ``bmm``, and a ``Reshape`` merging the permuted axes, the heads of attention back into
  the width, copies). So is a transpose that moves the last axis of a tensor whose last two
  dimensions are not both whole multiples of 16 bytes (``copied_transpose``: GPT-2's tied
  LM head, vocabulary 50257, which cuBLAS would read transposed with its slow unaligned
  kernels). Any other 2-D transpose, or one of the last two axes only, is free: the matmul
  kernels read transposed operands.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from distir.analysis.cost import COST_RULES, ZERO, OpCost, main_dtype, tensor_bytes
from distir.analysis.hardware import (
    Hardware,
    broadcast_features,
    concat_features,
    rowwise_features,
    scatter_features,
)
from distir.analysis.layout import (
    COPIED_INPUTS,
    INDEX_ELEMENTS,
    INPUT_STRIDES,
    READ_ACROSS,
    STRIDED_INPUTS,
)
from distir.analysis.type_rules.nn import STASH_TYPES
from distir.ir.types import TensorType, Type

VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Split", "Slice",
         "Expand", "Constant", "Size")
SIMPLE = ("Abs", "Add", "And", "Ceil", "Clip", "Div", "Equal", "Floor", "Greater",
          "GreaterOrEqual", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Max", "Min", "Mul",
          "Neg", "Not", "Or", "Reciprocal", "Relu", "Sub", "Sum", "Where", "Cast", "Dropout",
          "Sqrt", "ReluGrad", "MSELossGrad", "SGDOptimizer", "Mod", "Xor", "PRelu", "Sign",
          "Round", "IsInf", "CastLike", "HardSigmoid", "HardSwish", "Softsign", "Shrink",
          "ThresholdedRelu", "BitwiseNot", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Mean")
TRANSCENDENTAL = ("Exp", "Log", "Erf", "Gelu", "Sigmoid", "Tanh", "Sin", "Cos", "Softplus",
                  "Pow", "GeluGrad", "Mish", "Atan", "Selu", "Elu", "Tan", "Asin", "Acos",
                  "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Celu")
REDUCING = ("ReduceMean", "ReduceSum", "ReduceMax", "ArgMax", "Softmax", "LogSoftmax",
            "LayerNormalization", "BatchNormalization", "LRN", "MSELoss",
            "SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad", "GlobalAveragePool",
            "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
            "ReduceLogSumExp", "ArgMin", "InstanceNormalization", "GroupNormalization",
            "CumSum", "TopK", "GlobalMaxPool", "ReduceLogSum", "Hardmax", "LpNormalization",
            "MeanVarianceNormalization")
COPIES = ("Concat", "Gather", "Tile", "Trilu", "ScatterND", "ConstantOfShape", "Range",
          "GatherElements", "GatherND", "ScatterElements", "OneHot", "Pad", "DepthToSpace",
          "SpaceToDepth", "NonZero", "Col2Im")

_FLOPS_PER_ELEMENT = {**dict.fromkeys(SIMPLE, 1.0), **dict.fromkeys(TRANSCENDENTAL, 8.0),
                      **dict.fromkeys(REDUCING, 5.0), **dict.fromkeys(COPIES, 0.0),
                      "AdamOptimizer": 12.0}


KERNEL_FAMILY = {"Softmax": "softmax", "LogSoftmax": "softmax",
                 "LayerNormalization": "layernorm", "Gelu": "gelu",
                 "SoftmaxCrossEntropyLoss": "cross_entropy",
                 "SoftmaxCrossEntropyLossGrad": "cross_entropy_grad",
                 "AdamOptimizer": "adam", "ReduceSum": "reduce", "ReduceMean": "reduce",
                 "Where": "where", "Concat": "concat"}
"""Ops whose kernels a profile may fit apart from ``elementwise`` (``Hardware.kernel_time``,
which falls back to the ``elementwise`` fit for a profile without the family). Besides:
``BatchNormalization`` in training mode (``batchnorm``), ``ScatterND`` adding into its data
(``scatter_add``: the embedding gradient), ``MaxPool`` (``maxpool``), a constant ``Pad``
(``pad``), ``AveragePool`` (``avgpool``, with its channels and stride as features, where
the profile fits it: else at the memory's bandwidth, which a 3 x 3 pool of stride 1 takes
twelve times), ``InstanceNormalization`` and ``GroupNormalization`` (``groupnorm``, with a
group's elements and a channel's pixels as features, where the profile fits it: else one
pass at the memory's bandwidth, as before the family)."""


def _family(op_type: str, attrs: dict[str, Any]) -> str | None:
    if op_type == "BatchNormalization":
        return "batchnorm" if int(attrs.get("training_mode", 0) or 0) else None
    if op_type == "ScatterND":
        return "scatter_add" if attrs.get("reduction") == "add" else None
    if op_type == "Pad":  # F.pad; the other modes gather (index_select)
        return "pad" if attrs.get("mode", "constant") == "constant" else None
    if op_type in ("InstanceNormalization", "GroupNormalization"):
        return "groupnorm"
    return KERNEL_FAMILY.get(op_type)


def _numel(ts: tuple[Type | None, ...]) -> int:
    return sum(t.numel for t in ts if isinstance(t, TensorType))


_ELEMENTWISE = frozenset(SIMPLE) | frozenset(TRANSCENDENTAL)


def broadcasts(ins: tuple[Type | None, ...], outs: tuple[Type | None, ...]) -> bool:
    """Whether an elementwise op reads an operand of rank >= 1 with fewer elements than its
    (largest) result: it is broadcast, so the kernel takes PyTorch's strided path."""
    n = max((t.numel for t in outs if isinstance(t, TensorType)), default=0)
    return any(isinstance(t, TensorType) and t.rank >= 1 and t.numel < n for t in ins)


@COST_RULES.register(*VIEWS)
def view(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
         hw: Hardware) -> OpCost:
    """Free, but for a ``Reshape`` or ``Flatten`` of a strided input no view can give
    (``layout.Layouts.reshape_layout``): the copy ``torch.reshape`` makes."""
    if attrs.get(COPIED_INPUTS):
        from distir.analysis.cost.train import input_copies_time

        x = ins[0]
        nbytes = 2.0 * x.size_bytes if isinstance(x, TensorType) else 0.0
        return OpCost(input_copies_time(hw, ins, attrs), 0.0, nbytes)
    return ZERO


INDEX_FAMILIES = {"GatherElements": "gather_elements", "ScatterElements": "scatter_elements"}
"""``GatherElements`` and an adding ``ScatterElements`` (the gradient of a gather), priced
by the profile's fits of these families where it has them (``index_op_time``)."""


def index_op_time(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                  hw: Hardware, dt: str) -> OpCost | None:
    """A ``GatherElements`` or adding ``ScatterElements`` by the profile's
    ``gather_elements`` / ``scatter_elements`` fit (``calibration.bench_train``: the
    backend's lowering, its wrap of negative indices and, for the scatter, the copy of
    the data it adds into), ``None`` where it has none or the op is of another kind.
    Features: ``bytes`` (the data, the updates, the result and the index's distinct
    elements), ``width`` (the data's length along the indexed axis: the rows the gather
    reads from or the scatter adds into) and ``inner`` (how many times the index is
    broadcast: ``layout.INDEX_ELEMENTS``, which the simulator sets for an index that is an
    ``Expand``'s view; 1 for a dense index)."""
    family = INDEX_FAMILIES.get(op_type)
    if family is None or (op_type == "ScatterElements" and attrs.get("reduction") != "add") \
            or not hw.has_kernel_fit(family, dt):
        return None
    data, index = ins[0], ins[1] if len(ins) > 1 else None
    if not isinstance(data, TensorType) or not isinstance(index, TensorType) or \
            not data.rank or not index.numel:
        return None
    distinct = int(attrs.get(INDEX_ELEMENTS) or index.numel)
    nbytes = tensor_bytes(ins) + tensor_bytes(outs) - \
        (index.numel - distinct) * index.dtype.itemsize
    width = data.shape[int(attrs.get("axis", 0)) % data.rank]
    flops = float(index.numel)
    feats = rowwise_features(nbytes, width, max(index.numel // max(distinct, 1), 1))
    return OpCost(hw.kernel_time(family, nbytes, flops, dt, feats), flops, nbytes)


@COST_RULES.register(*SIMPLE, *TRANSCENDENTAL, *REDUCING, *COPIES, "AdamOptimizer")
def memory_bound(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                 hw: Hardware) -> OpCost:
    c = _memory_bound(op_type, ins, outs, attrs, hw)
    across = attrs.get(READ_ACROSS)
    if across:
        t = read_across_time(hw, ins, outs[0], across)
        if t > c.seconds:
            return OpCost(t, c.flops, c.bytes)
    return c


def read_across_time(hw: Hardware, ins: tuple, y: Any,
                     across: tuple[tuple[int, int, int], ...]) -> float:
    """The time of an elementwise op some of whose operands it reads across their rows
    (``layout.READ_ACROSS``: ``(position, the operand's innermost axis, the result's)``,
    axes of the result ``y``): the strided reads bound the kernel, each at the time of the
    transposing copy of that operand (the profile's ``copy`` fit, with the result's
    innermost axis as its rows' length and the operand's as its input's), the other
    operands and the result riding along. On an H200 this priced 106 such ops (53 shapes
    of 0.3 to 450 MB, float32 and bfloat16, each operand read across in turn) at a median
    of -1% of their measured time (p90 of the errors 21%: the copy fit's own error at
    small and odd shapes), where they took 1.5 to 7 times a contiguous op's
    (``grid_search/results/elementwise_order``)."""
    if not isinstance(y, TensorType) or not hw.has_kernel_fit("copy"):
        return 0.0
    total = 0.0
    for pos, own, to in across:
        x = ins[pos] if pos < len(ins) else None
        if not isinstance(x, TensorType):
            continue
        nbytes = float(x.size_bytes + y.size_bytes)  # the operand read, the result written
        total += hw.kernel_time("copy", nbytes, 0.0, x.dtype.value,
                                rowwise_features(nbytes, y.shape[to], y.shape[own]))
    return total


def _memory_bound(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                  hw: Hardware) -> OpCost:
    dt = main_dtype(ins, outs)
    if op_type in INDEX_FAMILIES:
        c = index_op_time(op_type, ins, outs, attrs, hw, dt)
        if c is not None:
            return c
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    flops = _FLOPS_PER_ELEMENT[op_type] * max(_numel(outs), _numel(ins))
    family = _family(op_type, attrs)
    if family == "batchnorm":
        from distir.analysis.cost.train import norm_time

        t = norm_time(hw, family, ins[0], nbytes, flops, dt)
        if t is not None:
            return OpCost(t, flops, nbytes)
    if family == "scatter_add" and isinstance(ins[1], TensorType) and \
            few_scatter_rows(ins[1]):  # index_add: its own fit where the profile has one
        return OpCost(hw.kernel_time("scatter_add_few", nbytes, flops, dt), flops, nbytes)
    if family == "scatter_add":
        t = _scatter_add_repeated(hw, ins, nbytes, dt)
        if t is not None:
            return OpCost(t, flops, nbytes)
    if family == "where" and (broadcasts(ins, outs) or not hw.has_kernel_fit(family, dt)):
        family = None  # measured on same-shape operands: else an elementwise kernel
    elif family == "groupnorm" and (not hw.has_kernel_fit(family, dt) or (
            op_type == "GroupNormalization" and
            getattr(STASH_TYPES.get(int(attrs.get("stash_type", 1) or 1)), "value", None) != dt)):
        # a profile measured before the family: one pass, as before; statistics in another
        # dtype than X's are not the fused kernel the family measured (the backend casts)
        family = None
    elif family == "pad" and isinstance(outs[0], TensorType) and \
            isinstance(ins[0], TensorType) and outs[0].shape == ins[0].shape:
        family = None  # pads of zero (TensorFlow's "same" padding of a 1 x 1 kernel): a copy
    if family is not None:
        return OpCost(hw.kernel_time(family, nbytes, flops, dt,
                                     row_features(op_type, ins, outs, attrs, nbytes)),
                      flops, nbytes)
    if op_type in _ELEMENTWISE and broadcasts(ins, outs) and \
            hw.has_kernel_fit("elementwise_bcast", dt):
        return OpCost(hw.kernel_time("elementwise_bcast", nbytes, flops, dt,
                                     broadcast_features(nbytes, op_type == "Where")),
                      flops, nbytes)
    return OpCost(hw.memory_time(nbytes, flops, dt), flops, nbytes)


def row_features(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                 nbytes: float) -> dict[str, float] | None:
    """``rowwise_features`` of a layer norm (or its gradient), a sum or mean reduction, a
    ``Pad`` (``width``: its rows' length) or a copying ``Transpose`` (``width``: the
    result's last axis, ``inner``: the input's), from its types; ``None`` for other ops
    (their fits see ``bytes`` alone).

    A layer norm's ``width`` is the normalized length (the axes from ``axis`` on). A
    reduction's axes are the attribute ``REDUCED_AXES`` (its axes input's value, which the
    simulator adds) or an older opset's ``axes``; else it keeps the axes where its
    result's shape, aligned to the input's from the right (its ``keepdims`` ones or its
    squeezed ones), matches. Its features are ``reduced_blocks``' in its input's memory
    order (``layout.INPUT_STRIDES`` for a strided view), axes of length 1 left out as
    PyTorch squeezes them: ``width`` the kept elements, ``inner`` the reduced ones after
    the last kept block (the pixels of a convolution's bias gradient, 1 for a linear
    layer's; every element of ``[B, 1]`` summed to ``[1]``), ``run`` the innermost kept
    block's. A ``Concat``'s are ``concat_features``."""
    if op_type == "Concat":
        return _concat_features(ins, outs, attrs, nbytes)
    x = ins[0] if ins else None
    if not isinstance(x, TensorType) or x.rank == 0:
        return None
    shape = x.shape
    if op_type == "Pad":
        return rowwise_features(nbytes, shape[-1])
    if op_type == "Transpose":  # the result's last axis, and the input's
        y = outs[0] if outs else None
        return rowwise_features(nbytes, y.shape[-1] if isinstance(y, TensorType) and y.rank
                                else 1, shape[-1])
    if op_type in ("LayerNormalization", "LayerNormGrad"):
        axis = int(attrs.get("axis", -1))
        return rowwise_features(nbytes, math.prod(shape[axis % len(shape):]))
    if op_type in ("InstanceNormalization", "GroupNormalization"):
        return norm_group_features(x, attrs, nbytes)
    if op_type not in ("ReduceSum", "ReduceMean") or not outs or \
            not isinstance(outs[0], TensorType):
        return None
    axes = attrs.get(REDUCED_AXES) or attrs.get("axes")
    if axes:  # the axes the simulator knows (an input's value, or an older opset's attribute)
        gone = {int(a) % len(shape) for a in axes}
        kept = [i not in gone for i in range(len(shape))]
    else:  # matched from the result's shape
        out = outs[0].shape
        kept = [False] * len(shape)
        if len(out) == len(shape):  # keepdims: reduced axes are 1 where the input's are not
            kept = [o == d for o, d in zip(out, shape)]
        else:
            j = len(out) - 1
            for i in range(len(shape) - 1, -1, -1):
                if j >= 0 and out[j] == shape[i]:
                    kept[i] = True
                    j -= 1
    return rowwise_features(nbytes, *reduced_blocks(shape, tuple(kept),
                                                    attrs.get(INPUT_STRIDES)))


def _concat_features(ins: tuple, outs: tuple, attrs: dict[str, Any],
                     nbytes: float) -> dict[str, float] | None:
    y = outs[0] if outs else None
    if not isinstance(y, TensorType) or y.rank == 0:
        return None
    axis = int(attrs.get("axis", 0)) % y.rank
    inner = math.prod(y.shape[axis + 1:])
    parts = [t for t in ins if isinstance(t, TensorType) and t.numel]
    aligned = all(t.shape[axis] * inner * t.dtype.itemsize % 16 == 0 for t in parts)
    return concat_features(nbytes, math.prod(y.shape[:axis]), y.shape[axis], inner,
                           len(parts), aligned, not attrs.get(STRIDED_INPUTS), y.rank)


REDUCED_AXES = "reduced_axes"
"""The attribute the simulator adds for a ``ReduceSum`` / ``ReduceMean`` whose axes input
has a known value: the axes (a result's shape alone cannot say which of two equal axes a
reduction keeps)."""


@functools.lru_cache(maxsize=4096)
def reduced_blocks(shape: tuple[int, ...], kept: tuple[bool, ...],
                   strides: tuple[int, ...] | None = None) -> tuple[int, int, int]:
    """``(width, inner, run)`` of a reduction of a ``shape`` tensor keeping the axes
    ``kept``, read in memory order (by decreasing ``strides``; a contiguous tensor's where
    ``None``): the axes longer than 1, adjacent ones of the same kind merged into blocks;
    ``width`` the kept elements, ``inner`` the reduced ones after the last kept block (1
    where a kept block is innermost; every element where nothing is kept), ``run`` the
    last kept block's. PyTorch's reduction reads its input in this order (TensorIterator
    sorts the axes by stride), so a transposed token tensor ``[N, L, C]`` viewed from
    ``[N, C, L]`` is reduced to ``[C]`` as a convolution's bias gradient is (``inner``
    ``L``), and ``[N, heads, L, head width]`` reduced to ``[heads, head width]`` keeps
    runs of the head width between reduced tokens (a per-head bias's gradient, 1.8 times
    a column sum's time on an H200: ``grid_search/results/strided_reduce/``)."""
    axes = [i for i, d in enumerate(shape) if d > 1]
    if strides is not None and len(strides) == len(shape):
        axes.sort(key=lambda i: -strides[i])  # (stable: ties keep the logical order)
    blocks: list[list[Any]] = []  # [kept, elements]
    for i in axes:
        if blocks and blocks[-1][0] == kept[i]:
            blocks[-1][1] *= shape[i]
        else:
            blocks.append([kept[i], shape[i]])
    width = math.prod(n for k, n in blocks if k)
    if not any(k for k, _ in blocks):
        return 1, math.prod(n for _, n in blocks), 1
    inner = 1
    while blocks and not blocks[-1][0]:
        inner *= blocks.pop()[1]
    if not any(not k for k, _ in blocks) and inner == 1:
        return width, 1, width  # nothing reduced
    return width, inner, blocks[-1][1]


def norm_group_features(x: TensorType, attrs: dict[str, Any],
                        nbytes: float) -> dict[str, float]:
    """``rowwise_features`` of an instance or group norm of ``x`` (``(N, C, ...)``):
    ``width`` the elements of one group (its channels' pixels), ``inner`` one channel's
    pixels, as ``calibration.bench_train`` measures the ``groupnorm`` family."""
    shape = x.shape
    c = shape[1] if len(shape) > 1 else 1
    groups = int(attrs.get("num_groups", c)) or 1
    pixels = math.prod(shape[2:])
    return rowwise_features(nbytes, max(c // groups, 1) * pixels, pixels)


FEW_SCATTER_ROWS = 64
"""An adding ``ScatterND`` of index depth 1 with at most this many index rows is run by
``index_add`` (parallel over the rows' elements, an atomic add where indices repeat), not
by the embedding backward, whose segments are one per distinct index: 0.92 ms on an H200
for one row of 4.8 M float32 elements (a ViT-B/16's key gradient at batch 32), where the
copy's bandwidth allows 0.1 ms. Shared by the backend's lowering and the cost rule."""


def few_scatter_rows(idx: TensorType) -> bool:
    """Whether an adding ``ScatterND`` with indices of type ``idx`` (index depth 1) has
    few rows (``FEW_SCATTER_ROWS``)."""
    depth = idx.shape[-1] if idx.rank else 0
    return depth == 1 and idx.numel <= FEW_SCATTER_ROWS


def _scatter_add_repeated(hw: Hardware, ins: tuple, nbytes: float, dt: str) -> float | None:
    """An adding ``ScatterND`` by the profile's ``scatter_add_repeated`` fit (``None``
    without one): ``rows`` index tuples of depth ``q`` into ``data``, each adding a slice
    of ``width`` elements; ``table`` is the number of addressable slices."""
    data, idx = ins[0], ins[1]
    if not (isinstance(data, TensorType) and isinstance(idx, TensorType)) or idx.rank < 1:
        return None
    q = idx.shape[-1]
    if not 1 <= q <= data.rank:
        return None
    rows = idx.numel // q if q else 0
    table = 1
    for d in data.shape[:q]:
        table *= d
    width = data.numel // table if table else 0
    return hw.fitted_kernel_time("scatter_add_repeated", dt,
                                 scatter_features(rows, width, table, nbytes))


def copies_batch_axes(rank: int, perm: tuple[int, ...] | list[int] | None) -> bool:
    """Whether a ``Transpose`` of a rank-``rank`` tensor by ``perm`` (``None``: reversed)
    moves an axis other than the last two, so that its consumer copies it (module
    docstring)."""
    if rank < 3:
        return False
    p = tuple(range(rank - 1, -1, -1)) if perm is None else tuple(int(a) % rank for a in perm)
    return p[:-2] != tuple(range(rank - 2))


ALIGN_BYTES = 16
"""The alignment (bytes) of a matrix's rows that the vectorized matmul kernels need."""


def only_unit_axes_move(shape: tuple[int, ...],
                        perm: tuple[int, ...] | list[int] | None) -> bool:
    """Whether a ``Transpose`` of ``shape`` by ``perm`` leaves the axes longer than 1 in
    their order: it moves no element, and is a reshape (the backend's, a view with the
    strides of a contiguous tensor: a ``permute`` view keeps the moved axis's stride, which
    ``torch.matmul`` reads as a tensor it cannot fold into one product, running one
    matrix-vector product per row instead, 8x the product's time on an H200 for
    ``nn.MultiheadAttention``'s ``(1, 512, 768) -> (512, 1, 768)`` in a pipeline microbatch
    of one sequence)."""
    rank = len(shape)
    p = tuple(range(rank - 1, -1, -1)) if perm is None else tuple(int(a) % rank for a in perm)
    moved = [a for a in p if shape[a] != 1]
    return moved == sorted(moved)


def copied_transpose(shape: tuple[int, ...], itemsize: int,
                     perm: tuple[int, ...] | list[int] | None) -> bool:
    """Whether the backend computes a ``Transpose`` of a tensor of ``shape`` (elements of
    ``itemsize`` bytes) by ``perm`` as a contiguous copy rather than a view: where it moves
    a batch axis (``copies_batch_axes``), and where it moves the last axis of a tensor one
    of whose last two dimensions spans a number of bytes that is not a multiple of
    ``ALIGN_BYTES``; never where only axes of length 1 move (``only_unit_axes_move``: a
    reshape). Read as a view, the second kind sends a matrix product to cuBLAS's
    unaligned transposed kernels (GPT-2's tied LM head ``x @ wte^T``, vocabulary 50257:
    12.9 ms on an H200 in bfloat16, against 8.2-8.9 ms for its two gradient products of
    the same size) and an elementwise reader to strided, uncoalesced loads."""
    rank = len(shape)
    if only_unit_axes_move(shape, perm):
        return False
    if copies_batch_axes(rank, perm):
        return True
    if rank < 2:
        return False
    p = tuple(range(rank - 1, -1, -1)) if perm is None else tuple(int(a) % rank for a in perm)
    return p[-1] != rank - 1 and any((d * itemsize) % ALIGN_BYTES for d in shape[-2:])


@COST_RULES.register("Transpose")
def transpose(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
              hw: Hardware) -> OpCost:
    x = ins[0]
    if not isinstance(x, TensorType) or not hw.has_kernel_fit("copy") or \
            not copied_transpose(x.shape, x.dtype.itemsize, attrs.get("perm")):
        return ZERO
    nbytes = 2.0 * x.size_bytes  # read once, written once
    return OpCost(hw.kernel_time("copy", nbytes, 0.0, x.dtype.value,
                                 row_features(op_type, ins, outs, attrs, nbytes)),
                  0.0, nbytes)


@COST_RULES.register("MaxPool", "AveragePool")
def pool(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
         hw: Hardware) -> OpCost:
    window = pool_window(ins[0], attrs)
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    flops = float(_numel(outs[:1]) * window)
    dt = main_dtype(ins, outs)
    if op_type == "MaxPool":  # the profile's maxpool fit where it has one
        return OpCost(hw.kernel_time("maxpool", nbytes, flops, dt), flops, nbytes)
    if hw.has_kernel_fit("avgpool", dt):  # else at the memory's bandwidth
        return OpCost(hw.kernel_time("avgpool", nbytes, flops, dt,
                                     pool_features(ins[0], attrs, nbytes)), flops, nbytes)
    return OpCost(hw.memory_time(nbytes, flops, dt), flops, nbytes)


def _padded_extents(x: Any, attrs: dict[str, Any]) -> tuple[int, ...] | None:
    """The spatial extents of a pool's input ``x`` with its pads, ``None`` where unknown."""
    if not isinstance(x, TensorType) or x.rank < 3:
        return None
    n = x.rank - 2
    pads = tuple(int(v) for v in attrs.get("pads") or ()) or (0,) * (2 * n)
    if len(pads) != 2 * n:
        return None
    return tuple(d + pads[i] + pads[n + i] for i, d in enumerate(x.shape[2:]))


def pool_window(x: Any, attrs: dict[str, Any]) -> int:
    """The positions a pool's window reads, each axis clipped to the padded input: a window
    of ``ceil_mode`` may reach past it (HF EfficientNet pools its 7 x 7 map with a window of
    2560, which reads 49 positions)."""
    ext = _padded_extents(x, attrs)
    window = 1
    for i, k in enumerate(attrs.get("kernel_shape") or ()):
        window *= min(int(k), ext[i]) if ext is not None and i < len(ext) else int(k)
    return window


def pool_features(x: Any, attrs: dict[str, Any], nbytes: float) -> dict[str, float] | None:
    """``rowwise_features`` of an average pool (or its gradient) of ``x``: ``width`` its
    channels, ``inner`` its (largest) stride, clipped to the padded input, as
    ``calibration.bench_train`` measures them."""
    ext = _padded_extents(x, attrs)
    if ext is None:
        return None
    stride = max((min(int(v), e) for v, e in zip(attrs.get("strides") or (), ext)), default=1)
    return rowwise_features(nbytes, x.shape[1], stride)


def _products(hw: Hardware, dims: list[tuple[int, ...]], t: TensorType,
              extra_bytes: float = 0.0, layouts: tuple[str | None, ...] = ()) -> OpCost:
    """The cost of the matrix products ``dims`` in ``t``'s dtype, each ``(m, n, k)`` (one
    product) or ``(batch, m, n, k)`` (a batched product, both operands batched), plus a
    memory-bound kernel over ``extra_bytes`` when there are any. ``layouts[i]``, where
    given and not ``None``, names the family of product ``i``'s operand layout
    (``matmul_tn``, ``matmul_nt``: ``Hardware.layout_matmul_time``)."""
    dt, size = t.dtype.value, t.dtype.itemsize
    secs = flops = nbytes = 0.0
    for i, d in enumerate(dims):
        batch, (m, n, k) = (1, d) if len(d) == 3 else (d[0], d[1:])
        if m == 0 or n == 0 or batch == 0:
            continue
        layout = layouts[i] if i < len(layouts) else None
        if batch > 1:
            secs += (hw.bmm_time(batch, m, n, k, dt, size) if layout is None
                     else hw.layout_bmm_time(layout, batch, m, n, k, dt, size))
        elif layout is not None:
            secs += hw.layout_matmul_time(layout, m, n, k, dt, size)
        else:
            secs += hw.matmul_time(m, n, k, dt, size)
        flops += 2.0 * batch * m * n * k
        nbytes += float(batch * (m * k + k * n + m * n) * size)
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
    batch, m, k, n, b_batched = _matmul_dims(ins[0], ins[1])
    if b_batched and batch > 1:
        return _products(hw, [(batch, m, n, k)], ins[0])
    return _products(hw, [(batch * m, n, k)], ins[0])


@COST_RULES.register("MatMulGrad", skips_unused=True)
def matmul_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                hw: Hardware) -> OpCost:
    """da = dy @ b^T and db = a^T @ dy (summed over broadcast batches when b is shared);
    a result the program never uses (``None`` in ``outs``) is not computed. With a 2-D
    ``b`` (a weight) the backend runs ``torch.matmul(dy, b.t())`` and ``torch.mm(a^T,
    dy)`` over the folded rows: the profile's ``matmul_nt`` and ``matmul_tn`` fits where it
    has them; with both operands batched (attention) ``torch.matmul(dy, b.mT)`` and
    ``torch.matmul(a.mT, dy)``: its ``bmm_nt`` and ``bmm_tn`` fits (module docstring)."""
    a, b = ins[0], ins[1]
    batch, m, k, n, b_batched = _matmul_dims(a, b)
    da: tuple[int, ...]
    db: tuple[int, ...]
    layouts: tuple[str | None, str | None] = (None, None)
    if b_batched and batch > 1:
        da, db = (batch, m, k, n), (batch, k, n, m)
        layouts = ("bmm_nt", "bmm_tn")
    else:
        da, db = (batch * m, k, n), (k, n, batch * m)
        if a.rank >= 2 and b.rank == 2:
            layouts = ("matmul_nt", "matmul_tn")
    need = [i for i, o in enumerate(outs[:2]) if o is not None]
    return _products(hw, [(da, db)[i] for i in need], a,
                     layouts=tuple(layouts[i] for i in need))


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


def _window(w: TensorType) -> int:
    p = 1
    for d in w.shape[2:]:
        p *= d
    return p


@COST_RULES.register("Conv")
def conv(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
         hw: Hardware) -> OpCost:
    """The profile's ``conv`` fit of the dtype where it has one (``cost/train.py``), else an
    implicit GEMM: ``m = N * output pixels``, ``n = M`` (output channels), ``k = C / group
    * kernel size``."""
    x, w, y = ins[0], ins[1], outs[0]
    from distir.analysis.cost.train import conv_fit_time, input_copies_time

    fitted = conv_fit_time(hw, "conv", x, w, y, attrs)
    copies = input_copies_time(hw, ins, attrs)
    if fitted is not None:  # the profile's cuDNN fit (2-D); bias added apart
        flops = 2.0 * y.numel * w.shape[1] * _window(w)
        nbytes = float(tensor_bytes(ins) + tensor_bytes(outs))
        if len(ins) > 2 and ins[2] is not None:
            fitted += hw.memory_time(2.0 * y.size_bytes, float(y.numel), x.dtype.value)
        return OpCost(fitted + copies, flops, nbytes)
    pixels = 1
    for d in y.shape[2:]:
        pixels *= d
    window = 1
    for d in w.shape[2:]:
        window *= d
    c = _products(hw, [(x.shape[0] * pixels, w.shape[0], w.shape[1] * window)], x)
    return OpCost(c.seconds + copies, c.flops, c.bytes) if copies else c
