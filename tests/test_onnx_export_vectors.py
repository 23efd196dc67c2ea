"""SPEC.md §8 test vectors through target "onnx": the expected values bit for bit, and the
reference's results bit for bit."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from gradc import ops
from helpers import assert_bits
from onnx_export_helpers import exact, f32

nan, inf = np.nan, np.inf
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _pool(w: tuple, **kw: Any) -> Callable:
    return lambda a: ops.max_pooling(a, w, output_indices=True, **kw)


def _pool_grad(w: tuple, **kw: Any) -> Callable:
    return lambda a, b: ops.max_pooling_grad(a, b, w, **kw)


X_MP1 = f32(1, 2, 3, 2, 4, 2, 5, 6, 7).reshape(1, 1, 3, 3)
X_MP2 = f32(1, 1, 0, 1, 1, 0, 0, 0, 5, 2, 3, 3, 3, 3, 1, 0, 1, 2).reshape(1, 2, 3, 3)
X_MP3 = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
X_MP3[0, 0, 0, 0] = 100
MP2 = dict(strides=(2, 2), start_padding=(1, 1), end_padding=(1, 1))
MP7 = dict(strides=(1, 2), start_padding=(0, 2), end_padding=(0, 0))
I = lambda *v: np.array(v, np.int64)  # noqa: E731
LIN = dict(interpolation_mode="linear")
RS9 = dict(interpolation_mode="linear", input_pixel_offsets=(-0.5,), output_pixel_offsets=(0,))
X_RS7 = f32(3.86005284, 45.18463077, 87.67153743, 98.78210347, 66.37414347, 3.41158349,
            86.14930501, 95.9813372, 76.87126314, 16.52591355, 65.98782867, 25.47092156,
            22.56010548, 92.08479613, 85.80876635, 92.63166027, 29.91620871, 75.40461275,
            62.06375451, 1.77121588, 99.47231285, 11.44055014, 25.39634271, 67.02175102)

VECTORS = {
    "T-RELU-1": (ops.relu, [f32(-2.0, -0.0, 0.0, 0.5, 3.0, nan)], [f32(0, 0, 0, 0.5, 3, 0)]),
    "T-RELU-1g": (ops.relu_grad, [f32(-2.0, -0.0, 0.0, 0.5, 3.0, nan), f32(1, 2, 3, 4, 5, 6)],
                  [f32(0, 0, 0, 4, 5, 0)]),
    "T-RELU-2": (ops.relu, [np.array([-128, -1, 0, 1, 127], np.int8)],
                 [np.array([0, 0, 0, 1, 127], np.int8)]),
    "T-CLIP-1": (lambda a: ops.clip(a, 0, 1), [f32(-1, 0, 0.5, 1, 2, nan)],
                 [f32(0, 0, 0.5, 1, 1, 1)]),
    "T-CLIP-1g": (lambda a, b: ops.clip_grad(a, b, 0, 1), [f32(-1, 0, 0.5, 1, 2, nan),
                                                           f32(1, 2, 3, 4, 5, 6)],
                  [f32(0, 0, 3, 0, 0, 6)]),
    "T-CLIP-2": (lambda a: ops.clip(a, -5, 5), [np.array([-128, -5, 0, 5, 127], np.int8)],
                 [np.array([-5, -5, 0, 5, 5], np.int8)]),
    "T-CLIP-3": (lambda a: ops.clip(a, 2, 1), [f32(0, 1.5, 3, nan)], [f32(2, 2, 2, 2)]),
    "T-CLIP-3g": (lambda a, b: ops.clip_grad(a, b, 2, 1), [f32(0, 1.5, 3, nan), f32(1, 2, 3, 4)],
                  [f32(0, 0, 0, 4)]),
    "T-SL-1": (lambda a: ops.slice(a, (0, 0, 0, 1), (1, 1, 4, 3), (1, 1, -2, 2)),
               [np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)],
               [f32(14, 16, 6, 8).reshape(1, 1, 2, 2)]),
    "T-SL-2": (lambda a: ops.slice(a, (1,), (1,), (0,), output_sizes=(3,)), [f32(10, 20, 30)],
               [f32(20, 20, 20)]),
    "T-SG-1": (lambda a: ops.slice_grad(a, (4, 4), (0, 0), (3, 3), (2, 2)),
               [f32(1, 3, 9, 11).reshape(2, 2)],
               [f32(1, 0, 3, 0, 0, 0, 0, 0, 9, 0, 11, 0, 0, 0, 0, 0).reshape(4, 4)]),
    "T-SG-2": (lambda a: ops.slice_grad(a, (1, 1, 4, 4), (0, 0, 0, 1), (1, 1, 4, 3),
                                        (1, 1, -2, 2)), [f32(1, 2, 3, 4).reshape(1, 1, 2, 2)],
               [f32(0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0, 1, 0, 2).reshape(1, 1, 4, 4)]),
    "T-SG-3a": (lambda a: ops.slice_grad(a, (5,), (1,), (3,), (-1,)), [f32(1, 2, 3)],
                [f32(0, 3, 2, 1, 0)]),
    "T-SG-3b": (lambda a: ops.slice_grad(a, (5,), (1,), (4,), (-2,)), [f32(7, 8)],
                [f32(0, 0, 8, 0, 7)]),
    "T-MP-1": (_pool((2, 2)), [X_MP1], [f32(4, 4, 6, 7).reshape(1, 1, 2, 2),
                                        I(4, 4, 7, 8).reshape(1, 1, 2, 2)]),
    "T-MP-1g": (_pool_grad((2, 2)), [X_MP1, f32(1, 2, 4, 5).reshape(1, 1, 2, 2)],
                [f32(0, 0, 0, 0, 3, 0, 0, 4, 5).reshape(1, 1, 3, 3)]),
    "T-MP-2": (_pool((2, 2), **MP2), [X_MP2], [f32(1, 1, 1, 5, 2, 3, 3, 3).reshape(1, 2, 2, 2),
                                               I(0, 1, 3, 8, 9, 10, 12, 13).reshape(1, 2, 2, 2)]),
    "T-MP-2g": (_pool_grad((2, 2), **MP2), [X_MP2, f32(1, 2, 3, 4, 10, 20, 30, 40).reshape(
        1, 2, 2, 2)], [f32(1, 2, 0, 3, 0, 0, 0, 0, 4, 10, 20, 0, 30, 40, 0, 0, 0, 0).reshape(
            1, 2, 3, 3)]),
    "T-MP-3": (_pool((2, 2), dilations=(2, 2)), [X_MP3], [f32(100, 11, 14, 15).reshape(
        1, 1, 2, 2), I(0, 11, 14, 15).reshape(1, 1, 2, 2)]),
    "T-MP-3g": (_pool_grad((2, 2), dilations=(2, 2)), [X_MP3, np.ones((1, 1, 2, 2), np.float32)],
                [f32(1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1).reshape(1, 1, 4, 4)]),
    "T-MP-4": (_pool((2, 2, 2)), [f32(3, 1, 4, 1, 5, 9, 2, 6).reshape(1, 1, 2, 2, 2)],
               [f32(9).reshape(1, 1, 1, 1, 1), I(5).reshape(1, 1, 1, 1, 1)]),
    "T-MP-4g": (_pool_grad((2, 2, 2)), [f32(3, 1, 4, 1, 5, 9, 2, 6).reshape(1, 1, 2, 2, 2),
                                        f32(7).reshape(1, 1, 1, 1, 1)],
                [f32(0, 0, 0, 0, 0, 7, 0, 0).reshape(1, 1, 2, 2, 2)]),
    "T-MP-5": (_pool((2, 2)), [f32(1, 5, 2, 3, 9, 0, 0, 9).reshape(2, 1, 2, 2)],
               [f32(5, 9).reshape(2, 1, 1, 1), I(1, 4).reshape(2, 1, 1, 1)]),
    "T-MP-6": (_pool((2, 2), strides=(2, 2), output_sizes=(2, 2)),
               [np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)],
               [f32(4, 5, 7, 8).reshape(1, 1, 2, 2), I(4, 5, 7, 8).reshape(1, 1, 2, 2)]),
    "T-MP-6g": (_pool_grad((2, 2), strides=(2, 2)), [np.arange(9, dtype=np.float32).reshape(
        1, 1, 3, 3), f32(1, 2, 3, 4).reshape(1, 1, 2, 2)],
        [f32(0, 0, 0, 0, 1, 2, 0, 3, 4).reshape(1, 1, 3, 3)]),
    "T-MP-7": (_pool((1, 2), **MP7), [f32(5, 6, 7).reshape(1, 1, 1, 3)],
               [f32(-inf, 6).reshape(1, 1, 1, 2), I(0, 1).reshape(1, 1, 1, 2)]),
    "T-MP-7g": (_pool_grad((1, 2), **MP7), [f32(5, 6, 7).reshape(1, 1, 1, 3),
                                            f32(10, 20).reshape(1, 1, 1, 2)],
                [f32(0, 20, 0).reshape(1, 1, 1, 3)]),
    "T-MP-8": (_pool((1, 2)), [f32(nan, 1, nan, nan).reshape(1, 2, 1, 2)],
               [f32(1, nan).reshape(1, 2, 1, 1), I(1, 2).reshape(1, 2, 1, 1)]),
    "T-MP-8g": (_pool_grad((1, 2)), [f32(nan, 1, nan, nan).reshape(1, 2, 1, 2),
                                     f32(5, 6).reshape(1, 2, 1, 1)],
                [f32(0, 5, 6, 0).reshape(1, 2, 1, 2)]),
    "T-RS-1": (lambda a: ops.resample(a, (1, 1, 0.5, 1.5)), [f32(1, 2, 3, 4).reshape(1, 1, 2, 2)],
               [f32(1, 1, 2).reshape(1, 1, 1, 3)]),
    "T-RS-1i": (lambda a: ops.resample(a, (1, 1, 0.5, 1.5), rounding_direction="increasing"),
                [f32(1, 2, 3, 4).reshape(1, 1, 2, 2)], [f32(3, 4, 4).reshape(1, 1, 1, 3)]),
    "T-RS-1g": (lambda a: ops.resample_grad(a, (2, 2), (0.5, 1.5)), [f32(4, 5, 6).reshape(1, 3)],
                [f32(9, 6, 0, 0).reshape(2, 2)]),
    "T-RS-1gi": (lambda a: ops.resample_grad(a, (1, 1, 2, 2), (1, 1, 0.5, 1.5),
                                             rounding_direction="increasing"),
                 [f32(4, 5, 6).reshape(1, 1, 1, 3)], [f32(0, 0, 4, 11).reshape(1, 1, 2, 2)]),
    "T-RS-3a": (lambda a: ops.resample_grad(a, (2,), (3,), input_pixel_offsets=(0.5,),
                                            output_pixel_offsets=(0,)),
                [f32(1, 2, 4, 8, 16, 32)], [f32(31, 32)]),
    "T-RS-3b": (lambda a: ops.resample_grad(a, (2,), (3,), input_pixel_offsets=(-0.5,),
                                            output_pixel_offsets=(0.5,)),
                [f32(1, 2, 4, 8, 16, 32)], [f32(3, 60)]),
    "T-RS-4": (lambda a: ops.resample(a, (2,), **LIN), [f32(1, 2, 3, 4)],
               [f32(1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4)]),
    "T-RS-4g": (lambda a: ops.resample_grad(a, (4,), (2,), **LIN), [f32(1, 2, 3, 4, 5, 6, 7, 8)],
                [f32(3.25, 7, 11, 14.75)]),
    "T-RS-5": (lambda a: ops.resample(a, (2, 2), **LIN), [f32(1, 2, 3, 4).reshape(2, 2)],
               [f32(1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25,
                    3.75, 4).reshape(4, 4)]),
    "T-RS-5g": (lambda a: ops.resample_grad(a, (2, 2), (2, 2), **LIN),
                [np.arange(16, dtype=np.float32).reshape(4, 4)],
                [f32(12.5, 19.5, 40.5, 47.5).reshape(2, 2)]),
    "T-RS-6": (lambda a: ops.resample(a, (0.5,), **LIN), [f32(1, 2, 3, 4)], [f32(1.5, 3.5)]),
    "T-RS-6g": (lambda a: ops.resample_grad(a, (4,), (0.5,), **LIN), [f32(1, 10)],
                [f32(0.5, 0.5, 5, 5)]),
    "T-RS-7": (lambda a: ops.resample(a, (1, 1, 0.5, 0.5), rounding_direction="increasing"),
               [X_RS7.reshape(1, 1, 4, 6)], [X_RS7.reshape(4, 6)[1::2, 1::2].reshape(1, 1, 2, 3)]),
    "T-RS-8": (lambda a: ops.resample(a, (2.5,), output_pixel_offsets=(-0.5,), output_sizes=(10,),
                                      input_pixel_offsets=(0.0,)), [f32(0, 1, 2, 3)],
               [f32(0, 0, 1, 1, 1, 2, 2, 3, 3, 3)]),
    "T-RS-8i": (lambda a: ops.resample(a, (2.5,), output_pixel_offsets=(-0.5,), output_sizes=(10,),
                                       rounding_direction="increasing"), [f32(0, 1, 2, 3)],
                [f32(0, 1, 1, 1, 2, 2, 3, 3, 3, 3)]),
    "T-RS-9": (lambda a: ops.resample(a, (1,), **RS9), [np.array([0, -1, 3], np.int8)],
               [np.array([-1, 1, 3], np.int8)]),
    "T-RS-9u": (lambda a: ops.resample(a, (1,), **RS9), [np.array([0, 255, 100], np.uint8)],
                [np.array([128, 178, 100], np.uint8)]),
}


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_spec_vector(name: str) -> None:
    fn, args, want = VECTORS[name]
    got = exact(fn, *args)
    for g, w in zip(got, want):
        assert_bits(g, w)


