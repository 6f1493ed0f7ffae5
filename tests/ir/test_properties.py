"""Property tests of the text format.

- Random well-formed modules (random ops with the right arity and attribute kinds, random
  attribute values, quoted and plain names, types) print, parse and print to the same text,
  keeping every name and attribute.
- Random attribute values of every shape the grammar allows (nested lists, dense literals,
  dtypes, strings with escapes) survive print -> parse (parser only: no schema).
- Random edits of valid files never raise anything but ``DistIRError``, whose message is one
  line with a place.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import distir
from distir.errors import DistIRError
from distir.ir import (
    CALL,
    DenseAttr,
    DType,
    Function,
    Module,
    Op,
    ScalarType,
    TensorType,
    TupleType,
    Value,
)
from distir.ir.parser import parse_module

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- names ---------------------------------------------------------------------------------

PLAIN = st.from_regex(r"[A-Za-z0-9_.$-]{1,8}", fullmatch=True)
QUOTED = st.text(min_size=1, max_size=8)  # anything: spaces, quotes, backslashes, unicode
NAMES = st.one_of(PLAIN, PLAIN, QUOTED).filter(lambda s: s != "_")


class Names:
    """Draws names that are unique within one function."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.used: set[str] = set()

    def __call__(self) -> str:
        name = self.draw(NAMES)
        while name in self.used:
            name += "~"
        self.used.add(name)
        return name


# -- types ---------------------------------------------------------------------------------

DTYPES = st.sampled_from(list(DType))
DEVICES = st.integers(0, 7)
SHAPES = st.lists(st.integers(0, 9), max_size=4).map(tuple)
LEAF_TYPES = st.one_of(st.builds(TensorType, DTYPES, SHAPES, DEVICES),
                       st.builds(ScalarType, DTYPES, DEVICES))
TYPES = st.recursive(LEAF_TYPES, lambda inner: st.lists(inner, max_size=3).map(
    lambda ts: TupleType(tuple(ts))), max_leaves=4)

# -- attribute values ----------------------------------------------------------------------

FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -0.0, 1e-05, 1e16, 5e-324, -2.5, 1.7976931348623157e308]))
INTS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-3, 3))
STRINGS = st.one_of(st.text(max_size=10),
                    st.sampled_from(['"', "\\", "\n", "\t", "\\n", "a\"b\\c", "\x00\x7f",
                                     "é\u2028☃", ""]))


@st.composite
def dense(draw: Any) -> DenseAttr:
    dt = draw(DTYPES)
    shape = draw(st.lists(st.integers(0, 3), max_size=3).map(tuple))
    elements = None
    if dt is DType.BFloat16:  # hypothesis has no bfloat16: draw float32s and round
        arr = draw(hnp.arrays(np.float32, shape)).astype(dt.np)
    else:
        if dt.is_float:
            elements = st.floats(width=8 * dt.itemsize, allow_nan=True, allow_infinity=True)
        arr = draw(hnp.arrays(dt.np, shape, elements=elements))
    return DenseAttr.from_array(arr)


# Attribute names are identifiers; the words of the format are not.
ATTR_NAMES = st.from_regex(r"[a-z][a-zA-Z0-9_]{0,6}", fullmatch=True).filter(
    lambda s: s not in {"func", "return", "call", "true", "false", "dense", "inf", "nan"})
ANY_ATTR = st.recursive(
    st.one_of(INTS, FLOATS, st.booleans(), STRINGS, DTYPES, dense()),
    lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=8)

# -- ops with schema-valid attributes --------------------------------------------------------


def _opt(**kw: Any) -> Any:
    """A strategy for a dict holding some of the keyword strategies."""
    return st.fixed_dictionaries({}, optional=kw)


# name: (number of inputs, attribute strategy, results given inputs and attributes)
OPS: dict[str, tuple[Any, Any, Any]] = {
    "Relu": (st.just(1), st.just({}), lambda n, a: 1),
    "Add": (st.just(2), st.just({}), lambda n, a: 1),
    "MatMul": (st.just(2), st.just({}), lambda n, a: 1),
    "Gemm": (st.integers(2, 3), _opt(alpha=FLOATS, beta=FLOATS, transA=st.integers(0, 1),
                                     transB=st.integers(0, 1)), lambda n, a: 1),
    "Cast": (st.just(1), st.fixed_dictionaries({"to": DTYPES}), lambda n, a: 1),
    "Constant": (st.just(0), st.one_of(
        st.fixed_dictionaries({"value": dense()}, optional={"device": DEVICES}),
        _opt(value_floats=st.lists(FLOATS, max_size=4).map(tuple),
             value_ints=st.lists(INTS, max_size=4).map(tuple),
             value_strings=st.lists(STRINGS, max_size=3).map(tuple),
             value_string=STRINGS, value_float=FLOATS, value_int=INTS)),
        lambda n, a: 1),
    "Split": (st.just(1), st.fixed_dictionaries({"num_outputs": st.integers(1, 4)},
                                                optional={"axis": st.integers(-3, 3)}),
              lambda n, a: a["num_outputs"]),
    "Concat": (st.integers(1, 4), st.fixed_dictionaries({"axis": INTS}), lambda n, a: 1),
    "Transpose": (st.just(1), _opt(perm=st.lists(st.integers(-1, 5), max_size=4).map(tuple)),
                  lambda n, a: 1),
    "Gelu": (st.just(1), _opt(approximate=STRINGS), lambda n, a: 1),
    "LayerNormalization": (st.integers(2, 3), _opt(axis=st.integers(-3, 3), epsilon=FLOATS),
                           lambda n, a: 1),
    "Send": (st.just(1), st.fixed_dictionaries({"device": DEVICES}), lambda n, a: 1),
    "MPIAllreduce": (st.integers(1, 4), st.just({}), lambda n, a: n),
    "MPIBroadcast": (st.just(1), st.fixed_dictionaries({"devices": st.lists(
        DEVICES, min_size=1, max_size=4, unique=True).map(tuple)}), lambda n, a: len(a["devices"])),
    "SGDOptimizer": (st.just(2), st.fixed_dictionaries({"lr": FLOATS}), lambda n, a: 1),
    "Clip": (st.just(3), st.just({}), lambda n, a: 1),  # the middle input is omitted
}


@st.composite
def functions(draw: Any, callees: list[Function], name: str) -> Function:
    names = Names(draw)
    params = [Value(names(), draw(st.none() | TYPES)) for _ in range(draw(st.integers(0, 4)))]
    avail: list[Value] = list(params)
    ops: list[Op] = []
    for _ in range(draw(st.integers(0, 8))):
        use_call = callees and draw(st.booleans()) and draw(st.booleans())
        if use_call:
            callee = draw(st.sampled_from(callees))
            n_in, attrs, n_out = len(callee.params), {}, len(callee.returns)
        else:
            op_type = draw(st.sampled_from(sorted(OPS)))
            n_in_s, attrs_s, results = OPS[op_type]
            n_in = draw(n_in_s)
            attrs = draw(attrs_s)
            n_out = results(n_in, attrs)
        if (n_in and not avail) or not n_out:  # no statement without results exists
            continue
        inputs: list[Value | None] = [draw(st.sampled_from(avail)) for _ in range(n_in)]
        if not use_call and op_type == "Clip":
            inputs[1] = None
        outs = []
        for _ in range(n_out):
            if draw(st.integers(0, 5)) == 0:
                outs.append(Value("_"))
            else:
                outs.append(Value(names(), draw(st.none() | TYPES)))
        if use_call:
            ops.append(Op(CALL, inputs, None, outs, callee=callee))
        else:
            ops.append(Op(op_type, inputs, attrs, outs))
        avail += [v for v in outs if v.name != "_"]
    returns = draw(st.lists(st.sampled_from(avail), max_size=3)) if avail else []
    ret_types = None
    if draw(st.booleans()):
        ret_types = [draw(TYPES) for _ in returns]
    return Function(name, params, ops, returns, ret_types)


@st.composite
def modules(draw: Any) -> Module:
    fns: list[Function] = []
    fnames = Names(draw)
    for _ in range(draw(st.integers(1, 3))):
        fns.append(draw(functions(list(fns), fnames())))
    return Module(fns)


def _signature(m: Module) -> list:
    """Names, types and attributes of a module, with NaN made comparable."""

    def norm(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return "nan"
        if isinstance(v, tuple):
            return tuple(norm(x) for x in v)
        if isinstance(v, DenseAttr):
            return (v.dtype, v.shape, str(v.array.tolist()))
        return v

    out = []
    for f in m:
        out.append((f.name, [(p.name, p.type) for p in f.params], f.return_types,
                    [v.name for v in f.returns]))
        for op in f.ops:
            out.append((op.op_type, op.callee.name if op.callee else None,
                        [None if v is None else v.name for v in op.inputs],
                        [(v.name, v.type) for v in op.outputs],
                        {k: norm(v) for k, v in op.attrs.items()}))
    return out


@SETTINGS
@given(modules())
def test_random_modules_round_trip(m: Module) -> None:
    distir.verify(m)
    text = distir.dumps(m)
    m2 = distir.parse(text, filename="random.dir")  # parse + verify
    assert distir.dumps(m2) == text
    assert _signature(m2) == _signature(m)


@SETTINGS
@given(st.dictionaries(ATTR_NAMES, ANY_ATTR, max_size=4))
def test_any_attribute_value_round_trips(attrs: dict[str, Any]) -> None:
    x = Value("x")
    op = Op("Custom", [x], attrs, [Value("y")])
    text = distir.dumps(Function("f", [x], [op], [op.outputs[0]]))
    f2 = next(iter(parse_module(text)))
    assert distir.dumps(f2) == text
    assert _signature(Module([f2])) == _signature(Module([Function("f", [x], [op],
                                                                   [op.outputs[0]])]))


@SETTINGS
@given(st.lists(st.one_of(FLOATS, INTS), min_size=1, max_size=6), DTYPES)
def test_numbers_of_every_dtype_round_trip(xs: list[float], dt: DType) -> None:
    with np.errstate(all="ignore"):
        arr = np.array(xs, dtype=np.float64).astype(dt.np)
    d = DenseAttr.from_array(arr)
    text = distir.dumps(Function("f", [], [Op("Constant", [], {"value": d}, [Value("c")])],
                                 []))
    d2 = next(iter(distir.parse(text))).ops[0].attrs["value"]
    assert (d2.dtype, d2.shape) == (d.dtype, d.shape)
    if dt.is_float:  # compare as float64: NaN equals NaN there, and -0.0 keeps its sign
        a, b = d2.array.astype(np.float64), d.array.astype(np.float64)
        np.testing.assert_array_equal(a, b)
        num = ~np.isnan(a)
        assert (np.signbit(a[num]) == np.signbit(b[num])).all()
    else:
        assert d2 == d


# -- random edits never crash -----------------------------------------------------------------

SEEDS = [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.glob("*.dir"))]
SEEDS += [p.read_text(encoding="utf-8") for p in sorted((ROOT / "examples").glob("*.dir"))]
SEEDS = [s for s in SEEDS if s.strip()]

TOKENS = ["%", "@", "(", ")", ",", "=", "{", "}", "[", "]", "<", ">", ":", "->", "_", "func",
          "return", "call", "dense", "Tensor", "Tuple", "Float32", "Int64", "true", "%x",
          '%"q r"', "@main", "@f", "Relu", "MatMul", "relu", "1", "-1", "1.5", "-inf", "nan",
          '"s"', '"\\q"', "\n", "//", '"', "\\", "#", "\t", "é", "\x00", "99999999999999999999",
          "dense<Int64>[1]", "dense<Int8, ()>[", "Tensor[Float32, (2,), 0]", "Int64[-1]",
          "= call @main(%x)", "Split(%x, num_outputs=3)", "device=-1", "x=", "[[1], [2, 3]]"]


@st.composite
def mutations(draw: Any) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "token", "swap", "dup"]))
        n = len(text)
        i = draw(st.integers(0, n))
        if kind == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 12)):]
        elif kind == "insert":
            text = text[:i] + draw(st.text(min_size=1, max_size=4)) + text[i:]
        elif kind == "replace":
            text = text[:i] + draw(st.characters()) + text[i + 1:]
        elif kind == "token":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        else:
            lines = text.split("\n")
            a = draw(st.integers(0, len(lines) - 1))
            b = draw(st.integers(0, len(lines) - 1))
            if kind == "swap":
                lines[a], lines[b] = lines[b], lines[a]
            else:
                lines.insert(b, lines[a])
            text = "\n".join(lines)
    return text


_PLACE = re.compile(r"^(mut\.dir:\d+:\d+: |error: )")


@SETTINGS
@given(mutations())
def test_random_edits_raise_only_distir_errors(text: str) -> None:
    try:
        m = distir.parse(text, filename="mut.dir")
        distir.verify(m, num_devices=2)
    except DistIRError as e:
        msg = str(e)
        assert "\n" not in msg and _PLACE.match(msg), msg
        return
    printed = distir.dumps(m)  # an edit that still makes a valid program prints stably
    assert distir.dumps(distir.parse(printed)) == printed


@pytest.mark.parametrize("text", ["", "\n", "//", "func", "func @", "func @f(", "%", "}",
                                  "func @f() {", "func @f() { return", "\x00", "\ufeff",
                                  "func @f() {\r\n  return\r\n}\r\n"])
def test_tiny_inputs(text: str) -> None:
    try:
        distir.parse(text, filename="mut.dir")
    except DistIRError as e:
        assert _PLACE.match(str(e))
