"""ONNX lowerings of the elementwise, arithmetic, structural and slice ops (see onnx_target.py).

Each lowering takes the emitter, the gradc node and the ONNX tensors of its operands, and returns
the ONNX tensors of its results. Everything is an exact decomposition of SPEC.md.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from onnx import numpy_helper

from gradc.backends.onnx.emit import INT64_MIN, Emitter, Tensor
from gradc.ir.core import Node
from gradc.ir.types import DType

Lowering = Callable[[Emitter, Node, Sequence[Tensor]], list[Tensor]]
F16, F32, F64, I64 = DType.float16, DType.float32, DType.float64, DType.int64


def _zero(e: Emitter, dtype: DType) -> Tensor:
    return e.scalar(0, dtype)


# -- relu / clip (SPEC §2, §3): explicit comparisons, exact selections ---------------------
def lower_relu(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """y = x where x > 0 else +0 (the taken x is never -0 or NaN)."""
    (x,) = args
    zero = _zero(e, x.dtype)
    return [e.select(e.compare("Greater", x, zero), x, zero, a_neg0=False, a_nan=False)]


def lower_relu_grad(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """dx = dy where x > 0 else +0."""
    x, dy = args
    zero = _zero(e, x.dtype)
    return [e.select(e.compare("Greater", x, zero), dy, zero)]


def lower_clip(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """y = x where min <= x <= max; else max(min, max) above max or for NaN; else min."""
    (x,) = args
    t = x.dtype.numpy.type
    mn, mx = t(node.attrs["min"]), t(node.attrs["max"])
    hi = mx if mn <= mx else mn  # the result above max and for NaN (SPEC §3.1)
    c_mn, c_hi = e.scalar(mn, x.dtype), e.scalar(hi, x.dtype)
    le_max = e.compare("LessOrEqual", x, e.scalar(mx, x.dtype))
    if np.array(mn).tobytes() == np.array(hi).tobytes():
        fill = c_mn
    else:
        fill = e.select(le_max, c_mn, c_hi)
    keep = e.binary("And", le_max, e.compare("GreaterOrEqual", x, c_mn))
    fill_neg0 = any(v == 0 and np.signbit(v) for v in (mn, hi))
    return [e.select(keep, x, fill, a_nan=False, b_neg0=fill_neg0, b_nan=False)]


def lower_clip_grad(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """dx = +0 where x <= min or x >= max, else dy (a NaN x passes dy)."""
    x, dy = args
    t = x.dtype.numpy.type
    mn, mx = e.scalar(t(node.attrs["min"]), x.dtype), e.scalar(t(node.attrs["max"]), x.dtype)
    out = e.binary("Or", e.compare("LessOrEqual", x, mn), e.compare("GreaterOrEqual", x, mx))
    return [e.select(out, _zero(e, x.dtype), dy)]


# -- arithmetic --------------------------------------------------------------------------
def _arith(op_type: str) -> Lowering:
    def lower(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        a, b = args
        if a.dtype == F16:  # SPEC §1.6: widen exactly, compute in float32, round once
            return [e.cast(safe_binary(e, op_type, _widen(e, a), _widen(e, b)), F16)]
        return [safe_binary(e, op_type, a, b)]  # onnxruntime's integer kernels wrap like NumPy
    lower.__doc__ = f"``{op_type}`` (float16 through float32)."
    return lower


def _widen(e: Emitter, t: Tensor) -> Tensor:
    """float16 -> float32; a constant is converted at export time, so it stays a constant."""
    return e.const(t.value, F32) if t.value is not None else e.cast(t, F32)


def safe_binary(e: Emitter, op_type: str, a: Tensor, b: Tensor) -> Tensor:
    """A float ``Add``/``Sub``/``Mul`` that onnxruntime's NoopElimination cannot break.

    That rewrite drops ``x + c``, ``x - c`` (c == 0) and ``x * c`` (c == 1) when ``c`` is a
    1-element constant, comparing ``float(c)``: it turns -0.0 + 0.0 into -0.0 and drops
    float64 constants such as 1e-60 or 1 + 1e-12. Such a constant is given 2+ elements.
    """
    const_rhs = b.value is not None and a.value is None
    x, c = (a, b) if const_rhs else (b, a)
    if c.value is None or x.value is not None or not x.dtype.is_float or c.value.size != 1:
        return e.binary(op_type, a, b)
    if c.rank > x.rank or not _noop_breaks(op_type, c.value.reshape(()), const_rhs):
        return e.binary(op_type, a, b)
    sizes = [d if isinstance(d, int) else 0 for d in x.shape]
    axis = next((i for i in range(x.rank - 1, -1, -1) if sizes[i] >= 2), None)
    if axis is not None:
        wide = e.const(np.full((sizes[axis],) + (1,) * (x.rank - 1 - axis), c.value.item()),
                       c.dtype)
        return e.binary(op_type, x, wide) if const_rhs else e.binary(op_type, wide, x)
    # no static axis of size >= 2: compute on two stacked copies, keep the first
    ux = e.unsqueeze(x, 0)
    two = e.op("Concat", [ux, ux], x.dtype, (2,) + x.shape, axis=0)
    wide = e.const(np.full((2,) + (1,) * x.rank, c.value.item()), c.dtype)
    r = e.binary(op_type, two, wide) if const_rhs else e.binary(op_type, wide, two)
    first = e.op("Slice", [r, e.ints([0]), e.ints([1]), e.ints([0])], x.dtype, (1,) + x.shape)
    return e.op("Squeeze", [first, e.ints([0])], x.dtype, x.shape)


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


def lower_neg(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Neg``; unsigned integers as ``0 - x`` (wraps); float16 through float32."""
    (x,) = args
    if x.dtype.value.startswith("uint"):
        return [e.binary("Sub", _zero(e, x.dtype), x)]
    if x.dtype == F16:
        return [e.cast(e.op("Neg", [e.cast(x, F32)], F32, x.shape), F16)]
    return [e.op("Neg", [x], x.dtype, x.shape)]


MATMUL_CARRIER = {DType.int64: I64, DType.int32: DType.int32, DType.int16: DType.int32,
                  DType.int8: DType.int32, DType.uint64: DType.uint64, DType.uint32: DType.uint32,
                  DType.uint16: DType.uint32, DType.uint8: DType.uint32}


def lower_reduce_sum(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """Floats: ``ReduceSum`` (float16 in float32). Integers: ``MatMul`` with ones, which wraps.

    onnxruntime's integer ``ReduceSum`` accumulates in double and saturates, so integer sums
    move the reduced axes last and multiply by a ones vector in a wrapping integer type.
    """
    (x,) = args
    axes, keep = tuple(node.attrs["axes"]), node.attrs["keepdims"]
    out_shape = node.outputs[0].type.shape
    if not axes:
        return [e.op("Identity", [x], x.dtype, x.shape)]
    if x.dtype.is_float:
        work = F32 if x.dtype == F16 else x.dtype
        s = e.op("ReduceSum", [e.cast(x, work), e.ints(axes)], work, out_shape,
                 keepdims=int(keep))
        return [e.cast(s, x.dtype)]
    work = MATMUL_CARRIER[x.dtype]
    kept = [i for i in range(x.rank) if i not in axes]
    y = e.cast(x, work)
    if kept + list(axes) != list(range(x.rank)):
        y = e.op("Transpose", [y], work, [x.shape[i] for i in kept + list(axes)],
                 perm=kept + list(axes))
    k = e.product([x.shape[i] for i in axes])
    k1 = e.ints([k]) if isinstance(k, int) else e.reshape(k, (1,), [1])
    rows = e.op("Reshape", [y, e.op("Concat", [e.ints([-1]), k1], I64, (2,), axis=0)], work,
                ("?", "?"))
    ones = e.op("ConstantOfShape", [e.op("Concat", [k1, e.ints([1])], I64, (2,), axis=0)],
                work, ("?", 1), value=numpy_helper.from_array(np.ones(1, work.numpy)))
    total = e.op("MatMul", [rows, ones], work, ("?", 1))
    return [e.cast(e.op("Reshape", [total, e.shape_tensor(out_shape)], work, out_shape),
                   x.dtype)]


def lower_reshape(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Reshape`` to the static / symbolic target shape."""
    (x,) = args
    shape = tuple(node.attrs["shape"])
    return [e.op("Reshape", [x, e.shape_tensor(shape)], x.dtype, shape)]


def lower_cast(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Cast``; float64 -> float16 rounds once (onnxruntime goes through float32)."""
    (x,) = args
    to: DType = node.attrs["dtype"]
    if x.dtype == to:
        return [e.op("Identity", [x], x.dtype, x.shape)]
    if x.dtype == F64 and to == F16:
        return [_f64_to_f16(e, x)]
    return [e.cast(x, to)]


def _f64_to_f16(e: Emitter, x: Tensor) -> Tensor:
    """Correct rounding float64 -> float16 from onnxruntime's double rounding via float32.

    Rounding to float32 first goes wrong only when the float32 value m is exactly halfway
    between two float16 values h and o while x != m: then the answer is o when x lies beyond m.
    """
    m = e.cast(e.cast(x, F32), F64)
    h16 = e.cast(e.cast(m, F32), F16)
    h = e.cast(h16, F64)
    d = e.binary("Sub", m, h)
    other = e.binary("Add", h, e.binary("Add", d, d))
    o16 = e.cast(e.cast(other, F32), F16)
    tie = e.compare("Equal", e.cast(o16, F64), other)
    beyond = e.compare("Greater", e.binary("Mul", e.binary("Sub", x, m), d), e.scalar(0, F64))
    fix = e.binary("And", tie, beyond)
    out = e.select(fix, o16, h16, a_nan=False)
    # x just below the float16 overflow midpoint 65520 rounds to float32 65520 -> inf
    near = e.compare("Less", e.op("Abs", [x], F64, x.shape), e.scalar(65520.0, F64))
    over = e.binary("And", near, e.op("IsInf", [h16], DType.bool, x.shape))
    top = e.select(e.compare("Less", x, e.scalar(0, F64)), e.scalar(-65504.0, F16),
                   e.scalar(65504.0, F16))
    return e.select(over, top, out, a_nan=False)


def lower_identity(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Identity``."""
    return [e.op("Identity", [args[0]], args[0].dtype, args[0].shape)]


def lower_expand(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Expand`` to the shape of ``like`` (its values are not read)."""
    x, like = args
    return [e.op("Expand", [x, e.shape_tensor(like.shape)], x.dtype, like.shape)]


def lower_constant(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """An initializer."""
    v = node.attrs["value"]
    return [e.const(v, DType.of(v.dtype))]


# -- slice (SPEC §4): data movement --------------------------------------------------------
def _start(off: int, size: int, stride: int) -> int:
    return off + (size - 1 if stride < 0 else 0)


def lower_slice(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """One strided ``Slice`` (negative steps included), then a ``Gather`` per stride-0 axis."""
    (x,) = args
    a = node.attrs
    spec: list[tuple[int, int, int, int]] = []
    gathers: list[tuple[int, list[int]]] = []
    shape = list(x.shape)
    for i, (off, size, st, n) in enumerate(zip(a["input_window_offsets"], a["input_window_sizes"],
                                               a["input_window_strides"], a["output_sizes"])):
        if isinstance(size, str):  # a whole symbolic axis, stride 1 or -1
            if st == -1:
                spec.append((i, -1, INT64_MIN, -1))
            continue
        shape[i] = n
        if st == 0:
            gathers.append((i, [off] * n))
            continue
        s = _start(off, size, st)
        if st == 1 and s == 0 and n == x.shape[i]:
            continue
        end = s + st * (n - 1) + (1 if st > 0 else -1)
        spec.append((i, s, end if end >= 0 else INT64_MIN, st))
    y = x
    if spec:
        axes, starts, ends, steps = (e.ints(c) for c in zip(*spec))
        y = e.op("Slice", [y, starts, ends, axes, steps], x.dtype, _after(x.shape, shape, spec))
    for i, idx in gathers:
        out = list(y.shape)
        out[i] = len(idx)
        y = e.op("Gather", [y, e.ints(idx)], x.dtype, out, axis=i)
    return [y]


def _after(full: Sequence, final: Sequence, spec: Sequence[tuple[int, int, int, int]]) -> list:
    sliced = {s[0] for s in spec}
    return [final[i] if i in sliced else full[i] for i in range(len(full))]


def lower_slice_grad(e: Emitter, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
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
                y = _reverse(e, y, i)
            continue
        k, n, s = int(y.shape[i]), int(out[i]), _start(off, size, st)
        if k == 1 or abs(st) == 1:
            lo = s if st > 0 or k == 1 else s - (k - 1)
            if st < 0 and k > 1:
                y = _reverse(e, y, i)
            parts = [_zeros(e, y, i, lo), y, _zeros(e, y, i, n - lo - k)]
            parts = [p for p in parts if p is not None]
            if len(parts) > 1:
                y = e.op("Concat", parts, y.dtype, _with(y.shape, i, n), axis=i)
            continue
        idx = [k] * n  # position k is the appended zero
        for c in range(k):
            idx[s + st * c] = c
        zero = _zeros(e, y, i, 1)
        y = e.op("Concat", [y, zero], y.dtype, _with(y.shape, i, k + 1), axis=i)
        y = e.op("Gather", [y, e.ints(idx)], y.dtype, _with(y.shape, i, n), axis=i)
    return [y]


def _with(shape: Sequence, axis: int, n: Any) -> tuple:
    return tuple(n if j == axis else d for j, d in enumerate(shape))


def _reverse(e: Emitter, y: Tensor, axis: int) -> Tensor:
    return e.op("Slice", [y, e.ints([-1]), e.ints([INT64_MIN]), e.ints([axis]), e.ints([-1])],
                y.dtype, y.shape)


def _zeros(e: Emitter, like: Tensor, axis: int, n: int) -> Tensor | None:
    """+0 of like's dtype, with like's shape except ``n`` along ``axis`` (None if n == 0)."""
    if n == 0:
        return None
    return e.expand(e.scalar(0, like.dtype), _with(like.shape, axis, n))


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
