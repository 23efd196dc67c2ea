"""Operators of SPEC-training.md §14: reduce_mean, reduce_max/min, their gradients, element_count.

The reductions take ``reduce_sum``'s arguments (``axes=None``: every axis, ``()``: none; axes
stored normalized and sorted). The references group the input as ``(k, m)``: the reduced axes
moved first (so row ``r`` is the ``r``-th member in increasing logical index), the kept axes
flattened into the ``m`` groups.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.arith import broadcast_to
from gradc.ir.ops.common import F
from gradc.ir.ops.registry import DERIVED, Attr, Checker, OpDef, make_node, register
from gradc.ir.types import NUMERIC, DType, TensorType

REDUCE_ATTRS = (Attr("axes", "ints", DERIVED), Attr("keepdims", "bool", False))
COUNT_DTYPES = (DType.float64, DType.float32, DType.float16, DType.int64, DType.int32)


def check_axes(c: Checker, rank: int, allow_empty: bool = True) -> tuple[int, ...]:
    """§9.3: ``axes`` in -rank..rank-1, none twice; stored normalized and sorted."""
    axes = c.ints("axes", None, default=tuple(range(rank)))
    norm: list[int] = []
    for i, a in enumerate(axes):
        if not -rank <= a < rank:
            c.fail(f"axes[{i}]", f"an axis in -{rank}..{rank - 1}", a)
        if a % rank in norm:
            c.fail(f"axes[{i}]", "an axis not listed twice", a)
        norm.append(a % rank)
    if not allow_empty and not norm:
        c.fail("axes", "at least one axis", "()")
    return tuple(c.keep("axes", tuple(sorted(norm))))


def reduced_type(c: Checker, dtype: DType) -> TensorType:
    """The result type of a reduction of ``input`` with the checked ``axes`` and ``keepdims``."""
    axes = c.attrs["axes"]
    keep = c.boolean("keepdims")
    shape = c.t("input").shape
    out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
    return TensorType(dtype, out)


def group_rows(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """``x`` as ``(k, m)``: row r holds the r-th member (logical order) of every group."""
    kept = [i for i in range(x.ndim) if i not in axes]
    k = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return np.transpose(x, list(axes) + kept).reshape(k, -1)


def ungroup(rows: np.ndarray, shape: Sequence[int], axes: Sequence[int]) -> np.ndarray:
    """The inverse of ``group_rows``: a ``(k, m)`` array back to ``shape``."""
    kept = [i for i in range(len(shape)) if i not in axes]
    order = list(axes) + kept
    full = rows.reshape([shape[a] for a in order])
    return np.transpose(full, np.argsort(order))


def result_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    """The reduction's result shape."""
    return tuple(1 if i in axes else shape[i] for i in range(len(shape))
                 if keepdims or i not in axes)


def select_index(rows: np.ndarray, largest: bool) -> np.ndarray:
    """``select`` per column: the first extreme, NaN only when every element is NaN."""
    if rows.dtype.kind != "f":
        return np.argmax(rows, axis=0) if largest else np.argmin(rows, axis=0)
    nan = np.isnan(rows)
    bad = rows.dtype.type(-np.inf if largest else np.inf)
    key = np.where(nan, bad, rows)
    idx = np.argmax(key, axis=0) if largest else np.argmin(key, axis=0)
    best = np.take_along_axis(key, idx[None, :], axis=0)[0]
    first_number = np.argmax(~nan, axis=0)  # 0 when every element is NaN
    return np.where(best == bad, first_number, idx)


def reduce_extreme(x: np.ndarray, axes: Sequence[int], keepdims: bool,
                   largest: bool) -> np.ndarray:
    """The selected element of every group, copied."""
    rows = group_rows(x, axes)
    idx = select_index(rows, largest)
    y = np.take_along_axis(rows, idx[None, :], axis=0)[0]
    return y.reshape(result_shape(x.shape, axes, keepdims))


def reduce_extreme_grad(x: np.ndarray, dy: np.ndarray, axes: Sequence[int],
                        largest: bool) -> np.ndarray:
    """``dy`` stored at each group's selected element, +0 elsewhere."""
    rows = group_rows(x, axes)
    idx = select_index(rows, largest)
    out = np.zeros(rows.shape, dy.dtype)
    out[idx, np.arange(rows.shape[1])] = dy.reshape(-1)
    return np.array(ungroup(out, x.shape, axes), order="C")  # (ascontiguousarray: 0-d -> 1-d)


def _kshape(x: Value, axes: Sequence[int]) -> tuple:
    return tuple(1 if i in axes else d for i, d in enumerate(x.type.shape))


def _ones_like(v: Value) -> Value:
    """Ones of ``v``'s dtype and shape (symbolic dims included)."""
    one = make_node("constant", [], {"value": np.ones((1,) * v.type.rank, v.type.dtype.numpy)})
    return broadcast_to(one, v)


@register
class ReduceMean(OpDef):
    """``reduce_mean(input, axes=None, keepdims=False)``: canonical sum divided once by n."""

    name = "reduce_mean"
    numerics = "summing"
    operands = ("input",)
    attributes = REDUCE_ATTRS
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        dt = c.dtype_in("input", self.dtypes)
        check_axes(c, c.rank_in("input", 0, 8))
        return [reduced_type(c, dt)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        axes = attrs["axes"]
        acc = np.float64 if x.dtype == np.float64 else np.float32
        rows = group_rows(x, axes)
        with np.errstate(all="ignore"):
            total = np.cumsum(rows, axis=0, dtype=acc)[-1]  # sequential: canonical order
            y = (total / acc(rows.shape[0])).astype(x.dtype)
        return [y.reshape(result_shape(x.shape, axes, attrs["keepdims"]))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = expand(div(reshape(dY, kshape), element_count(X, axes, X.dtype)), X)."""
        (g,) = grads
        if g is None:
            return [None]
        x, axes = node.inputs[0], node.attrs["axes"]
        kshape = _kshape(x, axes)
        if g.type.shape != kshape:
            g = make_node("reshape", [g], {"shape": kshape})
        n = make_node("element_count", [x], {"axes": axes, "dtype": x.type.dtype})
        return [broadcast_to(make_node("div", [g, n], {}), x)]


class _Extreme(OpDef):
    operands = ("input",)
    attributes = REDUCE_ATTRS
    dtypes = NUMERIC
    largest = True
    grad_op = ""
    nan_from = ("input",)

    def infer(self, c: Checker) -> list[TensorType]:
        dt = c.dtype_in("input", self.dtypes)
        check_axes(c, c.rank_in("input", 0, 8))
        return [reduced_type(c, dt)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = reduce_max_grad(X, dY, axes, keepdims) (reduce_min_grad for reduce_min)."""
        (g,) = grads
        if g is None:
            return [None]
        return [make_node(self.grad_op, [node.inputs[0], g], dict(node.attrs))]


@register
class ReduceMax(_Extreme):
    """``reduce_max(input, axes=None, keepdims=False)``: the first maximum, NaN-ignoring."""

    name = "reduce_max"
    numerics = "exact"
    grad_op = "reduce_max_grad"

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [reduce_extreme(x, attrs["axes"], attrs["keepdims"], True)]


@register
class ReduceMin(_Extreme):
    """``reduce_min(input, axes=None, keepdims=False)``: the first minimum, NaN-ignoring."""

    name = "reduce_min"
    numerics = "exact"
    largest = False
    grad_op = "reduce_min_grad"

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [reduce_extreme(x, attrs["axes"], attrs["keepdims"], False)]


class _ExtremeGrad(OpDef):
    operands = ("input", "input_gradient")
    attributes = REDUCE_ATTRS
    dtypes = F
    forward = ""

    def infer(self, c: Checker) -> list[TensorType]:
        dt = c.dtype_in("input", self.dtypes)
        rank = c.rank_in("input", 0, 8)
        c.same_dtype("input_gradient", "input")
        check_axes(c, rank)
        want = reduced_type(c, dt).shape
        if c.t("input_gradient").shape != want:
            c.fail("input_gradient.shape", f"the forward result's shape {want}",
                   c.t("input_gradient").shape)
        return [TensorType(dt, c.t("input").shape)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """d(dY) = reduce_sum(mul(g, <0/1 mask of the selected elements>), axes, keepdims)."""
        (g,) = grads
        if g is None:
            return [None, None]
        x, axes = node.inputs[0], node.attrs["axes"]
        kshape = _kshape(x, axes)
        ones = _ones_like(make_node("reshape", [node.inputs[1]], {"shape": kshape}))
        mask = make_node(self.name, [x, ones], {"axes": axes, "keepdims": True})
        picked = make_node("mul", [g, mask], {})
        return [None, make_node("reduce_sum", [picked],
                                {"axes": axes, "keepdims": node.attrs["keepdims"]})]


@register
class ReduceMaxGrad(_ExtremeGrad):
    """``reduce_max_grad(input, input_gradient, axes, keepdims)``: dY at each first maximum."""

    name = "reduce_max_grad"
    numerics = "exact"

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  dy: np.ndarray) -> list[np.ndarray]:
        return [reduce_extreme_grad(x, dy, attrs["axes"], True)]


@register
class ReduceMinGrad(_ExtremeGrad):
    """``reduce_min_grad(input, input_gradient, axes, keepdims)``: dY at each first minimum."""

    name = "reduce_min_grad"
    numerics = "exact"

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  dy: np.ndarray) -> list[np.ndarray]:
        return [reduce_extreme_grad(x, dy, attrs["axes"], False)]


@register
class ElementCount(OpDef):
    """``element_count(input, axes=None, dtype="float32")``: the product of the sizes on axes."""

    name = "element_count"
    numerics = "exact"
    operands = ("input",)
    attributes = (Attr("axes", "ints", DERIVED), Attr("dtype", "dtype", "float32"))
    shape_operands = ("input",)
    dtypes = NUMERIC + (DType.bool,)
    nan_from = ()

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("input", 0, 8)
        check_axes(c, rank)
        dt = c.dtype_attr("dtype")
        if dt not in COUNT_DTYPES:
            c.fail("dtype", "float64, float32, float16, int64 or int32", dt.value)
        return [TensorType(dt, ())]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        n = 1
        for a in attrs["axes"]:
            n *= int(x.shape[a])
        dtype = np.dtype(getattr(attrs["dtype"], "value", attrs["dtype"]))
        with np.errstate(over="ignore"):  # float16 above 65504: inf
            return [np.asarray(n, np.int64).astype(dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """The values of ``input`` are not read: no gradient."""
        return [None]

