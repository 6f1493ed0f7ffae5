"""Cluster scale (issue 20): GPT-3 175B training steps on hundreds to thousands of GPUs.

For each device count, one Megatron-style configuration (tensor parallelism within a node,
16 pipeline stages, the rest data parallel) of the ``gpt3-175b-train`` preset (96 layers,
d 12288, sequence 2048, Adam, 1,536 sequences per step) is transformed and simulated on
an H100 cluster profile (``h100-sxm-ib``: 8 GPUs per node, 400 Gb/s InfiniBand between
nodes, the link figures from datasheets), as the search does it (``dtp_replica``: one
data-parallel replica, and in it one tensor-parallel rank, written and simulated for all;
``--every-replica``: ``dtp``, the program of every replica and rank): wall time of the
transform, of the first simulation
(cold caches) and of a second one (the summaries reused), the ops simulated (calls
expanded), the statements of the entry function and the peak resident memory of this
process.

    .venv/bin/python benchmarks/bench_cluster_scale.py [--devices 256 1024]
    .venv/bin/python benchmarks/bench_cluster_scale.py --search 256 --workers 2

``--search N`` runs the whole space on N devices instead (D/T/P/K powers of two, T <= 8,
K <= 128) and reports its wall time and the peak resident memory of the search process
and of its workers, and the distribution of the time per configuration simulated (its
transform and simulation, in its worker). Targets (2-core machine): one 1,024-device
configuration simulated in <= 1 s; the 1,024-device search in <= 10 minutes with <= 4 GiB
peak.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

MODEL = "gpt3-175b-train"

# A configuration per device count: (dp, tp, pp, microbatches).
CONFIGS = {
    256: (2, 8, 16, 128),
    1024: (8, 8, 16, 64),
    4096: (32, 8, 16, 16),
}


def _rss_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def one(devices: int, hardware: str, every: bool) -> None:
    from distir.analysis.simulator import Simulator
    from distir.transforms import dtp, dtp_replica
    from grid_search import workload
    from grid_search.models import default_batches

    w = workload(MODEL)
    (batch,) = default_batches(w)
    dp, tp, pp, k = CONFIGS[devices]
    t0 = time.perf_counter()
    an = w.analyze(batch)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn = (dtp if every else dtp_replica)(an, dp=dp, tp=tp, pp=pp, microbatches=k,
                                         schedule="1f1b")
    t_dtp = time.perf_counter() - t0
    sim = Simulator(hardware, share_equal_functions=True)
    t0 = time.perf_counter()
    s = sim.simulate_function(fn, batch)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim.simulate_function(fn, batch)
    t_warm = time.perf_counter() - t0
    main = fn if every else fn.fn
    print(f"{devices:5d} devices D{dp}/T{tp}/P{pp}/K{k}: build+analyze {t_build:6.2f} s, "
          f"{'dtp' if every else 'dtp_replica'} {t_dtp:6.2f} s, simulate {t_cold:6.2f} s "
          f"(again {t_warm:6.2f} s); {s.num_ops:,} ops, {len(main.ops):,} statements in "
          f"@{main.name}; "
          f"latency {s.latency_s:.2f} s; peak RSS {_rss_mib():,.0f} MiB", flush=True)


def search(devices: int, hardware: str, workers: int) -> None:
    from grid_search import enumerate_space, run_search, workload
    from grid_search.models import default_batches

    w = workload(MODEL)
    configs = list(enumerate_space(w.name, devices, default_batches(w), max_tp=8))
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        res = run_search(w, configs, hardware=hardware, out=os.path.join(d, "r.csv"),
                         workers=workers, progress=sys.stderr)
        dt = time.perf_counter() - t0
    ok = sum(1 for r in res.rows if r["status"] in ("ok", "oom"))
    print(f"{MODEL} on {devices} devices: {len(configs)} configurations ({ok} simulated) "
          f"in {dt:.1f} s; peak RSS {_rss_mib():,.0f} MiB (search process), "
          f"{_rss_mib(resource.RUSAGE_CHILDREN):,.0f} MiB (largest worker)")
    # Per configuration simulated: the transform and the simulation, in its worker.
    secs = sorted(float(r["sim_seconds"]) for r in res.rows if r["status"] in ("ok", "oom"))
    if secs:
        def q(f: float) -> float:
            return secs[min(len(secs) - 1, int(f * len(secs)))]

        worst = max((r for r in res.rows if r["status"] in ("ok", "oom")),
                    key=lambda r: float(r["sim_seconds"]))
        print(f"per configuration (transform + simulation): median {q(0.5):.2f} s, 90th "
              f"percentile {q(0.9):.2f} s, worst {secs[-1]:.2f} s (D{worst['dp']}/"
              f"T{worst['tp']}/P{worst['pp']}/K{worst['microbatches']}); "
              f"{sum(x <= 1.0 for x in secs)} of {len(secs)} within 1 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, nargs="+", default=[256, 1024],
                    choices=sorted(CONFIGS))
    ap.add_argument("--hardware", default="h100-sxm-ib")
    ap.add_argument("--search", type=int, default=None, metavar="N")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--every-replica", action="store_true",
                    help="one configuration: write and simulate the program of every "
                    "data-parallel replica (dtp), not replica 0's for all (dtp_replica, "
                    "what the search does)")
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {args.hardware}")
    if args.search is not None:
        search(args.search, args.hardware, args.workers)
        return
    for n in args.devices:
        one(n, args.hardware, args.every_replica)


if __name__ == "__main__":
    main()
