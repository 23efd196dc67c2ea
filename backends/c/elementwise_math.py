"""C scalar expressions of SPEC-training.md §16 (element-wise math, activations, selections).

Every op of §16 is elementwise, so the C target fuses it into loops (``backends/c/loops.py``)
through its scalar expression here, listed in ``backends/c/scalar.py``'s ``SCALAR``; it needs
no kernel of its own (``EMITTERS`` is empty). Expressions work on stored forms (float16 as its
bit pattern, bool as ``uint8_t`` 0/1):

- ``div``, ``sqrt``: one IEEE operation (float16 widened to float, rounded once on store).
- ``exp``, ``log``, ``sigmoid``, ``tanh``: the reference's float64 evaluation, rounded once to the
  dtype (float16 directly from double: ``gc_d2h``), with ``transcend.h``'s double functions
  (within about a double ulp, and vectorizable; libm's are scalar calls that keep a loop
  scalar). ``pow``: exponents 0, 1, 2, 3, -1, 1/2, -1/2 (and -2 below float64) are products,
  a quotient or a square root (C's ``pow`` semantics at -0.0 and -inf); other exponents call
  libm's ``pow`` (not vectorized: its accuracy needs a log in double-double).
- ``maximum``, ``minimum``, ``where``, ``leaky_relu``'s kept branch and the comparisons:
  compared in the compute type, the selected stored value moved unchanged (bit-exact).
"""

from __future__ import annotations

from typing import Any, Callable

from gradc.ir.core import Node
from gradc.ir.types import DType

from gradc.backends.c.ctypes_map import CType, ctype, float_literal

Scalar = Callable[[Node, list[str]], str]

EMITTERS: dict[str, Any] = {}  # no kernels: every op here is a scalar expression


def _t(node: Node, i: int = 0) -> CType:
    return ctype(node.inputs[i].type.dtype)


def _w(t: CType, e: str) -> str:
    """The compute-type value of a stored value (float16 bits -> float)."""
    return f"gc_h2f({e})" if t.is_f16 else e


def _wd(t: CType, e: str) -> str:
    """A stored float value widened exactly to double."""
    if t.is_f16:
        return f"gc_h2d({e})"
    return e if t.dtype == DType.float64 else f"(double)({e})"


def _from_double(t: CType, e: str) -> str:
    """A double rounded once to the stored form of ``t``."""
    if t.is_f16:
        return f"gc_d2h({e})"
    return e if t.dtype == DType.float64 else f"(float)({e})"


def div(node: Node, a: list[str]) -> str:
    t = _t(node)
    if t.is_f16:
        return f"gc_f2h(gc_h2f({a[0]}) / gc_h2f({a[1]}))"
    return f"({a[0]} / {a[1]})"


def sqrt(node: Node, a: list[str]) -> str:
    t = _t(node)
    if t.is_f16:
        return f"gc_f2h(sqrtf(gc_h2f({a[0]})))"
    return f"sqrt({a[0]})" if t.dtype == DType.float64 else f"sqrtf({a[0]})"


def _transcendental(fn: str) -> Scalar:
    def emit(node: Node, a: list[str]) -> str:
        t = _t(node)
        return _from_double(t, f"{fn}({_wd(t, a[0])})")
    return emit


# pow(x, e) for exponents whose result is one or two correctly rounded operations in double:
# for float32 and float16 data x*x is exact, so x*x*x and 1/(x*x) are rounded once (the
# correctly rounded double, as glibc's pow gives); for float64 x^3 and x^-1/2 are within 2 ulps,
# x^-2 is not offered (x*x may be subnormal). transcend.h has the helpers.
POW_HELPERS = {0.0: "gc_pow_0", 1.0: "gc_pow_1", 2.0: "gc_pow_2", 3.0: "gc_pow_3",
               -1.0: "gc_pow_m1", 0.5: "gc_pow_h", -0.5: "gc_pow_mh", -2.0: "gc_pow_m2"}
NARROW_ONLY = {-2.0}


def pow_(node: Node, a: list[str]) -> str:
    t = _t(node)
    e = float(node.attrs["exponent"])
    helper = POW_HELPERS.get(e)
    if helper and not (e in NARROW_ONLY and t.dtype == DType.float64):
        return _from_double(t, f"{helper}({_wd(t, a[0])})")
    return _from_double(t, f"pow({_wd(t, a[0])}, {float_literal(e, 'double')})")


def leaky_relu(node: Node, a: list[str]) -> str:
    t = _t(node)
    x = _w(t, a[0])
    alpha = float_literal(float(node.attrs["alpha"]), t.compute)
    scaled = f"({x} * {alpha})"
    if t.is_f16:
        scaled = f"gc_f2h({scaled})"
    return f"({x} >= 0 ? {a[0]} : {scaled})"


def _extremum(op: str) -> Scalar:
    def emit(node: Node, a: list[str]) -> str:
        t = _t(node)
        x, y = _w(t, a[0]), _w(t, a[1])
        pick = f"{x} {op} {y}"
        if t.is_float:
            pick = f"({pick}) | ({y} != {y})"  # `|`, not `||`: see scalar.clip_grad
        return f"(({pick}) ? {a[0]} : {a[1]})"
    return emit


def _compare(op: str) -> Scalar:
    def emit(node: Node, a: list[str]) -> str:
        t = _t(node)
        return f"((uint8_t)({_w(t, a[0])} {op} {_w(t, a[1])}))"
    return emit


def where(node: Node, a: list[str]) -> str:
    return f"({a[0]} ? {a[1]} : {a[2]})"


MATH_SCALAR: dict[str, Scalar] = {
    "div": div, "sqrt": sqrt, "exp": _transcendental("gc_exp"), "log": _transcendental("gc_log"),
    "tanh": _transcendental("gc_tanh"), "pow": pow_, "sigmoid": _transcendental("gc_sigmoid"),
    "leaky_relu": leaky_relu,
    "maximum": _extremum(">="), "minimum": _extremum("<="),
    "greater": _compare(">"), "less": _compare("<"), "equal": _compare("=="),
    "greater_equal": _compare(">="), "less_equal": _compare("<="),
    "where": where,
}
