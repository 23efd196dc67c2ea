"""Transposed convolutions of thin groups (the C target's direct loops) with a stride on the
last axis, against the reference bit for bit: GCC 12 at -O3 with 512-bit AVX-512 vectors
dropped terms of these loops (fuzz seed 8484), so the C target builds with 256-bit vectors."""

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
