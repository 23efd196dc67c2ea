"""Average pooling and its gradient (SPEC-training.md §13): gathers, a thread per element.

- forward: a thread per output element; the taps of its window inside the input, per axis the
  range ``klo..khi`` of tap numbers, summed in row-major tap order from +0 in ``ACC``, then
  divided once by the window's count (§13.1's divisor: taps inside, or inside the padded extent
  with ``include_padding``);
- gradient: a thread per element of dX, gathering: per axis the output coordinates
  ``olo..ohi`` whose windows have a tap on it (a multiple of the dilation away), in increasing
  row-major order -- the order in which §13.2's scatter over dY reaches the element -- each
  adding its ``dY/count``, rounded, from +0 in ``ACC``.

Each element is written by one thread, once: no atomics, the reference's order, so the results
are the reference's bits (the C target's kernels compute the same, one element per iteration).
Shapes are static; positions are int64 and the attributes are refused (UnsupportedError) where
a position or a count could reach 2**62.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from gradc.backends.c.average_window import KEYS, check_bounds, tap_range
from gradc.backends.c.ctypes_map import ctype
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.writer import CWriter
from gradc.backends.cuda.kernel import CudaKernel, row_major, static_shape

def _count(cw: CWriter, spatial: Sequence[int], attrs: Any, o: Sequence[str],
           have_inside: bool) -> None:
    """``cnt``: the divisor of window ``o`` (int64); ``have_inside``: the inside ranges are
    declared already."""
    inside = not attrs["include_padding"]
    x = "" if inside else "p"
    cw.line("int64_t cnt = 1;")
    for i, n in enumerate(spatial):
        if not (inside and have_inside):
            tap_range(cw, i, n, attrs, o[i], inside)
        cw.line(f"cnt *= khi{x}{i} >= klo{x}{i} ? khi{x}{i} - klo{x}{i} + 1 : 0;")


def emit_average_pooling(k: CudaKernel) -> None:
    """Window sums over the taps inside, in row-major order, divided once by the count."""
    node, attrs = k.node, k.node.attrs
    x, y = node.inputs[0], node.outputs[0]
    t = ctype(x.type.dtype)
    xs, ys = static_shape(k, x.type.shape), static_shape(k, y.type.shape)
    spatial, out = xs[2:], ys[2:]
    check_bounds("cuda", "average_pooling", spatial, out, attrs)
    nd = len(spatial)
    xst, ost = row_major(spatial), row_major(out)
    px, py = k.param(x), k.param(y)
    cw = k.code
    with k.each(math.prod(ys)) as e:
        cw.line(f"const int64_t pl = {e} / {math.prod(out)};",
                f"const int64_t r = {e} % {math.prod(out)};",
                f"const {t.store} *xp = {px} + pl * {math.prod(spatial)};")
        for i in range(nd):
            cw.line(f"const int64_t o{i} = r / {ost[i]} % {out[i]};")
            tap_range(cw, i, spatial[i], attrs, f"o{i}", True)
        cw.line(f"{t.acc} acc = 0;")
        heads = [f"for (int64_t k{i} = klo{i}; k{i} <= khi{i}; k{i}++)" for i in range(nd)]
        with cw.blocks(heads):
            q = " + ".join(f"(t{i} + k{i} * {attrs['dilations'][i]}) * {xst[i]}"
                           for i in range(nd))
            cw.line(f"acc = acc + ({t.acc}){widen(t, f'xp[{q}]')};")
        _count(cw, spatial, attrs, [f"o{i}" for i in range(nd)], True)
        cw.line(f"const {t.acc} v = cnt ? acc / ({t.acc})cnt : ({t.acc})0;",
                f"{py}[{e}] = {narrow(t, 'v')};")


def emit_average_pooling_grad(k: CudaKernel) -> None:
    """dX gathered: the windows covering each element in increasing order, dY/count each."""
    node, attrs = k.node, k.node.attrs
    dy, dx = node.inputs[0], node.outputs[0]
    t = ctype(dy.type.dtype)
    gs, xs = static_shape(k, dy.type.shape), static_shape(k, dx.type.shape)
    spatial, out = xs[2:], gs[2:]
    check_bounds("cuda", "average_pooling_grad", spatial, out, attrs)
    nd = len(spatial)
    xst, ost = row_major(spatial), row_major(out)
    pdy, pdx = k.param(dy), k.param(dx)
    cw = k.code
    with k.each(math.prod(xs)) as e:
        cw.line(f"const int64_t pl = {e} / {math.prod(spatial)};",
                f"const int64_t r = {e} % {math.prod(spatial)};",
                f"const {t.store} *gp = {pdy} + pl * {math.prod(out)};")
        for i in range(nd):
            w, s, sp, _, d = (attrs[f][i] for f in KEYS)
            cw.line(f"const int64_t x{i} = r / {xst[i]} % {spatial[i]} + {sp};",
                    f"const int64_t v{i} = x{i} - {(w - 1) * d};",
                    f"const int64_t olo{i} = v{i} <= 0 ? 0 : (v{i} + {s - 1}) / {s};",
                    f"int64_t ohi{i} = x{i} / {s};",
                    f"if (ohi{i} > {out[i] - 1}) ohi{i} = {out[i] - 1};")
        cw.line(f"{t.acc} acc = 0;")
        heads = [f"for (int64_t o{i} = olo{i}; o{i} <= ohi{i}; o{i}++)" for i in range(nd)]
        with cw.blocks(heads):
            for i in range(nd):
                s, d = attrs["strides"][i], attrs["dilations"][i]
                if d != 1:
                    cw.line(f"if ((x{i} - o{i} * {s}) % {d} != 0) continue;")
            _count(cw, spatial, attrs, [f"o{i}" for i in range(nd)], False)
            off = " + ".join(f"o{i} * {ost[i]}" for i in range(nd))
            cw.line(f"const {t.acc} term = ({t.acc}){widen(t, f'gp[{off}]')} / ({t.acc})cnt;",
                    "acc = acc + term;")
        cw.line(f"{pdx}[{e}] = {narrow(t, 'acc')};")


EMITTERS: dict[str, Any] = {
    "average_pooling": emit_average_pooling,
    "average_pooling_grad": emit_average_pooling_grad,
}
