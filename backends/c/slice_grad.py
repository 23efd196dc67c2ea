"""slice_grad (alone or anchoring a fused group): every output element written exactly once.

Rows of the innermost axis are visited in parallel; a row outside the window lattice is zero (a
``memset``, or the epilogue of 0), and a row inside it interleaves zeros and gradient values in
one pass. The prologue computes the gradient value of each copied element (one use each); the
epilogue is applied to every output element, zero or copied.
"""

from __future__ import annotations

from gradc.backends.c.kernel import Anchored, Kernel, anchored, ctx_gen, omp_for
from gradc.backends.c.ctypes_map import Dims, ctype, literal
from gradc.backends.c.writer import CWriter


def _axes(k: Kernel, an: Anchored) -> list[dict]:
    """Per (merged) axis: out dims, dy dims, lattice start ``lo``, count, |stride|, sign."""
    dims = k.dims
    a = an.anchor.attrs
    dy, res = an.operand(0), an.result
    axes = []
    for off, size, st, n, o in zip(a["input_window_offsets"], a["input_window_sizes"],
                                   a["input_window_strides"], dy.type.shape, res.type.shape):
        ast = abs(st)
        if st > 0:
            lo = str(off)
        else:  # the window's end, stepping back n-1 times: off + size - 1 - ast * (n - 1)
            lo = f"({off} + {dims.expr(size)} - 1 - {ast} * ({dims.expr(n)} - 1))"
        ident = off == 0 and st == 1 and dims.same(n, o)
        axes.append({"out": [o], "dy": [n], "lo": lo, "ast": ast, "neg": st < 0,
                     "ident": ident})
    merged: list[dict] = []
    for ax in axes:
        prev = merged[-1] if merged else None
        if prev is not None and ax["ident"] and prev["ast"] == 1 and not prev["neg"]:
            inner = dims.prod(ax["out"])
            prev["lo"] = f"({prev['lo']}) * {inner}"
            prev["out"] += ax["out"]
            prev["dy"] += ax["dy"]
            prev["ident"] = prev["ident"] and ax["ident"]
        else:
            merged.append(ax)
    return merged


class _Row:
    """Writes the statements of one output row (value and zero elements)."""

    def __init__(self, k: Kernel, an: Anchored) -> None:
        self.k = k
        self.an = an
        self.t = ctype(an.out.type.dtype)
        self.out = k.param(an.out)
        self.plain = an.operand(0) in an.loads and not an.has_epilogue

    def value(self, cw: CWriter, c: str, j: str) -> None:
        """Store the element at output ``ob + j`` whose gradient is dy element ``yb + c``."""
        an, k = self.an, self.k
        if self.plain:  # a bit copy
            cw.line(f"{self.out}[ob + {j}] = {k.param(an.operand(0))}[yb + {c}];")
            return
        pro = ctx_gen(k, an.operand(0).type.shape, f"(yb + {c})", an.loads, prefix="a")
        v = pro.get(an.operand(0))
        lines = pro.lines
        if an.has_epilogue:
            epi = ctx_gen(k, an.result.type.shape, f"(ob + {j})", an.loads,
                          {an.result: v}, prefix="e")
            v = epi.get(an.out)
            lines = lines + epi.lines
        with cw.block():
            cw.line(*lines, f"{self.out}[ob + {j}] = {v};")

    def zero(self, cw: CWriter, j: str) -> None:
        """Store the element at output ``ob + j`` that receives no gradient."""
        an = self.an
        zero = literal(0, an.result.type.dtype)
        if not an.has_epilogue:
            cw.line(f"{self.out}[ob + {j}] = {zero};")
            return
        epi = ctx_gen(self.k, an.result.type.shape, f"(ob + {j})", an.loads,
                      {an.result: zero}, prefix="e")
        v = epi.get(an.out)
        with cw.block():
            cw.line(*epi.lines, f"{self.out}[ob + {j}] = {v};")

    def zeros(self, cw: CWriter, a: str, b: str) -> None:
        """Zero elements ``ob + a`` .. ``ob + b - 1``."""
        if not self.an.has_epilogue:
            cw.line(f"if ({b} > {a}) memset({self.out} + ob + {a}, 0, "
                    f"(size_t)({b} - {a}) * {self.t.width // 8});")
            return
        with cw.block(f"for (int64_t j = {a}; j < {b}; j++)"):
            self.zero(cw, "j")


def emit_slice_grad(k: Kernel) -> None:
    """dX: zeros with dY stored at the window's lattice (a store each, no sum)."""
    an = anchored(k)
    dims = k.dims
    cw = k.code
    axes = _axes(k, an)
    row = _Row(k, an)
    if row.plain:
        k.as_bits(an.operand(0), an.out)
    m = len(axes)
    ost = [dims.prod([d for ax in axes[j + 1:] for d in ax["out"]]) for j in range(m)]
    yst = [dims.prod([d for ax in axes[j + 1:] for d in ax["dy"]]) for j in range(m)]
    if m > 1:
        cw.line(omp_for(dims.prod(an.result.type.shape), m - 1))
    heads = [f"for (int64_t o{j} = 0; o{j} < {dims.prod(ax['out'])}; o{j}++)"
             for j, ax in enumerate(axes[:-1])]
    ob = " + ".join(f"o{j} * {ost[j]}" for j in range(m - 1)) or "0"
    yb = " + ".join(f"c{j} * {yst[j]}" for j in range(m - 1)) or "0"
    inner = axes[-1]
    width = dims.prod(inner["out"])
    with cw.under(*heads), cw.block():
        cw.line("int ok = 1;")
        for j, ax in enumerate(axes[:-1]):
            cw.line(*_lattice(dims, ax, f"o{j}", f"c{j}"))
        cw.line(f"const int64_t ob = {ob};", f"const int64_t yb = ok ? {yb} : 0;", "(void)yb;")
        with cw.block("if (!ok)"):
            row.zeros(cw, "0", width)
        with cw.orelse():
            _inner(cw, dims, inner, row, width)


def _lattice(dims: Dims, ax: dict, p: str, c: str) -> list[str]:
    """Whether output coordinate ``p`` is on the lattice, and its dy coordinate ``c``."""
    if ax["ident"]:
        return [f"const int64_t {c} = {p};"]
    n = dims.prod(ax["dy"])
    ast = ax["ast"]
    q = f"({p} - {ax['lo']})"
    cond = f"{q} >= 0 && {q} <= {ast} * ({n} - 1)" + (f" && {q} % {ast} == 0" if ast > 1 else "")
    idx = f"{q} / {ast}" if ast > 1 else q
    val = f"({n} - 1 - {idx})" if ax["neg"] else idx
    return [f"ok = ok && ({cond});", f"const int64_t {c} = {val};"]


def _inner(cw: CWriter, dims: Dims, ax: dict, row: _Row, width: str) -> None:
    """The row along the innermost axis: zeros, the lattice's values and gaps, zeros."""
    n = dims.prod(ax["dy"])
    lo, ast = ax["lo"], ax["ast"]
    c = f"({n} - 1 - q)" if ax["neg"] else "q"
    row.zeros(cw, "0", lo)
    if ast == 1:
        with cw.block(f"for (int64_t q = 0; q < {n}; q++)"):
            row.value(cw, c, f"({lo} + q)")
    else:
        with cw.block(f"for (int64_t q = 0; q < {n} - 1; q++)"):
            row.value(cw, c, f"({lo} + {ast} * q)")
            if ast > 4:
                row.zeros(cw, f"({lo} + {ast} * q + 1)", f"({lo} + {ast} * q + {ast})")
            else:
                for z in range(1, ast):
                    row.zero(cw, f"({lo} + {ast} * q + {z})")
        with cw.block():
            cw.line(f"const int64_t q = {n} - 1;")
            row.value(cw, c, f"({lo} + {ast} * q)")
    row.zeros(cw, f"({lo} + {ast} * ({n} - 1) + 1)", width)
