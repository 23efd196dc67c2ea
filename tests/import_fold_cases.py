"""ONNX models for the converters of ``import_fold`` and Reciprocal (the importer's CASES entries
in tests/test_onnx_format.py use them): shape arithmetic that folds into a Reshape, and the two
that build gradc ops (Trilu of a computed value, Reciprocal)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as oh

from onnx_import_helpers import c64, distinct, make

F32 = np.float32
Case = tuple[Any, dict[str, np.ndarray]]


def _reshape_by(nodes: list, x_shape: list, f_size: int, inits: dict | None = None) -> Case:
    """Reshape(f, <the nodes' output "shape">), the nodes reading Shape(x) as "s"."""
    nodes = [oh.make_node("Shape", ["x"], ["s"])] + nodes + [
        oh.make_node("Reshape", ["f", "shape"], ["y"])]
    m = make(nodes, {"x": (F32, x_shape), "f": (F32, [f_size])}, {"y": F32}, inits)
    return m, {"x": distinct(tuple(x_shape)), "f": distinct((f_size,))}


def cast_like_case() -> Case:
    """Reshape(f, CastLike(Cast(Shape(x), float), int64 scalar)): [2, 6]."""
    return _reshape_by([oh.make_node("Cast", ["s"], ["sf"], to=TP.FLOAT),
                        oh.make_node("CastLike", ["sf", "like"], ["shape"])],
                       [2, 6], 12, {"like": c64(0)})


def mod_case() -> Case:
    """Reshape(f, Mod(Shape(x), [5, 4]) + 1): [3, 3] for an x of shape (2, 6)."""
    return _reshape_by([oh.make_node("Mod", ["s", "m"], ["r"]),
                        oh.make_node("Add", ["r", "one"], ["shape"])],
                       [2, 6], 9, {"m": c64(5, 4), "one": c64(1)})


def reduce_prod_case() -> Case:
    """Reshape(f, Unsqueeze(ReduceProd(Shape(x), keepdims=0))): the flat element count."""
    return _reshape_by([oh.make_node("ReduceProd", ["s"], ["p"], keepdims=0),
                        oh.make_node("Unsqueeze", ["p", "ax"], ["shape"])],
                       [2, 3, 2], 12, {"ax": c64(0)})


def trilu_case() -> Case:
    """Trilu(x, k=1, upper=0) of a graph input: where(constant mask, x, 0)."""
    m = make([oh.make_node("Trilu", ["x", "k"], ["y"], upper=0)], {"x": (F32, [2, 3, 4])},
             {"y": F32}, {"k": np.array(1, np.int64)})
    return m, {"x": distinct((2, 3, 4))}


def reciprocal_case() -> Case:
    m = make([oh.make_node("Reciprocal", ["x"], ["y"])], {"x": (F32, [2, 3])}, {"y": F32})
    return m, {"x": distinct((2, 3))}


FOLD_CASES: dict[str, tuple[Any, str]] = {
    "CastLike": (cast_like_case, "reshape"),
    "Mod": (mod_case, "reshape"),
    "ReduceProd": (reduce_prod_case, "reshape"),
    "Trilu": (trilu_case, "where"),
    "Reciprocal": (reciprocal_case, "div"),
}
