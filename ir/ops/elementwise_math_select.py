"""Element-wise selections (SPEC-training.md §16.3, §16.4): maximum, minimum, the comparisons
(greater, less, equal, greater_equal, less_equal, with bool results) and where.

All are exact: a comparison per element, and a copy of the selected operand's stored value
(-0.0 and NaN payloads included). ``maximum``/``minimum`` ignore NaN (a NaN loses to a number;
two NaNs give ``lhs``) and give ``lhs`` on ties, ±0 included.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.arith import ANY, unbroadcast
from gradc.ir.ops.registry import ELEMENTWISE, Checker, OpDef, make_node, register
from gradc.ir.types import NUMERIC, Dim, DType, TensorType


def broadcast_named(c: Checker, shapes: Sequence[tuple[str, Sequence[Dim]]]) -> tuple[Dim, ...]:
    """NumPy broadcasting of named operand shapes (dims compared as written, §9.4)."""
    n = max(len(s) for _, s in shapes)
    out: list[Dim] = [1] * n
    for name, s in shapes:
        for i, d in enumerate((1,) * (n - len(s)) + tuple(s)):
            if d == 1 or d == out[i]:
                continue
            if out[i] != 1:
                c.fail(f"{name}.shape", f"a shape that broadcasts with the other operands "
                       f"(axis {i - (n - len(s))}: {out[i]} or 1)", tuple(s))
            out[i] = d
    return tuple(out)


def binary_infer(c: Checker, dtypes: Sequence[DType], result: DType | None = None
                 ) -> list[TensorType]:
    """The checklist of a broadcasting binary op: lhs dtype and rank, rhs dtype and rank, shape."""
    c.dtype_in("lhs", dtypes)
    c.rank_in("lhs", 0, 8)
    c.same_dtype("rhs", "lhs")
    c.rank_in("rhs", 0, 8)
    shape = broadcast_named(c, [("lhs", c.t("lhs").shape), ("rhs", c.t("rhs").shape)])
    return [TensorType(result or c.t("lhs").dtype, shape)]


def _where(c: Value, a: Value, b: Value) -> Value:
    return make_node("where", [c, a, b], {})


def _zero(dtype: DType) -> Value:
    return make_node("constant", [], {"value": np.zeros((), dtype.numpy)})


def select_grads(node: Node, s: Value, g: Value | None) -> list[Value | None]:
    """(unbroadcast(where(s, g, 0)), unbroadcast(where(s, 0, g))) for operands 1..2 of a
    selection whose first pick is ``s`` (maximum, minimum, where)."""
    a, b = node.inputs[-2:]
    if g is None or not a.type.dtype.is_float:
        return [None, None]
    zero = _zero(g.type.dtype)
    return [unbroadcast(_where(s, g, zero), a.type.shape),
            unbroadcast(_where(s, zero, g), b.type.shape)]


# -- maximum, minimum ---------------------------------------------------------------------------

class _Extremum(OpDef):
    operands = ("lhs", "rhs")
    traits = ELEMENTWISE
    dtypes = NUMERIC
    promote_scalars = True
    nan_from = ("lhs", "rhs")  # NaN only when both operands are NaN
    order = ""  # the comparison that picks lhs: greater_equal or less_equal

    def infer(self, c: Checker) -> list[TensorType]:
        return binary_infer(c, self.dtypes)

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """s = where(rhs == rhs, lhs >= rhs, True) (<= for minimum): dlhs = unbroadcast(
        where(s, dY, 0)), drhs = unbroadcast(where(s, 0, dY)); a tie sends all to lhs."""
        (g,) = grads
        if g is None or not node.inputs[0].type.dtype.is_float:
            return [None, None]
        a, b = node.inputs
        picks = make_node(self.order, [a, b], {})
        true = make_node("constant", [], {"value": np.array(True)})
        s = _where(make_node("equal", [b, b], {}), picks, true)
        return select_grads(node, s, g)


@register
class Maximum(_Extremum):
    """``maximum(lhs, rhs)``: lhs where lhs >= rhs or rhs is NaN, else rhs (NaN-ignoring)."""

    name = "maximum"
    numerics = "exact"
    order = "greater_equal"

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [np.asarray(np.where((a >= b) | (b != b), a, b))]


@register
class Minimum(_Extremum):
    """``minimum(lhs, rhs)``: lhs where lhs <= rhs or rhs is NaN, else rhs (NaN-ignoring)."""

    name = "minimum"
    numerics = "exact"
    order = "less_equal"

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [np.asarray(np.where((a <= b) | (b != b), a, b))]


# -- comparisons --------------------------------------------------------------------------------

class _Compare(OpDef):
    operands = ("lhs", "rhs")
    traits = ELEMENTWISE
    dtypes = NUMERIC
    promote_scalars = True
    nan_from = ()  # bool

    def infer(self, c: Checker) -> list[TensorType]:
        return binary_infer(c, self.dtypes, DType.bool)

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """A bool result carries no gradient (§9.7)."""
        return [None, None]


@register
class Greater(_Compare):
    """``greater(lhs, rhs)``: lhs > rhs as bool (false if either is NaN)."""

    name = "greater"
    numerics = "exact"

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(np.greater(a, b))]


@register
class Less(_Compare):
    """``less(lhs, rhs)``: lhs < rhs as bool (false if either is NaN)."""

    name = "less"
    numerics = "exact"

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(np.less(a, b))]


@register
class Equal(_Compare):
    """``equal(lhs, rhs)``: lhs == rhs as bool (-0 == +0; false if either is NaN)."""

    name = "equal"
    numerics = "exact"

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(np.equal(a, b))]


@register
class GreaterEqual(_Compare):
    """``greater_equal(lhs, rhs)``: lhs >= rhs as bool (false if either is NaN)."""

    name = "greater_equal"
    numerics = "exact"

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(np.greater_equal(a, b))]


@register
class LessEqual(_Compare):
    """``less_equal(lhs, rhs)``: lhs <= rhs as bool (false if either is NaN)."""

    name = "less_equal"
    numerics = "exact"

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(np.less_equal(a, b))]


# -- where --------------------------------------------------------------------------------------

@register
class Where(OpDef):
    """``where(condition, a, b)``: a where condition, else b; all three broadcast."""

    name = "where"
    numerics = "exact"
    operands = ("condition", "a", "b")
    traits = ELEMENTWISE
    dtypes = (DType.bool,)
    nan_from = ("a", "b")

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("condition", self.dtypes)
        c.rank_in("condition", 0, 8)
        c.dtype_in("a", ANY)
        c.rank_in("a", 0, 8)
        c.same_dtype("b", "a")
        c.rank_in("b", 0, 8)
        shape = broadcast_named(c, [(k, c.t(k).shape) for k in self.operands])
        return [TensorType(c.t("a").dtype, shape)]

    def reference(self, attrs: Mapping[str, Any], cond: np.ndarray, a: np.ndarray,
                  b: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(np.where(cond, a, b))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """da = unbroadcast(where(c, dY, 0)), db = unbroadcast(where(c, 0, dY)); c gets none."""
        (g,) = grads
        return [None] + select_grads(node, node.inputs[0], g)
