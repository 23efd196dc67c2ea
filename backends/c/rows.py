"""Runs of row kernels as one C kernel: a loss over a large class axis, row by row.

A *row* value has shape ``(*lead, L)``; a *per-row* value ``lead`` or ``(*lead, 1)``. A row
kernel reads and makes such values and works on each row alone: element-wise ops (fused or not),
``reduce_sum`` over the last axis, ``softmax`` and ``log_softmax`` over it, ``one_hot`` along it,
a ``reshape`` between per-row forms. Cross-entropy over a vocabulary is a dozen of them (its
forward: log_softmax, the labels' one-hot, the picked log-probabilities and their sums; its
gradient: the one-hot gradient, its sums, softmax times them), each a pass over ``R x L`` values
in memory: the GPT's ``1024 x 4096`` logits, 16 MiB a pass. ``row_groups`` makes every run of
consecutive row kernels in the C target's plan one ``rows`` kernel, where at least two of them
read or make rows and one is a sum, a softmax or a one-hot (element-wise runs fuse already) and
none makes a graph output (those may be written in place). Per row, each member's values stay
in row buffers (L1) or scalars, computed in the members' order with their own C expressions
(the element-wise ops' ``ExprGen``, ``reduce_sum``'s sum from -0.0 in index order, the softmax
kernel's row functions), and only the values that the rest of the plan reads go to memory.
Every value is its own kernel's, bit for bit.
"""

from __future__ import annotations

from typing import Sequence

from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import make_fused

from gradc.backends.plan import Plan
from gradc.backends.c.attention import _elementwise
from gradc.backends.c.ctypes_map import ctype
from gradc.backends.c.group_body import inline_body
from gradc.backends.c.kernel import Kernel
from gradc.backends.c.scalar import ExprGen
from gradc.backends.c.writer import CWriter

ROW_MAX = 16384  # elements of a row at most (each row buffer lives on a thread's stack)
SOFTMAX = ("softmax", "log_softmax")
ROW_OPS = ("reduce_sum", "one_hot", *SOFTMAX)  # a run holds one at least


def _shape(plan: Plan, v: Value) -> tuple[int, ...] | None:
    s = [plan.sizes.static(d) for d in v.type.shape]
    return None if any(d is None for d in s) else tuple(int(d) for d in s)  # type: ignore[arg-type]


def form(shape: Sequence[int], lead: Sequence[int], length: int) -> str | None:
    """How a value of ``shape`` meets rows of ``length`` led by ``lead``: "row", "per-row",
    "global" (one value), "column" (one value per position along the row) or None."""
    s, lead = tuple(shape), tuple(lead)
    if s == (*lead, length):
        return "row"
    if s in (lead, (*lead, 1)):
        return "per-row"
    if all(d == 1 for d in s):
        return "global"
    if s and s[-1] == length and all(d == 1 for d in s[:-1]) and len(s) <= len(lead) + 1:
        return "column"
    return None


def _row_kernel(plan: Plan, n: Node, lead: tuple[int, ...], length: int) -> bool:
    """True when ``n`` works on rows of ``length`` led by ``lead`` (module docstring)."""
    last = len(lead)
    outs = [_shape(plan, v) for v in n.outputs]
    operands = n.inputs[:1] if n.op == "one_hot" else n.inputs  # (one_hot's values: 2 words)
    ins = [_shape(plan, plan.resolve(v)) for v in operands]
    if any(s is None for s in outs + ins):
        return False
    f_out = {form(s, lead, length) for s in outs}  # type: ignore[arg-type]
    f_in = [form(s, lead, length) for s in ins]  # type: ignore[arg-type]
    if None in f_in or len(f_out) != 1:
        return False
    out = f_out.pop()
    if _elementwise(n):
        return out in ("row", "per-row") and (out == "row" or "row" not in f_in)
    t = ctype(n.outputs[0].type.dtype)
    if n.op == "reduce_sum":
        return (list(n.attrs["axes"]) == [last] and f_in[0] == "row" and out == "per-row"
                and t.is_float and not t.is_f16)
    if n.op in SOFTMAX:
        return (list(n.attrs["axes"]) == [last] and f_in[0] == "row" and out == "row"
                and t.acc in ("float", "double") and not t.is_f16)
    if n.op == "one_hot":
        return n.attrs["axis"] == last and f_in[0] == "per-row" and out == "row"
    return n.op == "reshape" and out == f_in[0] == "per-row"


def _rows_of(plan: Plan, n: Node) -> tuple[tuple[int, ...], int] | None:
    """(lead, L) of a kernel that makes a row value from another row or per-row value."""
    if n.op not in (*SOFTMAX, "one_hot") and not _elementwise(n):
        return None
    s = _shape(plan, n.outputs[0])
    if s is None or len(s) < 2 or s[-1] < 2 or s[-1] > ROW_MAX:
        return None
    return s[:-1], s[-1]


def _runs(plan: Plan) -> list[list[Node]]:
    """Maximal runs of consecutive row kernels, each started by a kernel that makes rows."""
    runs: list[list[Node]] = []
    run: list[Node] = []
    shape: tuple[tuple[int, ...], int] | None = None
    for n in plan.nodes:
        if run and shape is not None and n.op != "constant" and _row_kernel(plan, n, *shape):
            run.append(n)
            continue
        if n.op == "constant" and run:
            continue  # constants are no kernels: the run goes on past them
        if len(run) > 1:
            runs.append(run)
        run, shape = [], _rows_of(plan, n)
        if shape is not None and _row_kernel(plan, n, *shape):
            run = [n]
    if len(run) > 1:
        runs.append(run)
    return runs


def row_groups(graph: Graph, plan: Plan) -> None:
    """Make each run of row kernels one ``rows`` kernel (module docstring)."""
    outs = {plan.resolve(v) for v in graph.outputs}
    readers: dict[Value, set[Node]] = {}
    for n in plan.nodes:
        for u in n.inputs:
            readers.setdefault(plan.resolve(u), set()).add(n)
    at: dict[Node, Node] = {}
    taken: set[Node] = set()
    for i, run in enumerate(_runs(plan)):
        lead, length = _rows_of(plan, run[0]) or ((), 0)
        rowish = sum(1 for n in run if any(
            form(_shape(plan, v) or (), lead, length) == "row"
            for v in (*map(plan.resolve, n.inputs), *n.outputs)))
        if (rowish < 2 or not any(n.op in ROW_OPS for n in run)
                or any(plan.resolve(v) in outs for n in run for v in n.outputs)):
            continue  # element-wise runs fuse already; outputs may be updated in place
        inside = set(run)
        keep = [v for n in run for v in map(plan.resolve, n.outputs)
                if v in outs or any(r not in inside for r in readers.get(v, ()))]
        body, ext = inline_body(plan, run, f"rows_{i}", keep)
        node = make_fused(None, ext, body, "rows")
        for old, new in zip(keep, node.outputs):
            plan.alias[old] = new
        at[run[-1]] = node
        taken.update(run)
    plan.nodes[:] = [at.get(n, n) for n in plan.nodes if n not in taken or n in at]


# -- the kernel ----------------------------------------------------------------------------

BLOCK = 8  # rows a thread takes at a time: GC_ROWS, so that their sums advance together


class _Row:
    """Where each value of a block of rows lives while the kernel runs (module docstring)."""

    def __init__(self, k: Kernel, lead: tuple[int, ...], length: int) -> None:
        self.k, self.lead, self.length = k, lead, length
        self.buf: dict[Value, str] = {}  # row values in row buffers (BLOCK rows of L)
        self.scalar: dict[Value, str] = {}  # per-row values in C arrays of BLOCK
        self.decls: list[tuple[str, str]] = []  # (element type, name) of the row buffers
        self.code = CWriter()  # the loop body over one block of rows
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def buffer(self, v: Value) -> str:
        """A new row buffer for ``v``."""
        b = self.name("rb")
        self.decls.append((ctype(v.type.dtype).store, b))
        self.buf[v] = b
        return b

    def offset(self, v: Value) -> str:
        """The element offset of ``v`` in memory at position ``j`` of row ``r0 + r``."""
        f = form([self.k.dims.static(d) or 0 for d in v.type.shape], self.lead, self.length)
        return {"row": f"(r0 + r) * {self.length} + j", "per-row": "r0 + r", "global": "0",
                "column": "j"}[f or "global"]

    def gen(self, body: Graph) -> ExprGen:
        """An ExprGen reading buffers, scalars and body inputs at the current (r, j)."""
        loads: dict[Value, tuple[str, object]] = {}
        for v, b in self.buf.items():
            loads[v] = (b, lambda _v: f"r * {self.length} + j")
        for v in body.inputs:
            if v not in self.buf and v not in self.scalar:
                loads[v] = (self.k.ptr[v], self.offset)
        fixed = {v: f"{s}[r]" for v, s in self.scalar.items()}
        return ExprGen(loads, fixed, self.name("e") + "_", self.k.read)  # type: ignore[arg-type]


def emit_rows(k: Kernel) -> None:
    """The ``rows`` group's kernel (module docstring)."""
    body = k.node.body
    assert body is not None
    row = max((v for n in body.nodes for v in n.outputs),
              key=lambda v: k.dims.prod_static(v.type.shape) or 0)  # a row value: the largest
    lead = tuple(int(k.dims.static(d) or 0) for d in row.type.shape[:-1])
    length = int(k.dims.static(row.type.shape[-1]) or 0)
    nrows = 1
    for d in lead:
        nrows *= d
    st = _Row(k, lead, length)
    later = _readers_after(body)
    segment: list[Node] = []
    for n in body.nodes:
        if n.op == "constant":
            continue
        if n.op not in ("reduce_sum", "one_hot", "reshape", *SOFTMAX) and _is_row_value(
                st, n.outputs[0]):
            segment.append(n)
            continue
        _flush(st, body, segment, later)
        segment = []
        _special(st, body, n)
    _flush(st, body, segment, later)
    cw = k.code
    cw.line("int fail = 0;")
    cw.line(f"#pragma omp parallel num_threads(nt) if((int64_t){nrows} * {length} > GC_PAR_MIN)")
    with cw.block():
        for t, b in st.decls:
            cw.line(f"{t} *{b} = ({t} *)gc_alloc((size_t){BLOCK * length} * sizeof({t}));")
        ok = " && ".join(b for _, b in st.decls) or "1"
        with cw.block(f"if (!({ok}))"):
            cw.line("#pragma omp atomic write", "fail = 1;")
        cw.line("#pragma omp for schedule(static)")
        with cw.block(f"for (int64_t r0 = 0; r0 < {nrows}; r0 += {BLOCK})"):
            cw.line(f"if (!({ok})) continue;",
                    f"const int64_t nr = {nrows} - r0 < {BLOCK} ? {nrows} - r0 : {BLOCK};")
            cw.nest(st.code)
        cw.line(*(f"free({b});" for _, b in st.decls))
    cw.line("if (fail) return 1;")


def _is_row_value(st: _Row, v: Value) -> bool:
    return form([st.k.dims.static(d) or 0 for d in v.type.shape], st.lead, st.length) == "row"


def _readers_after(body: Graph) -> dict[Value, int]:
    """The position of the last body node reading each value."""
    last: dict[Value, int] = {}
    for i, n in enumerate(body.nodes):
        for u in n.inputs:
            last[u] = i
    return last


def _flush(st: _Row, body: Graph, segment: list[Node], later: dict[Value, int]) -> None:
    """One loop over the block's rows for a run of element-wise nodes that make row values: the
    values read after the run go to row buffers, the body's outputs to memory."""
    if not segment:
        return
    k, cw = st.k, st.code
    last_pos = max(i for i, n in enumerate(body.nodes) if n in segment)
    outs = set(body.outputs)
    gen = st.gen(body)
    lines = []
    new_bufs: dict[Value, str] = {}
    for v in (v for n in segment for v in n.outputs):
        read_later, stored = later.get(v, -1) > last_pos, v in outs
        if not (read_later or stored):
            continue
        expr = gen.get(v)
        if read_later:
            b = st.name("rb")
            st.decls.append((ctype(v.type.dtype).store, b))
            new_bufs[v] = b
            lines.append(f"{b}[r * {st.length} + j] = {expr};")
        if stored:
            lines.append(f"{k.param(v)}[{st.offset(v)}] = {expr};")
    with cw.block("for (int64_t r = 0; r < nr; r++)"):
        with cw.block(f"for (int64_t j = 0; j < {st.length}; j++)"):
            cw.line(*gen.lines, *lines)
    st.buf.update(new_bufs)


def _rows_of_value(st: _Row, v: Value) -> str:
    """A pointer to the block's first row of a row value (its buffer, or memory)."""
    if v in st.buf:
        return st.buf[v]
    return f"({st.k.param(v)} + r0 * {st.length})"


def _special(st: _Row, body: Graph, n: Node) -> None:
    """One node that is not a row-making element-wise op: a per-row element-wise op, a sum, a
    (log-)softmax, a one-hot, a reshape (an alias)."""
    k, cw, length = st.k, st.code, st.length
    out = n.outputs[0]
    t = ctype(out.type.dtype)
    sfx = "f32" if t.acc == "float" else "f64"
    if n.op == "reshape" and n.inputs[0] in st.scalar:
        st.scalar[out] = st.scalar[n.inputs[0]]
    elif n.op == "reduce_sum":  # the sum kernel's order: from -0.0, in index order
        s = st.name("s")
        cw.line(f"{t.store} {s}[{BLOCK}];",
                f"gc_rowsums_{sfx}({_rows_of_value(st, n.inputs[0])}, {length}, nr, {s});")
        st.scalar[out] = s
    elif n.op in SOFTMAX:
        _softmax(st, n)
    elif n.op == "one_hot":
        _one_hot(st, body, n)
    else:  # a per-row element-wise op (or a reshape of a per-row input)
        gen = st.gen(body)
        s = st.name("s")
        expr = gen.get(n.inputs[0] if n.op == "reshape" else out)
        cw.line(f"{t.store} {s}[{BLOCK}];")
        with cw.block("for (int64_t r = 0; r < nr; r++)"):
            cw.line(*gen.lines, f"{s}[r] = {expr};")
        st.scalar[out] = s
    if out in body.outputs:
        if out in st.scalar:
            cw.line(f"for (int64_t r = 0; r < nr; r++) {k.param(out)}[r0 + r] = "
                    f"{st.scalar[out]}[r];")
        else:
            b = st.buf[out]
            cw.line(f"memcpy({k.param(out)} + r0 * {length}, {b}, "
                    f"(size_t)(nr * {length}) * sizeof *{b});")


def _softmax(st: _Row, n: Node) -> None:
    """reduce.py's row steps on the block: maximum and exps per row, the rows' sums together,
    then the division (or the shift by the sum's log)."""
    cw, length = st.code, st.length
    out = n.outputs[0]
    a = ctype(out.type.dtype).acc
    sfx = "f32" if a == "float" else "f64"
    xr = _rows_of_value(st, n.inputs[0])
    b = st.buffer(out)
    cw.line(f"{a} mx{b}[{BLOCK}], total{b}[{BLOCK}];")
    with cw.block("for (int64_t r = 0; r < nr; r++)"):
        cw.line(f"const {a} *restrict xr = {xr} + r * {length};",
                f"mx{b}[r] = gc_rowmax_{sfx}(xr, {length});",
                f"if (!(mx{b}[r] != 0 && mx{b}[r] > -({a})INFINITY))",
                f"  mx{b}[r] = gc_rowfirst_{sfx}(xr, {length});",
                f"gc_rowexp_{sfx}(xr, {b} + r * {length}, {length}, mx{b}[r]);")
    cw.line(f"gc_rowsums_{sfx}({b}, {length}, nr, total{b});")
    with cw.block("for (int64_t r = 0; r < nr; r++)"):
        cw.line(f"{a} *restrict yr = {b} + r * {length};")
        if n.op == "log_softmax":
            cw.line(f"const {a} *restrict xr = {xr} + r * {length};",
                    f"const {a} lt = ({a})gc_log((double)total{b}[r]);",
                    f"for (int64_t j = 0; j < {length}; j++) "
                    f"yr[j] = ({a})(({a})(xr[j] - mx{b}[r]) - lt);")
        else:
            cw.line(f"const {a} tr = total{b}[r];",
                    f"for (int64_t j = 0; j < {length}; j++) yr[j] = yr[j] / tr;")


def _one_hot(st: _Row, body: Graph, n: Node) -> None:
    """movement.py's one_hot on the block's rows: ``values[1]`` where the position is the
    row's index (negative indices count from the end), else ``values[0]``."""
    k, cw, length = st.k, st.code, st.length
    ind, vals, out = n.inputs[0], n.inputs[1], n.outputs[0]
    bits = ctype(out.type.dtype).bits
    k.as_bits(vals)
    gen = st.gen(body)
    index = gen.get(ind)
    b = st.buffer(out)
    with cw.block("for (int64_t r = 0; r < nr; r++)"):
        cw.line(*gen.lines, f"const {bits} off = {k.param(vals)}[0], on = {k.param(vals)}[1];",
                f"{bits} *restrict y = ({bits} *){b} + r * {length};")
        if ctype(ind.type.dtype).signed:
            cw.line(f"int64_t v = (int64_t){index};", f"if (v < 0) v += {length};",
                    f"for (int64_t j = 0; j < {length}; j++) y[j] = v == j ? on : off;")
        else:
            cw.line(f"const uint64_t v = (uint64_t){index};",
                    f"for (int64_t j = 0; j < {length}; j++) y[j] = v == (uint64_t)j ? on : off;")
