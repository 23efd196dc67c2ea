"""resample_grad is the exact adjoint of resample, slice_grad of slice.

<f(x), dy> == <x, f'(dy)>."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from gradc import ops
from helpers import run


def inner(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(a.astype(np.float64) * b.astype(np.float64)))


@settings(max_examples=100)
@given(st.data())
def test_resample_grad_is_adjoint(data):
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.integers(1, 5)) for _ in range(rank))
    out = tuple(data.draw(st.integers(1, 6)) for _ in range(rank))
    scales = tuple(data.draw(st.floats(0.2, 4.0)) for _ in range(rank))
    ipo = tuple(data.draw(st.floats(-2, 2)) for _ in range(rank))
    opo = tuple(data.draw(st.floats(-2, 2)) for _ in range(rank))
    mode = data.draw(st.sampled_from(["nearest", "linear"]))
    rounding = data.draw(st.sampled_from(["decreasing", "increasing"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x, dy = rng.standard_normal(shape), rng.standard_normal(out)
    (y,) = run(lambda a: ops.resample(a, scales, mode, rounding, ipo, opo, out), x)
    (dx,) = run(lambda a: ops.resample_grad(a, shape, scales, mode, rounding, ipo, opo), dy)
    lhs, rhs = inner(y, dy), inner(x, dx)
    assert abs(lhs - rhs) <= 1e-12 * (1 + np.abs(y).sum() * np.abs(dy).max()), (lhs, rhs)


@settings(max_examples=100)
@given(st.data())
def test_slice_grad_is_adjoint(data):
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.integers(1, 6)) for _ in range(rank))
    off, size, stride, out = [], [], [], []
    for n in shape:
        o = data.draw(st.integers(0, n - 1))
        s = data.draw(st.integers(1, n - o))
        t = data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
        off.append(o), size.append(s), stride.append(t)
        out.append(data.draw(st.integers(1, 1 + (s - 1) // abs(t))))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x, dy = rng.standard_normal(shape), rng.standard_normal(out)
    (y,) = run(lambda a: ops.slice(a, off, size, stride, out), x)
    (dx,) = run(lambda a: ops.slice_grad(a, shape, off, size, stride), dy)
    assert inner(y, dy) == inner(x, dx) or abs(inner(y, dy) - inner(x, dx)) <= 1e-12 * (
        1 + np.abs(y).sum() * np.abs(dy).max())
