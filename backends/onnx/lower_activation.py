"""ONNX lowerings of SPEC-transformers.md §25: gelu, gelu_grad, erf, sin, cos, is_nan.

onnxruntime 1.32 (CPU) runs ``Gelu``-20 (both ``approximate`` values), ``Erf``, ``Sin`` and
``Cos`` for float32 and float16 within §25.4 of the reference (measured over every float16 and
millions of float32 values with |x| up to 3.4e38: ``Erf`` 1 ulp, ``Sin``/``Cos`` 2 ulps, ``Gelu``
within 1.06 of the absolute term's 4), so float32 uses them as they are and float16 goes through
float32 (one more rounding: still within 1 float16 ulp, exhaustively checked). For float64 it has
no ``Erf`` and no erf-mode ``Gelu`` kernel, a tanh-mode ``Gelu`` that is far off, and ``Sin``/
``Cos`` that lose the reduced argument near pi .. 4 pi, so float64 writes the functions out
(``lower_libm64``) and evaluates §25.1-§25.2's formulas as the reference does.

- ``gelu``: float16/32 ``Gelu``; float64 ``x * (0.5 * erfc(-x / sqrt 2))`` or
  ``x * (1 / (1 + exp(-2u)))``, the reference's operations in its order.
- ``gelu_grad``: the derivative, then one multiply by dY in ACC (§25.2). The tanh form in float64
  for every dtype (float32's ``x**2`` would overflow to PyTorch's NaN at |x| > 1.8e19), rounded
  once to ACC; the erf form in float64 with ``erfc64``, and for float16/32 in float32 as
  PyTorch's kernel writes it, ``0.5 * (1 + Erf(x / sqrt 2)) + x * (exp(x * x * -0.5) / sqrt(2 pi))``
  (its cancellation in ``1 + erf`` is within the absolute term). NaN where x is not finite.
- ``erf``, ``sin``, ``cos``: float16/32 ``Erf``/``Sin``/``Cos`` in float32; float64 written out.
- ``is_nan``: ``IsNaN`` (exact).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.backends.onnx.lower_libm64 import cos64, erf64, erfc64, sin64
from gradc.ir.core import Node
from gradc.ir.types import DType

F16, F32, F64 = DType.float16, DType.float32, DType.float64
SQRT1_2 = 0.7071067811865476  # the float64 constants of gradc.ir.ops.activation
SQRT_2_PI = 0.7978845608028654
INV_SQRT_2PI = 0.3989422804014327
K3 = 0.134145  # 3 * 0.044715
Lowering = Callable[[OnnxGraphBuilder, Node, Sequence[Tensor]], list[Tensor]]


class _Math:
    """Arithmetic of one dtype on ONNX tensors, in the order written (a float is a constant)."""

    def __init__(self, gb: OnnxGraphBuilder, dtype: DType) -> None:
        self.gb, self.dtype = gb, dtype

    def t(self, v: Tensor | float) -> Tensor:
        return v if isinstance(v, Tensor) else self.gb.scalar(np.float64(v), self.dtype)

    def op(self, op_type: str, *args: Tensor | float) -> Tensor:
        ts = [self.t(a) for a in args]
        return self.gb.binary(op_type, ts[0], ts[1]) if len(ts) == 2 else \
            self.gb.op(op_type, ts, self.dtype, ts[0].shape)


def _in_f32(gb: OnnxGraphBuilder, x: Tensor, build: Callable[[Tensor], Tensor]) -> Tensor:
    """``build`` on float32 (float16 widened exactly, the result rounded back once)."""
    return gb.cast(build(gb.cast(x, F32)), x.dtype)


def _gelu64(gb: OnnxGraphBuilder, x: Tensor, approximation: str) -> Tensor:
    m = _Math(gb, F64)
    if approximation == "none":
        phi = m.op("Mul", 0.5, erfc64(gb, m.op("Mul", m.op("Neg", x), SQRT1_2)))
    else:
        phi = m.op("Div", 1.0, m.op("Add", 1.0, m.op("Exp", m.op("Mul", -2.0, _u(m, x)))))
    return m.op("Mul", x, phi)


def _u(m: _Math, x: Tensor) -> Tensor:
    """``sqrt(2/pi) * (x + 0.044715 * x * x * x)``."""
    cube = m.op("Mul", m.op("Mul", m.op("Mul", 0.044715, x), x), x)
    return m.op("Mul", SQRT_2_PI, m.op("Add", x, cube))


def _finite_or_nan(m: _Math, x: Tensor, d: Tensor) -> Tensor:
    """``d`` where ``x`` is finite, else NaN (``x - x`` is 0 exactly for finite x)."""
    finite = m.gb.compare("Equal", m.op("Sub", x, x), m.t(0.0))
    return m.gb.op("Where", [finite, d, m.t(float("nan"))], m.dtype, d.shape)


def _slope_tanh64(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    m = _Math(gb, F64)
    u = _u(m, x)
    p = m.op("Div", 1.0, m.op("Add", 1.0, m.op("Exp", m.op("Mul", -2.0, u))))
    q = m.op("Div", 1.0, m.op("Add", 1.0, m.op("Exp", m.op("Mul", 2.0, u))))
    pq = m.op("Mul", p, q)
    second = m.op("Mul", m.op("Mul", m.op("Mul", m.op("Mul", 2.0, x), pq), SQRT_2_PI),
                  m.op("Add", 1.0, m.op("Mul", m.op("Mul", K3, x), x)))
    underflow = gb.compare("Equal", pq, m.t(0.0))
    d = m.op("Add", p, gb.op("Where", [underflow, m.t(0.0), second], F64, x.shape))
    return _finite_or_nan(m, x, d)


def _slope_none(gb: OnnxGraphBuilder, x: Tensor) -> Tensor:
    """Φ(x) + x φ(x) in x's dtype (float64: erfc64; float32: ``0.5 * (1 + Erf(x / sqrt 2))``)."""
    m = _Math(gb, x.dtype)
    if x.dtype == F64:
        cdf = m.op("Mul", 0.5, erfc64(gb, m.op("Mul", m.op("Neg", x), SQRT1_2)))
    else:
        cdf = m.op("Mul", 0.5, m.op("Add", 1.0, m.op("Erf", m.op("Mul", x, SQRT1_2))))
    pdf = m.op("Mul", m.op("Exp", m.op("Mul", m.op("Mul", x, x), -0.5)), INV_SQRT_2PI)
    return _finite_or_nan(m, x, m.op("Add", cdf, m.op("Mul", x, pdf)))


def lower_gelu(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """float16/32: ``Gelu``-20 in float32; float64: §25.1's formula (see the module)."""
    (x,) = args
    mode = node.attrs["approximation"]
    if x.dtype == F64:
        return [_gelu64(gb, x, mode)]
    return [_in_f32(gb, x, lambda w: gb.op("Gelu", [w], F32, w.shape, approximate=mode))]


def lower_gelu_grad(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """dY * gelu'(x): the derivative (see the module) in ACC, one multiply by dY."""
    x, dy = args
    acc = F64 if x.dtype == F64 else F32
    if node.attrs["approximation"] == "tanh":
        d = gb.cast(_slope_tanh64(gb, gb.cast(x, F64)), acc)
    else:
        d = _slope_none(gb, gb.cast(x, acc))
    return [gb.cast(gb.binary("Mul", gb.cast(dy, acc), d), x.dtype)]


def _unary(op_type: str, f64: Callable[[OnnxGraphBuilder, Tensor], Tensor]) -> Lowering:
    def lower(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        (x,) = args
        if x.dtype == F64:
            return [f64(gb, x)]
        return [_in_f32(gb, x, lambda w: gb.op(op_type, [w], F32, w.shape))]
    lower.__doc__ = f"float16/32: ``{op_type}`` in float32; float64: written out (lower_libm64)."
    return lower


def lower_is_nan(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``IsNaN`` (onnxruntime has it for float16, float32 and float64)."""
    (x,) = args
    return [gb.op("IsNaN", [x], DType.bool, x.shape)]


def lower_activation_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {
        "gelu": lower_gelu, "gelu_grad": lower_gelu_grad, "erf": _unary("Erf", erf64),
        "sin": _unary("Sin", sin64), "cos": _unary("Cos", cos64), "is_nan": lower_is_nan,
    }
