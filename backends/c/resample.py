"""resample and resample_grad: per-axis taps computed at run time by ``gc_axis_taps``.

``gc_axis_taps`` repeats the float32 operations of ``resample.axis_taps`` one by one (the
program is compiled with -ffp-contract=off), so indices and weights are those of the reference.

resample_grad has two paths, both in canonical order (dY row-major, then taps):

- *plane path*: leading axes whose taps are the identity (scale 1, same size: checked on the
  tables at run time) split the tensor into independent planes, run in parallel. Within a plane
  the last axis is a gather (for each output column, its contributing dY columns in increasing
  order, weight-0 taps left out) and the other axes scatter whole rows, so every accumulator
  receives its terms in canonical order with vectorizable inner loops. Leaving out weight-0
  terms (and an identity axis's weight-0 tap into the next plane) changes no bit while dY is
  finite: a sum that starts at +0 never becomes -0. The plane path checks this as it reads dY.
- *general path*: a serial scatter of every tap, weight-0 taps included (0 * inf = NaN reaches
  the neighbour as in the reference). Used when dY holds inf/NaN or no plane split applies.

The plane path bakes its tables into the source (``resample_plane``) only while they fit that
module's budgets; otherwise (or for symbolic plane dims) it gathers from tables built at run time,
and when that gather table would be much larger than the taps it holds (many dY columns into few
output columns) or cannot be allocated, the general path runs instead. So compile-time work is
bounded by the graph, and run-time memory by the tensors (plus a per-axis tap table), never by
a product of two axes. Every ``malloc`` failure returns 1 (the runtime reports it).
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np

from gradc.ir.ops.resample import axis_taps
from gradc.ir.types import Dim

from gradc.backends.c.kernel import (Anchored, Kernel, anchored, ctx_gen, fail_unless,
                                     omp_for)
from gradc.backends.c.resample_plane import plan_static_plane, static_plane_path
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.ctypes_map import CType, Dims, ctype, float_literal, strides
from gradc.backends.c.writer import CWriter


def _tables(k: Kernel, coords: tuple, sizes: tuple) -> None:
    """Allocate and fill ``ti``/``tw``: per axis d and tap t, ``I(d, t)``/``W(d, t)`` arrays."""
    dims, a = k.dims, k.node.attrs if k.node.body is None else anchored(k).anchor.attrs
    linear = int(a["interpolation_mode"] == "linear")
    inc = int(a["rounding_direction"] == "increasing")
    total = " + ".join(dims.expr(c) for c in coords)
    k.code.line(f"const int64_t ntap = {total};",
                "int64_t *ti = (int64_t *)malloc((size_t)(2 * ntap) * sizeof(int64_t));",
                "float *tw = (float *)malloc((size_t)(2 * ntap) * sizeof(float));",
                "if (!ti || !tw) { free(ti); free(tw); return 1; }")
    off = "0"
    for d, (c, n) in enumerate(zip(coords, sizes)):
        nc = dims.expr(c)
        k.code.line(f"int64_t *I{d}_0 = ti + 2 * ({off}), *I{d}_1 = I{d}_0 + {nc};",
                    f"float *W{d}_0 = tw + 2 * ({off}), *W{d}_1 = W{d}_0 + {nc};",
                    f"gc_axis_taps({nc}, {dims.expr(n)}, "
                    f"{float_literal(a['scales'][d], 'float')}, "
                    f"{float_literal(a['input_pixel_offsets'][d], 'float')}, "
                    f"{float_literal(a['output_pixel_offsets'][d], 'float')}, {linear}, {inc}, "
                    f"I{d}_0, I{d}_1, W{d}_0, W{d}_1);")
        off = f"{off} + {nc}"


def _ntaps(k: Kernel) -> int:
    a = k.node.attrs if k.node.body is None else anchored(k).anchor.attrs
    return 2 if a["interpolation_mode"] == "linear" else 1


def _store(t: CType, acc: str) -> str:
    """Round an accumulator once to the dtype (int8/uint8: half away from zero, saturate)."""
    if t.is_float:
        return narrow(t, acc)
    lo, hi = (-128, 127) if t.signed else (0, 255)
    r = f"roundf({acc})"
    return f"(({t.store})({r} < {lo} ? {lo} : ({r} > {hi} ? {hi} : {r})))"


# -- resample --------------------------------------------------------------------------------

def emit_resample(k: Kernel) -> None:
    """Each output element: its taps' input values (nearest: a bit copy; linear: a sum)."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    dims = k.dims
    t = ctype(x.type.dtype)
    r = len(x.type.shape)
    _tables(k, y.type.shape, x.type.shape)
    xst = strides(dims, x.type.shape)
    yst = strides(dims, y.type.shape)
    px, py = k.param(x), k.param(y)
    body = []
    if _ntaps(k) == 1:
        k.as_bits(x, y)
        idx = " + ".join(f"I{d}_0[o{d}] * {xst[d]}" for d in range(r))
        body.append(f"{py}[{' + '.join(f'o{d} * {yst[d]}' for d in range(r))}] = {px}[{idx}];")
    else:
        acc = t.acc
        terms = []
        for corner in itertools.product(range(2), repeat=r):
            w = f"W0_{corner[0]}[o0]"
            for d in range(1, r):
                w = f"{w} * W{d}_{corner[d]}[o{d}]"
            idx = " + ".join(f"I{d}_{corner[d]}[o{d}] * {xst[d]}" for d in range(r))
            terms.append(f"({acc})({w}) * ({acc}){widen(t, f'{px}[{idx}]')}")
        out = " + ".join(f"o{d} * {yst[d]}" for d in range(r))
        store = f"{py}[{out}] = {_store(t, 's')};"
        lead = _identity_prefix(k) if t.is_float and not t.is_f16 else 0
        if 0 < lead < r:
            _resample_identity_prefix(k, lead, terms, store)
            return
        body += [*_sum(terms, f"{acc} "), store]
    with _each_output(k, y.type.shape):
        k.code.line(*body)
    k.code.line("free(ti); free(tw);")


def _sum(terms: list[str], decl: str = "") -> list[str]:
    """``s`` = the terms added in order (``decl``: the type, to declare ``s``)."""
    return [f"{decl}s = {terms[0]};", *(f"s = s + {term};" for term in terms[1:])]


@contextmanager
def _each_output(k: Kernel, shape: Sequence[Dim], clause: str = "") -> Iterator[None]:
    """The parallel loop nest over the output elements ``o0..o{r-1}`` (``clause``: more
    OpenMP clauses)."""
    heads = [f"for (int64_t o{d} = 0; o{d} < {k.dims.expr(n)}; o{d}++)"
             for d, n in enumerate(shape)]
    k.code.line(omp_for(k.dims.prod(shape), max(1, len(shape) - 1)) + clause)
    with k.code.under(*heads[:-1]), k.code.block(heads[-1]):
        yield


IDENTITY_MAX = 1 << 16  # the largest leading axis whose taps are checked at compile time


def _identity_prefix(k: Kernel) -> int:
    """How many leading axes of a static linear resample have identity taps (index o with
    weight 1, the second tap weight 0: batch and channel axes, typically), from the
    reference's own ``axis_taps``."""
    x, y, a = k.node.inputs[0], k.node.outputs[0], k.node.attrs
    lead = 0
    for d, (n, m) in enumerate(zip(x.type.shape, y.type.shape)):
        if not (isinstance(n, int) and n == m and n <= IDENTITY_MAX):
            break
        (i0, w0), (_, w1) = axis_taps(n, n, a["scales"][d], a["input_pixel_offsets"][d],
                                      a["output_pixel_offsets"][d], "linear",
                                      a["rounding_direction"])
        if not (np.array_equal(i0, np.arange(n)) and (w0 == 1).all() and (w1 == 0).all()):
            break
        lead = d + 1
    return lead


def _resample_identity_prefix(k: Kernel, lead: int, terms: list[str], store: str) -> None:
    """Linear resample whose ``lead`` leading axes are the identity: of the 2^r corner terms
    only the 2^(r - lead) with the first tap on those axes (the first ones in the reference's
    order) have a nonzero weight. The others add w * x with w = +0: while every x is finite
    that is a +-0, which changes no partial sum but a -0 one (-0 + +0 = +0; +0 + -0 = +0). So,
    when the input is all finite (checked first), each element sums its nonzero-weight terms,
    and only elements whose sum is -0 (rare: +0 is what ReLU's zeros give) are recomputed
    with every term in a second pass; with a non-finite input every element is. Bit for bit
    the reference's sums at 1/2^lead of the work (UNet's 2x upsampling of 8x16x32x32: 2.1 ms
    -> 0.8 ms)."""
    x, y = k.node.inputs[0], k.node.outputs[0]
    cw, shape = k.code, y.type.shape
    px = k.param(x)
    short = _sum(terms[:1 << (len(shape) - lead)], f"{ctype(x.type.dtype).acc} ")
    cw.line("int fin = 1, nz = 0;",
            f"for (int64_t i = 0; i < {k.dims.prod(x.type.shape)}; i++) "
            f"fin &= ({px}[i] - {px}[i] == 0);")
    if lead == len(shape) - 2:  # two interpolated axes: whole output rows
        _rows_of_two_axes(k, lead)
    else:
        with _each_output(k, shape, " reduction(|:nz)"):
            cw.line(*short, "nz |= (s == 0) & (signbit(s) != 0);", store)
    with cw.block("if (!fin || nz)"):  # rare: recompute the elements that need the full sum
        with _each_output(k, shape):
            cw.line(*short)
            with cw.block("if (!fin || (s == 0 && signbit(s)))"):
                cw.line(*_sum(terms), store)
    cw.line("free(ti); free(tw);")


def _rows_of_two_axes(k: Kernel, lead: int) -> None:
    """The first pass of ``_resample_identity_prefix`` when only the last two axes
    interpolate (UNet's 2x upsampling): per output row, the two input rows it reads and the
    products of the leading weights are found once; along the row each element adds its four
    terms in the reference's order (corners (0, 0), (0, 1), (1, 0), (1, 1) of the two axes),
    each weight the same left-to-right float product, ``(w0 * ... * w_{r-2}) * w_{r-1}``."""
    x, y = k.node.inputs[0], k.node.outputs[0]
    t = ctype(x.type.dtype)
    cw, dims, shape, r = k.code, k.dims, y.type.shape, len(y.type.shape)
    xst, yst = strides(dims, x.type.shape), strides(dims, shape)
    px, py = k.param(x), k.param(y)
    a, last = r - 2, r - 1
    lead_w = " * ".join(f"W{d}_0[o{d}]" for d in range(lead))
    base = " + ".join([f"I{d}_0[o{d}] * {xst[d]}" for d in range(lead)] or ["0"])
    heads = [f"for (int64_t o{d} = 0; o{d} < {dims.expr(shape[d])}; o{d}++)" for d in range(last)]
    cw.line(omp_for(dims.prod(shape), max(1, last)) + " reduction(|:nz)")
    with cw.under(*heads[:-1]), cw.block(heads[-1]):
        for c in range(2):
            w = f"{lead_w} * W{a}_{c}[o{a}]" if lead_w else f"W{a}_{c}[o{a}]"
            cw.line(f"const float w{c} = {w};",
                    f"const {t.store} *x{c} = {px} + {base} + I{a}_{c}[o{a}] * {xst[a]};")
        cw.line(f"{t.store} *yr = {py} + "
                f"{' + '.join(f'o{d} * {yst[d]}' for d in range(last))};")
        n = dims.expr(shape[last])
        with cw.block(f"for (int64_t o{last} = 0; o{last} < {n}; o{last}++)"):
            terms = [f"({t.acc})(w{c} * W{last}_{e}[o{last}]) * "
                     f"({t.acc}){widen(t, f'x{c}[I{last}_{e}[o{last}] * {xst[last]}]')}"
                     for c in range(2) for e in range(2)]
            cw.line(*_sum(terms, f"{t.acc} "), "nz |= (s == 0) & (signbit(s) != 0);",
                    f"yr[o{last}] = {_store(t, 's')};")


# -- resample_grad ---------------------------------------------------------------------------

def emit_resample_grad(k: Kernel) -> None:
    """dX: every dY element times its tap weights, added at the taps in canonical order."""
    an = anchored(k)
    dy, res = an.operand(0), an.result
    a = an.anchor.attrs
    dims = k.dims
    cw = k.code
    ys, os_ = dy.type.shape, res.type.shape
    r = len(ys)
    lead = 0
    while lead < r - 1 and a["scales"][lead] == 1.0 and dims.same(ys[lead], os_[lead]):
        lead += 1
    _tables(k, ys, os_)
    cw.line("int fast = 1, nonfinite = 0;")
    for d in range(lead):
        cw.line(f"for (int64_t o = 0; o < {dims.expr(ys[d])}; o++) "
                f"fast = fast && I{d}_0[o] == o && W{d}_0[o] == 1.0f;")
    plan = plan_static_plane(a, [dims.static(d) for d in ys], [dims.static(d) for d in os_], lead)
    if plan is not None:
        cw.line("int fail = 0;", "int64_t *gx = NULL; float *gw = NULL;")
        with cw.block("if (fast)"):
            static_plane_path(k, an, lead, plan)
    else:
        _gather(k, r - 1, dims.expr(ys[-1]), dims.expr(os_[-1]))
        with cw.block("if (fast)"):
            _plane_path(k, an, lead)
    with cw.block("if (!fast || nonfinite)"):
        _general_path(k, an)
    cw.line("free(ti); free(tw); free(gx); free(gw);", "if (fail) return 1;")


GATHER_SLACK = 4  # the run-time gather table may hold 4x the taps (plus 4 per column), no more


def _gather(k: Kernel, d: int, ny: str, no: str) -> None:
    """For each output column j: its (dY column, weight) pairs, weight != 0, padded to K.

    The table has K x no entries (K: the most pairs of one column). When many dY columns feed
    few output columns that is up to ny x no, far more than the ny x taps pairs it holds, and
    the plane path would do that much work per row: beyond ``GATHER_SLACK`` times the pairs
    (plus that many per column), or when an allocation fails, ``fast`` is cleared and the
    general path runs (same results).
    """
    taps = _ntaps(k)
    cw = k.code
    cw.line("int fail = 0;", "int64_t K = 1;", "int64_t *gx = NULL; float *gw = NULL;",
            f"int64_t *cnt = fast ? (int64_t *)calloc((size_t){no}, sizeof(int64_t)) : NULL;",
            "if (!cnt) fast = 0;")
    with cw.block("if (fast)"):
        with cw.block(f"for (int64_t x = 0; x < {ny}; x++)"):
            cw.line(*(f"if (W{d}_{t}[x] != 0.0f) cnt[I{d}_{t}[x]]++;" for t in range(taps)))
        cw.line(f"for (int64_t j = 0; j < {no}; j++) K = cnt[j] > K ? cnt[j] : K;",
                f"if ((double)K * (double){no} > {GATHER_SLACK}.0 * ((double){ny} * {taps}.0 + "
                f"(double){no})) fast = 0;")
    with cw.block("if (fast)"):
        cw.line(f"gx = (int64_t *)calloc((size_t)(K * {no}), sizeof(int64_t));",
                f"gw = (float *)calloc((size_t)(K * {no}), sizeof(float));",
                "if (!gx || !gw) fast = 0;")
    with cw.block("if (fast)"):
        cw.line(f"memset(cnt, 0, (size_t){no} * sizeof(int64_t));")
        with cw.block(f"for (int64_t x = 0; x < {ny}; x++)"):
            for t in range(taps):
                with cw.block(f"if (W{d}_{t}[x] != 0.0f)"):
                    cw.line(f"const int64_t j = I{d}_{t}[x], at = cnt[j]++ * {no} + j;",
                            f"gx[at] = x; gw[at] = W{d}_{t}[x];")
    cw.line("free(cnt);")


def _plane_path(k: Kernel, an: Anchored, lead: int) -> None:
    dims = k.dims
    cw = k.code
    dy, res = an.operand(0), an.result
    t = ctype(dy.type.dtype)
    acc = t.acc
    ys, os_ = dy.type.shape, res.type.shape
    P, dypl, opl = dims.prod(ys[:lead]), dims.prod(ys[lead:]), dims.prod(os_[lead:])
    ow = dims.expr(os_[-1])
    pro = ctx_gen(k, ys, f"(p * {dypl} + q)", an.loads, prefix="a")
    dv = pro.get(dy)
    fin = "gc_finite_d" if acc == "double" else "gc_finite_f"
    cw.line(f"#pragma omp parallel num_threads(nt) if({dims.prod(ys)} > GC_PAR_MIN)")
    with cw.block():
        cw.line(f"{acc} *dyp = ({acc} *)gc_alloc((size_t){dypl} * sizeof({acc}));",
                f"{acc} *acc = ({acc} *)gc_alloc((size_t){opl} * sizeof({acc}));",
                "const int ok = dyp != NULL && acc != NULL;")
        fail_unless(cw, "ok")
        cw.line("#pragma omp for schedule(static)")
        with cw.block(f"for (int64_t p = 0; p < {P}; p++)"):
            cw.line("int seen;", "#pragma omp atomic read", "seen = nonfinite;",
                    "if (!ok || seen) continue;", "int nf = 0;")
            with cw.block(f"for (int64_t q = 0; q < {dypl}; q++)"):
                cw.line(*pro.lines, f"const {acc} v = ({acc}){widen(t, dv)};",
                        f"dyp[q] = v; nf |= !{fin}(v);")
            with cw.block("if (nf)"):
                cw.line("#pragma omp atomic write", "nonfinite = 1;", "continue;")
            cw.line(f"for (int64_t q = 0; q < {opl}; q++) acc[q] = 0;")
            _plane_rows(cw, dims, ys, os_, lead, _ntaps(k), ow, acc)
            _write(k, an, f"p * {opl}", opl)
        cw.line("free(dyp); free(acc);")


def _plane_rows(cw: CWriter, dims: Dims, ys: tuple, os_: tuple, lead: int, taps: int, ow: str,
                acc: str) -> None:
    """Scatter whole rows over the plane axes but the last; gather along the last."""
    r = len(ys)
    inner = list(range(lead, r - 1))
    yst = strides(dims, ys[lead:])
    ost = strides(dims, os_[lead:])
    drow = " + ".join(f"y{d} * {yst[d - lead]}" for d in inner) or "0"
    w = "1.0f"
    for d in inner:
        wd = f"(t{d} ? W{d}_1[y{d}] : W{d}_0[y{d}])"
        w = wd if w == "1.0f" else f"{w} * {wd}"
    arow = " + ".join(f"(t{d} ? I{d}_1[y{d}] : I{d}_0[y{d}]) * {ost[d - lead]}" for d in inner)
    with cw.blocks([f"for (int64_t y{d} = 0; y{d} < {dims.expr(ys[d])}; y{d}++)"
                    for d in inner]):
        cw.line(f"const {acc} *drow = dyp + {drow};")
        with cw.blocks([f"for (int t{d} = 0; t{d} < {taps}; t{d}++)" for d in inner]):
            cw.line(f"const float wp = {w};", "if (wp == 0.0f) continue;",
                    f"{acc} *arow = acc + {arow or '0'};")
            with cw.block("for (int64_t kk = 0; kk < K; kk++)"):
                cw.line(f"const int64_t *gxk = gx + kk * {ow}; const float *gwk = gw + kk * {ow};",
                        f"for (int64_t j = 0; j < {ow}; j++) "
                        f"arow[j] += ({acc})(wp * gwk[j]) * drow[gxk[j]];")


def _write(k: Kernel, an: Anchored, base: str, count: str) -> None:
    """Round ``acc[q]`` once and store it through the epilogue at output ``base + q``."""
    t = ctype(an.result.type.dtype)
    epi = ctx_gen(k, an.result.type.shape, f"({base} + q)", an.loads, {an.result: "rv"},
                  prefix="e")
    v = epi.get(an.out)
    with k.code.block(f"for (int64_t q = 0; q < {count}; q++)"):
        k.code.line(f"const {t.store} rv = {narrow(t, 'acc[q]')};", *epi.lines,
                    f"{k.param(an.out)}[{base} + q] = {v};")


def _general_path(k: Kernel, an: Anchored) -> None:
    dims = k.dims
    cw = k.code
    dy, res = an.operand(0), an.result
    t = ctype(dy.type.dtype)
    acc = t.acc
    ys, os_ = dy.type.shape, res.type.shape
    r = len(ys)
    yst, ost = strides(dims, ys), strides(dims, os_)
    total = dims.prod(os_)
    pro = ctx_gen(k, ys, " + ".join(f"y{d} * {yst[d]}" for d in range(r)), an.loads,
                  prefix="g")
    dv = pro.get(dy)
    w = "(t0 ? W0_1[y0] : W0_0[y0])"
    for d in range(1, r):
        w = f"{w} * (t{d} ? W{d}_1[y{d}] : W{d}_0[y{d}])"
    at = " + ".join(f"(t{d} ? I{d}_1[y{d}] : I{d}_0[y{d}]) * {ost[d]}" for d in range(r))
    heads = [f"for (int64_t y{d} = 0; y{d} < {dims.expr(ys[d])}; y{d}++)" for d in range(r)]
    cw.line(f"{acc} *acc = ({acc} *)calloc((size_t){total}, sizeof({acc}));")
    with cw.block("if (!acc)"):
        cw.line("fail = 1;")
    with cw.orelse():
        with cw.under(*heads[:-1]), cw.block(heads[-1]):
            cw.line(*pro.lines, f"const {acc} v = ({acc}){widen(t, dv)};")
            with cw.blocks([f"for (int t{d} = 0; t{d} < {_ntaps(k)}; t{d}++)"
                            for d in range(r)]):
                cw.line(f"const float w = {w};", f"acc[{at}] += ({acc})w * v;")
        _write(k, an, "0", total)
        cw.line("free(acc);")
