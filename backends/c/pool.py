"""max_pooling and max_pooling_grad: per (n, c) plane, argmax recomputed in registers.

Windows of one plane only read (and, for the gradient, only write) that plane, so planes run in
parallel without atomics. Each output row is done in two passes: (1) the flat in-plane index of
every window's argmax into a small per-thread row buffer, in branch-free loops with the valid
taps of each group of windows unrolled (vectorizable over the columns); (2) the values and
indices (forward), or ``acc[argmax] += dY`` in dY's row-major order (gradient). Pass (1) first
compares with a plain '>' and notes NaN candidates; a plane that has one is redone with the
NaN-aware rule. Row-major order within a plane is the canonical order of SPEC.md §5.2, so the
sums are bit-identical to the reference. Ties keep the lowest index; NaN never wins unless every
candidate is NaN (SPEC.md §5.1).

The gradient has two faster plain passes (``emit_max_pooling_grad``): 2x2 stride-2 windows that
tile a float32 plane (``_pairs_2x2``, SSE2), and 2-D windows that do not tile (``_Separable``:
row maxima, then down the window rows). Both fall back to the NaN-aware pass per plane.

Compile time and scratch memory are bounded by the graph and its tensors, never by attribute
magnitudes: the unrolled pass, the tiled stores and the separable pass are used only within the
named budgets below and when every index they compute statically fits their integer type;
anything else (huge windows, strides, paddings or dilations) takes the bounds-aware loop
(``_Pool._general``), whose arithmetic is exact for every attribute in int64's range.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Mapping, Sequence

from gradc.ir.ops.common import lowest
from gradc.ir.ops.pooling import POOL_FIELDS

from gradc.backends.c.kernel import (Kernel, anchored, ctx_gen, fail_unless, stream_flag,
                                     streamed_span, traffic)
from gradc.backends.c.scalar import ExprGen, narrow, widen
from gradc.backends.c.ctypes_map import CType, ctype, literal
from gradc.backends.c.writer import CWriter

MAX_UNROLL = 64  # windows with more taps use the bounds-checked loop everywhere
# Taps times distinct valid-tap ranges that the unrolled pass may write: a 3x3 window on any
# image is 9 ranges x 9 taps; 8192 made 230 KB of C for two tiny 3-D poolings (cc: 18 s).
MAX_UNROLL_CODE = 512
MAX_TILE_TAPS = 1024  # taps per window that the tiled store pass may write out
# The separable pass's per-thread scratch (elements): always allowed up to SEPARABLE_SCRATCH,
# beyond it at most SEPARABLE_FACTOR times (input plane + output plane + 16 per input row).
SEPARABLE_SCRATCH = 2 ** 16
SEPARABLE_FACTOR = 4
INDEX_BOUND = 2 ** 62  # static bound of the index arithmetic of the unrolled/separable passes

Body = Callable[[CWriter], None]  # writes the statements of one row
Row = Callable[[CWriter, bool], None]  # the same, NaN-aware or not (see _Pool.better)


class _Pool:
    """Static geometry of one pooling op and the C text of its argmax row pass.

    Methods that write a comparison take ``nan``: whether the argmax must handle NaN candidates
    (the SPEC.md §5.1 rule), or may compare with a plain '>' and note NaN candidates in ``nanf``.
    """

    def __init__(self, x_shape: tuple, out_spatial: tuple, attrs: Mapping[str, Any],
                 t: CType) -> None:
        self.t = t
        self.sp = [int(d) for d in x_shape[2:]]
        self.out = [int(d) for d in out_spatial]
        self.w, self.s, self.pad, self.end, self.d = (list(attrs[f]) for f in POOL_FIELDS)
        self.nd = len(self.sp)
        self.plane = math.prod(self.sp)
        self.oplane = math.prod(self.out)
        self.idx = "int32_t" if self.plane < 2 ** 31 else "int64_t"
        self.st = [math.prod(self.sp[a + 1:]) for a in range(self.nd)]
        self.span = [self._span(a) for a in range(self.nd)]
        # Every index the unrolled and separable passes compute (window starts, row bases, tap
        # offsets, in int64 and then the index type) is within this static bound.
        reach = sum(((o - 1) * s + p + (w - 1) * d + n) * st for o, s, p, w, d, n, st
                    in zip(self.out, self.s, self.pad, self.w, self.d, self.sp, self.st))
        self.small = reach < (2 ** 31 if self.idx == "int32_t" else INDEX_BOUND)
        self._runs: list[list[tuple[int, int, tuple[int, int]]]] | None = None
        if self.small and math.prod(self.w) <= MAX_UNROLL:
            self._runs = self._all_groups(MAX_UNROLL_CODE // math.prod(self.w))

    def _span(self, a: int) -> tuple[int, int]:
        """The output coordinates ``first..last`` of axis ``a`` whose window can reach the input
        (window start in ``-(w-1)*d .. n-1``); outside them every tap is padding. Their window
        starts fit int64 (they lie in ``-start_padding .. n-1``)."""
        n, w, s, p, d = self.sp[a], self.w[a], self.s[a], self.pad[a], self.d[a]
        return max(0, -(((w - 1) * d - p) // s)), min(self.out[a] - 1, (p + n - 1) // s)

    def krange(self, a: int, o: int) -> tuple[int, int]:
        """The valid taps ``lo..hi`` of axis ``a`` for output coordinate ``o`` (static)."""
        st = o * self.s[a] - self.pad[a]
        lo = 0 if st >= 0 else -(-(-st) // self.d[a])
        hi = -1 if st > self.sp[a] - 1 else (self.sp[a] - 1 - st) // self.d[a]
        return lo, min(hi, self.w[a] - 1)

    def groups(self, a: int) -> list[tuple[int, int, tuple[int, int]]]:
        """Runs ``(o_first, o_last, krange)`` of output coordinates sharing one valid range
        (only when the unrolled pass is used: see ``unrolled``)."""
        assert self._runs is not None
        return self._runs[a]

    def _all_groups(self, budget: int) -> list[list[tuple[int, int, tuple[int, int]]]] | None:
        """``groups`` of every axis, or None when their product exceeds ``budget``."""
        out: list[list[tuple[int, int, tuple[int, int]]]] = []
        left = budget
        for a in range(self.nd):
            runs = self._groups(a, left)
            if runs is None:
                return None
            left //= len(runs)
            out.append(runs)
        return out

    def _groups(self, a: int, budget: int) -> list[tuple[int, int, tuple[int, int]]] | None:
        """The runs of axis ``a`` (None beyond ``budget`` runs), found by bisection.

        Both ends of ``krange`` never increase with ``o`` (the window start only grows), so
        equal ranges are contiguous and each run's end is found in O(log out) steps.
        """
        runs: list[tuple[int, int, tuple[int, int]]] = []
        o, n_out = 0, self.out[a]
        while o < n_out:
            if len(runs) >= budget:
                return None
            kr = self.krange(a, o)
            lo, hi = o, n_out - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self.krange(a, mid) == kr:
                    lo = mid
                else:
                    hi = mid - 1
            runs.append((o, lo, kr))
            o = lo + 1
        return runs

    @property
    def unrolled(self) -> bool:
        """True when the row pass unrolls the valid taps of each group of windows (small
        windows, few distinct valid ranges, int64-safe static geometry)."""
        return self._runs is not None

    def tiled(self) -> bool:
        """True when the windows tile the input exactly (no padding, no gaps, no overlap) and
        are small enough for the store pass to write each tap (``MAX_TILE_TAPS``)."""
        return math.prod(self.w) <= MAX_TILE_TAPS and all(
            p == 0 and e == 0 and d == 1 and s == w and n == o * w
            for p, e, d, s, w, n, o in zip(self.pad, self.end, self.d, self.s, self.w,
                                           self.sp, self.out))

    def separable(self) -> bool:
        """True for 2-D float windows handled by ``_Separable`` (small, not tiling the plane),
        whose scratch stays within a fixed size or a few times the tensors' planes."""
        if not (self.nd == 2 and self.t.is_float and math.prod(self.w) <= MAX_UNROLL
                and self.small and not self.tiled()):
            return False
        sep = _Separable(self)
        budget = SEPARABLE_FACTOR * (self.plane + self.oplane + sep.LANES * self.sp[0])
        return sep.scratch() <= max(SEPARABLE_SCRATCH, budget)

    def better(self, v: str, best: str, nan: bool) -> str:
        """The SPEC.md §5.1 replacement rule (strict '>', NaN never beats a number)."""
        if self.t.is_float and nan:  # this form vectorizes (GCC)
            return f"({v} > {best} || ({best} != {best} && {v} == {v}))"
        return f"({v} > {best})"

    def rows_by_nan(self, cw: CWriter, row: Row, reset: Sequence[str]) -> None:
        """The rows with a plain '>' (noting NaN candidates), redone NaN-aware if one was seen.

        The plain comparison is much cheaper; it is exact unless a candidate is NaN.
        """
        if not self.t.is_float:
            self.rows(cw, lambda cw: row(cw, True))
            return
        cw.line("int nanf = 0;")
        self.rows(cw, lambda cw: row(cw, False))
        with cw.block("if (nanf)"):
            cw.line(*reset)
            self.rows(cw, lambda cw: row(cw, True))

    def note_nan(self, v: str, nan: bool) -> str:
        """In the plain variant, record whether candidate ``v`` is NaN."""
        if not self.t.is_float or nan:
            return ""
        return f" nanf |= {v} != {v};"

    def row_pass(self, cw: CWriter, bi: str, nan: bool, values: str | None = None) -> None:
        """Fill ``bi[ow]`` (in-plane argmax or -1) for the row at outer coords ``r0..``.

        Every window's valid taps are known statically from its coordinates, so rows are
        grouped by the valid tap ranges of their outer axes and columns by that of the last
        axis; each group gets straight-line code with its taps unrolled (the interior columns
        in a vectorizable loop). Windows with too many taps use a bounds-checked loop.
        """
        if not self.unrolled:
            self._general(cw, bi, nan)
            return
        last = self.nd - 1
        for i, combo in enumerate(itertools.product(*(self.groups(a) for a in range(last)))):
            cond = " && ".join(f"r{a} >= {g[0]} && r{a} <= {g[1]}" for a, g in enumerate(combo))
            head = f"if ({cond or '1'})"
            with cw.block(head) if i == 0 else cw.orelse(f"else {head}"):
                self._row(cw, bi, [g[2] for g in combo], nan, values)

    def _row(self, cw: CWriter, bi: str, outer: list[tuple[int, int]], nan: bool,
             values: str | None = None) -> None:
        """One row whose outer axes have the valid tap ranges ``outer`` (``values``: the
        lowest value, stored in ``bi`` for a window without taps; then ``bi`` gets each
        window's maximum, not its argmax)."""
        last = self.nd - 1
        empty = values if values is not None else "-1"
        if any(lo > hi for lo, hi in outer):
            cw.line(f"for (int64_t ow = 0; ow < {self.out[last]}; ow++) {bi}[ow] = {empty};")
            return
        rowbase = " + ".join(f"(r{a} * {self.s[a]} - {self.pad[a]}) * {self.st[a]}"
                             for a in range(last)) or "0"
        cw.line(f"const {self.idx} rb = ({self.idx})({rowbase});")
        for first, lastc, kr in self.groups(last):
            offs = self._offsets(outer + [kr])
            if not offs:
                cw.line(f"for (int64_t ow = {first}; ow <= {lastc}; ow++) {bi}[ow] = {empty};")
                continue
            with cw.block(f"for (int64_t ow = {first}; ow <= {lastc}; ow++)"):
                if values is not None:
                    self._window_max(cw, bi, offs)
                else:
                    self._window(cw, bi, offs, nan)

    def _offsets(self, ranges: list[tuple[int, int]]) -> list[int]:
        """In-plane offsets of the valid taps from the window origin, in window order."""
        if any(lo > hi for lo, hi in ranges):
            return []
        return [sum(k[a] * self.d[a] * self.st[a] for a in range(self.nd))
                for k in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges))]

    def _window(self, cw: CWriter, bi: str, offs: list[int], nan: bool) -> None:
        """The argmax of the window at column ``ow`` over the taps ``offs`` (unrolled)."""
        t, ct, idx = self.t, self.t.compute, self.idx
        cw.line(f"const {idx} base = rb + ({idx})(ow * {self.s[-1]} - {self.pad[-1]});",
                f"{idx} b = base + {offs[0]}; {ct} bv = {widen(t, 'x[b]')};"
                + self.note_nan("bv", nan))
        for off in offs[1:]:
            with cw.block():
                cw.line(f"const {idx} ii = base + {off};",
                        f"const {ct} v = {widen(t, 'x[ii]')};{self.note_nan('v', nan)}",
                        f"const _Bool take = {self.better('v', 'bv', nan)};",
                        "bv = take ? v : bv; b = take ? ii : b;")
        cw.line(f"{bi}[ow] = b;")

    def _window_max(self, cw: CWriter, vb: str, offs: list[int]) -> None:
        """The maximum of the window at column ``ow`` over the taps ``offs``, by the plain rule
        (each tap replaces the maximum when strictly greater, noting NaN candidates): the value
        the argmax would select, bit for bit (the first of equal values, -0 and +0 included),
        without an index to carry, so the selection needs no branch."""
        ct = self.t.compute
        cw.line(f"const {self.idx} base = rb + ({self.idx})(ow * {self.s[-1]} - "
                f"{self.pad[-1]});",
                f"{ct} bv = x[base + {offs[0]}]; nanf |= bv != bv;")
        for off in offs[1:]:
            cw.line(f"{{ const {ct} v = x[base + {off}]; nanf |= v != v; "
                    "bv = v > bv ? v : bv; }")
        cw.line(f"{vb}[ow] = bv;")

    def _range(self, cw: CWriter, a: int, o: str) -> None:
        """The valid taps ``lo{a}..hi{a}`` of axis ``a`` at output coordinate ``o`` (empty:
        ``lo > hi``) and ``wq{a}``, the input position of tap ``lo{a}``.

        Exact for every attribute in int64's range: only coordinates in ``span`` (whose window
        start ``t`` fits int64) are computed, and the sums that may pass 2**63 on the way are
        taken in uint64, whose wrap-around gives the exact result once it fits again.
        """
        n, w, d = self.sp[a], self.w[a], self.d[a]
        first, last = self.span[a]
        t0 = first * self.s[a] - self.pad[a]
        u = "(uint64_t)"
        cw.line(f"int64_t lo{a} = 1, hi{a} = 0, wq{a} = 0;")
        with cw.block(f"if ({o} >= {_c(first)} && {o} <= {_c(last)})"):
            cw.line(f"const int64_t wt{a} = (int64_t)({u}{_c(t0)} + {u}({o} - {_c(first)})"
                    f" * {_u(self.s[a])});",
                    f"lo{a} = wt{a} >= 0 ? 0 : (int64_t)({u}(-(wt{a} + 1)) / {_u(d)}) + 1;",
                    f"const uint64_t hu{a} = ({_u(n - 1)} - {u}wt{a}) / {_u(d)};",
                    f"hi{a} = hu{a} > {_u(w - 1)} ? {_c(w - 1)} : (int64_t)hu{a};",
                    f"wq{a} = (int64_t)({u}wt{a} + {u}lo{a} * {_u(d)});")

    def _general(self, cw: CWriter, bi: str, nan: bool) -> None:
        """Bounds-aware windows (large or far-reaching windows): only valid taps, the first
        seeds the max. A tap's position ``p + (k - lo) * d`` is in the input, so no product
        overflows whatever the window size, stride, padding or dilation."""
        t, nd, idx = self.t, self.nd, self.idx
        last = nd - 1
        ct = t.compute
        if any(f > l for f, l in self.span):  # every window lies wholly in padding
            cw.line(f"for (int64_t ow = 0; ow < {self.out[last]}; ow++) {bi}[ow] = -1;")
            return
        pos = [f"(wq{ax} + (k{ax} - lo{ax}) * {_c(self.d[ax])}) * {_c(self.st[ax])}"
               for ax in range(nd)]
        first = " + ".join(f"wq{ax} * {_c(self.st[ax])}" for ax in range(nd))
        for a in range(last):
            self._range(cw, a, f"r{a}")
        outer = " && ".join(f"lo{a} <= hi{a}" for a in range(last)) or "1"
        with cw.block(f"for (int64_t ow = 0; ow < {self.out[last]}; ow++)"):
            self._range(cw, last, "ow")
            cw.line(f"{idx} b = -1;")
            with cw.block(f"if ({outer} && lo{last} <= hi{last})"):
                cw.line(f"b = ({idx})({first});", f"{ct} bv = {widen(t, 'x[b]')};")
                with cw.blocks([f"for (int64_t k{ax} = lo{ax}; k{ax} <= hi{ax}; k{ax}++)"
                                for ax in range(nd)]):
                    cw.line(f"const {idx} ii = ({idx})({' + '.join(pos)});",
                            f"const {ct} v = {widen(t, 'x[ii]')};{self.note_nan('v', nan)}",
                            f"const _Bool take = {self.better('v', 'bv', nan)};",
                            "bv = take ? v : bv; b = take ? ii : b;")
            cw.line(f"{bi}[ow] = b;")

    def rows(self, cw: CWriter, body: Body) -> None:
        """Loops over the outer output coordinates ``r0..`` around ``body`` (one row each)."""
        orow = " + ".join(f"r{a} * {math.prod(self.out[a + 1:])}" for a in range(self.nd - 1))
        with cw.blocks([f"for (int64_t r{a} = 0; r{a} < {self.out[a]}; r{a}++)"
                        for a in range(self.nd - 1)]):
            cw.line(f"const int64_t orow = {orow or '0'}; (void)orow;")
            body(cw)


def _c(v: int) -> str:
    """An int64 C literal."""
    return f"INT64_C({v})" if abs(v) >= 2 ** 31 else str(v)


def _u(v: int) -> str:
    """A uint64 C literal (``0 <= v < 2**64``)."""
    return f"UINT64_C({v})"


def _tile_writes(cw: CWriter, pool: _Pool, pro: ExprGen, dv: str) -> None:
    """Windows tile the plane: store each window's taps, 0 + dY at the argmax and 0 elsewhere.

    ``0 + dY`` is the reference's single addition into a zero accumulator (-0 becomes +0). One
    loop per row of taps (GCC vectorizes a single contiguous store group per loop).
    """
    t = pool.t
    last = pool.nd - 1
    origin = " + ".join([f"r{a} * {pool.s[a] * pool.st[a]}" for a in range(last)]
                        + [f"ow * {pool.s[last]}"])
    for outer in itertools.product(*(range(w) for w in pool.w[:last])):
        base = sum(k * pool.st[a] for a, k in enumerate(outer))
        offs = [base + kl for kl in range(pool.w[last])]
        with cw.block(f"for (int64_t ow = 0; ow < {pool.out[-1]}; ow++)"):
            cw.line(f"const int64_t o = {origin};",
                    f"const {pool.idx} b = bi[ow] - ({pool.idx})o;", *pro.lines,
                    f"const {t.acc} v = ({t.acc})0 + ({t.acc}){widen(t, dv)};",
                    *(f"acc[o + {off}] = b == {off} ? v : ({t.acc})0;" for off in offs))


def _parallel(k: Kernel, planes: str, work: str, allocs: list[tuple[str, str, str]],
              body: CWriter) -> None:
    """``#pragma omp parallel`` over planes ``p`` with per-thread buffers (name, type, count)."""
    cw = k.code
    cw.line("int fail = 0;", f"const int64_t P = {planes};",
            f"#pragma omp parallel num_threads(nt) if(P * {work} > GC_PAR_MIN)")
    with cw.block():
        for name, ty, count in allocs:
            cw.line(f"{ty} *{name} = ({ty} *)gc_alloc((size_t){count} * sizeof({ty}));")
        ok = " && ".join(f"{name} != NULL" for name, _, _ in allocs) or "1"
        cw.line(f"const int ok = {ok};")
        fail_unless(cw, "ok")
        cw.line("#pragma omp for schedule(static)")
        with cw.block("for (int64_t p = 0; p < P; p++)"):
            cw.line("if (!ok) continue;")
            cw.nest(body)
        cw.line("gc_stream_fence();", *(f"free({name});" for name, _, _ in allocs))
    cw.line("if (fail) return 1;")


def emit_max_pooling(k: Kernel) -> None:
    """Window maxima (bit copies of the winning elements) and optionally int64 indices."""
    n = k.node
    x = n.inputs[0]
    y = n.outputs[0]
    t = ctype(x.type.dtype)
    pool = _Pool(x.type.shape, y.type.shape[2:], n.attrs, t)
    low = literal(lowest(x.type.dtype.numpy).item(), x.type.dtype)
    px, py = k.param(x), k.param(y)
    pi = k.param(n.outputs[1]) if len(n.outputs) > 1 else None

    # without indices, float32/float64 planes take the maxima directly (no argmax to carry)
    values = pi is None and t.is_float and t.store == t.compute and pool.unrolled

    def row(cw: CWriter, nan: bool) -> None:
        cw.line(f"const int64_t yb = p * {pool.oplane} + orow;")
        if values and not nan:
            pool.row_pass(cw, "vm", False, values=low)
            cw.line(f"for (int64_t ow = 0; ow < {pool.out[-1]}; ow++) {py}[yb + ow] = vm[ow];")
            return
        pool.row_pass(cw, "bi", nan)
        with cw.block(f"for (int64_t ow = 0; ow < {pool.out[-1]}; ow++)"):
            cw.line(f"const {pool.idx} b = bi[ow];",
                    f"{py}[yb + ow] = b >= 0 ? x[b] : {low};")
            if pi is not None:
                cw.line(f"{pi}[yb + ow] = b >= 0 ? p * {pool.plane} + b : 0;")

    body = CWriter()
    body.line(f"const {t.store} *x = {px} + p * {pool.plane};")
    pool.rows_by_nan(body, row, [])
    allocs = [("bi", pool.idx, str(pool.out[-1]))]
    if values:
        allocs.append(("vm", t.store, str(pool.out[-1])))
    _parallel(k, k.dims.prod(x.type.shape[:2]), str(pool.plane), allocs, body)


def emit_max_pooling_grad(k: Kernel) -> None:
    """dX: per plane, dY added at each window's argmax in dY's row-major (canonical) order.

    Planes whose windows tile them are written once, element by element (2x2 float32 windows
    with SSE2: four windows per step, whole rows of dX stored); the others accumulate in a
    per-thread plane buffer that is then copied out (with the epilogue, when there is one).
    Large outputs are written with streaming stores (``stream_flag``).
    """
    an = anchored(k)
    x, dy = an.operand(0), an.operand(1)
    t = ctype(x.type.dtype)
    pool = _Pool(x.type.shape, dy.type.shape[2:], an.anchor.attrs, t)
    tiled = pool.tiled()
    buffered = t.is_f16 or an.has_epilogue or not tiled
    dims = k.dims
    dyflat = f"(p * {pool.oplane} + orow + ow)"
    pro = ctx_gen(k, dy.type.shape, dyflat, an.loads, prefix="a")
    dv = pro.get(dy)
    zero = f"for (int64_t q = 0; q < {pool.plane}; q++) acc[q] = 0;"
    moved = traffic(dims, [x, *(v for v in an.loads if v is not x), an.out])
    out = k.param(an.out)
    k.code.line(f"const int gst = {stream_flag([out], moved)};", "(void)gst;")

    def scatter(cw: CWriter) -> None:
        """``acc[bi[ow]] += dY`` for the row's windows, in dY's order."""
        with cw.block(f"for (int64_t ow = 0; ow < {pool.out[-1]}; ow++)"):
            cw.line(f"const {pool.idx} b = bi[ow];")
            with cw.block("if (b >= 0)"):
                cw.line(*pro.lines, f"acc[b] += ({t.acc}){widen(t, dv)};")

    def argmax_scatter(cw: CWriter, nan: bool) -> None:
        pool.row_pass(cw, "bi", nan)
        scatter(cw)

    body = CWriter()
    body.line(f"const {t.store} *x = {k.param(x)} + p * {pool.plane};",
              f"{t.acc} *acc = {'abuf' if buffered else out + ' + p * ' + str(pool.plane)};")
    allocs = [("bi", pool.idx, str(pool.out[-1]))]
    if tiled:  # the plain pass writes every element: no zeroing, no read-modify-write
        pairs = pool.nd == 2 and pool.w == [2, 2] and t.store == "float"
        st = "0" if buffered else "gst"
        if pairs:
            allocs.append(("gb", "float", str(pool.out[-1] + 1)))

        def row(cw: CWriter, nan: bool) -> None:
            if nan:
                argmax_scatter(cw, True)
            elif not pairs:
                pool.row_pass(cw, "bi", False)
                _tile_writes(cw, pool, pro, dv)
            else:
                with cw.conditional("#if GC_SSE2"):
                    _pairs_2x2(cw, pool, pro, dv, st)
                    cw.otherwise()
                    pool.row_pass(cw, "bi", False)
                    _tile_writes(cw, pool, pro, dv)
        pool.rows_by_nan(body, row, ["gc_stream_fence();", zero])
    elif pool.separable():
        sep = _Separable(pool)

        def separable_row(cw: CWriter) -> None:
            sep.row_v(cw)
            scatter(cw)
        body.line(zero, "int nanf = 0;")
        sep.rows_h(body)
        pool.rows(body, separable_row)
        with body.block("if (nanf)"):
            body.line(zero)
            pool.rows(body, lambda cw: argmax_scatter(cw, True))
        allocs = sep.allocs()
    else:
        body.line(zero)
        pool.rows_by_nan(body, argmax_scatter, [zero])
    if buffered:
        allocs.append(("abuf", t.acc, str(pool.plane)))
        epi = ctx_gen(k, an.result.type.shape, f"(p * {pool.plane} + q)", an.loads,
                      {an.result: "r"}, prefix="e")
        v = epi.get(an.out)
        streamed_span(k, body, an.out, f"{out} + p * {pool.plane}", pool.plane,
                      [f"const {t.store} r = {narrow(t, 'acc[q]')};", *epi.lines], v, "gst")
    _parallel(k, dims.prod(x.type.shape[:2]), str(pool.plane), allocs, body)


def _pairs_2x2(cw: CWriter, pool: _Pool, pro: ExprGen, dv: str, st: str) -> None:
    """One row of 2x2 stride-2 windows that tile a float32 plane, two windows per SSE2 step.

    The four taps a b / c d of a window sit in the even and odd lanes of two row loads; each is
    duplicated across the window's two lanes, so the SPEC.md §5.1 scan (a, then b, c, d, each
    replacing the maximum when strictly greater) runs lane-wise and yields the four output
    masks. dX is 0 + dY at the argmax (the reference's one addition, -0 -> +0) and +0 elsewhere.
    Only '>' is used: a plane with a NaN candidate is redone by the NaN-aware pass.
    Streaming stores need 16-byte aligned rows: a plane and its even rows start on a multiple of
    16 bytes (W is even); the odd rows only when W is a multiple of 4.
    """
    ow_n, width = pool.out[1], pool.sp[1]
    st1 = st if width % 4 == 0 else "0"
    with cw.block(f"for (int64_t ow = 0; ow < {ow_n}; ow++)"):
        cw.line(*pro.lines, f"gb[ow] = 0.0f + {widen(pool.t, dv)};")
    cw.line(f"const float *x0 = x + r0 * {2 * width}, *x1 = x0 + {width};",
            f"float *o0 = acc + r0 * {2 * width}, *o1 = o0 + {width};",
            "const __m128 odd = _mm_castsi128_ps(_mm_set_epi32(-1, 0, -1, 0));",
            "__m128 nanv = _mm_setzero_ps();",
            "int64_t ow = 0;")
    with cw.block(f"for (; ow + 2 <= {ow_n}; ow += 2)"):
        cw.line("const __m128 v0 = _mm_loadu_ps(x0 + 2 * ow), v1 = _mm_loadu_ps(x1 + 2 * ow);",
                "nanv = _mm_or_ps(nanv, _mm_or_ps(_mm_cmpunord_ps(v0, v0), "
                "_mm_cmpunord_ps(v1, v1)));",
                "const __m128 a = _mm_shuffle_ps(v0, v0, _MM_SHUFFLE(2, 2, 0, 0));",
                "const __m128 b = _mm_shuffle_ps(v0, v0, _MM_SHUFFLE(3, 3, 1, 1));",
                "const __m128 c = _mm_shuffle_ps(v1, v1, _MM_SHUFFLE(2, 2, 0, 0));",
                "const __m128 d = _mm_shuffle_ps(v1, v1, _MM_SHUFFLE(3, 3, 1, 1));",
                "const __m128 tb = _mm_cmpgt_ps(b, a), m1 = gc_sel4(tb, b, a);",
                "const __m128 tc = _mm_cmpgt_ps(c, m1), m2 = gc_sel4(tc, c, m1);",
                "const __m128 td = _mm_cmpgt_ps(d, m2);",
                "const __m128 g2 = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(gb + ow)));",
                "const __m128 g = _mm_shuffle_ps(g2, g2, _MM_SHUFFLE(1, 1, 0, 0));")
        cw.comment("top row: a wins in even lanes (no b, c, d), b in odd lanes (b, no c, d)")
        cw.line("const __m128 top = _mm_or_ps(_mm_xor_ps(tb, odd), _mm_or_ps(tc, td));")
        cw.comment("bottom row: c wins in even lanes (c, no d), d in odd lanes")
        cw.line("const __m128 bot = _mm_or_ps(_mm_and_ps(odd, td), "
                "_mm_andnot_ps(odd, _mm_andnot_ps(td, tc)));",
                f"gc_put4(o0 + 2 * ow, _mm_andnot_ps(top, g), {st});",
                f"gc_put4(o1 + 2 * ow, _mm_and_ps(bot, g), {st1});")
    cw.line("nanf |= _mm_movemask_ps(nanv) != 0;")
    with cw.block(f"for (; ow < {ow_n}; ow++)"):
        cw.line("const float a = x0[2 * ow], b = x0[2 * ow + 1];",
                "const float c = x1[2 * ow], d = x1[2 * ow + 1];",
                "nanf |= (a != a) | (b != b) | (c != c) | (d != d);",
                "const int tb = b > a; const float m1 = tb ? b : a;",
                "const int tc = c > m1; const float m2 = tc ? c : m1;",
                "const int td = d > m2;",
                "const int w = td ? 3 : tc ? 2 : tb;",
                "o0[2 * ow] = w == 0 ? gb[ow] : 0.0f; o0[2 * ow + 1] = w == 1 ? gb[ow] : 0.0f;",
                "o1[2 * ow] = w == 2 ? gb[ow] : 0.0f; o1[2 * ow + 1] = w == 3 ? gb[ow] : 0.0f;")


class _Separable:
    """2-D windows in two passes: the argmax along each input row, then down the window rows.

    Pass H: every input row of the plane is copied (widened) into a row padded with -inf, and
    for each window column ``ow`` the first maximum of its taps along the row is kept (value and
    column). Pass V, per output row: the first maximum of those row maxima over the window's
    valid rows. With '>' both are first-occurrence maxima, so the pair is the window's first
    maximum in row-major order -- the SPEC.md §5.1 argmax -- as long as no element is NaN or
    -inf (a -inf would tie with the padding); the copy notes those (``nanf``) and such a plane
    is redone by the NaN-aware pass. Loops run over the window columns padded to a multiple of
    16 (the padding computes unused values), so they vectorize without remainder loops.
    """

    LANES = 16

    def __init__(self, pool: _Pool) -> None:
        self.p = pool
        self.h, self.wd = pool.sp
        self.owp = -(-pool.out[1] // self.LANES) * self.LANES
        self.xlen = max((self.owp - 1) * pool.s[1] + (pool.w[1] - 1) * pool.d[1] + 1,
                        pool.pad[1] + self.wd)

    def scratch(self) -> int:
        """Elements of per-thread scratch (the buffers of ``allocs``)."""
        return 2 * self.owp + self.xlen + 2 * self.h * self.owp

    def allocs(self) -> list[tuple[str, str, str]]:
        """Per-thread buffers: name, element type, count."""
        ct, idx = self.p.t.compute, self.p.idx
        return [("bi", idx, str(self.owp)), ("xp", ct, str(self.xlen)),
                ("hm", ct, str(self.h * self.owp)), ("hk", idx, str(self.h * self.owp)),
                ("vm", ct, str(self.owp))]

    def rows_h(self, cw: CWriter) -> None:
        """Pass H over the plane's input rows into ``hm``/``hk`` (in-row column of the max)."""
        p, t = self.p, self.p.t
        ct, idx = t.compute, p.idx
        s, d, pl = p.s[1], p.d[1], p.pad[1]
        cw.line(f"for (int64_t c = 0; c < {self.xlen}; c++) xp[c] = -INFINITY;")
        with cw.block(f"for (int64_t i = 0; i < {self.h}; i++)"):
            with cw.block(f"for (int64_t c = 0; c < {self.wd}; c++)"):
                cw.line(f"const {ct} v = {widen(t, f'x[i * {self.wd} + c]')};",
                        f"xp[{pl} + c] = v; nanf |= (v != v) | (v == -INFINITY);")
            cw.line(f"{ct} *restrict hmr = hm + i * {self.owp};",
                    f"{idx} *restrict hkr = hk + i * {self.owp};")
            with cw.block(f"for (int64_t ow = 0; ow < {self.owp}; ow++)"):
                cw.line(f"{ct} m = xp[ow * {s}]; {idx} kk = ({idx})(ow * {s});")
                cw.line(*(f"{{ const {ct} v = xp[ow * {s} + {j * d}]; const _Bool tk = v > m; "
                          f"m = tk ? v : m; kk = tk ? ({idx})(ow * {s} + {j * d}) : kk; }}"
                          for j in range(1, p.w[1])))
                cw.line(f"hmr[ow] = m; hkr[ow] = kk - {pl};")

    def row_v(self, cw: CWriter) -> None:
        """Pass V for output row ``r0``: ``bi[ow]`` is the in-plane argmax, or -1 (no tap)."""
        p = self.p
        ct, idx = p.t.compute, p.idx
        sh, pt, dh, kh = p.s[0], p.pad[0], p.d[0], p.w[0]
        owp = self.owp
        cw.line("int first = 1;")
        with cw.block(f"for (int64_t di = 0; di < {kh}; di++)"):
            cw.line(f"const int64_t i = r0 * {sh} - {pt} + di * {dh};",
                    f"if (i < 0 || i >= {self.h}) continue;",
                    f"const {ct} *restrict hmr = hm + i * {owp};",
                    f"const {idx} *restrict hkr = hk + i * {owp};",
                    f"const {idx} rb = ({idx})(i * {self.wd});")
            cw.line(f"{ct} *restrict vmr = vm;", f"{idx} *restrict bir = bi;")
            with cw.block("if (first)"):
                cw.line(f"for (int64_t ow = 0; ow < {owp}; ow++) {{ vmr[ow] = hmr[ow]; "
                        "bir[ow] = rb + hkr[ow]; }")
            # masks, not branches (the comparisons follow the data, and a branch per window
            # mispredicts half the time): 16 windows per vector step for float32 with int32
            # indices (owp is a multiple of 16), else per window
            with cw.orelse():
                if (ct, idx) == ("float", "int32_t"):
                    with cw.block(f"for (int64_t ow = 0; ow < {owp}; ow += 16)"):
                        cw.line("gc_vf32 h, v; gc_vi32 hb, vb;",
                                "memcpy(&h, hmr + ow, 64); memcpy(&v, vmr + ow, 64);",
                                "memcpy(&hb, hkr + ow, 64); memcpy(&vb, bir + ow, 64);",
                                "const gc_vi32 tk = h > v;",
                                "hb = hb + rb;",
                                "v = (gc_vf32)(((gc_vi32)h & tk) | ((gc_vi32)v & ~tk));",
                                "vb = (hb & tk) | (vb & ~tk);",
                                "memcpy(vmr + ow, &v, 64); memcpy(bir + ow, &vb, 64);")
                else:
                    with cw.block(f"for (int64_t ow = 0; ow < {owp}; ow++)"):
                        cw.line(f"const {ct} h = hmr[ow], v = vmr[ow];",
                                f"const {idx} hb = rb + hkr[ow], vb = bir[ow];",
                                f"const {idx} tk = -({idx})(h > v);",
                                "vmr[ow] = h > v ? h : v; bir[ow] = vb ^ ((hb ^ vb) & tk);")
            cw.line("first = 0;")
        cw.line(f"if (first) for (int64_t ow = 0; ow < {owp}; ow++) bi[ow] = -1;",
                f"else for (int64_t ow = 0; ow < {owp}; ow++) "
                "bi[ow] = vm[ow] == -INFINITY ? -1 : bi[ow];")
