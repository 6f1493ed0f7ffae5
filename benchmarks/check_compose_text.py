"""The printed programs of ``compose_dtp`` on small configurations, hashed: a guard that a
change meant only to speed the passes up writes the same programs.

    python benchmarks/check_compose_text.py --write /tmp/before.json  # before the change
    python benchmarks/check_compose_text.py --check /tmp/before.json  # after it

Covers MLP training steps (4 and 8 layers), a 2-layer GPT-2 training step and GPT-2
inference under mixes of D/T/P/K, GPipe and 1F1B, placed and self-contained, with and
without stage functions (42 programs, about 2 s).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distir  # noqa: E402
from distir.transforms.spmd.compose import compose_dtp  # noqa: E402


@cache
def _model(name: str) -> distir.Function:
    from distir.models.gpt2 import GPT2Config
    from distir.transforms.training import training_step

    if name == "mlp":
        return distir.models.mlp(batch_size=16, input_dim=8, hidden_dim=8, output_dim=8,
                                 num_layers=4)
    if name == "mlp8":
        return distir.models.mlp(batch_size=16, input_dim=8, hidden_dim=8, output_dim=8,
                                 num_layers=8)
    cfg = GPT2Config(n_layer=2, d_model=16, n_head=8, vocab_size=32, seq_len=8, batch_size=8)
    fn = cfg.build()
    if name == "gpt2":
        return fn
    names = [p.name for p in fn.params if p.name != "input_ids"]
    return training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                         reduction="mean")


# (model, D, T, P, K, schedule, self_contained, stage_functions)
CONFIGS = [
    ("mlp", 1, 1, 1, 1, "1f1b", False, True),
    ("mlp", 2, 1, 1, 1, "1f1b", False, True),
    ("mlp", 1, 2, 1, 1, "1f1b", True, True),
    ("mlp", 1, 1, 2, 2, "gpipe", False, True),
    ("mlp", 2, 2, 2, 2, "1f1b", False, True),
    ("mlp", 2, 2, 2, 4, "gpipe", True, True),
    ("mlp", 1, 1, 4, 8, "1f1b", False, True),
    ("mlp", 1, 1, 4, 8, "gpipe", False, False),
    ("mlp", 2, 1, 4, 8, "1f1b", False, True),
    ("mlp8", 1, 1, 1, 1, "1f1b", False, True),
    ("mlp8", 2, 2, 2, 4, "1f1b", False, True),
    ("mlp8", 2, 1, 2, 8, "gpipe", False, True),
    ("mlp8", 1, 2, 4, 4, "1f1b", True, True),
    ("mlp8", 1, 1, 4, 16, "1f1b", False, True),
    ("mlp8", 4, 2, 1, 4, "1f1b", False, False),
    ("mlp8", 2, 1, 2, 8, "1f1b", False, False),
    ("gpt2", 1, 1, 1, 1, "1f1b", False, True),
    ("gpt2", 2, 2, 2, 2, "gpipe", True, True),
    ("gpt2", 1, 2, 2, 4, "1f1b", False, True),
    ("gpt2", 2, 1, 2, 4, "gpipe", False, True),
    ("gpt2", 1, 4, 1, 1, "1f1b", False, True),
    ("gpt2", 1, 1, 2, 8, "1f1b", False, True),
    ("gpt2", 2, 2, 1, 2, "1f1b", False, False),
    ("gpt2_step", 1, 1, 1, 1, "1f1b", False, True),
    ("gpt2_step", 2, 1, 1, 1, "1f1b", False, True),
    ("gpt2_step", 1, 2, 1, 1, "1f1b", False, True),
    ("gpt2_step", 2, 2, 1, 1, "1f1b", True, True),
    ("gpt2_step", 1, 1, 2, 2, "1f1b", False, True),
    ("gpt2_step", 2, 1, 2, 2, "gpipe", False, True),
    ("gpt2_step", 1, 2, 2, 2, "1f1b", True, True),
    ("gpt2_step", 2, 2, 2, 2, "1f1b", False, True),
    ("gpt2_step", 2, 2, 2, 4, "1f1b", False, True),
    ("gpt2_step", 2, 2, 2, 4, "gpipe", False, True),
    ("gpt2_step", 1, 2, 2, 8, "1f1b", False, True),
    ("gpt2_step", 1, 1, 4, 8, "1f1b", False, True),
    ("gpt2_step", 1, 1, 2, 8, "gpipe", True, True),
    ("gpt2_step", 2, 1, 2, 4, "1f1b", False, False),
    ("gpt2_step", 4, 2, 1, 2, "1f1b", False, True),
    ("gpt2_step", 1, 4, 2, 1, "1f1b", False, True),
    ("gpt2_step", 2, 2, 2, 4, "1f1b", True, False),
    ("gpt2_step", 1, 1, 8, 2, "gpipe", False, True),
    ("gpt2_step", 8, 1, 1, 1, "1f1b", False, True),
]


def texts() -> dict[str, str]:
    """Each configuration's key and the sha256 of its printed program."""
    out = {}
    for model, d, t, p, k, kind, sc, sf in CONFIGS:
        fn = compose_dtp(_model(model), d, t, p, k, kind, self_contained=sc,
                         stage_functions=sf)
        key = f"{model} D{d} T{t} P{p} K{k} {kind}{' sc' if sc else ''}{'' if sf else ' flat'}"
        out[key] = hashlib.sha256(distir.dumps(fn).encode()).hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path)
    g.add_argument("--check", type=Path)
    args = ap.parse_args()
    got = texts()
    if args.write:
        args.write.write_text(json.dumps(got, indent=1) + "\n")
        print(f"{len(got)} programs written to {args.write}")
        return
    want = json.loads(args.check.read_text())
    bad = [k for k in want if got.get(k) != want[k]] + [k for k in got if k not in want]
    for k in bad:
        print("differs:", k)
    print(f"{len(got) - len(bad)} of {len(got)} programs identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
