"""The row path of the normalization kernels: a layer or RMS norm over the trailing axes.

When the normalized axes are the trailing ones, each group is one contiguous row of ``n``
elements and the groups are consecutive rows. Summing ``V`` rows at once (one lane of a vector
each, ``V`` = 64 bytes of ACC: 16 floats, 8 doubles) needs the rows' elements column by column:
a block of ``V`` rows by ``V`` columns is loaded as ``V`` row vectors and transposed in
registers (``log2(V)`` butterfly stages of two-input shuffles), after which vector ``k`` holds
column ``k`` of every row, and the lanes add their columns in order: each row's sum is still
its own chain in increasing index (the canonical order), computed ``V`` rows per vector
operation. The last ``n mod V`` columns are added per lane after the blocks, and rows past the
last whole block of ``V`` run one at a time; both use the same operations in the same order,
so every path gives the reference's bits. The element-wise passes run along the rows.

Parameters (scale, bias) take this path when they do not vary over the kept axes and are
either whole over the normalized axes (element ``m`` of the row) or one value.
"""

from __future__ import annotations

from typing import Callable, Sequence

from gradc.backends.c.ctypes_map import ctype, float_literal
from gradc.backends.c.kernel import Kernel, omp_for, padded
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.writer import CWriter
from gradc.ir.core import Value
from gradc.ir.types import DType

VECTOR = {DType.float32: ("gc_vf32", 16), DType.float64: ("gc_vf64", 8)}
TILE = 128 * 1024  # bytes of transposed columns a block keeps on its thread's stack
GROUPS = 1  # vectors of rows per block (2 and 4 measured slower: 16 chains already overlap)
Step = Callable[[list[str], str, str], None]  # (values, lane "v" or "c", column index)


def row_param(x: Value, p: Value | None, axes: Sequence[int]) -> str | None:
    """The index of parameter ``p`` at column ``m`` on the row path: ``"m"`` (whole over the
    normalized axes) or ``"0"`` (one value); None when the row path cannot read it."""
    if p is None:
        return "0"
    r = x.type.rank
    ps = padded(p.type.shape, r)
    if any(ps[a] != 1 for a in range(r) if a not in axes):
        return None
    if all(ps[a] == 1 for a in axes):
        return "0"
    if all(ps[a] == x.type.shape[a] for a in axes):
        return "m"
    return None


def row_path(x: Value, params: Sequence[Value | None], axes: Sequence[int]) -> bool:
    """True when the row path applies: float32/float64, trailing axes with at least one kept
    axis, and parameters it can read."""
    r = x.type.rank
    trailing = list(axes) == list(range(r - len(axes), r))
    return (x.type.dtype in VECTOR and trailing and len(axes) < r
            and all(row_param(x, p, axes) is not None for p in params))


def transpose(cw: CWriter, vt: str, v: int, names: list[str], tag: str) -> list[str]:
    """Transpose ``v`` vectors of ``v`` lanes in registers; returns the names of the result
    (vector ``k`` holds element ``k`` of every input vector, in input order)."""
    s, stage = v // 2, 0
    while s >= 1:
        new = list(names)
        for i in range(v):
            if i & s:
                continue
            lo = [p if not p & s else v + p - s for p in range(v)]
            hi = [p + s if not p & s else v + p for p in range(v)]
            a, b = names[i], names[i + s]
            new[i], new[i + s] = f"{tag}{stage}_{i}", f"{tag}{stage}_{i + s}"
            for name, idx in ((new[i], lo), (new[i + s], hi)):
                cw.line(f"const {vt} {name} = __builtin_shufflevector({a}, {b}, "
                        f"{', '.join(map(str, idx))});")
        names, s, stage = new, s // 2, stage + 1
    return names


class Rows:
    """The row path's loops for one kernel: ``NJ`` columns, ``NR`` rows, ``V`` lanes."""

    def __init__(self, k: Kernel, x: Value, axes: Sequence[int]) -> None:
        self.k, self.x, self.cw = k, x, k.code
        self.t = ctype(x.type.dtype)
        self.a = self.t.acc
        self.vt, self.v = VECTOR[x.type.dtype]
        shape = x.type.shape
        self.n = k.dims.prod([shape[a] for a in axes])
        self.rows = k.dims.prod([d for a, d in enumerate(shape) if a not in axes])
        self.total = k.dims.prod(shape)
        # The transposed columns of x are kept for the later passes of a block when they fit
        # TILE bytes (static sizes): one transpose of x per block instead of one per pass.
        n = k.dims.prod_static([shape[a] for a in axes])
        size = ctype(x.type.dtype).width // 8
        self.tile = n is not None and n // self.v * self.v * self.v * size * GROUPS <= TILE
        self.tiled = False  # within a block: the tile holds x's columns

    def lit(self, value: float) -> str:
        """A float as an exact ACC literal."""
        return float_literal(value, self.a)

    def sqrt(self, e: str) -> str:
        """The correctly rounded square root in ACC."""
        return f"sqrt({e})" if self.a == "double" else f"sqrtf({e})"

    def load(self, v: Value, index: str) -> str:
        """The ACC value of ``v``'s element ``index``."""
        return f"({self.a}){widen(self.t, f'{self.k.param(v)}[{index}]')}"

    def store(self, v: Value, index: str, value: str) -> None:
        """``v[index] = value`` rounded once to the dtype."""
        self.cw.line(f"{self.k.param(v)}[{index}] = {narrow(self.t, value)};")

    def emit(self, body: Callable[[int, str], None]) -> None:
        """The parallel loop over blocks of ``GROUPS * V`` rows, ``body(rows, first row)``;
        after the last whole block, blocks of ``V`` rows, then single rows."""
        cw, v, u = self.cw, self.v, GROUPS
        cw.line(f"const int64_t NJ = {self.n}, NR = {self.rows};",
                f"const {self.a} nn = ({self.a})NJ;")
        cw.line(omp_for(self.total))
        with cw.block(f"for (int64_t blk = 0; blk < (NR + {u * v - 1}) / {u * v}; blk++)"):
            cw.line(f"const int64_t g0 = blk * {u * v};")
            with cw.block(f"if (g0 + {u * v} <= NR)"):
                self._block(body, u * v, "g0")
            with cw.orelse():
                cw.line("int64_t g1 = g0;")
                with cw.block(f"for (; g1 + {v} <= NR; g1 += {v})"):
                    self._block(body, v, "g1")
                with cw.block("for (; g1 < NR; g1++)"):
                    body(1, "g1")

    def _block(self, body: Callable[[int, str], None], w: int, row: str) -> None:
        self.tiled = False
        if self.tile:
            cw = self.cw
            cw.line(f"_Alignas(64) {self.vt} tile[{w // self.v}][NJ / {self.v} * {self.v} + 1];")
        body(w, row)

    def lanes(self, w: int, *names: str) -> None:
        """Declare per-row ACC arrays ``name[w]``, +0."""
        self.cw.line(*(f"_Alignas(64) {self.a} {n}[{w}] = {{0}};" for n in names))

    def columns(self, w: int, row: str, srcs: Sequence[Value], step: Step,
                accs: Sequence[str] = (), reads: Sequence[str] = ()) -> None:
        """Visit the block's elements column by column, in increasing column: ``step(values,
        lane, col)`` gets each source's element at column ``col``: for blocks of ``V`` columns
        a vector of ``V`` rows (lane ``"v<u>"`` for the ``u``-th ``V`` rows of the block; the
        arrays ``accs`` and ``reads`` are then vectors ``name_v[u]``, ``accs`` copied back
        after the blocks), then a scalar per row ``c`` (lane ``"c"``)."""
        with self.cw.block():  # the vectors of one visit are its own
            self._columns(w, row, srcs, step, accs, reads)

    def _columns(self, w: int, row: str, srcs: Sequence[Value], step: Step,
                 accs: Sequence[str], reads: Sequence[str]) -> None:
        cw, v, vt = self.cw, self.v, self.vt
        tail = "0"
        if w > 1:
            cw.line(*(f"{vt} {n}_v[{w // v}]; memcpy({n}_v, {n}, sizeof {n}_v);"
                      for n in list(accs) + list(reads)))
            with cw.block(f"for (int64_t j0 = 0; j0 + {v} <= NJ; j0 += {v})"):
                for u in range(w // v):  # independent chains: the adder's latency overlaps
                    with cw.block():
                        self._vectors(u, f"{row} + {u * v}", srcs, step)
            cw.line(*(f"memcpy({n}, {n}_v, sizeof {n}_v);" for n in accs))
            tail = f"NJ / {v} * {v}"
            self.tiled = True
        with cw.block(f"for (int64_t j = {tail}; j < NJ; j++)"):
            with cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
                step([self.load(src, f"({row} + c) * NJ + j") for src in srcs], "c", "j")

    def _vectors(self, u: int, row: str, srcs: Sequence[Value], step: Step) -> None:
        """One block of ``V`` rows by ``V`` columns: transposed (or read from the tile)."""
        cw, v, vt = self.cw, self.v, self.vt
        cols = []
        for q, src in enumerate(srcs):
            names = [f"r{q}_{i}" for i in range(v)]
            if src is self.x and self.tile and self.tiled:  # columns kept earlier
                cw.line(*(f"const {vt} {name} = tile[{u}][j0 + {i}];"
                          for i, name in enumerate(names)))
                cols.append(names)
                continue
            for i, name in enumerate(names):
                cw.line(f"{vt} {name};", f"memcpy(&{name}, {self.k.param(src)} + "
                        f"({row} + {i}) * NJ + j0, sizeof {name});")
            cols.append(transpose(cw, vt, v, names, f"t{q}s"))
            if src is self.x and self.tile:  # keep them for the later passes
                cw.line(*(f"tile[{u}][j0 + {i}] = {name};" for i, name in enumerate(cols[-1])))
        for col in range(v):
            with cw.block():
                step([c[col] for c in cols], f"v{u}", f"j0 + {col}")

    def ty(self, lane: str) -> str:
        """The C type of a value of the lane: the vector type or ACC."""
        return self.vt if lane.startswith("v") else self.a


def at(name: str, lane: str) -> str:
    """An accumulator of the step: ``name_v[u]`` (lane ``v<u>``) or ``name[c]`` (row ``c``)."""
    return f"{name}_v[{lane[1:]}]" if lane.startswith("v") else f"{name}[c]"


def emit_stats(R: Rows, w: int, row: str, um: bool, uv: bool, eps: float) -> None:
    """``mean[w]`` and ``inv[w]`` of the block's rows (§24.1's mvn_stats, canonical order)."""
    cw, a = R.cw, R.a
    R.lanes(w, "mean", "inv", "s", "s2")
    cw.line("(void)mean; (void)inv;")
    if um:
        def add(vals: list[str], lane: str, col: str) -> None:
            cw.line(f"{at('s', lane)} = {at('s', lane)} + {vals[0]};")
        R.columns(w, row, [R.x], add, accs=["s"])
        with cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
            cw.line("mean[c] = s[c] / nn;")
    if uv:
        def add2(vals: list[str], lane: str, col: str) -> None:
            d = f"{vals[0]} - {at('mean', lane)}" if um else vals[0]
            cw.line(f"const {R.ty(lane)} d = {d};", f"const {R.ty(lane)} p = d * d;",
                    f"{at('s2', lane)} = {at('s2', lane)} + p;")
        R.columns(w, row, [R.x], add2, accs=["s2"], reads=["mean"])
        with cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
            cw.line(f"const {a} var = s2[c] / nn;", f"const {a} se = var + {R.lit(eps)};",
                    f"const {a} sd = {R.sqrt('se')};", f"inv[c] = {R.lit(1.0)} / sd;")


def rows_forward(k: Kernel, x: Value, y: Value, scale: Value | None, bias: Value | None,
                 axes: Sequence[int], um: bool, uv: bool, eps: float) -> None:
    """§24.1 on the row path: the statistics of ``V`` rows at a time, then the output."""
    R, cw = Rows(k, x, axes), k.code
    params = [(p, row_param(x, p, axes), "*" if p is scale else "+")
              for p in (scale, bias) if p is not None]

    def body(w: int, row: str) -> None:
        emit_stats(R, w, row, um, uv, eps)
        with cw.block(f"for (int64_t c = 0; c < {w}; c++)"), \
                cw.block("for (int64_t m = 0; m < NJ; m++)"):
            cw.line(f"const int64_t o = ({row} + c) * NJ + m;")
            cw.line(f"const {R.a} d = {R.load(x, 'o')} - mean[c];" if um else
                    f"const {R.a} d = {R.load(x, 'o')};",
                    f"{R.a} v = {'d * inv[c]' if uv else 'd'};")
            for p, index, op in params:
                cw.line(f"v = v {op} {R.load(p, index or '0')};")
            R.store(y, "o", "v")

    R.emit(body)


def rows_backward(k: Kernel, x: Value, dy: Value, scale: Value, dx: Value,
                  axes: Sequence[int], um: bool, uv: bool, eps: float) -> None:
    """§24.2's dX on the row path; each row's mean and inv saved in ``gm``/``gi``."""
    R, cw, a = Rows(k, x, axes), k.code, Rows(k, x, axes).a
    sidx = row_param(x, scale, axes) or "0"

    def body(w: int, row: str) -> None:
        emit_stats(R, w, row, um, uv, eps)
        R.lanes(w, "sg", "sgz")

        def sums(vals: list[str], lane: str, col: str) -> None:
            ty = R.ty(lane)
            cw.line(f"const {ty} g = {vals[1]} * {R.load(scale, col if sidx == 'm' else '0')};")
            if um:
                cw.line(f"{at('sg', lane)} = {at('sg', lane)} + g;")
            if uv:
                d = f"{vals[0]} - {at('mean', lane)}" if um else vals[0]
                cw.line(f"const {ty} d = {d};", f"const {ty} z = d * {at('inv', lane)};",
                        f"const {ty} t = g * z;", f"{at('sgz', lane)} = {at('sgz', lane)} + t;")
        if um or uv:
            R.columns(w, row, [x, dy], sums, accs=["sg", "sgz"], reads=["mean", "inv"])
        with cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
            cw.line(f"const {a} mg = sg[c] / nn, mgz = sgz[c] / nn;", "(void)mg; (void)mgz;",
                    f"gm[{row} + c] = mean[c];", f"gi[{row} + c] = inv[c];")
            with cw.block("for (int64_t m = 0; m < NJ; m++)"):
                cw.line(f"const int64_t o = ({row} + c) * NJ + m;",
                        f"const {a} g = {R.load(dy, 'o')} * {R.load(scale, sidx)};",
                        f"{a} r = g;")
                if um:
                    cw.line("r = r - mg;")
                if uv:
                    d = f"{R.load(x, 'o')} - mean[c]" if um else R.load(x, "o")
                    cw.line(f"const {a} d = {d};", f"const {a} z = d * inv[c];",
                            f"const {a} q = z * mgz;", f"const {a} r2 = r - q;",
                            "r = inv[c] * r2;")
                R.store(dx, "o", "r")

    R.emit(body)
