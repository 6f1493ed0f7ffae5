"""Write docs/zoo.md, the zoo's table: ``.venv/bin/python -m tests.zoo.report``.

Every (model, exporter) pair is checked (``tests.zoo.check``; exports are cached, see
``tests.zoo.export``) and the table, the failures with their reasons
(``tests.zoo.known``), the versions, the machine and the date are written. Pass
``--fresh`` to export again instead of reading the cache (the export times are then this
run's), ``-o PATH`` to write elsewhere.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import warnings

from tests.zoo.check import REBIND, RTOL, Result, check
from tests.zoo.export import _versions, cache_dir
from tests.zoo.known import KNOWN
from tests.zoo.models import ALL_EXPORTERS, BATCH, SEQ, SPECS

_DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "zoo.md")


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs visible, {platform.system()} {platform.release()}"


def _mark(r: Result, stage: str) -> str:
    if stage == "rebind":
        if "rebind" not in r.seconds:
            return "-"
        return "no" if r.rebind_error else "yes"
    if r.stage == stage:
        return "**no**"
    return "yes" if stage in r.seconds else "-"


def _s(r: Result, stage: str) -> str:
    t = r.seconds.get(stage)
    return "" if t is None else f"{t:.2f}"


def table(results: list[Result]) -> str:
    head = ("| model | exporter | nodes | import | types | rebind | execute (max rel. error) "
            "| simulate | export s | import s | types s | rebind s | execute s | simulate s |")
    lines = [head, "|" + "---|" * 14]
    for r in results:
        ex = _mark(r, "execute")
        if r.rel_error is not None:
            ex = f"{ex} ({r.rel_error:.1e})"
        lines.append(
            f"| {r.model} | {r.exporter} | {r.nodes or ''} | {_mark(r, 'import')} | "
            f"{_mark(r, 'types')} | {_mark(r, 'rebind')} | {ex} | {_mark(r, 'simulate')} | "
            f"{_s(r, 'export')} | {_s(r, 'import')} | {_s(r, 'types')} | {_s(r, 'rebind')} | "
            f"{_s(r, 'execute')} | {_s(r, 'simulate')} |")
    return "\n".join(lines)


def render(results: list[Result]) -> str:
    n = len(results)
    main = sum(r.stage is None for r in results)
    full = sum(r.ok for r in results)
    faster = sum(1 for r in results if "types" in r.seconds and r.stage != "types"
                 and r.seconds["import"] + r.seconds["types"] < r.seconds["export"])
    typed = sum(1 for r in results if "types" in r.seconds and r.stage != "types")
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# The exported-model zoo",
        "",
        "Ordinary models with random weights, exported with both of torch's ONNX exporters "
        "(`torch.onnx.export(..., dynamo=False)`, \"torchscript\", and `dynamo=True`, "
        "\"dynamo\", each with its defaults and symbolic `batch` and `seq` axes), and with "
        "the export of `distir.import_torch` (\"import_torch\": dynamo, whose constant "
        "folding spares the parameters, so that each keeps its torch name and value, "
        "checked too), then imported and checked by `tests/zoo` (`pytest tests/zoo`). This "
        "page is written by `.venv/bin/python -m tests.zoo.report`; the models and their "
        "sizes are described in `tests/zoo/models.py`.",
        "",
        f"- Versions: {_versions()}, onnxruntime {_ort_version()}, Python "
        f"{platform.python_version()}.",
        f"- Machine: {_machine()}; load average {os.getloadavg()[0]:.1f} when written "
        "(times grow with it: other work shared these CPUs).",
        f"- Date: {date}.",
        "",
        f"**{main} of {n}** pairs import, type every value, execute within {RTOL:g} "
        f"(relative) of onnxruntime and simulate; **{full} of {n}** also type re-bound to "
        f"other sizes. In {faster} of the {typed} pairs that type, import + type propagation "
        "take less than the export.",
        "",
        "Columns, in the order they run:",
        "",
        f"- **import**: `distir.import_onnx(path, dims={{'batch': {BATCH}, 'seq': {SEQ}}})`;",
        "- **types**: type propagation types every value of `@main` as a tensor of known "
        "shape, and the output as the torch model's;",
        f"- **rebind**: imported with `batch={REBIND[0]}, seq={REBIND[1]}` instead, the "
        "module types to the torch model's output shape at those sizes, without executing "
        "anything (shapes computed in the graph are computed by type propagation);",
        "- **execute**: `distir.execute` (the numpy reference semantics) against onnxruntime "
        "on the same file and inputs; the error is max |distir - ort| / max |ort|;",
        "- **simulate**: `distir.simulate(fn, 'h100-sxm')` gives a positive latency.",
        "",
        "Times are wall seconds on the machine above: the export's when it was exported, "
        "the best of two for import and types, one run for the others. *nodes* counts the "
        "exported graph's nodes.",
        "",
        table(results),
        "",
        "Setup choices forced by the exporters (not by DistIR), so that every model exports "
        "with both:",
        "",
        "- GPT-2 and Llama take an `attention_mask` input beside `input_ids`, as BERT and T5 "
        "do: without one, `transformers` looks for packed sequences with `torch.diff`, which "
        "the TorchScript exporter cannot export (`aten::diff`).",
        "- T5 uses eager attention: torch's dynamo exporter fails to decompose T5's SDPA "
        "attention (\"Cannot view a tensor with shape [b, s, 4, 8] ... as a tensor with shape "
        "[b, s, 32]\"), with symbolic or fixed sizes alike.",
        "- `nn.TransformerEncoder` is exported with gradients enabled (as "
        "`torch.onnx.export` is usually called): under `torch.no_grad()` in eval mode it takes "
        "its fused fast path, `aten::_transformer_encoder_layer_fwd`, which the TorchScript "
        "exporter cannot export.",
        "",
        "## Failures left",
        "",
    ]
    failures = [r for r in results if not r.ok]
    if not failures:
        out.append("None.")
    for r in failures:
        k = KNOWN.get((r.model, r.exporter))
        reason = k.reason if k else "not known yet (tests/zoo/known.py lists no reason)"
        stage = r.stage or "rebind"
        err = r.error or r.rebind_error
        out.append(f"- **{r.model} / {r.exporter}**, {stage}: {reason}.")
        out.append(f"  The error: `{_code(err)}`")
    out.append("")
    return "\n".join(out)


def _code(s: str) -> str:
    s = s.replace("`", "'")
    return s if len(s) <= 400 else s[:400] + " ..."


def _ort_version() -> str:
    try:
        import onnxruntime

        return str(onnxruntime.__version__)
    except ImportError:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.zoo.report", description=__doc__)
    ap.add_argument("-o", "--output", default=_DOCS, help="where to write (docs/zoo.md)")
    ap.add_argument("--fresh", action="store_true", help="export again (drop the cache)")
    args = ap.parse_args(argv)
    if args.fresh:
        shutil.rmtree(cache_dir(), ignore_errors=True)
    warnings.simplefilter("ignore")
    results = []
    for spec in SPECS:
        for exporter in ALL_EXPORTERS:
            r = check(spec, exporter)
            results.append(r)
            print(f"{r.model:20s} {r.exporter:11s} {'ok' if r.ok else r.stage or 'rebind'}",
                  file=sys.stderr, flush=True)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(render(results))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
