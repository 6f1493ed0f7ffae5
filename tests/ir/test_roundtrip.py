"""Every IR file in the repository parses, verifies and prints back to itself.

Files under ``tests/`` (except in folders named ``bad`` or ``invalid``, kept for error
tests), ``examples/`` and, when it exists, the shared examples folder
(``/work/shared/examples``, or ``$DISTIR_SHARED_EXAMPLES``) are collected.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

import distir
from distir.ir import DenseAttr, DType, ScalarType, TensorType, TupleType
from distir.ir.parser import parse_module

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = Path(os.environ.get("DISTIR_SHARED_EXAMPLES", ROOT.parent / "shared" / "examples"))
_SKIP_DIRS = {"bad", "invalid"}


def _ir_files(shared: Path = SHARED) -> list[Path]:
    files = [p for p in sorted((ROOT / "tests").rglob("*.dir"))
             if not _SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    files += sorted((ROOT / "examples").glob("*.dir"))
    if shared.is_dir():
        files += sorted(shared.glob("*.dir"))
    return files


def _id(p: Path) -> str:
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return f"shared/{p.name}"


IR_FILES = _ir_files()


def _names(m: distir.Module) -> list[tuple[str, list[str | None]]]:
    out = []
    for f in m:
        vals = [p.name for p in f.params]
        for op in f.ops:
            vals += [v.name for v in op.outputs]
        vals += [v.name for v in f.returns]
        out.append((f.name, vals))
    return out


def test_fixtures_are_collected() -> None:
    names = {p.name for p in IR_FILES}
    assert {"quoted_names.dir", "literals.dir", "types.dir", "generic.dir"} <= names
    assert any(p.parent.name == "examples" for p in IR_FILES)


@pytest.mark.parametrize("path", IR_FILES, ids=_id)
def test_file_round_trips(path: Path) -> None:
    m = distir.load(path)  # parse + verify
    distir.verify(m)
    text = distir.dumps(m)
    m2 = distir.parse(text, filename="printed.dir")
    assert distir.dumps(m2) == text
    assert m2 == m and m == m2  # the documented contract: parse(dumps(m)) == m
    assert _names(m2) == _names(m)
    assert [f.name for f in m2] == [f.name for f in m]
    for f, f2 in zip(m, m2, strict=True):
        assert f.param_types == f2.param_types
        assert f.return_types == f2.return_types
        assert [(op.op_type, op.attrs_key) for op in f.ops] == [
            (op.op_type, op.attrs_key) for op in f2.ops]


@pytest.mark.parametrize("path", IR_FILES, ids=_id)
def test_printed_text_is_a_fixed_point_of_the_parser_alone(path: Path) -> None:
    text = distir.dumps(parse_module(path.read_text(encoding="utf-8"), str(path)))
    assert distir.dumps(parse_module(text)) == text


def test_shared_examples_are_optional(tmp_path: Path) -> None:
    files = _ir_files(tmp_path / "absent")
    assert files and set(files) == {p for p in IR_FILES if SHARED not in p.parents}


# -- what the fixtures hold --------------------------------------------------------------


def test_quoted_names_survive() -> None:
    m = distir.load(FIXTURES / "quoted_names.dir")
    assert list(m.functions) == ["conv block/0", "main"]
    conv = m["conv block/0"]
    assert [p.name for p in conv.params] == ["gpu_0/conv1_w_0", "gpu_0/data_0"]
    main = m["main"]
    assert [p.name for p in main.params] == ["input:0", 'w "quoted" \\ back']
    names = [op.outputs[0].name for op in main.ops]
    assert names == ["211", "h.3", "$tmp-1", "poids é/ü", "tab\there", "1"]
    text = distir.dumps(m)
    assert '%"gpu_0/conv1_w_0"' in text
    assert '%"w \\"quoted\\" \\\\ back"' in text
    assert "%h.3 = Identity(%211)" in text
    assert '%"tab\\there" = Neg(%"poids é/ü")' in text
    assert '@"conv block/0"' in text
    assert "%1 = Abs(" in text  # quoted only where needed


def _const(m: distir.Module, name: str) -> DenseAttr:
    for op in m.entry.ops:
        if op.outputs[0].name == name:
            return op.attrs["value"]
    raise KeyError(name)


def test_dense_literals() -> None:
    m = distir.load(FIXTURES / "literals.dir")
    cases = {
        "b": (DType.Bool, (3,), [True, False, True]),
        "i8": (DType.Int8, (3,), [-128, 0, 127]),
        "i32": (DType.Int32, (2, 2), [[1, -2], [3, -4]]),
        "i64": (DType.Int64, (2,), [1, -1]),
        "s": (DType.Int64, (), 7),
        "f16": (DType.Float16, (3,), [0.5, -1.25, 65504.0]),
        "bf16": (DType.BFloat16, (3,), [1.0, -2.5, 3.140625]),
        "f32": (DType.Float32, (2, 2), [[1.0, 2.0], [3.0, 4.0]]),
        "f64": (DType.Float64, (3,), [0.1, 1e-300, 1.7976931348623157e308]),
        "empty": (DType.Float32, (0,), []),
        "empty2": (DType.Int64, (2, 0), np.zeros((2, 0))),
        "cube": (DType.Int32, (2, 2, 2), np.arange(1, 9).reshape(2, 2, 2)),
    }
    for name, (dt, shape, data) in cases.items():
        d = _const(m, name)
        assert (d.dtype, d.shape) == (dt, shape), name
        np.testing.assert_array_equal(d.array.astype(np.float64), np.asarray(data, np.float64))
    neg0 = _const(m, "f32s").array
    assert neg0.shape == () and neg0 == 0 and math.copysign(1.0, float(neg0)) == -1.0
    sp = _const(m, "special").array
    assert sp[0] == np.inf and sp[1] == -np.inf and np.isnan(sp[2])
    assert sp[3] == np.float32(1e-05)
    attrs = {op.outputs[0].name: op.attrs for op in m.entry.ops}
    assert attrs["vf"]["value_floats"] == (1.5, -2.0, 1e-05, 3.0)
    assert attrs["vi"]["value_ints"] == (0, -2, 1, 9007199254740993)
    assert attrs["vs"]["value_strings"] == (
        "a", 'b "quoted"', "tab\there", "line\nbreak", "é", "")
    assert attrs["one"]["value_float"] == -2.5
    assert attrs["str"]["value_string"] == "back\\slash"
    assert attrs["c"]["to"] is DType.Float16
    assert attrs["t"]["perm"] == (1, 0)
    assert attrs["ln"] == {"axis": -1, "epsilon": 1e-05}
    assert attrs["f16"]["device"] == 1


def test_dense_literal_printing() -> None:
    text = distir.dumps(distir.load(FIXTURES / "literals.dir"))
    for s in ("dense<Int64, ()>[7]", "dense<Float32, (0,)>[]", "dense<Int64, (2, 0)>[]",
              "dense<Bool>[true, false, true]", "dense<Float32>[inf, -inf, nan, 1e-05]",
              "dense<Float32, ()>[-0.0]", "dense<Int32>[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]",
              "dense<BFloat16>[1.0, -2.5, 3.140625]", "to=Float16", "epsilon=1e-05",
              'value_strings=["a", "b \\"quoted\\"", "tab\\there", "line\\nbreak", "é", ""]'):
        assert s in text, s


def test_types() -> None:
    m = distir.load(FIXTURES / "types.dir")
    f32 = TensorType(DType.Float32, (4,), 0)
    pair = TupleType((f32, ScalarType(DType.Int64, 0)))
    main = m["main"]
    assert main.param_types == (
        f32, ScalarType(DType.Float32, 0), pair, TupleType(()),
        TensorType(DType.Int64, (), 1), TensorType(DType.BFloat16, (2, 3, 4, 5), 7),
        ScalarType(DType.Bool, 3))
    assert main.return_types == (f32, ScalarType(DType.Float32, 0),
                                 TensorType(DType.Int64, (), 1))
    assert m["nothing"].return_types == () and m["nothing"].returns == ()
    assert m["pair"].return_types == (pair, TensorType(DType.Int64, (), 1))
    assert main.ops[0].outputs[0].type == f32
    assert main.ops[1].outputs[0].type is None
    text = distir.dumps(m)
    assert "func @nothing() -> () {\n  return\n}" in text
    assert "%e: Tuple[]" in text and "%b: Bool[3]" in text and "Tensor[Int64, (), 1]" in text


def test_generic_functions_discards_and_omitted_inputs() -> None:
    m = distir.load(FIXTURES / "generic.dir")
    assert m.entry is m["main"]
    assert not m["layer"].is_typed and m["main"].is_typed
    ops = m["main"].ops
    assert [v.name for v in ops[0].outputs] == ["a", "_"]
    assert [v.name for v in ops[1].outputs] == ["_", "h"]
    assert ops[0].callee is m["layer"]
    clip = m["clip"].ops[0]
    assert clip.op_type == "Clip" and clip.inputs[1] is None
    text = distir.dumps(m)
    assert "%a, _ = call @layer(%w1, %x, %b1)" in text
    assert "%y = Clip(%x, _, %hi)" in text
    assert "//" not in text  # comments are not kept


def test_empty_module() -> None:
    m = distir.load(FIXTURES / "empty_module.dir")
    assert len(m) == 0
    assert distir.parse(distir.dumps(m)).functions == {}


def test_entry_is_last_function_without_main() -> None:
    m = distir.parse("func @a(%x) {\n  return %x\n}\n\nfunc @b(%x) {\n  return %x\n}\n")
    assert m.entry is m["b"]


def test_printer_uniquifies_names_of_built_functions() -> None:
    b = distir.FunctionBuilder("f")
    x = b.param("x")
    h1 = b.op("Relu", x, name="h")
    h2 = b.op("Relu", h1, name="h")
    anon = b.op("Neg", h2)
    text = distir.dumps(b.ret(anon, h1))
    assert "%h = Relu(%x)" in text and "%h.1 = Relu(%h)" in text and "%0 = Neg(%h.1)" in text
    assert distir.dumps(distir.parse(text)) == text
