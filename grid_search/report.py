"""Summaries and plots of search results (the paper's Table 2 and Figures 5-6)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["summarize", "plot_memory_throughput", "best_rows"]


def _f(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _fits(r: dict[str, Any]) -> bool:
    return str(r.get("fits")) in ("True", "true", "1") and _f(r.get("throughput")) > 0


def best_rows(rows: Sequence[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    ok = [r for r in rows if _fits(r)]
    return sorted(ok, key=lambda r: -_f(r["throughput"]))[:n]


def _label(r: dict[str, Any]) -> str:
    s = f"D{r['dp']} T{r['tp']} P{r['pp']}"
    if int(r["pp"]) > 1:
        s += f" K{r['microbatches']} {r['schedule']}"
    return s


def _gib(x: Any) -> str:
    return f"{_f(x) / 2**30:.2f}"


def _why_none(rows: Sequence[dict[str, Any]], n_oom: int, n_ref: int, n_err: int) -> str:
    """Why no configuration is ranked: memory only when memory is what stopped them all."""
    if not rows:
        return "no configuration was simulated"
    if n_oom == len(rows):
        return ("no configuration fits in memory: try more devices, a smaller batch, or a "
                "larger-memory --hardware")
    reasons = [r for r in rows if r.get("status") in ("error", "refused") and r.get("reason")]
    first = f"; the first: {reasons[0]['reason']}" if reasons else ""
    return (f"no configuration could be ranked ({n_oom} out of memory, {n_ref} refused, "
            f"{n_err} failed){first}")


def summarize(rows: Sequence[dict[str, Any]], *, top: int = 10,
              title: str = "") -> str:
    """The text summary printed after a search."""
    lines: list[str] = []
    total = len(rows)
    n_ok = sum(1 for r in rows if _fits(r))
    n_oom = sum(1 for r in rows if r.get("status") == "oom")
    n_ref = sum(1 for r in rows if r.get("status") == "refused")
    n_err = sum(1 for r in rows if r.get("status") == "error")
    if title:
        lines.append(title)
    lines.append(f"{total} configurations: {n_ok} fit in memory, {n_oom} out of memory, "
                 f"{n_ref} refused by the transform, {n_err} failed")
    best = best_rows(rows, top)
    if not best:
        lines.append(_why_none(rows, n_oom, n_ref, n_err))
        return "\n".join(lines)
    hdr = f"{'rank':>4}  {'batch':>7}  {'configuration':<24} {'latency (ms)':>12} " \
          f"{'throughput (/s)':>16} {'peak mem (GiB)':>15}"
    lines += ["", f"Top {len(best)} configurations by simulated throughput:", hdr,
              "-" * len(hdr)]
    for i, r in enumerate(best, 1):
        lines.append(f"{i:>4}  {int(r['batch_size']):>7}  {_label(r):<24} "
                     f"{_f(r['latency_s']) * 1e3:>12.3f} {_f(r['throughput']):>16.1f} "
                     f"{_gib(r['peak_memory_bytes']):>15}")
    top_row = best[0]
    lines += ["", "Best pure strategies (the paper's Table 2 layout):",
              f"{'strategy':<10} {'best configuration':<32} {'throughput (/s)':>16} "
              f"{'speedup of best':>16}"]
    for strat in ("D", "T", "P"):
        cand = [r for r in rows if _fits(r) and r.get("strategy") == strat]
        if not cand:
            lines.append(f"{'pure ' + strat:<10} {'(none fits)':<32}")
            continue
        b = max(cand, key=lambda r: _f(r["throughput"]))
        sp = _f(top_row["throughput"]) / _f(b["throughput"])
        lines.append(f"{'pure ' + strat:<10} {_label(b) + ' batch ' + str(b['batch_size']):<32} "
                     f"{_f(b['throughput']):>16.1f} {sp:>15.2f}x")
    lines.append(f"{'best':<10} {_label(top_row) + ' batch ' + str(top_row['batch_size']):<32} "
                 f"{_f(top_row['throughput']):>16.1f} {1.0:>15.2f}x")
    return "\n".join(lines)


_COLORS = {"none": "#7f7f7f", "D": "#1f77b4", "T": "#ff7f0e", "P": "#2ca02c",
           "D+T": "#d62728", "D+P": "#9467bd", "T+P": "#8c564b", "D+T+P": "#e377c2"}


def plot_memory_throughput(rows: Sequence[dict[str, Any]], path: str, *,
                           title: str = "", capacity_bytes: float | None = None) -> str:
    """Peak memory vs throughput of every simulated configuration, coloured by strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    pts = [r for r in rows if _f(r.get("throughput")) > 0]
    for strat, color in _COLORS.items():
        sel = [r for r in pts if r.get("strategy") == strat]
        if not sel:
            continue
        ax.scatter([_f(r["peak_memory_bytes"]) / 2**30 for r in sel],
                   [_f(r["throughput"]) for r in sel], s=14, color=color, label=strat,
                   alpha=0.8, edgecolors="none")
    if capacity_bytes:
        ax.axvline(capacity_bytes / 2**30, color="k", linestyle="--", linewidth=1,
                   label="device memory")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("peak memory per device (GiB)")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title(title or "simulated configurations")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
