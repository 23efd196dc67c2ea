"""The ONNX Resize converter (opset 11 and later, SPEC.md §7.5).

Scales, offsets and sizes are computed exactly (``fractions.Fraction``, Python ints) and rounded
once to float32, so the fields do not depend on the order of the arithmetic and nothing wraps
or overflows. Every constant is checked before use: a scale must be finite and > 0 after
float32 rounding, a size in 1..2**63-1, the result within gradc's 2**62-byte limit, and a
computed field must fit float32; each error names the input and axis (the importer adds the
node).

Decision beyond SPEC.md's table: ``tf_crop_and_resize`` on an axis whose roi is [0, 1] and whose
output size is 1 samples the centre ``(in-1)/2``, as ONNX defines it (scale 1, input pixel offset
``-(in-1)/2``); with input size 1 every coordinate clamps to 0 (scale 3.4028235e38, offsets 0).
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as ops
from gradc.ir.ops.common import RESAMPLE_DTYPES
from gradc.ir.ops.resample import default_size
from gradc.ir.types import MAX_BYTES, MAX_DIM, DType, byte_size, fmt_bytes
from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, float_list, int_list, normalize_axes,
    require_dtype, require_rank,
)

HUGE = Fraction(float(np.finfo(np.float32).max))  # 3.4028235e38: maps every coordinate to ~0
F32_INF = HUGE + Fraction(2) ** 103  # from here on float32 rounding gives inf (ties to even)
HALF = Fraction(1, 2)
MODES = ("nearest", "linear")
COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "tf_half_pixel_for_nn",
                    "align_corners", "tf_crop_and_resize")
NEAREST_MODES = {  # nearest_mode -> (rounding_direction, added to input_pixel_offsets)
    "floor": ("decreasing", Fraction(0)), "ceil": ("increasing", Fraction(0)),
    "round_prefer_ceil": ("decreasing", -HALF), "round_prefer_floor": ("increasing", HALF),
}
Dim = int | str


def f32(q: Fraction) -> float:
    """``q`` rounded once to the nearest float32 (ties to even), as a Python float.

    Beyond float32's range the result is +-inf (never an OverflowError, however large q is).
    """
    if abs(q) >= F32_INF:
        return math.inf if q > 0 else -math.inf
    with np.errstate(over="ignore"):
        f = np.float32(float(q))
        cands = [c for c in (np.nextafter(f, np.float32(-np.inf)), f,
                             np.nextafter(f, np.float32(np.inf))) if np.isfinite(c)]
    if not cands:
        return float(f)
    return float(min(cands, key=lambda c: (abs(Fraction(float(c)) - q),
                                           int(np.float32(c).view(np.uint32)) & 1)))


def _attrs(n: OnnxNode) -> tuple[str, str, str]:
    return (n.get_str("mode", "nearest"),
            n.get_str("coordinate_transformation_mode", "half_pixel"),
            n.get_str("nearest_mode", "round_prefer_floor"))


def _resize_check(n: OnnxNode, ctx: Context) -> list[str]:
    if ctx.opset < 11:
        return [f"Resize-10 (opset {ctx.opset}) is not supported (opset 11 or later)"]
    mode, coord, nearest = _attrs(n)
    found = []
    if mode not in MODES:
        found.append(f"attribute mode: {mode!r} is not supported (nearest, linear)")
    if coord not in COORDINATE_MODES:
        found.append(f"attribute coordinate_transformation_mode: {coord!r} is not supported "
                     f"({', '.join(COORDINATE_MODES)})")
    if mode == "nearest" and nearest not in NEAREST_MODES:
        found.append(f"attribute nearest_mode: {nearest!r} is not supported "
                     f"({', '.join(NEAREST_MODES)})")
    for name in ("exclude_outside", "antialias"):
        if n.get_int(name, 0) != 0:
            found.append(f"attribute {name}: {n.get_int(name, 0)} is not supported (only 0)")
    policy = n.get_str("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        found.append(f"attribute keep_aspect_ratio_policy: {policy!r} is not supported "
                     "(only stretch)")
    if coord == "tf_crop_and_resize":
        found += _roi_problems(n, ctx)
    return found


def _roi_problems(n: OnnxNode, ctx: Context) -> list[str]:
    roi = n.input(1)
    if not roi or not ctx.is_const(roi):
        return [f"input roi ({roi!r}) must be a constant (an initializer or a Constant node) "
                "for tf_crop_and_resize"]
    values = float_list(ctx.const(n, 1, "roi"), "roi")  # type: ignore[arg-type]
    k = len(values) // 2
    bad = [i for i in range(k) if not 0 <= values[i] < values[k + i] <= 1]
    if bad:
        i = bad[0]
        return [f"input roi: axis {i} has start {values[i]} and end {values[k + i]}; "
                "tf_crop_and_resize is supported only with 0 <= start < end <= 1"]
    return []


def _axes(n: OnnxNode, ctx: Context, rank: int) -> list[int]:
    axes = n.get_ints("axes", None) if ctx.opset >= 18 else None
    return list(range(rank)) if axes is None else normalize_axes(axes, rank, "axes")


def _scales_or_sizes(n: OnnxNode, ctx: Context, count: int
                     ) -> tuple[list[float] | None, list[int] | None]:
    scales_a, sizes_a = ctx.const(n, 2, "scales"), ctx.const(n, 3, "sizes")
    scales = float_list(scales_a, "scales") if scales_a is not None and scales_a.size else None
    sizes = int_list(sizes_a, "sizes") if sizes_a is not None and sizes_a.size else None
    if (scales is None) == (sizes is None):
        raise VerifyError("inputs scales, sizes: expected exactly one of them, got "
                          f"{'both' if scales is not None else 'neither'}")
    given, field = (scales, "scales") if scales is not None else (sizes, "sizes")
    if len(given) != count:  # type: ignore[arg-type]
        raise VerifyError(f"input {field}: expected {count} values (one per axis), got "
                          f"{len(given)}")  # type: ignore[arg-type]
    return scales, sizes


def _scale32(s: float) -> float:
    """A scale rounded once to float32 (+-inf beyond its range), as gradc stores it."""
    return f32(Fraction(s)) if math.isfinite(s) else s


def _resolve(n_in: Dim, k: int, scales: list[float] | None,
             sizes: list[int] | None) -> tuple[Fraction, Dim]:
    """SPEC.md §7.5: the scale S and output size of a listed axis."""
    if scales is not None:
        s = scales[k]
        if not (math.isfinite(s) and s > 0):
            raise VerifyError(f"input scales[{k}]: expected a finite scale > 0, got {s}")
        s32 = _scale32(s)
        if not (math.isfinite(s32) and s32 > 0):
            raise VerifyError(f"input scales[{k}]: expected a finite scale > 0 after float32 "
                              f"rounding, got {s} (rounds to {s32})")
        if isinstance(n_in, str):
            if s != 1.0:
                raise UnsupportedError(f"input scales[{k}]: the axis has the symbolic size "
                                       f"{n_in!r}, which needs scale 1, got {s}")
            return Fraction(1), n_in
        out = default_size(n_in, s)
        if out < 1:
            raise VerifyError(f"input scales[{k}]: expected a scale giving an output size >= 1 "
                              f"for size {n_in}, got {s}")
        if out > MAX_DIM:
            raise VerifyError(f"input scales[{k}]: expected a scale giving an output size <= "
                              f"2**63 - 1 for size {n_in}, got {s} (size {out})")
        return Fraction(s), out
    m = sizes[k]  # type: ignore[index]
    if m < 1:
        raise (UnsupportedError if m == 0 else VerifyError)(
            f"input sizes[{k}]: expected a size >= 1, got {m}")
    if m > MAX_DIM:
        raise VerifyError(f"input sizes[{k}]: expected a size <= 2**63 - 1, got {m}")
    if isinstance(n_in, str):
        raise UnsupportedError(f"input sizes[{k}]: the axis has the symbolic size {n_in!r} "
                               "(sizes needs a static input size)")
    return Fraction(m, n_in), m


def _show(q: Fraction) -> str:
    """A fraction for messages, however large or small (``float`` overflows beyond 1.8e308)."""
    return f"{Decimal(q.numerator) / Decimal(q.denominator):.6g}"


def _check_fields(fields: Sequence[tuple[Fraction, Fraction, Fraction]], coord: str,
                  given: str) -> list[tuple[float, float, float]]:
    """The fields rounded to float32; UnsupportedError for one that float32 cannot hold (a
    scale beyond 3.4e38 or below its smallest value, from a tiny roi or extreme sizes)."""
    out = []
    source = "roi" if coord == "tf_crop_and_resize" else given
    for a, (s, ipo, opo) in enumerate(fields):
        v = (f32(s), f32(ipo), f32(opo))
        if not (math.isfinite(v[0]) and v[0] > 0):
            raise UnsupportedError(f"input {source}: axis {a} needs the scale {_show(s)} "
                                   f"({coord}), which is not a finite float32 > 0 (gradc's "
                                   "resample takes float32 scales)")
        for name, q, f in (("input", ipo, v[1]), ("output", opo, v[2])):
            if not math.isfinite(f):
                raise UnsupportedError(f"input {source}: axis {a} needs the {name} pixel offset "
                                       f"{_show(q)} ({coord}), beyond float32")
        out.append(v)
    return out


def _crop(n_in: Dim, out: Dim, start: Fraction, end: Fraction,
          axis: int) -> tuple[Fraction, Fraction, Fraction]:
    if isinstance(n_in, str):
        if (start, end) != (0, 1):
            raise UnsupportedError(f"input roi: axis {axis} has the symbolic size {n_in!r}, "
                                   "which needs the roi [0, 1]")
        return Fraction(1), Fraction(0), Fraction(0)
    if (start, end) == (0, 1):
        if n_in == 1:
            return HUGE, Fraction(0), Fraction(0)
        if out == 1:
            return Fraction(1), -Fraction(n_in - 1, 2), Fraction(0)
        return Fraction(out - 1, n_in - 1), Fraction(0), Fraction(0)  # type: ignore[operator]
    if n_in == 1 or out == 1:
        raise UnsupportedError(f"input roi: axis {axis} has input size {n_in} and output size "
                               f"{out}; tf_crop_and_resize with a roi other than [0, 1] needs "
                               "both > 1")
    return (Fraction(out - 1) / ((end - start) * (n_in - 1)),  # type: ignore[operator]
            -start * (n_in - 1), Fraction(0))


def coordinate_fields(coord: str, n_in: Dim, out: Dim, s: Fraction,
                      roi: tuple[Fraction, Fraction], axis: int
                      ) -> tuple[Fraction, Fraction, Fraction]:
    """SPEC.md §7.5 table: (scale, input_pixel_offset, output_pixel_offset) of one axis."""
    zero = Fraction(0)
    if coord == "half_pixel":
        return s, HALF, -HALF
    if coord == "pytorch_half_pixel":
        return (HUGE, zero, zero) if out == 1 else (s, HALF, -HALF)
    if coord == "asymmetric":
        return s, zero, zero
    if coord == "tf_half_pixel_for_nn":
        return s, zero, -HALF
    if coord == "align_corners":
        if isinstance(n_in, str):
            return Fraction(1), zero, zero
        if n_in == 1 or out == 1:
            return HUGE, zero, zero
        return Fraction(out - 1, n_in - 1), zero, zero  # type: ignore[operator]
    return _crop(n_in, out, roi[0], roi[1], axis)


def _rois(n: OnnxNode, ctx: Context, coord: str, axes: Sequence[int],
          rank: int) -> list[tuple[Fraction, Fraction]]:
    full = [(Fraction(0), Fraction(1))] * rank
    if coord != "tf_crop_and_resize":
        return full  # roi has no effect in the other modes, so it need not be constant
    values = float_list(ctx.const(n, 1, "roi"), "roi")  # type: ignore[arg-type]
    if len(values) != 2 * len(axes):
        raise VerifyError(f"input roi: expected {2 * len(axes)} values (starts, then ends), "
                          f"got {len(values)}")
    for k, a in enumerate(axes):
        full[a] = (Fraction(values[k]), Fraction(values[len(axes) + k]))
    return full


@converter("Resize", const_inputs=((2, "scales"), (3, "sizes")), check=_resize_check)
def _resize(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "X")
    rank = require_rank(x, 1, 4, "X", "resample")
    require_dtype(x, RESAMPLE_DTYPES, "X", "resample")
    mode, coord, nearest = _attrs(n)
    axes = _axes(n, ctx, rank)
    scales, sizes = _scales_or_sizes(n, ctx, len(axes))
    rois = _rois(n, ctx, coord, axes, rank)
    shape = x.type.shape
    fields: list[tuple[Fraction, Fraction, Fraction]] = []
    outs: list[Any] = []
    for a in range(rank):
        s, out = (Fraction(1), shape[a]) if a not in axes else \
            _resolve(shape[a], axes.index(a), scales, sizes)
        fields.append(coordinate_fields(coord, shape[a], out, s, rois[a], a))
        outs.append(out)
    given = "scales" if scales is not None else "sizes"
    nbytes = byte_size(outs, x.type.dtype)
    if nbytes > MAX_BYTES:
        raise VerifyError(f"input {given}: the output {DType.of(x.type.dtype).value}{outs} would "
                          f"hold {fmt_bytes(nbytes)}, more than the 2**62 bytes a tensor may hold")
    rounding, shift = NEAREST_MODES[nearest] if mode == "nearest" else ("decreasing", 0)
    rounded = _check_fields([(f[0], f[1] + shift, f[2]) for f in fields], coord, given)
    return [ops.resample(
        x, [f[0] for f in rounded], mode, rounding,
        input_pixel_offsets=[f[1] for f in rounded],
        output_pixel_offsets=[f[2] for f in rounded], output_sizes=outs)]
