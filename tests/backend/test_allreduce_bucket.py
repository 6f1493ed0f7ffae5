"""``MPIAllreduceBucket``: several all-reduces fused in one collective. Its four
interpretations (types, reference executor, cost, the gloo lowering: one flat buffer) and
the simulator's asynchronous handling agree with the unfused ``MPIAllreduce`` ops."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import distir
from distir.analysis import execute, random_inputs
from distir.analysis.hardware import load_hardware
from distir.analysis.projection import project
from distir.backend import Session
from distir.errors import DistIRError
from distir.ir import parse

HEAD = """func @main(%a0: Tensor[Float32, (4, 6), 0], %a1: Tensor[Float32, (4, 6), 1],
           %a2: Tensor[Float32, (4, 6), 2],
           %b0: Tensor[Float32, (5,), 0], %b1: Tensor[Float32, (5,), 1],
           %b2: Tensor[Float32, (5,), 2]) {
"""
FUSED = HEAD + """  %s0, %s1, %s2, %t0, %t1, %t2 = MPIAllreduceBucket(%a0, %a1, %a2, %b0, %b1, %b2,
                                                  tensors=2)
  %u = Relu(%s1)
  return %u, %s0, %s2, %t0, %t1, %t2
}
"""
UNFUSED = HEAD + """  %s0, %s1, %s2 = MPIAllreduce(%a0, %a1, %a2)
  %t0, %t1, %t2 = MPIAllreduce(%b0, %b1, %b2)
  %u = Relu(%s1)
  return %u, %s0, %s2, %t0, %t1, %t2
}
"""


@pytest.fixture(scope="module")
def s3() -> Iterator[Session]:
    with Session(3, "gloo", timeout_s=60) as s:
        yield s


def test_types_and_reference_match_the_unfused_ops() -> None:
    fused, unfused = parse(FUSED).entry, parse(UNFUSED).entry
    assert distir.infer_types(fused) == distir.infer_types(unfused)
    ins = random_inputs(fused, seed=3)
    for g, w in zip(execute(fused, ins), execute(unfused, ins)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("body, message", [
    ("MPIAllreduceBucket(%a0, %a1, %b0, tensors=2)", "multiple of 2"),
    ("MPIAllreduceBucket(%a0, %a1, %b1, %b0, tensors=2)", "same devices in the same order"),
    ("MPIAllreduceBucket(%a0, %a0, %b0, %b1, tensors=2)", "one input per device"),
    ("MPIAllreduceBucket(%a0, %a1, %b0, %b1, tensors=0)", "positive int"),
])
def test_bad_buckets_are_one_line(body: str, message: str) -> None:
    n = body.count("%")
    outs = ", ".join(f"%r{i}" for i in range(n))
    src = HEAD + f"  {outs} = {body}\n  return %r0\n}}\n"
    with pytest.raises(DistIRError, match=message) as e:
        distir.infer_types(parse(src).entry)
    assert "\n" not in str(e.value)


def test_cost_is_one_collective_of_the_summed_bytes_plus_copies() -> None:
    hw = load_hardware("h200-sxm")
    fused = distir.simulate(parse(FUSED), hardware=hw)
    total = 4 * (4 * 6 + 5)
    one = hw.comm_time("allreduce", float(total), [0, 1, 2])
    copies = 2 * hw.kernel_time("copy", 2.0 * total, 0.0, "Float32")
    ((_, seconds, devices, op, _, _),) = [e for e in fused.events()
                                          if e[3].op_type == "MPIAllreduceBucket"]
    assert seconds == pytest.approx(one + copies) and set(devices) == {0, 1, 2}
    # Asynchronous: on the communication streams, the Relu waits for it on device 1 only.
    assert fused.comm_s[0] == pytest.approx(seconds)
    assert fused.latency_s >= seconds


def test_projection_gives_each_rank_its_members() -> None:
    proj = project(parse(FUSED).entry)
    for d in range(3):
        (op,) = [o for o in proj.programs[d].fn.ops if o.op_type == "MPIAllreduceBucket"]
        assert len(op.inputs) == len(op.outputs) == 2
        assert op.attrs["tensors"] == 2 and tuple(op.attrs["order"]) == (0, 1, 2)
        assert [v.type.shape for v in op.inputs] == [(4, 6), (5,)]


def test_gloo_lowering_is_one_flat_all_reduce(s3: Session) -> None:
    fn = parse(FUSED).entry
    ins = random_inputs(fn, seed=5)
    res = s3.run(fn, ins, steps=1, warmup=0)
    assert res.status == "ok", res.message
    for g, w in zip(res.outputs, execute(fn, ins)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_single_member_bucket_runs(s3: Session) -> None:
    src = HEAD + "  %s0, %s1, %s2 = MPIAllreduceBucket(%b0, %b1, %b2, tensors=1)\n" \
                 "  return %s0, %s1, %s2\n}\n"
    fn = parse(src).entry
    ins = random_inputs(fn, seed=7)
    res = s3.run(fn, ins, steps=1, warmup=0)
    assert res.status == "ok", res.message
    for g, w in zip(res.outputs, execute(fn, ins)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
