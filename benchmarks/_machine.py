"""What machine a benchmark ran on, for the line it prints with its figures."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_line() -> str:
    """``CPU model, N cores, Python X.Y.Z`` for a benchmark's header."""
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
