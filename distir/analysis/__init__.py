"""Analyses on the one abstract interpreter: type propagation, reference execution,
simulation, per-rank projection."""

from __future__ import annotations

from distir.analysis.api import (
    bind_inputs,
    execute,
    infer_module_types,
    infer_types,
    random_inputs,
    type_env,
)
from distir.analysis.interpreter import Interpreter, NumpyInterpreter, TypeInterpreter
from distir.analysis.rules import MIXED_RULES, NUMPY_RULES, TYPE_RULES
from distir.analysis.values import Concrete, type_of

__all__ = [
    "Concrete", "Interpreter", "MIXED_RULES", "NUMPY_RULES", "NumpyInterpreter", "TYPE_RULES",
    "TypeInterpreter", "bind_inputs", "execute", "infer_module_types", "infer_types",
    "random_inputs", "type_env", "type_of",
]
