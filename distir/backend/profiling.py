"""Per-op traces of one step: ``torch.profiler`` with every op of a rank's program marked.

``marked(compiled)`` is a copy of a ``CompiledProgram`` whose kernels run inside
``torch.profiler.record_function`` ranges named ``distir#I OPTYPE`` (``I`` the op's index in
the rank's program); an asynchronous collective's wait is marked ``distir#I OPTYPE wait``.
Only the copy pays for the ranges: the program the timed steps run is left as compiled.

``profile_step`` runs one step of the marked copy under ``torch.profiler`` and writes the
rank's trace (Chrome trace JSON, as ``export_chrome_trace`` writes it) to
``DIR/rank{r}.json``, with one key added at the top level, ``"distir"``: the rank, the
program's name, its number of ops, the op types in order and the step's duration in seconds
(measured as the timed steps are, from the barrier to the end of the program).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distir.backend.lowering import CompiledProgram

__all__ = ["marked", "marker_name", "parse_marker", "write_trace", "MARKER"]

MARKER = re.compile(r"^distir#(\d+) ([A-Za-z_][A-Za-z0-9_]*)( wait)?$")
"""A range's name: ``distir#I OPTYPE`` for op I, ``distir#I OPTYPE wait`` for its wait."""


def marker_name(index: int, op_type: str, wait: bool = False) -> str:
    return f"distir#{index} {op_type}" + (" wait" if wait else "")


def parse_marker(name: str) -> tuple[int, str, bool] | None:
    """``(op index, op type, is a wait)`` of a range's name, or ``None`` for another event."""
    m = MARKER.match(name)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), m.group(3) is not None


class _MarkedWork:
    """A collective's work handle whose ``wait`` is a marked range."""

    __slots__ = ("work", "name")

    def __init__(self, work: Any, name: str) -> None:
        self.work = work
        self.name = name

    def wait(self) -> Any:
        from torch.profiler import record_function

        with record_function(self.name):
            return self.work.wait()


def _mark(kernel: Callable[..., tuple], name: str, wait_name: str | None
          ) -> Callable[..., tuple]:
    from torch.profiler import record_function

    if wait_name is None:
        def run(*args: Any) -> tuple:
            with record_function(name):
                return kernel(*args)
    else:
        def run(*args: Any) -> tuple:
            with record_function(name):
                res = kernel(*args)
            return (*res[:-1], _MarkedWork(res[-1], wait_name))
    return run


def marked(compiled: CompiledProgram) -> CompiledProgram:
    """A copy of ``compiled`` whose kernels run in ``record_function`` ranges (see the
    module docstring); it shares everything else with the original."""
    import copy

    steps = []
    for i, st in enumerate(compiled.steps):
        wait = marker_name(i, st.op_type, True) if st.asynchronous else None
        steps.append(dataclasses.replace(st, kernel=_mark(st.kernel,
                                                          marker_name(i, st.op_type), wait)))
    out = copy.copy(compiled)
    out.steps = steps
    return out


def write_trace(prof: Any, directory: str, rank: int, info: dict[str, Any]) -> str:
    """Export ``prof``'s trace as ``directory/rank{rank}.json`` with ``info`` under the
    ``"distir"`` key; returns the path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"rank{rank}.json")
    tmp = path + ".tmp"
    prof.export_chrome_trace(tmp)
    with open(tmp, encoding="utf-8") as f:
        doc = json.load(f)
    doc["distir"] = info
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, path)
    return path
