"""adam_optimizer (SPEC-training.md §19.1): DirectML's Adam step, bit for bit on every target."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from helpers import assert_bits, compile_for, cuda_targets, f32, run

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
ACC = {np.float16: np.float32, np.float32: np.float32, np.float64: np.float64}


def adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    return lambda x, m, v, g, t: ops.adam_optimizer(x, m, v, g, t, lr, b1, b2, eps)


def oracle(x, m, v, g, t, lr, b1, b2, eps):
    """SPEC §19.1's pseudocode, one element at a time."""
    a = ACC[x.dtype.type]
    lr, b1, b2, eps = (float(np.float32(h)) for h in (lr, b1, b2, eps))
    t = int(t.reshape(-1)[0])
    corr = math.sqrt(1.0 - float(b2) ** t) / (1.0 - float(b1) ** t)
    step = a(a(lr) * a(corr))
    c1, c2 = a(1.0 - float(b1)), a(1.0 - float(b2))
    xo, mo, vo = (np.empty(x.shape, x.dtype) for _ in range(3))
    for i in np.ndindex(*x.shape):
        gi = a(g[i])
        mi = a(a(a(b1) * a(m[i])) + a(c1 * gi))
        vi = a(a(a(b2) * a(v[i])) + a(c2 * a(gi * gi)))
        u = a(a(step * mi) / a(a(np.sqrt(vi)) + a(eps)))
        xo[i], mo[i], vo[i] = a(a(x[i]) - u), mi, vi
    return [xo, mo, vo]


T_ADAM_1 = (f32(1, 2, -1, 0.5), f32(0, 0, 0, 0), f32(0, 0, 0, 0), f32(1, -3, 7, 0))


@pytest.mark.parametrize("target", TARGETS)
def test_t_adam_1_and_2(target):
    x, m, v, g = T_ADAM_1
    out = run(adam(0.5, 0.5, 0.75, 0.5), x, m, v, g, np.array([1], np.int32), target=target)
    assert_bits(out[0], f32(0.75, 2.375, -1.4375, 0.5))
    assert_bits(out[1], f32(0.5, -1.5, 3.5, 0))
    assert_bits(out[2], f32(0.25, 2.25, 12.25, 0))
    out2 = run(adam(0.5, 0.5, 0.75, 1e-8), out[0], out[1], out[2], f32(2, 1, -1, 4),
               np.array(2, np.uint32), target=target)
    assert_bits(out2[0], f32(0.24418586492538452, 2.4541985988616943, -1.616923451423645,
                             0.05904144048690796))
    assert_bits(out2[1], f32(1.25, -0.25, 1.25, 2))
    assert_bits(out2[2], f32(1.1875, 1.9375, 9.4375, 4))


@settings(max_examples=25)
@given(st.sampled_from([np.float16, np.float32, np.float64]), st.integers(0, 2 ** 31),
       st.integers(1, 3000), st.sampled_from([np.int32, np.int64, np.uint32]))
def test_reference_matches_the_loop_oracle(dtype, seed, step, step_dtype):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 4, rng.integers(1, 4)))
    x, m, g = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
    v = np.abs(rng.standard_normal(shape)).astype(dtype)
    lr, b1, b2, eps = 10 ** rng.uniform(-4, 0), rng.uniform(0, 0.99), rng.uniform(0.5, 0.9999), \
        10 ** rng.uniform(-9, -1)
    t = np.array([step], step_dtype)
    got = run(adam(lr, b1, b2, eps), x, m, v, g, t)
    for a, b in zip(got, oracle(x, m, v, g, t, lr, b1, b2, eps)):
        assert_bits(a, b)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_targets_agree_with_a_symbolic_batch(dtype):
    g = gradc.Graph("adam")
    x, m, v, gr = (g.input(n, dtype, ("N", 3, 5)) for n in ("x", "m", "v", "g"))
    t = g.input("t", "int64", (1, 1))
    for i, r in enumerate(ops.adam_optimizer(x, m, v, gr, t, 1e-3, 0.9, 0.999, 1e-8)):
        g.output(r, f"y{i}")
    rng = np.random.default_rng(7)
    exes = {k: compile_for(g, k) for k in TARGETS}
    for n, step in ((1, 1), (2, 10), (4, 12345)):
        feeds = {k: rng.standard_normal((n, 3, 5)).astype(dtype) for k in ("x", "m", "g")}
        feeds["v"] = np.abs(rng.standard_normal((n, 3, 5))).astype(dtype)
        feeds["v"][0, 0, 0] = -0.0  # sqrt(-0) + 0 and -0 moments are kept exactly
        feeds["t"] = np.array([[step]], np.int64)
        want = exes["reference"](**feeds)
        for k in TARGETS[1:]:
            got = exes[k](**feeds)
            for name in want:
                assert_bits(got[name], want[name])


def test_step_zero_gives_nan_parameters():
    x, m, v, g = T_ADAM_1
    for target in TARGETS:
        out = run(adam(0.5, 0.5, 0.75, 0.5), x, m, v, g, np.array([0], np.int32), target=target)
        assert np.isnan(out[0]).all() and not np.isnan(out[1]).any(), target


def test_equals_pytorch_adam_with_scaled_epsilon():
    torch = pytest.importorskip("torch")
    x, m, v, g = T_ADAM_1
    p = torch.nn.Parameter(torch.tensor(x))
    opt = torch.optim.Adam([p], lr=0.5, betas=(0.5, 0.75), eps=1.0)
    p.grad = torch.tensor(g)
    opt.step()
    out = run(adam(0.5, 0.5, 0.75, 0.5), x, m, v, g, np.array([1], np.int32))
    assert_bits(out[0], p.detach().numpy())  # T-ADAM-1: 0.5 = 1.0 * sqrt(1 - 0.75)
    # step 2 from the same state: DirectML's epsilon is PyTorch's times sqrt(1 - beta2**T)
    eps_t = 1e-3
    opt.param_groups[0]["eps"] = eps_t
    g2 = f32(2, 1, -1, 4)
    p.grad = torch.tensor(g2)
    opt.step()
    eps = eps_t * math.sqrt(1 - 0.75 ** 2)
    out2 = run(adam(0.5, 0.5, 0.75, eps), out[0], out[1], out[2], g2, np.array([2], np.int32))
    got_update = out[0].astype(np.float64) - out2[0]
    torch_update = out[0].astype(np.float64) - p.detach().numpy()
    np.testing.assert_allclose(got_update, torch_update, rtol=4 * 2 ** -23)  # within 4 ulps
    state = opt.state[p]
    np.testing.assert_array_equal(out2[1], state["exp_avg"].numpy())
    np.testing.assert_array_equal(out2[2], state["exp_avg_sq"].numpy())


def test_not_differentiated():
    g = gradc.Graph("adam")
    x, m, v, gr = (g.input(n, "float32", (4,)) for n in ("x", "m", "v", "g"))
    t = g.input("t", "int32", ())
    xo, mo, vo = ops.adam_optimizer(x, m, v, gr, t, 0.1)
    g.output(xo, "x_out")
    assert gradc.parse(str(g)) == g
    dg = gradc.grad(g)
    out = gradc.compile(dg, target="reference")(
        x=f32(1, 2, 3, 4), m=f32(0, 0, 0, 0), v=f32(0, 0, 0, 0), g=f32(1, 1, 1, 1),
        t=np.array(1, np.int32), grad_x_out=f32(1, 1, 1, 1))
    for name in ("grad_x", "grad_m", "grad_v", "grad_g"):
        assert_bits(out[name], f32(0, 0, 0, 0))


def _call(g, step_type=("int32", (1,)), x_type=("float32", (4,)), m_type=None, **kw):
    x = g.input("x", *x_type)
    m = g.input("m", *(m_type or x_type))
    v, gr = (g.input(n, *x_type) for n in ("v", "g"))
    t = g.input("t", *step_type)
    kw.setdefault("learning_rate", 0.1)
    return ops.adam_optimizer(x, m, v, gr, t, **kw)


@pytest.mark.parametrize("kw, field", [
    ({"step_type": ("float32", (1,))}, "training_step.dtype"),  # V-40
    ({"beta2": 1.0}, "beta2"),  # V-41
    ({"beta1": -0.1}, "beta1"),
    ({"epsilon": -1e-8}, "epsilon"),
    ({"learning_rate": 1e39}, "learning_rate"),
    ({"learning_rate": "fast"}, "learning_rate"),
    ({"step_type": ("int32", (2,))}, "training_step.shape"),
    ({"x_type": ("int32", (4,))}, "input_parameters.dtype"),
    ({"x_type": ("float32", ())}, "input_parameters.rank"),
    ({"m_type": ("float64", (4,))}, "input_first_moment.dtype"),
    ({"m_type": ("float32", (5,))}, "input_first_moment.shape"),
])
def test_rejected_arguments(kw, field):
    with pytest.raises(gradc.VerifyError, match=f"adam_optimizer: {field}: expected"):
        _call(gradc.Graph("g"), **kw)
