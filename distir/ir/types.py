"""Types of DistIR values: tensors, scalars and tuples, each placed on a device.

Types are immutable and compared by value, so they serve as keys of memo tables (type rules
and cost rules are cached by ``(op, argument types, attributes)``).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import numpy as np
from numpy import dtype as _NpDType

__all__ = [
    "DType",
    "Type",
    "TensorType",
    "ScalarType",
    "TupleType",
    "DenseAttr",
    "Device",
]

Device = int
"""Devices are integers starting at 0."""


class DType(enum.Enum):
    """Element types; ``value`` is the name used in the text format."""

    Bool = "Bool"
    Int8 = "Int8"
    Int32 = "Int32"
    Int64 = "Int64"
    Float16 = "Float16"
    BFloat16 = "BFloat16"
    Float32 = "Float32"
    Float64 = "Float64"

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _ITEMSIZE[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.Float16, DType.BFloat16, DType.Float32, DType.Float64)

    @property
    def np(self) -> _NpDType:
        """The numpy dtype (``ml_dtypes.bfloat16`` for BFloat16)."""
        if self is DType.BFloat16:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(_NP_NAMES[self])

    @staticmethod
    def from_np(dtype: _NpDType | type) -> DType:
        """The DType of a numpy dtype; raises ``KeyError`` for one outside the spec."""
        d = np.dtype(dtype)
        hit = _BY_NP_DTYPE.get(d)
        if hit is None:
            hit = DType.BFloat16 if d.name == "bfloat16" else _FROM_NP[d.name]
            _BY_NP_DTYPE[d] = hit
        return hit

    def __repr__(self) -> str:
        return f"DType.{self.value}"


_BY_NP_DTYPE: dict[np.dtype, DType] = {}
"""``DType.from_np`` by numpy dtype (a dtype's ``name`` is slow to compute)."""

_ITEMSIZE = {
    DType.Bool: 1,
    DType.Int8: 1,
    DType.Int32: 4,
    DType.Int64: 8,
    DType.Float16: 2,
    DType.BFloat16: 2,
    DType.Float32: 4,
    DType.Float64: 8,
}
_NP_NAMES = {
    DType.Bool: "bool",
    DType.Int8: "int8",
    DType.Int32: "int32",
    DType.Int64: "int64",
    DType.Float16: "float16",
    DType.Float32: "float32",
    DType.Float64: "float64",
}
_FROM_NP = {v: k for k, v in _NP_NAMES.items()}


class Type:
    """Base class of value types."""

    __slots__ = ()

    @property
    def devices(self) -> tuple[Device, ...]:
        raise NotImplementedError

    @property
    def size_bytes(self) -> int:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A dense tensor: element type, static shape, device.

    The hash is computed once: tensor types are the keys of every memo table.
    """

    dtype: DType
    shape: tuple[int, ...]
    device: Device
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.dtype, self.shape, self.device)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        # Rebuild on unpickling: string hashes differ between processes.
        return (TensorType, (self.dtype, self.shape, self.device))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def size_bytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def devices(self) -> tuple[Device, ...]:
        return (self.device,)

    def with_device(self, device: Device) -> TensorType:
        return TensorType(self.dtype, self.shape, device)

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(self.dtype, shape, self.device)

    def __str__(self) -> str:
        return f"Tensor[{self.dtype.value}, {_shape_str(self.shape)}, {self.device}]"


@dataclass(frozen=True, slots=True)
class ScalarType(Type):
    """A scalar (not a 0-d tensor) on a device, written ``Int64[0]``."""

    dtype: DType
    device: Device

    @property
    def size_bytes(self) -> int:
        return self.dtype.itemsize

    @property
    def devices(self) -> tuple[Device, ...]:
        return (self.device,)

    def with_device(self, device: Device) -> ScalarType:
        return ScalarType(self.dtype, device)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{self.device}]"


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    """A fixed tuple of types."""

    types: tuple[Type, ...]

    @property
    def size_bytes(self) -> int:
        return sum(t.size_bytes for t in self.types)

    @property
    def devices(self) -> tuple[Device, ...]:
        seen: dict[Device, None] = {}
        for t in self.types:
            for d in t.devices:
                seen[d] = None
        return tuple(seen)

    def __str__(self) -> str:
        return f"Tuple[{', '.join(str(t) for t in self.types)}]"


def _shape_str(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


@dataclass(frozen=True, slots=True, eq=True)
class DenseAttr:
    """A dense tensor literal attribute (``dense<Float32>[[1.0, 2.0]]``).

    Stored as dtype, shape and raw bytes so that it is hashable and compared by value;
    ``array`` gives a read-only numpy view.
    """

    dtype: DType
    shape: tuple[int, ...]
    data: bytes

    @staticmethod
    def from_array(a: np.ndarray | np.generic | float | int | bool) -> DenseAttr:
        arr = np.asarray(a)
        dt = DType.from_np(arr.dtype)
        return DenseAttr(dt, tuple(int(d) for d in arr.shape),
                         np.ascontiguousarray(arr, dtype=dt.np).tobytes())

    @property
    def array(self) -> np.ndarray:
        arr = np.frombuffer(self.data, dtype=self.dtype.np).reshape(self.shape)
        return arr

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"DenseAttr({self.dtype.value}, {self.shape})"
