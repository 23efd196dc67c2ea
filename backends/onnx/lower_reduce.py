"""ONNX lowerings of SPEC-training.md §14 (reductions) and §17 (softmax, log_softmax).

- ``reduce_mean``, ``softmax``, ``log_softmax``: onnxruntime's ``ReduceMean`` / ``Softmax`` /
  ``LogSoftmax`` (float16 through float32), which sum in their own order: within §9.5's bound.
  Softmax over several axes moves them last and joins them into one (``Transpose``,
  ``Reshape``), as the opset-1 coercion to 2-D does.
- ``reduce_max``, ``reduce_min`` and their gradients are exact: onnxruntime's ``ReduceMax``
  propagates NaN and promises no tie order, so the reduced axes are moved last and joined, the
  first extreme of an order-preserving key (NaN replaced by the worst value) is found with
  ``ArgMax``/``ArgMin``, groups whose best key is that worst value take their first non-NaN
  member (or the first element when all are NaN), and the result is gathered from the input by
  index (``GatherElements``: bit-exact copies). The gradient scatters ``dY`` at that index.
- ``element_count``: ``Shape``, ``Gather``, ``ReduceProd``, ``Cast`` (a constant when static).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.ir.core import Node
from gradc.ir.types import Dim, DType, element_count

F16, F32, I64 = DType.float16, DType.float32, DType.int64
KEY = {DType.float16: DType.float32, DType.int16: DType.int32, DType.uint16: DType.int32,
       DType.uint32: DType.int64}


def _work(dtype: DType) -> DType:
    return F32 if dtype == F16 else dtype


def _rows(gb: OnnxGraphBuilder, x: Tensor, axes: Sequence[int]) -> tuple[Tensor, list[int]]:
    """``x`` with the reduced axes moved last and joined: ``(M, k)``; and the permutation."""
    kept = [i for i in range(x.rank) if i not in axes]
    perm = kept + list(axes)
    if perm != list(range(x.rank)):
        x = gb.op("Transpose", [x], x.dtype, [x.shape[i] for i in perm], perm=perm)
    k = gb.product([x.shape[i] for i in range(len(kept), x.rank)])
    k1 = gb.ints([k]) if isinstance(k, int) else gb.reshape(k, (1,), [1])
    shape = gb.op("Concat", [gb.ints([-1]), k1], I64, (2,), axis=0)
    return gb.op("Reshape", [x, shape], x.dtype, ("?", "?")), perm


def _unrows(gb: OnnxGraphBuilder, rows: Tensor, x: Tensor, perm: list[int]) -> Tensor:
    """The inverse of ``_rows`` for a tensor of ``rows``'s shape."""
    moved = [x.shape[i] for i in perm]
    t = gb.op("Reshape", [rows, gb.shape_tensor(moved)], rows.dtype, moved)
    if perm == list(range(x.rank)):
        return t
    inv = [int(i) for i in np.argsort(perm)]
    return gb.op("Transpose", [t], rows.dtype, x.shape, perm=inv)


def _key(gb: OnnxGraphBuilder, rows: Tensor, largest: bool) -> Tensor:
    """An order-preserving key that ArgMax/ArgMin take; NaN becomes the worst value."""
    if rows.dtype == DType.uint64:
        flipped = gb.binary("BitwiseXor", rows, gb.scalar(1 << 63, DType.uint64))
        return gb.cast(flipped, I64)
    key = gb.cast(rows, KEY.get(rows.dtype, rows.dtype))
    if not rows.dtype.is_float:
        return key
    worst = gb.scalar(-np.inf if largest else np.inf, key.dtype)
    return gb.op("Where", [gb.op("IsNaN", [key], DType.bool, key.shape), worst, key],
                 key.dtype, key.shape)


def _index(gb: OnnxGraphBuilder, rows: Tensor, largest: bool) -> Tensor:
    """``(M, 1)`` int64: §14.2's selected member of every row."""
    key = _key(gb, rows, largest)
    arg = "ArgMax" if largest else "ArgMin"
    idx = gb.op(arg, [key], I64, ("?", 1), axis=1, keepdims=1)
    if not rows.dtype.is_float:
        return idx
    best = gb.op("GatherElements", [key, idx], key.dtype, ("?", 1), axis=1)
    worst = gb.scalar(-np.inf if largest else np.inf, key.dtype)
    number = gb.cast(gb.not_(gb.op("IsNaN", [rows], DType.bool, rows.shape)), DType.int32)
    first = gb.op("ArgMax", [number], I64, ("?", 1), axis=1, keepdims=1)
    return gb.op("Where", [gb.compare("Equal", best, worst), first, idx], I64, ("?", 1))


def _extreme(largest: bool) -> Any:
    def lower(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        (x,) = args
        out = node.outputs[0].type.shape
        if not node.attrs["axes"]:
            return [gb.op("Identity", [x], x.dtype, x.shape)]
        rows, _ = _rows(gb, x, node.attrs["axes"])
        y = gb.op("GatherElements", [rows, _index(gb, rows, largest)], x.dtype, ("?", 1), axis=1)
        return [gb.op("Reshape", [y, gb.shape_tensor(out)], x.dtype, out)]
    lower.__doc__ = "The selected element gathered by index (bit-exact)."
    return lower


def _extreme_grad(largest: bool) -> Any:
    def lower(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        x, dy = args
        rows, perm = _rows(gb, x, node.attrs["axes"])
        idx = _index(gb, rows, largest)
        zeros = gb.filled(gb.op("Shape", [rows], I64, (2,)), 0, x.dtype, ("?", "?"))
        dy1 = gb.op("Reshape", [dy, gb.ints([-1, 1])], x.dtype, ("?", 1))
        dx = gb.op("ScatterElements", [zeros, idx, dy1], x.dtype, ("?", "?"), axis=1)
        return [_unrows(gb, dx, x, perm)]
    lower.__doc__ = "dY scattered at the selected index into zeros."
    return lower


def lower_reduce_mean(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``ReduceMean`` in float32 (float16) or the dtype."""
    (x,) = args
    axes = tuple(node.attrs["axes"])
    out = node.outputs[0].type.shape
    if not axes:
        return [gb.op("Identity", [x], x.dtype, x.shape)]
    w = _work(x.dtype)
    m = gb.op("ReduceMean", [gb.cast(x, w), gb.ints(axes)], w, out,
              keepdims=int(node.attrs["keepdims"]))
    return [gb.cast(m, x.dtype)]


def lower_element_count(gb: OnnxGraphBuilder, node: Node,
                        args: Sequence[Tensor]) -> list[Tensor]:
    """The count: a constant when static, else Shape, Gather, ReduceProd, Cast."""
    (x,) = args
    axes = node.attrs["axes"]
    dt = node.outputs[0].type.dtype
    dims: list[Dim] = [x.shape[a] for a in axes]
    if all(not isinstance(d, str) for d in dims):
        with np.errstate(over="ignore"):
            return [gb.const(np.asarray(element_count(dims), np.int64).astype(dt.numpy), dt)]
    shape = gb.op("Shape", [x], I64, (x.rank,))
    picked = gb.op("Gather", [shape, gb.ints(axes)], I64, (len(axes),), axis=0)
    n = gb.op("ReduceProd", [picked], I64, (), keepdims=0)
    return [gb.cast(n, dt)]


def _softmax(op_type: str) -> Any:
    def lower(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
        (x,) = args
        axes = list(node.attrs["axes"])
        w = _work(x.dtype)
        xw = gb.cast(x, w)
        if axes == [x.rank - 1]:
            return [gb.cast(gb.op(op_type, [xw], w, x.shape, axis=-1), x.dtype)]
        rows, perm = _rows(gb, xw, axes)
        y = gb.op(op_type, [rows], w, ("?", "?"), axis=1)
        return [gb.cast(_unrows(gb, y, xw, perm), x.dtype)]
    lower.__doc__ = f"``{op_type}`` over the reduced axes moved last and joined."
    return lower


def lower_reduce_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {
        "reduce_mean": lower_reduce_mean,
        "reduce_max": _extreme(True), "reduce_min": _extreme(False),
        "reduce_max_grad": _extreme_grad(True), "reduce_min_grad": _extreme_grad(False),
        "element_count": lower_element_count,
        "softmax": _softmax("Softmax"), "log_softmax": _softmax("LogSoftmax"),
    }
