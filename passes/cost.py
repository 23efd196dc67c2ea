"""A simple memory-traffic cost model: bytes read plus bytes written by each node.

Every node reads each distinct operand once and writes each result once; a fused node counts
only its external operands and results (its body stays in registers), which is exactly what the
same rule gives when applied to the fused node itself. ``constant`` nodes cost nothing (their
data is part of the program; the nodes that read them pay for the reads), and ``expand`` does not
read its ``like`` operand (only its shape). Symbolic dims count as ``symbols[name]`` when given,
else as ``default_symbol``.
"""

from __future__ import annotations

from typing import Mapping

from gradc.ir.core import Graph, Node, Value

NOT_READ = {"expand": (1,)}  # operand positions whose values are never read


def value_bytes(v: Value, symbols: Mapping[str, int] | None = None,
                default_symbol: int = 1) -> int:
    """The size of a value in bytes (symbolic dims as ``symbols``, else ``default_symbol``)."""
    n = v.type.dtype.numpy.itemsize
    for d in v.type.shape:
        n *= (symbols or {}).get(d, default_symbol) if isinstance(d, str) else d
    return n


def node_bytes(node: Node, symbols: Mapping[str, int] | None = None,
               default_symbol: int = 1) -> int:
    """Bytes a node reads (distinct operands) plus bytes it writes."""
    if node.op == "constant":
        return 0
    skip = NOT_READ.get(node.op, ())
    read = {v for i, v in enumerate(node.inputs) if i not in skip}
    return sum(value_bytes(v, symbols, default_symbol) for v in read) + sum(
        value_bytes(v, symbols, default_symbol) for v in node.outputs)


def graph_bytes(graph: Graph, symbols: Mapping[str, int] | None = None,
                default_symbol: int = 1) -> int:
    """The estimated memory traffic of running the graph: the sum of ``node_bytes``."""
    return sum(node_bytes(n, symbols, default_symbol) for n in graph.nodes)
