"""What travels between the launcher and its worker processes, and how.

A local worker is a fresh interpreter (``python -m distir.backend.worker_process``), so
nothing of the user's program is imported or pickled into it. The launcher writes commands
to the worker's standard input and reads replies from the worker's original standard output
(the worker sends anything printed to stdout to stderr instead, so no stray output can mix
with the replies). Every message is a frame: its length (8 bytes, little-endian), then a
pickle of plain data: strings, numbers, tuples, numpy arrays and ``RankResult``.

A task carries its rank's program as DistIR text (``distir.dumps``, read back with the
parser, unverified: a projected program holds communication attributes, such as ``seq``
and ``group``, and results-free ``Send`` statements that only projection makes). Where the
workers' Python lacks ``lark`` (the parser's one dependency; benchmark machines may not
have it), each says so when it is ready and the task travels as a pickled ``RankTask``
instead: IR objects unpickle without the parser. Inputs and outputs are numpy arrays (an
input of one repeated value travels as that value, ``worker.Filled``).

Progress slots (``progress[3 * rank + k]``: the communication a rank is in, whether it
waits in it, and its heartbeat count) live in a small file shared by memory mapping, so the
launcher's watchdog reads them while every rank is busy.
"""

from __future__ import annotations

import dataclasses
import mmap
import pickle
import struct
from typing import IO, Any

import numpy as np

from distir.backend.worker import Filled, RankTask

__all__ = ["send", "receive", "task_message", "task_from_message", "Progress"]

_HEADER = struct.Struct("<Q")


def send(stream: IO[bytes], msg: Any) -> None:
    """Write one framed message and flush; raises ``OSError`` (``BrokenPipeError``) when the
    reader is gone."""
    body = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(body)))
    stream.write(body)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """Read one framed message; ``EOFError`` when the writer closed its end (also in the
    middle of a frame: a writer that died)."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the stream ended")
    (n,) = _HEADER.unpack(head)
    body = stream.read(n)
    if len(body) < n:
        raise EOFError("the stream ended inside a message")
    return pickle.loads(body)


FILL_MIN_ELEMENTS = 4096
"""The smallest input ``task_message`` checks for one repeated value (``worker.Filled``)."""


def _compact(a: Any) -> Any:
    """``a``, or a ``worker.Filled`` where it is a numpy array of at least
    ``FILL_MIN_ELEMENTS`` elements all equal (zeros, ones: an optimizer's first state, a
    norm's weights), so that a model's real run does not send them whole."""
    if isinstance(a, np.ndarray) and a.size >= FILL_MIN_ELEMENTS and a.dtype.kind in "fiub":
        first = a.reshape(-1)[0]
        if (a == first).all():
            return Filled(first, tuple(a.shape))
    return a


def task_message(task: RankTask, *, text: bool = True) -> tuple:
    """A task as plain data, its program as DistIR text (or, unless ``text``, the task as
    pickled objects); inputs of one repeated value as that value (``_compact``)."""
    from distir.ir.printer import dumps

    if task.inputs is not None:
        task = dataclasses.replace(task, inputs=[_compact(a) for a in task.inputs])
    if not text:
        return ("task", task)
    prog = task.program
    return ("run", dumps(prog.fn), prog.device, prog.param_index, prog.return_index,
            task.name, task.groups, task.inputs, task.steps, task.warmup, task.want_outputs,
            task.memory_limit, task.seed, task.profile, task.profile_marks, task.cuda_graph,
            task.host_cost)


def task_from_message(msg: tuple) -> RankTask:
    """The task that ``task_message`` wrote (its program parsed back, not verified)."""
    from distir.analysis.projection import RankProgram
    from distir.ir.parser import parse_module

    if msg[0] == "task":
        return msg[1]  # type: ignore[no-any-return]
    (_, text, device, param_index, return_index, name, groups, inputs, steps, warmup, want,
     memory_limit, seed, profile, profile_marks, cuda_graph, host_cost) = msg
    fn = parse_module(text, f"<rank {device} of @{name}>").entry
    return RankTask(name, RankProgram(device, fn, tuple(param_index), tuple(return_index)),
                    tuple(tuple(g) for g in groups), inputs, steps, warmup, want,
                    memory_limit, seed, profile, profile_marks, cuda_graph, host_cost)


class Progress:
    """``n`` signed 64-bit slots in a file, shared by every process that maps it. Indexing
    reads and writes slots (aligned 8-byte stores, so a reader never sees half a value)."""

    def __init__(self, path: str, n: int, *, create: bool = False) -> None:
        self.path = path
        size = 8 * max(1, n)
        if create:
            with open(path, "wb") as f:
                f.write(b"\0" * size)
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), size)
        self._slots: Any = memoryview(self._map).cast("q")
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        return int(self._slots[i])

    def __setitem__(self, i: int, value: int) -> None:
        self._slots[i] = value

    def close(self) -> None:
        if self._slots is not None:
            self._slots.release()
            self._slots = None
            self._map.close()
