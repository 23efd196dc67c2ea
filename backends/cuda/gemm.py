"""gemm (SPEC-training.md §11) on the cuda target: the tiled product of ``tiled.py``.

``Y = alpha * op(a) @ op(b) + beta * c`` over broadcast batch axes is ``Z`` products, one per
element of the result's batch axes: ``A(z, m, kk) = op(a)[z][m, kk]``, ``B(z, kk, n) =
op(b)[z][kk, n]``, k ascending from +0, each product and each addition rounded in ``ACC`` (§11.1's
canonical order, bit-identical to the reference). A transposed operand is read in place: the
threads stage along whichever of its indices is contiguous. The epilogue rounds ``alpha * acc``,
then adds the rounded ``beta * c`` when ``c`` is given and ``beta != 0`` (``c`` is not read when
``beta`` is 0, as the reference), ``c`` broadcast by stride 0 on its axes of size 1, and rounds
once to the dtype.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.ir.core import Value

from gradc.backends.c.ctypes_map import ctype, float_literal
from gradc.backends.c.scalar import narrow, widen
from gradc.backends.cuda import tiled, tiling
from gradc.backends.cuda.kernel import CudaKernel, row_major, static_shape


def _batch_offset(sizes: Sequence[int], shape: Sequence[int], ix: str) -> str:
    """The element offset of batch entry ``z`` (of the result's batch ``sizes``) in a tensor of
    ``shape`` (its batch axes then two more; stride 0 on its batch axes of size 1)."""
    st = row_major(shape)
    terms = []
    inner = 1
    for i in range(len(sizes) - 1, -1, -1):
        if shape[i] != 1 and sizes[i] != 1:
            coord = "z" if inner == 1 else f"z / {inner}"
            if i > 0:
                coord = f"{coord} % {sizes[i]}"
            terms.append(f"({ix})({coord}) * {st[i]}")
        inner *= sizes[i]
    return " + ".join(terms) or "0"


def emit_gemm(k: CudaKernel) -> None:
    """``gemm`` as ``Z`` tiled products (module docstring)."""
    node = k.node
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    beta = node.attrs["beta"]
    c: Value | None = node.inputs[2] if len(node.inputs) == 3 and beta != 0 else None
    ta, tb = node.attrs["trans_a"], node.attrs["trans_b"]
    t = ctype(y.type.dtype)
    acc = t.acc
    ash, bsh, ysh = (static_shape(k, v.type.shape) for v in (a, b, y))
    csh = static_shape(k, c.type.shape) if c is not None else []
    batch = ysh[:-2]
    m, n = ysh[-2], ysh[-1]
    kd = ash[-2] if ta else ash[-1]
    z = _prod(batch)
    ix = tiling.index_type(*(_prod(s) for s in (ash, bsh, ysh, csh)), kd, m * n)
    pa, pb, py = k.param(a), k.param(b), k.param(y)

    def setup() -> list[str]:
        lines = [f"const {ix} za = {_batch_offset(batch, ash, ix)};",
                 f"const {ix} zb = {_batch_offset(batch, bsh, ix)};",
                 f"const {ix} zy = ({ix})z * {m * n};"]
        if c is not None:
            lines.append(f"const {ix} zc = {_batch_offset(batch, csh, ix)};")
        return lines + ["(void)za; (void)zb;"]

    # op(a)[m, kk]: a[m, kk] (kk contiguous) or a[kk, m] (m contiguous)
    a_op = tiling.Operand(
        pa, t, "r" if ta else "k",
        lambda tag, r: [f"const {ix} {tag}_o = za + {r}{'' if ta else f' * {kd}'};"],
        lambda tag, kk: ([], f"{tag}_o + {kk}{f' * {m}' if ta else ''}", None), 2.0)
    # op(b)[kk, n]: b[kk, n] (n contiguous) or b[n, kk] (kk contiguous)
    b_op = tiling.Operand(
        pb, t, "k" if tb else "r",
        lambda tag, r: [f"const {ix} {tag}_o = zb + {r}{f' * {kd}' if tb else ''};"],
        lambda tag, kk: ([], f"{tag}_o + {kk}{'' if tb else f' * {n}'}", None), 2.0)
    alpha = float_literal(node.attrs["alpha"], acc)
    pc = k.param(c) if c is not None else ""
    cm = 0 if not csh or csh[-2] == 1 else csh[-1]  # c's strides along m and n (0: broadcast)
    cn = 0 if not csh or csh[-1] == 1 else 1

    def store(mm: str, nn: str, s: str) -> list[str]:
        lines = [f"{acc} v = {alpha} * {s};"]
        if c is not None:
            el = widen(t, f"{pc}[zc + {mm} * {cm} + {nn} * {cn}]")
            lines += [f"const {acc} w = {float_literal(beta, acc)} * {el};", "v = v + w;"]
        return ["{", *("  " + x for x in lines),
                f"  {py}[zy + {mm} * {n} + {nn}] = {narrow(t, 'v')};", "}"]

    tiled.emit(k, tiling.Product(z, m, n, kd, a_op, b_op, acc, setup, store, ix))


def _prod(sizes: Sequence[int]) -> int:
    out = 1
    for s in sizes:
        out *= s
    return out


EMITTERS: dict[str, Any] = {"gemm": emit_gemm}
