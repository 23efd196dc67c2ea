"""slice_grad (alone or anchoring a fused group) as a gather: a thread per element of dX.

An element of dX is in the window's lattice when, on every axis, its coordinate is the
window's start plus a multiple of the stride within the window's count; it then takes its one
element of dY (the prologue evaluated at that element), else +0 of its dtype. The epilogue is
applied to every element, copied or zero. Each element is written once by one thread.

Where dX's last axis holds a multiple of ``VEC`` elements, each thread takes ``VEC`` neighbours
along it (their coordinates computed once): their loads of dY are issued together, before any
store, so more reads are in flight -- the kernel is bound by memory latency, not arithmetic.
"""

from __future__ import annotations

from typing import Any

from gradc.ir.ops.slice import copy_start

from gradc.backends.c.ctypes_map import ctype, literal
from gradc.backends.c.kernel import anchored, ctx_gen
from gradc.backends.cuda.kernel import CudaKernel, coords, row_major, static_shape

VEC = 4  # elements of dX per thread, along the last axis, when it divides that axis


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
    vec = VEC if full and full[-1] % VEC == 0 and total >= VEC else 1
    cw = k.code
    with k.each(total // vec, "q") as q:
        i0 = q if vec == 1 else "i0"
        if vec > 1:
            cw.line(f"const int64_t i0 = {q} * {vec};")
        c = coords(k, res.type.shape, i0, "c")
        for v in range(vec):  # each element's value: its dY element (prologue) or +0
            cw.line(f"{t.store} r{v} = {literal(0, res.type.dtype)};")
            with cw.block():
                inside, terms = [], []
                for ax, (ca, s0, st, n) in enumerate(zip(c, start, strides, ys)):
                    if ax == len(c) - 1 and v:
                        ca = f"({ca} + {v})"
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
        for v in range(vec):  # then the epilogue and the stores
            with cw.block():
                i = i0 if vec == 1 else "i"
                if vec > 1:
                    cw.line(f"const int64_t i = i0 + {v};")
                epi = ctx_gen(k, res.type.shape, i, an.loads, {res: f"r{v}"}, prefix="e")
                out = epi.get(an.out)
                cw.line(*epi.lines, f"{k.param(an.out)}[{i}] = {out};")


EMITTERS: dict[str, Any] = {"slice_grad": emit_slice_grad}
