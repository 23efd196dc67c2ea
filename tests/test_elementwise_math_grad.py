"""SPEC-training.md §16 gradients (float64 finite differences, PyTorch autograd) and a slow
loop oracle written from §16 against the reference on random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from helpers import assert_bits
from test_elementwise_math_support import TARGETS, assert_ulps, graph, run_targets

UNARY = {
    "exp": ops.exp, "log": ops.log, "sqrt": ops.sqrt, "pow": lambda x: ops.pow(x, 2.5),
    "pow0": lambda x: ops.pow(x, 0), "sigmoid": ops.sigmoid, "tanh": ops.tanh,
    "leaky_relu": lambda x: ops.leaky_relu(x, 0.2),
}
BINARY = {"div": ops.div, "maximum": ops.maximum, "minimum": ops.minimum,
          "where": lambda a, b: ops.where(ops.greater(a, ops.neg(b)), a, b)}


def _fd(fn, arrays: dict, h: float = 1e-6) -> None:
    """Central differences of <cotangent, fn(...)> against gradc.grad in float64."""
    g = graph(lambda **v: {"y": fn(*v.values())},
              {k: ("float64", a.shape) for k, a in arrays.items()})
    rng = np.random.default_rng(3)
    out_shape = gradc.compile(g, target="reference", passes=None)(**arrays)["y"].shape
    cot = rng.standard_normal(out_shape)
    grads = gradc.compile(gradc.grad(g), target="reference", passes=None)(**arrays, grad_y=cot)
    fwd = gradc.compile(g, target="reference", passes=None)
    for k, a in arrays.items():
        num = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            plus, minus = a.copy(), a.copy()
            plus[i] += h
            minus[i] -= h
            fp = np.sum(fwd(**{**arrays, k: plus})["y"] * cot)
            fm = np.sum(fwd(**{**arrays, k: minus})["y"] * cot)
            num[i] = (fp - fm) / (2 * h)
        np.testing.assert_allclose(grads[f"grad_{k}"], num, rtol=1e-6, atol=1e-7, err_msg=k)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients_match_finite_differences(name):
    x = np.array([[0.3, 1.7, 2.2], [0.9, 0.05, 3.1]])
    if name in ("sigmoid", "tanh", "leaky_relu"):
        x = x - 1.234  # both signs, away from the kink of leaky_relu
    _fd(UNARY[name], {"x": x})


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradients_match_finite_differences_with_broadcasting(name):
    a = np.array([[0.3, -1.7, 2.2], [0.9, 0.5, -3.1]])
    b = np.array([[1.1, 0.6, -2.4]])
    _fd(BINARY[name], {"a": a, "b": b})


def test_gradients_match_pytorch_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    b = (rng.standard_normal((4,)) + 3).astype(np.float32)
    x[0, :2] = b[:2]  # ties: the whole gradient goes to lhs (torch.fmax agrees)

    def fn(x, b):
        s = ops.add(ops.sigmoid(x), ops.tanh(x))
        m = ops.mul(ops.maximum(x, b), ops.minimum(b, x))
        p = ops.pow(ops.sqrt(ops.exp(x)), 1.5)
        q = ops.div(ops.log(b), ops.add(b, ops.leaky_relu(x, 0.1)))
        return {"y": ops.add(ops.add(s, m), ops.add(p, q))}
    g = graph(fn, {"x": ("float32", (3, 4)), "b": ("float32", (4,))})
    dy = rng.standard_normal((3, 4)).astype(np.float32)
    outs = run_targets(gradc.grad(g), {"x": x, "b": b, "grad_y": dy})
    tx, tb = torch.tensor(x, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty = (torch.sigmoid(tx) + torch.tanh(tx) + torch.fmax(tx, tb) * torch.fmin(tb, tx)
          + torch.sqrt(torch.exp(tx)) ** 1.5
          + torch.log(tb) / (tb + torch.nn.functional.leaky_relu(tx, 0.1)))
    ty.backward(torch.tensor(dy))
    for t in TARGETS:
        np.testing.assert_allclose(outs[t]["y"], ty.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outs[t]["grad_x"], tx.grad.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(outs[t]["grad_b"], tb.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_comparison_results_carry_no_gradient():
    g = graph(lambda a, b: {"y": ops.where(ops.less(a, b), a, b), "m": ops.equal(a, b)},
              {"a": ("float32", (3,)), "b": ("float32", (3,))})
    t = gradc.grad(g)
    assert "grad_m" not in [v.name for v in t.inputs]
    assert not any(n.op in ("greater_equal_grad",) for n in t.nodes)


# -- the slow loop oracle, from SPEC-training §16 ---------------------------------------------

def _f64(fn, x: float) -> float:
    try:
        return fn(x)
    except (OverflowError, ValueError):
        return math.nan


def _oracle(op: str, a: float, b: float, alpha: float, e: float) -> float | bool:
    """One element, as §16 words it (float64 for the transcendental steps)."""
    if op == "div":
        return math.nan if b == 0 and (a == 0 or a != a) else (
            math.copysign(math.inf, a) * math.copysign(1, b) if b == 0 else a / b)
    if op == "exp":
        return math.inf if a > 709 else _f64(math.exp, a)
    if op == "log":
        return -math.inf if a == 0 else _f64(math.log, a)
    if op == "sqrt":
        return a if a == 0 else _f64(math.sqrt, a)
    if op == "pow":
        return _f64(lambda v: math.pow(v, e), a)
    if op == "sigmoid":
        return 0.0 if a < -745 else 1.0 / (1.0 + math.exp(-a)) if a == a else a
    if op == "tanh":
        return math.tanh(a)
    if op == "leaky_relu":
        return a if a >= 0 else alpha * a
    if op in ("maximum", "minimum"):
        take = (a >= b if op == "maximum" else a <= b) or b != b
        return a if take else b
    return {"greater": a > b, "less": a < b, "equal": a == b, "greater_equal": a >= b,
            "less_equal": a <= b}[op]


OPS = ("div", "exp", "log", "sqrt", "pow", "sigmoid", "tanh", "leaky_relu", "maximum",
       "minimum", "greater", "less", "equal", "greater_equal", "less_equal")
SPECIAL = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e-40, 0.5, 100.0, -800.0]


@settings(max_examples=30)
@given(st.sampled_from(OPS), st.sampled_from(["float32", "float64", "float16"]),
       st.lists(st.one_of(st.sampled_from(SPECIAL), st.floats(-50, 50)), min_size=6,
                max_size=6), st.integers(0, 2 ** 31))
def test_reference_matches_the_loop_oracle(op, dtype, vals, seed):
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        a = np.array(vals, dtype).reshape(2, 3)
        b = np.array(rng.choice(SPECIAL + vals, 3), dtype)
    alpha, e = float(np.float32(0.1)), float(np.float32(1.5))
    fn = {"pow": lambda x, y: ops.pow(x, 1.5), "leaky_relu": lambda x, y: ops.leaky_relu(x, 0.1)
          }.get(op, getattr(ops, op))
    if op in ("exp", "log", "sqrt", "sigmoid", "tanh"):
        fn = lambda x, y, f=getattr(ops, op): f(x)  # noqa: E731
    g = graph(lambda p, q: {"y": fn(p, q)}, {"p": (dtype, (2, 3)), "q": (dtype, (3,))})
    got = gradc.compile(g, target="reference", passes=None)(p=a, q=b)["y"]
    w = np.empty((2, 3), got.dtype)
    for i, j in np.ndindex(2, 3):
        x, y = float(a[i, j]), float(b[j])
        if op in ("div", "sqrt", "leaky_relu") and dtype == "float16":
            x, y = float(np.float32(x)), float(np.float32(y))
            alpha_c = float(np.float32(alpha))
            r = _oracle(op, x, y, alpha_c, e)
            r = float(np.float32(r))  # the float32 step, then rounded to float16 below
        else:
            r = _oracle(op, x, y, alpha, e)
            if op in ("div", "leaky_relu") and dtype == "float32":
                r = float(np.float32(r)) if not isinstance(r, bool) else r
        with np.errstate(all="ignore"):
            w[i, j] = r
    if op in ("exp", "log", "pow", "sigmoid", "tanh"):
        assert_ulps(got, w, 1 if dtype == "float16" else 4)
    elif op in ("maximum", "minimum"):
        assert_bits(got, w)  # copies of operands: NaN payloads too
    else:
        assert_bits(got, w, nan_payload=False)
