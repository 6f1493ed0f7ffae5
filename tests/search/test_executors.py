"""Executors without a Ray cluster: choosing one, and the one-line errors of bad options."""

from __future__ import annotations

import sys

import pytest

from distir.cli import main
from distir.errors import ConfigError
from grid_search import LocalExecutor, enumerate_space, run_search, workload
from grid_search.executors import _check_reachable, make_executor

W = workload("mlp", num_layers=2, width=32)
ARGS = ["grid-search", "--model", "mlp", "--num-layers", "2", "--width", "32", "--devices",
        "2", "--batch-sizes", "8", "--hardware", "h200-sxm"]


def test_make_executor_follows_the_command_line() -> None:
    assert isinstance(make_executor("local"), LocalExecutor)
    assert make_executor("local", workers=3).workers == 3
    with pytest.raises(ConfigError, match="--address names a Ray cluster"):
        make_executor("local", address="auto")
    with pytest.raises(ConfigError, match="--workers 0"):
        make_executor("ray", workers=0)


def test_missing_ray_is_one_line_naming_the_extra(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    out = tmp_path / "r.csv"
    assert main([*ARGS, "-o", str(out), "--executor", "ray"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("error: --executor ray needs Ray, which is not installed: "
                       "pip install 'distir[ray]'")
    assert not out.exists()


def test_an_address_nothing_listens_on_fails_at_once() -> None:
    with pytest.raises(ConfigError, match=r"--address 127.0.0.1:1: no Ray cluster answers"):
        _check_reachable("127.0.0.1:1", "--address 127.0.0.1:1")
    _check_reachable("auto", "--address auto")  # not HOST:PORT: left to Ray
    _check_reachable("ray://10.0.0.1:10001", "--address ray://10.0.0.1:10001")


def test_an_unknown_profile_fails_before_the_csv_is_touched(tmp_path) -> None:
    out = tmp_path / "r.csv"
    out.write_text("kept\n")
    cs = list(enumerate_space(W.name, 2, [8]))
    with pytest.raises(ConfigError, match="no-such-gpu"):
        run_search(W, cs, hardware="no-such-gpu", out=str(out), progress=None)
    assert out.read_text() == "kept\n"


def test_a_ray_cluster_that_does_not_answer_leaves_the_csv_alone(tmp_path) -> None:
    import ray  # noqa: F401 - installed by scripts/setup.sh (the ray extra)

    from grid_search import RayExecutor

    out = tmp_path / "r.csv"
    out.write_text("kept\n")
    cs = list(enumerate_space(W.name, 2, [8]))
    with pytest.raises(ConfigError, match="--address 127.0.0.1:1: no Ray cluster answers"):
        run_search(W, cs, hardware="h200-sxm", out=str(out), progress=None,
                   executor=RayExecutor(address="127.0.0.1:1"))
    assert out.read_text() == "kept\n"


def test_without_address_ray_starts_locally_unless_ray_address_is_set(monkeypatch) -> None:
    import ray  # noqa: F401 - installed by scripts/setup.sh (the ray extra)

    from grid_search import RayExecutor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert RayExecutor().describe() == "on a new local Ray instance"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    ex = RayExecutor(workers=3)
    assert ex.describe() == "on the Ray cluster at $RAY_ADDRESS (127.0.0.1:1), at most 3 at once"
    cs = list(enumerate_space(W.name, 2, [8]))
    with pytest.raises(ConfigError, match=r"\$RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers"):
        run_search(W, cs, hardware="h200-sxm", progress=None, executor=ex)
