"""gradc.grad: the VJP graph's interface, vjp rules, finite differences and PyTorch autograd."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from gradc.check import finite_differences


def ref(g, **feeds):
    return gradc.compile(g, target="reference", passes=None)(**feeds)


def test_interface_order_and_names():
    g = gradc.Graph("f")
    a = g.input("a", "float32", (3,))
    k = g.input("k", "int32", (3,))
    b = g.input("b", "float32", (3,))
    g.output(ops.mul(a, b), "p")
    g.output(ops.relu(b), "q")
    g.output(ops.add(k, k), "kk")
    t = gradc.grad(g)
    # an integer output gets no cotangent input (API.md, issue 11)
    assert [v.name for v in t.inputs] == ["a", "k", "b", "grad_p", "grad_q"]
    assert [v.name for v in t.outputs] == ["p", "q", "kk", "grad_a", "grad_b"]
    assert [v.type for v in t.outputs[3:]] == [a.type, b.type]
    t2 = gradc.grad(g, wrt=["b"])
    assert [v.name for v in t2.outputs] == ["p", "q", "kk", "grad_b"]
    with pytest.raises(gradc.VerifyError, match="wrt"):
        gradc.grad(g, wrt=["k"])
    with pytest.raises(gradc.VerifyError, match="wrt"):
        gradc.grad(g, wrt=["nope"])


def test_values_used_twice_sum_and_unused_inputs_get_zeros():
    g = gradc.Graph("f")
    x = g.input("x", "float32", ("N", 2))
    u = g.input("unused", "float32", ("N", 3))
    g.output(ops.add(ops.relu(x), ops.mul(x, x)), "y")
    t = gradc.grad(g)
    xv = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    out = ref(t, x=xv, unused=np.full((2, 3), np.inf, np.float32),
              grad_y=np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(out["grad_x"], (xv > 0) + 2 * xv)
    np.testing.assert_array_equal(out["grad_unused"], np.zeros((2, 3), np.float32))
    del u


def test_each_forward_op_gets_its_seed_gradient_op():
    from gradc.examples import train_step
    t = train_step()
    ops_used = {n.op for n in t.nodes}
    assert {"relu_grad", "clip_grad", "slice_grad", "max_pooling_grad",
            "resample_grad"} <= ops_used
    assert gradc.parse(str(t)) == t


def test_stride_zero_slice_sums_first():
    g = gradc.Graph("f")
    x = g.input("x", "float64", (3, 2))
    g.output(ops.slice(x, (1, 0), (1, 2), (0, 1), output_sizes=(4, 2)), "y")
    t = gradc.grad(g)
    dy = np.arange(8, dtype=np.float64).reshape(4, 2)
    out = ref(t, x=np.zeros((3, 2)), grad_y=dy)
    np.testing.assert_array_equal(out["grad_x"], [[0, 0], [12, 16], [0, 0]])


def test_broadcast_gradients_reduce():
    g = gradc.Graph("f")
    x = g.input("x", "float64", ("N", 3))
    b = g.input("b", "float64", (3,))
    s = g.input("s", "float64", ())
    g.output(ops.mul(ops.sub(x, b), s), "y")
    t = gradc.grad(g)
    xv, bv = np.arange(6.0).reshape(2, 3), np.array([1.0, 2.0, 3.0])
    dy = np.ones((2, 3))
    out = ref(t, x=xv, b=bv, s=np.array(2.0), grad_y=dy)
    np.testing.assert_array_equal(out["grad_x"], 2 * dy)
    np.testing.assert_array_equal(out["grad_b"], [-4.0, -4.0, -4.0])
    assert out["grad_s"] == np.sum(xv - bv)


@st.composite
def forward_graph(draw):
    """A random float64 forward graph mixing every forward op."""
    g = gradc.Graph("rand")
    n = draw(st.integers(1, 2))
    x = g.input("x", "float64", ("N", 2, 6, 6))
    w = g.input("w", "float64", (1, 2, 1, 1))
    h = ops.mul(x, w)
    steps = draw(st.lists(st.sampled_from(["relu", "clip", "pool", "slice", "resample",
                                           "neg", "add"]), min_size=1, max_size=4))
    for s in steps:
        shape = h.type.shape
        if s == "relu":
            h = ops.relu(h)
        elif s == "clip":
            h = ops.clip(h, -0.5, 0.7)
        elif s == "pool" and min(shape[2:]) >= 2:
            h = ops.max_pooling(h, (2, 2), (1, 2), draw(st.sampled_from([(0, 0), (1, 0)])),
                                (0, 1), dilations=draw(st.sampled_from([(1, 1), (1, 2)]))
                                if shape[3] >= 3 else (1, 1))
        elif s == "slice":
            h = ops.slice(h, (0, 0, 0, 1 if shape[3] > 1 else 0), ("N", 2, shape[2],
                          shape[3] - (1 if shape[3] > 1 else 0)), (1, -1, -1, 2))
        elif s == "resample":
            mode = draw(st.sampled_from(["nearest", "linear"]))
            scales = [0.5, 1.5, 2.0] if shape[2] >= 2 else [1.5, 2.0]  # no 0-size output
            h = ops.resample(h, (1, 1, draw(st.sampled_from(scales)), 1.3), mode)
        elif s == "neg":
            h = ops.neg(h)
        else:
            h = ops.add(h, ops.relu(h))
    g.output(ops.reduce_sum(h, (1, 2, 3)), "loss")
    g.output(h, "h")
    return g, n


@settings(max_examples=40)
@given(forward_graph(), st.integers(0, 1000))
def test_matches_finite_differences(case, seed):
    g, n = case
    for name, err, scale in finite_differences(g, {"N": n}, seed=seed, points=4):
        assert err <= 1e-5 * (1 + scale), (name, err, str(g))




@settings(max_examples=15)
@given(forward_graph(), st.integers(0, 1000))
def test_onnx_and_numpy_targets_give_the_reference_gradients(case, seed):
    """The training graphs that the test above checks against finite differences, run by
    onnxruntime and by the generated NumPy module: float64, within SPEC §1.6's tolerance
    (summing ops) of the reference, with symbols bound at call time."""
    g, n = case
    t = gradc.grad(g)
    rng = np.random.default_rng(seed)
    feeds = {v.name: rng.standard_normal(tuple(n if isinstance(d, str) else d
                                               for d in v.type.shape)) for v in t.inputs}
    want = ref(t, **feeds)
    for target in ("onnx", "numpy"):
        got = gradc.compile(t, target=target)(**feeds)
        for k in want:
            scale = float(np.abs(want[k]).max(initial=0.0))
            np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-13 * (1 + scale),
                                       err_msg=f"{target} {k}")


def _torch():
    return pytest.importorskip("torch")


def test_against_pytorch_autograd():
    torch = _torch()
    F = torch.nn.functional
    rng = np.random.default_rng(3)
    xv = rng.permutation(2 * 3 * 9 * 9).astype(np.float64).reshape(2, 3, 9, 9) / 7 - 10
    g = gradc.Graph("net")
    x = g.input("x", "float64", (2, 3, 9, 9))
    h = ops.relu(x)
    h = ops.max_pooling(h, (3, 3), (2, 2), (1, 1), (1, 1), dilations=(1, 1))
    h = ops.clip(h, 0.3, 5.2)
    h = ops.slice(h, (0, 0, 1, 0), (2, 3, 4, 5), (1, 1, 1, 2))
    h = ops.resample(h, (1, 1, 2, 2), "linear")
    g.output(h, "y")
    t = gradc.grad(g)
    dy = rng.standard_normal(h.type.shape)
    got = ref(t, x=xv, grad_y=dy)

    tx = torch.tensor(xv, requires_grad=True)
    th = F.max_pool2d(torch.relu(tx), 3, 2, 1)
    th = torch.clamp(th, 0.3, 5.2)[:, :, 1:5, 0:5:2]
    th = F.interpolate(th, scale_factor=2, mode="bilinear", align_corners=False)
    th.backward(torch.tensor(dy))
    np.testing.assert_allclose(got["y"], th.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["grad_x"], tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_negative_stride_and_nearest_against_pytorch():
    torch = _torch()
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((1, 2, 5, 6))
    g = gradc.Graph("net")
    x = g.input("x", "float64", (1, 2, 5, 6))
    h = ops.slice(x, (0, 0, 0, 0), (1, 2, 5, 6), (1, 1, -1, -2))
    # PyTorch's "nearest": src = floor(dst * in/out): gradc offsets 0/0, rounding decreasing
    h = ops.resample(h, (1, 1, 2, 3), "nearest", "decreasing", (0, 0, 0, 0), (0, 0, 0, 0))
    g.output(h, "y")
    t = gradc.grad(g)
    dy = rng.standard_normal(h.type.shape)
    got = ref(t, x=xv, grad_y=dy)
    tx = torch.tensor(xv, requires_grad=True)
    th = torch.flip(tx, dims=[2, 3])[:, :, :, ::2]
    th = torch.nn.functional.interpolate(th, scale_factor=(2, 3), mode="nearest")
    th.backward(torch.tensor(dy))
    np.testing.assert_array_equal(got["y"], th.detach().numpy())
    np.testing.assert_array_equal(got["grad_x"], tx.grad.numpy())


# -- names of the new inputs and outputs (issue 25) ---------------------------------------

def _names_graph(*inputs: str) -> gradc.Graph:
    g = gradc.Graph("names")
    vals = [g.input(n, "float32", (3,)) for n in inputs]
    y = vals[0]
    for v in vals[1:]:
        y = ops.mul(y, v)
    g.output(y, "y")
    return g


def test_grad_names_are_grad_name_unless_taken_then_numbered():
    g = _names_graph("x", "grad_x")
    t = gradc.grad(g)
    assert [v.name for v in t.inputs] == ["x", "grad_x", "grad_y"]
    assert [v.name for v in t.outputs] == ["y", "grad_x_1", "grad_grad_x"]
    names = gradc.grad_names(g)
    assert dict(names.cotangents) == {"y": "grad_y"}
    assert dict(names.gradients) == {"x": "grad_x_1", "grad_x": "grad_grad_x"}
    x = np.array([1, 2, 3], np.float32)
    gx = np.array([4, 5, 6], np.float32)
    dy = np.array([1, -1, 2], np.float32)
    out = gradc.compile(t, target="reference")(x=x, grad_x=gx, grad_y=dy)
    np.testing.assert_array_equal(out["grad_x_1"], dy * gx)
    np.testing.assert_array_equal(out["grad_grad_x"], dy * x)


def test_grad_names_count_earlier_new_names_as_taken():
    """Cotangents first, then gradients, each skipping the graph's names and earlier new ones:
    output y's cotangent takes grad_y_1 (grad_y is an input), so input y_1's gradient, whose
    own name grad_y_1 is then taken, gets grad_y_1_1."""
    g = _names_graph("y_1", "grad_y")
    names = gradc.grad_names(g, "inputs")
    assert dict(names.cotangents) == {"y": "grad_y_1"}
    assert dict(names.gradients) == {"y_1": "grad_y_1_1", "grad_y": "grad_grad_y"}
    t = gradc.grad(g)
    assert [v.name for v in t.inputs][-1] == "grad_y_1"
    assert [v.name for v in t.outputs] == ["y", "grad_y_1_1", "grad_grad_y"]


def test_grad_of_a_grad_graph_differentiates_again():
    """A training graph (inputs grad_<output>, outputs grad_<input>) differentiated again: the
    second-order values match finite differences of the first-order graph."""
    g = gradc.Graph("sq")
    x = g.input("x", "float64", (3,))
    g.output(ops.reduce_sum(ops.mul(ops.mul(x, x), x)), "loss")  # sum x^3
    t = gradc.grad(g)  # inputs x, grad_loss; outputs loss, grad_x = 3 x^2 dl
    tt = gradc.grad(t, "inputs")
    names = gradc.grad_names(t, "inputs")
    assert dict(names.cotangents) == {"loss": "grad_loss_1", "grad_x": "grad_grad_x"}
    assert dict(names.gradients) == {"x": "grad_x_1", "grad_loss": "grad_grad_loss"}
    xv = np.array([1.0, -2.0, 0.5])
    c = np.array([0.5, 1.0, -1.0])
    out = gradc.compile(tt, target="reference")(x=xv, grad_loss=np.float64(2.0),
                                                 grad_loss_1=np.float64(0.0), grad_grad_x=c)
    np.testing.assert_allclose(out["grad_x_1"], 6 * xv * 2.0 * c)  # d/dx <3 x^2 dl, c>
    np.testing.assert_allclose(out["grad_grad_loss"], np.sum(3 * xv ** 2 * c))


def test_training_step_with_parameters_named_grad_something():
    """training_step finds the gradient of each parameter through grad_names: a parameter
    literally named grad_w next to w trains (both get their own gradient)."""
    g = gradc.Graph("tw")
    x = g.input("x", "float32", (2,))
    w = g.parameter("w", np.array([1.0, 2.0], np.float32))
    gw = g.parameter("grad_w", np.array([3.0, -1.0], np.float32))
    g.output(ops.reduce_sum(ops.mul(ops.mul(x, w), gw)), "loss")
    step = gradc.training_step(g, gradc.optim.SGD(lr=0.5))
    out = gradc.compile(step, target="reference")(x=np.array([1.0, 1.0], np.float32),
                                                  step=np.array([1], np.int64))
    np.testing.assert_array_equal(out["w.next"], np.array([1 - 1.5, 2 + 0.5], np.float32))
    np.testing.assert_array_equal(out["grad_w.next"], np.array([3 - 0.5, -1 - 1.0],
                                                                np.float32))
