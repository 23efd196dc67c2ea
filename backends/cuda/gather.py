"""Selections and movements as gathers: a thread per output element reads its source.

slice, transpose, pad, reshape (a copy), join, split and one_hot. Each output element is
written by exactly one thread, once; nothing is summed, so there is no order to keep. Buffers
are declared as unsigned integers of the element's width (``Kernel.as_bits``): bit patterns
move unchanged (-0.0 and NaN payloads included), as in the C target.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradc.ir.ops.slice import copy_start

from gradc.backends.c.ctypes_map import ctype
from gradc.backends.cuda.kernel import CudaKernel, coords, row_major, static_shape


def bits_literal(value: Any, dtype: np.dtype) -> str:
    """The bit pattern of ``value`` converted to ``dtype``, as an unsigned C literal."""
    a = np.array(value, dtype)
    bits = int(a.view(np.dtype(f"u{a.dtype.itemsize}")))
    return f"UINT64_C(0x{bits:x})" if a.dtype.itemsize == 8 else \
        f"((uint{a.dtype.itemsize * 8}_t)0x{bits:x}u)"


def _total(sizes: list[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def _offset(terms: list[tuple[str, int]]) -> str:
    """``c0 * s0 + c1 * s1 + ...`` without unit strides' factors (``0`` for none)."""
    parts = [c if s == 1 else f"{c} * {s}" for c, s in terms if s != 0]
    return " + ".join(parts) or "0"


def emit_copy(k: CudaKernel) -> None:
    """reshape: the same elements in a new shape."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    k.as_bits(x, y)
    with k.each(_total(static_shape(k, y.type.shape))) as i:
        k.code.line(f"{k.param(y)}[{i}] = {k.param(x)}[{i}];")


def emit_slice(k: CudaKernel) -> None:
    """y[c] = x[start + stride * c] per axis (a negative stride starts at the window's end)."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    k.as_bits(x, y)
    a = n.attrs
    xs, ys = static_shape(k, x.type.shape), static_shape(k, y.type.shape)
    sizes = static_shape(k, a["input_window_sizes"])
    start = copy_start(a["input_window_offsets"], sizes, a["input_window_strides"], xs)
    xst = row_major(xs)
    with k.each(_total(ys)) as i:
        c = coords(k, y.type.shape, i, "c")
        src = _offset([(f"({s} + {st} * {ca})" if st != 1 or s else ca, xst[ax])
                       for ax, (s, st, ca) in enumerate(zip(start, a["input_window_strides"],
                                                            c))])
        k.code.line(f"{k.param(y)}[{i}] = {k.param(x)}[{src}];")


def emit_transpose(k: CudaKernel) -> None:
    """y[c] = x[c permuted back]."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    k.as_bits(x, y)
    perm = n.attrs["permutation"]
    xst = row_major(static_shape(k, x.type.shape))
    with k.each(_total(static_shape(k, y.type.shape))) as i:
        c = coords(k, y.type.shape, i, "c")
        src = _offset([(c[j], xst[perm[j]]) for j in range(len(perm))])
        k.code.line(f"{k.param(y)}[{i}] = {k.param(x)}[{src}];")


def emit_pad(k: CudaKernel) -> None:
    """y[c] = x[c - start] inside the input's box, the padding value outside."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    k.as_bits(x, y)
    sp = n.attrs["start_padding"]
    xs = static_shape(k, x.type.shape)
    xst = row_major(xs)
    value = bits_literal(n.attrs["padding_value"], x.type.dtype.numpy)
    with k.each(_total(static_shape(k, y.type.shape))) as i:
        c = coords(k, y.type.shape, i, "c")
        inside = [f"{ca} >= {s} && {ca} < {s + size}" if s else f"{ca} < {size}"
                  for ca, s, size in zip(c, sp, xs)]
        src = _offset([(f"({ca} - {s})" if s else ca, st)
                       for ca, s, st in zip(c, sp, xst)])
        k.code.line(f"{k.param(y)}[{i}] = ({' && '.join(inside) or '1'}) ? "
                    f"{k.param(x)}[{src}] : {value};")


def _parts(k: CudaKernel, whole: Any, parts: list[Any], gather: bool) -> None:
    """Between ``whole`` and ``parts`` along ``axis``: a thread per element of ``whole``,
    which lies in the part whose run of the axis holds its coordinate."""
    axis = k.node.attrs["axis"]
    k.as_bits(whole, *parts)
    ws = static_shape(k, whole.type.shape)
    inner = _total(ws[axis + 1:])
    with k.each(_total(ws)) as i:
        k.code.line(f"const int64_t o = {i} / {inner * ws[axis]};",
                    f"const int64_t a = {i} / {inner} % {ws[axis]};",
                    f"const int64_t r = {i} % {inner};")
        lo = 0
        for j, p in enumerate(parts):
            size = static_shape(k, p.type.shape)[axis]
            at = f"(o * {size} + (a - {lo})) * {inner} + r"
            mine, theirs = f"{k.param(whole)}[{i}]", f"{k.param(p)}[{at}]"
            head = "if" if j == 0 else "else if"
            cond = f"a < {lo + size}" if j < len(parts) - 1 else ""
            stmt = f"{mine} = {theirs};" if gather else f"{theirs} = {mine};"
            k.code.line(f"{head} ({cond}) {stmt}" if cond else
                        (f"else {stmt}" if j else stmt))
            lo += size


def emit_join(k: CudaKernel) -> None:
    """join: each element of the result copied from the input whose run holds it."""
    _parts(k, k.node.outputs[0], list(k.node.inputs), gather=True)


def emit_split(k: CudaKernel) -> None:
    """split: each element of the input copied into the result whose run holds it."""
    _parts(k, k.node.inputs[0], list(k.node.outputs), gather=False)


def emit_one_hot(k: CudaKernel) -> None:
    """one_hot: ``values[1]`` where the position on ``axis`` equals the index (negative
    indices count from the end), else ``values[0]``."""
    n = k.node
    ind, vals, y = n.inputs[0], n.inputs[1], n.outputs[0]
    k.as_bits(vals, y)
    axis = n.attrs["axis"]
    ys = static_shape(k, y.type.shape)
    depth, inner = ys[axis], _total(ys[axis + 1:])
    vp = k.param(vals)
    with k.each(_total(ys)) as i:
        load = f"{k.param(ind)}[{i} / {depth * inner} * {inner} + {i} % {inner}]"
        k.code.line(f"const int64_t j = {i} / {inner} % {depth};")
        if ctype(ind.type.dtype).signed:
            k.code.line(f"int64_t v = (int64_t){load};", f"if (v < 0) v += {depth};",
                        "const int match = v == j;")
        else:
            k.code.line(f"const uint64_t v = (uint64_t){load};",
                        "const int match = v == (uint64_t)j;")
        k.code.line(f"{k.param(y)}[{i}] = match ? {vp}[1] : {vp}[0];")


EMITTERS: dict[str, Any] = {
    "reshape": emit_copy, "slice": emit_slice, "transpose": emit_transpose, "pad": emit_pad,
    "join": emit_join, "split": emit_split, "one_hot": emit_one_hot,
}
