"""ReLU and clip with their gradients (SPEC.md §2, §3): bit-exact selections."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.common import CLIP_DTYPES, F, RELU_DTYPES
from gradc.ir.ops.registry import ELEMENTWISE, Attr, Checker, OpDef, make_node, register
from gradc.ir.types import DType, TensorType

CLIP_BOUNDS = (Attr("min", "scalar"), Attr("max", "scalar"))


def _dtype_max(dtype: DType) -> float:
    return float("inf") if dtype.is_float else int(np.iinfo(dtype.numpy).max)


def _zero(a: np.ndarray) -> np.ndarray:
    return np.zeros((), a.dtype)  # +0 of the array's dtype


@register
class Relu(OpDef):
    """``relu(input)``: x if x > 0 else +0 (NaN and -0 give +0)."""

    name = "relu"
    numerics = "exact"
    operands = ("input",)
    traits = ELEMENTWISE
    dtypes = RELU_DTYPES
    nan_from = ()  # NaN gives +0
    no_negative_zero = frozenset(F)  # x > 0 or +0

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        return 0, _dtype_max(dtype)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 1, 8)
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [np.where(x > 0, x, _zero(x))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = relu(x)  =>  dx = relu_grad(x, dy)."""
        (dy,) = grads
        return [None if dy is None else make_node("relu_grad", [node.inputs[0], dy], {})]


@register
class ReluGrad(OpDef):
    """``relu_grad(input, input_gradient)``: dy where x > 0, else +0."""

    name = "relu_grad"
    numerics = "exact"
    operands = ("input", "input_gradient")
    traits = ELEMENTWISE
    dtypes = RELU_DTYPES
    nan_from = ("input_gradient",)  # dy or +0

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 1, 8)
        c.same_dtype("input_gradient", "input")
        c.same_shape("input_gradient", "input")
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  dy: np.ndarray) -> list[np.ndarray]:
        return [np.where(x > 0, dy, _zero(dy))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dx = relu_grad(x, dy)  =>  d(dy) = relu_grad(x, g); x gets none (a step function)."""
        (g,) = grads
        return [None, None if g is None else make_node("relu_grad", [node.inputs[0], g], {})]


def _clip_bounds(c: Checker) -> None:
    d = c.t("input").dtype
    c.scalar("min", d)
    c.scalar("max", d)


def bounds(attrs: Mapping[str, Any], dtype: np.dtype) -> tuple[np.generic, np.generic]:
    """The clip bounds as NumPy scalars of the tensor's dtype."""
    t = np.dtype(dtype).type
    return t(attrs["min"]), t(attrs["max"])


@register
class Clip(OpDef):
    """``clip(input, min, max)``: max(min, min(x, max)); NaN gives max (min if min > max)."""

    name = "clip"
    numerics = "exact"
    operands = ("input",)
    attributes = CLIP_BOUNDS
    traits = ELEMENTWISE
    dtypes = CLIP_DTYPES
    nan_from = ()  # NaN gives a bound, and bounds are never NaN

    def value_range(self, attrs: Mapping[str, Any], dtype: DType) -> tuple[float, float]:
        mn, mx = attrs["min"], attrs["max"]
        return (mn, mx) if mn <= mx else (mn, mn)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 1, 8)
        _clip_bounds(c)
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        mn, mx = bounds(attrs, x.dtype)
        t = np.where(x > mx, mx, x)
        y = np.where(t < mn, mn, t)
        if x.dtype.kind == "f":
            y = np.where(x != x, mx if np.less_equal(mn, mx) else mn, y)
        return [y.astype(x.dtype, copy=False)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = clip(x, a, b)  =>  dx = clip_grad(x, dy, a, b)."""
        (dy,) = grads
        if dy is None:
            return [None]
        return [make_node("clip_grad", [node.inputs[0], dy], dict(node.attrs))]


@register
class ClipGrad(OpDef):
    """``clip_grad(input, input_gradient, min, max)``: 0 where x <= min or x >= max, else dy."""

    name = "clip_grad"
    numerics = "exact"
    operands = ("input", "input_gradient")
    attributes = CLIP_BOUNDS
    traits = ELEMENTWISE
    dtypes = CLIP_DTYPES
    nan_from = ("input_gradient",)  # dy or +0

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 1, 8)
        c.same_dtype("input_gradient", "input")
        c.same_shape("input_gradient", "input")
        _clip_bounds(c)
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  dy: np.ndarray) -> list[np.ndarray]:
        mn, mx = bounds(attrs, x.dtype)
        return [np.where((x <= mn) | (x >= mx), _zero(dy), dy)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dx = clip_grad(x, dy, a, b)  =>  d(dy) = clip_grad(x, g, a, b); x gets none."""
        (g,) = grads
        if g is None:
            return [None, None]
        return [None, make_node("clip_grad", [node.inputs[0], g], dict(node.attrs))]
