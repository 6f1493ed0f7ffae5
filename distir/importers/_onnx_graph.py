"""An ONNX graph (already at opset 21, ops already checked) as a DistIR function.

Invariants of the result:
- ``@main``'s parameters are the graph inputs that have no initializer, in graph order, then
  the initializers, in the order the model lists them; every parameter is a tensor typed on
  ``device``. ``fn.initializers`` maps each initializer's name to its numpy value. Integer
  initializers of at most ``SMALL_INDEX_INITIALIZER`` elements (axes, bounds, shapes) are
  ``Constant`` ops at the start of ``@main`` instead.
- One op per node, in a topological order (the model's own order when it is one); names are
  the model's. An omitted optional input (``""``) is ``None``; trailing ones are dropped, as
  are trailing omitted outputs; an omitted output in the middle is the discard ``_``.
- Attributes are DistIR values (tuples, ``DenseAttr``, ``DType`` for ``Cast.to``); those
  equal to the schema default are dropped. Float attributes are float32 in ONNX: each is kept
  as the shortest decimal that reads back as the same float32 (``1e-05``, not
  ``9.999999747378752e-06``).
- ``Constant`` always carries its value as ``value=DenseAttr`` (``value_float``, ``value_ints``
  and the like are folded into it) and ``device=`` when ``device`` is not 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from distir.errors import ImportError_
from distir.ir.core import Function, Op, Value
from distir.ir.schemas import SCHEMAS, AttrSpec
from distir.ir.types import DenseAttr, DType, TensorType

__all__ = ["DTYPES", "dtype_of", "dtype_name", "convert_graph", "describe_node"]

DTYPES: dict[int, DType] = {
    TensorProto.BOOL: DType.Bool,
    TensorProto.INT8: DType.Int8,
    TensorProto.INT32: DType.Int32,
    TensorProto.INT64: DType.Int64,
    TensorProto.FLOAT16: DType.Float16,
    TensorProto.BFLOAT16: DType.BFloat16,
    TensorProto.FLOAT: DType.Float32,
    TensorProto.DOUBLE: DType.Float64,
}
"""ONNX element types that DistIR has, by their ``TensorProto`` number."""

_SUPPORTED_NAMES = ", ".join(d.value for d in DType)


def dtype_name(elem_type: int) -> str:
    """The ONNX name of an element type (``UINT8``), for messages."""
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"element type {elem_type}"


def dtype_of(elem_type: int, what: str) -> DType:
    """The DType of an ONNX element type; an ``ImportError_`` naming ``what`` otherwise."""
    dt = DTYPES.get(elem_type)
    if dt is None:
        raise ImportError_(f"{what} has ONNX type {dtype_name(elem_type)}, which DistIR does "
                           f"not have (it has {_SUPPORTED_NAMES})")
    return dt


def describe_node(node: onnx.NodeProto, index: int) -> str:
    """``node 'conv1' (Conv)``, or ``node #3 (Conv)`` for an unnamed one."""
    where = f"'{node.name}'" if node.name else f"#{index}"
    return f"node {where} ({node.op_type})"


def _f32(x: float) -> float:
    """The shortest decimal that reads back as the float32 ``x``."""
    return float(str(np.float32(x)))


def tensor_array(t: TensorProto, what: str) -> np.ndarray:
    """A tensor's value as a numpy array of its DistIR dtype."""
    dt = dtype_of(t.data_type, what)
    arr = numpy_helper.to_array(t)
    if arr.dtype != dt.np:  # bfloat16 may come back as its raw bits on older onnx
        arr = arr.view(dt.np) if arr.dtype.itemsize == dt.np.itemsize else arr.astype(dt.np)
    return arr


def _attr_value(a: AttributeProto, spec: AttrSpec, what: str) -> Any:
    A = AttributeProto
    k = a.type
    if spec.kind == "dtype":
        if k != A.INT:
            raise ImportError_(f"{what}: attribute {a.name} must be an element type")
        return dtype_of(a.i, f"{what}: attribute {a.name}")
    if k == A.INT:
        return int(a.i)
    if k == A.FLOAT:
        return _f32(a.f)
    if k == A.STRING:
        return a.s.decode("utf-8")
    if k == A.INTS:
        return tuple(int(x) for x in a.ints)
    if k == A.FLOATS:
        return tuple(_f32(x) for x in a.floats)
    if k == A.STRINGS:
        return tuple(s.decode("utf-8") for s in a.strings)
    if k == A.TENSOR:
        return DenseAttr.from_array(tensor_array(a.t, f"{what}: attribute {a.name}"))
    kind = A.AttributeType.Name(k) if k in A.AttributeType.values() else str(k)
    raise ImportError_(f"{what}: attribute {a.name} is of ONNX kind {kind}, which DistIR "
                       "does not support")


def _is_default(v: Any, default: Any) -> bool:
    if default is None:
        return False
    if isinstance(v, float) or isinstance(default, float):
        return (isinstance(v, int | float) and isinstance(default, int | float)
                and np.float32(v) == np.float32(default))
    if isinstance(v, tuple) and isinstance(default, tuple):
        return len(v) == len(default) and all(
            _is_default(x, d) for x, d in zip(v, default, strict=True))
    return type(v) is type(default) and v == default


# Constant's alternatives to ``value``, and the dtype each stands for.
_CONSTANT_FORMS = {"value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}


def _attrs(node: onnx.NodeProto, what: str, device: int) -> dict[str, Any]:
    schema = SCHEMAS[node.op_type]
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise ImportError_(f"{what}: attribute {a.name} refers to a function attribute "
                               f"({a.ref_attr_name}), which a graph cannot have")
        spec = schema.attr_map.get(a.name)
        if spec is not None and spec.kind == "unsupported":
            raise ImportError_(f"{what}: attribute {a.name} has no DistIR form (DistIR has "
                               "dense tensors only)")
        if spec is None or spec.kind in ("device", "devices"):
            known = ", ".join(n for n, s in schema.attr_map.items()
                              if s.kind not in ("unsupported", "device", "devices")) or "none"
            raise ImportError_(f"{what}: attribute {a.name} is not one of {node.op_type}'s at "
                               f"opset 21 (it takes: {known})")
        v = _attr_value(a, spec, what)
        if node.op_type == "Constant":
            if a.name in _CONSTANT_FORMS:
                v, a_name = DenseAttr.from_array(np.asarray(v, _CONSTANT_FORMS[a.name])), "value"
            elif a.name == "value":
                a_name = "value"
            else:
                raise ImportError_(f"{what}: a Constant of strings ({a.name}) has no DistIR "
                                   "dtype")
            out[a_name] = v
            continue
        if not _is_default(v, spec.default):
            out[a.name] = v
    if node.op_type == "Constant":
        if "value" not in out:
            raise ImportError_(f"{what}: a Constant needs a value")
        if device != 0:
            out["device"] = device
    return out


def _topological(nodes: list[onnx.NodeProto], defined: set[str]) -> list[onnx.NodeProto]:
    """The nodes in the model's order when that is topological, else in a topological order
    that keeps the model's order among nodes that are ready together."""
    known = set(defined)
    ordered = True
    for n in nodes:
        if any(x and x not in known for x in n.input):
            ordered = False
            break
        known.update(n.output)
    if ordered:
        return nodes
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    waiting: list[int] = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        for x in n.input:
            if x and x not in defined:
                p = producer.get(x)
                if p is None:
                    raise ImportError_(f"{describe_node(n, i)} uses '{x}', which no node, "
                                       "input or initializer of the graph defines")
                waiting[i] += 1
                users.setdefault(p, []).append(i)
    import heapq

    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    out: list[onnx.NodeProto] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(out) != len(nodes):
        stuck = next(i for i, w in enumerate(waiting) if w > 0)
        raise ImportError_(f"{describe_node(nodes[stuck], stuck)} is part of a cycle: an ONNX "
                           "graph must be acyclic")
    return out


def _hint(name: str) -> str:
    # ``_`` is the discard in DistIR text: a value the model calls that gets another name
    # that no ONNX name can clash with (ONNX names are unique, and this one is not ``_``).
    return "_.onnx" if name == "_" else name


def _input_type(vi: onnx.ValueInfoProto, dims: Mapping[str, int], device: int,
                unbound: list[str]) -> TensorType | None:
    what = f"input '{vi.name}'"
    tt = vi.type
    if tt.WhichOneof("value") != "tensor_type":
        kind = tt.WhichOneof("value") or "no type"
        raise ImportError_(f"{what} is of ONNX kind {kind}; DistIR imports tensor inputs only")
    dt = dtype_of(tt.tensor_type.elem_type, what)
    if not tt.tensor_type.HasField("shape"):
        raise ImportError_(f"{what} has no shape in the model: give it one (for example with "
                           "onnx.tools.update_model_dims.update_inputs_outputs_dims)")
    shape: list[int] = []
    for axis, d in enumerate(tt.tensor_type.shape.dim):
        which = d.WhichOneof("value")
        if which == "dim_value":
            shape.append(int(d.dim_value))
        elif which == "dim_param":
            if d.dim_param in dims:
                shape.append(dims[d.dim_param])
            else:
                unbound.append(f"'{d.dim_param}' ({what}, axis {axis})")
        else:
            raise ImportError_(f"{what} has an unnamed unknown dimension at axis {axis}: name "
                               "it (dim_param) or fix it in the model, for example with "
                               "onnx.tools.update_model_dims.update_inputs_outputs_dims")
    if unbound:
        return None
    return TensorType(dt, tuple(shape), device)


def symbolic_dims(graph: onnx.GraphProto) -> list[str]:
    """The names of the symbolic dimensions of the graph's inputs, in order of appearance."""
    seen: dict[str, None] = {}
    inits = {t.name for t in graph.initializer}
    for vi in graph.input:
        if vi.name in inits or vi.type.WhichOneof("value") != "tensor_type":
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.WhichOneof("value") == "dim_param":
                seen[d.dim_param] = None
    return list(seen)


SMALL_INDEX_INITIALIZER = 64
"""Integer initializers of at most this many elements are imported as ``Constant`` ops
rather than bound parameters: they are index operands (axes, slice bounds, pads, target
shapes), not weights."""


def convert_graph(graph: onnx.GraphProto, dims: Mapping[str, int], device: int,
                  *, release: bool = False) -> Function:
    """The ``@main`` function of ``graph`` with its initializer values attached.

    ``release`` lets the importer drop each initializer's bytes from ``graph`` once it is
    converted (the graph is the importer's own copy), halving peak memory on large models.
    """
    inits = {t.name for t in graph.initializer}
    values: dict[str, Value] = {}
    params: list[Value] = []
    unbound: list[str] = []
    for vi in graph.input:
        if vi.name in inits:
            continue
        t = _input_type(vi, dims, device, unbound)
        v = Value(_hint(vi.name), t)
        values[vi.name] = v
        params.append(v)
    if unbound:
        names = sorted({u.split("'")[1] for u in unbound})
        bind = ", ".join(f"'{n}': N" for n in names)
        flags = " ".join(f"--dim {n}=N" for n in names)
        raise ImportError_(f"unbound symbolic dimension{'s' * (len(unbound) > 1)} "
                           f"{', '.join(unbound)}: bind {'them' if len(names) > 1 else 'it'} "
                           f"with dims={{{bind}}} (command line: {flags})")
    arrays: dict[str, np.ndarray] = {}
    ops: list[Op] = []
    for t in graph.initializer:
        what = f"initializer '{t.name}'"
        arr = tensor_array(t, what)
        if release:
            t.ClearField("raw_data")
        key = _hint(t.name)  # the printed name, which keys the weights file
        if arr.dtype.kind in "iu" and arr.size <= SMALL_INDEX_INITIALIZER:
            # Axes, bounds, pads and shapes (the dynamo exporter passes them as
            # initializers): a Constant, so that every interpretation knows the value
            # where it compiles the op, not only when the step runs.
            v = Value(key)
            ops.append(Op("Constant", (), {"value": DenseAttr.from_array(arr),
                                           "device": device}, (v,)))
            values[t.name] = v
            continue
        v = Value(key, TensorType(DType.from_np(arr.dtype), tuple(int(d) for d in arr.shape),
                                  device))
        values[t.name] = v
        params.append(v)
        arrays[key] = arr
    if graph.sparse_initializer:
        raise ImportError_(f"sparse initializer '{graph.sparse_initializer[0].values.name}': "
                           "DistIR has dense tensors only; densify it first")

    nodes = _topological(list(graph.node), set(values))
    index = {id(n): i for i, n in enumerate(graph.node)}
    for node in nodes:
        what = describe_node(node, index[id(node)])
        names = list(node.input)
        while names and not names[-1]:
            names.pop()
        ins: list[Value | None] = []
        for x in names:
            if not x:
                ins.append(None)
                continue
            src = values.get(x)
            if src is None:
                raise ImportError_(f"{what} uses '{x}', which no node, input or initializer "
                                   "of the graph defines")
            ins.append(src)
        attrs = _attrs(node, what, device)
        outs_names = list(node.output)
        while outs_names and not outs_names[-1]:
            outs_names.pop()
        outs: list[Value] = []
        for o in outs_names:
            v = Value(_hint(o) if o else "_")
            if o:
                values[o] = v
            outs.append(v)
        ops.append(Op(node.op_type, ins, attrs or None, outs))

    returns: list[Value] = []
    for o in graph.output:
        r = values.get(o.name)
        if r is None:
            raise ImportError_(f"graph output '{o.name}' is not computed by any node, input "
                               "or initializer")
        returns.append(r)
    fn = Function("main", params, ops, returns)
    fn.initializers = arrays
    return fn
