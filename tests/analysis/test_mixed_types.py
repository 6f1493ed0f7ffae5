"""Mixed abstract/concrete type propagation: shapes computed at run time from an abstract
activation's own shape (``Shape`` -> ``Gather``/``Slice`` -> arithmetic -> ``Concat`` ->
``Reshape``, the pattern of exported GPT-2 graphs, Figure 4 of the DistIR paper) type
exactly; a target shape computed from abstract values is a clear error."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import distir
from distir.analysis import Concrete, TypeInterpreter, execute, infer_types, type_env
from distir.analysis.rules import NUMPY_RULES, load_rules
from distir.errors import TypeInferenceError
from distir.ir import DType, TensorType

ROOT = Path(__file__).resolve().parents[2]
load_rules()

needs_numpy_rules = pytest.mark.skipif(
    not all(op in NUMPY_RULES for op in ("Gather", "Concat", "Unsqueeze", "Div", "Mul",
                                          "Slice", "Squeeze")),
    reason="the numpy rules of the shape ops are not there yet")


def F(*shape: int, dev: int = 0) -> TensorType:
    return TensorType(DType.Float32, shape, dev)


@needs_numpy_rules
def test_figure4_example_types_fully(capsys: pytest.CaptureFixture[str]) -> None:
    from distir.cli import main

    assert main(["check", "--types", str(ROOT / "examples" / "gpt2_reshape.dir")]) == 0
    out = capsys.readouterr().out
    results = [ln.strip() for ln in out.splitlines() if " = " in ln]
    assert len(results) == 8
    for ln in results:  # every result is annotated with a full type
        assert re.match(r"%\w+: Tensor\[\w+, \([\d, ]*\), 0\] = ", ln), ln
    assert "%y: Tensor[Float32, (512, 768), 0] = Reshape(%x, %shape)" in out
    assert "%shape: Tensor[Int64, (2,), 0] = Concat(" in out


FIGURE4 = """
func @main(%x: Tensor[Float32, ({b}, {s}, {d}), {dev}]) {{
  %s = Shape(%x)
  %i = Constant(value=dense<Int64, ()>[2], device={dev})
  %d = Gather(%s, %i, axis=0)
  %zero = Constant(value=dense<Int64>[0], device={dev})
  %dd = Unsqueeze(%d, %zero)
  %minus_one = Constant(value=dense<Int64>[-1], device={dev})
  %shape = Concat(%minus_one, %dd, axis=0)
  %y = Reshape(%x, %shape)
  return %y
}}
"""


@needs_numpy_rules
@pytest.mark.parametrize("b,s,d,dev", [(4, 128, 768, 0), (1, 7, 3, 2), (2, 1, 1, 1)])
def test_figure4_pattern_is_concrete_all_along(b: int, s: int, d: int, dev: int) -> None:
    m = distir.parse(FIGURE4.format(b=b, s=s, d=d, dev=dev))
    env = type_env(m.entry)
    by_name = {v.name: a for v, a in env.items()}
    for name in ("s", "i", "d", "zero", "dd", "minus_one", "shape"):
        assert isinstance(by_name[name], Concrete), name
    assert by_name["s"].value.tolist() == [b, s, d]
    assert by_name["shape"].value.tolist() == [-1, d]
    assert by_name["y"] == F(b * s, d, dev=dev)


# Exported GPT-2 attention: split the heads with a shape built from Shape -> Gather -> Div,
# merge them back with Shape -> Slice -> Concat(Mul).
GPT2_HEADS = """
func @split_heads(%x) {
  %shp = Shape(%x)
  %c0 = Constant(value=dense<Int64, ()>[0])
  %c1 = Constant(value=dense<Int64, ()>[1])
  %c2 = Constant(value=dense<Int64, ()>[2])
  %nh = Constant(value=dense<Int64, ()>[12])
  %axes = Constant(value=dense<Int64>[0])
  %b = Gather(%shp, %c0, axis=0)
  %s = Gather(%shp, %c1, axis=0)
  %d = Gather(%shp, %c2, axis=0)
  %hd = Div(%d, %nh)
  %b1 = Unsqueeze(%b, %axes)
  %s1 = Unsqueeze(%s, %axes)
  %nh1 = Unsqueeze(%nh, %axes)
  %hd1 = Unsqueeze(%hd, %axes)
  %shape = Concat(%b1, %s1, %nh1, %hd1, axis=0)
  %r = Reshape(%x, %shape)
  %t = Transpose(%r, perm=[0, 2, 1, 3])
  return %t
}

func @merge_heads(%t) {
  %x = Transpose(%t, perm=[0, 2, 1, 3])
  %shp = Shape(%x)
  %start = Constant(value=dense<Int64>[0])
  %end = Constant(value=dense<Int64>[2])
  %bs = Slice(%shp, %start, %end)
  %lo = Constant(value=dense<Int64>[2])
  %hi = Constant(value=dense<Int64>[4])
  %heads = Slice(%shp, %lo, %hi)
  %h0 = Constant(value=dense<Int64, ()>[0])
  %h1 = Constant(value=dense<Int64, ()>[1])
  %nh = Gather(%heads, %h0, axis=0)
  %hd = Gather(%heads, %h1, axis=0)
  %dm = Mul(%nh, %hd)
  %ax = Constant(value=dense<Int64>[0])
  %dm1 = Unsqueeze(%dm, %ax)
  %shape = Concat(%bs, %dm1, axis=0)
  %y = Reshape(%x, %shape)
  return %y
}

func @main(%q: Tensor[Float32, (4, 128, 768), 0], %k: Tensor[Float32, (2, 16, 768), 0]) {
  %qh = call @split_heads(%q)
  %kh = call @split_heads(%k)
  %kt = Transpose(%kh, perm=[0, 1, 3, 2])
  %att = MatMul(%kh, %kt)
  %p = Softmax(%att, axis=-1)
  %o = MatMul(%p, %kh)
  %q2 = call @merge_heads(%qh)
  %k2 = call @merge_heads(%o)
  return %qh, %kh, %att, %q2, %k2
}
"""


@needs_numpy_rules
def test_gpt2_head_split_and_merge_resolve() -> None:
    m = distir.parse(GPT2_HEADS)
    qh, kh, att, q2, k2 = infer_types(m)
    assert qh == F(4, 12, 128, 64)
    assert kh == F(2, 12, 16, 64)  # each call of a generic function types afresh
    assert att == F(2, 12, 16, 16)
    assert q2 == F(4, 128, 768)
    assert k2 == F(2, 16, 768)


@needs_numpy_rules
def test_gpt2_head_split_matches_the_reference_executor() -> None:
    m = distir.parse(GPT2_HEADS)
    types = infer_types(m)
    rng = np.random.default_rng(0)
    outs = execute(m, [rng.standard_normal((4, 128, 768), np.float32),
                       rng.standard_normal((2, 16, 768), np.float32)])
    assert [o.shape for o in outs] == [t.shape for t in types]


@needs_numpy_rules
def test_shape_slice_concat_reshape_chain() -> None:
    src = """
func @main(%x: Tensor[Float32, (2, 3, 4, 5), 0]) {
  %s = Shape(%x)
  %zero = Constant(value=dense<Int64>[0])
  %two = Constant(value=dense<Int64>[2])
  %big = Constant(value=dense<Int64>[9223372036854775807])
  %lead = Slice(%s, %zero, %two)
  %tail = Slice(%s, %two, %big)
  %c = Constant(value=dense<Int64>[-1])
  %shape = Concat(%lead, %c, axis=0)
  %y = Reshape(%x, %shape)
  %tail_shape = Concat(%c, %tail, axis=0)
  %z = Reshape(%x, %tail_shape)
  %neg = Constant(value=dense<Int64>[-1])
  %small = Constant(value=dense<Int64>[-9223372036854775808])
  %rev = Slice(%s, %neg, %small, %zero, %neg)
  %w = Reshape(%x, %rev)
  return %y, %z, %w
}
"""
    m = distir.parse(src)
    y, z, w = infer_types(m)
    assert y == F(2, 3, 20)
    assert z == F(6, 4, 5)
    assert w == F(5, 4, 3, 2)


@needs_numpy_rules
def test_concrete_values_flow_through_generic_calls() -> None:
    src = """
func @last_dim(%x) {
  %s = Shape(%x, start=-1)
  return %s
}

func @main(%a: Tensor[Float32, (3, 7), 0], %b: Tensor[Float32, (2, 5), 0]) {
  %da = call @last_dim(%a)
  %db = call @last_dim(%b)
  %both = Concat(%da, %db, axis=0)
  %z = ConstantOfShape(%both, value=dense<Float32>[1.0])
  return %z
}
"""
    (z,) = infer_types(distir.parse(src))
    assert z == F(7, 5)


def test_abstract_target_shape_is_a_clear_error() -> None:
    src = """func @main(%x: Tensor[Float32, (4, 6), 0], %n: Tensor[Int64, (2,), 0]) {
  %y = Reshape(%x, %n)
  return %y
}
"""
    m = distir.parse(src, "r.dir")
    with pytest.raises(TypeInferenceError) as ei:
        infer_types(m)
    assert re.fullmatch(r"r\.dir:2:\d+: error: Reshape: the shape input must be known to infer "
                        r"the result shape, but it is computed from abstract values; make it a "
                        r"Constant or derive it from Shape", str(ei.value))


@needs_numpy_rules
def test_shape_computed_from_a_large_tensor_stays_abstract() -> None:
    # The values of %big are too many to keep, so %shape is abstract: a clear error, not a
    # wrong shape.
    src = """func @main(%x: Tensor[Float32, (4, 6), 0], %idx: Tensor[Int64, (5000,), 0]) {
  %m = ReduceMax(%idx, keepdims=1)
  %two = Constant(value=dense<Int64>[2])
  %shape = Concat(%m, %two, axis=0)
  %y = Reshape(%x, %shape)
  return %y
}
"""
    with pytest.raises(TypeInferenceError, match=r"Reshape: the shape input must be known"):
        infer_types(distir.parse(src, "r.dir"))


@needs_numpy_rules
def test_small_results_of_concrete_inputs_are_concrete_large_ones_abstract() -> None:
    src = """func @main() {
  %s = Constant(value=dense<Int64>[3, 4])
  %small = ConstantOfShape(%s, value=dense<Float32>[2.0])
  %b = Constant(value=dense<Int64>[100, 100])
  %large = ConstantOfShape(%b, value=dense<Float32>[2.0])
  return %small, %large
}
"""
    interp = TypeInterpreter()
    small, large = interp.run(distir.parse(src).entry, [])
    assert isinstance(small, Concrete) and small.value.tolist() == [[2.0] * 4] * 3
    assert large == F(100, 100)


@needs_numpy_rules
def test_range_and_expand_from_shape() -> None:
    src = """func @main(%x: Tensor[Float32, (3, 5), 0]) {
  %s = Shape(%x, start=1)
  %zero = Constant(value=dense<Int64, ()>[0])
  %one = Constant(value=dense<Int64, ()>[1])
  %axes = Constant(value=dense<Int64>[0])
  %n = Squeeze(%s, %axes)
  %pos = Range(%zero, %n, %one)
  %rows = Shape(%x, end=1)
  %both = Concat(%rows, %s, axis=0)
  %e = Expand(%pos, %both)
  return %pos, %e
}
"""
    env = type_env(distir.parse(src).entry)
    by_name = {v.name: a for v, a in env.items()}
    assert isinstance(by_name["pos"], Concrete)
    assert by_name["pos"].value.tolist() == [0, 1, 2, 3, 4]
    assert by_name["e"].type == TensorType(DType.Int64, (3, 5), 0)


@needs_numpy_rules
@pytest.mark.parametrize("index,axis_size", [(-1, 768), (0, 4), (-3, 4), (1, 128)])
def test_gather_on_a_shape_with_negative_indices(index: int, axis_size: int) -> None:
    src = FIGURE4.format(b=4, s=128, d=768, dev=0).replace(
        "dense<Int64, ()>[2]", f"dense<Int64, ()>[{index}]")
    env = {v.name: a for v, a in type_env(distir.parse(src).entry).items()}
    assert isinstance(env["d"], Concrete) and int(env["d"].value) == axis_size
    assert env["y"] == F(4 * 128 * 768 // axis_size, axis_size)
