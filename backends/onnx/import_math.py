"""ONNX converters of SPEC-training.md §21 for §16: Div, Exp, Log, Sqrt, Pow, Max, Min, the
comparisons, Where, Sigmoid, Tanh, LeakyRelu.

Nodes whose inputs are all integer or bool constants (the shape arithmetic that exporters write)
are folded at import with ONNX's semantics (integer ``Div`` truncates toward zero); anything
else becomes gradc ops. Integer ``Div`` of non-constant operands is refused (gradc's ``div`` is
for floats, §16.1).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradc.errors import UnsupportedError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.ops.common import F
from gradc.ir.types import NUMERIC, DType
from gradc.backends.onnx.import_node import Context, OnnxNode, Produced, converter, require_dtype
from gradc.backends.onnx.import_logic import bool_equal

_NP_COMPARE: dict[str, Callable[..., Any]] = {
    "Greater": np.greater, "Less": np.less, "Equal": np.equal,
    "GreaterOrEqual": np.greater_equal, "LessOrEqual": np.less_equal,
}
_COMPARE = {"Greater": "greater", "Less": "less", "Equal": "equal",
            "GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal"}


def _const_inputs(n: OnnxNode, ctx: Context) -> list[np.ndarray] | None:
    """Every input's array when all are integer or bool constants (shape arithmetic), else None."""
    names = [x for x in n.inputs if x]
    if not names or not all(ctx.is_const(x) for x in names):
        return None
    arrays = [ctx.const(n, i, f"input {i}") for i in range(len(n.inputs))]
    if any(a is None or a.dtype.kind not in "iub" for a in arrays):
        return None
    return [a for a in arrays if a is not None]


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX integer Div: the quotient truncated toward zero (C's ``/``)."""
    if (b == 0).any():
        raise UnsupportedError("integer division by zero in a constant Div")
    q = np.abs(a.astype(object)) // np.abs(b.astype(object))
    q = np.where(np.sign(a.astype(object)) * np.sign(b.astype(object)) < 0, -q, q)
    return np.asarray(q).astype(np.result_type(a, b))


def _fold(n: OnnxNode, ctx: Context) -> list[np.ndarray] | None:
    arrays = _const_inputs(n, ctx)
    if arrays is None:
        return None
    if n.op == "Div":
        return [_trunc_div(*arrays)]
    if n.op in _NP_COMPARE:
        return [np.asarray(_NP_COMPARE[n.op](*arrays))]
    if n.op == "Where":
        return [np.asarray(np.where(*arrays))]
    if n.op in ("Max", "Min"):
        fn = np.maximum if n.op == "Max" else np.minimum
        out = arrays[0]
        for a in arrays[1:]:
            out = fn(out, a)
        return [np.asarray(out)]
    return None


@converter("Div", fold=_fold)
def _div(n: OnnxNode, ctx: Context) -> list[Produced]:
    a, b = ctx.value(n, 0, "A"), ctx.value(n, 1, "B")
    if not a.type.dtype.is_float:
        raise UnsupportedError(f"input A: integer Div ({a.type.dtype}) is supported only when "
                               "both operands are constants (gradc's div takes floats)")
    require_dtype(a, F, "A", "div")
    require_dtype(b, F, "B", "div")
    return [ops.div(a, b)]


_UNARY = {"Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Sigmoid": "sigmoid", "Tanh": "tanh"}


@converter(*_UNARY)
def _unary(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "input")
    op = _UNARY[n.op]
    require_dtype(x, F, "input", op)
    return [getattr(ops, op)(x)]


@converter("LeakyRelu")
def _leaky_relu(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "X")
    require_dtype(x, F, "X", "leaky_relu")
    return [ops.leaky_relu(x, n.get_float("alpha", 0.01))]


def _pow_check(n: OnnxNode, ctx: Context) -> list[str]:
    name = n.input(1)
    if not name:
        return ["input Y: the exponent is a required input, missing"]
    if ctx.is_const(name):
        e = ctx.const(n, 1, "Y")
        if e is not None and e.size != 1:
            return [f"input Y ({name!r}): the exponent must hold one value, got shape "
                    f"{list(e.shape)}"]
    return []


@converter("Pow", const_inputs=((1, "Y"),), check=_pow_check)
def _pow(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "X")
    require_dtype(x, F, "X", "pow")
    e = ctx.const(n, 1, "Y")
    if e is None:  # _pow_check reports a missing exponent first
        raise UnsupportedError("input Y: the exponent must be a constant")
    y = ops.pow(x, float(np.float32(e.reshape(-1)[0])))
    if e.ndim > x.type.rank:  # the broadcast adds leading 1s
        y = ops.reshape(y, (1,) * (e.ndim - x.type.rank) + tuple(x.type.shape))
    return [y]


@converter("Max", "Min", fold=_fold)
def _extremum(n: OnnxNode, ctx: Context) -> list[Produced]:
    op = "maximum" if n.op == "Max" else "minimum"
    xs = [ctx.value(n, i, f"data_0[{i}]") for i in range(len(n.inputs))]
    if not xs:
        raise UnsupportedError("no inputs")
    for i, x in enumerate(xs):
        require_dtype(x, NUMERIC, f"data_0[{i}]", op)
    if len(xs) == 1:
        return [ops.identity(xs[0])]
    out: Value = xs[0]
    for x in xs[1:]:
        out = getattr(ops, op)(out, x)
    return [out]


@converter(*_COMPARE, fold=_fold)
def _compare(n: OnnxNode, ctx: Context) -> list[Produced]:
    a, b = ctx.value(n, 0, "A"), ctx.value(n, 1, "B")
    op = _COMPARE[n.op]
    if n.op == "Equal" and a.type.dtype == b.type.dtype == DType.bool:
        return [bool_equal(ctx, a, b)]  # gradc's exporter writes "not c" as Equal(c, false)
    require_dtype(a, NUMERIC, "A", op)
    require_dtype(b, NUMERIC, "B", op)
    return [getattr(ops, op)(a, b)]


@converter("Where", fold=_fold)
def _where(n: OnnxNode, ctx: Context) -> list[Produced]:
    c, x, y = (ctx.value(n, i, f) for i, f in enumerate(("condition", "X", "Y")))
    return [ops.where(c, x, y)]
