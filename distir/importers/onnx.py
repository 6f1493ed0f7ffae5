"""Import ONNX models: ``import_onnx(path_or_model, dims=None, device=0) -> Module``.

The steps, in order, each with a one-line ``ImportError_`` for what it cannot take:

1. Read the model without its external data (``onnx.load(..., load_external_data=False)``),
   so that a model that cannot be imported is rejected before gigabytes of weights are read.
2. Inline model-local functions (``onnx.inliner``), as the dynamo exporter emits them, and
   replace each ``If`` whose condition is known once ``dims`` are bound (a branch on a
   shape) by the branch it takes (``distir.importers._onnx_if``).
3. Reject an unsupported model with ONE message listing every unsupported op type and its
   node count: control flow (``If``, ``Loop``, ``Scan``), other domains than ONNX's, and ONNX
   ops that DistIR does not define (``distir.ir.schemas.SCHEMAS``).
4. Convert the model to DistIR's opset 21 with ``onnx.version_converter`` when it has
   another; ops keep the meaning they had in the model's own opset.
5. Load external data from the model's directory (or ``base_dir``).
6. Bind the symbolic dimensions of the inputs from ``dims``; build ``@main``
   (``distir.importers._onnx_graph``) and verify the module.

The result's ``@main`` takes the graph inputs without initializers, in graph order, then the
initializers (small integer ones, index operands, become ``Constant`` ops); their values are
attached (``fn.initializers``), so that
``distir.execute(m.entry, [x, ...])`` takes only the former.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Mapping

import onnx
from onnx import AttributeProto, TensorProto

from distir.analysis.values import type_of
from distir.errors import DistIRError, ImportError_
from distir.importers._onnx_graph import convert_graph, symbolic_dims
from distir.ir.core import Function, Module, Op
from distir.ir.schemas import OPSET, SCHEMAS
from distir.ir.verify import verify

__all__ = ["import_onnx", "load_model", "unsupported_ops", "OPSET"]

_ONNX_DOMAINS = ("", "ai.onnx")
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def import_onnx(model: str | os.PathLike[str] | onnx.ModelProto,
                dims: Mapping[str, int] | None = None, device: int = 0, *,
                base_dir: str | os.PathLike[str] | None = None) -> Module:
    """The DistIR module of an ONNX model; its entry is ``@main``.

    ``model`` is a path to an ``.onnx`` file or an ``onnx.ModelProto`` (which is not
    modified). ``dims`` binds the symbolic dimensions (``dim_param``) of the graph inputs,
    e.g. ``{"batch": 8, "seq": 1024}``; every one must be bound, and every name given must
    be one of them. ``device`` places every parameter and constant. ``base_dir`` is where
    external data files are, for a ``ModelProto`` whose weights were not loaded (a path's
    own directory otherwise).

    Raises ``ImportError_`` (a ``DistIRError``) with a one-line message naming the model and
    the node, value or dimension at fault.
    """
    if not isinstance(device, int) or isinstance(device, bool) or device < 0:
        raise ImportError_(f"device must be a device number (0, 1, ...), got {device!r}")
    proto, name, owned, model_dir = load_model(model)
    if base_dir is not None:
        model_dir = os.fspath(base_dir)
    try:
        proto, owned = _prepare(proto, owned, model_dir, dims or {})
        fn = convert_graph(proto.graph, dims or {}, device, release=owned)
    except ImportError_ as e:
        raise ImportError_(f"{name}: {e.message}") from None
    m = Module([fn], filename=name)
    try:
        verify(m)
    except DistIRError as e:
        raise ImportError_(f"{name}: {e.message}") from None
    return _identity_casts(m)


def _identity_casts(m: Module) -> Module:
    """``m`` with each ``Cast`` (or ``CastLike``) to its input's own element type written as
    the ``Identity`` it is: PyTorch returns the tensor itself, a view that holds no memory
    of its own and runs no kernel (exporters write one where the model upcasts for a
    softmax, ``attn_weights.to(torch.float32)``, a no-op in a float32 model: OPT's step
    at 8 x 512 held 1 GiB less than a copy per layer would, on an H200). Found by one type
    propagation; a model whose types do not propagate here is left as it is (its error is
    reported where it is simulated)."""
    fn = m.entry
    if not any(op.op_type in ("Cast", "CastLike") for op in fn.ops):
        return m
    from distir.analysis.api import type_env

    try:
        env = type_env(fn)
    except DistIRError:
        return m
    ops: list[Op] = []
    changed = False
    for op in fn.ops:
        if op.op_type in ("Cast", "CastLike") and op.inputs and op.inputs[0] is not None \
                and len(op.outputs) == 1:
            x, y = env.get(op.inputs[0]), env.get(op.outputs[0])
            tx, ty = getattr(type_of(x), "dtype", None), getattr(type_of(y), "dtype", None)
            if tx is not None and tx == ty:
                ops.append(Op("Identity", (op.inputs[0],), None, op.outputs, loc=op.loc))
                changed = True
                continue
        ops.append(op)
    if not changed:
        return m
    out = Function(fn.name, fn.params, ops, fn.returns)
    out.initializers = fn.initializers
    return Module([out], filename=m.filename)


def load_model(model: str | os.PathLike[str] | onnx.ModelProto,
               ) -> tuple[onnx.ModelProto, str, bool, str | None]:
    """``(proto, name for messages, whether the proto is ours to modify, its directory)``;
    external data is not loaded."""
    if isinstance(model, onnx.ModelProto):
        return model, f"<model {model.graph.name or 'without a name'}>", False, None
    if not isinstance(model, str | os.PathLike):
        raise ImportError_(f"import_onnx takes a path or an onnx.ModelProto, not "
                           f"{type(model).__name__}")
    path = os.fspath(model)
    if not os.path.exists(path):
        raise ImportError_(f"{path}: no such file")
    if os.path.isdir(path):
        raise ImportError_(f"{path}: is a directory, not an .onnx file")
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf raises several kinds for bad bytes
        raise ImportError_(f"{path}: not an ONNX model (it does not parse as one: "
                           f"{_first_line(e)})") from None
    if not proto.HasField("graph") or proto.ir_version <= 0:
        raise ImportError_(f"{path}: not an ONNX model (it has no graph or no IR version)")
    return proto, path, True, os.path.dirname(os.path.abspath(path))


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def unsupported_ops(graph: onnx.GraphProto) -> Counter[str]:
    """Node counts of the op types in ``graph`` that DistIR cannot import; an op of another
    domain is written ``domain:Op``."""
    bad: Counter[str] = Counter()
    for n in graph.node:
        if n.domain not in _ONNX_DOMAINS:
            bad[f"{n.domain}:{n.op_type}"] += 1
            continue
        s = SCHEMAS.get(n.op_type)
        if s is None or s.domain != "onnx" or n.op_type in _CONTROL_FLOW:
            bad[n.op_type] += 1
    return bad


def _check_supported(proto: onnx.ModelProto) -> None:
    bad = unsupported_ops(proto.graph)
    if not bad:
        return
    items = sorted(bad.items(), key=lambda kv: (-kv[1], kv[0]))
    listing = ", ".join(f"{op} ({n} node{'s' * (n != 1)})" for op, n in items)
    cf = [op for op in bad if op in _CONTROL_FLOW]
    other_domain = [op for op in bad if ":" in op]
    fixes = []
    if cf:
        fixes.append("unroll or specialize control flow" + (
            " (an If that reads input values; one that branches on a shape is specialized "
            "once every symbolic dimension is bound with dims)" if "If" in cf else ""))
    if other_domain:
        fixes.append("export without ops of other domains")
    if len(cf) + len(other_domain) < len(bad):
        fixes.append("rewrite the other ops with ops DistIR defines" if fixes
                     else f"rewrite {'it' if len(bad) == 1 else 'them'} with ops DistIR "
                     "defines")
    fix = ", ".join(fixes[:-1]) + (" and " if len(fixes) > 1 else "") + fixes[-1]
    raise ImportError_(f"{len(bad)} unsupported op type{'s' * (len(bad) != 1)}: {listing}; "
                       "DistIR imports straight-line graphs of ONNX ops it defines (see "
                       f"docs/importing.md): {fix}")


def _opset(proto: onnx.ModelProto) -> int | None:
    for o in proto.opset_import:
        if o.domain in _ONNX_DOMAINS:
            return int(o.version)
    return None


def _prepare(proto: onnx.ModelProto, owned: bool, model_dir: str | None,
             dims: Mapping[str, int]) -> tuple[onnx.ModelProto, bool]:
    """Inline, check, convert and load external data; returns the model to convert and
    whether it is ours to modify."""
    if proto.functions:
        from onnx import inliner

        proto, owned = inliner.inline_local_functions(proto), True
    if any(n.op_type == "If" for n in proto.graph.node):
        # branches on shapes, known once the dimensions are bound (``_onnx_if``)
        from distir.importers._onnx_if import specialize_ifs

        if not owned:
            copy = onnx.ModelProto()
            copy.CopyFrom(proto)
            proto, owned = copy, True
        specialize_ifs(proto, dims, _opset(proto) or OPSET)
    _check_supported(proto)
    version = _opset(proto)
    if version is None:
        if proto.graph.node:
            raise ImportError_("the model imports no opset of the ONNX domain")
    elif version != OPSET:
        from onnx import version_converter

        listed = {vi.name for vi in proto.graph.input}
        if proto.ir_version < 4 and any(t.name not in listed for t in proto.graph.initializer):
            # IR versions before 4 list every initializer among the inputs, and the
            # converter rejects those that are not; runtimes accept them, and so does
            # IR 4, which means the same graph.
            copy = onnx.ModelProto()
            copy.CopyFrom(proto)
            copy.ir_version = 4
            proto = copy
        try:
            proto = version_converter.convert_version(proto, OPSET)
        except Exception as e:  # noqa: BLE001 - the converter raises C++ assertion errors
            msg = _first_line(e)
            if ": " in msg and msg.startswith("/"):  # drop the converter's source path
                msg = msg.split(": ", 1)[1]
            raise ImportError_(f"onnx.version_converter cannot convert the model from opset "
                               f"{version} to {OPSET}: {msg}") from None
        owned = True
        _check_supported(proto)  # an adapter may have introduced ops
    _check_dims(proto.graph, dims)
    external = list(_external_tensors(proto))
    if external:
        if not owned:
            copy = onnx.ModelProto()
            copy.CopyFrom(proto)
            proto, owned = copy, True
        _load_external(proto, external, model_dir)
    return proto, owned


def _check_dims(graph: onnx.GraphProto, dims: Mapping[str, int]) -> None:
    if not isinstance(dims, Mapping):
        raise ImportError_(f"dims must map dimension names to sizes, got "
                           f"{type(dims).__name__}")
    for k, v in dims.items():
        if not isinstance(k, str) or not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ImportError_(f"dims must map names to positive integers (a dimension of "
                               f"size 0 or less has no elements to distribute); got {k!r}: "
                               f"{v!r}")
    have = symbolic_dims(graph)
    extra = [k for k in dims if k not in have]
    if extra:
        known = ", ".join(have) if have else "none"
        raise ImportError_(f"dims names {', '.join(repr(k) for k in extra)}, which no input "
                           f"of the model has (its symbolic dimensions: {known})")


def _tensors(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for n in graph.node:
        for a in n.attribute:
            if a.type == AttributeProto.TENSOR:
                yield a.t
            elif a.type == AttributeProto.TENSORS:
                yield from a.tensors


def _external_tensors(proto: onnx.ModelProto) -> Iterator[TensorProto]:
    for t in _tensors(proto.graph):
        if t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL:
            yield t


def _load_external(proto: onnx.ModelProto, tensors: list[TensorProto],
                   model_dir: str | None) -> None:
    from onnx.external_data_helper import load_external_data_for_model

    t0 = tensors[0]
    if model_dir is None:
        raise ImportError_(f"tensor '{t0.name}' keeps its data in an external file: pass "
                           "base_dir= (the directory of the .onnx file), or the path of the "
                           "model instead of a ModelProto")
    for t in tensors:
        loc = {e.key: e.value for e in t.external_data}.get("location", "")
        path = os.path.join(model_dir, loc)
        if not loc or not os.path.isfile(path):
            raise ImportError_(f"tensor '{t.name}' keeps its data in '{loc}', which is not "
                               f"in {model_dir}: put the data file beside the model")
    try:
        load_external_data_for_model(proto, model_dir)
    except (OSError, ValueError) as e:
        raise ImportError_(f"cannot read the external data of tensor '{t0.name}' from "
                           f"{model_dir}: {_first_line(e)}") from None
