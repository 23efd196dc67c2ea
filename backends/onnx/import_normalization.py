"""ONNX converters of SPEC-transformers.md §28.1: LayerNormalization and RMSNormalization.

- ``LayerNormalization`` (opset 17): ``mean_variance_normalization(X, Scale, B, axes=(axis ..
  rank-1), use_mean=True, use_variance=True, epsilon)``; ``axis`` defaults to -1 (negative
  counts from the end); ``Scale`` and ``B`` broadcast unidirectionally. The outputs ``Mean`` and
  ``InvStdDev`` are built only where a node or a graph output reads them, by the function body's
  ops in ``ACC`` (``cast``, ``reduce_mean``, ``sub``, ``mul``, ``add``, ``sqrt``, ``div``), each
  cast to float32 (their ONNX type); for float32 ``X`` they equal the op's own statistics. So
  PyTorch's one-output (TorchScript) and three-output (dynamo, two unused) exports import alike:
  one node.
- ``RMSNormalization`` (opset 23): the same op with ``use_mean=False`` and no bias. ONNX's body
  divides by the RMS; gradc multiplies by its reciprocal (``torch.nn.RMSNorm``'s form).
- ``stash_type`` must be 1 (float32 statistics): another (16, bfloat16) is refused, named.
"""

from __future__ import annotations

import numpy as np

from gradc.backends.onnx.import_node import (Context, OnnxNode, Produced, converter,
                                             normalize_axes, require_dtype, require_rank)
from gradc.errors import UnsupportedError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.ops.common import ACC, F
from gradc.ir.types import DType

OP = "mean_variance_normalization"


def _check(n: OnnxNode, ctx: Context) -> list[str]:
    """Forms this importer refuses (reported before anything is built)."""
    stash = n.get_int("stash_type", 1)
    if stash != 1:
        return [f"attribute stash_type: {stash} is not supported (gradc computes the "
                "statistics in float32, stash_type=1)"]
    return []


def _axes(n: OnnxNode, x: Value) -> tuple[int, ...]:
    """``axis`` (default -1) to the last axis."""
    first = normalize_axes([n.get_int("axis", -1)], x.type.rank, "attribute axis")[0]
    return tuple(range(first, x.type.rank))


def _epsilon(n: OnnxNode) -> float:
    eps = n.get_float("epsilon", 1e-5)
    return 1e-5 if eps is None else eps


def _input(n: OnnxNode, ctx: Context) -> Value:
    x = ctx.value(n, 0, "X")
    require_rank(x, 1, 8, "X", OP)
    require_dtype(x, F, "X", OP)
    return x


def _read(ctx: Context, name: str) -> bool:
    """True when a node or a graph output reads the ONNX value ``name``."""
    proto = getattr(ctx, "proto", None)
    if proto is None or not name:
        return bool(name)
    return any(name in node.input for node in proto.node) or \
        any(o.name == name for o in proto.output)


def _statistics(x: Value, axes: tuple[int, ...], eps: float) -> tuple[Value, Value]:
    """LayerNormalization-17's Mean and InvStdDev by its body's ops in ACC, as float32."""
    acc = DType.of(np.dtype(ACC[x.type.dtype]).name)
    xa = ops.cast(x, acc) if acc != x.type.dtype else x
    mean = ops.reduce_mean(xa, axes, keepdims=True)
    d = ops.sub(xa, mean)
    var = ops.reduce_mean(ops.mul(d, d), axes, keepdims=True)
    root = ops.sqrt(ops.add(var, ops.constant(np.array(eps, np.float32).astype(acc.numpy))))
    inv = ops.div(ops.constant(np.ones((), acc.numpy)), root)
    f32 = DType.float32
    return tuple(v if v.type.dtype == f32 else ops.cast(v, f32)  # type: ignore[return-value]
                 for v in (mean, inv))


@converter("LayerNormalization", check=_check)
def _layer_normalization(n: OnnxNode, ctx: Context) -> list[Produced]:
    """§28.1: one node; Mean and InvStdDev only where read (module docstring)."""
    x = _input(n, ctx)
    axes, eps = _axes(n, x), _epsilon(n)
    scale = ctx.value(n, 1, "Scale")
    bias = ctx.value(n, 2, "B") if n.input(2) else None
    y = ops.mean_variance_normalization(x, scale, bias, axes=axes, epsilon=eps)
    if not (_read(ctx, n.output(1)) or _read(ctx, n.output(2))):
        # Unread statistics: a placeholder no node reads (the importer binds every named
        # output); nothing is built for them.
        unread = np.zeros(1, np.float32)
        return [y, unread if n.output(1) else None, unread if n.output(2) else None]
    mean, inv = _statistics(x, axes, eps)
    return [y, mean, inv]


@converter("RMSNormalization", check=_check)
def _rms_normalization(n: OnnxNode, ctx: Context) -> list[Produced]:
    """§28.1: x * (1 / sqrt(mean(x * x) + epsilon)) * scale over ``axis`` to the last axis."""
    if len([o for o in n.outputs if o]) > 1:
        raise UnsupportedError("outputs: expected one (Y)")
    x = _input(n, ctx)
    scale = ctx.value(n, 1, "scale")
    return [ops.mean_variance_normalization(x, scale, axes=_axes(n, x), use_mean=False,
                                            epsilon=_epsilon(n))]
