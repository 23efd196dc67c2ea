"""ONNX import of SPEC-training.md §21's ReduceMean/Max/Min, GlobalAveragePool, GlobalMaxPool,
Softmax and LogSoftmax rows: each opset's form against onnxruntime on the original model, and
the refused forms (UnsupportedError naming the node and the attribute)."""

from __future__ import annotations

import numpy as np
import pytest

import gradc

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper as oh  # noqa: E402

from onnx_import_helpers import cross_check, distinct, make, run_ort, unary  # noqa: E402
from reduce_onnx_cases import REDUCE_CASES, reduce_model, softmax_model  # noqa: E402

F32 = np.float32
RNG = np.random.default_rng(21)


def _ops(model) -> list[str]:
    return [n.op for n in gradc.from_onnx(model).nodes]


def test_every_case_imports_as_its_op_and_matches_onnxruntime():
    for op_type, (build, gradc_op) in REDUCE_CASES.items():
        model, feeds = build()
        assert gradc_op in _ops(model), op_type
        cross_check(model, feeds)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes,keep", [([1], {}), ([-1, 0], {"keepdims": 0}), (None, {}),
                                       (None, {"keepdims": 0})])
def test_reduce_forms_match_onnxruntime(op, opset, axes, keep):
    model = reduce_model(op, [2, 3, 4], axes, opset=opset, **keep)
    cross_check(model, {"x": distinct((2, 3, 4))})


def test_noop_with_empty_axes_passes_the_input_through():
    model = reduce_model("ReduceMax", [2, 3], None, opset=18, noop_with_empty_axes=1)
    assert "reduce_max" not in _ops(model)
    cross_check(model, {"x": distinct((2, 3))})


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8])
def test_integer_max_min_are_exact(dtype):
    x = RNG.integers(-100 if np.dtype(dtype).kind == "i" else 0, 100, (3, 5)).astype(dtype)
    for op in ("ReduceMax", "ReduceMin"):
        cross_check(reduce_model(op, [3, 5], [1], dtype=dtype), {"x": x})


@pytest.mark.parametrize("op,gradc_op", [("GlobalAveragePool", "reduce_mean"),
                                         ("GlobalMaxPool", "reduce_max")])
@pytest.mark.parametrize("shape", [[2, 3, 5], [1, 2, 2, 3, 2]])
def test_global_pools_over_the_spatial_axes(op, gradc_op, shape):
    model = unary(op, shape)
    g = gradc.from_onnx(model)
    (node,) = [n for n in g.nodes if n.op == gradc_op]
    assert node.attrs["axes"] == tuple(range(2, len(shape))) and node.attrs["keepdims"]
    cross_check(model, {"x": distinct(tuple(shape))})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,attrs,axes", [  # opset 6 runs Softmax-1
    (6, {}, (1, 2)), (11, {}, (1, 2)), (11, {"axis": 2}, (2,)), (11, {"axis": -3}, (0, 1, 2)),
    (13, {}, (2,)), (13, {"axis": 1}, (1,)), (13, {"axis": -3}, (0,))])
def test_softmax_opsets_choose_the_axes(op, opset, attrs, axes):
    model = softmax_model(op, [2, 3, 4], opset=opset, **attrs)
    g = gradc.from_onnx(model)
    (node,) = [n for n in g.nodes if n.op in ("softmax", "log_softmax")]
    assert node.attrs["axes"] == axes
    x = RNG.standard_normal((2, 3, 4)).astype(F32)
    cross_check(model, {"x": x}, exact=False, rtol=1e-6, atol=1e-6)


def test_t_sm_4_onnxruntime_softmax_11_coerces_to_2d():
    x = np.array([[[0, 1], [2, 3]], [[0, 0], [0, 0]]], F32)
    want = run_ort(softmax_model("Softmax", [2, 2, 2], opset=11, axis=1), {"x": x})["y"]
    got = gradc.compile(gradc.from_onnx(softmax_model("Softmax", [2, 2, 2], opset=11, axis=1)),
                        target="reference")(x=x)["y"]
    np.testing.assert_allclose(got, want, rtol=3e-7)
    assert got[1].tolist() == [[0.25, 0.25], [0.25, 0.25]]


def test_non_constant_axes_are_refused_naming_node_and_attribute():
    node = oh.make_node("ReduceMean", ["x", "a"], ["y"], name="mean")
    model = make([node], {"x": (F32, [2, 3]), "a": (np.int64, [1])}, {"y": F32})
    with pytest.raises(gradc.UnsupportedError, match=r"ReduceMean 'mean'.*axes"):
        gradc.from_onnx(model)


def test_integer_mean_and_softmax_are_refused_naming_the_input():
    model = reduce_model("ReduceMean", [2, 3], [1], dtype=np.int32)
    with pytest.raises(gradc.UnsupportedError, match=r"ReduceMean.*data.*int32"):
        gradc.from_onnx(model)


def test_symbolic_batch_dims_flow_through_import():
    node = oh.make_node("LogSoftmax", ["x"], ["y"], name="n", axis=1)
    m = make([node], {"x": (F32, ["N", 5])}, {"y": F32}, opset=13)
    g = gradc.from_onnx(m)
    assert g.nodes[-1].outputs[0].type.shape[0] == "N"
    x = RNG.standard_normal((3, 5)).astype(F32)
    cross_check(m, {"x": x}, exact=False, rtol=1e-6, atol=1e-6)
