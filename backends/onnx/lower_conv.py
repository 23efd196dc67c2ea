"""ONNX lowerings of SPEC-training.md §10: convolution and convolution_filter_grad.

Summing ops: onnxruntime sums in its own order, so these are held to §9.5's tolerance.

- float32 (and float16, widened exactly to float32 and rounded once at the end): ``Conv``, and
  ``ConvTranspose`` without padding (the full transposed output) followed by a crop to
  ``start_padding .. start_padding + out`` (``Pad`` with zeros where ``output_padding`` reaches
  past the full output; so no configuration that onnxruntime refuses is ever written). The
  bias is an ``Add`` after the sum, as SPEC orders it. ``mode="convolution"`` flips the filter
  with a ``Slice`` of step -1. The filter gradient is the TensorFlow-DirectML construction:
  a grouped ``Conv`` of the other tensor (batch and channels exchanged) by the iterated one
  (dY forward, X backward) as the filter, strides and dilations swapped, then a crop to the
  filter's sizes and a ``Transpose``.
- float64: onnxruntime has no double ``Conv``/``ConvTranspose``, so the sums are built tap by
  tap (``lower_conv64.py``): per filter tap a strided ``Slice`` and a batched ``MatMul`` over
  the channels of a group, added up.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.errors import UnsupportedError
from gradc.backends.onnx.lower_conv64 import (crop, flip, lower_convolution64,
                                              lower_convolution_filter_grad64, times, transpose)
from gradc.ir.core import Node
from gradc.ir.types import DType

F16, F32, F64 = DType.float16, DType.float32, DType.float64
BOUND = 2 ** 31


def widen(gb: OnnxGraphBuilder, t: Tensor) -> Tensor:
    """float16 -> float32 (exact); other dtypes unchanged."""
    return gb.cast(t, F32) if t.dtype == F16 else t


def check_bounds(node: Node) -> None:
    """UnsupportedError when an index onnxruntime computes could pass ``BOUND`` (attributes
    near int64's range would overflow its index arithmetic or allocate padded copies)."""
    a = node.attrs
    shapes = [v.type.shape for v in node.inputs] + [node.outputs[0].type.shape]
    sizes = [int(d) for shape in shapes for d in shape[2:]]
    reach = sum(sizes) + sum(int(d) for d in shapes[1][2:]) * max(a["dilations"]) + \
        max(a["strides"]) * (max(sizes) + 2) + sum(a["start_padding"]) + sum(a["end_padding"])
    if reach >= BOUND:
        raise UnsupportedError(f"to_onnx: {node.op}: strides/dilations/padding: expected "
                               f"positions below 2**31 for onnxruntime, got {reach}")


def _fields(node: Node) -> tuple[list[int], list[int], list[int], list[int], list[int], int]:
    a = node.attrs
    return (list(a["strides"]), list(a["dilations"]), list(a["start_padding"]),
            list(a["end_padding"]), list(a["output_padding"]), int(a["group_count"]))


def lower_convolution(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Conv`` / ``ConvTranspose`` (+ crop), then the bias ``Add``; float64 tap by tap."""
    check_bounds(node)
    if args[0].dtype == F64:
        return lower_convolution64(gb, node, args)
    x, w = widen(gb, args[0]), widen(gb, args[1])
    s, d, sp, ep, _, g = _fields(node)
    y_shape = node.outputs[0].type.shape
    if node.attrs["mode"] == "convolution":
        w = flip(gb, w)
    if node.attrs["direction"] == "forward":
        y = gb.op("Conv", [x, w], F32, y_shape, strides=s, dilations=d, pads=sp + ep, group=g)
    else:
        ks = [int(v) for v in w.shape[2:]]
        full = [(int(n) - 1) * s[i] + (ks[i] - 1) * d[i] + 1 for i, n in enumerate(x.shape[2:])]
        y = gb.op("ConvTranspose", [x, w], F32, tuple(y_shape[:2]) + tuple(full), strides=s,
                  dilations=d, pads=[0] * (2 * len(s)), group=g)
        y = crop(gb, y, sp, [int(v) for v in y_shape[2:]])
    if len(args) > 2:
        y = gb.binary("Add", y, widen(gb, args[2]))
    return [gb.cast(y, args[0].dtype)]


def lower_convolution_filter_grad(gb: OnnxGraphBuilder, node: Node,
                                  args: Sequence[Tensor]) -> list[Tensor]:
    """A grouped ``Conv`` of the exchanged tensors, cropped and transposed (float32)."""
    check_bounds(node)
    if args[0].dtype == F64:
        return lower_convolution_filter_grad64(gb, node, args)
    x, dy = widen(gb, args[0]), widen(gb, args[1])
    s, d, sp, _, _, g = _fields(node)
    fwd = node.attrs["direction"] == "forward"
    it, other = (dy, x) if fwd else (x, dy)
    sizes = [int(v) for v in node.attrs["output_sizes"]]
    ca, cf, ks = sizes[0] // g, sizes[1], sizes[2:]
    nd, n = len(ks), x.shape[0]
    ps, qs = [int(v) for v in other.shape[2:]], [int(v) for v in it.shape[2:]]
    o = gb.reshape(other, (n, g, cf, *ps), [0, g, cf, *ps])
    o = transpose(gb, o, [2, 1, 0] + list(range(3, 3 + nd)))
    o = gb.reshape(o, (cf, times(g, n), *ps), [cf, -1, *ps])
    f = transpose(gb, it, [1, 0] + list(range(2, 2 + nd)))
    ep = [max(0, (ks[i] - 1) * d[i] + (qs[i] - 1) * s[i] + 1 - ps[i] - sp[i]) for i in range(nd)]
    rs = [(ps[i] + sp[i] + ep[i] - ((qs[i] - 1) * s[i] + 1)) // d[i] + 1 for i in range(nd)]
    r = gb.op("Conv", [o, f], F32, (cf, g * ca, *rs), strides=d, dilations=s, pads=sp + ep,
              group=g)
    r = crop(gb, r, [0] * nd, ks)
    r = transpose(gb, r, [1, 0] + list(range(2, 2 + nd)))
    if node.attrs["mode"] == "convolution":
        r = flip(gb, r)
    return [gb.cast(r, args[0].dtype)]


def lower_conv_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {"convolution": lower_convolution,
            "convolution_filter_grad": lower_convolution_filter_grad}


__all__ = ["lower_conv_table"]
