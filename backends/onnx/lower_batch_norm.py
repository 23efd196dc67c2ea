"""ONNX lowerings of SPEC-training.md §12 (batch normalization), standard-domain ops only.

Every op is built from ``Sub``, ``Mul``, ``Div``, ``Add``, ``Sqrt``, ``ReduceSum`` and
``ReduceMean`` over the reduced axes (keepdims, so the statistics keep the parameters' shape),
never from ``BatchNormalization``: its training mode is rewritten wrongly by onnxruntime's
Conv fusion (§12.3), and its inference mode folds the parameters into one multiply-add.
float16 is widened to float32 and rounded once at the end, as the reference does. The
element-wise steps keep the reference's order, so ``batch_normalization`` is exact in
practice; the sums follow onnxruntime's order and are held to §9.5's bound.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.ir.core import Node
from gradc.ir.types import DType


class _Lower:
    """The work dtype, the reduced axes and small builders of one node's lowering."""

    def __init__(self, gb: OnnxGraphBuilder, node: Node, pshape: Sequence[Any]) -> None:
        self.gb = gb
        self.dtype = node.outputs[0].type.dtype
        self.work = DType.float32 if self.dtype == DType.float16 else self.dtype
        self.axes = [a for a, d in enumerate(pshape) if d == 1]
        self.pshape = tuple(pshape)
        self.eps = node.attrs["epsilon"]

    def w(self, t: Tensor) -> Tensor:
        """``t`` in the work dtype."""
        return self.gb.cast(t, self.work)

    def bin(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        """A broadcasting binary op."""
        return self.gb.binary(op, a, b)

    def reduce(self, op: str, t: Tensor) -> Tensor:
        """``ReduceSum``/``ReduceMean`` over the reduced axes, keepdims (none: ``t`` itself)."""
        if not self.axes:
            return t
        return self.gb.op(op, [t, self.gb.ints(self.axes)], t.dtype, self.pshape, keepdims=1)

    def dev(self, var: Tensor) -> Tensor:
        """``sqrt(var + epsilon)``; also returns ``var + epsilon``."""
        return self.gb.op("Sqrt", [self.add_eps(var)], self.work, var.shape)

    def add_eps(self, var: Tensor) -> Tensor:
        """``var + epsilon``."""
        return self.bin("Add", var, self.gb.scalar(self.eps, self.work))

    def out(self, t: Tensor) -> Tensor:
        """``t`` rounded once to the node's dtype."""
        return self.gb.cast(t, self.dtype)


def lower_batch_normalization(gb: OnnxGraphBuilder, node: Node,
                              args: Sequence[Tensor]) -> list[Tensor]:
    """scale * ((x - mean) / sqrt(var + eps)) + bias."""
    L = _Lower(gb, node, node.inputs[1].type.shape)
    x, mean, var, scale, bias = (L.w(t) for t in args)
    q = L.bin("Div", L.bin("Sub", x, mean), L.dev(var))
    return [L.out(L.bin("Add", L.bin("Mul", scale, q), bias))]


def lower_batch_normalization_grad(gb: OnnxGraphBuilder, node: Node,
                                   args: Sequence[Tensor]) -> list[Tensor]:
    """dX = dY * (scale / dev), dscale = sum(dY (x - mean)) / dev, dbias = sum(dY)."""
    L = _Lower(gb, node, node.inputs[2].type.shape)
    x, dy, mean, var, scale = (L.w(t) for t in args)
    dev = L.dev(var)
    dx = L.bin("Mul", dy, L.bin("Div", scale, dev))
    ds = L.bin("Div", L.reduce("ReduceSum", L.bin("Mul", dy, L.bin("Sub", x, mean))), dev)
    return [L.out(dx), L.out(ds), L.out(L.reduce("ReduceSum", dy))]


def lower_batch_normalization_training(gb: OnnxGraphBuilder, node: Node,
                                       args: Sequence[Tensor]) -> list[Tensor]:
    """Batch mean and biased variance by ``ReduceMean``, then the normalized output."""
    L = _Lower(gb, node, node.inputs[1].type.shape)
    x, scale, bias = (L.w(t) for t in args)
    mean = L.reduce("ReduceMean", x)
    d = L.bin("Sub", x, mean)
    var = L.reduce("ReduceMean", L.bin("Mul", d, d))
    y = L.bin("Add", L.bin("Mul", scale, L.bin("Div", d, L.dev(var))), bias)
    return [L.out(y), L.out(mean), L.out(var)]


def lower_batch_normalization_training_grad(gb: OnnxGraphBuilder, node: Node,
                                            args: Sequence[Tensor]) -> list[Tensor]:
    """(scale / dev) * ((dY - mean(dY)) - (x - mean) * mean(dY (x - mean)) / (var + eps))."""
    L = _Lower(gb, node, node.inputs[2].type.shape)
    x, dy, mean, var, scale = (L.w(t) for t in args)
    ve = L.add_eps(var)
    dev = gb.op("Sqrt", [ve], L.work, ve.shape)
    d = L.bin("Sub", x, mean)
    t = L.bin("Mul", dy, d)
    q = L.bin("Div", L.reduce("ReduceMean", t), ve)
    r = L.bin("Sub", L.bin("Sub", dy, L.reduce("ReduceMean", dy)), L.bin("Mul", d, q))
    dx = L.bin("Mul", L.bin("Div", scale, dev), r)
    ds = L.bin("Div", L.reduce("ReduceSum", t), dev)
    return [L.out(dx), L.out(ds), L.out(L.reduce("ReduceSum", dy))]


def lower_batch_norm_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {
        "batch_normalization": lower_batch_normalization,
        "batch_normalization_grad": lower_batch_normalization_grad,
        "batch_normalization_training": lower_batch_normalization_training,
        "batch_normalization_training_grad": lower_batch_normalization_training_grad,
    }
