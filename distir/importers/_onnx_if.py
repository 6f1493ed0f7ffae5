"""Specialize ``If`` nodes whose condition is known once the input dimensions are bound.

Exporters write an ``If`` where a model branches on a shape (``if x.dim() == 3``,
``if q.size(-2) != k.size(-2)``: TorchScript keeps the branches of scripted code, one per
layer in DeBERTa's attention as ``transformers`` 5.17 exports it). With the dimensions
bound, such a condition is a constant of the program: the ``If`` is replaced by the nodes
of the branch taken, its results by ``Identity`` copies of the branch's, and the program is
straight-line again. A condition that reads any input's values (not only its shape) is
left alone, and the importer refuses the ``If`` in one line as before.

A condition's value is computed by ``onnx.reference`` on the nodes it depends on alone, the
inputs given as zeros of their bound shapes (read only through ``Shape`` or ``Size``, which
the dependence check guarantees) and the initializers it reads (none held in external
files).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

__all__ = ["specialize_ifs"]

_SHAPE_READERS = frozenset({"Shape", "Size"})
_MAX_ROUNDS = 64  # nested branches: each round specializes the ``If`` nodes it can


def specialize_ifs(graph: onnx.GraphProto, dims: Mapping[str, int], opset: int) -> int:
    """Replace, in place, every ``If`` of ``graph`` (of ONNX opset ``opset``) whose condition
    is known from the bound input ``dims`` (and the constants) by the branch it takes,
    repeatedly (a branch may hold ``If`` nodes of its own). Returns how many were
    replaced."""
    done = 0
    for _ in range(_MAX_ROUNDS):
        n = _one_round(graph, dims, opset)
        if not n:
            break
        done += n
    return done


def _one_round(graph: onnx.GraphProto, dims: Mapping[str, int], opset: int) -> int:
    ifs = [i for i, n in enumerate(graph.node)
           if n.op_type == "If" and n.domain in ("", "ai.onnx")]
    if not ifs:
        return 0
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    inputs = {vi.name: vi for vi in graph.input}
    inits = {t.name: t for t in graph.initializer}
    shapes = _input_shapes(graph, dims, inits)
    names = _all_names(graph)
    replaced = 0
    for i in reversed(ifs):  # (from the end: earlier positions stay valid)
        node = graph.node[i]
        cone = _cone(node.input[0], graph, producer, inputs, inits, shapes)
        if cone is None:
            continue
        value = _evaluate(node.input[0], cone, graph, inputs, inits, shapes, opset)
        if value is None:
            continue
        branch = _attr_graph(node, "then_branch" if value else "else_branch")
        if branch is None or len(branch.output) != len(node.output):
            continue
        inner = {o for n in branch.node for o in n.output if o}
        if inner & (names - {o for o in node.output}):  # (a name reused: leave it)
            continue
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


def _input_shapes(graph: onnx.GraphProto, dims: Mapping[str, int],
                  inits: Mapping[str, TensorProto]) -> dict[str, tuple[int, ...] | None]:
    """The inputs' shapes with ``dims`` bound (``None`` where a dimension stays unknown)."""
    out: dict[str, tuple[int, ...] | None] = {}
    for vi in graph.input:
        if vi.name in inits or vi.type.WhichOneof("value") != "tensor_type":
            continue
        shape: list[int] | None = []
        for d in vi.type.tensor_type.shape.dim:
            kind = d.WhichOneof("value")
            if kind == "dim_value":
                shape.append(int(d.dim_value))  # type: ignore[union-attr]
            elif kind == "dim_param" and d.dim_param in dims:
                shape.append(int(dims[d.dim_param]))  # type: ignore[union-attr]
            else:
                shape = None
                break
        out[vi.name] = tuple(shape) if shape is not None else None
    return out


def _cone(cond: str, graph: onnx.GraphProto, producer: Mapping[str, int],
          inputs: Mapping[str, onnx.ValueInfoProto], inits: Mapping[str, TensorProto],
          shapes: Mapping[str, tuple[int, ...] | None]) -> list[int] | None:
    """The positions of the nodes ``cond`` depends on, in graph order, or ``None`` when it
    reads an input's values (not only its shape), an input of unknown shape, an external
    initializer, or a value of a node with subgraphs."""
    seen: set[int] = set()
    stack = [(cond, False)]  # (value, read only through its shape)
    visited: set[tuple[str, bool]] = set()
    while stack:
        v, via_shape = stack.pop()
        if (v, via_shape) in visited or not v:
            continue
        visited.add((v, via_shape))
        if v in inits:
            t = inits[v]
            if t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL:
                return None
            continue
        if v in inputs:
            if not via_shape or shapes.get(v) is None:
                return None
            continue
        i = producer.get(v)
        if i is None:
            return None  # (an outer-scope name: not in this graph)
        n = graph.node[i]
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in n.attribute):
            return None
        seen.add(i)
        reads_shape = n.op_type in _SHAPE_READERS
        for x in n.input:
            stack.append((x, via_shape or reads_shape))
    return sorted(seen)


def _evaluate(cond: str, cone: list[int], graph: onnx.GraphProto,
              inputs: Mapping[str, onnx.ValueInfoProto], inits: Mapping[str, TensorProto],
              shapes: Mapping[str, tuple[int, ...] | None], opset: int) -> bool | None:
    """The condition's value, by ``onnx.reference`` on the cone alone; ``None`` when it
    cannot be computed (or is not one boolean)."""
    from onnx.reference import ReferenceEvaluator

    nodes = [graph.node[i] for i in cone]
    used = {x for n in nodes for x in n.input if x}
    feeds: dict[str, np.ndarray] = {}
    ins = []
    for name in sorted(used & set(inputs)):
        vi = inputs[name]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = shapes[name]
        assert shape is not None
        feeds[name] = np.zeros(shape, dtype)
        ins.append(helper.make_tensor_value_info(name, vi.type.tensor_type.elem_type, shape))
    sub = helper.make_graph(nodes, "cond", ins,
                            [helper.make_tensor_value_info(cond, TensorProto.BOOL, None)],
                            initializer=[inits[x] for x in sorted(used & set(inits))])
    try:
        model = helper.make_model(sub, opset_imports=[helper.make_opsetid("", opset)])
        (value,) = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - an op the reference cannot run: leave the If
        return None
    a = np.asarray(value)
    if a.size != 1:
        return None
    return bool(a.reshape(-1)[0])
