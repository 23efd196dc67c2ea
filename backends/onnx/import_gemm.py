"""ONNX converters of SPEC-training.md §21 for §11 (Gemm, MatMul) and §13 (AveragePool)."""

from __future__ import annotations

from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, require_dtype, require_rank,
)
from gradc.backends.onnx.import_ops import AUTO_PADS, ceil_size, same_pads
from gradc.backends.onnx.import_unit_axis import pool_through_unit_axis
from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.ops.common import F


def _matrix(v: Value, field: str) -> Value:
    require_dtype(v, F, field, "gemm")
    require_rank(v, 2, 2, field, "gemm")
    return v


@converter("Gemm")
def _gemm(n: OnnxNode, ctx: Context) -> list[Produced]:
    """§11.3: gemm(A, B, C reshaped to rank 2, transA, transB, alpha, beta)."""
    a, b = _matrix(ctx.value(n, 0, "A"), "A"), _matrix(ctx.value(n, 1, "B"), "B")
    c = None
    if n.input(2):
        c = ctx.value(n, 2, "C")
        require_dtype(c, F, "C", "gemm")
        if c.type.rank > 2:
            raise UnsupportedError(f"input C: rank {c.type.rank} is not supported (ONNX Gemm's "
                                   "C broadcasts to (M, N): rank 0..2)")
        if c.type.rank < 2:
            c = ops.reshape(c, (1,) * (2 - c.type.rank) + tuple(c.type.shape))
    alpha = n.get_float("alpha", 1.0)
    beta = n.get_float("beta", 1.0)
    return [ops.gemm(a, b, c, trans_a=bool(n.get_int("transA", 0)),
                     trans_b=bool(n.get_int("transB", 0)), alpha=alpha, beta=beta)]


@converter("MatMul")
def _matmul(n: OnnxNode, ctx: Context) -> list[Produced]:
    """§11.3: NumPy matmul; 1-D operands get a unit axis, removed again after."""
    a, b = ctx.value(n, 0, "A"), ctx.value(n, 1, "B")
    require_dtype(a, F, "A", "gemm")
    require_dtype(b, F, "B", "gemm")
    if a.type.rank == 0 or b.type.rank == 0:
        raise UnsupportedError("input A/B: rank 0 is not supported (MatMul needs rank >= 1)")
    a_vec, b_vec = a.type.rank == 1, b.type.rank == 1
    if a_vec:
        a = ops.reshape(a, (1,) + tuple(a.type.shape))
    if b_vec:
        b = ops.reshape(b, tuple(b.type.shape) + (1,))
    rank = max(a.type.rank, b.type.rank)
    if rank > 8:
        raise UnsupportedError(f"input A/B: rank {rank} is not supported (gradc gemm takes "
                               "rank 2..8)")
    if a.type.rank < rank:
        a = ops.reshape(a, (1,) * (rank - a.type.rank) + tuple(a.type.shape))
    if b.type.rank < rank:
        b = ops.reshape(b, (1,) * (rank - b.type.rank) + tuple(b.type.shape))
    y = ops.gemm(a, b)
    if a_vec or b_vec:
        shape = list(y.type.shape)
        if b_vec:
            shape.pop(-1)
        if a_vec:
            shape.pop(-2 if not b_vec else -1)
        y = ops.reshape(y, tuple(shape))
    return [y]


_AVG_ATTRS = {"kernel_shape": (("window_size",), 1), "strides": (("strides",), 1),
              "dilations": (("dilations",), 1), "pads": (("start_padding", "end_padding"), 0)}


def _avg_ints(n: OnnxNode, name: str, length: int, default: int) -> list[int]:
    """An ints attribute of AveragePool, checked (length and range) before anything uses it."""
    v = n.get_ints(name, [default] * length)
    assert v is not None
    if len(v) != length:
        raise VerifyError(f"attribute {name}: expected {length} values, got {len(v)}")
    fields, lo = _AVG_ATTRS[name]
    per = length // len(fields)
    for i, x in enumerate(v):
        if x < lo:
            raise VerifyError(f"average_pooling: {fields[i // per]}[{i % per}]: expected an "
                              f"integer >= {lo}, got {x} (attribute {name}[{i}])")
    return v


def _avgpool_check(n: OnnxNode, ctx: Context) -> list[str]:
    if n.get_str("auto_pad", "NOTSET") not in AUTO_PADS:
        return [f"attribute auto_pad: {n.get_str('auto_pad', '')!r} is not supported "
                f"({', '.join(AUTO_PADS)})"]
    return []


@converter("AveragePool", check=_avgpool_check)
def _average_pool(n: OnnxNode, ctx: Context) -> list[Produced]:
    """§21: average_pooling with §7.4's pads, auto_pad and ceil_mode; rank 3 via a unit axis."""
    x = ctx.value(n, 0, "X")
    rank = require_rank(x, 3, 5, "X", "average_pooling")
    require_dtype(x, F, "X", "average_pooling")
    nd = rank - 2
    spatial = x.type.shape[2:]
    for i, dim in enumerate(spatial):
        if isinstance(dim, str):
            raise UnsupportedError(f"input X: spatial dim {i} is the symbol {dim!r} (gradc "
                                   "average_pooling needs static spatial sizes)")
    if not n.has("kernel_shape"):
        raise VerifyError("attribute kernel_shape: expected a list of ints, got none")
    w = _avg_ints(n, "kernel_shape", nd, 1)
    s = _avg_ints(n, "strides", nd, 1)
    d = _avg_ints(n, "dilations", nd, 1)
    pads = _avg_ints(n, "pads", 2 * nd, 0)
    b, e = pads[:nd], pads[nd:]
    auto_pad = n.get_str("auto_pad", "NOTSET")
    sizes_n = [int(v) for v in spatial]
    if auto_pad == "VALID":
        b, e = [0] * nd, [0] * nd
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = [same_pads(sizes_n[i], w[i], s[i], d[i], auto_pad == "SAME_UPPER")
                 for i in range(nd)]
        b, e = [p[0] for p in pairs], [p[1] for p in pairs]
    sizes = None
    if n.get_int("ceil_mode", 0) and auto_pad == "NOTSET":
        sizes = [ceil_size(sizes_n[i], w[i], s[i], b[i], e[i], d[i]) for i in range(nd)]
    include = bool(n.get_int("count_include_pad", 0))

    def pool(v: Value, w: list[int], s: list[int], b: list[int], e: list[int], d: list[int],
             sizes: list[int] | None) -> Value:
        return ops.average_pooling(v, w, s, b, e, d, include_padding=include,
                                   output_sizes=sizes)

    if rank == 3:
        return list(pool_through_unit_axis(x, w, s, b, e, d, sizes, pool))
    return [pool(x, w, s, b, e, d, sizes)]
