"""``distir run``: run a program for real, one process per device, and time its step.

Local runs start one worker per device (NCCL on GPUs, gloo on the CPU). Started by
``torchrun`` (several machines, ``env://`` rendezvous), every process runs its own rank and
rank 0 prints the result. ``--json`` prints one JSON object on standard output; progress
goes to standard error.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a .dir program on real devices and time it",
                       description="Project the entry function of a .dir file to one program "
                       "per device, lower it to PyTorch and run it (NCCL on GPUs, gloo on "
                       "the CPU): warm-up steps, then timed steps. Prints the step latency "
                       "(median over steps of the slowest rank), per-rank times and peak "
                       "memory. Under torchrun, each process runs its rank.")
    p.add_argument("file", help="a .dir file")
    p.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="communication backend (default: nccl with one GPU per device, "
                   "else gloo)")
    p.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps (default 3)")
    p.add_argument("--world-size", type=int, default=None, metavar="N",
                   help="processes to start (default: the devices the program uses)")
    p.add_argument("--inputs", nargs="+", metavar="A.npy", default=None,
                   help="one .npy file per free parameter of the entry function, in order "
                   "(default: random inputs drawn on each device)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="save each result as DIR/out_<i>_<name>.npy")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds a collective may wait for its peers before the run is "
                   "declared hung (default 300; must exceed the longest step)")
    p.add_argument("--memory-limit", type=_bytes, default=None, metavar="BYTES",
                   help="memory cap per device, e.g. 40GiB (an allocation beyond it is an "
                   "out-of-memory run)")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="after the timed steps, profile one more step with every op marked "
                   "and write each rank's torch.profiler trace to DIR/rank<r>.json (read it "
                   "with `distir explain`)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture each rank's step as a CUDA graph after the warm-up and time "
                   "its replays (GPU only): the host launches one graph a step instead of "
                   "every op; simulate it with `distir simulate --cuda-graph`")
    p.add_argument("--host-cost", action="store_true",
                   help="after the timed steps, run one more with the device synchronised "
                   "after every op to measure each rank's host cost of a step, and say whether "
                   "the step is paced by its hosts (eager steps on GPUs only)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on standard output and nothing else")
    p.set_defaults(func=run_run)


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40}


def _bytes(text: str) -> int:
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 40GiB, 8e9)")
    try:
        return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 40GiB, 8e9)") from None


def run_run(args: argparse.Namespace) -> int:
    import distir
    from distir.backend import run
    from distir.backend.launch import in_torchrun

    m = distir.load(args.file)
    fn = m.entry
    inputs = None
    if args.inputs is not None:
        from distir.cli.execute import load_inputs

        inputs = load_inputs(fn, args.inputs)
    from distir.backend.clocks import ClockSampler, visible_gpus

    torchrun = in_torchrun()
    if not torchrun:
        print(f"distir run: starting the workers for @{fn.name}", file=sys.stderr)
    # The clocks of every GPU this process sees (the run's own are the busy ones); under
    # torchrun each rank is its own process, and gloo runs on the CPU.
    gpus = 0 if torchrun or args.backend == "gloo" else visible_gpus()
    with ClockSampler(gpus) as clocks:
        res = run(fn, inputs, backend=args.backend, steps=args.steps, warmup=args.warmup,
                  world_size=args.world_size,
                  outputs=args.out is not None or inputs is not None,
                  memory_limit=args.memory_limit, seed=args.seed, timeout_s=args.timeout,
                  profile=args.profile, cuda_graph=args.cuda_graph, host_cost=args.host_cost)
    if res is None:  # a torchrun rank other than 0
        return 0
    if clocks.report.slowed:
        print(f"distir run: measured on slowed GPUs ({clocks.report.text()}): the time is "
              "this machine's now, not the program's; run it again", file=sys.stderr)
    saved: list[str | None] = []
    if args.out is not None and res.outputs is not None:
        from distir.cli.execute import output_name, save_outputs

        names = [output_name(v.name, i) for i, v in enumerate(fn.returns)]
        saved = save_outputs(args.out, names, res.outputs)
    if args.profile is not None and res.status == "ok":
        print(f"distir run: wrote one profiled step per rank to {args.profile}/rank<r>.json",
              file=sys.stderr)
    if args.host_cost and res.status == "ok" and not res.host_cost_s:
        why = "a CUDA graph replay issues no op from the host" if args.cuda_graph else \
            "CPU ranks run the ops themselves, so the host's cost is the whole step"
        print(f"distir run: --host-cost measured nothing: it times eager steps on GPUs ({why})",
              file=sys.stderr)
    if args.json:
        doc = res.to_dict()
        doc["file"] = args.file
        if clocks.report.busy_mhz is not None:
            doc["clocks"] = clocks.report.to_dict()
        if saved:
            doc["output_files"] = saved
        sys.stdout.write(json.dumps(doc) + "\n")
    else:
        sys.stdout.write(res.summary() + "\n")
        if saved:
            sys.stdout.write(f"saved {len(saved)} output(s) to {args.out}\n")
    return 0 if res.status == "ok" else 1
