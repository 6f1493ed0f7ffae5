"""``compose_dtp`` (the spmd passes: propagate, partition_stages, schedule, lower_pipeline)
beside ``dtp`` (the builder tower): simulated step time on one hardware profile, for
every D/T/P/K of a device count, on an MLP and a GPT-2 training step.

    python benchmarks/bench_compose_dtp.py                  # 8 devices, h100-sxm
    python benchmarks/bench_compose_dtp.py --devices 4 --hardware h100-sxm

Prints one row per configuration: both simulated latencies (ms), their ratio
(composition / dtp), both simulated peak memories (GiB, the most loaded device), and the
count of each kind of communication op in both programs.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distir  # noqa: E402
from distir.errors import DistIRError  # noqa: E402
from distir.models.gpt2 import GPT2Config  # noqa: E402
from distir.transforms import dtp  # noqa: E402
from distir.transforms.spmd import comm_breakdown  # noqa: E402
from distir.transforms.spmd.compose import compose_dtp  # noqa: E402
from distir.transforms.training import training_step  # noqa: E402


def _models() -> dict[str, distir.Function]:
    mlp = distir.models.mlp(batch_size=1024, input_dim=2048, hidden_dim=2048,
                            output_dim=2048, num_layers=8)
    cfg = GPT2Config(n_layer=4, d_model=1024, n_head=16, vocab_size=8192, seq_len=256,
                     batch_size=16)
    fn = cfg.build()
    names = [p.name for p in fn.params if p.name != "input_ids"]
    gpt = training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                        reduction="mean")
    return {"mlp 8x2048 b1024": mlp, "gpt2 4L d1024 b16 s256": gpt}


def _kinds(fn: distir.Function) -> dict[str, int]:
    out: dict[str, int] = {}
    for (op, _, _), n in comm_breakdown(fn).items():
        out[op] = out.get(op, 0) + n
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--microbatches", type=int, nargs="+", default=[1, 4])
    args = ap.parse_args()
    n = args.devices
    print(f"{'model':24} {'D':>2} {'T':>2} {'P':>2} {'K':>2} {'dtp ms':>9} {'composed ms':>12} "
          f"{'ratio':>6} {'dtp GiB':>8} {'comp GiB':>8}  comm (dtp | composed)")
    for name, fn in _models().items():
        for dp, tp in itertools.product(range(1, n + 1), repeat=2):
            if n % (dp * tp):
                continue
            pp = n // (dp * tp)
            for k in args.microbatches:
                if pp == 1 and k > 1:
                    continue
                t0 = time.time()
                try:
                    ref = dtp(fn, dp, tp, pp, k, "1f1b")
                    ours = compose_dtp(fn, dp, tp, pp, k, "1f1b", hardware=args.hardware)
                except DistIRError as e:
                    print(f"{name:24} {dp:2} {tp:2} {pp:2} {k:2} refused: {e}")
                    continue
                sa = distir.simulate(ref, args.hardware)
                sb = distir.simulate(ours, args.hardware)
                a, b = sa.latency_s * 1e3, sb.latency_s * 1e3
                ma = max(sa.peak_memory_bytes.values()) / 2**30
                mb = max(sb.peak_memory_bytes.values()) / 2**30
                print(f"{name:24} {dp:2} {tp:2} {pp:2} {k:2} {a:9.3f} {b:12.3f} {b / a:6.3f} "
                      f"{ma:8.3f} {mb:8.3f}  "
                      f"{_kinds(ref)} | {_kinds(ours)}  ({time.time() - t0:.1f} s)",
                      flush=True)


if __name__ == "__main__":
    main()
