"""ONNX import of AveragePool (SPEC-training.md §21) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import gradc

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_import_helpers import cross_check, distinct, only_node, unary  # noqa: E402

F32 = np.float32


@pytest.mark.parametrize("opset", [7, 10, 11, 19])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [0, 1, 1, 0], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID"},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
     "count_include_pad": 1},
    {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1]},
])
def test_average_pool_matches_onnxruntime(opset, attrs):
    if opset < 10 and "ceil_mode" in attrs or opset < 19 and "dilations" in attrs:
        pytest.skip("attribute added in a later opset")
    model = unary("AveragePool", [2, 2, 7, 6], attrs, opset=max(opset, 9))
    model.opset_import[0].version = opset
    g = gradc.from_onnx(model)
    n = only_node(g, "average_pooling")
    assert n.attrs["include_padding"] == bool(attrs.get("count_include_pad", 0))
    cross_check(model, {"x": distinct((2, 2, 7, 6)) / 4}, exact=False)


@pytest.mark.parametrize("shape, attrs", [
    ([1, 2, 4, 5, 6], {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2], "pads": [0, 1, 1] * 2}),
    ([1, 2, 9], {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "count_include_pad": 1}),
    ([1, 2, 9], {"kernel_shape": [2], "strides": [2], "ceil_mode": 1}),
])
def test_3d_and_1d_average_pool_match_onnxruntime(shape, attrs):
    model = unary("AveragePool", shape, attrs, opset=19)
    cross_check(model, {"x": distinct(shape) / 4}, exact=False)


@pytest.mark.parametrize("shape, attrs, dtype, match", [
    ([1, 1, 2, 2, 2, 2], {"kernel_shape": [1, 1, 1, 1]}, F32, "input X: rank 6"),
    ([1, 2, 4, 4], {"kernel_shape": [2, 2]}, np.int32, "input X: dtype int32"),
    ([1, 2, 4, 4], {"kernel_shape": [2, 2], "auto_pad": "SAME"}, F32, "attribute auto_pad"),
])
def test_refused_forms_name_node_and_attribute(shape, attrs, dtype, match):
    model = unary("AveragePool", shape, attrs, dtype=dtype)
    with pytest.raises(gradc.UnsupportedError, match=match) as e:
        gradc.from_onnx(model)
    assert "AveragePool" in str(e.value)


def test_rejected_arguments_raise_verify_errors():
    model = unary("AveragePool", [1, 2, 4, 4], {"kernel_shape": [2, 0]})
    with pytest.raises(gradc.VerifyError, match=r"window_size\[1\]"):
        gradc.from_onnx(model)
