"""Canonicalization rules that move matrix transposes into the products that read or make them.

    %t = transpose(%w) {permutation = [1, 0]} : f32[256,768]
    %b = reshape(%t) {shape = [1, 256, 768]} : f32[1,256,768]      %b = reshape(%w) : f32[1,768,256]
    %y = gemm(%x, %b) : f32[8,128,768]                        ->  %y = gemm(%x, %b) {trans_b} : ...

A linear layer exported from PyTorch multiplies by its weight's transpose, and the gradient of
that transpose is a transpose of the weight gradient: each step copied every weight twice.
Here a product reads the weight through its ``trans_a``/``trans_b`` flag, and the weight
gradient is computed transposed (``(A^T B)^T = B^T A``). A *swap* is a ``transpose`` whose
permutation exchanges the last two axes and keeps the others.

Every rule is exact: it changes which array an element is read from, never which elements are
combined or in what order. ``gemm`` sums ``op(a)[m, k] * op(b)[k, n]`` over k ascending; a flag
names the same ``op`` matrix as the swap it replaces; and ``gemm(b, a)`` with both flags flipped
computes, for element ``(n, m)``, ``op(b)[k, n] * op(a)[m, k]`` over the same k -- the same
rounded products (IEEE multiplication commutes), added in the same order, then the same
``alpha`` scaling. A swap commutes with a reduction over other axes (each sum keeps its terms
and their order) and with a reshape that only adds or drops leading unit axes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from gradc.ir.core import Node, Value
from gradc.passes.pattern import Bindings, Pattern
from gradc.passes.rewriter import Rewriter


def is_swap(perm: Sequence[int]) -> bool:
    """True for the permutation that exchanges the last two axes and keeps the others."""
    r = len(perm)
    return r >= 2 and list(perm) == [*range(r - 2), r - 1, r - 2]


def swap(rank: int) -> tuple[int, ...]:
    """The permutation exchanging the last two of ``rank`` axes."""
    return (*range(rank - 2), rank - 1, rank - 2)


def swapped(shape: Sequence[object]) -> tuple[object, ...]:
    """A shape with its last two dims exchanged."""
    return (*shape[:-2], shape[-1], shape[-2])


def _unit_prefix(short: Sequence[object], long: Sequence[object]) -> bool:
    """True when ``long`` is ``short`` with leading 1s (a reshape between them moves no
    element)."""
    k = len(long) - len(short)
    return k >= 0 and tuple(long[k:]) == tuple(short) and all(d == 1 for d in long[:k])


def then_swap(perm: Sequence[int]) -> tuple[int, ...]:
    """``q`` with ``transpose(x, perm) == swap(transpose(x, q))``: ``perm`` with its last two
    entries exchanged (``q`` keeps the last axis where ``perm`` moves it to second-last)."""
    return (*perm[:-2], perm[-1], perm[-2])


def _swap_source(v: Value, rw: Rewriter) -> tuple[Value, int, tuple[int, ...]] | None:
    """(x, k, q) when ``v`` is ``swap(transpose(x, q))`` (no transpose when ``q`` is the
    identity), with ``k`` leading unit axes added by a reshape after it; only where ``q``
    keeps the last axis, so that what remains to copy is whole rows."""
    r = rw.def_of(v, "reshape")
    inner = rw.operand(r, 0) if r is not None else v
    t = rw.def_of(inner, "transpose")
    if t is None:
        return None
    perm = tuple(t.attrs["permutation"])
    if len(perm) < 2:  # a transpose of a vector swaps nothing (reshaped into a matrix after)
        return None
    q = then_swap(perm)
    k = len(v.type.shape) - len(inner.type.shape)
    if q[-1] != len(perm) - 1 or (k and not is_swap(perm)):
        return None
    if r is not None and not _unit_prefix(inner.type.shape, v.type.shape):
        return None
    return rw.operand(t, 0), k, q


def _is_identity(perm: Sequence[int]) -> bool:
    return list(perm) == list(range(len(perm)))


def _only_reader(v: Value, rw: Rewriter) -> bool:
    """True when one operand slot reads ``v`` and the graph does not return it."""
    return rw.num_uses(v) == 1 and not rw.is_output(v)


@dataclass(frozen=True)
class GemmOfSwap(Pattern):
    """``gemm(swap(x), b) -> gemm(x, b, trans_a=not trans_a)`` (and for ``b``), also through a
    reshape that adds leading unit axes: ``op(a)`` is the same matrix, read in place. A
    transpose that moves the last axis to second-last is a swap after one that keeps the last
    axis: ``gemm(transpose(x, p), b) -> gemm(transpose(x, q), b, flipped)`` (attention's
    ``k^T``: rows of 64 copied instead of single elements)."""

    name = "gemm-of-swap"
    roots = ("gemm",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        for i in (0, 1):
            found = _swap_source(rw.operand(node, i), rw)
            if found is not None:
                return {"i": i, "x": found[0], "k": found[1], "q": found[2]}
        return None

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        i, x, k, q = b["i"], b["x"], b["k"], b["q"]
        if not _is_identity(q):
            x = rw.create("transpose", [x], {"permutation": q})
        if k:
            x = rw.create("reshape", [x], {"shape": (1,) * k + tuple(x.type.shape)})
        ops = list(rw.operands(node))
        ops[i] = x
        flag = "trans_a" if i == 0 else "trans_b"
        return [rw.create("gemm", ops, {**node.attrs, flag: not node.attrs[flag]})]


@dataclass(frozen=True)
class SwapOfGemm(Pattern):
    """``swap(gemm(a, b)) -> gemm(b, a, trans_a=not trans_b, trans_b=not trans_a)`` for a
    product without ``c`` that nothing else reads (module docstring: the same rounded products
    in the same order). A transpose that makes the product's rows its last axis is a transpose
    that keeps the last axis after a swap: ``transpose(gemm(a, b), p) -> transpose(gemm(b, a,
    flipped), q)`` (attention's key gradient, rows of 64 copied instead of single elements)."""

    name = "swap-of-gemm"
    roots = ("transpose",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        perm = tuple(node.attrs["permutation"])
        r = len(perm)
        if r < 2 or perm[-1] != r - 2:
            return None
        y = rw.operand(node, 0)
        g = rw.def_of(y, "gemm")
        if g is None or len(g.inputs) != 2 or not _only_reader(y, rw):
            return None
        s = swap(r)
        return {"g": g, "q": tuple(s[p] for p in perm)}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        g, q = b["g"], b["q"]
        a, bb = rw.operands(g)
        attrs = {**g.attrs, "trans_a": not g.attrs["trans_b"], "trans_b": not g.attrs["trans_a"]}
        y = rw.create("gemm", [bb, a], attrs)
        return [y if _is_identity(q) else rw.create("transpose", [y], {"permutation": q})]


@dataclass(frozen=True)
class SwapOfReduceSum(Pattern):
    """``swap(reduce_sum(x, axes)) -> reduce_sum(swap(x), axes)`` when the last two axes of
    ``x`` are not reduced (each sum keeps its terms and their order), nothing else reads the
    sum, and ``x`` is a product that only the sum reads, into which the swap then folds
    (``SwapOfGemm``): a batched weight gradient summed over the batch."""

    name = "swap-of-reduce-sum"
    roots = ("transpose",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        if not is_swap(node.attrs["permutation"]):
            return None
        s = rw.operand(node, 0)
        red = rw.def_of(s, "reduce_sum")
        if red is None or not _only_reader(s, rw):
            return None
        x = rw.operand(red, 0)
        r = len(x.type.shape)
        if r < 2 or any(a >= r - 2 for a in red.attrs["axes"]):
            return None
        g = rw.def_of(x, "gemm")  # only where the swap then folds into a product: a swap of
        if g is None or len(g.inputs) != 2 or not _only_reader(x, rw):  # x costs more
            return None
        return {"red": red, "x": x}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        x = b["x"]
        t = rw.create("transpose", [x], {"permutation": swap(len(x.type.shape))})
        return [rw.create("reduce_sum", [t], dict(b["red"].attrs))]


@dataclass(frozen=True)
class SwapOfReshape(Pattern):
    """``swap(reshape(x)) -> reshape(swap(x))`` when the reshape only drops or adds leading
    unit axes and nothing else reads it (no element moves in the reshape)."""

    name = "swap-of-reshape"
    roots = ("transpose",)

    def match(self, node: Node, rw: Rewriter) -> Bindings | None:
        if not is_swap(node.attrs["permutation"]):
            return None
        v = rw.operand(node, 0)
        r = rw.def_of(v, "reshape")
        if r is None or not _only_reader(v, rw):
            return None
        x = rw.operand(r, 0)
        xs, vs = x.type.shape, v.type.shape
        if len(xs) < 2 or not (_unit_prefix(xs, vs) or _unit_prefix(vs, xs)):
            return None
        return {"x": x}

    def rewrite(self, node: Node, b: Bindings, rw: Rewriter) -> Sequence[Value]:
        x = b["x"]
        t = rw.create("transpose", [x], {"permutation": swap(len(x.type.shape))})
        return [rw.create("reshape", [t], {"shape": swapped(rw.operand(node, 0).type.shape)})]


RULES: tuple[Pattern, ...] = (GemmOfSwap(), SwapOfGemm(), SwapOfReduceSum(), SwapOfReshape())
