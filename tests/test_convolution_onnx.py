"""ONNX import of Conv and ConvTranspose (SPEC-training.md §21), export of the §10 ops.

Imported graphs are run on the reference target and compared with onnxruntime on the original
model; refused forms raise UnsupportedError naming the node and the attribute; exported models
(forward and training graphs, float32 and float64) pass ``check_model(full_check=True)``.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from onnx_import_helpers import cross_check, run_ort  # noqa: E402

IR_VERSIONS = {1: 3, 11: 6, 18: 8, 22: 10}
RNG = np.random.default_rng(21)


def model(op, x_shape, w_shape, attrs=None, bias=True, opset=18, inits=(), x_dims=None):
    """One Conv/ConvTranspose node ``y = op(x, w[, b])``; names in ``inits`` are initializers."""
    ins = ["x", "w"] + (["b"] if bias else [])
    bias_len = w_shape[0] if op == "Conv" else w_shape[1] * (attrs or {}).get("group", 1)
    shapes = {"x": list(x_dims or x_shape), "w": list(w_shape), "b": [bias_len]}
    arrays = {"x": RNG.standard_normal(x_shape).astype(np.float32),
              "w": RNG.standard_normal(w_shape).astype(np.float32),
              "b": RNG.standard_normal(bias_len).astype(np.float32)}
    node = oh.make_node(op, ins, ["y"], name="conv", **(attrs or {}))
    inputs = [oh.make_tensor_value_info(k, TP.FLOAT, shapes[k]) for k in ins if k not in inits]
    tensors = [numpy_helper.from_array(arrays[k], k) for k in ins if k in inits]
    m = oh.make_model(oh.make_graph([node], "g", inputs,
                                    [oh.make_tensor_value_info("y", TP.FLOAT, None)], tensors),
                      opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = IR_VERSIONS[opset]
    return m, {k: arrays[k] for k in ins if k not in inits}


def check(m, feeds):
    return cross_check(m, feeds, exact=False, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [1, 11, 22])
def test_conv_opsets(opset):
    check(*model("Conv", (2, 4, 7, 6), (6, 2, 3, 2), dict(group=2, strides=[2, 1],
                                                          dilations=[1, 2],
                                                          pads=[1, 0, 2, 1]), opset=opset))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(auto_pad):
    m, feeds = model("Conv", (1, 2, 7, 8), (3, 2, 4, 3), dict(auto_pad=auto_pad, strides=[2, 3]))
    check(m, feeds)


@pytest.mark.parametrize("shape,w", [((2, 3, 11), (4, 3, 3)), ((1, 2, 5, 4, 6), (2, 2, 2, 3, 2))])
def test_conv_1d_and_3d_with_initializer_weights(shape, w):
    m, feeds = model("Conv", shape, w, dict(pads=[1] * (2 * (len(shape) - 2))), inits=("w", "b"))
    g = gradc.from_onnx(m)
    assert "convolution" in {n.op for n in g.nodes}
    check(m, feeds)


def test_conv_symbolic_batch_and_kernel_shape():
    m, feeds = model("Conv", (3, 2, 5, 5), (4, 2, 3, 3), dict(kernel_shape=[3, 3]),
                     x_dims=("N", 2, 5, 5))
    g = gradc.from_onnx(m)
    assert g.outputs[0].type.shape == ("N", 4, 3, 3)
    check(m, feeds)


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 2], output_padding=[1, 1], pads=[1, 0, 0, 1]),
    dict(strides=[2, 1], dilations=[2, 3], group=2, output_padding=[1, 0]),
    dict(strides=[2, 2], output_shape=[8, 5]),
    dict(strides=[2, 2], output_shape=[8, 5], auto_pad="SAME_UPPER"),
    dict(strides=[3, 2], auto_pad="SAME_UPPER"),
    dict(strides=[3, 2], auto_pad="SAME_LOWER"),
    dict(strides=[2, 2], auto_pad="VALID"),
], ids=["padding", "groups-dilations", "output_shape", "output_shape-upper", "same-upper",
        "same-lower", "valid"])
def test_conv_transpose(attrs):
    check(*model("ConvTranspose", (2, 4, 4, 3), (4, 3, 3, 2), attrs))


@pytest.mark.parametrize("op,attrs,field", [
    ("Conv", dict(auto_pad="SAME"), "auto_pad"),
    ("ConvTranspose", dict(output_shape=[30, 30]), "output_shape"),
])
def test_refused_forms_name_node_and_attribute(op, attrs, field):
    m, _ = model(op, (1, 2, 4, 4), (2, 2, 3, 3), attrs)
    with pytest.raises(gradc.UnsupportedError) as e:
        gradc.from_onnx(m)
    assert "'conv'" in str(e.value) and f"attribute {field}" in str(e.value)


def test_symbolic_channels_and_rank_are_unsupported():
    m, _ = model("Conv", (1, 2, 4, 4), (2, 2, 3, 3), x_dims=(1, "C", 4, 4))
    with pytest.raises(gradc.UnsupportedError, match="'conv'.*input X"):
        gradc.from_onnx(m)
    m, _ = model("Conv", (1, 2, 4, 4, 1, 1), (2, 2, 3, 3, 1, 1))
    with pytest.raises(gradc.UnsupportedError, match="'conv'.*rank 6"):
        gradc.from_onnx(m)


def test_wrong_kernel_shape_and_bias_are_verify_errors():
    m, _ = model("Conv", (1, 2, 4, 4), (2, 2, 3, 3), dict(kernel_shape=[2, 2]))
    with pytest.raises(gradc.VerifyError, match="'conv'.*kernel_shape"):
        gradc.from_onnx(m)
    m, _ = model("Conv", (1, 2, 4, 4), (2, 2, 3, 3), dict(group=3))
    with pytest.raises(gradc.VerifyError, match="group_count"):
        gradc.from_onnx(m)


def test_imported_conv_differentiates_on_every_target():
    m, feeds = model("Conv", (2, 2, 6, 6), (4, 1, 3, 3), dict(group=2, pads=[1, 1, 1, 1],
                                                              strides=[2, 2]))
    t = gradc.grad(gradc.from_onnx(m))
    feeds["grad_y"] = RNG.standard_normal((2, 4, 3, 3)).astype(np.float32)
    want = gradc.compile(t, target="reference", passes=None)(**feeds)
    for target in ("numpy", "c"):
        got = gradc.compile(t, target=target, passes=None)(**feeds)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    got = gradc.compile(t, target="onnx", passes=None)(**feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_exported_training_graph_is_standard_onnx(dtype, direction):
    g = gradc.Graph("c")
    x = g.input("x", dtype, ("N", 2, 5, 4))
    w = g.input("w", dtype, (2, 2, 2, 3))
    b = g.input("b", dtype, (1, 2, 1, 1))
    g.output(ops.convolution(x, w, b, "convolution", direction, (2, 1), (1, 2), (1, 0), (0, 1),
                             (1, 0) if direction == "backward" else None), "y")
    t = gradc.grad(g)
    exported = gradc.to_onnx(t)
    onnx.checker.check_model(exported, full_check=True)
    assert {o.domain for o in exported.opset_import} == {""}
    assert {n.domain for n in exported.graph.node} <= {""}
    rng = np.random.default_rng(4)
    y_shape = (3,) + t.inputs[-1].type.shape[1:]
    feeds = {"x": rng.standard_normal((3, 2, 5, 4)).astype(dtype),
             "w": rng.standard_normal((2, 2, 2, 3)).astype(dtype),
             "b": rng.standard_normal((1, 2, 1, 1)).astype(dtype),
             "grad_y": rng.standard_normal(y_shape).astype(dtype)}
    want = gradc.compile(t, target="reference", passes=None)(**feeds)
    got = run_ort(exported, feeds)
    tol = {"float32": 1e-5, "float64": 1e-12, "float16": 4e-3}[dtype]
    for k in want:
        np.testing.assert_allclose(got[k].astype(np.float64), want[k].astype(np.float64),
                                   rtol=tol, atol=tol * 4, err_msg=k)


# -- docs/conformance.md, "Convolution" --------------------------------------------------------

def _one_node(op, attrs, x, w):
    node = oh.make_node(op, ["x", "w"], ["y"], name="conv", **attrs)
    ins = [oh.make_tensor_value_info(k, TP.FLOAT, list(v.shape)) for k, v in (("x", x), ("w", w))]
    m = oh.make_model(oh.make_graph([node], "g", ins,
                                    [oh.make_tensor_value_info("y", TP.FLOAT, None)]),
                      opset_imports=[oh.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def test_padding_taps_are_skipped_where_frameworks_multiply():
    x = np.array([1, 2, 3], np.float32).reshape(1, 1, 3)
    w = np.array([np.inf, 1], np.float32).reshape(1, 1, 2)
    for target in ("reference", "numpy", "c"):
        g = gradc.Graph("p")
        g.output(ops.convolution(g.input("x", "float32", x.shape),
                                 g.input("w", "float32", w.shape), start_padding=(1,)), "y")
        got = gradc.compile(g, target=target, passes=None)(x=x, w=w)["y"]
        np.testing.assert_array_equal(got.reshape(-1), [1, np.inf, np.inf])
    ort = run_ort(_one_node("Conv", {"pads": [1, 0]}, x, w), {"x": x, "w": w})["y"]
    assert np.isnan(ort.reshape(-1)[0]) and np.isinf(ort.reshape(-1)[1:]).all()
    torch = pytest.importorskip("torch")
    t = torch.nn.functional.conv1d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
    assert np.isnan(t.reshape(-1)[0])


def test_output_padding_below_dilation_where_onnxruntime_refuses():
    x = np.array([1, 2, 3], np.float32).reshape(1, 1, 3)
    w = np.array([1, 10], np.float32).reshape(1, 1, 2)
    want = np.array([1, 2, 13, 20, 30, 0], np.float32).reshape(1, 1, 6)
    for target in ("reference", "numpy", "c", "onnx"):
        g = gradc.Graph("t")
        g.output(ops.convolution(g.input("x", "float32", x.shape),
                                 g.input("w", "float32", w.shape), direction="backward",
                                 dilations=(2,), output_padding=(1,)), "y")
        got = gradc.compile(g, target=target, passes=None)(x=x, w=w)["y"]
        np.testing.assert_array_equal(got, want)
    with pytest.raises(Exception, match="output_padding"):
        run_ort(_one_node("ConvTranspose", {"dilations": [2], "output_padding": [1]}, x, w),
                {"x": x, "w": w})
    torch = pytest.importorskip("torch")
    t = torch.nn.functional.conv_transpose1d(torch.tensor(x), torch.tensor(w), dilation=2,
                                             output_padding=1)
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("opset", [1, 11, 22])
@pytest.mark.parametrize("shape,w,attrs", [
    ((2, 3, 7), (3, 2, 3), dict(strides=[2], output_padding=[1], pads=[1, 0])),
    ((1, 2, 3, 2, 4), (2, 1, 2, 2, 3), dict(strides=[1, 2, 2], dilations=[2, 1, 1], group=2)),
], ids=["1d", "3d"])
def test_conv_transpose_1d_3d_and_opsets(opset, shape, w, attrs):
    check(*model("ConvTranspose", shape, w, attrs, opset=opset))
