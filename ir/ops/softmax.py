"""Operators of SPEC-training.md §17: softmax and log_softmax over the joint extent of ``axes``.

Per group (the elements sharing the other coordinates), in ``ACC``: the NaN-ignoring first
maximum ``mx`` (§14.2), ``sh = x - mx``, ``e = exp(sh)`` in float64 rounded once, the canonical
sum ``total`` of ``e``; then ``e / total`` or ``sh - log(total)`` (float64 log rounded once).

The guarded softmax (SPEC-transformers §27.2). Attention graphs zero the rows of a fully masked
query: ``Yp = where(c, 0, Y)`` with ``c = is_nan(Y)`` (PyTorch's SDPA export) or a row guard
(ONNX Attention's body). §17.1's rule ``Y * (dY - sum(dY * Y))`` then multiplies such a row's
NaN ``Y`` by the zero cotangent that ``where`` sends back, and the NaN reaches dQ's row and all
of dK. When ``Yp`` is ``Y``'s only float reader, gradc differentiates the pair as one function
(PyTorch's ``_safe_softmax``): the same rule with ``Yp`` in place of ``Y``. That needs to know
how ``Y`` is read, which a VJP rule does not see among its arguments, so ``Softmax.vjp`` asks
the graph (``guard_of``): ``Y.graph`` holds every reader. This keeps ``gradc.grad`` free of op
names and the rule next to the other one it replaces; it is exact because ``where``'s own VJP
has already made ``Y``'s cotangent ``where(c, 0, G)`` (reverse order: the reader first), and a
softmax group is all NaN or NaN-free (§17.1), so ``c`` is constant along ``axes`` and unguarded
groups get §17.1's result bit for bit. Any other reader that passes a float on (a second use of
``Y``, a graph output) keeps §17.1's rule: nothing else in the graph knows to drop the NaNs.
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
    """softmax's reference, vectorized over the groups (each member in canonical order)."""
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
        """dX = mul(Y, sub(dY, reduce_sum(mul(dY, Y), axes, keepdims=True))), with the guard's
        ``Yp`` in place of ``Y`` when ``Y``'s only float reader is an attention guard
        ``Yp = where(is_nan(Y) or a row mask, 0, Y)`` (``guard_of``; ``dY`` is then
        ``where``'s): a fully masked row then gets a zero gradient, as PyTorch's
        ``_safe_softmax``."""
        (g,) = grads
        if g is None:
            return [None]
        y = guard_of(node) or node.outputs[0]
        s = make_node("reduce_sum", [make_node("mul", [g, y], {})],
                      {"axes": node.attrs["axes"], "keepdims": True})
        return [make_node("mul", [y, make_node("sub", [g, s], {})], {})]


def guard_of(node: Node) -> Value | None:
    """``Yp`` when the softmax's result ``Y`` is read as a float only by ``Yp = where(c, 0, Y)``
    (``0`` a zero constant, ``Yp`` of ``Y``'s shape, ``c`` either ``is_nan(Y)`` or of dims 1
    on every softmax axis), and is no graph output; None otherwise (§27.2)."""
    y = node.outputs[0]
    graph = y.graph
    if graph is None or any(v is y for v in graph.outputs):
        return None
    guard: Node | None = None
    for n in graph.nodes:
        if not any(v is y for v in n.inputs) or not any(o.type.dtype.is_float for o in n.outputs):
            continue  # not a reader, or a predicate (is_nan): no float passes on
        if guard is not None or not _guards(n, y, node.attrs["axes"]):
            return None
        guard = n
    return None if guard is None else guard.outputs[0]


def _guards(n: Node, y: Value, axes: Sequence[int]) -> bool:
    """Whether ``n`` is ``where(c, 0, y)`` with a row guard ``c`` and ``y``'s shape."""
    if n.op != "where" or n.inputs[2] is not y or n.outputs[0].type.shape != y.type.shape:
        return False
    c, zero = n.inputs[0], n.inputs[1].producer
    if zero is None or zero.op != "constant" or np.any(zero.attrs["value"] != 0):
        return False
    if c.producer is not None and c.producer.op == "is_nan" and c.producer.inputs[0] is y:
        return True
    dims = (1,) * (y.type.rank - c.type.rank) + tuple(c.type.shape)
    return all(dims[a] == 1 for a in axes)


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
