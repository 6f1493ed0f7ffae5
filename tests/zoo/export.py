"""Export the zoo's models to ONNX with torch's two exporters and ``distir.import_torch``'s,
cached on disk.

``exported(spec, exporter)`` is the path of ``<cache>/<model>.<exporter>.onnx``, exported on
first use. The cache directory is keyed by the versions of torch, transformers and onnx and
by a hash of the sources that make the exports (this file, ``models.py`` and
``distir/importers/pytorch.py``), so that a change to any of them exports afresh; it is
``.pytest_cache/distir-zoo/<key>`` under the repository (ignored by git), or
``$DISTIR_ZOO_CACHE/<key>``. A failed export is cached too (as ``.error``, its one-line
reason), so that it is reported the same way every time without being retried.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import shutil
import time
import warnings
from dataclasses import dataclass

import torch

from tests.zoo.models import Spec

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))


def _versions() -> str:
    import onnx

    try:
        import transformers

        tv = transformers.__version__
    except ImportError:
        tv = "none"
    return f"torch {torch.__version__}, transformers {tv}, onnx {onnx.__version__}"


@functools.cache
def cache_dir() -> str:
    """The directory the zoo's exports are cached in (created; its key is computed once
    per process, so that editing a source mid-run does not move the cache)."""
    h = hashlib.sha256(_versions().encode())
    for f in (os.path.join(_HERE, "models.py"), os.path.join(_HERE, "export.py"),
              os.path.join(_ROOT, "distir", "importers", "pytorch.py")):
        with open(f, "rb") as fh:
            h.update(fh.read())
    base = os.environ.get("DISTIR_ZOO_CACHE") or os.path.join(_ROOT, ".pytest_cache",
                                                              "distir-zoo")
    key = h.hexdigest()[:16]
    d = os.path.join(base, key)
    if not os.path.isdir(d):
        os.makedirs(d, exist_ok=True)
        for old in os.listdir(base):  # exports of other versions or sources are stale
            if old != key and len(old) == 16:
                shutil.rmtree(os.path.join(base, old), ignore_errors=True)
    return d


class ExportFailed(Exception):
    """The exporter failed on the model; the message is its first line."""


@dataclass(frozen=True)
class Exported:
    path: str
    seconds: float
    """The wall time of the ``torch.onnx.export`` call when it was exported (read back from
    the cache otherwise)."""


def exported(spec: Spec, exporter: str) -> Exported:
    """Export ``spec``'s model with ``exporter`` (``torchscript``, ``dynamo`` or
    ``import_torch``), or read it from the cache; raises ``ExportFailed`` when the exporter
    fails."""
    d = cache_dir()
    os.makedirs(d, exist_ok=True)  # a process with a newer key may have removed it
    path = os.path.join(d, f"{spec.name}.{exporter}.onnx")
    err, secs = path + ".error", path + ".seconds"
    if os.path.exists(err):
        with open(err, encoding="utf-8") as f:
            raise ExportFailed(f.read())
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            seconds = export(spec, exporter, tmp)
        except Exception as e:  # noqa: BLE001 - any exporter failure is a zoo result
            from distir.importers.pytorch import _cause

            msg = _cause(e)[:300]
            with open(err, "w", encoding="utf-8") as f:
                f.write(msg)
            raise ExportFailed(msg) from None
        with open(secs, "w", encoding="utf-8") as f:
            f.write(f"{seconds:.3f}")
        os.replace(tmp, path)
    with open(secs, encoding="utf-8") as f:
        return Exported(path, float(f.read()))


def export(spec: Spec, exporter: str, path: str) -> float:
    """Write ``spec``'s model to ``path`` with ``exporter``; the inputs are named
    ``spec.input_names`` and their batch (and sequence) axes are symbolic. Returns the wall
    seconds of the ``torch.onnx.export`` call alone (not building the model)."""
    model = spec.build()
    args = spec.inputs(*_example())
    quiet = io.StringIO()
    t0 = time.perf_counter()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), \
            contextlib.redirect_stderr(quiet):
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            dyn = {n: dict(d) for n, d in zip(spec.input_names, spec.dynamic, strict=True)}
            torch.onnx.export(model, args, path, dynamo=False, input_names=list(
                spec.input_names), output_names=["output"], dynamic_axes=dyn)
        elif exporter == "dynamo":
            shapes = tuple(dict(d) for d in spec.dynamic)
            prog = torch.onnx.export(model, args, dynamo=True, input_names=list(
                spec.input_names), output_names=["output"], dynamic_shapes=shapes,
                verbose=False)
            assert prog is not None
            prog.save(path)
        elif exporter == "import_torch":
            import onnx

            from distir.importers.pytorch import export_onnx

            proto = export_onnx(model, args, list(spec.input_names),
                                [dict(d) for d in spec.dynamic])
            onnx.save(proto, path)
        else:
            raise ValueError(f"unknown exporter {exporter!r}")
    return time.perf_counter() - t0


def _example() -> tuple[int, int]:
    from tests.zoo.models import BATCH, SEQ

    return BATCH, SEQ
