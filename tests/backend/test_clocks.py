"""``distir.backend.clocks``: what the GPUs' clocks did during a measured run."""

from __future__ import annotations

import time

from distir.backend.clocks import ClockReport, ClockSampler, physical_ids, summarize

BUSY, IDLE, POWER_CAP, HW_THERMAL, BRAKE = 0x0, 0x1, 0x4, 0x40, 0x80


def test_physical_ids_follow_cuda_visible_devices() -> None:
    assert physical_ids(2, {}) == ["0", "1"]
    assert physical_ids(2, {"CUDA_VISIBLE_DEVICES": "2,3,1"}) == ["2", "3"]
    assert physical_ids(1, {"CUDA_VISIBLE_DEVICES": "GPU-ab12, GPU-cd34"}) == ["GPU-ab12"]


def test_idle_samples_do_not_count() -> None:
    """A card idle between runs sits at a low clock with the idle bit set: not a slowdown."""
    r = summarize([[(345, 1980, IDLE), (1980, 1980, BUSY), (1980, 1980, BUSY)]])
    assert r == ClockReport(busy_mhz=1980, max_mhz=1980, events=frozenset(), samples=3)
    assert not r.slowed and r.events_text() == "none"


def test_the_slowest_device_of_a_run_names_it() -> None:
    healthy = [(1980, 1980, BUSY)] * 5
    held = [(1210, 1980, BUSY)] * 3 + [(1980, 1980, BUSY)] * 2  # median 1210
    r = summarize([healthy, held])
    assert r.busy_mhz == 1210 and r.max_mhz == 1980 and r.slowed  # 1210 < 0.7 * 1980
    assert not summarize([healthy, [(1470, 1980, BUSY)] * 3]).slowed  # a loaded healthy card


def test_power_cap_alone_at_full_clock_is_not_a_slowdown() -> None:
    """Large products reach the software power cap on a healthy card."""
    r = summarize([[(1890, 1980, POWER_CAP)] * 4])
    assert r.events == frozenset({"sw_power_cap"}) and not r.slowed
    assert not summarize([[(1470, 1980, POWER_CAP)] * 4]).slowed  # as under sustained load
    assert summarize([[(1100, 1980, POWER_CAP)] * 4]).slowed  # held far below: slowed


def test_the_cards_protection_is_a_slowdown_at_any_clock() -> None:
    for bits, name in ((HW_THERMAL, "hw_thermal"), (BRAKE, "hw_power_brake")):
        r = summarize([[(1980, 1980, BUSY), (1950, 1980, bits)]])
        assert name in r.events and r.slowed
    both = summarize([[(1800, 1980, HW_THERMAL | BRAKE)]])
    assert both.events_text() == "hw_power_brake+hw_thermal"


def test_sampler_reads_while_the_block_runs() -> None:
    reads: list[int] = []

    def read() -> list[tuple[int, int, int]]:
        reads.append(len(reads))
        return [(1980, 1980, BUSY), (1300 if len(reads) % 2 else 1320, 1980, HW_THERMAL)]

    with ClockSampler(["0", "1"], interval_s=0.001, reader=read) as s:
        deadline = time.monotonic() + 10
        while len(reads) < 5 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert s.report.samples >= 10  # both devices, at least five reads each
    assert s.report.busy_mhz in (1300, 1310, 1320) and s.report.slowed
    assert s.report.events == frozenset({"hw_thermal"})


def test_sampler_without_gpus_reports_nothing() -> None:
    with ClockSampler(0) as s:
        pass
    assert s.report == ClockReport() and not s.report.slowed


def test_a_failed_read_ends_the_sampling_not_the_run() -> None:
    def read() -> list[tuple[int, int, int]]:
        raise OSError("NVML went away")

    with ClockSampler(["0"], interval_s=0.001, reader=read) as s:
        pass
    assert s.report.samples == 0


def test_a_measured_row_keeps_the_report() -> None:
    """``grid_search.real``: a report written as a row's columns reads back the same."""
    from grid_search.real import CLOCK_COLUMNS, clock_columns, clock_report

    rep = summarize([[(1410, 1980, HW_THERMAL | POWER_CAP)] * 3])
    row = {k: str(v) for k, v in clock_columns(rep).items()}  # as read from a CSV
    assert set(row) == set(CLOCK_COLUMNS)
    back = clock_report(row)
    assert back is not None and back.slowed
    assert (back.busy_mhz, back.max_mhz, back.events) == (rep.busy_mhz, rep.max_mhz, rep.events)
    assert back.text() == "1410 of 1980 MHz, hw_thermal+sw_power_cap"
    empty = clock_columns(ClockReport())  # every column set, so no earlier value survives
    assert empty == dict.fromkeys(CLOCK_COLUMNS, "") and clock_report(empty) is None
    idle = clock_columns(summarize([[(345, 1980, IDLE)] * 3]))  # never busy: unknown
    assert clock_report(idle) is None and clock_report({"measured_clock_events": "nan"}) is None
