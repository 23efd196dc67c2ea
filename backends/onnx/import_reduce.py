"""ONNX converters of SPEC-training.md §21 for §14 and §17.

- ``ReduceMean``, ``ReduceMax``, ``ReduceMin``: ``axes`` an attribute up to opset 13, a constant
  input from opset 18 (with ``noop_with_empty_axes``); ``keepdims`` default 1.
- ``GlobalAveragePool`` / ``GlobalMaxPool``: ``reduce_mean`` / ``reduce_max`` over the spatial
  axes, keepdims (§13.3).
- ``Softmax``, ``LogSoftmax``: opsets 1 and 11 coerce the input to 2-D at ``axis`` (default
  1), a softmax over the joint trailing axes; opset 13 is over ``axis`` alone (default -1).
"""

from __future__ import annotations

from typing import Any

from gradc.ir import builders as ops
from gradc.ir.ops.common import F
from gradc.ir.types import NUMERIC
from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, int_list, normalize_axes, require_dtype, require_rank,
)

_REDUCE = {"ReduceMean": ("reduce_mean", F), "ReduceMax": ("reduce_max", NUMERIC),
           "ReduceMin": ("reduce_min", NUMERIC)}


@converter("ReduceMean", "ReduceMax", "ReduceMin", const_inputs=((1, "axes"),))
def _reduce(n: OnnxNode, ctx: Context) -> list[Produced]:
    name, dtypes = _REDUCE[n.op]
    x = ctx.value(n, 0, "data")
    require_dtype(x, dtypes, "data", name)
    build: Any = getattr(ops, name)
    keepdims = bool(n.get_int("keepdims", 1))
    if ctx.opset < 18:
        axes, noop = n.get_ints("axes", None), False
    else:
        a = ctx.const(n, 1, "axes")
        axes = None if a is None else int_list(a, "axes")
        noop = bool(n.get_int("noop_with_empty_axes", 0))
    if not axes:
        return [x] if noop else [build(x, None, keepdims)]
    return [build(x, normalize_axes(axes, x.type.rank, "axes"), keepdims)]


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(n: OnnxNode, ctx: Context) -> list[Produced]:
    average = n.op == "GlobalAveragePool"
    name = "reduce_mean" if average else "reduce_max"
    x = ctx.value(n, 0, "X")
    require_dtype(x, F if average else NUMERIC, "X", name)
    rank = require_rank(x, 2, 8, "X", name)
    build: Any = getattr(ops, name)
    return [build(x, tuple(range(2, rank)), True)]


@converter("Softmax", "LogSoftmax")
def _softmax(n: OnnxNode, ctx: Context) -> list[Produced]:
    name = "softmax" if n.op == "Softmax" else "log_softmax"
    x = ctx.value(n, 0, "input")
    require_dtype(x, F, "input", name)
    rank = require_rank(x, 1, 8, "input", name)
    build: Any = getattr(ops, name)
    if ctx.opset < 13:
        (axis,) = normalize_axes([n.get_int("axis", 1)], rank, "axis")
        return [build(x, tuple(range(axis, rank)))]
    (axis,) = normalize_axes([n.get_int("axis", -1)], rank, "axis")
    return [build(x, (axis,))]
