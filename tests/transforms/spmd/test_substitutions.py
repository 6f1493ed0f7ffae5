"""Substitutions: every rule equals the original (reference executor, z3), finds its sites
on programs we did not write, and the backtracking search over them."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.errors import ConfigError, TransformError
from distir.ir.core import Function, Value
from distir.ir.verify import verify
from distir.transforms.spmd import lower, optimize
from distir.transforms.spmd.rewrite_search import optimize_with_substitutions
from distir.transforms.spmd.subst_core import Emitter, Graph, Site
from distir.transforms.spmd.subst_rules import example_fn
from distir.transforms.spmd.subst_verify import check_on_inputs
from distir.transforms.spmd.substitutions import (
    BY_NAME,
    MEGATRON,
    SUBSTITUTIONS,
    by_name,
    check_all,
    find_sites,
    megatron_pair,
    prove_equal,
    structural_hash,
    verify_substitution,
)

NAMES = [s.name for s in SUBSTITUTIONS]


@pytest.mark.parametrize("name", NAMES)
def test_rule_equals_original_on_random_inputs(name: str) -> None:
    v = verify_substitution(BY_NAME[name], seeds=(0, 1, 2), use_z3=False)
    assert v.sites >= len(BY_NAME[name].shapes)  # a site at every example shape
    assert v.max_rel_error < 1e-5


@pytest.mark.parametrize("name", NAMES)
def test_rule_proved_by_z3(name: str) -> None:
    pytest.importorskip("z3")
    assert verify_substitution(BY_NAME[name]).z3 == "proved"


def test_check_all() -> None:
    verdicts = check_all(use_z3=False)
    assert [v.name for v in verdicts] == NAMES
    assert all(v.ok for v in verdicts)


def _wrong_contraction(g: Graph, site: Site, em: Emitter) -> dict[Value, Value]:
    """split_contraction with a sign error: what verification must catch."""
    op = g.ops[site.ops[0]]
    x, w = op.inputs
    assert x is not None and w is not None
    x1, x2 = em.split(x, [1, 1], 1, "x")
    w1, w2 = em.split(w, [1, 1], 0, "w")
    return {op.outputs[0]: em.op("Sub", em.op("MatMul", x1, w1), em.op("MatMul", x2, w2))}


def test_verification_catches_a_wrong_rule() -> None:
    wrong = dataclasses.replace(BY_NAME["split_contraction"], name="wrong",
                                build=_wrong_contraction, shapes=((4, 6, 8),))
    v = verify_substitution(wrong, use_z3=False)
    assert v.max_rel_error > 0.01 and not v.ok
    pytest.importorskip("z3")
    v = verify_substitution(wrong)
    assert v.z3.startswith("failed") and not v.ok


def test_z3_refuses_what_it_cannot_model() -> None:
    pytest.importorskip("z3")
    fn = example_fn({"x": (2, 2)}, lambda b, p: [b.op("Softmax", p["x"])])
    msg = prove_equal(fn, fn)
    assert msg is not None and "Softmax has no symbolic rule" in msg


def test_rewrite_keeps_the_interface() -> None:
    """Concatenated weights are built inside the program: the parameters, their types and
    the results are the original's, so the rewritten step is a drop-in replacement."""
    fn = BY_NAME["fuse_products"].examples((4, 6, 3, 5))
    g = Graph(fn)
    mm, gemm = BY_NAME["fuse_products"].find(g)  # three MatMuls, two Gemms of one input
    assert (len(mm.ops), len(gemm.ops)) == (3, 2)
    new = BY_NAME["fuse_products"].apply(g, mm)
    verify(new)
    assert [p.type for p in new.params] == [p.type for p in fn.params]
    assert len(new.returns) == len(fn.returns)
    assert Counter(o.op_type for o in new.ops) == {"Concat": 1, "MatMul": 1, "Split": 1,
                                                   "Constant": 1, "Gemm": 2}
    assert new.params[0] is not fn.params[0]  # a new function, the original untouched
    assert len(fn.ops) == 5
    new = BY_NAME["fuse_products"].apply(new, BY_NAME["fuse_products"].sites(new)[0])
    assert Counter(o.op_type for o in new.ops) == {"Concat": 3, "MatMul": 1, "Split": 2,
                                                   "Constant": 2, "Gemm": 1}
    assert check_on_inputs(fn, new) < 1e-6


def test_structural_hash_ignores_names() -> None:
    a = distir.models.mlp(4, 8, 8, 2, num_layers=2)
    b = distir.models.mlp(4, 8, 8, 2, num_layers=2)
    for v in b.params:
        v.name = "renamed_" + (v.name or "")
    assert structural_hash(a) == structural_hash(b)
    assert structural_hash(a) != structural_hash(distir.models.mlp(4, 8, 8, 2, num_layers=3))


def test_structural_hash_ignores_the_order_of_rewrites() -> None:
    """Two rewrites at independent sites, applied in either order: one digest (the op
    orders differ), so the search scores that program once."""
    step = distir.models.mlp(8, 8, 8, 8, num_layers=2)
    sub = BY_NAME["split_columns"]

    def at(fn: Function, w: int) -> Function:  # split the product of weight w
        (site,) = [s for s in sub.sites(fn) if fn.ops[s.ops[0]].inputs[1] is fn.params[w]]
        return sub.apply(fn, site)

    a = at(at(step, 0), 1)
    b = at(at(step, 1), 0)
    assert structural_hash(a) == structural_hash(b)
    assert structural_hash(a) != structural_hash(step)
    # independent ops in another order: one digest
    p = {"x": (2, 2), "y": (2, 2)}
    c = example_fn(p, lambda b, v: [b.op("Relu", v["x"]), b.op("Tanh", v["y"])])
    d = example_fn(p, lambda b, v: list(reversed([b.op("Tanh", v["y"]),
                                                   b.op("Relu", v["x"])])))
    assert [o.op_type for o in c.ops] != [o.op_type for o in d.ops]
    assert structural_hash(c) == structural_hash(d)


def test_megatron_pair_as_a_sequence() -> None:
    """Unity Fig. 10: column split, activation through the Concat, row split: two
    independent halves summed, equal to the original (forward, and a training step whose
    forward is rewritten)."""
    fwd = example_fn({"x": (4, 6), "w1": (6, 8), "w2": (8, 6)},
                     lambda b, p: [b.op("MatMul", b.op("Gelu", b.op("MatMul", p["x"], p["w1"])),
                                        p["w2"])])
    m = megatron_pair(fwd)
    assert Counter(o.op_type for o in m.ops) == {"Split": 2, "MatMul": 4, "Gelu": 2, "Add": 1}
    assert check_on_inputs(fwd, m) < 1e-5
    step = distir.models.mlp(8, 6, 8, 4, num_layers=2)
    assert check_on_inputs(step, megatron_pair(step)) < 1e-5
    assert MEGATRON == ("split_columns", "elementwise_through_concat", "concat_lhs_product")
    with pytest.raises(TransformError, match="no MatMul -> element-wise -> MatMul chain"):
        megatron_pair(example_fn({"x": (2, 2)}, lambda b, p: [b.op("Relu", p["x"])]))
    pytest.importorskip("z3")
    small = example_fn({"x": (2, 2), "w1": (2, 4), "w2": (4, 2)},
                       lambda b, p: [b.op("MatMul", b.op("Gelu", b.op("MatMul", p["x"], p["w1"])),
                                          p["w2"])])
    assert prove_equal(small, megatron_pair(small)) is None  # the whole sequence, for any f


def test_inverse_rules_undo() -> None:
    """fuse_products then unfuse_product and split_of_concat give back the original."""
    fn = BY_NAME["fuse_products"].examples((4, 6, 3, 5))
    fused = BY_NAME["fuse_products"].apply(fn, BY_NAME["fuse_products"].sites(fn)[0])
    back = BY_NAME["unfuse_product"].apply(fused, BY_NAME["unfuse_product"].sites(fused)[0])
    back = BY_NAME["split_of_concat"].apply(back, BY_NAME["split_of_concat"].sites(back)[0])
    assert Counter(o.op_type for o in back.ops) == {"MatMul": 3, "Gemm": 2}
    assert check_on_inputs(fn, back) == 0.0


def test_sites_on_model_builders() -> None:
    from distir.models.gpt2 import GPT2Config

    gpt = GPT2Config(n_layer=2, d_model=32, n_head=2, vocab_size=64, seq_len=8,
                     batch_size=2).build()
    found = Counter(s.name for s, _ in find_sites(gpt))
    # c_attn, attn c_proj, c_fc, mlp c_proj per layer, and the head (lm_head)
    assert found["split_columns"] == found["split_contraction"] == 9
    s, site = next((s, x) for s, x in find_sites(gpt) if s.name == "split_contraction")
    assert check_on_inputs(gpt, s.apply(gpt, site), seeds=(0,)) < 1e-4
    # the fused QKV projection: its bias Add split per piece, then the product unfused
    assert found["split_through_binary"] == 2 and found["unfuse_product"] == 0
    sub = BY_NAME["split_through_binary"]
    new = sub.apply(gpt, sub.sites(gpt)[0])
    sub = BY_NAME["unfuse_product"]
    (site,) = sub.sites(new)
    new = sub.apply(new, site)
    # q, k and v of layer 0 are now three products of one input (which fuse back)
    assert [len(s.ops) for s in BY_NAME["fuse_products"].sites(new)] == [3]
    assert check_on_inputs(gpt, new, seeds=(0,)) < 1e-4


def test_sites_on_an_onnx_model() -> None:
    """AlexNet as shipped with ONNX (its three fully connected layers are Gemms): each is
    rewritten as a product and a bias, whose product the other rules then split."""
    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_bvlc_alexnet.onnx")
    fn = distir.import_onnx(path).entry
    sites = BY_NAME["gemm_as_product"].sites(fn)
    assert len(sites) == 3
    new = BY_NAME["gemm_as_product"].apply(fn, sites[0])
    names = Counter(s.name for s, _ in find_sites(new))
    assert names["gemm_as_product"] == 2 and names["split_columns"] == 1


@pytest.fixture(scope="module")
def zoo_bert() -> Function:
    """Hugging Face BERT (two layers, hidden 32) exported by torch, imported."""
    from tests.zoo.export import ExportFailed, exported
    from tests.zoo.models import BY_NAME as ZOO

    try:
        path = exported(ZOO["bert"], "torchscript").path
    except ExportFailed as e:
        pytest.skip(f"export failed: {e}")
    return distir.import_onnx(path, dims={"batch": 2, "seq": 8}).entry


def test_sites_on_a_zoo_model(zoo_bert: Function) -> None:
    """Query, key and value are three products of one normalized input per layer; fused,
    the model computes the same."""
    fn = zoo_bert
    sites = BY_NAME["fuse_products"].sites(fn)
    assert [len(s.ops) for s in sites] == [3, 3]
    new = BY_NAME["fuse_products"].apply(fn, sites[1])
    ins = random_inputs(fn, seed=0)
    for a, b in zip(distir.execute(fn, ins), distir.execute(new, ins), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_search_fuses_a_zoo_models_projections(zoo_bert: Function) -> None:
    """On the imported BERT (inference, one device) the search fuses query, key and value
    in both layers: one product's fixed cost instead of three, by the fitted h100-sxm
    cost model (850.8 -> 776.0 µs when measured)."""
    r = optimize_with_substitutions(zoo_bert, 1, depth=2, substitutions=["fuse_products"],
                                    beam=8, max_states=200)
    assert len(r.stats["substitutions"]) == 2
    assert r.simulation.latency_s < 0.95 * r.stats["rewrite_search"]["baseline_s"]
    _same_step(zoo_bert, r)


def _same_step(original: Function, r: object) -> None:
    """The plan found (lowered self-contained) computes ``original``'s results; bound
    weights are passed by name where the lowered program does not bind them."""
    ins = random_inputs(original, seed=0)
    free = [p.name for p in original.params if p.name not in original.initializers]
    by_name = {**original.initializers, **dict(zip(free, ins, strict=True))}
    plan = lower(r.assignment, self_contained=True)  # type: ignore[attr-defined]
    args = [by_name[p.name] for p in plan.params if p.name not in plan.initializers]
    got = distir.execute(plan, args)
    for g, w in zip(got, distir.execute(original, list(ins)), strict=True):
        # float32, summed in another order (a fused product is one wider BLAS call): the
        # error scales with the result's largest magnitude, not each element's
        scale = 1.0 + float(np.max(np.abs(w), initial=0.0))
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * scale)


def test_search_no_worse_than_without_substitutions() -> None:
    step = distir.models.mlp(64, 128, 128, 128, num_layers=2)
    base = optimize(step, 2, beam=8, max_states=200)
    r = optimize_with_substitutions(step, 2, depth=1, beam=8, max_states=200,
                                    reuse_mesh=True)
    assert r.simulation.latency_s <= base.simulation.latency_s
    # the step itself, and each of its two products split by columns or by contraction
    assert r.stats["rewrite_search"]["scored"] == 5
    assert r.stats["rewrite_search"]["baseline_s"] == base.simulation.latency_s
    _same_step(step, r)


def _qkv(batch: int, d: int) -> Function:
    def body(b: object, p: dict[str, Value]) -> list[Value]:
        hs = [b.op("Relu", b.op("MatMul", p["x"], p[w])) for w in ("wq", "wk", "wv")]  # type: ignore[attr-defined]
        s = b.op("Add", b.op("Add", hs[0], hs[1]), hs[2])  # type: ignore[attr-defined]
        return [b.op("MatMul", s, p["wo"])]  # type: ignore[attr-defined]
    return example_fn({"x": (batch, d), "wq": (d, d), "wk": (d, d), "wv": (d, d),
                       "wo": (d, d)}, body)


def _train(f: Function) -> Function:
    from distir.transforms.training import training_step

    return training_step(f, loss="mse", optimizer="sgd", lr=0.1,
                         wrt=["wq", "wk", "wv", "wo"])


def test_fusing_products_strictly_helps() -> None:
    """Three products of one input (query/key/value-like) in a training step: fused into
    one wider product, the simulated step is faster (one product's fixed cost instead of
    three, by the fitted h100-sxm cost model), and the distributed plan still computes
    the original step."""
    fwd = _qkv(64, 256)
    r = optimize_with_substitutions(fwd, 1, derive=_train, depth=1,
                                    substitutions=["fuse_products"], beam=8, max_states=200)
    assert [s.split(" at ")[0] for s in r.stats["substitutions"]] == ["fuse_products"]
    assert r.simulation.latency_s < 0.9 * r.stats["rewrite_search"]["baseline_s"]
    _same_step(_train(fwd), r)


def test_errors() -> None:
    with pytest.raises(TransformError, match="unknown substitution 'nope'"):
        by_name(["nope"])
    fn = distir.models.mlp(4, 4, 4, 4, num_layers=1)
    with pytest.raises(ConfigError, match="give depth >= 0"):
        optimize_with_substitutions(fn, 2, depth=-1)
    with pytest.raises(ConfigError, match="budget_s 0"):
        optimize_with_substitutions(fn, 2, budget_s=0)


@pytest.mark.slow
def test_search_on_a_gpt2_training_step() -> None:
    """Substitutions on GPT-2's forward program, each scored as its training step: the
    plan is no slower than optimize's on the step itself, and computes that step."""
    from distir.models.gpt2 import GPT2Config
    from distir.transforms.training import training_step

    fwd = GPT2Config(n_layer=1, d_model=64, n_head=2, vocab_size=64, seq_len=8,
                     batch_size=2).build()
    names = [p.name for p in fwd.params if p.name != "input_ids"]

    def derive(f: Function) -> Function:
        return training_step(f, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                             reduction="mean")

    step = derive(fwd)
    base = optimize(step, 2, beam=8, max_states=200)
    r = optimize_with_substitutions(fwd, 2, derive=derive, depth=1, max_candidates=3,
                                    substitutions=["split_columns"], beam=8, max_states=200)
    assert r.stats["rewrite_search"]["scored"] == 3
    assert r.simulation.latency_s <= base.simulation.latency_s
    _same_step(step, r)
