"""Products through the prelude's ``gc_mm`` (``mm.h``): plain batched gemms, and a batched gemm
summed over its batch (a weight gradient), each in the reference's order.

``gc_mm`` packs ``op(b)`` once per call (or once per batch that has its own ``b``) and reads
``op(a)`` in place, a tile of 8 rows x 2 vectors in registers (``mm.h``). ``emit_plain`` takes
``alpha * op(a) @ op(b)`` with ``alpha == 1`` and no ``c`` (``1 * acc`` is ``acc``), float32 or
float64, at least ``SHORT_K`` steps: a batched product whose ``b`` is the same matrix for every
batch (a linear layer's weight) and whose ``a`` is not transposed runs as one product of
``batch * M`` rows; other batched products pass each batch's offsets. ``emit_batch_sum`` is the
C target's fused group ``gemm_reduce`` (``backends/c/groups.py``): ``reduce_sum(gemm(a, b),
batch axes)`` as one product whose k runs over every batch, segment by segment, each segment's
sum added in batch order -- reduce_sum's canonical order -- without the batched intermediate.

Measured on one core of the benchmark machine (AMD EPYC, Zen 5), the GPT step's products
(``benchmarks/gpt_model.py``): 205-226 GFLOP/s for its linear layers against 140-200 with
gemm.py's kernels, a weight gradient with its batch sum 175-220.
"""

from __future__ import annotations

from typing import Sequence

from gradc.ir.core import Node, Value
from gradc.ir.types import Dim

from gradc.backends.c.ctypes_map import CType, ctype
from gradc.backends.c.kernel import Kernel

SEGMENT_MAX = 1024  # k steps of one segment at most (a block of packed op(b) and of op(a))
NARROW_M = 16  # fewer rows than this (and more columns): the transposed tables path instead
# Fewer k steps than this: gemm.py's kernels (a tile's loads and stores of its sums outweigh so
# few products; measured, one thread: an MLP's weight gradient 128x3072 by 8 steps took 0.147
# ms here against 0.125, resnet18's fc gradient 1000x512 by 8 0.084 against 0.066)
SHORT_K = 32


def plain(node: Node) -> bool:
    """True for ``op(a) @ op(b)`` alone: float32/float64, ``alpha == 1``, no ``c`` read."""
    t = ctype(node.outputs[0].type.dtype)
    c_read = len(node.inputs) == 3 and node.attrs["beta"] != 0
    return (t.acc == t.store and t.acc in ("float", "double") and not c_read
            and node.attrs["alpha"] == 1)


def plain_product(node: Node, dims: object) -> bool:
    """True when ``gc_mm`` computes this gemm: ``plain``, at least ``SHORT_K`` steps, and not a
    few rows against many columns (gemm.py's transposed path reads that weight in place)."""
    y = node.outputs[0]
    if not plain(node):
        return False
    m, n = (dims.static(d) for d in y.type.shape[-2:])  # type: ignore[attr-defined]
    b = node.inputs[1]
    kdim = dims.static(b.type.shape[-1] if node.attrs["trans_b"]  # type: ignore[attr-defined]
                       else b.type.shape[-2])
    if kdim is not None and kdim < SHORT_K:
        return False
    return not (len(y.type.shape) == 2 and m is not None and n is not None
                and m < NARROW_M and n > m)


def _strides(k: Kernel, v: Value, batch: Sequence[Dim]) -> list[str]:
    """Element strides of ``v``'s batch axes (aligned with ``batch``), "0" where it
    broadcasts."""
    shape = v.type.shape
    return ["0" if k.dims.static(shape[i]) == 1 else k.dims.prod(shape[i + 1:])
            for i in range(len(batch))]


def _sizes(k: Kernel, a: Value, b: Value, y: Value, ta: bool, tb: bool) -> tuple[str, ...]:
    d = k.dims
    m, n = d.expr(y.type.shape[-2]), d.expr(y.type.shape[-1])
    kk = d.expr(b.type.shape[-1] if tb else b.type.shape[-2])
    sam, sak = ("1", m) if ta else (kk, "1")
    sbk, sbn = ("1", kk) if tb else (n, "1")
    return m, n, kk, sam, sak, sbk, sbn


def _offsets(k: Kernel, name: str, strides: list[str], batch: Sequence[Dim]) -> str:
    """Fill table ``name`` with each batch's element offset; returns the pointer (or NULL when
    every stride is 0: one matrix for all)."""
    if all(s == "0" for s in strides):
        return "NULL"
    cw, d = k.code, k.dims
    with cw.block("for (int64_t bi = 0; bi < NBT; bi++)"):
        cw.line("int64_t rem = bi, off = 0;")
        for i in range(len(batch) - 1, -1, -1):
            cw.line(f"off += rem % {d.expr(batch[i])} * {strides[i]};",
                    f"rem /= {d.expr(batch[i])};")
        cw.line(f"{name}[bi] = off;")
    return name


def _call(k: Kernel, t: CType, args: str) -> None:
    sfx = "f32" if t.acc == "float" else "f64"
    with k.code.block(f"if (gc_mm_{sfx}({args}, nt))"):
        k.code.line("free(oa); free(ob);", "return 1;")
    k.code.line("free(oa); free(ob);")


def _tables(k: Kernel) -> None:
    k.code.line("int64_t *oa = (int64_t *)gc_alloc((size_t)NBT * sizeof(int64_t));",
                "int64_t *ob = (int64_t *)gc_alloc((size_t)NBT * sizeof(int64_t));")
    with k.code.block("if (!oa || !ob)"):
        k.code.line("free(oa); free(ob);", "return 1;")


def emit_plain(k: Kernel) -> None:
    """``y = op(a) @ op(b)`` (``plain_product``) through ``gc_mm`` (module docstring)."""
    node = k.node
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    ta, tb = node.attrs["trans_a"], node.attrs["trans_b"]
    t = ctype(y.type.dtype)
    batch = y.type.shape[:-2]
    m, n, kk, sam, sak, sbk, sbn = _sizes(k, a, b, y, ta, tb)
    pa, pb, py = k.param(a), k.param(b), k.param(y)
    cw = k.code
    cw.line(f"const int64_t NBT = {k.dims.prod(batch)};")
    sa, sb = _strides(k, a, batch), _strides(k, b, batch)
    if batch and all(s == "0" for s in sb) and not ta and all(
            k.dims.same(x, z) for x, z in zip(a.type.shape[:-2], batch)):
        # one weight for every batch, rows of a consecutive: one product of NBT * M rows
        cw.line("int64_t *oa = NULL, *ob = NULL;")
        _call(k, t, f"1, NBT * {m}, {n}, {kk}, 0, {pa}, NULL, {sam}, {sak}, 0, {pb}, NULL, "
              f"{sbk}, {sbn}, 0, {py}, {n}")
        return
    _tables(k)
    oa = _offsets(k, "oa", sa, batch)
    ob = _offsets(k, "ob", sb, batch)
    _call(k, t, f"NBT, {m}, {n}, {kk}, 0, {pa}, {oa}, {sam}, {sak}, 0, {pb}, {ob}, {sbk}, "
          f"{sbn}, 0, {py}, {n}")


def batch_sum_ok(gemm: Node, red: Node, dims: object) -> bool:
    """True when ``red`` sums ``gemm``'s result over exactly its batch axes and ``emit_batch_sum``
    computes both: a plain product (``plain_product``) whose operands both have every batch
    axis (none broadcast), all dims static, a segment of at most ``SEGMENT_MAX`` steps."""
    y = gemm.outputs[0]
    batch = y.type.shape[:-2]
    if not batch or sorted(red.attrs["axes"]) != list(range(len(batch))):
        return False
    if not plain_product(gemm, dims):
        return False
    static = dims.static  # type: ignore[attr-defined]
    values = [*gemm.inputs[:2], y]
    if any(static(d) is None for v in values for d in v.type.shape):
        return False
    a, b = gemm.inputs[0], gemm.inputs[1]
    if any(static(x) != static(z) for v in (a, b) for x, z in zip(v.type.shape[:-2], batch)):
        return False
    kdim = b.type.shape[-1] if gemm.attrs["trans_b"] else b.type.shape[-2]
    return static(kdim) <= SEGMENT_MAX


def emit_batch_sum(k: Kernel) -> None:
    """The ``gemm_reduce`` group: ``reduce_sum(gemm(a, b), batch axes)`` as one ``gc_mm`` whose
    k runs over the batches, one segment per batch (module docstring)."""
    body = k.node.body
    assert body is not None
    gemm = next(n for n in body.nodes if n.op == "gemm")
    a, b = gemm.inputs[0], gemm.inputs[1]
    y, out = gemm.outputs[0], body.outputs[0]
    ta, tb = gemm.attrs["trans_a"], gemm.attrs["trans_b"]
    t = ctype(y.type.dtype)
    batch = y.type.shape[:-2]
    m, n, kk, sam, sak, sbk, sbn = _sizes(k, a, b, y, ta, tb)
    d = k.dims
    pa, pb, py = k.param(a), k.param(b), k.param(out)
    k.code.line(f"const int64_t NBT = {d.prod(batch)};", "int64_t *oa = NULL, *ob = NULL;")
    sas, sbs = d.prod(a.type.shape[-2:]), d.prod(b.type.shape[-2:])
    _call(k, t, f"1, {m}, {n}, NBT * {kk}, {kk}, {pa}, NULL, {sam}, {sak}, {sas}, {pb}, NULL, "
          f"{sbk}, {sbn}, {sbs}, {py}, {n}")
