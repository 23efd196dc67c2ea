"""ONNX lowerings of the elementwise, arithmetic, structural and slice ops (see target.py).

Each lowering takes the graph builder, the gradc node and the ONNX tensors of its operands, and
returns the ONNX tensors of its results. Everything is an exact decomposition of SPEC.md.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from gradc.backends.onnx.builder import INT64_MIN, OnnxGraphBuilder, Tensor
from gradc.ir.core import Node
from gradc.ir.types import DType

Lowering = Callable[[OnnxGraphBuilder, Node, Sequence[Tensor]], list[Tensor]]
F16, F32, F64, I64 = DType.float16, DType.float32, DType.float64, DType.int64


def _zero(gb: OnnxGraphBuilder, dtype: DType) -> Tensor:
    return gb.scalar(0, dtype)


# -- relu / clip (SPEC §2, §3): explicit comparisons, exact selections ---------------------
def lower_relu(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """y = x where x > 0 else +0 (the taken x is never -0 or NaN)."""
    (x,) = args
    zero = _zero(gb, x.dtype)
    return [gb.select(gb.compare("Greater", x, zero), x, zero, a_neg0=False, a_nan=False)]


def lower_relu_grad(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """dx = dy where x > 0 else +0."""
    x, dy = args
    zero = _zero(gb, x.dtype)
    return [gb.select(gb.compare("Greater", x, zero), dy, zero)]


def lower_clip(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """y = x where min <= x <= max; else max(min, max) above max or for NaN; else min."""
    (x,) = args
    t = x.dtype.numpy.type
    mn, mx = t(node.attrs["min"]), t(node.attrs["max"])
    hi = mx if mn <= mx else mn  # the result above max and for NaN (SPEC §3.1)
    c_mn, c_hi = gb.scalar(mn, x.dtype), gb.scalar(hi, x.dtype)
    le_max = gb.compare("LessOrEqual", x, gb.scalar(mx, x.dtype))
    if np.array(mn).tobytes() == np.array(hi).tobytes():
        fill = c_mn
    else:
        fill = gb.select(le_max, c_mn, c_hi)
    keep = gb.binary("And", le_max, gb.compare("GreaterOrEqual", x, c_mn))
    fill_neg0 = any(v == 0 and np.signbit(v) for v in (mn, hi))
    return [gb.select(keep, x, fill, a_nan=False, b_neg0=fill_neg0, b_nan=False)]


def lower_clip_grad(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """dx = +0 where x <= min or x >= max, else dy (a NaN x passes dy)."""
    x, dy = args
    t = x.dtype.numpy.type
    mn, mx = gb.scalar(t(node.attrs["min"]), x.dtype), gb.scalar(t(node.attrs["max"]), x.dtype)
    out = gb.binary("Or", gb.compare("LessOrEqual", x, mn), gb.compare("GreaterOrEqual", x, mx))
    return [gb.select(out, _zero(gb, x.dtype), dy)]


# -- arithmetic --------------------------------------------------------------------------
def _arith(op_type: str) -> Lowering:
    def lower(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        a, b = args
        if a.dtype == F16:  # SPEC §1.6: widen exactly, compute in float32, round once
            return [gb.cast(safe_binary(gb, op_type, _widen(gb, a), _widen(gb, b)), F16)]
        return [safe_binary(gb, op_type, a, b)]  # onnxruntime's integer kernels wrap like NumPy
    lower.__doc__ = f"``{op_type}`` (float16 through float32)."
    return lower


def _widen(gb: OnnxGraphBuilder, t: Tensor) -> Tensor:
    """float16 -> float32; a constant is converted at export time, so it stays a constant."""
    return gb.const(t.value, F32) if t.value is not None else gb.cast(t, F32)


WIDE_LIMIT = 4096  # elements of the widened constant of safe_binary


def safe_binary(gb: OnnxGraphBuilder, op_type: str, a: Tensor, b: Tensor) -> Tensor:
    """A float ``Add``/``Sub``/``Mul`` that onnxruntime's NoopElimination cannot break.

    That rewrite drops ``x + c``, ``x - c`` (c == 0) and ``x * c`` (c == 1) when ``c`` is a
    1-element constant, comparing ``float(c)``: it turns -0.0 + 0.0 into -0.0 and drops
    float64 constants such as 1e-60 or 1 + 1e-12. Such a constant is given 2+ elements: as many
    as one axis of ``x`` has (at most WIDE_LIMIT), else two stacked copies of ``x`` are computed.
    """
    const_rhs = b.value is not None and a.value is None
    x, c = (a, b) if const_rhs else (b, a)
    if c.value is None or x.value is not None or not x.dtype.is_float or c.value.size != 1:
        return gb.binary(op_type, a, b)
    if c.rank > x.rank or not _noop_breaks(op_type, c.value.reshape(()), const_rhs):
        return gb.binary(op_type, a, b)
    sizes = [d if isinstance(d, int) else 0 for d in x.shape]
    # a constant as wide as one axis, never larger than WIDE_LIMIT (the model stays small)
    axis = next((i for i in range(x.rank - 1, -1, -1) if 2 <= sizes[i] <= WIDE_LIMIT), None)
    if axis is not None:
        wide = gb.const(np.full((sizes[axis],) + (1,) * (x.rank - 1 - axis), c.value.item()),
                        c.dtype)
        return gb.binary(op_type, x, wide) if const_rhs else gb.binary(op_type, wide, x)
    # no static axis of size >= 2: compute on two stacked copies, keep the first
    ux = gb.unsqueeze(x, 0)
    two = gb.op("Concat", [ux, ux], x.dtype, (2,) + x.shape, axis=0)
    wide = gb.const(np.full((2,) + (1,) * x.rank, c.value.item()), c.dtype)
    r = gb.binary(op_type, two, wide) if const_rhs else gb.binary(op_type, wide, two)
    first = gb.op("Slice", [r, gb.ints([0]), gb.ints([1]), gb.ints([0])], x.dtype, (1,) + x.shape)
    return gb.op("Squeeze", [first, gb.ints([0])], x.dtype, x.shape)


def _noop_breaks(op_type: str, c: np.ndarray, const_rhs: bool) -> bool:
    """Whether NoopElimination would drop the op and so change a result."""
    with np.errstate(all="ignore"):
        f = np.float32(c)
    if op_type == "Add" and f == 0:
        return not (c == 0 and np.signbit(c))  # x + (-0.0) is exactly x
    if op_type == "Sub" and f == 0 and const_rhs:
        return not (c == 0 and not np.signbit(c))  # x - (+0.0) is exactly x
    if op_type == "Mul" and f == 1:
        return bool(c != 1)  # x * 1 is x (a signalling NaN's quiet bit aside)
    return False


def lower_neg(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Neg``; unsigned integers as ``0 - x`` (wraps); float16 through float32."""
    (x,) = args
    if x.dtype.value.startswith("uint"):
        return [gb.binary("Sub", _zero(gb, x.dtype), x)]
    if x.dtype == F16:
        return [gb.cast(gb.op("Neg", [gb.cast(x, F32)], F32, x.shape), F16)]
    return [gb.op("Neg", [x], x.dtype, x.shape)]


MATMUL_CARRIER = {DType.int64: I64, DType.int32: DType.int32, DType.int16: DType.int32,
                  DType.int8: DType.int32, DType.uint64: DType.uint64, DType.uint32: DType.uint32,
                  DType.uint16: DType.uint32, DType.uint8: DType.uint32}


def lower_reduce_sum(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """Floats: ``ReduceSum`` (float16 in float32). Integers: ``MatMul`` with ones, which wraps.

    onnxruntime's integer ``ReduceSum`` accumulates in double and saturates, so integer sums
    move the reduced axes last and multiply by a ones vector in a wrapping integer type.
    """
    (x,) = args
    axes, keep = tuple(node.attrs["axes"]), node.attrs["keepdims"]
    out_shape = node.outputs[0].type.shape
    if not axes:
        return [gb.op("Identity", [x], x.dtype, x.shape)]
    if x.dtype.is_float:
        work = F32 if x.dtype == F16 else x.dtype
        s = gb.op("ReduceSum", [gb.cast(x, work), gb.ints(axes)], work, out_shape,
                  keepdims=int(keep))
        return [gb.cast(s, x.dtype)]
    work = MATMUL_CARRIER[x.dtype]
    kept = [i for i in range(x.rank) if i not in axes]
    y = gb.cast(x, work)
    if kept + list(axes) != list(range(x.rank)):
        y = gb.op("Transpose", [y], work, [x.shape[i] for i in kept + list(axes)],
                  perm=kept + list(axes))
    k = gb.product([x.shape[i] for i in axes])
    k1 = gb.ints([k]) if isinstance(k, int) else gb.reshape(k, (1,), [1])
    rows = gb.op("Reshape", [y, gb.op("Concat", [gb.ints([-1]), k1], I64, (2,), axis=0)], work,
                 ("?", "?"))
    ones = gb.filled(gb.op("Concat", [k1, gb.ints([1])], I64, (2,), axis=0), 1, work, ("?", 1))
    total = gb.op("MatMul", [rows, ones], work, ("?", 1))
    return [gb.cast(gb.op("Reshape", [total, gb.shape_tensor(out_shape)], work, out_shape),
                    x.dtype)]


def lower_reshape(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Reshape`` to the static / symbolic target shape."""
    (x,) = args
    shape = tuple(node.attrs["shape"])
    return [gb.op("Reshape", [x, gb.shape_tensor(shape)], x.dtype, shape)]


def lower_cast(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Cast``; float64 -> float16 rounds once (onnxruntime goes through float32)."""
    (x,) = args
    to: DType = node.attrs["dtype"]
    if x.dtype == to:
        return [gb.op("Identity", [x], x.dtype, x.shape)]
    if x.dtype == F64 and to == F16:
        return [_f64_to_f16(gb, x)]
    return [gb.cast(x, to)]


def _f64_to_f16(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    """Correct rounding float64 -> float16 from onnxruntime's double rounding via float32.

    Rounding to float32 first goes wrong only when the float32 value m is exactly halfway
    between two float16 values h and o while x != m: then the answer is o when x lies beyond m.
    """
    m = gb.cast(gb.cast(x, F32), F64)
    h16 = gb.cast(gb.cast(m, F32), F16)
    h = gb.cast(h16, F64)
    d = gb.binary("Sub", m, h)
    other = gb.binary("Add", h, gb.binary("Add", d, d))
    o16 = gb.cast(gb.cast(other, F32), F16)
    tie = gb.compare("Equal", gb.cast(o16, F64), other)
    beyond = gb.compare("Greater", gb.binary("Mul", gb.binary("Sub", x, m), d), gb.scalar(0, F64))
    fix = gb.binary("And", tie, beyond)
    out = gb.select(fix, o16, h16, a_nan=False)
    # x just below the float16 overflow midpoint 65520 rounds to float32 65520 -> inf
    near = gb.compare("Less", gb.op("Abs", [x], F64, x.shape), gb.scalar(65520.0, F64))
    over = gb.binary("And", near, gb.op("IsInf", [h16], DType.bool, x.shape))
    top = gb.select(gb.compare("Less", x, gb.scalar(0, F64)), gb.scalar(-65504.0, F16),
                    gb.scalar(65504.0, F16))
    return gb.select(over, top, out, a_nan=False)


def lower_identity(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Identity``."""
    return [gb.op("Identity", [args[0]], args[0].dtype, args[0].shape)]


def lower_expand(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Expand`` to the shape of ``like`` (its values are not read)."""
    x, like = args
    return [gb.op("Expand", [x, gb.shape_tensor(like.shape)], x.dtype, like.shape)]


def lower_constant(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """An initializer."""
    v = node.attrs["value"]
    return [gb.const(v, DType.of(v.dtype))]


# -- slice (SPEC §4): data movement --------------------------------------------------------
def _start(off: int, size: int, stride: int) -> int:
    return off + (size - 1 if stride < 0 else 0)


def lower_slice(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """One strided ``Slice`` (negative steps included), then a ``Gather`` per stride-0 axis."""
    (x,) = args
    a = node.attrs
    spec: list[tuple[int, int, int, int]] = []
    gathers: list[tuple[int, int, int]] = []  # (axis, offset, count) of stride-0 axes
    shape = list(x.shape)
    for i, (off, size, st, n) in enumerate(zip(a["input_window_offsets"], a["input_window_sizes"],
                                               a["input_window_strides"], a["output_sizes"])):
        if isinstance(size, str):  # a whole symbolic axis, stride 1 or -1
            if st == -1:
                spec.append((i, -1, INT64_MIN, -1))
            continue
        shape[i] = n
        if st == 0:
            gathers.append((i, off, n))
            continue
        s = _start(off, size, st)
        if st == 1 and s == 0 and n == x.shape[i]:
            continue
        end = s + st * (n - 1) + (1 if st > 0 else -1)
        spec.append((i, s, end if end >= 0 else INT64_MIN, st))
    y = x
    if spec:
        axes, starts, ends, steps = (gb.ints(c) for c in zip(*spec))
        y = gb.op("Slice", [y, starts, ends, axes, steps], x.dtype, _after(x.shape, shape, spec))
    for i, off, n in gathers:  # one element, repeated n times (no n-long index table)
        one = gb.op("Gather", [y, gb.ints([off])], x.dtype, _with(y.shape, i, 1), axis=i)
        y = gb.expand(one, _with(y.shape, i, n))
    return [y]


def _after(full: Sequence, final: Sequence, spec: Sequence[tuple[int, int, int, int]]) -> list:
    sliced = {s[0] for s in spec}
    return [final[i] if i in sliced else full[i] for i in range(len(full))]


def lower_slice_grad(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """Per axis: reverse a negative stride (``Slice``), ``Concat`` zero slabs around the data,
    and for |stride| > 1 ``Gather`` every output position from its element or a zero.

    onnxruntime's float16 ``Pad`` goes through float32 (quieting signalling NaNs), so zeros are
    made by ``Expand`` and placed by ``Concat``/``Gather``, which copy bits.
    """
    (dy,) = args
    a = dict(node.attrs)
    out = tuple(a["output_sizes"])
    y = dy
    for i, (off, size, st) in enumerate(zip(a["input_window_offsets"], a["input_window_sizes"],
                                            a["input_window_strides"])):
        if isinstance(size, str):  # a whole symbolic axis
            if st == -1:
                y = _reverse(gb, y, i)
            continue
        k, n, s = int(y.shape[i]), int(out[i]), _start(off, size, st)
        if k == 1 or abs(st) == 1:
            lo = s if st > 0 or k == 1 else s - (k - 1)
            if st < 0 and k > 1:
                y = _reverse(gb, y, i)
            parts = [_zeros(gb, y, i, lo), y, _zeros(gb, y, i, n - lo - k)]
            parts = [p for p in parts if p is not None]
            if len(parts) > 1:
                y = gb.op("Concat", parts, y.dtype, _with(y.shape, i, n), axis=i)
            continue
        zero = _zeros(gb, y, i, 1)
        idx = _scatter_index(gb, k, n, s, st)
        y = gb.op("Concat", [y, zero], y.dtype, _with(y.shape, i, k + 1), axis=i)
        y = gb.op("Gather", [y, idx], y.dtype, _with(y.shape, i, n), axis=i)
    return [y]


INDEX_TABLE_LIMIT = 1 << 16  # index tables up to this length are constants of the model


def _scatter_index(gb: OnnxGraphBuilder, k: int, n: int, s: int, st: int) -> Tensor:
    """For output positions j < n: c where ``j == s + st * c`` (0 <= c < k), else k.

    A constant table when short; longer ones are computed by onnxruntime (Range, Div, Mod,
    Where), so the export's time and the model's size do not grow with the tensor.
    """
    if n <= INDEX_TABLE_LIMIT:
        idx = np.full(n, k, np.int64)
        idx[s + st * np.arange(k, dtype=np.int64)] = np.arange(k, dtype=np.int64)
        return gb.ints(idx.tolist())
    i64 = DType.int64
    j = gb.range(n)
    t = gb.binary("Sub", j, gb.scalar(s, i64))
    c = gb.binary("Div", t, gb.scalar(st, i64))  # exact where st divides t
    hit = gb.binary("Equal", gb.binary("Mul", c, gb.scalar(st, i64)), t, DType.bool)
    inside = gb.binary("And", gb.binary("GreaterOrEqual", c, gb.scalar(0, i64), DType.bool),
                       gb.binary("Less", c, gb.scalar(k, i64), DType.bool), DType.bool)
    keep = gb.binary("And", hit, inside, DType.bool)
    return gb.op("Where", [keep, c, gb.scalar(k, i64)], i64, (n,))


def _with(shape: Sequence, axis: int, n: Any) -> tuple:
    return tuple(n if j == axis else d for j, d in enumerate(shape))


def _reverse(gb: OnnxGraphBuilder, y: Tensor, axis: int) -> Tensor:
    return gb.op("Slice", [y, gb.ints([-1]), gb.ints([INT64_MIN]), gb.ints([axis]), gb.ints([-1])],
                 y.dtype, y.shape)


def _zeros(gb: OnnxGraphBuilder, like: Tensor, axis: int, n: int) -> Tensor | None:
    """+0 of like's dtype, with like's shape except ``n`` along ``axis`` (None if n == 0)."""
    if n == 0:
        return None
    return gb.expand(gb.scalar(0, like.dtype), _with(like.shape, axis, n))


def lower_arith_table() -> dict[str, Lowering]:
    """The lowerings of this module by gradc op name."""
    return {
        "relu": lower_relu, "relu_grad": lower_relu_grad, "clip": lower_clip,
        "clip_grad": lower_clip_grad, "add": _arith("Add"), "sub": _arith("Sub"),
        "mul": _arith("Mul"), "neg": lower_neg, "reduce_sum": lower_reduce_sum,
        "reshape": lower_reshape, "cast": lower_cast, "identity": lower_identity,
        "expand": lower_expand, "constant": lower_constant, "slice": lower_slice,
        "slice_grad": lower_slice_grad,
    }


__all__: list[Any] = ["lower_arith_table", "Lowering"]
