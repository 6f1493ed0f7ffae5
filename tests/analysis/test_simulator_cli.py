"""``distir simulate``: report, --json, --trace, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distir.cli import main

ROOT = Path(__file__).resolve().parents[2]
PP2 = str(ROOT / "examples" / "mlp_step_pp2.dir")


def test_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", PP2, "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("@main on h100-sxm")
    assert "latency" in out and "throughput" in out and "samples/s" in out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("device"))
    assert [line.split()[0] for line in lines[head + 1:head + 3]] == ["0", "1"]


def test_json_and_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    assert main(["simulate", PP2, "--hardware", "dgx2-v100", "--json", "--trace",
                 str(trace)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hardware"] == "dgx2-v100" and doc["devices"] == [0, 1]
    assert doc["latency_s"] > 0 and set(doc["peak_memory_bytes"]) == {"0", "1"}
    assert doc["num_ops"] == 37 and doc["trace"] == str(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) > 37


def test_profile_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = ROOT / "calibration" / "profiles" / "dgx2-v100.json"
    assert main(["simulate", PP2, "-H", str(prof), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"] == "dgx2-v100"


def test_cuda_graph_drops_the_hosts(host_profile: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``--cuda-graph``: the profile without its host dispatch (a step replayed as a graph)."""
    prof = host_profile
    docs = {}
    for name, extra in (("eager", []), ("graph", ["--cuda-graph"]), ("plain", None)):
        argv = ["simulate", PP2, "--json", "-H", str(prof) if extra is not None else "h100-sxm"]
        assert main(argv + (extra or [])) == 0
        docs[name] = json.loads(capsys.readouterr().out)
    assert docs["graph"]["hardware"] == "h100-host+graph"
    assert docs["graph"]["latency_s"] == pytest.approx(docs["plain"]["latency_s"])
    assert docs["eager"]["latency_s"] > 10 * docs["graph"]["latency_s"]  # 1 ms an op


@pytest.mark.parametrize("argv, message", [
    (["--hardware", "nope"], "unknown hardware profile 'nope'; available: "),
    (["--batch-size", "0"], "batch size must be positive"),
])
def test_errors_are_one_line(argv: list[str], message: str,
                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", PP2, *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bad_program_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.dir"
    p.write_text("func @main(%x: Tensor[Float32, (4,), 0], %y: Tensor[Float32, (4,), 1]) {\n"
                 "  %z = Add(%x, %y)\n  return %z\n}\n")
    assert main(["simulate", str(p)]) == 1
    err = capsys.readouterr().err
    assert "bad.dir:2" in err and "Send" in err and err.count("\n") == 1


def test_near_the_capacity_the_allocator_decides(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """With a card sized just above the program's liveness peak, the report adds the
    caching allocator's verdict (distir.analysis.allocator), in text and JSON."""
    assert main(["simulate", PP2, "--json"]) == 0
    peak = max(json.loads(capsys.readouterr().out)["peak_memory_bytes"].values())
    prof = json.loads((ROOT / "calibration" / "profiles" / "h200-sxm.json").read_text())
    prof["name"] = "tight"
    prof["device"]["memory_bytes"] = peak + 1024
    for k in ("reserved_bytes", "outside_allocator", "workspace_bytes"):
        prof["device"].pop(k, None)
    path = tmp_path / "tight.json"
    path.write_text(json.dumps(prof))
    assert main(["simulate", PP2, "-H", str(path)]) == 0
    out = capsys.readouterr().out
    assert "near the capacity: the caching allocator would reserve" in out
    assert out.rstrip().endswith("OUT OF MEMORY")  # its segments map whole 2 MiB pages
    assert main(["simulate", PP2, "-H", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["allocator"]["fits"] is False and doc["allocator"]["replayed"]
    assert main(["simulate", PP2]) == 0  # far from h100-sxm's capacity: no verdict
    assert "near the capacity" not in capsys.readouterr().out
