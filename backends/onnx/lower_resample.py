"""ONNX lowering of resample and resample_grad (SPEC.md §6).

The float32 taps of a static axis of at most ``MAX_FOLDED_COORDS`` coordinates are computed at
export time with the reference's own ``axis_taps`` (ir/ops/resample.py) and stored as small
per-axis index and weight vectors. Any other axis -- symbolic (scale 1, SPEC §1.4) or longer --
gets its taps from the same float32 formula evaluated by onnxruntime (``Range``, ``Cast``,
``Sub``, ``Div``, ``Floor``/``Ceil``, ``Max``/``Min``: IEEE operations that round exactly like
NumPy), so export work and model size are bounded by the graph, not by its tensors' sizes. A
map that is provably the identity needs no taps: for a static axis the proof holds below
``EXACT_SHIFT``; a symbolic axis may take any size, so its shortcut sits in the ``then`` branch
of an ``If`` on ``size < EXACT_SHIFT`` whose ``else`` branch computes the taps.

- nearest ``resample``: one ``Gather`` per axis whose index vector is not the identity (a copy).
- linear ``resample``: every one of the 2^rank corners, in SPEC's canonical order: gather the
  corner's elements (gathers shared between corners with a common prefix), multiply by the
  float32 product of the per-axis weights (left to right), add to the running sum in ACC
  (float32; float64 for float64), round once (int8/uint8: half away from zero, saturate).
- ``resample_grad``: the transpose. For every corner, the flat output index (per-axis index
  times stride, broadcast-added) and the weighted ``dy``; all contributions, laid out as
  (dy element, corner), go through one ``ScatterElements(reduction="add")``, so they are added
  in the canonical order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.ir.core import Node
from gradc.ir.ops.resample import axis_taps
from gradc.ir.types import Dim, DType, element_count

F32, I64 = DType.float32, DType.int64
ACC = {DType.float16: F32, DType.float32: F32, DType.float64: DType.float64,
       DType.int8: F32, DType.uint8: F32}
FOLD_LIMIT = 1 << 16  # weight products up to this size are folded at export time
# Taps of a static axis with up to this many coordinates are computed at export time and
# stored (at most 2 x (8-byte index + 4-byte weight) x 2**16 = 1.5 MiB per axis); a longer
# axis computes them in the model at run time (exact too), so export never builds tables as
# large as a tensor (an axis of 2**31 would otherwise need 8 GiB for its coordinates alone).
MAX_FOLDED_COORDS = 1 << 16
# Offsets that are multiples of 1/4 and at most 1024 make ``f32(f32(o - opo) - ipo)`` exact for
# every coordinate o below this (see ``_shift``).
EXACT_SHIFT = 1 << 21


@dataclass(frozen=True)
class Tap:
    """One tap of one axis: index vector (None: identity) and weights (None: exactly 1)."""

    index: np.ndarray | Tensor | None
    weight: np.ndarray | Tensor | None


def _static_taps(n_coords: int, n: int, f: tuple) -> list[Tap]:
    out = []
    for idx, w in axis_taps(n_coords, n, *f):
        ident = n_coords == n and np.array_equal(idx, np.arange(n))
        out.append(Tap(None if ident else idx, None if (w == 1).all() else w.astype(np.float32)))
    return out


def _shift(ipo: float, opo: float) -> float | None:
    """c with coordinate(o) == o + c exactly, when provable for every o < EXACT_SHIFT (2^21).

    Offsets that are multiples of 1/4 and at most 1024 make ``f32(f32(o - opo) - ipo)`` exact
    below 2^21, so an axis shorter than that (2 million) needs no runtime taps.
    """
    if all((4 * v).is_integer() and abs(v) <= 1024 for v in (ipo, opo)):
        return -opo - ipo
    return None


def _shortcut(gb: OnnxGraphBuilder | None, n: Dim, f: tuple) -> list[Tap] | None:
    """The taps of an axis of n coordinates over size n whose map is the identity (or, for
    linear, the identity plus a weight-0 tap) for every coordinate below ``EXACT_SHIFT``; None
    when the map is not of that kind. Only exact for n <= EXACT_SHIFT (the caller's check).
    Without ``gb`` only says whether there is a shortcut."""
    scale, ipo, opo, mode, rounding = f
    c = _shift(ipo, opo) if scale == 1.0 else None
    if c is None:
        return None
    if mode == "nearest":
        if (rounding == "decreasing" and 0 <= c < 1) or (rounding == "increasing" and -1 < c <= 0):
            return [Tap(None, None)]
        return None
    if c != 0:
        return None
    if gb is None:
        return []
    last = gb.binary("Sub", gb.scalar_dim(n), gb.scalar(1, I64))
    up = gb.binary("Min", gb.binary("Add", _range(gb, n), gb.scalar(1, I64)), last)
    return [Tap(None, None), Tap(up, np.zeros((), np.float32))]


def _range(gb: OnnxGraphBuilder, n: Dim) -> Tensor:
    return gb.range(n)


def _runtime_taps(gb: OnnxGraphBuilder, nc: Dim, n: Dim, f: tuple) -> list[Tap]:
    """SPEC §6.1 evaluated by onnxruntime in float32: nc coordinates over an axis of size n.

    ``Cast`` rounds each int64 coordinate to the nearest float32, as ``axis_taps`` does. The
    float32 clamp to ``f32(n - 1)`` may round up to n above 2^24, so where n may be that large
    the indices are clamped once more as integers (as ``resample.coord_taps`` does).
    """
    scale, ipo, opo, mode, rounding = f
    o = gb.cast(_range(gb, nc), F32)
    t = gb.binary("Sub", o, gb.scalar(opo, F32))
    if scale != 1.0:
        t = gb.binary("Div", t, gb.scalar(scale, F32))
    x = gb.binary("Sub", t, gb.scalar(ipo, F32))
    last_i = gb.binary("Sub", gb.scalar_dim(n), gb.scalar(1, I64))
    last = gb.cast(last_i, F32)
    zero = gb.scalar(0, F32)
    big = not isinstance(n, int) or n > 1 << 24

    def index(v: Tensor) -> Tensor:
        i = gb.cast(v, I64)
        return gb.binary("Min", i, last_i) if big else i

    if mode == "nearest":
        r = gb.op("Floor" if rounding == "decreasing" else "Ceil", [x], F32, x.shape)
        r = gb.binary("Min", gb.binary("Max", r, zero), last)
        return [Tap(index(r), None)]
    xc = gb.binary("Min", gb.binary("Max", x, zero), last)
    i0f = gb.op("Floor", [xc], F32, xc.shape)
    frac = gb.binary("Sub", xc, i0f)
    i0 = index(i0f)
    i1 = gb.binary("Min", gb.binary("Add", i0, gb.scalar(1, I64)), last_i)
    return [Tap(i0, gb.binary("Sub", gb.scalar(1, F32), frac)), Tap(i1, frac)]


def _fields(attrs: dict, d: int) -> tuple:
    return (attrs["scales"][d], attrs["input_pixel_offsets"][d], attrs["output_pixel_offsets"][d],
            attrs["interpolation_mode"], attrs["rounding_direction"])


def _taps(gb: OnnxGraphBuilder, attrs: dict, coords: Sequence[Dim], sizes: Sequence[Dim],
          trust: bool = False) -> list[list[Tap]]:
    """Per axis, its taps: stored when small and static, else computed by the model.

    ``trust``: take the identity shortcut on symbolic axes (only inside the branch of the
    ``If`` that ``_guarded`` builds, where every such axis is below ``EXACT_SHIFT``).
    """
    out = []
    for d, (nc, n) in enumerate(zip(coords, sizes)):
        f = _fields(attrs, d)
        if isinstance(nc, int) and isinstance(n, int) and nc <= MAX_FOLDED_COORDS:
            out.append(_static_taps(nc, n, f))
            continue
        short = None
        if nc == n and (trust if isinstance(n, str) else n <= EXACT_SHIFT):
            short = _shortcut(gb, n, f)
        out.append(short if short is not None else _runtime_taps(gb, nc, n, f))
    return out


def _guarded(gb: OnnxGraphBuilder, attrs: dict, coords: Sequence[Dim], sizes: Sequence[Dim],
             build: Callable[[bool], Tensor], dtype: DType, shape: Sequence[Dim]) -> Tensor:
    """``build(trust)``; where a symbolic axis has a shortcut (exact only below
    ``EXACT_SHIFT``), ``If(every such size < EXACT_SHIFT, build(True), build(False))``."""
    syms = [n for d, (nc, n) in enumerate(zip(coords, sizes))
            if isinstance(n, str) and nc == n and _shortcut(None, n, _fields(attrs, d)) is not None]
    if not syms:
        return build(False)
    cond: Tensor | None = None
    for n in dict.fromkeys(syms):
        c = gb.compare("Less", gb.scalar_dim(n), gb.scalar(EXACT_SHIFT, I64))
        cond = c if cond is None else gb.binary("And", cond, c, DType.bool)
    assert cond is not None
    return gb.if_(cond, lambda: build(True), lambda: build(False), dtype, shape)


def _bshape(rank: int, d: int, n: Dim) -> tuple[Dim, ...]:
    return tuple(n if b == d else 1 for b in range(rank))


def _along(gb: OnnxGraphBuilder, v: np.ndarray | Tensor, rank: int, d: int, n: Dim,
           dtype: DType) -> np.ndarray | Tensor:
    """A per-axis vector (or scalar) shaped to broadcast along axis d."""
    if isinstance(v, np.ndarray):
        return v if v.ndim == 0 else v.reshape(tuple(-1 if b == d else 1 for b in range(rank)))
    return gb.reshape(v, _bshape(rank, d, n), [-1 if b == d else 1 for b in range(rank)])


def _tensor(gb: OnnxGraphBuilder, v: np.ndarray | Tensor, dtype: DType) -> Tensor:
    return v if isinstance(v, Tensor) else gb.const(v, dtype)


def _combine(gb: OnnxGraphBuilder, a: np.ndarray | Tensor | None, b: np.ndarray | Tensor,
             op: str, dtype: DType) -> np.ndarray | Tensor:
    """a (op) b, folded with NumPy (same IEEE rounding) while both are small constants."""
    if a is None:
        return b
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if element_count(np.broadcast_shapes(a.shape, b.shape)) <= FOLD_LIMIT:
            with np.errstate(all="ignore"):
                # np.asarray: the product of two rank-0 arrays is a NumPy scalar
                return np.asarray(a * b if op == "Mul" else a + b, dtype.numpy)
    return gb.binary(op, _tensor(gb, a, dtype), _tensor(gb, b, dtype))


def _weight(gb: OnnxGraphBuilder, corner: Sequence[Tap],
            dims: Sequence[Dim]) -> np.ndarray | Tensor | None:
    """The float32 product of the corner's per-axis weights, left to right (1s skipped)."""
    w = None
    for d, tap in enumerate(corner):
        if tap.weight is not None:
            w = _combine(gb, w, _along(gb, tap.weight, len(dims), d, dims[d], F32), "Mul", F32)
    return w


def _weighted(gb: OnnxGraphBuilder, w: np.ndarray | Tensor | None, data: Tensor) -> Tensor:
    if w is None:
        return data
    if isinstance(w, np.ndarray):  # float32 -> ACC is exact
        return gb.binary("Mul", gb.const(w.astype(data.dtype.numpy), data.dtype), data)
    return gb.binary("Mul", gb.cast(w, data.dtype), data)


def _drop_zero_taps(taps: list[list[Tap]]) -> list[list[Tap]]:
    """The taps whose weight is not 0 on the whole axis (at least one per axis)."""
    def zero(t: Tap) -> bool:
        return isinstance(t.weight, np.ndarray) and not t.weight.any()
    return [[t for t in ts if not zero(t)] or ts[:1] for ts in taps]


def _fast_path(gb: OnnxGraphBuilder, data: Tensor, taps: list[list[Tap]],
               from_taps: Callable[[list[list[Tap]]], Tensor], shape: Sequence[Dim]) -> Tensor:
    """from_taps(taps), skipping taps of weight 0 when ``data`` is finite (they add only +-0).

    A weight-0 tap turns an infinite or NaN element into NaN, so the full tap set stays as the
    ``If``'s other branch. Integer data is always finite.
    """
    reduced = _drop_zero_taps(taps)
    if all(len(a) == len(b) for a, b in zip(reduced, taps)):
        return from_taps(taps)
    if not data.dtype.is_float:
        return from_taps(reduced)
    return gb.if_(gb.all_finite(data), lambda: from_taps(reduced), lambda: from_taps(taps),
                  data.dtype, shape)


def lower_resample(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """Nearest: per-axis ``Gather``; linear: 2^rank weighted corners summed in order."""
    (x,) = args
    a = dict(node.attrs)
    out = tuple(node.outputs[0].type.shape)

    def build(trust: bool) -> Tensor:
        taps = _taps(gb, a, out, x.shape, trust)
        if a["interpolation_mode"] == "nearest":
            return _gather_corner(gb, x, [t[0] for t in taps], out, {}, ())
        xa = gb.cast(x, ACC[x.dtype])
        acc = _fast_path(gb, xa if x.dtype.is_float else x, taps,
                         lambda ts: _linear_sum(gb, xa, ts, out), out)
        return _store(gb, gb.expand(acc, out), x.dtype)
    return [_guarded(gb, a, out, x.shape, build, x.dtype, out)]


def _linear_sum(gb: OnnxGraphBuilder, xa: Tensor, taps: list[list[Tap]], out: tuple) -> Tensor:
    """Sum over the corners in canonical order of weight * gathered element, in ACC."""
    cache: dict[tuple, Tensor] = {}
    acc: Tensor | None = None
    for choice in itertools.product(*(range(len(t)) for t in taps)):
        corner = [taps[d][c] for d, c in enumerate(choice)]
        term = _weighted(gb, _weight(gb, corner, out),
                         _gather_corner(gb, xa, corner, out, cache, choice))
        acc = term if acc is None else gb.binary("Add", acc, term)
    assert acc is not None
    return gb.expand(acc, out)


def _gather_corner(gb: OnnxGraphBuilder, x: Tensor, corner: Sequence[Tap], out: Sequence[Dim],
                   cache: dict[tuple, Tensor], choice: tuple) -> Tensor:
    """x gathered along every axis with the corner's index vectors (prefixes shared)."""
    y = x
    for d, tap in enumerate(corner):
        key = choice[:d + 1]
        if key in cache:
            y = cache[key]
            continue
        if tap.index is not None:
            shape = list(y.shape)
            shape[d] = out[d]
            y = gb.op("Gather", [y, _tensor(gb, tap.index, I64)], y.dtype, shape, axis=d)
        if choice:
            cache[key] = y
    return y


def _store(gb: OnnxGraphBuilder, acc: Tensor, dtype: DType) -> Tensor:
    """Round the accumulator once; int8/uint8 half away from zero, then saturate."""
    if dtype.is_float:
        return gb.cast(acc, dtype)
    mag = gb.op("Abs", [acc], F32, acc.shape)
    whole = gb.op("Floor", [mag], F32, acc.shape)
    half_up = gb.compare("GreaterOrEqual", gb.binary("Sub", mag, whole), gb.scalar(0.5, F32))
    r = gb.binary("Add", whole, gb.cast(half_up, F32))
    neg = gb.compare("Less", acc, gb.scalar(0, F32))
    r = gb.op("Where", [neg, gb.op("Neg", [r], F32, r.shape), r], F32, r.shape)  # feeds a Cast
    info = np.iinfo(dtype.numpy)
    r = gb.binary("Min", gb.binary("Max", r, gb.scalar(info.min, F32)), gb.scalar(info.max, F32))
    return gb.cast(r, dtype)


def lower_resample_grad(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """The transpose of resample: one ScatterElements(add) over (dy element, corner)."""
    (dy,) = args
    a = dict(node.attrs)
    out = tuple(a["output_sizes"])
    dims = tuple(dy.shape)

    def build(trust: bool) -> Tensor:
        taps = _taps(gb, a, dims, out, trust)
        dya = gb.cast(dy, ACC[dy.dtype])
        strides = [gb.product(out[d + 1:]) for d in range(len(dims))]
        total = gb.product(out)
        res = _fast_path(gb, dya, taps, lambda ts: _scatter(gb, dya, ts, strides, total),
                         ("?",))
        res = gb.op("Reshape", [res, gb.shape_tensor(out)], dya.dtype, out)
        return gb.cast(res, dy.dtype)
    return [_guarded(gb, a, dims, out, build, dy.dtype, out)]


def _scatter(gb: OnnxGraphBuilder, dya: Tensor, taps: list[list[Tap]], strides: list[int | Tensor],
             total: int | Tensor) -> Tensor:
    """acc[flat index] += weight * dy for every (dy element, corner), in that order."""
    dims = tuple(dya.shape)
    rank = len(dims)
    cache: dict[tuple, np.ndarray | Tensor] = {}
    flats, updates = [], []
    for choice in itertools.product(*(range(len(t)) for t in taps)):
        corner = [taps[d][c] for d, c in enumerate(choice)]
        flat = None
        for d, tap in enumerate(corner):
            key = choice[:d + 1]
            if key not in cache:
                idx = tap.index if tap.index is not None else _identity(gb, dims[d])
                term = _combine(gb, idx, _stride(strides[d]), "Mul", I64)
                cache[key] = _combine(gb, flat, _along(gb, term, rank, d, dims[d], I64), "Add", I64)
            flat = cache[key]
        assert flat is not None
        flats.append(gb.expand(_tensor(gb, flat, I64), dims))
        updates.append(gb.expand(_weighted(gb, _weight(gb, corner, dims), dya), dims))
    size = gb.ints([total]) if isinstance(total, int) else gb.reshape(total, (1,), [1])
    zeros = gb.filled(size, 0, dya.dtype, ("?",))
    return gb.op("ScatterElements", [zeros, _interleave(gb, flats), _interleave(gb, updates)],
                 dya.dtype, ("?",), axis=0, reduction="add")


def _identity(gb: OnnxGraphBuilder, n: Dim) -> np.ndarray | Tensor:
    if isinstance(n, int) and n <= MAX_FOLDED_COORDS:
        return np.arange(n, dtype=np.int64)
    return _range(gb, n)


def _stride(s: int | Tensor) -> np.ndarray | Tensor:
    return np.asarray(s, np.int64) if isinstance(s, int) else s


def _interleave(gb: OnnxGraphBuilder, parts: list[Tensor]) -> Tensor:
    """Flatten [..., corner] in row-major order: each dy element's corners stay together."""
    if len(parts) == 1:
        return gb.reshape(parts[0], ("?",), [-1])
    cols = [gb.unsqueeze(p, -1) for p in parts]
    stacked = gb.op("Concat", cols, parts[0].dtype, tuple(parts[0].shape) + (len(parts),),
                    axis=-1)
    return gb.reshape(stacked, ("?",), [-1])


def lower_resample_table() -> dict:
    """The lowerings of this module by gradc op name."""
    return {"resample": lower_resample, "resample_grad": lower_resample_grad}
