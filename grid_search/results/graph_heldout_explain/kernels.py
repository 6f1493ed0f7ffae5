"""The kernels each op launched, eager and replayed: one CSV row per kernel of a profiled
run (the marked eager trace, DIR/rank<r>.json) with its duration in the replay matched to it
(DIR_replay/rank<r>.json, `distir.analysis.explain.align_replay`).

    python3 grid_search/results/graph_heldout_explain/kernels.py PROF_DIR RANK OUT.csv
"""

from __future__ import annotations

import csv
import json
import sys

from distir.analysis.explain import _rank_events, _replay_activities, align_replay


def main(prof: str, rank: int, out: str) -> None:
    with open(f"{prof}/rank{rank}.json", encoding="utf-8") as f:
        doc = json.load(f)
    with open(f"{prof}_replay/rank{rank}.json", encoding="utf-8") as f:
        rdoc = json.load(f)
    kinds = doc["distir"]["op_types"]
    _, by_op = _rank_events(doc, prof)
    # align kernel by kernel: each eager activity keeps its replay partner, if any
    tagged = {i: [(a[0], a[1], a[2], a[3]) for a in acts] for i, acts in by_op.items()}
    replay = _replay_activities(rdoc)
    aligned, lost_e, lost_r = align_replay(tagged, replay)
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["op", "kind", "kernel", "eager_us", "replay_us"])
        for i in sorted(by_op):
            eager = sorted(by_op[i])
            rep = sorted(aligned.get(i, []))
            names = [a[3] for a in rep]
            for a in eager:
                j = names.index(a[3]) if a[3] in names else -1
                r = rep.pop(j)[1] if j >= 0 else ""
                if j >= 0:
                    names.pop(j)
                w.writerow([i, kinds[i], a[3][:160], f"{a[1]:.2f}", r if r == "" else f"{r:.2f}"])
    print(f"wrote {out}: unmatched eager {lost_e}, replay {lost_r}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
