"""ONNX import plumbing of issue 11: initializers as parameters, static shape subgraphs folded
at import, Shape/Gather/ConstantOfShape/Expand, 1-D pooling through a unit axis, grouped
errors. Each import is checked against onnxruntime on the original model."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import gradc

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402

from onnx_import_helpers import c64, distinct, make, run_ort  # noqa: E402

F32 = np.float32


def agrees(model, feeds, targets=("reference", "c")):
    """The imported graph on each target equals onnxruntime on the original model."""
    g = gradc.from_onnx(model)
    want = run_ort(model, feeds)
    for t in targets:
        got = gradc.compile(g, t)(**feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-7)
    return g


# -- initializers: parameters or constants ------------------------------------------------------

def _weights_model(dtype=F32):
    nodes = [oh.make_node("Mul", ["x", "w"], ["m"]), oh.make_node("Add", ["m", "k"], ["a"]),
             oh.make_node("Clip", ["a", "lo", "hi"], ["c"]),
             oh.make_node("Reshape", ["c", "shape"], ["y"])]
    inits = {"w": np.array([0.5, -2.0, 1.5], dtype), "k": np.array([1, 2, 3], np.int64),
             "lo": np.array(-1.0, dtype), "hi": np.array(2.0, dtype), "shape": c64(3, -1)}
    nodes[1] = oh.make_node("Add", ["m", "kf"], ["a"])
    nodes.insert(1, oh.make_node("Cast", ["k"], ["kf"], to=int(onnx.helper.np_dtype_to_tensor_dtype(
        np.dtype(dtype)))))
    return make(nodes, {"x": (dtype, [2, 3])}, {"y": dtype}, inits)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_float_initializers_become_parameters_others_fold(dtype):
    m = _weights_model(dtype)
    g = agrees(m, {"x": distinct((2, 3), dtype)})
    assert [p.name for p in g.parameters] == ["w"]  # lo, hi: Clip bounds; shape, k: integers
    assert g.parameters[0].value.dtype == dtype
    assert "grad_w" in [v.name for v in gradc.grad(g, "parameters").outputs]


def test_an_initializer_listed_as_input_is_a_parameter():
    m = _weights_model()
    k_input = oh.make_tensor_value_info("k", TP.INT64, [3])
    m.graph.input.append(k_input)
    g = gradc.from_onnx(m)
    assert [p.name for p in g.parameters] == ["w", "k"]
    out = gradc.compile(g, "reference")(x=distinct((2, 3)), k=c64(0, 0, 0))
    assert out["y"].shape == (3, 2)


# -- static shape subgraphs -------------------------------------------------------------------

def _flatten_by_shape(batch):
    """Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): TorchScript's x.view(N, -1)."""
    nodes = [oh.make_node("Shape", ["x"], ["s"]),
             oh.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             oh.make_node("Unsqueeze", ["n", "ax"], ["nn"]),
             oh.make_node("Concat", ["nn", "minus1"], ["target"], axis=0),
             oh.make_node("Reshape", ["x", "target"], ["y"])]
    return make(nodes, {"x": (F32, [batch, 2, 3])}, {"y": F32},
                {"zero": np.array(0, np.int64), "ax": c64(0), "minus1": c64(-1)})


@pytest.mark.parametrize("batch", [2, "N"])
def test_shape_gather_unsqueeze_concat_feed_reshape(batch):
    g = gradc.from_onnx(_flatten_by_shape(batch))
    assert [n.op for n in g.nodes] == ["reshape"]  # the subgraph folded away
    assert g.outputs[0].type.shape == (batch, 6)
    for n in (2, 3):
        x = distinct((n, 2, 3))
        want = run_ort(_flatten_by_shape(batch if batch != 2 else n), {"x": x})["y"]
        got = gradc.compile(g if batch != 2 or n == 2 else gradc.from_onnx(_flatten_by_shape(n)),
                            "c")(x=x)["y"]
        np.testing.assert_array_equal(got, want)


def test_concat_of_constants_gives_resize_scales():
    ones = oh.make_tensor("a", TP.FLOAT, [2], [1, 1])
    twos = oh.make_tensor("b", TP.FLOAT, [2], [2, 2])
    nodes = [oh.make_node("Constant", [], ["a"], value=ones),
             oh.make_node("Constant", [], ["b"], value=twos),
             oh.make_node("Concat", ["a", "b"], ["scales"], axis=0),
             oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")]
    m = make(nodes, {"x": (F32, [1, 2, 3, 3])}, {"y": F32})
    g = agrees(m, {"x": distinct((1, 2, 3, 3))})
    assert [n.op for n in g.nodes] == ["resample"]


def test_constant_of_shape_and_expand_keep_a_symbolic_batch():
    value = oh.make_tensor("v", TP.FLOAT, [1], [0.5])
    nodes = [oh.make_node("Shape", ["x"], ["s"]),
             oh.make_node("ConstantOfShape", ["s"], ["c"], value=value),
             oh.make_node("Add", ["c", "x"], ["a"]),
             oh.make_node("Shape", ["a"], ["s2"]),
             oh.make_node("Expand", ["t", "s2"], ["e"]),
             oh.make_node("Sub", ["a", "e"], ["y"])]
    m = make(nodes, {"x": (F32, ["N", 70]), "t": (F32, [70])}, {"y": F32})
    g = gradc.from_onnx(m)
    assert g.outputs[0].type.shape == ("N", 70)
    assert sum(n.op == "expand" for n in g.nodes) == 2
    for n in (1, 3):
        feeds = {"x": distinct((n, 70)), "t": distinct((70,))}
        np.testing.assert_array_equal(gradc.compile(g, "c")(**feeds)["y"],
                                      run_ort(m, feeds)["y"])


def test_expand_to_the_same_shape_is_an_alias():
    m = make([oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Expand", ["x", "s"], ["e"]),
              oh.make_node("Neg", ["e"], ["y"])], {"x": (F32, ["N", 3])}, {"y": F32})
    assert [n.op for n in gradc.from_onnx(m).nodes] == ["neg"]


@pytest.mark.parametrize("shape,error,match", [
    ([2, -3], gradc.VerifyError, r"input shape: expected dims of at least 0, got \[2, -3\]"),
    ([2, 0], gradc.UnsupportedError, "has a dim of 0"),
])
def test_expand_to_a_negative_or_zero_dim_is_refused_naming_it(shape, error, match):
    """fuzz/regressions/onnx (seed 8181): an Expand whose shape held a negative dim reached
    NumPy (ValueError: negative dimensions) while the importer built the target's shape."""
    m = make([oh.make_node("Expand", ["x", "s"], ["y"])], {"x": (F32, [2, 1])}, {"y": F32},
             {"s": np.array(shape, np.int64)})
    with pytest.raises(error, match=match):
        gradc.from_onnx(m)


def test_a_float_initializer_scaling_a_shape_folds():
    nodes = [oh.make_node("Shape", ["x"], ["s"]),
             oh.make_node("Cast", ["s"], ["f"], to=TP.FLOAT),
             oh.make_node("Mul", ["f", "scale"], ["m"]),
             oh.make_node("Floor", ["m"], ["fl"]),
             oh.make_node("Cast", ["fl"], ["sizes"], to=TP.INT64),
             oh.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest")]
    m = make(nodes, {"x": (F32, [1, 1, 3, 3])}, {"y": F32},
             {"scale": np.array([1, 1, 2, 2], F32)})
    g = agrees(m, {"x": distinct((1, 1, 3, 3))})
    assert g.parameters == () and [n.op for n in g.nodes] == ["resample"]


@pytest.mark.parametrize("nodes,inits,where,what", [
    ([oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Cast", ["s"], ["y"], to=TP.FLOAT,
                                                        name="c")],
     {}, "'c'", "symbolic dim 'N'"),
    ([oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Resize", ["x", "", "", "s"], ["y"],
                                                        name="r")],
     {}, "'r'", "symbolic dim 'N'"),
])
def test_what_does_not_fold_is_named(nodes, inits, where, what):
    m = make(nodes, {"x": (F32, ["N", 3])}, {"y": F32}, inits)
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(m)
    assert where in str(info.value) and what in str(info.value), str(info.value)


# -- 1-D pooling through a unit axis ---------------------------------------------------------------

@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2], "strides": [2]},
    {"kernel_shape": [3], "strides": [2], "pads": [1, 2], "ceil_mode": 1},
    {"kernel_shape": [2], "dilations": [2], "pads": [0, 1]},
])
def test_max_pool_1d_with_indices_matches_onnxruntime(attrs):
    node = oh.make_node("MaxPool", ["x"], ["y", "i"], name="p", **attrs)
    m = make([node], {"x": (F32, [2, 3, 9])}, {"y": F32, "i": np.int64})
    g = agrees(m, {"x": distinct((2, 3, 9))}, ("reference", "numpy", "c", "onnx"))
    assert any(n.op == "max_pooling" for n in g.nodes)


# -- errors ------------------------------------------------------------------------------------

def test_refusals_of_several_nodes_are_grouped_by_op_type():
    nodes = [oh.make_node("LpPool", ["x"], ["a"], kernel_shape=[1], name="lp1"),
             oh.make_node("LpPool", ["x"], ["b"], kernel_shape=[1], name="lp2")]
    m = make(nodes, {"x": (F32, [1, 2, 3])}, {"a": F32, "b": F32})
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(m)
    first, *rest = str(info.value).splitlines()
    assert "LpPool (2 nodes, first 'lp1')" in first
    assert len(rest) == 2 and "'lp2'" in rest[1]


# -- a PyTorch export ---------------------------------------------------------------------------

def test_torchscript_export_with_upsampling_and_1d_pooling():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Upsample(scale_factor=2, mode="bilinear")
            self.pool = nn.AdaptiveMaxPool1d(4)
            self.w = nn.Parameter(torch.linspace(-1, 1, 3).reshape(3, 1, 1))

        def forward(self, x, t):
            y = (self.up(x) * self.w).reshape(x.shape[0], -1)
            return (y - t) * (y - t), self.pool(x.reshape(x.shape[0], x.shape[1], -1))

    net, x, t = Net(), torch.randn(2, 3, 4, 4), torch.randn(2, 192)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x, t), buf, dynamo=False, input_names=["x", "t"],
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          dynamic_axes={"x": {0: "N"}, "t": {0: "N"}})
    m = onnx.load_from_string(buf.getvalue())
    g = agrees(m, {"x": x.numpy(), "t": t.numpy()})
    assert [p.name for p in g.parameters] == ["w"] and g.inputs[0].type.shape[0] == "N"
    grads = gradc.grad(g, "parameters")
    loss_out, pool_out = g.outputs
    seeds = {f"grad_{loss_out.name}": np.ones((2, 192), F32),
             f"grad_{pool_out.name}": np.zeros((2, 3, 4), F32)}
    got = gradc.compile(grads, "c")(x=x.numpy(), t=t.numpy(), **seeds)["grad_w"]
    loss = net(x, t)[0].sum()
    loss.backward()
    np.testing.assert_allclose(got, net.w.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(25))
def test_random_shape_computations_fold_as_onnxruntime_computes_them(seed):
    rng = np.random.default_rng(seed)
    dims = [int(d) for d in rng.integers(1, 6, rng.integers(1, 5))]
    r = len(dims)
    idx = rng.integers(-r, r, rng.integers(1, 4))
    start, end = sorted(rng.integers(-r - 1, r + 2, 2).tolist())
    step = int(rng.choice([1, 2, -1]))
    if step < 0:
        start, end = end, start
    nodes = [oh.make_node("Shape", ["x"], ["s"]),
             oh.make_node("Gather", ["s", "i"], ["g"], axis=0),
             oh.make_node("Slice", ["s", "st", "en", "ax", "sp"], ["sl"]),
             oh.make_node("Unsqueeze", ["r", "zero"], ["ru"]),
             oh.make_node("Concat", ["g", "sl", "ru"], ["c"], axis=0),
             oh.make_node("Mul", ["c", "two"], ["m"]),
             oh.make_node("Sub", ["m", "one"], ["y"])]
    inits = {"i": idx.astype(np.int64), "st": c64(start), "en": c64(end), "ax": c64(0),
             "sp": c64(step), "r": np.array(int(rng.integers(1, 9)), np.int64),
             "zero": c64(0), "two": np.array(2, np.int64), "one": np.array(1, np.int64)}
    m = make(nodes, {"x": (F32, dims)}, {"y": np.int64}, inits)
    g = gradc.from_onnx(m)
    assert [n.op for n in g.nodes] == ["constant"]  # the whole computation folded
    x = np.zeros(dims, F32)
    np.testing.assert_array_equal(gradc.compile(g, "reference")(x=x)["y"],
                                  run_ort(m, {"x": x})["y"])


@pytest.mark.parametrize("seed", range(20))
def test_random_integer_folds_agree_with_onnxruntime(seed):
    rng = np.random.default_rng(100 + seed)
    a = rng.integers(-20, 20, 6).astype(np.int64)
    b = rng.choice([-7, -3, -1, 1, 2, 5], 6).astype(np.int64)
    fill = oh.make_tensor("v", TP.INT64, [1], [int(rng.integers(-3, 4))])
    nodes = [oh.make_node("Div", ["a", "b"], ["q"]),
             oh.make_node("Equal", ["q", "zero"], ["z"]),
             oh.make_node("Where", ["z", "a", "q"], ["w"]),
             oh.make_node("ConstantOfShape", ["three"], ["k"], value=fill),
             oh.make_node("Range", ["lo", "hi", "d"], ["rg"]),
             oh.make_node("Expand", ["one_el", "three"], ["ex"]),
             oh.make_node("Reshape", ["w", "two_three"], ["w2"]),
             oh.make_node("Squeeze", ["one_el", "zero1"], ["sq"]),
             oh.make_node("Unsqueeze", ["sq", "zero1"], ["usq"]),
             oh.make_node("Concat", ["k", "rg", "ex", "usq"], ["cat"], axis=0),
             oh.make_node("Cast", ["cat"], ["y"], to=TP.INT32),
             oh.make_node("Cast", ["w2"], ["y2"], to=TP.INT64)]
    lo, d = int(rng.integers(-5, 5)), int(rng.choice([-2, -1, 1, 3]))
    inits = {"a": a, "b": b, "zero": np.array(0, np.int64), "three": c64(3),
             "lo": np.array(lo, np.int64), "hi": np.array(lo + 4 * d, np.int64),
             "d": np.array(d, np.int64), "one_el": c64(int(rng.integers(-9, 9))),
             "two_three": c64(2, 3), "zero1": c64(0)}
    m = make(nodes, {}, {"y": np.int32, "y2": np.int64}, inits)
    g = gradc.from_onnx(m)
    assert {n.op for n in g.nodes} == {"constant"}
    got, want = gradc.compile(g, "reference")(), run_ort(m, {})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
