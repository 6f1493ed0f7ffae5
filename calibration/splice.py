"""Replace, or drop, some fitted families of a profile, keeping everything else.

A profile is refitted family by family when one kernel changes (the backend lowers an op
otherwise) or is measured again on more shapes; its other fits, and its links, stay as
measured. The families named are taken from another profile (fitted by ``python -m
calibration --fit-only`` on the new measurements alone), or dropped, so that the cost
rules fall back to what they use without them (``distir/analysis/cost``):

    python -m calibration.splice PROFILE.json --families scatter_add_repeated \\
        --from NEW.json [-o OUT.json] --note "why"
    python -m calibration.splice PROFILE.json --families scatter_add_repeated --drop \\
        --note "measured on a kernel the backend no longer runs"
    python -m calibration.splice PROFILE.json --families matmul --dtypes Float32 \\
        --from NEW.json --note "..."          # one dtype's fits; the others stay

Each use adds a line to the profile's ``comment`` naming the families, where they came
from and the note. The result is checked (``Hardware.from_json``) before it is written
(by default over ``PROFILE.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from calibration.calibrate import dumps_profile
from distir.analysis.hardware import Hardware
from distir.errors import ConfigError, DistIRError

__all__ = ["splice"]


def splice(profile: dict[str, Any], families: list[str], source: dict[str, Any] | None,
           note: str, dtypes: list[str] | None = None) -> dict[str, Any]:
    """``profile`` with the fits of ``families`` taken from ``source`` (``None``: dropped);
    with ``dtypes``, only those dtypes' fits of each family (the others stay as they are).
    A one-line ``ConfigError`` for a family (or dtype) that ``source`` does not fit, or,
    when dropping, that ``profile`` does not fit."""
    out = json.loads(json.dumps(profile))  # a deep copy
    fits = out.setdefault("fits", {})
    for f in families:
        if source is None:
            if f not in fits or any(d not in fits[f] for d in dtypes or ()):
                what = f"{f!r}" + (f" in {', '.join(dtypes)}" if dtypes else "")
                raise ConfigError(f"profile {profile.get('name')!r} fits no {what}: nothing "
                                  "to drop")
            if dtypes:
                fits[f] = {d: v for d, v in fits[f].items() if d not in dtypes}
                if not fits[f]:
                    del fits[f]
            else:
                del fits[f]
        else:
            new = (source.get("fits") or {}).get(f)
            missing = [d for d in dtypes or () if d not in (new or {})]
            if new is None or missing:
                what = f"{f!r}" + (f" in {', '.join(missing)}" if missing else "")
                raise ConfigError(f"profile {source.get('name')!r} fits no {what}: fit it "
                                  "first (python -m calibration --fit-only CSV)")
            if dtypes:
                fits[f] = {**fits.get(f, {}), **{d: new[d] for d in dtypes}}
            else:
                fits[f] = new
    out["fits"] = dict(sorted(fits.items()))
    where = ("dropped" if source is None else
             f"taken from {source.get('name')} ({_date(source)})")
    which = ", ".join(families) + (f" ({', '.join(dtypes)} only)" if dtypes else "")
    line = (f"Spliced by python -m calibration.splice: {which} {where}"
            + (f": {note}" if note else "") + ".")
    comment = out.get("comment")
    out["comment"] = ([] if comment is None else [comment] if isinstance(comment, str)
                      else list(comment)) + [line]
    Hardware.from_json(out, f"spliced profile {out.get('name')}")
    return out


def _date(doc: dict[str, Any]) -> str:
    cal = doc.get("calibration") or {}
    cmd = cal.get("command") if isinstance(cal, dict) else None
    date = cal.get("date") if isinstance(cal, dict) else None
    return "; ".join(str(x) for x in (date, cmd and f"`{cmd}`") if x) or "undated"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.splice", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile", help="the profile to change")
    p.add_argument("--families", nargs="+", required=True, metavar="F",
                   help="the fitted families to replace or drop (as the profile's fits name "
                   "them: conv, scatter_add_repeated, ...)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--from", dest="source", metavar="NEW.json",
                   help="the profile whose fits of those families are taken")
    g.add_argument("--drop", action="store_true", help="drop those families' fits")
    p.add_argument("--dtypes", nargs="+", default=None, metavar="D",
                   help="only these dtypes' fits of the families (Float32 ...); the others "
                   "stay")
    p.add_argument("--note", default="", help="why, recorded in the profile's comment")
    p.add_argument("-o", "--output", help="where to write (default: over PROFILE)")
    a = p.parse_args(argv)
    try:
        docs = []
        for path in (a.profile, a.source) if a.source else (a.profile,):
            try:
                docs.append(json.loads(Path(path).read_text(encoding="utf-8")))
            except (OSError, ValueError) as e:
                raise ConfigError(f"{path}: cannot read the profile ({e})") from None
        doc = splice(docs[0], a.families, docs[1] if a.source else None, a.note, a.dtypes)
    except DistIRError as e:
        print(e, file=sys.stderr)
        return 2
    out = a.output or a.profile
    Path(out).write_text(dumps_profile(doc) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
