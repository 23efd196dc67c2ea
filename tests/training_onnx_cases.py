"""ONNX models of the training family's converters (Dropout, SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss) for tests/test_onnx_format.py's CASES and the import tests."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

ELEM = {np.dtype(np.float32): TP.FLOAT, np.dtype(np.float64): TP.DOUBLE,
        np.dtype(np.float16): TP.FLOAT16, np.dtype(np.int64): TP.INT64,
        np.dtype(np.int32): TP.INT32, np.dtype(np.bool_): TP.BOOL, np.dtype(np.uint32): TP.UINT32}
IR = {7: 3, 10: 5, 11: 6, 12: 7, 13: 7, 17: 8, 18: 8, 21: 10, 22: 10}


def model(nodes: list, inputs: dict, outputs: dict, inits: dict | None = None,
          opset: int = 13) -> Any:
    """A model: inputs as {name: (dtype, shape)}, outputs as {name: dtype}, inits arrays."""
    tensors = [numpy_helper.from_array(np.asarray(a), k) for k, a in (inits or {}).items()]
    ins = [oh.make_tensor_value_info(k, ELEM[np.dtype(d)], s) for k, (d, s) in inputs.items()]
    outs = [oh.make_tensor_value_info(k, ELEM[np.dtype(d)], None) for k, d in outputs.items()]
    m = oh.make_model(oh.make_graph(nodes, "t", ins, outs, tensors),
                      opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = IR[opset]
    return m


def dropout_model(training: bool | None, ratio: float | None = 0.3, opset: int = 13,
                  shape: tuple = (2, 3, 4), mask: bool = True, count: int = 1) -> Any:
    """``count`` chained Dropouts (constant ratio / training_mode inputs when given)."""
    inits: dict = {}
    extra = []
    if opset >= 12:
        extra = ["r" if ratio is not None else "", "tm" if training is not None else ""]
        if ratio is not None:
            inits["r"] = np.array(ratio, np.float32)
        if training is not None:
            inits["tm"] = np.array(training)
    while extra and not extra[-1]:
        extra.pop()
    nodes, outs, src = [], {}, "x"
    for i in range(count):
        y = "y" if i == count - 1 else f"h{i}"
        node_outs = [y] + ([f"mask{i}"] if mask else [])
        nodes.append(oh.make_node("Dropout", [src, *extra], node_outs, name=f"drop{i}"))
        if mask:
            outs[f"mask{i}"] = np.bool_
        src = y
    outs["y"] = np.float32
    return model(nodes, {"x": (np.float32, list(shape))}, outs, inits, opset)


def dropout_case() -> tuple[Any, dict]:
    """An inference-mode Dropout with its mask (the input, and all-true)."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5
    return dropout_model(False), {"x": x}


def loss_model(op: str, shape: tuple, labels_dtype: Any = np.int64, weights: bool = True,
               opset: int = 13, log_prob: bool = False, **attrs: Any) -> Any:
    """One loss node: scores/log probabilities ``x``, labels ``t``, optional weights ``w``."""
    ins = ["x", "t"] + (["w"] if weights else [])
    outs = ["loss"] + (["log_prob"] if log_prob else [])
    node = oh.make_node(op, ins, outs, name="loss_node", **attrs)
    inputs = {"x": (np.float32, list(shape)), "t": (labels_dtype, [shape[0], *shape[2:]])}
    if weights:
        inputs["w"] = (np.float32, [shape[1]])
    outputs = {"loss": np.float32} | ({"log_prob": np.float32} if log_prob else {})
    return model([node], inputs, outputs, opset=opset)


def nll_case() -> tuple[Any, dict]:
    """NegativeLogLikelihoodLoss with weights and an ignored label (dyadic data: exact sums)."""
    x = (np.arange(24, dtype=np.float32).reshape(3, 4, 2) - 12) / 4
    t = np.array([[1, 3], [-1, 2], [0, 0]], np.int64)
    w = np.array([1, 2, 0.5, 4], np.float32)
    return loss_model("NegativeLogLikelihoodLoss", (3, 4, 2), ignore_index=-1), \
        {"x": x, "t": t, "w": w}


def sce_case() -> tuple[Any, dict]:
    """SoftmaxCrossEntropyLoss with weights and its log_prob output (uniform scores: exact)."""
    x = np.zeros((2, 4, 2), np.float32)
    t = np.array([[1, 3], [0, 2]], np.int64)
    w = np.array([1, 2, 4, 8], np.float32)
    m = loss_model("SoftmaxCrossEntropyLoss", (2, 4, 2), log_prob=True, reduction="none")
    return m, {"x": x, "t": t, "w": w}
