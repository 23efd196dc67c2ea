"""float64 lowerings of convolution and convolution_filter_grad, tap by tap (SPEC-training §10).

onnxruntime has no double ``Conv`` or ``ConvTranspose``. A convolution is a sum over filter taps
of a channel contraction, and ``MatMul`` (which onnxruntime has for double) contracts the
channels of every group at once: (g, Co/g, Ci/g) @ (N, g, Ci/g, positions).

- forward: ``Pad`` the input, then per tap a strided ``Slice`` (the input each output reads
  through that tap) and a ``MatMul`` with the tap's filter slice; the terms are added up;
- backward: the input zero-upsampled by the strides, then per tap a ``MatMul`` with the tap's
  (transposed) filter slice, ``Pad``-ded to its place in the full output, added up and cropped;
- filter gradient: per tap, a ``MatMul`` contracting batch and positions of the iterated tensor
  with the strided ``Slice`` of the (padded) other tensor; the taps are concatenated.

The node count grows with the number of filter taps (``MAX_TAPS``). Also here: the helpers the
float32 lowerings share (``flip``, ``crop``, ``transpose``).
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

from gradc.backends.onnx.builder import INT64_MIN, OnnxGraphBuilder, Tensor
from gradc.errors import UnsupportedError
from gradc.ir.core import Node
from gradc.ir.types import Dim

MAX_TAPS = 4096  # filter taps a float64 convolution may have in the exported model


def flip(gb: OnnxGraphBuilder, w: Tensor) -> Tensor:
    """The tensor reversed on every spatial axis (an exact copy)."""
    nd = w.rank - 2
    return gb.op("Slice", [w, gb.ints([-1] * nd), gb.ints([INT64_MIN] * nd),
                           gb.ints(range(2, w.rank)), gb.ints([-1] * nd)], w.dtype, w.shape)


def transpose(gb: OnnxGraphBuilder, t: Tensor, perm: list[int]) -> Tensor:
    """``Transpose`` with ``perm``."""
    return gb.op("Transpose", [t], t.dtype, tuple(t.shape[p] for p in perm), perm=perm)


def pad(gb: OnnxGraphBuilder, t: Tensor, start: Sequence[int], end: Sequence[int]) -> Tensor:
    """Zeros before and after the spatial axes (nothing when both are 0)."""
    if not any(start) and not any(end):
        return t
    shape = tuple(t.shape[:2]) + tuple(int(n) + a + b for n, a, b in
                                       zip(t.shape[2:], start, end))
    return gb.op("Pad", [t, gb.ints([0, 0, *start, 0, 0, *end])], t.dtype, shape)


def crop(gb: OnnxGraphBuilder, y: Tensor, start: Sequence[int], out: Sequence[int]) -> Tensor:
    """Spatial positions ``start .. start + out`` of ``y``, zeros past its end."""
    full = [int(v) for v in y.shape[2:]]
    y = pad(gb, y, [0] * len(out), [max(0, s + o - f) for s, o, f in zip(start, out, full)])
    full = [int(v) for v in y.shape[2:]]
    if list(start) != [0] * len(out) or list(out) != full:
        y = gb.op("Slice", [y, gb.ints(start), gb.ints([s + o for s, o in zip(start, out)]),
                            gb.ints(range(2, y.rank))], y.dtype, tuple(y.shape[:2]) + tuple(out))
    return y


def _taps(node: Node, ks: Sequence[int]) -> list[tuple[int, ...]]:
    if math.prod(ks) > MAX_TAPS:
        raise UnsupportedError(f"to_onnx: {node.op}: float64: expected at most {MAX_TAPS} "
                               f"filter taps (built one by one), got {math.prod(ks)}")
    return list(itertools.product(*(range(k) for k in ks)))


def _tap_slice(gb: OnnxGraphBuilder, t: Tensor, k: Sequence[int], d: Sequence[int],
               s: Sequence[int], count: Sequence[int]) -> Tensor:
    """Positions ``k*d + q*s`` (``q < count``) of every spatial axis."""
    starts = [k[i] * d[i] for i in range(len(k))]
    ends = [starts[i] + (count[i] - 1) * s[i] + 1 for i in range(len(k))]
    return gb.op("Slice", [t, gb.ints(starts), gb.ints(ends), gb.ints(range(2, t.rank)),
                           gb.ints(s)], t.dtype, tuple(t.shape[:2]) + tuple(count))


def _filter_tap(gb: OnnxGraphBuilder, w: Tensor, k: Sequence[int], g: int) -> Tensor:
    """The filter's tap ``k`` as (g, w.shape[0]/g, w.shape[1])."""
    nd = len(k)
    wk = gb.op("Slice", [w, gb.ints(k), gb.ints([v + 1 for v in k]), gb.ints(range(2, 2 + nd))],
               w.dtype, tuple(w.shape[:2]) + (1,) * nd)
    a, b = int(w.shape[0]), int(w.shape[1])
    return gb.reshape(wk, (g, a // g, b), [g, a // g, b])


def _sum(gb: OnnxGraphBuilder, acc: Tensor | None, t: Tensor) -> Tensor:
    return t if acc is None else gb.binary("Add", acc, t)


def lower_convolution64(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """convolution in float64: per-tap ``MatMul``s, then the bias."""
    x, w = args[0], args[1]
    a = node.attrs
    s, d, sp, ep, g = (list(a["strides"]), list(a["dilations"]), list(a["start_padding"]),
                       list(a["end_padding"]), int(a["group_count"]))
    if a["mode"] == "convolution":
        w = flip(gb, w)
    y_shape = node.outputs[0].type.shape
    out = [int(v) for v in y_shape[2:]]
    if a["direction"] == "forward":
        y = _forward(gb, node, x, w, s, d, sp, ep, g, out)
    else:
        y = crop(gb, _backward(gb, node, x, w, s, d, g), sp, out)
    if len(args) > 2:
        y = gb.binary("Add", y, args[2])
    return [y]


def _forward(gb: OnnxGraphBuilder, node: Node, x: Tensor, w: Tensor, s: list[int],
             d: list[int], sp: list[int], ep: list[int], g: int, out: list[int]) -> Tensor:
    n, ci, co = x.shape[0], int(x.shape[1]), int(w.shape[0])
    cells = math.prod(out)
    xp = pad(gb, x, sp, ep)
    acc = None
    for k in _taps(node, [int(v) for v in w.shape[2:]]):
        xk = _tap_slice(gb, xp, k, d, s, out)
        xk = gb.reshape(xk, (n, g, ci // g, cells), [0, g, ci // g, cells])
        wk = _filter_tap(gb, w, k, g)
        acc = _sum(gb, acc, gb.op("MatMul", [wk, xk], x.dtype, (n, g, co // g, cells)))
    assert acc is not None
    return gb.reshape(acc, (n, co, *out), [0, co, *out])


def _upsample(gb: OnnxGraphBuilder, x: Tensor, s: list[int]) -> Tensor:
    """``x`` with ``s - 1`` zeros between neighbours on every spatial axis."""
    for i, st in enumerate(s):
        if st == 1:
            continue
        ax = 2 + i
        shape = list(x.shape)
        n = int(shape[ax])
        wide = gb.unsqueeze(x, ax + 1)
        pads = [0] * (2 * wide.rank)
        pads[wide.rank + ax + 1] = st - 1
        wide = gb.op("Pad", [wide, gb.ints(pads)], x.dtype,
                     tuple(shape[:ax + 1]) + (st,) + tuple(shape[ax + 1:]))
        shape[ax] = n * st
        spec = [0] + [int(v) for v in shape[1:]]
        x = gb.reshape(wide, tuple(shape), spec)
        shape[ax] = (n - 1) * st + 1
        x = gb.op("Slice", [x, gb.ints([0]), gb.ints([(n - 1) * st + 1]), gb.ints([ax])],
                  x.dtype, tuple(shape))
    return x


def _backward(gb: OnnxGraphBuilder, node: Node, x: Tensor, w: Tensor, s: list[int],
              d: list[int], g: int) -> Tensor:
    n, ci, cog = x.shape[0], int(x.shape[1]), int(w.shape[1])
    ks = [int(v) for v in w.shape[2:]]
    xu = _upsample(gb, x, s)
    us = [int(v) for v in xu.shape[2:]]
    cells = math.prod(us)
    xu = gb.reshape(xu, (n, g, ci // g, cells), [0, g, ci // g, cells])
    acc = None
    for k in _taps(node, ks):
        wk = transpose(gb, _filter_tap(gb, w, k, g), [0, 2, 1])
        t = gb.op("MatMul", [wk, xu], x.dtype, (n, g, cog, cells))
        t = gb.reshape(t, (n, g * cog, *us), [0, g * cog, *us])
        t = pad(gb, t, [k[i] * d[i] for i in range(len(k))],
                [(ks[i] - 1 - k[i]) * d[i] for i in range(len(k))])
        acc = _sum(gb, acc, t)
    assert acc is not None
    return acc


def times(g: int, n: Dim) -> Dim:
    """The dim ``g * n`` (a made-up symbol name when ``n`` is one: bookkeeping only)."""
    return g * n if isinstance(n, int) else f"{g}*{n}"


def lower_convolution_filter_grad64(gb: OnnxGraphBuilder, node: Node,
                                    args: Sequence[Tensor]) -> list[Tensor]:
    """convolution_filter_grad in float64: one ``MatMul`` per tap, concatenated."""
    x, dy = args
    a = node.attrs
    s, d, sp, g = (list(a["strides"]), list(a["dilations"]), list(a["start_padding"]),
                   int(a["group_count"]))
    it, other = (dy, x) if a["direction"] == "forward" else (x, dy)
    sizes = [int(v) for v in a["output_sizes"]]
    ca, cf, ks = sizes[0] // g, sizes[1], sizes[2:]
    n, nd = x.shape[0], len(ks)
    qs, ps = [int(v) for v in it.shape[2:]], [int(v) for v in other.shape[2:]]
    cells = math.prod(qs)
    ep = [max(0, (qs[i] - 1) * s[i] + (ks[i] - 1) * d[i] + 1 - sp[i] - ps[i]) for i in range(nd)]
    op = pad(gb, other, sp, ep)
    itr = gb.reshape(it, (n, g, ca, cells), [0, g, ca, cells])
    itr = transpose(gb, itr, [1, 2, 0, 3])
    itr = gb.reshape(itr, (g, ca, times(cells, n)), [g, ca, -1])
    cols = []
    for k in _taps(node, ks):
        ok = _tap_slice(gb, op, k, d, s, qs)
        ok = gb.reshape(ok, (n, g, cf, cells), [0, g, cf, cells])
        ok = transpose(gb, ok, [1, 0, 3, 2])
        ok = gb.reshape(ok, (g, times(cells, n), cf), [g, -1, cf])
        t = gb.op("MatMul", [itr, ok], x.dtype, (g, ca, cf))
        cols.append(gb.reshape(t, (g * ca, cf, 1), [g * ca, cf, 1]))
    r = cols[0] if len(cols) == 1 else gb.op("Concat", cols, x.dtype,
                                             (g * ca, cf, len(cols)), axis=2)
    r = gb.reshape(r, (g * ca, cf, *ks), [g * ca, cf, *ks])
    if a["mode"] == "convolution":
        r = flip(gb, r)
    return [r]
