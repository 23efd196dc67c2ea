"""The cuda target's training kernels in training: Adam's bias correction, a Trainer step with
batch normalization, average pooling and dropout, and the real models of ``real_models.py``.

- ``adam_optimizer`` computes ``beta^t`` in double-double arithmetic (``backends/cuda/
  training.py``), so the GPU and the host harness compute the same bits: the correctly rounded
  power, at many steps and betas, in float64, where one ulp of the bias correction shows in the
  parameters;
- ``Trainer(target="cuda")`` through the host harness equals ``Trainer(target="c")`` bit for bit,
  step after step (losses and the whole state), on a model whose step uses only ops that the
  cuda target lowers without gemm or convolution: batch normalization in training with running
  statistics, average pooling and its gradient, dropout (Philox), reductions, Adam / AdamW / SGD;
- the real models (resnet18, mobilenet_v2, squeezenet1_0, the UNet, the MLP at small widths)
  train bit-identically on both, once the cuda target lowers gemm and convolution (skipped
  until then, saying so).
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends import TARGETS
from gradc.ir.ops.batch_norm import running_statistics

from helpers import assert_bits, compile_for, cuda_targets

pytestmark = pytest.mark.skipif(not cuda_targets(), reason="no cuda mode to test")
BETAS = ((0.9, 0.999), (0.5, 0.75), (0.8, 0.99), (0.99, 0.9999), (0.3, 0.6), (0.95, 0.98))
STEPS = list(range(0, 130)) + [1000, 4321, 10 ** 5, 777777, 2 ** 31 - 1]


def _power(b: float, t: int) -> float:
    """``b ** t`` correctly rounded (exact rational arithmetic; 0 below half the least
    subnormal)."""
    if t * -math.log2(b) > 1100:
        return 0.0
    return float(Fraction(b) ** t)


def _adam64(x: float, m: float, v: float, g: float, t: int, lr: float, b1: float, b2: float,
            eps: float) -> float:
    """§19.1's parameter update in float64 with the bias correction's powers correctly
    rounded (lr, b1, b2, eps: float32 values)."""
    f = np.float64
    corr = np.sqrt(f(1) - f(_power(b2, t))) / (f(1) - f(_power(b1, t)))
    mo = f(b1) * f(m) + f(1.0 - b1) * f(g)
    vo = f(b2) * f(v) + f(1.0 - b2) * (f(g) * f(g))
    return float(f(x) - (f(lr) * corr * mo) / (np.sqrt(vo) + f(eps)))


@pytest.mark.parametrize("target", cuda_targets())
def test_adam_bias_correction_is_the_correctly_rounded_power(target, tmp_path):
    """The reference's ``np.power`` is NumPy's own (SIMD) power, not correctly rounded and
    machine-dependent: it differs from the correctly rounded ``b ** t`` in about 5% of these
    (step, beta) pairs, glibc's ``pow`` (the C target's) in 0.3%. The cuda kernel's power is
    the correctly rounded one on every pair, on the GPU and on the harness alike; its result is
    within §9.5's tolerance of the reference's (tests/cuda_cases.py, ``adam_*``)."""
    g = gradc.Graph("adam64")
    x, m, v, gr = (g.input(n, "float64", (1,)) for n in ("x", "m", "v", "g"))
    t = g.input("t", "int64", (1,))
    for i, (b1, b2) in enumerate(BETAS):
        g.output(ops.adam_optimizer(x, m, v, gr, t, 0.01, b1, b2, 1e-3)[0], f"x{i}")
    got = compile_for(g, target, cache_dir=str(tmp_path))
    state = {"x": 0.75, "m": 0.3, "v": 0.2, "g": -0.6}
    f32 = [float(np.float32(a)) for a in (0.01, 1e-3)]
    for step in STEPS:
        out = got(**{k: np.array([a]) for k, a in state.items()}, t=np.array([step], np.int64))
        for i, (b1, b2) in enumerate(BETAS):
            if step == 0:  # 0 / 0
                assert np.isnan(out[f"x{i}"][0])
                continue
            want = _adam64(*state.values(), step, f32[0], float(np.float32(b1)),
                           float(np.float32(b2)), f32[1])
            assert out[f"x{i}"][0] == want, (step, b1, b2)


def _bn_model() -> gradc.Graph:
    """Per-channel scale and bias, batch normalization in training (running statistics as
    ``<name>.next``), relu, average pooling, dropout, a spatial mean, class scores by
    broadcasting: a step without gemm or convolution."""
    rng = np.random.default_rng(11)
    g = gradc.Graph("bn_pool_drop")
    x = g.input("x", "float32", ("N", 3, 6, 6))
    state = g.input("rng_state", "uint32", (6,))
    p = {k: g.add_parameter(k, (rng.standard_normal((1, 3, 1, 1)) * s + o).astype(np.float32))
         for k, s, o in (("w", 1, 0), ("b", 1, 0), ("gamma", 0.2, 1), ("beta", 0.2, 0))}
    rm = g.add_parameter("bn.running_mean", np.zeros((1, 3, 1, 1), np.float32))
    rv = g.add_parameter("bn.running_var", np.ones((1, 3, 1, 1), np.float32))
    k = g.add_parameter("k", rng.standard_normal((5, 3)).astype(np.float32))
    with g:
        h = ops.add(ops.mul(x, p["w"]), p["b"])
        y, mean, var = ops.batch_normalization_training(h, p["gamma"], p["beta"], 1e-3)
        nm, nv = running_statistics(h, mean, var, rm, rv, 0.9)
        a = ops.average_pooling(ops.relu(y), (2, 2), (2, 2), (1, 1), (0, 0),
                                include_padding=True)
        d, _, next_state = ops.dropout(a, state, 0.25)
        f = ops.reshape(ops.reduce_mean(d, (2, 3)), ("N", 1, 3))
        g.output(ops.reduce_sum(ops.mul(f, k), (2,)), "y")
        g.output(next_state, "rng_state_out")
        g.output(nm, "bn.running_mean.next")
        g.output(nv, "bn.running_var.next")
    return g


@pytest.mark.parametrize("optimizer", [gradc.optim.AdamW(0.05), gradc.optim.Adam(0.02),
                                       gradc.optim.SGD(0.1, momentum=0.9)],
                         ids=["adamw", "adam", "sgd"])
def test_trainer_without_gemm_equals_the_c_target(optimizer, tmp_path):
    target = cuda_targets()[0]
    opts = {"runtime": "host"} if target == "cuda-host" else {}
    tc = gradc.Trainer(_bn_model(), optimizer, loss="cross_entropy", target="c", seed=5)
    tg = gradc.Trainer(_bn_model(), optimizer, loss="cross_entropy", target="cuda", seed=5,
                       cache_dir=str(tmp_path), **opts)
    rng = np.random.default_rng(2)
    for step in range(3):
        batch = {"x": rng.standard_normal((4, 3, 6, 6)).astype(np.float32) * 2,
                 "labels": rng.integers(0, 5, 4)}
        lc, lg = tc.step(**batch), tg.step(**batch)
        assert lc == lg if target == "cuda-host" else abs(lc - lg) <= 1e-6 * abs(lc), step
    want, got = tc.state_dict(), tg.state_dict()
    assert set(got) == set(want)
    for name in want:
        if target == "cuda-host":
            assert_bits(got[name], want[name])
        else:  # the GPU's exp (Adam's bias correction, softmax) is within an ulp of glibc's
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


# Real models: small widths, a batch of 2, the TorchScript training export (batch norm in
# training mode, dropout), as tests/test_train_real_models.py; (width, size).
REAL = {"resnet18": (16, 32), "mobilenet_v2": (16, 32), "squeezenet1_0": (16, 32),
        "unet": (16, 16), "mlp": (1, 32)}
NEEDS = {"gemm", "convolution", "convolution_filter_grad"}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_models_train_as_on_the_c_target(name, tmp_path):
    missing = NEEDS - TARGETS["cuda"].lowerings()
    if missing:
        pytest.skip(f"the cuda target does not lower {', '.join(sorted(missing))} yet")
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import real_models as rm  # noqa: E402  (needs torch)

    width, size = REAL[name]
    model, shape = rm.make(name, width, seed=0, size=size)
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(2, *shape, generator=gen) for _ in range(3)]
    labels = [rm.labels_for(name, model, x, seed=i) for i, x in enumerate(xs)]
    g = gradc.from_onnx(rm.export(model, "ts_train", xs[0], labels[0]))
    target = cuda_targets()[0]
    opts = {"runtime": "host"} if target == "cuda-host" else {}
    opt = gradc.optim.AdamW(0.01)
    tc = gradc.Trainer(g, opt, loss="cross_entropy", target="c")
    tg = gradc.Trainer(g, opt, loss="cross_entropy", target="cuda", cache_dir=str(tmp_path),
                       **opts)
    for x, lab in zip(xs, labels):
        batch = {"x": x.numpy(), "labels": lab.numpy()}
        lc, lg = tc.step(**batch), tg.step(**batch)
        assert lc == lg if target == "cuda-host" else abs(lc - lg) <= 1e-5 * abs(lc)
    want, got = tc.state_dict(), tg.state_dict()
    for k in want:
        if target == "cuda-host":
            assert_bits(got[k], want[k])
        else:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
