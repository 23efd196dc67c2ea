"""relu_grad reads the relu's result instead of its input, so that the input dies at the relu.

    %r = relu(%x) : f32[4]                      %r = relu(%x) : f32[4]
    %g = relu_grad(%x, %dy) : f32[4]    ->      %g = relu_grad(%r, %dy) : f32[4]

Differentiation writes ``relu_grad(x, dy)`` (the DirectML form: the mask is the forward
input). In a training step that keeps ``x`` -- a convolution's or batch norm's result -- alive
from the forward pass to the backward one only for its signs, while ``r`` is usually kept anyway
(the next layer's filter gradient or a pooling gradient reads it). Reading ``r`` instead lets
``x`` die at the relu, which can then overwrite it in place, and a fused pooling gradient reads
its input and its mask from one tensor.

Exact: relu_grad reads its mask only through ``> 0``, and ``relu(x) > 0`` exactly where
``x > 0`` (relu gives +0 for x <= 0 and for NaN) -- the equivalence ``canonicalize`` uses the
other way (``relu_grad(relu(x), dy) -> relu_grad(x, dy)``), so this pass runs after it.

It applies when every reader of ``x`` is a relu or reads ``x`` only as a relu_grad's mask,
``x`` is computed (a graph input, parameter or output is kept anyway: reading ``r`` would only
keep ``r`` too), and the relu comes before the relu_grad.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradc.ir.core import Graph, Node, Value
from gradc.ir.rebuild import rebuild_graph
from gradc.passes.manager import Pass, PassResult, register_pass


def _masks(graph: Graph) -> dict[Node, Value]:
    """relu_grad node -> the relu result that can be its mask."""
    readers: dict[Value, list[tuple[Node, int]]] = {}
    for n in graph.nodes:
        for i, v in enumerate(n.inputs):
            readers.setdefault(v, []).append((n, i))
    outputs = set(graph.outputs)
    order = {n: i for i, n in enumerate(graph.nodes)}
    found: dict[Node, Value] = {}
    for x, uses in readers.items():
        if x in outputs or x.producer is None:  # kept anyway: an output, an input, a parameter
            continue
        relus = [n for n, _ in uses if n.op == "relu"]
        if not relus or not all(n.op == "relu" or (n.op == "relu_grad" and i == 0)
                                for n, i in uses):
            continue
        first = min(relus, key=order.__getitem__)
        for n, _ in uses:
            if n.op == "relu_grad" and order[n] > order[first]:
                found[n] = first.outputs[0]
    return found


@register_pass
@dataclass
class ReluGradOfOutput(Pass):
    """``relu_grad(x, dy) -> relu_grad(relu(x), dy)`` where that lets ``x`` die at the relu."""

    name = "relu-mask-from-output"

    def run(self, graph: Graph) -> PassResult:
        masks = _masks(graph)
        if not masks:
            return PassResult(graph, False, {"masks-moved": 0})
        repl: dict[Value, Value] = {}
        nodes = []
        for n in graph.nodes:
            r = masks.get(n)
            if r is None:
                nodes.append(n)
                continue
            m = Node(n.op, [r, n.inputs[1]], n.attrs, [v.type for v in n.outputs], name=n.name)
            for old, new in zip(n.outputs, m.outputs):
                new.name = old.name
                repl[old] = new
            nodes.append(m)
        out = rebuild_graph(graph, nodes, lambda v: repl.get(v, v))
        return PassResult(out, True, {"masks-moved": len(masks)})
