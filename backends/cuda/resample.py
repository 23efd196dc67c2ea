"""resample (a thread per output element) and resample_grad (a gather: a thread per element of
dX), with every axis' taps computed by the reference's own code and baked into tables.

Shapes are static, so ``gradc.ir.ops.resample.axis_taps`` (SPEC.md §6.1, float32) gives each
axis' taps at generation time: the kernels read indices and float32 weights (as bit patterns)
and never recompute a coordinate. resample sums its corners (axis 0 outermost, low tap first)
from the first term, each weight the float32 product of the axes' weights left to right, as the
reference does; nearest copies the element's bits. resample_grad adds, for each element of dX,
the terms of the dY elements whose taps land on it: dY elements in increasing index, and for
each its taps (corners) in order -- weight-0 and border-clamped repeats included -- from +0:
the order of the reference's ``np.add.at``, so the sum is bit-identical.
"""

from __future__ import annotations

import itertools
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator, Sequence

import numpy as np

from gradc.ir.ops.resample import all_taps

from gradc.backends.c.ctypes_map import CType, ctype
from gradc.backends.c.kernel import anchored, ctx_gen
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.cuda.kernel import (BLOCK, TABLE_BUDGET, CudaKernel, check_table, coords,
                                        row_major, static_shape)


def _bits(w: np.ndarray) -> list[int]:
    return [int(b) for b in np.asarray(w, np.float32).view(np.uint32)]


def _store(t: CType, acc: str) -> str:
    """Round an accumulator once to the dtype (int8/uint8: half away from zero, saturate)."""
    if t.is_float:
        return narrow(t, acc)
    lo, hi = (-128, 127) if t.signed else (0, 255)
    r = f"roundf({acc})"
    return f"(({t.store})({r} < {lo} ? {lo} : ({r} > {hi} ? {hi} : {r})))"


def emit_resample(k: CudaKernel) -> None:
    """Each output element: its corners' input values (nearest: one, a bit copy)."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    t = ctype(x.type.dtype)
    xs, ys = static_shape(k, x.type.shape), static_shape(k, y.type.shape)
    check_table("resample", "axes", max(xs + ys))
    taps = all_taps(n.attrs, ys, xs)
    xst = row_major(xs)
    idx = [[k.table("int64_t", tap[0].tolist()) for tap in axis] for axis in taps]
    wts = [[k.table("uint32_t", _bits(tap[1])) for tap in axis] for axis in taps]
    cw = k.code
    xp, yp = k.param(x), k.param(y)
    with k.each(_prod(ys)) as i:
        c = coords(k, y.type.shape, i, "c")
        if n.attrs["interpolation_mode"] == "nearest":
            src = " + ".join(f"{idx[a][0]}[{c[a]}] * {xst[a]}" for a in range(len(xs)))
            cw.line(f"{yp}[{i}] = {xp}[{src}];")
            return
        for j, corner in enumerate(itertools.product(*(range(len(ax)) for ax in taps))):
            ws = [f"gc_bits2f({wts[a][tp]}[{c[a]}])" for a, tp in enumerate(corner)]
            w = ws[0]
            for more in ws[1:]:
                w = f"({w} * {more})"  # float32, rounded each step, left to right
            src = " + ".join(f"{idx[a][tp]}[{c[a]}] * {xst[a]}" for a, tp in enumerate(corner))
            term = f"({t.acc}){w} * ({t.acc}){widen(t, f'{xp}[{src}]')}"
            cw.line(f"{t.acc} acc = {term};" if j == 0 else f"acc = acc + {term};")
        cw.line(f"{yp}[{i}] = {_store(t, 'acc')};")


def _reach(idx: list[np.ndarray], wts: list[np.ndarray], n: int,
           live: bool = False) -> tuple[list[int], ...]:
    """Per position of dX on one axis: the dY coordinates whose taps land on it (increasing),
    each with those taps' weights (in tap order). Two-level CSR: groups of a position, then
    weights of a group. ``live``: the taps of weight 0 left out (a group of none, too)."""
    groups: list[list[tuple[int, list[int]]]] = [[] for _ in range(n)]
    for c in range(len(idx[0])):
        for tp in range(len(idx)):
            if live and float(wts[tp][c]) == 0:
                continue
            e = int(idx[tp][c])
            g = groups[e]
            if not g or g[-1][0] != c:
                g.append((c, []))
            g[-1][1].append(int(np.float32(wts[tp][c]).view(np.uint32)))
    gstart, coord, wstart, weight = [0], [], [0], []
    for g in groups:
        for c, ws in g:
            coord.append(c)
            weight.extend(ws)
            wstart.append(len(weight))
        gstart.append(len(coord))
    return gstart, coord, wstart, weight


UNROLL = 64  # dY elements per dX element up to which a unit resample_grad is unrolled
PADDED = 2048  # terms per dX element up to which a weighted resample_grad is written out
ONE = 0x3F800000  # the bits of 1.0f


def _regular(gstart: list[int], coord: list[int], wstart: list[int],
             weight: list[int]) -> int:
    """``c`` when an axis' reach is ``c`` consecutive dY coordinates from ``c * e`` for every
    dX position ``e``, each with one tap of weight 1 (nearest at an integer scale, and every
    axis of scale 1), else 0."""
    n = len(gstart) - 1
    c = gstart[1] if n else 0
    ok = (c > 0 and gstart == [c * e for e in range(n + 1)] and coord == list(range(len(coord)))
          and wstart == list(range(len(wstart))) and all(w == ONE for w in weight))
    return c if ok else 0


def emit_resample_grad(k: CudaKernel) -> None:
    """Each element of dX: the weighted dY terms landing on it, in canonical order.

    A tap of weight 0 adds ``0 * d``: +-0 where ``d`` is finite, which leaves the sum as it is
    (a sum from +0 is never -0 in round-to-nearest, and x + +-0 = x for every other x), NaN
    where it is not. Where some axis has such taps (linear resampling keeps a second tap of
    weight 0 on every axis of scale 1, and at the borders), the kernel is two launches: the
    first flags any non-finite element of dY (a flag per block of a fixed grid), the second
    sums only the live terms where no flag is set -- the same bits, with a fraction of the
    terms (the UNet's 2x bilinear upsampling: about 16 where the reference adds 64) -- and every
    term, as the reference does, where one is. Float dtypes only: an integer dY is finite.
    """
    an = anchored(k)
    dy, res = an.operand(0), an.result
    t = ctype(dy.type.dtype)
    ys, out = static_shape(k, dy.type.shape), static_shape(k, res.type.shape)
    check_table("resample_grad", "axes", max(ys + out))
    taps = all_taps(an.anchor.attrs, ys, out)
    yst = row_major(ys)
    reaches = [_reach([tp[0] for tp in axis], [tp[1] for tp in axis], out[a])
               for a, axis in enumerate(taps)]
    live = [_reach([tp[0] for tp in axis], [tp[1] for tp in axis], out[a], live=True)
            for a, axis in enumerate(taps)]
    if live == reaches:
        _emit_sums(k, an, reaches, yst)
        return
    if not t.is_float:
        _emit_sums(k, an, live, yst)
        return
    blocks, flags = _flag_finite(k, an, _prod(ys))
    k.next_launch()
    k.barrier = True
    cw = k.code
    cw.line("__shared__ int gc_fast;", "if (threadIdx.x == 0) gc_fast = 1;", "__syncthreads();")
    with cw.block(f"for (int j = (int)threadIdx.x; j < {blocks}; j += (int)blockDim.x)"):
        cw.line(f"if ({flags}[j]) gc_fast = 0;")
    cw.line("__syncthreads();")
    with cw.block("if (gc_fast)"):
        _emit_sums(k, an, live, yst)
    with cw.block("else"):
        _emit_sums(k, an, reaches, yst)


FLAG_BLOCKS = 512  # blocks of the flagging launch (a few per SM: it streams dY once)


def _flag_finite(k: CudaKernel, an: Any, count: int) -> tuple[int, str]:
    """The first launch: each block of a fixed grid stores 1 in its flag (scratch) where one
    of its elements of dY (the prologue's values) is a NaN or an infinity, else 0; returns
    the number of blocks and the flags' pointer."""
    dy = an.operand(0)
    t = ctype(dy.type.dtype)
    blocks = max(1, min(FLAG_BLOCKS, -(-count // BLOCK)))
    flags = k.scratch("int", blocks)
    cw = k.code
    k.work = blocks * BLOCK
    k.barrier = True
    cw.line("__shared__ int gc_any;", "if (threadIdx.x == 0) gc_any = 0;", "__syncthreads();",
            "bool bad = false;")
    with cw.block(f"for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; "
                  f"i < {count}; i += (int64_t){blocks} * blockDim.x)"):
        pro = ctx_gen(k, dy.type.shape, "i", an.loads, prefix="a")
        dv = pro.get(dy)
        cw.line(*pro.lines, f"const {t.acc} d = ({t.acc}){widen(t, dv)};",
                "bad |= !(d - d == 0);")
    cw.line("if (bad) gc_any = 1;", "__syncthreads();",
            f"if (threadIdx.x == 0) {flags}[blockIdx.x] = gc_any;")
    return blocks, flags


def _emit_sums(k: CudaKernel, an: Any, reaches: list[tuple[list[int], ...]],
               yst: list[int]) -> None:
    """The loop over dX summing the terms of ``reaches``: blocks of unit axes, the padded
    nest, or the general one (``emit_resample_grad``)."""
    dy, res = an.operand(0), an.result
    t = ctype(dy.type.dtype)
    out = static_shape(k, res.type.shape)
    reg = [_regular(*reach) for reach in reaches]
    units = [_unit(*reach) for reach in reaches]
    if all(u is not None for u in units) and _prod([max(u) for u in units if u]) <= UNROLL:
        _emit_blocks(k, an, [u for u in units if u is not None], reg, yst)
        return
    if _padded_size(reaches, reg) <= PADDED:
        _emit_padded(k, an, reaches, reg, yst)
        return
    tabs = [None if reg[a] else (
        k.table("int64_t", reach[0]), k.table("int64_t", reach[1]),
        k.table("int64_t", reach[2]), k.table("uint32_t", reach[3]))
        for a, reach in enumerate(reaches)]
    r = len(out)
    cw = k.code
    with k.each(_prod(out)) as i:
        c = coords(k, res.type.shape, i, "c")
        cw.line(f"{t.acc} acc = 0;")
        heads, ycoord = [], []
        for a in range(r):
            tab = tabs[a]
            if tab is None:
                lo = f"{c[a]} * {reg[a]}" if reg[a] != 1 else c[a]
                heads.append(f"for (int64_t g{a} = {lo}; g{a} < {lo} + {reg[a]}; g{a}++)")
                ycoord.append(f"g{a}")
            else:
                heads.append(f"for (int64_t g{a} = {tab[0]}[{c[a]}]; g{a} < {tab[0]}[{c[a]} + "
                             f"1]; g{a}++)")
                ycoord.append(f"{tab[1]}[g{a}]")
        with cw.blocks(heads):
            flat = " + ".join(f"{ycoord[a]}" + (f" * {yst[a]}" if yst[a] != 1 else "")
                              for a in range(r))
            cw.line(f"const int64_t yi = {flat};")
            pro = ctx_gen(k, dy.type.shape, "yi", an.loads, prefix="a")
            dv = pro.get(dy)
            cw.line(*pro.lines, f"const {t.acc} d = ({t.acc}){widen(t, dv)};")
            weighted = [(a, tab) for a, tab in enumerate(tabs) if tab is not None]
            theads = [f"for (int64_t h{a} = {tab[2]}[g{a}]; h{a} < {tab[2]}[g{a} + 1]; h{a}++)"
                      for a, tab in weighted]
            with cw.blocks(theads) if theads else cw.block():
                _add_term(cw, t, [f"gc_bits2f({tab[3]}[h{a}])" for a, tab in weighted])
        _finish(k, an, t, i)


def _shape_of(reach: tuple[list[int], ...]) -> tuple[int, int, int, int]:
    """(most groups, fewest groups, most taps, fewest taps) of an axis' positions."""
    gstart, _, wstart, _ = reach
    groups = [b - a for a, b in zip(gstart, gstart[1:])] or [0]
    taps = [b - a for a, b in zip(wstart, wstart[1:])] or [0]
    return max(groups), min(groups), max(taps), min(taps)


def _padded_size(reaches: list[tuple[list[int], ...]], reg: list[int]) -> int:
    """The terms ``_emit_padded`` writes out per element of dX (and its tables' entries)."""
    n, table = 1, 0
    for reach, g in zip(reaches, reg):
        if g:
            n *= g
        else:
            most, _, taps, _ = _shape_of(reach)
            n *= most * taps
            table = max(table, (len(reach[0]) - 1) * most * taps)
    return n if table <= TABLE_BUDGET else PADDED + 1


def _emit_padded(k: CudaKernel, an: Any, reaches: list[tuple[list[int], ...]], reg: list[int],
                 yst: list[int]) -> None:
    """resample_grad with every group and tap unrolled (at most ``PADDED`` per element): each
    thread reads its position's groups on each weighted axis -- dY coordinate, taps and their
    weights, from tables padded to the axis' most groups and taps -- into register arrays
    once, then runs the general kernel's loop nest with constant trip counts (``#pragma
    unroll``: no table read inside it), a guard on each group or tap that its position lacks:
    the same terms in the same order (dY elements in increasing index, each one's taps corner
    by corner)."""
    dy, res = an.operand(0), an.result
    t = ctype(dy.type.dtype)
    cw = k.code
    r = len(reg)
    shapes = [_shape_of(reach) if not reg[a] else (reg[a], reg[a], 1, 1)
              for a, reach in enumerate(reaches)]
    tabs: list[tuple[str, str, str, str] | None] = []
    for a, reach in enumerate(reaches):
        if reg[a]:
            tabs.append(None)
            continue
        gstart, coord, wstart, weight = reach
        most, _, taps, _ = shapes[a]
        ng, yc, nt, w = [], [], [], []
        for e in range(len(gstart) - 1):
            gs = list(range(gstart[e], gstart[e + 1]))
            ng.append(len(gs))
            for j in range(most):
                g = gs[j] if j < len(gs) else None
                yc.append(coord[g] if g is not None else 0)
                ws = weight[wstart[g]:wstart[g + 1]] if g is not None else []
                nt.append(len(ws))
                w += [ws[h] if h < len(ws) else 0 for h in range(taps)]
        tabs.append((k.table("int32_t", ng), k.table("int64_t", yc), k.table("int32_t", nt),
                     k.table("uint32_t", w)))
    weighted = [a for a in range(r) if not reg[a]]
    with k.each(_prod(static_shape(k, res.type.shape))) as i:
        c = coords(k, res.type.shape, i, "c")
        for a in weighted:  # this position's groups of axis a, into registers
            tab = tabs[a]
            assert tab is not None
            most, _, taps, _ = shapes[a]
            cw.line(f"const int64_t b{a} = {c[a]} * {most};",
                    f"const int n{a} = {tab[0]}[{c[a]}];",
                    f"int64_t y{a}[{most}];", f"int t{a}[{most}];", f"float w{a}[{most}][{taps}];",
                    "#pragma unroll")
            with cw.block(f"for (int j = 0; j < {most}; j++)"):
                cw.line(f"y{a}[j] = {tab[1]}[b{a} + j];", f"t{a}[j] = {tab[2]}[b{a} + j];",
                        "#pragma unroll")
                with cw.block(f"for (int h = 0; h < {taps}; h++)"):
                    cw.line(f"w{a}[j][h] = gc_bits2f({tab[3]}[(b{a} + j) * {taps} + h]);")
        cw.line(f"{t.acc} acc = 0;")
        heads = []
        for a in range(r):  # the groups: dY elements in increasing index
            most, fewest = shapes[a][0], shapes[a][1]
            heads += ["#pragma unroll", f"for (int j{a} = 0; j{a} < {most}; j{a}++)"]
            if not reg[a] and most > fewest:
                heads.append(f"if (j{a} < n{a})")
        with _nest(cw, heads):
            flat = " + ".join((f"y{a}[j{a}]" if not reg[a] else
                               f"({c[a]} * {reg[a]} + j{a})" if reg[a] != 1 else c[a])
                              + (f" * {yst[a]}" if yst[a] != 1 else "") for a in range(r)) or "0"
            cw.line(f"const int64_t yi = {flat};")
            pro = ctx_gen(k, dy.type.shape, "yi", an.loads, prefix="a")
            dv = pro.get(dy)
            cw.line(*pro.lines, f"const {t.acc} d = ({t.acc}){widen(t, dv)};")
            theads = []
            for a in weighted:  # then its taps, corner by corner
                _, _, taps, fewest_taps = shapes[a]
                theads += ["#pragma unroll", f"for (int h{a} = 0; h{a} < {taps}; h{a}++)"]
                if taps > fewest_taps:
                    theads.append(f"if (h{a} < t{a}[j{a}])")
            with _nest(cw, theads):
                _add_term(cw, t, [f"w{a}[j{a}][h{a}]" for a in weighted])
        _finish(k, an, t, i)


def _add_term(cw: Any, t: CType, weights: list[str]) -> None:
    """``acc += w * d``, the weights multiplied in float32 left to right (none: ``acc += d``,
    every weight being 1, which is exact)."""
    if not weights:
        cw.line("acc += d;")
        return
    w = weights[0]
    for more in weights[1:]:
        w = f"({w} * {more})"
    cw.line(f"acc += ({t.acc}){w} * d;")


def _finish(k: CudaKernel, an: Any, t: CType, i: str) -> None:
    """The element's sum rounded once, the epilogue, the store."""
    res = an.result
    epi = ctx_gen(k, res.type.shape, i, an.loads, {res: "r"}, prefix="e")
    value = epi.get(an.out)
    k.code.line(f"const {t.store} r = {narrow(t, 'acc')};", *epi.lines,
                f"{k.param(an.out)}[{i}] = {value};")


@contextmanager
def _nest(cw: Any, heads: list[str]) -> Iterator[None]:
    """Blocks nested under ``heads``; a ``#pragma`` head is a line before the next one."""
    with ExitStack() as stack:
        for head in heads:
            if head.startswith("#"):
                cw.line(head)
            else:
                stack.enter_context(cw.block(head))
        yield


def _unit(gstart: list[int], coord: list[int], wstart: list[int],
          weight: list[int]) -> list[int] | None:
    """The reach's group sizes when each dX position's dY coordinates are one run of
    consecutive ones from ``gstart``, each with one tap of weight 1 (nearest resampling,
    and every axis of scale 1), else None."""
    ok = (coord == list(range(len(coord))) and wstart == list(range(len(wstart)))
          and all(w == ONE for w in weight))
    return [b - a for a, b in zip(gstart, gstart[1:])] if ok else None


def _emit_blocks(k: CudaKernel, an: Any, sizes: list[list[int]], reg: list[int],
                 yst: list[int]) -> None:
    """resample_grad whose every axis is a unit one (``_unit``): each element of dX sums its
    block of dY elements -- on each axis a run of at most ``max(sizes[a])`` from its first,
    unrolled, the loads issued together -- in increasing index (the loop nest's order) from
    +0. A regular axis (``_regular``) computes its run's start; another reads it from a
    table. Multiplying by a weight of 1 is exact, so no weight is read."""
    dy, res = an.operand(0), an.result
    t = ctype(dy.type.dtype)
    cw = k.code
    with k.each(_prod(static_shape(k, res.type.shape))) as i:
        c = coords(k, res.type.shape, i, "c")
        runs: list[tuple[str, str | None]] = []  # per axis: (first dY coordinate, run length
        # or None when it is the constant reg[a])
        for a, sz in enumerate(sizes):
            if reg[a]:
                runs.append((f"{c[a]} * {reg[a]}" if reg[a] != 1 else c[a], None))
            else:
                starts = [0]
                for z in sz:
                    starts.append(starts[-1] + z)
                tab = k.table("int64_t", starts)
                cw.line(f"const int64_t lo{a} = {tab}[{c[a]}], n{a} = {tab}[{c[a]} + 1] - lo{a};")
                runs.append((f"lo{a}", f"n{a}"))
        base = " + ".join(f"({lo}) * {yst[a]}" if yst[a] != 1 else f"({lo})"
                          for a, (lo, _) in enumerate(runs)) or "0"
        cw.line(f"const int64_t yb = {base};")
        taps = list(itertools.product(*(range(max(sz) if sz else 0) for sz in sizes)))
        guards = []
        for j, js in enumerate(taps):
            off = sum(x * st for x, st in zip(js, yst))
            guard = " && ".join(f"{x} < {runs[a][1]}" for a, x in enumerate(js)
                                if runs[a][1] is not None and x >= min(sizes[a]))
            guards.append(guard)
            cw.line(f"{t.acc} d{j} = 0;")
            with cw.block(f"if ({guard})" if guard else ""):
                cw.line(f"const int64_t yi = yb + {off};")
                pro = ctx_gen(k, dy.type.shape, "yi", an.loads, prefix="a")
                dv = pro.get(dy)
                cw.line(*pro.lines, f"d{j} = ({t.acc}){widen(t, dv)};")
        cw.line(f"{t.acc} acc = 0;")
        for j, guard in enumerate(guards):
            cw.line(f"if ({guard}) acc += d{j};" if guard else f"acc += d{j};")
        _finish(k, an, t, i)


def _prod(sizes: Sequence[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


EMITTERS: dict[str, Any] = {"resample": emit_resample, "resample_grad": emit_resample_grad}
