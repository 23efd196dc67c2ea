"""Import cases of the movement converters (Concat, Split, Transpose, Pad, OneHot, Flatten,
Squeeze, Unsqueeze) for ``test_onnx_format.CASES``, and the models the movement tests reuse."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper as oh

from onnx_import_helpers import c64, distinct, make, unary

F32 = np.float32


def concat_case() -> tuple[Any, dict[str, np.ndarray]]:
    """Concat of two inputs along axis 1."""
    m = make([oh.make_node("Concat", ["a", "b"], ["y"], axis=-1)],
             {"a": (F32, [2, 3]), "b": (F32, [2, 2])}, {"y": F32})
    return m, {"a": distinct((2, 3)), "b": distinct((2, 2))}


def split_case(opset: int = 18, sizes: list[int] | None = None, outputs: int = 2,
               **attrs: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """Split of a (2, 5) input along axis 1: sizes as an input (13+) or attribute (< 13)."""
    outs = ["y"] + [f"y{i}" for i in range(1, outputs)]
    inits, extra = {}, []
    if sizes is not None and opset >= 13:
        inits, extra = {"s": c64(*sizes)}, ["s"]
    elif sizes is not None:
        attrs["split"] = sizes
    node = oh.make_node("Split", ["x", *extra], outs, axis=1, **attrs)
    m = make([node], {"x": (F32, [2, 5])}, {o: F32 for o in outs}, inits, opset)
    return m, {"x": distinct((2, 5))}


def pad_case(opset: int = 18, pads: tuple[int, ...] = (1, 0, 2, -1, 2, 1), value: float = 1.5,
             mode: str = "constant", axes: tuple[int, ...] | None = None
             ) -> tuple[Any, dict[str, np.ndarray]]:
    """Pad of a (2, 3, 4) input: pads and constant_value as inputs (11+) or attributes (2)."""
    if opset < 11:
        node = oh.make_node("Pad", ["x"], ["y"], pads=list(pads), value=value, mode=mode)
        return make([node], {"x": (F32, [2, 3, 4])}, {"y": F32}, None, opset), \
            {"x": distinct((2, 3, 4))}
    inits: dict[str, Any] = {"p": c64(*pads), "v": F32(value)}
    names = ["x", "p", "v"]
    if axes is not None:
        inits["a"] = c64(*axes)
        names.append("a")
    node = oh.make_node("Pad", names, ["y"], mode=mode)
    return make([node], {"x": (F32, [2, 3, 4])}, {"y": F32}, inits, opset), \
        {"x": distinct((2, 3, 4))}


def one_hot_case(axis: int = -1, opset: int = 11, dtype: Any = np.int64, depth: Any = np.int64
                 ) -> tuple[Any, dict[str, np.ndarray]]:
    """OneHot of (2, 3) indices (negative and out of range included), depth 4."""
    node = oh.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)
    m = make([node], {"i": (dtype, [2, 3])}, {"y": F32},
             {"d": np.array(4, depth), "v": np.array([-0.5, 2.0], F32)}, opset)
    return m, {"i": np.array([[0, 3, -1], [9, -4, 2]], dtype)}


MOVEMENT_CASES: dict[str, tuple[Any, str]] = {
    "Concat": (concat_case, "join"),
    "Split": (lambda: split_case(sizes=[2, 3]), "split"),
    "Transpose": (lambda: (unary("Transpose", [2, 3, 4], {"perm": [2, 0, 1]}),
                           {"x": distinct((2, 3, 4))}), "transpose"),
    "Pad": (pad_case, "pad"),
    "OneHot": (one_hot_case, "one_hot"),
    "Flatten": (lambda: (unary("Flatten", [2, 3, 4], {"axis": 2}), {"x": distinct((2, 3, 4))}),
                "reshape"),
    "Squeeze": (lambda: (unary("Squeeze", [2, 1, 3], extra=("a",), inits={"a": c64(1)}),
                         {"x": distinct((2, 1, 3))}), "reshape"),
    "Unsqueeze": (lambda: (unary("Unsqueeze", [2, 3], extra=("a",), inits={"a": c64(0, -1)}),
                           {"x": distinct((2, 3))}), "reshape"),
}
