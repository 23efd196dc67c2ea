"""Every test vector of SPEC.md §8 (and so every seed example) through the reference target."""

from __future__ import annotations

import numpy as np
import pytest

from gradc import ops
from helpers import assert_bits, f32, run

nan = np.nan


def test_relu_1():
    x, dy = f32(-2.0, -0.0, 0.0, 0.5, 3.0, nan), f32(1, 2, 3, 4, 5, 6)
    (y,) = run(ops.relu, x)
    assert_bits(y, f32(0, 0, 0, 0.5, 3, 0))  # every 0 is +0.0
    (dx,) = run(ops.relu_grad, x, dy)
    assert_bits(dx, f32(0, 0, 0, 4, 5, 0))


def test_relu_2_int8():
    x, dy = np.array([-128, -1, 0, 1, 127], np.int8), np.array([1, 2, 3, 4, 5], np.int8)
    assert_bits(run(ops.relu, x)[0], np.array([0, 0, 0, 1, 127], np.int8))
    assert_bits(run(ops.relu_grad, x, dy)[0], np.array([0, 0, 0, 4, 5], np.int8))


def test_clip_1():
    x, dy = f32(-1, 0, 0.5, 1, 2, nan), f32(1, 2, 3, 4, 5, 6)
    assert_bits(run(lambda a: ops.clip(a, 0, 1), x)[0], f32(0, 0, 0.5, 1, 1, 1))
    assert_bits(run(lambda a, b: ops.clip_grad(a, b, 0, 1), x, dy)[0], f32(0, 0, 3, 0, 0, 6))


def test_clip_2_int8():
    x = np.array([-128, -5, 0, 5, 127], np.int8)
    dy = np.array([1, 2, 3, 4, 5], np.int8)
    assert_bits(run(lambda a: ops.clip(a, -5, 5), x)[0], np.array([-5, -5, 0, 5, 5], np.int8))
    assert_bits(run(lambda a, b: ops.clip_grad(a, b, -5, 5), x, dy)[0],
                np.array([0, 0, 3, 0, 0], np.int8))


def test_clip_3_min_above_max():
    x, dy = f32(0, 1.5, 3, nan), f32(1, 2, 3, 4)
    assert_bits(run(lambda a: ops.clip(a, 2, 1), x)[0], f32(2, 2, 2, 2))
    assert_bits(run(lambda a, b: ops.clip_grad(a, b, 2, 1), x, dy)[0], f32(0, 0, 0, 4))


def test_clip_keeps_negative_zero_on_bound():
    (y,) = run(lambda a: ops.clip(a, 0, 1), f32(-0.0))
    assert_bits(y, f32(-0.0))


def test_slice_1():
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    (y,) = run(lambda a: ops.slice(a, (0, 0, 0, 1), (1, 1, 4, 3), (1, 1, -2, 2)), x)
    assert_bits(y, f32(14, 16, 6, 8).reshape(1, 1, 2, 2))


def test_slice_2_stride_zero():
    x = f32(10, 20, 30)
    assert_bits(run(lambda a: ops.slice(a, (1,), (1,), (0,), output_sizes=(3,)), x)[0],
                f32(20, 20, 20))
    assert_bits(run(lambda a: ops.slice(a, (1,), (1,), (0,)), x)[0], f32(20))


@pytest.mark.parametrize("sizes", [(4, 4), (3, 3)])
def test_slice_grad_1_seed(sizes):
    x = np.arange(1, 17, dtype=np.float32).reshape(4, 4)
    (y,) = run(lambda a: ops.slice(a, (0, 0), sizes, (2, 2)), x)
    assert_bits(y, f32(1, 3, 9, 11).reshape(2, 2))
    (dx,) = run(lambda a: ops.slice_grad(a, (4, 4), (0, 0), sizes, (2, 2)), y)
    assert_bits(dx, f32(1, 0, 3, 0, 0, 0, 0, 0, 9, 0, 11, 0, 0, 0, 0, 0).reshape(4, 4))


def test_slice_grad_2():
    dy = f32(1, 2, 3, 4).reshape(1, 1, 2, 2)
    (dx,) = run(lambda a: ops.slice_grad(a, (1, 1, 4, 4), (0, 0, 0, 1), (1, 1, 4, 3),
                                         (1, 1, -2, 2)), dy)
    assert_bits(dx, f32(0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0, 1, 0, 2).reshape(1, 1, 4, 4))


def test_slice_grad_3_negative_strides():
    (dx,) = run(lambda a: ops.slice_grad(a, (5,), (1,), (3,), (-1,)), f32(1, 2, 3))
    assert_bits(dx, f32(0, 3, 2, 1, 0))
    (dx,) = run(lambda a: ops.slice_grad(a, (5,), (1,), (4,), (-2,)), f32(7, 8))
    assert_bits(dx, f32(0, 0, 8, 0, 7))


def pool(x, w, **kw):
    return run(lambda a: ops.max_pooling(a, w, output_indices=True, **kw), x)


def pool_grad(x, dy, w, **kw):
    return run(lambda a, b: ops.max_pooling_grad(a, b, w, **kw), x, dy)[0]


def test_max_pooling_1_seed():
    x = f32(1, 2, 3, 2, 4, 2, 5, 6, 7).reshape(1, 1, 3, 3)
    y, i = pool(x, (2, 2))
    assert_bits(y, f32(4, 4, 6, 7).reshape(1, 1, 2, 2))
    assert_bits(i, np.array([4, 4, 7, 8], np.int64).reshape(1, 1, 2, 2))
    dx = pool_grad(x, f32(1, 2, 4, 5).reshape(1, 1, 2, 2), (2, 2))
    assert_bits(dx, f32(0, 0, 0, 0, 3, 0, 0, 4, 5).reshape(1, 1, 3, 3))


def test_max_pooling_2_padding_tie():
    x = np.stack([f32(1, 1, 0, 1, 1, 0, 0, 0, 5),
                  f32(2, 3, 3, 3, 3, 1, 0, 1, 2)]).reshape(1, 2, 3, 3)
    kw = dict(strides=(2, 2), start_padding=(1, 1), end_padding=(1, 1))
    y, i = pool(x, (2, 2), **kw)
    assert_bits(y, f32(1, 1, 1, 5, 2, 3, 3, 3).reshape(1, 2, 2, 2))
    assert_bits(i, np.array([0, 1, 3, 8, 9, 10, 12, 13], np.int64).reshape(1, 2, 2, 2))
    dy = f32(1, 2, 3, 4, 10, 20, 30, 40).reshape(1, 2, 2, 2)
    want = f32(1, 2, 0, 3, 0, 0, 0, 0, 4, 10, 20, 0, 30, 40, 0, 0, 0, 0).reshape(1, 2, 3, 3)
    assert_bits(pool_grad(x, dy, (2, 2), **kw), want)


def test_max_pooling_3_dilation():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = 100
    y, i = pool(x, (2, 2), dilations=(2, 2))
    assert_bits(y, f32(100, 11, 14, 15).reshape(1, 1, 2, 2))
    assert_bits(i, np.array([0, 11, 14, 15], np.int64).reshape(1, 1, 2, 2))
    dx = pool_grad(x, np.ones((1, 1, 2, 2), np.float32), (2, 2), dilations=(2, 2))
    assert_bits(dx, f32(1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1).reshape(1, 1, 4, 4))


def test_max_pooling_4_5d():
    x = f32(3, 1, 4, 1, 5, 9, 2, 6).reshape(1, 1, 2, 2, 2)
    y, i = pool(x, (2, 2, 2))
    assert_bits(y, f32(9).reshape(1, 1, 1, 1, 1))
    assert_bits(i, np.array([5], np.int64).reshape(1, 1, 1, 1, 1))
    dx = pool_grad(x, f32(7).reshape(1, 1, 1, 1, 1), (2, 2, 2))
    assert_bits(dx, f32(0, 0, 0, 0, 0, 7, 0, 0).reshape(1, 1, 2, 2, 2))


def test_max_pooling_5_indices_cross_batch():
    x = f32(1, 5, 2, 3, 9, 0, 0, 9).reshape(2, 1, 2, 2)
    y, i = pool(x, (2, 2))
    assert_bits(y, f32(5, 9).reshape(2, 1, 1, 1))
    assert_bits(i, np.array([1, 4], np.int64).reshape(2, 1, 1, 1))


def test_max_pooling_6_ceil_mode():
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    y, i = pool(x, (2, 2), strides=(2, 2), output_sizes=(2, 2))
    assert_bits(y, f32(4, 5, 7, 8).reshape(1, 1, 2, 2))
    assert_bits(i, np.array([4, 5, 7, 8], np.int64).reshape(1, 1, 2, 2))
    dx = pool_grad(x, f32(1, 2, 3, 4).reshape(1, 1, 2, 2), (2, 2), strides=(2, 2))
    assert_bits(dx, f32(0, 0, 0, 0, 1, 2, 0, 3, 4).reshape(1, 1, 3, 3))


def test_max_pooling_7_window_in_padding():
    x = f32(5, 6, 7).reshape(1, 1, 1, 3)
    kw = dict(strides=(1, 2), start_padding=(0, 2), end_padding=(0, 0))
    y, i = pool(x, (1, 2), **kw)
    assert_bits(y, f32(-np.inf, 6).reshape(1, 1, 1, 2))
    assert_bits(i, np.array([0, 1], np.int64).reshape(1, 1, 1, 2))
    assert_bits(pool_grad(x, f32(10, 20).reshape(1, 1, 1, 2), (1, 2), **kw),
                f32(0, 20, 0).reshape(1, 1, 1, 3))


def test_max_pooling_8_nan():
    x = f32(nan, 1, nan, nan).reshape(1, 2, 1, 2)
    y, i = pool(x, (1, 2))
    assert_bits(y[0, 0], f32(1).reshape(1, 1))
    assert np.isnan(y[0, 1, 0, 0])
    assert_bits(i, np.array([1, 2], np.int64).reshape(1, 2, 1, 1))
    dx = pool_grad(x, f32(5, 6).reshape(1, 2, 1, 1), (1, 2))
    assert_bits(dx, f32(0, 5, 6, 0).reshape(1, 2, 1, 2))


RS1 = [dict(), dict(input_pixel_offsets=(0, 0), output_pixel_offsets=(0, 0)),
       dict(rounding_direction="increasing", input_pixel_offsets=(1, 1),
            output_pixel_offsets=(0, 0))]


@pytest.mark.parametrize("kw", RS1)
def test_resample_1_seed(kw):
    x = f32(1, 2, 3, 4).reshape(2, 2)
    assert_bits(run(lambda a: ops.resample(a, (0.5, 1.5), **kw), x)[0], f32(1, 1, 2).reshape(1, 3))
    dy = f32(4, 5, 6).reshape(1, 3)
    assert_bits(run(lambda a: ops.resample_grad(a, (2, 2), (0.5, 1.5), **kw), dy)[0],
                f32(9, 6, 0, 0).reshape(2, 2))


def test_resample_1_seed_4d_and_increasing():
    x = f32(1, 2, 3, 4).reshape(1, 1, 2, 2)
    s = (1, 1, 0.5, 1.5)
    assert_bits(run(lambda a: ops.resample(a, s), x)[0], f32(1, 1, 2).reshape(1, 1, 1, 3))
    inc = dict(rounding_direction="increasing")
    assert_bits(run(lambda a: ops.resample(a, s, **inc), x)[0], f32(3, 4, 4).reshape(1, 1, 1, 3))
    dy = f32(4, 5, 6).reshape(1, 1, 1, 3)
    assert_bits(run(lambda a: ops.resample_grad(a, (1, 1, 2, 2), s, **inc), dy)[0],
                f32(0, 0, 4, 11).reshape(1, 1, 2, 2))


@pytest.mark.parametrize("ipo,opo,want", [(0.5, 0, (31, 32)), (-0.5, 0.5, (3, 60))])
def test_resample_3_offset_reading(ipo, opo, want):
    dy = f32(1, 2, 4, 8, 16, 32)
    (dx,) = run(lambda a: ops.resample_grad(a, (2,), (3,), input_pixel_offsets=(ipo,),
                                            output_pixel_offsets=(opo,)), dy)
    assert_bits(dx, f32(*want))
    (dx4,) = run(lambda a: ops.resample_grad(a, (1, 1, 1, 2), (1, 1, 1, 3),
                                             input_pixel_offsets=(ipo,) * 4,
                                             output_pixel_offsets=(opo,) * 4),
                 dy.reshape(1, 1, 1, 6))
    assert_bits(dx4, f32(*want).reshape(1, 1, 1, 2))


def test_resample_4_linear_1d():
    lin = dict(interpolation_mode="linear")
    assert_bits(run(lambda a: ops.resample(a, (2,), **lin), f32(1, 2, 3, 4))[0],
                f32(1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4))
    assert_bits(run(lambda a: ops.resample_grad(a, (4,), (2,), **lin),
                    f32(1, 2, 3, 4, 5, 6, 7, 8))[0],
                f32(3.25, 7, 11, 14.75))
    assert_bits(run(lambda a: ops.resample_grad(a, (4,), (2,), **lin), np.ones(8, np.float32))[0],
                f32(2, 2, 2, 2))


def test_resample_5_linear_2d():
    lin = dict(interpolation_mode="linear")
    (y,) = run(lambda a: ops.resample(a, (2, 2), **lin), f32(1, 2, 3, 4).reshape(2, 2))
    assert_bits(y, f32(1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5,
                       3, 3.25, 3.75, 4).reshape(4, 4))
    g = lambda a: ops.resample_grad(a, (2, 2), (2, 2), **lin)  # noqa: E731
    assert_bits(run(g, np.ones((4, 4), np.float32))[0], f32(4, 4, 4, 4).reshape(2, 2))
    assert_bits(run(g, np.arange(16, dtype=np.float32).reshape(4, 4))[0],
                f32(12.5, 19.5, 40.5, 47.5).reshape(2, 2))


def test_resample_6_linear_downsample():
    lin = dict(interpolation_mode="linear")
    assert_bits(run(lambda a: ops.resample(a, (0.5,), **lin), f32(1, 2, 3, 4))[0], f32(1.5, 3.5))
    assert_bits(run(lambda a: ops.resample_grad(a, (4,), (0.5,), **lin), f32(1, 10))[0],
                f32(0.5, 0.5, 5, 5))


def test_resample_7_directml_recorded():
    x = np.array([[3.86005284, 45.18463077, 87.67153743, 98.78210347, 66.37414347, 3.41158349],
                  [86.14930501, 95.9813372, 76.87126314, 16.52591355, 65.98782867, 25.47092156],
                  [22.56010548, 92.08479613, 85.80876635, 92.63166027, 29.91620871, 75.40461275],
                  [62.06375451, 1.77121588, 99.47231285, 11.44055014, 25.39634271, 67.02175102]],
                 np.float32).reshape(1, 1, 4, 6)
    (y,) = run(lambda a: ops.resample(a, (1, 1, 0.5, 0.5), rounding_direction="increasing"), x)
    assert_bits(y, x[:, :, [1, 3]][:, :, :, [1, 3, 5]])


@pytest.mark.parametrize("rounding,ipo,want", [
    ("decreasing", 0.5, [0, 0, 0, 0, 1, 1, 2, 2, 2, 3]),
    ("increasing", 0.5, [0, 1, 1, 1, 2, 2, 3, 3, 3, 3]),
    ("decreasing", 0.0, [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]),
    ("increasing", 0.0, [1, 1, 1, 2, 2, 3, 3, 3, 3, 3]),
])
def test_resample_8_nearest_rounding(rounding, ipo, want):
    (y,) = run(lambda a: ops.resample(a, (2.5,), rounding_direction=rounding,
                                      input_pixel_offsets=(ipo,), output_pixel_offsets=(-0.5,),
                                      output_sizes=(10,)), f32(0, 1, 2, 3))
    assert_bits(y, np.array(want, np.float32))


@pytest.mark.parametrize("dtype,x,want", [
    (np.int8, [0, -1, 3], [-1, 1, 3]),
    (np.uint8, [0, 255, 100], [128, 178, 100]),
])
def test_resample_9_int_rounding(dtype, x, want):
    (y,) = run(lambda a: ops.resample(a, (1,), interpolation_mode="linear",
                                      input_pixel_offsets=(-0.5,), output_pixel_offsets=(0,)),
               np.array(x, dtype))
    assert_bits(y, np.array(want, dtype))


def test_float16_rounded_once():
    # 2048 + 1 + 1 in float16 step by step is 2048; computed in float32 and rounded once: 2050.
    x = np.array([3, 2, 1, 0], np.float16).reshape(1, 1, 1, 4)
    dy = np.array([2048, 1, 1], np.float16).reshape(1, 1, 1, 3)
    dx = pool_grad(x, dy, (1, 3), start_padding=(0, 2))
    assert_bits(dx, np.array([2050, 0, 0, 0], np.float16).reshape(1, 1, 1, 4))
