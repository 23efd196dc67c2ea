"""Gradients of batch normalization (SPEC-training.md §12.1, §12.3) and the running statistics
of §12.5: finite differences in float64 (including cotangents on the statistics), PyTorch's
``F.batch_norm`` and autograd (skipped cleanly without torch), gradient graphs on every target,
the refusal of second derivatives, and T-BN-4 on every target."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.ops.batch_norm import running_statistics
from helpers import assert_bits, compile_for, cuda_targets

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
RNG = np.random.default_rng(12)


def _run(g, target="reference", **feeds):
    return compile_for(g, target, passes=None)(**feeds)


def _inference_graph(shape, pshape, dtype="float64", batch=None):
    g = gradc.Graph("bn")
    x = g.input("x", dtype, ((batch,) + shape[1:]) if batch else shape)
    m, v, s, b = (g.input(k, dtype, pshape) for k in ("m", "v", "s", "b"))
    g.output(ops.batch_normalization(x, m, v, s, b, epsilon=0.5), "y")
    return g


def _training_graph(shape, pshape, stats=True, dtype="float64", batch=None):
    g = gradc.Graph("bnt")
    x = g.input("x", dtype, ((batch,) + shape[1:]) if batch else shape)
    s, b = g.input("s", dtype, pshape), g.input("b", dtype, pshape)
    y, m, v = ops.batch_normalization_training(x, s, b, epsilon=0.25)
    g.output(y, "y")
    if stats:
        g.output(m, "m")
        g.output(v, "v")
    return g


def _feeds(shape, pshape):
    x = RNG.standard_normal(shape) * 2 + 0.5
    return {"x": x, "m": RNG.standard_normal(pshape), "v": RNG.random(pshape) + 0.5,
            "s": RNG.standard_normal(pshape), "b": RNG.standard_normal(pshape)}


def _fd_check(g, feeds, h=1e-6):
    """Every input's analytic gradient against central differences of <outputs, cotangents>."""
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in g.inputs}}
    cot = {f"grad_{o.name}": RNG.standard_normal(
        [feeds["x"].shape[0] if d == "N" else d for d in o.type.shape]) for o in g.outputs}
    out = _run(gradc.grad(g, wrt="inputs"), **feeds, **cot)
    fwd = gradc.compile(g, target="reference", passes=None)

    def loss(f):
        r = fwd(**f)
        return sum(float(np.sum(r[o.name] * cot[f"grad_{o.name}"])) for o in g.outputs)

    for name, arr in feeds.items():
        num = np.zeros_like(arr)
        for i in np.ndindex(*arr.shape):
            p, m = arr.copy(), arr.copy()
            p[i] += h
            m[i] -= h
            num[i] = (loss({**feeds, name: p}) - loss({**feeds, name: m})) / (2 * h)
        np.testing.assert_allclose(out[f"grad_{name}"], num, rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("shape,pshape", [((2, 3, 2, 2), (1, 3, 1, 1)), ((4, 3), (1, 3)),
                                          ((3, 2, 2), (3, 1, 2)), ((5,), (1,))])
def test_inference_vjp_matches_finite_differences(shape, pshape):
    _fd_check(_inference_graph(shape, pshape), _feeds(shape, pshape))


@pytest.mark.parametrize("stats", [False, True], ids=["y", "y+stats"])
@pytest.mark.parametrize("shape,pshape", [((2, 3, 2, 2), (1, 3, 1, 1)), ((4, 3), (1, 3)),
                                          ((3, 2, 2), (3, 1, 2))])
def test_training_vjp_matches_finite_differences(shape, pshape, stats):
    _fd_check(_training_graph(shape, pshape, stats), _feeds(shape, pshape))


def test_statistics_alone_get_their_gradient():
    """Only the statistics used: no batch_normalization_training_grad node, dX from dM, dV."""
    g = gradc.Graph("st")
    x = g.input("x", "float64", (4, 3))
    s = g.input("s", "float64", (1, 3))
    _, m, v = ops.batch_normalization_training(x, s, s)
    g.output(v, "v")
    g.output(m, "m")
    t = gradc.grad(g, wrt=["x"])
    assert "batch_normalization_training_grad" not in {n.op for n in t.nodes}
    _fd_check(g, {"x": RNG.standard_normal((4, 3)), "s": np.ones((1, 3))})


def test_gradient_graphs_agree_on_every_target():
    """The training gradient graph (symbolic batch) on numpy and c bit for bit, onnx close."""
    for dtype in ("float32", "float64"):
        g = _training_graph((3, 4, 2, 2), (1, 4, 1, 1), True, dtype, batch="N")
        t = gradc.grad(g, wrt="inputs")
        f = {k: v.astype(dtype) for k, v in _feeds((3, 4, 2, 2), (1, 4, 1, 1)).items()
             if k in ("x", "s", "b")}
        for k, shape in (("y", (3, 4, 2, 2)), ("m", (1, 4, 1, 1)), ("v", (1, 4, 1, 1))):
            f[f"grad_{k}"] = RNG.standard_normal(shape).astype(dtype)
        ref = _run(t, **f)
        for target in ("numpy", "c"):
            got = _run(t, target, **f)
            for k in ref:
                assert_bits(got[k], ref[k])
        got = _run(t, "onnx", **f)
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("op", ["batch_normalization_grad", "batch_normalization_training_grad"])
def test_second_derivatives_are_refused_naming_the_op(op):
    g = gradc.Graph("g2")
    x, dy = g.input("x", "float32", (2, 3)), g.input("dy", "float32", (2, 3))
    p = g.input("p", "float32", (1, 3))
    dx, ds, db = getattr(ops, op)(x, dy, p, p, p)
    g.output(dx, "dx")
    with pytest.raises(gradc.UnsupportedError, match=op):
        gradc.grad(g)
    g2 = gradc.Graph("g3")  # unused results: no gradient needed, nothing refused
    x, dy = g2.input("x", "float32", (2, 3)), g2.input("dy", "float32", (2, 3))
    p = g2.input("p", "float32", (1, 3))
    getattr(ops, op)(x, dy, p, p, p)
    g2.output(ops.relu(x), "y")
    gradc.grad(g2)


# -- §12.5 running statistics -------------------------------------------------------------------
X = np.array([[[[1, 7]], [[-2, 4]]], [[[1, 7]], [[4, -2]]]], np.float32)


def _stats_graph(momentum, unbiased, dtype="float32", shape=(2, 2, 1, 2), pshape=(1, 2, 1, 1)):
    g = gradc.Graph("rs")
    x = g.input("x", dtype, ("N",) + shape[1:])
    s = g.input("s", dtype, pshape)
    rm, rv = g.input("rm", dtype, pshape), g.input("rv", dtype, pshape)
    _, m, v = ops.batch_normalization_training(x, s, s)
    nm, nv = running_statistics(x, m, v, rm, rv, momentum, unbiased=unbiased)
    g.output(nm, "mean")
    g.output(nv, "var")
    return g


@pytest.mark.parametrize("target", TARGETS)
def test_t_bn_4_running_statistics(target):
    p = (1, 2, 1, 1)
    feeds = {"x": X, "s": np.ones(p, np.float32), "rm": np.zeros(p, np.float32),
             "rv": np.ones(p, np.float32)}
    onnx_form = _run(_stats_graph(0.75, False), target, **feeds)
    assert_bits(onnx_form["mean"], np.array([1, 0.25], np.float32).reshape(p))
    assert_bits(onnx_form["var"], np.array([3, 3], np.float32).reshape(p))
    torch_form = _run(_stats_graph(1 - 0.25, True), target, **feeds)
    assert_bits(torch_form["mean"], np.array([1, 0.25], np.float32).reshape(p))
    assert_bits(torch_form["var"], np.array([3.75, 3.75], np.float32).reshape(p))


def test_running_statistics_rejects_bad_arguments():
    g = gradc.Graph("bad")
    x = g.input("x", "float32", (2, 3))
    s = g.input("s", "float32", (1, 3))
    w = g.input("w", "float32", (3,))
    _, m, v = ops.batch_normalization_training(x, s, s)
    with pytest.raises(gradc.VerifyError, match="running_var"):
        running_statistics(x, m, v, s, w, 0.9)
    for bad in (float("nan"), 1e39, "0.9", True):
        with pytest.raises(gradc.VerifyError, match="momentum"):
            running_statistics(x, m, v, s, s, bad)


def test_running_statistics_float16_constants_and_symbolic_count():
    """1 - momentum is computed in float64 and rounded once to the dtype (§9.3)."""
    g = _stats_graph(0.9, True, "float16")
    consts = sorted(float(n.attrs["value"]) for n in g.nodes if n.op == "constant")
    assert np.float16(1 - float(np.float32(0.9))) in consts
    assert any(n.op == "element_count" for n in g.nodes)


# -- PyTorch ----------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(2, 3, 4, 4), (5, 4), (2, 3, 5)])
def test_against_pytorch_training_forward_backward_and_running_stats(shape):
    torch = _torch()
    F = torch.nn.functional
    c = shape[1]
    pshape = (1, c) + (1,) * (len(shape) - 2)
    x = RNG.standard_normal(shape) * 2 + 1
    w, b = RNG.standard_normal(c), RNG.standard_normal(c)
    rm0, rv0 = RNG.standard_normal(c), RNG.random(c) + 0.5
    dy = RNG.standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    trm, trv = torch.tensor(rm0), torch.tensor(rv0)
    ty = F.batch_norm(tx, trm, trv, tw, tb, training=True, momentum=0.1, eps=1e-5)
    ty.backward(torch.tensor(dy))

    g = gradc.Graph("t")
    xv = g.input("x", "float64", shape)
    sv, bv = g.input("s", "float64", pshape), g.input("b", "float64", pshape)
    rmv, rvv = g.input("rm", "float64", pshape), g.input("rv", "float64", pshape)
    y, m, v = ops.batch_normalization_training(xv, sv, bv, epsilon=1e-5)
    nm, nv = running_statistics(xv, m, v, rmv, rvv, 1 - 0.1, unbiased=True)
    g.output(y, "y")
    g.output(nm, "rm_new")
    g.output(nv, "rv_new")
    t = gradc.grad(g, wrt=["x", "s", "b"])
    out = _run(t, x=x, s=w.reshape(pshape), b=b.reshape(pshape), rm=rm0.reshape(pshape),
               rv=rv0.reshape(pshape), grad_y=dy, grad_rm_new=np.zeros(pshape),
               grad_rv_new=np.zeros(pshape))
    # momentum 0.9 is a float32 value in gradc (§9.3): compare the update with its tolerance
    tol = dict(rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["y"], ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out["rm_new"].reshape(c), trm.numpy(), **tol)
    np.testing.assert_allclose(out["rv_new"].reshape(c), trv.numpy(), **tol)
    np.testing.assert_allclose(out["grad_x"], tx.grad.numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(out["grad_s"].reshape(c), tw.grad.numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(out["grad_b"].reshape(c), tb.grad.numpy(), rtol=1e-9, atol=1e-10)


def test_against_pytorch_float32_training_and_eval():
    """float32 at resnet-like scale against PyTorch's kernels, within a float32 tolerance."""
    torch = _torch()
    F = torch.nn.functional
    shape, c = (2, 8, 6, 6), 8
    x = (RNG.standard_normal(shape) * 3 + 2).astype(np.float32)
    w, b = RNG.standard_normal(c).astype(np.float32), RNG.standard_normal(c).astype(np.float32)
    m, v = RNG.standard_normal(c).astype(np.float32), (RNG.random(c) + 0.5).astype(np.float32)
    p = (1, c, 1, 1)
    ref_train = F.batch_norm(torch.tensor(x), None, None, torch.tensor(w), torch.tensor(b),
                             training=True).numpy()
    ref_eval = F.batch_norm(torch.tensor(x), torch.tensor(m), torch.tensor(v), torch.tensor(w),
                            torch.tensor(b), training=False).numpy()
    g = gradc.Graph("f32")
    xv = g.input("x", "float32", ("N", c, 6, 6))
    wv, bv, mv, vv = (g.input(k, "float32", p) for k in ("w", "b", "m", "v"))
    g.output(ops.batch_normalization_training(xv, wv, bv)[0], "train")
    g.output(ops.batch_normalization(xv, mv, vv, wv, bv), "eval")
    feeds = dict(x=x, w=w.reshape(p), b=b.reshape(p), m=m.reshape(p), v=v.reshape(p))
    for target in TARGETS:
        out = _run(g, target, **feeds)
        np.testing.assert_allclose(out["train"], ref_train, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["eval"], ref_eval, rtol=1e-5, atol=1e-5)


def test_against_pytorch_eval_autograd():
    """Gradients of the inference op w.r.t. all five operands: torch's formula, autograd."""
    torch = _torch()
    shape, c = (3, 4, 2, 3), 4
    p = (1, c, 1, 1)
    f = _feeds(shape, p)
    t = {k: torch.tensor(a, requires_grad=True) for k, a in f.items()}
    ty = (t["x"] - t["m"]) / torch.sqrt(t["v"] + float(np.float32(0.5))) * t["s"] + t["b"]
    dy = RNG.standard_normal(shape)
    ty.backward(torch.tensor(dy))
    out = _run(gradc.grad(_inference_graph(shape, p, batch="N")), **f, grad_y=dy)
    np.testing.assert_allclose(out["y"], ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for k in f:
        np.testing.assert_allclose(out[f"grad_{k}"], t[k].grad.numpy(), rtol=1e-9, atol=1e-10,
                                   err_msg=k)
