"""Put a calibration report into ``calibration/README.md``.

``python -m calibration.readme REPORT.md README.md`` replaces the text between the markers
``<!-- results:NAME:begin -->`` and ``<!-- results:NAME:end -->`` (NAME: the profile named in
the report's first line) with the report, or appends a marked section at the end; the
placeholder between ``<!-- results:pending:begin -->`` and ``<!-- results:pending:end -->``
goes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["insert_report"]


def insert_report(report: str, readme: str) -> str:
    """``readme`` with ``report`` in its profile's marked section."""
    m = re.match(r"## Profile `([^`]+)`", report)
    if m is None:
        raise ValueError("the report must start with '## Profile `NAME`'")
    name = m.group(1)
    begin, end = f"<!-- results:{name}:begin -->", f"<!-- results:{name}:end -->"
    block = f"{begin}\n{report.rstrip()}\n{end}"
    readme = re.sub(r"<!-- results:pending:begin -->.*?<!-- results:pending:end -->\n?", "",
                    readme, flags=re.S)
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pat.search(readme):
        return pat.sub(lambda _: block, readme)
    return readme.rstrip() + "\n\n" + block + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m calibration.readme REPORT.md README.md", file=sys.stderr)
        return 2
    report, readme = Path(argv[0]), Path(argv[1])
    readme.write_text(insert_report(report.read_text(encoding="utf-8"),
                                    readme.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
