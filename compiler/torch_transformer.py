"""ATen converters of ``gradc.from_torch`` for transformers: embeddings and indexing, layer
normalization, and scaled dot-product attention (SPEC-transformers §24-§27).

- ``embedding`` is ``gather(weight, indices, 0)``. With a ``padding_idx``, PyTorch's backward
  gives the weight no gradient from the positions that read that row (``embedding_dense_backward``
  skips them); the forward still reads it. gradc has no stop-gradient operator, so the row read
  there comes through ``adam_optimizer`` with learning rate 0 and zero moments, the one operator
  whose operands get no gradient (SPEC-training §9.7): its result is ``x - 0·0/(√0 + ε) = x``
  exactly (``-0.0`` and NaN included), so the forward is unchanged and the weight's gradient is
  ``gather_grad`` of the cotangent with those positions zeroed: PyTorch's, in PyTorch's order.
  ``scale_grad_by_freq`` and ``sparse`` are refused by name.
- ``index_select(x, dim, index)`` is ``gather(x, index, dim)``; ``index.Tensor`` (``x[i]``,
  ``x[:, i]``, and several index tensors on adjacent axes) is a ``gather`` on the indexed axis,
  or on those axes merged when the indices are constants (checked at import, merged into one
  index then); the other forms (index tensors apart, bool masks, several computed indices) are
  refused. ``aten.gather`` (PyTorch's element-wise ``torch.gather``, ONNX's GatherElements) is a
  ``gather`` of the flattened input when its index is a constant (checked at import), and is
  refused otherwise: gradc's ``gather`` is ONNX's Gather, and a computed index would need
  run-time range checks gradc's ``gather`` does not make for it. An index outside the range
  raises ``InputError`` when the graph runs, as PyTorch raises; gradc's ``gather`` counts a
  negative index from the end (ONNX's rule) where PyTorch's ``embedding`` and ``index_select``
  raise.
- ``native_layer_norm`` is ``mean_variance_normalization`` over the last
  ``len(normalized_shape)`` axes. Its mean and inverse standard deviation, where read, are
  computed as ONNX's LayerNormalization body computes them (SPEC-transformers §28.1), in the
  accumulation dtype. gradc holds ``eps`` in float32 (SPEC-training §9.3) also for float64 data.
- ``scaled_dot_product_attention`` is kept whole by ``torch_frontend`` (PyTorch's own
  decomposition of it gives results whose strides a following ``view`` cannot take, for
  ``transformers``' GPT-2 with SDPA attention) and written here exactly as PyTorch's
  decomposition writes it (its math implementation): ``q·√scale``, ``k·√scale`` (``scale``
  defaults to ``1/√E``), K and V repeated per group for ``enable_gqa``, ``matmul``, the mask
  added (a bool mask as 0 / -inf; ``is_causal`` as the lower triangle), ``softmax`` guarded as
  ``_safe_softmax`` (a row whose scores are all -inf gives zeros: §27.2's row guard, so its
  gradient is finite), dropout when ``dropout_p > 0`` (PyTorch applies it in either mode:
  gradc's ``dropout``), and ``matmul`` with V. Decomposed programs (a ``.pt2`` file written
  after ``run_decompositions``) hold the same operators one by one, which the other converters
  take.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as B
from gradc.ir.core import Value
from gradc.ir.dropout import dropout
from gradc.ir.ops.common import F
from gradc.ir.types import Dim, DType
from gradc.torch_nn import matmul
from gradc.torch_ops import Context, TorchNode, aten, axis, ints

INDEX_DTYPES = (DType.int64, DType.int32)


def _indices(v: Value, field: str) -> Value:
    if v.type.dtype not in INDEX_DTYPES:
        raise UnsupportedError(f"argument {field}: dtype {v.type.dtype} is not supported (int64 "
                               "or int32 indices)")
    return v


def _float(v: Value, field: str) -> Value:
    if v.type.dtype not in F:
        raise UnsupportedError(f"argument {field}: dtype {v.type.dtype} is not supported "
                               "(float64, float32, float16)")
    return v


def _const(value: float, dt: DType) -> Value:
    return B.constant(np.array(value, np.float64).astype(dt.numpy))


# -- embeddings and indexing -----------------------------------------------------------------


@aten("embedding.default")
def _embedding(n: TorchNode, ctx: Context) -> Value:
    for flag in ("scale_grad_by_freq", "sparse"):
        if n.arg(flag, False):
            raise UnsupportedError(f"{flag}=True is not supported (gradc's embedding gradient "
                                   "is the dense, unscaled one)")
    w = ctx.value(n.arg("weight"), "weight")
    if w.type.rank < 1:
        raise VerifyError("argument weight: expected a tensor of rank >= 1, got a scalar")
    idx = _indices(ctx.value(n.arg("indices"), "indices"), "indices")
    y = B.gather(w, idx, 0)
    pad = n.arg("padding_idx", -1)
    rows = w.type.shape[0]
    if (pad is None or pad < 0 or not isinstance(rows, int) or pad >= rows
            or not w.type.dtype.is_float or _is_constant(w)):  # no gradient to shape
        return y
    return _padding_row_without_gradient(w, idx, y, int(pad))


def _is_constant(v: Value) -> bool:
    return v.producer is not None and v.producer.op == "constant"


def _padding_row_without_gradient(w: Value, idx: Value, y: Value, pad: int) -> Value:
    """``y`` where the index is not ``pad``; the row ``pad`` of ``w``, through no gradient,
    where it is (module docstring)."""
    rank = w.type.rank
    row = B.slice(w, [pad] + [0] * (rank - 1), [1] + list(w.type.shape[1:]), [1] * rank)
    frozen = without_gradient(row)
    at_pad = B.equal(idx, B.constant(np.array(pad, idx.type.dtype.numpy)))
    cond = B.reshape(at_pad, tuple(idx.type.shape) + (1,) * (rank - 1))
    return B.where(cond, frozen, y)


def without_gradient(v: Value) -> Value:
    """``v``'s value, through which no gradient flows: ``adam_optimizer`` with learning rate 0
    and zero moments (module docstring). ``v`` is static, of rank 1..8 and a float dtype."""
    zeros = B.constant(np.zeros([int(d) for d in v.type.shape], v.type.dtype.numpy))
    step = B.constant(np.ones((1,), np.int64))
    return B.adam_optimizer(v, zeros, zeros, zeros, step, 0.0)[0]


@aten("index_select.default")
def _index_select(n: TorchNode, ctx: Context) -> Value:
    x = ctx.value(n.arg("self"), "self")
    ax = axis(n.arg("dim"), x.type.rank)
    idx = _indices(ctx.value(n.arg("index"), "index"), "index")
    if idx.type.rank > 1:
        raise VerifyError(f"argument index: expected a vector, got rank {idx.type.rank}")
    y = B.gather(x, idx, ax) if x.type.rank else B.reshape(
        B.gather(B.reshape(x, (1,)), idx, 0), ())
    return B.reshape(y, ctx.shape(n)) if tuple(y.type.shape) != ctx.shape(n) else y


@aten("index.Tensor")
def _index(n: TorchNode, ctx: Context) -> Value:
    """``x[..., i, j, ...]``: index tensors on adjacent axes (module docstring)."""
    x = ctx.value(n.arg("self"), "self")
    given = list(n.arg("indices"))
    at = [k for k, t in enumerate(given) if t is not None]
    if not at or at != list(range(at[0], at[-1] + 1)):
        raise UnsupportedError("index tensors on axes that are not adjacent are not supported "
                               "(x[i, :, j]; gradc takes x[..., i, j, ...])")
    if len(at) == 1:
        idx = _indices(ctx.value(given[at[0]], f"indices[{at[0]}]"), f"indices[{at[0]}]")
        return B.gather(x, idx, at[0])
    consts = [_constant_index(ctx, given[k], f"indices[{k}]") for k in at]
    sizes = _static_sizes(x, at, "index")
    arrays = []
    for c, size, k in zip(consts, sizes, at):
        if c is None:
            raise UnsupportedError("several index tensors computed when the graph runs are not "
                                   "supported (constant ones are)")
        arrays.append(_in_range(c, size, f"indices[{k}]"))
    merged = np.ravel_multi_index(tuple(np.broadcast_arrays(*arrays)), sizes)
    shape = tuple(x.type.shape)
    flat = B.reshape(x, shape[:at[0]] + (int(np.prod(sizes)),) + shape[at[-1] + 1:])
    return B.gather(flat, B.constant(merged.astype(np.int64)), at[0])


def _constant_index(ctx: Context, arg: Any, field: str) -> np.ndarray | None:
    """The elements of an index argument known at import, else None."""
    v = ctx.value(arg, field)
    _indices(v, field)
    p = v.producer
    return None if p is None or p.op != "constant" else np.asarray(p.attrs["value"])


def _static_sizes(x: Value, axes: list[int], what: str) -> list[int]:
    sizes = [x.type.shape[k] for k in axes]
    if not all(isinstance(s, int) for s in sizes):
        raise UnsupportedError(f"{what}: the indexed axes {axes} have symbolic sizes {sizes}")
    return [int(s) for s in sizes]


def _in_range(a: np.ndarray, size: int, field: str, negative: bool = True) -> np.ndarray:
    """``a`` with negative indices counted from the end; VerifyError for one out of range."""
    lo = -size if negative else 0
    bad = (a < lo) | (a >= size)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise VerifyError(f"argument {field}: {field}[{', '.join(map(str, pos))}] = "
                          f"{int(a[pos])}: expected an index in {lo}..{size - 1}")
    return np.where(a < 0, a + size, a)


@aten("gather.default")
def _gather_elements(n: TorchNode, ctx: Context) -> Value:
    """``torch.gather`` with a constant index: one ``gather`` of the flattened input."""
    if n.arg("sparse_grad", False):
        raise UnsupportedError("sparse_grad=True is not supported")
    x = ctx.value(n.arg("self"), "self")
    rank = max(x.type.rank, 1)
    ax = axis(n.arg("dim"), rank)
    index = _constant_index(ctx, n.arg("index"), "index")
    if index is None:
        raise UnsupportedError("an index computed when the graph runs is not supported (this is "
                               "PyTorch's element-wise gather, ONNX's GatherElements; gradc's "
                               "gather is ONNX's Gather; a constant index is supported)")
    sizes = _static_sizes(x, list(range(x.type.rank)), "gather") or [1]
    index = index.reshape(index.shape or (1,))
    shape: list[int] = list(map(int, index.shape))
    if len(shape) != rank or any(shape[k] > sizes[k] for k in range(rank) if k != ax):
        raise VerifyError(f"argument index: expected rank {rank} and sizes at most "
                          f"{tuple(sizes)} off axis {ax}, got shape {index.shape}")
    coords: list[np.ndarray] = list(np.indices(index.shape))
    coords[ax] = _in_range(index, sizes[ax], "index", negative=False)
    flat = np.ravel_multi_index(tuple(coords), sizes).astype(np.int64)
    y = B.gather(B.reshape(x, (int(np.prod(sizes)),)), B.constant(flat), 0)
    return B.reshape(y, ctx.shape(n)) if tuple(y.type.shape) != ctx.shape(n) else y


# -- layer normalization ---------------------------------------------------------------------


@aten("native_layer_norm.default")
def _layer_norm(n: TorchNode, ctx: Context) -> tuple[Value | None, ...]:
    """Results: the output, the mean and the inverse standard deviation (built where read)."""
    x = _float(ctx.value(n.arg("input"), "input"), "input")
    k = len(ints(n.arg("normalized_shape"), "normalized_shape"))
    rank = x.type.rank
    if not 1 <= k <= rank:
        raise VerifyError(f"argument normalized_shape: expected 1..{rank} sizes, got {k}")
    axes = list(range(rank - k, rank))
    w, b = n.arg("weight", None), n.arg("bias", None)
    scale = None if w is None else ctx.value(w, "weight")
    bias = None if b is None else ctx.value(b, "bias")
    eps = float(n.arg("eps"))
    y = B.mean_variance_normalization(x, scale, bias, axes, True, True, eps)
    stats: list[Value | None] = [None, None]
    if n.used(1) or n.used(2):
        acc = DType.float32 if x.type.dtype == DType.float16 else x.type.dtype
        xa = x if acc == x.type.dtype else B.cast(x, acc)
        mean = B.reduce_mean(xa, axes, True)
        d = B.sub(xa, mean)
        var = B.reduce_mean(B.mul(d, d), axes, True)
        inv = B.div(_const(1.0, acc), B.sqrt(B.add(var, _const(eps, acc))))
        for i, v in ((0, mean), (1, inv)):
            if n.used(i + 1):
                dt = ctx.dtype(n, i + 1)
                stats[i] = v if dt == acc else B.cast(v, dt)
    return (y, stats[0], stats[1])


# -- scaled dot-product attention ------------------------------------------------------------


@aten("scaled_dot_product_attention.default")
def _attention(n: TorchNode, ctx: Context) -> Value:
    """PyTorch's math implementation, op by op (module docstring)."""
    q = _float(ctx.value(n.arg("query"), "query"), "query")
    dt = q.type.dtype
    k = ctx.operand(n.arg("key"), dt, "key")
    v = ctx.operand(n.arg("value"), dt, "value")
    if min(q.type.rank, k.type.rank, v.type.rank) < 2:
        raise VerifyError("query, key, value: expected rank >= 2 (..., L, E)")
    given = n.arg("scale", None)
    e = q.type.shape[-1]
    if given is None and not isinstance(e, int):
        raise UnsupportedError(f"the head size is the symbol {e!r} (scale needs it)")
    scale = float(given) if given is not None else 1.0 / math.sqrt(int(e))
    root = math.sqrt(abs(scale))
    q = B.mul(q, _const(-root if scale < 0 else root, dt))
    mask = _mask(n, ctx, q, k)
    if n.arg("enable_gqa", False):
        k, v = _repeat_heads(ctx, q, k, "key"), _repeat_heads(ctx, q, v, "value")
    s = matmul(q, B.mul(k, _const(root, dt)), trans_b=True)
    if mask is not None:
        s = B.add(s, mask)
    p = _safe_softmax(s)
    p_drop = float(n.arg("dropout_p", 0.0))
    if p_drop > 0.0:
        if p_drop >= 1.0:
            raise UnsupportedError(f"dropout_p {p_drop} is not supported (0 <= p < 1)")
        p, _, state = dropout(p, ctx.rng_state(), p_drop)
        ctx.set_rng_state(state)
    return matmul(p, v)


def _mask(n: TorchNode, ctx: Context, q: Value, k: Value) -> Value | None:
    """The additive mask in the query's dtype: a float mask as given, a bool one as 0 where
    true and -inf where false, ``is_causal`` the lower triangle (diagonal included)."""
    dt = q.type.dtype
    given = n.arg("attn_mask", None)
    if n.arg("is_causal", False):
        if given is not None:
            raise VerifyError("argument attn_mask: expected none with is_causal=True")
        rows, cols = q.type.shape[-2], k.type.shape[-2]
        if not isinstance(rows, int) or not isinstance(cols, int):
            raise UnsupportedError(f"is_causal with the symbolic sequence sizes {rows}, {cols} "
                                   "is not supported (gradc has no run-time shapes)")
        keep = np.tril(np.ones((rows, cols), bool))
        return B.constant(np.where(keep, 0.0, -np.inf).astype(dt.numpy))
    if given is None:
        return None
    m = ctx.value(given, "attn_mask")
    if m.type.dtype != DType.bool:
        return m if m.type.dtype == dt else B.cast(m, dt)
    p = m.producer
    if p is not None and p.op == "constant":
        return B.constant(np.where(p.attrs["value"], 0.0, -np.inf).astype(dt.numpy))
    return B.where(m, _const(0.0, dt), _const(-math.inf, dt))


def _repeat_heads(ctx: Context, q: Value, kv: Value, field: str) -> Value:
    """``repeat_interleave(kv, q_heads / kv_heads, dim=-3)`` as reshape, expand, reshape."""
    if q.type.rank < 3 or kv.type.rank < 3:
        raise VerifyError(f"argument {field}: expected rank >= 3 with enable_gqa")
    hq, hk = q.type.shape[-3], kv.type.shape[-3]
    if not isinstance(hq, int) or not isinstance(hk, int) or hq % hk:
        raise VerifyError(f"argument {field}: expected a number of heads that divides the "
                          f"query's {hq}, got {hk}")
    if hq == hk:
        return kv
    r = hq // hk
    shape: tuple[Dim, ...] = tuple(kv.type.shape)
    wide = shape[:-3] + (hk, 1) + shape[-2:]
    big = shape[:-3] + (hk, r) + shape[-2:]
    y = B.expand(B.reshape(kv, wide), ctx.like(big, f"argument {field}"))
    return B.reshape(y, shape[:-3] + (hq,) + shape[-2:])


def _safe_softmax(s: Value) -> Value:
    """``_safe_softmax(s, -1)``: softmax, and zeros on rows whose scores are all -inf."""
    p = B.softmax(s, (s.type.rank - 1,))
    dt = s.type.dtype
    finite = B.where(B.equal(s, _const(-math.inf, dt)), B.constant(np.array(False)),
                     B.constant(np.array(True)))
    count = B.reduce_sum(B.cast(finite, DType.int64), (s.type.rank - 1,), True)
    all_masked = B.equal(count, B.constant(np.zeros((), np.int64)))
    return B.where(all_masked, _const(0.0, dt), p)


__all__ = ["without_gradient"]
