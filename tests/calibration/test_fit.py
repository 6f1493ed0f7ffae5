"""Fitting on synthetic measurements with known laws: the chosen model, its held-out error."""

from __future__ import annotations

import math
import random

from calibration.bench import matmul_shapes
from calibration.fit import fit_one, fit_rows, pooled


def _mm_rows(law, seed: int = 0, noise: float = 0.02) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i, (m, n, k) in enumerate(matmul_shapes(False, True, 160, seed=seed)):
        flops, nbytes = 2.0 * m * n * k, 2 * (m * k + k * n + m * n)
        t = law(m, n, k, flops, nbytes) * (1 + rng.uniform(-noise, noise))
        rows.append({"family": "matmul", "op": "matmul", "dtype": "BFloat16", "m": m, "n": n,
                     "k": k, "bytes": nbytes, "flops": flops, "group_size": 1, "seconds": t,
                     "reps": 1, "device": "synthetic", "split": "test" if i % 4 == 3
                     else "train"})
    return rows


def _comm_rows(law, family: str = "allreduce", noise: float = 0.02) -> list[dict]:
    rng = random.Random(1)
    rows = []
    for i in range(24, 61):  # 4 KiB .. 1 GiB in steps of sqrt(2)
        b = int(round(2 ** (i / 2)))
        rows.append({"family": family, "op": family, "dtype": "Float32", "m": b // 4, "n": 0,
                     "k": 0, "bytes": b, "flops": 0.0, "group_size": 2,
                     "seconds": law(b) * (1 + rng.uniform(-noise, noise)), "reps": 1,
                     "device": "synthetic", "split": "test" if i % 2 else "train"})
    return rows


def test_roofline_law_is_recovered() -> None:
    rows = _mm_rows(lambda m, n, k, f, b: 6e-6 + f / 7e14 + b / 3e12)
    rep = fit_one("matmul", "BFloat16", rows)
    assert rep is not None and rep.n_test > 20
    assert rep.median_ape is not None and rep.median_ape < 0.03
    assert rep.median_ape_large is not None and rep.n_large > 5
    assert rep.median_ape_large < 0.03
    assert {"linear(flops, bytes)", "linear(flops, mn, mk, kn)", "loglog2(m, n, k)",
            "loglog3(m, n, k)", "loglog2(flops, bytes)",
            "linear(flops, mn, mk, kn) x trees(m, n, k)"} <= set(rep.cv)


def test_per_operand_costs_are_recovered() -> None:
    # Efficiency 1 / (1 + 300/m + 500/n + 200/k): a cost per element of each operand.
    def law(m: int, n: int, k: int, f: float, b: float) -> float:
        eff = 1.0 / (1.0 + 300.0 / m + 500.0 / n + 200.0 / k)
        return 4e-6 + f / (8e14 * eff)

    rep = fit_one("matmul", "BFloat16", _mm_rows(law))
    assert rep is not None and rep.model_name == "linear(flops, mn, mk, kn)"
    assert rep.median_ape is not None and rep.median_ape < 0.03
    assert rep.r2_log is not None and rep.r2_log > 0.99


def test_efficiency_set_by_the_smallest_dimension_is_learned() -> None:
    # Efficiency rising with the smallest dimension: no smooth law of m, n, k fits it.
    def law(m: int, n: int, k: int, f: float, b: float) -> float:
        s = min(m, n, k)
        return f / (8e14 * (s / (s + 2000.0)) ** 0.7)

    rep = fit_one("matmul", "BFloat16", _mm_rows(law))
    assert rep is not None and rep.cv[rep.model_name] == min(rep.cv.values())
    assert rep.median_ape is not None and rep.median_ape < 0.10
    assert rep.median_ape_large is not None and rep.median_ape_large < 0.10


def test_wave_quantization_is_learned() -> None:
    # 128 x 128 tiles over 132 units: time grows with the number of waves, not smoothly.
    def law(m: int, n: int, k: int, f: float, b: float) -> float:
        tiles = math.ceil(m / 128) * math.ceil(n / 128)
        waves = math.ceil(tiles / 132)
        return 5e-6 + waves * 132 * 2 * 128 * 128 * k / 7e14

    rep = fit_one("matmul", "BFloat16", _mm_rows(law))
    assert rep is not None and "trees" in rep.model_name
    assert rep.median_ape_large is not None and rep.median_ape_large < 0.10


def test_collective_with_a_protocol_switch_is_fitted_piecewise() -> None:
    def law(b: float) -> float:  # latency-bound, then a slower protocol, then bandwidth
        if b < 1 << 16:
            return 1e-5 + b / 5e9
        return 2.5e-5 + b / 3e11

    rep = fit_one("allreduce", "2", _comm_rows(law))
    assert rep is not None and rep.model_name.startswith("piecewise")
    assert rep.median_ape is not None and rep.median_ape < 0.05
    assert rep.median_ape_large is not None and rep.median_ape_large < 0.05


def test_fit_rows_groups_by_family_and_key() -> None:
    rows = (_mm_rows(lambda m, n, k, f, b: 1e-5 + f / 1e14)
            + _comm_rows(lambda b: 1e-5 + b / 1e11)
            + _comm_rows(lambda b: 1.2e-5 + b / 2e11, "send"))
    reps = fit_rows(rows)
    assert [(r.family, r.key) for r in reps] == [("allreduce", "2"), ("matmul", "BFloat16"),
                                                 ("send", "2")]
    n, err = pooled(reps, rows, {"allreduce", "send"})
    assert n == 2 * 10 and err is not None and err < 0.05  # sizes >= 1 MiB held out
    n_mm, err_mm = pooled(reps, rows, {"matmul"})
    assert n_mm > 5 and err_mm is not None and err_mm < 0.05
    # Too few rows: no fit.
    assert fit_one("broadcast", "2", _comm_rows(lambda b: 1e-5)[:5]) is None
    assert all(math.isfinite(r.cv[r.model_name]) for r in reps)


def test_batched_matmuls_are_fitted_per_dtype_with_the_batch() -> None:
    """A bmm law that depends on the batch (small products run less efficiently, batch
    amortizes): recovered from (batch, m, n, k), scored on held-out shapes."""
    rng = random.Random(3)
    rows = []
    i = 0
    for b in (8, 12, 32, 64, 128, 256):
        for t in (128, 256, 512, 1024, 2048):
            for hd in (64, 128):
                for m, n, k in ((t, t, hd), (t, hd, t)):
                    flops = 2.0 * b * m * n * k
                    nbytes = 2 * b * (m * k + k * n + m * n)
                    eff = 1.0 / (1.0 + 64.0 / hd + 256.0 / t)
                    sec = (2e-5 + max(flops / (8e14 * eff), nbytes / 3e12)) * \
                        (1 + rng.uniform(-0.02, 0.02))
                    rows.append({"family": "bmm", "op": "bmm", "dtype": "Float16", "m": m,
                                 "n": n, "k": k, "bytes": nbytes, "flops": flops,
                                 "group_size": 1, "seconds": sec, "reps": 1,
                                 "device": "synthetic",
                                 "split": "test" if i % 4 == 3 else "train"})
                    i += 1
    reps = fit_rows(rows)
    assert [(r.family, r.key) for r in reps] == [("bmm", "Float16")]
    rep = reps[0]
    assert rep.median_ape is not None and rep.median_ape < 0.08
    assert "batch" in rep.model_name or "flops" in rep.model_name
    n, err = pooled(reps, rows, {"bmm"})
    assert n > 10 and err is not None and err < 0.08
