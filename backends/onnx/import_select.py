"""ONNX selections and casts that transformer exports write, and the refusals of
SPEC-transformers §28.5.

- ``CastLike`` (15, 19, 21): a ``cast`` to the dtype of ``target_type`` (only its type is
  read); a known input that is no parameter folds to a constant of that dtype.
- ``GatherElements`` and ``GatherND`` of values known at import fold (``np.take_along_axis``,
  index tuples); ``transformers``' BERT picks its token-type ids so from a buffer.
- ``GatherND`` (batch_dims 0) of a computed ``data`` with indices known at import:
  ``gather`` on ``data`` reshaped to ``(d0·…·d(m-1), rest…)`` at the row-major positions of the
  index tuples. **Choice**: the same selection, exact, with ``gather``'s gradient: what
  ``transformers``' padding masks export as with the dynamo exporter
  (``attention_mask[batch_idx, kv_idx]``). Computed indices stay refused (§28.5: gradc
  imports Gather).
- Refused as model ops (§28.5), each naming why (``refusal``, which the importer uses for
  every op without a converter): ``GatherND`` (where it does not fold), ``ScatterND``,
  ``ScatterElements``, ``Einsum``, ``RotaryEmbedding``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as ops
from gradc.ir.types import DType
from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, normalize_axes,
)
from gradc.backends.onnx.import_shape import folder, symbolic_error

# -- CastLike -----------------------------------------------------------------------------------


@converter("CastLike")
def _cast_like(n: OnnxNode, ctx: Context) -> list[Produced]:
    like = n.input(1)
    if not like:
        raise VerifyError("input target_type: expected a value (required input), got none")
    if ctx.is_const(like):
        target = ctx.const(n, 1, "target_type")
        assert target is not None
        dtype: Any = target.dtype
    else:
        dtype = ctx.value(n, 1, "target_type").type.dtype.numpy
    if ctx.is_fixed(n.input(0)):
        a = ctx.const(n, 0, "input")
        assert a is not None
        with np.errstate(all="ignore"):
            return [a.astype(dtype)]
    x = ctx.value(n, 0, "input")
    if x.type.dtype.numpy == np.dtype(dtype):
        return [x]  # an alias, as Identity
    return [ops.cast(x, DType(np.dtype(dtype).name))]


# -- GatherElements, GatherND -------------------------------------------------------------------


def _normalized(idx: np.ndarray, size: int, field: str) -> np.ndarray:
    """Indices with negatives counted from the end; VerifyError outside ``-size..size-1``."""
    if idx.dtype.kind not in "iu":
        raise TypeError("indices")  # left to the converter, which reports the dtype
    bad = (idx < -size) | (idx >= size)
    if bad.any():
        raise VerifyError(f"input {field}: expected indices in {-size}..{size - 1}, got "
                          f"{idx[bad].reshape(-1).tolist()[:8]}")
    return np.where(idx < 0, idx + size, idx).astype(np.int64)


@folder("GatherElements")
def _fold_gather_elements(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    data, idx = args[0], args[1]
    if data.dtype == object or idx.dtype == object or data.ndim != idx.ndim or data.ndim == 0:
        raise TypeError("a symbol, or ranks the converter reports")
    axis = normalize_axes([n.get_int("axis", 0)], data.ndim, "axis")[0]
    return [np.take_along_axis(data, _normalized(idx, data.shape[axis], "indices"), axis)]


def _flat_positions(idx: np.ndarray, dims: list[int]) -> np.ndarray:
    """Row-major positions of GatherND's index tuples (the last axis of ``idx``) in ``dims``."""
    cols = [_normalized(idx[..., j], d, f"indices[..., {j}]") for j, d in enumerate(dims)]
    return np.ravel_multi_index(tuple(cols), dims).astype(np.int64) if cols else \
        np.zeros(idx.shape[:-1], np.int64)


@folder("GatherND")
def _fold_gather_nd(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    data, idx = args[0], args[1]
    if data.dtype == object or idx.dtype == object or n.get_int("batch_dims", 0) != 0:
        raise TypeError("a symbol, or batch_dims: the converter reports it")
    m = idx.shape[-1] if idx.ndim else 0
    if idx.ndim == 0 or m > data.ndim:
        raise TypeError("shapes the converter reports")
    flat = data.reshape((math.prod(data.shape[:m]),) + data.shape[m:])
    return [np.take(flat, _flat_positions(idx, list(data.shape[:m])), axis=0)]


def _gather_nd_check(n: OnnxNode, ctx: Context) -> list[str]:
    if n.input(1) and not ctx.is_const(n.input(1)):
        return [refusal("GatherND")]
    if n.get_int("batch_dims", 0) != 0:
        return [f"attribute batch_dims: {n.get_int('batch_dims', 0)} is not supported (only 0)"]
    return []


@converter("GatherND", check=_gather_nd_check)
def _gather_nd(n: OnnxNode, ctx: Context) -> list[Produced]:
    """GatherND with known indices: ``gather`` on ``data`` flattened over the indexed axes."""
    found = _gather_nd_check(n, ctx)
    if found:
        raise UnsupportedError(found[0])
    idx = ctx.const(n, 1, "indices")
    if idx is None or idx.ndim == 0 or idx.dtype.kind not in "iu":
        raise VerifyError("input indices: expected an integer tensor of rank >= 1, got "
                          f"{'none' if idx is None else f'{idx.dtype}{list(idx.shape)}'}")
    data = ctx.value(n, 0, "data")
    shape = list(data.type.shape)
    m = idx.shape[-1]
    if m > len(shape):
        raise VerifyError(f"input indices: expected index tuples of at most {len(shape)} "
                          f"entries (data's rank), got {m}")
    lead = shape[:m]
    if any(isinstance(d, str) for d in lead):
        raise symbolic_error("input data's indexed dims", np.array(lead, dtype=object))
    positions = _flat_positions(idx, [int(d) for d in lead])
    flat = ops.reshape(data, [math.prod(int(d) for d in lead)] + shape[m:])
    return [ops.gather(flat, ops.constant(positions), axis=0)]


# -- refused (§28.5) ------------------------------------------------------------------------------

REFUSED = {
    "GatherND": "gradc imports Gather; a GatherND imports only where its indices are known "
                "at import",  # the message of its converter's refusal
    "ScatterND": "gradc imports Gather; a scatter-add is the gradient of a gather, which gradc "
                 "derives itself",
    "ScatterElements": "gradc imports Gather; a scatter-add is the gradient of a gather, which "
                       "gradc derives itself",
    "Einsum": "write the product with matmul, which exports as MatMul",
    "RotaryEmbedding": "exporters write rotary embeddings as Sin, Cos, Slice, Concat and Mul, "
                       "which gradc imports",
}
"""Why an op without a converter is refused (§28.5): ``op X is not supported (<why>)``."""


def refusal(op: str) -> str:
    """The message for an op type that gradc does not import."""
    why = REFUSED.get(op)
    return f"op {op} is not supported" + (f" ({why})" if why else "")


__all__ = ["REFUSED", "refusal"]
