"""Loss composites (SPEC-training.md §18.2-§18.4): ``negative_log_likelihood``,
``softmax_cross_entropy`` and ``mean_squared_error``, expanded op by op as SPEC writes them,
with the classes on any axis (``class_axis``, SPEC-transformers.md §29.1).

A label is picked with a ``one_hot`` bool mask and ``where`` (never a multiply by a 0/1 mask, so
a ``-inf`` log probability elsewhere gives no ``0 * inf``); negative labels, labels ``>= C`` and
``ignore_index`` map to ``C``, a row of False, and so count nowhere. ``"mean"`` divides by the
sum of the counted weights (``0/0 = NaN`` when none counts, as PyTorch). The gradients are what
``gradc.grad`` builds from the primitives' VJPs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradc.ir import builders as B
from gradc.ir.core import Value
from gradc.ir.ops.registry import fmt_shape
from gradc.ir.training_args import ArgCheck
from gradc.ir.types import DType

REDUCTIONS = ("none", "sum", "mean")
LABEL_DTYPES = (DType.int32, DType.int64)


def _c(v: Any, dtype: DType) -> Value:
    """A rank-0 constant ``v`` (a float64 value or an int) rounded once to ``dtype``."""
    if dtype.is_float:
        return B.constant(np.array(v, np.float64).astype(dtype.numpy))
    return B.constant(np.array(v, dtype.numpy))


def _all(v: Value) -> Value:
    """``reduce_sum`` over every axis (rank 0)."""
    return B.reduce_sum(v) if v.type.rank else v


def _check(c: ArgCheck, x: Any, labels: Any, weights: Any, reduction: Any, ignore_index: Any,
           x_field: str, class_axis: Any) -> tuple[Value, Value, Value | None, str, int | None,
                                                   int]:
    x = c.floating(x_field, x, 2, 8)
    axis = c.axis("class_axis", class_axis, x.type.rank)
    if isinstance(x.type.shape[axis], str):
        c.fail(f"{x_field}.shape[{axis}]", "a static class count", repr(x.type.shape[axis]))
    lab = c.value("labels", labels)
    c.dtype_in("labels", lab, LABEL_DTYPES)
    want = x.type.shape[:axis] + x.type.shape[axis + 1:]
    if lab.type.shape != want:
        c.fail("labels.shape", f"{fmt_shape(want)} ({x_field}.shape without the class axis "
               f"{axis}, class_axis)", fmt_shape(lab.type.shape))
    w = None
    if weights is not None:
        w = c.value("weights", weights)
        if w.type.dtype != x.type.dtype:
            c.fail("weights.dtype", f"{x.type.dtype} (same as {x_field})", w.type.dtype)
        if w.type.shape != x.type.shape[axis:axis + 1]:
            c.fail("weights.shape", f"{fmt_shape(x.type.shape[axis:axis + 1])} (C)",
                   fmt_shape(w.type.shape))
    red = c.choice("reduction", reduction, REDUCTIONS)
    ign = c.integer_or_none("ignore_index", ignore_index)
    return x, lab, w, red, ign, axis


class _Picked:
    """The shared part of the two class-index losses: mask, weights and picked values, with
    the classes on ``axis`` (SPEC-transformers §29.1: SPEC-training §18.2 with axis 1 read as
    the class axis)."""

    def __init__(self, x: Value, labels: Value, weights: Value | None,
                 ignore_index: int | None, axis: int) -> None:
        shape = x.type.shape
        classes = shape[axis]
        assert isinstance(classes, int)  # C is static (checked by _check)
        self.axis = axis
        ldt = labels.type.dtype
        lab = B.reshape(labels, shape[:axis] + (1,) + shape[axis + 1:])  # insert the class axis
        lab = B.where(B.less(lab, _c(0, ldt)), _c(classes, ldt), lab)  # negative: out of range
        info = np.iinfo(ldt.numpy)
        if ignore_index is not None and info.min <= ignore_index <= info.max:
            lab = B.where(B.equal(lab, _c(ignore_index, ldt)), _c(classes, ldt), lab)
        flags = B.constant(np.array([False, True]))
        self.mask = B.one_hot(lab, flags, axis, shape)  # a row of False if lab >= C
        dt = x.type.dtype
        self.zero = _c(0, dt)
        self.wb = None
        if weights is None:
            picked_w = B.where(self.mask, _c(1, dt), self.zero)
        else:
            wshape = (1,) * axis + (classes,) + (1,) * (x.type.rank - axis - 1)
            self.wb = B.reshape(weights, wshape)
            picked_w = B.where(self.mask, B.expand(self.wb, x), self.zero)
        self.w = B.reduce_sum(picked_w, (axis,))

    def nll(self, x: Value) -> Value:
        """``-(picked value) * weight`` per position: ``x``'s shape without the class axis."""
        p = B.reduce_sum(B.where(self.mask, x, self.zero), (self.axis,))  # one term: exact
        return B.neg(B.mul(p, self.w))


def _reduce(per: Value, w: Value, reduction: str) -> Value:
    if reduction == "none":
        return per
    total = _all(per)
    return total if reduction == "sum" else B.div(total, _all(w))


def negative_log_likelihood(input: Value, labels: Value, weights: Value | None = None,
                            reduction: str = "mean", ignore_index: int | None = None,
                            class_axis: int = 1) -> Value:
    """PyTorch's ``nll_loss`` (ONNX NegativeLogLikelihoodLoss) on log probabilities.

    Classes are on ``class_axis`` (default 1): each element's loss is ``-input[n, labels[n, ...],
    ...]`` times the label's weight; ``"mean"`` divides the sum by the sum of the counted weights.
    A label equal to ``ignore_index``, negative or ``>= C`` counts nowhere (loss and weight 0).
    """
    c = ArgCheck("negative_log_likelihood")
    x, lab, w, red, ign, axis = _check(c, input, labels, weights, reduction, ignore_index,
                                       "input", class_axis)
    picked = _Picked(x, lab, w, ign, axis)
    return _reduce(picked.nll(x), picked.w, red)


def softmax_cross_entropy_parts(scores: Value, labels: Value, weights: Value | None = None,
                                reduction: str = "mean", ignore_index: int | None = None,
                                label_smoothing: float = 0.0, class_axis: int = 1
                                ) -> tuple[Value, Value]:
    """``(loss, log_softmax(scores, axes=(class_axis,)))``: §18.3, and the log probabilities
    ONNX's SoftmaxCrossEntropyLoss returns as its second output."""
    c = ArgCheck("softmax_cross_entropy")
    x, lab, w, red, ign, axis = _check(c, scores, labels, weights, reduction, ignore_index,
                                       "scores", class_axis)
    eps = c.real("label_smoothing", label_smoothing, 0.0, 1.0)
    log_p = B.log_softmax(x, (axis,))
    picked = _Picked(x, lab, w, ign, axis)
    nll = picked.nll(log_p)
    if eps == 0:
        return _reduce(nll, picked.w, red), log_p
    dt = x.type.dtype
    classes = x.type.shape[axis]
    assert isinstance(classes, int)
    counted = B.reduce_sum(B.where(picked.mask, _c(1, dt), picked.zero), (axis,))
    valid = B.greater(counted, picked.zero)
    weighted = log_p if picked.wb is None else B.mul(log_p, B.expand(picked.wb, log_p))
    smooth = B.where(valid, B.neg(B.reduce_sum(weighted, (axis,))), picked.zero)
    keep, spread = _c(1.0 - eps, dt), _c(eps / classes, dt)
    if red == "none":
        return B.add(B.mul(nll, keep), B.mul(smooth, spread)), log_p
    a, b = _all(nll), _all(smooth)
    if red == "mean":
        total_w = _all(picked.w)
        a, b = B.div(a, total_w), B.div(b, total_w)
    return B.add(B.mul(a, keep), B.mul(b, spread)), log_p


def softmax_cross_entropy(scores: Value, labels: Value, weights: Value | None = None,
                          reduction: str = "mean", ignore_index: int | None = None,
                          label_smoothing: float = 0.0, class_axis: int = 1) -> Value:
    """PyTorch's ``cross_entropy`` with class indices (ONNX SoftmaxCrossEntropyLoss).

    ``negative_log_likelihood`` of ``log_softmax(scores)`` over ``class_axis`` (default 1; ``-1``
    for a language model's ``[N, T, V]`` logits); with ``label_smoothing`` e, the loss mixes it
    (weight ``1 - e``) with the mean over the classes of ``-log_softmax`` (weight ``e``), as
    PyTorch does.
    """
    return softmax_cross_entropy_parts(scores, labels, weights, reduction, ignore_index,
                                       label_smoothing, class_axis)[0]


def mean_squared_error(input: Value, target: Value, reduction: str = "mean") -> Value:
    """PyTorch's ``mse_loss``: ``(input - target)**2``, reduced by ``"mean"``, ``"sum"``
    or ``"none"``."""
    c = ArgCheck("mean_squared_error")
    x = c.floating("input", input, 0, 8)
    t = c.like("target", target, x, "input")
    red = c.choice("reduction", reduction, REDUCTIONS)
    d = B.sub(x, t)
    s = B.mul(d, d)
    if red == "none":
        return s
    if red == "sum":
        return _all(s)
    return B.reduce_mean(s) if s.type.rank else s


__all__: list[Any] = ["negative_log_likelihood", "softmax_cross_entropy",
                      "softmax_cross_entropy_parts", "mean_squared_error"]
