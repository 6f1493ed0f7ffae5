"""The grid search on a local Ray instance: the same rows as local processes, streamed in
order, and ``--resume`` after an interrupted Ray search.

One Ray instance (2 CPUs, no dashboard) serves the whole module; it starts in a few
seconds. Needs the ``ray`` extra (``pip install -e '.[dev,ray]'``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from distir.cli import main
from grid_search import RayExecutor, enumerate_space, read_rows, run_search, workload
from grid_search.executors import make_executor, ray_runtime_env
from grid_search.space import Config

W = workload("mlp", num_layers=4, width=64)
HW = "h200-sxm"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
             log_to_driver=False, runtime_env=ray_runtime_env())
    try:
        yield ray
    finally:
        ray.shutdown()


def _configs() -> list[Config]:
    return list(enumerate_space(W.name, 4, [8], max_microbatches=16))


def _strip(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k != "sim_seconds"} for r in rows]


def test_make_executor_builds_a_ray_executor() -> None:
    ex = make_executor("ray", workers=2, address="10.0.0.1:6379")
    assert isinstance(ex, RayExecutor)
    assert (ex.address, ex.workers) == ("10.0.0.1:6379", 2)
    assert "10.0.0.1:6379" in ex.describe()


def test_the_job_ships_the_two_packages_only(cluster) -> None:
    env = ray_runtime_env()
    assert [os.path.basename(d) for d in env["py_modules"]] == ["distir", "grid_search"]
    assert "__pycache__" in env["excludes"]

    def shipped() -> list[str]:
        import ray as r

        return list(r.get_runtime_context().runtime_env["py_modules"])

    # Uploaded to the cluster (gcs:// packages), so nodes without a checkout import them.
    uris = cluster.get(cluster.remote(shipped).remote())
    assert len(uris) == 2 and all(u.startswith("gcs://") for u in uris)


def test_ray_gives_the_rows_of_local_processes_in_the_same_order(cluster, tmp_path) -> None:
    cs = _configs()
    local = str(tmp_path / "local.csv")
    remote = str(tmp_path / "ray.csv")
    run_search(W, cs, hardware=HW, out=local, workers=1, progress=None)
    seen: list[tuple] = []
    res = run_search(W, cs, hardware=HW, out=remote, progress=None, executor=RayExecutor(),
                     on_row=lambda r: seen.append((len(read_rows(remote)), r["dp"], r["tp"],
                                                   r["pp"], r["microbatches"])))
    # Every row is on disk before the next arrives, in the order of the space.
    assert seen == [(i + 1, c.dp, c.tp, c.pp, c.microbatches) for i, c in enumerate(cs)]
    assert len(res.rows) == len(cs)
    assert {r["status"] for r in res.rows} >= {"ok", "refused"}
    assert _strip(read_rows(remote)) == _strip(read_rows(local))


def test_resume_after_an_interrupted_ray_search(cluster, tmp_path) -> None:
    cs = _configs()
    full = str(tmp_path / "full.csv")
    run_search(W, cs, hardware=HW, out=full, workers=1, progress=None)
    part = str(tmp_path / "part.csv")
    seen: list[dict] = []

    def stop_after_five(row: dict) -> None:
        seen.append(row)
        if len(seen) == 5:
            raise KeyboardInterrupt

    # One worker: four configurations in flight at a time, so the window moves.
    with pytest.raises(KeyboardInterrupt):
        run_search(W, cs, hardware=HW, out=part, progress=None, on_row=stop_after_five,
                   executor=RayExecutor(workers=1))
    assert len(read_rows(part)) == 5
    res = run_search(W, cs, hardware=HW, out=part, resume=True, progress=None,
                     executor=RayExecutor(workers=1))
    assert res.skipped == 5 and len(res.rows) == len(cs) - 5
    assert _strip(read_rows(part)) == _strip(read_rows(full))


def test_cli_executor_ray_with_resume(cluster, tmp_path, capsys) -> None:
    out = tmp_path / "r.csv"
    args = ["grid-search", "--model", "mlp", "--num-layers", "4", "--width", "64",
            "--devices", "4", "--batch-sizes", "8", "--max-microbatches", "16",
            "--hardware", HW, "-o", str(out), "--plot", str(tmp_path / "r.png")]
    assert main([*args, "--executor", "local", "--workers", "1"]) == 0
    local = read_rows(str(out))
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:4]))  # the header and three rows survive
    capsys.readouterr()
    assert main([*args, "--executor", "ray", "--resume"]) == 0
    cap = capsys.readouterr()
    assert "on the Ray cluster this process is connected to" in cap.err
    assert "(3 kept from" in cap.out
    assert _strip(read_rows(str(out))) == _strip(local)
