"""ATen converters of ``gradc.from_torch``: element-wise math, comparisons, ``where``,
reductions, and tensors made from sizes (``full``, ``full_like``).

Type promotion is PyTorch's: arithmetic computes in the result's dtype (the exporter's metadata),
comparisons in ``torch.result_type`` of their operands; a Python number becomes a constant of
that dtype. Constant operands were usually evaluated at import already (``torch_translate``);
these converters build the nodes for values computed at run time.

Choices where gradc's operator differs from ATen's:
- ``maximum``, ``minimum`` and ``clamp`` with tensor bounds are gradc's NaN-ignoring
  ``maximum``/``minimum`` (SPEC-training.md §16.3), where PyTorch propagates a NaN.
- ``rsqrt`` and ``reciprocal`` are ``div(1, sqrt(x))`` and ``div(1, x)``: within a rounding of
  PyTorch's kernels, not bit for bit.
- ``var`` is the two-pass mean of squared deviations divided by ``n - correction``.
- ``gelu`` (both ``approximate`` values), ``erf``, ``sin``, ``cos`` and ``isnan`` are gradc's
  operators of the same names (SPEC-transformers §25); an integer operand of ``erf``, ``sin``
  or ``cos`` is cast to the result's float dtype first, as PyTorch promotes it.
- A ``full_like`` whose every reader is a ``where`` that it does not shape (the zeros of
  ``_safe_softmax``'s decomposition, ``where(all_masked, zeros_like(p), p)``) is a rank-0
  constant: no tensor of zeros is made, and the softmax under it is a guarded softmax whose
  gradient is finite on fully masked rows (§27.2 needs the zero to be a constant).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as B
from gradc.ir.core import Value
from gradc.ir.ops.common import F, RELU_DTYPES
from gradc.ir.types import DType
from gradc.torch_ops import Context, TorchNode, aten, aten_name, axes, number

# -- arithmetic ------------------------------------------------------------------------------


def _operands(n: TorchNode, ctx: Context, dt: DType) -> tuple[Value, Value]:
    return (ctx.operand(n.arg("self"), dt, "self"), ctx.operand(n.arg("other"), dt, "other"))


def _no_bool(dt: DType, n: TorchNode) -> None:
    if dt == DType.bool:
        raise UnsupportedError("arithmetic on bool tensors is not supported")


def _scaled(v: Value, alpha: Any, dt: DType, ctx: Context) -> Value:
    return v if alpha == 1 else B.mul(v, ctx.operand(alpha, dt, "alpha"))


@aten("add.Tensor", "add.Scalar")
def _add(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    _no_bool(dt, n)
    a, b = _operands(n, ctx, dt)
    return B.add(a, _scaled(b, n.arg("alpha", 1), dt, ctx))


@aten("sub.Tensor", "sub.Scalar")
def _sub(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    _no_bool(dt, n)
    a, b = _operands(n, ctx, dt)
    return B.sub(a, _scaled(b, n.arg("alpha", 1), dt, ctx))


@aten("mul.Tensor", "mul.Scalar")
def _mul(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    if dt == DType.bool:  # a logical and
        a, b = _operands(n, ctx, dt)
        return B.where(a, b, B.constant(np.array(False)))
    return B.mul(*_operands(n, ctx, dt))


@aten("div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode")
def _div(n: TorchNode, ctx: Context) -> Value:
    mode = n.arg("rounding_mode", None)
    if mode is not None:
        raise UnsupportedError(f"rounding_mode {mode!r} is not supported (true division only)")
    dt = ctx.dtype(n)
    return B.div(*_operands(n, ctx, dt))


def _float_operand(n: TorchNode, ctx: Context, field: str = "self") -> Value:
    dt = ctx.dtype(n)
    if dt not in F:
        raise UnsupportedError(f"dtype {dt} is not supported (gradc takes float64, float32, "
                               "float16 here)")
    return ctx.operand(n.arg(field), dt, field)


def _unary(*names: str, fn: Callable[[Value], Value]) -> None:
    def build(n: TorchNode, ctx: Context) -> Value:
        return fn(_float_operand(n, ctx))
    build.__doc__ = f"ATen {', '.join(names)}."
    aten(*names)(build)


def _one(x: Value) -> Value:
    return B.constant(np.ones((), x.type.dtype.numpy))


_unary("sigmoid.default", fn=B.sigmoid)
_unary("tanh.default", fn=B.tanh)
_unary("exp.default", fn=B.exp)
_unary("log.default", fn=B.log)
_unary("sqrt.default", fn=B.sqrt)
_unary("rsqrt.default", fn=lambda x: B.div(_one(x), B.sqrt(x)))
_unary("reciprocal.default", fn=lambda x: B.div(_one(x), x))
_unary("erf.default", fn=B.erf)
_unary("sin.default", fn=B.sin)
_unary("cos.default", fn=B.cos)

APPROXIMATIONS = ("none", "tanh")


@aten("gelu.default")
def _gelu(n: TorchNode, ctx: Context) -> Value:
    approximate = n.arg("approximate", "none")
    if approximate not in APPROXIMATIONS:
        raise VerifyError(f"argument approximate: expected 'none' or 'tanh', got "
                          f"{approximate!r}")
    return B.gelu(_float_operand(n, ctx), approximate)


@aten("isnan.default")
def _isnan(n: TorchNode, ctx: Context) -> Value:
    x = ctx.value(n.arg("self"), "self")
    if not x.type.dtype.is_float:  # an integer or bool tensor holds no NaN
        return B.expand(B.constant(np.array(False)), x) if x.type.rank else B.constant(
            np.array(False))
    return B.is_nan(x)


def _rank0(x: Value, fn: Callable[[Value], Value]) -> Value:
    """A rank-1..8 gradc op applied to a scalar through shape (1,)."""
    if x.type.rank > 0:
        return fn(x)
    return B.reshape(fn(B.reshape(x, (1,))), ())


@aten("neg.default")
def _neg(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    _no_bool(dt, n)
    return B.neg(ctx.operand(n.arg("self"), dt, "self"))


@aten("abs.default")
def _abs(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    _no_bool(dt, n)
    x = ctx.operand(n.arg("self"), dt, "self")
    zero = B.constant(np.zeros((), dt.numpy))
    return B.where(B.less(x, zero), B.neg(x), x)


@aten("relu.default")
def _relu(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    if dt not in RELU_DTYPES:
        raise UnsupportedError(f"dtype {dt} is not supported by gradc's relu")
    return _rank0(ctx.operand(n.arg("self"), dt, "self"), B.relu)


@aten("leaky_relu.default")
def _leaky_relu(n: TorchNode, ctx: Context) -> Value:
    return B.leaky_relu(_float_operand(n, ctx), float(n.arg("negative_slope", 0.01)))


def _clip(x: Value, lo: Any, hi: Any) -> Value:
    dt = x.type.dtype
    info = np.finfo(dt.numpy) if dt.is_float else np.iinfo(dt.numpy)
    low = -np.inf if lo is None and dt.is_float else info.min if lo is None else lo
    high = np.inf if hi is None and dt.is_float else info.max if hi is None else hi
    if low > high:
        low = high  # PyTorch then gives max everywhere
    return _rank0(x, lambda v: B.clip(v, low, high))


@aten("hardtanh.default")
def _hardtanh(n: TorchNode, ctx: Context) -> Value:
    return _clip(_float_operand(n, ctx), n.arg("min_val", -1.0), n.arg("max_val", 1.0))


@aten("clamp.default")
def _clamp(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    _no_bool(dt, n)
    x = ctx.operand(n.arg("self"), dt, "self")
    lo = n.arg("min", None)
    hi = n.arg("max", None)
    return _clip(x, lo, hi)


@aten("clamp.Tensor")
def _clamp_tensor(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    _no_bool(dt, n)
    y = ctx.operand(n.arg("self"), dt, "self")
    lo, hi = n.arg("min", None), n.arg("max", None)
    if lo is not None:
        y = B.maximum(y, ctx.operand(lo, dt, "min"))
    if hi is not None:
        y = B.minimum(y, ctx.operand(hi, dt, "max"))
    return y


@aten("maximum.default", "minimum.default")
def _max_min(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    _no_bool(dt, n)
    fn = B.maximum if n.op.startswith("maximum") else B.minimum
    return fn(*_operands(n, ctx, dt))


@aten("elu.default")
def _elu(n: TorchNode, ctx: Context) -> Value:
    """``x * scale`` where ``x > 0``, else ``(exp(x * input_scale) - 1) * alpha * scale``."""
    x = _float_operand(n, ctx)
    dt = x.type.dtype
    alpha, scale = float(n.arg("alpha", 1.0)), float(n.arg("scale", 1.0))
    input_scale = float(n.arg("input_scale", 1.0))
    c = lambda v: B.constant(np.array(v, np.float64).astype(dt.numpy))  # noqa: E731
    inner = x if input_scale == 1 else B.mul(x, c(input_scale))
    neg = B.mul(B.sub(B.exp(inner), c(1.0)), c(alpha * scale))
    pos = x if scale == 1 else B.mul(x, c(scale))
    return B.where(B.greater(x, c(0.0)), pos, neg)


@aten("pow.Tensor_Scalar")
def _pow(n: TorchNode, ctx: Context) -> Value:
    e = n.arg("exponent")
    if not isinstance(e, (int, float)) or isinstance(e, bool):
        raise UnsupportedError(f"exponent {e!r}: only a number is supported")
    return B.pow(_float_operand(n, ctx), float(e))


# -- comparisons, logic, where ---------------------------------------------------------------

_COMPARE = {"eq": B.equal, "gt": B.greater, "ge": B.greater_equal, "lt": B.less,
            "le": B.less_equal}


def _compared(n: TorchNode, ctx: Context) -> tuple[Value, Value]:
    dt = ctx.common_dtype(n.arg("self"), n.arg("other"))
    if dt == DType.bool:
        dt = DType.uint8  # gradc compares numbers: False/True as 0/1
    return _operands(n, ctx, dt)


@aten(*(f"{op}.{kind}" for op in ("eq", "ne", "gt", "ge", "lt", "le")
        for kind in ("Tensor", "Scalar")))
def _compare(n: TorchNode, ctx: Context) -> Value:
    a, b = _compared(n, ctx)
    op = n.op.split(".")[0]
    if op == "ne":
        return _not(B.equal(a, b))
    return _COMPARE[op](a, b)


def _bool(v: Any, ctx: Context, field: str) -> Value:
    x = ctx.value(v, field)
    if x.type.dtype == DType.bool:
        return x
    return _not(B.equal(x, B.constant(np.zeros((), x.type.dtype.numpy))))


def _not(x: Value) -> Value:
    return B.where(x, B.constant(np.array(False)), B.constant(np.array(True)))


@aten("logical_not.default", "bitwise_not.default")
def _logical_not(n: TorchNode, ctx: Context) -> Value:
    if n.op.startswith("bitwise") and ctx.dtype(n) != DType.bool:
        raise UnsupportedError("bitwise_not of integers is not supported (bool only)")
    return _not(_bool(n.arg("self"), ctx, "self"))


@aten("logical_and.default", "logical_or.default", "bitwise_and.Tensor", "bitwise_or.Tensor")
def _logical(n: TorchNode, ctx: Context) -> Value:
    if n.op.startswith("bitwise") and ctx.dtype(n) != DType.bool:
        raise UnsupportedError(f"{n.op} of integers is not supported (bool only)")
    a, b = _bool(n.arg("self"), ctx, "self"), _bool(n.arg("other"), ctx, "other")
    if "and" in n.op:
        return B.where(a, b, B.constant(np.array(False)))
    return B.where(a, B.constant(np.array(True)), b)


@aten("where.self")
def _where(n: TorchNode, ctx: Context) -> Value:
    dt = ctx.dtype(n)
    cond = _bool(n.arg("condition"), ctx, "condition")
    return B.where(cond, ctx.operand(n.arg("self"), dt, "self"),
                   ctx.operand(n.arg("other"), dt, "other"))


# -- reductions ------------------------------------------------------------------------------


def _reduced(n: TorchNode, ctx: Context, field: str = "dim") -> tuple[Value, list[int], bool]:
    """The operand in the result's dtype, the reduced axes and keepdim."""
    x = ctx.operand(n.arg("self"), ctx.dtype(n, 0), "self")
    return x, axes(n.arg(field, None), x.type.rank, field), bool(n.arg("keepdim", False))


@aten("sum.dim_IntList")
def _sum(n: TorchNode, ctx: Context) -> Value:
    x, ax, keep = _reduced(n, ctx)
    _no_bool(x.type.dtype, n)
    return B.reduce_sum(x, ax, keep)


@aten("mean.dim", "mean.default")
def _mean(n: TorchNode, ctx: Context) -> Value:
    x, ax, keep = _reduced(n, ctx)
    return B.reduce_mean(x, ax, keep)


@aten("amax.default", "amin.default", "max.default", "min.default")
def _amax(n: TorchNode, ctx: Context) -> Value:
    x, ax, keep = _reduced(n, ctx)
    _no_bool(x.type.dtype, n)
    return (B.reduce_max if "max" in n.op else B.reduce_min)(x, ax, keep)


@aten("max.dim", "min.dim")
def _max_dim(n: TorchNode, ctx: Context) -> tuple[Value, None]:
    if n.used(1):
        raise UnsupportedError("the indices result (argmax/argmin) is not supported")
    x, ax, keep = _reduced(n, ctx)
    _no_bool(x.type.dtype, n)
    return (B.reduce_max if "max" in n.op else B.reduce_min)(x, ax, keep), None


@aten("any.dim", "any.dims", "any.default")
def _any(n: TorchNode, ctx: Context) -> Value:
    x = _bool(n.arg("self"), ctx, "self")
    ax = axes(n.arg("dim", None), x.type.rank)
    total = B.reduce_sum(B.cast(x, DType.int64), ax, bool(n.arg("keepdim", False)))
    return B.greater(total, B.constant(np.zeros((), np.int64)))


@aten("var.correction")
def _var(n: TorchNode, ctx: Context) -> Value:
    x, ax, keep = _reduced(n, ctx)
    correction = n.arg("correction", None)
    c = 1.0 if correction is None else float(correction)
    dt = x.type.dtype
    d = B.sub(x, B.reduce_mean(x, ax, True))
    total = B.reduce_sum(B.mul(d, d), ax, keep)
    count = B.element_count(x, ax, dt)
    return B.div(total, B.sub(count, B.constant(np.array(c, dt.numpy))))


# -- tensors made from sizes -----------------------------------------------------------------


def _filled(value: Any, dt: DType, like: Value) -> Value:
    return B.expand(B.constant(number(value, dt, "fill_value")), like)


@aten("full.default")
def _full(n: TorchNode, ctx: Context) -> Value:
    dims = ctx.shape(n)
    dt = ctx.dtype(n)
    if not dims:
        return B.constant(number(n.arg("fill_value"), dt, "fill_value"))
    return _filled(n.arg("fill_value"), dt, ctx.like(dims, "argument size"))


@aten("full_like.default")
def _full_like(n: TorchNode, ctx: Context) -> Value:
    value = n.arg("fill_value")
    if _only_broadcast(n.fx):  # (module docstring)
        return B.constant(number(value, ctx.dtype(n), "fill_value"))
    like = ctx.value(n.arg("self"), "self")
    if not like.type.shape:
        return B.constant(number(value, ctx.dtype(n), "fill_value"))
    return _filled(value, ctx.dtype(n), like)


def _only_broadcast(fx: Any) -> bool:
    """True when every reader of ``fx`` is a ``where`` that reads it as a value and whose
    result has the shape of its other operands broadcast without it."""
    if not fx.users:
        return False
    for u in fx.users:
        if aten_name(u.target) != "where.self" or u.args[0] is fx or len(u.args) != 3:
            return False
        others = [a for a in u.args if a is not fx]
        shapes = [tuple(a.meta["val"].shape) for a in others
                  if hasattr(a, "meta") and hasattr(a.meta.get("val"), "shape")]
        out = getattr(u.meta.get("val"), "shape", None)
        if out is None or len(shapes) != len(others) or _broadcast(shapes) != tuple(
                _size(d) for d in out):
            return False
    return True


def _broadcast(shapes: list[tuple]) -> tuple | None:
    """NumPy's broadcast of shapes, a symbolic size compared by its name (None when they
    clash)."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Any] = []
    for i in range(rank):
        dims = {_size(s[len(s) - rank + i]) for s in shapes if len(s) - rank + i >= 0}
        big = dims - {1}
        if len(big) > 1:
            return None
        out.append(big.pop() if big else 1)
    return tuple(out)


def _size(d: Any) -> int | str:
    return d if isinstance(d, int) else str(d)


__all__: list[str] = []
