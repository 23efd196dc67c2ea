"""Operators of SPEC-training.md §17: softmax and log_softmax over the joint extent of ``axes``.

Per group (the elements sharing the other coordinates), in ``ACC``: the NaN-ignoring first
maximum ``mx`` (§14.2), ``sh = x - mx``, ``e = exp(sh)`` in float64 rounded once, the canonical
sum ``total`` of ``e``; then ``e / total`` or ``sh - log(total)`` (float64 log rounded once).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.common import F
from gradc.ir.ops.reduce import check_axes, group_rows, select_index, ungroup
from gradc.ir.ops.registry import Attr, Checker, OpDef, make_node, register
from gradc.ir.types import TensorType


def softmax_rows(x: np.ndarray, axes: Sequence[int], log: bool) -> np.ndarray:
    """§17.1's reference, vectorized over the groups (each member in canonical order)."""
    acc = np.float64 if x.dtype == np.float64 else np.float32
    rows = group_rows(x, axes).astype(acc)
    with np.errstate(all="ignore"):
        idx = select_index(rows, True)
        mx = np.take_along_axis(rows, idx[None, :], axis=0)
        sh = (rows - mx).astype(acc)  # type: ignore[operator]
        e = np.exp(sh.astype(np.float64)).astype(acc)
        total = np.cumsum(e, axis=0, dtype=acc)[-1:]  # sequential: canonical order
        if log:
            y = (sh - np.log(total.astype(np.float64)).astype(acc)).astype(acc)
        else:
            y = (e / total).astype(acc)  # type: ignore[operator]
        out = y.astype(x.dtype)
    return np.ascontiguousarray(ungroup(out, x.shape, axes))


class _Softmax(OpDef):
    operands = ("input",)
    attributes = (Attr("axes", "ints"),)
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        dt = c.dtype_in("input", self.dtypes)
        check_axes(c, c.rank_in("input", 1, 8), allow_empty=False)
        return [TensorType(dt, c.t("input").shape)]


@register
class Softmax(_Softmax):
    """``softmax(input, axes)``: exp(x - max) / sum over the joint extent of ``axes``."""

    name = "softmax"
    transcendental = True

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [softmax_rows(x, attrs["axes"], False)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = mul(Y, sub(dY, reduce_sum(mul(dY, Y), axes, keepdims=True)))."""
        (g,) = grads
        if g is None:
            return [None]
        y = node.outputs[0]
        s = make_node("reduce_sum", [make_node("mul", [g, y], {})],
                      {"axes": node.attrs["axes"], "keepdims": True})
        return [make_node("mul", [y, make_node("sub", [g, s], {})], {})]


@register
class LogSoftmax(_Softmax):
    """``log_softmax(input, axes)``: (x - max) - log(sum of exp(x - max)) over ``axes``."""

    name = "log_softmax"
    transcendental = True

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [softmax_rows(x, attrs["axes"], True)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dX = sub(dY, mul(exp(Y), reduce_sum(dY, axes, keepdims=True)))."""
        (g,) = grads
        if g is None:
            return [None]
        s = make_node("reduce_sum", [g], {"axes": node.attrs["axes"], "keepdims": True})
        e = make_node("exp", [node.outputs[0]], {})
        return [make_node("sub", [g, make_node("mul", [e, s], {})], {})]
