"""Device renaming: calls equal up to renaming devices share one summary.

In a D/T/P program most calls differ only in the devices their arguments sit on: replica 3
calls a stage function exactly as replica 0 does, on other devices. The simulator
summarizes such a call once, on *canonical* devices, and gives every other call the
canonical summary with its devices renamed (``rename_summary``), which costs the size of
the summary (the devices it touches), not the callee's ops.

A renaming is exact when nothing the callee computes depends on which devices it runs on,
only on which of them are the same and which share a node:

- no op of the callee (or of what it calls) names a device in an attribute (``Send``,
  ``MPIBroadcast``, ...) nor has no inputs (an input-less op's device is the one all the
  function's arguments sit on, or device 0: see ``interpreter._home_device``), so every
  value of the callee is on a device of its arguments (``device_free``);
- costs depend on devices only through the group a collective spans: its size and how
  it falls on nodes (``Hardware.comm_time``: whether it spans nodes, how many of its
  devices each node holds). ``canonical_devices`` numbers nodes in order of first
  appearance among the arguments, and devices within each node likewise, so a renaming
  between two calls with equal canonical arguments keeps "same device" and "same node".

Clock symbols renamed: a device ``d``, its communication stream ``comm_key(d)`` and its host
``host_key(d)``; the pending-argument symbols ``arg_key(i)`` are positions and stay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from distir.analysis.values import Concrete, type_of
from distir.ir.core import Function
from distir.ir.schemas import get_schema
from distir.ir.types import ScalarType, TensorType, TupleType, Type

if TYPE_CHECKING:
    from distir.analysis.simulator import CallSummary

__all__ = ["canonical_devices", "device_free", "rename_type", "rename_value",
           "rename_key", "rename_summary", "rename_detail"]

_DEVICE_KINDS = frozenset({"device", "devices"})


def _names_device(op_type: str, attrs: Any) -> bool:
    if not attrs:
        return False
    schema = get_schema(op_type)
    if schema is None:  # an op the table does not know: judge by the usual names
        return "device" in attrs or "devices" in attrs
    amap = schema.attr_map
    return any((spec := amap.get(a)) is not None and spec.kind in _DEVICE_KINDS
               for a in attrs)


def device_free(fn: Function, memo: dict[int, bool]) -> bool:
    """Whether every value ``fn`` (and what it calls) makes is on a device of its inputs
    and no op names a device (see the module docstring); ``memo`` by function identity
    (the caller keeps the functions alive)."""
    hit = memo.get(id(fn))
    if hit is not None:
        return hit
    ok = True
    for op in fn.ops:
        if op.callee is not None:
            if not device_free(op.callee, memo):
                ok = False
                break
        elif not op.inputs or _names_device(op.op_type, op.attrs):
            ok = False
            break
    memo[id(fn)] = ok
    return ok


def canonical_devices(args: Iterable[Any], per_node: int) -> dict[int, int] | None:
    """The renaming (actual device -> canonical device) of a call's arguments, or ``None``
    when it is the identity. Nodes (``device // per_node``) are numbered in order of first
    appearance, and so are devices within each node: calls whose arguments are equal up to
    a renaming that keeps devices and nodes apart get equal canonical arguments."""
    sigma: dict[int, int] = {}
    nodes: dict[int, list[int]] = {}
    same = True
    for a in args:
        if a is None:
            continue
        for d in type_of(a).devices:
            if d in sigma:
                continue
            n = d // per_node
            c = nodes.get(n)
            if c is None:
                c = nodes[n] = [len(nodes) * per_node, 0]
            x = sigma[d] = c[0] + c[1]
            c[1] += 1
            if x != d:
                same = False
    return None if same else sigma


def rename_type(t: Type, m: dict[int, int]) -> Type:
    """``t`` with each device ``d`` made ``m[d]``."""
    if isinstance(t, TensorType):
        return TensorType(t.dtype, t.shape, m[t.device])
    if isinstance(t, ScalarType):
        return ScalarType(t.dtype, m[t.device])
    if isinstance(t, TupleType):
        return TupleType(tuple(rename_type(s, m) for s in t.types))
    raise TypeError(f"cannot rename the devices of {t!r}")


def rename_value(v: Any, m: dict[int, int]) -> Any:
    """An abstract value (a type, or a concrete value: the same value on the renamed
    device) with its devices renamed."""
    if v is None:
        return None
    if isinstance(v, Concrete):
        return Concrete(rename_type(v.type, m), v.value)
    return rename_type(v, m)


HOST_KEY0 = -(1 << 30)
"""Clock keys at or below this are hosts' (``simulator.host_key``: ``HOST_KEY0 - d``)."""
ARG_KEY0 = -(1 << 40)
"""Clock keys at or below this are pending arguments' (``simulator.arg_key``)."""
_HOST0, _ARG0 = HOST_KEY0, ARG_KEY0


def rename_key(k: int, m: dict[int, int]) -> int:
    """A clock symbol renamed: device ``d`` (>= 0), its stream ``-2 - d`` and its host
    ``-(1 << 30) - d``; the pending-argument symbols (far below) stay."""
    if k >= 0:
        return m[k]
    if k > _HOST0:
        return -2 - m[-2 - k]
    if k > _ARG0:
        return _HOST0 - m[_HOST0 - k]
    return k



def rename_summary(s: CallSummary, m: dict[int, int],
                   value: Callable[[Any], Any]) -> CallSummary:
    """The summary of ``s``'s call with its devices renamed by ``m`` (canonical ->
    actual); ``value`` renames (and interns) a result. The events stay ``s``'s, with
    ``m`` recorded for the trace (composed with ``s``'s own renaming, if any)."""
    from distir.analysis.simulator import CallSummary

    def vec(v: dict[int, float]) -> dict[int, float]:
        return {rename_key(k, m): x for k, x in v.items()}

    # Equal vectors (devices synchronized by a collective) stay one object: applying the
    # summary computes each distinct one once.
    done: dict[int, dict[int, float]] = {}
    vecs: dict[int, dict[int, float]] = {}
    for d, v in s.vecs.items():
        r = done.get(id(v))
        if r is None:
            r = done[id(v)] = vec(v)
        vecs[rename_key(d, m)] = r
    inner = s.rename
    events_map = m if inner is None else {k: m[x] for k, x in inner.items()}
    return CallSummary(
        s.fn, tuple(value(o) for o in s.outs), vecs,
        {m[d]: t for d, t in s.compute.items()}, {m[d]: t for d, t in s.comm.items()},
        {m[d]: b for d, b in s.peak.items()}, {m[d]: b for d, b in s.net.items()},
        s.events, s.n_ops,
        tuple((i, m[d], vec(v)) for i, d, v in s.pending), events_map,
        {m[d]: t for d, t in s.host.items()}, s.has_async,
        tuple((i, tuple((m[d], b) for d, b in h)) for i, h in s.held))


def rename_detail(detail: tuple, m: dict[int, int]) -> tuple:
    """An event's detail ``(OpCost, input types, result types, ((device, bytes), ...) per
    result)`` on renamed devices (for traces)."""
    cost, ins, outs, per_out = detail
    return (cost, tuple(None if t is None else rename_type(t, m) for t in ins),
            tuple(None if t is None else rename_type(t, m) for t in outs),
            tuple(tuple((m[d], b) for d, b in p) for p in per_out))
