"""The worker processes of a local ``Session``: start, talk to, watch and stop them.

Each rank is a fresh interpreter, ``python -m distir.backend.worker_process`` (never a copy
of the user's script: nothing of ``__main__`` is imported, so no guard is needed), with the
same ``distir`` on its path as the launcher. It is started in a session of its own, so a
Ctrl-C at the terminal reaches only the launcher, which stops its workers itself; a worker
also exits when its input closes or the launcher disappears.

One thread per worker reads its replies (``distir.backend.wire`` frames) into one inbox, so
the launcher waits on all ranks at once and a large reply never blocks a worker.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

import distir
from distir.backend.wire import Progress, receive, send

__all__ = ["LocalWorkers"]


def _read_replies(rank: int, stream: IO[bytes], inbox: queue.Queue) -> None:
    try:
        while True:
            inbox.put(receive(stream))
    except EOFError:  # the worker exited (the launcher notices by its exit status)
        pass
    except Exception as e:  # noqa: BLE001 - a garbled reply: reported as this rank's
        inbox.put(("lost", rank, f"{type(e).__name__}: {e}"))


def _worker_env() -> dict[str, str]:
    """The launcher's environment, with the directory holding this ``distir`` first on the
    path (a script may have found it through ``sys.path`` edits the worker never sees), and
    PyTorch's allocator on expandable segments unless ``PYTORCH_CUDA_ALLOC_CONF`` says
    otherwise: near the card's capacity, fixed segments split by a step's large transient
    tensors left a request unserved with gigabytes free (docs/backend.md). NCCL's
    registration of the buffers of CUDA-graph-captured collectives is off unless
    ``NCCL_GRAPH_REGISTER`` says otherwise (``graph_env``)."""
    env = dict(os.environ)
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    env.update(graph_env(env))
    root = os.path.dirname(os.path.dirname(os.path.abspath(distir.__file__)))
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = root if not old else root + os.pathsep + old
    return env


def graph_env(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """What a rank's environment needs for steps replayed as CUDA graphs: NCCL's
    registration of graph-captured buffers off (``NCCL_GRAPH_REGISTER=0``) unless set. With
    it on, pipelines captured as graphs hung at random on 4 x H200 (NCCL 2.28: 5 of 15 runs);
    with it off, none did (grid_search/results/cuda_graph_4gpu). Eager steps are unaffected."""
    return {} if "NCCL_GRAPH_REGISTER" in env else {"NCCL_GRAPH_REGISTER": "0"}


def how_it_ended(code: int) -> str:
    """An exit status in words (negative: the signal that ended the process)."""
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


class LocalWorkers:
    """``world_size`` worker processes, started at once (``start`` returns before they are
    ready: each sends ``("ready", rank, device_name)`` or ``("fatal", rank, message)``).

    ``progress`` holds their shared progress slots; ``send`` and ``next`` exchange messages;
    ``exited`` says whether one has ended; ``stop`` ends them all and removes ``directory``
    (the session's files: the progress slots and the rendezvous store; workers whose
    launcher was killed remove it themselves).
    """

    def __init__(self, world_size: int, backend: str, timeout_s: float) -> None:
        self.world_size = world_size
        self.procs: list[subprocess.Popen[bytes]] = []
        self._readers: list[threading.Thread] = []
        self._inbox: queue.Queue = queue.Queue()
        self.directory = tempfile.mkdtemp(prefix="distir-run-")
        progress_path = os.path.join(self.directory, "progress")
        self.progress = Progress(progress_path, 3 * world_size, create=True)
        init = "file://" + os.path.join(self.directory, "store")
        env = _worker_env()
        try:
            for r in range(world_size):
                cmd = [sys.executable, "-m", "distir.backend.worker_process", str(r),
                       str(world_size), backend, init, repr(float(timeout_s)), progress_path,
                       str(os.getpid())]
                p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, start_new_session=True)
                self.procs.append(p)
                t = threading.Thread(target=_read_replies, args=(r, p.stdout, self._inbox),
                                     name=f"distir-rank{r}-replies", daemon=True)
                t.start()
                self._readers.append(t)
        except BaseException:
            self.stop(kill=True)
            raise

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def send(self, rank: int, msg: Any) -> bool:
        """Send ``msg`` to a rank; ``False`` when its input is closed (it has exited)."""
        stdin = self.procs[rank].stdin
        try:
            send(stdin, msg)  # type: ignore[arg-type]
        except (OSError, ValueError):  # a broken pipe, or a closed file
            return False
        return True

    def next(self, timeout: float) -> tuple | None:
        """The next reply from any rank, or ``None`` after ``timeout`` seconds."""
        try:
            return self._inbox.get(timeout=timeout)  # type: ignore[no-any-return]
        except queue.Empty:
            return None

    def exited(self, ignore: set[int] | frozenset[int] = frozenset()) -> tuple[int, str] | None:
        """A rank (not in ``ignore``) whose process has ended, and how, once everything it
        sent has been read; ``None`` when every such rank runs or replies remain unread."""
        for r, p in enumerate(self.procs):
            code = p.poll()
            if code is None or r in ignore:
                continue
            self._readers[r].join(2.0)  # its last replies reach the inbox first
            if not self._inbox.empty():
                return None
            return r, how_it_ended(code)
        return None

    def stop(self, kill: bool = False) -> None:
        """Ask every worker to leave (unless ``kill``), then terminate and kill whatever
        remains, and remove the session's files. Safe to call more than once."""
        procs, self.procs = self.procs, []
        if not kill:
            for p in procs:
                try:
                    send(p.stdin, None)  # type: ignore[arg-type]
                except (OSError, ValueError):  # it is gone already
                    pass
            _wait_all(procs, 10.0)
        for p in procs:
            if p.poll() is None:
                p.terminate()
        _wait_all(procs, 3.0)
        for p in procs:
            if p.poll() is None:
                p.kill()
        _wait_all(procs, 5.0)
        for t in self._readers:
            t.join(1.0)
        for p in procs:
            for f in (p.stdin, p.stdout):
                try:
                    if f is not None:
                        f.close()
                except OSError:  # a pipe whose other end is gone
                    pass
        self._readers = []
        self.progress.close()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = ""


def _wait_all(procs: list[subprocess.Popen[bytes]], within: float) -> None:
    end = time.monotonic() + within
    for p in procs:
        try:
            p.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
