"""What the GPUs' clocks did while a run was measured: a sampler of each device's SM clock
and clock-event (throttle) reasons, read from NVML by a thread of the measuring process.

A step's time is the kernels' time at the clocks the card ran at. The cost model's profiles
were calibrated on cards running at their boost clock; a card held back by its power
brake, its temperature or a hardware slowdown runs every kernel slower, and a study measured
on it checks the lease, not the prediction (``grid_search/results/h100x4_passes/``: steps of
4 GPUs 1.02-2.46x apart between two launches on one machine, whose 1- and 2-GPU steps
repeated within 0.5%). ``ClockSampler`` records, for the devices a run uses, the SM clock
of every sample taken while the device was busy and the reasons NVML gives for clocks
below the maximum; ``ClockReport`` sums them up; ``study compare`` and ``run_top`` name the
rows measured ``slowed`` and give the accuracy on the others beside the accuracy on all.

NVML is read through ``pynvml`` (the ``nvidia-ml-py`` package) when it imports, else
through ``nvidia-smi`` (slower, so sampled less often). Without either, or without GPUs,
the report is empty and nothing is said about clocks.
"""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["ClockReport", "ClockSampler", "EVENT_BITS", "SLOWDOWN_EVENTS", "SLOW_CLOCK",
           "physical_ids", "summarize", "visible_gpus"]

EVENT_BITS = {0x1: "idle", 0x2: "applications_clocks", 0x4: "sw_power_cap",
              0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
              0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}
"""NVML's clock-event reasons (``nvmlClocksEventReasons``, "throttle reasons" before), by
bit, as named in this module's reports."""

SLOWDOWN_EVENTS = frozenset({"hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})
"""Reasons that mark a run as measured on a slowed card whatever its clock: the card's own
protection (temperature, the power brake, a hardware slowdown signal). The software power
cap is not among them: a healthy card reaches it under load (an H200's SM clock fell from
1,980 to 1,470-1,800 MHz after 2 s of products, ``calibration.steady``); a run held far
below that is caught by ``SLOW_CLOCK`` instead."""

SLOW_CLOCK = 0.7
"""A run whose busy SM clock (the median of each device's busy samples, the lowest over the
run's devices) is below this fraction of the card's maximum SM clock was measured slowed:
below what the power cap alone gave a healthy card under sustained load (0.74 of the
maximum, ``SLOWDOWN_EVENTS``)."""

Sample = tuple[int, int, int]
"""``(sm_clock_mhz, max_sm_clock_mhz, reasons_bitmask)`` of one device at one moment."""


def physical_ids(n: int, env: dict[str, str] | None = None) -> list[str]:
    """The NVML identities (index or UUID, as text) of the first ``n`` devices a process
    sees: ``CUDA_VISIBLE_DEVICES`` renumbers them, NVML does not."""
    vis = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if vis is None or not vis.strip():
        return [str(i) for i in range(n)]
    ids = [v.strip() for v in vis.split(",") if v.strip()]
    return ids[:n]


@dataclass(frozen=True)
class ClockReport:
    """What the devices of one run did: ``busy_mhz`` the lowest, over the devices, of the
    median SM clock of each device's busy samples (``None``: no busy sample); ``max_mhz``
    the card's maximum SM clock; ``events`` the clock-event reasons seen in busy samples
    (``EVENT_BITS`` names, without ``idle``); ``samples`` how many were read."""

    busy_mhz: int | None = None
    max_mhz: int | None = None
    events: frozenset[str] = field(default_factory=frozenset)
    samples: int = 0

    @property
    def slowed(self) -> bool:
        """Whether the run was measured on a slowed card (``SLOWDOWN_EVENTS`` seen, or the
        busy clock below ``SLOW_CLOCK`` of the maximum)."""
        if self.events & SLOWDOWN_EVENTS:
            return True
        return bool(self.busy_mhz and self.max_mhz and self.busy_mhz < SLOW_CLOCK * self.max_mhz)

    def events_text(self) -> str:
        """The events as one CSV cell: names joined by ``+``, ``none`` when none was seen."""
        return "+".join(sorted(self.events)) or "none"

    def text(self) -> str:
        """The clocks in a few words, e.g. ``1410 of 1980 MHz, hw_thermal``."""
        parts = []
        if self.busy_mhz and self.max_mhz:
            parts.append(f"{self.busy_mhz} of {self.max_mhz} MHz")
        if self.events:
            parts.append(self.events_text())
        return ", ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-ready fields (``distir run --json``)."""
        return {"busy_sm_clock_mhz": self.busy_mhz, "max_sm_clock_mhz": self.max_mhz,
                "events": sorted(self.events), "slowed": self.slowed,
                "samples": self.samples}


def visible_gpus(env: dict[str, str] | None = None) -> int:
    """How many GPUs this process sees, without initialising CUDA: ``CUDA_VISIBLE_DEVICES``
    when set, else NVML's count (``pynvml``, else ``nvidia-smi -L``); 0 without GPUs."""
    vis = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        ids = [v.strip() for v in vis.split(",") if v.strip()]
        return 0 if not ids or ids[0].startswith("-") else len(ids)
    try:
        import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 - no NVML binding: ask nvidia-smi
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10,
                             check=True).stdout
    except Exception:  # noqa: BLE001 - no readable GPU
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def summarize(per_device: Sequence[Sequence[Sample]]) -> ClockReport:
    """The report of samples taken on each device of a run (busy: without NVML's idle
    bit)."""
    medians: list[float] = []
    events: set[str] = set()
    top = 0
    n = 0
    for samples in per_device:
        busy = [s for s in samples if not s[2] & 0x1]
        n += len(samples)
        top = max([top, *(s[1] for s in samples)])
        if busy:
            medians.append(statistics.median(s[0] for s in busy))
        for s in busy:
            events.update(name for bit, name in EVENT_BITS.items()
                          if s[2] & bit and name != "idle")
    return ClockReport(busy_mhz=int(min(medians)) if medians else None,
                       max_mhz=top or None, events=frozenset(events), samples=n)


@functools.cache
def _nvml_reader(ids: tuple[str, ...]) -> Callable[[], list[Sample]] | None:
    """A reader through ``pynvml`` (NVML initialised once per process), or ``None`` where
    it does not import or a first read fails (an old driver without the reasons call, a
    device NVML cannot read): nvidia-smi is tried then."""
    try:
        import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByUUID(i) if not i.isdigit()
                   else pynvml.nvmlDeviceGetHandleByIndex(int(i)) for i in ids]
    except Exception:  # noqa: BLE001 - no NVML: try nvidia-smi
        return None
    clk = pynvml.NVML_CLOCK_SM
    for name in ("nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetCurrentClocksThrottleReasons"):
        reasons = getattr(pynvml, name, None)
        if reasons is None:
            continue

        def read(reasons: Callable[[object], int] = reasons) -> list[Sample]:
            return [(int(pynvml.nvmlDeviceGetClockInfo(h, clk)),
                     int(pynvml.nvmlDeviceGetMaxClockInfo(h, clk)), int(reasons(h)))
                    for h in handles]
        try:  # the driver resolves the call on first use
            read()
        except Exception:  # noqa: BLE001 - try the older name, then nvidia-smi
            continue
        return read
    return None


def _smi_reader(ids: Sequence[str]) -> Callable[[], list[Sample]] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    cmd = [smi, "-i", ",".join(ids), "--query-gpu=clocks.sm,clocks.max.sm,"
           "clocks_throttle_reasons.active", "--format=csv,noheader,nounits"]

    def read() -> list[Sample]:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
        rows = []
        for line in out.stdout.strip().splitlines():
            sm, top, bits = (x.strip() for x in line.split(","))
            rows.append((int(sm), int(top), int(bits, 16)))
        if len(rows) != len(ids):
            raise ValueError(f"nvidia-smi gave {len(rows)} rows for {len(ids)} devices")
        return rows
    try:
        read()
    except Exception:  # noqa: BLE001 - no readable GPU: say nothing about clocks
        return None
    return read


class ClockSampler:
    """Samples the SM clock and clock-event reasons of ``devices`` (the first n devices
    the process sees, or NVML identities) every ``interval_s`` while the ``with`` block
    runs; ``report`` is its ``ClockReport`` afterwards (empty without NVML or GPUs).
    ``reader``: a function returning one ``Sample`` per device (tests)."""

    def __init__(self, devices: int | Sequence[str], *, interval_s: float | None = None,
                 reader: Callable[[], list[Sample]] | None = None) -> None:
        ids = physical_ids(devices) if isinstance(devices, int) else list(devices)
        self._read = reader
        fast = True
        if self._read is None and ids:
            self._read = _nvml_reader(tuple(ids))
            if self._read is None:
                self._read, fast = _smi_reader(ids), False
        self.interval_s = interval_s if interval_s is not None else (0.1 if fast else 0.5)
        self._n = len(ids)
        self._samples: list[list[Sample]] = [[] for _ in ids]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.report = ClockReport()

    def _take(self) -> bool:
        assert self._read is not None
        try:
            got = self._read()
        except Exception:  # noqa: BLE001 - a failed read ends the sampling, not the run
            return False
        for k, s in enumerate(got[:self._n]):
            self._samples[k].append(s)
        return True

    def _loop(self) -> None:
        while self._take() and not self._stop.wait(self.interval_s):
            pass

    def __enter__(self) -> ClockSampler:
        if self._read is not None:
            self._thread = threading.Thread(target=self._loop, name="distir-clocks",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=15)
            self.report = summarize(self._samples)
