"""C kernels of SPEC-training.md §12 (the four batch-normalization ops).

Every kernel runs an OpenMP loop over the groups (a position of the parameters: the kept axes,
flattened row-major, so the group index is the parameters' flat index). Inside a group, nested
loops over the reduced axes visit its members in increasing logical index, the canonical order
of the references: sums start at +0 and round each addition in ``ACC`` (float for float32 and
float16, double for float64), every operation is rounded separately (the program is compiled
with ``-ffp-contract=off``), float16 is widened exactly and rounded once on store. So every
result is bit-identical to the reference.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from gradc.backends.c.ctypes_map import ctype, float_literal, strides
from gradc.backends.c.kernel import Kernel, omp_for
from gradc.backends.c.scalar import narrow, widen
from gradc.ir.core import Value
from gradc.ir.types import Dim


class _Group:
    """The loads and loops of one kernel: X's shape, reduced axes, ACC type."""

    def __init__(self, k: Kernel, x: Value, pshape: Sequence[Dim]) -> None:
        self.k, self.t = k, ctype(x.type.dtype)
        self.shape = x.type.shape
        self.axes = [a for a, d in enumerate(pshape) if d == 1]
        self.a = self.t.acc
        self.off = "base"  # set by ``groups``

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

    @contextmanager
    def groups(self) -> Iterator[None]:
        """The parallel loop over groups ``g``, with ``base`` the offset of its first member."""
        dims, cw, shape = self.k.dims, self.k.code, self.shape
        kept = [a for a in range(len(shape)) if a not in self.axes]
        st = strides(dims, shape)
        cw.line(omp_for(dims.prod(shape)))
        with cw.block(f"for (int64_t g = 0; g < {dims.prod([shape[a] for a in kept])}; g++)"):
            if kept:
                cw.line("int64_t rem = g, base = 0;")
                for a in reversed(kept):
                    size = dims.expr(shape[a])
                    cw.line(f"base += (rem % {size}) * {st[a]};", f"rem /= {size};")
                cw.line("(void)rem;")
            else:
                cw.line("const int64_t base = 0;")
            self.off = " + ".join(["base"] + [f"j{a} * {st[a]}" for a in self.axes])
            cw.line(f"const {self.a} n = ({self.a})(int64_t)"
                    f"{dims.prod([shape[a] for a in self.axes])};", "(void)n;")
            yield

    @contextmanager
    def members(self) -> Iterator[None]:
        """The loops over a group's members in increasing logical index; ``o`` the offset."""
        heads = [f"for (int64_t j{a} = 0; j{a} < {self.k.dims.expr(self.shape[a])}; j{a}++)"
                 for a in self.axes]
        with self.k.code.block(), self.k.code.blocks(heads):
            self.k.code.line(f"const int64_t o = {self.off};")
            yield


def _dev(G: _Group, var: Value) -> str:
    """``dev = sqrt(variance + epsilon)`` of the group, in ACC."""
    eps = G.lit(G.k.node.attrs["epsilon"])
    return f"const {G.a} dev = {G.sqrt(G.load(var, 'g') + ' + ' + eps)};"


def emit_batch_normalization(k: Kernel) -> None:
    """§12.1: ``scale * ((x - mean) / dev) + bias`` per element, in this order."""
    x, mean, var, scale, bias = k.node.inputs
    y = k.node.outputs[0]
    G, cw = _Group(k, x, mean.type.shape), k.code
    a = G.a
    with G.groups():
        cw.line(f"const {a} mu = {G.load(mean, 'g')}, sc = {G.load(scale, 'g')}, "
                f"bi = {G.load(bias, 'g')};",
                _dev(G, var))
        with G.members():
            cw.line(f"const {a} d = {G.load(x, 'o')} - mu;", f"const {a} q = d / dev;",
                    f"const {a} r = sc * q;", f"const {a} v = r + bi;")
            G.store(y, "o", "v")


def emit_batch_normalization_grad(k: Kernel) -> None:
    """§12.2: dX = dY * (scale / dev); dscale = sum(dY (x - mean)) / dev; dbias = sum(dY)."""
    x, dy, mean, var, scale = k.node.inputs
    dx, ds, db = k.node.outputs
    G, cw = _Group(k, x, mean.type.shape), k.code
    a = G.a
    with G.groups():
        cw.line(f"const {a} mu = {G.load(mean, 'g')};",
                _dev(G, var),
                f"const {a} c = {G.load(scale, 'g')} / dev;",
                f"{a} st = 0, sb = 0;")
        with G.members():
            cw.line(f"const {a} gy = {G.load(dy, 'o')};", f"const {a} p = gy * c;")
            G.store(dx, "o", "p")
            cw.line(f"const {a} d = {G.load(x, 'o')} - mu;", f"const {a} t = gy * d;",
                    "st = st + t;", "sb = sb + gy;")
        G.store(ds, "g", "st / dev")
        G.store(db, "g", "sb")


def emit_batch_normalization_training(k: Kernel) -> None:
    """§12.3: mean and biased variance in two passes, then the normalized output."""
    x, scale, bias = k.node.inputs
    y, m, v = k.node.outputs
    G, cw = _Group(k, x, scale.type.shape), k.code
    a = G.a
    with G.groups():
        cw.line(f"{a} s = 0;")
        with G.members():
            cw.line(f"s = s + {G.load(x, 'o')};")
        cw.line(f"const {a} mean = s / n;", f"{a} s2 = 0;")
        with G.members():
            cw.line(f"const {a} d = {G.load(x, 'o')} - mean;", f"const {a} p = d * d;",
                    "s2 = s2 + p;")
        cw.line(f"const {a} var = s2 / n;",
                f"const {a} dev = {G.sqrt('var + ' + G.lit(k.node.attrs['epsilon']))};",
                f"const {a} sc = {G.load(scale, 'g')}, bi = {G.load(bias, 'g')};")
        with G.members():
            cw.line(f"const {a} d = {G.load(x, 'o')} - mean;", f"const {a} q = d / dev;",
                    f"const {a} r = sc * q;", f"const {a} w = r + bi;")
            G.store(y, "o", "w")
        G.store(m, "g", "mean")
        G.store(v, "g", "var")


def emit_batch_normalization_training_grad(k: Kernel) -> None:
    """§12.4: DirectML's formula in the reference's order."""
    x, dy, mean, var, scale = k.node.inputs
    dx, ds, db = k.node.outputs
    G, cw = _Group(k, x, mean.type.shape), k.code
    a = G.a
    with G.groups():
        cw.line(f"const {a} mu = {G.load(mean, 'g')}, sc = {G.load(scale, 'g')};",
                f"const {a} ve = {G.load(var, 'g')} + {G.lit(k.node.attrs['epsilon'])};",
                f"const {a} dev = {G.sqrt('ve')};", f"{a} sd = 0, st = 0;")
        with G.members():
            cw.line(f"const {a} gy = {G.load(dy, 'o')};",
                    f"const {a} d = {G.load(x, 'o')} - mu;", f"const {a} t = gy * d;",
                    "sd = sd + gy;", "st = st + t;")
        cw.line(f"const {a} mdy = sd / n;", f"const {a} q0 = st / n;",
                f"const {a} q = q0 / ve;", f"const {a} f = sc / dev;")
        with G.members():
            cw.line(f"const {a} gy = {G.load(dy, 'o')};",
                    f"const {a} d = {G.load(x, 'o')} - mu;", f"const {a} r0 = gy - mdy;",
                    f"const {a} r1 = d * q;", f"const {a} r = r0 - r1;",
                    f"const {a} w = f * r;")
            G.store(dx, "o", "w")
        G.store(ds, "g", "st / dev")
        G.store(db, "g", "sd")


EMITTERS: dict[str, Any] = {
    "batch_normalization": emit_batch_normalization,
    "batch_normalization_grad": emit_batch_normalization_grad,
    "batch_normalization_training": emit_batch_normalization_training,
    "batch_normalization_training_grad": emit_batch_normalization_training_grad,
}
