"""Which GPT-2 350M training programs capture and replay as CUDA graphs on 4 GPUs, and
how long capture and the first steps take (a diagnosis, run by run_diag.sh)."""

import sys
import time

from distir.backend import Session
from distir.errors import DistIRError
from distir.transforms import dtp
from grid_search.models import workload

w = workload("gpt2-350m-train", dtype="Float16")
seq = w.analyze(8, hardware="h100-sxm")
cases = [((1, 1, 4, 4), 1), ((1, 1, 4, 4), 2), ((2, 2, 1, 1), 2), ((4, 1, 1, 1), 2),
         ((2, 1, 2, 4), 2), ((1, 2, 2, 8), 2), ((1, 4, 1, 1), 2)]
if len(sys.argv) > 1:
    cases = [(tuple(int(x) for x in a.split(",")[:4]), int(a.split(",")[4]))
             for a in sys.argv[1:]]
for (d, t, p, k), warm in cases:
    fn = dtp(seq, dp=d, tp=t, pp=p, microbatches=k, schedule="1f1b")
    with Session(4, "nccl", timeout_s=45) as s:
        t0 = time.time()
        try:
            r = s.run(fn, steps=3, warmup=warm, cuda_graph=True)
            print(f"D{d} T{t} P{p} K{k} warmup {warm}: {r.status} "
                  f"{(r.step_latency_s or 0) * 1e3:.2f} ms, {time.time() - t0:.1f} s", flush=True)
        except DistIRError as e:
            print(f"D{d} T{t} P{p} K{k} warmup {warm}: {e.message} ({time.time() - t0:.1f} s)",
                  flush=True)
