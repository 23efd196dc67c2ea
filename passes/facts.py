"""Facts about values that the canonicalization rules rely on, each looked up in O(1).

Every function answers from the value's producer (looking a bounded number of producers up), so
a "no" only means "not proven". The facts:

- ``positive_base(v)``: a value ``b`` with ``v > 0`` exactly where ``b > 0`` (element by element,
  NaN included). ``relu(z) > 0`` is ``z > 0`` because ``relu`` gives ``+0`` (not > 0) for every
  ``z <= 0`` and for NaN; so the base of ``relu(relu(z))`` is ``z``.
- ``never_nan(v)``: no element of ``v`` is NaN.
- ``value_range(v)``: ``(lo, hi)`` with ``lo <= x <= hi`` for every element ``x`` that is not NaN.
- ``add_zero_exact(v)``: ``v + (+0.0)`` gives back ``v`` bit for bit, i.e. ``v`` holds no ``-0.0``
  (``-0 + +0 = +0`` in round-to-nearest) and no signaling NaN (an addition quiets it).
"""

from __future__ import annotations

import math

import numpy as np

from gradc.ir.core import Value
from gradc.ir.ops.registry import REGISTRY
from gradc.ir.types import DType
from gradc.passes.rewriter import Rewriter

DEPTH = 8


def positive_base(v: Value, rw: Rewriter) -> Value:
    """Strip ``relu``s: the value whose ``> 0`` mask equals ``v``'s."""
    v = rw.find(v)
    for _ in range(DEPTH):
        p = rw.def_of(v, "relu")
        if p is None:
            break
        v = rw.operand(p, 0)
    return v


def never_nan(v: Value, rw: Rewriter, depth: int = DEPTH) -> bool:
    """True if ``v`` provably holds no NaN (the producer's ``OpDef.nan_from``)."""
    if not v.type.dtype.is_float:
        return True
    p = rw.producer(v)
    if p is None or depth <= 0:
        return False
    if p.op == "constant":
        return not np.isnan(p.attrs["value"]).any()
    d = REGISTRY.get(p.op)
    if d is None or d.nan_from is None:
        return False
    return all(never_nan(rw.operand(p, d.operands.index(o)), rw, depth - 1) for o in d.nan_from)


def _dtype_limits(dtype: DType) -> tuple[float, float]:
    if dtype.is_float:
        return -math.inf, math.inf
    info = np.iinfo(dtype.numpy)
    return int(info.min), int(info.max)


def value_range(v: Value, rw: Rewriter) -> tuple[float, float] | None:
    """Bounds ``(lo, hi)`` on the non-NaN elements of ``v``, or None if nothing is known."""
    dtype = v.type.dtype
    p = rw.producer(v)
    if p is not None and p.op == "constant":
        a = np.asarray(p.attrs["value"])
        if a.dtype.kind == "f":
            a = a[~np.isnan(a)]
            if a.size == 0:
                return None
        return a.min().item(), a.max().item()
    d = REGISTRY.get(p.op) if p is not None else None
    known = d.value_range(p.attrs, dtype) if d is not None and p is not None else None
    if known is not None:
        return known
    return _dtype_limits(dtype) if dtype.is_int else None


def add_zero_exact(v: Value, rw: Rewriter, depth: int = DEPTH) -> bool:
    """True if ``add(v, +0)`` provably equals ``v`` bit for bit (see the module docstring)."""
    dtype = v.type.dtype
    if not dtype.is_float:
        return True
    p = rw.producer(v)
    if p is None or depth <= 0:
        return False
    d = REGISTRY.get(p.op)
    if d is not None and dtype in d.no_negative_zero:
        return True
    if p.op == "add":
        a, b = rw.operands(p)
        return _no_negative_zero_term(a, rw, depth) or _no_negative_zero_term(b, rw, depth)
    if p.op == "constant":
        arr = np.asarray(p.attrs["value"])
        return not (np.isnan(arr).any() or ((arr == 0) & np.signbit(arr)).any())
    return False


def _no_negative_zero_term(v: Value, rw: Rewriter, depth: int) -> bool:
    # An addition's result is quiet and is -0 only if both terms are -0.
    return add_zero_exact(v, rw, depth - 1)
