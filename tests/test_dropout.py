"""dropout (SPEC-training.md §20.2): a composite of random_generator, greater_equal, where, mul."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from helpers import assert_bits, compile_for, cuda_targets, f32, run

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
X = f32(-1, -2, 3, -4, 5, -6, 7, 8)
ZEROS = np.zeros(6, np.uint32)


def drop(ratio):
    return lambda x, s: ops.dropout(x, s, ratio)


@pytest.mark.parametrize("target", TARGETS)
def test_t_do_vectors(target):
    y, mask, state = run(drop(0.5), X, ZEROS, target=target)  # T-DO-1
    assert_bits(mask, np.array([0, 1, 1, 1, 1, 0, 1, 0], bool))
    assert_bits(y, f32(-0.0, -4, 6, -8, 10, -0.0, 14, 0))
    assert_bits(state, np.array([2, 0, 0, 0, 0, 0], np.uint32))
    y, mask, _ = run(drop(0.25), X, ZEROS, target=target)  # T-DO-2
    assert_bits(mask, np.array([1, 1, 1, 1, 1, 1, 1, 0], bool))
    assert_bits(y, f32(-1.3333333730697632, -2.6666667461395264, 4, -5.333333492279053,
                       6.6666669845581055, -8, 9.333333969116211, 0))


def test_ratio_zero_is_identity_and_nan_stays_nan():
    x = f32(1.5, -0.0, np.inf, np.nan, -3)
    for target in TARGETS:
        y, mask, _ = run(drop(0.0), x, ZEROS, target=target)
        assert_bits(y, x)
        assert mask.all()
    y, mask, _ = run(drop(0.9), np.full(64, np.inf, np.float32), ZEROS)
    assert np.isnan(y[~mask]).all() and (y[mask] == np.inf).all()  # inf * 0 = NaN, as PyTorch


def test_mask_statistics_and_threshold():
    rng = np.random.default_rng(0)
    state = rng.integers(0, 2 ** 32, 6, dtype=np.uint32)
    for ratio in (0.1, 0.5, 0.8):
        y, mask, _ = run(drop(ratio), np.ones((200, 100), np.float32), state)
        assert abs(mask.mean() - (1 - ratio)) < 0.01
        assert_bits(y[mask], np.full(mask.sum(), np.float32(1 / (1 - np.float32(ratio))),
                                     np.float32))
        bits, _ = run(lambda s: ops.random_generator(s, (200, 100)), state)
        t = int(np.ceil(np.float64(np.float32(ratio)) * 2.0 ** 32))
        assert_bits(mask, bits >= t)  # an integer comparison of the 32 bits


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_targets_agree_with_a_symbolic_batch_and_chained_states(dtype):
    g = gradc.Graph("drop")
    x = g.input("x", dtype, ("N", 3, 4))
    s = g.input("s", "uint32", (6,))
    y1, m1, s1 = ops.dropout(x, s, 0.3)
    y2, m2, s2 = ops.dropout(y1, s1, 0.6)
    scalar, _, s3 = ops.dropout(ops.reduce_sum(y2), s2, 0.5)  # rank 0
    for name, v in (("y", y2), ("m1", m1), ("m2", m2), ("s_out", s3), ("r", scalar)):
        g.output(v, name)
    rng = np.random.default_rng(1)
    exes = {t: compile_for(g, t) for t in TARGETS}
    for n in (1, 5):
        feeds = {"x": rng.standard_normal((n, 3, 4)).astype(dtype),
                 "s": rng.integers(0, 2 ** 32, 6, dtype=np.uint32)}
        want = exes["reference"](**feeds)
        for t in TARGETS[1:]:
            got = exes[t](**feeds)
            for k in ("y", "m1", "m2", "s_out"):
                assert_bits(got[k], want[k])
            np.testing.assert_allclose(got["r"], want["r"], rtol=1e-2 if dtype == "float16"
                                       else 1e-5)  # a sum: §9.5's tolerance


def _grad_graph(dtype="float64"):
    g = gradc.Graph("drop")
    x = g.input("x", dtype, (3, 5))
    s = g.input("s", "uint32", (6,))
    y, mask, state = ops.dropout(x, s, 0.4)
    g.output(y, "y")
    g.output(mask, "mask")
    g.output(state, "state")
    return gradc.grad(g)


def test_gradient_is_dy_times_the_mask_scale_and_finite_differences():
    dg = _grad_graph()
    assert [v.name for v in dg.inputs] == ["x", "s", "grad_y"]  # no cotangent for the mask
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5))
    s = rng.integers(0, 2 ** 32, 6, dtype=np.uint32)
    dy = rng.standard_normal((3, 5))
    for t in TARGETS:
        out = compile_for(dg, t)(x=x, s=s, grad_y=dy)
        scale = np.float64(1 / (1 - np.float64(np.float32(0.4))))
        assert_bits(out["grad_x"], dy * np.where(out["mask"], scale, 0.0))
    fwd = gradc.compile(dg, target="reference")
    h = 1e-6
    for i in np.ndindex(3, 5):
        e = np.zeros((3, 5))
        e[i] = h
        num = (fwd(x=x + e, s=s, grad_y=dy)["y"] - fwd(x=x - e, s=s, grad_y=dy)["y"]) / (2 * h)
        assert abs((num * dy).sum() - (out["grad_x"][i])) < 1e-6


def test_gradient_matches_torch_native_dropout_backward():
    torch = pytest.importorskip("torch")
    dg = _grad_graph("float32")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    dy = rng.standard_normal((3, 5)).astype(np.float32)
    s = rng.integers(0, 2 ** 32, 6, dtype=np.uint32)
    out = gradc.compile(dg, target="reference")(x=x, s=s, grad_y=dy)
    mask = torch.tensor(out["mask"])
    scale = 1 / (1 - 0.4)
    want = torch.ops.aten.native_dropout_backward(torch.tensor(dy), mask, scale)
    assert_bits(out["grad_x"], want.numpy())
    fwd = torch.tensor(x) * mask * np.float32(scale)  # native_dropout: input * mask * scale
    assert_bits(out["y"], fwd.numpy())


@pytest.mark.parametrize("args, field", [
    ((f32(1, 2, 3, 4), "state", 1.0), "ratio"),  # V-42
    ((f32(1, 2, 3, 4), "state", -0.5), "ratio"),
    ((f32(1, 2, 3, 4), "state", float("inf")), "ratio"),
    ((np.array([1, 2], np.int32), "state", 0.5), "input.dtype"),
    ((f32(1, 2, 3, 4), "bad_state", 0.5), "input_state.shape"),
    ((f32(1, 2, 3, 4), "int_state", 0.5), "input_state.dtype"),
])
def test_rejected_arguments(args, field):
    x, which, ratio = args
    g = gradc.Graph("g")
    xv = g.input("x", x.dtype.name, x.shape)
    st = {"state": ("uint32", (6,)), "bad_state": ("uint32", (4,)),
          "int_state": ("int32", (6,))}[which]
    sv = g.input("s", *st)
    with pytest.raises(gradc.VerifyError, match=f"^dropout: {field}: expected"):
        ops.dropout(xv, sv, ratio)
