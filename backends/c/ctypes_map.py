"""C types, literals and symbolic sizes shared by the C emitters.

A value of dtype D lives in memory (and in generated expressions) as ``CType.store``: float16 is
kept as its 16-bit pattern (``uint16_t``) and widened with ``gc_h2f`` only where arithmetic or a
comparison needs it, so copies and selections move the pattern unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gradc.ir.types import Dim, DType


@dataclass(frozen=True)
class CType:
    """How one dtype is stored and computed in C."""

    dtype: DType
    store: str  # element type of buffers and of values in expressions
    bits: str  # unsigned type of the same width (bit-exact copies)
    compute: str  # type of arithmetic: float for f16/f32, double for f64, else ``store``
    acc: str  # accumulator of summing ops (SPEC.md §1.6)
    uarith: str  # unsigned type of wrapping integer arithmetic (at least 32 bits: no promotion)

    @property
    def is_f16(self) -> bool:
        """True for float16 (stored as bits)."""
        return self.dtype == DType.float16

    @property
    def is_float(self) -> bool:
        """True for float16/32/64."""
        return self.dtype.is_float

    @property
    def signed(self) -> bool:
        """True for the signed integer types."""
        return self.dtype.value.startswith("int")

    @property
    def width(self) -> int:
        """Size in bits."""
        return self.dtype.numpy.itemsize * 8


def _make(d: DType) -> CType:
    if d == DType.float64:
        return CType(d, "double", "uint64_t", "double", "double", "uint64_t")
    if d == DType.float32:
        return CType(d, "float", "uint32_t", "float", "float", "uint32_t")
    if d == DType.float16:
        return CType(d, "uint16_t", "uint16_t", "float", "float", "uint32_t")
    if d == DType.bool:
        return CType(d, "uint8_t", "uint8_t", "uint8_t", "float", "uint32_t")
    w = d.numpy.itemsize * 8
    store = f"{d.value}_t"
    wide = "uint64_t" if w == 64 else "uint32_t"
    return CType(d, store, f"uint{w}_t", store, "float", wide)


CTYPES = {d: _make(d) for d in DType}


def ctype(d: DType) -> CType:
    """The CType of a dtype."""
    return CTYPES[d]


def float_literal(v: float, c_type: str) -> str:
    """An exact C literal of a float or double value (hexadecimal, or INFINITY)."""
    suffix = "f" if c_type == "float" else ""
    if math.isnan(v):
        return f"((({c_type})NAN))"
    if math.isinf(v):
        return f"(({c_type})(-INFINITY))" if v < 0 else f"(({c_type})INFINITY)"
    return f"({float(v).hex()}{suffix})"


def int_literal(v: int, t: CType) -> str:
    """An exact C literal of an integer value of type ``t``."""
    v = int(v)
    if not t.signed:
        return f"(({t.store})UINT64_C({v}))"
    if v == -(2 ** 63):
        return "((int64_t)(-INT64_C(9223372036854775807) - 1))"
    return f"(({t.store})INT64_C({v}))"


def literal(v: float | int, d: DType) -> str:
    """A C expression of the stored form of scalar ``v`` of dtype ``d``."""
    t = ctype(d)
    if d == DType.float16:
        bits = int(np.array(v, np.float16).view(np.uint16))
        return f"((uint16_t)0x{bits:04x}u)"
    if d.is_float:
        return float_literal(float(v), t.store)
    if d == DType.bool:
        return "((uint8_t)1)" if v else "((uint8_t)0)"
    return int_literal(int(v), t)


def compute_literal(v: float, d: DType) -> str:
    """A C literal of a floating value in the compute type of ``d`` (float for f16)."""
    return float_literal(float(v), ctype(d).compute)


class Dims:
    """Symbolic dims as C expressions: ``S[k]`` for the k-th symbol, ints as constants."""

    def __init__(self, symbols: Sequence[str], fixed: dict[str, int]) -> None:
        self.symbols = list(symbols)
        self.index: dict[Dim, int] = {s: i for i, s in enumerate(self.symbols)}
        self.fixed = dict(fixed)

    def static(self, d: Dim) -> int | None:
        """The value of a dim known at compile time, else None."""
        if isinstance(d, str):
            return self.fixed.get(d)
        return int(d)

    def expr(self, d: Dim) -> str:
        """A C expression of one dim."""
        s = self.static(d)
        return _const(s) if s is not None else f"S[{self.index[d]}]"

    def prod(self, dims: Sequence[Dim]) -> str:
        """A C expression of the product of dims (constants folded)."""
        const, syms = 1, []
        for d in dims:
            s = self.static(d)
            if s is None:
                syms.append(f"S[{self.index[d]}]")
            else:
                const *= s
        if not syms:
            return _const(const)
        terms = syms if const == 1 else [_const(const)] + syms
        return "(" + " * ".join(terms) + ")"

    def prod_static(self, dims: Sequence[Dim]) -> int | None:
        """The product of dims if every one is static."""
        out = 1
        for d in dims:
            s = self.static(d)
            if s is None:
                return None
            out *= s
        return out

    def same_shape(self, a: Sequence[Dim], b: Sequence[Dim]) -> bool:
        """True when two shapes are equal dim by dim (see ``same``)."""
        return len(a) == len(b) and all(self.same(x, y) for x, y in zip(a, b))

    def same(self, a: Dim, b: Dim) -> bool:
        """True when two dims are equal as written (or both static and equal)."""
        if a == b:
            return True
        sa, sb = self.static(a), self.static(b)
        return sa is not None and sa == sb


def _const(v: int) -> str:
    return f"INT64_C({v})" if abs(v) >= 2 ** 31 else str(v)


def strides(dims: Dims, shape: Sequence[Dim]) -> list[str]:
    """Row-major element strides of a shape as C expressions."""
    return [dims.prod(shape[i + 1:]) for i in range(len(shape))]
