"""Common-subexpression elimination: one node per (op, operands, attributes, body).

    %a = relu_grad(%x, %dy) : f32[4]          %a = relu_grad(%x, %dy) : f32[4]
    %b = relu_grad(%x, %dy) : f32[4]    ->    %c = add(%a, %a) : f32[4]
    %c = add(%a, %b) : f32[4]

Attributes are compared by their exact printed form, so ``-0.0`` and ``0.0`` bounds differ
(``clip`` can return the bound itself) and array constants compare by value and dtype. Every op
is pure, so any two equal nodes compute the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradc.ir.core import Graph, Node, Value
from gradc.ir.printer import fmt_attr, print_graph
from gradc.passes.manager import Pass, PassResult, register_pass
from gradc.ir.rebuild import rebuild_graph


def node_key(n: Node, operands: tuple[Value, ...]) -> tuple[Any, ...]:
    """The identity of a computation: op, operand values, exact attributes, body text."""
    attrs = tuple((k, fmt_attr(v)) for k, v in n.attrs.items())
    body = print_graph(n.body) if n.body is not None else None
    return (n.op, tuple(id(v) for v in operands), attrs, body)


@register_pass
@dataclass
class CommonSubexpressionElimination(Pass):
    """Replace a node by an earlier node that computes the same thing."""

    name = "cse"

    def run(self, graph: Graph) -> PassResult:
        repl: dict[Value, Value] = {}
        seen: dict[tuple[Any, ...], Node] = {}
        keep: list[Node] = []
        for n in graph.nodes:
            operands = tuple(repl.get(v, v) for v in n.inputs)
            key = node_key(n, operands)
            first = seen.get(key)
            if first is None:
                seen[key] = n
                keep.append(n)
            else:
                repl.update(zip(n.outputs, first.outputs))
        if not repl:
            return PassResult(graph, False, {"nodes-removed": 0})
        removed = len(graph.nodes) - len(keep)
        return PassResult(rebuild_graph(graph, keep, lambda v: repl.get(v, v)), True,
                          {"nodes-removed": removed})
