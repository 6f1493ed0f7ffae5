"""Cost rules of communication ops: ``Hardware.comm_time(kind, bytes, devices)``, the
profile's fitted model of the collective within a node, else the alpha-beta model of a ring
(``hardware.collective_factors``). An op occupies every device of its group for its whole
duration (collectives are synchronous), so the simulator starts it when all are free.
"""

from __future__ import annotations

from typing import Any

from distir.analysis.cost import COST_RULES, OpCost
from distir.analysis.hardware import Hardware, rowwise_features

_KIND = {"Send": "send", "MPIAllreduce": "allreduce", "MPIAllgather": "allgather",
         "MPIReduceScatter": "reduce_scatter", "MPIBroadcast": "broadcast",
         "MPIScatter": "scatter", "MPIGather": "gather", "MPIReduce": "reduce"}
# Which buffer's size is the message size: the first input's or the first result's.
_BY_OUTPUT = frozenset({"MPIAllgather", "MPIGather"})


def _group(ins: tuple, outs: tuple) -> list[int]:
    seen: dict[int, None] = {}
    for t in (*ins, *outs):
        if t is not None:
            for d in t.devices:
                seen[d] = None
    return list(seen)


@COST_RULES.register(*_KIND)
def collective(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
               hw: Hardware) -> OpCost:
    nbytes = float((outs[0] if op_type in _BY_OUTPUT else ins[0]).size_bytes)
    devices = _group(ins, outs)
    return OpCost(hw.comm_time(_KIND[op_type], nbytes, devices), 0.0, nbytes, True)


@COST_RULES.register("ReplicaAllreduce", "ReplicaAllgather")
def replica_collective(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                       hw: Hardware) -> OpCost:
    """One replica's part of an all-reduce or all-gather over ``devices``: the
    collective's time (every replica's part starts and ends together, the replicas being
    identical). The message size is ``MPIAllreduce``'s (the input) or ``MPIAllgather``'s
    (the result)."""
    gather = op_type == "ReplicaAllgather"
    nbytes = float((outs[0] if gather else ins[0]).size_bytes)
    return OpCost(hw.comm_time("allgather" if gather else "allreduce", nbytes,
                               list(attrs["devices"])), 0.0, nbytes, True)


@COST_RULES.register("PeerAllreduce", "PeerAllgather")
def peer_collective(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                    hw: Hardware) -> OpCost:
    """Rank 0's part of a collective over its device ``d`` and its peers ``d + 1, ...,
    d + peers - 1``: the collective's time (every rank's part starts and ends together,
    the ranks being identical). The message size is ``MPIAllreduce``'s (the input) or
    ``MPIAllgather``'s (the result)."""
    gather = op_type == "PeerAllgather"
    nbytes = float((outs[0] if gather else ins[0]).size_bytes)
    d = ins[0].device
    group = list(range(d, d + int(attrs["peers"])))
    return OpCost(hw.comm_time("allgather" if gather else "allreduce", nbytes, group), 0.0,
                  nbytes, True)


@COST_RULES.register("MPIAllreduceBucket")
def allreduce_bucket(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                     hw: Hardware) -> OpCost:
    """One all-reduce of the members' summed bytes (per device), plus, for two members or
    more, the copies that flatten them into one buffer and split it back (each reads and
    writes the bucket once: the profile's ``copy`` kernel model, else its memory-bound
    one). The copies are charged to the collective, on the communication stream."""
    k = int(attrs["tensors"])
    n = len(ins) // k
    nbytes = float(sum(ins[m * n].size_bytes for m in range(k)))
    seconds = hw.comm_time("allreduce", nbytes, _group(ins, outs))
    if k > 1:
        rows = int(nbytes) // max(ins[0].dtype.itemsize, 1)  # contiguous: one long row
        seconds += 2 * hw.kernel_time("copy", 2 * nbytes, 0.0, ins[0].dtype.value,
                                      rowwise_features(2 * nbytes, rows, rows))
    return OpCost(seconds, 0.0, nbytes, True)
