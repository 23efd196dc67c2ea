"""The vectorized reference agrees bit for bit with the slow loop oracle.

The oracle is in tests/slow_reference.py.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

import slow_reference as slow
from gradc import ops
from helpers import assert_bits, run

FLOATS = ["float32", "float16", "float64"]
INTS = ["int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"]
SPECIAL = [np.nan, -0.0, 0.0, np.inf, -np.inf]


@st.composite
def arrays(draw, dtype, shape, special=True, ties=True):
    """Arrays with many ties (small integers) and, for floats, NaN, +-0 and +-inf."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt.kind == "f":
        base = draw(st.lists(st.integers(-4, 4), min_size=n, max_size=n)) if ties else \
            draw(st.lists(st.floats(-100, 100, width=16), min_size=n, max_size=n))
        a = np.array(base, np.float64)
        if special and draw(st.booleans()):
            for i in draw(st.lists(st.integers(0, n - 1), max_size=3)):
                a[i] = draw(st.sampled_from(SPECIAL))
        if not ties:
            a = a + np.array(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)))
        return a.astype(dt).reshape(shape)
    info = np.iinfo(dt)
    lo, hi = max(info.min, -100), min(info.max, 100)
    vals = draw(st.lists(st.one_of(st.integers(lo, hi), st.sampled_from([info.min, info.max])),
                         min_size=n, max_size=n))
    return np.array(vals, dt).reshape(shape)


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


@given(st.data(), st.sampled_from(FLOATS + ["int32", "int16", "int8"]), shapes)
def test_relu(data, dtype, shape):
    x, dy = data.draw(arrays(dtype, shape)), data.draw(arrays(dtype, shape))
    assert_bits(run(ops.relu, x)[0], slow.relu(x))
    assert_bits(run(ops.relu_grad, x, dy)[0], slow.relu_grad(x, dy))


@given(st.data(), st.sampled_from(FLOATS + INTS), shapes)
def test_clip(data, dtype, shape):
    x, dy = data.draw(arrays(dtype, shape)), data.draw(arrays(dtype, shape))
    if np.dtype(dtype).kind == "f":
        bound = st.sampled_from([-2.0, -0.0, 0.0, 1.0, 3.5, np.inf, -np.inf])
    else:
        info = np.iinfo(dtype)
        bound = st.integers(max(info.min, -5), min(info.max, 5))
    mn, mx = data.draw(bound), data.draw(bound)
    t = np.dtype(dtype).type
    assert_bits(run(lambda a: ops.clip(a, mn, mx), x)[0], slow.clip(x, t(mn), t(mx)))
    assert_bits(run(lambda a, b: ops.clip_grad(a, b, mn, mx), x, dy)[0],
                slow.clip_grad(x, dy, t(mn), t(mx)))


@st.composite
def windows(draw, shape, zero_ok):
    off, size, stride, out = [], [], [], []
    for n in shape:
        o = draw(st.integers(0, n - 1))
        s = draw(st.integers(1, n - o))
        choices = [-3, -2, -1, 1, 2, 3] + ([0] if zero_ok else [])
        t = draw(st.sampled_from(choices))
        hi = 3 if t == 0 else 1 + (s - 1) // abs(t)
        off.append(o), size.append(s), stride.append(t), out.append(draw(st.integers(1, hi)))
    return tuple(off), tuple(size), tuple(stride), tuple(out)


@given(st.data(), st.sampled_from(FLOATS + INTS), shapes)
def test_slice(data, dtype, shape):
    x = data.draw(arrays(dtype, shape))
    off, size, stride, out = data.draw(windows(shape, zero_ok=True))
    (y,) = run(lambda a: ops.slice(a, off, size, stride, out), x)
    assert_bits(y, slow.slice_(x, off, size, stride, out))


@given(st.data(), st.sampled_from(FLOATS + INTS), shapes)
def test_slice_grad(data, dtype, shape):
    off, size, stride, out = data.draw(windows(shape, zero_ok=False))
    dy = data.draw(arrays(dtype, out))
    (dx,) = run(lambda a: ops.slice_grad(a, shape, off, size, stride), dy)
    assert_bits(dx, slow.slice_grad(dy, shape, off, size, stride))


@st.composite
def pool_case(draw, dtypes):
    nd = draw(st.sampled_from([2, 2, 3]))
    dtype = draw(st.sampled_from(dtypes))
    spatial = tuple(draw(st.integers(1, 5 if nd == 2 else 3)) for _ in range(nd))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) + spatial
    w = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    sp = tuple(draw(st.integers(0, 2)) for _ in range(nd))
    ep = tuple(draw(st.integers(0, 2)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    floor = [slow.pool_size(*a) for a in zip(spatial, w, s, sp, ep, d)]
    out = tuple(draw(st.integers(1, f + 1)) for f in floor)
    x = draw(arrays(dtype, shape))
    return x, w, s, sp, ep, d, out


@given(pool_case(FLOATS + INTS))
def test_max_pooling(case):
    x, w, s, sp, ep, d, out = case
    y, i = run(lambda a: ops.max_pooling(a, w, s, sp, ep, d, output_indices=True,
                                         output_sizes=out), x)
    ys, is_ = slow.max_pooling(x, w, s, sp, ep, d, out)
    assert_bits(y, ys)
    assert_bits(i, is_)


@given(st.data(), pool_case(FLOATS))
def test_max_pooling_grad(data, case):
    x, w, s, sp, ep, d, out = case
    dy = data.draw(arrays(x.dtype, x.shape[:2] + out, ties=data.draw(st.booleans())))
    (dx,) = run(lambda a, b: ops.max_pooling_grad(a, b, w, s, sp, ep, d), x, dy)
    assert_bits(dx, slow.max_pooling_grad(x, dy, w, s, sp, ep, d), nan_payload=False)


SCALES = [0.25, 0.5, 0.7, 1.0, 1.5, 2.0, 2.5, 3.0, 1 / 3]


@st.composite
def resample_case(draw, dtypes, grad):
    rank = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(dtypes))
    shape = tuple(draw(st.integers(1, 4 if rank <= 2 else 3)) for _ in range(rank))
    scales = tuple(draw(st.sampled_from(SCALES)) for _ in range(rank))
    off = st.sampled_from([0.0, 0.5, -0.5, 0.25, 1.0, -1.3, 0.7])
    ipo = tuple(draw(off) for _ in range(rank))
    opo = tuple(draw(off) for _ in range(rank))
    mode = draw(st.sampled_from(["nearest", "linear"]))
    rounding = draw(st.sampled_from(["decreasing", "increasing"]))
    out = tuple(draw(st.integers(1, 5 if rank <= 2 else 3)) for _ in range(rank))
    data = draw(arrays(dtype, out if grad else shape, ties=draw(st.booleans())))
    return data, shape, out, scales, ipo, opo, mode, rounding


@given(resample_case(FLOATS + ["int8", "uint8"], grad=False))
def test_resample(case):
    x, shape, out, scales, ipo, opo, mode, rounding = case
    (y,) = run(lambda a: ops.resample(a, scales, mode, rounding, ipo, opo, out), x)
    assert_bits(y, slow.resample(x, out, mode, rounding, scales, ipo, opo),
                nan_payload=mode == "nearest")


@given(resample_case(FLOATS, grad=True))
def test_resample_grad(case):
    dy, shape, out, scales, ipo, opo, mode, rounding = case
    (dx,) = run(lambda a: ops.resample_grad(a, shape, scales, mode, rounding, ipo, opo), dy)
    assert_bits(dx, slow.resample_grad(dy, shape, mode, rounding, scales, ipo, opo),
                nan_payload=False)


def test_resample_large_scale_and_tiny_scale_clamp():
    x = np.arange(4, dtype=np.float32)
    for s in (3.4028235e38, 1e-30):
        for mode in ("nearest", "linear"):
            (y,) = run(lambda a: ops.resample(a, (s,), mode, output_sizes=(3,)), x)
            assert_bits(y, slow.resample(x, (3,), mode, "decreasing", (s,), (0.5,), (-0.5,)))


@given(st.data(), st.sampled_from(["float32", "float16", "float64", "int32", "uint8"]), shapes)
def test_reduce_sum(data, dtype, shape):
    x = data.draw(arrays(dtype, shape, special=False, ties=False))
    axes = tuple(sorted(set(data.draw(st.lists(st.integers(0, len(shape) - 1), max_size=3)))))
    keep = data.draw(st.booleans())
    (y,) = run(lambda a: ops.reduce_sum(a, axes, keep), x)
    # slow oracle: sequential accumulation in increasing logical index order
    acc_t = {"f": np.float64 if x.dtype == np.float64 else np.float32}.get(
        x.dtype.kind, x.dtype.type)
    kept = [i for i in range(x.ndim) if i not in axes]
    out_shape = tuple(x.shape[i] for i in kept)
    want = np.zeros(out_shape, acc_t)
    with np.errstate(over="ignore"):
        for idx in np.ndindex(*x.shape):
            k = tuple(idx[i] for i in kept)
            want[k] = acc_t(want[k] + acc_t(x[idx]))
    want = want.astype(x.dtype)
    if keep:
        want = want.reshape([1 if i in axes else n for i, n in enumerate(x.shape)])
    assert_bits(y, want)
