"""ONNX lowering of max_pooling and max_pooling_grad (SPEC.md §5).

onnxruntime's MaxPool promises neither lowest-index ties, the NaN rule nor "padding is never a
candidate", so the window taps are built explicitly. The input is padded once; tap k of every
window is one strided ``Slice``. Which taps fall in the padding is known at export time, so the
validity masks are constants. A running (best, index) pair is updated tap by tap in window
order with SPEC's rule ``v == v and (best != best or v > best)``. Comparisons run on an
order-preserving key (float16 -> float32, int16/uint16 -> int32, uint64 -> int64 with the top
bit flipped), so ``best`` never has to be bit-exact; the result values are gathered from the
original input by index at the end, so they are exact copies. The gradient sums ``dy`` at the
argmax with ``ScatterElements(reduction="add")`` in float32 (float16) / the dtype, in the
order of dy's logical index; windows lying wholly in padding scatter into a dummy column.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.ir.core import Node
from gradc.ir.ops.common import lowest
from gradc.ir.types import Dim, DType

KEY = {DType.float16: DType.float32, DType.int16: DType.int32, DType.uint16: DType.int32}
ACC = {DType.float16: DType.float32, DType.float32: DType.float32, DType.float64: DType.float64}


def _key(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    """An order-preserving comparison key of a dtype that Where and Pad support."""
    if x.dtype == DType.uint64:
        flipped = gb.binary("BitwiseXor", x, gb.scalar(1 << 63, DType.uint64))
        return gb.cast(flipped, DType.int64)  # two's complement reinterpretation: monotone
    return gb.cast(x, KEY.get(x.dtype, x.dtype))


def _argmax(gb: OnnxGraphBuilder, x: Tensor, attrs: dict,
            out: Sequence[int]) -> tuple[Tensor, np.ndarray]:
    """Per window, the spatial flat index of the selected element, and the static 'found' mask.

    The index tensor has shape (N, C, *out); where 'found' is false it is not meaningful.
    """
    w, s, sp, dil = (attrs[k] for k in ("window_size", "strides", "start_padding", "dilations"))
    spatial = [int(d) for d in x.shape[2:]]
    nd = len(spatial)
    full = tuple(x.shape[:2]) + tuple(out)
    key = _key(gb, x)
    need = [(o - 1) * st + (k - 1) * d + 1 for o, st, k, d in zip(out, s, w, dil)]
    end_pad = [max(0, L - p - n) for L, p, n in zip(need, sp, spatial)]
    if any(sp) or any(end_pad):
        pads = [0, 0] + list(sp) + [0, 0] + end_pad
        padded = tuple(x.shape[:2]) + tuple(n + p + q for n, p, q in zip(spatial, sp, end_pad))
        key = gb.op("Pad", [key, gb.ints(pads)], key.dtype, padded, mode="constant")
    el = [int(np.prod(spatial[a + 1:], dtype=np.int64)) for a in range(nd)]
    grid = [np.arange(o, dtype=np.int64) for o in out]
    found = np.zeros(tuple(out), bool)
    best: Tensor | None = None
    index: Tensor | None = None
    for k in itertools.product(*(range(n) for n in w)):
        pos = [grid[a] * s[a] - sp[a] + k[a] * dil[a] for a in range(nd)]
        valid = _outer([(p >= 0) & (p < spatial[a]) for a, p in enumerate(pos)], np.logical_and)
        if not valid.any():
            continue
        flat = _outer([np.clip(p, 0, spatial[a] - 1) * el[a] for a, p in enumerate(pos)], np.add)
        v = _tap(gb, key, [k[a] * dil[a] for a in range(nd)], out, s, full)
        tap_index = gb.const(flat.reshape((1, 1) + flat.shape), DType.int64)
        if best is None:
            best, index = v, tap_index
        else:
            take = _better(gb, v, best)
            if not valid.all():
                take = gb.binary("And", take, _mask(gb, valid))
            first = valid & ~found
            if first.any():
                take = gb.binary("Or", take, _mask(gb, first))
            best = gb.op("Where", [take, v, best], v.dtype, full)  # exactness not needed here
            index = gb.op("Where", [take, tap_index, index], DType.int64, full)
        found |= valid
    if index is None:  # every window lies wholly in padding
        index = gb.const(np.zeros((1, 1) + tuple(out), np.int64), DType.int64)
    return gb.expand(index, full), found


def _outer(parts: list[np.ndarray], combine: np.ufunc) -> np.ndarray:
    nd = len(parts)
    out = parts[0].reshape((-1,) + (1,) * (nd - 1))
    for a in range(1, nd):
        out = combine(out, parts[a].reshape((1,) * a + (-1,) + (1,) * (nd - a - 1)))
    return out


def _mask(gb: OnnxGraphBuilder, m: np.ndarray) -> Tensor:
    return gb.const(m.reshape((1, 1) + m.shape), DType.bool)


def _tap(gb: OnnxGraphBuilder, key: Tensor, start: list[int], out: Sequence[int], s: Sequence[int],
         full: tuple[Dim, ...]) -> Tensor:
    """Tap ``start`` (in padded coordinates) of every window: one strided Slice."""
    axes, starts, ends, steps = [], [], [], []
    for a, (b, o, st) in enumerate(zip(start, out, s)):
        if b == 0 and st == 1 and o == key.shape[2 + a]:
            continue
        axes.append(2 + a)
        starts.append(b)
        ends.append(b + (o - 1) * st + 1)
        steps.append(st)
    if not axes:
        return key
    return gb.op("Slice", [key, gb.ints(starts), gb.ints(ends), gb.ints(axes), gb.ints(steps)],
                 key.dtype, full)


def _better(gb: OnnxGraphBuilder, v: Tensor, best: Tensor) -> Tensor:
    """SPEC §5.1: ``v == v and (best != best or v > best)``."""
    gt = gb.compare("Greater", v, best)
    if not v.dtype.is_float:
        return gt
    nan_best = gb.op("IsNaN", [best], DType.bool, best.shape)
    v_ok = gb.not_(gb.op("IsNaN", [v], DType.bool, v.shape))
    return gb.binary("Or", gt, gb.binary("And", nan_best, v_ok))


def _per_window(gb: OnnxGraphBuilder, index: Tensor, found: np.ndarray, dummy: int) -> Tensor:
    """The (N, C, windows) index with every window that found nothing sent to ``dummy``."""
    if not found.all():
        index = gb.op("Where", [_mask(gb, ~found), gb.scalar(dummy, DType.int64), index],
                      DType.int64, index.shape)
    return gb.reshape(index, tuple(index.shape[:2]) + (int(found.size),), [0, 0, -1])


def lower_max_pooling(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """Window maxima gathered by index from the input (and the flat indices)."""
    (x,) = args
    out = node.attrs["output_sizes"]
    spatial = [int(d) for d in x.shape[2:]]
    size = int(np.prod(spatial))
    full = node.outputs[0].type.shape
    index, found = _argmax(gb, x, dict(node.attrs), out)
    per = _per_window(gb, index, found, size)
    data = gb.reshape(x, tuple(x.shape[:2]) + (size,), [0, 0, -1])
    if not found.all():  # windows wholly in padding read LOWEST from an appended column
        column = gb.expand(gb.scalar(lowest(x.dtype.numpy), x.dtype), tuple(x.shape[:2]) + (1,))
        data = gb.op("Concat", [data, column], x.dtype, tuple(x.shape[:2]) + (size + 1,), axis=2)
    y = gb.op("GatherElements", [data, per], x.dtype, per.shape, axis=2)
    results = [gb.reshape(y, full, [0, 0] + list(out))]
    if node.attrs["output_indices"]:
        results.append(_flat_indices(gb, x, index, found, size))
    return results


def _flat_indices(gb: OnnxGraphBuilder, x: Tensor, index: Tensor, found: np.ndarray,
                  size: int) -> Tensor:
    """index + (n * C + c) * size, and 0 for windows wholly in padding."""
    n, c = x.shape[:2]
    nd = index.rank - 2
    cs = gb.mul_dim(_dim_value(gb, c), size)
    rows = _arange(gb, n, (-1, 1) + (1,) * nd, cs)
    cols = _arange(gb, c, (1, -1) + (1,) * nd, size)
    base = gb.binary("Add", rows, cols)
    flat = gb.binary("Add", index, base)
    if not found.all():
        flat = gb.op("Where", [_mask(gb, ~found), gb.scalar(0, DType.int64), flat], DType.int64,
                     flat.shape)
    return flat


def _dim_value(gb: OnnxGraphBuilder, d: Dim) -> int | Tensor:
    return d if isinstance(d, int) else gb.scalar_dim(d)


def _arange(gb: OnnxGraphBuilder, n: Dim, bshape: tuple[int, ...], step: int | Tensor) -> Tensor:
    """arange(n) * step, reshaped for broadcasting (``bshape`` has one -1)."""
    shape = tuple(n if b == -1 else 1 for b in bshape)
    if isinstance(n, int) and isinstance(step, int):
        return gb.const((np.arange(n, dtype=np.int64) * step).reshape(shape), DType.int64)
    one = gb.scalar(1, DType.int64)
    r = gb.op("Range", [gb.scalar(0, DType.int64), gb.scalar_dim(n), one], DType.int64, (n,))
    st = step if isinstance(step, Tensor) else gb.scalar(step, DType.int64)
    return gb.reshape(gb.binary("Mul", r, st), shape, list(bshape))


def lower_max_pooling_grad(gb: OnnxGraphBuilder, node: Node,
                           args: Sequence[Tensor]) -> list[Tensor]:
    """dy summed at each window's argmax: ScatterElements(add) in the accumulation dtype."""
    x, dy = args
    spatial = [int(d) for d in x.shape[2:]]
    size = int(np.prod(spatial))
    out = [int(d) for d in dy.shape[2:]]
    index, found = _argmax(gb, x, dict(node.attrs), out)
    per = _per_window(gb, index, found, size)
    acc = ACC[x.dtype]
    cols = size + (0 if found.all() else 1)
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
