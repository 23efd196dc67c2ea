"""Loop-nest emitters: elementwise groups, copies, slice, reduce_sum.

Each emitter writes the body of one C function into ``Kernel.code``. Index arithmetic is
int64_t; loops are OpenMP static parallel-for over the outer axes (collapsed) and leave the
innermost, contiguous axis to the vectorizer.
"""

from __future__ import annotations

from typing import Sequence

from gradc.ir.core import Value
from gradc.ir.types import Dim

from gradc.backends.c.kernel import Kernel, omp_for, padded, stream_flag, traffic
from gradc.backends.c.scalar import ExprGen, needed_inputs, wrap
from gradc.backends.c.ctypes_map import CType, Dims, ctype, strides


# -- elementwise groups --------------------------------------------------------------------

def emit_elementwise(k: Kernel) -> None:
    """One loop over the group's shape computing every output (no intermediate buffers)."""
    n = k.node
    inputs = list(n.inputs if n.body is None else n.body.inputs)
    outputs = list(n.outputs if n.body is None else n.body.outputs)
    shape = outputs[0].type.shape
    used = needed_inputs(outputs, set(inputs))
    axes = _merge_axes(k.dims, shape, used)
    pres = {id(v): [g[1][id(v)] for g in axes] for v in used}
    if all(all(p) or not any(p) for p in pres.values()):
        offs = {id(v): "i" if all(pres[id(v)]) else "0" for v in used}
        gen = ExprGen({v: (k.ptr[v], lambda v: offs[id(v)]) for v in used}, read=k.read)
        stores = [f"{k.param(o)}[i] = {gen.get(o)};" for o in outputs]
        k.code.declare("const int64_t", "n", k.dims.prod(shape))
        _streamed(k, outputs, gen, stores)
        return
    _nested(k, axes, used, outputs)


def _streamed(k: Kernel, outputs: list[Value], gen: ExprGen, stores: list[str]) -> None:
    """The flat loop over ``n`` elements, with a streaming-store version for large outputs.

    Above GC_STREAM_MIN bytes moved (and with 16-byte aligned outputs) each thread computes blocks
    of GC_BLK elements into local arrays and copies them out with non-temporal stores; the
    values are the same expressions, so results are bit-identical to the plain loop.
    """
    cw = k.code
    types = [k.types.get(k.ptr[o], ctype(o.type.dtype).store) for o in outputs]
    moved = traffic(k.dims, list(gen.loads) + outputs)
    with cw.block(f"if {stream_flag([k.param(o) for o in outputs], moved)}"):
        cw.declare("const int64_t", "nb", "n / GC_BLK")
        cw.line("#pragma omp parallel num_threads(nt) if(n > GC_PAR_MIN)")
        with cw.block():
            cw.line("#pragma omp for schedule(static) nowait")
            with cw.block("for (int64_t gb = 0; gb < nb; gb++)"):
                cw.line(*(f"_Alignas(64) {t} s{j}[GC_BLK];" for j, t in enumerate(types)))
                with cw.block("for (int64_t gj = 0; gj < GC_BLK; gj++)"):
                    cw.line("const int64_t i = gb * GC_BLK + gj;", *gen.lines,
                            *(f"s{j}[gj] = {gen.get(o)};" for j, o in enumerate(outputs)))
                cw.line(*(f"gc_stream({k.param(o)} + gb * GC_BLK, s{j}, sizeof s{j});"
                          for j, o in enumerate(outputs)))
            cw.line("gc_stream_fence();")
        with cw.block("for (int64_t i = nb * GC_BLK; i < n; i++)"):
            cw.line(*gen.lines, *(f"{k.param(o)}[i] = {gen.get(o)};" for o in outputs))
    with cw.orelse():
        cw.line(omp_for("n"))
        with cw.block("for (int64_t i = 0; i < n; i++)"):
            cw.line(*gen.lines, *stores)


def _merge_axes(dims: Dims, shape: Sequence[Dim], used: list[Value]) -> list:
    """Axes of the group shape, dropping static 1s and merging runs with equal broadcasting.

    Each entry is ``(list of original axes, {id(value): present})``.
    """
    r = len(shape)
    groups: list = []
    for a in range(r):
        if dims.static(shape[a]) == 1:
            continue
        pres = {id(v): dims.same(padded(v.type.shape, r)[a], shape[a]) for v in used}
        if groups and groups[-1][1] == pres:
            groups[-1][0].append(a)
        else:
            groups.append(([a], pres))
    return groups


def _nested(k: Kernel, axes: list, used: list[Value], outputs: list[Value]) -> None:
    dims = k.dims
    shape = outputs[0].type.shape
    r = len(shape)
    m = len(axes)
    sizes = [dims.prod([shape[a] for a in g]) for g, _ in axes]
    ost = [dims.prod([shape[a] for g2, _ in axes[j + 1:] for a in g2]) for j in range(m)]
    offs: dict[int, str] = {}
    for v in used:
        vst = strides(dims, padded(v.type.shape, r))
        terms = [f"i{j} * {vst[g[-1]]}" for j, (g, pres) in enumerate(axes) if pres[id(v)]]
        offs[id(v)] = " + ".join(terms) if terms else "0"
    loads = {v: (k.ptr[v], lambda v: offs[id(v)]) for v in used}
    gen = ExprGen(loads, read=k.read)  # type: ignore[arg-type]
    out_off = " + ".join(f"i{j} * {ost[j]}" for j in range(m))
    stores = [f"{k.param(o)}[{out_off}] = {gen.get(o)};" for o in outputs]
    total = dims.prod(shape)
    heads = [f"for (int64_t i{j} = 0; i{j} < {sizes[j]}; i{j}++)" for j in range(m)]
    cw = k.code
    cw.line(omp_for(total, m - 1))
    with cw.under(*heads[:-1]), cw.block(heads[-1]):
        cw.line(*gen.lines, *stores)


# -- copies --------------------------------------------------------------------------------

def emit_copy(k: Kernel) -> None:
    """``reshape`` (and ``identity`` of a constant): the same bytes in a new shape."""
    n = k.node
    src, dst = n.inputs[0], n.outputs[0]
    size = ctype(dst.type.dtype).width // 8
    k.code.line(f"memcpy({k.param(dst)}, {k.param(src)}, "
                f"(size_t){k.dims.prod(dst.type.shape)} * {size});")


# -- slice -----------------------------------------------------------------------------------

def _slice_axes(dims: Dims, off: Sequence[int], size: Sequence[Dim], stride: Sequence[int],
                full: Sequence[Dim], out: Sequence[Dim]) -> list[dict]:
    """Per axis: output dims, full dims, start expression and stride; contiguous runs merged."""
    axes: list[dict] = []
    for o, s, st, f, n in zip(off, size, stride, full, out):
        start = o if st >= 0 else f"({o} + {dims.expr(s)} - 1)"
        ident = o == 0 and st == 1 and dims.same(n, f)
        axes.append({"out": [n], "full": [f], "start": str(start), "stride": st, "ident": ident})
    merged: list[dict] = []
    for ax in axes:
        if merged and ax["ident"] and merged[-1]["stride"] == 1:
            prev = merged[-1]
            inner = dims.prod(ax["full"])
            prev["start"] = f"({prev['start']}) * {inner}"
            prev["out"] += ax["out"]
            prev["full"] += ax["full"]
            prev["ident"] = prev["ident"] and ax["ident"]
        else:
            merged.append(ax)
    return merged


def emit_slice(k: Kernel) -> None:
    """A strided window copied element by element (bit patterns, never converted)."""
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    k.as_bits(x, y)
    a = n.attrs
    dims = k.dims
    axes = _slice_axes(dims, a["input_window_offsets"], a["input_window_sizes"],
                       a["input_window_strides"], x.type.shape, y.type.shape)
    m = len(axes)
    fst = [dims.prod([d for ax in axes[j + 1:] for d in ax["full"]]) for j in range(m)]
    ost = [dims.prod([d for ax in axes[j + 1:] for d in ax["out"]]) for j in range(m)]
    src = " + ".join(f"({ax['start']} + {ax['stride']} * i{j}) * {fst[j]}"
                     for j, ax in enumerate(axes))
    dst = " + ".join(f"i{j} * {ost[j]}" for j in range(m))
    heads = [f"for (int64_t i{j} = 0; i{j} < {dims.prod(ax['out'])}; i{j}++)"
             for j, ax in enumerate(axes)]
    k.code.line(omp_for(dims.prod(y.type.shape), max(1, m - 1)))
    with k.code.under(*heads):
        k.code.line(f"{k.param(y)}[{dst}] = {k.param(x)}[{src}];")


# -- reduce_sum ----------------------------------------------------------------------------

def emit_reduce_sum(k: Kernel) -> None:
    """Sums in canonical order: each output accumulates its inputs in increasing index order.

    The loops run over the input in row-major order (so every accumulator sees its terms in
    that order); threads split the first kept axis. Floating accumulators start at -0.0, the
    identity of IEEE addition, so the first addition gives the first term exactly.
    """
    n = k.node
    x, y = n.inputs[0], n.outputs[0]
    dims = k.dims
    cw = k.code
    t = ctype(x.type.dtype)
    red = set(n.attrs["axes"])
    shape = x.type.shape
    r = len(shape)
    if dims.prod_static([shape[a] for a in red]) == 1:  # nothing is added: a copy
        cw.line(f"memcpy({k.param(y)}, {k.param(x)}, (size_t){dims.prod(shape)} * {t.width // 8});")
        return
    kept = [a for a in range(r) if a not in red]
    acc_t = t.acc if t.is_float else t.uarith
    kst = {a: dims.prod([shape[b] for b in kept if b > a]) for a in kept}
    xst = strides(dims, shape)
    nout = dims.prod([shape[a] for a in kept])
    init = "-0.0" if t.is_float else "0"
    if t.is_f16:
        cw.line(f"float *acc = (float *)malloc((size_t){nout} * sizeof(float));",
                "if (!acc) return 1;")
    elif t.is_float:
        cw.line(f"{t.store} *acc = {k.param(y)};")
    else:
        cw.line(f"{acc_t} *acc = ({acc_t} *)malloc((size_t){nout} * sizeof({acc_t}));",
                "if (!acc) return 1;")
    xi = " + ".join(f"i{a} * {xst[a]}" for a in range(r))
    ai = " + ".join(f"i{a} * {kst[a]}" for a in kept) or "0"
    load = f"{k.param(x)}[{xi}]"
    add = f"acc[{ai}] += ({acc_t}){'gc_h2f(' + load + ')' if t.is_f16 else load};"
    if not kept:
        cw.line(f"acc[0] = {init};")
        with cw.under(*_loops(dims, shape, None)):
            cw.line(add)
        _finish(k, t, y, "0", "1")
    else:
        first = kept[0]
        span = dims.expr(shape[first])
        cw.line(f"#pragma omp parallel num_threads(nt) if({dims.prod(shape)} > GC_PAR_MIN)")
        with cw.block():
            cw.line(f"int64_t lo = 0, hi = {span};")
            with cw.conditional("#ifdef _OPENMP"), cw.block():
                cw.line("const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();",
                        f"lo = {span} * id / T; hi = {span} * (id + 1) / T;")
            cw.line(f"for (int64_t q = lo * {kst[first]}; q < hi * {kst[first]}; q++) "
                    f"acc[q] = {init};")
            if any(a > kept[-1] for a in red):
                _interleaved(k, shape, first, kept[-1], add)
            else:
                with cw.under(*_loops(dims, shape, first)):
                    cw.line(add)
            _finish(k, t, y, f"lo * {kst[first]}", f"hi * {kst[first]}")
    if t.is_f16 or not t.is_float:
        cw.line("free(acc);")


CHAINS = 8  # accumulators advanced together by ``_interleaved``


def _interleaved(k: Kernel, shape: Sequence[Dim], first: int, last: int, add: str) -> None:
    """The loops of a sum whose innermost axes are reduced (a channel's bias gradient over
    N, H, W, say): there each accumulator is one chain of dependent additions, which runs at
    the adder's latency. Here the last kept axis runs in blocks of CHAINS, innermost, so that
    CHAINS accumulators advance together; each still receives its terms in increasing index
    order (the axes before the block keep their places, the reduced axes after it run in
    order), so every sum is bit for bit the row-major loop's. A partial block at the end of
    the axis runs one accumulator at a time."""
    dims, cw = k.dims, k.code
    heads = _loops(dims, shape, first)
    lo, hi = ("lo", "hi") if last == first else ("0", dims.expr(shape[last]))
    inner = heads[last + 1:]
    with cw.blocks(heads[:last]):
        with cw.block(f"for (int64_t b{last} = {lo}; b{last} < {hi}; b{last} += {CHAINS})"):
            with cw.block(f"if (b{last} + {CHAINS} <= {hi})"), cw.under(*inner), \
                    cw.block(f"for (int64_t c = 0; c < {CHAINS}; c++)"):
                cw.line(f"const int64_t i{last} = b{last} + c;", add)
            with cw.block("else"), cw.under(f"for (int64_t i{last} = b{last}; i{last} < {hi}; "
                                            f"i{last}++)", *inner):
                cw.line(add)


def _loops(dims: Dims, shape: Sequence[Dim], first: int | None) -> list[str]:
    """The heads of the loops over ``shape`` (axis ``first`` over this thread's ``lo..hi``)."""
    heads = []
    for a in range(len(shape)):
        lo, hi = ("lo", "hi") if a == first else ("0", dims.expr(shape[a]))
        heads.append(f"for (int64_t i{a} = {lo}; i{a} < {hi}; i{a}++)")
    return heads


def _finish(k: Kernel, t: CType, y: Value, lo: str, hi: str) -> None:
    """Round the accumulators of one block into the output (float16 and integers)."""
    if t.is_f16:
        k.code.line(f"for (int64_t q = {lo}; q < {hi}; q++) {k.param(y)}[q] = gc_f2h(acc[q]);")
    elif not t.is_float:
        k.code.line(f"for (int64_t q = {lo}; q < {hi}; q++) {k.param(y)}[q] = "
                    f"{wrap(t, 'acc[q]')};")
