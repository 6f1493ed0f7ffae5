"""Small helpers shared across the package."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["no_gc", "STDERR"]


class _Stderr:
    """Whatever ``sys.stderr`` is when written to: a default ``progress`` stream. A default
    of ``sys.stderr`` itself is the stream of import time, which a caller that swaps
    ``sys.stderr`` (a test's capture, a redirection) may since have closed."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def __getattr__(self, name: str) -> object:  # isatty, fileno, ...: today's stream's
        return getattr(sys.stderr, name)


STDERR = _Stderr()


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk build or walk.

    Building a large module allocates many objects and almost no garbage; the collector's
    repeated full passes over the growing heap would otherwise cost a third of the time.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
