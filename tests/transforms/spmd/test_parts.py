"""The parts of ``distir.transforms.spmd`` on their own: meshes, the rule adapter (with the
linearity table for partial inputs), redistribution plans and the element count."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.ir import parse
from distir.transforms.program import Program
from distir.transforms.spmd import Mesh, P, R, Shard, communicated_elements, local_shape
from distir.transforms.spmd.redistribute import plan
from distir.transforms.spmd.rules import NotLocal, OpRules

S0, S1 = Shard(0), Shard(1)


def test_mesh_groups_and_local_shapes() -> None:
    m = Mesh.of(2, 3)
    assert m.size == 6 and m.coords[4] == (1, 1)
    assert m.groups(0) == ((0, 3), (1, 4), (2, 5))
    assert m.groups(1) == ((0, 1, 2), (3, 4, 5))
    assert local_shape((8, 9), (S0, S1), m) == (4, 3)
    assert local_shape((8, 9), (P, R), m) == (8, 9)
    assert hash((S0, P)) == hash((Shard(0), P)) and {S0, Shard(0)} == {S0}


def _rules() -> tuple[OpRules, distir.Function]:
    fn = distir.models.mlp(batch_size=8, input_dim=4, hidden_dim=8, output_dim=4,
                           num_layers=2)
    return OpRules(Program(fn), Mesh.of(2)), fn


def test_rules_through_layout_rules() -> None:
    rules, fn = _rules()
    mm, relu, mm1 = fn.ops[0], fn.ops[1], fn.ops[2]
    assert rules.apply(mm, ((S0,), (R,))).outs == ((S0,),)
    assert rules.apply(mm, ((R,), (S1,))).outs == ((S1,),)
    assert rules.apply(mm, ((S1,), (S0,))).outs == ((P,),)  # contraction split
    with pytest.raises(NotLocal) as e:
        rules.apply(mm, ((S1,), (R,)))
    assert e.value.demand == (1, 0, S0)  # the row split of the weight
    assert rules.apply(relu, ((S1,),)).outs == ((S1,),)
    assert rules.apply(mm1, ((P,), (R,))).outs == ((P,),)  # linear in one operand


def test_partial_inputs_follow_linearity() -> None:
    rules, fn = _rules()
    relu, relu_grad, mm_grad = fn.ops[1], fn.ops[5], fn.ops[6]
    with pytest.raises(NotLocal):
        rules.apply(relu, ((P,),))  # Relu is not linear
    assert rules.apply(relu_grad, ((R,), (P,))).outs == ((P,),)
    with pytest.raises(NotLocal):
        rules.apply(relu_grad, ((S0,), (P,)))  # a partial beside a split input
    assert rules.apply(mm_grad, ((R,), (R,), (P,))).outs == ((P,), (P,))
    with pytest.raises(NotLocal):
        rules.apply(mm_grad, ((P,), (R,), (R,)))


def test_redistribution_plans() -> None:
    def kinds(src: tuple, dst: tuple) -> list[str]:
        return [s.kind for s in plan(src, dst)]

    assert kinds((P,), (R,)) == ["allreduce"]
    assert kinds((P,), (S1,)) == ["reduce_scatter"]
    assert kinds((S0,), (R,)) == ["allgather"]
    assert kinds((R,), (S0,)) == ["split"]
    assert kinds((S0,), (S1,)) == ["allgather", "split"]
    assert kinds((S0, R), (R, S0)) == ["allgather", "split"]
    assert kinds((P, S1), (S1, R)) == ["allgather", "reduce_scatter"]
    assert kinds((P, S0), (S0, R)) == ["allgather", "reduce_scatter"]
    with pytest.raises(distir.errors.TransformError, match="partial sum from a whole"):
        plan((R,), (P,))


PROGRAM = """
func @main(%a: Tensor[Float32, (4, 6), 0], %b: Tensor[Float32, (4, 6), 1],
           %c: Tensor[Float32, (2, 6), 2]) {
  %x, %y = MPIAllreduce(%a, %b)
  %g0, %g1 = MPIAllgather(%a, %b, axis=0)
  %r0, %r1 = MPIReduceScatter(%a, %b, axis=0)
  %z0, %z1, %z2 = MPIBroadcast(%c, devices=[0, 1, 2])
  %s = Send(%a, device=3)
  %w = MPIGather(%a, %b, axis=0, device=0)
  return %x, %y, %g0, %g1, %r0, %r1, %z0, %z1, %z2, %s, %w
}
"""


def test_element_convention() -> None:
    fn = parse(PROGRAM).entry
    n = 24
    want = 2 * n + n * 2 + n + 2 * 12 + n + n  # allreduce, allgather, reduce-scatter, ...
    assert communicated_elements(fn) == want


def test_grouped_shards() -> None:
    g = Shard(1, groups=3)
    assert str(g) == "S(1, groups=3)" and g != S1
    assert [(s.kind, s.groups) for s in plan((g,), (R,))] == [("allgather", 3)]
    assert [s.kind for s in plan((P,), (g,))] == ["allreduce", "split"]  # no grouped RS
    m = Mesh.of(2)
    from distir.transforms.spmd.mesh import check_spec
    assert check_spec((4, 12), (g,), m) is None
    assert "in 3 groups" in (check_spec((4, 9), (g,), m) or "")


BUCKET = """func @main(%a0: Tensor[Float32, (4, 6), 0], %a1: Tensor[Float32, (4, 6), 1],
           %b0: Tensor[Float32, (5,), 0], %b1: Tensor[Float32, (5,), 1]) {
  %s0, %s1, %t0, %t1 = MPIAllreduceBucket(%a0, %a1, %b0, %b1, tensors=2)
  return %s0, %s1, %t0, %t1
}
"""


def test_a_bucket_counts_as_its_members() -> None:
    assert communicated_elements(parse(BUCKET).entry) == 2 * 24 + 2 * 5


def test_a_lookup_in_a_row_split_table_is_masked() -> None:
    """A table split along the axis its ids address is looked up with the ids shifted to
    each device's rows and masked (``spmd/vocab``, as dtp's vocabulary parallelism): the
    lowered program equals the sequential one even when every id falls in rank 0's rows
    (a plain local lookup with global ids was silently wrong), and no table is gathered."""
    from distir.transforms.spmd import Mesh, Shard, comm_breakdown, lower, propagate

    v = 16
    fn = distir.models.gpt2(n_layer=1, d_model=8, n_head=2, vocab_size=v, seq_len=4,
                            batch_size=2)
    rng = np.random.default_rng(0)
    ins = [rng.integers(0, v // 2, size=p.type.shape).astype(np.int64)  # type: ignore
           if p.type.dtype.name.startswith("Int") else  # type: ignore[union-attr]
           (rng.standard_normal(p.type.shape) * 0.5).astype(np.float32)  # type: ignore
           for p in fn.params]
    want = distir.execute(fn, ins)
    a = propagate(fn, Mesh.of(2), {"wte": (Shard(0),)})
    got = distir.execute(lower(a, self_contained=True), ins)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert not any(k[0] == "MPIAllgather" for k in comm_breakdown(lower(a)))
