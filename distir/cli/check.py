"""``distir check`` and ``distir fmt``."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="parse, verify and type-check a .dir file",
                       description="Parse and verify a .dir file, then infer the types of "
                       "its entry function. Prints nothing on success, or one error line.")
    p.add_argument("file", help="a .dir file")
    p.add_argument("--types", action="store_true",
                   help="print the program with every result typed")
    p.set_defaults(func=run_check)

    f = sub.add_parser("fmt", help="print the canonical form of a .dir file",
                       description="Print the canonical text of a .dir file (comments are "
                       "not kept).")
    f.add_argument("file", help="a .dir file")
    f.add_argument("-i", "--in-place", action="store_true", help="rewrite the file")
    f.set_defaults(func=run_fmt)


def run_check(args: argparse.Namespace) -> int:
    import distir
    from distir.analysis import infer_module_types

    m = distir.load(args.file)
    types = infer_module_types(m)
    if args.types:
        sys.stdout.write(distir.dumps(m, types=types))
    return 0


def run_fmt(args: argparse.Namespace) -> int:
    import distir

    m = distir.load(args.file)
    text = distir.dumps(m)
    if args.in_place:
        with open(args.file, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
