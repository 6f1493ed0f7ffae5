"""The ops the simulator's random-program tests draw (shared by the memoization, renaming
and replica tests): each appends one op on ``pool``'s values (``(value, device)`` pairs)
to a builder, drawing from ``rng`` in a fixed order so that a seed gives one program."""

from __future__ import annotations

import random

from distir.ir import FunctionBuilder
from distir.ir.core import Value

Pool = list[tuple[Value, int]]


def unary(b: FunctionBuilder, rng: random.Random, pool: Pool, v: Value, d: int) -> None:
    pool.append((b.op(rng.choice(["Relu", "Exp", "Neg", "Tanh"]), v), d))


def binary(b: FunctionBuilder, rng: random.Random, pool: Pool, v: Value, d: int) -> None:
    w = rng.choice([p for p, pd in pool if pd == d])
    pool.append((b.op(rng.choice(["Add", "Mul"]), v, w), d))


def send(b: FunctionBuilder, rng: random.Random, pool: Pool, v: Value, d: int,
         devices: list[int]) -> None:
    to = rng.choice([x for x in devices if x != d])
    pool.append((b.op("Send", v, device=to), to))


def allreduce(b: FunctionBuilder, rng: random.Random, pool: Pool) -> None:
    """An all-reduce of one value per device, the values drawn at random (none when the
    pool has values on fewer than two devices)."""
    by_dev: dict[int, Value] = {}
    for p, pd in rng.sample(pool, len(pool)):
        by_dev.setdefault(pd, p)
    if len(by_dev) >= 2:
        ds = sorted(by_dev)
        outs = b.op("MPIAllreduce", *(by_dev[x] for x in ds), num_results=len(ds))
        pool.extend(zip(outs, ds))
