"""Training options of SPEC-transformers.md §29 on every target: cross entropy with a class axis
and ignore_index (T-CE-9..12), gradient clipping (T-CLIP-1..4), learning-rate schedules
(T-SCH-1..4), parameter patterns (T-PAT-1) and the rejected arguments V-65..V-70."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.optimizers import clip_grad_norm, scheduled_learning_rate
from gradc.optim import SGD, AdamW, WarmupCosine, WarmupLinear
from helpers import assert_bits, f32

TARGETS = ("reference", "numpy", "c", "onnx")
LN4 = np.float32(1.3862943649291992)


def run(g: gradc.Graph, target: str, **feeds: np.ndarray) -> list[np.ndarray]:
    """The outputs of ``g`` on ``target``, in order."""
    out = gradc.compile(g, target=target)(**feeds)
    return [out[v.name] for v in g.outputs]


# -- T-CE-9..12: cross entropy on [N, T, V] with class_axis and ignore_index ------------------

T_CE_10_X = f32([[1, 2, 3], [0, 0, 0], [3, 2, 1]], [[0.5, -1, 2], [1, 1, 0], [-2, 0, 2]])
T_CE_10_DX = f32(
    [[0.022507645189762115, 0.06118212267756462, -0.08368976414203644],
     [-0.1666666716337204, 0.0833333283662796, 0.0833333283662796], [0, 0, 0]],
    [[0.043822597712278366, -0.24022185802459717, 0.1963992565870285], [0, 0, 0],
     [0.003969060722738504, 0.029327604919672012, -0.03329665958881378]])
T_CE_9_DX = f32([[[0.25, -0.75, 0.25, 0.25], [0, 0, 0, 0]]]).reshape(1, 2, 4)
CE = {  # name: (kwargs, scores, labels, loss, dscores, exact on every target)
    "T-CE-9": (dict(ignore_index=-100, class_axis=-1), np.zeros((1, 2, 4), np.float32),
               [[1, -100]], LN4, T_CE_9_DX, True),
    "T-CE-10": (dict(class_axis=2), T_CE_10_X, [[2, 0, -100], [1, -100, 2]],
                np.float32(1.2226152420043945), T_CE_10_DX, False),
    "T-CE-11": (dict(ignore_index=-100, class_axis=-1), np.zeros((2, 4), np.float32),
                [-100, -100], np.float32(np.nan), np.zeros((2, 4), np.float32), True),
    "T-CE-12": (dict(class_axis=-1), np.zeros((1, 2, 4), np.float32), [[1, -100]], LN4,
                T_CE_9_DX, True),
}


def ce_grad_graph(kw: dict, shape: tuple, lab_shape: tuple) -> gradc.Graph:
    g = gradc.Graph("ce")
    x = g.input("x", "float32", shape)
    t = g.input("t", "int64", lab_shape)
    g.output(ops.softmax_cross_entropy(x, t, **kw), "loss")
    return gradc.grad(g, wrt=["x"])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CE))
def test_t_ce_class_axis_vectors(name, target):
    kw, x, lab, loss, dx, exact = CE[name]
    lab = np.array(lab, np.int64)
    dg = ce_grad_graph(kw, x.shape, lab.shape)
    seed = dg.inputs[-1]  # the loss's cotangent
    got_loss, got_dx = run(dg, target, x=x, t=lab, **{seed.name: np.ones((), np.float32)})
    if exact or target == "reference":
        assert_bits(got_loss, np.asarray(loss), nan_payload=False)
        assert_bits(got_dx, dx)
    else:  # log_softmax's exp and log: a few ulps (SPEC.md §1.6)
        np.testing.assert_allclose(got_loss, loss, rtol=4e-7)
        np.testing.assert_allclose(got_dx, dx, rtol=1e-6, atol=1e-8)


def test_nll_class_axis_equals_moving_the_axis_to_1():
    """negative_log_likelihood with class_axis c == the classic form on the moved axes."""
    rng = np.random.default_rng(0)
    logp = rng.standard_normal((2, 3, 5)).astype(np.float32)
    lab = rng.integers(-1, 5, (2, 3)).astype(np.int64)
    w = rng.random(5).astype(np.float32)
    for red in ("none", "sum", "mean"):
        a = gradc.Graph("a")
        x, t, wv = a.input("x", "float32", (2, 3, 5)), a.input("t", "int64", (2, 3)), \
            a.input("w", "float32", (5,))
        a.output(ops.negative_log_likelihood(x, t, wv, reduction=red, ignore_index=2,
                                             class_axis=-1), "y")
        b = gradc.Graph("b")
        x, t, wv = b.input("x", "float32", (2, 5, 3)), b.input("t", "int64", (2, 3)), \
            b.input("w", "float32", (5,))
        b.output(ops.negative_log_likelihood(x, t, wv, reduction=red, ignore_index=2), "y")
        got = run(a, "reference", x=logp, t=lab, w=w)[0]
        want = run(b, "reference", x=np.ascontiguousarray(logp.transpose(0, 2, 1)), t=lab,
                   w=w)[0]
        assert_bits(got, want)


# -- V-65..V-70 ------------------------------------------------------------------------------

def _ce(scores_shape, labels_shape, **kw):
    g = gradc.Graph("v")
    with g:
        return ops.softmax_cross_entropy(g.input("s", "float32", scores_shape),
                                         g.input("t", "int64", labels_shape), **kw)


def _mlp() -> gradc.Graph:
    g = gradc.Graph("m")
    x = g.input("x", "float32", ("N", 3))
    w = g.parameter("h.0.w", np.ones((4, 3), np.float32))
    with g:
        y = ops.gemm(x, w, trans_b=True)
    g.output(y, "y")
    return g


@pytest.mark.parametrize("vid, call, field", [
    ("V-65", lambda: _ce((2, 3, 5), (2, 3), class_axis=3), "softmax_cross_entropy: class_axis:"),
    ("V-66", lambda: _ce((2, 3, 5), (2, 5), class_axis=-1),
     "softmax_cross_entropy: labels.shape:"),
    ("V-67", lambda: gradc.training_step(_mlp(), AdamW(), loss="cross_entropy",
                                         max_grad_norm=0.0), "training_step: max_grad_norm:"),
    ("V-68", lambda: gradc.training_step(_mlp(), AdamW(), loss="cross_entropy",
                                         frozen=["H.0.*"]), "training_step: frozen[0]:"),
    ("V-69", lambda: WarmupCosine(warmup_steps=10, total_steps=5), "WarmupCosine: total_steps:"),
    ("V-70", lambda: WarmupLinear(warmup_steps=-1, total_steps=5),
     "WarmupLinear: warmup_steps:"),
])
def test_v65_to_v70_name_the_field(vid, call, field):
    with pytest.raises(gradc.VerifyError) as e:
        call()
    assert str(e.value).startswith(field), (vid, str(e.value))


def test_v66_names_the_class_axis():
    with pytest.raises(gradc.VerifyError, match=r"scores.shape without the class axis 2"):
        _ce((2, 3, 5), (2, 5), class_axis=-1)


# -- T-CLIP-1..4: clip_grad_norm_ --------------------------------------------------------------

def clip_graph(shapes: list[tuple], max_norm: float, dtypes=None) -> gradc.Graph:
    g = gradc.Graph("clip")
    dtypes = dtypes or ["float32"] * len(shapes)
    gs = [g.input(f"g{i}", dt, s) for i, (s, dt) in enumerate(zip(shapes, dtypes))]
    with g:
        out = clip_grad_norm(gs, max_norm)
    for i, v in enumerate(out):
        g.output(v, f"c{i}")
    return g


COEF2A = np.float32(0.49999996066093445)
COEF3 = np.float32(0.4364355802536011)
CLIP = {  # name: (gradients, max_norm, clipped)
    "T-CLIP-1": ([f32(3, 4), f32([12])], 26.0, [f32(3, 4), f32([12])]),
    "T-CLIP-2a": ([f32(3, 4), f32([12])], 6.5,
                  [f32(1.4999998807907104, 1.9999998426437378), f32([5.999999523162842])]),
    "T-CLIP-2b": ([f32(3, 4), f32([12])], 13.0,
                  [f32(2.999999761581421, 3.999999761581421), f32([11.999999046325684])]),
    "T-CLIP-3": ([f32(1, 1), f32(1, 1, 1), f32(0.5)], 1.0,
                 [f32(COEF3, COEF3), f32(COEF3, COEF3, COEF3), f32(0.5 * COEF3)]),
    "T-CLIP-4a": ([f32(np.inf, 1), f32(2)], 1.0, [f32(np.nan, 0), f32(0)]),
    "T-CLIP-4b": ([f32(np.nan, 1), f32(2)], 1.0, [f32(np.nan, np.nan), f32(np.nan)]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CLIP))
def test_t_clip_vectors_bit_for_bit(name, target):
    grads, max_norm, want = CLIP[name]
    if name.startswith("T-CLIP-1") or name.startswith("T-CLIP-2"):
        grads = [grads[0], grads[1].reshape(1, 1)]
        want = [want[0], want[1].reshape(1, 1)]
    g = clip_graph([a.shape for a in grads], max_norm)
    got = run(g, target, **{f"g{i}": a for i, a in enumerate(grads)})
    for a, b in zip(got, want):
        assert_bits(a, b, nan_payload=False)


def slow_clip(grads: list[np.ndarray], max_norm: float) -> list[np.ndarray]:
    """SPEC-transformers §29.2 by hand: row-major sums in ACC (np.cumsum is sequential)."""
    acc = {np.float16: np.float32, np.float32: np.float32, np.float64: np.float64}
    width = [np.float16, np.float32, np.float64]
    t = max((a.dtype.type for a in grads), key=width.index)
    norms = []
    for a in grads:
        c = a.astype(acc[a.dtype.type]).reshape(-1)
        n = np.sqrt(np.cumsum(c * c, dtype=c.dtype)[-1]).astype(a.dtype).astype(t)
        norms.append(n)
    v = np.array(norms, t).astype(acc[t])
    total = np.sqrt(np.cumsum(v * v, dtype=v.dtype)[-1]).astype(t)
    coef = (t(1) / (total + t(1e-6))) * t(np.float32(max_norm))
    coef = t(1) if coef > 1 else coef
    return [(a * coef.astype(a.dtype)).astype(a.dtype) for a in grads]


@pytest.mark.parametrize("target", TARGETS)
def test_clip_mixed_dtypes_matches_the_slow_form(target):
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal((3, 5)).astype(np.float16),
             (rng.standard_normal(7) * 10).astype(np.float32),
             rng.standard_normal((2, 2)).astype(np.float64)]
    g = clip_graph([a.shape for a in grads], 2.5, [a.dtype.name for a in grads])
    got = run(g, target, **{f"g{i}": a for i, a in enumerate(grads)})
    for a, b in zip(got, slow_clip(grads, 2.5)):
        assert_bits(a, b)


@pytest.mark.parametrize("target", TARGETS)
def test_step_clips_before_the_optimizer(target):
    """training_step(max_grad_norm=6.5) on loss = sum(p1 * g1) + sum(p2 * g2): the gradients
    are g1, g2; SGD(lr=1) from zeros gives -clipped, T-CLIP-2's numbers."""
    g = gradc.Graph("lin")
    x1, x2 = g.input("g1", "float32", (2,)), g.input("g2", "float32", (1, 1))
    p1 = g.parameter("p1", np.zeros(2, np.float32))
    p2 = g.parameter("p2", np.zeros((1, 1), np.float32))
    with g:
        loss = ops.add(ops.reduce_sum(ops.mul(p1, x1)), ops.reduce_sum(ops.mul(p2, x2)))
    g.output(loss, "loss")
    tr = gradc.Trainer(g, SGD(1.0), max_grad_norm=6.5, target=target)
    tr.step(g1=f32(3, 4), g2=np.array([[12]], np.float32))
    np.testing.assert_array_equal(-tr.parameters["p1"], CLIP["T-CLIP-2a"][2][0])
    np.testing.assert_array_equal(-tr.parameters["p2"], CLIP["T-CLIP-2a"][2][1].reshape(1, 1))


def test_a_norm_past_float16_rounds_to_inf_without_a_warning():
    """fuzz/regressions/onnx: max_grad_norm=1e10 with float16 parameters: the constant rounds
    to inf (§9.3; the coefficient then clamps to 1, no clipping, as PyTorch's float16
    arithmetic gives) and NumPy's overflow warning no longer escapes from the builder."""
    import warnings

    g = gradc.Graph("h")
    x = g.input("x", "float16", (2,))
    p = g.parameter("p", np.zeros(2, np.float16))
    g.output(ops.reduce_sum(ops.mul(p, x)), "loss")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tr = gradc.Trainer(g, SGD(1.0), max_grad_norm=1e10, target="numpy")
        tr.step(x=np.array([3, -4], np.float16))
    np.testing.assert_array_equal(tr.parameters["p"], np.array([-3, 4], np.float16))


# -- T-SCH-1..4: schedules computed in the step graph -----------------------------------------

def schedule_graph(kind: str, warmup: int, total: int, lr: float = 0.5) -> gradc.Graph:
    g = gradc.Graph("sched")
    step = g.input("step", "int64", (1,))
    with g:
        lr_t = scheduled_learning_rate(step, lr, kind, warmup, total)
        lr32 = ops.cast(lr_t, "float32")
    g.output(lr_t, "lr64")
    g.output(lr32, "lr32")
    return g


def lr_values(g: gradc.Graph, target: str, ts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    exe = gradc.compile(g, target=target)
    outs = [exe(step=np.array([t + 1], np.int64)) for t in ts]
    return np.array([o["lr64"] for o in outs]), np.array([o["lr32"] for o in outs])


@pytest.mark.parametrize("target", TARGETS)
def test_t_sch_1_warmup_linear_exact(target):
    ts = [0, 3, 4, 7, 10, 12]
    lr64, lr32 = lr_values(schedule_graph("warmup_linear", 4, 10), target, ts)
    assert_bits(lr64, np.array([0, 0.375, 0.5, 0.25, 0, 0]))
    assert_bits(lr32, f32(0, 0.375, 0.5, 0.25, 0, 0))
    s = WarmupLinear(4, 10)
    assert [0.5 * s.factor(t) for t in ts] == list(lr64)


@pytest.mark.parametrize("target", TARGETS)
def test_t_sch_2_warmup_cosine(target):
    ts = [0, 3, 4, 5, 7, 10, 13, 16]
    factor = [0, 0.75, 1, 0.9330127018922194, 0.5, 0, 0.4999999999999999, 1]
    lr64, lr32 = lr_values(schedule_graph("warmup_cosine", 4, 10), target, ts)
    np.testing.assert_allclose(lr64 / 0.5, factor, rtol=4 * 2.0 ** -52, atol=1e-15)
    assert_bits(lr32, f32(0, 0.375, 0.5, 0.46650636196136475, 0.25, 0, 0.25, 0.5))
    assert [WarmupCosine(4, 10).factor(t) for t in ts] == factor


def linear_model(x0: np.ndarray) -> gradc.Graph:
    """loss = sum(x * g): the gradient of the parameter x is the input g."""
    g = gradc.Graph("lin")
    gin = g.input("g", "float32", x0.shape)
    x = g.parameter("x", x0.astype(np.float32))
    with g:
        loss = ops.reduce_sum(ops.mul(x, gin))
    g.output(loss, "loss")
    return g


@pytest.mark.parametrize("target", TARGETS)
def test_t_sch_3_sgd_warmup_linear(target):
    tr = gradc.Trainer(linear_model(f32(1)), SGD(0.5, schedule=WarmupLinear(2, 4)),
                       target=target)
    seen = []
    for _ in range(5):
        tr.step(g=f32(1))
        seen.append(float(tr.parameters["x"][0]))
    assert seen == [1, 0.75, 0.25, 0, 0]


@pytest.mark.parametrize("target", TARGETS)
def test_t_sch_4_adamw_warmup_cosine(target):
    x0 = f32(1, 2, -1, 0.5)
    opt = AdamW(lr=0.5, betas=(0.5, 0.75), eps=1.0, weight_decay=0.25,
                schedule=WarmupCosine(1, 3))
    tr = gradc.Trainer(linear_model(x0), opt, target=target)
    tr.step(g=f32(1, -3, 7, 0))
    assert_bits(tr.parameters["x"], x0)  # lr_t 0: the decay factor is 1, the update 0
    tr.step(g=f32(2, 1, -1, 4))
    want = f32(0.5602387189865112, 1.8036869764328003, -1.0226361751556396,
               0.10613134503364563)
    assert_bits(tr.parameters["x"], want)  # t = 1 = W: cos(0) = 1, so lr_t is exact


def test_schedule_resumes_with_the_step_counter(tmp_path):
    """The factor reads `step`: a Trainer loaded at step k continues the schedule there."""
    opt = SGD(0.5, schedule=WarmupLinear(2, 6))
    a = gradc.Trainer(linear_model(f32(1)), opt, target="reference")
    for _ in range(3):
        a.step(g=f32(1))
    a.save(tmp_path / "s.npz")
    b = gradc.Trainer(linear_model(f32(1)), opt, target="reference")
    b.load(tmp_path / "s.npz")
    for tr in (a, b):
        tr.step(g=f32(1))
    assert_bits(a.parameters["x"], b.parameters["x"])
    assert a.parameters["x"][0] == np.float32(1 - 0.25 - 0.5 - 0.5 * 3 / 4)


def test_schedule_arguments():
    with pytest.raises(gradc.VerifyError, match="SGD: schedule: expected None"):
        SGD(0.1, schedule="cosine")
    with pytest.raises(gradc.VerifyError, match="warmup_steps: expected an int >= 0"):
        WarmupLinear(1.5, 4)
    assert WarmupLinear(0, 1).factor(0) == 1.0 and WarmupLinear(3, 3).factor(3) == 0.0
    assert math.isclose(WarmupCosine(0, 4).factor(8), 1.0)  # rises again past total_steps


# -- T-PAT-1: names and fnmatch patterns ------------------------------------------------------

PAT_NAMES = ["wte.weight", "h.0.attn.c_attn.weight", "h.0.attn.c_attn.lora_A.default.weight",
             "h.0.attn.c_attn.lora_B.default.weight", "h.1.mlp.c_fc.weight", "ln_f.weight"]


def pattern_model() -> gradc.Graph:
    g = gradc.Graph("pat")
    x = g.input("x", "float32", (2,))
    with g:
        terms = [ops.reduce_sum(ops.mul(g.parameter(n, np.ones(2, np.float32)), x))
                 for n in PAT_NAMES]
        total = terms[0]
        for t in terms[1:]:
            total = ops.add(total, t)
    g.output(total, "loss")
    return g


@pytest.mark.parametrize("kw, trained", [
    (dict(parameters=["*lora_*"]), [PAT_NAMES[2], PAT_NAMES[3]]),
    (dict(frozen=["h.0.*"]), ["wte.weight", "h.1.mlp.c_fc.weight", "ln_f.weight"]),
    (dict(parameters=["ln_f.weight", "h.?.mlp.*"]), ["h.1.mlp.c_fc.weight", "ln_f.weight"]),
    (dict(parameters=["*.weight"], frozen=["*lora_[AB]*", "wte.weight"]),
     ["h.0.attn.c_attn.weight", "h.1.mlp.c_fc.weight", "ln_f.weight"]),
    (dict(parameters=["*lora*", "*lora_A*"]), [PAT_NAMES[2], PAT_NAMES[3]]),  # overlap: once
])
def test_t_pat_1_selects(kw, trained):
    s = gradc.training_step(pattern_model(), SGD(0.1), **kw)
    assert [p.name for p in s.parameters] == trained


@pytest.mark.parametrize("kw, message", [
    (dict(frozen=["H.0.*"]), "training_step: frozen[0]: expected a name or pattern that "
                             "matches a trainable parameter, got 'H.0.*'"),
    (dict(parameters=["*lora*", "x.*"]), "training_step: parameters[1]: expected a name or "
                                         "pattern that matches a trainable parameter, got 'x.*'"),
])
def test_t_pat_1_refuses(kw, message):
    with pytest.raises(gradc.VerifyError) as e:
        gradc.training_step(pattern_model(), SGD(0.1), **kw)
    assert str(e.value) == message


@pytest.mark.parametrize("target", ["reference", "c"])
def test_lora_pattern_changes_only_the_selected(target):
    tr = gradc.Trainer(pattern_model(), SGD(0.1), parameters=["*lora_*"], target=target)
    tr.step(x=f32(1, 2))
    for n, v in tr.parameters.items():
        assert "lora_" in n and not np.array_equal(v, np.ones(2, np.float32))
