"""ONNX lowering of max_pooling and max_pooling_grad (SPEC.md §5).

onnxruntime's MaxPool promises neither lowest-index ties, the NaN rule nor "padding is never a
candidate", so the window taps are built explicitly, one spatial axis at a time: the argmax of a
window in row-major order is the argmax, over the taps of its first axis, of the argmaxes of the
rest (ties and the NaN rule included: both pick the first best candidate), so the last axis is
reduced first, then the one before it, and so on; the node count grows with the sum of the
window sizes, not their product. Only the taps that land inside the input for at least one
window are visited (``window_taps``: at most ``MAX_TAPS`` in all, whatever the window size).
The windows that tap ``k`` lands inside form one range of output coordinates (``tap_outputs``),
so tap k of every window is one strided ``Slice`` over that range, ``Pad``-ded back to the
output's size: no tensor depends on the padding's, stride's or dilation's magnitude, and every
ONNX attribute is an int in 0..size. A tap's validity mask and index offset are 1-D constants
(or, on an axis longer than ``MAX_TABLE``, made at run time from a ``Range``) broadcast along
the axis. A running (best, index) pair is updated tap by tap with SPEC's rule ``v == v and (best
!= best or v > best)``, a window's first valid tap always winning. Comparisons run on an
order-preserving key (float16 -> float32, int16/uint16 -> int32, uint64 -> int64 with the top
bit flipped), so ``best`` never has to be bit-exact; the result values are gathered from the
original input by index at the end, so they are exact copies. The gradient sums ``dy`` at the
argmax with ``ScatterElements(reduction="add")`` in float32 (float16) / the dtype, in the order
of dy's logical index; windows lying wholly in padding scatter into a dummy column.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor, broadcast
from gradc.errors import UnsupportedError
from gradc.ir.core import Node
from gradc.ir.ops.common import lowest
from gradc.ir.ops.pooling import tap_outputs, window_taps
from gradc.ir.types import Dim, DType

# comparison keys of the dtypes that Where lacks on some onnxruntime release (builder.WHERE_EXACT)
KEY = {DType.float16: DType.float32, DType.int16: DType.int32, DType.uint16: DType.int32,
       DType.int8: DType.int32, DType.uint32: DType.int64}
ACC = {DType.float16: DType.float32, DType.float32: DType.float32, DType.float64: DType.float64}
MAX_TAPS = 1024  # window taps reaching the input (summed over the axes) the exporter writes
MAX_TABLE = 2 ** 16  # elements of a 1-D constant; longer axes make theirs at run time (Range)


def _key(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    """An order-preserving comparison key of a dtype that Where and Pad support."""
    if x.dtype == DType.uint64:
        flipped = gb.binary("BitwiseXor", x, gb.scalar(1 << 63, DType.uint64))
        return gb.cast(flipped, DType.int64)  # two's complement reinterpretation: monotone
    return gb.cast(x, KEY.get(x.dtype, x.dtype))


class _Axis:
    """One spatial axis of a pooling: the taps that reach the input and, per tap, the output
    range ``lo..hi`` it lands on and the input position ``first`` at ``lo`` (exact ints).

    Masks over the axis's output coordinates are NumPy bool arrays (``small`` axes, written as
    constants) or run-time bool tensors; either way broadcast along the axis.
    """

    def __init__(self, gb: OnnxGraphBuilder, node: Node, a: int, nd: int, n: int, out: int,
                 el: int, budget: int) -> None:
        self.gb, self.a, self.n, self.out, self.el = gb, a, n, out, el
        w, s, sp, d = (node.attrs[f][a] for f in ("window_size", "strides", "start_padding",
                                                   "dilations"))
        self.s = s
        taps = window_taps(n, out, w, s, sp, d, limit=budget)
        if taps is None:
            raise UnsupportedError(
                f"to_onnx: {node.op}: window_size: expected at most {MAX_TAPS} window taps that "
                f"reach the input, found in as many search steps (MAX_TAPS, all spatial axes "
                f"together), got more on spatial axis {a} (window_size {w}, strides {s}, "
                f"start_padding {sp}, dilations {d}, {n} input and {out} output elements)")
        self.taps = taps
        self.range = {k: tap_outputs(k, n, out, s, sp, d) for k in taps}
        self.first = {k: lo * s - sp + k * d for k, (lo, _) in self.range.items()}
        self.shape = (1, 1) + tuple(out if b == a else 1 for b in range(nd))
        self.small = out <= MAX_TABLE
        self._grid: Tensor | None = None

    def full(self, k: int) -> bool:
        """True when tap ``k`` lands inside the input for every output coordinate."""
        return self.range[k] == (0, self.out - 1)

    def grid(self) -> Tensor:
        """``Range(0, out)``: the output coordinates, made at run time (long axes)."""
        if self._grid is None:
            self._grid = self.gb.range(self.out)
        return self._grid

    def mask(self, k: int) -> np.ndarray:
        """The output coordinates whose tap ``k`` is inside the input (``small`` axes)."""
        lo, hi = self.range[k]
        o = np.arange(self.out)
        return (o >= lo) & (o <= hi)

    def mask_tensor(self, k: int) -> Tensor:
        """``mask``, computed at run time (long axes)."""
        lo, hi = self.range[k]
        gb = self.gb
        r = self.grid()
        m = gb.binary("And", gb.compare("GreaterOrEqual", r, gb.scalar(lo, DType.int64)),
                      gb.compare("LessOrEqual", r, gb.scalar(hi, DType.int64)))
        return gb.reshape(m, self.shape)

    def const(self, m: np.ndarray) -> Tensor:
        """A mask as a broadcastable constant."""
        return self.gb.const(m.reshape(self.shape), DType.bool)

    def offset(self, k: int) -> Tensor:
        """Int64, broadcastable: the flat in-plane offset of tap ``k`` along this axis,
        ``((clip(o, lo, hi) - lo) * s + first) * el`` (inside the plane wherever it is used)."""
        gb = self.gb
        (lo, hi), first = self.range[k], self.first[k]
        if self.small:
            q = np.clip(np.arange(self.out, dtype=np.int64), lo, hi) - lo
            return gb.const(((q * self.s + first) * self.el).reshape(self.shape), DType.int64)
        o = gb.binary("Max", gb.binary("Min", self.grid(), gb.scalar(hi, DType.int64)),
                      gb.scalar(lo, DType.int64))
        v = gb.binary("Mul", gb.binary("Sub", o, gb.scalar(lo, DType.int64)),
                      gb.scalar(self.s, DType.int64))
        v = gb.binary("Mul", gb.binary("Add", v, gb.scalar(first, DType.int64)),
                      gb.scalar(self.el, DType.int64))
        return gb.reshape(v, self.shape)

    def tap(self, t: Tensor, k: int) -> Tensor:
        """Tap ``k`` of ``t`` along this axis for every window: a strided Slice over the windows
        where it is inside the input, Pad-ded (zeros, never used) to the output's size. A ``t``
        of extent 1 here is constant along the axis (broadcast, or the axis has one element)
        and is returned as it is."""
        gb, ax = self.gb, 2 + self.a
        if t.shape[ax] == 1:
            return t
        (lo, hi), first = self.range[k], self.first[k]
        count = hi - lo + 1
        step = self.s if count > 1 else 1
        shape = list(t.shape)
        if not (first == 0 and step == 1 and count == self.n):
            shape[ax] = count
            t = gb.op("Slice", [t, gb.ints([first]), gb.ints([first + (count - 1) * step + 1]),
                                gb.ints([ax]), gb.ints([step])], t.dtype, tuple(shape))
        if count != self.out:
            pads = [0] * (2 * len(shape))
            pads[ax], pads[len(shape) + ax] = lo, self.out - 1 - hi
            shape[ax] = self.out
            t = gb.op("Pad", [t, gb.ints(pads)], t.dtype, tuple(shape), mode="constant")
        return t


def _argmax(gb: OnnxGraphBuilder, x: Tensor, node: Node,
            out: Sequence[int]) -> tuple[Tensor, Tensor | None]:
    """Per window, the spatial flat index of the selected element, and the mask of windows
    that hold an input element (None when every window does).

    The index tensor has shape (N, C, *out); where the mask is false it is not meaningful.
    """
    spatial = [int(d) for d in x.shape[2:]]
    nd = len(spatial)
    full = tuple(x.shape[:2]) + tuple(out)
    axes: list[_Axis] = []
    for a in range(nd):
        budget = MAX_TAPS - sum(len(ax.taps) for ax in axes)
        axes.append(_Axis(gb, node, a, nd, spatial[a], out[a], math.prod(spatial[a + 1:]),
                          budget))
    if any(not ax.taps for ax in axes):  # every window lies wholly in padding
        nothing = gb.expand(gb.scalar(False, DType.bool), (1, 1) + tuple(out))
        return gb.expand(gb.scalar(0, DType.int64), full), nothing
    value = _key(gb, x)
    index: Tensor | None = None
    mask: Tensor | None = None  # windows found: the product of the axes' (None: all)
    for ax in reversed(axes):  # the last axis first: row-major argmax, axis by axis
        value, index, found = _reduce(gb, ax, value, index)
        if found is not None:
            mask = found if mask is None else gb.binary("And", mask, found)
    assert index is not None
    return gb.expand(index, full), mask


def _reduce(gb: OnnxGraphBuilder, ax: _Axis, value: Tensor,
            index: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """One axis's argmax over its taps, in tap order: (best key, flat index, found windows).

    ``index`` is the in-plane offset of the elements of ``value`` along the axes reduced so far
    (None: none yet). ``found`` is the mask of the output coordinates of this axis whose window
    holds an input element along it, broadcastable (None: all of them).
    """
    best: Tensor | None = None
    best_i: Tensor | None = None
    found_np = np.zeros(0, bool)  # small axes: the windows found so far, as a constant
    found: Tensor | None = None  # long axes: the same at run time (None: all of them)
    for k in ax.taps:
        v = ax.tap(value, k)
        i = ax.offset(k)
        if index is not None:
            i = gb.binary("Add", ax.tap(index, k), i)
        valid = None if ax.small or ax.full(k) else ax.mask_tensor(k)
        if best is None or best_i is None:  # the first tap: taken wherever it is valid
            best, best_i = v, i
            if ax.small:
                found_np = ax.mask(k)
            found = valid
            continue
        take = _better(gb, v, best)
        if ax.small:  # take = valid & (better | ~found) with constant masks
            mine = ax.mask(k)
            if not mine.all():
                take = gb.binary("And", take, ax.const(mine))
            first = mine & ~found_np
            if first.any():
                take = gb.binary("Or", take, ax.const(first))
            found_np = found_np | mine
        else:
            if found is not None:
                take = gb.binary("Or", take, gb.not_(found))
            if valid is not None:
                take = gb.binary("And", take, valid)
            if found is not None:
                found = None if valid is None else gb.binary("Or", found, valid)
        best = gb.op("Where", [take, v, best], v.dtype, broadcast(take.shape, v.shape,
                                                                  best.shape))
        best_i = gb.op("Where", [take, i, best_i], DType.int64,
                       broadcast(take.shape, i.shape, best_i.shape))
    assert best is not None and best_i is not None  # an axis without taps never gets here
    if ax.small:
        return best, best_i, None if found_np.all() else ax.const(found_np)
    return best, best_i, found


def _better(gb: OnnxGraphBuilder, v: Tensor, best: Tensor) -> Tensor:
    """SPEC §5.1: ``v == v and (best != best or v > best)``."""
    gt = gb.compare("Greater", v, best)
    if not v.dtype.is_float:
        return gt
    nan_best = gb.op("IsNaN", [best], DType.bool, best.shape)
    v_ok = gb.not_(gb.op("IsNaN", [v], DType.bool, v.shape))
    return gb.binary("Or", gt, gb.binary("And", nan_best, v_ok))


def _per_window(gb: OnnxGraphBuilder, index: Tensor, found: Tensor | None, dummy: int,
                windows: int) -> Tensor:
    """The (N, C, windows) index with every window that found nothing sent to ``dummy``."""
    if found is not None:
        index = gb.op("Where", [gb.not_(found), gb.scalar(dummy, DType.int64), index],
                      DType.int64, index.shape)
    return gb.reshape(index, tuple(index.shape[:2]) + (windows,), [0, 0, -1])


def lower_max_pooling(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """Window maxima gathered by index from the input (and the flat indices)."""
    (x,) = args
    out = [int(o) for o in node.attrs["output_sizes"]]
    size = math.prod(int(d) for d in x.shape[2:])
    full = node.outputs[0].type.shape
    index, found = _argmax(gb, x, node, out)
    per = _per_window(gb, index, found, size, math.prod(out))
    data = gb.reshape(x, tuple(x.shape[:2]) + (size,), [0, 0, -1])
    if found is not None:  # windows wholly in padding read LOWEST from an appended column
        column = gb.expand(gb.scalar(lowest(x.dtype.numpy), x.dtype), tuple(x.shape[:2]) + (1,))
        data = gb.op("Concat", [data, column], x.dtype, tuple(x.shape[:2]) + (size + 1,), axis=2)
    y = gb.op("GatherElements", [data, per], x.dtype, per.shape, axis=2)
    results = [gb.reshape(y, full, [0, 0] + list(out))]
    if node.attrs["output_indices"]:
        results.append(_flat_indices(gb, x, index, found, size))
    return results


def _flat_indices(gb: OnnxGraphBuilder, x: Tensor, index: Tensor, found: Tensor | None,
                  size: int) -> Tensor:
    """index + (n * C + c) * size, and 0 for windows wholly in padding."""
    n, c = x.shape[:2]
    nd = index.rank - 2
    cs = gb.mul_dim(_dim_value(gb, c), size)
    rows = _arange(gb, n, (-1, 1) + (1,) * nd, cs)
    cols = _arange(gb, c, (1, -1) + (1,) * nd, size)
    base = gb.binary("Add", rows, cols)
    flat = gb.binary("Add", index, base)
    if found is not None:
        flat = gb.op("Where", [gb.not_(found), gb.scalar(0, DType.int64), flat], DType.int64,
                     flat.shape)
    return flat


def _dim_value(gb: OnnxGraphBuilder, d: Dim) -> int | Tensor:
    return d if isinstance(d, int) else gb.scalar_dim(d)


def _arange(gb: OnnxGraphBuilder, n: Dim, bshape: tuple[int, ...], step: int | Tensor) -> Tensor:
    """arange(n) * step, reshaped for broadcasting (``bshape`` has one -1); a constant only
    up to ``MAX_TABLE`` elements, else a run-time ``Range``."""
    shape = tuple(n if b == -1 else 1 for b in bshape)
    if isinstance(n, int) and isinstance(step, int) and n <= MAX_TABLE:
        return gb.const((np.arange(n, dtype=np.int64) * step).reshape(shape), DType.int64)
    r = gb.range(n)
    st = step if isinstance(step, Tensor) else gb.scalar(step, DType.int64)
    return gb.reshape(gb.binary("Mul", r, st), shape, list(bshape))


def lower_max_pooling_grad(gb: OnnxGraphBuilder, node: Node,
                           args: Sequence[Tensor]) -> list[Tensor]:
    """dy summed at each window's argmax: ScatterElements(add) in the accumulation dtype."""
    x, dy = args
    spatial = [int(d) for d in x.shape[2:]]
    size = math.prod(spatial)
    out = [int(d) for d in dy.shape[2:]]
    index, found = _argmax(gb, x, node, out)
    per = _per_window(gb, index, found, size, math.prod(out))
    acc = ACC[x.dtype]
    cols = size + (0 if found is None else 1)
    nc = tuple(x.shape[:2])
    zeros = gb.filled(gb.shape_tensor(nc + (cols,)), 0, acc, nc + (cols,))
    upd = gb.reshape(gb.cast(dy, acc), per.shape, [0, 0, -1])
    total = gb.op("ScatterElements", [zeros, per, upd], acc, zeros.shape, axis=2,
                  reduction="add")
    if cols != size:
        total = gb.op("Slice", [total, gb.ints([0]), gb.ints([size]), gb.ints([2])], acc,
                      nc + (size,))
    return [gb.cast(gb.reshape(total, x.shape, [0, 0] + spatial), x.dtype)]


def lower_pool_table() -> dict:
    """The lowerings of this module by gradc op name."""
    return {"max_pooling": lower_max_pooling, "max_pooling_grad": lower_max_pooling_grad}
