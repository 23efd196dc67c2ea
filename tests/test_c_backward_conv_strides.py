"""Transposed convolutions of thin groups (the C target's direct loops), against the reference
bit for bit: GCC 12 at -O3 with 512-bit AVX-512 vectors dropped terms of these loops with a
stride on the last axis (fuzz seed 8484), so the C target builds with 256-bit vectors; and at
any vector width it vectorized a tap loop whose taps add into the same outputs (fuzz seed
12012), so the tap loops are kept scalar (backends/c/conv.py)."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops

from helpers import assert_bits


@pytest.mark.parametrize("groups,cout,strides,dilations", [
    (2, 4, (1, 2), (1, 1)), (2, 4, (1, 2), (2, 1)), (2, 4, (2, 2), (2, 1)),
    (1, 2, (1, 2), (1, 1)), (1, 1, (1, 2), (1, 1)), (1, 1, (2, 3), (1, 2))])
def test_thin_transposed_convolutions_equal_the_reference(groups, cout, strides, dilations):
    g = gradc.Graph("t")
    x = g.input("x", "float32", (2, 4, 3, 4))
    w = g.input("w", "float32", (4, cout // groups, 3, 2))
    g.output(ops.convolution(x, w, direction="backward", strides=strides, dilations=dilations,
                             group_count=groups), "y")
    rng = np.random.default_rng(8484)
    feeds = {v.name: rng.standard_normal([int(d) for d in v.type.shape]).astype(np.float32)
             for v in g.inputs}
    want = gradc.compile(g, target="reference")(**feeds)["y"]
    assert_bits(gradc.compile(g, target="c")(**feeds)["y"], want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["convolution", "cross_correlation"])
def test_taps_that_add_into_the_same_outputs_are_not_vectorized_together(dtype, mode):
    """A 3-D transposed convolution whose two taps along the first axis add into the same
    outputs (fuzz seed 12012): GCC 12 at -O3 vectorized the tap loop itself and kept one tap's
    terms of each output (-1.25 where the reference has -2.75); the C target keeps its tap loops
    scalar. Integer-valued operands: every sum exact, the expected values by hand."""
    g = gradc.Graph("taps")
    dy = g.input("dy", dtype, (1, 1, 3, 1, 1))
    w = g.input("w", dtype, (1, 1, 2, 1, 2))
    g.output(ops.convolution(dy, w, direction="backward", mode=mode), "dx")
    feeds = {"dy": np.array([1, 2, 3], dtype).reshape(1, 1, 3, 1, 1),
             "w": np.array([1, 10, 100, 1000], dtype).reshape(1, 1, 2, 1, 2)}
    taps = [[1, 10], [100, 1000]] if mode == "cross_correlation" else [[1000, 100], [10, 1]]
    want = np.zeros((4, 2))
    for q in range(3):  # dx[q + k] += dy[q] * w[k]
        for k in range(2):
            want[q + k] += feeds["dy"].ravel()[q] * np.array(taps[k])
    got = gradc.compile(g, target="c")(**feeds)["dx"]
    assert_bits(got, want.astype(dtype).reshape(1, 1, 4, 1, 2))
    assert_bits(got, gradc.compile(g, target="reference")(**feeds)["dx"])
