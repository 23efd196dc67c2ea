"""``gemm`` (SPEC-training.md §11): batched ``alpha * op(a) @ op(b) + beta * c``.

Canonical order (§11.1): every result element sums its K products from +0 in ``ACC``, k
ascending, each addition rounded; then ``alpha * acc`` is rounded, then ``beta * c`` is rounded
and added. The reference keeps that order with whole-array operations over the k axis, so an
MLP layer costs K vectorized steps, not M*N*K Python ones.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.arith import unbroadcast
from gradc.ir.ops.common import F, acc_dtype, rounded
from gradc.ir.ops.elementwise_math import float32_attr, scalar_const
from gradc.ir.ops.registry import PURE, Attr, Checker, OpDef, fmt_shape, make_node, register
from gradc.ir.types import Dim, TensorType


def _mk(t: TensorType, flag: bool) -> tuple[Dim, Dim]:
    """The (rows, cols) of ``op(t)``."""
    r, c = t.shape[-2], t.shape[-1]
    return (c, r) if flag else (r, c)


@register
class Gemm(OpDef):
    """``gemm(a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=1.0)``:
    ``alpha * op(a) @ op(b) + beta * c`` over broadcast batch axes."""

    name = "gemm"
    numerics = "summing"
    operands = ("a", "b", "c")
    optional_operands = ("c",)
    attributes = (Attr("trans_a", "bool", False), Attr("trans_b", "bool", False),
                  Attr("alpha", "scalar", 1.0), Attr("beta", "scalar", 1.0))
    traits = PURE
    dtypes = F

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("a", 2, 8)
        c.dtype_in("a", self.dtypes)
        c.same_dtype("b", "a")
        if c.t("b").rank != rank:
            c.fail("b.rank", f"{rank} (same as a)", c.t("b").rank)
        has_c = "c" in c.types
        if has_c:
            c.same_dtype("c", "a")
            if c.t("c").rank != rank:
                c.fail("c.rank", f"{rank} (same as a)", c.t("c").rank)
        ta, tb = c.boolean("trans_a"), c.boolean("trans_b")
        float32_attr(c, "alpha", 1.0)
        float32_attr(c, "beta", 1.0)
        a, b = c.t("a"), c.t("b")
        m, k = _mk(a, ta)
        k2, n = _mk(b, tb)
        if k2 != k:
            c.fail("b.shape", f"K = {k} on the {'last' if tb else 'second-last'} axis "
                   f"(a is {fmt_shape(a.shape)})", fmt_shape(b.shape))
        batch: list[Dim] = []
        for i, (x, y) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
            if x == y or y == 1:
                batch.append(x)
            elif x == 1:
                batch.append(y)
            else:
                c.fail("b.shape", f"batch axis {i} equal to a's {x} or 1", fmt_shape(b.shape))
        out = tuple(batch) + (m, n)
        if has_c:
            cs = c.t("c").shape
            for i, (x, y) in enumerate(zip(cs, out)):
                if x != y and x != 1:
                    c.fail("c.shape", f"axis {i} equal to the result's {y} or 1 (result "
                           f"{fmt_shape(out)})", fmt_shape(cs))
        return [TensorType(a.dtype, out)]

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray,
                  c: np.ndarray | None = None) -> list[np.ndarray]:
        return [gemm_reference(a, b, c, attrs["trans_a"], attrs["trans_b"], attrs["alpha"],
                               attrs["beta"])]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dA, dB as gemms of dY and the other operand (then unbroadcast),
        dC = unbroadcast(dY * beta)."""
        dy = grads[0]
        if dy is None:
            return [None] * len(node.inputs)
        a, b = node.inputs[0], node.inputs[1]
        ta, tb, alpha = node.attrs["trans_a"], node.attrs["trans_b"], node.attrs["alpha"]
        if ta:
            da = _gemm(b, dy, trans_a=tb, trans_b=True, alpha=alpha)
        else:
            da = _gemm(dy, b, trans_a=False, trans_b=not tb, alpha=alpha)
        if tb:
            db = _gemm(dy, a, trans_a=True, trans_b=ta, alpha=alpha)
        else:
            db = _gemm(a, dy, trans_a=not ta, trans_b=False, alpha=alpha)
        out: list[Value | None] = [unbroadcast(da, a.type.shape), unbroadcast(db, b.type.shape)]
        if len(node.inputs) == 3:
            c, beta = node.inputs[2], node.attrs["beta"]
            if beta == 0:
                out.append(None)
            else:
                dc = make_node("mul", [dy, scalar_const(beta, dy.type.dtype)], {})
                out.append(unbroadcast(dc, c.type.shape))
        return out


def _gemm(a: Value, b: Value, trans_a: bool, trans_b: bool, alpha: float) -> Value:
    return make_node("gemm", [a, b], {"trans_a": trans_a, "trans_b": trans_b, "alpha": alpha,
                                      "beta": 1.0})


def gemm_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_a: bool,
                   trans_b: bool, alpha: float, beta: float) -> np.ndarray:
    """gemm in its canonical order: k ascending, each operation rounded in ACC, vectorized over
    (batch, m, n)."""
    acc_t = acc_dtype(a.dtype)
    A, B = a.astype(acc_t), b.astype(acc_t)  # widening is exact
    if trans_a:
        A = np.swapaxes(A, -1, -2)
    if trans_b:
        B = np.swapaxes(B, -1, -2)
    batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    acc = np.zeros(batch + (A.shape[-2], B.shape[-1]), acc_t)
    with np.errstate(all="ignore"):
        for k in range(A.shape[-1]):  # canonical order: k ascending
            acc += A[..., :, k:k + 1] * B[..., k:k + 1, :]  # product rounded, then the sum
        y = acc_t(alpha) * acc
        if c is not None and beta != 0:  # beta == 0: c is not read
            y = y + acc_t(beta) * c.astype(acc_t)
    return rounded(y, a.dtype)
