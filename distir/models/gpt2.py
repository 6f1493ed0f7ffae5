"""GPT-2 inference, built as an ONNX graph and imported into DistIR.

The graph is the one exported GPT-2 models have, op for op: token and position embeddings
(``Gather``), then per layer a pre-LN attention block and MLP block with residual adds, a
final ``LayerNormalization`` and an LM head tied to the token embedding. Head split and
merge compute their target shapes at run time from ``Shape`` of the activation through
``Gather``/``Unsqueeze``/``Concat`` chains, as exporters write them; DistIR's type
propagation evaluates those chains on concrete values, so every shape is still known.

No weight is materialized: every weight is a graph input (an ONNX ``ValueInfo``), so the
175B preset costs no more memory to build than the 2-layer test model, and the weights are
parameters of the imported ``@main``.

Naming scheme (the contract for transforms; see ``docs/models.md``):

- graph inputs, in order: ``input_ids`` (Int64, ``(batch, seq)``), ``wte``, ``wpe``, then
  per layer ``h.{i}.ln_1.weight``, ``h.{i}.ln_1.bias``, ``h.{i}.attn.c_attn.weight``
  ``(d, 3d)``, ``h.{i}.attn.c_attn.bias``, ``h.{i}.attn.c_proj.weight`` ``(d, d)``,
  ``h.{i}.attn.c_proj.bias``, ``h.{i}.ln_2.weight``, ``h.{i}.ln_2.bias``,
  ``h.{i}.mlp.c_fc.weight`` ``(d, 4d)``, ``h.{i}.mlp.c_fc.bias``, ``h.{i}.mlp.c_proj.weight``
  ``(4d, d)``, ``h.{i}.mlp.c_proj.bias``; finally ``ln_f.weight``, ``ln_f.bias``;
- every value computed in layer ``i`` is named ``h.{i}.<part>`` (constants included, so a
  layer is self-contained); layer ``i`` reads the residual stream ``h.{i-1}.out``
  (``embed.out`` for layer 0) and writes ``h.{i}.out``; the result is ``logits``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from distir.errors import ConfigError
from distir.ir.core import Function
from distir.ir.types import DType

if TYPE_CHECKING:
    import onnx

__all__ = ["GPT2Config", "gpt2", "gpt2_onnx", "layer_of", "OPSET", "LAYER_WEIGHTS"]

OPSET = 21
"""The ONNX opset of the built graph (the spec's)."""

LAYER_WEIGHTS = (
    "ln_1.weight", "ln_1.bias",
    "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias",
)
"""The weights of one layer, in graph-input order; layer ``i``'s are ``h.{i}.<name>``."""


def layer_of(name: str | None) -> int | None:
    """The layer a value or weight belongs to by its name (``h.3.attn.q`` -> 3), or ``None``
    for the embeddings, the final LayerNorm and the LM head.

    >>> layer_of("h.12.mlp.c_fc.weight"), layer_of("embed.out"), layer_of("logits")
    (12, None, None)
    """
    if name is None or not name.startswith("h."):
        return None
    head, _, _ = name[2:].partition(".")
    return int(head) if head.isdigit() else None


@dataclass(frozen=True, slots=True)
class GPT2Config:
    """The sizes of a GPT-2 inference step.

    ``seq_len`` tokens per sequence (at most ``n_positions``, the context length; ``None``
    means ``seq_len``, see ``n_ctx``); ``d_model`` must be divisible by ``n_head``. Weights and
    activations are ``dtype``; token ids are Int64. ``gelu`` is the ``approximate``
    attribute of ``Gelu`` (GPT-2 uses the tanh approximation); ``eps`` is LayerNorm's.
    """

    n_layer: int
    d_model: int
    n_head: int
    vocab_size: int
    seq_len: int
    batch_size: int
    dtype: DType = DType.Float32
    n_positions: int | None = None
    gelu: str = "tanh"
    eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("n_layer", "d_model", "n_head", "vocab_size", "seq_len", "batch_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"GPT-2 {name} must be a positive integer, got {v!r}")
        if self.d_model % self.n_head:
            raise ConfigError(f"GPT-2 d_model {self.d_model} is not divisible by n_head "
                              f"{self.n_head}: choose a head count that divides it")
        if self.n_positions is not None and self.n_positions < self.seq_len:
            raise ConfigError(f"GPT-2 seq_len {self.seq_len} exceeds the context length "
                              f"n_positions={self.n_positions}")
        if not isinstance(self.dtype, DType) or not self.dtype.is_float:
            raise ConfigError(f"GPT-2 dtype must be a floating-point DType, got {self.dtype!r}")
        if self.gelu not in ("tanh", "none"):
            raise ConfigError(f"GPT-2 gelu must be 'tanh' or 'none', got {self.gelu!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def n_ctx(self) -> int:
        """The context length: rows of the position embedding ``wpe``."""
        return self.seq_len if self.n_positions is None else self.n_positions

    @property
    def num_params(self) -> int:
        """Weight elements: embeddings (the LM head is tied to ``wte``), 12·d² + 13·d per
        layer, and the final LayerNorm."""
        d = self.d_model
        return ((self.vocab_size + self.n_ctx) * d + self.n_layer * (12 * d * d + 13 * d)
                + 2 * d)

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight's shape, by graph-input name, in graph-input order."""
        d = self.d_model
        shapes: dict[str, tuple[int, ...]] = {"wte": (self.vocab_size, d),
                                              "wpe": (self.n_ctx, d)}
        per_layer = {"ln_1.weight": (d,), "ln_1.bias": (d,),
                     "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
                     "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,),
                     "ln_2.weight": (d,), "ln_2.bias": (d,),
                     "mlp.c_fc.weight": (d, 4 * d), "mlp.c_fc.bias": (4 * d,),
                     "mlp.c_proj.weight": (4 * d, d), "mlp.c_proj.bias": (d,)}
        for i in range(self.n_layer):
            for name in LAYER_WEIGHTS:
                shapes[f"h.{i}.{name}"] = per_layer[name]
        shapes["ln_f.weight"] = (d,)
        shapes["ln_f.bias"] = (d,)
        return shapes

    def example_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Inputs for every graph input, in order: token ids uniform in the vocabulary, and
        weights drawn as GPT-2 initializes them (normal with std 0.02; LayerNorm scales near
        1). Meant for small configurations: the arrays are materialized."""
        rng = np.random.default_rng(seed)
        dt = self.dtype.np
        out = [rng.integers(0, self.vocab_size, (self.batch_size, self.seq_len),
                            dtype=np.int64)]
        for name, shape in self.weight_shapes().items():
            w = rng.normal(0.0, 0.02, shape)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                w += 1.0
            out.append(w.astype(dt))
        return out

    def onnx_model(self) -> onnx.ModelProto:
        """The inference graph as an ONNX model (opset 21), weights as graph inputs."""
        return _GraphBuilder(self).model()

    def build(self) -> Function:
        """The inference graph imported into DistIR: ``@main(input_ids, weights...)``
        returning ``logits`` of shape ``(batch, seq, vocab)``."""
        from distir.importers.onnx import import_onnx

        return import_onnx(self.onnx_model()).entry


def gpt2_onnx(n_layer: int, d_model: int, n_head: int, vocab_size: int, seq_len: int,
              batch_size: int, dtype: DType = DType.Float32, **kw: Any) -> onnx.ModelProto:
    """``GPT2Config(...).onnx_model()``: the ONNX graph, not imported."""
    return GPT2Config(n_layer, d_model, n_head, vocab_size, seq_len, batch_size, dtype,
                      **kw).onnx_model()


def gpt2(n_layer: int, d_model: int, n_head: int, vocab_size: int, seq_len: int,
         batch_size: int, dtype: DType = DType.Float32, **kw: Any) -> Function:
    """A GPT-2 inference step as a DistIR function: ``GPT2Config(...).build()``.

    ``kw`` are the other fields of ``GPT2Config`` (``n_positions``, ``gelu``, ``eps``).
    """
    return GPT2Config(n_layer, d_model, n_head, vocab_size, seq_len, batch_size, dtype,
                      **kw).build()


def _lowest(dtype: DType) -> float:
    """The most negative finite value of a float dtype (the value of masked scores)."""
    if dtype is DType.BFloat16:
        import ml_dtypes

        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)
    return float(np.finfo(dtype.np).min)


class _GraphBuilder:
    """Writes the ONNX graph of one configuration. Value names are unique by construction
    (every name carries its layer prefix); node names repeat their first output's name."""

    def __init__(self, cfg: GPT2Config) -> None:
        from onnx import TensorProto, helper, numpy_helper

        self.cfg = cfg
        self.helper = helper
        self.numpy_helper = numpy_helper
        self.elem = helper.np_dtype_to_tensor_dtype(cfg.dtype.np)
        self.int64 = TensorProto.INT64
        self.nodes: list[Any] = []
        self._consts: set[str] = set()

    # -- primitives -------------------------------------------------------------------
    def node(self, op: str, inputs: list[str], outputs: list[str] | str, **attrs: Any) -> Any:
        outs = [outputs] if isinstance(outputs, str) else outputs
        self.nodes.append(self.helper.make_node(op, inputs, outs, name=outs[0], **attrs))
        return outs[0] if isinstance(outputs, str) else outs

    def const(self, name: str, value: np.ndarray) -> str:
        """A ``Constant`` node named ``name`` holding ``value``, made once."""
        if name not in self._consts:
            self._consts.add(name)
            self.node("Constant", [], name, value=self.numpy_helper.from_array(value, name))
        return name

    def ints(self, scope: str, v: int) -> str:
        """A 1-element Int64 constant ``[v]`` (Unsqueeze axes, pieces of a shape)."""
        return self.const(f"{scope}int{v}.1d", np.array([v], dtype=np.int64))

    def scalar_int(self, scope: str, v: int) -> str:
        """A 0-d Int64 constant (a ``Gather`` index, a ``Range`` bound)."""
        return self.const(f"{scope}int{v}", np.array(v, dtype=np.int64))

    def scalar(self, name: str, v: float) -> str:
        """A 0-d constant of the model's dtype."""
        return self.const(name, np.array(v, dtype=self.cfg.dtype.np))

    def linear(self, x: str, prefix: str, out: str) -> str:
        """``x @ {prefix}.weight + {prefix}.bias`` (a Conv1D of GPT-2: weight ``(in, out)``)."""
        mm = self.node("MatMul", [x, f"{prefix}.weight"], f"{prefix}.mm")
        return self.node("Add", [mm, f"{prefix}.bias"], out)

    def layer_norm(self, x: str, prefix: str) -> str:
        return self.node("LayerNormalization", [x, f"{prefix}.weight", f"{prefix}.bias"],
                         f"{prefix}.out", axis=-1, epsilon=self.cfg.eps)

    def dims(self, scope: str, x: str, name: str, *axes: int) -> list[str]:
        """``[Unsqueeze(Gather(Shape(x), a), [0]) for a in axes]``: 1-element Int64 tensors
        holding dimensions of ``x``, computed at run time as exporters do."""
        shape = self.node("Shape", [x], f"{scope}{name}.shape")
        zero_axis = self.ints(scope, 0)
        out = []
        for a in axes:
            d = self.node("Gather", [shape, self.scalar_int(scope, a)],
                          f"{scope}{name}.dim{a}", axis=0)
            out.append(self.node("Unsqueeze", [d, zero_axis], f"{scope}{name}.dim{a}.1d"))
        return out

    # -- blocks -----------------------------------------------------------------------
    def split_heads(self, p: str, x: str, name: str, perm: list[int]) -> str:
        """``(B, T, D) -> (B, T, H, hd)`` through the run-time shape ``(B, T, -1, hd)``, then
        ``Transpose``. The head count is inferred from the width, so a graph whose columns
        are sharded by heads (tensor parallelism) needs no change to this chain."""
        b, t = self.dims(p, x, name, 0, 1)
        hd = self.const(f"{p}attn.head_dim", np.array([self.cfg.head_dim], dtype=np.int64))
        shape = self.node("Concat", [b, t, self.ints(p, -1), hd], f"{p}{name}.heads_shape",
                          axis=0)
        r = self.node("Reshape", [x, shape], f"{p}{name}.heads")
        return self.node("Transpose", [r], f"{p}{name}.heads_t", perm=perm)

    def causal_mask(self, p: str, scores: str) -> str:
        """A Bool ``(T, T)`` tensor, true where a key comes after its query (masked)."""
        shape = self.node("Shape", [scores], f"{p}attn.scaled.shape")
        tq = self.node("Gather", [shape, self.scalar_int(p, 2)], f"{p}attn.q_len", axis=0)
        tk = self.node("Gather", [shape, self.scalar_int(p, 3)], f"{p}attn.k_len", axis=0)
        zero, one = self.scalar_int(p, 0), self.scalar_int(p, 1)
        q_pos = self.node("Range", [zero, tq, one], f"{p}attn.q_pos")
        k_pos = self.node("Range", [zero, tk, one], f"{p}attn.k_pos")
        rows = self.node("Unsqueeze", [q_pos, self.ints(p, 1)], f"{p}attn.q_pos.col")
        cols = self.node("Unsqueeze", [k_pos, self.ints(p, 0)], f"{p}attn.k_pos.row")
        return self.node("Less", [rows, cols], f"{p}attn.future")

    def attention(self, p: str, x: str) -> str:
        cfg = self.cfg
        ln = self.layer_norm(x, f"{p}ln_1")
        qkv = self.linear(ln, f"{p}attn.c_attn", f"{p}attn.qkv")
        q, k, v = self.node("Split", [qkv], [f"{p}attn.q", f"{p}attn.k", f"{p}attn.v"],
                            axis=2, num_outputs=3)
        qh = self.split_heads(p, q, "attn.q", [0, 2, 1, 3])  # (B, H, T, hd)
        kh = self.split_heads(p, k, "attn.k", [0, 2, 3, 1])  # (B, H, hd, T)
        vh = self.split_heads(p, v, "attn.v", [0, 2, 1, 3])  # (B, H, T, hd)
        scores = self.node("MatMul", [qh, kh], f"{p}attn.scores")
        scaled = self.node("Div", [scores, self.scalar(f"{p}attn.scale", math.sqrt(cfg.head_dim))],
                           f"{p}attn.scaled")
        future = self.causal_mask(p, scaled)
        neg = self.scalar(f"{p}attn.mask_value", _lowest(cfg.dtype))
        masked = self.node("Where", [future, neg, scaled], f"{p}attn.masked")
        probs = self.node("Softmax", [masked], f"{p}attn.probs", axis=-1)
        ctx = self.node("MatMul", [probs, vh], f"{p}attn.ctx")  # (B, H, T, hd)
        ctx_t = self.node("Transpose", [ctx], f"{p}attn.ctx_t", perm=[0, 2, 1, 3])
        b, t = self.dims(p, ctx_t, "attn.ctx_t", 0, 1)
        # (B, T, -1): the width is inferred, as the head count is in split_heads.
        shape = self.node("Concat", [b, t, self.ints(p, -1)], f"{p}attn.merge_shape", axis=0)
        merged = self.node("Reshape", [ctx_t, shape], f"{p}attn.merged")  # (B, T, D)
        return self.linear(merged, f"{p}attn.c_proj", f"{p}attn.out")

    def mlp(self, p: str, x: str) -> str:
        ln = self.layer_norm(x, f"{p}ln_2")
        fc = self.linear(ln, f"{p}mlp.c_fc", f"{p}mlp.fc")
        act = self.node("Gelu", [fc], f"{p}mlp.act", approximate=self.cfg.gelu)
        return self.linear(act, f"{p}mlp.c_proj", f"{p}mlp.out")

    def layer(self, i: int, x: str) -> str:
        p = f"h.{i}."
        mid = self.node("Add", [x, self.attention(p, x)], f"{p}attn.residual")
        return self.node("Add", [mid, self.mlp(p, mid)], f"{p}out")

    def embed(self) -> str:
        p = "embed."
        tok = self.node("Gather", ["wte", "input_ids"], f"{p}tok", axis=0)  # (B, T, D)
        shape = self.node("Shape", ["input_ids"], f"{p}ids.shape")
        t = self.node("Gather", [shape, self.scalar_int(p, 1)], f"{p}seq_len", axis=0)
        pos = self.node("Range", [self.scalar_int(p, 0), t, self.scalar_int(p, 1)],
                        f"{p}positions")
        pos_ids = self.node("Unsqueeze", [pos, self.ints(p, 0)], f"{p}position_ids")
        pe = self.node("Gather", ["wpe", pos_ids], f"{p}pos", axis=0)  # (1, T, D)
        return self.node("Add", [tok, pe], f"{p}out")

    def model(self) -> onnx.ModelProto:
        cfg, helper = self.cfg, self.helper
        x = self.embed()
        for i in range(cfg.n_layer):
            x = self.layer(i, x)
        x = self.layer_norm(x, "ln_f")
        wte_t = self.node("Transpose", ["wte"], "lm_head.weight", perm=[1, 0])
        logits = self.node("MatMul", [x, wte_t], "logits")

        inputs = [helper.make_tensor_value_info("input_ids", self.int64,
                                                [cfg.batch_size, cfg.seq_len])]
        inputs += [helper.make_tensor_value_info(n, self.elem, list(s))
                   for n, s in cfg.weight_shapes().items()]
        output = helper.make_tensor_value_info(logits, self.elem,
                                               [cfg.batch_size, cfg.seq_len, cfg.vocab_size])
        graph = helper.make_graph(self.nodes, "gpt2", inputs, [output])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                 producer_name="distir.models.gpt2", ir_version=10)
