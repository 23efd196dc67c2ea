"""Tests of the slow oracle (tests/slow_reference.py) against the vectors of SPEC.md section 8."""

import os
import sys

import numpy as np
import pytest

try:  # tests/ may or may not be a package
    from . import slow_reference as R
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import slow_reference as R

F32 = np.float32
nan = np.nan
inf = np.inf


def eq(got, want, dtype=None):
    """Exact comparison, including dtype, NaN positions and the sign of zeros."""
    got = np.asarray(got)
    want = np.asarray(want, dtype=dtype if dtype is not None else got.dtype)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


# --------------------------------------------------------------------------------------------
# 8.1 ReLU and clip
# --------------------------------------------------------------------------------------------

def test_T_RELU_1():
    X = np.array([-2.0, -0.0, 0.0, 0.5, 3.0, nan], F32)
    dY = np.array([1, 2, 3, 4, 5, 6], F32)
    Y = R.relu(X)
    eq(Y, [0, 0, 0, 0.5, 3, 0])
    assert not np.signbit(Y).any()                             # every 0 is +0.0
    dX = R.relu_grad(X, dY)
    eq(dX, [0, 0, 0, 4, 5, 0])
    assert not np.signbit(dX).any()


def test_relu_grad_zero_is_positive_and_nan_dy_passes():
    X = np.array([-1.0, 0.0, 2.0, 3.0], F32)
    dY = np.array([-5.0, -7.0, nan, -0.0], F32)
    eq(R.relu_grad(X, dY), [0.0, 0.0, nan, -0.0])


def test_T_RELU_2():
    X = np.array([-128, -1, 0, 1, 127], np.int8)
    dY = np.array([1, 2, 3, 4, 5], np.int8)
    eq(R.relu(X), [0, 0, 0, 1, 127])
    eq(R.relu_grad(X, dY), [0, 0, 0, 4, 5])


def test_T_CLIP_1():
    X = np.array([-1, 0, 0.5, 1, 2, nan], F32)
    dY = np.array([1, 2, 3, 4, 5, 6], F32)
    mn, mx = F32(0), F32(1)
    eq(R.clip(X, mn, mx), [0, 0, 0.5, 1, 1, 1])
    eq(R.clip_grad(X, dY, mn, mx), [0, 0, 3, 0, 0, 6])


def test_T_CLIP_2():
    X = np.array([-128, -5, 0, 5, 127], np.int8)
    dY = np.array([1, 2, 3, 4, 5], np.int8)
    mn, mx = np.int8(-5), np.int8(5)
    eq(R.clip(X, mn, mx), [-5, -5, 0, 5, 5])
    eq(R.clip_grad(X, dY, mn, mx), [0, 0, 3, 0, 0])


def test_T_CLIP_3():
    X = np.array([0, 1.5, 3, nan], F32)
    dY = np.array([1, 2, 3, 4], F32)
    mn, mx = F32(2), F32(1)
    eq(R.clip(X, mn, mx), [2, 2, 2, 2])
    eq(R.clip_grad(X, dY, mn, mx), [0, 0, 0, 4])


def test_clip_keeps_negative_zero_at_bound():
    X = np.array([-0.0, 0.0, -1.0], F32)
    Y = R.clip(X, F32(0.0), F32(1.0))
    eq(Y, [-0.0, 0.0, 0.0])                                    # -0.0 equals the bound: kept


def test_clip_float16_and_uint64():
    X = np.array([-3, 0.25, 70000 / 2, nan], np.float16)
    eq(R.clip(X, np.float16(-1), np.float16(1)), np.array([-1, 0.25, 1, 1], np.float16))
    U = np.array([0, 2**63, 2**64 - 1], np.uint64)
    eq(R.clip(U, np.uint64(1), np.uint64(2**64 - 2)), np.array([1, 2**63, 2**64 - 2], np.uint64))


# --------------------------------------------------------------------------------------------
# 8.2 Slice
# --------------------------------------------------------------------------------------------

def test_T_SL_1():
    X = np.arange(1, 17, dtype=F32).reshape(1, 1, 4, 4)
    off, size, stride = (0, 0, 0, 1), (1, 1, 4, 3), (1, 1, -2, 2)
    assert R.copy_start(off, size, stride) == [0, 0, 3, 1]
    out = R.slice_default_output_sizes(size, stride)
    assert out == (1, 1, 2, 2)
    eq(R.slice_(X, off, size, stride, out), [[[[14, 16], [6, 8]]]])


def test_T_SL_2():
    X = np.array([10, 20, 30], F32)
    eq(R.slice_(X, (1,), (1,), (0,), (3,)), [20, 20, 20])
    assert R.slice_default_output_sizes((1,), (0,)) == (1,)
    eq(R.slice_(X, (1,), (1,), (0,), (1,)), [20])
    eq(R.slice_(X, (1,), (1,), (0,), None), [20])


@pytest.mark.parametrize("size", [(4, 4), (3, 3)])
def test_T_SG_1(size):
    X = np.arange(1, 17, dtype=F32).reshape(4, 4)
    out = R.slice_default_output_sizes(size, (2, 2))
    assert out == (2, 2)
    Y = R.slice_(X, (0, 0), size, (2, 2), out)
    eq(Y, [[1, 3], [9, 11]])
    dX = R.slice_grad(Y, (4, 4), (0, 0), size, (2, 2))
    eq(dX, [[1, 0, 3, 0], [0, 0, 0, 0], [9, 0, 11, 0], [0, 0, 0, 0]])
    assert not np.signbit(dX).any()


def test_T_SG_2():
    dY = np.array([[[[1, 2], [3, 4]]]], F32)
    dX = R.slice_grad(dY, (1, 1, 4, 4), (0, 0, 0, 1), (1, 1, 4, 3), (1, 1, -2, 2))
    eq(dX, [[[[0, 0, 0, 0], [0, 3, 0, 4], [0, 0, 0, 0], [0, 1, 0, 2]]]])


def test_T_SG_3():
    eq(R.slice_grad(np.array([1, 2, 3], F32), (5,), (1,), (3,), (-1,)), [0, 3, 2, 1, 0])
    assert R.copy_start((1,), (4,), (-2,)) == [4]
    eq(R.slice_grad(np.array([7, 8], F32), (5,), (1,), (4,), (-2,)), [0, 0, 8, 0, 7])


def test_slice_preserves_bits():
    bits = np.array([0x7FC01234, 0xFFA00001, 0x80000000, 0x3F800000], np.uint32)
    X = bits.view(F32)
    Y = R.slice_(X, (0,), (4,), (1,), (4,))
    np.testing.assert_array_equal(Y.view(np.uint32), bits)
    dX = R.slice_grad(X, (6,), (1,), (4,), (1,))
    np.testing.assert_array_equal(dX.view(np.uint32)[1:5], bits)


# --------------------------------------------------------------------------------------------
# 8.3 Max pooling
# --------------------------------------------------------------------------------------------

def _pool(X, w, s=None, sp=None, ep=None, d=None, out=None):
    return R.max_pooling(X, w, s, sp, ep, d, out)


def test_T_MP_1():
    X = np.array([[1, 2, 3], [2, 4, 2], [5, 6, 7]], F32).reshape(1, 1, 3, 3)
    Y, I = _pool(X, (2, 2), (1, 1), (0, 0), (0, 0), (1, 1), (2, 2))
    eq(Y, np.array([[4, 4], [6, 7]], F32).reshape(1, 1, 2, 2))
    eq(I, np.array([[4, 4], [7, 8]], np.int64).reshape(1, 1, 2, 2))
    dY = np.array([[1, 2], [4, 5]], F32).reshape(1, 1, 2, 2)
    dX = R.max_pooling_grad(X, dY, (2, 2), (1, 1), (0, 0), (0, 0), (1, 1))
    eq(dX, np.array([[0, 0, 0], [0, 3, 0], [0, 4, 5]], F32).reshape(1, 1, 3, 3))


def test_T_MP_2():
    X = np.array([[[[1, 1, 0], [1, 1, 0], [0, 0, 5]],
                   [[2, 3, 3], [3, 3, 1], [0, 1, 2]]]], F32)
    args = ((2, 2), (2, 2), (1, 1), (1, 1), (1, 1))
    assert [R.pool_size(3, 2, 2, 1, 1, 1)] * 2 == [2, 2]
    Y, I = R.max_pooling(X, *args, None)
    eq(Y, np.array([[[[1, 1], [1, 5]], [[2, 3], [3, 3]]]], F32))
    eq(I, np.array([[[[0, 1], [3, 8]], [[9, 10], [12, 13]]]], np.int64))
    dY = np.array([[[[1, 2], [3, 4]], [[10, 20], [30, 40]]]], F32)
    dX = R.max_pooling_grad(X, dY, *args)
    eq(dX, np.array([[[[1, 2, 0], [3, 0, 0], [0, 0, 4]],
                      [[10, 20, 0], [30, 40, 0], [0, 0, 0]]]], F32))


def test_T_MP_3():
    X = np.arange(16, dtype=F32).reshape(1, 1, 4, 4)
    X[0, 0, 0, 0] = 100
    Y, I = _pool(X, (2, 2), (1, 1), (0, 0), (0, 0), (2, 2))
    eq(Y, np.array([[100, 11], [14, 15]], F32).reshape(1, 1, 2, 2))
    eq(I, np.array([[0, 11], [14, 15]], np.int64).reshape(1, 1, 2, 2))
    dX = R.max_pooling_grad(X, np.ones((1, 1, 2, 2), F32), (2, 2), (1, 1), (0, 0), (0, 0), (2, 2))
    eq(dX, np.array([[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 1]],
                    F32).reshape(1, 1, 4, 4))


def test_T_MP_4():
    X = np.array([3, 1, 4, 1, 5, 9, 2, 6], F32).reshape(1, 1, 2, 2, 2)
    Y, I = _pool(X, (2, 2, 2))
    eq(Y, np.full((1, 1, 1, 1, 1), 9, F32))
    eq(I, np.full((1, 1, 1, 1, 1), 5, np.int64))
    dX = R.max_pooling_grad(X, np.full((1, 1, 1, 1, 1), 7, F32), (2, 2, 2))
    want = np.zeros(8, F32)
    want[5] = 7
    eq(dX, want.reshape(1, 1, 2, 2, 2))


def test_T_MP_5():
    X = np.array([1, 5, 2, 3, 9, 0, 0, 9], F32).reshape(2, 1, 2, 2)
    Y, I = _pool(X, (2, 2))
    eq(Y, np.array([5, 9], F32).reshape(2, 1, 1, 1))
    eq(I, np.array([1, 4], np.int64).reshape(2, 1, 1, 1))


def test_T_MP_6():
    X = np.arange(9, dtype=F32).reshape(1, 1, 3, 3)
    assert R.pool_size(3, 2, 2, 0, 0, 1) == 1
    Y, I = _pool(X, (2, 2), (2, 2), None, None, None, (2, 2))
    eq(Y, np.array([[4, 5], [7, 8]], F32).reshape(1, 1, 2, 2))
    eq(I, np.array([[4, 5], [7, 8]], np.int64).reshape(1, 1, 2, 2))
    dY = np.array([[1, 2], [3, 4]], F32).reshape(1, 1, 2, 2)
    dX = R.max_pooling_grad(X, dY, (2, 2), (2, 2))
    eq(dX, np.array([[0, 0, 0], [0, 1, 2], [0, 3, 4]], F32).reshape(1, 1, 3, 3))


def test_T_MP_7():
    X = np.array([[5, 6, 7]], F32).reshape(1, 1, 1, 3)
    w, s, sp, ep = (1, 2), (1, 2), (0, 2), (0, 0)
    assert (R.pool_size(1, 1, 1, 0, 0, 1), R.pool_size(3, 2, 2, 2, 0, 1)) == (1, 2)
    Y, I = _pool(X, w, s, sp, ep)
    eq(Y, np.array([[-inf, 6]], F32).reshape(1, 1, 1, 2))
    eq(I, np.array([[0, 1]], np.int64).reshape(1, 1, 1, 2))
    dX = R.max_pooling_grad(X, np.array([[10, 20]], F32).reshape(1, 1, 1, 2), w, s, sp, ep)
    eq(dX, np.array([[0, 20, 0]], F32).reshape(1, 1, 1, 3))


def test_T_MP_8():
    X = np.array([[nan, 1], [nan, nan]], F32).reshape(1, 2, 1, 2)
    Y, I = _pool(X, (1, 2))
    eq(Y, np.array([1, nan], F32).reshape(1, 2, 1, 1))
    eq(I, np.array([1, 2], np.int64).reshape(1, 2, 1, 1))
    dX = R.max_pooling_grad(X, np.array([5, 6], F32).reshape(1, 2, 1, 1), (1, 2))
    eq(dX, np.array([[0, 5], [6, 0]], F32).reshape(1, 2, 1, 2))


@pytest.mark.parametrize("dtype,low", [(np.int8, -128), (np.uint8, 0), (np.int64, -2**63),
                                       (np.uint64, 0), (np.float16, -inf), (np.float64, -inf)])
def test_lowest_for_window_in_padding(dtype, low):
    assert R.LOWEST(dtype) == low and R.LOWEST(dtype).dtype == np.dtype(dtype)
    X = np.array([[5, 6, 7]], dtype).reshape(1, 1, 1, 3)
    Y, I = _pool(X, (1, 2), (1, 2), (0, 2), (0, 0))
    eq(Y, np.array([low, 6], dtype).reshape(1, 1, 1, 2))
    eq(I, np.array([0, 1], np.int64).reshape(1, 1, 1, 2))


def test_max_pooling_grad_float16_single_rounding():
    # 2048 + 1 + 1 in float16 step by step would give 2048 (ties to even); ACC float32 gives 2050.
    X = np.array([1, 9, 1, 1, 1, 1], np.float16).reshape(1, 1, 1, 6)
    dY = np.array([2048, 1, 1], np.float16).reshape(1, 1, 1, 3)
    dX = R.max_pooling_grad(X, dY, (1, 3), (1, 1), (0, 1), (0, 0))
    # windows (pad 1): cols [-1,0,1] -> 1, [0,1,2] -> 1, [1,2,3] -> 1
    eq(dX, np.array([0, 2050, 0, 0, 0, 0], np.float16).reshape(1, 1, 1, 6))


# --------------------------------------------------------------------------------------------
# 8.4 Resample
# --------------------------------------------------------------------------------------------

def _rs(X, out, S, mode="nearest", rounding="decreasing", ipo=0.5, opo=-0.5):
    X = np.asarray(X)
    n = X.ndim
    return R.resample(X, out, mode, rounding, S, (ipo,) * n, (opo,) * n)


def _rsg(dY, out, S, mode="nearest", rounding="decreasing", ipo=0.5, opo=-0.5):
    dY = np.asarray(dY)
    n = dY.ndim
    return R.resample_grad(dY, out, mode, rounding, S, (ipo,) * n, (opo,) * n)


def test_ACC():
    assert R.ACC[np.float16] is np.float32 and R.ACC[np.dtype("float16")] is np.float32
    assert R.ACC[np.float32] is np.float32 and R.ACC[np.float64] is np.float64
    assert R.ACC[np.int8] is np.float32 and R.ACC[np.uint8] is np.float32
    assert np.int32 not in R.ACC and np.float16 in R.ACC


@pytest.mark.parametrize("rank4", [False, True])
def test_T_RS_1(rank4):
    X = np.array([[1, 2], [3, 4]], F32)
    dY = np.array([[4, 5, 6]], F32)
    S = (0.5, 1.5)
    out_x = (2, 2)
    if rank4:
        X, dY, S, out_x = X.reshape(1, 1, 2, 2), dY.reshape(1, 1, 1, 3), (1, 1) + S, (1, 1, 2, 2)
    lead = (1, 1) if rank4 else ()
    out = R.resample_default_output_sizes(X.shape, S)
    assert out == lead + (1, 3)

    def chk(rounding, ipo, opo, y, dx):
        eq(_rs(X, out, S, "nearest", rounding, ipo, opo), np.array(y, F32).reshape(lead + (1, 3)))
        eq(_rsg(dY, out_x, S, "nearest", rounding, ipo, opo), np.array(dx, F32).reshape(out_x))

    chk("decreasing", 0.5, -0.5, [[1, 1, 2]], [[9, 6], [0, 0]])
    chk("decreasing", 0.0, 0.0, [[1, 1, 2]], [[9, 6], [0, 0]])
    chk("increasing", 1.0, 0.0, [[1, 1, 2]], [[9, 6], [0, 0]])
    chk("increasing", 0.5, -0.5, [[3, 4, 4]], [[0, 0], [4, 11]])
    # the defaults of the offsets are 0.5 / -0.5
    eq(R.resample(X, None, "nearest", "decreasing", S),
       np.array([[1, 1, 2]], F32).reshape(lead + (1, 3)))
    eq(R.resample_grad(dY, out_x, "nearest", "decreasing", S),
       np.array([[9, 6], [0, 0]], F32).reshape(out_x))


@pytest.mark.parametrize("rank4", [False, True])
def test_T_RS_3(rank4):
    dY = np.array([1, 2, 4, 8, 16, 32], F32)
    S, out = (3,), (2,)
    if rank4:
        dY, S, out = dY.reshape(1, 1, 1, 6), (1, 1, 1, 3), (1, 1, 1, 2)
    got = _rsg(dY, out, S, "nearest", "decreasing", 0.5, 0.0)
    eq(got, np.array([31, 32], F32).reshape(out))              # the swapped reading gives [15, 48]
    got = _rsg(dY, out, S, "nearest", "decreasing", -0.5, 0.5)
    eq(got, np.array([3, 60], F32).reshape(out))


def test_T_RS_4():
    X = np.array([1, 2, 3, 4], F32)
    assert R.resample_default_output_sizes((4,), (2,)) == (8,)
    eq(_rs(X, (8,), (2,), "linear"), [1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4])
    eq(_rsg(np.arange(1, 9, dtype=F32), (4,), (2,), "linear"), [3.25, 7, 11, 14.75])
    eq(_rsg(np.ones(8, F32), (4,), (2,), "linear"), [2, 2, 2, 2])


def test_T_RS_5():
    X = np.array([[1, 2], [3, 4]], F32)
    eq(_rs(X, (4, 4), (2, 2), "linear"),
       [[1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5], [3, 3.25, 3.75, 4]])
    eq(_rsg(np.ones((4, 4), F32), (2, 2), (2, 2), "linear"), [[4, 4], [4, 4]])
    eq(_rsg(np.arange(16, dtype=F32).reshape(4, 4), (2, 2), (2, 2), "linear"),
       [[12.5, 19.5], [40.5, 47.5]])


def test_T_RS_6():
    X = np.array([1, 2, 3, 4], F32)
    assert R.resample_default_output_sizes((4,), (0.5,)) == (2,)
    eq(_rs(X, (2,), (0.5,), "linear"), [1.5, 3.5])
    eq(_rsg(np.array([1, 10], F32), (4,), (0.5,), "linear"), [0.5, 0.5, 5, 5])


def test_T_RS_7():
    X = np.array(
        [[3.86005284, 45.18463077, 87.67153743, 98.78210347, 66.37414347, 3.41158349],
         [86.14930501, 95.9813372, 76.87126314, 16.52591355, 65.98782867, 25.47092156],
         [22.56010548, 92.08479613, 85.80876635, 92.63166027, 29.91620871, 75.40461275],
         [62.06375451, 1.77121588, 99.47231285, 11.44055014, 25.39634271, 67.02175102]],
        np.float64).astype(F32).reshape(1, 1, 4, 6)
    S = (1, 1, 0.5, 0.5)
    out = R.resample_default_output_sizes(X.shape, S)
    assert out == (1, 1, 2, 3)
    Y = _rs(X, out, S, "nearest", "increasing")
    want = np.array([[95.9813372, 16.52591355, 25.47092156],
                     [1.77121588, 11.44055014, 67.02175102]], np.float64).astype(F32)
    eq(Y, want.reshape(1, 1, 2, 3))
    eq(Y[0, 0], X[0, 0][np.ix_([1, 3], [1, 3, 5])])


@pytest.mark.parametrize("rounding,ipo,want", [
    ("decreasing", 0.5, [0, 0, 0, 0, 1, 1, 2, 2, 2, 3]),
    ("increasing", 0.5, [0, 1, 1, 1, 2, 2, 3, 3, 3, 3]),
    ("decreasing", 0.0, [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]),
    ("increasing", 0.0, [1, 1, 1, 2, 2, 3, 3, 3, 3, 3]),
])
def test_T_RS_8(rounding, ipo, want):
    X = np.array([0, 1, 2, 3], F32)
    eq(_rs(X, (10,), (2.5,), "nearest", rounding, ipo, -0.5), want)


def test_T_RS_9():
    Xi = np.array([0, -1, 3], np.int8)
    eq(_rs(Xi, (3,), (1,), "linear", "decreasing", -0.5, 0.0), np.array([-1, 1, 3], np.int8))
    Xu = np.array([0, 255, 100], np.uint8)
    eq(_rs(Xu, (3,), (1,), "linear", "decreasing", -0.5, 0.0), np.array([128, 178, 100], np.uint8))


def test_store():
    assert R.store(np.int8, F32(-0.5)) == -1 and R.store(np.int8, F32(0.5)) == 1
    assert R.store(np.int8, F32(0.49999997)) == 0                # no 'x + 0.5' double rounding
    assert R.store(np.int8, F32(-2.5)) == -3 and R.store(np.int8, F32(2.4)) == 2
    assert R.store(np.int8, F32(127.5)) == 127 and R.store(np.int8, F32(-128.5)) == -128
    assert R.store(np.int8, F32(1e30)) == 127 and R.store(np.int8, F32(-1e30)) == -128
    assert R.store(np.uint8, F32(-0.4)) == 0 and R.store(np.uint8, F32(254.5)) == 255
    assert R.store(np.uint8, F32(300)) == 255
    assert R.store(np.int8, F32(3)).dtype == np.int8
    h = R.store(np.float16, F32(1 + 2**-11))                      # tie -> even
    assert h.dtype == np.float16 and h == 1
    assert R.store(np.float16, F32(1 + 2**-11 + 2**-20)) == np.float16(1 + 2**-10)


def test_coord_is_float32():
    # 10 * f32(0.7) = 7.0000001 in float64 but 7 in float32: the default size is 7
    assert R.resample_default_output_sizes((10,), (0.7,)) == (7,)
    x = R.coord(3, F32(0.7), F32(0.5), F32(-0.5))
    assert type(x) is np.float32
    want = F32(F32(F32(F32(3) - F32(-0.5)) / F32(0.7)) - F32(0.5))
    assert x == want
    for _, w in R.taps((1, 2), (3, 5), "linear", "decreasing", (F32(0.7), F32(1.3)),
                       (F32(0.5),) * 2, (F32(-0.5),) * 2):
        assert type(w) is np.float32


def test_nearest_huge_coordinate_clamps():
    # a tiny scale sends the coordinate to inf; nearest clamps to n - 1, linear to the edge
    X = np.array([1, 2, 3], F32)
    assert R.coord(1, F32(1e-39), F32(0), F32(0)) == inf
    eq(_rs(X, (3,), (1e-39,), "nearest", "decreasing", 0.0, 0.0), [1, 3, 3])
    eq(_rs(X, (3,), (1e-39,), "linear", "decreasing", 0.0, 0.0), [1, 3, 3])
    assert R.coord(0, F32(1e-39), F32(0), F32(1)) == -inf
    eq(_rs(X, (3,), (1e-39,), "nearest", "increasing", 0.0, 1.0), [1, 1, 3])
    eq(_rs(X, (3,), (1e-39,), "linear", "decreasing", 0.0, 1.0), [1, 1, 3])


def test_linear_float16_equals_float32_rounded_once():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3, 4)).astype(np.float16)
    S = (1.7, 0.8)
    out = (5, 3)
    y16 = _rs(X, out, S, "linear")
    y32 = _rs(X.astype(F32), out, S, "linear")
    eq(y16, y32.astype(np.float16))
    dY = rng.standard_normal(out).astype(np.float16)
    g16 = _rsg(dY, X.shape, S, "linear")
    g32 = _rsg(dY.astype(F32), X.shape, S, "linear")
    eq(g16, g32.astype(np.float16))


# --------------------------------------------------------------------------------------------
# Adjoint sanity checks
# --------------------------------------------------------------------------------------------

def _dot(a, b):
    return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


@pytest.mark.parametrize("seed", range(12))
def test_resample_grad_is_adjoint(seed):
    rng = np.random.default_rng(seed)
    rank = 1 + seed % 3
    in_shape = tuple(int(v) for v in rng.integers(1, 5, rank))
    out_shape = tuple(int(v) for v in rng.integers(1, 6, rank))
    S = tuple(float(v) for v in rng.uniform(0.3, 3.0, rank))
    IPO = tuple(float(v) for v in rng.uniform(-1, 1, rank))
    OPO = tuple(float(v) for v in rng.uniform(-1, 1, rank))
    mode = ("nearest", "linear")[seed % 2]
    rounding = ("decreasing", "increasing")[(seed // 2) % 2]
    X = rng.standard_normal(in_shape)
    dY = rng.standard_normal(out_shape)
    Y = R.resample(X, out_shape, mode, rounding, S, IPO, OPO)
    dX = R.resample_grad(dY, in_shape, mode, rounding, S, IPO, OPO)
    assert Y.dtype == np.float64 and dX.dtype == np.float64
    assert Y.shape == out_shape and dX.shape == in_shape
    lhs, rhs = _dot(Y, dY), _dot(X, dX)
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs)), (lhs, rhs)


@pytest.mark.parametrize("seed", range(8))
def test_slice_grad_is_adjoint(seed):
    rng = np.random.default_rng(100 + seed)
    rank = 1 + seed % 3
    shape = tuple(int(v) for v in rng.integers(1, 7, rank))
    off, size, stride = [], [], []
    for n in shape:
        o = int(rng.integers(0, n))
        s = int(rng.integers(1, n - o + 1))
        st = int(rng.choice([-3, -2, -1, 1, 2, 3]))
        off.append(o)
        size.append(s)
        stride.append(st)
    full = R.slice_default_output_sizes(size, stride)
    out = tuple(int(rng.integers(1, m + 1)) for m in full)
    X = rng.standard_normal(shape)
    dY = rng.standard_normal(out)
    Y = R.slice_(X, off, size, stride, out)
    dX = R.slice_grad(dY, shape, off, size, stride)
    lhs, rhs = _dot(Y, dY), _dot(X, dX)
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs)), (lhs, rhs)
