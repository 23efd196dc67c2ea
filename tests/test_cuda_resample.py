"""The cuda target's resample_grad with taps of weight 0 (linear resampling keeps a second tap
of weight 0 on an axis of scale 1 and at clamped borders): a first launch flags a non-finite
element of dY, the second sums only the live terms where none is, every term where one is.
Bit for bit with the reference either way, through the host harness (on the GPU under
``GRADC_TEST_CUDA=only``)."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.cuda.emit import generate

from helpers import assert_bits, compile_for, cuda_targets

pytestmark = pytest.mark.skipif(not cuda_targets(), reason="no C++ compiler for the harness")

CONFIGS = [  # dtype, shape of dX, scales
    ("float32", (2, 3, 5, 4), (1, 1, 2.0, 2.0)),  # the UNet's 2x bilinear upsampling
    ("float32", (2, 2, 6, 5), (1, 1, 1.5, 0.5)),
    ("float64", (1, 2, 4, 4), (1, 1, 2.0, 1.0)),
    ("float16", (2, 2, 4, 3), (1, 1, 2.0, 2.0)),
    ("float32", (3, 7), (1.0, 2.5)),
]


def _graph(dtype: str, shape: tuple[int, ...], scales: tuple[float, ...]) -> gradc.Graph:
    """dX = relu_grad(q, resample_grad(relu_grad(y, dy))): the anchored group with a
    prologue (which the flagging launch evaluates too) and an epilogue."""
    probe = gradc.Graph("p")
    out = tuple(int(d) for d in ops.resample(probe.input("x", dtype, shape), scales,
                                             "linear").type.shape)
    g = gradc.Graph("rsg")
    y, dy = g.input("y", dtype, out), g.input("dy", dtype, out)
    q = g.input("q", dtype, shape)
    d = ops.resample_grad(ops.relu_grad(y, dy), shape, scales, "linear")
    g.output(ops.relu_grad(q, d), "dx")
    return g


def _feeds(dtype: str, g: gradc.Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for v in g.inputs:
        shape = tuple(int(d) for d in v.type.shape)
        feeds[v.name] = rng.standard_normal(shape).astype(dtype)
    feeds["y"] = np.abs(feeds["y"]) + np.asarray(0.5, dtype)  # every dy term passes relu_grad
    return feeds


@pytest.mark.parametrize("dtype,shape,scales", CONFIGS)
@pytest.mark.parametrize("target", cuda_targets())
def test_live_terms_when_finite_every_term_when_not(dtype, shape, scales, target,
                                                    tmp_path_factory):
    g = _graph(dtype, shape, scales)
    ex = compile_for(g, target, cache_dir=str(tmp_path_factory.getbasetemp() / "cache"))
    ref = gradc.compile(g, target="reference")
    rng = np.random.default_rng(len(shape) * 10 + int(scales[-1] * 4))
    feeds = _feeds(dtype, g, rng)
    assert_bits(np.asarray(ex(**feeds)["dx"]), ref(**feeds)["dx"])
    # One non-finite dY element at a time: its dead terms (0 * inf = NaN) reach neighbours
    # of the elements it reaches with a weight, which a sum of the live terms alone misses.
    n = feeds["dy"].size
    for value in (np.inf, -np.inf, np.nan):
        for at in (0, n - 1, int(rng.integers(n))):
            bad = {k: v.copy() for k, v in feeds.items()}
            bad["dy"].reshape(-1)[at] = value
            want = ref(**bad)["dx"]
            got = np.asarray(ex(**bad)["dx"])
            assert_bits(got, want, nan_payload=False)
    # and finite again: the flags are the step's own
    assert_bits(np.asarray(ex(**feeds)["dx"]), ref(**feeds)["dx"])


def test_a_dead_term_alone_makes_the_element_nan():
    """The UNet's case: on an axis of scale 1, dY[c] has weight 0 on dX[c + 1]. An infinity
    at dY[c] makes dX[c + 1] NaN in the reference, through that dead term alone."""
    g = _graph("float32", (2, 3, 5, 4), (1, 1, 2.0, 2.0))
    feeds = _feeds("float32", g, np.random.default_rng(3))
    feeds["q"] = np.abs(feeds["q"]) + np.float32(0.5)  # the epilogue passes every element
    feeds["dy"][0, 1, 2, 3] = np.inf
    want = gradc.compile(g, target="reference")(**feeds)["dx"]
    # dY[0, 1] has weight 0 on dX[1, 1] (batch axis) and dX[0, 2] (channel axis) only
    assert np.isnan(want[1, 1]).any() and np.isnan(want[0, 2]).any()
    assert not np.isnan(want[1, 0]).any() and not np.isnan(want[0, 0]).any()
    for target in cuda_targets():
        got = np.asarray(compile_for(g, target)(**feeds)["dx"])
        assert_bits(got, want, nan_payload=False)


def test_the_live_sum_has_a_fraction_of_the_terms():
    """Two launches; the live branch sums at most 4 x 4 groups of one tap per element of dX,
    the axes of scale 1 by arithmetic (no table), where every term is 2 x 2 x 5 x 5 groups of
    up to 2 x 2 x 2 x 2 taps (UNet's upsampling: two axes of scale 1, two of scale 2)."""
    g = gradc.optimize(_graph("float32", (2, 3, 5, 4), (1, 1, 2.0, 2.0))).graph
    program = generate(g, {})
    names = [x.kernel for x in program.launches]
    assert names == ["k0", "k0_1"], names
    body = program.source.split("GC_KERNEL k0_1")[1]
    fast, slow = body.split("  else {", 1)
    assert "float w0[" not in fast and "float w1[" not in fast
    assert "float w2[4][1];" in fast and "float w3[4][1];" in fast
    assert "float w0[2][2];" in slow and "float w3[5][2];" in slow


def test_nearest_and_integer_dtypes_have_no_flagging_launch():
    """Nearest resampling has no tap of weight 0; an integer dY is finite."""
    g = gradc.Graph("n")
    dy = g.input("dy", "float32", (2, 3, 8, 8))
    g.output(ops.resample_grad(dy, (2, 3, 4, 4), (1, 1, 2.0, 2.0), "nearest"), "dx")
    assert len(generate(gradc.optimize(g).graph, {}).launches) == 1
