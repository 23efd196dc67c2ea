"""ONNX lowerings of SPEC-training.md §16: element-wise math, activations and selections.

- Exact ops (``div``, ``sqrt``, ``leaky_relu``, ``maximum``, ``minimum``, the comparisons,
  ``where``): one IEEE operation in the compute type (float16 through float32, as gradc's
  ``add``) and selections through ``OnnxGraphBuilder.select``, which copies bits.
- Transcendental ops (``exp``, ``log``, ``pow``, ``sigmoid``, ``tanh``): evaluated in float64 as
  the reference does (§9.5), then rounded once to the dtype (float16 correctly from float64).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.backends.onnx.lower_arith import _f64_to_f16, safe_binary
from gradc.ir.core import Node
from gradc.ir.types import DType

F16, F32, F64 = DType.float16, DType.float32, DType.float64


def _widen(gb: OnnxGraphBuilder, t: Tensor, to: DType) -> Tensor:
    """``t`` converted exactly to ``to``; a constant stays a constant."""
    if t.dtype == to:
        return t
    return gb.const(t.value, to) if t.value is not None else gb.cast(t, to)


def _narrow(gb: OnnxGraphBuilder, t: Tensor, to: DType) -> Tensor:
    """A float64 or float32 result rounded once to ``to``."""
    if t.dtype == F64 and to == F16:
        return _f64_to_f16(gb, t)
    return gb.cast(t, to)


def lower_div(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Div`` (float16 through float32, rounded once)."""
    a, b = args
    if a.dtype == F16:
        return [gb.cast(gb.binary("Div", _widen(gb, a, F32), _widen(gb, b, F32)), F16)]
    return [gb.binary("Div", a, b)]


def lower_sqrt(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Sqrt`` (float16 through float32, rounded once)."""
    (x,) = args
    w = F32 if x.dtype == F16 else x.dtype
    return [gb.cast(gb.op("Sqrt", [_widen(gb, x, w)], w, x.shape), x.dtype)]


def _in_f64(op_type: str) -> Any:
    def lower(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        (x,) = args
        extra: list[Tensor] = []
        if op_type == "Pow":
            extra = [gb.scalar(np.float64(node.attrs["exponent"]), F64)]
        w = _widen(gb, x, F64)
        if op_type == "Sigmoid":  # onnxruntime's double Sigmoid is far from 1 / (1 + exp(-x))
            e = gb.op("Exp", [gb.op("Neg", [w], F64, x.shape)], F64, x.shape)
            one = gb.scalar(1.0, F64)
            y = gb.binary("Div", one, gb.binary("Add", one, e))
        else:
            y = gb.op(op_type, [w, *extra], F64, x.shape)
        return [_narrow(gb, y, x.dtype)]
    lower.__doc__ = f"``{op_type}`` in float64, rounded once to the dtype (SPEC-training §9.5)."
    return lower


def lower_leaky_relu(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """x where x >= 0 (-0 included), else alpha * x in the compute type, rounded once."""
    (x,) = args
    w = F32 if x.dtype == F16 else x.dtype
    alpha = gb.scalar(node.attrs["alpha"], w)
    scaled = gb.cast(safe_binary(gb, "Mul", _widen(gb, x, w), alpha), x.dtype)
    keep = gb.compare("GreaterOrEqual", _widen(gb, x, w), gb.scalar(0, w))
    return [gb.select(keep, x, scaled, a_nan=False)]


def _compare_operands(gb: OnnxGraphBuilder, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Operands of a comparison: float16 widened exactly to float32."""
    if a.dtype == F16:
        return _widen(gb, a, F32), _widen(gb, b, F32)
    return a, b


def _extremum(op_type: str) -> Any:
    def lower(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        a, b = args
        wa, wb = _compare_operands(gb, a, b)
        pick = gb.compare(op_type, wa, wb)
        if a.dtype.is_float:
            pick = gb.binary("Or", pick, gb.op("IsNaN", [wb], DType.bool, wb.shape))
        return [gb.select(pick, a, b)]
    lower.__doc__ = f"``Where(Or({op_type}(a, b), IsNaN(b)), a, b)`` (SPEC-training §16.3)."
    return lower


def _comparison(op_type: str) -> Any:
    def lower(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        a, b = _compare_operands(gb, *args)
        return [gb.compare(op_type, a, b)]
    lower.__doc__ = f"``{op_type}`` (float16 compared in float32, which is exact)."
    return lower


def lower_where(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``a`` where ``condition`` else ``b``, copied bit for bit (``select``)."""
    c, a, b = args
    return [gb.select(c, a, b)]


def lower_math_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {
        "div": lower_div, "sqrt": lower_sqrt, "exp": _in_f64("Exp"), "log": _in_f64("Log"),
        "pow": _in_f64("Pow"), "sigmoid": _in_f64("Sigmoid"), "tanh": _in_f64("Tanh"),
        "leaky_relu": lower_leaky_relu,
        "maximum": _extremum("GreaterOrEqual"), "minimum": _extremum("LessOrEqual"),
        "greater": _comparison("Greater"), "less": _comparison("Less"),
        "equal": _comparison("Equal"), "greater_equal": _comparison("GreaterOrEqual"),
        "less_equal": _comparison("LessOrEqual"), "where": lower_where,
    }
