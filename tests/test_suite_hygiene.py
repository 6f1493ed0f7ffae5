"""The test suite itself: a broken import fails instead of skipping, and no test reads an
absolute path outside the repository (CI runs a fresh clone in another folder)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = sorted((ROOT / "tests").rglob("*.py"))

# Everything scripts/setup.sh installs (pyproject.toml's dependencies and the extras it names):
# never optional in a test.
HARD = ("torch", "onnx", "onnxruntime", "onnxscript", "numpy", "lark", "pandas", "sklearn",
        "hypothesis", "ml_dtypes", "matplotlib", "distir", "calibration", "grid_search")


def _hard_dependencies() -> set[str]:
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    m = re.search(r"-e '\.\[([\w,]+)\]'", setup)  # the extras the test setup installs
    extras = m.group(1).split(",") if m else []
    reqs = list(meta["dependencies"]) + [
        r for e in extras for r in meta["optional-dependencies"][e]]
    names = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].strip().lower() for r in reqs}
    mods = {"scikit-learn": "sklearn", "ml-dtypes": "ml_dtypes"}
    return {mods.get(n, n.replace("-", "_")) for n in names} | {
        "distir", "calibration", "grid_search"}


def test_hard_list_covers_the_declared_dependencies() -> None:
    assert set(HARD) <= _hard_dependencies() | {"numpy"}
    assert "ray" in _hard_dependencies()  # the executor tests run in CI


@pytest.mark.parametrize("path", TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_skip_on_a_hard_dependency(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    hard = _hard_dependencies()
    for m in re.finditer(r'importorskip\(\s*["\']([\w.]+)["\']', text):
        assert m.group(1).split(".")[0] not in hard, (
            f"{path.name}: importorskip({m.group(1)!r}) hides a broken install of a "
            "dependency: import it")
    assert not re.search(r'skip\([^)]*not available yet', text), path.name


@pytest.mark.parametrize("path", TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_absolute_path_to_shared(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    code = "\n".join(line for line in text.splitlines()
                     if not line.lstrip().startswith("#"))
    assert not re.search(r'["\']/work/', code), (
        f"{path.name}: an absolute path; find shared/ beside the repository (or from an "
        "environment variable) instead")
