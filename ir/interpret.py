"""The reference target: a NumPy interpreter of SPEC.md, the oracle for every other target."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from gradc.errors import GradcError
from gradc.ir.core import Graph, Node
from gradc.ir.ops.registry import get_op


def evaluate_node(node: Node, args: list[np.ndarray],
                  bindings: Mapping[str, int]) -> list[np.ndarray]:
    """Run one node's reference implementation."""
    if node.body is not None:
        feeds = {v.name: a for v, a in zip(node.body.inputs, args)}
        out = run_graph(node.body, feeds, bindings)
        return [out[v.name] for v in node.body.outputs]
    d = get_op(node.op)
    evaluate = getattr(d, "evaluate", None)
    if evaluate is not None:
        return evaluate(node, args, bindings)
    return d.reference(node.attrs, *args)


def run_graph(g: Graph, arrays: Mapping[str, np.ndarray],
              bindings: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Evaluate a graph on already-checked input arrays; outputs keyed by name."""
    env: dict[int, np.ndarray] = {id(v): arrays[v.name] for v in g.inputs}
    for p in g.parameters:  # a parameter's array may be passed like an input, else its value
        value = arrays[p.name] if p.name in arrays else p.value
        if value is None:
            raise GradcError(f"parameter %{p.name}: no value (the graph was parsed without "
                             "one): pass an array under its name")
        env[id(p)] = value
    for n in g.nodes:
        outs = evaluate_node(n, [env[id(v)] for v in n.inputs], bindings)
        for v, a in zip(n.outputs, outs):
            a = np.asarray(a)
            if a.dtype != v.type.dtype.numpy or a.ndim != v.type.rank:
                raise GradcError(f"internal error: {n.op} produced {a.dtype}{list(a.shape)} for "
                                 f"%{v.name}: {v.type}")
            env[id(v)] = a
    return {v.name: env[id(v)] for v in g.outputs}


class ReferenceRunner:
    """Callable that runs a graph with the reference interpreter (parameters: see run_graph)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def __call__(self, arrays: Mapping[str, np.ndarray],
                 bindings: Mapping[str, int]) -> dict[str, np.ndarray]:
        return run_graph(self.graph, arrays, bindings)
