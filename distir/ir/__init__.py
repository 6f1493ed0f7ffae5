"""The DistIR core: types, values, ops, functions, modules, the text format, the verifier."""

from __future__ import annotations

from distir.ir.builder import FunctionBuilder
from distir.ir.core import CALL, Function, Module, Op, Value
from distir.ir.inline import inline_calls
from distir.ir.printer import dumps, format_function, format_op
from distir.ir.schemas import SCHEMAS, AttrSpec, OpSchema, get_schema
from distir.ir.text import load, parse
from distir.ir.types import DenseAttr, Device, DType, ScalarType, TensorType, TupleType, Type
from distir.ir.verify import verify

__all__ = [
    "CALL", "AttrSpec", "DType", "DenseAttr", "Device", "Function", "FunctionBuilder",
    "Module", "Op", "OpSchema", "SCHEMAS", "ScalarType", "TensorType", "TupleType", "Type",
    "Value", "dumps", "format_function", "format_op", "get_schema", "inline_calls", "load", "parse",
    "verify",
]
