"""ONNX models of SPEC-training.md §21's reduction and softmax rows (ReduceMean/Max/Min,
GlobalAveragePool, GlobalMaxPool, Softmax, LogSoftmax): the per-converter cases of
test_onnx_format.py, on data whose results are exact in every implementation."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from onnx import helper as oh

from onnx_import_helpers import c64, distinct, make, unary

F32 = np.float32


def reduce_model(op: str, shape: list[int], axes: list[int] | None, opset: int = 18,
                 dtype: Any = F32, **attrs: Any):
    """One Reduce* node: ``axes`` as an input (opset 18) or an attribute (before)."""
    if opset >= 18:
        inits = {"axes": c64(*axes)} if axes is not None else None
        extra = ("axes",) if axes is not None else ()
        return unary(op, shape, attrs, extra=extra, inits=inits, opset=opset, dtype=dtype)
    if axes is not None:
        attrs = dict(attrs, axes=axes)
    return unary(op, shape, attrs, opset=opset, dtype=dtype)


def softmax_model(op: str, shape: list[int], opset: int = 13, **attrs: Any):
    """One Softmax or LogSoftmax node."""
    return unary(op, shape, attrs, opset=opset)


def equal_rows(shape: tuple[int, ...]) -> np.ndarray:
    """Every element along the last axis equal: softmax is exact (1/n) everywhere."""
    lead = int(np.prod(shape[:-1]))
    return np.repeat(np.arange(lead, dtype=F32), shape[-1]).reshape(shape)


def _case(build: Callable[[], Any], feeds: Callable[[], dict]) -> Callable[[], tuple]:
    return lambda: (build(), feeds())


REDUCE_CASES = {
    "ReduceMean": (_case(lambda: reduce_model("ReduceMean", [2, 3, 4], [-1]),
                         lambda: {"x": distinct((2, 3, 4))}), "reduce_mean"),
    "ReduceMax": (_case(lambda: reduce_model("ReduceMax", [2, 3, 4], [0, 2], keepdims=0),
                        lambda: {"x": distinct((2, 3, 4))}), "reduce_max"),
    "ReduceMin": (_case(lambda: reduce_model("ReduceMin", [2, 3, 4], [1], opset=13),
                        lambda: {"x": distinct((2, 3, 4))}), "reduce_min"),
    "GlobalAveragePool": (_case(lambda: unary("GlobalAveragePool", [2, 3, 2, 2]),
                                lambda: {"x": distinct((2, 3, 2, 2))}), "reduce_mean"),
    "GlobalMaxPool": (_case(lambda: unary("GlobalMaxPool", [2, 3, 2, 2]),
                            lambda: {"x": distinct((2, 3, 2, 2))}), "reduce_max"),
    "Softmax": (_case(lambda: softmax_model("Softmax", [2, 3, 4]),
                      lambda: {"x": equal_rows((2, 3, 4))}), "softmax"),
    "LogSoftmax": (_case(lambda: softmax_model("LogSoftmax", [2, 3, 4], opset=11, axis=2),
                         lambda: {"x": equal_rows((2, 3, 4))}), "log_softmax"),
}

__all__ = ["REDUCE_CASES", "reduce_model", "softmax_model", "equal_rows", "make", "oh"]
