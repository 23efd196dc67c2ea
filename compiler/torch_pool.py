"""ATen converters of ``gradc.from_torch``: pooling and upsampling.

- ``max_pool{2,3}d_with_indices``: gradc's ``max_pooling`` (the exporter's output sizes carry
  ``ceil_mode``). The indices result is refused where the program reads it: PyTorch's count
  within each plane, gradc's across the batch.
- ``avg_pool{2,3}d``: ``average_pooling`` with ``include_padding=count_include_pad``; its
  divisor is PyTorch's, also in ceil mode (SPEC-training.md §13.1); ``divisor_override`` is
  refused.
- ``adaptive_avg_pool2d``: a mean over the spatial axes for a 1x1 output, else (sizes that
  divide evenly) ``average_pooling`` with window and stride ``in/out``.
- Upsampling (``upsample_nearest{1,2}d``, ``_upsample_nearest_exact{1,2}d``,
  ``upsample_linear1d``, ``upsample_bilinear2d.vec``; torch itself decomposes
  ``upsample_bilinear2d.default``) is one ``resample`` with the
  exporter's output sizes and PyTorch's coordinate map, in gradc's form ``x_in = (o - opo) / S -
  ipo``: ``S`` is the given scale factor (PyTorch divides by it) or ``out/in``;
  nearest is ``floor(o / S)`` (offsets 0, 0); nearest-exact ``floor((o + 0.5) / S)`` (0, -0.5);
  linear without ``align_corners`` ``(o + 0.5) / S - 0.5`` clamped (0.5, -0.5); with
  ``align_corners`` ``S = (out - 1)/(in - 1)`` (0, 0), or a huge ``S`` (every coordinate 0)
  where PyTorch's scale is 0. gradc computes the coordinate in float32 as ``o / S`` where
  PyTorch multiplies by ``1/S``: equal for the usual powers of two, within a rounding of a
  coordinate for other scales.
"""

from __future__ import annotations

from typing import Any

from gradc.errors import UnsupportedError
from gradc.ir import builders as B
from gradc.ir.core import Value
from gradc.ir.ops.common import F
from gradc.ir.types import Dim
from gradc.torch_ops import Context, TorchNode, aten, ints

HUGE = 3.4028234663852886e38  # float32's largest: maps every output coordinate to 0


def _batched(x: Value, nd: int, op: str) -> tuple[Value, bool]:
    """The input with a batch axis (PyTorch also takes an unbatched ``(C, *spatial)``)."""
    if x.type.rank == nd + 1:
        return B.reshape(x, (1,) + tuple(x.type.shape)), True
    if x.type.rank != nd + 2:
        raise UnsupportedError(f"input rank {x.type.rank} is not supported ({op} takes rank "
                               f"{nd + 1} or {nd + 2})")
    return x, False


def _static(dims: Any, what: str) -> list[int]:
    if any(isinstance(d, str) for d in dims):
        raise UnsupportedError(f"{what}: symbolic spatial sizes {tuple(dims)} are not supported")
    return [int(d) for d in dims]


def _window(n: TorchNode, nd: int) -> tuple[list[int], list[int], list[int]]:
    k = ints(n.arg("kernel_size"), "kernel_size", nd)
    given = n.arg("stride", [])
    s = ints(given, "stride", nd) if given else k
    return k, s, ints(n.arg("padding", 0), "padding", nd)


def _result(y: Value, n: TorchNode, ctx: Context, unbatched: bool) -> Value:
    return B.reshape(y, ctx.shape(n, 0)) if unbatched else y


@aten("max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
def _max_pool(n: TorchNode, ctx: Context) -> tuple[Value, None]:
    if n.used(1):
        raise UnsupportedError("the indices result is not supported (PyTorch's indices count "
                               "within each plane, gradc's across the batch)")
    nd = 3 if "3d" in n.op else 2
    x, unbatched = _batched(ctx.value(n.arg("self"), "self"), nd, "max pooling")
    k, s, p = _window(n, nd)
    d = ints(n.arg("dilation", 1), "dilation", nd)
    sizes = _static(ctx.shape(n, 0)[-nd:], "output") if n.arg("ceil_mode", False) else None
    y = B.max_pooling(x, k, s, p, p, d, output_sizes=sizes)
    return _result(y, n, ctx, unbatched), None


@aten("avg_pool2d.default", "avg_pool3d.default")
def _avg_pool(n: TorchNode, ctx: Context) -> Value:
    if n.arg("divisor_override", None) is not None:
        raise UnsupportedError("divisor_override is not supported")
    nd = 3 if "3d" in n.op else 2
    x, unbatched = _batched(ctx.value(n.arg("self"), "self"), nd, "average pooling")
    k, s, p = _window(n, nd)
    sizes = _static(ctx.shape(n)[-nd:], "output") if n.arg("ceil_mode", False) else None
    y = B.average_pooling(x, k, s, p, p, None, bool(n.arg("count_include_pad", True)), sizes)
    return _result(y, n, ctx, unbatched)


@aten("adaptive_avg_pool2d.default", "_adaptive_avg_pool2d.default")
def _adaptive_avg_pool(n: TorchNode, ctx: Context) -> Value:
    x, unbatched = _batched(ctx.value(n.arg("self"), "self"), 2, "adaptive average pooling")
    if x.type.dtype not in F:
        raise UnsupportedError(f"dtype {x.type.dtype} is not supported")
    out = _static(ctx.shape(n)[-2:], "output_size")
    if out == [1, 1]:
        y = B.reduce_mean(x, (2, 3), True)
    else:
        size = _static(x.type.shape[2:], "input")
        if any(i % o for i, o in zip(size, out)):
            raise UnsupportedError(f"output size {out} does not divide the input's {size} "
                                   "(only 1x1 or evenly dividing windows are supported)")
        w = [i // o for i, o in zip(size, out)]
        y = B.average_pooling(x, w, w)
    return _result(y, n, ctx, unbatched)


# -- upsampling ------------------------------------------------------------------------------


def _given_scales(n: TorchNode, nd: int) -> list[float | None]:
    """The scale factors the program passes (``.vec``: ``scale_factors``; ``.default``:
    ``scales_h``/``scales_w`` or ``scales``), None where it passes none."""
    if n.op.endswith(".vec"):
        factors = n.arg("scale_factors", None)
        return [None] * nd if factors is None else [float(f) for f in factors]
    names = ["scales"] if nd == 1 else ["scales_h", "scales_w"]
    return [None if n.arg(k, None) is None else float(n.arg(k)) for k in names]


def _resample(n: TorchNode, ctx: Context, nd: int, mode: str, exact: bool = False) -> Value:
    x, unbatched = _batched(ctx.value(n.fx.args[0], "input"), nd, "resampling")
    out_dims: list[Dim] = list(x.type.shape[:2]) + list(ctx.shape(n)[-nd:])
    size_in, size_out = _static(x.type.shape[2:], "input"), _static(out_dims[2:], "output")
    align = bool(n.arg("align_corners", False)) if mode == "linear" else False
    given = _given_scales(n, nd)
    scales, ipo, opo = [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]
    for i, o, g in zip(size_in, size_out, given):
        if align:
            scales.append(HUGE if i == 1 or o == 1 else (o - 1) / (i - 1))
            ipo.append(0.0)
            opo.append(0.0)
            continue
        scales.append(g if g is not None else o / i)
        ipo.append(0.5 if mode == "linear" else 0.0)
        opo.append(-0.5 if mode == "linear" or exact else 0.0)
    y = B.resample(x, scales, mode, "decreasing", ipo, opo, out_dims)
    return _result(y, n, ctx, unbatched)


@aten("upsample_nearest2d.vec", "upsample_nearest2d.default")
def _nearest2d(n: TorchNode, ctx: Context) -> Value:
    return _resample(n, ctx, 2, "nearest")


@aten("upsample_nearest1d.vec", "upsample_nearest1d.default")
def _nearest1d(n: TorchNode, ctx: Context) -> Value:
    return _resample(n, ctx, 1, "nearest")


@aten("_upsample_nearest_exact2d.vec", "_upsample_nearest_exact2d.default")
def _nearest_exact2d(n: TorchNode, ctx: Context) -> Value:
    return _resample(n, ctx, 2, "nearest", exact=True)


@aten("_upsample_nearest_exact1d.vec", "_upsample_nearest_exact1d.default")
def _nearest_exact1d(n: TorchNode, ctx: Context) -> Value:
    return _resample(n, ctx, 1, "nearest", exact=True)


@aten("upsample_bilinear2d.vec")
def _bilinear2d(n: TorchNode, ctx: Context) -> Value:
    return _resample(n, ctx, 2, "linear")


@aten("upsample_linear1d.vec", "upsample_linear1d.default")
def _linear1d(n: TorchNode, ctx: Context) -> Value:
    return _resample(n, ctx, 1, "linear")


__all__: list[str] = []
