"""Arithmetic and structural ops: add, sub, mul, neg, constant, reduce_sum, reshape, cast, identity.

Rules (NumPy semantics for operands of one dtype):
- ``add``, ``sub``, ``mul``: both operands have the same dtype (any numeric dtype, no bool) and
  broadcast as NumPy does (dims compared as written: equal, or one of them the int 1). Integer
  overflow wraps around (two's complement); float16 is computed in float32 and rounded once.
- ``neg``: unsigned integers wrap (``neg(1) == max``), as in NumPy.
- ``reduce_sum(input, axes=None, keepdims=False)``: ``axes=None`` reduces every axis, ``()`` none.
  Floating sums accumulate in float32 (float16, float32) or float64, in increasing logical index
  order, and round once; integer sums wrap in the input dtype (so they are exact).
- ``reshape(input, shape)``: ``shape`` holds ints, at most one -1, and symbols; the symbols must
  be those of the input (as a multiset) and the static sizes must multiply to the same count.
- ``cast(input, dtype)``: NumPy ``astype``; float to integer is defined only for values in range
  (out-of-range and NaN give an implementation-defined value, as in C and NumPy).
- ``constant(value)``: a tensor literal; ``identity(input)``: a copy.
Ranks 0..8 are accepted (a loss is a scalar); every dim is >= 1.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.registry import (DERIVED, ELEMENTWISE, PURE, Attr, Checker, OpDef, make_node,
                                   register)
from gradc.ir.types import NUMERIC, Dim, DType, TensorType, element_count

ANY = NUMERIC + (DType.bool,)


def broadcast_shapes(c: Checker, a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...]:
    """NumPy broadcasting of two shapes whose dims are compared as written."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out: list[Dim] = []
    for i, (x, y) in enumerate(zip(pa, pb)):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            c.fail("rhs.shape", f"a shape that broadcasts with {tuple(a)} (axis {i}: {x} or 1)",
                   tuple(b))
    return tuple(out)


def unbroadcast(g: Value, shape: Sequence[Dim]) -> Value:
    """Sum a gradient of a broadcast result back to an operand's shape."""
    lead = g.type.rank - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.type.shape[lead + i] != 1)
    if axes:
        g = make_node("reduce_sum", [g], {"axes": axes, "keepdims": True})
    if g.type.shape != tuple(shape):
        g = make_node("reshape", [g], {"shape": tuple(shape)})
    return g


class _Binary(OpDef):
    operands = ("lhs", "rhs")
    traits = ELEMENTWISE
    dtypes = NUMERIC
    promote_scalars = True
    ufunc: Any = None

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("lhs", self.dtypes)
        c.rank_in("lhs", 0, 8)
        c.same_dtype("rhs", "lhs")
        c.rank_in("rhs", 0, 8)
        shape = broadcast_shapes(c, c.t("lhs").shape, c.t("rhs").shape)
        return [TensorType(c.t("lhs").dtype, shape)]

    def reference(self, attrs: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [np.asarray(type(self).ufunc(a, b), dtype=a.dtype)]


@register
class Add(_Binary):
    """``add(lhs, rhs)``: elementwise sum with broadcasting."""

    name = "add"
    numerics = "exact"
    ufunc = np.add

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """z = a + b  =>  da = unbroadcast(dz), db = unbroadcast(dz)."""
        (g,) = grads
        if g is None:
            return [None, None]
        return [unbroadcast(g, v.type.shape) for v in node.inputs]


@register
class Sub(_Binary):
    """``sub(lhs, rhs)``: elementwise difference with broadcasting."""

    name = "sub"
    numerics = "exact"
    ufunc = np.subtract

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """z = a - b  =>  da = unbroadcast(dz), db = unbroadcast(neg(dz))."""
        (g,) = grads
        if g is None:
            return [None, None]
        a, b = node.inputs
        return [unbroadcast(g, a.type.shape),
                unbroadcast(make_node("neg", [g], {}), b.type.shape)]


@register
class Mul(_Binary):
    """``mul(lhs, rhs)``: elementwise product with broadcasting."""

    name = "mul"
    numerics = "exact"
    ufunc = np.multiply

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """z = a * b  =>  da = unbroadcast(dz * b), db = unbroadcast(dz * a)."""
        (g,) = grads
        if g is None:
            return [None, None]
        a, b = node.inputs
        return [unbroadcast(make_node("mul", [g, b], {}), a.type.shape),
                unbroadcast(make_node("mul", [g, a], {}), b.type.shape)]


class _SameType(OpDef):
    """An elementwise op of one operand whose result has the operand's type."""

    operands = ("input",)
    traits = ELEMENTWISE
    nan_from = ("input",)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 0, 8)
        return [c.t("input")]


@register
class Neg(_SameType):
    """``neg(input)``: elementwise negation (unsigned integers wrap)."""

    name = "neg"
    numerics = "exact"
    dtypes = NUMERIC

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [np.asarray(np.negative(x), dtype=x.dtype)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = -x  =>  dx = -dy."""
        (g,) = grads
        return [None if g is None else make_node("neg", [g], {})]


@register
class Identity(_SameType):
    """``identity(input)``: a copy (used to output a value under a second name)."""

    name = "identity"
    numerics = "exact"
    dtypes = ANY

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [x.copy()]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = x  =>  dx = dy."""
        return [grads[0]]


@register
class Constant(OpDef):
    """``constant(value)``: a tensor literal of rank 0..8 with every dim >= 1."""

    name = "constant"
    numerics = "exact"
    operands = ()
    attributes = (Attr("value", "array"),)
    traits = PURE

    def infer(self, c: Checker) -> list[TensorType]:
        v = c.raw.get("value")
        if not isinstance(v, np.ndarray):
            c.fail("value", "a NumPy array", type(v).__name__)
        if v.dtype.name not in DType.__members__:
            c.fail("value.dtype", "one of " + ", ".join(DType.__members__), v.dtype)
        if v.ndim > 8 or 0 in v.shape:
            c.fail("value.shape", "rank 0..8 and every dim >= 1", v.shape)
        v = np.array(v, order="C", copy=True)  # (ascontiguousarray makes rank 0 rank 1)
        v.flags.writeable = False
        c.keep("value", v)
        return [TensorType(DType.of(v.dtype), v.shape)]

    def reference(self, attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.array(attrs["value"])]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """A constant has no inputs."""
        return []


@register
class ReduceSum(OpDef):
    """``reduce_sum(input, axes=None, keepdims=False)``: sum in canonical order, round once."""

    name = "reduce_sum"
    numerics = "summing"
    operands = ("input",)
    attributes = (Attr("axes", "ints", DERIVED), Attr("keepdims", "bool", False))
    traits = PURE
    dtypes = NUMERIC

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        rank = c.rank_in("input", 0, 8)
        axes = c.ints("axes", None, default=tuple(range(rank)))
        norm = []
        for i, a in enumerate(axes):
            if not -rank <= a < rank:
                c.fail(f"axes[{i}]", f"an axis in -{rank}..{rank - 1}", a)
            if a % rank in norm:
                c.fail(f"axes[{i}]", "an axis not listed twice", a)
            norm.append(a % rank)
        axes = c.keep("axes", tuple(sorted(norm)))
        keep = c.boolean("keepdims")
        shape = c.t("input").shape
        out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
        return [TensorType(c.t("input").dtype, out)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        axes = attrs["axes"]
        kept = [i for i in range(x.ndim) if i not in axes]
        acc = {"f": np.float64 if x.dtype == np.float64 else np.float32}.get(x.dtype.kind, x.dtype)
        k = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))  # an array: fits
        flat = np.transpose(x, list(axes) + kept).reshape(k, -1)
        with np.errstate(all="ignore"):
            total = np.cumsum(flat, axis=0, dtype=acc)[-1]  # sequential: canonical order
        shape = tuple(1 if i in axes else x.shape[i] for i in range(x.ndim)
                      if attrs["keepdims"] or i not in axes)
        with np.errstate(over="ignore"):  # float16 sums beyond its range round to inf
            return [total.astype(x.dtype).reshape(shape)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = reduce_sum(x, axes)  =>  dx = broadcast of dy to x's shape."""
        (g,) = grads
        if g is None:
            return [None]
        x = node.inputs[0]
        kshape = tuple(1 if i in node.attrs["axes"] else d for i, d in enumerate(x.type.shape))
        if g.type.shape != kshape:
            g = make_node("reshape", [g], {"shape": kshape})
        return [broadcast_to(g, x)]


def broadcast_to(g: Value, like: Value) -> Value:
    """``g`` broadcast to the shape of ``like`` (which may have symbolic dims)."""
    if g.type.shape == like.type.shape:
        return g
    return make_node("expand", [g, like], {})


@register
class Expand(OpDef):
    """``expand(input, like)``: ``input`` broadcast to the shape of ``like`` (values unused)."""

    name = "expand"
    numerics = "exact"
    operands = ("input", "like")
    traits = ELEMENTWISE
    shape_operands = ("like",)
    dtypes = ANY
    nan_from = ("input",)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 0, 8)
        c.rank_in("like", 0, 8)
        shape = broadcast_shapes(c, c.t("input").shape, c.t("like").shape)
        if shape != c.t("like").shape:
            c.fail("input.shape", f"a shape that broadcasts to {c.t('like').shape}",
                   c.t("input").shape)
        return [TensorType(c.t("input").dtype, shape)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  like: np.ndarray) -> list[np.ndarray]:
        return [np.broadcast_to(x, like.shape).copy()]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = expand(x, like)  =>  dx = unbroadcast(dy); like gets none."""
        (g,) = grads
        return [None if g is None else unbroadcast(g, node.inputs[0].type.shape), None]


@register
class Reshape(OpDef):
    """``reshape(input, shape)``: same elements in row-major order, new shape."""

    name = "reshape"
    numerics = "exact"
    operands = ("input",)
    attributes = (Attr("shape", "dims"),)
    traits = PURE
    dtypes = ANY

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 0, 8)
        shape = list(c.dims("shape"))
        src = c.t("input").shape
        if len(shape) > 8:
            c.fail("shape", "at most 8 dims", len(shape))
        sym_in = Counter(d for d in src if isinstance(d, str))
        sym_out = Counter(d for d in shape if isinstance(d, str))
        if sym_in != sym_out:
            c.fail("shape", f"the symbols of input.shape {sorted(sym_in.elements())}",
                   sorted(sym_out.elements()))
        n_in = element_count(src)
        static = [d for d in shape if not isinstance(d, str)]
        holes = [i for i, d in enumerate(shape) if d == -1]
        for i, d in enumerate(shape):
            if not isinstance(d, str) and d < 1 and d != -1:
                c.fail(f"shape[{i}]", "an integer >= 1, -1 or a symbol", d)
        if len(holes) > 1:
            c.fail("shape", "at most one -1", shape)
        known = element_count(d for d in static if d != -1)
        if holes:
            if n_in % known:
                c.fail("shape", f"sizes whose product divides {n_in}", tuple(shape))
            shape[holes[0]] = n_in // known
        elif known != n_in:
            c.fail("shape", f"sizes whose product is {n_in} (as input.shape {src})", tuple(shape))
        c.keep("shape", tuple(shape))
        return [TensorType(c.t("input").dtype, tuple(shape))]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        raise NotImplementedError("reshape needs the symbol bindings: see evaluate")

    def evaluate(self, node: Node, args: Sequence[np.ndarray],
                 bindings: Mapping[str, int]) -> list[np.ndarray]:
        shape = [bindings[d] if isinstance(d, str) else d for d in node.attrs["shape"]]
        return [args[0].reshape(shape).copy()]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = reshape(x, s)  =>  dx = reshape(dy, x.shape)."""
        (g,) = grads
        if g is None:
            return [None]
        return [make_node("reshape", [g], {"shape": node.inputs[0].type.shape})]


@register
class Cast(OpDef):
    """``cast(input, dtype)``: each element converted to ``dtype`` as NumPy's ``astype`` does;
    a float converted to an integer dtype must be in its range (NaN and out-of-range values give
    an implementation-defined result, as in C and NumPy)."""

    name = "cast"
    numerics = "exact"
    operands = ("input",)
    attributes = (Attr("dtype", "dtype"),)
    traits = ELEMENTWISE
    dtypes = ANY

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        c.rank_in("input", 0, 8)
        d = c.dtype_attr("dtype")
        return [TensorType(d, c.t("input").shape)]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [x.astype(attrs["dtype"].numpy)]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """y = cast(x, t)  =>  dx = cast(dy, x.dtype) for floating x (integers get none)."""
        (g,) = grads
        if g is None or not node.inputs[0].type.dtype.is_float:
            return [None]
        return [make_node("cast", [g], {"dtype": node.inputs[0].type.dtype})]
