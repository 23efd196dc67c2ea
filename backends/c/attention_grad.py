"""Attention's backward pass as one C kernel: the gradients of Q, K and V from dO.

Differentiating attention (attention.py's chain) gives, per (batch, head), with P the saved
probabilities and dS the scores' gradient:

    dP = gemm(dO, V^T)         M = P * dP (element-wise)        R = reduce_sum(M, last axis)
    dS = element-wise(dP, R, P, the mask, the scale)  (softmax's VJP, the guard and the scale)
    dQ = gemm(dS, K)           dK = gemm(dS^T, Q)               dV = gemm(P^T, dO)

``attention_grad_groups`` finds that pattern in the C target's plan (dP, M, R and dS read by
nothing else; dV's product joins when its operands are P and dO) and makes it one
``attention_grad`` kernel: per (batch, head) it packs op(V), op(K), op(Q) and op(dO) once, then
for each block of 8 query rows computes dP's rows with mm.h's tile, M and dS with the
element-wise ops' own C expressions, R with the sum kernel's order (``gc_rowsums``, from -0.0),
and dQ's rows; dS stays in a buffer of ``T x L`` (L2), from which dK is one product whose k runs
over the query rows, and dV likewise from P. Every sum is its own kernel's canonical sum: bit
for bit.
"""

from __future__ import annotations

from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import make_fused

from gradc.backends.plan import Plan
from gradc.backends.c.attention import ROWS_MAX, _Finder, _batch_offsets, _elementwise, _static
from gradc.backends.c.ctypes_map import ctype, strides
from gradc.backends.c.group_body import inline_body
from gradc.backends.c.kernel import Kernel, padded
from gradc.backends.c.mm import plain
from gradc.backends.c.scalar import ExprGen


def _find(f: _Finder, gdp: Node) -> list[Node] | None:
    """The members of a backward chain whose dP is ``gdp``'s result, in plan order, or None."""
    plan = f.plan
    if gdp.body is not None or not plain(gdp) or gdp.attrs["trans_a"]:
        return None
    dp = plan.resolve(gdp.outputs[0])
    rank = len(dp.type.shape)
    users = f.readers.get(dp, [])
    if rank < 3 or dp in f.outs or len(users) != 2 or len(set(users)) != 2:
        return None
    mk = next((u for u in users if _elementwise(u) and len(u.outputs) == 1
               and (r := f.only_reader(plan.resolve(u.outputs[0]))) is not None
               and r.op == "reduce_sum"), None)
    if mk is None:
        return None
    rk = f.only_reader(plan.resolve(mk.outputs[0]))
    e = next(u for u in users if u is not mk)
    if (rk is None or list(rk.attrs["axes"]) != [rank - 1] or not _elementwise(e)
            or len(e.outputs) != 1 or f.only_reader(plan.resolve(rk.outputs[0])) is not e):
        return None
    ds = plan.resolve(e.outputs[0])
    gs = f.readers.get(ds, [])
    if ds in f.outs or len(gs) != 2 or any(g.op != "gemm" or g.body is not None or not plain(g)
                                           or plan.resolve(g.inputs[0]) is not ds
                                           or plan.resolve(g.inputs[1]) is ds for g in gs):
        return None
    if sorted(g.attrs["trans_a"] for g in gs) != [False, True]:
        return None
    do = plan.resolve(gdp.inputs[0])
    gv = next((g for g in f.readers.get(do, []) if g.op == "gemm" and g.body is None
               and plain(g) and g.attrs["trans_a"] and not g.attrs["trans_b"]
               and plan.resolve(g.inputs[1]) is do
               and plan.resolve(g.inputs[0]).type.shape == dp.type.shape), None)
    members = sorted({gdp, mk, rk, e, *gs, *([gv] if gv else [])}, key=f.pos.__getitem__)
    values = [v for m in members for v in (*m.inputs, *m.outputs)]
    if not _static(plan, values) or (plan.sizes.static(dp.type.shape[-1]) or 0) > ROWS_MAX:
        return None
    last = f.pos[members[-1]]
    outs = [plan.resolve(g.outputs[0]) for g in (*gs, *([gv] if gv else []))]
    if any(f.pos[r] < last for v in outs for r in f.readers.get(v, []) if r not in members):
        return None
    return members


def attention_grad_groups(graph: Graph, plan: Plan) -> None:
    """Make each attention backward chain of the plan one ``attention_grad`` kernel."""
    f = _Finder(graph, plan)
    at: dict[Node, Node] = {}
    taken: set[Node] = set()
    for n in plan.nodes:
        if n.op != "gemm":
            continue
        members = _find(f, n)
        if members is None or taken.intersection(members):
            continue
        keep = [plan.resolve(m.outputs[0]) for m in members if m.op == "gemm"
                and plan.resolve(m.outputs[0]) not in {plan.resolve(n.outputs[0])}]
        body, ext = inline_body(plan, members, f"attention_grad_{len(at)}", keep)
        node = make_fused(None, ext, body, "attention_grad")
        for old, new in zip(keep, node.outputs):
            plan.alias[old] = new
        at[members[-1]] = node
        taken.update(members)
    plan.nodes[:] = [at.get(n, n) for n in plan.nodes if n not in taken or n in at]


# -- the kernel ----------------------------------------------------------------------------

def _ds(body: Graph) -> Value:
    """dS: the value that two products read as their first operand."""
    firsts = [n.inputs[0] for n in body.nodes if n.op == "gemm"]
    return next(v for v in firsts if firsts.count(v) == 2)


def _roles(body: Graph) -> dict[str, Node]:
    """The body's gemms by role (dp, dq, dk, dv) and the sum (r)."""
    r = next(n for n in body.nodes if n.op == "reduce_sum")
    gemms = [n for n in body.nodes if n.op == "gemm"]
    ds = _ds(body)
    roles = {"r": r}
    for g in gemms:
        if g.inputs[0] is ds:
            roles["dk" if g.attrs["trans_a"] else "dq"] = g
        elif g.attrs["trans_a"]:
            roles["dv"] = g
        else:
            roles["dp"] = g
    return roles


def emit_attention_grad(k: Kernel) -> None:
    """The ``attention_grad`` group's kernel (module docstring)."""
    body = k.node.body
    assert body is not None
    ro = _roles(body)
    gdp, gdq, gdk, rk = ro["dp"], ro["dq"], ro["dk"], ro["r"]
    gdv = ro.get("dv")
    d, cw = k.dims, k.code
    dp = gdp.outputs[0]
    t = ctype(dp.type.dtype)
    sfx = "f32" if t.acc == "float" else "f64"
    shape = [int(d.static(x) or 0) for x in dp.type.shape]
    batch, rows, keys = shape[:-2], shape[-2], shape[-1]
    nr = 2 * (16 if t.acc == "float" else 8)

    def size(v: Value, i: int) -> int:
        return int(d.static(v.type.shape[i]) or 0)

    depth = size(gdp.inputs[1], -1 if gdp.attrs["trans_b"] else -2)
    dq_w, dk_w = size(gdq.outputs[0], -1), size(gdk.outputs[0], -1)
    dv_w = size(gdv.outputs[0], -1) if gdv is not None else 0
    pad = [-(-w // nr) * nr for w in (keys, dq_w, dk_w, dv_w)]
    nb = 1
    for b in batch:
        nb *= b
    cw.line(f"enum {{ NR = {nr}, T = {rows}, L = {keys}, LP = {pad[0]}, D = {depth}, "
            f"DQ = {dq_w}, DQP = {pad[1]}, DK = {dk_w}, DKP = {pad[2]}, DV = {dv_w}, "
            f"DVP = {pad[3]} }};", "int fail = 0;")
    cw.line(f"#pragma omp parallel num_threads(nt) if({nb} > 1)")
    with cw.block():
        el = t.store
        bufs = [("vpk", "D * LP"), ("kpk", "L * DQP"), ("qpk", "T * DKP"),
                ("opk", "T * DVP + 1"), ("dpb", "8 * LP"), ("mb", "8 * L"), ("dsb", "T * L")]
        for name, n in bufs:
            cw.line(f"{el} *{name} = ({el} *)gc_alloc((size_t)({n}) * sizeof({el}));")
        ok = " && ".join(name for name, _ in bufs)
        with cw.block(f"if (!({ok}))"):
            cw.line("#pragma omp atomic write", "fail = 1;")
        cw.line(f"_Alignas(64) {el} tile[8 * NR];", f"{t.acc} rs[8];")
        cw.line("#pragma omp for schedule(dynamic, 1)")
        with cw.block(f"for (int64_t bh = 0; bh < {nb}; bh++)"):
            cw.line(f"if (!({ok})) continue;")
            base = _batch_offsets(k, body, list(batch))
            _packs(k, ro, base, sfx)
            with cw.block("for (int64_t i0 = 0; i0 < T; i0 += 8)"):
                cw.line("const int64_t h = T - i0 < 8 ? T - i0 : 8;")
                a, rs_ = _a(k, gdp, base, "i0")
                with cw.block("for (int64_t p = 0; p < LP / NR; p++)"):
                    cw.line(f"gc_mm_tile_{sfx}(D, {a}, {rs_}, h, vpk + p * D * NR, "
                            "dpb + p * NR, LP, 1, 0);")
                _rows(k, body, rk, dp, base, list(batch), sfx)
                _out_rows(k, gdq, "dsb + i0 * L", "L, 1", "h", "kpk", "L", "DQ", "DQP", "i0",
                          base, sfx)
            with cw.block("for (int64_t i0 = 0; i0 < L; i0 += 8)"):
                cw.line("const int64_t h = L - i0 < 8 ? L - i0 : 8;")
                _out_rows(k, gdk, "dsb + i0", "1, L", "h", "qpk", "T", "DK", "DKP", "i0",
                          base, sfx)
                if gdv is not None:
                    pv = gdv.inputs[0]
                    _out_rows(k, gdv, f"{k.param(pv)} + {base[pv]} + i0", "1, L", "h", "opk",
                              "T", "DV", "DVP", "i0", base, sfx)
        cw.line(*(f"free({name});" for name, _ in bufs))
    cw.line("if (fail) return 1;")


def _a(k: Kernel, g: Node, base: dict[Value, str], row: str) -> tuple[str, str]:
    """(pointer to row ``row`` of op(a), "row stride, step stride") of an untransposed a."""
    a = g.inputs[0]
    kdim = a.type.shape[-1]
    return f"{k.param(a)} + {base[a]} + {row} * {k.dims.expr(kdim)}", \
        f"{k.dims.expr(kdim)}, 1"


def _packs(k: Kernel, ro: dict[str, Node], base: dict[Value, str], sfx: str) -> None:
    """op(b) of every product, packed into panels (mm.h's layout) for this (batch, head)."""
    cw = k.code
    plans = [("dp", "vpk", "D", "LP", "L"), ("dq", "kpk", "L", "DQP", "DQ"),
             ("dk", "qpk", "T", "DKP", "DK"), ("dv", "opk", "T", "DVP", "DV")]
    for role, buf, kb, wp, w in plans:
        g = ro.get(role)
        if g is None:
            continue
        b = g.inputs[1]
        n_ = k.dims.expr(b.type.shape[-2] if g.attrs["trans_b"] else b.type.shape[-1])
        kk = k.dims.expr(b.type.shape[-1] if g.attrs["trans_b"] else b.type.shape[-2])
        sbk, sbn = ("1", kk) if g.attrs["trans_b"] else (n_, "1")
        with cw.block(f"for (int64_t p = 0; p < {wp} / NR; p++)"):
            cw.line(f"gc_mm_packb_{sfx}({buf} + p * {kb} * NR, {k.param(b)} + {base[b]} + "
                    f"p * NR * {sbn}, {kb}, {sbk}, {sbn}, {w} - p * NR < NR ? {w} - p * NR : NR);")


def _rows(k: Kernel, body: Graph, rk: Node, dp: Value, base: dict[Value, str],
          batch: list[int], sfx: str) -> None:
    """M's rows, their sums R (from -0.0, in order: the sum kernel's) and dS's rows into dsb."""
    cw = k.code
    r = len(batch) + 2
    loads: dict[Value, tuple[str, object]] = {dp: ("dpb", lambda _v: "r * LP + j")}
    for v in body.inputs:
        vs = padded(v.type.shape, r)
        st = strides(k.dims, vs)
        terms = [base[v]] + [f"{ix} * {st[a]}" for a, ix in ((r - 2, "(i0 + r)"), (r - 1, "j"))
                             if k.dims.static(vs[a]) != 1]
        loads[v] = (k.ptr[v], (lambda off: lambda _v: off)(" + ".join(terms)))
    m = rk.inputs[0]
    gen = ExprGen(loads, prefix="m", read=k.read)  # type: ignore[arg-type]
    mv = gen.get(m)
    with cw.block("for (int64_t r = 0; r < h; r++)"), cw.block("for (int64_t j = 0; j < L; j++)"):
        cw.line(*gen.lines, f"mb[r * L + j] = {mv};")
    cw.line(f"gc_rowsums_{sfx}(mb, L, h, rs);")
    ds = _ds(body)
    gen = ExprGen(loads, {rk.outputs[0]: "rs[r]"}, "s", k.read)  # type: ignore[arg-type]
    dv = gen.get(ds)
    with cw.block("for (int64_t r = 0; r < h; r++)"), cw.block("for (int64_t j = 0; j < L; j++)"):
        cw.line(*gen.lines, f"dsb[(i0 + r) * L + j] = {dv};")


def _out_rows(k: Kernel, g: Node, a: str, strides_: str, h: str, bpk: str, kb: str, w: str,
              wp: str, row: str, base: dict[Value, str], sfx: str) -> None:
    """Rows ``row``..``row + h`` of product ``g``'s result: op(a)'s rows at ``a`` times the
    packed op(b) over ``kb`` steps (a canonical sum each), stored in place or through a tile."""
    cw = k.code
    y = g.outputs[0]
    out = f"{k.param(y)} + {base[y]} + {row} * {w}"
    with cw.block(f"for (int64_t p = 0; p < {wp} / NR; p++)"):
        cw.line(f"const int64_t w = {w} - p * NR < NR ? {w} - p * NR : NR;")
        with cw.block(f"if ({h} == 8 && w == NR)"):
            cw.line(f"gc_mm_tile_{sfx}({kb}, {a}, {strides_}, 8, {bpk} + p * {kb} * NR, "
                    f"{out} + p * NR, {w}, 1, 0);")
        with cw.orelse():
            cw.line(f"gc_mm_tile_{sfx}({kb}, {a}, {strides_}, {h}, {bpk} + p * {kb} * NR, "
                    "tile, NR, 1, 0);",
                    f"for (int64_t r = 0; r < {h}; r++)",
                    f"  for (int64_t j = 0; j < w; j++) ({out})[r * {w} + p * NR + j] = "
                    "tile[r * NR + j];")
