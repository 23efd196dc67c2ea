"""C kernels of SPEC-training.md §11 (gemm) and §13 (average pooling, in average_pooling.py).

gemm keeps §11.1's canonical order, so it is bit-identical to the reference: each thread takes
rows ``(batch, m)`` of the result; a row is done in blocks of ``NB`` columns, each an
accumulator array set to +0 that every ``k`` (ascending) updates with one rounded product and
one rounded addition per column (the innermost loop runs along a row of ``op(b)``: contiguous
and vectorizable when ``b`` is not transposed). Then ``alpha * acc`` is rounded, and
``beta * c`` rounded and added when ``c`` is given and ``beta != 0``.

Later (speed issue): pack ``op(b)`` panels and tile several rows per thread (register blocking
over m and n with k innermost per tile keeps the order); transposed operands copied to
contiguous panels first.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.backends.c.average_pooling import EMITTERS as AVERAGE_POOLING_EMITTERS
from gradc.backends.c.ctypes_map import ctype, float_literal
from gradc.backends.c.kernel import Kernel, omp_for
from gradc.backends.c.scalar import narrow, widen
from gradc.ir.core import Value
from gradc.ir.types import Dim

NB = 256  # columns per accumulator block (a stack array of the accumulation type)


def _batch_strides(k: Kernel, v: Value, out_batch: Sequence[Dim]) -> list[str]:
    """Element strides of ``v``'s batch axes, 0 on an axis ``v`` broadcasts."""
    shape = v.type.shape
    out = []
    for i in range(len(out_batch)):
        if k.dims.static(shape[i]) == 1:
            out.append("0")
        else:
            out.append(k.dims.prod(shape[i + 1:]))
    return out


def emit_gemm(k: Kernel) -> None:
    """``Y = alpha * op(a) @ op(b) + beta * c`` in §11.1's order (module docstring)."""
    node = k.node
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) == 3 and node.attrs["beta"] != 0 else None
    y = node.outputs[0]
    t = ctype(y.type.dtype)
    ta, tb = node.attrs["trans_a"], node.attrs["trans_b"]
    batch = y.type.shape[:-2]
    d = k.dims
    cw = k.code
    pa, pb, py = k.param(a), k.param(b), k.param(y)
    cw.line(f"const int64_t M = {d.expr(y.type.shape[-2])};",
            f"const int64_t N = {d.expr(y.type.shape[-1])};",
            f"const int64_t K = {d.expr(b.type.shape[-1] if tb else b.type.shape[-2])};",
            f"const int64_t R = {d.prod(batch)} * M;")
    sa, sb = _batch_strides(k, a, batch), _batch_strides(k, b, batch)
    sc = _batch_strides(k, c, batch) if c is not None else []
    cw.line(omp_for("(double)R * (double)N * (double)K"))
    with cw.block("for (int64_t r = 0; r < R; r++)"):
        cw.line("const int64_t m = r % M;", "int64_t oa = 0, ob = 0, oc = 0;")
        cw.line("int64_t bi = r / M;" if batch else "(void)oc;")
        for i in range(len(batch) - 1, -1, -1):
            with cw.block():
                cw.line(f"const int64_t ci = bi % {d.expr(batch[i])};",
                        f"bi /= {d.expr(batch[i])};",
                        f"oa += ci * {sa[i]};", f"ob += ci * {sb[i]};",
                        f"oc += ci * {sc[i]};" if c is not None else "(void)oc;")
        if batch:
            cw.line("(void)bi;")
        a_el = f"{pa}[oa + kk * M + m]" if ta else f"{pa}[oa + m * K + kk]"
        b_el = f"{pb}[ob + (n0 + j) * K + kk]" if tb else "brow[j]"
        cw.line(f"{t.acc} acc[{NB}];")
        with cw.block(f"for (int64_t n0 = 0; n0 < N; n0 += {NB})"):
            cw.line(f"const int64_t nb = N - n0 < {NB} ? N - n0 : {NB};",
                    "for (int64_t j = 0; j < nb; j++) acc[j] = 0;")
            with cw.block("for (int64_t kk = 0; kk < K; kk++)"):
                cw.line(f"const {t.acc} av = ({t.acc}){widen(t, a_el)};")
                if not tb:
                    cw.line(f"const {t.store} *brow = {pb} + ob + kk * N + n0;")
                with cw.block("for (int64_t j = 0; j < nb; j++)"):
                    cw.line(f"const {t.acc} pr = av * ({t.acc}){widen(t, b_el)};",
                            "acc[j] = acc[j] + pr;")
            with cw.block("for (int64_t j = 0; j < nb; j++)"):
                cw.line(f"{t.acc} v = {float_literal(node.attrs['alpha'], t.acc)} * acc[j];")
                if c is not None:
                    cs = c.type.shape
                    cm = "0" if d.static(cs[-2]) == 1 else d.expr(cs[-1])
                    cn = "0" if d.static(cs[-1]) == 1 else "1"
                    pc = k.param(c)
                    el = f"{pc}[oc + m * {cm} + (n0 + j) * {cn}]"
                    cw.line(f"const {t.acc} bc = {float_literal(node.attrs['beta'], t.acc)} * "
                            f"({t.acc}){widen(t, el)};", "v = v + bc;")
                cw.line(f"{py}[r * N + n0 + j] = {narrow(t, 'v')};")


EMITTERS: dict[str, Any] = {
    "gemm": emit_gemm,
    **AVERAGE_POOLING_EMITTERS,
}
