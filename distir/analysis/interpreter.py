"""The one interpreter loop, parametric in its rule tables.

``Interpreter.run`` walks a function in program order: read the arguments, evaluate the op
(``eval_op``, which subclasses specialize by choosing rules), check the result count, bind
the results, tell listeners. Calls are rules too (``eval_call``). Analyses extend it by
overriding ``eval_op``/``eval_call`` or by listening, never by copying the loop.

- ``TypeInterpreter``: mixed abstract/concrete type propagation. For each op it picks the
  most precise rule: all arguments concrete -> run the numpy rule and keep the value (if
  small); a mixed rule where one exists (``Shape``); else the type rule. Results are
  memoized by ``(op, arguments, attributes, result count)``, calls by ``(callee,
  arguments)``, so repeated layers and microbatches cost one dictionary lookup.
- ``NumpyInterpreter``: the reference executor; values are numpy arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from distir._util import no_gc
from distir.analysis.rules import MIXED_RULES, NUMPY_RULES, TYPE_RULES, full_attrs, load_rules
from distir.analysis.values import CONCRETE_LIMIT, Concrete, type_of
from distir.errors import (
    DistIRError,
    ExecutionError,
    Loc,
    PlacementError,
    TypeInferenceError,
    UnsupportedError,
)
from distir.ir.core import Function, Op, Value
from distir.ir.schemas import COMM_OPS, FOLDED_COLLECTIVES
from distir.ir.types import TensorType, Type

__all__ = ["Interpreter", "TypeInterpreter", "NumpyInterpreter", "Listener", "locate"]

Listener = Callable[[Op, tuple, tuple], None]


def locate(err: DistIRError, fn: Function, op: Op | None) -> DistIRError:
    """Give an error raised by a rule the place of the op that raised it."""
    if err.loc is not None:
        return err
    if op is not None and op.loc is not None:
        where = "" if op.callee is not None else f"{op.op_type}: "
        return type(err)(where + err.message, op.loc)
    from distir.ir.printer import format_op

    ctx = f"in @{fn.name}" + (f", `{format_op(op)}`" if op is not None else "")
    return type(err)(f"{ctx}: {err.message}")


class Interpreter:
    """The loop. Subclasses say how one op (``eval_op``) and one call (``eval_call``) are
    evaluated. Listeners see each op as it is evaluated, in every function run, with its
    inputs and results: a call op after its callee's ops (a memoized call shows only the
    call op)."""

    post_op: Listener | None = None
    """A subclass's own per-op hook, run before the listeners (checks, recording)."""
    env: dict[Value | None, Any] | None = None
    """The values of the function being run, by ``Value`` (its callers' while a call runs
    are restored after it): an op's hook may read how its inputs were made."""

    def __init__(self, listeners: Sequence[Listener] = ()) -> None:
        self.listeners = list(listeners)
        self._attrs: dict[tuple, dict[str, Any]] = {}
        load_rules()

    def attrs_of(self, op: Op) -> dict[str, Any]:
        """The op's attributes with schema defaults, computed once per distinct op."""
        key = (op.op_type, op.attrs_key)
        a = self._attrs.get(key)
        if a is None:
            a = self._attrs[key] = full_attrs(op.op_type, op.attrs)
        return a

    def run(self, fn: Function, args: Sequence[Any]) -> tuple:
        if len(args) != len(fn.params):
            raise TypeInferenceError(f"@{fn.name} takes {len(fn.params)} arguments, "
                                     f"{len(args)} given", fn.loc)
        env: dict[Value | None, Any] = dict(zip(fn.params, args))
        env[None] = None  # an omitted optional input
        outer = self.env
        self.env = env
        try:
            self._loop(fn, env)
        finally:
            self.env = outer
        return tuple(env[v] for v in fn.returns)

    def _loop(self, fn: Function, env: dict[Value | None, Any]) -> None:
        lookup = env.__getitem__
        eval_op = self.eval_op
        eval_call = self.eval_call
        listeners = self.listeners
        post = self.post_op
        for op in fn.ops:
            ins = tuple(map(lookup, op.inputs))
            try:
                if op.callee is not None:
                    outs = eval_call(op, op.callee, ins)
                else:
                    outs = eval_op(op, ins)
            except DistIRError as e:
                raise locate(e, fn, op) from None
            n = len(outs)
            if n != len(op.outputs):
                raise locate(TypeInferenceError(
                    f"gives {len(outs)} results, {len(op.outputs)} named"), fn, op)
            if n == 1:
                env[op.outputs[0]] = outs[0]
            else:  # (a call's hundreds of results: bound at C level)
                env.update(zip(op.outputs, outs))
            if post is not None:
                try:
                    post(op, ins, outs)
                except DistIRError as e:
                    raise locate(e, fn, op) from None
            if listeners:
                for listener in listeners:
                    listener(op, ins, outs)

    def eval_op(self, op: Op, args: tuple) -> tuple:
        raise NotImplementedError

    def eval_call(self, op: Op, callee: Function, args: tuple) -> tuple:
        return self.run(callee, args)


class TypeInterpreter(Interpreter):
    """Mixed abstract/concrete type propagation with memoized rules.

    ``check_annotations`` compares every declared result type with the inferred one.
    ``record``, when a dict, receives the abstract value of every value of the functions
    run (for ``check --types``; values inside generic callees take their last call's).
    """

    def __init__(self, listeners: Sequence[Listener] = (), *, check_annotations: bool = True,
                 record: dict[Value, Any] | None = None) -> None:
        super().__init__(listeners)
        self.cache: dict[tuple, tuple] = {}
        self.call_cache: dict[tuple, tuple[Function, tuple]] = {}
        self.check_annotations = check_annotations
        self.record = record
        self._home = 0  # where input-less ops of the function being run go by default
        if check_annotations or record is not None:
            self.post_op = self._post

    def run(self, fn: Function, args: Sequence[Any]) -> tuple:
        for p, a in zip(fn.params, args):
            if p.type is not None and a is not None and type_of(a) != p.type:
                raise TypeInferenceError(f"%{p.name} of @{fn.name} is declared "
                                         f"{p.type}, given {type_of(a)}", p.loc or fn.loc)
        if self.record is not None:
            for p, a in zip(fn.params, args):
                self.record[p] = a
        outer = self._home
        self._home = _home_device(args)
        try:
            with no_gc():  # many small objects, next to no garbage: spare the full GC passes
                outs = super().run(fn, args)
        finally:
            self._home = outer
        if fn.return_types is not None:
            for i, (t, o) in enumerate(zip(fn.return_types, outs)):
                if type_of(o) != t:
                    raise TypeInferenceError(f"@{fn.name} declares result {i} as {t}, but it "
                                             f"is {type_of(o)}", fn.loc)
        return outs

    def _post(self, op: Op, ins: tuple, outs: tuple) -> None:
        record = self.record
        for v, o in zip(op.outputs, outs):
            if record is not None:
                record[v] = o
            t = v.type
            if t is not None and self.check_annotations and t != type_of(o):
                raise TypeInferenceError(f"%{v.name} is declared {t} but is {type_of(o)}",
                                         v.loc or op.loc)

    def eval_call(self, op: Op, callee: Function, args: tuple) -> tuple:
        # Keyed by identity (functions compare by structure); the entry keeps the callee
        # alive so that its id is not reused while the cache lives.
        key = (id(callee), args)
        hit = self.call_cache.get(key)
        if hit is None:
            hit = self.call_cache[key] = (callee, self.run(callee, args))
        return hit[1]

    def eval_op(self, op: Op, args: tuple) -> tuple:
        if not args and self._home and "device" not in op.attrs:
            return self._eval_placed(op)
        key = (op.op_type, args, op.attrs_key, len(op.outputs))
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self._infer(op, args)
        return hit

    def _eval_placed(self, op: Op) -> tuple:
        """An input-less op (``Constant``) without a ``device`` attribute, in a function whose
        arguments all sit on one device other than 0: its result goes there, so a generic
        function called on device 3 makes its constants on device 3."""
        home = self._home
        key = (op.op_type, (), op.attrs_key, len(op.outputs), home)
        hit = self.cache.get(key)
        if hit is None:
            attrs = dict(self.attrs_of(op), device=home)
            hit = self.cache[key] = self._infer(op, (), attrs)
        return hit

    def _infer(self, op: Op, args: tuple, attrs: dict[str, Any] | None = None) -> tuple:
        op_type = op.op_type
        if attrs is None:
            attrs = self.attrs_of(op)
        n_out = len(op.outputs)
        all_concrete = True
        dev = None
        check = op_type not in COMM_OPS
        for a in args:  # one pass: placement check and concreteness
            if a is None:
                continue
            if isinstance(a, Concrete):
                a = a.type
            else:
                all_concrete = False
            if check:
                if type(a) is TensorType:  # the common case, without building a tuple
                    d = a.device
                    if dev is None:
                        dev = d
                    elif d != dev:
                        _placement_error(op_type, dev, d)
                else:
                    for d in a.devices:
                        if dev is None:
                            dev = d
                        elif d != dev:
                            _placement_error(op_type, dev, d)
        mixed = MIXED_RULES.rules.get(op_type)
        if mixed is not None:
            return tuple(mixed(op_type, args, attrs, n_out))
        rule = TYPE_RULES.rules.get(op_type)
        if rule is None:
            raise UnsupportedError(f"no type rule for op '{op_type}'")
        types = tuple(rule(op_type, args, attrs, n_out))
        if not all_concrete or op_type in FOLDED_COLLECTIVES:
            # (a Replica*/Peer* op combines its copies on replicas or ranks the program
            # does not write: its result is known by type only, even of a constant)
            return types
        for t in types:
            if not isinstance(t, TensorType) or t.numel > CONCRETE_LIMIT:
                return types
        np_rule = NUMPY_RULES.rules.get(op_type)
        if np_rule is not None:
            vals = np_rule(op_type, tuple(None if a is None else a.value for a in args),
                           attrs, n_out)
            try:
                return tuple(Concrete(t, np.asarray(v, dtype=t.dtype.np).reshape(t.shape))
                             for t, v in zip(types, vals))
            except ValueError:
                got = [np.shape(v) for v in vals]
                raise TypeInferenceError(
                    f"the reference implementation gives shapes {got} where the type rule "
                    f"gives {[getattr(t, 'shape', t) for t in types]}; this is a bug in "
                    "distir's rules for this op, please report it") from None
        return types


def _home_device(args: Sequence[Any]) -> int:
    """The one device all arguments sit on, or 0 when they span several (or there are none)."""
    home = None
    for a in args:
        if a is None:
            continue
        for d in type_of(a).devices:
            if home is None:
                home = d
            elif d != home:
                return 0
    return home or 0


def _placement_error(op_type: str, dev: int, d: int) -> None:
    raise PlacementError(f"inputs are on devices {dev} and {d}, but {op_type} runs on one "
                         "device: move an input with Send first")


def _check_placement(op_type: str, args: tuple) -> None:
    dev = None
    for a in args:
        if a is None:
            continue
        t = type_of(a)
        for d in t.devices:
            if dev is None:
                dev = d
            elif d != dev:
                _placement_error(op_type, dev, d)


class NumpyInterpreter(Interpreter):
    """The reference executor: numpy arrays in, numpy arrays out."""

    def eval_op(self, op: Op, args: tuple) -> tuple:
        rule = NUMPY_RULES.get(op.op_type)
        if rule is None:
            raise UnsupportedError(f"no reference implementation for op '{op.op_type}'")
        try:
            outs = rule(op.op_type, args, self.attrs_of(op), len(op.outputs))
        except DistIRError:
            raise
        except (ValueError, TypeError, IndexError, ArithmeticError) as e:
            raise ExecutionError(f"{op.op_type} failed on inputs of shapes "
                                 f"{[None if a is None else np.shape(a) for a in args]}: "
                                 f"{e}") from None
        return tuple(outs)


def infer(fn: Function, args: Sequence[Any] | None = None, *,
          interp: TypeInterpreter | None = None) -> tuple:
    """Type-propagate ``fn`` on ``args`` (default: its declared parameter types)."""
    if args is None:
        missing = [p.name for p in fn.params if p.type is None]
        if missing:
            raise TypeInferenceError(
                f"@{fn.name} has untyped parameters ({', '.join('%' + str(n) for n in missing)})"
                ": declare their types or pass input types", fn.loc)
        args = [p.type for p in fn.params]
    return (interp or TypeInterpreter()).run(fn, args)


def _loc_of(fn: Function) -> Loc | None:
    return fn.loc


def types_only(values: Sequence[Any]) -> tuple[Type, ...]:
    return tuple(type_of(v) for v in values)
