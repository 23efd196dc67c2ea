"""SPEC-training.md §17 on every target: the §22.8 vectors (values and gradients), V-37, a slow
loop oracle written from §17 against the reference, and every target against the reference on
random data within §17's bound (numpy and c bit for bit), symbolic batch dims included."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.ops import REGISTRY
from helpers import assert_bits
from test_elementwise_math_support import TARGETS, assert_ulps, graph, run_targets

inf, nan = np.inf, np.nan
RNG = np.random.default_rng(17)


def f32(*rows: object) -> np.ndarray:
    return np.array(rows, np.float32)


def _both(x: np.ndarray, axes: tuple[int, ...], dtype: str = "float32") -> dict:
    g = graph(lambda x: {"s": ops.softmax(x, axes), "l": ops.log_softmax(x, axes)},
              {"x": (dtype, x.shape)})
    return run_targets(g, {"x": x})


def _check(outs: dict, want_s: np.ndarray, want_l: np.ndarray) -> None:
    """Reference: the SPEC's values; numpy, c: the reference's bits; onnx: within 4 ulps."""
    ref = outs["reference"]
    assert_bits(ref["s"], want_s, nan_payload=False)
    assert_bits(ref["l"], want_l, nan_payload=False)
    for t in ("numpy", "c"):
        assert_bits(outs[t]["s"], ref["s"], nan_payload=False)
        assert_bits(outs[t]["l"], ref["l"], nan_payload=False)
    assert_ulps(outs["onnx"]["s"], want_s, 4)
    assert_ulps(outs["onnx"]["l"], want_l, 4)


def test_t_sm_1_exact_values_overflow_and_infinities():
    _check(_both(np.zeros((1, 4), np.float32), (1,)), f32([0.25] * 4),
           np.full((1, 4), -math.log(4), np.float32))
    x = f32([0, 0], [1000, 1000], [-inf, 0])
    lg = np.float32(-0.6931471824645996)
    _check(_both(x, (1,)), f32([0.5, 0.5], [0.5, 0.5], [0, 1]), f32([lg, lg], [lg, lg], [-inf, 0]))
    _check(_both(f32([-inf, -inf]), (1,)), f32([nan, nan]), f32([nan, nan]))


def test_t_sm_2_transcendental_values():
    _check(_both(f32([1, 2, 3]), (1,)),
           f32([0.09003057330846786, 0.2447284758090973, 0.6652409434318542]),
           f32([-2.4076058864593506, -1.4076058864593506, -0.40760594606399536]))


def test_t_sm_3_gradients():
    g = graph(lambda x: {"s": ops.softmax(x, (1,)), "l": ops.log_softmax(x, (1,))},
              {"x": ("float32", (1, 4))})
    dy = f32([1, 2, 3, 4])
    for wrt_out, want in (("s", f32([-0.375, -0.125, 0.125, 0.375])),
                          ("l", f32([-1.5, -0.5, 0.5, 1.5]))):
        feeds = {"x": np.zeros((1, 4), np.float32), "grad_s": dy * (wrt_out == "s"),
                 "grad_l": dy * (wrt_out == "l")}
        for o in run_targets(gradc.grad(g, wrt=["x"]), feeds).values():
            assert_bits(o["grad_x"], want)


def test_t_sm_4_joint_axes():
    x = f32([[0, 1], [2, 3]], [[0, 0], [0, 0]])
    want = f32([[0.032058604061603546, 0.08714432269334793],
                [0.23688283562660217, 0.6439142823219299]], [[0.25, 0.25], [0.25, 0.25]])
    outs = _both(x, (1, 2))
    assert_bits(outs["reference"]["s"], want)
    for t in TARGETS[1:3]:
        assert_bits(outs[t]["s"], want)
    assert_ulps(outs["onnx"]["s"], want, 4)


@pytest.mark.parametrize("fn,field", [
    (lambda x: ops.softmax(x, ()), "softmax: axes"),                                     # V-37
    (lambda x: ops.log_softmax(x, (2,)), r"log_softmax: axes\[0\]"),
    (lambda x: ops.softmax(x, (0, -2)), r"softmax: axes\[1\]"),
    (lambda x: ops.softmax(ops.cast(x, "int32"), (1,)), "softmax: input.dtype"),
])
def test_rejected_arguments_name_the_field(fn, field):
    g = gradc.Graph("v")
    x = g.input("x", "float32", (2, 3))
    with pytest.raises(gradc.VerifyError, match=f"^{field}: expected"):
        fn(x)


def test_axes_are_required_and_rank0_is_refused():
    g = gradc.Graph("v")
    with pytest.raises(TypeError):
        ops.softmax(g.input("x", "float32", (2, 3)))  # type: ignore[call-arg]
    with pytest.raises(gradc.VerifyError, match="^softmax: input.rank"):
        ops.softmax(g.input("y", "float32", ()), ())


# -- a slow loop oracle written from §17.1 --------------------------------------------------------

def _oracle(x: np.ndarray, axes: tuple[int, ...], log: bool) -> np.ndarray:
    a = np.float64 if x.dtype == np.float64 else np.float32
    y = np.empty(x.shape, x.dtype)
    kept = [i for i in range(x.ndim) if i not in axes]
    for base in itertools.product(*(range(x.shape[i]) for i in kept)):
        members = []
        for red in itertools.product(*(range(x.shape[i]) for i in axes)):
            idx = [0] * x.ndim
            for i, b in zip(kept, base):
                idx[i] = b
            for i, r in zip(axes, red):
                idx[i] = r
            members.append(tuple(idx))
        v = [a(x[m]) for m in members]
        best = None
        for i, u in enumerate(v):
            if best is None or (u == u and (v[best] != v[best] or u > v[best])):
                best = i
        mx = v[best]
        sh = [a(u - mx) for u in v]
        e = [a(math.exp(float(s))) if s == s else a(nan) for s in sh]
        total = e[0]
        for t in e[1:]:
            total = a(total + t)
        for m, ei, si in zip(members, e, sh):
            y[m] = a(si - a(math.log(float(total)))) if log else a(ei / total)
    return y


@pytest.mark.parametrize("shape,axes", [((3, 5), (1,)), ((2, 3, 4), (0, 2)), ((4, 2, 3), (1, 2)),
                                        ((7,), (0,)), ((2, 2, 2, 3), (0, 1, 2, 3))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_reference_matches_the_loop_oracle(shape, axes, dtype):
    x = (RNG.standard_normal(shape) * 4).astype(dtype)
    with np.errstate(all="ignore"):
        for log, op in ((False, "softmax"), (True, "log_softmax")):
            got = REGISTRY[op].reference({"axes": axes}, x)[0]
            if dtype == np.float64:  # NumPy's float64 exp is not libm's (§9.5: 4 ulps)
                assert_ulps(got, _oracle(x, axes, log), 4)
            else:
                assert_bits(got, _oracle(x, axes, log))


def test_the_oracle_can_fail():
    assert _oracle(f32([0, 0]), (1,), False).tolist() == [[0.5, 0.5]]
    assert not np.array_equal(_oracle(f32([0, 1]), (1,), False), f32([0.5, 0.5]))


# -- every target on random data within §17.1's bound ---------------------------------------------

def _bound(x: np.ndarray, axes: tuple[int, ...], y: np.ndarray, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    n = int(np.prod([x.shape[a] for a in axes]))
    d = x - x.max(axis=axes, keepdims=True)
    eps = 2.0 ** -52 if y.dtype == np.float64 else 2.0 ** -23
    if log:
        t = np.exp(d).sum(axis=axes, keepdims=True)
        b = eps * (2 * n + 12 + 2 * np.abs(d) + 5 * np.log(t))
    else:
        b = eps * (2 * n + 12 + np.abs(d)) * np.abs(y.astype(np.float64))
    if y.dtype == np.float16:
        b = b + 2.0 ** -9 * np.abs(y.astype(np.float64)) + 2.0 ** -24
    return b + 2.0 ** -126


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("axes", [(1,), (2,), (1, 2), (0, 2)])
def test_targets_agree_with_symbolic_batch(dtype, axes):
    x = (RNG.standard_normal((3, 4, 5)) * 3).astype(dtype)
    shape = ("N", 4, 5) if 0 not in axes else (3, 4, 5)
    g = graph(lambda x: {"s": ops.softmax(x, axes), "l": ops.log_softmax(x, axes)},
              {"x": (dtype, shape)})
    outs = run_targets(g, {"x": x})
    ref = outs["reference"]
    for t in ("numpy", "c"):
        for k in ("s", "l"):
            if t == "c" and dtype == "float64":
                assert_ulps(outs[t][k], ref[k], 4)  # libm exp/log vs NumPy's (§9.5)
            else:
                assert_bits(outs[t][k], ref[k])
    for k, log in (("s", False), ("l", True)):
        err = np.abs(outs["onnx"][k].astype(np.float64) - ref[k].astype(np.float64))
        assert (err <= _bound(x, axes, ref[k], log)).all(), (k, err.max())


def test_softmax_rows_sum_to_one_and_gradients_agree_across_targets():
    x = RNG.standard_normal((6, 10)).astype(np.float32)
    g = graph(lambda x: {"s": ops.softmax(x, (1,)), "l": ops.log_softmax(x, (1,))},
              {"x": ("float32", ("N", 10))})
    feeds = {"x": x, "grad_s": RNG.standard_normal((6, 10)).astype(np.float32),
             "grad_l": RNG.standard_normal((6, 10)).astype(np.float32)}
    outs = run_targets(gradc.grad(g, wrt=["x"]), feeds)
    np.testing.assert_allclose(outs["reference"]["s"].sum(axis=1), 1, rtol=1e-6)
    for t in ("numpy", "c"):
        assert_bits(outs[t]["grad_x"], outs["reference"]["grad_x"])
    np.testing.assert_allclose(outs["onnx"]["grad_x"], outs["reference"]["grad_x"],
                               rtol=1e-5, atol=1e-6)
