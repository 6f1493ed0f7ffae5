"""The error hierarchy.

Every error a user can cause is a :class:`DistIRError` whose ``str`` is one line: the place
(``file:line:col``, or the op and value names), what was expected, and the remedy where there
is one. The command-line tools print that line and exit with status 1, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Loc",
    "DistIRError",
    "ParseError",
    "VerifyError",
    "TypeInferenceError",
    "PlacementError",
    "ExecutionError",
    "UnsupportedError",
    "ImportError_",
    "TransformError",
    "SimulationError",
    "ConfigError",
    "BackendError",
]


@dataclass(frozen=True, slots=True)
class Loc:
    """A place in a source file; ``line`` and ``col`` count from 1."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class DistIRError(Exception):
    """Base of every error a user can cause. ``str(e)`` is a single line."""

    def __init__(self, message: str, loc: Loc | None = None) -> None:
        self.message = message
        self.loc = loc
        super().__init__(self.format())

    def format(self) -> str:
        msg = " ".join(self.message.split("\n"))
        return f"{self.loc}: error: {msg}" if self.loc is not None else f"error: {msg}"


class ParseError(DistIRError):
    """The text is not a well-formed DistIR module."""


class VerifyError(DistIRError):
    """The module parses but breaks a structural rule (SSA, schemas, calls)."""


class TypeInferenceError(DistIRError):
    """Types do not fit an op's rule, or an annotation disagrees with the inferred type."""


class PlacementError(TypeInferenceError):
    """An op's inputs sit on devices the op cannot use."""


class ExecutionError(DistIRError):
    """The reference executor could not run an op on the given values."""


class UnsupportedError(DistIRError):
    """An op lacks the rule (type, numpy, cost, lowering) that the requested analysis needs."""


class ImportError_(DistIRError):
    """A model could not be imported (unsupported ops, unbound symbolic dimensions...)."""


class TransformError(DistIRError):
    """A transform refused a configuration (a degree that does not divide, ...)."""


class SimulationError(DistIRError):
    """The simulator could not cost a program (missing profile entries, ...)."""


class ConfigError(DistIRError):
    """Bad options: unknown hardware profile, impossible search space, missing file."""


class BackendError(DistIRError):
    """A real run failed: out of memory, a collective timed out, a worker died."""
