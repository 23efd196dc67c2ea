"""Convolution by tap classes: small padded planes without a product of padding.

A padded convolution over a small plane computes many products of padding: resnet18's 3x3
layers at 2x2 positions read 4 of their 9 taps inside the input at each position, so an im2col
product (or an implicit one over padded planes) spends 5/9 of its multiply-adds on zeros, and
its 4x4 layers 31%. Here the output positions are split into classes by the taps that land
inside the input (per axis, a run of consecutive positions reads the same taps: the first
position or two, the interior, the last ones), and each class is one product over its own taps:

    y[o, (image, position)] = sum over kk of W[o, kk] * x[kk at that position]

with ``kk = (input channel, valid tap)`` in the reference's order (channels, then taps
row-major; backward, the taps reversed: SPEC-training.md §10.1). The reference skips a tap that
reads padding (``if all(0 <= p < size)``), and so does a class: it adds the same products in
the same order, starting from +0, so the result is bit-identical for every input, NaN and
infinity included. Nothing is copied: the gemm reads the input where it lies through tables of
offsets (a column per (image, position), a row offset per (channel, tap)), and the filter
through the same tables as the other paths. Since no product of padding is computed, the finite
check of conv_gemm.py is not needed either.

A class of one position per image has as many columns as images (8 at batch 8): the half-width
gemm (``gc_gemmh_*``, 8 float lanes) takes it rather than a 16-lane tile half of which would be
dropped. The forward direction takes any stride; the backward (transposed) direction unit
strides only (a strided one keeps conv_gemm's phases). ``worth`` picks the layers: measured on
this project's machine (AMD Zen 4, 2 cores), see its docstring.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from gradc.backends.c.conv_gemm import alloc, suffix, NARROW
from gradc.backends.c.ctypes_map import CType
from gradc.backends.c.kernel import Kernel

OB = 16  # filter rows per block
MAX_CLASSES = 16  # more classes (large filters on small planes): too many small products


@dataclass
class TapClass:
    """Output positions that read the same taps: per position (the input offset its first
    valid tap's row of the product reads from, in the image's plane; its output position), per
    tap in the reference's order (tap number, input offset relative to a position's base)."""

    positions: list[tuple[int, int]]
    taps: list[tuple[int, int]]


def _axis_groups(xn: int, yn: int, k: int, s: int, d: int, sp: int,
                 fwd: bool) -> list[tuple[range, list[int]]]:
    """Runs of output positions on one axis that read the same taps: (positions, taps).
    Forward, tap ``k`` of output ``o`` reads input ``o*s - sp + k*d``; backward (s = 1),
    output ``o`` receives tap ``k`` from input ``o + sp - k*d``."""
    groups: list[tuple[range, list[int]]] = []
    for o in range(yn):
        valid = [kk for kk in range(k)
                 if 0 <= (o * s - sp + kk * d if fwd else o + sp - kk * d) < xn]
        if groups and groups[-1][1] == valid and groups[-1][0].stop == o:
            groups[-1] = (range(groups[-1][0].start, o + 1), valid)
        else:
            groups.append((range(o, o + 1), valid))
    return groups


def plan(xs: Sequence[int], ys: Sequence[int], ks: Sequence[int],
         axes: Sequence[tuple[int, int, int]], fwd: bool) -> list[TapClass] | None:
    """The tap classes of a convolution (``axes``: (stride, dilation, start padding) per
    axis), or None when it has more than ``MAX_CLASSES`` or is a strided backward one."""
    nd = len(ks)
    if not fwd and any(s != 1 for s, _, _ in axes):
        return None
    groups = [_axis_groups(xs[i], ys[i], ks[i], *axes[i], fwd) for i in range(nd)]
    if math.prod(len(g) for g in groups) > MAX_CLASSES:
        return None
    xst = [math.prod(xs[i + 1:]) for i in range(nd)]
    yst = [math.prod(ys[i + 1:]) for i in range(nd)]
    kst = [math.prod(ks[i + 1:]) for i in range(nd)]
    order = range(math.prod(ks)) if fwd else range(math.prod(ks) - 1, -1, -1)
    out = []
    for combo in itertools.product(*groups):
        valid = [g[1] for g in combo]
        # the input offset of each position is taken at its lowest-reading valid tap, so that
        # every offset in the tables is >= 0 (forward: the least k; backward: the greatest)
        ref = [(min(v) if fwd else max(v)) if v else 0 for v in valid]
        taps = []
        for tn in order:
            kc = [tn // kst[i] % ks[i] for i in range(nd)]
            if all(kc[i] in valid[i] for i in range(nd)):
                rel = sum((kc[i] - ref[i] if fwd else ref[i] - kc[i]) * axes[i][1] * xst[i]
                          for i in range(nd))
                taps.append((tn, rel))
        positions = []
        for o in itertools.product(*(g[0] for g in combo)):
            base = sum(((o[i] * axes[i][0] - axes[i][2] + ref[i] * axes[i][1]) if fwd else
                        (o[i] + axes[i][2] - ref[i] * axes[i][1])) * xst[i] for i in range(nd))
            positions.append((base if taps else 0, sum(o[i] * yst[i] for i in range(nd))))
        out.append(TapClass(positions, taps))
    return out


WIDE = 128  # filter rows from which classes also take planes with less padding


def worth(classes: list[TapClass], xs: Sequence[int], ys: Sequence[int],
          ks: Sequence[int], cog: int) -> bool:
    """True when tap classes beat the padded products, on planes of at most 64 positions
    (the classes' products then stay short) with at least ``NARROW`` filter rows (fewer: the
    other paths run the product transposed):

    - the products of padding they leave out are at least a quarter of the padded product's
      (resnet18's 2x2 layers: 5/9; its 4x4 ones: 31%; a 3x3 plane: 40%);
    - or at least 15% with ``WIDE`` filter rows or more (7x7 planes: 18%, 8x8: 16%).

    Measured (A/B in one process, median): with 128-256 filter rows, squeezenet's 7x7 forward
    layers ran 1.11-1.22x faster and resnet18's 8x8 layers 1.13-1.15x in both directions;
    with 32-64 rows (the blocks of ``OB`` rows leave the threads too few jobs) 7x7 and 8x8
    layers ran 0.77-0.93x as fast."""
    kplane, oplane = math.prod(ks), math.prod(ys)
    terms = sum(len(c.positions) * len(c.taps) for c in classes)
    full = oplane * kplane
    return cog >= NARROW and oplane <= 64 and (
        terms <= 0.75 * full or (cog >= WIDE and terms <= 0.85 * full))


def emit(k: Kernel, t: CType, fwd: bool, flip: bool, g: int, chans: tuple[int, int],
         dims: tuple[list[int], list[int], list[int]], classes: list[TapClass],
         has_bias: bool) -> None:
    """Per group: each class's input columns packed once (``xb``, the gemm's packed-B layout),
    then per block of ``OB`` filter rows, on one thread, each class's product ``W @ X_class``
    into its columns of ``ct`` (``cog x NB * oplane``, columns class-major, then image, then
    position): the block's rows of W are read from memory once and from L2 by the other
    classes. Then every column is stored into ``y`` (plus the bias, through the relu epilogue
    if the kernel has one)."""
    node = k.node
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    xp, wp, yp = k.param(x), k.param(w), k.param(y)
    bp = k.param(node.inputs[2]) if has_bias else None
    ci, co = chans
    xs, ys, ks = dims
    cig, cog = ci // g, co // g
    kplane, iplane, oplane = math.prod(ks), math.prod(xs), math.prod(ys)
    kg = cig * kplane
    nt_all = sum(len(c.taps) for c in classes)
    half = 8 if t.acc == "float" else 4  # columns of a half-width vector
    cw = k.code
    pos = [p for c in classes for p in c.positions]
    tap = [tn for c in classes for tn, _ in c.taps]
    cw.line(f"const int64_t NB = {k.dims.expr(x.type.shape[0])}, TOT = NB * {oplane};",
            f"const int64_t OB = {OB};",
            f"static const int64_t BASE[{oplane}] = {{{', '.join(str(b) for b, _ in pos)}}};",
            f"static const int64_t OUT[{oplane}] = {{{', '.join(str(o) for _, o in pos)}}};")
    if nt_all:
        cw.line(f"static const int64_t TAP[{nt_all}] = {{{', '.join(map(str, tap))}}};",
                f"static const int64_t REL[{nt_all}] = "
                f"{{{', '.join(str(r) for c in classes for _, r in c.taps)}}};")
    # per class: columns, vector width (NR), packed panels' offset in xb
    nc = len(classes)
    cw.line(f"int64_t CN[{nc}], CR[{nc}], CX[{nc + 1}];", "CX[0] = 0;")
    for i, c in enumerate(classes):
        kc = cig * len(c.taps)
        cw.line(f"CN[{i}] = NB * {len(c.positions)}; CR[{i}] = CN[{i}] <= {half} ? {half} : "
                f"{2 * half};",
                f"CX[{i + 1}] = CX[{i}] + ((CN[{i}] + CR[{i}] - 1) / CR[{i}] * CR[{i}] * {kc} "
                "+ 15) / 16 * 16;")
    alloc(cw, [("ct", t.store, f"{cog} * TOT"), ("ao", "int64_t", f"{cig * max(1, nt_all)}"),
               ("bo", "int64_t", f"{cig * max(1, nt_all)}"), ("wr", "int64_t", str(cog)),
               ("pm", "int64_t", "TOT"), ("yo", "int64_t", "TOT"),
               ("xb", t.store, f"CX[{nc}] + 1")])
    cw.line(f"for (int64_t o = 0; o < {cog}; o++) wr[o] = o * {kg if fwd else kplane};")
    # per class: k offsets (channel, tap) into W and x; column offsets of (image, position)
    pb = tb = 0
    for c in classes:
        n_t, n_p = len(c.taps), len(c.positions)
        if n_t:
            with cw.block(f"for (int64_t kk = 0; kk < {cig * n_t}; kk++)"):
                cw.line(f"const int64_t cl = kk / {n_t}, j = {tb} + kk % {n_t};",
                        f"ao[{cig * tb} + kk] = cl * {kplane if fwd else cog * kplane} + "
                        f"{f'{kplane - 1} - TAP[j]' if flip else 'TAP[j]'};",
                        f"bo[{cig * tb} + kk] = cl * {iplane} + REL[j];")
        with cw.block(f"for (int64_t m = 0; m < NB * {n_p}; m++)"):
            cw.line(f"const int64_t img = m / {n_p}, j = {pb} + m % {n_p};",
                    f"pm[NB * {pb} + m] = img * {ci * iplane} + BASE[j];",
                    f"yo[NB * {pb} + m] = img * {co * oplane} + OUT[j];")
        pb, tb = pb + n_p, tb + n_t
    work = f"(double)NB * {oplane} * {co * kg}"
    cw.line(f"#pragma omp parallel num_threads(nt) if({work} > GC_PAR_MIN)")
    with cw.block():
        with cw.block(f"for (int64_t grp = 0; grp < {g}; grp++)"):
            wg = f"{wp} + grp * {cog * kg}"  # both directions: cog x kg per group
            xg = f"{xp} + grp * {cig * iplane}"
            pb = tb = 0
            for i, c in enumerate(classes):  # pack: xb[((n / NR) * K + k) * NR + n % NR]
                n_t, n_p = len(c.taps), len(c.positions)
                if n_t:
                    cw.line("#pragma omp for schedule(static) nowait")
                    with cw.block(f"for (int64_t kk = 0; kk < {cig * n_t}; kk++)"):
                        cw.line(f"const {t.store} *s = {xg} + bo[{cig * tb} + kk];",
                                f"const int64_t *cm = pm + NB * {pb};",
                                f"const int64_t nr = CR[{i}], np = (CN[{i}] + nr - 1) / nr;")
                        with cw.block("for (int64_t p = 0; p < np; p++)"):
                            cw.line(f"{t.store} *d = xb + CX[{i}] + (p * {cig * n_t} + kk) * nr;",
                                    f"for (int64_t j = 0; j < nr; j++) d[j] = p * nr + j < "
                                    f"CN[{i}] ? s[cm[p * nr + j]] : 0;")
                pb, tb = pb + n_p, tb + n_t
            cw.line("#pragma omp barrier", "#pragma omp for schedule(static)")
            with cw.block(f"for (int64_t o0 = 0; o0 < {cog}; o0 += OB)"):
                cw.line(f"const int64_t ob = {cog} - o0 < OB ? {cog} - o0 : OB;")
                pb = tb = 0
                for i, c in enumerate(classes):
                    n_t, n_p = len(c.taps), len(c.positions)
                    c0 = f"NB * {pb}"
                    if n_t:
                        args = (f"(ob, CN[{i}], {cig * n_t}, {wg}, wr + o0, ao + {cig * tb}, "
                                f"xb + CX[{i}], NULL, NULL, ct + o0 * TOT + {c0}, TOT, 1, 1);")
                        cw.line(f"if (CR[{i}] == {half}) gc_gemmh1_{suffix(t)}{args}",
                                f"else gc_gemm1_{suffix(t)}{args}")
                    else:  # no tap reads the input: the empty sum, +0
                        cw.line(f"for (int64_t o = o0; o < o0 + ob; o++) "
                                f"for (int64_t m = 0; m < CN[{i}]; m++) "
                                f"ct[o * TOT + {c0} + m] = 0;")
                    pb, tb = pb + n_p, tb + n_t
            cw.line("#pragma omp for schedule(static)")
            with cw.block(f"for (int64_t o = 0; o < {cog}; o++)"):
                cw.line(f"{t.store} *dst = {yp} + (grp * {cog} + o) * {oplane};",
                        f"const {t.store} *src = ct + o * TOT;")
                val = f"src[m] + {bp}[grp * {cog} + o]" if bp else "src[m]"
                if k.epilogue == "relu":
                    cw.line(f"for (int64_t m = 0; m < TOT; m++) {{ const {t.store} v = {val}; "
                            f"dst[yo[m]] = v > 0 ? v : ({t.store})0; }}")
                else:
                    cw.line(f"for (int64_t m = 0; m < TOT; m++) dst[yo[m]] = {val};")
    cw.line("free(ct);", "free(ao);", "free(bo);", "free(wr);", "free(pm);", "free(yo);",
            "free(xb);")
