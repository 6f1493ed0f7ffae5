"""A profile made of two: the compute kernels of one, the links and collectives of another.

A calibration of compute alone (``--no-comm``, e.g. ``--device-time`` on one GPU) keeps its
base profile's links but fits no collective; this gives it those of a full calibration of
the same machine (``h200-sxm``: its links, collective fits and overlap slowdown), so that a
comparison of the two profiles differs in compute alone:

    python -m calibration.merge COMPUTE.json --comm calibration/profiles/h200-sxm.json \\
        -o OUT.json [--name NAME]

From COMPUTE: every fitted family that is not a collective (``calibration.comm``), and the
device's peak FLOP/s, memory bandwidth and launch overhead. From ``--comm``: everything
else (interconnect, collective fits, memory figures, host dispatch).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from calibration.calibrate import dumps_profile
from calibration.comm import COLLECTIVE_OPS
from distir.analysis.hardware import Hardware
from distir.errors import ConfigError, DistIRError

__all__ = ["merge"]

_COMPUTE_DEVICE = ("peak_flops", "memory_bandwidth", "launch_overhead")


def merge(compute: dict[str, Any], comm: dict[str, Any], name: str) -> dict[str, Any]:
    """The profile object: ``compute``'s kernels on ``comm``'s links (see the module
    docstring); checked by ``Hardware.from_json``."""
    out = json.loads(json.dumps(comm))  # a deep copy
    cfits = compute.get("fits") or {}
    if not any(f not in COLLECTIVE_OPS for f in cfits):
        raise ConfigError(f"profile {compute.get('name')!r} fits no compute kernel: nothing "
                          "to take from it")
    fits = {f: m for f, m in (comm.get("fits") or {}).items() if f in COLLECTIVE_OPS}
    fits.update({f: m for f, m in cfits.items() if f not in COLLECTIVE_OPS})
    out["fits"] = dict(sorted(fits.items()))
    for k in _COMPUTE_DEVICE:
        if k in compute.get("device", {}):
            out["device"][k] = compute["device"][k]
    out["name"] = name
    out["description"] = (f"compute kernels of {compute.get('name')} "
                          f"({compute.get('description', '')}), links and collectives of "
                          f"{comm.get('name')}")
    out["comment"] = [
        f"Merged by python -m calibration.merge: compute fits, peak FLOP/s, memory bandwidth "
        f"and launch overhead from {compute.get('name')}; interconnect, collective fits and "
        f"the rest from {comm.get('name')}.",
        *[f"{compute.get('name')}: {c}" for c in _as_list(compute.get("comment"))]]
    out["calibration"] = {"compute": compute.get("calibration"),
                          "comm": comm.get("calibration")}
    Hardware.from_json(out, f"merged profile {name}")
    return out


def _as_list(x: Any) -> list[str]:
    return [] if x is None else [x] if isinstance(x, str) else [str(c) for c in x]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.merge", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("compute", help="the profile whose compute kernels are taken")
    p.add_argument("--comm", required=True, help="the profile whose links and collectives "
                   "(and everything but the compute kernels) are taken")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--name", help="the merged profile's name (default: the output's stem)")
    a = p.parse_args(argv)
    try:
        docs = []
        for path in (a.compute, a.comm):
            try:
                docs.append(json.loads(Path(path).read_text(encoding="utf-8")))
            except (OSError, ValueError) as e:
                raise ConfigError(f"{path}: cannot read the profile ({e})") from None
        doc = merge(docs[0], docs[1], a.name or Path(a.output).stem)
    except DistIRError as e:
        print(e, file=sys.stderr)
        return 2
    Path(a.output).write_text(dumps_profile(doc) + "\n", encoding="utf-8")
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
