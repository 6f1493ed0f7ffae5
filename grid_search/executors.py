"""Where a search's simulations run: local processes (the default) or a Ray cluster.

An executor turns configurations into result rows. Whatever runs them, ``rows`` yields the
rows in the order of the configurations, each as soon as it and every row before it are
known, so ``run_search`` can write the CSV line by line and ``--resume`` finds the same
file an uninterrupted run would have written.

- ``LocalExecutor(workers)``: ``workers`` processes on this machine (one: in this process).
- ``RayExecutor(address, workers)``: one Ray task per configuration on a Ray cluster
  (``pip install 'distir[ray]'``). Results are collected with ``ray.wait`` as they
  complete and released in order; at most ``4 * workers`` configurations are submitted
  ahead of the last row released, so a slow configuration holds back at most that many
  finished rows and the cluster never gets the whole space queued at once.

Each worker process builds and analyses the sequential model once per batch size and
reuses it for every configuration it is given (see ``grid_search.search.evaluate``).
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Generator, Iterator, Sequence
from typing import Any, Protocol, cast

from distir.errors import ConfigError
from grid_search.models import Workload
from grid_search.space import Config

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "RayExecutor", "make_executor",
           "ray_runtime_env"]

EXECUTORS = ("local", "ray")

# Configurations submitted ahead of the last row released, per worker.
_AHEAD_PER_WORKER = 4


class Executor(Protocol):
    """Runs ``grid_search.search.evaluate`` on configurations somewhere."""

    def describe(self) -> str:
        """Where the simulations run, for the command's first line."""
        ...

    def rows(self, workload: Workload, hardware: Any,
             configs: Sequence[Config]) -> Generator[dict[str, Any], None, None]:
        """The row of every configuration, in the order of ``configs``, each yielded as soon
        as it and all rows before it are known. ``hardware`` is a loaded
        ``distir.analysis.hardware.Hardware`` (resolved where the search was started, so a
        profile given by path need not exist on other machines). An executor that can fail
        to start (no cluster) fails in this call, before any row is asked for; closing the
        generator releases what it started, whether or not a row was taken."""
        ...


# -- local processes ---------------------------------------------------------------------

class LocalExecutor:
    """``workers`` processes of this machine (fork on Linux); one worker runs in-process."""

    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            raise ConfigError(f"--workers {workers}: need at least 1")
        self.workers = workers

    def describe(self) -> str:
        return f"{self.workers} worker(s)"

    def rows(self, workload: Workload, hardware: Any,
             configs: Sequence[Config]) -> Generator[dict[str, Any], None, None]:
        from grid_search.search import _init_worker, evaluate

        if not configs:
            return
        if self.workers <= 1 or len(configs) == 1:
            _init_worker(workload, hardware)
            for c in configs:
                yield evaluate(c)
            return
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx,
                                 initializer=_init_worker,
                                 initargs=(workload, hardware)) as pool:
            # Consecutive configurations share a batch size: chunks keep each worker's
            # models few.
            yield from pool.map(evaluate, configs,
                                chunksize=max(1, len(configs) // (4 * self.workers)))


# -- Ray ---------------------------------------------------------------------------------

def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray, which is not installed: "
                          "pip install 'distir[ray]'") from None
    return ray


def ray_runtime_env() -> dict[str, Any]:
    """The Ray runtime environment (for ``ray.init``: Ray uploads local folders only for
    a whole job) that ships this process's ``distir`` and ``grid_search`` source to the
    workers as ``py_modules``, so every node runs the driver's code. Only those two
    package folders travel, never a checkout's other files (``.venv``, results); the
    nodes must still have distir's dependencies (numpy, lark, onnx, ...) installed."""
    import distir
    import grid_search

    dirs = [os.path.dirname(os.path.abspath(m.__file__ or "")) for m in (distir, grid_search)]
    return {"py_modules": dirs, "excludes": ["__pycache__", "*.pyc"]}


def _check_reachable(address: str, where: str) -> None:
    """A ``host:port`` address that nothing listens on fails here in seconds, with one
    line naming ``where`` it came from, rather than after Ray's minutes of retries."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)),
                                 timeout=5).close()
    except OSError as e:
        raise ConfigError(f"{where}: no Ray cluster answers there ({e.strerror or e}); "
                          "start one with `ray start --head` or fix the address") from None


def _evaluate_remote(token: str, context: list[Any], cfg: Config) -> dict[str, Any]:
    """One configuration in a Ray worker. ``context[0]`` is the object ref of
    (workload, hardware), fetched only when this worker first sees the search ``token``
    (the hardware profile is hundreds of kB; configurations are a few bytes)."""
    from grid_search import search

    if search._STATE.token != token:
        import ray

        workload, hardware = ray.get(context[0])
        search._init_worker(workload, hardware, token)
    return search.evaluate(cfg)


class RayExecutor:
    """One Ray task per configuration.

    ``address`` goes to ``ray.init``: ``HOST:PORT`` (a cluster's GCS) or
    ``ray://HOST:PORT`` (Ray Client) names a cluster; ``"auto"`` is $RAY_ADDRESS, else a
    cluster started on this machine with ``ray start``; ``"local"`` starts a new instance
    on this machine. None is ``"auto"`` when $RAY_ADDRESS is set, else ``"local"``: a
    search never lands on a cluster by accident, nor waits for one that a killed
    ``ray start`` left behind. When Ray is already initialised in this process the
    executor uses that connection, as it is, and leaves it open (its workers must be able
    to import distir: installed there, or ``ray.init(runtime_env=ray_runtime_env())``);
    otherwise it connects when the search starts, shipping the code when ``ship_code``,
    and disconnects when it ends.

    ``workers`` bounds the configurations in flight (``4 * workers`` ahead of the last row
    released); None uses the cluster's CPUs when the search starts.
    ``ship_code`` sends this process's ``distir`` and ``grid_search`` to the cluster as
    the job's ``ray_runtime_env``."""

    def __init__(self, address: str | None = None, workers: int | None = None,
                 ship_code: bool = True) -> None:
        if workers is not None and workers < 1:
            raise ConfigError(f"--workers {workers}: need at least 1")
        _import_ray()  # a missing install fails here, before any file is written
        self.address = address
        self.workers = workers
        self.ship_code = ship_code

    def _resolved(self) -> str:
        if self.address is None:
            return "auto" if os.environ.get("RAY_ADDRESS") else "local"
        return self.address

    def describe(self) -> str:
        address = self._resolved()
        env = os.environ.get("RAY_ADDRESS")
        if _import_ray().is_initialized():
            where = "the Ray cluster this process is connected to"
        elif address == "auto":
            where = (f"the Ray cluster at $RAY_ADDRESS ({env})" if env
                     else "the Ray cluster started on this machine")
        elif address == "local":
            where = "a new local Ray instance"
        else:
            where = f"the Ray cluster at {address}"
        cap = f", at most {self.workers} at once" if self.workers else ""
        return f"on {where}{cap}"

    def _connect(self, ray: Any) -> bool:
        """Connect unless connected; True when this call connected."""
        if ray.is_initialized():
            return False
        address = self._resolved()
        where = f"--address {address}" if self.address else "--executor ray"
        env = os.environ.get("RAY_ADDRESS")
        if address == "auto" and env:
            _check_reachable(env, f"$RAY_ADDRESS={env}")
        elif address not in ("auto", "local"):
            _check_reachable(address, where)
        try:
            ray.init(address=address, logging_level="WARNING",
                     runtime_env=ray_runtime_env() if self.ship_code else None)
        except (ConnectionError, ValueError, RuntimeError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(f"{where}: cannot connect to Ray: {first}") from None
        return True

    def rows(self, workload: Workload, hardware: Any,
             configs: Sequence[Config]) -> Generator[dict[str, Any], None, None]:
        stream = self._stream(workload, hardware, configs)
        # Run up to the first yield: connecting (and failing to) happens now, and from
        # here closing the generator runs its clean-up.
        next(stream)
        return cast("Generator[dict[str, Any], None, None]", stream)

    def _stream(self, workload: Workload, hardware: Any,
                configs: Sequence[Config]) -> Generator[dict[str, Any] | None, None, None]:
        """Yields None once connected, then the rows."""
        if not configs:
            yield None
            return
        ray = _import_ray()
        connected = self._connect(ray)
        pending: dict[Any, int] = {}
        try:
            yield None
            workers = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            ahead = _AHEAD_PER_WORKER * workers
            task = ray.remote(_evaluate_remote).options(num_cpus=1)
            token = uuid.uuid4().hex
            context = [ray.put((workload, hardware))]
            yield from in_order(ray, task, [(token, context, c) for c in configs], ahead,
                                pending)
        finally:
            for ref in pending:
                ray.cancel(ref)
            if connected:
                ray.shutdown()


def in_order(ray: Any, task: Any, calls: Sequence[tuple], window: int,
             pending: dict[Any, int]) -> Iterator[Any]:
    """The results of ``task.remote(*call)`` for each of ``calls``, in that order, with at
    most ``window`` calls submitted beyond the next result to yield. ``pending`` (the
    caller's, to cancel on clean-up) holds the refs submitted and not yet collected."""
    done: dict[int, Any] = {}
    submitted = released = 0
    while released < len(calls):
        while submitted < len(calls) and submitted - released < window:
            pending[task.remote(*calls[submitted])] = submitted
            submitted += 1
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            done[pending.pop(ref)] = ray.get(ref)
        while released in done:
            yield done.pop(released)
            released += 1


def make_executor(kind: str, *, workers: int | None = None,
                  address: str | None = None) -> Executor:
    """The executor the command line names (``--executor``, ``--workers``, ``--address``).
    Local workers default to every core of this machine."""
    if kind == "local":
        if address is not None:
            raise ConfigError("--address names a Ray cluster: use it with --executor ray")
        return LocalExecutor(workers if workers is not None else os.cpu_count() or 1)
    if kind == "ray":
        return RayExecutor(address, workers)
    raise ConfigError(f"--executor {kind}: unknown; use one of {', '.join(EXECUTORS)}")
