"""Elements communicated per step by a distributed program.

The convention: the number of tensor elements that leave a device, summed over all
devices, for one step, with bandwidth-optimal (ring) algorithms. For a collective over
``p`` devices:

===================  ====================================================================
op                   elements sent (all devices together)
===================  ====================================================================
``MPIAllreduce``     ``2(p-1)·n`` for ``n`` elements per device (ring: reduce-scatter then
                     all-gather, ``2(p-1)/p·n`` per device); a bucket, the sum over members
``MPIAllgather``     ``(p-1)·n`` for a result of ``n`` elements (each device sends its block
                     to ``p-1`` others)
``MPIReduceScatter`` ``(p-1)·n`` for ``n`` elements per device
``MPIBroadcast``     ``n`` per listed device other than the source
``MPIScatter``       ``n/p`` per listed device other than the source
``MPIGather``        each input not already on the target device
``MPIReduce``        each input not already on the target device
``Send``             ``n`` (``0`` to the same device)
===================  ====================================================================

With ``p = 2`` an all-reduce of ``n`` elements counts ``2n``: the Unity paper's data-parallel
2-layer MLP (784 → 512 → 10) all-reduces its 406,528 weight-gradient elements, 813,056.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from distir.errors import UnsupportedError
from distir.ir.core import Function, Module
from distir.ir.inline import inline_calls
from distir.ir.schemas import COMM_OPS
from distir.ir.types import TensorType

__all__ = ["communicated_elements", "comm_breakdown"]


def _flat(fn: Function | Module) -> Function:
    if isinstance(fn, Module):
        fn = fn.entry
    return inline_calls(fn) if any(op.callee is not None for op in fn.ops) else fn


def comm_breakdown(fn: Function | Module) -> Counter[tuple[str, tuple[int, ...], int]]:
    """``(op type, shape of one input, participants) -> count`` for every communication
    op of ``fn`` (calls inlined): what ``dtp`` and ``lower`` programs are compared by."""
    from distir.analysis import type_env

    flat = _flat(fn)
    env = type_env(flat)
    out: Counter[tuple[str, tuple[int, ...], int]] = Counter()
    for op in flat.ops:
        if op.op_type in COMM_OPS:
            t = _type(env, op.inputs[0])
            p = len(op.outputs) if op.op_type != "MPIGather" else len(op.inputs)
            out[(op.op_type, t.shape, p)] += 1
    return out


def _type(env: dict, v: Any) -> TensorType:
    a = env[v]
    t = getattr(a, "type", a)
    assert isinstance(t, TensorType)
    return t


def communicated_elements(fn: Function | Module) -> int:
    """Elements sent per step by ``fn`` (see the module docstring for the convention)."""
    from distir.analysis import type_env

    flat = _flat(fn)
    env = type_env(flat)
    total = 0
    for op in flat.ops:
        t = op.op_type
        if t not in COMM_OPS:
            continue
        ins = [_type(env, v) for v in op.inputs if v is not None]
        n = ins[0].numel
        if t == "MPIAllreduce":
            total += 2 * (len(ins) - 1) * n
        elif t == "MPIAllreduceBucket":  # k members, each over p devices, member-major
            k = int(op.attrs["tensors"])  # type: ignore[arg-type]
            p = len(ins) // k
            total += 2 * (p - 1) * sum(ins[m * p].numel for m in range(k))
        elif t == "MPIAllgather":
            total += (len(ins) - 1) * n * len(ins)
        elif t == "MPIReduceScatter":
            total += (len(ins) - 1) * n
        elif t in ("MPIBroadcast", "MPIScatter"):
            devs = op.attrs.get("devices", ())
            assert isinstance(devs, tuple)
            others = sum(1 for d in devs if d != ins[0].device)
            total += others * (n if t == "MPIBroadcast" else n // max(len(devs), 1))
        elif t in ("MPIGather", "MPIReduce"):
            dst = op.attrs.get("device", 0)
            total += sum(x.numel for x in ins if x.device != dst)
        elif t == "Send":
            total += 0 if op.attrs.get("device") == ins[0].device else n
        else:  # a communication op this table does not know yet
            raise UnsupportedError(f"communicated_elements: no element count for {t}")
    return total
