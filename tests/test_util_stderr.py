"""``distir._util.STDERR``: the default progress stream writes to whatever ``sys.stderr``
is at the time, and answers ``isatty`` for it (the search's progress bar redraws in place
on a terminal)."""

from __future__ import annotations

import io
import sys

import pytest

from distir._util import STDERR
from grid_search.search import _progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stderr_follows_sys_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = io.StringIO(), _Tty()
    monkeypatch.setattr(sys, "stderr", first)
    STDERR.write("a")
    assert first.getvalue() == "a" and not STDERR.isatty()
    monkeypatch.setattr(sys, "stderr", second)
    _progress(3, 10, 0.0, STDERR)  # a terminal: the bar, redrawn in place
    assert second.getvalue().startswith("\r[#########") and STDERR.isatty()
    assert STDERR.getvalue() == second.getvalue()  # anything else is forwarded
