"""convolution and convolution_filter_grad (SPEC-training.md §10) on the cuda target: implicit
GEMMs through ``tiled.py``, the input read in place (the im2col index computed while staging);
a 2-D unit-stride layer of few output channels takes ``stencil.py``'s direct convolution, and
under ``sums="split"`` the filter gradient of a 2-D forward layer of few output channels, or of
a first layer (few input channels, any strides), ``stencil_grad.py``'s (each module's ``plan``
decides, from the same products' terms and epilogues as below).

Each op is one product per group ``z`` whose terms run in the reference's canonical order:

- **convolution, forward**: ``Y[nb, z*cog + m, o] = sum over kk = (ci, tap) of W[z*cog + m, ci,
  tap'] * X[nb, z*cig + ci, o*s - sp + tap*d]``: channels, then taps in row-major order
  (``tap'`` is the tap, or its mirror for ``mode="convolution"``); a position in the padding is
  a skipped term.
- **convolution, backward** (transposed): ``Y[nb, z*cog + m, o]`` sums, channel by channel, the
  input positions ``i`` in row-major order with ``i*s - sp + tap*d = o``: the taps in reversed
  row-major order, each giving ``i = (o + sp - tap*d) / s``; a tap whose ``i`` lies outside the
  input is a skipped term. With a stride above 1 only the taps with ``tap*d = o + sp`` modulo
  the stride give an integer ``i``: the output positions are split by that residue into phases,
  one product each over its own taps (``_emit_phases``), so no term is visited to be skipped
  for its residue.
- **convolution_filter_grad**: ``dW[z*ca + m, f1, tap] = sum over kk = (nb, q) of it[nb, z*ca +
  m, q] * other[nb, z*cf + f1, q*s - sp + tap'*d]``, images then positions of ``it`` in
  row-major order, where ``it`` is dY and ``other`` X in the forward direction, and the other
  way round in the backward direction (§10.2's two loops are one with the roles exchanged).

A relu of a forward convolution's result (``plan.relu_epilogues``: float32 and float64) is
applied as each element is stored, as the relu kernel selects (``v > 0 ? v : +0``).

The filter (the filter gradient's ``it``) is the product's ``A``: the factor that meets the
skipped terms, whose non-finite values the tiled kernel checks per chunk. A bias is added to the
finished sum, one more rounding, then the result is rounded once to the dtype. Bounds checks
that cannot fail for a layer's static geometry are left out; a layer none of whose terms can be
skipped (1x1, no padding) is a plain product, without masks.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.backends.c.ctypes_map import ctype
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.cuda import stencil, stencil_grad, tiled, tiling
from gradc.backends.cuda.kernel import CudaKernel, check_table, row_major, static_shape


def _prod(sizes: Sequence[int]) -> int:
    out = 1
    for s in sizes:
        out *= s
    return out


def _coord(flat: str, sizes: Sequence[int], a: int) -> str:
    """Coordinate ``a`` of row-major index ``flat`` of ``sizes`` (C; no unit divisions, no
    modulo on the outermost axis)."""
    st = row_major(sizes)[a]
    e = flat if st == 1 else f"{flat} / {st}"
    return f"{e} % {sizes[a]}" if a > 0 else e


def _terms(pairs: Sequence[tuple[str, int]]) -> str:
    """``e0 * s0 + e1 * s1 + ...`` (unit factors dropped, zero terms too)."""
    out = [e if s == 1 else f"{e} * {s}" for e, s in pairs if s != 0]
    return " + ".join(out) or "0"


def _bounds(name: str, lo: int, hi: int, size: int) -> list[str]:
    """The checks of ``0 <= name < size`` that a value in ``[lo, hi]`` can fail."""
    out = []
    if lo < 0:
        out.append(f"{name} >= 0")
    if hi >= size:
        out.append(f"{name} < {size}")
    return out


class _Layer:
    """A convolution node's geometry, sizes static."""

    def __init__(self, k: CudaKernel, x: Any, second: Any, y: Any) -> None:
        a = k.node.attrs
        self.xs = static_shape(k, x.type.shape)
        self.ws = static_shape(k, second.type.shape)
        self.ys = static_shape(k, y.type.shape)
        self.nd = len(self.xs) - 2
        self.s, self.d = list(a["strides"]), list(a["dilations"])
        self.sp = list(a["start_padding"])
        self.g = int(a["group_count"])
        self.flip = a["mode"] == "convolution"
        self.forward = a["direction"] == "forward"
        # the largest magnitude a position's arithmetic reaches on any axis (``o * s - sp +
        # k * d`` and the phases' forms): the index type must hold it, not only the counts
        # (a stride of 2**24 over 129 outputs overflowed an int, fuzz seed 7373)
        # (every size of the axis bounds each factor: a filter gradient's sum runs over dY's
        # positions, which it multiplies by the stride)
        self.reach = max([(m + 1) * (max(sa, 1) + max(da, 1) + 1) + abs(pa)
                          for m, sa, pa, da in zip(
                              map(max, self.xs[2:], self.ys[2:], self.ws[2:]), self.s, self.sp,
                              self.d)], default=0)


def emit_convolution(k: CudaKernel) -> None:
    """``convolution`` in either direction (module docstring)."""
    node = k.node
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    bias = node.inputs[2] if len(node.inputs) == 3 else None
    t = ctype(y.type.dtype)
    L = _Layer(k, x, w, y)
    if not L.forward and max(L.s) > 1:
        _emit_phases(k, L, x, w, y, bias)
        return
    nb, ci_all = L.xs[0], L.xs[1]
    sx, kk_sizes, so = L.xs[2:], L.ws[2:], L.ys[2:]
    co_all = L.ys[1]
    cig, cog = ci_all // L.g, co_all // L.g
    taps, px, po = _prod(kk_sizes), _prod(sx), _prod(so)
    ix = tiling.index_type(_prod(L.xs), _prod(L.ws), _prod(L.ys), cig * taps, L.reach)
    xst = row_major(sx)
    pw, px_, py = k.param(w), k.param(x), k.param(y)
    a_op = _filter_forward(L, pw, t, cig, cog, taps, ix) if L.forward else \
        _filter_backward(L, pw, t, cig, cog, taps, ix)

    def b_row(tag: str, r: str) -> list[str]:
        lines = [f"const {ix} {tag}_x = ({ix})({r} / {po}) * {ci_all * px} + "
                 f"({ix})z * {cig * px};"]
        for a in range(L.nd):
            o = _coord(f"{r} % {po}" if nb > 1 else r, so, a)
            lines.append(f"const {ix} {tag}_p{a} = ({o}) * {L.s[a]} - {L.sp[a]};"
                         if L.forward else f"const {ix} {tag}_p{a} = ({o}) + {L.sp[a]};")
        return lines

    def b_at(tag: str, kk: str) -> tuple[list[str], str, str | None]:
        ux = tiling.digits(ix)  # kk's digits: unsigned (tiling.digits)
        lines = [f"const {ux} ci = {kk} / {taps};" if taps > 1 else f"const {ux} ci = {kk};"]
        if taps > 1:
            j = f"{kk} % {taps}" if L.forward else f"{taps - 1} - {kk} % {taps}"
            lines.append(f"const {ux} j = {j};")
        checks: list[str] = []
        pos: list[tuple[str, int]] = []
        for a in range(L.nd):
            tap = _coord("j", kk_sizes, a) if taps > 1 else "0"
            if L.forward:
                lines.append(f"const {ix} h{a} = {tag}_p{a} + ({tap}) * {L.d[a]};")
                lo = -L.sp[a]
                hi = (so[a] - 1) * L.s[a] - L.sp[a] + (kk_sizes[a] - 1) * L.d[a]
                checks += _bounds(f"h{a}", lo, hi, sx[a])
                pos.append((f"h{a}", xst[a]))
            else:
                lines.append(f"const {ix} u{a} = {tag}_p{a} - ({tap}) * {L.d[a]};")
                lo = L.sp[a] - (kk_sizes[a] - 1) * L.d[a]  # unit strides (else _emit_phases)
                hi = so[a] - 1 + L.sp[a]
                checks += _bounds(f"u{a}", lo, hi, sx[a])
                pos.append((f"u{a}", xst[a]))
        off = f"{tag}_x + {_terms([('ci', px)] + pos)}"
        return lines, off, " && ".join(checks) or None

    b_op = tiling.Operand(px_, t, "r", b_row, b_at, 6.0 + 5.0 * L.nd)
    pb = k.param(bias) if bias is not None else ""

    relu = k.epilogue == "relu"  # plan.relu_epilogues: float32/float64 only

    def store(m: str, n: str, s: str) -> list[str]:
        lines = [f"const {ix} yo = (({ix})({n} / {po}) * {co_all} + ({ix})z * {cog} + {m}) * "
                 f"{po} + {n} % {po};"]
        value = s
        if bias is not None:
            lines.append(f"const {t.acc} v = {s} + {widen(t, f'{pb}[({ix})z * {cog} + {m}]')};")
            value = "v"
        if relu:  # the relu kernel's own selection: NaN and -0.0 give +0
            lines.append(f"const {t.acc} rv = {value} > 0 ? {value} : ({t.acc})0;")
            value = "rv"
        lines.append(f"{py}[yo] = {narrow(t, value)};")
        return ["{", *("  " + x for x in lines), "}"]

    if L.nd == 2:  # few output channels, or a first layer: the direct kernel (stencil.py)
        # (a strided backward convolution took _emit_phases above: the strides are forward's)
        pad = L.sp if L.forward else [(kk_sizes[a] - 1) * L.d[a] - L.sp[a] for a in range(2)]
        geo = stencil.Geometry(nb, L.g, cig, cog, ci_all, (sx[0], sx[1]), (so[0], so[1]),
                               (kk_sizes[0], kk_sizes[1]), (L.d[0], L.d[1]), (pad[0], pad[1]),
                               (L.s[0], L.s[1]))
        plan = stencil.plan(geo, t.acc)
        if plan is not None:
            stencil.emit(k, geo, plan, a_op, t, px_, ix, store)
            return
    tiled.emit(k, tiling.Product(L.g, cog, nb * po, cig * taps, a_op, b_op, t.acc,
                                lambda: [], store, ix))


def _phase_taps(K: int, s: int, d: int, sp: int) -> tuple[list[list[int]], list[int]]:
    """Per phase ``r`` of an output position (``(o + sp) % s``) of a transposed convolution's
    axis: its taps, in decreasing order (the reference's order: input positions increasing),
    padded with -1 to the longest list; and its first output position."""
    check_table("convolution", "stride phases times taps per axis", s * K)  # before the loop
    lists = [[k for k in range(K - 1, -1, -1) if (r - k * d) % s == 0] for r in range(s)]
    width = max(len(x) for x in lists)
    return [x + [-1] * (width - len(x)) for x in lists], [(r - sp) % s for r in range(s)]


def _emit_phases(k: CudaKernel, L: _Layer, x: Any, w: Any, y: Any, bias: Any) -> None:
    """A strided backward convolution, one product per group and phase: the output positions
    whose ``o + sp`` has one residue ``r`` modulo the stride on each axis are reached by the
    same taps (``k * d = r`` modulo the stride), so each phase sums only its own taps (in the
    reference's decreasing order) over a grid of ``ceil(O / s)`` positions per axis; a phase
    with fewer taps than the longest pads its list with skipped terms, and the grid's
    positions past the output are not stored."""
    t = ctype(y.type.dtype)
    nb, ci_all, co_all = L.xs[0], L.xs[1], L.ys[1]
    sx, ks, so = L.xs[2:], L.ws[2:], L.ys[2:]
    cig, cog = ci_all // L.g, co_all // L.g
    taps, px, po = _prod(ks), _prod(sx), _prod(so)
    geo = [_phase_taps(ks[a], L.s[a], L.d[a], L.sp[a]) for a in range(L.nd)]
    width = [len(lists[0]) for lists, _ in geo]  # taps per phase (padded), per axis
    grid = [-(-so[a] // L.s[a]) for a in range(L.nd)]  # positions per phase, per axis
    phases, tm, q = _prod(L.s), _prod(width), _prod(grid)
    tabs = [k.table("int", [v for row in lists for v in row]) for lists, _ in geo]
    firsts = [k.table("int", f) for _, f in geo]
    ix = tiling.index_type(_prod(L.xs), _prod(L.ws), _prod(L.ys), nb * q * phases * L.g,
                           L.reach)
    xst, ost, kst = row_major(sx), row_major(so), row_major(ks)
    pw, px_, py = k.param(w), k.param(x), k.param(y)
    # a phase none of whose taps reaches it (a stride above the filter's extent: 1x1, stride
    # 2) sums no term: its outputs are +0 (and the bias), written by a launch of their own
    # (_fill_dead), and the product runs over the other phases only (``live``)
    pstrides = row_major(L.s)
    live = [ph for ph in range(phases)
            if all(lists[ph // pstrides[a] % L.s[a]][0] >= 0 for a, (lists, _) in enumerate(geo))]
    nlive = len(live)
    which = "ph0" if nlive == phases else \
        (str(live[0]) if nlive == 1 else f"{k.table('int', live)}[ph0]")

    def setup() -> list[str]:
        lines = [f"const {ix} grp = z / {nlive}, ph0 = z % {nlive};",
                 f"const {ix} ph = {which};"]
        for a in range(L.nd):
            lines.append(f"const int r{a} = (int)({_coord('ph', L.s, a)});")
            lines.append(f"const {ix} f{a} = {firsts[a]}[r{a}];")
        return lines

    def tap_lines(kk: str) -> list[str]:
        ux = tiling.digits(ix)  # kk's digits: unsigned (tiling.digits)
        lines = [f"const {ux} ci = {kk} / {tm};", f"const {ux} jj = {kk} % {tm};"]
        for a in range(L.nd):
            lines.append(f"const {ix} tp{a} = {tabs[a]}[r{a} * {width[a]} + "
                         f"{_coord('jj', width, a)}];")
        return lines

    def a_row(tag: str, r: str) -> list[str]:
        return [f"const {ix} {tag}_w = grp * {cig * cog * taps} + {r} * {taps};"]

    def a_at(tag: str, kk: str) -> tuple[list[str], str, str | None]:
        # a padded tap reads tap 0 (any finite weight: its term is skipped through B)
        flat = _terms([(f"(tp{a} < 0 ? 0 : tp{a})", kst[a]) for a in range(L.nd)])
        w_at = f"{taps - 1} - ({flat})" if L.flip else flat
        return tap_lines(kk), f"{tag}_w + ci * {cog * taps} + {w_at}", None

    def b_row(tag: str, r: str) -> list[str]:
        lines = [f"const {ix} {tag}_x = ({ix})({r} / {q}) * {ci_all * px} + grp * {cig * px};"]
        for a in range(L.nd):
            qa = _coord(f"{r} % {q}", grid, a)
            lines.append(f"const {ix} {tag}_o{a} = f{a} + ({qa}) * {L.s[a]} + {L.sp[a]};")
        return lines

    def b_at(tag: str, kk: str) -> tuple[list[str], str, str | None]:
        lines = tap_lines(kk)
        checks, pos = [], []
        for a in range(L.nd):
            lines += [f"const {ix} u{a} = {tag}_o{a} - tp{a} * {L.d[a]};",
                      f"const {ix} i{a} = u{a} / {L.s[a]};"]
            checks += [f"tp{a} >= 0", f"u{a} >= 0", f"i{a} < {sx[a]}"]
            pos.append((f"i{a}", xst[a]))
        return lines, f"{tag}_x + {_terms([('ci', px)] + pos)}", " && ".join(checks)

    pb = k.param(bias) if bias is not None else ""

    def store(m: str, n: str, s: str) -> list[str]:
        lines = [f"const {ix} o{a} = f{a} + ({_coord(f'{n} % {q}', grid, a)}) * {L.s[a]};"
                 for a in range(L.nd)]
        inside = " && ".join(f"o{a} < {so[a]}" for a in range(L.nd))
        at = _terms([(f"o{a}", ost[a]) for a in range(L.nd)])
        value = s
        if bias is not None:
            lines.append(f"const {t.acc} v = {s} + {widen(t, f'{pb}[grp * {cog} + {m}]')};")
            value = "v"
        lines.append(f"if ({inside}) {py}[(({ix})({n} / {q}) * {co_all} + grp * {cog} + {m}) "
                     f"* {po} + {at}] = {narrow(t, value)};")
        return ["{", *("  " + x for x in lines), "}"]

    a_op = tiling.Operand(pw, t, "k", a_row, a_at, 6.0 + 3.0 * L.nd)
    b_op = tiling.Operand(px_, t, "r", b_row, b_at, 6.0 + 7.0 * L.nd)
    tiled.emit(k, tiling.Product(L.g * nlive, cog, nb * q, cig * tm, a_op, b_op, t.acc, setup,
                                store, ix))
    if nlive < phases:
        _fill_dead(k, L, [ph not in live for ph in range(phases)], py, pb, t)


def _fill_dead(k: CudaKernel, L: _Layer, dead: list[bool], py: str, pb: str, t: Any) -> None:
    """The outputs of the phases without taps (``_emit_phases``), in a launch of their own: a
    thread per output element, storing ``+0`` (plus the bias, one rounding, as a finished
    sum's) where the position's phase is dead."""
    k.next_launch()
    cw, so, co_all = k.code, L.ys[2:], L.ys[1]
    po, pstrides = _prod(so), row_major(L.s)
    flags = k.table("int", [int(d) for d in dead])
    with k.each(_prod(L.ys), "e") as e:
        ph = " + ".join(f"(int)(({_coord(f'{e} % {po}', so, a)}) + {L.sp[a]}) % {L.s[a]}"
                        f"{f' * {pstrides[a]}' if pstrides[a] != 1 else ''}"
                        for a in range(L.nd))
        value = f"({t.acc})0"
        if pb:
            cw.line(f"const {t.acc} v = ({t.acc})0 + "
                    f"{widen(t, f'{pb}[{e} / {po} % {co_all}]')};")
            value = "v"
        with cw.block(f"if ({flags}[{ph}])"):
            cw.line(f"{py}[{e}] = {narrow(t, value)};")
    k.note_reads()


def _filter_forward(L: _Layer, pw: str, t: Any, cig: int, cog: int, taps: int,
                    ix: str) -> tiling.Operand:
    """``A`` of a forward convolution: ``W[z*cog + m, ci, tap']``, kk = ci * taps + tap."""
    def row(tag: str, r: str) -> list[str]:
        return [f"const {ix} {tag}_w = (({ix})z * {cog} + {r}) * {cig * taps};"]

    def at(tag: str, kk: str) -> tuple[list[str], str, str | None]:
        if not L.flip or taps == 1:
            return [], f"{tag}_w + {kk}", None
        return ([f"const {tiling.digits(ix)} jw = {kk} % {taps};"],
                f"{tag}_w + {kk} + {taps - 1} - 2 * jw", None)
    return tiling.Operand(pw, t, "k", row, at, 2.0)


def _filter_backward(L: _Layer, pw: str, t: Any, cig: int, cog: int, taps: int,
                     ix: str) -> tiling.Operand:
    """``A`` of a backward convolution: ``W[z*cig + ci, m, tap']``, the taps reversed:
    kk = ci * taps + (taps - 1 - tap); the mirrored filter reads tap ``kk % taps`` itself."""
    def row(tag: str, r: str) -> list[str]:
        return [f"const {ix} {tag}_w = ({ix})z * {cig * cog * taps} + {r} * {taps};"]

    def at(tag: str, kk: str) -> tuple[list[str], str, str | None]:
        if taps == 1:
            return [], f"{tag}_w + {kk} * {cog}", None
        j = f"{kk} % {taps}" if L.flip else f"{taps - 1} - {kk} % {taps}"
        return ([f"const {tiling.digits(ix)} cw = {kk} / {taps};"],
                f"{tag}_w + cw * {cog * taps} + {j}", None)
    return tiling.Operand(pw, t, "k" if taps > 1 else "r", row, at, 3.0)


def emit_filter_grad(k: CudaKernel) -> None:
    """``convolution_filter_grad`` in either direction (module docstring)."""
    node = k.node
    x, dy, dw = node.inputs[0], node.inputs[1], node.outputs[0]
    t = ctype(dw.type.dtype)
    L = _Layer(k, x, dy, dw)
    ws = static_shape(k, dw.type.shape)
    it, other = (L.ws, L.xs) if L.forward else (L.xs, L.ws)  # L.ws holds dY's shape here
    pit, pother = (k.param(dy), k.param(x)) if L.forward else (k.param(x), k.param(dy))
    nb = L.xs[0]
    ca, cf = it[1] // L.g, other[1] // L.g
    sit, sot, ksz = it[2:], other[2:], ws[2:]
    taps, pi, po = _prod(ksz), _prod(sit), _prod(sot)
    ix = tiling.index_type(_prod(L.xs), _prod(L.ws), _prod(ws), nb * pi, L.reach)
    ost = row_major(sot)

    def a_row(tag: str, r: str) -> list[str]:
        return [f"const {ix} {tag}_i = (({ix})z * {ca} + {r}) * {pi};"]

    def a_at(tag: str, kk: str) -> tuple[list[str], str, str | None]:
        if nb == 1:
            return [], f"{tag}_i + {kk}", None
        return [], f"{tag}_i + {kk} + ({kk} / {pi}) * {(it[1] - 1) * pi}", None

    def b_row(tag: str, r: str) -> list[str]:
        lines = [f"const {ix} {tag}_o = (({ix})z * {cf} + {r} / {taps}) * {po};"]
        for a in range(L.nd):
            tap = _coord(f"{r} % {taps}", ksz, a) if taps > 1 else "0"
            if L.flip:
                tap = f"{ksz[a] - 1} - {tap}"
            lines.append(f"const {ix} {tag}_e{a} = ({tap}) * {L.d[a]} - {L.sp[a]};")
        return lines

    def b_at(tag: str, kk: str) -> tuple[list[str], str, str | None]:
        ux = tiling.digits(ix)  # kk's digits: unsigned (tiling.digits)
        lines = [f"const {ux} q = {kk} % {pi};" if nb > 1 else f"const {ux} q = {kk};"]
        checks: list[str] = []
        pos: list[tuple[str, int]] = []
        for a in range(L.nd):
            lines.append(f"const {ix} h{a} = ({_coord('q', sit, a)}) * {L.s[a]} + {tag}_e{a};")
            lo = -L.sp[a]
            hi = (sit[a] - 1) * L.s[a] + (ksz[a] - 1) * L.d[a] - L.sp[a]
            checks += _bounds(f"h{a}", lo, hi, sot[a])
            pos.append((f"h{a}", ost[a]))
        first = f"{tag}_o + ({kk} / {pi}) * {other[1] * po}" if nb > 1 else f"{tag}_o"
        off = f"{first} + {_terms(pos)}"
        return lines, off, " && ".join(checks) or None

    a_op = tiling.Operand(pit, t, "k", a_row, a_at, 3.0)
    b_op = tiling.Operand(pother, t, "k", b_row, b_at, 5.0 + 5.0 * L.nd)
    pw = k.param(dw)

    def store(m: str, n: str, s: str) -> list[str]:
        return [f"{pw}[(({ix})z * {ca} + {m}) * {cf * taps} + {n}] = {narrow(t, s)};"]

    product = tiling.Product(L.g, ca, cf * taps, nb * pi, a_op, b_op, t.acc, lambda: [], store,
                             ix)
    if k.split and L.forward and L.nd == 2:  # stencil_grad.py
        geo = stencil_grad.Geometry(nb, L.g, ca, cf, (sot[0], sot[1]), (sit[0], sit[1]),
                                    (ksz[0], ksz[1]), (L.d[0], L.d[1]), (L.sp[0], L.sp[1]),
                                    L.flip, (L.s[0], L.s[1]))
        plan = stencil_grad.plan(geo, t.acc)
        if plan is not None:
            stencil_grad.emit(k, geo, plan, product, pit, pother, t)
            return
    tiled.emit(k, product)


EMITTERS: dict[str, Any] = {"convolution": emit_convolution,
                            "convolution_filter_grad": emit_filter_grad}
