"""Convolution kernels through packed matrix multiplies (``gc_gemm_f32``/``f64`` of the prelude).

The three kernels of conv.py, for float32 and float64, as im2col plus the prelude's BLIS-style
gemm, in the reference's summation order (SPEC-training.md §10), so they stay bit-identical:

- **convolution**, per group: ``y[o, col] = sum over kk of W[o, kk] * B[kk, col]``, where a
  column is an output element (image, position) and ``kk = (input channel, tap)`` runs in the
  reference's order (channels, then taps row-major forward or reversed backward). ``B`` holds the
  input value the tap reads at that output position, or 0 where it reads padding (forward:
  gathered, ``im2col``) or where no input position lands (backward: scattered). The bias is
  added to the finished sum, as the reference does.
- **convolution_filter_grad**, per group:
  ``dW[f0, (f1, tap)] = sum over (image, position) of it[f0] * other[f1 at the tap]``, the
  reduction running over images, then positions in row-major order: the reference's order.

Adding a product of 0 (padding) to a partial sum leaves it unchanged: the sum starts at +0 and an
IEEE sum is -0 only when both terms are, so it never is, and ``s + ±0 = s``. That holds while
the other factor is finite: ``inf * 0`` is NaN. So the kernel first checks the factor that meets
the zeros (the filter, or ``it`` for the filter gradient); when any element is NaN or infinite it
runs conv.py's direct loops instead, which skip padding as the reference does.

Columns come in chunks of whole rows (the last spatial axis) so that ``B`` (``K x columns``)
stays near ``CHUNK`` elements; per chunk the threads of one parallel region fill ``B`` (rows
shared), then run the gemm (jobs shared), then the epilogue. Depthwise and other thin groups
(fewer than ``MIN_ROWS`` output channels per group, or a filter-gradient with fewer than
``MIN_ROWS`` rows) keep the direct loops: a matrix of so few rows wastes the register tile.
"""

from __future__ import annotations

import math
from typing import Sequence

from gradc.backends.c.ctypes_map import CType
from gradc.backends.c.kernel import Kernel
from gradc.backends.c.writer import CWriter

CHUNK = 1 << 18  # target elements of the im2col buffer
MIN_ROWS = 4  # groups with fewer output rows use the direct loops


def usable(t: CType, rows: int) -> bool:
    """True when the gemm path serves a kernel of dtype ``t`` whose matrices have ``rows``."""
    return t.acc == t.store and t.acc in ("float", "double") and rows >= MIN_ROWS


def suffix(t: CType) -> str:
    return "f32" if t.acc == "float" else "f64"


def finite_check(cw: CWriter, t: CType, ptr: str, count: str) -> None:
    """``int nonfinite``: 1 when any of ``count`` elements at ``ptr`` is NaN or infinite."""
    bits, mask = (("uint32_t", "0x7f800000u") if t.acc == "float" else
                  ("uint64_t", "UINT64_C(0x7ff0000000000000)"))
    cw.line("int nonfinite = 0;")
    with cw.block():
        cw.line(f"const {bits} *fb = (const {bits} *)(const void *){ptr};",
                f"const int64_t fn = {count};")
        with cw.block("for (int64_t f0 = 0; f0 < fn && !nonfinite; f0 += 4096)"):
            cw.line("const int64_t f1 = fn - f0 < 4096 ? fn - f0 : 4096;", "int bad = 0;",
                    f"for (int64_t f = f0; f < f0 + f1; f++) bad |= (fb[f] & {mask}) == {mask};",
                    "nonfinite = bad;")


def _rows_per_chunk(k_rows: int, row_len: int, rows: str) -> str:
    """C expression: rows of columns per chunk (at least 1, at most all)."""
    r = max(1, CHUNK // max(1, k_rows * row_len))
    return f"({rows} < {r} ? {rows} : {r})"


def _tap_coords(cw: CWriter, ks: Sequence[int], t: str) -> None:
    """``k0..k{nd-1}``: the row-major coordinates of tap number ``t``."""
    st = [math.prod(ks[i + 1:]) for i in range(len(ks))]
    cw.line(*(f"const int64_t k{i} = ({t}) / {st[i]} % {ks[i]};" for i in range(len(ks))))


def _tap_range(cw: CWriter, i: int, m: int, n: int, s: int, d: int, sp: int) -> None:
    """As conv._tap_range: positions ``lo..hi`` of the iterated axis whose tap lands inside the
    other tensor (``n`` positions), and ``f``, the other tensor's position at ``lo``."""
    cw.line(f"const int64_t c{i} = k{i} * {d} - {sp};",
            f"const int64_t lo{i} = c{i} >= 0 ? 0 : (-c{i} + {s - 1}) / {s};",
            f"int64_t hi{i} = {n - 1} - c{i} < 0 ? -1 : ({n - 1} - c{i}) / {s};",
            f"if (hi{i} > {m - 1}) hi{i} = {m - 1};",
            f"const int64_t f{i} = lo{i} * {s} + c{i};")


def im2col(cw: CWriter, t: CType, src: str, chans: int, plane: int, it_dims: Sequence[int],
           ot_dims: Sequence[int], axes: Sequence[tuple[int, int, int]], ks: Sequence[int],
           tap_of: str, scatter: bool) -> None:
    """Fill ``col[kr * nc + j]`` for every row ``kr = c * kplane + tn`` (of ``chans * kplane``)
    and column ``j`` of the chunk (rows ``r0 .. r0 + R`` of the column tensor's last axis).

    ``tap_of`` is a C expression of ``tn`` giving the tap's row-major number. Gather (forward
    convolution, filter gradient): columns are positions of the iterated tensor (dims
    ``it_dims``), and the value is ``src`` (the other tensor, dims ``ot_dims``, ``chans``
    channels) at the tap's position, 0 outside. Scatter (backward convolution): columns are
    positions of the other tensor (the output), ``src`` is the iterated tensor (the input), and
    each input position writes the output position its tap reaches; the rest are 0.
    ``axes`` are (stride, dilation, start padding) per spatial axis."""
    nd = len(ks)
    kplane = math.prod(ks)
    cols_dims = ot_dims if scatter else it_dims
    src_dims = it_dims if scatter else ot_dims
    L = cols_dims[-1]
    rpi = math.prod(cols_dims[:-1])
    sst = [math.prod(src_dims[i + 1:]) for i in range(nd)]
    cw.line("#pragma omp for schedule(static)")
    with cw.block(f"for (int64_t kr = 0; kr < {chans * kplane}; kr++)"):
        cw.line(f"const int64_t ch = kr / {kplane}, tn = kr % {kplane};")
        _tap_coords(cw, ks, tap_of)
        for i, (s, d, sp) in enumerate(axes):
            _tap_range(cw, i, it_dims[i], ot_dims[i], s, d, sp)
        cw.line(f"{t.store} *dst = col + kr * nc;")
        with cw.block("for (int64_t r = r0; r < r0 + R; r++)"):
            cw.line(f"{t.store} *d = dst + (r - r0) * {L};",
                    f"const int64_t img = r / {rpi}, rem = r % {rpi};",
                    f"const {t.store} *s = {src} + (img * {chans} + ch) * {plane};")
            cw.line("int in = 1;")
            ost = [math.prod(cols_dims[i + 1:nd - 1]) for i in range(nd - 1)]
            for i in range(nd - 1):
                cw.line(f"const int64_t p{i} = rem / {ost[i]} % {cols_dims[i]};")
                if scatter:  # output position p: the input position whose tap reaches it
                    cw.line(f"const int64_t u{i} = p{i} - f{i};",
                            f"in = in && lo{i} <= hi{i} && u{i} >= 0 && u{i} % {axes[i][0]} == 0"
                            f" && lo{i} + u{i} / {axes[i][0]} <= hi{i};",
                            f"if (in) s += (lo{i} + u{i} / {axes[i][0]}) * {sst[i]};")
                else:
                    cw.line(f"in = in && p{i} >= lo{i} && p{i} <= hi{i};",
                            f"if (in) s += (f{i} + (p{i} - lo{i}) * {axes[i][0]}) * {sst[i]};")
            j = nd - 1
            st = axes[j][0]
            with cw.block(f"if (!in || lo{j} > hi{j})"):
                cw.line(f"for (int64_t q = 0; q < {L}; q++) d[q] = 0;", "continue;")
            if scatter:
                cw.line(f"for (int64_t q = 0; q < {L}; q++) d[q] = 0;",
                        f"for (int64_t q = lo{j}; q <= hi{j}; q++) "
                        f"d[f{j} + (q - lo{j}) * {st}] = s[q];")
            else:
                cw.line(f"for (int64_t q = 0; q < lo{j}; q++) d[q] = 0;")
                if st == 1:
                    cw.line(f"memcpy(d + lo{j}, s + f{j}, (size_t)(hi{j} - lo{j} + 1) * "
                            f"sizeof(*d));")
                else:
                    cw.line(f"for (int64_t q = lo{j}; q <= hi{j}; q++) "
                            f"d[q] = s[f{j} + (q - lo{j}) * {st}];")
                cw.line(f"for (int64_t q = hi{j} + 1; q < {L}; q++) d[q] = 0;")


def alloc(cw: CWriter, bufs: Sequence[tuple[str, str, str]]) -> None:
    """Shared scratch buffers (name, type, count expression); return 1 if any is missing."""
    for name, ty, n in bufs:
        cw.line(f"{ty} *{name} = ({ty} *)gc_alloc((size_t)({n}) * sizeof({ty}));")
    ok = " && ".join(f"{name} != NULL" for name, _, _ in bufs)
    with cw.block(f"if (!({ok}))"):
        cw.line(*(f"free({name});" for name, _, _ in bufs), "return 1;")


def emit_convolution(k: Kernel, t: CType, fwd: bool, flip: bool, g: int,
                     chans: tuple[int, int], dims: tuple[list[int], list[int], list[int]],
                     axes: Sequence[tuple[int, int, int]], has_bias: bool) -> None:
    """The gemm path of ``convolution`` (the caller has checked ``nonfinite == 0``)."""
    node = k.node
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    xp, wp, yp = k.param(x), k.param(w), k.param(y)
    bp = k.param(node.inputs[2]) if has_bias else None
    ci, co = chans
    xs, ys, ks = dims
    cig, cog = ci // g, co // g
    kplane = math.prod(ks)
    kg = cig * kplane
    iplane, oplane = math.prod(xs), math.prod(ys)
    batch = k.dims.expr(x.type.shape[0])
    L = ys[-1]
    rows = f"((int64_t){batch} * {oplane // L})"
    cw = k.code
    cw.line(f"const int64_t RT = {rows}, R = {_rows_per_chunk(ci * kplane, L, 'RT')}, "
            f"NCMAX = R * {L};")
    alloc(cw, [("col", t.store, f"{ci * kplane} * NCMAX"), ("ct", t.store, f"{cog} * NCMAX"),
               ("ao", "int64_t", f"{kg}")])
    # A[o, kk] = w[group base + o * am + ao[kk]]: kk = (channel, tap), taps in the reference's
    # order (row-major forward, reversed backward), each at its filter element (flipped in
    # mode convolution)
    with cw.block(f"for (int64_t kk = 0; kk < {kg}; kk++)"):
        cw.line(f"const int64_t cl = kk / {kplane}, tn = kk % {kplane};")
        if fwd:
            tap = f"{kplane - 1} - tn" if flip else "tn"
            cw.line(f"ao[kk] = cl * {kplane} + {tap};")
        else:
            tap = "tn" if flip else f"{kplane - 1} - tn"
            cw.line(f"ao[kk] = cl * {cog * kplane} + {tap};")
    am, gstride = (kg, cog * kg) if fwd else (kplane, cig * cog * kplane)
    sfx = suffix(t)
    work = f"(double)RT * {L} * {co * kg}"
    cw.line(f"#pragma omp parallel num_threads(nt) if({work} > GC_PAR_MIN)")
    with cw.block():
        with cw.block("for (int64_t r0 = 0; r0 < RT; r0 += R)"):
            cw.line("const int64_t R_ = RT - r0 < R ? RT - r0 : R;",
                    f"const int64_t nc = R_ * {L};")
            with cw.block():
                cw.line("const int64_t R = R_;")
                tap_of = "tn" if fwd else f"{kplane - 1} - tn"
                if fwd:
                    im2col(cw, t, xp, ci, iplane, ys, xs, axes, ks, tap_of, scatter=False)
                else:
                    im2col(cw, t, xp, ci, iplane, xs, ys, axes, ks, tap_of, scatter=True)
                with cw.block(f"for (int64_t grp = 0; grp < {g}; grp++)"):
                    cw.line(f"gc_gemm_{sfx}({cog}, nc, {kg}, {wp} + grp * {gstride}, {am}, ao, "
                            f"col + grp * {kg} * nc, nc, 1, ct, nc, 1);")
                    cw.line("#pragma omp for schedule(static)")
                    with cw.block(f"for (int64_t orow = 0; orow < {cog} * R; orow++)"):
                        cw.line("const int64_t o = orow / R, rr = orow % R, r = r0 + rr;",
                                f"const int64_t img = r / {oplane // L}, "
                                f"pos = r % {oplane // L} * {L};",
                                f"{t.store} *dst = {yp} + (img * {co} + grp * {cog} + o) * "
                                f"{oplane} + pos;",
                                f"const {t.store} *src = ct + o * nc + rr * {L};")
                        if bp:
                            cw.line(f"const {t.store} b = {bp}[grp * {cog} + o];",
                                    f"for (int64_t q = 0; q < {L}; q++) dst[q] = src[q] + b;")
                        else:
                            cw.line(f"memcpy(dst, src, {L} * sizeof(*dst));")
    cw.line("free(col);", "free(ct);", "free(ao);")


def emit_filter_grad(k: Kernel, t: CType, flip: bool, g: int, it_ptr: str, ot_ptr: str,
                     chans: tuple[int, int], dims: tuple[list[int], list[int], list[int]],
                     axes: Sequence[tuple[int, int, int]], f1n: int) -> None:
    """The gemm path of ``convolution_filter_grad`` (the caller checked ``it`` finite)."""
    node = k.node
    x, dw = node.inputs[0], node.outputs[0]
    wp = k.param(dw)
    c_it, c_ot = chans
    ms, ns, ks = dims
    kplane = math.prod(ks)
    ca = c_it // g  # rows (f0) per group
    mplane, nplane = math.prod(ms), math.prod(ns)
    ncol = f1n * kplane  # columns of a group's dW
    batch = k.dims.expr(x.type.shape[0])
    L = ms[-1]
    rows = f"((int64_t){batch} * {mplane // L})"
    cw = k.code
    cw.line(f"const int64_t RT = {rows}, R = {_rows_per_chunk(c_ot * kplane, L, 'RT')}, "
            f"NCMAX = R * {L};")
    alloc(cw, [("col", t.store, f"{c_ot * kplane} * NCMAX"), ("ao", "int64_t", "NCMAX")])
    sfx = suffix(t)
    work = f"(double)RT * {L} * {c_it * ncol}"
    cw.line(f"#pragma omp parallel num_threads(nt) if({work} > GC_PAR_MIN)")
    with cw.block():
        with cw.block("for (int64_t r0 = 0; r0 < RT; r0 += R)"):
            cw.line("const int64_t R_ = RT - r0 < R ? RT - r0 : R;",
                    f"const int64_t nc = R_ * {L};")
            with cw.block():
                cw.line("const int64_t R = R_;")
                # dW's column (f1, tn) holds filter element tn: tap tn, or its flip
                im2col(cw, t, ot_ptr, c_ot, nplane, ms, ns, axes, ks,
                       f"{kplane - 1} - tn" if flip else "tn", scatter=False)
                # A[f0, j] = it[group base + f0 * mplane + ao[j]]: column j of the chunk is
                # (image, position) of the iterated tensor
                cw.line("#pragma omp for schedule(static)")
                with cw.block("for (int64_t j = 0; j < nc; j++)"):
                    cw.line(f"const int64_t r = r0 + j / {L};",
                            f"ao[j] = r / {mplane // L} * {c_it * mplane} + r % {mplane // L} * "
                            f"{L} + j % {L};")
                with cw.block(f"for (int64_t grp = 0; grp < {g}; grp++)"):
                    cw.line(f"gc_gemm_{sfx}({ca}, {ncol}, nc, {it_ptr} + grp * {ca * mplane}, "
                            f"{mplane}, ao, "
                            f"col + grp * {ncol} * nc, 1, nc, {wp} + grp * {ca * ncol}, {ncol}, "
                            "r0 == 0);")
    cw.line("free(col);", "free(ao);")
