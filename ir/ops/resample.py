"""Resample and its exact adjoint (SPEC.md §6): float32 coordinates, canonical-order sums."""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.common import RESAMPLE_DTYPES, RESAMPLE_GRAD_DTYPES, acc_dtype, store
from gradc.ir.ops.registry import DERIVED, PURE, Attr, Checker, OpDef, PerAxis, make_node, register
from gradc.ir.types import MAX_BYTES, MAX_DIM, Dim, DType, TensorType, byte_size, fmt_bytes

MAPPING = (Attr("scales", "floats"),
           Attr("interpolation_mode", "choice", "nearest", ("nearest", "linear")),
           Attr("rounding_direction", "choice", "decreasing", ("decreasing", "increasing")),
           Attr("input_pixel_offsets", "floats", PerAxis(0.5)),
           Attr("output_pixel_offsets", "floats", PerAxis(-0.5)))
FIELDS = tuple(a.name for a in MAPPING)
Tap = tuple[np.ndarray, np.ndarray]  # (index per coordinate, float32 weight per coordinate)


def _fields(c: Checker, rank: int) -> tuple[float, ...]:
    scales = c.floats("scales", rank, positive=True)
    c.choice("interpolation_mode")
    c.choice("rounding_direction")
    c.floats("input_pixel_offsets", rank)
    c.floats("output_pixel_offsets", rank)
    return scales


def default_size(n: int, scale: float) -> int:
    """``floor(f32(f32(n) * scale))``, as ONNX Runtime computes it."""
    with np.errstate(over="ignore"):
        v = np.float32(n) * np.float32(scale)
    return int(np.floor(v)) if np.isfinite(v) else -1


def axis_taps(n_coords: int, n: int, scale: float, ipo: float, opo: float, mode: str,
              rounding: str) -> list[Tap]:
    """The taps of one axis for coordinates 0..n_coords-1 over an axis of size n
    (resample's tap rule, in float32).

    Work and memory are proportional to ``n_coords``: callers that run at compile time keep it
    within a budget (``axis_is_identity`` chunks; the C and ONNX targets compute big axes' taps
    at run time).
    """
    return coord_taps(np.arange(n_coords, dtype=np.float32), n, scale, ipo, opo, mode, rounding)


def coord_taps(o: np.ndarray, n: int, scale: float, ipo: float, opo: float, mode: str,
               rounding: str) -> list[Tap]:
    """``axis_taps`` for the float32 coordinates ``o`` (each an integer rounded to float32).

    Overflow to +-inf (a tiny scale, offsets near the float32 limit) is part of the tap rule's
    float32 semantics, so NumPy is told not to warn about it; the clamps make every index finite.
    ``hi = f32(n - 1)`` rounds up to ``n`` for some sizes above 2**24; the indices are clamped
    once more as integers, so they always lie in [0, n-1] (the C and ONNX targets do the same).
    """
    hi = np.float32(n - 1)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        x = ((o - np.float32(opo)) / np.float32(scale)) - np.float32(ipo)
        if mode == "nearest":
            r = np.floor(x) if rounding == "decreasing" else np.ceil(x)
            idx = np.minimum(np.clip(r, np.float32(0), hi).astype(np.int64), n - 1)
            return [(idx, np.ones(o.shape[0], np.float32))]
        xc = np.minimum(np.maximum(x, np.float32(0)), hi)
        i0f = np.floor(xc)
        f = xc - i0f
    i0 = np.minimum(i0f.astype(np.int64), n - 1)
    return [(i0, np.float32(1) - f), (np.minimum(i0 + 1, n - 1), f)]


IDENTITY_LIMIT = 2 ** 24 + 1  # no axis longer than this has identity taps (see axis_is_identity)
IDENTITY_CHUNK = 1 << 16  # coordinates checked at once by axis_is_identity


def axis_is_identity(n: int, scale: float, ipo: float, opo: float, rounding: str) -> bool:
    """True if nearest taps (§6.1) map every coordinate of an axis of size n to itself.

    Exactly ``np.array_equal(axis_taps(n, n, ..., "nearest", rounding)[0][0], np.arange(n))``,
    with bounded work and memory, so passes may call it at compile time on any static size:

    - above ``IDENTITY_LIMIT`` (2**24 + 1) it is never true: the coordinates 2**24 and 2**24 + 1
      round to the same float32, so they get the same index;
    - below, the coordinates are checked ``IDENTITY_CHUNK`` at a time, first and last chunk
      first (where a map that is not the identity usually shows), at most 257 chunks.
    """
    if n > IDENTITY_LIMIT:
        return False
    starts = list(range(0, n, IDENTITY_CHUNK))
    for lo in starts[:1] + starts[-1:] + starts[1:-1]:
        hi = min(n, lo + IDENTITY_CHUNK)
        want = np.arange(lo, hi, dtype=np.int64)
        (idx, _), = coord_taps(want.astype(np.float32), n, scale, ipo, opo, "nearest", rounding)
        if not np.array_equal(idx, want):
            return False
    return True


def all_taps(attrs: Mapping[str, Any], coords: Sequence[int],
             sizes: Sequence[int]) -> list[list[Tap]]:
    """``axis_taps`` for every axis."""
    return [axis_taps(coords[d], sizes[d], attrs["scales"][d], attrs["input_pixel_offsets"][d],
                      attrs["output_pixel_offsets"][d], attrs["interpolation_mode"],
                      attrs["rounding_direction"]) for d in range(len(coords))]


def _check_bytes(c: Checker, operand: str, out: Sequence[Dim], field: str) -> None:
    """The result type's size limit (``MAX_BYTES``), reported on the field that sets it."""
    nbytes = byte_size(out, c.t(operand).dtype)
    if nbytes > MAX_BYTES:
        c.fail(field, "a result of at most 2**62 bytes", f"{list(out)}: {fmt_bytes(nbytes)}")


def _count(dims: Sequence[int]) -> int:
    """The product of concrete sizes as an exact Python int (``gradc.ir.types.element_count``
    for the references, which the NumPy target copies and so may use NumPy and builtins only)."""
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _bshape(rank: int, d: int) -> tuple[int, ...]:
    return tuple(-1 if b == d else 1 for b in range(rank))


@register
class Resample(OpDef):
    """``resample(input, scales, ...)``: nearest or multilinear resampling over up to 4 axes."""

    name = "resample"
    numerics = "summing"
    operands = ("input",)
    attributes = MAPPING + (Attr("output_sizes", "dims", DERIVED),)
    traits = PURE
    dtypes = RESAMPLE_DTYPES

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("input", 1, 4)
        c.dtype_in("input", self.dtypes)
        scales = _fields(c, rank)
        shape = c.t("input").shape
        default: list[Dim | None] = []
        for i, (n, s) in enumerate(zip(shape, scales)):
            if isinstance(n, str):
                default.append(n if s == 1.0 else None)
                continue
            size = default_size(n, s)
            if c.raw.get("output_sizes") is None:
                if size < 1:
                    c.fail(f"scales[{i}]", f"a scale giving an output size >= 1 for size {n}",
                           np.float32(s))
                if size > MAX_DIM:
                    c.fail(f"scales[{i}]", f"a scale giving an output size <= 2**63 - 1 for "
                           f"size {n}", f"{np.float32(s)} (size {size})")
                size = min(size, MAX_DIM)
            default.append(size)
        out = c.dims("output_sizes", default=tuple(d if d is not None else 1 for d in default))
        if len(out) != rank:
            c.fail("output_sizes", f"{rank} values (one per axis)", f"{len(out)} values")
        for i, (o, n, s) in enumerate(zip(out, shape, scales)):
            if isinstance(n, str) and not (s == 1.0 and o == n):
                c.fail(f"input.shape[{i}]", "a static size (a symbol needs scale 1.0 and the "
                       "same symbol as output size)", repr(n))
            if isinstance(o, str) and o != n:
                c.fail(f"output_sizes[{i}]", "an integer >= 1", repr(o))
            if not isinstance(o, str) and o < 1:
                c.fail(f"output_sizes[{i}]", "an integer >= 1", o)
        _check_bytes(c, "input", out, "scales" if c.raw.get("output_sizes") is None
                     else "output_sizes")
        return [TensorType(c.t("input").dtype, out)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        out = [x.shape[i] if isinstance(o, str) else o for i, o in enumerate(attrs["output_sizes"])]
        taps = all_taps(attrs, out, x.shape)
        if attrs["interpolation_mode"] == "nearest":
            return [x[np.ix_(*(t[0][0] for t in taps))]]
        a = acc_dtype(x.dtype)
        rank = x.ndim
        acc: np.ndarray | None = None
        # 0 * inf = NaN, overflow to inf and float16 rounding to inf are defined: no warning
        with np.errstate(invalid="ignore", over="ignore"):
            for corner in itertools.product(*taps):  # axis 0 outermost, low tap first
                w = corner[0][1].reshape(_bshape(rank, 0))
                for d in range(1, rank):
                    w = w * corner[d][1].reshape(_bshape(rank, d))  # float32, rounded each step
                term = w.astype(a) * x[np.ix_(*(t[0] for t in corner))].astype(a)
                acc = term if acc is None else acc + term
            assert acc is not None  # every axis has at least one tap
            return [store(x.dtype, np.broadcast_to(acc, out))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = resample(x, f)  =>  dx = resample_grad(dy, x.shape, f), its exact adjoint."""
        (dy,) = grads
        if dy is None:
            return [None]
        return [make_node("resample_grad", [dy], {k: node.attrs[k] for k in FIELDS}
                          | {"output_sizes": node.inputs[0].type.shape})]


@register
class ResampleGrad(OpDef):
    """``resample_grad(dy, output_sizes, scales, ...)``: the transpose of ``resample``."""

    name = "resample_grad"
    numerics = "summing"
    operands = ("input_gradient",)
    attributes = (Attr("output_sizes", "dims"),) + MAPPING
    traits = frozenset({"pure", "fusible"})
    anchor_operand = "input_gradient"
    dtypes = RESAMPLE_GRAD_DTYPES
    no_negative_zero = frozenset({DType.float32, DType.float64})  # as max_pooling_grad

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("input_gradient", 1, 4)
        c.dtype_in("input_gradient", self.dtypes)
        out = c.dims("output_sizes")
        if len(out) != rank:
            c.fail("output_sizes", f"{rank} values (one per axis)", f"{len(out)} values")
        for i, o in enumerate(out):
            if not isinstance(o, str) and o < 1:
                c.fail(f"output_sizes[{i}]", "an integer >= 1", o)
        scales = _fields(c, rank)
        dy = c.t("input_gradient").shape
        for i, (o, n, s) in enumerate(zip(out, dy, scales)):
            if isinstance(o, str) or isinstance(n, str):
                if not (o == n and s == 1.0):
                    c.fail(f"output_sizes[{i}]", "static sizes (a symbol needs scale 1.0 and "
                           "the same symbol in input_gradient.shape)", f"{o!r} from {n!r}")
        _check_bytes(c, "input_gradient", out, "output_sizes")
        return [TensorType(c.t("input_gradient").dtype, out)]

    def reference(self, attrs: Mapping[str, Any], dy: np.ndarray) -> list[np.ndarray]:
        out = [dy.shape[i] if isinstance(o, str) else o
               for i, o in enumerate(attrs["output_sizes"])]
        a = acc_dtype(dy.dtype)
        acc = np.zeros(_count(out), a)  # the result first: nothing before it exceeds dy's size
        taps = all_taps(attrs, dy.shape, out)
        if np.isfinite(dy).all():
            # With a finite dy a weight-0 tap adds +-0 to an accumulator that starts at +0 and
            # can never be -0, so dropping the taps that are 0 on a whole axis changes no bit.
            taps = [[t for t in ts if t[1].any()] or ts[:1] for ts in taps]
        scatter_canonical(acc, dy.astype(a), taps, out)
        with np.errstate(over="ignore"):  # float16 rounding to inf is defined
            return [acc.reshape(out).astype(dy.dtype, copy=False)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dx = resample_grad(dy, f)  =>  d(dy) = resample(d(dx), f) (it is linear)."""
        (g,) = grads
        if g is None:
            return [None]
        return [make_node("resample", [g], {k: node.attrs[k] for k in FIELDS}
                          | {"output_sizes": node.inputs[0].type.shape})]


def scatter_canonical(acc: np.ndarray, dy: np.ndarray, taps: list[list[Tap]],
                      out: Sequence[int]) -> None:
    """acc[tap index] += weight * dy for every dy element then tap, in canonical order.

    Work is chunked over dy's leading axes; within a chunk the contributions are laid out as
    (dy element, tap) in row-major order, and ``np.add.at`` applies them in that order.
    """
    rank = dy.ndim
    strides = [_count(out[d + 1:]) for d in range(rank)]
    ncorner = _count([len(t) for t in taps])
    lead = 0
    while lead < rank and _count(dy.shape[lead:]) * ncorner > (1 << 22):
        lead += 1
    rest = rank - lead
    for head in np.ndindex(*dy.shape[:lead]):
        flats, vals = [], []
        for corner in itertools.product(*taps):
            flat: np.int64 | np.ndarray = np.int64(0)
            w: np.float32 | np.ndarray = np.float32(1)
            for d, (idx, wt) in enumerate(corner):
                if d < lead:
                    flat = flat + idx[head[d]] * strides[d]
                    wd = wt[head[d]]
                else:
                    bs = _bshape(rest, d - lead)
                    flat = flat + (idx * strides[d]).reshape(bs)
                    wd = wt.reshape(bs)
                w = wd if d == 0 else w * wd  # float32 product, left to right
            block = dy[head]
            flats.append(np.broadcast_to(flat, block.shape))
            with np.errstate(invalid="ignore", over="ignore"):
                vals.append(np.asarray(w).astype(acc.dtype) * block)
        with np.errstate(invalid="ignore", over="ignore"):
            np.add.at(acc, np.stack(flats, -1).ravel(), np.stack(vals, -1).ravel())
