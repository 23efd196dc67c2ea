"""ONNX models for the static-shape converters (Shape, Size, Gather, Range, Floor, Ceil,
ConstantOfShape, Expand): the importer's CASES entries (tests/test_onnx_format.py) use them.
Gather's entry is in normalization_onnx_cases.py (it imports as gather); ``gather_case``, a
Gather folded on a Shape, is checked in test_gather.py."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as oh

from onnx_import_helpers import c64, distinct, make

F32 = np.float32
Case = tuple[Any, dict[str, np.ndarray]]


def shape_case() -> Case:
    """Reshape(flat, Shape(x)): the shape of a value as a constant."""
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Reshape", ["f", "s"], ["y"])]
    m = make(nodes, {"x": (F32, [2, 3]), "f": (F32, [6])}, {"y": F32})
    return m, {"x": distinct((2, 3)), "f": distinct((6,))}


def size_case() -> Case:
    """Size(x) as an output: a constant."""
    m = make([oh.make_node("Size", ["x"], ["y"])], {"x": (F32, [2, 3])}, {"y": np.int64})
    return m, {"x": distinct((2, 3))}


def gather_case() -> Case:
    """Reshape(x, Gather(Shape(x), [1, 0])): a permuted static shape."""
    nodes = [oh.make_node("Shape", ["x"], ["s"]),
             oh.make_node("Gather", ["s", "i"], ["t"], axis=0),
             oh.make_node("Reshape", ["x", "t"], ["y"])]
    m = make(nodes, {"x": (F32, [2, 3])}, {"y": F32}, {"i": c64(1, 0)})
    return m, {"x": distinct((2, 3))}


def range_case() -> Case:
    """Reshape(x, Range(...)) of constants: [2, 3] from Range(2, 4, 1)."""
    nodes = [oh.make_node("Range", ["a", "b", "d"], ["r"]),
             oh.make_node("Reshape", ["x", "r"], ["y"])]
    m = make(nodes, {"x": (F32, [6])}, {"y": F32},
             {"a": np.array(2, np.int64), "b": np.array(4, np.int64), "d": np.array(1, np.int64)})
    return m, {"x": distinct((6,))}


def rounding_case(op: str) -> Any:
    """``op`` (Floor, Ceil) of a float derived from a shape, e.g. a scaled size."""
    def case() -> Case:
        nodes = [oh.make_node("Shape", ["x"], ["s"]),
                 oh.make_node("Cast", ["s"], ["sf"], to=TP.FLOAT),
                 oh.make_node("Mul", ["sf", "k"], ["m"]),
                 oh.make_node(op, ["m"], ["r"]),
                 oh.make_node("Cast", ["r"], ["ri"], to=TP.INT64),
                 oh.make_node("Reshape", ["f", "ri"], ["y"])]
        m = make(nodes, {"x": (F32, [2, 4]), "f": (F32, [3 * 6 if op == "Ceil" else 2 * 6])},
                 {"y": F32}, {"k": np.array([1.25, 1.5], F32)})
        n = 18 if op == "Ceil" else 12
        return m, {"x": distinct((2, 4)), "f": distinct((n,))}
    return case


def constant_of_shape_case() -> Case:
    """x + ConstantOfShape(Shape(x), 2.5): an ``expand`` of the value to x's shape."""
    value = oh.make_tensor("v", TP.FLOAT, [1], [2.5])
    nodes = [oh.make_node("Shape", ["x"], ["s"]),
             oh.make_node("ConstantOfShape", ["s"], ["c"], value=value),
             oh.make_node("Add", ["x", "c"], ["y"])]
    m = make(nodes, {"x": (F32, ["N", 40, 3])}, {"y": F32})
    return m, {"x": distinct((2, 40, 3))}


def expand_case() -> Case:
    """Expand(x, [2, 3, 4]) of a (3, 1) input (two-way broadcast)."""
    m = make([oh.make_node("Expand", ["x", "s"], ["y"])], {"x": (F32, [3, 1])}, {"y": F32},
             {"s": c64(2, 1, 4)})
    return m, {"x": distinct((3, 1))}


SHAPE_CASES: dict[str, tuple[Any, str]] = {
    "Shape": (shape_case, "reshape"),
    "Size": (size_case, "constant"),
    "Range": (range_case, "reshape"),
    "Floor": (rounding_case("Floor"), "reshape"),
    "Ceil": (rounding_case("Ceil"), "reshape"),
    "ConstantOfShape": (constant_of_shape_case, "expand"),
    "Expand": (expand_case, "expand"),
}
