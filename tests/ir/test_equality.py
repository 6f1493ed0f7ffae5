"""Modules and functions compare by structure: ``parse(dumps(m)) == m``.

Values and ops stay identity-compared; two functions are equal when the same ops, with the
same attributes and types, are wired the same way, whatever the value names.
"""

from __future__ import annotations

import pytest

import distir
from distir.ir import DType, FunctionBuilder, TensorType
from distir.transforms import dtp


def _step(act: str = "Relu", swap: bool = False, dim: int = 8, name: str = "main"):
    t = TensorType(DType.Float32, (4, dim), 0)
    b = FunctionBuilder(name)
    x = b.param("x", t)
    w = b.param("w", TensorType(DType.Float32, (dim, dim), 0))
    h = b.op("MatMul", *((w, x) if swap else (x, w)))
    y = b.op(act, h)
    return b.ret(y)


def test_equal_by_structure_not_identity() -> None:
    a, b = _step(), _step()
    assert a is not b and a == b and hash(a) == hash(b)
    assert distir.parse(distir.dumps(a)) == distir.parse(distir.dumps(b))


@pytest.mark.parametrize("other", [
    _step(act="Sigmoid"),       # another op
    _step(swap=True),           # other dataflow
    _step(dim=16),              # other types
    _step(name="step"),         # another function name
], ids=["op", "dataflow", "type", "name"])
def test_differences_are_seen(other) -> None:
    assert _step() != other


def test_value_names_are_hints() -> None:
    a = _step()
    b = distir.parse(distir.dumps(a).replace("%x", "%input"))
    assert b.entry == a


def test_attributes_are_compared() -> None:
    text = distir.dumps(_step())
    a = distir.parse(text.replace("Relu(", "LeakyRelu(").replace(")\n  return",
                                                                 ", alpha=0.1)\n  return"))
    b = distir.parse(text.replace("Relu(", "LeakyRelu(").replace(")\n  return",
                                                                 ", alpha=0.2)\n  return"))
    assert a != b and a == distir.parse(distir.dumps(a))


@pytest.mark.parametrize("cfg", [(1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 2, 2), (2, 2, 2, 4)],
                         ids=lambda c: "D{}T{}P{}K{}".format(*c))
def test_transformed_programs_round_trip(cfg) -> None:
    step = distir.models.mlp(batch_size=16, input_dim=8, hidden_dim=8, output_dim=8,
                             num_layers=4)
    d, t, p, k = cfg
    fn = dtp(step, dp=d, tp=t, pp=p, microbatches=k)
    m = distir.Module.of(fn)
    m2 = distir.parse(distir.dumps(m))
    assert m2 == m
    # A change deep inside a called function is seen from the entry.
    callee = next(iter(m2.entry.callees()), None)
    if callee is not None:
        callee.ops[0].attrs = {**callee.ops[0].attrs, "distir_test": 1}
        callee.ops[0]._key = None
        assert m2 != m


def test_gpt2_round_trips() -> None:
    fn = distir.models.gpt2(n_layer=2, d_model=16, n_head=2, vocab_size=32, seq_len=8,
                            batch_size=2)
    m = distir.Module.of(fn)
    assert distir.parse(distir.dumps(m)) == m


def test_modules_are_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(distir.Module.of(_step()))


def test_not_equal_to_other_kinds() -> None:
    assert _step() != "main" and distir.Module.of(_step()) != [_step()]
