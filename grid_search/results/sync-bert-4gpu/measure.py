"""On 4 GPUs (run on the device, from the repository root): HF BERT-base training at D = 4
(bert_step.dir, made by prepare.py), each strategy of strategies.json synchronised,
simulated on the card's profile and measured with NCCL. To separate plans a few percent
apart, the plans are measured in ROUNDS rounds, each plan once per round in a rotated
order (so that drift spreads over all plans), STEPS timed steps per run; a plan's figure is
the median of its rounds' medians. Stops starting rounds after DEADLINE_S seconds.

    python3 grid_search/results/sync-bert-4gpu/measure.py   # writes $OUT/bert_dp4.json
    DP=2 python3 ...                                         # on 2 GPUs: $OUT/bert_dp2.json
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import torch

import distir
from distir.backend import Session
from distir.transforms import analyze, dtp, synchronize

HERE = Path(os.environ.get("STUDY_DIR", Path(__file__).parent))
OUT = Path(os.environ.get("OUT", "/tmp"))
ROUNDS = int(os.environ.get("ROUNDS", "4"))
STEPS = int(os.environ.get("STEPS", "15"))
DEADLINE_S = float(os.environ.get("DEADLINE_S", "250"))
t_start = time.time()
card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
HW = "h200-sxm" if "H200" in card else "h100-sxm"
backend = "nccl" if torch.cuda.is_available() else "gloo"
meta = json.loads((HERE / "strategies.json").read_text(encoding="utf-8"))
D = int(os.environ.get("DP", meta["dp"]))  # DP=2 where only two GPUs are lent
step = distir.load(HERE / "bert_step.dir").entry
fn = dtp(analyze(step), dp=D)
plans = dict(meta["strategies"])
search_info = None
if D == meta["dp"] and HW in meta["searched"]:
    plans["searched"] = meta["searched"][HW]["strategy"]
else:  # searched here, within a budget
    from grid_search.sync_search import sync_search

    res = sync_search(fn, HW, patience=5, max_evals=80, samples=40)
    plans["searched"] = res.strategy()
    search_info = {k: v for k, v in res.to_dict().items() if k != "strategy"}
    print(f"searched on the device in {res.seconds:.0f} s: {res.best_from}", flush=True)
progs = {k: synchronize(fn, v) for k, v in plans.items()}
sims = {k: distir.simulate(p, hardware=HW).latency_s for k, p in progs.items()}
print(f"{card}: {len(progs)} plans ready in {time.time() - t_start:.0f} s", flush=True)
runs: dict[str, list[float]] = {k: [] for k in progs}
errors: dict[str, str] = {}
names = list(progs)
doc = {"device": card, "gpus": torch.cuda.device_count(), "torch": torch.__version__,
       "profile": HW, "dp": D, "per_replica": meta["per_replica"], "seq": meta["seq"],
       "rounds_planned": ROUNDS, "steps": STEPS, "warmup": 2, "simulated_s": sims,
       "runs_s": runs, "errors": errors, "search": search_info,
       "strategies": plans}
with Session(D, backend, timeout_s=240) as s:
    for r in range(ROUNDS):
        if r and time.time() - t_start > DEADLINE_S:
            break
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            if k in errors:
                continue
            res = s.run(progs[k], None, steps=STEPS, warmup=2, outputs=False)
            if res.status != "ok":
                errors[k] = f"{res.status}: {res.message[:300]}"
                continue
            runs[k].append(res.step_latency_s)
        doc["rounds_done"] = r + 1
        doc["wall_s"] = time.time() - t_start
        doc["measured_s"] = {k: statistics.median(v) for k, v in runs.items() if v}
        (OUT / f"bert_dp{D}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"round {r + 1} done at {time.time() - t_start:.0f} s", flush=True)
for k in names:
    m = doc.get("measured_s", {}).get(k)
    print(f"{k:22s} sim {sims[k] * 1e3:8.2f} ms  measured "
          f"{'-' if m is None else f'{m * 1e3:8.2f} ms'}  {errors.get(k, '')}")
