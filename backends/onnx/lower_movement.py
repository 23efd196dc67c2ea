"""ONNX lowerings of SPEC-training.md §15 (join, split, transpose, pad) and §18.1 (one_hot).

All exact (bit for bit, -0.0 and NaN payloads kept):

    join       Concat
    split      one Slice per result
    transpose  Transpose
    pad        Pad (mode constant); for float16, int16 and uint16 a Concat of ConstantOfShape
               slabs per padded axis (onnxruntime 1.31's Pad has no int16/uint16 kernel and
               rewrites float16 NaN payloads)
    one_hot    the position on ``axis`` as int64 (negative + depth; uint64 beyond int64: no
               match), Equal against Range(depth), then ``select`` of values[1] / values[0]

Concat, Slice and Transpose copy elements verbatim for every dtype (measured on onnxruntime
1.31, float16 signalling NaNs included).
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.ir.core import Node
from gradc.ir.types import Dim, DType

PAD_BY_CONCAT = frozenset({DType.float16, DType.int16, DType.uint16})


def lower_join(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Concat`` along ``axis``."""
    y = node.outputs[0]
    return [gb.op("Concat", list(args), y.type.dtype, y.type.shape, axis=node.attrs["axis"])]


def lower_split(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """One ``Slice`` per result, consecutive along ``axis``."""
    (x,) = args
    axis, start, out = node.attrs["axis"], 0, []
    for y, size in zip(node.outputs, node.attrs["split_sizes"]):
        out.append(gb.op("Slice", [x, gb.ints([start]), gb.ints([start + size]),
                                   gb.ints([axis])], x.dtype, y.type.shape))
        start += size
    return out


def lower_transpose(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Transpose`` with ``perm``."""
    (x,) = args
    y = node.outputs[0]
    return [gb.op("Transpose", [x], x.dtype, y.type.shape,
                  perm=list(node.attrs["permutation"]))]


def lower_pad(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """``Pad`` (constant mode), or Concat-ed slabs where onnxruntime's Pad is not exact."""
    (x,) = args
    sp, ep = node.attrs["start_padding"], node.attrs["end_padding"]
    value = node.attrs["padding_value"]
    y = node.outputs[0]
    if x.dtype not in PAD_BY_CONCAT:
        return [gb.op("Pad", [x, gb.ints(list(sp) + list(ep)), gb.scalar(value, x.dtype)],
                      x.dtype, y.type.shape, mode="constant")]
    cur = x
    for axis, (a, b) in enumerate(zip(sp, ep)):
        if not a and not b:
            continue
        parts = [_slab(gb, cur.shape, axis, a, value, x.dtype), cur,
                 _slab(gb, cur.shape, axis, b, value, x.dtype)]
        shape = list(cur.shape)
        shape[axis] = y.type.shape[axis]
        cur = gb.op("Concat", [p for p in parts if p is not None], x.dtype, shape, axis=axis)
    return [cur]


def _slab(gb: OnnxGraphBuilder, shape: Sequence[Dim], axis: int, n: int, value: Any,
          dtype: DType) -> Tensor | None:
    """``n`` layers of ``value`` along ``axis`` (None for none)."""
    if not n:
        return None
    dims = list(shape)
    dims[axis] = n
    return gb.filled(gb.shape_tensor(dims), value, dtype, dims)


def lower_one_hot(gb: OnnxGraphBuilder, node: Node, args: Sequence[Tensor]) -> list[Tensor]:
    """Equal(position, Range(depth)) selecting ``values[1]`` or ``values[0]``."""
    ind, vals = args
    axis = node.attrs["axis"]
    y = node.outputs[0]
    depth = y.type.shape[axis]
    assert isinstance(depth, int)
    i64 = DType.int64
    pos = gb.cast(ind, i64)
    if ind.dtype != DType.uint32:  # negative: + depth (signed), or uint64 >= 2**63: no match
        neg = gb.compare("Less", pos, gb.scalar(0, i64))
        moved = (gb.binary("Add", pos, gb.scalar(depth, i64)) if ind.dtype != DType.uint64
                 else gb.scalar(depth, i64))
        pos = gb.op("Where", [neg, moved, pos], i64, pos.shape)
    ones = [1] * len(y.type.shape)
    lane = list(ones)
    lane[axis] = depth
    positions = gb.reshape(gb.range(depth), lane)
    hit = gb.compare("Equal", pos, positions)
    on, off = (gb.reshape(gb.op("Slice", [vals, gb.ints([k]), gb.ints([k + 1]), gb.ints([0])],
                                vals.dtype, (1,)), ones) for k in (1, 0))
    out = gb.select(hit, on, off)
    if tuple(out.shape) != tuple(y.type.shape):
        out = gb.expand(out, y.type.shape)
    return [out]


def lower_movement_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {"join": lower_join, "split": lower_split, "transpose": lower_transpose,
            "pad": lower_pad, "one_hot": lower_one_hot}
