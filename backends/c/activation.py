"""C scalar expressions of SPEC-transformers.md §25: gelu, gelu_grad, erf, sin, cos, is_nan.

Every op here is elementwise, so the C target fuses it into loops through its expression (listed
in ``backends/c/scalar.py``'s ``SCALAR``); none needs a kernel of its own. Like the reference
(``gradc.ir.ops.activation``), each evaluates in double and rounds once, with ``transcend.h``'s
vectorizable double functions (about a double ulp from the exact value, where libm's scalar calls
kept every loop scalar): ``erf``, ``sin``, ``cos`` call ``gc_erf``, ``gc_sin``, ``gc_cos``;
``gelu``/``gelu_grad`` call ``gc_gelu_*`` (the reference's float64 formulas in its order, with
``gc_erfc`` and ``gc_exp``). A float32 or float16 result therefore equals the reference's except
where the exact value lies within ~1e-16 relative of a rounding boundary; float64 results are
within §25.4's tolerance (benchmarks/bench_transcendental.py measures both). ``gelu_grad`` rounds
the derivative to the accumulation type (float for float16) and multiplies once by dY.
``is_nan`` compares the value with itself (exact).
"""

from __future__ import annotations

from typing import Callable

from gradc.ir.core import Node
from gradc.ir.types import DType

from gradc.backends.c.ctypes_map import CType, ctype

Scalar = Callable[[Node, list[str]], str]


def _t(node: Node) -> CType:
    return ctype(node.inputs[0].type.dtype)


def _double(t: CType, e: str) -> str:
    """A stored float value widened exactly to double."""
    if t.is_f16:
        return f"gc_h2d({e})"
    return e if t.dtype == DType.float64 else f"(double)({e})"


def _from_double(t: CType, e: str) -> str:
    """A double rounded once to the stored form of ``t`` (float16 directly from double)."""
    if t.is_f16:
        return f"gc_d2h({e})"
    return e if t.dtype == DType.float64 else f"(float)({e})"


def _double_fn(fn: str) -> Scalar:
    def emit(node: Node, a: list[str]) -> str:
        t = _t(node)
        return _from_double(t, f"{fn}({_double(t, a[0])})")
    return emit


def gelu(node: Node, a: list[str]) -> str:
    t = _t(node)
    return _from_double(t, f"gc_gelu_{node.attrs['approximation']}({_double(t, a[0])})")


def gelu_grad(node: Node, a: list[str]) -> str:
    t = _t(node)
    d = f"gc_gelu_{node.attrs['approximation']}_slope({_double(t, a[0])})"
    if t.dtype == DType.float64:
        return f"({a[1]} * {d})"
    product = f"({'gc_h2f(' + a[1] + ')' if t.is_f16 else a[1]} * (float)({d}))"
    return f"gc_f2h{product}" if t.is_f16 else product


def is_nan(node: Node, a: list[str]) -> str:
    t = _t(node)
    v = f"gc_h2f({a[0]})" if t.is_f16 else a[0]
    return f"((uint8_t)({v} != {v}))"


ACTIVATION_SCALAR: dict[str, Scalar] = {
    "gelu": gelu, "gelu_grad": gelu_grad, "erf": _double_fn("gc_erf"), "sin": _double_fn("gc_sin"),
    "cos": _double_fn("gc_cos"), "is_nan": is_nan,
}
