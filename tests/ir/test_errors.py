"""Malformed programs: each gives one ``DistIRError`` whose one-line message names the file,
line and column, says what was expected, and gives the remedy where there is one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import distir
from distir.errors import DistIRError, Loc, ParseError, VerifyError


@dataclass(frozen=True)
class Bad:
    id: str
    src: str
    line: int
    col: int
    msg: str  # a regex for the text after "error: "
    kind: type[DistIRError] = ParseError
    num_devices: int | None = None


def fn(body: str, params: str = "%x") -> str:
    """``func @main(params) { body }`` with the body starting on line 2."""
    return f"func @main({params}) {{\n{body}}}\n"


F_THEN_MAIN = "func @f(%x) {\n  return %x\n}\n\n"  # @main's body starts on line 6

CASES = [
    # -- lexing and syntax --------------------------------------------------------------
    Bad("syntax_missing_paren", fn("  %y = Relu(%x\n  return %y\n"), 3, 3,
        r"expected '\)' or ',', found 'return'"),
    Bad("syntax_trailing_comma", fn("  %y = Relu(%x, )\n  return %y\n"), 2, 17,
        r"expected '_', a name or a value like %x, found '\)'"),
    Bad("syntax_missing_equals", fn("  %y Relu(%x)\n  return %y\n"), 2, 6,
        r"expected ',', ':' or '=', found 'Relu'"),
    Bad("statement_without_percent", fn("  y = Relu(%x)\n  return %y\n"), 2, 3,
        r"expected a statement \(`%name = Op\(\.\.\.\)` or `return`\), found 'y': "
        r"value names start with %"),
    Bad("text_outside_function", "hello\n", 1, 1,
        r"expected 'func' or the end of the file, found 'hello'"),
    Bad("function_name_without_at", "func main(%x) {\n  return %x\n}\n", 1, 6,
        r"expected a function name like @f, found 'main'"),
    Bad("extra_closing_brace", fn("  return %x\n") + "}\n", 4, 1,
        r"expected 'func' or the end of the file, found '\}'"),
    Bad("unterminated_function", "func @main(%x) {\n  %y = Relu(%x)\n  return %y\n", 4, 1,
        r"unexpected end of file: a function is missing its closing '\}'"),
    Bad("bad_character", fn("  %y = Relu(%x) # note\n  return %y\n"), 2, 17,
        r"unexpected character '#'"),
    Bad("bad_character_semicolon", fn("  %y = Relu(%x);\n  return %y\n"), 2, 16,
        r"unexpected character ';'"),
    Bad("bad_character_after_tabs", fn("  %y =\t\tRelu(%x)  \t#\n  return %y\n"), 2, 20,
        r"unexpected character '#'"),
    Bad("stray_slash", fn("  %y = Relu(%x) / note\n  return %y\n"), 2, 17,
        r"unexpected character '/': a comment starts with //"),
    Bad("columns_count_spaces", fn("  %y   =   Rleu(%x)\r\n  return %y\n"), 2, 12,
        r"unknown op 'Rleu'; did you mean Relu\?", VerifyError),
    Bad("lone_percent", fn("  %y = Relu(% x)\n  return %y\n"), 2, 13,
        r"unexpected character '%': a value name is %name with letters, digits, _ \. \$ -, "
        r"or %\"quoted\""),
    Bad("unterminated_string", fn('  %y = Gelu(%x, approximate="tanh)\n  return %y\n'), 2, 29,
        r"unexpected character '\"': unterminated string \(a string ends with \" on the "
        r"same line\)"),
    Bad("bad_string_escape", fn('  %y = Gelu(%x, approximate="t\\qh")\n  return %y\n'), 2, 29,
        r"bad escape in \"t\\qh\": Invalid \\escape \(strings use JSON escapes: .*\)"),
    Bad("bad_name_escape", 'func @main(%"a\\q") {\n  return %"a\\q"\n}\n', 1, 12,
        r"bad escape in %\"a\\q\": Invalid \\escape .*"),
    Bad("nested_expression", fn("  %y = Relu(MatMul(%x, %w))\n  return %y\n", "%x, %w"), 2, 19,
        r"nested expressions are not allowed: give the inner op its own statement "
        r"\(`%t = Op\(\.\.\.\)`\) and pass %t \(one op per line\)"),
    Bad("argument_after_attribute", fn("  %y = Gemm(%x, alpha=1.0, %w)\n  return %y\n",
                                       "%x, %w"), 2, 28,
        r"arguments come before attributes: move this value before the first `key=value`"),
    Bad("duplicate_attribute", fn("  %y = Gemm(%x, %w, alpha=1.0, alpha=2.0)\n  return %y\n",
                                  "%x, %w"), 2, 32,
        r"attribute 'alpha' is given twice"),
    Bad("lowercase_op", fn("  %y = relu(%x)\n  return %y\n"), 2, 8,
        r"'relu' is not an op name: op names start with a capital letter "
        r"\(call a function with `call @name\(\.\.\.\)`\)"),
    # -- types -------------------------------------------------------------------------
    Bad("bad_dtype", fn("  return %x\n", "%x: Tensor[Float33, (2,), 0]"), 1, 23,
        r"expected a dtype \(Float32, Int64, \.\.\.\), found 'Float33'"),
    Bad("one_element_shape_without_comma", fn("  return %x\n", "%x: Tensor[Float32, (2), 0]"),
        1, 34, r"expected ',', found '\)': a one-element shape is written with a trailing "
        r"comma, as in \(4,\)"),
    Bad("type_missing_device", fn("  return %x\n", "%x: Tensor[Float32, (2,)]"), 1, 36,
        r"expected ',', found '\]'"),
    Bad("negative_device_in_type", fn("  return %x\n", "%x: Tensor[Float32, (2,), -1]"), 1, 38,
        r"device -1 is out of range: devices are integers from 0"),
    Bad("negative_device_in_scalar_type", fn("  return %x\n", "%x: Int64[-2]"), 1, 22,
        r"device -2 is out of range: devices are integers from 0"),
    Bad("negative_dimension", fn("  return %x\n", "%x: Tensor[Float32, (2, -3), 0]"), 1, 36,
        r"dimension -3 is negative: dimensions are integers from 0"),
    # -- names and SSA -------------------------------------------------------------------
    Bad("use_before_definition", fn("  %y = Relu(%z)\n  %z = Relu(%x)\n  return %y\n"), 2, 13,
        r"%z is used before it is defined: move its definition above this use"),
    Bad("undefined_value", fn("  %y = Relu(%q)\n  return %y\n"), 2, 13,
        r"%q is not defined: define it above, or make it a parameter of the function"),
    Bad("undefined_return", fn("  %y = Relu(%x)\n  return %q\n"), 3, 10,
        r"%q is not defined: define it above, or make it a parameter of the function"),
    Bad("redefinition", fn("  %y = Relu(%x)\n  %y = Neg(%x)\n  return %y\n"), 3, 3,
        r"%y is already defined \(first defined at 2:3\): every value is defined exactly "
        r"once; give this one a new name"),
    Bad("redefined_parameter", fn("  return %x\n", "%x, %x"), 1, 16,
        r"%x is already defined \(first defined at 1:12\): .*"),
    Bad("parameter_redefined_by_result", fn("  %x = Relu(%x)\n  return %x\n"), 2, 3,
        r"%x is already defined \(first defined at 1:12\): .*"),
    Bad("quoted_underscore_name", fn('  %"_" = Relu(%x)\n  return %x\n'), 2, 3,
        r"%\"_\" cannot name a value: a name is not empty, and `_` \(unquoted, without %\) "
        r"discards a result"),
    Bad("empty_name", fn("  return %x\n", '%""'), 1, 12, r'%"" cannot name a value: .*'),
    # -- function structure ----------------------------------------------------------------
    Bad("missing_return", fn("  %y = Relu(%x)\n"), 3, 1,
        r"@main has no return: end the function with `return \.\.\.`"),
    Bad("statement_after_return", fn("  %y = Relu(%x)\n  return %y\n  %z = Relu(%y)\n"), 4, 3,
        r"statement after return: `return` must be the last statement of @main"),
    Bad("second_return", fn("  return %x\n  return %x\n"), 3, 3,
        r"statement after return: `return` must be the last statement of @main"),
    Bad("duplicate_function", F_THEN_MAIN + "func @f(%x) {\n  return %x\n}\n", 5, 6,
        r"function @f is already defined \(at 1:6\); give this one another name"),
    Bad("call_unknown_function", fn("  %y = call @nope(%x)\n  return %y\n"), 2, 13,
        r"call to unknown function @nope: define `func @nope\(\.\.\.\)` in this file"),
    Bad("direct_recursion", fn("  %y = call @main(%x)\n  return %y\n"), 2, 8,
        r"recursive call \(@main -> @main\): DistIR functions are straight lines and may "
        r"not call themselves", VerifyError),
    Bad("mutual_recursion",
        "func @f(%x) {\n  %y = call @g(%x)\n  return %y\n}\n\n"
        "func @g(%x) {\n  %y = call @f(%x)\n  return %y\n}\n", 7, 8,
        r"recursive call \(@f -> @g -> @f\): DistIR functions are straight lines and may "
        r"not call themselves", VerifyError),
    Bad("return_type_count", "func @main(%x) -> (Int64[0], Int64[0]) {\n  return %x\n}\n", 1, 6,
        r"@main declares 2 result types but returns 1 value", VerifyError),
    # -- op schemas --------------------------------------------------------------------------
    Bad("unknown_op_did_you_mean", fn("  %y = Rleu(%x)\n  return %y\n"), 2, 8,
        r"unknown op 'Rleu'; did you mean Relu\?", VerifyError),
    Bad("unknown_op_wrong_case", fn("  %y = Matmul(%x, %x)\n  return %y\n"), 2, 8,
        r"unknown op 'Matmul'; did you mean MatMul\?", VerifyError),
    Bad("unknown_op_no_suggestion", fn("  %y = Zzzqqq(%x)\n  return %y\n"), 2, 8,
        r"unknown op 'Zzzqqq' \(see `distir ops` for the op set\)", VerifyError),
    Bad("wrong_arity", fn("  %y = MatMul(%x)\n  return %y\n"), 2, 8,
        r"MatMul takes 2 inputs, 1 given", VerifyError),
    Bad("wrong_arity_range", fn("  %y = Gemm(%x)\n  return %y\n"), 2, 8,
        r"Gemm takes 2 to 3 inputs, 1 given", VerifyError),
    Bad("wrong_arity_too_many", fn("  %y = Relu(%x, %x)\n  return %y\n"), 2, 8,
        r"Relu takes 1 input, 2 given", VerifyError),
    Bad("required_input_omitted", fn("  %y = MatMul(_, %x)\n  return %y\n"), 2, 8,
        r"input 0 \(A\) of MatMul is required; `_` is only for optional inputs", VerifyError),
    Bad("unknown_attribute", fn("  %y = Relu(%x, alpha=1.0)\n  return %y\n"), 2, 8,
        r"unknown attribute 'alpha' for Relu \(it takes: none\)", VerifyError),
    Bad("unknown_attribute_lists_known", fn("  %y = Softmax(%x, axes=1)\n  return %y\n"), 2, 8,
        r"unknown attribute 'axes' for Softmax \(it takes: axis\)", VerifyError),
    Bad("missing_required_attribute", fn("  %y = Cast(%x)\n  return %y\n"), 2, 8,
        r"Cast needs attribute to \(a dtype \(Float32, Int64, \.\.\.\)\)", VerifyError),
    Bad("send_without_destination", fn("  %y = Send(%x)\n  return %y\n"), 2, 8,
        r"Send takes its destination once: device=D, or a second input whose device is "
        r"the destination", VerifyError),
    Bad("send_two_destinations", fn("  %y = Send(%x, %x, device=1)\n  return %y\n"), 2, 8,
        r"Send takes its destination once: .*", VerifyError),
    Bad("wrong_attribute_kind_device", fn('  %y = Send(%x, device="1")\n  return %y\n'), 2, 8,
        r"attribute device of Send must be a device number", VerifyError),
    Bad("wrong_attribute_kind_float", fn('  %y = SGDOptimizer(%x, %x, lr="fast")\n'
                                         "  return %y\n"), 2, 8,
        r"attribute lr of SGDOptimizer must be a number", VerifyError),
    Bad("wrong_attribute_kind_dtype", fn("  %y = Cast(%x, to=1)\n  return %y\n"), 2, 8,
        r"attribute to of Cast must be a dtype \(Float32, Int64, \.\.\.\)", VerifyError),
    Bad("wrong_attribute_kind_ints", fn("  %y = Transpose(%x, perm=[1.0, 0])\n  return %y\n"),
        2, 8, r"attribute perm of Transpose must be a list of integers", VerifyError),
    Bad("wrong_attribute_kind_tensor", fn("  %y = Constant(value=[1, 2])\n  return %y\n", ""),
        2, 8, r"attribute value of Constant must be a dense tensor literal "
        r"\(dense<Float32>\[\.\.\.\]\)", VerifyError),
    Bad("negative_device_attribute", fn("  %y = Send(%x, device=-1)\n  return %y\n"), 2, 8,
        r"device -1 in attribute device is out of range \(devices are integers from 0\)",
        VerifyError),
    Bad("device_attribute_out_of_range", fn("  %y = Send(%x, device=4)\n  return %y\n"), 2, 8,
        r"device 4 in attribute device is out of range \(devices are 0\.\.1\)", VerifyError,
        num_devices=2),
    Bad("devices_attribute_out_of_range",
        fn("  %a, %b = MPIBroadcast(%x, devices=[0, 3])\n  return %a\n"), 2, 12,
        r"device 3 in attribute devices is out of range \(devices are 0\.\.2\)", VerifyError,
        num_devices=3),
    Bad("device_in_type_out_of_range", fn("  return %x\n", "%x: Tensor[Float32, (2,), 5]"),
        1, 12, r"device 5 in the type of %x is out of range \(devices are 0\.\.1\)",
        VerifyError, num_devices=2),
    Bad("device_listed_twice", fn("  %a, %b = MPIBroadcast(%x, devices=[0, 0])\n  return %a\n"),
        2, 12, r"attribute devices of MPIBroadcast lists a device twice", VerifyError),
    Bad("wrong_result_count_op", fn("  %y, %z = Relu(%x)\n  return %y\n"), 2, 12,
        r"Relu here gives 1 result, 2 named", VerifyError),
    Bad("wrong_result_count_split", fn("  %a, %b = Split(%x, num_outputs=3)\n  return %a\n"),
        2, 12, r"Split here gives 3 results, 2 named", VerifyError),
    Bad("wrong_result_count_collective",
        fn("  %a = MPIAllreduce(%x, %w)\n  return %a\n", "%x, %w"), 2, 8,
        r"MPIAllreduce here gives 2 results, 1 named", VerifyError),
    Bad("wrong_result_count_call", F_THEN_MAIN + fn("  %a, %b = call @f(%x)\n  return %a\n"),
        6, 12, r"@f returns 1 value, 2 results named", VerifyError),
    Bad("wrong_argument_count_call", F_THEN_MAIN + fn("  %a = call @f(%x, %x)\n  return %a\n"),
        6, 8, r"@f takes 1 argument, 2 given", VerifyError),
    Bad("call_with_omitted_argument", F_THEN_MAIN + fn("  %a = call @f(_)\n  return %a\n"),
        6, 8, r"a call to @f cannot omit an argument with `_`", VerifyError),
    # -- dense literals ------------------------------------------------------------------------
    Bad("dense_size_mismatch",
        fn("  %c = Constant(value=dense<Int64, (2, 2)>[1, 2, 3])\n  return %c\n", ""), 2, 23,
        r"dense literal has 3 values but shape \(2, 2\) needs 4"),
    Bad("dense_ragged", fn("  %c = Constant(value=dense<Int64>[[1, 2], [3]])\n  return %c\n", ""),
        2, 23, r"dense<Int64> literal is not a rectangular list of numbers that fit the dtype"),
    Bad("dense_overflow", fn("  %c = Constant(value=dense<Int8>[1000])\n  return %c\n", ""),
        2, 23, r"dense<Int8> literal is not a rectangular list of numbers that fit the dtype"),
    Bad("dense_float_in_int", fn("  %c = Constant(value=dense<Int32>[1, 2.5])\n  return %c\n", ""),
        2, 23, r"dense<Int32> literal holds a number with a fraction or exponent: write "
        r"integers, or use a float dtype"),
    Bad("dense_string", fn('  %c = Constant(value=dense<Float32>["a"])\n  return %c\n', ""),
        2, 23, r"dense<Float32> literal is not a rectangular list of numbers that fit the dtype"),
]


def test_enough_distinct_cases() -> None:
    assert len({c.id for c in CASES}) == len(CASES) >= 20
    assert len({c.src for c in CASES}) == len(CASES)


def _raise(case: Bad, filename: str = "bad.dir") -> DistIRError:
    with pytest.raises(DistIRError) as info:
        m = distir.parse(case.src, filename=filename)
        distir.verify(m, num_devices=case.num_devices)
    return info.value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_error_message_and_location(case: Bad) -> None:
    e = _raise(case)
    text = str(e)
    assert "\n" not in text
    assert re.fullmatch(rf"bad\.dir:{case.line}:{case.col}: error: {case.msg}", text), text
    assert e.loc == Loc("bad.dir", case.line, case.col)
    assert isinstance(e, case.kind), type(e)


@pytest.mark.parametrize("case", [c for c in CASES if c.num_devices is None],
                         ids=lambda c: c.id)
def test_load_names_the_file(case: Bad, tmp_path: Path) -> None:
    path = tmp_path / "prog.dir"
    path.write_text(case.src, encoding="utf-8")
    with pytest.raises(DistIRError) as info:
        distir.load(path)
    assert str(info.value).startswith(f"{path}:{case.line}:{case.col}: error: ")


def test_device_bound_is_only_checked_when_given() -> None:
    m = distir.parse(fn("  %y = Send(%x, device=4)\n  return %y\n"))
    distir.verify(m)
    distir.verify(m, num_devices=5)
    with pytest.raises(VerifyError):
        distir.verify(m, num_devices=4)


def test_errors_without_a_place_still_give_one_line() -> None:
    b = distir.FunctionBuilder("g")
    x = b.param("x")
    y = b.op("Relu", x, name="y")
    b.ops[0].attrs = {"alpha": 1.0}
    with pytest.raises(VerifyError) as info:
        distir.verify(b.ret(y))
    assert str(info.value) == ("error: in @g, `%y = Relu(%x, alpha=1.0)`: unknown attribute "
                               "'alpha' for Relu (it takes: none)")


@pytest.mark.parametrize("path,msg", [
    ("missing.dir", r"error: .*missing\.dir: no such file"),
    (".", r"error: \.: is a directory, not a \.dir file"),
])
def test_load_reports_unreadable_files(path: str, msg: str, tmp_path: Path) -> None:
    p = tmp_path / path if path != "." else Path(".")
    with pytest.raises(DistIRError, match=msg):
        distir.load(p)


def test_load_reports_binary_files(tmp_path: Path) -> None:
    p = tmp_path / "bin.dir"
    p.write_bytes(b"func @main() {\xff\xfe}")
    with pytest.raises(DistIRError, match=r"not a text file \(byte 14 is not UTF-8\)"):
        distir.load(p)
