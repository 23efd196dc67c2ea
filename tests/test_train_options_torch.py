"""The training options of SPEC-transformers.md §29 against PyTorch: F.cross_entropy with
ignore_index on [N, T, V] logits, clip_grad_norm_, LambdaLR with transformers' schedule
functions, and a short AdamW + schedule + clipping trajectory of a token-level MLP."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.optimizers import clip_grad_norm, scheduled_learning_rate
from gradc.optim import AdamW, WarmupCosine, WarmupLinear
from helpers import assert_bits

torch = pytest.importorskip("torch")
F = torch.nn.functional
TARGETS = ("reference", "numpy", "c", "onnx")
SCHEDULES = ["warmup_linear", "warmup_cosine"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("class_axis", [-1, 2])
def test_token_cross_entropy_matches_torch(target, class_axis):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 6, 7)) * 2).astype(np.float32)
    labels = rng.integers(0, 7, (3, 6))
    labels[rng.random((3, 6)) < 0.3] = -100
    g = gradc.Graph("ce")
    xv, tv = g.input("x", "float32", x.shape), g.input("t", "int64", labels.shape)
    g.output(ops.softmax_cross_entropy(xv, tv, ignore_index=-100, class_axis=class_axis),
             "loss")
    dg = gradc.grad(g, wrt=["x"])
    out = gradc.compile(dg, target=target)(x=x, t=labels, **{dg.inputs[-1].name: np.float32(1)})
    xt = torch.tensor(x, requires_grad=True)
    want = F.cross_entropy(xt.reshape(-1, 7), torch.tensor(labels).reshape(-1),
                           ignore_index=-100)
    want.backward()
    loss, dx = (out[v.name] for v in dg.outputs)
    np.testing.assert_allclose(loss, want.item(), rtol=4 * 2.0 ** -23)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-8)


def test_t_ce_9_equals_torch_bit_for_bit():
    x = np.zeros((1, 2, 4), np.float32)
    labels = np.array([[1, -100]])
    xt = torch.tensor(x, requires_grad=True)
    want = F.cross_entropy(xt.movedim(2, 1), torch.tensor(labels), ignore_index=-100)
    want.backward()
    g = gradc.Graph("ce")
    g.output(ops.softmax_cross_entropy(g.input("x", "float32", x.shape),
                                       g.input("t", "int64", labels.shape), ignore_index=-100,
                                       class_axis=-1), "loss")
    dg = gradc.grad(g, wrt=["x"])
    out = gradc.compile(dg, target="c")(x=x, t=labels, **{dg.inputs[-1].name: np.float32(1)})
    loss, dx = (out[v.name] for v in dg.outputs)
    assert_bits(loss, want.detach().numpy())
    assert_bits(dx, xt.grad.numpy())


def _torch_clip(grads: list[np.ndarray], max_norm: float) -> list[np.ndarray]:
    ps = [torch.zeros(a.shape, dtype=torch.float32, requires_grad=True) for a in grads]
    for p, a in zip(ps, grads):
        p.grad = torch.tensor(a)
    torch.nn.utils.clip_grad_norm_(ps, max_norm)
    return [p.grad.numpy() for p in ps]


@pytest.mark.parametrize("grads, max_norm", [
    ([[3, 4], [[12]]], 26.0), ([[3, 4], [[12]]], 6.5), ([[3, 4], [[12]]], 13.0),
    ([[1, 1], [1, 1, 1], [0.5]], 1.0), ([[np.inf, 1], [2]], 1.0), ([[np.nan, 1], [2]], 1.0),
])
def test_clip_vectors_equal_torch_bit_for_bit(grads, max_norm):
    grads = [np.array(a, np.float32) for a in grads]
    g = gradc.Graph("clip")
    vs = [g.input(f"g{i}", "float32", a.shape) for i, a in enumerate(grads)]
    with g:
        for i, v in enumerate(clip_grad_norm(vs, max_norm)):
            g.output(v, f"c{i}")
    out = gradc.compile(g, target="c")(**{f"g{i}": a for i, a in enumerate(grads)})
    for i, want in enumerate(_torch_clip(grads, max_norm)):
        assert_bits(out[f"c{i}"], want, nan_payload=False)


def test_clip_random_gradients_agree_with_torch():
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(s).astype(np.float32) * 3 for s in [(17, 5), (40,), (3, 3)]]
    g = gradc.Graph("clip")
    vs = [g.input(f"g{i}", "float32", a.shape) for i, a in enumerate(grads)]
    with g:
        for i, v in enumerate(clip_grad_norm(vs, 1.5)):
            g.output(v, f"c{i}")
    out = gradc.compile(g, target="c")(**{f"g{i}": a for i, a in enumerate(grads)})
    for i, want in enumerate(_torch_clip(grads, 1.5)):  # torch's norm sums in lanes
        np.testing.assert_allclose(out[f"c{i}"], want, rtol=2e-6)


@pytest.mark.parametrize("kind", SCHEDULES)
def test_schedules_equal_lambdalr_with_transformers_functions(kind):
    transformers = pytest.importorskip("transformers")
    make = {"warmup_linear": transformers.get_linear_schedule_with_warmup,
            "warmup_cosine": transformers.get_cosine_schedule_with_warmup}[kind]
    lr = 0.5
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = make(opt, num_warmup_steps=3, num_training_steps=9)
    want = []
    for _ in range(14):  # past num_training_steps too
        want.append(opt.param_groups[0]["lr"])  # the lr of this update
        opt.step()
        sched.step()
    g = gradc.Graph("sched")
    step = g.input("step", "int64", (1,))
    with g:
        g.output(scheduled_learning_rate(step, lr, kind, 3, 9), "lr")
    exe = gradc.compile(g, target="c")
    got = [float(exe(step=np.array([k + 1], np.int64))["lr"]) for k in range(14)]
    cls = WarmupLinear if kind == "warmup_linear" else WarmupCosine
    assert [lr * cls(3, 9).factor(k) for k in range(14)] == want
    np.testing.assert_allclose(got, want, rtol=4 * 2.0 ** -52, atol=1e-16)


def token_mlp(w1: np.ndarray, w2: np.ndarray) -> gradc.Graph:
    """x [8, 4, 3] -> gemm(w1) -> relu -> gemm(w2) -> logits [8, 4, 5]."""
    g = gradc.Graph("tok")
    x = g.input("x", "float32", (8, 4, 3))
    p1, p2 = g.parameter("w1", w1), g.parameter("w2", w2)
    with g:
        h = ops.relu(ops.gemm(ops.reshape(x, (32, 3)), p1, trans_b=True))
        y = ops.reshape(ops.gemm(h, p2, trans_b=True), (8, 4, 5))
    g.output(y, "logits")
    return g


@pytest.mark.parametrize("kind", SCHEDULES)
@pytest.mark.parametrize("target", ["reference", "c"])
def test_adamw_schedule_clipping_trajectory_matches_torch(kind, target):
    transformers = pytest.importorskip("transformers")
    rng = np.random.default_rng(4)
    w1 = rng.standard_normal((16, 3)).astype(np.float32)
    w2 = (rng.standard_normal((5, 16)) * 0.5).astype(np.float32)
    steps, warm, total, lr = 30, 5, 25, 0.03  # lr a float32 value: the same lr on both sides
    cls = WarmupLinear if kind == "warmup_linear" else WarmupCosine
    tr = gradc.Trainer(token_mlp(w1, w2), AdamW(lr=lr, schedule=cls(warm, total)),
                       loss="cross_entropy", class_axis=-1, ignore_index=-100,
                       max_grad_norm=0.5, target=target)
    p1, p2 = (torch.tensor(w, requires_grad=True) for w in (w1, w2))
    opt = torch.optim.AdamW([p1, p2], lr=float(np.float32(lr)))
    make = {"warmup_linear": transformers.get_linear_schedule_with_warmup,
            "warmup_cosine": transformers.get_cosine_schedule_with_warmup}[kind]
    sched = make(opt, num_warmup_steps=warm, num_training_steps=total)
    worst = 0.0
    for k in range(steps):
        x = rng.standard_normal((8, 4, 3)).astype(np.float32)
        labels = rng.integers(0, 5, (8, 4))
        labels[rng.random((8, 4)) < 0.2] = -100
        got = tr.step(x=x, labels=labels)
        opt.zero_grad()
        logits = (torch.relu(torch.tensor(x).reshape(32, 3) @ p1.T) @ p2.T).reshape(8, 4, 5)
        loss = F.cross_entropy(logits.reshape(-1, 5), torch.tensor(labels).reshape(-1),
                               ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p1, p2], 0.5)
        opt.step()
        sched.step()
        assert got == pytest.approx(loss.item(), rel=1e-5), k
        for name, p in (("w1", p1), ("w2", p2)):
            d = np.abs(tr.parameters[name] - p.detach().numpy()).max()
            worst = max(worst, float(d / np.abs(p.detach().numpy()).max()))
    # float32 noise of two summation orders, carried through 30 Adam updates
    assert worst < 2e-5, worst
