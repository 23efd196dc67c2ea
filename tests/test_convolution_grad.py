"""Gradients of convolution and convolution_filter_grad (SPEC-training.md §10.3, §10.4).

- finite differences in float64 (``gradc.check.finite_differences``) for both directions, both
  modes, groups, dilations, strides, asymmetric padding and output padding, and for the filter
  gradient itself (second order);
- the adjoint identities <conv(X, W), dY> = <X, dX> = <W, dW> on random float64 data;
- PyTorch: conv1d/2d/3d, conv_transpose2d and autograd (groups, depthwise, dilation, stride,
  padding, bias), skipped cleanly without torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.check import finite_differences

from test_convolution import random_case

F64 = np.float64


def _conv_graph(x, w, b, f, batch="N"):
    g = gradc.Graph("conv")
    xv = g.input("x", "float64", (batch,) + x.shape[1:])
    wv = g.input("w", "float64", w.shape)
    bv = None if b is None else g.input("b", "float64", b.shape)
    g.output(ops.convolution(xv, wv, bv, **f), "y")
    return g


@pytest.mark.parametrize("seed", range(6))
def test_convolution_vjp_matches_finite_differences(seed):
    (x, w, b, _), f = random_case(np.random.default_rng(100 + seed), F64, max_nd=2)
    g = _conv_graph(x, w, b, f)
    for name, err, scale in finite_differences(g, {"N": x.shape[0]}, seed=seed):
        assert err <= 1e-6 * (1 + scale), (name, err, scale, f)


@pytest.mark.parametrize("seed", range(4))
def test_filter_grad_vjp_matches_finite_differences(seed):
    (x, w, _, dy), f = random_case(np.random.default_rng(200 + seed), F64, max_nd=2)
    g = gradc.Graph("fg")
    xv = g.input("x", "float64", x.shape)
    dyv = g.input("dy", "float64", dy.shape)
    g.output(ops.convolution_filter_grad(xv, dyv, w.shape, **f), "dw")
    for name, err, scale in finite_differences(g, {}, seed=seed):
        assert err <= 1e-6 * (1 + scale), (name, err, scale, f)


def _run(g, **feeds):
    return gradc.compile(g, target="reference", passes=None)(**feeds)


@pytest.mark.parametrize("seed", range(6))
def test_adjoint_identities(seed):
    (x, w, _, dy), f = random_case(np.random.default_rng(300 + seed), F64)
    t = gradc.grad(_conv_graph(x, w, None, f))
    out = _run(t, x=x, w=w, grad_y=dy)
    lhs = float(np.sum(out["y"] * dy))
    for a, da in ((x, out["grad_x"]), (w, out["grad_w"])):
        assert abs(lhs - float(np.sum(a * da))) <= 1e-9 * (1 + abs(lhs)), f


def test_second_order_rule_is_bilinear_adjoint():
    """§10.4: <filter_grad(X, dY), G> = <dY, convolution(X, G)> = <X, dX(G, dY)>."""
    rng = np.random.default_rng(7)
    for _ in range(4):
        (x, w, _, dy), f = random_case(rng, F64)
        g = gradc.Graph("fg")
        xv, dyv = g.input("x", "float64", x.shape), g.input("dy", "float64", dy.shape)
        g.output(ops.convolution_filter_grad(xv, dyv, w.shape, **f), "dw")
        cot = rng.standard_normal(w.shape)
        out = _run(gradc.grad(g), x=x, dy=dy, grad_dw=cot)
        lhs = float(np.sum(out["dw"] * cot))
        for a, da in ((x, out["grad_x"]), (dy, out["grad_dy"])):
            assert abs(lhs - float(np.sum(a * da))) <= 1e-9 * (1 + abs(lhs)), f


def test_grad_keeps_the_symbolic_batch_and_every_target_agrees():
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((4, 2, 3, 2))
    b = rng.standard_normal((1, 4, 1, 1))
    f = dict(strides=(2, 1), dilations=(1, 2), start_padding=(1, 0), end_padding=(0, 1),
             group_count=2)
    t = gradc.grad(_conv_graph(x, w, b, f))
    assert t.outputs[1].type.shape[0] == "N"
    dy = rng.standard_normal((2,) + t.inputs[-1].type.shape[1:])
    want = _run(t, x=x, w=w, b=b, grad_y=dy)
    for target in ("numpy", "c"):
        got = gradc.compile(t, target=target, passes=None)(x=x, w=w, b=b, grad_y=dy)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


# -- PyTorch ----------------------------------------------------------------------------------

TORCH_CASES = [  # (x shape, w shape, gradc fields, torch fields)
    ((2, 4, 7, 6), (6, 2, 3, 3), dict(strides=(2, 1), dilations=(1, 2), start_padding=(1, 2),
                                      end_padding=(1, 2), group_count=2),
     dict(stride=(2, 1), dilation=(1, 2), padding=(1, 2), groups=2)),
    ((2, 3, 8, 8), (3, 1, 3, 3), dict(start_padding=(1, 1), end_padding=(1, 1), group_count=3),
     dict(padding=1, groups=3)),  # depthwise
    ((1, 2, 9), (3, 2, 4), dict(strides=(3,), dilations=(2,)), dict(stride=3, dilation=2)),
    ((1, 2, 4, 3, 5), (2, 1, 2, 2, 3), dict(start_padding=(1, 0, 1), end_padding=(1, 0, 1),
                                            group_count=2),
     dict(padding=(1, 0, 1), groups=2)),
]


@pytest.mark.parametrize("case", range(len(TORCH_CASES)))
def test_forward_and_gradients_match_pytorch(case):
    torch = pytest.importorskip("torch")
    xs, ws, f, tf = TORCH_CASES[case]
    rng = np.random.default_rng(case)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    b = rng.standard_normal((1, ws[0]) + (1,) * (len(xs) - 2))
    t = gradc.grad(_conv_graph(x, w, b, f, batch=xs[0]))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b.reshape(-1)))
    conv = getattr(torch.nn.functional, f"conv{len(xs) - 2}d")
    ty = conv(tx, tw, tb, **tf)
    dy = rng.standard_normal(tuple(ty.shape))
    ty.backward(torch.tensor(dy))
    got = _run(t, x=x, w=w, b=b, grad_y=dy)
    np.testing.assert_allclose(got["y"], ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for k, v in (("grad_x", tx), ("grad_w", tw)):
        np.testing.assert_allclose(got[k], v.grad.numpy(), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(got["grad_b"].reshape(-1), tb.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("groups,output_padding,dilation", [(1, (1, 0), 1), (2, (0, 1), 2)])
def test_backward_direction_matches_conv_transpose2d(groups, output_padding, dilation):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(groups)
    x, w = rng.standard_normal((2, 4, 3, 4)), rng.standard_normal((4, 3, 3, 2))
    b = rng.standard_normal((1, 3 * groups, 1, 1))
    f = dict(direction="backward", strides=(2, 2), dilations=(dilation,) * 2,
             start_padding=(1, 1), end_padding=(1, 1), output_padding=output_padding,
             group_count=groups)
    t = gradc.grad(_conv_graph(x, w, b, f, batch=2))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b.reshape(-1)))
    ty = torch.nn.functional.conv_transpose2d(tx, tw, tb, stride=2, padding=1,
                                              output_padding=output_padding, groups=groups,
                                              dilation=dilation)
    dy = rng.standard_normal(tuple(ty.shape))
    ty.backward(torch.tensor(dy))
    got = _run(t, x=x, w=w, b=b, grad_y=dy)
    np.testing.assert_allclose(got["y"], ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for k, v in (("grad_x", tx), ("grad_w", tw)):
        np.testing.assert_allclose(got[k], v.grad.numpy(), rtol=1e-11, atol=1e-11)


def test_float32_forward_matches_pytorch_within_the_bound():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 8, 10, 10)).astype(np.float32)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    g = gradc.Graph("c")
    g.output(ops.convolution(g.input("x", "float32", x.shape), g.input("w", "float32", w.shape),
                             strides=(2, 2), start_padding=(1, 1), end_padding=(1, 1),
                             group_count=2), "y")
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), stride=2, padding=1,
                                      groups=2).numpy()
    for target in ("reference", "c", "onnx"):
        got = gradc.compile(g, target=target, passes=None)(x=x, w=w)["y"]
        s = torch.nn.functional.conv2d(torch.tensor(np.abs(x)), torch.tensor(np.abs(w)),
                                       stride=2, padding=1, groups=2).numpy()
        assert (np.abs(got - want) <= 2 * 38 * 2.0 ** -23 * s + 2.0 ** -126).all(), target


def test_default_passes_keep_a_small_cnn_training_graph_exact():
    """conv -> relu -> max_pool -> conv (backward direction) -> mul, differentiated, through the
    default pass pipeline: numpy and c bit for bit with the reference, onnx within 1e-5."""
    rng = np.random.default_rng(12)
    g = gradc.Graph("cnn")
    x = g.input("x", "float32", ("N", 3, 8, 8))
    w1 = g.input("w1", "float32", (4, 3, 3, 3))
    b1 = g.input("b1", "float32", (1, 4, 1, 1))
    w2 = g.input("w2", "float32", (4, 2, 2, 2))
    h = ops.relu(ops.convolution(x, w1, b1, start_padding=(1, 1), end_padding=(1, 1)))
    h = ops.max_pooling(h, (2, 2), (2, 2))
    h = ops.convolution(h, w2, direction="backward", strides=(2, 2))
    g.output(ops.mul(h, h), "y")
    t = gradc.grad(g)
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)), "w1": rng.standard_normal((4, 3, 3, 3)),
             "b1": rng.standard_normal((1, 4, 1, 1)), "w2": rng.standard_normal((4, 2, 2, 2)),
             "grad_y": rng.standard_normal((2, 2, 8, 8))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    want = gradc.compile(t, target="reference", passes=None)(**feeds)
    for target in ("numpy", "c", "onnx"):
        got = gradc.compile(t, target=target)(**feeds)
        for k in want:
            if target == "onnx":
                np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=k)
            else:
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{target} {k}")


def test_backward_direction_with_output_padding_past_the_stride_slices_its_gradient():
    """§10.3: output_padding >= strides (dilation 2, stride 1) makes the forward-direction
    input gradient one longer; a slice crops it to x's shape."""
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((2, 2, 4)), rng.standard_normal((2, 3, 2))
    f = dict(direction="backward", dilations=(2,), output_padding=(1,))
    g = _conv_graph(x, w, None, f)
    assert "slice" in {n.op for n in gradc.grad(g).nodes}
    for name, err, scale in finite_differences(g, {"N": 2}, seed=1):
        assert err <= 1e-6 * (1 + scale), (name, err, scale)
