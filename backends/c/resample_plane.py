"""The plane path of resample_grad for static plane sizes: taps baked into the source.

The taps come from ``gradc.ir.ops.resample.axis_taps`` itself (the reference), emitted as static
tables. For each dY row of a plane the contributions along the last axis are gathered once into
``G[kk][j]`` (the kk-th contributing dY column of output column j, in increasing order; padded
with weight-0 entries to K per column and to a multiple of 16 columns) -- a strided copy where
the column indices are affine in j, a table lookup elsewhere. Then every tap of the row axes
adds ``f32(w_rows * GW[kk][j]) * G[kk][j]`` to its output row for kk = 0..K-1: contiguous,
vectorizable loops that add each output element's terms in canonical order (see
``resample``). Weight-0 terms add +-0 to a sum that is never -0, which changes no bit while
dY is finite (checked on the sums, see ``_write_plane``).

The baked tables are sized by the plane's dims, so they are kept within fixed budgets
(``MAX_BAKED_COORDS``, ``MAX_BAKED_GATHER``): ``plan_static_plane`` returns None beyond them
(or for a symbolic plane dim) and the caller emits the run-time tap path instead, which computes
the same sums in the same order from tables filled at run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gradc.ir.ops.resample import axis_taps

from gradc.backends.c.kernel import (Anchored, Kernel, ctx_gen, fail_unless, stream_flag,
                                     streamed_span, traffic)
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.ctypes_map import ctype, float_literal
from gradc.backends.c.writer import CWriter

LANES = 16
Run = tuple[int, int, int, list[int]]  # columns ja..jb where gx[kk][j] == a * j + b[kk]

# Budgets of the baked tables (beyond them: the run-time tap path, same results).
# A plane axis bakes two taps (int32 index + float weight) per dY coordinate, and the last
# axis' output columns each hold a gather list: 2**16 coordinates per axis covers every image
# or feature-map axis in practice (8K video is 2**13) while an axis' tables stay around 1 MiB
# of initializers (a few MB of C text: bounded cc time and memory).
MAX_BAKED_COORDS = 1 << 16
# The gather table is K x (padded output width), K = the most dY columns feeding one output
# column: about 2-4 x the width for ordinary scales, but up to (dY width) x (output width) when
# many dY columns land on few output columns (a huge scale); 2**18 entries (the 2x-linear table
# of a 2**16-wide axis) keeps GW/GP/GS within about 3 MiB of C text.
MAX_BAKED_GATHER = 1 << 18


@dataclass(frozen=True)
class StaticPlane:
    """The baked tables of one static plane path (see ``plan_static_plane``)."""

    ys: list[int]  # dY sizes of the plane axes (0 for the leading axes)
    os_: list[int]  # result sizes of the plane axes (0 for the leading axes)
    row_taps: dict[int, list[tuple[np.ndarray, np.ndarray]]]
    gx: np.ndarray
    gw: np.ndarray
    kcount: int
    run: Run | None


def _taps(attrs, d: int, ncoord: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return axis_taps(ncoord, n, attrs["scales"][d], attrs["input_pixel_offsets"][d],
                     attrs["output_pixel_offsets"][d], attrs["interpolation_mode"],
                     attrs["rounding_direction"])


def _gather_tables(taps, ny: int, no: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(GX, GW, K): per output column, its (dY column, weight != 0) pairs in canonical order.

    None when the table (K x padded width) would exceed ``MAX_BAKED_GATHER``: K is counted
    first, so nothing larger than the budget is built.
    """
    counts = np.zeros(no, np.int64)
    for idx, w in taps:
        counts += np.bincount(idx[w != 0], minlength=no)
    k = max(1, int(counts.max()))
    owp = -(-no // LANES) * LANES
    if k * owp > MAX_BAKED_GATHER:
        return None
    # every (dY column x, tap) with weight != 0, in canonical order (x, then tap), ...
    xs = np.repeat(np.arange(ny, dtype=np.int64), len(taps))
    js = np.stack([idx for idx, _ in taps], axis=1).reshape(-1)
    ws = np.stack([w for _, w in taps], axis=1).reshape(-1)
    keep = ws != 0
    xs, js, ws = xs[keep], js[keep], ws[keep]
    # ... then per output column j, numbered kk = 0, 1, ... in that order
    order = np.argsort(js, kind="stable")
    first = np.searchsorted(js[order], js[order])
    kk = np.empty_like(order)
    kk[order] = np.arange(order.size) - first
    gx = np.zeros((k, owp), np.int64)
    gw = np.zeros((k, owp), np.float32)
    gx[kk, js], gw[kk, js] = xs, ws
    return gx, gw, k


def _affine_run(gx: np.ndarray, full: np.ndarray) -> Run | None:
    """The longest run (>= 8) of full columns where every ``gx[kk][j] == a * j + b[kk]``.

    Ties go to the smallest (a, b), then to the first run. Linear in the table: two adjacent
    full columns j, j+1 that both fit (a, b) determine it (a: the step of row 0 from j to j+1;
    b: column j minus a * j), so the runs of (a, b) are the stretches of adjacent pairs that
    determine the same (a, b), each extended by the column after it when that column fits
    (a, b) in every row.
    """
    n = gx.shape[1]
    if n < 2:
        return None
    step = gx[0, 1:] - gx[0, :-1]
    base = gx[:, :-1] - step * np.arange(n - 1)
    pairs = full[:-1] & full[1:]
    same = pairs[:-1] & pairs[1:] & (step[:-1] == step[1:]) & np.all(base[:, :-1] == base[:, 1:],
                                                                    axis=0)
    starts = np.flatnonzero(pairs & ~np.concatenate(([False], same)))
    ends = np.flatnonzero(pairs & ~np.concatenate((same, [False])))
    best: tuple[int, tuple[int, tuple[int, ...]], int] | None = None  # (-length, (a, b), start)
    for j0, j1 in zip(starts.tolist(), ends.tolist()):
        a = int(step[j0])
        b = base[:, j0]
        last = j1 + 1 if np.all(gx[:, j1 + 1] == a * (j1 + 1) + b) else j1
        key = (j0 - last - 1, (a, tuple(int(v) for v in b)), j0)
        if last - j0 + 1 >= 8 and (best is None or key < best):
            best = key
    if best is None:
        return None
    return best[2], best[2] - best[0] - 1, best[1][0], list(best[1][1])


def _c_array(name: str, ty: str, values: np.ndarray) -> str:
    if ty == "int32_t" and values.size and int(np.abs(values).max()) >= 2 ** 31:
        ty = "int64_t"
    if ty == "float":
        items = ", ".join(float_literal(float(v), "float") for v in values.reshape(-1))
    else:
        items = ", ".join(str(int(v)) for v in values.reshape(-1))
    return f"static const {ty} {name}[{values.size}] = {{{items}}};"


def plan_static_plane(attrs, ys_dims: Sequence[int | None], os_dims: Sequence[int | None],
                      lead: int) -> StaticPlane | None:
    """The baked tables of the plane axes (``lead`` on), or None when a plane dim is symbolic
    or a table would exceed its budget (the caller then emits the run-time tap path).

    Work and memory here are bounded by the budgets, never by the tensor sizes.
    """
    if any(d is None for d in list(ys_dims[lead:]) + list(os_dims[lead:])):
        return None
    # sizes of the plane axes (static); the leading axes are never read here: 0
    ys = [0] * lead + [int(d) for d in ys_dims[lead:]]  # type: ignore[arg-type]
    os_ = [0] * lead + [int(d) for d in os_dims[lead:]]  # type: ignore[arg-type]
    if max(ys[lead:] + [os_[-1]]) > MAX_BAKED_COORDS:
        return None
    r = len(ys)
    rows = list(range(lead, r - 1))
    tables = _gather_tables(_taps(attrs, r - 1, ys[-1], os_[-1]), ys[-1], os_[-1])
    if tables is None:
        return None
    gx, gw, kcount = tables
    full = np.zeros(gx.shape[1], bool)
    full[:os_[-1]] = np.all(gw[:, :os_[-1]] != 0, axis=0)
    row_taps = {d: _taps(attrs, d, ys[d], os_[d]) for d in rows}
    return StaticPlane(ys, os_, row_taps, gx, gw, kcount, _affine_run(gx, full))


def static_plane_path(k: Kernel, an: Anchored, lead: int, plan: StaticPlane) -> None:
    """Emit the plane path with baked taps (``plan``: from ``plan_static_plane``)."""
    dims = k.dims
    cw = k.code
    dy = an.operand(0)
    ys, os_ = plan.ys, plan.os_
    r = len(ys)
    t = ctype(dy.type.dtype)
    acc = t.acc
    rows = list(range(lead, r - 1))
    row_taps = plan.row_taps
    gx, gw, kcount, run = plan.gx, plan.gw, plan.kcount, plan.run
    owp = gx.shape[1]
    for d in rows:
        idx = np.stack([ti for ti, _ in row_taps[d]])
        wts = np.stack([tw for _, tw in row_taps[d]])
        cw.line(_c_array(f"RI{d}", "int32_t", idx), _c_array(f"RW{d}", "float", wts))
    ntap = len(next(iter(row_taps.values()))) if rows else 1
    dypl = math.prod(ys[lead:])
    orows = math.prod(os_[lead:-1])
    opl = math.prod(os_[lead:])
    direct = an.operand(0) in an.loads and not t.is_f16
    buffers = [("accb", orows * owp), ("G", kcount * owp)] + ([] if direct else [("dyp", dypl)])
    ones = bool(np.all(gw[gw != 0] == 1)) and all(
        np.all((w == 0) | (w == 1)) for d in rows for _, w in row_taps[d])
    if not ones:  # the column indices are baked into the gather code (GX is not emitted)
        cw.line(_c_array("GW", "float", gw))
    moved = traffic(dims, [*an.loads, an.out])
    cw.line(f"const int gst = {stream_flag([k.param(an.out)], moved)}; (void)gst;",
            f"#pragma omp parallel num_threads(nt) if({dims.prod(dy.type.shape)} > GC_PAR_MIN)")
    with cw.block():
        cw.line(*(f"{acc} *{name} = ({acc} *)gc_alloc((size_t){size} * sizeof({acc}));"
                  for name, size in buffers),
                f"const int ok = {' && '.join(name + ' != NULL' for name, _ in buffers)};")
        fail_unless(cw, "ok")
        cw.line(f"if (ok) for (int64_t q = 0; q < {kcount * owp}; q++) G[q] = 0;",
                "#pragma omp for schedule(static)")
        with cw.block(f"for (int64_t p = 0; p < {dims.prod(dy.type.shape[:lead])}; p++)"):
            _plane_body(cw, k, an, lead, ys, os_, rows, ntap, gw, gx, run, direct, dypl, opl,
                        ones)
        cw.line("gc_stream_fence();", *(f"free({name});" for name, _ in buffers))


def _plane_body(cw: CWriter, k: Kernel, an: Anchored, lead: int, ys: list[int],
                os_: list[int], rows: list[int], ntap: int, gw: np.ndarray, gx: np.ndarray,
                run: Run | None, direct: bool, dypl: int, opl: int, ones: bool) -> None:
    """One plane ``p``: dY (through the prologue), the row taps, then the rounded plane."""
    kcount, owp = gx.shape
    dy = an.operand(0)
    t = ctype(dy.type.dtype)
    acc = t.acc
    cw.line("int seen;", "#pragma omp atomic read", "seen = nonfinite;",
            "if (!ok || seen) continue;", "int nf = 0;")
    if direct:
        cw.line(f"const {t.store} *dyp = {k.param(dy)} + p * {dypl};")
    else:
        pro = ctx_gen(k, dy.type.shape, f"(p * {dypl} + q)", an.loads, prefix="a")
        v = pro.get(dy)
        with cw.block(f"for (int64_t q = 0; q < {dypl}; q++)"):
            cw.line(*pro.lines, f"dyp[q] = ({acc}){widen(t, v)};")
    orows = math.prod(os_[lead:-1])
    cw.line(f"for (int64_t q = 0; q < {orows * owp}; q++) accb[q] = 0;")
    yst = {d: math.prod(ys[d + 1:]) for d in rows}
    drow = " + ".join(f"y{d} * {yst[d]}" for d in rows) or "0"
    w = " * ".join(f"RW{d}[t{d} * {ys[d]} + y{d}]" for d in rows) or "1.0f"
    ost = {d: math.prod(os_[d + 1:-1]) for d in rows}
    arow = " + ".join(f"(int64_t)RI{d}[t{d} * {ys[d]} + y{d}] * {ost[d]}" for d in rows) or "0"
    with cw.blocks([f"for (int64_t y{d} = 0; y{d} < {ys[d]}; y{d}++)" for d in rows]):
        cw.line(f"const {acc if not direct else t.store} *drow = dyp + {drow};")
        _gather_code(cw, gx, gw, run)
        with cw.blocks([f"for (int t{d} = 0; t{d} < {ntap}; t{d}++)" for d in rows]):
            cw.line(f"const float wp = {w};")
            if rows:
                cw.line("if (wp == 0.0f) continue;")
            cw.line(f"{acc} *restrict arow = accb + ({arow}) * {owp};")
            _accumulate(cw, gx, run, ones, acc)
    _write_plane(cw, k, an, opl, os_[-1], owp)
    with cw.block("if (nf)"):
        cw.line("#pragma omp atomic write", "nonfinite = 1;")


def _gather_code(cw: CWriter, gx: np.ndarray, gw: np.ndarray, run: Run | None) -> None:
    """G[kk][j] = drow[GX[kk][j]] for the columns outside the affine run, weight != 0 only.

    The other entries of G stay 0 (set once per thread), so they add nothing.
    """
    kcount, owp = gx.shape
    rest = [(kk, j) for kk in range(kcount) for j in range(owp)
            if gw[kk, j] != 0 and not (run and run[0] <= j <= run[1])]
    if len(rest) <= 64:
        cw.line(*(f"G[{kk * owp + j}] = drow[{gx[kk, j]}];" for kk, j in rest))
        return
    pos = np.array([kk * owp + j for kk, j in rest])
    src = np.array([gx[kk, j] for kk, j in rest])
    cw.line(_c_array("GP", "int32_t", pos), _c_array("GS", "int32_t", src),
            f"for (int64_t e = 0; e < {len(rest)}; e++) G[GP[e]] = drow[GS[e]];")


def _accumulate(cw: CWriter, gx: np.ndarray, run: Run | None, ones: bool, acc: str) -> None:
    """``arow[j] += w * dY`` for every contribution kk of column j, in kk (canonical) order.

    On the affine run the dY values are read straight from ``drow`` (strided loads), elsewhere
    from ``G``. With all weights 1 (nearest) the products are the values themselves.
    """
    kcount, owp = gx.shape

    def loop(lo: int, hi: int, value: Callable[[int], str]) -> None:
        terms = [value(kk) if ones else f"({acc})(wp * GW[{kk * owp} + j]) * {value(kk)}"
                 for kk in range(kcount)]
        with cw.block(f"for (int64_t j = {lo}; j <= {hi}; j++)"):
            cw.line(f"{acc} s = arow[j];", *(f"s = s + {term};" for term in terms),
                    "arow[j] = s;")

    def from_g(kk: int) -> str:
        return f"G[{kk * owp} + j]"

    if run is None:
        loop(0, owp - 1, from_g)
        return
    ja, jb, a, bs = run
    loop(ja, jb, lambda kk: f"drow[{a} * j + {bs[kk]}]")
    for lo, hi in ((0, ja - 1), (jb + 1, owp - 1)):
        if lo <= hi:
            loop(lo, hi, from_g)


def _write_plane(cw: CWriter, k: Kernel, an: Anchored, opl: int, ow: int, owp: int) -> None:
    """Round and store the plane (through the epilogue); ``nf`` notes a non-finite sum.

    Every dY element adds a nonzero multiple of itself to some sum, so an inf or NaN in dY
    always shows as a non-finite sum (a finite overflow also does: the general path then
    recomputes, which is merely slower).
    """
    t = ctype(an.result.type.dtype)
    fin = "gc_finite_d" if t.acc == "double" else "gc_finite_f"
    base = f"p * {opl}"
    epi = ctx_gen(k, an.result.type.shape, f"({base} + i * {ow} + q)", an.loads,
                  {an.result: "rv"}, prefix="e")
    v = epi.get(an.out)
    sv = f"accb[i * {owp} + q]"
    body = [f"nf |= !{fin}({sv});", f"const {t.store} rv = {narrow(t, sv)};", *epi.lines]
    with cw.block(f"for (int64_t i = 0; i < {opl // ow}; i++)"):
        streamed_span(k, cw, an.out, f"{k.param(an.out)} + {base} + i * {ow}", ow, body, v,
                      "gst")
