"""The analysis behind the transform: batch inputs, Megatron layouts, layers, op classes;
and the shape of the output (stage functions called once per microbatch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import distir
from distir.analysis.interpreter import TypeInterpreter
from distir.ir import DType, FunctionBuilder, TensorType
from distir.transforms import analyze, dtp, tower
from distir.transforms.layout import Layout
from distir.transforms.layout_shape_rules import reshape_layout
from distir.transforms.structure import HOIST, MB, POST
from tests.transforms.helpers import small_gpt2

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _layouts(an: distir.transforms.Analysis) -> dict[str, str]:
    return {p.name: str(an.sharding.layout[p]) for p in an.fn.params}


def test_mlp_pairs_column_and_row_parallel_layers() -> None:
    fn = distir.models.mlp(batch_size=8, input_dim=4, hidden_dim=8, output_dim=4,
                           num_layers=5)
    an = analyze(fn)
    assert _layouts(an) == {"w0": "[_, t]", "w1": "[t, _]", "w2": "[_, t]", "w3": "[t, _]",
                            "w4": "[_, _]", "x": "[b, _]", "y": "[b, _]"}
    assert an.structure.num_layers == 5
    part = {v.name: p for v, p in an.sharding.partial.items()}
    assert part["h1"] == "t" and part["h3"] == "t" and "h0" not in part  # forward allreduce
    assert part["dw0"] == "b" and part["dw4"] == "b"  # summed over the batch
    kinds = {op.op_type: an.structure.kind[i] for i, op in enumerate(fn.ops)}
    assert kinds["MatMul"] == MB and kinds["SGDOptimizer"] == POST
    bwd = {fn.ops[i].op_type for i in an.structure.backward}
    assert bwd == {"MSELossGrad", "ReluGrad", "MatMulGrad"}


def test_gpt2_layers_heads_and_hoisted_values() -> None:
    fn, an, _, _ = small_gpt2(2)
    lay = _layouts(an)
    assert lay["h.0.attn.c_attn.weight"] == "[_, t] groups=3"
    assert lay["h.0.attn.c_attn.bias"] == "[t] groups=3"
    assert lay["h.0.attn.c_proj.weight"] == "[t, _]"
    assert lay["h.3.mlp.c_fc.weight"] == "[_, t]" and lay["h.3.mlp.c_proj.weight"] == "[t, _]"
    assert lay["wte"] == "[_, _]" and lay["input_ids"] == "[b, _]"
    assert an.structure.num_layers == 4
    by_name = {op.outputs[0].name: i for i, op in enumerate(fn.ops)}
    st = an.structure
    assert st.kind[by_name["h.0.attn.future"]] == HOIST  # the causal mask: once per device
    assert st.kind[by_name["lm_head.weight"]] == HOIST  # the tied head's Transpose
    assert [st.anchor[by_name[f"h.{i}.ln_1.out"]] for i in range(4)] == [1, 2, 3, 4]
    assert st.anchor[by_name["embed.tok"]] == 0 and st.anchor[by_name["logits"]] == 5
    heads = by_name["h.2.attn.q.heads"]
    assert str(an.sharding.layout[fn.ops[heads].outputs[0]]) == "[b, _, t, _]"


def test_layers_of_an_mlp_whose_last_layer_has_no_activation() -> None:
    an = analyze(distir.load(EXAMPLES / "mlp_step.dir").entry)
    assert an.structure.num_layers == 3


def test_reshape_moves_splits_onto_the_outer_axis_of_a_group() -> None:
    lay = Layout(("b", None, "t"))
    assert str(reshape_layout(lay, (4, 8, 16), (4, 8, 2, 8))) == "[b, _, t, _]"
    assert str(reshape_layout(lay, (4, 8, 16), (32, 16))) == "[b, t]"
    assert str(reshape_layout(Layout(("b", "t", None, None)), (4, 2, 8, 8),
                              (4, 16, 8))) == "[b, t, _]"


def test_calls_are_memoized_a_128_microbatch_pipeline() -> None:
    """128 microbatches: 128 calls of each stage function, no copies of their ops; the
    type checker evaluates each function body once per distinct argument types."""
    fn = distir.models.mlp(batch_size=256, input_dim=8, hidden_dim=16, output_dim=8,
                           num_layers=4)
    prog = tower.dtp(fn, dp=1, tp=2, pp=2, microbatches=128)
    calls = [op for op in prog.ops if op.callee is not None]
    assert len(calls) == 128 * 2 * 2
    names = sorted({c.callee.name for c in calls})  # type: ignore[union-attr]
    assert names == ["stage0_bwd", "stage0_bwd_acc", "stage0_fwd", "stage1_bwd",
                     "stage1_bwd_acc", "stage1_fwd"]
    interp = TypeInterpreter()
    interp.run(prog, [p.type for p in prog.params])
    # the 6 stage functions once each, and the 2 layer functions once per stage's devices
    assert sorted(v[0].name for v in interp.call_cache.values()) == sorted(
        names + ["layer0_fwd", "layer0_fwd", "layer1_fwd", "layer1_fwd"])
    assert prog.num_ops(inline_calls=True) > 10 * sum(len(f.ops) for f in prog.callees())


def test_calls_in_the_sequential_function_are_inlined() -> None:
    b = FunctionBuilder("dense")
    w, x = b.param("w"), b.param("x")
    dense = b.ret(b.op("Relu", b.op("MatMul", x, w, name="h"), name="a"))
    m = FunctionBuilder("main")
    ws = [m.param(f"w{i}", TensorType(DType.Float32, (8, 8), 0)) for i in range(2)]
    x = m.param("x", TensorType(DType.Float32, (4, 8), 0))
    a = m.call(dense, ws[0], x, name="a0")
    fn = m.ret(m.call(dense, ws[1], a, name="a1"))
    prog = dtp(fn, dp=2, tp=2, pp=2, self_contained=True)
    ins = distir.analysis.random_inputs(fn)
    np.testing.assert_allclose(distir.execute(prog, ins)[0], distir.execute(fn, ins)[0],
                               rtol=1e-5)


def test_repeated_layers_are_one_function() -> None:
    """GPT-2's blocks: one layer function shared by the stages, one call per layer; the
    column-parallel and row-parallel layers of an MLP: one function each."""
    _, an, _, _ = small_gpt2(2)
    prog = tower.dtp(an, tp=2, pp=2)
    fns = {f.name: f for f in distir.Module.of(prog)}
    assert set(fns) == {"main", "stage0_fwd", "stage1_fwd", "layer0_fwd"}
    for s in ("stage0_fwd", "stage1_fwd"):
        calls = [op for op in fns[s].ops if op.callee is not None]
        assert [c.callee.name for c in calls] == ["layer0_fwd"] * 2  # type: ignore[union-attr]
    assert [o.name for o in calls[1].outputs] == ["h.3.out_tp0", "h.3.out_tp1"]
    mlp = distir.models.mlp(batch_size=8, input_dim=8, hidden_dim=8, output_dim=8,
                            num_layers=6)
    fns = {f.name: f for f in distir.Module.of(tower.dtp(mlp, tp=2))}
    assert {"layer0_fwd", "layer1_fwd"} <= set(fns)
    assert [op.op_type for op in fns["layer1_fwd"].ops] == [
        "MatMul", "MatMul", "MPIAllreduce", "Relu", "Relu"]


def test_the_analysis_is_reused_across_configurations() -> None:
    fn = distir.models.mlp(batch_size=16, input_dim=4, hidden_dim=8, output_dim=4,
                           num_layers=4)
    an = analyze(fn)
    assert distir.dumps(dtp(an, 2, 2, 2, 2)) == distir.dumps(dtp(fn, 2, 2, 2, 2))
    assert distir.dumps(dtp(an, 1, 2, 4, 4)) == distir.dumps(dtp(fn, 1, 2, 4, 4))


def test_imported_model_with_bound_weights() -> None:
    """An imported 2-layer MLP whose weights are initializers: two layers (the last has no
    activation), and the self-contained program runs with the same bound weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((4, 8)).astype(np.float32)
    w2 = rng.standard_normal((8, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["a"]),
         helper.make_node("MatMul", ["a", "w2"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    fn = distir.import_onnx(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21)])).entry
    assert analyze(fn).structure.num_layers == 2
    x = rng.standard_normal((8, 4)).astype(np.float32)
    prog = dtp(fn, dp=2, tp=2, pp=2, microbatches=2, self_contained=True)
    np.testing.assert_allclose(distir.execute(prog, [x])[0], distir.execute(fn, [x])[0],
                               rtol=1e-5, atol=1e-5)


def test_returning_inputs_and_weights() -> None:
    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (8, 4), 0))
    w = b.param("w", TensorType(DType.Float32, (4, 4), 0))
    fn = b.ret(b.op("MatMul", x, w, name="h"), x, w)
    ins = distir.analysis.random_inputs(fn)
    for cfg in [(2, 2, 1, 2), (2, 1, 1, 1)]:
        got = distir.execute(dtp(fn, *cfg, self_contained=True), ins)
        for g, want in zip(got, distir.execute(fn, ins), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-6)
        distir.infer_types(dtp(fn, *cfg))
