"""Regenerate docs/conformance.md: ONNX's backend node tests and shipped models, run through
the importer, the type rules and the reference executor.

    .venv/bin/python scripts/conformance_table.py            # writes docs/conformance.md
    .venv/bin/python scripts/conformance_table.py --stdout   # prints it instead
    .venv/bin/python scripts/conformance_table.py --no-models  # node tests only (~20 s)

The same cases, exclusions and comparisons as tests/importers (both use
distir.importers.conformance); the models take a few minutes in numpy.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

COMMAND = ".venv/bin/python scripts/conformance_table.py"


def _first_line(e: BaseException) -> str:
    lines = [x for x in str(e).strip().splitlines() if x.strip()]
    msg = lines[0] if lines else ""
    return f"{type(e).__name__}: {msg}".replace("|", "\\|")[:200]


def node_section(ops: tuple[str, ...], heading: str, which: str) -> list[str]:
    """The table of ONNX's node cases for ``ops``; ``which`` says what the op set is."""
    from distir.importers.conformance import node_cases, run_node_case

    cases = node_cases(ops)
    passed: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    excluded: dict[str, list[tuple[str, str]]] = defaultdict(list)
    failed: dict[str, list[tuple[str, str]]] = defaultdict(list)
    t0 = time.perf_counter()
    for c in cases:
        total[c.op] += 1
        if c.excluded:
            excluded[c.op].append((c.name, c.excluded))
            continue
        try:
            run_node_case(c)
            passed[c.op] += 1
        except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
            failed[c.op].append((c.name, _first_line(e)))
    seconds = time.perf_counter() - t0
    n_pass = sum(passed.values())
    n_fail = sum(len(v) for v in failed.values())
    n_excl = sum(len(v) for v in excluded.values())
    out = [
        f"## {heading}",
        "",
        f"Every case that `onnx.backend.test.case.node.collect_testcases()` yields for an op "
        f"of {which} ({len(ops)} ops), including the `_expanded` cases "
        "(the op's ONNX function body). A case passes when it imports, type propagation "
        "gives the expected outputs' dtypes and shapes, and `distir.execute` gives the "
        "expected values within the case's tolerances (rtol 1e-3, atol 1e-7), compared as "
        "ONNX's backend runner compares them.",
        "",
        f"**{len(cases)} cases: {n_pass} passed, {n_fail} failed, {n_excl} excluded** "
        f"(run in {seconds:.1f} s).",
        "",
        "| op | cases | passed | failed | excluded |",
        "|---|---:|---:|---:|---:|",
    ]
    for op in ops:
        out.append(f"| {op} | {total[op]} | {passed[op]} | {len(failed[op])} | "
                   f"{len(excluded[op])} |")
    if n_fail:
        out += ["", "### Failed cases", ""]
        for op in ops:
            for name, msg in failed[op]:
                out.append(f"- {op}: `{name}`: {msg}")
    out += ["", "### Excluded cases", "",
            "Each is outside DistIR's spec, decided from the case alone before it runs "
            "(`distir.importers.conformance.exclusion`).", ""]
    for op in ops:
        for name, why in excluded[op]:
            out.append(f"- {op}: `{name}`: {why}")
    return out


def model_section() -> list[str]:
    import numpy as np
    import onnxruntime as ort

    from distir.analysis import execute, type_env
    from distir.analysis.values import type_of
    from distir.importers.conformance import (
        LIGHT_RTOL,
        assert_similar,
        light_expected,
        light_input,
        light_models,
        light_random_weights,
    )
    from distir.importers.onnx import import_onnx
    from distir.ir.types import TensorType

    out = [
        "## Real models: `onnx/backend/test/data/light`",
        "",
        "Opset-9 image classifiers (upgraded to opset 21 on import), run on the input ONNX's "
        "runner feeds them (`arange(n) / n`), compared with the `_output_0.pb` shipped beside "
        "each and with onnxruntime (CPU) on the original model, at ONNX's tolerances (rtol "
        "1e-3, 2e-3 for densenet121; atol 1e-7). Under their constant weights most of them "
        "output a uniform 0.001 whatever the input, so the last column runs the same graphs "
        "with random weights and a random input (`light_random_weights`) against "
        "onnxruntime. Times are wall-clock seconds on "
        f"{platform.machine()} with {os.cpu_count()} CPUs (load average "
        f"{os.getloadavg()[0]:.1f} when the models started).",
        "",
        "| model | ops | import (s) | types (s) | all values typed | execute (s) | "
        "= output_0.pb | = onnxruntime | random weights = onnxruntime |",
        "|---|---:|---:|---:|---|---:|---|---|---|",
    ]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for path in light_models():
        name = os.path.basename(path)[len("light_"):-len(".onnx")]
        rtol = LIGHT_RTOL.get(name, 1e-3)
        t0 = time.perf_counter()
        m = import_onnx(path)
        t1 = time.perf_counter()
        env = type_env(m.entry)
        t2 = time.perf_counter()
        typed = all(isinstance(type_of(env.get(v)), TensorType)
                    for op in m.entry.ops for v in op.outputs)
        x = light_input(m.entry.params[0].type.shape)
        (y,) = execute(m.entry, [x])
        t3 = time.perf_counter()
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        (ref,) = sess.run(None, {sess.get_inputs()[0].name: x})
        rmodel = light_random_weights(path, seed=0)
        xr = np.random.default_rng(1).random(x.shape, dtype=np.float32)
        (yr,) = execute(import_onnx(rmodel).entry, [xr])
        rsess = ort.InferenceSession(rmodel.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
        (rref,) = rsess.run(None, {rsess.get_inputs()[0].name: xr})
        verdicts = []
        for got, want, tol in ((y, light_expected(path), rtol), (y, ref, rtol),
                               (yr, rref, 1e-3)):
            try:
                assert_similar([got], [want], rtol=tol, atol=1e-7)
                verdicts.append("yes")
            except AssertionError as e:
                verdicts.append(f"**no**: {_first_line(e)}")
        out.append(f"| {name} | {len(m.entry.ops)} | {t1 - t0:.2f} | {t2 - t1:.2f} | "
                   f"{'yes' if typed else '**no**'} | {t3 - t2:.1f} | {' | '.join(verdicts)} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stdout", action="store_true", help="print instead of writing the doc")
    ap.add_argument("--no-models", action="store_true", help="skip the light models")
    args = ap.parse_args()
    import numpy
    import onnx

    from distir.importers.conformance import SPEC_OPS, ZOO_OPS

    lines = [
        "# Conformance with ONNX's own test suites",
        "",
        f"Generated by `{COMMAND}` (do not edit by hand); onnx {onnx.__version__}, numpy "
        f"{numpy.__version__}, Python {platform.python_version()}. The same checks run in "
        "`.venv/bin/pytest tests/importers` (the four slowest models with `-m slow`).",
        "",
        *node_section(SPEC_OPS, "ONNX backend node tests", "the spec's minimum set"),
        "",
        *node_section(ZOO_OPS, "ONNX backend node tests of the other ops",
                      "the other ONNX ops DistIR defines, `ZOO_OPS`, those that exported "
                      "Hugging Face and torchvision-like models use"),
    ]
    if not args.no_models:
        lines += ["", *model_section()]
    text = "\n".join(lines) + "\n"
    if args.stdout:
        sys.stdout.write(text)
    else:
        path = os.path.join(ROOT, "docs", "conformance.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
