"""ONNX lowerings of SPEC-training.md §11 (gemm) and §13 (average pooling).

gemm is ``Transpose`` (for a transposed operand), ``MatMul`` (NumPy batch broadcasting), ``Mul``
by ``alpha``, and ``Add`` of ``Mul(beta, c)`` (not written when ``beta`` is 0: ``c`` is not read).
float16 operands are widened to float32 and the result rounded once, as the reference does.
onnxruntime sums in its own order, so the result is held to §9.5's bound, not bit-exactness.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.backends.onnx.lower_average_pooling import (
    lower_average_pooling, lower_average_pooling_grad,
)
from gradc.ir.core import Node
from gradc.ir.types import DType


def _swap(gb: OnnxGraphBuilder, t: Tensor) -> Tensor:
    r = len(t.shape)
    perm = list(range(r - 2)) + [r - 1, r - 2]
    return gb.op("Transpose", [t], t.dtype, [t.shape[p] for p in perm], perm=perm)


def lower_gemm(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """alpha * MatMul(op(a), op(b)) + beta * c, computed in float32 for float16."""
    dtype = node.outputs[0].type.dtype
    work = DType.float32 if dtype == DType.float16 else dtype
    a, b = gb.cast(args[0], work), gb.cast(args[1], work)
    if node.attrs["trans_a"]:
        a = _swap(gb, a)
    if node.attrs["trans_b"]:
        b = _swap(gb, b)
    shape = node.outputs[0].type.shape
    y = gb.op("MatMul", [a, b], work, shape)
    alpha, beta = node.attrs["alpha"], node.attrs["beta"]
    if alpha != 1:
        y = gb.binary("Mul", y, gb.scalar(alpha, work))
    if len(args) == 3 and beta != 0:
        c = gb.cast(args[2], work)
        if beta != 1:
            c = gb.binary("Mul", c, gb.scalar(beta, work))
        y = gb.op("Add", [y, c], work, shape)
    return [gb.cast(y, dtype)]


def lower_gemm_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {"gemm": lower_gemm, "average_pooling": lower_average_pooling,
            "average_pooling_grad": lower_average_pooling_grad}
