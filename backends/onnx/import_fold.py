"""Arithmetic, comparisons, logic and masks on values known at import (SPEC-transformers §28.2).

Exporters build shapes, positions and causal masks from small chains: ``C // h`` of a shape
element, ``Range`` of a sequence length, ``Trilu`` of a constant, ``Equal``/``Where`` to turn a
0/1 mask into a bias. Where every input is known (``import_shape.fold_node``: a constant that is
no parameter, or an element of a static shape) the importer evaluates the node here with ONNX's
semantics, so the chain ends in a constant.

A symbolic dim travels as its name in an object array (``import_shape``). Arithmetic keeps it only
where the result is the symbol itself (``N * 1``, ``N + 0``, ``N - 0``, ``N / 1``) and compares it
only with itself (``Equal(N, N)`` is true); anything else needs the symbol's value, which gradc
does not have at import, so the folder declines (``TypeError``) and the node's converter, or the
importer's refusal, names the symbol. Float arithmetic that gradc has an op for (``numeric``)
folds only where an operand derives from a shape, so a model's own float computations stay gradc
nodes; comparisons, ``Where``, logic, ``Trilu`` and what gradc has no op for (``Mod``, ``Floor``,
``Ceil``, ``ReduceProd``) fold on any known values.

``Trilu`` that does not fold (its input is computed, or too large to fold) becomes
``where(constant mask, X, 0)`` when its last two dims are static.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as ops
from gradc.ir.types import element_count
from gradc.backends.onnx.format import dtype_of
from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, int_list, normalize_axes,
)
from gradc.backends.onnx.import_schema import signature
from gradc.backends.onnx.import_shape import FOLD_LIMIT, LIKE_LIMIT, folder, symbolic_error

# -- symbols ------------------------------------------------------------------------------------


def has_symbol(a: Any) -> bool:
    """True for an object array holding a symbolic dim (its name)."""
    return isinstance(a, np.ndarray) and a.dtype == object and any(
        isinstance(v, str) for v in a.reshape(-1))


# (op, the operand position that may be a symbol, the other's value) -> the result is the symbol
_KEEPS = {("Add", 0, 0), ("Add", 1, 0), ("Sub", 0, 0), ("Mul", 0, 1), ("Mul", 1, 1),
          ("Div", 0, 1)}
_SAME: dict[str, bool] = {"Equal": True, "LessOrEqual": True, "GreaterOrEqual": True,
                          "Less": False, "Greater": False, "Max": True, "Min": True}


def _with_symbols(op: str, fn: Callable[[Any, Any], Any], a: np.ndarray,
                  b: np.ndarray) -> np.ndarray:
    """``fn`` elementwise over two arrays where some elements are symbols (see above)."""
    x, y = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    out = np.empty(x.shape, dtype=object)
    for i, (p, q) in enumerate(zip(x.reshape(-1), y.reshape(-1))):
        if not isinstance(p, str) and not isinstance(q, str):
            out.reshape(-1)[i] = fn(p, q)
        elif isinstance(p, str) and (op, 0, q) in _KEEPS:
            out.reshape(-1)[i] = p
        elif isinstance(q, str) and (op, 1, p) in _KEEPS:
            out.reshape(-1)[i] = q
        elif op in _SAME and p == q:
            out.reshape(-1)[i] = p if op in ("Max", "Min") else _SAME[op]
        else:
            raise TypeError(f"{op} needs the value of a symbolic dim")
    return out


# -- arithmetic ---------------------------------------------------------------------------------

def _trunc_div(a: Any, b: Any) -> Any:
    """ONNX integer Div of Python ints: the quotient truncated toward zero (C's ``/``)."""
    q = abs(int(a)) // abs(int(b))
    return -q if (a < 0) != (b < 0) else q


_PY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": _trunc_div,
    "Mod": operator.mod}


def _np_ints(n: OnnxNode, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer arithmetic as ONNX Runtime does it: wrapping, Div truncating toward zero, Mod
    with the divisor's sign (``fmod=0``) or the dividend's (``fmod=1``)."""
    if n.op == "Div":
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q)
    if n.op == "Mod":
        return np.fmod(a, b) if n.get_int("fmod", 0) else np.mod(a, b)
    return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[n.op](a, b)


@folder("Add", "Sub", "Mul", "Div", numeric=True)
@folder("Mod")  # gradc has no mod: folding is the only way, whatever the dtype
def _fold_arithmetic(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    a, b = args[0], args[1]
    ints = all(x.dtype.kind in "iuO" for x in (a, b))
    if n.op in ("Div", "Mod") and ints and any(
            not isinstance(v, str) and v == 0 for v in b.reshape(-1)):
        raise UnsupportedError(f"input B: integer {n.op} by zero (of values known at import)")
    if n.op == "Mod" and not ints and not n.get_int("fmod", 0):
        raise VerifyError("attribute fmod: expected 1 for floating-point operands, got 0")
    if has_symbol(a) or has_symbol(b):
        if n.op == "Mod" and n.get_int("fmod", 0):
            raise TypeError("a symbol")
        return [_with_symbols(n.op, _PY[n.op], a, b)]  # symbols where they stay (see above)
    if ints:
        return [np.asarray(_np_ints(n, a, b)).astype(a.dtype)]
    fn = np.fmod if n.op == "Mod" else {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                                        "Div": np.divide}[n.op]
    return [np.asarray(fn(a, b)).astype(a.dtype)]


@folder("Neg", "Abs", numeric=True)
@folder("Floor", "Ceil")  # gradc has no rounding op: as Mod
def _fold_unary(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    a = args[0]
    if a.dtype == object:
        raise TypeError("a symbol")
    fn = {"Neg": np.negative, "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil}[n.op]
    return [np.asarray(fn(a)).astype(a.dtype)]


@folder("Pow", "Sqrt", "Reciprocal", numeric=True)
def _fold_power(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    """Scales computed from a shape (``1 / sqrt(C // h)``): float only, with NumPy's IEEE
    operations (an integer power of an integer is left to the converter)."""
    a = args[0]
    if a.dtype.kind != "f":
        raise TypeError("integer powers do not fold")
    if n.op == "Sqrt":
        return [np.sqrt(a)]
    if n.op == "Reciprocal":
        return [np.asarray(np.divide(np.ones((), a.dtype), a)).astype(a.dtype)]
    e = args[1]
    if e.dtype == object:
        raise TypeError("a symbol")
    return [np.asarray(np.power(a, e.astype(a.dtype))).astype(a.dtype)]


@folder("Max", "Min", numeric=True)
def _fold_extremum(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    parts = [a for a in args if a is not None]
    out = parts[0]
    if any(has_symbol(p) for p in parts):
        pick = max if n.op == "Max" else min
        for p in parts[1:]:
            out = _with_symbols(n.op, lambda x, y: pick(x, y), out, p)
        return [out]
    fn = np.maximum if n.op == "Max" else np.minimum
    for p in parts[1:]:
        out = fn(out, p)
    return [np.asarray(out).astype(parts[0].dtype)]


# -- comparisons, logic, selection ---------------------------------------------------------------

_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "Equal": operator.eq, "Less": operator.lt, "Greater": operator.gt,
    "LessOrEqual": operator.le, "GreaterOrEqual": operator.ge}


@folder(*_COMPARE)
def _fold_compare(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    a, b = args[0], args[1]
    if has_symbol(a) or has_symbol(b):
        return [_with_symbols(n.op, _COMPARE[n.op], a, b).astype(bool)]
    return [np.asarray(_COMPARE[n.op](a, b)).astype(bool)]


_LOGIC: dict[str, Callable[..., Any]] = {"And": np.logical_and, "Or": np.logical_or,
                                         "Xor": np.logical_xor, "Not": np.logical_not}


@folder(*_LOGIC)
def _fold_logic(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    return [np.asarray(_LOGIC[n.op](*args)).astype(bool)]


@folder("Where")
def _fold_where(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    cond, x, y = args
    out = np.where(cond, x, y)
    return [out if out.dtype == object else out.astype(x.dtype)]


@folder("CastLike")
def _fold_cast_like(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    a, like = args[0], args[1]
    if a.dtype == object:
        if like.dtype.kind not in "iu":
            raise TypeError("a symbolic dim is no float")
        return [a]
    with np.errstate(all="ignore"):
        return [a.astype(like.dtype)]


@folder("ReduceProd")
def _fold_reduce_prod(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    data = args[0]
    if data.dtype == object:
        raise TypeError("the product of a symbolic dim")
    given = args[1] if len(args) > 1 else None
    axes = int_list(given, "axes") if given is not None else n.get_ints("axes", None)
    keep = bool(n.get_int("keepdims", 1))
    if not axes:
        if n.get_int("noop_with_empty_axes", 0) and given is not None:
            return [data]
        return [np.asarray(np.prod(data, keepdims=keep)).astype(data.dtype)]
    axes = normalize_axes(axes, data.ndim, "axes")
    return [np.asarray(np.prod(data, axis=tuple(axes), keepdims=keep)).astype(data.dtype)]


# -- Trilu --------------------------------------------------------------------------------------

def _trilu_k(n: OnnxNode, k: np.ndarray | None) -> int:
    if k is None:
        return 0
    if k.size != 1 or k.dtype.kind not in "iu":
        raise VerifyError(f"input k: expected one int64, got {k.dtype}{list(k.shape)}")
    return int(k.reshape(-1)[0])


def trilu_mask(rows: int, cols: int, k: int, upper: bool) -> np.ndarray:
    """The kept positions of Trilu: upper keeps ``j - i >= k``, lower ``j - i <= k``."""
    i, j = np.ogrid[:rows, :cols]
    return (j - i >= k) if upper else (j - i <= k)


@folder("Trilu")
def _fold_trilu(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    x = args[0]
    if x.ndim < 2:
        raise VerifyError(f"input input: expected rank >= 2, got {x.ndim}")
    if x.dtype == object:
        raise TypeError("a symbol")
    k = _trilu_k(n, args[1] if len(args) > 1 else None)
    mask = trilu_mask(x.shape[-2], x.shape[-1], k, bool(n.get_int("upper", 1)))
    return [np.where(mask, x, np.zeros((), x.dtype)).astype(x.dtype)]


@converter("Trilu", const_inputs=((1, "k"),))
def _trilu(n: OnnxNode, ctx: Context) -> list[Produced]:
    """A computed input: where(constant mask, X, 0) over the last two (static) dims."""
    x = ctx.value(n, 0, "input")
    shape = x.type.shape
    if x.type.rank < 2:
        raise VerifyError(f"input input: expected rank >= 2, got {x.type.rank}")
    rows, cols = shape[-2], shape[-1]
    for d in (rows, cols):
        if isinstance(d, str):  # the mask is a constant of the last two dims
            raise symbolic_error("input input", np.array([d], dtype=object))
    if element_count([rows, cols]) > LIKE_LIMIT:
        raise UnsupportedError(f"input input: a {rows}x{cols} mask is larger than gradc bakes "
                               f"into a model ({LIKE_LIMIT} elements)")
    k = _trilu_k(n, ctx.const(n, 1, "k"))
    mask = trilu_mask(int(rows), int(cols), k, bool(n.get_int("upper", 1)))
    zero = ops.constant(np.zeros((), x.type.dtype.numpy), graph=ctx.graph)
    return [ops.where(ops.constant(mask, graph=ctx.graph), x, zero)]


# -- what only folds ----------------------------------------------------------------------------

@converter("Range", "Floor", "Ceil", "Mod", "ReduceProd")
def _fold_only(n: OnnxNode, ctx: Context) -> list[Produced]:
    """Reached where the node did not fold: name the input that is not known, or the symbol."""
    sig = signature(n.op, ctx.opset)
    for i, name in enumerate(n.inputs):
        if name and ctx.is_const(name):
            ctx.const(n, i, sig.input_name(i) if sig else str(i))  # a symbol: §28's refusal
    raise UnsupportedError(f"gradc imports {n.op} only where its inputs are known at import "
                           "(constants that are no parameters, or static shapes)")


__all__ = ["has_symbol", "trilu_mask", "FOLD_LIMIT", "dtype_of"]
