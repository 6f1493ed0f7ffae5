"""``distir check`` and ``distir fmt``: exit 0 on good files; on bad input, exit 1 with one
line on standard error and no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import distir
from distir.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "ir" / "fixtures"
SHARED = Path(os.environ.get("DISTIR_SHARED_EXAMPLES", ROOT.parent / "shared" / "examples"))

# Files that are well typed as well as well formed (`check` infers types).
GOOD = sorted((ROOT / "examples").glob("*.dir")) + [
    FIXTURES / "generic.dir", FIXTURES / "quoted_names.dir", FIXTURES / "types.dir"]
if SHARED.is_dir():
    GOOD += sorted(SHARED.glob("*.dir"))
# Well formed, whatever their types: `fmt` only parses and verifies.
FORMATTABLE = GOOD + [FIXTURES / "literals.dir", FIXTURES / "empty_module.dir"]


def _id(p: Path) -> str:
    return p.name


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DISTIR_TRACEBACK"}
    return subprocess.run([sys.executable, "-m", "distir", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


BAD = {
    "syntax.dir": ("func @main(%x) {\n  %y = Relu(%x\n  return %y\n}\n",
                   r"syntax\.dir:3:3: error: expected '\)' or ',', found 'return'"),
    "schema.dir": ("func @main(%x) {\n  %y = Rleu(%x)\n  return %y\n}\n",
                   r"schema\.dir:2:8: error: unknown op 'Rleu'; did you mean Relu\?"),
    "ssa.dir": ("func @main(%x) {\n  %y = Relu(%z)\n  return %y\n}\n",
                r"ssa\.dir:2:13: error: %z is not defined: .*"),
    "unterminated.dir": ("func @main(%x) {\n  return %x\n",
                         r"unterminated\.dir:3:1: error: unexpected end of file: .*"),
    "escape.dir": ('func @main(%"a\\q") {\n  return %"a\\q"\n}\n',
                   r"escape\.dir:1:12: error: bad escape in .*"),
}


@pytest.mark.parametrize("path", GOOD, ids=_id)
def test_check_accepts_good_files(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""


@pytest.mark.parametrize("path", FORMATTABLE, ids=_id)
def test_fmt_prints_the_canonical_form(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fmt", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == distir.dumps(distir.load(path))
    assert distir.dumps(distir.parse(out)) == out


def test_fmt_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "g.dir"
    p.write_text((FIXTURES / "generic.dir").read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["fmt", "-i", str(p)]) == 0
    assert capsys.readouterr() == ("", "")
    text = p.read_text(encoding="utf-8")
    assert "//" not in text  # comments are not kept
    assert text == distir.dumps(distir.load(FIXTURES / "generic.dir"))


def test_check_types_prints_every_result_typed(capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "examples" / "mlp_step.dir"
    assert main(["check", "--types", str(path)]) == 0
    out = capsys.readouterr().out
    m = distir.parse(out)
    for op in m.entry.ops:
        assert all(v.type is not None for v in op.outputs if v.name != "_"), op


@pytest.mark.parametrize("cmd", ["check", "fmt"])
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_gives_one_line(cmd: str, name: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    text, pattern = BAD[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # the message names the file as given
    assert main([cmd, name]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert re.fullmatch(pattern, err.rstrip("\n")), err


def test_check_reports_a_type_error_in_one_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "t.dir"
    p.write_text("func @main(%a: Tensor[Float32, (2, 3), 0], %b: Tensor[Float32, (4, 5), 0]) {\n"
                 "  %c = MatMul(%a, %b)\n  return %c\n}\n", encoding="utf-8")
    assert main(["check", str(p)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"{p}:2:8: error: ")


@pytest.mark.parametrize("args,pattern", [
    (["check", "no/such/file.dir"], r"error: no/such/file\.dir: no such file"),
    (["fmt", "."], r"error: \.: is a directory, not a \.dir file"),
])
def test_unreadable_files(args: list[str], pattern: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and re.fullmatch(pattern, err.strip()), err


# -- the real command, in a subprocess -------------------------------------------------------


def test_command_check_and_fmt_succeed() -> None:
    r = _cli("check", "examples/mlp_step.dir")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = _cli("fmt", str(FIXTURES / "quoted_names.dir"))
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == distir.dumps(distir.load(FIXTURES / "quoted_names.dir"))


@pytest.mark.parametrize("cmd", ["check", "fmt"])
def test_command_bad_input(cmd: str, tmp_path: Path) -> None:
    (tmp_path / "bad.dir").write_text("func @main(%x) {\n  %y = Relu(MatMul(%x, %x))\n"
                                      "  return %y\n}\n", encoding="utf-8")
    (tmp_path / "bin.dir").write_bytes(b"\xff\xfe\x00func")
    for name, msg in [("bad.dir", "bad.dir:2:19: error: nested expressions are not allowed"),
                      ("bin.dir", "error: bin.dir: not a text file (byte 0 is not UTF-8)"),
                      ("missing.dir", "error: missing.dir: no such file")]:
        r = _cli(cmd, name, cwd=tmp_path)
        assert r.returncode == 1, r
        assert r.stdout == ""
        assert "Traceback" not in r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith(msg), r.stderr
