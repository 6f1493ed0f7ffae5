"""On 4 GPUs: GPT-2 small training step (many small tensors) at D=4, the bucketing search
(bounded) simulated on the device's profile, then measured vs simulated strategies."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import torch

import distir
from distir.backend import Session
from distir.models import presets
from distir.transforms import dtp, synchronize

spec = importlib.util.spec_from_file_location("sync_search", "grid_search/sync_search.py")
ss = importlib.util.module_from_spec(spec)
sys.modules["sync_search"] = ss
spec.loader.exec_module(ss)

OUT = os.environ.get("OUT", "/tmp")
tiny = len(sys.argv) > 2
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
HW = "h200-sxm" if "H200" in name else "h100-sxm"
backend = "nccl" if torch.cuda.is_available() else "gloo"
D = int(sys.argv[1]) if len(sys.argv) > 1 else 4
over = dict(n_layer=12, d_model=768, n_head=12, seq_len=512, batch_size=8 * D)
if tiny:
    over = dict(n_layer=2, d_model=64, n_head=4, seq_len=16, batch_size=2 * D, vocab_size=128,
                n_positions=16)
f = presets.build("gpt2-1.6b-train", **over)
g = dtp(f, dp=D)
t = time.time()
res = ss.sync_search(g, HW, max_evals=int(os.environ.get("MAX_EVALS", "200")))
print(ss.describe(res), "search wall", time.time() - t, flush=True)
strategies = {k: v for k, v in ss.builder_strategies(len(res.gradient_bytes)).items()}
strategies["searched"] = res.strategy()
rows = []
if os.environ.get("REVERSE"):
    strategies = dict(reversed(list(strategies.items())))
with Session(D, backend, timeout_s=300) as s:
    for label, st in strategies.items():
        p = synchronize(g, st)
        sim = distir.simulate(p, hardware=HW).latency_s
        t = time.time()
        r = s.run(p, None, steps=10, warmup=3, outputs=False)
        row = {"strategy": label, "simulated_s": sim,
               "measured_s": r.step_latency_s if r.status == "ok" else None,
               "status": r.status, "message": r.message[:200], "wall_s": time.time() - t}
        rows.append(row)
        print(row, flush=True)
        json.dump({"device": name, "profile": HW, "dp": D, "model": over,
                   "search": res.to_dict(), "rows": rows},
                  open(f"{OUT}/sync_gpu2{os.environ.get('REVERSE', '')}.json", "w"), indent=1)
