"""Attention's forward pass as one C kernel: ``gemm`` -> masks -> ``softmax`` -> ``gemm``.

Attention is no operator (SPEC-transformers 27.3): a graph writes ``S = gemm(Q, K)``, then
element-wise ops (the scale, an additive mask or ``where(mask, -inf, S)``), ``P = softmax(S)``
over the last axis, optionally an element-wise guard (``where(is_nan(P), 0, P)``), then ``O =
gemm(P, V)``. ``attention_groups`` finds that chain in the C target's plan, where the scores and
the masked scores have no other reader, and makes it one fused ``attention`` node, so the
``T x T`` scores never reach memory: per (batch, head) the kernel packs ``op(K)`` and ``op(V)``
once, then for each block of 8 query rows computes the scores' rows with ``mm.h``'s tile (the
canonical sum over d from +0), applies the element-wise ops to each score (the same C
expressions as their own kernels), takes the softmax of each row with ``transcend.h``'s row
functions (the softmax kernel's own steps: ``reduce.py``), stores the probabilities where the
graph reads them (the backward pass does), and multiplies the rows by V with the same tile (the
canonical sum over the keys). Every value is the one its own kernel computes, bit for bit.
"""

from __future__ import annotations

from typing import Sequence

from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import make_fused
from gradc.ir.ops.registry import REGISTRY

from gradc.backends.plan import Plan
from gradc.backends.c.ctypes_map import ctype, strides
from gradc.backends.c.group_body import inline_body
from gradc.backends.c.kernel import Kernel, padded
from gradc.backends.c.mm import plain
from gradc.backends.c.scalar import SCALAR, ExprGen

ROWS_MAX = 8192  # keys per row at most (a job's row buffers hold 8 rows of them)


def _elementwise(n: Node) -> bool:
    """A kernel of one element-wise op, or a fused element-wise group."""
    if n.body is not None:
        return n.attrs.get("kind") == "elementwise"
    d = REGISTRY.get(n.op)
    return d is not None and "elementwise" in d.traits and n.op in SCALAR and len(n.outputs) == 1


def _static(plan: Plan, values: Sequence[Value]) -> bool:
    return all(plan.sizes.static(d) is not None for v in values for d in v.type.shape)


class _Finder:
    """The attention chains of a plan (module docstring)."""

    def __init__(self, graph: Graph, plan: Plan) -> None:
        self.plan = plan
        self.outs = {plan.resolve(v) for v in graph.outputs}
        self.pos = {n: i for i, n in enumerate(plan.nodes)}
        self.readers: dict[Value, list[Node]] = {}
        for n in plan.nodes:
            for u in n.inputs:
                self.readers.setdefault(plan.resolve(u), []).append(n)

    def only_reader(self, v: Value) -> Node | None:
        """The one kernel that reads ``v`` once (not an output), else None."""
        r = self.readers.get(v, [])
        return r[0] if len(r) == 1 and v not in self.outs else None

    def back(self, v: Value) -> tuple[Node, list[Node]] | None:
        """(G1, element-wise kernels in order) from the softmax's operand back to a gemm."""
        chain: list[Node] = []
        while True:
            p = v.producer
            if p is None or p not in self.pos:
                return None
            if p.op == "gemm" and p.body is None:
                return p, chain[::-1]
            if not _elementwise(p) or len(p.outputs) != 1 or len(chain) > 8:
                return None
            ins = {self.plan.resolve(u) for u in p.inputs}
            prev = [u for u in ins if u.type.shape == v.type.shape and u.producer in self.pos
                    and (u.producer.op == "gemm" or _elementwise(u.producer))]
            if len(prev) != 1 or self.only_reader(prev[0]) is not p:
                return None
            chain.append(p)
            v = prev[0]

    def find(self, x: Node) -> list[Node] | None:
        """The members of the chain around softmax ``x``, in plan order, or None."""
        plan = self.plan
        s_in = plan.resolve(x.inputs[0])
        rank = len(s_in.type.shape)
        if (x.body is not None or list(x.attrs["axes"]) != [rank - 1] or rank < 2
                or ctype(s_in.type.dtype).acc not in ("float", "double")
                or self.only_reader(s_in) is not x):
            return None
        found = self.back(s_in)
        if found is None:
            return None
        g1, e1 = found
        y1 = plan.resolve(g1.outputs[0])
        if not plain(g1) or y1.type.dtype != s_in.type.dtype:
            return None
        if e1 and self.only_reader(y1) is not e1[0] or not e1 and self.only_reader(y1) is not x:
            return None
        p = plan.resolve(x.outputs[0])
        e2: list[Node] = []
        g2 = self._second(p)
        if g2 is None:  # a guard between: an element-wise kernel whose result G2 reads
            for n in self.readers.get(p, []):
                if _elementwise(n) and len(n.outputs) == 1:
                    g2 = self._second(plan.resolve(n.outputs[0]))
                    if g2 is not None:
                        e2 = [n]
                        break
        if g2 is None:
            return None
        members = [g1, *e1, x, *e2, g2]
        values = [v for m in members for v in (*m.inputs, *m.outputs)]
        if not _static(plan, values) or (plan.sizes.static(s_in.type.shape[-1]) or 0) > ROWS_MAX:
            return None
        last = self.pos[g2]
        stored = [plan.resolve(v) for m in (x, *e2, g2) for v in m.outputs]
        if any(self.pos[r] < last for v in stored for r in self.readers.get(v, [])
               if r not in members):
            return None  # a result is read before the group's place (G2's)
        return members

    def _second(self, v: Value) -> Node | None:
        """The gemm that reads ``v`` as its untransposed first operand, as O = gemm(P, V)."""
        for n in self.readers.get(v, []):
            if (n.op == "gemm" and n.body is None and self.plan.resolve(n.inputs[0]) is v
                    and not n.attrs["trans_a"] and plain(n)
                    and self.plan.resolve(n.inputs[1]) is not v
                    and n.outputs[0].type.shape[:-1] == v.type.shape[:-1]):
                return n
        return None


def attention_groups(graph: Graph, plan: Plan) -> None:
    """Make each attention chain of the plan one ``attention`` kernel (module docstring)."""
    finder = _Finder(graph, plan)
    chosen: list[list[Node]] = []
    taken: set[Node] = set()
    for n in plan.nodes:
        if n.op == "softmax":
            members = finder.find(n)
            if members is not None and not taken.intersection(members):
                chosen.append(members)
                taken.update(members)
    if not chosen:
        return
    at: dict[Node, Node] = {}
    for i, members in enumerate(chosen):
        inside = set(members)
        keep = [v for m in members[members.index(next(x for x in members
                                                      if x.op == "softmax")):]
                for v in map(plan.resolve, m.outputs)
                if v in finder.outs or any(r not in inside for r in finder.readers.get(v, []))]
        body, ext = inline_body(plan, members, f"attention_{i}", keep)
        node = make_fused(None, ext, body, "attention")
        for old, new in zip(keep, node.outputs):
            plan.alias[old] = new
        at[members[-1]] = node
    plan.nodes[:] = [at.get(n, n) for n in plan.nodes if n not in taken or n in at]


# -- the kernel ----------------------------------------------------------------------------

def _parts(body: Graph) -> tuple[Node, list[Node], Node, list[Node], Node]:
    """(G1, the ops between G1 and the softmax, the softmax, the ops after it, G2)."""
    nodes = [n for n in body.nodes if n.op != "constant"]
    g1, g2 = nodes[0], nodes[-1]
    x = next(n for n in nodes if n.op == "softmax")
    i = nodes.index(x)
    return g1, nodes[1:i], x, nodes[i + 1:-1], g2


def emit_attention(k: Kernel) -> None:
    """The ``attention`` group's kernel (module docstring)."""
    body = k.node.body
    assert body is not None
    g1, e1, x, e2, g2 = _parts(body)
    d, cw = k.dims, k.code
    s = g1.outputs[0]
    t = ctype(s.type.dtype)
    sfx = "f32" if t.acc == "float" else "f64"
    shape = [int(d.static(v) or 0) for v in s.type.shape]  # static: attention_groups checks
    batch, rows, keys = shape[:-2], shape[-2], shape[-1]
    kv, o = g1.inputs[1], g2.outputs[0]
    depth = int(d.static(kv.type.shape[-1] if g1.attrs["trans_b"] else kv.type.shape[-2]) or 0)
    dv = int(d.static(o.type.shape[-1]) or 0)
    p_val = x.outputs[0]
    a2 = g2.inputs[0]  # P or the guard's result
    lanes = 16 if t.acc == "float" else 8
    nr = 2 * lanes
    lp = -(-keys // nr) * nr
    dvp = -(-dv // nr) * nr
    nb = 1
    for b in batch:
        nb *= b
    cw.line(f"enum {{ NR = {nr}, LP = {lp}, L = {keys}, T = {rows}, D = {depth}, DV = {dv}, "
            f"DVP = {dvp} }};")
    cw.line("int fail = 0;")
    cw.line(f"#pragma omp parallel num_threads(nt) if({nb} > 1)")
    with cw.block():
        el = t.store
        bufs = [("kp", "D * LP"), ("vp", "L * DVP"), ("sb", "8 * LP"), ("mb", "8 * L"),
                ("pb", "8 * L"), ("eb", "8 * L")]
        for name, size in bufs:
            cw.line(f"{el} *{name} = ({el} *)gc_alloc((size_t)({size}) * sizeof({el}));")
        ok = " && ".join(name for name, _ in bufs)
        with cw.block(f"if (!({ok}))"):
            cw.line("#pragma omp atomic write", "fail = 1;")
        cw.line(f"_Alignas(64) {el} tile[8 * NR];", f"{t.acc} total[8];")
        cw.line("#pragma omp for schedule(dynamic, 1)")
        with cw.block(f"for (int64_t bh = 0; bh < {nb}; bh++)"):
            cw.line(f"if (!({ok})) continue;")
            base = _batch_offsets(k, body, list(batch))
            _pack(k, g1, g2, base, sfx)
            with cw.block("for (int64_t i0 = 0; i0 < T; i0 += 8)"):
                cw.line("const int64_t h = T - i0 < 8 ? T - i0 : 8;")
                qa, qs = _operand_a(k, g1, base)
                with cw.block("for (int64_t p = 0; p < LP / NR; p++)"):
                    cw.line(f"gc_mm_tile_{sfx}(D, {qa}, {qs}, h, kp + p * D * NR, sb + p * NR, "
                            "LP, 1, 0);")
                _elementwise_rows(k, body, e1, {s: ("sb", "r * LP + j")}, x.inputs[0], "mb",
                                  base, list(batch))
                _softmax_rows(k, sfx, t.acc)
                loads = {p_val: ("pb", "r * L + j")}
                if e2:
                    _elementwise_rows(k, body, e2, loads, a2, "eb", base, list(batch))
                _store_rows(k, body, p_val, "pb", base)
                src = "eb" if e2 else "pb"
                _product_rows(k, o, src, sfx, base)
        for name, _ in bufs:
            cw.line(f"free({name});")
    cw.line("if (fail) return 1;")


def _coords(batch: list[int]) -> list[str]:
    """C expressions of the batch coordinates of job ``bh``."""
    out: list[str] = []
    div = 1
    for i in range(len(batch) - 1, -1, -1):
        out.insert(0, f"(bh / {div} % {batch[i]})")
        div *= batch[i]
    return out


def _offset_of(k: Kernel, v: Value, batch: list[int]) -> str:
    """C expression: the element offset of batch ``bh`` in ``v`` (0 where it broadcasts)."""
    r = len(batch) + 2
    vs = padded(v.type.shape, r)
    st = strides(k.dims, vs)
    terms = [f"{c} * {st[a]}" for a, c in enumerate(_coords(batch)) if k.dims.static(vs[a]) != 1]
    return " + ".join(terms) or "0"


def _batch_offsets(k: Kernel, body: Graph, batch: list[int]) -> dict[Value, str]:
    """Per body input and output: a C variable holding its offset for job ``bh``."""
    out: dict[Value, str] = {}
    for i, v in enumerate([*body.inputs, *body.outputs]):
        name = f"ob{i}"
        k.code.line(f"const int64_t {name} = {_offset_of(k, v, batch)};")
        out[v] = name
    return out


def _pack(k: Kernel, g1: Node, g2: Node, base: dict[Value, str], sfx: str) -> None:
    """op(K) of the scores' product into panels of keys, op(V) into panels of its columns."""
    kv, vv = g1.inputs[1], g2.inputs[1]
    tb1, tb2 = g1.attrs["trans_b"], g2.attrs["trans_b"]
    sbk1, sbn1 = ("1", "D") if tb1 else ("L", "1")
    sbk2, sbn2 = ("1", "L") if tb2 else ("DV", "1")
    cw = k.code
    with cw.block("for (int64_t p = 0; p < LP / NR; p++)"):
        cw.line(f"gc_mm_packb_{sfx}(kp + p * D * NR, {k.param(kv)} + {base[kv]} + p * NR * {sbn1}, "
                f"D, {sbk1}, {sbn1}, L - p * NR < NR ? L - p * NR : NR);")
    with cw.block("for (int64_t p = 0; p < DVP / NR; p++)"):
        cw.line(f"gc_mm_packb_{sfx}(vp + p * L * NR, {k.param(vv)} + {base[vv]} + p * NR * {sbn2}, "
                f"L, {sbk2}, {sbn2}, DV - p * NR < NR ? DV - p * NR : NR);")


def _operand_a(k: Kernel, g1: Node, base: dict[Value, str]) -> tuple[str, str]:
    """(pointer to row i0 of op(Q), "row stride, step stride") for mm.h's tile."""
    q = g1.inputs[0]
    ptr = f"{k.param(q)} + {base[q]}"
    if g1.attrs["trans_a"]:  # Q stored D x T
        return f"{ptr} + i0", "1, T"
    return f"{ptr} + i0 * D", "D, 1"


def _elementwise_rows(k: Kernel, body: Graph, nodes: list[Node], loads: dict[Value, tuple[str,
                      str]], result: Value, dst: str, base: dict[Value, str],
                      batch: list[int]) -> None:
    """For each of the block's h rows and L keys: the element-wise ops (their own kernels' C
    expressions) from the values in ``loads`` to ``result``, into row buffer ``dst``; body
    outputs among them are stored too."""
    cw = k.code
    r = len(batch) + 2
    gen_loads = {v: (p, (lambda off: lambda _v: off)(off)) for v, (p, off) in loads.items()}
    for v in body.inputs:
        vs = padded(v.type.shape, r)
        st = strides(k.dims, vs)
        terms = [base[v]] + [f"{ix} * {st[a]}" for a, ix in ((r - 2, "(i0 + r)"), (r - 1, "j"))
                             if k.dims.static(vs[a]) != 1]
        gen_loads[v] = (k.ptr[v], (lambda off: lambda _v: off)(" + ".join(terms)))
    gen = ExprGen(gen_loads, read=k.read)  # type: ignore[arg-type]
    produced = {o for n in nodes for o in n.outputs}
    stores = [f"{k.param(o)}[{base[o]} + (i0 + r) * L + j] = {gen.get(o)};"
              for o in body.outputs if o in produced]
    value = gen.get(result)
    with cw.block("for (int64_t r = 0; r < h; r++)"), cw.block("for (int64_t j = 0; j < L; j++)"):
        cw.line(*gen.lines, f"{dst}[r * L + j] = {value};", *stores)


def _softmax_rows(k: Kernel, sfx: str, acc: str) -> None:
    """The softmax kernel's steps (reduce.py's rows) on the block's rows of ``mb`` into ``pb``."""
    cw = k.code
    with cw.block("for (int64_t r = 0; r < h; r++)"):
        cw.line(f"{acc} mx = gc_rowmax_{sfx}(mb + r * L, L);",
                f"if (!(mx != 0 && mx > -({acc})INFINITY)) mx = gc_rowfirst_{sfx}(mb + r * L, L);",
                f"gc_rowexp_{sfx}(mb + r * L, pb + r * L, L, mx);")
    cw.line(f"gc_rowsums_{sfx}(pb, L, h, total);")
    with cw.block("for (int64_t r = 0; r < h; r++)"):
        cw.line(f"const {acc} tr = total[r];",
                "for (int64_t j = 0; j < L; j++) pb[r * L + j] = pb[r * L + j] / tr;")


def _store_rows(k: Kernel, body: Graph, p: Value, src: str, base: dict[Value, str]) -> None:
    """Copy the block's rows of the probabilities out, where the graph reads them."""
    if p in body.outputs:
        k.code.line(f"memcpy({k.param(p)} + {base[p]} + i0 * L, {src}, "
                    f"(size_t)(h * L) * sizeof *{src});")


def _product_rows(k: Kernel, o: Value, src: str, sfx: str, base: dict[Value, str]) -> None:
    """O's rows i0..i0+h: the block's rows of ``src`` times the packed V (canonical sums)."""
    cw = k.code
    out = f"{k.param(o)} + {base[o]} + i0 * DV"
    with cw.block("for (int64_t p = 0; p < DVP / NR; p++)"):
        cw.line("const int64_t w = DV - p * NR < NR ? DV - p * NR : NR;")
        with cw.block("if (h == 8 && w == NR)"):
            cw.line(f"gc_mm_tile_{sfx}(L, {src}, L, 1, 8, vp + p * L * NR, {out} + p * NR, DV, "
                    "1, 0);")
        with cw.orelse():
            cw.line(f"gc_mm_tile_{sfx}(L, {src}, L, 1, h, vp + p * L * NR, tile, NR, 1, 0);",
                    "for (int64_t r = 0; r < h; r++)",
                    f"  for (int64_t j = 0; j < w; j++) ({out})[r * DV + p * NR + j] = "
                    "tile[r * NR + j];")
