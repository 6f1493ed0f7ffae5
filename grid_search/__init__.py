"""Grid search over data, tensor and pipeline parallelism (the DistIR paper's §5).

``enumerate_space`` lists configurations, ``run_search`` transforms and simulates them in
local processes or on a Ray cluster (``LocalExecutor``, ``RayExecutor``) and writes a CSV
row by row, ``summarize`` and ``plot_memory_throughput`` report.
The ``distir grid-search`` command drives them.
"""

from __future__ import annotations

from grid_search.executors import LocalExecutor, RayExecutor
from grid_search.models import PRESETS, Workload, workload
from grid_search.report import plot_memory_throughput, summarize
from grid_search.search import COLUMNS, read_rows, run_search
from grid_search.space import Config, enumerate_space

__all__ = ["COLUMNS", "Config", "LocalExecutor", "PRESETS", "RayExecutor", "Workload",
           "enumerate_space", "plot_memory_throughput", "read_rows", "run_search",
           "summarize", "workload"]
