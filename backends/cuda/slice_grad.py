"""slice_grad (alone or anchoring a fused group) as a gather: a thread per element of dX.

An element of dX is in the window's lattice when, on every axis, its coordinate is the
window's start plus a multiple of the stride within the window's count; it then takes its one
element of dY (the prologue evaluated at that element), else +0 of its dtype. The epilogue is
applied to every element, copied or zero. Each element is written once by one thread.

Each thread takes ``VEC`` elements of dX, a block ``BLOCK * VEC`` consecutive ones: element
``v`` of a thread is ``v * BLOCK`` after its first, so every load and store of a warp is
coalesced. All the thread's loads of dY are issued before any store, so more reads are in
flight -- the kernel is bound by memory latency, not arithmetic.
"""

from __future__ import annotations

from typing import Any

from gradc.ir.ops.slice import copy_start

from gradc.backends.c.ctypes_map import ctype, literal
from gradc.backends.c.kernel import anchored, ctx_gen
from gradc.backends.cuda.kernel import BLOCK, CudaKernel, coords, row_major, static_shape

VEC = 4  # elements of dX per thread, BLOCK apart



def emit_slice_grad(k: CudaKernel) -> None:
    """dX[c] = dY[(c - start) / stride] inside the lattice, +0 outside; then the epilogue."""
    an = anchored(k)
    a = an.anchor.attrs
    dy, res = an.operand(0), an.result
    t = ctype(res.type.dtype)
    full, ys = static_shape(k, res.type.shape), static_shape(k, dy.type.shape)
    sizes = static_shape(k, a["input_window_sizes"])
    strides = a["input_window_strides"]
    start = copy_start(a["input_window_offsets"], sizes, strides, full)
    yst = row_major(ys)
    total = 1
    for s in full:
        total *= s
    span = BLOCK * VEC
    cw = k.code
    with k.each(-(-total // span) * BLOCK, "q") as q:
        cw.line(f"const int64_t i0 = {q} / {BLOCK} * {span} + {q} % {BLOCK};")
        ragged = total % span != 0  # the last block's elements may end before its threads'
        for v in range(VEC):  # each element's value: its dY element (prologue) or +0
            i = "i0" if v == 0 else f"(i0 + {v * BLOCK})"
            cw.line(f"{t.store} r{v} = {literal(0, res.type.dtype)};")
            with cw.block():
                c = coords(k, res.type.shape, i, f"c{v}_")
                inside, terms = [f"{i} < {total}"] if ragged else [], []
                for ax, (ca, s0, st, n) in enumerate(zip(c, start, strides, ys)):
                    d = f"({ca} - {s0})" if st > 0 else f"({s0} - {ca})"
                    step = abs(st)
                    qa = d if step == 1 else f"{d} / {step}"
                    inside.append(f"{d} >= 0" + (f" && {d} % {step} == 0" if step > 1 else "")
                                  + f" && {qa} < {n}")
                    terms.append(qa if yst[ax] == 1 else f"{qa} * {yst[ax]}")
                with cw.block(f"if ({' && '.join(inside) or '1'})"):
                    cw.line(f"const int64_t yi = {' + '.join(terms) or '0'};")
                    pro = ctx_gen(k, dy.type.shape, "yi", an.loads, prefix="a")
                    value = pro.get(dy)
                    cw.line(*pro.lines, f"r{v} = {value};")
        for v in range(VEC):  # then the epilogue and the stores
            with cw.block(f"if (i0 + {v * BLOCK} < {total})" if ragged else ""):
                cw.line(f"const int64_t i = i0 + {v * BLOCK};")
                epi = ctx_gen(k, res.type.shape, "i", an.loads, {res: f"r{v}"}, prefix="e")
                out = epi.get(an.out)
                cw.line(*epi.lines, f"{k.param(an.out)}[i] = {out};")


EMITTERS: dict[str, Any] = {"slice_grad": emit_slice_grad}
