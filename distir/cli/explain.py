"""``distir explain``: a profiled run beside the simulation of the same program.

Reads the per-rank traces that ``distir run FILE --profile DIR`` wrote, aligns them op by
op with the simulated timeline of FILE's entry function, and prints per op kind and per
device the simulated and measured times, the critical path of each and the largest
differences first (``--json``: one JSON object); ``-o OUT.json`` writes both timelines as
one Perfetto trace (a simulated and a measured track per device).
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="compare a profiled run (distir run --profile) with "
                       "its simulation, op by op",
                       description="Align the per-rank torch.profiler traces of a profiled "
                       "run with the simulated trace of the same program: simulated vs "
                       "measured time per op kind and per device, the critical path of "
                       "each, the largest differences first.")
    p.add_argument("traces", nargs="+", metavar="MEASURED_TRACE",
                   help="the rank<r>.json files written by `distir run FILE --profile DIR`, "
                   "or DIR itself")
    p.add_argument("--program", required=True, metavar="FILE",
                   help="the .dir file that was run")
    p.add_argument("--hardware", "-H", default="h100-sxm", metavar="H",
                   help="a profile name or a path to a profile .json file (default "
                   "h100-sxm)")
    # One path per --replay (repeatable), so that `--replay DIR2 DIR` leaves DIR to the
    # measured traces, as a user writes it.
    p.add_argument("--replay", action="append", metavar="REPLAY_TRACE", default=None,
                   help="the traces of the same program run with `distir run --cuda-graph "
                   "--profile DIR2`: DIR2, or one rank<r>.json per --replay (repeat it): "
                   "each op is then timed by the replayed graph's kernels, matched in order "
                   "to those its range launched in the marked eager step, and simulated "
                   "without host dispatch")
    p.add_argument("-o", "--out", metavar="OUT.json", default=None,
                   help="write both timelines as one Perfetto (Chrome trace) file")
    p.add_argument("--top", type=int, default=15, metavar="N",
                   help="how many ops to list among the largest differences (default 15)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on standard output and nothing else")
    p.set_defaults(func=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    import distir
    from distir.analysis.explain import explain, format_table, write_perfetto

    fn = distir.load(args.program).entry
    ex = explain(fn, args.traces, args.hardware, replay=args.replay)
    if args.out is not None:
        write_perfetto(ex, args.out)
    if args.json:
        doc = ex.to_dict(top=args.top)
        if args.out is not None:
            doc["trace"] = args.out
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    sys.stdout.write(format_table(ex, top=args.top) + "\n")
    if args.out is not None:
        sys.stdout.write(f"both timelines written to {args.out} (open it in "
                         "https://ui.perfetto.dev)\n")
    return 0
