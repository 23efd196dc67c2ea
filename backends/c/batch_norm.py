"""C kernels of SPEC-training.md §12 (the four batch-normalization ops).

Every kernel runs an OpenMP loop over the groups (a position of the parameters: the kept axes,
flattened row-major, so the group index is the parameters' flat index). Inside a group, nested
loops over the reduced axes visit its members in increasing logical index, the canonical order
of the references: sums start at +0 and round each addition in ``ACC`` (float for float32 and
float16, double for float64), every operation is rounded separately (the program is compiled
with ``-ffp-contract=off``), float16 is widened exactly and rounded once on store. So every
result is bit-identical to the reference.

Interleaved groups: a group's sum is one chain of dependent additions, so a kernel summing one
group at a time waits the adder's latency on every element (resnet18's and the UNet's batch
norms ran at about a third of an addition per cycle). The kernels therefore take the groups
``W`` at a time (``_width``: 8, fewer for few groups so that both threads get blocks): the
``W`` chains advance together, one element of each per step of the member loops, each still in
its own group's canonical order -- the same sums, bit for bit, with ``W`` additions in flight.
The element-wise passes run one group after another (their inner loops vectorize). The groups
past the last whole block run one at a time (``W`` = 1).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from gradc.backends.c.ctypes_map import ctype, float_literal, strides
from gradc.backends.c.kernel import Kernel, omp_for
from gradc.backends.c.scalar import narrow, widen
from gradc.ir.core import Value
from gradc.ir.types import Dim

WIDTH = 8  # groups whose sums advance together (8 chains hide the adder's latency)


def _width(groups: int | None) -> int:
    """Groups per block: WIDTH, or fewer so that a static count (None: symbolic) still makes
    2+ blocks."""
    if groups is None:
        return WIDTH
    w = WIDTH
    while w > 1 and groups < 2 * w:
        w //= 2
    return w


class _Group:
    """The loads and loops of one kernel: X's shape, reduced axes, ACC type.

    A kernel's body is written once as a function of the block width ``w`` (``body(w)``): the
    block's groups are ``gg + c`` for c < w, their first members at ``bs[c]``, and per-group
    values are arrays indexed by ``c``."""

    def __init__(self, k: Kernel, x: Value, pshape: Sequence[Dim]) -> None:
        self.k, self.t = k, ctype(x.type.dtype)
        self.shape = x.type.shape
        self.axes = [a for a, d in enumerate(pshape) if d == 1]
        self.kept = [a for a in range(len(self.shape)) if a not in self.axes]
        self.a = self.t.acc

    def load(self, v: Value, index: str) -> str:
        """The ACC value of ``v``'s element ``index`` (float16 widened exactly)."""
        return f"({self.a}){widen(self.t, f'{self.k.param(v)}[{index}]')}"

    def store(self, v: Value, index: str, value: str) -> None:
        """``v[index] = value`` rounded once to the dtype."""
        self.k.code.line(f"{self.k.param(v)}[{index}] = {narrow(self.t, value)};")

    def lit(self, v: float) -> str:
        """A float scalar attribute as an exact ACC literal."""
        return float_literal(v, self.a)

    def sqrt(self, e: str) -> str:
        """The correctly rounded square root in ACC."""
        return f"sqrt({e})" if self.a == "double" else f"sqrtf({e})"

    def arrays(self, w: int, *names: str, init: bool = False) -> None:
        """Per-group ACC values of the block: ``name[w]`` (zeroed with ``init``)."""
        z = " = {0}" if init else ""
        self.k.code.line(f"{self.a} {', '.join(f'{n}[{w}]{z}' for n in names)};")

    @contextmanager
    def lanes(self, w: int) -> Iterator[None]:
        """A loop over the block's groups ``c``."""
        with self.k.code.block(f"for (int64_t c = 0; c < {w}; c++)"):
            yield

    def emit(self, body: Callable[[int], None]) -> None:
        """The parallel loop over blocks of groups, each block's body, and the tail."""
        dims, cw, shape = self.k.dims, self.k.code, self.shape
        ng = dims.prod([shape[a] for a in self.kept])
        w = _width(dims.prod_static([shape[a] for a in self.kept]))
        cw.line(omp_for(dims.prod(shape)))
        with cw.block(f"for (int64_t gb = 0; gb < (({ng}) + {w - 1}) / {w}; gb++)"):
            cw.line(f"const {self.a} n = ({self.a})(int64_t)"
                    f"{dims.prod([shape[a] for a in self.axes])};", "(void)n;")
            if w == 1:
                cw.line("const int64_t gg = gb;")
                self._bases(1)
                body(1)
                return
            with cw.block(f"if (gb * {w} + {w} <= ({ng}))"):
                cw.line(f"const int64_t gg = gb * {w};")
                self._bases(w)
                body(w)
            with cw.block(f"else for (int64_t gg = gb * {w}; gg < ({ng}); gg++)"):
                self._bases(1)
                body(1)

    def _bases(self, w: int) -> None:
        """``bs[c]``: the offset of group ``gg + c``'s first member."""
        dims, cw, shape = self.k.dims, self.k.code, self.shape
        st = strides(dims, shape)
        cw.line(f"int64_t bs[{w}];")
        with self.lanes(w):
            cw.line("int64_t rem = gg + c, base = 0;")
            for a in reversed(self.kept):
                size = dims.expr(shape[a])
                cw.line(f"base += (rem % {size}) * {st[a]};", f"rem /= {size};")
            cw.line("(void)rem;", "bs[c] = base;")

    @contextmanager
    def members(self) -> Iterator[None]:
        """The loops over a group's members in increasing logical index; ``o`` the offset from
        the group's first member (``bs[c] + o``)."""
        st = strides(self.k.dims, self.shape)
        heads = [f"for (int64_t j{a} = 0; j{a} < {self.k.dims.expr(self.shape[a])}; j{a}++)"
                 for a in self.axes]
        off = " + ".join([f"j{a} * {st[a]}" for a in self.axes]) or "0"
        with self.k.code.block(), self.k.code.blocks(heads):
            self.k.code.line(f"const int64_t o = {off};")
            yield


def _dev(G: _Group, var: Value) -> str:
    """``dev = sqrt(variance + epsilon)`` of group ``gg + c``, in ACC."""
    eps = G.lit(G.k.node.attrs["epsilon"])
    return f"const {G.a} dev = {G.sqrt(G.load(var, 'gg + c') + ' + ' + eps)};"


def emit_batch_normalization(k: Kernel) -> None:
    """§12.1: ``scale * ((x - mean) / dev) + bias`` per element, in this order."""
    x, mean, var, scale, bias = k.node.inputs
    y = k.node.outputs[0]
    G, cw = _Group(k, x, mean.type.shape), k.code
    a = G.a

    def body(w: int) -> None:
        with G.lanes(w):
            cw.line(f"const {a} mu = {G.load(mean, 'gg + c')}, sc = {G.load(scale, 'gg + c')}, "
                    f"bi = {G.load(bias, 'gg + c')};",
                    _dev(G, var))
            with G.members():
                cw.line(f"const {a} d = {G.load(x, 'bs[c] + o')} - mu;", f"const {a} q = d / dev;",
                        f"const {a} r = sc * q;", f"const {a} v = r + bi;")
                G.store(y, "bs[c] + o", "v")

    G.emit(body)


def emit_batch_normalization_grad(k: Kernel) -> None:
    """§12.2: dX = dY * (scale / dev); dscale = sum(dY (x - mean)) / dev; dbias = sum(dY)."""
    x, dy, mean, var, scale = k.node.inputs
    dx, ds, db = k.node.outputs
    G, cw = _Group(k, x, mean.type.shape), k.code
    a = G.a

    def body(w: int) -> None:
        G.arrays(w, "mu", "dev", "cf")
        G.arrays(w, "st", "sb", init=True)
        with G.lanes(w):
            eps = G.lit(k.node.attrs["epsilon"])
            cw.line(f"mu[c] = {G.load(mean, 'gg + c')};",
                    f"dev[c] = {G.sqrt(G.load(var, 'gg + c') + ' + ' + eps)};",
                    f"cf[c] = {G.load(scale, 'gg + c')} / dev[c];")
        with G.members(), G.lanes(w):
            cw.line(f"const {a} gy = {G.load(dy, 'bs[c] + o')};", f"const {a} p = gy * cf[c];")
            G.store(dx, "bs[c] + o", "p")
            cw.line(f"const {a} d = {G.load(x, 'bs[c] + o')} - mu[c];", f"const {a} t = gy * d;",
                    "st[c] = st[c] + t;", "sb[c] = sb[c] + gy;")
        with G.lanes(w):
            G.store(ds, "gg + c", "st[c] / dev[c]")
            G.store(db, "gg + c", "sb[c]")

    G.emit(body)


def emit_batch_normalization_training(k: Kernel) -> None:
    """§12.3: mean and biased variance in two passes, then the normalized output."""
    x, scale, bias = k.node.inputs
    y, m, v = k.node.outputs
    G, cw = _Group(k, x, scale.type.shape), k.code
    a = G.a

    def body(w: int) -> None:
        G.arrays(w, "s", "s2", init=True)
        G.arrays(w, "mean")
        with G.members(), G.lanes(w):
            cw.line(f"s[c] = s[c] + {G.load(x, 'bs[c] + o')};")
        with G.lanes(w):
            cw.line("mean[c] = s[c] / n;")
        with G.members(), G.lanes(w):
            cw.line(f"const {a} d = {G.load(x, 'bs[c] + o')} - mean[c];", f"const {a} p = d * d;",
                    "s2[c] = s2[c] + p;")
        with G.lanes(w):
            cw.line(f"const {a} mu = mean[c], var = s2[c] / n;",
                    f"const {a} dev = {G.sqrt('var + ' + G.lit(k.node.attrs['epsilon']))};",
                    f"const {a} sc = {G.load(scale, 'gg + c')}, bi = {G.load(bias, 'gg + c')};")
            with G.members():
                cw.line(f"const {a} d = {G.load(x, 'bs[c] + o')} - mu;", f"const {a} q = d / dev;",
                        f"const {a} r = sc * q;", f"const {a} u = r + bi;")
                G.store(y, "bs[c] + o", "u")
            G.store(m, "gg + c", "mu")
            G.store(v, "gg + c", "var")

    G.emit(body)


def emit_batch_normalization_training_grad(k: Kernel) -> None:
    """§12.4: DirectML's formula in the reference's order."""
    x, dy, mean, var, scale = k.node.inputs
    dx, ds, db = k.node.outputs
    G, cw = _Group(k, x, mean.type.shape), k.code
    a = G.a

    def body(w: int) -> None:
        G.arrays(w, "mu")
        G.arrays(w, "sd", "st", init=True)
        with G.lanes(w):
            cw.line(f"mu[c] = {G.load(mean, 'gg + c')};")
        with G.members(), G.lanes(w):
            cw.line(f"const {a} gy = {G.load(dy, 'bs[c] + o')};",
                    f"const {a} d = {G.load(x, 'bs[c] + o')} - mu[c];", f"const {a} t = gy * d;",
                    "sd[c] = sd[c] + gy;", "st[c] = st[c] + t;")
        with G.lanes(w):
            cw.line(f"const {a} m0 = mu[c], sc = {G.load(scale, 'gg + c')};",
                    f"const {a} ve = {G.load(var, 'gg + c')} + {G.lit(k.node.attrs['epsilon'])};",
                    f"const {a} dev = {G.sqrt('ve')};",
                    f"const {a} mdy = sd[c] / n;", f"const {a} q0 = st[c] / n;",
                    f"const {a} q = q0 / ve;", f"const {a} f = sc / dev;")
            with G.members():
                cw.line(f"const {a} gy = {G.load(dy, 'bs[c] + o')};",
                        f"const {a} d = {G.load(x, 'bs[c] + o')} - m0;",
                        f"const {a} r0 = gy - mdy;",
                        f"const {a} r1 = d * q;", f"const {a} r = r0 - r1;",
                        f"const {a} u = f * r;")
                G.store(dx, "bs[c] + o", "u")
            G.store(ds, "gg + c", "st[c] / dev")
            G.store(db, "gg + c", "sd[c]")

    G.emit(body)


EMITTERS: dict[str, Any] = {
    "batch_normalization": emit_batch_normalization,
    "batch_normalization_grad": emit_batch_normalization_grad,
    "batch_normalization_training": emit_batch_normalization_training,
    "batch_normalization_training_grad": emit_batch_normalization_training_grad,
}
