"""The GPT-2 builder: the ONNX graph is valid and runs in onnxruntime, the imported DistIR
function matches onnxruntime on it, layers follow the documented naming scheme, and the
presets type-propagate with every shape known."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import distir
from distir.analysis import type_env
from distir.analysis.values import type_of
from distir.errors import ConfigError
from distir.ir import DType, TensorType
from distir.models import GPT2Config, gpt2, presets
from distir.models.gpt2 import LAYER_WEIGHTS, layer_of

SMALL = GPT2Config(n_layer=2, d_model=64, n_head=4, vocab_size=100, seq_len=16,
                   batch_size=2)


def run_ort(model: onnx.ModelProto, inputs: list[np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    (out,) = sess.run(None, dict(zip(names, inputs, strict=True)))
    return out


@pytest.fixture(scope="module")
def small_model() -> onnx.ModelProto:
    return SMALL.onnx_model()


def test_onnx_graph_is_valid_and_weightless(small_model: onnx.ModelProto) -> None:
    onnx.checker.check_model(small_model, full_check=True)
    assert small_model.opset_import[0].version == 21
    assert len(small_model.graph.initializer) == 0  # weights are graph inputs
    names = [i.name for i in small_model.graph.input]
    assert names == ["input_ids", *SMALL.weight_shapes()]
    ops = Counter(n.op_type for n in small_model.graph.node)
    # The exporters' run-time shape chains, one per head split/merge.
    assert ops["Shape"] == 1 + SMALL.n_layer * 5
    assert ops["Reshape"] == SMALL.n_layer * 4
    assert ops["Concat"] == SMALL.n_layer * 4
    for op in ("Gather", "Unsqueeze", "Range", "Split", "Transpose", "Softmax", "Where",
               "Less", "Div", "Gelu", "LayerNormalization"):
        assert ops[op] > 0, op
    inferred = onnx.shape_inference.infer_shapes(small_model, strict_mode=True)
    (out,) = inferred.graph.output
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [2, 16, 100]


@pytest.mark.parametrize("cfg", [
    SMALL,
    GPT2Config(n_layer=1, d_model=48, n_head=3, vocab_size=37, seq_len=7, batch_size=3,
               n_positions=9, gelu="none"),
    GPT2Config(n_layer=1, d_model=32, n_head=2, vocab_size=50, seq_len=8, batch_size=1,
               dtype=DType.Float64),
    GPT2Config(n_layer=1, d_model=32, n_head=2, vocab_size=50, seq_len=8, batch_size=2,
               dtype=DType.Float16),
], ids=["small", "odd-sizes", "float64", "float16"])
def test_imported_graph_matches_onnxruntime(cfg: GPT2Config) -> None:
    model = cfg.onnx_model()
    inputs = cfg.example_inputs(seed=1)
    want = run_ort(model, inputs)
    fn = distir.import_onnx(model).entry
    distir.verify(fn)
    assert distir.infer_types(fn) == (
        TensorType(cfg.dtype, (cfg.batch_size, cfg.seq_len, cfg.vocab_size), 0),)
    (got,) = distir.execute(fn, inputs)
    assert got.dtype == cfg.dtype.np and got.shape == want.shape
    tol = {DType.Float64: 1e-10, DType.Float32: 1e-4, DType.Float16: 3e-3}[cfg.dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert np.abs(want).max() > 0.1  # not a degenerate comparison


def test_bfloat16_graph_types_and_runs() -> None:
    # onnxruntime has no BFloat16 kernels on CPU: compare with the Float32 model instead.
    cfg = GPT2Config(n_layer=1, d_model=32, n_head=2, vocab_size=50, seq_len=8, batch_size=2,
                     dtype=DType.BFloat16)
    fn = cfg.build()
    assert distir.infer_types(fn)[0].dtype is DType.BFloat16
    inputs = cfg.example_inputs(seed=3)
    (got,) = distir.execute(fn, inputs)
    f32 = GPT2Config(1, 32, 2, 50, 8, 2)
    want = run_ort(f32.onnx_model(), [inputs[0]] + [w.astype(np.float32) for w in inputs[1:]])
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0.02, atol=0.01)


def test_graph_is_gpt2_as_torch_computes_it() -> None:
    """The ONNX graph, given the same weights, computes what the torch GPT-2 computes: the
    mask direction, head layout and tied LM head are GPT-2's."""
    import torch

    from distir.models.torch_gpt2 import GPT2, load_weights

    inputs = SMALL.example_inputs(seed=2)
    model = load_weights(GPT2(SMALL), inputs)
    with torch.no_grad():
        want = model(torch.from_numpy(inputs[0])).numpy()
    np.testing.assert_allclose(run_ort(SMALL.onnx_model(), inputs), want, rtol=1e-4,
                               atol=1e-5)


def test_naming_scheme() -> None:
    fn = gpt2(n_layer=3, d_model=32, n_head=4, vocab_size=20, seq_len=8, batch_size=2)
    params = [p.name for p in fn.params]
    assert params[:3] == ["input_ids", "wte", "wpe"]
    assert params[3:3 + len(LAYER_WEIGHTS)] == [f"h.0.{w}" for w in LAYER_WEIGHTS]
    assert params[-2:] == ["ln_f.weight", "ln_f.bias"]
    assert [r.name for r in fn.returns] == ["logits"]
    defined = [v.name for op in fn.ops for v in op.outputs]
    assert len(set(defined)) == len(defined)
    # Ops come in layer order, each layer's values prefixed with it; layer i reads only the
    # residual stream of the previous layer (and its own weights and constants).
    seen_layers: list[int] = []
    for op in fn.ops:
        i = layer_of(op.outputs[0].name)
        if i is None:
            continue
        if not seen_layers or seen_layers[-1] != i:
            seen_layers.append(i)
        prev_out = "embed.out" if i == 0 else f"h.{i - 1}.out"
        for v in op.inputs:
            assert v is not None
            assert layer_of(v.name) == i or v.name == prev_out, (
                f"{op.outputs[0].name} reads {v.name}")
    assert seen_layers == [0, 1, 2]
    assert {"h.1.attn.qkv", "h.1.attn.q", "h.1.attn.probs", "h.1.attn.out",
            "h.1.attn.residual", "h.1.mlp.fc", "h.1.mlp.act", "h.1.mlp.out",
            "h.1.out"} <= set(defined)


@pytest.mark.parametrize("name", presets.names("gpt2"))
def test_gpt2_presets_type_with_every_shape_known(name: str) -> None:
    cfg = presets.get(name, batch_size=4)
    fn = cfg.build()
    assert len(fn.params) == 1 + len(cfg.weight_shapes())
    env = type_env(fn)
    values = list(fn.params) + [v for op in fn.ops for v in op.outputs]
    assert all(isinstance(type_of(env[v]), TensorType) for v in values)
    by_name = {v.name: type_of(env[v]) for v in values}
    d, t = cfg.d_model, cfg.seq_len
    last = cfg.n_layer - 1
    assert by_name[f"h.{last}.attn.probs"].shape == (4, cfg.n_head, t, t)
    assert by_name[f"h.{last}.attn.merged"].shape == (4, t, d)
    assert by_name[f"h.{last}.mlp.act"].shape == (4, t, 4 * d)
    assert by_name["logits"] == TensorType(DType.Float32, (4, t, 50257), 0)


@pytest.mark.parametrize("kw, pattern", [
    ({"d_model": 50}, "d_model 50 is not divisible by n_head 4"),
    ({"n_layer": 0}, "n_layer must be a positive integer"),
    ({"n_positions": 8}, "seq_len 16 exceeds the context length n_positions=8"),
    ({"dtype": DType.Int32}, "dtype must be a floating-point DType"),
    ({"gelu": "erf"}, "gelu must be 'tanh' or 'none'"),
])
def test_bad_config_is_one_line_error(kw: dict, pattern: str) -> None:
    args = {"n_layer": 1, "d_model": 64, "n_head": 4, "vocab_size": 10, "seq_len": 16,
            "batch_size": 1} | kw
    with pytest.raises(ConfigError, match=pattern) as e:
        GPT2Config(**args)
    assert "\n" not in str(e.value)
