"""Operators of SPEC-transformers.md §26: gather (ONNX Gather, DirectML GATHER) and gather_grad.

``gather`` copies slices of ``input`` chosen by ``indices`` along ``axis`` (ONNX's shape rule:
any ``indices`` rank, result rank ``rank - 1 + indices.rank``); it is exact on every dtype,
-0.0 and NaN payloads included. ``gather_grad`` is its adjoint: zeros of ``output_sizes``, then
each ``input_gradient`` slice added at its index, in increasing row-major position of
``indices`` (the canonical order), in ``ACC``, rounded once.

An index outside ``[-size, size)`` is an error when the graph runs, on every target (§26.3): the
call raises ``InputError`` naming the op, the first bad index in row-major order (its position
and value) and the valid range, and produces nothing (``raises_input_error``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.errors import InputError
from gradc.ir.core import Node, Value
from gradc.ir.ops.arith import ANY
from gradc.ir.ops.common import F, acc_dtype, rounded
from gradc.ir.ops.registry import PURE, Attr, Checker, OpDef, make_node, register, show_value
from gradc.ir.types import Dim, DType, TensorType

INDEX_DTYPES = (DType.int64, DType.int32)
GATHER_SIZE = "input.shape[axis]"  # what the valid range of gather's indices comes from
GRAD_SIZE = "output_sizes[axis]"


# -- checks ----------------------------------------------------------------------------------
def check_indices_type(c: Checker) -> int:
    """§26.1 item 2 (§26.2 item 2): int32 or int64 indices of rank 0..8; returns the rank."""
    c.dtype_in("indices", INDEX_DTYPES)
    return c.rank_in("indices", 0, 8)


def check_gather_axis(c: Checker, rank: int) -> int:
    """``axis``: an int in ``-rank..rank-1`` (default 0), stored normalized."""
    v = c.raw.get("axis")
    v = 0 if v is None else v
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        c.fail("axis", "an integer", show_value(v, repr))
    if not -rank <= int(v) < rank:
        c.fail("axis", f"an axis in {-rank}..{rank - 1}", int(v))
    return c.keep("axis", int(v) % rank)


def gathered_shape(shape: Sequence[Dim], indices: Sequence[Dim], axis: int) -> tuple[Dim, ...]:
    """``shape[:axis] + indices + shape[axis+1:]``."""
    return tuple(shape[:axis]) + tuple(indices) + tuple(shape[axis + 1:])


# -- the run-time range check (§26.3) ----------------------------------------------------------
def index_message(op: str, position: Sequence[int], value: int, size: int, what: str) -> str:
    """``gather: indices[1] = 3: expected an index in -3..2 (input.shape[axis] = 3)``."""
    where = "indices" if not position else f"indices[{', '.join(str(p) for p in position)}]"
    return f"{op}: {where} = {value}: expected an index in {-size}..{size - 1} ({what} = {size})"


# The error record the compiled targets (C, cuda) write where a range check fails: the op's
# code, the index's value, the size, the rank of the indices, then the index's position.
RECORD_CODES = {"gather": 1, "gather_grad": 2}


def record_message(record: Sequence[int]) -> str:
    """The message of ``check_indices`` from a compiled target's error record."""
    op = {v: k for k, v in RECORD_CODES.items()}.get(int(record[0]), "gather")
    rank = int(record[3])
    position = [int(v) for v in record[4:4 + rank]]
    what = GATHER_SIZE if op == "gather" else GRAD_SIZE
    return index_message(op, position, int(record[1]), int(record[2]), what)


def check_indices(op: str, indices: np.ndarray, size: int, what: str) -> None:
    """InputError naming the first index outside ``[-size, size)`` in row-major order."""
    k = indices.astype(np.int64)
    bad = (k < -size) | (k >= size)
    if bad.any():
        flat = int(np.argmax(bad.reshape(-1)))
        pos = np.unravel_index(flat, indices.shape) if indices.ndim else ()
        raise InputError(index_message(op, [int(p) for p in pos], int(k.reshape(-1)[flat]),
                                       size, what))


def normalized(indices: np.ndarray, size: int) -> np.ndarray:
    """Checked indices as int64 in ``0..size-1`` (negative ones count from the end)."""
    k = indices.astype(np.int64)
    return np.where(k < 0, k + size, k)


# -- ops -------------------------------------------------------------------------------------
@register
class Gather(OpDef):
    """``gather(input, indices, axis=0)``: the slices of ``input`` along ``axis`` at
    ``indices``, the result's shape ``input.shape[:axis] + indices.shape +
    input.shape[axis+1:]`` (ONNX Gather, an embedding lookup). A negative index counts from
    the end; an index outside ``[-size, size)`` raises ``InputError`` when the graph runs,
    naming the first such index, and nothing is produced."""

    name = "gather"
    operands = ("input", "indices")
    attributes = (Attr("axis", "scalar", 0),)
    traits = PURE
    dtypes = ANY
    numerics = "exact"  # a copy of the selected elements
    nan_from = ("input",)
    raises_input_error = True

    def infer(self, c: Checker) -> list[TensorType]:
        rank = c.rank_in("input", 1, 8)
        c.dtype_in("input", self.dtypes)
        q = check_indices_type(c)
        axis = check_gather_axis(c, rank)
        if rank - 1 + q > 8:
            c.fail("indices.rank", f"at most {9 - rank} (the result's rank "
                   f"{rank} - 1 + indices.rank is at most 8)", q)
        x = c.t("input")
        return [TensorType(x.dtype, gathered_shape(x.shape, c.t("indices").shape, axis))]

    def reference(self, attrs: Mapping[str, Any], x: np.ndarray,
                  indices: np.ndarray) -> list[np.ndarray]:
        axis = attrs["axis"]
        size = x.shape[axis]
        check_indices("gather", indices, size, "input.shape[axis]")  # checked first: no output
        return [np.asarray(np.take(x, normalized(indices, size), axis=axis))]  # a copy: exact

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """d(input) = gather_grad(dY, indices, input.shape, axis); indices get none."""
        (dy,) = grads
        x = node.inputs[0]
        if dy is None or not x.type.dtype.is_float:
            return [None, None]
        return [make_node("gather_grad", [dy, node.inputs[1]],
                          {"output_sizes": x.type.shape, "axis": node.attrs["axis"]}), None]


@register
class GatherGrad(OpDef):
    """``gather_grad(input_gradient, indices, output_sizes, axis=0)``: the adjoint of
    ``gather``: zeros of ``output_sizes``, then each slice of ``input_gradient`` added at its
    index, in increasing position in ``indices`` (so a repeated token id sums its rows in a
    fixed order, from +0); an index out of range raises ``InputError`` as ``gather`` does."""

    name = "gather_grad"
    operands = ("input_gradient", "indices")
    attributes = (Attr("output_sizes", "dims"), Attr("axis", "scalar", 0))
    traits = PURE
    numerics = "summing"  # repeated indices add in order of occurrence
    dtypes = F
    raises_input_error = True

    def infer(self, c: Checker) -> list[TensorType]:
        dt = c.dtype_in("input_gradient", self.dtypes)
        check_indices_type(c)
        out = c.dims("output_sizes")
        if not 1 <= len(out) <= 8:
            c.fail("output_sizes", "1..8 values", f"{len(out)} values")
        for i, d in enumerate(out):
            if not isinstance(d, str) and d < 1:
                c.fail(f"output_sizes[{i}]", "an integer >= 1 or a symbol", d)
        axis = check_gather_axis(c, len(out))
        want = gathered_shape(out, c.t("indices").shape, axis)
        got = c.t("input_gradient").shape
        if got != want:
            c.fail("input_gradient.shape", f"{want} (output_sizes with indices.shape at axis "
                   f"{axis})", got)
        return [TensorType(dt, out)]

    def reference(self, attrs: Mapping[str, Any], dy: np.ndarray, indices: np.ndarray,
                  size: Any = None) -> list[np.ndarray]:
        axis = attrs["axis"]
        if size is None:
            size = attrs["output_sizes"][axis]  # static (evaluate binds a symbol)
        check_indices("gather_grad", indices, size, "output_sizes[axis]")
        a = acc_dtype(dy.dtype)
        pre, post = dy.shape[:axis], dy.shape[axis + indices.ndim:]
        k = normalized(indices, size).reshape(-1)
        with np.errstate(all="ignore"):
            rows = np.moveaxis(dy.astype(a).reshape(pre + (k.size,) + post), axis, 0)
            acc = np.zeros((size,) + pre + post, a)  # +0 where no index points
            np.add.at(acc, k, rows)  # in order of occurrence: the canonical order
        return [np.ascontiguousarray(rounded(np.moveaxis(acc, 0, axis), dy.dtype))]

    def evaluate(self, node: Node, args: Sequence[np.ndarray],
                 bindings: Mapping[str, int]) -> list[np.ndarray]:
        """The reference with a symbolic ``output_sizes[axis]`` bound."""
        size = node.attrs["output_sizes"][node.attrs["axis"]]
        return self.reference(node.attrs, args[0], args[1],
                              bindings[size] if isinstance(size, str) else size)

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """d(input_gradient) = gather(G, indices, axis); indices get none."""
        (g,) = grads
        if g is None:
            return [None, None]
        return [make_node("gather", [g, node.inputs[1]], {"axis": node.attrs["axis"]}), None]


def index_size(node: Node, bindings: Mapping[str, int]) -> int:
    """The size a node's indices must lie within: ``input.shape[axis]`` of ``gather``,
    ``output_sizes[axis]`` of ``gather_grad`` (a symbol bound by ``bindings``)."""
    axis = node.attrs["axis"]
    d = node.inputs[0].type.shape[axis] if node.op == "gather" else \
        node.attrs["output_sizes"][axis]
    return bindings[d] if isinstance(d, str) else int(d)


def check_node_indices(node: Node, indices: np.ndarray, bindings: Mapping[str, int]) -> None:
    """§26.3's InputError for a gather or gather_grad node's indices, if one is out of range."""
    what = GATHER_SIZE if node.op == "gather" else GRAD_SIZE
    check_indices(node.op, indices, index_size(node, bindings), what)
