"""ONNX converters of the logic and selection ops that gradc's own lowerings write: And, Or,
Xor, Not, IsInf, Abs, Equal of bools, and GatherElements as a two-way selection.

gradc has no boolean operators; each of these is a ``where`` (an exact selection on every
target) of its operands and bool constants, so what the exporter writes reads back as the same
values: a lowering target's output is importable by its importer. Constant operands fold
(``import_fold``); these converters build what does not fold.

GatherElements is imported only as the selection that gradc's exporter writes for ``where``
where ONNX Runtime's ``Where`` would not copy bits (``builder.gather_select``): ``data`` holds
two stacked tensors along ``axis`` (size 2) and ``indices`` is a bool cast to an integer (through
any ``Reshape``/``Expand``), or a constant of zeros and ones. Anything else is a gather, which
gradc refuses as a model op.
"""

from __future__ import annotations

import numpy as np

from gradc.errors import UnsupportedError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.types import FLOATS, NUMERIC, SIGNED, DType
from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, normalize_axes, require_dtype,
)


def _bool_const(ctx: Context, v: bool) -> Value:
    return ops.constant(np.array(v), graph=ctx.graph)


def _bools(n: OnnxNode, ctx: Context, count: int) -> list[Value]:
    names = ("A", "B")[:count] if count > 1 else ("X",)
    vals = [ctx.value(n, i, f) for i, f in enumerate(names)]
    for v, f in zip(vals, names):
        require_dtype(v, (DType.bool,), f, "where")
    return vals


def logical_not(ctx: Context, x: Value) -> Value:
    """``not x`` for a bool value: where(x, false, true)."""
    return ops.where(x, _bool_const(ctx, False), _bool_const(ctx, True))


def bool_equal(ctx: Context, a: Value, b: Value) -> Value:
    """``a == b`` for bool values: where(a, b, not b)."""
    return ops.where(a, b, logical_not(ctx, b))


@converter("Not")
def _not(n: OnnxNode, ctx: Context) -> list[Produced]:
    (x,) = _bools(n, ctx, 1)
    return [logical_not(ctx, x)]


@converter("And", "Or", "Xor")
def _logic(n: OnnxNode, ctx: Context) -> list[Produced]:
    a, b = _bools(n, ctx, 2)
    if n.op == "And":
        return [ops.where(a, b, _bool_const(ctx, False))]
    if n.op == "Or":
        return [ops.where(a, _bool_const(ctx, True), b)]
    return [ops.where(a, logical_not(ctx, b), b)]


@converter("IsInf")
def _is_inf(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "X")
    require_dtype(x, FLOATS, "X", "equal")
    found = [ops.equal(x, ops.constant(np.array(s * np.inf, x.type.dtype.numpy),
                                       graph=ctx.graph))
             for s, attr in ((1, "detect_positive"), (-1, "detect_negative"))
             if n.get_int(attr, 1)]
    if not found:  # nothing detected: all false, in x's shape
        false = ops.constant(np.zeros([1] * x.type.rank, bool), graph=ctx.graph)
        return [ops.expand(false, x) if x.type.rank else false]
    out = found[0]
    for f in found[1:]:
        out = ops.where(out, _bool_const(ctx, True), f)
    return [out]


@converter("Abs")
def _abs(n: OnnxNode, ctx: Context) -> list[Produced]:
    """|x| as where(x < 0, -x, x); for floats the kept branch is x + 0, which turns -0.0 into
    +0.0 (a NaN keeps its sign: gradc does not specify the payload of arithmetic's NaN)."""
    x = ctx.value(n, 0, "X")
    dtype = require_dtype(x, NUMERIC, "X", "neg")
    if dtype not in FLOATS and dtype not in SIGNED:
        return [x]  # unsigned: |x| is x
    zero = ops.constant(np.zeros((), dtype.numpy), graph=ctx.graph)
    kept = ops.add(x, zero) if dtype in FLOATS else x
    return [ops.where(ops.less(x, zero), ops.neg(x), kept)]


@converter("GatherElements")
def _gather_elements(n: OnnxNode, ctx: Context) -> list[Produced]:
    data, idx = ctx.value(n, 0, "data"), ctx.value(n, 1, "indices")
    rank = data.type.rank
    if rank == 0 or idx.type.rank != rank:
        raise UnsupportedError(_NOT_SELECT)
    axis = normalize_axes([n.get_int("axis", 0)], rank, "axis")[0]
    shape, ishape = data.type.shape, idx.type.shape
    same = all(a == b for k, (a, b) in enumerate(zip(shape, ishape)) if k != axis)
    if shape[axis] != 2 or ishape[axis] != 1 or not same or not _zero_or_one(idx, n, ctx):
        raise UnsupportedError(_NOT_SELECT)
    sizes = list(ishape)
    picks = [ops.slice(data, [k if a == axis else 0 for a in range(rank)], sizes, [1] * rank)
             for k in (0, 1)]
    return [ops.where(ops.cast(idx, DType.bool), picks[1], picks[0])]


_NOT_SELECT = ("op GatherElements is supported only as a two-way selection (data of size 2 "
               "along axis, indices a bool cast to an integer, the other dims equal: how gradc "
               "writes an exact where); gradc has no gather op")


def _zero_or_one(idx: Value, n: OnnxNode, ctx: Context) -> bool:
    """True if every index is 0 or 1: a cast of a bool (through reshapes and expands), or a
    constant of zeros and ones."""
    if ctx.is_const(n.input(1)):
        a = ctx.const(n, 1, "indices")
        return a is not None and bool(np.isin(a, (0, 1)).all())
    v = idx
    while v.producer is not None and v.producer.op in ("reshape", "expand", "identity"):
        v = v.producer.inputs[0]
    node = v.producer
    return node is not None and node.op == "cast" and node.inputs[0].type.dtype == DType.bool


__all__ = ["logical_not", "bool_equal"]
