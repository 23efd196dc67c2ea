"""max_pooling and max_pooling_grad: a thread per window (forward), a thread per element of dX
(gradient, a gather), no atomics.

Shapes are static, so the geometry of every spatial axis is computed here in exact integers
and baked into small ``__device__`` tables: per output coordinate, the first input position
its window reaches and how many taps land inside (padding is never a candidate, SPEC.md §5.1);
per input position, the output coordinates whose windows reach it, increasing. A kernel only
adds positions below the axis' size, so no attribute magnitude can overflow it.

A window's argmax visits its valid taps in window order (row-major, increasing index): the
first is taken, a later one replaces the best only if it is not NaN and the best is NaN or
smaller (ties keep the lowest index), as the reference does. The gradient of an element of X
is the sum of dY over the windows whose argmax it is, added in increasing dY index from +0 in
the accumulation type: the reference's order (``np.add.at``), so the sum is bit-identical. An
anchored group's prologue is evaluated at each dY element read, its epilogue on the sum.

Windows that tile the input (the stride is the window, no padding or dilation: 2x2 stride 2)
take a form of their own: a thread per window finds its argmax once and writes all of its
elements of dX (each element belongs to that window alone), reading X once instead of once
per reaching window; the same values, so the same bits.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.ir.ops.common import lowest

from gradc.backends.c.ctypes_map import CType, ctype, literal
from gradc.backends.c.kernel import anchored, ctx_gen
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.writer import CWriter
from gradc.backends.cuda.kernel import CudaKernel, check_table, coords, row_major, static_shape

class _Axis:
    """One spatial axis: per output coordinate its window's valid taps (first position,
    count), and per input position the output coordinates that reach it."""

    def __init__(self, n: int, out: int, w: int, s: int, sp: int, d: int) -> None:
        check_table("max_pooling", "spatial axes", max(n, out))
        self.n, self.out, self.d = n, out, d
        self.first: list[int] = []
        self.count: list[int] = []
        reach: list[list[int]] = [[] for _ in range(n)]
        entries = 0
        for o in range(out):
            base = o * s - sp  # the position of tap 0 (exact Python ints)
            k_lo = max(0, -(base // d))  # the first tap with a position >= 0
            k_hi = min(w - 1, (n - 1 - base) // d)  # the last one below n
            cnt = max(0, k_hi - k_lo + 1)
            self.first.append(base + k_lo * d if cnt else 0)
            self.count.append(cnt)
            entries += cnt
            check_table("max_pooling", "window taps per axis", entries)
            for j in range(cnt):
                reach[base + (k_lo + j) * d].append(o)
        self.start = [0]
        self.windows: list[int] = []
        for r in reach:
            self.windows.extend(r)
            self.start.append(len(self.windows))


def _axes(k: CudaKernel, xs: Sequence[int], out: Sequence[int], attrs: Any) -> list[_Axis]:
    return [_Axis(xs[a], out[a], attrs["window_size"][a], attrs["strides"][a],
                  attrs["start_padding"][a], attrs["dilations"][a]) for a in range(len(xs))]


def _argmax(k: CudaKernel, axes: list[_Axis], o: Sequence[str], x: str, t: CType,
            tag: str) -> None:
    """Declare ``bi<tag>`` (in-plane index of window ``o``'s argmax, -1 when no tap is valid)
    and ``bv<tag>`` (its value in the compute type); ``x`` points at the plane."""
    cw = k.code
    firsts = [k.table("int64_t", ax.first) for ax in axes]
    counts = [k.table("int64_t", ax.count) for ax in axes]
    pst = row_major([ax.n for ax in axes])
    cw.line(f"int64_t bi{tag} = -1;", f"{t.compute} bv{tag} = 0;")
    heads = [f"for (int64_t j{tag}{a} = 0; j{tag}{a} < {counts[a]}[{o[a]}]; j{tag}{a}++)"
             for a in range(len(axes))]
    pos = " + ".join(f"({firsts[a]}[{o[a]}] + j{tag}{a} * INT64_C({axes[a].d}))"
                     + (f" * {pst[a]}" if pst[a] != 1 else "") for a in range(len(axes)))
    better = (f"(v == v && (bv{tag} != bv{tag} || v > bv{tag}))" if t.is_float
              else f"v > bv{tag}")
    with cw.blocks(heads):
        cw.line(f"const int64_t q = {pos};", f"const {t.compute} v = {widen(t, f'{x}[q]')};")
        with cw.block(f"if (bi{tag} < 0 || {better})"):
            cw.line(f"bi{tag} = q;", f"bv{tag} = v;")


def emit_max_pooling(k: CudaKernel) -> None:
    """Each window: its argmax's value (the stored bits) and flat index, or the lowest value
    and index 0 when no tap is valid."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    t = ctype(x.type.dtype)
    xs, ys = static_shape(k, x.type.shape), static_shape(k, y.type.shape)
    axes = _axes(k, xs[2:], ys[2:], n.attrs)
    plane, oplane = _prod(xs[2:]), _prod(ys[2:])
    with k.each(_prod(ys)) as i:
        c = coords(k, y.type.shape, i, "c")
        k.code.line(f"const {t.store} *xp = {k.param(x)} + {i} / {oplane} * {plane};")
        _argmax(k, axes, c[2:], "xp", t, "")
        low = literal(lowest(x.type.dtype.numpy).item(), x.type.dtype)
        k.code.line(f"{k.param(y)}[{i}] = bi >= 0 ? xp[bi] : {low};")
        if len(n.outputs) > 1:
            k.code.line(f"{k.param(n.outputs[1])}[{i}] = bi >= 0 ? "
                        f"{i} / {oplane} * {plane} + bi : 0;")


TILE_TAPS = 16  # taps of a window at most for the tiling form (its taps are unrolled)


def _tiling(axes: list[_Axis], attrs: Any) -> bool:
    """True when the windows tile the input exactly: on every axis the window is the stride,
    undilated, unpadded, and the windows cover the axis (each input position is in exactly one
    window, every tap of a window is inside)."""
    taps = 1
    for a, ax in enumerate(axes):
        w, s = attrs["window_size"][a], attrs["strides"][a]
        if not (attrs["dilations"][a] == 1 and w == s and attrs["start_padding"][a] == 0
                and ax.n == ax.out * s):
            return False
        taps *= w
    return taps <= TILE_TAPS


def _emit_tiling_grad(k: CudaKernel, an: Any, axes: list[_Axis], xs: Sequence[int],
                      ys: Sequence[int]) -> None:
    """max_pooling_grad of windows that tile the input: a thread per window (dY element)
    finds its argmax once and writes each of its taps' dX elements: dY (the prologue at the
    window) added to +0 at the argmax, +0 elsewhere, then the epilogue; each element of dX is
    in one window only, so this is the gather's result and order, with X read once."""
    x, dy = an.operand(0), an.operand(1)
    t = ctype(x.type.dtype)
    cw = k.code
    window = [int(w) for w in an.anchor.attrs["window_size"]]
    plane, oplane = _prod(xs[2:]), _prod(ys[2:])
    xst = row_major(xs[2:])
    offs = [sum(j * st for j, st in zip(js, xst)) for js in _taps(window)]
    better = ("(v == v && (bv != bv || v > bv))" if t.is_float else "v > bv")
    with k.each(_prod(ys)) as y:
        c = coords(k, dy.type.shape, y, "c")
        base = " + ".join([f"{y} / {oplane} * {plane}"] + [
            f"{c[a + 2]} * {window[a] * xst[a]}" for a in range(len(axes))])
        cw.line(f"const int64_t xb = {base};", "int bi = 0;",
                f"{t.compute} bv = {widen(t, f'{k.param(x)}[xb]')};")
        for j, off in enumerate(offs[1:], 1):
            with cw.block():
                cw.line(f"const {t.compute} v = {widen(t, f'{k.param(x)}[xb + {off}]')};")
                with cw.block(f"if ({better})"):
                    cw.line(f"bi = {j};", "bv = v;")
        pro = ctx_gen(k, dy.type.shape, y, an.loads, prefix="a")
        dv = pro.get(dy)
        cw.line(*pro.lines, f"const {t.acc} d = ({t.acc}){widen(t, dv)};")
        for j, off in enumerate(offs):
            with cw.block():
                cw.line(f"const int64_t xi = xb + {off};", f"{t.acc} acc = 0;",
                        f"if (bi == {j}) acc += d;")
                epi = ctx_gen(k, an.result.type.shape, "xi", an.loads, {an.result: "r"},
                              prefix="e")
                value = epi.get(an.out)
                cw.line(f"const {t.store} r = {narrow(t, 'acc')};", *epi.lines,
                        f"{k.param(an.out)}[xi] = {value};")


def _taps(window: Sequence[int]) -> list[tuple[int, ...]]:
    """A window's taps in row-major order."""
    out: list[tuple[int, ...]] = [()]
    for w in window:
        out = [js + (j,) for js in out for j in range(w)]
    return out


def emit_max_pooling_grad(k: CudaKernel) -> None:
    """Each element of dX: dY summed over the windows whose argmax it is, in dY's order. Two
    launches (windows that do not tile the input): each window's argmax into scratch, a
    thread per window, then the gather, so no argmax is found more than once."""
    an = anchored(k)
    x, dy = an.operand(0), an.operand(1)
    t = ctype(x.type.dtype)
    xs, ys = static_shape(k, x.type.shape), static_shape(k, dy.type.shape)
    axes = _axes(k, xs[2:], ys[2:], an.anchor.attrs)
    if _tiling(axes, an.anchor.attrs):
        _emit_tiling_grad(k, an, axes, xs, ys)
        return
    plane, oplane = _prod(xs[2:]), _prod(ys[2:])
    ost = row_major(ys[2:])
    cw = k.code
    # First every window's argmax (its in-plane index, -1 when no tap is valid), once each,
    # into scratch; then each element of dX reads the argmaxes of the windows reaching it.
    best = k.scratch("int64_t", _prod(ys))
    with k.each(_prod(ys)) as y:
        c = coords(k, dy.type.shape, y, "c")
        cw.line(f"const {t.store} *xp = {k.param(x)} + {y} / {oplane} * {plane};")
        _argmax(k, axes, c[2:], "xp", t, "")
        cw.line(f"{best}[{y}] = bi;")
    k.next_launch()
    cw = k.code
    starts = [k.table("int64_t", ax.start) for ax in axes]
    lists = [k.table("int64_t", ax.windows) for ax in axes]
    with k.each(_prod(xs)) as i:
        c = coords(k, x.type.shape, i, "c")
        cw.line(f"const int64_t pl = {i} / {plane}, e = {i} % {plane};",
                f"{t.acc} acc = 0;")
        heads = [f"for (int64_t u{a} = {starts[a]}[{c[a + 2]}]; u{a} < {starts[a]}"
                 f"[{c[a + 2]} + 1]; u{a}++)" for a in range(len(axes))]
        with cw.blocks(heads):
            o = [f"{lists[a]}[u{a}]" for a in range(len(axes))]
            flat = " + ".join(f"{oa} * {st}" if st != 1 else oa for oa, st in zip(o, ost))
            cw.line(f"const int64_t yi = pl * {oplane} + {flat};")
            with cw.block(f"if ({best}[yi] == e)"):
                _add_gradient(k, cw, an, dy, t)
        epi = ctx_gen(k, an.result.type.shape, i, an.loads, {an.result: "r"}, prefix="e")
        value = epi.get(an.out)
        cw.line(f"const {t.store} r = {narrow(t, 'acc')};", *epi.lines,
                f"{k.param(an.out)}[{i}] = {value};")


def _add_gradient(k: CudaKernel, cw: CWriter, an: Any, dy: Any, t: CType) -> None:
    """``acc += dY[yi]`` (the prologue's value at dY element ``yi``)."""
    pro = ctx_gen(k, dy.type.shape, "yi", an.loads, prefix="a")
    dv = pro.get(dy)
    cw.line(*pro.lines, f"acc += ({t.acc}){widen(t, dv)};")


def _prod(sizes: Sequence[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


EMITTERS: dict[str, Any] = {"max_pooling": emit_max_pooling,
                            "max_pooling_grad": emit_max_pooling_grad}
