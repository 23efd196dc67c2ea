"""ONNX import of Gemm and MatMul (SPEC-training.md §11.3, §21) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import gradc

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper as oh  # noqa: E402

from onnx_import_helpers import cross_check, distinct, make, only_node  # noqa: E402

F32, F64 = np.float32, np.float64


def _at(model, opset):
    """The model at an opset the helpers have no IR version for (7: IR 3, 1: use 6's)."""
    model.opset_import[0].version = opset
    return model


@pytest.mark.parametrize("opset", [7, 9, 11, 13])
@pytest.mark.parametrize("c_shape", [None, [], [4], [1, 4], [3, 1], [3, 4]])
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_matches_onnxruntime(opset, c_shape, trans):
    if c_shape is None and opset < 11:
        pytest.skip("C is required before opset 11")
    ta, tb = trans
    a_shape, b_shape = ([2, 3] if ta else [3, 2]), ([4, 2] if tb else [2, 4])
    ins = {"a": (F32, a_shape), "b": (F32, b_shape)}
    feeds = {"a": distinct(a_shape) / 4, "b": distinct(b_shape) / 4}
    names = ["a", "b"]
    if c_shape is not None:
        ins["c"] = (F32, c_shape)
        feeds["c"] = distinct(c_shape) / 2 if c_shape else np.array(0.75, F32)
        names.append("c")
    node = oh.make_node("Gemm", names, ["y"], transA=ta, transB=tb, alpha=0.5, beta=1.5)
    model = _at(make([node], ins, {"y": F32}, opset=9), opset)
    g = gradc.from_onnx(model)
    n = only_node(g, "gemm")
    assert n.attrs["trans_a"] == bool(ta) and n.attrs["trans_b"] == bool(tb)
    cross_check(model, feeds)


def test_gemm_initializer_weights_become_parameters_with_gradients():
    w = distinct((4, 3)) / 8
    node = oh.make_node("Gemm", ["x", "w", "bias"], ["y"], transB=1)
    model = make([node], {"x": (F32, ["N", 3])}, {"y": F32},
                 inits={"w": w, "bias": np.arange(4, dtype=F32)}, opset=13)
    g = gradc.from_onnx(model)
    assert {p.name for p in g.parameters} >= {"w", "bias"}
    t = gradc.grad(g, wrt="parameters")
    out = gradc.compile(t, target="c")(x=np.ones((2, 3), F32), grad_y=np.ones((2, 4), F32))
    np.testing.assert_array_equal(out["grad_w"], np.full((4, 3), 2, F32))
    np.testing.assert_array_equal(out["grad_bias"], np.full((4,), 2, F32))


@pytest.mark.parametrize("opset", [6, 9, 13])
@pytest.mark.parametrize("a_shape, b_shape", [
    ([3], [3]), ([3], [3, 2]), ([2, 3], [3]), ([4, 2, 3], [3]), ([3], [2, 3, 4]),
    ([2, 3], [3, 4]), ([2, 2, 3], [3, 4]), ([2, 3], [5, 3, 2]), ([2, 1, 2, 3], [3, 3, 2]),
])
def test_matmul_matches_onnxruntime(opset, a_shape, b_shape):
    model = make([oh.make_node("MatMul", ["a", "b"], ["y"])],
                 {"a": (F32, a_shape), "b": (F32, b_shape)}, {"y": F32}, opset=opset)
    g = gradc.from_onnx(model)
    assert g.outputs[0].type.shape == np.matmul(np.ones(a_shape), np.ones(b_shape)).shape
    cross_check(model, {"a": distinct(a_shape) / 4, "b": distinct(b_shape) / 4})


def test_matmul_keeps_a_symbolic_batch():
    model = make([oh.make_node("MatMul", ["a", "b"], ["y"])],
                 {"a": (F64, ["N", 3]), "b": (F64, [3, 2])}, {"y": F64}, opset=13)
    g = gradc.from_onnx(model)
    assert g.outputs[0].type.shape == ("N", 2)
    cross_check(model, {"a": distinct((5, 3), F64), "b": distinct((3, 2), F64)})


@pytest.mark.parametrize("op, ins, match", [
    ("MatMul", {"a": (np.int32, [2, 3]), "b": (np.int32, [3, 2])}, "input A: dtype int32"),
    ("Gemm", {"a": (F32, [2, 2, 3]), "b": (F32, [3, 2])}, "input A: rank 3"),
    ("Gemm", {"a": (F32, [2, 3]), "b": (F32, [3, 2]), "c": (F32, [1, 2, 2])}, "input C: rank 3"),
    ("MatMul", {"a": (F32, [1] * 8 + [2, 3]), "b": (F32, [3, 2])}, "rank 10"),
])
def test_refused_forms_name_node_and_input(op, ins, match):
    model = make([oh.make_node(op, list(ins), ["y"], name="mm")], ins,
                 {"y": list(ins.values())[0][0]}, opset=13)
    with pytest.raises(gradc.UnsupportedError, match=match) as e:
        gradc.from_onnx(model)
    assert "mm" in str(e.value)
