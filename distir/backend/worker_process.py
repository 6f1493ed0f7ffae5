"""A local worker: one fresh interpreter per rank, started by ``distir.backend.Session``.

    python -m distir.backend.worker_process RANK WORLD_SIZE BACKEND INIT_METHOD TIMEOUT_S \\
        PROGRESS_FILE LAUNCHER_PID

It never imports the user's script (which is why ``distir.run`` needs no
``if __name__ == "__main__":`` guard): it joins the process group, says it is ready, then
runs the tasks that arrive on its standard input (``distir.backend.wire``: programs as
DistIR text, or as pickled IR where ``lark`` is missing; inputs as numpy arrays) and answers
each with a ``RankResult``, until it is told to stop, its input ends, or the launcher
disappears.

Replies go out through the standard output the worker was started with; the worker points
its own file descriptor 1 (and ``sys.stdout``) at stderr first, so nothing a library prints
can corrupt a reply. Interrupts are ignored: the launcher stops its workers itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
import traceback
from typing import IO

__all__ = ["main", "serve"]

USAGE = ("usage: python -m distir.backend.worker_process RANK WORLD_SIZE BACKEND INIT_METHOD "
         "TIMEOUT_S PROGRESS_FILE LAUNCHER_PID (started by distir.backend.Session, not by "
         "hand)")


def _watch_launcher(ppid: int, session_dir: str) -> None:
    """Exit when the launcher is gone (so no worker outlives a killed session), even while
    the main thread waits in a collective, removing the session's files that the launcher
    could not. (Where ``sys.executable`` is a wrapper that started this interpreter as its
    own child, the wrapper is watched.)"""
    if os.getppid() != ppid and os.name == "posix":  # (on Windows, os.kill terminates)
        try:
            os.kill(ppid, 0)
        except OSError:  # the launcher died before this worker got here
            _orphaned(session_dir)
        ppid = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != ppid:
            _orphaned(session_dir)


def _orphaned(session_dir: str) -> None:
    shutil.rmtree(session_dir, ignore_errors=True)  # every worker tries; the first wins
    os._exit(3)


def _reads_text() -> bool:
    """Whether this interpreter has the text parser's one dependency, ``lark`` (without it,
    the launcher sends programs as pickled IR objects instead)."""
    try:
        import lark  # noqa: F401
    except ImportError:
        return False
    return True


def serve(rank: int, world_size: int, backend: str, init_method: str, timeout_s: float,
          progress_path: str, commands: IO[bytes], replies: IO[bytes]) -> None:
    """Set up this rank, then run tasks until told to stop (``None``) or the input ends."""
    import datetime

    import torch
    import torch.distributed as dist

    from distir.backend.timing import OK
    from distir.backend.wire import Progress, receive, send, task_from_message
    from distir.backend.worker import RankRunner, describe

    progress = Progress(progress_path, 3 * world_size)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
            dist.init_process_group("nccl", init_method=init_method, rank=rank,
                                    world_size=world_size, device_id=device,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        else:
            # Share the cores: oversubscribed OpenMP threads spin against each other.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
            device = torch.device("cpu")
            dist.init_process_group("gloo", init_method=init_method, rank=rank,
                                    world_size=world_size,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        runner = RankRunner(rank, world_size, backend, device, timeout_s, progress)
        runner.agree(OK)
    except Exception as e:  # noqa: BLE001 - reported to the launcher, which says which rank
        send(replies, ("fatal", rank, describe(e)))
        return
    send(replies, ("ready", rank, runner.device_name, _reads_text()))
    orphaned = False
    while True:
        try:
            msg = receive(commands)
        except EOFError:  # our input closed without a word: the launcher is gone
            orphaned = True
            break
        if msg is None:
            break
        try:
            task = task_from_message(msg)
        except Exception as e:  # noqa: BLE001 - a program this worker cannot read
            res = runner.refuse(f"its program did not arrive intact: {describe(e)}",
                                type(e).__name__)
        else:
            res = runner.run(task)
        send(replies, ("result", rank, res))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - leaving anyway
        pass
    if orphaned:  # remove the session's files, which the launcher could not
        shutil.rmtree(os.path.dirname(progress_path), ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if len(args) != 7:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    rank, world_size, backend, init_method, timeout_s, progress_path, ppid = args
    threading.Thread(target=_watch_launcher, args=(int(ppid), os.path.dirname(progress_path)),
                     daemon=True).start()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever anything prints goes to stderr, never into a reply
    sys.stdout = sys.stderr
    commands = os.fdopen(os.dup(0), "rb")
    code = 0
    try:
        serve(int(rank), int(world_size), backend, init_method, float(timeout_s),
              progress_path, commands, replies)
    except (BrokenPipeError, EOFError):  # the launcher went away mid-reply
        pass
    except BaseException:  # a bug here: the launcher reports the exit, this says why
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)  # skip the interpreter's slow teardown of torch


if __name__ == "__main__":
    main()
