"""``distir ops [OP]``: the op set, with signatures, attributes and interpretations.

Every op of the schema table (ONNX at opset 21, communication and training ops) is listed
with the interpretations it has: a type rule, a reference (numpy) rule, a cost rule, a
PyTorch lowering, a layout rule (how the transforms split or batch it) and a VJP rule (its
gradient, for ``distir.transforms.grad``). Which ops are usable for what is read from the
rule tables themselves, so this listing cannot drift from the code.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Callable
from typing import Any

INTERPRETATIONS = ("types", "reference", "cost", "lowering", "layout", "vjp")
"""The columns, in order: what each rule table lets an op do."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ops", help="the op set: signatures, attributes, interpretations",
                       description="List every op DistIR knows, or describe one: its inputs, "
                       "attributes with their defaults, results, and which interpretations it "
                       "has (types: type propagation; reference: the numpy executor; cost: "
                       "the simulator; lowering: the PyTorch backend; layout: the D/T/P "
                       "transforms; vjp: automatic differentiation).")
    p.add_argument("op", nargs="?", help="an op name, e.g. MatMul (default: list them all)")
    p.add_argument("--domain", choices=("onnx", "comm", "train"),
                   help="list only the ops of this domain")
    p.add_argument("--missing", choices=INTERPRETATIONS, metavar="KIND",
                   help="list only the ops without this interpretation (one of "
                   f"{', '.join(INTERPRETATIONS)})")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on standard output and nothing else")
    p.set_defaults(func=run_ops)


def _tables() -> dict[str, Callable[[str], bool | None]]:
    """Per interpretation, a test of whether an op has it (``None``: unknown here, because
    the table's library is not installed)."""
    from distir.analysis.cost import COST_RULES, load_cost_rules
    from distir.analysis.rules import MIXED_RULES, NUMPY_RULES, TYPE_RULES, load_rules

    load_rules()
    load_cost_rules()
    out: dict[str, Callable[[str], bool | None]] = {
        "types": lambda op: op in TYPE_RULES or op in MIXED_RULES,
        "reference": lambda op: op in NUMPY_RULES,
        "cost": lambda op: op in COST_RULES,
    }
    try:
        from distir.backend.lowering import LOWERINGS, load_lowerings

        load_lowerings()
        out["lowering"] = lambda op: op in LOWERINGS
    except ModuleNotFoundError:  # no torch: the backend cannot be asked
        out["lowering"] = lambda op: None
    from distir.transforms.layout_rules import LAYOUT_RULES

    out["layout"] = lambda op: op in LAYOUT_RULES
    out["vjp"] = _vjp_table()
    return out


def _vjp_table() -> Callable[[str], bool | None]:
    try:
        from distir.transforms.vjp import VJP_RULES, load_vjp_rules
    except ImportError:
        return lambda op: False
    load_vjp_rules()
    return lambda op: op in VJP_RULES


def _signature(s: Any) -> str:
    if s.input_names:
        names = list(s.input_names)
        ins = [n if i < s.min_inputs else f"[{n}]" for i, n in enumerate(names)]
        if s.max_inputs is None:
            ins[-1] = ins[-1] + "..."
    elif s.max_inputs is None:
        ins = [f"x{i}" for i in range(max(s.min_inputs, 1))] + ["..."]
    else:
        ins = [f"x{i}" if i < s.min_inputs else f"[x{i}]" for i in range(s.max_inputs)]
    lo, hi = s.min_outputs, s.max_outputs
    if s.outputs_from == "inputs":
        res = "one result per input"
    elif s.outputs_from and s.outputs_from.startswith("attr:"):
        res = f"results: as set by {s.outputs_from[5:]}"
    elif hi is None:
        res = f"{lo} or more results"
    elif lo == hi:
        res = f"{lo} result{'s' * (lo != 1)}"
    else:
        res = f"{lo} to {hi} results"
    return f"{s.name}({', '.join(ins)}) -> {res}"


def _attr(a: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": a.name, "kind": a.kind, "required": a.required}
    if a.default is not None:
        d["default"] = a.default if isinstance(a.default, int | float | str | bool) \
            else str(a.default)
    return d


def _describe(name: str, tables: dict[str, Callable[[str], bool | None]]) -> dict[str, Any]:
    from distir.ir.schemas import SCHEMAS

    s = SCHEMAS[name]
    return {"op": name, "domain": s.domain, "signature": _signature(s),
            "inputs": s.arity_str(), "attributes": [_attr(a) for a in s.attrs],
            "doc": s.doc, "interpretations": {k: t(name) for k, t in tables.items()}}


def _mark(v: bool | None) -> str:
    return "?" if v is None else ("x" if v else "-")


def run_ops(args: argparse.Namespace) -> int:
    from distir.errors import ConfigError
    from distir.ir.schemas import SCHEMAS

    tables = _tables()
    if args.op is not None:
        if args.op not in SCHEMAS:
            close = difflib.get_close_matches(args.op, list(SCHEMAS), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else \
                " (run `distir ops` for the list)"
            raise ConfigError(f"unknown op '{args.op}'{hint}")
        d = _describe(args.op, tables)
        if args.json:
            sys.stdout.write(json.dumps(d) + "\n")
            return 0
        lines = [d["signature"], f"  domain: {d['domain']}"]
        if d["doc"]:
            lines.append(f"  computes: {d['doc']}")
        if d["attributes"]:
            lines.append("  attributes:")
            for a in d["attributes"]:
                dv = "required" if a["required"] else (
                    f"default {a['default']!r}" if "default" in a else "optional")
                lines.append(f"    {a['name']}: {a['kind']} ({dv})")
        else:
            lines.append("  attributes: none")
        have = [k for k, v in d["interpretations"].items() if v]
        lack = [k for k, v in d["interpretations"].items() if v is False]
        lines.append(f"  has: {', '.join(have) or 'nothing'}")
        lines.append(f"  lacks: {', '.join(lack) or 'nothing'}")
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    names = [n for n in SCHEMAS if args.domain is None or SCHEMAS[n].domain == args.domain]
    names.sort(key=lambda n: (SCHEMAS[n].domain != "onnx", SCHEMAS[n].domain, n))
    rows = [_describe(n, tables) for n in names]
    if args.missing:
        rows = [r for r in rows if r["interpretations"][args.missing] is False]
    if args.json:
        sys.stdout.write(json.dumps({"ops": rows}) + "\n")
        return 0
    w = max((len(r["op"]) for r in rows), default=2)
    cols = list(tables)
    lines = [f"{'op':<{w}}  {'domain':<6}  " + "  ".join(cols)]
    for r in rows:
        marks = "  ".join(f"{_mark(r['interpretations'][c]):^{len(c)}}" for c in cols)
        lines.append(f"{r['op']:<{w}}  {r['domain']:<6}  {marks}")
    full = sum(1 for r in rows if all(r["interpretations"][c] for c in
                                      ("types", "reference", "cost", "lowering")))
    lines.append(f"{len(rows)} ops; {full} with types, reference, cost and lowering "
                 "(x: has it, -: lacks it, ?: unknown without torch). "
                 "`distir ops OP` describes one.")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
