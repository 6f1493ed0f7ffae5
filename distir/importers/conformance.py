"""Conformance with suites no one here wrote: ONNX's backend node tests and shipped models.

A node case (``onnx.backend.test.case.node.collect_testcases``) passes when its model
imports, type propagation gives the expected outputs' dtypes and shapes, and the reference
executor gives the expected values within the case's tolerances, compared the way ONNX's
backend runner compares them (``assert_similar``). A case outside DistIR's spec is excluded
with a reason that is decided from the case itself, before anything runs (see
``exclusion``); a case is never excluded because it fails.

The real models are the nine of ``onnx/backend/test/data/light``, run on the input ONNX's
runner makes for them (``light_input``) and compared with the ``_output_0.pb`` shipped beside
each.

``tests/importers`` runs both; ``scripts/conformance_table.py`` writes docs/conformance.md.
"""

from __future__ import annotations

import functools
import glob
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import onnx
from onnx import TensorProto, defs, numpy_helper

from distir.importers._onnx_graph import DTYPES, dtype_name
from distir.importers.onnx import import_onnx, unsupported_ops
from distir.ir._onnx_schemas import ONNX_SCHEMAS
from distir.ir.types import DType, TensorType

__all__ = ["SPEC_OPS", "ZOO_OPS", "NodeCase", "node_cases", "exclusion", "run_node_case",
           "assert_similar", "light_models", "light_input", "light_expected", "LIGHT_RTOL",
           "light_random_weights"]

SPEC_OPS: tuple[str, ...] = tuple("""
Abs Add AveragePool BatchNormalization Cast Concat Constant ConstantOfShape Conv Div Dropout
Equal Erf Exp Expand Flatten Gather Gelu Gemm GlobalAveragePool Identity LayerNormalization
Less Log LRN MatMul Max MaxPool Mul Neg Not Pow Range Reciprocal ReduceMean ReduceSum Relu
Reshape Shape Sigmoid Slice Softmax Split Sqrt Squeeze Sub Sum Tanh Transpose Unsqueeze Where
""".split())
"""The minimum op set of the spec (shared/spec/ops.md)."""

ZOO_OPS: tuple[str, ...] = tuple(sorted(set(ONNX_SCHEMAS) - set(SPEC_OPS)))
"""The other ONNX ops DistIR defines: those that exported Hugging Face and torchvision-like
models use beyond the minimum set (``scripts/gen_onnx_schemas.py``). Their cases run the
same way as the minimum set's."""

# Inputs whose values fix the result's shape, by op and input index: type propagation
# needs them known, so the harness gives them to it as values, as a model would give them
# as initializers or constants. Every other input is given to it by its type only.
SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Slice": (1, 2, 3, 4),
    "Squeeze": (1,), "Unsqueeze": (1,), "ReduceMean": (1,), "ReduceSum": (1,),
    "ReduceMax": (1,), "Split": (1,), "Range": (0, 1, 2), "Tile": (1,),
    **dict.fromkeys(("ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                     "ReduceLogSumExp", "ReduceLogSum"), (1,)),
    "OneHot": (1,), "TopK": (1,), "Pad": (1, 3), "Resize": (1, 2, 3), "Col2Im": (1, 2),
    "NonZero": (0,),  # its result's shape is the count of its input's non-zero values
    "LSTM": (4,),  # sequence_lens: DistIR runs full-length sequences only, checked by value
}

_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass(frozen=True)
class NodeCase:
    """One node test case of an op (of ``SPEC_OPS`` or ``ZOO_OPS``). ``excluded`` is the
    reason it is outside DistIR's spec, or ``None``."""

    op: str
    name: str
    model: onnx.ModelProto
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    rtol: float
    atol: float
    excluded: str | None


@functools.cache
def node_cases(ops: tuple[str, ...] = SPEC_OPS) -> tuple[NodeCase, ...]:
    """Every case ``collect_testcases`` yields for ``ops``, in ONNX's order.

    A case belongs to the op of its single node; an ``_expanded`` case (the op's function
    body) belongs to the op of the case it expands. ``collect_testcases`` is called once
    without a filter: it collects by importing modules, so a filtered first call would hide
    every other op's cases from later calls.
    """
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # ONNX's case generators overflow casts on purpose
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    op_of: dict[str, str] = {}
    for c in cases:
        assert c.model is not None and c.data_sets  # node cases always have both
        if not _EXPANDED.search(c.name) and len(c.model.graph.node) == 1:
            op_of[c.name] = c.model.graph.node[0].op_type
    wanted = set(ops)
    out = []
    for c in cases:
        op = op_of.get(_EXPANDED.sub("", c.name))
        if op is None or op not in wanted or c.model is None or not c.data_sets:
            continue
        inputs, outputs = c.data_sets[0]
        out.append(NodeCase(op, c.name, c.model, tuple(inputs), tuple(outputs), c.rtol,
                            c.atol, None))
    return tuple(NodeCase(c.op, c.name, c.model, c.inputs, c.outputs, c.rtol, c.atol,
                          exclusion(c)) for c in out)


def _value(x: Any) -> Any:
    """A case's input or output as numpy (ONNX stores some as ``TensorProto``)."""
    if isinstance(x, TensorProto):
        return numpy_helper.to_array(x)
    return x


def exclusion(case: NodeCase) -> str | None:
    """Why ``case`` is outside DistIR's spec, or ``None``; decided without running it."""
    g = case.model.graph
    for vi in list(g.input) + list(g.output):
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            word = {"sequence_type": "sequence", "optional_type": "optional",
                    "map_type": "map"}.get(kind or "", str(kind))
            return f"{word} values ('{vi.name}'): DistIR has tensors only"
        et = vi.type.tensor_type.elem_type
        if et not in DTYPES:
            return f"dtype {dtype_name(et)} ('{vi.name}') is outside DistIR's dtypes"
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i not in DTYPES:
                return f"casts to {dtype_name(a.i)}, outside DistIR's dtypes"
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type not in DTYPES:
                return f"a {dtype_name(a.t.data_type)} constant, outside DistIR's dtypes"
    bad = unsupported_ops(g)
    if bad:
        ops = ", ".join(sorted(bad))
        body = "its expanded function body" if _EXPANDED.search(case.name) else "it"
        return f"{body} uses {ops}, outside DistIR's op set"
    gap = _opset_type_gap(case.model) or _opset_form_gap(case.model) or \
        _converter_gap(case.model)
    if gap is not None:
        return gap
    if case.op == "Dropout" and _random_dropout(case):
        return ("training-mode Dropout: the output depends on a random mask that ONNX's "
                "generator drew")
    return None


def _opset_type_gap(model: onnx.ModelProto) -> str | None:
    """Why an op of ``model`` cannot take an input's dtype at DistIR's opset, or ``None``: a
    case written for a later opset that widened the op's types (``Range`` on float16 came in
    opset 27) has no opset-21 form, which the version converter rightly refuses."""
    from onnx import defs

    from distir.ir.schemas import OPSET

    g = model.graph
    elem = {vi.name: vi.type.tensor_type.elem_type for vi in g.input}
    try:  # the dtypes inside an expanded function body, by ONNX's own inference
        inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        elem.update({vi.name: vi.type.tensor_type.elem_type for vi in inferred
                     if vi.type.tensor_type.elem_type})
    except Exception:  # noqa: BLE001 - without inference only the inputs are checked
        pass
    for n in g.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        try:
            s = defs.get_schema(n.op_type, OPSET)
        except defs.SchemaError:
            continue
        allowed_by = {c.type_param_str: set(c.allowed_type_strs) for c in s.type_constraints}
        formals = list(s.inputs)
        for i, x in enumerate(n.input):
            if not x or x not in elem or not formals:
                continue
            f = formals[min(i, len(formals) - 1)]
            allowed = allowed_by.get(f.type_str, {f.type_str})
            t = f"tensor({dtype_name(elem[x]).lower()})"
            if t not in allowed:
                return (f"{n.op_type} at opset {OPSET} does not take {dtype_name(elem[x])} "
                        f"(a later opset added it), and DistIR's ops are opset {OPSET}'s")
    return None


@functools.cache
def _has_down_adapter(op_type: str, version: int) -> bool:
    """Whether onnx's version converter can take ``op_type`` from opset ``version`` down to
    DistIR's (probed once on a one-node model of that op)."""
    from onnx import helper, version_converter

    from distir.ir.schemas import OPSET

    s = defs.get_schema(op_type, version)
    node = helper.make_node(op_type, [f"x{i}" for i in range(s.min_input)], ["y"])
    g = helper.make_graph([node], "probe", [helper.make_tensor_value_info(
        f"x{i}", TensorProto.FLOAT, None) for i in range(s.min_input)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", version)])
    try:
        version_converter.convert_version(m, OPSET)
    except Exception as e:  # noqa: BLE001 - only the missing adapter is the answer here
        return "No Adapter" not in str(e)
    return True


def _converter_gap(model: onnx.ModelProto) -> str | None:
    """Why a model of a later opset cannot reach DistIR's: onnx's version converter has no
    adapter down for one of its ops (GlobalMaxPool-22, which only added types), or
    ``None``."""
    from distir.ir.schemas import OPSET

    version = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                  default=OPSET)
    if version <= OPSET:
        return None
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        since = defs.get_schema(n.op_type, version).since_version
        if since > OPSET and not _has_down_adapter(n.op_type, since):
            return (f"{n.op_type}-{since} (the case's opset {version}) has no adapter down to "
                    f"opset {OPSET} in onnx's version converter")
    return None


def _opset_form_gap(model: onnx.ModelProto) -> str | None:
    """Why a node of a model written for a later opset than DistIR's has no form at
    DistIR's opset, or ``None``: it sets an attribute that the later opset added
    (``SpaceToDepth``'s ``mode``), or it is a ``Mod`` of floats with ``fmod=0``, which
    opset 21 forbids (its floats need ``fmod=1``) and a later opset defined. (A model of an
    earlier opset is converted up: its old attributes are the converter's to map.)"""
    from distir.ir.schemas import OPSET

    g = model.graph
    if max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
           default=OPSET) <= OPSET:
        return None
    elem = {vi.name: vi.type.tensor_type.elem_type for vi in g.input}
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
    for n in g.node:
        spec = ONNX_SCHEMAS.get(n.op_type)
        if n.domain not in ("", "ai.onnx") or spec is None:
            continue
        known = {a[0] for a in cast("tuple[tuple[Any, ...], ...]", spec["attrs"])}
        extra = sorted(a.name for a in n.attribute if a.name not in known)
        if extra:
            return (f"{n.op_type}'s attribute {extra[0]} came after opset {OPSET}, DistIR's "
                    "opset")
        fmod = next((a.i for a in n.attribute if a.name == "fmod"), 0)
        if n.op_type == "Mod" and not fmod and elem.get(n.input[0]) in floats:
            return (f"Mod of floats with fmod=0 is invalid at opset {OPSET} (DistIR's), "
                    "which wants fmod=1; a later opset defined it")
    return None


def _random_dropout(case: NodeCase) -> bool:
    g = case.model.graph
    data = {vi.name: _value(x) for vi, x in zip(g.input, case.inputs, strict=False)}
    for n in g.node:
        if n.op_type != "Dropout":
            continue
        training = n.input[2] if len(n.input) > 2 else ""
        if not training or not bool(np.asarray(data.get(training, False))):
            continue
        ratio = n.input[1] if len(n.input) > 1 else ""
        if ratio and float(np.asarray(data.get(ratio, 0.5))) == 0.0:
            continue
        return True
    return False


def _shape_operand_names(model: onnx.ModelProto) -> set[str]:
    names: set[str] = set()
    for n in model.graph.node:
        for i in SHAPE_OPERANDS.get(n.op_type, ()):
            if i < len(n.input) and n.input[i]:
                names.add(n.input[i])
    return names


def assert_similar(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                   rtol: float, atol: float) -> None:
    """The comparison of ONNX's backend runner: same count, shapes and dtypes; values
    within ``rtol``/``atol`` (bfloat16 compared in float32 with ``rtol`` at least 2**-6)."""
    assert len(outputs) == len(expected), f"{len(outputs)} outputs, expected {len(expected)}"
    for i, (out, ref) in enumerate(zip(outputs, expected, strict=True)):
        out, ref = np.asarray(out), np.asarray(ref)
        assert out.shape == ref.shape, f"output {i} has shape {out.shape}, expected {ref.shape}"
        assert out.dtype == ref.dtype, f"output {i} has dtype {out.dtype}, expected {ref.dtype}"
        r = rtol
        if out.dtype.name == "bfloat16":
            r = max(rtol, 2**-6)
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        np.testing.assert_allclose(out, ref, rtol=r, atol=atol,
                                   err_msg=f"output {i} differs")


def run_node_case(case: NodeCase) -> None:
    """Import, type-propagate and execute ``case``; an ``AssertionError`` (or the
    ``DistIRError`` that stopped it) when it does not conform."""
    from distir.analysis import execute
    from distir.analysis.interpreter import TypeInterpreter
    from distir.analysis.values import make_concrete, type_of

    m = import_onnx(case.model)
    fn = m.entry
    inputs = [np.asarray(_value(x)) for x in case.inputs]
    expected = [np.asarray(_value(x)) for x in case.outputs]
    known = _shape_operand_names(case.model)
    args: list[Any] = []
    for p, x in zip(fn.params, inputs, strict=True):
        t = p.type
        args.append(make_concrete(x, 0) if p.name in known else t)
    got = [type_of(a) for a in TypeInterpreter().run(fn, args)]
    want = [TensorType(DType.from_np(e.dtype), tuple(e.shape), 0) for e in expected]
    assert got == want, f"type propagation gives {_types(got)}, expected {_types(want)}"
    outs = execute(fn, inputs)
    assert_similar(outs, expected, case.rtol, case.atol)


def _types(ts: Sequence[Any]) -> str:
    return ", ".join(str(t) for t in ts)


# --- the models of onnx/backend/test/data/light ---------------------------------------

LIGHT_RTOL: dict[str, float] = {"densenet121": 2e-3}
"""The rtol ONNX's own model tests use where it is not 1e-3 (atol is 1e-7 for all)."""


def light_models() -> list[str]:
    """Paths of the models shipped in ``onnx/backend/test/data/light``, sorted."""
    d = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return sorted(glob.glob(os.path.join(d, "light_*.onnx")))


def light_input(shape: Sequence[int]) -> np.ndarray:
    """The input ONNX's backend runner feeds these models: ``arange(n) / n`` in float32,
    the values that the shipped ``_output_0.pb`` files were computed from."""
    n = int(np.prod(shape))
    return (np.arange(n).reshape(tuple(shape)) / n).astype(np.float32)


def light_expected(path: str) -> np.ndarray:
    """The shipped expected output of the model at ``path``."""
    return numpy_helper.to_array(onnx.load_tensor(path[: -len(".onnx")] + "_output_0.pb"))


def light_random_weights(path: str, seed: int = 0) -> onnx.ModelProto:
    """The model at ``path`` with its weights drawn at random.

    The light models' weights are ``ConstantOfShape(shape, 0.02)`` nodes, under which most
    of them output a uniform 0.001 whatever the input. Here each such node becomes an
    initializer of random values, scaled so that the outputs stay informative: Conv and
    Gemm weights ``N(0, 1/fan_in)``, BatchNormalization scales and variances
    ``U(0.5, 1.5)``, everything else ``N(0, 0.01)``. The graph is otherwise the model's.
    """
    m = onnx.load(path)
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in m.graph.initializer}
    role: dict[str, str] = {}
    for n in m.graph.node:
        if n.op_type in ("Conv", "Gemm") and len(n.input) > 1:
            role[n.input[1]] = "weight"
        elif n.op_type == "BatchNormalization":
            role[n.input[1]] = role[n.input[4]] = "positive"
    keep = []
    for n in m.graph.node:
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            keep.append(n)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
        name = n.output[0]
        kind = role.get(name)
        if kind == "weight":
            a = rng.normal(0.0, np.sqrt(1.0 / max(1, int(np.prod(shape[1:])))), shape)
        elif kind == "positive":
            a = rng.uniform(0.5, 1.5, shape)
        else:
            a = rng.normal(0.0, 0.01, shape)
        m.graph.initializer.append(numpy_helper.from_array(a.astype(np.float32), name))
        # IR version 3 lists every initializer among the graph's inputs.
        m.graph.input.append(onnx.helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                                shape))
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m
