"""Canonicalization's transpose rules (passes/transpose_rules.py): products read transposed
operands through their flags and make transposed results directly, bit for bit as before."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.passes import optimize
from helpers import assert_bits

F32 = np.float32


def specials(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random float32 values with some -0.0, infinities and NaN among them."""
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape).astype(F32)
    flat = x.reshape(-1)
    picks = r.choice(flat.size, size=min(6, flat.size), replace=False)
    flat[picks] = np.array([-0.0, np.inf, -np.inf, np.nan, 0.0, 1e30], F32)[:picks.size]
    return x


def check(g: gradc.Graph, feeds: dict[str, np.ndarray], gone: int) -> gradc.Graph:
    """The canonicalized graph has ``gone`` fewer transposes and the same results (NaN payloads
    of products aside: x86 keeps the first NaN operand's, and the rules swap operands)."""
    out = optimize(g, ["canonicalize", "dce"]).graph
    count = [sum(n.op == "transpose" for n in x.nodes) for x in (g, out)]
    assert count[0] - count[1] == gone, count
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = gradc.compile(g, "reference", passes=None)(**feeds)
        got = gradc.compile(out, "reference", passes=None)(**feeds)
        c = gradc.compile(g, "c")(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)
        assert_bits(c[k], want[k], nan_payload=False)
    return out


def test_linear_layer_reads_its_weight_through_trans_b() -> None:
    """MatMul(x, Transpose(W)) as the TorchScript exporter writes it: no transpose remains."""
    g = gradc.Graph("linear")
    x, w = g.input("x", "float32", (2, 5, 7)), g.input("w", "float32", (3, 7))
    with g:
        wt = ops.reshape(ops.transpose(w, (1, 0)), (1, 7, 3))
        g.output(ops.gemm(x, wt), "y")
    out = check(g, {"x": specials((2, 5, 7), 0), "w": specials((3, 7), 1)}, 1)
    gemm = next(n for n in out.nodes if n.op == "gemm")
    assert gemm.attrs["trans_b"] is True


@pytest.mark.parametrize("ta", [False, True])
def test_weight_gradient_is_made_transposed(ta: bool) -> None:
    """swap(reshape(reduce_sum(gemm(a, dy, trans_a), batch))) -> the product of the swapped
    operands, summed: the batched weight gradient of a linear layer, without a transpose."""
    g = gradc.Graph("grad")
    a = g.input("a", "float32", (3, 6, 4) if not ta else (3, 4, 6))
    dy = g.input("dy", "float32", (3, 6, 5))
    with g:
        p = ops.gemm(a, dy, trans_a=not ta)  # (3, 4, 5)
        s = ops.reshape(ops.reduce_sum(p, (0,), keepdims=True), (4, 5))
        g.output(ops.transpose(s, (1, 0)), "dw")
    check(g, {"a": specials(a.type.shape, 2), "dy": specials((3, 6, 5), 3)}, 1)


def test_attention_transposes_keep_rows() -> None:
    """k^T by (0, 2, 3, 1) and the key gradient's (0, 3, 1, 2) become (0, 2, 1, 3) copies of
    whole rows, the swaps folded into the products."""
    g = gradc.Graph("heads")
    q = g.input("q", "float32", (2, 3, 4, 5))  # (batch, heads, time, dim)
    k = g.input("k", "float32", (2, 4, 3, 5))  # (batch, time, heads, dim)
    with g:
        s = ops.gemm(q, ops.transpose(k, (0, 2, 3, 1)))  # (2, 3, 4, 4)
        g.output(s, "s")
        dk = ops.gemm(q, s, trans_a=True)  # (2, 3, 5, 4)
        g.output(ops.transpose(dk, (0, 3, 1, 2)), "dk")  # (2, 4, 3, 5)
    out = check(g, {"q": specials((2, 3, 4, 5), 4), "k": specials((2, 4, 3, 5), 5)}, 0)
    perms = {tuple(n.attrs["permutation"]) for n in out.nodes if n.op == "transpose"}
    assert perms == {(0, 2, 1, 3)}


def test_shared_values_are_left_alone() -> None:
    """A product or sum that something else also reads is not duplicated."""
    g = gradc.Graph("shared")
    a, b = g.input("a", "float32", (4, 3)), g.input("b", "float32", (3, 5))
    with g:
        y = ops.gemm(a, b)
        g.output(y, "y")
        g.output(ops.transpose(y, (1, 0)), "yt")
    check(g, {"a": specials((4, 3), 6), "b": specials((3, 5), 7)}, 0)


def test_a_vector_transpose_reshaped_into_an_operand_is_left_alone() -> None:
    """A rank-1 transpose (the identity) reshaped into a gemm operand has no last two axes to
    swap (fuzz seed 14141: IndexError in ``then_swap`` on an imported model's gradient)."""
    g = gradc.Graph("vector")
    a, w = g.input("a", "float32", (4, 2)), g.input("w", "float32", (2,))
    with g:
        g.output(ops.gemm(a, ops.reshape(ops.transpose(w, (0,)), (2, 1))), "y")
    check(g, {"a": specials((4, 2), 8), "w": specials((2,), 9)}, 0)
