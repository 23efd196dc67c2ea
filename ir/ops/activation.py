"""Activations and element-wise math of SPEC-transformers.md §25: gelu, gelu_grad, erf, sin, cos
and is_nan.

Numerics (§23.4, §25.4): ``erf``, ``sin`` and ``cos`` are transcendental: the reference evaluates
``math.erf`` (NumPy has no erf; Python's calls the C library's, as the C target does) or NumPy's
float64 ``sin``/``cos`` on the widened input and rounds once. ``gelu`` and ``gelu_grad`` evaluate
§25.1-§25.2's float64 formulas (``erfc``, not ``1 + erf``, which cancels below x = -6) and round
once; their tolerance has an absolute term (§25.4), so a target may use the written forms.
``is_nan`` is an exact predicate with a bool result.

The float64 helpers below hold their constants as literals in their bodies (the NumPy target
copies these functions into its generated module, which has no other globals):
0.7071067811865476 is 1/sqrt(2), 0.7978845608028654 is ``math.sqrt(2 / math.pi)``,
0.3989422804014327 is 1/sqrt(2 pi) (PyTorch's ``M_2_SQRTPI * M_SQRT1_2 * 0.5``) and 0.134145 is
``3 * 0.044715``, each the float64 nearest the value (``tests/test_gelu.py`` checks them).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from gradc.errors import UnsupportedError
from gradc.ir.core import Node, Value
from gradc.ir.ops.common import F, rounded
from gradc.ir.ops.elementwise_math import scalar_const, transcendental
from gradc.ir.ops.registry import ELEMENTWISE, Attr, Checker, OpDef, make_node, register
from gradc.ir.types import DType, TensorType

APPROXIMATIONS = ("none", "tanh")


# -- the float64 formulas (copied into the NumPy target's module) -------------------------------

def erf64(x: np.ndarray) -> np.ndarray:
    """``math.erf`` of each float64 element (the C library's erf)."""
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=np.float64)


def erfc64(x: np.ndarray) -> np.ndarray:
    """``math.erfc`` of each float64 element (the C library's erfc)."""
    return np.asarray(np.frompyfunc(math.erfc, 1, 1)(x), dtype=np.float64)


def gelu64(x: np.ndarray, approximation: str) -> np.ndarray:
    """gelu's ``x * Phi(x)`` in float64: ``erfc(-x/sqrt 2)/2``, or the logistic of ``2u``."""
    with np.errstate(all="ignore"):
        if approximation == "none":
            phi = 0.5 * erfc64(-x * 0.7071067811865476)
        else:
            u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
            phi = 1 / (1 + np.exp(-2 * u))  # (1 + tanh u) / 2, as a logistic
        return x * phi


def gelu_slope64(x: np.ndarray, approximation: str) -> np.ndarray:
    """gelu's derivative in float64 (PyTorch's ``gelu_backward`` formula); NaN where x is
    not finite, and the tanh form's second term 0 where ``p * q`` underflows (no 0 * inf)."""
    with np.errstate(all="ignore"):
        if approximation == "none":
            cdf = 0.5 * erfc64(-x * 0.7071067811865476)
            pdf = np.exp(x * x * -0.5) * 0.3989422804014327
            d = cdf + x * pdf
        else:
            u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
            p = 1 / (1 + np.exp(-2 * u))  # (1 + tanh u) / 2
            q = 1 / (1 + np.exp(2 * u))  # (1 - tanh u) / 2
            pq = p * q
            second = 2 * x * pq * 0.7978845608028654 * (1 + 0.134145 * x * x)
            d = p + np.where(pq == 0, 0.0, second)
        return np.where(np.isfinite(x), d, np.nan)


# -- gelu, gelu_grad ----------------------------------------------------------------------------

def _check_input(c: Checker) -> None:
    """§25.1 item 1: input.dtype in float64/32/16, rank 0..8."""
    c.dtype_in("input", F)
    c.rank_in("input", 0, 8)


@register
class Gelu(OpDef):
    """``gelu(input, approximation="none")``: ``x * Phi(x)``, the Gaussian CDF ``Phi`` exact
    (``erfc(-x/sqrt 2) / 2``, no cancellation for negative x) with ``"none"``, or PyTorch's tanh
    approximation with ``"tanh"``; evaluated in float64 and rounded once."""

    name = "gelu"
    operands = ("input",)
    attributes = (Attr("approximation", "choice", "none", APPROXIMATIONS),)
    traits = ELEMENTWISE
    dtypes = F
    transcendental = True

    def infer(self, c: Checker) -> list[TensorType]:
        _check_input(c)
        c.choice("approximation", APPROXIMATIONS)
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [rounded(np.asarray(gelu64(x.astype(np.float64), attrs["approximation"])),
                        x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = gelu_grad(X, dY, approximation)."""
        (g,) = grads
        if g is None:
            return [None]
        return [make_node("gelu_grad", [node.inputs[0], g], dict(node.attrs))]


@register
class GeluGrad(OpDef):
    """``gelu_grad(input, input_gradient, approximation="none")``: ``dY * gelu'(x)``, the
    derivative (of the erf or tanh form) evaluated in float64 and rounded once to the
    accumulation dtype, then one multiply by ``dY``."""

    name = "gelu_grad"
    operands = ("input", "input_gradient")
    attributes = (Attr("approximation", "choice", "none", APPROXIMATIONS),)
    traits = ELEMENTWISE
    dtypes = F
    transcendental = True

    def infer(self, c: Checker) -> list[TensorType]:
        _check_input(c)
        c.same_dtype("input_gradient", "input")
        c.same_shape("input_gradient", "input")
        c.choice("approximation", APPROXIMATIONS)
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  dy: np.ndarray) -> list[np.ndarray]:
        a = np.float64 if x.dtype == np.float64 else np.float32  # ACC
        d = rounded(gelu_slope64(x.astype(np.float64), attrs["approximation"]), a)
        with np.errstate(all="ignore"):
            return [rounded(np.asarray(dy.astype(a) * d), x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """d(input_gradient) = gelu_grad(X, G); d(input), gelu's second derivative, is refused
        (UnsupportedError) when the input depends on a graph input or parameter."""
        (g,) = grads
        if g is None:
            return [None, None]
        x = node.inputs[0]
        if _variable(x):
            raise UnsupportedError(
                "grad: gelu_grad: expected a graph whose gelu_grad input does not depend on a "
                "differentiated value (the second derivative of gelu is not supported)")
        return [None, make_node("gelu_grad", [x, g], dict(node.attrs))]


def _variable(v: Value) -> bool:
    """True when ``v`` is computed from a floating graph input or parameter (so it may need a
    gradient); False for values made of constants only."""
    stack, seen = [v], set()
    while stack:
        u = stack.pop()
        if id(u) in seen:
            continue
        seen.add(id(u))
        if u.producer is None:
            if u.type.dtype.is_float:
                return True
            continue
        stack.extend(u.producer.inputs)
    return False


# -- erf, sin, cos, is_nan ----------------------------------------------------------------------

class _Unary(OpDef):
    """A float element-wise op of §25.3: input float64/32/16, rank 0..8 (its checklist)."""

    operands = ("input",)
    traits = ELEMENTWISE
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        _check_input(c)
        return [c.t("input")]


def _mul(a: Value, b: Value) -> Value:
    return make_node("mul", [a, b], {})


@register
class Erf(_Unary):
    """``erf(input)``: the error function, by ``math.erf`` in float64, rounded once."""

    name = "erf"
    transcendental = True
    nan_from = ("input",)

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        return -1.0, 1.0

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [transcendental(x, erf64)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = (c * exp(-(X * X))) * dY, c = 2/sqrt(pi) in the dtype (PyTorch's order)."""
        (g,) = grads
        if g is None:
            return [None]
        x = node.inputs[0]
        c = scalar_const(2 / math.sqrt(math.pi), x.type.dtype)
        e = make_node("exp", [make_node("neg", [_mul(x, x)], {})], {})
        return [_mul(_mul(c, e), g)]


@register
class Sin(_Unary):
    """``sin(input)``: NumPy's float64 sine of the widened input, rounded once."""

    name = "sin"
    transcendental = True

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        return -1.0, 1.0

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [transcendental(x, np.sin)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = dY * cos(X)."""
        (g,) = grads
        if g is None:
            return [None]
        return [_mul(g, make_node("cos", [node.inputs[0]], {}))]


@register
class Cos(_Unary):
    """``cos(input)``: NumPy's float64 cosine of the widened input, rounded once."""

    name = "cos"
    transcendental = True

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        return -1.0, 1.0

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [transcendental(x, np.cos)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = dY * -sin(X)."""
        (g,) = grads
        if g is None:
            return [None]
        s = make_node("neg", [make_node("sin", [node.inputs[0]], {})], {})
        return [_mul(g, s)]


@register
class IsNan(_Unary):
    """``is_nan(input)``: true exactly where the element is NaN (a bool result)."""

    name = "is_nan"
    numerics = "exact"  # a predicate
    nan_from = ()  # bool

    def infer(self, c: Checker) -> list[TensorType]:
        _check_input(c)
        return [TensorType(DType.bool, c.t("input").shape)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(np.isnan(x))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """None: a bool result carries no gradient."""
        return [None]
