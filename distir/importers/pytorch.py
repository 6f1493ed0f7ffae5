"""Import a PyTorch module: ``import_torch(module, example_inputs, dims=None, ...) -> Module``.

The module is exported with ``torch.onnx.export(..., dynamo=True)`` to an in-memory ONNX
model, which ``distir.importers.onnx.import_onnx`` imports; the user never handles an ONNX
file. What the result keeps:

- **Names.** Parameters and buffers keep their torch names (``encoder.layer.0.attention.
  self.query.weight``); graph inputs are named after ``forward``'s arguments (or
  ``input_names``).
- **Symbolic dimensions.** ``dynamic`` names axes of the inputs (``{0: "batch"}`` for each
  input, or a mapping from input name to such a dict); they are exported symbolic, and
  ``dims`` binds them at import. A symbolic dimension that ``dims`` does not bind takes its
  size in ``example_inputs``. Re-binding (another ``dims``) types the same graph at other
  sizes without running the model: shapes computed in the graph are computed by type
  propagation.

Errors (a factory path that does not resolve, a factory that fails or returns no module,
an export that fails, inputs that are not tensors) are one-line ``ImportError_`` messages.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from distir.errors import ImportError_
from distir.ir.core import Module

__all__ = ["import_torch", "load_factory", "split_factory", "example_tensors", "parse_example"]

Dynamic = Sequence[Mapping[int, str]] | Mapping[str, Mapping[int, str]]


def import_torch(module: Any, example_inputs: Any, dims: Mapping[str, int] | None = None,
                 *, dynamic: Dynamic | None = None, input_names: Sequence[str] | None = None,
                 device: int = 0) -> Module:
    """The DistIR module of a ``torch.nn.Module``; its entry is ``@main``.

    ``example_inputs`` is a tensor or a tuple of tensors, the arguments of ``forward``.
    ``dynamic`` names symbolic axes: one ``{axis: name}`` per input (``None`` or ``{}`` for
    an input without), or ``{input_name: {axis: name}}``; example sizes of a symbolic axis
    must be at least 2 (``torch.export`` specializes a size of 1). ``dims`` gives the
    symbolic dimensions their sizes for DistIR's types (example sizes otherwise); every
    name must be one of ``dynamic``'s. ``device`` places every parameter and constant.

    Raises ``ImportError_`` with a one-line message.
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ImportError_(f"import_torch takes a torch.nn.Module, not {type(module).__name__}")
    args = _as_args(example_inputs)
    names = _input_names(module, args, input_names)
    shapes = _dynamic_shapes(dynamic, names, args)
    sizes: dict[str, int] = {}
    for spec, t in zip(shapes, args, strict=True):
        for axis, name in spec.items():
            sizes.setdefault(name, int(t.shape[axis]))
    dims = dict(dims or {})
    for k, v in dims.items():  # before the export, which takes seconds
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ImportError_(f"dims must map names to positive integers; got {k!r}: {v!r}")
    unknown = [k for k in dims if k not in sizes]
    if unknown:
        have = ", ".join(sizes) or "none: pass dynamic= to name some"
        raise ImportError_(f"dims names {', '.join(repr(k) for k in unknown)}, which no "
                           f"symbolic dimension has (they are: {have})")
    proto = export_onnx(module, args, names, shapes)
    from distir.importers.onnx import import_onnx

    if proto.graph.name in ("", "main_graph"):
        proto.graph.name = type(module).__name__
    return import_onnx(proto, dims={**sizes, **dims}, device=device)


def _as_args(example_inputs: Any) -> tuple[Any, ...]:
    import torch

    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else example_inputs
    if not isinstance(args, tuple | list) or not args:
        raise ImportError_("example_inputs must be a tensor or a non-empty tuple of tensors, "
                           f"got {type(example_inputs).__name__}")
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise ImportError_(f"example input {i} is a {type(a).__name__}, not a tensor")
    return tuple(args)


def _input_names(module: Any, args: tuple[Any, ...],
                 given: Sequence[str] | None) -> list[str]:
    if given is not None:
        if len(given) != len(args) or not all(isinstance(n, str) and n for n in given):
            raise ImportError_(f"input_names must be {len(args)} names, one per example "
                               f"input, got {list(given)!r}")
        return list(given)
    import inspect

    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) >= len(args):
        return [p.name for p in params[:len(args)]]
    return [f"input_{i}" for i in range(len(args))]


def _dynamic_shapes(dynamic: Dynamic | None, names: list[str],
                    args: tuple[Any, ...]) -> list[dict[int, str]]:
    if dynamic is None:
        return [{} for _ in args]
    if isinstance(dynamic, Mapping):
        extra = [k for k in dynamic if k not in names]
        if extra:
            raise ImportError_(f"dynamic names input {extra[0]!r}; the inputs are "
                               f"{', '.join(names)}")
        per = [dynamic.get(n) or {} for n in names]
    else:
        per = [d or {} for d in dynamic]
        if len(per) != len(args):
            raise ImportError_(f"dynamic has {len(per)} entries for {len(args)} inputs: give "
                               "one {axis: name} per input")
    out: list[dict[int, str]] = []
    for n, d, t in zip(names, per, args, strict=True):
        spec: dict[int, str] = {}
        for axis, dim in dict(d).items():
            if not isinstance(axis, int) or not -t.dim() <= axis < t.dim():
                raise ImportError_(f"dynamic axis {axis!r} of input '{n}' is not an axis of "
                                   f"its example, of shape {tuple(t.shape)}")
            if not isinstance(dim, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", dim):
                raise ImportError_(f"dynamic axis {axis} of input '{n}' must be named by an "
                                   f"identifier, got {dim!r}")
            if t.shape[axis] < 2:
                raise ImportError_(f"input '{n}' has size {t.shape[axis]} on its symbolic "
                                   f"axis {axis} ('{dim}'): give an example of size 2 or more "
                                   "(torch.export specializes a size of 1)")
            spec[axis % t.dim()] = dim
        out.append(spec)
    return out


def export_onnx(module: Any, args: tuple[Any, ...], names: list[str],
                shapes: list[dict[int, str]]) -> Any:
    """The ``onnx.ModelProto`` of ``torch.onnx.export(dynamo=True)``, its weights inside;
    the exporter's chatter is silenced and its failure is one line."""
    import torch

    quiet = io.StringIO()
    was_training = module.training
    module.eval()
    # The exporter logs through ``logging`` (handlers that keep the real stderr), e.g. that
    # torchvision's ops are skipped: quiet for the export only.
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), \
                contextlib.redirect_stderr(quiet):
            warnings.simplefilter("ignore")
            prog = torch.onnx.export(
                module, args, dynamo=True, input_names=names,
                dynamic_shapes=tuple(shapes) if any(shapes) else None, verbose=False,
                report=False, optimize=False)
            if prog is None:
                raise RuntimeError("torch.onnx.export returned no program")
            _simplify(prog.model, _torch_names(module))
            from onnxscript import ir

            return ir.serde.serialize_model(prog.model)
    except Exception as e:  # noqa: BLE001 - the exporter raises many kinds
        raise ImportError_(f"torch.onnx.export(dynamo=True) failed on "
                           f"{type(module).__name__}: {_cause(e)}") from None
    finally:
        module.train(was_training)
        logger.setLevel(level)


def _torch_names(module: Any) -> frozenset[str]:
    names = {n for n, _ in module.named_parameters(remove_duplicate=False)}
    names.update(n for n, _ in module.named_buffers(remove_duplicate=False))
    return frozenset(names)


def _simplify(model: Any, params: frozenset[str]) -> None:
    """Fold what the export computes from constants, in place, except from the module's
    parameters and buffers.

    The exporter's own optimizer (``optimize=True``) folds ``Transpose(weight)`` into a new
    initializer and batch normalization into the convolution before it, so that parameters
    lose their torch names or change their values; this runs only its constant folding
    (which also turns ``SplitToSequence`` + ``SequenceAt`` into ``Split``), never on a node
    that reads a parameter, and removes the nodes left unused.
    """
    from onnxscript import optimizer

    def should_fold(node: Any) -> bool | None:
        for v in node.inputs:
            if v is not None and v.name in params and v.is_initializer():
                return False
        return None

    optimizer.inline(model)
    for _ in range(2):  # folding can expose more folding once unused nodes are gone
        result = optimizer.fold_constants(model, onnx_shape_inference=True,
                                          should_fold=should_fold)
        optimizer.remove_unused_nodes(model)
        if not result.modified:
            break


def _cause(e: BaseException) -> str:
    """The innermost cause's first line (the exporter wraps the real error in advice)."""
    seen = e
    while seen.__cause__ is not None:
        seen = seen.__cause__
    lines = [ln.strip() for ln in str(seen).splitlines() if ln.strip()]
    text = lines[0] if lines else type(seen).__name__
    if text.endswith(":") and len(lines) > 1:  # a heading: the first item says what
        text = f"{text} {lines[1]}"
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return f"{type(seen).__name__}: {text}"


def split_factory(path: str) -> tuple[str, str]:
    """``PACKAGE.MODULE:FACTORY`` as ``(module, factory)``; a one-line error otherwise."""
    mod_name, colon, attr = path.partition(":")
    if not colon or not mod_name or not attr:
        raise ImportError_(f"--torch {path}: expected PACKAGE.MODULE:FACTORY, e.g. "
                           "--torch mypkg.models:make_model")
    return mod_name, attr


def load_factory(path: str) -> Any:
    """The ``torch.nn.Module`` that ``PACKAGE.MODULE:FACTORY`` makes: the module is imported
    (from the current directory too), ``FACTORY`` (a dotted attribute path) is called with
    no arguments, and the result is put in eval mode."""
    import sys

    import torch

    mod_name, attr = split_factory(path)
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - the user's module may raise anything
        raise ImportError_(f"--torch {path}: cannot import {mod_name}: "
                           f"{type(e).__name__}: {_first(e)}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportError_(f"--torch {path}: {mod_name} has no attribute {attr}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ImportError_(f"--torch {path}: {attr} is not callable")
    try:
        made = obj()
    except Exception as e:  # noqa: BLE001
        raise ImportError_(f"--torch {path}: {attr}() failed: {type(e).__name__}: "
                           f"{_first(e)}") from None
    if not isinstance(made, torch.nn.Module):
        raise ImportError_(f"--torch {path}: {attr}() returned a {type(made).__name__}, not a "
                           "torch.nn.Module")
    return made.eval()


def _first(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")


def parse_example(text: str) -> tuple[str, tuple[int, ...], dict[int, str]]:
    """``[DTYPE:]D,D,...`` where each ``D`` is a size or ``NAME=SIZE`` (a symbolic axis
    with its example size): ``int64:batch=2,seq=8`` is ``("int64", (2, 8), {0: "batch",
    1: "seq"})``. The dtype is float32 when not given."""
    dtype, colon, rest = text.rpartition(":")
    if not colon:
        dtype = "float32"
    if dtype not in _DTYPES:
        raise ImportError_(f"--example {text}: unknown dtype {dtype!r} (one of "
                           f"{', '.join(_DTYPES)})")
    shape: list[int] = []
    dynamic: dict[int, str] = {}
    for axis, item in enumerate(rest.split(",") if rest else []):
        name, eq, size = item.strip().rpartition("=")
        try:
            n = int(size)
        except ValueError:
            n = 0
        if n <= 0 or (eq and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)):
            raise ImportError_(f"--example {text}: expected [DTYPE:]D,D,... with each D a "
                               "positive size or NAME=SIZE, e.g. --example batch=2,3,32,32")
        shape.append(n)
        if eq:
            dynamic[axis] = name
    return dtype, tuple(shape), dynamic


def example_tensors(examples: Sequence[tuple[str, tuple[int, ...], dict[int, str]]],
                    ) -> tuple[Any, ...]:
    """Tensors for parsed ``--example`` shapes: floats drawn from N(0, 1) (seeded), integers
    ones and booleans true (valid token ids and attention masks)."""
    import torch

    g = torch.Generator().manual_seed(0)
    out = []
    for dtype, shape, _ in examples:
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(dt))
        else:
            out.append(torch.ones(shape, dtype=dt))
    return tuple(out)
