"""Loss composites (SPEC-training.md §18.2-§18.4): SPEC's vectors on every target, PyTorch's
losses and autograd, finite differences, and rejected arguments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from helpers import assert_bits, compile_for, cuda_targets, f32

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
LN4, LN2 = np.float32(1.3862943649291992), np.float32(0.6931471824645996)


def loss_graph(fn, x_shape, lab_shape, weights=False, dtype="float32", lab_dtype="int64",
               wrt=("x",)):
    """The gradient graph of ``fn(x, labels[, weights])`` (a loss output named ``loss``)."""
    g = gradc.Graph("loss")
    x = g.input("x", dtype, x_shape)
    lab = g.input("t", lab_dtype, lab_shape)
    w = g.input("w", dtype, (x_shape[1],)) if weights else None
    g.output(fn(x, lab, w), "loss")
    return gradc.grad(g, wrt=list(wrt))


def run_all(dg, feeds, targets=TARGETS):
    loss = dg.outputs[0]
    feeds = dict(feeds)
    feeds["grad_loss"] = np.ones([feeds["x"].shape[0] if d == "N" else d
                                  for d in loss.type.shape], loss.type.dtype.numpy)
    return {t: compile_for(dg, t)(**feeds) for t in targets}


def nll(**kw):
    return lambda x, t, w: ops.negative_log_likelihood(x, t, w, **kw)


def ce(**kw):
    return lambda x, t, w: ops.softmax_cross_entropy(x, t, w, **kw)


def _needs(*names):
    missing = [n for n in names if n not in ops.REGISTRY]
    if missing:
        pytest.skip(f"primitives not registered yet: {missing}")


# -- softmax_cross_entropy: T-CE-1..8 on every target ---------------------------------------

Z = np.zeros((2, 4), np.float32)
L13 = np.array([1, 3], np.int64)
CE_VECTORS = {
    "T-CE-1": (dict(), Z, L13, None, LN4,
               [[0.125, -0.375, 0.125, 0.125], [0.125, 0.125, 0.125, -0.375]]),
    "T-CE-2": (dict(ignore_index=-100), f32([0, 0, 0, 0], [1, 2, 3, 4], [0, 0, 0, 0]),
               np.array([1, -100, 2]), None, LN4,
               [[0.125, -0.375, 0.125, 0.125], [0, 0, 0, 0], [0.125, 0.125, -0.375, 0.125]]),
    "T-CE-3": (dict(reduction="sum"), Z, L13, f32(1, 2, 3, 4), np.float32(8.317766189575195),
               [[0.5, -1.5, 0.5, 0.5], [1, 1, 1, -3]]),
    "T-CE-4": (dict(reduction="none"), Z, L13, None, f32(LN4, LN4),
               [[0.25, -0.75, 0.25, 0.25], [0.25, 0.25, 0.25, -0.75]]),
    "T-CE-5": (dict(label_smoothing=0.25), Z, L13, None, LN4,
               [[0.09375, -0.28125, 0.09375, 0.09375], [0.09375, 0.09375, 0.09375, -0.28125]]),
    "T-CE-6": (dict(ignore_index=0, label_smoothing=0.5, reduction="none"),
               np.zeros((3, 4), np.float32), np.array([1, 3, 0]), None, f32(LN4, LN4, 0),
               [[0.125, -0.375, 0.125, 0.125], [0.125, 0.125, 0.125, -0.375], [0, 0, 0, 0]]),
    "T-CE-7": (dict(), np.zeros((1, 2, 2, 2), np.float32), np.array([[[0, 1], [1, 0]]]), None,
               LN2, [[[[-0.125, 0.125], [0.125, -0.125]], [[0.125, -0.125], [-0.125, 0.125]]]]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CE_VECTORS))
def test_t_ce_vectors(name, target):
    _needs("log_softmax")
    kw, x, lab, w, loss, dx = CE_VECTORS[name]
    dg = loss_graph(ce(**kw), x.shape, lab.shape, weights=w is not None)
    feeds = {"x": x, "t": lab.astype(np.int64)} | ({"w": w} if w is not None else {})
    out = run_all(dg, feeds, (target,))[target]
    assert_bits(out["loss"], np.asarray(loss, np.float32))
    assert_bits(out["grad_x"], np.asarray(dx, np.float32).reshape(x.shape))


def test_t_ce_8_nothing_counts_gives_nan():
    _needs("log_softmax")
    dg = loss_graph(ce(ignore_index=-100), (2, 4), (2,))
    for t, out in run_all(dg, {"x": Z, "t": np.array([-100, -100])}).items():
        assert np.isnan(out["loss"]), t


def test_t_mse_1():
    _needs("reduce_mean")
    x, y = f32([1, 2], [3, 4]), f32([0, 2.5], [5, 3])
    want = {"mean": (np.float32(1.5625), f32([0.5, -0.25], [-1, 0.5])),
            "sum": (np.float32(6.25), f32([2, -1], [-4, 2])),
            "none": (f32([1, 0.25], [4, 1]), f32([2, -1], [-4, 2]))}
    for red, (loss, dx) in want.items():
        g = gradc.Graph("mse")
        a, b = g.input("x", "float32", (2, 2)), g.input("y", "float32", (2, 2))
        g.output(ops.mean_squared_error(a, b, red), "loss")
        dg = gradc.grad(g)
        for t in TARGETS:
            out = compile_for(dg, t)(x=x, y=y, grad_loss=np.ones_like(loss))
            assert_bits(out["loss"], loss)
            assert_bits(out["grad_x"], dx)
            assert_bits(out["grad_y"], -dx)


# -- negative_log_likelihood ----------------------------------------------------------------

def _torch_nll(torch, x, lab, w, **kw):
    xt = torch.tensor(x, requires_grad=True)
    wt = None if w is None else torch.tensor(w)
    red = kw.get("reduction", "mean")
    ign = kw.get("ignore_index")
    loss = torch.nn.functional.nll_loss(xt, torch.tensor(lab), weight=wt, reduction=red,
                                        ignore_index=-100 if ign is None else ign)
    loss.backward(torch.ones_like(loss))
    return loss.detach().numpy(), xt.grad.numpy()


NLL_CASES = [dict(), dict(reduction="sum"), dict(reduction="none"),
             dict(ignore_index=2), dict(ignore_index=-100, reduction="mean")]


@pytest.mark.parametrize("kw", NLL_CASES)
@pytest.mark.parametrize("weights", [False, True])
def test_nll_matches_torch_on_every_target(kw, weights):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(str(kw)) + weights)
    x = np.log(rng.dirichlet(np.ones(5), (3, 2))).astype(np.float32).transpose(0, 2, 1).copy()
    lab = rng.integers(0, 5, (3, 2))
    lab[1, 0] = kw.get("ignore_index", 2) or 0
    w = rng.uniform(0.5, 2, 5).astype(np.float32) if weights else None
    dg = loss_graph(nll(**kw), ("N", 5, 2), ("N", 2), weights=weights)
    feeds = {"x": x, "t": lab} | ({"w": w} if weights else {})
    want_loss, want_dx = _torch_nll(torch, x, lab, w, **kw)
    outs = run_all(dg, feeds, TARGETS if weights else ("reference",))  # C builds take time
    for t, out in outs.items():
        np.testing.assert_allclose(out["loss"], want_loss, rtol=1e-6, err_msg=t)
        np.testing.assert_allclose(out["grad_x"], want_dx, rtol=1e-6, err_msg=t)
        assert_bits(out["grad_x"], outs["reference"]["grad_x"])  # exact ops: every target
        if kw.get("reduction") == "none":
            assert_bits(out["loss"], outs["reference"]["loss"])


def test_nll_out_of_range_labels_count_nowhere_and_inf_elsewhere_is_harmless():
    x = np.full((3, 4), -np.inf, np.float32)
    x[[0, 1, 2], [1, 2, 0]] = f32(-1, -2, -4)
    lab = np.array([1, 7, -3])  # 7 >= C and -3 < 0 contribute nothing (Choice, §18.2)
    dg = loss_graph(nll(), (3, 4), (3,))
    for t, out in run_all(dg, {"x": x, "t": lab}).items():
        assert_bits(out["loss"], np.float32(1), nan_payload=False)
        assert_bits(out["grad_x"], f32([0, -1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]))


def test_nll_gradient_matches_finite_differences_in_float64():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 2))
    lab = np.array([[0, 2], [1, 1]])
    w = rng.uniform(0.5, 2, 3)
    for kw in NLL_CASES[:3]:
        dg = loss_graph(nll(**kw), (2, 3, 2), (2, 2), weights=True, dtype="float64",
                        wrt=("x", "w"))
        ex = gradc.compile(dg, target="reference")
        cot = rng.standard_normal(dg.outputs[0].type.shape)
        out = ex(x=x, t=lab, w=w, grad_loss=cot)
        for name, arr in (("x", x), ("w", w)):
            num = np.zeros_like(arr)
            for i in np.ndindex(arr.shape):
                e = np.zeros_like(arr)
                e[i] = 1e-6
                hi = ex(**({"x": x, "t": lab, "w": w} | {name: arr + e}), grad_loss=cot)
                lo = ex(**({"x": x, "t": lab, "w": w} | {name: arr - e}), grad_loss=cot)
                num[i] = ((hi["loss"] - lo["loss"]) * cot).sum() / 2e-6
            np.testing.assert_allclose(out[f"grad_{name}"], num, rtol=1e-6, atol=1e-8)


def test_losses_are_composites():
    g = gradc.Graph("c")
    x, t = g.input("x", "float32", (2, 3)), g.input("t", "int32", (2,))
    g.output(ops.negative_log_likelihood(x, t), "loss")
    text = str(g)
    assert "negative_log_likelihood" not in text and "one_hot" in text
    assert gradc.parse(text) == g


def _bad(fn, x=("float32", (2, 4)), t=("int64", (2,)), w=None, **kw):
    g = gradc.Graph("g")
    args = [g.input("x", *x), g.input("t", *t)]
    args.append(g.input("w", *w) if w else None)
    return fn(*args, **kw)


@pytest.mark.parametrize("fn", [ops.softmax_cross_entropy, ops.negative_log_likelihood])
@pytest.mark.parametrize("kw, field", [
    ({"t": ("float32", (2,))}, "labels.dtype"),  # V-43
    ({"t": ("int64", (4,))}, "labels.shape"),
    ({"x": ("int32", (2, 4))}, ".*dtype"),
    ({"x": ("float32", (4,))}, ".*rank"),
    ({"w": ("float32", (3,))}, "weights.shape"),
    ({"w": ("float64", (4,))}, "weights.dtype"),
    ({"reduction": "average"}, "reduction"),
    ({"ignore_index": 1.5}, "ignore_index"),
])
def test_rejected_arguments(fn, kw, field):
    name = fn.__name__
    with pytest.raises(gradc.VerifyError, match=f"^{name}: {field}: expected"):
        _bad(fn, **kw)


def test_rejected_label_smoothing_and_mse_arguments():
    with pytest.raises(gradc.VerifyError, match="^softmax_cross_entropy: label_smoothing: "):
        _bad(ops.softmax_cross_entropy, label_smoothing=1.5)
    g = gradc.Graph("g")
    a, b = g.input("a", "float32", (2,)), g.input("b", "float32", (3,))
    with pytest.raises(gradc.VerifyError, match="^mean_squared_error: target.shape: expected"):
        ops.mean_squared_error(a, b)
    with pytest.raises(gradc.VerifyError, match="^mean_squared_error: reduction: expected"):
        ops.mean_squared_error(a, a, "avg")


def nll_oracle(x, lab, w, reduction, ignore_index):
    """SPEC §18.2 written as loops: pick, weigh, sum in row-major order (float32 steps)."""
    dt = x.dtype.type
    n, classes = x.shape[:2]
    per = np.full(lab.shape, -0.0, x.dtype)  # -(picked +0 * weight +0): -0.0
    weight = np.zeros(lab.shape, x.dtype)
    for i in np.ndindex(*lab.shape):
        k = int(lab[i])
        if 0 <= k < classes and k != ignore_index:
            wk = dt(1) if w is None else w[k]
            per[i] = -(x[(i[0], k) + i[1:]] * wk)
            weight[i] = wk
    if reduction == "none":
        return per
    total, wsum = np.float32(-0.0), np.float32(-0.0)  # reduce_sum: the first term exactly
    for i in np.ndindex(*lab.shape):
        total, wsum = np.float32(total + per[i]), np.float32(wsum + weight[i])
    with np.errstate(invalid="ignore"):
        return total if reduction == "sum" else np.float32(total / wsum)


@settings(max_examples=30)
@given(st.integers(0, 2 ** 31), st.sampled_from(["none", "sum", "mean"]), st.booleans(),
       st.sampled_from([None, 0, 2, -100]))
def test_nll_reference_matches_the_loop_oracle(seed, reduction, weights, ignore_index):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5))) + tuple(
        rng.integers(1, 3, rng.integers(0, 3)))
    x = rng.standard_normal(shape).astype(np.float32)
    lab = rng.integers(-2, shape[1] + 2, shape[:1] + shape[2:])
    w = rng.uniform(0, 2, shape[1]).astype(np.float32) if weights else None
    g = gradc.Graph("nll")
    xv, tv = g.input("x", "float32", shape), g.input("t", "int64", lab.shape)
    wv = g.input("w", "float32", (shape[1],)) if weights else None
    g.output(ops.negative_log_likelihood(xv, tv, wv, reduction, ignore_index), "loss")
    ex = gradc.compile(g, target="reference", passes=None)
    got = ex(x=x, t=lab, **({"w": w} if weights else {}))["loss"]
    assert_bits(got, np.asarray(nll_oracle(x, lab, w, reduction, ignore_index)),
                nan_payload=False)


CE_CASES = [dict(), dict(reduction="sum"), dict(reduction="none"), dict(ignore_index=1),
            dict(label_smoothing=0.2), dict(label_smoothing=0.3, ignore_index=2,
                                            reduction="none"),
            dict(label_smoothing=0.1, reduction="sum")]


@pytest.mark.parametrize("kw", CE_CASES)
@pytest.mark.parametrize("weights", [False, True])
def test_cross_entropy_matches_torch(kw, weights):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(str(kw)) * 2 + weights)
    x = (rng.standard_normal((4, 5, 3)) * 3).astype(np.float32)
    lab = rng.integers(0, 5, (4, 3))
    w = rng.uniform(0.5, 2, 5).astype(np.float32) if weights else None
    dg = loss_graph(ce(**kw), ("N", 5, 3), ("N", 3), weights=weights)
    feeds = {"x": x, "t": lab} | ({"w": w} if weights else {})
    xt = torch.tensor(x, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(
        xt, torch.tensor(lab), weight=None if w is None else torch.tensor(w),
        reduction=kw.get("reduction", "mean"), ignore_index=kw.get("ignore_index", -100),
        label_smoothing=kw.get("label_smoothing", 0.0))
    loss.backward(torch.ones_like(loss))
    outs = run_all(dg, feeds, TARGETS if weights else ("reference", "onnx"))
    for t, out in outs.items():  # log_softmax sums (and exp, log): float32 tolerance
        np.testing.assert_allclose(out["loss"], loss.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=t)
        np.testing.assert_allclose(out["grad_x"], xt.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=t)


def test_cross_entropy_gradient_matches_finite_differences_in_float64():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 2))
    lab = np.array([[0, 2], [1, -100]])
    w = rng.uniform(0.5, 2, 3)
    for kw in (dict(ignore_index=-100), dict(label_smoothing=0.25, reduction="sum"),
               dict(label_smoothing=0.5, reduction="none")):
        dg = loss_graph(ce(**kw), (2, 3, 2), (2, 2), weights=True, dtype="float64")
        ex = gradc.compile(dg, target="reference")
        cot = rng.standard_normal(dg.outputs[0].type.shape)
        out = ex(x=x, t=lab, w=w, grad_loss=cot)
        num = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            e = np.zeros_like(x)
            e[i] = 1e-6
            hi = ex(x=x + e, t=lab, w=w, grad_loss=cot)["loss"]
            lo = ex(x=x - e, t=lab, w=w, grad_loss=cot)["loss"]
            num[i] = ((hi - lo) * cot).sum() / 2e-6
        np.testing.assert_allclose(out["grad_x"], num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_matches_torch_on_every_target(reduction):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(2))
    g = gradc.Graph("mse")
    a, b = g.input("x", "float32", ("N", 3)), g.input("y", "float32", ("N", 3))
    g.output(ops.mean_squared_error(a, b, reduction), "loss")
    dg = gradc.grad(g)
    xt, yt = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    loss = torch.nn.functional.mse_loss(xt, yt, reduction=reduction)
    loss.backward(torch.ones_like(loss))
    cot = np.ones(loss.shape, np.float32)
    for t in TARGETS:
        out = compile_for(dg, t)(x=x, y=y, grad_loss=cot)
        np.testing.assert_allclose(out["loss"], loss.detach().numpy(), rtol=1e-6, err_msg=t)
        # gradc: dY*d + dY*d, divided first (§18.4); PyTorch (2/n)*d*dY: the last bit may differ
        np.testing.assert_allclose(out["grad_x"], xt.grad.numpy(), rtol=3e-7, err_msg=t)
        np.testing.assert_allclose(out["grad_y"], yt.grad.numpy(), rtol=3e-7, err_msg=t)
