"""C kernels of SPEC-training.md §14 (reductions) and §17 (softmax, log_softmax).

Every kernel walks the groups (the kept axes, flattened in row-major order: the result's flat
index) in an OpenMP loop; inside a group, nested loops over the reduced axes visit the members
in increasing logical index, the canonical order the references use. Accumulators start at
-0.0 (the identity of IEEE addition, so the first term is taken exactly, as NumPy's ``cumsum``
does); float16 is widened to float and rounded once on store. Selections compare the compute
type and copy the stored element, so results are bit-exact copies.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from gradc.ir.types import Dim

from gradc.backends.c.ctypes_map import CType, ctype, strides
from gradc.backends.c.kernel import Kernel, omp_for


def _widen(t: CType, e: str) -> str:
    return f"gc_h2f({e})" if t.is_f16 else e


def _store(t: CType, e: str) -> str:
    if t.is_f16:
        return f"gc_f2h({e})"
    return f"({t.store})({e})"


@contextmanager
def _groups(k: Kernel, shape: Sequence[Dim], axes: Sequence[int]) -> Iterator[str]:
    """Open the parallel loop over groups (index ``g``) and declare ``base``; yields the C
    expression of a member's offset, valid inside ``_members``."""
    dims, cw, r = k.dims, k.code, len(shape)
    kept = [a for a in range(r) if a not in axes]
    st = strides(dims, shape)
    count = dims.prod([shape[a] for a in kept])
    cw.line(omp_for(dims.prod(shape)))
    with cw.block(f"for (int64_t g = 0; g < {count}; g++)"):
        if kept:
            cw.declare("int64_t", "rem", "g")
            cw.declare("int64_t", "base", "0")
            for a in reversed(kept):
                size = dims.expr(shape[a])
                cw.line(f"base += (rem % {size}) * {st[a]};", f"rem /= {size};")
        else:
            cw.declare("const int64_t", "base", "0")
        yield " + ".join(["base"] + [f"j{a} * {st[a]}" for a in axes])


def _members(k: Kernel, shape: Sequence[Dim], axes: Sequence[int]) -> Any:
    """The nested loops over a group's members, in increasing logical index."""
    heads = [f"for (int64_t j{a} = 0; j{a} < {k.dims.expr(shape[a])}; j{a}++)" for a in axes]
    return k.code.blocks(heads) if heads else k.code.block()


def _select(k: Kernel, x: str, t: CType, shape: Sequence[Dim], axes: Sequence[int], off: str,
            largest: bool, var: str, compute: str) -> None:
    """§14.2: ``bi`` = offset of the first extreme (NaN-ignoring), ``var`` its compute value."""
    cw = k.code
    cw.declare("int64_t", "bi", "-1")
    cw.declare(compute, var, "0")
    op = ">" if largest else "<"
    better = (f"(v == v && ({var} != {var} || v {op} {var}))" if t.is_float
              else f"v {op} {var}")
    with _members(k, shape, axes):
        cw.line(f"const int64_t o = {off};", f"const {compute} v = {_widen(t, f'{x}[o]')};")
        with cw.block(f"if (bi < 0 || {better})"):
            cw.line("bi = o;", f"{var} = v;")


def emit_reduce_mean(k: Kernel) -> None:
    """Canonical sum in ACC, divided once by the count, rounded once."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    t, axes, shape = ctype(x.type.dtype), n.attrs["axes"], x.type.shape
    count = k.dims.prod([shape[a] for a in axes])
    xs, ys = k.param(x), k.param(y)
    with _groups(k, shape, axes) as off:
        k.code.declare(t.acc, "acc", "-0.0")
        with _members(k, shape, axes):
            k.code.line(f"acc += {_widen(t, f'{xs}[{off}]')};")
        k.code.line(f"{ys}[g] = {_store(t, f'acc / ({t.acc}){count}')};")


def _extreme(largest: bool) -> Any:
    def emit(k: Kernel) -> None:
        n = k.node
        x, y = n.inputs[0], n.outputs[0]
        t, axes, shape = ctype(x.type.dtype), n.attrs["axes"], x.type.shape
        xs, ys = k.param(x), k.param(y)
        with _groups(k, shape, axes) as off:
            _select(k, xs, t, shape, axes, off, largest, "bv", t.compute)
            k.code.line(f"{ys}[g] = {xs}[bi];")
    emit.__doc__ = f"reduce_{'max' if largest else 'min'}: the selected element, copied."
    return emit


def _extreme_grad(largest: bool) -> Any:
    def emit(k: Kernel) -> None:
        n = k.node
        x, dy, dx = n.inputs[0], n.inputs[1], n.outputs[0]
        t, axes, shape = ctype(x.type.dtype), n.attrs["axes"], x.type.shape
        xs, dys, dxs = k.param(x), k.param(dy), k.param(dx)
        k.code.line(f"memset({dxs}, 0, (size_t){k.dims.prod(shape)} * {t.width // 8});")
        with _groups(k, shape, axes) as off:
            _select(k, xs, t, shape, axes, off, largest, "bv", t.compute)
            k.code.line(f"{dxs}[bi] = {dys}[g];")
    emit.__doc__ = "dY stored at each group's selected element, +0 elsewhere."
    return emit


def emit_element_count(k: Kernel) -> None:
    """The product of the sizes on ``axes``, converted once to the dtype."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    t = ctype(y.type.dtype)
    count = f"(int64_t){k.dims.prod([x.type.shape[a] for a in n.attrs['axes']])}"
    value = f"gc_d2h((double){count})" if t.is_f16 else f"({t.store}){count}"
    k.code.line(f"{k.param(y)}[0] = {value};")


def _softmax(log: bool) -> Any:
    def emit(k: Kernel) -> None:
        n = k.node
        x, y = n.inputs[0], n.outputs[0]
        t, axes, shape = ctype(x.type.dtype), n.attrs["axes"], x.type.shape
        r = len(shape)
        if not t.is_f16 and sorted(axes) == list(range(r - len(axes), r)):
            _softmax_rows(k, t, log)
            return
        a = t.acc
        xs, ys = k.param(x), k.param(y)
        cw = k.code
        with _groups(k, shape, axes) as off:
            _select(k, xs, t, shape, axes, off, True, "mx", a)
            cw.declare(a, "total", "-0.0")
            sh = f"const {a} sh = ({a})({_widen(t, f'{xs}[o]')} - mx);"
            with _members(k, shape, axes):
                cw.line(f"const int64_t o = {off};", sh, f"total += ({a})gc_exp((double)sh);")
            if log:
                cw.declare(f"const {a}", "lt", f"({a})gc_log((double)total)")
                value = f"({a})(sh - lt)"
            else:
                value = f"({a})(({a})gc_exp((double)sh) / total)"
            with _members(k, shape, axes):
                cw.line(f"const int64_t o = {off};", sh, f"{ys}[o] = {_store(t, value)};")
    emit.__doc__ = f"{'log_' if log else ''}softmax: §17.1's steps per group, in ACC."
    return emit


def _softmax_rows(k: Kernel, t: CType, log: bool) -> None:
    """float32/float64 softmax over trailing axes: each group is a contiguous row of ``L``.

    The same values as the general loop, in passes that vectorize, GC_ROWS rows at a time
    (transcend.h's ``gc_row*``): the row's maximum in lanes (§14.2's selection of the first
    maximum where that is 0 or -inf, the cases where which maximum is taken shows),
    ``e = exp(x - mx)`` stored into the output, the rows' sums in canonical order from -0.0
    advanced together, then the output divided by its row's total (or ``sh - log(total)``).
    """
    n, cw, dims = k.node, k.code, k.dims
    x, y = n.inputs[0], n.outputs[0]
    axes, shape = n.attrs["axes"], x.type.shape
    a, sfx = t.acc, ("f32" if t.acc == "float" else "f64")  # float32, float64: ACC is the dtype
    xs, ys = k.param(x), k.param(y)
    cw.declare("const int64_t", "L", dims.prod([shape[i] for i in axes]))
    cw.declare("const int64_t", "G", dims.prod([d for i, d in enumerate(shape) if i not in axes]))
    cw.line(omp_for(dims.prod(shape)))
    with cw.block("for (int64_t gb = 0; gb < G; gb += GC_ROWS)"):
        cw.declare("const int64_t", "nr", "G - gb < GC_ROWS ? G - gb : GC_ROWS")
        cw.line(f"{a} mx[GC_ROWS], total[GC_ROWS];")
        with cw.block("for (int64_t r = 0; r < nr; r++)"):
            cw.declare(f"const {a} *restrict", "xr", f"{xs} + (gb + r) * L")
            cw.line(f"mx[r] = gc_rowmax_{sfx}(xr, L);",
                    f"if (!(mx[r] != 0 && mx[r] > -({a})INFINITY))",
                    f"  mx[r] = gc_rowfirst_{sfx}(xr, L);",
                    f"gc_rowexp_{sfx}(xr, {ys} + (gb + r) * L, L, mx[r]);")
        cw.line(f"gc_rowsums_{sfx}({ys} + gb * L, L, nr, total);")
        with cw.block("for (int64_t r = 0; r < nr; r++)"):
            cw.declare(f"{a} *restrict", "yr", f"{ys} + (gb + r) * L")
            if log:
                cw.declare(f"const {a} *restrict", "xr", f"{xs} + (gb + r) * L")
                cw.declare(f"const {a}", "lt", f"({a})gc_log((double)total[r])")
                body = f"yr[j] = ({a})(({a})(xr[j] - mx[r]) - lt);"
            else:
                cw.declare(f"const {a}", "tr", "total[r]")
                body = "yr[j] = yr[j] / tr;"
            with cw.block("for (int64_t j = 0; j < L; j++)"):
                cw.line(body)


EMITTERS: dict[str, Any] = {
    "reduce_mean": emit_reduce_mean,
    "reduce_max": _extreme(True), "reduce_min": _extreme(False),
    "reduce_max_grad": _extreme_grad(True), "reduce_min_grad": _extreme_grad(False),
    "element_count": emit_element_count,
    "softmax": _softmax(False), "log_softmax": _softmax(True),
}
