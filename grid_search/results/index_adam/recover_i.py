"""Call I's measured times, recovered from its log: its two searches were stopped by their
time limits while measuring, and ``grid-search --run-top`` then wrote its CSV only at the
end (fixed since: it is rewritten after every configuration), so the rows measured are
only in ``sealed.log`` (``measured D1/T1/P2/K2 batch 8: 50.42 ms``), without their memory
and clock figures. Each line is matched to the CSV's row of that configuration (a
configuration measured under both schedules, 1F1B and GPipe, appears twice, in the
order ``best_rows`` ran them, ties kept in the CSV's order), and the predictions are the
CSV's, recorded at the measuring commit with the profile of this folder's comparison
commit (unchanged between them). Prints the accuracy per batch size and every row.

    python grid_search/results/index_adam/recover_i.py
"""

from __future__ import annotations

import re
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from grid_search.real import accuracy  # noqa: E402
from grid_search.report import best_rows  # noqa: E402
from grid_search.search import read_rows  # noqa: E402

LINE = re.compile(r"measured D(\d+)/T(\d+)/P(\d+)(?:/K(\d+))? batch (\d+): ([\d.]+) ms")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        with tarfile.open(HERE / "call_i" / "sealed.tgz") as t:
            t.extractall(d, filter="data")
        log = (Path(d) / "sealed.log").read_text(encoding="utf-8")
        print("| batch | n | Spearman | Kendall | median / p90 / worst | median signed | "
              "top-1 regret |")
        print("|---|---|---|---|---|---|---|")
        lines = []
        for batch in (8, 16):
            rows = read_rows(str(Path(d) / f"wavlm_b{batch}_graph.csv"))
            order = best_rows(rows, len(rows))
            done: set[int] = set()
            got = []
            for m in LINE.finditer(log):
                dp, tp, pp, k, b, ms = m.groups()
                if int(b) != batch:
                    continue
                for i, r in enumerate(order):
                    if i not in done and (r["dp"], r["tp"], r["pp"]) == (dp, tp, pp) and \
                            int(r["microbatches"]) == int(k or 1):
                        done.add(i)
                        got.append({**r, "measured_status": "ok",
                                    "measured_latency_s": str(float(ms) / 1e3),
                                    "measured_peak_memory_bytes": ""})
                        break
            acc = accuracy(got)
            print(f"| {batch} | {int(acc['n'])} | {acc['spearman']:.3f} | "
                  f"{acc['kendall']:.3f} | {acc['median_latency_error']:.1%} / "
                  f"{acc['p90_latency_error']:.1%} / {acc['worst_latency_error']:.1%} | "
                  f"{acc['median_signed_latency_error']:+.1%} | {acc['top1_regret']:.1%} |")
            for r in got:
                p, mm = float(r["latency_s"]) * 1e3, float(r["measured_latency_s"]) * 1e3
                lines.append(f"    batch {batch} D{r['dp']} T{r['tp']} P{r['pp']} "
                             f"K{r['microbatches']} {r['schedule']}: predicted {p:.2f} ms, "
                             f"measured {mm:.2f} ms, {(p - mm) / mm:+.1%}")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
