"""Specialize ``If`` nodes whose condition is known once the input dimensions are bound.

Exporters write an ``If`` where a model branches on a shape (``if x.size(0) % 2 == 0``,
``if q.size(-2) != k.size(-2)``: TorchScript keeps the branches of scripted code, one per
layer in DeBERTa's attention as ``transformers`` 5.17 exports it). With the dimensions
bound, such a condition is a constant of the program: the ``If`` is replaced by the nodes
of the branch taken, its results by ``Identity`` copies of the branch's, and the program is
straight-line again. A condition that reads any value of the program other than static
shapes and constants is left alone, and the importer refuses the ``If`` in one line.

The shapes are ONNX's own shape inference (``onnx.shape_inference``, with data propagation
for shape arithmetic) on the model with its dimensions bound: a ``Shape`` or ``Size`` whose
input's shape it infers fully is a constant; one of a value whose shape depends on values
(``NonZero``, a ``Reshape`` to a computed shape it cannot follow) is not. The condition is
then computed by ``onnx.reference`` on the nodes between those constants and it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

__all__ = ["specialize_ifs"]

_MAX_ROUNDS = 64  # nested branches: each round specializes the ``If`` nodes it can
_SMALL = 64  # initializers of at most this many elements go into shape inference whole


def specialize_ifs(proto: onnx.ModelProto, dims: Mapping[str, int], opset: int) -> int:
    """Replace, in place, every ``If`` of ``proto``'s graph (of ONNX opset ``opset``) whose
    condition is known from the bound input ``dims``, static shapes and constants by the
    branch it takes, repeatedly (a branch may hold ``If`` nodes of its own). Returns how
    many were replaced."""
    done = 0
    for _ in range(_MAX_ROUNDS):
        n = _one_round(proto, dims, opset)
        if not n:
            break
        done += n
    return done


def _one_round(proto: onnx.ModelProto, dims: Mapping[str, int], opset: int) -> int:
    graph = proto.graph
    ifs = [i for i, n in enumerate(graph.node)
           if n.op_type == "If" and n.domain in ("", "ai.onnx")]
    if not ifs:
        return 0
    shapes = _static_shapes(proto, dims)
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    inits = {t.name: t for t in graph.initializer}
    names = _all_names(graph)
    replaced = 0
    for i in reversed(ifs):  # (from the end: earlier positions stay valid)
        node = graph.node[i]
        cone = _cone(node.input[0], graph, producer, inits, shapes)
        if cone is None:
            continue
        value = _evaluate(node.input[0], cone, graph, inits, shapes, opset)
        if value is None:
            continue
        branch = _attr_graph(node, "then_branch" if value else "else_branch")
        if branch is None or len(branch.output) != len(node.output):
            continue
        inner = {o for n in branch.node for o in n.output if o} | \
            {t.name for t in branch.initializer}
        if inner & names:  # (a name of the graph defined again: leave it)
            continue
        names |= inner
        nodes = list(branch.node) + [
            helper.make_node("Identity", [b.name], [o], name=f"{node.name or 'If'}_out{j}")
            for j, (b, o) in enumerate(zip(branch.output, node.output, strict=True)) if o]
        graph.initializer.extend(branch.initializer)
        del graph.node[i]
        for k, n in enumerate(nodes):
            graph.node.insert(i + k, n)
        replaced += 1
    return replaced


def _attr_graph(node: onnx.NodeProto, name: str) -> onnx.GraphProto | None:
    for a in node.attribute:
        if a.name == name and a.type == onnx.AttributeProto.GRAPH:
            return a.g
    return None


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    for n in graph.node:
        names.update(o for o in n.output if o)
    return names


def _static_shapes(proto: onnx.ModelProto, dims: Mapping[str, int],
                   ) -> dict[str, tuple[int, ...]]:
    """The fully known shapes of the graph's values, by ONNX shape inference on a copy of
    the graph with the input dimensions bound (weights given by their shapes alone)."""
    g = proto.graph
    inits = {t.name for t in g.initializer}
    small = [t for t in g.initializer if _numel(t.dims) <= _SMALL and not _external(t)]
    kept = {t.name for t in small}
    ins = []
    for vi in g.input:
        if vi.name in inits:
            continue
        c = onnx.ValueInfoProto()
        c.CopyFrom(vi)
        for d in c.type.tensor_type.shape.dim:
            if d.WhichOneof("value") == "dim_param" and d.dim_param in dims:
                d.dim_value = int(dims[d.dim_param])
        ins.append(c)
    ins += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
            for t in g.initializer if t.name not in kept]
    copy = helper.make_graph(list(g.node), g.name or "g", ins, list(g.output),
                             initializer=small)
    model = helper.make_model(copy, opset_imports=list(proto.opset_import),
                              ir_version=proto.ir_version)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - a graph ONNX cannot infer: nothing is known
        return {}
    out: dict[str, tuple[int, ...]] = {}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        t = vi.type.tensor_type
        if vi.type.WhichOneof("value") != "tensor_type" or not t.HasField("shape"):
            continue
        if all(d.WhichOneof("value") == "dim_value" for d in t.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in t.shape.dim)
    for t in g.initializer:
        out[t.name] = tuple(int(d) for d in t.dims)
    return out


def _numel(dims: Sequence[int]) -> int:
    return int(np.prod(list(dims))) if len(dims) else 1


def _external(t: TensorProto) -> bool:
    return t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL


def _cone(cond: str, graph: onnx.GraphProto, producer: Mapping[str, int],
          inits: Mapping[str, TensorProto], shapes: Mapping[str, tuple[int, ...]],
          ) -> list[int] | None:
    """The positions of the nodes ``cond`` is computed by, from constants and the static
    shapes that ``Shape`` and ``Size`` nodes read, in graph order; ``None`` when it reads
    any other value (an input, an external initializer, a shape not inferred, a value of a
    node with subgraphs or of an outer scope)."""
    seen: set[int] = set()
    stack = [cond]
    while stack:
        v = stack.pop()
        if not v:
            continue
        if v in inits:
            if _external(inits[v]):
                return None
            continue
        i = producer.get(v)
        if i is None:
            return None  # a graph input's values, or an outer-scope name
        if i in seen:
            continue
        n = graph.node[i]
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in n.attribute):
            return None
        seen.add(i)
        if n.op_type in ("Shape", "Size"):
            if n.input[0] not in shapes:
                return None  # (its shape depends on values)
            continue  # a constant: its input's values are not read
        stack.extend(n.input)
    return sorted(seen)


def _evaluate(cond: str, cone: list[int], graph: onnx.GraphProto,
              inits: Mapping[str, TensorProto], shapes: Mapping[str, tuple[int, ...]],
              opset: int) -> bool | None:
    """The condition's value, by ``onnx.reference`` on the cone, its ``Shape`` and ``Size``
    nodes replaced by their static values; ``None`` when it cannot be computed (or is not
    one boolean)."""
    from onnx.reference import ReferenceEvaluator

    nodes = []
    for i in cone:
        n = graph.node[i]
        if n.op_type in ("Shape", "Size"):
            shape = shapes[n.input[0]]
            if n.op_type == "Size":
                value = np.asarray(_numel(shape), np.int64)
            else:
                a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
                value = np.asarray(shape[slice(a.get("start", 0), a.get("end"))], np.int64)
            n = helper.make_node("Constant", [], [n.output[0]],
                                 value=onnx.numpy_helper.from_array(value, n.output[0]))
        nodes.append(n)
    used = {x for n in nodes for x in n.input if x}
    sub = helper.make_graph(nodes, "cond", [],
                            [helper.make_tensor_value_info(cond, TensorProto.BOOL, None)],
                            initializer=[inits[x] for x in sorted(used & set(inits))])
    try:
        model = helper.make_model(sub, opset_imports=[helper.make_opsetid("", opset)])
        (result,) = ReferenceEvaluator(model).run(None, {})
    except Exception:  # noqa: BLE001 - an op the reference cannot run: leave the If
        return None
    arr = np.asarray(result)
    if arr.size != 1:
        return None
    return bool(arr.reshape(-1)[0])
