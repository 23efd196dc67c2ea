"""ONNX converters of SPEC-training.md §21 for §16: Div, Exp, Log, Sqrt, Pow, Max, Min, the
comparisons, Where, Sigmoid, Tanh, LeakyRelu; and Reciprocal (a ``div``).

Nodes whose inputs are all known at import (the shape arithmetic that exporters write) are
folded with ONNX's semantics (``import_fold``: integer ``Div`` truncates toward zero) before
these converters are asked; anything else becomes gradc ops. Integer ``Div`` of values not
known at import is refused (gradc's ``div`` is for floats, §16.1).
"""

from __future__ import annotations

import numpy as np

from gradc.errors import UnsupportedError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.ops.common import F
from gradc.ir.types import NUMERIC, DType
from gradc.backends.onnx.import_node import Context, OnnxNode, Produced, converter, require_dtype
from gradc.backends.onnx.import_logic import bool_equal

_COMPARE = {"Greater": "greater", "Less": "less", "Equal": "equal",
            "GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal"}


@converter("Div")
def _div(n: OnnxNode, ctx: Context) -> list[Produced]:
    a, b = ctx.value(n, 0, "A"), ctx.value(n, 1, "B")
    if not a.type.dtype.is_float:
        raise UnsupportedError(f"input A: integer Div ({a.type.dtype}) is supported only on "
                               "values known at import (gradc's div takes floats)")
    require_dtype(a, F, "A", "div")
    require_dtype(b, F, "B", "div")
    return [ops.div(a, b)]


@converter("Reciprocal")
def _reciprocal(n: OnnxNode, ctx: Context) -> list[Produced]:
    """1 / X: gradc's div (one IEEE division, as ONNX Runtime's kernel)."""
    x = ctx.value(n, 0, "X")
    require_dtype(x, F, "X", "div")
    return [ops.div(ops.constant(np.ones((), x.type.dtype.numpy), graph=ctx.graph), x)]


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
    with np.errstate(over="ignore"):  # a float64 exponent beyond float32's range is +-inf
        y = ops.pow(x, float(np.float32(e.reshape(-1)[0])))
    if e.ndim > x.type.rank:  # the broadcast adds leading 1s
        y = ops.reshape(y, (1,) * (e.ndim - x.type.rank) + tuple(x.type.shape))
    return [y]


@converter("Max", "Min")
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


@converter(*_COMPARE)
def _compare(n: OnnxNode, ctx: Context) -> list[Produced]:
    a, b = ctx.value(n, 0, "A"), ctx.value(n, 1, "B")
    op = _COMPARE[n.op]
    if n.op == "Equal" and a.type.dtype == b.type.dtype == DType.bool:
        return [bool_equal(ctx, a, b)]  # gradc's exporter writes "not c" as Equal(c, false)
    require_dtype(a, NUMERIC, "A", op)
    require_dtype(b, NUMERIC, "B", op)
    return [getattr(ops, op)(a, b)]


@converter("Where")
def _where(n: OnnxNode, ctx: Context) -> list[Produced]:
    c, x, y = (ctx.value(n, i, f) for i, f in enumerate(("condition", "X", "Y")))
    return [ops.where(c, x, y)]
