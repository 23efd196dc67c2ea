"""Average pooling and its gradient (SPEC-training.md §13).

Canonical orders: a window sums its taps inside the input in row-major tap order from +0 in
``ACC``, then divides once by its count; the gradient adds ``dY/count`` (rounded) to each tap's
input position in increasing order of dY's index. Both references work one tap at a time on
whole strided slices: tap ``k`` of every window is one slice of the input (``tap_outputs``), so
the forward adds taps in row-major order; the gradient visits the taps in reversed row-major
order, because for one input position a larger tap means an earlier window, so each position
receives its terms in increasing window order. Adding nothing where a tap lies in the padding
equals adding +0 (a sum from +0 is never -0), so every element gets exactly §13's sum.
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.common import F, acc_dtype, rounded
from gradc.ir.ops.pooling import WINDOW, _pool_arrays, floor_sizes, tap_outputs, window_taps
from gradc.ir.ops.registry import (
    DERIVED, PURE, Attr, Checker, OpDef, fmt_shape, make_node, register,
)
from gradc.ir.types import TensorType

FIELDS = ("window_size", "strides", "start_padding", "end_padding", "dilations",
          "include_padding")


def _check_sizes(c: Checker, spatial: Sequence[int], out: Sequence[int],
                 p: Mapping[str, Sequence[int]], field: str, per_axis: bool) -> None:
    for i, (o, f) in enumerate(zip(out, floor_sizes(spatial, p))):
        if not 1 <= o <= f + 1:
            if per_axis:
                c.fail(f"{field}[{i}]", f"an integer in 1..{f + 1} (floor size + 1)", o)
            c.fail(field, f"1..{f + 1} on spatial axis {i} (floor size + 1)", o)


@register
class AveragePooling(OpDef):
    """``average_pooling(input, window_size, ..., include_padding=False, output_sizes=None)``:
    window means, the divisor counting the taps inside (or inside the padded extent)."""

    name = "average_pooling"
    numerics = "summing"
    operands = ("input",)
    attributes = WINDOW + (Attr("include_padding", "bool", False),
                           Attr("output_sizes", "ints", DERIVED))
    traits = PURE
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("input", 4, 5)
        c.dtype_in("input", self.dtypes)
        spatial = c.static_dims("input", range(2, rank))
        p = _pool_arrays(c, rank - 2)
        floor = floor_sizes(spatial, p)
        out = c.ints("output_sizes", rank - 2, lo=1, default=tuple(floor))
        _check_sizes(c, spatial, out, p, "output_sizes", True)
        c.boolean("include_padding")
        t = c.t("input")
        return [TensorType(t.dtype, t.shape[:2] + out)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [average_pooling_reference(x, attrs, attrs["output_sizes"])]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = average_pooling_grad(dY, X.shape, same fields) (§13.1)."""
        dy = grads[0]
        if dy is None:
            return [None]
        f = {k: node.attrs[k] for k in FIELDS}
        return [make_node("average_pooling_grad", [dy],
                          {"output_sizes": node.inputs[0].type.shape, **f})]


@register
class AveragePoolingGrad(OpDef):
    """``average_pooling_grad(input_gradient, output_sizes, window_size, ...)``: each window's
    ``dY/count`` added to its taps' input positions, in increasing order of dY's index."""

    name = "average_pooling_grad"
    numerics = "summing"
    operands = ("input_gradient",)
    attributes = (Attr("output_sizes", "dims"),) + WINDOW + (
        Attr("include_padding", "bool", False),)
    traits = PURE
    dtypes = F
    no_negative_zero = frozenset({F[0], F[1]})

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("input_gradient", 4, 5)
        c.dtype_in("input_gradient", self.dtypes)
        dy = c.t("input_gradient")
        sizes = c.dims("output_sizes")
        if len(sizes) != rank:
            c.fail("output_sizes", f"{rank} values (the rank of input_gradient)",
                   fmt_shape(sizes))
        if tuple(sizes[:2]) != tuple(dy.shape[:2]):
            c.fail("output_sizes", f"N, C = {dy.shape[0]}, {dy.shape[1]} (as input_gradient)",
                   fmt_shape(sizes))
        for i, v in enumerate(sizes[2:]):
            if isinstance(v, str) or v < 1:
                c.fail(f"output_sizes[{i + 2}]", "an integer >= 1", v)
        spatial = tuple(int(v) for v in sizes[2:])
        p = _pool_arrays(c, rank - 2)
        c.boolean("include_padding")
        dy_spatial = c.static_dims("input_gradient", range(2, rank))
        _check_sizes(c, spatial, dy_spatial, p, "input_gradient.shape", False)
        return [TensorType(dy.dtype, tuple(sizes))]

    def reference(self, attrs: Mapping[str, Any], dy: np.ndarray) -> list[np.ndarray]:
        return [average_pooling_grad_reference(dy, attrs, attrs["output_sizes"][2:])]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """d(input_gradient) = average_pooling(g, same fields, output_sizes=dY's spatial)."""
        g = grads[0]
        if g is None:
            return [None]
        f = {k: node.attrs[k] for k in FIELDS}
        out = tuple(node.inputs[0].type.shape[2:])
        return [make_node("average_pooling", [g], {**f, "output_sizes": out})]


def axis_counts(n: int, out: int, w: int, s: int, sp: int, ep: int, d: int,
                include_padding: bool) -> list[int]:
    """Per output coordinate of one axis: the taps inside ``[0, n)`` (or the padded extent)."""
    lo, hi = (-sp, n + ep) if include_padding else (0, n)
    counts = []
    for o in range(out):
        t = o * s - sp
        k0 = max(0, -((t - lo) // d))  # ceil((lo - t) / d)
        k1 = min(w - 1, (hi - 1 - t) // d)
        counts.append(max(0, k1 - k0 + 1))
    return counts


def window_counts(spatial: Sequence[int], out: Sequence[int], attrs: Mapping[str, Any],
                  dtype: type[np.floating]) -> np.ndarray:
    """Each window's divisor, exact, rounded once to ``dtype``; shape ``(1, 1, *out)``."""
    w, s, sp, ep, d = (attrs[k] for k in (
        "window_size", "strides", "start_padding", "end_padding", "dilations"))
    per = [axis_counts(spatial[i], out[i], w[i], s[i], sp[i], ep[i], d[i],
                       attrs["include_padding"]) for i in range(len(out))]
    if np.prod([float(max(c)) for c in per]) < 2.0 ** 53:  # exact in float64
        total = np.ones((), np.float64)
        for c in per:
            total = np.multiply.outer(total, np.array(c, np.float64))
    else:
        total = np.ones((), object)
        for c in per:
            total = np.multiply.outer(total, np.array(c, object))
    return total.astype(dtype).reshape((1, 1) + tuple(out))


def _tap_slices(k: Sequence[int], spatial: Sequence[int], out: Sequence[int],
                attrs: Mapping[str, Any]) -> tuple[tuple[slice, ...], tuple[slice, ...]] | None:
    """(output slices, input slices) of tap ``k`` over every window it lands inside."""
    dst, src = [slice(None)] * 2, [slice(None)] * 2
    for i in range(len(k)):
        s, sp, d = (attrs[f][i] for f in ("strides", "start_padding", "dilations"))
        lo, hi = tap_outputs(k[i], spatial[i], out[i], s, sp, d)
        if lo > hi:
            return None
        first = lo * s - sp + k[i] * d
        dst.append(slice(lo, hi + 1))
        src.append(slice(first, first + (hi - lo) * s + 1, s))
    return tuple(dst), tuple(src)


def _taps(spatial: Sequence[int], out: Sequence[int],
          attrs: Mapping[str, Any]) -> list[tuple[int, ...]]:
    """The taps reaching the input for some window, in row-major order."""
    per = []
    for i in range(len(out)):
        ks = window_taps(spatial[i], out[i], *(attrs[f][i] for f in (
            "window_size", "strides", "start_padding", "dilations")))
        assert ks is not None
        per.append(ks)
    return list(itertools.product(*per))


def average_pooling_reference(x: np.ndarray, attrs: Mapping[str, Any],
                              out: Sequence[int]) -> np.ndarray:
    """average_pooling: taps summed in row-major order from +0, then one division by the count."""
    a = acc_dtype(x.dtype)
    spatial = x.shape[2:]
    xa = x.astype(a)
    acc = np.zeros(x.shape[:2] + tuple(out), a)
    with np.errstate(all="ignore"):
        for k in _taps(spatial, out, attrs):
            sl = _tap_slices(k, spatial, out, attrs)
            if sl is not None:
                acc[sl[0]] += xa[sl[1]]
        count = window_counts(spatial, out, attrs, a)
        y = np.where(count > 0, acc / np.where(count > 0, count, a(1)), a(0))
    return rounded(y, x.dtype)


def average_pooling_grad_reference(dy: np.ndarray, attrs: Mapping[str, Any],
                                   spatial: Sequence[int]) -> np.ndarray:
    """average_pooling_grad: dY/count added to each tap's position, windows in increasing order."""
    a = acc_dtype(dy.dtype)
    out = dy.shape[2:]
    acc = np.zeros(dy.shape[:2] + tuple(spatial), a)
    with np.errstate(all="ignore"):
        count = window_counts(spatial, out, attrs, a)
        q = np.where(count > 0, dy.astype(a) / np.where(count > 0, count, a(1)), a(0))
        for k in reversed(_taps(spatial, out, attrs)):
            sl = _tap_slices(k, spatial, out, attrs)
            if sl is not None:
                acc[sl[1]] += q[sl[0]]
    return rounded(acc, dy.dtype)
