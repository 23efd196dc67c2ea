"""Convolution kernels through packed matrix multiplies (``gc_gemm_f32``/``f64`` of the prelude).

The three kernels of conv.py, for float32 and float64, as im2col plus the prelude's BLIS-style
gemm, in the reference's summation order (SPEC-training.md §10), so they stay bit-identical:

- **convolution** (forward), per group: ``y[o, col] = sum over kk of W[o, kk] * B[kk, col]``,
  where a column is an output element (image, position) and ``kk = (input channel, tap)`` runs
  in the reference's order (channels, then taps row-major). ``B`` holds the input value the tap
  reads at that output position, or 0 where it reads padding (``im2col``). The bias is added to
  the finished sum, as the reference does.
- **convolution** (backward, transposed), per group and per phase of the output positions
  (position mod stride on each axis, ``_phases``): the same product over the taps that reach the
  phase, in the reference's reversed tap order, each reading the input at unit stride; the
  results are written to the phase's positions.
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
shared), then run the gemm (jobs shared), then the epilogue. At unit strides on two axes the
input is instead copied once with zero borders and read at each tap's shift (implicit im2col,
``emit_convolution_implicit``, ``emit_filter_grad_implicit``; 1x1 layers without padding read it
in place). Thin groups (fewer than ``MIN_ROWS`` output channels per group: depthwise) keep
conv.py's direct loops, except the depthwise filter gradient, which sums every tap at once
(``emit_filter_grad_depthwise``). Which path a layer takes: ``implicit_ok``, ``NARROW``,
``NARROW_PADDED``, ``NARROW_MIN_K``, ``MIN_K``, ``FG_PLANE``, ``WASTE`` (thresholds measured on
this project's machine).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from gradc.backends.c.ctypes_map import CType
from gradc.backends.c.kernel import Kernel
from gradc.backends.c.writer import CWriter

CHUNK = 1 << 18  # target elements of the im2col buffer
MIN_ROWS = 4  # groups with fewer output rows use the direct loops
NARROW = 32  # fewer output channels (filter-gradient rows): the product runs transposed
# Transposed products (narrow side packed) for fewer output channels than these: NARROW where
# the columns are read from an input in place (1x1 without padding) or from an im2col buffer
# with sums of at least NARROW_MIN_K terms; NARROW_PADDED where they are read from a padded
# copy, which is in cache, in place (no packing: the prelude's GC_DIRECT_M). Measured (batch
# 8, float32, 2 threads): 16 channels of 3x3 at 64x64 ran 1.17 ms transposed, 1.03 ms not;
# the UNet's 1x1 head 16->4 (im2col, 16-term sums) 0.37 against 0.21 ms, its backward 4->16
# 0.36 against 0.13 ms; a 1x1 96->16 in place 0.21 ms transposed against 0.35 ms not.
NARROW_PADDED = 16
NARROW_MIN_K = 32
NR = {"float": 16, "double": 8}  # columns of the prelude gemm's register tile (one vector)


def usable(t: CType, rows: int) -> bool:
    """True when the gemm path serves a kernel of dtype ``t`` whose matrices have ``rows``."""
    return t.acc == t.store and t.acc in ("float", "double") and rows >= MIN_ROWS


def suffix(t: CType) -> str:
    return "f32" if t.acc == "float" else "f64"


# Elements from which the finite check runs on the kernel's threads: it reads every weight of a
# convolution (forward and backward) each step, 11M of resnet18's at a time, where one core
# reads at about 60 GB/s (0.16 ms for a 512x512x3x3 filter) and two nearly twice that.
FINITE_PAR_MIN = 1 << 18


def finite_check(cw: CWriter, t: CType, ptr: str, count: str) -> None:
    """``int nonfinite``: 1 when any of ``count`` elements at ``ptr`` is NaN or infinite (all
    are read: the threads split them, and a non-finite value takes the slow exact path anyway).
    """
    bits, mask = (("uint32_t", "0x7f800000u") if t.acc == "float" else
                  ("uint64_t", "UINT64_C(0x7ff0000000000000)"))
    cw.line("int nonfinite = 0;")
    with cw.block():
        cw.line(f"const {bits} *fb = (const {bits} *)(const void *){ptr};",
                f"const int64_t fn = {count};",
                "#pragma omp parallel for num_threads(nt) schedule(static) "
                f"reduction(|:nonfinite) if(fn >= {FINITE_PAR_MIN})")
        with cw.block("for (int64_t f0 = 0; f0 < fn; f0 += 4096)"):
            cw.line("const int64_t f1 = fn - f0 < 4096 ? fn - f0 : 4096;", "int bad = 0;",
                    f"for (int64_t f = f0; f < f0 + f1; f++) bad |= (fb[f] & {mask}) == {mask};",
                    "nonfinite |= bad;")


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
           tap_of: str) -> None:
    """Fill ``col[kr * nc + j]`` for every row ``kr = c * kplane + tn`` (of ``chans * kplane``)
    and column ``j`` of the chunk (rows ``r0 .. r0 + R`` of the column tensor's last axis).

    ``tap_of`` is a C expression of ``tn`` giving the tap's row-major number. Columns are
    positions of the iterated tensor (dims ``it_dims``: the output of a forward convolution, or
    the tensor a filter gradient iterates), and the value is ``src`` (the other tensor, dims
    ``ot_dims``, ``chans`` channels) at the tap's position, 0 outside. ``axes`` are (stride,
    dilation, start padding) per spatial axis."""
    nd = len(ks)
    kplane = math.prod(ks)
    cols_dims, src_dims = it_dims, ot_dims
    L = cols_dims[-1]
    rpi = math.prod(cols_dims[:-1])
    sst = [math.prod(src_dims[i + 1:]) for i in range(nd)]
    cw.line("#pragma omp for schedule(static)")
    with cw.block(f"for (int64_t kr = 0; kr < {chans * kplane}; kr++)"):
        cw.line(f"const int64_t ch = kr / {kplane}, tn = kr % {kplane};")
        _tap_coords(cw, ks, tap_of)
        for i, (s, d, sp) in enumerate(axes):
            _tap_range(cw, i, it_dims[i], ot_dims[i], s, d, sp)
        cw.line(f"{t.store} *dst = col + kr * NCMAX;")
        with cw.block("for (int64_t r = r0; r < r0 + R; r++)"):
            cw.line(f"{t.store} *d = dst + (r - r0) * {L};",
                    f"const int64_t img = r / {rpi}, rem = r % {rpi};",
                    f"const {t.store} *s = {src} + (img * {chans} + ch) * {plane};")
            cw.line("int in = 1;")
            ost = [math.prod(cols_dims[i + 1:nd - 1]) for i in range(nd - 1)]
            for i in range(nd - 1):
                cw.line(f"const int64_t p{i} = rem / {ost[i]} % {cols_dims[i]};")
                cw.line(f"in = in && p{i} >= lo{i} && p{i} <= hi{i};",
                        f"if (in) s += (f{i} + (p{i} - lo{i}) * {axes[i][0]}) * {sst[i]};")
            j = nd - 1
            st = axes[j][0]
            with cw.block(f"if (!in || lo{j} > hi{j})"):
                cw.line(f"for (int64_t q = 0; q < {L}; q++) d[q] = 0;", "continue;")
            cw.line(f"for (int64_t q = 0; q < lo{j}; q++) d[q] = 0;")
            if st == 1:
                cw.line(f"memcpy(d + lo{j}, s + f{j}, (size_t)(hi{j} - lo{j} + 1) * sizeof(*d));")
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


def gemm(cw: CWriter, t: CType, m: str, n: int | str, kdim: str, a: tuple[str, str, str],
         b: tuple[str, str, str], c: tuple[str, str], zero: str, packed: bool = False) -> None:
    """A call of the prelude's gemm: ``a`` = (pointer, row offsets, k offsets), ``b`` =
    (pointer, k offsets, column offsets or NULL for contiguous), ``c`` = (pointer, row
    stride)."""
    cw.line(f"gc_gemm_{suffix(t)}({m}, {n}, {kdim}, {a[0]}, {a[1]}, {a[2]}, {b[0]}, "
            f"{b[1]}, {b[2]}, {c[0]}, {c[1]}, {zero}, {int(packed)});")


def _k_offsets(cw: CWriter, name: str, count: str, stride: str) -> None:
    """``name[kk] = kk * stride``: the rows of a buffer as a gemm operand's k offsets."""
    cw.line(f"for (int64_t kk = 0; kk < {count}; kk++) {name}[kk] = kk * {stride};")


def _conv_product(cw: CWriter, t: CType, transposed: bool, cols: str, cog: int, kdim: str,
                  data: tuple[str, str, str, bool], filt: tuple[str, str, str]) -> None:
    """``ct`` = a group's convolution sums: ``W @ D`` (``cog x cols``, row stride ``cols``) or,
    transposed, ``D^T @ W^T`` (``cols x cog``: the channels are the packed, narrow side).

    ``data`` = (pointer, column offsets, k offsets, columns contiguous: the offsets are the
    identity, so a packed block copies rows); ``filt`` = (pointer, row offsets, k offsets)."""
    ptr, dcols, dk, contiguous = data
    if transposed:
        gemm(cw, t, cols, cog, kdim, (ptr, dcols, dk), (filt[0], filt[2], filt[1]),
             ("ct", str(cog)), "1")
    else:
        gemm(cw, t, str(cog), cols, kdim, filt, (ptr, dk, "NULL" if contiguous else dcols),
             ("ct", cols), "1")


def _store_rows(cw: CWriter, transposed: bool, cog: int, count: int, row: int, cols: str,
                val_bias: str | None, stride: int = 1, buf: str = "ct",
                relu: str | None = None) -> None:
    """``dst[q * stride] = buf element (o, rr * row + q) (+ bias)`` for ``q < count``: buf is
    ``cog x cols`` (or ``cols x cog`` when the product ran transposed); ``relu`` (the element
    type), then ``v > 0 ? v : +0``: the kernel's relu epilogue."""
    src = (f"{buf}[(rr * {row} + q) * {cog} + o]" if transposed else
           f"{buf}[o * {cols} + rr * {row} + q]")
    val = f"{src} + {val_bias}" if val_bias else src
    at = "q" if stride == 1 else f"q * {stride}"
    if relu:
        cw.line(f"for (int64_t q = 0; q < {count}; q++) {{ const {relu} v = {val}; "
                f"dst[{at}] = v > 0 ? v : ({relu})0; }}")
    else:
        cw.line(f"for (int64_t q = 0; q < {count}; q++) dst[{at}] = {val};")


def _untranspose(cw: CWriter, wp: str, g: int, ca: int, ncol: int) -> None:
    """``dW[grp, f0, c] = dwt[grp, c, f0]`` (inside the parallel region, rows shared)."""
    cw.line("#pragma omp for schedule(static)")
    with cw.block(f"for (int64_t e = 0; e < {g * ca}; e++)"):
        cw.line(f"const int64_t grp = e / {ca}, f0 = e % {ca};",
                f"for (int64_t c = 0; c < {ncol}; c++) {wp}[e * {ncol} + c] = "
                f"dwt[(grp * {ncol} + c) * {ca} + f0];")


def emit_convolution(k: Kernel, t: CType, flip: bool, g: int,
                     chans: tuple[int, int], dims: tuple[list[int], list[int], list[int]],
                     axes: Sequence[tuple[int, int, int]], has_bias: bool) -> None:
    """The gemm path of a forward ``convolution`` (the caller has checked ``nonfinite == 0``).

    Per group ``ct = W @ B`` (``cog x columns``), or, for fewer than ``NARROW`` output
    channels, ``ct = B^T @ W^T`` (``columns x cog``: the channels are the packed, narrow side)."""
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
    tr = cog < NARROW and kg >= NARROW_MIN_K
    cw = k.code
    cw.line(f"const int64_t RT = {rows}, R = {_rows_per_chunk(ci * kplane, L, 'RT')}, "
            f"NCMAX = R * {L} + {SKEW};")
    alloc(cw, [("col", t.store, f"{ci * kplane} * NCMAX"), ("ct", t.store, f"{cog} * NCMAX"),
               ("ao", "int64_t", f"{kg}"), ("bo", "int64_t", f"{kg}"),
               ("wr", "int64_t", f"{cog}"), ("id", "int64_t", "NCMAX")])
    _k_offsets(cw, "wr", str(cog), str(kg))
    _k_offsets(cw, "id", "NCMAX", "1")
    # W[o, kk] = w[group base + o * kg + ao[kk]]: kk = (channel, tap), taps row-major, each at
    # its filter element (flipped in mode convolution); B[kk, col] = col[bo[kk] + col]
    with cw.block(f"for (int64_t kk = 0; kk < {kg}; kk++)"):
        cw.line(f"const int64_t cl = kk / {kplane}, tn = kk % {kplane};")
        tap = f"{kplane - 1} - tn" if flip else "tn"
        cw.line(f"ao[kk] = cl * {kplane} + {tap};")
    _k_offsets(cw, "bo", str(kg), "NCMAX")
    work = f"(double)RT * {L} * {co * kg}"
    cw.line(f"#pragma omp parallel num_threads(nt) if({work} > GC_PAR_MIN)")
    with cw.block():
        with cw.block("for (int64_t r0 = 0; r0 < RT; r0 += R)"):
            cw.line("const int64_t R_ = RT - r0 < R ? RT - r0 : R;",
                    f"const int64_t nc = R_ * {L};")
            with cw.block():
                cw.line("const int64_t R = R_;")
                im2col(cw, t, xp, ci, iplane, ys, xs, axes, ks, "tn")
                with cw.block(f"for (int64_t grp = 0; grp < {g}; grp++)"):
                    _conv_product(cw, t, tr, "nc", cog, str(kg),
                                  (f"col + grp * {kg} * NCMAX", "id", "bo", True),
                                  (f"{wp} + grp * {cog * kg}", "wr", "ao"))
                    cw.line("#pragma omp for schedule(static)")
                    with cw.block(f"for (int64_t orow = 0; orow < {cog} * R; orow++)"):
                        cw.line("const int64_t o = orow / R, rr = orow % R, r = r0 + rr;",
                                f"const int64_t img = r / {oplane // L}, "
                                f"pos = r % {oplane // L} * {L};",
                                f"{t.store} *dst = {yp} + (img * {co} + grp * {cog} + o) * "
                                f"{oplane} + pos;")
                        _store_rows(cw, tr, cog, L, L, "nc",
                                    f"{bp}[grp * {cog} + o]" if bp else None,
                                    relu=t.store if k.epilogue == "relu" else None)
    cw.line("free(col);", "free(ct);", "free(ao);", "free(bo);", "free(wr);", "free(id);")


def emit_filter_grad(k: Kernel, t: CType, flip: bool, g: int, it_ptr: str, ot_ptr: str,
                     chans: tuple[int, int], dims: tuple[list[int], list[int], list[int]],
                     axes: Sequence[tuple[int, int, int]], f1n: int) -> None:
    """The gemm path of ``convolution_filter_grad`` (the caller checked ``it`` finite).

    Per group ``dW += it @ col^T`` over chunks of (image, position) columns, or, for fewer than
    ``NARROW`` rows, ``dW^T += col @ it^T`` into a scratch matrix transposed at the end."""
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
    tr = ca < NARROW
    cw = k.code
    cw.line(f"const int64_t RT = {rows}, R = {_rows_per_chunk(c_ot * kplane, L, 'RT')}, "
            f"NCMAX = R * {L} + {SKEW};")
    bufs = [("col", t.store, f"{c_ot * kplane} * NCMAX"), ("ao", "int64_t", "NCMAX"),
            ("jo", "int64_t", "NCMAX"), ("fr", "int64_t", str(ca)), ("cr", "int64_t", str(ncol))]
    if tr:
        bufs.append(("dwt", t.store, str(g * ncol * ca)))
    alloc(cw, bufs)
    _k_offsets(cw, "jo", "NCMAX", "1")
    _k_offsets(cw, "fr", str(ca), str(mplane))
    _k_offsets(cw, "cr", str(ncol), "NCMAX")
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
                       f"{kplane - 1} - tn" if flip else "tn")
                # it[f0, j] = it[group base + f0 * mplane + ao[j]]: column j of the chunk is
                # (image, position) of the iterated tensor
                cw.line("#pragma omp for schedule(static)")
                with cw.block("for (int64_t j = 0; j < nc; j++)"):
                    cw.line(f"const int64_t r = r0 + j / {L};",
                            f"ao[j] = r / {mplane // L} * {c_it * mplane} + r % {mplane // L} * "
                            f"{L} + j % {L};")
                with cw.block(f"for (int64_t grp = 0; grp < {g}; grp++)"):
                    it_ = f"{it_ptr} + grp * {ca * mplane}"
                    col = f"col + grp * {ncol} * NCMAX"
                    if tr:
                        gemm(cw, t, str(ncol), ca, "nc", (col, "cr", "jo"), (it_, "ao", "fr"),
                             (f"dwt + grp * {ncol * ca}", str(ca)), "r0 == 0")
                    else:
                        gemm(cw, t, str(ca), ncol, "nc", (it_, "fr", "ao"), (col, "jo", "cr"),
                             (f"{wp} + grp * {ca * ncol}", str(ncol)), "r0 == 0")
        if tr:
            _untranspose(cw, wp, g, ca, ncol)
    cw.line(*(f"free({name});" for name, _, _ in bufs))


def _phases(xs: Sequence[int], ys: Sequence[int], ks: Sequence[int],
            axes: Sequence[tuple[int, int, int]]) -> list[tuple[list[int], list[int],
                                                              list[tuple[int, list[int]]]]]:
    """The output positions of a backward convolution split by phase: per combination of
    ``p_i = position mod stride_i``, (phase offsets, grid sizes ``U_i``, the valid taps).

    Output position ``p = ph + s*u`` on an axis receives tap ``k`` from input position
    ``q = (ph + sp - k*d) / s + u`` when that division is exact: so a phase sees a fixed set of
    taps, each reading the input at unit stride from ``base = (ph + sp - k*d) / s``. The taps
    are listed as the reference adds them, in reversed row-major order (tap number, bases);
    the terms that the phase leaves out are those no input position reaches (the reference
    adds nothing for them either)."""
    nd = len(ks)
    st = [math.prod(ks[i + 1:]) for i in range(nd)]
    out = []
    for combo in itertools.product(*(range(s) for s, _, _ in axes)):
        grid = [(ys[i] - combo[i] + axes[i][0] - 1) // axes[i][0] for i in range(nd)]
        if min(grid) <= 0:
            continue
        taps = []
        for tn in range(math.prod(ks) - 1, -1, -1):
            kc = [tn // st[i] % ks[i] for i in range(nd)]
            num = [combo[i] + axes[i][2] - kc[i] * axes[i][1] for i in range(nd)]
            if all(num[i] % axes[i][0] == 0 for i in range(nd)):
                taps.append((tn, [num[i] // axes[i][0] for i in range(nd)]))
        out.append((list(combo), grid, taps))
    return out


def emit_convolution_backward(k: Kernel, t: CType, flip: bool, g: int, chans: tuple[int, int],
                              dims: tuple[list[int], list[int], list[int]],
                              axes: Sequence[tuple[int, int, int]], has_bias: bool) -> None:
    """The gemm path of a backward (transposed) ``convolution``, one phase at a time (see
    ``_phases``): per phase a forward-like product at unit stride, its results scattered to
    the phase's output positions. No product of a structural zero is computed, so a stride-2
    input gradient costs what its forward convolution costs (not four times as much)."""
    node = k.node
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    xp, wp, yp = k.param(x), k.param(w), k.param(y)
    bp = k.param(node.inputs[2]) if has_bias else None
    ci, co = chans
    xs, ys, ks = dims
    nd = len(ks)
    cig, cog = ci // g, co // g
    kplane = math.prod(ks)
    iplane, oplane = math.prod(xs), math.prod(ys)
    batch = k.dims.expr(x.type.shape[0])
    phases = _phases(xs, ys, ks, axes)
    xst = [math.prod(xs[i + 1:]) for i in range(nd)]
    yst = [math.prod(ys[i + 1:]) for i in range(nd)]
    cw = k.code
    # per phase, rows of columns per chunk: the largest chunk sizes the buffers
    chunk_rows = [max(1, CHUNK // max(1, ci * max(1, len(taps)) * grid[-1]))
                  for _, grid, taps in phases]
    ncmax = max(r * grid[-1] for r, (_, grid, _) in zip(chunk_rows, phases))
    kmax = max(len(taps) for _, _, taps in phases)
    tr = cog < NARROW and cig * kmax >= NARROW_MIN_K
    cw.line(f"const int64_t NCMAX = {ncmax + SKEW};")
    alloc(cw, [("col", t.store, f"{ci * max(1, kmax)} * NCMAX"), ("ct", t.store, f"{cog} * NCMAX"),
               ("ao", "int64_t", f"{cig * max(1, kmax)}"),
               ("bo", "int64_t", f"{cig * max(1, kmax)}"), ("wr", "int64_t", f"{cog}"),
               ("id", "int64_t", "NCMAX")])
    _k_offsets(cw, "bo", str(cig * max(1, kmax)), "NCMAX")
    _k_offsets(cw, "wr", str(cog), str(kplane))
    _k_offsets(cw, "id", "NCMAX", "1")
    work = f"(double){batch} * {iplane} * {co * cig * kplane}"
    cw.line(f"#pragma omp parallel num_threads(nt) if({work} > GC_PAR_MIN)")
    with cw.block():
        for (ph, grid, taps), rmax in zip(phases, chunk_rows):
            nt_ = len(taps)
            L = grid[-1]
            rpi = math.prod(grid[:-1])
            gst = [math.prod(grid[i + 1:nd - 1]) for i in range(nd - 1)]
            with cw.block():  # one phase
                if nt_:
                    tl = ", ".join(str(tn) for tn, _ in taps)
                    bl = ", ".join(str(b) for _, bs in taps for b in bs)
                    cw.line(f"static const int64_t TAP[{nt_}] = {{{tl}}};",
                            f"static const int64_t BASE[{nt_ * nd}] = {{{bl}}};")
                    cw.line("#pragma omp for schedule(static)")
                    with cw.block(f"for (int64_t kk = 0; kk < {cig * nt_}; kk++)"):
                        tap = f"{kplane - 1} - TAP[kk % {nt_}]" if flip else f"TAP[kk % {nt_}]"
                        cw.line(f"ao[kk] = kk / {nt_} * {cog * kplane} + {tap};")
                cw.line(f"const int64_t RT = (int64_t){batch} * {rpi}, "
                        f"R = RT < {rmax} ? RT : {rmax};")
                with cw.block("for (int64_t r0 = 0; r0 < RT; r0 += R)"):
                    cw.line("const int64_t RC = RT - r0 < R ? RT - r0 : R, "
                            f"nc = RC * {L};")
                    if nt_:
                        cw.line("#pragma omp for schedule(static)")
                        with cw.block(f"for (int64_t kr = 0; kr < {ci * nt_}; kr++)"):
                            cw.line(f"const int64_t ch = kr / {nt_};",
                                    f"const int64_t *b = BASE + kr % {nt_} * {nd};",
                                    f"{t.store} *dst = col + kr * NCMAX;")
                            with cw.block("for (int64_t r = r0; r < r0 + RC; r++)"):
                                cw.line(f"{t.store} *d = dst + (r - r0) * {L};",
                                        f"const int64_t img = r / {rpi}, rem = r % {rpi};",
                                        f"const {t.store} *s = {xp} + (img * {ci} + ch) * "
                                        f"{iplane};", "int in = 1;")
                                for i in range(nd - 1):
                                    cw.line(f"const int64_t q{i} = b[{i}] + rem / {gst[i]} % "
                                            f"{grid[i]};",
                                            f"in = in && q{i} >= 0 && q{i} < {xs[i]};",
                                            f"s += q{i} * {xst[i]};")
                                j = nd - 1
                                cw.line(f"const int64_t bb = b[{j}];",
                                        f"int64_t lo = -bb > 0 ? -bb : 0, hi = {xs[j]} - bb;",
                                        f"if (hi > {L}) hi = {L};",
                                        "if (!in || hi < lo) { lo = 0; hi = 0; }",
                                        "for (int64_t u = 0; u < lo; u++) d[u] = 0;",
                                        "if (hi > lo) memcpy(d + lo, s + bb + lo, "
                                        "(size_t)(hi - lo) * sizeof(*d));",
                                        f"for (int64_t u = hi > lo ? hi : lo; u < {L}; u++) "
                                        "d[u] = 0;")
                    with cw.block(f"for (int64_t grp = 0; grp < {g}; grp++)"):
                        if nt_:
                            _conv_product(cw, t, tr, "nc", cog, str(cig * nt_),
                                          (f"col + grp * {cig * nt_} * NCMAX", "id", "bo", True),
                                          (f"{wp} + grp * {cig * cog * kplane}", "wr", "ao"))
                        cw.line("#pragma omp for schedule(static)")
                        with cw.block(f"for (int64_t orow = 0; orow < {cog} * RC; orow++)"):
                            cw.line("const int64_t o = orow / RC, rr = orow % RC, r = r0 + rr;",
                                    f"const int64_t img = r / {rpi}, rem = r % {rpi};",
                                    f"int64_t pos = {ph[nd - 1]};")
                            for i in range(nd - 1):
                                cw.line(f"pos += ({ph[i]} + {axes[i][0]} * (rem / {gst[i]} % "
                                        f"{grid[i]})) * {yst[i]};")
                            cw.line(f"{t.store} *dst = {yp} + (img * {co} + grp * {cog} + o) * "
                                    f"{oplane} + pos;")
                            b = f"{bp}[grp * {cog} + o]" if bp else None
                            sj = axes[nd - 1][0]
                            if nt_:
                                _store_rows(cw, tr, cog, L, L, "nc", b, sj)
                            else:  # no tap reaches this phase: the empty sum, +0
                                val = f"({t.store})0 + {b}" if b else "0"
                                cw.line(f"for (int64_t q = 0; q < {L}; q++) dst[q * {sj}] = "
                                        f"{val};")
    cw.line("free(col);", "free(ct);", "free(ao);", "free(bo);", "free(wr);", "free(id);")


# -- implicit im2col: unit strides on two spatial axes ----------------------------------------

WASTE = 1.5  # implicit convolution when padded planes exceed the output planes at most this much
# A backward convolution with fewer multiply-adds per image than SMALL may waste up to
# WASTE_BACKWARD: its explicit path builds an im2col buffer of Cout x taps rows per phase, which
# costs as much as the product. Measured with shared borders (A/B in one process, cold cache,
# median): squeezenet's 64->256 expand layer at 3x3 (padded 1.78x, 1.3 M per image) takes
# 0.52-0.73 ms implicit against 0.65-1.03 explicit; resnet18's 256-channel layers at 4x4
# (1.56x, 9.4 M) take 2.07-2.80 implicit against 1.73-2.41 explicit: the product dominates.
WASTE_BACKWARD = 2.0
SMALL = 1 << 22
FG_PLANE = 128  # implicit filter gradient over planes of at least this many positions
DEPTHWISE_TAPS = 49  # depthwise filter gradients with up to this many taps: one chain per tap
SKEW = 16  # elements between the channels of a padded copy (64+ bytes: other cache sets)


@dataclass
class _Padded:
    """A tensor copied with zero borders, channel-major. Channel ``c`` starts with ``gap`` zeros
    (at least ``SKEW``: rows of a product that lie in different channels then do not share L1
    cache sets), then ``NB`` planes of ``hp`` rows of ``wp`` columns: plane row ``yy``, column
    ``xx`` of image ``n`` holds ``src[n, c, yy + omin0, xx + omin1]``, 0 outside ``src``. Tap
    shift ``(o0, o1)`` of output ``(y, x)`` is read at ``(n * hp + y) * wp + x + at(o0, o1)``
    from the channel's start; ``slack`` zeros follow the last channel, for the discarded
    columns that read past it.

    On an axis whose shifts reach below 0 the padding is shared (``_axis``): the plane starts at
    the tensor's first row (column), and a read before it lands in the zero rows (columns) that
    end the previous plane (row), or in the gap. One border instead of two: 7x7 planes padded
    for a 3x3 filter take 8x8 positions, not 9x9."""

    src: str
    chans: int
    dims: tuple[int, int]
    omin: tuple[int, int]
    hp: int
    wp: int
    slack: int
    gap: int

    @property
    def size(self) -> str:
        return f"(int64_t){self.chans} * ({self.chan()}) + {self.slack}"

    def chan(self) -> str:
        """Elements from one channel to the next: the gap and the planes."""
        return f"(NB * {self.hp * self.wp} + {self.gap})"

    def at(self, o0: int, o1: int) -> int:
        """The offset of tap shift (o0, o1) from the start of a channel."""
        return self.gap + (o0 - self.omin[0]) * self.wp + (o1 - self.omin[1])


def _axis(src: int, out: int, lo: int, hi: int) -> tuple[int, int]:
    """(omin, padded length) of one axis: ``out`` positions read the tensor (``src`` long) at
    shifts ``lo..hi``. Two borders: ``out + hi - lo`` from ``lo``. Shared, when ``lo < 0``: the
    axis starts at 0 and ends with at least ``-lo`` zeros (a read before the start wraps into
    the previous line's end) and is long enough for the reads past its end and for the ``out``
    positions computed on it (padding wider than the filter: every shift below 0): shorter
    when the tensor is no longer than the reads reach."""
    full = out + hi - lo
    shared = max(src - lo, out + max(hi, 0))  # and never shorter than the outputs it holds
    return (0, shared) if lo < 0 and shared < full else (lo, full)


def _padded(src: str, chans: int, dims: Sequence[int], out: Sequence[int],
            shifts: Sequence[tuple[int, int]]) -> _Padded:
    lo = (min(s[0] for s in shifts), min(s[1] for s in shifts))
    hi = (max(s[0] for s in shifts), max(s[1] for s in shifts))
    (o0, hp), (o1, wp) = (_axis(dims[i], out[i], lo[i], hi[i]) for i in range(2))
    # the lowest read of output (0, 0), before the plane's start when the padding is shared
    lead = max(0, -min((s0 - o0) * wp + (s1 - o1) for s0, s1 in shifts))
    gap = max(SKEW, -(-lead // SKEW) * SKEW)
    return _Padded(src, chans, (dims[0], dims[1]), (o0, o1), hp, wp,
                   (hi[0] - lo[0] + 1) * wp + 64, gap)


def _fill_padded(cw: CWriter, t: CType, p: _Padded) -> None:
    """Write ``xp`` (inside the parallel region: rows shared among the threads)."""
    sh, sw = p.dims
    cw.line("#pragma omp for schedule(static)")
    with cw.block(f"for (int64_t cr = 0; cr < {p.chans} * NB * {p.hp}; cr++)"):
        cw.line(f"const int64_t c = cr / (NB * {p.hp}), n = cr / {p.hp} % NB, "
                f"yy = cr % {p.hp};",
                f"{t.store} *d = xp + c * ({p.chan()}) + {p.gap} + (n * {p.hp} + yy) * {p.wp};",
                f"const int64_t sy = yy + {p.omin[0]};")
        with cw.block("if (n == 0 && yy == 0)"):  # the gap before this channel
            cw.line(f"memset(d - {p.gap}, 0, {p.gap} * sizeof(*d));")
        with cw.block(f"if (sy < 0 || sy >= {sh})"):
            cw.line(f"memset(d, 0, {p.wp} * sizeof(*d));", "continue;")
        lo, hi = max(0, -p.omin[1]), min(p.wp, sw - p.omin[1])
        cw.line(f"const {t.store} *s = {p.src} + ((n * {p.chans} + c) * {sh} + sy) * {sw};")
        if lo > 0:
            cw.line(f"memset(d, 0, {lo} * sizeof(*d));")
        if hi > lo:
            cw.line(f"memcpy(d + {lo}, s + {lo + p.omin[1]}, {hi - lo} * sizeof(*d));")
        if hi < p.wp:
            cw.line(f"memset(d + {max(hi, lo)}, 0, {p.wp - max(hi, lo)} * sizeof(*d));")
    cw.line("#pragma omp for schedule(static)",
            f"for (int64_t e = 0; e < {p.slack}; e++) xp[(int64_t){p.chans} * ({p.chan()}) + e]"
            " = 0;")


def _conv_shifts(ks: Sequence[int], axes: Sequence[tuple[int, int, int]],
                 fwd: bool) -> list[tuple[int, int]]:
    """The input shift of each tap of a unit-stride 2-D convolution, in the reference's tap
    order: forward, tap ``k`` of output ``u`` reads input ``u + k*d - sp``; backward, output
    ``u`` receives tap ``k`` from input ``u + sp - k*d``, the taps in reversed order."""
    kplane = ks[0] * ks[1]
    order = range(kplane) if fwd else range(kplane - 1, -1, -1)
    sign = 1 if fwd else -1
    return [(sign * (tn // ks[1] * axes[0][1] - axes[0][2]),
             sign * (tn % ks[1] * axes[1][1] - axes[1][2])) for tn in order]


def implicit_ok(strides: Sequence[int], out: Sequence[int], kdims: Sequence[int],
                dil: Sequence[int], filter_grad: bool, rows: int = 0, forward: bool = True,
                src: Sequence[int] = (), pads: Sequence[int] = (), macs: int = 0) -> bool:
    """True when a kernel takes the implicit path: two spatial axes at unit stride, and

    - a convolution (``src``: its input's spatial dims, ``pads``: start padding, ``macs``: its
      multiply-adds per image), which computes the padded planes' extra columns too, wastes
      little;
    - a filter gradient (``rows`` = its channels per group) sums over planes of at least
      ``FG_PLANE`` positions, or has few channels: with short sums and large filters, the
      transposed product's final transpose of dW costs more than the im2col product."""
    if len(out) != 2 or any(s != 1 for s in strides):
        return False
    if filter_grad:
        return out[0] * out[1] >= FG_PLANE or rows < NARROW
    shifts = _conv_shifts(kdims, [(1, dil[i], pads[i]) for i in range(2)], forward)
    hp, wp = (_axis(src[i], out[i], min(s[i] for s in shifts), max(s[i] for s in shifts))[1]
              for i in range(2))
    small = not forward and macs < SMALL
    return hp * wp <= (WASTE_BACKWARD if small else WASTE) * out[0] * out[1]


MIN_K = 32  # a convolution whose sums are shorter reads faster from an im2col buffer


def emit_convolution_implicit(k: Kernel, t: CType, fwd: bool, flip: bool, g: int,
                              chans: tuple[int, int], dims: tuple[list[int], list[int], list[int]],
                              axes: Sequence[tuple[int, int, int]], has_bias: bool) -> None:
    """A unit-stride 2-D convolution (either direction) as one product per group and chunk of
    positions, reading the input with zero borders at each tap's shift: no im2col buffer.

    Forward, tap ``k`` of output ``u`` reads input ``u + k*d - sp``; backward (unit stride)
    output ``u`` receives tap ``k`` from input ``u + sp - k*d``, the taps in reversed order (as
    ``_phases`` with one phase). Positions run over the padded planes (``wp`` columns per row,
    ``hp`` rows per image); the extra ones are computed and dropped."""
    node = k.node
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    xp_, wp, yp = k.param(x), k.param(w), k.param(y)
    bp = k.param(node.inputs[2]) if has_bias else None
    ci, co = chans
    xs, ys, ks = dims
    cig, cog = ci // g, co // g
    kplane = math.prod(ks)
    kg = cig * kplane
    order = range(kplane) if fwd else range(kplane - 1, -1, -1)
    shifts = _conv_shifts(ks, axes, fwd)
    p = _padded(xp_, ci, xs, ys, shifts)
    plane = p.hp * p.wp
    # no shift and no border (1x1 filters without padding): read the input where it lies,
    # rows (image, position) through a table, instead of copying it
    direct = all(sh == (0, 0) for sh in shifts) and (p.hp, p.wp) == (xs[0], xs[1]) == tuple(ys)
    tr = cog < (NARROW if direct else NARROW_PADDED)
    # transposed (positions x channels): per block of RB output rows of an image, one thread
    # runs the product and stores its rows while they are in its cache; the padding rows are
    # not computed
    rb = max(1, BLOCK // p.wp)
    cw = k.code
    cw.line(f"const int64_t NB = {k.dims.expr(x.type.shape[0])};",
            f"const int64_t MT = NB * {plane}, "
            f"MC = {rb * p.wp if tr else max(p.wp, (CHUNK // max(cog, 1)) // p.wp * p.wp)};")
    bufs = [("ct", t.store, f"{cog} * MC" + (" * (nt > 0 ? nt : 1)" if tr else "")),
            ("ao", "int64_t", str(kg)), ("so", "int64_t", str(kg)),
            ("wr", "int64_t", str(cog))]
    bufs += ([("pm", "int64_t", "MT")] if direct else [("xp", t.store, p.size)] +
             ([] if tr else [("id", "int64_t", "MC")]))
    alloc(cw, bufs)
    # kk = (channel, tap in the reference's order): the filter element, and the input shift
    with cw.block(f"for (int64_t kk = 0; kk < {kg}; kk++)"):
        tl = ", ".join(str(tn) for tn in order)
        sl = ", ".join(str(0 if direct else p.at(*s)) for s in shifts)
        cw.line(f"static const int64_t TAP[{kplane}] = {{{tl}}};",
                f"static const int64_t SHIFT[{kplane}] = {{{sl}}};",
                f"const int64_t cl = kk / {kplane}, j = kk % {kplane};",
                f"const int64_t e = {f'{kplane - 1} - TAP[j]' if flip else 'TAP[j]'};",
                f"ao[kk] = cl * {kplane if fwd else cog * kplane} + e;",
                f"so[kk] = cl * {plane if direct else p.chan()} + SHIFT[j];")
    _k_offsets(cw, "wr", str(cog), str(kg) if fwd else str(kplane))
    if direct:  # position m = (image, in-plane position) of x
        cw.line(f"for (int64_t m = 0; m < MT; m++) pm[m] = m / {plane} * {ci * plane} + "
                f"m % {plane};")
    elif not tr:
        _k_offsets(cw, "id", "MC", "1")
    work = f"(double)MT * {co * kg}"
    cw.line(f"#pragma omp parallel num_threads(nt) if({work} > GC_PAR_MIN)")
    with cw.block():
        if not direct:
            _fill_padded(cw, t, p)
        if tr:
            _blocked_transposed(cw, t, p, g, (cig, cog, co), kg, rb, ys, direct,
                                (xp_, f"{wp} + grp * {cog * kg}", yp, bp), k.epilogue == "relu")
        else:
            _chunked(cw, t, p, g, (cig, cog, co), kg, ys, direct, (xp_, wp, yp, bp),
                     k.epilogue == "relu")
    cw.line(*(f"free({name});" for name, _, _ in bufs))


BLOCK = 512  # positions per block of a transposed implicit product (rows of the padded plane)


def _chunked(cw: CWriter, t: CType, p: _Padded, g: int, chans: tuple[int, int, int], kg: int,
             ys: Sequence[int], direct: bool, ptrs: tuple[str, str, str, str | None],
             relu: bool) -> None:
    """The implicit product ``W @ X`` per group and chunk of ``MC`` positions (jobs shared by
    the threads), then the rows of the chunk's valid positions stored into ``y`` (rows shared;
    ``relu``: through the relu epilogue): ``ct`` is ``cog x MC``."""
    cig, cog, co = chans
    xp_, wp, yp, bp = ptrs
    plane = p.hp * p.wp
    with cw.block("for (int64_t m0 = 0; m0 < MT; m0 += MC)"):
        cw.line("const int64_t mc = MT - m0 < MC ? MT - m0 : MC;")
        with cw.block(f"for (int64_t grp = 0; grp < {g}; grp++)"):
            data = ((f"{xp_} + grp * {cig * plane}", "pm + m0", "so", False) if direct else
                    (f"xp + grp * {cig} * {p.chan()} + m0", "id", "so", True))
            _conv_product(cw, t, False, "mc", cog, str(kg), data,
                          (f"{wp} + grp * {cog * kg}", "wr", "ao"))
            cw.line("#pragma omp for schedule(static)")
            with cw.block(f"for (int64_t orow = 0; orow < {cog} * (mc / {p.wp}); orow++)"):
                cw.line(f"const int64_t o = orow / (mc / {p.wp}), rr = orow % (mc / {p.wp});",
                        f"const int64_t row = m0 / {p.wp} + rr, img = row / {p.hp}, "
                        f"yy = row % {p.hp};",
                        f"if (yy >= {ys[0]}) continue;",
                        f"{t.store} *dst = {yp} + ((img * {co} + grp * {cog} + o) * {ys[0]} + "
                        f"yy) * {ys[1]};")
                _store_rows(cw, False, cog, ys[1], p.wp, "mc",
                            f"{bp}[grp * {cog} + o]" if bp else None,
                            relu=t.store if relu else None)


def _blocked_transposed(cw: CWriter, t: CType, p: _Padded, g: int, chans: tuple[int, int, int],
                        kg: int, rb: int, ys: Sequence[int], direct: bool,
                        ptrs: tuple[str, str, str, str | None], relu: bool) -> None:
    """The implicit product ``X^T @ W^T`` (positions x ``cog``: the channels are the packed,
    narrow side) per group and block of ``rb`` output rows of one image, each block on one
    thread: the serial gemm into the thread's ``ct`` (``rb * wp x cog``), then the block's
    valid positions stored into ``y`` (``relu``: through the relu epilogue) while they are in
    that thread's cache. The zero rows
    between images are not computed; each row's border columns are, and are dropped."""
    cig, cog, co = chans
    xp_, wp, yp, bp = ptrs
    plane = p.hp * p.wp
    nyb = -(-ys[0] // rb)
    cw.line(f"{t.store} *ctl = ct + (int64_t)gc_thread() * MC * {cog};")
    cw.line("#pragma omp for schedule(static)")
    with cw.block(f"for (int64_t b = 0; b < (int64_t){g} * NB * {nyb}; b++)"):
        cw.line(f"const int64_t grp = b / (NB * {nyb}), img = b / {nyb} % NB, "
                f"y0 = b % {nyb} * {rb};",
                f"const int64_t rows = {ys[0]} - y0 < {rb} ? {ys[0]} - y0 : {rb};",
                f"const int64_t m0 = (img * {p.hp} + y0) * {p.wp};")
        a = (f"{xp_} + grp * {cig * plane}", "pm + m0") if direct else (
            f"xp + grp * {cig} * {p.chan()} + m0", "NULL")  # consecutive positions
        cw.line(f"gc_gemm1_{suffix(t)}(rows * {p.wp}, {cog}, {kg}, {a[0]}, {a[1]}, so, {wp}, ao, "
                f"wr, ctl, {cog}, 1, 0);")
        with cw.block(f"for (int64_t o = 0; o < {cog}; o++)"):
            with cw.block("for (int64_t rr = 0; rr < rows; rr++)"):
                cw.line(f"{t.store} *dst = {yp} + ((img * {co} + grp * {cog} + o) * {ys[0]} + "
                        f"y0 + rr) * {ys[1]};")
                _store_rows(cw, True, cog, ys[1], p.wp, "",
                            f"{bp}[grp * {cog} + o]" if bp else None, buf="ctl",
                            relu=t.store if relu else None)


def emit_filter_grad_implicit(k: Kernel, t: CType, flip: bool, g: int, it_ptr: str, ot_ptr: str,
                              chans: tuple[int, int],
                              dims: tuple[list[int], list[int], list[int]],
                              axes: Sequence[tuple[int, int, int]], f1n: int) -> None:
    """A unit-stride 2-D filter gradient, per group ``dW^T = X @ it^T`` over every (image,
    position) of the iterated tensor: ``X`` reads the other tensor with zero borders at each
    tap's shift ``k*d - sp`` (no im2col buffer, never copied), and ``it`` is transposed once
    into rows of its ``ca`` channels (the packed side, copied contiguously per block)."""
    node = k.node
    x, dw = node.inputs[0], node.outputs[0]
    wp = k.param(dw)
    c_it, c_ot = chans
    ms, ns, ks = dims
    kplane = math.prod(ks)
    ca = c_it // g
    ncol = f1n * kplane
    mplane = ms[0] * ms[1]
    taps = [(tn // ks[1], tn % ks[1]) for tn in range(kplane)]
    shifts = [(k0 * axes[0][1] - axes[0][2], k1 * axes[1][1] - axes[1][2]) for k0, k1 in taps]
    p = _padded(ot_ptr, c_ot, ns, ms, shifts)
    # no shift and no border (1x1 without padding): the other tensor is read where it lies
    direct = all(sh == (0, 0) for sh in shifts) and (p.hp, p.wp) == tuple(ns) == tuple(ms)
    nplane = ns[0] * ns[1]
    cw = k.code
    cw.line(f"const int64_t NB = {k.dims.expr(x.type.shape[0])}, KT = NB * {mplane};")
    nr = NR[t.acc]
    cap = -(-ca // nr) * nr  # it's channels, in whole panels
    bufs = [("itt", t.store, f"{g * cap} * KT"), ("kx", "int64_t", "KT"),
            ("xr", "int64_t", str(ncol)), ("dwt", t.store, str(g * ncol * ca))]
    if not direct:
        bufs.append(("xp", t.store, p.size))
    alloc(cw, bufs)
    # row (f1, e) of dW^T: filter element e, tap e (or its flip), read at the tap's shift
    with cw.block(f"for (int64_t c = 0; c < {ncol}; c++)"):
        sl = ", ".join(str(0 if direct else p.at(*s)) for s in shifts)
        cw.line(f"static const int64_t SHIFT[{kplane}] = {{{sl}}};",
                f"const int64_t e = c % {kplane};",
                f"xr[c] = c / {kplane} * {nplane if direct else p.chan()} + "
                f"SHIFT[{f'{kplane - 1} - e' if flip else 'e'}];")
    work = f"(double)KT * {c_it * ncol}"
    cw.line(f"#pragma omp parallel num_threads(nt) if({work} > GC_PAR_MIN)")
    with cw.block():
        if not direct:
            _fill_padded(cw, t, p)
        # k = (image, position), ascending: the reference's order
        cw.line("#pragma omp for schedule(static)")
        with cw.block(f"for (int64_t r = 0; r < NB * {ms[0]}; r++)"):  # (image, row)
            cw.line(f"const int64_t n = r / {ms[0]}, y = r % {ms[0]};")
            at = (f"n * {c_ot * nplane} + y * {ns[1]} + u" if direct else
                  f"(n * {p.hp} + y) * {p.wp} + u")
            cw.line(f"for (int64_t u = 0; u < {ms[1]}; u++) kx[r * {ms[1]} + u] = {at};")
        # it^T, packed as the gemm packs B: per group, panels of NR channels, q, channel; in
        # blocks of 64 positions of one image (reads along planes, writes within a few lines)
        nblk = -(-mplane // 64)
        cw.line("#pragma omp for schedule(static)")
        with cw.block(f"for (int64_t b = 0; b < NB * {nblk}; b++)"):
            cw.line(f"const int64_t n = b / {nblk}, p0 = b % {nblk} * 64;",
                    f"const int64_t pe = {mplane} - p0 < 64 ? {mplane} : p0 + 64;")
            with cw.block(f"for (int64_t f = 0; f < {g * cap}; f++)"):
                cw.line(f"const int64_t grp = f / {cap}, fc = f % {cap};",
                        f"{t.store} *d = itt + ((grp * {cap // nr} + fc / {nr}) * KT + "
                        f"n * {mplane}) * {nr} + fc % {nr};")
                with cw.block(f"if (fc >= {ca})"):
                    cw.line(f"for (int64_t q = p0; q < pe; q++) d[q * {nr}] = 0;", "continue;")
                cw.line(f"const {t.store} *s = {it_ptr} + (n * {c_it} + grp * {ca} + fc) * "
                        f"{mplane};",
                        f"for (int64_t q = p0; q < pe; q++) d[q * {nr}] = s[q];")
        with cw.block(f"for (int64_t grp = 0; grp < {g}; grp++)"):
            src = (f"{ot_ptr} + grp * {f1n * nplane}" if direct else
                   f"xp + grp * {f1n} * {p.chan()}")
            gemm(cw, t, str(ncol), ca, "KT", (src, "xr", "kx"),
                 (f"itt + grp * KT * {cap}", "NULL", "NULL"),
                 (f"dwt + grp * {ncol * ca}", str(ca)), "1", packed=True)
        _untranspose(cw, wp, g, ca, ncol)
    cw.line(*(f"free({name});" for name, _, _ in bufs))


def depthwise_ok(t: CType, rows: int, nd: int) -> bool:
    """True for a filter gradient with one filter row per group (depthwise) on two axes."""
    return t.acc == t.store and t.acc in ("float", "double") and rows == 1 and nd == 2


def emit_filter_grad_depthwise(k: Kernel, t: CType, flip: bool, g: int, it_ptr: str,
                               ot_ptr: str, chans: tuple[int, int],
                               dims: tuple[list[int], list[int], list[int]],
                               axes: Sequence[tuple[int, int, int]], f1n: int) -> None:
    """A depthwise filter gradient (one ``it`` channel per group, the caller checked ``it``
    finite): per (channel, multiplier) pair every tap's sum at once, over images, then
    positions, reading the other tensor with zero borders. The taps' sums are independent
    chains (the reference's order within each), so they overlap instead of each waiting on
    its own additions."""
    node = k.node
    x, dw = node.inputs[0], node.outputs[0]
    wp_ = k.param(dw)
    c_it, c_ot = chans
    ms, ns, ks = dims
    kplane = math.prod(ks)
    mplane = ms[0] * ms[1]
    s0, s1 = axes[0][0], axes[1][0]
    taps = [(tn // ks[1], tn % ks[1]) for tn in range(kplane)]
    shifts = [(k0 * axes[0][1] - axes[0][2], k1 * axes[1][1] - axes[1][2]) for k0, k1 in taps]
    # rows and columns the strided positions reach: (out - 1) * stride + 1 before the shifts
    p = _padded(ot_ptr, c_ot, ns, [(ms[0] - 1) * s0 + 1, (ms[1] - 1) * s1 + 1], shifts)
    cw = k.code
    cw.line(f"const int64_t NB = {k.dims.expr(x.type.shape[0])};")
    alloc(cw, [("xp", t.store, p.size)])
    work = f"(double)NB * {mplane} * {g * f1n * kplane}"
    cw.line(f"#pragma omp parallel num_threads(nt) if({work} > GC_PAR_MIN)")
    with cw.block():
        _fill_padded(cw, t, p)
        offs = []
        for e in range(kplane):
            tap = kplane - 1 - e if flip else e
            offs.append(p.at(*shifts[tap]))
        cw.line("#pragma omp for schedule(static)")
        with cw.block(f"for (int64_t pr = 0; pr < {g * f1n}; pr++)"):
            cw.line(f"const int64_t fc = pr / {f1n}, oc = pr;",
                    *(f"{t.acc} a{e} = 0;" for e in range(kplane)))
            with cw.block("for (int64_t n = 0; n < NB; n++)"):
                with cw.block(f"for (int64_t y = 0; y < {ms[0]}; y++)"):
                    cw.line(f"const {t.store} *dr = {it_ptr} + ((n * {c_it} + fc) * {ms[0]} + y) "
                            f"* {ms[1]};",
                            f"const {t.store} *xr = xp + oc * {p.chan()} + (n * {p.hp} + y * {s0})"
                            f" * {p.wp};")
                    with cw.block(f"for (int64_t u = 0; u < {ms[1]}; u++)"):
                        cw.line(f"const {t.acc} d = dr[u];",
                                f"const {t.store} *xx = xr + u * {s1};")
                        for e in range(kplane):
                            cw.line(f"{{ const {t.acc} pm = d * xx[{offs[e]}]; "
                                    f"a{e} = a{e} + pm; }}")
            cw.line(*(f"{wp_}[pr * {kplane} + {e}] = a{e};" for e in range(kplane)))
    cw.line("free(xp);")
