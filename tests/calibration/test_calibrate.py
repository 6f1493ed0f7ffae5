"""The whole calibration path on a CPU (--quick): microbenchmarks, a 2-process gloo
collective benchmark, fits, the profile and its companions, and simulating with it."""

from __future__ import annotations

from pathlib import Path

import pytest

import distir
from calibration.calibrate import calibrate, default_name, read_measurements
from calibration.readme import insert_report
from distir.analysis.hardware import load_hardware
from distir.cli import main

ROOT = Path(__file__).resolve().parents[2]
COLLECTIVES = {"allreduce", "allgather", "reduce_scatter", "broadcast", "send"}
KERNELS = {"bmm", "softmax", "layernorm", "gelu", "copy", "elementwise_bcast"}
TRAINING = {"batchnorm", "batchnorm_grad", "layernorm_grad", "softmax_grad", "cross_entropy",
            "cross_entropy_grad", "adam", "scatter_add", "reduce", "maxpool", "maxpool_grad",
            "avgpool", "avgpool_grad", "conv", "conv_dgrad", "conv_wgrad", "matmul_tn", "matmul_nt",
            "bmm_nt", "bmm_tn", "scatter_add_repeated", "conv_grouped", "conv_grouped_dgrad",
            "conv_grouped_wgrad", "scatter_add_few", "where", "pad", "conv_nhwc",
            "conv_nhwc_dgrad", "conv_nhwc_wgrad", "conv_grouped_nhwc", "conv_grouped_nhwc_dgrad",
            "conv_grouped_nhwc_wgrad", "groupnorm", "gather_elements", "scatter_elements",
            "conv1d", "conv1d_dgrad", "conv1d_wgrad", "concat"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("cal") / "cpu-quick.json"
    doc = calibrate(str(out), quick=True, cpu=True, cpu_procs=2, log=lambda s: None)
    return out, doc


def test_quick_calibration_writes_profile_measurements_and_report(
        quick: tuple[Path, dict]) -> None:
    out, doc = quick
    csv = out.with_name("cpu-quick.measurements.csv")
    report = out.with_name("cpu-quick.report.md")
    assert out.is_file() and csv.is_file() and report.is_file()
    rows, meta = read_measurements(csv)
    assert meta["kind"] == "cpu" and meta["world"] == 2
    families = {r["family"] for r in rows}
    assert {"matmul", "elementwise"} | KERNELS | TRAINING | COLLECTIVES <= families
    assert all(r["seconds"] > 0 for r in rows)
    assert {r["group_size"] for r in rows if r["family"] in COLLECTIVES} == {2}
    assert {r["split"] for r in rows} == {"train", "test"}
    # The profile: calibrated, with a fit per family, readable by distir.
    hw = load_hardware(str(out))
    assert hw.calibrated and hw.name == "cpu-quick"
    fitted = {(fam, key) for fam, key, _ in hw.fits}
    assert {("matmul", "Float32"), ("elementwise", "any"), ("bmm", "Float32")} <= fitted
    assert {(k, "Float32") for k in KERNELS} <= fitted  # memory-bound kernels: per dtype
    assert {(c, "2") for c in COLLECTIVES} <= fitted
    assert hw.peak("Float32") > 0 and hw.memory_bandwidth > 0 and hw.launch_overhead > 0
    assert [s.group_size for s in hw.intra_node] == [2]
    quality = doc["calibration"]["fit_quality"]
    assert {q["family"] for q in quality} == ({"matmul", "matmul_unaligned", "elementwise"}
                                              | KERNELS | TRAINING | COLLECTIVES)
    text = report.read_text()
    assert text.startswith("## Profile `cpu-quick`") and "| matmul | Float32 |" in text
    assert "GPU-minutes" in text


def test_simulating_with_the_calibrated_profile(quick: tuple[Path, dict]) -> None:
    out, _ = quick
    m = distir.load(str(ROOT / "examples" / "mlp_step_dp2.dir"))
    sim = distir.simulate(m, str(out))
    assert sim.latency_s > 0 and sim.hardware.name == "cpu-quick"
    assert sim.comm_s[0] > 0 and sim.compute_s[0] > 0


def test_fit_only_reproduces_the_fits(quick: tuple[Path, dict], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``distir calibrate --fit-only CSV`` refits the measurements to the same fits (one
    refit, through the command line, of the families of every kind of fit: linear,
    piecewise, row-wise trees, convolutions, collectives; a missing file is one line)."""
    import json

    out, doc = quick
    kept = {"elementwise", "matmul", "layernorm", "reduce", "groupnorm", "conv_dgrad",
            "allreduce", "send"}
    lines = out.with_name("cpu-quick.measurements.csv").read_text().splitlines(True)
    csv = tmp_path / "some.measurements.csv"  # the header, the columns, the families kept
    csv.write_text("".join(lines[:2] + [r for r in lines[2:] if r.split(",")[0] in kept]))
    dest = tmp_path / "refit.json"
    assert main(["calibrate", "--fit-only", str(csv), "-o", str(dest)]) == 0
    assert capsys.readouterr().out.startswith("## Profile `refit`")
    again = json.loads(dest.read_text(encoding="utf-8"))
    fits = json.loads(out.read_text(encoding="utf-8"))["fits"]
    assert set(again["fits"]) == kept
    assert again["fits"] == {f: fits[f] for f in kept}
    assert again["device"] == doc["device"]
    assert (tmp_path / "refit.measurements.csv").is_file()
    assert load_hardware(str(dest)).name == "refit"
    assert main(["calibrate", "--fit-only", str(tmp_path / "none.csv")]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and err.count("\n") == 1


def test_measure_only_writes_just_the_measurements(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    assert calibrate(str(out), quick=True, cpu=True, comm=False, nn=False, shapes=6,
                     measure_only=True, log=lambda s: None) is None
    assert not out.exists()
    rows, meta = read_measurements(tmp_path / "m.measurements.csv")
    assert {r["family"] for r in rows} == {"matmul", "matmul_unaligned", "elementwise",
                                           "elementwise_bcast"}
    assert meta["world"] == 2


def test_device_time_profile(tmp_path: Path) -> None:
    """``--device-time``: every compute family timed by ``DeviceTimer`` on a GPU (on a CPU,
    back to back as before), recorded in the measurements and the profile's comment."""
    from calibration.bench import Timer
    from calibration.bench_train import DeviceTimer
    from calibration.calibrate import build_profile

    t = Timer(__import__("torch").device("cpu"))
    assert DeviceTimer(DeviceTimer(t)).timer is t  # wrapping twice times as once
    out = tmp_path / "d.json"
    assert calibrate(str(out), quick=True, cpu=True, comm=False, nn=False, shapes=6,
                     device_time=True, measure_only=True, log=lambda s: None) is None
    rows, meta = read_measurements(tmp_path / "d.measurements.csv")
    assert meta["device_time"] is False  # the CPU has no device time apart from the host's
    for flag in (True, False):
        doc = build_profile("x", load_hardware("h100-sxm"), {**meta, "device_time": flag},
                            rows, [], {})
        assert any("--device-time" in c for c in doc["comment"]) == flag


def test_default_names() -> None:
    assert default_name("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert default_name("NVIDIA H200") == "h200-sxm"
    assert default_name("NVIDIA H100 PCIe") == "h100-pcie"
    assert default_name("NVIDIA A100-SXM4-40GB") == "nvidia-a100-sxm4-40gb"


def test_readme_report_section() -> None:
    rep = "## Profile `x`\n\n| a |\n"
    once = insert_report(rep, "# Title\n")
    assert once == "# Title\n\n<!-- results:x:begin -->\n## Profile `x`\n\n| a |\n" \
                   "<!-- results:x:end -->\n"
    twice = insert_report("## Profile `x`\n\nnew\n", once)
    assert "new" in twice and "| a |" not in twice and twice.count("results:x:begin") == 1
    pending = "# T\n\n<!-- results:pending:begin -->\nnone yet\n<!-- results:pending:end -->\n"
    assert "none yet" not in insert_report(rep, pending)
    # A section already in the shipped README is replaced, not repeated.
    readme = (ROOT / "calibration" / "README.md").read_text()
    assert "results:pending" not in insert_report(rep, readme)
    assert insert_report(rep, insert_report(rep, readme)) == insert_report(rep, readme)


def test_run_gpu_script_is_valid_bash() -> None:
    import subprocess

    script = ROOT / "calibration" / "run_gpu.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "NCCL_NVLS_ENABLE=0" in text and "python" in text.lower()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_quick_calibration_on_gpu(tmp_path: Path) -> None:
    doc = calibrate(str(tmp_path / "gpu.json"), quick=True, log=lambda s: None)
    assert doc["calibrated"] and ("matmul", "BFloat16") in {
        (f, k) for f, ks in doc["fits"].items() for k in ks}


def test_some_families_in_another_dtype_added_to_a_calibration(
        quick: tuple[Path, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, doc = quick
    full = out.with_name("cpu-quick.measurements.csv")
    part = tmp_path / "part.json"
    assert calibrate(str(part), quick=True, cpu=True, comm=False, measure_only=True,
                     families=["adam", "layernorm_grad", "softmax"], dtypes=["Float16"],
                     log=lambda s: None) is None
    rows, _ = read_measurements(tmp_path / "part.measurements.csv")
    assert {r["family"] for r in rows} == {"adam", "layernorm_grad", "softmax"}
    assert {r["dtype"] for r in rows} == {"Float16"}
    # pooled with the full calibration (its rows of these families and the elementwise
    # ones, which set the bandwidth; refitting every family takes most of a calibration's
    # time): the new dtype's fits join the others
    kept = tmp_path / "full.measurements.csv"
    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    kept.write_text("".join(ln for i, ln in enumerate(lines) if i < 2 or ln.split(",", 1)[0]
                            in ("adam", "layernorm_grad", "softmax", "elementwise")),
                    encoding="utf-8")
    dest = tmp_path / "pooled.json"
    assert main(["calibrate", "--fit-only", str(kept), str(tmp_path / "part.measurements.csv"),
                 "-o", str(dest)]) == 0
    capsys.readouterr()
    fitted = {(fam, key) for fam, key, _ in load_hardware(str(dest)).fits}
    assert {("adam", "Float16"), ("layernorm_grad", "Float16"), ("softmax", "Float16"),
            ("adam", "Float32")} <= fitted
    assert main(["calibrate", "--families", "adamw", "--cpu", "--quick"]) == 1
    err = capsys.readouterr().err
    assert "unknown adamw" in err and err.count("\n") == 1


def test_off_grid_products(tmp_path: Path) -> None:
    """``--off-grid``: the products' dimensions are any multiple of 8 over the grid's
    range, not only its powers of two and midpoints, for the three product families."""
    from calibration.bench import matmul_shapes, off_grid_dims
    from calibration.bench_matmul_grad import product_shapes

    dims = off_grid_dims(64, 16384, 8)
    assert dims[0] == 64 and dims[-1] == 16384 and all(d % 8 == 0 for d in dims)
    on_grid = {1 << e for e in range(20)} | {3 << e for e in range(20)}
    assert len(set(dims) - on_grid) > 0.9 * len(dims)
    shapes = matmul_shapes(False, True, 50, off_grid=True)
    assert len(shapes) == 50 and all(d % 8 == 0 and 64 <= d <= 16384
                                     for s in shapes for d in s)
    assert sum(d not in on_grid for s in shapes for d in s) > 100
    rows_w = product_shapes("matmul_nt", False, True, 20, off_grid=True)
    assert all(r % 8 == 0 and w1 % 64 == 0 and w2 % 64 == 0 for r, w1, w2 in rows_w)
    out = tmp_path / "o.json"
    assert calibrate(str(out), quick=True, cpu=True, comm=False, measure_only=True,
                     families=["matmul", "matmul_tn"], dtypes=["Float32"], off_grid=True,
                     log=lambda s: None) is None
    rows, _ = read_measurements(tmp_path / "o.measurements.csv")
    mm = [r for r in rows if r["family"] == "matmul"]
    assert mm and all(int(r[a]) % 8 == 0 for r in mm for a in ("m", "n", "k"))
    assert {r["family"] for r in rows} >= {"matmul", "matmul_tn"}


def test_pointwise_conv1d_sample(tmp_path: Path) -> None:
    """``--pointwise-conv1d``: the 1-D convolution families measure kernel-1 projections
    only."""
    out = tmp_path / "p.json"
    assert calibrate(str(out), quick=True, cpu=True, comm=False, measure_only=True,
                     families=["conv1d", "conv1d_dgrad", "conv1d_wgrad"],
                     dtypes=["Float32"], pointwise_conv1d=True, seed=1,
                     log=lambda s: None) is None
    rows, _ = read_measurements(tmp_path / "p.measurements.csv")
    assert {r["family"] for r in rows} == {"conv1d", "conv1d_dgrad", "conv1d_wgrad"}
    assert rows and all(r["op"].startswith("conv k1 s1 ") for r in rows)


def test_grouped_convolutions_measured_and_fitted(tmp_path: Path) -> None:
    """``--families conv_grouped ...``: grouped convolutions through the backend's
    lowerings, their rows naming the groups, fitted per dtype with ``groups`` a feature."""
    from calibration.fit import _x, fit_rows

    out = tmp_path / "g.json"
    assert calibrate(str(out), quick=True, cpu=True, comm=False, measure_only=True,
                     families=["conv_grouped", "conv_grouped_dgrad", "conv_grouped_wgrad"],
                     dtypes=["Float32"], log=lambda s: None) is None
    rows, _ = read_measurements(tmp_path / "g.measurements.csv")
    assert {r["family"] for r in rows} == {"conv_grouped", "conv_grouped_dgrad",
                                           "conv_grouped_wgrad"}
    assert all(" g" in r["op"] and float(r["seconds"]) > 0 for r in rows)
    feats = _x(rows[0])
    assert feats["groups"] > 1 and feats["cin"] * feats["groups"] >= feats["groups"]
    fitted = {(r.family, r.key) for r in fit_rows(rows, lambda s: None)}
    assert ("conv_grouped_wgrad", "Float32") in fitted


def test_collectives_alone(tmp_path: Path) -> None:
    """``--families collectives``: every collective and nothing else (here over 2 gloo
    processes); replaying them as CUDA graphs (``--device-time`` on GPUs) needs NCCL."""
    from calibration.comm import COLLECTIVE_OPS, bench_collectives

    part = tmp_path / "comm.json"
    assert calibrate(str(part), quick=True, cpu=True, cpu_procs=2, measure_only=True,
                     families=["collectives"], log=lambda s: None) is None
    rows, _ = read_measurements(tmp_path / "comm.measurements.csv")
    assert {r["family"] for r in rows} == set(COLLECTIVE_OPS)
    with pytest.raises(ValueError, match="NCCL"):
        bench_collectives(2, "gloo", [(4096, "train")], cuda_graph=True)


def test_reduce_is_measured_at_quarter_octaves() -> None:
    """The column reduction's kernel changes near 1,024 rows: its family is measured at
    1.25 and 1.75 x each power of two too, as training sizes."""
    from calibration.bench import size_ladder
    from calibration.bench_train import DENSE_FAMILIES, quarter_sizes

    ladder = size_ladder(8, 20)
    q = quarter_sizes(ladder)
    assert "reduce" in DENSE_FAMILIES and set(ladder) <= set(q)
    assert (1280, "train") in q and (1792, "train") in q and (1 << 20, "train") in q
    assert max(n for n, _ in q) == 1 << 20 and len(q) == len(ladder) + 2 * 12
    from distir.analysis.hardware import rowwise_features

    # the feature that locates that change whatever the width: bytes per kept element
    assert rowwise_features(4000.0, 10, 2)["rows"] == 200.0
