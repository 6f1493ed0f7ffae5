"""Installing distir next to a machine's own PyTorch keeps that PyTorch.

pyproject.toml asks for a range of torch, which the GPU machines' CUDA builds (torch 2.11)
satisfy; the CPU pin of the project's own machines lives only in scripts/setup.sh's
constraints file.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> dict[str, Requirement]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in meta["dependencies"]]
    return {r.name: r for r in reqs}


def test_torch_is_a_range_that_cuda_builds_satisfy() -> None:
    torch = _requirements()["torch"]
    for v in ("2.4.0", "2.11.0", "2.11.0+cu128", "2.13.0", "2.13.0+cpu"):
        assert torch.specifier.contains(Version(v), prereleases=False), v
    assert not any(s.operator in ("==", "===", "~=") for s in torch.specifier)


def test_no_dependency_is_pinned() -> None:
    for name, r in _requirements().items():
        assert not any(s.operator in ("==", "===") for s in r.specifier), name


def test_setup_pins_the_cpu_build_by_constraints() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert "-c scripts/constraints-cpu.txt" in setup
    pins = [line.strip() for line in
            (ROOT / "scripts" / "constraints-cpu.txt").read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    assert "torch==2.13.0" in pins


def test_plain_install_does_not_touch_the_installed_torch() -> None:
    """``pip install -e .`` where torch is already installed installs distir alone (checked
    offline, with --no-index: nothing needs fetching)."""
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                        "--no-build-isolation", "--disable-pip-version-check", "-e", str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    would = [line for line in r.stdout.splitlines() if line.startswith("Would install")]
    assert would and would[0].split()[2:] == [would[0].split()[2]], would
    assert "torch" not in would[0], would
