"""slice_grad (alone or anchoring a fused group): every output element written exactly once.

Rows of the innermost axis are visited in parallel; a row outside the window lattice is zero (a
``memset``, or the epilogue of 0), and a row inside it interleaves zeros and gradient values in
one pass. The prologue computes the gradient value of each copied element (one use each); the
epilogue is applied to every output element, zero or copied.
"""

from __future__ import annotations

from gradc.backends.c.kernel import Anchored, Kernel, anchored, ctx_gen, omp_for
from gradc.backends.c.ctypes_map import Dims, ctype, literal


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
        self.out = an.out_ptr
        self.plain = an.operand(0) in an.loads and not an.has_epilogue

    def value(self, c: str, j: str) -> list[str]:
        """Store the element at output ``ob + j`` whose gradient is dy element ``yb + c``."""
        an, dims = self.an, self.k.dims
        if self.plain:  # a bit copy
            return [f"{self.out}[ob + {j}] = {an.loads[an.operand(0)]}[yb + {c}];"]
        pro = ctx_gen(dims, an.operand(0).type.shape, f"(yb + {c})", an.loads, prefix="a")
        v = pro.get(an.operand(0))
        lines = pro.lines
        if an.has_epilogue:
            epi = ctx_gen(dims, an.result.type.shape, f"(ob + {j})", an.loads,
                          {an.result: v}, prefix="e")
            v = epi.get(an.out)
            lines = lines + epi.lines
        return ["{", *("  " + ln for ln in lines), f"  {self.out}[ob + {j}] = {v};", "}"]

    def zero(self, j: str) -> list[str]:
        """Store the element at output ``ob + j`` that receives no gradient."""
        an = self.an
        zero = literal(0, an.result.type.dtype)
        if not an.has_epilogue:
            return [f"{self.out}[ob + {j}] = {zero};"]
        epi = ctx_gen(self.k.dims, an.result.type.shape, f"(ob + {j})", an.loads,
                      {an.result: zero}, prefix="e")
        v = epi.get(an.out)
        return ["{", *("  " + ln for ln in epi.lines), f"  {self.out}[ob + {j}] = {v};", "}"]

    def zeros(self, a: str, b: str) -> list[str]:
        """Zero elements ``ob + a`` .. ``ob + b - 1``."""
        if not self.an.has_epilogue:
            return [f"if ({b} > {a}) memset({self.out} + ob + {a}, 0, "
                    f"(size_t)({b} - {a}) * {self.t.width // 8});"]
        return [f"for (int64_t j = {a}; j < {b}; j++) {{", *("  " + ln for ln in self.zero("j")),
                "}"]


def emit_slice_grad(k: Kernel) -> None:
    """dX: zeros with dY stored at the window's lattice (a store each, no sum)."""
    an = anchored(k)
    dims = k.dims
    axes = _axes(k, an)
    row = _Row(k, an)
    if row.plain:
        k.as_bits(an.operand(0), an.out)
    m = len(axes)
    ost = [dims.prod([d for ax in axes[j + 1:] for d in ax["out"]]) for j in range(m)]
    yst = [dims.prod([d for ax in axes[j + 1:] for d in ax["dy"]]) for j in range(m)]
    if m > 1:
        k.emit(omp_for(dims.prod(an.result.type.shape), m - 1))
    for j, ax in enumerate(axes[:-1]):
        k.emit("  " * j + f"for (int64_t o{j} = 0; o{j} < {dims.prod(ax['out'])}; o{j}++)")
    body = ["int ok = 1;"]
    for j, ax in enumerate(axes[:-1]):
        body += _lattice(dims, ax, f"o{j}", f"c{j}")
    ob = " + ".join(f"o{j} * {ost[j]}" for j in range(m - 1)) or "0"
    yb = " + ".join(f"c{j} * {yst[j]}" for j in range(m - 1)) or "0"
    body += [f"const int64_t ob = {ob};", f"const int64_t yb = ok ? {yb} : 0;", "(void)yb;"]
    inner = axes[-1]
    width = dims.prod(inner["out"])
    body += ["if (!ok) {", *("  " + ln for ln in row.zeros("0", width)), "} else {"]
    body += ["  " + ln for ln in _inner(dims, inner, row, width)]
    body += ["}"]
    ind = "  " * max(0, m - 1)
    k.emit(ind + "{", *(ind + "  " + ln for ln in body), ind + "}")


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


def _inner(dims: Dims, ax: dict, row: _Row, width: str) -> list[str]:
    n = dims.prod(ax["dy"])
    lo, ast = ax["lo"], ax["ast"]
    c = f"({n} - 1 - q)" if ax["neg"] else "q"
    out = list(row.zeros("0", lo))
    if ast == 1:
        out += [f"for (int64_t q = 0; q < {n}; q++) {{",
                *("  " + ln for ln in row.value(c, f"({lo} + q)")), "}"]
    else:
        gaps = []
        for z in range(1, ast):
            gaps += row.zero(f"({lo} + {ast} * q + {z})") if ast <= 4 else []
        if ast > 4:
            gaps = row.zeros(f"({lo} + {ast} * q + 1)", f"({lo} + {ast} * q + {ast})")
        out += [f"for (int64_t q = 0; q < {n} - 1; q++) {{",
                *("  " + ln for ln in row.value(c, f"({lo} + {ast} * q)")),
                *("  " + ln for ln in gaps), "}",
                "{", f"  const int64_t q = {n} - 1;",
                *("  " + ln for ln in row.value(c, f"({lo} + {ast} * q)")), "}"]
    out += row.zeros(f"({lo} + {ast} * ({n} - 1) + 1)", width)
    return out
