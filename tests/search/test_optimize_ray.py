"""``distir optimize --executor ray``: the meshes searched as Ray tasks give the plans of the
local loop (one local Ray instance, 2 CPUs, for the module; skipped when Ray cannot start
here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import ray

import distir
from distir.cli import main
from distir.transforms.spmd import optimize
from grid_search.executors import ray_runtime_env
from grid_search.optimize import RayMeshes


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 logging_level="WARNING", log_to_driver=False,
                 runtime_env=ray_runtime_env())
    except Exception as e:  # noqa: BLE001 - no Ray here (sandbox, no shared memory)
        pytest.skip(f"ray.init failed: {e}")
    try:
        yield ray
    finally:
        ray.shutdown()


def _key(r: Any) -> list[tuple]:
    return [(str(c.assignment.mesh), c.origin, c.simulated_s, repr(c.estimate_s),
             c.assignment.params, c.assignment.reads, distir.dumps(c.program))
            for c in r.candidates]


def test_ray_gives_the_plans_of_the_local_loop(cluster: Any) -> None:
    fn = distir.models.mlp(batch_size=128, input_dim=128, hidden_dim=128, output_dim=128,
                           num_layers=2)
    local = optimize(fn, 4, beam=8, max_states=200, top_k=2)
    remote = optimize(fn, 4, beam=8, max_states=200, top_k=2, executor=RayMeshes())
    assert _key(remote) == _key(local)
    assert [m["mesh"] for m in remote.stats["meshes"]] == ["4", "2x2"]
    assert remote.stats["meshes"] == local.stats["meshes"]
    assert distir.dumps(remote.program) == distir.dumps(local.program)
    assert ray.is_initialized()  # a connection it did not open is left open


def test_cli_executor_ray(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["optimize", "--model", "mlp", "--num-layers", "2", "--width", "128",
            "--batch-size", "128", "--devices", "2", "--beam", "8", "--top-k", "2"]
    assert main(argv) == 0
    local = capsys.readouterr().out
    assert main(argv + ["--executor", "ray"]) == 0
    remote = capsys.readouterr().out
    # the same table, but for the search's wall time
    assert local.splitlines()[2:] == remote.splitlines()[2:]
    assert local.splitlines()[0] == remote.splitlines()[0]
