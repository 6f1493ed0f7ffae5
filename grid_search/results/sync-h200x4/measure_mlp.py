"""On 4 GPUs: NCCL correctness of the synchronised programs (bucket, RS/AG async), then
measured vs simulated step times of >= 10 strategies of MLP (mlp-1b preset) at D=4."""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch

import distir
from distir.analysis import execute, random_inputs
from distir.backend import Session
from distir.ir import parse
from distir.models import presets
from distir.transforms import dtp, synchronize, training_step

OUT = os.environ.get("OUT", "/tmp")
name = torch.cuda.get_device_name(0)
HW = "h200-sxm" if "H200" in name else "h100-sxm"
print("device", name, "profile", HW, flush=True)
D = int(sys.argv[1]) if len(sys.argv) > 1 else 4

FORWARD = """func @main(%x: Tensor[Float32, (8, 6), 0], %w0: Tensor[Float32, (6, 4), 0],
           %b0: Tensor[Float32, (4,), 0], %w1: Tensor[Float32, (4, 2), 0]) {
  %h = MatMul(%x, %w0)
  %hb = Add(%h, %b0)
  %a = Relu(%hb)
  %y = MatMul(%a, %w1)
  return %y
}
"""


def replicated(fn):
    ins = random_inputs(fn, seed=3)
    first = {}
    for i, p in enumerate(fn.params):
        base, _, rep = str(p.name).rpartition("_dp")
        if base in ("x", "target") or not rep.isdigit():
            continue
        if "adam_v" in base or "adam_step" in base:
            ins[i] = np.abs(ins[i]) + 1
        if base in first:
            ins[i] = ins[first[base]]
        else:
            first[base] = i
    return ins


rows = []
check = []
with Session(D, "nccl", timeout_s=300) as s:
    small = dtp(training_step(parse(FORWARD).entry, optimizer="adam", wrt=["w0", "b0", "w1"]),
                dp=D)
    ins = replicated(small)
    want = execute(small, ins)
    for st in ({"builder": "merge-all"}, {"builder": "chunk", "k": 2}, {"builder": "ps"},
               {"builder": "zero-1"}, {"builder": "zero-2"},
               {"builder": "merge-all", "compress": "fp16"}):
        try:
            res = s.run(synchronize(small, st), ins, steps=1, warmup=0)
            err = max(float(np.max(np.abs(g.reshape(w.shape) - w)))
                      for g, w in zip(res.outputs, want))
            check.append({"strategy": st, "status": res.status, "max_abs_err": err})
        except Exception as e:  # noqa: BLE001
            check.append({"strategy": st, "status": "error", "message": str(e)[:300]})
        print(check[-1], flush=True)
    f = presets.build("mlp-1b")
    g = dtp(f, dp=D)
    strategies = {
        "per-gradient": {"builder": "per-gradient"},
        "ddp": {"builder": "ddp"},
        "merge-all": {"builder": "merge-all"},
        "chunk-2": {"builder": "chunk", "k": 2},
        "chunk-4": {"builder": "chunk", "k": 4},
        "chunk-8": {"builder": "chunk", "k": 8},
        "ps": {"builder": "ps"},
        "ps-lb": {"builder": "ps-lb"},
        "zero-1": {"builder": "zero-1"},
        "zero-2": {"builder": "zero-2"},
        "per-gradient-fp16": {"builder": "per-gradient", "compress": "fp16"},
        "merge-all-fp16": {"builder": "merge-all", "compress": "fp16"},
        "bucket-1GiB": {"bucket_bytes": 1 << 30},
    }
    for label, st in strategies.items():
        p = synchronize(g, st)
        sim = distir.simulate(p, hardware=HW).latency_s
        t = time.time()
        res = s.run(p, None, steps=8, warmup=3, outputs=False)
        row = {"strategy": label, "simulated_s": sim, "measured_s": res.step_latency_s
               if res.status == "ok" else None, "status": res.status,
               "message": res.message[:200], "wall_s": time.time() - t}
        rows.append(row)
        print(row, flush=True)
        json.dump({"device": name, "profile": HW, "dp": D, "check": check, "rows": rows},
                  open(f"{OUT}/sync_gpu.json", "w"), indent=1)
