"""``calibration.bench_matmul_grad``: a CPU smoke run of the benchmark (rows in the
measurements-CSV format, with each family's ``m``, ``n``, ``k`` as the cost rules name
them), and the fitting of its families on synthetic rows with known laws."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from calibration.bench_matmul_grad import main, product_shapes
from calibration.calibrate import read_measurements, write_measurements
from calibration.fit import PER_DTYPE, fit_key, fit_rows
from distir.analysis.hardware import matmul_features, scatter_features


def test_quick_cpu_run_writes_the_families(tmp_path: Path) -> None:
    out = tmp_path / "mg.csv"
    assert main(["-o", str(out), "--quick", "--cpu", "--shapes", "3"]) == 0
    rows, meta = read_measurements(out)
    assert meta["command"] == "python -m calibration.bench_matmul_grad"
    fams = {r["family"] for r in rows}
    assert fams == {"matmul_tn", "matmul_nt", "bmm_nt", "bmm_tn", "scatter_add",
                    "scatter_add_repeated"}
    quick_rows = {64, 128, 256}
    for r in rows:
        assert r["seconds"] > 0 and r["dtype"] == "Float32"
        if r["family"] == "matmul_tn":  # (k_in x R) @ (R x n_out): the reduction is R
            assert r["k"] in quick_rows and r["flops"] == 2.0 * r["m"] * r["n"] * r["k"]
        elif r["family"] == "matmul_nt":  # (R x n_out) @ (n_out x k_in)
            assert r["m"] in quick_rows
        elif r["family"] in ("bmm_nt", "bmm_tn"):  # per product; batch 2 or 4, or the
            # quick small product's 64
            assert r["flops"] / (2.0 * r["m"] * r["n"] * r["k"]) in (2, 4, 64)
        else:  # m rows of width n into a table of k rows
            assert r["op"].startswith("ScatterND add")
            # data and result, updates (float32) and the int64 indices
            assert r["bytes"] == (2 * r["k"] + r["m"]) * r["n"] * 4 + 8 * r["m"]
    assert {r["split"] for r in rows} == {"train", "test"}


def test_gpu_sweep_holds_the_transformer_and_lm_head_shapes() -> None:
    tn = product_shapes("matmul_tn", False, True, 8)
    nt = product_shapes("matmul_nt", False, True, 8)
    assert (32768, 1024, 4096) in tn and (32768, 1024, 50257) in tn
    assert (32768, 50257, 1024) in nt  # the tied head x @ wte.t()
    assert all(2.0 * r * a * b <= 3.5e12 for r, a, b in tn + nt)


def _rows(family: str, dtype: str, law, n: int = 40) -> list[dict]:
    rng = random.Random(0)
    rows = []
    for i in range(n):
        m, nn, k = (rng.choice((256, 512, 1024, 2048, 4096)) for _ in range(3))
        x = matmul_features(m, nn, k, 2)
        if family == "scatter_add_repeated":
            x = scatter_features(m, nn, k, 2 * (2 * k + m) * nn + 8 * m)
        rows.append({"family": family, "op": family, "dtype": dtype, "m": m, "n": nn, "k": k,
                     "bytes": int(x["bytes"]), "flops": 2.0 * m * nn * k, "group_size": 1,
                     "seconds": law(x) * (1 + rng.uniform(-0.02, 0.02)), "reps": 1,
                     "device": "synthetic", "split": "test" if i % 4 == 3 else "train"})
    return rows


@pytest.mark.parametrize("family", ["matmul_tn", "bmm_tn", "scatter_add_repeated"])
def test_the_families_are_fitted_per_dtype(family: str) -> None:
    assert family in PER_DTYPE
    if family == "scatter_add_repeated":
        def law(x: dict) -> float:
            return 5e-6 + x["rows"] * 1.3e-10 + x["bytes"] / 3e12
    else:
        def law(x: dict) -> float:
            return 8e-6 + x["flops"] / 6e14 + x["bytes"] / 3e12
    rows = _rows(family, "Float16", law) + _rows(family, "Float32", law)
    assert {fit_key(r) for r in rows} == {"Float16", "Float32"}
    reps = {(r.family, r.key): r for r in fit_rows(rows)}
    assert set(reps) == {(family, "Float16"), (family, "Float32")}
    rep = reps[(family, "Float16")]
    assert rep.median_ape is not None and rep.median_ape < 0.1
    # the products' fits record the sizes they were measured over (train and test rows)
    dom = {f: (lo, hi) for f, lo, hi in rep.model.domain}
    if family == "scatter_add_repeated":
        assert not dom
    else:
        fam_rows = [r for r in rows if r["dtype"] == "Float16"]
        assert dom["m"] == (min(r["m"] for r in fam_rows), max(r["m"] for r in fam_rows))
        assert set(dom) == ({"m", "n", "k"} if family == "matmul_tn" else
                            {"batch", "m", "n", "k"})


def test_merge_adds_the_three_families_once(tmp_path: Path) -> None:
    bench = tmp_path / "mg.csv"
    assert main(["-o", str(bench), "--quick", "--cpu", "--shapes", "2"]) == 0
    base = tmp_path / "p.measurements.csv"
    row = {"family": "scatter_add", "op": "ScatterND", "dtype": "Float32", "m": 8, "n": 4,
           "k": 16, "bytes": 1000, "flops": 32.0, "group_size": 1, "seconds": 1e-5,
           "reps": 1, "device": "cpu", "split": "train"}
    write_measurements(base, [row], {"command": "python -m calibration"})
    base.write_bytes(base.read_bytes().replace(b"\r\n", b"\n"))
    for _ in range(2):  # idempotent: the second merge replaces the first one's rows
        assert main(["--merge", str(bench), str(base)]) == 0
    rows, meta = read_measurements(base)
    bench_rows, _ = read_measurements(bench)
    want = [r for r in bench_rows if r["family"] != "scatter_add"]
    assert rows == [row | {"bytes": 1000}, *want]
    assert meta["command"].count("bench_matmul_grad") == 1
    assert b"\r\n" not in base.read_bytes()


def test_small_products_in_many_batches() -> None:
    """The batched families' small products: one dimension at most 16, batches of 1,024
    to 131,072 on a GPU, another sample for another seed, each shape once."""
    from calibration.bench_matmul_grad import small_batched_shapes

    first = small_batched_shapes(False, True)
    assert len(first) == 160 == len(set(first))
    assert all(min(m, n, k) <= 16 and 1024 <= b <= 131072 for b, m, n, k in first)
    assert all(b * max(m * n, m * k, k * n) * 4 <= 1 << 30 for b, m, n, k in first)
    second = small_batched_shapes(False, True, seed=1)
    assert len(set(first) & set(second)) < 16
    assert any(b not in (1 << p for p in range(10, 18)) for b, *_ in second)  # between
    assert small_batched_shapes(True, True) == [(64, 16, 1, 9)]
    assert len(small_batched_shapes(False, False)) == 8
