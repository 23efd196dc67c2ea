"""C kernels of SPEC-training.md §15 (join, split, transpose, pad) and §18.1 (one_hot).

Every kernel moves bit patterns (buffers declared as unsigned integers of the element's width,
``Kernel.as_bits``), so -0.0 and NaN payloads are copied unchanged and nothing is converted.
Contiguous runs are ``memcpy``-ed; loops are OpenMP parallel over the outer axes.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gradc.ir.types import Dim

from gradc.backends.c.kernel import Kernel, omp_for
from gradc.backends.c.ctypes_map import Dims, ctype, strides


def bits_literal(value: Any, dtype: np.dtype) -> str:
    """The bit pattern of ``value`` converted to ``dtype``, as an unsigned C literal."""
    a = np.array(value, dtype)
    width = a.dtype.itemsize * 8
    bits = int(a.view(np.dtype(f"u{a.dtype.itemsize}")))
    if width == 64:
        return f"UINT64_C(0x{bits:x})"
    return f"((uint{width}_t)0x{bits:x}u)"


def _rows(dims: Dims, shape: Sequence[Dim], axis: int) -> tuple[str, str]:
    """(rows before ``axis``, elements from ``axis`` on): a tensor as rows of a contiguous run."""
    return dims.prod(shape[:axis]), dims.prod(shape[axis:])


def _pieces(k: Kernel, whole: Any, parts: Sequence[Any], gather: bool) -> None:
    """Copy between ``whole`` (the joined tensor) and ``parts`` along ``axis``: each row of the
    whole is the parts' rows one after another (join: gather=True; split: gather=False)."""
    dims, cw = k.dims, k.code
    axis = k.node.attrs["axis"]
    k.as_bits(whole, *parts)
    width = ctype(whole.type.dtype).width // 8
    outer, row = _rows(dims, whole.type.shape, axis)
    w = k.param(whole)
    cw.line(omp_for(dims.prod(whole.type.shape)))
    with cw.block(f"for (int64_t o = 0; o < {outer}; o++)"):
        offset = "0"
        for p in parts:
            run = dims.prod(p.type.shape[axis:])
            mine, theirs = f"{w} + o * {row} + {offset}", f"{k.param(p)} + o * {run}"
            dst, src = (mine, theirs) if gather else (theirs, mine)
            cw.line(f"memcpy({dst}, {src}, (size_t){run} * {width});")
            offset = f"{offset} + {run}" if offset != "0" else run


def emit_join(k: Kernel) -> None:
    """join: per row of the result, a ``memcpy`` of each input's row, in input order."""
    _pieces(k, k.node.outputs[0], list(k.node.inputs), gather=True)


def emit_split(k: Kernel) -> None:
    """split: per row of the input, a ``memcpy`` into each result's row."""
    _pieces(k, k.node.inputs[0], list(k.node.outputs), gather=False)


def emit_transpose(k: Kernel) -> None:
    """transpose: a loop nest over the result (stores contiguous), loads strided."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    dims = k.dims
    k.as_bits(x, y)
    perm = n.attrs["permutation"]
    xst = strides(dims, x.type.shape)
    yst = strides(dims, y.type.shape)
    r = len(perm)
    src = " + ".join(f"i{j} * {xst[perm[j]]}" for j in range(r))
    dst = " + ".join(f"i{j} * {yst[j]}" for j in range(r))
    heads = [f"for (int64_t i{j} = 0; i{j} < {dims.expr(d)}; i{j}++)"
             for j, d in enumerate(y.type.shape)]
    k.code.line(omp_for(dims.prod(y.type.shape), max(1, r - 1)))
    with k.code.under(*heads):
        k.code.line(f"{k.param(y)}[{dst}] = {k.param(x)}[{src}];")


def emit_pad(k: Kernel) -> None:
    """pad: per result row, padding values around a ``memcpy`` of the input row (or all
    padding for a row outside the input)."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    dims, cw = k.dims, k.code
    k.as_bits(x, y)
    sp, ep = n.attrs["start_padding"], n.attrs["end_padding"]
    value = bits_literal(n.attrs["padding_value"], x.type.dtype.numpy)
    bits = ctype(x.type.dtype).bits
    xs, ys = x.type.shape, y.type.shape
    r = len(xs)
    xst, yst = strides(dims, xs), strides(dims, ys)
    width = ctype(x.type.dtype).width // 8
    yp, xp = k.param(y), k.param(x)
    cw.line(f"const {bits} pv = {value};")
    heads = [f"for (int64_t i{j} = 0; i{j} < {dims.expr(ys[j])}; i{j}++)" for j in range(r - 1)]
    if r > 1:
        cw.line(omp_for(dims.prod(ys), max(1, r - 2)))
    inside = [f"i{j} >= {sp[j]} && i{j} < {sp[j]} + {dims.expr(xs[j])}"
              for j in range(r - 1) if sp[j] or ep[j]]
    yb = " + ".join([f"i{j} * {yst[j]}" for j in range(r - 1)]) or "0"
    xb = " + ".join([f"(i{j} - {sp[j]}) * {xst[j]}" for j in range(r - 1)]) or "0"
    last, full = dims.expr(xs[-1]), dims.expr(ys[-1])
    with cw.under(*heads), cw.block():
        cw.line(f"{bits} *restrict row = {yp} + {yb};")
        with cw.block(f"if ({' && '.join(inside) or '1'})"):
            cw.line(f"for (int64_t q = 0; q < {sp[-1]}; q++) row[q] = pv;",
                    f"memcpy(row + {sp[-1]}, {xp} + {xb}, (size_t){last} * {width});",
                    f"for (int64_t q = {sp[-1]} + {last}; q < {full}; q++) row[q] = pv;")
        with cw.orelse():
            cw.line(f"for (int64_t q = 0; q < {full}; q++) row[q] = pv;")


def emit_one_hot(k: Kernel) -> None:
    """one_hot: each result element is ``values[1]`` where its position on ``axis`` equals the
    index (negative indices count from the end), else ``values[0]``."""
    n = k.node
    ind, vals, y = n.inputs[0], n.inputs[1], n.outputs[0]
    dims, cw = k.dims, k.code
    k.as_bits(vals, y)
    axis = n.attrs["axis"]
    shape = y.type.shape
    outer, depth, inner = (dims.prod(shape[:axis]), dims.expr(shape[axis]),
                           dims.prod(shape[axis + 1:]))
    bits = ctype(y.type.dtype).bits
    vp = k.param(vals)
    cw.line(f"const {bits} off = {vp}[0], on = {vp}[1];")
    load = f"{k.param(ind)}[o * {inner} + i]"
    if ctype(ind.type.dtype).signed:
        pos = [f"int64_t v = (int64_t){load};", f"if (v < 0) v += {depth};",
               "const int match = v == j;"]
    else:
        pos = [f"const uint64_t v = (uint64_t){load};", "const int match = v == (uint64_t)j;"]
    cw.line(omp_for(dims.prod(shape), 2))
    with cw.under(f"for (int64_t o = 0; o < {outer}; o++)",
                  f"for (int64_t j = 0; j < {depth}; j++)"), cw.block():
        with cw.block(f"for (int64_t i = 0; i < {inner}; i++)"):
            cw.line(*pos, f"{k.param(y)}[(o * {depth} + j) * {inner} + i] = match ? on : off;")


EMITTERS: dict[str, Any] = {
    "join": emit_join, "split": emit_split, "transpose": emit_transpose, "pad": emit_pad,
    "one_hot": emit_one_hot,
}
