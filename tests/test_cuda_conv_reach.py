"""The cuda target's convolution kernels choose their index type from the positions they
compute, not only from the element counts: a stride of 2**24 over 129 outputs reaches 2**31,
past an int (fuzz seed 7373: the host harness read out of bounds). Host harness against the
reference, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops

from helpers import assert_bits, compile_for, cuda_targets


def _conv_graph(filter_grad: bool) -> gradc.Graph:
    g = gradc.Graph("reach")
    x = g.input("x", "float64", (1, 1, 4, 2))
    w = g.input("w", "float64", (2, 1, 2, 1))
    attrs = dict(strides=(1, 2 ** 24), start_padding=(1, 0), end_padding=(0, 2 ** 31))
    y = ops.convolution(x, w, **attrs)
    assert tuple(y.type.shape) == (1, 2, 4, 129)
    if filter_grad:
        dy = g.input("dy", "float64", (1, 2, 4, 129))
        g.output(ops.convolution_filter_grad(x, dy, (2, 1, 2, 1), **attrs), "dw")
    else:
        g.output(y, "y")
    return g


@pytest.mark.parametrize("target", cuda_targets())
@pytest.mark.parametrize("filter_grad", [False, True], ids=["forward", "filter_grad"])
def test_huge_strides_index_in_64_bits(target, filter_grad):
    g = _conv_graph(filter_grad)
    rng = np.random.default_rng(7373)
    feeds = {v.name: rng.standard_normal([int(d) for d in v.type.shape]) for v in g.inputs}
    want = gradc.compile(g, target="reference")(**feeds)
    got = compile_for(g, target)(**feeds)
    for name in want:
        assert_bits(np.asarray(got[name]), want[name])
