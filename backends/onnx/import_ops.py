"""ONNX converters for everything but Resize: elementwise and structural ops, Slice, MaxPool.

Each follows SPEC.md §7; see ``gradc.backends.onnx.importer`` for the importer that drives them.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable, Sequence

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.ops.common import CLIP_DTYPES, POOL_DTYPES, RELU_DTYPES, SLICE_DTYPES
from gradc.ir.ops.registry import Checker
from gradc.ir.types import NUMERIC, DType
from gradc.backends.onnx.format import dtype_of, elem_type_name
from gradc.backends.onnx.import_unit_axis import pool_through_unit_axis
from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, int_list, normalize_axes, require_dtype, require_rank,
)

INT_MAX_32 = 2 ** 31 - 1

# -- elementwise ----------------------------------------------------------------------------


def _rank0(x: Value, fn: Callable[[Value], Value]) -> Value:
    """Apply a rank-1..8 gradc op to a scalar by reshaping it to (1,) and back."""
    if x.type.rank > 0:
        return fn(x)
    return ops.reshape(fn(ops.reshape(x, (1,))), ())


@converter("Relu")
def _relu(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "X")
    require_dtype(x, RELU_DTYPES, "X", "relu")
    return [_rank0(x, ops.relu)]


def _clip_bound(v: Any, name: str, dtype: DType) -> float | int:
    """A bound converted to the tensor dtype with gradc's own rule and message (SPEC.md §1.3)."""
    return Checker("clip", {}, {name: v}).scalar(name, dtype)


def _bound_input(a: np.ndarray | None, field: str) -> Any:
    if a is None:
        return None
    if a.size != 1:
        raise VerifyError(f"input {field}: expected a scalar, got shape {list(a.shape)}")
    return a.reshape(()).item()


@converter("Clip", const_inputs=((1, "min"), (2, "max")))
def _clip(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "input")
    dtype = require_dtype(x, CLIP_DTYPES, "input", "clip")
    if ctx.opset < 11:
        lo, hi = n.get_float("min", None), n.get_float("max", None)
    else:
        lo = _bound_input(ctx.const(n, 1, "min"), "min")
        hi = _bound_input(ctx.const(n, 2, "max"), "max")
    info = np.finfo(dtype.numpy) if dtype.is_float else np.iinfo(dtype.numpy)
    lo = _clip_bound(info.min if lo is None else lo, "min", dtype)
    hi = _clip_bound(info.max if hi is None else hi, "max", dtype)
    if lo > hi:
        lo = hi  # ONNX then gives max everywhere (SPEC.md §7.2)
    return [_rank0(x, lambda v: ops.clip(v, lo, hi))]


_BINARY = {"Add": ops.add, "Sub": ops.sub, "Mul": ops.mul}


@converter("Add", "Sub", "Mul")
def _binary(n: OnnxNode, ctx: Context) -> list[Produced]:
    a, b = ctx.value(n, 0, "A"), ctx.value(n, 1, "B")
    gradc_op = n.op.lower()
    require_dtype(a, NUMERIC, "A", gradc_op)
    require_dtype(b, NUMERIC, "B", gradc_op)
    return [_BINARY[n.op](a, b)]


@converter("Neg")
def _neg(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "X")
    require_dtype(x, NUMERIC, "X", "neg")
    return [ops.neg(x)]


def _const_input(n: OnnxNode, ctx: Context) -> np.ndarray | None:
    """The array of input 0 when it is a constant that is no parameter, for folding."""
    return ctx.const(n, 0, "input") if ctx.is_fixed(n.input(0)) else None


def _identity_fold(n: OnnxNode, ctx: Context) -> list[np.ndarray] | None:
    a = _const_input(n, ctx)
    return None if a is None else [a]


@converter("Identity", fold=_identity_fold)
def _identity(n: OnnxNode, ctx: Context) -> list[Produced]:
    return [ctx.value(n, 0, "input")]  # an alias: no node (see the module docstring of importer.py)


# -- Constant --------------------------------------------------------------------------------

_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints",
                   "value_string", "value_strings", "sparse_value")


def _constant_array(n: OnnxNode) -> np.ndarray:
    given = [k for k in _CONSTANT_ATTRS if n.has(k)]
    if len(given) != 1:
        raise VerifyError(f"attributes: expected exactly one of {', '.join(_CONSTANT_ATTRS)}, "
                          f"got {', '.join(given) or 'none'}")
    k = given[0]
    if k in ("value_string", "value_strings", "sparse_value"):
        raise UnsupportedError(f"attribute {k} is not supported (only numeric dense tensors)")
    if k == "value":
        return n.get_tensor("value")  # type: ignore[return-value]
    if k == "value_float":
        return np.array(n.get_float(k, 0.0), np.float32)
    if k == "value_int":
        return np.array(n.get_int(k, 0), np.int64)
    if k == "value_floats":
        return np.array(n.get_floats(k), np.float32)
    return np.array(n.get_ints(k, None), np.int64)


def _constant_check(n: OnnxNode, ctx: Context) -> list[str]:
    try:
        _constant_array(n)
    except UnsupportedError as e:
        return [str(e)]
    return []


@converter("Constant", check=_constant_check, fold=lambda n, ctx: [_constant_array(n)])
def _constant(n: OnnxNode, ctx: Context) -> list[Produced]:
    return [_constant_array(n)]


# -- Reshape, Cast, ReduceSum -------------------------------------------------------------------


def _reshape_target(x: Value, shape: Sequence[int | str], allowzero: bool) -> list[int | str]:
    src = x.type.shape
    target: list[int | str] = []
    for i, d in enumerate(shape):
        if isinstance(d, str):
            target.append(d)  # a symbolic dim read by Shape: the same symbol
        elif d == 0 and not allowzero:
            if i >= len(src):
                raise VerifyError(f"input shape[{i}]: expected a dim to copy (input rank "
                                  f"{len(src)}), got 0")
            target.append(src[i])
        elif d == 0:
            raise UnsupportedError(f"input shape[{i}] is 0 with allowzero=1 (an empty tensor)")
        elif d < -1:
            raise VerifyError(f"input shape[{i}]: expected a size >= -1, got {d}")
        else:
            target.append(d)
    missing = Counter(d for d in src if isinstance(d, str))
    missing.subtract(d for d in target if isinstance(d, str))
    lost = [s for s, k in missing.items() if k > 0]
    if lost:
        target = _symbolic_hole(src, target, lost)
    return target


def _symbolic_hole(src: Sequence[Any], target: list[Any], lost: list[str]) -> list[Any]:
    """Resolve a -1 that stands for exactly one symbolic input dim (else unsupported)."""
    static_in = math.prod(d for d in src if not isinstance(d, str))
    static_out = math.prod(d for d in target if not isinstance(d, str) and d != -1)
    if len(lost) == 1 and target.count(-1) == 1 and static_in == static_out:
        target[target.index(-1)] = lost[0]
        return target
    raise UnsupportedError(f"input shape: reshaping {tuple(src)} to {tuple(target)} would merge "
                           f"or split the symbolic dim {lost[0]!r} (gradc keeps symbols whole)")


@converter("Reshape", const_inputs=((1, "shape"),))
def _reshape(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "data")
    shape: list[int | str] | None
    if ctx.opset < 5:
        shape = n.get_ints("shape", None)  # type: ignore[assignment]
        if shape is None:
            raise VerifyError("attribute shape: expected a list of ints, got none")
    else:
        shape = ctx.dims(n, 1, "shape")  # a static shape computation may keep a symbol
        if shape is None:
            raise VerifyError("input shape: expected a value (required input), got none")
    return [ops.reshape(x, _reshape_target(x, shape, bool(n.get_int("allowzero", 0))))]


def _cast_check(n: OnnxNode, ctx: Context) -> list[str]:
    if not n.has("to"):
        raise VerifyError("attribute to: expected an element type, got none")
    try:
        dtype_of(n.get_int("to", 0))
    except UnsupportedError:
        return [f"attribute to: element type {elem_type_name(n.get_int('to', 0))} is not "
                "supported"]
    return []


def _cast_fold(n: OnnxNode, ctx: Context) -> list[np.ndarray] | None:
    a = _const_input(n, ctx)
    if a is None:
        return None
    with np.errstate(all="ignore"):
        return [a.astype(dtype_of(n.get_int("to", 0)).numpy)]


@converter("Cast", check=_cast_check, fold=_cast_fold)
def _cast(n: OnnxNode, ctx: Context) -> list[Produced]:
    x, dtype = ctx.value(n, 0, "input"), dtype_of(n.get_int("to", 0))
    # A Cast to the input's own dtype is the input (an alias, as Identity): exporters write
    # them around softmax (ONNX Attention's body), and the softmax guard (SPEC-transformers
    # §27.2) is a where reading the softmax itself.
    return [x if x.type.dtype == dtype else ops.cast(x, dtype)]


@converter("ReduceSum", const_inputs=((1, "axes"),))
def _reduce_sum(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "data")
    require_dtype(x, NUMERIC, "data", "reduce_sum")
    keepdims = bool(n.get_int("keepdims", 1))
    if ctx.opset < 13:
        axes, noop = n.get_ints("axes", None), False
    else:
        a = ctx.const(n, 1, "axes")
        axes = None if a is None else int_list(a, "axes")
        noop = bool(n.get_int("noop_with_empty_axes", 0))
    if not axes:
        return [x] if noop else [ops.reduce_sum(x, None, keepdims)]
    return [ops.reduce_sum(x, normalize_axes(axes, x.type.rank, "axes"), keepdims)]


# -- Slice ------------------------------------------------------------------------------------


def _slice_args(n: OnnxNode, ctx: Context) -> tuple[list[int], list[int], list[int] | None,
                                                    list[int] | None]:
    if ctx.opset < 10:
        starts, ends = n.get_ints("starts", None), n.get_ints("ends", None)
        axes, steps = n.get_ints("axes", None), None
    else:
        arrays = [ctx.const(n, i, f) for i, f in enumerate(("starts", "ends", "axes", "steps"), 1)]
        starts, ends, axes, steps = (None if a is None else int_list(a, f) for a, f in
                                     zip(arrays, ("starts", "ends", "axes", "steps")))
    if starts is None or ends is None:
        raise VerifyError("starts, ends: expected both, got "
                          f"{'none' if starts is None and ends is None else 'one'}")
    return starts, ends, axes, steps


def slice_axis(n: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """SPEC.md §7.3 for one listed axis of size n: (offset, size, count); count may be 0."""
    s, e, t = start, end, step
    if s < 0:
        s += n
    if e < 0:
        e += n
    if t > 0:
        s, e = min(max(s, 0), n), min(max(e, 0), n)
        count = max(0, -(-(e - s) // t))
    else:
        s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
        count = max(0, -(-(s - e) // -t))
    size = (count - 1) * abs(t) + 1
    off = s if t > 0 else s - (count - 1) * abs(t)
    return off, size, count


@converter("Slice", const_inputs=((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")))
def _slice(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "data")
    require_dtype(x, SLICE_DTYPES, "data", "slice")
    rank = require_rank(x, 1, 8, "data", "slice")
    starts, ends, axes, steps = _slice_args(n, ctx)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise VerifyError(f"starts, ends, axes, steps: expected the same length, got "
                          f"{len(starts)}, {len(ends)}, {len(axes)}, {len(steps)}")
    axes = normalize_axes(axes, rank, "axes")
    shape = x.type.shape
    off: list[int] = [0] * rank
    size: list[int | str] = list(shape)
    stride, out = [1] * rank, list(shape)
    for i, (a, s, e, t) in enumerate(zip(axes, starts, ends, steps)):
        if t == 0:
            raise VerifyError(f"steps[{i}]: expected a non-zero integer, got 0")
        dim = shape[a]
        if isinstance(dim, str):
            if not (s == 0 and e >= INT_MAX_32 and t == 1):
                raise UnsupportedError(f"starts/ends/steps on axis {a}: the axis has the "
                                       f"symbolic size {dim!r}; only the whole axis (start 0, "
                                       "end >= 2^31-1, step 1) is supported")
            continue
        off[a], size[a], count = slice_axis(dim, s, e, t)
        if count == 0:
            raise UnsupportedError(f"starts/ends on axis {a}: start {s}, end {e}, step {t} on "
                                   f"size {dim} select nothing (gradc has no empty tensors)")
        stride[a], out[a] = t, count
    return [ops.slice(x, off, size, stride, out)]


# -- MaxPool ----------------------------------------------------------------------------------

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _maxpool_check(n: OnnxNode, ctx: Context) -> list[str]:
    found = []
    if n.get_str("auto_pad", "NOTSET") not in AUTO_PADS:
        found.append(f"attribute auto_pad: {n.get_str('auto_pad', '')!r} is not supported "
                     f"({', '.join(AUTO_PADS)})")
    order = n.get_int("storage_order", 0)
    if order != 0 and n.output(1):
        found.append(f"attribute storage_order: {order} (only 0, row-major Indices, is "
                     "supported)")
    return found


# ONNX attribute -> (gradc fields, least value); pads are start_padding then end_padding
_POOL_ATTRS = {"kernel_shape": (("window_size",), 1), "strides": (("strides",), 1),
               "dilations": (("dilations",), 1), "pads": (("start_padding", "end_padding"), 0)}


def _pool_ints(n: OnnxNode, name: str, length: int, default: int) -> list[int]:
    """An ints attribute of MaxPool, checked (length and range) before anything uses it."""
    v = n.get_ints(name, [default] * length)
    assert v is not None
    if len(v) != length:
        raise VerifyError(f"attribute {name}: expected {length} values, got {len(v)}")
    fields, lo = _POOL_ATTRS[name]
    per = length // len(fields)
    for i, x in enumerate(v):
        if x < lo:
            raise VerifyError(f"max_pooling: {fields[i // per]}[{i % per}]: expected an integer "
                              f">= {lo}, got {x} (attribute {name}[{i}])")
    return v


def same_pads(size: int, w: int, s: int, d: int, upper: bool) -> tuple[int, int]:
    """SPEC.md §7.4 auto_pad SAME_UPPER / SAME_LOWER: (start, end) padding of one axis."""
    if s < 1 or d < 1:  # checked here: the op's own check comes after this division
        raise VerifyError(f"attribute {'strides' if s < 1 else 'dilations'}: expected ints >= 1 "
                          f"(auto_pad SAME), got {s if s < 1 else d}")
    out = -(-size // s)
    total = max(0, (out - 1) * s + (w - 1) * d + 1 - size)
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


def ceil_size(size: int, w: int, s: int, b: int, e: int, d: int) -> int:
    """SPEC.md §7.4 ceil_mode output size: no window may start in the end padding."""
    out = -(-(size + b + e - ((w - 1) * d + 1)) // s) + 1
    return out - 1 if (out - 1) * s >= size + b else out


@converter("MaxPool", check=_maxpool_check)
def _maxpool(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "X")
    rank = require_rank(x, 3, 5, "X", "max_pooling")  # rank 3: through a unit axis
    require_dtype(x, POOL_DTYPES, "X", "max_pooling")
    nd = rank - 2
    spatial = x.type.shape[2:]
    for i, dim in enumerate(spatial):
        if isinstance(dim, str):
            raise UnsupportedError(f"input X: spatial dim {i} is the symbol {dim!r} (gradc "
                                   "max_pooling needs static spatial sizes)")
    if not n.has("kernel_shape"):
        raise VerifyError("attribute kernel_shape: expected a list of ints, got none")
    w = _pool_ints(n, "kernel_shape", nd, 1)
    s = _pool_ints(n, "strides", nd, 1)
    d = _pool_ints(n, "dilations", nd, 1)
    pads = _pool_ints(n, "pads", 2 * nd, 0)
    b, e = pads[:nd], pads[nd:]
    auto_pad = n.get_str("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        b, e = [0] * nd, [0] * nd
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = [same_pads(spatial[i], w[i], s[i], d[i], auto_pad == "SAME_UPPER")  # type: ignore[arg-type]
                 for i in range(nd)]
        b, e = [p[0] for p in pairs], [p[1] for p in pairs]
    sizes = None
    if n.get_int("ceil_mode", 0) and auto_pad == "NOTSET":
        sizes = [ceil_size(spatial[i], w[i], s[i], b[i], e[i], d[i])  # type: ignore[arg-type]
                 for i in range(nd)]
    def pool(v: Value, w: list[int], s: list[int], b: list[int], e: list[int], d: list[int],
             sizes: list[int] | None) -> Value | tuple[Value, ...]:
        return ops.max_pooling(v, w, s, b, e, d, output_indices=bool(n.output(1)),
                               output_sizes=sizes)

    if rank == 3:
        return list(pool_through_unit_axis(x, w, s, b, e, d, sizes, pool))
    result = pool(x, w, s, b, e, d, sizes)
    return list(result) if isinstance(result, tuple) else [result]
