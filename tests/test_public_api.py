"""The public surface: every name in ``distir.__all__`` resolves, and ``import distir`` stays
light (no torch, onnx, pandas or sklearn)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import distir

HEAVY = ("torch", "onnx", "pandas", "sklearn")


def test_all_is_sorted_out() -> None:
    assert len(distir.__all__) == len(set(distir.__all__))
    for name in ("DistIRError", "Module", "Function", "parse", "load", "dumps", "verify"):
        assert name in distir.__all__


@pytest.mark.parametrize("name", distir.__all__)
def test_public_name_resolves(name: str) -> None:
    assert getattr(distir, name) is not None
    assert name in dir(distir)


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        distir.no_such_name  # noqa: B018


def test_errors_are_distir_errors() -> None:
    from distir import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, Exception):
            assert issubclass(cls, distir.DistIRError), name


def test_import_distir_is_light() -> None:
    code = ("import sys, json, distir\n"
            "m = distir.parse('func @main(%x) {\\n  %y = Relu(%x)\\n  return %y\\n}\\n')\n"
            "distir.dumps(m)\n"
            f"print(json.dumps(sorted(h for h in {HEAVY!r} if h in sys.modules)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []


SUBPACKAGES = ("analysis", "backend", "importers", "ir", "models", "transforms", "errors")


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_subpackage_reachable_after_import_distir(name: str) -> None:
    """In a fresh interpreter, ``import distir`` alone makes each subpackage an attribute
    (loaded on first use), and loads none of the heavy libraries until then."""
    code = ("import sys, json, types, distir\n"
            f"heavy = sorted(h for h in {HEAVY!r} if h in sys.modules)\n"
            f"mod = getattr(distir, {name!r})\n"
            "assert isinstance(mod, types.ModuleType), type(mod)\n"
            f"assert mod.__name__ == 'distir.' + {name!r}, mod.__name__\n"
            "print(json.dumps(heavy))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
