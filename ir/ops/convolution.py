"""Convolution and its filter gradient (SPEC-training.md §10), in both directions.

The references follow §10's canonical order of summation exactly while working on whole arrays:

- ``convolution``, forward direction: each output element sums its products input channel by
  input channel, then filter tap by tap in row-major order. The loops run in that order over
  (channel in the group, tap), and each step adds one product to every output element that the
  tap reaches (a box of outputs, ``tap_outputs``), so every element sees its terms in order.
- ``convolution``, backward direction: the terms of an output element are ordered by input
  position (row-major). Along each axis a larger input position pairs with a smaller tap, so
  visiting the taps in reversed row-major order visits each element's terms in input-position
  order; each step scatters into a strided box of outputs (one term per element per step).
- ``convolution_filter_grad``: each filter element sums over batch, then positions (row-major)
  of the tensor whose positions are iterated (dY forward, X backward). Per tap, the products
  of all filter elements are made for a block of positions at once, then added to the running
  sums one position at a time (each addition a whole-array ``np.add``).

Terms outside the input (padding) are skipped, not multiplied by 0 (an inf filter value would
make 0 * inf = NaN). Products and sums are rounded in ``ACC`` (float32 for float16 data) and the
result is rounded once to the dtype, after the bias.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.common import F, acc_dtype
from gradc.ir.ops.pooling import tap_outputs
from gradc.ir.ops.registry import PURE, Attr, Checker, OpDef, PerAxis, make_node, register
from gradc.ir.types import Dim, TensorType

CONV_DTYPES = F
MODES = ("cross_correlation", "convolution")
DIRECTIONS = ("forward", "backward")
FIELDS = (Attr("mode", "choice", "cross_correlation", MODES),
          Attr("direction", "choice", "forward", DIRECTIONS),
          Attr("strides", "ints", PerAxis(1)), Attr("dilations", "ints", PerAxis(1)),
          Attr("start_padding", "ints", PerAxis(0)), Attr("end_padding", "ints", PerAxis(0)),
          Attr("output_padding", "ints", PerAxis(0)), Attr("group_count", "scalar", 1))
FIELD_NAMES = tuple(a.name for a in FIELDS)


def conv_out_size(n: int, k: int, s: int, d: int, sp: int, ep: int, op: int,
                  direction: str) -> int:
    """The output size of one spatial axis: forward, how many strides the dilated window fits;
    backward, the size whose forward output is ``n`` (plus ``op``)."""
    ext = (k - 1) * d + 1
    if direction == "forward":
        return (n + sp + ep - ext) // s + 1
    return (n - 1) * s + ext - sp - ep + op


# -- checks ----------------------------------------------------------------------------------

def _fields(c: Checker, nd: int) -> dict[str, Any]:
    """Items 4 and 5 of §10.1: mode, direction, the five arrays and group_count."""
    p: dict[str, Any] = {"mode": c.choice("mode"), "direction": c.choice("direction")}
    for name, lo in (("strides", 1), ("dilations", 1), ("start_padding", 0),
                     ("end_padding", 0), ("output_padding", 0)):
        p[name] = c.ints(name, nd, lo=lo)
    g = c.raw.get("group_count")
    g = 1 if g is None else g
    if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)) or g < 1:
        c.fail("group_count", "an integer >= 1", g)
    p["group_count"] = c.keep("group_count", int(g))
    return p


def _sizes(c: Checker, spatial: Sequence[int], k: Sequence[int], p: Mapping[str, Any]
           ) -> tuple[int, ...]:
    """Item 10 of §10.1, then the output's spatial sizes."""
    fwd = p["direction"] == "forward"
    s, d, sp, ep, op = (p[f] for f in ("strides", "dilations", "start_padding", "end_padding",
                                       "output_padding"))
    for i, o in enumerate(op):
        if fwd and o != 0:
            c.fail(f"output_padding[{i}]", "0 (the forward direction takes no output padding)", o)
        if not fwd and o >= max(s[i], d[i]):
            c.fail(f"output_padding[{i}]", f"an integer < max(strides[{i}], dilations[{i}]) = "
                   f"{max(s[i], d[i])}", o)
    out = []
    for i, n in enumerate(spatial):
        ext = (k[i] - 1) * d[i] + 1
        if fwd and n + sp[i] + ep[i] < ext:
            c.fail("input.shape", f"spatial axis {i} of at least {ext} with the padding (the "
                   f"dilated filter), {sp[i] + ep[i]} padding", n)
        size = conv_out_size(n, k[i], s[i], d[i], sp[i], ep[i], op[i], p["direction"])
        if size < 1:
            c.fail(f"end_padding[{i}]", f"a padding that leaves an output size >= 1 (it gives "
                   f"{size})", ep[i])
        out.append(size)
    return tuple(out)


def _head(c: Checker, second: str) -> int:
    """Items 1 and 2: the input's rank and dtype, the second tensor's dtype and rank."""
    rank = c.rank_in("input", 3, 5)
    c.dtype_in("input", CONV_DTYPES)
    c.same_dtype(second, "input")
    if c.t(second).rank != rank:
        c.fail(f"{second}.rank", f"{rank} (same as input)", c.t(second).rank)
    return rank


def _channels(c: Checker, rank: int, g: int, filter_dims: bool) -> tuple[int, ...]:
    """Items 6 and 7: static input dims after the batch (and filter dims); channels divisible
    by group_count."""
    dims = c.static_dims("input", range(1, rank))
    if filter_dims:
        c.static_dims("filter", range(rank))
    if dims[0] % g:
        c.fail("group_count", f"a divisor of the input's {dims[0]} channels", g)
    return dims


@register
class Convolution(OpDef):
    """``convolution(input, filter, bias=None, mode, direction, strides, ...)``: N-d convolution
    (forward) or its transpose (backward), grouped, with an optional bias."""

    name = "convolution"
    numerics = "summing"
    operands = ("input", "filter", "bias")
    optional_operands = ("bias",)
    attributes = FIELDS
    traits = PURE
    dtypes = CONV_DTYPES

    def infer(self, c: Checker) -> list[TensorType]:
        rank = _head(c, "filter")
        has_bias = "bias" in c.types
        if has_bias:
            c.same_dtype("bias", "input")
            if c.t("bias").rank != rank:
                c.fail("bias.rank", f"{rank} (same as input)", c.t("bias").rank)
        p = _fields(c, rank - 2)
        g = p["group_count"]
        dims = _channels(c, rank, g, filter_dims=True)
        w = c.static_dims("filter", range(rank))
        if p["direction"] == "forward":
            if w[1] * g != dims[0] or w[0] % g:
                c.fail("filter.shape", f"(Co, {dims[0] // g}, ...) with Co divisible by "
                       f"{g} (input channels {dims[0]} / group_count {g})", w)
            co = w[0]
        else:
            if w[0] != dims[0]:
                c.fail("filter.shape", f"({dims[0]}, Co/{g}, ...) (the input's channels first)",
                       w)
            co = w[1] * g
        if has_bias:
            want: tuple[Dim, ...] = (1, co) + (1,) * (rank - 2)
            if c.t("bias").shape != want:
                c.fail("bias.shape", str(want), c.t("bias").shape)
        out = _sizes(c, dims[1:], w[2:], p)
        x = c.t("input")
        return [TensorType(x.dtype, (x.shape[0], co) + out)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray, w: np.ndarray,
                  b: np.ndarray | None = None) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        nd = x.ndim - 2
        xa, wa = x.astype(a), w.astype(a)
        if attrs["mode"] == "convolution":
            wa = wa[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]
        out = [conv_out_size(x.shape[2 + i], w.shape[2 + i], attrs["strides"][i],
                             attrs["dilations"][i], attrs["start_padding"][i],
                             attrs["end_padding"][i], attrs["output_padding"][i],
                             attrs["direction"]) for i in range(nd)]
        with np.errstate(all="ignore"):
            if attrs["direction"] == "forward":
                acc = conv_forward(xa, wa, attrs, out)
            else:
                acc = conv_backward(xa, wa, attrs, out)
            acc = acc.reshape((x.shape[0], -1) + tuple(out))
            if b is not None:
                acc = acc + b.astype(a)  # after the whole sum: one more rounding
            return [acc.astype(x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = convolution(x, w, b, f)  =>  dx = convolution(dy, w, f) in the other direction
        (output padding set so that dx has x's shape),
        dw = convolution_filter_grad(x, dy, w.shape, f), db = reduce_sum(dy, all but C)."""
        dy = grads[0]
        if dy is None:
            return [None] * len(node.inputs)
        x, w = node.inputs[0], node.inputs[1]
        f = {k: node.attrs[k] for k in FIELD_NAMES}
        dx = input_gradient(x, w, dy, f)
        dw = make_node("convolution_filter_grad", [x, dy],
                       {"output_sizes": w.type.shape, **f})
        if len(node.inputs) == 2:
            return [dx, dw]
        axes = (0,) + tuple(range(2, dy.type.rank))
        return [dx, dw, make_node("reduce_sum", [dy], {"axes": axes, "keepdims": True})]


def input_gradient(x: Value, w: Value, dy: Value, f: Mapping[str, Any]) -> Value:
    """§10.3: the gradient of ``convolution(x, w, f)``'s input for the cotangent ``dy``."""
    nd = x.type.rank - 2
    s, d, sp, ep, op = (f[k] for k in ("strides", "dilations", "start_padding", "end_padding",
                                        "output_padding"))
    k = w.type.shape[2:]
    spatial = x.type.shape[2:]
    if f["direction"] == "forward":
        op2 = tuple(int(spatial[i]) - ((int(dy.type.shape[2 + i]) - 1) * s[i]
                                       + (int(k[i]) - 1) * d[i] + 1 - sp[i] - ep[i])
                    for i in range(nd))
        return make_node("convolution", [dy, w], {**f, "direction": "backward",
                                                  "output_padding": op2})
    dx = make_node("convolution", [dy, w], {**f, "direction": "forward",
                                            "output_padding": (0,) * nd})
    if dx.type.shape[2:] != spatial:  # output_padding >= strides: positions past x's end
        shape = x.type.shape
        dx = make_node("slice", [dx], {"input_window_offsets": (0,) * len(shape),
                                       "input_window_sizes": shape,
                                       "input_window_strides": (1,) * len(shape),
                                       "output_sizes": shape})
    return dx


def conv_forward(x: np.ndarray, w: np.ndarray, attrs: Mapping[str, Any],
                 out: Sequence[int]) -> np.ndarray:
    """The forward sums, (N, g, Co/g, *out): channel by channel, then taps in row-major order."""
    nd, g = x.ndim - 2, attrs["group_count"]
    s, d, sp = attrs["strides"], attrs["dilations"], attrs["start_padding"]
    cig, cog, kshape = x.shape[1] // g, w.shape[0] // g, w.shape[2:]
    xg = x.reshape((x.shape[0], g, cig) + x.shape[2:])
    wg = w.reshape((g, cog, cig) + kshape)
    acc = np.zeros((x.shape[0], g, cog) + tuple(out), x.dtype)
    lead = (slice(None),) * 3
    for ci in range(cig):
        for k in np.ndindex(*kshape):
            dst, src = [], []
            for i in range(nd):
                lo, hi = tap_outputs(k[i], x.shape[2 + i], out[i], s[i], sp[i], d[i])
                first = lo * s[i] - sp[i] + k[i] * d[i]
                dst.append(slice(lo, hi + 1))
                src.append(slice(first, first + (hi - lo) * s[i] + 1, s[i]))
            if all(sl.stop > sl.start for sl in dst):
                wk = wg[(slice(None), slice(None), ci) + k].reshape((1, g, cog) + (1,) * nd)
                xs = xg[(slice(None), slice(None), slice(ci, ci + 1)) + tuple(src)]
                acc[lead + tuple(dst)] += xs * wk
    return acc


def conv_backward(x: np.ndarray, w: np.ndarray, attrs: Mapping[str, Any],
                  out: Sequence[int]) -> np.ndarray:
    """The backward sums, (N, g, Co/g, *out): channel by channel, then input positions in
    row-major order, which is the taps in reversed row-major order."""
    nd, g = x.ndim - 2, attrs["group_count"]
    s, d, sp = attrs["strides"], attrs["dilations"], attrs["start_padding"]
    cig, cog, kshape = x.shape[1] // g, w.shape[1], w.shape[2:]
    xg = x.reshape((x.shape[0], g, cig) + x.shape[2:])
    wg = w.reshape((g, cig, cog) + kshape)
    acc = np.zeros((x.shape[0], g, cog) + tuple(out), x.dtype)
    lead = (slice(None),) * 3
    taps = list(np.ndindex(*kshape))
    for ci in range(cig):
        for k in taps[::-1]:
            dst, src = [], []
            for i in range(nd):
                lo, hi = tap_outputs(k[i], out[i], x.shape[2 + i], s[i], sp[i], d[i])
                first = lo * s[i] - sp[i] + k[i] * d[i]
                src.append(slice(lo, hi + 1))
                dst.append(slice(first, first + (hi - lo) * s[i] + 1, s[i]))
            if all(sl.stop > sl.start for sl in src):
                wk = wg[(slice(None), ci, slice(None)) + k].reshape((1, g, cog) + (1,) * nd)
                xs = xg[(slice(None), slice(None), slice(ci, ci + 1)) + tuple(src)]
                acc[lead + tuple(dst)] += xs * wk
    return acc


def filter_grad_sums(it: np.ndarray, other: np.ndarray, attrs: Mapping[str, Any],
                     kshape: Sequence[int]) -> np.ndarray:
    """(g*A, F1, *kshape): per cross-correlation tap k, the sum over batch, then the positions
    q of ``it`` (row-major), of ``it[n, f0, q] * other[n, c, q*s - sp + k*d]``, where c is
    channel f1 of the group of f0 in ``other``."""
    nd, g = it.ndim - 2, attrs["group_count"]
    s, d, sp = attrs["strides"], attrs["dilations"], attrs["start_padding"]
    ca, cf = it.shape[1] // g, other.shape[1] // g
    res = np.zeros((g, ca, cf) + tuple(kshape), it.dtype)
    for k in np.ndindex(*kshape):
        box, src = [], []
        for i in range(nd):
            lo, hi = tap_outputs(k[i], other.shape[2 + i], it.shape[2 + i], s[i], sp[i], d[i])
            first = lo * s[i] - sp[i] + k[i] * d[i]
            box.append(slice(lo, hi + 1))
            src.append(slice(first, first + (hi - lo) * s[i] + 1, s[i]))
        if not all(sl.stop > sl.start for sl in box):
            continue
        ib = np.moveaxis(it[(slice(None), slice(None)) + tuple(box)], 1, -1)
        ob = np.moveaxis(other[(slice(None), slice(None)) + tuple(src)], 1, -1)
        ib = ib.reshape((-1, g, ca, 1))  # first axis: batch, then positions (row-major)
        ob = ob.reshape((-1, g, 1, cf))
        acc = np.zeros((g, ca, cf), it.dtype)
        step = max(1, 2 ** 16 // (g * ca * cf))  # positions per block of products
        for j in range(0, ib.shape[0], step):
            for term in ib[j:j + step] * ob[j:j + step]:  # one position at a time, in order
                np.add(acc, term, out=acc)
        res[(slice(None),) * 3 + k] = acc
    return res.reshape((g * ca, cf) + tuple(kshape))


@register
class ConvolutionFilterGrad(OpDef):
    """``convolution_filter_grad(input, input_gradient, output_sizes, mode, direction, ...)``:
    the gradient of ``convolution``'s filter."""

    name = "convolution_filter_grad"
    numerics = "summing"
    operands = ("input", "input_gradient")
    attributes = (Attr("output_sizes", "ints"),) + FIELDS
    traits = PURE
    dtypes = CONV_DTYPES

    def infer(self, c: Checker) -> list[TensorType]:
        rank = _head(c, "input_gradient")
        w = c.ints("output_sizes", rank, lo=1)
        p = _fields(c, rank - 2)
        g = p["group_count"]
        dims = _channels(c, rank, g, filter_dims=False)
        x, dy = c.t("input"), c.t("input_gradient")
        if p["direction"] == "forward":
            if w[1] * g != dims[0] or w[0] % g:
                c.fail("output_sizes", f"(Co, {dims[0] // g}, ...) with Co divisible by {g} "
                       f"(input channels {dims[0]} / group_count {g})", w)
            co = w[0]
        else:
            if w[0] != dims[0]:
                c.fail("output_sizes", f"({dims[0]}, Co/{g}, ...) (the input's channels first)",
                       w)
            co = w[1] * g
        if dy.shape[1] != co:
            c.fail("input_gradient.shape", f"{co} channels", dy.shape)
        out = _sizes(c, dims[1:], w[2:], p)
        want = (x.shape[0], co) + out
        if dy.shape != want:
            c.fail("input_gradient.shape", f"{want} (the convolution's result)", dy.shape)
        return [TensorType(x.dtype, w)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  dy: np.ndarray) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        nd = x.ndim - 2
        kshape = tuple(attrs["output_sizes"][2:])
        with np.errstate(all="ignore"):
            if attrs["direction"] == "forward":
                res = filter_grad_sums(dy.astype(a), x.astype(a), attrs, kshape)
            else:
                res = filter_grad_sums(x.astype(a), dy.astype(a), attrs, kshape)
            if attrs["mode"] == "convolution":
                res = res[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]
            return [np.ascontiguousarray(res).astype(x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dw = convolution_filter_grad(x, dy, f)  =>  d(dy) = convolution(x, G, f) and
        dx = convolution(dy, G, f) in the other direction (the input gradient of
        convolution(x, G, f)), where G is the filter gradient's cotangent."""
        gw = grads[0]
        if gw is None:
            return [None, None]
        x, dy = node.inputs
        f = {k: node.attrs[k] for k in FIELD_NAMES}
        return [input_gradient(x, gw, dy, f), make_node("convolution", [x, gw], f)]
