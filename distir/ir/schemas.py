"""One table of op signatures: arity, attributes, result count.

ONNX ops come from ``_onnx_schemas.py`` (generated from ``onnx.defs`` at opset 21);
communication and training ops are declared here. The verifier and the builder consult this
table; rule tables (types, numpy, cost, torch) live in their own modules, keyed by op name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distir.ir._onnx_schemas import ONNX_SCHEMAS, OPSET

__all__ = ["AttrSpec", "OpSchema", "SCHEMAS", "get_schema", "OPSET"]

# Attribute kinds: int, float, string, tensor, ints, floats, strings, dtype, device, devices.


@dataclass(frozen=True, slots=True)
class AttrSpec:
    name: str
    kind: str
    required: bool = False
    default: Any = None


@dataclass(frozen=True, slots=True)
class OpSchema:
    """An op's signature.

    ``max_inputs``/``max_outputs`` of ``None`` mean variadic. ``outputs_from`` names how a
    variadic result count is fixed: ``"inputs"`` (one result per input), ``"attr:NAME"`` (the
    value of an int attribute, or the length of a list attribute).
    """

    name: str
    domain: str
    min_inputs: int
    max_inputs: int | None
    min_outputs: int
    max_outputs: int | None
    attrs: tuple[AttrSpec, ...] = ()
    outputs_from: str | None = None
    input_names: tuple[str, ...] = ()
    doc: str = ""
    attr_map: dict[str, AttrSpec] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        self.attr_map.update({a.name: a for a in self.attrs})

    def arity_str(self) -> str:
        lo, hi = self.min_inputs, self.max_inputs
        if hi is None:
            return f"at least {lo} input{'s' * (lo != 1)}"
        if lo == hi:
            return f"{lo} input{'s' * (lo != 1)}"
        return f"{lo} to {hi} inputs"

    def expected_outputs(self, n_inputs: int, attrs: dict[str, Any]) -> tuple[int, int | None]:
        """The allowed result count ``(lo, hi)`` for these inputs and attributes."""
        src = self.outputs_from
        if src == "inputs":
            return n_inputs, n_inputs
        if src is not None and src.startswith("attr:"):
            v = attrs.get(src[5:])
            if isinstance(v, int) and not isinstance(v, bool):
                return v, v
            if isinstance(v, tuple):
                return len(v), len(v)
        return self.min_outputs, self.max_outputs

    def default(self, attr: str) -> Any:
        spec = self.attr_map.get(attr)
        return None if spec is None else spec.default


def _onnx(name: str, d: dict[str, Any]) -> OpSchema:
    attrs = tuple(AttrSpec(n, k, r, dv) for (n, k, r, dv) in d["attrs"])
    outputs_from = None
    if name == "Split":
        outputs_from = "attr:num_outputs"
    if name == "Constant":
        # DistIR places an input-less op with its ``device`` attribute.
        attrs = attrs + (AttrSpec("device", "device", False, 0),)
    return OpSchema(
        name=name,
        domain="onnx",
        min_inputs=d["inputs"][0],
        max_inputs=d["inputs"][1],
        min_outputs=d["outputs"][0],
        max_outputs=d["outputs"][1],
        attrs=attrs,
        outputs_from=outputs_from,
        input_names=d["input_names"],
    )


def _op(name: str, domain: str, ins: tuple[int, int | None], outs: tuple[int, int | None],
        attrs: tuple[AttrSpec, ...] = (), outputs_from: str | None = None,
        doc: str = "") -> OpSchema:
    return OpSchema(name, domain, ins[0], ins[1], outs[0], outs[1], attrs, outputs_from,
                    doc=doc)


_A = AttrSpec
_VARIADIC = (1, None)
_DISTIR_OPS = [
    # Communication (synchronous across the devices they touch).
    _op("Send", "comm", (1, 2), (1, 1), (_A("device", "device"),),
        doc="the value, moved to `device`, or to the device of the second input"),
    _op("MPIAllreduce", "comm", _VARIADIC, _VARIADIC, (), "inputs",
        doc="n sums, one on each input's device"),
    _op("MPIAllreduceBucket", "comm", _VARIADIC, _VARIADIC, (_A("tensors", "int", True),),
        "inputs", doc="`tensors` all-reduces fused in one collective: the inputs are the "
        "members one after another, each member one tensor per device (the same devices in "
        "the same order, one dtype); result i is the sum of input i's member, on input i's "
        "device"),
    _op("ReplicaAllreduce", "comm", (1, 1), (1, 1), (_A("devices", "devices", True),),
        doc="in a program that writes one of several identical replicas "
        "(`dtp_replica`), this replica's part of an all-reduce over `devices` (the "
        "input's device and its copies on the other replicas): the sum, on the input's "
        "device; timed as `MPIAllreduce` over `devices`, not executable"),
    _op("ReplicaAllgather", "comm", (1, 1), (1, 1),
        (_A("devices", "devices", True), _A("axis", "int", False, 0)),
        doc="in a program that writes one of several identical replicas "
        "(`dtp_replica`), this replica's part of an all-gather along `axis` over `devices` "
        "(as `ReplicaAllreduce`): the concatenation of every listed device's copy in the "
        "listed order, `len(devices)` times the input's size along `axis`, on the input's "
        "device; timed as `MPIAllgather` over `devices`, not executable"),
    _op("PeerAllreduce", "comm", (1, 1), (1, 1), (_A("peers", "int", True),),
        doc="in a program that writes rank 0 of `peers` identical tensor-parallel ranks "
        "(`dtp_replica`), its part of an all-reduce over the input's device and the next "
        "`peers - 1` devices (the ranks' copies): the sum, on the input's device; timed as "
        "`MPIAllreduce` over those devices, not executable"),
    _op("PeerAllgather", "comm", (1, 1), (1, 1),
        (_A("axis", "int", False, 0), _A("peers", "int", True)),
        doc="rank 0's part of an all-gather along `axis` over the input's device and the "
        "next `peers - 1` devices (as `PeerAllreduce`): the concatenation, `peers` times "
        "the input's size along `axis`, on the input's device; timed as `MPIAllgather`, "
        "not executable"),
    _op("MPIAllgather", "comm", _VARIADIC, _VARIADIC, (_A("axis", "int", False, 0),), "inputs",
        doc="n copies of the concatenation along `axis`"),
    _op("MPIReduceScatter", "comm", _VARIADIC, _VARIADIC, (_A("axis", "int", False, 0),),
        "inputs", doc="n shards of the sum, shard i on device i"),
    _op("MPIBroadcast", "comm", (1, 1), _VARIADIC, (_A("devices", "devices", True),),
        "attr:devices", doc="one copy per listed device"),
    _op("MPIScatter", "comm", (1, 1), _VARIADIC,
        (_A("axis", "int", False, 0), _A("devices", "devices", True)), "attr:devices",
        doc="equal shards along `axis`, shard i on devices[i]"),
    _op("MPIGather", "comm", _VARIADIC, (1, 1),
        (_A("axis", "int", False, 0), _A("device", "device", True)),
        doc="the concatenation on `device`"),
    _op("MPIReduce", "comm", _VARIADIC, (1, 1), (_A("device", "device", True),),
        doc="the sum on `device`"),
    # Training.
    _op("MatMulGrad", "train", (3, 3), (2, 2), doc="da, db of MatMul(a, b) given dy"),
    _op("GemmGrad", "train", (3, 4), (2, 3),
        (_A("alpha", "float", False, 1.0), _A("beta", "float", False, 1.0),
         _A("transA", "int", False, 0), _A("transB", "int", False, 0)),
        doc="da, db[, dc] of Gemm(a, b[, c]) given dy (inputs a, b, [c,] dy)"),
    _op("ReluGrad", "train", (2, 2), (1, 1), doc="dx of Relu(x) given dy"),
    _op("GeluGrad", "train", (2, 2), (1, 1), (_A("approximate", "string", False, "none"),),
        doc="dx of Gelu(x) given dy"),
    _op("ConvGrad", "train", (3, 3), (2, 2),
        (_A("strides", "ints", True), _A("pads", "ints", True), _A("dilations", "ints", True),
         _A("group", "int", False, 1)),
        doc="dx, dw of Conv(x, w) given dy (explicit begin and end pads; no bias)"),
    _op("MaxPoolGrad", "train", (2, 2), (1, 1),
        (_A("kernel_shape", "ints", True), _A("strides", "ints", True),
         _A("pads", "ints", True), _A("dilations", "ints", True)),
        doc="dx of MaxPool(x) given dy: dy routed to the first maximum of each window"),
    _op("AveragePoolGrad", "train", (2, 2), (1, 1),
        (_A("kernel_shape", "ints", True), _A("strides", "ints", True),
         _A("pads", "ints", True), _A("count_include_pad", "int", False, 0)),
        doc="dx of AveragePool(x) given dy: dy spread evenly over each window"),
    _op("LayerNormGrad", "train", (3, 3), (3, 3),
        (_A("axis", "int", False, -1), _A("epsilon", "float", False, 1e-5)),
        doc="dx, dscale, dbias of LayerNormalization(x, scale, bias) given dy (inputs x, "
            "scale, dy; statistics recomputed from x)"),
    _op("BatchNormGrad", "train", (3, 3), (3, 3), (_A("epsilon", "float", False, 1e-5),),
        doc="dx, dscale, dbias of BatchNormalization(x, scale, bias) in training mode (batch "
            "statistics over every axis but 1, recomputed from x) given dy; inputs x, scale, "
            "dy"),
    _op("SoftmaxGrad", "train", (2, 2), (1, 1), (_A("axis", "int", False, -1),),
        doc="dx of y = Softmax(x) given y and dy: y * (dy - sum(dy * y))"),
    _op("LogSoftmaxGrad", "train", (2, 2), (1, 1), (_A("axis", "int", False, -1),),
        doc="dx of y = LogSoftmax(x) given y and dy: dy - exp(y) * sum(dy)"),
    _op("MSELoss", "train", (2, 2), (1, 1), (_A("reduction", "string", False, "sum"),),
        doc="0.5 * sum((p - y)^2) (or its mean)"),
    _op("MSELossGrad", "train", (2, 2), (1, 1), (_A("reduction", "string", False, "sum"),),
        doc="p - y (divided by the element count for mean)"),
    _op("SoftmaxCrossEntropyLoss", "train", (2, 2), (1, 1),
        (_A("reduction", "string", False, "sum"),), doc="cross entropy of softmax(logits)"),
    _op("SoftmaxCrossEntropyLossGrad", "train", (2, 2), (1, 1),
        (_A("reduction", "string", False, "sum"),), doc="dlogits"),
    _op("SGDOptimizer", "train", (2, 2), (1, 1), (_A("lr", "float", True),),
        doc="w - lr * dw"),
    _op("AdamOptimizer", "train", (5, 5), (3, 3),
        (_A("lr", "float", True), _A("beta1", "float", False, 0.9),
         _A("beta2", "float", False, 0.999), _A("eps", "float", False, 1e-8),
         _A("weight_decay", "float", False, 0.0)),
        doc="torch.optim.Adam's update; inputs w, dw, m, v, step (1 for the first step)"),
]

SCHEMAS: dict[str, OpSchema] = {n: _onnx(n, d) for n, d in ONNX_SCHEMAS.items()}
SCHEMAS.update({s.name: s for s in _DISTIR_OPS})

COMM_OPS = frozenset(s.name for s in _DISTIR_OPS if s.domain == "comm")

ASYNC_OPS = frozenset({"MPIAllreduce", "MPIAllreduceBucket", "ReplicaAllreduce",
                       "ReplicaAllgather", "PeerAllreduce", "MPIReduceScatter", "MPIAllgather",
                       "PeerAllgather"})
"""Collectives (the all-reduces, bucketed or not, reduce-scatter and all-gather) that run
on each device's communication stream, overlapping the compute ops after them until the
first op that reads their result (distir's extension of the spec's execution semantics;
see docs/simulation.md, "Overlapping communication"). The simulator and the PyTorch
backend (an ``async_op`` collective, waited for at the first use of its result) both
follow it."""

FOLDED_COLLECTIVES = {"ReplicaAllreduce": "MPIAllreduce", "ReplicaAllgather": "MPIAllgather",
                      "PeerAllreduce": "MPIAllreduce", "PeerAllgather": "MPIAllgather"}
"""The collectives of a program that writes one of several identical copies (data-parallel
replicas, tensor-parallel ranks: ``distir.analysis.replicas``), each standing for this
collective of the program of every copy: timed, issued and traced as it is."""


def get_schema(name: str) -> OpSchema | None:
    return SCHEMAS.get(name)
