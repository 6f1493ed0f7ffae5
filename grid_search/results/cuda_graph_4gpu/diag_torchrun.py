"""Under torchrun: one pipeline program captured as a CUDA graph and replayed, with the
variant named first (a diagnosis of the P4 replay that hung; run by run_diag2.sh).

variants: plain | barrier (all ranks meet after the capture, before the first replay)
models:   gpt2 (GPT-2 350M training, batch 8) | mlp (a small MLP training step)
"""

import sys
import time

import torch
import torch.distributed as dist

from distir.backend.launch import TorchrunSession
from distir.backend.worker import RankRunner
from distir.transforms import dtp

variant, model, d, t, p, k = sys.argv[1], sys.argv[2], *map(int, sys.argv[3].split(","))
if model == "gpt2":
    from grid_search.models import workload

    seq = workload("gpt2-350m-train", dtype="Float16").analyze(8, hardware="h100-sxm")
else:
    from distir.models import mlp
    from distir.transforms import analyze

    seq = analyze(mlp(batch_size=64, input_dim=256, hidden_dim=256, output_dim=256,
                      num_layers=8))
fn = dtp(seq, dp=d, tp=t, pp=p, microbatches=k, schedule="1f1b")
if variant == "barrier":
    plain = RankRunner.capture

    def capture(self, compiled, inputs):  # type: ignore[no-untyped-def]
        out = plain(self, compiled, inputs)
        torch.cuda.synchronize()
        dist.barrier()
        return out

    RankRunner.capture = capture  # type: ignore[method-assign]
s = TorchrunSession("nccl", timeout_s=30)
if s.rank == 0:
    print(f"torch {torch.__version__} nccl {torch.cuda.nccl.version()}", flush=True)
t0 = time.time()
r = s.run(fn, steps=2, warmup=2, cuda_graph=True)
if r is not None:
    print(f"{variant} {model} D{d} T{t} P{p} K{k}: {r.status} "
          f"{(r.step_latency_s or 0) * 1e3:.2f} ms ({time.time() - t0:.1f} s)", flush=True)
s.close()
