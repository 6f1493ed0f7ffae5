"""Summarise a measured study (bert_dpD.json from measure.py): each plan's simulated and
measured step, Spearman's rho over all plans and over the all-reduce plans, the spread
of the rounds, and where the searched plan and DDP stand.

    cd grid_search/results/sync-bert-4gpu && python3 analyze.py bert_dp4.json
"""

from __future__ import annotations

import json
import sys

ALLREDUCE = ("per-gradient", "ddp", "merge-all", "chunk-4", "chunk-16", "chunk-64", "searched")


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=xs.__getitem__)
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def main(path: str) -> None:
    d = json.load(open(path, encoding="utf-8"))
    meas, sim = d.get("measured_s", {}), d["simulated_s"]
    names = sorted(meas, key=meas.__getitem__)
    print(f"{d['device']} x {d['gpus']}, profile {d['profile']}, D = {d['dp']}, "
          f"{d.get('rounds_done')} rounds of {d['steps']} steps")
    print("| plan | simulated (ms) | measured (ms) | rounds (ms) |")
    print("|---|---|---|---|")
    for k in names:
        rs = ", ".join(f"{x * 1e3:.1f}" for x in d["runs_s"][k])
        print(f"| {k} | {sim[k] * 1e3:.2f} | {meas[k] * 1e3:.2f} | {rs} |")
    for k, e in d.get("errors", {}).items():
        print(f"| {k} | {sim[k] * 1e3:.2f} | failed: {e[:80]} | |")
    print(f"Spearman, all {len(names)} plans: "
          f"{spearman([sim[k] for k in names], [meas[k] for k in names]):.2f}")
    ar = [k for k in names if k in ALLREDUCE]
    print(f"Spearman, the {len(ar)} all-reduce plans: "
          f"{spearman([sim[k] for k in ar], [meas[k] for k in ar]):.2f}")
    best = min(meas.values())
    if "searched" in meas:
        print(f"searched: {100 * (meas['searched'] / best - 1):.1f}% slower than the best "
              f"measured ({names[0]}); DDP {100 * (meas['ddp'] / best - 1):.1f}%")


if __name__ == "__main__":
    main(sys.argv[1])
