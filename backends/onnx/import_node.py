"""Shared pieces of the ONNX importer: node wrapper, attribute access, converter registry.

A converter turns one ONNX node into gradc values. It is registered per ONNX op type with the
inputs that act as attributes (they must be constants) and an optional static ``check`` that
reports unsupported features without building anything, so that the importer can list every
problem of a model in one ``UnsupportedError`` (SPEC.md §7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, TypeAlias

import numpy as np
from onnx import AttributeProto, NodeProto

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir.core import Graph, Value
from gradc.ir.types import DType
from gradc.backends.onnx.format import tensor_to_array

_ATTR_KINDS: dict[int, str] = {
    AttributeProto.FLOAT: "float", AttributeProto.INT: "int", AttributeProto.STRING: "string",
    AttributeProto.TENSOR: "tensor", AttributeProto.GRAPH: "graph",
    AttributeProto.FLOATS: "floats", AttributeProto.INTS: "ints",
    AttributeProto.STRINGS: "strings", AttributeProto.SPARSE_TENSOR: "sparse tensor",
}


def attr_kind_name(kind: int) -> str:
    """The name of an ONNX attribute kind in messages ("int", "floats", ...)."""
    return _ATTR_KINDS.get(int(kind), f"attribute type {kind}")


Produced: TypeAlias = "Value | np.ndarray | None"
"""What a converter gives for one ONNX output: a gradc value, a constant array, or nothing."""


class OnnxNode:
    """An ONNX node with checked access to its inputs, outputs and attributes."""

    def __init__(self, proto: NodeProto, index: int) -> None:
        self.proto = proto
        self.index = index
        self.op = proto.op_type
        self.domain = "" if proto.domain in ("", "ai.onnx") else proto.domain
        self.name = proto.name
        self.inputs = tuple(proto.input)
        self.outputs = tuple(proto.output)
        self.attrs = {a.name: a for a in proto.attribute}
        first = next((o for o in self.outputs if o), "")
        self.where = (f"{self.op} {self.name!r}" if self.name
                      else f"{self.op} node #{index} (output {first!r})")

    def input(self, i: int) -> str:
        """The name of input ``i``, or "" when the optional input is absent."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def output(self, i: int) -> str:
        """The name of output ``i``, or "" when the optional output is absent."""
        return self.outputs[i] if i < len(self.outputs) else ""

    def has(self, name: str) -> bool:
        """True if the attribute is given."""
        return name in self.attrs

    def _attr(self, name: str, kind: int) -> AttributeProto | None:
        a = self.attrs.get(name)
        if a is None:
            return None
        if a.type != kind:
            raise VerifyError(f"attribute {name}: expected {attr_kind_name(kind)}, got "
                              f"{attr_kind_name(a.type)}")
        return a

    def get_int(self, name: str, default: int) -> int:
        """An int attribute."""
        a = self._attr(name, AttributeProto.INT)
        return default if a is None else int(a.i)

    def get_float(self, name: str, default: float | None) -> float | None:
        """A float attribute."""
        a = self._attr(name, AttributeProto.FLOAT)
        return default if a is None else float(a.f)

    def get_str(self, name: str, default: str) -> str:
        """A string attribute (UTF-8)."""
        a = self._attr(name, AttributeProto.STRING)
        return default if a is None else a.s.decode("utf-8", "replace")

    def get_ints(self, name: str, default: Sequence[int] | None) -> list[int] | None:
        """An ints attribute."""
        a = self._attr(name, AttributeProto.INTS)
        if a is None:
            return None if default is None else list(default)
        return [int(v) for v in a.ints]

    def get_floats(self, name: str) -> list[float] | None:
        """A floats attribute."""
        a = self._attr(name, AttributeProto.FLOATS)
        return None if a is None else [float(v) for v in a.floats]

    def get_tensor(self, name: str) -> np.ndarray | None:
        """A tensor attribute as a NumPy array."""
        a = self._attr(name, AttributeProto.TENSOR)
        return None if a is None else tensor_to_array(a.t, f"attribute {name}")


class Context(Protocol):
    """What converters need from the importer."""

    opset: int
    graph: Graph

    def is_const(self, name: str) -> bool:
        """True if the ONNX value is an initializer or the output of a Constant node."""

    def const(self, node: OnnxNode, index: int, field: str) -> np.ndarray | None:
        """The array of a constant input (None when absent); UnsupportedError if not constant."""

    def value(self, node: OnnxNode, index: int, field: str) -> Value:
        """The gradc value of a required input (constants become ``constant`` nodes, float
        initializers parameters)."""

    def is_fixed(self, name: str) -> bool:
        """True if the value is a constant that is no parameter (a node of it may fold)."""

    def dims(self, node: OnnxNode, index: int, field: str) -> list[int | str] | None:
        """A constant shape input; its entries are ints and symbolic dims (None when absent)."""

    def shape_source(self, dims: tuple) -> Value | None:
        """A value of the graph with exactly these dims that a ``Shape`` node read, if any."""

    def symbol_carrier(self, symbol: str) -> tuple[Value, int] | None:
        """A value of the graph with the symbolic dim ``symbol``, and its axis, if any."""


@dataclass(frozen=True)
class Converter:
    """How one ONNX op type is imported."""

    build: Callable[[OnnxNode, Context], Sequence[Produced]]
    const_inputs: tuple[tuple[int, str], ...] = ()
    check: Callable[[OnnxNode, Context], list[str]] | None = None
    fold: Callable[[OnnxNode, Context], list[np.ndarray] | None] | None = None


CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str, const_inputs: tuple[tuple[int, str], ...] = (),
              check: Callable[[OnnxNode, Context], list[str]] | None = None,
              fold: Callable[[OnnxNode, Context], list[np.ndarray] | None] | None = None
              ) -> Callable[[Callable], Callable]:
    """Decorator: register a build function for the given ONNX op types."""
    def wrap(fn: Callable) -> Callable:
        for op in op_types:
            CONVERTERS[op] = Converter(fn, const_inputs, check, fold)
        return fn
    return wrap


def require_dtype(v: Value, allowed: Sequence[DType], field: str, gradc_op: str) -> DType:
    """UnsupportedError unless the value's dtype is one the gradc op accepts (SPEC.md §1.2)."""
    d = v.type.dtype
    if d not in allowed:
        raise UnsupportedError(f"input {field}: dtype {d} is not supported (gradc {gradc_op} "
                               f"takes {', '.join(a.value for a in allowed)})")
    return d


def require_rank(v: Value, lo: int, hi: int, field: str, gradc_op: str) -> int:
    """UnsupportedError unless the value's rank is in the gradc op's range."""
    r = v.type.rank
    if not lo <= r <= hi:
        raise UnsupportedError(f"input {field}: rank {r} is not supported (gradc {gradc_op} "
                               f"takes rank {lo}..{hi})")
    return r


def int_list(a: np.ndarray, field: str) -> list[int]:
    """A constant integer input as a list of ints (rank 0 or 1)."""
    if a.dtype == object:  # a folder met a symbolic dim (ctx.const refuses them before this)
        raise TypeError(f"input {field} holds a symbolic dim")
    if a.dtype.kind not in "iu" or a.ndim > 1:
        raise VerifyError(f"input {field}: expected a 1-D integer tensor, got "
                          f"{a.dtype}{list(a.shape)}")
    return [int(v) for v in a.reshape(-1)]


def float_list(a: np.ndarray, field: str) -> list[float]:
    """A constant float input as a list of Python floats (rank 0 or 1)."""
    if a.dtype.kind != "f" or a.ndim > 1:
        raise VerifyError(f"input {field}: expected a 1-D float tensor, got "
                          f"{a.dtype}{list(a.shape)}")
    return [float(v) for v in a.reshape(-1)]


def normalize_axes(axes: Sequence[int], rank: int, field: str) -> list[int]:
    """Axes with negatives counted from the end; VerifyError for out-of-range or repeated ones."""
    out: list[int] = []
    for i, a in enumerate(axes):
        if not -rank <= a < rank:
            raise VerifyError(f"{field}[{i}]: expected an axis in {-rank}..{rank - 1}, got {a}")
        if a % rank in out:
            raise VerifyError(f"{field}[{i}]: expected an axis not listed twice, got {a}")
        out.append(a % rank)
    return out


__all__ = ["OnnxNode", "Context", "attr_kind_name", "Converter", "CONVERTERS", "converter",
           "require_dtype", "require_rank", "int_list", "float_list", "normalize_axes", "Produced"]
