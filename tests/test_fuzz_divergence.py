"""The onnx harness skips onnxruntime's known divergences only: a Transpose into a MatMul
with a vector (onnxruntime's optimizations multiply the untransposed matrix), and not a
Transpose into a MatMul with a matrix."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from fuzz.harnesses.onnxmodel import _known_divergence


def _model(w: np.ndarray) -> bytes:
    nodes = [helper.make_node("Transpose", ["x"], ["t"]),
             helper.make_node("MatMul", ["t", "w"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_a_transposed_matrix_times_a_vector_is_skipped_and_a_matrix_is_not():
    x = (np.arange(12).reshape(3, 4) / 4.0 - 1).astype(np.float32)
    vec = _model(np.array([1.75, 1.25, 2.0], np.float32))
    assert _known_divergence(vec)
    assert not _known_divergence(_model(np.ones((3, 2), np.float32)))
    basic = ort.SessionOptions()
    basic.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    want = x.T @ np.array([1.75, 1.25, 2.0], np.float32)
    got = ort.InferenceSession(vec, basic, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)  # without the fold it is right
