"""The verifier: structural rules of a module, checked explicitly after parsing and passes.

Checks single definition, use after definition, call targets (in the module, not
recursive, matching arity), op schemas (arity, attributes and their kinds, result counts),
declared return-type counts and device ranges. Types proper are checked by type inference
(``distir.analysis``), which the ``check`` command runs after this.
"""

from __future__ import annotations

import difflib
from typing import Any

from distir.errors import Loc, VerifyError
from distir.ir.core import Function, Module, Op, Value
from distir.ir.schemas import SCHEMAS, AttrSpec, OpSchema
from distir.ir.types import DenseAttr, DType, TensorType, TupleType, Type

__all__ = ["verify", "verify_function"]


def _where(fn: Function, op: Op | None = None, value: Value | None = None) -> Loc | None:
    if op is not None and op.loc is not None:
        return op.loc
    if value is not None and value.loc is not None:
        return value.loc
    return None


def _op_text(op: Op) -> str:
    from distir.ir.printer import format_op

    try:
        return format_op(op)
    except Exception:  # noqa: BLE001 - a malformed op must still be reportable
        return repr(op)


def _err(fn: Function, msg: str, op: Op | None = None, value: Value | None = None) -> VerifyError:
    loc = _where(fn, op, value)
    if loc is None:
        ctx = f"in @{fn.name}"
        if op is not None:
            ctx += f", `{_op_text(op)}`"
        return VerifyError(f"{ctx}: {msg}")
    return VerifyError(msg, loc)


def verify(obj: Module | Function, *, num_devices: int | None = None) -> None:
    """Raise ``VerifyError`` at the first broken rule; return ``None`` when all hold.

    ``num_devices``, when given, bounds every device number (types and attributes).
    """
    module = obj if isinstance(obj, Module) else Module.of(obj)
    members = {id(f) for f in module}
    for fn in module:
        verify_function(fn, members=members, num_devices=num_devices)
    _check_recursion(module)


def _check_device(fn: Function, d: Any, num_devices: int | None, what: str,
                  op: Op | None = None, value: Value | None = None) -> None:
    if not isinstance(d, int) or isinstance(d, bool) or d < 0 or (
            num_devices is not None and d >= num_devices):
        rng = f"0..{num_devices - 1}" if num_devices is not None else "integers from 0"
        raise _err(fn, f"device {d} in {what} is out of range (devices are {rng})", op, value)


def _check_type(fn: Function, t: Type, num_devices: int | None, value: Value) -> None:
    if isinstance(t, TupleType):
        for s in t.types:
            _check_type(fn, s, num_devices, value)
        return
    for d in t.devices:
        _check_device(fn, d, num_devices, f"the type of %{value.name}", value=value)
    if isinstance(t, TensorType) and any(s < 0 for s in t.shape):
        raise _err(fn, f"negative dimension in the type of %{value.name}", value=value)


def verify_function(fn: Function, *, members: set[int] | None = None,
                    num_devices: int | None = None) -> None:
    defined: set[int] = set()
    for p in fn.params:
        if id(p) in defined:
            raise _err(fn, f"parameter %{p.name} is listed twice", value=p)
        defined.add(id(p))
        t = p.type
        if t is not None:
            if type(t) is TensorType:  # the common case, as ``_check_type`` checks it
                d = t.device
                if type(d) is int and 0 <= d and (num_devices is None or d < num_devices) \
                        and (not t.shape or min(t.shape) >= 0):
                    continue
            _check_type(fn, t, num_devices, p)
    for op in fn.ops:
        for v in op.inputs:
            if v is None:
                continue
            if id(v) not in defined:
                raise _err(fn, f"%{v.name} is used before it is defined", op)
        if op.callee is not None:
            _check_call(fn, op, members)
        else:
            schema = SCHEMAS.get(op.op_type)
            if schema is None:
                raise _err(fn, _unknown_op(op.op_type), op)
            _check_schema(fn, op, schema, num_devices)
        if not op.outputs:  # the text format has no statement without results
            what = f"@{op.callee.name}" if op.callee is not None else op.op_type
            raise _err(fn, f"{what} here gives no results, so the statement does nothing: "
                       "remove it (a statement defines at least one value)", op)
        for v in op.outputs:
            if id(v) in defined:
                raise _err(fn, f"%{v.name} is defined twice: every value is defined once",
                           op, v)
            defined.add(id(v))
            if v.type is not None:
                _check_type(fn, v.type, num_devices, v)
    for v in fn.returns:
        if id(v) not in defined:
            raise VerifyError(f"%{v.name} is returned but not defined in @{fn.name}",
                              fn.end_loc)
    if fn.return_types is not None and len(fn.return_types) != len(fn.returns):
        raise VerifyError(f"@{fn.name} declares {len(fn.return_types)} result types but "
                          f"returns {len(fn.returns)} value{'s' * (len(fn.returns) != 1)}",
                          fn.loc)


def _unknown_op(name: str) -> str:
    close = difflib.get_close_matches(name, list(SCHEMAS), n=1)
    hint = f"; did you mean {close[0]}?" if close else " (see `distir ops` for the op set)"
    return f"unknown op '{name}'{hint}"


def _check_call(fn: Function, op: Op, members: set[int] | None) -> None:
    callee = op.callee
    assert callee is not None
    if members is not None and id(callee) not in members:
        raise _err(fn, f"call to @{callee.name}, which is not in this module", op)
    if len(op.inputs) != len(callee.params):
        raise _err(fn, f"@{callee.name} takes {len(callee.params)} argument"
                   f"{'s' * (len(callee.params) != 1)}, {len(op.inputs)} given", op)
    if any(v is None for v in op.inputs):
        raise _err(fn, f"a call to @{callee.name} cannot omit an argument with `_`", op)
    if len(op.outputs) != len(callee.returns):
        raise _err(fn, f"@{callee.name} returns {len(callee.returns)} value"
                   f"{'s' * (len(callee.returns) != 1)}, {len(op.outputs)} result"
                   f"{'s' * (len(op.outputs) != 1)} named", op)


def _kind_ok(spec: AttrSpec, v: Any) -> bool:
    k = spec.kind
    if k == "int":
        return isinstance(v, int)  # true/false are accepted as 1/0 flags
    if k == "float":
        return isinstance(v, int | float) and not isinstance(v, bool)
    if k == "string":
        return isinstance(v, str)
    if k == "tensor":
        return isinstance(v, DenseAttr)
    if k == "ints":
        return isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool)
                                            for x in v)
    if k == "floats":
        return isinstance(v, tuple) and all(isinstance(x, int | float)
                                            and not isinstance(x, bool) for x in v)
    if k == "strings":
        return isinstance(v, tuple) and all(isinstance(x, str) for x in v)
    if k == "dtype":
        return isinstance(v, DType)
    if k == "device":
        return isinstance(v, int) and not isinstance(v, bool)
    if k == "devices":
        return isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool)
                                            for x in v)
    return False


_KIND_WORDS = {
    "int": "an integer", "float": "a number", "string": "a string",
    "tensor": "a dense tensor literal (dense<Float32>[...])", "ints": "a list of integers",
    "floats": "a list of numbers", "strings": "a list of strings",
    "dtype": "a dtype (Float32, Int64, ...)", "device": "a device number",
    "devices": "a list of device numbers", "unsupported": "an unsupported kind",
}


def _check_schema(fn: Function, op: Op, schema: OpSchema, num_devices: int | None) -> None:
    n = len(op.inputs)
    lo, hi = schema.min_inputs, schema.max_inputs
    if n < lo or (hi is not None and n > hi):
        raise _err(fn, f"{op.op_type} takes {schema.arity_str()}, {n} given", op)
    for i in range(min(n, lo)):
        if op.inputs[i] is None:
            name = schema.input_names[i] if i < len(schema.input_names) else str(i)
            raise _err(fn, f"input {i} ({name}) of {op.op_type} is required; `_` is only for "
                       "optional inputs", op)
    for k, v in op.attrs.items():
        spec = schema.attr_map.get(k)
        if spec is None:
            known = ", ".join(schema.attr_map) or "none"
            raise _err(fn, f"unknown attribute '{k}' for {op.op_type} (it takes: {known})", op)
        if not _kind_ok(spec, v):
            raise _err(fn, f"attribute {k} of {op.op_type} must be {_KIND_WORDS[spec.kind]}",
                       op)
        if spec.kind == "device":
            _check_device(fn, v, num_devices, f"attribute {k}", op)
        elif spec.kind == "devices":
            assert isinstance(v, tuple)  # checked by _kind_ok
            for d in v:
                _check_device(fn, d, num_devices, f"attribute {k}", op)
            if len(set(v)) != len(v):
                raise _err(fn, f"attribute {k} of {op.op_type} lists a device twice", op)
    for spec in schema.attrs:
        if spec.required and spec.name not in op.attrs:
            raise _err(fn, f"{op.op_type} needs attribute {spec.name} "
                       f"({_KIND_WORDS[spec.kind]})", op)
    if op.op_type == "Send" and ("device" in op.attrs) == (n == 2):
        raise _err(fn, "Send takes its destination once: device=D, or a second input "
                   "whose device is the destination", op)
    m = len(op.outputs)
    lo, hi = schema.expected_outputs(n, op.attrs)
    if m < lo or (hi is not None and m > hi):
        want = (f"{lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise _err(fn, f"{op.op_type} here gives {want} result{'s' * (want != '1')}, "
                   f"{m} named", op)


def _check_recursion(module: Module) -> None:
    WHITE, GREY, BLACK = 0, 1, 2
    color: dict[int, int] = {}

    def visit(f: Function, path: list[Function]) -> None:
        color[id(f)] = GREY
        for op in f.ops:
            c = op.callee
            if c is None:
                continue
            st = color.get(id(c), WHITE)
            if st == GREY:
                cycle = path[path.index(c):] + [c] if c in path else [f, c]
                chain = " -> ".join("@" + g.name for g in cycle)
                raise VerifyError(f"recursive call ({chain}): DistIR functions are straight "
                                  "lines and may not call themselves", op.loc)
            if st == WHITE:
                visit(c, path + [c])
        color[id(f)] = BLACK

    for f in module:
        if color.get(id(f), WHITE) == WHITE:
            visit(f, [f])
