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


def _pool_case(rng: np.random.Generator):
    """Random max-pooling fields over 2 or 3 spatial axes: padding (whole windows in it),
    dilations, ceil sizes; integer-valued data (ties) with NaNs, whole NaN windows and -0.0."""
    nd = int(rng.integers(2, 4))
    spatial = [int(v) for v in rng.integers(1, 6 if nd == 2 else 4, nd)]
    w = [int(v) for v in rng.integers(1, 4, nd)]
    s = [int(v) for v in rng.integers(1, 4, nd)]
    d = [int(v) for v in rng.integers(1, 3, nd)]
    sp = [int(v) for v in rng.integers(0, 4, nd)]
    ep = [int(v) for v in rng.integers(0, 4, nd)]
    for i in range(nd):
        while (w[i] - 1) * d[i] + 1 > spatial[i] + sp[i] + ep[i]:
            w[i] -= 1
    floor = [max(1, (spatial[i] + sp[i] + ep[i] - ((w[i] - 1) * d[i] + 1)) // s[i] + 1)
             for i in range(nd)]
    out = tuple(f + int(rng.integers(0, 2)) for f in floor)
    x = rng.integers(-2, 3, [2, 2] + spatial).astype(np.float32)
    x[rng.random(x.shape) < 0.15] = np.nan
    x[rng.random(x.shape) < 0.1] = -0.0
    if rng.random() < 0.3:
        x[0, 0] = np.nan  # every window of a plane NaN
    f = dict(window_size=tuple(w), strides=tuple(s), start_padding=tuple(sp),
             end_padding=tuple(ep), dilations=tuple(d))
    return x, f, out


def test_max_pooling_grad_second_order_reads_the_cotangent_at_each_argmax():
    """grad of max_pooling_grad w.r.t. its input_gradient is the gather of the cotangent at the
    reference's argmax (window_argmax: first maximum, first tap of an all-NaN window, nothing
    for a window wholly in the padding), bit for bit, and the adjoint identity holds."""
    import gradc
    from gradc.ir.ops.pooling import window_argmax
    rng = np.random.default_rng(2025)
    for _ in range(40):
        x, f, out = _pool_case(rng)
        g = gradc.Graph("mpg")
        xv = g.input("x", "float32", x.shape)
        dv = g.input("dy", "float32", x.shape[:2] + out)
        g.output(ops.max_pooling_grad(xv, dv, **f), "dx")
        t = gradc.grad(g, ["x", "dy"])
        dy = rng.standard_normal(x.shape[:2] + out).astype(np.float32)
        cot = rng.standard_normal(x.shape).astype(np.float32)
        got = gradc.compile(t, target="reference", passes=None)(x=x, dy=dy, grad_dx=cot)
        _, index, found = window_argmax(x, f, out)
        want = np.where(found, cot.reshape(-1)[np.where(found, index, 0)], np.float32(0))
        np.testing.assert_array_equal(got["grad_dy"], want.astype(np.float32))
        assert not np.any(got["grad_x"])  # piecewise constant in x
        lhs, rhs = inner(got["dx"], cot), inner(dy, got["grad_dy"])
        assert abs(lhs - rhs) <= 1e-5 * (1 + np.abs(dy).sum() * np.abs(cot).max()), (lhs, rhs)


def test_max_pooling_grad_second_order_agrees_on_every_target():
    import gradc
    from gradc.check import compare_targets
    g = gradc.Graph("mpg2")
    x = g.input("x", "float32", ("N", 2, 5, 5))
    dy = g.input("dy", "float32", ("N", 2, 3, 3))
    g.output(ops.max_pooling_grad(x, dy, (3, 3), (2, 2), (1, 1), (1, 1)), "dx")
    rows, ok = compare_targets(gradc.grad(g, "all"), ["numpy", "c", "onnx"], {"N": 2})
    assert ok, "\n".join(rows)



HUGE_WINDOW = """
import gradc
from gradc import ops
from gradc.errors import UnsupportedError
g = gradc.Graph("huge")
x = g.input("x", "float16", (2, "N", 3, 2**31))
dy = g.input("dy", "float16", (2, "N", 3, 1))
g.output(ops.max_pooling_grad(x, dy, (1, 2**31), (1, 3), (0, 0), (0, 0), (1, 2)), "dx")
try:
    gradc.grad(g, ["dy"])
except UnsupportedError as e:
    print(e)
"""


def test_max_pooling_grad_second_order_refuses_a_huge_window_before_listing_its_taps():
    """fuzz/regressions/ir (seed 5151): a window of 2**31 taps over 2**31 input positions
    listed every tap (MemoryError under the fuzzer's memory limit) before the tap count was
    compared with its limit; each axis's walk now stops at the limit, and the refusal names
    the field. Run under a 2 GiB address-space limit, as the fuzzer runs it."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    r = subprocess.run([sys.executable, "-c", HUGE_WINDOW], capture_output=True, text=True,
                       preexec_fn=limit, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "window_size: expected at most 4096 window taps" in r.stdout
