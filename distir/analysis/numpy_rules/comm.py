"""Numpy rules of the communication ops: what each collective computes, devices aside.

The reference executor does not model devices (the type rules place values), so a ``Send``
is the identity and a collective is its arithmetic: sums add the inputs in input order (so
results are deterministic and the same on every receiving device), gathers concatenate in
input order, scatters split into equal shards. Results share memory with their inputs
where they are equal to them; values are never mutated, so this is safe.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distir.analysis.rules import NUMPY_RULES
from distir.errors import ExecutionError

__all__ = ["total", "split_even"]


def total(op_type: str, args: tuple) -> np.ndarray:
    """The sum of the inputs, added in order, in their dtype."""
    shapes = {np.shape(a) for a in args}
    if len(shapes) != 1:
        raise ExecutionError("inputs must have one shape, got "
                             f"{[np.shape(a) for a in args]}")
    out = np.array(args[0], copy=True)
    for a in args[1:]:
        out += a
    return out


def split_even(op_type: str, x: np.ndarray, axis: int, n: int) -> list[np.ndarray]:
    """``x`` split into ``n`` equal shards along ``axis``."""
    x = np.asarray(x)
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ExecutionError(f"axis {axis} is out of range for shape {x.shape}")
    size = x.shape[axis]
    if size % n:
        raise ExecutionError(f"cannot split axis {axis} of size {size} (shape "
                             f"{x.shape}) into {n} equal shards")
    return np.split(x, n, axis=axis)


@NUMPY_RULES.register("Send")
def send(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (np.asarray(args[0]),)


@NUMPY_RULES.register("MPIAllreduce")
def allreduce(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    s = total(op_type, args)
    return (s,) * len(args)


@NUMPY_RULES.register("MPIAllreduceBucket")
def allreduce_bucket(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    k = attrs["tensors"]
    if not isinstance(k, int) or k < 1 or len(args) % k:
        raise ExecutionError(f"{len(args)} inputs cannot form tensors={k} members")
    n = len(args) // k
    return tuple(s for m in range(k) for s in (total(op_type, args[m * n:(m + 1) * n]),) * n)


@NUMPY_RULES.register("ReplicaAllreduce", "ReplicaAllgather")
def replica_collective(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    raise ExecutionError(f"{op_type} combines values of replicas this program does not "
                         "write: it is for simulation; execute the program of every "
                         "replica (dtp, not dtp_replica)")


@NUMPY_RULES.register("PeerAllreduce", "PeerAllgather")
def peer_collective(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    raise ExecutionError(f"{op_type} combines values of tensor-parallel ranks this program "
                         "does not write: it is for simulation; execute the program of every "
                         "rank (dtp, not dtp_replica)")


@NUMPY_RULES.register("MPIAllgather")
def allgather(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    g = np.concatenate(args, axis=attrs["axis"])
    return (g,) * len(args)


@NUMPY_RULES.register("MPIReduceScatter")
def reduce_scatter(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return tuple(split_even(op_type, total(op_type, args), attrs["axis"], len(args)))


@NUMPY_RULES.register("MPIBroadcast")
def broadcast(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (np.asarray(args[0]),) * len(attrs["devices"])


@NUMPY_RULES.register("MPIScatter")
def scatter(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return tuple(split_even(op_type, args[0], attrs["axis"], len(attrs["devices"])))


@NUMPY_RULES.register("MPIGather")
def gather(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (np.concatenate(args, axis=attrs["axis"]),)


@NUMPY_RULES.register("MPIReduce")
def reduce(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (total(op_type, args),)
