"""ONNX converters of SPEC-training.md §21 for data movement and one-hot: Concat, Split,
Transpose, Pad, OneHot, Flatten, Squeeze and Unsqueeze (the last three through ``reshape``).

Where every input is known at import, ``import_shape`` folds Concat, Squeeze, Unsqueeze and
(with the folder registered here) Transpose before these converters run; they build gradc nodes
for values computed at run time.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.ops.movement import MOVE_DTYPES, PAD_DTYPES
from gradc.ir.types import Dim, DType
from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, int_list, normalize_axes, require_dtype, require_rank,
)
from gradc.backends.onnx.import_shape import folder

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _axis(n: OnnxNode, rank: int, default: int | None, field: str = "axis") -> int:
    """An axis attribute in ``-rank..rank-1``, normalized (VerifyError outside)."""
    a = n.get_int(field, default if default is not None else 0)
    if default is None and not n.has(field):
        raise VerifyError(f"attribute {field}: expected an int, got none")
    if not -rank <= a < rank:
        raise VerifyError(f"attribute {field}: expected an axis in {-rank}..{rank - 1}, got {a}")
    return a % rank


# -- Concat, Split, Transpose -----------------------------------------------------------------


@converter("Concat")
def _concat(n: OnnxNode, ctx: Context) -> list[Produced]:
    xs = [ctx.value(n, i, f"inputs[{i}]") for i in range(len(n.inputs))]
    if not xs:
        raise VerifyError("inputs: expected at least one input, got none")
    for i, x in enumerate(xs):
        require_dtype(x, MOVE_DTYPES, f"inputs[{i}]", "join")
        require_rank(x, 1, 8, f"inputs[{i}]", "join")
    axis = _axis(n, xs[0].type.rank, 1 if ctx.opset < 4 else None)
    return [ops.join(xs, axis)]


def _split_sizes(n: OnnxNode, ctx: Context, size: int) -> list[int]:
    """The parts' sizes: given (attribute or input), else equal parts (SPEC-training §21)."""
    count = len(n.outputs)
    if ctx.opset < 13:
        given = n.get_ints("split", None)
    else:
        a = ctx.const(n, 1, "split")
        given = None if a is None else int_list(a, "split")
    if given is not None:
        if len(given) != count:
            raise VerifyError(f"split: expected {count} sizes (one per output), got "
                              f"{len(given)}")
        return given
    if ctx.opset >= 18 and n.has("num_outputs"):
        parts = n.get_int("num_outputs", 0)
        if parts != count or parts < 1:
            raise VerifyError(f"attribute num_outputs: expected {count} (the outputs), got "
                              f"{parts}")
        step = -(-size // parts)
        sizes = [min(step, size - k * step) for k in range(parts)]
        if sizes[-1] < 1:
            raise UnsupportedError(f"attribute num_outputs: {parts} parts of {size} leave an "
                                   "empty output (gradc has no empty tensors)")
        return sizes
    if ctx.opset >= 18:
        raise VerifyError("attribute num_outputs: expected it or the split input, got neither")
    if size % count:
        raise VerifyError(f"outputs: expected a count that divides the axis size {size}, got "
                          f"{count}")
    return [size // count] * count


@converter("Split", const_inputs=((1, "split"),))
def _split(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "input")
    require_dtype(x, MOVE_DTYPES, "input", "split")
    rank = require_rank(x, 1, 8, "input", "split")
    axis = _axis(n, rank, 0)
    size = x.type.shape[axis]
    if isinstance(size, str):
        raise UnsupportedError(f"attribute axis: the split axis {axis} has the symbolic size "
                               f"{size!r} (gradc split needs a static size)")
    return list(ops.split(x, axis, _split_sizes(n, ctx, size)))


@folder("Transpose")
def _fold_transpose(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    """A Transpose of values known at import (PyTorch's TorchScript exporter computes F.pad's
    pads with Slice, Transpose and Reshape of constants)."""
    data = args[0]
    perm = n.get_ints("perm", list(range(data.ndim - 1, -1, -1)))
    return [np.transpose(data, perm)]


@converter("Transpose")
def _transpose(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "data")
    require_dtype(x, MOVE_DTYPES, "data", "transpose")
    rank = x.type.rank
    if rank == 0:
        return [x]  # a scalar: nothing moves (an alias, as Identity)
    require_rank(x, 1, 8, "data", "transpose")
    perm = n.get_ints("perm", list(range(rank - 1, -1, -1)))
    assert perm is not None
    return [ops.transpose(x, perm)]


# -- Pad ----------------------------------------------------------------------------------------


def _pad_check(n: OnnxNode, ctx: Context) -> list[str]:
    mode = n.get_str("mode", "constant")
    if mode != "constant":
        return [f"attribute mode: {mode!r} is not supported (gradc pad: \"constant\" only)"]
    return []


def _pad_args(n: OnnxNode, ctx: Context, rank: int) -> tuple[list[int], float | int]:
    """(pads per axis, begins then ends, of length 2·rank; the constant value)."""
    if ctx.opset < 11:
        pads = n.get_ints("pads", None)
        value: float | int = n.get_float("value", 0.0)  # type: ignore[assignment]
        if pads is None:
            raise VerifyError("attribute pads: expected a list of ints, got none")
        axes = list(range(rank))
    else:
        a = ctx.const(n, 1, "pads")
        if a is None:
            raise VerifyError("input pads: expected a value (required input), got none")
        pads = int_list(a, "pads")
        v = ctx.const(n, 2, "constant_value")
        value = 0 if v is None or v.size == 0 else v.reshape(-1)[0].item()
        ax = ctx.const(n, 3, "axes") if ctx.opset >= 18 else None
        axes = list(range(rank)) if ax is None else normalize_axes(int_list(ax, "axes"), rank,
                                                                   "axes")
    if len(pads) != 2 * len(axes):
        raise VerifyError(f"pads: expected {2 * len(axes)} values, got {len(pads)}")
    full = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
    return full, value


@converter("Pad", const_inputs=((1, "pads"), (2, "constant_value"), (3, "axes")),
           check=_pad_check)
def _pad(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "data")
    require_dtype(x, PAD_DTYPES, "data", "pad")
    rank = require_rank(x, 1, 8, "data", "pad")
    pads, value = _pad_args(n, ctx, rank)
    begin, end = pads[:rank], pads[rank:]
    y = x
    if any(p > 0 for p in pads):
        y = ops.pad(x, [max(p, 0) for p in begin], [max(p, 0) for p in end],
                    padding_value=value)
    if all(p >= 0 for p in pads):
        return [y]
    return [_crop(y, [max(-p, 0) for p in begin], [max(-p, 0) for p in end])]


def _crop(y: Value, begin: Sequence[int], end: Sequence[int]) -> Value:
    """Negative pads: a ``slice`` dropping ``begin``/``end`` elements per axis."""
    sizes: list[Dim] = []
    for i, (d, b, e) in enumerate(zip(y.type.shape, begin, end)):
        if isinstance(d, str):
            if b or e:
                raise UnsupportedError(f"input pads: negative padding on axis {i} of symbolic "
                                       f"size {d!r}")
            sizes.append(d)
        elif d - b - e < 1:
            raise UnsupportedError(f"input pads: cropping axis {i} of size {d} by {b} and {e} "
                                   "leaves no element (gradc has no empty tensors)")
        else:
            sizes.append(d - b - e)
    return ops.slice(y, list(begin), sizes, [1] * len(sizes))


# -- OneHot -------------------------------------------------------------------------------------


def _depth(a: np.ndarray) -> int:
    if a.size != 1:
        raise VerifyError(f"input depth: expected a scalar, got shape {list(a.shape)}")
    d = a.reshape(-1)[0].item()
    if isinstance(d, float) and not math.isfinite(d):
        raise VerifyError(f"input depth: expected a finite number, got {d}")
    return int(d)


@converter("OneHot", const_inputs=((1, "depth"), (2, "values")))
def _one_hot(n: OnnxNode, ctx: Context) -> list[Produced]:
    ind = ctx.value(n, 0, "indices")
    require_rank(ind, 0, 7, "indices", "one_hot")
    depth_a, vals = ctx.const(n, 1, "depth"), ctx.const(n, 2, "values")
    if depth_a is None or vals is None:
        raise VerifyError("inputs depth, values: expected both, got "
                          f"{'none' if depth_a is None and vals is None else 'one'}")
    if vals.size != 2:
        raise VerifyError(f"input values: expected two elements (off, on), got shape "
                          f"{list(vals.shape)}")
    rank = ind.type.rank + 1
    axis = _axis(n, rank, -1)
    depth = _depth(depth_a)
    if ind.type.dtype != DType.int64:
        ind = ops.cast(ind, DType.int64)
    shape = list(ind.type.shape)
    shape.insert(axis, 1)
    ind = ops.reshape(ind, shape)
    out: list[Dim] = list(shape)
    out[axis] = depth
    return [ops.one_hot(ind, ops.constant(vals.reshape(2)), axis, out)]


# -- Flatten, Squeeze, Unsqueeze ------------------------------------------------------------


def _joint(dims: Sequence[Dim], side: str) -> Dim:
    """The product of dims: an int, or the one symbol among dims of size 1."""
    syms = [d for d in dims if isinstance(d, str)]
    if not syms:
        return math.prod(int(d) for d in dims)
    if len(syms) == 1 and all(d == 1 for d in dims if not isinstance(d, str)):
        return syms[0]
    raise UnsupportedError(f"attribute axis: the {side} dims {tuple(dims)} would merge a "
                           "symbolic dim with others (gradc keeps symbols whole)")


@converter("Flatten")
def _flatten(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "input")
    shape = x.type.shape
    r = len(shape)
    axis = n.get_int("axis", 1)
    if not -r <= axis <= r:
        raise VerifyError(f"attribute axis: expected an axis in {-r}..{r}, got {axis}")
    axis = axis + r if axis < 0 else axis
    target = [_joint(shape[:axis], "leading"), _joint(shape[axis:], "trailing")]
    return [x if tuple(target) == shape else ops.reshape(x, target)]


def _axes_arg(n: OnnxNode, ctx: Context) -> list[int] | None:
    if ctx.opset < 13:
        return n.get_ints("axes", None)
    a = ctx.const(n, 1, "axes")
    return None if a is None else int_list(a, "axes")


@converter("Squeeze", const_inputs=((1, "axes"),))
def _squeeze(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "data")
    shape = x.type.shape
    axes = _axes_arg(n, ctx)
    if axes is None:  # the static dims equal to 1 only
        drop = [i for i, d in enumerate(shape) if d == 1]
    else:
        drop = normalize_axes(axes, len(shape), "axes")
        for a in drop:
            if isinstance(shape[a], str):
                raise UnsupportedError(f"input axes: axis {a} has the symbolic size "
                                       f"{shape[a]!r}, which gradc cannot know to be 1")
            if shape[a] != 1:
                raise VerifyError(f"axes: expected axes of size 1, got axis {a} of size "
                                  f"{shape[a]}")
    target = [d for i, d in enumerate(shape) if i not in drop]
    return [x if not drop else ops.reshape(x, target)]


@converter("Unsqueeze", const_inputs=((1, "axes"),))
def _unsqueeze(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "data")
    axes = _axes_arg(n, ctx)
    if axes is None:
        raise VerifyError("axes: expected a list of ints, got none")
    r = x.type.rank + len(axes)
    if r > 8:
        raise UnsupportedError(f"input axes: the result would have rank {r} (gradc: at most 8)")
    new = set(normalize_axes(axes, r, "axes"))
    rest = iter(x.type.shape)
    target = [1 if i in new else next(rest) for i in range(r)]
    return [ops.reshape(x, target)]
