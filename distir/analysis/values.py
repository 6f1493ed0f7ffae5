"""Abstract values: what the interpreter binds to each SSA value.

An abstract value is either a ``Type`` (abstract: only dtype, shape and device are known)
or a ``Concrete`` (the value itself, with its type). Both are immutable and hashable, so a
rule's result can be memoized by ``(op, argument values, attributes)``.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np

from distir.ir.types import DType, TensorType, Type

__all__ = ["Concrete", "AbstractValue", "type_of", "concrete", "is_concrete", "make_concrete",
           "CONCRETE_LIMIT"]

CONCRETE_LIMIT = 4096
"""Largest element count kept concrete during type propagation; bigger results stay
abstract (their values are never needed to find a shape)."""


class Concrete:
    """A known value with its type: shape tensors and small constants."""

    __slots__ = ("type", "value", "_hash")

    def __init__(self, type: Type, value: np.ndarray) -> None:
        self.type = type
        self.value = value
        self._hash = hash((type, value.tobytes()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Concrete) and self._hash == other._hash
                and self.type == other.type and self.value.tobytes() == other.value.tobytes())

    def __repr__(self) -> str:
        v = self.value.tolist() if self.value.size <= 16 else f"<{self.value.size} values>"
        return f"Concrete({self.type}, {v})"


AbstractValue: TypeAlias = "Type | Concrete"


def type_of(v: Any) -> Type:
    """The type of an abstract value."""
    return v.type if isinstance(v, Concrete) else v


def concrete(v: Any) -> np.ndarray | None:
    """The value of a concrete abstract value, else ``None``."""
    return v.value if isinstance(v, Concrete) else None


def is_concrete(v: Any) -> bool:
    return isinstance(v, Concrete)


def make_concrete(value: np.ndarray, device: int) -> Concrete:
    """Wrap a numpy array as a concrete tensor on ``device``."""
    arr = np.asarray(value)
    t = TensorType(DType.from_np(arr.dtype), tuple(int(d) for d in arr.shape), device)
    return Concrete(t, arr)
