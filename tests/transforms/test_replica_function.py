"""One replica's schedule as a function (``@replica``) and sends that name their
destination by a value (``Send(%x, %w)``): the program computes and simulates exactly what
the schedule written out in ``@main`` does."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis.renaming import device_free
from distir.analysis.simulator import Simulator
from distir.ir.core import CALL
from distir.ir.inline import inline_calls
from distir.transforms import analyze
from distir.transforms.tower import dtp
from distir.transforms.training import training_step
from tests.transforms.helpers import small_gpt2, small_mlp


def _replica_calls(fn: distir.Function) -> list:
    return [op for op in fn.ops if op.op_type == CALL and op.callee.name == "replica"]


class _Figures:
    """A simulation's figures, compared exactly where they are counts or bytes and to
    rounding where they are sums of seconds (a call's summary adds its delays in another
    order than the inlined ops, as every call does)."""

    def __init__(self, fn: distir.Function, **kw: object) -> None:
        s = Simulator("h100-sxm", **kw).simulate_function(fn)  # type: ignore[arg-type]
        self.exact = (s.peak_memory_bytes, s.num_ops, s.devices,
                      [(e[2], e[3].op_type) for e in s.events()])
        self.seconds = [s.latency_s, *s.busy_s.values(), *s.compute_s.values(),
                        *s.comm_s.values(), *(x for e in s.events() for x in e[:2])]

    def __eq__(self, other: object) -> bool:
        assert isinstance(other, _Figures)
        return self.exact == other.exact and self.seconds == pytest.approx(
            other.seconds, rel=1e-12, abs=1e-18)


_figures = _Figures


@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (2, 1, 2, 4), (2, 2, 2, 2), (4, 1, 4, 4),
                                 (2, 2, 4, 8)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_training_step_replica_function(cfg: tuple[int, int, int, int],
                                        schedule: str) -> None:
    """With dp > 1, @main calls @replica once per replica; @replica is generic over
    devices (no op names a device: its sends name theirs by a parameter), and the program
    simulates exactly as the same program with the calls inlined, whether the replicas
    share one renamed summary or not."""
    dp, tp, pp, k = cfg
    _, an, _, _ = small_mlp(dp * k)
    fn = dtp(an, dp=dp, tp=tp, pp=pp, microbatches=k, schedule=schedule)
    calls = _replica_calls(fn)
    assert len(calls) == dp
    (rep,) = {id(c.callee): c.callee for c in calls}.values()
    assert device_free(rep, {})
    sends = [op for op in rep.ops if op.op_type == "Send"]
    assert len(sends) == (0 if pp == 1 else len(sends)) and all(
        len(op.inputs) == 2 and "device" not in op.attrs for op in sends)
    if pp > 1:
        assert sends
    flat = _figures(inline_calls(fn))
    assert _figures(fn) == flat
    assert _figures(fn, rename_devices=False) == flat


@pytest.mark.parametrize("cfg", [(2, 1, 2, 2), (2, 2, 2, 4), (4, 1, 1, 2)])
def test_inference_replica_function_computes_the_sequential_results(
        cfg: tuple[int, int, int, int]) -> None:
    """Inference: @replica holds the whole schedule; the self-contained program gives the
    sequential logits."""
    dp, tp, pp, k = cfg
    fn, an, ins, want = small_gpt2(dp * k)
    step = dtp(an, dp=dp, tp=tp, pp=pp, microbatches=k, self_contained=True)
    assert len(_replica_calls(step)) == dp
    got = distir.execute(step, list(ins))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert _figures(step) == _figures(inline_calls(step))


def test_gpt2_training_replica_function_matches_inlined() -> None:
    """A GPT-2 training step (Adam, layer functions, tensor-parallel attention) at
    D2 T2 P2 K4: equal to its inlined program in every figure and event."""
    fwd = distir.models.gpt2(n_layer=4, d_model=16, n_head=4, vocab_size=12, seq_len=4,
                             batch_size=8)
    step = training_step(fwd, loss="cross_entropy", optimizer="adam",
                         wrt=[p.name for p in fwd.params if p.name != "input_ids"])
    fn = dtp(analyze(step), dp=2, tp=2, pp=2, microbatches=4)
    assert len(_replica_calls(fn)) == 2
    assert _figures(fn, share_equal_functions=True) == _figures(inline_calls(fn))


def test_no_replica_function_with_one_replica() -> None:
    _, an, _, _ = small_mlp(4)
    assert not _replica_calls(dtp(an, dp=1, tp=2, pp=2, microbatches=2))


def test_send_to_the_device_of_a_value() -> None:
    """``Send(%x, %w)`` is ``Send(%x, device=<the device of %w>)``: type, value, cost."""
    text = """func @main(%x: Tensor[Float32, (64, 64), 0], %w: Tensor[Float32, (2,), 1]) {
  %y = Send(%x, {dest})
  %z = Relu(%y)
  return %z
}"""
    by_value = distir.parse(text.replace("{dest}", "%w"))
    by_attr = distir.parse(text.replace("{dest}", "device=1"))
    assert distir.infer_types(by_value) == distir.infer_types(by_attr)
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    w = np.zeros(2, np.float32)
    np.testing.assert_array_equal(distir.execute(by_value, [x, w])[0],
                                  distir.execute(by_attr, [x, w])[0])
    assert _figures(by_value) == _figures(by_attr)
    assert distir.parse(distir.dumps(by_value)) == by_value
