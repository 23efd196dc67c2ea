"""Numeric helpers shared by the operator references (SPEC.md §1.6)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gradc.ir.types import DType

# Accumulation type of the summing ops (SPEC.md §1.6).
ACC: dict[DType, type[np.floating]] = {
    DType.float16: np.float32, DType.float32: np.float32, DType.float64: np.float64,
    DType.int8: np.float32, DType.uint8: np.float32,
}

# Dtype tables of SPEC.md §1.2.
F = (DType.float64, DType.float32, DType.float16)
RELU_DTYPES = F + (DType.int32, DType.int16, DType.int8)
CLIP_DTYPES = F + (DType.int64, DType.int32, DType.int16, DType.int8,
                   DType.uint64, DType.uint32, DType.uint16, DType.uint8)
SLICE_DTYPES = CLIP_DTYPES
POOL_DTYPES = CLIP_DTYPES
POOL_GRAD_DTYPES = F
RESAMPLE_DTYPES = F + (DType.int8, DType.uint8)
RESAMPLE_GRAD_DTYPES = F


def acc_dtype(dtype: np.dtype) -> type[np.floating]:
    """The accumulation NumPy type for a tensor dtype."""
    return ACC[DType.of(dtype)]


def lowest(dtype: np.dtype) -> np.generic:
    """-inf for floats, the minimum for integers (max pooling's value for a window with no
    element inside the input)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype.type(-np.inf)
    return dtype.type(np.iinfo(dtype).min)


def store(dtype: np.dtype, acc: np.ndarray) -> np.ndarray:
    """Round an accumulator once to ``dtype``; int8/uint8 round half away from zero, saturate."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rounded(acc, dtype)
    r = np.trunc(acc)
    frac = acc - r  # exact: r and acc share the exponent range
    r = r + np.where(np.abs(frac) >= 0.5, np.sign(acc), 0).astype(acc.dtype)
    info = np.iinfo(dtype)
    return np.clip(r, info.min, info.max).astype(dtype)


def rounded(a: np.ndarray, dtype: Any) -> np.ndarray:
    """``a`` rounded once to ``dtype``; a value beyond its range is +-inf (IEEE
    rounding to nearest), without NumPy's overflow warning."""
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dtype)
