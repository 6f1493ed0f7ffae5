"""Process groups: one per device group a program communicates in, created once.

Every rank calls ``GroupCache.ensure`` with the same list of groups (a projection's
``groups``), so ``torch.distributed.new_group`` runs in the same order everywhere, as it
must. Groups are kept across programs, so a session that runs many programs creates each
communicator once. New groups are warmed up at once (a one-element all-reduce by their
members, in creation order), so NCCL communicators are built up front rather than inside
the first timed step.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

__all__ = ["GroupCache"]


class GroupCache:
    """Process groups of this rank, keyed by the sorted tuple of their global ranks."""

    def __init__(self, rank: int, world_size: int, device: Any, timeout_s: float) -> None:
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.groups: dict[tuple[int, ...], Any] = {}

    def ensure(self, groups: Sequence[tuple[int, ...]]) -> None:
        """Create the groups not yet created, in the given order, and warm them up."""
        import torch
        import torch.distributed as dist

        new = []
        for g in groups:
            g = tuple(g)
            if g in self.groups:
                continue
            if any(r < 0 or r >= self.world_size for r in g):
                from distir.errors import BackendError

                raise BackendError(f"the program communicates between devices {list(g)}, "
                                   f"but only {self.world_size} processes run it")
            # Never the default group, even for all ranks: the default group carries the
            # launcher's barriers, which a program's collectives must not be confused with.
            self.groups[g] = dist.new_group(list(g), timeout=self.timeout)
            new.append(g)
        for g in new:
            if self.rank in g:
                dist.all_reduce(torch.zeros(1, device=self.device), group=self.groups[g])

    def get(self, group: tuple[int, ...]) -> Any:
        """The process group of ``group``; this rank must be a member."""
        pg = self.groups.get(tuple(group))
        if pg is None:
            from distir.errors import BackendError

            raise BackendError(f"no process group for devices {list(group)}: the groups a "
                               "program uses must be created (GroupCache.ensure) before it "
                               "is compiled")
        return pg
