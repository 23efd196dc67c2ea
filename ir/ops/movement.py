"""Data movement (SPEC-training.md §15: join, split, transpose, pad) and one_hot (§18.1).

Every op here copies or selects values: the references move bit patterns (-0.0 and NaN payloads
kept), and every target reproduces them bit for bit. ``join`` is the one variadic op: its node's
inputs are the sequence ``inputs``; ``split`` returns a tuple, even of one result.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.common import SLICE_DTYPES
from gradc.ir.ops.registry import PURE, Attr, Checker, OpDef, make_node, register, show_value
from gradc.ir.types import Dim, DType, TensorType

MOVE_DTYPES = SLICE_DTYPES + (DType.bool,)  # join, split, transpose (§9.2)
PAD_DTYPES = SLICE_DTYPES
ONE_HOT_INDICES = (DType.int64, DType.int32, DType.uint64, DType.uint32)
ONE_HOT_VALUES = MOVE_DTYPES


def check_axis(c: Checker, rank: int, name: str = "axis") -> int:
    """A required integer axis in ``-rank..rank-1``, stored normalized (§9.3)."""
    v = c.raw.get(name)
    if v is None:
        c.fail(name, "a value (required argument)", "none")
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        c.fail(name, "an integer", show_value(v, repr))
    if not -rank <= int(v) < rank:
        c.fail(name, f"an axis in {-rank}..{rank - 1}", int(v))
    return c.keep(name, int(v) % rank)


def _zeros_like(v: Value) -> Value:
    """``expand(constant(0), v)``: zeros of ``v``'s type (an absent cotangent)."""
    zero = make_node("constant", [], {"value": np.zeros((), v.type.dtype.numpy)})
    return make_node("expand", [zero, v], {})


@register
class Join(OpDef):
    """``join(inputs, axis)``: the inputs concatenated along ``axis`` (DirectML JOIN)."""

    name = "join"
    numerics = "exact"
    operands = ("inputs",)
    variadic = True
    attributes = (Attr("axis", "scalar"),)
    traits = PURE
    dtypes = MOVE_DTYPES

    def infer(self, c: Checker) -> list[TensorType]:
        n = len(c.types)
        if n == 0:
            c.fail("inputs", "a non-empty sequence of values", "[]")
        c.dtype_in("inputs[0]", self.dtypes)
        rank = c.rank_in("inputs[0]", 1, 8)
        for i in range(1, n):
            c.same_dtype(f"inputs[{i}]", "inputs[0]")
            if c.t(f"inputs[{i}]").rank != rank:
                c.fail(f"inputs[{i}].rank", f"{rank} (same as inputs[0])", c.t(f"inputs[{i}]").rank)
        axis = check_axis(c, rank)
        first = c.t("inputs[0]").shape
        for i in range(1, n):
            shape = c.t(f"inputs[{i}]").shape
            if any(a != b for k, (a, b) in enumerate(zip(shape, first)) if k != axis):
                want = ", ".join("_" if k == axis else str(d) for k, d in enumerate(first))
                c.fail(f"inputs[{i}].shape", f"({want}) (inputs[0]'s dims off axis {axis})",
                       "(" + ", ".join(str(d) for d in shape) + ")")
        if n == 1:
            return [c.t("inputs[0]")]
        sizes = [c.static_dims(f"inputs[{i}]", [axis])[0] for i in range(n)]
        out = list(first)
        out[axis] = sum(sizes)
        return [TensorType(c.t("inputs[0]").dtype, tuple(out))]

    def reference(self, attrs: Mapping[str, Any], *inputs: np.ndarray) -> list[np.ndarray]:
        return [np.concatenate(inputs, axis=attrs["axis"])]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """Y = join(X..., axis)  =>  dX_k = split(dY, axis, [X.shape[axis] ...])[k]."""
        (dy,) = grads
        if dy is None:
            return [None] * len(node.inputs)
        if len(node.inputs) == 1:
            return [dy]
        axis = node.attrs["axis"]
        sizes = [v.type.shape[axis] for v in node.inputs]
        return list(make_node("split", [dy], {"axis": axis, "split_sizes": sizes}))


@register
class Split(OpDef):
    """``split(input, axis, split_sizes)``: consecutive parts along ``axis`` (a tuple)."""

    name = "split"
    numerics = "exact"
    operands = ("input",)
    attributes = (Attr("axis", "scalar"), Attr("split_sizes", "ints"))
    traits = PURE
    tuple_results = True
    dtypes = MOVE_DTYPES
    nan_from = ("input",)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        rank = c.rank_in("input", 1, 8)
        axis = check_axis(c, rank)
        t = c.t("input")
        sizes = c.ints("split_sizes", None, lo=1)
        n = t.shape[axis]
        if isinstance(n, str):
            c.fail("split_sizes", f"sizes of a static axis (axis {axis} is {n!r})",
                   show_value(sizes))
        if not sizes or sum(sizes) != n:
            c.fail("split_sizes", f"sizes that sum to {n} (input.shape[{axis}])",
                   f"{show_value(sizes)} (sum {sum(sizes)})")
        return [TensorType(t.dtype, t.shape[:axis] + (s,) + t.shape[axis + 1:]) for s in sizes]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        axis, out, start = attrs["axis"], [], 0
        for size in attrs["split_sizes"]:
            part = (slice(None),) * axis + (slice(start, start + size),)
            out.append(x[part].copy())  # a new array, never a view of x
            start += size
        return out

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """Y... = split(X, axis, sizes)  =>  dX = join(dY..., axis), zeros for absent dY."""
        if all(g is None for g in grads):
            return [None]
        parts: list[Value] = [_zeros_like(y) if g is None else g
                              for g, y in zip(grads, node.outputs)]
        if len(parts) == 1:
            return [parts[0]]
        return [make_node("join", parts, {"axis": node.attrs["axis"]})]


def inverse_permutation(perm: Sequence[int]) -> list[int]:
    """``inverse[perm[i]] = i``."""
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return inverse


@register
class Transpose(OpDef):
    """``transpose(input, permutation)``: ``Y[o] = X[p]`` with ``p[permutation[i]] = o[i]``."""

    name = "transpose"
    numerics = "exact"
    operands = ("input",)
    attributes = (Attr("permutation", "ints"),)
    traits = PURE
    dtypes = MOVE_DTYPES
    nan_from = ("input",)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input", self.dtypes)
        rank = c.rank_in("input", 1, 8)
        perm = c.ints("permutation", None)
        if sorted(perm) != list(range(rank)):
            c.fail("permutation", f"a permutation of 0..{rank - 1}", show_value(perm))
        t = c.t("input")
        return [TensorType(t.dtype, tuple(t.shape[p] for p in perm))]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        return [np.transpose(x, attrs["permutation"]).copy()]  # a new C-ordered array

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """Y = transpose(X, p)  =>  dX = transpose(dY, inverse(p))."""
        (dy,) = grads
        if dy is None:
            return [None]
        inverse = inverse_permutation(node.attrs["permutation"])
        return [make_node("transpose", [dy], {"permutation": inverse})]


@register
class Pad(OpDef):
    """``pad(input, start_padding, end_padding, padding_value=0, padding_mode="constant")``:
    ``input`` with ``start_padding[i]`` elements before and ``end_padding[i]`` after it on each
    axis ``i``, all equal to ``padding_value`` (converted to the input's dtype)."""

    name = "pad"
    numerics = "exact"
    operands = ("input",)
    attributes = (Attr("start_padding", "ints"), Attr("end_padding", "ints"),
                  Attr("padding_value", "scalar", 0),
                  Attr("padding_mode", "choice", "constant", ("constant",)))
    traits = PURE
    dtypes = PAD_DTYPES
    nan_from = ("input",)  # padding_value is never NaN (§9.3)

    def infer(self, c: Checker) -> list[TensorType]:
        dtype = c.dtype_in("input", self.dtypes)
        rank = c.rank_in("input", 1, 8)
        c.choice("padding_mode")
        for k in ("start_padding", "end_padding"):
            c.length(k, rank)
        sp = c.ints("start_padding", rank, lo=0)
        ep = c.ints("end_padding", rank, lo=0)
        c.scalar("padding_value", dtype)
        shape = c.t("input").shape
        out: list[Dim] = []
        for i, d in enumerate(shape):
            if isinstance(d, str):
                for k, p in (("start_padding", sp), ("end_padding", ep)):
                    if p[i]:
                        c.fail(f"{k}[{i}]", f"0 (axis {i} has the symbolic size {d!r})", p[i])
                out.append(d)
            else:
                out.append(d + sp[i] + ep[i])
        return [TensorType(dtype, tuple(out))]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray) -> list[np.ndarray]:
        sp, ep = attrs["start_padding"], attrs["end_padding"]
        y = np.full(tuple(n + a + b for n, a, b in zip(x.shape, sp, ep)),
                    attrs["padding_value"], x.dtype)
        y[tuple(slice(a, a + n) for a, n in zip(sp, x.shape))] = x
        return [y]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """Y = pad(X, sp, ep)  =>  dX = slice(dY, sp, X.shape, 1) (whole symbolic axes)."""
        (dy,) = grads
        if dy is None:
            return [None]
        x = node.inputs[0]
        return [make_node("slice", [dy], {
            "input_window_offsets": node.attrs["start_padding"],
            "input_window_sizes": x.type.shape, "input_window_strides": (1,) * x.type.rank})]


@register
class OneHot(OpDef):
    """``one_hot(indices, values, axis, output_sizes)``: ``values[1]`` at each index, else
    ``values[0]`` (DirectML ONE_HOT)."""

    name = "one_hot"
    numerics = "exact"
    operands = ("indices", "values")
    attributes = (Attr("axis", "scalar"), Attr("output_sizes", "dims"))
    traits = PURE
    dtypes = ONE_HOT_INDICES
    nan_from = ("values",)

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("indices", self.dtypes)
        rank = c.rank_in("indices", 1, 8)
        dtype = c.dtype_in("values", ONE_HOT_VALUES)
        if c.t("values").shape != (2,):
            c.fail("values.shape", "(2,) (off, on)", c.t("values").shape)
        axis = check_axis(c, rank)
        out = c.dims("output_sizes")
        if len(out) != rank:
            c.fail("output_sizes", f"{rank} values (indices' rank)", f"{len(out)} values")
        shape = c.t("indices").shape
        if shape[axis] != 1:
            c.fail("indices.shape", f"1 on axis {axis}", shape[axis])
        for i, (o, d) in enumerate(zip(out, shape)):
            if i != axis and o != d:
                c.fail(f"output_sizes[{i}]", f"{d!r} (indices.shape[{i}])", repr(o))
        depth = out[axis]
        if isinstance(depth, str) or depth < 1:
            c.fail(f"output_sizes[{axis}]", "an integer >= 1 (the depth)", repr(depth))
        return [TensorType(dtype, out)]

    def reference(self, attrs: Mapping[str, Any], indices: np.ndarray,
                  values: np.ndarray) -> list[np.ndarray]:
        axis = attrs["axis"]
        depth = attrs["output_sizes"][axis]
        if indices.dtype.kind == "u":  # at least depth: no position matches
            pos = np.minimum(indices.astype(np.uint64), depth).astype(np.int64)
        else:  # negative indices count from the end
            pos = indices.astype(np.int64)
            pos = np.where(pos < 0, pos + depth, pos)
        shape = [1] * indices.ndim
        shape[axis] = depth
        hit = pos == np.arange(depth, dtype=np.int64).reshape(shape)
        ones = (1,) * indices.ndim
        return [np.where(hit, values[1:].reshape(ones), values[:1].reshape(ones))]

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """dvalues = [sum(where(M, 0, dY)), sum(where(M, dY, 0))], M = one_hot(i, [F, T]);
        indices get none."""
        (dy,) = grads
        if dy is None:
            return [None, None]
        mask_values = make_node("constant", [], {"value": np.array([False, True])})
        m = make_node("one_hot", [node.inputs[0], mask_values], dict(node.attrs))
        zero = make_node("constant", [], {"value": np.zeros((), dy.type.dtype.numpy)})
        parts = []
        for a, b in ((zero, dy), (dy, zero)):
            total = make_node("reduce_sum", [make_node("where", [m, a, b], {})], {})
            parts.append(make_node("reshape", [total], {"shape": (1,)}))
        return [None, make_node("join", parts, {"axis": 0})]
