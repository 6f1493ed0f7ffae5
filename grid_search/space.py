"""The search space of the DistIR paper: power-of-two D, T, P and microbatches K.

Each point is a ``Config``. For training the global batch is fixed per run; for inference
the batch size is a free variable of the space. ``enumerate_space`` yields every point once,
in a deterministic order, including those a transform will refuse (they are recorded with
the reason, not silently dropped).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

__all__ = ["Config", "enumerate_space", "powers_of_two", "strategy"]


@dataclass(frozen=True, slots=True)
class Config:
    """One point: model, batch size, degrees, microbatches and schedule."""

    model: str
    batch_size: int
    dp: int
    tp: int
    pp: int
    microbatches: int
    schedule: str

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def key(self) -> tuple:
        """What identifies a row of the results (for ``--resume``)."""
        return (self.model, self.batch_size, self.dp, self.tp, self.pp, self.microbatches,
                self.schedule)

    def as_row(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        s = f"D{self.dp}/T{self.tp}/P{self.pp}"
        if self.pp > 1:
            s += f"/K{self.microbatches}"
        return s


def powers_of_two(lo: int, hi: int) -> list[int]:
    out, p = [], 1
    while p <= hi:
        if p >= lo:
            out.append(p)
        p *= 2
    return out


def strategy(dp: int, tp: int, pp: int) -> str:
    """A label for plots and the summary: ``D``, ``T``, ``P``, ``D+T``, ..., or ``none``."""
    parts = [n for n, d in (("D", dp), ("T", tp), ("P", pp)) if d > 1]
    return "+".join(parts) if parts else "none"


def enumerate_space(model: str, devices: int, batch_sizes: Sequence[int], *,
                    fewer_devices: bool = False, max_microbatches: int = 128,
                    schedules: Sequence[str] = ("1f1b",),
                    max_tp: int | None = None) -> Iterator[Config]:
    """Every (batch, D, T, P, K, schedule) with power-of-two D, T, P whose product is
    ``devices`` (or at most ``devices`` with ``fewer_devices``); K in 2..max when P > 1,
    else 1 (the schedule is then irrelevant and listed once). ``max_tp`` bounds T, as
    Megatron's users keep tensor parallelism within a node (``max_tp`` = GPUs per node)."""
    if devices < 1 or devices & (devices - 1):
        from distir.errors import ConfigError

        raise ConfigError(f"--devices {devices}: the search space needs a power of two "
                          "(1, 2, 4, 8, 16, ...)")
    degrees = powers_of_two(1, devices)
    for b in batch_sizes:
        for dp in degrees:
            for tp in degrees if max_tp is None else [t for t in degrees if t <= max_tp]:
                for pp in degrees:
                    n = dp * tp * pp
                    if n > devices or (n < devices and not fewer_devices):
                        continue
                    if pp == 1:
                        yield Config(model, b, dp, tp, pp, 1, schedules[0])
                        continue
                    for k in powers_of_two(2, max_microbatches):
                        for sched in schedules:
                            yield Config(model, b, dp, tp, pp, k, sched)
