"""ONNX converters of SPEC-transformers.md §28.1 for §25: Gelu, Erf, Sin, Cos, IsNaN.

``Gelu`` (opset 20) becomes ``gelu`` with its ``approximate`` attribute; a GELU that an
exporter writes out (``Div``, ``Erf``, ``Add``, ``Mul``, or ``Mul``, ``Add``, ``Tanh``, ``Mul``)
imports op by op through each op's own converter and is never rewritten into ``gelu`` (that
would change the rounding, and onnxruntime computes the written ops). The ops take floats
(ONNX's ``Erf`` also takes integers, which gradc refuses by name).
"""

from __future__ import annotations

from gradc.errors import UnsupportedError
from gradc.ir import builders as ops
from gradc.ir.ops.activation import APPROXIMATIONS
from gradc.ir.ops.common import F
from gradc.backends.onnx.import_node import Context, OnnxNode, Produced, converter, require_dtype

_UNARY = {"Erf": "erf", "Sin": "sin", "Cos": "cos", "IsNaN": "is_nan"}


def _gelu_check(n: OnnxNode, ctx: Context) -> list[str]:
    mode = n.get_str("approximate", "none")
    if mode not in APPROXIMATIONS:
        return [f"attribute approximate: expected 'none' or 'tanh', got {mode!r}"]
    return []


@converter("Gelu", check=_gelu_check)
def _gelu(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "X")
    require_dtype(x, F, "X", "gelu")
    mode = n.get_str("approximate", "none")
    if mode not in APPROXIMATIONS:  # _gelu_check reports it first
        raise UnsupportedError(f"attribute approximate: expected 'none' or 'tanh', got {mode!r}")
    return [ops.gelu(x, mode)]


@converter(*_UNARY)
def _unary(n: OnnxNode, ctx: Context) -> list[Produced]:
    op = _UNARY[n.op]
    x = ctx.value(n, 0, "input" if n.op != "IsNaN" else "X")
    require_dtype(x, F, "input" if n.op != "IsNaN" else "X", op)
    return [getattr(ops, op)(x)]
