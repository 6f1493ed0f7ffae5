"""Type rules of the communication ops: shapes, dtypes and the devices of their results.

Placement is the point of these ops, so their rules check it (the interpreter checks
placement only for the other ops): a ``Send`` must move its value to another device, a
collective takes at most one input per device and lists each destination device once, and
a scatter must split its axis evenly. Results live where the spec's table puts them:
``MPIAllreduce``/``MPIAllreduceBucket``/``MPIAllgather``/``MPIReduceScatter`` result i on the
i-th input's device,
``MPIBroadcast``/``MPIScatter`` result i on ``devices[i]``, ``MPIGather``/``MPIReduce`` on
``device``.

Messages do not start with the op name: the interpreter prefixes it with the op's place.
"""

from __future__ import annotations

from typing import Any

from distir.analysis.rules import TYPE_RULES
from distir.analysis.type_rules._util import norm_axis, same_dtype, tensor
from distir.analysis.values import type_of
from distir.errors import PlacementError, TypeInferenceError
from distir.ir.types import ScalarType, TensorType

__all__ = ["check_one_per_device", "check_device_list", "shard_size", "bucket_members"]


def check_one_per_device(op_type: str, ts: list[TensorType]) -> None:
    """A collective takes at most one input per device."""
    seen: dict[int, int] = {}
    for i, t in enumerate(ts):
        j = seen.get(t.device)
        if j is not None:
            raise PlacementError(f"inputs {j} and {i} are both on device {t.device}, but "
                                 f"{op_type} takes one input per device: combine them first")
        seen[t.device] = i


def check_device_list(op_type: str, devices: Any) -> tuple[int, ...]:
    """The ``devices`` attribute as a tuple of distinct devices."""
    if isinstance(devices, int) and not isinstance(devices, bool):
        devices = (devices,)
    if not isinstance(devices, tuple) or not devices or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices):
        raise TypeInferenceError("devices must be [d0, d1, ...], a non-empty list of "
                                 f"devices, got {devices!r}")
    seen: set[int] = set()
    for d in devices:
        if d in seen:
            raise PlacementError(f"device {d} is listed twice in devices="
                                 f"{list(devices)}; {op_type} sends one copy per device")
        seen.add(d)
    return devices


def shard_size(op_type: str, t: TensorType, axis: int, n: int) -> int:
    """The size along ``axis`` of each of ``n`` equal shards of ``t``."""
    size = t.shape[axis]
    if size % n:
        raise TypeInferenceError(f"cannot split axis {axis} of size {size} (shape "
                                 f"{t.shape}) into {n} equal shards: use a size divisible by "
                                 f"{n}")
    return size // n


def _collective_inputs(op_type: str, args: tuple, *, same_shape: bool) -> list[TensorType]:
    ts = [tensor(a, f"input {i}") for i, a in enumerate(args)]
    check_one_per_device(op_type, ts)
    same_dtype(ts, op_type)
    if same_shape:
        for i, t in enumerate(ts[1:], 1):
            if t.shape != ts[0].shape:
                raise TypeInferenceError(f"inputs must have one shape, input 0 (on "
                                         f"device {ts[0].device}) is {ts[0].shape} and input "
                                         f"{i} (on device {t.device}) is {t.shape}")
    return ts


def _concat_shape(op_type: str, ts: list[TensorType], axis_attr: int) -> tuple[int, ...]:
    rank = ts[0].rank
    axis = norm_axis(axis_attr, rank)
    total = 0
    for i, t in enumerate(ts):
        if t.rank != rank or t.shape[:axis] + t.shape[axis + 1:] != \
                ts[0].shape[:axis] + ts[0].shape[axis + 1:]:
            raise TypeInferenceError(f"concatenating along axis {axis_attr} needs inputs whose "
                                     f"shapes agree off that axis, input 0 is {ts[0].shape} "
                                     f"and input {i} (on device {t.device}) is {t.shape}")
        total += t.shape[axis]
    return ts[0].shape[:axis] + (total,) + ts[0].shape[axis + 1:]


@TYPE_RULES.register("Send")
def send(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = type_of(args[0])
    if not isinstance(t, (TensorType, ScalarType)):
        raise TypeInferenceError(f"Send moves a tensor or a scalar, got {t}")
    d = attrs.get("device")
    if (d is None) == (len(args) < 2):
        raise TypeInferenceError("Send takes its destination once: either device=D or a "
                                 "second input whose device is the destination")
    if d is None:
        to = type_of(args[1])
        if not isinstance(to, (TensorType, ScalarType)):
            raise TypeInferenceError(f"Send's second input names the destination by its "
                                     f"device; it must be a tensor or a scalar, got {to}")
        d = to.device
    if t.device == d:
        raise PlacementError(f"the value is already on device {d}; a Send must move it to "
                             "another device: remove the Send or change device=")
    return (t.with_device(d),)


@TYPE_RULES.register("MPIAllreduce")
def allreduce(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return tuple(_collective_inputs(op_type, args, same_shape=True))


def _replica_input(args: tuple, attrs: dict[str, Any]) -> tuple[TensorType, int]:
    """The input of a ``Replica*`` op and the replicas its ``devices`` list."""
    t = tensor(args[0], "input 0")
    devices = list(attrs["devices"])
    if t.device not in devices:
        raise PlacementError(f"the input is on device {t.device}, not one of devices="
                             f"{devices}: list the devices of every replica's copy, this "
                             "one's included")
    if len(set(devices)) != len(devices):
        raise PlacementError(f"devices={devices} lists a device twice: list each replica's "
                             "device once")
    return t, len(devices)


@TYPE_RULES.register("ReplicaAllreduce")
def replica_allreduce(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (_replica_input(args, attrs)[0],)


@TYPE_RULES.register("ReplicaAllgather")
def replica_allgather(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t, n = _replica_input(args, attrs)
    a = norm_axis(attrs.get("axis", 0), len(t.shape))
    return (TensorType(t.dtype, t.shape[:a] + (t.shape[a] * n,) + t.shape[a + 1:], t.device),)


def _peers(attrs: dict[str, Any]) -> int:
    n = attrs["peers"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TypeInferenceError(f"peers must be a positive int, the ranks of the group, got "
                                 f"{n!r}")
    return n


@TYPE_RULES.register("PeerAllreduce")
def peer_allreduce(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    _peers(attrs)
    return (tensor(args[0], "input 0"),)


@TYPE_RULES.register("PeerAllgather")
def peer_allgather(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    n = _peers(attrs)
    t = tensor(args[0], "input 0")
    a = norm_axis(attrs.get("axis", 0), len(t.shape))
    return (TensorType(t.dtype, t.shape[:a] + (t.shape[a] * n,) + t.shape[a + 1:], t.device),)


def bucket_members(op_type: str, args: tuple, k: Any) -> list[list[TensorType]]:
    """The members of an ``MPIAllreduceBucket``: ``k`` runs of equally many inputs, each run
    one tensor per device of one shape, every run on the same devices in the same order,
    all of one dtype (the bucket is one flat buffer)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise TypeInferenceError(f"tensors must be a positive int, the member count, got {k!r}")
    if not args or len(args) % k:
        raise TypeInferenceError(f"{len(args)} inputs cannot form tensors={k} members of one "
                                 f"tensor per device each: give a multiple of {k} inputs")
    n = len(args) // k
    members = [_collective_inputs(op_type, args[m * n:(m + 1) * n], same_shape=True)
               for m in range(k)]
    devices = [t.device for t in members[0]]
    for m, ts in enumerate(members[1:], 1):
        if [t.device for t in ts] != devices:
            raise PlacementError(f"member {m} is on devices {[t.device for t in ts]} but "
                                 f"member 0 on {devices}: list every member's tensors on the "
                                 "same devices in the same order")
        if ts[0].dtype != members[0][0].dtype:
            raise TypeInferenceError(f"member {m} is {ts[0].dtype} but member 0 is "
                                     f"{members[0][0].dtype}: a bucket holds one dtype, cast "
                                     "first or use two buckets")
    return members


@TYPE_RULES.register("MPIAllreduceBucket")
def allreduce_bucket(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return tuple(t for ts in bucket_members(op_type, args, attrs["tensors"]) for t in ts)


@TYPE_RULES.register("MPIAllgather")
def allgather(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts = _collective_inputs(op_type, args, same_shape=False)
    shape = _concat_shape(op_type, ts, attrs["axis"])
    return tuple(t.with_shape(shape) for t in ts)


@TYPE_RULES.register("MPIReduceScatter")
def reduce_scatter(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts = _collective_inputs(op_type, args, same_shape=True)
    t0 = ts[0]
    axis = norm_axis(attrs["axis"], t0.rank)
    size = shard_size(op_type, t0, axis, len(ts))
    shape = t0.shape[:axis] + (size,) + t0.shape[axis + 1:]
    return tuple(t.with_shape(shape) for t in ts)


@TYPE_RULES.register("MPIBroadcast")
def broadcast(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    return tuple(t.with_device(d) for d in check_device_list(op_type, attrs["devices"]))


@TYPE_RULES.register("MPIScatter")
def scatter(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    devices = check_device_list(op_type, attrs["devices"])
    axis = norm_axis(attrs["axis"], t.rank)
    size = shard_size(op_type, t, axis, len(devices))
    shape = t.shape[:axis] + (size,) + t.shape[axis + 1:]
    return tuple(TensorType(t.dtype, shape, d) for d in devices)


@TYPE_RULES.register("MPIGather")
def gather(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts = _collective_inputs(op_type, args, same_shape=False)
    shape = _concat_shape(op_type, ts, attrs["axis"])
    return (TensorType(ts[0].dtype, shape, attrs["device"]),)


@TYPE_RULES.register("MPIReduce")
def reduce(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts = _collective_inputs(op_type, args, same_shape=True)
    return (ts[0].with_device(attrs["device"]),)
