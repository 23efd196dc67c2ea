"""Max pooling and its gradient (SPEC.md §5): lowest-index ties, padding never a candidate."""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, Sequence

import numpy as np

from gradc.errors import UnsupportedError
from gradc.ir.core import Node, Value
from gradc.ir.ops.common import POOL_DTYPES, POOL_GRAD_DTYPES, acc_dtype, lowest
from gradc.ir.ops.registry import DERIVED, PURE, Attr, Checker, OpDef, PerAxis, make_node, register
from gradc.ir.types import DType, TensorType

WINDOW = (Attr("window_size", "ints"), Attr("strides", "ints", PerAxis(1)),
          Attr("start_padding", "ints", PerAxis(0)), Attr("end_padding", "ints", PerAxis(0)),
          Attr("dilations", "ints", PerAxis(1)))
POOL_FIELDS = tuple(a.name for a in WINDOW)


def pool_size(n: int, w: int, s: int, sp: int, ep: int, d: int) -> int:
    """The floor output size of one spatial axis, dilation-aware (SPEC.md §5.1)."""
    return max(1, (n + sp + ep - ((w - 1) * d + 1)) // s + 1)


def _pool_arrays(c: Checker, nd: int) -> dict[str, tuple[int, ...]]:
    return {
        "window_size": c.ints("window_size", nd, lo=1),
        "strides": c.ints("strides", nd, lo=1),
        "start_padding": c.ints("start_padding", nd, lo=0),
        "end_padding": c.ints("end_padding", nd, lo=0),
        "dilations": c.ints("dilations", nd, lo=1),
    }


def floor_sizes(shape: Sequence[int], p: Mapping[str, Sequence[int]]) -> list[int]:
    """``pool_size`` of every spatial axis."""
    return [pool_size(n, *(p[k][i] for k in POOL_FIELDS)) for i, n in enumerate(shape)]


@register
class MaxPooling(OpDef):
    """``max_pooling(input, window_size, ...)``: window maxima (and their flat indices)."""

    name = "max_pooling"
    numerics = "exact"
    operands = ("input",)
    attributes = WINDOW + (Attr("output_indices", "bool", False),
                           Attr("output_sizes", "ints", DERIVED))
    traits = PURE
    dtypes = POOL_DTYPES

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("input", 4, 5)
        c.dtype_in("input", self.dtypes)
        spatial = c.static_dims("input", range(2, rank))
        p = _pool_arrays(c, rank - 2)
        with_indices = c.boolean("output_indices")
        floor = floor_sizes(spatial, p)
        out = c.ints("output_sizes", rank - 2, lo=1, default=tuple(floor))
        for i, (o, f) in enumerate(zip(out, floor)):
            if o > f + 1:
                c.fail(f"output_sizes[{i}]", f"an integer in 1..{f + 1} (floor size + 1)", o)
        t = c.t("input")
        y = TensorType(t.dtype, t.shape[:2] + out)
        return [y, TensorType(DType.int64, y.shape)] if with_indices else [y]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        best, index, found = window_argmax(x, attrs, attrs["output_sizes"])
        y = np.where(found, best, lowest(x.dtype))
        i = np.where(found, index, 0)
        return [y, i] if attrs["output_indices"] else [y]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = max_pooling(x, p)  =>  dx = max_pooling_grad(x, dy, p); indices get none."""
        dy = grads[0]
        if dy is None:
            return [None]
        return [make_node("max_pooling_grad", [node.inputs[0], dy],
                          {k: node.attrs[k] for k in POOL_FIELDS})]


@register
class MaxPoolingGrad(OpDef):
    """``max_pooling_grad(input, input_gradient, window_size, ...)``: dy summed at each argmax."""

    name = "max_pooling_grad"
    numerics = "summing"
    operands = ("input", "input_gradient")
    attributes = WINDOW
    traits = frozenset({"pure", "fusible"})
    anchor_operand = "input_gradient"
    dtypes = POOL_GRAD_DTYPES
    # Sums that start from +0 in the tensor's own dtype: in round-to-nearest a sum is -0 only
    # if both terms are -0, so they never hold -0.0; any NaN is an arithmetic result, hence
    # quiet. (float16 results are rounded from float32 and can round to -0.0.)
    no_negative_zero = frozenset({DType.float32, DType.float64})

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("input", 4, 5)
        c.dtype_in("input", self.dtypes)
        c.same_dtype("input_gradient", "input")
        if c.t("input_gradient").rank != rank:
            c.fail("input_gradient.rank", f"{rank} (same as input)", c.t("input_gradient").rank)
        x_spatial = c.static_dims("input", range(2, rank))
        dy_spatial = c.static_dims("input_gradient", range(2, rank))
        p = _pool_arrays(c, rank - 2)
        x, dy = c.t("input").shape, c.t("input_gradient").shape
        if dy[:2] != x[:2]:
            c.fail("input_gradient.shape", f"N, C = {x[0]}, {x[1]} (same as input)",
                   f"{dy[0]}, {dy[1]}")
        for i, f in enumerate(floor_sizes(x_spatial, p)):
            if not 1 <= dy_spatial[i] <= f + 1:
                c.fail("input_gradient.shape", f"1..{f + 1} on spatial axis {i} (floor size + 1)",
                       dy_spatial[i])
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  dy: np.ndarray) -> list[np.ndarray]:
        _, index, found = window_argmax(x, attrs, dy.shape[2:])
        acc = np.zeros(x.size, acc_dtype(x.dtype))
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN, f16 overflow inf
            # ufunc.at adds in the order of its index array: increasing logical index of dy.
            np.add.at(acc, index[found], dy[found].astype(acc.dtype))
            return [acc.reshape(x.shape).astype(x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dx = max_pooling_grad(x, dy) is linear in dy: its adjoint reads the cotangent at
        each window's argmax (``gather_at_argmax``); as a function of x it is piecewise
        constant (the argmax moves only at ties), so x gets no gradient."""
        g = grads[0]
        if g is None:
            return [None, None]
        x, dy = node.inputs
        return [None, gather_at_argmax(x, g, node.attrs, dy.type.shape[2:])]


MAX_GATHER_TAPS = 4096  # window taps the second-order gradient of max pooling writes out


def gather_at_argmax(x: Value, g: Value, attrs: Mapping[str, Any],
                     out: Sequence[Any]) -> Value:
    """``g`` (shaped like ``x``) at the argmax of each window of ``x``; +0 for a window without
    taps in the input: max_pooling_grad's adjoint, built from primitives.

    The argmax (``window_argmax``) is the first valid tap whose value equals the window's max
    ``y`` (``max_pooling``), or the first valid tap when ``y`` is NaN (then every valid tap is
    NaN). Visiting the taps from last to first and letting each matching tap overwrite the
    result leaves exactly that tap. Each tap is a strided ``slice`` of its valid output range
    (``tap_outputs``) padded to the output's shape, so no table is sized by a tensor.
    """
    p = {k: tuple(attrs[k]) for k in POOL_FIELDS}
    y = make_node("max_pooling", [x], {**p, "output_indices": False,
                                       "output_sizes": tuple(out)})
    y_nan = make_node("where", [make_node("equal", [y, y], {}), _const(False, x),
                                _const(True, x)], {})
    spatial = [int(n) for n in x.type.shape[2:]]
    # each axis's walk is bounded too (a window of 2**31 taps over 2**31 positions would list
    # them all before the product's count is known)
    per_axis = [window_taps(n, int(o), p["window_size"][i], p["strides"][i],
                            p["start_padding"][i], p["dilations"][i], limit=MAX_GATHER_TAPS)
                for i, (n, o) in enumerate(zip(spatial, out))]
    count = None if None in per_axis else math.prod(len(t) for t in per_axis)  # type: ignore
    if count is None or count > MAX_GATHER_TAPS:
        got = f"more than {MAX_GATHER_TAPS} along one axis" if count is None else str(count)
        raise UnsupportedError(f"grad: max_pooling_grad: window_size: expected at most "
                               f"{MAX_GATHER_TAPS} window taps reaching the input for its "
                               f"gradient, got {got}")
    taps = list(itertools.product(*per_axis))  # type: ignore[arg-type]
    acc: Value = _const(0, g)
    for k in reversed(taps):
        xs, pads = _tap(x, k, spatial, out, p)
        gs, _ = _tap(g, k, spatial, out, p)
        inside = None
        if pads is not None:  # positions whose window does not reach the input through k
            one = _const(1, x, DType.uint8)
            ones = make_node("pad", [make_node("expand", [one, xs], {})],
                             {**pads, "padding_value": 0})
            inside = make_node("equal", [ones, one], {})
            xs = make_node("pad", [xs], {**pads, "padding_value": 0})
            gs = make_node("pad", [gs], {**pads, "padding_value": 0})
        match = make_node("where", [make_node("equal", [xs, y], {}), _const(True, x), y_nan],
                          {})
        if inside is not None:
            match = make_node("where", [inside, match, _const(False, x)], {})
        acc = make_node("where", [match, gs, acc], {})
    if acc.type.shape != y.type.shape:  # no tap reaches the input: +0 everywhere
        acc = make_node("expand", [acc, y], {})
    return acc


def _const(v: Any, like: Value, dtype: DType | None = None) -> Value:
    """A rank-0 constant of ``like``'s graph (``like``'s dtype for a number, else bool)."""
    dt = dtype or (DType.bool if isinstance(v, bool) else like.type.dtype)
    return make_node("constant", [], {"value": np.array(v, dt.numpy)}, graph=like.graph)


def _tap(v: Value, k: Sequence[int], spatial: Sequence[int], out: Sequence[Any],
         p: Mapping[str, Sequence[int]]) -> tuple[Value, dict[str, Any] | None]:
    """Tap ``k`` of every window of ``v`` over its valid output range, and the paddings that
    bring it to the output's shape (None when it covers every output position)."""
    shape = v.type.shape
    offsets, sizes, strides = [0, 0], [shape[0], shape[1]], [1, 1]
    start, end = [0, 0], [0, 0]
    for i, n in enumerate(spatial):
        s, sp, d = p["strides"][i], p["start_padding"][i], p["dilations"][i]
        lo, hi = tap_outputs(k[i], n, int(out[i]), s, sp, d)
        offsets.append(lo * s - sp + k[i] * d)
        sizes.append((hi - lo) * s + 1)
        strides.append(s)
        start.append(lo)
        end.append(int(out[i]) - 1 - hi)
    t = make_node("slice", [v], {"input_window_offsets": tuple(offsets),
                                 "input_window_sizes": tuple(sizes),
                                 "input_window_strides": tuple(strides)})
    pads = None if not any(start) and not any(end) else {
        "start_padding": tuple(start), "end_padding": tuple(end)}
    return t, pads


def tap_outputs(k: int, n: int, out: int, s: int, sp: int, d: int) -> tuple[int, int]:
    """The output coordinates ``lo..hi`` of one spatial axis whose window tap ``k`` lands inside
    the input (``0 <= o*s - sp + k*d < n``); empty when ``lo > hi``.

    They are contiguous (positions grow with ``o``), and on them the tap's position is
    ``o*s - sp + k*d = (o - lo)*s + first``, ``first`` being the position at ``lo``: a number in
    ``0..n-1``. Exact Python ints: no attribute magnitude can overflow anything.
    """
    c = k * d - sp
    return max(0, -(c // s)), min(out - 1, (n - 1 - c) // s)


def window_taps(n: int, out: int, w: int, s: int, sp: int, d: int,
                limit: int | None = None) -> list[int] | None:
    """The taps ``0 <= k < w`` of one spatial axis (increasing) that land inside the input for
    at least one output coordinate ``0 <= o < out``.

    Only they can be candidates (padding never is), so a window visits them alone
    and the work is bounded by the tensors' sizes whatever the attributes (a window of 2**40
    taps over an 8-element axis has at most 8 that matter). The search walks the candidate taps
    or the output coordinates, whichever are fewer; with ``limit`` (a compile-time budget) it
    returns None as soon as that walk or its result would exceed ``limit``.
    """
    k_lo = max(0, -(((out - 1) * s - sp) // d))  # ceil((sp - (out-1)*s) / d): o = out-1
    k_hi = min(w - 1, (sp + n - 1) // d)  # o = 0
    if k_hi < k_lo:
        return []
    if limit is not None and min(k_hi - k_lo + 1, out) > limit:
        return None
    ks: list[int] = []
    if k_hi - k_lo < out:
        for k in range(k_lo, k_hi + 1):
            lo, hi = tap_outputs(k, n, out, s, sp, d)
            if lo <= hi:
                ks.append(k)
        return ks
    for o in range(out - 1, -1, -1):  # the taps of o: an interval, moving right as o falls
        t = o * s - sp
        lo = max(k_lo, -(t // d))
        hi = min(k_hi, (n - 1 - t) // d)
        if ks:
            lo = max(lo, ks[-1] + 1)
        if limit is not None and len(ks) + max(0, hi + 1 - lo) > limit:
            return None
        ks.extend(range(lo, hi + 1))
    return ks


def window_argmax(x: np.ndarray, p: Mapping[str, Sequence[int]],
                  out: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window: (best value, flat index, whether any input element was a candidate).

    Taps are visited in window order (increasing logical index); a tap replaces the best so far
    only if it is not NaN and the best is NaN or smaller, so ties keep the lowest index. Taps
    that land in the padding for every window are skipped (``window_taps``), and positions are
    computed from each tap's valid output range (``tap_outputs``), never as ``o*s + k*d`` in
    int64, so huge windows, strides, paddings and dilations cost nothing and cannot overflow.
    """
    spatial = x.shape[2:]
    shape = x.shape[:2] + tuple(out)
    best = np.zeros(shape, x.dtype)
    index = np.zeros(shape, np.int64)
    found = np.zeros(shape, bool)
    nd = len(spatial)
    w, s, sp, d = (p[f] for f in ("window_size", "strides", "start_padding", "dilations"))
    el_strides = [1] * nd
    for a in range(nd - 2, -1, -1):
        el_strides[a] = el_strides[a + 1] * spatial[a + 1]
    base = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64)
            * (el_strides[0] * spatial[0])).reshape(x.shape[:2] + (1,) * nd)
    grid = [np.arange(n, dtype=np.int64) for n in out]
    taps = []
    for a in range(nd):
        ks = window_taps(spatial[a], out[a], w[a], s[a], sp[a], d[a])
        assert ks is not None  # no limit: always a list
        taps.append(ks)
    for k in itertools.product(*taps):
        pos, ok = [], []
        for a in range(nd):
            lo, hi = tap_outputs(k[a], spatial[a], out[a], s[a], sp[a], d[a])
            first = lo * s[a] - sp[a] + k[a] * d[a]  # in 0..spatial[a]-1
            pos.append((np.clip(grid[a], lo, hi) - lo) * s[a] + first)  # (hi-lo)*s < spatial
            ok.append((grid[a] >= lo) & (grid[a] <= hi))
        v = x[(slice(None), slice(None)) + np.ix_(*pos)]
        valid = np.ones((1, 1) + (1,) * nd, bool)
        flat = base
        for a, (q, m) in enumerate(zip(pos, ok)):
            bshape = (1, 1) + tuple(-1 if b == a else 1 for b in range(nd))
            valid = valid & m.reshape(bshape)
            flat = flat + (q * el_strides[a]).reshape(bshape)
        with np.errstate(invalid="ignore"):
            better = (v == v) & ((best != best) | (v > best))
        take = valid & (~found | better)
        best = np.where(take, v, best)
        index = np.where(take, flat, index)
        found |= valid
    return best, index, found
