"""Operators of SPEC-transformers.md §24: mean_variance_normalization and its gradient.

Layer norm (``use_mean=True``) and RMS norm (``use_mean=False``), DirectML's
MEAN_VARIANCE_NORMALIZATION2. The **groups** are the elements that share their coordinates on
the axes not in ``axes``; ``n`` is a group's size. Every reference computes in ``ACC`` (float16
widened exactly, rounded once on store), one rounding per operation, the steps of ONNX
LayerNormalization-17's function body: the mean, ``D = X - mean``, the variance as the mean of
``D * D`` (two passes), ``inv = 1 / sqrt(var + epsilon)``, ``z = D * inv``, then ``* scale`` and
``+ bias``. Sums run over a group's members in increasing logical index from +0 (the canonical
order), vectorized over the groups: the input is regrouped as ``(n, groups)`` (``group_rows``)
and a sequential ``cumsum`` down the rows gives every group's running sum.

``scale`` and ``bias`` broadcast unidirectionally to the input (right-aligned, each dim equal or
1). The builder takes ``scale=None`` with a ``bias`` as a scale of ones (``neutral_operands``):
a product by 1 is exact, so the result is the one without a scale.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.errors import UnsupportedError
from gradc.ir.core import Node, Value
from gradc.ir.ops.arith import unbroadcast
from gradc.ir.ops.common import F, acc_dtype, rounded
from gradc.ir.ops.elementwise_math import float32_attr
from gradc.ir.ops.reduce import group_rows, ungroup
from gradc.ir.ops.registry import (DERIVED, PURE, Attr, Checker, OpDef, fmt_shape, make_node,
                                   register)
from gradc.ir.types import TensorType

# ``axes`` defaults to (-1,), ONNX's default axis (a tuple default is DERIVED in the schema)
ATTRS = (Attr("axes", "ints", DERIVED), Attr("use_mean", "bool", True),
         Attr("use_variance", "bool", True), Attr("epsilon", "scalar", 1e-5))


# -- checks ----------------------------------------------------------------------------------
def check_head(c: Checker) -> int:
    """§24.1 item 1: input rank 1..8 and a float dtype; returns the rank."""
    rank = c.rank_in("input", 1, 8)
    c.dtype_in("input", F)
    return rank


def check_param(c: Checker, name: str, rank: int) -> None:
    """§24.1 items 2-3: the dtype of ``input`` and a rank no larger."""
    c.same_dtype(name, "input")
    r = c.t(name).rank
    if r > rank:
        c.fail(f"{name}.rank", f"at most {rank} (input's rank)", r)


def check_attrs(c: Checker, rank: int) -> None:
    """§24.1 items 4-6: axes (non-empty, in range, none twice; stored sorted), the two bools,
    epsilon >= 0."""
    axes = c.ints("axes", None, default=(-1,))
    norm: list[int] = []
    for i, a in enumerate(axes):
        if not -rank <= a < rank:
            c.fail(f"axes[{i}]", f"an axis in -{rank}..{rank - 1}", a)
        if a % rank in norm:
            c.fail(f"axes[{i}]", "an axis not listed twice", a)
        norm.append(a % rank)
    if not norm:
        c.fail("axes", "at least one axis", "()")
    c.keep("axes", tuple(sorted(norm)))
    c.boolean("use_mean")
    c.boolean("use_variance")
    eps = float32_attr(c, "epsilon", 1e-5)
    if not eps >= 0:
        c.fail("epsilon", "a finite float32 >= 0", eps)


def check_broadcast(c: Checker, name: str) -> None:
    """§24.1 items 7-8: the shape, aligned to the right of input's, has each dim equal or 1."""
    x, p = c.t("input").shape, c.t(name).shape
    lead = len(x) - len(p)
    for i, d in enumerate(p):
        if d != 1 and d != x[lead + i]:
            c.fail(f"{name}.shape", f"dims equal to input's {fmt_shape(x)} or 1, aligned to "
                   f"the right (axis {lead + i})", fmt_shape(p))


# -- reference helpers -----------------------------------------------------------------------
def canonical_sum(rows: np.ndarray) -> np.ndarray:
    """Σ down the rows of a ``(k, m)`` ACC array: each column's terms in row order, from +0,
    each addition rounded (``cumsum`` is sequential; the +0 turns a sum of -0s into +0)."""
    return np.cumsum(rows, axis=0, dtype=rows.dtype)[-1] + rows.dtype.type(0)


def mvn_rows(rows: np.ndarray, use_mean: bool, use_variance: bool,
             eps: float) -> tuple[np.ndarray, Any]:
    """``mvn_stats`` for every group at once: ``rows`` is ``(n, groups)`` in ACC (row
    r: the r-th member of each group); returns ``z`` (same layout) and ``inv`` (None when
    ``use_variance`` is False)."""
    a = rows.dtype.type
    n = a(rows.shape[0])
    d = rows
    if use_mean:
        mean = canonical_sum(rows) / n
        d = rows - mean
    if not use_variance:
        return d, None
    var = canonical_sum(d * d) / n  # two passes, as ONNX's body
    inv = a(1) / np.sqrt(var + a(eps))  # InvStdDev = 1 / Sqrt(Var + eps)
    return d * inv, inv


def scale_sum(t: np.ndarray, pshape: Sequence[int]) -> np.ndarray:
    """Σ of ``t`` (X's shape, ACC) over the axes where a parameter of ``pshape`` broadcasts
    (the leading axes it lacks and its size-1 dims), in increasing index of X, from +0."""
    lead = t.ndim - len(pshape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(pshape) if d == 1]
    return canonical_sum(group_rows(t, axes)).reshape(tuple(pshape))


def _bias_gradient(db: Value, dy: Value, bias: Value, s: Value) -> Value:
    """§24.3: d(bias) from the grad op's bias gradient (of ``s``'s shape), else from dY."""
    b, p = bias.type.shape, s.type.shape
    if b == p:
        return db
    lead = len(p) - len(b)
    if lead >= 0 and all(d == 1 or d == p[lead + i] for i, d in enumerate(b)):
        return unbroadcast(db, b)
    return unbroadcast(dy, b)


# -- ops -------------------------------------------------------------------------------------
@register
class MeanVarianceNormalization(OpDef):
    """``mean_variance_normalization(input, scale=None, bias=None, axes=(-1,), use_mean=True,
    use_variance=True, epsilon=1e-5)``: ``(x - mean) * (1 / sqrt(var + epsilon)) * scale +
    bias``, the mean and the (biased) variance taken over the joint extent of ``axes`` in the
    accumulation dtype, in canonical order. Layer normalization (ONNX LayerNormalization);
    with ``use_mean=False`` and no bias, RMS normalization
    (``x * (1 / sqrt(mean(x * x) + epsilon))``, as ``torch.nn.RMSNorm``); ``use_variance=False``
    only subtracts the mean. ``scale`` and ``bias`` broadcast from the right."""

    name = "mean_variance_normalization"
    operands = ("input", "scale", "bias")
    optional_operands = ("scale", "bias")
    neutral_operands = {"scale": 1.0}
    attributes = ATTRS
    traits = PURE
    dtypes = F
    numerics = "summing"  # the statistics are sums over each group, in canonical order

    def infer(self, c: Checker) -> list[TensorType]:
        rank = check_head(c)
        params = [p for p in ("scale", "bias") if p in c.types]
        for p in params:
            check_param(c, p, rank)
        check_attrs(c, rank)
        for p in params:
            check_broadcast(c, p)
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray, scale: np.ndarray | None = None,
                  bias: np.ndarray | None = None) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        axes = attrs["axes"]
        with np.errstate(all="ignore"):
            rows = group_rows(x, axes).astype(a)
            z, _ = mvn_rows(rows, attrs["use_mean"], attrs["use_variance"], attrs["epsilon"])
            y = ungroup(z, x.shape, axes)
            if scale is not None:
                y = y * scale.astype(a)  # then * Scale (broadcast from the right)
            if bias is not None:
                y = y + bias.astype(a)  # then + Bias
        return [np.ascontiguousarray(rounded(y, x.dtype))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """mean_variance_normalization_grad(X, dY, scale or ones) gives dX and d(scale);
        d(bias) is its bias gradient where bias has scale's shape (or one it sums to), else the
        sum of dY over the axes where bias broadcasts."""
        dy = grads[0]
        count = len(node.inputs)
        if dy is None:
            return [None] * count
        x = node.inputs[0]
        scale = node.inputs[1] if count > 1 else None
        s = scale if scale is not None else make_node(
            "constant", [], {"value": np.ones((1,), x.type.dtype.numpy)})
        dx, ds, db = make_node("mean_variance_normalization_grad", [x, dy, s],
                               dict(node.attrs))
        out: list[Value | None] = [dx]
        if count > 1:
            out.append(ds)
        if count > 2:
            out.append(_bias_gradient(db, dy, node.inputs[2], s))
        return out


@register
class MeanVarianceNormalizationGrad(OpDef):
    """``mean_variance_normalization_grad(input, input_gradient, scale, axes=(-1,),
    use_mean=True, use_variance=True, epsilon=1e-5)``: the three gradients of
    ``mean_variance_normalization`` with bias: ``dX = inv * (g - mean(g) - z * mean(g * z))``
    with ``g = dY * scale`` and ``z`` the normalized input (the mean terms dropped with
    ``use_mean`` / ``use_variance`` False), ``dscale = sum(dY * z)`` and ``dbias = sum(dY)``
    over the axes where ``scale`` broadcasts; the statistics are recomputed from ``input``."""

    name = "mean_variance_normalization_grad"
    operands = ("input", "input_gradient", "scale")
    attributes = ATTRS
    traits = PURE
    dtypes = F
    numerics = "summing"  # sums over each group and over the broadcast axes

    def infer(self, c: Checker) -> list[TensorType]:
        rank = check_head(c)
        c.same_dtype("input_gradient", "input")
        c.same_shape("input_gradient", "input")
        check_param(c, "scale", rank)
        check_attrs(c, rank)
        check_broadcast(c, "scale")
        t, p = c.t("input"), c.t("scale")
        return [t, p, p]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray, dy: np.ndarray,
                  scale: np.ndarray) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        axes, um, uv = attrs["axes"], attrs["use_mean"], attrs["use_variance"]
        with np.errstate(all="ignore"):
            dya = dy.astype(a)
            rows = group_rows(x, axes).astype(a)
            n = a(rows.shape[0])
            z, inv = mvn_rows(rows, um, uv, attrs["epsilon"])
            g = group_rows(dya * scale.astype(a), axes)  # g = dY * scale
            r = g
            if um:
                r = r - canonical_sum(g) / n
            if uv:
                r = inv * (r - z * (canonical_sum(g * z) / n))
            dx = ungroup(r, x.shape, axes)
            zx = ungroup(z, x.shape, axes)  # z: the normalized value, before Scale
            ds = scale_sum(dya * zx, scale.shape)
            db = scale_sum(dya, scale.shape)
        return [np.ascontiguousarray(rounded(dx, x.dtype)), rounded(ds, x.dtype),
                rounded(db, x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """No second derivatives: UnsupportedError naming the op."""
        if all(g is None for g in grads):
            return [None] * 3
        raise UnsupportedError(f"grad: {self.name}: expected a graph without {self.name} on "
                               "the differentiated path (second derivatives through "
                               "normalization are not supported)")

