"""ONNX models for the converters of SPEC-transformers §28.1 (LayerNormalization,
RMSNormalization, Gather of computed or parameter data): the importer's CASES entries
(tests/test_onnx_format.py) and the import tests of test_normalization.py and test_gather.py.
Their values are dyadic, so onnxruntime's own order of the sums gives the same bits."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper as oh

from onnx_import_helpers import make

F32 = np.float32
Case = tuple[Any, dict[str, np.ndarray]]

# T-MVN-1 and T-MVN-2 of SPEC-transformers §30.1
LN_X = np.array([[1, 7, 1, 7], [0, 0, 6, 6]], F32)
LN_SCALE, LN_BIAS = np.array([1, 2, 0.5, -1], F32), np.array([0, 1, -1, 0.5], F32)
RMS_X = np.array([[1, 1, 3, 3], [-1, 1, -3, 3]], F32)
RMS_SCALE = np.array([2, 1, 1, 0.5], F32)


def layer_norm_case(outputs: int = 3, opset: int = 17, **attrs: Any) -> Case:
    """LayerNormalization-17 of T-MVN-1 (epsilon 7), with ``outputs`` graph outputs."""
    names = ["y", "mean", "inv"]
    attrs = {"axis": -1, "epsilon": 7.0, **attrs}
    node = oh.make_node("LayerNormalization", ["x", "s", "b"], names, name="ln", **attrs)
    m = make([node], {"x": (F32, [2, 4])}, {n: F32 for n in names[:outputs]},
             {"s": LN_SCALE, "b": LN_BIAS}, opset=opset)
    return m, {"x": LN_X}


def rms_norm_case() -> Case:
    """RMSNormalization-23 of T-MVN-2 (epsilon 11)."""
    node = oh.make_node("RMSNormalization", ["x", "s"], ["y"], name="rms", axis=-1,
                        epsilon=11.0)
    m = make([node], {"x": (F32, [2, 4])}, {"y": F32}, {"s": RMS_SCALE}, opset=17)
    m.opset_import[0].version = 23
    m.ir_version = 11
    return m, {"x": RMS_X}


def embedding_case() -> Case:
    """Gather(W, ids): a float initializer (a parameter) read at computed token ids."""
    node = oh.make_node("Gather", ["W", "ids"], ["y"], name="emb", axis=0)
    m = make([node], {"ids": (np.int64, [2, 3])}, {"y": F32},
             {"W": np.arange(20, dtype=F32).reshape(5, 4) - 7.5})
    return m, {"ids": np.array([[0, 4, 2], [1, 1, -1]], np.int64)}


NORM_CASES: dict[str, tuple[Any, str]] = {
    "LayerNormalization": (layer_norm_case, "mean_variance_normalization"),
    "RMSNormalization": (rms_norm_case, "mean_variance_normalization"),
    "Gather": (embedding_case, "gather"),
}
