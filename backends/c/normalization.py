"""C kernels of SPEC-transformers.md §24: mean_variance_normalization and its gradient.

Bit for bit with the reference: every operation is rounded in ``ACC`` (float for float32 and
float16, double for float64; the program is compiled with ``-ffp-contract=off``), float16 is
widened exactly and rounded once on store, and each group's sums add its members in increasing
logical index from +0 (the canonical order).

Groups in lanes: the groups are the positions of the kept axes (those not in ``axes``). A sum
over one group is a chain of dependent additions, so a kernel summing one group at a time waits
the adder's latency on every element. The kernels take ``W`` groups at a time, consecutive along
the innermost kept axis (the *lane* axis), and advance their ``W`` chains together, one member
of each per step, each still in its own group's order. Where the lane axis is the innermost axis
of the input (a normalization over leading axes) the lanes are contiguous and each step is one
vector operation; where the normalized axes are innermost (layer norm over the last axis) the
lanes are rows and the chains are independent scalar additions. Per block of groups: the sum of
``x``, the sum of ``d * d`` (two passes, as the reference), then the element-wise output, its
loop over the contiguous side (members or lanes) so that it vectorizes; a block's members stay
in cache between its passes, so the input is read from memory once.

The gradient recomputes the statistics per block the same way, sums ``g = dY * scale`` and
``g * z``, and writes ``dX``; it keeps each group's mean and ``inv`` in a scratch array. The
scale and bias gradients then sum over the axes where ``scale`` broadcasts, in increasing index
of the input, in a second parallel loop over the scale's elements, ``z`` recomputed from the
saved statistics (bit for bit the same value): chunks of ``CHUNK`` consecutive scale elements
along its innermost kept axis advance together, so the usual ``(n,)`` scale of a layer norm
sums whole rows of the input as vectors.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Callable, Sequence

from gradc.backends.c.ctypes_map import Dims, ctype, float_literal, strides
from gradc.backends.c.kernel import Kernel, omp_for, padded
from gradc.backends.c.normalization_rows import row_path, rows_backward, rows_forward
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.writer import CWriter
from gradc.ir.core import Value
from gradc.ir.types import Dim

CHUNK = 128  # scale elements whose gradient sums advance together (64-256: within 5%)


def lanes(acc: str, contiguous: bool) -> int:
    """Groups per block: a vector of the ACC type for contiguous lanes, else 8 scalar chains
    (enough to hide the adder's latency)."""
    if not contiguous:
        return 8
    return 8 if acc == "double" else 16


class _Layout:
    """The input's shape split into kept axes (groups) and normalized axes (members), with
    the C expressions of offsets: of the input, of a group's index and of a broadcast
    parameter (stride None on the axes where it broadcasts)."""

    def __init__(self, k: Kernel, x: Value, axes: Sequence[int]) -> None:
        self.k, self.dims = k, k.dims
        self.t = ctype(x.type.dtype)
        self.a = self.t.acc
        self.shape = x.type.shape
        r = len(self.shape)
        self.axes = list(axes)
        self.kept = [a for a in range(r) if a not in self.axes]
        st = strides(self.dims, self.shape)
        self.xs: dict[int, str | None] = {a: st[a] for a in range(r)}
        gst = strides(self.dims, [self.shape[a] for a in self.kept])
        self.gs: dict[int, str | None] = {a: None for a in range(r)}
        self.gs.update({a: gst[i] for i, a in enumerate(self.kept)})
        self.lane = self.kept[-1] if self.kept else None
        self.contiguous = self.lane == r - 1

    def pstrides(self, p: Value) -> dict[int, str | None]:
        """Per input axis, the stride of a parameter broadcast to the input (None: size 1)."""
        r = len(self.shape)
        ps = padded(p.type.shape, r)
        st = strides(self.dims, ps)
        return {a: None if self.dims.static(ps[a]) == 1 else st[a] for a in range(r)}

    def dim(self, a: int | None) -> str:
        """The size of axis ``a`` (1 for None)."""
        return "1" if a is None else self.dims.expr(self.shape[a])

    def load(self, v: Value, index: str) -> str:
        """The ACC value of ``v``'s element ``index`` (float16 widened exactly)."""
        return f"({self.a}){widen(self.t, f'{self.k.param(v)}[{index}]')}"

    def store(self, v: Value, index: str, value: str) -> None:
        """``v[index] = value`` rounded once to the dtype."""
        self.k.code.line(f"{self.k.param(v)}[{index}] = {narrow(self.t, value)};")

    def lit(self, v: float) -> str:
        """A float as an exact ACC literal."""
        return float_literal(v, self.a)

    def sqrt(self, e: str) -> str:
        """The correctly rounded square root in ACC."""
        return f"sqrt({e})" if self.a == "double" else f"sqrtf({e})"


def offset(st: dict[int, str | None], coords: dict[int, str], axes: Sequence[int]) -> str:
    """``sum(coord * stride)`` over ``axes`` (axes without a stride add nothing)."""
    terms = [f"{coords[a]} * {st[a]}" for a in axes if st[a] is not None]
    return " + ".join(terms) or "0"


def decompose(cw: CWriter, dims: Dims, shape: Sequence[Dim], axes: Sequence[int],
              flat: str) -> dict[int, str]:
    """Declare ``co<a>``: the coordinates of the row-major index ``flat`` over ``axes``."""
    coords: dict[int, str] = {}
    cw.line(f"int64_t rem = {flat};")
    for a in reversed(axes):
        size = dims.expr(shape[a])
        cw.line(f"const int64_t co{a} = rem % {size};", f"rem /= {size};")
        coords[a] = f"co{a}"
    cw.line("(void)rem;")
    return coords


class _Blocks:
    """The parallel loop over blocks of ``W`` groups and the member loops of one block.

    ``body(w, lane0)`` writes one block of ``w`` groups whose lane coordinates are
    ``lane0 + c`` (c < w); ``base(st)`` is the offset of the block's first group in an array
    with strides ``st``, and ``member(st)`` a member's offset from its group's, inside
    ``members``."""

    def __init__(self, L: _Layout) -> None:
        self.L = L
        self.w = lanes(L.a, L.contiguous)
        self.coords: dict[int, str] = {}

    def emit(self, body: Callable[[int, str], None]) -> None:
        """Write the loop: full blocks of ``W`` groups, then the last groups one at a time."""
        L, cw, w = self.L, self.L.k.code, self.w
        outer = L.kept[:-1]
        lb = f"(({L.dim(L.lane)} + {w - 1}) / {w})"
        nb = f"{L.dims.prod([L.shape[a] for a in outer])} * {lb}"
        cw.line(f"const {L.a} nn = ({L.a})(int64_t){L.dims.prod([L.shape[a] for a in L.axes])};",
                "(void)nn;")
        cw.line(omp_for(L.dims.prod(L.shape)))
        with cw.block(f"for (int64_t blk = 0; blk < {nb}; blk++)"):
            self.coords = decompose(cw, L.dims, L.shape, outer, f"blk / {lb}")
            cw.line(f"const int64_t l0 = (blk % {lb}) * {w};")
            if w == 1 or L.lane is None:
                body(1, "l0")
                return
            with cw.block(f"if (l0 + {w} <= {L.dim(L.lane)})"):
                body(w, "l0")
            with cw.orelse(f"else for (int64_t l = l0; l < {L.dim(L.lane)}; l++)"):
                body(1, "l")

    def base(self, st: dict[int, str | None], lane0: str) -> str:
        """The offset of the block's first group (lane ``lane0``) in an array of strides ``st``."""
        coords = dict(self.coords)
        axes = self.L.kept[:-1]
        if self.L.lane is not None:
            coords[self.L.lane] = lane0
            axes = axes + [self.L.lane]
        return offset(st, coords, axes)

    def step(self, st: dict[int, str | None]) -> str:
        """The offset from one lane to the next (``0`` where the array broadcasts)."""
        s = st[self.L.lane] if self.L.lane is not None else None
        return "0" if s is None else s

    def members(self) -> AbstractContextManager[None]:
        """The loops over a group's members in increasing logical index."""
        L = self.L
        heads = [f"for (int64_t j{a} = 0; j{a} < {L.dim(a)}; j{a}++)" for a in L.axes]
        return L.k.code.blocks(heads)

    def member(self, st: dict[int, str | None]) -> str:
        """A member's offset from its group's first element (inside ``members``)."""
        return offset(st, {a: f"j{a}" for a in self.L.axes}, self.L.axes)


def _stats(B: _Blocks, x: Value, w: int, um: bool, uv: bool, eps: float) -> None:
    """Declare ``mean[w]`` and ``inv[w]`` of the block's groups (§24.1's mvn_stats)."""
    L, cw, a = B.L, B.L.k.code, B.L.a
    xo = f"xb + c * {B.step(L.xs)} + {B.member(L.xs)}"
    cw.line(f"{a} mean[{w}], inv[{w}];", "(void)mean; (void)inv;")
    if um:
        cw.line(f"{a} s[{w}] = {{0}};")
        with B.members(), cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
            cw.line(f"s[c] = s[c] + {L.load(x, xo)};")
        with cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
            cw.line("mean[c] = s[c] / nn;")
    if uv:
        cw.line(f"{a} s2[{w}] = {{0}};")
        with B.members(), cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
            d = f"{L.load(x, xo)} - mean[c]" if um else L.load(x, xo)
            cw.line(f"const {a} d = {d};", f"const {a} p = d * d;", "s2[c] = s2[c] + p;")
        with cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
            cw.line(f"const {a} var = s2[c] / nn;", f"const {a} se = var + {L.lit(eps)};",
                    f"const {a} sd = {L.sqrt('se')};", f"inv[c] = {L.lit(1.0)} / sd;")


def _each(B: _Blocks, w: int) -> AbstractContextManager[None]:
    """The element loops of a block: over the contiguous side innermost (vectorized)."""
    cw = B.L.k.code
    lane = f"for (int64_t c = 0; c < {w}; c++)"
    L = B.L
    heads = [f"for (int64_t j{a} = 0; j{a} < {L.dim(a)}; j{a}++)" for a in L.axes]
    return cw.blocks(heads + [lane] if L.contiguous and w > 1 else [lane] + heads)


def _z(L: _Layout, x: Value, xo: str, um: bool, uv: bool) -> list[str]:
    """The lines computing ``z`` (the normalized value) of element ``xo`` of lane ``c``."""
    a = L.a
    d = f"{L.load(x, xo)} - mean[c]" if um else L.load(x, xo)
    return [f"const {a} d = {d};", f"const {a} z = d * inv[c];" if uv else f"const {a} z = d;"]


def emit_mean_variance_normalization(k: Kernel) -> None:
    """§24.1: per block of groups, the statistics, then ``z * scale + bias`` per element."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    scale = n.inputs[1] if len(n.inputs) > 1 else None
    bias = n.inputs[2] if len(n.inputs) > 2 else None
    um, uv, eps = n.attrs["use_mean"], n.attrs["use_variance"], n.attrs["epsilon"]
    if row_path(x, [scale, bias], n.attrs["axes"]):
        rows_forward(k, x, y, scale, bias, n.attrs["axes"], um, uv, eps)
        return
    L = _Layout(k, x, n.attrs["axes"])
    B, cw, a = _Blocks(L), k.code, L.a
    # by role, not by identity: scale and bias may be one value (mvn(x, s, s))
    params = [(p, L.pstrides(p), name, op) for p, name, op in ((scale, "sb", "*"),
                                                               (bias, "bb", "+"))
              if p is not None]

    def body(w: int, lane0: str) -> None:
        cw.line(f"const int64_t xb = {B.base(L.xs, lane0)};")
        cw.line(*(f"const int64_t {nm} = {B.base(st, lane0)};" for _, st, nm, _ in params))
        _stats(B, x, w, um, uv, eps)
        xo = f"xb + c * {B.step(L.xs)} + {B.member(L.xs)}"
        with _each(B, w):
            cw.line(*_z(L, x, xo, um, uv), f"{a} v = z;")
            for p, st, nm, op in params:
                cw.line(f"v = v {op} {L.load(p, f'{nm} + c * {B.step(st)} + {B.member(st)}')};")
            L.store(y, xo, "v")

    B.emit(body)


def emit_mean_variance_normalization_grad(k: Kernel) -> None:
    """§24.2: dX per block of groups (statistics recomputed), then dscale and dbias."""
    n = k.node
    x, dy, scale = n.inputs
    dx, ds, db = n.outputs
    um, uv, eps = n.attrs["use_mean"], n.attrs["use_variance"], n.attrs["epsilon"]
    L = _Layout(k, x, n.attrs["axes"])
    B, cw, a = _Blocks(L), k.code, L.a
    sst = L.pstrides(scale)
    groups = L.dims.prod([L.shape[q] for q in L.kept])
    cw.line(f"{a} *gm = ({a} *)gc_alloc((size_t){groups} * 2 * sizeof({a}));",
            "if (!gm) return 1;", f"{a} *gi = gm + {groups};")

    def body(w: int, lane0: str) -> None:
        cw.line(f"const int64_t xb = {B.base(L.xs, lane0)};",
                f"const int64_t sb = {B.base(sst, lane0)};",
                f"const int64_t gb = {B.base(L.gs, lane0)};")
        _stats(B, x, w, um, uv, eps)
        xo = f"xb + c * {B.step(L.xs)} + {B.member(L.xs)}"
        so = f"sb + c * {B.step(sst)} + {B.member(sst)}"
        g = f"const {a} g = {L.load(dy, xo)} * {L.load(scale, so)};"
        cw.line(f"{a} mg[{w}], mgz[{w}];", "(void)mg; (void)mgz;")
        cw.line(f"{a} sg[{w}] = {{0}}, sgz[{w}] = {{0}};", "(void)sg; (void)sgz;")
        if um or uv:
            with B.members(), cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
                cw.line(g)
                if um:
                    cw.line("sg[c] = sg[c] + g;")
                if uv:
                    cw.line(*_z(L, x, xo, um, uv), f"const {a} t = g * z;", "sgz[c] = sgz[c] + t;")
        with cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
            gq = f"gb + c * {B.step(L.gs)}"
            cw.line("mg[c] = sg[c] / nn;", "mgz[c] = sgz[c] / nn;",
                    f"gm[{gq}] = mean[c];", f"gi[{gq}] = inv[c];")
        with _each(B, w):
            cw.line(g, f"{a} r = g;")
            if um:
                cw.line("r = r - mg[c];")
            if uv:
                cw.line(*_z(L, x, xo, um, uv), f"const {a} q = z * mgz[c];",
                        f"const {a} r2 = r - q;", "r = inv[c] * r2;")
            L.store(dx, xo, "r")

    if row_path(x, [scale], n.attrs["axes"]):
        rows_backward(k, x, dy, scale, dx, n.attrs["axes"], um, uv, eps)
    else:
        B.emit(body)
    _parameter_gradients(L, k, x, dy, scale, ds, db, um, uv)
    cw.line("free(gm);")


def _parameter_gradients(L: _Layout, k: Kernel, x: Value, dy: Value, scale: Value, ds: Value,
                         db: Value, um: bool, uv: bool) -> None:
    """dscale = sum(dY * z), dbias = sum(dY) over the axes where scale broadcasts, in
    increasing index of X: chunks of consecutive scale elements along its innermost kept axis
    advance together."""
    cw, a, dims = k.code, L.a, L.dims
    sst = L.pstrides(scale)
    r = len(L.shape)
    red = [q for q in range(r) if sst[q] is None]
    keep = [q for q in range(r) if sst[q] is not None]
    va = keep[-1] if keep else None
    vn = L.dim(va)
    nb = f"{dims.prod([L.shape[q] for q in keep[:-1]])} * (({vn} + {CHUNK - 1}) / {CHUNK})"
    cw.line(omp_for(dims.prod(L.shape)))
    with cw.block(f"for (int64_t blk = 0; blk < {nb}; blk++)"):
        coords = decompose(cw, dims, L.shape, keep[:-1], f"blk / (({vn} + {CHUNK - 1}) / {CHUNK})")
        cw.line(f"const int64_t q0 = (blk % (({vn} + {CHUNK - 1}) / {CHUNK})) * {CHUNK};",
                f"const int64_t qn = {vn} - q0 < {CHUNK} ? {vn} - q0 : {CHUNK};",
                f"const int64_t xo = {offset(L.xs, coords, keep[:-1])};",
                f"const int64_t go = {offset(L.gs, coords, keep[:-1])};",
                f"const int64_t po = {offset(sst, coords, keep[:-1])};",
                f"{a} as[{CHUNK}] = {{0}}, ab[{CHUNK}] = {{0}};")
        jc = {q: f"j{q}" for q in red}
        heads = [f"for (int64_t j{q} = 0; j{q} < {L.dim(q)}; j{q}++)" for q in red]
        vx = "0" if va is None else f"(q0 + q) * {L.xs[va]}"
        vg = "0" if va is None or L.gs[va] is None else f"(q0 + q) * {L.gs[va]}"
        with cw.blocks(heads):
            cw.line(f"const int64_t xr = xo + {offset(L.xs, jc, red)};",
                    f"const int64_t gr = go + {offset(L.gs, jc, red)};", "(void)gr;")

            def inner(bound: str) -> None:
                with cw.block(f"for (int64_t q = 0; q < {bound}; q++)"):
                    cw.line(f"const int64_t m = xr + {vx};", f"const int64_t gq = gr + {vg};",
                            "(void)gq;", f"const {a} gy = {L.load(dy, 'm')};")
                    d = f"{L.load(x, 'm')} - gm[gq]" if um else L.load(x, "m")
                    z = "d * gi[gq]" if uv else "d"
                    cw.line(f"const {a} d = {d};", f"const {a} z = {z};",
                            f"const {a} t = gy * z;", "as[q] = as[q] + t;", "ab[q] = ab[q] + gy;")

            inner("qn")
        ps = "0" if va is None else f"(q0 + q) * {sst[va]}"
        with cw.block("for (int64_t q = 0; q < qn; q++)"):
            L.store(ds, f"po + {ps}", "as[q]")
            L.store(db, f"po + {ps}", "ab[q]")


EMITTERS = {
    "mean_variance_normalization": emit_mean_variance_normalization,
    "mean_variance_normalization_grad": emit_mean_variance_normalization_grad,
}
