"""Import cases of the activation converters (Gelu, Erf, Sin, Cos, IsNaN) for
``test_onnx_format.CASES``: one small float32 model each, with inputs on which onnxruntime's
float32 kernels give the reference's bits (its Erf, Sin, Cos and Gelu are within a few ulps of
the reference in general, SPEC-transformers §25.4; ``tests/test_gelu_onnx.py`` checks that)."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_import_helpers import unary

F32 = np.float32
X = np.array([[-0.5, -0.0, 0.125, 0.25], [0.5, 1.25, 1.5, 3.5]], F32)  # bit-exact ones


def gelu_case(mode: str = "none") -> tuple[Any, dict[str, np.ndarray]]:
    """Gelu-20 with ``approximate``."""
    return unary("Gelu", [2, 4], {"approximate": mode}, opset=20), {"x": X}


def _unary_case(op: str, out: Any = F32) -> Any:
    def case() -> tuple[Any, dict[str, np.ndarray]]:
        x = X if op != "IsNaN" else np.array([[np.nan, 1, -np.inf, 0], [-np.nan, 2, 3, np.inf]],
                                             F32)
        return unary(op, [2, 4], out_dtypes=[out]), {"x": x}
    return case


ACTIVATION_CASES: dict[str, tuple[Any, str]] = {
    "Gelu": (gelu_case, "gelu"),
    "Erf": (_unary_case("Erf"), "erf"),
    "Sin": (_unary_case("Sin"), "sin"),
    "Cos": (_unary_case("Cos"), "cos"),
    "IsNaN": (_unary_case("IsNaN", np.bool_), "is_nan"),
}
