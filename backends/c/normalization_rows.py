"""The row path of the normalization kernels: a layer or RMS norm over the trailing axes.

When the normalized axes are the trailing ones, each group is one contiguous row of ``n``
elements and the groups are consecutive rows. Summing ``V`` rows at once (one lane of a vector
each, ``V`` = 64 bytes of ACC: 16 floats, 8 doubles) needs the rows' elements column by column:
a block of ``V`` rows by ``V`` columns is loaded as ``V`` row vectors and transposed in
registers (``log2(V)`` butterfly stages of two-input shuffles), after which vector ``k`` holds
column ``k`` of every row, and the lanes add their columns in order: each row's sum is still
its own chain in increasing index (the canonical order), computed ``V`` rows per vector
operation. The first pass over a block keeps x's transposed columns in a per-thread tile for
the later passes (the gradient's ``dY`` is transposed in its one pass). The last ``n mod V``
columns are added per lane after the vectors, and rows past the last whole block of ``V`` run
one at a time; both use the same operations in the same order, so every path gives the
reference's bits. The element-wise passes run along the rows.

Measured on this project's Zen 4 machine (8x128x256 float32, one thread): the in-register
consumption, unrolled over a block's ``V`` columns, is 10-15% faster than writing the whole
transposed block to the tile first and looping over it, for the same compile time; blocks of
2 or 4 vectors of rows were slower than 1 (16 chains already overlap).

Parameters (scale, bias) take this path when they do not vary over the kept axes and are
either whole over the normalized axes (element ``m`` of the row) or one value.
"""

from __future__ import annotations

from typing import Callable, Sequence

from gradc.backends.c.ctypes_map import ctype, float_literal
from gradc.backends.c.kernel import Kernel, fail_unless, padded
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.c.writer import CWriter
from gradc.ir.core import Value
from gradc.ir.types import DType

VECTOR = {DType.float32: ("gc_vf32", 16), DType.float64: ("gc_vf64", 8)}
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
    """The row path's loops for one kernel: ``NJ`` columns, ``NR`` rows, ``V`` lanes, and a
    per-thread tile ``tile`` of x's transposed columns (``NV``: ``NJ`` rounded down to a
    multiple of ``V``), kept by a block's first pass over x for its later ones."""

    def __init__(self, k: Kernel, x: Value, axes: Sequence[int]) -> None:
        self.k, self.x, self.cw = k, x, k.code
        self.t = ctype(x.type.dtype)
        self.a = self.t.acc
        self.vt, self.v = VECTOR[x.type.dtype]
        shape = x.type.shape
        self.n = k.dims.prod([shape[a] for a in axes])
        self.rows = k.dims.prod([d for a, d in enumerate(shape) if a not in axes])
        self.total = k.dims.prod(shape)
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
        """The parallel loop over blocks of ``V`` rows, ``body(V, "g0")``; the rows after the
        last whole block one at a time, ``body(1, "g1")``. Each thread allocates its tile
        once (a failed allocation returns 1, as every kernel's)."""
        cw, v, vt = self.cw, self.v, self.vt
        cw.line(f"const int64_t NJ = {self.n}, NR = {self.rows}, NV = NJ / {v} * {v};",
                f"const {self.a} nn = ({self.a})NJ;", "int fail = 0;")
        cw.line(f"#pragma omp parallel num_threads(nt) if(({self.total}) > GC_PAR_MIN)")
        with cw.block():
            cw.line(f"{vt} *tile = ({vt} *)gc_alloc((size_t)(NV + 1) * sizeof({vt}));",
                    "const int ok = tile != NULL;")
            fail_unless(cw, "ok")
            cw.line("#pragma omp for schedule(static)")
            with cw.block(f"for (int64_t blk = 0; blk < (NR + {v - 1}) / {v}; blk++)"):
                cw.line("if (!ok) continue;", f"const int64_t g0 = blk * {v};")
                with cw.block(f"if (g0 + {v} <= NR)"):
                    self.tiled = False
                    body(v, "g0")
                with cw.orelse("else for (int64_t g1 = g0; g1 < NR; g1++)"):
                    body(1, "g1")
            cw.line("free(tile);")
        cw.line("if (fail) return 1;")

    def lanes(self, w: int, *names: str) -> None:
        """Declare per-row ACC arrays ``name[w]``, +0."""
        self.cw.line(*(f"_Alignas(64) {self.a} {n}[{w}] = {{0}};" for n in names))

    def columns(self, w: int, row: str, srcs: Sequence[Value], step: Step,
                accs: Sequence[str] = (), reads: Sequence[str] = ()) -> None:
        """Visit the block's elements column by column, in increasing column: ``step(values,
        lane, col)`` gets each source's element at column ``col``: for blocks of ``V`` columns
        a vector of the ``V`` rows (lane ``"v"``, unrolled over the ``V`` columns of a block;
        the arrays ``accs`` and ``reads`` are then vectors ``name_v``, ``accs`` copied back
        after the blocks), then a scalar per row ``c`` (lane ``"c"``)."""
        with self.cw.block():  # the vectors of one visit are its own
            cw, v, vt = self.cw, self.v, self.vt
            tail = "0"
            if w > 1:
                cw.line(*(f"{vt} {n}_v; memcpy(&{n}_v, {n}, sizeof {n}_v);"
                          for n in list(accs) + list(reads)))
                with cw.block(f"for (int64_t j0 = 0; j0 < NV; j0 += {v})"):
                    self._vectors(row, srcs, step)
                cw.line(*(f"memcpy({n}, &{n}_v, sizeof {n}_v);" for n in accs))
                tail = "NV"
                self.tiled = True
            with cw.block(f"for (int64_t j = {tail}; j < NJ; j++)"):
                with cw.block(f"for (int64_t c = 0; c < {w}; c++)"):
                    step([self.load(src, f"({row} + c) * NJ + j") for src in srcs], "c", "j")

    def _vectors(self, row: str, srcs: Sequence[Value], step: Step) -> None:
        """One block of ``V`` rows by ``V`` columns: transposed in registers (x's kept in the
        tile the first time, read from it later)."""
        cw, v, vt = self.cw, self.v, self.vt
        cols = []
        for q, src in enumerate(srcs):
            names = [f"r{q}_{i}" for i in range(v)]
            if src is self.x and self.tiled:  # columns kept by the first pass
                cw.line(*(f"const {vt} {name} = tile[j0 + {i}];"
                          for i, name in enumerate(names)))
                cols.append(names)
                continue
            for i, name in enumerate(names):
                cw.line(f"{vt} {name};", f"memcpy(&{name}, {self.k.param(src)} + "
                        f"({row} + {i}) * NJ + j0, sizeof {name});")
            cols.append(transpose(cw, vt, v, names, f"t{q}s"))
            if src is self.x:  # keep them for the later passes
                cw.line(*(f"tile[j0 + {i}] = {name};" for i, name in enumerate(cols[-1])))
        for col in range(v):
            with cw.block():
                step([c[col] for c in cols], "v", f"j0 + {col}")

    def ty(self, lane: str) -> str:
        """The C type of a value of the lane: the vector type or ACC."""
        return self.vt if lane == "v" else self.a


def at(name: str, lane: str) -> str:
    """An accumulator of the step: ``name_v`` (lane ``v``) or ``name[c]`` (row ``c``)."""
    return f"{name}_v" if lane == "v" else f"{name}[c]"


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
    # by role, not by identity: scale and bias may be one value (mvn(x, s, s))
    params = [(p, row_param(x, p, axes), op)
              for p, op in ((scale, "*"), (bias, "+")) if p is not None]

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
