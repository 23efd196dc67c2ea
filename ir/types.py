"""Data types and tensor types: frozen, hashable, printable."""

from __future__ import annotations

import builtins
import enum
from dataclasses import dataclass
from typing import Iterable, Union, cast

import numpy as np
import numpy.typing as npt

from gradc.errors import VerifyError

Dim = Union[int, str]


class DType(enum.Enum):
    """An element type; the value is its long name (as NumPy spells it)."""

    float64 = "float64"
    float32 = "float32"
    float16 = "float16"
    int64 = "int64"
    int32 = "int32"
    int16 = "int16"
    int8 = "int8"
    uint64 = "uint64"
    uint32 = "uint32"
    uint16 = "uint16"
    uint8 = "uint8"
    bool = "bool"

    @property
    def numpy(self) -> np.dtype:
        """The matching NumPy dtype."""
        return _NUMPY[self]

    @property
    def short(self) -> str:
        """The short name used by the text IR (``f32``, ``u8``, ``bool``)."""
        return _SHORT[self]

    @property
    def is_float(self) -> builtins.bool:  # plain `bool` here is the member DType.bool
        """True for float16/32/64."""
        return self in (DType.float16, DType.float32, DType.float64)

    @property
    def is_int(self) -> builtins.bool:
        """True for the signed and unsigned integer types (not bool)."""
        return self.value.startswith(("int", "uint"))

    def __str__(self) -> str:
        return self.value

    @staticmethod
    def of(x: object) -> "DType":
        """Convert a DType, a long or short name, or a NumPy dtype to a DType."""
        if isinstance(x, DType):
            return x
        if isinstance(x, str):
            if x in DType.__members__:
                return DType[x]
            if x in _FROM_SHORT:
                return _FROM_SHORT[x]
            raise VerifyError(f"dtype: expected one of {', '.join(DType.__members__)}, got {x!r}")
        try:
            name = np.dtype(cast(npt.DTypeLike, x)).name  # anything else: TypeError
        except TypeError:
            raise VerifyError(f"dtype: expected a dtype name, got {x!r}") from None
        if name in DType.__members__:
            return DType[name]
        raise VerifyError(f"dtype: expected one of {', '.join(DType.__members__)}, got {name}")


_SHORT = {
    DType.float64: "f64", DType.float32: "f32", DType.float16: "f16",
    DType.int64: "i64", DType.int32: "i32", DType.int16: "i16", DType.int8: "i8",
    DType.uint64: "u64", DType.uint32: "u32", DType.uint16: "u16", DType.uint8: "u8",
    DType.bool: "bool",
}
_NUMPY = {d: np.dtype(d.value) for d in DType}  # DType.numpy: built once, read per call
_FROM_SHORT = {v: k for k, v in _SHORT.items()}

FLOATS = (DType.float64, DType.float32, DType.float16)
SIGNED = (DType.int64, DType.int32, DType.int16, DType.int8)
UNSIGNED = (DType.uint64, DType.uint32, DType.uint16, DType.uint8)
NUMERIC = FLOATS + SIGNED + UNSIGNED


def is_symbol(d: Dim) -> bool:
    """True if the dim is a symbol name rather than a static size."""
    return isinstance(d, str)


MAX_DIM = 2 ** 63 - 1  # dims, sizes and index arithmetic are int64 in every target
MAX_BYTES = 2 ** 62  # the largest tensor a type may describe: beyond any machine, and int64-safe


def element_count(dims: Iterable[object]) -> int:
    """The product of the static dims, as an exact Python int (symbols count as 1).

    The one way gradc counts elements: never in int64 (which wraps), never by allocating.
    """
    n = 1
    for d in dims:
        if not isinstance(d, str):
            n *= int(cast(int, d))
    return n


def byte_size(dims: Iterable[object], dtype: "DType") -> int:
    """``element_count(dims)`` times the dtype's item size, exactly (bool is one byte)."""
    return element_count(dims) * dtype.numpy.itemsize


def fmt_bytes(n: int) -> str:
    """A byte count for messages: ``2**40 bytes (1 TiB)``-style, exact and readable."""
    for unit, size in (("EiB", 2 ** 60), ("PiB", 2 ** 50), ("TiB", 2 ** 40), ("GiB", 2 ** 30),
                       ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n} bytes ({n / size:.3g} {unit})"
    return f"{n} bytes"


def check_name(name: object, what: str) -> str:
    """Validate a name (value, graph or symbol): a non-empty string that UTF-8 can encode.

    Names reach files (text IR, ONNX protobufs, C comments) as UTF-8; a lone surrogate such as
    ``"\\ud800"`` is a valid Python string but no valid text, so it is refused here.
    """
    if not isinstance(name, str) or not name:
        raise VerifyError(f"{what}: expected a non-empty string, got {name!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = name[e.start]
        raise VerifyError(f"{what}: expected valid Unicode text, got {name!r} (a lone surrogate "
                          f"U+{ord(bad):04X} at index {e.start})") from None
    return name


def check_dim(d: object, what: str) -> Dim:
    """Validate one dim: an int >= 1 or a non-empty symbol name."""
    if isinstance(d, (bool, np.bool_)):
        raise VerifyError(f"{what}: expected an int >= 1 or a symbol name, got {d!r}")
    if isinstance(d, (int, np.integer)):
        if not 1 <= int(d) <= MAX_DIM:
            raise VerifyError(f"{what}: expected an int in [1, 2**63 - 1] or a symbol name, "
                              f"got {int(d)}")
        return int(d)
    if isinstance(d, str) and d:
        return check_name(d, what)
    raise VerifyError(f"{what}: expected an int >= 1 or a symbol name, got {d!r}")


@dataclass(frozen=True)
class TensorType:
    """A tensor type: a dtype and a shape whose dims are ints or symbol names."""

    dtype: DType
    shape: tuple[Dim, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", DType.of(self.dtype))
        object.__setattr__(
            self, "shape", tuple(check_dim(d, f"shape[{i}]") for i, d in enumerate(self.shape)))
        nbytes = byte_size(self.shape, self.dtype)
        if nbytes > MAX_BYTES:
            at_least = "" if self.is_static else "at least "
            raise VerifyError(f"type {self}: {at_least}{fmt_bytes(nbytes)}, more than the "
                              f"2**62 bytes a tensor may hold")

    @property
    def size(self) -> int | None:
        """The number of elements (an exact int), or None when a dim is symbolic."""
        return element_count(self.shape) if self.is_static else None

    @property
    def nbytes(self) -> int | None:
        """The size in bytes (an exact int), or None when a dim is symbolic."""
        return byte_size(self.shape, self.dtype) if self.is_static else None

    @property
    def rank(self) -> int:
        """The number of dims."""
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """True if every dim is an int."""
        return not any(is_symbol(d) for d in self.shape)

    @property
    def symbols(self) -> tuple[str, ...]:
        """The symbol names used by this type, in order of first use."""
        return tuple(dict.fromkeys(d for d in self.shape if isinstance(d, str)))

    def __str__(self) -> str:
        return f"{self.dtype.short}[{','.join(map(str, self.shape))}]"
