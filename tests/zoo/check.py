"""One zoo pair, (model, exporter), through every stage: ``check(spec, exporter) -> Result``.

Stages, in order; the first that fails ends the pair and its one-line error is recorded
(except ``rebind``, whose failure is recorded apart and lets the others run):

1. ``export``: the model exported (``tests.zoo.export``; cached);
2. ``import``: ``distir.import_onnx`` with the example's dims (``batch=2``, ``seq=8``);
3. ``types``: type propagation gives every value of ``@main`` a tensor type with a known
   shape, and the output the torch model's shape;
4. ``rebind``: imported again with other dims (``batch=3``, ``seq=5``), the module types to
   the torch model's output shape at those sizes, without executing anything;
5. ``execute``: ``distir.execute`` (numpy reference semantics) against onnxruntime on the
   same file and inputs; the error is ``max |distir - ort| / max |ort|`` over the output;
6. ``simulate``: ``distir.simulate`` on the ``h100-sxm`` profile gives a positive latency.

Times are wall seconds of each stage (the export's when it was exported).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from distir.ir.core import Function
from tests.zoo.export import ExportFailed, exported
from tests.zoo.models import BATCH, SEQ, Spec

REBIND = (3, 5)
"""The other (batch, seq) of the ``rebind`` stage."""
RTOL = 1e-4
"""The largest relative error (``max |distir - ort| / max |ort|``) the zoo accepts."""
STAGES = ("export", "import", "types", "rebind", "execute", "simulate")


@dataclass
class Result:
    """What one pair did: ``stage`` is the first stage other than ``rebind`` that failed
    (None when all passed), ``error`` its one-line message; ``seconds`` maps each stage run
    to its wall time (the best of two for ``import`` and ``types``)."""

    model: str
    exporter: str
    stage: str | None = None
    error: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    rebind_error: str = ""
    """The ``rebind`` stage's error, which does not stop the later stages."""
    rel_error: float | None = None
    latency_s: float | None = None
    nodes: int = 0

    @property
    def ok(self) -> bool:
        """Every stage passed, ``rebind`` included."""
        return self.stage is None and not self.rebind_error


class _Failed(Exception):
    pass


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def torch_output_shape(spec: Spec, batch: int, seq: int) -> tuple[int, ...]:
    """The shape of the torch model's output at ``(batch, seq)``."""
    with torch.no_grad():
        return tuple(spec.build()(*spec.inputs(batch, seq)).shape)


def feeds(spec: Spec, batch: int = BATCH, seq: int = SEQ) -> dict[str, np.ndarray]:
    """The example inputs as numpy arrays, by input name."""
    return {n: t.numpy() for n, t in zip(spec.input_names, spec.inputs(batch, seq),
                                         strict=True)}


def check(spec: Spec, exporter: str, *, simulate: bool = True) -> Result:
    """Run ``spec`` exported by ``exporter`` through every stage."""
    r = Result(spec.name, exporter)
    try:
        _run(spec, exporter, r, simulate)
    except _Failed:
        pass
    return r


def _stage(r: Result, name: str, fn: Callable[..., Any], *args: Any, repeat: int = 1,
           **kw: Any) -> Any:
    """Run one stage ``repeat`` times (the best time counts: the first call of a process
    also imports the rule tables)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - each stage's failure is a zoo result
            r.seconds[name] = time.perf_counter() - t0
            r.stage, r.error = name, f"{type(e).__name__}: {_one_line(e)}"
            raise _Failed from None
        best = min(best, time.perf_counter() - t0)
    r.seconds[name] = best
    return out


def _run(spec: Spec, exporter: str, r: Result, simulate: bool) -> None:
    import onnx

    from distir.analysis import execute, type_env
    from distir.analysis.values import type_of
    from distir.importers.onnx import import_onnx
    from distir.ir.types import TensorType

    try:
        ex = exported(spec, exporter)
    except ExportFailed as e:
        r.stage, r.error = "export", str(e)
        return
    r.seconds["export"] = ex.seconds
    r.nodes = len(onnx.load(ex.path, load_external_data=False).graph.node)
    m = _stage(r, "import", import_onnx, ex.path, dims=spec.dims(), repeat=2)
    fn = m.entry

    def types(fn: Function, expected: tuple[int, ...]) -> None:
        env = type_env(fn)
        for op in fn.ops:
            for v in op.outputs:
                t = type_of(env[v])
                if not isinstance(t, TensorType):
                    raise AssertionError(f"%{v.name} ({op.op_type}) is typed {t}, not a "
                                         "tensor of known shape")
        (out,) = fn.returns
        got = type_of(env[out]).shape
        if got != expected:
            raise AssertionError(f"the output is typed {got}, torch gives {expected}")

    _stage(r, "types", types, fn, torch_output_shape(spec, BATCH, SEQ), repeat=2)

    expected = torch_output_shape(spec, *REBIND)

    def rebind() -> None:
        m2 = import_onnx(ex.path, dims=spec.dims(*REBIND))
        types(m2.entry, expected)

    try:
        _stage(r, "rebind", rebind)
    except _Failed:
        # Recorded apart: the other stages still run at the example's sizes.
        r.rebind_error, r.stage, r.error = r.error, None, ""
        ort_error = _ort_fails(ex.path, feeds(spec, *REBIND))
        if ort_error:
            r.rebind_error += (f" (onnxruntime fails too: the export fixed a size; "
                               f"{ort_error})")

    inputs = feeds(spec)
    free = [p.name for p in fn.params if p.name not in fn.initializers]
    (y,) = _stage(r, "execute", execute, fn, [inputs[n] for n in free])
    ref = _ort(ex.path, inputs)
    err = float(np.max(np.abs(y.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))
    r.rel_error = err
    if not err <= RTOL:
        r.stage, r.error = "execute", f"max relative error {err:.2e} > {RTOL:g}"
        return
    if simulate:
        import distir

        sim = _stage(r, "simulate", distir.simulate, fn, "h100-sxm")
        r.latency_s = sim.latency_s
        if not sim.latency_s > 0:
            r.stage, r.error = "simulate", f"latency {sim.latency_s} s"


def _ort_fails(path: str, inputs: dict[str, np.ndarray]) -> str:
    """The first line of onnxruntime's error on ``inputs``; empty when it runs."""
    try:
        _ort(path, inputs)
    except Exception as e:  # noqa: BLE001
        msg = _one_line(e)
        # onnxruntime's message ends with the reason after its source location
        return msg.split(" was false. ")[-1].strip()[:160]
    return ""


def _ort(path: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4  # fatal only: a failure is reported by the exception
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    (ref,) = sess.run(None, {n: inputs[n] for n in names})
    return np.asarray(ref, np.float64)
