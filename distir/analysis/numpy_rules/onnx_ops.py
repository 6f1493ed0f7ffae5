"""Numpy rules of the ONNX ops: the reference semantics are ``onnx.reference``'s kernels.

Every op of ``distir.ir._onnx_schemas`` is run by the ``onnx.reference`` implementation of
its opset-21 schema; nothing here re-implements a kernel ONNX ships, except the
``OWN_KERNELS``, whose reference kernels are wrong on valid inputs
(``numpy_rules.kernels``). An ``OnnxKernels``
object builds one kernel instance per distinct ``(op, attributes, omitted-input pattern,
result count)`` (and input dtypes, for ops that ONNX defines by a context-dependent function
such as ``Gelu``) and keeps it, so a program that repeats a layer instantiates each kernel
once.

Invariants:
- ``import distir`` does not import ``onnx``: it is imported when the first kernel is built.
- Results are numpy arrays (never numpy scalars) whose dtype is the one ONNX's type
  constraints give (the dtype of the data input, ``Bool`` for comparisons, ``Int64`` for
  ``Shape``/``ArgMax``, ``to`` for ``Cast``...); a kernel that returns another dtype is
  cast to it.
- An omitted optional input is ``None`` here and an empty input name in the ONNX node,
  exactly as ``onnx.reference.ReferenceEvaluator`` passes it.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from distir.analysis.rules import NUMPY_RULES
from distir.errors import DistIRError, ExecutionError, UnsupportedError
from distir.ir._onnx_schemas import ONNX_SCHEMAS, OPSET
from distir.ir.types import DenseAttr, DType

__all__ = ["OnnxKernels", "KERNELS", "onnx_attributes"]

_BOOL_RESULT = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                          "IsNaN", "IsInf", "Not", "And", "Or", "Xor"})
_INT64_RESULT = frozenset({"Shape", "Size", "ArgMax", "ArgMin", "NonZero"})


def onnx_attributes(op_type: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """DistIR attributes as ``onnx.helper.make_node`` keyword arguments.

    Only attributes of the ONNX schema are kept (``Constant``'s ``device`` is DistIR's);
    values are converted by the schema's kind: a ``DType`` becomes its ``TensorProto`` enum,
    a ``DenseAttr`` a ``TensorProto``, tuples lists, and ints given for float attributes
    floats (so that ``alpha=1`` stays a float attribute).
    """
    from onnx import helper, numpy_helper

    specs = cast("tuple[tuple[str, str, bool, Any], ...]", ONNX_SCHEMAS[op_type]["attrs"])
    kinds = {a[0]: a[1] for a in specs}
    out: dict[str, Any] = {}
    for name, v in attrs.items():
        kind = kinds.get(name)
        if kind is None or v is None:
            continue
        if isinstance(v, DType):
            out[name] = helper.np_dtype_to_tensor_dtype(v.np)
        elif isinstance(v, DenseAttr):
            out[name] = numpy_helper.from_array(np.array(v.array))
        elif kind == "float":
            out[name] = float(v)
        elif kind == "int":
            out[name] = int(v)
        elif kind == "floats":
            out[name] = [float(x) for x in v]
        elif kind == "ints":
            out[name] = [int(x) for x in v]
        elif isinstance(v, tuple):
            out[name] = list(v)
        else:
            out[name] = v
    return out


class OnnxKernels:
    """``onnx.reference`` kernel instances, built on first use and kept.

    ``cache`` maps ``(op_type, attributes, omitted-input mask, result count, input dtypes or
    None)`` to a kernel instance; the dtypes are part of the key only for ops whose ONNX
    reference implementation is a context-dependent function (``context_dependent``).
    """

    def __init__(self) -> None:
        self.cache: dict[tuple, Any] = {}
        self.context_dependent: set[str] = set()
        self._run_params: dict[str, Any] | None = None

    def run_params(self) -> dict[str, Any]:
        """The parameters ``onnx.reference`` kernels are constructed with."""
        if self._run_params is None:
            from onnx.reference import ReferenceEvaluator

            self._run_params = {"log": _no_log, "opsets": {"": OPSET}, "verbose": 0,
                                "new_ops": None, "evaluator_cls": ReferenceEvaluator}
        return self._run_params

    def kernel(self, op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> Any:
        """The kernel instance for this op application (built once per key)."""
        mask = tuple(a is None for a in args)
        base = (op_type, tuple(sorted(attrs.items())), mask, n_out)
        key = base + (_dtypes(args),) if op_type in self.context_dependent else base
        inst = self.cache.get(key)
        if inst is None:
            inst = self._build(op_type, args, attrs, n_out, mask)
            if op_type in self.context_dependent:  # learned while building
                key = base + (_dtypes(args),)
            self.cache[key] = inst
        return inst

    def _build(self, op_type: str, args: tuple, attrs: dict[str, Any], n_out: int,
               mask: tuple[bool, ...]) -> Any:
        from onnx import helper
        from onnx.reference.op_run import RuntimeContextError
        from onnx.reference.ops import load_op

        ins = ["" if missing else f"x{i}" for i, missing in enumerate(mask)]
        while ins and ins[-1] == "":  # trailing omitted inputs are simply absent in ONNX
            ins.pop()
        node = helper.make_node(op_type, ins, [f"y{i}" for i in range(n_out)],
                                **onnx_attributes(op_type, attrs))
        params = self.run_params()
        try:
            # An op ONNX defines by a function body runs that body on ``evaluator_cls``.
            cls = load_op("", op_type, version=OPSET, evaluator_cls=params["evaluator_cls"])
        except RuntimeContextError:
            # ONNX defines the op by a function whose body depends on the input types.
            self.context_dependent.add(op_type)
            types = [helper.make_tensor_type_proto(
                helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), None)
                for a in args if a is not None]
            cls = load_op("", op_type, version=OPSET, node=node, input_types=types,
                          evaluator_cls=params["evaluator_cls"])
        return cls(node, params)

    def run(self, op_type: str, args: tuple, attrs: dict[str, Any], n_out: int,
            ) -> tuple[np.ndarray, ...]:
        """Run the op's ONNX reference kernel; results are arrays of the ONNX dtypes."""
        try:
            inst = self.kernel(op_type, args, attrs, n_out)
            n = len(args)
            while n and args[n - 1] is None:
                n -= 1
            outs = inst.run(*args[:n])
        except DistIRError:
            raise
        except Exception as e:  # noqa: BLE001 - any kernel failure is bad input here
            shapes = [None if a is None else tuple(np.shape(a)) for a in args]
            root: BaseException = e
            while root.__cause__ is not None:  # onnx.reference wraps the kernel's error
                root = root.__cause__
            text = str(root).strip()
            first = text.splitlines()[0] if text else type(root).__name__
            raise ExecutionError(f"the ONNX reference kernel failed on inputs of shapes "
                                 f"{shapes}: {first}") from None
        if len(outs) < n_out:
            raise ExecutionError(f"the ONNX reference kernel gave {len(outs)} results, "
                                 f"{n_out} named")
        return tuple(_fix_dtype(op_type, args, attrs, i, o) for i, o in
                     enumerate(outs[:n_out]))


def _no_log(pattern: str, *args: Any) -> None:
    return None


def _dtypes(args: tuple) -> tuple[str | None, ...]:
    return tuple(None if a is None else np.asarray(a).dtype.str for a in args)


def _expected_dtype(op_type: str, args: tuple, attrs: dict[str, Any], i: int,
                    ) -> np.dtype | None:
    """The dtype ONNX's type constraints give result ``i``, where it is fixed."""
    if op_type in _BOOL_RESULT or (op_type == "Dropout" and i == 1):
        return np.dtype(bool)
    if op_type in _INT64_RESULT or (op_type in ("MaxPool", "TopK") and i == 1):
        return np.dtype(np.int64)
    if op_type == "Cast":
        return attrs["to"].np
    if op_type == "CastLike":
        return np.asarray(args[1]).dtype
    if op_type == "OneHot":
        return np.asarray(args[2]).dtype
    if op_type == "ConstantOfShape":
        v = attrs.get("value")
        return v.dtype.np if isinstance(v, DenseAttr) else np.dtype(np.float32)
    if op_type == "BatchNormalization" and i > 0:
        return np.asarray(args[3]).dtype  # running statistics have the mean's type
    if op_type == "LayerNormalization" and i > 0:
        return None  # mean and inverse std dev have the stash type
    if op_type == "Where":
        return np.asarray(args[1]).dtype
    for a in args:
        if a is not None:
            return np.asarray(a).dtype
    return None


def _fix_dtype(op_type: str, args: tuple, attrs: dict[str, Any], i: int, out: Any,
               ) -> np.ndarray:
    arr = np.asarray(out)
    want = _expected_dtype(op_type, args, attrs, i)
    if want is not None and arr.dtype != want:
        arr = arr.astype(want)
    return arr


KERNELS = OnnxKernels()
"""The kernel cache of the reference executor (created once, filled on use)."""


def constant_value(attrs: dict[str, Any]) -> np.ndarray:
    """The value of a ``Constant`` from whichever of its ``value*`` attributes is set."""
    v = attrs.get("value")
    if isinstance(v, DenseAttr):
        return np.array(v.array)
    if attrs.get("value_float") is not None:
        return np.array(attrs["value_float"], dtype=np.float32)
    if attrs.get("value_floats") is not None:
        return np.array(attrs["value_floats"], dtype=np.float32).reshape(-1)
    if attrs.get("value_int") is not None:
        return np.array(attrs["value_int"], dtype=np.int64)
    if attrs.get("value_ints") is not None:
        return np.array(attrs["value_ints"], dtype=np.int64).reshape(-1)
    if attrs.get("value_string") is not None or attrs.get("value_strings") is not None:
        raise UnsupportedError("Constant holds strings, which DistIR tensors cannot")
    if attrs.get("sparse_value") is not None:
        raise UnsupportedError("Constant with a sparse_value is not supported; "
                               "give value=dense<...>[...] instead")
    raise ExecutionError("a Constant needs one of value, value_float, value_floats, value_int "
                         "or value_ints")


@NUMPY_RULES.register("Constant")
def constant(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (constant_value(attrs),)


_NEGATIVE_AXES = {"Resize": "axes"}
"""Axis attributes the ONNX spec lets count from the end but whose ``onnx.reference``
kernels mishandle negative values (onnx 1.23: Resize transposes by them): made
non-negative first, which the spec defines as the same."""


def _nonnegative_axes(op_type: str, args: tuple, attrs: dict[str, Any]) -> dict[str, Any]:
    name = _NEGATIVE_AXES[op_type]
    v = attrs.get(name)
    if v is None or not args or args[0] is None:
        return attrs
    rank = np.ndim(args[0])
    if isinstance(v, int):
        return attrs if v >= 0 else {**attrs, name: v + rank}
    if all(a >= 0 for a in v):
        return attrs
    return {**attrs, name: tuple(a + rank if a < 0 else a for a in v)}


OWN_KERNELS = ("GatherElements", "ConvTranspose", "LpNormalization", "AveragePool", "Pad")
"""Ops whose ``onnx.reference`` kernel is wrong on valid inputs: ``numpy_rules.kernels``
implements them instead (``AveragePool``: ``numpy_rules.train``, beside its gradient, where
a ``ceil_mode`` window reaches past the padded input; ``Pad``: where a pad is negative, a
crop; the reference's elsewhere)."""


@NUMPY_RULES.register(*(name for name in ONNX_SCHEMAS
                        if name != "Constant" and name not in OWN_KERNELS))
def onnx_op(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    if op_type in _NEGATIVE_AXES:
        attrs = _nonnegative_axes(op_type, args, attrs)
    return KERNELS.run(op_type, args, attrs, n_out)
