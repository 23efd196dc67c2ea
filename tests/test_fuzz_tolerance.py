"""The fuzzer's bound for the statistics of a layer norm (``fuzz.tolerance.variance_bound``):
two summation orders of the same float32 statistics stay within it, also on nearly constant
groups where ``x - mean`` cancels; and the graph pattern it applies to is found."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from fuzz.tolerance import _variance_chains, variance_bound


def _stats(x: np.ndarray, order: np.ndarray, eps: np.float32) -> tuple[np.float32, np.float32]:
    """(sqrt(var + eps), its reciprocal) in float32, each sum added in ``order``."""
    n = np.float32(x.size)
    s = np.float32(0)
    for i in order:
        s = np.float32(s + x[i])
    mean = np.float32(s / n)
    d = (x - mean).astype(np.float32)
    q = np.float32(0)
    for i in order:
        q = np.float32(q + np.float32(d[i] * d[i]))
    sd = np.sqrt(np.float32(np.float32(q / n) + eps))
    with np.errstate(divide="ignore"):  # a constant group with eps 0: inf, on both sides
        return sd, np.float32(np.float32(1) / sd)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 64), st.integers(-12, 3), st.integers(-3, 4),
       st.sampled_from([0.0, 1e-12, 1e-5]))
def test_two_summation_orders_stay_within_the_bound(seed, n, spread, offset, eps):
    rng = np.random.default_rng(seed)
    x = (10.0 ** offset + rng.standard_normal(n) * 2.0 ** spread).astype(np.float32)
    e = np.float32(eps)
    a = _stats(x, np.arange(n), e)
    b = _stats(x, rng.permutation(n), e)
    bound = variance_bound(x, (0,), float(e), "float32")
    with np.errstate(all="ignore"):
        for u, v in zip(a, b):
            if np.isfinite(u) and np.isfinite(v):
                assert abs(float(u) - float(v)) <= bound, (u, v, bound)


def test_the_imported_layer_norm_statistics_are_found():
    g = gradc.Graph("ln")
    x = g.input("x", "float32", (3, 4))
    m = ops.reduce_mean(x, (1,), keepdims=True)
    d = ops.sub(x, m)
    v = ops.reduce_mean(ops.mul(d, d), (1,), keepdims=True)
    sd = ops.sqrt(ops.add(v, ops.constant(np.float32(1e-5))))
    g.output(ops.div(ops.constant(np.float32(1)), sd), "inv")
    (mean, root), = _variance_chains(g)
    assert mean.outputs[0] is m and root.outputs[0] is sd
    other = gradc.Graph("not")  # the squares of another value: not a variance of x
    x = other.input("x", "float32", (3, 4))
    y = other.input("y", "float32", (3, 4))
    d = ops.sub(y, ops.reduce_mean(x, (1,), keepdims=True))
    other.output(ops.sqrt(ops.reduce_mean(ops.mul(d, d), (1,), keepdims=True)), "s")
    assert _variance_chains(other) == []
