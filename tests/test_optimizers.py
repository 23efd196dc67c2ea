"""Optimizer composites sgd, adam, adamw (SPEC-training.md §19.2-§19.3) against SPEC's vectors
on every target and against torch.optim over several steps."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from helpers import assert_bits, compile_for, cuda_targets, f32, run

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()


def i32(v: int) -> np.ndarray:
    return np.array([v], np.int32)


P, G1, G2 = f32(1, -2, 0.5, 4), f32(0.5, 1, -2, 0), f32(1, 1, 1, -1)
T_SGD = {  # T-SGD-1..3: (first step, second step, buffer after two steps)
    "dampening 0": ({}, f32(0.625, -2.25, 1.4375, 3.5), f32(-0.140625, -2.59375, 1.2265625, 3.3125),
                    f32(1.53125, 0.6875, 0.421875, 0.375)),
    "dampening 0.5": ({"dampening": 0.5}, f32(0.625, -2.25, 1.4375, 3.5),
                      f32(0.1484375, -2.484375, 1.56640625, 3.28125),
                      f32(0.953125, 0.46875, -0.2578125, 0.4375)),
    "nesterov": ({"nesterov": True}, f32(0.4375, -2.375, 1.90625, 3.25),
                 f32(-0.48828125, -2.7421875, 1.033203125, 3.265625),
                 f32(1.484375, 0.65625, 0.5390625, 0.3125)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(T_SGD))
def test_t_sgd(case, target):
    kw, want1, want2, want_buf = T_SGD[case]

    def step(p, g, b, t):
        return ops.sgd(p, g, 0.5, b, t, momentum=0.5, weight_decay=0.25, **kw)
    p1, b1 = run(step, P, G1, np.zeros(4, np.float32), i32(1), target=target)
    assert_bits(p1, want1)
    p2, b2 = run(step, p1, G2, b1, i32(2), target=target)
    assert_bits(p2, want2)
    assert_bits(b2, want_buf)


@pytest.mark.parametrize("target", TARGETS)
def test_t_adamw_1(target):
    x, g, z = f32(1, 2, -1, 0.5), f32(1, -3, 7, 0), np.zeros(4, np.float32)
    xo, mo, vo = run(lambda *a: ops.adamw(*a, 0.5, 0.5, 0.75, 1.0, 0.25), x, z, z, g, i32(1),
                     target=target)
    assert_bits(xo, f32(0.625, 2.125, -1.3125, 0.4375))
    assert_bits(mo, f32(0.5, -1.5, 3.5, 0))
    assert_bits(vo, f32(0.25, 2.25, 12.25, 0))
    (xa, _, _) = run(lambda *a: ops.adam(*a, 0.5, 0.5, 0.75, 1.0), x, z, z, g, i32(1),
                     target=target)
    assert_bits(xa, f32(0.75, 2.375, -1.4375, 0.5))


def test_sgd_without_momentum_returns_no_buffer():
    g = gradc.Graph("step")
    p, gr = g.input("p", "float32", (3,)), g.input("g", "float32", (3,))
    out, buf = ops.sgd(p, gr, 0.5)
    assert buf is None
    g.output(out, "p_out")
    got = gradc.compile(g, target="reference")(p=f32(1, 2, 3), g=f32(2, 2, 2))
    assert_bits(got["p_out"], f32(0, 1, 2))
    assert "sgd" not in str(g)  # a composite: only primitives are printed


def _torch_steps(torch, kind, kw, x, grads):
    p = torch.nn.Parameter(torch.tensor(x))
    opt = getattr(torch.optim, kind)([p], **kw)
    out = []
    for gr in grads:
        p.grad = torch.tensor(gr)
        opt.step()
        out.append(p.detach().numpy().copy())
    return out, opt.state[p]


def _graph(kind: str, dtype: str, shape, kw):
    g = gradc.Graph(kind)
    names = ("x", "m", "v", "g") if kind != "sgd" else ("x", "b", "g")
    vals = {n: g.input(n, dtype, shape) for n in names}
    t = g.input("t", "int64", ())
    if kind == "sgd":
        p, b = ops.sgd(vals["x"], vals["g"], kw["lr"], vals["b"], t,
                       **{k: v for k, v in kw.items() if k != "lr"})
        g.output(p, "x_out")
        g.output(b, "b_out")
    else:
        fn = ops.adam if kind == "adam" else ops.adamw
        out = fn(vals["x"], vals["m"], vals["v"], vals["g"], t, kw["lr"], kw["betas"][0],
                 kw["betas"][1], kw["eps"], kw["weight_decay"])
        for name, r in zip(("x_out", "m_out", "v_out"), out):
            g.output(r, name)
    return g


SGD_CASES = [dict(lr=0.1, momentum=0.9), dict(lr=0.05, momentum=0.9, dampening=0.3),
             dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
             dict(lr=0.1, momentum=0.5, dampening=0.5, weight_decay=0.1)]


@pytest.mark.parametrize("kw", SGD_CASES)
def test_sgd_matches_torch_over_steps(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    grads = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(6)]
    want, _ = _torch_steps(torch, "SGD", kw, x, grads)
    ex = gradc.compile(_graph("sgd", "float32", (3, 5), kw))
    cur, buf = x, np.zeros_like(x)
    for i, gr in enumerate(grads):
        out = ex(x=cur, b=buf, g=gr, t=np.array(i + 1, np.int64))
        cur, buf = out["x_out"], out["b_out"]
        np.testing.assert_allclose(cur, want[i], rtol=1e-6, atol=1e-7)


ADAM_CASES = [("adam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)),
              ("adam", dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
              ("adamw", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)),
              ("adamw", dict(lr=5e-2, betas=(0.5, 0.75), eps=1e-3, weight_decay=0.3))]


@pytest.mark.parametrize("kind, kw", ADAM_CASES)
def test_adam_matches_torch_over_steps(kind, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(20)]
    want, state = _torch_steps(torch, "Adam" if kind == "adam" else "AdamW", kw, x, grads)
    ex = gradc.compile(_graph(kind, "float32", (4, 3), kw))
    cur, m, v = x, np.zeros_like(x), np.zeros_like(x)
    for i, gr in enumerate(grads):
        out = ex(x=cur, m=m, v=v, g=gr, t=np.array(i + 1, np.int64))
        cur, m, v = out["x_out"], out["m_out"], out["v_out"]
        np.testing.assert_allclose(cur, want[i], rtol=2e-6, atol=1e-6)  # float32 noise
    # gradc's betas are float32 values (§9.3): 1 - f32(0.999) is 1.3e-5 away from PyTorch's
    # 1 - 0.999 in double, which the bias correction cancels in the parameters, not in V
    np.testing.assert_allclose(m, state["exp_avg"].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(v, state["exp_avg_sq"].numpy(), rtol=3e-5, atol=1e-9)


@pytest.mark.parametrize("kind, dtype", [("sgd", "float16"), ("sgd", "float64"),
                                         ("adam", "float32"), ("adam", "float64"),
                                         ("adamw", "float16")])
def test_targets_agree_with_a_symbolic_batch(kind, dtype):
    kw = dict(lr=0.01, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.05) if kind != "sgd" else \
        dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.05)
    g = _graph(kind, dtype, ("N", 3), kw)
    rng = np.random.default_rng(5)
    n = 3
    feeds = {v.name: rng.standard_normal((n, 3)).astype(dtype) for v in g.inputs[:-1]}
    if "v" in feeds:
        feeds["v"] = np.abs(feeds["v"])
    feeds["t"] = np.array(7, np.int64)
    want = gradc.compile(g, target="reference")(**feeds)
    for t in TARGETS[1:]:
        got = compile_for(g, t)(**feeds)
        for name, w in want.items():
            if kind == "sgd":  # exact ops only
                assert_bits(got[name], w)
            else:  # exp and log of the step (transcendental, §9.5): a few ulps
                ulp = np.spacing(np.abs(w).astype(dtype)).astype(np.float64)
                assert (np.abs(got[name].astype(np.float64) - w) <= 4 * ulp).all(), (t, name)


def _sgd_call(**kw):
    g = gradc.Graph("g")
    p, gr = g.input("p", "float32", (4,)), g.input("g", "float32", (4,))
    args = {"learning_rate": 0.1} | kw
    return ops.sgd(p, gr, **args)


@pytest.mark.parametrize("kw, field", [
    ({"momentum": 0.9}, "momentum_buffer"),  # V-44
    ({"learning_rate": -0.1}, "learning_rate"),
    ({"momentum": -0.5}, "momentum"),
    ({"weight_decay": float("nan")}, "weight_decay"),
    ({"nesterov": True}, "nesterov"),
    ({"nesterov": 1}, "nesterov"),
])
def test_sgd_rejected_arguments(kw, field):
    with pytest.raises(gradc.VerifyError, match=f"^sgd: {field}: expected"):
        _sgd_call(**kw)


def test_sgd_dampening_needs_the_step():
    g = gradc.Graph("g")
    p, gr, b = (g.input(n, "float32", (4,)) for n in ("p", "g", "b"))
    with pytest.raises(gradc.VerifyError, match="^sgd: training_step: expected"):
        ops.sgd(p, gr, 0.1, b, momentum=0.9, dampening=0.1)
    with pytest.raises(gradc.VerifyError, match="^sgd: momentum_buffer.shape: expected"):
        ops.sgd(p, gr, 0.1, g.input("b2", "float32", (5,)), momentum=0.9)


@pytest.mark.parametrize("name", ["adam", "adamw"])
@pytest.mark.parametrize("kw, field", [
    ({"beta2": 1.0}, "beta2"), ({"beta1": 1.5}, "beta1"), ({"epsilon": -1.0}, "epsilon"),
    ({"weight_decay": -1.0}, "weight_decay"), ({"step": ("float32", (1,))}, "training_step.dtype"),
    ({"step": ("int32", (2,))}, "training_step.shape"), ({"m": ("float32", (3,))},
                                                         "input_first_moment.shape"),
])
def test_adam_rejected_arguments(name, kw, field):
    kw = dict(kw)
    g = gradc.Graph("g")
    x, v, gr = (g.input(n, "float32", (4,)) for n in ("x", "v", "g"))
    m = g.input("m", *kw.pop("m", ("float32", (4,))))
    t = g.input("t", *kw.pop("step", ("int32", (1,))))
    with pytest.raises(gradc.VerifyError, match=f"^{name}: {field}: expected"):
        getattr(ops, name)(x, m, v, gr, t, 0.1, **kw)


def test_scalar_parameters_stay_scalars():
    """Rank-0 parameters: every constant the composites make is rank 0 (no broadcast to (1,))."""
    g = gradc.Graph("scalars")
    x, m, v, gr = (g.input(n, "float32", ()) for n in "xmvg")
    t = g.input("t", "int64", (1,))
    outs = list(ops.adamw(x, m, v, gr, t, 0.1)) + list(
        ops.sgd(x, gr, 0.1, m, t, momentum=0.9, dampening=0.5, weight_decay=0.1))
    assert all(o.type.shape == () for o in outs)
    for i, o in enumerate(outs):
        g.output(o, f"y{i}")
    feeds = {"x": np.float32(1), "m": np.float32(0.5), "v": np.float32(0.25),
             "g": np.float32(-2), "t": np.array([3], np.int64)}
    for target in TARGETS:
        out = compile_for(g, target)(**feeds)
        assert all(out[f"y{i}"].shape == () for i in range(5)), target
