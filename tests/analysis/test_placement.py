"""Device placement: where results live, and the one-line errors for misplaced ops."""

from __future__ import annotations

import pytest

import distir
from distir.analysis import execute, infer_types
from distir.errors import PlacementError


def types(text: str) -> tuple:
    return infer_types(distir.parse(text, filename="p.dir"))


def placement_error(text: str, pattern: str) -> None:
    m = distir.parse(text, filename="p.dir")
    with pytest.raises(PlacementError, match=pattern) as info:
        infer_types(m)
    assert "\n" not in str(info.value)


def test_matmul_across_two_devices() -> None:
    placement_error("""
func @main(%x: Tensor[Float32, (4, 6), 0], %w: Tensor[Float32, (6, 3), 1]) {
  %y = MatMul(%x, %w)
  return %y
}""", r"^p\.dir:3:8: error: MatMul: inputs are on devices 0 and 1, but MatMul runs on one "
      r"device: move an input with Send first$")


def test_misplaced_op_inside_a_callee_points_at_the_callee() -> None:
    placement_error("""
func @f(%a, %b) {
  %c = Add(%a, %b)
  return %c
}

func @main(%x: Tensor[Float32, (4, 6), 2], %w: Tensor[Float32, (4, 6), 1]) {
  %y = call @f(%x, %w)
  return %y
}""", r"^p\.dir:3:8: error: Add: inputs are on devices 2 and 1")


def test_executing_a_misplaced_program_fails_before_running() -> None:
    import numpy as np

    m = distir.parse("""
func @main(%x: Tensor[Float32, (2, 2), 0], %w: Tensor[Float32, (2, 2), 1]) {
  %y = Mul(%x, %w)
  return %y
}""", filename="p.dir")
    with pytest.raises(PlacementError, match=r"p\.dir:3:8: error: Mul: .*devices 0 and 1"):
        execute(m, [np.ones((2, 2), np.float32)] * 2)


def test_send_to_its_own_device() -> None:
    placement_error("""
func @main(%x: Tensor[Float32, (4,), 1]) {
  %y = Send(%x, device=1)
  return %y
}""", r"^p\.dir:3:8: error: Send: the value is already on device 1; a Send must move it to "
      r"another device")


def test_collective_with_two_inputs_on_one_device() -> None:
    placement_error("""
func @main(%a: Tensor[Float32, (4,), 0], %b: Tensor[Float32, (4,), 1],
           %c: Tensor[Float32, (4,), 1]) {
  %x, %y, %z = MPIAllreduce(%a, %b, %c)
  return %x
}""", r"^p\.dir:4:16: error: MPIAllreduce: inputs 1 and 2 are both on device 1, but "
      r"MPIAllreduce takes one input per device")
    placement_error("""
func @main(%a: Tensor[Float32, (4,), 0], %b: Tensor[Float32, (4,), 0]) {
  %x = MPIGather(%a, %b, axis=0, device=1)
  return %x
}""", r"^p\.dir:3:8: error: MPIGather: inputs 0 and 1 are both on device 0")


def test_destination_listed_twice() -> None:
    # The verifier rejects such text; the type rule guards programs built in memory.
    from distir.analysis.rules import TYPE_RULES, load_rules
    from distir.ir.types import DType, TensorType

    load_rules()
    t = TensorType(DType.Float32, (4,), 0)
    for op, attrs in (("MPIBroadcast", {"devices": (1, 1)}),
                      ("MPIScatter", {"devices": (0, 2, 0), "axis": 0})):
        with pytest.raises(PlacementError, match=r"device \d is listed twice in devices="):
            TYPE_RULES.get(op)(op, (t,), attrs, len(attrs["devices"]))


def test_result_devices() -> None:
    ts = types("""
func @main(%a: Tensor[Float32, (4, 6), 2], %b: Tensor[Float32, (4, 6), 0]) {
  %r2, %r0 = MPIReduceScatter(%a, %b, axis=1)
  %g2, %g0 = MPIAllgather(%a, %b, axis=0)
  %s3, %s1 = MPIScatter(%a, axis=0, devices=[3, 1])
  %b5, %b2 = MPIBroadcast(%b, devices=[5, 2])
  %k = Constant(value=dense<Float32>[1.0, 2.0], device=4)
  %e = Relu(%a)
  %red = MPIReduce(%a, %b, device=7)
  return %r2, %r0, %g2, %g0, %s3, %s1, %b5, %b2, %k, %e, %red
}""")
    assert [t.device for t in ts] == [2, 0, 2, 0, 3, 1, 5, 2, 4, 2, 7]
    assert [t.shape for t in ts] == [(4, 3), (4, 3), (8, 6), (8, 6), (2, 6), (2, 6),
                                     (4, 6), (4, 6), (2,), (4, 6), (4, 6)]


def test_constants_of_a_generic_function_follow_its_arguments_device() -> None:
    import numpy as np

    import distir

    m = distir.parse("""
func @f(%x) {
  %c = Constant(value=dense<Float32>[1.0])
  %y = Add(%x, %c)
  return %y
}
func @main(%a: Tensor[Float32, (2,), 1], %b: Tensor[Float32, (2,), 0]) {
  %p = call @f(%a)
  %q = call @f(%b)
  return %p, %q
}""", "g.dir")
    tp, tq = distir.infer_types(m)
    assert (tp.device, tq.device) == (1, 0)
    out = distir.execute(m, [np.ones(2, np.float32), np.zeros(2, np.float32)])
    assert out[0].tolist() == [2.0, 2.0] and out[1].tolist() == [1.0, 1.0]


def test_explicit_constant_device_is_kept() -> None:
    import distir

    m = distir.parse("""
func @f(%x) {
  %c = Constant(value=dense<Float32>[1.0], device=0)
  %y = Add(%x, %c)
  return %y
}
func @main(%a: Tensor[Float32, (2,), 1]) {
  %p = call @f(%a)
  return %p
}""", "g.dir")
    with pytest.raises(distir.DistIRError, match=r"g\.dir:4:8: error: Add: inputs are on "
                       r"devices 1 and 0"):
        distir.infer_types(m)
