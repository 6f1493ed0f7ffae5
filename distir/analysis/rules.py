"""Rule tables, one per meaning, keyed by op name and filled by a decorator.

Every rule is called as ``rule(op_type, args, attrs, n_out)``:

- ``TYPE_RULES``: ``args`` are abstract values (``Type`` or ``Concrete``; ``None`` for an
  omitted optional input), ``attrs`` the op's attributes with the schema's defaults filled
  in, ``n_out`` the number of results the program names; returns a tuple of ``Type``. A type
  rule must be a pure function of its arguments: the interpreter memoizes it. Devices are
  the rule's to set; the interpreter has already checked that a non-communication op's
  inputs share one device.
- ``MIXED_RULES``: for ops that give concrete results from abstract inputs (``Shape``);
  returns abstract values and is consulted before the type rule.
- ``NUMPY_RULES``: ``args`` are numpy arrays (or ``None``); returns a tuple of arrays.

Rules raise ``TypeInferenceError`` / ``ExecutionError`` with a message only; the interpreter
adds the place. Rule modules are imported by ``load_rules()`` on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["RuleTable", "TYPE_RULES", "MIXED_RULES", "NUMPY_RULES", "load_rules", "full_attrs"]

Rule = Callable[[str, tuple, dict, int], tuple]
F = TypeVar("F", bound=Callable[..., Any])


class RuleTable:
    """A table of rules for one meaning, keyed by op name.

    ``entry``, when given, makes each entry from the registered function and the keyword
    options of ``register`` (the backend's lowerings carry flags beside their function);
    otherwise the entry is the function itself.
    """

    def __init__(self, meaning: str, entry: Callable[..., Any] | None = None) -> None:
        self.meaning = meaning
        self.entry = entry
        self.rules: dict[str, Any] = {}

    def register(self, *op_types: str, **options: Any) -> Callable[[F], F]:
        """Decorator: register one rule for each of ``op_types``."""
        if options and self.entry is None:
            raise TypeError(f"{self.meaning} rules take no options, got {sorted(options)}")

        def deco(fn: F) -> F:
            value = fn if self.entry is None else self.entry(fn, **options)
            for name in op_types:
                if name in self.rules:
                    raise RuntimeError(f"two {self.meaning} rules for {name}")
                self.rules[name] = value
            return fn

        return deco

    def get(self, op_type: str) -> Any:
        return self.rules.get(op_type)

    def __contains__(self, op_type: str) -> bool:
        return op_type in self.rules

    def __len__(self) -> int:
        return len(self.rules)


TYPE_RULES = RuleTable("type")
MIXED_RULES = RuleTable("mixed")
NUMPY_RULES = RuleTable("numpy")

# Modules that register rules; one per op family.
_RULE_MODULES = [
    "distir.analysis.type_rules.elementwise",
    "distir.analysis.type_rules.shape",
    "distir.analysis.type_rules.nn",
    "distir.analysis.type_rules.indexing",
    "distir.analysis.type_rules.spatial",
    "distir.analysis.type_rules.recurrent",
    "distir.analysis.type_rules.comm",
    "distir.analysis.type_rules.train",
    "distir.analysis.numpy_rules.onnx_ops",
    "distir.analysis.numpy_rules.kernels",
    "distir.analysis.numpy_rules.comm",
    "distir.analysis.numpy_rules.train",
]
_loaded = False


def load_rules() -> None:
    """Import every rule module once (each registers its rules when imported)."""
    global _loaded
    if _loaded:
        return
    for name in _RULE_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # a rule module that exists but fails to import is a bug
                raise
    _loaded = True


def full_attrs(op_type: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` with the schema's defaults for the attributes not given."""
    from distir.ir.schemas import SCHEMAS

    s = SCHEMAS.get(op_type)
    if s is None:
        return dict(attrs)
    out = {a.name: a.default for a in s.attrs if a.default is not None}
    out.update(attrs)
    return out
