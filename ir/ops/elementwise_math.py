"""Element-wise math and activations (SPEC-training.md §16): div, exp, log, sqrt, pow, sigmoid,
tanh, leaky_relu. The selections (maximum, minimum, comparisons, where) are in
``elementwise_math_select``.

Numerics (§9.5): ``div``, ``sqrt`` and ``leaky_relu`` are one correctly rounded operation per
element (float16 computed in float32, rounded once). ``exp``, ``log``, ``pow``, ``sigmoid`` and
``tanh`` are transcendental: the reference evaluates them in float64 on the widened input and
rounds once to the dtype. Float attributes (``exponent``, ``alpha``) are float32 values (§9.3).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops import elementwise_math_select  # noqa: F401  (registers the selections)
from gradc.ir.ops.arith import unbroadcast
from gradc.ir.ops.common import F
from gradc.ir.ops.registry import (ELEMENTWISE, Attr, Checker, OpDef, make_node, register,
                                   show_value)
from gradc.ir.types import DType, TensorType
from gradc.ir.ops.elementwise_math_select import binary_infer

# -- shared pieces ------------------------------------------------------------------------------


def float32_attr(c: Checker, name: str, default: float | None) -> float:
    """A float scalar attribute rounded once to float32 and finite after rounding (§9.3)."""
    v = c.raw.get(name)
    if v is None:
        if default is None:
            c.fail(name, "a value (required argument)", "none")
        v = default
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
        c.fail(name, "a real number", show_value(v, repr))
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            f = float(np.float32(v))
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        c.fail(name, "a finite float32", f"{show_value(v)} (rounds to {f})")
    return c.keep(name, f)


def zeros_like_scalar(dtype: DType) -> Value:
    """A rank-0 +0 constant of ``dtype``."""
    return make_node("constant", [], {"value": np.zeros((), dtype.numpy)})


def scalar_const(v: float, dtype: DType) -> Value:
    """A rank-0 constant ``v`` rounded once to ``dtype`` (§9.3, §9.7)."""
    with np.errstate(over="ignore"):  # a float16 constant beyond 65504 is inf (§9.3), silently
        value = np.array(v, dtype=np.float64).astype(dtype.numpy)
    return make_node("constant", [], {"value": value})


def transcendental(x: np.ndarray, fn: Any) -> np.ndarray:
    """``fn`` evaluated in float64 on the widened input, rounded once to x's dtype."""
    with np.errstate(all="ignore"):
        return np.asarray(fn(x.astype(np.float64))).astype(x.dtype)


class _Unary(OpDef):
    """A float element-wise op of one operand: dtype float64/32/16, rank 0..8."""

    operands = ("input",)
    traits = ELEMENTWISE
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 0, 8)
        return [c.t("input")]


def _mul(a: Value, b: Value) -> Value:
    return make_node("mul", [a, b], {})


# -- div ----------------------------------------------------------------------------------------

@register
class Div(OpDef):
    """``div(lhs, rhs)``: IEEE division with broadcasting (x/0 = +-inf, 0/0 = NaN); floats only."""

    name = "div"
    numerics = "exact"
    operands = ("lhs", "rhs")
    traits = ELEMENTWISE
    dtypes = F
    promote_scalars = True

    def infer(self, c: Checker) -> list[TensorType]:
        return binary_infer(c, self.dtypes)

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            if a.dtype == np.float16:  # widened exactly, divided in float32, rounded once
                return [np.asarray(np.divide(a.astype(np.float32), b.astype(np.float32)))
                        .astype(np.float16)]
            return [np.asarray(np.divide(a, b))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dlhs = unbroadcast(dY / rhs), drhs = unbroadcast(-(dY * (Y / rhs)))."""
        (g,) = grads
        if g is None:
            return [None, None]
        a, b = node.inputs
        y = node.outputs[0]
        da = make_node("div", [g, b], {})
        db = make_node("neg", [_mul(g, make_node("div", [y, b], {}))], {})
        return [unbroadcast(da, a.type.shape), unbroadcast(db, b.type.shape)]


# -- exp, log, sqrt, pow ------------------------------------------------------------------------

@register
class Exp(_Unary):
    """``exp(input)``: e**x, evaluated in float64 and rounded once."""

    name = "exp"
    transcendental = True
    nan_from = ("input",)
    no_negative_zero = frozenset(F)

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        return 0.0, math.inf

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [transcendental(x, np.exp)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = dY * Y."""
        (g,) = grads
        return [None if g is None else _mul(g, node.outputs[0])]


@register
class Log(_Unary):
    """``log(input)``: natural logarithm (log 0 = -inf, log of x < 0 = NaN), in float64."""

    name = "log"
    transcendental = True
    no_negative_zero = frozenset(F)  # 0 only at x = 1, as +0; NaNs come out quiet

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [transcendental(x, np.log)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = dY / X."""
        (g,) = grads
        return [None if g is None else make_node("div", [g, node.inputs[0]], {})]


@register
class Sqrt(_Unary):
    """``sqrt(input)``: correctly rounded square root (sqrt(-0) = -0, x < 0 gives NaN)."""

    name = "sqrt"
    numerics = "exact"

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        return 0.0, math.inf

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            if x.dtype == np.float16:
                return [np.asarray(np.sqrt(x.astype(np.float32))).astype(np.float16)]
            return [np.asarray(np.sqrt(x))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = dY / (2 * Y)."""
        (g,) = grads
        if g is None:
            return [None]
        y = node.outputs[0]
        return [make_node("div", [g, _mul(scalar_const(2.0, y.type.dtype), y)], {})]


@register
class Pow(_Unary):
    """``pow(input, exponent)``: C's pow with a float32 scalar exponent, in float64."""

    name = "pow"
    transcendental = True
    attributes = (Attr("exponent", "scalar"),)

    def infer(self, c: Checker) -> list[TensorType]:
        out = super().infer(c)
        float32_attr(c, "exponent", None)
        return out

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        x64 = np.asarray(x, np.float64)
        e = np.float64(attrs["exponent"])
        with np.errstate(all="ignore"):
            y = np.asarray(np.power(x64, e))
            if e == 0.5:
                # NumPy takes sqrt for a scalar 0.5; pow is C's pow: +0 at -0, +inf at -inf
                y = np.where(x64 == 0, 0.0, np.where(x64 == -np.inf, np.inf, y))
            return [np.asarray(y.astype(x.dtype))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = dY * (exponent * pow(X, exponent - 1)); exponent 0: zeros shaped like X."""
        (g,) = grads
        if g is None:
            return [None]
        x = node.inputs[0]
        t = x.type.dtype
        e = float(node.attrs["exponent"])
        if e == 0:
            return [make_node("expand", [zeros_like_scalar(t), x], {})]
        e1 = float(np.float32(np.float64(e) - 1.0))  # rounded once to float32
        p = make_node("pow", [x], {"exponent": e1})
        return [_mul(g, _mul(scalar_const(e, t), p))]


# -- sigmoid, tanh, leaky_relu ------------------------------------------------------------------

@register
class Sigmoid(_Unary):
    """``sigmoid(input)``: 1 / (1 + exp(-x)), evaluated in float64 and rounded once."""

    name = "sigmoid"
    transcendental = True
    nan_from = ("input",)
    no_negative_zero = frozenset(F)

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        return 0.0, 1.0

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            w = x.astype(np.float64)
            return [np.asarray(1.0 / (1.0 + np.exp(-w))).astype(x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = (dY * (1 - Y)) * Y (PyTorch's sigmoid_backward order)."""
        (g,) = grads
        if g is None:
            return [None]
        y = node.outputs[0]
        one_minus = make_node("sub", [scalar_const(1.0, y.type.dtype), y], {})
        return [_mul(_mul(g, one_minus), y)]


@register
class Tanh(_Unary):
    """``tanh(input)``: hyperbolic tangent, evaluated in float64 and rounded once."""

    name = "tanh"
    transcendental = True
    nan_from = ("input",)

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        return -1.0, 1.0

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [transcendental(x, np.tanh)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = dY * (1 - Y * Y)."""
        (g,) = grads
        if g is None:
            return [None]
        y = node.outputs[0]
        one_minus = make_node("sub", [scalar_const(1.0, y.type.dtype), _mul(y, y)], {})
        return [_mul(g, one_minus)]


@register
class LeakyRelu(_Unary):
    """``leaky_relu(input, alpha=0.01)``: x if x >= 0 else alpha * x (-0 stays -0)."""

    name = "leaky_relu"
    numerics = "exact"
    attributes = (Attr("alpha", "scalar", 0.01),)

    def infer(self, c: Checker) -> list[TensorType]:
        out = super().infer(c)
        float32_attr(c, "alpha", 0.01)
        return out

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        w = np.float32 if x.dtype == np.float16 else x.dtype
        xs = x.astype(w)
        with np.errstate(all="ignore"):
            scaled = np.multiply(xs, np.asarray(attrs["alpha"], dtype=w)).astype(x.dtype)
        return [np.where(x >= 0, x, scaled)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = where(X > 0, dY, dY * alpha); float16 multiplies in float32 (cast, mul, cast)."""
        (g,) = grads
        if g is None:
            return [None]
        x = node.inputs[0]
        t = x.type.dtype
        alpha = float(node.attrs["alpha"])
        if t == DType.float16:
            wide = make_node("cast", [g], {"dtype": DType.float32})
            scaled = make_node("cast", [_mul(wide, scalar_const(alpha, DType.float32))],
                               {"dtype": t})
        else:
            scaled = _mul(g, scalar_const(alpha, t))
        positive = make_node("greater", [x, zeros_like_scalar(t)], {})
        return [make_node("where", [positive, g, scaled], {})]
