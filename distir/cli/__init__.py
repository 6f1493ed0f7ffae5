"""The ``distir`` command: parses arguments and calls the package.

Each subcommand lives in its own module under ``distir.cli`` with ``register(subparsers)``;
those modules import only the standard library at top level, so ``distir check`` starts
fast. Errors a user can cause print one line on standard error and exit with status 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from distir.errors import DistIRError

# Subcommand modules, in the order `distir --help` lists them.
COMMAND_MODULES = [
    "distir.cli.check",
    "distir.cli.importer",
    "distir.cli.execute",
    "distir.cli.transform",
    "distir.cli.simulate",
    "distir.cli.run",
    "distir.cli.explain",
    "distir.cli.grid_search",
    "distir.cli.sync_search",
    "distir.cli.optimize",
    "distir.cli.calibrate",
    "distir.cli.ops",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="distir",
        description="Find the fastest way to distribute a neural network step over many GPUs.",
    )
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:  # not written yet
                continue
            raise
        mod.register(sub)
    return p


def _version() -> str:
    from distir import __version__

    return f"distir {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except DistIRError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("distir: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        name = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"error: {name}{e.strerror or e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a bug, not bad input: say so in one line
        if os.environ.get("DISTIR_TRACEBACK"):
            raise
        print(f"internal error: {type(e).__name__}: {e} (a bug in distir; rerun with "
              "DISTIR_TRACEBACK=1 for the traceback and please report it)", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
