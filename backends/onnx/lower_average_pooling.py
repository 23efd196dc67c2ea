"""ONNX lowering of average_pooling and average_pooling_grad (SPEC-training.md §13).

The forward is ONNX ``AveragePool`` (``count_include_pad``, ``dilations``, ``ceil_mode`` when
``output_sizes`` is §7.4's ceil size) where onnxruntime takes its arguments: pads below the
window, a dilated window no larger than the padded input. Otherwise, and for every gradient,
it is built from the taps, as the reference does: tap ``k`` of every window is one strided
``Slice`` of the input (forward) or one strided placement of ``dY/count`` (gradient: per axis
an ``Unsqueeze``, a ``Pad`` of ``stride - 1`` zeros, a ``Reshape`` and a ``Pad`` or ``Slice``),
added in the reference's order (row-major taps; reversed for the gradient) and divided by the
window counts, a constant of the output's spatial shape. Adding the zeros a tap does not reach
is adding +0, so this form is exact; float16 works in float32 and is rounded once.

onnxruntime's ``AveragePool`` has a float kernel only (no double): float64 always takes the tap
form, in float64. A window with more than ``MAX_TAPS`` taps reaching the input (a global
average over a large plane) is summed one spatial axis at a time instead (``_separable``: the
same terms, associated per axis, within SPEC's summation tolerance), so the node count grows
with the sum of the axes' taps rather than their product.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.errors import UnsupportedError
from gradc.ir.core import Node
from gradc.ir.ops.average_pooling import axis_counts, window_counts
from gradc.ir.ops.pooling import floor_sizes, tap_outputs, window_taps
from gradc.ir.types import DType, element_count

MAX_TAPS = 4096  # taps (window positions reaching the input) the tap form writes
WALK_LIMIT = 64 * MAX_TAPS  # candidate taps or output coordinates searched per axis
COUNT_LIMIT = 1 << 16  # entries of a divisor table (all of it, or one axis of it)
KEYS = ("window_size", "strides", "start_padding", "end_padding", "dilations")
NATIVE = frozenset({DType.float32})  # work dtypes of onnxruntime's AveragePool kernel


def _work(dtype: DType) -> DType:
    return DType.float32 if dtype == DType.float16 else dtype


def ceil_size(size: int, w: int, s: int, b: int, e: int, d: int) -> int:
    """SPEC.md §7.4's ceil_mode output size: no window may start in the end padding."""
    out = -(-(size + b + e - ((w - 1) * d + 1)) // s) + 1
    return out - 1 if (out - 1) * s >= size + b else out


def _native(attrs: Any, spatial: Sequence[int], out: Sequence[int]) -> int | None:
    """``ceil_mode`` (0 or 1) when onnxruntime's AveragePool computes this op, else None."""
    floor = floor_sizes(spatial, attrs)
    ceil = 0
    for i, n in enumerate(spatial):
        w, s, sp, ep, d = (attrs[k][i] for k in KEYS)
        if sp >= w or ep >= w or (w - 1) * d + 1 > n + sp + ep or w * d > 2 * n + 64:
            return None  # onnxruntime refuses these, or walks every tap of a huge window
        if out[i] != floor[i]:
            if out[i] != ceil_size(n, w, s, sp, ep, d):
                return None
            ceil = 1
    return ceil


def _counts(gb: OnnxGraphBuilder, attrs: Any, spatial: Sequence[int], out: Sequence[int],
            work: DType) -> Tensor:
    """The windows' divisors: one table when it is small, else one vector per axis multiplied
    at run time (exact: a product of tap counts below 2**24); never a table sized by a tensor
    dim beyond ``COUNT_LIMIT`` entries per axis (issue 10's rule)."""
    if element_count(out) <= COUNT_LIMIT:
        counts = window_counts(spatial, out, attrs, work.numpy.type)
        counts[counts == 0] = 1  # a window without taps sums to +0: +0 / 1
        return gb.const(counts, work)
    if max(out) > COUNT_LIMIT or element_count(attrs["window_size"]) >= 2 ** 24:
        raise UnsupportedError(f"onnx target: average pooling: output_sizes {list(out)}: "
                               f"expected at most {COUNT_LIMIT} windows per axis for the "
                               f"divisors of windows that pass the input's edges")
    total: Tensor | None = None
    nd = len(out)
    for i in range(nd):
        c = axis_counts(spatial[i], out[i], attrs["window_size"][i], attrs["strides"][i],
                        attrs["start_padding"][i], attrs["end_padding"][i],
                        attrs["dilations"][i], attrs["include_padding"])
        vec = np.array([max(1, k) for k in c], np.float64).reshape(
            (1, 1) + tuple(out[i] if j == i else 1 for j in range(nd)))
        axis = gb.const(vec, work)
        shape = (1, 1) + tuple(out[j] if j <= i else 1 for j in range(nd))
        total = axis if total is None else gb.op("Mul", [total, axis], work, shape)
    assert total is not None
    return total


def _check_taps(op: str, taps: Sequence[Any]) -> None:
    if len(taps) > MAX_TAPS:
        raise UnsupportedError(f"onnx target: {op}: window_size: expected at most {MAX_TAPS} "
                               f"window taps reaching the input, got {len(taps)}")


def _axis_taps(op: str, spatial: Sequence[int], out: Sequence[int],
               attrs: Any) -> list[list[int]]:
    """Per spatial axis, the taps that reach the input. The search walks the candidate taps
    or the output coordinates, whichever are fewer, and stops past ``WALK_LIMIT`` of them: a
    window of 2**24 taps with 2**40 of padding (a 2**41-wide output) is refused at once
    instead of walked (each axis may keep at most ``MAX_TAPS`` taps in any form)."""
    per = []
    for i in range(len(out)):
        w, st, sp, d = (attrs[f][i] for f in ("window_size", "strides", "start_padding",
                                              "dilations"))
        ks = window_taps(spatial[i], out[i], w, st, sp, d, limit=WALK_LIMIT)
        if ks is None:
            raise UnsupportedError(f"onnx target: {op}: window_size: expected at most "
                                   f"{MAX_TAPS} window taps reaching the input on axis {i}, "
                                   f"got more than {WALK_LIMIT} candidates")
        _check_taps(op, ks)
        per.append(ks)
    return per


def lower_average_pooling(gb: OnnxGraphBuilder, node: Node,
                          args: Sequence[Tensor]) -> list[Tensor]:
    """AveragePool where onnxruntime takes the arguments, else the tap form (module doc)."""
    attrs = node.attrs
    dtype = node.outputs[0].type.dtype
    work = _work(dtype)
    x = gb.cast(args[0], work)
    spatial = [int(v) for v in x.shape[2:]]
    out = list(attrs["output_sizes"])
    shape = node.outputs[0].type.shape
    ceil = _native(attrs, spatial, out) if work in NATIVE else None
    if ceil is not None:
        y = gb.op("AveragePool", [x], work, shape, kernel_shape=list(attrs["window_size"]),
                  strides=list(attrs["strides"]), dilations=list(attrs["dilations"]),
                  pads=list(attrs["start_padding"]) + list(attrs["end_padding"]),
                  count_include_pad=int(attrs["include_padding"]), ceil_mode=ceil)
        return [gb.cast(y, dtype)]
    per = _axis_taps("average_pooling", spatial, out, attrs)
    if element_count([len(ks) for ks in per]) > MAX_TAPS:
        total = _separable(gb, x, spatial, out, attrs, per)
    else:
        taps = list(itertools.product(*per))  # row-major, as the reference sums them
        total = _sum(gb, [_gather(gb, x, k, spatial, out, attrs) for k in taps], shape, work)
    y = gb.op("Div", [total, _counts(gb, attrs, spatial, out, work)], work, shape)
    return [gb.cast(y, dtype)]


def _sum(gb: OnnxGraphBuilder, terms: Sequence[Tensor | None], shape: Sequence[Any],
         work: DType) -> Tensor:
    """The terms added in order (+0 when there are none)."""
    total: Tensor | None = None
    for t in terms:
        if t is not None:
            total = t if total is None else gb.op("Add", [total, t], work, tuple(shape))
    return total if total is not None else gb.expand(gb.scalar(0, work), tuple(shape))


def _separable(gb: OnnxGraphBuilder, x: Tensor, spatial: Sequence[int], out: Sequence[int],
               attrs: Any, per: Sequence[Sequence[int]], grad: bool = False) -> Tensor:
    """The windows' sums one spatial axis at a time (``per``: each axis's taps, at most
    ``MAX_TAPS``): per axis, its taps' strided slices added in increasing order; with
    ``grad``, the placements of ``x`` (shaped like the pooled result) at each tap's positions,
    added in decreasing order."""
    t = x
    for i in range(len(out)):
        ks = per[i]
        shape = list(t.shape)
        shape[2 + i] = spatial[i] if grad else out[i]
        terms = [_place_axis(gb, t, i, k, spatial[i], out[i], attrs) for k in reversed(ks)] \
            if grad else [_gather_axis(gb, t, i, k, spatial[i], out[i], attrs) for k in ks]
        t = _sum(gb, terms, shape, t.dtype)
    return t


def _gather(gb: OnnxGraphBuilder, x: Tensor, k: Sequence[int], spatial: Sequence[int],
            out: Sequence[int], attrs: Any) -> Tensor | None:
    """Tap ``k`` of every window, +0 where it lies in the padding; shape ``(N, C, *out)``."""
    t: Tensor | None = x
    for i in range(len(k)):
        if t is None:
            return None
        t = _gather_axis(gb, t, i, k[i], spatial[i], out[i], attrs)
    return t


def _gather_axis(gb: OnnxGraphBuilder, t: Tensor, i: int, k: int, n: int, out: int,
                 attrs: Any) -> Tensor | None:
    """Tap ``k`` of spatial axis ``i`` for every window on that axis (+0 in the padding)."""
    s, sp, d = (attrs[f][i] for f in ("strides", "start_padding", "dilations"))
    lo, hi = tap_outputs(k, n, out, s, sp, d)
    if lo > hi:
        return None
    first = lo * s - sp + k * d
    ax = 2 + i
    shape = list(t.shape)
    shape[ax] = hi - lo + 1
    t = gb.op("Slice", [t, gb.ints([first]), gb.ints([first + (hi - lo) * s + 1]),
                        gb.ints([ax]), gb.ints([s])], t.dtype, tuple(shape))
    if hi - lo + 1 != out:
        pads = [0] * (2 * len(shape))
        pads[ax], pads[len(shape) + ax] = lo, out - 1 - hi
        shape[ax] = out
        t = gb.op("Pad", [t, gb.ints(pads)], t.dtype, tuple(shape), mode="constant")
    return t


def lower_average_pooling_grad(gb: OnnxGraphBuilder, node: Node,
                               args: Sequence[Tensor]) -> list[Tensor]:
    """dY/count placed at each tap's positions, taps in reversed row-major order, summed."""
    attrs = node.attrs
    dtype = node.outputs[0].type.dtype
    work = _work(dtype)
    dy = gb.cast(args[0], work)
    spatial = [int(v) for v in attrs["output_sizes"][2:]]
    out = [int(v) for v in dy.shape[2:]]
    shape = node.outputs[0].type.shape
    q = gb.op("Div", [dy, _counts(gb, attrs, spatial, out, work)], work, dy.shape)
    per = _axis_taps("average_pooling_grad", spatial, out, attrs)
    if element_count([len(ks) for ks in per]) > MAX_TAPS:
        total = _separable(gb, q, spatial, out, attrs, per, grad=True)
    else:
        taps = list(itertools.product(*per))
        total = _sum(gb, [_place(gb, q, k, spatial, out, attrs) for k in reversed(taps)],
                     shape, work)
    return [gb.cast(total, dtype)]


def _place(gb: OnnxGraphBuilder, q: Tensor, k: Sequence[int], spatial: Sequence[int],
           out: Sequence[int], attrs: Any) -> Tensor | None:
    """``q`` of the windows tap ``k`` reaches, at the input positions it reads; +0 elsewhere."""
    t: Tensor | None = q
    for i in range(len(k)):
        if t is None:
            return None
        t = _place_axis(gb, t, i, k[i], spatial[i], out[i], attrs)
    return t


def _place_axis(gb: OnnxGraphBuilder, t: Tensor, i: int, k: int, n: int, out: int,
                attrs: Any) -> Tensor | None:
    """``t`` of the windows tap ``k`` of spatial axis ``i`` reaches, at the positions it reads
    on that axis (length ``n``); +0 elsewhere."""
    s, sp, d = (attrs[f][i] for f in ("strides", "start_padding", "dilations"))
    lo, hi = tap_outputs(k, n, out, s, sp, d)
    if lo > hi:
        return None
    first = lo * s - sp + k * d
    ax, m = 2 + i, hi - lo + 1
    shape = list(t.shape)
    if m != out:
        shape[ax] = m
        t = gb.op("Slice", [t, gb.ints([lo]), gb.ints([hi + 1]), gb.ints([ax])], t.dtype,
                  tuple(shape))
    length = m
    if s > 1 and m > 1:  # spread: element j to position j * s
        u = gb.unsqueeze(t, ax + 1)
        ushape = list(u.shape)
        pads = [0] * (2 * len(ushape))
        pads[len(ushape) + ax + 1] = s - 1
        ushape[ax + 1] = s
        u = gb.op("Pad", [u, gb.ints(pads)], u.dtype, tuple(ushape), mode="constant")
        shape[ax] = m * s
        t = gb.reshape(u, tuple(shape))
        length = (m - 1) * s + 1
        shape[ax] = length
        t = gb.op("Slice", [t, gb.ints([0]), gb.ints([length]), gb.ints([ax])], t.dtype,
                  tuple(shape))
    pads = [0] * (2 * len(shape))
    pads[ax], pads[len(shape) + ax] = first, n - first - length
    shape[ax] = n
    if first or n - first - length:
        t = gb.op("Pad", [t, gb.ints(pads)], t.dtype, tuple(shape), mode="constant")
    return t
