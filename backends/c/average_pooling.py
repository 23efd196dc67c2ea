"""C kernels of SPEC-training.md §13: average pooling and its gradient, in the canonical order.

- forward: one output element per iteration (OpenMP over all of them); the taps inside the
  input, per axis the range ``klo..khi`` computed at run time, are summed in row-major order
  from +0 in the accumulation type, then divided once by the count;
- gradient: one input element per iteration, gathering: the windows that cover it, per axis the
  range of output coordinates ``olo..ohi`` whose window has a tap there (the tap position must
  be a multiple of the dilation away), visited in increasing row-major order, each adding its
  ``dY/count`` (rounded), which is §13.2's scatter order seen from the receiving element.

Every run-time index is int64; the emitter refuses (UnsupportedError) attributes whose
positions or counts could reach 2**62. No table sized by a tensor dim is written.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from gradc.backends.c.average_window import KEYS, check_bounds, tap_range
from gradc.backends.c.ctypes_map import ctype
from gradc.backends.c.kernel import Kernel, omp_for
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.writer import CWriter

def _strides(shape: Sequence[int]) -> list[int]:
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def _window_count(cw: CWriter, spatial: Sequence[int], attrs: Any, o: Sequence[str]) -> None:
    """``cnt``: the divisor of window ``o`` (int64)."""
    inside = not attrs["include_padding"]
    sfx = "" if inside else "p"
    cw.line("int64_t cnt = 1;")
    for i, n in enumerate(spatial):
        if not inside:
            tap_range(cw, i, n, attrs, o[i], False)
        cw.line(f"cnt *= khi{sfx}{i} >= klo{sfx}{i} ? khi{sfx}{i} - klo{sfx}{i} + 1 : 0;")


def emit_average_pooling(k: Kernel) -> None:
    """Window sums over the taps inside, in row-major order, divided once by the count."""
    node, attrs = k.node, k.node.attrs
    x, y = node.inputs[0], node.outputs[0]
    t = ctype(x.type.dtype)
    spatial = [int(v) for v in x.type.shape[2:]]
    out = [int(v) for v in y.type.shape[2:]]
    check_bounds("c", "average_pooling", spatial, out, attrs)
    nd = len(spatial)
    xst, ost = _strides(spatial), _strides(out)
    px, py = k.param(x), k.param(y)
    cw = k.code
    cw.line(f"const int64_t E = {k.dims.prod(x.type.shape[:2])} * {math.prod(out)};")
    cw.line(omp_for(f"(double)E * {min(math.prod(attrs['window_size']), 2 ** 53)}"))
    with cw.block("for (int64_t e = 0; e < E; e++)"):
        cw.line(f"const int64_t p = e / {math.prod(out)};",
                f"const int64_t r = e % {math.prod(out)};",
                f"const {t.store} *xp = {px} + p * {math.prod(spatial)};")
        for i in range(nd):
            cw.line(f"const int64_t o{i} = r / {ost[i]} % {out[i]};")
            tap_range(cw, i, spatial[i], attrs, f"o{i}", True)
        cw.line(f"{t.acc} acc = 0;")
        blocks = []
        for i in range(nd):
            d = attrs["dilations"][i]
            blocks.append(cw.block(f"for (int64_t k{i} = klo{i}; k{i} <= khi{i}; k{i}++)"))
            blocks[-1].__enter__()
            cw.line(f"const int64_t q{i} = q{i - 1} + (t{i} + k{i} * {d}) * {xst[i]};"
                    if i else f"const int64_t q0 = (t0 + k0 * {d}) * {xst[0]};")
        cw.line(f"acc = acc + ({t.acc}){widen(t, f'xp[q{nd - 1}]')};")
        for b in reversed(blocks):
            b.__exit__(None, None, None)
        _window_count(cw, spatial, attrs, [f"o{i}" for i in range(nd)])
        cw.line(f"const {t.acc} v = cnt ? acc / ({t.acc})cnt : ({t.acc})0;",
                f"{py}[e] = {narrow(t, 'v')};")


def emit_average_pooling_grad(k: Kernel) -> None:
    """dX gathered: the windows covering each element in increasing order, dY/count each."""
    node, attrs = k.node, k.node.attrs
    dy, dx = node.inputs[0], node.outputs[0]
    t = ctype(dy.type.dtype)
    spatial = [int(v) for v in dx.type.shape[2:]]
    out = [int(v) for v in dy.type.shape[2:]]
    check_bounds("c", "average_pooling_grad", spatial, out, attrs)
    nd = len(spatial)
    xst, ost = _strides(spatial), _strides(out)
    pdy, pdx = k.param(dy), k.param(dx)
    cw = k.code
    cw.line(f"const int64_t E = {k.dims.prod(dx.type.shape[:2])} * {math.prod(spatial)};")
    cw.line(omp_for(f"(double)E * {min(math.prod(out), 2 ** 53)}"))
    with cw.block("for (int64_t e = 0; e < E; e++)"):
        cw.line(f"const int64_t p = e / {math.prod(spatial)};",
                f"const int64_t r = e % {math.prod(spatial)};",
                f"const {t.store} *gp = {pdy} + p * {math.prod(out)};")
        for i in range(nd):
            w, s, sp, _, d = (attrs[f][i] for f in KEYS)
            cw.line(f"const int64_t x{i} = r / {xst[i]} % {spatial[i]} + {sp};",
                    f"const int64_t v{i} = x{i} - {(w - 1) * d};",
                    f"const int64_t olo{i} = v{i} <= 0 ? 0 : (v{i} + {s - 1}) / {s};",
                    f"int64_t ohi{i} = x{i} / {s};",
                    f"if (ohi{i} > {out[i] - 1}) ohi{i} = {out[i] - 1};")
        cw.line(f"{t.acc} acc = 0;")
        blocks = []
        for i in range(nd):
            s, d = attrs["strides"][i], attrs["dilations"][i]
            blocks.append(cw.block(f"for (int64_t o{i} = olo{i}; o{i} <= ohi{i}; o{i}++)"))
            blocks[-1].__enter__()
            if d != 1:
                cw.line(f"if ((x{i} - o{i} * {s}) % {d} != 0) continue;")
        _window_count_inner(cw, spatial, attrs, nd)
        off = " + ".join(f"o{i} * {ost[i]}" for i in range(nd))
        cw.line(f"const {t.acc} term = ({t.acc}){widen(t, f'gp[{off}]')} / ({t.acc})cnt;",
                "acc = acc + term;")
        for b in reversed(blocks):
            b.__exit__(None, None, None)
        cw.line(f"{pdx}[e] = {narrow(t, 'acc')};")


def _window_count_inner(cw: CWriter, spatial: Sequence[int], attrs: Any, nd: int) -> None:
    """``cnt`` of window ``o0..`` inside the grad's loops (the inside ranges computed here)."""
    if not attrs["include_padding"]:
        for i in range(nd):
            tap_range(cw, i, spatial[i], attrs, f"o{i}", True)
    _window_count(cw, spatial, attrs, [f"o{i}" for i in range(nd)])


EMITTERS: dict[str, Any] = {
    "average_pooling": emit_average_pooling,
    "average_pooling_grad": emit_average_pooling_grad,
}
