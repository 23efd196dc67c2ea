"""Import cases of the transformer converters (CastLike, Attention) for
``test_onnx_format.CASES``, and the Attention models of SPEC-transformers T-AT-3."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as oh

from onnx_import_helpers import make

F32 = np.float32
# T-AT-1 / T-AT-3 (SPEC-transformers §30.4): one batch, one head, scale 1; query 1 sees no key
Q = np.array([[1, 2], [0.5, -1]], F32).reshape(1, 1, 2, 2)
K = np.array([[1, 0], [0, 1]], F32).reshape(1, 1, 2, 2)
V = np.array([[1, 2], [3, 4]], F32).reshape(1, 1, 2, 2)
MASK = np.array([[True, True], [False, False]])


def attention_model(inputs: dict[str, tuple[int, list[Any]]], outputs: list[str],
                    opset: int = 23, value_info: bool = True, **attrs: Any) -> Any:
    """One ``Attention`` node named ``attn`` over graph inputs (name -> (elem type, shape));
    node inputs in the order given (an empty name skips an optional one)."""
    names = list(inputs)
    ins = [oh.make_tensor_value_info(k, e, s) for k, (e, s) in inputs.items() if k]
    node = oh.make_node("Attention", names, outputs, name="attn", **attrs)
    outs = [oh.make_tensor_value_info(outputs[0], TP.FLOAT, None)]
    if not value_info:  # inputs whose types the model does not state
        ins = [oh.make_tensor_value_info(k, 0, None) for k in names if k]
    m = oh.make_model(oh.make_graph([node], "attention", ins, outs),
                      opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def masked_attention() -> tuple[Any, dict[str, np.ndarray]]:
    """T-AT-3's first model: 4-D, scale 1, the bool mask of T-AT-1."""
    f, b = (TP.FLOAT, [1, 1, 2, 2]), (TP.BOOL, [2, 2])
    m = attention_model({"Q": f, "K": f, "V": f, "mask": b}, ["Y"], scale=1.0)
    return m, {"Q": Q, "K": K, "V": V, "mask": MASK}


def causal_attention() -> tuple[Any, dict[str, np.ndarray]]:
    """T-AT-3's second model: is_causal 1, no mask, the default scale."""
    f = (TP.FLOAT, [1, 1, 3, 2])
    m = attention_model({"Q": f, "K": f, "V": f}, ["Y"], is_causal=1)
    q = np.array([[1, 0], [0, 1], [1, 1]], F32).reshape(1, 1, 3, 2)
    k = np.array([[1, 2], [0, 1], [2, 0]], F32).reshape(1, 1, 3, 2)
    v = np.array([[1, 0], [0, 1], [1, 1]], F32).reshape(1, 1, 3, 2)
    return m, {"Q": q, "K": k, "V": v}


def cast_like_case() -> tuple[Any, dict[str, np.ndarray]]:
    """CastLike of a computed float32 value to a float64 input's type."""
    m = make([oh.make_node("CastLike", ["x", "like"], ["y"], name="n")],
             {"x": (F32, [2, 3]), "like": (np.float64, [1])}, {"y": np.float64}, opset=19)
    return m, {"x": np.array([[0.5, -1.25, 3], [1e30, -0.0, 7]], F32),
               "like": np.zeros(1, np.float64)}


def gather_nd_case() -> tuple[Any, dict[str, np.ndarray]]:
    """GatherND of a computed value at known index pairs (a padding mask picked per batch row
    and key, as transformers' masks export with the dynamo exporter)."""
    idx = np.array([[[0, 1], [1, -1]], [[1, 0], [0, 2]]], np.int64)
    m = make([oh.make_node("Relu", ["x"], ["r"]), oh.make_node("GatherND", ["r", "i"], ["y"])],
             {"x": (F32, [2, 3, 2])}, {"y": F32}, {"i": idx})
    return m, {"x": np.arange(-5, 7, dtype=F32).reshape(2, 3, 2)}


TRANSFORMER_CASES: dict[str, tuple[Any, str]] = {
    "CastLike": (cast_like_case, "cast"),
    "GatherND": (gather_nd_case, "gather"),
    "Attention": (masked_attention, "softmax"),
}
