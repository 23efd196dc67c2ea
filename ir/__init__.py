"""The typed IR of gradc: types, values, nodes, graphs, operators, printer, parser, verifier."""

from gradc.ir.core import Graph, Node, Value
from gradc.ir.types import DType, TensorType

__all__ = ["DType", "TensorType", "Value", "Node", "Graph"]
