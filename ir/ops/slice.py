"""Strided slice and its gradient (SPEC.md §4): data movement, bit-exact."""

from __future__ import annotations

from typing import Any, Mapping, Sequence, overload

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.common import SLICE_DTYPES
from gradc.ir.ops.registry import DERIVED, Attr, Checker, OpDef, make_node, register
from gradc.ir.types import Dim, TensorType

WINDOW_ATTRS = (Attr("input_window_offsets", "ints"), Attr("input_window_sizes", "dims"),
                Attr("input_window_strides", "ints"))
WINDOW = tuple(a.name for a in WINDOW_ATTRS)


def copy_start(off: Sequence[int], size: Sequence[Dim], stride: Sequence[int],
               shape: Sequence[int]) -> list[int]:
    """First source index per axis: the window's start, or its end for a negative stride."""
    sizes = [shape[i] if isinstance(s, str) else s for i, s in enumerate(size)]
    return [o + (s - 1 if st < 0 else 0) for o, s, st in zip(off, sizes, stride)]


def source_indices(off: Sequence[int], size: Sequence[Dim], stride: Sequence[int],
                   full: Sequence[int], out: Sequence[int]) -> list[np.ndarray]:
    """Per axis, the source index of each result element (``full``: the unsliced sizes)."""
    start = copy_start(off, size, stride, full)
    return [s + st * np.arange(n, dtype=np.int64) for s, st, n in zip(start, stride, out)]


def _whole_axis(off: int, size: Dim, stride: int, dim: Dim) -> bool:
    return isinstance(size, str) and size == dim and off == 0 and stride in (1, -1)


def _window(c: Checker, rank: int, full: Sequence[Dim], full_field: str,
            zero_stride_ok: bool) -> tuple[tuple[int, ...], tuple[Dim, ...], tuple[int, ...]]:
    """Checks shared by slice and slice_grad: lengths, strides, offsets and sizes, fit."""
    for k in WINDOW:  # the three lengths are checked before any entry
        c.length(k, rank)
    if not zero_stride_ok:  # slice_grad: the strides (item 4) come before offsets and sizes
        stride = c.ints("input_window_strides", rank)
        for i, st in enumerate(stride):
            if st == 0:
                c.fail(f"input_window_strides[{i}]", "a non-zero integer", 0)
    else:  # slice: checked after the fit (item 5); the whole-axis rule reads them as given
        stride = tuple(c.raw["input_window_strides"])
    off = c.ints("input_window_offsets", rank)
    size = c.dims("input_window_sizes")
    for i, o in enumerate(off):
        if o < 0:
            c.fail(f"input_window_offsets[{i}]", "an integer >= 0", o)
    for i, s in enumerate(size):
        if isinstance(s, str):
            if not _whole_axis(off[i], s, stride[i], full[i]):
                c.fail(f"input_window_sizes[{i}]", f"an integer, or the symbol {full[i]!r} of a "
                       "whole-axis window (offset 0, stride 1 or -1)", repr(s))
        elif s < 1:
            c.fail(f"input_window_sizes[{i}]", "an integer >= 1", s)
    for i, s in enumerate(size):
        if isinstance(s, str):
            continue
        n = full[i]
        if isinstance(n, str):
            c.fail(f"{full_field}[{i}]", "a static size", repr(n))
        if off[i] + s > n:
            c.fail("input_window_sizes", f"offset + size <= {n} on axis {i}",
                   f"{off[i]} + {s} = {off[i] + s}")
    if zero_stride_ok:
        stride = c.ints("input_window_strides", rank)
    for k in WINDOW:  # attributes print in argument order, whatever order they were checked in
        c.attrs[k] = c.attrs.pop(k)
    return off, size, stride


@overload
def max_count(size: int, stride: int) -> int: ...
@overload
def max_count(size: Dim, stride: int) -> Dim: ...
def max_count(size: Dim, stride: int) -> Dim:
    """The largest (and default) result size of a window axis."""
    if isinstance(size, str):
        return size
    return 1 if stride == 0 else 1 + (size - 1) // abs(stride)


@register
class Slice(OpDef):
    """``slice(input, offsets, sizes, strides, output_sizes=None)``: a strided window: per axis,
    the window of ``input_window_sizes`` elements from ``input_window_offsets``, every
    ``input_window_strides``-th of them (a negative stride reads from the window's end; 0
    repeats the first element)."""

    name = "slice"
    numerics = "exact"
    operands = ("input",)
    attributes = WINDOW_ATTRS + (Attr("output_sizes", "dims", DERIVED),)
    traits = frozenset({"pure", "fusible"})
    dtypes = SLICE_DTYPES
    nan_from = ("input",)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        rank = c.rank_in("input", 1, 8)
        shape = c.t("input").shape
        off, size, stride = _window(c, rank, shape, "input.shape", zero_stride_ok=True)
        default = tuple(max_count(s, st) for s, st in zip(size, stride))
        out = c.dims("output_sizes", default=default)
        if len(out) != rank:
            c.fail("output_sizes", f"{rank} values (one per axis)", f"{len(out)} values")
        for i, (o, s, st) in enumerate(zip(out, size, stride)):
            if isinstance(s, str):
                if o != s:
                    c.fail(f"output_sizes[{i}]", f"{s!r} (the whole-axis window)", repr(o))
            elif isinstance(o, str) or o < 1 or (st != 0 and o > max_count(s, st)):
                hi = "" if st == 0 else f" and <= {max_count(s, st)}"
                c.fail(f"output_sizes[{i}]", f"an integer >= 1{hi}", repr(o))
        return [TensorType(c.t("input").dtype, out)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        out = [x.shape[i] if isinstance(o, str) else o for i, o in enumerate(attrs["output_sizes"])]
        idx = source_indices(attrs["input_window_offsets"], attrs["input_window_sizes"],
                             attrs["input_window_strides"], x.shape, out)
        return [x[np.ix_(*idx)]]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = slice(x, w)  =>  dx = slice_grad(dy, x.shape, w); stride-0 axes sum first."""
        (dy,) = grads
        if dy is None:
            return [None]
        a = node.attrs
        off, size, stride = (list(a[k]) for k in WINDOW)
        zero_axes = tuple(i for i, st in enumerate(stride) if st == 0)
        if zero_axes:
            dy = make_node("reduce_sum", [dy], {"axes": zero_axes, "keepdims": True})
            for i in zero_axes:
                size[i], stride[i] = 1, 1
        return [make_node("slice_grad", [dy], {
            "output_sizes": node.inputs[0].type.shape, "input_window_offsets": off,
            "input_window_sizes": size, "input_window_strides": stride})]


@register
class SliceGrad(OpDef):
    """``slice_grad(dy, output_sizes, offsets, sizes, strides)``: the transpose of ``slice``:
    a tensor of ``output_sizes`` holding dy at the window's positions and +0 elsewhere."""

    name = "slice_grad"
    numerics = "exact"
    operands = ("input_gradient",)
    attributes = (Attr("output_sizes", "dims"),) + WINDOW_ATTRS
    traits = frozenset({"pure", "fusible"})
    anchor_operand = "input_gradient"
    dtypes = SLICE_DTYPES
    nan_from = ("input_gradient",)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input_gradient", self.dtypes)
        rank = c.rank_in("input_gradient", 1, 8)
        out = c.dims("output_sizes")
        if len(out) != rank:
            c.fail("output_sizes", f"{rank} values (one per axis)", f"{len(out)} values")
        for i, o in enumerate(out):
            if not isinstance(o, str) and o < 1:
                c.fail(f"output_sizes[{i}]", "an integer >= 1", o)
        off, size, stride = _window(c, rank, out, "output_sizes", zero_stride_ok=False)
        dy_shape = c.t("input_gradient").shape
        for i, (d, s, st) in enumerate(zip(dy_shape, size, stride)):
            if isinstance(s, str):
                if d != s:
                    c.fail("input_gradient.shape", f"{s!r} on axis {i} (the whole-axis window)",
                           repr(d))
            elif isinstance(d, str):
                c.fail(f"input_gradient.shape[{i}]", "a static size", repr(d))
            elif not 1 <= d <= max_count(s, st):
                c.fail("input_gradient.shape", f"1..{max_count(s, st)} on axis {i}", d)
        return [TensorType(c.t("input_gradient").dtype, out)]

    def reference(self, attrs: Mapping[str, Any], dy: np.ndarray) -> list[np.ndarray]:
        full = [dy.shape[i] if isinstance(o, str) else o
                for i, o in enumerate(attrs["output_sizes"])]
        idx = source_indices(attrs["input_window_offsets"], attrs["input_window_sizes"],
                             attrs["input_window_strides"], full, dy.shape)
        dx = np.zeros(full, dy.dtype)
        dx[np.ix_(*idx)] = dy
        return [dx]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dx = slice_grad(dy, w)  =>  d(dy) = slice(d(dx), w) (slice_grad is linear)."""
        (g,) = grads
        if g is None:
            return [None]
        a = node.attrs
        return [make_node("slice", [g], {k: a[k] for k in WINDOW}
                          | {"output_sizes": node.inputs[0].type.shape})]
