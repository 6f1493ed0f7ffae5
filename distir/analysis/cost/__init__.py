"""Cost rules: how long one op takes on a hardware profile.

``COST_RULES`` is a table keyed by op name, filled by ``@COST_RULES.register(...)`` with one
rule per op family (``compute.py``: matrix products, convolution, memory-bound kernels,
views; ``comm.py``: transfers and collectives). Every rule is called as::

    rule(op_type, ins, outs, attrs, hw) -> OpCost

with ``ins`` the input types (``None`` for an omitted optional input), ``outs`` the result
types, ``attrs`` the attributes with schema defaults, ``hw`` a ``Hardware`` profile. Rules
are pure: the simulator memoizes them by ``(op, argument values, attributes)``. A rule
registered with ``skips_unused=True`` receives ``None`` in ``outs`` for a result the
program never uses, and costs only what is computed: the PyTorch lowering of such an op
skips that result too (``_, %dw = MatMulGrad(...)`` is one product).

Every op in ``SCHEMAS`` has a rule (a test checks it). An op without one is an error naming
it, or, with ``fallback=True``, costed as a memory-bound kernel over its input and output
bytes (``fallback_cost``) and listed in a warning.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distir.analysis.hardware import Hardware
from distir.analysis.rules import RuleTable
from distir.ir.types import TensorType, TupleType, Type

__all__ = ["COST_RULES", "CostRule", "OpCost", "load_cost_rules", "fallback_cost",
           "tensor_bytes", "main_dtype", "ZERO"]


@dataclass(frozen=True, slots=True)
class OpCost:
    """The cost of one op: ``seconds`` of device time on each device it runs on; ``flops``
    of arithmetic; ``bytes`` of memory traffic (compute) or payload (communication);
    ``comm`` whether it is communication (counted as such per device)."""

    seconds: float
    flops: float = 0.0
    bytes: float = 0.0
    comm: bool = False


CostRule = Callable[[str, tuple, tuple, dict, Hardware], OpCost]
"""``rule(op_type, ins, outs, attrs, hw) -> OpCost``."""


class CostRuleTable(RuleTable):
    """``RuleTable`` (the decorator and lookups of ``distir.analysis.rules``) typed for
    cost rules."""

    def __init__(self, meaning: str) -> None:
        super().__init__(meaning)
        self.skips_unused: set[str] = set()
        """The ops whose rules cost only the results the program uses."""

    def register(self, *op_types: str,  # type: ignore[override]
                 skips_unused: bool = False) -> Callable[[CostRule], CostRule]:
        if skips_unused:
            self.skips_unused.update(op_types)
        return super().register(*op_types)  # type: ignore[return-value]

    def get(self, op_type: str) -> CostRule | None:  # type: ignore[override]
        return self.rules.get(op_type)  # type: ignore[return-value]


COST_RULES = CostRuleTable("cost")

ZERO = OpCost(0.0)
"""The cost of a view or a value known before the step (Reshape, Constant, ...)."""

_COST_MODULES = ["distir.analysis.cost.compute", "distir.analysis.cost.comm",
                 "distir.analysis.cost.train", "distir.analysis.cost.structured"]
_loaded = False


def load_cost_rules() -> None:
    """Import every cost rule module once."""
    global _loaded
    if _loaded:
        return
    for name in _COST_MODULES:
        importlib.import_module(name)
    _loaded = True


def tensor_bytes(types: Any) -> int:
    """Total size in bytes of the present types in ``types``."""
    n = 0
    for t in types:
        if t is not None:
            n += t.size_bytes
    return n


def main_dtype(ins: tuple[Type | None, ...], outs: tuple[Type, ...]) -> str:
    """The dtype name that sets the arithmetic rate: the first floating-point tensor's
    among the inputs and results, else the first tensor's, else Float32."""
    first = None
    for t in (*ins, *outs):
        if isinstance(t, TupleType):
            continue
        if t is not None and hasattr(t, "dtype"):
            if t.dtype.is_float:
                return t.dtype.value
            if first is None:
                first = t.dtype.value
    return first or "Float32"


def fallback_cost(op_type: str, ins: tuple[Type | None, ...], outs: tuple[Type, ...],
                  attrs: dict[str, Any], hw: Hardware) -> OpCost:
    """The documented default for an op without a cost rule: a memory-bound kernel that
    reads its inputs and writes its results once, one FLOP per result element."""
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    flops = float(sum(t.numel for t in outs if isinstance(t, TensorType)))
    return OpCost(hw.memory_time(nbytes, flops, main_dtype(ins, outs)), flops, nbytes)
