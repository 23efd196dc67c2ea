"""ONNX import cases of Gemm, MatMul and AveragePool, for tests/test_onnx_format.py's CASES."""

from __future__ import annotations

import numpy as np
from onnx import helper as oh

from onnx_import_helpers import distinct, make, unary

F32 = np.float32


def gemm_case():
    """Gemm with transB, alpha, beta and a (N,) C (the Linear layer's export)."""
    node = oh.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)
    model = make([node], {"a": (F32, [2, 3]), "b": (F32, [4, 3]), "c": (F32, [4])}, {"y": F32},
                 opset=13)
    return model, {"a": distinct((2, 3)) / 4, "b": distinct((4, 3)) / 4, "c": distinct((4,))}


def matmul_case():
    """MatMul of a rank-3 batch by a matrix."""
    node = oh.make_node("MatMul", ["a", "b"], ["y"])
    model = make([node], {"a": (F32, [2, 2, 3]), "b": (F32, [3, 4])}, {"y": F32}, opset=13)
    return model, {"a": distinct((2, 2, 3)) / 4, "b": distinct((3, 4)) / 4}


def average_pool_case():
    """AveragePool with padding and count_include_pad."""
    model = unary("AveragePool", [1, 2, 5, 5], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                "pads": [1, 1, 1, 1], "count_include_pad": 1})
    return model, {"x": distinct((1, 2, 5, 5)) / 4}


GEMM_CASES = {
    "Gemm": (gemm_case, "gemm"),
    "MatMul": (matmul_case, "gemm"),
    "AveragePool": (average_pool_case, "average_pooling"),
}
