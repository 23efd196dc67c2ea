"""Operators of SPEC-training.md §12: the four batch-normalization ops.

The parameters (``mean``, ``variance``, ``scale``, ``bias``) have the input's rank; the reduced
axes are those where they have size 1. Every reference computes in ``ACC``, one rounding per
operation, and sums over a group's members in increasing logical index from +0 (the canonical
order), vectorized over the groups: the input is regrouped as ``(k, m)`` (reduced axes first),
and a sequential ``cumsum`` down the ``k`` rows gives the running sums. The running-statistics
update of §12.5 is the plain function ``running_statistics`` at the end of this file.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir.core import Node, Value
from gradc.ir.ops.common import F, acc_dtype, rounded
from gradc.ir.ops.elementwise_math import float32_attr, scalar_const
from gradc.ir.ops.registry import PURE, Attr, Checker, OpDef, fmt_shape, make_node, register
from gradc.ir.types import Dim, TensorType

EPSILON = (Attr("epsilon", "scalar", 1e-5),)


# -- checks ----------------------------------------------------------------------------------
def check_common(c: Checker, others: Sequence[str], params: Sequence[str],
                 has_gradient: bool) -> tuple[Dim, ...]:
    """The common checklist of §12 in order; returns the parameters' shape."""
    rank = c.rank_in("input", 1, 8)
    c.dtype_in("input", F)
    for name in others:  # 2. dtype and rank of every other tensor argument
        c.same_dtype(name, "input")
        r = c.t(name).rank
        if r != rank:
            c.fail(f"{name}.rank", f"{rank} (same as input)", r)
    if has_gradient:  # 3.
        c.same_shape("input_gradient", "input")
    x = c.t("input").shape
    for i, name in enumerate(params):  # 4.
        shape = c.t(name).shape
        for a, (p, d) in enumerate(zip(shape, x)):
            if p != 1 and p != d:
                c.fail(f"{name}.shape", f"dims 1 or equal to input's {fmt_shape(x)} (axis {a})",
                       fmt_shape(shape))
        if i > 0 and shape != c.t(params[0]).shape:
            c.fail(f"{name}.shape", f"{fmt_shape(c.t(params[0]).shape)} (same as {params[0]})",
                   fmt_shape(shape))
    eps = float32_attr(c, "epsilon", 1e-5)  # 5.
    if not eps >= 0:
        c.fail("epsilon", "a finite float32 >= 0", eps)
    return c.t(params[0]).shape


def reduced_axes(pshape: Sequence[Dim]) -> tuple[int, ...]:
    """The axes where the parameters have size 1 (§12)."""
    return tuple(a for a, d in enumerate(pshape) if d == 1)


# -- reference helpers -----------------------------------------------------------------------
def group_sum(t: np.ndarray, pshape: Sequence[int]) -> np.ndarray:
    """Canonical sum of ``t`` (already in ACC) over the reduced axes: each group's members in
    increasing logical index, from +0, each addition rounded; the result has ``pshape``."""
    axes = [a for a, d in enumerate(pshape) if d == 1]
    kept = [a for a in range(t.ndim) if a not in axes]
    k = 1
    for a in axes:
        k *= t.shape[a]
    rows = np.transpose(t, axes + kept).reshape(k, -1)
    total = np.cumsum(rows, axis=0, dtype=t.dtype)[-1]  # sequential: canonical order
    total = total + t.dtype.type(0)  # from +0: a sum of only -0 terms is +0
    return total.reshape(tuple(pshape))


def group_size(x: np.ndarray, pshape: Sequence[int], acc: Any) -> Any:
    """``n``, the number of members of a group, in ACC."""
    n = 1
    for a, d in enumerate(pshape):
        if d == 1:
            n *= x.shape[a]
    return acc(n)


def _vjp_refused(op: str, grads: Sequence[Value | None], count: int) -> list[Value | None]:
    if all(g is None for g in grads):
        return [None] * count
    raise UnsupportedError(f"grad: {op}: expected a graph without {op} on the differentiated "
                           "path (second derivatives through batch normalization are not "
                           "supported)")


def _eps(node: Node, dtype: Any) -> Value:
    return scalar_const(node.attrs["epsilon"], dtype)


# -- ops -------------------------------------------------------------------------------------
@register
class BatchNormalization(OpDef):
    """``batch_normalization(input, mean, variance, scale, bias, epsilon=1e-5)``:
    ``scale * ((input - mean) / sqrt(variance + epsilon)) + bias``."""

    name = "batch_normalization"
    numerics = "summing"
    operands = ("input", "mean", "variance", "scale", "bias")
    attributes = EPSILON
    traits = PURE
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        check_common(c, self.operands[1:], self.operands[1:], False)
        return [c.t("input")]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray, mean: np.ndarray,
                  var: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        with np.errstate(all="ignore"):
            dev = np.sqrt(var.astype(a) + a(attrs["epsilon"]))
            y = scale.astype(a) * ((x.astype(a) - mean.astype(a)) / dev) + bias.astype(a)
        return [rounded(y, x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX, dscale, dbias = batch_normalization_grad(...); dmean = -sum(dX);
        dvar = -0.5 scale dscale/(v+e)."""
        dy = grads[0]
        if dy is None:
            return [None] * 5
        x, mean, var, scale, _ = node.inputs
        dt = x.type.dtype
        dx, ds, db = make_node("batch_normalization_grad", [x, dy, mean, var, scale],
                               {"epsilon": node.attrs["epsilon"]})
        r = reduced_axes(mean.type.shape)
        total = make_node("reduce_sum", [dx], {"axes": r, "keepdims": True}) if r else dx
        if total.type.shape != mean.type.shape:
            total = make_node("reshape", [total], {"shape": mean.type.shape})
        dmean = make_node("neg", [total], {})
        half = make_node("mul", [scalar_const(-0.5, dt), scale], {})
        dvar = make_node("mul", [half, make_node("div", [ds, make_node(
            "add", [var, _eps(node, dt)], {})], {})], {})
        return [dx, dmean, dvar, ds, db]


class _StatisticsGrad(OpDef):
    """The two gradients' common operands, schema and types: (dX, dscale, dbias)."""

    operands = ("input", "input_gradient", "mean", "variance", "scale")
    attributes = EPSILON
    traits = PURE
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        p = check_common(c, self.operands[1:], ("mean", "variance", "scale"), True)
        t = c.t("input")
        return [t, TensorType(t.dtype, p), TensorType(t.dtype, p)]


@register
class BatchNormalizationGrad(_StatisticsGrad):
    """``batch_normalization_grad(input, input_gradient, mean, variance, scale,
    epsilon=1e-5)``: (dX, dscale, dbias) of ``batch_normalization`` with the statistics held
    fixed (inference mode)."""

    name = "batch_normalization_grad"
    numerics = "summing"

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray, dy: np.ndarray,
                  mean: np.ndarray, var: np.ndarray, scale: np.ndarray) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        with np.errstate(all="ignore"):
            dev = np.sqrt(var.astype(a) + a(attrs["epsilon"]))
            c = scale.astype(a) / dev
            g = dy.astype(a)
            dx = g * c
            ds = group_sum(g * (x.astype(a) - mean.astype(a)), mean.shape) / dev
            db = group_sum(g, mean.shape)
        return [rounded(dx, x.dtype), rounded(ds, x.dtype), rounded(db, x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """No second derivatives in this stage (§12.4): UnsupportedError naming the op."""
        return _vjp_refused(self.name, grads, 5)


@register
class BatchNormalizationTraining(OpDef):
    """``batch_normalization_training(input, scale, bias, epsilon=1e-5)``: normalized with
    the batch statistics; returns (output, mean, biased variance)."""

    name = "batch_normalization_training"
    numerics = "summing"
    operands = ("input", "scale", "bias")
    attributes = EPSILON
    traits = PURE
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        p = check_common(c, self.operands[1:], self.operands[1:], False)
        t = c.t("input")
        return [t, TensorType(t.dtype, p), TensorType(t.dtype, p)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray, scale: np.ndarray,
                  bias: np.ndarray) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        with np.errstate(all="ignore"):
            n = group_size(x, scale.shape, a)
            xa = x.astype(a)
            mean = group_sum(xa, scale.shape) / n
            d = xa - mean
            var = group_sum(d * d, scale.shape) / n
            dev = np.sqrt(var + a(attrs["epsilon"]))
            y = scale.astype(a) * (d / dev) + bias.astype(a)
        return [rounded(y, x.dtype), rounded(mean, x.dtype), rounded(var, x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX, dscale, dbias = batch_normalization_training_grad(...), plus the cotangents that
        reach the batch mean and variance results."""
        dy, dm, dv = (list(grads) + [None, None])[:3]
        x, scale, _ = node.inputs
        _, mean, var = node.outputs
        g: Value | None = None
        ds = db = None
        if dy is not None:
            g, ds, db = make_node("batch_normalization_training_grad",
                                  [x, dy, mean, var, scale], {"epsilon": node.attrs["epsilon"]})
        if dm is None and dv is None:
            return [g, ds, db]
        n = make_node("element_count", [x], {"axes": reduced_axes(scale.type.shape),
                                             "dtype": x.type.dtype})
        if dm is not None:
            g = _add(g, make_node("div", [_expand(dm, x), n], {}))
        if dv is not None:
            centered = make_node("mul", [make_node("sub", [x, mean], {}), _expand(dv, x)], {})
            two = make_node("mul", [scalar_const(2.0, x.type.dtype), centered], {})
            g = _add(g, make_node("div", [two, n], {}))
        return [g, ds, db]


def _expand(v: Value, like: Value) -> Value:
    return v if v.type.shape == like.type.shape else make_node("expand", [v, like], {})


def _add(g: Value | None, term: Value) -> Value:
    return term if g is None else make_node("add", [g, term], {})


@register
class BatchNormalizationTrainingGrad(_StatisticsGrad):
    """``batch_normalization_training_grad(input, input_gradient, mean, variance, scale,
    epsilon=1e-5)``: (dX, dscale, dbias) with the statistics depending on input."""

    name = "batch_normalization_training_grad"
    numerics = "summing"

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray, dy: np.ndarray,
                  mean: np.ndarray, var: np.ndarray, scale: np.ndarray) -> list[np.ndarray]:
        a = acc_dtype(x.dtype)
        with np.errstate(all="ignore"):
            n = group_size(x, mean.shape, a)
            mu, sc = mean.astype(a), scale.astype(a)
            ve = var.astype(a) + a(attrs["epsilon"])
            dev = np.sqrt(ve)
            g = dy.astype(a)
            d = x.astype(a) - mu
            sum_dy = group_sum(g, mean.shape)
            sum_dyt = group_sum(g * d, mean.shape)
            mdy, q = sum_dy / n, (sum_dyt / n) / ve
            r = (g - mdy) - d * q
            dx = (sc / dev) * r
            ds = sum_dyt / dev
        return [rounded(dx, x.dtype), rounded(ds, x.dtype), rounded(sum_dy, x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """No second derivatives in this stage (§12.4): UnsupportedError naming the op."""
        return _vjp_refused(self.name, grads, 5)


# -- §12.5 running statistics (a composition, not an op) ---------------------------------------
def running_statistics(x: Value, mean: Value, variance: Value, running_mean: Value,
                       running_var: Value, momentum: float,
                       unbiased: bool = False) -> tuple[Value, Value]:
    """§12.5: the updated ``(running_mean, running_var)`` from one training batch.

    ``mean`` and ``variance`` are ``batch_normalization_training``'s results for ``x``;
    ``momentum`` is ONNX's (the weight of the old value: PyTorch's ``1 - m``), rounded once to
    float32; its complement ``1 - momentum`` is computed in float64 and rounded to the dtype.
    ``unbiased=False`` is ONNX's definition (``f = 1``: the biased batch variance, no multiply);
    ``unbiased=True`` is PyTorch's, ``f = n / (n - 1)`` with ``n = element_count(x, r)``.
    """
    dt = x.type.dtype
    ok = isinstance(momentum, (int, float, np.number)) and not isinstance(momentum, bool)
    try:
        with np.errstate(over="ignore"):
            m32 = float(np.float32(momentum)) if ok else float("nan")
    except OverflowError:
        m32 = float("inf")
    if not np.isfinite(m32):
        raise VerifyError(f"running_statistics: momentum: expected a finite float32, got "
                          f"{momentum!r}")
    for name, v in (("running_mean", running_mean), ("running_var", running_var)):
        if v.type.dtype != dt or v.type.shape != mean.type.shape:
            raise VerifyError(f"running_statistics: {name}: expected {dt} "
                              f"{fmt_shape(mean.type.shape)} (the statistics' type), got "
                              f"{v.type.dtype} {fmt_shape(v.type.shape)}")
    keep, take = scalar_const(m32, dt), scalar_const(1.0 - m32, dt)

    def update(old: Value, batch: Value) -> Value:
        return make_node("add", [make_node("mul", [old, keep], {}),
                                 make_node("mul", [batch, take], {})], {})

    batch_var = variance
    if unbiased:
        n = make_node("element_count", [x], {"axes": reduced_axes(mean.type.shape),
                                             "dtype": dt})
        f = make_node("div", [n, make_node("sub", [n, scalar_const(1.0, dt)], {})], {})
        batch_var = make_node("mul", [variance, f], {})
    return update(running_mean, mean), update(running_var, batch_var)
