"""Attention split by heads in ``optimize``: a GPT-2 training step (SGD) searched at 2
devices with and without grouped shard candidates (``Shard(d, groups=g)``, found by
``spmd/grouped.py``), beside ``dtp``'s tensor and data parallelism.

    python benchmarks/bench_spmd_heads.py                       # the docs' two sizes
    python benchmarks/bench_spmd_heads.py --d-model 1024 --layers 4 --batch 2 --seq 128

Prints, per size: each plan's simulated step time (ms), the search's wall time (s), the
specs of layer 0's fused attention projection and its bias, and the plan's all-gathers.
The search runs unseeded (``seeded=False``): the plan is the segment search's own.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distir.analysis.simulator import simulate  # noqa: E402
from distir.errors import DistIRError  # noqa: E402
from distir.models.gpt2 import GPT2Config  # noqa: E402
from distir.transforms import dtp  # noqa: E402
from distir.transforms.spmd import comm_breakdown, optimize  # noqa: E402
from distir.transforms.spmd.mesh import spec_str  # noqa: E402
from distir.transforms.training import training_step  # noqa: E402

SIZES = [(2048, 2, 2, 128), (2048, 1, 1, 64)]
"""(d_model, layers, batch, sequence): the docs' table row and the tests' size."""


def _row(label: str, r: object, secs: float) -> None:
    a = r.assignment  # type: ignore[attr-defined]
    spec = dict(zip((p.name for p in a.prog.fn.params), a.params, strict=True))
    gathers = {k: n for k, n in comm_breakdown(r.program).items()  # type: ignore[attr-defined]
               if k[0] == "MPIAllgather"}
    print(f"  {label:<22} {r.simulation.latency_s * 1e3:8.3f} ms  search {secs:5.1f} s  "  # type: ignore[attr-defined]
          f"c_attn {spec_str(spec['h.0.attn.c_attn.weight'])} "
          f"bias {spec_str(spec['h.0.attn.c_attn.bias'])}  all-gathers {gathers}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d-model", type=int)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--hardware", default="h100-sxm")
    args = ap.parse_args()
    sizes = SIZES if args.d_model is None else [(args.d_model, args.layers, args.batch,
                                                 args.seq)]
    seg = sys.modules["distir.transforms.spmd.segsearch"]
    grouped = seg.grouped_shards  # type: ignore[attr-defined]
    for d, layers, batch, seq in sizes:
        cfg = GPT2Config(n_layer=layers, d_model=d, n_head=16, vocab_size=64, seq_len=seq,
                         batch_size=batch)
        fn = cfg.build()
        names = [p.name for p in fn.params if p.name != "input_ids"]
        step = training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                             reduction="mean")
        print(f"GPT-2 training step, d {d}, {layers} layers, batch {batch}, sequence {seq}, "
              f"16 heads, vocabulary 64, 2 devices, {args.hardware}")
        for label, fake in (("optimize (groups)", None), ("optimize (no groups)", {})):
            seg.grouped_shards = grouped if fake is None else (lambda prog, rules: {})  # type: ignore[attr-defined]
            t = time.perf_counter()
            r = optimize(step, 2, args.hardware, beam=8, max_states=200, seeded=False)
            _row(label, r, time.perf_counter() - t)
        seg.grouped_shards = grouped  # type: ignore[attr-defined]
        for kw in ({"tp": 2}, {"dp": 2}):
            name = "dtp(" + ", ".join(f"{k}={v}" for k, v in kw.items()) + ")"
            try:
                ms = f"{simulate(dtp(step, **kw), args.hardware).latency_s * 1e3:8.3f} ms"
            except DistIRError as e:  # a batch of one cannot be split
                ms = f"refused ({str(e).splitlines()[0][:60]}...)"
            print(f"  {name:<22} {ms}")


if __name__ == "__main__":
    main()
